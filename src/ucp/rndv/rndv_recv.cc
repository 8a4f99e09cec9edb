/**
 * Rendezvous, the receiver's side (rndv.h): the choice of the scheme for a matched RTS,
 * the GETs and their ATS, the PUT schemes' RTR with the receiver's key and the FIN that
 * ends them, the AM pipeline's RTR, and what a failed or closed endpoint leaves behind.
 */
#include "ucp/rndv/rndv.h"

#include "ucp/core/ucp_log.h"
#include "ucp/rndv/rndv_thresh.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace loom::ucp {

namespace {

/**
 * A receive waiting for PUTs is in Worker::frags under its sender's request id (bit 63 set,
 * which no msg_id on the wire has), so that the failure of the sender's endpoint finds it.
 */
FragKey rndv_put_key(const Request* req) { return FragKey{req->recv.sender_uuid, req->recv.sreq_id | kRndvMsgBit}; }

/** The endpoint replies to @p uuid go on; nullptr (logged) when the peer never wired up. */
Ep* reply_ep(Worker& w, std::uint64_t uuid) {
    auto it = w.ep_by_uuid.find(uuid);
    if (it == w.ep_by_uuid.end()) {
        LOOM_LOG_WARN("ucp: no endpoint to reply to worker {:016x}", uuid);
        return nullptr;
    }
    return it->second;
}

/**
 * What a receive whose GET ended with @p status reports: the failure of the sender's
 * endpoint when that ended it (its lanes' transfers are cancelled then), else @p status.
 */
Status get_status(Worker& w, std::uint64_t uuid, Status status) {
    if (status == Status::ok) return status;
    auto it = w.ep_by_uuid.find(uuid);
    return it != w.ep_by_uuid.end() && (it->second->flags & kEpFailed) ? it->second->failure : status;
}

}  // namespace

void send_ack(Worker& w, std::uint64_t uuid, uct::AmId id, std::uint64_t sreq_id, Status status) {
    Ep* ep = reply_ep(w, uuid);
    if (ep == nullptr || (ep->flags & kEpFailed)) return;  // nobody left to tell
    AckHdr ack{sreq_id, static_cast<std::int32_t>(status), 0};
    if (Status s = w.send_ctrl(ep, id, &ack, sizeof(ack)); s != Status::ok) {
        LOOM_LOG_WARN("ucp: cannot acknowledge to {:016x}: {}", uuid, to_string(s));
    }
}

/** Split scheme: the sender PUTs from here on, half the message on a 4 KiB boundary. */
std::size_t rndv_split_point(std::size_t length) { return (length / 2) & ~std::size_t{4095}; }

namespace {

// --- rendezvous by PUT: the receiver ------------------------------------------------------

/** Completes receive @p req of a PUT scheme once it waits for nothing more. */
void rndv_recv_settle(Worker& w, Request* req) {
    if (req->recv.rndv_wait != 0) return;
    w.frags.erase(rndv_put_key(req));
    if (req->memh != uct::kMemHNull) (void)req->recv.md->mem_dereg(req->memh);
    req->recv.dt.finish();
    w.complete(req, req->recv.comp.status);
}

}  // namespace

void rndv_recv_fin(Worker& w, Request* req, Status status) {
    if (status != Status::ok && req->recv.comp.status == Status::ok) req->recv.comp.status = status;
    req->recv.rndv_wait &= ~kRecvWaitFin;
    rndv_recv_settle(w, req);
}

namespace {

/** Split scheme: the GETs of the head are done (or failed): ATS to the sender. */
void rndv_split_get_done(uct::Completion* comp) {
    auto* req = reinterpret_cast<Request*>(reinterpret_cast<char*>(comp) - offsetof(Request, recv.comp));
    Worker& w = *req->worker;
    req->recv.rkey_component->rkey_release(req->recv.rkey);
    send_ack(w, req->recv.sender_uuid, kAmRndvAts, req->recv.sreq_id, comp->status);
    comp->status = get_status(w, req->recv.sender_uuid, comp->status);
    req->recv.rndv_wait &= ~kRecvWaitGet;
    rndv_recv_settle(w, req);
}

}  // namespace

Status rndv_fin_handler(void* arg, void* data, std::size_t length, unsigned) {
    auto& w = *static_cast<Worker*>(arg);
    RndvFinHdr fin;
    if (length != sizeof(fin)) {
        LOOM_LOG_WARN("ucp: dropped a rendezvous FIN of {} bytes (malformed)", length);
        return Status::ok;
    }
    std::memcpy(&fin, data, sizeof(fin));
    Request* req = w.req_table.find(fin.rreq_id);
    if (req == nullptr || !(req->flags & kReqRecv) || !(req->recv.rndv_wait & kRecvWaitFin) ||
        req->recv.sender_uuid != fin.sender_uuid) {
        LOOM_LOG_WARN("ucp: dropped a rendezvous FIN from {:016x} for unknown receive {:#x}", fin.sender_uuid,
                      fin.rreq_id);
        return Status::ok;
    }
    // A status is ok or an error; anything else from the wire is one.
    const Status status = fin.status <= 0 && fin.status >= INT8_MIN ? static_cast<Status>(fin.status) : Status::io_error;
    rndv_recv_fin(w, req, status);
    return Status::ok;
}

namespace {

// --- rendezvous receive ------------------------------------------------------------------

void rndv_get_done(uct::Completion* comp) {
    auto* req = reinterpret_cast<Request*>(reinterpret_cast<char*>(comp) - offsetof(Request, recv.comp));
    Worker& w = *req->worker;
    if (req->memh != uct::kMemHNull) (void)req->recv.md->mem_dereg(req->memh);
    req->recv.rkey_component->rkey_release(req->recv.rkey);
    send_ack(w, req->recv.sender_uuid, kAmRndvAts, req->recv.sreq_id, comp->status);
    req->recv.dt.finish();
    w.complete(req, get_status(w, req->recv.sender_uuid, comp->status));
}

/**
 * Issues the GETs of a rendezvous receive from get_offset on. Returns no_resource when
 * the lane is busy (the caller queues the request), ok when everything is issued or
 * the receive failed.
 */
Status rndv_get_issue(Request* req) {
    Worker& w = *req->worker;
    auto it = w.ep_by_uuid.find(req->recv.sender_uuid);
    if (it == w.ep_by_uuid.end() || (it->second->flags & kEpFailed)) {
        uct::completion_update(&req->recv.comp, Status::endpoint_failure);
        return Status::ok;
    }
    const Lane& lane = it->second->lanes[req->lane];
    const std::size_t max_zcopy = std::max<std::size_t>(w.ifaces[lane.iface].attr.get.max_zcopy, 1);
    const std::size_t length = req->recv.received;  // where the GET ends: the message's end, or the split
    auto* buffer = static_cast<char*>(req->recv.dt.buffer);
    while (req->recv.get_offset < length) {
        if (LOOM_UNLIKELY(req->expired)) {
            // Past its deadline (deadline.cc): no more GETs. Those in flight end the receive,
            // and the ATS tells the sender, whose buffer is free from then on.
            if (req->recv.comp.status == Status::ok) req->recv.comp.status = Status::timed_out;
            break;
        }
        const std::size_t chunk = std::min(max_zcopy, length - req->recv.get_offset);
        uct::Iov iov{buffer + req->recv.get_offset, chunk, req->memh};
        ++req->recv.comp.count;
        Status s = uct::ep_get_zcopy(lane.ep, &iov, 1, req->recv.remote_address + req->recv.get_offset,
                                     req->recv.rkey.rkey, &req->recv.comp);
        if (s == Status::no_resource) {
            --req->recv.comp.count;
            return Status::no_resource;
        }
        if (s == Status::ok) {
            --req->recv.comp.count;
        } else if (s != Status::in_progress) {
            uct::completion_update(&req->recv.comp, s);  // this chunk's reference
            break;
        }
        req->recv.get_offset += chunk;
    }
    req->recv.get_offset = length;
    uct::completion_update(&req->recv.comp, Status::ok);  // the issuing reference
    return Status::ok;
}

/** The GETs' queue refused @p req, or its endpoint went while it waited: the receive fails with @p status. */
void rndv_get_abort(Request* req, Status status) {
    uct::completion_update(&req->recv.comp, status);  // the issuing reference, with the error
}

}  // namespace

void rndv_get_start(Request* req, Ep* ep) {
    req->ep = ep;
    req->progress = rndv_get_issue;
    (void)send_request_start(req, req->lane, rndv_get_abort);  // waits there while the lane lacks resources
}

namespace {

/** Says which scheme a rendezvous receive runs (debug level; test_proto_table compares it with the table). */
void log_scheme(const RtsHdr& rts, const Proto& scheme) {
    LOOM_LOG_DEBUG("ucp: rendezvous receive of {} B from {:016x} by {}", rts.length, rts.sender_uuid, scheme.name);
}

/**
 * PUT schemes: registers the receive buffer of @p req, answers the RTS with an RTR that
 * carries its key for bytes [@p put_from, end), and GETs [0, @p put_from) meanwhile.
 * False, with nothing changed, when the buffer cannot be offered (GET then, as before).
 */
bool rndv_put_recv_start(Worker& w, Request* req, Ep* ep, std::uint8_t lane, const RtsHdr& rts,
                         const std::uint8_t* rkey, std::size_t rkey_len, std::size_t put_from) {
    const ContextResource& rsc = *w.ifaces[ep->lanes[lane].iface].rsc;
    const std::size_t key_len = rsc.md_attr.rkey_packed_size;
    if (key_len > kMaxRtsRkey) return false;
    uct::Rkey sender_key{};
    if (put_from != 0) {  // the sender's key, for the GET of the head
        auto unpacked = rsc.component->rkey_unpack(rkey, rkey_len);
        if (!unpacked) return false;
        sender_key = *unpacked;
    }
    uct::MemH memh = uct::kMemHNull;
    if (rsc.md_attr.flags & uct::MdAttr::kReg) {
        auto reg = rsc.md->mem_reg(req->recv.dt.buffer, rts.length, uct::kAccessLocalWrite | uct::kAccessRemotePut);
        if (reg) memh = *reg;
    }
    std::uint8_t buf[sizeof(RndvRtrHdr) + kMaxRtsRkey];
    if ((memh == uct::kMemHNull && (rsc.md_attr.flags & (uct::MdAttr::kNeedRkey | uct::MdAttr::kNeedMemh))) ||
        (key_len != 0 && rsc.md->mkey_pack(memh, buf + sizeof(RndvRtrHdr)) != Status::ok) ||
        w.req_table.insert(req) != Status::ok) {
        if (memh != uct::kMemHNull) (void)rsc.md->mem_dereg(memh);
        if (put_from != 0) rsc.component->rkey_release(sender_key);
        LOOM_LOG_DEBUG("ucp: rendezvous PUT not possible; the receiver GETs");
        return false;
    }
    req->memh = memh;
    req->recv.md = rsc.md;
    req->lane = lane;
    req->recv.rkey = sender_key;
    req->recv.rkey_component = rsc.component;
    req->recv.comp.status = Status::ok;
    req->recv.rndv_wait = kRecvWaitFin | (put_from != 0 ? kRecvWaitGet : 0);
    w.frags[rndv_put_key(req)] = FragTarget{req, nullptr};
    RndvRtrHdr hdr{};
    hdr.sreq_id = rts.sreq_id;
    hdr.rreq_id = w.req_table.wire_id(req);
    hdr.receiver_uuid = w.uuid;
    hdr.address = reinterpret_cast<std::uintptr_t>(req->recv.dt.buffer) + put_from;
    hdr.offset = put_from;
    hdr.length = rts.length - put_from;
    hdr.rkey_length = static_cast<std::uint16_t>(key_len);
    hdr.flags = put_from != 0 ? kRtrFlagAts : 0;
    std::memcpy(buf, &hdr, sizeof(hdr));
    // The RTR first: the sender's PUTs run while this side GETs.
    if (Status s = w.send_ctrl(ep, kAmRndvPutRtr, buf, sizeof(hdr) + key_len); s != Status::ok) {
        LOOM_LOG_WARN("ucp: cannot send a rendezvous ready-to-receive to {:016x}: {}", rts.sender_uuid, to_string(s));
        req->recv.comp.status = s;
        req->recv.rndv_wait &= ~kRecvWaitFin;  // no FIN will come
    }
    if (put_from != 0) {
        req->recv.remote_address = rts.address;
        req->recv.get_offset = 0;
        req->recv.received = put_from;  // the GET's end
        req->recv.comp.func = rndv_split_get_done;
        req->recv.comp.count = 1;
        rndv_get_start(req, ep);
    } else {
        rndv_recv_settle(w, req);  // only when the RTR could not go
    }
    return true;
}

}  // namespace

void rndv_recv_start(Worker& w, Request* req, const RtsHdr& rts_in, const std::uint8_t* rkey,
                     std::size_t rkey_len) {
    RtsHdr rts = rts_in;
    RndvRailKey rails[kMaxRndvRails];
    const unsigned num_rails = rndv_rails_parse(rts, rkey, rkey_len, rails);
    if (num_rails == 0) {
        // Forged or damaged: the buffer is not offered, and the AM pipeline moves the data.
        LOOM_LOG_WARN("ucp: rendezvous from {:016x} with malformed rail keys ({} B); using the AM pipeline",
                      rts.sender_uuid, rkey_len);
        rts.address = 0;
    } else {
        rkey = rails[0].rkey;
        rkey_len = rails[0].rkey_len;
    }
    req->recv.info.sender_tag = rts.tag;
    req->recv.info.length = rts.length;
    req->recv.sender_uuid = rts.sender_uuid;
    req->recv.sreq_id = rts.sreq_id;
    req->recv.received = 0;
    req->recv.rndv_wait = 0;
    if (rts.length > req->recv.dt.length) {
        // Truncated: nothing moves; the sender completes, the receive reports the length.
        send_ack(w, rts.sender_uuid, kAmRndvAts, rts.sreq_id, Status::ok);
        req->recv.dt.finish();
        w.complete(req, Status::message_truncated);
        return;
    }
    auto it = w.ep_by_uuid.find(rts.sender_uuid);
    if (it == w.ep_by_uuid.end()) {
        LOOM_LOG_ERROR("ucp: rendezvous from {:016x}, which never wired up; receive failed", rts.sender_uuid);
        w.complete(req, Status::not_connected);
        return;
    }
    Ep* ep = it->second;
    if (ep->flags & kEpFailed) {  // a request held past the sender's failure: nobody will answer an RTR
        req->recv.dt.finish();
        w.complete(req, ep->failure);
        return;
    }
    // The scheme is the table's for this size; contiguous when both buffers are and the
    // sender offered its own. The lane is the one the sender offered it on.
    const ProtoRange* range = ep->protos->select(ProtoOp::rndv_recv, rts.address != 0 && req->recv.dt.contig(),
                                                 rts.length);
    const Proto* scheme = range != nullptr ? range->proto : &kRndvAm;
    const std::uint8_t lane = scheme != &kRndvAm ? ep->lane_of_iface(rts.iface_index) : kNoLane;
    if (lane != kNoLane) {
        const WorkerIface& wi = w.ifaces[ep->lanes[lane].iface];
        if (scheme != &kRndvGetZcopy && (wi.attr.cap_flags & uct::kCapPutZcopy)) {
            const std::size_t put_from = scheme == &kRndvPutZcopy ? 0 : rndv_split_point(rts.length);
            if (rndv_put_recv_start(w, req, ep, lane, rts, rkey, rkey_len, put_from)) {
                log_scheme(rts, *scheme);
                return;
            }
        }
        auto unpacked = wi.rsc->component->rkey_unpack(rkey, rkey_len);
        req->memh = uct::kMemHNull;
        if (unpacked && (wi.rsc->md_attr.flags & uct::MdAttr::kNeedMemh) && rts.length != 0) {
            auto memh = wi.rsc->md->mem_reg(req->recv.dt.buffer, rts.length, uct::kAccessLocalWrite);
            if (!memh) {
                wi.rsc->component->rkey_release(*unpacked);
                unpacked = memh.status();
            } else {
                req->memh = *memh;
            }
        }
        if (unpacked) {
            req->recv.rkey = *unpacked;
            req->recv.rkey_component = wi.rsc->component;
            req->recv.md = wi.rsc->md;
            req->lane = lane;
            req->recv.remote_address = rts.address;
            req->recv.get_offset = 0;
            req->recv.received = rts.length;  // the GET's end
            req->recv.comp.func = rndv_get_done;
            req->recv.comp.count = 1;
            req->recv.comp.status = Status::ok;
            log_scheme(rts, kRndvGetZcopy);
            if (num_rails > 1 && scheme == &kRndvGetZcopy)
                rndv_rails_get_start(w, req, ep, rts, rails, num_rails);
            rndv_get_start(req, ep);
            return;
        }
        LOOM_LOG_DEBUG("ucp: rendezvous GET not possible ({}); using the AM pipeline", to_string(unpacked.status()));
    }
    // AM pipeline: ask for the data, which arrives as fragments of the RTS's msg_id.
    log_scheme(rts, kRndvAm);
    req->recv.comp.status = Status::ok;
    if (rts.length == 0) {  // nothing to move (and nothing truncated: checked above)
        send_ack(w, rts.sender_uuid, kAmRndvAts, rts.sreq_id, Status::ok);
        req->recv.dt.finish();
        w.complete(req, Status::ok);
        return;
    }
    w.frags[FragKey{rts.sender_uuid, rts.msg_id}] = FragTarget{req, nullptr};
    send_ack(w, rts.sender_uuid, kAmRndvRtr, rts.sreq_id, Status::ok);
}

void rndv_ep_purge(Worker& w, Ep* ep, Status status) {
    // Receives waiting for this peer's PUTs: their FIN would come to the endpoint replies
    // use (closed by force or failed here), so nothing completes them any more.
    auto by_uuid = w.ep_by_uuid.find(ep->remote_uuid);
    if (by_uuid == w.ep_by_uuid.end() || by_uuid->second != ep) return;
    std::vector<Request*> waiting;
    for (auto it = w.frags.begin(); it != w.frags.end();) {
        Request* req = it->second.recv;
        if (it->first.uuid == ep->remote_uuid && req != nullptr && (req->recv.rndv_wait & kRecvWaitFin)) {
            waiting.push_back(req);
            it = w.frags.erase(it);
        } else {
            ++it;
        }
    }
    for (Request* req : waiting) rndv_recv_fin(w, req, status);  // completions may touch frags: not while iterating
}

// --- the receiver's schemes: protocols of class rndv_recv in the endpoint's table --------

namespace {

/** The rendezvous lane's iface of init.ep; nullptr without one (no zero-copy GET on both sides). */
const WorkerIface* rndv_iface(const ProtoInit& init) {
    return init.ep.rndv_lane != kNoLane ? &init.lane_iface(init.ep.rndv_lane) : nullptr;
}

/** What LOOM_RNDV_SCHEME says, as the printout gives a forced protocol's reason or another's absence. */
const char* scheme_setting(RndvScheme scheme) {
    switch (scheme) {
    case RndvScheme::auto_: return "LOOM_RNDV_SCHEME=auto";
    case RndvScheme::get_zcopy: return "LOOM_RNDV_SCHEME=get_zcopy";
    case RndvScheme::am: return "LOOM_RNDV_SCHEME=am";
    case RndvScheme::put_zcopy: return "LOOM_RNDV_SCHEME=put_zcopy";
    case RndvScheme::get_put: return "LOOM_RNDV_SCHEME=get_put";
    }
    return "LOOM_RNDV_SCHEME";
}

/**
 * What the zero-copy schemes share: the rendezvous lane, @p put_too when they PUT, and
 * not LOOM_RNDV_SCHEME=am. Fills caps.lane and returns nullptr, or why not.
 */
const char* zcopy_caps(const ProtoInit& init, ProtoCaps& caps, bool put_too) {
    const WorkerIface* wi = rndv_iface(init);
    if (wi == nullptr) return "no rendezvous lane (no zero-copy GET on both sides)";
    if (put_too && !(wi->attr.cap_flags & uct::kCapPutZcopy)) return "the rendezvous lane has no zero-copy PUT";
    if (init.config.rndv_scheme == RndvScheme::am) return scheme_setting(RndvScheme::am);
    caps.lane = init.ep.rndv_lane;
    // An empty message has nothing to GET or PUT: its sender offers no buffer, and the
    // AM pipeline's answer (an ATS at once) ends it.
    caps.min_size = 1;
    return nullptr;
}

/**
 * GET: every size the others leave, priced by the model (docs/protocols.md,
 * "Thresholds"); auto stops it where the split starts.
 */
const char* get_zcopy_init(const ProtoInit& init, ProtoCaps& caps) {
    if (const char* why = zcopy_caps(init, caps, false)) return why;
    if (init.config.rndv_scheme == RndvScheme::get_zcopy) {
        caps.forced = scheme_setting(RndvScheme::get_zcopy);
        return nullptr;
    }
    caps.fallback = !rndv_cost_line(rndv_model_input(init, true), caps.cost);
    if (init.config.rndv_scheme == RndvScheme::auto_) {
        if (const std::size_t split = rndv_split_min(*rndv_iface(init)); split != SIZE_MAX) caps.max_size = split - 1;
    }
    return nullptr;
}

/** PUT: never chosen by the model (GET moves the same bytes with one message less); only when forced. */
const char* put_zcopy_init(const ProtoInit& init, ProtoCaps& caps) {
    if (const char* why = zcopy_caps(init, caps, true)) return why;
    if (init.config.rndv_scheme != RndvScheme::put_zcopy) return "only where LOOM_RNDV_SCHEME=put_zcopy forces it";
    caps.forced = scheme_setting(RndvScheme::put_zcopy);
    return nullptr;
}

/**
 * The split: forced, or under auto from rndv_split_min on a memory device, priced as GET
 * with half the copy saved for the extra cost rndv_split_min weighs (the lines cross there).
 */
const char* get_put_init(const ProtoInit& init, ProtoCaps& caps) {
    if (const char* why = zcopy_caps(init, caps, true)) return why;
    const RndvScheme scheme = init.config.rndv_scheme;
    if (scheme == RndvScheme::get_put) {
        caps.forced = scheme_setting(scheme);
        return nullptr;
    }
    if (scheme != RndvScheme::auto_) return scheme_setting(scheme);
    const WorkerIface& wi = *rndv_iface(init);
    caps.min_size = rndv_split_min(wi);
    if (caps.min_size == SIZE_MAX) return "the split pays only on a memory device with zero-copy GET and PUT";
    PerfLine get;
    caps.fallback = !rndv_cost_line(rndv_model_input(init, true), get);
    const double saved_per_byte = 0.5 / wi.attr.bandwidth_dedicated;
    caps.cost = {get.fixed + saved_per_byte * static_cast<double>(caps.min_size), get.per_byte - saved_per_byte};
    return nullptr;
}

/** The AM pipeline: always possible, not priced; where nothing else serves, or forced. */
const char* am_pipeline_init(const ProtoInit& init, ProtoCaps& caps) {
    caps.lane = init.ep.am_lane;
    if (init.config.rndv_scheme == RndvScheme::am) {
        caps.forced = scheme_setting(RndvScheme::am);
    } else {
        caps.fallback = true;
    }
    return nullptr;
}

/** The printout's words for scheme @p proto (rndv_describe). */
const char* scheme_words(const Proto* proto) {
    if (proto == &kRndvGetZcopy) return "RDMA GET";
    if (proto == &kRndvPutZcopy) return "RDMA PUT";
    if (proto == &kRndvGetPut) return "RDMA GET of the head + PUT of the tail";
    return "AM pipeline";
}

}  // namespace

// Receive-side protocols: no send progress (rndv_recv_start runs the one the table selects).
const Proto kRndvGetZcopy{"rndv get_zcopy",
                          "the receiver GETs the sender's buffer, then ATS",
                          proto_op_bit(ProtoOp::rndv_recv),
                          false,
                          false,
                          0,
                          get_zcopy_init,
                          nullptr,
                          [](const ProtoInit& init, const ProtoCaps&) { return rndv_rails_describe(init); }};
const Proto kRndvGetPut{"rndv get_put",
                        "PUT_RTR with the receiver's key for the tail (from half, on 4 KiB); the receiver GETs the "
                        "head, then ATS; the sender PUTs the tail, then FIN",
                        proto_op_bit(ProtoOp::rndv_recv), false, false, 1, get_put_init, nullptr, nullptr};
const Proto kRndvPutZcopy{"rndv put_zcopy", "PUT_RTR with the receiver's key; the sender PUTs, then FIN",
                          proto_op_bit(ProtoOp::rndv_recv), false, false, 2, put_zcopy_init, nullptr, nullptr};
const Proto kRndvAm{"rndv am pipeline", "RTR; the sender sends the data as eager middle fragments",
                    proto_op_bit(ProtoOp::rndv_recv), true, false, 3, am_pipeline_init, nullptr, nullptr};
LOOM_PROTO_REGISTER(kRndvGetZcopy);
LOOM_PROTO_REGISTER(kRndvGetPut);
LOOM_PROTO_REGISTER(kRndvPutZcopy);
LOOM_PROTO_REGISTER(kRndvAm);

std::string rndv_describe(const ProtoTable& table) {
    const ProtoTable::Class& c = table.ranges(ProtoOp::rndv_recv, true);
    std::string out;
    for (unsigned i = 0; i < c.count; ++i) {
        const ProtoRange& r = c.ranges[i];
        if (r.last == 0 && c.count > 1) continue;  // an empty message: nothing moves (zcopy_caps)
        out += out.empty() ? scheme_words(r.proto) : fmt::format("; from {} B: {}", r.first, scheme_words(r.proto));
    }
    return out.empty() ? scheme_words(&kRndvAm) : out;
}

std::string rndv_scheme_describe(const ProtoInit& init, const ProtoCaps&) {
    return ", " + rndv_describe(init.table);
}

}  // namespace loom::ucp
