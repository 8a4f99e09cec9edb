#include "common/test_helpers.h"

#include "ucs/async/timer_queue.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

namespace loom::ucs {
namespace {

using std::chrono::milliseconds;
using Time = TimerClock::time_point;

/** A fixed origin: these tests run on synthetic time, never on the real clock. */
const Time kT0 = Time{} + std::chrono::hours(1);

void noop_timer(void*) {}

TimerId add_ok(TimerQueue& q, Time deadline, TimerClock::duration period = {}, void* arg = nullptr) {
    auto id = q.add(deadline, period, noop_timer, arg);
    EXPECT_TRUE(id.ok());
    return id.value_or(TimerId::invalid);
}

/** Pops everything expired at @p now, returning the args (labels) in firing order. */
std::vector<std::intptr_t> pop_all(TimerQueue& q, Time now) {
    std::vector<std::intptr_t> labels;
    std::uint64_t limit = q.next_sequence();
    TimerQueue::Expired e{};
    while (q.pop_expired(now, limit, e)) labels.push_back(reinterpret_cast<std::intptr_t>(e.arg));
    return labels;
}

void* label(std::intptr_t n) {
    return reinterpret_cast<void*>(n);
}

TEST(TimerQueue, ExpiresInDeadlineOrderThenInsertionOrder) {
    TimerQueue q;
    add_ok(q, kT0 + milliseconds(30), {}, label(30));
    add_ok(q, kT0 + milliseconds(10), {}, label(10));
    add_ok(q, kT0 + milliseconds(20), {}, label(20));
    add_ok(q, kT0 + milliseconds(20), {}, label(21));
    EXPECT_EQ(kT0 + milliseconds(10), q.next_deadline());
    EXPECT_TRUE(pop_all(q, kT0 + milliseconds(5)).empty());
    EXPECT_EQ((std::vector<std::intptr_t>{10, 20, 21}), pop_all(q, kT0 + milliseconds(25)));
    EXPECT_EQ(1u, q.size());
    EXPECT_EQ((std::vector<std::intptr_t>{30}), pop_all(q, kT0 + milliseconds(30)));
    EXPECT_TRUE(q.empty());
    EXPECT_FALSE(q.next_deadline().has_value());
}

TEST(TimerQueue, CancelledTimerNeverExpires) {
    TimerQueue q;
    TimerId a = add_ok(q, kT0 + milliseconds(1), {}, label(1));
    TimerId b = add_ok(q, kT0 + milliseconds(2), {}, label(2));
    TimerId c = add_ok(q, kT0 + milliseconds(3), {}, label(3));
    EXPECT_TRUE(q.contains(b));
    EXPECT_EQ(Status::ok, q.cancel(b));
    EXPECT_FALSE(q.contains(b));
    EXPECT_EQ(Status::no_element, q.cancel(b));
    EXPECT_EQ(Status::ok, q.cancel(a));
    EXPECT_EQ(kT0 + milliseconds(3), q.next_deadline());
    EXPECT_EQ((std::vector<std::intptr_t>{3}), pop_all(q, kT0 + milliseconds(10)));
    EXPECT_EQ(Status::no_element, q.cancel(c)) << "an expired one-shot timer cannot be cancelled";
}

TEST(TimerQueue, StaleIdDoesNotCancelNewTimer) {
    TimerQueue q;
    TimerId old_id = add_ok(q, kT0);
    ASSERT_EQ(Status::ok, q.cancel(old_id));
    TimerId new_id = add_ok(q, kT0);  // reuses the slot
    EXPECT_NE(old_id, new_id);
    EXPECT_EQ(Status::no_element, q.cancel(old_id));
    EXPECT_TRUE(q.contains(new_id));
    EXPECT_EQ(Status::no_element, q.cancel(TimerId::invalid));
    EXPECT_EQ(Status::no_element, q.cancel(static_cast<TimerId>(0x0000000700000009ull)));
}

TEST(TimerQueue, PeriodicTimerKeepsItsGridAndSkipsMissedPeriods) {
    TimerQueue q;
    TimerId id = add_ok(q, kT0 + milliseconds(10), milliseconds(10), label(1));
    TimerQueue::Expired e{};
    ASSERT_TRUE(q.pop_expired(kT0 + milliseconds(12), q.next_sequence(), e));
    EXPECT_EQ(id, e.id);
    EXPECT_EQ(kT0 + milliseconds(20), q.next_deadline());
    // Late by 3.5 periods: one expiry, then back on the grid.
    ASSERT_TRUE(q.pop_expired(kT0 + milliseconds(55), q.next_sequence(), e));
    EXPECT_EQ(kT0 + milliseconds(60), q.next_deadline());
    EXPECT_FALSE(q.pop_expired(kT0 + milliseconds(59), q.next_sequence(), e));
    ASSERT_TRUE(q.pop_expired(kT0 + milliseconds(60), q.next_sequence(), e));
    EXPECT_EQ(kT0 + milliseconds(70), q.next_deadline());
    EXPECT_TRUE(q.contains(id));
    EXPECT_EQ(Status::ok, q.cancel(id));
    EXPECT_TRUE(q.empty());
}

TEST(TimerQueue, SequenceLimitDefersTimersAddedDuringAPass) {
    TimerQueue q;
    add_ok(q, kT0, {}, label(1));
    add_ok(q, kT0, milliseconds(1), label(2));  // periodic, rescheduled into the past below
    std::uint64_t limit = q.next_sequence();
    add_ok(q, kT0 - milliseconds(5), {}, label(3));  // added "by a callback" after the pass began
    TimerQueue::Expired e{};
    EXPECT_FALSE(q.pop_expired(kT0, limit, e)) << "the newer timer is first and must wait";
    EXPECT_EQ((std::vector<std::intptr_t>{3, 1, 2}), pop_all(q, kT0));
    // The periodic timer went to kT0 + 1 ms, after now: not again in this pass.
    EXPECT_EQ(kT0 + milliseconds(1), q.next_deadline());
}

TEST(TimerQueue, InvalidArguments) {
    TimerQueue q;
    test::LogCapture capture("warn");
    EXPECT_EQ(Status::invalid_param, q.add(kT0, {}, nullptr, nullptr).status());
    EXPECT_EQ(1, capture.count("null callback"));
    EXPECT_EQ(Status::invalid_param, q.add(kT0, milliseconds(-1), noop_timer, nullptr).status());
    EXPECT_EQ(1, capture.count("negative period"));
    EXPECT_TRUE(q.empty());
}

// Random adds, cancels and expiries against a sorted model (deadline, insertion order).
TEST(TimerQueue, RandomOperationsMatchModel) {
    TimerQueue q;
    std::mt19937 rng(777);
    std::map<std::pair<Time, std::uint64_t>, TimerId> model;
    std::map<TimerId, std::pair<Time, std::uint64_t>> by_id;
    std::uint64_t order = 0;
    Time now = kT0;
    for (int op = 0; op < 20000; ++op) {
        unsigned choice = rng() % 10;
        if (choice < 5) {
            Time deadline = now + milliseconds(rng() % 50);
            TimerId id = add_ok(q, deadline);
            model[{deadline, order}] = id;
            by_id[id] = {deadline, order};
            ++order;
        } else if (choice < 7 && !by_id.empty()) {
            auto it = std::next(by_id.begin(), static_cast<long>(rng() % by_id.size()));
            ASSERT_EQ(Status::ok, q.cancel(it->first));
            model.erase(it->second);
            by_id.erase(it);
        } else {
            now += milliseconds(rng() % 10);
            std::uint64_t limit = q.next_sequence();
            TimerQueue::Expired e{};
            while (q.pop_expired(now, limit, e)) {
                ASSERT_FALSE(model.empty());
                ASSERT_LE(model.begin()->first.first, now);
                ASSERT_EQ(model.begin()->second, e.id);
                by_id.erase(e.id);
                model.erase(model.begin());
            }
            ASSERT_TRUE(model.empty() || model.begin()->first.first > now);
        }
        ASSERT_EQ(model.size(), q.size());
        if (!model.empty()) {
            ASSERT_EQ(model.begin()->first.first, q.next_deadline());
        }
    }
}

}  // namespace
}  // namespace loom::ucs
