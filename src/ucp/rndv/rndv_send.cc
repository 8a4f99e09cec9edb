/**
 * Rendezvous, the sender's side (rndv.h): the RTS fields and the registration of the
 * buffer, the receiver's answers (ATS: done; RTR: the AM pipeline; PUT_RTR: the PUT
 * schemes), the PUTs with their completion records and the FIN that ends them.
 */
#include "ucp/rndv/rndv.h"

#include "ucp/core/ucp_log.h"
#include "ucp/tag/tag_proto.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace loom::ucp {

namespace {

/** A send request (not a receive, RMA operation, flush or control message). */
bool is_send(const Request* req) { return !(req->flags & (kReqRecv | kReqRma | kReqFlush | kReqCtrl)); }

Status ats_handler(void* arg, void* data, std::size_t length, unsigned) {
    auto& w = *static_cast<Worker*>(arg);
    if (length < sizeof(AckHdr)) return Status::ok;
    AckHdr ack;
    std::memcpy(&ack, data, sizeof(ack));
    if (Request* split = w.req_table.find(ack.sreq_id); split != nullptr && is_send(split) &&
                                                        (split->send.rndv_wait & kSendWaitPutScheme)) {
        if (!(split->send.rndv_wait & kSendWaitAts)) {
            LOOM_LOG_WARN("ucp: dropped a rendezvous completion for request {:#x}, which PUTs", ack.sreq_id);
            return Status::ok;
        }
        // Split scheme: the receiver has the head; the send completes when its PUTs are done too.
        split->send.rndv_wait &= ~kSendWaitAts;
        const auto status = static_cast<Status>(ack.status);
        if (status != Status::ok && split->send.rndv_status == Status::ok) split->send.rndv_status = status;
        if (split->send.rndv_wait & (kSendWaitPuts | kSendWaitFin)) return Status::ok;  // its FIN completes it
    }
    Request* req = w.req_table.take(ack.sreq_id);
    if (req == nullptr) {
        LOOM_LOG_WARN("ucp: dropped a rendezvous completion for unknown request {:#x}", ack.sreq_id);
        return Status::ok;
    }
    req->send.dt.finish();
    w.complete(req, static_cast<Status>(ack.status));
    return Status::ok;
}

/** AM pipeline (after the receiver's RTR): the data as middle fragments of the RTS's msg_id, as eager multi sends them. */
Status am_pipeline_progress(Request* req) {
    req->send.msg_id |= kRndvMsgBit;
    return eager_multi_progress(req);
}

Status rtr_handler(void* arg, void* data, std::size_t length, unsigned) {
    auto& w = *static_cast<Worker*>(arg);
    if (length < sizeof(AckHdr)) return Status::ok;
    AckHdr ack;
    std::memcpy(&ack, data, sizeof(ack));
    Request* req = w.req_table.find(ack.sreq_id);
    if (req == nullptr || !is_send(req) || req->send.rndv_wait != kSendWaitRtr) {
        LOOM_LOG_WARN("ucp: dropped a ready-to-receive for unknown request {:#x}", ack.sreq_id);
        return Status::ok;
    }
    (void)w.req_table.take(ack.sreq_id);
    req->send.rndv_wait = 0;  // answered: no other ready-to-receive is accepted
    req->send.offset = 0;
    req->progress = am_pipeline_progress;
    req->flags |= kReqAcked;  // the RTR means the receive matched: a synchronous send waits for nothing more
    (void)send_request_start(req);
    return Status::ok;
}


// --- rendezvous by PUT: the sender --------------------------------------------------------

/**
 * Completion record of PUTs in flight. It names its request by the generation-checked id
 * (the send keeps the id of its RTS until it completes), so a request completed meanwhile
 * by a peer failure or a forced close is simply not found; the record ends with its last
 * transfer. A record exists only while an issuing pass runs or transfers are in flight.
 */
struct PutRecord {
    uct::Completion comp;
    Worker* worker;
    std::uint64_t req_id;
};

/** A FIN outside a request's progress (the send failed before any PUT); logged when it cannot go. */
void rndv_fin_send(Worker& w, Ep* ep, std::uint64_t rreq_id, Status status) {
    RndvFinHdr fin{rreq_id, w.uuid, static_cast<std::int32_t>(status), 0};
    if (Status s = w.send_ctrl(ep, kAmRndvFin, &fin, sizeof(fin)); s != Status::ok) {
        LOOM_LOG_WARN("ucp: cannot send a rendezvous FIN to {:016x}: {}", ep->remote_uuid, to_string(s));
    }
}

/**
 * The last step of a send by PUT, on the AM lane: the FIN, then the send completes unless
 * the split's ATS is still due. The request's own step, never a control message of its
 * own: it may run from the AM lane's pending queue, which must not grow meanwhile.
 */
Status rndv_fin_progress(Request* req) {
    Worker& w = *req->worker;
    Ep* ep = req->ep;
    RndvFinHdr fin{req->send.rndv_rreq_id, w.uuid, static_cast<std::int32_t>(req->send.rndv_status), 0};
    ssize_t n = am_bcopy_bytes(ep->am_ep, kAmRndvFin, &fin, sizeof(fin));
    if (n == static_cast<ssize_t>(Status::no_resource)) return Status::no_resource;
    Status s = n < 0 ? static_cast<Status>(n) : req->send.rndv_status;
    req->send.rndv_wait &= ~kSendWaitFin;
    if (s == Status::ok && (req->send.rndv_wait & kSendWaitAts)) return Status::ok;  // the ATS completes it
    req->send.dt.finish();
    w.complete(req, s);
    return Status::ok;
}

/**
 * When every PUT of send @p req is issued and complete (or failed), its next step is the
 * FIN: every PUT completed means placed in the receiver's memory (docs/protocols.md gives
 * each transport's completion semantics), so the FIN cannot overtake the data. An issuing
 * pass (kSendIssuing) runs that step itself; a transport's completion starts it here.
 */
void rndv_put_check(Request* req) {
    if (req->send.offset < req->send.dt.length || req->send.rndv_records != 0 ||
        (req->send.rndv_wait & (kSendWaitFlush | kSendWaitPuts)) != kSendWaitPuts) {
        return;
    }
    req->send.rndv_wait = (req->send.rndv_wait & ~kSendWaitPuts) | kSendWaitFin;
    req->progress = rndv_fin_progress;
    if (req->send.rndv_wait & kSendIssuing) return;
    (void)send_request_start(req);  // now, or queued on the AM lane
}

void rndv_put_record_done(uct::Completion* comp) {
    auto* rec = reinterpret_cast<PutRecord*>(reinterpret_cast<char*>(comp) - offsetof(PutRecord, comp));
    Worker& w = *rec->worker;
    const std::uint64_t id = rec->req_id;
    const Status status = comp->status;
    std::free(rec);
    Request* req = w.req_table.find(id);
    if (req == nullptr) return;  // completed meanwhile (peer failure, forced close)
    --req->send.rndv_records;
    if (status != Status::ok && req->send.rndv_status == Status::ok) req->send.rndv_status = status;
    rndv_put_check(req);
}

/**
 * Issues the PUTs of @p req from send.offset on (then the flush of a PUT lane that is not
 * the AM lane). Returns no_resource when the lane is busy (the caller queues the request),
 * ok otherwise, the request then waiting for its transfers or completed.
 */
Status rndv_put_issue(Request* req) {
    Worker& w = *req->worker;
    Ep* ep = req->ep;
    if (ep->flags & kEpFailed) return Status::ok;  // the endpoint fails its outstanding requests
    const Lane& lane = ep->lanes[req->lane];
    const std::size_t max_zcopy = std::max<std::size_t>(w.ifaces[lane.iface].attr.put.max_zcopy, 1);
    const std::size_t length = req->send.dt.length;
    auto* rec = static_cast<PutRecord*>(std::malloc(sizeof(PutRecord)));
    if (rec == nullptr) {
        LOOM_LOG_ERROR("ucp: out of memory for a rendezvous PUT; the send fails");
        if (req->send.rndv_status == Status::ok) req->send.rndv_status = Status::no_memory;
        req->send.offset = length;
        req->send.rndv_wait = (req->send.rndv_wait & ~kSendWaitFlush) | kSendIssuing;
        rndv_put_check(req);
        req->send.rndv_wait &= ~kSendIssuing;
        return Status::ok;
    }
    *rec = PutRecord{{rndv_put_record_done, 1, Status::ok}, &w, w.req_table.wire_id(req)};
    ++req->send.rndv_records;
    req->send.rndv_wait |= kSendIssuing;
    Status result = Status::ok;
    auto* buffer = static_cast<char*>(req->send.dt.buffer);
    while (req->send.offset < length) {
        const std::size_t chunk = std::min(max_zcopy, length - req->send.offset);
        uct::Iov iov{buffer + req->send.offset, chunk, req->memh};
        ++rec->comp.count;
        Status s = uct::ep_put_zcopy(lane.ep, &iov, 1, req->send.rndv_raddr + req->send.offset,
                                     req->send.rndv_rkey.rkey, &rec->comp);
        if (s != Status::in_progress) --rec->comp.count;  // done, refused or not started: no callback
        if (s == Status::no_resource) {
            result = s;
            break;
        }
        if (s != Status::ok && s != Status::in_progress) {
            if (rec->comp.status == Status::ok) rec->comp.status = s;
            req->send.offset = length;  // nothing more is sent; the FIN reports the error
            req->send.rndv_wait &= ~kSendWaitFlush;
            break;
        }
        req->send.offset += chunk;
    }
    if (result == Status::ok && (req->send.rndv_wait & kSendWaitFlush)) {
        // Another lane carries the FIN: make the PUTs complete remotely first.
        ++rec->comp.count;
        Status s = uct::ep_flush(lane.ep, uct::kFlushLocal, &rec->comp);
        if (s != Status::in_progress) --rec->comp.count;
        if (s == Status::no_resource) {
            result = s;
        } else {
            if (s != Status::ok && s != Status::in_progress && rec->comp.status == Status::ok) rec->comp.status = s;
            req->send.rndv_wait &= ~kSendWaitFlush;
        }
    }
    uct::completion_update(&rec->comp, Status::ok);  // the issuing reference; may end the record here
    req->send.rndv_wait &= ~kSendIssuing;
    return result;
}

/** PUTs on the AM lane: run now or from the worker's pending queue; the FIN follows in the same step when it can. */
Status rndv_put_progress(Request* req) {
    Status s = rndv_put_issue(req);
    if (s == Status::no_resource) return s;
    if (req->progress == rndv_fin_progress) return rndv_fin_progress(req);
    return Status::ok;  // PUTs in flight: the last completion starts the FIN (or the endpoint failed)
}

/** PUTs on a lane of their own, as that lane's step in the send queue; the FIN then goes on the AM lane. */
Status rndv_put_lane_progress(Request* req) {
    if (rndv_put_issue(req) == Status::no_resource) return Status::no_resource;
    if (req->progress == rndv_fin_progress) (void)send_request_start(req);  // the PUTs completed in the pass
    return Status::ok;
}

/**
 * The PUT lane's queue refused @p req (with @p status): only the FIN is left, and it
 * carries the error. On a failed endpoint nothing is left: Ep::outstanding fails it.
 */
void rndv_put_abort(Request* req, Status status) {
    if (req->ep->flags & kEpFailed) return;
    if (req->send.rndv_status == Status::ok) req->send.rndv_status = status;
    req->send.offset = req->send.dt.length;
    req->send.rndv_wait = (req->send.rndv_wait & ~kSendWaitFlush) | kSendIssuing;  // nothing is in flight
    rndv_put_check(req);
    req->send.rndv_wait &= ~kSendIssuing;
    if (req->progress == rndv_fin_progress) (void)send_request_start(req);
}

/** Starts the PUTs of @p req through the send queue of its lane (behind that lane's earlier requests). */
void rndv_put_start(Request* req) {
    if (req->lane == req->ep->am_lane) {
        req->progress = rndv_put_progress;
        (void)send_request_start(req);
        return;
    }
    req->progress = rndv_put_lane_progress;
    (void)send_request_start(req, req->lane, rndv_put_abort);
}

/** kAmRndvPutRtr: RndvRtrHdr + the receiver's packed key; PUT the tail of the message there. */
Status put_rtr_handler(void* arg, void* data, std::size_t length, unsigned) {
    auto& w = *static_cast<Worker*>(arg);
    RndvRtrHdr hdr;
    if (length < sizeof(hdr)) {
        LOOM_LOG_WARN("ucp: dropped a rendezvous ready-to-receive of {} bytes (truncated)", length);
        return Status::ok;
    }
    std::memcpy(&hdr, data, sizeof(hdr));
    if (sizeof(hdr) + hdr.rkey_length != length) {
        LOOM_LOG_WARN("ucp: dropped a rendezvous ready-to-receive with a {}-byte key in {} bytes", hdr.rkey_length,
                      length);
        return Status::ok;
    }
    Request* req = w.req_table.find(hdr.sreq_id);
    if (req == nullptr || !is_send(req) || req->send.rndv_wait != kSendWaitRtr) {
        LOOM_LOG_WARN("ucp: dropped a rendezvous ready-to-receive for unknown request {:#x}", hdr.sreq_id);
        return Status::ok;
    }
    const std::size_t total = req->send.dt.length;
    if (hdr.offset > total || hdr.length != total - hdr.offset || hdr.length == 0 ||
        ((hdr.flags & kRtrFlagAts) == 0) != (hdr.offset == 0) || (hdr.flags & ~kRtrFlagAts) != 0) {
        LOOM_LOG_WARN("ucp: dropped a rendezvous ready-to-receive for bytes {}+{} (flags {:#x}) of a {}-byte message",
                      hdr.offset, hdr.length, hdr.flags, total);
        return Status::ok;
    }
    Ep* ep = req->ep;
    if (ep->flags & kEpFailed) return Status::ok;  // the endpoint failed the request already
    if (ep->remote_uuid != hdr.receiver_uuid) {
        LOOM_LOG_WARN("ucp: dropped a rendezvous ready-to-receive from {:016x} for a send to {:016x}",
                      hdr.receiver_uuid, ep->remote_uuid);
        return Status::ok;
    }
    // The receiver chose PUT because both sides have the lane's transport; check it anyway.
    Status s = Status::ok;
    const std::uint8_t lane = ep->rndv_lane;
    Result<uct::Rkey> key = Status::unsupported;
    if (lane != kNoLane && req->send.dt.contig()) {
        const WorkerIface& wi = w.ifaces[ep->lanes[lane].iface];
        if (!(wi.attr.cap_flags & uct::kCapPutZcopy) ||
            (req->memh == uct::kMemHNull && (wi.rsc->md_attr.flags & uct::MdAttr::kNeedMemh))) {
            s = Status::unsupported;
        } else {
            key = wi.rsc->component->rkey_unpack(static_cast<const std::uint8_t*>(data) + sizeof(hdr),
                                                 hdr.rkey_length);
            s = key.status();
        }
    } else {
        s = Status::unsupported;
    }
    if (s != Status::ok) {
        LOOM_LOG_ERROR("ucp: cannot PUT a rendezvous message to {:016x}: {}; the send and the receive fail",
                       hdr.receiver_uuid, to_string(s));
        rndv_fin_send(w, ep, hdr.rreq_id, s);
        req->send.dt.finish();
        w.complete(req, s);
        return Status::ok;
    }
    req->send.rndv_rkey = *key;
    req->lane = lane;
    req->flags |= kReqRelease;  // Worker::complete releases the key (and the registration)
    req->release = rndv_send_release;
    req->send.rndv_raddr = hdr.address - hdr.offset;
    req->send.rndv_rreq_id = hdr.rreq_id;
    req->send.rndv_status = Status::ok;
    req->send.rndv_records = 0;
    req->send.rndv_wait = kSendKeyHeld | kSendWaitPuts | (lane != ep->am_lane ? kSendWaitFlush : 0) |
                          ((hdr.flags & kRtrFlagAts) ? kSendWaitAts : 0);
    req->send.offset = hdr.offset;
    rndv_put_start(req);
    return Status::ok;
}

}  // namespace

std::size_t rndv_rts_prepare(Request* req, RtsHdr& rts, std::uint8_t* rkey_buf) {
    Worker& w = *req->worker;
    Ep* ep = req->ep;
    rts = RtsHdr{};
    rts.sender_uuid = w.uuid;
    rts.sreq_id = w.req_table.wire_id(req);
    rts.length = req->send.dt.length;
    rts.msg_id = req->send.msg_id;
    // The receiver may answer with an RTR for PUTs (kAmRndvPutRtr) from now on.
    req->send.rndv_wait = kSendWaitRtr;
    req->send.rndv_rkey = {};
    std::fill(std::begin(req->send.rndv_rail_memh), std::end(req->send.rndv_rail_memh), uct::kMemHNull);
    // Offered where the receiver's scheme for this size takes it (the same table: both
    // sides are the same Loom, configured alike), i.e. anything but the AM pipeline.
    const ProtoRange* scheme = ep->protos->select(ProtoOp::rndv_recv, true, rts.length);
    const bool get = ep->rndv_lane != kNoLane && req->send.dt.contig() && scheme != nullptr &&
                     scheme->proto != &kRndvAm;
    std::size_t rkey_len = 0;
    if (get) {
        const Lane& lane = ep->lanes[ep->rndv_lane];
        const ContextResource& rsc = *w.ifaces[lane.iface].rsc;
        if (req->memh == uct::kMemHNull && (rsc.md_attr.flags & uct::MdAttr::kReg) && rts.length != 0) {
            auto memh = rsc.md->mem_reg(req->send.dt.buffer, rts.length, uct::kAccessRemoteGet | uct::kAccessLocalRead);
            if (memh) {
                req->memh = *memh;
                req->lane = ep->rndv_lane;
                req->flags |= kReqRelease;
                req->release = rndv_send_release;
            }
        }
        rkey_len = rsc.md_attr.rkey_packed_size;
        if (rkey_len <= kMaxRtsRkey &&
            (req->memh != uct::kMemHNull || !(rsc.md_attr.flags & uct::MdAttr::kNeedRkey)) &&
            (rkey_len == 0 || rsc.md->mkey_pack(req->memh, rkey_buf) == Status::ok)) {
            rts.address = reinterpret_cast<std::uintptr_t>(req->send.dt.buffer);
            rts.iface_index = lane.remote_iface;
            if (scheme->proto == &kRndvGetZcopy) rkey_len = rndv_rails_offer(req, rts, rkey_buf, rkey_len);
        } else {
            rkey_len = 0;
        }
    }
    rts.rkey_length = static_cast<std::uint16_t>(rkey_len);
    return rkey_len;
}

void rndv_send_release(Request* req) {
    rndv_rails_release(req);
    request_release_memh(req);
    if (!(req->send.rndv_wait & kSendKeyHeld)) return;
    req->send.rndv_wait = 0;
    const Ep* ep = req->ep;
    req->worker->ifaces[ep->lanes[req->lane].iface].rsc->component->rkey_release(req->send.rndv_rkey);
    req->send.rndv_rkey = {};
}

Status rndv_register_handlers(Worker& w) {
    struct {
        uct::AmId id;
        uct::AmCallback cb;
    } const handlers[] = {
        {kAmRndvAts, ats_handler},
        {kAmRndvRtr, rtr_handler},
        {kAmRndvPutRtr, put_rtr_handler},
        {kAmRndvFin, rndv_fin_handler},
    };
    for (WorkerIface& wi : w.ifaces) {
        for (const auto& h : handlers) {
            if (Status s = wi.iface->set_am_handler(h.id, h.cb, &w, 0); s != Status::ok) return s;
        }
    }
    return Status::ok;
}

namespace {

/** Rendezvous as a family of the worker: tag and AM sends use it; it answers for both. */
const ProtoFamily kRndvFamily{.name = "rendezvous", .slot = kRndvSlot,
                              .init = rndv_register_handlers,
                              .ep_purge = rndv_ep_purge};
LOOM_FAMILY_REGISTER(kRndvFamily);

}  // namespace

}  // namespace loom::ucp
