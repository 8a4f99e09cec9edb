/*
 * The registration cache and memory events: the classic failure of a registration
 * cache is handing out a registration of pages that are gone, after the application
 * freed a buffer and got new memory at the same address. The test backend keeps a
 * checksum of the bytes it registered, as pinned pages keep their contents:
 * sends_current_data() tells whether a NIC sending from a region would send what is
 * at its addresses now. Each scenario first shows, with a cache that sees no events,
 * that the failure is real here, then that a cache with hooks does not have it.
 */
#include "common/forked_peer.h"
#include "common/test_helpers.h"
#include "ucs/test_rcache_backend.h"

#include "ucs/memory/memhooks.h"
#include "ucs/memory/pages.h"
#include "ucs/memory/rcache.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <string>

namespace loom::ucs {
namespace {

using rcache_test::TestBackend;

const std::size_t kPage = page_size();

std::uintptr_t addr_of(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

std::unique_ptr<Rcache> make_cache(TestBackend& backend, MemEventsMode mode) {
    backend.set_snapshot(true);
    Result<std::unique_ptr<Rcache>> cache = Rcache::create(backend.params(mode));
    if (!cache) throw std::runtime_error("Rcache::create failed: " + std::string(to_string(cache.status())));
    return std::move(cache).value();
}

void* map_at(void* where, std::size_t length, int extra_flags = 0) {
    return ::mmap(where, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra_flags, -1, 0);
}

/** Looks up [p, p + length), checks what the backend would send and releases; returns the registration id. */
std::uint64_t send_once(Rcache& cache, const void* p, std::size_t length, bool* sends_current = nullptr) {
    RcacheRegion* region = nullptr;
    if (cache.lookup(p, length, 1, region) != Status::ok) return 0;
    const std::uint64_t id = TestBackend::id_of(region);
    if (sends_current != nullptr) *sends_current = TestBackend::sends_current_data(region);
    cache.release(region);
    return id;
}

/** Runs @p body in a child process; "" when it passed, else what it returned or how it died. */
std::string in_child(std::function<std::string()> body) {
    loom::test::ForkedPeer peer([&body](loom::test::ForkedPeer::Channel& channel) {
        const std::string error = body();
        channel.send(error.empty() ? std::string("ok") : error);
        return error.empty() ? 0 : 1;
    });
    const std::optional<std::string> text = peer.channel().recv_text();
    const int code = peer.wait();
    if (!text) return "the child sent nothing and exited with " + std::to_string(code);
    return *text == "ok" && code == 0 ? "" : *text;
}

/**
 * Registers 4 pages, unmaps them, maps new pages at the same address with other
 * contents, and looks them up again with a cache in @p mode. Returns whether the
 * second lookup registered again and whether it would send the new contents.
 */
struct RemapOutcome {
    bool registered_again;
    bool sends_current;
    bool old_deregistered;
};

RemapOutcome unmap_and_remap(MemEventsMode mode) {
    const std::size_t length = 4 * kPage;
    void* p = map_at(nullptr, length);
    if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
    std::memset(p, 'A', length);
    TestBackend backend;
    auto cache = make_cache(backend, mode);
    bool current = false;
    const std::uint64_t first = send_once(*cache, p, length, &current);
    if (first == 0 || !current) throw std::runtime_error("the first send failed");

    ::munmap(p, length);
    if (map_at(p, length, MAP_FIXED_NOREPLACE) != p) throw std::runtime_error("cannot map the address again");
    std::memset(p, 'B', length);
    RemapOutcome outcome{};
    const std::uint64_t second = send_once(*cache, p, length, &outcome.sends_current);
    outcome.registered_again = second != first;
    outcome.old_deregistered = !backend.is_live(first);
    ::munmap(p, length);
    return outcome;
}

TEST(RcacheEvents, UnmappedAndRemappedMemoryIsRegisteredAgain) {
    // Without events the cache returns the old registration: the NIC would send 'A's.
    const RemapOutcome blind = unmap_and_remap(MemEventsMode::user);
    EXPECT_FALSE(blind.registered_again);
    EXPECT_FALSE(blind.sends_current);

    const RemapOutcome hooked = unmap_and_remap(MemEventsMode::hooks);
    EXPECT_TRUE(hooked.registered_again);
    EXPECT_TRUE(hooked.sends_current);
    EXPECT_TRUE(hooked.old_deregistered);
}

// Reusing the address of a freed buffer is the point of this test.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuse-after-free"
TEST(RcacheEvents, FreedBufferMallocedAgainIsRegisteredAgain) {
    const std::string error = in_child([]() -> std::string {
        // A fixed threshold: 1 MiB blocks are always mapped on their own, as on a fresh process.
        ::mallopt(M_MMAP_THRESHOLD, 128 << 10);
        constexpr std::size_t kSize = 1u << 20;
        TestBackend backend;
        auto cache = make_cache(backend, MemEventsMode::hooks);

        auto* p = static_cast<char*>(std::malloc(kSize));
        if (p == nullptr) return "malloc failed";
        std::memset(p, 'A', kSize);
        bool current = false;
        const std::uint64_t first = send_once(*cache, p, kSize, &current);
        if (first == 0 || !current) return "the first send failed";
        const std::uintptr_t old_address = addr_of(p);  // p itself is dead after free()
        std::free(p);

        // The free was seen: the registration is gone (deregistered at the next operation).
        const RcacheStats stats = cache->stats();
        if (stats.invalidated != 1) return "free() did not invalidate the region";
        if (backend.is_live(first)) return "the old registration is still live";

        if (mem_hooks_info().free_events == FreeEvents::sanitizer) {
            // The sanitizer keeps the block in quarantine, so the address does not come
            // back soon; what matters, the invalidation at free(), is checked above.
            return "";
        }
        // glibc unmapped the block: get the same address back, with new pages.
        auto* q = static_cast<char*>(std::malloc(kSize));
        if (addr_of(q) != old_address) {
            std::free(q);
            void* page = reinterpret_cast<void*>(old_address & ~(kPage - 1));
            if (map_at(page, kSize + kPage, MAP_FIXED_NOREPLACE) != page) return "cannot get the address back";
            q = reinterpret_cast<char*>(old_address);
        }
        std::memset(q, 'B', kSize);
        bool sends_current = false;
        const std::uint64_t second = send_once(*cache, q, kSize, &sends_current);
        if (second == first) return "the cache returned the registration of the freed buffer";
        if (!sends_current) return "the new registration does not send the new contents";
        return "";
    });
    EXPECT_EQ("", error);
}
#pragma GCC diagnostic pop

TEST(RcacheEvents, MremapInvalidatesTheOldRange) {
    const std::size_t length = 4 * kPage;
    auto* p = static_cast<char*>(map_at(nullptr, length));
    ASSERT_NE(MAP_FAILED, static_cast<void*>(p));
    TestBackend backend;
    auto cache = make_cache(backend, MemEventsMode::hooks);
    const std::uint64_t first = send_once(*cache, p, length);
    ASSERT_NE(0u, first);
    // Grow where nothing can follow: the pages move.
    void* q = ::mremap(p, length, 64 * length, MREMAP_MAYMOVE);
    ASSERT_NE(MAP_FAILED, q);
    EXPECT_EQ(1u, cache->stats().invalidated);
    EXPECT_FALSE(backend.is_live(first));
    EXPECT_NE(first, send_once(*cache, q, length));
    ::munmap(q, 64 * length);
}

TEST(RcacheEvents, MadviseDontneedInvalidates) {
    const std::size_t length = 4 * kPage;
    for (MemEventsMode mode : {MemEventsMode::user, MemEventsMode::hooks}) {
        auto* p = static_cast<char*>(map_at(nullptr, length));
        ASSERT_NE(MAP_FAILED, static_cast<void*>(p));
        std::memset(p, 'A', length);
        TestBackend backend;
        auto cache = make_cache(backend, mode);
        const std::uint64_t first = send_once(*cache, p, length);
        ASSERT_EQ(0, ::madvise(p + kPage, kPage, MADV_DONTNEED));  // the page reads as zeros now
        bool current = false;
        const std::uint64_t second = send_once(*cache, p, length, &current);
        if (mode == MemEventsMode::user) {
            EXPECT_EQ(first, second);  // blind: the stale registration
            EXPECT_FALSE(current);
        } else {
            EXPECT_NE(first, second);
            EXPECT_TRUE(current);
        }
        ::munmap(p, length);
    }
}

TEST(RcacheEvents, ShmdtInvalidates) {
    const int id = ::shmget(IPC_PRIVATE, 2 * kPage, IPC_CREAT | 0600);
    if (id < 0) GTEST_SKIP() << "System V shared memory is not available here: " << std::strerror(errno);
    void* p = ::shmat(id, nullptr, 0);
    (void)::shmctl(id, IPC_RMID, nullptr);
    ASSERT_NE(reinterpret_cast<void*>(-1), p);
    TestBackend backend;
    auto cache = make_cache(backend, MemEventsMode::hooks);
    const std::uint64_t first = send_once(*cache, p, 2 * kPage);
    ASSERT_EQ(0, ::shmdt(p));
    EXPECT_EQ(1u, cache->stats().invalidated);
    EXPECT_FALSE(backend.is_live(first));
}

TEST(RcacheEvents, SbrkShrinkInvalidates) {
    const std::string error = in_child([]() -> std::string {
        TestBackend backend;
        auto cache = make_cache(backend, MemEventsMode::hooks);
        // Warm up: the next lookup reuses the freed region and map node instead of
        // growing the heap, which must not move while this test owns its top.
        char warm[64];
        if (send_once(*cache, warm, sizeof(warm)) == 0) return "warm-up lookup failed";
        cache->flush();

        const std::size_t length = 2 * kPage;
        char* base = static_cast<char*>(::sbrk(0));
        if (::sbrk(static_cast<intptr_t>(length)) == reinterpret_cast<void*>(-1)) return "sbrk(+) failed";
        std::memset(base, 'A', length);
        const std::uint64_t first = send_once(*cache, base, length);
        if (::sbrk(0) != base + length) return "the heap grew during the test";
        if (::sbrk(-static_cast<intptr_t>(length)) == reinterpret_cast<void*>(-1)) return "sbrk(-) failed";
        const RcacheStats stats = cache->stats();
        if (first == 0) return "lookup failed";
        if (stats.invalidated != 1) return "sbrk(-) did not invalidate the region";
        if (backend.is_live(first)) return "the old registration is still live";
        return "";
    });
    EXPECT_EQ("", error);
}

TEST(RcacheEvents, RegionInUseStaysRegisteredUntilReleased) {
    const std::size_t length = 4 * kPage;
    auto* p = static_cast<char*>(map_at(nullptr, length));
    ASSERT_NE(MAP_FAILED, static_cast<void*>(p));
    TestBackend backend;
    auto cache = make_cache(backend, MemEventsMode::hooks);
    RcacheRegion* held = nullptr;
    ASSERT_EQ(Status::ok, cache->lookup(p, length, 1, held));
    const std::uint64_t id = TestBackend::id_of(held);

    ASSERT_EQ(0, ::munmap(p, length));
    // Nothing happens inside munmap(): the event waits for the next cache operation.
    EXPECT_FALSE(held->invalidated());
    EXPECT_TRUE(backend.is_live(id));
    RcacheStats stats = cache->stats();
    EXPECT_EQ(1u, stats.invalidated);
    EXPECT_TRUE(held->invalidated());
    EXPECT_TRUE(backend.is_live(id));  // the holder may still be using it
    EXPECT_EQ(1u, stats.regions);
    EXPECT_EQ(0u, stats.unreferenced);

    ASSERT_EQ(p, map_at(p, length, MAP_FIXED_NOREPLACE));
    RcacheRegion* fresh = nullptr;
    ASSERT_EQ(Status::ok, cache->lookup(p, length, 1, fresh));
    EXPECT_NE(held, fresh);  // never handed out again
    EXPECT_EQ(2u, cache->stats().regions);

    cache->release(held);
    EXPECT_FALSE(backend.is_live(id));
    EXPECT_EQ(1u, cache->stats().regions);
    cache->release(fresh);
    cache.reset();
    ::munmap(p, length);
    EXPECT_TRUE(backend.errors().empty());
}

TEST(RcacheEvents, UserModeFollowsTheApplicationsNotifications) {
    const std::size_t length = 2 * kPage;
    auto* p = static_cast<char*>(map_at(nullptr, length));
    ASSERT_NE(MAP_FAILED, static_cast<void*>(p));
    TestBackend backend;
    auto cache = make_cache(backend, MemEventsMode::user);
    const std::uint64_t first = send_once(*cache, p, length);
    memory_event_notify(p + kPage, 1);
    EXPECT_EQ(1u, cache->stats().invalidated);
    EXPECT_FALSE(backend.is_live(first));
    EXPECT_NE(first, send_once(*cache, p, length));
    ::munmap(p, length);
}

TEST(RcacheEvents, UnmapWhileRegisteringIsNotLost) {
    const std::size_t length = 2 * kPage;
    auto* p = static_cast<char*>(map_at(nullptr, length));
    ASSERT_NE(MAP_FAILED, static_cast<void*>(p));
    TestBackend backend;
    auto cache = make_cache(backend, MemEventsMode::hooks);
    // As if another thread unmapped the memory while the device registered it.
    bool once = true;
    backend.set_on_register([&once](std::uintptr_t start, std::uintptr_t end) {
        if (once) memory_event_notify(reinterpret_cast<void*>(start), end - start);
        once = false;
    });
    const std::uint64_t first = send_once(*cache, p, length);
    ASSERT_NE(0u, first);
    const std::uint64_t second = send_once(*cache, p, length);
    EXPECT_NE(first, second);
    EXPECT_FALSE(backend.is_live(first));
    ::munmap(p, length);
}

TEST(RcacheEvents, EveryCacheReceivesTheEvents) {
    const std::size_t length = 2 * kPage;
    auto* p = static_cast<char*>(map_at(nullptr, length));
    ASSERT_NE(MAP_FAILED, static_cast<void*>(p));
    TestBackend backend_a;
    TestBackend backend_b;
    auto a = make_cache(backend_a, MemEventsMode::hooks);
    auto b = make_cache(backend_b, MemEventsMode::hooks);
    const std::uint64_t id_a = send_once(*a, p, length);
    const std::uint64_t id_b = send_once(*b, p, kPage);
    ASSERT_EQ(0, ::munmap(p, kPage));
    EXPECT_EQ(1u, a->stats().invalidated);
    EXPECT_EQ(1u, b->stats().invalidated);
    EXPECT_FALSE(backend_a.is_live(id_a));
    EXPECT_FALSE(backend_b.is_live(id_b));
    ::munmap(p, length);
}

}  // namespace
}  // namespace loom::ucs
