/**
 * The self memory domain: nothing to register (same address space), keys are empty.
 * Its component ("self") is defined in self_md.cc.
 */
#pragma once

#include "uct/api/uct.h"

#include <memory>
#include <vector>

namespace loom::uct::self {

/** See the file comment. */
class SelfMd final : public Md {
public:
    explicit SelfMd(const Component& component) : Md(component, "self") {}

    Status query(MdAttr& attr) const override;
    std::vector<TlResource> query_tl_resources() const override;
    /** Opens the one self iface resource; no_device for anything else. */
    Result<std::unique_ptr<Iface>> iface_open(const TlResource& resource, Worker* worker,
                                              const IfaceParams& params) override;
    /** Any non-null handle: the memory is already reachable. */
    Result<MemH> mem_reg(void* address, std::size_t length, unsigned access) override;
    Status mem_dereg(MemH memh) override;
    /** Keys are empty (rkey_packed_size 0). */
    Status mkey_pack(MemH memh, std::uint8_t* out) const override;
};

}  // namespace loom::uct::self
