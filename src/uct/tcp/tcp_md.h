/**
 * tcp component and memory domain: device discovery and the key table that the target
 * side checks every emulated remote access against. The LOOM_TCP_* configuration is in
 * tcp_config.h.
 */
#pragma once

#include "uct/api/uct.h"
#include "uct/tcp/tcp_config.h"
#include "uct/tcp/tcp_wire.h"

#include <netinet/in.h>

#include <cstdint>
#include <random>
#include <string>
#include <unordered_set>
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

/** One registered region in the target's key table. */
struct Region {
    std::uint64_t base = 0;
    std::uint64_t length = 0;
    std::uint64_t cookie = 0;  ///< 0 while the slot is free
    unsigned access = 0;
};

/** A memory handle handed out by TcpMd::mem_reg. */
struct TcpMemH {
    std::uint32_t key_id;
    std::uint64_t cookie;
};

class TcpMd final : public Md {
public:
    explicit TcpMd(const Component& component);
    ~TcpMd() override;

    Status query(MdAttr& attr) const override;
    std::vector<TlResource> query_tl_resources() const override;
    Result<std::unique_ptr<Iface>> iface_open(const TlResource& resource, Worker* worker,
                                              const IfaceParams& params) override;
    Result<MemH> mem_reg(void* address, std::size_t length, unsigned access) override;
    Status mem_dereg(MemH memh) override;
    Status mkey_pack(MemH memh, std::uint8_t* out) const override;

    /**
     * The region key @p key_id with @p cookie names, when it grants @p access over
     * [addr, addr + length); otherwise nullptr and @p why says what failed. Used by the
     * target for every remote access (md calls must be serialized with the progress of
     * this md's ifaces, like every uct object of one worker).
     */
    const Region* check_access(std::uint32_t key_id, std::uint64_t cookie, std::uint64_t addr,
                               std::uint64_t length, unsigned access, const char** why) const noexcept {
        if (LOOM_UNLIKELY(key_id >= regions_.size())) {
            *why = "unknown key id";
            return nullptr;
        }
        const Region& r = regions_[key_id];
        if (LOOM_UNLIKELY(r.cookie == 0 || r.cookie != cookie)) {
            *why = "key cookie mismatch (forged or released key)";
            return nullptr;
        }
        if (LOOM_UNLIKELY(addr < r.base || length > r.length || addr - r.base > r.length - length)) {
            *why = "address range outside the registered region";
            return nullptr;
        }
        if (LOOM_UNLIKELY((r.access & access) != access)) {
            *why = "access right not granted";
            return nullptr;
        }
        return &r;
    }

private:
    std::vector<Region> regions_;
    std::vector<std::uint32_t> free_slots_;
    std::unordered_set<TcpMemH*> handles_;
    mutable std::mt19937_64 rng_;
};

}  // namespace loom::uct::tcp
