/**
 * tcp component and memory domain: device discovery and the key table (uct/base/key_table.h)
 * that the target side checks every emulated remote access against. The LOOM_TCP_* configuration is in
 * tcp_config.h.
 */
#pragma once

#include "uct/api/uct.h"
#include "uct/base/key_table.h"
#include "uct/tcp/tcp_config.h"
#include "uct/tcp/tcp_wire.h"

#include <netinet/in.h>

#include <cstdint>
#include <string>
#include <vector>

namespace loom::uct::tcp {

/** An up interface with an IPv4 address. */
struct NetDevice {
    std::string name;
    in_addr addr;
    in_addr netmask;
    bool loopback;
};

/** Interfaces that are up and have an IPv4 address, in the order the system lists them. */
std::vector<NetDevice> list_devices();

class TcpMd final : public Md {
public:
    explicit TcpMd(const Component& component);

    Status query(MdAttr& attr) const override;
    std::vector<TlResource> query_tl_resources() const override;
    Result<std::unique_ptr<Iface>> iface_open(const TlResource& resource, Worker* worker,
                                              const IfaceParams& params) override;
    Result<MemH> mem_reg(void* address, std::size_t length, unsigned access) override;
    Status mem_dereg(MemH memh) override;
    Status mkey_pack(MemH memh, std::uint8_t* out) const override;

    /** The target's key table: every emulated remote access is checked against it (tcp_rx.cc). */
    const KeyTable& keys() const { return keys_; }

private:
    KeyTable keys_;
};

}  // namespace loom::uct::tcp
