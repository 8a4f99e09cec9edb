#include "common/test_helpers.h"

#include "ucs/datastruct/hash_list.h"

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace loom::ucs {
namespace {

struct Recv {
    Recv(std::uint64_t t, int s) : tag(t), seq(s) {}
    ListLink hlink;
    std::uint64_t tag;
    int seq;
};

using RecvTable = HashList<Recv, &Recv::hlink, &Recv::tag>;

/** Pops every element of @p tag and returns their sequence numbers. */
std::vector<int> drain(RecvTable& table, std::uint64_t tag) {
    std::vector<int> out;
    while (Recv* r = table.pop(tag)) {
        EXPECT_EQ(tag, r->tag);
        out.push_back(r->seq);
    }
    return out;
}

std::vector<int> ints(std::initializer_list<int> v) {
    return v;
}

TEST(HashList, InitRejectsBadBucketCounts) {
    test::LogCapture capture("error");
    for (std::size_t bad : {std::size_t{0}, std::size_t{3}, std::size_t{100}, RecvTable::kMaxBuckets * 2}) {
        RecvTable table;
        EXPECT_EQ(Status::invalid_param, table.init(bad)) << bad;
        EXPECT_EQ(0u, table.num_buckets());
    }
    EXPECT_EQ(1, capture.count("size 100 is not a power of two"));

    RecvTable table;
    ASSERT_EQ(Status::ok, table.init(8));
    EXPECT_EQ(Status::invalid_param, table.init(8)) << "second init";
    EXPECT_EQ(8u, table.num_buckets());
}

TEST(HashList, EmptyAndUninitializedTables) {
    RecvTable uninitialized;
    EXPECT_TRUE(uninitialized.empty());
    EXPECT_EQ(nullptr, uninitialized.find(1));
    EXPECT_EQ(nullptr, uninitialized.pop(1));

    RecvTable table;
    ASSERT_EQ(Status::ok, table.init(16));
    EXPECT_TRUE(table.empty());
    EXPECT_EQ(nullptr, table.find(42));
    EXPECT_EQ(nullptr, table.pop(42));
    EXPECT_EQ(0u, table.count(42));
}

TEST(HashList, InsertFindRemove) {
    RecvTable table;
    ASSERT_EQ(Status::ok, table.init(16));
    Recv a(10, 0), b(20, 1), c(30, 2);
    table.insert(a);
    table.insert(b);
    table.insert(c);
    EXPECT_EQ(3u, table.size());
    EXPECT_EQ(&a, table.find(10));
    EXPECT_EQ(&b, table.find(20));
    EXPECT_EQ(&c, table.find(30));
    EXPECT_EQ(nullptr, table.find(40));

    table.remove(b);
    EXPECT_EQ(2u, table.size());
    EXPECT_EQ(nullptr, table.find(20));
    EXPECT_FALSE(b.hlink.linked());
    EXPECT_EQ(&a, table.pop(10));
    EXPECT_EQ(&c, table.pop(30));
    EXPECT_TRUE(table.empty());
}

TEST(HashList, FifoPerKeyWhenEverythingCollides) {
    // One bucket: every key collides, and each key must still come out in insertion order.
    RecvTable table;
    ASSERT_EQ(Status::ok, table.init(1));
    std::vector<Recv> recvs;
    recvs.reserve(9);
    for (int i = 0; i < 9; ++i) recvs.emplace_back(100 + i % 3, i);  // keys 100,101,102,100,...
    for (Recv& r : recvs) table.insert(r);

    EXPECT_EQ(3u, table.count(101));
    Recv* first = table.find(101);
    ASSERT_NE(nullptr, first);
    EXPECT_EQ(1, first->seq);
    Recv* second = table.find_next(*first);
    ASSERT_NE(nullptr, second);
    EXPECT_EQ(4, second->seq);
    Recv* third = table.find_next(*second);
    ASSERT_NE(nullptr, third);
    EXPECT_EQ(7, third->seq);
    EXPECT_EQ(nullptr, table.find_next(*third));

    EXPECT_EQ(ints({1, 4, 7}), drain(table, 101));
    EXPECT_EQ(ints({0, 3, 6}), drain(table, 100));
    EXPECT_EQ(ints({2, 5, 8}), drain(table, 102));
    EXPECT_TRUE(table.empty());
}

TEST(HashList, CollidingKeysInALargerTable) {
    RecvTable table;
    ASSERT_EQ(Status::ok, table.init(64));
    // Find three distinct keys that share a bucket.
    std::uint64_t k0 = 7;
    std::vector<std::uint64_t> keys{k0};
    for (std::uint64_t k = k0 + 1; keys.size() < 3; ++k) {
        if (table.bucket_index(k) == table.bucket_index(k0)) keys.push_back(k);
    }
    std::vector<Recv> recvs;
    recvs.reserve(12);
    for (int i = 0; i < 12; ++i) recvs.emplace_back(keys[i % 3], i);
    for (Recv& r : recvs) table.insert(r);

    // Remove from the middle of one key's run: order of the rest is kept.
    table.remove(recvs[4]);  // key 1, second
    EXPECT_EQ(ints({1, 7, 10}), drain(table, keys[1]));
    EXPECT_EQ(ints({0, 3, 6, 9}), drain(table, keys[0]));
    EXPECT_EQ(ints({2, 5, 8, 11}), drain(table, keys[2]));
    EXPECT_TRUE(table.empty());
}

TEST(HashList, HashSpreadsStructuredKeys) {
    // Tags often differ only in their high bits; a plain mask would put them all in bucket 0.
    RecvTable table;
    ASSERT_EQ(Status::ok, table.init(64));
    std::set<std::size_t> buckets;
    for (std::uint64_t i = 0; i < 64; ++i) buckets.insert(table.bucket_index(i << 40));
    EXPECT_GE(buckets.size(), 32u);
}

TEST(HashList, RehashKeepsElementsAndOrder) {
    RecvTable table;
    ASSERT_EQ(Status::ok, table.init(2));
    std::vector<Recv> recvs;
    recvs.reserve(40);
    for (int i = 0; i < 40; ++i) recvs.emplace_back(static_cast<std::uint64_t>(i % 5), i);
    for (Recv& r : recvs) table.insert(r);

    {
        test::LogCapture capture("error");
        EXPECT_EQ(Status::invalid_param, table.rehash(48));
    }
    EXPECT_EQ(2u, table.num_buckets()) << "a failed rehash leaves the table as it was";
    EXPECT_EQ(40u, table.size());

    ASSERT_EQ(Status::ok, table.rehash(256));
    EXPECT_EQ(256u, table.num_buckets());
    EXPECT_EQ(40u, table.size());
    for (std::uint64_t key = 0; key < 5; ++key) {
        std::vector<int> expected;
        for (int i = static_cast<int>(key); i < 40; i += 5) expected.push_back(i);
        EXPECT_EQ(expected, drain(table, key)) << "key " << key;
    }
    EXPECT_TRUE(table.empty());
}

TEST(HashList, RehashAsFirstSetUp) {
    RecvTable table;
    ASSERT_EQ(Status::ok, table.rehash(4));
    Recv r(1, 0);
    table.insert(r);
    EXPECT_EQ(&r, table.pop(1));
}

TEST(HashList, ForEachMayRemoveAndClearUnlinks) {
    RecvTable table;
    ASSERT_EQ(Status::ok, table.init(8));
    std::vector<Recv> recvs;
    recvs.reserve(20);
    for (int i = 0; i < 20; ++i) recvs.emplace_back(static_cast<std::uint64_t>(i), i);
    for (Recv& r : recvs) table.insert(r);

    int visited = 0;
    table.for_each([&](Recv& r) {
        ++visited;
        if (r.seq % 2 == 0) table.remove(r);
    });
    EXPECT_EQ(20, visited);
    EXPECT_EQ(10u, table.size());
    for (int i = 0; i < 20; ++i)
        EXPECT_EQ(i % 2 != 0, table.find(static_cast<std::uint64_t>(i)) != nullptr) << i;

    table.clear();
    EXPECT_TRUE(table.empty());
    for (Recv& r : recvs) EXPECT_FALSE(r.hlink.linked());
    table.insert(recvs[3]);
    EXPECT_EQ(&recvs[3], table.find(3));
}

TEST(HashList, MatchesAModelUnderRandomOperations) {
    RecvTable table;
    ASSERT_EQ(Status::ok, table.init(16));
    constexpr int kCount = 2000;
    std::vector<Recv> recvs;
    recvs.reserve(kCount);
    std::map<std::uint64_t, std::deque<Recv*>> model;
    std::mt19937_64 rng(12345);
    std::size_t in_table = 0;

    for (int i = 0; i < kCount; ++i) {
        recvs.emplace_back(rng() % 37, i);
        table.insert(recvs.back());
        model[recvs.back().tag].push_back(&recvs.back());
        ++in_table;
        switch (rng() % 4) {
            case 0: {  // pop the oldest of a random key
                std::uint64_t key = rng() % 37;
                Recv* got = table.pop(key);
                auto& q = model[key];
                if (q.empty()) {
                    EXPECT_EQ(nullptr, got);
                } else {
                    EXPECT_EQ(q.front(), got);
                    q.pop_front();
                    --in_table;
                }
                break;
            }
            case 1: {  // remove an arbitrary element of a random key
                auto& q = model[rng() % 37];
                if (!q.empty()) {
                    std::size_t idx = rng() % q.size();
                    table.remove(*q[idx]);
                    q.erase(q.begin() + static_cast<std::ptrdiff_t>(idx));
                    --in_table;
                }
                break;
            }
            default:
                break;
        }
        ASSERT_EQ(in_table, table.size());
    }
    for (auto& [key, q] : model) {
        std::vector<int> expected;
        for (Recv* r : q) expected.push_back(r->seq);
        EXPECT_EQ(expected, drain(table, key)) << "key " << key;
    }
    EXPECT_TRUE(table.empty());
}

}  // namespace
}  // namespace loom::ucs
