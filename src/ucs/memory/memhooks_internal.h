/**
 * Internal to the memory events: what the interposed functions (memhooks_interpose.cc)
 * and the dispatcher (memhooks.cc) share. Not installed.
 *
 * Everything here may run inside the application's free() or munmap(), on any thread,
 * before libloom-ucs's constructors have run and after its destructors: only
 * constant-initialized atomics, no allocation, no C++ object with a constructor.
 */
#pragma once

#include "ucs/memory/memhooks.h"

#include <atomic>
#include <cstdint>

namespace loom::ucs {

namespace detail {

/**
 * Non-zero while some listener in hooks mode watches a range (it counts the watched
 * ranges of such listeners, plus a large bias while the probe runs): the one load an
 * interposed function makes before forwarding when nothing is watched.
 */
extern std::atomic<std::uint64_t> g_hook_armed __attribute__((visibility("hidden")));

/** Where an event comes from: listeners in user mode ignore the hooks. */
enum class EventSource : std::uint8_t { hook, user };

/**
 * Queues [start, end) in every started listener that takes events from @p source and
 * watches part of it. Cheap when nothing is watched near the range.
 */
__attribute__((visibility("hidden"))) void dispatch_event(std::uintptr_t start, std::uintptr_t end,
                                                         EventSource source) noexcept;

/** What the probe of the interposed functions found. */
struct ProbeResult {
    bool unmap_seen = false;   ///< a munmap() through the global symbol reached Loom
    bool free_seen = false;    ///< a free() through the global symbol reached Loom's free or the sanitizer hook
    FreeEvents free_events = FreeEvents::none;
    const char* why = "";      ///< static text explaining a failure
};

/**
 * Probes the interposed functions (memhooks_interpose.cc): unmaps a page and frees a
 * block through the symbols an application would call and checks that Loom saw them.
 * Called once per process; installs the sanitizer's free hook when there is one.
 */
__attribute__((visibility("hidden"))) ProbeResult probe_interposers();

}  // namespace detail

}  // namespace loom::ucs
