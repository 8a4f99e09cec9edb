/**
 * Multi-rail rendezvous (src/ucp/rndv/rndv_rails.cc): the RTS's rail entries as a receiver
 * parses them (forged ones refused), and, where two devices reach the peer's two devices
 * (rc over rxe0 and rxe1 in the RDMA VM: test/rdma/run_rdma_tests.sh sets LOOMTEST_RAILS),
 * large messages split over both rails with every byte checked. Over tcp the two-rail
 * case runs between two simulated hosts (test/faults/run_two_rails.sh).
 */
#include "loom/ucp.h"
#include "ucp/api/handles.h"
#include "ucp/core/ep.h"
#include "ucp/core/worker.h"
#include "ucp/rndv/rndv.h"
#include "ucp_pair.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using loom::ucp::RndvRailKey;
using loom::ucp::RtsHdr;
using loom::ucp::RtsRail;

/** RTS key bytes with one entry per (iface, key length). */
std::vector<std::uint8_t> rail_entries(const std::vector<std::pair<std::uint8_t, std::uint16_t>>& rails) {
    std::vector<std::uint8_t> out;
    for (auto [iface, len] : rails) {
        const RtsRail r{iface, 0, len};
        const auto* p = reinterpret_cast<const std::uint8_t*>(&r);
        out.insert(out.end(), p, p + sizeof(r));
        out.insert(out.end(), len, static_cast<std::uint8_t>(0xa0 + iface));
    }
    return out;
}

RtsHdr rails_rts(std::uint8_t first_iface) {
    RtsHdr rts{};
    rts.iface_index = first_iface;
    rts.flags = loom::ucp::kRtsFlagRails;
    return rts;
}

TEST(RndvRailsParse, OneKeyWithoutTheFlag) {
    const std::uint8_t key[5] = {1, 2, 3, 4, 5};
    RtsHdr rts{};
    rts.iface_index = 3;
    RndvRailKey rails[loom::ucp::kMaxRndvRails];
    ASSERT_EQ(1u, loom::ucp::rndv_rails_parse(rts, key, sizeof(key), rails));
    EXPECT_EQ(3, rails[0].iface_index);
    EXPECT_EQ(key, rails[0].rkey);
    EXPECT_EQ(sizeof(key), rails[0].rkey_len);
}

TEST(RndvRailsParse, EveryRailWithItsKey) {
    const auto bytes = rail_entries({{2, 30}, {5, 30}, {7, 0}});
    RndvRailKey rails[loom::ucp::kMaxRndvRails];
    ASSERT_EQ(3u, loom::ucp::rndv_rails_parse(rails_rts(2), bytes.data(), bytes.size(), rails));
    EXPECT_EQ(2, rails[0].iface_index);
    EXPECT_EQ(5, rails[1].iface_index);
    EXPECT_EQ(7, rails[2].iface_index);
    EXPECT_EQ(30u, rails[1].rkey_len);
    EXPECT_EQ(0xa5, rails[1].rkey[0]);
    EXPECT_EQ(bytes.data() + 2 * sizeof(RtsRail) + 30, rails[1].rkey);
    EXPECT_EQ(0u, rails[2].rkey_len);
}

TEST(RndvRailsParse, ForgedEntriesAreRefused) {
    RndvRailKey rails[loom::ucp::kMaxRndvRails];
    auto parse = [&](const RtsHdr& rts, const std::vector<std::uint8_t>& b) {
        return loom::ucp::rndv_rails_parse(rts, b.data(), b.size(), rails);
    };
    auto good = rail_entries({{1, 16}, {2, 16}});
    // A key longer than the bytes that follow.
    auto cut = good;
    cut.pop_back();
    EXPECT_EQ(0u, parse(rails_rts(1), cut));
    // A header cut in two.
    auto half = rail_entries({{1, 16}});
    half.push_back(2);
    EXPECT_EQ(0u, parse(rails_rts(1), half));
    // The first rail is not the RTS's iface.
    EXPECT_EQ(0u, parse(rails_rts(9), good));
    // One iface twice.
    EXPECT_EQ(0u, parse(rails_rts(1), rail_entries({{1, 8}, {1, 8}})));
    // More rails than there can be.
    EXPECT_EQ(0u, parse(rails_rts(1), rail_entries({{1, 0}, {2, 0}, {3, 0}, {4, 0}})));
    // Nothing at all.
    EXPECT_EQ(0u, parse(rails_rts(1), {}));
    EXPECT_EQ(2u, parse(rails_rts(1), good));
}

/**
 * An endpoint with lanes 0 (AM), 1 (wire-up) and 2, 3; rails 0 (rndv lane 0), 2 and 1.
 * The uct endpoints are only compared, never called.
 */
struct RailCloseEp {
    loom::ucp::Ep ep{};
    loom::uct::Ep* uep[4];
    alignas(8) char storage[4][8] = {};

    RailCloseEp() {
        for (unsigned i = 0; i < 4; ++i) {
            uep[i] = reinterpret_cast<loom::uct::Ep*>(storage[i]);
            ep.lanes[i].ep = uep[i];
        }
        ep.num_lanes = 4;
        ep.am_lane = 0;
        ep.am_ep = uep[0];
        ep.wireup_lane = 1;
        ep.rndv_lane = 0;
        ep.num_rndv_rails = 3;
        ep.rndv_rails[0] = 0;
        ep.rndv_rails[1] = 2;
        ep.rndv_rails[2] = 1;
    }
};

// The peer's orderly close of a rail that carries only GETs waits for the AM lane, whose
// connection holds what the peer sent before (a lost ATS failed a sender whose message
// had been received: test/faults/run_two_rails.sh saw it under load).
TEST(RailCloseWaits, OnlyAnExtraRailClosedByThePeer) {
    using loom::Status;
    using loom::ucp::rail_close_waits;
    RailCloseEp e;
    EXPECT_TRUE(rail_close_waits(e.ep, e.uep[2], Status::connection_reset));
    EXPECT_FALSE(rail_close_waits(e.ep, e.uep[0], Status::connection_reset)) << "the AM lane (and rail 0)";
    EXPECT_FALSE(rail_close_waits(e.ep, e.uep[1], Status::connection_reset)) << "a rail that wires up";
    EXPECT_FALSE(rail_close_waits(e.ep, e.uep[3], Status::connection_reset)) << "not a rail";
    EXPECT_FALSE(rail_close_waits(e.ep, e.uep[2], Status::peer_timeout)) << "a rail that went silent";
    EXPECT_FALSE(rail_close_waits(e.ep, e.uep[2], Status::io_error));
    EXPECT_FALSE(rail_close_waits(e.ep, nullptr, Status::connection_reset));
    e.ep.num_rndv_rails = 1;
    EXPECT_FALSE(rail_close_waits(e.ep, e.uep[2], Status::connection_reset)) << "rails turned off";
    e.ep.num_rndv_rails = 3;
    e.ep.flags |= loom::ucp::kEpFailed;
    EXPECT_FALSE(rail_close_waits(e.ep, e.uep[2], Status::connection_reset)) << "already failed";
}

/** Two rails where the environment has them (the VM's rxe0 and rxe1); see the file comment. */
class UcpRailsTest : public loom::test::UcpPairTest {
protected:
    UcpRailsTest() : UcpPairTest(LOOM_FEATURE_TAG) {}

    loom::ucp::Ep* ep() const { return reinterpret_cast<loom::ucp::Ep*>(ep_); }
    std::uint64_t rail_parts() const { return receiver_->impl->rndv_rail_parts; }

    /** Sends @p size bytes tagged, receives them, and checks every byte. */
    void send_and_check(std::size_t size, std::uint64_t seed) {
        std::vector<std::uint8_t> out(size), in(size, 0);
        for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<std::uint8_t>(seed * 131 + i * 7 + (i >> 12));
        loom_request_param_t p{};
        loom_status_ptr_t r = loom_tag_recv_nbx(receiver_, in.data(), size, seed, ~0ull, &p);
        loom_status_ptr_t s = loom_tag_send_nbx(ep_, out.data(), size, seed, &p);
        EXPECT_EQ(LOOM_OK, wait(s));
        EXPECT_EQ(LOOM_OK, wait(r));
        EXPECT_EQ(0, std::memcmp(out.data(), in.data(), size)) << size << " bytes arrived damaged";
    }
};

TEST_P(UcpRailsTest, LargeMessagesSplitOverBothRailsIntact) {
    if (std::getenv("LOOMTEST_RAILS") == nullptr) {
        GTEST_SKIP() << "needs two devices on each side that reach the other's two "
                        "(test/rdma/run_rdma_tests.sh runs it over rxe0 and rxe1 with LOOMTEST_RAILS=1)";
    }
    ASSERT_EQ(2, ep()->num_rndv_rails) << "two devices on each side, LOOM_MAX_RNDV_RAILS=2: two rails";
    const auto& lanes = ep()->lanes;
    EXPECT_NE(lanes[ep()->rndv_rails[0]].iface, lanes[ep()->rndv_rails[1]].iface);
    EXPECT_NE(lanes[ep()->rndv_rails[0]].remote_iface, lanes[ep()->rndv_rails[1]].remote_iface);
    // Below twice the smallest part: one rail. From there: split.
    const std::uint64_t before = rail_parts();
    send_and_check(2 * loom::ucp::kRndvRailMinPart - 1, 1);
    EXPECT_EQ(before, rail_parts()) << "a message below 2 x 64 KiB stays on one rail";
    std::uint64_t seed = 2;
    for (std::size_t size : {2 * loom::ucp::kRndvRailMinPart, std::size_t{300000}, std::size_t{1} << 20,
                             (std::size_t{4} << 20) + 4093}) {
        const std::uint64_t parts = rail_parts();
        send_and_check(size, seed++);
        EXPECT_EQ(parts + 1, rail_parts()) << size << " bytes: the second rail GETs its part";
    }
}

/** LOOM_MAX_EAGER_RAILS=2: an eager message's middle fragments take turns over both rails. */
TEST_P(UcpRailsTest, EagerFragmentsTakeTurnsOverBothRailsIntact) {
    if (std::getenv("LOOMTEST_RAILS") == nullptr) {
        GTEST_SKIP() << "needs two devices on each side that reach the other's two "
                        "(test/rdma/run_rdma_tests.sh runs it over rxe0 and rxe1 with LOOMTEST_RAILS=1)";
    }
    init({{"LOOM_MAX_EAGER_RAILS", "2"}, {"LOOM_RNDV_THRESH", "inf"}});
    ASSERT_EQ(2, ep()->num_rndv_rails);
    ASSERT_NE(0, ep()->eager_rail_mask) << "the second rail carries active messages of the AM lane's size";
    const std::uint64_t before = sender_->impl->eager_rail_frags;
    const auto sizes = {std::size_t{20000}, std::size_t{300000}, (std::size_t{1} << 20) + 4093};
    std::uint64_t seed = 10;
    for (std::size_t size : sizes) send_and_check(size, seed++);
    // A rail over rdma_cm connects on its first use, and its fragments go over the AM lane
    // until it is up (a slow emulated device may take longer than the messages above):
    // messages go on, each checked, until one sends a fragment over the second rail.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (sender_->impl->eager_rail_frags == before && std::chrono::steady_clock::now() < give_up &&
           !HasFailure()) {
        send_and_check(300000, seed++);
    }
    ASSERT_LT(before, sender_->impl->eager_rail_frags) << "no middle fragment went over the second rail";
    const std::uint64_t up = sender_->impl->eager_rail_frags;
    for (std::size_t size : sizes) send_and_check(size, seed++);
    EXPECT_LT(up, sender_->impl->eager_rail_frags) << "the second rail, once up, carries no fragment";
    EXPECT_EQ(0u, receiver_->impl->rndv_rail_parts) << "every message went eager";
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(UcpRailsTest);
INSTANTIATE_TEST_SUITE_P(Verbs, UcpRailsTest, testing::ValuesIn(loom::test::verbs_tl_sets()),
                         [](const testing::TestParamInfo<loom::test::TlSet>& i) { return i.param.name; });

}  // namespace
