/**
 * Streams through the C API over self (one worker), shm and tcp (workers in this
 * process), and between two real processes: sizes across every threshold with the bytes
 * checked, partial and WAITALL receives, element sizes, worker_poll, interleaved sizes,
 * per-endpoint isolation, zero-copy receives, closing and failing endpoints, bad
 * parameters.
 */
#include "common/forked_peer.h"
#include "common/test_helpers.h"
#include "loom/ucp.h"
#include "ucp/api/handles.h"
#include "ucp/stream/stream_proto.h"
#include "ucp_pair.h"
#include "ucp_side.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <sys/mman.h>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

using loom::test::TlSet;

std::vector<char> pattern(std::size_t n, unsigned seed) {
    std::vector<char> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 131 + seed * 17 + (i >> 9)) & 0xff);
    return v;
}

class UcpStreamTest : public loom::test::UcpPairTest {
protected:
    UcpStreamTest() : UcpPairTest(LOOM_FEATURE_STREAM) { ep_user_data_ = &ep_tag_; }

    /** The receiving side's endpoint to the sender (for self: the same one). */
    void on_init() override {
        rep_ = GetParam().self ? ep_ : connect(receiver_, sender_, &rep_tag_);
        ASSERT_NE(nullptr, rep_);
    }

    void on_teardown() override {
        if (rep_ && rep_ != ep_) force_close(rep_);
        rep_ = nullptr;
    }

    /** A receive on @p ep; returns the status and fills @p length however it completes. */
    loom_status_t recv(loom_ep_h ep, void* buf, std::size_t count, std::size_t& length, bool waitall,
                       loom_datatype_t dt = loom_dt_make_contig(1)) {
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS | LOOM_OP_ATTR_FIELD_DATATYPE;
        p.flags = waitall ? LOOM_STREAM_RECV_FLAG_WAITALL : 0;
        p.datatype = dt;
        length = SIZE_MAX;
        loom_status_ptr_t r = loom_stream_recv_nbx(ep, buf, count, &length, &p);
        if (!LOOM_PTR_IS_PTR(r)) return LOOM_PTR_STATUS(r);
        if (!progress_until([&] { return loom_stream_recv_request_test(r, &length) != LOOM_INPROGRESS; })) {
            return LOOM_ERR_TIMED_OUT;
        }
        loom_status_t s = loom_stream_recv_request_test(r, &length);
        loom_request_free(r);
        return s;
    }

    /** Receives exactly @p n bytes with WAITALL. */
    std::vector<char> recv_all(loom_ep_h ep, std::size_t n) {
        std::vector<char> out(n + 1, 0x5a);
        std::size_t length = 0;
        EXPECT_EQ(LOOM_OK, recv(ep, out.data(), n, length, true));
        EXPECT_EQ(n, length);
        EXPECT_EQ(0x5a, out[n]) << "wrote past the receive buffer";
        out.resize(n);
        return out;
    }

    loom_ep_h rep_ = nullptr;  ///< receiver -> sender
    int ep_tag_ = 0, rep_tag_ = 0;
};

const std::vector<std::size_t> kSizes = {1,     8,     100,   231,   232,    233,    1000,   4095,   4096,  4097,
                                         8183,  8184,  8185,  8192,  16384,  30000,  65536,  100000, 262144, 1 << 20};

TEST_P(UcpStreamTest, EverySizeExpectedAndUnexpected) {
    for (std::size_t size : kSizes) {
        auto data = pattern(size, static_cast<unsigned>(size));
        // Unexpected: everything arrives before the receive.
        EXPECT_EQ(LOOM_OK, wait(loom_stream_send_nbx(ep_, data.data(), size, nullptr))) << size;
        for (int i = 0; i < 50; ++i) progress();
        EXPECT_TRUE(data == recv_all(rep_, size)) << "unexpected, size " << size;
        // Expected: the receive waits first.
        std::vector<char> out(size + 1, 0x5a);
        std::size_t length = SIZE_MAX;
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
        p.flags = LOOM_STREAM_RECV_FLAG_WAITALL;
        loom_status_ptr_t r = loom_stream_recv_nbx(rep_, out.data(), size, &length, &p);
        ASSERT_TRUE(LOOM_PTR_IS_PTR(r)) << "a receive completed without data";
        loom_status_ptr_t s = loom_stream_send_nbx(ep_, data.data(), size, nullptr);
        ASSERT_TRUE(progress_until([&] { return loom_stream_recv_request_test(r, &length) != LOOM_INPROGRESS; }));
        EXPECT_EQ(LOOM_OK, loom_stream_recv_request_test(r, &length));
        loom_request_free(r);
        EXPECT_EQ(size, length);
        EXPECT_EQ(0x5a, out[size]);
        out.resize(size);
        EXPECT_TRUE(data == out) << "expected, size " << size;
        EXPECT_EQ(LOOM_OK, wait(s));
    }
}

TEST_P(UcpStreamTest, PartialReceivesTakeWhatIsThere) {
    auto data = pattern(100000, 1);
    EXPECT_EQ(LOOM_OK, wait(loom_stream_send_nbx(ep_, data.data(), data.size(), nullptr)));
    for (int i = 0; i < 100; ++i) progress();
    // Pieces of at most 3000 bytes, each completing with what is there.
    std::vector<char> got;
    while (got.size() < data.size()) {
        std::vector<char> buf(3000);
        std::size_t length = 0;
        ASSERT_EQ(LOOM_OK, recv(rep_, buf.data(), buf.size(), length, false));
        ASSERT_GT(length, 0u);
        ASSERT_LE(length, buf.size());
        got.insert(got.end(), buf.begin(), buf.begin() + length);
    }
    EXPECT_TRUE(data == got);
    // A receive waiting for more than arrives completes with what came.
    std::vector<char> big(1 << 20);
    std::size_t length = 0;
    loom_status_ptr_t r = loom_stream_recv_nbx(rep_, big.data(), big.size(), &length, nullptr);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(r));
    auto small = pattern(100, 2);
    EXPECT_EQ(LOOM_OK, wait(loom_stream_send_nbx(ep_, small.data(), small.size(), nullptr)));
    ASSERT_TRUE(progress_until([&] { return loom_stream_recv_request_test(r, &length) != LOOM_INPROGRESS; }));
    EXPECT_EQ(LOOM_OK, loom_stream_recv_request_test(r, &length));
    loom_request_free(r);
    EXPECT_EQ(100u, length);
    EXPECT_EQ(0, std::memcmp(big.data(), small.data(), 100));
}

TEST_P(UcpStreamTest, WaitAllWaitsForEveryByte) {
    const std::size_t piece = 10000, pieces = 5;
    auto data = pattern(piece * pieces, 3);
    std::vector<char> out(data.size());
    std::size_t length = 0;
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
    p.flags = LOOM_STREAM_RECV_FLAG_WAITALL;
    loom_status_ptr_t r = loom_stream_recv_nbx(rep_, out.data(), out.size(), &length, &p);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(r));
    for (std::size_t i = 0; i < pieces; ++i) {
        EXPECT_EQ(LOOM_INPROGRESS, loom_stream_recv_request_test(r, &length)) << "completed after " << i << " pieces";
        EXPECT_EQ(LOOM_OK, wait(loom_stream_send_nbx(ep_, data.data() + i * piece, piece, nullptr)));
        for (int k = 0; k < 50; ++k) progress();
    }
    ASSERT_TRUE(progress_until([&] { return loom_stream_recv_request_test(r, &length) != LOOM_INPROGRESS; }));
    EXPECT_EQ(LOOM_OK, loom_stream_recv_request_test(r, &length));
    EXPECT_EQ(data.size(), length);
    loom_request_free(r);
    EXPECT_TRUE(data == out);
}

/**
 * A WAITALL receive past its deadline completes with timed_out and the bytes it got; the
 * stream goes on from the next byte (nothing lost, nothing repeated). A receive that got
 * nothing times out with length 0.
 */
TEST_P(UcpStreamTest, DeadlineEndsAReceiveWithTheBytesItHolds) {
    auto data = pattern(30000, 4);
    std::vector<char> out(data.size());
    // Connected first (rc connects on first use): the 10,000 bytes below must arrive
    // within the receive's deadline.
    EXPECT_EQ(LOOM_OK, wait(loom_stream_send_nbx(ep_, data.data(), 8, nullptr)));
    ASSERT_TRUE(recv_all(rep_, 8) == std::vector<char>(data.begin(), data.begin() + 8));
    std::size_t length = SIZE_MAX;
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS | LOOM_OP_ATTR_FIELD_DEADLINE;
    p.flags = LOOM_STREAM_RECV_FLAG_WAITALL;
    p.deadline_ns = 200 * 1000000ull;  // long enough for 10,000 bytes over rc under emulation
    loom_status_ptr_t r = loom_stream_recv_nbx(rep_, out.data(), out.size(), &length, &p);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(r));
    EXPECT_EQ(LOOM_OK, wait(loom_stream_send_nbx(ep_, data.data(), 10000, nullptr)));
    ASSERT_TRUE(progress_until([&] { return loom_stream_recv_request_test(r, &length) != LOOM_INPROGRESS; }));
    EXPECT_EQ(LOOM_ERR_TIMED_OUT, loom_stream_recv_request_test(r, &length));
    EXPECT_EQ(10000u, length);
    loom_request_free(r);
    EXPECT_TRUE(std::equal(data.begin(), data.begin() + 10000, out.begin()));
    EXPECT_EQ(LOOM_OK, wait(loom_stream_send_nbx(ep_, data.data() + 10000, 20000, nullptr)));
    EXPECT_TRUE(recv_all(rep_, 20000) == std::vector<char>(data.begin() + 10000, data.end()));

    length = SIZE_MAX;
    p.deadline_ns = 0;
    r = loom_stream_recv_nbx(rep_, out.data(), 8, &length, &p);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(r));
    ASSERT_TRUE(progress_until([&] { return loom_stream_recv_request_test(r, &length) != LOOM_INPROGRESS; }));
    EXPECT_EQ(LOOM_ERR_TIMED_OUT, loom_stream_recv_request_test(r, &length));
    EXPECT_EQ(0u, length);
    loom_request_free(r);
}

TEST_P(UcpStreamTest, WholeElementsOnly) {
    auto data = pattern(14, 4);
    EXPECT_EQ(LOOM_OK, wait(loom_stream_send_nbx(ep_, data.data(), 10, nullptr)));
    for (int i = 0; i < 50; ++i) progress();
    std::uint32_t out[8] = {};
    std::size_t length = 0;
    // 10 bytes there, 4-byte elements: two whole ones; the other two bytes stay.
    ASSERT_EQ(LOOM_OK, recv(rep_, out, 8, length, false, loom_dt_make_contig(4)));
    EXPECT_EQ(8u, length);
    EXPECT_EQ(0, std::memcmp(out, data.data(), 8));
    // Two bytes cannot complete a receive of whole elements: it waits for the rest.
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_DATATYPE;
    p.datatype = loom_dt_make_contig(4);
    loom_status_ptr_t r = loom_stream_recv_nbx(rep_, out, 8, &length, &p);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(r));
    for (int i = 0; i < 50; ++i) progress();
    EXPECT_EQ(LOOM_INPROGRESS, loom_stream_recv_request_test(r, &length));
    EXPECT_EQ(LOOM_OK, wait(loom_stream_send_nbx(ep_, data.data() + 10, 4, nullptr)));
    ASSERT_TRUE(progress_until([&] { return loom_stream_recv_request_test(r, &length) != LOOM_INPROGRESS; }));
    EXPECT_EQ(LOOM_OK, loom_stream_recv_request_test(r, &length));
    loom_request_free(r);
    EXPECT_EQ(4u, length);  // bytes 8..11; 12..13 stay queued
    EXPECT_EQ(0, std::memcmp(out, data.data() + 8, 4));
    char rest[2];
    ASSERT_EQ(LOOM_OK, recv(rep_, rest, 2, length, true));
    EXPECT_EQ(0, std::memcmp(rest, data.data() + 12, 2));
}

TEST_P(UcpStreamTest, WorkerPollReportsEndpointsWithData) {
    loom_stream_poll_ep_t eps[4];
    EXPECT_EQ(0, loom_stream_worker_poll(receiver_, eps, 4, 0));
    auto data = pattern(5000, 5);
    EXPECT_EQ(LOOM_OK, wait(loom_stream_send_nbx(ep_, data.data(), data.size(), nullptr)));
    ssize_t n = 0;
    ASSERT_TRUE(progress_until([&] { return (n = loom_stream_worker_poll(receiver_, eps, 4, 0)) != 0; }));
    ASSERT_EQ(1, n);
    EXPECT_EQ(rep_, eps[0].ep);
    EXPECT_EQ(GetParam().self ? static_cast<void*>(&ep_tag_) : static_cast<void*>(&rep_tag_), eps[0].user_data);
    EXPECT_EQ(0, loom_stream_worker_poll(receiver_, eps, 4, 0)) << "reported twice for the same data";
    std::vector<char> half(2500);
    std::size_t length;
    ASSERT_EQ(LOOM_OK, recv(rep_, half.data(), half.size(), length, true));
    // New data makes it ready again.
    EXPECT_EQ(LOOM_OK, wait(loom_stream_send_nbx(ep_, data.data(), 10, nullptr)));
    ASSERT_TRUE(progress_until([&] { return (n = loom_stream_worker_poll(receiver_, eps, 4, 0)) != 0; }));
    EXPECT_EQ(1, n);
    auto rest = recv_all(rep_, 2510);
    EXPECT_EQ(0, std::memcmp(rest.data(), data.data() + 2500, 2500));
    EXPECT_EQ(0, std::memcmp(rest.data() + 2500, data.data(), 10));
    // Drained by a receive: no longer ready.
    EXPECT_EQ(LOOM_OK, wait(loom_stream_send_nbx(ep_, data.data(), 10, nullptr)));
    for (int i = 0; i < 50; ++i) progress();
    (void)recv_all(rep_, 10);
    EXPECT_EQ(0, loom_stream_worker_poll(receiver_, eps, 4, 0));
}

TEST_P(UcpStreamTest, InterleavedSizesKeepOneOrderedStream) {
    std::mt19937 rng(42);
    std::vector<char> sent;
    std::vector<loom_status_ptr_t> sreqs;
    std::vector<std::vector<char>> bufs;
    for (int i = 0; i < 60; ++i) {
        std::size_t size = i % 7 == 0 ? 100000 + rng() % 200000 : rng() % 9000;
        bufs.push_back(pattern(size, i));
        sent.insert(sent.end(), bufs.back().begin(), bufs.back().end());
    }
    for (auto& b : bufs) sreqs.push_back(loom_stream_send_nbx(ep_, b.data(), b.size(), nullptr));
    std::vector<char> got;
    while (got.size() < sent.size()) {
        std::vector<char> buf(1 + rng() % 50000);
        std::size_t length = 0;
        const bool waitall = rng() % 2 && got.size() + buf.size() <= sent.size();
        ASSERT_EQ(LOOM_OK, recv(rep_, buf.data(), buf.size(), length, waitall));
        got.insert(got.end(), buf.begin(), buf.begin() + length);
    }
    EXPECT_TRUE(sent == got);
    for (auto r : sreqs) EXPECT_EQ(LOOM_OK, wait(r));
}

TEST_P(UcpStreamTest, EndpointsToDifferentWorkersNeverMix) {
    if (GetParam().self) GTEST_SKIP() << "self reaches only its own worker: there is no second peer";
    loom_worker_h third = nullptr;
    ASSERT_EQ(LOOM_OK, loom_worker_create(ctx_, nullptr, &third));
    loom_ep_h ep3 = connect(third, receiver_, nullptr);
    loom_ep_h rep3 = connect(receiver_, third, nullptr);
    ASSERT_NE(rep_, rep3);
    auto a = pattern(70000, 1), b = pattern(70000, 2);
    std::vector<loom_status_ptr_t> reqs;
    for (std::size_t off = 0; off < a.size(); off += 7000) {
        reqs.push_back(loom_stream_send_nbx(ep_, a.data() + off, 7000, nullptr));
        reqs.push_back(loom_stream_send_nbx(ep3, b.data() + off, 7000, nullptr));
    }
    auto progress3 = [&] { loom_worker_progress(third); };
    auto deadline = Clock::now() + std::chrono::seconds(30);
    for (auto r : reqs) {
        while (LOOM_PTR_IS_PTR(r) && loom_request_check_status(r) == LOOM_INPROGRESS && Clock::now() < deadline) {
            progress();
            progress3();
        }
        ASSERT_FALSE(LOOM_PTR_IS_ERR(r));
        if (LOOM_PTR_IS_PTR(r)) {
            EXPECT_EQ(LOOM_OK, loom_request_check_status(r));
            loom_request_free(r);
        }
    }
    for (int i = 0; i < 100; ++i) progress();
    EXPECT_TRUE(b == recv_all(rep3, b.size()));
    EXPECT_TRUE(a == recv_all(rep_, a.size()));
    force_close(rep3);
    force_close(ep3);
    loom_worker_destroy(third);
}

/**
 * A NULL buffer with a nonzero count is refused with a clear error before anything moves,
 * at every protocol's size (the short send copied from NULL and crashed); the stream goes on.
 */
TEST_P(UcpStreamTest, NullBuffersAreRefusedWithAClearError) {
    auto status = [&](loom_status_ptr_t r) {
        if (!LOOM_PTR_IS_PTR(r)) return LOOM_PTR_STATUS(r);
        progress_until([&] { return loom_request_check_status(r) != LOOM_INPROGRESS; });
        loom_status_t s = loom_request_check_status(r);
        loom_request_free(r);
        return s;
    };
    loom::test::LogCapture log("error");
    for (std::size_t size : {8, 20000, 300000}) {
        EXPECT_EQ(LOOM_ERR_INVALID_PARAM, status(loom_stream_send_nbx(ep_, nullptr, size, nullptr))) << size;
        std::size_t length = 0;
        EXPECT_EQ(LOOM_ERR_INVALID_PARAM, status(loom_stream_recv_nbx(rep_, nullptr, size, &length, nullptr)))
            << size;
    }
    EXPECT_EQ(6, log.count("with a NULL buffer and a nonzero count"));
    auto data = pattern(20000, 3);
    EXPECT_EQ(LOOM_OK, status(loom_stream_send_nbx(ep_, data.data(), data.size(), nullptr)));
    EXPECT_EQ(data, recv_all(rep_, data.size())) << "the refused sends left something in the stream";
}

TEST_P(UcpStreamTest, ZeroCopyReceiveAndRelease) {
    auto data = pattern(30000, 6);
    EXPECT_EQ(LOOM_OK, wait(loom_stream_send_nbx(ep_, data.data(), data.size(), nullptr)));
    for (int i = 0; i < 100; ++i) progress();
    std::vector<char> got;
    std::vector<void*> held;
    std::size_t length = 0;
    // An empty receive completes at once; then a copy receive of 10 bytes, and the rest
    // without copying.
    char first[10];
    ASSERT_EQ(LOOM_OK, recv(rep_, first, 0, length, true));
    EXPECT_EQ(0u, length);
    ASSERT_EQ(LOOM_OK, recv(rep_, first, 10, length, true));
    got.insert(got.end(), first, first + 10);
    while (got.size() < data.size()) {
        loom_status_ptr_t p = loom_stream_recv_data_nb(rep_, &length);
        ASSERT_FALSE(LOOM_PTR_IS_ERR(p));
        if (p == nullptr) {
            progress();
            continue;
        }
        got.insert(got.end(), static_cast<char*>(p), static_cast<char*>(p) + length);
        held.push_back(p);
    }
    EXPECT_TRUE(data == got);
    for (void* p : held) loom_stream_data_release(rep_, p);
    EXPECT_EQ(nullptr, loom_stream_recv_data_nb(rep_, &length)) << "nothing is left";
    loom::test::LogCapture log;
    loom_stream_data_release(rep_, held.front());
    EXPECT_EQ(1, log.count("is not stream data"));
    // Taken pieces not released by the application go with the worker (ASan checks).
    EXPECT_EQ(LOOM_OK, wait(loom_stream_send_nbx(ep_, data.data(), 100, nullptr)));
    ASSERT_TRUE(progress_until([&] { return loom_stream_recv_data_nb(rep_, &length) != nullptr; }));
}

/**
 * LOOM_STREAM_WINDOW: a receiver that does not read keeps at most its window (and what
 * was in flight when it filled) of a stream; the sender's sends past it wait. Then every
 * byte is read, in order, and the sender goes back to sending at once.
 */
TEST_P(UcpStreamTest, AReceiverThatDoesNotReadHoldsOnlyItsWindow) {
    constexpr std::size_t kWindow = 64 * 1024, kSize = 1000;
    constexpr int kCount = 4000;  // 4 MB: 60 windows
    if (GetParam().self)
        GTEST_SKIP() << "a stream to its own worker has no window (its reader is its sender)";
    init({{"LOOM_STREAM_WINDOW", "64k"}});
    auto* ep = reinterpret_cast<loom::ucp::Ep*>(ep_);
    auto& rw = *reinterpret_cast<loom_worker*>(receiver_)->impl;
    auto unread = [&] {
        loom::ucp::StreamWorker* sw = loom::ucp::stream_state(rw);
        auto it = sw->eps.find(reinterpret_cast<loom::ucp::Ep*>(rep_));
        return it == sw->eps.end() ? std::size_t{0} : it->second->queued;
    };
    const std::uint32_t short_limit = ep->stream_short_limit;
    // The hold travels on the receiver's endpoint back, which over rc connects on its first
    // use: what arrives while it connects is not bounded by the window (docs/protocols.md).
    // One byte back first, so that the bound below is the window's.
    char one = 1;
    ASSERT_EQ(LOOM_OK, wait(loom_stream_send_nbx(rep_, &one, 1, nullptr)));
    ASSERT_EQ(1u, recv_all(ep_, 1).size());
    std::vector<char> data(kSize * kCount);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 7 + i / 1000) & 0xff);
    std::vector<loom_status_ptr_t> sends;
    std::size_t most = 0;
    for (int i = 0; i < kCount; ++i) {
        loom_status_ptr_t r = loom_stream_send_nbx(ep_, data.data() + i * kSize, kSize, nullptr);
        ASSERT_FALSE(LOOM_PTR_IS_ERR(r)) << i;
        sends.push_back(r);
        // Waiting for a send the transport has not taken yet keeps the sender's own queue short.
        do {
            progress();
            most = std::max(most, unread());
        } while (LOOM_PTR_IS_PTR(r) && loom_request_check_status(r) == LOOM_INPROGRESS &&
                 !(ep->flags & loom::ucp::kEpStreamHeld));
    }
    EXPECT_TRUE(ep->flags & loom::ucp::kEpStreamHeld);
    EXPECT_LE(most, kWindow + 128 * kSize) << "the receiver kept " << most << " unread bytes";
    const auto waiting = std::count_if(sends.begin(), sends.end(), [](loom_status_ptr_t r) {
        return LOOM_PTR_IS_PTR(r) && loom_request_check_status(r) == LOOM_INPROGRESS;
    });
    EXPECT_GT(waiting, kCount / 2) << "the sends past the window wait";
    // Read it all, in pieces; the held sends go out as the window empties.
    std::vector<char> out = recv_all(rep_, data.size());
    EXPECT_TRUE(out == data) << "the stream lost its order or bytes";
    for (loom_status_ptr_t r : sends) {
        if (!LOOM_PTR_IS_PTR(r)) continue;
        ASSERT_TRUE(progress_until([&] { return loom_request_check_status(r) != LOOM_INPROGRESS; }));
        EXPECT_EQ(LOOM_OK, loom_request_check_status(r));
        loom_request_free(r);
    }
    ASSERT_TRUE(
        progress_until([&] { return !(ep->flags & loom::ucp::kEpStreamHeld); }, "the sender to go on"));
    EXPECT_EQ(short_limit, ep->stream_short_limit);
}

/**
 * A send held back by the receiver's window past its deadline is withdrawn whole: it
 * completes with timed_out, the receiver never sees its bytes, and the stream goes on
 * with the next send.
 */
TEST_P(UcpStreamTest, DeadlineWithdrawsASendTheWindowHeldBack) {
    if (GetParam().self)
        GTEST_SKIP() << "a stream to its own worker has no window (its reader is its sender)";
    init({{"LOOM_STREAM_WINDOW", "64k"}});
    auto* ep = reinterpret_cast<loom::ucp::Ep*>(ep_);
    constexpr std::size_t kSize = 1000;
    std::vector<char> sent;
    std::vector<loom_status_ptr_t> sends;
    std::vector<char> data = pattern(1000 * kSize, 6);  // in place until the sends complete
    // Fill the window until the sender is held back.
    for (std::size_t i = 0; i < 1000 && !(ep->flags & loom::ucp::kEpStreamHeld); ++i) {
        const char* piece = data.data() + i * kSize;
        sent.insert(sent.end(), piece, piece + kSize);
        loom_status_ptr_t r = loom_stream_send_nbx(ep_, piece, kSize, nullptr);
        ASSERT_FALSE(LOOM_PTR_IS_ERR(r));
        sends.push_back(r);
        for (int k = 0; k < 20; ++k) progress();
    }
    ASSERT_TRUE(ep->flags & loom::ucp::kEpStreamHeld) << "the window never filled";
    std::vector<char> withdrawn(5000, 'X');
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_DEADLINE;
    p.deadline_ns = 20 * 1000000ull;
    loom_status_ptr_t late = loom_stream_send_nbx(ep_, withdrawn.data(), withdrawn.size(), &p);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(late));
    ASSERT_TRUE(progress_until([&] { return loom_request_check_status(late) != LOOM_INPROGRESS; }));
    EXPECT_EQ(LOOM_ERR_TIMED_OUT, loom_request_check_status(late));
    loom_request_free(late);
    std::vector<char> after(3000, 'Y');
    loom_status_ptr_t next = loom_stream_send_nbx(ep_, after.data(), after.size(), nullptr);
    sent.insert(sent.end(), after.begin(), after.end());
    EXPECT_TRUE(recv_all(rep_, sent.size()) == sent) << "the withdrawn send's bytes, or a gap, in the stream";
    EXPECT_EQ(LOOM_OK, wait(next));
    for (loom_status_ptr_t r : sends) {
        if (!LOOM_PTR_IS_PTR(r)) continue;
        ASSERT_TRUE(progress_until([&] { return loom_request_check_status(r) != LOOM_INPROGRESS; }));
        EXPECT_EQ(LOOM_OK, loom_request_check_status(r));
        loom_request_free(r);
    }
    // Nothing more: a receive finds no 'X' left behind.
    char extra = 0;
    std::size_t length = 0;
    loom_status_ptr_t r = loom_stream_recv_nbx(rep_, &extra, 1, &length, nullptr);
    for (int k = 0; k < 200; ++k) progress();
    EXPECT_TRUE(LOOM_PTR_IS_PTR(r) && loom_request_check_status(r) == LOOM_INPROGRESS)
        << "bytes after the stream's end";
    if (LOOM_PTR_IS_PTR(r)) {
        loom_request_cancel(receiver_, r);
        loom_request_free(r);
    }
}

TEST_P(UcpStreamTest, CloseCancelsWaitingReceivesAndCallbacksRun) {
    struct Seen {
        int calls = 0;
        loom_status_t status = LOOM_INPROGRESS;
        std::size_t length = 0;
    } seen[2];
    char buf[2][64];
    std::size_t length = 0;
    loom_status_ptr_t r[2];
    for (int i = 0; i < 2; ++i) {
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_CALLBACK | LOOM_OP_ATTR_FIELD_USER_DATA | LOOM_OP_ATTR_FIELD_FLAGS;
        p.flags = LOOM_STREAM_RECV_FLAG_WAITALL;
        p.user_data = &seen[i];
        p.cb.stream = [](void* request, loom_status_t status, size_t len, void* ud) {
            auto* s = static_cast<Seen*>(ud);
            ++s->calls;
            s->status = status;
            s->length = len;
            loom_request_free(request);
        };
        r[i] = loom_stream_recv_nbx(rep_, buf[i], 64, &length, &p);
        ASSERT_TRUE(LOOM_PTR_IS_PTR(r[i]));
    }
    // The first one completes with data, by callback.
    auto data = pattern(64, 7);
    EXPECT_EQ(LOOM_OK, wait(loom_stream_send_nbx(ep_, data.data(), 64, nullptr)));
    ASSERT_TRUE(progress_until([&] { return seen[0].calls == 1; }));
    EXPECT_EQ(LOOM_OK, seen[0].status);
    EXPECT_EQ(64u, seen[0].length);
    EXPECT_EQ(0, std::memcmp(buf[0], data.data(), 64));
    EXPECT_EQ(0, seen[1].calls);
    // The second one is cancelled when its endpoint is closed.
    if (rep_ == ep_) ep_ = nullptr;
    force_close(rep_);
    rep_ = nullptr;
    EXPECT_EQ(1, seen[1].calls);
    EXPECT_EQ(LOOM_ERR_CANCELED, seen[1].status);
}

TEST_P(UcpStreamTest, ManyOutstandingSendsAndCallerRequests) {
    loom_context_attr_t attr{};
    attr.field_mask = LOOM_ATTR_FIELD_REQUEST_SIZE;
    ASSERT_EQ(LOOM_OK, loom_context_query(ctx_, &attr));
    const int n = 1000;
    std::vector<char> mem(static_cast<std::size_t>(n) * (attr.request_size + 64));
    std::vector<char> data = pattern(static_cast<std::size_t>(n) * 300, 8);
    std::vector<loom_status_ptr_t> reqs;
    for (int i = 0; i < n; ++i) {
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_REQUEST | LOOM_OP_ATTR_FLAG_NO_IMM_CMPL;
        p.request = mem.data() + i * (attr.request_size + 64) + attr.request_size;
        reqs.push_back(loom_stream_send_nbx(ep_, data.data() + i * 300, 300, &p));
        ASSERT_EQ(p.request, reqs.back());
    }
    EXPECT_TRUE(data == recv_all(rep_, data.size()));
    for (auto r : reqs) {
        ASSERT_TRUE(progress_until([&] { return loom_request_check_status(r) != LOOM_INPROGRESS; }));
        EXPECT_EQ(LOOM_OK, loom_request_check_status(r));  // caller memory: never freed by Loom
    }
}

TEST_P(UcpStreamTest, BadParametersAreRefused) {
    loom::test::LogCapture log;
    char buf[8];
    std::size_t length;
    auto status = [](loom_status_ptr_t p) { return LOOM_PTR_STATUS(p); };
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, status(loom_stream_send_nbx(nullptr, buf, 8, nullptr)));
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, status(loom_stream_recv_nbx(nullptr, buf, 8, &length, nullptr)));
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, status(loom_stream_recv_nbx(rep_, buf, 8, nullptr, nullptr)));
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
    p.flags = 1u << 5;
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, status(loom_stream_recv_nbx(rep_, buf, 8, &length, &p)));
    loom_generic_dt_ops_t ops{[](void*, const void*, size_t) -> void* { return nullptr; },
                              [](void*, void*, size_t) -> void* { return nullptr; },
                              [](void*) -> size_t { return 0; },
                              [](void*, size_t, void*, size_t) -> size_t { return 0; },
                              [](void*, size_t, const void*, size_t) { return LOOM_OK; },
                              [](void*) {}};
    loom_datatype_t dt;
    ASSERT_EQ(LOOM_OK, loom_dt_create_generic(&ops, nullptr, &dt));
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_DATATYPE;
    p.datatype = dt;
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, status(loom_stream_recv_nbx(rep_, buf, 8, &length, &p)));
    loom_dt_destroy(dt);
    loom_stream_poll_ep_t eps[1];
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_stream_worker_poll(receiver_, eps, 1, 1));
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_stream_worker_poll(nullptr, eps, 1, 0));
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, status(loom_stream_recv_data_nb(nullptr, &length)));
    EXPECT_GE(log.count("ucp: loom_stream"), 8);
    init({}, LOOM_FEATURE_TAG);
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, status(loom_stream_send_nbx(ep_, buf, 8, nullptr)));
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, status(loom_stream_recv_nbx(rep_, buf, 8, &length, nullptr)));
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_stream_worker_poll(receiver_, eps, 1, 0));
    EXPECT_GE(log.count("without LOOM_FEATURE_STREAM"), 3);
}

INSTANTIATE_TEST_SUITE_P(Tls, UcpStreamTest,
                         testing::Values(TlSet{"self", "self", true}, TlSet{"shm", "shm", false},
                                         TlSet{"tcp", "tcp", false}),
                         [](const testing::TestParamInfo<TlSet>& info) { return std::string(info.param.name); });

/** rc, where test/rdma/run_rdma_tests.sh runs the protocol layer on RDMA devices (LOOMTEST_UCP_VERBS=1). */
INSTANTIATE_TEST_SUITE_P(Verbs, UcpStreamTest, testing::ValuesIn(loom::test::verbs_tl_sets()),
                         [](const testing::TestParamInfo<TlSet>& info) {
                             return std::string(info.param.name);
                         });

// --- two processes ---------------------------------------------------------------------------

using loom::test::ForkedPeer;

/** One process's context, worker and endpoint to the other, for streams. */
struct Side : loom::test::UcpSide {
    bool open(const char* tls) { return UcpSide::open(tls, LOOM_FEATURE_STREAM); }

    /** Waits for a status-or-request; a stream receive's length goes to @p length. */
    loom_status_t wait(loom_status_ptr_t r, std::size_t* length = nullptr, int seconds = 30) {
        std::size_t ignored;
        std::size_t* len = length ? length : &ignored;
        return wait_with(r, [len](void* q) { return loom_stream_recv_request_test(q, len); }, seconds);
    }

    loom_status_t recv_all(void* buf, std::size_t n, int seconds = 30) {
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
        p.flags = LOOM_STREAM_RECV_FLAG_WAITALL;
        std::size_t length = 0;
        loom_status_ptr_t r = loom_stream_recv_nbx(ep, buf, n, &length, &p);
        loom_status_t s = wait(r, &length, seconds);
        return s == LOOM_OK && length != n ? LOOM_ERR_IO_ERROR : s;
    }
};

class UcpStreamMultiProcTest : public testing::TestWithParam<const char*> {};

/** The child reads length-prefixed chunks and sends each back, until a zero length. */
TEST_P(UcpStreamMultiProcTest, EchoChunks) {
    const char* tls = GetParam();
    ForkedPeer peer([tls](ForkedPeer::Channel& ch) {
        Side me;
        if (!me.open(tls)) return 1;
        if (!me.meet_parent(ch)) return 2;
        std::vector<char> buf;
        for (;;) {
            std::uint64_t n = 0;
            if (me.recv_all(&n, sizeof(n), 60) != LOOM_OK) return 3;
            if (n == 0) break;
            buf.resize(n);
            if (me.recv_all(buf.data(), n, 60) != LOOM_OK) return 4;
            if (me.wait(loom_stream_send_nbx(me.ep, buf.data(), n, nullptr)) != LOOM_OK) return 5;
        }
        return me.wait(loom_ep_flush_nbx(me.ep, nullptr)) == LOOM_OK ? 0 : 6;
    });
    Side me;
    ASSERT_TRUE(me.open(tls));
    ASSERT_TRUE(me.meet_child(peer.channel(), false)) << "no address from the child, or no endpoint to it";
    unsigned seed = 1;
    for (std::size_t size : {std::size_t{1}, std::size_t{100}, std::size_t{8000}, std::size_t{8200},
                             std::size_t{70000}, std::size_t{1} << 20, std::size_t{4} << 20}) {
        auto data = pattern(size, seed++);
        std::uint64_t n = size;
        ASSERT_EQ(LOOM_OK, me.wait(loom_stream_send_nbx(me.ep, &n, sizeof(n), nullptr)));
        ASSERT_EQ(LOOM_OK, me.wait(loom_stream_send_nbx(me.ep, data.data(), size, nullptr)));
        std::vector<char> back(size);
        ASSERT_EQ(LOOM_OK, me.recv_all(back.data(), size)) << size;
        ASSERT_TRUE(data == back) << "size " << size;
    }
    std::uint64_t zero = 0;
    ASSERT_EQ(LOOM_OK, me.wait(loom_stream_send_nbx(me.ep, &zero, sizeof(zero), nullptr)));
    int exit_code = -1000;
    ASSERT_TRUE(me.progress_until([&] { return (exit_code = peer.wait(std::chrono::milliseconds(0))) != -1000; }, 60));
    EXPECT_EQ(0, exit_code);
}

/** The sender dies while a WAITALL receive waits for more: the receive fails, nothing hangs. */
TEST_P(UcpStreamMultiProcTest, PeerKilledFailsWaitingReceive) {
    const char* tls = GetParam();
    ForkedPeer peer([tls](ForkedPeer::Channel& ch) {
        Side me;
        if (!me.open(tls)) return 1;
        if (!me.meet_parent(ch)) return 2;
        std::vector<char> half(5000, 7);
        if (me.wait(loom_stream_send_nbx(me.ep, half.data(), half.size(), nullptr)) != LOOM_OK) return 3;
        me.progress_until([] { return false; }, 120);  // killed meanwhile
        return 4;
    });
    Side me;
    ASSERT_TRUE(me.open(tls));
    ASSERT_TRUE(me.meet_child(peer.channel(), true)) << "no address from the child, or no endpoint to it";
    std::vector<char> buf(10000);
    std::size_t length = 0;
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
    p.flags = LOOM_STREAM_RECV_FLAG_WAITALL;
    loom_status_ptr_t r = loom_stream_recv_nbx(me.ep, buf.data(), buf.size(), &length, &p);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(r));
    // Half the bytes arrive, then the child goes.
    ASSERT_TRUE(me.progress_until([&] {
        std::size_t l;
        return loom_stream_recv_request_test(r, &l) != LOOM_INPROGRESS || buf[4999] == 7;
    })) << "the first half never came";
    peer.kill(SIGKILL);
    EXPECT_EQ(-SIGKILL, peer.wait());
    loom_status_t s = me.wait(r, &length, 60);
    EXPECT_NE(LOOM_OK, s);
    EXPECT_NE(LOOM_ERR_TIMED_OUT, s) << "the receive hung after its sender died";
    EXPECT_EQ(1, me.errors);
    // Later receives report the failure at once.
    EXPECT_TRUE(LOOM_PTR_IS_ERR(loom_stream_recv_nbx(me.ep, buf.data(), 1, &length, nullptr)));
}

INSTANTIATE_TEST_SUITE_P(Tls, UcpStreamMultiProcTest, testing::Values("shm", "tcp"),
                         [](const testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
