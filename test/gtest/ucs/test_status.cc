#include "ucs/type/result.h"
#include "ucs/type/status.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace loom {
namespace {

TEST(Status, NumericValuesAreFixed) {
    // These values cross the C API and appear in logs: they must never change.
    EXPECT_EQ(0, static_cast<int>(Status::ok));
    EXPECT_EQ(1, static_cast<int>(Status::in_progress));
    EXPECT_EQ(-1, static_cast<int>(Status::no_resource));
    EXPECT_EQ(-3, static_cast<int>(Status::invalid_param));
    EXPECT_EQ(-7, static_cast<int>(Status::timed_out));
    EXPECT_EQ(-40, static_cast<int>(Status::unreachable));
    EXPECT_EQ(-42, static_cast<int>(Status::connection_reset));
    EXPECT_EQ(-43, static_cast<int>(Status::endpoint_failure));
    EXPECT_EQ(-70, static_cast<int>(Status::message_truncated));
    EXPECT_EQ(-6, static_cast<int>(Status::canceled));
}

TEST(Status, Classification) {
    EXPECT_FALSE(is_error(Status::ok));
    EXPECT_FALSE(is_error(Status::in_progress));
    EXPECT_TRUE(is_ok_or_in_progress(Status::in_progress));
    EXPECT_TRUE(is_error(Status::no_resource));
    EXPECT_TRUE(is_peer_error(Status::connection_reset));
    EXPECT_TRUE(is_peer_error(Status::endpoint_failure));
    EXPECT_FALSE(is_peer_error(Status::invalid_param));
    EXPECT_FALSE(is_peer_error(Status::message_truncated));
}

TEST(Status, EveryKnownCodeHasAUniqueName) {
    std::set<std::string> names;
    int known = 0;
    for (int code = -128; code <= 127; ++code) {
        std::string name(status_string(code));
        ASSERT_FALSE(name.empty());
        if (name.rfind("unknown status", 0) == 0) continue;
        ++known;
        EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name << " for " << code;
        EXPECT_EQ(name, to_string(static_cast<Status>(code)));
    }
    EXPECT_GE(known, 30);
}

TEST(Status, UnknownCodeIsNamedWithItsValue) {
    EXPECT_EQ("unknown status (-99)", status_string(-99));
    EXPECT_EQ("unknown status (42)", to_string(static_cast<Status>(42)));
}

TEST(Status, NamesAreReadable) {
    EXPECT_EQ("success", to_string(Status::ok));
    EXPECT_EQ("no resource", to_string(Status::no_resource));
    EXPECT_EQ("message truncated", to_string(Status::message_truncated));
}

TEST(Result, HoldsValue) {
    Result<std::string> r(std::string("abc"));
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(static_cast<bool>(r));
    EXPECT_EQ(Status::ok, r.status());
    EXPECT_EQ("abc", *r);
    EXPECT_EQ(3u, r->size());
    std::string moved = std::move(r).value();
    EXPECT_EQ("abc", moved);
}

TEST(Result, HoldsError) {
    Result<int> r(Status::no_device);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(Status::no_device, r.status());
    EXPECT_EQ(7, r.value_or(7));
}

Result<int> parse_positive(int x) {
    if (x <= 0) return Status::invalid_param;
    return x;
}

TEST(Result, ReturnsFromFunctions) {
    EXPECT_EQ(5, *parse_positive(5));
    EXPECT_EQ(Status::invalid_param, parse_positive(-1).status());
}

}  // namespace
}  // namespace loom
