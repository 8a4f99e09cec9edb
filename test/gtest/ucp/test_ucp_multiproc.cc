/**
 * The protocol layer between real processes (shm and tcp): a ping-pong across every
 * protocol, and a peer killed in the middle of a rendezvous (GET, PUT or split), which
 * must fail the other side's request and call the endpoint's error handler instead of
 * hanging.
 */
#include "common/forked_peer.h"
#include "common/test_helpers.h"
#include "loom/ucp.h"
#include "ucp/core/request.h"
#include "ucp/rndv/rndv.h"
#include "ucp/tag/tag_proto.h"
#include "ucp_side.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <sys/mman.h>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace {

using loom::test::ForkedPeer;

/** One process's context, worker and endpoint to the other, for tagged messages. */
struct Side : loom::test::UcpSide {
    bool open(const char* tls) { return UcpSide::open(tls, LOOM_FEATURE_TAG); }

    /** Waits for a status-or-request (a receive's info filled when given). */
    loom_status_t wait(loom_status_ptr_t r, loom_tag_recv_info_t* info = nullptr, int seconds = 30) {
        return wait_with(r, [info](void* q) { return loom_tag_recv_request_test(q, info); }, seconds);
    }
};

std::vector<char> pattern(std::size_t n, unsigned seed) {
    std::vector<char> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 13 + seed) & 0xff);
    return v;
}

const std::vector<std::size_t> kSizes = {0, 8, 200, 5000, 20000, 40000, 100000, 300000, 1 << 20, 4 << 20};

class UcpMultiProcTest : public testing::TestWithParam<const char*> {};

/** The child echoes every message back with tag + 1, until a zero-length message with tag 0. */
TEST_P(UcpMultiProcTest, EchoAcrossEveryProtocol) {
    const char* tls = GetParam();
    ForkedPeer peer([tls](ForkedPeer::Channel& ch) {
        Side me;
        if (!me.open(tls)) return 1;
        if (!me.meet_parent(ch)) return 2;
        std::vector<char> buf(4 << 20);
        for (;;) {
            loom_tag_recv_info_t info{};
            loom_request_param_t rp{};
            rp.op_attr_mask = LOOM_OP_ATTR_FIELD_RECV_INFO;  // filled also when it completes at once
            rp.recv_info.tag_recv = &info;
            loom_status_t s = me.wait(loom_tag_recv_nbx(me.worker, buf.data(), buf.size(), 0, 0, &rp), &info, 60);
            if (s != LOOM_OK) {
                fprintf(stderr, "child: receive failed: %s\n", loom_status_string(s));
                return 3;
            }
            if (info.sender_tag == 0) break;
            loom_status_t s2 = me.wait(loom_tag_send_nbx(me.ep, buf.data(), info.length, info.sender_tag + 1, nullptr));
            if (s2 != LOOM_OK) {
                fprintf(stderr, "child: send of %zu bytes failed: %s\n", info.length, loom_status_string(s2));
                return 4;
            }
        }
        return 0;
    });
    Side me;
    ASSERT_TRUE(me.open(tls));
    ASSERT_TRUE(me.meet_child(peer.channel(), false)) << "no address from the child, or no endpoint to it";
    unsigned seed = 1;
    for (std::size_t size : kSizes) {
        for (bool sync : {false, true}) {
            auto data = pattern(size, seed++);
            std::vector<char> back(size + 1, 0x77);
            const loom_tag_t tag = 100 + seed * 2;
            loom_status_ptr_t rreq = loom_tag_recv_nbx(me.worker, back.data(), size, tag + 1, ~0ull, nullptr);
            loom_status_ptr_t sreq = sync ? loom_tag_send_sync_nbx(me.ep, data.data(), size, tag, nullptr)
                                          : loom_tag_send_nbx(me.ep, data.data(), size, tag, nullptr);
            ASSERT_EQ(LOOM_OK, me.wait(sreq)) << size << " sync " << sync << "; child exit " << peer.wait(std::chrono::milliseconds(1));
            ASSERT_EQ(LOOM_OK, me.wait(rreq)) << size << " sync " << sync << "; child exit " << peer.wait(std::chrono::milliseconds(1));
            ASSERT_TRUE(std::equal(data.begin(), data.end(), back.begin())) << "size " << size;
            EXPECT_EQ(0x77, back[size]);
        }
    }
    ASSERT_EQ(LOOM_OK, me.wait(loom_tag_send_nbx(me.ep, nullptr, 0, 0, nullptr)));
    ASSERT_EQ(LOOM_OK, me.wait(loom_ep_flush_nbx(me.ep, nullptr)));
    EXPECT_EQ(0, peer.wait());
}

/** The receiver dies holding an unanswered rendezvous: the send fails, the error handler runs. */
TEST_P(UcpMultiProcTest, PeerKilledMidRendezvous) {
    const char* tls = GetParam();
    // The child raises this flag (shared memory) when the request arrived; the parent keeps
    // progressing meanwhile, which a blocking channel read would not allow.
    auto* arrived = static_cast<volatile int*>(
        mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(MAP_FAILED, (void*)arrived);
    *arrived = 0;
    ForkedPeer peer([tls, arrived](ForkedPeer::Channel& ch) {
        Side me;
        if (!me.open(tls)) return 1;
        if (!me.meet_parent(ch)) return 2;
        // Never receive: wait until the rendezvous request is here, say so, and wait to be killed.
        loom_tag_recv_info_t info{};
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (loom_tag_probe_nb(me.worker, 5, ~0ull, 0, &info) == nullptr) {
            if (std::chrono::steady_clock::now() > deadline) return 3;
            loom_worker_progress(me.worker);
        }
        *arrived = 1;
        while (std::chrono::steady_clock::now() < deadline + std::chrono::seconds(60)) loom_worker_progress(me.worker);
        return 4;
    });
    Side me;
    ASSERT_TRUE(me.open(tls));
    ASSERT_TRUE(me.meet_child(peer.channel(), true)) << "no address from the child, or no endpoint to it";
    auto data = pattern(8 << 20, 5);
    loom_status_ptr_t sreq = loom_tag_send_nbx(me.ep, data.data(), data.size(), 5, nullptr);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(sreq));
    // Progress until the child reports the request arrived.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (*arrived == 0 && std::chrono::steady_clock::now() < deadline) loom_worker_progress(me.worker);
    ASSERT_EQ(1, *arrived) << "the child never saw the rendezvous request";
    munmap(const_cast<int*>(arrived), 4096);
    peer.kill(SIGKILL);
    EXPECT_EQ(-SIGKILL, peer.wait());
    loom_status_t s = me.wait(sreq, nullptr, 60);
    EXPECT_NE(LOOM_OK, s);
    EXPECT_NE(LOOM_ERR_TIMED_OUT, s) << "the send hung after its receiver died";
    EXPECT_EQ(1, me.errors) << "the error handler must run once";
    EXPECT_NE(LOOM_OK, me.last_error);
    // The endpoint stays failed: a new send reports the error at once.
    loom_status_ptr_t again = loom_tag_send_nbx(me.ep, data.data(), 8, 6, nullptr);
    EXPECT_TRUE(LOOM_PTR_IS_ERR(again));
}

/**
 * An endpoint closed while a receive's rendezvous GET waits in its AM lane's queue: the
 * purge must fail that receive, not take the GET for a send (which read a receive's
 * fields as a send's). shm without CMA, so the GET goes through the sender's receive
 * ring, which the sender stops serving and this side fills first.
 */
TEST(UcpMultiProc, CloseWithAQueuedRendezvousGetFailsTheReceive) {
    loom::test::ScopedEnv no_cma("LOOM_SHM_CMA", "no");
    loom::test::ScopedEnv small_ring("LOOM_SHM_FIFO_SIZE", "64k");
    auto* flags = static_cast<volatile int*>(
        mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(MAP_FAILED, (void*)flags);
    flags[0] = 0;  // the child sent its rendezvous
    flags[1] = 0;  // the parent is done
    ForkedPeer peer([flags](ForkedPeer::Channel& ch) {
        Side me;
        if (!me.open("shm")) return 1;
        if (!me.meet_parent(ch)) return 2;
        static std::vector<char> data = pattern(1 << 20, 3);
        loom_status_ptr_t sreq = loom_tag_send_nbx(me.ep, data.data(), data.size(), 9, nullptr);
        if (LOOM_PTR_IS_ERR(sreq)) return 3;
        flags[0] = 1;
        // Serve nothing from now on: the parent's GET requests pile up in our ring.
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (flags[1] == 0 && std::chrono::steady_clock::now() < deadline) {
        }
        if (LOOM_PTR_IS_PTR(sreq)) loom_request_free(sreq);  // fails when the endpoint closes
        return flags[1] == 1 ? 0 : 4;
    });
    Side me;
    ASSERT_TRUE(me.open("shm"));
    ASSERT_TRUE(me.meet_child(peer.channel(), false)) << "no address from the child, or no endpoint to it";
    loom_tag_recv_info_t info{};
    ASSERT_TRUE(me.progress_until([&] { return flags[0] == 1 && loom_tag_probe_nb(me.worker, 9, ~0ull, 0, &info); }))
        << "the rendezvous request never arrived";
    // Fill the child's ring until our sends queue up.
    std::vector<loom_status_ptr_t> sends;
    std::uint64_t word = 42;
    for (int i = 0; i < 100000 && sends.empty(); ++i) {
        loom_status_ptr_t s = loom_tag_send_nbx(me.ep, &word, sizeof(word), 1, nullptr);
        ASSERT_FALSE(LOOM_PTR_IS_ERR(s));
        if (LOOM_PTR_IS_PTR(s)) sends.push_back(s);
    }
    ASSERT_FALSE(sends.empty()) << "the child's ring never filled";
    // The receive matches the rendezvous; its GET can only queue behind those sends.
    std::vector<char> out(1 << 20);
    loom_status_ptr_t rreq = loom_tag_recv_nbx(me.worker, out.data(), out.size(), 9, ~0ull, nullptr);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(rreq));
    for (int i = 0; i < 100; ++i) loom_worker_progress(me.worker);
    ASSERT_EQ(LOOM_INPROGRESS, loom_tag_recv_request_test(rreq, nullptr)) << "the GET did not wait";
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
    p.flags = LOOM_EP_CLOSE_FLAG_FORCE;
    loom_status_ptr_t close = loom_ep_close_nbx(me.ep, &p);
    me.ep = nullptr;
    EXPECT_FALSE(LOOM_PTR_IS_ERR(close));
    if (LOOM_PTR_IS_PTR(close)) {
        EXPECT_EQ(LOOM_OK, me.wait(close));
    }
    loom_status_t r = me.wait(rreq, nullptr, 10);
    EXPECT_NE(LOOM_OK, r) << "the receive cannot have its data";
    EXPECT_NE(LOOM_ERR_TIMED_OUT, r) << "the receive hung after its endpoint was closed";
    for (loom_status_ptr_t s : sends) EXPECT_EQ(LOOM_ERR_CANCELED, me.wait(s, nullptr, 10));
    flags[1] = 1;
    EXPECT_EQ(0, peer.wait());
    munmap(const_cast<int*>(flags), 4096);
}

/**
 * Both directions carry a message first, so every connection is up and a later send goes
 * out inside its call, without progress (which could run the whole rendezvous).
 */
bool warm_up(Side& me, bool first) {
    std::uint64_t out = 1, in = 0;
    for (bool sending : {first, !first}) {
        loom_status_t s = sending ? me.wait(loom_tag_send_nbx(me.ep, &out, sizeof(out), 1, nullptr))
                                  : me.wait(loom_tag_recv_nbx(me.worker, &in, sizeof(in), 1, ~0ull, nullptr));
        if (s != LOOM_OK) return false;
    }
    return in == 1;
}

/**
 * PUT schemes: the receiver dies after its RTR (and, split, after its GET of the head),
 * before the sender handled it: the sender's PUTs or its endpoint fail the send; no hang.
 */
TEST_P(UcpMultiProcTest, ReceiverKilledAfterItsPutRtr) {
    const char* tls = GetParam();
    for (const char* scheme : {"put_zcopy", "get_put"}) {
        SCOPED_TRACE(scheme);
        loom::test::ScopedEnv env("LOOM_RNDV_SCHEME", scheme);  // both processes
        auto* waiting = static_cast<volatile int*>(
            mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
        ASSERT_NE(MAP_FAILED, (void*)waiting);
        *waiting = 0;
        ForkedPeer peer([tls, waiting](ForkedPeer::Channel& ch) {
            Side me;
            if (!me.open(tls)) return 1;
            if (!me.meet_parent(ch) || !warm_up(me, false)) return 2;
            static std::vector<char> buf(8 << 20);
            loom_status_ptr_t r = loom_tag_recv_nbx(me.worker, buf.data(), buf.size(), 5, ~0ull, nullptr);
            if (!LOOM_PTR_IS_PTR(r)) return 3;
            // Answer the RTS, then stop: the sender's PUTs and FIN find nobody.
            const auto* req = loom::ucp::request_of(r);
            if (!me.progress_until([req] { return (req->recv.rndv_wait & loom::ucp::kRecvWaitFin) != 0; }, 60)) return 4;
            *waiting = 1;
            auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
            while (std::chrono::steady_clock::now() < deadline) {
            }
            return 5;
        });
        Side me;
        ASSERT_TRUE(me.open(tls));
        ASSERT_TRUE(me.meet_child(peer.channel(), true)) << "no address from the child, or no endpoint to it";
        ASSERT_TRUE(warm_up(me, true));
        auto data = pattern(8 << 20, 5);
        loom_status_ptr_t sreq = loom_tag_send_nbx(me.ep, data.data(), data.size(), 5, nullptr);
        ASSERT_TRUE(LOOM_PTR_IS_PTR(sreq));
        // No progress here until the receiver is gone: the RTS left inside the call.
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (*waiting == 0 && std::chrono::steady_clock::now() < deadline) {
        }
        ASSERT_EQ(1, *waiting) << "the receiver never answered the RTS; child exit "
                               << peer.wait(std::chrono::milliseconds(1));
        peer.kill(SIGKILL);
        EXPECT_EQ(-SIGKILL, peer.wait());
        munmap(const_cast<int*>(waiting), 4096);
        loom_status_t s = me.wait(sreq, nullptr, 60);
        EXPECT_NE(LOOM_OK, s) << "the PUTs cannot have reached a dead receiver";
        EXPECT_NE(LOOM_ERR_TIMED_OUT, s) << "the send hung after its receiver died";
    }
}

/**
 * PUT schemes: the sender dies after the receiver's RTR, before its PUTs: the failure of
 * the receiver's endpoint to it fails the receive waiting for the FIN (split: once its own
 * GET of the head ended); no hang.
 */
TEST_P(UcpMultiProcTest, SenderKilledBeforeItsPutsFailsTheReceive) {
    const char* tls = GetParam();
    for (const char* scheme : {"put_zcopy", "get_put"}) {
        SCOPED_TRACE(scheme);
        loom::test::ScopedEnv env("LOOM_RNDV_SCHEME", scheme);
        auto* flags = static_cast<volatile int*>(
            mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
        ASSERT_NE(MAP_FAILED, (void*)flags);
        flags[0] = 0;  // the child stopped progressing
        flags[1] = 0;  // the parent has the RTS
        ForkedPeer peer([tls, flags](ForkedPeer::Channel& ch) {
            Side me;
            if (!me.open(tls)) return 1;
            if (!me.meet_parent(ch) || !warm_up(me, true)) return 2;
            static std::vector<char> data = pattern(8 << 20, 6);
            loom_status_ptr_t s = loom_tag_send_nbx(me.ep, data.data(), data.size(), 5, nullptr);
            if (!LOOM_PTR_IS_PTR(s)) return 3;
            if (!me.progress_until([flags] { return flags[1] == 1; }, 60)) return 4;
            flags[0] = 1;  // from here on the RTR waits unread
            auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
            while (std::chrono::steady_clock::now() < deadline) {
            }
            return 5;
        });
        Side me;
        ASSERT_TRUE(me.open(tls));
        ASSERT_TRUE(me.meet_child(peer.channel(), true)) << "no address from the child, or no endpoint to it";
        ASSERT_TRUE(warm_up(me, false));
        loom_tag_recv_info_t info{};
        ASSERT_TRUE(me.progress_until([&] { return loom_tag_probe_nb(me.worker, 5, ~0ull, 0, &info) != nullptr; }))
            << "the RTS never arrived";
        flags[1] = 1;
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (flags[0] == 0 && std::chrono::steady_clock::now() < deadline) {
        }
        ASSERT_EQ(1, flags[0]);
        std::vector<char> out(8 << 20);
        loom::test::LogCapture log("warn");
        loom_status_ptr_t rreq = loom_tag_recv_nbx(me.worker, out.data(), out.size(), 5, ~0ull, nullptr);
        ASSERT_TRUE(LOOM_PTR_IS_PTR(rreq));
        const auto* req = loom::ucp::request_of(rreq);
        ASSERT_TRUE(me.progress_until([req] { return (req->recv.rndv_wait & loom::ucp::kRecvWaitFin) != 0; }))
            << "the receive never waited for the sender's PUTs";
        peer.kill(SIGKILL);
        EXPECT_EQ(-SIGKILL, peer.wait());
        munmap(const_cast<int*>(flags), 4096);
        loom_status_t r = me.wait(rreq, nullptr, 60);
        EXPECT_NE(LOOM_OK, r) << "the receive cannot have its data";
        EXPECT_NE(LOOM_ERR_TIMED_OUT, r) << "the receive hung after its sender died";
        EXPECT_EQ(1, me.errors) << "the error handler must run once";
        // One line says so: MPICH turns the failure into MPI_SUCCESS (run_kill_test.sh).
        EXPECT_EQ(1, log.count("ucp: a receive of 8388608 B failed: ")) << log.text();
    }
}

INSTANTIATE_TEST_SUITE_P(Tls, UcpMultiProcTest, testing::Values("shm", "tcp"),
                         [](const testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

INSTANTIATE_TEST_SUITE_P(Verbs, UcpMultiProcTest, testing::ValuesIn(loom::test::verbs_tls()),
                         [](const testing::TestParamInfo<const char*>& info) {
                             return loom::test::tls_name(info.param);
                         });

}  // namespace
