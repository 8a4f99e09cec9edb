/**
 * self component and memory domain, and the transport's log component.
 */
#include "uct/self/self_md.h"

#include "uct/self/self_iface.h"
#include "uct/self/self_log.h"

namespace loom::uct::self {

log::Component g_log("self");

Status SelfMd::query(MdAttr& attr) const {
    attr = {};
    attr.flags = MdAttr::kReg;
    attr.max_reg = SIZE_MAX;
    attr.rkey_packed_size = 0;
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

Result<MemH> SelfMd::mem_reg(void* address, std::size_t, unsigned) {
    // Any non-null handle will do: the memory is already reachable.
    return static_cast<MemH>(address ? address : reinterpret_cast<void*>(1));
}

Status SelfMd::mem_dereg(MemH) { return Status::ok; }

Status SelfMd::mkey_pack(MemH, std::uint8_t*) const { return Status::ok; }

namespace {

class SelfComponent final : public Component {
public:
    SelfComponent() : Component("self") {}

    std::vector<std::string> query_md_resources() const override { return {"self"}; }

    Result<std::unique_ptr<Md>> md_open(std::string_view md_name) const override {
        if (md_name != "self") return Status::no_device;
        return std::unique_ptr<Md>(new SelfMd(*this));
    }

    Result<Rkey> rkey_unpack(const std::uint8_t*, std::size_t length) const override {
        if (length != 0) return Status::invalid_param;
        return Rkey{};
    }
};

const SelfComponent g_component;

}  // namespace

}  // namespace loom::uct::self
