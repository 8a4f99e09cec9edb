#include "common/test_helpers.h"

#include "ucs/debug/log.h"
#include "ucs/sys/module.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace loom::ucs {
namespace {

namespace fs = std::filesystem;

/**
 * Copies the test modules built in this tree into a fresh directory under a
 * framework name of the test's own, since load_modules() loads a framework once.
 */
class ModuleTest : public testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("loomtest-modules-" + std::to_string(::getpid()) + "-" +
                                            testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::create_directories(dir_);
        framework_ = std::string("t") + testing::UnitTest::GetInstance()->current_test_info()->name();
    }
    void TearDown() override { fs::remove_all(dir_); }

    void install(const std::string& built_name, const std::string& name) {
        fs::copy_file(fs::path(LOOM_TEST_MODULE_DIR) / ("libloom_testfw_" + built_name + ".so"),
                      dir_ / ("libloom_" + framework_ + "_" + name + ".so"));
    }

    const ModuleInfo* find(const std::vector<ModuleInfo>& modules, const std::string& name) {
        for (const auto& m : modules) {
            if (m.name == name) return &m;
        }
        return nullptr;
    }

    fs::path dir_;
    std::string framework_;
};

TEST_F(ModuleTest, LoadsGoodModuleAndRunsItsConstructors) {
    install("good", "good");
    const auto& modules = load_modules(framework_, {{dir_.string()}, nullptr});
    ASSERT_EQ(1u, modules.size());
    EXPECT_EQ(ModuleState::loaded, modules[0].state) << modules[0].reason;
    EXPECT_EQ("good", modules[0].name);
    EXPECT_EQ(framework_, modules[0].framework);
    auto names = log::component_names();
    EXPECT_NE(names.end(), std::find(names.begin(), names.end(), "testmod_good"));
}

TEST_F(ModuleTest, FailedInitIsReportedWithItsStatus) {
    install("badinit", "nodev");
    const auto& modules = load_modules(framework_, {{dir_.string()}, nullptr});
    ASSERT_EQ(1u, modules.size());
    EXPECT_EQ(ModuleState::failed, modules[0].state);
    EXPECT_NE(std::string::npos, modules[0].reason.find("no such device")) << modules[0].reason;
}

TEST_F(ModuleTest, GarbageFileIsReportedNotFatal) {
    std::ofstream(dir_ / ("libloom_" + framework_ + "_junk.so")) << "this is not an ELF file\n";
    install("good", "zgood");
    const auto& modules = load_modules(framework_, {{dir_.string()}, nullptr});
    ASSERT_EQ(2u, modules.size());
    const ModuleInfo* junk = find(modules, "junk");
    ASSERT_NE(nullptr, junk);
    EXPECT_EQ(ModuleState::failed, junk->state);
    EXPECT_FALSE(junk->reason.empty());
    const ModuleInfo* good = find(modules, "zgood");
    ASSERT_NE(nullptr, good);
    EXPECT_EQ(ModuleState::loaded, good->state);
}

TEST_F(ModuleTest, AllowListDisablesModules) {
    install("good", "wanted");
    install("badinit", "unwanted");
    ModuleLoadParams params{{dir_.string()}, [](std::string_view name) { return name == "wanted"; }};
    const auto& modules = load_modules(framework_, params);
    ASSERT_EQ(2u, modules.size());
    EXPECT_EQ(ModuleState::loaded, find(modules, "wanted")->state);
    EXPECT_EQ(ModuleState::disabled, find(modules, "unwanted")->state);
    EXPECT_EQ("not in LOOM_MODULES", find(modules, "unwanted")->reason);
}

TEST_F(ModuleTest, LoadsOncePerFrameworkAndReports) {
    EXPECT_TRUE(module_report(framework_).empty());
    install("badinit", "x");
    const auto& first = load_modules(framework_, {{dir_.string()}, nullptr});
    install("good", "y");  // appears after the first load: not picked up
    const auto& second = load_modules(framework_, {{dir_.string()}, nullptr});
    EXPECT_EQ(&first, &second);
    EXPECT_EQ(1u, second.size());
    EXPECT_EQ(1u, module_report(framework_).size());
}

TEST_F(ModuleTest, FirstDirectoryWins) {
    fs::path other = dir_ / "second";
    fs::create_directories(other);
    install("good", "dup");
    fs::copy_file(fs::path(LOOM_TEST_MODULE_DIR) / "libloom_testfw_badinit.so",
                  other / ("libloom_" + framework_ + "_dup.so"));
    const auto& modules = load_modules(framework_, {{dir_.string(), other.string()}, nullptr});
    ASSERT_EQ(1u, modules.size());
    EXPECT_EQ(ModuleState::loaded, modules[0].state);
    EXPECT_EQ((dir_ / ("libloom_" + framework_ + "_dup.so")).string(), modules[0].path);
}

TEST_F(ModuleTest, MissingDirectoryFindsNothing) {
    const auto& modules = load_modules(framework_, {{(dir_ / "nope").string()}, nullptr});
    EXPECT_TRUE(modules.empty());
}

TEST_F(ModuleTest, LoomModulesAllowListIsApplied) {
    install("good", "kept");
    install("badinit", "dropped");
    test::ScopedEnv dirs("LOOM_MODULE_DIR", dir_.string());
    test::ScopedEnv allow("LOOM_MODULES", std::string("^dropped"));
    const auto& modules = load_modules(framework_);
    ASSERT_EQ(2u, modules.size());
    EXPECT_EQ(ModuleState::loaded, find(modules, "kept")->state);
    EXPECT_EQ(ModuleState::disabled, find(modules, "dropped")->state);
}

TEST(ModuleDirs, EnvironmentOverridesDefaults) {
    test::ScopedEnv env("LOOM_MODULE_DIR", std::string("/a:/b::/c"));
    EXPECT_EQ((std::vector<std::string>{"/a", "/b", "/c"}), default_module_dirs());
}

TEST(ModuleDirs, DefaultIsNextToTheLibrary) {
    test::ScopedEnv env("LOOM_MODULE_DIR", std::nullopt);
    auto dirs = default_module_dirs();
    ASSERT_FALSE(dirs.empty());
    EXPECT_TRUE(dirs[0].ends_with("/loom")) << dirs[0];
}

}  // namespace
}  // namespace loom::ucs
