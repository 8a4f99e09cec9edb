/**
 * A registered configuration table with a field of every kind (prefix CFGTEST_),
 * shared by the configuration tests.
 */
#pragma once

#include "ucs/config/allow_list.h"
#include "ucs/config/parser.h"
#include "ucs/config/table.h"

#include <chrono>
#include <ostream>
#include <string>
#include <vector>

namespace loom::ucs::config {

enum class TestColor { red, green, blue };

struct TestConfig {
    bool flag = false;
    Ternary mode = Ternary::no;
    int count = 0;
    unsigned limit = 0;
    std::size_t size = 0;
    std::chrono::nanoseconds timeout{0};
    TestColor color = TestColor::red;
    std::vector<std::string> names;
    AllowList allowed;
    std::string text;
    int untouched = 77;  ///< not in the table
};

/** Shows allow-lists in gtest failure messages as their configuration text. */
inline void PrintTo(const AllowList& list, std::ostream* out) {
    *out << "'" << list.to_string() << "'";
}

/** The table: LOOM_CFGTEST_FLAG, _MODE, _COUNT, _LIMIT, _SIZE, _TIMEOUT, _COLOR, _NAMES, _ALLOWED, _TEXT. */
const Table<TestConfig>& test_table();

}  // namespace loom::ucs::config
