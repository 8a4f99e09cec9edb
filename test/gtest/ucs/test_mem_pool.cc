#include "common/test_helpers.h"

#include "ucs/memory/aligned.h"
#include "ucs/memory/mem_pool.h"
#include "ucs/memory/pages.h"
#include "ucs/sys/build_options.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace loom::ucs {
namespace {

std::size_t free_huge_pages() {
    std::ifstream in("/proc/meminfo");
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("HugePages_Free:", 0) == 0) {
            std::istringstream value(line.substr(15));
            std::size_t n = 0;
            value >> n;
            return n;
        }
    }
    return 0;
}

MemPoolParams params_of(std::size_t elem_size, std::size_t per_chunk,
                        std::size_t max_elems = MemPoolParams::kUnlimited) {
    MemPoolParams params;
    params.name = "test";
    params.elem_size = elem_size;
    params.elems_per_chunk = per_chunk;
    params.max_elems = max_elems;
    return params;
}

TEST(MemPool, InitRejectsBadParameters) {
    test::LogCapture capture("error");
    struct Case {
        const char* what;
        void (*tweak)(MemPoolParams&);
        std::string log;
    };
    const Case cases[] = {
        {"zero element size", [](MemPoolParams& p) { p.elem_size = 0; }, "invalid element size 0"},
        {"alignment 0", [](MemPoolParams& p) { p.alignment = 0; }, "alignment 0 is not"},
        {"alignment 24", [](MemPoolParams& p) { p.alignment = 24; }, "alignment 24 is not"},
        {"alignment above page", [](MemPoolParams& p) { p.alignment = page_size() * 2; },
         "alignment " + std::to_string(page_size() * 2) + " is not"},
        {"zero per chunk", [](MemPoolParams& p) { p.elems_per_chunk = 0; }, "elements per chunk"},
        {"zero max", [](MemPoolParams& p) { p.max_elems = 0; }, "maximal number of elements"},
        {"huge element", [](MemPoolParams& p) { p.elem_size = SIZE_MAX / 2; }, "invalid element size"},
        {"huge header", [](MemPoolParams& p) { p.header_size = SIZE_MAX / 2; }, "invalid header size"},
        {"huge chunk", [](MemPoolParams& p) { p.elems_per_chunk = SIZE_MAX / 4; }, "too large"},
    };
    for (const Case& c : cases) {
        MemPoolParams params = params_of(64, 8);
        c.tweak(params);
        MemPool pool;
        EXPECT_EQ(Status::invalid_param, pool.init(std::move(params))) << c.what;
        EXPECT_FALSE(pool.initialized()) << c.what;
        EXPECT_EQ(nullptr, pool.get()) << c.what;
        EXPECT_GE(capture.count(c.log), 1) << c.what << ": expected a log line with '" << c.log << "'";
    }

    MemPool pool;
    ASSERT_EQ(Status::ok, pool.init(params_of(64, 8)));
    EXPECT_EQ(Status::invalid_param, pool.init(params_of(64, 8))) << "second init";
    EXPECT_EQ(1, capture.count("already initialized"));
}

TEST(MemPool, UninitializedPoolGivesNothing) {
    test::LogCapture capture("error");
    MemPool pool;
    void* elem = reinterpret_cast<void*>(0x1);
    EXPECT_EQ(Status::invalid_param, pool.try_get(elem));
    EXPECT_EQ(nullptr, elem);
    EXPECT_EQ(Status::invalid_param, pool.reserve(4));
    EXPECT_EQ(0u, pool.num_chunks());
}

TEST(MemPool, NothingIsAllocatedBeforeTheFirstGet) {
    MemPool pool;
    ASSERT_EQ(Status::ok, pool.init(params_of(32, 16)));
    EXPECT_TRUE(pool.initialized());
    EXPECT_EQ(0u, pool.num_chunks());
    EXPECT_EQ(0u, pool.num_elems());
    EXPECT_EQ("test", pool.name());
    EXPECT_EQ(32u, pool.elem_size());
}

TEST(MemPool, PutElementIsReusedFirst) {
    MemPool pool;
    ASSERT_EQ(Status::ok, pool.init(params_of(48, 8)));
    void* a = pool.get();
    void* b = pool.get();
    ASSERT_NE(nullptr, a);
    ASSERT_NE(nullptr, b);
    EXPECT_NE(a, b);
    pool.put(a);
    EXPECT_EQ(a, pool.get()) << "the most recently returned element is the warmest";
    pool.put(b);
    pool.put(a);
    EXPECT_EQ(a, pool.get());
    EXPECT_EQ(b, pool.get());
    EXPECT_EQ(1u, pool.num_chunks());
    pool.put(a);
    pool.put(b);
    EXPECT_EQ(pool.num_elems(), pool.count_free());
}

TEST(MemPool, ElementsDoNotOverlap) {
    constexpr std::size_t kSize = 40;
    MemPool pool;
    MemPoolParams params = params_of(kSize, 7);
    params.header_size = 12;
    ASSERT_EQ(Status::ok, pool.init(std::move(params)));
    std::vector<void*> elems;
    for (int i = 0; i < 50; ++i) {
        void* e = pool.get();
        ASSERT_NE(nullptr, e);
        std::memset(e, i + 1, kSize);
        std::memset(pool.header(e), 0x80 + i, 12);
        elems.push_back(e);
    }
    for (int i = 0; i < 50; ++i) {
        auto* bytes = static_cast<unsigned char*>(elems[i]);
        auto* hdr = static_cast<unsigned char*>(pool.header(elems[i]));
        for (std::size_t j = 0; j < kSize; ++j) ASSERT_EQ(i + 1, bytes[j]) << "element " << i;
        for (std::size_t j = 0; j < 12; ++j) ASSERT_EQ(0x80 + i, hdr[j]) << "header " << i;
        EXPECT_EQ(&pool, MemPool::owner(elems[i])) << "header writes must not reach the pool word";
    }
    for (void* e : elems) pool.put(e);
}

TEST(MemPool, GrowsInChunks) {
    MemPool pool;
    ASSERT_EQ(Status::ok, pool.init(params_of(64, 4)));
    std::vector<void*> elems;
    for (int i = 0; i < 4; ++i) elems.push_back(pool.get());
    EXPECT_EQ(1u, pool.num_chunks());
    EXPECT_EQ(4u, pool.num_elems());
    EXPECT_EQ(0u, pool.count_free());
    elems.push_back(pool.get());
    ASSERT_NE(nullptr, elems.back());
    EXPECT_EQ(2u, pool.num_chunks());
    EXPECT_EQ(8u, pool.num_elems());
    EXPECT_EQ(3u, pool.count_free());
    EXPECT_EQ(0u, pool.num_hugepage_chunks());
    std::set<void*> unique(elems.begin(), elems.end());
    EXPECT_EQ(elems.size(), unique.size());
    for (void* e : elems) pool.put(e);
    EXPECT_EQ(8u, pool.count_free());
}

TEST(MemPool, ExhaustionReturnsNullAndRecoversAfterPut) {
    test::LogCapture capture("debug");
    MemPool pool;
    ASSERT_EQ(Status::ok, pool.init(params_of(32, 4, 6)));
    std::vector<void*> elems;
    for (int i = 0; i < 6; ++i) {
        void* e = nullptr;
        ASSERT_EQ(Status::ok, pool.try_get(e)) << i;
        elems.push_back(e);
    }
    EXPECT_EQ(2u, pool.num_chunks());
    EXPECT_EQ(6u, pool.num_elems()) << "the last chunk is cut to max_elems";

    EXPECT_EQ(nullptr, pool.get());
    void* e = reinterpret_cast<void*>(0x1);
    EXPECT_EQ(Status::no_resource, pool.try_get(e));
    EXPECT_EQ(nullptr, e);
    EXPECT_EQ(1, capture.count("all 6 elements are in use"));
    EXPECT_EQ(2u, pool.num_chunks());

    pool.put(elems[2]);
    ASSERT_EQ(Status::ok, pool.try_get(e));
    EXPECT_EQ(elems[2], e);
    EXPECT_EQ(nullptr, pool.get()) << "exhausted again";
    EXPECT_EQ(6u, pool.num_elems());
    for (void* elem : elems) pool.put(elem);
    EXPECT_EQ(6u, pool.count_free());
}

TEST(MemPool, ReserveAllocatesAhead) {
    MemPool pool;
    ASSERT_EQ(Status::ok, pool.init(params_of(16, 8, 20)));
    ASSERT_EQ(Status::ok, pool.reserve(10));
    EXPECT_EQ(16u, pool.num_elems());
    EXPECT_EQ(2u, pool.num_chunks());
    std::vector<void*> elems;
    for (int i = 0; i < 16; ++i) elems.push_back(pool.get());
    EXPECT_EQ(2u, pool.num_chunks()) << "reserved elements need no new chunk";
    ASSERT_EQ(Status::ok, pool.reserve(1000)) << "capped at max_elems";
    EXPECT_EQ(20u, pool.num_elems());
    for (void* e : elems) pool.put(e);
}

TEST(MemPool, InitCallbackRunsOncePerElement) {
    std::set<void*> initialized;
    int calls = 0;
    MemPool pool;
    MemPoolParams params = params_of(sizeof(std::uint64_t) * 2, 5);
    params.obj_init = [&](void* elem) {
        ++calls;
        initialized.insert(elem);
        static_cast<std::uint64_t*>(elem)[0] = 0xfeedf00dULL;
    };
    ASSERT_EQ(Status::ok, pool.init(std::move(params)));
    EXPECT_EQ(0, calls);

    std::vector<void*> elems;
    for (int i = 0; i < 7; ++i) elems.push_back(pool.get());
    EXPECT_EQ(10, calls) << "two chunks of five";
    EXPECT_EQ(10u, initialized.size());
    for (void* e : elems) {
        EXPECT_EQ(1u, initialized.count(e));
        EXPECT_EQ(0xfeedf00dULL, static_cast<std::uint64_t*>(e)[0]);
        static_cast<std::uint64_t*>(e)[1] = 42;  // user state
    }
    // Get/put cycles do not run the callback again, and what it set survives them.
    for (int round = 0; round < 3; ++round) {
        for (void* e : elems) pool.put(e);
        for (void*& e : elems) e = pool.get();
    }
    EXPECT_EQ(10, calls);
    for (void* e : elems) EXPECT_EQ(0xfeedf00dULL, static_cast<std::uint64_t*>(e)[0]);
    for (void* e : elems) pool.put(e);
}

TEST(MemPool, ObjCleanupRunsOnceOnEveryElementItInitialized) {
    std::set<void*> initialized;
    std::multiset<void*> cleaned;
    {
        MemPool pool;
        MemPoolParams params = params_of(sizeof(std::uint64_t), 4);
        params.obj_init = [&](void* elem) { initialized.insert(elem); };
        params.obj_cleanup = [&](void* elem) { cleaned.insert(elem); };
        ASSERT_EQ(Status::ok, pool.init(std::move(params)));
        std::vector<void*> elems;
        for (int i = 0; i < 6; ++i) elems.push_back(pool.get());
        for (int i = 0; i < 3; ++i) pool.put(elems[i]);  // some free, some still out
        for (int i = 3; i < 6; ++i) pool.put(elems[i]);
        EXPECT_TRUE(cleaned.empty()) << "get/put cycles must not run the cleanup";
    }
    EXPECT_EQ(8u, initialized.size()) << "two chunks of four";
    ASSERT_EQ(initialized.size(), cleaned.size());
    for (void* e : initialized) EXPECT_EQ(1u, cleaned.count(e));
}

TEST(MemPool, ChunkCallbacksSeeEveryChunkBeforeItsElements) {
    struct Range {
        char* base;
        std::size_t length;
    };
    std::vector<Range> chunks;
    std::vector<Range> cleaned;
    int elems_outside = 0;
    {
        MemPool pool;
        MemPoolParams params = params_of(64, 4);
        params.header_size = 16;
        params.chunk_init = [&](void* base, std::size_t length) {
            chunks.push_back({static_cast<char*>(base), length});
            return Status::ok;
        };
        params.obj_init = [&](void* elem) {
            // The element, its header and its pool word lie in the chunk announced just before.
            ASSERT_FALSE(chunks.empty());
            const Range& r = chunks.back();
            char* e = static_cast<char*>(elem);
            if (e - 16 - 8 < r.base || e + 64 > r.base + r.length) ++elems_outside;
        };
        params.chunk_cleanup = [&](void* base, std::size_t length) {
            cleaned.push_back({static_cast<char*>(base), length});
        };
        ASSERT_EQ(Status::ok, pool.init(std::move(params)));
        std::vector<void*> elems;
        for (int i = 0; i < 6; ++i) elems.push_back(pool.get());
        EXPECT_EQ(2u, chunks.size());
        EXPECT_TRUE(cleaned.empty());
        for (void* e : elems) pool.put(e);
    }
    EXPECT_EQ(0, elems_outside);
    ASSERT_EQ(2u, cleaned.size()) << "every accepted chunk is cleaned up once";
    for (const Range& c : chunks) {
        bool found = false;
        for (const Range& d : cleaned) found |= (c.base == d.base && c.length == d.length);
        EXPECT_TRUE(found);
    }
}

TEST(MemPool, RejectedChunkFailsTheGrowth) {
    int accepted = 0;
    int cleaned = 0;
    bool reject = false;
    {
        MemPool pool;
        MemPoolParams params = params_of(32, 2);
        params.chunk_init = [&](void*, std::size_t) {
            if (reject) return Status::no_memory;
            ++accepted;
            return Status::ok;
        };
        params.chunk_cleanup = [&](void*, std::size_t) { ++cleaned; };
        ASSERT_EQ(Status::ok, pool.init(std::move(params)));
        void* a = pool.get();
        void* b = pool.get();
        ASSERT_NE(nullptr, a);
        ASSERT_NE(nullptr, b);
        reject = true;
        void* c = nullptr;
        EXPECT_EQ(Status::no_memory, pool.try_get(c)) << "the callback's status is what get() reports";
        EXPECT_EQ(nullptr, c);
        EXPECT_EQ(1u, pool.num_chunks());
        EXPECT_EQ(2u, pool.num_elems());
        reject = false;
        pool.put(a);
        c = pool.get();
        EXPECT_EQ(a, c) << "a put element is reused without growing";
        pool.put(b);
        pool.put(c);
    }
    EXPECT_EQ(1, accepted);
    EXPECT_EQ(1, cleaned) << "a rejected chunk is never cleaned up";
}

TEST(MemPool, ElementsAndHeadersAreAligned) {
    for (std::size_t alignment :
         {std::size_t{1}, std::size_t{8}, std::size_t{16}, std::size_t{64}, std::size_t{256}, page_size()}) {
        for (std::size_t header : {std::size_t{0}, std::size_t{5}, std::size_t{24}}) {
            for (std::size_t size : {std::size_t{1}, std::size_t{24}, std::size_t{100}}) {
                MemPool pool;
                MemPoolParams params = params_of(size, 3);
                params.alignment = alignment;
                params.header_size = header;
                ASSERT_EQ(Status::ok, pool.init(std::move(params)));
                const std::size_t effective = alignment < 8 ? 8 : alignment;
                EXPECT_EQ(0u, pool.stride() % effective);
                std::vector<void*> elems;
                for (int i = 0; i < 7; ++i) {
                    void* e = pool.get();
                    ASSERT_NE(nullptr, e);
                    EXPECT_TRUE(is_aligned(e, effective))
                        << e << " alignment " << alignment << " header " << header << " size " << size;
                    EXPECT_TRUE(is_aligned(pool.header(e), 8));
                    EXPECT_LE(static_cast<char*>(pool.header(e)) + header, static_cast<char*>(e) - 8);
                    elems.push_back(e);
                }
                for (void* e : elems) pool.put(e);
            }
        }
    }
}

TEST(MemPool, OwnerFindsThePool) {
    MemPool a;
    MemPool b;
    ASSERT_EQ(Status::ok, a.init(params_of(24, 4)));
    ASSERT_EQ(Status::ok, b.init(params_of(24, 4)));
    void* ea = a.get();
    void* eb = b.get();
    EXPECT_EQ(&a, MemPool::owner(ea));
    EXPECT_EQ(&b, MemPool::owner(eb));
    MemPool::owner(ea)->put(ea);
    MemPool::owner(eb)->put(eb);
    EXPECT_EQ(a.num_elems(), a.count_free());
    EXPECT_EQ(b.num_elems(), b.count_free());
}

TEST(MemPool, HugePagesPreferredFallBackCleanly) {
    const bool expect_huge = huge_page_size() != 0 && free_huge_pages() > 0;
    test::LogCapture capture("diag");
    MemPool pool;
    MemPoolParams params = params_of(64, 16);
    params.huge_pages = HugePagePolicy::prefer;
    ASSERT_EQ(Status::ok, pool.init(std::move(params)));
    std::vector<void*> elems;
    for (int i = 0; i < 16; ++i) {
        void* e = pool.get();
        ASSERT_NE(nullptr, e);
        std::memset(e, 0xab, 64);
        elems.push_back(e);
    }
    EXPECT_EQ(1u, pool.num_chunks());
    EXPECT_GE(pool.num_elems(), 16u) << "a page-backed chunk holds at least elems_per_chunk";
    if (expect_huge) {
        EXPECT_EQ(1u, pool.num_hugepage_chunks()) << free_huge_pages() << " huge pages are free";
        EXPECT_EQ(0, capture.count("huge pages unavailable"));
    } else {
        // The usual machine: no huge pages reserved. The pool says so, in the query and once in the log.
        EXPECT_EQ(0u, pool.num_hugepage_chunks());
        EXPECT_EQ(1, capture.count("mempool 'test': huge pages unavailable, chunks use normal pages"));
        // A second chunk falls back too, without repeating the message.
        while (pool.num_chunks() < 2) elems.push_back(pool.get());
        EXPECT_EQ(0u, pool.num_hugepage_chunks());
        EXPECT_EQ(1, capture.count("huge pages unavailable"));
    }
    for (void* e : elems) pool.put(e);
}

TEST(MemPool, HugePagesRequiredFailWithoutHugePages) {
    const bool have_huge = huge_page_size() != 0 && free_huge_pages() > 0;
    test::LogCapture capture("error");
    MemPool pool;
    MemPoolParams params = params_of(64, 16);
    params.huge_pages = HugePagePolicy::require;
    ASSERT_EQ(Status::ok, pool.init(std::move(params)));
    void* e = nullptr;
    Status status = pool.try_get(e);
    if (have_huge) {
        ASSERT_EQ(Status::ok, status);
        EXPECT_EQ(1u, pool.num_hugepage_chunks());
        pool.put(e);
    } else {
        EXPECT_EQ(Status::no_memory, status);
        EXPECT_EQ(nullptr, e);
        EXPECT_EQ(0u, pool.num_chunks());
        EXPECT_EQ(1, capture.count("cannot allocate a chunk"));
    }
}

TEST(MemPool, DestroyWithElementsInUseWarns) {
    test::LogCapture capture("warn");
    void* leaked[2];
    {
        MemPool pool;
        ASSERT_EQ(Status::ok, pool.init(params_of(16, 4)));
        leaked[0] = pool.get();
        leaked[1] = pool.get();
        pool.put(pool.get());
    }
    (void)leaked;
    EXPECT_EQ(1, capture.count("mempool 'test': destroyed with 2 of 4 elements still in use"));
}

TEST(MemPool, RandomGetPutNeverHandsOutAnElementTwice) {
    MemPool pool;
    ASSERT_EQ(Status::ok, pool.init(params_of(8, 16, 200)));
    std::mt19937 rng(7);
    std::vector<void*> held;
    std::set<void*> live;
    for (int step = 0; step < 20000; ++step) {
        if (held.empty() || (rng() % 3 != 0 && held.size() < 200)) {
            void* e = pool.get();
            ASSERT_NE(nullptr, e);
            ASSERT_TRUE(live.insert(e).second) << "element handed out twice";
            *static_cast<std::uint64_t*>(e) = reinterpret_cast<std::uintptr_t>(e);
            held.push_back(e);
        } else {
            std::size_t idx = rng() % held.size();
            void* e = held[idx];
            ASSERT_EQ(reinterpret_cast<std::uintptr_t>(e), *static_cast<std::uint64_t*>(e))
                << "element corrupted";
            held[idx] = held.back();
            held.pop_back();
            live.erase(e);
            pool.put(e);
        }
    }
    EXPECT_LE(pool.num_elems(), 200u);
    for (void* e : held) pool.put(e);
    EXPECT_EQ(pool.num_elems(), pool.count_free());
}

TEST(MemPoolDeathTest, DoublePutIsCaught) {
#ifndef LOOM_ENABLE_ASSERT
    GTEST_SKIP() << "double-put detection is an assertion-build check (configure --enable-assertions)";
#else
    MemPool pool;
    ASSERT_EQ(Status::ok, pool.init(params_of(32, 4)));
    void* e = pool.get();
    pool.put(e);
    EXPECT_DEATH(pool.put(e), "double put of element");
#endif
}

TEST(MemPoolDeathTest, PutToTheWrongPoolIsCaught) {
#ifndef LOOM_ENABLE_ASSERT
    GTEST_SKIP() << "foreign-put detection is an assertion-build check (configure --enable-assertions)";
#else
    MemPool a;
    MemPool b;
    ASSERT_EQ(Status::ok, a.init(params_of(32, 4)));
    ASSERT_EQ(Status::ok, b.init(params_of(32, 4)));
    void* e = a.get();
    EXPECT_DEATH(b.put(e), "that belongs to pool");
    a.put(e);
#endif
}

TEST(MemPoolDeathTest, UseAfterPutIsReportedByAddressSanitizer) {
#ifndef LOOM_MEMPOOL_POISON
    GTEST_SKIP() << "free elements are poisoned only in AddressSanitizer builds (configure --enable-asan)";
#else
    MemPool pool;
    ASSERT_EQ(Status::ok, pool.init(params_of(32, 4)));
    auto* e = static_cast<volatile char*>(pool.get());
    e[0] = 1;
    pool.put(const_cast<char*>(e));
    EXPECT_DEATH(e[5] = 2, "use-after-poison");
#endif
}

}  // namespace
}  // namespace loom::ucs
