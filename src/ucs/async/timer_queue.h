/**
 * TimerQueue: one-shot and periodic timers ordered by deadline, for an event loop that
 * sleeps until the earliest deadline (AsyncContext drives one from its epoll timeout).
 *
 * An indexed binary min-heap keyed by (deadline, sequence number): add, cancel and
 * expiry are O(log n), a cancelled timer leaves the heap at once (no tombstones piling up
 * when per-request timeouts are armed and cancelled at a high rate), and timers with
 * equal deadlines expire in the order they were added.
 *
 * Not thread-safe: the owner serializes calls (AsyncContext holds its lock).
 */
#pragma once

#include "ucs/type/result.h"
#include "ucs/type/status.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace loom::ucs {

/** The timers' clock: CLOCK_MONOTONIC, read through the vDSO (no system call). */
using TimerClock = std::chrono::steady_clock;

/** A timer callback, called with the argument given when the timer was added. */
using TimerCallback = void (*)(void* arg);

/**
 * Handle of a timer. A handle changes every time its slot is recycled, so cancelling a
 * stale handle returns no_element instead of cancelling someone else's timer.
 */
enum class TimerId : std::uint64_t { invalid = 0 };

/** Pending timers in deadline order; see the file comment. */
class TimerQueue {
public:
    /** An expired timer handed out by pop_expired(). */
    struct Expired {
        TimerId id;
        TimerCallback cb;
        void* arg;
    };

    /** An empty queue. */
    TimerQueue() = default;
    TimerQueue(const TimerQueue&) = delete;
    TimerQueue& operator=(const TimerQueue&) = delete;

    /**
     * Adds a timer expiring at @p deadline and then, when @p period is positive, every
     * @p period after that. Returns its handle; invalid_param (logged) for a null @p cb or
     * a negative @p period, no_memory when the heap cannot grow.
     */
    Result<TimerId> add(TimerClock::time_point deadline, TimerClock::duration period, TimerCallback cb,
                        void* arg);

    /** Removes a pending timer; no_element when @p id is unknown, expired (one-shot) or cancelled. */
    Status cancel(TimerId id) noexcept;

    /** True when @p id is a pending timer. */
    bool contains(TimerId id) const noexcept;

    /** Deadline of the earliest timer; empty when there is none. */
    std::optional<TimerClock::time_point> next_deadline() const noexcept;

    /**
     * Sequence number the next added or rescheduled timer gets. An event loop reads it
     * before firing timers and passes it to pop_expired() as the limit, so timers added
     * or rescheduled by the callbacks it runs wait for the next pass (no endless loop
     * when a callback re-adds itself with a zero delay).
     */
    std::uint64_t next_sequence() const noexcept { return next_sequence_; }

    /**
     * Takes the earliest timer when its deadline is at or before @p now and its sequence
     * number is below @p sequence_limit, and stores it in @p out. A one-shot timer is
     * removed (its handle becomes stale); a periodic one is rescheduled to its next
     * deadline after @p now (missed periods are skipped, not fired in a burst, and the
     * period's phase is kept). Returns false, leaving @p out alone, when nothing qualifies.
     */
    bool pop_expired(TimerClock::time_point now, std::uint64_t sequence_limit, Expired& out) noexcept;

    /** Number of pending timers. */
    std::size_t size() const noexcept { return heap_.size(); }

    /** True when no timer is pending. */
    bool empty() const noexcept { return heap_.empty(); }

private:
    static constexpr std::uint32_t kNil = ~std::uint32_t{0};

    struct Slot {
        TimerClock::time_point deadline{};
        TimerClock::duration period{};
        std::uint64_t sequence = 0;
        TimerCallback cb = nullptr;
        void* arg = nullptr;
        std::uint32_t generation = 1;
        std::uint32_t heap_index = kNil;  ///< kNil when the slot is free
        std::uint32_t next_free = kNil;
    };

    bool earlier(std::uint32_t a, std::uint32_t b) const noexcept;
    void sift_up(std::size_t index) noexcept;
    void sift_down(std::size_t index) noexcept;
    void heap_set(std::size_t index, std::uint32_t slot) noexcept;
    void heap_erase(std::size_t index) noexcept;
    void free_slot(std::uint32_t slot) noexcept;
    std::uint32_t find(TimerId id) const noexcept;

    std::vector<Slot> slots_;
    std::vector<std::uint32_t> heap_;  ///< slot numbers, earliest (deadline, sequence) first
    std::uint32_t free_head_ = kNil;
    std::uint64_t next_sequence_ = 0;
};

}  // namespace loom::ucs
