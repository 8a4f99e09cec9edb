/**
 * rc data path: active messages, RDMA put/get, atomics, pending queue, flush and
 * fence. Every operation checks its limits, then the endpoint's send queue, the
 * iface's send CQ and (active messages) the flow-control credits, builds one work
 * request on the stack and posts it. Nothing here allocates from the heap, locks or
 * logs on success; bounce buffers and operation records come from the iface's pools.
 * Ends with the ops tables: kRcOps (NIC atomics), kRcOpsNoAtomics, kRcOpsCpuAtomics.
 */
#include "uct/ib/ib_log.h"
#include "uct/ib/ib_md.h"
#include "uct/ib/rc_iface.h"

#include <cstring>

namespace loom::uct::ib {

namespace {

LOOM_ALWAYS_INLINE RcEp* rc_ep(Ep* ep) { return static_cast<RcEp*>(ep); }

/** True when a request can be posted on @p ep now (send queue entry and send CQ entry). */
LOOM_ALWAYS_INLINE bool has_tx(const RcIface* iface, const RcEp* ep) {
    return ep->sq_avail > 0 && iface->cq_avail > 0;
}

/** True when an active message can be posted on @p ep now. */
LOOM_ALWAYS_INLINE bool has_am_tx(const RcIface* iface, const RcEp* ep) {
    return has_tx(iface, ep) && ep->fc_credits > 0;
}

/** wr_id of a send request: the endpoint's generation (stale completions are recognized) and the sn. */
LOOM_ALWAYS_INLINE std::uint64_t make_wr_id(const RcEp* ep, std::uint64_t sn) {
    return (static_cast<std::uint64_t>(ep->gen) << kWrIdGenShift) | sn;
}

/**
 * True when @p wr, on an iWARP device, must be signaled because of its size. soft-iWARP
 * sends an unsignaled request of a page or more straight from its pages (they stay queued
 * in its TCP socket until the wire takes them) and reports the next signaled request
 * once that one is in the socket: its completion would give back buffers the wire still
 * reads, and a bounce buffer or user buffer rewritten then goes out with the new bytes
 * (found as fragments with later messages' contents). A signaled request is copied.
 */
LOOM_COLD LOOM_NOINLINE bool iwarp_must_signal(const ibv_send_wr& wr) {
    if (wr.send_flags & IBV_SEND_INLINE) return false;  // copied at post time
    std::size_t bytes = 0;
    for (int i = 0; i < wr.num_sge; ++i) bytes += wr.sg_list[i].length;
    return bytes >= kIwarpZcopyMin;
}

/**
 * Posts @p wr on @p ep with the next sequence number, signaled when @p signal or when
 * the signaling interval is reached. Returns ok, or the post failure (logged).
 */
LOOM_ALWAYS_INLINE Status post_send(RcIface* iface, RcEp* ep, ibv_send_wr& wr, bool signal) {
    std::uint64_t sn = ep->tx_sn + 1;
    wr.wr_id = make_wr_id(ep, sn);
    // A read or an atomic completes when its response arrives, which may be after later
    // requests completed (soft-iWARP): each gets its own completion (RcIface::complete_upto).
    const bool response = wr.opcode == IBV_WR_RDMA_READ || wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ||
                          wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
    bool signaled = signal || response || ep->unsignaled + 1u >= iface->signal_interval ||
                    (LOOM_UNLIKELY(iface->iwarp()) && iwarp_must_signal(wr));
    if (signaled) wr.send_flags |= IBV_SEND_SIGNALED;
    bool fenced = false;
    if (LOOM_UNLIKELY(ep->flags & kEpFence)) {
        // iWARP forbids the fence indicator on an RDMA READ (siw drops the connection);
        // a read is ordered behind earlier requests of its QP anyway, so the fence waits
        // for the next request that is not a read.
        fenced = !(iface->iwarp() && wr.opcode == IBV_WR_RDMA_READ);
        if (fenced) wr.send_flags |= IBV_SEND_FENCE;
    }
    ibv_send_wr* bad = nullptr;
    int rc = ibv_post_send(ep->qp, &wr, &bad);
    if (LOOM_UNLIKELY(rc != 0)) return iface->post_failed(ep, rc, "post_send");
    if (LOOM_UNLIKELY(fenced)) ep->flags &= static_cast<std::uint8_t>(~kEpFence);
    ep->unsignaled = signaled ? 0 : static_cast<std::uint16_t>(ep->unsignaled + 1);
    ep->tx_sn = sn;
    --ep->sq_avail;
    --iface->cq_avail;
    if (response) iface->response_due(ep, sn);
    return Status::ok;
}

/** Queues @p op on @p ep to run when the request just posted completes. */
LOOM_ALWAYS_INLINE void track(RcEp* ep, TxOp* op, TxOpKind kind) {
    op->kind = kind;
    op->sn = ep->tx_sn;
    ep->ops.push_back(*op);
}

/** The lkey of a user iov's registration; 0 for a null handle (caught before posting). */
LOOM_ALWAYS_INLINE std::uint32_t iov_lkey(const Iov& iov) {
    return static_cast<MemRegion*>(iov.memh)->mr->lkey;
}

/**
 * Fills @p sge from @p iov (skipping empty entries) and returns the number of entries
 * and the total length; a null memory handle on a non-empty entry gives -1.
 */
LOOM_ALWAYS_INLINE int fill_sge(ibv_sge* sge, const Iov* iov, std::size_t iovcnt, std::size_t& total) {
    int n = 0;
    total = 0;
    for (std::size_t i = 0; i < iovcnt; ++i) {
        if (iov[i].length == 0) continue;
        if (LOOM_UNLIKELY(iov[i].memh == kMemHNull)) return -1;
        sge[n].addr = reinterpret_cast<std::uintptr_t>(iov[i].buffer);
        sge[n].length = static_cast<std::uint32_t>(iov[i].length);
        sge[n].lkey = iov_lkey(iov[i]);
        total += iov[i].length;
        ++n;
    }
    return n;
}

LOOM_COLD LOOM_NOINLINE Status missing_memh(RcEp* ep, const char* op) {
    LOOM_LOG_ERROR("rc/{}: {}: an iov entry has no memory handle (register it with mem_reg)",
                   ep->rc_iface()->resource().dev_name, op);
    return Status::invalid_param;
}

/** Credits to piggy-back on a send from @p ep: everything owed, capped by the 16-bit field. */
LOOM_ALWAYS_INLINE std::uint16_t owed_credits(const RcEp* ep) { return ep->rx_credits; }

/**
 * Called after a send carrying @p credits succeeded: they have been returned. A due grant
 * stays flagged (replies may be due too): the arbiter finds nothing left to grant.
 */
LOOM_ALWAYS_INLINE void credits_sent(RcEp* ep, std::uint16_t credits) {
    ep->rx_credits = static_cast<std::uint16_t>(ep->rx_credits - credits);
}

// --- active messages ------------------------------------------------------------------------

Status rc_am_short(Ep* tl_ep, AmId id, std::uint64_t header, const void* payload, unsigned length) {
    RcEp* ep = rc_ep(tl_ep);
    RcIface* iface = ep->rc_iface();
    if (LOOM_UNLIKELY(length > iface->max_am_short)) return Status::exceeds_limit;
    if (LOOM_UNLIKELY(!has_am_tx(iface, ep))) return iface->resource_status(ep);
    std::uint16_t credits = owed_credits(ep);
    RcAmHdr hdr{id, 0, credits};
    ibv_sge sge[3] = {{reinterpret_cast<std::uintptr_t>(&hdr), sizeof(hdr), 0},
                      {reinterpret_cast<std::uintptr_t>(&header), sizeof(header), 0},
                      {reinterpret_cast<std::uintptr_t>(payload), length, 0}};
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = sge;
    wr.num_sge = length != 0 ? 3 : 2;
    wr.send_flags = IBV_SEND_INLINE;
    Status status = post_send(iface, ep, wr, false);
    if (LOOM_UNLIKELY(status != Status::ok)) return status;
    --ep->fc_credits;
    credits_sent(ep, credits);
    return Status::ok;
}

ssize_t rc_am_bcopy(Ep* tl_ep, AmId id, PackCallback pack, void* arg, unsigned) {
    RcEp* ep = rc_ep(tl_ep);
    RcIface* iface = ep->rc_iface();
    if (LOOM_UNLIKELY(!has_am_tx(iface, ep))) return static_cast<ssize_t>(iface->resource_status(ep));
    void* desc;
    if (Status s = iface->tx_desc_pool.try_get(desc); LOOM_UNLIKELY(s != Status::ok)) {
        return static_cast<ssize_t>(s);
    }
    auto* op = static_cast<TxOp*>(desc);
    auto* bytes = static_cast<std::uint8_t*>(desc);
    std::size_t length = pack(bytes + kTxDescPayload, arg);
    if (LOOM_UNLIKELY(length > iface->seg_size)) {
        LOOM_FATAL("rc am_bcopy: pack callback wrote {} bytes into a {}-byte buffer", length,
                   iface->seg_size);
    }
    std::uint16_t credits = owed_credits(ep);
    RcAmHdr hdr{id, 0, credits};
    std::memcpy(bytes + kTxDescHdr, &hdr, sizeof(hdr));
    std::uint32_t total = static_cast<std::uint32_t>(sizeof(hdr) + length);
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(bytes + kTxDescHdr), total, op->lkey};
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    bool inline_data = total <= iface->max_inline;
    if (inline_data) wr.send_flags = IBV_SEND_INLINE;  // copied at post time: the buffer is free at once
    Status status = post_send(iface, ep, wr, false);
    if (LOOM_UNLIKELY(status != Status::ok)) {
        iface->tx_desc_pool.put(desc);
        return static_cast<ssize_t>(status);
    }
    if (inline_data) {
        iface->tx_desc_pool.put(desc);
    } else {
        track(ep, op, TxOpKind::buffer);
    }
    --ep->fc_credits;
    credits_sent(ep, credits);
    return static_cast<ssize_t>(length);
}

Status rc_am_zcopy(Ep* tl_ep, AmId id, const void* header, unsigned header_length, const Iov* iov,
                   std::size_t iovcnt, unsigned, Completion* comp) {
    RcEp* ep = rc_ep(tl_ep);
    RcIface* iface = ep->rc_iface();
    if (LOOM_UNLIKELY(header_length > iface->max_am_zcopy_hdr || iovcnt + 1 > iface->max_send_sge)) {
        return Status::exceeds_limit;
    }
    ibv_sge sge[kMaxSge];
    std::size_t payload = 0;
    int n = fill_sge(sge + 1, iov, iovcnt, payload);
    if (LOOM_UNLIKELY(n < 0)) return missing_memh(ep, "am_zcopy");
    if (LOOM_UNLIKELY(header_length + payload > iface->seg_size)) return Status::exceeds_limit;
    if (LOOM_UNLIKELY(!has_am_tx(iface, ep))) return iface->resource_status(ep);
    void* desc;
    if (Status s = iface->tx_desc_pool.try_get(desc); LOOM_UNLIKELY(s != Status::ok)) return s;
    auto* op = static_cast<TxOp*>(desc);
    auto* bytes = static_cast<std::uint8_t*>(desc);
    std::uint16_t credits = owed_credits(ep);
    RcAmHdr hdr{id, 0, credits};
    std::memcpy(bytes + kTxDescHdr, &hdr, sizeof(hdr));
    if (header_length != 0) std::memcpy(bytes + kTxDescPayload, header, header_length);
    sge[0] = {reinterpret_cast<std::uintptr_t>(bytes + kTxDescHdr),
              static_cast<std::uint32_t>(sizeof(hdr) + header_length), op->lkey};
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = sge;
    wr.num_sge = n + 1;
    Status status = post_send(iface, ep, wr, comp != nullptr);
    if (LOOM_UNLIKELY(status != Status::ok)) {
        iface->tx_desc_pool.put(desc);
        return status;
    }
    op->comp = comp;
    track(ep, op, comp != nullptr ? TxOpKind::buffer_completion : TxOpKind::buffer);
    --ep->fc_credits;
    credits_sent(ep, credits);
    return Status::in_progress;
}

// --- RDMA write -----------------------------------------------------------------------------

LOOM_ALWAYS_INLINE void prepare_rdma(ibv_send_wr& wr, ibv_wr_opcode opcode, std::uint64_t remote_addr,
                                     std::uint64_t rkey) {
    wr.opcode = opcode;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = static_cast<std::uint32_t>(rkey);
}

/** iWARP completes writes locally: remember that a flush must read to know they landed. */
LOOM_ALWAYS_INLINE void wrote(RcIface* iface, RcEp* ep) {
    if (iface->iwarp()) ep->flags |= kEpUnflushedWrites;
}

Status rc_put_short(Ep* tl_ep, const void* buffer, unsigned length, std::uint64_t remote_addr,
                    std::uint64_t rkey) {
    RcEp* ep = rc_ep(tl_ep);
    RcIface* iface = ep->rc_iface();
    if (LOOM_UNLIKELY(length > iface->max_inline)) return Status::exceeds_limit;
    if (LOOM_UNLIKELY(!has_tx(iface, ep))) return iface->resource_status(ep);
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(buffer), length, 0};
    ibv_send_wr wr{};
    prepare_rdma(wr, IBV_WR_RDMA_WRITE, remote_addr, rkey);
    wr.sg_list = &sge;
    wr.num_sge = length != 0 ? 1 : 0;
    wr.send_flags = IBV_SEND_INLINE;
    Status status = post_send(iface, ep, wr, false);
    if (LOOM_LIKELY(status == Status::ok)) wrote(iface, ep);
    return status;
}

ssize_t rc_put_bcopy(Ep* tl_ep, PackCallback pack, void* arg, std::uint64_t remote_addr, std::uint64_t rkey) {
    RcEp* ep = rc_ep(tl_ep);
    RcIface* iface = ep->rc_iface();
    if (LOOM_UNLIKELY(!has_tx(iface, ep))) return static_cast<ssize_t>(iface->resource_status(ep));
    void* desc;
    if (Status s = iface->tx_desc_pool.try_get(desc); LOOM_UNLIKELY(s != Status::ok)) {
        return static_cast<ssize_t>(s);
    }
    auto* op = static_cast<TxOp*>(desc);
    auto* bytes = static_cast<std::uint8_t*>(desc) + kTxDescPayload;
    std::size_t length = pack(bytes, arg);
    if (LOOM_UNLIKELY(length > iface->seg_size)) {
        LOOM_FATAL("rc put_bcopy: pack callback wrote {} bytes into a {}-byte buffer", length,
                   iface->seg_size);
    }
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(bytes), static_cast<std::uint32_t>(length), op->lkey};
    ibv_send_wr wr{};
    prepare_rdma(wr, IBV_WR_RDMA_WRITE, remote_addr, rkey);
    wr.sg_list = &sge;
    wr.num_sge = length != 0 ? 1 : 0;
    bool inline_data = length <= iface->max_inline;
    if (inline_data) wr.send_flags = IBV_SEND_INLINE;
    Status status = post_send(iface, ep, wr, false);
    if (LOOM_UNLIKELY(status != Status::ok)) {
        iface->tx_desc_pool.put(desc);
        return static_cast<ssize_t>(status);
    }
    if (inline_data) {
        iface->tx_desc_pool.put(desc);
    } else {
        track(ep, op, TxOpKind::buffer);
    }
    wrote(iface, ep);
    return static_cast<ssize_t>(length);
}

/** Posts an RDMA write or read of @p iov; tracks @p comp when given. */
LOOM_ALWAYS_INLINE Status rdma_zcopy(RcEp* ep, ibv_wr_opcode opcode, const Iov* iov, std::size_t iovcnt,
                                     std::uint64_t remote_addr, std::uint64_t rkey, Completion* comp,
                                     std::size_t max_iov, const char* what) {
    RcIface* iface = ep->rc_iface();
    if (LOOM_UNLIKELY(iovcnt > max_iov)) return Status::exceeds_limit;
    ibv_sge sge[kMaxSge];
    std::size_t total = 0;
    int n = fill_sge(sge, iov, iovcnt, total);
    if (LOOM_UNLIKELY(n < 0)) return missing_memh(ep, what);
    if (LOOM_UNLIKELY(total > iface->max_zcopy)) return Status::exceeds_limit;
    if (n == 0 && opcode == IBV_WR_RDMA_READ) {
        // An empty read still names a valid sink (iWARP sends its STag; siw would take stale bytes).
        sge[0] = {reinterpret_cast<std::uintptr_t>(iface->atomic_scratch), 0, iface->atomic_scratch_lkey};
        n = 1;
    }
    if (LOOM_UNLIKELY(!has_tx(iface, ep))) return iface->resource_status(ep);
    void* record = nullptr;
    if (comp != nullptr) {
        if (Status s = iface->op_pool.try_get(record); LOOM_UNLIKELY(s != Status::ok)) return s;
    }
    ibv_send_wr wr{};
    prepare_rdma(wr, opcode, remote_addr, rkey);
    wr.sg_list = sge;
    wr.num_sge = n;
    Status status = post_send(iface, ep, wr, comp != nullptr);
    if (LOOM_UNLIKELY(status != Status::ok)) {
        if (record != nullptr) iface->op_pool.put(record);
        return status;
    }
    if (record != nullptr) {
        auto* op = static_cast<TxOp*>(record);
        op->comp = comp;
        track(ep, op, TxOpKind::completion);
    }
    return Status::in_progress;
}

Status rc_put_zcopy(Ep* tl_ep, const Iov* iov, std::size_t iovcnt, std::uint64_t remote_addr,
                    std::uint64_t rkey, Completion* comp) {
    RcEp* ep = rc_ep(tl_ep);
    RcIface* iface = ep->rc_iface();
    Status status = rdma_zcopy(ep, IBV_WR_RDMA_WRITE, iov, iovcnt, remote_addr, rkey, comp,
                               iface->max_send_sge, "put_zcopy");
    if (status == Status::in_progress) wrote(iface, ep);
    return status;
}

// --- RDMA read ------------------------------------------------------------------------------

Status rc_get_bcopy(Ep* tl_ep, UnpackCallback unpack, void* arg, std::size_t length,
                    std::uint64_t remote_addr, std::uint64_t rkey, Completion* comp) {
    RcEp* ep = rc_ep(tl_ep);
    RcIface* iface = ep->rc_iface();
    if (LOOM_UNLIKELY(length > iface->seg_size)) return Status::exceeds_limit;
    if (LOOM_UNLIKELY(!has_tx(iface, ep))) return iface->resource_status(ep);
    void* desc;
    if (Status s = iface->tx_desc_pool.try_get(desc); LOOM_UNLIKELY(s != Status::ok)) return s;
    auto* op = static_cast<TxOp*>(desc);
    auto* bytes = static_cast<std::uint8_t*>(desc) + kTxDescPayload;
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(bytes), static_cast<std::uint32_t>(length), op->lkey};
    ibv_send_wr wr{};
    prepare_rdma(wr, IBV_WR_RDMA_READ, remote_addr, rkey);
    wr.sg_list = &sge;
    wr.num_sge = 1;  // even when empty: a read always names its sink
    Status status = post_send(iface, ep, wr, true);
    if (LOOM_UNLIKELY(status != Status::ok)) {
        iface->tx_desc_pool.put(desc);
        return status;
    }
    op->comp = comp;
    op->unpack.cb = unpack;
    op->unpack.arg = arg;
    op->length = static_cast<std::uint32_t>(length);
    track(ep, op, TxOpKind::get_bcopy);
    return Status::in_progress;
}

Status rc_get_zcopy(Ep* tl_ep, const Iov* iov, std::size_t iovcnt, std::uint64_t remote_addr,
                    std::uint64_t rkey, Completion* comp) {
    RcEp* ep = rc_ep(tl_ep);
    return rdma_zcopy(ep, IBV_WR_RDMA_READ, iov, iovcnt, remote_addr, rkey, comp,
                      ep->rc_iface()->max_read_sge, "get_zcopy");
}

// --- atomics (64-bit fetch-and-add and compare-and-swap: what verbs defines) ----------------

/** Posts a verbs atomic; the old value lands in a bounce descriptor (fetching) or the iface scratch word. */
LOOM_ALWAYS_INLINE Status post_atomic(RcEp* ep, ibv_wr_opcode opcode, std::uint64_t compare_add,
                                      std::uint64_t swap, std::uint64_t remote_addr, std::uint64_t rkey,
                                      std::uint64_t* result, Completion* comp) {
    RcIface* iface = ep->rc_iface();
    if (LOOM_UNLIKELY(remote_addr % sizeof(std::uint64_t) != 0)) return Status::invalid_param;
    if (LOOM_UNLIKELY(!has_tx(iface, ep))) return iface->resource_status(ep);
    void* desc = nullptr;
    ibv_sge sge;
    if (result != nullptr) {
        if (Status s = iface->tx_desc_pool.try_get(desc); LOOM_UNLIKELY(s != Status::ok)) return s;
        auto* op = static_cast<TxOp*>(desc);
        sge = {reinterpret_cast<std::uintptr_t>(static_cast<std::uint8_t*>(desc) + kTxDescPayload),
               sizeof(std::uint64_t), op->lkey};
    } else {
        sge = {reinterpret_cast<std::uintptr_t>(iface->atomic_scratch), sizeof(std::uint64_t),
               iface->atomic_scratch_lkey};
    }
    ibv_send_wr wr{};
    wr.opcode = opcode;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.atomic.remote_addr = remote_addr;
    wr.wr.atomic.rkey = static_cast<std::uint32_t>(rkey);
    wr.wr.atomic.compare_add = compare_add;
    wr.wr.atomic.swap = swap;
    Status status = post_send(iface, ep, wr, result != nullptr);
    if (LOOM_UNLIKELY(status != Status::ok)) {
        if (desc != nullptr) iface->tx_desc_pool.put(desc);
        return status;
    }
    if (desc == nullptr) return Status::ok;
    auto* op = static_cast<TxOp*>(desc);
    op->comp = comp;
    op->result = result;
    track(ep, op, TxOpKind::fetch64);
    return Status::in_progress;
}

Status rc_atomic64_post(Ep* tl_ep, AtomicOp op, std::uint64_t value, std::uint64_t remote_addr,
                        std::uint64_t rkey) {
    if (LOOM_UNLIKELY(op != AtomicOp::add)) return Status::unsupported;
    return post_atomic(rc_ep(tl_ep), IBV_WR_ATOMIC_FETCH_AND_ADD, value, 0, remote_addr, rkey, nullptr,
                       nullptr);
}

Status rc_atomic64_fetch(Ep* tl_ep, AtomicOp op, std::uint64_t value, std::uint64_t* result,
                         std::uint64_t remote_addr, std::uint64_t rkey, Completion* comp) {
    if (LOOM_UNLIKELY(op != AtomicOp::add)) return Status::unsupported;
    return post_atomic(rc_ep(tl_ep), IBV_WR_ATOMIC_FETCH_AND_ADD, value, 0, remote_addr, rkey, result, comp);
}

Status rc_atomic64_cswap(Ep* tl_ep, std::uint64_t compare, std::uint64_t swap, std::uint64_t remote_addr,
                         std::uint64_t rkey, std::uint64_t* result, Completion* comp) {
    return post_atomic(rc_ep(tl_ep), IBV_WR_ATOMIC_CMP_AND_SWP, compare, swap, remote_addr, rkey, result,
                       comp);
}

// --- atomics for the target's CPU (LOOM_IB_ATOMICS=cpu; the target's half is in rc_rx.cc) -------

/**
 * Sends an RcAtomicRequest from a bounce descriptor, which stays queued until the reply
 * is in (it receives the reply: TxOpKind::cpu_atomic). Posted atomics return ok, fetching
 * ones in_progress (the result and @p comp come with the reply).
 */
Status post_cpu_atomic(RcEp* ep, AtomicOp op, unsigned size, std::uint64_t value, std::uint64_t compare,
                       std::uint64_t remote_addr, std::uint64_t rkey, void* result, Completion* comp) {
    RcIface* iface = ep->rc_iface();
    if (LOOM_UNLIKELY(remote_addr % size != 0)) return Status::invalid_param;
    if (LOOM_UNLIKELY(!has_am_tx(iface, ep))) return iface->resource_status(ep);
    void* desc;
    if (Status s = iface->tx_desc_pool.try_get(desc); LOOM_UNLIKELY(s != Status::ok)) return s;
    auto* txop = static_cast<TxOp*>(desc);
    auto* bytes = static_cast<std::uint8_t*>(desc);
    const std::uint16_t credits = owed_credits(ep);
    const RcAmHdr hdr{0, kAmHdrAtomicReq, credits};
    const RcAtomicRequest req{static_cast<std::uint8_t>(op),
                              static_cast<std::uint8_t>(size),
                              0,
                              static_cast<std::uint32_t>(rkey),
                              ep->tx_sn + 1,
                              remote_addr,
                              value,
                              compare};
    std::memcpy(bytes + kTxDescHdr, &hdr, sizeof(hdr));
    std::memcpy(bytes + kTxDescPayload, &req, sizeof(req));
    constexpr std::uint32_t kTotal = sizeof(RcAmHdr) + sizeof(RcAtomicRequest);
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(bytes + kTxDescHdr), kTotal, txop->lkey};
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (kTotal <= iface->max_inline) wr.send_flags = IBV_SEND_INLINE;
    // Signaled: the operation completes once both its send completion and its reply are in,
    // and an unsignaled send's completion would wait for a later request.
    if (Status s = post_send(iface, ep, wr, true); LOOM_UNLIKELY(s != Status::ok)) {
        iface->tx_desc_pool.put(desc);
        return s;
    }
    txop->comp = comp;
    txop->result = result;
    txop->length = size;
    track(ep, txop, TxOpKind::cpu_atomic);
    iface->cpu_atomic_due(ep, ep->tx_sn);
    --ep->fc_credits;
    credits_sent(ep, credits);
    return result != nullptr ? Status::in_progress : Status::ok;
}

template <typename T>
Status rc_cpu_atomic_post(Ep* tl_ep, AtomicOp op, T value, std::uint64_t remote_addr, std::uint64_t rkey) {
    // The posted form returns nothing: swap and cswap are only meaningful fetching (as on shm and tcp).
    if (LOOM_UNLIKELY(op == AtomicOp::swap || op == AtomicOp::cswap)) return Status::unsupported;
    return post_cpu_atomic(rc_ep(tl_ep), op, sizeof(T), value, 0, remote_addr, rkey, nullptr, nullptr);
}

template <typename T>
Status rc_cpu_atomic_fetch(Ep* tl_ep, AtomicOp op, T value, T* result, std::uint64_t remote_addr,
                           std::uint64_t rkey, Completion* comp) {
    if (LOOM_UNLIKELY(op == AtomicOp::cswap)) return Status::unsupported;  // ep_atomic*_cswap does it
    return post_cpu_atomic(rc_ep(tl_ep), op, sizeof(T), value, 0, remote_addr, rkey, result, comp);
}

template <typename T>
Status rc_cpu_atomic_cswap(Ep* tl_ep, T compare, T swap, std::uint64_t remote_addr, std::uint64_t rkey,
                           T* result, Completion* comp) {
    return post_cpu_atomic(rc_ep(tl_ep), AtomicOp::cswap, sizeof(T), swap, compare, remote_addr, rkey, result,
                           comp);
}

// --- pending queue, flush, fence --------------------------------------------------------------

Status rc_pending_add(Ep* tl_ep, PendingReq* req, unsigned) {
    RcEp* ep = rc_ep(tl_ep);
    RcIface* iface = ep->rc_iface();
    // A failed endpoint answers every operation at once with its error: nothing to wait for.
    if (ep->failed()) return ep->cold->status;
    // Created with connect_on_first_use: this is its first operation, which waits for the connection.
    if (LOOM_UNLIKELY(ep->qp == nullptr) && ep->cold->connect_on_first_use) {
        if (Status s = iface->cm_connect_on_first_use(ep); s != Status::ok) return s;
    }
    if (ep->pending.empty() && has_am_tx(iface, ep)) return Status::busy;
    ep->pending.push_back(*req);
    iface->arbiter_add(ep);
    return Status::ok;
}

void rc_pending_purge(Ep* tl_ep, PendingPurgeCallback cb, void* arg) {
    RcEp* ep = rc_ep(tl_ep);
    while (PendingReq* req = ep->pending.pop_front()) {
        if (cb != nullptr) cb(req, arg);
    }
}

Status rc_pending_remove(Ep* tl_ep, PendingReq* req) {
    // An endpoint left in the arbiter with an empty queue is skipped there.
    return rc_ep(tl_ep)->pending.remove(*req) ? Status::ok : Status::no_element;
}

Status rc_ep_fence(Ep* tl_ep, unsigned) {
    RcEp* ep = rc_ep(tl_ep);
    // RDMA reads and atomics may be overtaken by later requests; the fence flag on the next
    // request makes it wait for them. Atomics for the target's CPU are applied after the NIC
    // has acknowledged them: new requests wait for their replies.
    if (ep->tx_sn != ep->acked_sn) ep->flags |= kEpFence;
    if (LOOM_UNLIKELY(ep->responses_due != 0)) ep->rc_iface()->fence_cpu_atomics(ep);
    return Status::ok;
}

Status rc_iface_fence(Iface* tl_iface, unsigned flags) {
    auto* iface = static_cast<RcIface*>(tl_iface);
    for (RcEp* ep : iface->endpoints()) (void)rc_ep_fence(ep, flags);
    return Status::ok;
}

void rc_release_desc(Iface* tl_iface, void* desc) {
    (void)tl_iface;
    void* elem = static_cast<std::uint8_t*>(desc) - kRxDescPayload;
    ucs::MemPool::owner(elem)->put(elem);
}

unsigned rc_progress(Iface* iface) { return static_cast<RcIface*>(iface)->progress(); }

}  // namespace

Status rc_ep_flush(Ep* tl_ep, unsigned flags, Completion* comp) {
    RcEp* ep = rc_ep(tl_ep);
    return ep->rc_iface()->ep_flush(ep, flags, comp);
}

Status rc_ep_check(Ep* tl_ep, std::uint64_t timeout_ns) {
    RcEp* ep = rc_ep(tl_ep);
    return ep->rc_iface()->ep_check(ep, timeout_ns);
}

Status rc_iface_flush(Iface* tl_iface, unsigned flags, Completion* comp) {
    return static_cast<RcIface*>(tl_iface)->iface_flush(flags, comp);
}

const IfaceOps kRcOps = {
    .ep_am_short = rc_am_short,
    .ep_am_bcopy = rc_am_bcopy,
    .ep_am_zcopy = rc_am_zcopy,
    .ep_put_short = rc_put_short,
    .ep_put_bcopy = rc_put_bcopy,
    .ep_put_zcopy = rc_put_zcopy,
    .ep_get_bcopy = rc_get_bcopy,
    .ep_get_zcopy = rc_get_zcopy,
    .ep_atomic32_post = nullptr,
    .ep_atomic64_post = rc_atomic64_post,
    .ep_atomic32_fetch = nullptr,
    .ep_atomic64_fetch = rc_atomic64_fetch,
    .ep_atomic32_cswap = nullptr,
    .ep_atomic64_cswap = rc_atomic64_cswap,
    .ep_pending_add = rc_pending_add,
    .ep_pending_purge = rc_pending_purge,
    .ep_pending_remove = rc_pending_remove,
    .ep_flush = rc_ep_flush,
    .ep_fence = rc_ep_fence,
    .ep_check = rc_ep_check,
    .iface_progress = rc_progress,
    .iface_flush = rc_iface_flush,
    .iface_fence = rc_iface_fence,
    .iface_release_desc = rc_release_desc,
};

const IfaceOps kRcOpsNoAtomics = [] {
    IfaceOps ops = kRcOps;
    // Leaving them out makes the base class answer unsupported, as the capabilities say.
    ops.ep_atomic64_post = nullptr;
    ops.ep_atomic64_fetch = nullptr;
    ops.ep_atomic64_cswap = nullptr;
    return ops;
}();

const IfaceOps kRcOpsCpuAtomics = [] {
    IfaceOps ops = kRcOps;
    ops.ep_atomic32_post = rc_cpu_atomic_post<std::uint32_t>;
    ops.ep_atomic64_post = rc_cpu_atomic_post<std::uint64_t>;
    ops.ep_atomic32_fetch = rc_cpu_atomic_fetch<std::uint32_t>;
    ops.ep_atomic64_fetch = rc_cpu_atomic_fetch<std::uint64_t>;
    ops.ep_atomic32_cswap = rc_cpu_atomic_cswap<std::uint32_t>;
    ops.ep_atomic64_cswap = rc_cpu_atomic_cswap<std::uint64_t>;
    return ops;
}();

}  // namespace loom::uct::ib
