/**
 * Verbs device discovery: what every device and port offers (transport, link layer,
 * MTU, speed, GID table with types), the device contexts the transports open, and
 * the choice of a GID for RoCE addressing.
 *
 * Device contexts are always our own (ibv_open_device), never librdmacm's: librdmacm
 * keeps its contexts for the life of the process, so a child forked after its parent
 * used rdma_cm would inherit them, and the kernel refuses a forked child's commands on
 * an inherited verbs file. rdma_cm connections use queue pairs created on our context
 * (see RcIface::create_qp).
 */
#pragma once

#include "ucs/config/parser.h"
#include "ucs/type/result.h"

#include <infiniband/verbs.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loom::uct::ib {

/** LOOM_IB_GID_INDEX=auto. */
inline constexpr unsigned kGidAuto = ucs::config::kAuto<unsigned>;

/** What a GID table entry addresses. */
enum class GidType : std::uint8_t { ib, roce_v1, roce_v2 };

/** One valid GID table entry of a port. */
struct GidEntry {
    unsigned index = 0;
    ibv_gid gid{};
    GidType type = GidType::ib;
    std::string netdev;  ///< network device the entry belongs to (RoCE, iWARP), else empty

    /** True for an IPv4-mapped GID (::ffff:a.b.c.d): a RoCE v2 entry routes over IPv4. */
    bool ipv4_mapped() const noexcept;
    /** "RoCE v2 IPv4", "RoCE v1", "IB" ... */
    std::string type_text() const;
};

/** One port of a device. */
struct PortInfo {
    std::uint8_t num = 0;
    ibv_port_attr attr{};
    std::vector<GidEntry> gids;
    std::string netdev;  ///< network device of the port (from its GIDs or sysfs), empty on InfiniBand

    /** True when the port can carry traffic. */
    bool active() const noexcept { return attr.state == IBV_PORT_ACTIVE; }
    /** True for an Ethernet link layer (RoCE, iWARP), false for InfiniBand. */
    bool ethernet() const noexcept { return attr.link_layer == IBV_LINK_LAYER_ETHERNET; }
    /** Data rate in Gb/s after line encoding (width x per-lane rate); 0 when unknown. */
    double rate_gbps() const noexcept;
};

/** A device, its limits and its ports. */
struct DeviceInfo {
    std::string name;
    ibv_device_attr attr{};
    bool iwarp = false;     ///< transport iWARP (else InfiniBand transport: IB or RoCE)
    bool software = false;  ///< no bus device behind it (rxe, siw): a kernel driver over a netdev, CPU-bound
    std::string driver;     ///< kernel driver of the bus device; empty for software devices
    std::vector<PortInfo> ports;

    /** True when the device executes 64-bit fetch-and-add and compare-and-swap. */
    bool atomics() const noexcept { return attr.atomic_cap != IBV_ATOMIC_NONE && !iwarp; }
    /** The port numbered @p num, or nullptr. */
    const PortInfo* port(unsigned num) const noexcept;
};

/** An open device: a context, owned by us or shared with librdmacm. */
class DeviceContext {
public:
    /** No device; open() gives one. */
    DeviceContext() = default;
    /** Closes the device when this object opened it. */
    ~DeviceContext();
    DeviceContext(const DeviceContext&) = delete;
    DeviceContext& operator=(const DeviceContext&) = delete;
    /** Takes over @p other's device. */
    DeviceContext(DeviceContext&& other) noexcept;
    /** Closes this object's device (if its own) and takes over @p other's. */
    DeviceContext& operator=(DeviceContext&& other) noexcept;

    /** Opens device @p name; no_device when it does not exist, io_error when it cannot be opened. */
    static Result<DeviceContext> open(const std::string& name);

    /** The verbs context. */
    ibv_context* get() const noexcept { return ctx_; }

private:
    ibv_context* ctx_ = nullptr;
    bool owned_ = false;  ///< opened by open() (closed here)
};

/**
 * True when rdma_cm can be used in this process (librdmacm and the kernel's rdma_ucm:
 * an event channel opens); says why not once, at diagnostic level, when it cannot.
 */
bool rdmacm_available();

/** Names of every verbs device here, in the order of ibv_get_device_list(). */
std::vector<std::string> device_names();

/** Queries the device behind @p ctx and its ports; io_error (logged) when verbs fail. */
Result<DeviceInfo> query_device(ibv_context* ctx);

/**
 * The GID index to use on @p port: @p configured when it is not auto (checked to be a
 * valid entry: invalid_config otherwise), else the first RoCE v2 IPv4 entry, then RoCE
 * v2, then RoCE v1, then the first entry. no_device when the port has no GID at all.
 */
Result<unsigned> choose_gid(const DeviceInfo& dev, const PortInfo& port, unsigned configured);

/** Multi-line human description of @p dev (one line per fact, GIDs one per line). */
std::string describe(const DeviceInfo& dev);

/** "1024" for IBV_MTU_1024 ...; 0 for an unknown value. */
unsigned mtu_bytes(ibv_mtu mtu) noexcept;

/** IBV_MTU_* for @p bytes (256 .. 4096, powers of two), or nullopt. */
std::optional<ibv_mtu> mtu_from_bytes(unsigned bytes) noexcept;

/** Text of a GID ("fe80::1" or "::ffff:192.0.2.1"). */
std::string gid_text(const ibv_gid& gid);

/** An IPv4 or IPv6 address. */
struct IpAddress {
    int family = 0;            ///< AF_INET or AF_INET6
    std::uint8_t bytes[16]{};  ///< 4 or 16 significant bytes
    /** "192.0.2.1" or "2001:db8::1". */
    std::string text() const;
};

/** The first IPv4 address (else a global IPv6 address) of network device @p netdev; nullopt when none. */
std::optional<IpAddress> netdev_ip(const std::string& netdev);

}  // namespace loom::uct::ib
