/**
 * The automatic rendezvous threshold (src/ucp/rndv/rndv_thresh.h): the model's formula on
 * synthetic figures (floor, cap, registration, zero-copy overhead), and what endpoints
 * over the real transports get from their figures, with LOOM_RNDV_THRESH overriding it.
 */
#include "common/test_helpers.h"
#include "loom/ucp.h"
#include "ucp/core/ep.h"
#include "ucp/rndv/rndv_thresh.h"
#include "ucp/tag/tag_proto.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

namespace {

using loom::ucp::kRndvCopyBandwidth;
using loom::ucp::kRndvThreshMax;
using loom::ucp::rndv_thresh_auto;
using loom::ucp::RndvModelInput;

/** A lane with the given figures (seconds, bytes per second). */
loom::uct::IfaceAttr lane(double latency, double overhead, double bandwidth, double zcopy_overhead = 0,
                          std::size_t max_bcopy = 8192) {
    loom::uct::IfaceAttr attr;
    attr.latency = {latency, 0};
    attr.overhead = overhead;
    attr.zcopy_overhead = zcopy_overhead;
    attr.bandwidth_dedicated = bandwidth;
    attr.am.max_bcopy = max_bcopy;
    return attr;
}

loom::uct::MdAttr md(std::uint64_t flags, double reg_overhead, double reg_per_byte = 0) {
    loom::uct::MdAttr attr;
    attr.flags = flags;
    attr.reg_cost_overhead = reg_overhead;
    attr.reg_cost_per_byte = reg_per_byte;
    return attr;
}

TEST(RndvThresh, IsWhereTheSavedCopyPaysForTheHandshake) {
    // Same bandwidth on both lanes: per byte, rendezvous saves the receiver's copy and the
    // eager fragments' overhead; it costs a round trip, its overhead, the zcopy overhead and
    // the sender's registration once.
    const auto e = lane(150e-9, 16e-9, 20e9, 0, 8000);
    const auto r = lane(150e-9, 16e-9, 20e9, 250e-9);
    const auto m = md(loom::uct::MdAttr::kReg, 150e-9);
    RndvModelInput in{&e, &r, &m, 232};
    const double fixed = 2 * 150e-9 + 16e-9 + 250e-9 + 150e-9;
    const double saved = 1.0 / kRndvCopyBandwidth + 16e-9 / 8000;
    EXPECT_EQ(static_cast<std::size_t>(std::ceil(fixed / saved)), rndv_thresh_auto(in));
}

TEST(RndvThresh, ShmFiguresSwitchAbove8KiBAndBy16KiB) {
    // The figures the shm transport reports (shm_iface.cc): an 8 KiB message stays eager
    // (one FIFO message), a 16 KiB one goes by CMA.
    const auto e = lane(150e-9, 17e-9, 20e9, 250e-9, 8256);
    const auto m = md(loom::uct::MdAttr::kReg | loom::uct::MdAttr::kNeedRkey, 150e-9);
    RndvModelInput in{&e, &e, &m, 232};
    const std::size_t t = rndv_thresh_auto(in);
    EXPECT_GT(t, 8192u);
    EXPECT_LE(t, 16384u);
}

TEST(RndvThresh, FollowsTheFixedCosts) {
    const auto e = lane(1e-6, 100e-9, 10e9);
    const auto cheap = lane(1e-6, 100e-9, 10e9, 0);
    const auto dear = lane(1e-6, 100e-9, 10e9, 2e-6);
    const auto m = md(loom::uct::MdAttr::kReg, 100e-9);
    const auto m_both = md(loom::uct::MdAttr::kReg | loom::uct::MdAttr::kNeedMemh, 100e-9);
    const std::size_t base = rndv_thresh_auto({&e, &cheap, &m, 0});
    EXPECT_LT(base, rndv_thresh_auto({&e, &dear, &m, 0})) << "a costlier zero-copy operation must switch later";
    EXPECT_LT(base, rndv_thresh_auto({&e, &cheap, &m_both, 0}))
        << "a receiver that registers too must switch later";
    const auto faster = lane(1e-6, 100e-9, 40e9);
    EXPECT_GT(base, rndv_thresh_auto({&e, &faster, &m, 0})) << "a faster GET lane must switch earlier";
}

TEST(RndvThresh, CapWhenRendezvousNeverPays) {
    const auto e = lane(1e-6, 100e-9, 10e9);
    const auto m = md(loom::uct::MdAttr::kReg, 100e-9);
    // No GET lane (AM pipeline): rendezvous only protects the receiver's memory.
    EXPECT_EQ(kRndvThreshMax, rndv_thresh_auto({&e, nullptr, nullptr, 0}));
    // A GET lane so slow that the saved copy never makes up for it.
    const auto slow = lane(1e-6, 100e-9, 1e9);
    EXPECT_EQ(kRndvThreshMax, rndv_thresh_auto({&e, &slow, &m, 0}));
    // Registration per byte dearer than the copy it saves.
    const auto pinning = md(loom::uct::MdAttr::kReg | loom::uct::MdAttr::kNeedMemh, 10e-6, 1e-9);
    EXPECT_EQ(kRndvThreshMax, rndv_thresh_auto({&e, &e, &pinning, 0}));
    // Fixed costs so high that the crossover lies beyond the cap.
    const auto far = lane(1e-3, 100e-9, 10e9);
    EXPECT_EQ(kRndvThreshMax, rndv_thresh_auto({&e, &far, &m, 0}));
    // No figures at all (bandwidth 0): nothing to derive from.
    const auto none = lane(0, 0, 0);
    EXPECT_EQ(kRndvThreshMax, rndv_thresh_auto({&none, &none, &m, 0}));
}

TEST(RndvThresh, NeverBelowEagerShort) {
    // Free rendezvous would win from the first byte; messages eager short carries stay eager.
    const auto e = lane(0, 1e-9, 6e9);
    const auto m = md(0, 0);
    EXPECT_EQ(4097u, rndv_thresh_auto({&e, &e, &m, 4096}));
    EXPECT_EQ(15u, rndv_thresh_auto({&e, &e, &m, 0}));  // 1 ns saved at 1/15 ns per byte
    const auto free_lane = lane(0, 0, 6e9);
    EXPECT_EQ(1u, rndv_thresh_auto({&free_lane, &free_lane, &m, 0}));
}

// --- endpoints over the real transports ------------------------------------------------------

/**
 * An endpoint between two workers of one context (or from one worker to itself, @p self)
 * with LOOM_TLS=@p tls and LOOM_RNDV_THRESH=@p thresh (nullptr: unset, auto).
 */
class EpThresh {
public:
    EpThresh(const char* tls, const char* thresh, bool self = false)
        : tls_("LOOM_TLS", tls), thresh_("LOOM_RNDV_THRESH", thresh) {
        loom_params_t params{};
        params.field_mask = LOOM_PARAM_FIELD_FEATURES;
        params.features = LOOM_FEATURE_TAG;
        if (loom_init(&params, &ctx_) != LOOM_OK) return;
        if (loom_worker_create(ctx_, nullptr, &a_) != LOOM_OK) return;
        if (self) {
            b_ = a_;
        } else if (loom_worker_create(ctx_, nullptr, &b_) != LOOM_OK) {
            return;
        }
        void* addr;
        size_t len;
        if (loom_worker_get_address(b_, &addr, &len) != LOOM_OK) return;
        loom_ep_params_t ep_params{};
        ep_params.field_mask = LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS;
        ep_params.address = addr;
        if (loom_ep_create(a_, &ep_params, &ep_) != LOOM_OK) ep_ = nullptr;
        loom_worker_release_address(b_, addr);
    }
    ~EpThresh() {
        if (ep_ != nullptr) {
            loom_request_param_t p{};
            p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
            p.flags = LOOM_EP_CLOSE_FLAG_FORCE;
            (void)loom_ep_close_nbx(ep_, &p);
        }
        if (b_ != nullptr && b_ != a_) loom_worker_destroy(b_);
        if (a_ != nullptr) loom_worker_destroy(a_);
        if (ctx_ != nullptr) loom_cleanup(ctx_);
    }
    EpThresh(const EpThresh&) = delete;
    EpThresh& operator=(const EpThresh&) = delete;

    /** The endpoint, or nullptr when the set-up failed. */
    const loom::ucp::Ep* ep() const { return reinterpret_cast<const loom::ucp::Ep*>(ep_); }
    /** Where the endpoint's protocol table starts tag rendezvous, or 0 when the set-up failed. */
    std::size_t rndv_thresh() const {
        return ep_ == nullptr ? 0 : ep()->protos->first_size(loom::ucp::ProtoOp::tag, true, loom::ucp::kTagRndv);
    }

private:
    /** Sets an environment variable for the object's lifetime (nullptr: unset). */
    struct Env {
        Env(const char* name, const char* value) : name_(name) {
            const char* old = std::getenv(name);
            had_ = old != nullptr;
            if (had_) old_ = old;
            if (value != nullptr) {
                ::setenv(name, value, 1);
            } else {
                ::unsetenv(name);
            }
        }
        ~Env() {
            if (had_) {
                ::setenv(name_, old_.c_str(), 1);
            } else {
                ::unsetenv(name_);
            }
        }
        const char* name_;
        bool had_ = false;
        std::string old_;
    };
    Env tls_, thresh_;
    loom_context_h ctx_ = nullptr;
    loom_worker_h a_ = nullptr, b_ = nullptr;
    loom_ep_h ep_ = nullptr;
};

TEST(RndvThreshEp, ShmSwitchesBetween8And16KiB) {
    // The case: 16 KiB over shm is faster by CMA than in two FIFO fragments.
    EpThresh ep("shm", nullptr);
    const std::size_t t = ep.rndv_thresh();
    ASSERT_NE(0u, t) << "could not connect over shm";
    EXPECT_GT(t, 8192u);
    EXPECT_LE(t, 16384u);
}

TEST(RndvThreshEp, SelfSwitchesRightAfterEagerShort) {
    // self's GET is one memcpy in the process: cheaper than eager's two copies as soon as
    // eager short no longer applies.
    EpThresh ep("self", nullptr, true);
    ASSERT_NE(nullptr, ep.ep()) << "could not connect over self";
    EXPECT_GT(ep.ep()->tag_short_limit, 0u);
    EXPECT_EQ(ep.ep()->tag_short_limit, ep.rndv_thresh());
}

TEST(RndvThreshEp, TcpOnLoopbackSwitchesWhereTheMeasuredCurvesCross) {
    // Forced-scheme tag_lat over lo crosses near 210 KiB (docs/protocols.md): the model
    // must land close (it said 80 KB before tcp reported its get's cost).
    loom::test::ScopedEnv lo("LOOM_NET_DEVICES", "lo");
    EpThresh ep("tcp", nullptr);
    if (ep.ep() == nullptr) GTEST_SKIP() << "no tcp interface on lo to connect over";
    EXPECT_GT(ep.rndv_thresh(), 176u * 1024);
    EXPECT_LT(ep.rndv_thresh(), 240u * 1024);
}

TEST(RndvThreshEp, TheVariableOverridesTheModel) {
    EpThresh ep("shm", "5000");
    EXPECT_EQ(5000u, ep.rndv_thresh());
    EpThresh never("shm", "inf");
    EXPECT_EQ(SIZE_MAX, never.rndv_thresh());
}

}  // namespace
