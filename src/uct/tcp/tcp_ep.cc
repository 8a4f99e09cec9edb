/**
 * tcp data path: the send side of a connection (the rest of a frame the socket did not
 * take, frames staged before the connection is up, replies to the peer's requests), the
 * send operations of an endpoint, and the ops table, kTcpOps.
 *
 * Every send writes one whole frame with one sendmsg() when the connection can take it
 * (TcpEp::can_send). What the socket does not take is kept in the connection's TxDesc
 * and written from progress (TcpIface::send_incomplete), so the fast path is: a few
 * checks, the headers on the stack, one system call.
 *
 * put/get/atomics are requests the target's progress executes against its key table;
 * the operations that wait for an answer (get, fetching atomics, put_zcopy, remote
 * flush) queue a ReqDesc on the endpoint, matched in order by the replies.
 *
 * Completion semantics:
 *  - am_zcopy: the Completion fires when the frame was written to the socket (local
 *    completion: the buffers may be reused).
 *  - put_zcopy: fires when the target acknowledged the put (remote completion), with
 *    access_denied when the target refused the key.
 *  - get, fetching atomics: fire when the reply arrived.
 *  - put_short/put_bcopy/atomic posts have no Completion: a refusal by the target is
 *    logged and reported by the next ep flush (its Completion gets access_denied).
 *  - ep flush: remote completion. It completes when every earlier operation of the
 *    endpoint completed and, when puts or atomic posts were sent since the last flush,
 *    the target answered a flush request sent after them (it executes requests in
 *    order, so all of them were applied). fence is a no-op: one connection per
 *    endpoint, executed in order.
 */
#include "uct/tcp/tcp_ep.h"
#include "uct/tcp/tcp_iface.h"
#include "uct/tcp/tcp_log.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace loom::uct::tcp {

// --- the send side of a connection ---------------------------------------------------------------

void TcpIface::tx_progress(TcpEp* ep) {
    TxDesc* desc = ep->tx;
    msghdr msg{};
    msg.msg_iov = desc->iov + desc->iov_pos;
    msg.msg_iovlen = desc->iovcnt - desc->iov_pos;
    ssize_t n = ::sendmsg(ep->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
        LOOM_LOG_DEBUG("tcp/{}: send to {} failed: {}", device_.name, peer_name(ep), std::strerror(errno));
        fail(ep, errno_status(errno));
        return;
    }
    auto left = static_cast<std::size_t>(n);
    while (desc->iov_pos < desc->iovcnt && left >= desc->iov[desc->iov_pos].iov_len) {
        left -= desc->iov[desc->iov_pos].iov_len;
        ++desc->iov_pos;
    }
    if (desc->iov_pos < desc->iovcnt) {
        iovec& cur = desc->iov[desc->iov_pos];
        cur.iov_base = static_cast<std::uint8_t*>(cur.iov_base) + left;
        cur.iov_len -= left;
        return;
    }
    Completion* comp = desc->comp;
    ep->tx = nullptr;
    put_tx_desc(desc);
    if (!ep->cold->replies.empty()) write_replies(ep);
    update_poll(ep);
    if (comp != nullptr) completion_update(comp, Status::ok);
}

void TcpIface::write_replies(TcpEp* ep) {
    while (ep->tx == nullptr && ep->state == ConnState::connected) {
        ReplyDesc* reply = ep->cold->replies.pop_front();
        if (reply == nullptr) return;
        iovec iov[2] = {{&reply->header, sizeof(reply->header)}, {const_cast<void*>(reply->data), reply->length}};
        unsigned iovcnt = reply->length ? 2 : 1;
        msghdr msg{};
        msg.msg_iov = iov;
        msg.msg_iovlen = iovcnt;
        ssize_t n = ::sendmsg(ep->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n != static_cast<ssize_t>(sizeof(reply->header) + reply->length)) {
            // Inline data is copied; a get reply's data is the registered memory itself.
            (void)send_incomplete(ep, iov, iovcnt, n, reply->data == &reply->value ? 2 : 1, nullptr);
        }
        reply_pool_.put(reply);
    }
}

bool TcpIface::queue_reply(TcpEp* ep, const FrameHeader& fh, const void* data, std::size_t length, bool copy_data) {
    auto* reply = static_cast<ReplyDesc*>(reply_pool_.get());
    if (reply == nullptr) {
        LOOM_LOG_ERROR("tcp/{}: out of memory for a reply to {}: failing the connection", device_.name, peer_name(ep));
        fail(ep, Status::no_memory);
        return false;
    }
    reply->header = fh;
    reply->length = length;
    if (copy_data && length > 0) {
        LOOM_ASSERT(length <= sizeof(reply->value));
        std::memcpy(&reply->value, data, length);
        reply->data = &reply->value;
    } else {
        reply->data = data;
    }
    ep->cold->replies.push_back(*reply);
    return true;
}

Status TcpIface::send_incomplete(TcpEp* ep, const iovec* iov, unsigned iovcnt, ssize_t sent, unsigned ncopy,
                                 Completion* comp) {
    if (sent < 0) {
        int err = errno;
        if (err != EAGAIN && err != EWOULDBLOCK && err != EINTR) {
            LOOM_LOG_DEBUG("tcp/{}: send to {} failed: {}", device_.name, peer_name(ep), std::strerror(err));
            fail(ep, errno_status(err));
            return ep->cold->error;
        }
        sent = 0;
    }
    TxDesc* desc = get_tx_desc();
    if (desc == nullptr) {
        // Part of the frame is on the wire and the rest cannot be kept: the stream is lost.
        LOOM_LOG_ERROR("tcp/{}: out of memory for a send buffer: failing the connection to {}", device_.name,
                       peer_name(ep));
        fail(ep, Status::no_memory);
        return sent == 0 ? Status::no_memory : Status::ok;
    }
    auto skip = static_cast<std::size_t>(sent);
    std::uint8_t* copy = desc->data;
    unsigned out = 0;
    bool referenced = false;  // user memory still to be read: the operation is not complete
    for (unsigned i = 0; i < iovcnt; ++i) {
        auto* base = static_cast<std::uint8_t*>(iov[i].iov_base);
        std::size_t len = iov[i].iov_len;
        if (skip >= len) {
            skip -= len;
            continue;
        }
        base += skip;
        len -= skip;
        skip = 0;
        if (i < ncopy) {
            // Copied pieces are contiguous in desc->data: one iovec covers them all.
            if (out == 0 || desc->iov[out - 1].iov_base != desc->data) {
                desc->iov[out++] = {copy, 0};
            }
            std::memcpy(copy, base, len);
            copy += len;
            desc->iov[out - 1].iov_len += len;
        } else {
            desc->iov[out++] = {base, len};
            referenced = true;
        }
    }
    desc->iovcnt = static_cast<std::uint8_t>(out);
    desc->iov_pos = 0;
    desc->comp = referenced ? comp : nullptr;
    ep->tx = desc;
    update_poll(ep);
    if (referenced) return Status::in_progress;
    // Everything left was copied: done for the caller (its Completion, if any, is not used).
    return Status::ok;
}

Status TcpIface::send_desc_incomplete(TcpEp* ep, TxDesc* desc, std::uint8_t* start, std::size_t total,
                                      ssize_t sent) {
    if (sent < 0) {
        int err = errno;
        if (err != EAGAIN && err != EWOULDBLOCK && err != EINTR) {
            put_tx_desc(desc);
            LOOM_LOG_DEBUG("tcp/{}: send to {} failed: {}", device_.name, peer_name(ep), std::strerror(err));
            fail(ep, errno_status(err));
            return ep->cold->error;
        }
        sent = 0;
    }
    desc->iov[0] = {start + sent, total - static_cast<std::size_t>(sent)};
    desc->iovcnt = 1;
    desc->iov_pos = 0;
    desc->comp = nullptr;
    ep->tx = desc;
    update_poll(ep);
    return Status::ok;
}

Status TcpIface::stage(TcpEp* ep, const iovec* iov, std::size_t iovcnt, std::size_t total) {
    if (ep->state == ConnState::idle) {
        if (Status status = wake_on_send(ep); status != Status::ok) return status;
    }
    TxDesc* desc = ep->tx;
    const std::size_t used = desc != nullptr ? desc->iov[0].iov_len : 0;
    if (used + total > kMaxHeaderRoom + seg_size_) return Status::no_resource;
    // The smallest buffer that holds what is staged: a staging class, else a segment's.
    std::uint8_t want = 0;
    while (want < kNumStageClasses && used + total > kStageBytes[want]) ++want;
    want = want < kNumStageClasses ? static_cast<std::uint8_t>(want + 1) : 0;
    const bool fits =
        desc != nullptr && (desc->stage_class == 0 || used + total <= kStageBytes[desc->stage_class - 1]);
    if (!fits) {
        TxDesc* bigger = nullptr;
        if (want != 0 && (bigger = static_cast<TxDesc*>(tx_stage_pools_[want - 1].get())) != nullptr) {
            bigger->stage_class = want;
        } else if ((bigger = get_tx_desc()) == nullptr) {
            return Status::no_resource;
        }
        // Outgrew its buffer (or had none): what is staged moves to the new one.
        std::uint8_t* to = bigger->stage_class != 0 ? staged_data(bigger) : bigger->data;
        if (used != 0) std::memcpy(to, desc->iov[0].iov_base, used);
        bigger->iov[0] = {to, used};
        bigger->iovcnt = 1;
        bigger->iov_pos = 0;
        bigger->comp = nullptr;
        if (desc != nullptr) put_tx_desc(desc);
        ep->tx = desc = bigger;
    }
    std::uint8_t* out = static_cast<std::uint8_t*>(desc->iov[0].iov_base) + used;
    for (std::size_t i = 0; i < iovcnt; ++i) {
        if (iov[i].iov_len == 0) continue;  // an empty piece may have a null base
        std::memcpy(out, iov[i].iov_base, iov[i].iov_len);
        out += iov[i].iov_len;
    }
    desc->iov[0].iov_len = used + total;
    return Status::ok;
}

Status TcpIface::not_ready(TcpEp* ep) const {
    return ep->state == ConnState::failed ? ep->cold->error : Status::no_resource;
}

// --- the operations ------------------------------------------------------------------------------

namespace {

constexpr int kSendFlags = MSG_NOSIGNAL | MSG_DONTWAIT;

LOOM_ALWAYS_INLINE TcpEp* tcp_ep(Ep* ep) { return static_cast<TcpEp*>(ep); }
LOOM_ALWAYS_INLINE TcpIface* tcp_iface(Ep* ep) { return static_cast<TcpIface*>(ep->iface); }

LOOM_ALWAYS_INLINE ssize_t send_iov(int fd, iovec* iov, std::size_t iovcnt) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = iovcnt;
    return ::sendmsg(fd, &msg, kSendFlags);
}

LOOM_ALWAYS_INLINE FrameHeader frame(FrameType type, std::uint8_t arg, std::uint8_t flags, std::size_t length) {
    return FrameHeader{kFrameMagic, type, arg, flags, static_cast<std::uint32_t>(length)};
}

LOOM_ALWAYS_INLINE RmaHeader rma_header(std::uint64_t remote_addr, std::uint64_t rkey, std::uint32_t length) {
    const auto* key = reinterpret_cast<const RegionKey*>(rkey);
    return RmaHeader{remote_addr, key->cookie, key->key_id, length};
}

/** Sums the iov lengths; false when there are too many pieces. */
LOOM_ALWAYS_INLINE bool iov_total(const Iov* iov, std::size_t iovcnt, std::size_t& total) {
    if (LOOM_UNLIKELY(iovcnt > kMaxIov)) return false;
    total = 0;
    for (std::size_t i = 0; i < iovcnt; ++i) total += iov[i].length;
    return true;
}

/** Appends the user's pieces to @p out after @p n entries; returns the new count. */
LOOM_ALWAYS_INLINE std::size_t append_iov(iovec* out, std::size_t n, const Iov* iov, std::size_t iovcnt) {
    for (std::size_t i = 0; i < iovcnt; ++i) {
        if (iov[i].length == 0) continue;
        out[n++] = iovec{const_cast<void*>(iov[i].buffer), iov[i].length};
    }
    return n;
}

/** Writes a frame from @p iov; what the socket does not take is kept (first @p ncopy entries copied). */
LOOM_ALWAYS_INLINE Status send_frame(TcpEp* ep, iovec* iov, std::size_t iovcnt, std::size_t total,
                                     unsigned ncopy, Completion* comp) {
    if (LOOM_UNLIKELY(ep->state != ConnState::connected)) return tcp_iface(ep)->stage(ep, iov, iovcnt, total);
    ssize_t n = send_iov(ep->fd, iov, iovcnt);
    if (LOOM_LIKELY(static_cast<std::size_t>(n) == total)) return Status::ok;
    return tcp_iface(ep)->send_incomplete(ep, iov, static_cast<unsigned>(iovcnt), n, ncopy, comp);
}

/** Counts a small data frame of @p ep for the congestion control switch (TcpIface::note_bulk). */
LOOM_ALWAYS_INLINE void small_frame(TcpEp* ep) {
    if (LOOM_UNLIKELY(ep->flags & kEpBulk)) tcp_iface(ep)->note_small(ep);
}

/** Counts a data frame of @p length payload bytes: bulk or small. */
LOOM_ALWAYS_INLINE void data_frame(TcpEp* ep, std::size_t length) {
    if (LOOM_UNLIKELY(length >= kBulkFrame)) {
        tcp_iface(ep)->note_bulk(ep);
    } else {
        small_frame(ep);
    }
}

/** Writes a frame packed in @p desc at @p start (@p total bytes); keeps the rest in desc. */
LOOM_ALWAYS_INLINE Status send_desc(TcpEp* ep, TxDesc* desc, std::uint8_t* start, std::size_t total) {
    small_frame(ep);
    if (LOOM_UNLIKELY(ep->state != ConnState::connected)) {
        iovec iov{start, total};
        Status status = tcp_iface(ep)->stage(ep, &iov, 1, total);
        tcp_iface(ep)->put_tx_desc(desc);
        return status;
    }
    ssize_t n = ::send(ep->fd, start, total, kSendFlags);
    if (LOOM_LIKELY(static_cast<std::size_t>(n) == total)) {
        tcp_iface(ep)->put_tx_desc(desc);
        return Status::ok;
    }
    return tcp_iface(ep)->send_desc_incomplete(ep, desc, start, total, n);
}

// --- active messages -----------------------------------------------------------------

/**
 * Small frames are copied into one stack buffer and sent with send(): cheaper in the
 * kernel than importing a msghdr and an iovec array (measured: ~0.3 us per message on
 * loopback), and the copy of a few hundred bytes costs less than that.
 */
inline constexpr std::size_t kSmallFrame = 512;

/** Sends @p hdr followed by @p length bytes of @p payload as one frame. */
template <typename Headers>
LOOM_ALWAYS_INLINE Status send_with_payload(TcpEp* ep, const Headers& hdr, const void* payload, std::size_t length) {
    small_frame(ep);
    if (LOOM_LIKELY(length <= kSmallFrame && ep->state == ConnState::connected)) {
        alignas(8) std::uint8_t buf[sizeof(Headers) + kSmallFrame];
        std::memcpy(buf, &hdr, sizeof(hdr));
        if (length > 0) std::memcpy(buf + sizeof(hdr), payload, length);  // payload may be null when empty
        std::size_t total = sizeof(hdr) + length;
        ssize_t n = ::send(ep->fd, buf, total, kSendFlags);
        if (LOOM_LIKELY(static_cast<std::size_t>(n) == total)) return Status::ok;
        iovec iov{buf, total};
        return tcp_iface(ep)->send_incomplete(ep, &iov, 1, n, 1, nullptr);
    }
    iovec iov[2] = {{const_cast<Headers*>(&hdr), sizeof(hdr)}, {const_cast<void*>(payload), length}};
    return send_frame(ep, iov, length ? 2 : 1, sizeof(hdr) + length, 2, nullptr);
}

Status tcp_am_short(Ep* base, AmId id, std::uint64_t header, const void* payload, unsigned length) {
    TcpEp* ep = tcp_ep(base);
    if (LOOM_UNLIKELY(length > tcp_iface(ep)->max_short())) return Status::exceeds_limit;
    if (LOOM_UNLIKELY(!ep->can_send() && !ep->can_stage())) return tcp_iface(ep)->not_ready(ep);
    struct {
        FrameHeader fh;
        std::uint64_t header;
    } hdr{frame(FrameType::am, id, 0, sizeof(header) + length), header};
    return send_with_payload(ep, hdr, payload, length);
}

/**
 * The bcopy flavours: packs into a staging descriptor (at most @p limit bytes, checked:
 * more is the caller's bug) behind room for its headers, which @p make_header builds
 * from the packed length, and sends headers and data as one frame. Returns the length or
 * a status.
 */
template <typename MakeHeader>
LOOM_ALWAYS_INLINE ssize_t send_bcopy(TcpEp* ep, PackCallback pack, void* arg, std::size_t limit, const char* what,
                                      MakeHeader make_header) {
    TcpIface* iface = tcp_iface(ep);
    if (LOOM_UNLIKELY(!ep->can_send() && !ep->can_stage())) return static_cast<ssize_t>(iface->not_ready(ep));
    TxDesc* desc = iface->get_tx_desc();
    if (LOOM_UNLIKELY(desc == nullptr)) return static_cast<ssize_t>(Status::no_resource);
    std::uint8_t* payload = desc->data + kMaxHeaderRoom;
    std::size_t length = pack(payload, arg);
    if (LOOM_UNLIKELY(length > limit)) {
        LOOM_FATAL("{}: pack callback wrote {} bytes, more than the {} allowed", what, length, limit);
    }
    const auto hdr = make_header(length);
    static_assert(sizeof(hdr) <= kMaxHeaderRoom);
    std::uint8_t* start = payload - sizeof(hdr);
    std::memcpy(start, &hdr, sizeof(hdr));
    Status status = send_desc(ep, desc, start, sizeof(hdr) + length);
    return LOOM_LIKELY(status == Status::ok) ? static_cast<ssize_t>(length) : static_cast<ssize_t>(status);
}

ssize_t tcp_am_bcopy(Ep* base, AmId id, PackCallback pack, void* arg, unsigned) {
    TcpEp* ep = tcp_ep(base);
    return send_bcopy(ep, pack, arg, tcp_iface(ep)->max_am_bcopy(), "am_bcopy",
                      [id](std::size_t length) { return frame(FrameType::am, id, 0, length); });
}

Status tcp_am_zcopy(Ep* base, AmId id, const void* header, unsigned header_length, const Iov* iov,
                    std::size_t iovcnt, unsigned, Completion* comp) {
    TcpEp* ep = tcp_ep(base);
    std::size_t payload;
    if (LOOM_UNLIKELY(!iov_total(iov, iovcnt, payload) || header_length > kMaxAmZcopyHeader ||
                      header_length + payload > tcp_iface(ep)->max_am())) {
        return Status::exceeds_limit;
    }
    if (LOOM_UNLIKELY(!ep->can_send() && !ep->can_stage())) return tcp_iface(ep)->not_ready(ep);
    data_frame(ep, header_length + payload);
    FrameHeader fh = frame(FrameType::am, id, 0, header_length + payload);
    iovec vec[kMaxTxIov];
    vec[0] = {&fh, sizeof(fh)};
    std::size_t n = 1;
    if (header_length > 0) vec[n++] = {const_cast<void*>(header), header_length};
    unsigned ncopy = static_cast<unsigned>(n);  // the headers: the caller may reuse them at once
    n = append_iov(vec, n, iov, iovcnt);
    return send_frame(ep, vec, n, sizeof(fh) + header_length + payload, ncopy, comp);
}

// --- put --------------------------------------------------------------------------------

struct PutHeaders {
    FrameHeader fh;
    RmaHeader rma;
};

Status tcp_put_short(Ep* base, const void* buffer, unsigned length, std::uint64_t remote_addr,
                     std::uint64_t rkey) {
    TcpEp* ep = tcp_ep(base);
    if (LOOM_UNLIKELY(length > tcp_iface(ep)->max_short())) return Status::exceeds_limit;
    if (LOOM_UNLIKELY(!ep->can_send() && !ep->can_stage())) return tcp_iface(ep)->not_ready(ep);
    PutHeaders hdr{frame(FrameType::put, 0, 0, sizeof(RmaHeader) + length), rma_header(remote_addr, rkey, 0)};
    Status status = send_with_payload(ep, hdr, buffer, length);
    ep->flags |= kEpDirty;
    return status;
}

ssize_t tcp_put_bcopy(Ep* base, PackCallback pack, void* arg, std::uint64_t remote_addr, std::uint64_t rkey) {
    TcpEp* ep = tcp_ep(base);
    ssize_t sent = send_bcopy(ep, pack, arg, tcp_iface(ep)->seg_size(), "put_bcopy", [&](std::size_t length) {
        return PutHeaders{frame(FrameType::put, 0, 0, sizeof(RmaHeader) + length), rma_header(remote_addr, rkey, 0)};
    });
    if (sent >= 0) ep->flags |= kEpDirty;
    return sent;
}

/** Sends a request frame that expects a reply described by @p req (queued once the frame is committed). */
LOOM_ALWAYS_INLINE Status send_request(TcpEp* ep, ReqDesc* req, iovec* iov, std::size_t iovcnt, std::size_t total,
                                       unsigned ncopy) {
    if (LOOM_UNLIKELY(ep->state != ConnState::connected)) {
        Status status = tcp_iface(ep)->stage(ep, iov, iovcnt, total);
        if (status != Status::ok) {
            tcp_iface(ep)->put_req_desc(req);
            return status;
        }
        ep->outstanding.push_back(*req);
        return Status::in_progress;
    }
    ssize_t n = send_iov(ep->fd, iov, iovcnt);
    if (LOOM_LIKELY(static_cast<std::size_t>(n) == total)) {
        ep->outstanding.push_back(*req);
        return Status::in_progress;
    }
    // Queue first: a partially written request is committed and its reply will come.
    ep->outstanding.push_back(*req);
    Status status = tcp_iface(ep)->send_incomplete(ep, iov, static_cast<unsigned>(iovcnt), n, ncopy, nullptr);
    if (LOOM_UNLIKELY(is_error(status))) {
        // Nothing was committed (a failed connection): the caller gets the error, not the completion.
        ep->outstanding.remove(*req);
        tcp_iface(ep)->put_req_desc(req);
        return status;
    }
    return Status::in_progress;
}

Status tcp_put_zcopy(Ep* base, const Iov* iov, std::size_t iovcnt, std::uint64_t remote_addr, std::uint64_t rkey,
                     Completion* comp) {
    TcpEp* ep = tcp_ep(base);
    std::size_t length;
    if (LOOM_UNLIKELY(!iov_total(iov, iovcnt, length) || length > kMaxRmaFrame)) return Status::exceeds_limit;
    if (LOOM_UNLIKELY(!ep->can_send() && !ep->can_stage())) return tcp_iface(ep)->not_ready(ep);
    ReqDesc* req = tcp_iface(ep)->get_req_desc();
    if (LOOM_UNLIKELY(req == nullptr)) return Status::no_resource;
    req->kind = ReqKind::put_ack;
    req->comp = comp;
    req->length = length;
    data_frame(ep, length);
    PutHeaders hdr{frame(FrameType::put, 0, kFlagAckReq, sizeof(RmaHeader) + length),
                   rma_header(remote_addr, rkey, 0)};
    iovec vec[kMaxTxIov];
    vec[0] = {&hdr, sizeof(hdr)};
    std::size_t n = append_iov(vec, 1, iov, iovcnt);
    return send_request(ep, req, vec, n, sizeof(hdr) + length, 1);
}

// --- get ----------------------------------------------------------------------------------

Status send_get(TcpEp* ep, ReqDesc* req, std::uint64_t remote_addr, std::uint64_t rkey, std::size_t length) {
    PutHeaders hdr{frame(FrameType::get_req, 0, 0, sizeof(RmaHeader)),
                   rma_header(remote_addr, rkey, static_cast<std::uint32_t>(length))};
    iovec iov{&hdr, sizeof(hdr)};
    return send_request(ep, req, &iov, 1, sizeof(hdr), 1);
}

Status tcp_get_bcopy(Ep* base, UnpackCallback unpack, void* arg, std::size_t length, std::uint64_t remote_addr,
                     std::uint64_t rkey, Completion* comp) {
    TcpEp* ep = tcp_ep(base);
    if (LOOM_UNLIKELY(length > tcp_iface(ep)->max_am_bcopy())) return Status::exceeds_limit;
    if (LOOM_UNLIKELY(!ep->can_send() && !ep->can_stage())) return tcp_iface(ep)->not_ready(ep);
    ReqDesc* req = tcp_iface(ep)->get_req_desc();
    if (LOOM_UNLIKELY(req == nullptr)) return Status::no_resource;
    req->kind = ReqKind::get_bcopy;
    req->comp = comp;
    req->length = length;
    req->unpack.cb = unpack;
    req->unpack.arg = arg;
    return send_get(ep, req, remote_addr, rkey, length);
}

Status tcp_get_zcopy(Ep* base, const Iov* iov, std::size_t iovcnt, std::uint64_t remote_addr, std::uint64_t rkey,
                     Completion* comp) {
    TcpEp* ep = tcp_ep(base);
    std::size_t length;
    if (LOOM_UNLIKELY(!iov_total(iov, iovcnt, length) || length > kMaxRmaFrame)) return Status::exceeds_limit;
    if (LOOM_UNLIKELY(!ep->can_send() && !ep->can_stage())) return tcp_iface(ep)->not_ready(ep);
    ReqDesc* req = tcp_iface(ep)->get_req_desc();
    if (LOOM_UNLIKELY(req == nullptr)) return Status::no_resource;
    req->kind = ReqKind::get_zcopy;
    req->comp = comp;
    req->length = length;
    req->iovcnt = static_cast<std::uint8_t>(append_iov(req->iov, 0, iov, iovcnt));
    return send_get(ep, req, remote_addr, rkey, length);
}

// --- atomics ------------------------------------------------------------------------------

struct AtomicHeaders {
    FrameHeader fh;
    AtomicHeader atomic;
};

template <typename T>
LOOM_ALWAYS_INLINE AtomicHeaders atomic_headers(AtomicOp op, std::uint8_t flags, std::uint64_t value,
                                                std::uint64_t compare, std::uint64_t remote_addr,
                                                std::uint64_t rkey) {
    if constexpr (sizeof(T) == 4) flags |= kFlag32;
    return AtomicHeaders{frame(FrameType::atomic_req, static_cast<std::uint8_t>(op), flags, sizeof(AtomicHeader)),
                         AtomicHeader{rma_header(remote_addr, rkey, sizeof(T)), value, compare}};
}

template <typename T>
Status tcp_atomic_post(Ep* base, AtomicOp op, T value, std::uint64_t remote_addr, std::uint64_t rkey) {
    TcpEp* ep = tcp_ep(base);
    if (LOOM_UNLIKELY(op == AtomicOp::swap || op == AtomicOp::cswap)) return Status::unsupported;
    if (LOOM_UNLIKELY(remote_addr % sizeof(T) != 0)) return Status::invalid_param;
    if (LOOM_UNLIKELY(!ep->can_send() && !ep->can_stage())) return tcp_iface(ep)->not_ready(ep);
    AtomicHeaders hdr = atomic_headers<T>(op, 0, value, 0, remote_addr, rkey);
    iovec iov{&hdr, sizeof(hdr)};
    Status status = send_frame(ep, &iov, 1, sizeof(hdr), 1, nullptr);
    ep->flags |= kEpDirty;
    return status;
}

template <typename T>
Status atomic_request(TcpEp* ep, AtomicOp op, T value, T compare, T* result, std::uint64_t remote_addr,
                      std::uint64_t rkey, Completion* comp) {
    if (LOOM_UNLIKELY(remote_addr % sizeof(T) != 0)) return Status::invalid_param;
    if (LOOM_UNLIKELY(!ep->can_send() && !ep->can_stage())) return tcp_iface(ep)->not_ready(ep);
    ReqDesc* req = tcp_iface(ep)->get_req_desc();
    if (LOOM_UNLIKELY(req == nullptr)) return Status::no_resource;
    req->kind = ReqKind::atomic;
    req->comp = comp;
    req->size = sizeof(T);
    req->result = result;
    AtomicHeaders hdr = atomic_headers<T>(op, kFlagFetch, value, compare, remote_addr, rkey);
    iovec iov{&hdr, sizeof(hdr)};
    return send_request(ep, req, &iov, 1, sizeof(hdr), 1);
}

template <typename T>
Status tcp_atomic_fetch(Ep* base, AtomicOp op, T value, T* result, std::uint64_t remote_addr, std::uint64_t rkey,
                        Completion* comp) {
    if (LOOM_UNLIKELY(op == AtomicOp::cswap)) return Status::unsupported;
    return atomic_request<T>(tcp_ep(base), op, value, 0, result, remote_addr, rkey, comp);
}

template <typename T>
Status tcp_atomic_cswap(Ep* base, T compare, T swap, std::uint64_t remote_addr, std::uint64_t rkey, T* result,
                        Completion* comp) {
    return atomic_request<T>(tcp_ep(base), AtomicOp::cswap, swap, compare, result, remote_addr, rkey, comp);
}

// --- pending, flush, fence, progress --------------------------------------------------------

Status tcp_pending_add(Ep* base, PendingReq* req, unsigned) {
    TcpEp* ep = tcp_ep(base);
    if (ep->state == ConnState::failed) return tcp_iface(ep)->not_ready(ep);
    if (ep->state == ConnState::idle) {
        // The request waits for the connection: start it.
        if (Status status = tcp_iface(ep)->wake_on_send(ep); status != Status::ok) return status;
    }
    if (ep->can_send() && ep->pending.empty()) return Status::busy;
    // Also while connecting: the request may not fit the staging buffer, so it waits for the connection.
    ep->pending.push_back(*req);
    tcp_iface(ep)->pending_schedule(ep);
    return Status::ok;
}

void tcp_pending_purge(Ep* base, PendingPurgeCallback cb, void* arg) {
    tcp_iface(base)->pending_purge(tcp_ep(base), cb, arg);
}

Status tcp_pending_remove(Ep* base, PendingReq* req) {
    return tcp_iface(base)->pending_remove(tcp_ep(base), req);
}

Status tcp_ep_flush(Ep* base, unsigned flags, Completion* comp) {
    TcpEp* ep = tcp_ep(base);
    TcpIface* iface = tcp_iface(ep);
    if (flags & kFlushCancel) {
        iface->cancel(ep);
        return Status::ok;
    }
    if (ep->state == ConnState::failed) return iface->not_ready(ep);
    bool dirty = (ep->flags & kEpDirty) != 0;
    if (!dirty && ep->outstanding.empty() && ep->tx == nullptr) {
        Status sticky = ep->cold->sticky;
        ep->cold->sticky = Status::ok;
        return sticky;
    }
    if (ep->tx != nullptr && (ep->state == ConnState::connected || (!dirty && ep->outstanding.empty()))) {
        // Data still to be written (or staged active messages only): flush once it is out.
        return Status::no_resource;
    }
    ReqDesc* req = iface->get_req_desc();
    if (req == nullptr) return Status::no_resource;
    req->comp = comp;
    req->length = 0;
    if (!dirty) {
        // Nothing unacknowledged was posted: done when every earlier request is.
        req->kind = ReqKind::flush_local;
        ep->outstanding.push_back(*req);
        return Status::in_progress;
    }
    req->kind = ReqKind::flush_remote;
    FrameHeader fh = frame(FrameType::flush_req, 0, 0, 0);
    iovec iov{&fh, sizeof(fh)};
    Status status = send_request(ep, req, &iov, 1, sizeof(fh), 1);
    if (status == Status::in_progress) ep->flags &= ~kEpDirty;
    return status;
}

Status tcp_ep_fence(Ep*, unsigned) { return Status::ok; }

unsigned tcp_iface_progress(Iface* iface) { return static_cast<TcpIface*>(iface)->progress(); }

Status tcp_iface_flush(Iface* iface, unsigned flags, Completion* comp) {
    return static_cast<TcpIface*>(iface)->flush_iface(flags, comp);
}

Status tcp_iface_fence(Iface*, unsigned) { return Status::ok; }

}  // namespace

const IfaceOps kTcpOps = {
    .ep_am_short = tcp_am_short,
    .ep_am_bcopy = tcp_am_bcopy,
    .ep_am_zcopy = tcp_am_zcopy,
    .ep_put_short = tcp_put_short,
    .ep_put_bcopy = tcp_put_bcopy,
    .ep_put_zcopy = tcp_put_zcopy,
    .ep_get_bcopy = tcp_get_bcopy,
    .ep_get_zcopy = tcp_get_zcopy,
    .ep_atomic32_post = tcp_atomic_post<std::uint32_t>,
    .ep_atomic64_post = tcp_atomic_post<std::uint64_t>,
    .ep_atomic32_fetch = tcp_atomic_fetch<std::uint32_t>,
    .ep_atomic64_fetch = tcp_atomic_fetch<std::uint64_t>,
    .ep_atomic32_cswap = tcp_atomic_cswap<std::uint32_t>,
    .ep_atomic64_cswap = tcp_atomic_cswap<std::uint64_t>,
    .ep_pending_add = tcp_pending_add,
    .ep_pending_purge = tcp_pending_purge,
    .ep_pending_remove = tcp_pending_remove,
    .ep_flush = tcp_ep_flush,
    .ep_fence = tcp_ep_fence,
    .iface_progress = tcp_iface_progress,
    .iface_flush = tcp_iface_flush,
    .iface_fence = tcp_iface_fence,
    .iface_release_desc = nullptr,
};

}  // namespace loom::uct::tcp
