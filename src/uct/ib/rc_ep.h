/**
 * rc endpoints: one reliable-connection queue pair each, on the iface's shared send
 * and receive completion queues (and its SRQ where there is one).
 *
 * Send-side bookkeeping, per endpoint:
 *  - every work request gets the next sequence number (sn), carried in wr_id;
 *  - only some requests are signaled (every tx_signal_interval-th, and those whose
 *    completion someone waits for); a completion of sn n retires every request up to n,
 *    because an RC send queue completes in order;
 *  - operations that need an action on completion (a user Completion, a bounce buffer
 *    to return, data to unpack) are TxOp records queued on the endpoint in sn order;
 *  - sq_avail counts free send queue entries, the iface's cq_avail free send CQ entries
 *    (flushed requests produce an entry each, signaled or not), fc_credits the active
 *    messages the peer has receive buffers for.
 *
 * Failure: the first error completion (or a disconnect from rdma_cm) fails the
 * endpoint: its QP goes to the error state, every outstanding request completes with
 * the endpoint's error status as the device flushes it, sq_avail is made negative so
 * every new operation returns that status at the cost of the usual resource check,
 * and the user's error callback runs once from progress.
 */
#pragma once

#include "uct/api/uct.h"
#include "uct/ib/rc_wire.h"

#include "ucs/datastruct/queue.h"
#include "ucs/sys/compiler.h"

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace loom::uct::ib {

/**
 * On iWARP, requests carrying this many bytes or more are always signaled: soft-iWARP
 * sends unsignaled ones of a page or more from their pages without copying, after the
 * completions that would free them (rc_ep.cc, iwarp_must_signal).
 */
inline constexpr std::size_t kIwarpZcopyMin = 4096;

class RcIface;

/** What to do when a tracked operation completes. */
enum class TxOpKind : std::uint8_t {
    buffer,             ///< return the bounce buffer (am/put bcopy)
    buffer_completion,  ///< return the bounce buffer and update the user's Completion (am zcopy)
    completion,         ///< update the user's Completion (zcopy, flush)
    get_bcopy,          ///< unpack the bounce buffer, then update the Completion
    fetch64,            ///< copy the 8-byte result to the user, then update the Completion
    iface_flush,        ///< one endpoint's part of an iface flush
    /**
     * An atomic for the target's CPU (LOOM_IB_ATOMICS=cpu): a bounce descriptor whose
     * payload holds the request, then the RcAtomicReply; completes once both the send
     * and the reply are in (RcEpCold::cpu_atomic_sns). length: the operand size.
     */
    cpu_atomic,
};

struct IfaceFlush;

/**
 * An operation waiting for its work request to complete. Bounce-buffer descriptors
 * start with one (the buffer follows at kTxDescPayload); plain records come from a
 * pool of their own.
 */
struct TxOp {
    ucs::QueueLink link;
    std::uint64_t sn;
    Completion* comp;
    union {
        struct {
            UnpackCallback cb;
            void* arg;
        } unpack;
        void* result;
        IfaceFlush* flush;
    };
    std::uint32_t length;
    std::uint32_t lkey;  ///< bounce descriptors: the lkey of the chunk, set once by the pool
    TxOpKind kind;
};
static_assert(sizeof(TxOp) <= 60, "a TxOp must leave room for the 4-byte header before the payload");

/** A bounce descriptor: [TxOp ... | RcAmHdr at 60 | payload at 64 (seg_size bytes)]. */
inline constexpr std::size_t kTxDescHdr = 60;
inline constexpr std::size_t kTxDescPayload = 64;

/** A receive descriptor: [index at 52 | lkey at 56 | RcAmHdr at 60 | payload at 64 (seg_size bytes)]. */
inline constexpr std::size_t kRxDescLkey = 56;
inline constexpr std::size_t kRxDescHdr = 60;
inline constexpr std::size_t kRxDescPayload = 64;

/** Most scatter/gather entries of one request (iovs of a zcopy operation). */
inline constexpr std::size_t kMaxSge = 16;

/** wr_id of a send: the endpoint's 16-bit generation above this bit, the sequence number below. */
inline constexpr unsigned kWrIdGenShift = 48;
inline constexpr std::uint64_t kWrIdSnMask = (std::uint64_t{1} << kWrIdGenShift) - 1;

/** Endpoint state flags. */
enum RcEpFlags : std::uint8_t {
    kEpConnected = 1u << 0,  ///< the QP can send (RTS, or rdma_cm established)
    kEpFailed = 1u << 1,     ///< failed: see RcEpCold::status
    kEpClosing = 1u << 2,    ///< destroyed by the user, waiting for its flushed requests
    kEpPassive = 1u << 3,    ///< created by the iface for an accepted rdma_cm connection
    kEpInArbiter = 1u << 4,  ///< queued on the iface's arbiter (pending requests or a grant to send)
    kEpGrantDue =
        1u << 5,  ///< credits or atomic replies must go out but found no room (the arbiter sends them)
    kEpUnflushedWrites = 1u << 6,  ///< iWARP: writes since the last remote flush (a read is needed)
    kEpFence = 1u << 7,            ///< the next request waits for earlier reads and atomics
};

/** Connection states of an rdma_cm endpoint. */
enum class CmState : std::uint8_t {
    none,
    resolving_addr,
    resolving_route,
    connecting,
    accepting,
    connected,
    closed
};

/** The rarely touched part of an endpoint. */
struct RcEpCold {
    void (*on_error)(void* arg, Ep* ep, Status status) = nullptr;
    void* on_error_arg = nullptr;
    Status status = Status::ok;   ///< why the endpoint failed
    bool error_reported = false;  ///< on_error has been called
    rdma_cm_id* cm_id = nullptr;  ///< rdma_cm connections
    CmState cm_state = CmState::none;
    /**
     * Created with EpParams::connect_on_first_use and not used yet: no rdma_cm id, no QP;
     * the first operation that has to wait (rc_pending_add) connects to first_use_dev and
     * first_use_port (RcIface::cm_connect_on_first_use).
     */
    bool connect_on_first_use = false;
    bool rx_reserved = false;  ///< its window of receive buffers is out of the iface's budget (reserve_rx)
    RcDeviceAddress first_use_dev{};
    std::uint16_t first_use_port = 0;
    std::uint32_t psn = 0;                           ///< our first packet sequence number (verbs connect)
    std::uint16_t peer_window = 0;                   ///< accepted or held connections: the credits the peer offered
    bool hold_sends = false;                         ///< connected with kConnectHoldSends, not released yet
    ConnectCallback on_connect = nullptr;            ///< client/server endpoints (EpParams::on_connect)
    void* on_connect_arg = nullptr;
    std::vector<std::uint8_t> user_priv;             ///< client: private data for the connect request
    std::uint32_t flush_rkey = 0;                    ///< iWARP: the peer's flush word (RcCmPrivate)
    std::uint64_t flush_addr = 0;
    std::chrono::steady_clock::time_point deadline;  ///< failed or closing: when to stop waiting for flushes
    std::chrono::steady_clock::time_point probe_at;  ///< iWARP initiator, unconfirmed: when to probe next
    std::uint64_t probe_sn = 0;                      ///< sn of the last probe posted (0: none yet)
    std::uint8_t probes = 0;                         ///< probes posted so far
    /** Keep-alive (RcIface::ep_check): the sn whose answer proves the peer alive, 0 when none is awaited. */
    std::uint64_t keepalive_sn = 0;
    std::chrono::steady_clock::time_point keepalive_since;  ///< when keepalive_sn was awaited from
    std::string peer;                                ///< for log lines
    /**
     * sns of the reads and atomics that wait for their responses, oldest first (responses
     * come back in the order the requests went out). soft-iWARP completes a send or write
     * once it is handed to TCP, before the response to a read posted earlier arrives: the
     * send queue's completions come out of order there.
     */
    std::deque<std::uint64_t> response_sns;
    /** sns of our atomics for the target's CPU whose replies have not arrived, oldest first. */
    std::deque<std::uint64_t> cpu_atomic_sns;
    /** Replies to the peer's atomic requests that found no room to go out yet, in order. */
    std::deque<RcAtomicReply> replies_due;
    /**
     * A fence waits for atomics of cpu_atomic_sns: sq_avail is kept kFenceHold lower, so
     * every new request finds no room until their replies are in (RcIface::fence_release).
     */
    bool fence_held = false;
};

/** What a held fence takes off sq_avail: more than any send queue has. */
inline constexpr std::int32_t kFenceHold = 1 << 24;

/** An rc endpoint; see the file comment. */
struct RcEp : Ep {
    ibv_qp* qp;
    std::int32_t sq_avail;     ///< free send queue entries; negative once failed
    std::int16_t fc_credits;   ///< active messages the peer can take now
    std::uint16_t rx_credits;  ///< credits to return to the peer (messages we consumed)
    std::uint16_t unsignaled;  ///< requests posted since the last signaled one
    std::uint16_t gen;         ///< generation: tells this endpoint's completions from a dead one's
    std::uint8_t flags;
    /**
     * Reads and atomics posted whose own completions have not arrived (their sns are in
     * RcEpCold::response_sns). While one is due, a later request's completion does not
     * complete the requests before it: see RcIface::complete_upto.
     */
    std::uint16_t responses_due;
    std::uint32_t qp_num;
    std::int32_t rq_posted;             ///< receives posted on the QP's own queue (no SRQ)
    std::uint64_t tx_sn;                ///< sn of the last posted request
    std::uint64_t acked_sn;             ///< every request up to this sn has completed
    ucs::Queue<TxOp, &TxOp::link> ops;  ///< tracked operations, in sn order
    ucs::Queue<PendingReq, &PendingReq::link> pending;
    ucs::QueueLink arb_link;  ///< in the iface's arbiter or closing list
    RcEpCold* cold;

    /** The iface of this endpoint. */
    RcIface* rc_iface() const noexcept;
    /** True once the endpoint has failed (RcEpCold::status says why). */
    bool failed() const noexcept { return flags & kEpFailed; }
};
static_assert(sizeof(RcEp) <= 128, "rc endpoints must stay within two cache lines");

/** The data-path operations of the rc transport (rc_ep.cc). */
extern const IfaceOps kRcOps;
/** kRcOps without the atomics, for a device that has none (rc_ep.cc). */
extern const IfaceOps kRcOpsNoAtomics;
/** kRcOps with every atomic performed by the target's CPU (LOOM_IB_ATOMICS=cpu; rc_ep.cc). */
extern const IfaceOps kRcOpsCpuAtomics;

}  // namespace loom::uct::ib
