/**
 * The shm iface and endpoint (private to the transport).
 *
 * An iface owns a receive FIFO (shm_fifo.h) in a shared segment; its progress consumes
 * the FIFO in place and, on the slow path, serves pending requests, pushes the rest of
 * emulated puts and get replies, reports failed endpoints and checks that peers live.
 *
 * An endpoint points at the FIFO of a peer iface (a Peer, shared by every endpoint of
 * this iface that targets the same peer iface). Its data path is in shm_ep.cc.
 *
 * Peer failure: a Peer holds a pidfd of the peer process (pidfd_open when it was
 * attached). Progress polls the pidfds and the FIFOs' "closed" flags every
 * LOOM_SHM_PEER_CHECK_INTERVAL (reading the clock once every 256 calls), and a send that
 * finds the FIFO full checks its peer at once (at most every millisecond). A failed
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
#include "uct/shm/shm_fifo.h"
#include "uct/shm/shm_md.h"
#include "uct/shm/shm_segment.h"

#include "ucs/datastruct/list.h"
#include "ucs/datastruct/queue.h"
#include "ucs/time/clock.h"

#include <sys/uio.h>

#include <deque>
#include <map>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

namespace loom::uct::shm {

/** Largest am_short payload (after its 8-byte header): a short message takes at most 4 cells. */
inline constexpr std::size_t kMaxShort = 4 * kCellSize - sizeof(MsgHeader) - sizeof(std::uint64_t);
/** Largest put_short. */
inline constexpr std::size_t kMaxPutShort = kMaxShort;
/** Largest am_zcopy header, and most iovs of a zcopy operation. */
inline constexpr std::size_t kMaxZcopyHeader = 128;
inline constexpr std::size_t kMaxIov = 16;

/** Version of the device and iface addresses. */
inline constexpr std::uint8_t kAddrVersion = 1;

/** Device address: the version byte, then host_id() (8 bytes). */
inline constexpr std::size_t kDeviceAddrLen = 1 + sizeof(std::uint64_t);
/** Iface address: the version byte, then the FIFO's SegmentId (owner pid, fd or name, cookie, size). */
inline constexpr std::size_t kIfaceAddrLen = 1 + sizeof(SegmentId);

/** Whether CMA works towards a peer process. */
enum class CmaState : std::uint8_t { unknown, works, forbidden };

/** A peer iface this iface sends to: its FIFO mapped here and how to tell it is alive. */
struct Peer {
    SegmentId seg{};
    Mapping mapping;
    FifoCtl* fifo = nullptr;
    int pidfd = -1;  ///< -1 for our own process
    bool same_process = false;
    CmaState cma = CmaState::unknown;
    Status failure = Status::ok;     ///< why the peer is unusable, once detected
    unsigned refs = 0;               ///< endpoints and reply jobs using it
    std::uint64_t cached_tail = 0;   ///< for the replies this iface sends it
    ucs::Ticks next_full_check = 0;  ///< rate limit of the check a full FIFO triggers

    ~Peer();
};

class ShmIface;
struct ShmEp;

/** An emulated put or get in flight (fallback path only). */
struct EmuOp {
    enum class Kind : std::uint8_t { put, get };
    Kind kind;
    std::uint64_t id = 0;
    ShmEp* ep = nullptr;
    Completion* comp = nullptr;
    std::vector<Iov> iov;             ///< put: the source; get_zcopy: the destination
    UnpackCallback unpack = nullptr;  ///< get_bcopy
    void* unpack_arg = nullptr;
    std::uint64_t remote_addr = 0;
    std::uint64_t key_id = 0;
    std::uint64_t total = 0;
    std::uint64_t done = 0;             ///< put: bytes pushed into the FIFO; get: bytes received
    std::vector<std::uint8_t> staging;  ///< get_bcopy: the data, unpacked in one piece at the end
};

/** Outstanding emulated operations of an endpoint. */
struct EmuState {
    std::deque<EmuOp*> sending;  ///< puts not fully pushed, in order; the first blocks the endpoint
    std::vector<EmuOp*> gets;    ///< gets waiting for replies
    std::vector<Completion*> flush_waiters;
    std::size_t outstanding() const { return sending.size() + gets.size(); }
};

/** Endpoint flags. */
enum EpFlags : std::uint32_t {
    kEpBlocked = 1u << 0,      ///< an emulated put is being pushed: new sends wait (ordering)
    kEpErrorQueued = 1u << 1,  ///< in the iface's list of failures to report
};

/** An shm endpoint: the first cache line is all the send path reads. */
struct ShmEp : Ep {
    FifoCtl* fifo;              ///< the peer's FIFO, or the always-full FIFO while blocked or failed
    std::uint64_t cached_tail;  ///< our copy of the peer FIFO's tail
    Peer* peer;
    Status status;        ///< ok, or why the endpoint failed
    std::uint32_t flags;  ///< EpFlags
    ucs::Queue<PendingReq, &PendingReq::link> pending;
    // --- control ---
    ucs::ListLink pending_link;  ///< in ShmIface::pending_eps_ while it has requests
    ucs::ListLink ep_link;       ///< in ShmIface::eps_
    void (*on_error)(void* arg, Ep* ep, Status status);
    void* on_error_arg;
    EmuState* emu;  ///< allocated on the first emulated operation
};
static_assert(sizeof(ShmEp) <= 128, "endpoints exist per peer: keep them within two cache lines");
static_assert(sizeof(Ep) + 4 * sizeof(void*) + sizeof(ucs::Queue<PendingReq, &PendingReq::link>) <=
                  kCacheLineSize,
              "the send path reads one cache line of the endpoint");

/**
 * The data path of ShmEp: the IfaceOps entries (shm_ep.cc) and the paths to memory of
 * another process (shm_rma.cc). A struct so ShmIface can befriend it.
 */
struct EpOps {
    /** The ops table of every shm iface. */
    static const IfaceOps& table();

    // The IfaceOps entries: contracts in uct/api/uct.h.
    static Status am_short(Ep* ep, AmId id, std::uint64_t header, const void* payload, unsigned length);
    static ssize_t am_bcopy(Ep* ep, AmId id, PackCallback pack, void* arg, unsigned flags);
    static Status am_zcopy(Ep* ep, AmId id, const void* header, unsigned header_length, const Iov* iov,
                           std::size_t iovcnt, unsigned flags, Completion* comp);
    static Status put_short(Ep* ep, const void* buffer, unsigned length, std::uint64_t remote_addr,
                            std::uint64_t rkey);
    static ssize_t put_bcopy(Ep* ep, PackCallback pack, void* arg, std::uint64_t remote_addr,
                             std::uint64_t rkey);
    static Status put_zcopy(Ep* ep, const Iov* iov, std::size_t iovcnt, std::uint64_t remote_addr,
                            std::uint64_t rkey, Completion* comp);
    static Status get_bcopy(Ep* ep, UnpackCallback unpack, void* arg, std::size_t length,
                            std::uint64_t remote_addr, std::uint64_t rkey, Completion* comp);
    static Status get_zcopy(Ep* ep, const Iov* iov, std::size_t iovcnt, std::uint64_t remote_addr,
                            std::uint64_t rkey, Completion* comp);
    template <typename T>
    static Status atomic_post(Ep* ep, AtomicOp op, T value, std::uint64_t remote_addr, std::uint64_t rkey);
    template <typename T>
    static Status atomic_fetch(Ep* ep, AtomicOp op, T value, T* result, std::uint64_t remote_addr,
                               std::uint64_t rkey, Completion* comp);
    template <typename T>
    static Status atomic_cswap(Ep* ep, T compare, T swap, std::uint64_t remote_addr, std::uint64_t rkey,
                               T* result, Completion* comp);
    static Status pending_add(Ep* ep, PendingReq* req, unsigned flags);
    static void pending_purge(Ep* ep, PendingPurgeCallback cb, void* arg);
    static Status ep_flush(Ep* ep, unsigned flags, Completion* comp);
    static Status ep_fence(Ep* ep, unsigned flags);
    static Status iface_fence(Iface* iface, unsigned flags);

    /**
     * Writes the gathered @p iov (@p total bytes) at @p remote_addr of a peer's registration:
     * CMA, or the emulated put. With @p comp null the write must complete in the call
     * (put_short/bcopy: one fragment) or return no_resource; with @p comp it may return
     * in_progress and finish from progress.
     */
    static Status remote_write(ShmEp* ep, RemoteKey* rk, const Iov* iov, std::size_t iovcnt,
                               std::uint64_t total, std::uint64_t remote_addr, Completion* comp);

    /**
     * Reads @p total bytes at @p remote_addr of a peer's registration into @p iov, or into
     * @p unpack when it is set (get_bcopy): CMA, or the emulated get (in_progress).
     */
    static Status remote_read(ShmEp* ep, RemoteKey* rk, const Iov* iov, std::size_t iovcnt,
                              UnpackCallback unpack, void* arg, std::uint64_t total,
                              std::uint64_t remote_addr, Completion* comp);

    /**
     * put_bcopy to a peer's registration: packs into a staging buffer for CMA, or straight
     * into an emulated-put message. Returns the packed length or a negative Status.
     */
    static ssize_t remote_put_bcopy(ShmEp* ep, RemoteKey* rk, PackCallback pack, void* arg,
                                    std::uint64_t remote_addr);

    /** Pushes fragments of the emulated put @p op through @p fifo until done or full; true when done. */
    static bool push_put(ShmEp* ep, FifoCtl* fifo, EmuOp& op);

private:
    LOOM_COLD static Status access_denied(const RemoteKey* rk, std::uint64_t addr, std::uint64_t len,
                                          unsigned need);
    LOOM_COLD static Status atomic_unsupported(RemoteKey* rk);
    LOOM_COLD static Status cma_failed(ShmEp* ep, int err, bool write);
    static Status emu_put(ShmEp* ep, RemoteKey* rk, const Iov* iov, std::size_t iovcnt, std::uint64_t total,
                          std::uint64_t remote_addr, Completion* comp);
    static Status emu_get(ShmEp* ep, RemoteKey* rk, const Iov* iov, std::size_t iovcnt, UnpackCallback unpack,
                          void* arg, std::uint64_t total, std::uint64_t remote_addr, Completion* comp);
    static bool use_cma(ShmEp* ep);
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

    /** The progress function (IfaceOps::iface_progress). */
    static unsigned progress(Iface* base);

    /** IfaceOps::iface_flush. */
    static Status flush(Iface* base, unsigned flags, Completion* comp);

    /** The FIFO segment (tests: posix name, cookie). */
    const Segment& segment() const { return segment_; }

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

    /** A get being answered: the rest of its data still to send to the requester. */
    struct ReplyJob {
        Peer* peer;
        std::uint64_t op_id;
        std::uint64_t remote_addr;
        std::uint64_t key_id;
        std::uint64_t length;
        std::uint64_t offset;
        std::uint32_t max_chunk;
    };

    ShmIface(ShmMd* md, Worker* worker, const TlResource& resource, const ShmConfig& config, Segment segment);

    // Receive side (shm_iface.cc).
    LOOM_NOINLINE void handle_other(Cell* cell, std::uint32_t cells);
    void handle_put(const std::uint8_t* data, std::size_t length);
    void handle_get_request(const std::uint8_t* data, std::size_t length);
    void handle_get_reply(const std::uint8_t* data, std::size_t length);
    LOOM_COLD void bad_message(Cell* cell);
    LOOM_NOINLINE unsigned slow_progress();
    unsigned dispatch_pending();
    /** One request per endpoint; @p check_room: only endpoints with room for the largest message. */
    unsigned dispatch_pending_round(bool check_room);
    unsigned push_sending();
    unsigned push_replies();
    bool push_reply(ReplyJob& job);
    void report_errors();
    void complete_iface_flush();

    // Peers and failures.
    Result<Peer*> attach_peer(const SegmentId& seg, std::string* reason);
    void release_peer(Peer* peer);
    Status check_peer(Peer& peer);
    void check_peers();
    void peer_failed(Peer& peer, Status status);
    void fail_ep(ShmEp* ep, Status status);
    LOOM_COLD Status send_blocked(ShmEp* ep);

    // Emulated operations and CMA (shm_ep.cc).
    EmuState& emu_of(ShmEp* ep);
    void finish_op(EmuOp* op, Status status);
    void maybe_unblock(ShmEp* ep);
    void set_work(std::uint32_t bits) { rx_.slow_work |= bits; }

    Rx rx_;
    ShmConfig config_;
    Segment segment_;
    std::uint64_t max_msg_cells_;
    std::uint64_t pending_room_;        ///< free cells that make pending_add answer busy
    FifoCtl blocked_fifo_;              ///< always full: the FIFO of blocked and failed endpoints
    std::vector<std::uint8_t> bounce_;  ///< bcopy staging for CMA
    ucs::List<ShmEp, &ShmEp::pending_link> pending_eps_;
    ucs::List<ShmEp, &ShmEp::ep_link> eps_;
    std::map<std::pair<std::uint32_t, std::uint64_t>, std::unique_ptr<Peer>> peers_;  ///< by (pid, cookie)
    std::vector<ShmEp*> errors_;                      ///< failed endpoints to report from progress
    std::unordered_map<std::uint64_t, EmuOp*> gets_;  ///< emulated gets waiting for replies, by id
    std::uint64_t next_op_id_ = 1;
    std::size_t outstanding_ = 0;  ///< emulated operations of every endpoint
    std::vector<Completion*> flush_waiters_;
    int wake_fd_ = -1;  ///< the bound wake-up socket, made by the first event_fd/event_arm
    std::deque<ReplyJob> replies_;
    ucs::Ticks next_peer_check_ = 0;
    ucs::Ticks peer_check_ticks_ = 0;
    bool bad_message_logged_ = false;
};

}  // namespace loom::uct::shm
