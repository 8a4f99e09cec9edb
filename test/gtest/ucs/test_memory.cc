#include "common/test_helpers.h"

#include "ucs/memory/aligned.h"
#include "ucs/memory/pages.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <bit>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace loom::ucs {
namespace {

/** A numeric field of /proc/meminfo ("HugePages_Free", "Hugepagesize"), or 0. */
std::size_t meminfo(const std::string& field) {
    std::ifstream in("/proc/meminfo");
    for (std::string line; std::getline(in, line);) {
        if (line.rfind(field + ":", 0) == 0) {
            std::istringstream value(line.substr(field.size() + 1));
            std::size_t n = 0;
            value >> n;
            return n;
        }
    }
    return 0;
}

/** Writes a pattern over the whole block and reads it back. */
bool usable(void* ptr, std::size_t size) {
    auto* bytes = static_cast<unsigned char*>(ptr);
    for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<unsigned char>(i * 7 + 1);
    for (std::size_t i = 0; i < size; ++i) {
        if (bytes[i] != static_cast<unsigned char>(i * 7 + 1)) return false;
    }
    return true;
}

bool all_zero(const void* ptr, std::size_t size) {
    const auto* bytes = static_cast<const unsigned char*>(ptr);
    for (std::size_t i = 0; i < size; ++i) {
        if (bytes[i] != 0) return false;
    }
    return true;
}

TEST(Aligned, Arithmetic) {
    static_assert(align_up(0, 8) == 0);
    static_assert(align_up(1, 8) == 8);
    static_assert(align_up(8, 8) == 8);
    static_assert(align_up(4097, 4096) == 8192);
    static_assert(align_down(4097, 4096) == 4096);
    static_assert(align_down(7, 8) == 0);
    alignas(64) char buf[128] = {};  // initialized: gcc 12 at -O0 warns on passing it uninitialized
    EXPECT_TRUE(is_aligned(buf, 64));
    EXPECT_FALSE(is_aligned(buf + 8, 64));
    EXPECT_TRUE(is_aligned(buf + 8, 8));
}

TEST(Aligned, EveryPowerOfTwoAlignment) {
    for (std::size_t alignment = 1; alignment <= (std::size_t{1} << 21); alignment <<= 1) {
        for (std::size_t size : {std::size_t{1}, std::size_t{100}, std::size_t{5000}}) {
            void* ptr = nullptr;
            ASSERT_EQ(Status::ok, alloc_aligned(size, alignment, ptr)) << alignment << " " << size;
            ASSERT_NE(nullptr, ptr);
            EXPECT_TRUE(is_aligned(ptr, alignment)) << ptr << " alignment " << alignment;
            EXPECT_TRUE(usable(ptr, size));
            free_aligned(ptr);
        }
    }
    free_aligned(nullptr);  // must be harmless
}

TEST(Aligned, BadAlignmentOrSizeIsInvalidParam) {
    test::LogCapture capture("error");
    for (std::size_t bad : {std::size_t{0}, std::size_t{3}, std::size_t{24}, std::size_t{4095}}) {
        void* ptr = reinterpret_cast<void*>(0x1);
        EXPECT_EQ(Status::invalid_param, alloc_aligned(64, bad, ptr)) << bad;
        EXPECT_EQ(nullptr, ptr) << "the output is cleared on error";
    }
    EXPECT_EQ(1, capture.count("alignment 24 is not a power of two"));
    void* ptr = nullptr;
    EXPECT_EQ(Status::invalid_param, alloc_aligned(0, 64, ptr));
    EXPECT_EQ(1, capture.count("size 0"));
}

TEST(Aligned, HugeRequestIsNoMemory) {
    test::LogCapture capture("error");
    void* ptr = nullptr;
    EXPECT_EQ(Status::no_memory, alloc_aligned(SIZE_MAX - 4096, 64, ptr));
    EXPECT_EQ(nullptr, ptr);
}

TEST(Aligned, MakeAlignedOwnsTheBlock) {
    auto block = make_aligned(256, 128);
    ASSERT_TRUE(block.ok());
    EXPECT_TRUE(is_aligned(block->get(), 128));
    EXPECT_TRUE(usable(block->get(), 256));

    test::LogCapture capture("error");
    auto bad = make_aligned(256, 48);
    EXPECT_EQ(Status::invalid_param, bad.status());
}

TEST(Pages, Sizes) {
    EXPECT_EQ(static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)), page_size());
    EXPECT_TRUE(std::has_single_bit(page_size()));
    std::size_t huge = huge_page_size();
    EXPECT_EQ(meminfo("Hugepagesize") * 1024, huge);
    if (huge != 0) {
        EXPECT_TRUE(std::has_single_bit(huge));
        EXPECT_GT(huge, page_size());
    }
}

TEST(Pages, NormalMapping) {
    PageMapping mapping;
    ASSERT_EQ(Status::ok, map_pages(page_size() + 1, HugePagePolicy::never, mapping));
    EXPECT_FALSE(mapping.huge);
    EXPECT_EQ(2 * page_size(), mapping.length);
    EXPECT_TRUE(is_aligned(mapping.address, page_size()));
    EXPECT_TRUE(all_zero(mapping.address, mapping.length));
    EXPECT_TRUE(usable(mapping.address, mapping.length));
    unmap_pages(mapping);
    EXPECT_EQ(nullptr, mapping.address);
    EXPECT_EQ(0u, mapping.length);
    unmap_pages(mapping);  // an empty mapping is ignored
}

TEST(Pages, ZeroLengthIsInvalidParam) {
    test::LogCapture capture("error");
    PageMapping mapping;
    EXPECT_EQ(Status::invalid_param, map_pages(0, HugePagePolicy::prefer, mapping));
    EXPECT_EQ(nullptr, mapping.address);
}

TEST(Pages, PreferHugePagesFallsBackWhenNoneAreFree) {
    std::size_t huge = huge_page_size();
    std::size_t free_huge = meminfo("HugePages_Free");
    PageMapping mapping;
    ASSERT_EQ(Status::ok, map_pages(3 * page_size(), HugePagePolicy::prefer, mapping));
    ASSERT_NE(nullptr, mapping.address);
    if (huge == 0 || free_huge == 0) {
        // The usual machine: no huge pages reserved. The mapping must say so and be normal pages.
        EXPECT_FALSE(mapping.huge);
        EXPECT_EQ(3 * page_size(), mapping.length);
    } else {
        EXPECT_TRUE(mapping.huge) << free_huge << " huge pages are free";
        EXPECT_EQ(huge, mapping.length);
        EXPECT_TRUE(is_aligned(mapping.address, huge));
    }
    EXPECT_TRUE(usable(mapping.address, mapping.length));
    unmap_pages(mapping);
}

TEST(Pages, RequireHugePagesFailsWhenNoneAreFree) {
    std::size_t free_huge = meminfo("HugePages_Free");
    test::LogCapture capture("error");
    PageMapping mapping;
    Status status = map_pages(page_size(), HugePagePolicy::require, mapping);
    if (huge_page_size() == 0 || free_huge == 0) {
        EXPECT_EQ(Status::no_memory, status);
        EXPECT_EQ(nullptr, mapping.address);
        EXPECT_FALSE(mapping.huge);
        EXPECT_EQ(1, capture.count("huge pages required but unavailable"));
    } else {
        ASSERT_EQ(Status::ok, status);
        EXPECT_TRUE(mapping.huge);
        unmap_pages(mapping);
    }
}

TEST(Pages, PolicyNames) {
    EXPECT_STREQ("never", to_string(HugePagePolicy::never));
    EXPECT_STREQ("prefer", to_string(HugePagePolicy::prefer));
    EXPECT_STREQ("require", to_string(HugePagePolicy::require));
}

}  // namespace
}  // namespace loom::ucs
