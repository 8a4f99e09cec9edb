#include "ucs/async/async_log.h"

#include <cerrno>
#include <system_error>

namespace loom::ucs::detail {

log::Component& async_log_component() noexcept {
    static log::Component component("async");
    return component;
}

Status status_from_errno(int err) noexcept {
    switch (err) {
        case EBADF:
        case EINVAL:
        case EFAULT:
            return Status::invalid_param;
        case EEXIST:
            return Status::already_exists;
        case ENOENT:
            return Status::no_element;
        case EPERM:  // epoll on a regular file or a directory
            return Status::unsupported;
        case ENOMEM:
            return Status::no_memory;
        case EMFILE:
        case ENFILE:
        case ENOSPC:  // epoll watch limit (max_user_watches)
        case EAGAIN:
            return Status::no_resource;
        case EACCES:
            return Status::permission_denied;
        default:
            return Status::io_error;
    }
}

std::string errno_text(int err) {
    return std::error_code(err, std::generic_category()).message();
}

}  // namespace loom::ucs::detail
