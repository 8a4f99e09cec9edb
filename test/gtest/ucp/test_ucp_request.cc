/**
 * The request contract an MPI library builds on (the one UCX offers, which Open MPI's pml
 * and MPICH rely on): the caller's part of a request is set up once per request memory
 * and keeps its state across uses; after loom_request_free no callback runs for the
 * request; under LOOM_OP_ATTR_FLAG_NO_IMM_CMPL a callback runs only from progress; a
 * caller-provided request is not written once its completion is reported. Also the
 * worker query (thread mode, network-only address) and the memory-event entry points.
 */
#include "common/test_helpers.h"
#include "loom/ucp.h"
#include "ucp_pair.h"
#include "ucs/memory/memhooks.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

using loom::test::TlSet;

class UcpRequestTest : public loom::test::UcpPairTest {
protected:
    UcpRequestTest() : UcpPairTest(LOOM_FEATURE_TAG) {}

    /** Counts callback runs (user_data of the operations below). */
    struct Calls {
        int send = 0;
        int recv = 0;
        loom_status_t status = LOOM_INPROGRESS;
        size_t length = 0;
    };

    static loom_request_param_t send_param(Calls* calls, uint32_t extra = 0) {
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_CALLBACK | LOOM_OP_ATTR_FIELD_USER_DATA | extra;
        p.user_data = calls;
        p.cb.send = [](void*, loom_status_t status, void* ud) {
            auto* c = static_cast<Calls*>(ud);
            ++c->send;
            c->status = status;
        };
        return p;
    }

    static loom_request_param_t recv_param(Calls* calls, uint32_t extra = 0) {
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_CALLBACK | LOOM_OP_ATTR_FIELD_USER_DATA | extra;
        p.user_data = calls;
        p.cb.recv = [](void*, loom_status_t status, const loom_tag_recv_info_t* info, void* ud) {
            auto* c = static_cast<Calls*>(ud);
            ++c->recv;
            c->status = status;
            c->length = info->length;
        };
        return p;
    }

    /** Sends @p n bytes with @p tag and waits until the receiver has them unexpected. */
    void send_unexpected(std::vector<char>& data, loom_tag_t tag) {
        ASSERT_EQ(LOOM_OK, wait(loom_tag_send_nbx(ep_, data.data(), data.size(), tag, nullptr)));
        loom_tag_recv_info_t info{};
        progress_until([&] { return loom_tag_probe_nb(receiver_, tag, ~0ull, 0, &info) != nullptr; },
                       "the message to arrive");
    }
};

// --- request memory ---------------------------------------------------------------------

/** What the init/cleanup hooks of the tests below saw. */
struct Hooks {
    std::set<void*> initialized;
    std::multiset<void*> cleaned;
    int init_calls = 0;
};
Hooks* g_hooks = nullptr;  // for the plain (argument-less) callbacks

/** The caller's part of a request in these tests. */
struct UserReq {
    std::uint64_t magic;
    std::uint64_t uses;  ///< state the caller keeps across uses of the memory
};
constexpr std::uint64_t kMagic = 0x10011001feedull;

TEST_P(UcpRequestTest, RequestInitRunsOncePerRequestMemoryAndStateSurvivesReuse) {
    teardown();
    setenv("LOOM_TLS", GetParam().tls, 1);
    Hooks hooks;
    g_hooks = &hooks;
    {
        loom_params_t params{};
        params.field_mask = LOOM_PARAM_FIELD_FEATURES | LOOM_PARAM_FIELD_REQUEST_SIZE | LOOM_PARAM_FIELD_REQUEST_INIT |
                            LOOM_PARAM_FIELD_REQUEST_CLEANUP;
        params.features = LOOM_FEATURE_TAG;
        params.request_size = sizeof(UserReq);
        params.request_init = [](void* r) {
            ++g_hooks->init_calls;
            g_hooks->initialized.insert(r);
            *static_cast<UserReq*>(r) = UserReq{kMagic, 0};
        };
        params.request_cleanup = [](void* r) { g_hooks->cleaned.insert(r); };
        ASSERT_EQ(LOOM_OK, loom_init(&params, &ctx_));
        ASSERT_EQ(LOOM_OK, loom_worker_create(ctx_, nullptr, &sender_));
        receiver_ = sender_;
        if (!GetParam().self) {
            ASSERT_EQ(LOOM_OK, loom_worker_create(ctx_, nullptr, &receiver_));
        }
        ep_ = connect(sender_, receiver_);
        ASSERT_NE(nullptr, ep_);
    }
    // 1000 receives posted before their messages: each needs a request from the pool.
    constexpr int kOps = 1000;
    std::set<void*> handles;
    std::map<void*, std::uint64_t> uses;  ///< each request memory's count when last handed out
    for (int i = 0; i < kOps; ++i) {
        std::uint64_t in = 0, out = 0xabc0000 + i;
        void* r = loom_tag_recv_nbx(receiver_, &in, sizeof(in), 5, ~0ull, nullptr);
        ASSERT_TRUE(LOOM_PTR_IS_PTR(r));
        auto* u = static_cast<UserReq*>(r);
        ASSERT_EQ(kMagic, u->magic) << "request_init did not run on this memory, or its state was lost";
        ++u->uses;
        handles.insert(r);
        uses[r] = u->uses;  // read while handed out: the pool poisons free requests (AddressSanitizer)
        ASSERT_EQ(LOOM_OK, wait(loom_tag_send_nbx(ep_, &out, sizeof(out), 5, nullptr)));
        ASSERT_EQ(LOOM_OK, wait(r));
        ASSERT_EQ(out, in);
    }
    EXPECT_LT(hooks.init_calls, kOps) << "request_init runs per memory, not per operation";
    EXPECT_EQ(static_cast<std::size_t>(hooks.init_calls), hooks.initialized.size());
    for (void* h : handles) EXPECT_EQ(1u, hooks.initialized.count(h));
    std::uint64_t total_uses = 0;
    for (void* h : handles) total_uses += uses[h];
    EXPECT_EQ(static_cast<std::uint64_t>(kOps), total_uses) << "the caller's state must survive reuse";
    EXPECT_TRUE(hooks.cleaned.empty()) << "request_cleanup runs when the memory goes, not per operation";
    teardown();
    EXPECT_EQ(hooks.initialized.size(), hooks.cleaned.size());
    for (void* h : hooks.initialized) EXPECT_EQ(1u, hooks.cleaned.count(h));
    g_hooks = nullptr;
    init({});
}

TEST_P(UcpRequestTest, RequestHooksGetTheirArgument) {
    Hooks hooks;
    loom_params_t params{};
    params.field_mask = LOOM_PARAM_FIELD_FEATURES | LOOM_PARAM_FIELD_REQUEST_SIZE | LOOM_PARAM_FIELD_REQUEST_HOOKS;
    params.features = LOOM_FEATURE_TAG;
    params.request_size = sizeof(UserReq);
    params.request_hooks.init = [](void* r, void* arg) {
        static_cast<Hooks*>(arg)->initialized.insert(r);
        *static_cast<UserReq*>(r) = UserReq{kMagic, 0};
    };
    params.request_hooks.cleanup = [](void* r, void* arg) { static_cast<Hooks*>(arg)->cleaned.insert(r); };
    params.request_hooks.arg = &hooks;
    loom_context_h ctx = nullptr;
    ASSERT_EQ(LOOM_OK, loom_init(&params, &ctx));
    loom_worker_h w = nullptr;
    ASSERT_EQ(LOOM_OK, loom_worker_create(ctx, nullptr, &w));
    std::uint64_t in = 0;
    void* r = loom_tag_recv_nbx(w, &in, sizeof(in), 9, ~0ull, nullptr);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(r));
    EXPECT_EQ(kMagic, static_cast<UserReq*>(r)->magic);
    EXPECT_EQ(1u, hooks.initialized.count(r));
    loom_request_cancel(w, r);
    EXPECT_EQ(LOOM_ERR_CANCELED, loom_request_check_status(r));
    loom_request_free(r);
    loom_worker_destroy(w);
    loom_cleanup(ctx);
    EXPECT_FALSE(hooks.initialized.empty());
    EXPECT_EQ(hooks.initialized.size(), hooks.cleaned.size());

    // Both forms at once: refused, with a log line.
    params.field_mask |= LOOM_PARAM_FIELD_REQUEST_INIT;
    params.request_init = [](void*) {};
    loom::test::LogCapture log;
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_init(&params, &ctx));
    EXPECT_TRUE(log.count("request_hooks replace request_init") > 0) << log.text();
}

// --- no callback after free ---------------------------------------------------------------

TEST_P(UcpRequestTest, FreedReceiveNeverCallsBackButStillReceives) {
    Calls calls;
    std::vector<char> in(100, 0), out(100, 'x');
    auto rp = recv_param(&calls);
    void* r = loom_tag_recv_nbx(receiver_, in.data(), in.size(), 21, ~0ull, &rp);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(r));
    loom_request_free(r);
    ASSERT_EQ(LOOM_OK, wait(loom_tag_send_nbx(ep_, out.data(), out.size(), 21, nullptr)));
    progress_until([&] { return in == out; }, "the data of the freed receive");
    for (int i = 0; i < 100; ++i) progress();
    EXPECT_EQ(0, calls.recv) << "a callback ran after loom_request_free";
}

TEST_P(UcpRequestTest, FreedRendezvousSendNeverCallsBackButDelivers) {
    const std::size_t size = 4u << 20;  // above every transport's rendezvous threshold here
    std::vector<char> in(size, 0), out(size);
    for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<char>(i * 7);
    Calls calls;
    auto sp = send_param(&calls);
    void* s = loom_tag_send_nbx(ep_, out.data(), size, 22, &sp);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(s)) << "a rendezvous send needs a request";
    loom_request_free(s);
    loom_tag_recv_info_t info{};
    EXPECT_EQ(LOOM_OK, wait(loom_tag_recv_nbx(receiver_, in.data(), size, 22, ~0ull, nullptr)));
    EXPECT_TRUE(in == out);
    for (int i = 0; i < 1000; ++i) progress();
    EXPECT_EQ(0, calls.send) << "a callback ran after loom_request_free";
    (void)info;
}

// --- NO_IMM_CMPL --------------------------------------------------------------------------

TEST_P(UcpRequestTest, NoImmCmplReceiveCallsBackFromProgressOnly) {
    std::vector<char> out(64, 'm'), in(64, 0);
    send_unexpected(out, 31);
    Calls calls;
    auto rp = recv_param(&calls, LOOM_OP_ATTR_FLAG_NO_IMM_CMPL);
    void* r = loom_tag_recv_nbx(receiver_, in.data(), in.size(), 31, ~0ull, &rp);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(r)) << "NO_IMM_CMPL always returns a request";
    EXPECT_EQ(0, calls.recv) << "the callback ran inside the call";
    EXPECT_TRUE(in == out) << "the data is there already";
    loom_worker_progress(receiver_);
    EXPECT_EQ(1, calls.recv);
    EXPECT_EQ(LOOM_OK, calls.status);
    EXPECT_EQ(out.size(), calls.length);
    EXPECT_EQ(LOOM_OK, loom_request_check_status(r));
    loom_request_free(r);
    for (int i = 0; i < 10; ++i) progress();
    EXPECT_EQ(1, calls.recv);
}

TEST_P(UcpRequestTest, NoImmCmplSendCallsBackFromProgressOnly) {
    std::uint64_t v = 42, got = 0;
    void* r = loom_tag_recv_nbx(receiver_, &got, sizeof(got), 32, ~0ull, nullptr);
    Calls calls;
    auto sp = send_param(&calls, LOOM_OP_ATTR_FLAG_NO_IMM_CMPL);
    void* s = loom_tag_send_nbx(ep_, &v, sizeof(v), 32, &sp);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(s));
    EXPECT_EQ(0, calls.send) << "the callback ran inside the call";
    EXPECT_EQ(LOOM_OK, wait(r));
    progress_until([&] { return calls.send == 1; }, "the send's callback");
    EXPECT_EQ(LOOM_OK, calls.status);
    EXPECT_EQ(42u, got);
    loom_request_free(s);
}

TEST_P(UcpRequestTest, NoImmCmplRequestFreedBeforeProgressNeverCallsBack) {
    std::vector<char> out(16, 'q'), in(16, 0);
    send_unexpected(out, 33);
    Calls calls;
    auto rp = recv_param(&calls, LOOM_OP_ATTR_FLAG_NO_IMM_CMPL);
    void* r = loom_tag_recv_nbx(receiver_, in.data(), in.size(), 33, ~0ull, &rp);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(r));
    loom_request_cancel(receiver_, r);  // already done: nothing to cancel
    loom_request_free(r);
    for (int i = 0; i < 10; ++i) progress();
    EXPECT_EQ(0, calls.recv);
    EXPECT_TRUE(in == out);
}

TEST_P(UcpRequestTest, NoImmCmplCompletionIsReportedWhenTheWorkerGoesFirst) {
    std::vector<char> out(16, 'z'), in(16, 0);
    send_unexpected(out, 34);
    Calls calls;
    auto rp = recv_param(&calls, LOOM_OP_ATTR_FLAG_NO_IMM_CMPL);
    void* r = loom_tag_recv_nbx(receiver_, in.data(), in.size(), 34, ~0ull, &rp);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(r));
    EXPECT_EQ(0, calls.recv);
    teardown();  // no progress in between: the worker reports it on its way out
    EXPECT_EQ(1, calls.recv);
    EXPECT_EQ(LOOM_OK, calls.status);
    init({});
}

TEST_P(UcpRequestTest, RequestDataIsInTheRequestBeforeItsCallbackRuns) {
    // From the pool (request_size 0 here: the pool keeps a word anyway) and from the caller.
    loom_context_attr_t attr{};
    attr.field_mask = LOOM_ATTR_FIELD_REQUEST_SIZE;
    ASSERT_EQ(LOOM_OK, loom_context_query(ctx_, &attr));
    std::vector<char> mem(attr.request_size + 16);
    for (bool caller : {false, true}) {
        struct Seen {
            int calls = 0;
            void* word = nullptr;
        } seen;
        std::vector<char> out(32, 'd'), in(32, 0);
        send_unexpected(out, 35);
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_CALLBACK | LOOM_OP_ATTR_FIELD_USER_DATA |
                         LOOM_OP_ATTR_FIELD_REQUEST_DATA | LOOM_OP_ATTR_FLAG_NO_IMM_CMPL;
        if (caller) {
            p.op_attr_mask |= LOOM_OP_ATTR_FIELD_REQUEST;
            p.request = mem.data() + attr.request_size;
        }
        p.user_data = &seen;
        p.request_data = &seen.word;  // any pointer: the callback finds it in the request
        p.cb.recv = [](void* request, loom_status_t, const loom_tag_recv_info_t*, void* ud) {
            auto* s = static_cast<Seen*>(ud);
            ++s->calls;
            std::memcpy(&s->word, request, sizeof(void*));
        };
        void* r = loom_tag_recv_nbx(receiver_, in.data(), in.size(), 35, ~0ull, &p);
        ASSERT_TRUE(LOOM_PTR_IS_PTR(r));
        progress_until([&] { return seen.calls == 1; }, "the callback");
        EXPECT_EQ(static_cast<void*>(&seen.word), seen.word) << (caller ? "caller's request" : "pool request");
        loom_request_free(r);
    }
}

// --- caller-provided requests -------------------------------------------------------------

TEST_P(UcpRequestTest, CallerRequestIsNotWrittenAfterItsCompletionIsReported) {
    loom_context_attr_t attr{};
    attr.field_mask = LOOM_ATTR_FIELD_REQUEST_SIZE;
    ASSERT_EQ(LOOM_OK, loom_context_query(ctx_, &attr));
    for (std::size_t size : {std::size_t{8}, std::size_t{100000}, std::size_t{2} << 20}) {
        // A request at the end of a buffer, as Open MPI's pml places it (alloca + request_size).
        std::vector<unsigned char> mem(attr.request_size + 256);
        void* req = mem.data() + attr.request_size;
        std::vector<char> out(size, 'c'), in(size, 0);
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_REQUEST;
        p.request = req;
        void* r = loom_tag_recv_nbx(receiver_, in.data(), size, 41, ~0ull, &p);
        ASSERT_EQ(req, r);
        void* s = loom_tag_send_nbx(ep_, out.data(), size, 41, nullptr);
        ASSERT_FALSE(LOOM_PTR_IS_ERR(s));
        progress_until([&] { return loom_request_check_status(r) != LOOM_INPROGRESS; }, "the receive");
        EXPECT_EQ(LOOM_OK, loom_request_check_status(r));
        // The caller may now reuse the memory (its stack frame is gone): Loom must not write it.
        std::memset(mem.data(), 0xa5, mem.size());
        EXPECT_EQ(LOOM_OK, wait(s));
        // More traffic through the same worker, so anything still pointing at the memory is used.
        for (int i = 0; i < 20; ++i) {
            std::uint64_t x = i, y = 0;
            void* rr = loom_tag_recv_nbx(receiver_, &y, sizeof(y), 42, ~0ull, nullptr);
            EXPECT_EQ(LOOM_OK, wait(loom_tag_send_nbx(ep_, &x, sizeof(x), 42, nullptr)));
            EXPECT_EQ(LOOM_OK, wait(rr));
        }
        for (unsigned char b : mem) ASSERT_EQ(0xa5, b) << "Loom wrote into a request it had reported complete";
        EXPECT_TRUE(in == out);
    }
}

TEST_P(UcpRequestTest, CallerRequestReportsAnOperationDoneInTheCall) {
    // Open MPI's blocking receive ignores what ucp_tag_recv_nbx returns and polls the
    // request it passed: an operation done inside the call must complete that request too.
    loom_context_attr_t attr{};
    attr.field_mask = LOOM_ATTR_FIELD_REQUEST_SIZE;
    ASSERT_EQ(LOOM_OK, loom_context_query(ctx_, &attr));
    std::vector<unsigned char> mem(attr.request_size + 64);
    void* req = mem.data() + attr.request_size;
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_REQUEST;
    p.request = req;
    for (int round = 0; round < 3; ++round) {  // the same memory again, as a stack frame is reused
        const loom_tag_t tag = 60 + round;
        std::vector<char> out(10 + round, static_cast<char>('a' + round)), in(64, 0);
        send_unexpected(out, tag);
        void* r = loom_tag_recv_nbx(receiver_, in.data(), in.size(), tag, ~0ull, &p);
        ASSERT_FALSE(LOOM_PTR_IS_PTR(r)) << "the message was there: done in the call";
        loom_tag_recv_info_t info{};
        EXPECT_EQ(LOOM_OK, loom_tag_recv_request_test(req, &info));
        EXPECT_EQ(out.size(), info.length) << "round " << round;
        EXPECT_EQ(tag, info.sender_tag);
        EXPECT_EQ(0, std::memcmp(in.data(), out.data(), out.size()));
    }
    // Truncated in the call: the request says so, with the full length.
    std::vector<char> big(100, 'T'), small(10, 0);
    send_unexpected(big, 70);
    void* r = loom_tag_recv_nbx(receiver_, small.data(), small.size(), 70, ~0ull, &p);
    ASSERT_FALSE(LOOM_PTR_IS_PTR(r));
    loom_tag_recv_info_t info{};
    EXPECT_EQ(LOOM_ERR_MESSAGE_TRUNCATED, loom_tag_recv_request_test(req, &info));
    EXPECT_EQ(100u, info.length);
    // A send done in the call (eager short): the request is complete too.
    std::uint64_t v = 1, got = 0;
    void* rr = loom_tag_recv_nbx(receiver_, &got, sizeof(got), 71, ~0ull, nullptr);
    void* s = loom_tag_send_nbx(ep_, &v, sizeof(v), 71, &p);
    if (LOOM_PTR_IS_PTR(s)) {
        progress_until([&] { return loom_request_check_status(req) != LOOM_INPROGRESS; }, "the send");
    }
    EXPECT_EQ(LOOM_OK, loom_request_check_status(req));
    EXPECT_EQ(LOOM_OK, wait(rr));
}

// --- worker query --------------------------------------------------------------------------

TEST_P(UcpRequestTest, WorkerQueryReportsTheThreadModeAskedFor) {
    for (loom_thread_mode_t mode : {LOOM_THREAD_MODE_SINGLE, LOOM_THREAD_MODE_SERIALIZED, LOOM_THREAD_MODE_MULTI}) {
        loom_worker_params_t wp{};
        wp.field_mask = LOOM_WORKER_PARAM_FIELD_THREAD_MODE;
        wp.thread_mode = mode;
        loom_worker_h w = nullptr;
        ASSERT_EQ(LOOM_OK, loom_worker_create(ctx_, &wp, &w));
        loom_worker_attr_t a{};
        a.field_mask = LOOM_WORKER_ATTR_FIELD_THREAD_MODE | LOOM_WORKER_ATTR_FIELD_MAX_AM_HEADER;
        EXPECT_EQ(LOOM_OK, loom_worker_query(w, &a));
        EXPECT_EQ(mode, a.thread_mode);
        loom_worker_destroy(w);
    }
    loom_worker_attr_t bad{};
    bad.field_mask = LOOM_WORKER_ATTR_FIELD_ADDRESS | LOOM_WORKER_ATTR_FIELD_ADDRESS_FLAGS;
    bad.address_flags = 0x80;
    loom::test::LogCapture log;
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_worker_query(sender_, &bad));
    EXPECT_TRUE(log.count("unknown address flags") > 0) << log.text();
}

TEST_P(UcpRequestTest, NetOnlyAddressCarriesOnlyNetworkTransports) {
    loom_worker_attr_t full{}, net{};
    full.field_mask = LOOM_WORKER_ATTR_FIELD_ADDRESS;
    net.field_mask = LOOM_WORKER_ATTR_FIELD_ADDRESS | LOOM_WORKER_ATTR_FIELD_ADDRESS_FLAGS;
    net.address_flags = LOOM_WORKER_ADDRESS_FLAG_NET_ONLY;
    ASSERT_EQ(LOOM_OK, loom_worker_query(receiver_, &full));
    ASSERT_EQ(LOOM_OK, loom_worker_query(receiver_, &net));
    const std::string tls = GetParam().tls;
    loom_ep_params_t ep_params{};
    ep_params.field_mask = LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address = net.address;
    loom_ep_h ep = nullptr;
    if (tls.find("tcp") == std::string::npos) {
        // No network transport: the address names none, and nothing reaches the worker through it.
        EXPECT_LT(net.address_length, full.address_length);
        loom::test::LogCapture log;
        EXPECT_EQ(LOOM_ERR_UNREACHABLE, loom_ep_create(sender_, &ep_params, &ep));
    } else {
        EXPECT_LE(net.address_length, full.address_length);
        ASSERT_EQ(LOOM_OK, loom_ep_create(sender_, &ep_params, &ep));
        std::uint64_t v = 7, got = 0;
        void* r = loom_tag_recv_nbx(receiver_, &got, sizeof(got), 51, ~0ull, nullptr);
        EXPECT_EQ(LOOM_OK, wait(loom_tag_send_nbx(ep, &v, sizeof(v), 51, nullptr)));
        EXPECT_EQ(LOOM_OK, wait(r));
        EXPECT_EQ(7u, got);
        // A rendezvous names the receiver's iface by its index in the receiver's worker, not
        // by its position in the (shorter) network-only address (the receiver read tcp's
        // index as shm's, and logged failed key unpacks before falling back).
        loom::test::LogCapture log;
        std::vector<char> big(1 << 20), in(1 << 20, 0);
        for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 13);
        r = loom_tag_recv_nbx(receiver_, in.data(), in.size(), 52, ~0ull, nullptr);
        EXPECT_EQ(LOOM_OK, wait(loom_tag_send_nbx(ep, big.data(), big.size(), 52, nullptr)));
        EXPECT_EQ(LOOM_OK, wait(r));
        EXPECT_TRUE(in == big);
        EXPECT_EQ(0, log.count("ERROR")) << log.text();
        EXPECT_EQ(0, log.count("WARN")) << log.text();
        force_close(ep);
    }
    loom_worker_release_address(receiver_, full.address);
    loom_worker_release_address(receiver_, net.address);
}

TEST_P(UcpRequestTest, ContextListsItsResources) {
    loom_context_attr_t attr{};
    attr.field_mask = LOOM_ATTR_FIELD_NUM_RESOURCES;
    ASSERT_EQ(LOOM_OK, loom_context_query(ctx_, &attr));
    ASSERT_GT(attr.num_resources, 0u);
    const std::string tls = GetParam().tls;
    for (size_t i = 0; i < attr.num_resources; ++i) {
        loom_resource_t r{};
        ASSERT_EQ(LOOM_OK, loom_context_resource(ctx_, i, &r));
        ASSERT_NE(nullptr, r.transport);
        ASSERT_NE(nullptr, r.device);
        EXPECT_NE(std::string::npos, tls.find(r.transport)) << r.transport << " is not in LOOM_TLS=" << tls;
        const std::string t = r.transport;
        EXPECT_EQ(t == "tcp" ? LOOM_DEVICE_TYPE_NET : t == "shm" ? LOOM_DEVICE_TYPE_SHM : LOOM_DEVICE_TYPE_SELF,
                  r.device_type)
            << t;
    }
    loom_resource_t r{};
    EXPECT_EQ(LOOM_ERR_OUT_OF_RANGE, loom_context_resource(ctx_, attr.num_resources, &r));
}

/**
 * What an _nbx call returns is a request, NULL (done in the call) or an error code; callers
 * that handle them alike must not crash: the status calls answer with the status, free and
 * cancel do nothing. A cancel with another worker than the request's is refused with one
 * line, and progress of a NULL worker returns 0 (both crashed before).
 */
TEST_P(UcpRequestTest, WhatIsNotARequestIsAnsweredWithItsStatus) {
    void* error =
        reinterpret_cast<void*>(static_cast<std::intptr_t>(LOOM_ERR_NO_MEMORY));  // as _nbx returns it
    for (void* r : {static_cast<void*>(nullptr), error}) {
        const loom_status_t expected = r == nullptr ? LOOM_OK : LOOM_ERR_NO_MEMORY;
        EXPECT_EQ(expected, loom_request_check_status(r));
        loom_tag_recv_info_t info{77, 77};
        EXPECT_EQ(expected, loom_tag_recv_request_test(r, &info));
        EXPECT_EQ(77u, info.length) << "the info of no request was written";
        std::size_t length = 77;
        EXPECT_EQ(expected, loom_stream_recv_request_test(r, &length));
        EXPECT_EQ(77u, length);
        loom_request_cancel(sender_, r);
        loom_request_free(r);
    }
    loom::test::LogCapture log("error");
    EXPECT_EQ(0u, loom_worker_progress(nullptr));
    EXPECT_EQ(0u, loom_worker_progress(nullptr));
    EXPECT_LE(log.count("loom_worker_progress: NULL worker"), 1) << "logged once per process";
    // A receive that waits, cancelled with a NULL or another worker: refused; with its own: cancelled.
    char buf[8];
    loom_status_ptr_t r = loom_tag_recv_nbx(receiver_, buf, sizeof(buf), 99, ~0ull, nullptr);
    ASSERT_TRUE(LOOM_PTR_IS_PTR(r));
    loom_request_cancel(nullptr, r);
    if (receiver_ != sender_) loom_request_cancel(sender_, r);
    EXPECT_EQ(receiver_ != sender_ ? 2 : 1, log.count("loom_request_cancel:"));
    EXPECT_EQ(LOOM_INPROGRESS, loom_request_check_status(r));
    loom_request_cancel(receiver_, r);
    EXPECT_EQ(LOOM_ERR_CANCELED, wait(r));
}

INSTANTIATE_TEST_SUITE_P(Tls, UcpRequestTest,
                         testing::Values(TlSet{"self", "self", true}, TlSet{"shm", "shm", false},
                                         TlSet{"tcp", "tcp", false}, TlSet{"shm_tcp", "shm,tcp", false}),
                         [](const testing::TestParamInfo<TlSet>& info) { return std::string(info.param.name); });

// --- memory events --------------------------------------------------------------------------

TEST(UcpMemEvents, NotifyReachesTheRegistrationCachesListeners) {
    loom::ucs::MemEventListener listener;
    ASSERT_EQ(loom::Status::ok, listener.start(loom::ucs::MemEventsMode::user));
    static char region[1 << 16];
    const auto start = reinterpret_cast<std::uintptr_t>(region);
    listener.watch(start, start + sizeof(region));
    loom_mem_event_notify(region + 4096, 8192);
    ASSERT_TRUE(listener.pending());
    loom::ucs::MemEventListener::Range ranges[loom::ucs::MemEventListener::kCapacity];
    const std::size_t n = listener.drain(ranges);
    ASSERT_GE(n, 1u);
    bool covered = false;
    for (std::size_t i = 0; i < n; ++i) {
        covered |= ranges[i].start <= start + 4096 && ranges[i].end >= start + 4096 + 8192;
    }
    EXPECT_TRUE(covered);
    listener.unwatch(start, start + sizeof(region));
    listener.stop();
}

TEST(UcpMemEvents, CheckSaysWhetherLoomSeesUnmapsByItself) {
    // This test binary links libloom-ucs at start-up, so its hooks are in the global scope.
    EXPECT_EQ(loom::ucs::mem_hooks_info().unmap_hooks ? LOOM_OK : LOOM_ERR_UNSUPPORTED, loom_mem_events_check());
    EXPECT_EQ(LOOM_OK, loom_mem_events_check()) << loom::ucs::mem_hooks_info().detail;
}

}  // namespace
