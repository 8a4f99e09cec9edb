/**
 * Active messages: handler registration, the eager protocols (short, one bcopy,
 * fragments reassembled into a descriptor), rendezvous through src/ucp/rndv (rndv.h:
 * RTS fields, the receiver's scheme, ATS), and the receive side
 * that calls the application's handlers. docs/protocols.md describes the wire.
 */
#include "ucp/am/am_proto.h"

#include "ucp/core/ucp_log.h"
#include "ucp/core/wire.h"
#include "ucp/rndv/rndv.h"
#include "ucp/rndv/rndv_thresh.h"
#include "ucp/tag/tag_proto.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace loom::ucp {

/**
 * Data the protocol layer holds for a handler: a copy of eager data (handler asked for
 * persistent data) or a message reassembled from fragments. The application's header
 * (reassembled messages only) and the data follow it.
 */
struct AmDataDesc {
    Worker* worker;
    std::size_t length;          ///< data bytes
    std::uint64_t sender_uuid;
    AmHdr am;                    ///< id, wire flags, header length (0 for a copy of eager data)
    bool pooled;
    std::uint8_t* header() { return reinterpret_cast<std::uint8_t*>(this + 1); }
    std::uint8_t* data() { return header() + header_room(am.header_length); }
    static std::size_t header_room(std::size_t header_length) { return (header_length + 15) & ~std::size_t{15}; }
};

/** A rendezvous message a handler was told of; its packed key follows. */
struct AmRndvDesc {
    RtsHdr rts;
    bool in_callback;  ///< the handler is running: whoever consumes it leaves the freeing to the handler
    bool consumed;     ///< received or dropped (the ATS or RTR is on its way)
    std::uint8_t* rkey() { return reinterpret_cast<std::uint8_t*>(this + 1); }
};

namespace {

// --- helpers -----------------------------------------------------------------------------

AmHdr hdr_of(std::uint64_t word) {
    AmHdr hdr;
    std::memcpy(&hdr, &word, sizeof(hdr));
    return hdr;
}

AmDataDesc* alloc_data_desc(AmWorker& am, std::size_t header_length, std::size_t length) {
    const std::size_t room = AmDataDesc::header_room(header_length);
    if (length > SIZE_MAX / 2 - room - sizeof(AmDataDesc)) return nullptr;  // a peer's absurd length
    const bool pooled = room + length <= AmWorker::kSmallData;
    void* mem = pooled ? am.small_pool.get() : std::malloc(sizeof(AmDataDesc) + room + length);
    if (mem == nullptr) return nullptr;
    auto* desc = static_cast<AmDataDesc*>(mem);
    desc->worker = &am.worker;
    desc->length = length;
    desc->sender_uuid = 0;
    desc->am = AmHdr{0, 0, 0, static_cast<std::uint32_t>(header_length)};
    desc->pooled = pooled;
    return desc;
}

void free_data_desc(AmWorker& am, AmDataDesc* desc) {
    if (desc->pooled) {
        am.small_pool.put(desc);
    } else {
        std::free(desc);
    }
}

void release_kept(AmWorker& am, const AmWorker::Kept& kept) {
    if (kept.iface != nullptr) {
        uct::iface_release_desc(kept.iface, kept.desc);
    } else {
        free_data_desc(am, static_cast<AmDataDesc*>(kept.desc));
    }
}

/** Tells a rendezvous sender its message is done with (dropped or refused): its send completes with @p status. */
void rndv_ack(Worker& w, const RtsHdr& rts, Status status) {
    // Quietly when the sender never wired up (send_ack would warn); send_ack skips a failed one.
    if (w.ep_by_uuid.count(rts.sender_uuid) == 0) return;
    send_ack(w, rts.sender_uuid, kAmRndvAts, rts.sreq_id, status);
}

void free_rndv_desc(AmWorker& am, AmRndvDesc* desc) {
    am.rndv.erase(desc);
    std::free(desc);
}

/** The handler of @p id, or nullptr after reporting the drop (one warning per id). */
const AmWorker::Handler* handler_of(AmWorker& am, unsigned id) {
    if (LOOM_LIKELY(id < am.handlers.size() && am.handlers[id].cb != nullptr)) return &am.handlers[id];
    if (am.warned_ids.insert(id).second) {
        LOOM_LOG_WARN("ucp: dropped an active message for id {}, which has no handler (further ones for that id "
                      "are dropped silently)",
                      id);
    } else {
        LOOM_LOG_DEBUG("ucp: dropped an active message for id {}, which has no handler", id);
    }
    return nullptr;
}

/** Runs the application's handler; fills the reply endpoint when the sender asked for one. */
int invoke(Worker& w, const AmWorker::Handler& h, const AmHdr& hdr, std::uint64_t sender_uuid, const void* header,
           void* data, std::size_t length, std::uint64_t recv_attr) {
    AmRecvParam param{recv_attr, nullptr};
    if (hdr.flags & kAmWireReply) {
        auto it = w.ep_by_uuid.find(sender_uuid);
        if (it != w.ep_by_uuid.end() && !(it->second->flags & kEpFailed)) {
            param.recv_attr |= kAmRecvAttrReplyEp;
            param.reply_ep = it->second;
        } else {
            LOOM_LOG_WARN("ucp: no endpoint to worker {:016x} to offer as the reply endpoint of id {}", sender_uuid,
                          hdr.am_id);
        }
    }
    // Copied first: the handler may replace itself.
    const AmRecvCallback cb = h.cb;
    void* const arg = h.arg;
    return static_cast<int>(cb(arg, hdr.header_length != 0 ? header : nullptr, hdr.header_length, data,
                               length, reinterpret_cast<const loom_am_recv_param_t*>(&param)));
}

/**
 * Gives eager data to its handler. @p payload lies in the transport's buffer
 * (@p uct_data, lendable when @p uct_flags has kAmCbFlagDesc), or in @p own, a
 * descriptor of ours. Returns what the transport handler returns.
 */
Status deliver_eager(AmWorker& am, const AmWorker::IfaceArg& ia, const AmHdr& hdr, std::uint64_t sender_uuid,
                     const std::uint8_t* header, std::uint8_t* payload, std::size_t plen, unsigned uct_flags,
                     void* uct_data, AmDataDesc* own) {
    Worker& w = *ia.worker;
    const AmWorker::Handler* h = handler_of(am, hdr.am_id);
    if (h == nullptr) {
        if (own != nullptr) free_data_desc(am, own);
        return Status::ok;
    }
    AmWorker::Kept keep{nullptr, own, plen};
    void* data = own != nullptr ? own->data() : payload;
    if (own == nullptr && (uct_flags & uct::kAmCbFlagDesc)) {
        keep.iface = w.ifaces[ia.iface].iface.get();
        keep.desc = uct_data;
    } else if (own == nullptr && (h->flags & kAmHandlerPersistentData)) {
        own = alloc_data_desc(am, 0, plen);
        if (own == nullptr) {
            LOOM_LOG_ERROR("ucp: out of memory for a {}-byte active message to id {}; dropped", plen, hdr.am_id);
            return Status::ok;
        }
        if (plen != 0) std::memcpy(own->data(), payload, plen);
        data = own->data();
        keep.desc = own;
    }
    const bool lendable = keep.desc != nullptr;
    const AmWorker::Current saved = am.current;
    am.current = AmWorker::Current{data, plen, false};
    const int st = invoke(w, *h, hdr, sender_uuid, header, data, plen, lendable ? std::uint64_t{kAmRecvAttrData} : 0);
    const bool consumed = am.current.consumed;
    am.current = saved;
    if (st == static_cast<int>(Status::in_progress) && !consumed) {
        if (lendable) {
            am.kept.emplace(data, keep);
            return keep.iface != nullptr ? Status::in_progress : Status::ok;
        }
        if (!am.warned_inprogress) {
            am.warned_inprogress = true;
            LOOM_LOG_WARN("ucp: the handler of id {} returned LOOM_INPROGRESS for data it may not keep (no "
                          "LOOM_AM_RECV_ATTR_FLAG_DATA); the data is released",
                          hdr.am_id);
        }
    }
    if (own != nullptr) free_data_desc(am, own);
    return Status::ok;
}

// --- receive handlers --------------------------------------------------------------------

/** kAmUserOnly: AmHdr [+ sender uuid] + header + data, in one message. */
Status am_only_handler(void* arg, void* data, std::size_t length, unsigned flags) {
    auto& ia = *static_cast<AmWorker::IfaceArg*>(arg);
    AmWorker& am = am_of(*ia.worker);
    AmHdr hdr;
    if (LOOM_UNLIKELY(length < sizeof(hdr))) {
        LOOM_LOG_WARN("ucp: dropped an active message of {} bytes (shorter than its header)", length);
        return Status::ok;
    }
    std::memcpy(&hdr, data, sizeof(hdr));
    std::size_t off = sizeof(hdr);
    std::uint64_t uuid = 0;
    if (hdr.flags & kAmWireReply) {
        if (LOOM_UNLIKELY(length - off < sizeof(uuid))) {
            LOOM_LOG_WARN("ucp: dropped an active message of {} bytes (truncated reply address)", length);
            return Status::ok;
        }
        std::memcpy(&uuid, static_cast<std::uint8_t*>(data) + off, sizeof(uuid));
        off += sizeof(uuid);
    }
    if (LOOM_UNLIKELY(hdr.header_length > length - off)) {
        LOOM_LOG_WARN("ucp: dropped an active message of {} bytes claiming a {}-byte header", length,
                      hdr.header_length);
        return Status::ok;
    }
    auto* header = static_cast<std::uint8_t*>(data) + off;
    return deliver_eager(am, ia, hdr, uuid, header, header + hdr.header_length, length - off - hdr.header_length,
                         flags, data, nullptr);
}

/** A reassembled message is complete (or failed: peer gone, worker destroyed). */
void am_assembled(void* request, loom_status_t status, const loom_tag_recv_info_t*, void* user_data) {
    auto* desc = static_cast<AmDataDesc*>(user_data);
    // The assembling receive (am_first_handler) is ours: done with it.
    if (request != nullptr) desc->worker->release(request_of(request));
    AmWorker& am = am_of(*desc->worker);
    if (status != LOOM_OK) {
        LOOM_LOG_DEBUG("ucp: active message to id {} from {:016x} lost: {}", desc->am.am_id, desc->sender_uuid,
                       to_string(static_cast<Status>(status)));
        free_data_desc(am, desc);
        return;
    }
    AmWorker::IfaceArg ia{desc->worker, 0};
    AmHdr hdr = desc->am;
    (void)deliver_eager(am, ia, hdr, desc->sender_uuid, desc->header(), nullptr, desc->length, 0, nullptr, desc);
}

/** kAmUserFirst: AmFirstHdr + header + first fragment; the rest comes as kAmEagerMiddle fragments. */
Status am_first_handler(void* arg, void* data, std::size_t length, unsigned) {
    auto& ia = *static_cast<AmWorker::IfaceArg*>(arg);
    Worker& w = *ia.worker;
    AmWorker& am = am_of(w);
    AmFirstHdr hdr;
    if (length < sizeof(hdr)) {
        LOOM_LOG_WARN("ucp: dropped a first active-message fragment of {} bytes (shorter than its header)", length);
        return Status::ok;
    }
    std::memcpy(&hdr, data, sizeof(hdr));
    const std::size_t rest = length - sizeof(hdr);
    if (hdr.am.header_length > rest || rest - hdr.am.header_length > hdr.total_length) {
        LOOM_LOG_WARN("ucp: dropped a first active-message fragment of {} bytes (header {}, message {} bytes)", length,
                      hdr.am.header_length, hdr.total_length);
        return Status::ok;
    }
    const FragKey key{hdr.sender_uuid, hdr.msg_id};
    if (w.frags.count(key) != 0) {
        LOOM_LOG_WARN("ucp: dropped a first active-message fragment of message {} from {:016x}, already open",
                      hdr.msg_id, hdr.sender_uuid);
        return Status::ok;
    }
    const auto* header = static_cast<const std::uint8_t*>(data) + sizeof(hdr);
    const std::size_t chunk = rest - hdr.am.header_length;
    AmDataDesc* desc = alloc_data_desc(am, hdr.am.header_length, hdr.total_length);
    if (desc == nullptr) {
        LOOM_LOG_ERROR("ucp: out of memory for a {}-byte active message to id {}; dropped", hdr.total_length,
                       hdr.am.am_id);
        return Status::ok;
    }
    desc->am = hdr.am;
    desc->sender_uuid = hdr.sender_uuid;
    if (hdr.am.header_length != 0) std::memcpy(desc->header(), header, hdr.am.header_length);
    if (chunk != 0) std::memcpy(desc->data(), header + hdr.am.header_length, chunk);
    if (chunk == hdr.total_length) {  // nothing follows (a peer's choice; ours always fragments)
        am_assembled(nullptr, LOOM_OK, nullptr, desc);
        return Status::ok;
    }
    // The fragments go through the tag protocol's routing (Worker::frags) to a receive
    // of ours that fills the descriptor and calls am_assembled when complete or failed.
    Request* req = w.alloc_request();
    if (req == nullptr) {
        LOOM_LOG_ERROR("ucp: out of memory for an active message to id {}; dropped", hdr.am.am_id);
        free_data_desc(am, desc);
        return Status::ok;
    }
    req->flags |= kReqRecv | kReqHandedOut;  // its callback runs, and releases it
    req->cb.recv = am_assembled;
    req->user_data = desc;
    (void)req->recv.dt.start_unpack(dt_make_contig(1), desc->data(), hdr.total_length);
    req->recv.info = TagRecvInfo{0, hdr.total_length};
    req->recv.received = chunk;
    req->recv.comp.status = Status::ok;
    req->recv.sender_uuid = hdr.sender_uuid;
    req->recv.rndv_wait = 0;  // not a rendezvous receive
    w.frags[key] = FragTarget{req, nullptr};
    return Status::ok;
}

/** kAmUserRts: AmRtsHdr + packed key + header. The handler gets a descriptor. */
Status am_rts_handler(void* arg, void* data, std::size_t length, unsigned) {
    auto& ia = *static_cast<AmWorker::IfaceArg*>(arg);
    Worker& w = *ia.worker;
    AmWorker& am = am_of(w);
    AmRtsHdr hdr;
    if (length < sizeof(hdr)) {
        LOOM_LOG_WARN("ucp: dropped an active-message rendezvous request of {} bytes (truncated)", length);
        return Status::ok;
    }
    std::memcpy(&hdr, data, sizeof(hdr));
    const std::size_t rkey_len = hdr.rts.rkey_length;
    if (length != sizeof(hdr) + rkey_len + hdr.am.header_length) {
        LOOM_LOG_WARN("ucp: dropped an active-message rendezvous request of {} bytes (key {}, header {})", length,
                      rkey_len, hdr.am.header_length);
        return Status::ok;
    }
    const AmWorker::Handler* h = handler_of(am, hdr.am.am_id);
    if (h == nullptr) {
        rndv_ack(w, hdr.rts, Status::no_element);
        return Status::ok;
    }
    auto* desc = static_cast<AmRndvDesc*>(std::malloc(sizeof(AmRndvDesc) + rkey_len));
    if (desc == nullptr) {
        LOOM_LOG_ERROR("ucp: out of memory for an active-message rendezvous to id {}; dropped", hdr.am.am_id);
        rndv_ack(w, hdr.rts, Status::no_memory);
        return Status::ok;
    }
    desc->rts = hdr.rts;
    desc->in_callback = true;
    desc->consumed = false;
    const auto* p = static_cast<const std::uint8_t*>(data) + sizeof(hdr);
    if (rkey_len != 0) std::memcpy(desc->rkey(), p, rkey_len);
    am.rndv.insert(desc);
    const int st = invoke(w, *h, hdr.am, hdr.rts.sender_uuid, p + rkey_len, desc, hdr.rts.length, kAmRecvAttrRndv);
    desc->in_callback = false;
    if (desc->consumed) {
        free_rndv_desc(am, desc);
    } else if (st != static_cast<int>(Status::in_progress)) {
        // Not fetched: the data is dropped and the sender completes with the handler's word.
        rndv_ack(w, hdr.rts, st < 0 ? static_cast<Status>(st) : Status::ok);
        free_rndv_desc(am, desc);
    }
    return Status::ok;
}

// --- send protocols ----------------------------------------------------------------------

/** Up to three byte pieces, then data from the request's datatype. */
struct AmPackArg {
    const void* piece[3];
    std::size_t piece_len[3];
    DtState* dt;
    std::size_t offset;
    std::size_t data_len;
};

std::size_t am_pack(void* dest, void* a) {
    auto* arg = static_cast<AmPackArg*>(a);
    auto* out = static_cast<std::uint8_t*>(dest);
    std::size_t n = 0;
    for (int i = 0; i < 3; ++i) {
        if (arg->piece_len[i] == 0) continue;
        std::memcpy(out + n, arg->piece[i], arg->piece_len[i]);
        n += arg->piece_len[i];
    }
    if (arg->data_len != 0) n += arg->dt->pack(arg->offset, out + n, arg->data_len);
    return n;
}

/** The whole message in one bcopy (the caller checked it fits). */
ssize_t am_send_single(Ep* ep, const AmHdr& hdr, const void* header, DtState& dt) {
    const std::uint64_t uuid = ep->worker->uuid;
    AmPackArg arg{{&hdr, &uuid, header},
                  {sizeof(hdr), hdr.flags & kAmWireReply ? sizeof(uuid) : 0, hdr.header_length},
                  &dt,
                  0,
                  dt.length};
    return uct::ep_am_bcopy(ep->am_ep, kAmUserOnly, am_pack, &arg, 0);
}

void send_done(Request* req, Status status) {
    req->send.dt.finish();
    req->worker->complete(req, status);
}

Status am_single_progress(Request* req) {
    ssize_t n = am_send_single(req->ep, hdr_of(req->send.tag), req->send.am_header, req->send.dt);
    if (n == static_cast<ssize_t>(Status::no_resource)) return Status::no_resource;
    send_done(req, n < 0 ? static_cast<Status>(n) : Status::ok);
    return Status::ok;
}

/**
 * Eager short from a request, as the C API's fast path sends it: the AM header as the
 * transport's 8-byte header and the one buffer inline. A reply (its return address) or a
 * header with data needs two pieces: one bcopy carries those.
 */
Status am_short_progress(Request* req) {
    const AmHdr hdr = hdr_of(req->send.tag);
    if ((hdr.flags & kAmWireReply) || (hdr.header_length != 0 && req->send.dt.length != 0)) {
        return am_single_progress(req);
    }
    const void* buffer = hdr.header_length != 0 ? req->send.am_header : req->send.dt.buffer;
    Status s = uct::ep_am_short(req->ep->am_ep, kAmUserOnly, req->send.tag, buffer,
                                static_cast<unsigned>(hdr.header_length + req->send.dt.length));
    if (s == Status::no_resource) return s;
    send_done(req, s);
    return Status::ok;
}

/** The first fragment (with the header), then the tag protocol's middle fragments. */
Status am_multi_progress(Request* req) {
    if (!(req->send.msg_id & kRndvMsgBit)) {
        Worker& w = *req->worker;
        Ep* ep = req->ep;
        AmFirstHdr first{hdr_of(req->send.tag), w.uuid, req->send.msg_id, req->send.dt.length};
        const std::size_t room = ep->max_bcopy - sizeof(first) - first.am.header_length;
        const std::size_t chunk = std::min(req->send.dt.length, room);
        AmPackArg arg{{&first, req->send.am_header, nullptr}, {sizeof(first), first.am.header_length, 0},
                      &req->send.dt, 0, chunk};
        ssize_t n = uct::ep_am_bcopy(ep->am_ep, kAmUserFirst, am_pack, &arg, 0);
        if (n == static_cast<ssize_t>(Status::no_resource)) return Status::no_resource;
        if (n < 0) {
            send_done(req, static_cast<Status>(n));
            return Status::ok;
        }
        req->send.offset = chunk;
        req->send.msg_id |= kRndvMsgBit;  // from now on: middle fragments only
        if (req->send.offset >= req->send.dt.length) {
            send_done(req, Status::ok);
            return Status::ok;
        }
    }
    return eager_multi_progress(req);
}

/** The RTS: the tag protocol's fields (and key), the AM header, the application's header. */
Status am_rts_progress(Request* req) {
    std::uint8_t rkey[kMaxRtsRkey];
    AmRtsHdr hdr;
    const std::size_t rkey_len = rndv_rts_prepare(req, hdr.rts, rkey);
    hdr.am = hdr_of(req->send.tag);
    AmPackArg arg{{&hdr, rkey, req->send.am_header}, {sizeof(hdr), rkey_len, hdr.am.header_length},
                  &req->send.dt, 0, 0};
    ssize_t n = uct::ep_am_bcopy(req->ep->am_ep, kAmUserRts, am_pack, &arg, 0);
    if (n == static_cast<ssize_t>(Status::no_resource)) return Status::no_resource;
    if (n < 0) send_done(req, static_cast<Status>(n));
    return Status::ok;  // the ATS completes it, or the RTR starts the AM pipeline
}

// --- the active-message protocols of the endpoint's table (src/ucp/proto) -----------------

const char* am_bcopy_init(const ProtoInit& init, ProtoCaps& caps) {
    return eager_bcopy_caps(init, caps, sizeof(AmHdr));
}

/** The class of a send with LOOM_AM_SEND_FLAG_* @p flags. */
ProtoOp am_op(std::uint32_t flags) {
    return (flags & kAmSendRndv) ? ProtoOp::am_rndv : (flags & kAmSendEager) ? ProtoOp::am_eager : ProtoOp::am;
}

/**
 * The protocol of an active message: eager or rendezvous by the data's length, as UCX
 * decides (the header does not push a message into rendezvous); then, for eager, the
 * variant by the bytes after the fixed AmHdr (header, data, a reply's return address),
 * which is what "am, flag eager" lists.
 */
const ProtoRange* am_select(const Ep* ep, std::uint32_t flags, bool contig, std::size_t header_length,
                            std::size_t length) {
    const ProtoRange* range = ep->protos->select(am_op(flags), contig, length);
    const std::size_t extra = header_length + ((flags & kAmSendReply) ? sizeof(std::uint64_t) : 0);
    if (range == nullptr || range->proto == &kAmRndv || extra == 0) return range;
    range = ep->protos->select(ProtoOp::am_eager, contig, length + extra);
    // Eager short sends a header with data, or a reply, as one bcopy behind the AmHdr
    // (am_short_progress): where that is more than one bcopy holds, the non-contiguous
    // class's ranges (bcopy up to its room, then fragments) serve it.
    if (range != nullptr && range->proto == &kAmEagerShort &&
        sizeof(AmHdr) + length + extra > ep->max_bcopy) {
        range = ep->protos->select(ProtoOp::am_eager, false, length + extra);
    }
    return range;
}

AmHdr make_hdr(unsigned id, std::uint32_t flags, std::size_t header_length) {
    return AmHdr{static_cast<std::uint16_t>(id), static_cast<std::uint8_t>(flags & kAmSendReply ? kAmWireReply : 0),
                 0, static_cast<std::uint32_t>(header_length)};
}

}  // namespace

const Proto kAmEagerShort{"am eager short",
                          "the AM header as the transport's header, header or data inline (am_short; a reply or both: one bcopy)",
                          proto_op_bit(ProtoOp::am) | proto_op_bit(ProtoOp::am_eager), false, true, 0, eager_short_caps,
                          am_short_progress, nullptr};
const Proto kAmEagerBcopy{"am eager bcopy", "one message: the AM header, the user header, the data (sized by all three)",
                          proto_op_bit(ProtoOp::am) | proto_op_bit(ProtoOp::am_eager), true, false, 1, am_bcopy_init,
                          am_single_progress, nullptr};
const Proto kAmEagerMulti{"am eager multi", "a first fragment with both headers, then the tag protocol's middle fragments",
                          proto_op_bit(ProtoOp::am) | proto_op_bit(ProtoOp::am_eager), true, false, 2, eager_caps,
                          am_multi_progress, eager_fragments_describe};
const Proto kAmRndv{"am rendezvous", "an RTS with both headers; the handler's receive moves the data as tag rendezvous does",
                    proto_op_bit(ProtoOp::am) | proto_op_bit(ProtoOp::am_rndv), true, false, 3, rndv_proto_init,
                    am_rts_progress, rndv_scheme_describe};
LOOM_PROTO_REGISTER(kAmEagerShort);
LOOM_PROTO_REGISTER(kAmEagerBcopy);
LOOM_PROTO_REGISTER(kAmEagerMulti);
LOOM_PROTO_REGISTER(kAmRndv);

// --- entry points ------------------------------------------------------------------------

std::size_t am_max_header(const Ep* ep) {
    constexpr std::size_t overhead = sizeof(AmRtsHdr) + kMaxRtsRkey;
    return ep->max_bcopy > overhead ? ep->max_bcopy - overhead : 0;
}

std::size_t am_worker_max_header(const Worker& w) {
    constexpr std::size_t overhead = sizeof(AmRtsHdr) + kMaxRtsRkey;
    std::size_t smallest = SIZE_MAX;
    for (const WorkerIface& wi : w.ifaces) smallest = std::min(smallest, wi.attr.am.max_bcopy);
    return smallest > overhead && smallest != SIZE_MAX ? smallest - overhead : 0;
}

namespace {

/** Creates the worker's active-message state and registers its AM handlers on every iface. */
Status am_family_init(Worker& w) {
    auto* am = new (std::nothrow) AmWorker(w);
    if (am == nullptr) return Status::no_memory;
    w.family_state[kAmSlot] = am;
    ucs::MemPoolParams mp;
    mp.name = "ucp_am_data";
    mp.elem_size = sizeof(AmDataDesc) + AmWorker::kSmallData;
    mp.alignment = 64;
    mp.elems_per_chunk = 64;
    if (Status s = am->small_pool.init(std::move(mp)); s != Status::ok) return s;
    am->iface_args.reserve(w.ifaces.size());
    for (std::size_t i = 0; i < w.ifaces.size(); ++i) {
        am->iface_args.push_back(AmWorker::IfaceArg{&w, static_cast<std::uint8_t>(i)});
    }
    struct {
        uct::AmId id;
        uct::AmCallback cb;
    } const handlers[] = {
        {kAmUserOnly, am_only_handler},
        {kAmUserFirst, am_first_handler},
        {kAmUserRts, am_rts_handler},
    };
    for (std::size_t i = 0; i < w.ifaces.size(); ++i) {
        for (const auto& h : handlers) {
            if (Status s = w.ifaces[i].iface->set_am_handler(h.id, h.cb, &am->iface_args[i], 0); s != Status::ok) {
                return s;
            }
        }
    }
    return Status::ok;
}

/** Releases what active messages still hold (kept data, pending rendezvous); before the ifaces go. */
void am_family_cleanup(Worker& w) {
    AmWorker* am = am_state(w);
    if (am == nullptr) return;
    for (auto& [data, kept] : am->kept) release_kept(*am, kept);
    am->kept.clear();
    // The endpoints are gone: nobody can be told; the descriptors just go.
    for (AmRndvDesc* desc : am->rndv) std::free(desc);
    am->rndv.clear();
    w.family_state[kAmSlot] = nullptr;
    delete am;
}

const ProtoFamily kAmFamily{.name = "active message", .slot = kAmSlot,
                            .init = am_family_init,
                            .cleanup = am_family_cleanup};
LOOM_FAMILY_REGISTER(kAmFamily);

}  // namespace

Status am_set_handler(Worker& w, unsigned id, std::uint32_t flags, AmRecvCallback cb, void* arg) {
    AmWorker& am = am_of(w);
    if (id >= am.handlers.size()) {
        if (cb == nullptr) return Status::ok;
        try {
            am.handlers.resize(id + 1);
        } catch (const std::bad_alloc&) {
            return Status::no_memory;
        }
    }
    am.handlers[id] = AmWorker::Handler{cb, cb != nullptr ? arg : nullptr, flags};
    if (cb != nullptr) am.warned_ids.erase(id);  // a later drop for it is news again
    return Status::ok;
}

Status am_send_try_now(Ep* ep, unsigned id, std::uint32_t flags, const void* header, std::size_t header_length,
                       DtState& dt) {
    if (ep->num_pending != 0) return Status::no_resource;
    const ProtoRange* range = am_select(ep, flags, dt.contig(), header_length, dt.length);
    if (range == nullptr || (range->proto != &kAmEagerShort && range->proto != &kAmEagerBcopy)) {
        return Status::no_resource;
    }
    const AmHdr hdr = make_hdr(id, flags, header_length);
    if (range->proto == &kAmEagerShort && !(flags & kAmSendReply) && (header_length == 0 || dt.length == 0)) {
        // What the fast path does, where its quick test was too strict (a header near the limit).
        std::uint64_t word;
        std::memcpy(&word, &hdr, sizeof(word));
        return uct::ep_am_short(ep->am_ep, kAmUserOnly, word, header_length != 0 ? header : dt.buffer,
                                static_cast<unsigned>(header_length + dt.length));
    }
    ssize_t n = am_send_single(ep, hdr, header, dt);
    return n >= 0 ? Status::ok : static_cast<Status>(n);
}

Status am_send_start(Request* req, Ep* ep, unsigned id, std::uint32_t flags, const void* header,
                     std::size_t header_length) {
    Worker& w = *ep->worker;
    const AmHdr hdr = make_hdr(id, flags, header_length);
    req->ep = ep;
    req->send.offset = 0;
    req->memh = uct::kMemHNull;
    req->send.msg_id = w.next_msg_id++;
    std::memcpy(&req->send.tag, &hdr, sizeof(hdr));
    req->send.am_header = header;
    const ProtoRange* range = am_select(ep, flags, req->send.dt.contig(), header_length, req->send.dt.length);
    if (LOOM_UNLIKELY(range == nullptr)) {  // cannot be: eager multi or rendezvous serves every size
        send_done(req, Status::unsupported);
        return Status::unsupported;
    }
    req->progress = range->progress;
    if (range->proto == &kAmRndv) {
        req->send.rndv_wait = 0;  // no answer accepted before its RTS left (rndv_rts_prepare)
        // The ATS and RTR name the request: the tag protocol's handlers move it on.
        if (Status s = w.req_table.insert(req); s != Status::ok) {
            send_done(req, s);
            return s;
        }
    }
    req->flags |= kReqInEpList;
    ep->outstanding.push_back(*req);
    return send_request_start(req);
}

AmDataKind am_data_kind(Worker& w, void* data) {
    AmWorker& am = am_of(w);
    if (am.rndv.count(static_cast<AmRndvDesc*>(data)) != 0) return AmDataKind::rndv;
    if (am.kept.count(data) != 0) return AmDataKind::eager;
    if (data != nullptr && data == am.current.data && !am.current.consumed) return AmDataKind::eager;
    return AmDataKind::unknown;
}

Status am_recv_eager(Worker& w, void* data, DtState& dt, std::size_t& length) {
    AmWorker& am = am_of(w);
    auto it = am.kept.find(data);
    length = it != am.kept.end() ? it->second.length : am.current.length;
    const std::size_t n = std::min(length, dt.length);
    Status s = n != 0 ? dt.unpack(0, data, n) : Status::ok;
    if (it != am.kept.end()) {
        release_kept(am, it->second);
        am.kept.erase(it);
    } else {
        am.current.consumed = true;  // the handler's return value no longer keeps it
    }
    if (s == Status::ok && length > dt.length) s = Status::message_truncated;
    return s;
}

void am_recv_rndv(Worker& w, void* data, Request* req) {
    auto* desc = static_cast<AmRndvDesc*>(data);
    desc->consumed = true;
    rndv_recv_start(w, req, desc->rts, desc->rkey(), desc->rts.rkey_length);
    if (!desc->in_callback) free_rndv_desc(am_of(w), desc);
}

void am_data_release(Worker& w, void* data) {
    AmWorker& am = am_of(w);
    if (auto it = am.rndv.find(static_cast<AmRndvDesc*>(data)); it != am.rndv.end()) {
        AmRndvDesc* desc = *it;
        if (desc->consumed) return;
        desc->consumed = true;
        rndv_ack(w, desc->rts, Status::ok);
        if (!desc->in_callback) free_rndv_desc(am, desc);
        return;
    }
    if (auto it = am.kept.find(data); it != am.kept.end()) {
        release_kept(am, it->second);
        am.kept.erase(it);
        return;
    }
    if (data != nullptr && data == am.current.data) {
        am.current.consumed = true;
        return;
    }
    LOOM_LOG_WARN("ucp: loom_am_data_release: {} is not active-message data this worker handed out", data);
}

}  // namespace loom::ucp
