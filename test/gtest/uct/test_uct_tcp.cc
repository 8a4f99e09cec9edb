/**
 * tcp-specific behaviour: discovery, addresses and reachability, configuration, the
 * handshake and frame checks against garbage from raw sockets (both directions),
 * connection failures, staging before the connection is up, remote flush semantics,
 * the pending queue's round-robin, the event fd and flush cancel.
 */
#include "test_uct_tcp_common.h"
#include "uct/base/key_table.h"

#include "uct/tcp/tcp_iface.h"

#include "common/test_helpers.h"

#include <dlfcn.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>

#include <array>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

/** epoll_wait() calls this thread made (counted by the interposer below). */
thread_local long t_epoll_waits = 0;

/**
 * Counts this thread's epoll_wait() calls, then makes the call: the gtest binary's
 * definition comes first for the Loom libraries' calls too.
 */
extern "C" int epoll_wait(int epfd, epoll_event* events, int maxevents, int timeout) {
    using Fn = int (*)(int, epoll_event*, int, int);
    static const Fn real = reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, "epoll_wait"));
    ++t_epoll_waits;
    return real(epfd, events, maxevents, timeout);
}

namespace loom::uct::test {
namespace {

using namespace std::chrono_literals;

constexpr AmId kAmId = 4;

struct Received {
    std::vector<std::vector<std::uint8_t>> messages;
    static Status handler(void* arg, void* data, std::size_t length, unsigned) {
        auto* bytes = static_cast<std::uint8_t*>(data);
        static_cast<Received*>(arg)->messages.emplace_back(bytes, bytes + length);
        return Status::ok;
    }
};

std::size_t pack_vector(void* dest, void* arg) {
    auto* v = static_cast<std::vector<std::uint8_t>*>(arg);
    std::memcpy(dest, v->data(), v->size());
    return v->size();
}

TEST(TcpDiscovery, EveryUpIpv4DeviceIsListedIncludingLo) {
    const Component* tcp = find_component("tcp");
    ASSERT_NE(nullptr, tcp);
    ASSERT_EQ(std::vector<std::string>{"tcp"}, tcp->query_md_resources());
    auto md = tcp->md_open("tcp");
    ASSERT_TRUE(md.ok());
    bool lo = false;
    for (const TlResource& r : (*md)->query_tl_resources()) {
        EXPECT_EQ("tcp", r.tl_name);
        EXPECT_EQ(DeviceType::net, r.dev_type);
        lo = lo || r.dev_name == "lo";
    }
    EXPECT_TRUE(lo);
    EXPECT_EQ(Status::no_device, tcp->md_open("nonexistent").status());
    auto iface = (*md)->iface_open({"tcp", "no_such_device0", DeviceType::net}, nullptr, {});
    EXPECT_EQ(Status::no_device, iface.status());
}

TEST_F(TcpTest, AddressesCarryVersionFamilyIpPortAndCookie) {
    const auto& dev = receiver_->device_address();
    ASSERT_EQ(sizeof(tcp::DeviceAddress), dev.size());
    tcp::DeviceAddress d;
    std::memcpy(&d, dev.data(), sizeof(d));
    EXPECT_EQ(tcp::kWireVersion, d.version);
    EXPECT_EQ(tcp::kFamilyInet, d.family);
    EXPECT_EQ(htonl(INADDR_LOOPBACK), d.ip);
    EXPECT_NE(0, receiver_port());
    EXPECT_NE(0u, receiver_cookie());
    EXPECT_NE(receiver_cookie(), [&] {
        tcp::IfaceAddress a;
        std::memcpy(&a, sender_->iface_address().data(), sizeof(a));
        return a.cookie;
    }());
    Fd raw(raw_connect(receiver_port()));
    EXPECT_GE(raw.fd, 0) << "the iface address names a listening port";
}

TEST_F(TcpTest, LoopbackReachesOnlyLoopbackAddresses) {
    auto dev = receiver_->device_address();
    std::string reason;
    EXPECT_TRUE(sender_->iface().is_reachable(dev.data(), dev.size(), receiver_->iface_address().data(),
                                              receiver_->iface_address().size(), &reason))
        << reason;
    tcp::DeviceAddress other{tcp::kWireVersion, tcp::kFamilyInet, htonl(0x0a010203)};  // 10.1.2.3
    std::memcpy(dev.data(), &other, sizeof(other));
    EXPECT_FALSE(sender_->iface().is_reachable(dev.data(), dev.size(), receiver_->iface_address().data(),
                                               receiver_->iface_address().size(), &reason));
    EXPECT_NE(std::string::npos, reason.find("127.0.0.0/8")) << reason;
    tcp::DeviceAddress v6{tcp::kWireVersion, 6, htonl(INADDR_LOOPBACK)};
    std::memcpy(dev.data(), &v6, sizeof(v6));
    EXPECT_FALSE(sender_->iface().is_reachable(dev.data(), dev.size(), receiver_->iface_address().data(),
                                               receiver_->iface_address().size(), &reason));
    EXPECT_NE(std::string::npos, reason.find("family")) << reason;
    // 127.0.0.1 of another network namespace (a container, a test host) is another machine.
    tcp::DeviceAddress mine;
    std::memcpy(&mine, receiver_->device_address().data(), sizeof(mine));
    tcp::DeviceAddress elsewhere = mine;
    elsewhere.net_stack ^= 1;
    std::memcpy(dev.data(), &elsewhere, sizeof(elsewhere));
    EXPECT_FALSE(sender_->iface().is_reachable(dev.data(), dev.size(), receiver_->iface_address().data(),
                                               receiver_->iface_address().size(), &reason));
    EXPECT_NE(std::string::npos, reason.find("another host")) << reason;
}

TEST_F(TcpTest, OtherDevicesDoNotReachLoopback) {
    std::optional<Resource> other;
    for (const Resource& r : all_resources()) {
        if (r.tl.tl_name == "tcp" && r.tl.dev_name != "lo") other = r;
    }
    if (!other) GTEST_SKIP() << "no tcp device besides lo";
    Entity ent(*other);
    std::string reason;
    EXPECT_FALSE(ent.iface().is_reachable(receiver_->device_address().data(), receiver_->device_address().size(),
                                          receiver_->iface_address().data(), receiver_->iface_address().size(),
                                          &reason));
    EXPECT_NE(std::string::npos, reason.find("loopback")) << reason;
}

TEST_F(TcpTest, ConfigOverridesApplyAndBadValuesFail) {
    IfaceParams params;
    params.config_overrides = {{"TCP_SEG_SIZE", "16k"}};
    auto iface = receiver_->md().iface_open(lo_.tl, &receiver_->worker(), params);
    ASSERT_TRUE(iface.ok());
    IfaceAttr attr;
    ASSERT_EQ(Status::ok, (*iface)->query(attr));
    // A segment of payload: the headers come on top.
    EXPECT_EQ(16384u, attr.am.max_bcopy);
    EXPECT_EQ(16384u, attr.put.max_bcopy);
    EXPECT_EQ(16384u, attr.am.max_short);
    EXPECT_EQ(16384u, attr.put.max_short);

    // A port range: the first free port of it is used.
    Fd probe(::socket(AF_INET, SOCK_STREAM, 0));
    sockaddr_in any{};
    any.sin_family = AF_INET;
    any.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(0, ::bind(probe.fd, reinterpret_cast<sockaddr*>(&any), sizeof(any)));
    socklen_t len = sizeof(any);
    ASSERT_EQ(0, ::getsockname(probe.fd, reinterpret_cast<sockaddr*>(&any), &len));
    unsigned port = ntohs(any.sin_port);
    ::close(probe.fd);
    probe.fd = -1;
    params.config_overrides = {{"TCP_PORT_RANGE", std::to_string(port) + "-" + std::to_string(port + 50)}};
    auto ranged = receiver_->md().iface_open(lo_.tl, &receiver_->worker(), params);
    if (ranged.ok()) {
        std::vector<std::uint8_t> addr(sizeof(tcp::IfaceAddress));
        ASSERT_EQ(Status::ok, (*ranged)->get_address(addr.data()));
        tcp::IfaceAddress a;
        std::memcpy(&a, addr.data(), sizeof(a));
        EXPECT_GE(ntohs(a.port), port);
        EXPECT_LE(ntohs(a.port), port + 50);
    }

    for (auto [key, value] : {std::pair{"TCP_PORT_RANGE", "9-3"}, {"TCP_SEG_SIZE", "100"}, {"TCP_NODELAY", "maybe"}}) {
        loom::test::LogCapture capture("warn");
        params.config_overrides = {{key, value}};
        auto bad = receiver_->md().iface_open(lo_.tl, &receiver_->worker(), params);
        EXPECT_EQ(Status::invalid_config, bad.status()) << key << "=" << value;
        EXPECT_EQ(1, capture.count(value)) << capture.text();
    }
}

/** Keepalive settings of this process's sockets connected to @p port: {SO_KEEPALIVE, idle, interval, count}. */
std::vector<std::array<int, 4>> keepalive_of_sockets_to(std::uint16_t port) {
    std::vector<std::array<int, 4>> found;
    for (int fd = 0; fd < 4096; ++fd) {
        sockaddr_in peer{};
        socklen_t len = sizeof(peer);
        if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0 || peer.sin_family != AF_INET ||
            ntohs(peer.sin_port) != port) {
            continue;
        }
        std::array<int, 4> v{};
        socklen_t l = sizeof(int);
        (void)::getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &v[0], &l);
        (void)::getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &v[1], &l);
        (void)::getsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &v[2], &l);
        (void)::getsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &v[3], &l);
        found.push_back(v);
    }
    return found;
}

TEST_F(TcpTest, KeepaliveProbesAreConfigured) {
    for (bool enabled : {true, false}) {
        SCOPED_TRACE(enabled ? "enabled" : "disabled");
        IfaceParams params;
        params.config_overrides = {{"TCP_KEEPALIVE_IDLE", enabled ? "7s" : "inf"},
                                   {"TCP_KEEPALIVE_INTERVAL", "3s"},
                                   {"TCP_KEEPALIVE_COUNT", "4"}};
        Worker worker;
        auto opened = sender_->md().iface_open(lo_.tl, &worker, params);
        ASSERT_TRUE(opened.ok());
        EpParams ep_params;
        ep_params.dev_addr = receiver_->device_address().data();
        ep_params.dev_addr_len = receiver_->device_address().size();
        ep_params.iface_addr = receiver_->iface_address().data();
        ep_params.iface_addr_len = receiver_->iface_address().size();
        auto ep = (*opened)->ep_create(ep_params);
        ASSERT_TRUE(ep.ok());
        auto found = keepalive_of_sockets_to(receiver_port());
        ASSERT_EQ(1u, found.size());
        if (enabled) {
            EXPECT_EQ((std::array<int, 4>{1, 7, 3, 4}), found[0]);
        } else {
            EXPECT_EQ(0, found[0][0]);
        }
        (*opened)->ep_destroy(*ep);
    }
}

/** The fds registered in any epoll set of this process (from /proc/self/fdinfo). */
std::set<int> fds_in_epoll_sets() {
    std::set<int> found;
    for (int fd = 0; fd < 4096; ++fd) {
        char link[64] = {};
        std::string path = "/proc/self/fd/" + std::to_string(fd);
        ssize_t n = ::readlink(path.c_str(), link, sizeof(link) - 1);
        if (n <= 0 || std::string(link, static_cast<std::size_t>(n)) != "anon_inode:[eventpoll]") continue;
        std::ifstream info("/proc/self/fdinfo/" + std::to_string(fd));
        std::string word;
        while (info >> word) {
            int tfd;
            if (word == "tfd:" && info >> tfd) found.insert(tfd);
        }
    }
    return found;
}

/** The fd of this process's socket whose local (@p local) or remote port is @p port, or -1. */
int socket_with_port(std::uint16_t port, bool local) {
    for (int fd = 0; fd < 4096; ++fd) {
        sockaddr_in addr{}, peer{};
        socklen_t len = sizeof(addr), plen = sizeof(peer);
        int rc = local ? ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                       : ::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len);
        if (rc == 0 && addr.sin_family == AF_INET && ntohs(addr.sin_port) == port &&
            ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) == 0) {
            return fd;
        }
    }
    return -1;
}

/** The kernel's default congestion control (what a fresh socket gets). */
std::string system_congestion() {
    Fd fd(::socket(AF_INET, SOCK_STREAM, 0));
    char name[16] = {};
    socklen_t len = sizeof(name);
    if (::getsockopt(fd.fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "";
    return name;
}

/** TCP_CONGESTION of socket @p fd, or "" when it cannot be read. */
std::string congestion_of(int fd) {
    char name[16] = {};
    socklen_t len = sizeof(name) - 1;
    if (::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "";
    return name;
}

/**
 * LOOM_TCP_CONGESTION on loopback. auto: a connection keeps the system's algorithm for
 * small messages, uses reno from its first bulk frame on, and returns to the system's
 * after kBulkLinger small frames in a row; system: never switches; a name: that one always.
 */
TEST_F(TcpTest, CongestionControlFollowsBulkTransfersOnLoopback) {
    Fd probe(::socket(AF_INET, SOCK_STREAM, 0));
    if (::setsockopt(probe.fd, IPPROTO_TCP, TCP_CONGESTION, "reno", 4) != 0) {
        GTEST_SKIP() << "this kernel refuses reno to this process";
    }
    const std::string system = system_congestion();
    ASSERT_FALSE(system.empty());
    Received got;
    ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, Received::handler, &got, 0));
    std::vector<std::uint8_t> bulk(tcp::kBulkFrame, 7);

    // One sender iface per setting; returns the congestion control of its socket after
    // connecting, after one bulk frame, after kBulkLinger - 1 small frames, after one more.
    auto run = [&](const char* setting) -> std::vector<std::string> {
        IfaceParams params;
        params.config_overrides = {{"TCP_CONGESTION", setting}};
        Worker worker;
        auto opened = sender_->md().iface_open(lo_.tl, &worker, params);
        EXPECT_TRUE(opened.ok());
        if (!opened.ok() || (*opened)->progress_enable() != Status::ok) return {};
        EpParams ep_params;
        ep_params.dev_addr = receiver_->device_address().data();
        ep_params.dev_addr_len = receiver_->device_address().size();
        ep_params.iface_addr = receiver_->iface_address().data();
        ep_params.iface_addr_len = receiver_->iface_address().size();
        auto created = (*opened)->ep_create(ep_params);
        EXPECT_TRUE(created.ok());
        if (!created.ok()) return {};
        Ep* ep = *created;
        const std::size_t before = got.messages.size();
        std::size_t sent = 0;
        auto all = [&] {
            progress();
            worker.progress();
        };
        auto send_small = [&] {
            ++sent;
            auto deadline = std::chrono::steady_clock::now() + 10s;
            while (ep_am_short(ep, kAmId, sent, nullptr, 0) != Status::ok) {
                if (std::chrono::steady_clock::now() > deadline) return false;
                all();
            }
            return true;
        };
        auto delivered = [&] {
            auto deadline = std::chrono::steady_clock::now() + 10s;
            while (got.messages.size() != before + sent) {
                if (std::chrono::steady_clock::now() > deadline) return false;
                all();
            }
            return true;
        };
        std::vector<std::string> seen;
        EXPECT_TRUE(send_small() && delivered());
        const int fd = socket_with_port(receiver_port(), false);
        EXPECT_GE(fd, 0);
        seen.push_back(congestion_of(fd));
        Iov iov{bulk.data(), bulk.size(), kMemHNull};
        CountingCompletion comp;
        Status s;
        auto deadline = std::chrono::steady_clock::now() + 10s;
        while ((s = ep_am_zcopy(ep, kAmId, nullptr, 0, &iov, 1, 0, &comp)) == Status::no_resource &&
               std::chrono::steady_clock::now() < deadline) {
            all();
        }
        EXPECT_TRUE(s == Status::ok || s == Status::in_progress) << to_string(s);
        ++sent;
        EXPECT_TRUE(delivered());
        seen.push_back(congestion_of(fd));
        for (unsigned i = 0; i + 1 < tcp::kBulkLinger; ++i) EXPECT_TRUE(send_small());
        seen.push_back(congestion_of(fd));
        EXPECT_TRUE(send_small() && delivered());
        seen.push_back(congestion_of(fd));
        (*opened)->ep_destroy(ep);
        return seen;
    };

    EXPECT_EQ((std::vector<std::string>{system, system == "reno" ? system : "reno", system == "reno" ? system : "reno",
                                        system}),
              run("auto"));
    EXPECT_EQ((std::vector<std::string>{system, system, system, system}), run("system"));
    EXPECT_EQ((std::vector<std::string>{"reno", "reno", "reno", "reno"}), run("reno"));

    // A name the kernel does not know, or one that cannot name an algorithm: refused at open.
    for (const char* value : {"no-such-cc", "Bad Name"}) {
        loom::test::LogCapture capture("warn");
        IfaceParams params;
        params.config_overrides = {{"TCP_CONGESTION", value}};
        auto bad = sender_->md().iface_open(lo_.tl, &sender_->worker(), params);
        EXPECT_EQ(Status::invalid_config, bad.status()) << value;
        EXPECT_EQ(1, capture.count(value)) << capture.text();
    }
}

/**
 * Short messages may fill a segment: they are written from the caller's memory, and what
 * the socket does not take is copied before am_short returns (the caller may reuse its
 * buffer at once). A small send buffer makes every one of them a partial write.
 */
TEST_F(TcpTest, ShortMessagesFillASegmentAndSurvivePartialWrites) {
    Received got;
    ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, Received::handler, &got, 0));
    IfaceParams params;
    params.config_overrides = {{"TCP_SNDBUF", "16k"}};
    Worker worker;
    auto opened = sender_->md().iface_open(lo_.tl, &worker, params);
    ASSERT_TRUE(opened.ok());
    ASSERT_EQ(Status::ok, (*opened)->progress_enable());
    IfaceAttr attr;
    ASSERT_EQ(Status::ok, (*opened)->query(attr));
    EXPECT_EQ(65536u, attr.am.max_short) << "a 64 KiB message is one short frame";
    EXPECT_EQ(attr.am.max_short, attr.put.max_short);
    EpParams ep_params;
    ep_params.dev_addr = receiver_->device_address().data();
    ep_params.dev_addr_len = receiver_->device_address().size();
    ep_params.iface_addr = receiver_->iface_address().data();
    ep_params.iface_addr_len = receiver_->iface_address().size();
    auto created = (*opened)->ep_create(ep_params);
    ASSERT_TRUE(created.ok());
    Ep* ep = *created;
    auto all = [&] {
        progress();
        worker.progress();
    };
    std::vector<std::uint8_t> buffer(attr.am.max_short);
    std::vector<std::vector<std::uint8_t>> sent;
    for (std::uint64_t m = 0; m < 6; ++m) {
        for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<std::uint8_t>(i * 13 + m * 29);
        Status s = Status::no_resource;
        ASSERT_TRUE(wait_for([&] {
            all();
            s = ep_am_short(ep, kAmId, m, buffer.data(), static_cast<unsigned>(buffer.size()));
            return s != Status::no_resource;
        }));
        ASSERT_EQ(Status::ok, s) << "message " << m;
        std::vector<std::uint8_t> whole(reinterpret_cast<std::uint8_t*>(&m), reinterpret_cast<std::uint8_t*>(&m) + 8);
        whole.insert(whole.end(), buffer.begin(), buffer.end());
        sent.push_back(std::move(whole));
        std::fill(buffer.begin(), buffer.end(), 0xee);  // reused at once
    }
    ASSERT_TRUE(wait_for([&] {
        worker.progress();
        return got.messages.size() == sent.size();
    }));
    for (std::size_t m = 0; m < sent.size(); ++m) EXPECT_TRUE(sent[m] == got.messages[m]) << "message " << m;
    std::vector<std::uint8_t> too_big(attr.am.max_short + 1);
    EXPECT_EQ(Status::exceeds_limit,
              ep_am_short(ep, kAmId, 0, too_big.data(), static_cast<unsigned>(too_big.size())));
    (*opened)->ep_destroy(ep);
}

TEST_F(TcpTest, GarbageConnectionIsClosedWithOneLogLine) {
    loom::test::LogCapture capture("warn");
    Fd raw(raw_connect(receiver_port()));
    ASSERT_GE(raw.fd, 0);
    std::vector<std::uint8_t> junk(64, 0x5a);
    ASSERT_EQ(64, ::send(raw.fd, junk.data(), junk.size(), MSG_NOSIGNAL));
    ASSERT_TRUE(wait_closed(raw.fd));
    EXPECT_EQ(1, capture.count("not a Loom tcp handshake")) << capture.text();
    // The iface still serves well-behaved peers.
    Received got;
    ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, Received::handler, &got, 0));
    Ep* ep = sender_->connect_to(*receiver_);
    ASSERT_EQ(Status::ok, ep_am_short(ep, kAmId, 1, nullptr, 0));
    EXPECT_TRUE(wait_for([&] { return got.messages.size() == 1; }));
}

TEST_F(TcpTest, AnIfaceWithoutConnectionsDoesNotPollAtEveryProgressCall) {
    // Its only member is the listening socket, and an epoll_wait() per progress call was
    // all of an idle iface's cost (a system call, 3 us where a hypervisor traps them: 1.5
    // us instead of 0.39 for a tag ping-pong over shm with tcp loaded). It looks at most
    // once per 16 calls, and when 100 us have passed.
    constexpr int kCalls = 1600;
    const long before = t_epoll_waits;
    for (int i = 0; i < kCalls; ++i) (void)receiver_->worker().progress();
    EXPECT_LE(t_epoll_waits - before, kCalls / 16) << "epoll_wait calls for " << kCalls << " progress calls";
    // A peer still connects to it, and once connected it polls the connection.
    Received got;
    ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, Received::handler, &got, 0));
    Ep* ep = sender_->connect_to(*receiver_);
    for (std::uint64_t i = 0; i < 100; ++i) {
        ASSERT_EQ(Status::ok, ep_am_short(ep, kAmId, i, nullptr, 0));
        ASSERT_TRUE(wait_for([&] { return got.messages.size() == i + 1; })) << "message " << i;
    }
}

TEST_F(TcpTest, HandshakeWithAnotherIfacesCookieIsRejected) {
    loom::test::LogCapture capture("warn");
    Fd raw(raw_connect(receiver_port()));
    tcp::ConnReply reply{};
    EXPECT_FALSE(raw_handshake(raw.fd, receiver_cookie() ^ 1, &reply));
    EXPECT_EQ(tcp::status_to_wire(Status::rejected), reply.status);
    EXPECT_TRUE(wait_closed(raw.fd));
    EXPECT_EQ(1, capture.count("meant for another iface")) << capture.text();
}

TEST_F(TcpTest, MalformedFramesCloseTheConnectionWithOneLogLine) {
    struct Case {
        const char* name;
        tcp::FrameHeader header;
        const char* log;
    };
    std::vector<Case> cases = {
        {"bad magic", {0x11, tcp::FrameType::am, kAmId, 0, 0}, "bad frame magic"},
        {"am too long", {tcp::kFrameMagic, tcp::FrameType::am, kAmId, 0, 1u << 30}, "longer than LOOM_TCP_MAX_AM_SIZE"},
        {"unknown request type", {tcp::kFrameMagic, static_cast<tcp::FrameType>(9), 0, 0, 0}, "unknown frame type"},
        {"unknown reply type", {tcp::kFrameMagic, static_cast<tcp::FrameType>(99), 0, 0, 0}, "unknown frame type"},
        {"unsolicited reply", {tcp::kFrameMagic, tcp::FrameType::put_ack, 0, 0, 0}, "without a matching request"},
        {"put too long", {tcp::kFrameMagic, tcp::FrameType::put, 0, 0, 0xffffffffu}, "put frame length"},
        {"short get", {tcp::kFrameMagic, tcp::FrameType::get_req, 0, 0, 3}, "get request length"},
        {"bad atomic op", {tcp::kFrameMagic, tcp::FrameType::atomic_req, 17, 0, sizeof(tcp::AtomicHeader)},
         "atomic request"},
    };
    Received got;
    ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, Received::handler, &got, 0));
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        loom::test::LogCapture capture("warn");
        Fd raw(raw_connect(receiver_port()));
        ASSERT_TRUE(raw_handshake(raw.fd, receiver_cookie()));
        // One good message first: the connection works until the bad frame.
        tcp::FrameHeader good{tcp::kFrameMagic, tcp::FrameType::am, kAmId, 0, 8};
        std::uint64_t payload = 42;
        ASSERT_EQ(8, ::send(raw.fd, &good, sizeof(good), MSG_NOSIGNAL));
        ASSERT_EQ(8, ::send(raw.fd, &payload, sizeof(payload), MSG_NOSIGNAL));
        std::vector<std::uint8_t> bad(64, 0);
        std::memcpy(bad.data(), &c.header, sizeof(c.header));
        ASSERT_EQ(64, ::send(raw.fd, bad.data(), bad.size(), MSG_NOSIGNAL));
        ASSERT_TRUE(wait_closed(raw.fd));
        EXPECT_EQ(1, capture.count("malformed frame")) << capture.text();
        EXPECT_EQ(1, capture.count(c.log)) << capture.text();
    }
    EXPECT_EQ(cases.size(), got.messages.size());
}

/** A raw listening socket that plays the target side of the handshake. */
class FakeTarget {
public:
    FakeTarget() {
        listen_.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        (void)::bind(listen_.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
        (void)::listen(listen_.fd, 4);
        socklen_t len = sizeof(addr);
        (void)::getsockname(listen_.fd, reinterpret_cast<sockaddr*>(&addr), &len);
        port_ = addr.sin_port;
    }

    std::vector<std::uint8_t> dev_address() const {
        tcp::DeviceAddress d{tcp::kWireVersion, tcp::kFamilyInet, htonl(INADDR_LOOPBACK), tcp::net_stack_id()};
        return {reinterpret_cast<const std::uint8_t*>(&d), reinterpret_cast<const std::uint8_t*>(&d) + sizeof(d)};
    }
    std::vector<std::uint8_t> iface_address() const {
        tcp::IfaceAddress a{tcp::kWireVersion, port_, kCookie};
        return {reinterpret_cast<const std::uint8_t*>(&a), reinterpret_cast<const std::uint8_t*>(&a) + sizeof(a)};
    }

    /** Accepts the endpoint's connection and reads its ConnRequest (blocking, bounded by SO_RCVTIMEO). */
    bool accept_request(tcp::ConnRequest& req) {
        pollfd pfd{listen_.fd, POLLIN, 0};
        if (::poll(&pfd, 1, 5000) != 1) return false;
        conn_.fd = ::accept4(listen_.fd, nullptr, nullptr, SOCK_CLOEXEC);
        timeval tv{5, 0};
        (void)::setsockopt(conn_.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        return ::recv(conn_.fd, &req, sizeof(req), MSG_WAITALL) == static_cast<ssize_t>(sizeof(req));
    }

    bool send(const void* data, std::size_t len) {
        return ::send(conn_.fd, data, len, MSG_NOSIGNAL) == static_cast<ssize_t>(len);
    }

    bool accept_and_reply(Status status = Status::ok) {
        tcp::ConnRequest req;
        if (!accept_request(req) || req.magic != tcp::kHandshakeMagic || req.target_cookie != kCookie) return false;
        tcp::ConnReply reply{tcp::kHandshakeMagic, tcp::kWireVersion, tcp::status_to_wire(status), {},
                             req.source_cookie};
        return send(&reply, sizeof(reply));
    }

    int fd() const { return conn_.fd; }

    static constexpr std::uint64_t kCookie = 0xfeedface12345678ull;

private:
    Fd listen_;
    Fd conn_;
    std::uint16_t port_ = 0;
};

TEST_F(TcpTest, MalformedReplyFailsTheEndpoint) {
    struct Case {
        const char* name;
        std::vector<std::uint8_t> bytes;
        const char* log;
    };
    auto frame = [](tcp::FrameType type, std::uint8_t arg, std::uint32_t length) {
        tcp::FrameHeader h{tcp::kFrameMagic, type, arg, 0, length};
        return std::vector<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&h), reinterpret_cast<std::uint8_t*>(&h) + 8);
    };
    std::vector<Case> cases = {
        {"reply without request", frame(tcp::FrameType::get_rep, 0, 0), "without a matching request"},
        {"nack with a payload", frame(tcp::FrameType::nack, 0, 4), "nack length"},
        {"bad magic", std::vector<std::uint8_t>(8, 0x77), "bad frame magic"},
        {"unknown type", frame(static_cast<tcp::FrameType>(200), 0, 0), "unknown frame type"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        loom::test::LogCapture capture("warn");
        FakeTarget target;
        EpErrors errors;
        auto ep = create_ep(*sender_, target.dev_address(), target.iface_address(), &errors);
        ASSERT_TRUE(ep.ok());
        spin(200);  // the connect completes and the handshake request goes out
        ASSERT_TRUE(target.accept_and_reply());
        ASSERT_TRUE(target.send(c.bytes.data(), c.bytes.size()));
        ASSERT_TRUE(wait_for([&] { return errors.calls > 0; }));
        EXPECT_EQ(Status::malformed_packet, errors.status);
        EXPECT_EQ(1, capture.count("malformed frame")) << capture.text();
        EXPECT_EQ(1, capture.count(c.log)) << capture.text();
        // Sends on the failed endpoint report the failure.
        EXPECT_EQ(Status::malformed_packet, ep_am_short(*ep, kAmId, 0, nullptr, 0));
        sender_->iface().ep_destroy(*ep);
    }
}

TEST_F(TcpTest, TargetRefusingTheHandshakeFailsTheEndpoint) {
    loom::test::LogCapture capture("warn");
    FakeTarget target;
    EpErrors errors;
    auto ep = create_ep(*sender_, target.dev_address(), target.iface_address(), &errors);
    ASSERT_TRUE(ep.ok());
    // A get staged before the connection is up fails with the endpoint.
    std::uint64_t word = 0;
    CountingCompletion comp;
    Rkey rkey;
    PackedRegionKey packed{kRegionKeyVersion, kAccessAll, 0, 0x1000, 64, 99};
    auto unpacked = sender_->md().component().rkey_unpack(reinterpret_cast<std::uint8_t*>(&packed), sizeof(packed));
    ASSERT_TRUE(unpacked.ok());
    rkey = *unpacked;
    EXPECT_EQ(Status::in_progress, ep_atomic64_fetch(*ep, AtomicOp::add, 1, &word, 0x1000, rkey.rkey, &comp));
    spin(200);
    ASSERT_TRUE(target.accept_and_reply(Status::version_mismatch));
    ASSERT_TRUE(wait_for([&] { return errors.calls > 0; }));
    EXPECT_EQ(Status::version_mismatch, errors.status);
    EXPECT_EQ(1, comp.fired);
    EXPECT_EQ(Status::version_mismatch, comp.status);
    EXPECT_EQ(1, capture.count("refused the connection")) << capture.text();
    sender_->md().component().rkey_release(rkey);
    sender_->iface().ep_destroy(*ep);
}

TEST_F(TcpTest, RefusedConnectionFailsAfterRetries) {
    // A port nobody listens on: bind one, learn it, close it.
    Fd probe(::socket(AF_INET, SOCK_STREAM, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(0, ::bind(probe.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)));
    socklen_t len = sizeof(addr);
    ASSERT_EQ(0, ::getsockname(probe.fd, reinterpret_cast<sockaddr*>(&addr), &len));
    ::close(probe.fd);
    probe.fd = -1;
    tcp::IfaceAddress closed{tcp::kWireVersion, addr.sin_port, 77};
    std::vector<std::uint8_t> iface(reinterpret_cast<std::uint8_t*>(&closed),
                                    reinterpret_cast<std::uint8_t*>(&closed) + sizeof(closed));

    for (bool lazy : {false, true}) {
        SCOPED_TRACE(lazy ? "connect on first use" : "connect at creation");
        IfaceParams params;
        params.config_overrides = {{"TCP_CONN_RETRIES", "2"}, {"TCP_CONN_RETRY_INTERVAL", "1ms"}};
        Worker worker;
        auto opened = sender_->md().iface_open(lo_.tl, &worker, params);
        ASSERT_TRUE(opened.ok());
        Iface& client = **opened;
        loom::test::LogCapture capture("warn");
        EpErrors errors;
        EpParams ep_params;
        ep_params.dev_addr = receiver_->device_address().data();
        ep_params.dev_addr_len = receiver_->device_address().size();
        ep_params.iface_addr = iface.data();
        ep_params.iface_addr_len = iface.size();
        ep_params.on_error = EpErrors::on_error;
        ep_params.on_error_arg = &errors;
        ep_params.connect_on_first_use = lazy;
        auto ep = client.ep_create(ep_params);
        ASSERT_TRUE(ep.ok()) << "ep_create returns at once; the failure comes through on_error";
        if (lazy) {
            // Nothing is tried before the first operation; then it fails as an eager one does.
            for (int i = 0; i < 200; ++i) (void)iface_progress(&client);
            EXPECT_EQ(0, errors.calls);
            EXPECT_EQ(0, capture.count("connect to")) << capture.text();
            EXPECT_EQ(Status::ok, ep_am_short(*ep, kAmId, 1, nullptr, 0)) << "staged";
        }
        auto deadline = std::chrono::steady_clock::now() + 10s;
        while (errors.calls == 0 && std::chrono::steady_clock::now() < deadline)
            (void)iface_progress(&client);
        EXPECT_EQ(1, errors.calls);
        EXPECT_EQ(Status::connection_refused, errors.status);
        EXPECT_EQ(1, capture.count("connect to")) << capture.text();
        client.ep_destroy(*ep);
    }
}

TEST_F(TcpTest, OnErrorMayDestroyTheEndpoint) {
    FakeTarget target;
    struct Ctx {
        Iface* iface;
        int calls = 0;
    } ctx{&sender_->iface()};
    EpParams params;
    auto dev = target.dev_address();
    auto iface = target.iface_address();
    params.dev_addr = dev.data();
    params.dev_addr_len = dev.size();
    params.iface_addr = iface.data();
    params.iface_addr_len = iface.size();
    params.on_error = [](void* arg, Ep* ep, Status) {
        auto* c = static_cast<Ctx*>(arg);
        ++c->calls;
        c->iface->ep_destroy(ep);
    };
    params.on_error_arg = &ctx;
    auto ep = sender_->iface().ep_create(params);
    ASSERT_TRUE(ep.ok());
    spin(200);
    ASSERT_TRUE(target.accept_and_reply());
    std::vector<std::uint8_t> junk(8, 0);
    ASSERT_TRUE(target.send(junk.data(), junk.size()));
    loom::test::LogCapture capture("error");
    EXPECT_TRUE(wait_for([&] { return ctx.calls > 0; }));
    for (int i = 0; i < 100; ++i) progress();
    EXPECT_EQ(1, ctx.calls);
}

TEST_F(TcpTest, SendsBeforeTheConnectionIsUpAreStagedInOrder) {
    Received got;
    ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, Received::handler, &got, 0));
    Ep* ep = sender_->connect_to(*receiver_);
    // Nothing progressed yet: the handshake cannot have completed.
    std::vector<std::uint8_t> big(sender_->attr().am.max_bcopy, 3);
    for (std::uint64_t i = 0; i < 5; ++i) ASSERT_EQ(Status::ok, ep_am_short(ep, kAmId, i, nullptr, 0));
    ssize_t first = ep_am_bcopy(ep, kAmId, pack_vector, &big, 0);
    // The staging buffer holds one segment: a second full-size frame must wait.
    ssize_t second = ep_am_bcopy(ep, kAmId, pack_vector, &big, 0);
    EXPECT_EQ(static_cast<ssize_t>(Status::no_resource), second);
    ASSERT_TRUE(first == static_cast<ssize_t>(big.size()) || first == static_cast<ssize_t>(Status::no_resource));
    ASSERT_TRUE(wait_for([&] { return got.messages.size() >= 5u + (first > 0 ? 1 : 0); }));
    for (std::uint64_t i = 0; i < 5; ++i) {
        std::uint64_t seq;
        std::memcpy(&seq, got.messages[i].data(), 8);
        EXPECT_EQ(i, seq);
    }
    if (first > 0) {
        EXPECT_EQ(big, got.messages[5]);
    }
}

TEST_F(TcpTest, LargeActiveMessagesStreamIntoABufferOfTheirOwn) {
    Received got;
    ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, Received::handler, &got, 0));
    Ep* ep = sender_->connect_to(*receiver_);
    const IfaceAttr& attr = sender_->attr();
    ASSERT_GT(attr.am.max_zcopy, attr.am.max_bcopy);
    // The receive buffer holds a segment and kRxHeadroom bytes of headers: with the frame
    // header and this test's 8-byte header, the first size is the largest it takes, the
    // second one byte more (streamed).
    const std::size_t fits = attr.am.max_bcopy + tcp::kRxHeadroom - sizeof(tcp::FrameHeader) - 8;
    std::vector<std::size_t> sizes = {fits, fits + 1, 1u << 20, attr.am.max_zcopy - 16, 100};
    std::vector<std::vector<std::uint8_t>> sent;
    for (std::size_t size : sizes) {
        std::vector<std::uint8_t> data(size);
        for (std::size_t i = 0; i < size; ++i) data[i] = static_cast<std::uint8_t>(i * 7 + size);
        std::uint64_t header = size;
        Iov iov[2] = {{data.data(), size / 2, kMemHNull}, {data.data() + size / 2, size - size / 2, kMemHNull}};
        CountingCompletion comp;
        Status s;
        while ((s = ep_am_zcopy(ep, kAmId, &header, sizeof(header), iov, 2, 0, &comp)) == Status::no_resource) {
            progress();
        }
        ASSERT_TRUE(s == Status::ok || s == Status::in_progress) << to_string(s);
        if (s == Status::in_progress) {
            ASSERT_TRUE(wait_for([&] { return comp.fired == 1; }));
        }
        std::vector<std::uint8_t> whole(reinterpret_cast<std::uint8_t*>(&header),
                                        reinterpret_cast<std::uint8_t*>(&header) + sizeof(header));
        whole.insert(whole.end(), data.begin(), data.end());
        sent.push_back(std::move(whole));
    }
    ASSERT_TRUE(wait_for([&] { return got.messages.size() == sizes.size(); }));
    for (std::size_t i = 0; i < sizes.size(); ++i) EXPECT_TRUE(sent[i] == got.messages[i]) << "message " << i;
    // Beyond the limit: refused at the sender.
    std::vector<std::uint8_t> too_big(attr.am.max_zcopy + 1);
    Iov iov{too_big.data(), too_big.size(), kMemHNull};
    EXPECT_EQ(Status::exceeds_limit, ep_am_zcopy(ep, kAmId, nullptr, 0, &iov, 1, 0, nullptr));
}

TEST_F(TcpTest, FlushWaitsForTheTarget) {
    std::vector<std::uint8_t> target(4096, 0);
    auto reg = receiver_->md().mem_reg(target.data(), target.size(), kAccessAll);
    ASSERT_TRUE(reg.ok());
    std::vector<std::uint8_t> packed(receiver_->md_attr().rkey_packed_size);
    ASSERT_EQ(Status::ok, receiver_->md().mkey_pack(*reg, packed.data()));
    auto rkey = sender_->md().component().rkey_unpack(packed.data(), packed.size());
    ASSERT_TRUE(rkey.ok());
    Ep* ep = sender_->connect_to(*receiver_);
    ASSERT_TRUE(wait_for([&] { return ep_am_short(ep, kAmId, 0, nullptr, 0) == Status::ok; }));
    std::uint64_t value = 0x1122334455667788ull;
    ASSERT_EQ(Status::ok, ep_put_short(ep, &value, sizeof(value), reinterpret_cast<std::uint64_t>(target.data()),
                                       rkey->rkey));
    CountingCompletion comp;
    ASSERT_EQ(Status::in_progress, ep_flush(ep, kFlushLocal, &comp));
    // Only the initiator progresses: the target has not executed the put, so flush cannot complete.
    for (int i = 0; i < 2000; ++i) sender_->worker().progress();
    EXPECT_EQ(0, comp.fired);
    ASSERT_TRUE(wait_for([&] { return comp.fired == 1; }));
    EXPECT_EQ(Status::ok, comp.status);
    std::uint64_t seen;
    std::memcpy(&seen, target.data(), 8);
    EXPECT_EQ(value, seen);
    // Nothing posted since: the next flush completes at once.
    EXPECT_EQ(Status::ok, ep_flush(ep, kFlushLocal, &comp));
    sender_->md().component().rkey_release(*rkey);
    EXPECT_EQ(Status::ok, receiver_->md().mem_dereg(*reg));
}

TEST_F(TcpTest, FlushCancelCompletesOutstandingOperations) {
    std::vector<std::uint8_t> target(4096, 0);
    auto reg = receiver_->md().mem_reg(target.data(), target.size(), kAccessAll);
    ASSERT_TRUE(reg.ok());
    std::vector<std::uint8_t> packed(receiver_->md_attr().rkey_packed_size);
    ASSERT_EQ(Status::ok, receiver_->md().mkey_pack(*reg, packed.data()));
    auto rkey = sender_->md().component().rkey_unpack(packed.data(), packed.size());
    ASSERT_TRUE(rkey.ok());
    Ep* ep = sender_->connect_to(*receiver_);
    CountingCompletion comp;
    std::uint64_t word = 0;
    ASSERT_EQ(Status::in_progress,
              ep_atomic64_fetch(ep, AtomicOp::add, 1, &word, reinterpret_cast<std::uint64_t>(target.data()), rkey->rkey,
                                &comp));
    EXPECT_EQ(Status::ok, ep_flush(ep, kFlushCancel, nullptr));
    EXPECT_EQ(1, comp.fired);
    EXPECT_EQ(Status::canceled, comp.status);
    EXPECT_EQ(Status::canceled, ep_am_short(ep, kAmId, 0, nullptr, 0));
    for (int i = 0; i < 100; ++i) progress();
    sender_->md().component().rkey_release(*rkey);
    EXPECT_EQ(Status::ok, receiver_->md().mem_dereg(*reg));
}

TEST_F(TcpTest, PendingRequestsAreServedRoundRobin) {
    Received got;
    ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, Received::handler, &got, 0));
    Ep* eps[2] = {sender_->connect_to(*receiver_), sender_->connect_to(*receiver_)};
    for (Ep* ep : eps) ASSERT_TRUE(wait_for([&] { return ep_am_short(ep, kAmId, 0, nullptr, 0) == Status::ok; }));
    ASSERT_TRUE(wait_for([&] { return got.messages.size() == 2; }));
    // Fill both connections while the receiver does not read.
    std::vector<std::uint8_t> big(sender_->attr().am.max_bcopy, 1);
    for (Ep* ep : eps) {
        bool full = false;
        for (int i = 0; i < 100000 && !full; ++i) {
            ssize_t n = ep_am_bcopy(ep, kAmId, pack_vector, &big, 0);
            ASSERT_TRUE(n >= 0 || n == static_cast<ssize_t>(Status::no_resource));
            full = n < 0;
        }
        ASSERT_TRUE(full);
    }
    struct Req : PendingReq {
        Ep* ep;
        int index;
        std::vector<int>* order;
    };
    std::vector<int> order;
    std::vector<Req> reqs(6);
    for (int i = 0; i < 6; ++i) {
        Req& r = reqs[i];
        r.ep = eps[i % 2];
        r.index = i % 2;
        r.order = &order;
        r.func = [](PendingReq* self) {
            auto* req = static_cast<Req*>(self);
            Status s = ep_am_short(req->ep, kAmId, 7, nullptr, 0);
            if (s == Status::ok) req->order->push_back(req->index);
            return s;
        };
        ASSERT_EQ(Status::ok, ep_pending_add(r.ep, &r, 0));
    }
    // Drain both sockets on the receiver side only, then let the sender see both writable at once.
    std::size_t last = 0;
    int quiet = 0;
    for (int i = 0; i < 1000000 && quiet < 5000; ++i) {
        receiver_->worker().progress();
        quiet = got.messages.size() == last ? quiet + 1 : 0;
        last = got.messages.size();
    }
    ASSERT_TRUE(wait_for([&] { return order.size() == 6; }));
    for (std::size_t i = 1; i < order.size(); ++i) {
        EXPECT_NE(order[i - 1], order[i]) << "dispatch " << i << " served the same endpoint twice in a row";
    }
}

TEST_F(TcpTest, EventFdSignalsIncomingMessages) {
    auto fd = receiver_->iface().event_fd();
    ASSERT_TRUE(fd.ok());
    Received got;
    ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, Received::handler, &got, 0));
    Ep* ep = sender_->connect_to(*receiver_);
    ASSERT_TRUE(wait_for([&] { return ep_am_short(ep, kAmId, 0, nullptr, 0) == Status::ok; }));
    ASSERT_TRUE(wait_for([&] { return got.messages.size() == 1; }));
    for (int i = 0; i < 100; ++i) progress();
    pollfd pfd{*fd, POLLIN, 0};
    EXPECT_EQ(0, ::poll(&pfd, 1, 0)) << "nothing to do: the fd must not be readable";
    ASSERT_EQ(Status::ok, ep_am_short(ep, kAmId, 1, nullptr, 0));
    EXPECT_EQ(1, ::poll(&pfd, 1, 5000)) << "a message arrived: the fd must wake a blocked waiter";
    ASSERT_TRUE(wait_for([&] { return got.messages.size() == 2; }));
}

/**
 * The only connection of an iface is read directly and left out of the epoll set (its
 * wake-up callback would cost every incoming segment); asking for the event fd puts it
 * back, and what arrived meanwhile makes the fd readable at once.
 */
TEST_F(TcpTest, HotConnectionLeavesTheEpollSetUntilTheEventFdIsAskedFor) {
    Received got;
    ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, Received::handler, &got, 0));
    Ep* ep = sender_->connect_to(*receiver_);
    ASSERT_TRUE(wait_for([&] { return ep_am_short(ep, kAmId, 0, nullptr, 0) == Status::ok; }));
    ASSERT_TRUE(wait_for([&] { return got.messages.size() == 1; }));
    const int accepted = socket_with_port(receiver_port(), true);
    const int connecting = socket_with_port(receiver_port(), false);
    ASSERT_GE(accepted, 0);
    ASSERT_GE(connecting, 0);
    std::set<int> polled = fds_in_epoll_sets();
    EXPECT_EQ(0u, polled.count(accepted)) << "the receiver's only connection is read directly";
    EXPECT_EQ(0u, polled.count(connecting)) << "the sender's only connection is read directly";

    // Traffic both ways still flows, read by progress alone.
    for (std::uint64_t i = 1; i <= 20; ++i) {
        ASSERT_TRUE(wait_for([&] { return ep_am_short(ep, kAmId, i, nullptr, 0) == Status::ok; }));
    }
    ASSERT_TRUE(wait_for([&] { return got.messages.size() == 21; }));

    // A message arrives unseen, then someone asks for the fd: it is readable at once.
    ASSERT_EQ(Status::ok, ep_am_short(ep, kAmId, 99, nullptr, 0));
    auto fd = receiver_->iface().event_fd();
    ASSERT_TRUE(fd.ok());
    EXPECT_EQ(1u, fds_in_epoll_sets().count(accepted));
    pollfd pfd{*fd, POLLIN, 0};
    EXPECT_EQ(1, ::poll(&pfd, 1, 5000)) << "the message that arrived meanwhile must wake a waiter";
    ASSERT_TRUE(wait_for([&] { return got.messages.size() == 22; }));
    for (int i = 0; i < 100; ++i) progress();
    ASSERT_EQ(Status::ok, receiver_->iface().event_arm());
    EXPECT_EQ(0, ::poll(&pfd, 1, 0)) << "nothing to do: the fd must not be readable";
    ASSERT_EQ(Status::ok, ep_am_short(ep, kAmId, 100, nullptr, 0));
    EXPECT_EQ(1, ::poll(&pfd, 1, 5000)) << "a message arrived: the fd must wake a blocked waiter";
    ASSERT_TRUE(wait_for([&] { return got.messages.size() == 23; }));
    EXPECT_EQ(1u, fds_in_epoll_sets().count(accepted)) << "stays in the set once the fd was asked for";
}

/** With a second connection the iface polls again: the first goes back into the set and both are served. */
TEST_F(TcpTest, SecondConnectionPutsTheHotOneBackIntoTheEpollSet) {
    Received got;
    ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, Received::handler, &got, 0));
    Ep* ep = sender_->connect_to(*receiver_);
    ASSERT_TRUE(wait_for([&] { return ep_am_short(ep, kAmId, 1, nullptr, 0) == Status::ok; }));
    ASSERT_TRUE(wait_for([&] { return got.messages.size() == 1; }));
    const int first = socket_with_port(receiver_port(), true);
    ASSERT_GE(first, 0);
    ASSERT_EQ(0u, fds_in_epoll_sets().count(first));
    Entity third(lo_);
    Ep* other = third.connect_to(*receiver_);
    auto all = [&] {
        progress();
        third.worker().progress();
    };
    auto until = [&](auto done) {
        auto deadline = std::chrono::steady_clock::now() + 10s;
        while (!done()) {
            if (std::chrono::steady_clock::now() > deadline) return false;
            all();
        }
        return true;
    };
    ASSERT_TRUE(until([&] { return ep_am_short(other, kAmId, 2, nullptr, 0) == Status::ok; }));
    ASSERT_TRUE(until([&] { return got.messages.size() == 2; }));
    EXPECT_EQ(1u, fds_in_epoll_sets().count(first)) << "two connections: both polled";
    for (std::uint64_t i = 3; i < 23; ++i) {
        Ep* via = i % 2 ? ep : other;
        ASSERT_TRUE(until([&] { return ep_am_short(via, kAmId, i, nullptr, 0) == Status::ok; }));
    }
    ASSERT_TRUE(until([&] { return got.messages.size() == 22; }));
    third.destroy_ep(other);
}

TEST_F(TcpTest, EndpointCanBeDestroyedFromInsideAHandler) {
    struct Ctx {
        Iface* iface;
        Ep* victim;
        int calls = 0;
    };
    Ep* ep = sender_->connect_to(*receiver_);
    // Not through the entity, which would destroy it again.
    auto back = create_ep(*receiver_, sender_->device_address(), sender_->iface_address(), nullptr);
    ASSERT_TRUE(back.ok());
    Ctx ctx{&receiver_->iface(), *back};
    ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(
                              kAmId,
                              [](void* arg, void*, std::size_t, unsigned) {
                                  auto* c = static_cast<Ctx*>(arg);
                                  if (c->calls++ == 0) c->iface->ep_destroy(c->victim);
                                  return Status::ok;
                              },
                              &ctx, 0));
    ASSERT_EQ(Status::ok, ep_am_short(ep, kAmId, 0, nullptr, 0));
    ASSERT_TRUE(wait_for([&] { return ctx.calls == 1; }));
    for (int i = 0; i < 100; ++i) progress();
}

std::size_t connections(Entity& entity) {
    auto* iface = dynamic_cast<tcp::TcpIface*>(&entity.iface());
    return iface != nullptr ? iface->num_connections() : 0;
}

/** Both endpoints of a pair of ifaces, created in either order or at once, share one connection. */
TEST_F(TcpTest, EndpointPairSharesOneConnection) {
    for (int order = 0; order < 3; ++order) {
        SCOPED_TRACE(order == 0 ? "at once" : order == 1 ? "sender first" : "receiver first");
        Entity a(lo_), b(lo_);
        Received at_a, at_b;
        ASSERT_EQ(Status::ok, a.iface().set_am_handler(kAmId, Received::handler, &at_a, 0));
        ASSERT_EQ(Status::ok, b.iface().set_am_handler(kAmId, Received::handler, &at_b, 0));
        auto spin_ab = [&](int n) {
            for (int i = 0; i < n; ++i) {
                a.worker().progress();
                b.worker().progress();
            }
        };
        Ep* ab = nullptr;
        Ep* ba = nullptr;
        if (order == 0) {
            ab = a.connect_to(b);
            ba = b.connect_to(a);
        } else {
            Entity& first = order == 1 ? a : b;
            Entity& second = order == 1 ? b : a;
            Ep* e = first.connect_to(second);
            ASSERT_EQ(Status::ok, ep_am_short(e, kAmId, 0, nullptr, 0));  // staged
            spin_ab(2000);
            Ep* f = second.connect_to(first);
            ab = order == 1 ? e : f;
            ba = order == 1 ? f : e;
        }
        for (std::uint64_t i = 1; i <= 3; ++i) {
            ASSERT_EQ(Status::ok, ep_am_short(ab, kAmId, i, nullptr, 0));
            ASSERT_EQ(Status::ok, ep_am_short(ba, kAmId, i, nullptr, 0));
        }
        std::size_t expect_a = order == 2 ? 4 : 3, expect_b = order == 1 ? 4 : 3;
        auto deadline = std::chrono::steady_clock::now() + 10s;
        while ((at_a.messages.size() < expect_a || at_b.messages.size() < expect_b) &&
               std::chrono::steady_clock::now() < deadline) {
            spin_ab(1);
        }
        spin_ab(200);  // the connection given up is closed and forgotten
        EXPECT_EQ(expect_a, at_a.messages.size());
        EXPECT_EQ(expect_b, at_b.messages.size());
        EXPECT_EQ(1u, connections(a));
        EXPECT_EQ(1u, connections(b));
        // Order is kept across the switch from staged to shared.
        for (std::size_t i = 0; i + 1 < at_b.messages.size(); ++i) {
            std::uint64_t x, y;
            std::memcpy(&x, at_b.messages[i].data(), 8);
            std::memcpy(&y, at_b.messages[i + 1].data(), 8);
            EXPECT_LT(x, y);
        }
    }
}

/**
 * connect_on_first_use (LOOM_LAZY_CONNECT): an endpoint opens no socket, and costs the
 * peer nothing, until its first operation; a flush of it has nothing to wait for.
 */
TEST_F(TcpTest, LazyEndpointOpensNoSocketUntilItsFirstSend) {
    Received got;
    ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, Received::handler, &got, 0));
    Ep* ep = sender_->connect_to(*receiver_, true);
    spin(200);
    EXPECT_EQ(0u, connections(*sender_));
    EXPECT_EQ(0u, connections(*receiver_));
    EXPECT_EQ(Status::ok, ep_flush(ep, 0, nullptr));
    EXPECT_EQ(0u, connections(*sender_)) << "a flush does not connect";
    ASSERT_EQ(Status::ok, ep_am_short(ep, kAmId, 7, nullptr, 0));
    EXPECT_EQ(1u, connections(*sender_)) << "the first send connects";
    ASSERT_TRUE(wait_for([&] { return got.messages.size() == 1; }));
    std::uint64_t header = 0;
    std::memcpy(&header, got.messages[0].data(), sizeof(header));
    EXPECT_EQ(7u, header);
    EXPECT_EQ(1u, connections(*receiver_));
}

/**
 * An idle endpoint to a peer that connects to us first takes the peer's connection, so
 * the pair still shares one socket and the idle side's first send needs no connect().
 */
TEST_F(TcpTest, IdleEndpointTakesTheConnectionThePeerOpens) {
    Received at_sender, at_receiver;
    ASSERT_EQ(Status::ok, sender_->iface().set_am_handler(kAmId, Received::handler, &at_sender, 0));
    ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, Received::handler, &at_receiver, 0));
    Ep* idle = sender_->connect_to(*receiver_, true);
    Ep* back = receiver_->connect_to(*sender_);
    ASSERT_EQ(Status::ok, ep_am_short(back, kAmId, 1, nullptr, 0));
    ASSERT_TRUE(wait_for([&] { return at_sender.messages.size() == 1; }));
    spin(200);
    EXPECT_EQ(1u, connections(*sender_));
    EXPECT_EQ(1u, connections(*receiver_));
    for (std::uint64_t i = 2; i <= 4; ++i) ASSERT_EQ(Status::ok, ep_am_short(idle, kAmId, i, nullptr, 0));
    ASSERT_TRUE(wait_for([&] { return at_receiver.messages.size() == 3; }));
    ASSERT_EQ(Status::ok, ep_am_short(back, kAmId, 5, nullptr, 0));
    ASSERT_TRUE(wait_for([&] { return at_sender.messages.size() == 2; }));
    spin(200);
    EXPECT_EQ(1u, connections(*sender_)) << "the idle endpoint opened a socket of its own";
    EXPECT_EQ(1u, connections(*receiver_));
    for (std::size_t i = 0; i < at_receiver.messages.size(); ++i) {
        std::uint64_t header = 0;
        std::memcpy(&header, at_receiver.messages[i].data(), sizeof(header));
        EXPECT_EQ(i + 2, header);
    }
}

TEST_F(TcpTest, SecondEndpointToTheSamePeerGetsItsOwnConnection) {
    Received got;
    ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, Received::handler, &got, 0));
    Ep* one = sender_->connect_to(*receiver_);
    Ep* two = sender_->connect_to(*receiver_);
    Ep* back = receiver_->connect_to(*sender_);
    ASSERT_EQ(Status::ok, ep_am_short(one, kAmId, 1, nullptr, 0));
    ASSERT_EQ(Status::ok, ep_am_short(two, kAmId, 2, nullptr, 0));
    ASSERT_TRUE(wait_for([&] { return got.messages.size() == 2; }));
    std::uint64_t v = 0;
    ASSERT_TRUE(wait_for([&] { return ep_am_short(back, kAmId + 1, v, nullptr, 0) == Status::ok; }));
    spin(200);
    EXPECT_EQ(2u, connections(*sender_));
    EXPECT_EQ(2u, connections(*receiver_));
}

/**
 * Memory per connection: an idle connection holds no receive buffer and a staged wire-up
 * sized message no segment-sized send buffer, so a process connected to many peers does
 * not keep a segment (64 KiB) per peer.
 */
TEST_F(TcpTest, ManyConnectionsShareAFewSegmentBuffers) {
    constexpr std::size_t kConns = 48;
    Received got;
    ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, Received::handler, &got, 0));
    std::vector<Ep*> eps;
    std::array<std::uint8_t, 200> payload{};  // about a worker address: staged while connecting
    for (std::size_t i = 0; i < kConns; ++i) {
        eps.push_back(sender_->connect_to(*receiver_));
        payload[0] = static_cast<std::uint8_t>(i);
        ASSERT_EQ(Status::ok, ep_am_short(eps.back(), kAmId, i, payload.data(), payload.size()));
    }
    ASSERT_TRUE(wait_for([&] { return got.messages.size() == kConns; }));
    spin(100);
    ASSERT_EQ(kConns, connections(*sender_));
    ASSERT_EQ(kConns, connections(*receiver_));
    auto* send_iface = dynamic_cast<tcp::TcpIface*>(&sender_->iface());
    auto* recv_iface = dynamic_cast<tcp::TcpIface*>(&receiver_->iface());
    ASSERT_NE(nullptr, send_iface);
    ASSERT_NE(nullptr, recv_iface);
    // A pool chunk holds two buffers; a handful covers what is read or written at one time.
    EXPECT_LE(recv_iface->num_rx_buffers(), 4u);
    EXPECT_LE(send_iface->num_rx_buffers(), 4u);
    EXPECT_LE(send_iface->num_tx_buffers(), 4u);
    // And the connections still work both ways, the buffers taken again as needed.
    for (std::size_t i = 0; i < kConns; ++i) ASSERT_EQ(Status::ok, ep_am_short(eps[i], kAmId, i, nullptr, 0));
    ASSERT_TRUE(wait_for([&] { return got.messages.size() == 2 * kConns; }));
    EXPECT_LE(recv_iface->num_rx_buffers(), 4u);
}

/**
 * Frames staged while a connection is being made move to a bigger buffer each time they
 * outgrow theirs (kStageBytes, then a segment's): every byte and the order survive each move.
 */
TEST_F(TcpTest, FramesStagedWhileConnectingSurviveEveryBufferMove) {
    Received got;
    ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, Received::handler, &got, 0));
    Ep* ep = sender_->connect_to(*receiver_);
    // Cumulative staged bytes (8-byte frame and am headers each): 56, 252 (the first
    // buffer), 868 (the second), 3384 and 3500 (a segment's).
    const std::vector<std::size_t> sizes = {40, 180, 600, 2500, 100};
    const std::vector<unsigned> stage_class = {1, 1, 2, 0, 0};  // 0: a segment's buffer
    std::vector<std::vector<std::uint8_t>> sent;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        std::vector<std::uint8_t> payload(sizes[i]);
        for (std::size_t b = 0; b < payload.size(); ++b) payload[b] = static_cast<std::uint8_t>(i * 31 + b * 7);
        ASSERT_EQ(Status::ok, ep_am_short(ep, kAmId, i, payload.data(), static_cast<unsigned>(payload.size())));
        sent.push_back(std::move(payload));
        // The smallest buffer that holds what is staged: a connection to a thousand peers
        // keeps a small one each, not a page of a segment's.
        const tcp::TxDesc* staged = static_cast<tcp::TcpEp*>(ep)->tx;
        ASSERT_NE(nullptr, staged);
        EXPECT_EQ(stage_class[i], staged->stage_class) << "after message " << i;
    }
    // Nothing progressed yet: all of it is staged, none written.
    ASSERT_TRUE(static_cast<tcp::TcpEp*>(ep)->can_stage());
    ASSERT_TRUE(wait_for([&] { return got.messages.size() == sizes.size(); }));
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        ASSERT_EQ(8 + sizes[i], got.messages[i].size()) << "message " << i;
        std::uint64_t header;
        std::memcpy(&header, got.messages[i].data(), sizeof(header));
        EXPECT_EQ(i, header) << "order";
        EXPECT_TRUE(std::equal(sent[i].begin(), sent[i].end(), got.messages[i].begin() + 8)) << "message " << i;
    }
}

}  // namespace
}  // namespace loom::uct::test
