/**
 * Deadline: a point on the cheap clock after which a wait gives up.
 *
 *   Deadline deadline = Deadline::after(std::chrono::milliseconds(100));
 *   while (!done()) {
 *       progress();
 *       if (deadline.expired()) return Status::timed_out;
 *   }
 *
 * The duration is converted to ticks once, so checking costs one clock read and a
 * compare. expired(now) and remaining(now) take a time the loop already read.
 */
#pragma once

#include "ucs/time/clock.h"

#include <chrono>
#include <cstdint>
#include <limits>

namespace loom::ucs {

class Deadline {
public:
    /** remaining() of a deadline that never expires. */
    static constexpr Ticks kInfinite = std::numeric_limits<Ticks>::max();

    /** A deadline that never expires (wait forever). */
    static constexpr Deadline never() noexcept { return Deadline(kInfinite); }

    /** A deadline at the absolute time @p end (a get_time() value). */
    static constexpr Deadline at(Ticks end) noexcept { return Deadline(end); }

    /** A deadline @p duration ticks from now; never() when that does not fit in Ticks. */
    static Deadline after_ticks(Ticks duration) noexcept {
        const Ticks now = get_time();
        return duration >= kInfinite - now ? never() : Deadline(now + duration);
    }

    /**
     * A deadline @p duration from now. Zero or negative durations give a deadline
     * that has already expired; durations beyond ~30 years give never().
     */
    template <typename Rep, typename Period>
    static Deadline after(std::chrono::duration<Rep, Period> duration) noexcept {
        // Compared in floating point so that hours::max() and the like cannot overflow.
        constexpr double kMaxSeconds = 1e9;
        const double seconds = std::chrono::duration<double>(duration).count();
        if (!(seconds > 0)) return Deadline(get_time());
        if (seconds >= kMaxSeconds) return never();
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(duration).count();
        return after_ticks(ns_to_ticks(static_cast<std::uint64_t>(ns)));
    }

    /** True when this deadline never expires. */
    constexpr bool is_never() const noexcept { return end_ == kInfinite; }

    /** The absolute expiry time in ticks (kInfinite for never()). */
    constexpr Ticks end() const noexcept { return end_; }

    /** True once the clock has reached the deadline. */
    bool expired() const noexcept { return expired(get_time()); }

    /** True when @p now (a get_time() value) is at or past the deadline. */
    constexpr bool expired(Ticks now) const noexcept { return !is_never() && now >= end_; }

    /** Ticks left until the deadline: 0 once expired, kInfinite for never(). */
    Ticks remaining() const noexcept { return remaining(get_time()); }

    /** Ticks left from @p now until the deadline: 0 once expired, kInfinite for never(). */
    constexpr Ticks remaining(Ticks now) const noexcept {
        if (is_never()) return kInfinite;
        return now >= end_ ? 0 : end_ - now;
    }

private:
    constexpr explicit Deadline(Ticks end) noexcept : end_(end) {}

    Ticks end_;
};

}  // namespace loom::ucs
