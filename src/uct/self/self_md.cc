/**
 * self component and memory domain, and the transport's log component.
 */
#include "uct/self/self_md.h"

#include "uct/self/self_iface.h"
#include "uct/self/self_log.h"

namespace loom::uct::self {

log::Component g_log("self");

SelfMd::SelfMd(const Component& component) : Md(component, "self"), keys_(g_log) {}

Status SelfMd::query(MdAttr& attr) const {
    attr = {};
    attr.flags = MdAttr::kReg | MdAttr::kNeedRkey;
    attr.max_reg = SIZE_MAX;
    attr.rkey_packed_size = sizeof(PackedRegionKey);
    attr.reg_cost_overhead = 50e-9;  // a table insert
    attr.component_name = "self";
    return Status::ok;
}

std::vector<TlResource> SelfMd::query_tl_resources() const {
    return {{"self", "memory", DeviceType::self}};
}

Result<std::unique_ptr<Iface>> SelfMd::iface_open(const TlResource& resource, Worker* worker,
                                                  const IfaceParams&) {
    if (resource.tl_name != "self") return Status::no_device;
    return std::unique_ptr<Iface>(new SelfIface(this, worker, resource));
}

Result<MemH> SelfMd::mem_reg(void* address, std::size_t length, unsigned access) {
    Result<KeyHandle*> handle = keys_.add(address, length, access);
    if (!handle) return handle.status();
    return static_cast<MemH>(*handle);
}

Status SelfMd::mem_dereg(MemH memh) {
    return keys_.remove(static_cast<KeyHandle*>(memh));
}

Status SelfMd::mkey_pack(MemH memh, std::uint8_t* out) const {
    return keys_.pack(static_cast<const KeyHandle*>(memh), out);
}

namespace {

class SelfComponent final : public Component {
public:
    SelfComponent() : Component("self") {}

    std::vector<std::string> query_md_resources() const override { return {"self"}; }

    Result<std::unique_ptr<Md>> md_open(std::string_view md_name) const override {
        if (md_name != "self") return Status::no_device;
        return std::unique_ptr<Md>(new SelfMd(*this));
    }

    Result<Rkey> rkey_unpack(const std::uint8_t* packed, std::size_t length) const override {
        return region_key_unpack(g_log, packed, length);
    }

    void rkey_release(const Rkey& rkey) const override { region_key_release(rkey); }
};

const SelfComponent g_component;

}  // namespace

}  // namespace loom::uct::self
