/**
 * A cheap monotonic clock for progress loops, timeouts and statistics.
 *
 *   Ticks start = get_time();
 *   ...
 *   std::uint64_t elapsed_ns = ticks_to_ns(get_time() - start);
 *
 * Ticks come from one of two sources, chosen once per process on first use:
 *  - tsc: the x86-64 time-stamp counter (rdtsc), used only when the CPU reports an
 *    invariant TSC (CPUID 0x80000007 EDX bit 8: constant rate, keeps counting in
 *    deep C-states, synchronised across cores). Its frequency is calibrated once
 *    against CLOCK_MONOTONIC over a few milliseconds. Reading it costs ~10-20 cycles.
 *  - monotonic: clock_gettime(CLOCK_MONOTONIC) in nanoseconds (vDSO, no system call),
 *    used on other CPUs and architectures, or when calibration fails.
 *
 * Ticks are only meaningful as differences and conversions within one process.
 */
#pragma once

#include "ucs/sys/compiler.h"
#include "ucs/type/status.h"

#include <time.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <string_view>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace loom::ucs {

/** A point in time (or a duration) in clock ticks; see clock_info() for the rate. */
using Ticks = std::uint64_t;

/** Where ticks come from. */
enum class ClockSource : std::uint8_t {
    tsc = 1,        ///< x86-64 invariant time-stamp counter, calibrated
    monotonic = 2,  ///< clock_gettime(CLOCK_MONOTONIC), one tick per nanosecond
};

/** Name of a clock source for logs and loom_info: "tsc" or "monotonic". */
std::string_view to_string(ClockSource source) noexcept;

/** What the clock runs on, for diagnostics. */
struct ClockInfo {
    ClockSource source;
    std::uint64_t ticks_per_second;  ///< calibrated TSC rate, or 1e9 for monotonic
    bool cpu_has_invariant_tsc;      ///< what CPUID reports, whatever source is in use
};

/** The clock source and rate in use; selects and calibrates the clock on first use. */
ClockInfo clock_info() noexcept;

/**
 * Switches the clock source, for tests and diagnostics only: every Ticks value taken
 * before the switch becomes meaningless, and threads reading the clock concurrently
 * may see a mix of old and new state. Returns Status::unsupported (and keeps the
 * current source) when @p source is tsc and the CPU has no invariant TSC or its
 * calibration failed. Calibration is done at most once per process.
 */
Status select_clock_source(ClockSource source) noexcept;

namespace detail {

/**
 * Clock state shared by the inline readers. `source` is 0 until the clock is set up
 * and is stored last (release), so a reader that sees it non-zero sees the rates too.
 */
struct ClockState {
    std::atomic<std::uint8_t> source;
    std::uint64_t ns_per_tick_q32;   ///< ticks -> ns multiplier, 32.32 fixed point
    std::uint64_t ticks_per_ns_q32;  ///< ns -> ticks multiplier, 32.32 fixed point
    std::uint64_t ticks_per_second;
};

extern ClockState g_clock;

/** Chooses and calibrates the clock (once, thread-safe). */
LOOM_COLD void init_clock() noexcept;

/** First read of the clock: sets it up, then reads it. */
LOOM_COLD Ticks get_time_first() noexcept;

/** The clock state, set up if this is the first use. */
inline const ClockState& clock_state() noexcept {
    if (LOOM_UNLIKELY(g_clock.source.load(std::memory_order_acquire) == 0)) init_clock();
    return g_clock;
}

/** CLOCK_MONOTONIC in nanoseconds. */
inline std::uint64_t monotonic_ns() noexcept {
    struct timespec ts;
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

/** value * q32 / 2^32, saturating at the largest Ticks value. */
inline std::uint64_t mul_q32(std::uint64_t value, std::uint64_t q32) noexcept {
    unsigned __int128 product = (static_cast<unsigned __int128>(value) * q32) >> 32;
    return product > std::numeric_limits<std::uint64_t>::max() ? std::numeric_limits<std::uint64_t>::max()
                                                               : static_cast<std::uint64_t>(product);
}

}  // namespace detail

/** The current time in ticks: monotonic, never decreasing within a thread. */
LOOM_ALWAYS_INLINE Ticks get_time() noexcept {
    const std::uint8_t source = detail::g_clock.source.load(std::memory_order_acquire);
#if defined(__x86_64__)
    if (LOOM_LIKELY(source == static_cast<std::uint8_t>(ClockSource::tsc))) return __rdtsc();
#endif
    if (LOOM_LIKELY(source == static_cast<std::uint8_t>(ClockSource::monotonic)))
        return detail::monotonic_ns();
    return detail::get_time_first();
}

/** Nanoseconds in @p ticks (a duration); saturates instead of overflowing. */
inline std::uint64_t ticks_to_ns(Ticks ticks) noexcept {
    return detail::mul_q32(ticks, detail::clock_state().ns_per_tick_q32);
}

/** Microseconds in @p ticks (a duration). */
inline std::uint64_t ticks_to_us(Ticks ticks) noexcept {
    return ticks_to_ns(ticks) / 1000;
}

/** Seconds in @p ticks (a duration). */
inline double ticks_to_sec(Ticks ticks) noexcept {
    return static_cast<double>(ticks) / static_cast<double>(detail::clock_state().ticks_per_second);
}

/** Ticks in @p ns nanoseconds; saturates instead of overflowing. */
inline Ticks ns_to_ticks(std::uint64_t ns) noexcept {
    return detail::mul_q32(ns, detail::clock_state().ticks_per_ns_q32);
}

/** Ticks in @p us microseconds; saturates instead of overflowing. */
inline Ticks us_to_ticks(std::uint64_t us) noexcept {
    constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max() / 1000;
    return us > kMax ? std::numeric_limits<Ticks>::max() : ns_to_ticks(us * 1000);
}

/** Ticks in @p seconds; 0 for negative or NaN input, saturating for huge ones. */
inline Ticks sec_to_ticks(double seconds) noexcept {
    const double ticks = seconds * static_cast<double>(detail::clock_state().ticks_per_second);
    if (!(ticks > 0)) return 0;  // also catches NaN
    // 2^64 as a double; anything at or above it does not fit.
    if (ticks >= 18446744073709551616.0) return std::numeric_limits<Ticks>::max();
    return static_cast<Ticks>(ticks);
}

}  // namespace loom::ucs
