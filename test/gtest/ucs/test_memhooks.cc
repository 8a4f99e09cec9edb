/*
 * Memory events: the interposed functions, the listeners and their queue. Tests that
 * change the malloc state (mallopt, the program break) run in a child process.
 */
#include "common/forked_peer.h"
#include "common/test_helpers.h"

#include "ucs/memory/memhooks.h"
#include "ucs/memory/pages.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <stdlib.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace loom::ucs {
namespace {

using Range = MemEventListener::Range;

const std::size_t kPage = page_size();

std::uintptr_t addr_of(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

/** Everything queued in @p listener. */
std::vector<Range> drain(MemEventListener& listener) {
    Range ranges[MemEventListener::kCapacity];
    const std::size_t n = listener.drain(ranges);
    return std::vector<Range>(ranges, ranges + n);
}

/** True when one of @p ranges contains [start, end). */
bool covered(const std::vector<Range>& ranges, std::uintptr_t start, std::uintptr_t end) {
    for (const Range& r : ranges) {
        if (r.start <= start && r.end >= end) return true;
    }
    return false;
}

/** True when one of @p ranges overlaps [start, end). */
bool touched(const std::vector<Range>& ranges, std::uintptr_t start, std::uintptr_t end) {
    for (const Range& r : ranges) {
        if (r.start < end && start < r.end) return true;
    }
    return false;
}

std::string describe(const std::vector<Range>& ranges) {
    std::string text;
    for (const Range& r : ranges) text += fmt::format(" [{:#x}, {:#x})", r.start, r.end);
    return text.empty() ? " nothing" : text;
}

/** A listener in @p mode watching [start, end) for the lifetime of the object. */
class Watcher {
public:
    Watcher(std::uintptr_t start, std::uintptr_t end, MemEventsMode mode = MemEventsMode::hooks)
        : start_(start), end_(end) {
        status_ = listener_.start(mode);
        if (status_ == Status::ok) listener_.watch(start_, end_);
    }
    ~Watcher() {
        if (status_ == Status::ok) listener_.unwatch(start_, end_);
    }
    Status status() const { return status_; }
    MemEventListener& listener() { return listener_; }
    std::vector<Range> events() { return drain(listener_); }

private:
    MemEventListener listener_;
    std::uintptr_t start_;
    std::uintptr_t end_;
    Status status_;
};

void* map_anonymous(std::size_t length, int flags = MAP_PRIVATE) {
    void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, flags | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
    return p;
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

bool free_is_seen_through_glibc() { return mem_hooks_info().free_events == FreeEvents::glibc; }

/** glibc's size word in front of a block (see memhooks_interpose.cc). */
__attribute__((noinline)) std::size_t glibc_size_word(const void* p) {
    const std::uintptr_t header = reinterpret_cast<std::uintptr_t>(p) - sizeof(std::size_t);
    return *reinterpret_cast<const volatile std::size_t*>(header);
}

TEST(MemHooks, ProbeSeesTheInterposedFunctions) {
    const MemHooksInfo& info = mem_hooks_info();
    EXPECT_TRUE(info.unmap_hooks) << info.detail;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    // The sanitizer's free() comes first and never calls Loom's: its free hook reports instead.
    EXPECT_EQ(FreeEvents::sanitizer, info.free_events) << info.detail;
#else
    EXPECT_EQ(FreeEvents::glibc, info.free_events) << info.detail;
#endif
    EXPECT_EQ(&info, &mem_hooks_info());
    EXPECT_EQ("glibc", to_string(FreeEvents::glibc));
    EXPECT_EQ("sanitizer", to_string(FreeEvents::sanitizer));
}

TEST(MemHooks, ModeComesFromLoomMemEvents) {
    {
        loom::test::ScopedEnv unset("LOOM_MEM_EVENTS", std::nullopt);
        Result<MemEventsMode> mode = read_mem_events_mode();
        ASSERT_TRUE(mode.ok());
        EXPECT_EQ(MemEventsMode::hooks, *mode);
        mode = read_mem_events_mode({{"MEM_EVENTS", "user"}});
        ASSERT_TRUE(mode.ok());
        EXPECT_EQ(MemEventsMode::user, *mode);
    }
    {
        loom::test::ScopedEnv none("LOOM_MEM_EVENTS", "NONE");
        Result<MemEventsMode> mode = read_mem_events_mode();
        ASSERT_TRUE(mode.ok());
        EXPECT_EQ(MemEventsMode::none, *mode);
    }
    {
        loom::test::LogCapture capture("error");
        loom::test::ScopedEnv bad("LOOM_MEM_EVENTS", "always");
        EXPECT_EQ(Status::invalid_config, read_mem_events_mode().status());
        EXPECT_GE(capture.count("LOOM_MEM_EVENTS"), 1);
    }
    EXPECT_EQ("hooks", to_string(MemEventsMode::hooks));
    EXPECT_EQ("user", to_string(MemEventsMode::user));
    EXPECT_EQ("none", to_string(MemEventsMode::none));
}

TEST(MemHooks, ListenerRejectsModeNoneAndASecondStart) {
    loom::test::LogCapture capture("error");
    MemEventListener listener;
    EXPECT_EQ(Status::invalid_param, listener.start(MemEventsMode::none));
    EXPECT_FALSE(listener.started());
    ASSERT_EQ(Status::ok, listener.start(MemEventsMode::user));
    EXPECT_TRUE(listener.started());
    EXPECT_EQ(MemEventsMode::user, listener.mode());
    EXPECT_EQ(Status::invalid_param, listener.start(MemEventsMode::hooks));
    EXPECT_EQ(1, capture.count("cannot listen in mode 'none'"));
    EXPECT_EQ(1, capture.count("already started"));
    listener.stop();
    EXPECT_FALSE(listener.started());
    EXPECT_EQ(Status::ok, listener.start(MemEventsMode::hooks));  // again after stop()
}

TEST(MemHooks, MunmapIsReported) {
    auto* p = static_cast<char*>(map_anonymous(4 * kPage));
    Watcher watcher(addr_of(p), addr_of(p) + 4 * kPage);
    ASSERT_EQ(Status::ok, watcher.status());
    EXPECT_FALSE(watcher.listener().pending());
    ASSERT_EQ(0, ::munmap(p + kPage, kPage));
    EXPECT_TRUE(watcher.listener().pending());
    std::vector<Range> events = watcher.events();
    EXPECT_TRUE(covered(events, addr_of(p + kPage), addr_of(p + 2 * kPage))) << describe(events);
    EXPECT_FALSE(touched(events, addr_of(p), addr_of(p + kPage))) << describe(events);
    EXPECT_FALSE(watcher.listener().pending());
    ::munmap(p, 4 * kPage);
    EXPECT_TRUE(covered(watcher.events(), addr_of(p), addr_of(p + 4 * kPage)));
}

TEST(MemHooks, EventsFarFromWatchedRangesAreNotQueued) {
    // 64 MiB apart: the two ranges never share a slot of the event filter.
    constexpr std::size_t kSpan = 128u << 20;
    void* reserve = ::mmap(nullptr, kSpan, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    ASSERT_NE(MAP_FAILED, reserve);
    auto* base = static_cast<char*>(reserve);
    char* far = base + (64u << 20);
    Watcher watcher(addr_of(base), addr_of(base) + 2 * kPage);
    ASSERT_EQ(Status::ok, watcher.status());
    ASSERT_EQ(0, ::munmap(far, kPage));
    ASSERT_EQ(0, ::madvise(far + kPage, kPage, MADV_DONTNEED));
    memory_event_notify(far + 2 * kPage, kPage);
    std::vector<Range> events = watcher.events();
    EXPECT_FALSE(touched(events, addr_of(far), addr_of(far) + 3 * kPage)) << describe(events);
    ::munmap(base, kSpan);
    EXPECT_TRUE(covered(watcher.events(), addr_of(base), addr_of(base) + 2 * kPage));
}

TEST(MemHooks, EventsNextToWatchedPagesAreNotQueued) {
    auto* p = static_cast<char*>(map_anonymous(8 * kPage));
    const std::uintptr_t watched = addr_of(p + 2 * kPage);
    Watcher watcher(watched, watched + kPage);
    ASSERT_EQ(Status::ok, watcher.status());
    memory_event_notify(p, 2 * kPage);             // the pages just below
    memory_event_notify(p + 3 * kPage, 10);        // just above
    ASSERT_EQ(0, ::munmap(p + 4 * kPage, kPage));  // a neighbour in the same 256 KiB block
    EXPECT_FALSE(watcher.listener().pending()) << describe(watcher.events());
    memory_event_notify(p + 3 * kPage - 1, 1);  // the last byte of the watched page
    std::vector<Range> events = watcher.events();
    EXPECT_TRUE(covered(events, watched + kPage - 1, watched + kPage)) << describe(events);
    ::munmap(p, 8 * kPage);
}

TEST(MemHooks, MremapReportsTheOldRangeAndAFixedTarget) {
    auto* p = static_cast<char*>(map_anonymous(8 * kPage));
    Watcher watcher(addr_of(p), addr_of(p) + 8 * kPage);
    ASSERT_EQ(Status::ok, watcher.status());
    // Shrink in place: the tail goes away (reported as the whole old range).
    ASSERT_EQ(p, ::mremap(p, 8 * kPage, 4 * kPage, 0));
    std::vector<Range> events = watcher.events();
    EXPECT_TRUE(covered(events, addr_of(p), addr_of(p) + 8 * kPage)) << describe(events);

    // Move onto a fixed address: the old range and whatever was at the target go.
    char* target = p + 4 * kPage;
    ASSERT_NE(MAP_FAILED, ::mmap(target, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                                 -1, 0));
    (void)watcher.events();
    ASSERT_EQ(target, ::mremap(p, 2 * kPage, 2 * kPage, MREMAP_MAYMOVE | MREMAP_FIXED, target));
    events = watcher.events();
    EXPECT_TRUE(covered(events, addr_of(p), addr_of(p) + 2 * kPage)) << describe(events);
    EXPECT_TRUE(covered(events, addr_of(target), addr_of(target) + 2 * kPage)) << describe(events);
    ::munmap(p, 8 * kPage);
}

TEST(MemHooks, MadviseReportsOnlyAdvicesThatDropPages) {
    auto* p = static_cast<char*>(map_anonymous(4 * kPage));
    auto* shared = static_cast<char*>(map_anonymous(kPage, MAP_SHARED));
    Watcher watcher(addr_of(p), addr_of(p) + 4 * kPage);
    ASSERT_EQ(Status::ok, watcher.status());
    MemEventListener shared_listener;
    ASSERT_EQ(Status::ok, shared_listener.start(MemEventsMode::hooks));
    shared_listener.watch(addr_of(shared), addr_of(shared) + kPage);

    for (int advice : {MADV_WILLNEED, MADV_NORMAL, MADV_DONTFORK, MADV_DOFORK, MADV_SEQUENTIAL}) {
        ASSERT_EQ(0, ::madvise(p, kPage, advice)) << advice;
        std::vector<Range> events = watcher.events();
        EXPECT_FALSE(touched(events, addr_of(p), addr_of(p) + kPage)) << "advice " << advice << describe(events);
    }
    int page = 0;
    for (int advice : {MADV_DONTNEED, MADV_FREE}) {
        ASSERT_EQ(0, ::madvise(p + page * kPage, kPage, advice)) << advice;
        std::vector<Range> events = watcher.events();
        EXPECT_TRUE(covered(events, addr_of(p + page * kPage), addr_of(p + (page + 1) * kPage)))
            << "advice " << advice << describe(events);
        ++page;
    }
    // MADV_REMOVE punches a hole in shared memory.
    ASSERT_EQ(0, ::madvise(shared, kPage, MADV_REMOVE));
    std::vector<Range> events = drain(shared_listener);
    EXPECT_TRUE(covered(events, addr_of(shared), addr_of(shared) + kPage)) << describe(events);
    shared_listener.unwatch(addr_of(shared), addr_of(shared) + kPage);
    ::munmap(shared, kPage);
    ::munmap(p, 4 * kPage);
}

TEST(MemHooks, MapFixedIsReportedAndMapFixedNoReplaceIsNot) {
    auto* p = static_cast<char*>(map_anonymous(4 * kPage));
    ASSERT_EQ(0, ::munmap(p + 2 * kPage, 2 * kPage));  // a hole
    Watcher watcher(addr_of(p), addr_of(p) + 4 * kPage);
    ASSERT_EQ(Status::ok, watcher.status());
    ASSERT_EQ(p + 2 * kPage, ::mmap(p + 2 * kPage, kPage, PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0));
    std::vector<Range> events = watcher.events();
    EXPECT_FALSE(touched(events, addr_of(p), addr_of(p) + 4 * kPage)) << describe(events);
    ASSERT_EQ(p, ::mmap(p, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
    events = watcher.events();
    EXPECT_TRUE(covered(events, addr_of(p), addr_of(p) + kPage)) << describe(events);
    ::munmap(p, 4 * kPage);
}

TEST(MemHooks, ShmatRemapAndShmdtAreReported) {
    const std::size_t size = 3 * kPage;
    const int id = ::shmget(IPC_PRIVATE, size, IPC_CREAT | 0600);
    if (id < 0) GTEST_SKIP() << "System V shared memory is not available here: " << std::strerror(errno);
    void* attached = ::shmat(id, nullptr, 0);
    (void)::shmctl(id, IPC_RMID, nullptr);  // goes when detached
    ASSERT_NE(reinterpret_cast<void*>(-1), attached);
    auto* base = static_cast<char*>(attached);
    Watcher watcher(addr_of(base), addr_of(base) + size);
    ASSERT_EQ(Status::ok, watcher.status());
    // Split the attachment in two mappings: the whole segment must still be reported.
    ASSERT_EQ(0, ::mprotect(base + kPage, kPage, PROT_READ));
    ASSERT_EQ(0, ::shmdt(base));
    std::vector<Range> events = watcher.events();
    EXPECT_TRUE(covered(events, addr_of(base), addr_of(base) + size)) << describe(events);

    // SHM_REMAP attaches over an existing mapping, replacing it.
    auto* p = static_cast<char*>(map_anonymous(4 * kPage));
    Watcher over(addr_of(p), addr_of(p) + 4 * kPage);
    const int id2 = ::shmget(IPC_PRIVATE, kPage, IPC_CREAT | 0600);
    ASSERT_GE(id2, 0);
    void* remapped = ::shmat(id2, p + kPage, SHM_REMAP);
    (void)::shmctl(id2, IPC_RMID, nullptr);
    ASSERT_EQ(p + kPage, remapped);
    events = over.events();
    EXPECT_TRUE(covered(events, addr_of(p) + kPage, addr_of(p) + 2 * kPage)) << describe(events);
    ASSERT_EQ(0, ::shmdt(remapped));
    ::munmap(p, 4 * kPage);
}

TEST(MemHooks, BrkAndSbrkShrinkAreReported) {
    // In a child: moving the program break under malloc's feet is not for the test process.
    const std::string error = in_child([]() -> std::string {
        (void)mem_hooks_info();  // probe first: nothing may allocate between the break moves below
        MemEventListener listener;
        if (listener.start(MemEventsMode::hooks) != Status::ok) return "cannot start a listener";
        const std::size_t page = page_size();
        void* base = ::sbrk(0);
        if (::sbrk(static_cast<intptr_t>(2 * page)) == reinterpret_cast<void*>(-1)) return "sbrk(+) failed";
        const std::uintptr_t b = addr_of(base);
        listener.watch(b, b + 2 * page);
        void* before = ::sbrk(-static_cast<intptr_t>(page));
        Range ranges[MemEventListener::kCapacity];
        std::size_t n = listener.drain(ranges);
        const bool shrink_seen = covered(std::vector<Range>(ranges, ranges + n), b + page, b + 2 * page);
        const int brk_result = ::brk(base);
        n = listener.drain(ranges);
        const bool brk_seen = covered(std::vector<Range>(ranges, ranges + n), b, b + page);
        listener.unwatch(b, b + 2 * page);
        if (before != reinterpret_cast<void*>(b + 2 * page)) return "sbrk(-) did not return the old break";
        if (brk_result != 0) return "brk failed";
        if (!shrink_seen) return "sbrk(-page) was not reported";
        if (!brk_seen) return "brk(lower) was not reported";
        return "";
    });
    EXPECT_EQ("", error);
}

TEST(MemHooks, FreeOfAMappedBlockIsReported) {
    // Larger than glibc's largest mmap threshold (32 MiB): always a mapping of its own.
    constexpr std::size_t kSize = 64u << 20;
    void* p = std::malloc(kSize);
    ASSERT_NE(nullptr, p);
    if (free_is_seen_through_glibc()) {
        EXPECT_NE(0u, glibc_size_word(p) & 2) << "not an mmapped block";
    }
    Watcher watcher(addr_of(p), addr_of(p) + kSize);
    ASSERT_EQ(Status::ok, watcher.status());
    std::free(p);
    std::vector<Range> events = watcher.events();
    EXPECT_TRUE(covered(events, addr_of(p), addr_of(p) + kSize)) << describe(events);
}

TEST(MemHooks, ReallocOfAMappedBlockIsReported) {
    constexpr std::size_t kSize = 64u << 20;
    void* p = std::malloc(kSize);
    ASSERT_NE(nullptr, p);
    static_cast<char*>(p)[0] = 1;
    {
        Watcher watcher(addr_of(p), addr_of(p) + kSize);
        ASSERT_EQ(Status::ok, watcher.status());
        void* q = std::realloc(p, 2 * kSize);  // mremap inside glibc, or a copy
        ASSERT_NE(nullptr, q);
        std::vector<Range> events = watcher.events();
        EXPECT_TRUE(covered(events, addr_of(p), addr_of(p) + kSize)) << describe(events);
        p = q;
    }
    {
        Watcher watcher(addr_of(p), addr_of(p) + 2 * kSize);
        void* q = ::reallocarray(p, 2, kSize / 2);
        ASSERT_NE(nullptr, q);
        std::vector<Range> events = watcher.events();
        EXPECT_TRUE(covered(events, addr_of(p), addr_of(p) + kSize)) << describe(events);
        p = q;
    }
    std::free(p);
}

TEST(MemHooks, FreeOfASmallBlockOfTheMainArena) {
    void* p = std::malloc(64);
    ASSERT_NE(nullptr, p);
    Watcher watcher(addr_of(p), addr_of(p) + 64);
    ASSERT_EQ(Status::ok, watcher.status());
    std::free(p);
    std::vector<Range> events = watcher.events();
    if (free_is_seen_through_glibc()) {
        // The main arena keeps its pages: only a trim of the heap would matter.
        EXPECT_FALSE(touched(events, addr_of(p), addr_of(p) + 64)) << describe(events);
    } else {
        // The sanitizer reports every block it takes back (and later unmaps unseen).
        EXPECT_TRUE(covered(events, addr_of(p), addr_of(p) + 64)) << describe(events);
    }
}

TEST(MemHooks, TrimOfTheMainHeapIsReported) {
    const std::string error = in_child([]() -> std::string {
        // Blocks of 4 MiB from the heap (not mmap), and a heap trimmed above 128 KiB free.
        ::mallopt(M_MMAP_THRESHOLD, 16 << 20);
        ::mallopt(M_TRIM_THRESHOLD, 128 << 10);
        ::mallopt(M_TOP_PAD, 0);
        constexpr std::size_t kSize = 4u << 20;
        (void)mem_hooks_info();
        MemEventListener listener;
        if (listener.start(MemEventsMode::hooks) != Status::ok) return "cannot start a listener";
        void* p = std::malloc(kSize);
        if (p == nullptr) return "malloc failed";
        static_cast<char*>(p)[kSize - 1] = 1;
        const std::uintptr_t start = addr_of(p);
        const bool glibc = mem_hooks_info().free_events == FreeEvents::glibc;
        if (glibc && (glibc_size_word(p) & 6) != 0) return "the block is not from the main heap";
        const std::uintptr_t brk_before = addr_of(::sbrk(0));
        listener.watch(start, start + kSize);
        std::free(p);
        const std::uintptr_t brk_after = addr_of(::sbrk(0));
        Range ranges[MemEventListener::kCapacity];
        const std::size_t n = listener.drain(ranges);
        listener.unwatch(start, start + kSize);
        const std::vector<Range> events(ranges, ranges + n);
        if (glibc && brk_after >= brk_before) return "free() did not trim the heap; the test needs it to";
        // glibc: the pages above the new break; the sanitizer: the block itself.
        if (!touched(events, start + page_size(), start + kSize)) return "no event for the trimmed pages:" + describe(events);
        return "";
    });
    EXPECT_EQ("", error);
}

TEST(MemHooks, FreeInAThreadArenaIsReported) {
    // Below any mmap threshold: from the heap of the thread's arena.
    constexpr std::size_t kSize = 32u << 10;
    std::vector<Range> events;
    std::uintptr_t start = 0;
    bool thread_arena = true;
    std::thread thread([&] {
        void* p = std::malloc(kSize);
        if (p == nullptr) return;
        // Written once so gcc 12 at -O0 does not take passing the fresh block to a
        // const void* parameter as a read of uninitialized memory (-Wmaybe-uninitialized).
        static_cast<char*>(p)[0] = 0;
        start = addr_of(p);
        if (free_is_seen_through_glibc()) thread_arena = (glibc_size_word(p) & 4) != 0;
        Watcher watcher(start, start + kSize);
        std::free(p);
        events = watcher.events();
    });
    thread.join();
    ASSERT_NE(0u, start);
    if (!thread_arena) GTEST_SKIP() << "glibc gave this thread the main arena (all arenas are in use)";
    EXPECT_TRUE(covered(events, start, start + kSize)) << describe(events);
}

TEST(MemHooks, MallocTrimReportsEverything) {
    auto* p = static_cast<char*>(map_anonymous(kPage));
    Watcher watcher(addr_of(p), addr_of(p) + kPage);
    ASSERT_EQ(Status::ok, watcher.status());
    (void)::malloc_trim(0);
    std::vector<Range> events = watcher.events();
    EXPECT_TRUE(covered(events, 0, UINTPTR_MAX)) << describe(events);
    ::munmap(p, kPage);
}

TEST(MemHooks, UserListenersIgnoreTheHooks) {
    auto* p = static_cast<char*>(map_anonymous(4 * kPage));
    Watcher user(addr_of(p), addr_of(p) + 4 * kPage, MemEventsMode::user);
    Watcher hooks(addr_of(p), addr_of(p) + 4 * kPage, MemEventsMode::hooks);
    ASSERT_EQ(Status::ok, user.status());
    ASSERT_EQ(Status::ok, hooks.status());
    ASSERT_EQ(0, ::munmap(p, kPage));
    EXPECT_FALSE(user.listener().pending());
    EXPECT_TRUE(covered(hooks.events(), addr_of(p), addr_of(p) + kPage));

    memory_event_notify(p + kPage, 10);  // both take the application's own events
    std::vector<Range> events = user.events();
    EXPECT_TRUE(covered(events, addr_of(p) + kPage, addr_of(p) + kPage + 10)) << describe(events);
    events = hooks.events();
    EXPECT_TRUE(covered(events, addr_of(p) + kPage, addr_of(p) + kPage + 10)) << describe(events);
    ::munmap(p, 4 * kPage);
}

TEST(MemHooks, AFullQueueMergesWithoutLosingRanges) {
    auto* p = static_cast<char*>(map_anonymous(512 * kPage));
    Watcher watcher(addr_of(p), addr_of(p) + 512 * kPage, MemEventsMode::user);
    ASSERT_EQ(Status::ok, watcher.status());
    // 200 separate pages: three times what the queue holds.
    for (std::size_t i = 0; i < 200; ++i) memory_event_notify(p + 2 * i * kPage + 1, kPage - 2);
    std::vector<Range> events = watcher.events();
    EXPECT_LE(events.size(), MemEventListener::kCapacity);
    EXPECT_GT(watcher.listener().merges(), 0u);
    for (std::size_t i = 0; i < 200; ++i) {
        const std::uintptr_t start = addr_of(p + 2 * i * kPage + 1);
        ASSERT_TRUE(covered(events, start, start + kPage - 2)) << "page " << i << " lost:" << describe(events);
    }
    // Merging takes the nearest neighbour: the merged ranges stay inside the notified span.
    for (const Range& r : events) {
        EXPECT_GE(r.start, addr_of(p));
        EXPECT_LE(r.end, addr_of(p) + 400 * kPage);
    }
    // Touching or overlapping ranges are merged without counting as an overflow.
    const std::uint64_t merges = watcher.listener().merges();
    memory_event_notify(p, kPage);
    memory_event_notify(p + kPage, kPage);
    memory_event_notify(p + kPage / 2, kPage);
    events = watcher.events();
    EXPECT_EQ(1u, events.size()) << describe(events);
    EXPECT_TRUE(covered(events, addr_of(p), addr_of(p) + 2 * kPage));
    EXPECT_EQ(merges, watcher.listener().merges());
    ::munmap(p, 512 * kPage);
}

TEST(MemHooks, NotifyIgnoresEmptyRangesAndClipsAtTheEnd) {
    const std::uintptr_t top = UINTPTR_MAX - 4 * kPage + 1;
    Watcher watcher(top, UINTPTR_MAX, MemEventsMode::user);
    ASSERT_EQ(Status::ok, watcher.status());
    memory_event_notify(reinterpret_cast<void*>(top), 0);
    EXPECT_FALSE(watcher.listener().pending());
    memory_event_notify(reinterpret_cast<void*>(top + kPage), 8 * kPage);  // would wrap around
    std::vector<Range> events = watcher.events();
    ASSERT_EQ(1u, events.size());
    EXPECT_EQ(top + kPage, events[0].start);
    EXPECT_EQ(UINTPTR_MAX, events[0].end);
}

TEST(MemHooks, StoppedListenersGetNothing) {
    auto* p = static_cast<char*>(map_anonymous(2 * kPage));
    MemEventListener listener;
    ASSERT_EQ(Status::ok, listener.start(MemEventsMode::hooks));
    listener.watch(addr_of(p), addr_of(p) + 2 * kPage);
    memory_event_notify(p, kPage);
    EXPECT_TRUE(listener.pending());
    listener.unwatch(addr_of(p), addr_of(p) + 2 * kPage);
    listener.stop();
    EXPECT_FALSE(listener.pending());  // stop() drops what was queued
    ::munmap(p, 2 * kPage);
    EXPECT_FALSE(listener.pending());
}

}  // namespace
}  // namespace loom::ucs
