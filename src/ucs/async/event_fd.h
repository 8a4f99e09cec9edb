/**
 * EventFd: a wakeup fd for blocking waits. A user polls (poll/epoll/select) on fd();
 * any thread calls signal() to make it readable and wake the poller.
 *
 * The intended sleep protocol (what a worker's "arm then wait" looks like):
 *
 *     for (;;) {
 *         while (progress() != 0) {}
 *         if (wakeup.arm() == Status::busy) continue;   // a signal came in: progress again
 *         poll(wakeup.fd(), ...);                        // nothing pending: sleep
 *     }
 *
 * arm() drains the fd, because an eventfd stays readable until read; it reports whether
 * it consumed a signal, since that signal must then be treated as a wakeup by the caller.
 * The fd is non-blocking and close-on-exec; signal() never blocks.
 */
#pragma once

#include "ucs/type/result.h"
#include "ucs/type/status.h"

#include <cstdint>

namespace loom::ucs {

/** An owned, non-blocking, close-on-exec eventfd used as a wakeup signal. */
class EventFd {
public:
    /** Creates a new eventfd; no_resource when the fd limit is reached, io_error otherwise. */
    static Result<EventFd> create();

    /** An empty object owning no fd (fd() == -1); every operation on it fails. */
    EventFd() noexcept = default;
    /** Takes over @p other's fd, leaving @p other empty. */
    EventFd(EventFd&& other) noexcept;
    /** Closes the owned fd, then takes over @p other's, leaving @p other empty. */
    EventFd& operator=(EventFd&& other) noexcept;
    EventFd(const EventFd&) = delete;
    EventFd& operator=(const EventFd&) = delete;
    /** Closes the fd. */
    ~EventFd();

    /** The fd to poll for readability; -1 for an empty object. */
    int fd() const noexcept { return fd_; }

    /**
     * Makes fd() readable, waking a thread blocked on it. Any thread. Signals coalesce
     * until drained. Returns invalid_param on an empty object, io_error if the write
     * fails (both logged).
     */
    Status signal() noexcept;

    /**
     * Consumes every pending signal; returns how many there were (0 when none, and on
     * an empty object or a failed read, which are logged).
     */
    std::uint64_t drain() noexcept;

    /**
     * Prepares for a blocking wait: drains pending signals. Returns ok when nothing was
     * pending (safe to sleep on fd()), busy when a signal was consumed (the caller must
     * look for work before sleeping), invalid_param or io_error (logged) when the fd
     * cannot be read.
     */
    Status arm() noexcept;

private:
    explicit EventFd(int fd) noexcept : fd_(fd) {}
    void close() noexcept;
    Status read_counter(std::uint64_t& value) noexcept;

    int fd_ = -1;
};

}  // namespace loom::ucs
