#include "uct/ib/ib_config.h"

#include "ucs/config/registry.h"

namespace loom::uct::ib {

namespace cfg = ucs::config;

namespace {

const cfg::RegisteredTable<IbConfig> kIbTable{
    "IB_",
    "RDMA verbs transports",
    "InfiniBand, RoCE and iWARP devices through rdma-core (the rc transport of the ib module).",
    {
        cfg::field("GID_INDEX", "auto",
                   "GID table index used for RoCE addressing. auto picks the first RoCE v2 GID of an IPv4 "
                   "address, then RoCE v2 IPv6, then RoCE v1, and logs its choice at info level.",
                   &IbConfig::gid_index, cfg::IntParser<unsigned>().range(0, 65535).allow_auto()),
        cfg::field("TX_QUEUE_LEN", "256", "Send queue entries of each queue pair.", &IbConfig::tx_queue_len,
                   cfg::SizeParser()),
        cfg::field("TX_CQ_LEN", "4096",
                   "Send completion queue entries of an iface: the requests in flight on all its endpoints "
                   "together (capped by the device).",
                   &IbConfig::tx_cq_len, cfg::SizeParser()),
        cfg::field("RX_QUEUE_LEN", "8192",
                   "Receive buffers of all endpoints of an iface together (the shared receive queue, or the "
                   "endpoints' own queues). Each connected endpoint reserves FC_WINDOW + 2 (one that waits "
                   "for its first use, none), which bounds the connections of an iface: 8192 / (32 + 2) = "
                   "240 with the defaults.",
                   &IbConfig::rx_queue_len, cfg::SizeParser()),
        cfg::field("FC_WINDOW", "32",
                   "Active messages an endpoint may send before the receiver grants more credits. Receive "
                   "buffers are reserved for the whole window, so a receiver is never overrun (no RNR).",
                   &IbConfig::fc_window, cfg::SizeParser()),
        cfg::field("TX_MAX_INLINE", "auto",
                   "Largest data posted inline with the work request (short messages); auto takes the "
                   "device's maximum.",
                   &IbConfig::max_inline, cfg::SizeParser().allow_auto()),
        cfg::field("SEG_SIZE", "8k",
                   "Largest active message payload, the size of each receive and bounce buffer. Both peers "
                   "must use the same value.",
                   &IbConfig::seg_size, cfg::SizeParser()),
        cfg::field("TX_SIGNAL_INTERVAL", "32",
                   "A send completion is requested at least every this many work requests (selective "
                   "signaling); operations that report completion are always signaled.",
                   &IbConfig::tx_signal_interval, cfg::IntParser<unsigned>().range(1, 65535)),
        cfg::field("SRQ", "auto",
                   "Use a shared receive queue: yes, no, try or auto (where the device has one).",
                   &IbConfig::srq, cfg::TernaryParser()),
        cfg::field(
            "CM", "auto",
            "Connection method: verbs (endpoint to endpoint, InfiniBand and RoCE), rdmacm (the iface "
            "listens on its IP address; required on iWARP), prefer_rdmacm (rdmacm where the port has an "
            "IP address, else verbs; what the protocol layer uses unless this is set) or auto (verbs, "
            "rdmacm on iWARP).",
            &IbConfig::cm,
            cfg::EnumParser<CmMode>({{"auto", CmMode::auto_},
                                     {"verbs", CmMode::verbs},
                                     {"rdmacm", CmMode::rdmacm},
                                     {"prefer_rdmacm", CmMode::prefer_rdmacm}})),
        cfg::field(
            "ATOMICS", "auto",
            "Who performs atomic operations: device (the NIC; verbs defines only 64-bit fetch-and-add "
            "and compare-and-swap, and they are not atomic with the CPU's atomics on the same word), "
            "cpu (the target's progress applies every operation, 32 and 64 bits, with CPU atomics, "
            "like shm and tcp, so all transports' atomics on a word are atomic together) or auto "
            "(device where the device has atomics, else cpu). The protocol layer sets it from "
            "LOOM_ATOMIC_MODE unless this is set.",
            &IbConfig::atomics,
            cfg::EnumParser<AtomicPath>(
                {{"auto", AtomicPath::auto_}, {"device", AtomicPath::device}, {"cpu", AtomicPath::cpu}})),
        cfg::field("TIMEOUT", "1s",
                   "Time the transport waits for an acknowledgement before retransmitting (rounded up to the "
                   "verbs encoding, 4.096 us * 2^n).",
                   &IbConfig::timeout, cfg::TimeParser()),
        cfg::field("RETRY_COUNT", "7",
                   "Retransmissions before a queue pair fails with a retry error (Soft-RoCE takes 7 as "
                   "unlimited: only keep-alive or another lane then notices a dead peer).",
                   &IbConfig::retry_count, cfg::IntParser<unsigned>().range(0, 7)),
        cfg::field("RNR_RETRY", "7",
                   "Retries when the receiver has no buffer posted (7: unlimited). Flow control keeps this "
                   "from happening; the setting is a safety net.",
                   &IbConfig::rnr_retry, cfg::IntParser<unsigned>().range(0, 7)),
        cfg::field("MAX_RD_ATOMIC", "16",
                   "RDMA reads and atomics in flight per queue pair (capped by the device).",
                   &IbConfig::max_rd_atomic, cfg::IntParser<unsigned>().range(1, 255)),
        cfg::field("PATH_MTU", "auto",
                   "Path MTU in bytes (256, 512, 1024, 2048, 4096); auto: the port's active MTU.",
                   &IbConfig::path_mtu, cfg::IntParser<unsigned>().range(256, 4096).allow_auto()),
        cfg::field("TRAFFIC_CLASS", "0", "Traffic class (RoCE: DSCP and ECN bits) of outgoing packets.",
                   &IbConfig::traffic_class, cfg::IntParser<unsigned>().range(0, 255)),
        cfg::field("HOP_LIMIT", "64", "Hop limit (TTL) of routed packets.", &IbConfig::hop_limit,
                   cfg::IntParser<unsigned>().range(1, 255)),
        cfg::field("SL", "0", "Service level.", &IbConfig::service_level,
                   cfg::IntParser<unsigned>().range(0, 15)),
        cfg::field("CM_TIMEOUT", "5s", "Time rdma_cm may take to resolve an address or a route.",
                   &IbConfig::cm_timeout, cfg::TimeParser()),
        cfg::field("RX_BATCH", "16", "Completions taken from a completion queue at once.",
                   &IbConfig::rx_batch, cfg::SizeParser()),
        cfg::field("RCACHE", "try",
                   "Keep memory registrations in a registration cache (LOOM_RCACHE_*), so that registering "
                   "the same memory again costs a lookup instead of a system call. try: use it when memory "
                   "events work (LOOM_MEM_EVENTS is not none and its hooks work in this process), else "
                   "register at every mem_reg; yes: opening a device fails without it; no: register at "
                   "every mem_reg. Read when a device is opened.",
                   &IbConfig::rcache, cfg::TernaryParser().disallow_auto()),
    }};

}  // namespace

const cfg::Table<IbConfig>& ib_config_table() { return kIbTable; }

const char* to_string(AtomicPath path) noexcept {
    switch (path) {
        case AtomicPath::auto_:
            return "auto";
        case AtomicPath::device:
            return "device";
        case AtomicPath::cpu:
            return "cpu";
    }
    return "unknown";
}

const char* to_string(CmMode mode) noexcept {
    switch (mode) {
    case CmMode::auto_: return "auto";
    case CmMode::verbs: return "verbs";
    case CmMode::rdmacm: return "rdmacm";
    case CmMode::prefer_rdmacm: return "prefer_rdmacm";
    }
    return "unknown";
}

}  // namespace loom::uct::ib
