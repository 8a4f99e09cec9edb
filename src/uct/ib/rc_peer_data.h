/**
 * What an rc peer sends outside its packets, checked in one place:
 *  - the rdma_cm private data (RcCmPrivate, then the user's part): the connect request an
 *    iface or a listener accepts, the accept an initiator gets with its established
 *    event, and a reject's user data;
 *  - its device, iface and endpoint addresses (RcDeviceAddress, RcIfaceAddress,
 *    RcEpAddress), as is_reachable, ep_create and ep_connect_to_ep get them, checked
 *    against what this iface is (RcLocalInfo).
 * No verbs here, so the fuzz target (test/fuzz/fuzz_rc.cc) drives exactly this code
 * without a device.
 */
#pragma once

#include "ucs/type/status.h"
#include "uct/ib/ib_config.h"
#include "uct/ib/rc_wire.h"

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

namespace loom::uct::ib {

/** Received private data, once checked: Loom's header and the user's part after it. */
struct RcCmData {
    RcCmPrivate header{};
    const std::uint8_t* user = nullptr;  ///< into the received buffer, user_len bytes
    std::size_t user_len = 0;
};

/** What is wrong with received private data; none when it is usable. */
enum class RcCmDataError : std::uint8_t { none, missing, version, user_len, window, seg_size };

/**
 * Checks @p len bytes of private data received from a peer and fills @p out. @p seg_size
 * is the iface's receive segment size, which a connecting peer must share; 0 checks only
 * the header and the user's part (a reject carries no usable window). IB pads private
 * data, so @p len may exceed what the peer sent: the user's part is what the header says,
 * bounded by @p len.
 */
inline RcCmDataError parse_cm_data(const void* data, std::size_t len, std::uint32_t seg_size, RcCmData& out) {
    out = RcCmData{};
    if (data == nullptr || len < sizeof(RcCmPrivate)) return RcCmDataError::missing;
    std::memcpy(&out.header, data, sizeof(out.header));
    if (out.header.version != kRcAddrVersion) return RcCmDataError::version;
    if (out.header.user_len > len - sizeof(RcCmPrivate)) return RcCmDataError::user_len;
    out.user = static_cast<const std::uint8_t*>(data) + sizeof(RcCmPrivate);
    out.user_len = out.header.user_len;
    if (seg_size == 0) return RcCmDataError::none;
    if (out.header.window == 0) return RcCmDataError::window;
    if (out.header.seg_size != seg_size) return RcCmDataError::seg_size;
    return RcCmDataError::none;
}

/** One line saying what @p error found in @p data of @p len bytes, for the log. */
inline std::string describe_cm_data(RcCmDataError error, const RcCmData& data, std::size_t len,
                                    std::uint32_t seg_size) {
    switch (error) {
        case RcCmDataError::none:
            return "valid";
        case RcCmDataError::missing:
            return fmt::format("no Loom connection data ({} bytes, at least {} expected)", len,
                               sizeof(RcCmPrivate));
        case RcCmDataError::version:
            return fmt::format("connection data version {} (expected {})", data.header.version,
                               kRcAddrVersion);
        case RcCmDataError::user_len:
            return fmt::format("connection data claims {} bytes of user data in {}", data.header.user_len,
                               len - sizeof(RcCmPrivate));
        case RcCmDataError::window:
            return "connection data with a receive window of 0";
        case RcCmDataError::seg_size:
            return fmt::format("its LOOM_IB_SEG_SIZE is {}, this iface's {}", data.header.seg_size, seg_size);
    }
    return "unknown error";
}

/** What this iface is, as the checks of a peer's addresses need it (RcIface fills it once). */
struct RcLocalInfo {
    bool iwarp = false;
    bool ethernet = false;       ///< Ethernet link layer (RoCE, iWARP)
    bool rdmacm = false;         ///< endpoints connect with rdma_cm
    bool ipv6 = false;           ///< rdma_cm: this iface's IP address is IPv6
    std::uint8_t gid[16] = {};   ///< the GID the iface uses
    std::uint32_t seg_size = 0;  ///< LOOM_IB_SEG_SIZE: peers must agree
};

namespace detail {

/** Records @p why in @p reason (when given) and returns @p status. */
inline Status refuse(std::string* reason, Status status, std::string why) {
    if (reason != nullptr) *reason = std::move(why);
    return status;
}

/** Copies a peer's address of type T (@p what, for the messages) when it has T's size and version. */
template <typename T>
Status copy_address(const std::uint8_t* addr, std::size_t len, const char* what, T& out,
                    std::string* reason) {
    if (addr == nullptr || len != sizeof(T)) {
        return refuse(reason, Status::invalid_address,
                      fmt::format("malformed {} ({} bytes, expected {})", what, len, sizeof(T)));
    }
    std::memcpy(&out, addr, sizeof(T));
    if (out.version != kRcAddrVersion) {
        return refuse(reason, Status::invalid_address,
                      fmt::format("{} version {} (expected {})", what, out.version, kRcAddrVersion));
    }
    return Status::ok;
}

}  // namespace detail

/**
 * Checks a peer's device address of @p len bytes against @p local and fills @p out:
 * invalid_address when it is malformed, unreachable when it is well formed but names a
 * device this one cannot reach (another transport, link layer, IP family or subnet).
 */
inline Status check_dev_address(const std::uint8_t* addr, std::size_t len, const RcLocalInfo& local,
                                RcDeviceAddress& out, std::string* reason) {
    if (Status s = detail::copy_address(addr, len, "rc device address", out, reason); s != Status::ok)
        return s;
    if (out.flags & ~(kDevAddrIwarp | kDevAddrEthernet | kDevAddrIpv6 | kDevAddrHasIp)) {
        return detail::refuse(reason, Status::invalid_address,
                              fmt::format("rc device address has unknown flags {:#x}", out.flags));
    }
    const bool peer_iwarp = out.flags & kDevAddrIwarp;
    if (peer_iwarp != local.iwarp) {
        return detail::refuse(reason, Status::unreachable,
                              fmt::format("peer is {}, this device is {}", peer_iwarp ? "iWARP" : "not iWARP",
                                          local.iwarp ? "iWARP" : "not iWARP"));
    }
    if (static_cast<bool>(out.flags & kDevAddrEthernet) != local.ethernet) {
        return detail::refuse(reason, Status::unreachable,
                              "peer's link layer differs (Ethernet vs InfiniBand)");
    }
    if (local.rdmacm) {
        if (!(out.flags & kDevAddrHasIp)) {
            return detail::refuse(reason, Status::unreachable, "peer has no IP address for rdma_cm");
        }
        if (static_cast<bool>(out.flags & kDevAddrIpv6) != local.ipv6) {
            return detail::refuse(reason, Status::unreachable, "peer's IP address family differs");
        }
    } else if (local.ethernet) {
        // RoCE v2 routes over IP: an IPv4-mapped GID reaches only IPv4-mapped GIDs.
        static const std::uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        const bool peer_v4 = std::memcmp(out.gid, v4_prefix, sizeof(v4_prefix)) == 0;
        const bool own_v4 = std::memcmp(local.gid, v4_prefix, sizeof(v4_prefix)) == 0;
        if (peer_v4 != own_v4) {
            return detail::refuse(reason, Status::unreachable, "peer's GID is of another IP family");
        }
    } else if (std::memcmp(out.gid, local.gid, 8) != 0) {
        return detail::refuse(reason, Status::unreachable,
                              "peer is on another InfiniBand subnet (GID prefix differs)");
    }
    return Status::ok;
}

/** Checks a peer's iface address of @p len bytes against @p local and fills @p out (as check_dev_address). */
inline Status check_iface_address(const std::uint8_t* addr, std::size_t len, const RcLocalInfo& local,
                                  RcIfaceAddress& out, std::string* reason) {
    if (Status s = detail::copy_address(addr, len, "rc iface address", out, reason); s != Status::ok)
        return s;
    if (out.cm != static_cast<std::uint8_t>(CmMode::verbs) &&
        out.cm != static_cast<std::uint8_t>(CmMode::rdmacm)) {
        return detail::refuse(reason, Status::invalid_address,
                              fmt::format("rc iface address has unknown connection mode {}", out.cm));
    }
    const bool peer_rdmacm = out.cm == static_cast<std::uint8_t>(CmMode::rdmacm);
    if (peer_rdmacm != local.rdmacm) {
        return detail::refuse(
            reason, Status::unreachable,
            fmt::format("peer connects with {}, this iface with {}", peer_rdmacm ? "rdma_cm" : "verbs",
                        local.rdmacm ? "rdma_cm" : "verbs"));
    }
    if (peer_rdmacm && out.port == 0) {
        return detail::refuse(reason, Status::invalid_address, "rc iface address has no rdma_cm port");
    }
    if (out.seg_size != local.seg_size) {
        return detail::refuse(
            reason, Status::unreachable,
            fmt::format("peer's LOOM_IB_SEG_SIZE is {}, this iface's {}", out.seg_size, local.seg_size));
    }
    return Status::ok;
}

/**
 * Checks a peer endpoint's address (connect-to-ep) of @p len bytes and fills @p out:
 * invalid_address when malformed (version, an MTU verbs does not have, a zero window, a
 * QP number out of range), unreachable when its segment size differs from @p local's.
 */
inline Status check_ep_address(const std::uint8_t* addr, std::size_t len, const RcLocalInfo& local,
                               RcEpAddress& out, std::string* reason) {
    if (Status s = detail::copy_address(addr, len, "rc endpoint address", out, reason); s != Status::ok)
        return s;
    // ibv_mtu's values: IBV_MTU_256 (1) to IBV_MTU_4096 (5).
    if (out.mtu < 1 || out.mtu > 5 || out.window == 0 || out.qpn == 0 || out.qpn > 0xffffff) {
        return detail::refuse(reason, Status::invalid_address,
                              fmt::format("invalid rc endpoint address (mtu {}, window {}, qpn {:#x})",
                                          out.mtu, out.window, out.qpn));
    }
    if (out.seg_size != local.seg_size) {
        return detail::refuse(
            reason, Status::unreachable,
            fmt::format("peer's LOOM_IB_SEG_SIZE is {}, this iface's {}", out.seg_size, local.seg_size));
    }
    return Status::ok;
}

}  // namespace loom::uct::ib
