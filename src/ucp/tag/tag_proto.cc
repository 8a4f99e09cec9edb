/**
 * Tagged messages: the eager protocols (short, single bcopy, multi-fragment bcopy,
 * with or without a synchronous acknowledgement) and rendezvous (RTS, then RDMA GET by
 * the receiver and ATS; or RTR and an AM pipeline of fragments; or an RTR with the
 * receiver's key, RDMA PUT by the sender and FIN; or the split of the last two, the
 * receiver GETting the head while the sender PUTs the tail). docs/protocols.md
 * describes the wire and the choice by size.
 */
#include "ucp/tag/tag_proto.h"

#include "ucp/core/ucp_log.h"
#include "ucp/core/wire.h"
#include "ucp/tag/rndv_thresh.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace loom::ucp {

namespace {

Request* recv_of(TagRecvEntry* entry) {
    return reinterpret_cast<Request*>(reinterpret_cast<char*>(entry) - offsetof(Request, recv.entry));
}
UnexpDesc* desc_of(TagUnexpEntry* entry) { return reinterpret_cast<UnexpDesc*>(entry); }

/**
 * A receive waiting for PUTs is in Worker::frags under its sender's request id (bit 63 set,
 * which no msg_id on the wire has), so that the failure of the sender's endpoint finds it.
 */
FragKey rndv_put_key(const Request* req) { return FragKey{req->recv.sender_uuid, req->recv.sreq_id | kRndvMsgBit}; }

void free_desc(Worker& w, UnexpDesc* desc) {
    if (desc->pooled) {
        tag_of(w).desc_pool.put(desc);
    } else {
        std::free(desc);
    }
}

/** A descriptor with room for @p data_length bytes after it; nullptr without memory. */
UnexpDesc* alloc_desc(Worker& w, std::size_t data_length) {
    UnexpDesc* desc;
    bool pooled = data_length <= TagWorker::kSmallDescData;
    if (pooled) {
        desc = static_cast<UnexpDesc*>(tag_of(w).desc_pool.get());
    } else {
        desc = static_cast<UnexpDesc*>(std::malloc(sizeof(UnexpDesc) + data_length));
    }
    if (desc == nullptr) return nullptr;
    desc->entry.hash_link = {};
    desc->entry.order_link = {};
    desc->pooled = pooled;
    desc->sync = false;
    desc->complete = true;
    desc->sender_uuid = 0;
    desc->sreq_id = 0;
    desc->msg_id = 0;
    desc->received = 0;
    desc->waiting = nullptr;
    return desc;
}

/** The endpoint replies to @p uuid go on; nullptr (logged) when the peer never wired up. */
Ep* reply_ep(Worker& w, std::uint64_t uuid) {
    auto it = w.ep_by_uuid.find(uuid);
    if (it == w.ep_by_uuid.end()) {
        LOOM_LOG_WARN("ucp: no endpoint to reply to worker {:016x}", uuid);
        return nullptr;
    }
    return it->second;
}

}  // namespace

void send_ack(Worker& w, std::uint64_t uuid, uct::AmId id, std::uint64_t sreq_id, Status status) {
    Ep* ep = reply_ep(w, uuid);
    if (ep == nullptr) return;
    AckHdr ack{sreq_id, static_cast<std::int32_t>(status), 0};
    if (Status s = w.send_ctrl(ep, id, &ack, sizeof(ack)); s != Status::ok) {
        LOOM_LOG_WARN("ucp: cannot acknowledge to {:016x}: {}", uuid, to_string(s));
    }
}

/** Split scheme: the sender PUTs from here on, half the message on a 4 KiB boundary. */
std::size_t rndv_split_point(std::size_t length) { return (length / 2) & ~std::size_t{4095}; }

std::size_t rndv_split_min(const WorkerIface& wi) {
    const uct::IfaceAttr& a = wi.attr;
    constexpr std::uint64_t kZcopyRma = uct::kCapPutZcopy | uct::kCapGetZcopy;
    // Memory devices: the process that issues a zero-copy GET or PUT copies the bytes with
    // its own core, so a GET by the receiver and a PUT by the sender run on two cores at
    // once. On a network device the adapter or the kernel moves them either way, and the
    // split only adds a message (measured on tcp: no gain; docs/protocols.md).
    if (wi.rsc->tl.dev_type != uct::DeviceType::shm || (a.cap_flags & kZcopyRma) != kZcopyRma ||
        !(a.bandwidth_dedicated > 0)) {
        return SIZE_MAX;
    }
    // It saves half the copy, S / 2B. It costs two messages on the critical path (the
    // sender starts its PUTs when the RTR arrived; the receiver completes when the FIN
    // did) and a registration on each side (the receiver's buffer; the sender unpacks its
    // key). Worth it from where the saving is twice that cost: on shm ~50 KB, where
    // measured tag_lat crosses over between 32 and 64 KiB (docs/protocols.md).
    const double reg = (wi.rsc->md_attr.flags & uct::MdAttr::kReg) ? wi.rsc->md_attr.reg_cost_overhead : 0;
    const double cost = 2 * (a.latency.c + a.overhead) + 2 * reg;
    const double from = 2 * (2 * a.bandwidth_dedicated * cost);
    return std::max<std::size_t>(static_cast<std::size_t>(std::ceil(from)), 2 * 4096);  // the split is never 0
}

namespace {

/** Stores @p len bytes at @p offset of @p req's message, dropping what exceeds its buffer. */
void recv_store(Request* req, std::size_t offset, const void* src, std::size_t len) {
    const std::size_t capacity = req->recv.dt.length;
    if (offset >= capacity) return;
    const std::size_t n = std::min(len, capacity - offset);
    if (Status s = req->recv.dt.unpack(offset, src, n); s != Status::ok && req->recv.comp.status == Status::ok) {
        req->recv.comp.status = s;
    }
}

/** Completes a receive whose message has fully arrived. */
void recv_finish(Worker& w, Request* req) {
    Status s = req->recv.comp.status;
    if (s == Status::ok && req->recv.info.length > req->recv.dt.length) s = Status::message_truncated;
    req->recv.dt.finish();
    w.complete(req, s);
}

/**
 * Queues an eager message no receive wanted yet: @p plen bytes of its @p total arrived
 * (the rest follows as fragments of @p msg_id). Returns the descriptor, or nullptr (logged)
 * without memory.
 */
UnexpDesc* queue_unexpected_eager(Worker& w, Tag tag, std::size_t total, const std::uint8_t* payload,
                                  std::size_t plen, std::uint64_t sender_uuid, std::uint64_t sreq_id,
                                  std::uint64_t msg_id) {
    UnexpDesc* desc = alloc_desc(w, total);
    if (desc == nullptr) {
        LOOM_LOG_ERROR("ucp: out of memory for an unexpected message of {} bytes; dropped", total);
        return nullptr;
    }
    desc->kind = UnexpDesc::eager;
    desc->length = total;
    desc->received = plen;
    desc->complete = plen == total;
    desc->sync = sreq_id != 0;
    desc->sender_uuid = sender_uuid;
    desc->sreq_id = sreq_id;
    desc->msg_id = msg_id;
    std::memcpy(desc->data(), payload, plen);
    tag_of(w).tm.push_unexpected(desc->entry, tag);
    return desc;
}

/** A receive takes the unexpected message @p desc (already out of the queue). */
void recv_take_desc(Worker& w, Request* req, UnexpDesc* desc) {
    if (desc->kind == UnexpDesc::rts) {
        RtsHdr rts;
        std::memcpy(&rts, desc->data(), sizeof(rts));
        rndv_recv_start(w, req, rts, desc->data() + sizeof(rts), rts.rkey_length);
        free_desc(w, desc);
        return;
    }
    req->recv.info.sender_tag = desc->entry.tag;
    req->recv.info.length = desc->length;
    recv_store(req, 0, desc->data(), desc->received);
    req->recv.received = desc->received;
    if (desc->sync) send_ack(w, desc->sender_uuid, kAmSyncAck, desc->sreq_id, Status::ok);
    if (!desc->complete) {
        // The rest of the message goes straight to the receive from now on.
        w.frags[FragKey{desc->sender_uuid, desc->msg_id}] = FragTarget{req, nullptr};
        free_desc(w, desc);
        return;
    }
    free_desc(w, desc);
    recv_finish(w, req);
}

// --- receive handlers --------------------------------------------------------------------

/** Eager message in one piece: [tag][payload] (kAmEagerOnly) or EagerSyncHdr + payload. */
template <bool Sync>
Status eager_only_handler(void* arg, void* data, std::size_t length, unsigned) {
    auto& w = *static_cast<Worker*>(arg);
    constexpr std::size_t hdr_len = Sync ? sizeof(EagerSyncHdr) : sizeof(Tag);
    if (LOOM_UNLIKELY(length < hdr_len)) {
        LOOM_LOG_WARN("ucp: dropped an eager message of {} bytes (shorter than its header)", length);
        return Status::ok;
    }
    EagerSyncHdr hdr{};
    std::memcpy(&hdr, data, hdr_len);
    const auto* payload = static_cast<const std::uint8_t*>(data) + hdr_len;
    const std::size_t plen = length - hdr_len;
    if (TagRecvEntry* entry = tag_of(w).tm.match_expected(hdr.tag)) {
        Request* req = recv_of(entry);
        req->recv.info.sender_tag = hdr.tag;
        req->recv.info.length = plen;
        recv_store(req, 0, payload, plen);
        if (Sync) send_ack(w, hdr.sender_uuid, kAmSyncAck, hdr.sreq_id, Status::ok);
        recv_finish(w, req);
        return Status::ok;
    }
    (void)queue_unexpected_eager(w, hdr.tag, plen, payload, plen, hdr.sender_uuid, Sync ? hdr.sreq_id : 0, 0);
    return Status::ok;
}

Status eager_first_handler(void* arg, void* data, std::size_t length, unsigned) {
    auto& w = *static_cast<Worker*>(arg);
    if (length < sizeof(EagerFirstHdr)) {
        LOOM_LOG_WARN("ucp: dropped a first fragment of {} bytes (shorter than its header)", length);
        return Status::ok;
    }
    EagerFirstHdr hdr;
    std::memcpy(&hdr, data, sizeof(hdr));
    const auto* payload = static_cast<const std::uint8_t*>(data) + sizeof(hdr);
    const std::size_t plen = length - sizeof(hdr);
    if (plen > hdr.total_length) {
        LOOM_LOG_WARN("ucp: dropped a first fragment carrying {} bytes of a {}-byte message", plen, hdr.total_length);
        return Status::ok;
    }
    const FragKey key{hdr.sender_uuid, hdr.msg_id};
    if (TagRecvEntry* entry = tag_of(w).tm.match_expected(hdr.tag)) {
        Request* req = recv_of(entry);
        req->recv.info.sender_tag = hdr.tag;
        req->recv.info.length = hdr.total_length;
        recv_store(req, 0, payload, plen);
        req->recv.received = plen;
        if (hdr.sreq_id != 0) send_ack(w, hdr.sender_uuid, kAmSyncAck, hdr.sreq_id, Status::ok);
        if (plen == hdr.total_length) {
            recv_finish(w, req);
        } else {
            w.frags[key] = FragTarget{req, nullptr};
        }
        return Status::ok;
    }
    UnexpDesc* desc = queue_unexpected_eager(w, hdr.tag, hdr.total_length, payload, plen, hdr.sender_uuid,
                                             hdr.sreq_id, hdr.msg_id);
    if (desc != nullptr && !desc->complete) w.frags[key] = FragTarget{nullptr, desc};
    return Status::ok;
}

Status eager_middle_handler(void* arg, void* data, std::size_t length, unsigned) {
    auto& w = *static_cast<Worker*>(arg);
    if (length < sizeof(EagerMiddleHdr)) {
        LOOM_LOG_WARN("ucp: dropped a fragment of {} bytes (shorter than its header)", length);
        return Status::ok;
    }
    EagerMiddleHdr hdr;
    std::memcpy(&hdr, data, sizeof(hdr));
    const auto* payload = static_cast<const std::uint8_t*>(data) + sizeof(hdr);
    const std::size_t plen = length - sizeof(hdr);
    auto it = w.frags.find(FragKey{hdr.sender_uuid, hdr.msg_id});
    if (it == w.frags.end()) {
        LOOM_LOG_WARN("ucp: dropped a fragment of unknown message {} from {:016x}", hdr.msg_id, hdr.sender_uuid);
        return Status::ok;
    }
    FragTarget target = it->second;
    if (target.recv != nullptr) {
        Request* req = target.recv;
        if (LOOM_UNLIKELY(req->recv.rndv_wait != 0)) {  // only its sender's PUTs fill it
            LOOM_LOG_WARN("ucp: dropped a fragment for a receive that waits for PUTs from {:016x}", hdr.sender_uuid);
            return Status::ok;
        }
        if (hdr.offset + plen > req->recv.info.length || hdr.offset + plen < hdr.offset) {
            LOOM_LOG_WARN("ucp: dropped a fragment at {}+{} beyond its {}-byte message", hdr.offset, plen,
                          req->recv.info.length);
            return Status::ok;
        }
        recv_store(req, hdr.offset, payload, plen);
        req->recv.received += plen;
        if (req->recv.received >= req->recv.info.length) {
            w.frags.erase(it);
            recv_finish(w, req);
        }
        return Status::ok;
    }
    UnexpDesc* desc = target.desc;
    if (hdr.offset + plen > desc->length || hdr.offset + plen < hdr.offset) {
        LOOM_LOG_WARN("ucp: dropped a fragment at {}+{} beyond its {}-byte message", hdr.offset, plen, desc->length);
        return Status::ok;
    }
    std::memcpy(desc->data() + hdr.offset, payload, plen);
    desc->received += plen;
    if (desc->received >= desc->length) {
        desc->complete = true;
        w.frags.erase(it);
    }
    return Status::ok;
}

Status sync_ack_handler(void* arg, void* data, std::size_t length, unsigned) {
    auto& w = *static_cast<Worker*>(arg);
    if (length < sizeof(AckHdr)) return Status::ok;
    AckHdr ack;
    std::memcpy(&ack, data, sizeof(ack));
    Request* req = w.req_table.take(ack.sreq_id);
    if (req == nullptr) {
        LOOM_LOG_WARN("ucp: dropped an acknowledgement for unknown request {:#x}", ack.sreq_id);
        return Status::ok;
    }
    if (req->send.offset < req->send.dt.length) {
        req->flags |= kReqAcked;  // completes when its last fragment has left
        return Status::ok;
    }
    req->send.dt.finish();
    w.complete(req, Status::ok);
    return Status::ok;
}

Status rts_handler(void* arg, void* data, std::size_t length, unsigned) {
    auto& w = *static_cast<Worker*>(arg);
    RtsHdr rts;
    if (length < sizeof(rts)) {
        LOOM_LOG_WARN("ucp: dropped a rendezvous request of {} bytes (truncated)", length);
        return Status::ok;
    }
    std::memcpy(&rts, data, sizeof(rts));
    if (sizeof(rts) + rts.rkey_length != length) {
        LOOM_LOG_WARN("ucp: dropped a rendezvous request with a {}-byte key in {} bytes", rts.rkey_length, length);
        return Status::ok;
    }
    const auto* rkey = static_cast<const std::uint8_t*>(data) + sizeof(rts);
    if (TagRecvEntry* entry = tag_of(w).tm.match_expected(rts.tag)) {
        rndv_recv_start(w, recv_of(entry), rts, rkey, rts.rkey_length);
        return Status::ok;
    }
    UnexpDesc* desc = alloc_desc(w, length);
    if (desc == nullptr) {
        LOOM_LOG_ERROR("ucp: out of memory for a rendezvous request; dropped");
        return Status::ok;
    }
    desc->kind = UnexpDesc::rts;
    desc->length = rts.length;
    desc->sender_uuid = rts.sender_uuid;
    std::memcpy(desc->data(), data, length);
    tag_of(w).tm.push_unexpected(desc->entry, rts.tag);
    return Status::ok;
}

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

Status am_pipeline_progress(Request* req);

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

/** PUTs on a lane of their own, from that lane's pending queue; the FIN goes on the AM lane. */
Status rndv_put_pending(uct::PendingReq* pending) {
    auto* req = reinterpret_cast<Request*>(reinterpret_cast<char*>(pending) - offsetof(Request, pending));
    if (rndv_put_issue(req) == Status::no_resource) return Status::no_resource;
    if (req->progress == rndv_fin_progress) (void)send_request_start(req);
    return Status::ok;
}

/** Starts the PUTs of @p req, queueing it on its lane while that lacks resources. */
void rndv_put_start(Request* req) {
    Ep* ep = req->ep;
    if (req->lane == ep->am_lane) {
        // Behind the endpoint's queued sends, in the worker's queue (purged on failure).
        req->progress = rndv_put_progress;
        (void)send_request_start(req);
        return;
    }
    uct::Ep* lane_ep = ep->lanes[req->lane].ep;
    while (rndv_put_issue(req) == Status::no_resource) {
        req->pending.func = rndv_put_pending;
        Status s = uct::ep_pending_add(lane_ep, &req->pending, 0);
        if (s == Status::ok) return;
        if (s != Status::busy) {
            if (req->send.rndv_status == Status::ok) req->send.rndv_status = s;
            req->send.offset = req->send.dt.length;
            req->send.rndv_wait &= ~kSendWaitFlush;
            break;  // only the FIN is left
        }
    }
    req->send.rndv_wait |= kSendIssuing;  // after a refused queue, nothing may be in flight
    rndv_put_check(req);
    req->send.rndv_wait &= ~kSendIssuing;
    if (req->progress == rndv_fin_progress) (void)send_request_start(req);  // the PUTs completed in the pass
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

// --- rendezvous by PUT: the receiver ------------------------------------------------------

/** Completes receive @p req of a PUT scheme once it waits for nothing more. */
void rndv_recv_settle(Worker& w, Request* req) {
    if (req->recv.rndv_wait != 0) return;
    w.frags.erase(rndv_put_key(req));
    if (req->memh != uct::kMemHNull) (void)req->recv.md->mem_dereg(req->memh);
    req->recv.dt.finish();
    w.complete(req, req->recv.comp.status);
}

/** The FIN (or the failure of the sender's endpoint, @p status) arrived for receive @p req. */
void rndv_recv_fin(Worker& w, Request* req, Status status) {
    if (status != Status::ok && req->recv.comp.status == Status::ok) req->recv.comp.status = status;
    req->recv.rndv_wait &= ~kRecvWaitFin;
    rndv_recv_settle(w, req);
}

/** Split scheme: the GETs of the head are done (or failed): ATS to the sender. */
void rndv_split_get_done(uct::Completion* comp) {
    auto* req = reinterpret_cast<Request*>(reinterpret_cast<char*>(comp) - offsetof(Request, recv.comp));
    Worker& w = *req->worker;
    req->recv.rkey_component->rkey_release(req->recv.rkey);
    send_ack(w, req->recv.sender_uuid, kAmRndvAts, req->recv.sreq_id, comp->status);
    req->recv.rndv_wait &= ~kRecvWaitGet;
    rndv_recv_settle(w, req);
}

Status fin_handler(void* arg, void* data, std::size_t length, unsigned) {
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

// --- rendezvous receive ------------------------------------------------------------------

void rndv_get_done(uct::Completion* comp) {
    auto* req = reinterpret_cast<Request*>(reinterpret_cast<char*>(comp) - offsetof(Request, recv.comp));
    Worker& w = *req->worker;
    if (req->memh != uct::kMemHNull) (void)req->recv.md->mem_dereg(req->memh);
    req->recv.rkey_component->rkey_release(req->recv.rkey);
    send_ack(w, req->recv.sender_uuid, kAmRndvAts, req->recv.sreq_id, comp->status);
    req->recv.dt.finish();
    w.complete(req, comp->status);
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

Status rndv_get_pending(uct::PendingReq* pending) {
    auto* req = reinterpret_cast<Request*>(reinterpret_cast<char*>(pending) - offsetof(Request, pending));
    return rndv_get_issue(req);
}

/** Starts the GETs, queueing the rest on the lane when it lacks resources. */
void rndv_get_progress(Request* req) {
    while (rndv_get_issue(req) == Status::no_resource) {
        Worker& w = *req->worker;
        const Lane& lane = w.ep_by_uuid[req->recv.sender_uuid]->lanes[req->lane];
        req->pending.func = rndv_get_pending;
        Status s = uct::ep_pending_add(lane.ep, &req->pending, 0);
        if (s == Status::ok) return;
        if (s != Status::busy) {
            uct::completion_update(&req->recv.comp, s);
            return;
        }
    }
}


/**
 * From which byte the sender PUTs a rendezvous message of @p length over the lane of
 * iface @p wi; @p length when it does not (the receiver GETs everything).
 */
std::size_t rndv_put_from(const Worker& w, const WorkerIface& wi, std::size_t length) {
    if (!(wi.attr.cap_flags & uct::kCapPutZcopy) || length == 0) return length;
    switch (w.context.config().rndv_scheme) {
    case RndvScheme::put_zcopy: return 0;
    case RndvScheme::get_put: return rndv_split_point(length);
    case RndvScheme::auto_: return length >= rndv_split_min(wi) ? rndv_split_point(length) : length;
    default: return length;
    }
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
        rndv_get_progress(req);
    } else {
        rndv_recv_settle(w, req);  // only when the RTR could not go
    }
    return true;
}

}  // namespace

bool is_rndv_get_pending(const uct::PendingReq* pending) { return pending->func == rndv_get_pending; }

void rndv_recv_start(Worker& w, Request* req, const RtsHdr& rts, const std::uint8_t* rkey, std::size_t rkey_len) {
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
    std::uint8_t lane = kNoLane;
    if (w.context.config().rndv_scheme != RndvScheme::am && rts.address != 0 && req->recv.dt.contig()) {
        lane = ep->lane_of_iface(rts.iface_index);
    }
    if (lane != kNoLane) {
        const WorkerIface& wi = w.ifaces[ep->lanes[lane].iface];
        const std::size_t put_from = rndv_put_from(w, wi, rts.length);
        if (put_from < rts.length && rndv_put_recv_start(w, req, ep, lane, rts, rkey, rkey_len, put_from)) return;
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
            rndv_get_progress(req);
            return;
        }
        LOOM_LOG_DEBUG("ucp: rendezvous GET not possible ({}); using the AM pipeline", to_string(unpacked.status()));
    }
    // AM pipeline: ask for the data, which arrives as fragments of the RTS's msg_id.
    req->recv.comp.status = Status::ok;
    if (rts.length == 0) {
        send_ack(w, rts.sender_uuid, kAmRndvAts, rts.sreq_id, Status::ok);
        recv_finish(w, req);
        return;
    }
    w.frags[FragKey{rts.sender_uuid, rts.msg_id}] = FragTarget{req, nullptr};
    send_ack(w, rts.sender_uuid, kAmRndvRtr, rts.sreq_id, Status::ok);
}

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
            chunk = std::min<std::size_t>(length - req->send.offset, ep->max_bcopy - sizeof(hdr));
            hdr_len = sizeof(hdr);
            PackArg arg{req, &hdr, sizeof(hdr), chunk};
            n = uct::ep_am_bcopy(ep->am_ep, kAmEagerMiddle, pack_hdr_payload, &arg, 0);
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

Status am_pipeline_progress(Request* req) {
    // The RTR arrived: the data follows as middle fragments of the RTS's msg_id.
    req->send.msg_id |= kRndvMsgBit;
    return eager_multi_progress(req);
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
    const bool get = ep->rndv_lane != kNoLane && req->send.dt.contig() &&
                     w.context.config().rndv_scheme != RndvScheme::am;
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
        } else {
            rkey_len = 0;
        }
    }
    rts.rkey_length = static_cast<std::uint16_t>(rkey_len);
    return rkey_len;
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

}  // namespace

std::string rndv_scheme_describe(const ProtoInit& init, const ProtoCaps&) {
    return ", " + rndv_describe(init.worker, init.ep);
}

const Proto kTagEagerShort{"tag eager short",
                           "the tag as the transport's header, the payload inline (am_short)",
                           proto_op_bit(ProtoOp::tag), false, true, 0, eager_short_init,
                           eager_short_progress, nullptr};
const Proto kTagEagerBcopy{"tag eager bcopy", "one message: the tag (sync: and the acknowledgement id), then the payload",
                           proto_op_bit(ProtoOp::tag) | proto_op_bit(ProtoOp::tag_sync), true, false, 1,
                           eager_bcopy_init, eager_bcopy_progress, nullptr};
const Proto kTagEagerMulti{"tag eager multi", "a first fragment with the tag and length, then middle fragments",
                           proto_op_bit(ProtoOp::tag) | proto_op_bit(ProtoOp::tag_sync), true, false, 2,
                           eager_caps, eager_multi_progress, eager_fragments_describe};
const Proto kTagRndv{"tag rendezvous", "an RTS; the data moves once the receiver matched it (GET, PUT or AM pipeline)",
                     proto_op_bit(ProtoOp::tag) | proto_op_bit(ProtoOp::tag_sync), true, false, 3, rndv_proto_init,
                     rndv_rts_progress, rndv_scheme_describe};
LOOM_PROTO_REGISTER(kTagEagerShort);
LOOM_PROTO_REGISTER(kTagEagerBcopy);
LOOM_PROTO_REGISTER(kTagEagerMulti);
LOOM_PROTO_REGISTER(kTagRndv);

// --- public entry points -----------------------------------------------------------------

Status tag_register_handlers(Worker& w) {
    struct {
        uct::AmId id;
        uct::AmCallback cb;
    } const handlers[] = {
        {kAmEagerOnly, eager_only_handler<false>}, {kAmEagerSyncOnly, eager_only_handler<true>},
        {kAmEagerFirst, eager_first_handler},      {kAmEagerMiddle, eager_middle_handler},
        {kAmSyncAck, sync_ack_handler},            {kAmRndvRts, rts_handler},
        {kAmRndvAts, ats_handler},                 {kAmRndvRtr, rtr_handler},
        {kAmRndvPutRtr, put_rtr_handler},          {kAmRndvFin, fin_handler},
    };
    for (WorkerIface& wi : w.ifaces) {
        for (const auto& h : handlers) {
            if (Status s = wi.iface->set_am_handler(h.id, h.cb, &w, 0); s != Status::ok) return s;
        }
    }
    return Status::ok;
}

void tag_fail_peer_receives(Worker& w, std::uint64_t uuid, Status status) {
    for (auto it = w.frags.begin(); it != w.frags.end();) {
        if (it->first.uuid != uuid) {
            ++it;
            continue;
        }
        FragTarget target = it->second;
        it = w.frags.erase(it);
        if (target.recv != nullptr && (target.recv->recv.rndv_wait & kRecvWaitFin)) {
            // Waits for PUTs that will not come; completes once its own GETs (if any) ended.
            rndv_recv_fin(w, target.recv, status);
        } else if (target.recv != nullptr) {
            target.recv->recv.dt.finish();
            w.complete(target.recv, status);
        } else if (target.desc != nullptr) {
            // An unexpected message that will never be complete: nobody may receive it.
            if (target.desc->entry.queued()) {
                tag_of(w).tm.remove_unexpected(target.desc->entry);
                free_desc(w, target.desc);
            } else {
                target.desc->complete = true;  // held by a probe handle: received as far as it got
                target.desc->length = target.desc->received;
            }
        }
    }
}

Status tag_send_start(Request* req, Ep* ep, Tag tag, bool sync) {
    Worker& w = *ep->worker;
    req->ep = ep;
    req->send.tag = tag;
    req->send.offset = 0;
    req->memh = uct::kMemHNull;
    req->send.msg_id = w.next_msg_id++;
    req->send.rndv_wait = 0;
    if (sync) req->flags |= kReqSync;
    const ProtoRange* range =
        ep->protos->select(sync ? ProtoOp::tag_sync : ProtoOp::tag, req->send.dt.contig(), req->send.dt.length);
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

void tag_recv_start(Worker& w, Request* req, UnexpDesc* desc, Tag tag, Tag mask) {
    req->flags |= kReqRecv;
    new (&req->recv.entry) TagRecvEntry{};  // the matcher's entry starts its life here
    req->recv.received = 0;
    req->recv.info = {0, 0};
    req->recv.comp.status = Status::ok;
    req->recv.sender_uuid = 0;
    req->recv.rndv_wait = 0;
    if (desc != nullptr) {
        recv_take_desc(w, req, desc);
    } else {
        tag_of(w).tm.push_expected(recv_entry(req), tag, mask);
    }
}

UnexpDesc* tag_probe(Worker& w, Tag tag, Tag mask, bool remove, TagRecvInfo* info) {
    TagUnexpEntry* entry = tag_of(w).tm.probe(tag, mask, remove);
    if (entry == nullptr) return nullptr;
    UnexpDesc* desc = desc_of(entry);
    if (info != nullptr) *info = TagRecvInfo{entry->tag, desc->length};
    return desc;
}

Status tag_recv_immediate(Worker& w, UnexpDesc* desc, DtState& dt, TagRecvInfo& info) {
    info = TagRecvInfo{desc->entry.tag, desc->length};
    const std::size_t n = std::min(desc->length, dt.length);
    Status s = dt.unpack(0, desc->data(), n);
    if (desc->sync) send_ack(w, desc->sender_uuid, kAmSyncAck, desc->sreq_id, Status::ok);
    free_desc(w, desc);
    dt.finish();
    if (s != Status::ok) return s;
    return info.length > dt.length ? Status::message_truncated : Status::ok;
}

void rndv_send_release(Request* req) {
    request_release_memh(req);
    if (!(req->send.rndv_wait & kSendKeyHeld)) return;
    req->send.rndv_wait = 0;
    const Ep* ep = req->ep;
    req->worker->ifaces[ep->lanes[req->lane].iface].rsc->component->rkey_release(req->send.rndv_rkey);
    req->send.rndv_rkey = {};
}

namespace {

/** What purging a rendezvous lane's queue hands to rndv_purge_cb. */
struct RndvPurge {
    std::vector<uct::PendingReq*> gets;  ///< receives' GETs: run once more, they fail their receive
};

void rndv_purge_cb(uct::PendingReq* pending, void* arg) {
    // Sends' PUTs are in Ep::outstanding, which the caller fails next: just out of the queue.
    if (pending->func == rndv_get_pending) static_cast<RndvPurge*>(arg)->gets.push_back(pending);
}

}  // namespace

void rndv_ep_purge(Worker& w, Ep* ep, Status status) {
    if (ep->rndv_lane != kNoLane && ep->rndv_lane != ep->am_lane && ep->lanes[ep->rndv_lane].ep != nullptr) {
        RndvPurge purge;
        uct::ep_pending_purge(ep->lanes[ep->rndv_lane].ep, rndv_purge_cb, &purge);
        for (uct::PendingReq* pending : purge.gets) (void)pending->func(pending);  // the endpoint is marked failed
    }
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

std::string rndv_describe(const Worker& w, const Ep& ep) {
    // The lane follows in the printout (ProtoTable::describe).
    const RndvScheme scheme = w.context.config().rndv_scheme;
    if (ep.rndv_lane == kNoLane || scheme == RndvScheme::am) return "AM pipeline";
    const WorkerIface& wi = w.ifaces[ep.lanes[ep.rndv_lane].iface];
    const bool puts = wi.attr.cap_flags & uct::kCapPutZcopy;
    if (puts && scheme == RndvScheme::put_zcopy) return "RDMA PUT";
    if (puts && scheme == RndvScheme::get_put) return "RDMA GET of the head + PUT of the tail";
    if (scheme == RndvScheme::auto_) {
        if (const std::size_t from = rndv_split_min(wi); from != SIZE_MAX) {
            return fmt::format("RDMA GET; from {} B: RDMA GET of the head + PUT of the tail", from);
        }
    }
    return "RDMA GET";
}

}  // namespace loom::ucp
