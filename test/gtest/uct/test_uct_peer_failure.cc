/**
 * Peer failure, for every transport that declares kCapErrHandlingPeerFailure: the peer
 * is a real process that is SIGKILLed (or closes cleanly) while this side has
 * operations outstanding or keeps sending. The endpoint's on_error must fire from
 * progress with a peer-class status, every outstanding Completion must complete with
 * an error, later sends must return an error, pending requests must be purgeable, and
 * nothing may hang or crash.
 */
#include "uct_peer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>

namespace loom::uct::test {
namespace {

constexpr std::size_t kBufferSize = 64 * 1024;
constexpr AmId kAmId = 3;

/** One-byte commands to the serving peer, on a pipe of their own: a byte is never split. */
constexpr char kCmdFreeze = 'F';
constexpr char kCmdClose = 'C';

/** Reads a pending command byte without waiting; 0 when there is none. */
char poll_command(int fd) {
    pollfd pfd{fd, POLLIN, 0};
    char cmd = 0;
    if (::poll(&pfd, 1, 0) == 1 && ::read(fd, &cmd, 1) == 1) return cmd;
    return 0;
}

/**
 * The peer process: serves until told to freeze (stop progressing) or to close.
 * args: the resource name, the command pipe's read descriptor.
 */
int serve_peer(loom::test::ForkedPeer::Channel& ch, const std::vector<std::string>& args) {
    int cmd_fd = std::stoi(args.at(1));
    auto side = std::make_unique<ProcSide>(find_resource(args.at(0)), kBufferSize);
    (void)side->entity().iface().set_am_handler(kAmId, [](void*, void*, std::size_t, unsigned) { return Status::ok; },
                                                nullptr, 0);
    if (!side->exchange(ch)) return 3;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
        for (int i = 0; i < 256; ++i) side->entity().worker().progress();
        char cmd = poll_command(cmd_fd);
        if (cmd == kCmdFreeze) {
            ch.send(std::string("frozen"));
            (void)ch.recv(std::chrono::seconds(30));  // killed while waiting here
            return 0;
        }
        if (cmd == kCmdClose) {
            side.reset();  // endpoints, iface and md go: the connections close cleanly
            ch.send(std::string("closed"));
            (void)ch.recv(std::chrono::seconds(30));
            return 0;
        }
    }
    return 4;
}
LOOM_TEST_PEER_ROLE(serve_peer);

/** What on_error reported. */
struct ErrorLog {
    int calls = 0;
    Status status = Status::ok;
    Ep* ep = nullptr;

    static void on_error(void* arg, Ep* ep, Status status) {
        auto* self = static_cast<ErrorLog*>(arg);
        ++self->calls;
        self->status = status;
        self->ep = ep;
    }
};

class UctPeerFailureTest : public testing::TestWithParam<Resource> {
protected:
    void SetUp() override {
        Entity probe(GetParam());
        attr_ = probe.attr();
        if (attr_.cap_flags & kCapSelfOnly) GTEST_SKIP() << GetParam().name() << " reaches only its own process";
        if (!(attr_.cap_flags & kCapErrHandlingPeerFailure)) {
            GTEST_SKIP() << GetParam().name() << " does not declare peer failure handling";
        }
        Resource resource = GetParam();
        if (resource.tl.tl_name == "rc") {
            // Verbs without a connection manager learn of a dead peer only when retransmissions
            // run out: 1 s x 8 by default. Both processes (the peer inherits the environment)
            // use 50 ms x 4, so the failure shows within the test's waits.
            ::setenv("LOOM_IB_TIMEOUT", "50ms", 1);
            ::setenv("LOOM_IB_RETRY_COUNT", "3", 1);
            env_set_ = true;
        }
        ASSERT_EQ(0, ::pipe2(cmd_pipe_, O_CLOEXEC));
        int cmd_fd = cmd_pipe_[0];
        peer_ = std::make_unique<loom::test::ForkedPeer>(
            "serve_peer", std::vector<std::string>{resource.name(), std::to_string(cmd_fd)}, std::vector<int>{cmd_fd});
        side_ = std::make_unique<ProcSide>(resource, kBufferSize);
        ASSERT_TRUE(side_->exchange(peer_->channel())) << "the peer did not answer";
        ASSERT_EQ(Status::ok, side_->connect(ErrorLog::on_error, &errors_));
    }

    void TearDown() override {
        side_.reset();
        if (peer_) {
            peer_->kill(SIGKILL);
            (void)peer_->wait(std::chrono::seconds(10));
        }
        for (int& fd : cmd_pipe_) {
            if (fd >= 0) ::close(fd);
            fd = -1;
        }
        if (env_set_) {
            ::unsetenv("LOOM_IB_TIMEOUT");
            ::unsetenv("LOOM_IB_RETRY_COUNT");
        }
    }

    void command(char cmd) { ASSERT_EQ(1, ::write(cmd_pipe_[1], &cmd, 1)); }

    bool has(std::uint64_t caps) const { return (attr_.cap_flags & caps) == caps; }

    /** One round trip, so the connection is known to be up and the peer alive. */
    void round_trip() {
        if (has(kCapGetBcopy)) {
            std::uint64_t value = 0;
            CountingCompletion comp;
            Status s = side_->retry([&] {
                return ep_get_bcopy(
                    side_->ep(), [](void* arg, const void* data, std::size_t len) { std::memcpy(arg, data, len); },
                    &value, sizeof(value), side_->peer_addr(0), side_->peer_rkey(), &comp);
            });
            ASSERT_EQ(Status::ok, side_->finish(s, comp));
        } else {
            CountingCompletion comp;
            Status s = side_->retry([&] { return ep_flush(side_->ep(), kFlushLocal, &comp); });
            ASSERT_EQ(Status::ok, side_->finish(s, comp));
        }
    }

    void freeze_peer() {
        command(kCmdFreeze);
        auto ack = peer_->channel().recv_text(std::chrono::seconds(20));
        ASSERT_TRUE(ack.has_value());
        ASSERT_EQ("frozen", *ack);
    }

    void kill_peer() {
        peer_->kill(SIGKILL);
        EXPECT_EQ(-SIGKILL, peer_->wait(std::chrono::seconds(10)));
    }

    /**
     * One more operation after the kill, whatever its result. rc without rdma_cm (RoCE,
     * InfiniBand) has no connection to watch: it learns of a dead peer only from a request
     * that is not acknowledged, and the peer's device may have answered every earlier
     * request before the kill (one-sided operations need no peer CPU). Keep-alive traffic
     * for idle endpoints is the protocol layer's (docs/transports.md).
     */
    void poke_peer() {
        std::uint64_t word = 0;
        if (has(kCapPutShort)) {
            (void)ep_put_short(side_->ep(), &word, sizeof(word), side_->peer_addr(0), side_->peer_rkey());
        } else if (has(kCapAmShort)) {
            (void)ep_am_short(side_->ep(), kAmId, 0, &word, sizeof(word));
        }
    }

    /** Waits for on_error; checks it was a peer-class error on our endpoint, reported once. */
    void expect_endpoint_failed() {
        ASSERT_TRUE(side_->progress_until([&] { return errors_.calls > 0; }, std::chrono::seconds(10)))
            << "on_error never fired";
        for (int i = 0; i < 100; ++i) side_->entity().worker().progress();
        EXPECT_EQ(1, errors_.calls);
        EXPECT_EQ(side_->ep(), errors_.ep);
        EXPECT_TRUE(is_peer_error(errors_.status)) << to_string(errors_.status);
    }

    /** Every kind of send on the failed endpoint returns an error (never ok, never no_resource). */
    void expect_sends_fail() {
        Ep* ep = side_->ep();
        std::uint64_t word = 0;
        if (has(kCapAmShort)) {
            Status s = ep_am_short(ep, kAmId, 1, &word, sizeof(word));
            EXPECT_TRUE(is_error(s) && s != Status::no_resource) << to_string(s);
        }
        if (has(kCapAmBcopy)) {
            ssize_t n = ep_am_bcopy(ep, kAmId, [](void*, void*) -> std::size_t { return 0; }, nullptr, 0);
            EXPECT_TRUE(n < 0 && n != static_cast<ssize_t>(Status::no_resource)) << n;
        }
        if (has(kCapPutShort)) {
            Status s = ep_put_short(ep, &word, sizeof(word), side_->peer_addr(0), side_->peer_rkey());
            EXPECT_TRUE(is_error(s) && s != Status::no_resource) << to_string(s);
        }
        if (has(kCapGetBcopy)) {
            CountingCompletion comp;
            Status s = ep_get_bcopy(ep, [](void*, const void*, std::size_t) {}, nullptr, 8, side_->peer_addr(0),
                                    side_->peer_rkey(), &comp);
            EXPECT_TRUE(is_error(s) && s != Status::no_resource) << to_string(s);
            EXPECT_EQ(0, comp.fired);
        }
        CountingCompletion comp;
        Status s = ep_flush(ep, kFlushLocal, &comp);
        EXPECT_TRUE(is_error(s) && s != Status::no_resource) << to_string(s);
        if (has(kCapPending)) {
            PendingReq req{[](PendingReq*) { return Status::ok; }, {}};
            Status p = ep_pending_add(ep, &req, 0);
            EXPECT_TRUE(is_error(p) && p != Status::busy) << to_string(p);
        }
    }

    IfaceAttr attr_;
    std::unique_ptr<loom::test::ForkedPeer> peer_;
    std::unique_ptr<ProcSide> side_;
    ErrorLog errors_;
    int cmd_pipe_[2] = {-1, -1};
    bool env_set_ = false;
};

TEST_P(UctPeerFailureTest, KilledPeerFailsOutstandingOperations) {
    round_trip();
    freeze_peer();
    // Operations the frozen peer will never answer.
    std::vector<std::unique_ptr<CountingCompletion>> pending;
    auto track = [&](Status s, std::unique_ptr<CountingCompletion> comp) {
        ASSERT_TRUE(s == Status::ok || s == Status::in_progress) << to_string(s);
        if (s == Status::in_progress) pending.push_back(std::move(comp));
    };
    Ep* ep = side_->ep();
    std::uint64_t rkey = side_->peer_rkey();
    std::vector<std::uint8_t> data(4096, 0x5a);
    std::uint64_t results[4] = {};
    for (int i = 0; i < 3 && has(kCapGetBcopy); ++i) {
        auto comp = std::make_unique<CountingCompletion>();
        Status s = side_->retry([&] {
            return ep_get_bcopy(ep, [](void*, const void*, std::size_t) {}, nullptr, 64, side_->peer_addr(64 * i), rkey,
                                comp.get());
        });
        track(s, std::move(comp));
    }
    if (has(kCapAtomic64) && (attr_.atomic64_ops & atomic_op_bit(AtomicOp::add))) {
        auto comp = std::make_unique<CountingCompletion>();
        Status s = side_->retry([&] {
            return ep_atomic64_fetch(ep, AtomicOp::add, 1, &results[0], side_->peer_addr(1024), rkey, comp.get());
        });
        track(s, std::move(comp));
    }
    if (has(kCapPutZcopy)) {
        auto comp = std::make_unique<CountingCompletion>();
        Iov iov{data.data(), data.size(), kMemHNull};
        MemH memh = kMemHNull;
        if (side_->entity().md_attr().flags & MdAttr::kNeedMemh) {
            memh = *side_->entity().md().mem_reg(data.data(), data.size(), kAccessLocalRead);
            iov.memh = memh;
        }
        Status s = side_->retry([&] { return ep_put_zcopy(ep, &iov, 1, side_->peer_addr(8192), rkey, comp.get()); });
        track(s, std::move(comp));
        if (memh != kMemHNull) (void)side_->entity().md().mem_dereg(memh);
    }
    {
        auto comp = std::make_unique<CountingCompletion>();
        Status s = side_->retry([&] { return ep_flush(ep, kFlushLocal, comp.get()); });
        track(s, std::move(comp));
    }
    kill_peer();
    poke_peer();
    expect_endpoint_failed();
    for (auto& comp : pending) {
        EXPECT_EQ(1, comp->fired) << "an outstanding operation never completed";
        // Where the peer's CPU serves them (tcp, shm emulation) they fail; true one-sided
        // operations (rc) may have been served by the peer's device before the kill.
        EXPECT_TRUE(comp->status == Status::ok || is_error(comp->status)) << to_string(comp->status);
    }
    expect_sends_fail();
}

TEST_P(UctPeerFailureTest, SendingWhileThePeerDies) {
    if (!has(kCapAmBcopy)) GTEST_SKIP() << "no am_bcopy";
    round_trip();
    std::vector<std::uint8_t> payload(std::min<std::size_t>(attr_.am.max_bcopy, 4096), 0x42);
    auto pack = [](void* dest, void* arg) -> std::size_t {
        auto* p = static_cast<std::vector<std::uint8_t>*>(arg);
        std::memcpy(dest, p->data(), p->size());
        return p->size();
    };
    unsigned sent = 0;
    bool killed = false;
    ssize_t last = 0;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    // Keep sending through the kill until the transport reports the failure.
    while (errors_.calls == 0 && std::chrono::steady_clock::now() < deadline) {
        last = ep_am_bcopy(side_->ep(), kAmId, pack, &payload, 0);
        if (last >= 0) ++sent;
        if (last < 0 && last != static_cast<ssize_t>(Status::no_resource)) break;
        side_->entity().worker().progress();
        if (!killed && sent >= 200) {
            kill_peer();
            killed = true;
        }
    }
    ASSERT_TRUE(killed) << "could not send 200 messages to a live peer";
    expect_endpoint_failed();
    if (last < 0 && last != static_cast<ssize_t>(Status::no_resource)) {
        EXPECT_TRUE(is_error(static_cast<Status>(last)));
    }
    expect_sends_fail();
}

TEST_P(UctPeerFailureTest, PendingRequestsArePurgedAfterFailure) {
    if (!has(kCapPending | kCapAmBcopy)) GTEST_SKIP() << "no pending queue or am_bcopy";
    round_trip();
    freeze_peer();
    // Fill the way to the frozen peer until the transport pushes back.
    std::vector<std::uint8_t> payload(attr_.am.max_bcopy, 0x17);
    auto pack = [](void* dest, void* arg) -> std::size_t {
        auto* p = static_cast<std::vector<std::uint8_t>*>(arg);
        std::memcpy(dest, p->data(), p->size());
        return p->size();
    };
    bool full = false;
    for (int i = 0; i < 100000 && !full; ++i) {
        ssize_t n = ep_am_bcopy(side_->ep(), kAmId, pack, &payload, 0);
        ASSERT_TRUE(n >= 0 || n == static_cast<ssize_t>(Status::no_resource)) << n;
        full = n == static_cast<ssize_t>(Status::no_resource);
        side_->entity().worker().progress();
    }
    if (!full) GTEST_SKIP() << "the transport never ran out of send resources";
    struct Req : PendingReq {
        int runs = 0;
    };
    Req reqs[3];
    for (Req& r : reqs) {
        r.func = [](PendingReq* self) {
            ++static_cast<Req*>(self)->runs;
            return Status::no_resource;
        };
        Status s = ep_pending_add(side_->ep(), &r, 0);
        if (s == Status::busy) GTEST_SKIP() << "resources freed up before the requests could be queued";
        ASSERT_EQ(Status::ok, s);
    }
    kill_peer();
    poke_peer();
    expect_endpoint_failed();
    int purged = 0;
    ep_pending_purge(side_->ep(), [](PendingReq*, void* arg) { ++*static_cast<int*>(arg); }, &purged);
    EXPECT_EQ(3, purged);
    // Purging again finds nothing; destroying the endpoint afterwards is safe.
    ep_pending_purge(side_->ep(), [](PendingReq*, void* arg) { ++*static_cast<int*>(arg); }, &purged);
    EXPECT_EQ(3, purged);
    side_->destroy_ep();
}

TEST_P(UctPeerFailureTest, PeerClosesCleanly) {
    round_trip();
    command(kCmdClose);
    auto ack = peer_->channel().recv_text(std::chrono::seconds(20));
    ASSERT_TRUE(ack.has_value());
    ASSERT_EQ("closed", *ack);
    // A request after the peer left: it fails with the endpoint instead of waiting forever.
    CountingCompletion comp;
    bool outstanding = false;
    if (has(kCapGetBcopy)) {
        Status s = ep_get_bcopy(side_->ep(), [](void*, const void*, std::size_t) {}, nullptr, 8, side_->peer_addr(0),
                                side_->peer_rkey(), &comp);
        outstanding = s == Status::in_progress;
    }
    expect_endpoint_failed();
    if (outstanding) {
        EXPECT_EQ(1, comp.fired);
        EXPECT_TRUE(is_error(comp.status)) << to_string(comp.status);
    }
    expect_sends_fail();
    peer_->channel().send(std::string("bye"));
    EXPECT_EQ(0, peer_->wait(std::chrono::seconds(10)));
}

INSTANTIATE_TEST_SUITE_P(Transports, UctPeerFailureTest, testing::ValuesIn(all_resources()), resource_name);

}  // namespace
}  // namespace loom::uct::test
