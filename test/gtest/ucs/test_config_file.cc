#include "common/test_helpers.h"

#include "ucs/config/config_file.h"

#include <gtest/gtest.h>

#include <string>

namespace loom::ucs::config {
namespace {

/** Parses @p text; on failure returns the error, on success "". */
std::string parse(std::string_view text, ConfigFile& file) {
    std::string error;
    Status status = ConfigFile::parse("test.conf", text, file, error);
    if (status == Status::ok) return "";
    EXPECT_EQ(Status::invalid_config, status);
    EXPECT_FALSE(error.empty());
    return error;
}

TEST(ConfigFile, ParsesSettingsCommentsAndSections) {
    ConfigFile file;
    ASSERT_EQ("", parse("# comment\n"
                        "; another comment\n"
                        "\n"
                        "   \t\n"
                        "[logging]\n"
                        "LOG_LEVEL = info\n"
                        "  loom_log_file=/tmp/x.log  \n"
                        "[ transports ]\n"
                        "tcp_port = 5000 # the port\n"
                        "TCP_NAME = a;b ; comment\n"
                        "EMPTY =\n"
                        "QUOTED = \"  has # and ; \"  # comment\n"
                        "EMPTY_QUOTED = \"\"\n",
                        file));
    ASSERT_EQ(7u, file.entries().size());
    EXPECT_EQ("LOOM_LOG_LEVEL", file.entries()[0].name);
    EXPECT_EQ("info", file.entries()[0].value);
    EXPECT_EQ(6, file.entries()[0].line);
    EXPECT_EQ("LOOM_LOG_FILE", file.entries()[1].name);
    EXPECT_EQ("/tmp/x.log", file.entries()[1].value);
    EXPECT_EQ("LOOM_TCP_PORT", file.entries()[2].name);
    EXPECT_EQ("5000", file.entries()[2].value);
    EXPECT_EQ(9, file.entries()[2].line);
    EXPECT_EQ("a;b", file.find("LOOM_TCP_NAME")->value);  // ; without a space before it is data
    EXPECT_EQ("", file.find("LOOM_EMPTY")->value);
    EXPECT_EQ("  has # and ; ", file.find("LOOM_QUOTED")->value);
    EXPECT_EQ("", file.find("LOOM_EMPTY_QUOTED")->value);
    EXPECT_EQ(nullptr, file.find("LOOM_MISSING"));
    EXPECT_EQ(nullptr, file.find("LOG_LEVEL"));  // find() takes full names
    EXPECT_EQ("test.conf", file.path());
}

TEST(ConfigFile, LaterSettingWins) {
    ConfigFile file;
    ASSERT_EQ("", parse("A = 1\nLOOM_A = 2\na = 3\nB = 4\n", file));
    EXPECT_EQ("3", file.find("LOOM_A")->value);
    EXPECT_EQ(3, file.find("LOOM_A")->line);
}

TEST(ConfigFile, WindowsLineEndingsAndNoFinalNewline) {
    ConfigFile file;
    ASSERT_EQ("", parse("A = 1\r\nB = 2", file));
    EXPECT_EQ("1", file.find("LOOM_A")->value);
    EXPECT_EQ("2", file.find("LOOM_B")->value);
}

TEST(ConfigFile, EmptyFile) {
    ConfigFile file;
    ASSERT_EQ("", parse("", file));
    EXPECT_TRUE(file.entries().empty());
}

/** A malformed file and the error it must give. */
struct BadFile {
    const char* text;
    const char* error;
};

class ConfigFileBadLine : public testing::TestWithParam<BadFile> {};

TEST_P(ConfigFileBadLine, IsAnErrorNamingFileAndLine) {
    ConfigFile file;
    ASSERT_EQ("", parse("A = 1\n", file));
    EXPECT_EQ(GetParam().error, parse(GetParam().text, file));
    EXPECT_EQ(1u, file.entries().size()) << "a failed parse must not change the file";
}

INSTANTIATE_TEST_SUITE_P(
    EveryKind, ConfigFileBadLine,
    testing::Values(
        BadFile{"# ok\ngarbage\n", "configuration file test.conf:2: expected KEY = value, found 'garbage'"},
        BadFile{"LOG LEVEL = x\n",
                "configuration file test.conf:1: invalid variable name 'LOG LEVEL' (expected letters, digits "
                "and _)"},
        BadFile{"= x\n",
                "configuration file test.conf:1: invalid variable name '' (expected letters, digits and _)"},
        BadFile{"A = 1\nLOOM_ = x\n", "configuration file test.conf:2: invalid variable name 'LOOM_'"},
        BadFile{"[abc\n",
                "configuration file test.conf:1: malformed section header '[abc' (expected [name])"},
        BadFile{"[]\n", "configuration file test.conf:1: malformed section header '[]' (expected [name])"},
        BadFile{"[a]b]\n",
                "configuration file test.conf:1: malformed section header '[a]b]' (expected [name])"},
        BadFile{"A = \"open\n", "configuration file test.conf:1: unterminated quote in 'A = \"open'"},
        BadFile{"A = \"x\" y\n",
                "configuration file test.conf:1: unexpected text after the closing quote in "
                "'A = \"x\" y'"},
        BadFile{"\n\nCONFIG_FILE = /x\n",
                "configuration file test.conf:3: LOOM_CONFIG_FILE cannot be set in a configuration file"},
        BadFile{
            "A = 1\nB\x01 = 2\n",
            "configuration file test.conf:2: invalid variable name 'B?' (expected letters, digits and _)"}));

TEST(ConfigFile, BinaryDataIsAnError) {
    ConfigFile file;
    std::string text("A = 1\nB = x\0y\n", 13);
    EXPECT_EQ("configuration file test.conf:2: binary data", parse(text, file));
}

TEST(ConfigFile, LongGarbageIsShortened) {
    ConfigFile file;
    std::string error = parse(std::string(200, 'x'), file);
    EXPECT_NE(std::string::npos, error.find("'" + std::string(60, 'x') + "...'"));
}

TEST(ConfigFile, LoadsAFile) {
    test::TempFile temp("LOG_LEVEL = debug\n");
    ConfigFile file;
    std::string error;
    ASSERT_EQ(Status::ok, ConfigFile::load(temp.path(), file, error)) << error;
    EXPECT_EQ("debug", file.find("LOOM_LOG_LEVEL")->value);
    EXPECT_EQ(temp.path(), file.path());
}

TEST(ConfigFile, LoadErrorsNameTheFile) {
    ConfigFile file;
    std::string error;
    EXPECT_EQ(Status::invalid_config, ConfigFile::load("/nonexistent-loomtest/loom.conf", file, error));
    EXPECT_EQ(
        "configuration file /nonexistent-loomtest/loom.conf (LOOM_CONFIG_FILE): cannot open: No such file or "
        "directory",
        error);
    EXPECT_EQ(Status::invalid_config, ConfigFile::load("/tmp", file, error));
    EXPECT_EQ("configuration file /tmp (LOOM_CONFIG_FILE): not a regular file", error);

    test::TempFile garbled("A = 1\nnonsense\n");
    EXPECT_EQ(Status::invalid_config, ConfigFile::load(garbled.path(), file, error));
    EXPECT_EQ("configuration file " + garbled.path() + ":2: expected KEY = value, found 'nonsense'", error);
}

TEST(ConfigFile, HugeFileIsRejected) {
    test::TempFile huge(std::string(2 << 20, '#'));
    ConfigFile file;
    std::string error;
    EXPECT_EQ(Status::invalid_config, ConfigFile::load(huge.path(), file, error));
    EXPECT_NE(std::string::npos, error.find("larger than 1048576 bytes"));
}

}  // namespace
}  // namespace loom::ucs::config
