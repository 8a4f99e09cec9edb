/**
 * LOOM_IB_* configuration of the verbs transports: one table, filled per iface in
 * iface_open (environment, configuration file, then IfaceParams::config_overrides),
 * and by the md when it opens (environment and configuration file only: md_open takes
 * no overrides), for the one field that belongs to the md, LOOM_IB_RCACHE.
 */
#pragma once

#include "ucs/config/parser.h"
#include "ucs/config/table.h"

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace loom::uct::ib {

/** How rc endpoints are connected. */
enum class CmMode : std::uint8_t {
    auto_,   ///< verbs endpoint-to-endpoint on InfiniBand and RoCE, rdma_cm on iWARP (which requires it)
    verbs,   ///< connect-to-ep: the QPs are moved to RTS with the peer's QP number and GID (not iWARP)
    rdmacm,  ///< connect-to-iface: the iface listens on an rdma_cm id at its IP address
    /** rdmacm where the port has an IP address and rdma_cm works, else verbs (the protocol layer's default). */
    prefer_rdmacm,
};

/** Who performs rc's atomic operations (LOOM_IB_ATOMICS). */
enum class AtomicPath : std::uint8_t {
    auto_,   ///< the NIC where the device has atomics, else the target's CPU
    device,  ///< the NIC: verbs' 64-bit fetch-and-add and compare-and-swap only
    cpu,     ///< the target's CPU, in its progress: every operation, 32 and 64 bits
};

/** Values of the LOOM_IB_* variables. */
struct IbConfig {
    unsigned gid_index = 0;           ///< ucs::config::kAuto<unsigned>: RoCE v2 IPv4 first
    std::size_t tx_queue_len = 0;     ///< send queue entries of each QP
    std::size_t tx_cq_len = 0;        ///< send completion queue entries of the iface
    std::size_t rx_queue_len = 0;     ///< receive buffers the SRQ can hold (all endpoints together)
    std::size_t fc_window = 0;        ///< active messages a peer may send before the receiver returns credits
    std::size_t max_inline = 0;       ///< ucs::config::kSizeAuto: the device's maximum
    std::size_t seg_size = 0;         ///< largest active message payload (receive buffer size)
    unsigned tx_signal_interval = 0;  ///< request a completion at least every this many sends
    ucs::config::Ternary srq = ucs::config::Ternary::auto_;
    CmMode cm = CmMode::auto_;
    AtomicPath atomics = AtomicPath::auto_;
    std::chrono::nanoseconds timeout{};  ///< transport retry (ack) timeout
    unsigned retry_count = 0;
    unsigned rnr_retry = 0;
    unsigned max_rd_atomic = 0;  ///< RDMA READs and atomics in flight per QP
    unsigned path_mtu = 0;       ///< kAuto<unsigned>: the port's active MTU
    unsigned traffic_class = 0;
    unsigned hop_limit = 0;
    unsigned service_level = 0;
    std::chrono::nanoseconds cm_timeout{};  ///< rdma_cm address and route resolution
    std::size_t rx_batch = 0;               ///< completions polled at once
    /// LOOM_IB_RCACHE: mem_reg through the registration cache (try: when memory events work).
    ucs::config::Ternary rcache = ucs::config::Ternary::try_;
};

/** The LOOM_IB_* table. */
const ucs::config::Table<IbConfig>& ib_config_table();

/** Name of an atomic path ("auto", "device", "cpu"). */
const char* to_string(AtomicPath path) noexcept;

/** Name of a connection mode ("auto", "verbs", "rdmacm"). */
const char* to_string(CmMode mode) noexcept;

}  // namespace loom::uct::ib
