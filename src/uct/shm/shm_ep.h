/**
 * shm endpoints (private to the transport).
 *
 * An endpoint points at the FIFO of a peer iface (a Peer, shared by every endpoint of
 * its iface that targets the same peer iface). Its data path is in shm_ep.cc, ending
 * with the ops table kShmOps; put and get to memory of another process that is not
 * mapped here are in shm_rma.cc. A failed or blocked endpoint points at its iface's
 * always-full FIFO instead of the peer's (see shm_iface.h).
 */
#pragma once

#include "uct/api/uct.h"
#include "uct/base/cpu_atomic.h"
#include "uct/shm/shm_md.h"
#include "uct/shm/shm_wire.h"

#include "ucs/datastruct/list.h"
#include "ucs/datastruct/queue.h"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace loom::uct::shm {

/** Largest am_short payload (after its 8-byte header): a short message takes at most 4 cells. */
inline constexpr std::size_t kMaxShort = 4 * kCellSize - sizeof(MsgHeader) - sizeof(std::uint64_t);
/** Largest put_short. */
inline constexpr std::size_t kMaxPutShort = kMaxShort;
/** Largest am_zcopy header, and most iovs of a zcopy operation. */
inline constexpr std::size_t kMaxZcopyHeader = 128;
inline constexpr std::size_t kMaxIov = 16;

class ShmIface;
struct Peer;
struct ShmEp;

/** An emulated put, get or fetching atomic in flight (fallback path only). */
struct EmuOp {
    enum class Kind : std::uint8_t { put, get, atomic };
    Kind kind;
    std::uint8_t result_size = 0;  ///< atomic: 4 or 8
    void* result = nullptr;        ///< atomic: where the previous value goes
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
    std::vector<EmuOp*> gets;    ///< gets and fetching atomics waiting for replies
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
    static Status pending_remove(Ep* ep, PendingReq* req);
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
    static Status emu_atomic(ShmEp* ep, RemoteKey* rk, AtomicOp op, unsigned size, std::uint64_t value,
                             std::uint64_t compare, void* result, std::uint64_t remote_addr, Completion* comp);
    LOOM_COLD static Status cma_failed(ShmEp* ep, int err, bool write);
    static Status emu_put(ShmEp* ep, RemoteKey* rk, const Iov* iov, std::size_t iovcnt, std::uint64_t total,
                          std::uint64_t remote_addr, Completion* comp);
    static Status emu_get(ShmEp* ep, RemoteKey* rk, const Iov* iov, std::size_t iovcnt, UnpackCallback unpack,
                          void* arg, std::uint64_t total, std::uint64_t remote_addr, Completion* comp);
    static bool use_cma(ShmEp* ep, const RemoteKey* rk);
};

/** Operations of the shm iface (shm_ep.cc). */
extern const IfaceOps kShmOps;

}  // namespace loom::uct::shm
