#include "common/test_helpers.h"
#include "ucs/test_config_tables.h"

#include "ucs/config/registry.h"
#include "ucs/config/report.h"
#include "ucs/config/table.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace loom::ucs::config {
namespace {

using namespace std::chrono_literals;
using test::LogCapture;
using test::ScopedEnv;
using test::TempFile;

// field() only binds a parser to a member of exactly the parser's value type.
template <typename Member, typename P>
concept Bindable = requires(Member member, P parser) {
    field(std::string(), std::string(), std::string(), member, parser);
};
static_assert(Bindable<std::size_t TestConfig::*, SizeParser>);
static_assert(Bindable<int TestConfig::*, IntParser<int>>);
static_assert(!Bindable<int TestConfig::*, SizeParser>);
static_assert(!Bindable<unsigned TestConfig::*, IntParser<int>>);
static_assert(!Bindable<std::string TestConfig::*, BoolParser>);
static_assert(!Bindable<bool TestConfig::*, TernaryParser>);

/** Clears every variable the test table reads, so the user's environment cannot leak in. */
class ConfigTable : public testing::Test {
protected:
    void SetUp() override {
        detail::forget_reports();
        clean_.push_back(std::make_unique<ScopedEnv>("LOOM_CONFIG_FILE", std::nullopt));
        for (std::size_t i = 0; i < test_table().size(); ++i) {
            clean_.push_back(std::make_unique<ScopedEnv>(test_table().variable_name(i), std::nullopt));
        }
    }

    /** A config whose every field differs from the defaults, to see what fill() changed. */
    static TestConfig sentinel() {
        TestConfig config;
        config.flag = true;
        config.mode = Ternary::no;
        config.count = 5;
        config.limit = 1;
        config.size = 1;
        config.timeout = 1ns;
        config.color = TestColor::red;
        config.names = {"z"};
        config.allowed = AllowList::only({"z"});
        config.text = "sentinel";
        return config;
    }

private:
    std::vector<std::unique_ptr<ScopedEnv>> clean_;
};

TEST_F(ConfigTable, DefaultsApply) {
    TestConfig config = sentinel();
    config.untouched = 5;
    ASSERT_EQ(Status::ok, fill(test_table(), config));
    EXPECT_FALSE(config.flag);
    EXPECT_EQ(Ternary::auto_, config.mode);
    EXPECT_EQ(-3, config.count);
    EXPECT_EQ(kInf<unsigned>, config.limit);
    EXPECT_EQ(65536u, config.size);
    EXPECT_EQ(20s, config.timeout);
    EXPECT_EQ(TestColor::green, config.color);
    EXPECT_EQ((std::vector<std::string>{"a", "b"}), config.names);
    EXPECT_EQ(AllowList::all(), config.allowed);
    EXPECT_EQ("hello", config.text);
    EXPECT_EQ(5, config.untouched);  // not a field: fill() leaves it alone
}

TEST_F(ConfigTable, DefaultsWithoutSources) {
    TestConfig config = test_table().defaults();
    EXPECT_EQ(65536u, config.size);
    EXPECT_EQ("hello", config.text);
}

TEST_F(ConfigTable, EnvironmentOverridesDefault) {
    ScopedEnv size("LOOM_CFGTEST_SIZE", "1m");
    ScopedEnv flag("LOOM_CFGTEST_FLAG", "yes");
    ScopedEnv text("LOOM_CFGTEST_TEXT", "");
    TestConfig config;
    ASSERT_EQ(Status::ok, fill(test_table(), config));
    EXPECT_EQ(1u << 20, config.size);
    EXPECT_TRUE(config.flag);
    EXPECT_EQ("", config.text);  // set to empty is set
    EXPECT_EQ(20s, config.timeout);
}

TEST_F(ConfigTable, FileOverridesDefault) {
    TempFile file("# test\nCFGTEST_SIZE = 2m\nloom_cfgtest_count=7\n[other]\nLOOM_CFGTEST_COLOR = blue\n");
    ScopedEnv path("LOOM_CONFIG_FILE", file.path());
    TestConfig config;
    ASSERT_EQ(Status::ok, fill(test_table(), config));
    EXPECT_EQ(2u << 20, config.size);
    EXPECT_EQ(7, config.count);
    EXPECT_EQ(TestColor::blue, config.color);
    EXPECT_EQ("hello", config.text);
}

TEST_F(ConfigTable, EnvironmentOverridesFile) {
    TempFile file("CFGTEST_SIZE = 2m\nCFGTEST_COUNT = 7\n");
    ScopedEnv path("LOOM_CONFIG_FILE", file.path());
    ScopedEnv size("LOOM_CFGTEST_SIZE", "3m");
    TestConfig config;
    ASSERT_EQ(Status::ok, fill(test_table(), config));
    EXPECT_EQ(3u << 20, config.size);
    EXPECT_EQ(7, config.count);  // the file still sets what the environment does not
}

TEST_F(ConfigTable, OverridesWinOverEverything) {
    TempFile file("CFGTEST_SIZE = 2m\n");
    ScopedEnv path("LOOM_CONFIG_FILE", file.path());
    ScopedEnv size("LOOM_CFGTEST_SIZE", "3m");
    ScopedEnv count("LOOM_CFGTEST_COUNT", "1");
    TestConfig config;
    ASSERT_EQ(
        Status::ok,
        fill(test_table(), config,
             {{"cfgtest_size", "4k"}, {"LOOM_CFGTEST_COLOR", "red"}, {"OTHER_TABLE_VAR", "ignored here"}}));
    EXPECT_EQ(4096u, config.size);
    EXPECT_EQ(TestColor::red, config.color);
    EXPECT_EQ(1, config.count);
}

TEST_F(ConfigTable, OverridesCanNameTheConfigFile) {
    TempFile file("CFGTEST_COUNT = 8\n");
    TempFile other("CFGTEST_COUNT = 9\n");
    ScopedEnv path("LOOM_CONFIG_FILE", other.path());
    TestConfig config;
    ASSERT_EQ(Status::ok, fill(test_table(), config, {{"CONFIG_FILE", file.path()}}));
    EXPECT_EQ(8, config.count);
    ASSERT_EQ(Status::ok, fill(test_table(), config, {{"CONFIG_FILE", ""}}));  // empty: no file
    EXPECT_EQ(-3, config.count);
}

/** One bad value and the exact line a user must see. */
struct BadValue {
    const char* variable;
    const char* value;
    const char* message;
};

class ConfigTableBadValue : public ConfigTable, public testing::WithParamInterface<BadValue> {};

TEST_P(ConfigTableBadValue, FailsWithOneLineNamingVariableValueAndSyntax) {
    const BadValue& bad = GetParam();
    ScopedEnv good("LOOM_CFGTEST_TEXT", "good value");  // must not stick when another value is bad
    ScopedEnv env(bad.variable, bad.value);
    LogCapture capture;
    TestConfig config = sentinel();
    EXPECT_EQ(Status::invalid_config, fill(test_table(), config));
    EXPECT_EQ(1, capture.count(bad.message)) << capture.text();
    EXPECT_EQ(1, capture.count("LOOM_CFGTEST_")) << capture.text();
    EXPECT_EQ(1, capture.count("config ERROR")) << capture.text();
    EXPECT_EQ("sentinel", config.text);  // nothing partially applied
    EXPECT_EQ(1u, config.size);
}

INSTANTIATE_TEST_SUITE_P(
    EveryKind, ConfigTableBadValue,
    testing::Values(
        BadValue{
            "LOOM_CFGTEST_FLAG", "maybe",
            "LOOM_CFGTEST_FLAG=maybe: invalid boolean (expected yes or no; also y/n, on/off, true/false, "
            "1/0)"},
        BadValue{"LOOM_CFGTEST_MODE", "sometimes",
                 "LOOM_CFGTEST_MODE=sometimes: invalid ternary value (expected yes, no, try or auto)"},
        BadValue{"LOOM_CFGTEST_COUNT", "ten",
                 "LOOM_CFGTEST_COUNT=ten: invalid integer (expected an integer from -10 to 10)"},
        BadValue{"LOOM_CFGTEST_COUNT", "11",
                 "LOOM_CFGTEST_COUNT=11: integer out of range (expected an integer from -10 to 10)"},
        BadValue{"LOOM_CFGTEST_LIMIT", "-1",
                 "LOOM_CFGTEST_LIMIT=-1: integer out of range (expected a non-negative integer, or inf)"},
        BadValue{"LOOM_CFGTEST_LIMIT", "4294967295",
                 "LOOM_CFGTEST_LIMIT=4294967295: 4294967295 is reserved for inf (expected a non-negative "
                 "integer, or inf)"},
        BadValue{
            "LOOM_CFGTEST_SIZE", "12q",
            "LOOM_CFGTEST_SIZE=12q: invalid size (expected a number of bytes with an optional k, m, g or t "
            "suffix for KiB, MiB, GiB or TiB, e.g. 4096, 64k, 1.5m, or inf)"},
        BadValue{"LOOM_CFGTEST_SIZE", "0.3k",
                 "LOOM_CFGTEST_SIZE=0.3k: not a whole number of bytes (expected"},
        BadValue{"LOOM_CFGTEST_SIZE", "99999999t",
                 "LOOM_CFGTEST_SIZE=99999999t: size out of range (expected"},
        BadValue{
            "LOOM_CFGTEST_TIMEOUT", "20",
            "LOOM_CFGTEST_TIMEOUT=20: missing unit (expected a number with a unit: ns, us, ms, s or min, "
            "e.g. 300ns, 1.5us, 20s, or inf)"},
        BadValue{"LOOM_CFGTEST_TIMEOUT", "1m", "LOOM_CFGTEST_TIMEOUT=1m: invalid time (expected"},
        BadValue{"LOOM_CFGTEST_COLOR", "purple",
                 "LOOM_CFGTEST_COLOR=purple: invalid value (expected one of red, green or blue)"},
        BadValue{
            "LOOM_CFGTEST_NAMES", "a,,b",
            "LOOM_CFGTEST_NAMES=a,,b: empty name in the list (expected a comma-separated list of names)"},
        BadValue{"LOOM_CFGTEST_ALLOWED", "^all",
                 "LOOM_CFGTEST_ALLOWED=^all: 'all' stands alone (expected all, "},
        BadValue{"LOOM_CFGTEST_ALLOWED", "tcp,,rc", "LOOM_CFGTEST_ALLOWED=tcp,,rc: empty name in the list"}));

TEST_F(ConfigTable, BadValueInFileNamesFileAndLine) {
    TempFile file("# sizes\nCFGTEST_SIZE = 12q\n");
    ScopedEnv path("LOOM_CONFIG_FILE", file.path());
    LogCapture capture;
    TestConfig config;
    EXPECT_EQ(Status::invalid_config, fill(test_table(), config));
    EXPECT_EQ(1, capture.count("LOOM_CFGTEST_SIZE=12q (in " + file.path() + ":2): invalid size (expected"))
        << capture.text();
}

TEST_F(ConfigTable, EnvironmentHidesBadFileValue) {
    TempFile file("CFGTEST_SIZE = 12q\n");
    ScopedEnv path("LOOM_CONFIG_FILE", file.path());
    ScopedEnv size("LOOM_CFGTEST_SIZE", "8k");
    TestConfig config;
    ASSERT_EQ(Status::ok, fill(test_table(), config));
    EXPECT_EQ(8192u, config.size);
}

TEST_F(ConfigTable, BadOverrideIsNamed) {
    LogCapture capture;
    TestConfig config;
    EXPECT_EQ(Status::invalid_config, fill(test_table(), config, {{"CFGTEST_MODE", "often"}}));
    EXPECT_EQ(1, capture.count("LOOM_CFGTEST_MODE=often (set by the application): invalid ternary value"))
        << capture.text();
}

TEST_F(ConfigTable, RepeatedProblemIsLoggedOnce) {
    ScopedEnv size("LOOM_CFGTEST_SIZE", "13q");
    LogCapture capture;
    TestConfig config;
    EXPECT_EQ(Status::invalid_config, fill(test_table(), config));
    EXPECT_EQ(Status::invalid_config, fill(test_table(), config));  // still fails, quietly
    EXPECT_EQ(1, capture.count("LOOM_CFGTEST_SIZE=13q"));
}

TEST_F(ConfigTable, MissingFileIsAnError) {
    std::string path = "/nonexistent-loomtest-dir/loom.conf";
    ScopedEnv env("LOOM_CONFIG_FILE", path);
    LogCapture capture;
    TestConfig config = sentinel();
    EXPECT_EQ(Status::invalid_config, fill(test_table(), config));
    EXPECT_EQ(1,
              capture.count("configuration file " + path + " (LOOM_CONFIG_FILE): cannot open: No such file"))
        << capture.text();
    EXPECT_EQ("sentinel", config.text);
}

TEST_F(ConfigTable, GarbledFileIsAnErrorNamingTheLine) {
    TempFile file("CFGTEST_SIZE = 1k\n\nthis is not a setting\nCFGTEST_COUNT = 2\n");
    ScopedEnv env("LOOM_CONFIG_FILE", file.path());
    LogCapture capture;
    TestConfig config = sentinel();
    EXPECT_EQ(Status::invalid_config, fill(test_table(), config));
    EXPECT_EQ(1, capture.count("configuration file " + file.path() +
                               ":3: expected KEY = value, found 'this is not a setting'"))
        << capture.text();
    EXPECT_EQ(1u, config.size);  // the good line before it was not applied either
}

TEST_F(ConfigTable, EmptyConfigFileVariableMeansNoFile) {
    ScopedEnv env("LOOM_CONFIG_FILE", "");
    TestConfig config;
    EXPECT_EQ(Status::ok, fill(test_table(), config));
}

TEST_F(ConfigTable, CurrentValuesPrintCanonically) {
    ScopedEnv size("LOOM_CFGTEST_SIZE", "1048576");
    ScopedEnv timeout("LOOM_CFGTEST_TIMEOUT", "1500ms");
    Result<std::vector<std::string>> values = test_table().current_values({{"CFGTEST_ALLOWED", "^ rc , ud"}});
    ASSERT_TRUE(values.ok());
    std::vector<std::string> expected = {"no",     "auto",  "-3",  "inf",    "1m",
                                         "1500ms", "green", "a,b", "^rc,ud", "hello"};
    EXPECT_EQ(expected, *values);
}

TEST_F(ConfigTable, CurrentValuesReportBadConfiguration) {
    ScopedEnv size("LOOM_CFGTEST_SIZE", "14q");
    LogCapture capture;
    EXPECT_EQ(Status::invalid_config, test_table().current_values({}).status());
    EXPECT_EQ(1, capture.count("LOOM_CFGTEST_SIZE=14q"));
}

TEST_F(ConfigTable, DescribesItsFields) {
    const TableBase& table = test_table();
    EXPECT_EQ("CFGTEST_", table.prefix());
    EXPECT_EQ("Config test table", table.title());
    ASSERT_EQ(10u, table.size());
    EXPECT_EQ("LOOM_CFGTEST_SIZE", table.variable_name(4));
    EXPECT_EQ("SIZE", table.field_info(4).name);
    EXPECT_EQ("64k", table.field_info(4).default_value);
    EXPECT_EQ("size", table.field_info(4).what);
    EXPECT_EQ(SizeParser().allow_inf().syntax(), table.field_info(4).syntax);
    EXPECT_EQ(std::optional<std::size_t>(4), table.find("LOOM_CFGTEST_SIZE"));
    EXPECT_EQ(std::optional<std::size_t>(4), table.find("cfgtest_size"));
    EXPECT_EQ(std::nullopt, table.find("SIZE"));
    EXPECT_EQ(std::nullopt, table.find("LOOM_CFGTEST_NOPE"));
}

TEST_F(ConfigTable, CheckValueHasNoSideEffects) {
    std::string canonical, reason;
    EXPECT_EQ(Status::ok, test_table().check_value(4, "2048", canonical, reason));
    EXPECT_EQ("2k", canonical);
    EXPECT_EQ(Status::invalid_config, test_table().check_value(4, "0.1k", canonical, reason));
    EXPECT_EQ("not a whole number of bytes", reason);
    EXPECT_EQ(Status::out_of_range, test_table().check_value(2, "99", canonical, reason));
}

// --- embedded tables -------------------------------------------------------------------------

struct InnerConfig {
    unsigned depth = 0;
    bool fast = false;
};

struct OuterConfig {
    InnerConfig inner;
    std::size_t size = 0;
};

const Table<InnerConfig>& inner_table() {
    static const Table<InnerConfig> table(
        "INNER_", "Inner", "Shared fields.",
        {
            field("DEPTH", "4", "Depth.", &InnerConfig::depth, IntParser<unsigned>()),
            field("FAST", "y", "Fast.", &InnerConfig::fast, BoolParser()),
        });
    return table;
}

TEST_F(ConfigTable, EmbeddedTableFieldsTakeTheOuterPrefix) {
    Table<OuterConfig> outer("CFGEMBED_", "Outer", "With embedded fields.",
                             {
                                 field("SIZE", "1k", "Size.", &OuterConfig::size, SizeParser()),
                                 embed(&OuterConfig::inner, inner_table()),
                             });
    ASSERT_EQ(3u, outer.size());
    EXPECT_EQ("LOOM_CFGEMBED_DEPTH", outer.variable_name(1));
    ScopedEnv depth("LOOM_CFGEMBED_DEPTH", "9");
    ScopedEnv ignored("LOOM_INNER_DEPTH", "7");  // the inner table's own prefix plays no part
    OuterConfig config;
    ASSERT_EQ(Status::ok, fill(outer, config));
    EXPECT_EQ(9u, config.inner.depth);
    EXPECT_TRUE(config.inner.fast);
    EXPECT_EQ(1024u, config.size);
    auto values = outer.current_values({});
    ASSERT_TRUE(values.ok());
    EXPECT_EQ((std::vector<std::string>{"1k", "9", "yes"}), *values);
}

// --- programming errors in a table are fatal -------------------------------------------------

using ConfigTableDeathTest = ConfigTable;

TEST_F(ConfigTableDeathTest, BadDefaultIsFatal) {
    auto make = [] {
        Table<OuterConfig> table("CFGBAD_", "Bad", "",
                                 {field("SIZE", "lots", "Size.", &OuterConfig::size, SizeParser())});
    };
    EXPECT_DEATH(make(), "the default 'lots' of LOOM_CFGBAD_SIZE does not parse");
}

TEST_F(ConfigTableDeathTest, DuplicateFieldIsFatal) {
    auto make = [] {
        Table<OuterConfig> table("CFGBAD_", "Bad", "",
                                 {field("SIZE", "1", "Size.", &OuterConfig::size, SizeParser()),
                                  field("SIZE", "2", "Again.", &OuterConfig::size, SizeParser())});
    };
    EXPECT_DEATH(make(), "field LOOM_CFGBAD_SIZE is listed twice");
}

TEST_F(ConfigTableDeathTest, BadNamesAreFatal) {
    auto bad_prefix = [] {
        Table<OuterConfig> table("cfgbad", "Bad", "",
                                 {field("SIZE", "1", "", &OuterConfig::size, SizeParser())});
    };
    EXPECT_DEATH(bad_prefix(), "invalid prefix 'cfgbad'");
    auto bad_name = [] {
        Table<OuterConfig> table("CFGBAD_", "Bad", "",
                                 {field("Size", "1", "", &OuterConfig::size, SizeParser())});
    };
    EXPECT_DEATH(bad_name(), "invalid field name 'Size'");
}

}  // namespace
}  // namespace loom::ucs::config
