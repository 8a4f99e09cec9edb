/**
 * Internal to src/ucs/async: the "async" log component shared by the area's files and
 * the mapping of errno values to status codes. Not installed. Files of the area put
 *     #define LOOM_LOG_COMPONENT (::loom::ucs::detail::async_log_component())
 * before their first include.
 */
#pragma once

#include "ucs/debug/log.h"
#include "ucs/type/status.h"

#include <string>

namespace loom::ucs::detail {

/** The "async" log component (event fds, event sets, timers, the async context). */
log::Component& async_log_component() noexcept;

/** Status for an errno value from fd and epoll calls (EBADF -> invalid_param, ...). */
Status status_from_errno(int err) noexcept;

/** Text of an errno value; thread-safe, unlike strerror(). */
std::string errno_text(int err);

}  // namespace loom::ucs::detail
