/**
 * Keep-alive configuration (src/ucp/core/keepalive.cc): LOOM_KEEPALIVE_INTERVAL and
 * LOOM_KEEPALIVE_COUNT reach tcp's sockets as keepalive options and TCP_USER_TIMEOUT, so
 * a silent host fails a connection, idle or busy, within interval x count. What the
 * bound does on a real network (a host that vanishes, a link that flaps) is
 * test/faults/run_net_faults.sh; rc's probes are Rc/IbPairTest.Keepalive*.
 */
#include "ucp_pair.h"

#include "ucp/api/handles.h"

#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
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

}  // namespace
