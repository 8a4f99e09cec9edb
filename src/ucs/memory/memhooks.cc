#include "ucs/memory/memhooks.h"

#include "ucs/config/parser.h"
#include "ucs/config/registry.h"
#include "ucs/debug/assert.h"
#include "ucs/memory/memhooks_internal.h"
#include "ucs/memory/memory_log.h"

#include <pthread.h>

#include <algorithm>
#include <mutex>

namespace loom::ucs {

namespace detail {

constinit std::atomic<std::uint64_t> g_hook_armed{0};

}  // namespace detail

namespace {

const config::RegisteredTable<MemEventsConfig>& make_mem_events_table() {
    // Never destroyed: caches may be created from other libraries' static initializers.
    static const auto* table = new config::RegisteredTable<MemEventsConfig>(
        "MEM_", "Memory events",
        "How Loom learns that the application unmapped or freed memory, so that the memory "
        "registration caches of the RDMA transports never reuse a registration whose pages are gone.",
        {
            config::field(
                "EVENTS", "hooks",
                "Where memory events come from. hooks: libloom-ucs intercepts munmap, mremap, madvise, "
                "mmap with MAP_FIXED, shmat, shmdt, brk, sbrk and glibc's free and realloc (this needs "
                "libloom-ucs linked into the program or in LD_PRELOAD, not loaded with dlopen). user: "
                "only the application's calls to loom::ucs::memory_event_notify(); choose it when the "
                "application reports every unmap itself. none: no events; registration caches are then "
                "disabled and memory is registered for every operation.",
                &MemEventsConfig::mode,
                config::EnumParser<MemEventsMode>({{"hooks", MemEventsMode::hooks},
                                                   {"user", MemEventsMode::user},
                                                   {"none", MemEventsMode::none}})),
        });
    return *table;
}

// Registered when libloom-ucs is loaded, so loom_info and the documentation list it.
[[maybe_unused]] const config::TableBase& g_mem_events_table_at_load = make_mem_events_table();

/**
 * A test-and-test-and-set spin lock, constant-initialized so it works before any
 * constructor runs. Held only for a few dozen instructions (queueing a range).
 */
class SpinLock {
public:
    constexpr SpinLock() noexcept = default;

    void lock() noexcept {
        while (locked_.exchange(true, std::memory_order_acquire)) {
            while (locked_.load(std::memory_order_relaxed)) {
#if defined(__x86_64__) || defined(__i386__)
                __builtin_ia32_pause();
#endif
            }
        }
    }

    void unlock() noexcept { locked_.store(false, std::memory_order_release); }

    /** Forgets a holder: for the child of fork(), where the holder does not exist. */
    void reset() noexcept { locked_.store(false, std::memory_order_relaxed); }

private:
    std::atomic<bool> locked_{false};
};

constinit SpinLock g_dispatch_lock;
constinit MemEventListener* g_listeners = nullptr;  // under g_dispatch_lock

/*
 * A thread of the parent may have held the lock when another one forked; the child
 * has no such thread, and its first munmap() would spin forever. The queues it was
 * updating hold at worst one range too many, which only invalidates more.
 */
void reset_dispatch_lock_in_child() noexcept { g_dispatch_lock.reset(); }

[[maybe_unused]] const int g_atfork_registered = ::pthread_atfork(nullptr, nullptr, &reset_dispatch_lock_in_child);

/*
 * A counting filter of the watched address space, so that the hooks queue nothing
 * for the (vast majority of) events far from any registration: one counter per
 * 256 KiB block, direct-mapped into 4096 slots (blocks 1 GiB apart share a slot,
 * which only makes the filter less selective). A range longer than the table counts
 * in g_filter_wide, which lets everything through.
 */
constexpr unsigned kFilterBlockShift = 18;
constexpr std::size_t kFilterSlots = 4096;
constinit std::atomic<std::uint32_t> g_filter[kFilterSlots]{};
constinit std::atomic<std::uint32_t> g_filter_wide{0};
constinit std::atomic<std::uint64_t> g_watch_total{0};

void filter_update(std::uintptr_t start, std::uintptr_t end, std::int32_t delta) noexcept {
    const std::uintptr_t first = start >> kFilterBlockShift;
    const std::uintptr_t last = (end - 1) >> kFilterBlockShift;
    if (last - first >= kFilterSlots) {
        g_filter_wide.fetch_add(static_cast<std::uint32_t>(delta), std::memory_order_relaxed);
        return;
    }
    for (std::uintptr_t block = first; block <= last; ++block) {
        g_filter[block & (kFilterSlots - 1)].fetch_add(static_cast<std::uint32_t>(delta),
                                                      std::memory_order_relaxed);
    }
}

bool filter_may_watch(std::uintptr_t start, std::uintptr_t end) noexcept {
    if (g_filter_wide.load(std::memory_order_relaxed) != 0) return true;
    const std::uintptr_t first = start >> kFilterBlockShift;
    const std::uintptr_t last = (end - 1) >> kFilterBlockShift;
    if (last - first >= kFilterSlots) return true;
    for (std::uintptr_t block = first; block <= last; ++block) {
        if (g_filter[block & (kFilterSlots - 1)].load(std::memory_order_relaxed) != 0) return true;
    }
    return false;
}

/** Distance between [a, b) and [c, d); 0 when they overlap or touch. */
std::uintptr_t gap(std::uintptr_t a, std::uintptr_t b, std::uintptr_t c, std::uintptr_t d) noexcept {
    if (b < c) return c - b;
    if (d < a) return a - d;
    return 0;
}

MemHooksInfo run_probe() {
    const detail::ProbeResult probe = detail::probe_interposers();
    MemHooksInfo info;
    info.unmap_hooks = probe.unmap_seen;
    info.free_events = probe.free_events;
    if (!probe.unmap_seen) {
        info.detail = fmt::format("munmap() does not reach libloom-ucs: {}", probe.why);
    } else {
        switch (probe.free_events) {
        case FreeEvents::glibc:
            info.detail = "munmap() and friends reach libloom-ucs; free() and realloc() read glibc's chunk headers";
            break;
        case FreeEvents::sanitizer:
            info.detail = "munmap() and friends reach libloom-ucs; the sanitizer's free hook reports freed blocks";
            break;
        case FreeEvents::none:
            info.detail = fmt::format(
                "munmap() and friends reach libloom-ucs; free() is not seen ({}), so memory that the allocator "
                "releases without calling munmap() or madvise() is missed",
                probe.why);
            break;
        }
    }
    LOOM_LOG_DEBUG("memory hooks: {}", info.detail);
    return info;
}

}  // namespace

/** The process-wide dispatcher; a friend of MemEventListener. */
struct MemEventDispatch {
    static void dispatch(std::uintptr_t start, std::uintptr_t end, detail::EventSource source) noexcept {
        if (start >= end || g_watch_total.load(std::memory_order_relaxed) == 0) return;
        if (!filter_may_watch(start, end)) return;
        std::lock_guard guard(g_dispatch_lock);
        for (MemEventListener* l = g_listeners; l != nullptr; l = l->next_) {
            if (source == detail::EventSource::user || l->mode_ == MemEventsMode::hooks) l->push(start, end);
        }
    }

    static void link(MemEventListener& listener) noexcept {
        std::lock_guard guard(g_dispatch_lock);
        listener.prev_ = nullptr;
        listener.next_ = g_listeners;
        if (g_listeners != nullptr) g_listeners->prev_ = &listener;
        g_listeners = &listener;
    }

    static void unlink(MemEventListener& listener) noexcept {
        std::lock_guard guard(g_dispatch_lock);
        if (listener.prev_ != nullptr) {
            listener.prev_->next_ = listener.next_;
        } else {
            g_listeners = listener.next_;
        }
        if (listener.next_ != nullptr) listener.next_->prev_ = listener.prev_;
        listener.next_ = nullptr;
        listener.prev_ = nullptr;
        listener.count_ = 0;
        listener.pending_.store(false, std::memory_order_relaxed);
    }

    static std::size_t drain(MemEventListener& listener, MemEventListener::Range* out) noexcept {
        std::lock_guard guard(g_dispatch_lock);
        const std::size_t n = listener.count_;
        std::copy(listener.queue_, listener.queue_ + n, out);
        listener.count_ = 0;
        listener.pending_.store(false, std::memory_order_relaxed);
        return n;
    }
};

namespace detail {

void dispatch_event(std::uintptr_t start, std::uintptr_t end, EventSource source) noexcept {
    MemEventDispatch::dispatch(start, end, source);
}

}  // namespace detail

std::string_view to_string(MemEventsMode mode) noexcept {
    switch (mode) {
    case MemEventsMode::hooks: return "hooks";
    case MemEventsMode::user: return "user";
    case MemEventsMode::none: return "none";
    }
    return "invalid";
}

std::string_view to_string(FreeEvents events) noexcept {
    switch (events) {
    case FreeEvents::none: return "none";
    case FreeEvents::glibc: return "glibc";
    case FreeEvents::sanitizer: return "sanitizer";
    }
    return "invalid";
}

const config::Table<MemEventsConfig>& mem_events_table() { return make_mem_events_table(); }

Result<MemEventsMode> read_mem_events_mode(const config::Overrides& overrides) {
    const config::Table<MemEventsConfig>& table = mem_events_table();
    MemEventsConfig values = table.defaults();
    if (Status status = config::fill(table, values, overrides); status != Status::ok) return status;
    return values.mode;
}

const MemHooksInfo& mem_hooks_info() {
    // Never destroyed: listeners may start from static initializers of other libraries.
    static const MemHooksInfo* info = new MemHooksInfo(run_probe());
    return *info;
}

void memory_event_notify(const void* addr, std::size_t length) noexcept {
    if (length == 0) return;
    const auto start = reinterpret_cast<std::uintptr_t>(addr);
    // A range running past the end of the address space is clipped, never wrapped.
    const std::uintptr_t end = start + length < start ? UINTPTR_MAX : start + length;
    detail::dispatch_event(start, end, detail::EventSource::user);
}

MemEventListener::~MemEventListener() { stop(); }

Status MemEventListener::start(MemEventsMode mode) {
    if (started_) {
        LOOM_LOG_ERROR("memory events: listener {} is already started", static_cast<void*>(this));
        return Status::invalid_param;
    }
    if (mode != MemEventsMode::hooks && mode != MemEventsMode::user) {
        LOOM_LOG_ERROR("memory events: cannot listen in mode '{}'", to_string(mode));
        return Status::invalid_param;
    }
    if (mode == MemEventsMode::hooks) {
        const MemHooksInfo& info = mem_hooks_info();
        if (!info.unmap_hooks) {
            static std::once_flag warned;
            std::call_once(warned, [&info] {
                LOOM_LOG_WARN(
                    "LOOM_MEM_EVENTS=hooks: {}; registration caches are disabled (set LOOM_MEM_EVENTS=user "
                    "if the application reports unmapped memory with memory_event_notify())",
                    info.detail);
            });
            return Status::unsupported;
        }
    }
    mode_ = mode;
    watches_ = 0;
    MemEventDispatch::link(*this);
    started_ = true;
    return Status::ok;
}

void MemEventListener::stop() noexcept {
    if (!started_) return;
    if (watches_ != 0) {
        // A bug of the owner; the filter keeps counting these ranges, which only costs speed.
        LOOM_LOG_ERROR("memory events: listener {} stopped with {} watched ranges", static_cast<void*>(this),
                       watches_);
    }
    MemEventDispatch::unlink(*this);
    started_ = false;
}

namespace {

constexpr unsigned kListenerPageShift = 12;  // 4 KiB whatever the page size: finer is never wrong

}  // namespace

void MemEventListener::count_pages(std::uintptr_t start, std::uintptr_t end, std::uint32_t delta) noexcept {
    const std::uintptr_t first = start >> kListenerPageShift;
    const std::uintptr_t last = (end - 1) >> kListenerPageShift;
    if (last - first >= kPageSlots) {
        wide_.fetch_add(delta, std::memory_order_relaxed);
        return;
    }
    for (std::uintptr_t page = first; page <= last; ++page) {
        pages_[page & (kPageSlots - 1)].fetch_add(delta, std::memory_order_relaxed);
    }
}

bool MemEventListener::may_watch(std::uintptr_t start, std::uintptr_t end) const noexcept {
    if (wide_.load(std::memory_order_relaxed) != 0) return true;
    const std::uintptr_t first = start >> kListenerPageShift;
    const std::uintptr_t last = (end - 1) >> kListenerPageShift;
    if (last - first >= kPageSlots) return true;
    for (std::uintptr_t page = first; page <= last; ++page) {
        if (pages_[page & (kPageSlots - 1)].load(std::memory_order_relaxed) != 0) return true;
    }
    return false;
}

void MemEventListener::watch(std::uintptr_t start, std::uintptr_t end) noexcept {
    LOOM_ASSERT(started_ && start < end);
    count_pages(start, end, 1);
    filter_update(start, end, 1);
    g_watch_total.fetch_add(1, std::memory_order_relaxed);
    if (mode_ == MemEventsMode::hooks) detail::g_hook_armed.fetch_add(1, std::memory_order_relaxed);
    ++watches_;
}

void MemEventListener::unwatch(std::uintptr_t start, std::uintptr_t end) noexcept {
    LOOM_ASSERT(started_ && start < end && watches_ > 0);
    --watches_;
    if (mode_ == MemEventsMode::hooks) detail::g_hook_armed.fetch_sub(1, std::memory_order_relaxed);
    g_watch_total.fetch_sub(1, std::memory_order_relaxed);
    filter_update(start, end, -1);
    count_pages(start, end, static_cast<std::uint32_t>(-1));
}

std::size_t MemEventListener::drain(Range* out) noexcept { return MemEventDispatch::drain(*this, out); }

void MemEventListener::push(std::uintptr_t start, std::uintptr_t end) noexcept {
    // Called with the dispatch lock held, from inside the application's munmap() or
    // free(): bounded work, no allocation. Events near but not on the watched pages
    // (small blocks freed next to a registered buffer) stop here, so they neither fill
    // the queue nor, merged on overflow, widen into a registered range.
    if (!may_watch(start, end)) return;
    for (std::size_t i = 0; i < count_; ++i) {
        Range& r = queue_[i];
        if (start <= r.end && r.start <= end) {  // overlapping or touching: widen in place
            r.start = std::min(r.start, start);
            r.end = std::max(r.end, end);
            pending_.store(true, std::memory_order_release);
            return;
        }
    }
    if (count_ < kCapacity) {
        queue_[count_++] = Range{start, end};
    } else {
        // Full: merge with the nearest range. The merged range also covers the gap
        // between the two, which is invalidated too; never losing an event matters more.
        std::size_t nearest = 0;
        std::uintptr_t best = UINTPTR_MAX;
        for (std::size_t i = 0; i < count_; ++i) {
            const std::uintptr_t g = gap(queue_[i].start, queue_[i].end, start, end);
            if (g < best) {
                best = g;
                nearest = i;
            }
        }
        queue_[nearest].start = std::min(queue_[nearest].start, start);
        queue_[nearest].end = std::max(queue_[nearest].end, end);
        merges_.fetch_add(1, std::memory_order_relaxed);
    }
    pending_.store(true, std::memory_order_release);
}

}  // namespace loom::ucs
