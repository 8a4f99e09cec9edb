#define LOOM_LOG_COMPONENT (::loom::ucs::time_log())

#include "ucs/time/clock.h"

#include "ucs/debug/log.h"

#include <time.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <mutex>

namespace loom::ucs {
namespace {

log::Component& time_log() {
    static log::Component component("time");
    return component;
}

}  // namespace
}  // namespace loom::ucs

namespace loom::ucs {

namespace detail {
constinit ClockState g_clock{};
}  // namespace detail

namespace {

constexpr std::uint64_t kNsPerSec = 1000000000ull;

// Long enough that the error of the two end points (a few hundred ns at worst) stays
// within 6e-4 of the window (timeouts and benchmark timing need far less). The window
// starts when the library is loaded (g_load_pair), so the time an application spends
// between loading Loom and its first clock read (loom_init, opening devices) counts, and
// start-up waits for little or none of it (measured: worker creation 2.4 ms -> 0.3 ms).
constexpr std::uint64_t kCalibrationWindowNs = 1000000;

// Rates outside this range mean the measurement went wrong (a VM stalled, a broken
// counter); the monotonic clock is safer than a wildly wrong TSC rate.
constexpr std::uint64_t kMinTscHz = 1000000;
constexpr std::uint64_t kMaxTscHz = 100000000000ull;

struct Calibration {
    bool done = false;         // calibration attempted
    std::uint64_t tsc_hz = 0;  // 0 when the TSC cannot be used
};

std::mutex g_clock_lock;
Calibration g_calibration;  // guarded by g_clock_lock

bool cpu_has_invariant_tsc() noexcept {
#if defined(__x86_64__)
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(0x80000000u, &eax, &ebx, &ecx, &edx) || eax < 0x80000007u) return false;
    if (!__get_cpuid(0x80000007u, &eax, &ebx, &ecx, &edx)) return false;
    return (edx & (1u << 8)) != 0;
#else
    return false;
#endif
}

#if defined(__x86_64__)
struct ClockPair {
    std::uint64_t ns;
    std::uint64_t tsc;
};

// One (CLOCK_MONOTONIC, TSC) pair: the monotonic read is bracketed by two TSC reads
// and the tightest of a few tries wins, so a preemption between the reads cannot
// skew the calibration.
ClockPair read_clock_pair() noexcept {
    ClockPair best{0, 0};
    std::uint64_t best_gap = std::numeric_limits<std::uint64_t>::max();
    for (int attempt = 0; attempt < 16; ++attempt) {
        const std::uint64_t before = __rdtsc();
        const std::uint64_t ns = detail::monotonic_ns();
        const std::uint64_t after = __rdtsc();
        if (after >= before && after - before < best_gap) {
            best_gap = after - before;
            best = {ns, before + (after - before) / 2};
        }
    }
    return best;
}

// Taken when the library is loaded: the start of the calibration window.
const ClockPair g_load_pair = read_clock_pair();

std::uint64_t measure_tsc_hz() noexcept {
    const ClockPair start = g_load_pair.ns != 0 ? g_load_pair : read_clock_pair();
    std::uint64_t now = detail::monotonic_ns();
    // Sleep rather than spin: the rate is the same, and the CPU is free for others.
    while (now - start.ns < kCalibrationWindowNs) {
        const std::uint64_t left = kCalibrationWindowNs - (now - start.ns);
        struct timespec ts = {0, static_cast<long>(left)};
        ::nanosleep(&ts, nullptr);
        now = detail::monotonic_ns();
    }
    const ClockPair end = read_clock_pair();
    if (end.tsc <= start.tsc || end.ns <= start.ns) return 0;
    const unsigned __int128 ticks = end.tsc - start.tsc;
    return static_cast<std::uint64_t>(ticks * kNsPerSec / (end.ns - start.ns));
}
#endif

// Caller holds g_clock_lock.
std::uint64_t calibrated_tsc_hz() noexcept {
    if (g_calibration.done) return g_calibration.tsc_hz;
    g_calibration.done = true;
#if defined(__x86_64__)
    if (!cpu_has_invariant_tsc()) return 0;
    const std::uint64_t hz = measure_tsc_hz();
    if (hz < kMinTscHz || hz > kMaxTscHz) {
        LOOM_LOG_WARN(
            "TSC calibration gave an implausible rate of {} Hz; using clock_gettime(CLOCK_MONOTONIC)", hz);
        return 0;
    }
    g_calibration.tsc_hz = hz;
    return hz;
#else
    return 0;
#endif
}

// Caller holds g_clock_lock. Rates first, source last (release): readers that see
// the new source see the matching rates.
void install(ClockSource source, std::uint64_t ticks_per_second) noexcept {
    detail::ClockState& state = detail::g_clock;
    state.ticks_per_second = ticks_per_second;
    state.ns_per_tick_q32 =
        static_cast<std::uint64_t>((static_cast<unsigned __int128>(kNsPerSec) << 32) / ticks_per_second);
    state.ticks_per_ns_q32 =
        static_cast<std::uint64_t>((static_cast<unsigned __int128>(ticks_per_second) << 32) / kNsPerSec);
    state.source.store(static_cast<std::uint8_t>(source), std::memory_order_release);
}

}  // namespace

std::string_view to_string(ClockSource source) noexcept {
    switch (source) {
        case ClockSource::tsc:
            return "tsc";
        case ClockSource::monotonic:
            return "monotonic";
    }
    return "unknown";
}

namespace detail {

void init_clock() noexcept {
    std::lock_guard guard(g_clock_lock);
    if (g_clock.source.load(std::memory_order_relaxed) != 0) return;  // another thread was first
    const std::uint64_t hz = calibrated_tsc_hz();
    if (hz != 0) {
        install(ClockSource::tsc, hz);
    } else {
        install(ClockSource::monotonic, kNsPerSec);
    }
    LOOM_LOG_DEBUG("clock source: {}, {} ticks per second",
                   to_string(static_cast<ClockSource>(g_clock.source.load())), g_clock.ticks_per_second);
}

Ticks get_time_first() noexcept {
    init_clock();
    return get_time();
}

}  // namespace detail

ClockInfo clock_info() noexcept {
    const detail::ClockState& state = detail::clock_state();
    return {static_cast<ClockSource>(state.source.load(std::memory_order_acquire)), state.ticks_per_second,
            cpu_has_invariant_tsc()};
}

Status select_clock_source(ClockSource source) noexcept {
    detail::clock_state();  // the first choice happens exactly as without this call
    std::lock_guard guard(g_clock_lock);
    switch (source) {
        case ClockSource::monotonic:
            install(ClockSource::monotonic, kNsPerSec);
            return Status::ok;
        case ClockSource::tsc: {
            const std::uint64_t hz = calibrated_tsc_hz();
            if (hz == 0) {
                LOOM_LOG_DIAG("clock source tsc requested, but this CPU has no usable invariant TSC");
                return Status::unsupported;
            }
            install(ClockSource::tsc, hz);
            return Status::ok;
        }
    }
    LOOM_LOG_DIAG("unknown clock source {}", static_cast<int>(source));
    return Status::invalid_param;
}

}  // namespace loom::ucs
