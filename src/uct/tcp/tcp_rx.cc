/**
 * tcp progress and receive side: the iface's progress, reading a connection, parsing
 * frames, executing requests (the target's half of put/get/atomics) and matching
 * replies (the initiator's half).
 *
 * Progress does one epoll_wait(0) over the listening socket and every connection (or,
 * with a single idle connection, one recv() on it: see TcpIface::update_hot) and handles
 * what is ready: new connections are accepted and connecting sockets finish their
 * handshake (tcp_cm.cc), writable sockets continue their partial frame (tcp_ep.cc),
 * readable ones are read and their frames executed (here). Work that is rare (failures,
 * connection timers, pending requests, freeing endpoints destroyed from callbacks) runs
 * only when flagged, so an idle progress costs the one system call.
 *
 * A connection reads into its receive buffer and handles every whole frame in place:
 * active messages call the handler on the buffer, requests are executed and answered.
 * A put or get reply larger than what is buffered streams its payload straight into its
 * destination (recv into the target region or the get_zcopy iovs): the large-transfer
 * path copies once, like a plain socket.
 *
 * Every header is checked before it is acted on: the magic, a type valid for the
 * direction, the length against the type's limit. A violation fails the connection with
 * malformed_packet and one log line. Remote accesses are checked against the target
 * md's key table (TcpMd::check_access); a refused one touches no memory, is logged once
 * here and answered with access_denied (in the reply, or a nack for posted operations).
 *
 * Requests are answered on the connection they came in on. A reply that finds the
 * connection's tx busy (a frame of the local endpoint, or an earlier reply, still being
 * written) waits in the connection's reply queue and goes out before the endpoint may
 * send again. Reading never stops for it: when both sides of a shared connection are
 * writing large frames at once, each keeps reading what the other writes, so neither
 * can block the other.
 */
#include "uct/base/cpu_atomic.h"
#include "uct/tcp/tcp_iface.h"
#include "uct/tcp/tcp_log.h"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace loom::uct::tcp {

namespace {

constexpr unsigned kMaxEventsPerProgress = 16;
constexpr unsigned kHotPollPeriod = 16;
/** An iface with no connection reads the clock every this many progress calls... */
constexpr unsigned kIdlePollPeriod = 16;
/** ...and polls its listening socket when this many microseconds have passed. */
constexpr std::uint64_t kIdleListenPollUs = 100;
constexpr unsigned kMaxReadsPerEvent = 4;
/** Headers of the largest streamed frame (a put): what is read first after a streamed frame. */
constexpr std::size_t kLargeHeaders = sizeof(FrameHeader) + sizeof(RmaHeader);

/** The operation a request frame, or the reply to it, belongs to. */
const char* op_name(FrameType type) {
    switch (type) {
    case FrameType::am: return "active message";
    case FrameType::put:
    case FrameType::put_ack: return "put";
    case FrameType::get_req:
    case FrameType::get_rep: return "get";
    case FrameType::atomic_req:
    case FrameType::atomic_rep: return "atomic";
    case FrameType::flush_req:
    case FrameType::flush_ack: return "flush";
    case FrameType::nack: return "posted operation";
    }
    return "unknown operation";
}

}  // namespace

// --- progress ----------------------------------------------------------------------------------

unsigned TcpIface::progress() {
    // No connection: only the listening socket is watched, and its epoll_wait() was the
    // whole cost of an idle iface's progress: a system call per call (3 us on a hypervisor
    // that traps them), paid by every worker that talks over shm, in its latency too. A
    // peer's connection request waits a little: the listening socket is looked at every
    // kIdleListenPollUs at most (the clock read every kIdlePollPeriod-th call), and at the
    // first call after event_arm, whose sleeper it wakes.
    if (hot_ == nullptr && LOOM_UNLIKELY(epoll_.size() <= 1)) {
        const bool slow = (nfailing_ | ntimed_) != 0 || !pending_eps_.empty() || !zombies_.empty();
        if (--idle_countdown_ != 0) return LOOM_UNLIKELY(slow) ? progress_slow() : 0;
        idle_countdown_ = kIdlePollPeriod;
        const ucs::Ticks now = ucs::get_time();
        if (now < next_listen_poll_) return LOOM_UNLIKELY(slow) ? progress_slow() : 0;
        next_listen_poll_ = now + ucs::us_to_ticks(kIdleListenPollUs);
    } else {
        idle_countdown_ = kIdlePollPeriod;
    }
    // (Not while a large payload streams in: there, spinning on recv() holds the socket lock
    // against the sender's delivery; epoll_wait() checks readiness without it.)
    if (hot_ != nullptr && hot_->rx->mode == kRxFrames && (++poll_tick_ % kHotPollPeriod) != 0) {
        ++defer_free_;
        unsigned count = rx_progress(hot_) ? 1 : 0;
        --defer_free_;
        if (LOOM_UNLIKELY((nfailing_ | ntimed_) != 0 || !pending_eps_.empty() || !zombies_.empty())) {
            count += progress_slow();
        }
        return count;
    }
    // A payload started streaming into the hot connection: it goes back into the set.
    if (LOOM_UNLIKELY(hot_ != nullptr && hot_->rx->mode != kRxFrames)) update_hot();
    // epoll_wait() on the EventSet's fd directly: the one system call of an idle progress,
    // without EventSet::wait()'s conversion of every event (measurable at this rate).
    epoll_event events[kMaxEventsPerProgress];
    int ready = ::epoll_wait(epoll_.fd(), events, kMaxEventsPerProgress, 0);
    unsigned count = 0;
    if (hot_ != nullptr && (hot_->flags & kEpUnpolled)) {
        // Not in the set: read it here too, so this call misses nothing that arrived.
        ++defer_free_;
        count += rx_progress(hot_) ? 1 : 0;
        --defer_free_;
    }
    if (ready > 0) {
        count += static_cast<unsigned>(ready);
        ++defer_free_;
        for (int i = 0; i < ready; ++i) {
            auto* ep = reinterpret_cast<TcpEp*>(events[i].data.u64);
            std::uint32_t ev = events[i].events;
            if (ep == nullptr) {
                accept_connections();
                continue;
            }
            // (An endpoint destroyed by an earlier callback of this call is failed: skipped below.)
            if (LOOM_LIKELY(ep->state == ConnState::connected)) {
                if ((ev & EPOLLOUT) && ep->tx != nullptr) tx_progress(ep);
                if ((ev & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP)) && ep->state == ConnState::connected) {
                    rx_progress(ep);
                }
            } else if (ep->state == ConnState::handshake) {
                on_handshake(ep);
            } else if (ep->state == ConnState::connecting) {
                on_connect_ready(ep);
            }
        }
        --defer_free_;
    } else if (LOOM_UNLIKELY(ready < 0 && errno != EINTR) && !epoll_failed_) {
        epoll_failed_ = true;  // logged once: progress would repeat it at every call
        LOOM_LOG_ERROR("tcp/{}: epoll_wait failed: {}", device_.name, std::strerror(errno));
    }
    if (LOOM_UNLIKELY((nfailing_ | ntimed_) != 0 || !pending_eps_.empty() || !zombies_.empty())) {
        count += progress_slow();
    }
    return count;
}

unsigned TcpIface::progress_slow() {
    unsigned count = 0;
    ++defer_free_;
    if (ntimed_ != 0) check_timers(ucs::get_time());
    if (nfailing_ != 0) count += process_failures();
    if (!pending_eps_.empty()) count += dispatch_pending();
    --defer_free_;
    if (defer_free_ == 0) {
        while (TcpEp* ep = zombies_.pop_front()) free_ep(ep);
    }
    return count;
}

// --- reading a connection ----------------------------------------------------------------------

bool TcpIface::rx_progress(TcpEp* ep) {
    if (LOOM_UNLIKELY(ep->rx->data == nullptr) && !rx_hold_buffer(ep)) return true;
    bool more = rx_read(ep);
    rx_release_if_idle(ep);  // (ep is still allocated: endpoints are freed only outside progress)
    return more;
}

void TcpIface::rx_release_if_idle(TcpEp* ep) {
    RxState* rx = ep->rx;
    if (rx != nullptr && rx->data != nullptr && rx->length == 0 && rx->mode == kRxFrames) {
        rx_buf_pool_.put(rx->data);  // nothing half-read is left: the next connection that reads takes it
        rx->data = nullptr;
    }
}

bool TcpIface::rx_hold_buffer(TcpEp* ep) {
    RxState* rx = ep->rx;
    if (LOOM_LIKELY(rx->data != nullptr)) return true;
    rx->data = static_cast<std::uint8_t*>(rx_buf_pool_.get());
    if (LOOM_LIKELY(rx->data != nullptr)) return true;
    LOOM_LOG_ERROR("tcp/{}: no memory for a receive buffer: closing the connection to {}", device_.name,
                   peer_name(ep));
    fail(ep, Status::no_memory);
    return false;
}

bool TcpIface::rx_read(TcpEp* ep) {
    RxState* rx = ep->rx;
    for (unsigned i = 0; i < kMaxReadsPerEvent; ++i) {
        if (rx->mode != kRxFrames) {
            if (!rx_direct(ep)) return true;
            continue;
        }
        std::size_t room = rx_size() - rx->length;
        if (LOOM_UNLIKELY(rx->expect_large)) {
            // After a streamed frame another one is likely: take its headers alone, so its
            // payload goes straight to its destination instead of through this buffer.
            rx->expect_large = false;
            if (rx->length < kLargeHeaders) room = kLargeHeaders - rx->length;
        }
        ssize_t n = ::recv(ep->fd, rx->data + rx->length, room, MSG_DONTWAIT);
        if (LOOM_UNLIKELY(n <= 0)) {
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return i > 0;
            int err = n < 0 ? errno : 0;
            LOOM_LOG_DIAG("tcp/{}: {} {}", device_.name, peer_name(ep),
                          err ? std::string("failed: ") + std::strerror(err) : std::string("closed the connection"));
            fail(ep, err == 0 || err == EPIPE || err == ECONNRESET ? Status::connection_reset
                                                                    : (err == ETIMEDOUT ? Status::peer_timeout
                                                                                        : Status::io_error));
            return true;
        }
        rx->length += static_cast<std::uint32_t>(n);
        if (!parse_frames(ep)) {
            // A payload to stream is likely already in the socket: read it now.
            if (rx->mode != kRxFrames && ep->state == ConnState::connected) continue;
            return true;
        }
        if (static_cast<std::size_t>(n) < room) return true;  // the socket is drained
    }
    return true;
}

bool TcpIface::parse_frames(TcpEp* ep) {
    RxState* rx = ep->rx;
    std::uint8_t* buf = rx->data;
    std::size_t length = rx->length;
    std::size_t offset = 0;
    bool more = true;
    while (length - offset >= sizeof(FrameHeader)) {
        FrameHeader fh;
        std::memcpy(&fh, buf + offset, sizeof(fh));
        if (LOOM_UNLIKELY(fh.magic != kFrameMagic)) {
            malformed(ep, "bad frame magic", fh.magic);
            return false;
        }
        std::uint8_t* payload = buf + offset + sizeof(fh);
        std::size_t avail = length - offset - sizeof(fh);
        if (LOOM_LIKELY(fh.type == FrameType::am)) {
            if (LOOM_UNLIKELY(fh.length > rx_size() - sizeof(FrameHeader))) {
                // Larger than the receive buffer: streamed into a buffer of its own.
                if (fh.length > config_.max_am) {
                    malformed(ep, "active message longer than LOOM_TCP_MAX_AM_SIZE", fh.length);
                    return false;
                }
                std::uint8_t* large = get_large_buffer();
                if (large == nullptr) {
                    LOOM_LOG_ERROR("tcp/{}: no memory for a {}-byte active message from {}", device_.name, fh.length,
                                   peer_name(ep));
                    fail(ep, Status::no_memory);
                    return false;
                }
                std::size_t have = std::min<std::size_t>(avail, fh.length);
                std::memcpy(large, payload, have);
                offset += sizeof(fh) + have;
                rx->mode = kRxDirect;
                rx->frame = FrameType::am;
                rx->am_id = fh.arg;
                rx->large = large;
                rx->seg[0] = {large + have, fh.length - have};
                rx->nseg = 1;
                rx->seg_pos = 0;
                rx->remaining = fh.length - have;  // > 0: the buffer cannot hold the whole message
                more = false;
                break;
            }
            if (avail < fh.length) break;
            (void)invoke_am(fh.arg, payload, fh.length, 0);
            offset += sizeof(fh) + fh.length;
            if (LOOM_UNLIKELY(ep->state != ConnState::connected)) return false;  // the handler destroyed it
            continue;
        }
        std::size_t consumed = 0;
        more = static_cast<std::uint8_t>(fh.type) < static_cast<std::uint8_t>(FrameType::put_ack)
                   ? handle_request(ep, fh, payload, avail, &consumed)
                   : handle_reply(ep, fh, payload, avail, &consumed);
        offset += consumed;
        if (!more || consumed == 0) break;
    }
    if (ep->state != ConnState::connected) return false;
    if (offset > 0) {
        std::memmove(buf, buf + offset, length - offset);
        rx->length = static_cast<std::uint32_t>(length - offset);
    }
    return more && rx->mode == kRxFrames;
}

bool TcpIface::send_reply(TcpEp* ep, FrameType type, Status status, std::uint8_t flags, const void* data,
                          std::size_t length, bool copy_data) {
    FrameHeader fh{kFrameMagic, type, status_to_wire(status), flags, static_cast<std::uint32_t>(length)};
    if (LOOM_UNLIKELY(length >= kBulkFrame)) note_bulk(ep);  // a get's data (also when queued: it follows)
    if (LOOM_UNLIKELY(ep->tx != nullptr)) return queue_reply(ep, fh, data, length, copy_data);
    iovec iov[2] = {{&fh, sizeof(fh)}, {const_cast<void*>(data), length}};
    std::size_t iovcnt = length ? 2 : 1;
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = iovcnt;
    ssize_t n = ::sendmsg(ep->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (LOOM_LIKELY(static_cast<std::size_t>(n) == sizeof(fh) + length)) return true;
    Status s = send_incomplete(ep, iov, static_cast<unsigned>(iovcnt), n, copy_data ? 2 : 1, nullptr);
    return !is_error(s);
}

void TcpIface::log_denied(TcpEp* ep, const char* op, std::uint32_t key_id, std::uint64_t addr,
                          std::uint64_t length, const char* why) {
    LOOM_LOG_WARN("tcp/{}: refused a remote {} from {}: key {} address {:#x} length {}: {}", device_.name, op,
                  peer_name(ep), key_id, addr, length, why);
}

void TcpIface::malformed(TcpEp* ep, const char* what, unsigned value) {
    LOOM_LOG_WARN("tcp/{}: malformed frame from {}: {} ({}); closing the connection", device_.name, peer_name(ep),
                  what, value);
    fail(ep, Status::malformed_packet);
}

// --- target side -----------------------------------------------------------------------------

bool TcpIface::handle_request(TcpEp* ep, const FrameHeader& fh, std::uint8_t* payload, std::size_t avail,
                              std::size_t* consumed) {
    switch (fh.type) {
    case FrameType::put: {
        if (LOOM_UNLIKELY(fh.length < sizeof(RmaHeader) || fh.length > kMaxRmaFrame + sizeof(RmaHeader))) {
            malformed(ep, "put frame length out of range", fh.length);
            return false;
        }
        if (avail < sizeof(RmaHeader)) return true;
        RmaHeader rma;
        std::memcpy(&rma, payload, sizeof(rma));
        std::size_t size = fh.length - sizeof(RmaHeader);
        std::size_t have = std::min(avail - sizeof(RmaHeader), size);
        const char* why = nullptr;
        bool ack = (fh.flags & kFlagAckReq) != 0;
        RxState* rx = ep->rx;
        if (LOOM_LIKELY(md_->keys().check_access(rma.key_id, rma.cookie, rma.remote_addr, size,
                                                 kAccessRemotePut, &why))) {
            auto* dest = reinterpret_cast<std::uint8_t*>(rma.remote_addr);
            if (have > 0) std::memcpy(dest, payload + sizeof(RmaHeader), have);
            *consumed = sizeof(FrameHeader) + sizeof(RmaHeader) + have;
            if (have < size) {
                rx->mode = kRxDirect;
                rx->frame = FrameType::put;
                rx->status = status_to_wire(Status::ok);
                rx->ack = ack;
                rx->seg[0] = {dest + have, size - have};
                rx->nseg = 1;
                rx->seg_pos = 0;
                rx->remaining = size - have;
                return false;
            }
            return ack ? send_reply(ep, FrameType::put_ack, Status::ok, 0, nullptr, 0, false) : true;
        }
        log_denied(ep, "put", rma.key_id, rma.remote_addr, size, why);
        *consumed = sizeof(FrameHeader) + sizeof(RmaHeader) + have;
        if (have < size) {
            rx->mode = kRxDiscard;
            rx->frame = FrameType::put;
            rx->status = status_to_wire(Status::access_denied);
            rx->ack = ack;
            rx->remaining = size - have;
            return false;
        }
        return ack ? send_reply(ep, FrameType::put_ack, Status::access_denied, 0, nullptr, 0, false)
                   : send_reply(ep, FrameType::nack, Status::access_denied,
                                static_cast<std::uint8_t>(FrameType::put), nullptr, 0, false);
    }
    case FrameType::get_req: {
        if (LOOM_UNLIKELY(fh.length != sizeof(RmaHeader))) {
            malformed(ep, "get request length", fh.length);
            return false;
        }
        if (avail < sizeof(RmaHeader)) return true;
        RmaHeader rma;
        std::memcpy(&rma, payload, sizeof(rma));
        *consumed = sizeof(FrameHeader) + sizeof(RmaHeader);
        const char* why = nullptr;
        if (LOOM_LIKELY(md_->keys().check_access(rma.key_id, rma.cookie, rma.remote_addr, rma.length,
                                                 kAccessRemoteGet, &why))) {
            // The reply is written from the registered memory itself (no copy).
            return send_reply(ep, FrameType::get_rep, Status::ok, 0, reinterpret_cast<void*>(rma.remote_addr),
                              rma.length, false);
        }
        log_denied(ep, "get", rma.key_id, rma.remote_addr, rma.length, why);
        return send_reply(ep, FrameType::get_rep, Status::access_denied, 0, nullptr, 0, false);
    }
    case FrameType::atomic_req: {
        if (LOOM_UNLIKELY(fh.length != sizeof(AtomicHeader) || fh.arg > static_cast<std::uint8_t>(AtomicOp::cswap))) {
            malformed(ep, "atomic request length or operation", fh.length);
            return false;
        }
        if (avail < sizeof(AtomicHeader)) return true;
        AtomicHeader at;
        std::memcpy(&at, payload, sizeof(at));
        *consumed = sizeof(FrameHeader) + sizeof(AtomicHeader);
        auto op = static_cast<AtomicOp>(fh.arg);
        std::size_t size = (fh.flags & kFlag32) ? 4 : 8;
        const char* why = "misaligned address";
        std::uint64_t old = 0;
        Status status = Status::access_denied;
        if (at.rma.remote_addr % size == 0 &&
            md_->keys().check_access(at.rma.key_id, at.rma.cookie, at.rma.remote_addr, size,
                                     kAccessRemoteAtomic, &why)) {
            if (size == 4) {
                old = cpu_atomic<std::uint32_t>(op, reinterpret_cast<std::uint32_t*>(at.rma.remote_addr),
                                                static_cast<std::uint32_t>(at.value),
                                                static_cast<std::uint32_t>(at.compare));
            } else {
                old = cpu_atomic<std::uint64_t>(op, reinterpret_cast<std::uint64_t*>(at.rma.remote_addr),
                                                at.value, at.compare);
            }
            status = Status::ok;
        } else {
            log_denied(ep, "atomic", at.rma.key_id, at.rma.remote_addr, size, why);
        }
        if (fh.flags & kFlagFetch) {
            return send_reply(ep, FrameType::atomic_rep, status, 0, &old, status == Status::ok ? sizeof(old) : 0, true);
        }
        if (status != Status::ok) {
            return send_reply(ep, FrameType::nack, status, static_cast<std::uint8_t>(FrameType::atomic_req), nullptr,
                              0, false);
        }
        return true;
    }
    case FrameType::flush_req:
        if (LOOM_UNLIKELY(fh.length != 0)) {
            malformed(ep, "flush request length", fh.length);
            return false;
        }
        *consumed = sizeof(FrameHeader);
        // Every earlier request of this connection was executed: answer at once.
        return send_reply(ep, FrameType::flush_ack, Status::ok, 0, nullptr, 0, false);
    default:
        malformed(ep, "unknown frame type", static_cast<unsigned>(fh.type));
        return false;
    }
}

// --- initiator side ------------------------------------------------------------------------------

void TcpIface::complete_req(TcpEp* ep, ReqDesc* req, Status status) {
    (void)ep;
    Completion* comp = req->comp;
    put_req_desc(req);
    if (comp != nullptr) completion_update(comp, status);
}

bool TcpIface::handle_reply(TcpEp* ep, const FrameHeader& fh, std::uint8_t* payload, std::size_t avail,
                            std::size_t* consumed) {
    Status status = status_from_wire(fh.arg);
    if (fh.type == FrameType::nack) {
        if (LOOM_UNLIKELY(fh.length != 0)) {
            malformed(ep, "nack length", fh.length);
            return false;
        }
        *consumed = sizeof(FrameHeader);
        LOOM_LOG_WARN("tcp/{}: {} refused a posted {}: {}", device_.name, peer_name(ep),
                      op_name(static_cast<FrameType>(fh.flags)), to_string(status));
        if (ep->cold->sticky == Status::ok) ep->cold->sticky = is_error(status) ? status : Status::io_error;
        return true;
    }
    ReqDesc* req = ep->outstanding.empty() ? nullptr : &ep->outstanding.front();
    ReqKind expected;
    switch (fh.type) {
    case FrameType::put_ack: expected = ReqKind::put_ack; break;
    case FrameType::get_rep:
        expected = req != nullptr && req->kind == ReqKind::get_zcopy ? ReqKind::get_zcopy : ReqKind::get_bcopy;
        break;
    case FrameType::atomic_rep: expected = ReqKind::atomic; break;
    case FrameType::flush_ack: expected = ReqKind::flush_remote; break;
    default: malformed(ep, "unknown frame type", static_cast<unsigned>(fh.type)); return false;
    }
    if (LOOM_UNLIKELY(req == nullptr || req->kind != expected)) {
        malformed(ep, "reply without a matching request", static_cast<unsigned>(fh.type));
        return false;
    }
    std::size_t want = 0;
    if (status == Status::ok) {
        want = expected == ReqKind::atomic                                       ? sizeof(std::uint64_t)
               : expected == ReqKind::get_bcopy || expected == ReqKind::get_zcopy ? req->length
                                                                                  : 0;
    }
    if (LOOM_UNLIKELY(fh.length != want || (status != Status::ok && !is_error(status)))) {
        malformed(ep, "reply length", fh.length);
        return false;
    }
    if (status != Status::ok) {
        LOOM_LOG_WARN("tcp/{}: {} refused a {}: {}", device_.name, peer_name(ep), op_name(fh.type),
                      to_string(status));
    }
    switch (expected) {
    case ReqKind::get_zcopy: {
        std::size_t have = std::min(avail, want);
        std::size_t copied = 0;
        RxState* rx = ep->rx;
        rx->nseg = 0;
        for (unsigned i = 0; i < req->iovcnt; ++i) {
            auto* dest = static_cast<std::uint8_t*>(req->iov[i].iov_base);
            std::size_t len = req->iov[i].iov_len;
            std::size_t now = std::min(len, have - copied);
            if (now > 0) std::memcpy(dest, payload + copied, now);
            copied += now;
            if (now < len) rx->seg[rx->nseg++] = {dest + now, len - now};
        }
        *consumed = sizeof(FrameHeader) + have;
        if (have < want) {
            rx->mode = kRxDirect;
            rx->frame = FrameType::get_rep;
            rx->seg_pos = 0;
            rx->remaining = want - have;
            return false;
        }
        break;
    }
    case ReqKind::get_bcopy:
        if (avail < want) return true;
        if (want > 0) req->unpack.cb(req->unpack.arg, payload, want);
        *consumed = sizeof(FrameHeader) + want;
        break;
    case ReqKind::atomic:
        if (avail < want) return true;
        if (want > 0) {
            std::uint64_t old;
            std::memcpy(&old, payload, sizeof(old));
            if (req->size == 4) {
                *static_cast<std::uint32_t*>(req->result) = static_cast<std::uint32_t>(old);
            } else {
                *static_cast<std::uint64_t*>(req->result) = old;
            }
        }
        *consumed = sizeof(FrameHeader) + want;
        break;
    case ReqKind::flush_remote:
        *consumed = sizeof(FrameHeader);
        // A flush nobody waits for (no completion: the protocol layer's idle check) leaves the
        // error of a refused posted operation for the next flush to report.
        if (status == Status::ok && req->comp != nullptr) {
            status = ep->cold->sticky;
            ep->cold->sticky = Status::ok;
        }
        break;
    default: *consumed = sizeof(FrameHeader); break;
    }
    ep->outstanding.pop_front();
    complete_req(ep, req, status);
    complete_markers(ep);
    return ep->state == ConnState::connected;
}

void TcpIface::complete_markers(TcpEp* ep) {
    while (!ep->outstanding.empty() && ep->outstanding.front().kind == ReqKind::flush_local) {
        ReqDesc* marker = ep->outstanding.pop_front();
        Status status = Status::ok;
        if (marker->comp != nullptr) {  // else the error stays for a flush that is waited for
            status = ep->cold->sticky;
            ep->cold->sticky = Status::ok;
        }
        complete_req(ep, marker, status);
    }
}

// --- streamed payloads ------------------------------------------------------------------------------

bool TcpIface::rx_direct(TcpEp* ep) {
    RxState* rx = ep->rx;
    while (rx->remaining > 0) {
        ssize_t n;
        if (rx->mode == kRxDirect && rx->nseg - rx->seg_pos == 1) {
            // One destination (a put, a large message): recv() spares the kernel the iovec import.
            n = ::recv(ep->fd, rx->seg[rx->seg_pos].iov_base, rx->seg[rx->seg_pos].iov_len, MSG_DONTWAIT);
        } else if (rx->mode == kRxDirect) {
            msghdr msg{};
            msg.msg_iov = rx->seg + rx->seg_pos;
            msg.msg_iovlen = rx->nseg - rx->seg_pos;
            n = ::recvmsg(ep->fd, &msg, MSG_DONTWAIT);
        } else {
            n = ::recv(ep->fd, rx->data, std::min<std::uint64_t>(rx->remaining, rx_size()), MSG_DONTWAIT);
        }
        if (LOOM_UNLIKELY(n <= 0)) {
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
            LOOM_LOG_DIAG("tcp/{}: {} {} in the middle of a transfer", device_.name, peer_name(ep),
                          n < 0 ? std::strerror(errno) : "closed the connection");
            int err = n < 0 ? errno : 0;
            fail(ep, err == 0 || err == ECONNRESET || err == EPIPE ? Status::connection_reset
                                                                    : (err == ETIMEDOUT ? Status::peer_timeout
                                                                                        : Status::io_error));
            return false;
        }
        auto got = static_cast<std::size_t>(n);
        rx->remaining -= got;
        if (rx->mode == kRxDirect) {
            while (got > 0) {
                iovec& seg = rx->seg[rx->seg_pos];
                std::size_t now = std::min(got, seg.iov_len);
                seg.iov_base = static_cast<std::uint8_t*>(seg.iov_base) + now;
                seg.iov_len -= now;
                got -= now;
                if (seg.iov_len == 0) ++rx->seg_pos;
            }
        }
    }
    finish_direct(ep);
    update_hot();  // back to frames: it may be read directly again
    return ep->state == ConnState::connected && rx->mode == kRxFrames;
}

void TcpIface::finish_direct(TcpEp* ep) {
    RxState* rx = ep->rx;
    rx->mode = kRxFrames;
    rx->expect_large = rx->frame != FrameType::get_rep || rx->nseg == 1;
    Status status = status_from_wire(rx->status);
    if (rx->frame == FrameType::am) {
        std::uint8_t* large = rx->large;
        rx->large = nullptr;
        std::size_t length = static_cast<std::size_t>(static_cast<std::uint8_t*>(rx->seg[0].iov_base) - large);
        (void)invoke_am(rx->am_id, large, length, 0);
        put_large_buffer(large);
        return;
    }
    if (rx->frame == FrameType::get_rep) {
        ReqDesc* req = ep->outstanding.pop_front();
        complete_req(ep, req, Status::ok);
        complete_markers(ep);
        return;
    }
    // A put: its answer.
    if (rx->ack) {
        (void)send_reply(ep, FrameType::put_ack, status, 0, nullptr, 0, false);
    } else if (status != Status::ok) {
        (void)send_reply(ep, FrameType::nack, status, static_cast<std::uint8_t>(FrameType::put), nullptr, 0, false);
    }
    rx->status = status_to_wire(Status::ok);
}

std::uint8_t* TcpIface::get_large_buffer() {
    std::uint8_t* buf = spare_large_;
    spare_large_ = nullptr;
    return buf != nullptr ? buf : static_cast<std::uint8_t*>(std::malloc(config_.max_am));
}

void TcpIface::put_large_buffer(std::uint8_t* buf) {
    if (spare_large_ == nullptr) {
        spare_large_ = buf;
    } else {
        std::free(buf);
    }
}

}  // namespace loom::uct::tcp
