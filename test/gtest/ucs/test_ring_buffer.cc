#include "common/test_helpers.h"

#include "ucs/datastruct/ring_buffer.h"
#include "ucs/datastruct/spsc_ring.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace loom::ucs {
namespace {

/** Counts live instances, to check that rings construct and destroy elements exactly once. */
struct Tracked {
    static inline int live = 0;
    explicit Tracked(int v) : value(v) { ++live; }
    Tracked(const Tracked& o) noexcept : value(o.value) { ++live; }
    Tracked(Tracked&& o) noexcept : value(o.value) { ++live; }
    Tracked& operator=(const Tracked&) = default;
    Tracked& operator=(Tracked&&) noexcept = default;
    ~Tracked() { --live; }
    int value;
};

// ----- RingBuffer (single-threaded) ------------------------------------------------

TEST(RingBuffer, UninitializedIsEmptyAndFull) {
    RingBuffer<int> ring;
    int out = 0;
    EXPECT_EQ(0u, ring.capacity());
    EXPECT_TRUE(ring.empty());
    EXPECT_TRUE(ring.full());
    EXPECT_FALSE(ring.try_push(1));
    EXPECT_FALSE(ring.try_pop(out));
    EXPECT_EQ(nullptr, ring.front());
}

TEST(RingBuffer, InitRejectsBadCapacity) {
    test::LogCapture capture("error");
    for (std::size_t bad :
         {std::size_t{0}, std::size_t{3}, std::size_t{6}, RingBuffer<int>::kMaxCapacity * 2}) {
        RingBuffer<int> ring;
        EXPECT_EQ(Status::invalid_param, ring.init(bad)) << bad;
        EXPECT_EQ(0u, ring.capacity());
    }
    EXPECT_EQ(1, capture.count("ring buffer: size 6 is not a power of two"));
    RingBuffer<int> ring;
    ASSERT_EQ(Status::ok, ring.init(4));
    EXPECT_EQ(Status::invalid_param, ring.init(8));
    EXPECT_EQ(4u, ring.capacity());
}

TEST(RingBuffer, CapacityOne) {
    RingBuffer<int> ring;
    ASSERT_EQ(Status::ok, ring.init(1));
    EXPECT_TRUE(ring.try_push(7));
    EXPECT_TRUE(ring.full());
    EXPECT_FALSE(ring.try_push(8));
    int out = 0;
    EXPECT_TRUE(ring.try_pop(out));
    EXPECT_EQ(7, out);
    EXPECT_TRUE(ring.empty());
    EXPECT_FALSE(ring.try_pop(out));
    EXPECT_EQ(7, out) << "a failed pop leaves the output alone";
}

TEST(RingBuffer, FullRingRejectsAndKeepsTheValue) {
    RingBuffer<std::unique_ptr<int>> ring;
    ASSERT_EQ(Status::ok, ring.init(4));
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(ring.try_push(std::make_unique<int>(i)));
    EXPECT_TRUE(ring.full());
    EXPECT_EQ(4u, ring.size());
    auto extra = std::make_unique<int>(99);
    EXPECT_FALSE(ring.try_push(std::move(extra)));
    ASSERT_NE(nullptr, extra) << "a rejected push must not consume the value";
    EXPECT_FALSE(ring.try_emplace(nullptr));
    std::unique_ptr<int> out;
    for (int i = 0; i < 4; ++i) {
        ASSERT_TRUE(ring.try_pop(out));
        EXPECT_EQ(i, *out);
    }
    EXPECT_TRUE(ring.empty());
}

TEST(RingBuffer, WrapsAroundInFifoOrder) {
    RingBuffer<int> ring;
    ASSERT_EQ(Status::ok, ring.init(4));
    int next_in = 0;
    int next_out = 0;
    // Batches of 3 in a ring of 4 move the slot index through every position many times.
    for (int round = 0; round < 100; ++round) {
        for (int i = 0; i < 3; ++i) ASSERT_TRUE(ring.try_push(next_in++));
        EXPECT_EQ(3u, ring.size());
        for (int i = 0; i < 3; ++i) {
            if (i == 0) {
                ASSERT_NE(nullptr, ring.front());
                EXPECT_EQ(next_out, *ring.front());
                ring.pop();
                ++next_out;
                continue;
            }
            int out = -1;
            ASSERT_TRUE(ring.try_pop(out));
            EXPECT_EQ(next_out++, out);
        }
        EXPECT_TRUE(ring.empty());
    }
    EXPECT_EQ(300, next_out);
}

TEST(RingBuffer, ElementsAreDestroyedExactlyOnce) {
    Tracked::live = 0;
    {
        RingBuffer<Tracked> ring;
        ASSERT_EQ(Status::ok, ring.init(8));
        for (int i = 0; i < 6; ++i) ASSERT_TRUE(ring.try_emplace(i));
        EXPECT_EQ(6, Tracked::live);
        Tracked out(-1);
        ASSERT_TRUE(ring.try_pop(out));
        EXPECT_EQ(0, out.value);
        EXPECT_EQ(6, Tracked::live);  // 5 queued + out
        ring.pop();
        EXPECT_EQ(5, Tracked::live);
        RingBuffer<Tracked> moved(std::move(ring));
        EXPECT_EQ(0u, ring.capacity());  // NOLINT(bugprone-use-after-move): defined as empty
        EXPECT_EQ(4u, moved.size());
        EXPECT_EQ(2, moved.front()->value);
        moved.clear();
        EXPECT_EQ(1, Tracked::live);
        EXPECT_EQ(8u, moved.capacity());
        for (int i = 0; i < 3; ++i) ASSERT_TRUE(moved.try_emplace(i));
    }
    EXPECT_EQ(0, Tracked::live) << "the destructor destroys what is still queued";
}

// ----- SpscRing ---------------------------------------------------------------------

TEST(SpscRing, ProducerAndConsumerStateOnSeparateCacheLines) {
    EXPECT_EQ(kCacheLineSize, alignof(SpscRing<int>));
    EXPECT_EQ(3 * kCacheLineSize, sizeof(SpscRing<std::uint64_t>));
}

TEST(SpscRing, SingleThreadBasics) {
    SpscRing<int> uninit;
    int out = 0;
    EXPECT_FALSE(uninit.try_push(1));
    EXPECT_FALSE(uninit.try_pop(out));

    {
        test::LogCapture capture("error");
        SpscRing<int> bad;
        EXPECT_EQ(Status::invalid_param, bad.init(12));
        EXPECT_EQ(Status::invalid_param, bad.init(0));
    }

    SpscRing<int> ring;
    ASSERT_EQ(Status::ok, ring.init(4));
    EXPECT_EQ(Status::invalid_param, ring.init(4));
    EXPECT_TRUE(ring.empty());
    EXPECT_EQ(nullptr, ring.front());
    for (int round = 0; round < 10; ++round) {
        for (int i = 0; i < 4; ++i) ASSERT_TRUE(ring.try_push(round * 4 + i));
        EXPECT_FALSE(ring.try_push(-1)) << "full";
        EXPECT_EQ(4u, ring.size());
        ASSERT_NE(nullptr, ring.front());
        EXPECT_EQ(round * 4, *ring.front());
        ring.pop();
        for (int i = 1; i < 4; ++i) {
            ASSERT_TRUE(ring.try_pop(out));
            EXPECT_EQ(round * 4 + i, out);
        }
        EXPECT_FALSE(ring.try_pop(out));
        EXPECT_TRUE(ring.empty());
    }
}

TEST(SpscRing, DestructorDestroysQueuedElements) {
    Tracked::live = 0;
    {
        SpscRing<Tracked> ring;
        ASSERT_EQ(Status::ok, ring.init(4));
        for (int i = 0; i < 3; ++i) ASSERT_TRUE(ring.try_emplace(i));
        EXPECT_EQ(3, Tracked::live);
    }
    EXPECT_EQ(0, Tracked::live);
}

struct Message {
    std::uint64_t seq;
    std::uint64_t check;  ///< ~seq: a torn or stale slot read shows up as a mismatch
};

TEST(SpscRing, TwoThreadsFifoWithoutLoss) {
    constexpr std::uint64_t kMessages = 200000;
    SpscRing<Message> ring;
    ASSERT_EQ(Status::ok, ring.init(64));  // small, so the ring is often full and often empty

    std::thread producer([&] {
        for (std::uint64_t i = 0; i < kMessages; ++i) {
            while (!ring.try_push(Message{i, ~i})) std::this_thread::yield();
        }
    });

    std::uint64_t expected = 0;
    std::uint64_t errors = 0;
    Message msg{};
    while (expected < kMessages) {
        if (!ring.try_pop(msg)) {
            std::this_thread::yield();
            continue;
        }
        if (msg.seq != expected || msg.check != ~expected) ++errors;
        expected = msg.seq + 1;
    }
    producer.join();
    EXPECT_EQ(0u, errors) << "messages lost, duplicated, reordered or torn";
    EXPECT_EQ(kMessages, expected);
    EXPECT_TRUE(ring.empty());
    EXPECT_FALSE(ring.try_pop(msg));
}

TEST(SpscRing, TwoThreadsMoveOwningElements) {
    // unique_ptr payloads: a slot constructed or destroyed twice, or never, is caught by ASan/LSan.
    constexpr int kMessages = 20000;
    SpscRing<std::unique_ptr<int>> ring;
    ASSERT_EQ(Status::ok, ring.init(16));
    std::thread producer([&] {
        for (int i = 0; i < kMessages; ++i) {
            auto value = std::make_unique<int>(i);
            while (!ring.try_push(std::move(value))) std::this_thread::yield();
        }
    });
    int expected = 0;
    int errors = 0;
    while (expected < kMessages) {
        std::unique_ptr<int>* front = ring.front();
        if (front == nullptr) {
            std::this_thread::yield();
            continue;
        }
        if (*front == nullptr || **front != expected) ++errors;
        ring.pop();
        ++expected;
    }
    producer.join();
    EXPECT_EQ(0, errors);
    EXPECT_TRUE(ring.empty());
}

}  // namespace
}  // namespace loom::ucs
