/**
 * Streams: the send protocol (kAmStreamData messages: the sender's uuid and bytes),
 * the receive side (posted receives filled in order, the rest queued per endpoint),
 * and the endpoint life cycle (failure, close). See stream_proto.h.
 */
#include "ucp/stream/stream_proto.h"

#include "ucp/core/ucp_log.h"
#include "ucp/core/wire.h"
#include "ucp/rndv/rndv_thresh.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace loom::ucp {

namespace {

constexpr std::size_t kHdrLen = sizeof(std::uint64_t);  // the sender's worker uuid

// --- receive side ------------------------------------------------------------------------

/** Receives take whole elements of their contiguous datatype (iov: bytes). */
std::size_t elem_size(const DtState& dt) { return dt.contig() ? std::max<std::size_t>(dt.dt >> 3, 1) : 1; }

/** How many of @p avail bytes a receive that holds @p received bytes takes now. */
std::size_t take(const DtState& dt, std::size_t received, bool waitall, std::size_t avail) {
    std::size_t n = std::min(dt.length - received, avail);
    if (!waitall) {
        // Without WAITALL the receive completes as soon as it holds whole elements: it
        // takes as many whole ones as it can, leaving a partial one for later.
        const std::size_t e = elem_size(dt);
        const std::size_t total = received + n;
        if (e > 1 && total >= e) n = total - total % e - received;
    }
    return n;
}

bool recv_done(const DtState& dt, std::size_t received, bool waitall) {
    return received == dt.length || (!waitall && received >= elem_size(dt));
}

StreamEp* find_ep(StreamWorker& sw, Ep* ep) {
    auto it = sw.eps.find(ep);
    return it == sw.eps.end() ? nullptr : it->second.get();
}

/** The stream state of @p ep, created on first use; nullptr (logged) without memory. */
StreamEp* get_ep(StreamWorker& sw, Ep* ep) {
    if (StreamEp* s = find_ep(sw, ep)) return s;
    try {
        auto s = std::make_unique<StreamEp>();
        s->ep = ep;
        StreamEp* raw = s.get();
        sw.eps.emplace(ep, std::move(s));
        return raw;
    } catch (const std::bad_alloc&) {
        LOOM_LOG_ERROR("ucp: out of memory for the stream state of the endpoint to {:016x}", ep->remote_uuid);
        return nullptr;
    }
}

void free_desc(StreamWorker& sw, StreamDesc* desc) {
    if (desc->pooled) {
        sw.pool.put(desc);
    } else {
        std::free(desc);
    }
}

/**
 * Flow control: tells the sender of @p s to hold its stream sends (its window here is
 * full) or to go on (the application read all but half of it). The sender parks its sends
 * meanwhile (stream_send_start), in order; they complete once sent.
 */
void tell_window(StreamWorker& sw, StreamEp& s, bool hold) {
    Worker& w = sw.worker;
    // A stream to our own worker is not held: its sender is its reader, and the answer
    // would run inside the very receive that read (self delivers in the call).
    if (s.ep->remote_uuid == w.uuid) return;
    s.holding = hold;
    if (s.ep->flags & (kEpFailed | kEpClosing)) return;
    FlowHdr hdr{};
    hdr.receiver_uuid = w.uuid;
    hdr.hold = hold ? 1 : 0;
    LOOM_LOG_DEBUG("ucp: stream from {:016x}: {} bytes unread (LOOM_STREAM_WINDOW {}): {}", s.ep->remote_uuid,
                   s.queued, sw.window, hold ? "the sender holds" : "the sender goes on");
    if (Status st = w.send_ctrl(s.ep, kAmStreamFlow, &hdr, sizeof(hdr)); st != Status::ok) {
        LOOM_LOG_DEBUG("ucp: cannot tell {:016x} about its stream window: {}", s.ep->remote_uuid,
                       to_string(st));
    }
}

/** After the application took bytes of @p s: room again for a held sender? */
void window_released(StreamWorker& sw, StreamEp& s) {
    if (LOOM_UNLIKELY(s.holding) && s.queued <= sw.window / 2) tell_window(sw, s, false);
}

void unready(StreamWorker& sw, StreamEp& s) {
    if (s.ready_link.linked()) decltype(sw.ready)::remove(s);
}

/** Moves queued bytes into @p dt (holding @p received) until it is done or the queue is empty. */
Status drain(StreamWorker& sw, StreamEp& s, DtState& dt, std::size_t& received, bool waitall) {
    Status status = Status::ok;
    while (!s.data.empty() && !recv_done(dt, received, waitall)) {
        StreamDesc& d = s.data.front();
        const std::size_t n = take(dt, received, waitall, d.length - d.offset);
        if (n == 0) break;
        if (Status u = dt.unpack(received, d.data() + d.offset, n); u != Status::ok && status == Status::ok) {
            status = u;
        }
        received += n;
        d.offset += static_cast<std::uint32_t>(n);
        s.queued -= n;
        if (d.offset == d.length) {
            decltype(s.data)::remove(d);
            free_desc(sw, &d);
        }
    }
    if (s.data.empty()) unready(sw, s);
    window_released(sw, s);
    return status;
}

void finish_recv(Worker& w, Request* req, Status status) {
    req->recv.info.length = req->recv.received;
    req->recv.dt.finish();
    w.complete(req, status);
}

/** Queues @p n bytes nobody asked for yet; the endpoint becomes ready for worker_poll. */
void queue_bytes(StreamWorker& sw, StreamEp& s, const std::uint8_t* p, std::size_t n) {
    const bool pooled = n <= StreamWorker::kSmallData;
    void* mem = pooled ? sw.pool.get() : std::malloc(sizeof(StreamDesc) + n);
    if (mem == nullptr) {
        // The stream has a hole now: say so loudly rather than deliver wrong bytes quietly.
        LOOM_LOG_ERROR("ucp: out of memory for {} stream bytes from {:016x}; they are lost", n, s.ep->remote_uuid);
        return;
    }
    auto* d = static_cast<StreamDesc*>(mem);
    d->link = {};
    d->length = static_cast<std::uint32_t>(n);
    d->offset = 0;
    d->pooled = pooled;
    std::memcpy(d->data(), p, n);
    s.data.push_back(*d);
    s.queued += n;
    if (!s.ready_link.linked()) sw.ready.push_back(s);
    if (LOOM_UNLIKELY(s.queued > sw.window) && !s.holding) tell_window(sw, s, true);
}

/** Gives @p n arriving bytes to the posted receives in order, queueing what is left. */
void deliver(Worker& w, StreamWorker& sw, StreamEp& s, const std::uint8_t* p, std::size_t n) {
    Ep* const ep = s.ep;
    while (n != 0 && !s.recvs.empty()) {
        Request& req = s.recvs.front();
        const bool waitall = req.flags & kReqWaitAll;
        const std::size_t k = take(req.recv.dt, req.recv.received, waitall, n);
        if (Status u = req.recv.dt.unpack(req.recv.received, p, k);
            u != Status::ok && req.recv.comp.status == Status::ok) {
            req.recv.comp.status = u;
        }
        req.recv.received += k;
        p += k;
        n -= k;
        if (!recv_done(req.recv.dt, req.recv.received, waitall)) break;  // took everything
        decltype(s.recvs)::remove(req);
        finish_recv(w, &req, req.recv.comp.status);
        // The callback may have closed the endpoint: then its stream is gone.
        if (find_ep(sw, ep) != &s) return;
    }
    if (n != 0) queue_bytes(sw, s, p, n);
}

/** kAmStreamData: the sender's uuid, then stream bytes. */
Status stream_data_handler(void* arg, void* data, std::size_t length, unsigned) {
    auto& w = *static_cast<Worker*>(arg);
    std::uint64_t uuid;
    if (LOOM_UNLIKELY(length < kHdrLen)) {
        LOOM_LOG_WARN("ucp: dropped a stream message of {} bytes (shorter than its header)", length);
        return Status::ok;
    }
    std::memcpy(&uuid, data, kHdrLen);
    StreamWorker& sw = *stream_state(w);
    auto it = w.ep_by_uuid.find(uuid);
    if (LOOM_UNLIKELY(it == w.ep_by_uuid.end())) {
        // Once per sender: a peer streaming to a closed endpoint would flood the log.
        if (sw.warned_uuids.insert(uuid).second) {
            LOOM_LOG_WARN("ucp: dropped {} stream bytes from worker {:016x}, which has no endpoint here (further "
                          "ones are dropped silently)",
                          length - kHdrLen, uuid);
        }
        return Status::ok;
    }
    if (length == kHdrLen) return Status::ok;
    StreamEp* s = get_ep(sw, it->second);
    if (s == nullptr) return Status::ok;
    deliver(w, sw, *s, static_cast<const std::uint8_t*>(data) + kHdrLen, length - kHdrLen);
    return Status::ok;
}

/** kAmStreamFlow (at the sender): hold our stream sends to that worker, or send what waited. */
Status stream_flow_handler(void* arg, void* data, std::size_t length, unsigned) {
    auto& w = *static_cast<Worker*>(arg);
    if (length < sizeof(FlowHdr)) {
        LOOM_LOG_WARN("ucp: dropped a stream flow control message of {} bytes (truncated)", length);
        return Status::ok;
    }
    FlowHdr hdr;
    std::memcpy(&hdr, data, sizeof(hdr));
    StreamWorker& sw = *stream_state(w);
    unsigned eps = 0;
    for (Ep& ep : w.eps) {
        if (ep.remote_uuid != hdr.receiver_uuid || (ep.flags & kEpFailed)) continue;
        ++eps;
        if (hdr.hold != 0) {
            ep.flags |= kEpStreamHeld;
            ep.stream_short_limit = 0;  // every send takes the slow path (stream_send_start)
            continue;
        }
        ep.flags &= static_cast<std::uint8_t>(~kEpStreamHeld);
        ep.stream_short_limit = fast_path_limit(ep, ProtoOp::stream);
        StreamEp* s = find_ep(sw, &ep);
        if (s == nullptr) continue;
        std::deque<Request*> held;
        held.swap(s->held);
        for (Request* req : held) (void)send_request_start(req);  // in order, behind what the lane queued
    }
    if (eps == 0) {
        LOOM_LOG_WARN("ucp: dropped a stream flow control message from unknown worker {:016x}",
                      hdr.receiver_uuid);
    }
    return Status::ok;
}

/** Completes every receive waiting on @p s with @p status (callbacks may post more: they get it too). */
void fail_recvs(Worker& w, StreamEp& s, Status status) {
    while (!s.recvs.empty()) {
        Request& req = s.recvs.front();
        decltype(s.recvs)::remove(req);
        finish_recv(w, &req, status);
    }
}

// --- send side ---------------------------------------------------------------------------

struct PackArg {
    std::uint64_t uuid;
    DtState* dt;
    std::size_t offset;
    std::size_t length;
};

std::size_t pack_fragment(void* dest, void* a) {
    auto* arg = static_cast<PackArg*>(a);
    std::memcpy(dest, &arg->uuid, kHdrLen);
    const std::size_t n =
        arg->length != 0 ? arg->dt->pack(arg->offset, static_cast<std::uint8_t*>(dest) + kHdrLen, arg->length) : 0;
    return kHdrLen + n;
}

/** Sends send.offset .. end in fragments of the AM lane's bcopy size, then completes. */
Status stream_progress(Request* req) {
    Ep* ep = req->ep;
    Worker& w = *req->worker;
    const std::size_t room = ep->max_bcopy - kHdrLen;
    const std::size_t length = req->send.dt.length;
    while (req->send.offset < length) {
        const std::size_t chunk = std::min(length - req->send.offset, room);
        PackArg arg{w.uuid, &req->send.dt, req->send.offset, chunk};
        ssize_t n = uct::ep_am_bcopy(ep->am_ep, kAmStreamData, pack_fragment, &arg, 0);
        if (n == static_cast<ssize_t>(Status::no_resource)) return Status::no_resource;
        if (n < 0) {
            req->send.dt.finish();
            w.complete(req, static_cast<Status>(n));
            return Status::ok;
        }
        // A generic datatype may pack less than asked: go on from where its data ended.
        const std::size_t packed = static_cast<std::size_t>(n) - kHdrLen;
        if (LOOM_UNLIKELY(packed == 0)) {
            LOOM_LOG_ERROR("ucp: the datatype packed nothing at offset {} of {} bytes", req->send.offset, length);
            req->send.dt.finish();
            w.complete(req, Status::invalid_param);
            return Status::ok;
        }
        req->send.offset += packed;
    }
    req->send.dt.finish();
    w.complete(req, Status::ok);
    return Status::ok;
}

/** A request's data as one am_short, as the C API's fast path sends it (nothing for 0 bytes). */
Status stream_short_progress(Request* req) {
    Worker& w = *req->worker;
    const std::size_t length = req->send.dt.length;
    Status s = length == 0 ? Status::ok
                           : uct::ep_am_short(req->ep->am_ep, kAmStreamData, w.uuid, req->send.dt.buffer,
                                              static_cast<unsigned>(length));
    if (s == Status::no_resource) return s;
    req->send.dt.finish();
    w.complete(req, s);
    return Status::ok;
}

// --- the stream protocols of the endpoint's table (src/ucp/proto) ---------------------------

const char* stream_bcopy_init(const ProtoInit& init, ProtoCaps& caps) {
    // Fragments of any size (eager_caps leaves streams every size); the short's cost, so
    // the preference decides.
    if (init.lane_iface(init.ep.am_lane).attr.am.max_bcopy <= kHdrLen) return "the AM lane's bcopy cannot hold data";
    return eager_caps(init, caps);
}

}  // namespace

const Proto kStreamShort{"stream short", "the sender's id as the transport's header, the bytes inline (am_short)",
                         proto_op_bit(ProtoOp::stream), false, true, 0, eager_short_caps, stream_short_progress,
                         nullptr};
const Proto kStreamBcopy{"stream bcopy", "fragments: the sender's id, then the bytes", proto_op_bit(ProtoOp::stream),
                         true, false, 1, stream_bcopy_init, stream_progress, eager_fragments_describe};
LOOM_PROTO_REGISTER(kStreamShort);
LOOM_PROTO_REGISTER(kStreamBcopy);

// --- entry points ------------------------------------------------------------------------

namespace {

/** Creates the worker's stream state and registers the stream AM handler on every iface. */
Status stream_family_init(Worker& w) {
    auto* sw = new (std::nothrow) StreamWorker(w);
    if (sw == nullptr) return Status::no_memory;
    w.family_state[kStreamSlot] = sw;
    sw->window = w.context.config().stream_window;
    ucs::MemPoolParams mp;
    mp.name = "ucp_stream_data";
    mp.elem_size = sizeof(StreamDesc) + StreamWorker::kSmallData;
    mp.alignment = 64;
    mp.elems_per_chunk = 64;
    if (Status s = sw->pool.init(std::move(mp)); s != Status::ok) return s;
    for (WorkerIface& wi : w.ifaces) {
        if (Status s = wi.iface->set_am_handler(kAmStreamData, stream_data_handler, &w, 0); s != Status::ok) return s;
        if (Status s = wi.iface->set_am_handler(kAmStreamFlow, stream_flow_handler, &w, 0); s != Status::ok)
            return s;
    }
    return Status::ok;
}

/** Releases the stream state; before the ifaces go. */
void stream_family_cleanup(Worker& w) {
    StreamWorker* sw = stream_state(w);
    if (sw == nullptr) return;
    for (auto& [ep, s] : sw->eps) {
        fail_recvs(w, *s, Status::canceled);
        while (StreamDesc* d = s->data.pop_front()) free_desc(*sw, d);
    }
    sw->ready.clear();
    sw->eps.clear();
    for (auto& [data, desc] : sw->handed_out) free_desc(*sw, desc);
    sw->handed_out.clear();
    w.family_state[kStreamSlot] = nullptr;
    delete sw;
}

/** @p ep failed: its waiting stream receives complete with @p status (data already queued stays). */
void stream_ep_failed(Worker& w, Ep* ep, Status status) {
    if (stream_state(w) == nullptr) return;
    if (StreamEp* s = find_ep(*stream_state(w), ep)) {
        s->held.clear();  // they were in the endpoint's outstanding list: failed already
        fail_recvs(w, *s, status);
    }
}

/** @p ep is closed or destroyed: its stream receives complete with @p status, its queued data goes. */
void stream_ep_closed(Worker& w, Ep* ep, Status status) {
    StreamWorker* sw = stream_state(w);
    if (sw == nullptr) return;
    StreamEp* s = find_ep(*sw, ep);
    if (s == nullptr) return;
    s->held.clear();  // completed with the endpoint's outstanding requests
    fail_recvs(w, *s, status);
    while (StreamDesc* d = s->data.pop_front()) free_desc(*sw, d);
    unready(*sw, *s);
    sw->eps.erase(ep);
}

/**
 * Past its deadline (ProtoFamily::expire): a stream receive leaves its endpoint's queue and
 * completes with timed_out and the bytes it holds (a receive partly filled keeps them: the
 * stream goes on with the next byte, nothing is lost or repeated); a send held back by the
 * receiver's window, none of whose bytes left, is withdrawn (the receiver never sees them).
 */
bool stream_expire(Worker& w, Request& req) {
    const bool recv = (req.flags & (kReqRecv | kReqRecvLength)) == (kReqRecv | kReqRecvLength);
    if ((req.flags & kReqRecv) && !recv) return false;
    StreamWorker* sw = stream_state(w);
    if (sw == nullptr) return false;
    // req.ep is set by stream_recv_start and every send's start; another family's receive
    // may hold anything there, so it is looked up, never followed.
    StreamEp* s = find_ep(*sw, req.ep);
    if (s == nullptr) return false;
    if (!recv) {
        auto held = std::find(s->held.begin(), s->held.end(), &req);
        if (held == s->held.end()) return false;
        s->held.erase(held);
        req.send.dt.finish();
        w.complete(&req, Status::timed_out);
        return true;
    }
    for (Request& r : s->recvs) {
        if (&r != &req) continue;
        decltype(s->recvs)::remove(req);
        finish_recv(w, &req, Status::timed_out);
        return true;
    }
    return false;
}

const ProtoFamily kStreamFamily{.name = "stream",
                                .slot = kStreamSlot,
                                .init = stream_family_init,
                                .cleanup = stream_family_cleanup,
                                .ep_failed = stream_ep_failed,
                                .ep_closed = stream_ep_closed,
                                .expire = stream_expire};
LOOM_FAMILY_REGISTER(kStreamFamily);

}  // namespace

Status stream_send_try_now(Ep* ep, DtState& dt) {
    // Short (whose fast path did not apply) or bcopy in one message: done in the call.
    if (ep->num_pending != 0 || kHdrLen + dt.length > ep->max_bcopy || (ep->flags & kEpStreamHeld)) {
        return Status::no_resource;
    }
    PackArg arg{ep->worker->uuid, &dt, 0, dt.length};
    ssize_t n = uct::ep_am_bcopy(ep->am_ep, kAmStreamData, pack_fragment, &arg, 0);
    return n >= 0 ? Status::ok : static_cast<Status>(n);
}

Status stream_send_start(Request* req, Ep* ep) {
    req->ep = ep;
    req->send.offset = 0;
    req->memh = uct::kMemHNull;
    const ProtoRange* range = ep->protos->select(ProtoOp::stream, req->send.dt.contig(), req->send.dt.length);
    req->progress = range != nullptr ? range->progress : stream_progress;  // bcopy serves every size
    req->flags |= kReqInEpList;
    ep->outstanding.push_back(*req);
    if (LOOM_UNLIKELY(ep->flags & kEpStreamHeld)) {
        // The receiver's window is full: wait, in order, for its go (stream_flow_handler).
        if (StreamEp* s = get_ep(*stream_state(*ep->worker), ep)) {
            try {
                s->held.push_back(req);
                return Status::ok;
            } catch (const std::bad_alloc&) {
                // send it anyway: the window is a bound on memory, not on correctness
            }
        }
    }
    return send_request_start(req);
}

bool stream_recv_now(Worker& w, Ep* ep, DtState& dt, bool waitall, std::size_t& length) {
    if (dt.length == 0) {
        length = 0;
        return true;
    }
    StreamWorker& sw = *stream_state(w);
    StreamEp* s = find_ep(sw, ep);
    if (s == nullptr || !s->recvs.empty()) return false;
    const std::size_t need = waitall ? dt.length : std::min(elem_size(dt), dt.length);
    if (s->queued < need) return false;
    std::size_t received = 0;
    (void)drain(sw, *s, dt, received, waitall);  // contiguous and iov unpacking cannot fail
    length = received;
    return true;
}

Status stream_recv_start(Worker& w, Ep* ep, Request* req) {
    StreamWorker& sw = *stream_state(w);
    req->recv.received = 0;
    req->recv.comp.status = Status::ok;
    req->ep_link = {};
    req->ep = ep;  // stream_expire finds the receive's queue by it
    StreamEp* s = get_ep(sw, ep);
    if (s == nullptr) {
        finish_recv(w, req, Status::no_memory);
        return Status::no_memory;
    }
    const bool waitall = req->flags & kReqWaitAll;
    if (s->recvs.empty()) {
        Status st = drain(sw, *s, req->recv.dt, req->recv.received, waitall);
        if (st != Status::ok || recv_done(req->recv.dt, req->recv.received, waitall)) {
            finish_recv(w, req, st);
            return Status::ok;
        }
        if (ep->flags & kEpFailed) {  // nothing more will come
            finish_recv(w, req, ep->failure);
            return Status::ok;
        }
    }
    s->recvs.push_back(*req);
    return Status::ok;
}

std::size_t stream_poll(Worker& w, StreamPollEp* out, std::size_t max) {
    StreamWorker& sw = *stream_state(w);
    std::size_t n = 0;
    while (n < max) {
        StreamEp* s = sw.ready.pop_front();
        if (s == nullptr) break;
        out[n++] = StreamPollEp{s->ep, s->ep->user_data, 0, {}};
    }
    return n;
}

void* stream_recv_data(Worker& w, Ep* ep, std::size_t& length) {
    StreamWorker& sw = *stream_state(w);
    StreamEp* s = find_ep(sw, ep);
    if (s == nullptr || !s->recvs.empty() || s->data.empty()) return nullptr;
    StreamDesc* d = s->data.pop_front();
    void* data = d->data() + d->offset;
    length = d->length - d->offset;
    s->queued -= length;
    if (s->data.empty()) unready(sw, *s);
    window_released(sw, *s);
    try {
        sw.handed_out.emplace(data, d);
    } catch (const std::bad_alloc&) {
        s->data.push_front(*d);  // as if nothing happened
        s->queued += length;
        if (!s->ready_link.linked()) sw.ready.push_back(*s);
        return nullptr;
    }
    return data;
}

bool stream_data_release(Worker& w, void* data) {
    StreamWorker& sw = *stream_state(w);
    auto it = sw.handed_out.find(data);
    if (it == sw.handed_out.end()) {
        LOOM_LOG_WARN("ucp: loom_stream_data_release: {} is not stream data this worker handed out", data);
        return false;
    }
    free_desc(sw, it->second);
    sw.handed_out.erase(it);
    return true;
}

}  // namespace loom::ucp
