#include "oob.h"

#include "ucs/debug/log.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace loom::perftest {

TcpOob::~TcpOob() {
    if (fd_ >= 0) ::close(fd_);
}

Status TcpOob::accept_one(std::uint16_t port) {
    int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener < 0) {
        LOOM_LOG_ERROR("perftest: socket: {}", std::strerror(errno));
        return Status::io_error;
    }
    int one = 1;
    ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(port);
    if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(listener, 1) != 0) {
        LOOM_LOG_ERROR("perftest: cannot listen on port {}: {}", port, std::strerror(errno));
        ::close(listener);
        return Status::io_error;
    }
    fd_ = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    ::close(listener);
    if (fd_ < 0) {
        LOOM_LOG_ERROR("perftest: accept: {}", std::strerror(errno));
        return Status::io_error;
    }
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return Status::ok;
}

Status TcpOob::connect_to(const std::string& host, std::uint16_t port) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* result = nullptr;
    std::string service = std::to_string(port);
    if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &result); rc != 0) {
        LOOM_LOG_ERROR("perftest: cannot resolve '{}': {}", host, gai_strerror(rc));
        return Status::invalid_address;
    }
    // The server may still be starting: retry for a few seconds.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    int last_errno = 0;
    while (std::chrono::steady_clock::now() < deadline) {
        fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd_ >= 0 && ::connect(fd_, result->ai_addr, result->ai_addrlen) == 0) {
            int one = 1;
            ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            ::freeaddrinfo(result);
            return Status::ok;
        }
        last_errno = errno;
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::freeaddrinfo(result);
    LOOM_LOG_ERROR("perftest: cannot connect to {}:{}: {}", host, port, std::strerror(last_errno));
    return Status::unreachable;
}

Status TcpOob::send(const void* data, std::size_t length) {
    const auto* p = static_cast<const std::uint8_t*>(data);
    while (length > 0) {
        ssize_t n = ::send(fd_, p, length, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            LOOM_LOG_ERROR("perftest: out-of-band send failed: {}", std::strerror(errno));
            return Status::connection_reset;
        }
        p += n;
        length -= static_cast<std::size_t>(n);
    }
    return Status::ok;
}

Status TcpOob::recv(void* data, std::size_t length) {
    auto* p = static_cast<std::uint8_t*>(data);
    while (length > 0) {
        ssize_t n = ::recv(fd_, p, length, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            LOOM_LOG_ERROR("perftest: the peer closed the out-of-band connection");
            return Status::connection_reset;
        }
        p += n;
        length -= static_cast<std::size_t>(n);
    }
    return Status::ok;
}

Status TcpOob::send_blob(const std::vector<std::uint8_t>& blob) {
    std::uint32_t length = static_cast<std::uint32_t>(blob.size());
    if (Status s = send(&length, sizeof(length)); s != Status::ok) return s;
    return blob.empty() ? Status::ok : send(blob.data(), blob.size());
}

Status TcpOob::recv_blob(std::vector<std::uint8_t>& blob) {
    std::uint32_t length = 0;
    if (Status s = recv(&length, sizeof(length)); s != Status::ok) return s;
    if (length > (64u << 20)) {
        LOOM_LOG_ERROR("perftest: out-of-band message of {} bytes is not ours", length);
        return Status::malformed_packet;
    }
    blob.resize(length);
    return length == 0 ? Status::ok : recv(blob.data(), length);
}

Status TcpOob::exchange(const std::vector<std::uint8_t>& mine, std::vector<std::uint8_t>& peer) {
    if (Status s = send_blob(mine); s != Status::ok) return s;
    return recv_blob(peer);
}

Status TcpOob::barrier() {
    std::uint8_t token = 0x5a;
    if (Status s = send(&token, 1); s != Status::ok) return s;
    if (Status s = recv(&token, 1); s != Status::ok) return s;
    return token == 0x5a ? Status::ok : Status::malformed_packet;
}

void TcpOob::fail() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
}

}  // namespace loom::perftest
