/**
 * tcp endpoints and connections.
 *
 * One TcpEp object is one TCP connection, and every connection carries traffic both
 * ways: the requests and active messages of the side that owns it as an endpoint, and
 * the replies to them; and, when the peer uses the same connection for its own
 * endpoint, the peer's requests and the answers to those. Frames say which they are.
 * Replies come back in request order, so the initiator matches them against a FIFO of
 * outstanding requests without request ids.
 *
 * An endpoint the user creates connects to the peer iface (the *active* side). The
 * iface that accepts a connection represents it with an internal *passive* TcpEp. To
 * keep one socket per pair of ifaces (so that TCP acknowledgements ride on the data of
 * the other direction instead of costing a packet each), a passive connection is
 * adopted as the endpoint when the user later creates an endpoint to the iface that
 * connected; and when both sides connect at the same time, the side with the higher
 * iface cookie takes over the connection of the lower one and closes its own, while
 * the lower side holds its answer to the higher side's handshake until its own
 * connection is up (so the race has one outcome). A second endpoint to the same peer
 * gets a connection of its own. Destroying an endpoint closes its connection; a peer
 * endpoint sharing it fails with connection_reset. An endpoint created with
 * connect_on_first_use is idle (no socket, no receive state, in TcpIface::idle_) until
 * its first send, or until the peer's connection arrives and it takes that one.
 *
 * One connection per endpoint, no striping: on the development machine (2 cores,
 * loopback) a plain 1 MiB socket stream over two connections was slower than over one
 * (about 5.0-5.6 against 6.0-6.4 GB/s): the copy into and out of the kernel is the
 * limit and both connections share the same cores. So there is no LOOM_TCP_CONNS.
 *
 * Connection states (both sides):
 *
 *     idle --(first operation: wake)--> connecting                     (connect_on_first_use only)
 *     idle --(the peer connects to us first: its connection is adopted)--> connected
 *     connecting --(connect done, ConnRequest sent)--> handshake --(ConnReply ok)--> connected
 *         ^  |                                   (passive: accepted, waiting for ConnRequest)
 *         |  +--(refused: retry after an interval, up to LOOM_TCP_CONN_RETRIES)
 *     any --(reset, EOF, malformed frame, timeout)--> failed      (user eps: on_error from progress)
 *
 * Send side: at most one partially written frame per connection (tx). While it is set,
 * every send returns no_resource and the caller queues a PendingReq; the iface
 * dispatches pending requests round-robin across endpoints when their connection can
 * take more. A send that the socket does not take completely is never refused: its
 * unsent bytes are kept in tx (copied for short and bcopy, referenced for zcopy) and
 * written from progress, so buffered data is bounded to one frame per connection.
 *
 * Before the connection is up, sends are staged: whole frames (zcopy payloads included)
 * are copied into the tx buffer, up to its size (LOOM_TCP_SEG_SIZE plus header room),
 * and written once the handshake completes; a frame that does not fit returns
 * no_resource. So an endpoint is usable right after ep_create, with bounded memory.
 */
#pragma once

#include "uct/api/uct.h"
#include "uct/tcp/tcp_wire.h"

#include "ucs/datastruct/list.h"
#include "ucs/datastruct/queue.h"
#include "ucs/sys/compiler.h"

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace loom::uct::tcp {

class TcpIface;

/** Most Iov entries of one zcopy operation. */
inline constexpr std::size_t kMaxIov = 8;
/** iovecs of one frame: the headers, then the user's pieces. */
inline constexpr std::size_t kMaxTxIov = kMaxIov + 2;
/** Room for the headers of one frame, in front of the data in a TxDesc. */
inline constexpr std::size_t kMaxHeaderRoom = 256;
/**
 * Receive-buffer room beyond LOOM_TCP_SEG_SIZE: a short or bcopy message carries a whole
 * segment of payload (a 64 KiB message is one frame), its headers come on top.
 */
inline constexpr std::size_t kRxHeadroom = 64;
/** Largest am_zcopy user header. */
inline constexpr std::size_t kMaxAmZcopyHeader = 128;
/** Frames of this many payload bytes or more are bulk transfers (congestion control, see TcpIface::note_bulk). */
inline constexpr std::size_t kBulkFrame = 128 * 1024;
/** Small frames in a row after which a bulk connection returns to the system's congestion control. */
inline constexpr unsigned kBulkLinger = 1024;
/** Congestion control of bulk transfers on loopback (always offered: reno is built into every kernel). */
inline constexpr const char* kBulkCongestion = "reno";
/** Largest RMA transfer (put/get zcopy) in one frame. */
inline constexpr std::size_t kMaxRmaFrame = 1ull << 30;

enum class ConnState : std::uint8_t {
    idle,        ///< active, created with connect_on_first_use: no socket until the first operation (wake)
    connecting,  ///< active: connect() in flight, or waiting to retry (fd == -1)
    handshake,   ///< active: ConnRequest sent; passive: accepted, waiting for ConnRequest
    connected,
    failed,  ///< unusable: cold->error says why
};

/** TcpEp::flags bits. */
enum EpFlags : std::uint8_t {
    kEpPassive = 1u << 0,      ///< accepted by the iface and not (yet) adopted as a user endpoint
    kEpDirty = 1u << 1,        ///< posted puts/atomics since the last remote flush
    kEpUnpolled = 1u << 2,     ///< the iface's hot connection: open, read directly, left out of the epoll set
    kEpDestroyed = 1u << 3,    ///< destroyed during progress: freed at its end
    kEpFailPending = 1u << 4,  ///< failed; teardown and on_error at the end of progress
    kEpTimed = 1u << 5,        ///< counted in the iface's connecting (timeout-checked) set
    kEpDeferred = 1u << 6,     ///< passive, handshake: the answer waits for our own connection to the peer
    kEpBulk = 1u << 7,         ///< LOOM_TCP_CONGESTION=auto: switched to the bulk algorithm (TcpIface::note_bulk)
};

/**
 * A frame being written: iovecs over the headers (copied into data) and either copied
 * payload (data too) or the user's zcopy memory. From the iface's tx pool.
 *
 * A staging buffer (stage_class != 0, TcpIface::stage) holds one contiguous run of frames
 * and uses iov[0] alone: its bytes start right after iov[0] (staged_data()), where the
 * other iovecs and data would be, so that a staging element is 128 bytes smaller than
 * the full header.
 */
struct TxDesc {
    Completion* comp;  ///< am_zcopy: completed when the last byte is written
    std::uint8_t iovcnt;
    std::uint8_t iov_pos;
    std::uint8_t stage_class;  ///< 0: a segment's data; else from tx_stage_pools_[stage_class - 1]
    iovec iov[kMaxTxIov];
    alignas(16) std::uint8_t data[];  ///< kMaxHeaderRoom + seg_size bytes (not in a staging buffer)
};

/** Where the bytes of a staging buffer (@p desc->stage_class != 0) are: after its iov[0]. */
inline std::uint8_t* staged_data(TxDesc* desc) {
    return reinterpret_cast<std::uint8_t*>(&desc->iov[1]);
}

/** Size of a staging element with @p bytes of data. */
inline constexpr std::size_t staged_desc_size(std::size_t bytes) {
    return offsetof(TxDesc, iov) + sizeof(iovec) + bytes;
}

/**
 * Frames staged before a connection is up start in a buffer of the first of these sizes
 * that holds them, and move to the next (and then to a whole segment's) only when more is
 * staged: every endpoint stages its wire-up message, and a job that connects to a
 * thousand peers at once would otherwise touch a page of a 64 KiB buffer per peer, kept
 * by the pool ever after. 256: a wire-up message over tcp on a host with two network
 * devices (162 bytes with its frame header) and a first small message (24 bytes for 8 of
 * data); 1024: the wire-up message of a worker with many devices and transports.
 * contrib/bench/epmem.c: every endpoint holds one while 256 connect at once, 320 bytes
 * each (704 when the only size was 512 and the full header came with it).
 */
inline constexpr std::size_t kStageBytes[] = {256, 1024};
inline constexpr std::size_t kNumStageClasses = std::size(kStageBytes);
static_assert(staged_desc_size(kStageBytes[0]) + 128 <= sizeof(TxDesc) + kStageBytes[0],
              "a staging buffer leaves most of the header out");

/** What an outstanding request waits for. */
enum class ReqKind : std::uint8_t { put_ack, get_bcopy, get_zcopy, atomic, flush_remote, flush_local };

/** An operation waiting for the target's reply (or a flush marker), in request order. From the iface's req pool. */
struct ReqDesc {
    ucs::QueueLink link;
    ReqKind kind;
    std::uint8_t size;    ///< atomic: 4 or 8
    std::uint8_t iovcnt;  ///< get_zcopy
    Completion* comp;
    std::uint64_t length;  ///< get: bytes expected
    union {
        struct {
            UnpackCallback cb;
            void* arg;
        } unpack;          ///< get_bcopy
        void* result;      ///< atomic
    };
    iovec iov[kMaxIov];    ///< get_zcopy destinations
};

/** A reply waiting for the connection's tx: small, its data inline or in registered memory (get). */
struct ReplyDesc {
    ucs::QueueLink link;
    FrameHeader header;
    std::uint64_t value;  ///< inline data (atomic reply)
    const void* data;     ///< get reply: the target's memory; else &value or nullptr
    std::size_t length;
};

/** Receive side of a connection: a buffer of whole frames, or a payload streamed to its destination. */
struct RxState {
    std::uint32_t length;  ///< bytes in data
    std::uint8_t mode;     ///< RxMode
    FrameType frame;       ///< direct/discard: the frame being received
    std::uint8_t status;   ///< discard: the status to report when done (wire form)
    std::uint8_t nseg;
    std::uint8_t seg_pos;
    bool ack;                 ///< direct/discard put: answer with put_ack
    AmId am_id;               ///< direct am: the message's id
    bool expect_large;        ///< a streamed frame just ended: read only the next frame's headers first
    std::uint8_t* large;      ///< direct am: the buffer the message is received into
    std::uint64_t remaining;  ///< direct/discard: payload bytes still to come
    iovec seg[kMaxIov];       ///< direct: where the payload goes
    /**
     * TcpIface::rx_size() bytes of frames, or nullptr: a connection holds a buffer only
     * while it reads (UCX does the same), so a thousand idle connections do not keep a
     * thousand segments resident; the pool hands the last one returned out again.
     */
    std::uint8_t* data;
};

enum RxMode : std::uint8_t { kRxFrames = 0, kRxDirect = 1, kRxDiscard = 2 };

struct EpCold;

/** One connection; see the file comment. */
struct TcpEp : Ep {
    TxDesc* tx;         ///< partially written frame, or nullptr
    int fd;
    ConnState state;
    std::uint8_t flags;  ///< EpFlags
    std::uint8_t retries;
    std::uint8_t poll;   ///< ucs::kEvent* bits registered with the iface's epoll set
    RxState* rx;
    ucs::Queue<PendingReq, &PendingReq::link> pending;
    ucs::Queue<ReqDesc, &ReqDesc::link> outstanding;
    ucs::ListLink pending_link;  ///< in TcpIface::pending_eps_ while pending is not empty
    ucs::ListLink conn_link;     ///< in TcpIface::conns_ (or its zombie list)
    EpCold* cold;

    /** True when a new frame can be written now. */
    bool can_send() const { return state == ConnState::connected && tx == nullptr; }

    /**
     * True while the connection is not up yet: frames are staged (copied) until it is (an
     * idle endpoint starts connecting when the first one is staged).
     */
    bool can_stage() const { return state != ConnState::connected && state != ConnState::failed; }
};
static_assert(sizeof(TcpEp) <= 112, "tcp endpoints stay small: cold state lives in EpCold");

/** Operations of the tcp iface (tcp_ep.cc). */
extern const IfaceOps kTcpOps;

}  // namespace loom::uct::tcp
