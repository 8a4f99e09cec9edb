/**
 * AsyncContext: an epoll event loop for fd handlers and timers, the services layer's
 * engine for asynchronous events (connection management, keep-alives, transports'
 * completion channels, timeouts).
 *
 * Two ways to run it:
 *  - manual: the owner calls progress(timeout) from its own loop;
 *  - background: start_thread() runs the loop in a thread of its own until
 *    stop_thread() (or destruction).
 * Only one thread polls at a time ("the loop thread"): progress() returns busy while the
 * background thread runs or another thread is inside progress(). Handlers and timer
 * callbacks run on the loop thread one at a time, never concurrently with each other,
 * and without any lock held: they may call every method of this class, except that
 * stop_thread() and a nested progress() return busy there. They must not throw.
 *
 * Removal guarantee: when remove_fd() or cancel_timer() returns, the handler (timer
 * callback) is not running and will not be called again, so its argument may be freed.
 * Called from another thread while the handler runs, they wait for it to return; the
 * handler must therefore not wait for that thread (for a lock it holds, say). Called
 * from the loop thread (from inside any handler, including the one being removed), they
 * return at once, since that handler is either the caller or not running.
 *
 * Timers: a min-heap (TimerQueue) whose earliest deadline bounds the epoll_wait timeout,
 * rather than timerfds or a timer wheel. Loom's timers are few and coarse (keep-alives,
 * retransmissions, connection timeouts in milliseconds), so the heap's O(log n) add and
 * cancel cost nothing, it keeps exact deadline order and cancels eagerly, and it needs no
 * extra fd and no timerfd_settime call per re-arm. The price is epoll_wait's millisecond
 * granularity: a timer fires at the earliest on its deadline, and up to about a
 * millisecond (plus scheduling delay) after it; timeouts are rounded up, never down.
 * The clock is CLOCK_MONOTONIC through std::chrono::steady_clock (vDSO, no syscall).
 * Timers fire in deadline order (equal deadlines: in the order they were added). A
 * timer added or rescheduled by a callback fires in a later pass, never in the pass
 * that is running, so a callback re-adding itself with a zero delay cannot spin forever.
 * A periodic timer that falls behind skips the periods it missed.
 *
 * An eventfd wakes the loop thread when it blocks with a stale timeout (a timer added by
 * another thread became the earliest), on wakeup() and on stop_thread(). Adding,
 * changing or removing fd handlers needs no wake-up: epoll applies them to a wait in
 * progress, and stale events are filtered out by a per-registration generation number.
 *
 * Remove an fd from the context before closing it (see EventSet). Destroying the context
 * stops the background thread; it must not happen while another thread is in progress().
 */
#pragma once

#include "ucs/async/event_fd.h"
#include "ucs/async/event_set.h"
#include "ucs/async/timer_queue.h"
#include "ucs/type/result.h"
#include "ucs/type/status.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace loom::ucs {

/** An epoll event loop with fd handlers and timers; see the file comment. */
class AsyncContext {
public:
    /** An fd handler: called on the loop thread with its argument and the ready kEvent flags. */
    using FdHandler = void (*)(void* arg, std::uint32_t events);

    /**
     * Creates a context in manual mode (no thread yet). Returns no_resource when the fd
     * limit is reached, no_memory or io_error otherwise (logged).
     */
    static Result<std::unique_ptr<AsyncContext>> create();

    /** Stops the background thread if it runs; registered handlers and timers are dropped. */
    ~AsyncContext();
    AsyncContext(const AsyncContext&) = delete;
    AsyncContext& operator=(const AsyncContext&) = delete;

    /**
     * Starts the background thread ("loom-async") that polls until stop_thread(). Returns
     * busy when it already runs, when another thread is in progress() or when called from
     * the loop thread, no_resource when the thread cannot be created (logged).
     */
    Status start_thread();

    /**
     * Stops and joins the background thread; ok when none runs. Returns busy (logged)
     * when called from the loop thread, which cannot join itself.
     */
    Status stop_thread();

    /** True while the background thread runs (from start_thread() to stop_thread()). Any thread. */
    bool thread_running() const noexcept;

    /**
     * Manual mode: waits up to @p timeout_ms milliseconds (0: just check, negative: until
     * something happens) for fd events or the next timer deadline, then runs the ready
     * handlers and the expired timers. Returns how many handlers and timer callbacks ran
     * (0 after a timeout or a wakeup()); busy (logged) when another thread polls, the
     * background thread runs, or when called from a handler; io_error when epoll fails.
     */
    Result<unsigned> progress(int timeout_ms);

    /**
     * Calls @p handler(@p arg, events) on the loop thread whenever @p fd is ready for
     * @p events (kEventRead, kEventWrite, optionally kEventEdgeTriggered; kEventError is
     * always reported). Any thread; takes effect for a wait in progress. Errors (one log
     * line each): invalid_param for a null handler, unknown flags or a bad or closed fd,
     * already_exists when @p fd is registered already, unsupported for a regular file.
     */
    Status add_fd(int fd, std::uint32_t events, FdHandler handler, void* arg);

    /**
     * Changes the events watched for a registered @p fd; events of the old set still
     * queued are no longer delivered. no_element (logged) when @p fd is not registered;
     * invalid_param for unknown flags.
     */
    Status modify_fd(int fd, std::uint32_t events);

    /**
     * Unregisters @p fd with the removal guarantee above (may wait for the running
     * handler). no_element (logged) when @p fd is not registered. Returns ok even when
     * @p fd was closed already (logged: the kernel may still watch the file).
     */
    Status remove_fd(int fd);

    /**
     * Calls @p cb(@p arg) on the loop thread after @p delay and then, when @p period is
     * positive, every @p period. Any thread. Returns the handle for cancel_timer();
     * invalid_param (logged) for a null @p cb or a negative delay or period.
     */
    Result<TimerId> add_timer(std::chrono::nanoseconds delay, std::chrono::nanoseconds period,
                              TimerCallback cb, void* arg);

    /**
     * As add_timer(), with an absolute first deadline: timers given deadlines computed
     * from one reading of TimerClock fire in the order of those deadlines however long
     * the calls take. A deadline in the past fires at the next pass. invalid_param
     * (logged) for a null @p cb or a negative period.
     */
    Result<TimerId> add_timer_at(TimerClock::time_point deadline, std::chrono::nanoseconds period,
                                 TimerCallback cb, void* arg);

    /**
     * Cancels a timer with the removal guarantee above: a cancelled timer never fires
     * again. Returns no_element (logged at debug level: racing with expiry is normal)
     * when @p id is unknown, cancelled, or a one-shot timer whose callback has started;
     * even then, from another thread, it returns only once that callback has finished.
     */
    Status cancel_timer(TimerId id);

    /** Makes a blocked progress() (or the background thread's wait) return. Any thread. */
    Status wakeup() noexcept;

    /** True when called on the loop thread (from a handler, a timer, or inside progress()). */
    bool in_loop_thread() const noexcept;

private:
    struct FdEntry {
        FdHandler handler;
        void* arg;
        std::uint32_t events;
        std::uint64_t cookie;  ///< (generation << 32) | fd, the epoll data of this registration
    };

    AsyncContext(EventSet events, EventFd wake) noexcept;

    Result<unsigned> poll_once(int timeout_ms);
    int wait_timeout(int timeout_ms);
    unsigned dispatch_fd(std::uint64_t cookie, std::uint32_t events);
    unsigned run_timers();
    void notify_idle_locked() noexcept;
    void thread_main();

    EventSet events_;
    EventFd wake_;

    mutable std::mutex lock_;
    std::condition_variable idle_cv_;  ///< signalled when a handler or timer returns
    unsigned idle_waiters_ = 0;        ///< threads waiting on idle_cv_
    std::unordered_map<int, FdEntry> handlers_;
    std::uint32_t next_generation_ = 1;
    TimerQueue timers_;
    std::uint64_t running_fd_cookie_ = 0;       ///< cookie of the handler running now, 0 if none
    TimerId running_timer_ = TimerId::invalid;  ///< timer whose callback runs now

    std::atomic<bool> polling_{false};            ///< some thread owns the loop
    std::atomic<std::thread::id> loop_thread_{};  ///< that thread, while it polls
    std::atomic<bool> stop_{false};

    std::mutex thread_lock_;  ///< serializes start_thread() and stop_thread()
    std::thread thread_;
    std::atomic<bool> thread_running_{false};
};

}  // namespace loom::ucs
