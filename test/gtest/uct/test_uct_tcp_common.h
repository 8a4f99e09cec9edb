/** Shared fixture of the tcp-specific suites: the tcp transport on the loopback device. */
#pragma once

#include "uct_test.h"

#include "uct/tcp/tcp_wire.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>

namespace loom::uct::test {

/** The tcp resource on device @p dev, if this machine has it. */
inline std::optional<Resource> find_tcp_resource(const std::string& dev) {
    for (const Resource& r : all_resources()) {
        if (r.tl.tl_name == "tcp" && r.tl.dev_name == dev) return r;
    }
    return std::nullopt;
}

/** Records on_error calls. */
struct EpErrors {
    int calls = 0;
    Status status = Status::ok;
    static void on_error(void* arg, Ep*, Status status) {
        auto* self = static_cast<EpErrors*>(arg);
        ++self->calls;
        self->status = status;
    }
};

/** An fd closed on destruction. */
struct Fd {
    int fd = -1;
    explicit Fd(int f = -1) : fd(f) {}
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
};

class TcpTest : public testing::Test {
protected:
    void SetUp() override {
        auto lo = find_tcp_resource("lo");
        if (!lo) GTEST_SKIP() << "no tcp on lo";
        lo_ = *lo;
        sender_ = std::make_unique<Entity>(lo_);
        receiver_ = std::make_unique<Entity>(lo_);
    }

    void TearDown() override {
        sender_.reset();
        receiver_.reset();
    }

    unsigned progress() { return sender_->worker().progress() + receiver_->worker().progress(); }

    /** Progresses both sides @p n times. */
    void spin(int n) {
        for (int i = 0; i < n; ++i) progress();
    }

    template <typename Pred>
    bool wait_for(Pred done, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
        auto deadline = std::chrono::steady_clock::now() + timeout;
        while (!done()) {
            if (std::chrono::steady_clock::now() > deadline) return false;
            progress();
        }
        return true;
    }

    /** Creates an endpoint from @p from to the given addresses with an error callback. */
    Result<Ep*> create_ep(Entity& from, const std::vector<std::uint8_t>& dev, const std::vector<std::uint8_t>& iface,
                          EpErrors* errors) {
        EpParams params;
        params.dev_addr = dev.data();
        params.dev_addr_len = dev.size();
        params.iface_addr = iface.data();
        params.iface_addr_len = iface.size();
        if (errors != nullptr) {
            params.on_error = EpErrors::on_error;
            params.on_error_arg = errors;
        }
        return from.iface().ep_create(params);
    }

    /** The receiver's listening port, from its iface address. */
    std::uint16_t receiver_port() const {
        tcp::IfaceAddress addr;
        std::memcpy(&addr, receiver_->iface_address().data(), sizeof(addr));
        return ntohs(addr.port);
    }

    std::uint64_t receiver_cookie() const {
        tcp::IfaceAddress addr;
        std::memcpy(&addr, receiver_->iface_address().data(), sizeof(addr));
        return addr.cookie;
    }

    /** A blocking loopback socket connected to @p port. */
    static int raw_connect(std::uint16_t port) {
        int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // no Nagle delay between test frames
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(port);
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
            ::close(fd);
            return -1;
        }
        return fd;
    }

    /** Progresses the receiver until @p fd is closed by it (recv returns 0 or an error); false on timeout. */
    bool wait_closed(int fd) {
        return wait_for([&] {
            pollfd pfd{fd, POLLIN, 0};
            if (::poll(&pfd, 1, 0) != 1) return false;
            char buf[256];
            ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
            return n == 0 || (n < 0 && errno != EAGAIN);
        });
    }

    /** Does the client half of a handshake with the receiver on @p fd; true when accepted. */
    bool raw_handshake(int fd, std::uint64_t cookie, tcp::ConnReply* reply_out = nullptr) {
        tcp::ConnRequest req{};
        req.magic = tcp::kHandshakeMagic;
        req.version = tcp::kWireVersion;
        req.target_cookie = cookie;
        req.source_cookie = 0x1234;
        if (::send(fd, &req, sizeof(req), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(req))) return false;
        tcp::ConnReply reply{};
        std::size_t got = 0;
        bool done = wait_for([&] {
            ssize_t n = ::recv(fd, reinterpret_cast<char*>(&reply) + got, sizeof(reply) - got, MSG_DONTWAIT);
            if (n > 0) got += static_cast<std::size_t>(n);
            return got == sizeof(reply) || n == 0;
        });
        if (reply_out != nullptr) *reply_out = reply;
        return done && got == sizeof(reply) && reply.status == tcp::status_to_wire(Status::ok) &&
               reply.source_cookie == 0x1234;
    }

    Resource lo_;
    std::unique_ptr<Entity> sender_;
    std::unique_ptr<Entity> receiver_;
};

}  // namespace loom::uct::test
