#include "uct/ib/ib_device.h"

#include "uct/ib/ib_log.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <utility>

namespace loom::uct::ib {

log::Component g_log("ib");

namespace {

std::string read_sysfs(const std::string& path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line;
}

const char* link_layer_text(std::uint8_t ll) {
    switch (ll) {
    case IBV_LINK_LAYER_INFINIBAND: return "InfiniBand";
    case IBV_LINK_LAYER_ETHERNET: return "Ethernet";
    default: return "unspecified";
    }
}

const char* port_state_text(ibv_port_state state) {
    switch (state) {
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    default: return "NOP";
    }
}

/** Width multiplier of an active_width code (1x, 4x, 8x, 12x, 2x). */
unsigned width_lanes(std::uint8_t width) {
    switch (width) {
    case 1: return 1;
    case 2: return 4;
    case 4: return 8;
    case 8: return 12;
    case 16: return 2;
    default: return 0;
    }
}

/** Data rate of one lane in Gb/s after line encoding, for an active_speed code. */
double lane_gbps(std::uint8_t speed) {
    switch (speed) {
    case 1: return 2.0;      // SDR: 2.5 Gb/s, 8b/10b
    case 2: return 4.0;      // DDR
    case 4: return 8.0;      // QDR
    case 8: return 10.0;     // FDR10: 10.3125 Gb/s, 64b/66b
    case 16: return 13.64;   // FDR: 14.0625 Gb/s, 64b/66b
    case 32: return 25.0;    // EDR: 25.78125 Gb/s, 64b/66b
    case 64: return 50.0;    // HDR
    case 128: return 100.0;  // NDR
    default: return 0;
    }
}

GidType gid_type_of(std::uint32_t type) {
    switch (type) {
    case IBV_GID_TYPE_ROCE_V1: return GidType::roce_v1;
    case IBV_GID_TYPE_ROCE_V2: return GidType::roce_v2;
    default: return GidType::ib;
    }
}

/** Reads a port's GID table with its types (ibv_query_gid_table, sysfs where that fails). */
std::vector<GidEntry> query_gids(ibv_context* ctx, const std::string& dev, std::uint8_t port, int table_len) {
    std::vector<GidEntry> gids;
    if (table_len <= 0) return gids;
    // Valid entries of every port; the kernel passes the array in an attribute of at most 64 KiB, so a
    // bigger request fails (and so does a table with more valid entries: then sysfs is read below).
    std::vector<ibv_gid_entry> entries(512);
    ssize_t n = ibv_query_gid_table(ctx, entries.data(), entries.size(), 0);
    if (n >= 0) {
        for (ssize_t i = 0; i < n; ++i) {
            const ibv_gid_entry& e = entries[static_cast<std::size_t>(i)];
            if (e.port_num != port) continue;
            GidEntry g;
            g.index = e.gid_index;
            g.gid = e.gid;
            g.type = gid_type_of(e.gid_type);
            if (e.ndev_ifindex != 0) {
                char name[IF_NAMESIZE] = {};
                if (if_indextoname(e.ndev_ifindex, name) != nullptr) g.netdev = name;
            }
            gids.push_back(std::move(g));
        }
        return gids;
    }
    // Older kernels: the table from ibv_query_gid, the types and devices from sysfs.
    LOOM_LOG_DEBUG("{}:{}: ibv_query_gid_table failed ({}); reading the GIDs one by one", dev, port,
                   std::strerror(errno));
    std::string base = "/sys/class/infiniband/" + dev + "/ports/" + std::to_string(port);
    for (int i = 0; i < table_len; ++i) {
        GidEntry g;
        if (ibv_query_gid(ctx, port, i, &g.gid) != 0) break;
        static const ibv_gid zero{};
        if (std::memcmp(&g.gid, &zero, sizeof(zero)) == 0) continue;
        g.index = static_cast<unsigned>(i);
        std::string type = read_sysfs(base + "/gid_attrs/types/" + std::to_string(i));
        g.type = type == "RoCE v2"
                     ? GidType::roce_v2
                     : (type.find("RoCE") != std::string::npos ? GidType::roce_v1 : GidType::ib);
        g.netdev = read_sysfs(base + "/gid_attrs/ndevs/" + std::to_string(i));
        gids.push_back(std::move(g));
    }
    return gids;
}

}  // namespace

bool GidEntry::ipv4_mapped() const noexcept {
    static const std::uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return std::memcmp(gid.raw, prefix, sizeof(prefix)) == 0;
}

std::string GidEntry::type_text() const {
    switch (type) {
    case GidType::ib: return "IB";
    case GidType::roce_v1: return "RoCE v1";
    case GidType::roce_v2: return ipv4_mapped() ? "RoCE v2 IPv4" : "RoCE v2 IPv6";
    }
    return "unknown";
}

double PortInfo::rate_gbps() const noexcept {
    return width_lanes(attr.active_width) * lane_gbps(attr.active_speed);
}

const PortInfo* DeviceInfo::port(unsigned num) const noexcept {
    for (const PortInfo& p : ports) {
        if (p.num == num) return &p;
    }
    return nullptr;
}

DeviceContext::~DeviceContext() {
    if (owned_ && ctx_ != nullptr) ibv_close_device(ctx_);
}

DeviceContext::DeviceContext(DeviceContext&& other) noexcept
    : ctx_(std::exchange(other.ctx_, nullptr)), owned_(std::exchange(other.owned_, false)) {}

DeviceContext& DeviceContext::operator=(DeviceContext&& other) noexcept {
    if (this != &other) {
        if (owned_ && ctx_ != nullptr) ibv_close_device(ctx_);
        ctx_ = std::exchange(other.ctx_, nullptr);
        owned_ = std::exchange(other.owned_, false);
    }
    return *this;
}

Result<DeviceContext> DeviceContext::open(const std::string& name) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) {
        LOOM_LOG_ERROR("ibv_get_device_list failed: {}", std::strerror(errno));
        return Status::io_error;
    }
    ibv_device* found = nullptr;
    for (int i = 0; i < n; ++i) {
        if (name == ibv_get_device_name(list[i])) found = list[i];
    }
    if (found == nullptr) {
        ibv_free_device_list(list);
        return Status::no_device;
    }
    ibv_context* ctx = ibv_open_device(found);
    int err = errno;
    ibv_free_device_list(list);
    if (ctx == nullptr) {
        LOOM_LOG_ERROR("{}: ibv_open_device failed: {}", name, std::strerror(err));
        return Status::io_error;
    }
    DeviceContext dc;
    dc.ctx_ = ctx;
    dc.owned_ = true;
    return dc;
}

bool rdmacm_available() {
    static const bool available = [] {
        rdma_event_channel* channel = rdma_create_event_channel();
        if (channel == nullptr) {
            LOOM_LOG_DIAG("rdma_cm is unavailable (rdma_create_event_channel: {}); rc connects without it",
                          std::strerror(errno));
            return false;
        }
        rdma_destroy_event_channel(channel);
        return true;
    }();
    return available;
}

std::vector<std::string> device_names() {
    std::vector<std::string> names;
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) return names;
    for (int i = 0; i < n; ++i) names.emplace_back(ibv_get_device_name(list[i]));
    ibv_free_device_list(list);
    return names;
}

Result<DeviceInfo> query_device(ibv_context* ctx) {
    DeviceInfo dev;
    dev.name = ibv_get_device_name(ctx->device);
    if (int rc = ibv_query_device(ctx, &dev.attr); rc != 0) {
        LOOM_LOG_ERROR("{}: ibv_query_device failed: {}", dev.name, std::strerror(rc));
        return Status::io_error;
    }
    dev.iwarp = ctx->device->transport_type == IBV_TRANSPORT_IWARP;
    std::string sys = "/sys/class/infiniband/" + dev.name;
    // A hardware device has a bus device with a driver behind it; rxe and siw are kernel drivers
    // over a network device and have none.
    char link[512] = {};
    ssize_t len = ::readlink((sys + "/device/driver").c_str(), link, sizeof(link) - 1);
    if (len > 0) {
        std::string path(link, static_cast<std::size_t>(len));
        dev.driver = path.substr(path.rfind('/') + 1);
    } else {
        dev.software = true;
    }
    std::string parent = read_sysfs(sys + "/parent");
    for (std::uint8_t p = 1; p <= dev.attr.phys_port_cnt; ++p) {
        PortInfo port;
        port.num = p;
        if (int rc = ibv_query_port(ctx, p, &port.attr); rc != 0) {
            LOOM_LOG_ERROR("{}:{}: ibv_query_port failed: {}", dev.name, p, std::strerror(rc));
            return Status::io_error;
        }
        port.gids = query_gids(ctx, dev.name, p, port.attr.gid_tbl_len);
        for (const GidEntry& g : port.gids) {
            if (!g.netdev.empty()) {
                port.netdev = g.netdev;
                break;
            }
        }
        if (port.netdev.empty()) port.netdev = parent;
        dev.ports.push_back(std::move(port));
    }
    return dev;
}

Result<unsigned> choose_gid(const DeviceInfo& dev, const PortInfo& port, unsigned configured) {
    if (port.gids.empty()) {
        LOOM_LOG_ERROR("{}:{}: the port has no GID", dev.name, port.num);
        return Status::no_device;
    }
    if (configured != kGidAuto) {
        for (const GidEntry& g : port.gids) {
            if (g.index == configured) return configured;
        }
        LOOM_LOG_ERROR("{}:{}: LOOM_IB_GID_INDEX={} is not a valid GID table entry of the port", dev.name,
                       port.num, configured);
        return Status::invalid_config;
    }
    auto first = [&](auto pred) -> const GidEntry* {
        for (const GidEntry& g : port.gids) {
            if (pred(g)) return &g;
        }
        return nullptr;
    };
    const GidEntry* pick =
        first([](const GidEntry& g) { return g.type == GidType::roce_v2 && g.ipv4_mapped(); });
    if (pick == nullptr) pick = first([](const GidEntry& g) { return g.type == GidType::roce_v2; });
    if (pick == nullptr) pick = first([](const GidEntry& g) { return g.type == GidType::roce_v1; });
    if (pick == nullptr) pick = &port.gids.front();
    return pick->index;
}

unsigned mtu_bytes(ibv_mtu mtu) noexcept {
    switch (mtu) {
    case IBV_MTU_256: return 256;
    case IBV_MTU_512: return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
    }
    return 0;
}

std::optional<ibv_mtu> mtu_from_bytes(unsigned bytes) noexcept {
    switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    case 4096: return IBV_MTU_4096;
    default: return std::nullopt;
    }
}

std::string gid_text(const ibv_gid& gid) {
    char text[INET6_ADDRSTRLEN] = {};
    if (inet_ntop(AF_INET6, gid.raw, text, sizeof(text)) == nullptr) return "?";
    return text;
}

std::string IpAddress::text() const {
    char buf[INET6_ADDRSTRLEN] = {};
    if (inet_ntop(family, bytes, buf, sizeof(buf)) == nullptr) return "?";
    return buf;
}

std::optional<IpAddress> netdev_ip(const std::string& netdev) {
    if (netdev.empty()) return std::nullopt;
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) return std::nullopt;
    std::optional<IpAddress> v4, v6;
    for (ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
        if (ifa->ifa_addr == nullptr || netdev != ifa->ifa_name) continue;
        if (ifa->ifa_addr->sa_family == AF_INET && !v4) {
            IpAddress ip;
            ip.family = AF_INET;
            std::memcpy(ip.bytes, &reinterpret_cast<sockaddr_in*>(ifa->ifa_addr)->sin_addr, 4);
            v4 = ip;
        } else if (ifa->ifa_addr->sa_family == AF_INET6 && !v6) {
            const auto* sin6 = reinterpret_cast<sockaddr_in6*>(ifa->ifa_addr);
            if (IN6_IS_ADDR_LINKLOCAL(&sin6->sin6_addr)) continue;  // needs a scope id: not portable
            IpAddress ip;
            ip.family = AF_INET6;
            std::memcpy(ip.bytes, &sin6->sin6_addr, 16);
            v6 = ip;
        }
    }
    freeifaddrs(list);
    return v4 ? v4 : v6;
}

std::string describe(const DeviceInfo& dev) {
    std::string text;
    auto line = [&](const std::string& s) { text += s + "\n"; };
    const ibv_device_attr& a = dev.attr;
    line(fmt::format(
        "device {}: transport {}{}, {} port(s), firmware {}", dev.name, dev.iwarp ? "iWARP" : "InfiniBand",
        dev.software ? std::string(" (software device, no bus device)") : " (driver " + dev.driver + ")",
        a.phys_port_cnt, a.fw_ver[0] ? a.fw_ver : "-"));
    line(
        fmt::format("  limits: qp_wr {}, sge {} (rdma read {}), cqe {}, srq {} (wr {}), mr size {:#x}, "
                    "rd_atom {} / init {}",
                    a.max_qp_wr, a.max_sge, a.max_sge_rd, a.max_cqe, a.max_srq, a.max_srq_wr, a.max_mr_size,
                    a.max_qp_rd_atom, a.max_qp_init_rd_atom));
    line(fmt::format("  atomics: {}", dev.atomics()
                                          ? (a.atomic_cap == IBV_ATOMIC_GLOB ? "64-bit fetch-add and "
                                                                               "compare-swap (global)"
                                                                             : "64-bit fetch-add and "
                                                                               "compare-swap (HCA)")
                                          : "none"));
    for (const PortInfo& p : dev.ports) {
        std::string speed = p.rate_gbps() > 0 ? fmt::format("{:g} Gb/s", p.rate_gbps()) : "unknown speed";
        line(fmt::format(
            "  port {}: {}, link layer {}, active MTU {} (max {}), {} (width code {}, speed code {}){}",
            p.num, port_state_text(p.attr.state), link_layer_text(p.attr.link_layer),
            mtu_bytes(p.attr.active_mtu), mtu_bytes(p.attr.max_mtu), speed, p.attr.active_width,
            p.attr.active_speed, p.netdev.empty() ? "" : ", netdev " + p.netdev));
        if (!p.ethernet()) line(fmt::format("    lid {}, sm lid {}", p.attr.lid, p.attr.sm_lid));
        for (const GidEntry& g : p.gids) {
            line(fmt::format("    GID[{}] {} {}{}", g.index, gid_text(g.gid),
                             dev.iwarp ? "iWARP" : g.type_text(), g.netdev.empty() ? "" : " " + g.netdev));
        }
        if (auto ip = netdev_ip(p.netdev)) line(fmt::format("    IP address {} ({})", ip->text(), p.netdev));
    }
    return text;
}

}  // namespace loom::uct::ib
