/**
 * Memory events: learning that a range of the address space was unmapped or had its
 * pages replaced, so that a registration cache never hands out a registration whose
 * pages are no longer the ones behind the virtual addresses.
 *
 * Where events come from (LOOM_MEM_EVENTS):
 *  - hooks: libloom-ucs defines munmap, mremap, madvise, mmap/mmap64 (MAP_FIXED),
 *    shmat (SHM_REMAP), shmdt, brk, sbrk, free, realloc, reallocarray and malloc_trim.
 *    A program linked with libloom-ucs (or running with it in LD_PRELOAD) calls these
 *    instead of the C library's, because the dynamic linker searches libloom-ucs
 *    before libc; each one reports the range it is about to release and forwards to
 *    the next definition (dlsym(RTLD_NEXT)). glibc's malloc releases memory with
 *    internal calls that bypass the symbol table, so free() and realloc() read glibc's
 *    chunk header to learn what the call may release; see memhooks_interpose.cc for
 *    the details and the limits. Under AddressSanitizer, whose allocator never reaches
 *    Loom's free(), the sanitizer's free hook reports freed blocks instead.
 *  - user: only memory_event_notify(), called by the application.
 *  - none: no events; registration caches refuse to be created (Status::unsupported),
 *    so transports register memory for every operation instead of caching stale
 *    registrations.
 *
 * Who receives them: MemEventListener objects (one per registration cache). A listener
 * declares the address ranges it cares about with watch(); an event is queued, in a
 * small bounded queue inside the listener, only when it touches a page the listener
 * watches (two counting filters decide: a process-wide one with 256 KiB blocks, read
 * without a lock, and one per listener with 4 KiB pages), and the listener drains the
 * queue when it is convenient (the cache does it at the start of its next operation,
 * under its own lock). Nothing else runs inside
 * the application's munmap() or free(): no allocation, no callback, no lock other
 * than one short spin lock around the queues. When nothing is watched, an
 * interposed free() costs one load and one branch before forwarding.
 *
 * Limits: memory released behind the dynamic linker's back is not seen: raw
 * syscall(SYS_munmap), other libraries' internal calls (thread stacks freed by
 * glibc, dlclose), and allocators other than glibc's malloc that release memory
 * without calling munmap/madvise through the symbol table. When libloom-ucs is loaded
 * with dlopen(RTLD_LOCAL) its definitions are not in the global scope; the start-up
 * probe notices and hooks mode is then unsupported (use LOOM_MEM_EVENTS=user). The
 * hooks are not async-signal-safe: a signal handler that unmaps memory while its
 * thread is inside the queue's spin lock deadlocks.
 */
#pragma once

#include "ucs/config/table.h"
#include "ucs/type/result.h"
#include "ucs/type/status.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace loom::ucs {

/** Where memory events come from (LOOM_MEM_EVENTS). */
enum class MemEventsMode : std::uint8_t {
    hooks,  ///< the interposed functions and memory_event_notify()
    user,   ///< memory_event_notify() only
    none,   ///< no events: registration caches are disabled
};

/** Configuration spelling of a mode: "hooks", "user" or "none". */
std::string_view to_string(MemEventsMode mode) noexcept;

/** The values of the memory events table. */
struct MemEventsConfig {
    MemEventsMode mode = MemEventsMode::hooks;  ///< LOOM_MEM_EVENTS
};

/** The memory events table (prefix "MEM_"), registered while libloom-ucs is loaded. */
const config::Table<MemEventsConfig>& mem_events_table();

/**
 * LOOM_MEM_EVENTS as fill() reads it now (configuration file, environment,
 * @p overrides). Returns invalid_config, after logging the bad value, when it does
 * not parse.
 */
Result<MemEventsMode> read_mem_events_mode(const config::Overrides& overrides = {});

/** How this process learns about memory that free() and realloc() release. */
enum class FreeEvents : std::uint8_t {
    none,       ///< not seen directly; only through munmap/madvise hooks, if the allocator calls them
    glibc,      ///< Loom's free()/realloc() read glibc's chunk headers
    sanitizer,  ///< the sanitizer allocator's free hook reports every freed block
};

/** Name of a FreeEvents value: "none", "glibc" or "sanitizer". */
std::string_view to_string(FreeEvents events) noexcept;

/** What the hooks can see in this process, as found by a probe on first use. */
struct MemHooksInfo {
    bool unmap_hooks = false;              ///< munmap() called through the global symbol reaches Loom
    FreeEvents free_events = FreeEvents::none;
    std::string detail;                    ///< one sentence explaining the result, for logs and loom_info
};

/**
 * Probes the hooks once per process (maps and unmaps a page, frees a block, through
 * the symbols the application would call) and returns what it found. Thread-safe;
 * later calls return the same object.
 */
const MemHooksInfo& mem_hooks_info();

/**
 * Tells every listener that [@p addr, @p addr + @p length) has been, or is about to
 * be, unmapped or had its pages replaced: the "user" source of events, for
 * applications that manage their memory in ways Loom cannot see (or run with
 * LOOM_MEM_EVENTS=user). Safe to call from any thread, at any time, also while
 * holding locks; it never blocks for long and never allocates. A zero length is
 * ignored.
 */
void memory_event_notify(const void* addr, std::size_t length) noexcept;

/**
 * A subscriber to memory events with a bounded queue of pending ranges.
 *
 *     MemEventListener events;
 *     if (Status s = events.start(MemEventsMode::hooks); s != Status::ok) return s;
 *     events.watch(start, end);           // before registering [start, end)
 *     ...
 *     if (events.pending()) {             // one acquire load
 *         MemEventListener::Range ranges[MemEventListener::kCapacity];
 *         std::size_t n = events.drain(ranges);
 *         ...                             // drop what overlaps ranges[0..n)
 *     }
 *     events.unwatch(start, end);         // when [start, end) is no longer registered
 *
 * Events are queued from inside the application's munmap(), free() and so on, on any
 * thread. When the queue is full a new range is merged with the queued range nearest
 * to it, so nothing is lost: a listener may see a range larger than what was
 * released, never a smaller one. watch() and unwatch() calls must pair up exactly
 * (same bounds); a range may be watched several times. start(), stop(), watch() and
 * unwatch() are control-path calls of the owner; pending() and drain() may race with
 * events from any thread.
 */
class MemEventListener {
public:
    /** A queued range [start, end). */
    struct Range {
        std::uintptr_t start;
        std::uintptr_t end;
    };

    /** Ranges kept before merging; drain() needs room for this many. */
    static constexpr std::size_t kCapacity = 64;

    /** Slots of the listener's page filter (4 KiB pages 16 MiB apart share one). */
    static constexpr std::size_t kPageSlots = 4096;

    MemEventListener() noexcept = default;
    /** Stops the listener (see stop()); every watch() must have been undone. */
    ~MemEventListener();
    MemEventListener(const MemEventListener&) = delete;
    MemEventListener& operator=(const MemEventListener&) = delete;

    /**
     * Starts receiving events of @p mode. Returns invalid_param for MemEventsMode::none
     * and when already started, and unsupported (after logging a warning once per
     * process that explains why) for hooks when the probe found that munmap() does not
     * reach Loom.
     */
    [[nodiscard]] Status start(MemEventsMode mode);

    /** Stops receiving events; when it returns, no event is being queued into this listener. */
    void stop() noexcept;

    /** True between a successful start() and stop(). */
    bool started() const noexcept { return started_; }

    /** The mode given to start(). */
    MemEventsMode mode() const noexcept { return mode_; }

    /** Declares interest in events touching [@p start, @p end); must be started. */
    void watch(std::uintptr_t start, std::uintptr_t end) noexcept;

    /** Undoes one watch(@p start, @p end). */
    void unwatch(std::uintptr_t start, std::uintptr_t end) noexcept;

    /** True when ranges are queued; cheap enough for every operation of the owner. */
    bool pending() const noexcept { return pending_.load(std::memory_order_acquire); }

    /** Moves the queued ranges to @p out (room for kCapacity) and returns how many there were. */
    std::size_t drain(Range* out) noexcept;

    /** How many times a full queue merged ranges (each merge may widen what is invalidated). */
    std::uint64_t merges() const noexcept { return merges_.load(std::memory_order_relaxed); }

private:
    friend struct MemEventDispatch;

    /** Queues [start, end) if it touches a watched page; called with the dispatch lock held. */
    void push(std::uintptr_t start, std::uintptr_t end) noexcept;

    /** Adds @p delta to the page filter counts of [start, end). */
    void count_pages(std::uintptr_t start, std::uintptr_t end, std::uint32_t delta) noexcept;

    /** True when [start, end) may touch a watched page. */
    bool may_watch(std::uintptr_t start, std::uintptr_t end) const noexcept;

    MemEventListener* next_ = nullptr;  // in the process-wide list, under the dispatch lock
    MemEventListener* prev_ = nullptr;
    MemEventsMode mode_ = MemEventsMode::none;
    bool started_ = false;
    std::atomic<bool> pending_{false};
    std::atomic<std::uint64_t> merges_{0};
    std::size_t watches_ = 0;  // owner-side count, to check that watch() and unwatch() pair up
    std::size_t count_ = 0;    // queued ranges, under the dispatch lock
    Range queue_[kCapacity];
    std::atomic<std::uint32_t> wide_{0};  // watched ranges longer than the page filter
    std::atomic<std::uint32_t> pages_[kPageSlots]{};
};

}  // namespace loom::ucs
