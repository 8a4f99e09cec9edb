/**
 * What shm peers share: the layout of a receive FIFO's segment, the messages written
 * into it, the device and iface addresses and the packed remote keys (private, not
 * installed). Peers run on one host, so they share the byte order and the layout;
 * every blob a peer hands over starts with a version byte (the FIFO with a magic and a
 * layout version) and is checked field by field before it is used. How producers and
 * the consumer move through the ring is in shm_fifo.h.
 *
 * Layout of a FIFO segment:
 *
 *     line 0   FifoCtl: magic, layout version, cell count, salt, owner, state (read-mostly)
 *     line 1   head: the next cell to reserve (producers CAS it; the consumer reads it to
 *              arm, and when it waits on a reservation never published: check_stalled_ring)
 *     line 2   tail: the next cell to consume (the consumer stores it; producers read it
 *              only when their cached copy says the ring is full)
 *     line 3.. cells[N], N a power of two
 *
 * Positions are absolute 64-bit cell counts (never wrap in practice); cell p lives at
 * index p & (N-1). A message occupies a contiguous run of cells starting with a 16-byte
 * MsgHeader; its data follows the header and continues through the next cells, so a
 * handler gets it in one piece, in place (zero-copy receive).
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
#include "uct/shm/shm_segment.h"

#include "ucs/sys/compiler.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

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
    atomic_req = 6,  ///< emulated atomic: AtomicRequest
    atomic_rep = 7,  ///< emulated atomic's reply (fetching ones only): AtomicReply
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
    std::uint64_t cookie;      ///< random per FIFO: the address names it, its wake-up socket uses it
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

// --- Payloads of the emulated RMA messages -----------------------------------------------

/** Emulated put: written at remote_addr after the target checked the key. */
struct PutHeader {
    std::uint64_t remote_addr;
    std::uint64_t key_id;  ///< the registration's id (from the remote key)
};

/** A peer iface's FIFO, as its address names it (and get and atomic requests their requester's). */
struct FifoAddress {
    SegmentId arena;       ///< the arena segment the FIFO is in (ArenaSlot)
    std::uint64_t offset;  ///< of the FIFO in the arena (page aligned, past the arena's header)
    std::uint64_t cookie;  ///< FifoCtl::cookie
};
static_assert(sizeof(FifoAddress) == 56 && std::is_trivially_copyable_v<FifoAddress>,
              "FifoAddress is a wire format");

/** Emulated get request: the target replies with GetReply messages to the requester's FIFO. */
struct GetRequest {
    std::uint64_t remote_addr;
    std::uint64_t length;
    std::uint64_t key_id;
    std::uint64_t op_id;      ///< the requester's id of the operation, echoed in the replies
    std::uint32_t max_chunk;  ///< largest data per reply the requester accepts
    std::uint32_t reserved;
    std::uint8_t reply_to[sizeof(FifoAddress)];  ///< the requester's FIFO
};

/** Emulated get reply: @p length bytes of data at @p offset of the operation, or an error. */
struct GetReply {
    std::uint64_t op_id;
    std::uint64_t offset;
    std::int32_t status;  ///< Status: ok, or why the target refused (no data follows then)
    std::uint32_t reserved;
};

/**
 * Emulated atomic on memory the requester has not mapped: the target applies it with a CPU
 * atomic instruction, so it stays atomic with every other path to that word (peers that
 * mapped it, tcp's target side, the owner's own atomics).
 */
struct AtomicRequest {
    std::uint64_t remote_addr;
    std::uint64_t key_id;
    std::uint64_t op_id;    ///< 0: posted (no reply); else echoed in the AtomicReply
    std::uint64_t value;    ///< the operand (cswap: the value swapped in)
    std::uint64_t compare;  ///< cswap only
    std::uint8_t op;        ///< AtomicOp
    std::uint8_t size;      ///< 4 or 8 bytes
    std::uint8_t reserved[6];
    std::uint8_t reply_to[sizeof(FifoAddress)];  ///< the requester's FIFO; fetching ones only
};

/** Emulated atomic's reply: the previous value (its low @p size bytes), or an error. */
struct AtomicReply {
    std::uint64_t op_id;
    std::uint64_t old;
    std::int32_t status;  ///< Status: ok, or why the target refused
    std::uint32_t reserved;
};

// --- Addresses ------------------------------------------------------------------------------

/** Version of the device and iface addresses. */
inline constexpr std::uint8_t kAddrVersion = 2;

/** Device address: the version byte, then host_id() (8 bytes). */
inline constexpr std::size_t kDeviceAddrLen = 1 + sizeof(std::uint64_t);
/**
 * Iface address: the version byte, the SegmentId of the arena holding the FIFO (owner
 * pid, fd or name, cookie, size; ArenaSlot), then where the FIFO starts in it and the
 * FIFO's own cookie (8 bytes each).
 */
inline constexpr std::size_t kIfaceAddrLen = 1 + sizeof(FifoAddress);

// --- Remote keys ----------------------------------------------------------------------------

/** Version of the packed remote key (2: reg keys name the owner's registration table). */
inline constexpr std::uint8_t kRkeyVersion = 2;

/** What a packed remote key names (PackedRkey::kind). */
enum class PackedKind : std::uint8_t { reg = 1, alloc = 2 };

/** A packed remote key: everything a peer needs to reach the memory and check its accesses. */
struct PackedRkey {
    std::uint8_t version;
    std::uint8_t kind;    ///< PackedKind
    std::uint8_t access;  ///< MemAccess bits
    std::uint8_t reserved;
    std::uint32_t pid;
    std::uint64_t process_cookie;
    std::uint64_t address;
    std::uint64_t length;
    std::uint64_t key_id;
    SegmentId seg;  ///< alloc: the segment to map; reg: the owner's registration table, or zero
};
static_assert(sizeof(PackedRkey) == 80 && std::is_trivially_copyable_v<PackedRkey>, "a wire format");

}  // namespace loom::uct::shm
