/**
 * The rdma_cm private data a peer sends (RcCmPrivate, then the user's part), checked in
 * one place: the connect request an iface or a listener accepts, the accept an initiator
 * gets with its established event, and a reject's user data. No verbs here, so the fuzz
 * target (test/fuzz/fuzz_rc_cm.cc) drives exactly this code without a device.
 */
#pragma once

#include "uct/ib/rc_wire.h"

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

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

}  // namespace loom::uct::ib
