/**
 * The data path of shm endpoints: active messages into the peer's FIFO, put/get and
 * atomics on local or mapped memory, pending requests, flush and fence. Memory of
 * another process that is not mapped (a peer's registration) goes to shm_rma.cc.
 * Ends with the ops table, kShmOps.
 */
#include "uct/shm/shm_log.h"  // first: inline code of the other headers logs to shm_log()
#include "uct/shm/shm_common.h"

#include "uct/shm/shm_iface.h"

#include <cstring>

namespace loom::uct::shm {

namespace {

LOOM_ALWAYS_INLINE ShmEp* shm_ep(Ep* ep) {
    return static_cast<ShmEp*>(ep);
}
LOOM_ALWAYS_INLINE RemoteKey* remote_key(std::uint64_t rkey) {
    return reinterpret_cast<RemoteKey*>(rkey);
}

/** Fills the header of the message at @p cell (everything but seq, which publishes it). */
LOOM_ALWAYS_INLINE void set_header(Cell* cell, MsgType type, AmId id, std::size_t length,
                                   std::uint64_t cells) {
    cell->hdr.length = static_cast<std::uint32_t>(length);
    cell->hdr.cells = static_cast<std::uint16_t>(cells);
    cell->hdr.type = type;
    cell->hdr.am_id = id;
}

[[noreturn]] LOOM_COLD LOOM_NOINLINE void pack_overflow(const char* op, std::size_t length, std::size_t max) {
    LOOM_FATAL("{}: pack callback wrote {} bytes, more than the {}-byte limit", op, length, max);
}

/** An RMA operation on an endpoint that failed, or that waits for an emulated put to go out. */
LOOM_COLD LOOM_NOINLINE Status rma_blocked(const ShmEp* ep) {
    return ep->status != Status::ok ? ep->status : Status::no_resource;
}

LOOM_ALWAYS_INLINE bool rma_ready(const ShmEp* ep) {
    return LOOM_LIKELY(ep->status == Status::ok && !(ep->flags & kEpBlocked));
}

}  // namespace

// --- Active messages --------------------------------------------------------------------------

Status EpOps::am_short(Ep* base, AmId id, std::uint64_t header, const void* payload, unsigned length) {
    ShmEp* ep = shm_ep(base);
    if (LOOM_UNLIKELY(length > kMaxShort)) return Status::exceeds_limit;
    const std::size_t data = sizeof(header) + length;
    const std::uint64_t cells = msg_cells(data);
    FifoCtl* fifo = ep->fifo;
    std::uint64_t pos;
    // The success path first and marked likely: otherwise the compiler moves it to the cold
    // section with the full-FIFO path.
    if (LOOM_LIKELY(fifo_reserve(fifo, &ep->cached_tail, cells, &pos))) {
        Cell* cell = fifo->cells() + (pos & fifo->mask);
        set_header(cell, MsgType::am, id, data, cells);
        std::memcpy(cell->payload(), &header, sizeof(header));
        copy_short(cell->payload() + sizeof(header), payload, length);
        publish(cell, pos, fifo->salt);
        fifo_notify(fifo);
        return Status::ok;
    }
    return static_cast<ShmIface*>(ep->iface)->send_blocked(ep);
}

ssize_t EpOps::am_bcopy(Ep* base, AmId id, PackCallback pack, void* arg, unsigned) {
    ShmEp* ep = shm_ep(base);
    auto* iface = static_cast<ShmIface*>(ep->iface);
    // The length is known only after packing: reserve for the largest payload, give back the rest.
    const std::uint64_t reserved = iface->rx_.bcopy_cells;
    FifoCtl* fifo = ep->fifo;
    std::uint64_t pos;
    if (LOOM_UNLIKELY(!fifo_reserve(fifo, &ep->cached_tail, reserved, &pos))) {
        return static_cast<ssize_t>(iface->send_blocked(ep));
    }
    Cell* cell = fifo->cells() + (pos & fifo->mask);
    const std::size_t length = pack(cell->payload(), arg);
    if (LOOM_UNLIKELY(length > iface->rx_.max_bcopy)) pack_overflow("am_bcopy", length, iface->rx_.max_bcopy);
    const std::uint64_t cells = msg_cells(length);
    set_header(cell, MsgType::am, id, length, cells);
    if (cells < reserved) fifo_shrink(fifo, pos, cells, reserved);
    publish(cell, pos, fifo->salt);
    fifo_notify(fifo);
    return static_cast<ssize_t>(length);
}

Status EpOps::am_zcopy(Ep* base, AmId id, const void* header, unsigned header_length, const Iov* iov,
                       std::size_t iovcnt, unsigned, Completion*) {
    ShmEp* ep = shm_ep(base);
    auto* iface = static_cast<ShmIface*>(ep->iface);
    if (header_length > kMaxZcopyHeader || iovcnt > kMaxIov) return Status::exceeds_limit;
    std::size_t payload = 0;
    for (std::size_t i = 0; i < iovcnt; ++i) payload += iov[i].length;
    if (payload > iface->rx_.max_bcopy) return Status::exceeds_limit;
    const std::size_t length = header_length + payload;
    const std::uint64_t cells = msg_cells(length);
    FifoCtl* fifo = ep->fifo;
    std::uint64_t pos;
    if (!fifo_reserve(fifo, &ep->cached_tail, cells, &pos)) return iface->send_blocked(ep);
    Cell* cell = fifo->cells() + (pos & fifo->mask);
    set_header(cell, MsgType::am, id, length, cells);
    std::uint8_t* dest = cell->payload();
    if (header_length != 0) std::memcpy(dest, header, header_length);
    dest += header_length;
    for (std::size_t i = 0; i < iovcnt; ++i) {
        if (iov[i].length != 0) std::memcpy(dest, iov[i].buffer, iov[i].length);
        dest += iov[i].length;
    }
    publish(cell, pos, fifo->salt);
    fifo_notify(fifo);
    // The data is in the peer's FIFO: the buffers are free again, the operation is complete.
    return Status::ok;
}

// --- Put and get ----------------------------------------------------------------------------

Status EpOps::access_denied(const RemoteKey* rk, std::uint64_t addr, std::uint64_t len, unsigned need) {
    LOOM_LOG_ERROR(
        "access to {:#x}+{} (rights {:#x}) is outside the remote key's region {:#x}+{} (rights {:#x})", addr,
        len, need, rk->address, rk->length, static_cast<unsigned>(rk->access));
    return Status::access_denied;
}

Status EpOps::put_short(Ep* base, const void* buffer, unsigned length, std::uint64_t remote_addr,
                        std::uint64_t rkey) {
    ShmEp* ep = shm_ep(base);
    RemoteKey* rk = remote_key(rkey);
    if (LOOM_UNLIKELY(length > kMaxPutShort)) return Status::exceeds_limit;
    if (LOOM_UNLIKELY(!rk->allows(remote_addr, length, kAccessRemotePut))) {
        return access_denied(rk, remote_addr, length, kAccessRemotePut);
    }
    if (!rma_ready(ep)) return rma_blocked(ep);
    if (LOOM_LIKELY(rk->base != nullptr)) {
        copy_short(rk->base + (remote_addr - rk->address), buffer, length);
        return Status::ok;
    }
    Iov iov{buffer, length, kMemHNull};
    return remote_write(ep, rk, &iov, 1, length, remote_addr, nullptr);
}

ssize_t EpOps::put_bcopy(Ep* base, PackCallback pack, void* arg, std::uint64_t remote_addr,
                         std::uint64_t rkey) {
    ShmEp* ep = shm_ep(base);
    auto* iface = static_cast<ShmIface*>(ep->iface);
    RemoteKey* rk = remote_key(rkey);
    if (!rma_ready(ep)) return static_cast<ssize_t>(rma_blocked(ep));
    if (rk->base == nullptr) return remote_put_bcopy(ep, rk, pack, arg, remote_addr);
    const std::size_t max = iface->rx_.max_bcopy;
    if (LOOM_LIKELY(rk->allows(remote_addr, max, kAccessRemotePut))) {
        // Room for the largest payload: pack straight into the target memory.
        const std::size_t length = pack(rk->base + (remote_addr - rk->address), arg);
        if (LOOM_UNLIKELY(length > max)) pack_overflow("put_bcopy", length, max);
        return static_cast<ssize_t>(length);
    }
    // Near the end of the region: pack aside and check the actual length before copying.
    const std::size_t length = pack(iface->bounce_.data(), arg);
    if (LOOM_UNLIKELY(length > max)) pack_overflow("put_bcopy", length, max);
    if (!rk->allows(remote_addr, length, kAccessRemotePut)) {
        return static_cast<ssize_t>(access_denied(rk, remote_addr, length, kAccessRemotePut));
    }
    if (length != 0) std::memcpy(rk->base + (remote_addr - rk->address), iface->bounce_.data(), length);
    return static_cast<ssize_t>(length);
}

Status EpOps::put_zcopy(Ep* base, const Iov* iov, std::size_t iovcnt, std::uint64_t remote_addr,
                        std::uint64_t rkey, Completion* comp) {
    ShmEp* ep = shm_ep(base);
    RemoteKey* rk = remote_key(rkey);
    if (iovcnt > kMaxIov) return Status::exceeds_limit;
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < iovcnt; ++i) total += iov[i].length;
    if (!rk->allows(remote_addr, total, kAccessRemotePut))
        return access_denied(rk, remote_addr, total, kAccessRemotePut);
    if (!rma_ready(ep)) return rma_blocked(ep);
    if (rk->base != nullptr) {
        std::uint8_t* dest = rk->base + (remote_addr - rk->address);
        for (std::size_t i = 0; i < iovcnt; ++i) {
            if (iov[i].length != 0) std::memcpy(dest, iov[i].buffer, iov[i].length);
            dest += iov[i].length;
        }
        return Status::ok;
    }
    return remote_write(ep, rk, iov, iovcnt, total, remote_addr, comp);
}

Status EpOps::get_bcopy(Ep* base, UnpackCallback unpack, void* arg, std::size_t length,
                        std::uint64_t remote_addr, std::uint64_t rkey, Completion* comp) {
    ShmEp* ep = shm_ep(base);
    auto* iface = static_cast<ShmIface*>(ep->iface);
    RemoteKey* rk = remote_key(rkey);
    if (length > iface->rx_.max_bcopy) return Status::exceeds_limit;
    if (!rk->allows(remote_addr, length, kAccessRemoteGet)) {
        return access_denied(rk, remote_addr, length, kAccessRemoteGet);
    }
    if (!rma_ready(ep)) return rma_blocked(ep);
    if (rk->base != nullptr) {
        unpack(arg, rk->base + (remote_addr - rk->address), length);
        return Status::ok;
    }
    return remote_read(ep, rk, nullptr, 0, unpack, arg, length, remote_addr, comp);
}

Status EpOps::get_zcopy(Ep* base, const Iov* iov, std::size_t iovcnt, std::uint64_t remote_addr,
                        std::uint64_t rkey, Completion* comp) {
    ShmEp* ep = shm_ep(base);
    RemoteKey* rk = remote_key(rkey);
    if (iovcnt > kMaxIov) return Status::exceeds_limit;
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < iovcnt; ++i) total += iov[i].length;
    if (!rk->allows(remote_addr, total, kAccessRemoteGet))
        return access_denied(rk, remote_addr, total, kAccessRemoteGet);
    if (!rma_ready(ep)) return rma_blocked(ep);
    if (rk->base != nullptr) {
        const std::uint8_t* src = rk->base + (remote_addr - rk->address);
        for (std::size_t i = 0; i < iovcnt; ++i) {
            if (iov[i].length != 0) std::memcpy(const_cast<void*>(iov[i].buffer), src, iov[i].length);
            src += iov[i].length;
        }
        return Status::ok;
    }
    return remote_read(ep, rk, iov, iovcnt, nullptr, nullptr, total, remote_addr, comp);
}

// --- Atomics ----------------------------------------------------------------------------------

// On memory the peer mem_alloc'ed (mapped here) the CPU applies them directly; on memory it
// registered, the peer's progress applies them (emu_atomic, shm_rma.cc). Both are CPU atomic
// instructions on the same word, so they are atomic with respect to each other.

template <typename T>
Status EpOps::atomic_post(Ep* base, AtomicOp op, T value, std::uint64_t remote_addr, std::uint64_t rkey) {
    ShmEp* ep = shm_ep(base);
    RemoteKey* rk = remote_key(rkey);
    // The posted form returns nothing: swap and cswap are only meaningful fetching.
    if (LOOM_UNLIKELY(op == AtomicOp::swap || op == AtomicOp::cswap)) return Status::unsupported;
    if (LOOM_UNLIKELY(remote_addr % sizeof(T) != 0)) return Status::invalid_param;
    if (LOOM_UNLIKELY(!rk->allows(remote_addr, sizeof(T), kAccessRemoteAtomic))) {
        return access_denied(rk, remote_addr, sizeof(T), kAccessRemoteAtomic);
    }
    if (!rma_ready(ep)) return rma_blocked(ep);
    if (LOOM_UNLIKELY(rk->base == nullptr)) {
        return emu_atomic(ep, rk, op, sizeof(T), value, 0, nullptr, remote_addr, nullptr);
    }
    (void)cpu_atomic<T>(op, reinterpret_cast<T*>(rk->base + (remote_addr - rk->address)), value);
    return Status::ok;
}

template <typename T>
Status EpOps::atomic_fetch(Ep* base, AtomicOp op, T value, T* result, std::uint64_t remote_addr,
                           std::uint64_t rkey, Completion* comp) {
    ShmEp* ep = shm_ep(base);
    RemoteKey* rk = remote_key(rkey);
    if (LOOM_UNLIKELY(op == AtomicOp::cswap)) return Status::unsupported;  // ep_atomic*_cswap does it
    if (LOOM_UNLIKELY(remote_addr % sizeof(T) != 0)) return Status::invalid_param;
    if (LOOM_UNLIKELY(!rk->allows(remote_addr, sizeof(T), kAccessRemoteAtomic))) {
        return access_denied(rk, remote_addr, sizeof(T), kAccessRemoteAtomic);
    }
    if (!rma_ready(ep)) return rma_blocked(ep);
    if (LOOM_UNLIKELY(rk->base == nullptr)) {
        return emu_atomic(ep, rk, op, sizeof(T), value, 0, result, remote_addr, comp);
    }
    *result = cpu_atomic<T>(op, reinterpret_cast<T*>(rk->base + (remote_addr - rk->address)), value);
    return Status::ok;
}

template <typename T>
Status EpOps::atomic_cswap(Ep* base, T compare, T swap, std::uint64_t remote_addr, std::uint64_t rkey,
                           T* result, Completion* comp) {
    ShmEp* ep = shm_ep(base);
    RemoteKey* rk = remote_key(rkey);
    if (LOOM_UNLIKELY(remote_addr % sizeof(T) != 0)) return Status::invalid_param;
    if (LOOM_UNLIKELY(!rk->allows(remote_addr, sizeof(T), kAccessRemoteAtomic))) {
        return access_denied(rk, remote_addr, sizeof(T), kAccessRemoteAtomic);
    }
    if (!rma_ready(ep)) return rma_blocked(ep);
    if (LOOM_UNLIKELY(rk->base == nullptr)) {
        return emu_atomic(ep, rk, AtomicOp::cswap, sizeof(T), swap, compare, result, remote_addr, comp);
    }
    *result = cpu_atomic<T>(AtomicOp::cswap, reinterpret_cast<T*>(rk->base + (remote_addr - rk->address)),
                            swap, compare);
    return Status::ok;
}

// --- Pending, flush, fence ------------------------------------------------------------------

Status EpOps::pending_add(Ep* base, PendingReq* req, unsigned) {
    ShmEp* ep = shm_ep(base);
    auto* iface = static_cast<ShmIface*>(ep->iface);
    // A failed endpoint queues nothing and says why (docs/transports.md, "Back-pressure").
    if (ep->status != Status::ok) return ep->status;
    // Room now (and nobody queued before it): the caller should just retry.
    if (ep->pending.empty() && !(ep->flags & kEpBlocked) &&
        fifo_free_cells(ep->fifo) >= iface->pending_room_) {
        return Status::busy;
    }
    ep->pending.push_back(*req);
    if (!ep->pending_link.linked()) {
        iface->pending_eps_.push_back(*ep);
        iface->set_work(ShmIface::kWorkPending);
    }
    return Status::ok;
}

void EpOps::pending_purge(Ep* base, PendingPurgeCallback cb, void* arg) {
    ShmEp* ep = shm_ep(base);
    if (ep->pending_link.linked()) decltype(ShmIface::pending_eps_)::remove(*ep);
    while (PendingReq* req = ep->pending.pop_front()) {
        if (cb != nullptr) cb(req, arg);
    }
}

Status EpOps::pending_remove(Ep* base, PendingReq* req) {
    ShmEp* ep = shm_ep(base);
    if (!ep->pending.remove(*req)) return Status::no_element;
    if (ep->pending.empty() && ep->pending_link.linked()) {
        decltype(ShmIface::pending_eps_)::remove(*ep);
    }
    return Status::ok;
}

Status EpOps::ep_flush(Ep* base, unsigned flags, Completion* comp) {
    ShmEp* ep = shm_ep(base);
    auto* iface = static_cast<ShmIface*>(ep->iface);
    if (flags & kFlushCancel) {
        if (ep->emu != nullptr) {
            while (!ep->emu->sending.empty()) iface->finish_op(ep->emu->sending.front(), Status::canceled);
            while (!ep->emu->gets.empty()) iface->finish_op(ep->emu->gets.front(), Status::canceled);
            iface->maybe_unblock(ep);
        }
        return Status::ok;
    }
    if (ep->status != Status::ok) return ep->status;
    if (!ep->pending.empty()) return Status::no_resource;  // queued work is not issued yet
    // Messages, CMA and mapped accesses complete in the call; only emulated put/get can be in flight.
    if (ep->emu == nullptr || ep->emu->outstanding() == 0) return Status::ok;
    if (comp != nullptr) ep->emu->flush_waiters.push_back(comp);
    return Status::in_progress;
}

namespace {

/**
 * A release fence. ThreadSanitizer does not model standalone fences (GCC refuses them
 * under -fsanitize=thread), so that build orders through a read-modify-write of one
 * atomic, which it understands; the FIFO's own atomics carry the real ordering.
 */
inline void release_fence() {
#if defined(__SANITIZE_THREAD__)
    static std::atomic<unsigned> order{0};
    order.fetch_add(0, std::memory_order_release);
#else
    std::atomic_thread_fence(std::memory_order_release);
#endif
}

}  // namespace

Status EpOps::ep_fence(Ep* base, unsigned) {
    // Every operation of an endpoint reaches the target in issue order (one FIFO, synchronous
    // CMA and memory accesses, and an emulated put blocks the endpoint until it is all out).
    (void)base;
    release_fence();
    return Status::ok;
}

Status EpOps::iface_fence(Iface*, unsigned) {
    release_fence();
    return Status::ok;
}

const IfaceOps kShmOps = {
    .ep_am_short = EpOps::am_short,
    .ep_am_bcopy = EpOps::am_bcopy,
    .ep_am_zcopy = EpOps::am_zcopy,
    .ep_put_short = EpOps::put_short,
    .ep_put_bcopy = EpOps::put_bcopy,
    .ep_put_zcopy = EpOps::put_zcopy,
    .ep_get_bcopy = EpOps::get_bcopy,
    .ep_get_zcopy = EpOps::get_zcopy,
    .ep_atomic32_post = EpOps::atomic_post<std::uint32_t>,
    .ep_atomic64_post = EpOps::atomic_post<std::uint64_t>,
    .ep_atomic32_fetch = EpOps::atomic_fetch<std::uint32_t>,
    .ep_atomic64_fetch = EpOps::atomic_fetch<std::uint64_t>,
    .ep_atomic32_cswap = EpOps::atomic_cswap<std::uint32_t>,
    .ep_atomic64_cswap = EpOps::atomic_cswap<std::uint64_t>,
    .ep_pending_add = EpOps::pending_add,
    .ep_pending_purge = EpOps::pending_purge,
    .ep_pending_remove = EpOps::pending_remove,
    .ep_flush = EpOps::ep_flush,
    .ep_fence = EpOps::ep_fence,
    .iface_progress = ShmIface::progress,
    .iface_flush = ShmIface::flush,
    .iface_fence = EpOps::iface_fence,
    .iface_release_desc = nullptr,  // handlers get the data in place and never keep it
};

}  // namespace loom::uct::shm
