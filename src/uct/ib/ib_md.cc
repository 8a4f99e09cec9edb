#include "uct/ib/ib_md.h"

#include "uct/ib/ib_log.h"
#include "uct/ib/rc_iface.h"

#include <cerrno>
#include <charconv>
#include <cstring>

namespace loom::uct::ib {

namespace {

/** Parses "rxe0:1" into its device name and port number. */
bool parse_dev_name(const std::string& dev_name, std::string& device, unsigned& port) {
    std::size_t colon = dev_name.rfind(':');
    if (colon == std::string::npos || colon == 0) return false;
    device = dev_name.substr(0, colon);
    const char* first = dev_name.data() + colon + 1;
    const char* last = dev_name.data() + dev_name.size();
    auto [ptr, ec] = std::from_chars(first, last, port);
    return ec == std::errc() && ptr == last && port > 0 && port < 256;
}

}  // namespace

std::vector<std::string> IbComponent::query_md_resources() const { return device_names(); }

Result<std::unique_ptr<Md>> IbComponent::md_open(std::string_view md_name) const {
    auto md = IbMd::open(*this, std::string(md_name));
    if (!md) return md.status();
    return std::unique_ptr<Md>(std::move(*md));
}

Result<Rkey> IbComponent::rkey_unpack(const std::uint8_t* packed, std::size_t length) const {
    if (packed == nullptr || length != kPackedRkeySize) {
        LOOM_LOG_ERROR("rkey_unpack: a packed ib key has {} bytes, got {}", kPackedRkeySize, length);
        return Status::invalid_param;
    }
    if (packed[0] != kRkeyVersion) {
        LOOM_LOG_ERROR("rkey_unpack: packed key version {} (expected {})", packed[0], kRkeyVersion);
        return Status::version_mismatch;
    }
    std::uint32_t rkey;
    std::memcpy(&rkey, packed + 1, sizeof(rkey));
    // The rkey itself is the fast-path value: remote operations need nothing else.
    return Rkey{rkey, nullptr};
}

IbMd::IbMd(const Component& component, const std::string& name, DeviceContext ctx, DeviceInfo dev, ibv_pd* pd)
    : Md(component, name), ctx_(std::move(ctx)), dev_(std::move(dev)), pd_(pd) {}

IbMd::~IbMd() {
    std::size_t leaked = 0;
    for (MemRegion* region : regions_) {
        ++leaked;
        (void)ibv_dereg_mr(region->mr);
        delete region;
    }
    if (leaked != 0) LOOM_LOG_WARN("{}: closed with {} memory registrations still active", name(), leaked);
    if (int rc = ibv_dealloc_pd(pd_); rc != 0) {
        LOOM_LOG_WARN("{}: ibv_dealloc_pd failed: {} (resources still in use)", name(), std::strerror(rc));
    }
}

Result<std::unique_ptr<IbMd>> IbMd::open(const Component& component, const std::string& name) {
    auto ctx = DeviceContext::open(name);
    if (!ctx) return ctx.status();
    auto dev = query_device(ctx->get());
    if (!dev) return dev.status();
    ibv_pd* pd = ibv_alloc_pd(ctx->get());
    if (pd == nullptr) {
        LOOM_LOG_ERROR("{}: ibv_alloc_pd failed: {}", name, std::strerror(errno));
        return Status::no_resource;
    }
    return std::unique_ptr<IbMd>(new IbMd(component, name, std::move(*ctx), std::move(*dev), pd));
}

Status IbMd::query(MdAttr& attr) const {
    attr = {};
    attr.flags = MdAttr::kReg | MdAttr::kNeedRkey | MdAttr::kNeedMemh;
    attr.max_reg = dev_.attr.max_mr_size;
    attr.rkey_packed_size = kPackedRkeySize;
    // Pinning costs a system call and a page walk: estimates of a kernel-driver registration
    // (about 10 us, plus 0.1 ns per byte for page pinning), refined once rcache measures them.
    attr.reg_cost_overhead = 10e-6;
    attr.reg_cost_per_byte = 0.1e-9;
    attr.component_name = component().name();
    return Status::ok;
}

std::vector<TlResource> IbMd::query_tl_resources() const {
    std::vector<TlResource> resources;
    for (const PortInfo& port : dev_.ports) {
        if (!port.active()) continue;  // a port that is down cannot carry traffic; loom_info -d shows it
        resources.push_back({"rc", name() + ":" + std::to_string(port.num), DeviceType::net});
    }
    return resources;
}

Result<std::unique_ptr<Iface>> IbMd::iface_open(const TlResource& resource, Worker* worker,
                                                const IfaceParams& params) {
    std::string device;
    unsigned port_num = 0;
    if (resource.tl_name != "rc" || !parse_dev_name(resource.dev_name, device, port_num) ||
        device != name()) {
        LOOM_LOG_ERROR("{}: no transport {} on device {}", name(), resource.tl_name, resource.dev_name);
        return Status::no_device;
    }
    const PortInfo* port = dev_.port(port_num);
    if (port == nullptr || !port->active()) {
        LOOM_LOG_ERROR("{}: port {} is missing or not active", name(), port_num);
        return Status::no_device;
    }
    return rc_iface_open(this, *port, worker, resource, params);
}

int IbMd::ibv_access(unsigned access) const noexcept {
    int flags = 0;
    if (access & kAccessLocalWrite) {
        flags |= IBV_ACCESS_LOCAL_WRITE;
        // iWARP delivers RDMA READ responses as tagged writes into the sink buffer, so the sink's
        // STag needs remote write rights (RFC 5040); hardware iWARP devices enforce it.
        if (dev_.iwarp) flags |= IBV_ACCESS_REMOTE_WRITE;
    }
    if (access & kAccessRemotePut) flags |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
    if (access & kAccessRemoteGet) flags |= IBV_ACCESS_REMOTE_READ;
    if ((access & kAccessRemoteAtomic) && dev_.atomics()) {
        flags |= IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE;
    }
    return flags;
}

Result<MemRegion*> IbMd::acquire_region(void* address, std::size_t length, unsigned access) {
    ibv_mr* mr = ibv_reg_mr(pd_, address, length, ibv_access(access));
    if (mr == nullptr) {
        int err = errno;
        LOOM_LOG_ERROR("{}: ibv_reg_mr({}, {} bytes, access {:#x}) failed: {}", name(), address, length,
                       ibv_access(access), std::strerror(err));
        return err == ENOMEM ? Status::no_memory : Status::io_error;
    }
    auto* region = new MemRegion{mr, access};
    std::lock_guard guard(regions_lock_);
    regions_.insert(region);
    return region;
}

Status IbMd::release_region(MemRegion* region) {
    {
        std::lock_guard guard(regions_lock_);
        if (regions_.erase(region) == 0) {
            LOOM_LOG_ERROR("{}: mem_dereg of a handle this memory domain did not give out ({})", name(),
                           static_cast<void*>(region));
            return Status::invalid_param;
        }
    }
    int rc = ibv_dereg_mr(region->mr);
    delete region;
    if (rc != 0) {
        LOOM_LOG_ERROR("{}: ibv_dereg_mr failed: {}", name(), std::strerror(rc));
        return Status::io_error;
    }
    return Status::ok;
}

Result<MemH> IbMd::mem_reg(void* address, std::size_t length, unsigned access) {
    if (address == nullptr || length == 0) {
        LOOM_LOG_ERROR("{}: mem_reg of an empty range ({}, {} bytes)", name(), address, length);
        return Status::invalid_param;
    }
    auto region = acquire_region(address, length, access);
    if (!region) return region.status();
    return static_cast<MemH>(*region);
}

Status IbMd::mem_dereg(MemH memh) {
    if (memh == kMemHNull) return Status::invalid_param;
    return release_region(static_cast<MemRegion*>(memh));
}

Status IbMd::mkey_pack(MemH memh, std::uint8_t* out) const {
    if (memh == kMemHNull) return Status::invalid_param;
    const auto* region = static_cast<const MemRegion*>(memh);
    out[0] = kRkeyVersion;
    std::uint32_t rkey = region->mr->rkey;
    std::memcpy(out + 1, &rkey, sizeof(rkey));
    return Status::ok;
}

ibv_mr* IbMd::reg_internal(void* address, std::size_t length, const char* what, unsigned access) {
    ibv_mr* mr = ibv_reg_mr(pd_, address, length, ibv_access(access));
    if (mr == nullptr) {
        LOOM_LOG_ERROR("{}: cannot register {} ({} bytes): {}", name(), what, length, std::strerror(errno));
    }
    return mr;
}

std::string IbMd::describe() const { return ib::describe(dev_); }

namespace {

const IbComponent g_component;

}  // namespace

}  // namespace loom::uct::ib
