#include "common/test_helpers.h"

#include "ucs/async/async_context.h"
#include "ucs/async/event_fd.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace loom::ucs {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

/** Bound of every wait for an event: only a broken implementation gets near it. */
constexpr auto kGenerousTimeout = std::chrono::seconds(30);

std::unique_ptr<AsyncContext> make_context() {
    auto context = AsyncContext::create();
    EXPECT_TRUE(context.ok());
    return context.ok() ? std::move(context.value()) : nullptr;
}

EventFd make_event_fd() {
    auto efd = EventFd::create();
    EXPECT_TRUE(efd.ok());
    return efd.ok() ? std::move(efd.value()) : EventFd();
}

/** Calls progress() until @p done holds; fails the test after kGenerousTimeout. */
template <typename Done>
void progress_until(AsyncContext& context, Done done) {
    auto limit = std::chrono::steady_clock::now() + kGenerousTimeout;
    while (!done()) {
        ASSERT_LT(std::chrono::steady_clock::now(), limit) << "event never happened";
        auto result = context.progress(10);
        ASSERT_TRUE(result.ok()) << to_string(result.status());
    }
}

/** Waits (without polling) until @p done holds; for the background-thread mode. */
template <typename Done>
void wait_until(Done done) {
    auto limit = std::chrono::steady_clock::now() + kGenerousTimeout;
    while (!done()) {
        ASSERT_LT(std::chrono::steady_clock::now(), limit) << "event never happened";
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
}

/** An fd handler recording its calls; optionally drains an eventfd (level-triggered). */
struct FdProbe {
    std::atomic<unsigned> calls{0};
    std::atomic<std::uint32_t> last_events{0};
    EventFd* drain = nullptr;
};

void probe_handler(void* arg, std::uint32_t events) {
    auto* probe = static_cast<FdProbe*>(arg);
    if (probe->drain != nullptr) probe->drain->drain();
    probe->last_events.store(events);
    probe->calls.fetch_add(1);
}

TEST(AsyncContext, FdHandlerRunsWhenReadable) {
    auto context = make_context();
    ASSERT_TRUE(context);
    EventFd efd = make_event_fd();
    FdProbe probe;
    probe.drain = &efd;
    ASSERT_EQ(Status::ok, context->add_fd(efd.fd(), kEventRead, probe_handler, &probe));
    EXPECT_EQ(0u, context->progress(0).value_or(99));
    EXPECT_EQ(Status::ok, efd.signal());
    EXPECT_EQ(1u, context->progress(0).value_or(99));
    EXPECT_EQ(1u, probe.calls.load());
    EXPECT_EQ(kEventRead, probe.last_events.load());
    EXPECT_EQ(0u, context->progress(0).value_or(99));
    EXPECT_EQ(Status::ok, context->remove_fd(efd.fd()));
}

TEST(AsyncContext, ModifyChangesWatchedEvents) {
    auto context = make_context();
    ASSERT_TRUE(context);
    EventFd efd = make_event_fd();
    FdProbe probe;
    ASSERT_EQ(Status::ok, context->add_fd(efd.fd(), kEventRead, probe_handler, &probe));
    EXPECT_EQ(0u, context->progress(0).value_or(99));
    ASSERT_EQ(Status::ok, context->modify_fd(efd.fd(), kEventWrite));  // an eventfd is writable
    EXPECT_EQ(1u, context->progress(0).value_or(99));
    EXPECT_EQ(kEventWrite, probe.last_events.load());
    ASSERT_EQ(Status::ok, context->modify_fd(efd.fd(), kEventRead));
    EXPECT_EQ(0u, context->progress(0).value_or(99));
    EXPECT_EQ(1u, probe.calls.load());
    EXPECT_EQ(Status::ok, context->remove_fd(efd.fd()));
}

TEST(AsyncContext, RemovedHandlerIsNotCalled) {
    auto context = make_context();
    ASSERT_TRUE(context);
    EventFd efd = make_event_fd();
    FdProbe probe;
    ASSERT_EQ(Status::ok, context->add_fd(efd.fd(), kEventRead, probe_handler, &probe));
    EXPECT_EQ(Status::ok, efd.signal());
    EXPECT_EQ(Status::ok, context->remove_fd(efd.fd()));
    EXPECT_EQ(0u, context->progress(0).value_or(99));
    EXPECT_EQ(0u, probe.calls.load());
    // The same fd can be registered again, with a new handler.
    FdProbe second;
    second.drain = &efd;
    ASSERT_EQ(Status::ok, context->add_fd(efd.fd(), kEventRead, probe_handler, &second));
    EXPECT_EQ(1u, context->progress(0).value_or(99));
    EXPECT_EQ(0u, probe.calls.load());
    EXPECT_EQ(1u, second.calls.load());
    EXPECT_EQ(Status::ok, context->remove_fd(efd.fd()));
}

TEST(AsyncContext, RegistrationErrors) {
    auto context = make_context();
    ASSERT_TRUE(context);
    EventFd efd = make_event_fd();
    FdProbe probe;
    test::TempFile file("x");
    int regular = ::open(file.path().c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(regular, 0);

    test::LogCapture capture("warn");
    // A high number nothing else gets (fds are allocated lowest first), so it stays closed.
    int closed = ::fcntl(efd.fd(), F_DUPFD_CLOEXEC, 900);
    ASSERT_GE(closed, 900);
    ::close(closed);
    EXPECT_EQ(Status::invalid_param, context->add_fd(-1, kEventRead, probe_handler, &probe));
    EXPECT_EQ(1, capture.count("fd -1"));
    EXPECT_EQ(Status::invalid_param, context->add_fd(closed, kEventRead, probe_handler, &probe));
    EXPECT_EQ(1, capture.count("fd " + std::to_string(closed) + ":"));
    EXPECT_EQ(Status::unsupported, context->add_fd(regular, kEventRead, probe_handler, &probe));
    EXPECT_EQ(Status::invalid_param, context->add_fd(efd.fd(), kEventRead, nullptr, &probe));
    EXPECT_EQ(Status::invalid_param, context->add_fd(efd.fd(), 1u << 30, probe_handler, &probe));
    EXPECT_EQ(Status::no_element, context->remove_fd(efd.fd()));
    EXPECT_EQ(Status::no_element, context->modify_fd(efd.fd(), kEventRead));
    ASSERT_EQ(Status::ok, context->add_fd(efd.fd(), kEventRead, probe_handler, &probe));
    EXPECT_EQ(Status::already_exists, context->add_fd(efd.fd(), kEventRead, probe_handler, &probe));
    EXPECT_EQ(Status::invalid_param, context->modify_fd(efd.fd(), 1u << 30));
    // One log line per error, each naming the fd.
    EXPECT_EQ(9, capture.count(" fd "));
    // Failed registrations left nothing behind.
    EXPECT_EQ(Status::no_element, context->remove_fd(-1));
    EXPECT_EQ(Status::no_element, context->remove_fd(regular));
    EXPECT_EQ(Status::ok, context->remove_fd(efd.fd()));
    ::close(regular);
}

TEST(AsyncContext, RemovingClosedFdStillUnregisters) {
    auto context = make_context();
    ASSERT_TRUE(context);
    FdProbe probe;
    int fd = -1;
    test::LogCapture capture("warn");  // opens its file first, so it cannot take over fd
    {
        EventFd efd = make_event_fd();
        fd = efd.fd();
        ASSERT_EQ(Status::ok, context->add_fd(fd, kEventRead, probe_handler, &probe));
    }  // closed while registered: a caller bug, reported but survivable
    EXPECT_EQ(Status::ok, context->remove_fd(fd));
    EXPECT_EQ(1, capture.count("fd " + std::to_string(fd) + ": Bad file descriptor"));
    EXPECT_EQ(Status::no_element, context->remove_fd(fd));
}

// --- timers --------------------------------------------------------------------------

struct FireLog {
    std::mutex lock;
    std::vector<int> fired;
    void add(int label) {
        std::lock_guard guard(lock);
        fired.push_back(label);
    }
    std::vector<int> get() {
        std::lock_guard guard(lock);
        return fired;
    }
    std::size_t size() { return get().size(); }
};

struct Labelled {
    FireLog* log;
    int label;
};

void log_label(void* arg) {
    auto* l = static_cast<Labelled*>(arg);
    l->log->add(l->label);
}

TEST(AsyncContext, TimersFireInDeadlineOrder) {
    auto context = make_context();
    ASSERT_TRUE(context);
    FireLog log;
    Labelled t30{&log, 30}, t10{&log, 10}, t20{&log, 20};
    // Deadlines from one clock reading, so a slow machine cannot reorder them.
    auto base = TimerClock::now();
    ASSERT_TRUE(context->add_timer_at(base + milliseconds(6), {}, log_label, &t30).ok());
    ASSERT_TRUE(context->add_timer_at(base + milliseconds(2), {}, log_label, &t10).ok());
    ASSERT_TRUE(context->add_timer_at(base + milliseconds(4), {}, log_label, &t20).ok());
    progress_until(*context, [&] { return log.size() == 3; });
    EXPECT_EQ((std::vector<int>{10, 20, 30}), log.get());
}

TEST(AsyncContext, TimersDueTogetherFireInDeadlineOrder) {
    auto context = make_context();
    ASSERT_TRUE(context);
    FireLog log;
    Labelled t1{&log, 1}, t2{&log, 2}, t3{&log, 3}, late{&log, 4};
    auto base = TimerClock::now() - milliseconds(10);  // all overdue: one pass fires them
    ASSERT_TRUE(context->add_timer_at(base + milliseconds(3), {}, log_label, &t3).ok());
    ASSERT_TRUE(context->add_timer_at(base + milliseconds(1), {}, log_label, &t1).ok());
    ASSERT_TRUE(context->add_timer_at(base + milliseconds(2), {}, log_label, &t2).ok());
    ASSERT_TRUE(context->add_timer_at(base + std::chrono::hours(1), {}, log_label, &late).ok());
    EXPECT_EQ(3u, context->progress(0).value_or(99));
    EXPECT_EQ((std::vector<int>{1, 2, 3}), log.get());
}

TEST(AsyncContext, ProgressSleepsUntilTheNextTimer) {
    auto context = make_context();
    ASSERT_TRUE(context);
    FireLog log;
    Labelled t{&log, 1};
    ASSERT_TRUE(context->add_timer(milliseconds(1), {}, log_label, &t).ok());
    // A long timeout: the wait must end at the timer's deadline, not at the timeout.
    auto ran = context->progress(static_cast<int>(milliseconds(kGenerousTimeout).count()));
    ASSERT_TRUE(ran.ok());
    if (*ran == 0) {
        // epoll may wake a hair early; a second short wait must finish the job.
        ran = context->progress(static_cast<int>(milliseconds(kGenerousTimeout).count()));
    }
    EXPECT_EQ(1u, ran.value_or(0));
    EXPECT_EQ(1u, log.size());
}

TEST(AsyncContext, CancelledTimerNeverFires) {
    auto context = make_context();
    ASSERT_TRUE(context);
    FireLog log;
    Labelled a{&log, 1}, b{&log, 2};
    auto ida = context->add_timer(milliseconds(1), {}, log_label, &a);
    auto idb = context->add_timer(milliseconds(3), {}, log_label, &b);
    ASSERT_TRUE(ida.ok() && idb.ok());
    EXPECT_EQ(Status::ok, context->cancel_timer(*ida));
    EXPECT_EQ(Status::no_element, context->cancel_timer(*ida));
    progress_until(*context, [&] { return log.size() == 1; });
    EXPECT_EQ((std::vector<int>{2}), log.get());
    EXPECT_EQ(Status::no_element, context->cancel_timer(*idb)) << "it fired already";
    EXPECT_EQ(Status::no_element, context->cancel_timer(TimerId::invalid));
}

/** A timer that cancels a list of other timers (or itself) when it fires. */
struct Canceller {
    AsyncContext* context = nullptr;
    std::vector<TimerId> victims;
    std::vector<Status> results;
    unsigned calls = 0;
    unsigned cancel_after = 1;  ///< cancel on this call
};

void cancel_victims(void* arg) {
    auto* c = static_cast<Canceller*>(arg);
    if (++c->calls == c->cancel_after) {
        for (TimerId id : c->victims) c->results.push_back(c->context->cancel_timer(id));
    }
}

TEST(AsyncContext, TimerCancelsAnotherDueInTheSamePass) {
    auto context = make_context();
    ASSERT_TRUE(context);
    FireLog log;
    Labelled victim{&log, 2};
    Canceller canceller{context.get()};
    // Both due at once; the canceller's deadline is earlier, so it runs first.
    auto idc = context->add_timer(nanoseconds(0), {}, cancel_victims, &canceller);
    auto idv = context->add_timer(nanoseconds(1), {}, log_label, &victim);
    ASSERT_TRUE(idc.ok() && idv.ok());
    canceller.victims.push_back(*idv);
    std::this_thread::sleep_for(milliseconds(1));
    EXPECT_EQ(1u, context->progress(0).value_or(99));
    ASSERT_EQ(1u, canceller.results.size());
    EXPECT_EQ(Status::ok, canceller.results[0]);
    EXPECT_EQ(0u, context->progress(0).value_or(99));
    EXPECT_EQ(0u, log.size());
}

TEST(AsyncContext, PeriodicTimerCancelsItself) {
    auto context = make_context();
    ASSERT_TRUE(context);
    Canceller self{context.get()};
    self.cancel_after = 3;
    auto id = context->add_timer(nanoseconds(0), milliseconds(1), cancel_victims, &self);
    ASSERT_TRUE(id.ok());
    self.victims.push_back(*id);
    progress_until(*context, [&] { return self.calls == 3; });
    ASSERT_EQ(1u, self.results.size());
    EXPECT_EQ(Status::ok, self.results[0]);
    // Give a would-be fourth period a chance; it must never come.
    std::this_thread::sleep_for(milliseconds(3));
    EXPECT_EQ(0u, context->progress(0).value_or(99));
    EXPECT_EQ(3u, self.calls);
    EXPECT_EQ(Status::no_element, context->cancel_timer(*id));
}

TEST(AsyncContext, OneshotTimerCancellingItselfIsConsumed) {
    auto context = make_context();
    ASSERT_TRUE(context);
    Canceller self{context.get()};
    auto id = context->add_timer(nanoseconds(0), {}, cancel_victims, &self);
    ASSERT_TRUE(id.ok());
    self.victims.push_back(*id);
    progress_until(*context, [&] { return self.calls == 1; });
    ASSERT_EQ(1u, self.results.size());
    EXPECT_EQ(Status::no_element, self.results[0]) << "a one-shot timer is consumed when it starts";
}

/** A timer that re-adds itself with a zero delay a few times. */
struct Rearmer {
    AsyncContext* context = nullptr;
    unsigned remaining = 0;
    unsigned calls = 0;
};

void rearm(void* arg) {
    auto* r = static_cast<Rearmer*>(arg);
    ++r->calls;
    if (--r->remaining > 0) {
        EXPECT_TRUE(r->context->add_timer(nanoseconds(0), {}, rearm, r).ok());
    }
}

TEST(AsyncContext, TimerAddedByCallbackFiresInALaterPass) {
    auto context = make_context();
    ASSERT_TRUE(context);
    Rearmer r{context.get(), 3};
    ASSERT_TRUE(context->add_timer(nanoseconds(0), {}, rearm, &r).ok());
    for (unsigned pass = 1; pass <= 3; ++pass) {
        EXPECT_EQ(1u, context->progress(0).value_or(99));
        EXPECT_EQ(pass, r.calls);
    }
    EXPECT_EQ(0u, context->progress(0).value_or(99));
}

TEST(AsyncContext, TimerArgumentErrors) {
    auto context = make_context();
    ASSERT_TRUE(context);
    FireLog log;
    Labelled t{&log, 1};
    test::LogCapture capture("warn");
    EXPECT_EQ(Status::invalid_param, context->add_timer(milliseconds(-1), {}, log_label, &t).status());
    EXPECT_EQ(Status::invalid_param,
              context->add_timer(milliseconds(1), milliseconds(-1), log_label, &t).status());
    EXPECT_EQ(Status::invalid_param, context->add_timer(milliseconds(1), {}, nullptr, &t).status());
    EXPECT_EQ(1, capture.count("negative delay"));
    EXPECT_EQ(1, capture.count("negative period"));
    EXPECT_EQ(1, capture.count("null callback"));
}

// --- handlers changing the context -----------------------------------------------------

struct SelfRemovingHandler {
    AsyncContext* context = nullptr;
    int fd = -1;
    unsigned calls = 0;
    Status status = Status::in_progress;
};

void remove_self_handler(void* arg, std::uint32_t) {
    auto* h = static_cast<SelfRemovingHandler*>(arg);
    ++h->calls;
    h->status = h->context->remove_fd(h->fd);
}

TEST(AsyncContext, HandlerRemovesItself) {
    auto context = make_context();
    ASSERT_TRUE(context);
    EventFd efd = make_event_fd();
    SelfRemovingHandler h{context.get(), efd.fd()};
    ASSERT_EQ(Status::ok, context->add_fd(efd.fd(), kEventRead, remove_self_handler, &h));
    ASSERT_EQ(Status::ok, efd.signal());  // never drained: level-triggered, fires each wait
    EXPECT_EQ(1u, context->progress(0).value_or(99));
    EXPECT_EQ(Status::ok, h.status);
    EXPECT_EQ(0u, context->progress(0).value_or(99));
    EXPECT_EQ(1u, h.calls);
}

/** Removes the other handler; with both fds ready, exactly one handler may run. */
struct MutualHandler {
    AsyncContext* context = nullptr;
    int peer_fd = -1;
    unsigned calls = 0;
};

void remove_peer_handler(void* arg, std::uint32_t) {
    auto* h = static_cast<MutualHandler*>(arg);
    if (++h->calls == 1) {
        EXPECT_EQ(Status::ok, h->context->remove_fd(h->peer_fd));
    }
}

TEST(AsyncContext, HandlerRemovesAnotherReadyHandler) {
    auto context = make_context();
    ASSERT_TRUE(context);
    EventFd a = make_event_fd();
    EventFd b = make_event_fd();
    MutualHandler ha{context.get(), b.fd()}, hb{context.get(), a.fd()};
    ASSERT_EQ(Status::ok, context->add_fd(a.fd(), kEventRead, remove_peer_handler, &ha));
    ASSERT_EQ(Status::ok, context->add_fd(b.fd(), kEventRead, remove_peer_handler, &hb));
    ASSERT_EQ(Status::ok, a.signal());
    ASSERT_EQ(Status::ok, b.signal());
    EXPECT_EQ(1u, context->progress(0).value_or(99));
    EXPECT_EQ(1u, ha.calls + hb.calls) << "the removed handler ran after epoll had reported it";
    EXPECT_EQ(1u, context->progress(0).value_or(99));
    EXPECT_EQ(2u, ha.calls + hb.calls);
    EXPECT_TRUE(ha.calls == 0 || hb.calls == 0);
}

/** Replaces the other fd's registration by a probe, from inside the same epoll batch. */
struct Swapper {
    AsyncContext* context = nullptr;
    int peer_fd = -1;
    FdProbe* replacement = nullptr;
    unsigned calls = 0;
};

void swap_peer_handler(void* arg, std::uint32_t) {
    auto* s = static_cast<Swapper*>(arg);
    if (++s->calls == 1) {
        EXPECT_EQ(Status::ok, s->context->remove_fd(s->peer_fd));
        EXPECT_EQ(Status::ok, s->context->add_fd(s->peer_fd, kEventRead, probe_handler, s->replacement));
    }
}

TEST(AsyncContext, ReregisteredFdGetsNoEventOfTheOldRegistration) {
    auto context = make_context();
    ASSERT_TRUE(context);
    EventFd a = make_event_fd();
    EventFd b = make_event_fd();
    FdProbe replacement;
    Swapper sa{context.get(), b.fd(), &replacement}, sb{context.get(), a.fd(), &replacement};
    ASSERT_EQ(Status::ok, context->add_fd(a.fd(), kEventRead, swap_peer_handler, &sa));
    ASSERT_EQ(Status::ok, context->add_fd(b.fd(), kEventRead, swap_peer_handler, &sb));
    ASSERT_EQ(Status::ok, a.signal());
    ASSERT_EQ(Status::ok, b.signal());
    // Both events come back from one epoll_wait; whichever handler runs first replaces the
    // other, whose already-fetched event belongs to the old registration.
    EXPECT_EQ(1u, context->progress(0).value_or(99));
    EXPECT_EQ(1u, sa.calls + sb.calls);
    EXPECT_EQ(0u, replacement.calls.load());
    // The new registration gets the fd's events from the next wait on.
    EXPECT_EQ(2u, context->progress(0).value_or(99));
    EXPECT_EQ(1u, replacement.calls.load());
    EXPECT_EQ(Status::ok, context->remove_fd(a.fd()));
    EXPECT_EQ(Status::ok, context->remove_fd(b.fd()));
}

struct NestedProgress {
    AsyncContext* context = nullptr;
    Status nested = Status::ok;
    Status stop = Status::ok;
};

void nested_progress_handler(void* arg) {
    auto* n = static_cast<NestedProgress*>(arg);
    n->nested = n->context->progress(0).status();
    n->stop = n->context->stop_thread();
}

TEST(AsyncContext, NestedProgressAndStopFromCallbackAreRefused) {
    auto context = make_context();
    ASSERT_TRUE(context);
    NestedProgress n{context.get()};
    ASSERT_TRUE(context->add_timer(nanoseconds(0), {}, nested_progress_handler, &n).ok());
    test::LogCapture capture("warn");
    progress_until(*context, [&] { return n.nested != Status::ok; });
    EXPECT_EQ(Status::busy, n.nested);
    EXPECT_EQ(Status::busy, n.stop);
    EXPECT_EQ(1, capture.count("called from a handler"));
    EXPECT_EQ(1, capture.count("stop_thread() called from the loop thread"));
}

// --- threads ---------------------------------------------------------------------------

TEST(AsyncContext, WakeupInterruptsABlockedProgress) {
    auto context = make_context();
    ASSERT_TRUE(context);
    std::atomic<bool> polling{false};
    Result<unsigned> result = Status::no_element;
    std::thread poller([&] {
        polling.store(true);
        result = context->progress(static_cast<int>(milliseconds(kGenerousTimeout).count()));
    });
    while (!polling.load()) std::this_thread::yield();
    std::this_thread::sleep_for(milliseconds(2));
    EXPECT_EQ(Status::ok, context->wakeup());
    poller.join();
    ASSERT_TRUE(result.ok());
    EXPECT_EQ(0u, *result);
}

TEST(AsyncContext, TimerAddedByAnotherThreadShortensABlockedWait) {
    auto context = make_context();
    ASSERT_TRUE(context);
    FireLog log;
    Labelled t{&log, 1};
    std::atomic<bool> polling{false};
    Result<unsigned> result = Status::no_element;
    std::thread poller([&] {
        polling.store(true);
        // Blocks with no deadline at all until the timer below wakes it.
        while (log.size() == 0 && (result = context->progress(-1)).ok()) {
        }
    });
    while (!polling.load()) std::this_thread::yield();
    std::this_thread::sleep_for(milliseconds(2));
    ASSERT_TRUE(context->add_timer(milliseconds(1), {}, log_label, &t).ok());
    poller.join();
    EXPECT_TRUE(result.ok());
    EXPECT_EQ(1u, log.size());
}

TEST(AsyncContext, BackgroundThreadRunsHandlersAndTimers) {
    auto context = make_context();
    ASSERT_TRUE(context);
    EventFd efd = make_event_fd();
    FdProbe probe;
    probe.drain = &efd;
    FireLog log;
    Labelled t{&log, 7};
    ASSERT_EQ(Status::ok, context->start_thread());
    EXPECT_TRUE(context->thread_running());
    {
        test::LogCapture capture("warn");
        EXPECT_EQ(Status::busy, context->start_thread());
        EXPECT_EQ(Status::busy, context->progress(0).status());
        EXPECT_EQ(2, capture.count("async"));
    }
    ASSERT_EQ(Status::ok, context->add_fd(efd.fd(), kEventRead, probe_handler, &probe));
    ASSERT_EQ(Status::ok, efd.signal());
    wait_until([&] { return probe.calls.load() == 1; });
    ASSERT_TRUE(context->add_timer(milliseconds(1), {}, log_label, &t).ok());
    wait_until([&] { return log.size() == 1; });
    EXPECT_EQ(Status::ok, context->remove_fd(efd.fd()));
    EXPECT_EQ(Status::ok, context->stop_thread());
    EXPECT_FALSE(context->thread_running());
    EXPECT_EQ(Status::ok, context->stop_thread());
    // Back to manual mode.
    EXPECT_TRUE(context->progress(0).ok());
    EXPECT_EQ(Status::ok, context->start_thread());
}  // destroyed with the thread running

/** A handler that blocks until released, so another thread can try to remove it meanwhile. */
struct BlockingCallback {
    std::atomic<bool> entered{false};
    std::atomic<bool> running{false};
    std::atomic<bool> release{false};
    std::atomic<unsigned> calls{0};
    EventFd* drain = nullptr;

    void run() {
        if (drain != nullptr) drain->drain();
        running.store(true);
        entered.store(true);
        while (!release.load()) std::this_thread::yield();
        calls.fetch_add(1);
        running.store(false);
    }
};

void blocking_fd_handler(void* arg, std::uint32_t) {
    static_cast<BlockingCallback*>(arg)->run();
}
void blocking_timer(void* arg) {
    static_cast<BlockingCallback*>(arg)->run();
}

/**
 * Runs @p remove on another thread while the blocking callback @p cb runs on the loop
 * thread, and checks that it returns only after the callback has.
 */
template <typename Remove>
void check_removal_waits_for_running_callback(BlockingCallback& cb, Remove remove) {
    wait_until([&] { return cb.entered.load(); });
    std::atomic<bool> removing{false};
    std::atomic<bool> removed{false};
    bool running_after_remove = true;
    Status status = Status::in_progress;
    std::thread remover([&] {
        removing.store(true);
        status = remove();
        running_after_remove = cb.running.load();
        removed.store(true);
    });
    while (!removing.load()) std::this_thread::yield();
    std::this_thread::sleep_for(milliseconds(2));
    EXPECT_FALSE(removed.load()) << "remove returned while the callback was still running";
    cb.release.store(true);
    remover.join();
    EXPECT_EQ(Status::ok, status);
    EXPECT_FALSE(running_after_remove);
}

TEST(AsyncContext, RemoveFdWaitsForRunningHandler) {
    auto context = make_context();
    ASSERT_TRUE(context);
    EventFd efd = make_event_fd();
    BlockingCallback cb;
    cb.drain = &efd;
    ASSERT_EQ(Status::ok, context->add_fd(efd.fd(), kEventRead, blocking_fd_handler, &cb));
    ASSERT_EQ(Status::ok, context->start_thread());
    ASSERT_EQ(Status::ok, efd.signal());
    check_removal_waits_for_running_callback(cb, [&] { return context->remove_fd(efd.fd()); });
    // Signalled again after removal: must not run (stop_thread orders it after any run).
    ASSERT_EQ(Status::ok, efd.signal());
    ASSERT_EQ(Status::ok, context->wakeup());
    ASSERT_EQ(Status::ok, context->stop_thread());
    EXPECT_EQ(1u, cb.calls.load());
}

TEST(AsyncContext, CancelTimerWaitsForRunningCallback) {
    auto context = make_context();
    ASSERT_TRUE(context);
    BlockingCallback cb;
    auto id = context->add_timer(nanoseconds(0), milliseconds(1), blocking_timer, &cb);
    ASSERT_TRUE(id.ok());
    ASSERT_EQ(Status::ok, context->start_thread());
    check_removal_waits_for_running_callback(cb, [&] { return context->cancel_timer(*id); });
    std::this_thread::sleep_for(milliseconds(3));  // a few more periods: none may fire
    ASSERT_EQ(Status::ok, context->stop_thread());
    EXPECT_EQ(1u, cb.calls.load());
}

struct StatusQuery {
    AsyncContext* context = nullptr;
    std::atomic<bool> entered{false};
    std::atomic<bool> stopping{false};
    std::atomic<int> running{-1};
};

void query_while_stopping(void* arg) {
    auto* q = static_cast<StatusQuery*>(arg);
    q->entered.store(true);
    while (!q->stopping.load()) std::this_thread::yield();
    std::this_thread::sleep_for(milliseconds(2));  // let stop_thread() reach its join
    q->running.store(q->context->thread_running() ? 1 : 0);
}

TEST(AsyncContext, CallbackMayQueryTheThreadWhileItIsBeingStopped) {
    auto context = make_context();
    ASSERT_TRUE(context);
    StatusQuery query{context.get()};
    ASSERT_TRUE(context->add_timer(nanoseconds(0), {}, query_while_stopping, &query).ok());
    ASSERT_EQ(Status::ok, context->start_thread());
    wait_until([&] { return query.entered.load(); });
    query.stopping.store(true);
    EXPECT_EQ(Status::ok, context->stop_thread());  // joins while the callback asks
    EXPECT_EQ(1, query.running.load());
    EXPECT_FALSE(context->thread_running());
}

/** Handlers and timers added and removed from another thread while the loop runs. */
TEST(AsyncContext, ConcurrentRegistrationWhileLoopRuns) {
    auto context = make_context();
    ASSERT_TRUE(context);
    ASSERT_EQ(Status::ok, context->start_thread());
    for (int round = 0; round < 50; ++round) {
        EventFd efd = make_event_fd();
        FdProbe probe;
        probe.drain = &efd;
        ASSERT_EQ(Status::ok, context->add_fd(efd.fd(), kEventRead, probe_handler, &probe));
        ASSERT_EQ(Status::ok, efd.signal());
        FireLog log;
        Labelled fire{&log, round}, never{&log, -1};
        auto t1 = context->add_timer(nanoseconds(0), {}, log_label, &fire);
        auto t2 = context->add_timer(std::chrono::seconds(60), {}, log_label, &never);
        ASSERT_TRUE(t1.ok() && t2.ok());
        wait_until([&] { return probe.calls.load() >= 1 && log.size() >= 1; });
        ASSERT_EQ(Status::ok, context->remove_fd(efd.fd()));
        ASSERT_EQ(Status::ok, context->cancel_timer(*t2));
        EXPECT_EQ((std::vector<int>{round}), log.get());
    }
    ASSERT_EQ(Status::ok, context->stop_thread());
}

}  // namespace
}  // namespace loom::ucs
