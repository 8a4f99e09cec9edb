#define LOOM_LOG_COMPONENT (::loom::ucs::detail::async_log_component())

#include "ucs/async/event_fd.h"

#include "ucs/async/async_log.h"

#include <sys/eventfd.h>
#include <unistd.h>
#include <cerrno>

namespace loom::ucs {

Result<EventFd> EventFd::create() {
    int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0) {
        int err = errno;
        LOOM_LOG_ERROR("eventfd: cannot create: {}", detail::errno_text(err));
        return detail::status_from_errno(err) == Status::no_resource ? Status::no_resource : Status::io_error;
    }
    return EventFd(fd);
}

EventFd::EventFd(EventFd&& other) noexcept : fd_(other.fd_) {
    other.fd_ = -1;
}

EventFd& EventFd::operator=(EventFd&& other) noexcept {
    if (this != &other) {
        close();
        fd_ = other.fd_;
        other.fd_ = -1;
    }
    return *this;
}

EventFd::~EventFd() {
    close();
}

void EventFd::close() noexcept {
    if (fd_ >= 0) {
        ::close(fd_);
        fd_ = -1;
    }
}

Status EventFd::signal() noexcept {
    const std::uint64_t one = 1;
    for (;;) {
        if (::write(fd_, &one, sizeof(one)) == static_cast<ssize_t>(sizeof(one))) {
            return Status::ok;
        }
        int err = errno;
        if (err == EINTR) {
            continue;
        }
        if (err == EAGAIN) {
            return Status::ok;  // the counter is saturated: the fd is readable already
        }
        LOOM_LOG_ERROR("eventfd {}: signal failed: {}", fd_, detail::errno_text(err));
        return err == EBADF ? Status::invalid_param : Status::io_error;
    }
}

Status EventFd::read_counter(std::uint64_t& value) noexcept {
    value = 0;
    for (;;) {
        if (::read(fd_, &value, sizeof(value)) == static_cast<ssize_t>(sizeof(value))) {
            return Status::ok;  // one read returns and resets the whole counter
        }
        int err = errno;
        if (err == EINTR) {
            continue;
        }
        if (err == EAGAIN) {
            return Status::ok;  // nothing pending
        }
        LOOM_LOG_ERROR("eventfd {}: read failed: {}", fd_, detail::errno_text(err));
        return err == EBADF ? Status::invalid_param : Status::io_error;
    }
}

std::uint64_t EventFd::drain() noexcept {
    std::uint64_t value = 0;
    (void)read_counter(value);
    return value;
}

Status EventFd::arm() noexcept {
    std::uint64_t value = 0;
    Status status = read_counter(value);
    if (status != Status::ok) {
        return status;
    }
    return value == 0 ? Status::ok : Status::busy;
}

}  // namespace loom::ucs
