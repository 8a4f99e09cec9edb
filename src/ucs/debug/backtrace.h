/**
 * Backtraces for fatal errors and crash signals.
 */
#pragma once

#include <string>

namespace loom::debug {

/**
 * Writes the current call stack, demangled, one frame a line, to @p fd. Uses only
 * async-signal-tolerant calls after the first frame is captured, so it may run from
 * a fatal signal handler. Skips the @p skip innermost frames.
 */
void print_backtrace(int fd, int skip = 1) noexcept;

/** The current call stack as text (for logs and tests). */
std::string backtrace_string(int skip = 1);

}  // namespace loom::debug
