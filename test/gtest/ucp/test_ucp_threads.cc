/**
 * Thread mode multi under stress: four threads share one worker and each sends and
 * receives tagged messages, sends active messages and receives the replies (whichever
 * thread progresses runs the handler), and puts, gets and adds into its own slice of the
 * peer's memory, all at once; every message and every byte is checked. The peer worker is
 * served by the test's main thread. Over shm and tcp (two workers of one process); the
 * ThreadSanitizer build runs it too (docs/reliability.md).
 */
#include "common/test_helpers.h"
#include "loom/ucp.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kThreads = 4;
constexpr int kIterations = 120;
constexpr std::size_t kSlot = 64 * 1024;  ///< each thread's slice of the peer's memory
constexpr unsigned kAmRequest = 1, kAmReply = 2;

/** A message's bytes, from its thread and index. */
std::vector<char> pattern(std::size_t n, int thread, int index) {
    std::vector<char> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 31 + thread * 7 + index * 13) & 0xff);
    return v;
}

/** Tag of message @p index of @p thread; replies carry the same tag. */
loom_tag_t tag_of(int thread, int index) {
    return (static_cast<loom_tag_t>(thread) << 32) | unsigned(index);
}

/** Header of an active message: who sent it, which one, how long its payload is. */
struct AmHeader {
    std::int32_t thread;
    std::int32_t index;
    std::uint64_t length;
};

/** What a handler saw wrong, and what it must answer (the peer answers from its main loop). */
struct AmLog {
    std::mutex lock;
    std::deque<AmHeader> to_answer;
    std::atomic<int> bad{0};
    std::atomic<int> replies[kThreads] = {};
};

loom_status_t check_am(AmLog* log, const void* header, size_t header_length, void* data, size_t length,
                       const loom_am_recv_param_t* param, bool answer) {
    AmHeader h{};
    if (header_length != sizeof(h) || (param->recv_attr & LOOM_AM_RECV_ATTR_FLAG_RNDV) != 0) {
        ++log->bad;
        return LOOM_OK;
    }
    std::memcpy(&h, header, sizeof(h));
    if (h.thread < 0 || h.thread >= kThreads || h.length != length ||
        pattern(length, h.thread, h.index) !=
            std::vector<char>(static_cast<char*>(data), static_cast<char*>(data) + length)) {
        ++log->bad;
        return LOOM_OK;
    }
    if (answer) {
        std::lock_guard guard(log->lock);
        log->to_answer.push_back(h);
    } else {
        ++log->replies[h.thread];
    }
    return LOOM_OK;
}

class UcpThreadsTest : public testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        setenv("LOOM_TLS", GetParam().c_str(), 1);
        loom_params_t params{};
        params.field_mask = LOOM_PARAM_FIELD_FEATURES;
        params.features = LOOM_FEATURE_TAG | LOOM_FEATURE_AM | LOOM_FEATURE_RMA | LOOM_FEATURE_AMO64;
        ASSERT_EQ(LOOM_OK, loom_init(&params, &ctx_));
        unsetenv("LOOM_TLS");
        loom_worker_params_t wp{};
        wp.field_mask = LOOM_WORKER_PARAM_FIELD_THREAD_MODE;
        wp.thread_mode = LOOM_THREAD_MODE_MULTI;
        ASSERT_EQ(LOOM_OK, loom_worker_create(ctx_, &wp, &shared_));
        ASSERT_EQ(LOOM_OK, loom_worker_create(ctx_, &wp, &peer_));
        shared_ep_ = connect(shared_, peer_);
        peer_ep_ = connect(peer_, shared_);
        ASSERT_NE(nullptr, shared_ep_);
        ASSERT_NE(nullptr, peer_ep_);
        set_handler(
            peer_, kAmRequest,
            [](void* arg, const void* h, size_t hl, void* d, size_t l, const loom_am_recv_param_t* p) {
                return check_am(static_cast<AmLog*>(arg), h, hl, d, l, p, true);
            });
        set_handler(
            shared_, kAmReply,
            [](void* arg, const void* h, size_t hl, void* d, size_t l, const loom_am_recv_param_t* p) {
                return check_am(static_cast<AmLog*>(arg), h, hl, d, l, p, false);
            });
        // The peer's memory: one slice per thread, then one 64-bit counter per thread.
        loom_mem_map_params_t mp{};
        mp.field_mask = LOOM_MEM_MAP_PARAM_FIELD_LENGTH | LOOM_MEM_MAP_PARAM_FIELD_FLAGS;
        mp.length = kThreads * kSlot + kThreads * sizeof(std::uint64_t);
        mp.flags = LOOM_MEM_MAP_ALLOCATE;
        ASSERT_EQ(LOOM_OK, loom_mem_map(ctx_, &mp, &memh_));
        loom_mem_attr_t attr{};
        attr.field_mask = LOOM_MEM_ATTR_FIELD_ADDRESS;
        ASSERT_EQ(LOOM_OK, loom_mem_query(memh_, &attr));
        base_ = static_cast<char*>(attr.address);
        std::memset(base_, 0, mp.length);
        void* packed;
        size_t size;
        ASSERT_EQ(LOOM_OK, loom_rkey_pack(ctx_, memh_, &packed, &size));
        ASSERT_EQ(LOOM_OK, loom_ep_rkey_unpack(shared_ep_, packed, size, &rkey_));
        loom_rkey_buffer_release(packed);
    }

    void TearDown() override {
        if (rkey_) loom_rkey_destroy(rkey_);
        for (loom_ep_h ep : {shared_ep_, peer_ep_}) {
            if (!ep) continue;
            loom_request_param_t p{};
            p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
            p.flags = LOOM_EP_CLOSE_FLAG_FORCE;
            (void)loom_ep_close_nbx(ep, &p);
        }
        if (memh_) (void)loom_mem_unmap(ctx_, memh_);
        if (peer_) loom_worker_destroy(peer_);
        if (shared_) loom_worker_destroy(shared_);
        if (ctx_) loom_cleanup(ctx_);
    }

    static loom_ep_h connect(loom_worker_h from, loom_worker_h to) {
        void* addr;
        size_t len;
        if (loom_worker_get_address(to, &addr, &len) != LOOM_OK) return nullptr;
        loom_ep_params_t p{};
        p.field_mask = LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS;
        p.address = addr;
        loom_ep_h ep = nullptr;
        (void)loom_ep_create(from, &p, &ep);
        loom_worker_release_address(to, addr);
        return ep;
    }

    void set_handler(loom_worker_h w, unsigned id, loom_am_recv_callback_t cb) {
        loom_am_handler_param_t hp{};
        hp.field_mask =
            LOOM_AM_HANDLER_PARAM_FIELD_ID | LOOM_AM_HANDLER_PARAM_FIELD_CB | LOOM_AM_HANDLER_PARAM_FIELD_ARG;
        hp.id = id;
        hp.cb = cb;
        hp.arg = &am_;
        ASSERT_EQ(LOOM_OK, loom_worker_set_am_recv_handler(w, &hp));
    }

    /** Progresses the shared worker until @p r completes (bounded); frees it; its status. */
    loom_status_t wait(loom_status_ptr_t r) {
        if (!LOOM_PTR_IS_PTR(r)) return LOOM_PTR_STATUS(r);
        auto deadline = Clock::now() + std::chrono::seconds(60);
        loom_status_t s;
        while ((s = loom_request_check_status(r)) == LOOM_INPROGRESS && Clock::now() < deadline) {
            loom_worker_progress(shared_);
        }
        if (s == LOOM_INPROGRESS) return LOOM_ERR_TIMED_OUT;  // left to the worker's destroy
        loom_request_free(r);
        return s;
    }

    /** One thread's work; returns how many checks failed. */
    int run_thread(int t) {
        int failures = 0;
        auto note = [&](bool ok) { failures += ok ? 0 : 1; };
        const std::size_t sizes[] = {8, 300, 5000, 40000};
        std::vector<char> in(40000);
        for (int i = 0; i < kIterations; ++i) {
            const std::size_t size = sizes[(i + t) % 4];
            const auto data = pattern(size, t, i);
            // Tag: post the receive of the echo first, then send; both must complete.
            loom_status_ptr_t recv =
                loom_tag_recv_nbx(shared_, in.data(), in.size(), tag_of(t, i), ~0ull, nullptr);
            note(wait(loom_tag_send_nbx(shared_ep_, data.data(), size, tag_of(t, i), nullptr)) == LOOM_OK);
            note(wait(recv) == LOOM_OK && std::memcmp(in.data(), data.data(), size) == 0);
            // Active message (eager sizes: the handler sees the data in place).
            AmHeader h{t, i, std::min<std::uint64_t>(size, 5000)};
            note(wait(loom_am_send_nbx(shared_ep_, kAmRequest, &h, sizeof(h), data.data(), h.length,
                                       nullptr)) == LOOM_OK);
            // RMA into this thread's slice, read back after a flush; an add to its counter.
            const std::uint64_t slot = reinterpret_cast<std::uint64_t>(base_) + t * kSlot;
            note(wait(loom_put_nbx(shared_ep_, data.data(), size, slot, rkey_, nullptr)) == LOOM_OK);
            note(wait(loom_ep_flush_nbx(shared_ep_, nullptr)) == LOOM_OK);
            std::fill(in.begin(), in.end(), 0);
            note(wait(loom_get_nbx(shared_ep_, in.data(), size, slot, rkey_, nullptr)) == LOOM_OK &&
                 std::memcmp(in.data(), data.data(), size) == 0);
            std::uint64_t one = 1;
            loom_request_param_t ap{};
            ap.op_attr_mask = LOOM_OP_ATTR_FIELD_DATATYPE;
            ap.datatype = loom_dt_make_contig(8);
            const std::uint64_t counter = reinterpret_cast<std::uint64_t>(base_) + kThreads * kSlot + t * 8;
            note(wait(loom_atomic_op_nbx(shared_ep_, LOOM_ATOMIC_OP_ADD, &one, 1, counter, rkey_, &ap)) ==
                 LOOM_OK);
        }
        note(wait(loom_ep_flush_nbx(shared_ep_, nullptr)) == LOOM_OK);
        return failures;
    }

    loom_context_h ctx_ = nullptr;
    loom_worker_h shared_ = nullptr;  ///< the worker the four threads share
    loom_worker_h peer_ = nullptr;    ///< served by the main thread
    loom_ep_h shared_ep_ = nullptr, peer_ep_ = nullptr;
    loom_mem_h memh_ = nullptr;
    loom_rkey_h rkey_ = nullptr;
    char* base_ = nullptr;
    AmLog am_;
};

TEST_P(UcpThreadsTest, FourThreadsSendReceiveAndAccessMemoryOnOneWorker) {
    std::atomic<int> failures{0}, finished{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            failures += run_thread(t);
            ++finished;
        });
    }
    // The peer: echoes every tagged message with its tag, answers every active message,
    // and keeps the shared worker moving too once its threads are done (their last sends
    // may wait in a transport for progress).
    std::vector<char> buf(40000);
    int echoed = 0, answered = 0;
    auto deadline = Clock::now() + std::chrono::seconds(120);
    loom_tag_recv_info_t info{};
    loom_request_param_t rp{};
    rp.op_attr_mask = LOOM_OP_ATTR_FIELD_RECV_INFO;
    rp.recv_info.tag_recv = &info;
    const int total = kThreads * kIterations;
    // A send of the peer: progressed by this thread until it completes (bounded); its status.
    auto peer_wait = [&](loom_status_ptr_t s) {
        while (LOOM_PTR_IS_PTR(s) && loom_request_check_status(s) == LOOM_INPROGRESS &&
               Clock::now() < deadline) {
            loom_worker_progress(peer_);
        }
        if (!LOOM_PTR_IS_PTR(s)) return LOOM_PTR_STATUS(s);
        const loom_status_t status = loom_request_check_status(s);
        if (status != LOOM_INPROGRESS) loom_request_free(s);
        return status;
    };
    loom_status_ptr_t recv = nullptr;
    bool posted = false;
    while ((finished.load() < kThreads || echoed < total || answered < total) && Clock::now() < deadline) {
        loom_worker_progress(peer_);
        if (finished.load() == kThreads) loom_worker_progress(shared_);
        if (!posted && echoed < total) {
            recv = loom_tag_recv_nbx(peer_, buf.data(), buf.size(), 0, 0, &rp);
            ASSERT_FALSE(LOOM_PTR_IS_ERR(recv)) << loom_status_string(LOOM_PTR_STATUS(recv));
            posted = true;
        }
        // Only a receive still posted may be tested: the last one was freed when it completed.
        const loom_status_t st = !posted                 ? LOOM_INPROGRESS
                                 : LOOM_PTR_IS_PTR(recv) ? loom_tag_recv_request_test(recv, &info)
                                                         : LOOM_OK;
        if (st != LOOM_INPROGRESS) {
            ASSERT_EQ(LOOM_OK, st);
            if (LOOM_PTR_IS_PTR(recv)) loom_request_free(recv);
            posted = false;
            ASSERT_EQ(LOOM_OK, peer_wait(loom_tag_send_nbx(peer_ep_, buf.data(), info.length, info.sender_tag,
                                                           nullptr)));
            ++echoed;
        }
        std::deque<AmHeader> answers;
        {
            std::lock_guard guard(am_.lock);
            answers.swap(am_.to_answer);
        }
        for (const AmHeader& h : answers) {
            auto data = pattern(h.length, h.thread, h.index);
            ASSERT_EQ(LOOM_OK, peer_wait(loom_am_send_nbx(peer_ep_, kAmReply, &h, sizeof(h), data.data(),
                                                          h.length, nullptr)));
            ++answered;
        }
    }
    for (auto& th : threads) th.join();
    // The last replies may still be on their way to the shared worker.
    auto all_replies = [&] {
        int n = 0;
        for (auto& r : am_.replies) n += r.load();
        return n;
    };
    while (all_replies() < kThreads * kIterations && Clock::now() < deadline) {
        loom_worker_progress(peer_);
        loom_worker_progress(shared_);
    }
    EXPECT_EQ(0, failures.load());
    EXPECT_EQ(kThreads * kIterations, echoed);
    EXPECT_EQ(kThreads * kIterations, answered);
    EXPECT_EQ(0, am_.bad.load());
    for (int t = 0; t < kThreads; ++t) {
        EXPECT_EQ(kIterations, am_.replies[t].load()) << "thread " << t;
        std::uint64_t count;
        std::memcpy(&count, base_ + kThreads * kSlot + t * 8, 8);
        EXPECT_EQ(std::uint64_t(kIterations), count) << "thread " << t;
    }
}

INSTANTIATE_TEST_SUITE_P(Tls, UcpThreadsTest, testing::Values("shm", "tcp"),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
