#include "ucs/debug/signals.h"

#include "ucs/debug/backtrace.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace loom::debug {

namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
bool g_installed[sizeof(kSignals) / sizeof(kSignals[0])] = {};

void on_crash(int sig, siginfo_t* info, void*) {
    char line[160];
    int n = std::snprintf(line, sizeof(line), "[loom] process %d caught signal %d (%s)", static_cast<int>(::getpid()),
                          sig, strsignal(sig));
    if (sig != SIGABRT && info != nullptr) {
        n += std::snprintf(line + n, sizeof(line) - static_cast<std::size_t>(n), " at address %p", info->si_addr);
    }
    n += std::snprintf(line + n, sizeof(line) - static_cast<std::size_t>(n), "\n");
    ssize_t written = ::write(STDERR_FILENO, line, static_cast<std::size_t>(n));
    (void)written;
    print_backtrace(STDERR_FILENO, 1);
    // Back to the default action and re-raise: the exit status and core dump stay honest.
    ::signal(sig, SIG_DFL);
    ::raise(sig);
}

}  // namespace

int install_crash_handlers() noexcept {
    int count = 0;
    for (std::size_t i = 0; i < sizeof(kSignals) / sizeof(kSignals[0]); ++i) {
        struct sigaction old {};
        if (::sigaction(kSignals[i], nullptr, &old) != 0) continue;
        bool is_default = !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL;
        if (!is_default) continue;  // someone else (the application, ASan) handles it
        struct sigaction action {};
        action.sa_sigaction = on_crash;
        action.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NODEFER;
        sigemptyset(&action.sa_mask);
        if (::sigaction(kSignals[i], &action, nullptr) == 0) {
            g_installed[i] = true;
            ++count;
        }
    }
    return count;
}

void remove_crash_handlers() noexcept {
    for (std::size_t i = 0; i < sizeof(kSignals) / sizeof(kSignals[0]); ++i) {
        if (g_installed[i]) {
            ::signal(kSignals[i], SIG_DFL);
            g_installed[i] = false;
        }
    }
}

}  // namespace loom::debug
