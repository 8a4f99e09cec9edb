/**
 * Registrations published to peers, so that CMA reaches only registered memory.
 *
 * With CMA the kernel copies straight between two address spaces and the target never
 * sees the access: nothing but the initiator can check that it stays inside a region the
 * target registered. So every process publishes its live registrations (mem_reg, not
 * mem_alloc: peers map those segments and cannot reach beyond them) in one shared
 * segment, created on the first registration and mapped read-only by peers when they
 * unpack a key that names it. Before each CMA access the initiator checks the key's slot:
 * the same key id (a deregistered region's slot is cleared, a reused slot gets a new id),
 * the range inside the region, the rights granted.
 *
 * A key id is (nonce << kSlotBits) | slot: the slot is where the region is published, the
 * nonce (from a per-process counter with a random start) makes every registration's id
 * unique. A registration that finds the table full (kSlotCount live ones) gets no slot:
 * peers reach it through the emulated put/get, which the owner checks itself.
 *
 * Slots are written under the process's region lock and read by peers without one, as a
 * sequence lock whose sequence is the key id (ids never repeat): the writer clears the id,
 * writes the fields (release: after the clear), then stores the new id (release); a reader
 * loads the id, the fields (acquire: before what follows) and the id again, and one that
 * sees the same id both times has read the fields of that registration. No fences (which
 * ThreadSanitizer does not take), and on x86 every access is a plain move.
 *
 * What this does not close: a target that deregisters a region while a peer's CMA to it
 * is under way (the check came first). Real RDMA has the same window: deregistering memory
 * that a peer is accessing is the target's error.
 */
#pragma once

#include "uct/shm/shm_segment.h"

#include "ucs/sys/compiler.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace loom::uct::shm {

/** Bits of a key id that name its slot. */
inline constexpr unsigned kSlotBits = 24;
/** The slot part of a key id without a published slot. */
inline constexpr std::uint64_t kNoSlot = (std::uint64_t{1} << kSlotBits) - 1;
/** Registrations a process publishes at once (2 MiB of table, touched only as used). */
inline constexpr std::uint32_t kSlotCount = 1u << 16;
static_assert(kSlotCount < kNoSlot);

inline constexpr std::uint64_t kRegTableMagic = 0x5347455245424154ull;  // "TABEREGS"
inline constexpr std::uint32_t kRegTableLayoutVersion = 1;

/** Start of the table segment: written once by the owner before any key names it. */
struct RegTableHeader {
    std::uint64_t magic;
    std::uint32_t layout_version;
    std::uint32_t capacity;        ///< slots after the header
    std::uint64_t cookie;          ///< the segment's cookie
    std::uint64_t process_cookie;  ///< the owner's ProcessIdentity::cookie
    std::uint32_t owner_pid;
    std::uint32_t reserved[7];
};
static_assert(sizeof(RegTableHeader) == 64);

/** One published registration (all zero while free). */
struct RegSlot {
    std::atomic<std::uint64_t> key_id;  ///< 0 while free or being rewritten
    std::atomic<std::uint64_t> address;
    std::atomic<std::uint64_t> length;
    std::atomic<std::uint64_t> access;  ///< MemAccess bits
};
static_assert(sizeof(RegSlot) == 32 && std::atomic<std::uint64_t>::is_always_lock_free,
              "slots are read by other processes");

/** The slot of key id @p key_id (kNoSlot when it has none). */
constexpr std::uint64_t slot_of(std::uint64_t key_id) {
    return key_id & kNoSlot;
}

/**
 * Whether @p slot (of a peer's table) still publishes @p key_id, covering
 * [addr, addr + len) with the @p need rights. Lock-free; a few loads.
 */
inline bool slot_allows(const RegSlot& slot, std::uint64_t key_id, std::uint64_t addr, std::uint64_t len,
                        unsigned need) {
    if (slot.key_id.load(std::memory_order_acquire) != key_id) return false;
    const std::uint64_t base = slot.address.load(std::memory_order_acquire);
    const std::uint64_t length = slot.length.load(std::memory_order_acquire);
    const std::uint64_t access = slot.access.load(std::memory_order_acquire);
    if (slot.key_id.load(std::memory_order_relaxed) != key_id) return false;  // rewritten meanwhile
    const std::uint64_t offset = addr - base;  // wraps to a huge value below the region
    return offset <= length && len <= length - offset && (access & need) == need;
}

/**
 * Checks that the mapping at @p base (@p size bytes) is the registration table of process
 * @p pid with @p process_cookie, in segment @p cookie, and that it has slot @p slot.
 * Returns the slot, or nullptr with the reason in @p why.
 */
const RegSlot* table_slot(const void* base, std::size_t size, std::uint32_t pid, std::uint64_t process_cookie,
                          std::uint64_t cookie, std::uint64_t slot, std::string* why);

/**
 * The owner's side: the table segment of this process. Not thread safe: called under the
 * process-wide region lock (shm_md.h). In a child after fork the parent's table is left
 * alone and a new one is made.
 */
class PublishedRegions {
public:
    PublishedRegions() = default;
    PublishedRegions(const PublishedRegions&) = delete;
    PublishedRegions& operator=(const PublishedRegions&) = delete;
    /** Clears every slot (peers' checks fail from then on) and releases the segment. */
    ~PublishedRegions();

    /**
     * Publishes a region under a new key id, creating the segment (of the kind @p mode
     * resolves to) on first use, and returns the id; its slot part is kNoSlot when the region is not
     * published (table full, or the segment could not be made: logged once).
     */
    std::uint64_t publish(std::uint64_t nonce, const void* address, std::size_t length, unsigned access,
                          SegmentMode mode);
    /** Clears the slot of @p key_id, if it still holds it. */
    void withdraw(std::uint64_t key_id);
    /** What peers map, or nullptr while there is no table of this process. */
    const SegmentId* segment_id() const;
    /** Clears every slot and releases the segment (the last md closed). */
    void close();

private:
    /** Creates the segment; false (logged once) when it cannot be made. */
    bool create(SegmentMode mode);
    RegSlot* slots() const;
    bool owned_here() const;

    std::unique_ptr<Segment> segment_;
    std::uint32_t owner_pid_ = 0;
    std::uint32_t used_ = 0;           ///< slots handed out at least once (the rest were never touched)
    std::vector<std::uint32_t> free_;  ///< released slots below used_
    bool create_failed_ = false;
    bool full_logged_ = false;
};

}  // namespace loom::uct::shm
