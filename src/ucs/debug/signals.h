/**
 * Crash reporting: on SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGABRT, print one line
 * naming the signal (and the faulting address) and a backtrace, then let the signal
 * take its default action (core dump, exit status). Installed from libloom-ucs at
 * load time when LOOM_HANDLE_ERRORS=bt (the default); a handler the application or
 * a sanitizer installed first is left alone.
 */
#pragma once

namespace loom::debug {

/** Installs the crash handlers for every signal that still has its default action; returns how many. */
int install_crash_handlers() noexcept;

/** Restores the default action of the signals we handle (for tests). */
void remove_crash_handlers() noexcept;

}  // namespace loom::debug
