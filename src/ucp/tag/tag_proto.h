/** Entry points of the tag protocols (tag_proto.cc) for the API layer. */
#pragma once

#include "ucp/core/wire.h"
#include "ucp/core/worker.h"
#include "ucp/tag/tag_match.h"
#include "ucs/memory/mem_pool.h"

#include <cstddef>
#include <new>
#include <string>

namespace loom::ucp {

/** The tag family's slot in Worker::family_state (core/family.h). */
inline constexpr std::uint8_t kTagSlot = 0;

/** A message that arrived before a receive wanted it. */
struct UnexpDesc {
    TagUnexpEntry entry;
    enum Kind : std::uint8_t { eager, rts } kind;
    bool complete;          ///< every fragment has arrived
    bool sync;              ///< acknowledge the match (sreq_id)
    bool pooled;            ///< from the small-descriptor pool, else malloc'ed
    std::uint64_t sender_uuid;
    std::uint64_t sreq_id;
    std::uint64_t msg_id;
    std::size_t length;     ///< message bytes (eager) or rendezvous length
    std::size_t received;   ///< eager bytes that arrived so far
    Request* waiting;       ///< a receive that took the message before it was complete
    // the data (eager) or RtsHdr + packed key (rts) follow
    std::uint8_t* data() { return reinterpret_cast<std::uint8_t*>(this + 1); }
};

/** The tag family's state in a worker (tag_family.cc creates it). */
struct TagWorker {
    static constexpr std::size_t kSmallDescData = 512;
    TagMatcher tm;
    ucs::MemPool desc_pool;  ///< unexpected eager messages up to kSmallDescData bytes
};

/** @p w's tag state. */
inline TagWorker& tag_of(Worker& w) { return *static_cast<TagWorker*>(w.family_state[kTagSlot]); }

static_assert(sizeof(TagRecvEntry) <= sizeof(RecvMatchSlot) && alignof(TagRecvEntry) <= alignof(RecvMatchSlot));
/** The matcher's entry of receive @p req (in Request::recv.entry). */
inline TagRecvEntry& recv_entry(Request* req) {
    return *std::launder(reinterpret_cast<TagRecvEntry*>(&req->recv.entry));
}

/** Registers the tag protocols' AM handlers on every iface of @p worker. */
Status tag_register_handlers(Worker& worker);

/** Fails the receives that wait for fragments of a message from @p uuid (peer failure). */
void tag_fail_peer_receives(Worker& worker, std::uint64_t uuid, Status status);

/** Releases what a rendezvous send holds (its registration, the receiver's key for PUTs); a ProtoRelease. */
void rndv_send_release(Request* req);

/**
 * @p ep failed or goes (marked so): empties its rendezvous lane's own pending queue when
 * that is not the AM lane (queued GETs fail their receives; queued PUTs are left to the
 * failure of Ep::outstanding, which must follow), and fails with @p status the receives
 * waiting for the PUTs of its peer when @p ep is the one replies to that peer use.
 */
void rndv_ep_purge(Worker& worker, Ep* ep, Status status);

/**
 * Starts a tagged send of @p req, whose send.dt is set: picks eager or rendezvous by
 * size and runs or queues the first step. ok when started (the request completes
 * itself, possibly at once), an error (the request is completed with it) otherwise.
 */
Status tag_send_start(Request* req, Ep* ep, Tag tag, bool sync);

/**
 * Starts a receive of @p req (recv.dt set): takes @p desc, a matching unexpected
 * message already out of the queue, or queues the receive for (@p tag, @p mask).
 */
void tag_recv_start(Worker& w, Request* req, UnexpDesc* desc, Tag tag, Tag mask);

/** Probes the unexpected queue; fills @p info when found. */
UnexpDesc* tag_probe(Worker& w, Tag tag, Tag mask, bool remove, TagRecvInfo* info);

/**
 * Receives a complete unexpected eager message @p desc into @p dt at once, without a
 * request, and releases the descriptor. ok, message_truncated or an unpack error.
 */
Status tag_recv_immediate(Worker& w, UnexpDesc* desc, DtState& dt, TagRecvInfo& info);

/** The tag protocols (in the endpoint's protocol table, src/ucp/proto). */
extern const Proto kTagEagerShort, kTagEagerBcopy, kTagEagerMulti, kTagRndv;

// --- shared with the other protocols (active messages) -----------------------------------

/** Marks a send whose first fragment left: eager_multi_progress sends only middle fragments. */
inline constexpr std::uint64_t kRndvMsgBit = 1ull << 63;

/** Largest packed remote key an RTS carries (a larger one falls back to the AM pipeline). */
inline constexpr std::size_t kMaxRtsRkey = 256;

/**
 * What a rendezvous send by PUT still waits for (Request::send.rndv_wait). kSendWaitRtr
 * from the RTS on: only then is a kAmRndvPutRtr for it accepted.
 */
enum RndvSendWait : std::uint8_t {
    kSendWaitRtr = 1u << 0,    ///< the receiver's answer to the RTS
    kSendWaitPuts = 1u << 1,   ///< PUTs to issue or in flight
    kSendWaitFlush = 1u << 2,  ///< the PUT lane is not the AM lane: flush it before the FIN
    kSendWaitAts = 1u << 3,    ///< split scheme: the receiver's ATS (it GETs the head)
    kSendIssuing = 1u << 4,    ///< not a wait: a pass of rndv_put_issue runs (it sends the FIN itself)
    kSendWaitFin = 1u << 5,    ///< the FIN is still to leave (the PUTs are done)
    kSendKeyHeld = 1u << 7,    ///< not a wait: send.rndv_rkey holds an unpacked key to release
};
/** The bits that say a send is in a PUT scheme (after the receiver's PUT_RTR). */
inline constexpr std::uint8_t kSendWaitPutScheme = kSendWaitPuts | kSendWaitFlush | kSendWaitAts | kSendWaitFin;

/** What a rendezvous receive by PUT still waits for (Request::recv.rndv_wait; 0 otherwise). */
enum RndvRecvWait : std::uint8_t {
    kRecvWaitGet = 1u << 0,  ///< split scheme: the GETs of the head
    kRecvWaitFin = 1u << 1,  ///< the sender's FIN
};

/** Sends an AckHdr (@p id: kAmSyncAck, kAmRndvAts, kAmRndvRtr) to worker @p uuid; logs a failure. */
void send_ack(Worker& w, std::uint64_t uuid, uct::AmId id, std::uint64_t sreq_id, Status status);

/**
 * Sends @p req's data from send.offset on as eager fragments (the first one as a tagged
 * kAmEagerFirst unless send.msg_id has kRndvMsgBit, then kAmEagerMiddle fragments of the
 * message msg_id), and completes the request once the last one left. A send progress
 * function: no_resource when the lane is busy.
 */
Status eager_multi_progress(Request* req);

/**
 * Fills @p rts for rendezvous send @p req (which has a request id): sender, id, length,
 * msg_id, and, where the rendezvous lane can GET the buffer, its address and iface with
 * the packed key written to @p rkey_buf (kMaxRtsRkey bytes). Registers the buffer once.
 * Returns the key's length (0: AM pipeline only). rts.tag is left 0.
 */
std::size_t rndv_rts_prepare(Request* req, RtsHdr& rts, std::uint8_t* rkey_buf);

/**
 * Starts receiving the rendezvous message @p rts (with its packed key) into receive
 * @p req (recv.dt set): GET over the rendezvous lane and ATS, or RTR and the AM pipeline;
 * completes @p req (message_truncated when its buffer is short, nothing moving then).
 */
void rndv_recv_start(Worker& w, Request* req, const RtsHdr& rts, const std::uint8_t* rkey, std::size_t rkey_len);

/**
 * Whether @p pending, queued on a transport endpoint, is a rendezvous receive's GETs
 * (not a send): an endpoint purging its queue runs those once more after marking itself
 * failed, and they fail their receive.
 */
bool is_rndv_get_pending(const uct::PendingReq* pending);

/** Split scheme: the sender PUTs message bytes from this offset on (half, on a 4 KiB boundary; 0 below 8 KiB). */
std::size_t rndv_split_point(std::size_t length);

/**
 * LOOM_RNDV_SCHEME=auto: the size from which a rendezvous over the lane of iface @p wi
 * splits (the receiver GETs the head, the sender PUTs the tail); SIZE_MAX: never on that
 * lane. From the lane's device type and performance model (docs/protocols.md).
 */
std::size_t rndv_split_min(const WorkerIface& wi);

/** What rendezvous does on @p ep (the scheme, by size where auto splits), for the protocol table's printout. */
std::string rndv_describe(const Worker& w, const Ep& ep);

/** Proto::describe of the rendezvous protocols (tag, AM): ", " and rndv_describe. */
std::string rndv_scheme_describe(const ProtoInit& init, const ProtoCaps& caps);

}  // namespace loom::ucp
