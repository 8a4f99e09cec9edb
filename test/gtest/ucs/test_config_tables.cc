#include "ucs/test_config_tables.h"

#include "ucs/config/registry.h"

namespace loom::ucs::config {

namespace {

// Registered when the test binary loads, like a library's table.
const RegisteredTable<TestConfig> g_test_table{
    "CFGTEST_",
    "Config test table",
    "Fields of every kind, for the configuration tests.",
    {
        field("FLAG", "no", "A boolean.", &TestConfig::flag, BoolParser()),
        field("MODE", "auto", "A ternary value.", &TestConfig::mode, TernaryParser()),
        field("COUNT", "-3", "A small signed integer.", &TestConfig::count, IntParser<int>().range(-10, 10)),
        field("LIMIT", "inf", "An unsigned integer or inf.", &TestConfig::limit,
              IntParser<unsigned>().allow_inf()),
        field("SIZE", "64k", "A size.", &TestConfig::size, SizeParser().allow_inf()),
        field("TIMEOUT", "20s", "A time.", &TestConfig::timeout, TimeParser().allow_inf()),
        field("COLOR", "green", "An enum.", &TestConfig::color,
              EnumParser<TestColor>(
                  {{"red", TestColor::red}, {"green", TestColor::green}, {"blue", TestColor::blue}})),
        field("NAMES", "a,b", "A list.", &TestConfig::names, StringListParser()),
        field("ALLOWED", "all", "An allow-list.", &TestConfig::allowed, AllowListParser()),
        field("TEXT", "hello", "A string.", &TestConfig::text, StringParser()),
    }};

}  // namespace

const Table<TestConfig>& test_table() {
    return g_test_table;
}

}  // namespace loom::ucs::config
