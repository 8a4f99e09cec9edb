#include "common/test_helpers.h"

#include "ucs/debug/assert.h"
#include "ucs/debug/backtrace.h"
#include "ucs/debug/log.h"

#include <gtest/gtest.h>

#include <unistd.h>

namespace loom {
namespace {

log::Component g_test_component("logtest");

TEST(Log, ParseLevel) {
    log::Level level;
    ASSERT_EQ(Status::ok, log::parse_level("DEBUG", level));
    EXPECT_EQ(log::Level::debug, level);
    ASSERT_EQ(Status::ok, log::parse_level(" warning ", level));
    EXPECT_EQ(log::Level::warn, level);
    ASSERT_EQ(Status::ok, log::parse_level("trace_data", level));
    EXPECT_EQ(log::Level::trace_data, level);
    EXPECT_EQ(Status::invalid_param, log::parse_level("loud", level));
    EXPECT_EQ("info", log::level_name(log::Level::info));
}

TEST(Log, LevelFiltersMessages) {
    test::LogCapture capture("warn");
    LOOM_LOG_C(g_test_component, log::Level::warn, "visible {}", 1);
    LOOM_LOG_C(g_test_component, log::Level::info, "hidden {}", 2);
    EXPECT_EQ(1, capture.count("visible 1"));
    EXPECT_EQ(0, capture.count("hidden 2"));
}

TEST(Log, LineHasComponentLevelAndLocation) {
    test::LogCapture capture("info");
    LOOM_LOG_C(g_test_component, log::Level::info, "hello {}", "world");
    std::string text = capture.text();
    EXPECT_NE(std::string::npos, text.find("logtest INFO"));
    EXPECT_NE(std::string::npos, text.find("test_log.cc:"));
    EXPECT_NE(std::string::npos, text.find("hello world"));
    EXPECT_NE(std::string::npos, text.find(":" + std::to_string(::getpid()) + ":"));
}

TEST(Log, PerComponentLevels) {
    test::LogCapture capture("error,logtest=debug");
    EXPECT_TRUE(g_test_component.enabled(log::Level::debug));
    EXPECT_FALSE(log::default_component().enabled(log::Level::warn));
    LOOM_LOG_C(g_test_component, log::Level::debug, "component debug");
    LOOM_LOG_WARN("default warn");
    EXPECT_EQ(1, capture.count("component debug"));
    EXPECT_EQ(0, capture.count("default warn"));
}

TEST(Log, OverrideAppliesToComponentsRegisteredLater) {
    test::LogCapture capture("warn,latecomer=trace");
    log::Component late("latecomer");
    EXPECT_TRUE(late.enabled(log::Level::trace));
    EXPECT_FALSE(late.enabled(log::Level::trace_data));
}

TEST(Log, BadSpecChangesNothing) {
    test::LogCapture capture("info");
    EXPECT_EQ(Status::invalid_param, log::set_level_spec("info,tcp=shout"));
    EXPECT_EQ(Status::invalid_param, log::set_level_spec("=debug"));
    EXPECT_TRUE(g_test_component.enabled(log::Level::info));
    EXPECT_FALSE(g_test_component.enabled(log::Level::diag));
}

TEST(Log, ComponentsAreListed) {
    auto names = log::component_names();
    EXPECT_NE(names.end(), std::find(names.begin(), names.end(), "logtest"));
}

TEST(Log, OutputFileExpandsPid) {
    std::string pattern = "/tmp/loomtest-log-%p.txt";
    std::string expected = "/tmp/loomtest-log-" + std::to_string(::getpid()) + ".txt";
    ASSERT_EQ(Status::ok, log::set_output_file(pattern));
    ASSERT_EQ(Status::ok, log::set_level_spec("warn"));
    LOOM_LOG_C(g_test_component, log::Level::error, "to the pid file");
    ASSERT_EQ(Status::ok, log::set_output_file("stderr"));
    EXPECT_NE(std::string::npos, test::read_file(expected).find("to the pid file"));
    ::unlink(expected.c_str());
}

TEST(Log, UnwritableOutputFileIsAnError) {
    EXPECT_EQ(Status::io_error, log::set_output_file("/nonexistent-dir/x/log.txt"));
}

TEST(Log, DisabledMessageDoesNotEvaluateArguments) {
    test::LogCapture capture("warn");
    int evaluations = 0;
    auto count = [&] { return ++evaluations; };
    LOOM_LOG_C(g_test_component, log::Level::debug, "{}", count());
    EXPECT_EQ(0, evaluations);
    LOOM_LOG_C(g_test_component, log::Level::error, "{}", count());
    EXPECT_EQ(1, evaluations);
}

TEST(Backtrace, NamesTheCaller) {
    std::string text = debug::backtrace_string(0);
    EXPECT_NE(std::string::npos, text.find("#0"));
    EXPECT_NE(std::string::npos, text.find("backtrace_string"));
}

TEST(LogDeathTest, FatalPrintsMessageAndBacktrace) {
    EXPECT_DEATH(LOOM_FATAL("the sky is falling: {}", 42), "the sky is falling: 42(.|\n)*backtrace");
}

}  // namespace
}  // namespace loom
