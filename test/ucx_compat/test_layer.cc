/**
 * test_ucx_compat: unit tests of every function the UCX compatibility layer exports
 * (bindings/ucx/exports.h), called through UCX 1.13's own API as Open MPI and MPICH call
 * them: compiled against UCX's headers (<ucp/api/ucp.h>, libucx-dev), linked against the
 * layer's libucp/libucs/libucm of the build tree.
 *
 * This file holds main() and the first test. A binary that resolved UCX's names to any
 * other library (Debian's libucp.so.0 through a stray rpath or LD_LIBRARY_PATH) would
 * test UCX instead of Loom and pass for the wrong reason: main() checks the libraries
 * before anything else and, when they are not the layer's, runs only the first test,
 * which fails saying what was loaded, and exits nonzero.
 *
 * A watchdog ends the binary when one test runs longer than LOOMTEST_TIMEOUT seconds
 * (default 180), naming it: every wait of the tests has its own 30 s deadline, so this
 * only catches a call that blocks inside the layer.
 */
#include "ucx_compat_test.h"

#include <dirent.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#ifndef LOOM_SRCDIR
#error "LOOM_SRCDIR (the source tree holding bindings/ucx/exports.h) must be defined"
#endif

namespace ucx_compat {
namespace {

// --- the first test: this process runs Loom's layer -------------------------------------------

TEST(UcxCompatLayer, ProcessLoadedTheLayerNotUcx) {
    const std::string why = layer_problem();
    ASSERT_TRUE(why.empty()) << "this binary must run against the layer's libraries in " << LOOM_BUILDDIR
                             << "/bindings/ucx/.libs: " << why;
    EXPECT_NE(nullptr, std::strstr(ucp_get_version_string(), "Loom")) << ucp_get_version_string();
}

TEST(UcxCompatLayer, VersionIsUcx113) {
    unsigned major = 0, minor = 0, release = 99;
    ucp_get_version(&major, &minor, &release);
    EXPECT_EQ(1u, major);
    EXPECT_EQ(13u, minor);
    EXPECT_EQ(UCP_API_MAJOR, major);
    EXPECT_EQ(UCP_API_MINOR, minor);
    EXPECT_NE(99u, release);
    ucp_get_version(nullptr, nullptr, nullptr);  // every output is optional
    const std::string s = ucp_get_version_string();
    EXPECT_EQ(0u, s.rfind("1.13", 0)) << s;
}

/**
 * Every function of bindings/ucx/exports.h is called by some test here: the list cannot
 * grow without a test.
 */
TEST(UcxCompatLayer, EveryExportIsCalledByATest) {
    const std::string src = LOOM_SRCDIR;
    std::ifstream exports(src + "/bindings/ucx/exports.h");
    ASSERT_TRUE(exports.good()) << "cannot read " << src << "/bindings/ucx/exports.h";
    std::stringstream es;
    es << exports.rdbuf();
    const std::string text = es.str();
    std::vector<std::string> names;
    const std::regex decl(R"(^LOOM_UCX_EXPORT\((\w+)\))", std::regex::multiline);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), decl); it != std::sregex_iterator(); ++it) {
        names.push_back((*it)[1]);
    }
    EXPECT_EQ(85u, names.size()) << "exports.h changed: update this count and add tests";
    std::string tests;
    const std::string dir = src + "/test/ucx_compat";
    DIR* d = ::opendir(dir.c_str());
    ASSERT_NE(nullptr, d) << dir;
    while (dirent* e = ::readdir(d)) {
        const std::string f = e->d_name;
        if (f.size() < 3 || f.compare(f.size() - 3, 3, ".cc") != 0) continue;
        std::ifstream in(dir + "/" + f);
        std::stringstream ss;
        ss << in.rdbuf();
        tests += ss.str();
    }
    ::closedir(d);
    for (const std::string& name : names) {
        // A call: the name followed by "(" (not a prefix of a longer name: ucp_put_nb vs ucp_put_nbx).
        const std::regex call("\\b" + name + "\\s*\\(");
        EXPECT_TRUE(std::regex_search(tests, call))
            << name << " is exported but no test of test/ucx_compat calls it";
    }
}

// --- main ----------------------------------------------------------------------------------

int timeout_seconds() {
    const char* v = std::getenv("LOOMTEST_TIMEOUT");
    int t = v != nullptr ? std::atoi(v) : 0;
    return t > 0 ? t : 180;
}

/** Ends the binary when one test outlives the timeout (a call blocked inside the layer). */
class Watchdog : public testing::EmptyTestEventListener {
public:
    explicit Watchdog(int seconds) : seconds_(seconds), thread_([this] { run(); }) {}
    ~Watchdog() override {
        {
            std::lock_guard<std::mutex> g(lock_);
            stop_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }
    void OnTestStart(const testing::TestInfo& info) override {
        std::lock_guard<std::mutex> g(lock_);
        name_ = std::string(info.test_suite_name()) + "." + info.name();
        deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(seconds_);
        armed_ = true;
        cv_.notify_all();
    }
    void OnTestEnd(const testing::TestInfo&) override {
        std::lock_guard<std::mutex> g(lock_);
        armed_ = false;
    }

private:
    void run() {
        std::unique_lock<std::mutex> g(lock_);
        while (!stop_) {
            if (!armed_) {
                cv_.wait(g);
                continue;
            }
            if (cv_.wait_until(g, deadline_) == std::cv_status::timeout && armed_ && !stop_ &&
                std::chrono::steady_clock::now() >= deadline_) {
                std::fprintf(stderr,
                             "\n[ WATCHDOG ] %s did not finish within %d s\n[  FAILED  ] %s (watchdog)\n",
                             name_.c_str(), seconds_, name_.c_str());
                std::fflush(stderr);
                ::_exit(3);
            }
        }
    }
    int seconds_;
    std::mutex lock_;
    std::condition_variable cv_;
    std::string name_;
    std::chrono::steady_clock::time_point deadline_;
    bool armed_ = false;
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace
}  // namespace ucx_compat

int main(int argc, char** argv) {
    testing::InitGoogleTest(&argc, argv);
    const std::string why = ucx_compat::layer_problem();
    if (!why.empty()) {
        std::fprintf(stderr,
                     "\n*** test_ucx_compat: this process did NOT load Loom's UCX layer: %s\n"
                     "*** Refusing to run the tests against another UCX; running only the check.\n\n",
                     why.c_str());
        GTEST_FLAG_SET(filter, "UcxCompatLayer.ProcessLoadedTheLayerNotUcx");
        const int rc = RUN_ALL_TESTS();
        return rc != 0 ? rc : 1;
    }
    testing::UnitTest::GetInstance()->listeners().Append(
        new ucx_compat::Watchdog(ucx_compat::timeout_seconds()));
    return RUN_ALL_TESTS();
}
