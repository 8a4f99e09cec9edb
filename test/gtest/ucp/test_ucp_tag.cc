/**
 * Tagged messages through the C API, instantiated over transport sets: self (one
 * worker talking to itself), shm and tcp (two workers in this process). Sizes cross
 * every protocol threshold; the data of every message is checked.
 */
#include "common/test_helpers.h"
#include "loom/ucp.h"
#include "ucp/api/handles.h"
#include "ucp/core/ep.h"
#include "ucp/core/wire.h"
#include "ucp/rndv/rndv.h"
#include "ucp/tag/tag_proto.h"
#include "ucp_pair.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

namespace {

using loom::test::TlSet;

class UcpTagTest : public loom::test::UcpPairTest {
protected:
    UcpTagTest() : UcpPairTest(LOOM_FEATURE_TAG) {}

    /** Waits for a status-or-request; frees the request. */
    loom_status_t wait(loom_status_ptr_t r, loom_tag_recv_info_t* info = nullptr) {
        if (!LOOM_PTR_IS_PTR(r)) return LOOM_PTR_STATUS(r);
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        loom_status_t s;
        while ((s = loom_tag_recv_request_test(r, info)) == LOOM_INPROGRESS) {
            if (std::chrono::steady_clock::now() > deadline) {
                ADD_FAILURE() << "request timed out";
                return LOOM_ERR_TIMED_OUT;
            }
            progress();
        }
        loom_request_free(r);
        return s;
    }

    /** A receive whose info is filled also when it completes at once. */
    loom_status_ptr_t recv_nbx(void* buf, size_t count, loom_tag_t tag, loom_tag_t mask, loom_tag_recv_info_t* info) {
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_RECV_INFO;
        p.recv_info.tag_recv = info;
        return loom_tag_recv_nbx(receiver_, buf, count, tag, mask, &p);
    }

    /**
     * A message of @p size bytes into a receive of half that, posted before it arrives
     * (@p expected) or after: truncated, the full length reported, nothing written past
     * the receive buffer, the send complete.
     */
    void truncated_receive(std::size_t size, bool expected) {
        auto data = pattern(size, 1);
        const std::size_t cap = size / 2;
        std::vector<char> out(cap + 1, 0x11);
        loom_status_ptr_t rreq = nullptr;
        loom_tag_recv_info_t info{};
        if (expected) rreq = recv_nbx(out.data(), cap, 1, ~0ull, &info);
        loom_status_ptr_t sreq = loom_tag_send_nbx(ep_, data.data(), size, 1, nullptr);
        if (!expected) {
            for (int i = 0; i < 100; ++i) progress();
            rreq = recv_nbx(out.data(), cap, 1, ~0ull, &info);
        }
        EXPECT_EQ(LOOM_ERR_MESSAGE_TRUNCATED, wait(rreq, &info)) << size << " expected=" << expected;
        EXPECT_EQ(size, info.length);
        EXPECT_EQ(0x11, out[cap]) << "wrote past the receive buffer";
        EXPECT_EQ(LOOM_OK, wait(sreq));
    }

    /** Both workers and the transport endpoints to each, for messages forged by a test. */
    struct RawPaths {
        loom::ucp::Worker* sw;
        loom::ucp::Worker* rw;
        loom::uct::Ep* to_sender;    ///< the receiver's endpoint back to the sender
        loom::uct::Ep* to_receiver;  ///< ep_'s
    };
    /** Brings both endpoints up with a message, then fills @p raw. */
    void raw_paths(RawPaths& raw) {
        send_recv(8, true);
        raw.sw = reinterpret_cast<loom_worker*>(sender_)->impl.get();
        raw.rw = reinterpret_cast<loom_worker*>(receiver_)->impl.get();
        ASSERT_EQ(1u, raw.rw->ep_by_uuid.count(raw.sw->uuid));
        raw.to_sender = raw.rw->ep_by_uuid[raw.sw->uuid]->am_ep;
        raw.to_receiver = reinterpret_cast<loom::ucp::Ep*>(ep_)->am_ep;
    }

    static std::vector<char> pattern(std::size_t n, unsigned seed) {
        std::vector<char> v(n);
        for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 31 + seed * 7) & 0xff);
        return v;
    }

    void send_recv(std::size_t size, bool expected, loom_tag_t tag = 0x1234) {
        auto data = pattern(size, static_cast<unsigned>(size));
        std::vector<char> out(size + 1, 0x5a);
        loom_tag_recv_info_t info{};
        loom_request_param_t rp{};
        rp.op_attr_mask = LOOM_OP_ATTR_FIELD_RECV_INFO;
        rp.recv_info.tag_recv = &info;
        loom_status_ptr_t rreq = nullptr, sreq = nullptr;
        if (expected) rreq = loom_tag_recv_nbx(receiver_, out.data(), size, tag, ~0ull, &rp);
        sreq = loom_tag_send_nbx(ep_, data.data(), size, tag, nullptr);
        ASSERT_FALSE(LOOM_PTR_IS_ERR(sreq)) << loom_status_string(LOOM_PTR_STATUS(sreq));
        if (!expected) {
            // Let the message arrive first, so the receive finds it unexpected.
            for (int i = 0; i < 100; ++i) progress();
            rreq = loom_tag_recv_nbx(receiver_, out.data(), size, tag, ~0ull, &rp);
        }
        ASSERT_EQ(LOOM_OK, wait(rreq, &info)) << size;
        ASSERT_EQ(LOOM_OK, wait(sreq)) << size;
        EXPECT_EQ(size, info.length);
        EXPECT_EQ(tag, info.sender_tag);
        EXPECT_TRUE(std::equal(data.begin(), data.end(), out.begin())) << "size " << size;
        EXPECT_EQ(0x5a, out[size]) << "wrote past the receive buffer";
    }

};

const std::vector<std::size_t> kSizes = {0,     1,     8,     100,   231,    232,    233,    1000,
                                         4096,  8191,  8192,  8193,  8248,   8249,   10432,  10433,
                                         16383, 16384, 30000, 32768, 65536,  100000, 262143, 262144,
                                         300000, 1 << 20};

TEST_P(UcpTagTest, ExpectedAllSizes) {
    for (std::size_t size : kSizes) send_recv(size, true);
}

TEST_P(UcpTagTest, UnexpectedAllSizes) {
    for (std::size_t size : kSizes) send_recv(size, false);
}

TEST_P(UcpTagTest, AmPipelineRendezvous) {
    init({{"LOOM_RNDV_SCHEME", "am"}, {"LOOM_RNDV_THRESH", "4k"}});
    for (std::size_t size : {4096, 10000, 70000, 1 << 20}) {
        send_recv(size, true);
        send_recv(size, false);
    }
}

TEST_P(UcpTagTest, GetRendezvousFromSmallThreshold) {
    init({{"LOOM_RNDV_SCHEME", "get_zcopy"}, {"LOOM_RNDV_THRESH", "1"}});
    for (std::size_t size : {1, 8, 5000, 70000}) {
        send_recv(size, true);
        send_recv(size, false);
    }
}

/**
 * The rendezvous threshold also rules sizes the transport could send short (tcp sends up
 * to a whole 64 KiB segment short): a message of the threshold's size waits for its
 * receiver, one byte less is eager.
 */
TEST_P(UcpTagTest, ThresholdAppliesBelowTheShortLimit) {
    init({{"LOOM_RNDV_THRESH", "64"}});
    auto data = pattern(64, 5);
    loom_request_param_t imm{};
    imm.op_attr_mask = LOOM_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    EXPECT_EQ(LOOM_ERR_NO_RESOURCE, LOOM_PTR_STATUS(loom_tag_send_nbx(ep_, data.data(), 64, 11, &imm)))
        << "a rendezvous cannot complete inside the call";
    loom_status_ptr_t eager = loom_tag_send_nbx(ep_, data.data(), 63, 12, nullptr);
    ASSERT_FALSE(LOOM_PTR_IS_ERR(eager));
    loom_status_ptr_t rndv = loom_tag_send_nbx(ep_, data.data(), 64, 13, nullptr);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(rndv)) << "completed before the receiver fetched the data";
    for (int i = 0; i < 200; ++i) progress();
    EXPECT_EQ(LOOM_INPROGRESS, loom_request_check_status(rndv)) << "completed before any receive";
    std::vector<char> out(64, 0);
    ASSERT_EQ(LOOM_OK, wait(loom_tag_recv_nbx(receiver_, out.data(), 63, 12, ~0ull, nullptr)));
    EXPECT_TRUE(std::equal(out.begin(), out.begin() + 63, data.begin()));
    ASSERT_EQ(LOOM_OK, wait(loom_tag_recv_nbx(receiver_, out.data(), 64, 13, ~0ull, nullptr)));
    EXPECT_EQ(data, out);
    EXPECT_EQ(LOOM_OK, wait(rndv));
    EXPECT_EQ(LOOM_OK, wait(eager));
}

/** MPI order: messages of one pair match in send order, whatever their protocol. */
TEST_P(UcpTagTest, OrderUnderMixedSizes) {
    const std::vector<std::size_t> sizes = {8, 70000, 16, 300000, 5000, 1, 20000, 1 << 20, 64, 9000};
    const int rounds = 3;
    std::vector<std::vector<char>> sent;
    std::vector<loom_status_ptr_t> sreqs;
    for (int r = 0; r < rounds; ++r) {
        for (std::size_t i = 0; i < sizes.size(); ++i) {
            auto data = pattern(sizes[i], static_cast<unsigned>(sent.size()));
            sent.push_back(std::move(data));
        }
    }
    for (auto& d : sent) sreqs.push_back(loom_tag_send_nbx(ep_, d.data(), d.size(), 7, nullptr));
    // Half the receives are posted after some messages arrived, half before.
    for (int i = 0; i < 50; ++i) progress();
    for (std::size_t i = 0; i < sent.size(); ++i) {
        std::vector<char> out(1 << 20);
        loom_tag_recv_info_t info{};
        // A wildcard receive takes whichever arrived message comes first.
        loom_status_t s = wait(recv_nbx(out.data(), out.size(), 0, 0, &info), &info);
        ASSERT_EQ(LOOM_OK, s);
        ASSERT_EQ(sent[i].size(), info.length) << "message " << i << " out of order";
        EXPECT_TRUE(std::equal(sent[i].begin(), sent[i].end(), out.begin())) << i;
    }
    for (auto r : sreqs) EXPECT_EQ(LOOM_OK, wait(r));
}

TEST_P(UcpTagTest, WildcardMatchesByMask) {
    std::vector<loom_status_ptr_t> sreqs;
    std::uint64_t a = 0x10001, b = 0x20002, c = 0x10003;
    sreqs.push_back(loom_tag_send_nbx(ep_, &a, 8, a, nullptr));
    sreqs.push_back(loom_tag_send_nbx(ep_, &b, 8, b, nullptr));
    sreqs.push_back(loom_tag_send_nbx(ep_, &c, 8, c, nullptr));
    std::uint64_t out = 0;
    loom_tag_recv_info_t info{};
    // Upper half 0x2: only b.
    ASSERT_EQ(LOOM_OK, wait(recv_nbx(&out, 8, 0x20000, 0xffff0000ull, &info), &info));
    EXPECT_EQ(b, out);
    EXPECT_EQ(b, info.sender_tag);
    ASSERT_EQ(LOOM_OK, wait(recv_nbx(&out, 8, 0x10000, 0xffff0000ull, &info), &info));
    EXPECT_EQ(a, out);
    ASSERT_EQ(LOOM_OK, wait(recv_nbx(&out, 8, 0, 0, &info), &info));
    EXPECT_EQ(c, out);
    for (auto r : sreqs) EXPECT_EQ(LOOM_OK, wait(r));
}

TEST_P(UcpTagTest, ProbeRemoveThenReceive) {
    for (std::size_t size : {8, 20000, 400000}) {
        auto data = pattern(size, 3);
        loom_status_ptr_t sreq = loom_tag_send_nbx(ep_, data.data(), size, 99, nullptr);
        loom_tag_recv_info_t info{};
        loom_tag_message_h msg = nullptr;
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while ((msg = loom_tag_probe_nb(receiver_, 99, ~0ull, 0, &info)) == nullptr &&
               std::chrono::steady_clock::now() < deadline) {
            progress();
        }
        ASSERT_NE(nullptr, msg);
        EXPECT_EQ(size, info.length);
        msg = loom_tag_probe_nb(receiver_, 99, ~0ull, 1, &info);
        ASSERT_NE(nullptr, msg);
        EXPECT_EQ(nullptr, loom_tag_probe_nb(receiver_, 99, ~0ull, 0, &info)) << "removed, yet still found";
        std::vector<char> out(size);
        loom_tag_recv_info_t rinfo{};
        ASSERT_EQ(LOOM_OK, wait(loom_tag_msg_recv_nbx(receiver_, out.data(), size, msg, nullptr), &rinfo));
        EXPECT_EQ(data, out);
        EXPECT_EQ(LOOM_OK, wait(sreq));
    }
}

TEST_P(UcpTagTest, CancelPostedReceive) {
    char buf[8];
    loom_status_ptr_t r = loom_tag_recv_nbx(receiver_, buf, sizeof(buf), 5, ~0ull, nullptr);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(r));
    loom_request_cancel(receiver_, r);
    EXPECT_EQ(LOOM_ERR_CANCELED, wait(r));
    // The cancelled receive must not take the next message.
    send_recv(8, true, 5);
}

/** Progresses until the receiver's unexpected queue holds a message tagged @p tag. */
#define WAIT_UNEXPECTED(tag)                                                    \
    ASSERT_TRUE(progress_until(                                                 \
        [&] {                                                                   \
            loom_tag_recv_info_t pi{};                                          \
            return loom_tag_probe_nb(receiver_, tag, ~0ull, 0, &pi) != nullptr; \
        },                                                                      \
        "the message to arrive unexpected"))

TEST_P(UcpTagTest, CancelWithdrawsAnUnmatchedSend) {
    // Rendezvous (RTS in the receiver's queue) and synchronous eager sizes: each waits for
    // its receiver, so it can still be withdrawn; the receiver never sees it. Rendezvous
    // from 16 KiB on every transport, so the 20000-byte send takes both paths.
    init({{"LOOM_RNDV_THRESH", "16k"}});
    for (bool sync : {false, true}) {
        for (std::size_t size : {8ul, 20000ul, 1ul << 20}) {
            if (!sync && size < 20000) continue;  // an eager send completes at once: nothing to cancel
            const loom_tag_t tag = 0x700 + size + sync;
            auto data = pattern(size, 3);
            loom_status_ptr_t sreq = sync ? loom_tag_send_sync_nbx(ep_, data.data(), size, tag, nullptr)
                                          : loom_tag_send_nbx(ep_, data.data(), size, tag, nullptr);
            ASSERT_TRUE(LOOM_PTR_IS_PTR(sreq)) << size << " sync " << sync;
            WAIT_UNEXPECTED(tag);
            loom_request_cancel(sender_, sreq);
            EXPECT_EQ(LOOM_ERR_CANCELED, wait(sreq)) << "size " << size << " sync " << sync;
            loom_tag_recv_info_t pi{};
            EXPECT_EQ(nullptr, loom_tag_probe_nb(receiver_, tag, ~0ull, 0, &pi))
                << "the message is still there";
            // The tag goes on: the next message on it is received intact.
            send_recv(size, true, tag);
        }
    }
}

TEST_P(UcpTagTest, CancelOfAMatchedSendCompletesItNormally) {
    for (bool sync : {false, true}) {
        const std::size_t size = sync ? 100 : 1 << 20;
        auto data = pattern(size, 4);
        std::vector<char> out(size);
        loom_status_ptr_t sreq = sync ? loom_tag_send_sync_nbx(ep_, data.data(), size, 77, nullptr)
                                      : loom_tag_send_nbx(ep_, data.data(), size, 77, nullptr);
        ASSERT_TRUE(LOOM_PTR_IS_PTR(sreq));
        WAIT_UNEXPECTED(77);
        loom_status_ptr_t rreq = loom_tag_recv_nbx(receiver_, out.data(), size, 77, ~0ull, nullptr);
        loom_request_cancel(sender_, sreq);  // the receive has taken it: too late
        EXPECT_EQ(LOOM_OK, wait(rreq));
        EXPECT_EQ(LOOM_OK, wait(sreq)) << "sync " << sync;
        EXPECT_EQ(data, out);
    }
}

/** Parameters with a deadline @p ms milliseconds from now (or, @p absolute, at that CLOCK_MONOTONIC time). */
static loom_request_param_t deadline_in(std::uint64_t ms, bool absolute = false) {
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_DEADLINE;
    p.deadline_ns = ms * 1000000ull;
    if (absolute) {
        timespec ts{};
        clock_gettime(CLOCK_MONOTONIC, &ts);
        p.op_attr_mask |= LOOM_OP_ATTR_FLAG_DEADLINE_ABSOLUTE;
        p.deadline_ns +=
            static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
    }
    return p;
}

TEST_P(UcpTagTest, DeadlineTimesOutAReceiveThatMatchedNothing) {
    for (bool absolute : {false, true}) {
        std::vector<char> out(100);
        loom_request_param_t p = deadline_in(20, absolute);
        loom_status_ptr_t rreq = loom_tag_recv_nbx(receiver_, out.data(), out.size(), 0x55, ~0ull, &p);
        ASSERT_TRUE(LOOM_PTR_IS_PTR(rreq));
        EXPECT_EQ(LOOM_ERR_TIMED_OUT, wait(rreq)) << "absolute " << absolute;
        // It left the matcher: the next message on its tag goes to the next receive, intact.
        send_recv(100, true, 0x55);
        send_recv(100, false, 0x55);
    }
    // A deadline already past (absolute 0) expires at the next progress.
    loom_request_param_t past{};
    past.op_attr_mask = LOOM_OP_ATTR_FIELD_DEADLINE | LOOM_OP_ATTR_FLAG_DEADLINE_ABSOLUTE;
    std::vector<char> out(8);
    EXPECT_EQ(LOOM_ERR_TIMED_OUT, wait(loom_tag_recv_nbx(receiver_, out.data(), 8, 0x56, ~0ull, &past)));
}

TEST_P(UcpTagTest, DeadlineWithdrawsASendItsReceiverHasNotMatched) {
    init({{"LOOM_RNDV_THRESH", "16k"}});
    for (bool sync : {false, true}) {
        for (std::size_t size : {8ul, 20000ul, 1ul << 20}) {
            if (!sync && size < 20000) continue;  // an eager send completes at once: nothing to withdraw
            const loom_tag_t tag = 0x900 + size + sync;
            auto data = pattern(size, 5);
            loom_request_param_t p = deadline_in(30);
            loom_status_ptr_t sreq = sync ? loom_tag_send_sync_nbx(ep_, data.data(), size, tag, &p)
                                          : loom_tag_send_nbx(ep_, data.data(), size, tag, &p);
            ASSERT_TRUE(LOOM_PTR_IS_PTR(sreq)) << size << " sync " << sync;
            // The message may or may not have reached the receiver by the deadline (rc in the
            // VM is slow): the withdrawal follows it on the same lane and finds it either way.
            EXPECT_EQ(LOOM_ERR_TIMED_OUT, wait(sreq)) << "size " << size << " sync " << sync;
            loom_tag_recv_info_t pi{};
            EXPECT_EQ(nullptr, loom_tag_probe_nb(receiver_, tag, ~0ull, 0, &pi))
                << "the receiver still has it";
            send_recv(size, true, tag);
        }
    }
}

/**
 * A send still queued for a busy lane (the receiver does not progress: the transport is
 * full) is withdrawn at its deadline: it leaves the queue with nothing sent, the receiver
 * never sees it, and the sends before and behind it arrive in order.
 */
TEST_P(UcpTagTest, DeadlineWithdrawsASendStillQueuedForABusyLane) {
    if (GetParam().self) GTEST_SKIP() << "self delivers inside the send: its lane is never busy";
    constexpr std::size_t kSize = 2000;  // eager on every transport
    const auto data = pattern(kSize, 9);
    const auto* ep = reinterpret_cast<const loom::ucp::Ep*>(ep_);
    // Eager sends, only the sender progressing, until the AM lane queues one of them.
    std::vector<loom_status_ptr_t> before;
    loom_tag_t tag = 0xA0000;
    while (ep->num_pending == 0) {
        ASSERT_LT(tag, 0xA0000u + 200000) << "the lane never filled";
        loom_status_ptr_t r = loom_tag_send_nbx(ep_, data.data(), kSize, tag++, nullptr);
        ASSERT_FALSE(LOOM_PTR_IS_ERR(r)) << loom_status_string(LOOM_PTR_STATUS(r));
        if (LOOM_PTR_IS_PTR(r)) before.push_back(r);
        loom_worker_progress(sender_);
    }
    const loom_tag_t sent_before = tag - 0xA0000;
    // Behind the queued one: three sends with a deadline, then one without.
    loom_request_param_t p = deadline_in(20);
    std::vector<loom_status_ptr_t> timed;
    for (loom_tag_t k = 0; k < 3; ++k)
        timed.push_back(loom_tag_send_nbx(ep_, data.data(), kSize, 0xB0000 + k, &p));
    loom_status_ptr_t after = loom_tag_send_nbx(ep_, data.data(), kSize, 0xC0000, nullptr);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(after));
    auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (loom_status_ptr_t r : timed) {
        ASSERT_TRUE(LOOM_PTR_IS_PTR(r)) << "a send behind a queued one went at once";
        while (loom_request_check_status(r) == LOOM_INPROGRESS) {
            ASSERT_LT(std::chrono::steady_clock::now(), limit) << "the deadline never withdrew the send";
            loom_worker_progress(sender_);  // the receiver sleeps: the lane stays full
        }
        EXPECT_EQ(LOOM_ERR_TIMED_OUT, loom_request_check_status(r));
        loom_request_free(r);
    }
    EXPECT_EQ(LOOM_INPROGRESS, loom_request_check_status(after)) << "the send behind them left the queue too";
    // The receiver takes everything, in order: the sends before, then the one after.
    std::vector<char> out(kSize);
    for (loom_tag_t i = 0; i <= sent_before; ++i) {
        loom_tag_recv_info_t info{};
        std::fill(out.begin(), out.end(), 0);
        ASSERT_EQ(LOOM_OK, wait(recv_nbx(out.data(), kSize, 0, 0, &info), &info)) << "message " << i;
        const loom_tag_t expected = i < sent_before ? 0xA0000 + i : 0xC0000;
        ASSERT_EQ(expected, info.sender_tag)
            << "message " << i << " (a withdrawn send arrived, or the order broke)";
        ASSERT_EQ(data, out) << "message " << i;
    }
    for (loom_status_ptr_t r : before) EXPECT_EQ(LOOM_OK, wait(r));
    EXPECT_EQ(LOOM_OK, wait(after));
    for (int i = 0; i < 1000; ++i) progress();
    loom_tag_recv_info_t pi{};
    EXPECT_EQ(nullptr, loom_tag_probe_nb(receiver_, 0, 0, 0, &pi)) << "a withdrawn send arrived after all";
}

/**
 * A deadline that does not pass changes nothing, and one whose send was matched first lets
 * it complete normally (the receiver has the data); a request reused from the pool after
 * either carries no deadline of theirs.
 */
TEST_P(UcpTagTest, DeadlineOfAMatchedOrCompletedOperationChangesNothing) {
    const std::size_t size = 1 << 20;
    auto data = pattern(size, 6);
    std::vector<char> out(size);
    loom_request_param_t p = deadline_in(10000);
    loom_status_ptr_t rreq = loom_tag_recv_nbx(receiver_, out.data(), size, 0x60, ~0ull, &p);
    loom_status_ptr_t sreq = loom_tag_send_nbx(ep_, data.data(), size, 0x60, &p);
    EXPECT_EQ(LOOM_OK, wait(rreq));
    EXPECT_EQ(LOOM_OK, wait(sreq));
    EXPECT_EQ(data, out);
    // Matched, then expired at once: the send's withdrawal is refused, it completes normally.
    std::fill(out.begin(), out.end(), 0);
    loom_request_param_t soon = deadline_in(0);
    sreq = loom_tag_send_nbx(ep_, data.data(), size, 0x61, &soon);
    rreq = loom_tag_recv_nbx(receiver_, out.data(), size, 0x61, ~0ull, nullptr);
    EXPECT_EQ(LOOM_OK, wait(rreq));
    EXPECT_EQ(LOOM_OK, wait(sreq));
    EXPECT_EQ(data, out);
    // The first receive's deadline was dropped when it completed: a receive that reuses its
    // request waits past that time without expiring.
    std::vector<char> small(8);
    loom_status_ptr_t later = loom_tag_recv_nbx(receiver_, small.data(), 8, 0x62, ~0ull, nullptr);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(later));
    for (int i = 0; i < 1000; ++i) progress();
    EXPECT_EQ(LOOM_INPROGRESS, loom_request_check_status(later));
    auto eight = pattern(8, 7);
    EXPECT_EQ(LOOM_OK, wait(loom_tag_send_nbx(ep_, eight.data(), 8, 0x62, nullptr)));
    EXPECT_EQ(LOOM_OK, wait(later));
}

/**
 * A receive matched to a rendezvous whose deadline passes while it GETs: both sides end
 * alike, either both complete normally with the data (every GET was already issued), or
 * both with timed_out (the receiver stopped issuing GETs and its ATS said so), never one
 * side ok and the other not. Over every size the GET path takes.
 */
TEST_P(UcpTagTest, DeadlineOfAReceiveThatGetsEndsBothSidesAlike) {
    init({{"LOOM_RNDV_THRESH", "16k"}, {"LOOM_RNDV_SCHEME", "get_zcopy"}});
    int timed_out = 0, completed = 0;
    for (std::size_t size : {20000ul, 1ul << 20, 16ul << 20, 64ul << 20}) {
        auto data = pattern(size, 9);
        std::vector<char> out(size);
        const loom_tag_t tag = 0xa00 + size;
        loom_status_ptr_t sreq = loom_tag_send_nbx(ep_, data.data(), size, tag, nullptr);
        ASSERT_TRUE(LOOM_PTR_IS_PTR(sreq));
        WAIT_UNEXPECTED(tag);
        loom_request_param_t past{};
        past.op_attr_mask = LOOM_OP_ATTR_FIELD_DEADLINE | LOOM_OP_ATTR_FLAG_DEADLINE_ABSOLUTE;
        loom_status_ptr_t rreq = loom_tag_recv_nbx(receiver_, out.data(), size, tag, ~0ull, &past);
        const loom_status_t rs = wait(rreq), ss = wait(sreq);
        EXPECT_EQ(rs, ss) << size << ": receive " << loom_status_string(rs) << ", send "
                          << loom_status_string(ss);
        if (rs == LOOM_OK) {
            EXPECT_EQ(data, out) << size;
            ++completed;
        } else {
            EXPECT_EQ(LOOM_ERR_TIMED_OUT, rs) << size;
            ++timed_out;
        }
    }
    // Which way each went depends on whether the transport took every GET at once (shm and
    // tcp do; rc's bounded reads queue, and in the RDMA VM the largest one stops); printed.
    std::printf("# GET receives past their deadline: %d completed, %d timed out\n", completed, timed_out);
    send_recv(1 << 20, true, 0xb00);  // the endpoint goes on
}

/**
 * Deadlines that pass together, where the first one's callback ends the second operation
 * (it closes the endpoint by force: a send freed by the application is released at once):
 * the second is never touched after it is gone (the ASan build checks).
 */
TEST_P(UcpTagTest, DeadlineCallbackThatEndsAnotherExpiringRequest) {
    struct Ctx {
        loom_ep_h* ep;
        loom_status_t status = LOOM_INPROGRESS;
    } ctx{&ep_};
    loom_request_param_t rp{};
    rp.op_attr_mask = LOOM_OP_ATTR_FIELD_DEADLINE | LOOM_OP_ATTR_FLAG_DEADLINE_ABSOLUTE |
                      LOOM_OP_ATTR_FIELD_CALLBACK | LOOM_OP_ATTR_FIELD_USER_DATA;
    rp.user_data = &ctx;
    rp.cb.recv = [](void*, loom_status_t status, const loom_tag_recv_info_t*, void* user) {
        auto* c = static_cast<Ctx*>(user);
        c->status = status;
        force_close(*c->ep);
        *c->ep = nullptr;
    };
    std::vector<char> out(8);
    loom_status_ptr_t rreq = loom_tag_recv_nbx(receiver_, out.data(), out.size(), 0xc0, ~0ull, &rp);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(rreq));
    auto data = pattern(1 << 20, 12);
    loom_request_param_t sp{};
    sp.op_attr_mask = LOOM_OP_ATTR_FIELD_DEADLINE | LOOM_OP_ATTR_FLAG_DEADLINE_ABSOLUTE;
    loom_status_ptr_t sreq = loom_tag_send_nbx(ep_, data.data(), data.size(), 0xc1, &sp);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(sreq));
    loom_request_free(sreq);  // released the moment it completes
    ASSERT_TRUE(progress_until([&] { return ctx.status != LOOM_INPROGRESS; }, "the receive's deadline"));
    EXPECT_EQ(LOOM_ERR_TIMED_OUT, ctx.status);
    loom_request_free(rreq);
    for (int i = 0; i < 100; ++i) progress();
}

/**
 * A flush past its deadline completes with timed_out and leaves what it waited for going
 * on; a close past its deadline closes by force: the send it waited for fails.
 */
TEST_P(UcpTagTest, DeadlineEndsAFlushOrACloseThatWaits) {
    const std::size_t size = 1 << 20;
    auto data = pattern(size, 8);
    loom_status_ptr_t sreq = loom_tag_send_nbx(ep_, data.data(), size, 0x70, nullptr);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(sreq));
    WAIT_UNEXPECTED(0x70);
    loom_request_param_t p = deadline_in(30);
    loom_status_ptr_t freq = loom_ep_flush_nbx(ep_, &p);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(freq)) << "the flush must wait for the unmatched send";
    EXPECT_EQ(LOOM_ERR_TIMED_OUT, wait(freq));
    EXPECT_EQ(LOOM_INPROGRESS, loom_request_check_status(sreq)) << "the flush's deadline ended the send";
    std::vector<char> out(size);
    EXPECT_EQ(LOOM_OK, wait(loom_tag_recv_nbx(receiver_, out.data(), size, 0x70, ~0ull, nullptr)));
    EXPECT_EQ(LOOM_OK, wait(sreq));
    EXPECT_EQ(data, out);

    sreq = loom_tag_send_nbx(ep_, data.data(), size, 0x71, nullptr);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(sreq));
    WAIT_UNEXPECTED(0x71);
    loom_status_ptr_t creq = loom_ep_close_nbx(ep_, &p);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(creq));
    EXPECT_EQ(LOOM_ERR_TIMED_OUT, wait(creq));
    ep_ = nullptr;  // closed
    EXPECT_NE(LOOM_OK, wait(sreq)) << "a send of an endpoint closed by force";
}

/**
 * Cancels and their answers are checked before use: a truncated one is dropped with a
 * line; one naming another tag, sender or send withdraws nothing; an answer for a request
 * that is not a waiting send changes nothing. The parked message is received intact.
 */
TEST_P(UcpTagTest, ForgedCancelsChangeNothing) {
    RawPaths raw;
    ASSERT_NO_FATAL_FAILURE(raw_paths(raw));
    loom::ucp::Worker& sw = *raw.sw;
    loom::uct::Ep *to_sender = raw.to_sender, *to_receiver = raw.to_receiver;
    loom::test::LogCapture warnings("warn");
    // Sends one raw message, then progresses until the warning @p what was logged @p n times
    // in all (messages on one endpoint arrive in order: so were those sent before it).
    auto deliver = [&](loom::uct::Ep* uep, loom::uct::AmId id, const void* m, std::size_t len,
                       const char* what, int n) {
        ssize_t r;
        while ((r = loom::ucp::am_bcopy_bytes(uep, id, m, len)) ==
               static_cast<ssize_t>(loom::Status::no_resource)) {
            progress();
        }
        ASSERT_GE(r, 0);
        ASSERT_TRUE(progress_until([&] { return warnings.count(what) >= n; }, what)) << warnings.text();
        EXPECT_EQ(n, warnings.count(what)) << warnings.text();
    };
    auto data = pattern(1 << 20, 5);
    loom_status_ptr_t sreq = loom_tag_send_nbx(ep_, data.data(), data.size(), 88, nullptr);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(sreq));
    WAIT_UNEXPECTED(88);
    const std::uint64_t sreq_id = sw.req_table.wire_id(loom::ucp::request_of(sreq));
    char b[8];
    loom_status_ptr_t other =
        loom_tag_recv_nbx(sender_, b, sizeof(b), 99, ~0ull, nullptr);  // a request, not a send
    ASSERT_TRUE(LOOM_PTR_IS_PTR(other));
    const char* truncated = "send cancel of 23 bytes (truncated)";
    loom::ucp::CancelHdr c{88, sw.uuid, sreq_id};
    deliver(to_receiver, loom::ucp::kAmTagCancel, &c, sizeof(c) - 1, truncated, 1);
    for (auto forged :
         {loom::ucp::CancelHdr{89, sw.uuid, sreq_id}, loom::ucp::CancelHdr{88, sw.uuid ^ 1, sreq_id},
          loom::ucp::CancelHdr{88, sw.uuid, sreq_id + 1}}) {
        ASSERT_GE(loom::ucp::am_bcopy_bytes(to_receiver, loom::ucp::kAmTagCancel, &forged, sizeof(forged)),
                  0);
    }
    deliver(to_receiver, loom::ucp::kAmTagCancel, &c, sizeof(c) - 1, truncated, 2);  // behind the forged ones
    loom_tag_recv_info_t pi{};
    EXPECT_NE(nullptr, loom_tag_probe_nb(receiver_, 88, ~0ull, 0, &pi))
        << "a forged cancel withdrew the message";
    loom::ucp::AckHdr ack{0x777700000005ull, 0, 0};
    deliver(to_sender, loom::ucp::kAmTagCancelAck, &ack, sizeof(ack), "cancel answer for unknown send", 1);
    ack.sreq_id =
        sw.req_table.wire_id(loom::ucp::request_of(sreq)) + (std::uint64_t{1} << 32);  // stale generation
    deliver(to_sender, loom::ucp::kAmTagCancelAck, &ack, sizeof(ack), "cancel answer for unknown send", 2);
    deliver(to_sender, loom::ucp::kAmTagCancelAck, &ack, 4, "cancel answer of 4 bytes (truncated)", 1);
    EXPECT_EQ(LOOM_INPROGRESS, loom_request_check_status(sreq));
    EXPECT_EQ(LOOM_INPROGRESS, loom_request_check_status(other));
    loom_request_cancel(sender_, other);
    EXPECT_EQ(LOOM_ERR_CANCELED, wait(other));
    std::vector<char> out(data.size());
    EXPECT_EQ(LOOM_OK, wait(loom_tag_recv_nbx(receiver_, out.data(), out.size(), 88, ~0ull, nullptr)));
    EXPECT_EQ(LOOM_OK, wait(sreq));
    EXPECT_EQ(data, out);
}

/**
 * LOOM_UNEXPECTED_MAX: a receiver that posts nothing keeps at most the bound (and what was
 * in flight when it was crossed) of eager data; past it its sender sends by rendezvous, its
 * sends waiting for the receiver. Then every message is received in order and intact, and
 * the sender goes back to eager.
 *
 * How many messages are in flight when the bound is crossed depends on how fast the hold
 * reaches the sender: on one connection each way (tcp, rc over rdma_cm) it travels beside
 * the data, so over an asynchronous device the sender goes on for as long as the trip
 * takes (rc under emulation: 322 messages kept, 256 past the bound). The test therefore
 * checks the accounting exactly: every message sent before the sender heard is kept, none
 * sent after it; and where both workers' transports deliver within this thread's progress
 * (self, shm, tcp over loopback) the bound itself, plus what the transport holds.
 */
TEST_P(UcpTagTest, UnexpectedMessagesAreBoundedAndKeepTheirOrder) {
    constexpr std::size_t kBound = 64 * 1024, kSize = 1000;
    constexpr int kCount = 4000;  // 4 MB: 60 times the bound
    init({{"LOOM_UNEXPECTED_MAX", "64k"}});
    loom::ucp::TagWorker& t = loom::ucp::tag_of(*reinterpret_cast<loom_worker*>(receiver_)->impl);
    auto* ep = reinterpret_cast<loom::ucp::Ep*>(ep_);
    const std::uint32_t eager_limit = ep->tag_short_limit;
    std::vector<std::vector<char>> data;
    std::vector<loom_status_ptr_t> sends;
    std::size_t most = 0, eager_sent = 0;
    for (int i = 0; i < kCount; ++i) {
        data.push_back(pattern(kSize, static_cast<unsigned>(i)));
        if (!(ep->flags & loom::ucp::kEpTagHeld)) ++eager_sent;
        loom_status_ptr_t r = loom_tag_send_nbx(ep_, data.back().data(), kSize, 0x900, nullptr);
        ASSERT_FALSE(LOOM_PTR_IS_ERR(r)) << i;
        sends.push_back(r);
        // An eager send waits only for the transport; a rendezvous one (held) for the receiver.
        // Waiting for the former keeps the sender's own queue short: what the receiver may
        // get beyond the bound is then what the transport holds (see docs/reliability.md).
        do {
            progress();
            most = std::max(most, t.unexp_bytes);
        } while (LOOM_PTR_IS_PTR(r) && loom_request_check_status(r) == LOOM_INPROGRESS &&
                 !(ep->flags & loom::ucp::kEpTagHeld));
    }
    // Every eager message arrives (the RTSs behind them too), so the receiver keeps then
    // all it will keep.
    ASSERT_TRUE(progress_until([&] { return t.unexp_bytes >= eager_sent * kSize; }, "the eager messages"));
    for (int i = 0; i < 100; ++i) progress();
    most = std::max(most, t.unexp_bytes);
    EXPECT_TRUE(t.holding);
    EXPECT_TRUE(ep->flags & loom::ucp::kEpTagHeld);
    // The receiver told its sender once it crossed the bound, and the sender sent nothing by
    // eager once it heard: the receiver keeps exactly what was sent before (without the
    // bound it would keep all 4 MB).
    EXPECT_GT(most, kBound);
    EXPECT_EQ(eager_sent * kSize, most) << "the receiver kept " << most << " bytes";
    EXPECT_EQ(most, t.unexp_bytes);
    EXPECT_LT(eager_sent, std::size_t{kCount / 2}) << "the hold reached the sender";
    if (std::string(GetParam().tls).find("rc") == std::string::npos) {
        EXPECT_LE(most, kBound + 128 * kSize) << "the receiver kept " << most << " bytes";
    }
    const auto waiting = std::count_if(sends.begin(), sends.end(), [](loom_status_ptr_t r) {
        return LOOM_PTR_IS_PTR(r) && loom_request_check_status(r) == LOOM_INPROGRESS;
    });
    EXPECT_GT(waiting, kCount / 2) << "the sends past the bound wait for their receiver";
    std::vector<char> out(kSize);
    for (int i = 0; i < kCount; ++i) {
        loom_tag_recv_info_t info{};
        ASSERT_EQ(LOOM_OK, wait(recv_nbx(out.data(), kSize, 0x900, ~0ull, &info), &info)) << i;
        ASSERT_EQ(data[static_cast<std::size_t>(i)], out) << "message " << i << " out of order or damaged";
    }
    for (loom_status_ptr_t r : sends) EXPECT_EQ(LOOM_OK, wait(r));
    EXPECT_EQ(0u, t.unexp_bytes);
    EXPECT_FALSE(t.holding);
    ASSERT_TRUE(progress_until([&] { return !(ep->flags & loom::ucp::kEpTagHeld); }, "the sender to go on"));
    EXPECT_EQ(eager_limit, ep->tag_short_limit);
    EXPECT_EQ(nullptr, loom_tag_send_nbx(ep_, data[0].data(), 8, 0x901, nullptr)) << "eager short again";
    char small[8];
    EXPECT_EQ(LOOM_OK, wait(loom_tag_recv_nbx(receiver_, small, sizeof(small), 0x901, ~0ull, nullptr)));
}

TEST_P(UcpTagTest, TruncationReportsFullLength) {
    for (std::size_t size : {100, 20000, 500000}) {
        for (bool expected : {true, false}) {
            truncated_receive(size, expected);
        }
    }
}

TEST_P(UcpTagTest, SyncSendCompletesOnlyAfterMatch) {
    for (std::size_t size : {8, 20000, 400000}) {
        auto data = pattern(size, 9);
        loom_status_ptr_t sreq = loom_tag_send_sync_nbx(ep_, data.data(), size, 42, nullptr);
        ASSERT_TRUE(LOOM_PTR_IS_PTR(sreq));
        for (int i = 0; i < 200; ++i) progress();
        EXPECT_EQ(LOOM_INPROGRESS, loom_request_check_status(sreq)) << "completed before any receive, size " << size;
        std::vector<char> out(size);
        ASSERT_EQ(LOOM_OK, wait(loom_tag_recv_nbx(receiver_, out.data(), size, 42, ~0ull, nullptr)));
        EXPECT_EQ(LOOM_OK, wait(sreq));
        EXPECT_EQ(data, out);
    }
}

TEST_P(UcpTagTest, IovSendAndReceive) {
    for (std::size_t size : {10, 20000, 300000}) {
        auto data = pattern(size, 4);
        // Send from three pieces, receive into two of other sizes.
        std::size_t a = size / 3, b = size / 4;
        loom_dt_iov_t siov[3] = {{data.data(), a}, {data.data() + a, b}, {data.data() + a + b, size - a - b}};
        std::vector<char> r1(size / 2), r2(size - size / 2);
        loom_dt_iov_t riov[2] = {{r1.data(), r1.size()}, {r2.data(), r2.size()}};
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_DATATYPE;
        p.datatype = loom_dt_make_iov();
        loom_status_ptr_t rreq = loom_tag_recv_nbx(receiver_, riov, 2, 3, ~0ull, &p);
        loom_status_ptr_t sreq = loom_tag_send_nbx(ep_, siov, 3, 3, &p);
        loom_tag_recv_info_t info{};
        ASSERT_EQ(LOOM_OK, wait(rreq, &info));
        ASSERT_EQ(LOOM_OK, wait(sreq));
        EXPECT_EQ(size, info.length);
        std::vector<char> joined(r1);
        joined.insert(joined.end(), r2.begin(), r2.end());
        EXPECT_EQ(data, joined) << size;
    }
}

/**
 * Buffers the copy would fault on are refused with a clear error before anything moves: a
 * NULL buffer with a nonzero count (send, sync send, receive, at every protocol's size), an
 * iov with a NULL entry or whose lengths overflow size_t, a receive on a NULL worker (all
 * crashed or sent a wrapped length before). The endpoint stays usable.
 */
TEST_P(UcpTagTest, InvalidBuffersAreRefusedWithAClearError) {
    auto refused = [&](loom_status_ptr_t r) { return wait(r) == LOOM_ERR_INVALID_PARAM; };
    loom::test::LogCapture log("error");
    for (std::size_t size : {8, 20000, 300000}) {
        EXPECT_TRUE(refused(loom_tag_send_nbx(ep_, nullptr, size, 1, nullptr))) << size;
        EXPECT_TRUE(refused(loom_tag_send_sync_nbx(ep_, nullptr, size, 1, nullptr))) << size;
        EXPECT_TRUE(refused(loom_tag_recv_nbx(receiver_, nullptr, size, 1, ~0ull, nullptr))) << size;
    }
    EXPECT_EQ(9, log.count("with a NULL buffer and a nonzero count"));
    EXPECT_TRUE(refused(loom_tag_recv_nbx(nullptr, nullptr, 0, 1, ~0ull, nullptr)));
    EXPECT_EQ(1, log.count("loom_tag_recv_nbx: NULL worker"));
    char buf[16] = {};
    loom_request_param_t iov_param{};
    iov_param.op_attr_mask = LOOM_OP_ATTR_FIELD_DATATYPE;
    iov_param.datatype = loom_dt_make_iov();
    loom_dt_iov_t null_entry[2] = {{buf, 4}, {nullptr, 10}};
    loom_dt_iov_t wrapping[2] = {{buf, SIZE_MAX}, {buf, 2}};  // sums to 1
    for (loom_dt_iov_t* iov : {null_entry, wrapping}) {
        EXPECT_TRUE(refused(loom_tag_send_nbx(ep_, iov, 2, 1, &iov_param)));
        EXPECT_TRUE(refused(loom_tag_recv_nbx(receiver_, iov, 2, 1, ~0ull, &iov_param)));
    }
    EXPECT_EQ(2, log.count("entry 1 is NULL with a length of 10"));
    EXPECT_EQ(2, log.count("lengths overflow size_t at entry 1"));
    // Zero bytes from NULL are fine, and the endpoint goes on.
    EXPECT_EQ(LOOM_OK, wait(loom_tag_send_nbx(ep_, nullptr, 0, 2, nullptr)));
    EXPECT_EQ(LOOM_OK, wait(loom_tag_recv_nbx(receiver_, nullptr, 0, 2, ~0ull, nullptr)));
    auto data = pattern(20000, 5);
    std::vector<char> out(data.size());
    loom_status_ptr_t sreq = loom_tag_send_nbx(ep_, data.data(), data.size(), 3, nullptr);
    EXPECT_EQ(LOOM_OK, wait(loom_tag_recv_nbx(receiver_, out.data(), out.size(), 3, ~0ull, nullptr)));
    EXPECT_EQ(LOOM_OK, wait(sreq));
    EXPECT_EQ(data, out);
}

/** A generic datatype: every other byte of the user buffer (a strided vector). */
struct Strided {
    char* buf;
    std::size_t count;
    std::size_t elem;  ///< whole elements of this many bytes only (0: any piece)
};
// The context, when not null, is an element size: pack then packs whole elements only (it
// may return less than asked, as MPICH's does) and unpack takes whole elements only.
void* start_pack(void* ctx, const void* buffer, size_t count) {
    return new Strided{static_cast<char*>(const_cast<void*>(buffer)), count, reinterpret_cast<std::uintptr_t>(ctx)};
}
void* start_unpack(void* ctx, void* buffer, size_t count) {
    return new Strided{static_cast<char*>(buffer), count, reinterpret_cast<std::uintptr_t>(ctx)};
}
size_t packed_size(void* state) { return static_cast<Strided*>(state)->count; }
size_t pack(void* state, size_t offset, void* dest, size_t max) {
    auto* s = static_cast<Strided*>(state);
    size_t n = std::min(max, s->count - offset);
    if (s->elem != 0 && offset + n < s->count) n -= n % s->elem;
    for (size_t i = 0; i < n; ++i) static_cast<char*>(dest)[i] = s->buf[2 * (offset + i)];
    return n;
}
loom_status_t unpack(void* state, size_t offset, const void* src, size_t length) {
    auto* s = static_cast<Strided*>(state);
    if (offset + length > s->count) return LOOM_ERR_MESSAGE_TRUNCATED;
    if (s->elem != 0 && (offset % s->elem != 0 || (offset + length < s->count && length % s->elem != 0))) {
        return LOOM_ERR_MESSAGE_TRUNCATED;  // a piece that splits an element
    }
    for (size_t i = 0; i < length; ++i) s->buf[2 * (offset + i)] = static_cast<const char*>(src)[i];
    return LOOM_OK;
}
void finish(void* state) { delete static_cast<Strided*>(state); }

TEST_P(UcpTagTest, GenericDatatype) {
    for (std::uintptr_t elem : {0, 7}) {  // 7: packs whole 7-byte elements only (less than asked)
    SCOPED_TRACE(elem);
    loom_generic_dt_ops_t ops{start_pack, start_unpack, packed_size, pack, unpack, finish};
    loom_datatype_t dt;
    ASSERT_EQ(LOOM_OK, loom_dt_create_generic(&ops, reinterpret_cast<void*>(elem), &dt));
    for (std::size_t count : {5, 20000, 300000}) {
        auto src = pattern(2 * count, 6);
        std::vector<char> dst(2 * count, 0);
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_DATATYPE;
        p.datatype = dt;
        loom_status_ptr_t rreq = loom_tag_recv_nbx(receiver_, dst.data(), count, 8, ~0ull, &p);
        loom_status_ptr_t sreq = loom_tag_send_nbx(ep_, src.data(), count, 8, &p);
        ASSERT_EQ(LOOM_OK, wait(rreq));
        ASSERT_EQ(LOOM_OK, wait(sreq));
        for (std::size_t i = 0; i < count; ++i) {
            ASSERT_EQ(src[2 * i], dst[2 * i]) << i;
            ASSERT_EQ(0, dst[2 * i + 1]) << i;
        }
    }
    loom_dt_destroy(dt);
    }
}

TEST_P(UcpTagTest, ThousandsOutstanding) {
    const int n = 5000;
    std::vector<std::uint64_t> in(n), out(n, 0);
    std::vector<loom_status_ptr_t> rreqs, sreqs;
    for (int i = 0; i < n; ++i) rreqs.push_back(loom_tag_recv_nbx(receiver_, &out[i], 8, i, ~0ull, nullptr));
    for (int i = 0; i < n; ++i) {
        in[i] = 1000000 + i;
        sreqs.push_back(loom_tag_send_nbx(ep_, &in[i], 8, n - 1 - i, nullptr));  // reverse tag order
    }
    for (auto r : sreqs) ASSERT_EQ(LOOM_OK, wait(r));
    for (auto r : rreqs) ASSERT_EQ(LOOM_OK, wait(r));
    for (int i = 0; i < n; ++i) EXPECT_EQ(1000000u + (n - 1 - i), out[i]) << i;
}

/**
 * Sends that find the transport full are queued as requests and go out later, short ones by
 * eager short from the request, the others by bcopy: order and data survive the mix.
 */
TEST_P(UcpTagTest, QueuedSmallSendsKeepOrderAndData) {
    const std::vector<std::size_t> sizes = {8, 232, 100, 233, 8, 1000, 16, 8};
    const int n = 6000;
    std::vector<std::vector<char>> sent(n);
    std::vector<loom_status_ptr_t> sreqs;
    for (int i = 0; i < n; ++i) {
        sent[i] = pattern(sizes[i % sizes.size()], static_cast<unsigned>(i));
        std::memcpy(sent[i].data(), &i, sizeof(i));
        sreqs.push_back(loom_tag_send_nbx(ep_, sent[i].data(), sent[i].size(), 5, nullptr));
        ASSERT_FALSE(LOOM_PTR_IS_ERR(sreqs.back())) << i;
    }
    std::vector<char> out(2000);
    for (int i = 0; i < n; ++i) {
        loom_tag_recv_info_t info{};
        ASSERT_EQ(LOOM_OK, wait(recv_nbx(out.data(), out.size(), 5, ~0ull, &info), &info)) << i;
        ASSERT_EQ(sent[i].size(), info.length) << "message " << i << " out of order";
        ASSERT_TRUE(std::equal(sent[i].begin(), sent[i].end(), out.begin())) << "message " << i;
    }
    for (auto r : sreqs) EXPECT_EQ(LOOM_OK, wait(r));
}

TEST_P(UcpTagTest, CallbackAndUserRequestMemory) {
    loom_context_attr_t attr{};
    attr.field_mask = LOOM_ATTR_FIELD_REQUEST_SIZE;
    ASSERT_EQ(LOOM_OK, loom_context_query(ctx_, &attr));
    std::vector<char> mem(attr.request_size + 64);
    void* user_req = mem.data() + attr.request_size;
    struct Seen {
        int calls = 0;
        loom_status_t status = LOOM_INPROGRESS;
        size_t length = 0;
    } seen;
    loom_request_param_t rp{};
    rp.op_attr_mask = LOOM_OP_ATTR_FIELD_REQUEST | LOOM_OP_ATTR_FIELD_CALLBACK | LOOM_OP_ATTR_FIELD_USER_DATA;
    rp.request = user_req;
    rp.user_data = &seen;
    rp.cb.recv = [](void*, loom_status_t status, const loom_tag_recv_info_t* info, void* ud) {
        auto* s = static_cast<Seen*>(ud);
        ++s->calls;
        s->status = status;
        s->length = info->length;
    };
    char out[64];
    loom_status_ptr_t r = loom_tag_recv_nbx(receiver_, out, sizeof(out), 11, ~0ull, &rp);
    ASSERT_EQ(user_req, r);
    char msg[40] = "hello";
    EXPECT_EQ(LOOM_OK, wait(loom_tag_send_nbx(ep_, msg, sizeof(msg), 11, nullptr)));
    while (seen.calls == 0) progress();
    EXPECT_EQ(1, seen.calls);
    EXPECT_EQ(LOOM_OK, seen.status);
    EXPECT_EQ(sizeof(msg), seen.length);
    EXPECT_STREQ("hello", out);
}

TEST_P(UcpTagTest, BadAddressIsRefused) {
    std::vector<std::uint8_t> garbage(64, 0xab);
    loom_ep_params_t p{};
    p.field_mask = LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS;
    p.address = garbage.data();
    loom_ep_h ep = nullptr;
    EXPECT_EQ(LOOM_ERR_INVALID_ADDRESS, loom_ep_create(sender_, &p, &ep));
    void* addr;
    size_t len;
    ASSERT_EQ(LOOM_OK, loom_worker_get_address(receiver_, &addr, &len));
    static_cast<std::uint8_t*>(addr)[1] = 99;  // a version from the future
    p.address = addr;
    EXPECT_EQ(LOOM_ERR_VERSION_MISMATCH, loom_ep_create(sender_, &p, &ep));
    loom_worker_release_address(receiver_, addr);
}

/** A flush waits, without blocking the caller, for a rendezvous send that only the receiver can finish. */
TEST_P(UcpTagTest, FlushWaitsForRendezvousWithoutBlocking) {
    auto data = pattern(1 << 20, 2);
    loom_status_ptr_t sreq = loom_tag_send_nbx(ep_, data.data(), data.size(), 21, nullptr);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(sreq));
    loom_status_ptr_t flush = loom_ep_flush_nbx(ep_, nullptr);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(flush)) << "a flush with a send outstanding completed at once";
    loom_status_ptr_t wflush = loom_worker_flush_nbx(sender_, nullptr);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(wflush));
    for (int i = 0; i < 100; ++i) progress();
    EXPECT_EQ(LOOM_INPROGRESS, loom_request_check_status(flush));
    std::vector<char> out(data.size());
    ASSERT_EQ(LOOM_OK, wait(loom_tag_recv_nbx(receiver_, out.data(), out.size(), 21, ~0ull, nullptr)));
    EXPECT_EQ(LOOM_OK, wait(flush));
    EXPECT_EQ(LOOM_OK, wait(wflush));
    EXPECT_EQ(LOOM_OK, wait(sreq));
    EXPECT_EQ(nullptr, loom_ep_flush_nbx(ep_, nullptr)) << "nothing outstanding: completes at once";
}

/** A graceful close completes once the endpoint's sends have; a forced one cancels them. */
TEST_P(UcpTagTest, CloseFlushesOrCancels) {
    auto data = pattern(1 << 20, 2);
    loom_status_ptr_t sreq = loom_tag_send_nbx(ep_, data.data(), data.size(), 22, nullptr);
    loom_status_ptr_t close = loom_ep_close_nbx(ep_, nullptr);
    ep_ = nullptr;
    ASSERT_TRUE(LOOM_PTR_IS_PTR(close));
    std::vector<char> out(data.size());
    ASSERT_EQ(LOOM_OK, wait(loom_tag_recv_nbx(receiver_, out.data(), out.size(), 22, ~0ull, nullptr)));
    EXPECT_EQ(LOOM_OK, wait(close));
    EXPECT_EQ(LOOM_OK, wait(sreq));
    EXPECT_EQ(data, out);

    ep_ = connect(sender_, receiver_);
    sreq = loom_tag_send_nbx(ep_, data.data(), data.size(), 23, nullptr);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(sreq));
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
    p.flags = LOOM_EP_CLOSE_FLAG_FORCE;
    EXPECT_EQ(LOOM_OK, wait(loom_ep_close_nbx(ep_, &p)));
    ep_ = nullptr;
    EXPECT_EQ(LOOM_ERR_CANCELED, wait(sreq));
}

TEST(UcpEndpoint, SelfCannotReachAnotherWorkerAndSaysSo) {
    setenv("LOOM_TLS", "self", 1);
    loom_params_t params{};
    params.field_mask = LOOM_PARAM_FIELD_FEATURES;
    params.features = LOOM_FEATURE_TAG;
    loom_context_h ctx = nullptr;
    ASSERT_EQ(LOOM_OK, loom_init(&params, &ctx));
    unsetenv("LOOM_TLS");
    loom_worker_h a = nullptr, b = nullptr;
    ASSERT_EQ(LOOM_OK, loom_worker_create(ctx, nullptr, &a));
    ASSERT_EQ(LOOM_OK, loom_worker_create(ctx, nullptr, &b));
    void* addr;
    size_t len;
    ASSERT_EQ(LOOM_OK, loom_worker_get_address(b, &addr, &len));
    loom_ep_params_t ep_params{};
    ep_params.field_mask = LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address = addr;
    loom_ep_h ep = nullptr;
    {
        loom::test::LogCapture errors("error");
        EXPECT_EQ(LOOM_ERR_UNREACHABLE, loom_ep_create(a, &ep_params, &ep));
        EXPECT_EQ(1, errors.count("self: reaches only its own worker"));
    }
    loom_worker_release_address(b, addr);
    loom_worker_destroy(b);
    loom_worker_destroy(a);
    loom_cleanup(ctx);
}

/**
 * "<tl>:aux" in LOOM_TLS: the transport only carries wire-up, never data, and a peer
 * that says so in its address is treated the same way (both sides choose alike).
 */
TEST(UcpEndpoint, AuxTransportsCarryOnlyWireup) {
    struct Side {
        loom_context_h ctx = nullptr;
        loom_worker_h worker = nullptr;
        explicit Side(const char* tls) {
            setenv("LOOM_TLS", tls, 1);
            loom_params_t params{};
            params.field_mask = LOOM_PARAM_FIELD_FEATURES;
            params.features = LOOM_FEATURE_TAG;
            EXPECT_EQ(LOOM_OK, loom_init(&params, &ctx));
            unsetenv("LOOM_TLS");
            if (ctx != nullptr) {
                EXPECT_EQ(LOOM_OK, loom_worker_create(ctx, nullptr, &worker));
            }
        }
        ~Side() {
            if (worker != nullptr) loom_worker_destroy(worker);
            if (ctx != nullptr) loom_cleanup(ctx);
        }
        loom_status_t connect(Side& to, loom_ep_h* ep) {
            void* addr;
            size_t len;
            EXPECT_EQ(LOOM_OK, loom_worker_get_address(to.worker, &addr, &len));
            loom_ep_params_t ep_params{};
            ep_params.field_mask = LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS;
            ep_params.address = addr;
            loom_status_t s = loom_ep_create(worker, &ep_params, ep);
            loom_worker_release_address(to.worker, addr);
            return s;
        }
    };
    {
        Side a("tcp:aux"), b("tcp:aux");
        ASSERT_NE(nullptr, a.worker);
        loom::test::LogCapture errors("error");
        loom_ep_h ep = nullptr;
        EXPECT_EQ(LOOM_ERR_UNREACHABLE, a.connect(b, &ep));
        EXPECT_EQ(1, errors.count("only carries wire-up"));
    }
    {
        // Only the peer says aux: this side leaves tcp out as well.
        Side a("tcp"), b("tcp:aux");
        ASSERT_NE(nullptr, b.worker);
        loom::test::LogCapture errors("error");
        loom_ep_h ep = nullptr;
        EXPECT_EQ(LOOM_ERR_UNREACHABLE, a.connect(b, &ep));
        EXPECT_EQ(1, errors.count("tcp/lo: only carries wire-up"));
    }
    {
        // Nothing here connects endpoint to endpoint: shm carries everything, tcp stays idle.
        setenv("LOOM_PROTO_INFO", "y", 1);
        Side a("shm,tcp:aux"), b("shm,tcp:aux");
        unsetenv("LOOM_PROTO_INFO");
        loom_ep_h ep = nullptr;
        testing::internal::CaptureStderr();
        EXPECT_EQ(LOOM_OK, a.connect(b, &ep));
        std::string info = testing::internal::GetCapturedStderr();
        EXPECT_NE(std::string::npos, info.find("(AM lane shm/")) << info;
        // tcp is no lane, and the explanation says why.
        EXPECT_EQ(std::string::npos, info.find("wired up over tcp")) << info;
        EXPECT_EQ(std::string::npos, info.find(" on tcp/")) << info;
        EXPECT_NE(std::string::npos, info.find("tcp/lo: not used: only carries wire-up (:aux in LOOM_TLS)")) << info;
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
        p.flags = LOOM_EP_CLOSE_FLAG_FORCE;
        (void)loom_ep_close_nbx(ep, &p);
    }
}

/** Wire-up messages are checked before use: each bad one is dropped with one line. */
TEST_P(UcpTagTest, MalformedWireupMessagesAreDropped) {
    send_recv(8, true);  // both endpoints are up
    auto* ep = reinterpret_cast<loom::ucp::Ep*>(ep_);
    void* addr;
    size_t addr_len;
    ASSERT_EQ(LOOM_OK, loom_worker_get_address(sender_, &addr, &addr_len));
    std::vector<std::uint8_t> address(static_cast<std::uint8_t*>(addr), static_cast<std::uint8_t*>(addr) + addr_len);
    loom_worker_release_address(sender_, addr);
    auto message = [&](std::uint8_t type, std::uint8_t num_lanes, std::uint64_t src, std::uint64_t dst,
                       const std::vector<std::uint8_t>& tail) {
        loom::ucp::WireupHdr hdr{};
        hdr.type = type;
        hdr.num_lanes = num_lanes;
        hdr.src_ep_id = src;
        hdr.dst_ep_id = dst;
        std::vector<std::uint8_t> m(sizeof(hdr) + tail.size());
        std::memcpy(m.data(), &hdr, sizeof(hdr));
        std::copy(tail.begin(), tail.end(), m.begin() + sizeof(hdr));
        return m;
    };
    // Sends @p m and progresses until @p arrived says its log line is there (bounded), or
    // a while when it leaves no line at warn level.
    auto deliver = [&](const std::vector<std::uint8_t>& m, const std::function<bool()>& arrived = nullptr) {
        ssize_t n;
        while ((n = loom::ucp::am_bcopy_bytes(ep->am_ep, loom::ucp::kAmWireup, m.data(), m.size())) ==
               static_cast<ssize_t>(loom::Status::no_resource)) {
            progress();
        }
        ASSERT_GE(n, 0);
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        if (!arrived) {
            for (int i = 0; i < 200; ++i) progress();
            return;
        }
        while (!arrived() && std::chrono::steady_clock::now() < deadline) progress();
    };
    std::vector<std::uint8_t> one_lane = address;  // an entry for a lane nobody has
    loom::ucp::WireupLaneHdr lane{0, 0, 4};
    one_lane.insert(one_lane.end(), reinterpret_cast<std::uint8_t*>(&lane),
                    reinterpret_cast<std::uint8_t*>(&lane) + sizeof(lane));
    one_lane.insert(one_lane.end(), {1, 2, 3, 4});
    {
        loom::test::LogCapture warnings("warn");
        auto logged = [&](const char* what, int n) { return [&warnings, what, n] { return warnings.count(what) == n; }; };
        deliver(std::vector<std::uint8_t>(4, 1), logged("truncated", 1));
        EXPECT_EQ(1, warnings.count("truncated"));
        deliver(message(9, 0, 0, 0, address), logged("unknown type 9", 1));
        EXPECT_EQ(1, warnings.count("unknown type 9"));
        deliver(message(loom::ucp::kWireupRequest, 0, 0, 0, {address.begin(), address.begin() + 10}),
                logged("bad address", 1));
        EXPECT_EQ(1, warnings.count("bad address"));
        const char* malformed = "malformed wire-up message";
        deliver(message(loom::ucp::kWireupRequest, 2, 5, 0, one_lane), logged(malformed, 1));  // 2 entries, has 1
        deliver(message(loom::ucp::kWireupRequest, 1, 0, 0, one_lane), logged(malformed, 2));  // no sender id
        deliver(message(loom::ucp::kWireupReply, 0, 5, 1, address), logged(malformed, 3));     // no entries
        EXPECT_EQ(3, warnings.count(malformed));
        // Replies and acknowledgements for endpoints that do not exist find nothing.
        deliver(message(loom::ucp::kWireupReply, 1, 5, 12345, one_lane));
        deliver(message(loom::ucp::kWireupAck, 0, 5, 12345, {}));
    }
    {
        // Well formed, but for a lane the receiver does not have, or (endpoint-to-endpoint
        // sets) with an endpoint address its transport refuses.
        loom::test::LogCapture errors("error");
        auto refused = [&] { return errors.count("lanes this worker does not use") + errors.count("wire-up with"); };
        deliver(message(loom::ucp::kWireupRequest, 1, 5, 0, one_lane), [&] { return refused() > 0; });
        EXPECT_EQ(1, refused());
    }
    // Nothing above disturbed the endpoints.
    send_recv(100, true);
    send_recv(70000, false);
}

// --- rendezvous schemes (LOOM_RNDV_SCHEME) -------------------------------------------------

const char* const kRndvSchemes[] = {"get_zcopy", "put_zcopy", "get_put", "am"};

/** Every scheme, sizes on both sides of a 4 KiB threshold, expected and unexpected. */
TEST_P(UcpTagTest, EveryRendezvousSchemeAcrossTheThreshold) {
    const std::vector<std::size_t> sizes = {4095, 4096, 4097, 8191, 8192, 8193, 12289, 70000, 262147, 1 << 20, 3 << 20};
    for (const char* scheme : kRndvSchemes) {
        SCOPED_TRACE(scheme);
        init({{"LOOM_RNDV_SCHEME", scheme}, {"LOOM_RNDV_THRESH", "4k"}});
        for (std::size_t size : sizes) {
            send_recv(size, true);
            send_recv(size, false);
        }
        // Synchronous sends complete too: the receiver's answer (ATS, RTR or FIN) says it matched.
        for (std::size_t size : {std::size_t{70000}, std::size_t{1} << 20}) {
            auto data = pattern(size, 3);
            std::vector<char> out(size);
            loom_status_ptr_t sreq = loom_tag_send_sync_nbx(ep_, data.data(), size, 9, nullptr);
            ASSERT_FALSE(LOOM_PTR_IS_ERR(sreq));
            ASSERT_EQ(LOOM_OK, wait(loom_tag_recv_nbx(receiver_, out.data(), size, 9, ~0ull, nullptr))) << size;
            ASSERT_EQ(LOOM_OK, wait(sreq)) << "synchronous send of " << size;
            EXPECT_EQ(data, out);
        }
    }
}

/** LOOM_PROTO_INFO names the scheme an endpoint's rendezvous uses. */
TEST_P(UcpTagTest, ProtoInfoNamesTheRendezvousScheme) {
    const std::pair<const char*, const char*> expect[] = {
        {"get_zcopy", "rendezvous, RDMA GET on "},
        {"put_zcopy", "rendezvous, RDMA PUT on "},
        {"get_put", "rendezvous, RDMA GET of the head + PUT of the tail on "},
        {"am", "tag rendezvous, AM pipeline on "},
    };
    for (const auto& [scheme, text] : expect) {
        testing::internal::CaptureStderr();
        init({{"LOOM_RNDV_SCHEME", scheme}, {"LOOM_PROTO_INFO", "y"}});
        std::string info = testing::internal::GetCapturedStderr();
        EXPECT_NE(std::string::npos, info.find(text)) << scheme << ": " << info;
    }
}

/**
 * shm (CMA): a PUT moves the data on the sender's progress alone, where a GET needs the
 * receiver's; the split GETs the head on the receiver's progress and PUTs the tail on the
 * sender's. The receive completes on the FIN only.
 */
TEST_P(UcpTagTest, PutSchemesMoveTheDataOnTheSendersProgress) {
    if (std::string(GetParam().name) != "shm") GTEST_SKIP() << "needs two workers whose PUTs complete in the call";
    for (bool split : {false, true}) {
        SCOPED_TRACE(split ? "get_put" : "put_zcopy");
        init({{"LOOM_RNDV_SCHEME", split ? "get_put" : "put_zcopy"}});
        const std::size_t size = 1 << 20;
        const std::size_t head = split ? size / 2 : 0;
        auto data = pattern(size, 8);
        std::vector<char> out(size, 0x5a);
        loom_status_ptr_t rreq = loom_tag_recv_nbx(receiver_, out.data(), size, 3, ~0ull, nullptr);
        ASSERT_TRUE(LOOM_PTR_IS_PTR(rreq));
        loom_status_ptr_t sreq = loom_tag_send_nbx(ep_, data.data(), size, 3, nullptr);
        ASSERT_TRUE(LOOM_PTR_IS_PTR(sreq));
        const auto* recv = loom::ucp::request_of(rreq);
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        // The receiver alone: it answers the RTS (and GETs the head), then waits for the FIN.
        while (recv->recv.rndv_wait != loom::ucp::kRecvWaitFin && std::chrono::steady_clock::now() < deadline) {
            loom_worker_progress(receiver_);
        }
        ASSERT_EQ(loom::ucp::kRecvWaitFin, recv->recv.rndv_wait) << "the receive never waited for a FIN";
        EXPECT_EQ(LOOM_INPROGRESS, loom_request_check_status(rreq));
        EXPECT_TRUE(std::equal(data.begin(), data.begin() + head, out.begin())) << "the head is the receiver's GET";
        EXPECT_TRUE(std::all_of(out.begin() + head, out.end(), [](char c) { return c == 0x5a; }))
            << "the tail arrived before the sender ran";
        // The sender alone: it PUTs the tail and completes (on the ATS, too, when split).
        while (loom_request_check_status(sreq) == LOOM_INPROGRESS && std::chrono::steady_clock::now() < deadline) {
            loom_worker_progress(sender_);
        }
        ASSERT_EQ(LOOM_OK, wait(sreq));
        EXPECT_EQ(data, out) << "the sender completed before its data was in place";
        EXPECT_EQ(LOOM_INPROGRESS, loom_request_check_status(rreq)) << "the receive completed without its FIN";
        ASSERT_EQ(LOOM_OK, wait(rreq));
    }
}

/**
 * auto splits (GET of the head + PUT of the tail) only on a memory device, where each
 * side's core copies its part, and only above the model's size (~50 KB on shm); tcp and
 * self GET everything.
 */
TEST_P(UcpTagTest, AutoSplitsOnlyLargeMessagesOnMemoryDevices) {
    init({{"LOOM_RNDV_SCHEME", "auto"}, {"LOOM_RNDV_THRESH", "4k"}});
    const bool memory = std::string(GetParam().name) == "shm";
    send_recv(8, true);  // connected both ways: the RTS below needs only the receiver's progress
    for (std::size_t size : {std::size_t{16384}, std::size_t{1} << 20}) {
        const bool split = memory && size > 65536;
        auto data = pattern(size, 12);
        std::vector<char> out(size);
        loom_status_ptr_t rreq = loom_tag_recv_nbx(receiver_, out.data(), size, 4, ~0ull, nullptr);
        ASSERT_TRUE(LOOM_PTR_IS_PTR(rreq));
        loom_status_ptr_t sreq = loom_tag_send_nbx(ep_, data.data(), size, 4, nullptr);
        const auto* recv = loom::ucp::request_of(rreq);
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (recv->recv.sender_uuid == 0 && std::chrono::steady_clock::now() < deadline) {
            loom_worker_progress(receiver_);  // until the RTS matched
        }
        ASSERT_NE(0u, recv->recv.sender_uuid) << "the RTS never arrived";
        EXPECT_EQ(split, (recv->recv.rndv_wait & loom::ucp::kRecvWaitFin) != 0) << "size " << size;
        ASSERT_EQ(LOOM_OK, wait(rreq));
        ASSERT_EQ(LOOM_OK, wait(sreq));
        EXPECT_EQ(data, out) << "size " << size;
    }
}

/**
 * shm, split: the receiver's ATS reaches the sender while the sender's FIN still waits
 * for room on the full AM lane: the send completes only once its FIN left, and the
 * receive gets it.
 */
TEST_P(UcpTagTest, SplitAtsBeforeAQueuedFin) {
    if (std::string(GetParam().name) != "shm") GTEST_SKIP() << "needs two workers whose PUTs complete in the call";
    init({{"LOOM_RNDV_SCHEME", "get_put"}, {"LOOM_SHM_FIFO_SIZE", "64k"}});
    send_recv(8, true);
    const std::size_t size = 1 << 20;
    auto data = pattern(size, 13);
    std::vector<char> out(size);
    loom_status_ptr_t rreq = loom_tag_recv_nbx(receiver_, out.data(), size, 40, ~0ull, nullptr);
    loom_status_ptr_t sreq = loom_tag_send_nbx(ep_, data.data(), size, 40, nullptr);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(sreq));
    const auto* recv = loom::ucp::request_of(rreq);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    // The receiver alone: RTR, the GET of the head and the ATS are out.
    while (recv->recv.rndv_wait != loom::ucp::kRecvWaitFin && std::chrono::steady_clock::now() < deadline) {
        loom_worker_progress(receiver_);
    }
    ASSERT_EQ(loom::ucp::kRecvWaitFin, recv->recv.rndv_wait);
    // Fill the receiver's FIFO with messages it drops silently (acknowledgements of a
    // wire-up nobody started), so the FIN finds no room but nothing is queued before it.
    loom::ucp::WireupHdr ack{};
    ack.type = loom::ucp::kWireupAck;
    ack.src_ep_id = 5;
    ack.dst_ep_id = 12345;
    auto* am_ep = reinterpret_cast<loom::ucp::Ep*>(ep_)->am_ep;
    int filled = 0;
    while (loom::ucp::am_bcopy_bytes(am_ep, loom::ucp::kAmWireup, &ack, sizeof(ack)) >= 0 && filled < 100000) ++filled;
    ASSERT_LT(filled, 100000) << "the receiver's FIFO never filled";
    // The sender alone: it PUTs the tail, its FIN finds no room, the ATS arrives.
    const auto* send = loom::ucp::request_of(sreq);
    for (int i = 0; i < 200; ++i) loom_worker_progress(sender_);
    EXPECT_EQ(0, send->send.rndv_wait & loom::ucp::kSendWaitAts) << "the ATS never arrived";
    EXPECT_NE(0, send->send.rndv_wait & loom::ucp::kSendWaitFin) << "the FIN did not wait";
    EXPECT_EQ(LOOM_INPROGRESS, loom_request_check_status(sreq)) << "completed before its FIN left";
    EXPECT_EQ(data, out) << "the tail is in place before the FIN";
    EXPECT_EQ(LOOM_INPROGRESS, loom_request_check_status(rreq));
    ASSERT_EQ(LOOM_OK, wait(rreq));
    ASSERT_EQ(LOOM_OK, wait(sreq));
}

/** Truncation in every scheme: nothing moves, the receive reports the full length, the send completes. */
TEST_P(UcpTagTest, TruncationUnderEveryScheme) {
    for (const char* scheme : kRndvSchemes) {
        SCOPED_TRACE(scheme);
        init({{"LOOM_RNDV_SCHEME", scheme}, {"LOOM_RNDV_THRESH", "4k"}});
        for (std::size_t size : {20000, 500000}) {
            for (bool expected : {true, false}) {
                truncated_receive(size, expected);
            }
        }
        send_recv(300000, true);  // and the endpoint still works
    }
}

/** A non-contiguous buffer on either side: the PUT schemes fall back (AM pipeline) and the data arrives. */
TEST_P(UcpTagTest, NonContiguousFallsBackUnderPutSchemes) {
    for (const char* scheme : {"put_zcopy", "get_put"}) {
        SCOPED_TRACE(scheme);
        init({{"LOOM_RNDV_SCHEME", scheme}, {"LOOM_RNDV_THRESH", "4k"}});
        for (std::size_t size : {20000, 300000}) {
            for (bool iov_receive : {true, false}) {
                auto data = pattern(size, 4);
                std::vector<char> out(size, 0);
                const std::size_t a = size / 3;
                loom_dt_iov_t siov[2] = {{data.data(), a}, {data.data() + a, size - a}};
                loom_dt_iov_t riov[2] = {{out.data(), size - a}, {out.data() + size - a, a}};
                loom_request_param_t iov{};
                iov.op_attr_mask = LOOM_OP_ATTR_FIELD_DATATYPE;
                iov.datatype = loom_dt_make_iov();
                loom_status_ptr_t rreq = iov_receive ? loom_tag_recv_nbx(receiver_, riov, 2, 3, ~0ull, &iov)
                                                     : loom_tag_recv_nbx(receiver_, out.data(), size, 3, ~0ull, nullptr);
                loom_status_ptr_t sreq = iov_receive ? loom_tag_send_nbx(ep_, data.data(), size, 3, nullptr)
                                                     : loom_tag_send_nbx(ep_, siov, 2, 3, &iov);
                ASSERT_EQ(LOOM_OK, wait(rreq)) << size;
                ASSERT_EQ(LOOM_OK, wait(sreq)) << size;
                EXPECT_EQ(data, out) << size << " iov_receive=" << iov_receive;
            }
        }
    }
}

/**
 * A first fragment that arrives after its sender's endpoint failed (one lane may still
 * deliver what the peer sent before another lane reported its end) is dropped: its rest
 * will not come, and a receive it matched could neither complete nor be cancelled (the
 * kill test's EagerMultiSenderKilled over rc wired up over tcp, once in a CI rehearsal).
 */
TEST_P(UcpTagTest, FirstFragmentFromAFailedPeerIsDropped) {
    if (std::string(GetParam().name) != "shm") {
        GTEST_SKIP() << "needs a way from the sender to the receiver that the receiver's endpoint failure "
                        "leaves open: shm's FIFO (tcp's one socket per pair and rc's QP close with it; "
                        "self has one worker)";
    }
    RawPaths raw;
    ASSERT_NO_FATAL_FAILURE(raw_paths(raw));
    loom::ucp::Worker &sw = *raw.sw, &rw = *raw.rw;
    loom::test::LogCapture warnings("warn");
    // The receiver's endpoint to the sender fails, as when another lane reported the end.
    rw.ep_fail(rw.ep_by_uuid[sw.uuid], loom::Status::connection_reset);
    std::vector<char> out(1000);
    loom_status_ptr_t rreq = loom_tag_recv_nbx(receiver_, out.data(), out.size(), 0x55, ~0ull, nullptr);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(rreq));
    loom::ucp::EagerFirstHdr hdr{0x55, sw.uuid, 0x777700000009ull, out.size(), 0};
    std::vector<std::uint8_t> m(sizeof(hdr) + 100, 7);
    std::memcpy(m.data(), &hdr, sizeof(hdr));
    ssize_t n;
    while ((n = loom::ucp::am_bcopy_bytes(raw.to_receiver, loom::ucp::kAmEagerFirst, m.data(), m.size())) ==
           static_cast<ssize_t>(loom::Status::no_resource)) {
        progress();
    }
    ASSERT_GE(n, 0) << "the sender's path to the receiver went with the receiver's endpoint";
    ASSERT_TRUE(progress_until([&] { return warnings.count("its endpoint failed") == 1; }, "the drop"));
    // Not taken: the receive is still in the matcher, so a cancel completes it.
    loom_request_cancel(receiver_, rreq);
    ASSERT_TRUE(progress_until([&] { return loom_request_check_status(rreq) != LOOM_INPROGRESS; }, "the cancel"));
    EXPECT_EQ(LOOM_ERR_CANCELED, loom_request_check_status(rreq));
    loom_request_free(rreq);
}

/**
 * Middle fragments that arrive before their message's first (LOOM_MAX_EAGER_RAILS: the
 * middles go over other lanes than the first) are kept until it comes, for a posted
 * receive and for an unexpected message alike, also one a receive takes while a gap is
 * left in it (a fragment still to come); those of a peer whose endpoint fails go with it.
 */
TEST_P(UcpTagTest, MiddleFragmentsBeforeTheirFirstAreKept) {
    RawPaths raw;
    ASSERT_NO_FATAL_FAILURE(raw_paths(raw));
    loom::ucp::Worker &sw = *raw.sw, &rw = *raw.rw;
    loom::ucp::TagWorker& rt = loom::ucp::tag_of(rw);
    auto send_raw = [&](loom::uct::AmId id, const auto& hdr, const char* payload, std::size_t len) {
        std::vector<std::uint8_t> m(sizeof(hdr) + len);
        std::memcpy(m.data(), &hdr, sizeof(hdr));
        std::memcpy(m.data() + sizeof(hdr), payload, len);
        ssize_t n;
        while ((n = loom::ucp::am_bcopy_bytes(raw.to_receiver, id, m.data(), m.size())) ==
               static_cast<ssize_t>(loom::Status::no_resource)) {
            progress();
        }
        ASSERT_GE(n, 0);
    };
    // Message `id` of 300 bytes, tag 0x66: middles at 200 and 100 first, then the first 100 bytes.
    auto send_out_of_order = [&](std::uint64_t id, const std::vector<char>& data) {
        send_raw(loom::ucp::kAmEagerMiddle, loom::ucp::EagerMiddleHdr{sw.uuid, id, 200}, data.data() + 200,
                 100);
        send_raw(loom::ucp::kAmEagerMiddle, loom::ucp::EagerMiddleHdr{sw.uuid, id, 100}, data.data() + 100,
                 100);
        ASSERT_TRUE(progress_until([&] { return rt.early_frag_bytes == 200; }, "both middles kept"));
        send_raw(loom::ucp::kAmEagerFirst, loom::ucp::EagerFirstHdr{0x66, sw.uuid, id, data.size(), 0},
                 data.data(), 100);
    };
    const auto a = pattern(300, 1), b = pattern(300, 2);
    // Expected: the receive is posted before any fragment.
    std::vector<char> out(300, 0);
    loom_status_ptr_t rreq = loom_tag_recv_nbx(receiver_, out.data(), out.size(), 0x66, ~0ull, nullptr);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(rreq));
    ASSERT_NO_FATAL_FAILURE(send_out_of_order(0x5151000000000001ull, a));
    ASSERT_TRUE(
        progress_until([&] { return loom_request_check_status(rreq) != LOOM_INPROGRESS; }, "the receive"));
    EXPECT_EQ(LOOM_OK, loom_request_check_status(rreq));
    loom_request_free(rreq);
    EXPECT_EQ(a, out);
    EXPECT_EQ(0u, rt.early_frag_bytes);
    // Unexpected: the whole message waits in the unexpected queue, then a receive takes it.
    ASSERT_NO_FATAL_FAILURE(send_out_of_order(0x5151000000000002ull, b));
    ASSERT_TRUE(progress_until([&] { return rt.early_frag_bytes == 0; }, "the first fragment"));
    std::fill(out.begin(), out.end(), 0);
    rreq = loom_tag_recv_nbx(receiver_, out.data(), out.size(), 0x66, ~0ull, nullptr);
    if (LOOM_PTR_IS_PTR(rreq)) {
        ASSERT_TRUE(progress_until([&] { return loom_request_check_status(rreq) != LOOM_INPROGRESS; },
                                   "the receive"));
        EXPECT_EQ(LOOM_OK, loom_request_check_status(rreq));
        loom_request_free(rreq);
    } else {
        ASSERT_EQ(LOOM_OK, LOOM_PTR_STATUS(rreq));
    }
    EXPECT_EQ(b, out);
    // Unexpected with a gap: the fragment at 100 comes after the receive took the rest.
    const std::uint64_t gapped = 0x5151000000000004ull;
    send_raw(loom::ucp::kAmEagerMiddle, loom::ucp::EagerMiddleHdr{sw.uuid, gapped, 200}, a.data() + 200, 100);
    send_raw(loom::ucp::kAmEagerFirst, loom::ucp::EagerFirstHdr{0x66, sw.uuid, gapped, a.size(), 0}, a.data(),
             100);
    loom_tag_recv_info_t info{};
    ASSERT_TRUE(progress_until(
        [&] {
            return rt.early_frag_bytes == 0 && loom_tag_probe_nb(receiver_, 0x66, ~0ull, 0, &info) != nullptr;
        },
        "the first fragment"));
    std::fill(out.begin(), out.end(), 0);
    rreq = loom_tag_recv_nbx(receiver_, out.data(), out.size(), 0x66, ~0ull, nullptr);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(rreq));
    send_raw(loom::ucp::kAmEagerMiddle, loom::ucp::EagerMiddleHdr{sw.uuid, gapped, 100}, a.data() + 100, 100);
    ASSERT_TRUE(
        progress_until([&] { return loom_request_check_status(rreq) != LOOM_INPROGRESS; }, "the receive"));
    EXPECT_EQ(LOOM_OK, loom_request_check_status(rreq));
    loom_request_free(rreq);
    EXPECT_EQ(a, out) << "the part that came before the gap was filled is lost";
    // A middle whose first never comes waits until its sender's endpoint fails.
    send_raw(loom::ucp::kAmEagerMiddle, loom::ucp::EagerMiddleHdr{sw.uuid, 0x5151000000000003ull, 100},
             a.data(), 50);
    ASSERT_TRUE(progress_until([&] { return rt.early_frag_bytes == 50; }, "the middle kept"));
    if (&rw != &sw) {
        rw.ep_fail(rw.ep_by_uuid[sw.uuid], loom::Status::connection_reset);
        EXPECT_EQ(0u, rt.early_frag_bytes);
        EXPECT_TRUE(rt.early_frags.empty());
    }
}

/**
 * The PUT schemes' messages are checked before use: a truncated, inconsistent or unknown
 * RTR-with-key or FIN is dropped with one line and changes nothing.
 */
TEST_P(UcpTagTest, MalformedRendezvousPutMessagesAreDropped) {
    init({{"LOOM_RNDV_SCHEME", "put_zcopy"}, {"LOOM_RNDV_THRESH", "4k"}});
    RawPaths raw;
    ASSERT_NO_FATAL_FAILURE(raw_paths(raw));
    loom::ucp::Worker &sw = *raw.sw, &rw = *raw.rw;
    loom::uct::Ep *to_sender = raw.to_sender, *to_receiver = raw.to_receiver;
    auto deliver = [&](loom::uct::Ep* uep, loom::uct::AmId id, const std::vector<std::uint8_t>& m,
                       const std::function<bool()>& arrived) {
        ssize_t n;
        while ((n = loom::ucp::am_bcopy_bytes(uep, id, m.data(), m.size())) ==
               static_cast<ssize_t>(loom::Status::no_resource)) {
            progress();
        }
        ASSERT_GE(n, 0);
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!arrived() && std::chrono::steady_clock::now() < deadline) progress();
    };
    auto bytes = [](const auto& hdr, std::size_t extra = 0) {
        std::vector<std::uint8_t> m(sizeof(hdr) + extra, 0);
        std::memcpy(m.data(), &hdr, sizeof(hdr));
        return m;
    };
    // A rendezvous send waiting for its receiver, which has its RTS.
    auto data = pattern(100000, 7);
    loom_status_ptr_t sreq = loom_tag_send_nbx(ep_, data.data(), data.size(), 77, nullptr);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(sreq));
    loom_tag_recv_info_t probe{};
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (loom_tag_probe_nb(receiver_, 77, ~0ull, 0, &probe) == nullptr && std::chrono::steady_clock::now() < deadline) {
        progress();
    }
    const std::uint64_t sreq_id = sw.req_table.wire_id(loom::ucp::request_of(sreq));
    {
        loom::test::LogCapture warnings("warn");
        auto logged = [&](const char* what, int n) { return [&warnings, what, n] { return warnings.count(what) == n; }; };
        loom::ucp::RndvRtrHdr rtr{};
        rtr.sreq_id = sreq_id;
        rtr.rreq_id = 1;
        rtr.receiver_uuid = rw.uuid;
        rtr.address = 4096;
        rtr.length = data.size();
        deliver(to_sender, loom::ucp::kAmRndvPutRtr, std::vector<std::uint8_t>(10, 1),
                logged("ready-to-receive of 10 bytes (truncated)", 1));
        auto bad_key = rtr;
        bad_key.rkey_length = 5;
        deliver(to_sender, loom::ucp::kAmRndvPutRtr, bytes(bad_key, 4), logged("with a 5-byte key in 60 bytes", 1));
        auto unknown = rtr;
        unknown.sreq_id = 0x777700000005ull;
        deliver(to_sender, loom::ucp::kAmRndvPutRtr, bytes(unknown), logged("ready-to-receive for unknown request", 1));
        auto short_range = rtr;
        short_range.length = data.size() - 1;
        deliver(to_sender, loom::ucp::kAmRndvPutRtr, bytes(short_range), logged("for bytes 0+99999", 1));
        auto bad_flags = rtr;
        bad_flags.flags = loom::ucp::kRtrFlagAts;  // the split, but nothing for the receiver to GET
        deliver(to_sender, loom::ucp::kAmRndvPutRtr, bytes(bad_flags), logged("(flags 0x1)", 1));
        auto stranger = rtr;
        stranger.receiver_uuid = rw.uuid ^ 1;
        deliver(to_sender, loom::ucp::kAmRndvPutRtr, bytes(stranger), logged("for a send to", 1));
        deliver(to_receiver, loom::ucp::kAmRndvFin, std::vector<std::uint8_t>(5, 1),
                logged("rendezvous FIN of 5 bytes (malformed)", 1));
        loom::ucp::RndvFinHdr fin{0x777700000005ull, sw.uuid, 0, 0};
        deliver(to_receiver, loom::ucp::kAmRndvFin, bytes(fin), logged("for unknown receive", 1));
        EXPECT_EQ(1, warnings.count("(truncated)"));
        EXPECT_EQ(1, warnings.count("-byte key in"));
        EXPECT_EQ(1, warnings.count("for unknown request"));
        EXPECT_EQ(2, warnings.count("for bytes"));
        EXPECT_EQ(1, warnings.count("for a send to"));
        EXPECT_EQ(1, warnings.count("FIN of 5 bytes"));
        EXPECT_EQ(1, warnings.count("for unknown receive"));
    }
    EXPECT_EQ(LOOM_INPROGRESS, loom_request_check_status(sreq)) << "a dropped message changed the send";
    // Nothing above disturbed the waiting send or the endpoints.
    std::vector<char> out(data.size());
    ASSERT_EQ(LOOM_OK, wait(loom_tag_recv_nbx(receiver_, out.data(), out.size(), 77, ~0ull, nullptr)));
    EXPECT_EQ(LOOM_OK, wait(sreq));
    EXPECT_EQ(data, out);
    send_recv(70000, false);
}

INSTANTIATE_TEST_SUITE_P(Tls, UcpTagTest,
                         testing::Values(TlSet{"self", "self", true}, TlSet{"shm", "shm", false},
                                         TlSet{"tcp", "tcp", false}),
                         [](const testing::TestParamInfo<TlSet>& info) { return std::string(info.param.name); });

/**
 * rc, on the device LOOM_NET_DEVICES names: only where test/rdma/run_rdma_tests.sh runs
 * the suite on RDMA devices (LOOMTEST_UCP_VERBS=1, in the RDMA VM on rxe and siw).
 */
INSTANTIATE_TEST_SUITE_P(Verbs, UcpTagTest, testing::ValuesIn(loom::test::verbs_tl_sets()),
                         [](const testing::TestParamInfo<TlSet>& info) {
                             return std::string(info.param.name);
                         });

/**
 * Whether an endpoint of the set @p set waits for its first operation under
 * LOOM_LAZY_CONNECT: when a transport of it puts off a connection (tcp's sockets, rc's
 * queue pair over rdma_cm or its wire-up endpoint to endpoint); shm has nothing to put off.
 */
bool waits_for_first_use(const TlSet& set) {
    const std::string name = set.name;
    return name == "tcp" || name == "rc" || name == "rc_wired_up_over_tcp";
}

/**
 * LOOM_LAZY_CONNECT (the default): an endpoint from a worker address that has a connection
 * to put off sends nothing until its first operation, so the peer makes no endpoint back;
 * the first send wires it up. Otherwise (or with LOOM_LAZY_CONNECT=n) the peer has its
 * endpoint back without any message of the application.
 */
TEST_P(UcpTagTest, LazyEndpointIsUnknownToItsPeerUntilItsFirstSend) {
    if (GetParam().self) GTEST_SKIP() << "one worker: its endpoint goes to itself, there is no peer to tell";
    for (bool lazy : {true, false}) {
        SCOPED_TRACE(lazy ? "lazy" : "LOOM_LAZY_CONNECT=n");
        init({{"LOOM_LAZY_CONNECT", lazy ? "y" : "n"}});
        loom::ucp::Worker& sw = *reinterpret_cast<loom_worker*>(sender_)->impl;
        loom::ucp::Worker& rw = *reinterpret_cast<loom_worker*>(receiver_)->impl;
        const auto* ep = reinterpret_cast<const loom::ucp::Ep*>(ep_);
        const bool idle = lazy && waits_for_first_use(GetParam());
        EXPECT_EQ(idle, (ep->flags & loom::ucp::kEpIdle) != 0);
        if (idle) {
            for (int i = 0; i < 1000; ++i) progress();
            EXPECT_EQ(0u, rw.ep_by_uuid.count(sw.uuid)) << "the peer heard of the idle endpoint";
        } else {
            ASSERT_TRUE(
                progress_until([&] { return rw.ep_by_uuid.count(sw.uuid) == 1; }, "the endpoint back"));
        }
        send_recv(8, true);
        send_recv(1 << 20, false);  // rendezvous: the receiver answers on its endpoint back
        EXPECT_EQ(0, ep->flags & loom::ucp::kEpIdle);
        EXPECT_EQ(1u, rw.ep_by_uuid.count(sw.uuid));
    }
}

/**
 * An idle endpoint (never used) flushes and closes gracefully at once, and its peer never
 * hears of it; a new endpoint to the same worker then works as the first would have.
 */
TEST_P(UcpTagTest, IdleEndpointClosesWithoutAWord) {
    if (GetParam().self) GTEST_SKIP() << "one worker: its endpoint goes to itself, there is no peer to tell";
    loom::ucp::Worker& sw = *reinterpret_cast<loom_worker*>(sender_)->impl;
    loom::ucp::Worker& rw = *reinterpret_cast<loom_worker*>(receiver_)->impl;
    const auto* ep = reinterpret_cast<const loom::ucp::Ep*>(ep_);
    const bool idle = waits_for_first_use(GetParam());
    EXPECT_EQ(idle, (ep->flags & loom::ucp::kEpIdle) != 0);
    EXPECT_EQ(LOOM_OK, wait(loom_ep_flush_nbx(ep_, nullptr)));
    EXPECT_EQ(LOOM_OK, wait(loom_ep_close_nbx(ep_, nullptr)));
    ep_ = nullptr;
    for (int i = 0; i < 1000; ++i) progress();
    if (idle) {
        EXPECT_EQ(0u, rw.ep_by_uuid.count(sw.uuid)) << "the peer heard of the idle endpoint";
    }
    ep_ = connect(sender_, receiver_);
    ASSERT_NE(nullptr, ep_);
    send_recv(8, true);
    send_recv(1 << 20, true);
}

/**
 * Both sides create endpoints to each other (idle where they wait for their first use);
 * the sender's first send reaches the other side first: its request makes the other's
 * idle endpoint known, which then sends (sync and rendezvous both ways) without a request
 * of its own, and no wire-up deadline is left running.
 */
TEST_P(UcpTagTest, IdleEndpointIsIntroducedByThePeersFirstSend) {
    if (GetParam().self) GTEST_SKIP() << "one worker: its endpoint goes to itself, there is no peer to tell";
    loom_ep_h back = connect(receiver_, sender_);
    ASSERT_NE(nullptr, back);
    const auto* back_ep = reinterpret_cast<const loom::ucp::Ep*>(back);
    EXPECT_EQ(waits_for_first_use(GetParam()), (back_ep->flags & loom::ucp::kEpIdle) != 0);
    send_recv(8, true);
    EXPECT_EQ(0, back_ep->flags & loom::ucp::kEpIdle) << "the sender's request introduced it";
    for (std::size_t size : {std::size_t{8}, std::size_t{1} << 20}) {
        auto data = pattern(size, 3);
        std::vector<char> out(size), out2(size);
        loom_status_ptr_t r1 = loom_tag_recv_nbx(sender_, out.data(), size, 5, ~0ull, nullptr);
        loom_status_ptr_t r2 = loom_tag_recv_nbx(receiver_, out2.data(), size, 6, ~0ull, nullptr);
        loom_status_ptr_t s1 = loom_tag_send_sync_nbx(back, data.data(), size, 5, nullptr);
        loom_status_ptr_t s2 = loom_tag_send_sync_nbx(ep_, data.data(), size, 6, nullptr);
        ASSERT_EQ(LOOM_OK, wait(r1));
        ASSERT_EQ(LOOM_OK, wait(r2));
        ASSERT_EQ(LOOM_OK, wait(s1));
        ASSERT_EQ(LOOM_OK, wait(s2));
        EXPECT_EQ(data, out) << size;
        EXPECT_EQ(data, out2) << size;
    }
    for (int i = 0; i < 100; ++i) progress();
    EXPECT_EQ(0u, reinterpret_cast<loom_worker*>(receiver_)->impl->wireup_waiting)
        << "a wire-up deadline left running";
    EXPECT_EQ(0u, reinterpret_cast<loom_worker*>(sender_)->impl->wireup_waiting)
        << "a wire-up deadline left running";
    force_close(back);
}

/**
 * Endpoint-to-endpoint rc (LOOM_IB_CM=verbs: QPs connected by the protocol layer's
 * wire-up over tcp), where test/rdma/run_rdma_tests.sh runs it on RoCE devices. The
 * whole tag suite runs on this set too (verbs_tl_sets); these cases check the wire-up itself.
 */
class UcpEpToEpTest : public UcpTagTest {};

TEST_P(UcpEpToEpTest, RcLanesAreWiredUpOverTcp) {
    testing::internal::CaptureStderr();
    init({{"LOOM_PROTO_INFO", "y"}});
    send_recv(8, true);
    send_recv(1 << 20, true);  // rendezvous: RDMA GET on the wired-up QP
    std::string info = testing::internal::GetCapturedStderr();
    EXPECT_NE(std::string::npos, info.find("(AM lane rc/")) << info;
    EXPECT_NE(std::string::npos, info.find("lanes wired up over tcp/")) << info;
    EXPECT_NE(std::string::npos, info.find("RDMA GET on rc/")) << info;
}

TEST_P(UcpEpToEpTest, BothSidesConnectAtOnce) {
    // Each worker makes an endpoint to the other before either has seen the other's
    // request: each connects on the other's request holding its sends and releases them
    // on the other's reply.
    loom_ep_h back = connect(receiver_, sender_);
    ASSERT_NE(nullptr, back);
    for (int round = 0; round < 3; ++round) {
        for (std::size_t size : {std::size_t{8}, std::size_t{5000}, std::size_t{1} << 20}) {
            auto data = pattern(size, static_cast<unsigned>(round));
            std::vector<char> out(size);
            // Both directions at once, sends first.
            loom_status_ptr_t s1 = loom_tag_send_nbx(ep_, data.data(), size, 1, nullptr);
            loom_status_ptr_t s2 = loom_tag_send_nbx(back, data.data(), size, 2, nullptr);
            ASSERT_FALSE(LOOM_PTR_IS_ERR(s1));
            ASSERT_FALSE(LOOM_PTR_IS_ERR(s2));
            std::vector<char> out2(size);
            loom_status_ptr_t r1 = loom_tag_recv_nbx(receiver_, out.data(), size, 1, ~0ull, nullptr);
            loom_status_ptr_t r2 = loom_tag_recv_nbx(sender_, out2.data(), size, 2, ~0ull, nullptr);
            ASSERT_EQ(LOOM_OK, wait(r1));
            ASSERT_EQ(LOOM_OK, wait(r2));
            ASSERT_EQ(LOOM_OK, wait(s1));
            ASSERT_EQ(LOOM_OK, wait(s2));
            EXPECT_EQ(data, out) << "size " << size;
            EXPECT_EQ(data, out2) << "size " << size;
        }
    }
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
    p.flags = LOOM_EP_CLOSE_FLAG_FORCE;
    (void)loom_ep_close_nbx(back, &p);
}

TEST_P(UcpEpToEpTest, UnansweredWireupFailsTheEndpointAtTheDeadline) {
    init({{"LOOM_WIREUP_TIMEOUT", "300ms"}});
    loom::test::LogCapture errors("error");
    auto data = pattern(64, 1);
    loom_status_ptr_t s = loom_tag_send_nbx(ep_, data.data(), data.size(), 1, nullptr);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(s)) << "the send cannot go before the rc lane is wired up";
    // Only the sender progresses: the receiver never answers the wire-up request.
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    loom_status_t status;
    while ((status = loom_request_check_status(s)) == LOOM_INPROGRESS && std::chrono::steady_clock::now() < give_up) {
        loom_worker_progress(sender_);
    }
    loom_request_free(s);
    EXPECT_EQ(LOOM_ERR_TIMED_OUT, status);
    EXPECT_EQ(1, errors.count("no wire-up answer within LOOM_WIREUP_TIMEOUT"));
    loom_status_ptr_t again = loom_tag_send_nbx(ep_, data.data(), data.size(), 1, nullptr);
    EXPECT_TRUE(LOOM_PTR_IS_ERR(again)) << "a failed endpoint refuses new sends";
    if (LOOM_PTR_IS_PTR(again)) loom_request_free(again);
}

std::vector<TlSet> ep_to_ep_sets() {
    const char* cm = std::getenv("LOOM_IB_CM");
    if (std::getenv("LOOMTEST_UCP_VERBS") == nullptr || cm == nullptr || std::string(cm) != "verbs") return {};
    return {TlSet{"rc_wired_up_over_tcp", "rc,tcp:aux", false}};
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(UcpEpToEpTest);
INSTANTIATE_TEST_SUITE_P(Verbs, UcpEpToEpTest, testing::ValuesIn(ep_to_ep_sets()),
                         [](const testing::TestParamInfo<TlSet>& info) { return std::string(info.param.name); });

}  // namespace
