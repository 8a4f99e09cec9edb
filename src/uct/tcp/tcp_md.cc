/**
 * tcp component and memory domain (its configuration table is in tcp_config.cc).
 *
 * Remote keys: the md keeps a key table (uct/base/key_table.h); the target checks every
 * emulated remote access against it (tcp_rx.cc), never trusting what the initiator sent
 * beyond the key id and cookie.
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

TcpMd::TcpMd(const Component& component) : Md(component, "tcp"), keys_(g_log) {}

Status TcpMd::query(MdAttr& attr) const {
    attr = {};
    // Registration only records the region for the target's checks: no pinning, no
    // memh needed on the local side of zcopy operations.
    attr.flags = MdAttr::kReg | MdAttr::kNeedRkey;
    attr.max_alloc = 0;
    attr.max_reg = SIZE_MAX;
    attr.rkey_packed_size = sizeof(PackedRegionKey);
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
    Result<KeyHandle*> handle = keys_.add(address, length, access);
    if (!handle) return handle.status();
    return static_cast<MemH>(*handle);
}

Status TcpMd::mem_dereg(MemH memh) {
    return keys_.remove(static_cast<KeyHandle*>(memh));
}

Status TcpMd::mkey_pack(MemH memh, std::uint8_t* out) const {
    return keys_.pack(static_cast<const KeyHandle*>(memh), out);
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
        return region_key_unpack(g_log, packed, length);
    }

    void rkey_release(const Rkey& rkey) const override { region_key_release(rkey); }
};

const TcpComponent g_component;

}  // namespace

}  // namespace loom::uct::tcp

