/**
 * Contexts and workers through the UCX API: configuration, ucp_init (UCX's inline calling
 * ucp_init_version), request_size / request_init / request_cleanup, ucp_context_query,
 * ucp_context_print_info as Open MPI's pml parses it, ucp_worker_query (thread mode,
 * address, the network-only address), the worker address calls, wake-up.
 */
#include "ucx_compat_test.h"

#include <poll.h>

#include <cstdio>
#include <map>
#include <set>
#include <thread>

namespace ucx_compat {
namespace {

TEST(UcpConfig, ReadModifyReleaseAndInitWithIt) {
    ucp_config_t* config = nullptr;
    ASSERT_EQ(UCS_OK, ucp_config_read(nullptr, nullptr, &config));
    ASSERT_NE(nullptr, config);
    EXPECT_EQ(UCS_OK, ucp_config_modify(config, "TLS", "shm,self"));
    EXPECT_EQ(UCS_OK, ucp_config_modify(config, "RNDV_THRESH", "8192"));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_config_modify(config, nullptr, "x"));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_config_modify(config, "TLS", nullptr));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_config_modify(nullptr, "TLS", "tcp"));
    ScopedEnv tls("LOOM_TLS", "shm,self");
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    ucp_context_h ctx = nullptr;
    ASSERT_EQ(UCS_OK, ucp_init(&params, config, &ctx));  // UCX's inline: ucp_init_version(1, 13, ...)
    ucp_config_release(config);
    ucp_worker_h w = nullptr;
    ucp_worker_params_t wp{};
    ASSERT_EQ(UCS_OK, ucp_worker_create(ctx, &wp, &w));
    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
    // A prefix and a file name are accepted (the file configures nothing in Loom).
    ASSERT_EQ(UCS_OK, ucp_config_read("OMPI", "/nonexistent/ucx.conf", &config));
    ucp_config_release(config);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_config_read(nullptr, nullptr, nullptr));
    ucp_config_release(nullptr);
}

TEST(UcpInit, VersionsAndFeatures) {
    ScopedEnv tls("LOOM_TLS", "shm,self");
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    ucp_context_h ctx = nullptr;
    // Another major API version: refused, with a log line.
    testing::internal::CaptureStderr();
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, ucp_init_version(2, 0, &params, nullptr, &ctx));
    EXPECT_EQ(1, layer_log_lines(testing::internal::GetCapturedStderr()));
    EXPECT_EQ(nullptr, ctx);
    // An older minor version of the same major: fine.
    ASSERT_EQ(UCS_OK, ucp_init_version(1, 8, &params, nullptr, &ctx));
    ucp_cleanup(ctx);
    ctx = nullptr;
    // Every feature Loom implements, together.
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_AMO32 | UCP_FEATURE_AMO64 |
                      UCP_FEATURE_WAKEUP | UCP_FEATURE_STREAM | UCP_FEATURE_AM;
    ASSERT_EQ(UCS_OK, ucp_init(&params, nullptr, &ctx));
    ucp_cleanup(ctx);
    ctx = nullptr;
    // One it does not: refused with a log line, no context.
    params.features = UCP_FEATURE_TAG | UCS_BIT(20);  // not a feature of UCX 1.13
    testing::internal::CaptureStderr();
    const ucs_status_t s = ucp_init(&params, nullptr, &ctx);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, s);
    EXPECT_EQ(nullptr, ctx);
    EXPECT_EQ(1, layer_log_lines(err)) << err;
    ucp_cleanup(nullptr);
}

TEST(UcpInit, BadTransportListFailsCleanly) {
    ScopedEnv tls("LOOM_TLS", "nosuchtransport");
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    ucp_context_h ctx = nullptr;
    testing::internal::CaptureStderr();
    const ucs_status_t s = ucp_init(&params, nullptr, &ctx);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_TRUE(UCS_STATUS_IS_ERR(s)) << ucs_status_string(s);
    EXPECT_EQ(nullptr, ctx);
    EXPECT_GE(layer_log_lines(err), 1) << err;
}

TEST(UcpContext, QueryReportsRequestSizeThreadModeMemoryTypesName) {
    Context ctx("shm,self");
    ASSERT_EQ(UCS_OK, ctx.status());
    ucp_context_attr_t attr{};
    attr.field_mask = UCP_ATTR_FIELD_REQUEST_SIZE | UCP_ATTR_FIELD_THREAD_MODE | UCP_ATTR_FIELD_MEMORY_TYPES |
                      UCP_ATTR_FIELD_NAME;
    ASSERT_EQ(UCS_OK, ucp_context_query(ctx.get(), &attr));
    EXPECT_GE(attr.request_size, 16u);
    EXPECT_EQ(0u, attr.request_size % 8) << "a request at the end of a buffer of this size stays aligned";
    EXPECT_LT(attr.request_size, 4096u);
    EXPECT_EQ(UCS_THREAD_MODE_SINGLE, attr.thread_mode);
    EXPECT_NE(0u, attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_HOST));
    EXPECT_GT(std::strlen(attr.name), 0u);
    // Fields not asked for are not written.
    ucp_context_attr_t none{};
    none.field_mask = 0;
    none.request_size = 12345;
    EXPECT_EQ(UCS_OK, ucp_context_query(ctx.get(), &none));
    EXPECT_EQ(12345u, none.request_size);
}

// --- ucp_context_print_info as Open MPI parses it ----------------------------------------------

/** The transports and devices the lines name, parsed with Open MPI's format (common_ucx.c). */
std::vector<std::pair<std::string, std::string>> print_info_resources(ucp_context_h ctx, std::string* all) {
    char* text = nullptr;
    size_t size = 0;
    FILE* f = ::open_memstream(&text, &size);
    EXPECT_NE(nullptr, f);
    if (f == nullptr) return {};
    ucp_context_print_info(ctx, f);
    std::fclose(f);
    std::vector<std::pair<std::string, std::string>> out;
    std::string s(text, size);
    std::free(text);
    *all = s;
    size_t pos = 0;
    while (pos < s.size()) {
        size_t end = s.find('\n', pos);
        if (end == std::string::npos) end = s.size();
        const std::string line = s.substr(pos, end - pos + 1);
        pos = end + 1;
        char tl[64] = {0};
        char dev[64] = {0};
        // opal/mca/common/ucx/common_ucx.c, opal_common_ucx_support_level():
        if (std::sscanf(line.c_str(), "# resource %*d : md %*d dev %*d flags -- %[^/ \n\r]/%[^/ \n\r]", tl,
                        dev) == 2) {
            out.emplace_back(tl, dev);
        }
    }
    return out;
}

TEST(UcpContext, PrintInfoLinesParseWithOpenMpisFormat) {
    for (const char* tls : {"shm,self", "shm,tcp", "tcp"}) {
        SCOPED_TRACE(tls);
        Context ctx(tls);
        ASSERT_EQ(UCS_OK, ctx.status());
        std::string all;
        auto res = print_info_resources(ctx.get(), &all);
        ASSERT_FALSE(res.empty()) << "no line parsed in:\n" << all;
        std::set<std::string> transports;
        for (auto& [tl, dev] : res) {
            transports.insert(tl);
            EXPECT_FALSE(dev.empty());
            EXPECT_TRUE(tl == "shm" || tl == "self" || tl == "tcp") << tl << " not in LOOM_TLS=" << tls;
            if (tl == "shm" || tl == "self") {
                EXPECT_EQ("memory", dev) << tl;
            } else {
                EXPECT_NE("memory", dev) << tl;
            }
        }
        const std::string want = tls;
        EXPECT_EQ(want.find("shm") != std::string::npos, transports.count("shm") == 1) << all;
        EXPECT_EQ(want.find("tcp") != std::string::npos, transports.count("tcp") == 1) << all;
        EXPECT_EQ(want.find("self") != std::string::npos, transports.count("self") == 1) << all;
        // Every line starts with '#', as UCX's (Open MPI prints the rest verbatim at high verbosity).
        size_t pos = 0;
        while ((pos = all.find('\n', pos)) != std::string::npos && pos + 1 < all.size()) {
            EXPECT_EQ('#', all[pos + 1]) << all;
            ++pos;
        }
    }
}

TEST(UcpContext, PrintInfoIgnoresNull) {
    ucp_context_print_info(nullptr, stdout);
    Context ctx("shm,self");
    ASSERT_EQ(UCS_OK, ctx.status());
    ucp_context_print_info(ctx.get(), nullptr);
}

// --- request_init / request_cleanup -------------------------------------------------------------

/**
 * request_init runs once per request memory (not per operation), never twice on memory
 * not cleaned up; the caller's state in its part survives reuse; request_cleanup runs
 * once per memory when the worker/context goes.
 */
TEST(UcpRequest, InitOncePerMemoryAndCallerStateSurvivesReuse) {
    const long inits0 = hooks().inits, cleanups0 = hooks().cleanups, reinit0 = hooks().reinit;
    const long unknown0 = hooks().unknown;
    {
        Pair p;
        ASSERT_TRUE(p.open("shm,self"));
        std::map<void*, std::uint64_t> uses;  // what this test last left in each request memory
        char byte = 7;
        char in = 0;
        long warm_inits = 0;
        for (int i = 0; i < 300; ++i) {
            if (i == 20) warm_inits = hooks().inits;  // the pools have what they need by now
            Done sd;
            ucp_request_param_t sp = send_param(&sd, UCP_OP_ATTR_FLAG_NO_IMM_CMPL);
            ucs_status_ptr_t sr = ucp_tag_send_nbx(p.ep[0], &byte, 1, 42, &sp);
            ASSERT_TRUE(UCS_PTR_IS_PTR(sr)) << "NO_IMM_CMPL always returns a request";
            auto* u = static_cast<UserReq*>(sr);
            ASSERT_EQ(UserReq::kMagic, u->magic) << "request_init did not run on " << sr;
            if (auto it = uses.find(sr); it != uses.end()) {
                EXPECT_EQ(it->second, u->uses) << "the caller's part of " << sr << " changed between uses";
            }
            take_request(sr);
            uses[sr] = u->uses;
            // A receive too, so that two requests are in flight at once.
            ucp_request_param_t rp{};
            ucs_status_ptr_t rr = ucp_tag_recv_nbx(p.w[1], &in, 1, 42, ~0ull, &rp);
            ASSERT_FALSE(UCS_PTR_IS_ERR(rr));
            if (rr != nullptr) {
                if (auto it = uses.find(rr); it != uses.end()) {
                    EXPECT_EQ(it->second, static_cast<UserReq*>(rr)->uses);
                }
                take_request(rr);
                uses[rr] = static_cast<UserReq*>(rr)->uses;
            }
            ASSERT_TRUE(p.progress_until([&] { return sd.calls == 1; }));
            EXPECT_EQ(UCS_OK, sd.status);
            ucp_request_free(sr);
            if (rr != nullptr) {
                EXPECT_EQ(UCS_OK, p.wait(rr));
            }
        }
        EXPECT_LE(uses.size(), 16u) << "request memory is reused, not taken afresh per operation";
        EXPECT_EQ(warm_inits, hooks().inits) << "request_init ran per operation, not per memory";
        EXPECT_GE(hooks().inits - inits0, static_cast<long>(uses.size()));
    }
    EXPECT_EQ(reinit0, hooks().reinit) << "request_init ran twice on memory not cleaned up";
    EXPECT_EQ(unknown0, hooks().unknown) << "a request was handed out whose memory request_init never saw";
    EXPECT_EQ(hooks().inits - inits0, hooks().cleanups - cleanups0)
        << "request_cleanup must match request_init";
}

// --- workers ------------------------------------------------------------------------------------

TEST(UcpWorker, ThreadModeReportedAsAsked) {
    Context ctx("shm,self");
    ASSERT_EQ(UCS_OK, ctx.status());
    for (ucs_thread_mode_t mode :
         {UCS_THREAD_MODE_SINGLE, UCS_THREAD_MODE_SERIALIZED, UCS_THREAD_MODE_MULTI}) {
        ucp_worker_params_t wp{};
        wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
        wp.thread_mode = mode;
        ucp_worker_h w = nullptr;
        ASSERT_EQ(UCS_OK, ucp_worker_create(ctx.get(), &wp, &w));
        ucp_worker_attr_t attr{};
        attr.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE;
        ASSERT_EQ(UCS_OK, ucp_worker_query(w, &attr));
        if (mode == UCS_THREAD_MODE_SERIALIZED) {
            EXPECT_TRUE(attr.thread_mode == UCS_THREAD_MODE_SERIALIZED ||
                        attr.thread_mode == UCS_THREAD_MODE_MULTI);
        } else {
            EXPECT_EQ(mode, attr.thread_mode);
        }
        ucp_worker_destroy(w);
    }
    // Without the field: single.
    ucp_worker_params_t wp{};
    ucp_worker_h w = nullptr;
    ASSERT_EQ(UCS_OK, ucp_worker_create(ctx.get(), &wp, &w));
    ucp_worker_attr_t attr{};
    attr.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE | UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER |
                      UCP_WORKER_ATTR_FIELD_NAME | UCP_WORKER_ATTR_FIELD_MAX_INFO_STRING;
    ASSERT_EQ(UCS_OK, ucp_worker_query(w, &attr));
    EXPECT_EQ(UCS_THREAD_MODE_SINGLE, attr.thread_mode);
    EXPECT_GT(attr.max_am_header, 0u);
    EXPECT_GT(std::strlen(attr.name), 0u);
    EXPECT_GT(attr.max_debug_string, 0u);
    ucp_worker_destroy(w);
    // An unknown thread mode is refused.
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = static_cast<ucs_thread_mode_t>(77);
    w = nullptr;
    testing::internal::CaptureStderr();
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_worker_create(ctx.get(), &wp, &w));
    EXPECT_EQ(1, layer_log_lines(testing::internal::GetCapturedStderr()));
    EXPECT_EQ(nullptr, w);
}

TEST(UcpWorker, AddressByGetAddressAndByQueryAgree) {
    Context ctx("shm,self");
    ASSERT_EQ(UCS_OK, ctx.status());
    ucp_worker_h w = nullptr;
    ucp_worker_params_t wp{};
    ASSERT_EQ(UCS_OK, ucp_worker_create(ctx.get(), &wp, &w));
    ucp_address_t* a = nullptr;
    size_t n = 0;
    ASSERT_EQ(UCS_OK, ucp_worker_get_address(w, &a, &n));
    ASSERT_NE(nullptr, a);
    ASSERT_GT(n, 0u);
    auto q = worker_address(w);
    ASSERT_EQ(n, q.size());
    EXPECT_EQ(0, std::memcmp(a, q.data(), n));
    ucp_worker_release_address(w, a);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_worker_get_address(w, nullptr, &n));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, ucp_worker_get_address(w, &a, nullptr));
    // The worker's info printers write something and never fail.
    char* text = nullptr;
    size_t size = 0;
    FILE* f = ::open_memstream(&text, &size);
    ASSERT_NE(nullptr, f);
    ucp_worker_print_info(w, f);
    ucp_worker_print_info(nullptr, f);
    ucp_worker_print_info(w, nullptr);
    std::fclose(f);
    EXPECT_GT(size, 0u);
    std::free(text);
    ucp_worker_destroy(w);
    ucp_worker_destroy(nullptr);
}

/** A message from w[0] to w[1] over @p ep, and back over an endpoint from w[1], as a check that a path works.
 */
void ping(ucp_ep_h ep, ucp_worker_h from, ucp_worker_h to, std::size_t size) {
    auto data = pattern(size, 3);
    std::vector<char> out(size);
    ucp_request_param_t rp{};
    ucs_status_ptr_t rr = ucp_tag_recv_nbx(to, out.data(), out.size(), 77, ~0ull, &rp);
    ucp_request_param_t sp{};
    ucs_status_ptr_t sr = ucp_tag_send_nbx(ep, data.data(), data.size(), 77, &sp);
    EXPECT_EQ(UCS_OK, wait(sr, {from, to}));
    ucp_tag_recv_info_t info{};
    EXPECT_EQ(UCS_OK, wait(rr, {from, to}, &info));
    EXPECT_EQ(data, out);
}

/** With shm and tcp, the network-only address leaves shm out, and an endpoint made from it works over tcp. */
TEST(UcpWorker, NetOnlyAddressReachesOverTcp) {
    Pair p;
    ASSERT_TRUE(p.open("shm,tcp"));
    auto full = worker_address(p.w[1]);
    auto net = worker_address(p.w[1], true);
    ASSERT_FALSE(net.empty());
    EXPECT_LT(net.size(), full.size()) << "the network-only address must not carry shm";
    ucp_ep_h ep = nullptr;
    ASSERT_EQ(UCS_OK, connect(p.w[0], net.data(), &ep));
    for (std::size_t size : {8ul, 100000ul, 1ul << 20}) ping(ep, p.w[0], p.w[1], size);
    close_force(ep, {p.w[0], p.w[1]});
}

/**
 * A rendezvous over an endpoint made from the network-only address goes without errors.
 * (Open MPI's pml connects to the processes of other nodes this way.) The RTS names the
 * sender's lane by its index in the address the sender connected with; the receiver must
 * not read it as an index of its own full iface list (which starts with shm here).
 */
TEST(UcpWorker, NetOnlyRendezvousLogsNoError) {
    Pair p;
    ASSERT_TRUE(p.open("shm,tcp"));
    auto net = worker_address(p.w[1], true);
    ucp_ep_h ep = nullptr;
    ASSERT_EQ(UCS_OK, connect(p.w[0], net.data(), &ep));
    testing::internal::CaptureStderr();
    ping(ep, p.w[0], p.w[1], 1 << 20);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(std::string::npos, err.find("ERROR")) << err;
    close_force(ep, {p.w[0], p.w[1]});
}

/** With shm and self only, the network-only address reaches nothing. */
TEST(UcpWorker, NetOnlyAddressOfShmSelfIsUnreachable) {
    Pair p;
    ASSERT_TRUE(p.open("shm,self"));
    auto net = worker_address(p.w[1], true);
    ASSERT_FALSE(net.empty());
    ucp_ep_h ep = nullptr;
    testing::internal::CaptureStderr();
    const ucs_status_t s = connect(p.w[0], net.data(), &ep);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(UCS_ERR_UNREACHABLE, s) << ucs_status_string(s);
    EXPECT_GE(layer_log_lines(err), 1) << err;
    if (s == UCS_OK) {
        close_force(ep, {p.w[0], p.w[1]});
    }
}

/** Open MPI and MPICH send a message to themselves through an endpoint to their own worker. */
TEST(UcpWorker, EndpointToItsOwnWorker) {
    for (const char* tls : {"shm,self", "tcp"}) {
        SCOPED_TRACE(tls);
        Pair p;
        ASSERT_TRUE(p.open(tls));
        ucp_ep_h self = nullptr;
        auto mine = worker_address(p.w[0]);
        ASSERT_EQ(UCS_OK, connect(p.w[0], mine.data(), &self));
        for (std::size_t size : {1ul, 4096ul, 1ul << 20}) ping(self, p.w[0], p.w[0], size);
        close_force(self, {p.w[0]});
    }
}

/** Several threads on a worker of thread mode multi: posts, progress and completions in any thread. */
TEST(UcpWorker, ThreadModeMultiTakesCallsFromThreads) {
    Context ctx("shm,self");
    ASSERT_EQ(UCS_OK, ctx.status());
    ucp_worker_h w[2] = {nullptr, nullptr};
    for (auto& worker : w) {
        ucp_worker_params_t wp{};
        wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
        wp.thread_mode = UCS_THREAD_MODE_MULTI;
        ASSERT_EQ(UCS_OK, ucp_worker_create(ctx.get(), &wp, &worker));
    }
    ucp_ep_h ep = nullptr;
    auto a1 = worker_address(w[1]);
    ASSERT_EQ(UCS_OK, connect(w[0], a1.data(), &ep));
    constexpr int kPerThread = 300;
    std::atomic<int> received{0};
    std::atomic<bool> failed{false};
    auto receiver = [&](int t) {
        for (int i = 0; i < kPerThread; ++i) {
            std::uint64_t v = 0;
            ucp_request_param_t rp{};
            ucs_status_ptr_t r =
                ucp_tag_recv_nbx(w[1], &v, sizeof(v), (std::uint64_t{1} << 32) | t, ~0ull, &rp);
            if (UCS_PTR_IS_ERR(r)) {
                failed = true;
                return;
            }
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kDeadlineSeconds);
            while (r != nullptr && ucp_request_check_status(r) == UCS_INPROGRESS) {
                if (std::chrono::steady_clock::now() > deadline) {
                    failed = true;
                    return;
                }
                ucp_worker_progress(w[1]);
            }
            if (r != nullptr) {
                if (ucp_request_check_status(r) != UCS_OK) failed = true;
                ucp_request_free(r);
            }
            if (v != static_cast<std::uint64_t>(t * 100000 + i)) failed = true;
            ++received;
        }
    };
    auto sender = [&](int t) {
        for (int i = 0; i < kPerThread; ++i) {
            std::uint64_t v = static_cast<std::uint64_t>(t * 100000 + i);
            ucp_request_param_t sp{};
            ucs_status_ptr_t r = ucp_tag_send_nbx(ep, &v, sizeof(v), (std::uint64_t{1} << 32) | t, &sp);
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kDeadlineSeconds);
            while (UCS_PTR_IS_PTR(r) && ucp_request_check_status(r) == UCS_INPROGRESS) {
                if (std::chrono::steady_clock::now() > deadline) {
                    failed = true;
                    return;
                }
                ucp_worker_progress(w[0]);
            }
            if (UCS_PTR_IS_ERR(r)) failed = true;
            if (UCS_PTR_IS_PTR(r)) ucp_request_free(r);
        }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
        threads.emplace_back(receiver, t);
        threads.emplace_back(sender, t);
    }
    for (auto& t : threads) t.join();
    EXPECT_FALSE(failed);
    EXPECT_EQ(2 * kPerThread, received.load());
    close_force(ep, {w[0], w[1]});
    for (auto& worker : w) ucp_worker_destroy(worker);
}

// --- wake-up -------------------------------------------------------------------------------------

TEST(UcpWakeup, EventFdArmSignalWait) {
    Pair p;
    ASSERT_TRUE(p.open("shm,self", UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP));
    int fd = -1;
    ASSERT_EQ(UCS_OK, ucp_worker_get_efd(p.w[1], &fd));
    ASSERT_GE(fd, 0);
    // A signal makes the next arm busy, and a wait return at once.
    ASSERT_EQ(UCS_OK, ucp_worker_signal(p.w[1]));
    EXPECT_EQ(UCS_OK, ucp_worker_wait(p.w[1]));
    // Arm until nothing is pending (wire-up may be).
    ucs_status_t armed = UCS_ERR_BUSY;
    ASSERT_TRUE(
        progress_until({p.w[0], p.w[1]}, [&] { return (armed = ucp_worker_arm(p.w[1])) != UCS_ERR_BUSY; }));
    ASSERT_EQ(UCS_OK, armed);
    // A message to the armed worker makes its fd readable.
    std::uint64_t v = 5, out = 0;
    ucp_request_param_t sp{};
    ucs_status_ptr_t sr = ucp_tag_send_nbx(p.ep[0], &v, sizeof(v), 1, &sp);
    pollfd pfd{fd, POLLIN, 0};
    ASSERT_TRUE(progress_until({p.w[0]}, [&] { return ::poll(&pfd, 1, 0) > 0; }))
        << "the event fd never became readable";
    EXPECT_EQ(UCS_OK, wait(sr, {p.w[0], p.w[1]}));
    ucp_request_param_t rp{};
    EXPECT_EQ(UCS_OK, p.wait(ucp_tag_recv_nbx(p.w[1], &out, sizeof(out), 1, ~0ull, &rp)));
    EXPECT_EQ(5u, out);
    // A thread asleep in ucp_worker_wait wakes on ucp_worker_signal from another.
    std::atomic<bool> woke{false};
    std::thread sleeper([&] {
        (void)ucp_worker_wait(p.w[1]);
        woke = true;
    });
    ASSERT_TRUE(progress_until({}, [&] {
        (void)ucp_worker_signal(p.w[1]);
        return woke.load();
    }));
    sleeper.join();
}

TEST(UcpWakeup, WithoutTheFeatureUnsupported) {
    Pair p;
    ASSERT_TRUE(p.open("shm,self", UCP_FEATURE_TAG));
    int fd = -1;
    testing::internal::CaptureStderr();
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, ucp_worker_get_efd(p.w[0], &fd));
    (void)testing::internal::GetCapturedStderr();  // Loom says why
}

}  // namespace
}  // namespace ucx_compat
