#include "uct/ib/ib_md.h"

#include "uct/ib/ib_log.h"
#include "uct/ib/rc_iface.h"

#include "ucs/memory/memhooks.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <new>

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

/**
 * errno of the last ibv_reg_mr the cache's backend saw fail on this thread. The cache
 * may register twice for one lookup (a merged region, then the request alone) or retry
 * after evicting, so the backend only logs at debug level and acquire_region() reports
 * the failure that reached the caller, once.
 */
thread_local int t_cache_reg_errno = 0;

/** What a failed ibv_reg_mr means for the caller. */
Status reg_status(int err) {
    return err == ENOMEM ? Status::no_memory : Status::io_error;
}

/** Why Rcache::create() said unsupported, for the md's log line. */
std::string cache_unavailable_reason() {
    auto mode = ucs::read_mem_events_mode();
    if (mode && *mode == ucs::MemEventsMode::none) return "memory events are off (LOOM_MEM_EVENTS=none)";
    return "memory hooks do not work in this process (" + ucs::mem_hooks_info().detail + ")";
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
    for (auto& [region, handle] : regions_) {
        leaked += handle.count;
        if (handle.cached != nullptr) {
            // Released here, so the cache does not warn about them a second time.
            for (std::size_t i = 0; i < handle.count; ++i) rcache_->release(handle.cached);
        } else {
            remove_window(region->mr);
            (void)ibv_dereg_mr(region->mr);
            delete region;
        }
    }
    regions_.clear();
    if (leaked != 0) LOOM_LOG_WARN("{}: closed with {} memory registrations still active", name(), leaked);
    rcache_.reset();  // deregisters what it kept, while the protection domain exists
    if (int rc = ibv_dealloc_pd(pd_); rc != 0) {
        LOOM_LOG_WARN("{}: ibv_dealloc_pd failed: {} (resources still in use)", name(), std::strerror(rc));
    }
}

Result<std::unique_ptr<IbMd>> IbMd::open(const Component& component, const std::string& name) {
    // The whole table, like the shm md: a bad LOOM_IB_* value stops the device here, with
    // one line naming it, instead of at the first iface_open.
    IbConfig config;
    if (Status s = ucs::config::fill(ib_config_table(), config); s != Status::ok) return s;
    auto ctx = DeviceContext::open(name);
    if (!ctx) return ctx.status();
    auto dev = query_device(ctx->get());
    if (!dev) return dev.status();
    ibv_pd* pd = ibv_alloc_pd(ctx->get());
    if (pd == nullptr) {
        LOOM_LOG_ERROR("{}: ibv_alloc_pd failed: {}", name, std::strerror(errno));
        return Status::no_resource;
    }
    std::unique_ptr<IbMd> md(new IbMd(component, name, std::move(*ctx), std::move(*dev), pd));
    if (Status s = md->init_registration(config); s != Status::ok) return s;
    return md;
}

Status IbMd::init_registration(const IbConfig& config) {
    if (config.rcache == ucs::config::Ternary::no) {
        LOOM_LOG_DIAG("{}: registering memory at every mem_reg (LOOM_IB_RCACHE=no)", name());
        return Status::ok;
    }
    ucs::RcacheParams params;
    params.name = name();
    params.ops = {&IbMd::cache_register, &IbMd::cache_deregister};
    params.context = this;
    params.private_size = sizeof(MemRegion);
    auto cache = ucs::Rcache::create(params);
    if (cache) {
        rcache_ = std::move(*cache);
        return Status::ok;
    }
    if (cache.status() != Status::unsupported) return cache.status();  // a bad LOOM_RCACHE_* value, logged
    const std::string why = cache_unavailable_reason();
    if (config.rcache == ucs::config::Ternary::yes) {
        LOOM_LOG_ERROR("{}: LOOM_IB_RCACHE=yes, but there can be no registration cache: {}", name(), why);
        return Status::unsupported;
    }
    LOOM_LOG_DIAG("{}: registering memory at every mem_reg, without a registration cache: {}", name(), why);
    return Status::ok;
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
    if (rcache_) {
        // With the registration cache a buffer seen before costs one lookup (Rcache.HitCost:
        // ~35 ns), which is what a rendezvous from an application's reused buffers pays.
        attr.reg_cost_overhead = 50e-9;
        attr.reg_cost_per_byte = 0;
    }
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
    if (access & kAccessRemoteAtomic) {
        // Without NIC atomics rc performs them with the target's CPU (LOOM_IB_ATOMICS=cpu), as a
        // read and a write of the word: verbs has no right of its own for that, so the key
        // carries remote read and write.
        flags |= dev_.atomics() ? IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE
                                : IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
    }
    return flags;
}

ibv_mr* IbMd::register_mr(void* address, std::size_t length, int flags) noexcept {
    return ibv_reg_mr(pd_, address, length, flags);
}

bool IbMd::add_window(const ibv_mr* mr, int flags) noexcept {
    try {
        std::lock_guard guard(windows_lock_);
        windows_[mr->rkey] = Window{reinterpret_cast<std::uintptr_t>(mr->addr), mr->length, flags};
        return true;
    } catch (const std::bad_alloc&) {
        LOOM_LOG_ERROR("{}: out of memory for the record of a registration", name());
        return false;
    }
}

void IbMd::remove_window(const ibv_mr* mr) noexcept {
    std::lock_guard guard(windows_lock_);
    windows_.erase(mr->rkey);
}

void* IbMd::cpu_atomic_target(std::uint32_t rkey, std::uint64_t address, unsigned size, const char** why) {
    const int need = ibv_access(kAccessRemoteAtomic) & ~IBV_ACCESS_LOCAL_WRITE;
    std::lock_guard guard(windows_lock_);
    auto it = windows_.find(rkey);
    if (it == windows_.end()) {
        *why = "no registration has this key";
        return nullptr;
    }
    const Window& w = it->second;
    if (address < w.address || address - w.address > w.length || w.length - (address - w.address) < size) {
        *why = "the word is outside the registration";
        return nullptr;
    }
    if ((w.flags & need) != need) {
        *why = "the registration grants no atomic access";
        return nullptr;
    }
    return reinterpret_cast<void*>(address);
}

Status IbMd::cache_register(void* context, void* address, std::size_t length, unsigned flags,
                            void* region_private) noexcept {
    auto* md = static_cast<IbMd*>(context);
    ibv_mr* mr = md->register_mr(address, length, static_cast<int>(flags));
    if (mr == nullptr) {
        const int err = errno;
        t_cache_reg_errno = err;
        LOOM_LOG_DEBUG("{}: ibv_reg_mr({}, {} bytes, access {:#x}) failed: {}", md->name(), address, length,
                       flags, std::strerror(err));
        return reg_status(err);
    }
    if (!md->add_window(mr, static_cast<int>(flags))) {
        (void)ibv_dereg_mr(mr);
        return Status::no_memory;
    }
    new (region_private) MemRegion{mr, static_cast<int>(flags)};
    return Status::ok;
}

void IbMd::cache_deregister(void* context, void* address, std::size_t length, void* region_private) noexcept {
    auto* md = static_cast<IbMd*>(context);
    auto* region = static_cast<MemRegion*>(region_private);
    md->remove_window(region->mr);
    if (int rc = ibv_dereg_mr(region->mr); rc != 0) {
        LOOM_LOG_ERROR("{}: ibv_dereg_mr({}, {} bytes) failed: {}", md->name(), address, length,
                       std::strerror(rc));
    }
}

Result<MemRegion*> IbMd::acquire_region(void* address, std::size_t length, unsigned access) {
    // The cache compares rights as opaque bit sets: it gets the ibv flags rather than the
    // MemAccess bits, so requests the device cannot tell apart (local read and local write
    // on iWARP, atomics on a device without them) share one registration.
    const int flags = ibv_access(access);
    if (rcache_ == nullptr) {
        ibv_mr* mr = register_mr(address, length, flags);
        if (mr == nullptr) {
            const int err = errno;
            LOOM_LOG_ERROR("{}: ibv_reg_mr({}, {} bytes, access {:#x}) failed: {}", name(), address, length,
                           flags, std::strerror(err));
            return reg_status(err);
        }
        auto* region = add_window(mr, flags) ? new (std::nothrow) MemRegion{mr, flags} : nullptr;
        if (region != nullptr) {
            try {
                std::lock_guard guard(regions_lock_);
                regions_.emplace(region, Handle{nullptr, 1});
                return region;
            } catch (const std::bad_alloc&) {
            }
        }
        LOOM_LOG_ERROR("{}: out of memory for the handle of a registration", name());
        remove_window(mr);
        (void)ibv_dereg_mr(mr);
        delete region;
        return Status::no_memory;
    }

    t_cache_reg_errno = 0;
    ucs::RcacheRegion* cached = nullptr;
    if (Status s = rcache_->lookup(address, length, static_cast<unsigned>(flags), cached); s != Status::ok) {
        if (t_cache_reg_errno != 0) {  // else the cache logged why
            LOOM_LOG_ERROR("{}: ibv_reg_mr({}, {} bytes, access {:#x}) failed: {}", name(), address, length,
                           flags, std::strerror(t_cache_reg_errno));
        }
        return s;
    }
    auto* region = static_cast<MemRegion*>(cached->private_data());
    try {
        std::lock_guard guard(regions_lock_);
        // A region is one handle however often it is looked up: count its holders.
        ++regions_.try_emplace(region, Handle{cached, 0}).first->second.count;
        return region;
    } catch (const std::bad_alloc&) {
        LOOM_LOG_ERROR("{}: out of memory for the handle of a registration", name());
        rcache_->release(cached);
        return Status::no_memory;
    }
}

Status IbMd::release_region(MemRegion* region) {
    ucs::RcacheRegion* cached;
    {
        std::lock_guard guard(regions_lock_);
        auto it = regions_.find(region);
        if (it == regions_.end()) {
            LOOM_LOG_ERROR("{}: mem_dereg of a handle this memory domain did not give out ({})", name(),
                           static_cast<void*>(region));
            return Status::invalid_param;
        }
        cached = it->second.cached;
        if (--it->second.count == 0) regions_.erase(it);
    }
    if (cached != nullptr) {
        // The last release of a region that left the cache (its memory was unmapped, or a
        // merged registration replaced it) deregisters it; else it stays cached.
        rcache_->release(cached);
        return Status::ok;
    }
    remove_window(region->mr);
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
    // Never cached: the transport keeps these for the life of the iface.
    ibv_mr* mr = register_mr(address, length, ibv_access(access));
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
