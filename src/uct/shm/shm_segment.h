/**
 * Shared-memory segments of the shm transport: created by one process, mapped by its
 * peers on the same host.
 *
 * Two kinds, chosen per process by LOOM_SHM_SEGMENT:
 *  - memfd (preferred): an anonymous memfd named "loom-shm-<cookie>". Peers open it
 *    through the owner's /proc/<pid>/fd/<fd> link ("proc link"), which needs the same
 *    ptrace-read permission as reading the owner's /proc entries. Nothing ever appears
 *    in /dev/shm; the memory goes away with the last mapping.
 *  - posix (fallback): shm_open("/loom-<uid>-<pid>-<start>-<cookie>"), for peers that
 *    may not open the owner's /proc links (a non-dumpable owner, hidepid). The name
 *    exists from creation until the owner releases the segment (iface close, mem_free);
 *    a crashed owner's names are removed by sweep_stale_segments(), which the next
 *    process opening the shm md runs: it unlinks our uid's names whose owner (pid and
 *    start time) no longer exists.
 * Both are created with mode 0600. The cookie, random per segment, is part of the name
 * and is checked by every attacher, so a reused pid or fd never maps the wrong memory.
 */
#pragma once

#include "ucs/type/result.h"

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

namespace loom::uct::shm {

/** How a segment is shared. */
enum class SegmentKind : std::uint8_t {
    memfd = 1,  ///< memfd, attached through /proc/<pid>/fd/<fd>
    posix = 2,  ///< named POSIX shared memory in /dev/shm
};

/** Which kind LOOM_SHM_SEGMENT asks for. */
enum class SegmentMode : std::uint8_t { auto_, memfd, posix };

/**
 * What a peer needs to attach a segment; copied as is into addresses and remote keys
 * (peers run on the same host, so they share the layout). No implicit padding.
 */
struct SegmentId {
    std::uint64_t start_time;  ///< owner's start time (posix names, stale-name sweep)
    std::uint64_t cookie;      ///< random per segment, part of its name
    std::uint64_t size;        ///< bytes to map
    std::uint32_t uid;         ///< owner's effective uid (posix names)
    std::uint32_t pid;         ///< owner's pid
    std::uint32_t fd;          ///< memfd: the fd number in the owner
    std::uint8_t kind;         ///< SegmentKind
    std::uint8_t reserved[3];
};
static_assert(sizeof(SegmentId) == 40 && std::is_trivially_copyable_v<SegmentId>,
              "SegmentId is a wire format");

/** A segment created by this process, mapped read-write. Move-only; releases everything when destroyed. */
class Segment {
public:
    /**
     * Creates and maps a segment of @p size bytes (rounded up to a page) of @p kind,
     * mode 0600, zero-filled; at exactly @p fixed_address when it is not null (page
     * aligned, else invalid_param; no_memory when something is mapped there already);
     * its pages allocated now when @p populate, else as they are first touched.
     * Returns no_memory / io_error / unsupported / invalid_param (logged).
     */
    static Result<Segment> create(std::size_t size, SegmentKind kind, void* fixed_address = nullptr,
                                  bool populate = true);

    Segment() = default;
    Segment(Segment&& other) noexcept;
    Segment& operator=(Segment&& other) noexcept;
    Segment(const Segment&) = delete;
    Segment& operator=(const Segment&) = delete;
    /** Unmaps, closes the fd and removes the posix name. */
    ~Segment();

    /** Where the segment is mapped in this process (null for an empty object). */
    void* address() const { return address_; }
    /** Bytes mapped (the size asked for, rounded up to a page). */
    std::size_t size() const { return size_; }
    /** What peers need to attach it. */
    const SegmentId& id() const { return id_; }

    /** The posix name ("/loom-..."), empty for memfd segments. */
    const std::string& name() const { return name_; }

    /** Removes the posix name now (peers that attached keep their mapping); idempotent, no-op for memfd. */
    void unlink_name();

private:
    void release() noexcept;

    void* address_ = nullptr;
    std::size_t size_ = 0;
    int fd_ = -1;
    SegmentId id_{};
    std::string name_;
};

/** A peer's segment mapped into this process. Move-only; unmaps when destroyed. */
class Mapping {
public:
    /**
     * Maps the segment @p id read-write (read-only unless @p writable). Returns unreachable when the owner is
     * gone, the cookie does not match (a reused pid or fd), the segment is too small or the permissions
     * forbid it, with the explanation in @p reason; invalid_address for an id that cannot be valid (unknown
     * kind, size 0). @p check_name false skips the check of a memfd's name (its cookie) for a caller that
     * checks the cookie in the segment's own header instead (an shm FIFO): one system call less.
     */
    static Result<Mapping> attach(const SegmentId& id, std::string* reason, bool writable = true,
                                  bool check_name = true);

    Mapping() = default;
    Mapping(Mapping&& other) noexcept;
    Mapping& operator=(Mapping&& other) noexcept;
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;
    ~Mapping();

    /** Where the peer's segment is mapped here (null for an empty object). */
    void* address() const { return address_; }
    /** Bytes mapped. */
    std::size_t size() const { return size_; }

private:
    void* address_ = nullptr;
    std::size_t size_ = 0;
};

/**
 * The first page of an arena segment: what an attacher checks before trusting the
 * slots in it (ArenaSlot).
 */
struct ArenaHeader {
    std::uint64_t magic;
    std::uint64_t cookie;              ///< the segment's (SegmentId::cookie)
    std::atomic<std::uint64_t> touch;  ///< attachers write it first: one page mapped, not 64 KiB around
};

inline constexpr std::uint64_t kArenaMagic = 0x616e6572416d6f6cull;  // "lomArena"

/**
 * A page-aligned part of this process's arena: one sparse segment per kind, from which
 * every shm iface of the process takes its FIFO, so that a peer process maps all of
 * them with one attachment (open, fstat, mmap, close) instead of one per iface. Slots
 * are never handed out twice: a peer holding an old slot's address writes into memory
 * nobody reads, never into a newer iface's FIFO. When a slot goes, its pages but the
 * first (a FIFO's header, with its "closed" flag) are given back to the system; an arena
 * goes with its last slot (and with the last peer's mapping of it). A forked child
 * starts an arena of its own. Move-only.
 */
class ArenaSlot {
public:
    /**
     * A slot of @p size bytes (rounded up to a page), its pages allocated now, in the
     * arena of @p kind (a new arena when the current one is full or gone). Errors as
     * Segment::create.
     */
    static Result<ArenaSlot> create(std::size_t size, SegmentKind kind);

    ArenaSlot() = default;
    ArenaSlot(ArenaSlot&& other) noexcept;
    ArenaSlot& operator=(ArenaSlot&& other) noexcept;
    ArenaSlot(const ArenaSlot&) = delete;
    ArenaSlot& operator=(const ArenaSlot&) = delete;
    /** Gives the slot's pages back, but the first; the arena goes with its last slot. */
    ~ArenaSlot();

    void* address() const { return address_; }
    std::size_t size() const { return size_; }
    /** Where the slot starts in its arena. */
    std::uint64_t offset() const { return offset_; }
    /** What peers need to attach the arena (once for every slot in it). */
    const SegmentId& arena_id() const;

private:
    void release() noexcept;

    std::shared_ptr<Segment> arena_;
    void* address_ = nullptr;
    std::size_t size_ = 0;
    std::uint64_t offset_ = 0;
};

/** Checks that @p mapping is an arena whose cookie is @p cookie (its header, touched by a write). */
bool arena_header_ok(const Mapping& mapping, std::uint64_t cookie);

/** The posix name of a segment: "/loom-<uid>-<pid>-<start>-<cookie hex>". */
std::string posix_segment_name(const SegmentId& id);

/**
 * Removes /dev/shm names of our uid left by owners that no longer exist (a crashed or
 * killed process, matched by pid and start time). Returns how many were removed.
 */
std::size_t sweep_stale_segments();

/**
 * The kind @p mode means in this process: auto picks memfd when memfd_create works and
 * peers can open our /proc/<pid>/fd links (we are dumpable and /proc is there), posix
 * otherwise. Returns unsupported (logged) when the kind asked for cannot work here.
 */
Result<SegmentKind> resolve_segment_kind(SegmentMode mode);

}  // namespace loom::uct::shm
