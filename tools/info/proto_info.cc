/**
 * loom_info -e: the protocols an endpoint would use, for a kind of peer, without a peer.
 * Two workers of one context stand in for the two sides: the endpoint goes to the worker
 * itself (self), to the other worker (a process on this host: every transport), or to
 * the other worker seen through its network transports only (a process on another host).
 * The lanes and thresholds are those a real endpoint gets, from the same code.
 */
#include "info.h"

#include "ucp/core/worker.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <cstdio>
#include <string>

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

namespace loom::info {

namespace {

/** Whether network device @p name is a loopback device (its flags say IFF_LOOPBACK). */
bool is_loopback(const std::string& name) {
    if (name.size() >= IFNAMSIZ) return false;
    int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    ifreq req{};
    std::memcpy(req.ifr_name, name.c_str(), name.size() + 1);
    const bool loopback = ::ioctl(fd, SIOCGIFFLAGS, &req) == 0 && (req.ifr_flags & IFF_LOOPBACK);
    ::close(fd);
    return loopback;
}

}  // namespace

int print_endpoint_config(const std::string& kind) {
    const std::vector<std::string> kinds =
        kind.empty() ? std::vector<std::string>{"self", "shm", "net"} : std::vector<std::string>{kind};
    for (const std::string& k : kinds) {
        if (k != "self" && k != "shm" && k != "net") {
            std::fprintf(stderr, "loom_info: -D takes self, shm or net, not '%s'\n", k.c_str());
            return 2;
        }
    }
    ucp::ContextParams cp;
    cp.features = ucp::kFeatureTag;
    auto ctx = ucp::Context::create(cp);
    if (!ctx) {
        std::fprintf(stderr, "loom_info: cannot create a context: %s (see LOOM_TLS, LOOM_NET_DEVICES)\n",
                     std::string(to_string(ctx.status())).c_str());
        return 1;
    }
    auto local = ucp::Worker::create(**ctx, {});
    auto other = ucp::Worker::create(**ctx, {});
    if (!local || !other) {
        std::fprintf(stderr, "loom_info: cannot create a worker\n");
        return 1;
    }
    int rc = 0;
    bool first = true;
    for (const std::string& k : kinds) {
        if (!first) std::printf("\n");
        first = false;
        const char* what = k == "self" ? "the worker itself (self)"
                           : k == "shm" ? "a process on this host (shm)"
                                        : "a process on another host (net)";
        std::printf("# endpoint to %s, LOOM_TLS=%s\n", what,
                    std::getenv("LOOM_TLS") ? std::getenv("LOOM_TLS") : "(default: all)");
        std::vector<std::uint8_t> packed = (k == "self" ? *local : *other)->pack_address();
        auto address = ucp::Worker::unpack_address(packed.data(), packed.size());
        if (!address) {
            rc = 1;
            continue;
        }
        if (k == "net") {
            // What a peer on another host offers that we could reach: no same-host
            // transports, and no address on a loopback device (another host's lo is its own).
            const ucp::Worker& peer = **other;
            std::erase_if(address->ifaces, [&](const ucp::RemoteIface& ri) {
                return (ri.cap_flags & (uct::kCapIntraNode | uct::kCapSelfOnly)) != 0 ||
                       (ri.index < peer.ifaces.size() && is_loopback(peer.ifaces[ri.index].rsc->tl.dev_name));
            });
        }
        std::string explained;
        auto ep = (*local)->ep_create(*address, true, 0, &explained);
        if (!ep) {
            std::printf("#   no transport reaches such a peer (%s; the log line above says why)\n",
                        std::string(to_string(ep.status())).c_str());
            continue;
        }
        std::fputs((*local)->describe_protocols(**ep, "#   ").c_str(), stdout);
        std::istringstream lines(explained);
        for (std::string line; std::getline(lines, line);) std::printf("#   %s\n", line.c_str());
        (*local)->ep_destroy(*ep, Status::canceled);
    }
    return rc;
}

}  // namespace loom::info
