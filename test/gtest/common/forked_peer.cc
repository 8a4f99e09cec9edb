#include "forked_peer.h"

#include "test_helpers.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace loom::test {

namespace {

// The environment of an executed peer: its role, the channel's descriptors, its arguments.
constexpr const char* kRoleVar = "LOOMTEST_PEER_ROLE";
constexpr const char* kFdsVar = "LOOMTEST_PEER_FDS";
constexpr const char* kArgsVar = "LOOMTEST_PEER_ARGS";
constexpr char kArgSep = '\x1f';  // unit separator: cannot appear in a resource name or a number

std::map<std::string, ForkedPeer::RoleMain>& roles() {
    static std::map<std::string, ForkedPeer::RoleMain> table;
    return table;
}

}  // namespace

bool register_peer_role(const char* name, ForkedPeer::RoleMain main) {
    roles()[name] = main;
    return true;
}

int run_peer_role() {
    const char* role = std::getenv(kRoleVar);
    if (role == nullptr) return -1;
    auto it = roles().find(role);
    int read_fd = -1, write_fd = -1;
    const char* fds = std::getenv(kFdsVar);
    if (it == roles().end() || fds == nullptr || std::sscanf(fds, "%d %d", &read_fd, &write_fd) != 2) {
        std::fprintf(stderr, "peer role '%s': unknown role or no channel\n", role);
        return 2;
    }
    std::vector<std::string> args;
    if (const char* packed = std::getenv(kArgsVar); packed != nullptr && *packed != '\0') {
        std::string all(packed);
        std::size_t start = 0;
        for (;;) {
            std::size_t end = all.find(kArgSep, start);
            args.push_back(all.substr(start, end == std::string::npos ? std::string::npos : end - start));
            if (end == std::string::npos) break;
            start = end + 1;
        }
    }
    ::unsetenv(kRoleVar);  // the peer's own children are ordinary processes
    ForkedPeer::Channel channel(read_fd, write_fd);
    int code = 1;
    try {
        code = it->second(channel, args);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "peer role '%s': exception: %s\n", role, e.what());
        code = 2;
    }
    std::fflush(nullptr);
    return code;
}

std::chrono::milliseconds ForkedPeer::Channel::default_timeout() {
    return std::chrono::milliseconds(watchdog_timeout_seconds() * 500);
}

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

bool ForkedPeer::Channel::readable() const {
    pollfd pfd{read_fd_, POLLIN, 0};
    return ::poll(&pfd, 1, 0) == 1;
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

ForkedPeer::ForkedPeer(const std::string& role, const std::vector<std::string>& args,
                       const std::vector<int>& keep_fds) {
    int to_child[2], to_parent[2];
    if (::pipe2(to_child, O_CLOEXEC) != 0 || ::pipe2(to_parent, O_CLOEXEC) != 0) {
        throw std::runtime_error("pipe2 failed");
    }
    // Everything the child needs is built before fork(): between fork and exec it only
    // calls async-signal-safe functions (the parent has threads).
    std::string packed;
    for (std::size_t i = 0; i < args.size(); ++i) {
        if (i > 0) packed += kArgSep;
        packed += args[i];
    }
    std::vector<std::string> env_strings = {std::string(kRoleVar) + "=" + role,
                                            std::string(kFdsVar) + "=" + std::to_string(to_child[0]) + " " +
                                                std::to_string(to_parent[1]),
                                            std::string(kArgsVar) + "=" + packed};
    std::vector<char*> envp;
    for (char** e = environ; *e != nullptr; ++e) {
        if (std::strncmp(*e, "LOOMTEST_PEER_", 14) != 0) envp.push_back(*e);
    }
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    char exe[] = "/proc/self/exe";
    std::string argv0 = "loom-test-peer:" + role;
    char* argv[] = {argv0.data(), nullptr};
    std::vector<int> inherit = keep_fds;
    inherit.push_back(to_child[0]);
    inherit.push_back(to_parent[1]);

    std::fflush(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
        for (int fd : inherit) (void)::fcntl(fd, F_SETFD, 0);
        ::execve(exe, argv, envp.data());
        ::_exit(127);
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
