/**
 * The rc iface (see rc_iface.h): construction and its resources (CQs, SRQ, registered
 * pools), attributes and addresses, the endpoint objects from creation to reaping, and
 * the receive buffers. The QP of an endpoint is in rc_qp.cc, connection set-up in
 * rc_cm.cc, progress and completions in rc_rx.cc, wake-up events in rc_event.cc.
 */
#include "uct/ib/rc_iface.h"

#include "uct/ib/ib_log.h"
#include "uct/ib/ib_md.h"

#include "ucs/config/table.h"
#include "ucs/memory/aligned.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <random>

namespace loom::uct::ib {

namespace {

/** How long a destroyed endpoint may wait for its flushed requests before its QP is destroyed anyway. */
constexpr auto kCloseDeadline = std::chrono::seconds(5);

/** Offset of a receive descriptor's index in RcIface::rx_descs_ (just before its lkey). */
constexpr std::size_t kRxDescIndex = 52;

/** The verbs timeout exponent n with 4.096 us * 2^n >= @p t (1 .. 31). */
std::uint8_t timeout_exponent(std::chrono::nanoseconds t) {
    double units = static_cast<double>(t.count()) / 4096.0;
    int n = units <= 1 ? 1 : static_cast<int>(std::ceil(std::log2(units)));
    return static_cast<std::uint8_t>(std::clamp(n, 1, 31));
}

std::uint32_t random_psn() {
    static thread_local std::mt19937 rng(std::random_device{}());
    return rng() & 0xffffff;
}

}  // namespace

// --- construction ---------------------------------------------------------------------------

Result<std::unique_ptr<Iface>> rc_iface_open(IbMd* md, const PortInfo& port, Worker* worker,
                                             const TlResource& resource, const IfaceParams& params) {
    IbConfig config;
    if (Status s = ucs::config::fill(ib_config_table(), config, params.config_overrides); s != Status::ok) {
        return s;
    }
    auto iface = std::make_unique<RcIface>(md, port, worker, resource, config);
    if (Status s = iface->init(); s != Status::ok) return s;
    return std::unique_ptr<Iface>(std::move(iface));
}

namespace {

/** Who performs the atomics of an iface with @p config on @p dev: device, cpu, or auto_ for none. */
AtomicPath resolve_atomics(const IbConfig& config, const DeviceInfo& dev) {
    switch (config.atomics) {
        case AtomicPath::device:
            return dev.atomics() ? AtomicPath::device : AtomicPath::auto_;
        case AtomicPath::cpu:
            return AtomicPath::cpu;
        case AtomicPath::auto_:
            break;
    }
    return dev.atomics() ? AtomicPath::device : AtomicPath::cpu;
}

const IfaceOps& ops_for(AtomicPath path) {
    switch (path) {
        case AtomicPath::device:
            return kRcOps;
        case AtomicPath::cpu:
            return kRcOpsCpuAtomics;
        case AtomicPath::auto_:
            break;
    }
    return kRcOpsNoAtomics;
}

}  // namespace

RcIface::RcIface(IbMd* md, const PortInfo& port, Worker* worker, const TlResource& resource,
                 const IbConfig& config)
    : Iface(md, worker, resource, ops_for(resolve_atomics(config, md->device()))),
      md_(md),
      config_(config),
      port_(port),
      iwarp_(md->device().iwarp),
      atomics_(md->device().atomics()),
      atomic_path_(resolve_atomics(config, md->device())) {}

Status RcIface::check_config() {
    const DeviceInfo& dev = md_->device();
    const std::string& name = resource().dev_name;
    auto bad = [&](const std::string& what) {
        LOOM_LOG_ERROR("rc/{}: {}", name, what);
        return Status::invalid_config;
    };
    if (config_.seg_size < 64 || config_.seg_size > (1u << 30)) {
        return bad(fmt::format("LOOM_IB_SEG_SIZE={} is outside 64 .. 1g", config_.seg_size));
    }
    if (config_.fc_window < 1 || config_.fc_window > 16384) {
        return bad(fmt::format("LOOM_IB_FC_WINDOW={} is outside 1 .. 16384", config_.fc_window));
    }
    if (config_.tx_queue_len < 8 || config_.tx_queue_len > static_cast<std::size_t>(dev.attr.max_qp_wr)) {
        return bad(fmt::format("LOOM_IB_TX_QUEUE_LEN={} is outside 8 .. {} (device limit)",
                               config_.tx_queue_len, dev.attr.max_qp_wr));
    }
    std::size_t per_ep = config_.fc_window + kGrantSlots;
    if (config_.rx_queue_len < per_ep || config_.rx_queue_len > static_cast<std::size_t>(dev.attr.max_cqe)) {
        return bad(
            fmt::format("LOOM_IB_RX_QUEUE_LEN={} must hold at least one endpoint's window ({}) and at most "
                        "the device's completion queue ({})",
                        config_.rx_queue_len, per_ep, dev.attr.max_cqe));
    }
    if (config_.tx_cq_len < config_.tx_queue_len) {
        return bad(fmt::format("LOOM_IB_TX_CQ_LEN={} is below LOOM_IB_TX_QUEUE_LEN={}", config_.tx_cq_len,
                               config_.tx_queue_len));
    }
    if (config_.rx_batch < 1 || config_.rx_batch > 256) {
        return bad(fmt::format("LOOM_IB_RX_BATCH={} is outside 1 .. 256", config_.rx_batch));
    }
    return Status::ok;
}

Status RcIface::init() {
    const DeviceInfo& dev = md_->device();
    const std::string& name = resource().dev_name;
    if (Status s = check_config(); s != Status::ok) return s;

    // Connection model.
    CmMode cm = config_.cm;
    if (cm == CmMode::auto_) cm = iwarp_ ? CmMode::rdmacm : CmMode::verbs;
    if (cm == CmMode::prefer_rdmacm) {
        // InfiniBand without IPoIB has no address rdma_cm could listen on: verbs, wired up
        // by the layer above.
        const bool usable = iwarp_ || (md_->rdmacm_usable() && netdev_ip(port_.netdev).has_value());
        cm = usable ? CmMode::rdmacm : CmMode::verbs;
        LOOM_LOG_DEBUG("rc/{}: LOOM_IB_CM=prefer_rdmacm: {}", name, to_string(cm));
    }
    if (cm == CmMode::verbs && iwarp_) {
        LOOM_LOG_ERROR("rc/{}: LOOM_IB_CM=verbs is impossible on iWARP, which connects through rdma_cm",
                       name);
        return Status::invalid_config;
    }
    use_rdmacm_ = cm == CmMode::rdmacm;
    if (use_rdmacm_) {
        if (!md_->rdmacm_usable()) {
            LOOM_LOG_ERROR("rc/{}: rdma_cm is needed to connect but is unavailable (is rdma_ucm loaded?)",
                           name);
            return Status::no_device;
        }
        ip_ = netdev_ip(port_.netdev);
        if (!ip_) {
            LOOM_LOG_ERROR("rc/{}: rdma_cm connections need an IP address on {}, which has none", name,
                           port_.netdev.empty() ? std::string("the port's network device") : port_.netdev);
            return Status::no_device;
        }
    }

    // Addressing: the GID (RoCE), the path MTU, the transport timeouts.
    auto gid = choose_gid(dev, port_, config_.gid_index);
    if (!gid) return gid.status();
    gid_index_ = *gid;
    for (const GidEntry& g : port_.gids) {
        if (g.index == gid_index_) gid_ = g.gid;
    }
    if (!iwarp_ && port_.ethernet() && config_.gid_index == kGidAuto) {
        for (const GidEntry& g : port_.gids) {
            if (g.index == gid_index_) {
                LOOM_LOG_INFO("rc/{}: using GID index {} ({}, {}{})", name, g.index, gid_text(g.gid),
                              g.type_text(), g.netdev.empty() ? "" : " on " + g.netdev);
            }
        }
    }
    path_mtu_ = port_.attr.active_mtu;
    if (config_.path_mtu != ucs::config::kAuto<unsigned>) {
        auto mtu = mtu_from_bytes(config_.path_mtu);
        if (!mtu) {
            LOOM_LOG_ERROR("rc/{}: LOOM_IB_PATH_MTU={} is not 256, 512, 1024, 2048 or 4096", name,
                           config_.path_mtu);
            return Status::invalid_config;
        }
        path_mtu_ = std::min(*mtu, port_.attr.active_mtu);
    }
    timeout_exp_ = timeout_exponent(config_.timeout);
    max_rd_atomic_ =
        std::clamp<std::uint32_t>(config_.max_rd_atomic, 1, std::max(1, dev.attr.max_qp_init_rd_atom));
    max_dest_rd_atomic_ = std::clamp<std::uint32_t>(dev.attr.max_qp_rd_atom, 1, 255);
    max_send_sge = static_cast<std::uint32_t>(std::clamp<int>(dev.attr.max_sge, 1, kMaxSge));
    max_read_sge = static_cast<std::uint32_t>(
        std::clamp<int>(dev.attr.max_sge_rd > 0 ? dev.attr.max_sge_rd : dev.attr.max_sge, 1, kMaxSge));
    max_zcopy = static_cast<std::uint32_t>(std::min<std::uint64_t>(port_.attr.max_msg_sz, 1u << 30));
    seg_size = static_cast<std::uint32_t>(config_.seg_size);
    fc_window_ = static_cast<std::uint32_t>(config_.fc_window);
    grant_threshold = static_cast<std::uint16_t>(std::max<std::uint32_t>(1, (fc_window_ + 1) / 2));
    signal_interval =
        static_cast<std::uint32_t>(std::min<std::size_t>(config_.tx_signal_interval, config_.tx_queue_len));
    rx_budget_ = static_cast<std::uint32_t>(config_.rx_queue_len);
    tx_queue_len_ = static_cast<std::uint32_t>(config_.tx_queue_len);
    wcs_.resize(config_.rx_batch);

    // Completion queues, reporting to one channel (wake-up events, rc_event.cc), and the
    // shared receive queue.
    if (Status s = create_comp_channel(); s != Status::ok) return s;
    int tx_cq_len = static_cast<int>(std::min<std::size_t>(config_.tx_cq_len, dev.attr.max_cqe));
    send_cq_ = ibv_create_cq(md_->context(), tx_cq_len, nullptr, comp_channel_, 0);
    recv_cq_ =
        ibv_create_cq(md_->context(), static_cast<int>(config_.rx_queue_len), nullptr, comp_channel_, 0);
    if (send_cq_ == nullptr || recv_cq_ == nullptr) {
        LOOM_LOG_ERROR("rc/{}: ibv_create_cq failed: {}", name, std::strerror(errno));
        return Status::no_resource;
    }
    cq_avail = tx_cq_len;
    bool want_srq = config_.srq != ucs::config::Ternary::no;
    if (want_srq && dev.attr.max_srq > 0 &&
        config_.rx_queue_len <= static_cast<std::size_t>(dev.attr.max_srq_wr)) {
        ibv_srq_init_attr srq_attr{};
        srq_attr.attr.max_wr = static_cast<std::uint32_t>(config_.rx_queue_len);
        srq_attr.attr.max_sge = 1;
        srq_ = ibv_create_srq(md_->pd(), &srq_attr);
        if (srq_ == nullptr) {
            LOOM_LOG_DIAG("rc/{}: ibv_create_srq failed ({}); each endpoint gets its own receive queue", name,
                          std::strerror(errno));
        }
    }
    if (srq_ == nullptr && config_.srq == ucs::config::Ternary::yes) {
        LOOM_LOG_ERROR(
            "rc/{}: LOOM_IB_SRQ=yes but the device cannot create a shared receive queue of {} entries", name,
            config_.rx_queue_len);
        return Status::unsupported;
    }

    if (Status s = probe_inline(); s != Status::ok) return s;
    max_am_short = max_inline >= sizeof(RcAmHdr) + sizeof(std::uint64_t)
                       ? static_cast<std::uint32_t>(max_inline - sizeof(RcAmHdr) - sizeof(std::uint64_t))
                       : 0;
    max_am_zcopy_hdr = static_cast<std::uint32_t>(std::min<std::size_t>(128, seg_size));

    if (Status s = init_pools(); s != Status::ok) return s;
    if (use_rdmacm_) {
        if (Status s = cm_listen(); s != Status::ok) return s;
        cm_last_poll_ = ucs::get_time();  // also starts the clock before the conversion below
        cm_idle_ticks_ = ucs::us_to_ticks(kCmIdlePollUs);
    }
    LOOM_LOG_DEBUG(
        "rc/{}: iface open: {}, {} connect, path MTU {}, inline {}, sge {}/{} (read), {} , window {}", name,
        iwarp_ ? "iWARP" : (port_.ethernet() ? "RoCE" : "InfiniBand"), use_rdmacm_ ? "rdma_cm" : "verbs",
        mtu_bytes(path_mtu_), max_inline, max_send_sge, max_read_sge, srq_ ? "SRQ" : "per-QP receive queues",
        fc_window_);
    return Status::ok;
}

Status RcIface::init_pools() {
    const std::string& name = resource().dev_name;
    auto registered = [this](ucs::MemPoolParams& p, const char* what) {
        p.chunk_init = [this, what](void* base, std::size_t length) {
            ibv_mr* mr = md_->reg_internal(base, length, what);
            if (mr == nullptr) return Status::no_memory;
            chunk_mrs_.push_back(mr);
            chunk_lkey_ = mr->lkey;
            return Status::ok;
        };
        p.chunk_cleanup = [this](void* base, std::size_t) {
            auto it = std::find_if(chunk_mrs_.begin(), chunk_mrs_.end(),
                                   [base](ibv_mr* mr) { return mr->addr == base; });
            if (it != chunk_mrs_.end()) {
                (void)ibv_dereg_mr(*it);
                chunk_mrs_.erase(it);
            }
        };
    };
    ucs::MemPoolParams tx;
    tx.name = "rc_tx_desc/" + name;
    tx.elem_size = kTxDescPayload + seg_size;
    tx.alignment = kCacheLineSize;
    tx.elems_per_chunk = std::clamp<std::size_t>((256 * 1024) / tx.elem_size, 8, 256);
    registered(tx, "bounce buffers");
    tx.obj_init = [this](void* elem) {
        auto* op = ::new (elem) TxOp{};
        op->lkey = chunk_lkey_;
    };
    if (Status s = tx_desc_pool.init(std::move(tx)); s != Status::ok) return s;

    ucs::MemPoolParams ops;
    ops.name = "rc_tx_op/" + name;
    ops.elem_size = sizeof(TxOp);
    ops.elems_per_chunk = 256;
    ops.obj_init = [](void* elem) { ::new (elem) TxOp{}; };
    if (Status s = op_pool.init(std::move(ops)); s != Status::ok) return s;

    ucs::MemPoolParams rx;
    rx.name = "rc_rx_desc/" + name;
    rx.elem_size = kRxDescPayload + seg_size;
    rx.alignment = kCacheLineSize;
    rx.elems_per_chunk = std::clamp<std::size_t>((256 * 1024) / rx.elem_size, 8, 256);
    registered(rx, "receive buffers");
    rx.obj_init = [this](void* elem) {
        auto* bytes = static_cast<std::uint8_t*>(elem);
        std::memcpy(bytes + kRxDescLkey, &chunk_lkey_, sizeof(chunk_lkey_));
        // The index is written once, here; the posted mark lives outside the element, so it can be
        // read when the element is free (free pool elements are poisoned in ASan builds).
        auto index = static_cast<std::uint32_t>(rx_descs_.size());
        std::memcpy(bytes + kRxDescIndex, &index, sizeof(index));
        rx_descs_.push_back(elem);
        rx_posted_.push_back(0);
    };
    if (Status s = rx_pool.init(std::move(rx)); s != Status::ok) return s;

    // One registered word where the old values of posted (non-fetching) atomics land, and on
    // iWARP, in the next cache line, the word peers read to flush (see RcCmPrivate).
    if (Status s = ucs::alloc_aligned(2 * kCacheLineSize, kCacheLineSize, atomic_scratch_mem_); s != Status::ok) {
        return s;
    }
    std::memset(atomic_scratch_mem_, 0, 2 * kCacheLineSize);
    atomic_scratch = static_cast<std::uint64_t*>(atomic_scratch_mem_);
    scratch_mr_ = md_->reg_internal(atomic_scratch_mem_, kCacheLineSize, "atomic scratch word");
    if (scratch_mr_ == nullptr) return Status::no_memory;
    atomic_scratch_lkey = scratch_mr_->lkey;
    if (iwarp_) {
        flush_word_mr_ = md_->reg_internal(static_cast<std::uint8_t*>(atomic_scratch_mem_) + kCacheLineSize,
                                           sizeof(std::uint64_t), "flush word", kAccessRemoteGet);
        if (flush_word_mr_ == nullptr) return Status::no_memory;
    }
    return Status::ok;
}

RcIface::~RcIface() {
    progress_disable();
    close_events();
    cm_close_listeners();
    // Endpoints first (their QPs reference the CQs and the SRQ), without waiting for anything.
    for (RcEp* ep : eps_) {
        discard_ops(ep, false);
        // Peers learn at once that the connection is gone (rdma_cm); verbs peers by their retries.
        if (ep->cold->cm_id != nullptr && ep->cold->cm_state == CmState::connected) {
            (void)rdma_disconnect(ep->cold->cm_id);
        }
        delete_ep(ep);
    }
    for (RcEp* ep : closing_) delete_ep(ep);
    eps_.clear();
    closing_.clear();
    while (IfaceFlush* f = flushes_) {
        flushes_ = f->next;
        delete f;
    }
    for (rdma_cm_id* id : cm_dead_ids_) (void)rdma_destroy_id(id);
    if (cm_listen_id_ != nullptr) (void)rdma_destroy_id(cm_listen_id_);
    if (cm_channel_ != nullptr) rdma_destroy_event_channel(cm_channel_);
    if (srq_ != nullptr) (void)ibv_destroy_srq(srq_);
    if (send_cq_ != nullptr) (void)ibv_destroy_cq(send_cq_);
    if (recv_cq_ != nullptr) (void)ibv_destroy_cq(recv_cq_);
    if (comp_channel_ != nullptr) (void)ibv_destroy_comp_channel(comp_channel_);  // after its CQs
    // Receive buffers still posted belong to no queue any more: give them back so the pool
    // sees every element returned (those an active-message handler kept are the user's).
    for (std::size_t i = 0; i < rx_descs_.size(); ++i) {
        if (rx_posted_[i] != 0) {
            rx_posted_[i] = 0;
            rx_pool.put(rx_descs_[i]);
        }
    }
    if (scratch_mr_ != nullptr) (void)ibv_dereg_mr(scratch_mr_);
    if (flush_word_mr_ != nullptr) (void)ibv_dereg_mr(flush_word_mr_);
    if (atomic_scratch_mem_ != nullptr) ucs::free_aligned(atomic_scratch_mem_);
}

// --- attributes and addresses ---------------------------------------------------------------

Status RcIface::query(IfaceAttr& attr) const {
    attr = {};
    attr.cap_flags = kCapAmBcopy | kCapAmZcopy | kCapPending | kCapPutBcopy | kCapPutZcopy | kCapGetBcopy |
                     kCapGetZcopy | kCapErrHandlingPeerFailure | kCapEventRecv | kCapEpCheck;
    if (max_am_short > 0) attr.cap_flags |= kCapAmShort;
    if (max_inline > 0) attr.cap_flags |= kCapPutShort;
    attr.cap_flags |=
        use_rdmacm_ ? kCapConnectToIface | kCapConnectToSockaddr | kCapConnectOnFirstUse : kCapConnectToEp;
    attr.max_conn_priv = use_rdmacm_ ? kRcMaxUserPriv : 0;
    if (atomic_path_ == AtomicPath::device) {
        attr.cap_flags |= kCapAtomic64 | kCapAtomicDevice;
        attr.atomic64_ops = atomic_op_bit(AtomicOp::add) | atomic_op_bit(AtomicOp::cswap);
    } else if (atomic_path_ == AtomicPath::cpu) {
        attr.cap_flags |= kCapAtomic32 | kCapAtomic64;
        attr.atomic32_ops = attr.atomic64_ops =
            atomic_op_bit(AtomicOp::add) | atomic_op_bit(AtomicOp::and_) | atomic_op_bit(AtomicOp::or_) |
            atomic_op_bit(AtomicOp::xor_) | atomic_op_bit(AtomicOp::swap) | atomic_op_bit(AtomicOp::cswap);
    }
    // A zcopy message (header and payload) must fit one receive buffer.
    attr.am = {.max_short = max_am_short,
               .max_bcopy = seg_size,
               .min_zcopy = 0,
               .max_zcopy = seg_size - max_am_zcopy_hdr,
               .max_iov = max_send_sge - 1,
               .opt_zcopy_align = 1,
               .max_hdr = max_am_zcopy_hdr};
    attr.put = {.max_short = max_inline,
                .max_bcopy = seg_size,
                .min_zcopy = 0,
                .max_zcopy = max_zcopy,
                .max_iov = max_send_sge,
                .opt_zcopy_align = 1,
                .max_hdr = 0};
    attr.get = {.max_short = 0,
                .max_bcopy = seg_size,
                .min_zcopy = 0,
                .max_zcopy = max_zcopy,
                .max_iov = max_read_sge,
                .opt_zcopy_align = 1,
                .max_hdr = 0};
    attr.device_addr_len = sizeof(RcDeviceAddress);
    attr.iface_addr_len = sizeof(RcIfaceAddress);
    attr.ep_addr_len = use_rdmacm_ ? 0 : sizeof(RcEpAddress);
    perf_model(attr);
    attr.ep_size = sizeof(RcEp);
    return Status::ok;
}

void RcIface::perf_model(IfaceAttr& attr) const {
    const DeviceInfo& dev = md_->device();
    // Wire efficiency: payload / (payload + per-packet headers) at the path MTU. Headers per
    // packet: InfiniBand LRH+BTH+ICRC+VCRC = 26 B; RoCE v2 adds Ethernet (incl. preamble,
    // inter-frame gap, FCS: 38 B), IPv4 20 B and UDP 8 B to BTH+ICRC (16 B); iWARP has
    // Ethernet 38 B, IPv4 20 B, TCP with timestamps 32 B, MPA 6 B + CRC 4 B, DDP/RDMAP 18 B.
    double mtu = mtu_bytes(path_mtu_);
    double header = iwarp_ ? 118 : (port_.ethernet() ? 82 : 26);
    double wire = port_.rate_gbps() * 1e9 / 8 * (mtu / (mtu + header));
    if (dev.software) {
        // rxe and siw run in the kernel's network stack on the host CPU: the CPU, not the link,
        // sets the pace. Measured on this machine in the rdma-vm (qemu TCG, 2 vCPUs, MTU 1500,
        // one device, client and server processes) with loom_perftest -x rc (LOOM_IB_CM=rdmacm
        // for rxe): latency = am_lat 8 B p50, overhead = 1 / am_bw 8 B message rate, bandwidth =
        // put_bw zcopy 64 KiB. rxe: 49 us, 31 k msg/s, 44 MB/s (ib_write_lat 68 us and
        // ib_write_bw 24-34 MB/s alongside); siw: 25 us, 10 k msg/s (ib_send_bw -R: 14-22 k),
        // 157 MB/s. Emulation numbers: under KVM or on bare metal they are many times better,
        // but the ratios (siw lower latency, rxe higher message rate) hold.
        attr.overhead = iwarp_ ? 95e-6 : 32e-6;
        attr.latency = {iwarp_ ? 25e-6 : 49e-6, 0};
        attr.bandwidth_dedicated = iwarp_ ? 150e6 : 44e6;
        attr.bandwidth_shared = 0;
        attr.priority = 0;
    } else {
        // Hardware: the link rate after line encoding and headers; post + doorbell overhead and
        // one-way latency of a current HCA (not measurable here: no hardware on this machine).
        attr.overhead = 75e-9;
        attr.latency = {port_.ethernet() ? 1.5e-6 : 0.9e-6, 0};
        attr.bandwidth_dedicated = wire;
        attr.bandwidth_shared = 0;
        attr.priority = 10;
    }
}

Status RcIface::get_device_address(std::uint8_t* out) const {
    RcDeviceAddress addr{};
    addr.version = kRcAddrVersion;
    addr.flags =
        static_cast<std::uint8_t>((iwarp_ ? kDevAddrIwarp : 0) | (port_.ethernet() ? kDevAddrEthernet : 0));
    addr.lid = port_.attr.lid;
    std::memcpy(addr.gid, gid_.raw, sizeof(addr.gid));
    if (ip_) {
        addr.flags |= kDevAddrHasIp;
        if (ip_->family == AF_INET6) addr.flags |= kDevAddrIpv6;
        std::memcpy(addr.ip, ip_->bytes, ip_->family == AF_INET6 ? 16 : 4);
    }
    std::memcpy(out, &addr, sizeof(addr));
    return Status::ok;
}

Status RcIface::get_address(std::uint8_t* out) const {
    RcIfaceAddress addr{};
    addr.version = kRcAddrVersion;
    addr.cm = static_cast<std::uint8_t>(use_rdmacm_ ? CmMode::rdmacm : CmMode::verbs);
    addr.port = cm_port_;
    addr.seg_size = seg_size;
    std::memcpy(out, &addr, sizeof(addr));
    return Status::ok;
}

RcLocalInfo RcIface::local_info() const {
    RcLocalInfo info;
    info.iwarp = iwarp_;
    info.ethernet = port_.ethernet();
    info.rdmacm = use_rdmacm_;
    info.ipv6 = ip_.has_value() && ip_->family == AF_INET6;
    std::memcpy(info.gid, gid_.raw, sizeof(info.gid));
    info.seg_size = seg_size;
    return info;
}

bool RcIface::is_reachable(const std::uint8_t* dev_addr, std::size_t dev_addr_len,
                           const std::uint8_t* iface_addr, std::size_t iface_addr_len,
                           std::string* reason) const {
    RcDeviceAddress dev;
    RcIfaceAddress iface;
    return parse_dev_address(dev_addr, dev_addr_len, dev, reason) == Status::ok &&
           parse_iface_address(iface_addr, iface_addr_len, iface, reason) == Status::ok;
}

// --- endpoints ------------------------------------------------------------------------------

Result<RcEp*> RcIface::new_ep(const EpParams& params, bool passive, bool reserve) {
    auto* ep = new RcEp{};
    ep->iface = this;
    ep->cold = new RcEpCold{};
    ep->cold->on_error = params.on_error;
    ep->cold->on_error_arg = params.on_error_arg;
    ep->cold->psn = random_psn();
    ep->gen = ++gen_;
    if (passive) ep->flags |= kEpPassive;
    eps_.push_back(ep);
    if (Status s = reserve ? reserve_rx(ep) : Status::ok; s != Status::ok) {
        eps_.pop_back();
        delete ep->cold;
        delete ep;
        return s;
    }
    return ep;
}

void RcIface::discard_ops(RcEp* ep, bool complete) {
    while (TxOp* op = ep->ops.pop_front()) {
        if (op->kind == TxOpKind::iface_flush) {
            finish_flush_part(op->flush, Status::ok);  // nothing of this endpoint is left to flush
            op_pool.put(op);
        } else if (complete) {
            finish_op(op, Status::canceled);  // may run the user's code: the endpoint is out of every list
        } else {
            ucs::MemPool::owner(op)->put(op);
        }
    }
    ep->pending.clear();
}

void RcIface::ep_destroy(Ep* tl_ep) {
    auto* ep = static_cast<RcEp*>(tl_ep);
    if (ep->flags & kEpClosing) {
        LOOM_LOG_ERROR("rc/{}: endpoint {} destroyed twice", resource().dev_name, static_cast<void*>(ep));
        return;
    }
    close_ep(ep);
}

void RcIface::close_ep(RcEp* ep) {
    ep->flags |= kEpClosing;
    if ((ep->flags & kEpInArbiter) && arbiter_.remove(*ep)) {
        ep->flags &= static_cast<std::uint8_t>(~kEpInArbiter);
    }
    std::erase(failed_unreported_, ep);
    std::erase(draining_, ep);
    std::erase(unconfirmed_, ep);
    std::erase(eps_, ep);
    discard_ops(ep, true);
    release_rx(ep);
    bool cm_connected = ep->cold->cm_state == CmState::connected;
    cm_set_state(ep, CmState::closed);
    if (ep->qp != nullptr) {
        bool healthy = (ep->flags & kEpConnected) && !(ep->flags & kEpFailed);
        if (healthy && ep->unsignaled != 0 && ep->sq_avail > 0 && cq_avail > 0) {
            // A signaled marker after the unsignaled tail: once it completes (or is flushed),
            // every request of the QP is accounted for.
            ibv_send_wr wr{};
            wr.opcode = IBV_WR_RDMA_WRITE;
            wr.send_flags = IBV_SEND_SIGNALED;
            wr.wr_id = (static_cast<std::uint64_t>(ep->gen) << kWrIdGenShift) | (ep->tx_sn + 1);
            ibv_send_wr* bad = nullptr;
            if (ibv_post_send(ep->qp, &wr, &bad) == 0) {
                ++ep->tx_sn;
                --cq_avail;
            }
        }
        if (ep->cold->cm_id != nullptr && cm_connected) {
            (void)rdma_disconnect(ep->cold->cm_id);  // tells the peer; moves the QP to the error state
        }
        qp_to_error(ep);
    }
    ep->cold->deadline = std::chrono::steady_clock::now() + kCloseDeadline;
    closing_.push_back(ep);
}

void RcIface::abandon_ep(RcEp* ep) {
    ep->flags |= kEpClosing;
    std::erase(eps_, ep);
    release_rx(ep);
    delete_ep(ep);
}

void RcIface::delete_ep(RcEp* ep) {
    destroy_qp(ep);
    if (ep->cold->cm_id != nullptr) (void)rdma_destroy_id(ep->cold->cm_id);
    // Requests that never produced a completion (the unsignaled tail) free their CQ entries now.
    cq_avail += static_cast<std::int32_t>(ep->tx_sn - ep->acked_sn);
    delete ep->cold;
    delete ep;
}

void RcIface::reap_closing() {
    auto now = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < closing_.size();) {
        RcEp* ep = closing_[i];
        bool drained = ep->tx_sn == ep->acked_sn && ep->rq_posted <= 0;
        if (!(ep->flags & kEpInArbiter) && (drained || now >= ep->cold->deadline)) {
            if (!drained) {
                LOOM_LOG_DEBUG("rc/{}: QP {:#x} destroyed with {} requests and {} receives never flushed",
                               resource().dev_name, ep->qp_num, ep->tx_sn - ep->acked_sn, ep->rq_posted);
            }
            closing_[i] = closing_.back();
            closing_.pop_back();
            delete_ep(ep);
        } else {
            ++i;
        }
    }
}

// --- receive buffers ------------------------------------------------------------------------

Status RcIface::reserve_rx(RcEp* ep) {
    std::uint32_t need = fc_window_ + kGrantSlots;
    if (rx_budget_ < need) {
        LOOM_LOG_ERROR(
            "rc/{}: no receive buffers left for another connection: {} connections x (window {} + {}) "
            "exhaust LOOM_IB_RX_QUEUE_LEN={}",
            resource().dev_name, (config_.rx_queue_len - rx_budget_) / need, fc_window_, kGrantSlots,
            config_.rx_queue_len);
        return Status::no_resource;
    }
    rx_budget_ -= need;
    ep->cold->rx_reserved = true;
    if (srq_ != nullptr) {
        srq_target_ += static_cast<std::int32_t>(need);
        post_rx_srq(srq_target_ - srq_posted_);
        if (srq_posted_ < srq_target_) {
            rx_budget_ += need;
            srq_target_ -= static_cast<std::int32_t>(need);
            ep->cold->rx_reserved = false;
            return Status::no_memory;
        }
    }
    return Status::ok;
}

void RcIface::release_rx(RcEp* ep) {
    if (!ep->cold->rx_reserved) return;
    ep->cold->rx_reserved = false;
    std::uint32_t need = fc_window_ + kGrantSlots;
    rx_budget_ += need;
    if (srq_ != nullptr) srq_target_ -= static_cast<std::int32_t>(need);
}

void RcIface::mark_posted(void* desc, std::uint8_t posted) {
    std::uint32_t index;
    std::memcpy(&index, static_cast<std::uint8_t*>(desc) + kRxDescIndex, sizeof(index));
    rx_posted_[index] = posted;
}

/** Prepares a receive of @p desc into @p wr and @p sge. */
void RcIface::prepare_recv(void* desc, ibv_recv_wr& wr, ibv_sge& sge) {
    auto* bytes = static_cast<std::uint8_t*>(desc);
    std::uint32_t lkey;
    std::memcpy(&lkey, bytes + kRxDescLkey, sizeof(lkey));
    sge = {reinterpret_cast<std::uintptr_t>(bytes + kRxDescHdr),
           static_cast<std::uint32_t>(sizeof(RcAmHdr) + seg_size), lkey};
    wr = {};
    wr.wr_id = reinterpret_cast<std::uintptr_t>(desc);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    mark_posted(desc, 1);
}

void RcIface::post_rx_srq(int count) {
    constexpr int kChain = 32;
    while (count > 0) {
        ibv_recv_wr wrs[kChain];
        ibv_sge sges[kChain];
        int n = 0;
        for (; n < std::min(count, kChain); ++n) {
            void* desc = rx_pool.get();
            if (desc == nullptr) {
                LOOM_LOG_ERROR("rc/{}: out of memory for receive buffers", resource().dev_name);
                break;
            }
            prepare_recv(desc, wrs[n], sges[n]);
            if (n > 0) wrs[n - 1].next = &wrs[n];
        }
        if (n == 0) return;
        ibv_recv_wr* bad = nullptr;
        int rc = ibv_post_srq_recv(srq_, wrs, &bad);
        int posted = n;
        if (rc != 0) {
            posted = static_cast<int>(bad - wrs);
            LOOM_LOG_ERROR("rc/{}: ibv_post_srq_recv failed: {}", resource().dev_name, std::strerror(rc));
            for (int i = posted; i < n; ++i) {
                void* desc = reinterpret_cast<void*>(wrs[i].wr_id);
                mark_posted(desc, 0);
                rx_pool.put(desc);
            }
        }
        srq_posted_ += posted;
        count -= n;
        if (posted < n) return;
    }
}

Status RcIface::post_rx_qp(RcEp* ep, int count) {
    for (int i = 0; i < count; ++i) {
        void* desc = rx_pool.get();
        if (desc == nullptr) {
            LOOM_LOG_ERROR("rc/{}: out of memory for receive buffers", resource().dev_name);
            return Status::no_memory;
        }
        ibv_recv_wr wr;
        ibv_sge sge;
        prepare_recv(desc, wr, sge);
        ibv_recv_wr* bad = nullptr;
        if (int rc = ibv_post_recv(ep->qp, &wr, &bad); rc != 0) {
            mark_posted(desc, 0);
            rx_pool.put(desc);
            LOOM_LOG_ERROR("rc/{}: ibv_post_recv on QP {:#x} failed: {}", resource().dev_name, ep->qp_num,
                           std::strerror(rc));
            return Status::io_error;
        }
        ++ep->rq_posted;
    }
    return Status::ok;
}

}  // namespace loom::uct::ib

