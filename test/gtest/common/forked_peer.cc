#include "forked_peer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <stdexcept>
#include <thread>

namespace loom::test {

bool ForkedPeer::Channel::send(const std::vector<std::uint8_t>& blob) {
    std::uint64_t length = blob.size();
    auto write_all = [&](const void* data, std::size_t len) {
        const auto* p = static_cast<const std::uint8_t*>(data);
        while (len > 0) {
            ssize_t n = ::write(write_fd_, p, len);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return false;
            p += n;
            len -= static_cast<std::size_t>(n);
        }
        return true;
    };
    return write_all(&length, sizeof(length)) && write_all(blob.data(), blob.size());
}

bool ForkedPeer::Channel::read_exact(void* buf, std::size_t len, std::chrono::steady_clock::time_point deadline) {
    auto* p = static_cast<std::uint8_t*>(buf);
    while (len > 0) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) return false;
        pollfd pfd{read_fd_, POLLIN, 0};
        int rc = ::poll(&pfd, 1, static_cast<int>(left.count()));
        if (rc < 0 && errno == EINTR) continue;
        if (rc <= 0) return false;
        ssize_t n = ::read(read_fd_, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;  // peer closed or error
        p += n;
        len -= static_cast<std::size_t>(n);
    }
    return true;
}

std::optional<std::vector<std::uint8_t>> ForkedPeer::Channel::recv(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    std::uint64_t length = 0;
    if (!read_exact(&length, sizeof(length), deadline) || length > (1u << 30)) return std::nullopt;
    std::vector<std::uint8_t> blob(length);
    if (!read_exact(blob.data(), blob.size(), deadline)) return std::nullopt;
    return blob;
}

std::optional<std::string> ForkedPeer::Channel::recv_text(std::chrono::milliseconds timeout) {
    auto blob = recv(timeout);
    if (!blob) return std::nullopt;
    return std::string(blob->begin(), blob->end());
}

void ForkedPeer::Channel::close() {
    if (read_fd_ >= 0) ::close(read_fd_);
    if (write_fd_ >= 0) ::close(write_fd_);
    read_fd_ = write_fd_ = -1;
}

ForkedPeer::ForkedPeer(std::function<int(Channel&)> body) {
    int to_child[2], to_parent[2];
    if (::pipe2(to_child, O_CLOEXEC) != 0 || ::pipe2(to_parent, O_CLOEXEC) != 0) {
        throw std::runtime_error("pipe2 failed");
    }
    std::fflush(nullptr);  // nothing buffered is written twice
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
        ::close(to_child[1]);
        ::close(to_parent[0]);
        Channel channel(to_child[0], to_parent[1]);
        int code = 1;
        try {
            code = body(channel);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "forked peer: exception: %s\n", e.what());
            code = 2;
        } catch (...) {
            code = 2;
        }
        std::fflush(nullptr);
        ::_exit(code);
    }
    ::close(to_child[0]);
    ::close(to_parent[1]);
    channel_ = Channel(to_parent[0], to_child[1]);
}

ForkedPeer::~ForkedPeer() {
    channel_.close();
    if (!reaped_ && pid_ > 0) {
        // A test that failed early: make sure no child outlives it.
        if (wait(std::chrono::seconds(5)) == -1000) {
            kill(SIGKILL);
            (void)wait(std::chrono::seconds(5));
        }
    }
}

void ForkedPeer::kill(int signal) {
    if (pid_ > 0 && !reaped_) ::kill(pid_, signal);
}

int ForkedPeer::wait(std::chrono::milliseconds timeout) {
    if (reaped_ || pid_ <= 0) return -1000;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        int status = 0;
        pid_t rc = ::waitpid(pid_, &status, WNOHANG);
        if (rc == pid_) {
            reaped_ = true;
            if (WIFEXITED(status)) return WEXITSTATUS(status);
            if (WIFSIGNALED(status)) return -WTERMSIG(status);
            return -999;
        }
        if (rc < 0 && errno != EINTR) return -1000;
        if (std::chrono::steady_clock::now() > deadline) return -1000;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

}  // namespace loom::test
