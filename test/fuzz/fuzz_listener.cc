/**
 * Fuzz target: the client/server connection exchange (the protocol's socket-address
 * "private data": a CmHdr frame and a packed worker address). The first byte picks the
 * side under test, the rest is what the other side sends:
 *  - server: a plain socket connects to a real worker's listener and sends the input, then
 *    shuts its sending side; the listener must refuse it or hand it to the application,
 *    whose handler accepts it (loom_ep_create from the request: the client's worker address
 *    is unpacked and reached) or rejects it, and the connection must then be answered and
 *    closed: a listener that neither answers nor closes hangs the client;
 *  - client: loom_ep_create connects to a plain listening socket whose helper thread
 *    answers any request with the input and shuts its side; the call must return (an
 *    endpoint or an error), never crash or wait for its 10 s timeout.
 */
#include "fuzz_common.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

namespace {

void close_ep(loom_worker_h worker, loom_ep_h ep) {
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
    p.flags = LOOM_EP_CLOSE_FLAG_FORCE;
    void* r = loom_ep_close_nbx(ep, &p);
    if (LOOM_PTR_IS_PTR(r)) {
        while (loom_request_check_status(r) == LOOM_INPROGRESS) loom_worker_progress(worker);
        loom_request_free(r);
    }
}

/** A worker with a listener on 127.0.0.1 whose handler accepts even requests and rejects odd ones. */
struct Server {
    loom::fuzz::Stack stack{"tcp,shm,self", LOOM_FEATURE_TAG};
    loom_listener_h listener = nullptr;
    sockaddr_in address{};
    unsigned requests = 0;

    static void on_request(loom_conn_request_h request, void* arg) {
        auto* self = static_cast<Server*>(arg);
        if (self->requests++ % 2 == 1) {
            (void)loom_listener_reject(self->listener, request);
            return;
        }
        loom_ep_params_t p{};
        p.field_mask = LOOM_EP_PARAM_FIELD_CONN_REQUEST;
        p.conn_request = request;
        loom_ep_h ep = nullptr;
        if (loom_ep_create(self->stack.worker, &p, &ep) == LOOM_OK) close_ep(self->stack.worker, ep);
    }

    Server() {
        sockaddr_in any{};
        any.sin_family = AF_INET;
        any.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        loom_listener_params_t p{};
        p.field_mask = LOOM_LISTENER_PARAM_FIELD_SOCK_ADDR | LOOM_LISTENER_PARAM_FIELD_CONN_HANDLER;
        p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&any);
        p.sockaddr.addrlen = sizeof(any);
        p.conn_handler.cb = on_request;
        p.conn_handler.arg = this;
        sockaddr_storage bound{};
        if (loom_listener_create(stack.worker, &p, &listener) != LOOM_OK ||
            loom_listener_query(listener, &bound) != LOOM_OK) {
            std::fprintf(stderr, "fuzz_listener: no listener\n");
            std::abort();
        }
        std::memcpy(&address, &bound, sizeof(address));
    }
    ~Server() { loom_listener_destroy(listener); }
};

std::unique_ptr<Server> g_server;

/** Sends @p data to the listener from a plain socket; waits until the server closed the connection. */
void fuzz_server(const std::uint8_t* data, std::size_t size) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 ||
        ::connect(fd, reinterpret_cast<const sockaddr*>(&g_server->address), sizeof(sockaddr_in)) != 0) {
        std::perror("fuzz_listener: connect");
        std::abort();
    }
    std::size_t sent = 0;
    while (sent < size) {
        ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            sent += static_cast<std::size_t>(n);
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
            break;  // the server closed already
        } else {
            loom_worker_progress(g_server->stack.worker);
        }
    }
    ::shutdown(fd, SHUT_WR);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
        loom_worker_progress(g_server->stack.worker);
        pollfd pfd{fd, POLLIN, 0};
        if (::poll(&pfd, 1, 0) == 1) {
            std::uint8_t sink[4096];
            ssize_t n = ::recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;  // answered and closed
        }
        if (std::chrono::steady_clock::now() > deadline) {
            std::fprintf(stderr, "fuzz_listener: the listener neither answered nor closed the connection\n");
            std::abort();
        }
    }
    ::close(fd);
}

/** loom_ep_create to a plain socket whose helper answers with @p data and closes. */
void fuzz_client(const std::uint8_t* data, std::size_t size) {
    int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (lfd < 0 || ::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(lfd, 1) != 0 || ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        std::perror("fuzz_listener: listen");
        std::abort();
    }
    std::thread answer([&] {
        int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) return;
        std::size_t sent = 0;
        while (sent < size) {
            ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
            if (n <= 0) break;
            sent += static_cast<std::size_t>(n);
        }
        // Read the request until the client closes: closing with it unread would reset the
        // connection, and the client could lose the answer before it reads it.
        ::shutdown(fd, SHUT_WR);
        std::uint8_t sink[4096];
        pollfd pfd{fd, POLLIN, 0};
        while (::poll(&pfd, 1, 6000) == 1 && ::recv(fd, sink, sizeof(sink), 0) > 0) {
        }
        ::close(fd);
    });
    loom_ep_params_t p{};
    p.field_mask = LOOM_EP_PARAM_FIELD_SOCK_ADDR;
    p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
    p.sockaddr.addrlen = sizeof(addr);
    loom_ep_h ep = nullptr;
    const auto start = std::chrono::steady_clock::now();
    const loom_status_t status = loom_ep_create(g_server->stack.worker, &p, &ep);
    answer.join();
    ::close(lfd);
    if (status == LOOM_OK) close_ep(g_server->stack.worker, ep);
    if (status == LOOM_ERR_TIMED_OUT || std::chrono::steady_clock::now() - start > std::chrono::seconds(5)) {
        std::fprintf(stderr, "fuzz_listener: the client waited for a server that had answered and closed\n");
        std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    g_server = std::make_unique<Server>();
    // Registered after the leak checker's own exit handler, so it runs before it.
    std::atexit([] { g_server.reset(); });
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    if (data[0] & 1) {
        fuzz_client(data + 1, size - 1);
    } else {
        fuzz_server(data + 1, size - 1);
    }
    return 0;
}
