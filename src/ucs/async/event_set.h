/**
 * EventSet: an epoll set aggregating several fds behind one fd. A worker puts the fds
 * of all its transports in one set and hands out fd() to the user, who polls that
 * single fd; when it becomes readable, wait() tells which members are ready.
 *
 * Members are identified by a 64-bit cookie chosen by the caller (an index, a pointer).
 * All operations may be called from any thread (epoll is thread-safe): a member added or
 * removed while another thread waits takes effect for that wait. The set fd is
 * close-on-exec. Remove an fd before closing it: the kernel keeps watching a closed fd
 * whose file is still open elsewhere (dup, fork), and such a member can no longer be
 * removed by number.
 */
#pragma once

#include "ucs/type/result.h"
#include "ucs/type/status.h"

#include <cstddef>
#include <cstdint>
#include <span>

namespace loom::ucs {

/** Readiness for reading (registration and report). */
inline constexpr std::uint32_t kEventRead = 1u << 0;
/** Readiness for writing (registration and report). */
inline constexpr std::uint32_t kEventWrite = 1u << 1;
/** Error or hang-up on the fd (report only; always watched, like poll's POLLERR/POLLHUP). */
inline constexpr std::uint32_t kEventError = 1u << 2;
/** Registration only: report a readiness change once instead of while it lasts (EPOLLET). */
inline constexpr std::uint32_t kEventEdgeTriggered = 1u << 3;
/** Every flag accepted at registration. */
inline constexpr std::uint32_t kEventAll = kEventRead | kEventWrite | kEventError | kEventEdgeTriggered;

/** An owned epoll set; see the file comment. */
class EventSet {
public:
    /** One ready member, as reported by wait(). */
    struct Event {
        std::uint64_t cookie;  ///< the value given to add()/modify()
        std::uint32_t events;  ///< kEventRead / kEventWrite / kEventError
    };

    /** Most events one wait() call reports; more ready members are reported by the next call. */
    static constexpr unsigned kMaxWaitEvents = 64;

    /** Creates an empty set; no_resource when the fd limit is reached, io_error otherwise. */
    static Result<EventSet> create();

    /** An empty object owning no fd (fd() == -1); every operation on it fails. */
    EventSet() noexcept = default;
    /** Takes over @p other's epoll fd, leaving @p other empty. */
    EventSet(EventSet&& other) noexcept;
    /** Closes the owned epoll fd, then takes over @p other's, leaving @p other empty. */
    EventSet& operator=(EventSet&& other) noexcept;
    EventSet(const EventSet&) = delete;
    EventSet& operator=(const EventSet&) = delete;
    /** Closes the epoll fd (the members themselves stay open). */
    ~EventSet();

    /** The aggregated fd: readable while any member has a watched event; -1 when empty. */
    int fd() const noexcept { return fd_; }

    /**
     * Members added and not removed. A member closed without remove() still counts (the
     * kernel dropped it on its own): an upper bound, for "is anything but X watched".
     */
    std::size_t size() const noexcept { return members_; }

    /**
     * Watches @p fd for @p events (a combination of the kEvent flags), reporting @p cookie.
     * Errors, each logged once with the fd: invalid_param for a bad or closed fd or
     * unknown flags, already_exists when @p fd is a member already, unsupported for a
     * file that cannot be polled (regular file, directory), no_resource when the
     * system's watch limit is reached.
     */
    Status add(int fd, std::uint32_t events, std::uint64_t cookie) noexcept;

    /** Changes the events and cookie of member @p fd; no_element when it is not a member, else as add(). */
    Status modify(int fd, std::uint32_t events, std::uint64_t cookie) noexcept;

    /**
     * Stops watching @p fd. Returns no_element when it is not a member, invalid_param
     * when it is not an open fd (closed before removal: the kernel dropped it already
     * unless the file is still open elsewhere); both logged.
     */
    Status remove(int fd) noexcept;

    /**
     * Waits up to @p timeout_ms milliseconds (0: just check, negative: forever) for ready
     * members and stores up to out.size() (at most kMaxWaitEvents) of them in @p out.
     * Returns how many were stored; 0 on timeout or when a signal interrupted the wait.
     * invalid_param for an empty @p out, io_error (logged) when epoll fails.
     */
    Result<unsigned> wait(std::span<Event> out, int timeout_ms) noexcept;

private:
    explicit EventSet(int fd) noexcept : fd_(fd) {}
    void close() noexcept;
    Status control(int op, int fd, std::uint32_t events, std::uint64_t cookie, const char* what) noexcept;

    int fd_ = -1;
    std::size_t members_ = 0;
};

}  // namespace loom::ucs
