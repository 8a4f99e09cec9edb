/**
 * The one-process fixture the protocol-layer suites share: a context over a transport
 * set (LOOM_TLS), a sender and a receiver worker (one worker for self, whose endpoint
 * goes to itself), and an endpoint from the sender to the receiver. Each suite derives
 * its own fixture, adding its waits and helpers and, through on_init/on_teardown, what
 * it creates beside the pair.
 */
#pragma once

#include "loom/ucp.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace loom::test {

/** A transport set a suite is instantiated over. */
struct TlSet {
    const char* name;
    const char* tls;  ///< LOOM_TLS
    bool self;        ///< one worker: the endpoint goes to itself
};

inline void PrintTo(const TlSet& set, std::ostream* os) { *os << set.name; }

/**
 * The rc set of a suite's Verbs instance, where test/rdma/run_rdma_tests.sh runs it
 * (LOOMTEST_UCP_VERBS set): rc through rdma_cm, or with LOOM_IB_CM=verbs endpoint to
 * endpoint, wired up over tcp. Empty elsewhere.
 */
inline std::vector<TlSet> verbs_tl_sets() {
    if (std::getenv("LOOMTEST_UCP_VERBS") == nullptr) return {};
    const char* cm = std::getenv("LOOM_IB_CM");
    if (cm != nullptr && std::string(cm) == "verbs")
        return {TlSet{"rc_wired_up_over_tcp", "rc,tcp:aux", false}};
    return {TlSet{"rc", "rc", false}};
}

/** Extra environment settings for one init, set before the context and unset at teardown. */
using EnvList = std::vector<std::pair<std::string, std::string>>;

class UcpPairTest : public testing::TestWithParam<TlSet> {
protected:
    explicit UcpPairTest(std::uint64_t features) : default_features_(features) {}

    void SetUp() override { init({}); }
    void TearDown() override { teardown(); }

    /** (Re)creates everything with extra environment settings and @p features (0: the suite's). */
    void init(const EnvList& env, std::uint64_t features = 0) {
        teardown();
        setenv("LOOM_TLS", GetParam().tls, 1);
        for (auto& [k, v] : env) {
            setenv(k.c_str(), v.c_str(), 1);
            env_set_.push_back(k);
        }
        loom_params_t params{};
        params.field_mask = LOOM_PARAM_FIELD_FEATURES;
        params.features = features != 0 ? features : default_features_;
        ASSERT_EQ(LOOM_OK, loom_init(&params, &ctx_));
        ASSERT_EQ(LOOM_OK, loom_worker_create(ctx_, nullptr, &sender_));
        if (GetParam().self) {
            receiver_ = sender_;
        } else {
            ASSERT_EQ(LOOM_OK, loom_worker_create(ctx_, nullptr, &receiver_));
        }
        ep_ = connect(sender_, receiver_, ep_user_data_);
        ASSERT_NE(nullptr, ep_);
        on_init();
    }

    /** An endpoint from @p from to @p to (with @p user_data when given); nullptr on failure. */
    loom_ep_h connect(loom_worker_h from, loom_worker_h to, void* user_data = nullptr) {
        void* addr;
        size_t len;
        EXPECT_EQ(LOOM_OK, loom_worker_get_address(to, &addr, &len));
        loom_ep_params_t ep_params{};
        ep_params.field_mask = LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS;
        ep_params.address = addr;
        if (user_data != nullptr) {
            ep_params.field_mask |= LOOM_EP_PARAM_FIELD_USER_DATA;
            ep_params.user_data = user_data;
        }
        loom_ep_h ep = nullptr;
        EXPECT_EQ(LOOM_OK, loom_ep_create(from, &ep_params, &ep));
        loom_worker_release_address(to, addr);
        return ep;
    }

    /** Closes @p ep at once, dropping what is outstanding. */
    static void force_close(loom_ep_h ep) {
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
        p.flags = LOOM_EP_CLOSE_FLAG_FORCE;
        (void)loom_ep_close_nbx(ep, &p);
    }

    /** Destroys what on_init made (on_teardown), the endpoint, the workers and the context. */
    void teardown() {
        on_teardown();
        if (ep_) force_close(ep_);
        ep_ = nullptr;
        if (receiver_ && receiver_ != sender_) loom_worker_destroy(receiver_);
        if (sender_) loom_worker_destroy(sender_);
        if (ctx_) loom_cleanup(ctx_);
        receiver_ = sender_ = nullptr;
        ctx_ = nullptr;
        for (auto& k : env_set_) unsetenv(k.c_str());
        env_set_.clear();
    }

    /** One progress call on each worker. */
    void progress() {
        loom_worker_progress(sender_);
        if (receiver_ != sender_) loom_worker_progress(receiver_);
    }

    /** Progresses until @p done(); 30 s without it fails the test (naming @p what). */
    template <typename F>
    bool progress_until(F done, const char* what = "condition") {
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!done()) {
            if (std::chrono::steady_clock::now() > deadline) {
                ADD_FAILURE() << "timed out waiting for " << what;
                return false;
            }
            progress();
        }
        return true;
    }

    /** Waits for a status-or-request (progressing both workers); frees the request. */
    loom_status_t wait(loom_status_ptr_t r) {
        if (!LOOM_PTR_IS_PTR(r)) return LOOM_PTR_STATUS(r);
        if (!progress_until([&] { return loom_request_check_status(r) != LOOM_INPROGRESS; }, "a request")) {
            return LOOM_ERR_TIMED_OUT;
        }
        loom_status_t s = loom_request_check_status(r);
        loom_request_free(r);
        return s;
    }

    /** After init made the pair: what the suite adds (endpoints back, handlers). */
    virtual void on_init() {}
    /** Before teardown destroys the pair: releases what on_init or a test added. */
    virtual void on_teardown() {}

    loom_context_h ctx_ = nullptr;
    loom_worker_h sender_ = nullptr;
    loom_worker_h receiver_ = nullptr;
    loom_ep_h ep_ = nullptr;  ///< sender -> receiver
    void* ep_user_data_ = nullptr;  ///< ep_'s user data (set by a suite's constructor)

private:
    std::uint64_t default_features_;
    std::vector<std::string> env_set_;
};

}  // namespace loom::test
