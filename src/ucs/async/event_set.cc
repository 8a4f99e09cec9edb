#define LOOM_LOG_COMPONENT (::loom::ucs::detail::async_log_component())

#include "ucs/async/event_set.h"

#include "ucs/async/async_log.h"

#include <sys/epoll.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>

namespace loom::ucs {

namespace {

std::uint32_t to_epoll(std::uint32_t events) {
    std::uint32_t result = 0;
    if (events & kEventRead) result |= EPOLLIN;
    if (events & kEventWrite) result |= EPOLLOUT;
    if (events & kEventEdgeTriggered) result |= EPOLLET;
    return result;  // EPOLLERR and EPOLLHUP are always reported
}

std::uint32_t from_epoll(std::uint32_t events) {
    std::uint32_t result = 0;
    if (events & (EPOLLIN | EPOLLPRI | EPOLLRDHUP)) result |= kEventRead;
    if (events & EPOLLOUT) result |= kEventWrite;
    if (events & (EPOLLERR | EPOLLHUP)) result |= kEventError;
    return result;
}

}  // namespace

Result<EventSet> EventSet::create() {
    int fd = ::epoll_create1(EPOLL_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        LOOM_LOG_ERROR("event set: cannot create an epoll fd: {}", detail::errno_text(err));
        return detail::status_from_errno(err) == Status::no_resource ? Status::no_resource : Status::io_error;
    }
    return EventSet(fd);
}

EventSet::EventSet(EventSet&& other) noexcept : fd_(other.fd_), members_(other.members_) {
    other.fd_ = -1;
    other.members_ = 0;
}

EventSet& EventSet::operator=(EventSet&& other) noexcept {
    if (this != &other) {
        close();
        fd_ = other.fd_;
        members_ = other.members_;
        other.fd_ = -1;
        other.members_ = 0;
    }
    return *this;
}

EventSet::~EventSet() {
    close();
}

void EventSet::close() noexcept {
    if (fd_ >= 0) {
        ::close(fd_);
        fd_ = -1;
    }
}

Status EventSet::control(int op, int fd, std::uint32_t events, std::uint64_t cookie,
                         const char* what) noexcept {
    if (events & ~kEventAll) {
        LOOM_LOG_WARN("event set {}: cannot {} fd {}: unknown event flags {:#x}", fd_, what, fd,
                      events & ~kEventAll);
        return Status::invalid_param;
    }
    if (fd < 0) {
        LOOM_LOG_WARN("event set {}: cannot {} fd {}: not a file descriptor", fd_, what, fd);
        return Status::invalid_param;
    }
    epoll_event event{};
    event.events = to_epoll(events);
    event.data.u64 = cookie;
    if (::epoll_ctl(fd_, op, fd, op == EPOLL_CTL_DEL ? nullptr : &event) == 0) {
        if (op == EPOLL_CTL_ADD) ++members_;
        if (op == EPOLL_CTL_DEL && members_ > 0) --members_;
        return Status::ok;
    }
    int err = errno;
    Status status = detail::status_from_errno(err);
    switch (err) {
        case EEXIST:
            LOOM_LOG_WARN("event set {}: cannot {} fd {}: already a member", fd_, what, fd);
            break;
        case ENOENT:
            LOOM_LOG_WARN("event set {}: cannot {} fd {}: not a member", fd_, what, fd);
            break;
        case EPERM:
            LOOM_LOG_WARN("event set {}: cannot {} fd {}: the file does not support polling", fd_, what, fd);
            break;
        default:
            LOOM_LOG_WARN("event set {}: cannot {} fd {}: {}", fd_, what, fd, detail::errno_text(err));
            break;
    }
    return status;
}

Status EventSet::add(int fd, std::uint32_t events, std::uint64_t cookie) noexcept {
    return control(EPOLL_CTL_ADD, fd, events, cookie, "add");
}

Status EventSet::modify(int fd, std::uint32_t events, std::uint64_t cookie) noexcept {
    return control(EPOLL_CTL_MOD, fd, events, cookie, "modify");
}

Status EventSet::remove(int fd) noexcept {
    return control(EPOLL_CTL_DEL, fd, 0, 0, "remove");
}

Result<unsigned> EventSet::wait(std::span<Event> out, int timeout_ms) noexcept {
    if (out.empty()) {
        LOOM_LOG_WARN("event set {}: wait() needs room for at least one event", fd_);
        return Status::invalid_param;
    }
    epoll_event events[kMaxWaitEvents];
    int max = static_cast<int>(std::min<std::size_t>(out.size(), kMaxWaitEvents));
    int count = ::epoll_wait(fd_, events, max, timeout_ms < 0 ? -1 : timeout_ms);
    if (count < 0) {
        int err = errno;
        if (err == EINTR) {
            return 0u;
        }
        LOOM_LOG_ERROR("event set {}: epoll_wait failed: {}", fd_, detail::errno_text(err));
        return err == EBADF ? Status::invalid_param : Status::io_error;
    }
    for (int i = 0; i < count; ++i) {
        out[i] = Event{events[i].data.u64, from_epoll(events[i].events)};
    }
    return static_cast<unsigned>(count);
}

}  // namespace loom::ucs
