#include "ucs/test_config_tables.h"

#include "ucs/config/allow_list.h"
#include "ucs/config/parser.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace loom::ucs::config {
namespace {

using namespace std::chrono_literals;

/** The outcome of one parse: status, value and reason. */
template <typename T>
struct Parsed {
    Status status;
    T value;
    std::string reason;
};

/** Parses @p text into a value pre-set to @p initial, to show failures leave it alone. */
template <typename P>
Parsed<typename P::value_type> parse(const P& parser, std::string_view text,
                                     typename P::value_type initial = typename P::value_type{}) {
    Parsed<typename P::value_type> result{Status::ok, initial, ""};
    result.status = parser.parse(text, result.value, result.reason);
    return result;
}

/** Parses @p text, which must be valid, prints the value and parses the print again. */
template <typename P>
void expect_round_trip(const P& parser, std::string_view text, std::string_view expected_print) {
    auto first = parse(parser, text);
    ASSERT_EQ(Status::ok, first.status) << text;
    std::string printed = parser.print(first.value);
    EXPECT_EQ(expected_print, printed) << text;
    auto second = parse(parser, printed);
    ASSERT_EQ(Status::ok, second.status) << printed;
    EXPECT_EQ(first.value, second.value) << text << " -> " << printed;
}

// --- bool ------------------------------------------------------------------------------------

TEST(ConfigParser, BoolAcceptsEverySpelling) {
    BoolParser parser;
    for (const char* text : {"y", "yes", "Y", "YES", "on", "On", "true", "TRUE", "1", " yes\t"}) {
        auto r = parse(parser, text, false);
        EXPECT_EQ(Status::ok, r.status) << text;
        EXPECT_TRUE(r.value) << text;
    }
    for (const char* text : {"n", "no", "NO", "off", "false", "False", "0", "  0 "}) {
        auto r = parse(parser, text, true);
        EXPECT_EQ(Status::ok, r.status) << text;
        EXPECT_FALSE(r.value) << text;
    }
}

TEST(ConfigParser, BoolRejectsOtherText) {
    BoolParser parser;
    for (const char* text : {"", "maybe", "2", "yess", "tru", "-1", "o", "yes no"}) {
        auto r = parse(parser, text, true);
        EXPECT_EQ(Status::invalid_config, r.status) << text;
        EXPECT_TRUE(r.value) << "a failed parse changed the value: " << text;
    }
}

TEST(ConfigParser, BoolPrintsYesNo) {
    BoolParser parser;
    expect_round_trip(parser, "on", "yes");
    expect_round_trip(parser, "0", "no");
    EXPECT_EQ("boolean", parser.what());
    EXPECT_NE(std::string::npos, parser.syntax().find("on/off"));
}

// --- ternary -------------------------------------------------------------------------------

TEST(ConfigParser, Ternary) {
    TernaryParser parser;
    EXPECT_EQ(Ternary::yes, parse(parser, "yes").value);
    EXPECT_EQ(Ternary::yes, parse(parser, "ON").value);
    EXPECT_EQ(Ternary::no, parse(parser, "n").value);
    EXPECT_EQ(Ternary::try_, parse(parser, "Try").value);
    EXPECT_EQ(Ternary::auto_, parse(parser, " auto ").value);
    EXPECT_EQ(Status::invalid_config, parse(parser, "sometimes").status);
    EXPECT_EQ(Status::invalid_config, parse(parser, "").status);
    expect_round_trip(parser, "true", "yes");
    expect_round_trip(parser, "try", "try");
    expect_round_trip(parser, "auto", "auto");
    EXPECT_EQ("yes, no, try or auto", parser.syntax());
}

TEST(ConfigParser, TernaryWithoutAuto) {
    TernaryParser parser = TernaryParser().disallow_auto();
    EXPECT_EQ(Status::invalid_config, parse(parser, "auto").status);
    EXPECT_EQ(Ternary::try_, parse(parser, "try").value);
    EXPECT_EQ("yes, no or try", parser.syntax());
    EXPECT_EQ("auto", to_string(Ternary::auto_));
}

// --- integers ----------------------------------------------------------------------------------

TEST(ConfigParser, SignedIntegers) {
    IntParser<int> parser;
    EXPECT_EQ(42, parse(parser, "42").value);
    EXPECT_EQ(-7, parse(parser, "-7").value);
    EXPECT_EQ(5, parse(parser, "+5").value);
    EXPECT_EQ(31, parse(parser, "0x1f").value);
    EXPECT_EQ(255, parse(parser, " 0XFF ").value);
    EXPECT_EQ(-2147483648, parse(parser, "-2147483648").value);
    for (const char* text : {"", "abc", "12abc", "1.5", "0x", "--1", "+-1", "1 2", "0xg", "inf", "auto"}) {
        auto r = parse(parser, text, 9);
        EXPECT_EQ(Status::invalid_config, r.status) << text;
        EXPECT_EQ(9, r.value) << text;
    }
    for (const char* text : {"2147483648", "-2147483649", "99999999999999999999", "-99999999999999999999"}) {
        EXPECT_EQ(Status::out_of_range, parse(parser, text).status) << text;
    }
    EXPECT_EQ(Status::out_of_range, parse(IntParser<std::int8_t>(), "128").status);
    EXPECT_EQ(-128, parse(IntParser<std::int8_t>(), "-128").value);
    EXPECT_EQ(std::numeric_limits<std::int64_t>::min(),
              parse(IntParser<std::int64_t>(), "-9223372036854775808").value);
    expect_round_trip(parser, "0x10", "16");
    expect_round_trip(parser, "-3", "-3");
    EXPECT_EQ("an integer", parser.syntax());
}

TEST(ConfigParser, UnsignedIntegers) {
    IntParser<unsigned> parser;
    EXPECT_EQ(7u, parse(parser, "7").value);
    EXPECT_EQ(0u, parse(parser, "-0").value);
    EXPECT_EQ(4294967295u, parse(parser, "4294967295").value);
    EXPECT_EQ(Status::out_of_range, parse(parser, "-1").status);
    EXPECT_EQ(Status::out_of_range, parse(parser, "4294967296").status);
    EXPECT_EQ(Status::invalid_config, parse(parser, "seven").status);
    EXPECT_EQ(UINT64_MAX, parse(IntParser<std::uint64_t>(), "18446744073709551615").value);
    EXPECT_EQ(Status::out_of_range, parse(IntParser<std::uint64_t>(), "18446744073709551616").status);
    EXPECT_EQ("a non-negative integer", parser.syntax());
}

TEST(ConfigParser, IntegerRange) {
    auto parser = IntParser<int>().range(-10, 10);
    EXPECT_EQ(-10, parse(parser, "-10").value);
    EXPECT_EQ(10, parse(parser, "10").value);
    EXPECT_EQ(Status::out_of_range, parse(parser, "11").status);
    EXPECT_EQ(Status::out_of_range, parse(parser, "-11").status);
    EXPECT_EQ("an integer from -10 to 10", parser.syntax());
}

TEST(ConfigParser, IntegerInfAndAuto) {
    auto parser = IntParser<unsigned>().allow_inf().allow_auto();
    EXPECT_EQ(kInf<unsigned>, parse(parser, "inf").value);
    EXPECT_EQ(kInf<unsigned>, parse(parser, "INF").value);
    EXPECT_EQ(kAuto<unsigned>, parse(parser, "auto").value);
    EXPECT_EQ(12u, parse(parser, "12").value);
    // The special values are not writable as numbers, or they would print back as words.
    auto reserved = parse(parser, std::to_string(kInf<unsigned>));
    EXPECT_EQ(Status::out_of_range, reserved.status);
    EXPECT_NE(std::string::npos, reserved.reason.find("reserved for inf"));
    EXPECT_EQ(Status::out_of_range, parse(parser, std::to_string(kAuto<unsigned>)).status);
    expect_round_trip(parser, "inf", "inf");
    expect_round_trip(parser, "auto", "auto");
    expect_round_trip(parser, "100", "100");
    EXPECT_EQ("a non-negative integer, inf or auto", parser.syntax());
    EXPECT_EQ("an integer from 1 to 8, or inf", IntParser<int>().range(1, 8).allow_inf().syntax());
    EXPECT_EQ("an integer, or auto", IntParser<int>().allow_auto().syntax());
    // Without allow_inf, the largest number is an ordinary value.
    expect_round_trip(IntParser<unsigned>(), "4294967295", "4294967295");
}

// --- sizes -------------------------------------------------------------------------------------

TEST(ConfigParser, SizesWithSuffixes) {
    SizeParser parser;
    EXPECT_EQ(0u, parse(parser, "0").value);
    EXPECT_EQ(4096u, parse(parser, "4096").value);
    EXPECT_EQ(100u, parse(parser, "100b").value);
    EXPECT_EQ(65536u, parse(parser, "64k").value);
    EXPECT_EQ(65536u, parse(parser, "64K").value);
    EXPECT_EQ(65536u, parse(parser, "64kb").value);
    EXPECT_EQ(65536u, parse(parser, "64KB").value);
    EXPECT_EQ(65536u, parse(parser, " 64 k ").value);
    EXPECT_EQ(1u << 20, parse(parser, "1m").value);
    EXPECT_EQ(2ull << 30, parse(parser, "2g").value);
    EXPECT_EQ(3ull << 40, parse(parser, "3t").value);
    EXPECT_EQ(1572864u, parse(parser, "1.5m").value);
    EXPECT_EQ(512u, parse(parser, "0.5k").value);
    EXPECT_EQ(1024u, parse(parser, "1.000k").value);
}

TEST(ConfigParser, SizesRejectBadText) {
    auto parser = SizeParser();
    for (const char* text :
         {"", "12q", "k", "-1k", "1.k", ".5k", "1kk", "1bb", "1 k b", "0x10", "inf", "auto", "1e3", "1,5k"}) {
        auto r = parse(parser, text, 7);
        EXPECT_EQ(Status::invalid_config, r.status) << text;
        EXPECT_EQ(7u, r.value) << text;
    }
    auto fraction = parse(parser, "0.3k");
    EXPECT_EQ(Status::invalid_config, fraction.status);
    EXPECT_EQ("not a whole number of bytes", fraction.reason);
    EXPECT_EQ(Status::invalid_config, parse(parser, "1.5").status);
    EXPECT_EQ(Status::invalid_config, parse(parser, "1.0000000000000000001k").status);
    EXPECT_EQ(Status::out_of_range, parse(parser, "16777216t").status);  // 2^64
    EXPECT_EQ(Status::out_of_range, parse(parser, "18446744073709551616").status);
    EXPECT_EQ(Status::out_of_range, parse(parser, "99999999999999999999999k").status);
    EXPECT_EQ(UINT64_MAX, parse(parser, "18446744073709551615").value);
}

TEST(ConfigParser, SizesPrintCanonically) {
    auto parser = SizeParser().allow_inf().allow_auto();
    expect_round_trip(parser, "65536", "64k");
    expect_round_trip(parser, "1.5m", "1536k");
    expect_round_trip(parser, "1024m", "1g");
    expect_round_trip(parser, "1000", "1000");
    expect_round_trip(parser, "0", "0");
    expect_round_trip(parser, "2t", "2t");
    expect_round_trip(parser, "inf", "inf");
    expect_round_trip(parser, "auto", "auto");
    expect_round_trip(parser, "18446744073709551613", "18446744073709551613");
    EXPECT_EQ(kSizeInf, parse(parser, "Inf").value);
    EXPECT_EQ(kSizeAuto, parse(parser, "AUTO").value);
    EXPECT_EQ(Status::out_of_range, parse(parser, "18446744073709551615").status);  // that is inf
    EXPECT_NE(std::string::npos, parser.syntax().find("64k"));
    EXPECT_TRUE(parser.syntax().ends_with(", inf or auto"));
    EXPECT_EQ("size", parser.what());
}

// --- times -------------------------------------------------------------------------------------

TEST(ConfigParser, TimesWithUnits) {
    TimeParser parser;
    EXPECT_EQ(300ns, parse(parser, "300ns").value);
    EXPECT_EQ(1500ns, parse(parser, "1.5us").value);
    EXPECT_EQ(2ms, parse(parser, "2ms").value);
    EXPECT_EQ(20s, parse(parser, "20s").value);
    EXPECT_EQ(1500ms, parse(parser, "1.5s").value);
    EXPECT_EQ(2min, parse(parser, "2min").value);
    EXPECT_EQ(5ms, parse(parser, " 5 MS ").value);
    EXPECT_EQ(0ns, parse(parser, "0").value);
    EXPECT_EQ(0ns, parse(parser, "0.0").value);
    EXPECT_EQ(0ns, parse(parser, "0s").value);
}

TEST(ConfigParser, TimesRejectBadText) {
    TimeParser parser;
    auto bare = parse(parser, "20", 1s);
    EXPECT_EQ(Status::invalid_config, bare.status);
    EXPECT_EQ("missing unit", bare.reason);
    EXPECT_EQ(1s, bare.value);
    for (const char* text : {"", "1m", "1h", "-1s", "1e3s", "s", "inf", "1.s", "1 2s", "20 seconds"}) {
        EXPECT_EQ(Status::invalid_config, parse(parser, text).status) << text;
    }
    auto fraction = parse(parser, "0.5ns");
    EXPECT_EQ(Status::invalid_config, fraction.status);
    EXPECT_EQ("not a whole number of nanoseconds", fraction.reason);
    EXPECT_EQ(Status::out_of_range, parse(parser, "300000000000min").status);
    EXPECT_EQ(Status::out_of_range, parse(parser, "9223372036854775808ns").status);
    EXPECT_EQ(std::chrono::nanoseconds::max(), parse(parser, "9223372036854775807ns").value);
}

TEST(ConfigParser, TimesPrintCanonically) {
    auto parser = TimeParser().allow_inf();
    expect_round_trip(parser, "1.5us", "1500ns");
    expect_round_trip(parser, "2000ms", "2s");
    expect_round_trip(parser, "120s", "2min");
    expect_round_trip(parser, "90s", "90s");
    expect_round_trip(parser, "0", "0s");
    expect_round_trip(parser, "1.5ms", "1500us");
    expect_round_trip(parser, "inf", "inf");
    EXPECT_EQ(kTimeInf, parse(parser, "INF").value);
    EXPECT_EQ(Status::out_of_range, parse(parser, "9223372036854775807ns").status);  // that is inf
    EXPECT_TRUE(parser.syntax().ends_with(", or inf"));
    EXPECT_NE(std::string::npos, parser.syntax().find("ns, us, ms, s or min"));
}

// --- enums -------------------------------------------------------------------------------------

enum class Color { red, green, blue };

TEST(ConfigParser, Enums) {
    EnumParser<Color> parser(
        {{"red", Color::red}, {"green", Color::green}, {"blue", Color::blue}, {"azure", Color::blue}});
    EXPECT_EQ(Color::green, parse(parser, "green").value);
    EXPECT_EQ(Color::red, parse(parser, " RED ").value);
    EXPECT_EQ(Color::blue, parse(parser, "azure").value);
    auto bad = parse(parser, "purple", Color::green);
    EXPECT_EQ(Status::invalid_config, bad.status);
    EXPECT_EQ(Color::green, bad.value);
    EXPECT_EQ(Status::invalid_config, parse(parser, "").status);
    expect_round_trip(parser, "azure", "blue");  // an alias prints as the first name
    EXPECT_EQ("one of red, green, blue or azure", parser.syntax());
    EXPECT_EQ("<invalid 9>", parser.print(static_cast<Color>(9)));
}

// --- lists -------------------------------------------------------------------------------------

TEST(ConfigParser, StringLists) {
    StringListParser parser;
    EXPECT_EQ((std::vector<std::string>{"a", "b", "c"}), parse(parser, "a,b, c ").value);
    EXPECT_EQ(std::vector<std::string>{}, parse(parser, "").value);
    EXPECT_EQ(std::vector<std::string>{}, parse(parser, "  ").value);
    EXPECT_EQ(std::vector<std::string>{"one"}, parse(parser, "one").value);
    for (const char* text : {"a,,b", "a,", ",a", ","}) {
        auto r = parse(parser, text);
        EXPECT_EQ(Status::invalid_config, r.status) << text;
        EXPECT_EQ("empty name in the list", r.reason) << text;
    }
    expect_round_trip(parser, " x , y ", "x,y");
    expect_round_trip(parser, "", "");
    EXPECT_EQ("a comma-separated list of names", parser.syntax());
}

TEST(ConfigParser, StringListsOfKnownNames) {
    auto parser = StringListParser().restrict_to({"tcp", "shm"});
    EXPECT_EQ((std::vector<std::string>{"shm", "tcp"}), parse(parser, "SHM,Tcp").value);
    auto bad = parse(parser, "tcp,rc");
    EXPECT_EQ(Status::invalid_config, bad.status);
    EXPECT_EQ("unknown name 'rc'", bad.reason);
    EXPECT_EQ("a comma-separated list of names out of tcp, shm", parser.syntax());
}

TEST(ConfigParser, AllowLists) {
    AllowListParser parser;
    AllowList all = parse(parser, "all").value;
    EXPECT_EQ(AllowList::Mode::all, all.mode());
    EXPECT_TRUE(all.allows("anything"));
    EXPECT_EQ(AllowList::Mode::all, parse(parser, " ALL ").value.mode());

    AllowList only = parse(parser, "tcp,shm").value;
    EXPECT_EQ(AllowList::Mode::only, only.mode());
    EXPECT_TRUE(only.allows("tcp"));
    EXPECT_TRUE(only.allows("SHM"));
    EXPECT_FALSE(only.allows("rc"));

    AllowList except = parse(parser, "^tcp,shm").value;
    EXPECT_EQ(AllowList::Mode::all_except, except.mode());
    EXPECT_FALSE(except.allows("tcp"));
    EXPECT_FALSE(except.allows("shm"));
    EXPECT_TRUE(except.allows("rc"));
    EXPECT_TRUE(except.allows("self"));

    AllowList none = parse(parser, "").value;
    EXPECT_EQ(AllowList::Mode::only, none.mode());
    EXPECT_FALSE(none.allows("tcp"));
    EXPECT_EQ(AllowList::Mode::all, parse(parser, "^").value.mode());  // all except nothing
}

TEST(ConfigParser, AllowListsRejectBadText) {
    AllowListParser parser;
    for (const char* text : {"all,tcp", "^all", "tcp,all", "^tcp,ALL"}) {
        auto r = parse(parser, text);
        EXPECT_EQ(Status::invalid_config, r.status) << text;
        EXPECT_EQ("'all' stands alone", r.reason) << text;
    }
    EXPECT_EQ(Status::invalid_config, parse(parser, "tcp,,shm").status);
    EXPECT_EQ(Status::invalid_config, parse(parser, "^,tcp").status);
    auto restricted = AllowListParser().restrict_to({"tcp", "shm"});
    EXPECT_EQ(Status::invalid_config, parse(restricted, "^rc").status);
    EXPECT_EQ("tcp", parse(restricted, "TCP").value.names().at(0));
}

TEST(ConfigParser, AllowListsPrintBack) {
    AllowListParser parser;
    expect_round_trip(parser, "all", "all");
    expect_round_trip(parser, "tcp, shm", "tcp,shm");
    expect_round_trip(parser, "^ tcp,shm,tcp", "^tcp,shm");  // duplicates dropped
    expect_round_trip(parser, "", "");
    EXPECT_NE(std::string::npos, parser.syntax().find("^ and a list"));
}

TEST(ConfigParser, AllowListValue) {
    EXPECT_EQ(AllowList::all(), AllowList());
    EXPECT_EQ(AllowList::all(), AllowList::all_except({}));
    EXPECT_EQ(AllowList::only({"a", "b"}), AllowList::only({"a", "b", "B"}));  // first spelling kept
    EXPECT_NE(AllowList::only({"a"}), AllowList::all_except({"a"}));
    EXPECT_EQ("^a", AllowList::all_except({"a"}).to_string());
    EXPECT_EQ("", AllowList::only({}).to_string());
}

// --- strings -----------------------------------------------------------------------------------

TEST(ConfigParser, Strings) {
    StringParser parser;
    EXPECT_EQ(" keep spaces ", parse(parser, " keep spaces ").value);
    EXPECT_EQ("", parse(parser, "").value);
    expect_round_trip(parser, "a,b=c", "a,b=c");
    EXPECT_EQ("any string", parser.syntax());
    EXPECT_EQ("string", parser.what());

    StringParser even("even length", "a string of even length",
                      [](std::string_view text) { return text.size() % 2 == 0; });
    EXPECT_EQ("ab", parse(even, "ab").value);
    auto bad = parse(even, "abc", "kept");
    EXPECT_EQ(Status::invalid_config, bad.status);
    EXPECT_EQ("kept", bad.value);
    EXPECT_EQ("even length", even.what());
    EXPECT_EQ("a string of even length", even.syntax());
}

static_assert(ValueParser<BoolParser> && ValueParser<TernaryParser> && ValueParser<IntParser<short>> &&
              ValueParser<SizeParser> && ValueParser<TimeParser> && ValueParser<EnumParser<Color>> &&
              ValueParser<StringListParser> && ValueParser<AllowListParser> && ValueParser<StringParser>);

}  // namespace
}  // namespace loom::ucs::config
