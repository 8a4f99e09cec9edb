/**
 * The self memory domain. The memory is already reachable (same address space), but a
 * key still grants access only to the region it was made for: the md keeps a key table
 * (uct/base/key_table.h) and every put, get and atomic checks the target md's table, so
 * a forged, stale or out-of-bounds key is refused as on every other transport. Its
 * component ("self") is defined in self_md.cc.
 */
#pragma once

#include "uct/api/uct.h"
#include "uct/base/key_table.h"

#include <memory>
#include <vector>

namespace loom::uct::self {

/** See the file comment. */
class SelfMd final : public Md {
public:
    explicit SelfMd(const Component& component);

    Status query(MdAttr& attr) const override;
    std::vector<TlResource> query_tl_resources() const override;
    /** Opens the one self iface resource; no_device for anything else. */
    Result<std::unique_ptr<Iface>> iface_open(const TlResource& resource, Worker* worker,
                                              const IfaceParams& params) override;
    /** Records the region in the key table (no pinning: the memory is already reachable). */
    Result<MemH> mem_reg(void* address, std::size_t length, unsigned access) override;
    Status mem_dereg(MemH memh) override;
    /** Packs the region's key (a PackedRegionKey). */
    Status mkey_pack(MemH memh, std::uint8_t* out) const override;
    /** The table every remote access to this md's memory is checked against (self_ep.cc). */
    const KeyTable& keys() const { return keys_; }

private:
    KeyTable keys_;
};

}  // namespace loom::uct::self
