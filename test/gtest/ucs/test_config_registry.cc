#include "common/test_helpers.h"
#include "ucs/test_config_tables.h"

#include "ucs/config/registry.h"
#include "ucs/config/report.h"

#include <gtest/gtest.h>

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>

namespace loom::ucs::config {
namespace {

using test::LogCapture;
using test::ScopedEnv;

struct DynamicConfig {
    int knob = 0;
};

bool is_registered(const TableBase& table) {
    auto tables = registered_tables();
    return std::find(tables.begin(), tables.end(), &table) != tables.end();
}

class ConfigRegistry : public testing::Test {
protected:
    void SetUp() override { detail::forget_reports(); }

    ScopedEnv no_file_{"LOOM_CONFIG_FILE", std::nullopt};
};

TEST_F(ConfigRegistry, ListsRegisteredTablesGlobalFirst) {
    auto tables = registered_tables();
    ASSERT_GE(tables.size(), 2u);
    EXPECT_EQ("", tables.front()->prefix());  // the global table of libloom-ucs
    EXPECT_TRUE(is_registered(test_table()));
    EXPECT_TRUE(std::is_sorted(tables.begin(), tables.end(), [](const TableBase* a, const TableBase* b) {
        return a->prefix() < b->prefix();
    }));
}

TEST_F(ConfigRegistry, TablesRegisterAndUnregisterDynamically) {
    EXPECT_FALSE(is_known_variable("LOOM_CFGDYN_KNOB"));
    {
        Table<DynamicConfig> table("CFGDYN_", "Dynamic", "Registered for a while.",
                                   {field("KNOB", "1", "A knob.", &DynamicConfig::knob, IntParser<int>())});
        EXPECT_FALSE(is_registered(table));
        {
            Registration registration(table);
            EXPECT_TRUE(is_registered(table));
            EXPECT_TRUE(is_known_variable("LOOM_CFGDYN_KNOB"));
            EXPECT_TRUE(is_known_variable("cfgdyn_knob"));
        }
        EXPECT_FALSE(is_registered(table));
        EXPECT_FALSE(is_known_variable("LOOM_CFGDYN_KNOB"));
    }
    {
        // The usual form: a table that is registered while it exists (a module's static object).
        auto table = std::make_unique<RegisteredTable<DynamicConfig>>(
            "CFGDYN_", "Dynamic", "",
            std::initializer_list<TableEntry<DynamicConfig>>{
                field("KNOB", "1", "A knob.", &DynamicConfig::knob, IntParser<int>())});
        EXPECT_TRUE(is_registered(*table));
        EXPECT_TRUE(is_known_variable("LOOM_CFGDYN_KNOB"));
        table.reset();
        EXPECT_FALSE(is_known_variable("LOOM_CFGDYN_KNOB"));
    }
}

/** Where libtool puts the test module (make check runs with top_builddir set). */
std::string module_path() {
    const char* top = std::getenv("top_builddir");
    return std::string(top ? top : ".") + "/test/gtest/ucs/.libs/config_test_module.so";
}

TEST_F(ConfigRegistry, ModuleTableComesAndGoesWithTheModule) {
    std::string path = module_path();
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) GTEST_SKIP() << path << " is not built (run the tests with make check)";
    EXPECT_FALSE(is_known_variable("LOOM_CFGMOD_CHUNK"));

    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(nullptr, handle) << ::dlerror();
    EXPECT_TRUE(is_known_variable("LOOM_CFGMOD_CHUNK"));
    auto tables = registered_tables();
    auto module_table = std::find_if(tables.begin(), tables.end(),
                                     [](const TableBase* t) { return t->prefix() == "CFGMOD_"; });
    ASSERT_NE(tables.end(), module_table);
    {
        ScopedEnv chunk("LOOM_CFGMOD_CHUNK", "16384");
        auto values = (*module_table)->current_values({});
        ASSERT_TRUE(values.ok());
        EXPECT_EQ(std::vector<std::string>{"16k"}, *values);
    }

    ASSERT_EQ(0, ::dlclose(handle));
    ASSERT_EQ(nullptr, ::dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD)) << "dlclose() left the module loaded";
    EXPECT_FALSE(is_known_variable("LOOM_CFGMOD_CHUNK"));
    tables = registered_tables();
    EXPECT_EQ(tables.end(), std::find_if(tables.begin(), tables.end(),
                                         [](const TableBase* t) { return t->prefix() == "CFGMOD_"; }));
}

TEST_F(ConfigRegistry, ClosestVariable) {
    EXPECT_EQ("LOOM_LOG_LEVEL", closest_variable("LOOM_LOG_LEVL"));         // a letter missing
    EXPECT_EQ("LOOM_LOG_LEVEL", closest_variable("LOG_LEVELL"));            // one too many, no LOOM_
    EXPECT_EQ("LOOM_LOG_LEVEL", closest_variable("LOOM_log_level"));        // case
    EXPECT_EQ("LOOM_CFGTEST_SIZE", closest_variable("LOOM_CFGTEST_SIEZ"));  // swapped letters
    EXPECT_EQ("LOOM_MODULE_DIR", closest_variable("LOOM_MODULE_DIRS"));
    EXPECT_EQ("", closest_variable("LOOM_COMPLETELY_DIFFERENT"));
    EXPECT_EQ("", closest_variable("LOOM_XYZ"));
}

TEST_F(ConfigRegistry, UnknownVariableWarnsOnceWithSuggestion) {
    ScopedEnv typo("LOOM_CFGTEST_SIZ", "1k");
    LogCapture capture;
    warn_unknown_variables();
    warn_unknown_variables();
    EXPECT_EQ(1, capture.count("LOOM_CFGTEST_SIZ;")) << capture.text();
    EXPECT_EQ(
        1, capture.count("unknown configuration variable LOOM_CFGTEST_SIZ; did you mean LOOM_CFGTEST_SIZE?"))
        << capture.text();
}

TEST_F(ConfigRegistry, UnknownVariableWithoutCloseName) {
    ScopedEnv unknown("LOOM_CFGTEST_QWERTYUIOP", "1");
    LogCapture capture;
    warn_unknown_variables();
    EXPECT_EQ(1,
              capture.count("unknown configuration variable LOOM_CFGTEST_QWERTYUIOP (loom_info -c lists the "
                            "known ones)"))
        << capture.text();
}

TEST_F(ConfigRegistry, KnownVariablesAreQuiet) {
    ScopedEnv size("LOOM_CFGTEST_SIZE", "1k");
    ScopedEnv level("LOOM_LOG_LEVEL", "warn");
    ScopedEnv script("LOOM_QS_SOMETHING", "1");  // quickstart.sh's knobs are not configuration
    LogCapture capture;
    warn_unknown_variables();
    EXPECT_EQ(0, capture.count("LOOM_CFGTEST_SIZE")) << capture.text();
    EXPECT_EQ(0, capture.count("LOOM_LOG_LEVEL")) << capture.text();
    EXPECT_EQ(0, capture.count("LOOM_QS_")) << capture.text();
}

TEST_F(ConfigRegistry, VariableOfATableRegisteredLaterIsKnown) {
    ScopedEnv knob("LOOM_CFGLATE_KNOB", "3");
    Table<DynamicConfig> table("CFGLATE_", "Late", "",
                               {field("KNOB", "1", "A knob.", &DynamicConfig::knob, IntParser<int>())});
    Registration registration(table);
    LogCapture capture;
    warn_unknown_variables();
    EXPECT_EQ(0, capture.count("LOOM_CFGLATE_KNOB")) << capture.text();
}

TEST_F(ConfigRegistry, UnknownConfigFileKeysWarnWithLocation) {
    test::TempFile file("CFGTEST_SIZE = 1k\n# comment\nCFGTEST_COUNTT = 2\n");
    ScopedEnv path("LOOM_CONFIG_FILE", file.path());
    LogCapture capture;
    warn_unknown_variables();
    warn_unknown_variables();
    EXPECT_EQ(1, capture.count("configuration file " + file.path() +
                               ":3: unknown configuration variable LOOM_CFGTEST_COUNTT; did you mean "
                               "LOOM_CFGTEST_COUNT?"))
        << capture.text();
    EXPECT_EQ(0, capture.count("LOOM_CFGTEST_SIZE")) << capture.text();
}

TEST_F(ConfigRegistry, CheckOverrides) {
    EXPECT_EQ(Status::ok, check_overrides({}));
    EXPECT_EQ(Status::ok, check_overrides({{"CFGTEST_SIZE", "1m"}, {"loom_log_level", "debug"}}));

    LogCapture capture;
    EXPECT_EQ(Status::no_element, check_overrides({{"CFGTEST_SIZZE", "1m"}}));
    EXPECT_EQ(1, capture.count("config ERROR")) << capture.text();
    EXPECT_EQ(
        1, capture.count("set by the application: unknown configuration variable LOOM_CFGTEST_SIZZE; did you "
                         "mean LOOM_CFGTEST_SIZE?"))
        << capture.text();

    EXPECT_EQ(Status::invalid_config, check_overrides({{"CFGTEST_SIZE", "big"}}));
    EXPECT_EQ(1, capture.count("LOOM_CFGTEST_SIZE=big (set by the application): invalid size (expected"))
        << capture.text();
}

}  // namespace
}  // namespace loom::ucs::config
