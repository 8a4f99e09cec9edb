/**
 * tcp component and memory domain (its configuration table is in tcp_config.cc).
 *
 * Remote keys: the md keeps a table of registered regions. A region's slot index is its
 * key id, and every registration draws a fresh random 64-bit cookie, so a key that was
 * released (its slot reused) or forged does not match. The packed key carries the key
 * id, cookie, base, length and rights; the target checks every emulated remote access
 * against its own table (tcp_rx.cc), never trusting what the initiator sent beyond the
 * key id and cookie.
 */
#include "uct/tcp/tcp_md.h"
#include "uct/tcp/tcp_ep.h"
#include "uct/tcp/tcp_iface.h"

#include "uct/tcp/tcp_log.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <cstring>

namespace loom::uct::tcp {

log::Component g_log("tcp");

std::vector<NetDevice> list_devices() {
    std::vector<NetDevice> devices;
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) {
        LOOM_LOG_WARN("getifaddrs failed: {}: no tcp devices", std::strerror(errno));
        return devices;
    }
    for (ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
        if (ifa->ifa_addr == nullptr || ifa->ifa_addr->sa_family != AF_INET) continue;
        if (!(ifa->ifa_flags & IFF_UP) || !(ifa->ifa_flags & IFF_RUNNING)) continue;
        bool seen = false;
        for (const NetDevice& d : devices) seen = seen || d.name == ifa->ifa_name;
        if (seen) continue;  // the first IPv4 address of a device names it
        NetDevice dev;
        dev.name = ifa->ifa_name;
        dev.addr = reinterpret_cast<const sockaddr_in*>(ifa->ifa_addr)->sin_addr;
        dev.netmask = ifa->ifa_netmask ? reinterpret_cast<const sockaddr_in*>(ifa->ifa_netmask)->sin_addr
                                       : in_addr{htonl(0xffffffffu)};
        dev.loopback = (ifa->ifa_flags & IFF_LOOPBACK) != 0;
        devices.push_back(dev);
    }
    ::freeifaddrs(list);
    return devices;
}

TcpMd::TcpMd(const Component& component) : Md(component, "tcp"), rng_(std::random_device{}()) {}

TcpMd::~TcpMd() {
    if (!handles_.empty()) {
        LOOM_LOG_WARN("tcp md closed with {} memory registrations still active", handles_.size());
        for (TcpMemH* h : handles_) delete h;
    }
}

Status TcpMd::query(MdAttr& attr) const {
    attr = {};
    // Registration only records the region for the target's checks: no pinning, no
    // memh needed on the local side of zcopy operations.
    attr.flags = MdAttr::kReg | MdAttr::kNeedRkey;
    attr.max_alloc = 0;
    attr.max_reg = SIZE_MAX;
    attr.rkey_packed_size = sizeof(PackedRkey);
    attr.reg_cost_overhead = 50e-9;  // a table insert
    attr.reg_cost_per_byte = 0;
    attr.component_name = "tcp";
    return Status::ok;
}

std::vector<TlResource> TcpMd::query_tl_resources() const {
    std::vector<TlResource> resources;
    for (const NetDevice& dev : list_devices()) resources.push_back({"tcp", dev.name, DeviceType::net});
    return resources;
}

Result<std::unique_ptr<Iface>> TcpMd::iface_open(const TlResource& resource, Worker* worker,
                                                 const IfaceParams& params) {
    if (resource.tl_name != "tcp") return Status::no_device;
    TcpConfig config;
    if (Status s = ucs::config::fill(tcp_config_table(), config, params.config_overrides); s != Status::ok) return s;
    if (config.seg_size < kMinSegSize || config.seg_size > kMaxSegSize) {
        LOOM_LOG_ERROR("LOOM_TCP_SEG_SIZE={} is out of range ({}..{})", config.seg_size, kMinSegSize, kMaxSegSize);
        return Status::invalid_config;
    }
    if (config.max_am < config.seg_size || config.max_am > kMaxRmaFrame) {
        LOOM_LOG_ERROR("LOOM_TCP_MAX_AM_SIZE={} is out of range ({}..{})", config.max_am, config.seg_size,
                       kMaxRmaFrame);
        return Status::invalid_config;
    }
    for (const NetDevice& dev : list_devices()) {
        if (dev.name == resource.dev_name) return TcpIface::open(this, worker, resource, dev, config);
    }
    LOOM_LOG_ERROR("tcp: no up device {} with an IPv4 address", resource.dev_name);
    return Status::no_device;
}

Result<MemH> TcpMd::mem_reg(void* address, std::size_t length, unsigned access) {
    auto base = reinterpret_cast<std::uint64_t>(address);
    if ((address == nullptr && length != 0) || (access & ~static_cast<unsigned>(kAccessAll)) != 0 ||
        base + length < base) {
        LOOM_LOG_ERROR("mem_reg: invalid region {}+{} or access {:#x}", address, length, access);
        return Status::invalid_param;
    }
    std::uint32_t slot;
    if (!free_slots_.empty()) {
        slot = free_slots_.back();
        free_slots_.pop_back();
    } else {
        if (regions_.size() >= UINT32_MAX) return Status::no_resource;
        slot = static_cast<std::uint32_t>(regions_.size());
        regions_.emplace_back();
    }
    std::uint64_t cookie;
    do {
        cookie = rng_();
    } while (cookie == 0);  // 0 marks a free slot
    regions_[slot] = Region{base, length, cookie, access};
    auto* handle = new TcpMemH{slot, cookie};
    handles_.insert(handle);
    return static_cast<MemH>(handle);
}

Status TcpMd::mem_dereg(MemH memh) {
    auto* handle = static_cast<TcpMemH*>(memh);
    if (handles_.erase(handle) == 0) {
        LOOM_LOG_ERROR("mem_dereg: {} is not a registration of this md", memh);
        return Status::invalid_param;
    }
    regions_[handle->key_id] = Region{};
    free_slots_.push_back(handle->key_id);
    delete handle;
    return Status::ok;
}

Status TcpMd::mkey_pack(MemH memh, std::uint8_t* out) const {
    auto* handle = static_cast<TcpMemH*>(memh);
    if (handles_.count(handle) == 0) {
        LOOM_LOG_ERROR("mkey_pack: {} is not a registration of this md", memh);
        return Status::invalid_param;
    }
    const Region& r = regions_[handle->key_id];
    PackedRkey packed{kWireVersion, static_cast<std::uint8_t>(r.access), handle->key_id, r.base, r.length,
                      r.cookie};
    std::memcpy(out, &packed, sizeof(packed));
    return Status::ok;
}

namespace {

class TcpComponent final : public Component {
public:
    TcpComponent() : Component("tcp") {}

    std::vector<std::string> query_md_resources() const override {
        if (list_devices().empty()) return {};
        return {"tcp"};
    }

    Result<std::unique_ptr<Md>> md_open(std::string_view md_name) const override {
        if (md_name != "tcp") return Status::no_device;
        return std::unique_ptr<Md>(new TcpMd(*this));
    }

    Result<Rkey> rkey_unpack(const std::uint8_t* packed, std::size_t length) const override {
        if (packed == nullptr || length != sizeof(PackedRkey)) {
            LOOM_LOG_ERROR("rkey_unpack: packed key has {} bytes, expected {}", length, sizeof(PackedRkey));
            return Status::invalid_param;
        }
        PackedRkey key;
        std::memcpy(&key, packed, sizeof(key));
        if (key.version != kWireVersion) {
            LOOM_LOG_ERROR("rkey_unpack: key version {} (expected {})", key.version, kWireVersion);
            return Status::invalid_param;
        }
        if ((key.access & ~static_cast<unsigned>(kAccessAll)) != 0 || key.cookie == 0 ||
            key.base + key.length < key.base) {
            std::uint64_t base = key.base, len = key.length;
            LOOM_LOG_ERROR("rkey_unpack: malformed key (access {:#x}, region {:#x}+{})", key.access, base, len);
            return Status::invalid_param;
        }
        auto* rk = new RemoteKey{key.cookie, key.key_id, key.access, key.base, key.length};
        return Rkey{reinterpret_cast<std::uint64_t>(rk), rk};
    }

    void rkey_release(const Rkey& rkey) const override { delete static_cast<RemoteKey*>(rkey.handle); }
};

const TcpComponent g_component;

}  // namespace

}  // namespace loom::uct::tcp

