/**
 * rc progress and receive path: completions of sends and receives (the messages handed
 * to the handlers), credit grants, the pending arbiter, endpoint failure, and flush,
 * which completes through the same completions.
 */
#include "uct/base/cpu_atomic.h"
#include "uct/ib/ib_log.h"
#include "uct/ib/ib_md.h"
#include "uct/ib/rc_iface.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace loom::uct::ib {

namespace {

/** sq_avail of a failed endpoint: negative, so every operation takes its slow path and returns the error. */
constexpr std::int32_t kFailedSqAvail = INT32_MIN / 2;

/**
 * How long a failed endpoint waits for the device to flush its outstanding requests
 * before completing the rest itself. rxe flushes in a kernel task within microseconds;
 * siw never completes requests that user space posted after the connection broke and
 * before the failure was known (they stay in the mapped send queue), so without this
 * their completions would never come.
 */
constexpr auto kFailFlushGrace = std::chrono::seconds(1);

const char* wc_status_text(ibv_wc_status status) { return ibv_wc_status_str(status); }

/** The endpoint status for a work completion error. */
Status wc_error_status(ibv_wc_status status) {
    switch (status) {
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_ACCESS_ERR: return Status::access_denied;
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
    case IBV_WC_RESP_TIMEOUT_ERR: return Status::peer_timeout;
    case IBV_WC_LOC_LEN_ERR:
    case IBV_WC_REM_INV_REQ_ERR: return Status::message_truncated;
    case IBV_WC_WR_FLUSH_ERR:
    case IBV_WC_REM_ABORT_ERR: return Status::connection_reset;
    default: return Status::endpoint_failure;
    }
}

}  // namespace

// --- progress -------------------------------------------------------------------------------

unsigned RcIface::progress() {
    unsigned count = poll_rx();
    count += poll_tx();
    if (!arbiter_.empty()) dispatch_arbiter();
    if (LOOM_UNLIKELY(!draining_.empty())) drain_failed();
    if (LOOM_UNLIKELY(!failed_unreported_.empty())) report_errors();
    if (LOOM_UNLIKELY(!closing_.empty())) reap_closing();
    if (cm_channel_ != nullptr && --cm_countdown_ == 0) {
        // An idle iface reads its rdma_cm channel (a system call) at most every
        // kCmIdlePollUs: a busy-polling application must not pay one per 64 progress calls.
        ucs::Ticks now = ucs::get_time();
        if (cm_busy_ != 0 || !cm_dead_ids_.empty() || now - cm_last_poll_ >= cm_idle_ticks_) {
            count += cm_poll();
            cm_last_poll_ = now;
        }
        // Probes are due milliseconds apart: every kCmPollInterval-th call is often enough.
        if (LOOM_UNLIKELY(!unconfirmed_.empty())) probe_acceptors(std::chrono::steady_clock::now());
        cm_countdown_ = cm_busy_ != 0 ? 1 : kCmPollInterval;
    }
    return count;
}

LOOM_ALWAYS_INLINE int RcIface::poll_cq(ibv_cq* cq, CqStash& stash, const char* what) {
    // A completion event_arm polled is older than anything still in the CQ: it goes first.
    int first = 0;
    if (LOOM_UNLIKELY(stash.full)) {
        wcs_[0] = stash.wc;
        stash.full = false;
        first = 1;
    }
    int n = ibv_poll_cq(cq, static_cast<int>(wcs_.size()) - first, wcs_.data() + first);
    if (LOOM_UNLIKELY(n < 0)) {
        LOOM_LOG_ERROR("rc/{}: ibv_poll_cq ({}) failed: {}", resource().dev_name, what, n);
        n = 0;
    }
    return first + n;
}

unsigned RcIface::poll_tx() {
    int n = poll_cq(send_cq_, tx_stash_, "send");
    if (LOOM_UNLIKELY(n == 0)) return 0;
    for (int i = 0; i < n; ++i) {
        const ibv_wc& wc = wcs_[static_cast<std::size_t>(i)];
        auto it = qp_map_.find(wc.qp_num);
        RcEp* ep = it == qp_map_.end() ? nullptr : it->second;
        if (LOOM_UNLIKELY(ep == nullptr || (wc.wr_id >> kWrIdGenShift) != ep->gen)) continue;  // a dead QP's
        std::uint64_t sn = wc.wr_id & kWrIdSnMask;
        if (LOOM_LIKELY(wc.status == IBV_WC_SUCCESS)) {
            complete_upto(ep, sn, Status::ok);
        } else {
            tx_error(ep, wc);
            complete_upto(ep, sn, ep->cold->status);
        }
    }
    return static_cast<unsigned>(n);
}

void RcIface::tx_error(RcEp* ep, const ibv_wc& wc) {
    if (ep->flags & (kEpFailed | kEpClosing)) return;
    fail_ep(ep, wc_error_status(wc.status),
            fmt::format("{} (vendor error {:#x})", wc_status_text(wc.status), wc.vendor_err));
}

void RcIface::response_due(RcEp* ep, std::uint64_t sn) {
    ep->cold->response_sns.push_back(sn);
    ++ep->responses_due;
}

void RcIface::cpu_atomic_due(RcEp* ep, std::uint64_t sn) {
    ep->cold->cpu_atomic_sns.push_back(sn);
    ++ep->responses_due;
}

std::uint64_t RcIface::completable(RcEp* ep) {
    std::uint64_t upto = ep->acked_sn;
    if (LOOM_LIKELY(ep->responses_due == 0)) return upto;
    const auto& due = ep->cold->response_sns;
    const auto& cpu = ep->cold->cpu_atomic_sns;
    ep->responses_due = static_cast<std::uint16_t>(due.size() + cpu.size());
    if (!due.empty()) upto = std::min(upto, due.front() - 1);
    if (!cpu.empty()) upto = std::min(upto, cpu.front() - 1);
    return upto;
}

void RcIface::complete_upto(RcEp* ep, std::uint64_t sn, Status status) {
    if (LOOM_UNLIKELY(sn > ep->tx_sn)) return;  // corrupt
    if (LOOM_LIKELY(sn > ep->acked_sn)) {
        auto done = static_cast<std::int32_t>(sn - ep->acked_sn);
        ep->acked_sn = sn;
        cq_avail += done;
        if (LOOM_LIKELY(!(ep->flags & kEpFailed))) ep->sq_avail += done;
    } else if (ep->responses_due == 0) {
        return;  // nothing can complete twice
    }
    // Operations complete in sn order up to acked_sn, but never past a read or atomic whose
    // response has not arrived: on soft-iWARP a later send's completion comes first, and
    // taking it as the read's would hand out a buffer the read has not filled yet. An atomic
    // for the target's CPU waits for its reply the same way (cpu_atomic_reply).
    if (LOOM_UNLIKELY(ep->responses_due != 0)) {
        auto& due = ep->cold->response_sns;
        if (status != Status::ok) {
            while (!due.empty() && due.front() <= sn) due.pop_front();  // failed: nothing comes back
            auto& cpu = ep->cold->cpu_atomic_sns;
            while (!cpu.empty() && cpu.front() <= sn) cpu.pop_front();
        } else if (!due.empty() && due.front() == sn) {
            due.pop_front();
        } else if (!due.empty() && due.front() < sn && !ooo_seen_) {
            ooo_seen_ = true;
            LOOM_LOG_DIAG("rc/{}: request {} completed before the read or atomic {} posted earlier; {} waits for "
                          "its response (the device completes out of order)",
                          resource().dev_name, sn, due.front(), due.front());
        }
    }
    const std::uint64_t upto = completable(ep);
    while (!ep->ops.empty() && ep->ops.front().sn <= upto) {
        TxOp* op = ep->ops.pop_front();
        finish_op(op, status);
    }
    if (!ep->pending.empty() || (ep->flags & kEpGrantDue)) arbiter_add(ep);
}

void RcIface::finish_op(TxOp* op, Status status) {
    switch (op->kind) {
    case TxOpKind::buffer: tx_desc_pool.put(op); return;
    case TxOpKind::buffer_completion: {
        Completion* comp = op->comp;
        tx_desc_pool.put(op);
        completion_update(comp, status);
        return;
    }
    case TxOpKind::completion: {
        Completion* comp = op->comp;
        op_pool.put(op);
        completion_update(comp, status);
        return;
    }
    case TxOpKind::get_bcopy: {
        Completion* comp = op->comp;
        if (status == Status::ok) {
            op->unpack.cb(op->unpack.arg, reinterpret_cast<std::uint8_t*>(op) + kTxDescPayload, op->length);
        }
        tx_desc_pool.put(op);
        completion_update(comp, status);
        return;
    }
    case TxOpKind::fetch64: {
        Completion* comp = op->comp;
        if (status == Status::ok) {
            std::memcpy(op->result, reinterpret_cast<std::uint8_t*>(op) + kTxDescPayload,
                        sizeof(std::uint64_t));
        }
        tx_desc_pool.put(op);
        completion_update(comp, status);
        return;
    }
    case TxOpKind::iface_flush: {
        IfaceFlush* flush = op->flush;
        op_pool.put(op);
        finish_flush_part(flush, status);
        return;
    }
    case TxOpKind::cpu_atomic: {
        Completion* comp = op->comp;
        if (status == Status::ok) {
            RcAtomicReply reply;  // cpu_atomic_reply left it in the payload
            std::memcpy(&reply, reinterpret_cast<std::uint8_t*>(op) + kTxDescPayload, sizeof(reply));
            status = static_cast<Status>(reply.status);
            if (status == Status::ok && op->result != nullptr)
                std::memcpy(op->result, &reply.old, op->length);
        }
        tx_desc_pool.put(op);
        if (comp != nullptr) completion_update(comp, status);
        return;
    }
    }
}

unsigned RcIface::poll_rx() {
    int n = poll_cq(recv_cq_, rx_stash_, "receive");
    if (LOOM_UNLIKELY(n == 0)) return 0;
    // The handlers below may send (changing wcs_ is impossible: only progress polls) or destroy
    // endpoints (their memory stays valid until reap_closing).
    for (int i = 0; i < n; ++i) {
        const ibv_wc& wc = wcs_[static_cast<std::size_t>(i)];
        auto* desc = reinterpret_cast<std::uint8_t*>(wc.wr_id);
        mark_posted(desc, 0);
        RcEp* ep = rx_ep_of(wc.qp_num);
        if (srq_ != nullptr) {
            --srq_posted_;
        } else if (ep != nullptr) {
            --ep->rq_posted;
        }
        if (LOOM_UNLIKELY(wc.status != IBV_WC_SUCCESS)) {
            rx_error(ep, wc);
            rx_pool.put(desc);
            continue;
        }
        // The replacement goes up before anything below can return this buffer's credit (a
        // grant, or a reply from the handler): otherwise the peer's next send may find the
        // queue one short, which iWARP punishes with a TERMINATE (it has no RNR retry).
        if (srq_ != nullptr) {
            post_rx_srq(srq_target_ - srq_posted_);
        } else if (ep != nullptr && !(ep->flags & (kEpClosing | kEpFailed))) {
            (void)post_rx_qp(ep, 1);
        }
        RcAmHdr hdr;
        std::memcpy(&hdr, desc + kRxDescHdr, sizeof(hdr));
        if (LOOM_UNLIKELY(wc.byte_len < sizeof(RcAmHdr))) {
            LOOM_LOG_WARN("rc/{}: dropped a {}-byte message without header from QP {:#x}",
                          resource().dev_name, wc.byte_len, wc.qp_num);
            rx_pool.put(desc);
            continue;
        }
        if (ep != nullptr && hdr.credits != 0) {
            ep->fc_credits = static_cast<std::int16_t>(ep->fc_credits + hdr.credits);
            if (!ep->pending.empty() || (ep->flags & kEpGrantDue)) arbiter_add(ep);
        }
        if (LOOM_LIKELY(!(hdr.flags & kAmHdrGrant))) {
            if (LOOM_LIKELY(hdr.flags == 0)) {
                Status status =
                    invoke_am(hdr.am_id, desc + kRxDescPayload, wc.byte_len - sizeof(RcAmHdr), kAmCbFlagDesc);
                if (status != Status::in_progress) rx_pool.put(desc);
            } else {
                if (hdr.flags & kAmHdrAtomicReq) {
                    cpu_atomic_request(ep, desc + kRxDescPayload, wc.byte_len - sizeof(RcAmHdr));
                } else if (hdr.flags & kAmHdrAtomicReply) {
                    cpu_atomic_reply(ep, desc + kRxDescPayload, wc.byte_len - sizeof(RcAmHdr));
                } else {
                    LOOM_LOG_WARN("rc/{}: dropped a message with unknown flags {:#x} from QP {:#x}",
                                  resource().dev_name, hdr.flags, wc.qp_num);
                }
                rx_pool.put(desc);
            }
            if (ep != nullptr && !(ep->flags & (kEpClosing | kEpFailed))) {
                ++ep->rx_credits;
                if (ep->rx_credits >= grant_threshold) send_grant(ep);
            }
        } else {
            rx_pool.put(desc);
        }
    }
    if (srq_ != nullptr && srq_posted_ < srq_target_) post_rx_srq(srq_target_ - srq_posted_);
    return static_cast<unsigned>(n);
}

// --- atomics for the target's CPU (LOOM_IB_ATOMICS=cpu) -----------------------------------------

/*
 * The initiator sends an RcAtomicRequest like an active message (a credit and a receive
 * buffer); the target checks the key against its registrations of user memory (bounds and
 * atomic rights, IbMd::cpu_atomic_target), applies the operation with cpu_atomic, the same
 * instructions as shm and tcp, and answers every request with an RcAtomicReply, posted
 * ones too: the initiator's operation stays in its queue (cpu_atomic_sns) until then, so a
 * flush behind it completes only once the target has applied it, and a fence holds new
 * requests until the replies are in (fence_cpu_atomics).
 */
void RcIface::cpu_atomic_request(RcEp* ep, const std::uint8_t* data, std::size_t length) {
    if (ep == nullptr || (ep->flags & (kEpFailed | kEpClosing))) return;
    if (LOOM_UNLIKELY(length != sizeof(RcAtomicRequest))) {
        fail_ep(
            ep, Status::io_error,
            fmt::format("malformed atomic request ({} bytes, expected {})", length, sizeof(RcAtomicRequest)));
        return;
    }
    RcAtomicRequest req;
    std::memcpy(&req, data, sizeof(req));
    RcAtomicReply reply{};
    reply.sn = req.sn;
    Status status = Status::ok;
    const char* why = nullptr;
    void* word = nullptr;
    if ((req.size != 4 && req.size != 8) || req.op > static_cast<std::uint8_t>(AtomicOp::cswap) ||
        req.remote_addr % req.size != 0) {
        status = Status::invalid_param;
        why = "bad operation, size or alignment";
    } else if ((word = md_->cpu_atomic_target(req.rkey, req.remote_addr, req.size, &why)) == nullptr) {
        status = Status::access_denied;
    }
    if (status == Status::ok) {
        const auto op = static_cast<AtomicOp>(req.op);
        reply.old = req.size == 8 ? cpu_atomic<std::uint64_t>(op, static_cast<std::uint64_t*>(word),
                                                              req.value, req.compare)
                                  : cpu_atomic<std::uint32_t>(op, static_cast<std::uint32_t*>(word),
                                                              static_cast<std::uint32_t>(req.value),
                                                              static_cast<std::uint32_t>(req.compare));
    } else {
        LOOM_LOG_WARN("rc/{}: refused a {}-byte atomic from {} at {:#x} (rkey {:#x}): {}",
                      resource().dev_name, req.size, ep->cold->peer, req.remote_addr, req.rkey, why);
    }
    reply.status = static_cast<std::int8_t>(status);
    try {
        ep->cold->replies_due.push_back(reply);
    } catch (const std::bad_alloc&) {
        fail_ep(ep, Status::no_memory, "out of memory for an atomic reply");
        return;
    }
    if (!send_replies(ep)) {
        ep->flags |= kEpGrantDue;
        arbiter_add(ep);
    }
}

bool RcIface::send_replies(RcEp* ep) {
    auto& due = ep->cold->replies_due;
    while (!due.empty()) {
        if (ep->flags & (kEpFailed | kEpClosing)) {
            due.clear();
            return true;
        }
        if (!(ep->flags & kEpConnected) || sq_room(ep) <= 0 || cq_avail <= 0 || ep->fc_credits <= 0)
            return false;
        const std::uint16_t credits = ep->rx_credits;
        RcAmHdr hdr{0, kAmHdrAtomicReply, credits};
        void* desc = nullptr;
        ibv_sge sge;
        ibv_send_wr wr{};
        constexpr std::uint32_t kTotal = sizeof(RcAmHdr) + sizeof(RcAtomicReply);
        std::uint8_t staged[kTotal];
        if (kTotal <= max_inline) {
            std::memcpy(staged, &hdr, sizeof(hdr));
            std::memcpy(staged + sizeof(hdr), &due.front(), sizeof(RcAtomicReply));
            sge = {reinterpret_cast<std::uintptr_t>(staged), kTotal, 0};
            wr.send_flags = IBV_SEND_INLINE;
        } else {
            if (tx_desc_pool.try_get(desc) != Status::ok) return false;
            auto* bytes = static_cast<std::uint8_t*>(desc);
            std::memcpy(bytes + kTxDescHdr, &hdr, sizeof(hdr));
            std::memcpy(bytes + kTxDescPayload, &due.front(), sizeof(RcAtomicReply));
            sge = {reinterpret_cast<std::uintptr_t>(bytes + kTxDescHdr), kTotal,
                   static_cast<TxOp*>(desc)->lkey};
        }
        wr.opcode = IBV_WR_SEND;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        const std::uint64_t sn = ep->tx_sn + 1;
        wr.wr_id = (static_cast<std::uint64_t>(ep->gen) << kWrIdGenShift) | sn;
        const bool signaled = desc != nullptr || ep->unsignaled + 1u >= signal_interval;
        if (signaled) wr.send_flags |= IBV_SEND_SIGNALED;
        ibv_send_wr* bad = nullptr;
        if (int rc = ibv_post_send(ep->qp, &wr, &bad); rc != 0) {
            if (desc != nullptr) tx_desc_pool.put(desc);
            (void)post_failed(ep, rc, "atomic reply");
            return false;
        }
        ep->unsignaled = signaled ? 0 : static_cast<std::uint16_t>(ep->unsignaled + 1);
        ep->tx_sn = sn;
        --ep->sq_avail;
        --cq_avail;
        --ep->fc_credits;
        ep->rx_credits = static_cast<std::uint16_t>(ep->rx_credits - credits);
        if (desc != nullptr) {
            auto* op = static_cast<TxOp*>(desc);
            op->kind = TxOpKind::buffer;
            op->sn = sn;
            ep->ops.push_back(*op);
        }
        due.pop_front();
    }
    return true;
}

void RcIface::cpu_atomic_reply(RcEp* ep, const std::uint8_t* data, std::size_t length) {
    if (ep == nullptr || (ep->flags & (kEpFailed | kEpClosing))) return;
    RcAtomicReply reply;
    if (LOOM_UNLIKELY(length != sizeof(reply))) {
        fail_ep(ep, Status::io_error,
                fmt::format("malformed atomic reply ({} bytes, expected {})", length, sizeof(reply)));
        return;
    }
    std::memcpy(&reply, data, sizeof(reply));
    auto& sns = ep->cold->cpu_atomic_sns;
    auto it = std::find(sns.begin(), sns.end(), reply.sn);
    if (LOOM_UNLIKELY(it == sns.end())) {
        fail_ep(ep, Status::io_error,
                fmt::format("an atomic reply for request {}, which waits for none", reply.sn));
        return;
    }
    sns.erase(it);
    TxOp* posted_refused = nullptr;
    for (TxOp& op : ep->ops) {
        if (op.sn == reply.sn && op.kind == TxOpKind::cpu_atomic) {
            std::memcpy(reinterpret_cast<std::uint8_t*>(&op) + kTxDescPayload, &reply, sizeof(reply));
            if (reply.status != static_cast<std::int8_t>(Status::ok) && op.comp == nullptr)
                posted_refused = &op;
            break;
        }
    }
    if (LOOM_UNLIKELY(posted_refused != nullptr)) {
        // Nobody waits for a posted atomic: the endpoint fails, as a NIC's refused atomic fails its QP.
        fail_ep(ep, static_cast<Status>(reply.status), "the peer refused a posted atomic (see its log)");
        return;
    }
    const std::uint64_t upto = completable(ep);
    while (!ep->ops.empty() && ep->ops.front().sn <= upto) finish_op(ep->ops.pop_front(), Status::ok);
    if (sns.empty() && ep->cold->fence_held) fence_release(ep);
}

void RcIface::fence_cpu_atomics(RcEp* ep) {
    if (ep->cold->cpu_atomic_sns.empty() || ep->cold->fence_held || (ep->flags & (kEpFailed | kEpClosing)))
        return;
    ep->cold->fence_held = true;
    ep->sq_avail -= kFenceHold;
}

void RcIface::fence_release(RcEp* ep) {
    ep->cold->fence_held = false;
    if (ep->flags & kEpFailed) return;  // sq_avail stays kFailedSqAvail
    ep->sq_avail += kFenceHold;
    if (!ep->pending.empty()) arbiter_add(ep);
}

void RcIface::rx_error(RcEp* ep, const ibv_wc& wc) {
    // Flushed receives are the queue pair going away (error or destruction), not news.
    if (wc.status == IBV_WC_WR_FLUSH_ERR || ep == nullptr || (ep->flags & (kEpFailed | kEpClosing))) return;
    fail_ep(ep, wc_error_status(wc.status),
            fmt::format("receive failed: {} (vendor error {:#x})", wc_status_text(wc.status), wc.vendor_err));
}

void RcIface::send_grant(RcEp* ep) {
    if (ep->rx_credits == 0 || (ep->flags & (kEpFailed | kEpClosing))) {
        ep->flags &= static_cast<std::uint8_t>(~kEpGrantDue);
        return;
    }
    if (!(ep->flags & kEpConnected)) {
        // An accepting endpoint receives as soon as its QP is ready, which may be before its
        // ESTABLISHED event is read: the grant goes out from connected().
        ep->flags |= kEpGrantDue;
        return;
    }
    if (sq_room(ep) <= 0 || cq_avail <= 0) {
        ep->flags |= kEpGrantDue;
        arbiter_add(ep);
        return;
    }
    RcAmHdr hdr{0, kAmHdrGrant, ep->rx_credits};
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(&hdr), sizeof(hdr), 0};
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_INLINE;
    std::uint64_t sn = ep->tx_sn + 1;
    wr.wr_id = (static_cast<std::uint64_t>(ep->gen) << kWrIdGenShift) | sn;
    bool signaled = ep->unsignaled + 1u >= signal_interval;
    if (signaled) wr.send_flags |= IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(ep->qp, &wr, &bad); rc != 0) {
        (void)post_failed(ep, rc, "credit grant");
        ep->flags |= kEpGrantDue;
        arbiter_add(ep);
        return;
    }
    ep->unsignaled = signaled ? 0 : static_cast<std::uint16_t>(ep->unsignaled + 1);
    ep->tx_sn = sn;
    --ep->sq_avail;
    --cq_avail;
    ep->rx_credits = 0;
    ep->flags &= static_cast<std::uint8_t>(~kEpGrantDue);
}

void RcIface::send_control(RcEp* ep) {
    // Replies first: each returns the credits owed as well.
    const bool replied = ep->cold->replies_due.empty() || send_replies(ep);
    send_grant(ep);
    if (!replied) {
        ep->flags |= kEpGrantDue;
        arbiter_add(ep);
    }
}

void RcIface::dispatch_arbiter() {
    ucs::Queue<RcEp, &RcEp::arb_link> round;
    bool again = true;
    while (again && !arbiter_.empty()) {
        again = false;
        round.splice_back(arbiter_);
        while (RcEp* ep = round.pop_front()) {
            ep->flags &= static_cast<std::uint8_t>(~kEpInArbiter);
            if (ep->flags & kEpClosing) continue;
            if (ep->flags & kEpGrantDue) send_control(ep);
            if (ep->pending.empty()) continue;
            // One request per endpoint and round: endpoints are served fairly.
            if (ep->failed() || (ep->sq_avail > 0 && cq_avail > 0)) {
                PendingReq* req = ep->pending.pop_front();
                Status status = req->func(req);
                if (status == Status::no_resource) {
                    ep->pending.push_front(*req);
                } else {
                    again = true;
                }
            }
            if (!ep->pending.empty() && !(ep->flags & kEpClosing)) arbiter_add(ep);
        }
    }
    // What is left has been tried and waits for resources (send-queue and CQ entries, or
    // credits), which come with a send or receive completion, an event: event_arm need not
    // ask for another round.
    arbiter_fresh_ = false;
}

// --- errors ---------------------------------------------------------------------------------

Status RcIface::resource_status(RcEp* ep) {
    if (ep->flags & kEpFailed) return ep->cold->status;
    if (ep->flags & kEpClosing) return Status::canceled;
    if (ep->cold->connect_on_first_use) {
        if (Status s = cm_connect_on_first_use(ep); s != Status::ok) return s;
    }
    return Status::no_resource;
}

Status RcIface::post_failed(RcEp* ep, int rc, const char* what) {
    // Providers disagree on the sign: mlx5 and rxe return errno values, siw negative ones.
    if (rc < 0) rc = -rc;
    if (rc == ENOMEM) {
        LOOM_LOG_DEBUG("rc/{}: {} on QP {:#x}: send queue full", resource().dev_name, what, ep->qp_num);
        return Status::no_resource;
    }
    LOOM_LOG_ERROR("rc/{}: {} on QP {:#x} failed: {}", resource().dev_name, what, ep->qp_num,
                   std::strerror(rc));
    return Status::io_error;
}

void RcIface::fail_ep(RcEp* ep, Status status, const std::string& why) {
    if (ep->flags & (kEpFailed | kEpClosing)) return;
    ep->flags |= kEpFailed;
    ep->flags &= static_cast<std::uint8_t>(~(kEpGrantDue | kEpFence));
    ep->cold->status = status;
    ep->sq_avail = kFailedSqAvail;
    if (ep->qp != nullptr) qp_to_error(ep);
    if (ep->flags & kEpPassive) {
        // An accepted connection belongs to the iface: nobody to tell, it just goes away.
        LOOM_LOG_DEBUG("rc/{}: accepted connection from {} ended: {} ({})", resource().dev_name,
                       ep->cold->peer, why, to_string(status));
        close_ep(ep);
        return;
    }
    LOOM_LOG_WARN("rc/{}: endpoint to {} failed: {} ({})", resource().dev_name,
                  ep->cold->peer.empty() ? std::string("an unconnected peer") : ep->cold->peer, why,
                  to_string(status));
    failed_unreported_.push_back(ep);
    ep->cold->deadline = std::chrono::steady_clock::now() + kFailFlushGrace;
    draining_.push_back(ep);
}

void RcIface::drain_failed() {
    auto now = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < draining_.size();) {
        RcEp* ep = draining_[i];
        if (ep->tx_sn != ep->acked_sn && now < ep->cold->deadline) {
            ++i;
            continue;
        }
        if (ep->tx_sn != ep->acked_sn) {
            LOOM_LOG_DEBUG("rc/{}: QP {:#x}: {} requests never flushed by the device; completing them",
                           resource().dev_name, ep->qp_num, ep->tx_sn - ep->acked_sn);
        }
        if (ep->tx_sn != ep->acked_sn || ep->responses_due != 0) {
            // Their CQ entries will never be used: the accounting of complete_upto stays right.
            // Atomics for the peer's CPU whose requests did complete get no reply any more.
            complete_upto(ep, ep->tx_sn, ep->cold->status);
        }
        draining_[i] = draining_.back();
        draining_.pop_back();
    }
}

void RcIface::report_errors() {
    std::vector<RcEp*> failed;
    failed.swap(failed_unreported_);
    for (RcEp* ep : failed) {
        if ((ep->flags & kEpClosing) || ep->cold->error_reported) continue;
        if (ep->tx_sn != ep->acked_sn) {
            // Reported once every outstanding request has completed with the error (flushed by
            // the device, or by drain_failed after the grace time): the callback finds the
            // endpoint quiet, as after a tcp or shm failure.
            failed_unreported_.push_back(ep);
            continue;
        }
        ep->cold->error_reported = true;
        if (ep->cold->on_error != nullptr) ep->cold->on_error(ep->cold->on_error_arg, ep, ep->cold->status);
    }
}

// --- flush ----------------------------------------------------------------------------------

Status RcIface::post_flush_marker(RcEp* ep) {
    // A signaled zero-length request completes after everything posted before it. On iWARP a
    // write completes once handed to TCP, so only a read proves earlier writes were placed.
    ibv_send_wr wr{};
    wr.opcode = iwarp_ ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
    // On iWARP it reads the peer's flush word (RcCmPrivate) into the scratch word: a read
    // with real STags on both ends, which every implementation handles.
    ibv_sge sink{reinterpret_cast<std::uintptr_t>(atomic_scratch), sizeof(std::uint64_t), atomic_scratch_lkey};
    if (iwarp_) {
        wr.sg_list = &sink;
        wr.num_sge = 1;
        wr.wr.rdma.remote_addr = ep->cold->flush_addr;
        wr.wr.rdma.rkey = ep->cold->flush_rkey;
    }
    std::uint64_t sn = ep->tx_sn + 1;
    wr.wr_id = (static_cast<std::uint64_t>(ep->gen) << kWrIdGenShift) | sn;
    wr.send_flags = IBV_SEND_SIGNALED;
    // The marker completes after everything before it, so it needs no fence; iWARP even
    // forbids one on a READ (siw resets the connection).
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(ep->qp, &wr, &bad); rc != 0) return post_failed(ep, rc, "flush");
    ep->flags &= static_cast<std::uint8_t>(~(kEpFence | kEpUnflushedWrites));
    ep->unsignaled = 0;
    ep->tx_sn = sn;
    --ep->sq_avail;
    --cq_avail;
    if (iwarp_) response_due(ep, sn);
    return Status::ok;
}

bool RcIface::sn_answered(const RcEp* ep, std::uint64_t sn) {
    if (sn == 0 || ep->acked_sn < sn) return false;
    // acked_sn alone is not proof: soft-iWARP completes a later send once TCP has it, which
    // moves acked_sn past a read before the read's response is back (complete_upto). A read
    // is answered when its sn has left the responses still due (kept in sn order).
    const auto& due = ep->cold->response_sns;
    return due.empty() || due.front() > sn;
}

bool RcIface::probe_answered(const RcEp* ep) {
    return sn_answered(ep, ep->cold->probe_sn);
}

/*
 * Keep-alive. A peer host that vanished (powered off, cable pulled, packets dropped) sends
 * nothing, so an idle endpoint never learns of it: only a request of ours can time out. Each
 * call awaits the answer to one request: the last one posted when a signaled request is in
 * flight (its completion answers), otherwise a flush marker posted for the purpose (a
 * zero-length write, a read of the flush word on iWARP), so an idle connection costs one
 * empty packet per interval. The peer's device answers, not its progress. An answer awaited
 * for longer than @p timeout_ns fails the endpoint with peer_timeout; the QP's own retries
 * (LOOM_IB_TIMEOUT x LOOM_IB_RETRY_COUNT) would too, but that bound belongs to the data
 * path and is not the keep-alive's. A full send queue skips a round: its requests are in
 * flight and their retries watch the peer.
 */
Status RcIface::ep_check(RcEp* ep, std::uint64_t timeout_ns) {
    if (ep->flags & kEpFailed) return ep->cold->status;
    if ((ep->flags & kEpClosing) || !(ep->flags & kEpConnected)) return Status::ok;
    RcEpCold& cold = *ep->cold;
    const auto now = std::chrono::steady_clock::now();
    if (cold.keepalive_sn != 0) {
        if (!sn_answered(ep, cold.keepalive_sn)) {
            const auto waited = now - cold.keepalive_since;
            if (waited < std::chrono::nanoseconds(timeout_ns)) return Status::in_progress;
            fail_ep(
                ep, Status::peer_timeout,
                fmt::format("no answer to a keep-alive probe for {} ms: the peer host or the network is gone",
                            std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()));
            return Status::peer_timeout;
        }
        cold.keepalive_sn = 0;
    }
    if (ep->tx_sn == ep->acked_sn || ep->unsignaled != 0) {
        if (ep->sq_avail <= 0 || cq_avail <= 0) return Status::ok;
        if (post_flush_marker(ep) != Status::ok) return ep->cold->status;  // logged; the endpoint failed
    }
    cold.keepalive_sn = ep->tx_sn;
    cold.keepalive_since = now;
    return Status::in_progress;
}

bool RcIface::probe_wanted(const RcEp* ep) {
    if (ep->flags & (kEpFailed | kEpClosing)) return false;
    if (probe_answered(ep)) return false;
    return ep->tx_sn != 0 && ep->cold->probes < kProbeMax;
}

/*
 * Why iWARP initiators probe. soft-iWARP's accept (siw_accept) sends the MPA reply and
 * only then hands the socket's receive callback to the queue pair; a frame of ours that
 * arrives in between wakes nobody and stays unread in the acceptor's socket until another
 * frame arrives. The initiator learns of the connection from that reply, so its first
 * requests can fall into that window whenever the acceptor's CPU is slow to return from
 * the reply (a preempted vCPU under emulation: seen as a first get that never completed).
 * An RDMA read cannot be answered before everything sent ahead of it has been read, so
 * one read that completes proves the acceptor reads this connection; a read that arrives
 * after the window also makes it read what waited before it. The probe is a flush marker
 * (a read of the acceptor's flush word), posted a millisecond after the connection is
 * established or at the first progress after the first request, whichever is later, and
 * again after 2, 4, ... ms while none has been answered. MPA forbids the acceptor to send
 * first, so it cannot announce itself instead.
 */
void RcIface::probe_acceptors(std::chrono::steady_clock::time_point now) {
    for (std::size_t i = 0; i < unconfirmed_.size();) {
        RcEp* ep = unconfirmed_[i];
        const bool answered = probe_answered(ep);
        if (answered || (ep->flags & (kEpFailed | kEpClosing)) || ep->cold->probes >= kProbeMax) {
            if (answered && ep->cold->probes > 1) {
                LOOM_LOG_DEBUG("rc/{}: QP {:#x}: the acceptor {} answered probe {}", resource().dev_name,
                               ep->qp_num, ep->cold->peer, ep->cold->probes);
            }
            unconfirmed_[i] = unconfirmed_.back();
            unconfirmed_.pop_back();
            continue;
        }
        ++i;
        if (ep->tx_sn == 0 || now < ep->cold->probe_at || ep->sq_avail <= 0 || cq_avail <= 0) continue;
        if (post_flush_marker(ep) != Status::ok) continue;  // logged; the endpoint fails
        ep->cold->probe_sn = ep->tx_sn;
        ++ep->cold->probes;
        ep->cold->probe_at = now + kProbeFirst * (1u << ep->cold->probes);
        if (ep->cold->probes > 1) {
            LOOM_LOG_DEBUG("rc/{}: QP {:#x}: no answer from the acceptor {} yet; probe {}", resource().dev_name,
                           ep->qp_num, ep->cold->peer, ep->cold->probes);
        }
    }
}

/** What flushing @p ep needs: nothing (ok), a marker request, or to wait (no_resource). */
Status RcIface::flush_prepare(RcEp* ep, bool& needs_marker) const {
    needs_marker = false;
    if (!ep->pending.empty()) return Status::no_resource;
    bool remote = iwarp_ && (ep->flags & kEpUnflushedWrites);
    // Reads whose responses and atomics whose replies are still due complete later, through
    // the operations queue, where the flush's own record waits behind them.
    if (ep->tx_sn == ep->acked_sn && ep->responses_due == 0 && !remote) return Status::ok;
    if (ep->unsignaled != 0 || remote) {
        if (ep->sq_avail <= 0 || cq_avail <= 0) return Status::no_resource;
        needs_marker = true;
    }
    return Status::in_progress;
}

Status RcIface::ep_flush(RcEp* ep, unsigned flags, Completion* comp) {
    if (ep->flags & kEpFailed) return ep->cold->status;
    if (ep->flags & kEpClosing) return Status::canceled;
    if (flags & kFlushCancel) {
        // Every outstanding request completes with canceled as the QP flushes; the endpoint is
        // unusable afterwards, as after a failure, but nobody is told of an error.
        ep->pending.clear();
        ep->flags |= kEpFailed;
        ep->cold->status = Status::canceled;
        ep->cold->error_reported = true;
        ep->sq_avail = kFailedSqAvail;
        if (ep->qp != nullptr) qp_to_error(ep);
        if (ep->tx_sn == ep->acked_sn) return Status::ok;
        ep->cold->deadline = std::chrono::steady_clock::now() + kFailFlushGrace;
        draining_.push_back(ep);
        if (comp != nullptr) {
            void* record;
            if (Status s = op_pool.try_get(record); s != Status::ok) return s;
            auto* op = static_cast<TxOp*>(record);
            op->comp = comp;
            op->kind = TxOpKind::completion;
            op->sn = ep->tx_sn;
            ep->ops.push_back(*op);
        }
        return Status::in_progress;
    }
    bool marker = false;
    Status status = flush_prepare(ep, marker);
    if (status != Status::in_progress) return status;
    void* record = nullptr;
    if (comp != nullptr) {
        if (Status s = op_pool.try_get(record); s != Status::ok) return s;
    }
    if (marker) {
        if (Status s = post_flush_marker(ep); s != Status::ok) {
            if (record != nullptr) op_pool.put(record);
            return s;
        }
    }
    if (record != nullptr) {
        auto* op = static_cast<TxOp*>(record);
        op->comp = comp;
        op->kind = TxOpKind::completion;
        op->sn = ep->tx_sn;
        ep->ops.push_back(*op);
    }
    return Status::in_progress;
}

Status RcIface::iface_flush(unsigned flags, Completion* comp) {
    if (flags & kFlushCancel) {
        LOOM_LOG_ERROR("rc/{}: iface_flush with kFlushCancel: cancel is per endpoint", resource().dev_name);
        return Status::invalid_param;
    }
    // First decide for every endpoint, so that nothing is posted when the flush cannot start.
    std::vector<std::pair<RcEp*, bool>> parts;
    for (RcEp* ep : eps_) {
        if (ep->flags & (kEpFailed | kEpClosing)) continue;
        bool marker = false;
        Status status = flush_prepare(ep, marker);
        if (status == Status::no_resource) return status;
        if (status == Status::in_progress) parts.emplace_back(ep, marker);
    }
    if (parts.empty()) return Status::ok;
    IfaceFlush* flush = nullptr;
    if (comp != nullptr) {
        flush = new IfaceFlush{comp, 0, Status::ok, flushes_, nullptr};
        if (flushes_ != nullptr) flushes_->prev = flush;
        flushes_ = flush;
    }
    for (auto [ep, marker] : parts) {
        if (marker && post_flush_marker(ep) != Status::ok) continue;  // logged; that endpoint has failed
        if (flush == nullptr) continue;
        void* record = op_pool.get();
        if (record == nullptr) continue;
        auto* op = static_cast<TxOp*>(record);
        op->flush = flush;
        op->kind = TxOpKind::iface_flush;
        op->sn = ep->tx_sn;
        ep->ops.push_back(*op);
        ++flush->remaining;
    }
    if (flush != nullptr && flush->remaining == 0) {
        unlink_flush(flush);
        delete flush;
        return Status::ok;
    }
    return Status::in_progress;
}

void RcIface::finish_flush_part(IfaceFlush* flush, Status status) {
    if (flush->status == Status::ok) flush->status = status;
    if (--flush->remaining > 0) return;
    Completion* comp = flush->comp;
    Status result = flush->status;
    unlink_flush(flush);
    delete flush;
    completion_update(comp, result);
}

void RcIface::unlink_flush(IfaceFlush* flush) {
    if (flush->prev != nullptr) {
        flush->prev->next = flush->next;
    } else {
        flushes_ = flush->next;
    }
    if (flush->next != nullptr) flush->next->prev = flush->prev;
}

}  // namespace loom::uct::ib
