/**
 * RMA and atomics of the protocol layer: memory mappings (registrations of one region on
 * every memory domain of a context), remote keys (packed by the owner, unpacked by a peer
 * for the transport of its endpoint's RMA lane), and put, get, atomic operations, fence
 * and the RMA part of flush. docs/protocols.md ("RMA and atomics") describes the wire
 * format of a packed key and the choices.
 */
#pragma once

#include "ucp/core/worker.h"
#include "ucs/memory/mem_pool.h"

#include <cstdint>
#include <vector>

namespace loom::ucp {

/** The RMA family's slot in Worker::family_state (core/family.h). */
inline constexpr std::uint8_t kRmaSlot = 3;

/** A worker's RMA state. */
struct RmaWorker {
    ucs::MemPool ops;  ///< completion records of transfers in flight (RmaOp)
};

/** @p w's RMA state. */
inline RmaWorker& rma_of(Worker& w) { return *static_cast<RmaWorker*>(w.family_state[kRmaSlot]); }

/** One memory domain's part of a mapping. */
struct MemReg {
    uct::Md* md = nullptr;
    const ContextResource* rsc = nullptr;  ///< a resource of that md (component, md attributes)
    uct::MemH memh = uct::kMemHNull;
};

/** A mapping (the C API's loom_mem_h). */
struct Mem {
    Context* context = nullptr;
    std::uint8_t* address = nullptr;
    std::size_t length = 0;
    unsigned access = 0;          ///< uct::MemAccess bits
    uct::Md* alloc_md = nullptr;  ///< allocated by this md's mem_alloc (its memh is in regs)
    bool allocated = false;       ///< Loom allocated the memory (alloc_md, or mmap without one)
    std::vector<MemReg> regs;     ///< one per memory domain that registers memory

    /** The registration on @p md, or kMemHNull. */
    uct::MemH memh_of(const uct::Md* md) const {
        for (const MemReg& r : regs) {
            if (r.md == md) return r.memh;
        }
        return uct::kMemHNull;
    }
};

/** Version of the packed remote key; unpack refuses others. */
inline constexpr std::uint8_t kRkeyVersion = 2;

/** An unpacked remote key (the C API's loom_rkey_h): what the data path reads first. */
struct RmaRkey {
    std::uint64_t uct_rkey;  ///< the transport's fast-path key value
    std::uint64_t address;   ///< the owner's region, in its address space
    std::uint64_t length;
    std::uint64_t remote_uuid;  ///< the endpoint it was unpacked on leads to this worker ...
    std::uint8_t iface;         ///< ... over this local iface
    std::uint8_t access;        ///< uct::MemAccess bits the owner granted
    std::uint32_t put_short;    ///< that lane's put.max_short (0 without put_short): the put fast path
    std::size_t put_bcopy;      ///< that lane's put.max_bcopy (0 without put_bcopy)
    std::uint64_t features;     ///< the context's LOOM_FEATURE_* bits
    const uct::Component* component;
    uct::Rkey handle;  ///< released through component

    /** True when [addr, addr + len) lies in the region and @p need rights were granted. */
    bool allows(std::uint64_t addr, std::uint64_t len, unsigned need) const {
        const std::uint64_t offset = addr - address;  // wraps to a huge value below the region
        return offset <= length && len <= length - offset && (access & need) == need;
    }
};

/** Per-endpoint RMA state bits (Ep::rma_flags). */
enum RmaEpFlags : std::uint8_t {
    kRmaUsed = 1u << 0,   ///< a key was unpacked on it: flushes include the transport's flush
    kRmaFence = 1u << 1,  ///< a fence waits for the next operation (requests were queued)
};

/** The RMA protocols (in the endpoint's protocol table, src/ucp/proto). */
extern const Proto kPutShort, kPutBcopy, kPutZcopy, kGetBcopy, kGetZcopy, kAtomic;

/** The lane RMA uses on @p ep: the rendezvous lane when there is one, else the AM lane. */
inline std::uint8_t rma_lane(const Ep* ep) {
    return ep->rndv_lane != kNoLane ? ep->rndv_lane : ep->am_lane;
}

// --- memory (rma_mem.cc) -------------------------------------------------------------------

/**
 * Maps @p length bytes at @p address, or allocates them (@p allocate), with @p access
 * (uct::MemAccess bits): see loom_mem_map. The status of the transport that refused.
 */
Result<Mem*> mem_map(Context& context, void* address, std::size_t length, bool allocate, unsigned access,
                     bool fixed = false);

/** Releases a mapping; invalid_param (logged) for one of another context. */
Status mem_unmap(Context& context, Mem* mem);

/** The packed remote key of @p mem. */
std::vector<std::uint8_t> rkey_pack(const Mem& mem);

/** Unpacks @p data (@p length bytes) for @p ep's RMA lane; invalid_param (logged) when malformed. */
Result<RmaRkey*> rkey_unpack(Ep* ep, const void* data, std::size_t length);

/** Releases an unpacked key. */
void rkey_destroy(RmaRkey* rkey);

// --- operations (rma_proto.cc) ---------------------------------------------------------------

/** Parameters of one operation, from the C API's loom_request_param_t. */
struct RmaArgs {
    const Mem* memh = nullptr;  ///< maps the local buffer (LOOM_OP_ATTR_FIELD_MEMH)
    void* reply = nullptr;      ///< atomics: fetch into this
    bool force_imm = false;     ///< LOOM_OP_ATTR_FLAG_FORCE_IMM_CMPL
    bool no_imm = false;        ///< LOOM_OP_ATTR_FLAG_NO_IMM_CMPL
};

/** The status of a check of rma_check that failed (logged); out of line. */
Status rma_check_failed(Ep* ep, const RmaRkey* rkey, std::uint64_t remote_addr, std::size_t length,
                        unsigned access);

/**
 * Checks a put or get on @p ep through @p rkey: ok, or the status to return at once
 * (invalid_param for a key of another endpoint, access_denied outside the key, the
 * endpoint's failure, unsupported without the RMA feature), each logged.
 */
LOOM_ALWAYS_INLINE Status rma_check(Ep* ep, const RmaRkey* rkey, std::uint64_t remote_addr,
                                    std::size_t length, unsigned access) {
    if (LOOM_LIKELY(!(ep->flags & kEpNotReady) && rkey->remote_uuid == ep->remote_uuid &&
                    rkey->iface == ep->lanes[rma_lane(ep)].iface && (rkey->features & kFeatureRma) &&
                    rkey->allows(remote_addr, length, access))) {
        return Status::ok;
    }
    return rma_check_failed(ep, rkey, remote_addr, length, access);
}

/** A put_bcopy of @p length bytes at @p buffer; what ep_put_bcopy returns. */
ssize_t rma_put_bcopy_bytes(uct::Ep* ep, const void* buffer, std::size_t length, std::uint64_t remote_addr,
                            std::uint64_t rkey);

/**
 * A contiguous put of @p length bytes that needs no request: short or bcopy, nothing
 * queued before it, no fence waiting. ok (done), no_resource (take the request path),
 * or an error. The caller checked the access (rma_check).
 */
LOOM_ALWAYS_INLINE Status rma_put_immediate(Ep* ep, const void* buffer, std::size_t length,
                                            std::uint64_t remote_addr, const RmaRkey* rkey) {
    const std::uint8_t lane = rma_lane(ep);
    const std::uint32_t queued = ep->queued_on(lane);
    if (LOOM_UNLIKELY(queued != 0 || (ep->rma_flags & kRmaFence))) return Status::no_resource;
    uct::Ep* uep = ep->lanes[lane].ep;
    if (length <= rkey->put_short) {
        return uct::ep_put_short(uep, buffer, static_cast<unsigned>(length), remote_addr, rkey->uct_rkey);
    }
    if (length <= rkey->put_bcopy) {
        ssize_t n = rma_put_bcopy_bytes(uep, buffer, length, remote_addr, rkey->uct_rkey);
        return n < 0 ? static_cast<Status>(n) : Status::ok;
    }
    return Status::no_resource;
}

/** Starts put (@p get false) or get request @p req, whose rma.dt is set; the request completes itself. */
void rma_start_transfer(Request* req, Ep* ep, std::uint64_t remote_addr, const RmaRkey* rkey, bool get,
                        const Mem* memh);

/**
 * A posted atomic (no reply) that needs no request: ok, no_resource (take the request
 * path) or an error.
 */
Status rma_atomic_post_immediate(Ep* ep, uct::AtomicOp op, unsigned size, std::uint64_t value,
                                 std::uint64_t remote_addr, const RmaRkey* rkey);

/** Starts atomic request @p req (post when @p reply is null); the request completes itself. */
void rma_start_atomic(Request* req, Ep* ep, uct::AtomicOp op, unsigned size, std::uint64_t value,
                      std::uint64_t compare, void* reply, std::uint64_t remote_addr, const RmaRkey* rkey);

/**
 * Checks an atomic on @p ep: the lane's capability for @p op at @p size bytes and the
 * context's features; ok, unsupported (logged) or the endpoint's failure.
 */
Status rma_atomic_check(Ep* ep, const RmaRkey* rkey, uct::AtomicOp op, unsigned size,
                        std::uint64_t remote_addr);

/** Fences @p ep's RMA lane (at once, or before the next operation when requests are queued). */
Status rma_ep_fence(Ep* ep);

}  // namespace loom::ucp
