/**
 * ForkedPeer: runs a function in a real child process, with a bidirectional pipe
 * for exchanging byte blobs (addresses, keys, results) with the parent. Used by
 * multi-process tests: two processes, not threads pretending to be processes.
 *
 *   ForkedPeer peer([](ForkedPeer::Channel& ch) {
 *       auto addr = ch.recv();      // from the parent
 *       ...
 *       ch.send(result);
 *       return 0;                   // the child's exit code
 *   });
 *   peer.channel().send(my_address);
 *   auto result = peer.channel().recv();
 *   EXPECT_EQ(0, peer.wait());      // exit code; -signal when killed
 *
 * The child exits with _exit() right after the function, so gtest state and the
 * parent's atexit handlers never run twice. Every receive has a timeout, so a dead
 * peer makes a test fail instead of hang.
 *
 * A forked child inherits what the parent had open, and the parent's other threads do
 * not exist in it (a lock one of them held stays taken). Loom itself is safe there (its
 * verbs contexts are its own, never librdmacm's inherited ones: docs/transports.md),
 * but a test that needs a fresh process runs its peer as a *role* in a freshly
 * executed copy of the test binary:
 *
 *   int my_peer(ForkedPeer::Channel& ch, const std::vector<std::string>& args) { ... }
 *   LOOM_TEST_PEER_ROLE(my_peer);                 // at namespace scope
 *   ForkedPeer peer("my_peer", {"arg1", "arg2"}); // in the test
 *
 * main() calls run_peer_role() first: in the executed copy it runs the role and exits.
 */
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace loom::test {

class ForkedPeer {
public:
    class Channel;
    /** A peer role: runs in an executed copy of the binary; returns its exit code. */
    using RoleMain = int (*)(Channel& ch, const std::vector<std::string>& args);

    /** One end of the pipe pair. */
    class Channel {
    public:
        Channel() = default;
        Channel(int read_fd, int write_fd) : read_fd_(read_fd), write_fd_(write_fd) {}

        /** Sends one blob (length-prefixed). Returns false when the peer is gone. */
        bool send(const std::vector<std::uint8_t>& blob);
        bool send(const std::string& text) { return send(std::vector<std::uint8_t>(text.begin(), text.end())); }

        /**
         * Receives one blob; nullopt on timeout or when the peer closed its end (at once:
         * a dead peer never waits out the timeout). The default timeout is half the
         * watchdog's (LOOMTEST_TIMEOUT), so slow machines (sanitizers in an emulated VM)
         * that raise the watchdog give a live but slow peer as much more time.
         */
        std::optional<std::vector<std::uint8_t>> recv(std::chrono::milliseconds timeout = default_timeout());

        /** Receives one blob as text; empty optional as recv(). */
        std::optional<std::string> recv_text(std::chrono::milliseconds timeout = default_timeout());

        /** True when something (a blob, or the peer's close) is waiting to be read; does not wait. */
        bool readable() const;

        /** Half of LOOMTEST_TIMEOUT (60 s by default). */
        static std::chrono::milliseconds default_timeout();

        void close();

    private:
        bool read_exact(void* buf, std::size_t len, std::chrono::steady_clock::time_point deadline);
        int read_fd_ = -1;
        int write_fd_ = -1;
    };

    /** Forks and runs @p body in the child; its return value is the child's exit code. */
    explicit ForkedPeer(std::function<int(Channel&)> body);

    /**
     * Forks and executes this binary again as peer @p role (see LOOM_TEST_PEER_ROLE) with
     * @p args; @p keep_fds stay open in it under the same numbers.
     */
    ForkedPeer(const std::string& role, const std::vector<std::string>& args, const std::vector<int>& keep_fds = {});
    ~ForkedPeer();
    ForkedPeer(const ForkedPeer&) = delete;
    ForkedPeer& operator=(const ForkedPeer&) = delete;

    Channel& channel() { return channel_; }
    pid_t pid() const { return pid_; }

    /** Kills the child with @p signal (SIGKILL by default): a peer that dies mid-transfer. */
    void kill(int signal = 9);

    /** Waits for the child; returns its exit code, or minus the signal that killed it, or -1000 on timeout. */
    int wait(std::chrono::milliseconds timeout = std::chrono::seconds(60));

private:
    pid_t pid_ = -1;
    Channel channel_;
    bool reaped_ = false;
};

/** Registers @p main as peer role @p name; returns true (for static registration). */
bool register_peer_role(const char* name, ForkedPeer::RoleMain main);

/**
 * When this process was executed as a peer role, runs it and returns its exit code;
 * otherwise returns -1 at once. main() calls it before anything else.
 */
int run_peer_role();

}  // namespace loom::test

/** Registers function @p fn as the peer role named after it. */
#define LOOM_TEST_PEER_ROLE(fn) \
    [[maybe_unused]] static const bool loom_peer_role_registered_##fn = ::loom::test::register_peer_role(#fn, fn)
