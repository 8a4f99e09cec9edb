/**
 * Tagged messages, the receiving side: tag's AM handlers (eager messages in one piece or
 * in fragments, the RTS, and the acknowledgement of a synchronous send, which arrives at
 * its sender), the unexpected queue's descriptors, the start of a receive, probe and
 * immediate receive, and the failure of a peer's receives. A matched RTS goes to
 * src/ucp/rndv (rndv_recv_start). docs/protocols.md describes the wire.
 */
#include "ucp/tag/tag_proto.h"

#include "ucp/core/ucp_log.h"
#include "ucp/core/wire.h"
#include "ucp/rndv/rndv.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace loom::ucp {

namespace {

Request* recv_of(TagRecvEntry* entry) {
    return reinterpret_cast<Request*>(reinterpret_cast<char*>(entry) - offsetof(Request, recv.entry));
}
UnexpDesc* desc_of(TagUnexpEntry* entry) { return reinterpret_cast<UnexpDesc*>(entry); }

void free_desc(Worker& w, UnexpDesc* desc) {
    if (desc->kind == UnexpDesc::eager) tag_flow_released(w, desc->length);
    if (desc->pooled) {
        tag_of(w).desc_pool.put(desc);
    } else {
        std::free(desc);
    }
}

/** A descriptor with room for @p data_length bytes after it; nullptr without memory. */
UnexpDesc* alloc_desc(Worker& w, std::size_t data_length) {
    // A peer's absurd total length must not wrap the size below (found by fuzzing).
    if (LOOM_UNLIKELY(data_length > SIZE_MAX / 2 - sizeof(UnexpDesc))) return nullptr;
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
    desc->in_order = true;
    desc->sync = false;
    desc->complete = true;
    desc->sender_uuid = 0;
    desc->sreq_id = 0;
    desc->msg_id = 0;
    desc->received = 0;
    desc->waiting = nullptr;
    return desc;
}

}  // namespace

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
    tag_flow_queued(w, total);
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
    // Fragments that overtook others (eager rails) left gaps: the whole buffer goes, and the
    // fragments still to come write over the gaps.
    recv_store(req, 0, desc->data(), desc->in_order ? desc->received : desc->length);
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

/** Whether this worker's endpoint to @p uuid has failed. */
bool peer_failed(const Worker& w, std::uint64_t uuid) {
    auto it = w.ep_by_uuid.find(uuid);
    return it != w.ep_by_uuid.end() && (it->second->flags & kEpFailed);
}

/** Middle fragment @p hdr of the message at @p it of w.frags: into its receive or descriptor. */
void frag_deliver(Worker& w, decltype(Worker::frags)::iterator it, const EagerMiddleHdr& hdr,
                  const std::uint8_t* payload, std::size_t plen) {
    FragTarget target = it->second;
    if (target.recv != nullptr) {
        Request* req = target.recv;
        if (LOOM_UNLIKELY(req->recv.rndv_wait != 0)) {  // only its sender's PUTs fill it
            LOOM_LOG_WARN("ucp: dropped a fragment for a receive that waits for PUTs from {:016x}",
                          hdr.sender_uuid);
            return;
        }
        if (hdr.offset + plen > req->recv.info.length || hdr.offset + plen < hdr.offset) {
            LOOM_LOG_WARN("ucp: dropped a fragment at {}+{} beyond its {}-byte message", hdr.offset, plen,
                          req->recv.info.length);
            return;
        }
        recv_store(req, hdr.offset, payload, plen);
        req->recv.received += plen;
        if (req->recv.received >= req->recv.info.length) {
            w.frags.erase(it);
            recv_finish(w, req);
        }
        return;
    }
    UnexpDesc* desc = target.desc;
    if (hdr.offset + plen > desc->length || hdr.offset + plen < hdr.offset) {
        LOOM_LOG_WARN("ucp: dropped a fragment at {}+{} beyond its {}-byte message", hdr.offset, plen,
                      desc->length);
        return;
    }
    std::memcpy(desc->data() + hdr.offset, payload, plen);
    if (hdr.offset != desc->received) desc->in_order = false;
    desc->received += plen;
    if (desc->received >= desc->length) {
        desc->complete = true;
        w.frags.erase(it);
    }
}

/**
 * Keeps middle fragment @p hdr until its message's first fragment comes (over another lane:
 * LOOM_MAX_EAGER_RAILS). A fragment of a failed peer, or past kMaxEarlyFragBytes, is
 * dropped: then its sender's endpoint fails, so that the receive it was part of ends.
 */
void frag_keep_early(Worker& w, const EagerMiddleHdr& hdr, const std::uint8_t* payload, std::size_t plen) {
    TagWorker& t = tag_of(w);
    if (peer_failed(w, hdr.sender_uuid)) {
        LOOM_LOG_WARN("ucp: dropped a fragment of message {} from {:016x}: its endpoint failed", hdr.msg_id,
                      hdr.sender_uuid);
        return;
    }
    if (t.early_frag_bytes + plen > TagWorker::kMaxEarlyFragBytes) {
        LOOM_LOG_ERROR(
            "ucp: dropped a fragment of unknown message {} from {:016x}: {} bytes of fragments already "
            "wait for their first",
            hdr.msg_id, hdr.sender_uuid, t.early_frag_bytes);
        if (auto ep = w.ep_by_uuid.find(hdr.sender_uuid); ep != w.ep_by_uuid.end()) {
            w.ep_fail(ep->second, Status::no_memory);
        }
        return;
    }
    try {
        t.early_frags[FragKey{hdr.sender_uuid, hdr.msg_id}].push_back(
            TagWorker::EarlyFrag{hdr.offset, std::vector<std::uint8_t>(payload, payload + plen)});
    } catch (const std::bad_alloc&) {
        LOOM_LOG_ERROR("ucp: out of memory for a fragment of message {} from {:016x}; dropped", hdr.msg_id,
                       hdr.sender_uuid);
        return;
    }
    t.early_frag_bytes += plen;
}

/** The first fragment of message @p key opened it in w.frags: the fragments that came before it go in. */
void frag_take_early(Worker& w, const FragKey& key) {
    TagWorker& t = tag_of(w);
    auto early = t.early_frags.find(key);
    if (early == t.early_frags.end()) return;
    std::vector<TagWorker::EarlyFrag> frags = std::move(early->second);
    t.early_frags.erase(early);
    for (const TagWorker::EarlyFrag& f : frags) {
        t.early_frag_bytes -= f.bytes.size();
        auto it = w.frags.find(key);
        if (it == w.frags.end()) continue;  // complete (or a forged fragment too many): the rest is dropped
        frag_deliver(w, it, EagerMiddleHdr{key.uuid, key.msg_id, f.offset}, f.bytes.data(), f.bytes.size());
    }
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
    if (LOOM_UNLIKELY(w.frags.count(key) != 0)) {
        // A sender numbers its messages once: this one is forged or duplicated. Taking it
        // would orphan the message being assembled under that number (found by fuzzing).
        LOOM_LOG_WARN("ucp: dropped a first fragment of message {} from {:016x}, already open", hdr.msg_id,
                      hdr.sender_uuid);
        return Status::ok;
    }
    if (LOOM_UNLIKELY(plen < hdr.total_length) && peer_failed(w, hdr.sender_uuid)) {
        // Its rest will not come: the endpoint failed (its receives in assembly failed with
        // it, tag_fail_peer_receives), and one lane may still deliver what the peer sent
        // before another lane reported its end. Taking it would hold a receive for ever.
        LOOM_LOG_WARN("ucp: dropped the first fragment of message {} from {:016x}: its endpoint failed", hdr.msg_id,
                      hdr.sender_uuid);
        return Status::ok;
    }
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
            if (LOOM_UNLIKELY(!tag_of(w).early_frags.empty())) frag_take_early(w, key);
        }
        return Status::ok;
    }
    UnexpDesc* desc = queue_unexpected_eager(w, hdr.tag, hdr.total_length, payload, plen, hdr.sender_uuid,
                                             hdr.sreq_id, hdr.msg_id);
    if (desc != nullptr && !desc->complete) {
        w.frags[key] = FragTarget{nullptr, desc};
        if (LOOM_UNLIKELY(!tag_of(w).early_frags.empty())) frag_take_early(w, key);
    }
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
        frag_keep_early(w, hdr, payload, plen);
        return Status::ok;
    }
    frag_deliver(w, it, hdr, payload, plen);
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
    desc->sreq_id = rts.sreq_id;  // names it to a cancel
    std::memcpy(desc->data(), data, length);
    tag_of(w).tm.push_unexpected(desc->entry, rts.tag);
    return Status::ok;
}

/**
 * The sender withdraws send sreq_id (CancelHdr). Only what waits in the unexpected queue
 * can go: an RTS, or a synchronous eager message with every fragment in (the cancel
 * travels behind them on the same lane, so that is always the case). Anything else
 * (already matched, unknown) is too late. The answer goes back either way.
 */
Status cancel_handler(void* arg, void* data, std::size_t length, unsigned) {
    auto& w = *static_cast<Worker*>(arg);
    if (length < sizeof(CancelHdr)) {
        LOOM_LOG_WARN("ucp: dropped a send cancel of {} bytes (truncated)", length);
        return Status::ok;
    }
    CancelHdr hdr;
    std::memcpy(&hdr, data, sizeof(hdr));
    TagMatcher& tm = tag_of(w).tm;
    TagUnexpEntry* entry = tm.find_unexpected(hdr.tag, [&](TagUnexpEntry& m) {
        const UnexpDesc* d = desc_of(&m);
        return d->sender_uuid == hdr.sender_uuid && d->sreq_id == hdr.sreq_id &&
               (d->kind == UnexpDesc::rts || (d->sync && d->complete));
    });
    Status answer = Status::no_element;
    if (entry != nullptr) {
        tm.remove_unexpected(*entry);
        free_desc(w, desc_of(entry));
        answer = Status::ok;
    }
    LOOM_LOG_DEBUG("ucp: send {:#x} of worker {:016x}: {}", hdr.sreq_id, hdr.sender_uuid,
                   answer == Status::ok ? "withdrawn" : "not withdrawn (matched or unknown)");
    send_ack(w, hdr.sender_uuid, kAmTagCancelAck, hdr.sreq_id, answer);
    return Status::ok;
}

/** The receiver's answer to our cancel: ok completes the send with canceled. */
Status cancel_ack_handler(void* arg, void* data, std::size_t length, unsigned) {
    auto& w = *static_cast<Worker*>(arg);
    if (length < sizeof(AckHdr)) {
        LOOM_LOG_WARN("ucp: dropped a cancel answer of {} bytes (truncated)", length);
        return Status::ok;
    }
    AckHdr ack;
    std::memcpy(&ack, data, sizeof(ack));
    if (static_cast<Status>(ack.status) != Status::ok) return Status::ok;  // too late: it completes normally
    Request* req = w.req_table.find(ack.sreq_id);
    if (req == nullptr || req->kind != kReqKindTagSend || (req->flags & kReqRecv)) {
        LOOM_LOG_WARN("ucp: dropped a cancel answer for unknown send {:#x}", ack.sreq_id);
        return Status::ok;
    }
    req->send.dt.finish();
    w.complete(req, req->expired ? Status::timed_out : Status::canceled);
    return Status::ok;
}

}  // namespace

// --- public entry points -----------------------------------------------------------------

Status tag_register_handlers(Worker& w) {
    struct {
        uct::AmId id;
        uct::AmCallback cb;
    } const handlers[] = {
        {kAmEagerOnly, eager_only_handler<false>},
        {kAmEagerSyncOnly, eager_only_handler<true>},
        {kAmEagerFirst, eager_first_handler},
        {kAmEagerMiddle, eager_middle_handler},
        {kAmSyncAck, sync_ack_handler},
        {kAmRndvRts, rts_handler},
        {kAmTagCancel, cancel_handler},
        {kAmTagCancelAck, cancel_ack_handler},
        {kAmTagFlow, tag_flow_handler},
    };
    for (WorkerIface& wi : w.ifaces) {
        for (const auto& h : handlers) {
            if (Status s = wi.iface->set_am_handler(h.id, h.cb, &w, 0); s != Status::ok) return s;
        }
    }
    return Status::ok;
}

bool tag_expire(Worker& w, Request& req) {
    if (req.kind == kReqKindTagSend && !(req.flags & kReqRecv)) {
        tag_send_cancel(&req);
        return true;
    }
    // A tagged receive in the matcher (a completed one waiting for its callback is linked
    // in the deferred list; a matched one is not in the matcher).
    if (!(req.flags & kReqRecv) || (req.flags & kReqRecvLength) || req.ep_link.linked()) return false;
    if (!tag_of(w).tm.cancel(recv_entry(&req))) return false;
    req.recv.dt.finish();
    w.complete(&req, Status::timed_out);
    return true;
}

void tag_fail_peer_receives(Worker& w, std::uint64_t uuid, Status status) {
    TagWorker& t = tag_of(w);
    std::erase_if(t.early_frags, [&](const auto& e) {
        if (e.first.uuid != uuid) return false;
        for (const TagWorker::EarlyFrag& f : e.second) t.early_frag_bytes -= f.bytes.size();
        return true;
    });
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

}  // namespace loom::ucp
