/**
 * gtest main for every Loom suite, with a watchdog: a test that runs longer than
 * LOOMTEST_TIMEOUT seconds (default 120) is reported by name with a backtrace of
 * the watchdog and the process exits with an error, so no suite hangs CI.
 */
#include "common/forked_peer.h"
#include "common/test_helpers.h"

#include "ucs/debug/backtrace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>

namespace {

class Watchdog : public testing::EmptyTestEventListener {
public:
    explicit Watchdog(int timeout_seconds) : timeout_(timeout_seconds) {
        thread_ = std::thread([this] { run(); });
    }

    ~Watchdog() override {
        {
            std::lock_guard guard(lock_);
            stop_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }

    void OnTestStart(const testing::TestInfo& info) override {
        std::lock_guard guard(lock_);
        current_ = std::string(info.test_suite_name()) + "." + info.name();
        deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_);
        armed_ = true;
        cv_.notify_all();
    }

    void OnTestEnd(const testing::TestInfo&) override {
        std::lock_guard guard(lock_);
        armed_ = false;
    }

private:
    void run() {
        std::unique_lock guard(lock_);
        while (!stop_) {
            if (!armed_) {
                cv_.wait(guard);
                continue;
            }
            if (cv_.wait_until(guard, deadline_) == std::cv_status::timeout && armed_ && !stop_ &&
                std::chrono::steady_clock::now() >= deadline_) {
                std::fprintf(stderr, "\n[ WATCHDOG ] %s did not finish within %d s: aborting the suite\n",
                             current_.c_str(), timeout_);
                std::fprintf(stderr, "[  FAILED  ] %s (watchdog)\n", current_.c_str());
                std::fflush(stderr);
                ::_exit(3);
            }
        }
    }

    int timeout_;
    std::thread thread_;
    std::mutex lock_;
    std::condition_variable cv_;
    std::string current_;
    std::chrono::steady_clock::time_point deadline_;
    bool armed_ = false;
    bool stop_ = false;
};

}  // namespace

int main(int argc, char** argv) {
    // An executed copy of this binary running a test's peer role (see forked_peer.h).
    if (int code = loom::test::run_peer_role(); code >= 0) return code;
    testing::InitGoogleMock(&argc, argv);
    // Death tests fork; "threadsafe" re-executes the binary so the watchdog thread is safe.
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    auto* watchdog = new Watchdog(loom::test::watchdog_timeout_seconds());
    testing::UnitTest::GetInstance()->listeners().Append(watchdog);
    return RUN_ALL_TESTS();
}
