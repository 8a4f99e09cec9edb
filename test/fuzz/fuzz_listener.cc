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
 *    endpoint or an error), never crash or wait for its 10 s timeout. The socket and the
 *    thread live for the whole run (Answerer).
 */
#include "fuzz_common.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
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

/**
 * connect() that survives a signal (libFuzzer's timer): an interrupted connect goes on
 * in the background, so wait for it and read its result instead of calling it again.
 */
bool connect_to(int fd, const sockaddr_in& address) {
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) return true;
    if (errno != EINTR) return false;
    pollfd pfd{fd, POLLOUT, 0};
    while (::poll(&pfd, 1, -1) < 0) {
        if (errno != EINTR) return false;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return false;
    errno = err;
    return err == 0;
}

/** Sends @p data to the listener from a plain socket; waits until the server closed the connection. */
void fuzz_server(const std::uint8_t* data, std::size_t size) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || !connect_to(fd, g_server->address)) {
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

/**
 * A plain listening socket and its helper thread, made once: a listener per input would
 * bind a fresh ephemeral port each time, and with the connections of the last minute in
 * TIME_WAIT the kernel's search for a free port made that most of the run's time.
 */
class Answerer {
public:
    Answerer() {
        listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        address_.sin_family = AF_INET;
        address_.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof(address_);
        if (listen_fd_ < 0 ||
            ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address_), sizeof(address_)) != 0 ||
            ::listen(listen_fd_, 1) != 0 ||
            ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address_), &len) != 0) {
            std::perror("fuzz_listener: listen");
            std::abort();
        }
        thread_ = std::thread([this] { run(); });
    }

    ~Answerer() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stop_ = true;
        }
        cv_.notify_all();
        thread_.join();
        ::close(listen_fd_);
    }

    const sockaddr_in& address() const { return address_; }

    /** The next connection is answered with @p data. */
    void arm(const std::uint8_t* data, std::size_t size) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            data_ = data;
            size_ = size;
            armed_ = true;
        }
        cv_.notify_all();
    }

    /** Waits until the helper has served the armed connection (or found none within 6 s). */
    void wait_served() {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [this] { return !armed_; });
    }

private:
    void run() {
        // Signals (libFuzzer's timer) go to the fuzzing thread: none interrupts a call here.
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, nullptr);
        for (;;) {
            std::unique_lock<std::mutex> lock(mutex_);
            cv_.wait(lock, [this] { return armed_ || stop_; });
            if (stop_) return;
            const std::uint8_t* data = data_;
            std::size_t size = size_;
            lock.unlock();
            serve(data, size);
            lock.lock();
            armed_ = false;
            lock.unlock();
            cv_.notify_all();
        }
    }

    /** Answers one connection with @p data, then reads its request until the client closes. */
    void serve(const std::uint8_t* data, std::size_t size) {
        pollfd lp{listen_fd_, POLLIN, 0};
        if (::poll(&lp, 1, 6000) != 1) return;  // the client never connected
        int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
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
    }

    int listen_fd_ = -1;
    sockaddr_in address_{};
    std::thread thread_;
    std::mutex mutex_;
    std::condition_variable cv_;
    const std::uint8_t* data_ = nullptr;
    std::size_t size_ = 0;
    bool armed_ = false;
    bool stop_ = false;
};

std::unique_ptr<Answerer> g_answerer;

/** loom_ep_create to a plain socket whose helper answers with @p data and closes. */
void fuzz_client(const std::uint8_t* data, std::size_t size) {
    g_answerer->arm(data, size);
    loom_ep_params_t p{};
    p.field_mask = LOOM_EP_PARAM_FIELD_SOCK_ADDR;
    p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&g_answerer->address());
    p.sockaddr.addrlen = sizeof(sockaddr_in);
    loom_ep_h ep = nullptr;
    const auto start = std::chrono::steady_clock::now();
    const loom_status_t status = loom_ep_create(g_server->stack.worker, &p, &ep);
    g_answerer->wait_served();
    if (status == LOOM_OK) close_ep(g_server->stack.worker, ep);
    if (status == LOOM_ERR_TIMED_OUT || std::chrono::steady_clock::now() - start > std::chrono::seconds(5)) {
        std::fprintf(stderr, "fuzz_listener: the client waited for a server that had answered and closed\n");
        std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    g_server = std::make_unique<Server>();
    g_answerer = std::make_unique<Answerer>();
    // Registered after the leak checker's own exit handler, so it runs before it.
    std::atexit([] {
        g_answerer.reset();
        g_server.reset();
    });
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
