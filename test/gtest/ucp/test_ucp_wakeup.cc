/**
 * Worker wake-up (LOOM_FEATURE_WAKEUP: get_efd, arm, wait, signal) and thread mode
 * multi, through the C API, over shm and tcp (two workers in this process) and self,
 * and over rc (the Verbs instances, in the RDMA VM: test/rdma/run_rdma_tests.sh); a process asleep
 * in loom_worker_wait woken by another process's messages, over shm, tcp and rc.
 * Threads only ever wait with a bound: a lost wake-up fails the test instead of hanging.
 */
#include "common/forked_peer.h"
#include "common/test_helpers.h"
#include "loom/ucp.h"
#include "ucp_side.h"

#include <poll.h>
#include <sys/syscall.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct TlSet {
    const char* name;
    const char* tls;
    bool self;
};

void PrintTo(const TlSet& set, std::ostream* os) { *os << set.name; }

std::vector<char> pattern(std::size_t n, unsigned seed) {
    std::vector<char> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 13 + seed * 5) & 0xff);
    return v;
}

/** Two workers (one for self) of a context with the features asked, an endpoint between them. */
class Pair {
public:
    Pair(const char* tls, bool self, std::uint64_t features, loom_thread_mode_t mode = LOOM_THREAD_MODE_SINGLE) {
        setenv("LOOM_TLS", tls, 1);
        loom_params_t params{};
        params.field_mask = LOOM_PARAM_FIELD_FEATURES;
        params.features = features;
        EXPECT_EQ(LOOM_OK, loom_init(&params, &ctx));
        unsetenv("LOOM_TLS");
        if (ctx == nullptr) return;
        loom_worker_params_t wp{};
        wp.field_mask = LOOM_WORKER_PARAM_FIELD_THREAD_MODE;
        wp.thread_mode = mode;
        EXPECT_EQ(LOOM_OK, loom_worker_create(ctx, &wp, &sender));
        if (self) {
            receiver = sender;
        } else {
            EXPECT_EQ(LOOM_OK, loom_worker_create(ctx, &wp, &receiver));
        }
        if (sender == nullptr || receiver == nullptr) return;
        void* addr;
        size_t len;
        EXPECT_EQ(LOOM_OK, loom_worker_get_address(receiver, &addr, &len));
        loom_ep_params_t ep_params{};
        ep_params.field_mask = LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS;
        ep_params.address = addr;
        EXPECT_EQ(LOOM_OK, loom_ep_create(sender, &ep_params, &ep));
        loom_worker_release_address(receiver, addr);
    }

    ~Pair() {
        if (ep) {
            loom_request_param_t p{};
            p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
            p.flags = LOOM_EP_CLOSE_FLAG_FORCE;
            (void)loom_ep_close_nbx(ep, &p);
        }
        if (receiver && receiver != sender) loom_worker_destroy(receiver);
        if (sender) loom_worker_destroy(sender);
        if (ctx) loom_cleanup(ctx);
    }

    bool ok() const { return ep != nullptr; }

    void progress() {
        loom_worker_progress(sender);
        if (receiver != sender) loom_worker_progress(receiver);
    }

    /** Progresses both until @p r completes (bounded); frees it; its status. */
    loom_status_t wait(loom_status_ptr_t r) {
        if (!LOOM_PTR_IS_PTR(r)) return LOOM_PTR_STATUS(r);
        auto deadline = Clock::now() + std::chrono::seconds(30);
        loom_status_t s;
        while ((s = loom_request_check_status(r)) == LOOM_INPROGRESS) {
            if (Clock::now() > deadline) {
                ADD_FAILURE() << "request timed out";
                return LOOM_ERR_TIMED_OUT;
            }
            progress();
        }
        loom_request_free(r);
        return s;
    }

    /** Progresses @p w until it can be armed; false if it stays busy (a leak of events). */
    static bool quiesce_and_arm(loom_worker_h w) {
        for (int i = 0; i < 100000; ++i) {
            loom_status_t s = loom_worker_arm(w);
            if (s == LOOM_OK) return true;
            if (s != LOOM_ERR_BUSY) {
                ADD_FAILURE() << "arm: " << loom_status_string(s);
                return false;
            }
            while (loom_worker_progress(w) != 0) {
            }
        }
        ADD_FAILURE() << "the worker stays busy with nothing to do";
        return false;
    }

    loom_context_h ctx = nullptr;
    loom_worker_h sender = nullptr;
    loom_worker_h receiver = nullptr;
    loom_ep_h ep = nullptr;
};

bool readable(int fd, int timeout_ms) {
    pollfd pfd{fd, POLLIN, 0};
    return ::poll(&pfd, 1, timeout_ms) == 1;
}

TEST(UcpWakeup, NeedsTheFeature) {
    Pair pair("shm", false, LOOM_FEATURE_TAG);
    ASSERT_TRUE(pair.ok());
    int fd = -1;
    EXPECT_EQ(LOOM_ERR_UNSUPPORTED, loom_worker_get_efd(pair.receiver, &fd));
    EXPECT_EQ(LOOM_ERR_UNSUPPORTED, loom_worker_arm(pair.receiver));
    EXPECT_EQ(LOOM_ERR_UNSUPPORTED, loom_worker_wait(pair.receiver));
    EXPECT_EQ(LOOM_ERR_UNSUPPORTED, loom_worker_signal(pair.receiver));
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_worker_get_efd(nullptr, &fd));
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_worker_get_efd(pair.receiver, nullptr));
}

TEST(UcpWakeup, EveryTransportHereCanWakeAWorker) {
    // shm, tcp and self can all wake a worker (self never needs to), so the worker keeps
    // them all: its address reaches the peer over each (rc can too: the Verbs/* cases).
    Pair pair("shm,tcp,self", false, LOOM_FEATURE_TAG | LOOM_FEATURE_WAKEUP);
    ASSERT_TRUE(pair.ok());
    int fd = -1;
    ASSERT_EQ(LOOM_OK, loom_worker_get_efd(pair.receiver, &fd));
    EXPECT_GE(fd, 0);
}

class UcpWakeupTest : public testing::TestWithParam<TlSet> {};

TEST_P(UcpWakeupTest, SignalWakesAWaitingThreadAndMakesArmBusy) {
    Pair pair(GetParam().tls, GetParam().self, LOOM_FEATURE_TAG | LOOM_FEATURE_WAKEUP);
    ASSERT_TRUE(pair.ok());
    ASSERT_TRUE(Pair::quiesce_and_arm(pair.receiver));
    ASSERT_EQ(LOOM_OK, loom_worker_signal(pair.receiver));
    EXPECT_EQ(LOOM_ERR_BUSY, loom_worker_arm(pair.receiver)) << "a signal before arm is an event";
    EXPECT_EQ(LOOM_OK, loom_worker_arm(pair.receiver)) << "and only one";

    std::atomic<bool> woke{false};
    std::thread sleeper([&] {
        EXPECT_EQ(LOOM_OK, loom_worker_wait(pair.receiver));
        woke = true;
    });
    // The sleeper may not have gone to sleep yet: a signal before its arm makes its wait
    // return at once, one after wakes it. Either way it must return.
    ASSERT_EQ(LOOM_OK, loom_worker_signal(pair.receiver));
    sleeper.join();
    EXPECT_TRUE(woke);
}

/**
 * A worker asleep with a request whose deadline (LOOM_OP_ATTR_FIELD_DEADLINE) is pending
 * wakes when it is due, with nothing arriving, and the request then times out: a caller
 * that sleeps on the event fd (asyncio, MPI progress threads) is not left waiting for ever.
 */
TEST_P(UcpWakeupTest, ArmedWorkerWakesAtARequestsDeadline) {
    Pair pair(GetParam().tls, GetParam().self, LOOM_FEATURE_TAG | LOOM_FEATURE_WAKEUP);
    ASSERT_TRUE(pair.ok());
    int fd = -1;
    ASSERT_EQ(LOOM_OK, loom_worker_get_efd(pair.receiver, &fd));
    std::uint64_t got = 0;
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_DEADLINE;
    p.deadline_ns = 300 * 1000000ull;
    loom_status_ptr_t r = loom_tag_recv_nbx(pair.receiver, &got, sizeof(got), 9, ~0ull, &p);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(r));
    ASSERT_TRUE(Pair::quiesce_and_arm(pair.receiver));
    ASSERT_EQ(LOOM_INPROGRESS, loom_request_check_status(r)) << "armed before the deadline";
    EXPECT_TRUE(readable(fd, 10000)) << "nothing arrives: only the deadline can wake the worker";
    EXPECT_EQ(LOOM_ERR_TIMED_OUT, pair.wait(r));
    // With no deadline left the timer is off: an armed, idle worker's fd stays quiet.
    ASSERT_TRUE(Pair::quiesce_and_arm(pair.receiver));
    EXPECT_FALSE(readable(fd, 0));
}

TEST_P(UcpWakeupTest, ArmedWorkerIsWokenByAMessage) {
    if (GetParam().self) GTEST_SKIP() << "self delivers inside the send: there is nothing to wait for";
    Pair pair(GetParam().tls, false, LOOM_FEATURE_TAG | LOOM_FEATURE_WAKEUP);
    ASSERT_TRUE(pair.ok());
    int fd = -1;
    ASSERT_EQ(LOOM_OK, loom_worker_get_efd(pair.receiver, &fd));
    // Connect: one message through, so the lanes are up (over rc they connect through
    // rdma_cm, which takes a while) and the wire-up has arrived; then let it settle.
    std::uint64_t first = 1, got = 0;
    loom_status_ptr_t first_recv = loom_tag_recv_nbx(pair.receiver, &got, sizeof(got), 6, ~0ull, nullptr);
    ASSERT_EQ(LOOM_OK, pair.wait(loom_tag_send_nbx(pair.ep, &first, sizeof(first), 6, nullptr)));
    ASSERT_EQ(LOOM_OK, pair.wait(first_recv));
    ASSERT_EQ(first, got);
    ASSERT_EQ(LOOM_OK, pair.wait(loom_ep_flush_nbx(pair.ep, nullptr)));
    for (int i = 0; i < 1000; ++i) pair.progress();

    for (std::size_t size : {std::size_t{8}, std::size_t{4000}, std::size_t{300000}}) {
        auto data = pattern(size, static_cast<unsigned>(size));
        std::vector<char> out(size, 0);
        loom_status_ptr_t rreq = loom_tag_recv_nbx(pair.receiver, out.data(), size, 7, ~0ull, nullptr);
        ASSERT_TRUE(LOOM_PTR_IS_PTR(rreq));
        ASSERT_TRUE(Pair::quiesce_and_arm(pair.receiver)) << size;
        EXPECT_FALSE(readable(fd, 0)) << "armed and idle: the fd must not be readable";
        loom_status_ptr_t sreq = loom_tag_send_nbx(pair.ep, data.data(), size, 7, nullptr);
        ASSERT_FALSE(LOOM_PTR_IS_ERR(sreq));
        for (int i = 0; i < 100; ++i) loom_worker_progress(pair.sender);
        EXPECT_TRUE(readable(fd, 10000)) << size << ": a message for an armed worker must make its fd readable";
        ASSERT_EQ(LOOM_OK, pair.wait(rreq)) << size;
        ASSERT_EQ(LOOM_OK, pair.wait(sreq)) << size;
        EXPECT_EQ(data, out) << size;
    }
}

TEST_P(UcpWakeupTest, AThreadThatOnlyWaitsReceivesEverything) {
    // The receiver's thread never spins: progress until idle, then wait. The sender's side
    // runs here. Sizes cross the eager and rendezvous protocols, whose replies must wake
    // the sleeper too.
    if (GetParam().self) GTEST_SKIP() << "self: one worker, nothing to sleep for";
    Pair pair(GetParam().tls, false, LOOM_FEATURE_TAG | LOOM_FEATURE_WAKEUP);
    ASSERT_TRUE(pair.ok());
    const std::vector<std::size_t> sizes{1, 8, 100, 5000, 40000, 70000, 1 << 20};
    std::vector<std::vector<char>> out(sizes.size());
    std::atomic<int> received{0};
    std::atomic<bool> failed{false};
    std::thread receiver([&] {
        auto deadline = Clock::now() + std::chrono::seconds(60);
        for (std::size_t i = 0; i < sizes.size() && !failed; ++i) {
            out[i].assign(sizes[i], 0);
            loom_status_ptr_t r = loom_tag_recv_nbx(pair.receiver, out[i].data(), sizes[i], i, ~0ull, nullptr);
            if (LOOM_PTR_IS_PTR(r)) {
                while (loom_request_check_status(r) == LOOM_INPROGRESS && Clock::now() < deadline) {
                    if (loom_worker_progress(pair.receiver) != 0) continue;
                    if (loom_worker_wait(pair.receiver) != LOOM_OK) failed = true;
                }
                if (loom_request_check_status(r) != LOOM_OK) failed = true;
                loom_request_free(r);
            } else if (r != nullptr) {
                failed = true;
            }
            ++received;
        }
    });
    // If a wake-up were lost the receiver would sleep forever: signal it once the test is
    // over, so the failure shows as missing data instead of a hang.
    auto deadline = Clock::now() + std::chrono::seconds(60);
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        auto data = pattern(sizes[i], static_cast<unsigned>(i));
        loom_status_ptr_t s = loom_tag_send_nbx(pair.ep, data.data(), sizes[i], i, nullptr);
        ASSERT_FALSE(LOOM_PTR_IS_ERR(s));
        while (LOOM_PTR_IS_PTR(s) && loom_request_check_status(s) == LOOM_INPROGRESS && Clock::now() < deadline) {
            loom_worker_progress(pair.sender);
        }
        if (LOOM_PTR_IS_PTR(s)) {
            EXPECT_EQ(LOOM_OK, loom_request_check_status(s)) << sizes[i];
            loom_request_free(s);
        }
    }
    while (received < static_cast<int>(sizes.size()) && Clock::now() < deadline) loom_worker_progress(pair.sender);
    bool finished = received == static_cast<int>(sizes.size());
    if (!finished) {
        failed = true;
        while (received < static_cast<int>(sizes.size())) (void)loom_worker_signal(pair.receiver);
    }
    receiver.join();
    ASSERT_TRUE(finished) << "the waiting receiver missed a wake-up";
    EXPECT_FALSE(failed);
    for (std::size_t i = 0; i < sizes.size(); ++i) EXPECT_EQ(pattern(sizes[i], static_cast<unsigned>(i)), out[i]);
}

TEST_P(UcpWakeupTest, MultiThreadedWorkerSharedBySenders) {
    // Four threads send on one endpoint of a LOOM_THREAD_MODE_MULTI worker and progress
    // it; the receiver checks every message and the order of each thread's messages.
    Pair pair(GetParam().tls, GetParam().self, LOOM_FEATURE_TAG, LOOM_THREAD_MODE_MULTI);
    ASSERT_TRUE(pair.ok());
    constexpr int kThreads = 4, kPerThread = 150;
    const std::size_t sizes[] = {8, 200, 3000, 20000, 70000};
    std::atomic<int> send_errors{0};
    std::vector<std::thread> senders;
    for (int t = 0; t < kThreads; ++t) {
        senders.emplace_back([&, t] {
            auto deadline = Clock::now() + std::chrono::seconds(60);
            for (int i = 0; i < kPerThread; ++i) {
                std::size_t size = sizes[(i + t) % 5];
                auto data = pattern(size, static_cast<unsigned>(t * 1000 + i));
                loom_tag_t tag = (static_cast<loom_tag_t>(t) << 32) | static_cast<unsigned>(i);
                loom_status_ptr_t s = loom_tag_send_nbx(pair.ep, data.data(), size, tag, nullptr);
                if (LOOM_PTR_IS_ERR(s)) {
                    ++send_errors;
                    continue;
                }
                while (LOOM_PTR_IS_PTR(s) && loom_request_check_status(s) == LOOM_INPROGRESS &&
                       Clock::now() < deadline) {
                    loom_worker_progress(pair.sender);
                }
                if (LOOM_PTR_IS_PTR(s)) {
                    if (loom_request_check_status(s) != LOOM_OK) ++send_errors;
                    loom_request_free(s);
                }
            }
        });
    }
    // Receive with a per-thread wildcard on the index: each thread's messages in its order.
    int next[kThreads] = {};
    std::vector<char> buf(70000);
    auto deadline = Clock::now() + std::chrono::seconds(60);
    int total = 0;
    while (total < kThreads * kPerThread && Clock::now() < deadline) {
        loom_tag_recv_info_t info{};
        loom_request_param_t rp{};
        rp.op_attr_mask = LOOM_OP_ATTR_FIELD_RECV_INFO;
        rp.recv_info.tag_recv = &info;
        loom_status_ptr_t r = loom_tag_recv_nbx(pair.receiver, buf.data(), buf.size(), 0, 0, &rp);
        if (LOOM_PTR_IS_PTR(r)) {
            while (loom_tag_recv_request_test(r, &info) == LOOM_INPROGRESS && Clock::now() < deadline) {
                loom_worker_progress(pair.receiver);
                // A send completes once its data is copied; over tcp the copy may wait in the
                // sender's transport for room in a full socket, and only progress sends it.
                // The sending threads stop progressing after their last send.
                loom_worker_progress(pair.sender);
            }
            ASSERT_EQ(LOOM_OK, loom_tag_recv_request_test(r, &info));
            loom_request_free(r);
        } else {
            ASSERT_EQ(LOOM_OK, LOOM_PTR_STATUS(r));
        }
        const int t = static_cast<int>(info.sender_tag >> 32);
        const int i = static_cast<int>(info.sender_tag & 0xffffffffu);
        ASSERT_GE(t, 0);
        ASSERT_LT(t, kThreads);
        EXPECT_EQ(next[t], i) << "thread " << t << ": messages out of order";
        next[t] = i + 1;
        const std::size_t size = sizes[(i + t) % 5];
        ASSERT_EQ(size, info.length);
        auto expect = pattern(size, static_cast<unsigned>(t * 1000 + i));
        EXPECT_EQ(0, std::memcmp(expect.data(), buf.data(), size)) << "thread " << t << " message " << i;
        ++total;
    }
    for (auto& th : senders) th.join();
    EXPECT_EQ(kThreads * kPerThread, total);
    EXPECT_EQ(0, send_errors.load());
}

TEST_P(UcpWakeupTest, MultiThreadedWorkerSharedByReceivers) {
    // Threads post receives on one multi worker and progress it while this thread sends.
    Pair pair(GetParam().tls, GetParam().self, LOOM_FEATURE_TAG, LOOM_THREAD_MODE_MULTI);
    ASSERT_TRUE(pair.ok());
    constexpr int kThreads = 3, kPerThread = 100;
    std::atomic<int> errors{0};
    std::atomic<int> finished{0};
    std::vector<std::thread> receivers;
    for (int t = 0; t < kThreads; ++t) {
        receivers.emplace_back([&, t] {
            auto deadline = Clock::now() + std::chrono::seconds(60);
            for (int i = 0; i < kPerThread; ++i) {
                std::size_t size = 1 + static_cast<std::size_t>((i * 977) % 30000);
                std::vector<char> out(size);
                loom_tag_t tag = (static_cast<loom_tag_t>(t) << 32) | static_cast<unsigned>(i);
                loom_status_ptr_t r = loom_tag_recv_nbx(pair.receiver, out.data(), size, tag, ~0ull, nullptr);
                if (LOOM_PTR_IS_PTR(r)) {
                    while (loom_request_check_status(r) == LOOM_INPROGRESS && Clock::now() < deadline) {
                        loom_worker_progress(pair.receiver);
                    }
                    if (loom_request_check_status(r) != LOOM_OK) ++errors;
                    loom_request_free(r);
                } else if (r != nullptr) {
                    ++errors;
                }
                if (out != pattern(size, static_cast<unsigned>(t * 1000 + i))) ++errors;
            }
            ++finished;
        });
    }
    for (int i = 0; i < kPerThread; ++i) {
        for (int t = 0; t < kThreads; ++t) {
            std::size_t size = 1 + static_cast<std::size_t>((i * 977) % 30000);
            auto data = pattern(size, static_cast<unsigned>(t * 1000 + i));
            loom_tag_t tag = (static_cast<loom_tag_t>(t) << 32) | static_cast<unsigned>(i);
            ASSERT_EQ(LOOM_OK, pair.wait(loom_tag_send_nbx(pair.ep, data.data(), size, tag, nullptr)));
        }
    }
    // A completed send's data may still wait in the sender's transport (tcp, a full socket):
    // only progress sends it, so the sender is progressed until every receiver is done.
    auto deadline = Clock::now() + std::chrono::seconds(60);
    while (finished.load() < kThreads && Clock::now() < deadline) loom_worker_progress(pair.sender);
    for (auto& th : receivers) th.join();
    EXPECT_EQ(0, errors.load());
}

INSTANTIATE_TEST_SUITE_P(Tls, UcpWakeupTest,
                         testing::Values(TlSet{"self", "self", true}, TlSet{"shm", "shm", false},
                                         TlSet{"tcp", "tcp", false}),
                         [](const testing::TestParamInfo<TlSet>& info) { return std::string(info.param.name); });

/**
 * rc, on the device LOOM_NET_DEVICES names: only where test/rdma/run_rdma_tests.sh runs
 * the suite on RDMA devices (LOOMTEST_UCP_VERBS=1, in the RDMA VM on rxe and siw). A
 * worker that may sleep keeps rc only because rc can wake it: without that, creating
 * these workers fails (no transport left).
 */
std::vector<TlSet> verbs_sets() {
    if (std::getenv("LOOMTEST_UCP_VERBS") == nullptr) return {};
    const char* cm = std::getenv("LOOM_IB_CM");  // endpoint to endpoint: wired up over tcp
    if (cm != nullptr && std::string(cm) == "verbs") return {TlSet{"rc_wired_up_over_tcp", "rc,tcp:aux", false}};
    return {TlSet{"rc", "rc", false}};
}

INSTANTIATE_TEST_SUITE_P(Verbs, UcpWakeupTest, testing::ValuesIn(verbs_sets()),
                         [](const testing::TestParamInfo<TlSet>& info) {
                             return std::string(info.param.name);
                         });

// --- two processes -------------------------------------------------------------------------

using loom::test::ForkedPeer;

/** Sizes of SleeperInWaitIsWokenByEachMessage: eager in one fragment, eager in several, rendezvous. */
const std::vector<std::size_t> kWakeSizes = {8, 5000, 300000};

/** One process's side: context (with the features asked), worker, endpoint to the other. */
struct WakeSide : loom::test::UcpSide {
    /** Waits for a status-or-request, progressing (busy), at most @p seconds. */
    loom_status_t wait(loom_status_ptr_t r, int seconds = 30) {
        auto test = [](void* q) { return loom_request_check_status(q); };
        return wait_with(r, test, seconds);
    }
};

/**
 * The sleeping process of SleeperInWaitIsWokenByEachMessage (args: LOOM_TLS): it receives
 * each message by calling loom_worker_wait whenever progress finds nothing to do, checks
 * it and answers. A lost wake-up leaves it asleep; the parent then fails and kills it.
 */
int wakeup_sleeper(ForkedPeer::Channel& ch, const std::vector<std::string>& args) {
    WakeSide me;
    if (!me.open(args.at(0).c_str(), LOOM_FEATURE_TAG | LOOM_FEATURE_WAKEUP)) return 1;
    if (!me.meet_parent(ch)) return 2;
    for (std::size_t i = 0; i < kWakeSizes.size(); ++i) {
        std::vector<char> buf(kWakeSizes[i]);
        loom_status_ptr_t r = loom_tag_recv_nbx(me.worker, buf.data(), buf.size(), i, ~0ull, nullptr);
        if (LOOM_PTR_IS_ERR(r)) return 3;
        if (LOOM_PTR_IS_PTR(r)) {
            while (loom_request_check_status(r) == LOOM_INPROGRESS) {
                if (loom_worker_progress(me.worker) != 0) continue;
                if (loom_worker_wait(me.worker) != LOOM_OK) return 4;
            }
            loom_status_t s = loom_request_check_status(r);
            loom_request_free(r);
            if (s != LOOM_OK) {
                ch.send("message " + std::to_string(i) + ": " + loom_status_string(s));
                return 5;
            }
        }
        if (buf != pattern(kWakeSizes[i], static_cast<unsigned>(i))) {
            ch.send("message " + std::to_string(i) + " arrived corrupted");
            return 6;
        }
        std::uint64_t answer = i;
        if (me.wait(loom_tag_send_nbx(me.ep, &answer, sizeof(answer), 1000 + i, nullptr)) != LOOM_OK)
            return 7;
    }
    ch.send(std::string("ok"));
    (void)ch.recv(std::chrono::seconds(20));
    return 0;
}
LOOM_TEST_PEER_ROLE(wakeup_sleeper);

/** Whether process @p pid sleeps in epoll_wait without a timeout (loom_worker_wait); nullopt: unknowable. */
std::optional<bool> asleep_in_wait(pid_t pid) {
    auto call = loom::test::blocked_syscall(pid);
    if (!call) return std::nullopt;
    bool epoll = call->number == SYS_epoll_wait || call->number == SYS_epoll_pwait;
    return epoll && static_cast<std::int32_t>(call->args[3]) == -1;  // an int: the upper half is undefined
}

class UcpWakeupMultiProcTest : public testing::TestWithParam<const char*> {};

TEST_P(UcpWakeupMultiProcTest, SleeperInWaitIsWokenByEachMessage) {
    const char* tls = GetParam();
    ForkedPeer peer("wakeup_sleeper", {tls});
    WakeSide me;
    ASSERT_TRUE(me.open(tls, LOOM_FEATURE_TAG));
    ASSERT_TRUE(me.meet_child(peer.channel(), false)) << "the sleeper did not start, or no endpoint to it";
    bool can_look = true;  // /proc/<pid>/syscall is readable here
    for (std::size_t i = 0; i < kWakeSizes.size(); ++i) {
        // Each message goes out once the other process sleeps in loom_worker_wait
        // (progressing meanwhile: its connection set-up may need this side's answers).
        bool asleep = false;
        auto deadline = Clock::now() + std::chrono::seconds(20);
        while (can_look && !asleep && Clock::now() < deadline) {
            loom_worker_progress(me.worker);
            auto seen = asleep_in_wait(peer.pid());
            can_look = seen.has_value();
            asleep = seen.value_or(false);
        }
        if (can_look) {
            ASSERT_TRUE(asleep) << "message " << i << ": the other process never went to sleep";
        }
        auto data = pattern(kWakeSizes[i], static_cast<unsigned>(i));
        std::uint64_t answer = ~0ull;
        loom_status_ptr_t rreq =
            loom_tag_recv_nbx(me.worker, &answer, sizeof(answer), 1000 + i, ~0ull, nullptr);
        ASSERT_FALSE(LOOM_PTR_IS_ERR(rreq));
        ASSERT_EQ(LOOM_OK, me.wait(loom_tag_send_nbx(me.ep, data.data(), data.size(), i, nullptr)))
            << "message " << i << " (" << data.size() << " bytes)";
        ASSERT_EQ(LOOM_OK, me.wait(rreq))
            << "message " << i << ": no answer from the sleeper; it says: "
            << peer.channel().recv_text(std::chrono::seconds(1)).value_or("nothing");
        EXPECT_EQ(i, answer);
    }
    auto result = peer.channel().recv_text(std::chrono::seconds(20));
    ASSERT_TRUE(result.has_value()) << "the sleeper died";
    EXPECT_EQ("ok", *result);
    peer.channel().send(std::string("bye"));
    EXPECT_EQ(0, peer.wait());
    if (!can_look)
        std::printf("note: /proc/%d/syscall is unreadable here: the sleep was not checked\n", peer.pid());
}

INSTANTIATE_TEST_SUITE_P(Tls, UcpWakeupMultiProcTest, testing::Values("shm", "tcp"),
                         [](const testing::TestParamInfo<const char*>& info) {
                             return std::string(info.param);
                         });

INSTANTIATE_TEST_SUITE_P(Verbs, UcpWakeupMultiProcTest, testing::ValuesIn(loom::test::verbs_tls()),
                         [](const testing::TestParamInfo<const char*>& info) {
                             return loom::test::tls_name(info.param);
                         });

}  // namespace
