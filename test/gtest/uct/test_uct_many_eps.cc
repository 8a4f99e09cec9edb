/**
 * Many endpoints, on every transport: one iface talking to 64 peer ifaces, and 64
 * endpoints to a single peer, each sending and receiving checked data, then destroyed.
 */
#include "uct_test.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

namespace loom::uct::test {
namespace {

constexpr AmId kAmId = 9;
constexpr int kCount = 64;

/** A message: who sent it (index), a sequence number and a payload derived from both. */
struct Message {
    int index;
    int seq;
    std::vector<std::uint8_t> payload;
};

std::vector<std::uint8_t> payload_for(int index, int seq, std::size_t length) {
    std::vector<std::uint8_t> data(length);
    for (std::size_t i = 0; i < length; ++i) data[i] = static_cast<std::uint8_t>(index * 7 + seq * 13 + i);
    return data;
}

struct Inbox {
    std::vector<Message> messages;

    static Status handler(void* arg, void* data, std::size_t length, unsigned) {
        std::uint64_t header;
        if (length < sizeof(header)) return Status::ok;
        std::memcpy(&header, data, sizeof(header));
        auto* bytes = static_cast<std::uint8_t*>(data);
        static_cast<Inbox*>(arg)->messages.push_back(
            {static_cast<int>(header >> 32), static_cast<int>(header & 0xffffffff),
             std::vector<std::uint8_t>(bytes + sizeof(header), bytes + length)});
        return Status::ok;
    }
};

class UctManyEpsTest : public UctTest {
protected:
    void SetUp() override {
        UctTest::SetUp();
        if (!has(kCapAmShort)) GTEST_SKIP() << "transport has no am_short";
        payload_len_ = std::min<std::size_t>(sender_->attr().am.max_short, 40);
    }

    /** Sends one am_short, progressing @p entities while the transport has no resources. */
    void send(Ep* ep, int index, int seq, const std::vector<std::unique_ptr<Entity>>& entities) {
        auto payload = payload_for(index, seq, payload_len_);
        std::uint64_t header = (static_cast<std::uint64_t>(index) << 32) | static_cast<std::uint32_t>(seq);
        Status status;
        while ((status = ep_am_short(ep, kAmId, header, payload.data(),
                                     static_cast<unsigned>(payload.size()))) == Status::no_resource) {
            progress_all(entities);
        }
        ASSERT_EQ(Status::ok, status) << to_string(status);
    }

    void progress_all(const std::vector<std::unique_ptr<Entity>>& entities) {
        progress();
        for (const auto& entity : entities) entity->worker().progress();
    }

    template <typename Pred>
    bool wait_all(const std::vector<std::unique_ptr<Entity>>& entities, Pred done) {
        return wait_for([&] {
            if (done()) return true;
            for (const auto& entity : entities) entity->worker().progress();
            return done();
        });
    }

    void flush_ep(Ep* ep, const std::vector<std::unique_ptr<Entity>>& entities) {
        CountingCompletion comp;
        Status status;
        while ((status = ep_flush(ep, kFlushLocal, &comp)) == Status::no_resource) progress_all(entities);
        if (status == Status::in_progress) {
            ASSERT_TRUE(wait_all(entities, [&] { return comp.fired == 1; }));
        } else {
            ASSERT_EQ(Status::ok, status) << to_string(status);
        }
    }

    std::size_t payload_len_ = 0;
};

TEST_P(UctManyEpsTest, OneIfaceToManyPeers) {
    std::vector<std::unique_ptr<Entity>> peers;
    std::vector<Inbox> inboxes(kCount);
    Inbox replies;
    ASSERT_EQ(Status::ok, sender_->iface().set_am_handler(kAmId, Inbox::handler, &replies, 0));
    std::vector<Ep*> out, back;
    for (int i = 0; i < kCount; ++i) {
        peers.push_back(std::make_unique<Entity>(GetParam()));
        ASSERT_EQ(Status::ok, peers[i]->iface().set_am_handler(kAmId, Inbox::handler, &inboxes[i], 0));
        out.push_back(sender_->connect_to(*peers[i]));
        back.push_back(peers[i]->connect_to(*sender_));
    }
    for (int i = 0; i < kCount; ++i) send(out[i], i, 0, peers);
    ASSERT_TRUE(wait_all(peers, [&] {
        return std::all_of(inboxes.begin(), inboxes.end(),
                           [](const Inbox& b) { return !b.messages.empty(); });
    }));
    for (int i = 0; i < kCount; ++i) {
        ASSERT_EQ(1u, inboxes[i].messages.size()) << "peer " << i;
        const Message& m = inboxes[i].messages[0];
        EXPECT_EQ(i, m.index) << "peer " << i << " got another peer's message";
        EXPECT_EQ(payload_for(i, 0, payload_len_), m.payload) << "peer " << i;
        send(back[i], i, 1, peers);  // each peer answers on its own endpoint
    }
    ASSERT_TRUE(wait_all(peers, [&] { return replies.messages.size() >= static_cast<std::size_t>(kCount); }));
    std::vector<bool> seen(kCount, false);
    for (const Message& m : replies.messages) {
        ASSERT_GE(m.index, 0);
        ASSERT_LT(m.index, kCount);
        EXPECT_FALSE(seen[m.index]) << "two replies from peer " << m.index;
        seen[m.index] = true;
        EXPECT_EQ(1, m.seq);
        EXPECT_EQ(payload_for(m.index, 1, payload_len_), m.payload);
    }
    EXPECT_EQ(static_cast<std::size_t>(kCount), replies.messages.size());
    for (int i = 0; i < kCount; ++i) {
        flush_ep(out[i], peers);
        sender_->destroy_ep(out[i]);
        flush_ep(back[i], peers);
        peers[i]->destroy_ep(back[i]);
    }
    peers.clear();
    // The sender is still healthy after all its endpoints and peers went away.
    Inbox again;
    ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, Inbox::handler, &again, 0));
    send(ep_, 5, 5, peers);
    ASSERT_TRUE(wait_for([&] { return again.messages.size() == 1; }));
    EXPECT_EQ(payload_for(5, 5, payload_len_), again.messages[0].payload);
}

TEST_P(UctManyEpsTest, ManyEndpointsToOnePeer) {
    constexpr int kRounds = 10;
    Inbox inbox;
    ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, Inbox::handler, &inbox, 0));
    std::vector<Ep*> eps;
    for (int i = 0; i < kCount; ++i) eps.push_back(sender_->connect_to(*receiver_));
    const std::vector<std::unique_ptr<Entity>> none;
    for (int round = 0; round < kRounds; ++round) {
        for (int i = 0; i < kCount; ++i) send(eps[i], i, round, none);
    }
    ASSERT_TRUE(
        wait_for([&] { return inbox.messages.size() >= static_cast<std::size_t>(kCount * kRounds); }));
    EXPECT_EQ(static_cast<std::size_t>(kCount * kRounds), inbox.messages.size());
    std::vector<int> next(kCount, 0);
    for (const Message& m : inbox.messages) {
        ASSERT_GE(m.index, 0);
        ASSERT_LT(m.index, kCount);
        EXPECT_EQ(next[m.index]++, m.seq) << "endpoint " << m.index << "'s messages arrived out of order";
        EXPECT_EQ(payload_for(m.index, m.seq, payload_len_), m.payload);
    }
    for (Ep* ep : eps) {
        flush_ep(ep, none);
        sender_->destroy_ep(ep);
    }
    // New endpoints work after the old ones are gone.
    Ep* fresh = sender_->connect_to(*receiver_);
    send(fresh, 99, 0, none);
    ASSERT_TRUE(
        wait_for([&] { return inbox.messages.size() == static_cast<std::size_t>(kCount * kRounds + 1); }));
    EXPECT_EQ(99, inbox.messages.back().index);
    sender_->destroy_ep(fresh);
}

INSTANTIATE_TEST_SUITE_P(Transports, UctManyEpsTest, testing::ValuesIn(all_resources()), resource_name);

}  // namespace
}  // namespace loom::uct::test
