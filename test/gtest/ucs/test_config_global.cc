#include "common/test_helpers.h"
#include "ucs/test_config_tables.h"

#include "ucs/config/global_options.h"
#include "ucs/config/registry.h"
#include "ucs/config/report.h"
#include "ucs/debug/log.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace loom::ucs::config {
namespace {

using test::LogCapture;
using test::ScopedEnv;

log::Component g_global_test_component("cfgglobal");

/** Clears the global variables, so the user's environment cannot leak in. */
class ConfigGlobal : public testing::Test {
protected:
    void SetUp() override {
        detail::forget_reports();
        for (const char* name :
             {"LOOM_LOG_LEVEL", "LOOM_LOG_FILE", "LOOM_CONFIG_FILE", "LOOM_MODULES", "LOOM_MODULE_DIR"}) {
            clean_.push_back(std::make_unique<ScopedEnv>(name, std::nullopt));
        }
    }

private:
    std::vector<std::unique_ptr<ScopedEnv>> clean_;
};

TEST_F(ConfigGlobal, TableListsTheGlobalVariables) {
    const Table<GlobalOptions>& table = global_table();
    EXPECT_EQ("", table.prefix());
    std::vector<std::string> names;
    for (std::size_t i = 0; i < table.size(); ++i) names.push_back(table.variable_name(i));
    EXPECT_EQ((std::vector<std::string>{"LOOM_LOG_LEVEL", "LOOM_LOG_FILE", "LOOM_CONFIG_FILE", "LOOM_MODULES",
                                        "LOOM_MODULE_DIR", "LOOM_HANDLE_ERRORS"}),
              names);
    auto tables = registered_tables();
    EXPECT_NE(tables.end(), std::find(tables.begin(), tables.end(), &table));
}

TEST_F(ConfigGlobal, Defaults) {
    GlobalOptions options = load_global_options();
    EXPECT_EQ("warn", options.log_level);
    EXPECT_EQ("stderr", options.log_file);
    EXPECT_EQ("", options.config_file);
    EXPECT_EQ(AllowList::all(), options.modules);
    EXPECT_EQ("", options.module_dir);
}

TEST_F(ConfigGlobal, ReadsTheEnvironment) {
    ScopedEnv modules("LOOM_MODULES", "^tcp");
    ScopedEnv dir("LOOM_MODULE_DIR", "/opt/loom/modules");
    ScopedEnv level("LOOM_LOG_LEVEL", "info,tcp=debug");
    GlobalOptions options = load_global_options();
    EXPECT_TRUE(options.modules.allows("shm"));
    EXPECT_FALSE(options.modules.allows("tcp"));
    EXPECT_EQ("/opt/loom/modules", options.module_dir);
    EXPECT_EQ("info,tcp=debug", options.log_level);
}

TEST_F(ConfigGlobal, ReadsTheConfigFile) {
    test::TempFile file("LOG_LEVEL = debug\nMODULES = tcp,shm\n");
    ScopedEnv path("LOOM_CONFIG_FILE", file.path());
    ScopedEnv modules("LOOM_MODULES", "self");
    GlobalOptions options = load_global_options();
    EXPECT_EQ("debug", options.log_level);
    EXPECT_EQ(AllowList::only({"self"}), options.modules);  // the environment wins
    EXPECT_EQ(file.path(), options.config_file);
}

TEST_F(ConfigGlobal, BadValueLogsOneErrorAndKeepsTheDefaults) {
    ScopedEnv level("LOOM_LOG_LEVEL", "loud");
    ScopedEnv modules("LOOM_MODULES", "^tcp");
    LogCapture capture;
    GlobalOptions options = load_global_options();
    EXPECT_EQ("warn", options.log_level);
    EXPECT_EQ(AllowList::all(), options.modules);  // nothing partially applied
    EXPECT_EQ(1, capture.count("config ERROR")) << capture.text();
    EXPECT_EQ(1,
              capture.count("LOOM_LOG_LEVEL=loud: invalid log level (expected a level: fatal, error, warn"))
        << capture.text();
}

TEST_F(ConfigGlobal, ApplyingLogLevel) {
    LogCapture capture;  // restores the levels and the output afterwards
    ScopedEnv level("LOOM_LOG_LEVEL", "error,cfgglobal=debug");
    GlobalOptions options = load_global_options();
    ASSERT_EQ(Status::ok, apply_log_options(options));
    EXPECT_TRUE(g_global_test_component.enabled(log::Level::debug));
    EXPECT_FALSE(g_global_test_component.enabled(log::Level::trace));
    EXPECT_TRUE(log::default_component().enabled(log::Level::error));
    EXPECT_FALSE(log::default_component().enabled(log::Level::warn));
}

TEST_F(ConfigGlobal, ApplyingLogFileExpandsPid) {
    LogCapture capture;
    std::string expected = "/tmp/loomtest-config-" + std::to_string(::getpid()) + ".log";
    ScopedEnv file("LOOM_LOG_FILE", "/tmp/loomtest-config-%p.log");
    ASSERT_EQ(Status::ok, apply_log_options(load_global_options()));
    LOOM_LOG_C(g_global_test_component, log::Level::warn, "written to the configured file");
    std::string text = test::read_file(expected);
    ::unlink(expected.c_str());
    EXPECT_NE(std::string::npos, text.find("written to the configured file")) << text;
}

TEST_F(ConfigGlobal, UnopenableLogFileKeepsTheOutput) {
    LogCapture capture;
    GlobalOptions options = global_table().defaults();
    options.log_file = "/nonexistent-loomtest-dir/loom.log";
    EXPECT_EQ(Status::io_error, apply_log_options(options));
    // Still captured: the output stayed where it was.
    EXPECT_EQ(1, capture.count("LOOM_LOG_FILE=/nonexistent-loomtest-dir/loom.log: cannot open the log file"))
        << capture.text();
}

TEST_F(ConfigGlobal, UnparsableLevelKeepsTheLevels) {
    LogCapture capture("info");  // restores the levels and the output afterwards
    test::TempFile log_file("", ".log");
    GlobalOptions options = global_table().defaults();
    options.log_file = log_file.path();
    options.log_level = "info,tcp=loud";
    EXPECT_EQ(Status::invalid_config, apply_log_options(options));
    EXPECT_TRUE(g_global_test_component.enabled(log::Level::info));
    EXPECT_FALSE(g_global_test_component.enabled(log::Level::diag));
    std::string text = test::read_file(log_file.path());
    EXPECT_NE(std::string::npos, text.find("LOOM_LOG_LEVEL=info,tcp=loud: invalid log level")) << text;
}

TEST_F(ConfigGlobal, CachedOptionsAreStable) {
    const GlobalOptions& first = global_options();
    EXPECT_EQ(&first, &global_options());
}

TEST_F(ConfigGlobal, LevelSpecCheckAgreesWithTheLogger) {
    LogCapture capture;  // set_level_spec() below changes levels; restore them afterwards
    const char* specs[] = {"",
                           "warn",
                           "DEBUG",
                           "warning",
                           "data",
                           "trace_data",
                           "info,tcp=debug",
                           " info , tcp:trace ",
                           " , ",
                           "info,,debug",
                           "loud",
                           "info,tcp=loud",
                           "=debug",
                           "tcp=",
                           "tcp",
                           ":info",
                           "info,=debug",
                           "a=b=c",
                           "info;tcp=debug"};
    int valid = 0;
    for (const char* spec : specs) {
        bool accepted = log::set_level_spec(spec) == Status::ok;
        EXPECT_EQ(accepted, is_valid_log_level_spec(spec)) << "'" << spec << "'";
        valid += accepted;
    }
    EXPECT_EQ(11, valid);  // the corpus has both kinds ("info;tcp=debug" sets component "info;tcp")
}

}  // namespace
}  // namespace loom::ucs::config
