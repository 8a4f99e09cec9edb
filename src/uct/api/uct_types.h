/**
 * Transport API types: capabilities, the performance model, completions, callbacks.
 *
 * The object model is component -> memory domain (Md) -> interface (Iface) ->
 * endpoint (Ep), plus a uct Worker that owns the progress engine. Control operations
 * (open, query, addresses, create) are virtual; data operations go through an ops
 * table of plain function pointers stored in each Iface (see uct.h).
 */
#pragma once

#include "ucs/datastruct/queue.h"
#include "ucs/type/status.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <sys/types.h>

namespace loom::uct {

class Component;
class Md;
class Iface;
class Worker;
struct Ep;

/** Active-message id: 0 .. kAmIdMax-1; a handler is registered per id on each iface. */
using AmId = std::uint8_t;
inline constexpr unsigned kAmIdMax = 64;

/** Memory handle returned by Md::mem_reg / mem_alloc; opaque to the caller. */
using MemH = void*;
inline constexpr MemH kMemHNull = nullptr;

/** Remote key, as unpacked from a peer's packed key: a word the data path reads, and a handle to release. */
struct Rkey {
    std::uint64_t rkey = 0;  ///< transport-defined fast-path value (often a pointer to its unpacked key)
    void* handle = nullptr;  ///< what Component::rkey_release() frees
};

/**
 * Completion of a zcopy/get/flush operation: the transport decrements count for each
 * finished part; when it reaches zero func is called. status keeps the first error.
 * The caller owns the memory and sets count to the number of operations it covers.
 * Operations that take a Completion* accept nullptr when the caller does not need to
 * know (it will flush later); get and fetching atomics need one to learn of the data.
 */
struct Completion {
    void (*func)(Completion* self);
    int count;
    Status status;
};

/** Marks @p comp's part as finished with @p status, calling its callback when none remain. */
inline void completion_update(Completion* comp, Status status) {
    if (comp == nullptr) return;
    if (comp->status == Status::ok) comp->status = status;
    if (--comp->count == 0) comp->func(comp);
}

/** One piece of a zcopy operation: a buffer in registered memory. */
struct Iov {
    const void* buffer;
    std::size_t length;
    MemH memh;  ///< from mem_reg / mem_alloc on this md, or kMemHNull where the md needs no registration
};

/** bcopy pack callback: writes the payload to @p dest and returns its length. */
using PackCallback = std::size_t (*)(void* dest, void* arg);

/** get_bcopy unpack callback: consumes @p length fetched bytes from @p data. */
using UnpackCallback = void (*)(void* arg, const void* data, std::size_t length);

/** Flags passed to an active-message handler. */
enum AmCbFlags : unsigned {
    /** The data lives in a transport descriptor the handler may keep: returning
        Status::in_progress keeps it until Iface::release_desc(data). */
    kAmCbFlagDesc = 1u << 0,
};

/**
 * Active-message handler: @p data/@p length is the message (the 8-byte header of
 * am_short first, then its payload). Returns Status::ok when done with the data, or
 * Status::in_progress to keep it (only when flags has kAmCbFlagDesc).
 */
using AmCallback = Status (*)(void* arg, void* data, std::size_t length, unsigned flags);

/** Registration flags of an active-message handler. */
enum AmHandlerFlags : unsigned {
    kAmHandlerSync = 1u << 0,   ///< called only from Worker::progress() (the default and only mode for now)
};

/**
 * Pending request: queued by ep_pending_add after an operation returned no_resource,
 * and run again by the transport when resources free up (requests of all endpoints
 * of an iface are served fairly, round-robin by endpoint).
 */
struct PendingReq {
    /** Retries the operation: ok or in_progress dequeues it, no_resource keeps it queued at the head. */
    Status (*func)(PendingReq* self);
    ucs::QueueLink link;  ///< owned by the transport while queued
};

/** Callback of Iface::pending_purge for each request removed without running. */
using PendingPurgeCallback = void (*)(PendingReq* req, void* arg);

/** Flush flags. */
/** Flags of Iface::ep_connect_to_ep. */
enum ConnectFlags : unsigned {
    kConnectHoldSends = 1u << 0  ///< receive at once, send only after Iface::ep_release_sends
};

enum FlushFlags : unsigned {
    kFlushLocal = 0,        ///< local completion (the buffers may be reused)
    kFlushCancel = 1u << 0  ///< complete outstanding operations with Status::canceled (ep only)
};

/** Atomic operations, as bits in the capability masks. */
enum class AtomicOp : std::uint8_t { add = 0, and_ = 1, or_ = 2, xor_ = 3, swap = 4, cswap = 5 };
inline constexpr std::uint64_t atomic_op_bit(AtomicOp op) { return 1ull << static_cast<unsigned>(op); }

/** Capability flags of an iface. */
enum IfaceCap : std::uint64_t {
    kCapAmShort = 1ull << 0,
    kCapAmBcopy = 1ull << 1,
    kCapAmZcopy = 1ull << 2,
    kCapPending = 1ull << 3,
    kCapPutShort = 1ull << 4,
    kCapPutBcopy = 1ull << 5,
    kCapPutZcopy = 1ull << 6,
    kCapGetShort = 1ull << 7,
    kCapGetBcopy = 1ull << 8,
    kCapGetZcopy = 1ull << 9,
    kCapAtomic32 = 1ull << 10,
    kCapAtomic64 = 1ull << 11,
    kCapConnectToIface = 1ull << 12,          ///< Ep created from the peer's iface address
    kCapConnectToEp = 1ull << 13,             ///< Ep connected to a peer's ep address (wire-up)
    kCapErrHandlingPeerFailure = 1ull << 14,  ///< detects a dead peer and fails its endpoints
    kCapEventRecv = 1ull << 15,               ///< the event fd signals incoming messages
    kCapIntraNode = 1ull << 16,               ///< reaches only processes on the same host
    kCapSelfOnly = 1ull << 17,                ///< reaches only its own process
    kCapConnectToSockaddr = 1ull << 18,       ///< client/server: listen() and Ep from a socket address
    /**
     * The atomics are performed by the device (a NIC), not by CPU instructions: they are
     * not atomic with respect to other transports' atomics (or the CPU's) on the same word.
     * Without it, atomics are CPU atomics (uct/base/cpu_atomic.h), the initiator's or the
     * target's, and every such transport's are atomic together.
     */
    kCapAtomicDevice = 1ull << 19,
    /**
     * A peer that vanished without a word (host down, network cut) is noticed on an idle
     * endpoint only if someone asks: IfaceOps::ep_check probes it. Without the flag the
     * transport notices on its own (shm: the peer's pidfd; tcp: TCP keepalive and
     * TCP_USER_TIMEOUT; self: cannot happen).
     */
    kCapEpCheck = 1ull << 20,
    /**
     * EpParams::connect_on_first_use puts off a connection that costs something to keep
     * (tcp: a socket on each side): an endpoint never used costs none.
     */
    kCapConnectOnFirstUse = 1ull << 21,
};

/** Device types, for reporting and for the protocol layer's choices. */
enum class DeviceType : std::uint8_t { net, shm, self };

/** Name of a device type ("net", "shm", "self"). */
const char* to_string(DeviceType type) noexcept;

/** Limits of one operation family (am, put or get). */
struct OpLimits {
    std::size_t max_short = 0;   ///< largest short payload (0: no short flavour)
    std::size_t max_bcopy = 0;   ///< largest bcopy payload
    std::size_t min_zcopy = 0;   ///< smallest zcopy payload worth using
    std::size_t max_zcopy = 0;   ///< largest zcopy payload in one call
    std::size_t max_iov = 0;     ///< most Iov entries in one zcopy call
    std::size_t opt_zcopy_align = 1;  ///< best alignment of zcopy buffers
    std::size_t max_hdr = 0;     ///< am_zcopy: largest header
};

/** A linear function c + m * x, for latency as a function of the number of endpoints. */
struct LinearFunc {
    double c = 0;
    double m = 0;
    double operator()(double x) const { return c + m * x; }
};

/** Iface attributes: capabilities and the performance model the protocol layer plans with. */
struct IfaceAttr {
    std::uint64_t cap_flags = 0;
    OpLimits am, put, get;
    std::uint64_t atomic32_ops = 0, atomic64_ops = 0;  ///< AtomicOp bits (post and fetching)
    std::size_t device_addr_len = 0;
    std::size_t iface_addr_len = 0;
    std::size_t ep_addr_len = 0;
    std::size_t max_conn_priv = 0;  ///< kCapConnectToSockaddr: private data bytes a request or accept carries
    double overhead = 0;              ///< seconds of CPU per message on the sender
    /**
     * Seconds a zero-copy put or get costs on top of `overhead` (a system call, page
     * pinning); the protocol layer's rendezvous threshold reads it (0: nothing more).
     */
    double zcopy_overhead = 0;
    double bandwidth_dedicated = 0;   ///< bytes/s one process can drive alone
    double bandwidth_shared = 0;      ///< bytes/s shared by all processes on the device
    LinearFunc latency;               ///< one-way seconds as a function of the number of endpoints
    std::uint8_t priority = 0;        ///< tie-breaker between devices of equal performance
    std::size_t ep_size = 0;          ///< bytes of one endpoint object: the memory cost of a peer
};

/** Memory domain attributes. */
struct MdAttr {
    enum Flags : std::uint64_t {
        kReg = 1ull << 0,        ///< mem_reg is supported (memory must be registered for zcopy)
        kAlloc = 1ull << 1,      ///< mem_alloc is supported
        kNeedRkey = 1ull << 2,   ///< remote access requires a packed key
        kNeedMemh = 1ull << 3,   ///< zcopy iovs must carry a memh
    };
    std::uint64_t flags = 0;
    std::size_t max_alloc = 0;
    std::size_t max_reg = 0;
    std::size_t rkey_packed_size = 0;
    double reg_cost_overhead = 0;   ///< seconds per registration
    double reg_cost_per_byte = 0;   ///< seconds per registered byte
    std::string component_name;
};

/** Access rights requested from Md::mem_reg, checked on remote access where software performs it. */
enum MemAccess : unsigned {
    kAccessLocalRead = 1u << 0,
    kAccessLocalWrite = 1u << 1,
    kAccessRemotePut = 1u << 2,
    kAccessRemoteGet = 1u << 3,
    kAccessRemoteAtomic = 1u << 4,
    kAccessAll = 0x1f,
};

/** One transport on one device, as listed by Md::query_tl_resources. */
struct TlResource {
    std::string tl_name;   ///< "self", "shm", "tcp", "rc"
    std::string dev_name;  ///< "memory", "lo", "eth0", "rxe0:1"
    DeviceType dev_type = DeviceType::net;
};

}  // namespace loom::uct
