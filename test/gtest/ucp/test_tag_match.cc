#include "common/test_helpers.h"

#include "ucp/tag/tag_match.h"
#include "ucs/datastruct/intrusive.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace loom::ucp {
namespace {

/** A receive request as the protocol layer keeps it: the matcher's entry is embedded. */
struct Recv {
    explicit Recv(int i) : id(i) {}
    int id;
    TagRecvEntry entry;
};

/** An unexpected-message descriptor, likewise. */
struct Msg {
    explicit Msg(int i) : id(i) {}
    int id;
    TagUnexpEntry entry;
};

/** Id of the request embedding @p e, or -1 for nullptr (container_of is the real use). */
int id_of(const TagRecvEntry* e) {
    return e == nullptr ? -1 : ucs::container_of<&Recv::entry>(*e).id;
}

int id_of(const TagUnexpEntry* e) {
    return e == nullptr ? -1 : ucs::container_of<&Msg::entry>(*e).id;
}

// Shapes of tags an MPI library builds: communicator in the high half, rank/user tag low.
constexpr Tag kAnySource = 0xffffffff00000000ULL;  // keep the high half, ignore the low half
constexpr Tag kAnyTag = 0x00000000ffffffffULL;     // keep the low half, ignore the high half
constexpr Tag kAnything = 0;

/**
 * A matcher plus stable storage for requests and descriptors. The storage is declared
 * first so it outlives the matcher, whose destructor unlinks what is left.
 */
class TagMatchTest : public testing::Test {
protected:
    static constexpr std::size_t kBuckets = 16;

    void SetUp() override { ASSERT_EQ(Status::ok, tm_.init(kBuckets)); }

    /** A new receive request (not posted). */
    Recv& new_recv() { return recvs_.emplace_back(static_cast<int>(recvs_.size())); }

    /** Posts a new receive; returns its id, and the matched message's id in *msg_id (-1 if queued). */
    int post(Tag tag, Tag mask, int* msg_id = nullptr) {
        Recv& r = new_recv();
        int matched = id_of(tm_.post_recv(r.entry, tag, mask));
        EXPECT_EQ(matched < 0, r.entry.queued());
        if (msg_id != nullptr) *msg_id = matched;
        return r.id;
    }

    /** Posts a receive that must find the unexpected queue empty of matches; returns its id. */
    int post_expected(Tag tag, Tag mask = kTagMaskFull) {
        int msg = -2;
        int id = post(tag, mask, &msg);
        EXPECT_EQ(-1, msg) << "receive " << id << " matched an unexpected message";
        return id;
    }

    /** Posts a receive and returns the id of the unexpected message it took (-1: none, queued). */
    int post_take(Tag tag, Tag mask = kTagMaskFull) {
        int msg = -2;
        post(tag, mask, &msg);
        return msg;
    }

    /**
     * A message tagged @p tag arrives: returns the id of the receive it matched, or -1
     * after pushing it to the unexpected queue.
     */
    int arrive(Tag tag) {
        TagRecvEntry* recv = tm_.match_expected(tag);
        if (recv != nullptr) {
            EXPECT_FALSE(recv->queued());
            return id_of(recv);
        }
        Msg& m = msgs_.emplace_back(static_cast<int>(msgs_.size()));
        tm_.push_unexpected(m.entry, tag);
        return -1;
    }

    /** A message that no receive takes; returns its id. */
    int arrive_unexpected(Tag tag) {
        EXPECT_EQ(-1, arrive(tag)) << "message with tag " << tag << " matched a posted receive";
        return msgs_.back().id;
    }

    /** Tags that hash to the same bucket as @p first, @p first included. */
    std::vector<Tag> colliding_tags(Tag first, std::size_t n) const {
        std::vector<Tag> tags{first};
        for (Tag t = first + 1; tags.size() < n; ++t) {
            if (tm_.bucket_index(t) == tm_.bucket_index(first)) tags.push_back(t);
        }
        return tags;
    }

    std::deque<Recv> recvs_;
    std::deque<Msg> msgs_;
    TagMatcher tm_;
};

TEST(TagMatch, MatchRule) {
    EXPECT_TRUE(tag_matches(0x1234, 0x1234, kTagMaskFull));
    EXPECT_FALSE(tag_matches(0x1235, 0x1234, kTagMaskFull));
    EXPECT_TRUE(tag_matches(0x12ab, 0x1200, 0xff00));
    EXPECT_TRUE(tag_matches(0x12ab, 0x12ff, 0xff00)) << "bits outside the mask are ignored on both sides";
    EXPECT_FALSE(tag_matches(0x13ab, 0x1200, 0xff00));
    EXPECT_TRUE(tag_matches(0xdeadbeefULL, 0, kAnything));
}

TEST(TagMatch, InitRejectsBadBucketCounts) {
    test::LogCapture capture("error");
    for (std::size_t bad : {std::size_t{0}, std::size_t{3}, std::size_t{100}}) {
        TagMatcher tm;
        EXPECT_EQ(Status::invalid_param, tm.init(bad)) << bad;
    }
    TagMatcher tm;
    ASSERT_EQ(Status::ok, tm.init(64));
    EXPECT_EQ(64u, tm.num_buckets());
    EXPECT_EQ(Status::invalid_param, tm.init(64)) << "second init";
    EXPECT_EQ(64u, tm.num_buckets());
    EXPECT_EQ(1, capture.count("size 100 is not a power of two"));
}

TEST_F(TagMatchTest, EmptyQueues) {
    EXPECT_EQ(nullptr, tm_.match_expected(7));
    EXPECT_EQ(nullptr, tm_.probe(7, kTagMaskFull, false));
    EXPECT_EQ(nullptr, tm_.probe(7, kAnything, true));
    EXPECT_EQ(0u, tm_.num_expected());
    EXPECT_EQ(0u, tm_.num_unexpected());
}

TEST_F(TagMatchTest, ExactMatch) {
    int r = post_expected(5);
    EXPECT_EQ(1u, tm_.num_expected());
    EXPECT_EQ(-1, arrive(6)) << "a different tag must not match";
    EXPECT_EQ(r, arrive(5));
    EXPECT_EQ(0u, tm_.num_expected());
    EXPECT_EQ(-1, arrive(5)) << "a receive matches once";
    EXPECT_EQ(2u, tm_.num_unexpected());
}

TEST_F(TagMatchTest, SameTagInPostOrder) {
    int r0 = post_expected(9);
    int r1 = post_expected(9);
    int r2 = post_expected(9);
    EXPECT_EQ(r0, arrive(9));
    EXPECT_EQ(r1, arrive(9));
    EXPECT_EQ(r2, arrive(9));
}

TEST_F(TagMatchTest, WildcardMatch) {
    int any_tag = post_expected(0x0000000700000000ULL, kAnySource);
    int any = post_expected(0, kAnything);
    EXPECT_EQ(2u, tm_.num_expected());
    EXPECT_EQ(any, arrive(0x0000000800000001ULL)) << "only the catch-all receive accepts this";
    EXPECT_EQ(any_tag, arrive(0x00000007000000abULL));
    EXPECT_EQ(-1, arrive(0x00000007000000abULL));
    EXPECT_EQ(0u, tm_.num_expected());

    // The tag is stored with the mask applied, so don't-care bits of the posted tag do
    // not stop a match.
    int dirty = post_expected(0x00000009ffffffffULL, kAnySource);
    EXPECT_EQ(dirty, arrive(0x0000000912345678ULL));
}

TEST_F(TagMatchTest, ExactAndWildcardInterleavedMatchInPostOrder) {
    const Tag tag = 0x0000000300000004ULL;
    int w0 = post_expected(tag, kAnyTag);
    int e0 = post_expected(tag);
    int w1 = post_expected(0, kAnything);
    int e1 = post_expected(tag);
    int e2 = post_expected(tag);
    int w2 = post_expected(tag, kAnySource);
    EXPECT_EQ(w0, arrive(tag));
    EXPECT_EQ(e0, arrive(tag));
    EXPECT_EQ(w1, arrive(tag));
    EXPECT_EQ(e1, arrive(tag));
    EXPECT_EQ(e2, arrive(tag));
    EXPECT_EQ(w2, arrive(tag));
    EXPECT_EQ(-1, arrive(tag));
}

TEST_F(TagMatchTest, ExactPostedFirstBeatsLaterWildcards) {
    int e0 = post_expected(42);
    int w0 = post_expected(0, kAnything);
    int e1 = post_expected(42);
    EXPECT_EQ(e0, arrive(42));
    EXPECT_EQ(w0, arrive(42));
    EXPECT_EQ(e1, arrive(42));
}

TEST_F(TagMatchTest, NonMatchingWildcardDoesNotBlock) {
    int w_other = post_expected(0x0000000500000000ULL, kAnySource);
    int e = post_expected(0x0000000600000001ULL);
    int w = post_expected(0x0000000600000000ULL, kAnySource);
    EXPECT_EQ(e, arrive(0x0000000600000001ULL));
    EXPECT_EQ(w, arrive(0x0000000600000001ULL));
    EXPECT_EQ(w_other, arrive(0x0000000500000009ULL));
}

TEST_F(TagMatchTest, UnexpectedTakenInArrivalOrder) {
    int m0 = arrive_unexpected(3);
    int m1 = arrive_unexpected(1);
    int m2 = arrive_unexpected(3);
    int m3 = arrive_unexpected(2);
    int m4 = arrive_unexpected(3);
    EXPECT_EQ(5u, tm_.num_unexpected());

    EXPECT_EQ(m0, post_take(3)) << "exact: the first message with the tag";
    EXPECT_EQ(m1, post_take(0, kAnything)) << "wildcard: the first message of all";
    EXPECT_EQ(m2, post_take(0, kAnything));
    EXPECT_EQ(m4, post_take(3)) << "m2 was taken through the order list, so it left its bucket too";
    EXPECT_EQ(m3, post_take(0, kAnything))
        << "m4 was taken through its bucket, so it left the order list too";
    EXPECT_EQ(0u, tm_.num_unexpected());
    EXPECT_EQ(-1, post_take(0, kAnything));
    EXPECT_EQ(1u, tm_.num_expected());
}

TEST_F(TagMatchTest, WildcardTakesEarliestMatchingNotEarliestOverall) {
    arrive_unexpected(0x0000000100000001ULL);
    int m1 = arrive_unexpected(0x0000000200000007ULL);
    int m2 = arrive_unexpected(0x0000000200000003ULL);
    EXPECT_EQ(m1, post_take(0x0000000200000000ULL, kAnySource));
    EXPECT_EQ(m2, post_take(0x0000000200000000ULL, kAnySource));
    EXPECT_EQ(-1, post_take(0x0000000200000000ULL, kAnySource));
    EXPECT_EQ(1u, tm_.num_unexpected());
}

TEST_F(TagMatchTest, ProbeWithoutRemove) {
    int m0 = arrive_unexpected(11);
    int m1 = arrive_unexpected(12);
    EXPECT_EQ(m0, id_of(tm_.probe(11, kTagMaskFull, false)));
    EXPECT_EQ(m0, id_of(tm_.probe(11, kTagMaskFull, false))) << "a probe without remove leaves the message";
    EXPECT_EQ(m0, id_of(tm_.probe(0, kAnything, false)));
    EXPECT_EQ(m1, id_of(tm_.probe(12, kTagMaskFull, false)));
    EXPECT_EQ(-1, id_of(tm_.probe(13, kTagMaskFull, false)));
    EXPECT_EQ(2u, tm_.num_unexpected());
    EXPECT_TRUE(msgs_[m0].entry.queued());
    EXPECT_EQ(m0, post_take(0, kAnything)) << "a receive still finds the probed message";
    EXPECT_EQ(m1, post_take(12));
}

TEST_F(TagMatchTest, ProbeWithRemove) {
    int m0 = arrive_unexpected(21);
    int m1 = arrive_unexpected(22);
    int m2 = arrive_unexpected(21);

    TagUnexpEntry* handle = tm_.probe(21, kTagMaskFull, true);
    EXPECT_EQ(m0, id_of(handle));
    EXPECT_FALSE(handle->queued());
    EXPECT_EQ(2u, tm_.num_unexpected());
    // Gone from both views: neither an exact nor a wildcard receive sees it again.
    EXPECT_EQ(m2, id_of(tm_.probe(21, kTagMaskFull, false)));
    EXPECT_EQ(m1, id_of(tm_.probe(0, kAnything, false)));

    EXPECT_EQ(m1, id_of(tm_.probe(0, kAnything, true)));
    EXPECT_EQ(-1, id_of(tm_.probe(22, kTagMaskFull, false)))
        << "removed through the order list, gone from its bucket";
    EXPECT_EQ(m2, post_take(21));
    EXPECT_EQ(0u, tm_.num_unexpected());
}

TEST_F(TagMatchTest, CancelFromMiddleOfBucket) {
    std::vector<Tag> tags = colliding_tags(100, 2);
    const Tag a = tags[0], b = tags[1];
    ASSERT_EQ(tm_.bucket_index(a), tm_.bucket_index(b));
    int a0 = post_expected(a);
    int b0 = post_expected(b);
    int a1 = post_expected(a);
    int b1 = post_expected(b);
    int a2 = post_expected(a);

    EXPECT_TRUE(tm_.cancel(recvs_[a1].entry));
    EXPECT_FALSE(recvs_[a1].entry.queued());
    EXPECT_FALSE(tm_.cancel(recvs_[a1].entry)) << "a second cancel finds nothing";
    EXPECT_TRUE(tm_.cancel(recvs_[b0].entry));
    EXPECT_EQ(3u, tm_.num_expected());

    EXPECT_EQ(a0, arrive(a));
    EXPECT_FALSE(tm_.cancel(recvs_[a0].entry)) << "a matched receive cannot be cancelled";
    EXPECT_EQ(a2, arrive(a));
    EXPECT_EQ(b1, arrive(b));
    EXPECT_EQ(-1, arrive(a));
    EXPECT_EQ(0u, tm_.num_expected());
}

TEST_F(TagMatchTest, CancelFromMiddleOfWildcardList) {
    const Tag tag = 0x0000000900000001ULL;
    int w0 = post_expected(0x0000000900000000ULL, kAnySource);
    int w1 = post_expected(0, kAnything);
    int w2 = post_expected(0x0000000900000000ULL, kAnySource);
    int e = post_expected(tag);

    EXPECT_TRUE(tm_.cancel(recvs_[w1].entry));
    EXPECT_FALSE(tm_.cancel(recvs_[w1].entry));
    EXPECT_EQ(3u, tm_.num_expected());
    EXPECT_EQ(w0, arrive(tag));
    EXPECT_EQ(w2, arrive(tag)) << "the cancelled catch-all receive must not match";
    EXPECT_EQ(e, arrive(tag));
    EXPECT_EQ(-1, arrive(0x0000000a00000000ULL)) << "nothing accepts other tags any more";
}

TEST_F(TagMatchTest, ManyTagsCollideInOneBucket) {
    constexpr std::size_t kTags = 64;
    std::vector<Tag> tags = colliding_tags(7, kTags);
    for (Tag t : tags) ASSERT_EQ(tm_.bucket_index(tags[0]), tm_.bucket_index(t));

    // Two receives per tag, posted round-robin so each tag's receives are far apart in
    // the shared bucket; messages arrive in reverse tag order.
    std::vector<std::vector<int>> posted(kTags);
    for (int round = 0; round < 2; ++round) {
        for (std::size_t i = 0; i < kTags; ++i) posted[i].push_back(post_expected(tags[i]));
    }
    for (std::size_t i = kTags; i-- > 0;) {
        EXPECT_EQ(posted[i][0], arrive(tags[i])) << "tag " << tags[i];
        EXPECT_EQ(posted[i][1], arrive(tags[i])) << "tag " << tags[i];
    }
    EXPECT_EQ(0u, tm_.num_expected());

    // The same bucket on the unexpected side, read back by exact tag in a shuffled order.
    std::vector<int> msg_of(kTags);
    for (std::size_t i = 0; i < kTags; ++i) msg_of[i] = arrive_unexpected(tags[i]);
    std::vector<std::size_t> order(kTags);
    for (std::size_t i = 0; i < kTags; ++i) order[i] = (i * 37) % kTags;
    for (std::size_t i : order) EXPECT_EQ(msg_of[i], post_take(tags[i])) << "tag " << tags[i];
    EXPECT_EQ(0u, tm_.num_unexpected());
}

TEST_F(TagMatchTest, ForEachAndPurge) {
    std::vector<int> recv_ids;
    for (int i = 0; i < 6; ++i) recv_ids.push_back(post_expected(1000 + i % 3));
    for (int i = 0; i < 4; ++i) recv_ids.push_back(post_expected(0x10000 * i, kAnySource));
    for (int i = 0; i < 5; ++i) arrive_unexpected(0x0000000700000000ULL + i);

    std::set<int> seen;
    tm_.for_each_expected([&](TagRecvEntry& e) { seen.insert(id_of(&e)); });
    EXPECT_EQ(std::set<int>(recv_ids.begin(), recv_ids.end()), seen);

    // Fail the receives with odd ids, as a protocol would fail selected requests.
    tm_.for_each_expected([&](TagRecvEntry& e) {
        if (id_of(&e) % 2 != 0) {
            EXPECT_TRUE(tm_.cancel(e));
        }
    });
    EXPECT_EQ(5u, tm_.num_expected());

    // Drop every other unexpected message, as on the failure of the endpoint that sent them.
    std::vector<int> arrival;
    tm_.for_each_unexpected([&](TagUnexpEntry& e) {
        arrival.push_back(id_of(&e));
        if (id_of(&e) % 2 == 0) tm_.remove_unexpected(e);
    });
    EXPECT_EQ((std::vector<int>{0, 1, 2, 3, 4}), arrival);
    EXPECT_EQ(2u, tm_.num_unexpected());

    // Purge hands out unlinked entries, so the callback may destroy the request.
    std::set<int> purged;
    tm_.purge_expected([&](TagRecvEntry& e) {
        EXPECT_FALSE(e.queued());
        purged.insert(id_of(&e));
        e.tag = ~Tag{0};  // scribble, as a freed request would
    });
    EXPECT_EQ((std::set<int>{0, 2, 4, 6, 8}), purged);
    EXPECT_EQ(0u, tm_.num_expected());
    EXPECT_EQ(-1, arrive(1000));
    EXPECT_EQ(3u, tm_.num_unexpected());

    std::vector<int> purged_msgs;
    tm_.purge_unexpected([&](TagUnexpEntry& e) {
        EXPECT_FALSE(e.queued());
        purged_msgs.push_back(id_of(&e));
    });
    EXPECT_EQ((std::vector<int>{1, 3, 5}), purged_msgs) << "arrival order";
    EXPECT_EQ(0u, tm_.num_unexpected());
    EXPECT_EQ(-1, post_take(0, kAnything));
}

TEST(TagMatch, DestroyUnlinksEntries) {
    Recv exact(0), wild(1);
    Msg msg(2);
    {
        TagMatcher tm;
        ASSERT_EQ(Status::ok, tm.init(4));
        EXPECT_EQ(nullptr, tm.post_recv(exact.entry, 1, kTagMaskFull));
        EXPECT_EQ(nullptr, tm.post_recv(wild.entry, 0x20, 0xf0));
        EXPECT_EQ(nullptr, tm.match_expected(3));
        tm.push_unexpected(msg.entry, 3);
        EXPECT_TRUE(exact.entry.queued() && wild.entry.queued() && msg.entry.queued());
    }
    EXPECT_FALSE(exact.entry.queued());
    EXPECT_FALSE(wild.entry.queued());
    EXPECT_FALSE(msg.entry.queued());
    EXPECT_FALSE(msg.entry.hash_link.linked());
}

/**
 * The naive model the matcher is checked against: posted receives and unexpected
 * messages in plain vectors, scanned from the front, which is MPI's rule read literally.
 */
class ReferenceMatcher {
public:
    /** Returns the id of the message the receive takes, or -1 after queuing it. */
    int post(int id, Tag tag, Tag mask) {
        for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
            if ((it->tag & mask) == (tag & mask)) {
                int msg = it->id;
                unexpected_.erase(it);
                return msg;
            }
        }
        expected_.push_back({id, tag, mask});
        return -1;
    }

    /** Returns the id of the receive the message matches, or -1 after queuing it. */
    int arrive(int id, Tag tag) {
        for (auto it = expected_.begin(); it != expected_.end(); ++it) {
            if ((tag & it->mask) == (it->tag & it->mask)) {
                int recv = it->id;
                expected_.erase(it);
                return recv;
            }
        }
        unexpected_.push_back({id, tag, 0});
        return -1;
    }

    bool cancel(int id) { return erase(expected_, id); }
    bool remove_unexpected(int id) { return erase(unexpected_, id); }

    int probe(Tag tag, Tag mask, bool remove) {
        for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
            if ((it->tag & mask) == (tag & mask)) {
                int msg = it->id;
                if (remove) unexpected_.erase(it);
                return msg;
            }
        }
        return -1;
    }

    std::set<int> expected_ids() const {
        std::set<int> ids;
        for (const Item& i : expected_) ids.insert(i.id);
        return ids;
    }

    std::vector<int> unexpected_ids() const {
        std::vector<int> ids;
        for (const Item& i : unexpected_) ids.push_back(i.id);
        return ids;
    }

    std::size_t num_expected() const { return expected_.size(); }
    std::size_t num_unexpected() const { return unexpected_.size(); }

private:
    struct Item {
        int id;
        Tag tag;
        Tag mask;
    };

    static bool erase(std::vector<Item>& items, int id) {
        auto it = std::find_if(items.begin(), items.end(), [id](const Item& i) { return i.id == id; });
        if (it == items.end()) return false;
        items.erase(it);
        return true;
    }

    std::vector<Item> expected_;
    std::vector<Item> unexpected_;
};

class TagMatchRandomTest : public testing::TestWithParam<std::size_t> {};

TEST_P(TagMatchRandomTest, AgreesWithReferenceModel) {
    constexpr int kSteps = 20000;
    std::deque<Recv> recvs;  // before the matcher: it must outlive it
    std::deque<Msg> msgs;
    TagMatcher tm;
    ASSERT_EQ(Status::ok, tm.init(GetParam()));
    ReferenceMatcher ref;
    std::mt19937_64 rng(0x10011 + GetParam());

    auto pick = [&](std::uint64_t n) { return static_cast<std::uint64_t>(rng() % n); };
    // Few distinct tags, spread over both halves, so matches and collisions are frequent.
    auto random_tag = [&]() -> Tag { return (pick(4) << 32) | pick(6); };
    auto random_mask = [&]() -> Tag {
        const std::uint64_t kind = pick(20);  // 11 in 20 exact, the rest MPI-like and random wildcards
        if (kind == 0) return kAnything;
        if (kind < 4) return kAnySource;
        if (kind < 7) return kAnyTag;
        if (kind < 9) return rng();
        return kTagMaskFull;
    };
    auto check_all = [&](int step) {
        std::set<int> expected;
        tm.for_each_expected([&](TagRecvEntry& e) { expected.insert(id_of(&e)); });
        EXPECT_EQ(ref.expected_ids(), expected) << "step " << step;
        std::vector<int> unexpected;
        tm.for_each_unexpected([&](TagUnexpEntry& e) { unexpected.push_back(id_of(&e)); });
        EXPECT_EQ(ref.unexpected_ids(), unexpected) << "step " << step;
    };

    // What the run exercised, so a generator that drifts into trivial cases fails.
    int matches = 0, cancels = 0, probe_hits = 0, dropped = 0;
    std::size_t max_expected = 0, max_unexpected = 0;
    for (int step = 0; step < kSteps; ++step) {
        // Phases of 1000 steps alternate between mostly posting and mostly arriving, so
        // each queue in turn grows deep before it drains.
        const std::uint64_t op = pick(100);
        const std::uint64_t posts = (step / 1000) % 2 == 0 ? 44 : 20;
        if (op < posts) {
            Tag tag = random_tag(), mask = random_mask();
            Recv& r = recvs.emplace_back(static_cast<int>(recvs.size()));
            int got = id_of(tm.post_recv(r.entry, tag, mask));
            ASSERT_EQ(ref.post(r.id, tag, mask), got)
                << "step " << step << ": post tag " << tag << " mask " << mask;
            matches += got >= 0;
        } else if (op < 64) {
            Tag tag = random_tag();
            Msg& m = msgs.emplace_back(static_cast<int>(msgs.size()));
            int got = id_of(tm.match_expected(tag));
            if (got < 0) tm.push_unexpected(m.entry, tag);
            ASSERT_EQ(ref.arrive(m.id, tag), got) << "step " << step << ": arrival tag " << tag;
            matches += got >= 0;
        } else if (op < 80) {
            if (recvs.empty()) continue;
            // Half the time one of the latest receives, which is likely still queued;
            // otherwise any, which is likely matched already (cancel must say false).
            const std::size_t n = recvs.size();
            Recv& r = pick(2) == 0 ? recvs[n - 1 - pick(std::min<std::size_t>(n, 64))] : recvs[pick(n)];
            bool cancelled = tm.cancel(r.entry);
            ASSERT_EQ(ref.cancel(r.id), cancelled) << "step " << step << ": cancel " << r.id;
            cancels += cancelled;
        } else if (op < 97) {
            Tag tag = random_tag(), mask = random_mask();
            bool remove = pick(2) == 0;
            int got = id_of(tm.probe(tag, mask, remove));
            ASSERT_EQ(ref.probe(tag, mask, remove), got)
                << "step " << step << ": probe tag " << tag << " mask " << mask << " remove " << remove;
            probe_hits += got >= 0;
        } else if (op < 98) {
            // An endpoint fails: its messages (here: ids divisible by 5) are dropped.
            tm.for_each_unexpected([&](TagUnexpEntry& e) {
                if (id_of(&e) % 5 == 0) {
                    tm.remove_unexpected(e);
                    EXPECT_TRUE(ref.remove_unexpected(id_of(&e)));
                    ++dropped;
                }
            });
        } else {
            check_all(step);
        }
        ASSERT_EQ(ref.num_expected(), tm.num_expected()) << "step " << step;
        ASSERT_EQ(ref.num_unexpected(), tm.num_unexpected()) << "step " << step;
        max_expected = std::max(max_expected, tm.num_expected());
        max_unexpected = std::max(max_unexpected, tm.num_unexpected());
    }
    check_all(kSteps);
    // The run must have exercised matching, not just filled the queues.
    EXPECT_GT(matches, kSteps / 10);
    EXPECT_GT(cancels, kSteps / 50);
    EXPECT_GT(probe_hits, kSteps / 50);
    EXPECT_GT(dropped, 0);
    EXPECT_GT(max_expected, 64u) << "the queues must grow well past a few entries per bucket";
    EXPECT_GT(max_unexpected, 32u);
    EXPECT_GT(tm.num_expected() + tm.num_unexpected(), 0u);

    std::set<int> purged;
    tm.purge_expected([&](TagRecvEntry& e) { purged.insert(id_of(&e)); });
    EXPECT_EQ(ref.expected_ids(), purged);
    std::vector<int> purged_msgs;
    tm.purge_unexpected([&](TagUnexpEntry& e) { purged_msgs.push_back(id_of(&e)); });
    EXPECT_EQ(ref.unexpected_ids(), purged_msgs);
}

// One bucket makes every tag collide; 4 gives long mixed buckets; 1024 is the default.
INSTANTIATE_TEST_SUITE_P(Buckets, TagMatchRandomTest,
                         testing::Values(std::size_t{1}, std::size_t{4}, TagMatcher::kDefaultBuckets),
                         [](const testing::TestParamInfo<std::size_t>& info) {
                             return "buckets_" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace loom::ucp
