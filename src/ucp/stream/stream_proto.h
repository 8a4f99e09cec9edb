/**
 * Streams (the C API's loom_stream_*): one ordered byte stream in each direction of an
 * endpoint, without message boundaries. The sender cuts its data into eager messages
 * (am_short, then bcopy fragments of the AM lane's size) that carry its worker's uuid;
 * the receiver finds the endpoint by that uuid, fills the receives posted on it in
 * order, and queues the rest in descriptors until a receive takes it.
 * docs/protocols.md describes the wire and the choices.
 */
#pragma once

#include "ucp/core/worker.h"
#include "ucs/datastruct/list.h"
#include "ucs/memory/mem_pool.h"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <unordered_set>

namespace loom::ucp {

/** The stream protocols (in the endpoint's protocol table, src/ucp/proto). */
extern const Proto kStreamShort, kStreamBcopy;

/** Bytes that arrived before a receive wanted them; the data follows. */
struct StreamDesc {
    ucs::ListLink link;
    std::uint32_t length;  ///< bytes after the descriptor
    std::uint32_t offset;  ///< bytes already taken
    bool pooled;
    std::uint8_t* data() { return reinterpret_cast<std::uint8_t*>(this + 1); }
};

/** The receive side of one endpoint's stream. */
struct StreamEp {
    Ep* ep = nullptr;
    ucs::List<StreamDesc, &StreamDesc::link> data;        ///< queued bytes, in order
    ucs::List<Request, &Request::ep_link> recvs;          ///< posted receives, in order
    ucs::ListLink ready_link;                             ///< in StreamWorker::ready
    std::size_t queued = 0;                               ///< bytes in data
    bool holding = false;                                 ///< we told the sender to hold (window full)
    std::deque<Request*> held;                            ///< our sends waiting for the peer's window
};

/** Layout of loom_stream_poll_ep_t. */
struct StreamPollEp {
    void* ep;
    void* user_data;
    unsigned flags;
    std::uint8_t reserved[16];
};

/** The stream family's slot in Worker::family_state (core/family.h). */
inline constexpr std::uint8_t kStreamSlot = 2;

/** A worker's stream state (Worker::family_state[kStreamSlot]). */
class StreamWorker {
public:
    explicit StreamWorker(Worker& w) : worker(w) {}

    Worker& worker;
    std::unordered_map<Ep*, std::unique_ptr<StreamEp>> eps;      ///< endpoints that received or wait
    ucs::List<StreamEp, &StreamEp::ready_link> ready;            ///< with new data, for worker_poll
    std::unordered_map<void*, StreamDesc*> handed_out;           ///< by loom_stream_recv_data_nb
    ucs::MemPool pool;                                           ///< descriptors up to kSmallData bytes
    std::unordered_set<std::uint64_t> warned_uuids;              ///< senders without an endpoint, reported
    std::size_t window = 0;                                      ///< LOOM_STREAM_WINDOW

    static constexpr std::size_t kSmallData = 512;
};

/** @p w's stream state, nullptr before the family's init. */
inline StreamWorker* stream_state(Worker& w) { return static_cast<StreamWorker*>(w.family_state[kStreamSlot]); }

/**
 * Sends @p dt's bytes in one message at once when they fit one bcopy and @p ep has
 * nothing queued: ok when sent, no_resource when a request is needed, or the
 * transport's error.
 */
Status stream_send_try_now(Ep* ep, DtState& dt);

/** Starts the send of @p req (send.dt set) on @p ep; the request completes itself. ok or its error. */
Status stream_send_start(Request* req, Ep* ep);

/**
 * Receives at once into @p dt from what @p ep's stream queued, when that completes the
 * receive (whole elements, or everything with @p waitall) and no receive waits before
 * it: true with @p length set. false leaves everything as it was.
 */
bool stream_recv_now(Worker& w, Ep* ep, DtState& dt, bool waitall, std::size_t& length);

/**
 * Posts receive @p req (kReqRecv | kReqRecvLength [| kReqWaitAll], recv.dt set) on
 * @p ep: takes queued bytes first, completes when done, else waits behind earlier
 * receives. A failed endpoint completes it with its error once the queue is empty.
 * no_memory (the request is completed with it) when the state cannot be created.
 */
Status stream_recv_start(Worker& w, Ep* ep, Request* req);

/** Fills up to @p max entries with endpoints that have new data; returns how many. */
std::size_t stream_poll(Worker& w, StreamPollEp* out, std::size_t max);

/** The next queued piece of @p ep's stream, or nullptr; see loom_stream_recv_data_nb. */
void* stream_recv_data(Worker& w, Ep* ep, std::size_t& length);

/** Releases a piece from stream_recv_data; false (logged) for an unknown pointer. */
bool stream_data_release(Worker& w, void* data);

}  // namespace loom::ucp
