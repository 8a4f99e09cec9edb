#include "common/test_helpers.h"

#include "ucs/debug/signals.h"

#include <gtest/gtest.h>

#include <signal.h>

namespace loom::debug {
namespace {

// SIGILL: sanitizers leave it alone by default, so these run in every build.
TEST(CrashHandlerDeathTest, CrashPrintsSignalAndBacktrace) {
    EXPECT_EXIT(::raise(SIGILL), testing::KilledBySignal(SIGILL), "caught signal 4 .*(\n|.)*backtrace");
}

TEST(CrashHandlerDeathTest, DisabledByConfig) {
    test::ScopedEnv env("LOOM_HANDLE_ERRORS", std::string("no"));
    // The death-test child re-executes this binary, so libloom-ucs reads the variable at load.
    EXPECT_EXIT(::raise(SIGILL), testing::KilledBySignal(SIGILL), "^$");
}

void application_handler(int) {}

TEST(CrashHandler, LeavesAnApplicationHandlerAlone) {
    struct sigaction saved {};
    ASSERT_EQ(0, ::sigaction(SIGILL, nullptr, &saved));
    remove_crash_handlers();
    ::signal(SIGILL, application_handler);
    install_crash_handlers();
    struct sigaction now {};
    ASSERT_EQ(0, ::sigaction(SIGILL, nullptr, &now));
    EXPECT_EQ(reinterpret_cast<void*>(application_handler), reinterpret_cast<void*>(now.sa_handler));
    ::signal(SIGILL, SIG_DFL);
    EXPECT_GE(install_crash_handlers(), 1);  // back to ours for the rest of the suite
    (void)saved;
}

}  // namespace
}  // namespace loom::debug
