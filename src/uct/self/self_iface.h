/**
 * The self iface: loopback inside one process. The device address identifies the
 * process, the iface address the target iface, so a peer in another process is
 * unreachable; ifaces register by id, so an endpoint resolves its target safely.
 */
#pragma once

#include "uct/api/uct.h"

#include <cstdint>
#include <string>

namespace loom::uct::self {

/** See the file comment. */
class SelfIface final : public Iface {
public:
    /** Registers the iface under a fresh id (its iface address). */
    SelfIface(Md* md, Worker* worker, const TlResource& resource);
    ~SelfIface() override;

    Status query(IfaceAttr& attr) const override;
    Status get_device_address(std::uint8_t* out) const override;
    Status get_address(std::uint8_t* out) const override;
    bool is_reachable(const std::uint8_t* dev_addr, std::size_t dev_addr_len, const std::uint8_t* iface_addr,
                      std::size_t iface_addr_len, std::string* reason) const override;
    Result<Ep*> ep_create(const EpParams& params) override;
    void ep_destroy(Ep* ep) override;
    /** Every operation is delivered inside its call: nothing ever waits for progress. */
    Status event_arm() override { return Status::ok; }

private:
    std::uint64_t id_;
};

}  // namespace loom::uct::self
