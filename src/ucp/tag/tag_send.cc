/**
 * Tagged messages, the sending side: the eager protocols (short, single bcopy,
 * multi-fragment bcopy, with or without a synchronous acknowledgement), the RTS that
 * carries the tag of a rendezvous (src/ucp/rndv moves its data), tag_send_start, and the
 * tag protocols of the endpoint's table at the end. docs/protocols.md describes the wire
 * and the choice by size.
 */
#include "ucp/tag/tag_proto.h"

#include "ucp/core/ucp_log.h"
#include "ucp/core/wire.h"
#include "ucp/rndv/rndv.h"
#include "ucp/rndv/rndv_thresh.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace loom::ucp {

namespace {

// --- send protocols ----------------------------------------------------------------------

struct PackArg {
    Request* req;
    const void* hdr;
    std::size_t hdr_len;
    std::size_t payload;
};

std::size_t pack_hdr_payload(void* dest, void* a) {
    auto* arg = static_cast<PackArg*>(a);
    std::memcpy(dest, arg->hdr, arg->hdr_len);
    std::size_t n = arg->payload == 0
                        ? 0
                        : arg->req->send.dt.pack(arg->req->send.offset, static_cast<char*>(dest) + arg->hdr_len,
                                                 arg->payload);
    return arg->hdr_len + n;
}

/** The send is done on our side: complete it unless it waits for the peer. */
void send_local_done(Request* req) {
    Worker& w = *req->worker;
    if ((req->flags & kReqSync) && !(req->flags & kReqAcked)) return;  // the acknowledgement completes it
    req->send.dt.finish();
    w.complete(req, Status::ok);
}

/**
 * Eager short from a request (the call found the lane busy, or something was queued
 * before it): the tag as the transport's 8-byte header, the payload copied inline, as the
 * C API's fast path does. Cheaper than a bcopy of the same bytes, which reserves room for
 * the largest payload and calls a pack callback.
 */
Status eager_short_progress(Request* req) {
    const std::size_t length = req->send.dt.length;
    Status s = uct::ep_am_short(req->ep->am_ep, kAmEagerOnly, req->send.tag, req->send.dt.buffer,
                                static_cast<unsigned>(length));
    if (s == Status::no_resource) return s;
    req->send.dt.finish();
    if (s != Status::ok) {
        req->worker->complete(req, s);
        return Status::ok;
    }
    req->send.offset = length;
    req->worker->complete(req, Status::ok);
    return Status::ok;
}

/** One bcopy message: the tag (or EagerSyncHdr) and the whole payload. */
Status eager_bcopy_progress(Request* req) {
    Worker& w = *req->worker;
    Ep* ep = req->ep;
    EagerSyncHdr hdr{req->send.tag, w.uuid, req->flags & kReqSync ? w.req_table.wire_id(req) : 0};
    const bool sync = req->flags & kReqSync;
    PackArg arg{req, &hdr, sync ? sizeof(EagerSyncHdr) : sizeof(Tag), req->send.dt.length};
    ssize_t n = uct::ep_am_bcopy(ep->am_ep, sync ? kAmEagerSyncOnly : kAmEagerOnly, pack_hdr_payload, &arg, 0);
    if (n == static_cast<ssize_t>(Status::no_resource)) return Status::no_resource;
    if (n < 0) {
        req->send.dt.finish();
        w.complete(req, static_cast<Status>(n));
        return Status::ok;
    }
    req->send.offset = req->send.dt.length;
    send_local_done(req);
    return Status::ok;
}

/**
 * The endpoint for middle fragment @p k of a tagged message: with eager rails
 * (LOOM_MAX_EAGER_RAILS) the AM lane and the rails take turns, else the AM lane.
 */
uct::Ep* eager_rail_ep(const Ep& ep, std::size_t k) {
    uct::Ep* rails[kMaxRndvRails];
    unsigned n = 0;
    rails[n++] = ep.am_ep;
    if (!(ep.flags & kEpRailClosed)) {  // the endpoint is about to fail: its AM lane only
        for (unsigned r = 0; r < ep.num_rndv_rails; ++r) {
            const Lane& lane = ep.lanes[ep.rndv_rails[r]];
            if ((ep.eager_rail_mask & (1u << r)) && lane.state == kLaneReady) rails[n++] = lane.ep;
        }
    }
    return rails[k % n];
}

}  // namespace

Status eager_multi_progress(Request* req) {
    Worker& w = *req->worker;
    Ep* ep = req->ep;
    const std::size_t length = req->send.dt.length;
    do {
        ssize_t n;
        std::size_t chunk, hdr_len;
        if (req->send.offset == 0 && !(req->send.msg_id & kRndvMsgBit)) {
            EagerFirstHdr hdr{req->send.tag, w.uuid, req->send.msg_id, length,
                              req->flags & kReqSync ? w.req_table.wire_id(req) : 0};
            chunk = std::min<std::size_t>(length, ep->max_bcopy - sizeof(hdr));
            hdr_len = sizeof(hdr);
            PackArg arg{req, &hdr, sizeof(hdr), chunk};
            n = uct::ep_am_bcopy(ep->am_ep, kAmEagerFirst, pack_hdr_payload, &arg, 0);
        } else {
            EagerMiddleHdr hdr{w.uuid, req->send.msg_id & ~kRndvMsgBit, req->send.offset};
            const std::size_t room = ep->max_bcopy - sizeof(hdr);
            chunk = std::min<std::size_t>(length - req->send.offset, room);
            hdr_len = sizeof(hdr);
            PackArg arg{req, &hdr, sizeof(hdr), chunk};
            // Only a tagged message's fragments take turns over the rails: its first fragment
            // opens the message at the receiver, which keeps the middles that overtake it.
            uct::Ep* uep = ep->am_ep;
            if (LOOM_UNLIKELY(ep->eager_rail_mask != 0) && req->kind == kReqKindTagSend)
                uep = eager_rail_ep(*ep, req->send.offset / room);
            n = uct::ep_am_bcopy(uep, kAmEagerMiddle, pack_hdr_payload, &arg, 0);
            if (uep != ep->am_ep && n == static_cast<ssize_t>(Status::no_resource)) {
                // A busy rail (or one still connecting): the AM lane takes this fragment.
                n = uct::ep_am_bcopy(ep->am_ep, kAmEagerMiddle, pack_hdr_payload, &arg, 0);
            } else if (uep != ep->am_ep && n >= 0) {
                ++w.eager_rail_frags;
            }
        }
        if (n == static_cast<ssize_t>(Status::no_resource)) return Status::no_resource;
        if (n < 0) {
            req->send.dt.finish();
            w.complete(req, static_cast<Status>(n));
            return Status::ok;
        }
        // A generic datatype may pack less than asked (MPICH packs whole elements only):
        // the next fragment starts where this one's data ended.
        const std::size_t packed = static_cast<std::size_t>(n) - hdr_len;
        if (LOOM_UNLIKELY(packed == 0 && chunk != 0)) {
            LOOM_LOG_ERROR("ucp: the datatype packed nothing at offset {} of {} bytes (room {})", req->send.offset,
                           length, chunk);
            req->send.dt.finish();
            w.complete(req, Status::invalid_param);
            return Status::ok;
        }
        req->send.offset += packed;
    } while (req->send.offset < length);
    send_local_done(req);
    return Status::ok;
}

namespace {

/** Sends the RTS (registering the buffer for GET where the rendezvous lane allows). */
Status rndv_rts_progress(Request* req) {
    Worker& w = *req->worker;
    Ep* ep = req->ep;
    std::uint8_t buf[sizeof(RtsHdr) + kMaxRtsRkey];
    RtsHdr rts;
    const std::size_t rkey_len = rndv_rts_prepare(req, rts, buf + sizeof(RtsHdr));
    rts.tag = req->send.tag;
    std::memcpy(buf, &rts, sizeof(rts));
    ssize_t n = am_bcopy_bytes(ep->am_ep, kAmRndvRts, buf, sizeof(rts) + rkey_len);
    if (n == static_cast<ssize_t>(Status::no_resource)) return Status::no_resource;
    if (n < 0) {
        req->send.dt.finish();
        w.complete(req, static_cast<Status>(n));
    }
    return Status::ok;  // the ATS or RTR moves it on
}

// --- the tag protocols of the endpoint's table (src/ucp/proto) ----------------------------

/** The eager header of class @p op: the tag, or the sync header. */
std::size_t eager_header(ProtoOp op) { return op == ProtoOp::tag_sync ? sizeof(EagerSyncHdr) : sizeof(Tag); }

const char* eager_short_init(const ProtoInit& init, ProtoCaps& caps) { return eager_short_caps(init, caps); }

const char* eager_bcopy_init(const ProtoInit& init, ProtoCaps& caps) {
    return eager_bcopy_caps(init, caps, eager_header(init.op));
}

/** The fragments' size, and the lanes the middle fragments take turns on (eager rails). */
std::string eager_multi_describe(const ProtoInit& init, const ProtoCaps& caps) {
    std::string out = eager_fragments_describe(init, caps);
    const Ep& ep = init.ep;
    if (ep.eager_rail_mask == 0) return out;
    const WorkerIface& am = init.lane_iface(ep.am_lane);
    std::string rails = fmt::format("{}/{}", am.rsc->tl.tl_name, am.rsc->tl.dev_name);
    unsigned n = 1;
    for (unsigned r = 0; r < ep.num_rndv_rails; ++r) {
        if (!(ep.eager_rail_mask & (1u << r))) continue;
        const WorkerIface& wi = init.lane_iface(ep.rndv_rails[r]);
        rails += fmt::format(", {}/{}", wi.rsc->tl.tl_name, wi.rsc->tl.dev_name);
        ++n;
    }
    return out + fmt::format(" (middle fragments in turn over {} rails: {})", n, rails);
}

}  // namespace


const Proto kTagEagerShort{"tag eager short",
                           "the tag as the transport's header, the payload inline (am_short)",
                           proto_op_bit(ProtoOp::tag), false, true, 0, eager_short_init,
                           eager_short_progress, nullptr};
const Proto kTagEagerBcopy{"tag eager bcopy", "one message: the tag (sync: and the acknowledgement id), then the payload",
                           proto_op_bit(ProtoOp::tag) | proto_op_bit(ProtoOp::tag_sync), true, false, 1,
                           eager_bcopy_init, eager_bcopy_progress, nullptr};
const Proto kTagEagerMulti{"tag eager multi",
                           "a first fragment with the tag and length, then middle fragments",
                           proto_op_bit(ProtoOp::tag) | proto_op_bit(ProtoOp::tag_sync),
                           true,
                           false,
                           2,
                           eager_caps,
                           eager_multi_progress,
                           eager_multi_describe};
const Proto kTagRndv{"tag rendezvous", "an RTS; the data moves once the receiver matched it (GET, PUT or AM pipeline)",
                     proto_op_bit(ProtoOp::tag) | proto_op_bit(ProtoOp::tag_sync), true, false, 3, rndv_proto_init,
                     rndv_rts_progress, rndv_scheme_describe};
LOOM_PROTO_REGISTER(kTagEagerShort);
LOOM_PROTO_REGISTER(kTagEagerBcopy);
LOOM_PROTO_REGISTER(kTagEagerMulti);
LOOM_PROTO_REGISTER(kTagRndv);

Status tag_send_start(Request* req, Ep* ep, Tag tag, bool sync) {
    Worker& w = *ep->worker;
    req->ep = ep;
    req->send.tag = tag;
    req->send.offset = 0;
    req->memh = uct::kMemHNull;
    req->send.msg_id = w.next_msg_id++;
    req->send.rndv_wait = 0;
    req->kind = kReqKindTagSend;
    if (sync) req->flags |= kReqSync;
    const ProtoRange* range =
        ep->protos->select(sync ? ProtoOp::tag_sync : ProtoOp::tag, req->send.dt.contig(), req->send.dt.length);
    if (LOOM_UNLIKELY(ep->flags & kEpTagHeld)) {
        // The receiver keeps too many unexpected messages: only the RTS goes now (tag_flow.cc).
        const ProtoRange* rndv =
            ep->protos->select(sync ? ProtoOp::tag_sync : ProtoOp::tag, req->send.dt.contig(), SIZE_MAX);
        if (rndv != nullptr && rndv->proto == &kTagRndv) range = rndv;
    }
    if (LOOM_UNLIKELY(range == nullptr)) {  // cannot be: eager multi or rendezvous serves every size
        req->send.dt.finish();
        w.complete(req, Status::unsupported);
        return Status::unsupported;
    }
    req->progress = range->progress;
    if (sync || range->proto == &kTagRndv) {
        if (Status s = w.req_table.insert(req); s != Status::ok) {
            req->send.dt.finish();
            w.complete(req, s);
            return s;
        }
    }
    req->flags |= kReqInEpList;
    ep->outstanding.push_back(*req);
    return send_request_start(req);
}

void tag_send_cancel(Request* req) {
    Worker& w = *req->worker;
    // Only a send that waits for its peer has an id, which names it to the receiver; the
    // answer (kAmTagCancelAck, tag_recv.cc) completes it with canceled, or nothing happens.
    if (req->id == 0 || (req->flags & kReqCompleted) || req->ep == nullptr || (req->ep->flags & kEpFailed))
        return;
    CancelHdr hdr{req->send.tag, w.uuid, w.req_table.wire_id(req)};
    if (Status s = w.send_ctrl(req->ep, kAmTagCancel, &hdr, sizeof(hdr)); s != Status::ok) {
        LOOM_LOG_DEBUG("ucp: cannot ask to cancel send {:#x}: {}", hdr.sreq_id, to_string(s));
    }
}

}  // namespace loom::ucp
