#define LOOM_LOG_COMPONENT (::loom::ucs::detail::async_log_component())

#include "ucs/async/async_context.h"

#include "ucs/async/async_log.h"
#include "ucs/debug/assert.h"

#include <pthread.h>
#include <climits>
#include <new>
#include <system_error>

namespace loom::ucs {

namespace {

/** Cookie of the wake-up eventfd; registrations never use it (their generation is >= 1). */
constexpr std::uint64_t kWakeCookie = 0;

}  // namespace

Result<std::unique_ptr<AsyncContext>> AsyncContext::create() {
    auto events = EventSet::create();
    if (!events) {
        return events.status();
    }
    auto wake = EventFd::create();
    if (!wake) {
        return wake.status();
    }
    Status status = events->add(wake->fd(), kEventRead, kWakeCookie);
    if (status != Status::ok) {
        return status;
    }
    AsyncContext* context = new (std::nothrow) AsyncContext(std::move(*events), std::move(*wake));
    if (context == nullptr) {
        LOOM_LOG_ERROR("async: out of memory creating a context");
        return Status::no_memory;
    }
    return std::unique_ptr<AsyncContext>(context);
}

AsyncContext::AsyncContext(EventSet events, EventFd wake) noexcept
    : events_(std::move(events)), wake_(std::move(wake)) {}

AsyncContext::~AsyncContext() {
    LOOM_ASSERT(!in_loop_thread());
    (void)stop_thread();
    LOOM_ASSERTV(!polling_.load(), "async context {} destroyed while a thread polls it",
                 static_cast<void*>(this));
}

bool AsyncContext::in_loop_thread() const noexcept {
    return loop_thread_.load(std::memory_order_relaxed) == std::this_thread::get_id();
}

bool AsyncContext::thread_running() const noexcept {
    // Not under thread_lock_: a handler may ask while another thread joins it in stop_thread().
    return thread_running_.load(std::memory_order_acquire);
}

Status AsyncContext::start_thread() {
    if (in_loop_thread()) {
        LOOM_LOG_WARN("async: start_thread() called from the loop thread");
        return Status::busy;
    }
    std::lock_guard guard(thread_lock_);
    bool idle = false;
    if (thread_.joinable() || !polling_.compare_exchange_strong(idle, true, std::memory_order_acq_rel)) {
        LOOM_LOG_WARN("async: start_thread(): {}",
                      thread_.joinable() ? "the thread runs already" : "another thread is in progress()");
        return Status::busy;
    }
    stop_.store(false, std::memory_order_relaxed);
    try {
        thread_ = std::thread([this] { thread_main(); });
        thread_running_.store(true, std::memory_order_release);
    } catch (const std::system_error& e) {
        polling_.store(false, std::memory_order_release);
        LOOM_LOG_ERROR("async: cannot start the event loop thread: {}", e.what());
        return Status::no_resource;
    }
    return Status::ok;
}

Status AsyncContext::stop_thread() {
    if (in_loop_thread()) {
        // A handler on the background thread cannot join it; in manual mode no thread runs.
        LOOM_LOG_WARN("async: stop_thread() called from the loop thread");
        return Status::busy;
    }
    std::lock_guard guard(thread_lock_);
    if (!thread_.joinable()) {
        return Status::ok;
    }
    stop_.store(true, std::memory_order_release);
    Status status = wake_.signal();
    if (status != Status::ok) {
        // Cannot happen with a valid eventfd; joining would hang, which is worse than dying.
        LOOM_FATAL("async: cannot wake the event loop thread to stop it: {}", to_string(status));
    }
    thread_.join();
    thread_running_.store(false, std::memory_order_release);
    polling_.store(false, std::memory_order_release);
    return Status::ok;
}

void AsyncContext::thread_main() {
    loop_thread_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    (void)::pthread_setname_np(::pthread_self(), "loom-async");
    while (!stop_.load(std::memory_order_acquire)) {
        auto result = poll_once(-1);
        if (!result) {
            LOOM_LOG_ERROR("async: event loop thread stops: {}", to_string(result.status()));
            break;
        }
    }
    loop_thread_.store(std::thread::id{}, std::memory_order_relaxed);
}

Result<unsigned> AsyncContext::progress(int timeout_ms) {
    bool idle = false;
    if (!polling_.compare_exchange_strong(idle, true, std::memory_order_acq_rel)) {
        LOOM_LOG_WARN("async: progress(): {}",
                      in_loop_thread() ? "called from a handler" : "another thread owns the event loop");
        return Status::busy;
    }
    loop_thread_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    auto result = poll_once(timeout_ms);
    loop_thread_.store(std::thread::id{}, std::memory_order_relaxed);
    polling_.store(false, std::memory_order_release);
    return result;
}

int AsyncContext::wait_timeout(int timeout_ms) {
    std::optional<TimerClock::time_point> deadline;
    {
        std::lock_guard guard(lock_);
        deadline = timers_.next_deadline();
    }
    if (!deadline) {
        return timeout_ms;
    }
    auto now = TimerClock::now();
    long long ms = 0;
    if (*deadline > now) {
        // Round up: waking before the deadline would only cost another wait.
        ms = std::chrono::ceil<std::chrono::milliseconds>(*deadline - now).count();
    }
    if (ms > INT_MAX) {
        ms = INT_MAX;
    }
    return (timeout_ms < 0 || ms < timeout_ms) ? static_cast<int>(ms) : timeout_ms;
}

Result<unsigned> AsyncContext::poll_once(int timeout_ms) {
    EventSet::Event ready[EventSet::kMaxWaitEvents];
    auto count = events_.wait(ready, wait_timeout(timeout_ms));
    if (!count) {
        return count.status();
    }
    unsigned ran = 0;
    for (unsigned i = 0; i < *count; ++i) {
        if (ready[i].cookie == kWakeCookie) {
            (void)wake_.drain();
        } else {
            ran += dispatch_fd(ready[i].cookie, ready[i].events);
        }
    }
    return ran + run_timers();
}

void AsyncContext::notify_idle_locked() noexcept {
    if (idle_waiters_ != 0) {
        idle_cv_.notify_all();
    }
}

unsigned AsyncContext::dispatch_fd(std::uint64_t cookie, std::uint32_t events) {
    auto fd = static_cast<int>(static_cast<std::uint32_t>(cookie));
    std::unique_lock guard(lock_);
    auto it = handlers_.find(fd);
    // A stale event: the fd was removed (and maybe registered again) after epoll_wait
    // returned, or its watched events changed.
    if (it == handlers_.end() || it->second.cookie != cookie) {
        return 0;
    }
    events &= it->second.events | kEventError;
    if (events == 0) {
        return 0;
    }
    FdHandler handler = it->second.handler;
    void* arg = it->second.arg;
    running_fd_cookie_ = cookie;
    guard.unlock();
    handler(arg, events);
    guard.lock();
    running_fd_cookie_ = 0;
    notify_idle_locked();
    return 1;
}

unsigned AsyncContext::run_timers() {
    std::unique_lock guard(lock_);
    if (timers_.empty()) {
        return 0;
    }
    auto now = TimerClock::now();
    std::uint64_t limit = timers_.next_sequence();
    unsigned ran = 0;
    TimerQueue::Expired expired{};
    while (timers_.pop_expired(now, limit, expired)) {
        running_timer_ = expired.id;
        guard.unlock();
        expired.cb(expired.arg);
        guard.lock();
        running_timer_ = TimerId::invalid;
        notify_idle_locked();
        ++ran;
    }
    return ran;
}

Status AsyncContext::add_fd(int fd, std::uint32_t events, FdHandler handler, void* arg) {
    if (handler == nullptr) {
        LOOM_LOG_WARN("async: cannot add fd {}: null handler", fd);
        return Status::invalid_param;
    }
    std::lock_guard guard(lock_);
    if (handlers_.count(fd) != 0) {
        LOOM_LOG_WARN("async: cannot add fd {}: already registered", fd);
        return Status::already_exists;
    }
    std::uint32_t generation = next_generation_;
    next_generation_ = next_generation_ == ~std::uint32_t{0} ? 1 : next_generation_ + 1;
    std::uint64_t cookie = (static_cast<std::uint64_t>(generation) << 32) | static_cast<std::uint32_t>(fd);
    try {
        handlers_.emplace(fd, FdEntry{handler, arg, events, cookie});
    } catch (const std::bad_alloc&) {
        LOOM_LOG_ERROR("async: out of memory adding fd {}", fd);
        return Status::no_memory;
    }
    // The loop thread may see an event before this returns; it blocks on lock_ until the
    // entry is final, and the entry goes away again if epoll rejects the fd.
    Status status = events_.add(fd, events, cookie);  // logs its errors
    if (status != Status::ok) {
        handlers_.erase(fd);
    }
    return status;
}

Status AsyncContext::modify_fd(int fd, std::uint32_t events) {
    std::lock_guard guard(lock_);
    auto it = handlers_.find(fd);
    if (it == handlers_.end()) {
        LOOM_LOG_WARN("async: cannot modify fd {}: not registered", fd);
        return Status::no_element;
    }
    Status status = events_.modify(fd, events, it->second.cookie);
    if (status == Status::ok) {
        it->second.events = events;
    }
    return status;
}

Status AsyncContext::remove_fd(int fd) {
    std::unique_lock guard(lock_);
    auto it = handlers_.find(fd);
    if (it == handlers_.end()) {
        LOOM_LOG_WARN("async: cannot remove fd {}: not registered", fd);
        return Status::no_element;
    }
    std::uint64_t cookie = it->second.cookie;
    // Fails only when fd was closed (or replaced) behind our back; EventSet logs it, and
    // the handler is unregistered all the same.
    (void)events_.remove(fd);
    handlers_.erase(it);
    if (!in_loop_thread()) {
        ++idle_waiters_;
        idle_cv_.wait(guard, [&] { return running_fd_cookie_ != cookie; });
        --idle_waiters_;
    }
    return Status::ok;
}

Result<TimerId> AsyncContext::add_timer(std::chrono::nanoseconds delay, std::chrono::nanoseconds period,
                                        TimerCallback cb, void* arg) {
    if (delay.count() < 0) {
        LOOM_LOG_WARN("async: cannot add a timer with a negative delay ({} ns)", delay.count());
        return Status::invalid_param;
    }
    return add_timer_at(TimerClock::now() + delay, period, cb, arg);
}

Result<TimerId> AsyncContext::add_timer_at(TimerClock::time_point deadline, std::chrono::nanoseconds period,
                                           TimerCallback cb, void* arg) {
    bool earliest = false;
    Result<TimerId> id = Status::no_element;
    {
        std::lock_guard guard(lock_);
        id = timers_.add(deadline, period, cb, arg);  // validates cb and period, logs
        earliest = id.ok() && timers_.next_deadline() == deadline;
    }
    // The loop thread may be blocked with a timeout computed before this timer existed.
    // Nobody blocks when nobody polls (the poller computes its timeout under lock_ after
    // claiming polling_), and the loop thread recomputes it before its next wait anyway.
    if (earliest && polling_.load(std::memory_order_acquire) && !in_loop_thread()) {
        (void)wake_.signal();
    }
    return id;
}

Status AsyncContext::cancel_timer(TimerId id) {
    std::unique_lock guard(lock_);
    Status status = timers_.cancel(id);
    if (status != Status::ok) {
        LOOM_LOG_DEBUG("async: cancel_timer({:#x}): no such pending timer", static_cast<std::uint64_t>(id));
    }
    if (id != TimerId::invalid && !in_loop_thread()) {
        ++idle_waiters_;
        idle_cv_.wait(guard, [&] { return running_timer_ != id; });
        --idle_waiters_;
    }
    return status;
}

Status AsyncContext::wakeup() noexcept {
    return wake_.signal();
}

}  // namespace loom::ucs
