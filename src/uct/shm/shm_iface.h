/**
 * The shm iface (private to the transport).
 *
 * An iface owns a receive FIFO (shm_fifo.h, its layout in shm_wire.h) in a shared
 * segment; its progress (shm_rx.cc) consumes the FIFO in place and, on the slow path,
 * serves pending requests, pushes the rest of emulated puts and get replies, reports
 * failed endpoints and checks that peers live.
 *
 * An endpoint (shm_ep.h) points at the FIFO of a peer iface (a Peer, shared by every
 * endpoint of this iface that targets the same peer iface).
 *
 * Peer failure: an iface watches each peer process once (a WatchedProcess: the pidfd
 * pidfd_open gave when the process was first attached, shared by this process's ifaces),
 * however many of its ifaces it reaches. Progress polls each watched process and reads
 * each peer FIFO's "closed" flag every LOOM_SHM_PEER_CHECK_INTERVAL (reading the clock
 * once every 256 calls), and a send that finds the FIFO full checks its peer at once (at
 * most every millisecond). A failed
 * endpoint's FIFO pointer is swapped for a FIFO that is always full, so its sends take
 * the slow path and return the error with no test on the fast path; progress then
 * completes its outstanding operations and flush requests with the error and calls
 * EpParams::on_error (which may destroy the endpoint; completion callbacks may not).
 *
 * Limits: a sender killed between reserving cells and publishing them leaves a hole the
 * consumer waits at forever (the FIFO has no record of who reserved it; every
 * lock-free ring with in-place messages shares this). An iface belongs to the process
 * that opened it: a forked child must open its own.
 */
#pragma once

#include "uct/api/uct.h"
#include "uct/shm/shm_config.h"
#include "uct/shm/shm_ep.h"
#include "uct/shm/shm_fifo.h"
#include "uct/shm/shm_md.h"
#include "uct/shm/shm_segment.h"
#include "uct/shm/shm_wire.h"

#include "ucs/datastruct/list.h"
#include "ucs/time/clock.h"

#include <sys/uio.h>

#include <deque>
#include <map>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

namespace loom::uct::shm {

/** Whether CMA works towards a peer process. */
enum class CmaState : std::uint8_t { unknown, works, forbidden };

/** A verified pidfd of a peer process, shared by the ifaces of this process (shm_iface.cc). */
struct PeerProcess;

/**
 * A peer process as one iface watches it: checked once per peer check and in the iface's
 * event set once, for every peer iface of that process (a job's peers often host one
 * worker per rank, or many).
 */
struct WatchedProcess {
    std::shared_ptr<PeerProcess> process;  ///< its pidfd, shared by the ifaces of this process
    std::uint32_t pid = 0;
    std::uint64_t start_time = 0;  ///< from the address (0: unknown)
    unsigned peers = 0;            ///< Peers of this iface in that process
    Status failure = Status::ok;   ///< endpoint_failure once it is seen gone
    bool in_event_set = false;
};

/** A peer iface this iface sends to: its FIFO mapped here and how to tell it is alive. */
struct Peer {
    SegmentId seg{};                ///< the arena the FIFO is in
    std::uint64_t fifo_cookie = 0;  ///< FifoCtl::cookie: names the peer iface
    /** The peer's segment, mapped once for every iface of this process that reaches it. */
    std::shared_ptr<const Mapping> mapping;
    /** Its process as this iface watches it (ShmIface::processes_); null for our own process. */
    WatchedProcess* process = nullptr;
    FifoCtl* fifo = nullptr;
    bool same_process = false;
    CmaState cma = CmaState::unknown;
    Status failure = Status::ok;     ///< why the peer is unusable, once detected
    unsigned refs = 0;               ///< endpoints and reply jobs using it
    std::uint64_t cached_tail = 0;   ///< for the replies this iface sends it
    ucs::Ticks next_full_check = 0;  ///< rate limit of the check a full FIFO triggers
};

/** An shm iface. */
class ShmIface final : public Iface {
public:
    /** Opens an iface; invalid_config for an inconsistent configuration, else the segment's error. */
    static Result<std::unique_ptr<Iface>> open(ShmMd* md, Worker* worker, const TlResource& resource,
                                               const ShmConfig& config);
    ~ShmIface() override;

    Status query(IfaceAttr& attr) const override;
    Status get_device_address(std::uint8_t* out) const override;
    Status get_address(std::uint8_t* out) const override;
    bool is_reachable(const std::uint8_t* dev_addr, std::size_t dev_addr_len, const std::uint8_t* iface_addr,
                      std::size_t iface_addr_len, std::string* reason) const override;
    Result<Ep*> ep_create(const EpParams& params) override;
    void ep_destroy(Ep* ep) override;
    /** The wake-up socket: readable after a producer found this iface armed. */
    Result<int> event_fd() override;
    /** Arms the FIFO (FifoCtl::armed); busy when messages or slow-path work wait. */
    Status event_arm() override;

    /** The progress function (IfaceOps::iface_progress, shm_rx.cc). */
    static unsigned progress(Iface* base);

    /** IfaceOps::iface_flush. */
    static Status flush(Iface* base, unsigned flags, Completion* comp);

private:
    friend struct EpOps;

    /** Slow-path work flags (rx_.slow_work). */
    enum Work : std::uint32_t {
        kWorkPending = 1u << 0,  ///< endpoints with pending requests
        kWorkSending = 1u << 1,  ///< emulated puts to push
        kWorkReplies = 1u << 2,  ///< get replies to push
        kWorkErrors = 1u << 3,   ///< failed endpoints to report
        kWorkFlush = 1u << 4,    ///< iface flush requests to complete
    };

    /** Progress calls between two looks at the clock for the periodic peer check. */
    static constexpr std::uint32_t kClockCheckPeriod = 256;

    /** What progress reads on every call, in one cache line. */
    struct alignas(kCacheLineSize) Rx {
        FifoCtl* ctl = nullptr;
        Cell* cells = nullptr;
        std::uint64_t mask = 0;
        std::uint64_t salt = 0;
        std::uint64_t tail = 0;
        std::uint32_t slow_work = 0;    ///< Work bits
        std::uint32_t countdown = 1;    ///< progress calls until the next look at the clock
        std::uint64_t bcopy_cells = 0;  ///< cells reserved by am_bcopy (read by the send path)
        std::uint64_t max_bcopy = 0;    ///< LOOM_SHM_MAX_BCOPY (read by the send path)
    };
    static_assert(sizeof(Rx) == kCacheLineSize);

    /** A get being answered (the rest of its data still to send to the requester), or an atomic's reply. */
    struct ReplyJob {
        Peer* peer;
        std::uint64_t op_id;
        std::uint64_t remote_addr;
        std::uint64_t key_id;
        std::uint64_t length;
        std::uint64_t offset;
        std::uint32_t max_chunk;
        bool atomic;        ///< an atomic's reply (length 0), not a get's data
        std::uint64_t old;  ///< atomic: the previous value
        std::int32_t status;  ///< atomic: Status of the operation at the target
    };

    ShmIface(ShmMd* md, Worker* worker, const TlResource& resource, const ShmConfig& config, ArenaSlot fifo);

    // Receive side and the slow path of progress (shm_rx.cc).
    LOOM_NOINLINE void handle_other(Cell* cell, std::uint32_t cells);
    LOOM_COLD void bad_message(Cell* cell);
    LOOM_NOINLINE unsigned slow_progress();
    /** Skips a reservation a dead peer left unpublished at the tail (see DEAD_PRODUCER_TIMEOUT). */
    void check_stalled_ring(ucs::Ticks now);
    unsigned dispatch_pending();
    /** One request per endpoint; @p check_room: only endpoints with room for the largest message. */
    unsigned dispatch_pending_round(bool check_room);

    // Target side of the emulated put and get, and pushing their fragments (shm_rma.cc).
    void handle_put(const std::uint8_t* data, std::size_t length);
    void handle_get_request(const std::uint8_t* data, std::size_t length);
    void handle_get_reply(const std::uint8_t* data, std::size_t length);
    void handle_atomic_request(const std::uint8_t* data, std::size_t length);
    void handle_atomic_reply(const std::uint8_t* data, std::size_t length);
    bool push_atomic_reply(ReplyJob& job);
    unsigned push_sending();
    unsigned push_replies();
    bool push_reply(ReplyJob& job);

    /** What names our FIFO to peers (our address; the requester of a get or atomic). */
    FifoAddress own_fifo() const { return {fifo_slot_.arena_id(), fifo_slot_.offset(), rx_.ctl->cookie}; }

    // Peers and failures (shm_iface.cc).
    Result<Peer*> attach_peer(const FifoAddress& addr, std::string* reason);
    void release_peer(Peer* peer);
    /** Forgets @p peer (no endpoint or job uses it), and its process once no peer is in it. */
    void erase_peer(Peer* peer);
    /** The watch of @p seg's process, made (one pidfd look-up) the first time; nullptr with @p reason when
     * gone. */
    WatchedProcess* watch_process(const SegmentId& seg, std::string* reason);
    /** Whether @p process still runs (one poll of its pidfd); records its failure. */
    Status check_process(WatchedProcess& process);
    Status check_peer(Peer& peer);
    void check_peers();
    void peer_failed(Peer& peer, Status status);
    /** Adds @p process's pidfd to the event set (if there is one), so its death wakes a sleeper. */
    void watch_in_event_set(WatchedProcess& process);
    void unwatch_in_event_set(WatchedProcess& process);
    void fail_ep(ShmEp* ep, Status status);
    LOOM_COLD Status send_blocked(ShmEp* ep);
    void report_errors();

    // Emulated operations and flush (shm_iface.cc).
    EmuState& emu_of(ShmEp* ep);
    void finish_op(EmuOp* op, Status status);
    void maybe_unblock(ShmEp* ep);
    void complete_iface_flush();
    void set_work(std::uint32_t bits) { rx_.slow_work |= bits; }

    Rx rx_;
    ShmConfig config_;
    ArenaSlot fifo_slot_;  ///< where our FIFO lives
    std::uint64_t max_msg_cells_;
    std::uint64_t pending_room_;        ///< free cells that make pending_add answer busy
    FifoCtl blocked_fifo_;              ///< always full: the FIFO of blocked and failed endpoints
    std::vector<std::uint8_t> bounce_;  ///< bcopy staging for CMA
    ucs::List<ShmEp, &ShmEp::pending_link> pending_eps_;
    ucs::List<ShmEp, &ShmEp::ep_link> eps_;
    /** Watched peer processes, by (pid, start time); declared before peers_, which point into it. */
    std::map<std::pair<std::uint32_t, std::uint64_t>, WatchedProcess> processes_;
    std::map<std::pair<std::uint32_t, std::uint64_t>, std::unique_ptr<Peer>>
        peers_;                                       ///< by (pid, FIFO cookie)
    std::vector<ShmEp*> errors_;                      ///< failed endpoints to report from progress
    std::unordered_map<std::uint64_t, EmuOp*> gets_;  ///< emulated gets and atomics waiting for replies, by id
    std::uint64_t next_op_id_ = 1;
    std::size_t outstanding_ = 0;  ///< emulated operations of every endpoint
    std::vector<Completion*> flush_waiters_;
    int wake_fd_ = -1;    ///< the bound wake-up socket, made by the first event_fd/event_arm
    int event_set_ = -1;  ///< the event fd: an epoll set of wake_fd_ and the live peer processes' pidfds
    std::deque<ReplyJob> replies_;
    ucs::Ticks next_peer_check_ = 0;
    ucs::Ticks peer_check_ticks_ = 0;
    bool bad_message_logged_ = false;
    // The ring waiting on an unpublished reservation (check_stalled_ring).
    static constexpr std::uint64_t kNotStalled = ~std::uint64_t{0};
    std::uint64_t stalled_at_ = kNotStalled;  ///< the tail position the ring waits at
    ucs::Ticks stalled_since_ = 0;
    ucs::Ticks last_peer_death_ = 0;  ///< when a peer was last found dead (0: never)
};

}  // namespace loom::uct::shm
