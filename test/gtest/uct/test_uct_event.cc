/**
 * Wake-up events of every transport that has them (kCapEventRecv and an event fd: shm,
 * tcp, rc): an armed, idle iface has a quiet fd; a message makes it readable; arming
 * again before progress has handled that message says busy or leaves the fd readable
 * (sleeping then would lose it); and a receiver that progresses only when its fd or
 * arm says so gets every message, the connection's set-up included (accepted sockets
 * on tcp, rdma_cm events on rc over iWARP). self has the capability but no fd (nothing
 * is asynchronous) and skips, as do transports without it. The two-process case is in
 * test_uct_multiproc.cc, the rc-specific ones in test_uct_ib.cc.
 */
#include "uct_test.h"

#include <poll.h>

#include <chrono>
#include <cstring>
#include <vector>

namespace loom::uct::test {
namespace {

constexpr AmId kAmId = 11;

/** The first 8 bytes (a sequence number) of every message, in arrival order. */
struct Inbox {
    std::vector<std::uint64_t> seqs;
    std::vector<std::size_t> lengths;

    static Status handler(void* arg, void* data, std::size_t length, unsigned) {
        auto* self = static_cast<Inbox*>(arg);
        std::uint64_t seq = ~0ull;
        if (length >= sizeof(seq)) std::memcpy(&seq, data, sizeof(seq));
        self->seqs.push_back(seq);
        self->lengths.push_back(length);
        return Status::ok;
    }
};

bool readable(int fd, int timeout_ms) {
    pollfd pfd{fd, POLLIN, 0};
    return ::poll(&pfd, 1, timeout_ms) == 1;
}

std::size_t pack_seq(void* dest, void* arg) {
    const auto* msg = static_cast<const std::vector<std::uint8_t>*>(arg);
    std::memcpy(dest, msg->data(), msg->size());
    return msg->size();
}

class UctEventTest : public UctTest {
protected:
    void SetUp() override {
        UctTest::SetUp();
        if (!has(kCapEventRecv)) GTEST_SKIP() << GetParam().name() << " has no wake-up events";
        auto fd = receiver_->iface().event_fd();
        if (!fd && fd.status() == Status::unsupported) {
            GTEST_SKIP() << GetParam().name() << " has no event fd: nothing it does is asynchronous";
        }
        ASSERT_TRUE(fd.ok()) << to_string(fd.status());
        fd_ = *fd;
        ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, Inbox::handler, &inbox_, 0));
    }

    /** Progresses @p e until its arm says ok; false (a failure recorded) when it stays busy. */
    static bool quiesce_and_arm(Entity& e) {
        for (int i = 0; i < 100000; ++i) {
            Status s = e.iface().event_arm();
            if (s == Status::ok) return true;
            if (s != Status::busy) {
                ADD_FAILURE() << "event_arm: " << to_string(s);
                return false;
            }
            while (e.worker().progress() != 0) {
            }
        }
        ADD_FAILURE() << "event_arm stays busy with nothing to do";
        return false;
    }

    /**
     * Tries to send message @p seq once (even: am_short, odd: am_bcopy of a few hundred
     * bytes where the transport has it); the status, no_resource included.
     */
    Status try_send(std::uint64_t seq) {
        if (seq % 2 == 1 && has(kCapAmBcopy)) {
            std::vector<std::uint8_t> msg(8 + seq % 500, static_cast<std::uint8_t>(seq));
            std::memcpy(msg.data(), &seq, sizeof(seq));
            ssize_t n = ep_am_bcopy(ep_, kAmId, pack_seq, &msg, 0);
            return n >= 0 ? Status::ok : static_cast<Status>(n);
        }
        return ep_am_short(ep_, kAmId, seq, nullptr, 0);
    }

    /**
     * Sends @p seq, progressing while it says no_resource: only the sender (the receiver
     * must not handle anything behind the test's back), or both with @p both.
     */
    void send(std::uint64_t seq, bool both = false) {
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        Status s;
        while ((s = try_send(seq)) == Status::no_resource && std::chrono::steady_clock::now() < deadline) {
            if (both) {
                progress();
            } else {
                sender_->worker().progress();
            }
        }
        ASSERT_EQ(Status::ok, s) << "message " << seq;
    }

    /** One message through, both sides progressing (a connection may need both): the connection is up. */
    void settle() {
        ASSERT_NO_FATAL_FAILURE(send(0, true));
        ASSERT_TRUE(wait_for([&] { return inbox_.seqs.size() == 1; })) << "the connection never worked";
        inbox_ = Inbox{};
        for (int i = 0; i < 1000; ++i) progress();
    }

    int fd_ = -1;
    Inbox inbox_;
};

TEST_P(UctEventTest, ArmedIdleIfaceHasAQuietFd) {
    ASSERT_NO_FATAL_FAILURE(settle());
    ASSERT_TRUE(quiesce_and_arm(*receiver_));
    EXPECT_FALSE(readable(fd_, 0)) << "armed with nothing to do: a sleeper would wake for nothing";
    EXPECT_EQ(Status::ok, receiver_->iface().event_arm()) << "arming again changes nothing";
    auto again = receiver_->iface().event_fd();
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(fd_, *again) << "one event fd for the iface's whole life";
}

TEST_P(UctEventTest, MessageMakesAnArmedIfaceReadable) {
    ASSERT_NO_FATAL_FAILURE(settle());
    for (std::uint64_t seq = 1; seq <= 4; ++seq) {
        ASSERT_TRUE(quiesce_and_arm(*receiver_)) << seq;
        ASSERT_FALSE(readable(fd_, 0)) << seq;
        ASSERT_NO_FATAL_FAILURE(send(seq));
        for (int i = 0; i < 100; ++i) sender_->worker().progress();
        EXPECT_TRUE(readable(fd_, 10000)) << "message " << seq << " did not wake the armed receiver";
        ASSERT_TRUE(wait_for([&] { return inbox_.seqs.size() == seq; })) << seq;
        EXPECT_EQ(seq, inbox_.seqs.back());
    }
}

TEST_P(UctEventTest, ArmingAgainBeforeProgressNeverSleepsThroughAMessage) {
    ASSERT_NO_FATAL_FAILURE(settle());
    ASSERT_TRUE(quiesce_and_arm(*receiver_));
    ASSERT_NO_FATAL_FAILURE(send(1));
    for (int i = 0; i < 100; ++i) sender_->worker().progress();
    ASSERT_TRUE(readable(fd_, 10000)) << "the message did not wake the armed receiver";
    // The message is there and nothing has handled it: its event is consumed by this arm,
    // so arm must say busy, or leave the fd readable (a level-triggered source).
    Status s = receiver_->iface().event_arm();
    ASSERT_TRUE(s == Status::ok || s == Status::busy) << to_string(s);
    if (s == Status::ok) {
        EXPECT_TRUE(readable(fd_, 0)) << "armed as idle with an unhandled message and a quiet fd";
    }
    ASSERT_TRUE(wait_for([&] { return inbox_.seqs.size() == 1; }));
    for (int i = 0; i < 1000; ++i) progress();
    EXPECT_EQ(1u, inbox_.seqs.size()) << "the message was delivered more than once";
    ASSERT_TRUE(quiesce_and_arm(*receiver_));
    EXPECT_FALSE(readable(fd_, 0));
}

TEST_P(UctEventTest, ReceiverThatOnlyProgressesWhenWokenGetsEverything) {
    // No settle(): the connection is set up while the receiver only runs on events. More
    // messages than a flow-control window, so the receiver's credits must flow back too.
    constexpr std::uint64_t kCount = 300;
    std::uint64_t sent = 0;
    bool armed = false;
    unsigned wakeups = 0;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (inbox_.seqs.size() < kCount) {
        ASSERT_LT(std::chrono::steady_clock::now(), deadline)
            << "the receiver got " << inbox_.seqs.size() << " of " << kCount << " messages (" << sent
            << " sent): a wake-up was lost";
        if (sent < kCount) {
            Status s = try_send(sent);
            if (s == Status::ok) {
                ++sent;
            } else {
                ASSERT_EQ(Status::no_resource, s);
            }
        }
        sender_->worker().progress();
        if (armed) {
            if (!readable(fd_, 0)) continue;
            armed = false;
            ++wakeups;
        }
        receiver_->worker().progress();
        Status s = receiver_->iface().event_arm();
        ASSERT_TRUE(s == Status::ok || s == Status::busy) << to_string(s);
        armed = s == Status::ok;
    }
    for (std::uint64_t i = 0; i < kCount; ++i) ASSERT_EQ(i, inbox_.seqs[i]) << "order";
    // Nothing left behind: the receiver can go to sleep.
    for (int i = 0; i < 1000; ++i) sender_->worker().progress();
    ASSERT_TRUE(quiesce_and_arm(*receiver_));
    EXPECT_FALSE(readable(fd_, 0));
    RecordProperty("wakeups", static_cast<int>(wakeups));
}

INSTANTIATE_TEST_SUITE_P(Transports, UctEventTest, testing::ValuesIn(all_resources()), resource_name);

}  // namespace
}  // namespace loom::uct::test
