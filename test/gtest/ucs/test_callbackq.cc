#include "common/test_helpers.h"

#include "ucs/progress/callback_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <map>
#include <random>
#include <thread>
#include <vector>

namespace loom::ucs {
namespace {

struct Counter {
    unsigned calls = 0;
    unsigned result = 1;
};

unsigned count_call(void* arg) {
    auto* counter = static_cast<Counter*>(arg);
    ++counter->calls;
    return counter->result;
}

CallbackId add_ok(CallbackQueue& q, ProgressCallback cb, void* arg) {
    auto id = q.add(cb, arg);
    EXPECT_TRUE(id.ok());
    return id.value_or(CallbackId::invalid);
}

CallbackId add_oneshot_ok(CallbackQueue& q, ProgressCallback cb, void* arg) {
    auto id = q.add_oneshot(cb, arg);
    EXPECT_TRUE(id.ok());
    return id.value_or(CallbackId::invalid);
}

/** Registers @p n counters so that the next callbacks land past the fast slots. */
void add_fillers(CallbackQueue& q, std::deque<Counter>& fillers, unsigned n) {
    for (unsigned i = 0; i < n; ++i) add_ok(q, count_call, &fillers.emplace_back());
}

TEST(CallbackQueue, DispatchCallsEveryCallbackAndSumsResults) {
    CallbackQueue q;
    Counter a{0, 1}, b{0, 2}, c{0, 0};
    add_ok(q, count_call, &a);
    add_ok(q, count_call, &b);
    add_ok(q, count_call, &c);
    EXPECT_EQ(3u, q.size());
    EXPECT_EQ(3u, q.dispatch());
    EXPECT_EQ(3u, q.dispatch());
    EXPECT_EQ(2u, a.calls);
    EXPECT_EQ(2u, b.calls);
    EXPECT_EQ(2u, c.calls);
}

TEST(CallbackQueue, EmptyQueueDispatchesNothing) {
    CallbackQueue q;
    EXPECT_EQ(0u, q.dispatch());
    EXPECT_EQ(0u, q.size());
}

TEST(CallbackQueue, RemoveStopsCalls) {
    CallbackQueue q;
    Counter a, b;
    CallbackId ida = add_ok(q, count_call, &a);
    add_ok(q, count_call, &b);
    EXPECT_EQ(2u, q.dispatch());
    EXPECT_EQ(Status::ok, q.remove(ida));
    EXPECT_EQ(1u, q.size());
    EXPECT_EQ(1u, q.dispatch());
    EXPECT_EQ(1u, a.calls);
    EXPECT_EQ(2u, b.calls);
    EXPECT_EQ(Status::no_element, q.remove(ida));
}

TEST(CallbackQueue, RemovedBeforeFirstDispatchNeverRuns) {
    CallbackQueue q;
    Counter a;
    CallbackId id = add_ok(q, count_call, &a);
    EXPECT_EQ(Status::ok, q.remove(id));
    EXPECT_EQ(0u, q.dispatch());
    EXPECT_EQ(0u, a.calls);
    EXPECT_EQ(Status::no_element, q.remove(id));
}

TEST(CallbackQueue, InvalidArguments) {
    CallbackQueue q;
    test::LogCapture capture("warn");
    auto id = q.add(nullptr, nullptr);
    EXPECT_EQ(Status::invalid_param, id.status());
    EXPECT_EQ(1, capture.count("null callback"));
    EXPECT_EQ(Status::invalid_param, q.add_oneshot(nullptr, nullptr).status());
    EXPECT_EQ(Status::no_element, q.remove(CallbackId::invalid));
    EXPECT_EQ(Status::no_element, q.remove(static_cast<CallbackId>(0x0000000500000003ull)));
    EXPECT_EQ(0u, q.size());
}

TEST(CallbackQueue, StaleIdDoesNotRemoveNewCallback) {
    CallbackQueue q;
    Counter a, b;
    CallbackId old_id = add_ok(q, count_call, &a);
    ASSERT_EQ(Status::ok, q.remove(old_id));
    q.dispatch();  // compaction frees the slot
    CallbackId new_id = add_ok(q, count_call, &b);
    EXPECT_NE(old_id, new_id);
    EXPECT_NE(CallbackId::invalid, new_id);
    EXPECT_EQ(Status::no_element, q.remove(old_id));
    EXPECT_EQ(1u, q.dispatch());
    EXPECT_EQ(1u, b.calls);
    EXPECT_EQ(0u, a.calls);
}

struct SelfRemover {
    CallbackQueue* q = nullptr;
    CallbackId id = CallbackId::invalid;
    unsigned calls = 0;
    Status status = Status::in_progress;
};

unsigned remove_self(void* arg) {
    auto* s = static_cast<SelfRemover*>(arg);
    ++s->calls;
    s->status = s->q->remove(s->id);
    return 1;
}

TEST(CallbackQueue, CallbackRemovesItself) {
    // 0 fillers: the callback is in a fast slot; kFastSlots fillers: in the slow list.
    for (unsigned fillers_count : {0u, CallbackQueue::kFastSlots}) {
        SCOPED_TRACE(fillers_count);
        CallbackQueue q;
        std::deque<Counter> fillers;
        add_fillers(q, fillers, fillers_count);
        SelfRemover s{&q};
        s.id = add_ok(q, remove_self, &s);
        EXPECT_EQ(fillers_count + 1, q.dispatch());
        EXPECT_EQ(Status::ok, s.status);
        EXPECT_EQ(fillers_count, q.size());
        EXPECT_EQ(fillers_count, q.dispatch());
        EXPECT_EQ(1u, s.calls);
        for (const Counter& f : fillers) EXPECT_EQ(2u, f.calls);
    }
}

/** Removes its peer on every call; whichever of a pair runs first must starve the other. */
struct Mutual {
    CallbackQueue* q = nullptr;
    CallbackId peer = CallbackId::invalid;
    unsigned calls = 0;
};

unsigned remove_peer(void* arg) {
    auto* m = static_cast<Mutual*>(arg);
    ++m->calls;
    (void)m->q->remove(m->peer);
    return 1;
}

TEST(CallbackQueue, CallbackRemovesAnotherDuringDispatch) {
    // Fillers place the pair both fast, one fast and one slow, or both slow.
    for (unsigned fillers_count : {0u, CallbackQueue::kFastSlots - 1, CallbackQueue::kFastSlots}) {
        SCOPED_TRACE(fillers_count);
        CallbackQueue q;
        std::deque<Counter> fillers;
        add_fillers(q, fillers, fillers_count);
        Mutual a{&q}, b{&q};
        CallbackId ida = add_ok(q, remove_peer, &a);
        CallbackId idb = add_ok(q, remove_peer, &b);
        a.peer = idb;
        b.peer = ida;
        q.dispatch();
        EXPECT_EQ(1u, a.calls + b.calls) << "the removed callback still ran in the same pass";
        q.dispatch();
        q.dispatch();
        EXPECT_EQ(3u, a.calls + b.calls);
        EXPECT_TRUE(a.calls == 0 || b.calls == 0);
        EXPECT_EQ(fillers_count + 1, q.size());
    }
}

struct Adder {
    CallbackQueue* q = nullptr;
    Counter* target = nullptr;
    bool oneshot = false;
    bool added = false;
};

unsigned add_target_once(void* arg) {
    auto* a = static_cast<Adder*>(arg);
    if (!a->added) {
        auto id = a->oneshot ? a->q->add_oneshot(count_call, a->target) : a->q->add(count_call, a->target);
        a->added = id.ok();
    }
    return 0;
}

TEST(CallbackQueue, CallbackAddedDuringDispatchRunsFromNextDispatch) {
    for (bool oneshot : {false, true}) {
        SCOPED_TRACE(oneshot);
        CallbackQueue q;
        Counter target;
        Adder adder{&q, &target, oneshot};
        add_ok(q, add_target_once, &adder);
        EXPECT_EQ(0u, q.dispatch());
        EXPECT_TRUE(adder.added);
        EXPECT_EQ(0u, target.calls);
        EXPECT_EQ(1u, q.dispatch());
        EXPECT_EQ(1u, target.calls);
        EXPECT_EQ(oneshot ? 0u : 1u, q.dispatch());
        EXPECT_EQ(oneshot ? 1u : 2u, target.calls);
    }
}

TEST(CallbackQueue, MoreCallbacksThanFastSlots) {
    CallbackQueue q;
    constexpr unsigned kCount = 3 * CallbackQueue::kFastSlots + 2;
    std::vector<Counter> counters(kCount);
    std::vector<CallbackId> ids;
    for (Counter& c : counters) ids.push_back(add_ok(q, count_call, &c));
    EXPECT_EQ(kCount, q.dispatch());
    for (const Counter& c : counters) EXPECT_EQ(1u, c.calls);

    // Remove the first few (fast slots, freeing room for promotions) and some slow ones.
    std::vector<bool> removed(kCount, false);
    for (unsigned i : {0u, 1u, 2u, 10u, kCount - 1}) {
        EXPECT_EQ(Status::ok, q.remove(ids[i]));
        removed[i] = true;
    }
    EXPECT_EQ(kCount - 5, q.size());
    for (int pass = 0; pass < 3; ++pass) EXPECT_EQ(kCount - 5, q.dispatch());
    for (unsigned i = 0; i < kCount; ++i) EXPECT_EQ(removed[i] ? 1u : 4u, counters[i].calls) << i;

    for (unsigned i = 0; i < kCount; ++i) {
        if (!removed[i]) {
            EXPECT_EQ(Status::ok, q.remove(ids[i]));
        }
    }
    EXPECT_EQ(0u, q.dispatch());
    EXPECT_EQ(0u, q.size());
}

TEST(CallbackQueue, OneshotRunsOnce) {
    CallbackQueue q;
    Counter a{0, 5};
    CallbackId id = add_oneshot_ok(q, count_call, &a);
    EXPECT_EQ(1u, q.size());
    EXPECT_EQ(5u, q.dispatch());
    EXPECT_EQ(0u, q.dispatch());
    EXPECT_EQ(1u, a.calls);
    EXPECT_EQ(0u, q.size());
    EXPECT_EQ(Status::no_element, q.remove(id));
}

TEST(CallbackQueue, OneshotCancelledBeforeRunningNeverRuns) {
    CallbackQueue q;
    Counter a;
    CallbackId id = add_oneshot_ok(q, count_call, &a);
    EXPECT_EQ(Status::ok, q.remove(id));
    EXPECT_EQ(0u, q.dispatch());
    EXPECT_EQ(0u, a.calls);
}

TEST(CallbackQueue, OneshotsCancellingEachOtherRunOnce) {
    CallbackQueue q;
    Mutual a{&q}, b{&q};
    CallbackId ida = add_oneshot_ok(q, remove_peer, &a);
    CallbackId idb = add_oneshot_ok(q, remove_peer, &b);
    a.peer = idb;
    b.peer = ida;
    EXPECT_EQ(1u, q.dispatch());
    EXPECT_EQ(0u, q.dispatch());
    EXPECT_EQ(1u, a.calls + b.calls);
    EXPECT_EQ(0u, q.size());
}

struct Chain {
    CallbackQueue* q = nullptr;
    unsigned remaining = 0;
    unsigned calls = 0;
};

unsigned repost_self(void* arg) {
    auto* c = static_cast<Chain*>(arg);
    ++c->calls;
    if (--c->remaining > 0) {
        EXPECT_TRUE(c->q->add_oneshot(repost_self, c).ok());
    }
    return 1;
}

TEST(CallbackQueue, OneshotRepostingItselfRunsOncePerDispatch) {
    CallbackQueue q;
    Chain chain{&q, 4};
    add_oneshot_ok(q, repost_self, &chain);
    for (unsigned pass = 1; pass <= 4; ++pass) {
        EXPECT_EQ(1u, q.dispatch());
        EXPECT_EQ(pass, chain.calls);
    }
    EXPECT_EQ(0u, q.dispatch());
    EXPECT_EQ(0u, q.size());
}

TEST(CallbackQueue, RemoveIfByArgument) {
    CallbackQueue q;
    Counter keep, drop;
    std::vector<CallbackId> drop_ids;
    for (unsigned i = 0; i < 10; ++i) {
        if (i % 2) {
            drop_ids.push_back(add_ok(q, count_call, &drop));
        } else {
            add_ok(q, count_call, &keep);
        }
    }
    add_oneshot_ok(q, count_call, &drop);
    EXPECT_EQ(6u, q.remove_if([&](ProgressCallback, void* arg) { return arg == &drop; }));
    EXPECT_EQ(0u, q.remove_if([&](ProgressCallback, void* arg) { return arg == &drop; }));
    EXPECT_EQ(5u, q.size());
    EXPECT_EQ(5u, q.dispatch());
    EXPECT_EQ(5u, keep.calls);
    EXPECT_EQ(0u, drop.calls);
    for (CallbackId id : drop_ids) EXPECT_EQ(Status::no_element, q.remove(id));
}

struct Killer {
    CallbackQueue* q = nullptr;
    Counter* victims = nullptr;
    unsigned victim_calls_at_kill = 0;
    unsigned removed = 0;
};

unsigned remove_victims(void* arg) {
    auto* k = static_cast<Killer*>(arg);
    k->victim_calls_at_kill = k->victims->calls;
    k->removed = k->q->remove_if([k](ProgressCallback, void* a) { return a == k->victims; });
    return 0;
}

TEST(CallbackQueue, RemoveIfDuringDispatch) {
    CallbackQueue q;
    Counter victims;
    Killer killer{&q, &victims};
    // Victims on both sides of the killer and in both the fast and slow arrays.
    for (unsigned i = 0; i < 4; ++i) add_ok(q, count_call, &victims);
    add_ok(q, remove_victims, &killer);
    for (unsigned i = 0; i < 8; ++i) add_ok(q, count_call, &victims);
    q.dispatch();
    EXPECT_EQ(12u, killer.removed);
    EXPECT_EQ(killer.victim_calls_at_kill, victims.calls) << "a removed callback ran later in the pass";
    q.dispatch();
    EXPECT_EQ(killer.victim_calls_at_kill, victims.calls);
    EXPECT_EQ(1u, q.size());
}

struct Nester {
    CallbackQueue* q = nullptr;
    unsigned nested_result = 99;
};

unsigned dispatch_nested(void* arg) {
    auto* n = static_cast<Nester*>(arg);
    n->nested_result = n->q->dispatch();
    return 1;
}

TEST(CallbackQueue, NestedDispatchDoesNothing) {
    CallbackQueue q;
    Nester n{&q};
    Counter other;
    add_ok(q, dispatch_nested, &n);
    add_ok(q, count_call, &other);
    EXPECT_EQ(2u, q.dispatch());
    EXPECT_EQ(0u, n.nested_result);
    EXPECT_EQ(1u, other.calls);
}

// Random add/add_oneshot/remove/dispatch sequences checked against a plain model: covers
// every transition of the fast/slow arrays (swap-removal, promotion, spare-buffer growth).
TEST(CallbackQueue, RandomOperationsMatchModel) {
    CallbackQueue q;
    std::mt19937 rng(20240601);
    struct Registration {
        std::size_t counter;
        bool oneshot;
    };
    std::deque<Counter> counters;
    std::vector<unsigned> expected;
    std::map<CallbackId, Registration> live;
    std::vector<CallbackId> dead;
    for (int op = 0; op < 6000; ++op) {
        unsigned choice = rng() % 100;
        if (choice < 30 || (choice < 45 && live.size() < 3)) {
            bool oneshot = choice >= 22;
            counters.emplace_back();
            expected.push_back(0);
            auto id =
                oneshot ? q.add_oneshot(count_call, &counters.back()) : q.add(count_call, &counters.back());
            ASSERT_TRUE(id.ok());
            live[id.value()] = Registration{counters.size() - 1, oneshot};
        } else if (choice < 60 && !live.empty()) {
            auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
            ASSERT_EQ(Status::ok, q.remove(it->first));
            dead.push_back(it->first);
            live.erase(it);
        } else if (choice < 65 && !dead.empty()) {
            ASSERT_EQ(Status::no_element, q.remove(dead[rng() % dead.size()]));
        } else {
            unsigned total = q.dispatch();
            ASSERT_EQ(live.size(), total);
            for (auto it = live.begin(); it != live.end();) {
                ++expected[it->second.counter];
                if (it->second.oneshot) {
                    dead.push_back(it->first);
                    it = live.erase(it);
                } else {
                    ++it;
                }
            }
            for (std::size_t i = 0; i < counters.size(); ++i) ASSERT_EQ(expected[i], counters[i].calls) << i;
        }
        ASSERT_EQ(live.size(), q.size());
    }
}

// --- concurrency -------------------------------------------------------------------

struct AtomicCounter {
    std::atomic<unsigned> calls{0};
};

unsigned count_atomic(void* arg) {
    static_cast<AtomicCounter*>(arg)->calls.fetch_add(1, std::memory_order_relaxed);
    return 1;
}

/** A dispatcher-side callback that posts deferred work (a oneshot) on each call. */
struct Poster {
    CallbackQueue* q = nullptr;
    AtomicCounter deferred;
};

unsigned post_deferred(void* arg) {
    auto* p = static_cast<Poster*>(arg);
    return p->q->add_oneshot(count_atomic, &p->deferred).ok() ? 1 : 0;
}

TEST(CallbackQueue, ConcurrentAddRemoveWhileDispatching) {
    CallbackQueue q;
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> passes{0};

    // Residents keep the fast array nearly full so the other thread's callbacks cross
    // into the slow list and get promoted as they come and go.
    std::vector<AtomicCounter> residents(CallbackQueue::kFastSlots - 2);
    for (AtomicCounter& r : residents) add_ok(q, count_atomic, &r);
    Poster poster{&q};
    add_ok(q, post_deferred, &poster);

    std::thread dispatcher([&] {
        while (!stop.load(std::memory_order_acquire)) {
            q.dispatch();
            passes.fetch_add(1, std::memory_order_release);
            std::this_thread::yield();  // lets the other thread in when both share a core
        }
    });

    auto wait_passes = [&](std::uint64_t n) {
        std::uint64_t target = passes.load(std::memory_order_acquire) + n;
        while (passes.load(std::memory_order_acquire) < target) std::this_thread::yield();
    };
    auto wait_called = [&](const AtomicCounter& c) {
        while (c.calls.load(std::memory_order_relaxed) == 0) std::this_thread::yield();
    };

    constexpr int kRounds = 300;
    for (int round = 0; round < kRounds; ++round) {
        AtomicCounter a, b, c, once;
        CallbackId ida = add_ok(q, count_atomic, &a);
        CallbackId idb = add_ok(q, count_atomic, &b);
        CallbackId idc = add_ok(q, count_atomic, &c);
        CallbackId idonce = add_oneshot_ok(q, count_atomic, &once);
        wait_called(a);
        wait_called(b);
        wait_called(c);
        wait_called(once);

        ASSERT_EQ(Status::ok, q.remove(idb));
        ASSERT_EQ(Status::ok, q.remove(ida));
        // The pass running when remove() returned may still call them; the next may not.
        wait_passes(2);
        unsigned a_calls = a.calls.load(), b_calls = b.calls.load(), c_calls = c.calls.load();
        wait_passes(2);
        ASSERT_EQ(a_calls, a.calls.load());
        ASSERT_EQ(b_calls, b.calls.load());
        ASSERT_LT(c_calls, c.calls.load());
        ASSERT_EQ(1u, once.calls.load());
        ASSERT_EQ(Status::no_element, q.remove(idonce));
        ASSERT_EQ(Status::ok, q.remove(idc));
        wait_passes(2);  // c is referenced by the dispatcher until a pass starts after remove()
    }

    stop.store(true, std::memory_order_release);
    dispatcher.join();
    // Residents, the poster and the oneshot the poster queued during the last pass.
    EXPECT_EQ(residents.size() + 2, q.size());
    for (const AtomicCounter& r : residents) EXPECT_EQ(passes.load(), r.calls.load());
    // Every pass but the first ran the oneshot posted by the pass before it.
    EXPECT_EQ(passes.load() - 1, poster.deferred.calls.load());
}

}  // namespace
}  // namespace loom::ucs
