/**
 * The queue pair of an rc endpoint, from creation to destruction: the attributes every
 * QP is created with (and the probe of the device's inline limit, on throw-away QPs),
 * creation on the iface's CQs and SRQ, the moves to INIT, RTR and RTS (from a peer's
 * endpoint address with verbs, from rdma_cm's attributes with rdma_cm), the error
 * state that flushes outstanding requests, and destruction.
 */
#include "uct/ib/rc_iface.h"

#include "uct/ib/ib_log.h"
#include "uct/ib/ib_md.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace loom::uct::ib {

namespace {

/** Largest inline size probed when LOOM_IB_TX_MAX_INLINE=auto. */
constexpr std::size_t kMaxInlineProbe = 1024;

}  // namespace

// --- attributes ------------------------------------------------------------------------------

ibv_qp_init_attr RcIface::qp_init_attr(std::uint32_t inline_size) const {
    ibv_qp_init_attr attr{};
    attr.send_cq = send_cq_;
    attr.recv_cq = recv_cq_;
    attr.srq = srq_;
    attr.qp_type = IBV_QPT_RC;
    attr.sq_sig_all = 0;
    attr.cap.max_send_wr = tx_queue_len_;
    attr.cap.max_recv_wr = srq_ != nullptr ? 0 : fc_window_ + kGrantSlots;
    attr.cap.max_send_sge = max_send_sge;
    attr.cap.max_recv_sge = 1;
    attr.cap.max_inline_data = inline_size;
    return attr;
}

Status RcIface::probe_inline() {
    // Devices differ widely (rxe takes 512 bytes, siw 80) and reject a request above their
    // limit, so the largest accepted size is found by bisection on throw-away QPs.
    std::size_t want = config_.max_inline == ucs::config::kSizeAuto ? kMaxInlineProbe : config_.max_inline;
    std::uint32_t lo = 0, hi = static_cast<std::uint32_t>(std::min<std::size_t>(want, kMaxInlineProbe * 64));
    while (lo < hi) {
        std::uint32_t mid = lo + (hi - lo + 1) / 2;
        ibv_qp_init_attr attr = qp_init_attr(mid);
        ibv_qp* qp = ibv_create_qp(md_->pd(), &attr);
        if (qp != nullptr) {
            lo = std::max(mid, attr.cap.max_inline_data);
            (void)ibv_destroy_qp(qp);
            if (lo >= hi) break;
        } else {
            hi = mid - 1;
        }
    }
    max_inline = lo;
    ibv_qp_init_attr attr = qp_init_attr(max_inline);
    ibv_qp* qp = ibv_create_qp(md_->pd(), &attr);
    if (qp == nullptr) {
        LOOM_LOG_ERROR("rc/{}: cannot create an RC queue pair ({} send entries, {} sge): {}",
                       resource().dev_name, tx_queue_len_, max_send_sge, std::strerror(errno));
        return Status::no_resource;
    }
    (void)ibv_destroy_qp(qp);
    return Status::ok;
}

// --- creation and state changes --------------------------------------------------------------

Status RcIface::create_qp(RcEp* ep, rdma_cm_id* cm_id) {
    // Always on our own context and protection domain, also for rdma_cm connections (whose
    // ids carry librdmacm's context of the same device): librdmacm opens its contexts once
    // per process, so a child forked after the parent used rdma_cm inherits them, and the
    // kernel refuses a forked child's commands on an inherited verbs file (EACCES).
    ibv_qp_init_attr attr = qp_init_attr(max_inline);
    ep->qp = ibv_create_qp(md_->pd(), &attr);
    if (ep->qp == nullptr) {
        LOOM_LOG_ERROR("rc/{}: ibv_create_qp failed: {}", resource().dev_name, std::strerror(errno));
        return Status::no_resource;
    }
    ep->qp_num = ep->qp->qp_num;
    qp_map_[ep->qp_num] = ep;
    if (cm_id != nullptr) {
        ep->cold->cm_id = cm_id;
        return cm_qp_to(ep, IBV_QPS_INIT, 0);
    }
    return Status::ok;
}

Status RcIface::cm_qp_to(RcEp* ep, ibv_qp_state state, std::uint32_t rd_atomic) {
    ibv_qp_attr attr{};
    int mask = 0;
    attr.qp_state = state;
    if (rdma_init_qp_attr(ep->cold->cm_id, &attr, &mask) != 0) {
        LOOM_LOG_ERROR("rc/{}: QP {:#x}: rdma_init_qp_attr({}) failed: {}", resource().dev_name, ep->qp_num,
                       static_cast<int>(state), std::strerror(errno));
        return Status::io_error;
    }
    if (state == IBV_QPS_INIT) {
        // Before the connection exists rdma_cm grants no remote access; the peer's reads,
        // writes and atomics need it from the start.
        attr.qp_access_flags |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
        if (atomics_) attr.qp_access_flags |= IBV_ACCESS_REMOTE_ATOMIC;
        mask |= IBV_QP_ACCESS_FLAGS;
    } else if (state == IBV_QPS_RTR) {
        // rdma_ucm reports RoCE-only attribute bits on InfiniBand ports too (librdmacm masks them).
        if (!port_.ethernet()) mask &= ~0xe00000;
        if (rd_atomic != 0) attr.max_dest_rd_atomic = static_cast<std::uint8_t>(rd_atomic);
    } else if (state == IBV_QPS_RTS && rd_atomic != 0) {
        attr.max_rd_atomic = static_cast<std::uint8_t>(rd_atomic);
    }
    if (int rc = ibv_modify_qp(ep->qp, &attr, mask); rc != 0) {
        LOOM_LOG_ERROR("rc/{}: QP {:#x} to state {} failed: {}", resource().dev_name, ep->qp_num,
                       static_cast<int>(state), std::strerror(rc));
        return Status::io_error;
    }
    return Status::ok;
}

Status RcIface::cm_qp_ready(RcEp* ep, std::uint32_t responder_resources, std::uint32_t initiator_depth) {
    // INIT again: once the connection exists rdma_cm's attributes (access, port, pkey) are final.
    Status s = cm_qp_to(ep, IBV_QPS_INIT, 0);
    if (s == Status::ok) s = cm_qp_to(ep, IBV_QPS_RTR, responder_resources);
    if (s == Status::ok) s = cm_qp_to(ep, IBV_QPS_RTS, initiator_depth);
    return s;
}

Status RcIface::qp_to_init(RcEp* ep) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = port_.num;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (atomics_) attr.qp_access_flags |= IBV_ACCESS_REMOTE_ATOMIC;
    int rc =
        ibv_modify_qp(ep->qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc != 0) {
        LOOM_LOG_ERROR("rc/{}: QP {:#x} to INIT failed: {}", resource().dev_name, ep->qp_num,
                       std::strerror(rc));
        return Status::io_error;
    }
    return Status::ok;
}

Status RcIface::qp_to_rts(RcEp* ep, const RcDeviceAddress& dev, const RcEpAddress& peer) {
    const std::string& name = resource().dev_name;
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = std::min(path_mtu_, static_cast<ibv_mtu>(peer.mtu));
    attr.dest_qp_num = peer.qpn;
    attr.rq_psn = peer.psn & 0xffffff;
    attr.max_dest_rd_atomic = static_cast<std::uint8_t>(max_dest_rd_atomic_);
    attr.min_rnr_timer = 12;  // 0.64 ms: only a safety net, flow control keeps buffers posted
    attr.ah_attr.port_num = port_.num;
    attr.ah_attr.sl = static_cast<std::uint8_t>(config_.service_level);
    if (port_.ethernet()) {
        attr.ah_attr.is_global = 1;
        std::memcpy(attr.ah_attr.grh.dgid.raw, dev.gid, sizeof(dev.gid));
        attr.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(gid_index_);
        attr.ah_attr.grh.hop_limit = static_cast<std::uint8_t>(config_.hop_limit);
        attr.ah_attr.grh.traffic_class = static_cast<std::uint8_t>(config_.traffic_class);
    } else {
        attr.ah_attr.dlid = dev.lid;
    }
    int rc = ibv_modify_qp(ep->qp, &attr,
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc != 0) {
        LOOM_LOG_ERROR("rc/{}: QP {:#x} to RTR (peer QP {:#x}) failed: {}", name, ep->qp_num, peer.qpn,
                       std::strerror(rc));
        return Status::io_error;
    }
    attr = {};
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = timeout_exp_;
    attr.retry_cnt = static_cast<std::uint8_t>(config_.retry_count);
    attr.rnr_retry = static_cast<std::uint8_t>(config_.rnr_retry);
    attr.sq_psn = ep->cold->psn;
    attr.max_rd_atomic = static_cast<std::uint8_t>(max_rd_atomic_);
    rc = ibv_modify_qp(ep->qp, &attr,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc != 0) {
        LOOM_LOG_ERROR("rc/{}: QP {:#x} to RTS failed: {}", name, ep->qp_num, std::strerror(rc));
        return Status::io_error;
    }
    return Status::ok;
}

void RcIface::qp_to_error(RcEp* ep) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    (void)ibv_modify_qp(ep->qp, &attr, IBV_QP_STATE);  // flushes every posted request with a completion
}

void RcIface::destroy_qp(RcEp* ep) {
    if (ep->qp == nullptr) return;
    qp_map_.erase(ep->qp_num);
    rx_last_ep_ = nullptr;  // the receive path's cache may name it
    (void)ibv_destroy_qp(ep->qp);
    ep->qp = nullptr;
}

}  // namespace loom::uct::ib
