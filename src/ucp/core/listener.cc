#include "ucp/core/listener.h"

#include "ucp/core/ucp_log.h"
#include "ucp/core/worker.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace loom::ucp {

namespace {

constexpr char kCmMagic[4] = {'L', 'M', 'C', 'S'};


std::vector<std::uint8_t> make_frame(std::uint8_t type, const std::vector<std::uint8_t>& address) {
    CmHdr hdr{};
    std::memcpy(hdr.magic, kCmMagic, sizeof(kCmMagic));
    hdr.version = kCmVersion;
    hdr.type = type;
    hdr.length = static_cast<std::uint32_t>(address.size());
    std::vector<std::uint8_t> frame(sizeof(hdr) + address.size());
    std::memcpy(frame.data(), &hdr, sizeof(hdr));
    if (!address.empty()) std::memcpy(frame.data() + sizeof(hdr), address.data(), address.size());
    return frame;
}

/**
 * Checks the header at the start of @p buf (at least sizeof(CmHdr) bytes); ok,
 * malformed_packet or version_mismatch, with the reason in @p why.
 */
Status check_header(const std::uint8_t* buf, CmHdr& hdr, std::string& why) {
    std::memcpy(&hdr, buf, sizeof(hdr));
    if (std::memcmp(hdr.magic, kCmMagic, sizeof(kCmMagic)) != 0) {
        why = "not a Loom connection request (bad magic)";
        return Status::malformed_packet;
    }
    if (hdr.version != kCmVersion) {
        why = fmt::format("connection protocol version {} (this library speaks {})", hdr.version, kCmVersion);
        return Status::version_mismatch;
    }
    if (hdr.length > kCmMaxAddress) {
        why = fmt::format("a {}-byte address (more than {})", hdr.length, kCmMaxAddress);
        return Status::malformed_packet;
    }
    return Status::ok;
}

/** Sends all of @p data on a socket that may be non-blocking, for at most @p timeout_ms. */
bool send_all(int fd, const std::vector<std::uint8_t>& data, int timeout_ms) {
    std::size_t sent = 0;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (sent < data.size()) {
        ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
        if (n > 0) {
            sent += static_cast<std::size_t>(n);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (std::chrono::steady_clock::now() > deadline) return false;
            pollfd pfd{fd, POLLOUT, 0};
            (void)::poll(&pfd, 1, 10);
            continue;
        }
        return false;
    }
    return true;
}

}  // namespace

std::string sockaddr_text(const sockaddr* addr) {
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (addr->sa_family == AF_INET) {
        auto* in = reinterpret_cast<const sockaddr_in*>(addr);
        ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        port = ntohs(in->sin_port);
        return fmt::format("{}:{}", host, port);
    }
    if (addr->sa_family == AF_INET6) {
        auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
        ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        port = ntohs(in6->sin6_port);
        return fmt::format("[{}]:{}", host, port);
    }
    return fmt::format("(address family {})", addr->sa_family);
}

// --- server --------------------------------------------------------------------------------

Result<std::unique_ptr<Listener>> Listener::create(Worker& worker, const sockaddr* addr, socklen_t addr_len,
                                                   ConnHandler handler, void* arg) {
    if (addr == nullptr || (addr->sa_family != AF_INET && addr->sa_family != AF_INET6) ||
        addr_len < (addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6))) {
        LOOM_LOG_ERROR("ucp: a listener needs an IPv4 or IPv6 socket address");
        return Status::invalid_param;
    }
    int fd = ::socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        LOOM_LOG_ERROR("ucp: cannot create a listening socket: {}", std::strerror(errno));
        return Status::no_resource;
    }
    int one = 1;
    (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, addr, addr_len) != 0 || ::listen(fd, 128) != 0) {
        const int err = errno;
        LOOM_LOG_ERROR("ucp: cannot listen on {}: {}", sockaddr_text(addr), std::strerror(err));
        ::close(fd);
        return err == EADDRINUSE ? Status::busy : Status::io_error;
    }
    std::unique_ptr<Listener> listener(new Listener(worker, fd, handler, arg));
    worker.listeners.push_back(listener.get());
    worker.watch_fd(fd);
    return listener;
}

Listener::~Listener() {
    auto& list = worker_.listeners;
    list.erase(std::remove(list.begin(), list.end(), this), list.end());
    for (Incoming& in : incoming_) ::close(in.fd);
    // Requests the application never answered: the clients learn they were refused.
    // (Their handles die with the listener, as in UCX.)
    for (ConnRequest* req : handed_out_) {
        (void)send_all(req->fd, make_frame(kCmReject, {}), 100);
        ::close(req->fd);
        delete req;
    }
    ::close(fd_);
}

sockaddr_storage Listener::address() const {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    (void)::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
    return ss;
}

unsigned Listener::progress() {
    unsigned count = 0;
    for (;;) {
        Incoming in;
        socklen_t len = sizeof(in.peer);
        in.fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&in.peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (in.fd < 0) break;
        ++count;
        worker_.watch_fd(in.fd);  // the request may follow the connection later
        incoming_.push_back(std::move(in));
    }
    for (std::size_t i = 0; i < incoming_.size();) {
        if (read_request(incoming_[i])) {
            ++count;
            incoming_.erase(incoming_.begin() + static_cast<std::ptrdiff_t>(i));
        } else {
            ++i;
        }
    }
    return count;
}

bool Listener::read_request(Incoming& in) {
    std::uint8_t chunk[4096];
    for (;;) {
        ssize_t n = ::recv(in.fd, chunk, sizeof(chunk), 0);
        if (n > 0) {
            in.buffer.insert(in.buffer.end(), chunk, chunk + n);
            if (in.buffer.size() > sizeof(CmHdr) + kCmMaxAddress) break;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
        // Closed (or failed) before a whole request arrived: nothing to answer.
        LOOM_LOG_DIAG("ucp: a client at {} left before its connection request was complete",
                      sockaddr_text(reinterpret_cast<sockaddr*>(&in.peer)));
        ::close(in.fd);
        return true;
    }
    if (in.buffer.size() < sizeof(CmHdr)) return false;
    CmHdr hdr;
    std::string why;
    Status s = check_header(in.buffer.data(), hdr, why);
    if (s == Status::ok && hdr.type != kCmRequest) {
        why = fmt::format("a frame of type {} where a request was expected", hdr.type);
        s = Status::malformed_packet;
    }
    if (s != Status::ok) {
        LOOM_LOG_WARN("ucp: refused a connection from {}: {}", sockaddr_text(reinterpret_cast<sockaddr*>(&in.peer)),
                      why);
        (void)send_all(in.fd, make_frame(kCmReject, {}), 100);
        ::close(in.fd);
        return true;
    }
    if (in.buffer.size() < sizeof(CmHdr) + hdr.length) return false;  // more to come
    auto* req = new (std::nothrow) ConnRequest;
    if (req == nullptr) {
        ::close(in.fd);
        return true;
    }
    req->listener = this;
    req->fd = in.fd;
    req->client = in.peer;
    req->address.assign(in.buffer.begin() + sizeof(CmHdr), in.buffer.begin() + sizeof(CmHdr) + hdr.length);
    handed_out_.push_back(req);
    handler_(req, arg_);
    return true;
}

void forget_request(ConnRequest* request) {
    if (request->listener == nullptr) return;
    auto& list = request->listener->handed_out_;
    list.erase(std::remove(list.begin(), list.end(), request), list.end());
}

Status Listener::accept(ConnRequest* request, const std::vector<std::uint8_t>& server_address) {
    forget_request(request);
    Status s = Status::ok;
    if (request->fd < 0 || !send_all(request->fd, make_frame(kCmAccept, server_address), 1000)) {
        LOOM_LOG_WARN("ucp: could not answer the client at {} (it left?)",
                      sockaddr_text(reinterpret_cast<sockaddr*>(&request->client)));
        s = Status::connection_reset;
    }
    if (request->fd >= 0) ::close(request->fd);
    delete request;
    return s;
}

void Listener::reject(ConnRequest* request) {
    forget_request(request);
    if (request->fd >= 0) {
        (void)send_all(request->fd, make_frame(kCmReject, {}), 100);
        ::close(request->fd);
    }
    delete request;
}

// --- client ----------------------------------------------------------------------------------

Result<std::vector<std::uint8_t>> cm_client_exchange(Worker& worker, const sockaddr* addr, socklen_t addr_len,
                                                     const std::vector<std::uint8_t>& own_address,
                                                     int timeout_ms) {
    if (addr == nullptr || (addr->sa_family != AF_INET && addr->sa_family != AF_INET6)) {
        LOOM_LOG_ERROR("ucp: a client endpoint needs an IPv4 or IPv6 socket address");
        return Status::invalid_param;
    }
    const std::string where = sockaddr_text(addr);
    int fd = ::socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        LOOM_LOG_ERROR("ucp: cannot create a socket to connect to {}: {}", where, std::strerror(errno));
        return Status::no_resource;
    }
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    int one = 1;
    (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    auto left_ms = [&] {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        return static_cast<int>(std::max<long long>(0, left.count()));
    };
    if (::connect(fd, addr, addr_len) != 0 && errno != EINPROGRESS) {
        const int err = errno;
        LOOM_LOG_ERROR("ucp: cannot connect to {}: {}", where, std::strerror(err));
        return err == ECONNREFUSED ? Status::connection_refused : Status::unreachable;
    }
    pollfd pfd{fd, POLLOUT, 0};
    if (::poll(&pfd, 1, left_ms()) != 1) {
        LOOM_LOG_ERROR("ucp: no answer from {} within {} ms", where, timeout_ms);
        return Status::timed_out;
    }
    int err = 0;
    socklen_t elen = sizeof(err);
    (void)::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen);
    if (err != 0) {
        LOOM_LOG_ERROR("ucp: cannot connect to {}: {}", where, std::strerror(err));
        return err == ECONNREFUSED ? Status::connection_refused : Status::unreachable;
    }
    if (!send_all(fd, make_frame(kCmRequest, own_address), left_ms())) {
        LOOM_LOG_ERROR("ucp: cannot send the connection request to {}", where);
        return Status::connection_reset;
    }
    // The server answers from its progress; ours keeps running meanwhile (a peer may be
    // connecting to us at the same time).
    std::vector<std::uint8_t> buffer;
    CmHdr hdr{};
    for (;;) {
        std::uint8_t chunk[4096];
        ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
        if (n > 0) {
            buffer.insert(buffer.end(), chunk, chunk + n);
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            LOOM_LOG_ERROR("ucp: {} closed the connection before answering", where);
            return Status::connection_reset;
        }
        if (buffer.size() >= sizeof(CmHdr)) {
            std::string why;
            if (Status s = check_header(buffer.data(), hdr, why); s != Status::ok) {
                LOOM_LOG_ERROR("ucp: bad answer from {}: {}", where, why);
                return s;
            }
            if (hdr.type == kCmReject) {
                LOOM_LOG_ERROR("ucp: {} rejected the connection", where);
                return Status::rejected;
            }
            if (hdr.type != kCmAccept) {
                LOOM_LOG_ERROR("ucp: bad answer from {}: frame type {}", where, hdr.type);
                return Status::malformed_packet;
            }
            if (buffer.size() >= sizeof(CmHdr) + hdr.length) break;
        }
        if (left_ms() == 0) {
            LOOM_LOG_ERROR("ucp: {} did not answer the connection request within {} ms", where, timeout_ms);
            return Status::timed_out;
        }
        if (worker.progress() == 0) {
            pollfd rfd{fd, POLLIN, 0};
            (void)::poll(&rfd, 1, 1);
        }
    }
    return std::vector<std::uint8_t>(buffer.begin() + sizeof(CmHdr), buffer.begin() + sizeof(CmHdr) + hdr.length);
}

}  // namespace loom::ucp
