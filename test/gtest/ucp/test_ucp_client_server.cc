/**
 * Client/server endpoints: a listener on a socket address, clients that connect to it,
 * accept and reject, malformed requests, a server that is not there, and a client and
 * server in two real processes. Over shm and tcp: the socket only carries the worker
 * addresses; the endpoints then use the transports as any endpoint does.
 */
#include "common/forked_peer.h"
#include "common/test_helpers.h"
#include "loom/ucp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using loom::test::ForkedPeer;

sockaddr_in loopback(std::uint16_t port) {
    sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_port = htons(port);
    in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return in;
}

std::vector<char> pattern(std::size_t n, unsigned seed) {
    std::vector<char> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 7 + seed * 3) & 0xff);
    return v;
}

/** A context and worker of one side. */
struct Node {
    loom_context_h ctx = nullptr;
    loom_worker_h worker = nullptr;

    explicit Node(const char* tls) {
        setenv("LOOM_TLS", tls, 1);
        loom_params_t params{};
        params.field_mask = LOOM_PARAM_FIELD_FEATURES;
        params.features = LOOM_FEATURE_TAG;
        EXPECT_EQ(LOOM_OK, loom_init(&params, &ctx));
        unsetenv("LOOM_TLS");
        if (ctx) {
            EXPECT_EQ(LOOM_OK, loom_worker_create(ctx, nullptr, &worker));
        }
    }
    ~Node() {
        if (worker) loom_worker_destroy(worker);
        if (ctx) loom_cleanup(ctx);
    }

    loom_status_t wait(loom_status_ptr_t r, Node* other = nullptr) {
        if (!LOOM_PTR_IS_PTR(r)) return LOOM_PTR_STATUS(r);
        auto deadline = Clock::now() + std::chrono::seconds(30);
        loom_status_t s;
        while ((s = loom_request_check_status(r)) == LOOM_INPROGRESS) {
            if (Clock::now() > deadline) return LOOM_ERR_TIMED_OUT;
            loom_worker_progress(worker);
            if (other) loom_worker_progress(other->worker);
        }
        loom_request_free(r);
        return s;
    }
};

/** What the server's handler does with each request. */
struct Server {
    enum Mode { accept, reject, keep } mode = accept;
    loom_worker_h worker = nullptr;
    loom_listener_h listener = nullptr;
    loom_ep_h ep = nullptr;
    loom_conn_request_h kept = nullptr;
    int requests = 0;
    sockaddr_storage client{};

    static void on_request(loom_conn_request_h req, void* arg) {
        auto* s = static_cast<Server*>(arg);
        ++s->requests;
        EXPECT_EQ(LOOM_OK, loom_conn_request_query(req, &s->client));
        if (s->mode == reject) {
            EXPECT_EQ(LOOM_OK, loom_listener_reject(s->listener, req));
        } else if (s->mode == keep) {
            s->kept = req;
        } else {
            loom_ep_params_t p{};
            p.field_mask = LOOM_EP_PARAM_FIELD_CONN_REQUEST;
            p.conn_request = req;
            EXPECT_EQ(LOOM_OK, loom_ep_create(s->worker, &p, &s->ep));
        }
    }

    /** Listens on loopback, any port; returns the port. */
    std::uint16_t listen(loom_worker_h w) {
        worker = w;
        sockaddr_in addr = loopback(0);
        loom_listener_params_t lp{};
        lp.field_mask = LOOM_LISTENER_PARAM_FIELD_SOCK_ADDR | LOOM_LISTENER_PARAM_FIELD_CONN_HANDLER;
        lp.sockaddr.addr = reinterpret_cast<sockaddr*>(&addr);
        lp.sockaddr.addrlen = sizeof(addr);
        lp.conn_handler.cb = on_request;
        lp.conn_handler.arg = this;
        EXPECT_EQ(LOOM_OK, loom_listener_create(w, &lp, &listener));
        if (listener == nullptr) return 0;
        sockaddr_storage bound{};
        EXPECT_EQ(LOOM_OK, loom_listener_query(listener, &bound));
        return ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    }
};

/** Connects a client of @p node to @p port: the status of loom_ep_create. */
loom_status_t connect_client(Node& node, std::uint16_t port, loom_ep_h* ep) {
    sockaddr_in addr = loopback(port);
    loom_ep_params_t p{};
    p.field_mask = LOOM_EP_PARAM_FIELD_SOCK_ADDR;
    p.sockaddr.addr = reinterpret_cast<sockaddr*>(&addr);
    p.sockaddr.addrlen = sizeof(addr);
    return loom_ep_create(node.worker, &p, ep);
}

/** Runs @p client_body here while a thread progresses @p server until @p done. */
template <typename F>
void with_server_thread(Node& server, std::atomic<bool>& done, F client_body) {
    std::thread t([&] {
        auto deadline = Clock::now() + std::chrono::seconds(30);
        while (!done && Clock::now() < deadline) loom_worker_progress(server.worker);
    });
    client_body();
    done = true;
    t.join();
}

void force_close(loom_ep_h ep) {
    if (ep == nullptr) return;
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
    p.flags = LOOM_EP_CLOSE_FLAG_FORCE;
    (void)loom_ep_close_nbx(ep, &p);
}

class UcpClientServerTest : public testing::TestWithParam<const char*> {};

TEST_P(UcpClientServerTest, ClientAndServerExchangeMessagesBothWays) {
    Node server(GetParam()), client(GetParam());
    Server srv;
    const std::uint16_t port = srv.listen(server.worker);
    ASSERT_NE(0, port);
    loom_ep_h cep = nullptr;
    std::atomic<bool> done{false};
    with_server_thread(server, done, [&] { ASSERT_EQ(LOOM_OK, connect_client(client, port, &cep)); });
    ASSERT_NE(nullptr, cep);
    ASSERT_EQ(1, srv.requests);
    ASSERT_NE(nullptr, srv.ep);
    EXPECT_EQ(AF_INET, srv.client.ss_family);
    EXPECT_EQ(htonl(INADDR_LOOPBACK), reinterpret_cast<sockaddr_in*>(&srv.client)->sin_addr.s_addr);
    for (std::size_t size : {std::size_t{8}, std::size_t{5000}, std::size_t{300000}}) {
        for (int dir = 0; dir < 2; ++dir) {
            Node& from = dir == 0 ? client : server;
            Node& to = dir == 0 ? server : client;
            loom_ep_h ep = dir == 0 ? cep : srv.ep;
            auto data = pattern(size, static_cast<unsigned>(size + dir));
            std::vector<char> out(size);
            loom_status_ptr_t r = loom_tag_recv_nbx(to.worker, out.data(), size, 3, ~0ull, nullptr);
            ASSERT_EQ(LOOM_OK, from.wait(loom_tag_send_nbx(ep, data.data(), size, 3, nullptr), &to)) << size;
            ASSERT_EQ(LOOM_OK, to.wait(r, &from)) << size;
            EXPECT_EQ(data, out) << size << " direction " << dir;
        }
    }
    force_close(cep);
    force_close(srv.ep);
    loom_listener_destroy(srv.listener);
}

TEST_P(UcpClientServerTest, RejectedClientIsTold) {
    Node server(GetParam()), client(GetParam());
    Server srv;
    srv.mode = Server::reject;
    const std::uint16_t port = srv.listen(server.worker);
    loom_ep_h cep = nullptr;
    std::atomic<bool> done{false};
    loom::test::LogCapture quiet("error");
    with_server_thread(server, done, [&] { EXPECT_EQ(LOOM_ERR_REJECTED, connect_client(client, port, &cep)); });
    EXPECT_EQ(nullptr, cep);
    EXPECT_EQ(1, srv.requests);
    EXPECT_EQ(1, quiet.count("rejected the connection"));
    loom_listener_destroy(srv.listener);
}

TEST_P(UcpClientServerTest, UnansweredRequestsAreRejectedWhenTheListenerGoes) {
    Node server(GetParam()), client(GetParam());
    Server srv;
    srv.mode = Server::keep;
    const std::uint16_t port = srv.listen(server.worker);
    loom_ep_h cep = nullptr;
    loom::test::LogCapture quiet("error");
    std::thread t([&] {
        auto deadline = Clock::now() + std::chrono::seconds(30);
        while (srv.kept == nullptr && Clock::now() < deadline) loom_worker_progress(server.worker);
        loom_listener_destroy(srv.listener);  // never answered: the client hears a rejection
    });
    EXPECT_EQ(LOOM_ERR_REJECTED, connect_client(client, port, &cep));
    t.join();
}

TEST_P(UcpClientServerTest, NoServerIsConnectionRefused) {
    Node client(GetParam());
    // A port nobody listens on: bind one, learn it, close it.
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = loopback(0);
    ASSERT_EQ(0, ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)));
    socklen_t len = sizeof(addr);
    ASSERT_EQ(0, ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len));
    ::close(fd);
    loom_ep_h cep = nullptr;
    loom::test::LogCapture quiet("error");
    EXPECT_EQ(LOOM_ERR_CONNECTION_REFUSED, connect_client(client, ntohs(addr.sin_port), &cep));
    EXPECT_EQ(1, quiet.count("cannot connect to 127.0.0.1"));
}

TEST_P(UcpClientServerTest, GarbageFromAClientIsRefusedAndTheListenerGoesOn) {
    Node server(GetParam()), client(GetParam());
    Server srv;
    const std::uint16_t port = srv.listen(server.worker);
    loom::test::LogCapture warnings("warn");
    // A client speaking something else: refused with a warning, the handler never runs.
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = loopback(port);
    ASSERT_EQ(0, ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)));
    const char junk[] = "GET / HTTP/1.0\r\n\r\n";
    ASSERT_EQ(static_cast<ssize_t>(sizeof(junk)), ::send(fd, junk, sizeof(junk), 0));
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (warnings.count("bad magic") == 0 && Clock::now() < deadline) loom_worker_progress(server.worker);
    EXPECT_EQ(1, warnings.count("refused a connection from 127.0.0.1"));
    EXPECT_EQ(0, srv.requests);
    char answer[64];
    EXPECT_GT(::recv(fd, answer, sizeof(answer), 0), 0) << "the refusal is answered, then the socket closed";
    ::close(fd);
    // A real client still gets in.
    loom_ep_h cep = nullptr;
    std::atomic<bool> done{false};
    with_server_thread(server, done, [&] { EXPECT_EQ(LOOM_OK, connect_client(client, port, &cep)); });
    EXPECT_EQ(1, srv.requests);
    force_close(cep);
    force_close(srv.ep);
    loom_listener_destroy(srv.listener);
}

TEST_P(UcpClientServerTest, BadParametersAreRefused) {
    Node node(GetParam());
    loom::test::LogCapture quiet("error");
    loom_listener_h l = nullptr;
    loom_listener_params_t lp{};
    lp.field_mask = LOOM_LISTENER_PARAM_FIELD_SOCK_ADDR;  // no handler
    sockaddr_in addr = loopback(0);
    lp.sockaddr.addr = reinterpret_cast<sockaddr*>(&addr);
    lp.sockaddr.addrlen = sizeof(addr);
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_listener_create(node.worker, &lp, &l));
    lp.field_mask |= LOOM_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.conn_handler.cb = Server::on_request;
    lp.sockaddr.addrlen = 4;  // truncated address
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_listener_create(node.worker, &lp, &l));
    // Two ways of naming the peer at once.
    loom_ep_params_t p{};
    p.field_mask = LOOM_EP_PARAM_FIELD_SOCK_ADDR | LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS;
    p.sockaddr.addr = reinterpret_cast<sockaddr*>(&addr);
    p.sockaddr.addrlen = sizeof(addr);
    p.address = &addr;
    loom_ep_h ep = nullptr;
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_ep_create(node.worker, &p, &ep));
    p.field_mask = LOOM_EP_PARAM_FIELD_CONN_REQUEST;
    p.conn_request = nullptr;
    EXPECT_EQ(LOOM_ERR_INVALID_PARAM, loom_ep_create(node.worker, &p, &ep));
}

TEST_P(UcpClientServerTest, AnAddressInUseIsBusy) {
    Node node(GetParam());
    Server a, b;
    const std::uint16_t port = a.listen(node.worker);
    ASSERT_NE(0, port);
    sockaddr_in addr = loopback(port);
    loom_listener_params_t lp{};
    lp.field_mask = LOOM_LISTENER_PARAM_FIELD_SOCK_ADDR | LOOM_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = reinterpret_cast<sockaddr*>(&addr);
    lp.sockaddr.addrlen = sizeof(addr);
    lp.conn_handler.cb = Server::on_request;
    lp.conn_handler.arg = &b;
    loom::test::LogCapture quiet("error");
    EXPECT_EQ(LOOM_ERR_BUSY, loom_listener_create(node.worker, &lp, &b.listener));
    EXPECT_EQ(1, quiet.count("cannot listen on 127.0.0.1"));
    loom_listener_destroy(a.listener);
}

TEST_P(UcpClientServerTest, ServerAndClientInTwoProcesses) {
    const char* tls = GetParam();
    // The child serves: it learns its port from the listener and tells the parent, then
    // echoes messages until a zero-length one.
    ForkedPeer peer([tls](ForkedPeer::Channel& ch) {
        Node me(tls);
        Server srv;
        const std::uint16_t port = srv.listen(me.worker);
        if (port == 0) return 1;
        ch.send(std::to_string(port));
        auto deadline = Clock::now() + std::chrono::seconds(30);
        while (srv.ep == nullptr && Clock::now() < deadline) loom_worker_progress(me.worker);
        if (srv.ep == nullptr) return 2;
        std::vector<char> buf(1 << 20);
        for (;;) {
            loom_tag_recv_info_t info{};
            loom_request_param_t rp{};
            rp.op_attr_mask = LOOM_OP_ATTR_FIELD_RECV_INFO;
            rp.recv_info.tag_recv = &info;
            loom_status_ptr_t r = loom_tag_recv_nbx(me.worker, buf.data(), buf.size(), 0, 0, &rp);
            while (LOOM_PTR_IS_PTR(r) && loom_tag_recv_request_test(r, &info) == LOOM_INPROGRESS) {
                if (Clock::now() > deadline + std::chrono::seconds(30)) return 3;
                loom_worker_progress(me.worker);
            }
            if (LOOM_PTR_IS_PTR(r)) loom_request_free(r);
            if (info.length == 0) break;
            if (me.wait(loom_tag_send_nbx(srv.ep, buf.data(), info.length, info.sender_tag, nullptr)) != LOOM_OK) {
                return 4;
            }
        }
        (void)me.wait(loom_ep_flush_nbx(srv.ep, nullptr));
        force_close(srv.ep);
        loom_listener_destroy(srv.listener);
        return 0;
    });
    auto port_text = peer.channel().recv_text();
    ASSERT_TRUE(port_text);
    Node me(tls);
    loom_ep_h ep = nullptr;
    ASSERT_EQ(LOOM_OK, connect_client(me, static_cast<std::uint16_t>(std::stoi(*port_text)), &ep));
    for (std::size_t size : {std::size_t{8}, std::size_t{70000}, std::size_t{1} << 20}) {
        auto data = pattern(size, 9);
        std::vector<char> back(size);
        loom_status_ptr_t r = loom_tag_recv_nbx(me.worker, back.data(), size, 11, ~0ull, nullptr);
        ASSERT_EQ(LOOM_OK, me.wait(loom_tag_send_nbx(ep, data.data(), size, 11, nullptr))) << size;
        ASSERT_EQ(LOOM_OK, me.wait(r)) << size;
        EXPECT_EQ(data, back) << size;
    }
    ASSERT_EQ(LOOM_OK, me.wait(loom_tag_send_nbx(ep, nullptr, 0, 12, nullptr)));
    ASSERT_EQ(LOOM_OK, me.wait(loom_ep_flush_nbx(ep, nullptr)));
    EXPECT_EQ(0, peer.wait());
    force_close(ep);
}

INSTANTIATE_TEST_SUITE_P(Tls, UcpClientServerTest, testing::Values("shm", "tcp"),
                         [](const testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
