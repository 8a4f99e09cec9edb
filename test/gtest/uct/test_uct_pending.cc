/**
 * Pending queues, on every transport: an endpoint that returned no_resource takes
 * PendingReq objects, which the transport runs again when resources free up, in FIFO
 * order per endpoint and round-robin across endpoints; pending_purge hands back what
 * is still queued, pending_remove takes one request out.
 *
 * The fairness rule (docs/transports.md): round-robin among the endpoints that can
 * send. Where the resource is per endpoint (rc's credits from the peer), an endpoint
 * still waiting for its own resource does not hold the others back; the test sees such
 * an endpoint as a request that ran but got no_resource.
 */
#include "uct_test.h"

#include "common/test_helpers.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

namespace loom::uct::test {
namespace {

constexpr AmId kAmId = 7;
constexpr int kEps = 4;
constexpr int kRequestsPerEp = 6;
/** Sends before giving up on filling an endpoint: a transport that never runs out cannot be tested here. */
constexpr long kMaxFill = 1 << 20;

/** What the receiver saw: the header of every message, in arrival order. */
struct Received {
    std::vector<std::uint64_t> headers;

    static Status handler(void* arg, void* data, std::size_t length, unsigned) {
        std::uint64_t header = 0;
        if (length >= sizeof(header)) std::memcpy(&header, data, sizeof(header));
        static_cast<Received*>(arg)->headers.push_back(header);
        return Status::ok;
    }
};

/** Headers of the messages the pending requests send: endpoint and sequence number. */
constexpr std::uint64_t kPendingTag = 0x5045ull << 48;
std::uint64_t encode(int ep, int seq) {
    return kPendingTag | (static_cast<std::uint64_t>(ep) << 16) | seq;
}

class UctPendingTest : public UctTest {
protected:
    struct Request : PendingReq {
        UctPendingTest* test;
        int ep;
        int seq;
    };

    void SetUp() override {
        UctTest::SetUp();
        ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, Received::handler, &received_, 0));
        eps_.push_back(ep_);
        for (int i = 1; i < kEps; ++i) eps_.push_back(sender_->connect_to(*receiver_));
        for (int e = 0; e < kEps; ++e) {
            for (int s = 0; s < kRequestsPerEp; ++s) {
                Request& req = requests_[e][s];
                req.func = run_request;
                req.test = this;
                req.ep = e;
                req.seq = s;
            }
        }
    }

    /**
     * A pending request: while the gate is closed it reports no_resource (it stays queued);
     * once open it sends one message and records that it ran.
     */
    static Status run_request(PendingReq* self) {
        auto* req = static_cast<Request*>(self);
        UctPendingTest* test = req->test;
        ++test->calls_;
        if (!test->gate_open_) return Status::no_resource;
        Status status = ep_am_short(test->eps_[req->ep], kAmId, encode(req->ep, req->seq), nullptr, 0);
        if (status == Status::ok) test->ran_.emplace_back(req->ep, req->seq);
        test->events_.push_back({req->ep, req->seq, status == Status::ok});
        return status;
    }

    /**
     * Sends on every endpoint until it returns no_resource; false when one never does.
     * One message per endpoint goes first, retried until it leaves: an endpoint still
     * connecting (rdma_cm) says no_resource too, and would then be filled with nothing
     * and have nothing to send with when the others do.
     */
    bool fill_all() {
        for (Ep* ep : eps_) {
            Status status;
            while ((status = ep_am_short(ep, kAmId, 0, nullptr, 0)) == Status::no_resource) progress();
            EXPECT_EQ(Status::ok, status) << to_string(status);
            if (status != Status::ok) return false;
            ++filled_;
        }
        if (!wait_for([&] { return static_cast<long>(received_.headers.size()) >= filled_; })) return false;
        for (Ep* ep : eps_) {
            long sent = 0;
            for (;;) {
                Status status = ep_am_short(ep, kAmId, 0, nullptr, 0);
                if (status == Status::no_resource) break;
                EXPECT_EQ(Status::ok, status) << to_string(status);
                if (status != Status::ok || ++sent >= kMaxFill) return false;
                ++filled_;
            }
        }
        return true;
    }

    Received received_;
    std::vector<Ep*> eps_;
    Request requests_[kEps][kRequestsPerEp];
    bool gate_open_ = false;
    long calls_ = 0;
    long filled_ = 0;
    std::vector<std::pair<int, int>> ran_;  ///< (endpoint, sequence) in execution order
    struct Event {
        int ep;
        int seq;
        bool sent;  ///< false: the request ran but its endpoint had no resource (no_resource)
    };
    std::vector<Event> events_;  ///< every call after the gate opened
};

TEST_P(UctPendingTest, AddIsBusyWhenResourcesAreAvailable) {
    if (!has(kCapPending) || !has(kCapAmShort)) GTEST_SKIP() << "transport has no pending queue or am_short";
    // One message through first, so a transport that connects lazily is connected.
    Status status;
    while ((status = ep_am_short(ep_, kAmId, 1, nullptr, 0)) == Status::no_resource) progress();
    ASSERT_EQ(Status::ok, status);
    ASSERT_TRUE(wait_for([&] { return received_.headers.size() == 1; }));
    Request& req = requests_[0][0];
    status = ep_pending_add(ep_, &req, 0);
    EXPECT_EQ(Status::busy, status) << "resources are free: the caller should retry, not queue";
    if (status == Status::ok) ep_pending_purge(ep_, nullptr, nullptr);
}

TEST_P(UctPendingTest, QueuedRequestsRunInOrderAndRoundRobin) {
    if (!has(kCapPending) || !has(kCapAmShort)) GTEST_SKIP() << "transport has no pending queue or am_short";
    if (!fill_all()) GTEST_SKIP() << GetParam().name() << " never returned no_resource (nothing ever waits)";
    for (int s = 0; s < kRequestsPerEp; ++s) {
        for (int e = 0; e < kEps; ++e) {
            ASSERT_EQ(Status::ok, ep_pending_add(eps_[e], &requests_[e][s], 0)) << "ep " << e << " seq " << s;
        }
    }
    // Drain what filled the endpoints; the requests are called but keep saying no_resource.
    ASSERT_TRUE(wait_for([&] { return static_cast<long>(received_.headers.size()) >= filled_; }));
    for (int i = 0; i < 100; ++i) progress();
    EXPECT_TRUE(ran_.empty());

    gate_open_ = true;
    ASSERT_TRUE(wait_for([&] { return ran_.size() == static_cast<std::size_t>(kEps * kRequestsPerEp); }))
        << "only " << ran_.size() << " pending requests ran";
    ASSERT_TRUE(wait_for(
        [&] { return static_cast<long>(received_.headers.size()) == filled_ + kEps * kRequestsPerEp; }));

    // FIFO per endpoint, and round-robin among the endpoints that can send: when an endpoint
    // sends, no other endpoint with requests left is more than one behind unless its last
    // attempt found it without resources of its own.
    std::vector<int> count(kEps, 0);
    std::vector<bool> blocked(kEps, false);
    for (std::size_t i = 0; i < events_.size(); ++i) {
        auto [e, s, sent] = events_[i];
        EXPECT_EQ(count[e], s) << "endpoint " << e << " ran request " << s << " out of order";
        if (!sent) {
            blocked[e] = true;
            continue;
        }
        blocked[e] = false;
        ++count[e];
        for (int other = 0; other < kEps; ++other) {
            if (other == e || blocked[other] || count[other] == kRequestsPerEp) continue;
            EXPECT_LE(count[e] - count[other], 1)
                << "unfair after event " << i + 1 << ": endpoint " << e << " sent " << count[e]
                << " while endpoint " << other << ", able to send, sent " << count[other];
        }
    }
    EXPECT_EQ(kEps * kRequestsPerEp, static_cast<int>(ran_.size()));
    // The receiver saw each endpoint's messages in order too.
    std::vector<int> next(kEps, 0);
    for (std::uint64_t header : received_.headers) {
        if ((header & (0xffffull << 48)) != kPendingTag) continue;
        int e = static_cast<int>((header >> 16) & 0xffff);
        int s = static_cast<int>(header & 0xffff);
        ASSERT_LT(e, kEps);
        EXPECT_EQ(next[e]++, s) << "endpoint " << e << "'s messages arrived out of order";
    }
}

TEST_P(UctPendingTest, RequestsRunWhenTheReceiverDrains) {
    if (!has(kCapPending) || !has(kCapAmShort)) GTEST_SKIP() << "transport has no pending queue or am_short";
    if (!fill_all()) GTEST_SKIP() << GetParam().name() << " never returned no_resource (nothing ever waits)";
    gate_open_ = true;  // the requests send as soon as they are called
    for (int e = 0; e < kEps; ++e) {
        for (int s = 0; s < kRequestsPerEp; ++s)
            ASSERT_EQ(Status::ok, ep_pending_add(eps_[e], &requests_[e][s], 0));
    }
    ASSERT_TRUE(wait_for([&] { return ran_.size() == static_cast<std::size_t>(kEps * kRequestsPerEp); }));
    ASSERT_TRUE(wait_for(
        [&] { return static_cast<long>(received_.headers.size()) == filled_ + kEps * kRequestsPerEp; }));
    std::vector<int> count(kEps, 0);
    for (auto [e, s] : ran_) EXPECT_EQ(count[e]++, s);
    // Nothing stays queued: flush succeeds.
    for (Ep* ep : eps_) {
        CountingCompletion comp;
        Status status;
        while ((status = ep_flush(ep, kFlushLocal, &comp)) == Status::no_resource) progress();
        if (status == Status::in_progress)
            ASSERT_TRUE(wait_for([&] { return comp.fired == 1; }));
        else
            EXPECT_EQ(Status::ok, status);
    }
}

TEST_P(UctPendingTest, PurgeHandsBackEveryQueuedRequest) {
    if (!has(kCapPending) || !has(kCapAmShort)) GTEST_SKIP() << "transport has no pending queue or am_short";
    if (!fill_all()) GTEST_SKIP() << GetParam().name() << " never returned no_resource (nothing ever waits)";
    for (int e = 0; e < 2; ++e) {
        for (int s = 0; s < kRequestsPerEp; ++s)
            ASSERT_EQ(Status::ok, ep_pending_add(eps_[e], &requests_[e][s], 0));
    }
    std::map<int, std::vector<int>> purged;  // endpoint -> sequence numbers, in purge order
    auto collect = [](PendingReq* req, void* arg) {
        auto* r = static_cast<Request*>(req);
        (*static_cast<std::map<int, std::vector<int>>*>(arg))[r->ep].push_back(r->seq);
    };
    ep_pending_purge(eps_[0], collect, &purged);
    ep_pending_purge(eps_[1], collect, &purged);
    ep_pending_purge(eps_[2], collect, &purged);  // nothing queued there
    ASSERT_EQ(2u, purged.size());
    std::vector<int> all(kRequestsPerEp);
    for (int s = 0; s < kRequestsPerEp; ++s) all[s] = s;
    EXPECT_EQ(all, purged[0]);
    EXPECT_EQ(all, purged[1]);

    // Purged requests never run, even once resources come back.
    gate_open_ = true;
    const long calls = calls_;
    ASSERT_TRUE(wait_for([&] { return static_cast<long>(received_.headers.size()) >= filled_; }));
    for (int i = 0; i < 100; ++i) progress();
    EXPECT_EQ(calls, calls_);
    EXPECT_TRUE(ran_.empty());
    // And the endpoints are usable again.
    Status status;
    while ((status = ep_am_short(eps_[0], kAmId, 2, nullptr, 0)) == Status::no_resource) progress();
    EXPECT_EQ(Status::ok, status);
}

TEST_P(UctPendingTest, RemovedRequestNeverRunsAndTheRestKeepTheirOrder) {
    if (!has(kCapPending) || !has(kCapAmShort)) GTEST_SKIP() << "transport has no pending queue or am_short";
    if (!fill_all()) GTEST_SKIP() << GetParam().name() << " never returned no_resource (nothing ever waits)";
    for (int s = 0; s < kRequestsPerEp; ++s)
        ASSERT_EQ(Status::ok, ep_pending_add(eps_[0], &requests_[0][s], 0));
    ASSERT_EQ(Status::ok, ep_pending_add(eps_[1], &requests_[1][0], 0));
    // The head, one in the middle and the tail of endpoint 0; endpoint 1's only one.
    for (int s : {0, 2, kRequestsPerEp - 1})
        EXPECT_EQ(Status::ok, ep_pending_remove(eps_[0], &requests_[0][s]));
    EXPECT_EQ(Status::ok, ep_pending_remove(eps_[1], &requests_[1][0]));
    EXPECT_EQ(Status::no_element, ep_pending_remove(eps_[0], &requests_[0][2])) << "removed twice";
    EXPECT_EQ(Status::no_element, ep_pending_remove(eps_[2], &requests_[2][0])) << "never queued";
    EXPECT_EQ(Status::no_element, ep_pending_remove(eps_[1], &requests_[0][1]))
        << "queued on another endpoint";

    gate_open_ = true;
    const std::vector<std::pair<int, int>> expected = {{0, 1}, {0, 3}, {0, 4}};
    ASSERT_TRUE(wait_for([&] { return ran_.size() == expected.size(); }))
        << "only " << ran_.size() << " of the requests left ran";
    ASSERT_TRUE(wait_for([&] { return static_cast<long>(received_.headers.size()) == filled_ + 3; }));
    for (int i = 0; i < 100; ++i) progress();
    EXPECT_EQ(expected, ran_) << "a removed request ran, or the rest ran out of order";
    // Endpoint 1 has nothing queued any more: it sends at once, and flushes.
    Status status;
    while ((status = ep_am_short(eps_[1], kAmId, 3, nullptr, 0)) == Status::no_resource) progress();
    EXPECT_EQ(Status::ok, status);
    CountingCompletion comp;
    while ((status = ep_flush(eps_[1], kFlushLocal, &comp)) == Status::no_resource) progress();
    if (status == Status::in_progress) {
        EXPECT_TRUE(wait_for([&] { return comp.fired == 1; }));
    } else {
        EXPECT_EQ(Status::ok, status);
    }
}

INSTANTIATE_TEST_SUITE_P(Transports, UctPendingTest, testing::ValuesIn(all_resources()), resource_name);

}  // namespace
}  // namespace loom::uct::test
