/** Entry points of the tag protocols (tag_send.cc, tag_recv.cc, tag_family.cc) for the API layer, and what rendezvous and AM reuse. */
#pragma once

#include "ucp/core/wire.h"
#include "ucp/core/worker.h"
#include "ucp/tag/tag_match.h"
#include "ucs/memory/mem_pool.h"

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

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
    /** Its fragments came in order so far: data() up to `received` holds them (else they have gaps). */
    bool in_order;
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
    // Flow control (tag_flow.cc)
    std::size_t unexp_bytes = 0;  ///< eager message bytes the unexpected descriptors hold
    std::size_t unexp_max = 0;    ///< LOOM_UNEXPECTED_MAX
    bool holding = false;         ///< the senders were told to hold back (kAmTagFlow)
    /** A middle fragment that arrived before its message's first fragment. */
    struct EarlyFrag {
        std::uint64_t offset;
        std::vector<std::uint8_t> bytes;
    };
    /**
     * Middle fragments waiting for their message's first (LOOM_MAX_EAGER_RAILS: a sender's
     * later fragments travel over other lanes than its first), by message; the first takes
     * them (tag_recv.cc). At most kMaxEarlyFragBytes in all.
     */
    std::unordered_map<FragKey, std::vector<EarlyFrag>, FragKeyHash> early_frags;
    std::size_t early_frag_bytes = 0;
    static constexpr std::size_t kMaxEarlyFragBytes = 32u << 20;
};

/** @p w's tag state. */
inline TagWorker& tag_of(Worker& w) { return *static_cast<TagWorker*>(w.family_state[kTagSlot]); }

static_assert(sizeof(TagRecvEntry) <= sizeof(RecvMatchSlot) && alignof(TagRecvEntry) <= alignof(RecvMatchSlot));
/** The matcher's entry of receive @p req (in Request::recv.entry). */
inline TagRecvEntry& recv_entry(Request* req) {
    return *std::launder(reinterpret_cast<TagRecvEntry*>(&req->recv.entry));
}

// --- flow control of unexpected messages (tag_flow.cc) ------------------------------------

/** Tells every peer to send by rendezvous (the bound is crossed) or as before (under half). */
void tag_flow_tell_all(Worker& w, bool hold);

/** An unexpected eager message of @p bytes was queued: past the bound, the senders hold back. */
inline void tag_flow_queued(Worker& w, std::size_t bytes) {
    TagWorker& t = tag_of(w);
    t.unexp_bytes += bytes;
    if (LOOM_UNLIKELY(t.unexp_bytes > t.unexp_max) && !t.holding) tag_flow_tell_all(w, true);
}

/** An unexpected eager message of @p bytes left: under half the bound, the senders go on. */
inline void tag_flow_released(Worker& w, std::size_t bytes) {
    TagWorker& t = tag_of(w);
    t.unexp_bytes -= bytes;
    if (LOOM_UNLIKELY(t.holding) && t.unexp_bytes <= t.unexp_max / 2) tag_flow_tell_all(w, false);
}

/** A new endpoint hears at once that this worker holds back its senders. */
void tag_flow_ep_created(Worker& w, Ep* ep);

/** The kAmTagFlow handler (sender side). */
Status tag_flow_handler(void* arg, void* data, std::size_t length, unsigned flags);

/** Registers the tag protocols' AM handlers on every iface of @p worker. */
Status tag_register_handlers(Worker& worker);

/**
 * Fails the receives that wait for fragments of a message from @p uuid (peer failure), and
 * drops the fragments from it that wait for their message's first.
 */
void tag_fail_peer_receives(Worker& worker, std::uint64_t uuid, Status status);

/**
 * Starts a tagged send of @p req, whose send.dt is set: picks eager or rendezvous by
 * size and runs or queues the first step. ok when started (the request completes
 * itself, possibly at once), an error (the request is completed with it) otherwise.
 */
Status tag_send_start(Request* req, Ep* ep, Tag tag, bool sync);

/**
 * loom_request_cancel of a tagged send @p req: asks the receiver to withdraw it when it
 * waits for the peer (a rendezvous before the receiver's answer, a synchronous send
 * before its acknowledgement). The send completes with canceled if the receiver had not
 * matched it, normally otherwise; nothing happens to a send that completed or that
 * waits for nobody.
 */
void tag_send_cancel(Request* req);

/**
 * The tag family's deadline hook (ProtoFamily::expire): a receive still in the matcher
 * completes with timed_out now; a send is cancelled as tag_send_cancel does, completing
 * with timed_out once the receiver withdrew it. Others are left to complete normally.
 */
bool tag_expire(Worker& worker, Request& req);

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

// --- shared with the other protocols (active messages, rendezvous) ---------------------

/**
 * Sends @p req's data from send.offset on as eager fragments (the first one as a tagged
 * kAmEagerFirst unless send.msg_id has kRndvMsgBit, then kAmEagerMiddle fragments of the
 * message msg_id), and completes the request once the last one left. A send progress
 * function: no_resource when the lane is busy.
 */
Status eager_multi_progress(Request* req);

}  // namespace loom::ucp
