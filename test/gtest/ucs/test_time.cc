#include "common/test_helpers.h"

#include "ucs/time/clock.h"
#include "ucs/time/deadline.h"

#include <gtest/gtest.h>

#include <time.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <string>
#include <thread>

namespace loom::ucs {
namespace {

/** Restores the clock source a test switched away from. */
class ClockTest : public ::testing::Test {
protected:
    void SetUp() override { original_ = clock_info().source; }
    void TearDown() override { ASSERT_EQ(Status::ok, select_clock_source(original_)); }

    ClockSource original_ = ClockSource::monotonic;
};

/** True when /proc/cpuinfo shows the kernel's view of CPUID 0x80000007 EDX bit 8. */
bool kernel_reports_invariant_tsc() {
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line;
    while (std::getline(cpuinfo, line)) {
        if (line.rfind("flags", 0) == 0) return line.find(" nonstop_tsc") != std::string::npos;
    }
    return false;
}

/**
 * One (get_time, CLOCK_MONOTONIC) pair whose clock reads bracket the monotonic read
 * tightly, so a preemption cannot skew an interval measured from two such pairs.
 */
struct Pair {
    Ticks ticks;
    std::uint64_t ns;
};

Pair read_pair() {
    Pair best{0, 0};
    Ticks best_gap = std::numeric_limits<Ticks>::max();
    for (int attempt = 0; attempt < 50; ++attempt) {
        const Ticks before = get_time();
        const std::uint64_t ns = detail::monotonic_ns();
        const Ticks after = get_time();
        if (after - before < best_gap) {
            best_gap = after - before;
            best = {before + (after - before) / 2, ns};
        }
    }
    return best;
}

void expect_non_decreasing(int reads) {
    Ticks previous = get_time();
    int decreases = 0;
    for (int i = 0; i < reads; ++i) {
        const Ticks now = get_time();
        if (now < previous) ++decreases;
        previous = now;
    }
    EXPECT_EQ(0, decreases);
}

// The clock measured against CLOCK_MONOTONIC over a short sleep: within 20%.
void expect_agrees_with_monotonic() {
    const Pair start = read_pair();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const Pair end = read_pair();
    const double by_clock = static_cast<double>(ticks_to_ns(end.ticks - start.ticks));
    const double by_monotonic = static_cast<double>(end.ns - start.ns);
    EXPECT_GT(by_monotonic, 9e6);
    EXPECT_NEAR(by_clock, by_monotonic, 0.2 * by_monotonic);
}

TEST_F(ClockTest, NeverGoesBackwards) {
    expect_non_decreasing(200000);
}

TEST_F(ClockTest, SourceMatchesCpu) {
    const ClockInfo info = clock_info();
#if defined(__x86_64__)
    EXPECT_EQ(kernel_reports_invariant_tsc(), info.cpu_has_invariant_tsc);
    if (info.cpu_has_invariant_tsc) {
        EXPECT_EQ(ClockSource::tsc, info.source);
    } else {
        EXPECT_EQ(ClockSource::monotonic, info.source);
    }
#else
    EXPECT_FALSE(info.cpu_has_invariant_tsc);
    EXPECT_EQ(ClockSource::monotonic, info.source);
#endif
}

TEST_F(ClockTest, SourceIsReportedConsistently) {
    const ClockInfo first = clock_info();
    for (int i = 0; i < 100; ++i) {
        (void)get_time();
        const ClockInfo again = clock_info();
        ASSERT_EQ(first.source, again.source);
        ASSERT_EQ(first.ticks_per_second, again.ticks_per_second);
    }
    if (first.source == ClockSource::monotonic) {
        EXPECT_EQ(1000000000u, first.ticks_per_second);
    } else {
        // Any TSC from the last 20 years runs between 100 MHz and 10 GHz.
        EXPECT_GT(first.ticks_per_second, 100000000u);
        EXPECT_LT(first.ticks_per_second, 10000000000u);
    }
    EXPECT_EQ("tsc", to_string(ClockSource::tsc));
    EXPECT_EQ("monotonic", to_string(ClockSource::monotonic));
}

TEST_F(ClockTest, AgreesWithClockGettime) {
    expect_agrees_with_monotonic();
}

TEST_F(ClockTest, ConversionsRoundTrip) {
    const double hz = static_cast<double>(clock_info().ticks_per_second);
    for (std::uint64_t ns : {0ull, 1000ull, 123456789ull, 3600ull * 1000000000ull}) {
        const Ticks ticks = ns_to_ticks(ns);
        EXPECT_NEAR(static_cast<double>(ns) * hz / 1e9, static_cast<double>(ticks), 1 + 1e-6 * ticks) << ns;
        // Two roundings of at most one tick each.
        EXPECT_NEAR(static_cast<double>(ns), static_cast<double>(ticks_to_ns(ticks)),
                    2 + 2e9 / hz + 1e-9 * ns)
            << ns;
    }
    EXPECT_EQ(ns_to_ticks(5000), us_to_ticks(5));
    EXPECT_NEAR(1234.0, static_cast<double>(ticks_to_us(us_to_ticks(1234))), 1.0);
    EXPECT_NEAR(2.5, ticks_to_sec(sec_to_ticks(2.5)), 1e-6);
    EXPECT_NEAR(hz, static_cast<double>(sec_to_ticks(1.0)), 1.0);
    EXPECT_EQ(0u, sec_to_ticks(-1.0));
    EXPECT_EQ(0u, sec_to_ticks(std::nan("")));
}

TEST_F(ClockTest, ConversionsSaturate) {
    const Ticks max = std::numeric_limits<Ticks>::max();
    EXPECT_EQ(max, us_to_ticks(max / 10));
    EXPECT_EQ(max, sec_to_ticks(1e30));
    // At 1 GHz or more a nanosecond is at least a tick, so the largest ns value saturates.
    if (clock_info().ticks_per_second >= 1000000000u) {
        EXPECT_EQ(max, ns_to_ticks(max));
    }
    // No wrap-around: larger inputs never give smaller results.
    EXPECT_GE(ns_to_ticks(max), ns_to_ticks(max / 2));
    EXPECT_GE(ticks_to_ns(max), ticks_to_ns(max / 2));
}

TEST_F(ClockTest, ForcedMonotonicIsClockGettime) {
    ASSERT_EQ(Status::ok, select_clock_source(ClockSource::monotonic));
    const ClockInfo info = clock_info();
    EXPECT_EQ(ClockSource::monotonic, info.source);
    EXPECT_EQ(1000000000u, info.ticks_per_second);
    // Ticks are CLOCK_MONOTONIC nanoseconds: bracketed by two direct reads.
    struct timespec ts;
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    const std::uint64_t before = static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
    const Ticks ticks = get_time();
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    const std::uint64_t after = static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
    EXPECT_LE(before, ticks);
    EXPECT_GE(after, ticks);
    EXPECT_EQ(12345u, ticks_to_ns(12345));
    EXPECT_EQ(12345u, ns_to_ticks(12345));
    expect_non_decreasing(20000);
    expect_agrees_with_monotonic();
}

TEST_F(ClockTest, TscCanBeSelectedOnlyWhenInvariant) {
    const ClockInfo before = clock_info();
    ASSERT_EQ(Status::ok, select_clock_source(ClockSource::monotonic));
    const Status status = select_clock_source(ClockSource::tsc);
    if (!before.cpu_has_invariant_tsc) {
        EXPECT_EQ(Status::unsupported, status);
        EXPECT_EQ(ClockSource::monotonic, clock_info().source);
        return;
    }
    ASSERT_EQ(Status::ok, status);
    const ClockInfo after = clock_info();
    EXPECT_EQ(ClockSource::tsc, after.source);
    if (before.source == ClockSource::tsc) {
        // Calibrated once: switching back gives the same rate.
        EXPECT_EQ(before.ticks_per_second, after.ticks_per_second);
    }
    expect_non_decreasing(20000);
}

TEST_F(ClockTest, UnknownSourceIsRejected) {
    EXPECT_EQ(Status::invalid_param, select_clock_source(static_cast<ClockSource>(77)));
    EXPECT_EQ(original_, clock_info().source);
}

TEST(Deadline, NeverDoesNotExpire) {
    const Deadline deadline = Deadline::never();
    EXPECT_TRUE(deadline.is_never());
    EXPECT_FALSE(deadline.expired());
    EXPECT_FALSE(deadline.expired(std::numeric_limits<Ticks>::max()));
    EXPECT_EQ(Deadline::kInfinite, deadline.remaining());
}

TEST(Deadline, ExplicitTimes) {
    const Deadline deadline = Deadline::at(1000);
    EXPECT_FALSE(deadline.is_never());
    EXPECT_EQ(1000u, deadline.end());
    EXPECT_FALSE(deadline.expired(999));
    EXPECT_TRUE(deadline.expired(1000));
    EXPECT_TRUE(deadline.expired(5000));
    EXPECT_EQ(600u, deadline.remaining(400));
    EXPECT_EQ(0u, deadline.remaining(1000));
    EXPECT_EQ(0u, deadline.remaining(7000));
}

TEST(Deadline, ZeroAndNegativeDurationsHaveExpired) {
    EXPECT_TRUE(Deadline::after(std::chrono::seconds(0)).expired());
    EXPECT_TRUE(Deadline::after(std::chrono::milliseconds(-5)).expired());
    EXPECT_EQ(0u, Deadline::after(std::chrono::milliseconds(-5)).remaining());
    EXPECT_TRUE(Deadline::after_ticks(0).expired());
}

TEST(Deadline, HugeDurationsAreNever) {
    EXPECT_TRUE(Deadline::after(std::chrono::hours::max()).is_never());
    EXPECT_TRUE(Deadline::after(std::chrono::duration<double>(1e300)).is_never());
    EXPECT_TRUE(Deadline::after_ticks(std::numeric_limits<Ticks>::max()).is_never());
    EXPECT_FALSE(Deadline::after(std::chrono::hours(24 * 365)).is_never());
}

TEST(Deadline, RemainingMatchesTheDuration) {
    const Ticks hour = sec_to_ticks(3600.0);
    const Ticks before = get_time();
    const Deadline deadline = Deadline::after(std::chrono::hours(1));
    const Ticks after = get_time();
    EXPECT_FALSE(deadline.expired());
    EXPECT_GE(deadline.end(), before + hour - hour / 1000000);
    EXPECT_LE(deadline.end(), after + hour + hour / 1000000);
    EXPECT_LE(deadline.remaining(), hour + hour / 1000000);
    EXPECT_GT(deadline.remaining(), hour - sec_to_ticks(60.0));
}

TEST(Deadline, ShortDeadlineExpiresAfterItsDuration) {
    const std::uint64_t start_ns = detail::monotonic_ns();
    const Deadline deadline = Deadline::after(std::chrono::milliseconds(2));
    std::uint64_t checks = 0;
    while (!deadline.expired()) {
        ++checks;
        // A guard against a clock that never advances: fails instead of hanging.
        ASSERT_LT(detail::monotonic_ns() - start_ns, 10ull * 1000000000ull);
    }
    const std::uint64_t elapsed_ns = detail::monotonic_ns() - start_ns;
    EXPECT_GT(checks, 0u);
    EXPECT_GE(elapsed_ns, 1600000u);  // 2 ms less a generous 20% for calibration error
    EXPECT_EQ(0u, deadline.remaining());
}

}  // namespace
}  // namespace loom::ucs
