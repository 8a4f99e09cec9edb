/**
 * Keep-alive configuration (src/ucp/core/keepalive.cc): LOOM_KEEPALIVE_INTERVAL and
 * LOOM_KEEPALIVE_COUNT reach tcp's sockets as keepalive options and TCP_USER_TIMEOUT, so
 * a silent host fails a connection, idle or busy, within interval x count. What the
 * bound does on a real network (a host that vanishes, a link that flaps) is
 * test/faults/run_net_faults.sh for tcp; rc's probes are Rc/IbPairTest.Keepalive* at the
 * transport layer and UcpSilentPeerTest (below, in the RDMA VM) at the protocol layer.
 */
#include "common/forked_peer.h"
#include "common/silent_device.h"
#include "common/test_helpers.h"
#include "ucp_pair.h"
#include "ucp_side.h"

#include "ucp/api/handles.h"

#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using loom::test::EnvList;
using loom::test::TlSet;
using loom::test::UcpPairTest;

/** The keepalive options of every TCP socket of this process with SO_KEEPALIVE set. */
struct SocketKeepalive {
    int idle, interval, count;
    unsigned user_timeout_ms;
};
std::vector<SocketKeepalive> keepalive_sockets() {
    std::vector<SocketKeepalive> out;
    DIR* dir = opendir("/proc/self/fd");
    if (dir == nullptr) return out;
    while (dirent* e = readdir(dir)) {
        int fd = std::atoi(e->d_name);
        struct stat st;
        if (fd <= 2 || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
        int on = 0, protocol = 0;
        socklen_t len = sizeof(int);
        if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) != 0 || protocol != IPPROTO_TCP)
            continue;
        len = sizeof(int);
        if (getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, &len) != 0 || !on) continue;
        SocketKeepalive k{};
        len = sizeof(int);
        getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &k.idle, &len);
        len = sizeof(int);
        getsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &k.interval, &len);
        len = sizeof(int);
        getsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &k.count, &len);
        len = sizeof(unsigned);
        getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &k.user_timeout_ms, &len);
        out.push_back(k);
    }
    closedir(dir);
    return out;
}

TEST(KeepaliveConfig, TcpGetsTheBoundOfTheProtocolLayer) {
    loom::ucp::ContextConfig config;
    config.keepalive_interval = 3s;
    config.keepalive_count = 4;
    auto o = loom::ucp::keepalive_tcp_overrides(config);
    EXPECT_EQ("3s", o["TCP_KEEPALIVE_IDLE"]);
    EXPECT_EQ("3s", o["TCP_KEEPALIVE_INTERVAL"]);
    EXPECT_EQ("3", o["TCP_KEEPALIVE_COUNT"]) << "idle + interval x (count - 1) = interval x count";
    config.keepalive_count = 1;
    EXPECT_EQ("1", loom::ucp::keepalive_tcp_overrides(config)["TCP_KEEPALIVE_COUNT"]) << "tcp's least";
    config.keepalive_interval = loom::ucs::config::kTimeInf;
    EXPECT_TRUE(loom::ucp::keepalive_tcp_overrides(config).empty()) << "off: tcp keeps its own settings";
    config.keepalive_interval = 3s;
    setenv("LOOM_TCP_KEEPALIVE_COUNT", "9", 1);
    EXPECT_TRUE(loom::ucp::keepalive_tcp_overrides(config).empty()) << "the user's tcp settings win";
    unsetenv("LOOM_TCP_KEEPALIVE_COUNT");
}

class UcpKeepaliveTest : public UcpPairTest {
protected:
    UcpKeepaliveTest() : UcpPairTest(LOOM_FEATURE_TAG) {}

    /** Sends one message and waits for it, so the connection exists. */
    void exchange() {
        std::vector<char> in(8), out(8, 'k');
        loom_status_ptr_t r = loom_tag_recv_nbx(receiver_, in.data(), in.size(), 1, ~0ull, nullptr);
        ASSERT_EQ(LOOM_OK, wait(loom_tag_send_nbx(ep_, out.data(), out.size(), 1, nullptr)));
        ASSERT_EQ(LOOM_OK, wait(r));
    }
};

TEST_P(UcpKeepaliveTest, TcpSocketsCarryTheKeepaliveBound) {
    init(EnvList{{"LOOM_KEEPALIVE_INTERVAL", "3s"}, {"LOOM_KEEPALIVE_COUNT", "4"}});
    exchange();
    auto sockets = keepalive_sockets();
    ASSERT_FALSE(sockets.empty()) << "no TCP socket with SO_KEEPALIVE";
    for (const SocketKeepalive& k : sockets) {
        EXPECT_EQ(3, k.idle);
        EXPECT_EQ(3, k.interval);
        EXPECT_EQ(3, k.count);
        EXPECT_EQ(12000u, k.user_timeout_ms) << "data in flight fails within the same bound";
    }
}

TEST_P(UcpKeepaliveTest, TcpsOwnSettingsWinOverTheProtocolLayers) {
    init(EnvList{{"LOOM_KEEPALIVE_INTERVAL", "3s"}, {"LOOM_TCP_KEEPALIVE_IDLE", "7s"}});
    exchange();
    auto sockets = keepalive_sockets();
    ASSERT_FALSE(sockets.empty());
    for (const SocketKeepalive& k : sockets) {
        EXPECT_EQ(7, k.idle);
        EXPECT_EQ(2, k.interval) << "tcp's default";
        EXPECT_EQ(5, k.count) << "tcp's default";
        EXPECT_EQ(17000u, k.user_timeout_ms);
    }
}

TEST_P(UcpKeepaliveTest, TransportsThatWatchThemselvesCostNoRounds) {
    init({});
    exchange();
    // Neither tcp nor shm needs a probe from the protocol layer: the progress loop never
    // reads the clock for keep-alive.
    EXPECT_EQ(0u, sender_->impl->keepalive_period);
}

const TlSet kSets[] = {{"tcp", "tcp", false}};
INSTANTIATE_TEST_SUITE_P(Tls, UcpKeepaliveTest, testing::ValuesIn(kSets),
                         [](const testing::TestParamInfo<TlSet>& i) { return std::string(i.param.name); });

// --- rc: a peer host that goes silent, at the protocol layer ------------------------------

/**
 * The RDMA device of the same kind beside @p dev (rxe1 for rxe0): the peer's, so that
 * their packets cross the VM's veth wire, where SilentDevice can cut them. Empty when
 * there is none.
 */
std::string sibling_device(const std::string& dev) {
    if (dev.empty() || (dev.back() != '0' && dev.back() != '1')) return {};
    std::string other = dev;
    other.back() = dev.back() == '0' ? '1' : '0';
    return std::ifstream("/sys/class/infiniband/" + other + "/node_type").good() ? other : std::string{};
}

/** The parameters: LOOM_TLS, and whether requests wait on the endpoint when the peer goes silent. */
struct SilentCase {
    const char* tls;
    bool busy;
};

class UcpSilentPeerTest : public testing::TestWithParam<SilentCase> {};

/**
 * A peer host that goes silent (every packet to its device dropped: no reset, no
 * disconnect, its process alive) fails an rc endpoint with LOOM_ERR_PEER_TIMEOUT by the
 * protocol layer's keep-alive, within LOOM_KEEPALIVE_INTERVAL x LOOM_KEEPALIVE_COUNT plus
 * a round; the error handler runs once. Busy: a synchronous send whose acknowledgement
 * cannot come and a flush of eager sends that cannot be acknowledged complete with the
 * error too (rc's own retries never end under Soft-RoCE: only keep-alive notices). The two
 * processes use the two devices of a veth wire (rxe0 and rxe1, siw0 and siw1); with
 * LOOM_IB_CM=verbs, rc is wired up over tcp on lo, which stays up: keep-alive of the rc
 * lane alone notices.
 */
TEST_P(UcpSilentPeerTest, KeepaliveFailsTheEndpointOfAPeerThatWentSilent) {
    const SilentCase& c = GetParam();
    const char* devices = std::getenv("LOOM_NET_DEVICES");
    ASSERT_NE(nullptr, devices) << "run by test/rdma/run_rdma_tests.sh, which names the device";
    const std::string list = devices;
    const std::string mine = list.substr(0, list.find(':'));
    const std::string theirs = sibling_device(mine);
    ASSERT_FALSE(theirs.empty()) << "no second device beside " << mine
                                 << " (the RDMA VM has two of each kind)";
    std::string their_list = list;
    their_list.replace(0, mine.size(), theirs);
    loom::test::ScopedEnv interval("LOOM_KEEPALIVE_INTERVAL", "200ms");
    loom::test::ScopedEnv count("LOOM_KEEPALIVE_COUNT", "5");
    constexpr std::uint64_t kFeatures = LOOM_FEATURE_TAG;
    loom::test::ForkedPeer peer([&](loom::test::ForkedPeer::Channel& ch) {
        setenv("LOOM_NET_DEVICES", their_list.c_str(), 1);
        loom::test::UcpSide me;
        if (!me.open(c.tls, kFeatures) || !me.meet_parent(ch)) return 1;
        std::uint64_t word = 0;
        if (me.wait_with(loom_tag_recv_nbx(me.worker, &word, sizeof(word), 1, ~0ull, nullptr),
                         loom_request_check_status, 30) != LOOM_OK) {
            return 3;
        }
        me.progress_until([] { return false; }, 60);  // alive, progressing, never receiving more; killed
        return 2;
    });
    loom::test::UcpSide me;
    ASSERT_TRUE(me.open(c.tls, kFeatures));
    ASSERT_TRUE(me.meet_child(peer.channel(), true));
    std::uint64_t word = 1;
    ASSERT_EQ(LOOM_OK, me.wait_with(loom_tag_send_nbx(me.ep, &word, sizeof(word), 1, nullptr),
                                    loom_request_check_status, 30));
    // Ten intervals (two keep-alive bounds) with a live peer: nobody is given up.
    const auto live_until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    me.progress_until([&] { return std::chrono::steady_clock::now() >= live_until; });
    ASSERT_EQ(0, me.errors) << "a live peer was given up: " << loom_status_string(me.last_error);

    loom::test::SilentDevice silent(theirs);
    ASSERT_TRUE(silent.why_not().empty()) << "cannot silence the peer: " << silent.why_not();
    const auto start = std::chrono::steady_clock::now();
    std::vector<loom_status_ptr_t> requests;
    if (c.busy) {
        std::uint64_t sync_word = 2;
        requests.push_back(loom_tag_send_sync_nbx(me.ep, &sync_word, sizeof(sync_word), 2, nullptr));
        std::vector<char> eager(2000, 'e');
        for (int i = 0; i < 8; ++i)
            requests.push_back(loom_tag_send_nbx(me.ep, eager.data(), eager.size(), 3, nullptr));
        requests.push_back(loom_ep_flush_nbx(me.ep, nullptr));
        ASSERT_TRUE(LOOM_PTR_IS_PTR(requests.front())) << "the synchronous send completed without its peer";
        ASSERT_TRUE(LOOM_PTR_IS_PTR(requests.back())) << "the flush completed without its peer";
    }
    const bool failed = me.progress_until([&] { return me.errors != 0; }, 30);
    const auto took =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    ASSERT_TRUE(failed) << "the endpoint of a silent peer did not fail within 30 s (keep-alive bound 1 s)";
    EXPECT_EQ(1, me.errors);
    EXPECT_EQ(LOOM_ERR_PEER_TIMEOUT, me.last_error) << loom_status_string(me.last_error);
    for (std::size_t i = 0; i < requests.size(); ++i) {
        const loom_status_t s = me.wait_with(requests[i], loom_request_check_status, 30);
        EXPECT_NE(LOOM_ERR_TIMED_OUT, s) << "request " << i << " still waits after the endpoint failed";
        if (i == 0 || i + 1 == requests.size()) {  // the synchronous send and the flush cannot succeed
            EXPECT_NE(LOOM_OK, s) << "request " << i;
        }
    }
    std::printf("[ SILENT   ] %s%s: the endpoint failed after %lld ms (%s)\n", c.tls, c.busy ? ", busy" : "",
                static_cast<long long>(took.count()), loom_status_string(me.last_error));
    peer.kill(SIGKILL);
    (void)peer.wait();
}

std::vector<SilentCase> silent_cases() {
    std::vector<SilentCase> out;
    for (const char* tls : loom::test::verbs_tls()) {
        out.push_back({tls, false});
        out.push_back({tls, true});
    }
    return out;
}

INSTANTIATE_TEST_SUITE_P(Verbs, UcpSilentPeerTest, testing::ValuesIn(silent_cases()),
                         [](const testing::TestParamInfo<SilentCase>& info) {
                             return loom::test::tls_name(info.param.tls) +
                                    (info.param.busy ? "_busy" : "_idle");
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(UcpSilentPeerTest);

}  // namespace
