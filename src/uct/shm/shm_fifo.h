/**
 * The receive FIFO of an shm iface: a ring of 64-byte cells in a shared segment,
 * written by any number of producers (every peer's endpoints) and read in place by one
 * consumer (the owner's progress).
 *
 * Layout of the segment:
 *
 *     line 0   FifoCtl: magic, layout version, cell count, salt, owner, state (read-mostly)
 *     line 1   head: the next cell to reserve (producers CAS it; the consumer never reads it)
 *     line 2   tail: the next cell to consume (the consumer stores it; producers read it
 *              only when their cached copy says the ring is full)
 *     line 3.. cells[N], N a power of two
 *
 * Positions are absolute 64-bit cell counts (never wrap in practice); cell p lives at
 * index p & (N-1). A message occupies a contiguous run of cells starting with a 16-byte
 * MsgHeader; its data follows the header and continues through the next cells, so a
 * handler gets it in one piece, in place (zero-copy receive).
 *
 * Producer: load head; compute the run (plus a padding record when the run would cross
 * the end of the ring); if head + run - cached_tail > N, reload tail, and if still full
 * return no_resource; CAS head forward; write header and data; publish with one release
 * store of the header's seq word. Consumer: one acquire load of the seq word of the cell
 * at tail; when it equals the value expected for that position, handle the message, then
 * advance tail with a release store.
 *
 * The seq word of a published message at position p is (p + 1) ^ salt, salt random per
 * FIFO with the top bit set. A cell that is not the start of a message published for the
 * current position can hold only a stale header (an older position: a different value)
 * or data bytes of an older message; the latter match only if the data contains that
 * exact random 64-bit value, so cells never need clearing after use and the consumer
 * writes nothing but tail.
 */
#pragma once

#include "uct/api/uct_types.h"

#include "ucs/sys/compiler.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace loom::uct::shm {

inline constexpr std::size_t kCellSize = kCacheLineSize;
inline constexpr std::uint64_t kFifoMagic = 0x4f4649464d4f4f4cull;  // "LOOMFIFO"
inline constexpr std::uint32_t kFifoLayoutVersion = 2;  // 2: FifoCtl::armed

/** What a message carries. */
enum class MsgType : std::uint8_t {
    am = 1,       ///< an active message: data is the AM payload (short: 8-byte header first)
    pad = 2,      ///< cells to skip (end of the ring, or the unused part of a bcopy reservation)
    put = 3,      ///< emulated put: PutHeader, then the bytes to write
    get_req = 4,  ///< emulated get request: GetRequest
    get_rep = 5,  ///< emulated get reply: GetReply, then the bytes read
};

/** Start of the first cell of every message. */
struct MsgHeader {
    std::atomic<std::uint64_t> seq;  ///< (position + 1) ^ salt once published
    std::uint32_t length;            ///< bytes of data after the header
    std::uint16_t cells;             ///< cells of the whole message, this one included
    MsgType type;
    AmId am_id;
};
static_assert(sizeof(MsgHeader) == 16, "the header leaves 48 bytes of data in the first cell");

/** One ring cell. */
struct alignas(kCellSize) Cell {
    MsgHeader hdr;
    std::uint8_t data[kCellSize - sizeof(MsgHeader)];

    /** The message data, which continues into the following cells. */
    std::uint8_t* payload() { return reinterpret_cast<std::uint8_t*>(this) + sizeof(MsgHeader); }
};
static_assert(sizeof(Cell) == kCellSize);

/** FIFO states (FifoCtl::state). */
enum FifoState : std::uint32_t { kFifoOpen = 1, kFifoClosed = 2 };

/** The control lines at the start of a FIFO segment. */
struct FifoCtl {
    // Line 0: written once by the owner before the address is published (state again at close).
    std::uint64_t magic;
    std::uint32_t layout_version;
    std::uint32_t cell_count;  ///< N
    std::uint64_t mask;        ///< N - 1
    std::uint64_t salt;        ///< see the file comment
    std::uint64_t cookie;      ///< equals the segment cookie: a second check after mapping
    std::uint32_t owner_pid;
    std::atomic<std::uint32_t> state;  ///< FifoState; kFifoClosed once the owner closed the iface
    std::uint32_t max_msg_cells;       ///< the largest message the owner sends (for peers' limits)
    /**
     * 1 while the owner sleeps on its wake-up socket (event_arm): the producer that sees it
     * after publishing clears it and wakes the owner (fifo_notify). Here, in the line every
     * producer already reads, so an awake owner costs producers no extra cache miss.
     */
    std::atomic<std::uint32_t> armed;
    std::uint32_t reserved[2];

    alignas(kCacheLineSize) std::atomic<std::uint64_t> head;
    alignas(kCacheLineSize) std::atomic<std::uint64_t> tail;

    /** The ring, right after the control lines. */
    Cell* cells() { return reinterpret_cast<Cell*>(reinterpret_cast<std::uint8_t*>(this) + sizeof(FifoCtl)); }
};
static_assert(sizeof(FifoCtl) == 3 * kCacheLineSize, "control lines: ctl, head, tail");

/** Bytes of a FIFO segment with @p cells cells. */
constexpr std::size_t fifo_segment_size(std::size_t cells) {
    return sizeof(FifoCtl) + cells * kCellSize;
}

/** Cells of a message with @p length bytes of data. */
constexpr std::uint32_t msg_cells(std::size_t length) {
    return static_cast<std::uint32_t>((sizeof(MsgHeader) + length + kCellSize - 1) / kCellSize);
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

// --- Payloads of the emulated RMA messages -----------------------------------------------

/** Emulated put: written at remote_addr after the target checked the key. */
struct PutHeader {
    std::uint64_t remote_addr;
    std::uint64_t key_id;  ///< the registration's id (from the remote key)
};

/** Emulated get request: the target replies with GetReply messages to the requester's FIFO. */
struct GetRequest {
    std::uint64_t remote_addr;
    std::uint64_t length;
    std::uint64_t key_id;
    std::uint64_t op_id;      ///< the requester's id of the operation, echoed in the replies
    std::uint32_t max_chunk;  ///< largest data per reply the requester accepts
    std::uint32_t reserved;
    std::uint8_t reply_to[40];  ///< the requester's FIFO (a SegmentId)
};

/** Emulated get reply: @p length bytes of data at @p offset of the operation, or an error. */
struct GetReply {
    std::uint64_t op_id;
    std::uint64_t offset;
    std::int32_t status;  ///< Status: ok, or why the target refused (no data follows then)
    std::uint32_t reserved;
};

}  // namespace loom::uct::shm
