/**
 * A host gone silent, for tests of what notices it: while a SilentDevice lives, every
 * packet arriving at the network device of an RDMA device is dropped (nft, netdev ingress
 * hook), as with a pulled cable: no reset, no disconnect. Needs root and nft (the RDMA
 * test VM has both); why_not() says what is missing.
 */
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace loom::test {

class SilentDevice {
public:
    /** Silences the network device under RDMA device @p ibdev (port 1). */
    explicit SilentDevice(const std::string& ibdev) {
        std::ifstream f("/sys/class/infiniband/" + ibdev + "/ports/1/gid_attrs/ndevs/0");
        std::string netdev;
        std::getline(f, netdev);
        if (netdev.empty()) {
            why_not_ = "no network device under /sys/class/infiniband/" + ibdev;
        } else if (::geteuid() != 0 || std::system("command -v nft >/dev/null 2>&1") != 0) {
            why_not_ = "dropping packets needs root and nft (nftables)";
        } else {
            const std::string cmd =
                "nft add table netdev loom_silent && nft 'add chain netdev loom_silent in { type "
                "filter hook ingress device " +
                netdev + " priority 0; policy drop; }'";
            if (std::system(cmd.c_str()) == 0) {
                active_ = true;
            } else {
                why_not_ = "failed: " + cmd;
            }
        }
    }
    /** Lets packets through again. */
    ~SilentDevice() {
        if (active_) (void)std::system("nft delete table netdev loom_silent");
    }
    SilentDevice(const SilentDevice&) = delete;
    SilentDevice& operator=(const SilentDevice&) = delete;
    /** Empty when the device is silenced, else why not. */
    const std::string& why_not() const { return why_not_; }

private:
    bool active_ = false;
    std::string why_not_;
};

}  // namespace loom::test
