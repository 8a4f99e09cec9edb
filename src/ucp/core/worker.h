/**
 * A protocol-layer worker: one iface per transport resource of its context, the
 * progress engine that drives them, the tag matcher, the request pool, and the
 * endpoints to peer workers. Not thread-safe by itself: the C API holds mt_lock
 * (WorkerGuard) around every call on a LOOM_THREAD_MODE_MULTI worker (docs/protocols.md).
 */
#pragma once

#include "ucp/core/context.h"
#include "ucp/core/ep.h"
#include "ucp/core/family.h"
#include "ucp/core/request.h"
#include "ucp/proto/proto.h"
#include "ucs/async/event_fd.h"
#include "ucs/datastruct/list.h"
#include "ucs/memory/mem_pool.h"
#include "ucs/time/clock.h"
#include "uct/api/uct.h"
#include "uct/base/uct_worker.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace loom::ucp {

class Listener;
struct UnexpDesc;

/** One iface of a worker. */
struct WorkerIface {
    std::unique_ptr<uct::Iface> iface;
    uct::IfaceAttr attr;
    const ContextResource* rsc = nullptr;
};

/** One transport address in a peer's worker address. */
struct RemoteIface {
    std::string tl_name;
    uct::DeviceType dev_type = uct::DeviceType::net;
    std::uint64_t cap_flags = 0;
    float latency = 0;    ///< seconds
    float bandwidth = 0;  ///< bytes per second
    float overhead = 0;   ///< seconds
    std::uint8_t priority = 0;
    std::uint8_t md_index = 0;  ///< the peer's memory domain of this iface (its remote keys name it)
    /**
     * The iface's position in the peer's worker: what wire messages name it by (lanes,
     * rendezvous). Not its position in this address, which may leave ifaces out
     * (LOOM_WORKER_ADDRESS_FLAG_NET_ONLY).
     */
    std::uint8_t index = 0;
    std::vector<std::uint8_t> dev_addr;
    std::vector<std::uint8_t> iface_addr;
};

/** A peer's worker address, unpacked and validated. */
struct UnpackedAddress {
    std::uint64_t uuid = 0;
    std::vector<RemoteIface> ifaces;
};

/**
 * A flag of the protocol layer in an address entry's capability word, a bit no transport
 * capability uses: the sender only carries wire-up on this transport (LOOM_TLS "tcp:aux"),
 * so that both sides leave it out of their data lanes alike.
 */
inline constexpr std::uint64_t kAddrCapAuxOnly = 1ull << 63;

/** Version of the packed worker address; unpack refuses others with version_mismatch. */
inline constexpr std::uint8_t kAddressVersion = 3;

/** Key of a multi-fragment message being assembled. */
struct FragKey {
    std::uint64_t uuid;
    std::uint64_t msg_id;
    bool operator==(const FragKey&) const = default;
};
struct FragKeyHash {
    std::size_t operator()(const FragKey& k) const noexcept { return k.uuid * 0x9e3779b97f4a7c15ull ^ k.msg_id; }
};

/**
 * Where the later fragments of a message go: a matched receive, or the tag family's
 * unexpected descriptor (tag/tag_proto.h).
 */
struct FragTarget {
    Request* recv = nullptr;
    UnexpDesc* desc = nullptr;
};

struct WorkerParams {
    uct::ThreadMode thread_mode = uct::ThreadMode::single;
};

class Worker;

/**
 * Fails, with LOOM_ERR_TIMED_OUT and one log line, the endpoints whose wire-up is still
 * unanswered at its deadline; looks at the clock every 256th call. Returns endpoints failed.
 */
unsigned wireup_check_deadlines(Worker& worker);

/**
 * A keep-alive round (keepalive.cc) when one is due: every transport endpoint that
 * cannot notice a vanished peer on its own (kCapEpCheck) of every endpoint with error
 * handling mode peer is checked; those unanswered for LOOM_KEEPALIVE_INTERVAL x
 * (LOOM_KEEPALIVE_COUNT - 1) fail. Looks at the clock every 256th call. Returns endpoints failed.
 */
unsigned keepalive_progress(Worker& worker);

/** Sets up the worker's keep-alive from the context's configuration, once its ifaces are open. */
void keepalive_init(Worker& worker);

/** The sizes below which @p ep's API fast path sends @p op by eager short (Ep::tag_short_limit, ...). */
std::uint32_t fast_path_limit(const Ep& ep, ProtoOp op);

/**
 * How long an endpoint whose peer closed an extra rendezvous rail waits for its AM lane to
 * end too before it fails: the peer closes all its connections at once, and the messages
 * it sent on the AM lane before (an ATS, its last tagged message) come first there.
 */
inline constexpr std::int64_t kRailCloseGraceNs = 1'000'000'000;

/**
 * True when @p status from @p uep, a lane of @p ep, is the peer closing a rendezvous rail
 * other than the first in order (connection_reset on a lane that carries only rail GETs):
 * the endpoint does not fail on it alone. Another lane's connection may still hold what
 * the peer sent before it closed (separate connections are not ordered with each other).
 */
bool rail_close_waits(const Ep& ep, const uct::Ep* uep, Status status);

/** The settings the tcp ifaces get from LOOM_KEEPALIVE_*, unless LOOM_TCP_KEEPALIVE_* are set. */
ucs::config::Overrides keepalive_tcp_overrides(const ContextConfig& config);

class Worker {
public:
    /** Opens an iface on every resource of @p ctx and registers the protocol handlers. */
    static Result<std::unique_ptr<Worker>> create(Context& ctx, const WorkerParams& params);

    /** Fails what is outstanding with canceled, destroys endpoints and ifaces. */
    ~Worker();
    Worker(const Worker&) = delete;
    Worker& operator=(const Worker&) = delete;

    /** Runs the transports' progress and deferred work; returns events handled. */
    unsigned progress() {
        unsigned n = uct_worker.progress();
        if (LOOM_UNLIKELY(!flush_waiters.empty())) n += check_flushes();
        if (LOOM_UNLIKELY(!listeners.empty())) n += cm_progress(n);
        if (LOOM_UNLIKELY(wireup_waiting != 0)) n += wireup_check_deadlines(*this);
        if (LOOM_UNLIKELY(--keepalive_countdown == 0)) n += keepalive_progress(*this);
        if (LOOM_UNLIKELY(!deadlines.empty())) n += check_deadlines();
        if (LOOM_UNLIKELY(!deferred_callbacks.empty())) n += run_deferred_callbacks();
        if (LOOM_UNLIKELY(!rails_closed.empty())) n += check_rails_closed();
        return n;
    }

    /**
     * Starts a flush of @p ep (nullptr: every endpoint) in @p req; with @p close the
     * endpoint is closed once flushed. The request completes from progress().
     */
    void flush_start(Request* req, Ep* ep, bool close);

    /**
     * A flush of @p ep (nullptr: every endpoint) that needs no request: true when nothing is
     * outstanding and every family's part is done in the call (ProtoFamily::flush_idle),
     * with the result in @p status; false when the flush must wait (flush_start).
     */
    bool flush_idle(Ep* ep, Status& status);

    /** Closes @p ep now (after its flush): destroyed, or kept as the peer's reply endpoint. */
    void ep_close_now(Ep* ep, bool force);

    /**
     * The packed address: version, uuid and every iface's transport address; with
     * @p net_only only those of network devices (what a peer on another host can use).
     */
    std::vector<std::uint8_t> pack_address(bool net_only = false) const;

    /**
     * Validates and unpacks a packed address from @p data (at most @p max_length bytes
     * are read). invalid_address, version_mismatch, each with a log line.
     */
    static Result<UnpackedAddress> unpack_address(const void* data, std::size_t max_length);

    /**
     * Creates an endpoint to @p address; see Ep. With @p explain, what became of every
     * transport for this peer (used as which lane, or why not), one line each.
     */
    Result<Ep*> ep_create(const UnpackedAddress& address, bool internal, unsigned flags_to_set,
                          std::string* explain = nullptr);

    /** The size ranges of @p ep's protocols and their lanes, one line each after @p prefix. */
    std::string describe_protocols(const Ep& ep, const char* prefix) const;

    /**
     * Tells the peer of @p ep who we are, so it can reply (sync acknowledgements,
     * rendezvous), and starts connecting @p ep's endpoint-to-endpoint lanes (wireup.cc).
     */
    Status send_wireup(Ep* ep);

    /**
     * The checks of an API call on @p ep that found one of kEpNotReady: the status to
     * return for a failed or closing endpoint; for an idle one (its first operation), sends
     * its wire-up request and returns ok, or fails it with the error.
     */
    LOOM_COLD Status ep_first_use(Ep* ep);

    /**
     * Sends a control message on lane @p lane of @p ep: the AM lane goes through
     * send_ctrl (ordered with the endpoint's other sends), another lane through the same
     * send queue (send_request_start) on that lane. ok or an error.
     */
    Status send_ctrl_on_lane(Ep* ep, std::uint8_t lane, uct::AmId id, const void* data, std::size_t length);

    /** Destroys @p ep now: its outstanding sends complete with @p status. */
    void ep_destroy(Ep* ep, Status status);

    /** Marks @p ep failed with @p status: fails its requests and calls its error callback. */
    void ep_fail(Ep* ep, Status status);

    /**
     * A lane of @p ep reported @p status from its transport endpoint @p uep: fails @p ep,
     * unless that is the peer's orderly close of an extra rendezvous rail
     * (rail_close_waits), which waits for the AM lane (kEpRailClosed).
     */
    void lane_failed(Ep* ep, const uct::Ep* uep, Status status);

    /**
     * Sends a small control message (a wire header of @p length bytes) on @p ep's AM
     * lane, queueing it when the transport lacks resources. ok or an error.
     */
    Status send_ctrl(Ep* ep, uct::AmId id, const void* data, std::size_t length);

    // --- wake-up (LOOM_FEATURE_WAKEUP; docs/protocols.md)
    /** The fd to sleep on (readable when progress may have work), or -1 without the feature. */
    int event_fd() const { return epoll_fd_; }
    /**
     * Prepares a sleep on event_fd(): ok when nothing is pending, busy when progress has
     * work now (or signal() was called), unsupported without LOOM_FEATURE_WAKEUP.
     */
    Status arm();
    /**
     * arm(), then sleeps until an event when it returned ok; returns ok (also at once on
     * busy), or an error. In thread mode multi the worker's lock is released while asleep.
     */
    Status wait();
    /** Wakes a thread in wait() or asleep on event_fd(); any thread, any time. */
    Status signal();
    /** With wake-up: makes @p fd (a listener's socket) wake the worker when readable. */
    void watch_fd(int fd);

    // --- requests
    /** A request from the pool, flags cleared; nullptr when memory is exhausted. */
    Request* alloc_request();
    /** Places a request in the caller's memory @p handle (request_size bytes before it are ours). */
    Request* init_caller_request(void* handle);
    /**
     * Completes @p req with @p status: runs its callback, unless the application freed
     * it first (then it is released, and no callback ever runs for it).
     */
    void complete(Request* req, Status status);
    /**
     * @p req completed inside the call that started it, which hands it out anyway
     * (LOOM_OP_ATTR_FLAG_NO_IMM_CMPL): its completion is reported, and its callback run,
     * from the next progress().
     */
    void defer_callback(Request* req);
    /** Releases @p req when it has completed and been freed. */
    void release(Request* req);

    Context& context;
    uct::Worker uct_worker;
    std::vector<WorkerIface> ifaces;
    /** Resources of the context this worker has no iface on, each with why. */
    std::vector<std::string> ifaces_left_out;
    std::uint64_t uuid = 0;
    ucs::MemPool req_pool;
    RequestTable req_table;
    /** Each protocol family's state, at its slot (family.h); nullptr before its init. */
    std::array<void*, kMaxFamilies> family_state{};
    std::unordered_map<std::uint64_t, Ep*> ep_by_uuid;
    /** Endpoints with endpoint-to-endpoint lanes: their wire-up ids (wireup.cc). */
    struct EpWireup {
        std::uint64_t id = 0;         ///< names the endpoint in wire-up messages
        std::uint64_t remote_id = 0;  ///< the peer endpoint's id, 0 until it is known
        /** When an unanswered wire-up fails the endpoint (LOOM_WIREUP_TIMEOUT); 0 once its lanes are up. */
        ucs::Ticks deadline = 0;
    };
    std::unordered_map<const Ep*, EpWireup> wireup_state;
    std::unordered_map<std::uint64_t, Ep*> wireup_by_id;
    std::uint64_t next_wireup_id = 1;
    std::uint32_t wireup_waiting = 0;  ///< entries of wireup_state with a deadline
    std::uint32_t wireup_countdown = 1;  ///< progress calls until the deadlines are looked at again
    /** Progress calls until keepalive_progress looks at the clock (far away when keep-alive is off). */
    std::uint32_t keepalive_countdown = UINT32_MAX;
    ucs::Ticks keepalive_period =
        0;  ///< 0: keep-alive is off (no iface needs it, or LOOM_KEEPALIVE_INTERVAL=inf)
    ucs::Ticks keepalive_next = 0;  ///< when the next round is due
    /**
     * Multi-fragment messages being assembled, shared by the families whose messages
     * come in fragments (tag and AM eager, rendezvous PUTs): message ids are unique per
     * sending worker, whatever the family.
     */
    std::unordered_map<FragKey, FragTarget, FragKeyHash> frags;
    /**
     * Endpoints whose peer closed an extra rendezvous rail (kEpRailClosed), and when they
     * fail unless their AM lane ends first (rail_closed).
     */
    std::vector<std::pair<Ep*, ucs::Ticks>> rails_closed;
    /** Parts of rendezvous messages GET over a rail other than the first (rndv_rails.cc; tests read it). */
    std::uint64_t rndv_rail_parts = 0;
    /** Eager middle fragments sent over a rail other than the AM lane (eager rails; tests read it). */
    std::uint64_t eager_rail_frags = 0;
    ucs::List<Ep, &Ep::worker_link> eps;
    ucs::List<Request, &Request::ep_link> flush_waiters;  ///< flush and close requests
    /** A request with a deadline (LOOM_OP_ATTR_FIELD_DEADLINE) and when it expires. */
    struct DeadlineEntry {
        ucs::Ticks at;
        Request* req;
    };
    /** The requests with a deadline; progress() reads the clock only while there are some. */
    std::vector<DeadlineEntry> deadlines;
    ucs::Ticks next_deadline = 0;  ///< the earliest entry's `at`

    /**
     * Gives @p req, just handed to the application and not complete, a deadline at @p at
     * (a ucs::get_time() value): when it passes, progress() sets req->expired and withdraws
     * the operation where it still can (deadline.cc), completing it with timed_out.
     */
    void deadline_arm(Request* req, ucs::Ticks at);
    /** Requests completed inside their call whose callbacks run from progress (defer_callback). */
    ucs::List<Request, &Request::ep_link> deferred_callbacks;
    std::uint64_t next_msg_id = 1;
    std::uint32_t num_ifaces_with_progress = 0;
    /**
     * LOOM_THREAD_MODE_MULTI: every C API call on the worker holds mt_lock (WorkerGuard).
     * Recursive, because completion callbacks run under it and may call the API again.
     */
    bool multi_threaded = false;
    uct::ThreadMode thread_mode = uct::ThreadMode::single;  ///< as asked for at creation
    std::recursive_mutex mt_lock;
    /** Threads asleep in wait(): a completion by another thread must wake them (multi). */
    std::atomic<std::uint32_t> sleepers{0};
    /** Client/server listeners of this worker (listener.h); served from progress. */
    std::vector<Listener*> listeners;
    /** The protocol table of an endpoint configuration: endpoints over the same ifaces share it. */
    struct ProtoTableEntry {
        std::uint8_t am_iface;
        std::uint8_t rndv_iface;  ///< 0xff: no rendezvous lane
        std::array<std::uint8_t, kMaxRndvRails> rail_ifaces;  ///< of rails 2.. (0xff: none)
        std::unique_ptr<ProtoTable> table;
    };
    std::vector<ProtoTableEntry> proto_tables;
    /** The table for @p ep's lanes, built the first time; nullptr without memory. */
    const ProtoTable* proto_table(const Ep& ep);

private:
    /** Arms deadline_timer_ for the earliest deadline (disarms it when none): busy when one is due now. */
    Status arm_deadline_timer();
    /** Publishes @p req's completion and runs its callback; the last access to @p req. */
    void report_completion(Request* req);
    /** Reports the completions defer_callback() queued. */
    unsigned run_deferred_callbacks();
    /** Completes the flush requests whose endpoints have nothing outstanding. */
    unsigned check_flushes();
    /** Expires the requests whose deadline passed (deadline.cc); returns how many. */
    unsigned check_deadlines();
    /** Fails the endpoints of rails_closed whose grace ran out; returns how many. */
    unsigned check_rails_closed();
    /** Takes @p ep out of rails_closed (it fails or goes). */
    void forget_rail_closed(Ep* ep);
    /** Drops @p req's entry in deadlines (it completes first). */
    void deadline_forget(Request* req);
    /** With LOOM_FEATURE_WAKEUP: the epoll set of the ifaces' fds and the signal fd. */
    Status init_wakeup();
    /**
     * Serves the listeners: every call when the transports had nothing to do (@p busy is
     * 0), else every 64th, so a listening server pays no system call per busy progress.
     */
    unsigned cm_progress(unsigned busy);
    unsigned cm_countdown_ = 1;

    int epoll_fd_ = -1;
    ucs::EventFd wake_signal_;
    /**
     * A timerfd in the worker's epoll set, armed by arm() for the earliest deadline of an
     * operation (LOOM_OP_ATTR_FIELD_DEADLINE) or a wire-up: a worker asleep wakes when one
     * is due, so the operation expires without anything else arriving.
     */
    int deadline_timer_ = -1;
    bool deadline_timer_armed_ = false;
    bool completed_since_arm_ = false;  ///< multi: a request completed since the last arm()

    explicit Worker(Context& ctx, uct::ThreadMode mode) : context(ctx), uct_worker(mode) {}
    Status init();
};

/**
 * Holds @p worker's lock for the scope when it was created with LOOM_THREAD_MODE_MULTI;
 * otherwise a predictable branch and nothing else.
 */
class WorkerGuard {
public:
    explicit WorkerGuard(Worker& worker) : worker_(worker.multi_threaded ? &worker : nullptr) {
        if (LOOM_UNLIKELY(worker_ != nullptr)) worker_->mt_lock.lock();
    }
    ~WorkerGuard() {
        if (LOOM_UNLIKELY(worker_ != nullptr)) worker_->mt_lock.unlock();
    }
    WorkerGuard(const WorkerGuard&) = delete;
    WorkerGuard& operator=(const WorkerGuard&) = delete;

private:
    Worker* worker_;
};

/** Deregisters @p req's memh from its lane's memory domain (the ProtoRelease of requests holding only that). */
void request_release_memh(Request* req);

/**
 * The one send queue of an endpoint's lanes, for every request that runs on a lane
 * (sends, RMA, control messages, a receive's rendezvous GETs, a send's PUTs): runs
 * @p req's protocol step (progress) now, or queues it on lane @p lane behind that lane's
 * earlier requests (counted in Ep::queued_on(lane)), so nothing overtakes a queued
 * request. ok when the step ran (the protocol completes the request itself, possibly
 * later) or the request was queued; an error, the request failed through @p abort
 * (nullptr: Worker::complete), when it could not be queued. @p abort also fails it if
 * the endpoint fails or goes while it waits (Worker::ep_fail, ep_destroy).
 */
Status send_request_start(Request* req, std::uint8_t lane, ProtoAbort abort = nullptr);

/** send_request_start on the endpoint's AM lane. */
inline Status send_request_start(Request* req) { return send_request_start(req, req->ep->am_lane); }

/**
 * Past its deadline: @p req, a send or RMA operation still waiting in its lane's queue
 * with nothing handed to the transport yet (its protocol's first step, no byte out),
 * leaves the queue, the requests behind it keeping their order, and fails through its
 * abort with timed_out. False when it is not such a request; the peer never hears of it.
 */
bool send_request_withdraw(Request* req);

/**
 * A control request of @p ep holding a copy of @p data (message @p id) for lane @p lane,
 * ready for send_request_start; nullptr without memory.
 */
Request* make_ctrl_request(Worker& worker, Ep* ep, std::uint8_t lane, uct::AmId id, const void* data,
                           std::size_t length);

/** Sends @p length bytes at @p data as one am_bcopy; returns what ep_am_bcopy returns. */
ssize_t am_bcopy_bytes(uct::Ep* ep, uct::AmId id, const void* data, std::size_t length);

// --- wire-up and lane selection (src/ucp/core) ---------------------------------------------

/** Handles a peer's wire-up message: request, reply or acknowledgement (src/ucp/core/wireup.cc). */
Status wireup_handler(void* arg, void* data, std::size_t length, unsigned flags);

/**
 * Registers @p ep for wire-up when it has endpoint-to-endpoint lanes (wireup.cc); the
 * LOOM_WIREUP_TIMEOUT deadline starts unless @p ep is idle (then at wireup_ep_woken).
 */
void wireup_ep_created(Worker& worker, Ep* ep);

/** @p ep is idle no more: its wire-up deadline starts if its lanes still wait for the peer. */
void wireup_ep_woken(Worker& worker, Ep* ep);

/** Forgets @p ep's wire-up state (its lanes' queued messages were purged with the rest). */
void wireup_ep_gone(Worker& worker, Ep* ep);

/**
 * Whether @p ep gains by staying idle until its first operation (LOOM_LAZY_CONNECT): a
 * lane whose transport puts off its connection (uct::kCapConnectOnFirstUse: tcp's
 * sockets), or endpoint-to-endpoint lanes (their wire-up). An endpoint over shm alone
 * has nothing to put off (wireup.cc).
 */
bool ep_saves_by_waiting(const Worker& worker, const Ep& ep);

/** Lane selection for an endpoint (worker.cc). */
Status ep_select_lanes(Worker& worker, const UnpackedAddress& address, Ep& ep, std::string* explain);

/**
 * Which of @p ep's rendezvous rails also carry eager middle fragments (Ep::eager_rail_mask,
 * LOOM_MAX_EAGER_RAILS): those other than the AM lane that send active messages of the
 * AM lane's size, in rail order.
 */
void ep_select_eager_rails(const Worker& worker, Ep& ep);

}  // namespace loom::ucp
