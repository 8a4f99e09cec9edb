/**
 * The receive FIFO of an shm iface: a ring of 64-byte cells in a shared segment,
 * written by any number of producers (every peer's endpoints) and read in place by one
 * consumer (the owner's progress). The segment's layout, the message header and the seq
 * rule are in shm_wire.h; this file is how producers and the consumer move through it.
 *
 * Producer: load head; compute the run (plus a padding record when the run would cross
 * the end of the ring); if head + run - cached_tail > N, reload tail, and if still full
 * return no_resource; CAS head forward; write header and data; publish with one release
 * store of the header's seq word. Consumer: one acquire load of the seq word of the cell
 * at tail; when it equals the value expected for that position, handle the message, then
 * advance tail with a release store.
 */
#pragma once

#include "uct/shm/shm_wire.h"

#include "ucs/sys/compiler.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace loom::uct::shm {

#if defined(__SANITIZE_THREAD__)
/**
 * ThreadSanitizer tracks memory by virtual address, so it cannot tell that a peer in this
 * process maps the same FIFO segment again at another address: it would miss the
 * happens-before that a message carries (data written, then the seq word released; seq
 * acquired, then the data read) and report races on the user buffers and requests that
 * messages hand over. The TSan build adds that edge by hand on this one object, for every
 * FIFO of the process (it cannot miss a real edge; it can hide a race between threads that
 * talk only over different FIFOs).
 */
inline char g_tsan_fifo_sync;
#endif

/** A message was published (TSan build: the release it does; otherwise nothing). */
LOOM_ALWAYS_INLINE void tsan_fifo_release() {
#if defined(__SANITIZE_THREAD__)
    __tsan_release(&g_tsan_fifo_sync);
#endif
}

/** A message is being consumed (TSan build: the acquire it does; otherwise nothing). */
LOOM_ALWAYS_INLINE void tsan_fifo_acquire() {
#if defined(__SANITIZE_THREAD__)
    __tsan_acquire(&g_tsan_fifo_sync);
#endif
}

/** Out of line, so the compiler calls the C library's memcpy for it (see copy_short). */
LOOM_NOINLINE void copy_long(void* dest, const void* src, std::size_t length);

/**
 * Copies @p length bytes of a short message (up to a few hundred): up to 32 bytes as a few
 * overlapping word moves, longer ones by the C library's memcpy. A plain memcpy of a length
 * the compiler knows to be bounded is inlined as `rep movs`, whose start-up alone costs more
 * than moving an 8-byte payload.
 */
LOOM_ALWAYS_INLINE void copy_short(void* dest, const void* src, std::size_t length) {
    auto* d = static_cast<std::uint8_t*>(dest);
    const auto* s = static_cast<const std::uint8_t*>(src);
    if (length >= 8) {
        if (length > 32) {
            copy_long(d, s, length);
            return;
        }
        std::uint64_t a, b, c, e;
        std::memcpy(&a, s, 8);
        std::memcpy(&b, s + length - 8, 8);
        if (length > 16) {
            std::memcpy(&c, s + 8, 8);
            std::memcpy(&e, s + length - 16, 8);
            std::memcpy(d + 8, &c, 8);
            std::memcpy(d + length - 16, &e, 8);
        }
        std::memcpy(d, &a, 8);
        std::memcpy(d + length - 8, &b, 8);
    } else if (length >= 4) {
        std::uint32_t a, b;
        std::memcpy(&a, s, 4);
        std::memcpy(&b, s + length - 4, 4);
        std::memcpy(d, &a, 4);
        std::memcpy(d + length - 4, &b, 4);
    } else if (length != 0) {
        d[0] = s[0];
        d[length - 1] = s[length - 1];
        d[length / 2] = s[length / 2];
    }
}

/** The seq value of a message published at @p pos. */
LOOM_ALWAYS_INLINE std::uint64_t seq_of(std::uint64_t pos, std::uint64_t salt) {
    return (pos + 1) ^ salt;
}

/** Publishes a message: its header fields and data must be written before. */
LOOM_ALWAYS_INLINE void publish(Cell* cell, std::uint64_t pos, std::uint64_t salt) {
    tsan_fifo_release();
    cell->hdr.seq.store(seq_of(pos, salt), std::memory_order_release);
}

/** Wakes the sleeping owner of @p fifo (cold: only when it armed); see fifo_notify. */
LOOM_COLD void fifo_wake(FifoCtl* fifo);

/** After publishing a message into @p fifo: wakes its owner if it sleeps. */
LOOM_ALWAYS_INLINE void fifo_notify(FifoCtl* fifo) {
    if (LOOM_UNLIKELY(fifo->armed.load(std::memory_order_seq_cst) != 0)) fifo_wake(fifo);
}

/** The abstract unix socket name an owner listens on for wake-ups; returns its length. */
std::size_t wake_socket_name(std::uint32_t owner_pid, std::uint64_t cookie, char (&out)[64]);

/** Writes and publishes a padding record of @p cells cells at @p pos. */
LOOM_ALWAYS_INLINE void write_pad(FifoCtl* fifo, std::uint64_t pos, std::uint64_t cells) {
    Cell* cell = fifo->cells() + (pos & fifo->mask);
    cell->hdr.length = 0;
    cell->hdr.cells = static_cast<std::uint16_t>(cells);
    cell->hdr.type = MsgType::pad;
    cell->hdr.am_id = 0;
    publish(cell, pos, fifo->salt);
}

/**
 * Reserves a contiguous run of @p cells cells (at most N/2, which the callers guarantee)
 * for one message; writes a padding record first when the run would cross the end of the
 * ring. On success stores the message's position in @p pos and returns true; returns false
 * when the ring has no room (the caller returns no_resource). @p cached_tail is the
 * caller's copy of the consumer's tail: the shared tail line is read only when the copy
 * says the ring is full.
 */
LOOM_ALWAYS_INLINE bool fifo_reserve(FifoCtl* fifo, std::uint64_t* cached_tail, std::uint64_t cells,
                                     std::uint64_t* pos) {
    const std::uint64_t mask = fifo->mask;
    std::uint64_t head = fifo->head.load(std::memory_order_relaxed);
    std::uint64_t pad, end;
    do {
        const std::uint64_t index = head & mask;
        pad = index + cells > mask + 1 ? mask + 1 - index : 0;
        end = head + pad + cells;
        if (LOOM_UNLIKELY(end - *cached_tail > mask + 1)) {
            // Acquire: the consumer is done with every cell before the tail we read.
            *cached_tail = fifo->tail.load(std::memory_order_acquire);
            if (end - *cached_tail > mask + 1) return false;
        }
    } while (
        // seq_cst on success: with the seq_cst load of armed in fifo_notify and the owner's
        // seq_cst store of armed then load of head (ShmIface::event_arm), either the owner
        // sees this reservation or the producer sees the owner armed: no lost wake-up.
        // (On x86 the locked CAS is a full barrier whatever the order asked.)
        !fifo->head.compare_exchange_weak(head, end, std::memory_order_seq_cst, std::memory_order_relaxed));
    if (LOOM_UNLIKELY(pad != 0)) write_pad(fifo, head, pad);
    *pos = head + pad;
    return true;
}

/**
 * Gives back the unused end of a reservation: the run [@p pos + @p used, @p pos +
 * @p reserved). Returns the cells once nobody reserved after us, or fills them with a
 * padding record. @p used must be >= 1 and < @p reserved.
 */
inline void fifo_shrink(FifoCtl* fifo, std::uint64_t pos, std::uint64_t used, std::uint64_t reserved) {
    std::uint64_t expected = pos + reserved;
    if (!fifo->head.compare_exchange_strong(expected, pos + used, std::memory_order_relaxed,
                                            std::memory_order_relaxed)) {
        write_pad(fifo, pos + used, reserved - used);
    }
}

/** Free cells of @p fifo as seen now (reads the shared tail). */
inline std::uint64_t fifo_free_cells(FifoCtl* fifo) {
    std::uint64_t tail = fifo->tail.load(std::memory_order_acquire);
    std::uint64_t head = fifo->head.load(std::memory_order_relaxed);
    std::uint64_t used = head - tail;
    return used > fifo->mask + 1 ? 0 : fifo->mask + 1 - used;
}

}  // namespace loom::uct::shm
