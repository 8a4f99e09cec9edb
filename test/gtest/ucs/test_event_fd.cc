#include "common/test_helpers.h"

#include "ucs/async/event_fd.h"
#include "ucs/async/event_set.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

namespace loom::ucs {
namespace {

/** Bound of every blocking wait: only a broken implementation ever waits that long. */
constexpr int kGenerousTimeoutMs = 30000;

bool readable(int fd, int timeout_ms = 0) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

bool is_cloexec(int fd) {
    return (::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0;
}

bool is_open(int fd) {
    return ::fcntl(fd, F_GETFD) != -1;
}

/** A pipe closed on destruction; ends set to -1 are skipped. */
struct Pipe {
    int fds[2] = {-1, -1};
    Pipe() { EXPECT_EQ(0, ::pipe2(fds, O_CLOEXEC | O_NONBLOCK)); }
    ~Pipe() {
        for (int fd : fds) {
            if (fd >= 0) ::close(fd);
        }
    }
    int read_end() const { return fds[0]; }
    int write_end() const { return fds[1]; }
    void close_write() {
        ::close(fds[1]);
        fds[1] = -1;
    }
};

/** Blocks a thread in poll() on @p fd, then runs @p wake from the test thread. */
template <typename Wake>
int poll_woken_by(int fd, Wake wake) {
    std::atomic<bool> polling{false};
    int result = -2;
    short revents = 0;
    std::thread waiter([&] {
        pollfd p{fd, POLLIN, 0};
        polling.store(true);
        result = ::poll(&p, 1, kGenerousTimeoutMs);
        revents = p.revents;
    });
    while (!polling.load()) std::this_thread::yield();
    // Give the waiter a moment to block; if it has not yet, poll() sees the signal at once
    // and the test still checks that a signal makes the fd readable.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    wake();
    waiter.join();
    EXPECT_TRUE(revents & POLLIN);
    return result;
}

TEST(EventFd, SignalDrainAndArm) {
    auto efd = EventFd::create();
    ASSERT_TRUE(efd.ok());
    EXPECT_FALSE(readable(efd->fd()));
    EXPECT_EQ(Status::ok, efd->arm());
    EXPECT_EQ(Status::ok, efd->signal());
    EXPECT_EQ(Status::ok, efd->signal());
    EXPECT_EQ(Status::ok, efd->signal());
    EXPECT_TRUE(readable(efd->fd()));
    EXPECT_EQ(3u, efd->drain());
    EXPECT_FALSE(readable(efd->fd()));
    EXPECT_EQ(0u, efd->drain());
    EXPECT_EQ(Status::ok, efd->signal());
    EXPECT_EQ(Status::busy, efd->arm()) << "arm() must report the signal it consumed";
    EXPECT_FALSE(readable(efd->fd()));
    EXPECT_EQ(Status::ok, efd->arm());
}

TEST(EventFd, IsCloexecAndNonBlocking) {
    auto efd = EventFd::create();
    ASSERT_TRUE(efd.ok());
    EXPECT_TRUE(is_cloexec(efd->fd()));
    EXPECT_TRUE(::fcntl(efd->fd(), F_GETFL) & O_NONBLOCK);
}

TEST(EventFd, MoveTransfersOwnership) {
    auto created = EventFd::create();
    ASSERT_TRUE(created.ok());
    int fd = created->fd();
    {
        EventFd a(std::move(*created));
        EXPECT_EQ(-1, created->fd());
        EXPECT_EQ(fd, a.fd());
        EventFd b;
        b = std::move(a);
        EXPECT_EQ(-1, a.fd());
        EXPECT_EQ(fd, b.fd());
        EXPECT_EQ(Status::ok, b.signal());
        EXPECT_EQ(1u, b.drain());
        EXPECT_TRUE(is_open(fd));
    }
    EXPECT_FALSE(is_open(fd));
}

TEST(EventFd, EmptyObjectFails) {
    EventFd empty;
    test::LogCapture capture("warn");
    EXPECT_EQ(-1, empty.fd());
    EXPECT_EQ(Status::invalid_param, empty.signal());
    EXPECT_EQ(Status::invalid_param, empty.arm());
    EXPECT_EQ(0u, empty.drain());
    EXPECT_EQ(3, capture.count("eventfd -1"));
}

TEST(EventFd, SignalFromAnotherThreadWakesPoller) {
    auto efd = EventFd::create();
    ASSERT_TRUE(efd.ok());
    EXPECT_EQ(1, poll_woken_by(efd->fd(), [&] { EXPECT_EQ(Status::ok, efd->signal()); }));
    EXPECT_EQ(Status::busy, efd->arm());
}

TEST(EventSet, AggregatesMembersBehindOneFd) {
    auto set = EventSet::create();
    auto a = EventFd::create();
    auto b = EventFd::create();
    ASSERT_TRUE(set.ok() && a.ok() && b.ok());
    EXPECT_TRUE(is_cloexec(set->fd()));
    ASSERT_EQ(Status::ok, set->add(a->fd(), kEventRead, 1));
    ASSERT_EQ(Status::ok, set->add(b->fd(), kEventRead, 2));
    EXPECT_FALSE(readable(set->fd()));

    EventSet::Event out[4];
    EXPECT_EQ(0u, set->wait(out, 0).value_or(99));
    EXPECT_EQ(Status::ok, b->signal());
    EXPECT_TRUE(readable(set->fd()));
    ASSERT_EQ(1u, set->wait(out, 0).value_or(99));
    EXPECT_EQ(2u, out[0].cookie);
    EXPECT_EQ(kEventRead, out[0].events);

    EXPECT_EQ(Status::ok, a->signal());
    EXPECT_EQ(2u, set->wait(out, 0).value_or(99));
    a->drain();
    b->drain();
    EXPECT_FALSE(readable(set->fd()));
}

TEST(EventSet, BlockedPollerOnSetFdIsWokenByMember) {
    auto set = EventSet::create();
    auto a = EventFd::create();
    auto b = EventFd::create();
    ASSERT_TRUE(set.ok() && a.ok() && b.ok());
    ASSERT_EQ(Status::ok, set->add(a->fd(), kEventRead, 10));
    ASSERT_EQ(Status::ok, set->add(b->fd(), kEventRead, 20));
    EXPECT_EQ(1, poll_woken_by(set->fd(), [&] { EXPECT_EQ(Status::ok, a->signal()); }));
    EventSet::Event out[4];
    ASSERT_EQ(1u, set->wait(out, 0).value_or(99));
    EXPECT_EQ(10u, out[0].cookie);
}

TEST(EventSet, WaitBlocksUntilMemberSignalled) {
    auto set = EventSet::create();
    auto a = EventFd::create();
    ASSERT_TRUE(set.ok() && a.ok());
    ASSERT_EQ(Status::ok, set->add(a->fd(), kEventRead, 7));
    std::thread signaller([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        EXPECT_EQ(Status::ok, a->signal());
    });
    EventSet::Event out[1];
    auto n = set->wait(out, kGenerousTimeoutMs);
    signaller.join();
    ASSERT_EQ(1u, n.value_or(99));
    EXPECT_EQ(7u, out[0].cookie);
}

TEST(EventSet, ModifyAndRemove) {
    auto set = EventSet::create();
    auto a = EventFd::create();
    ASSERT_TRUE(set.ok() && a.ok());
    EXPECT_EQ(0u, set->size());
    ASSERT_EQ(Status::ok, set->add(a->fd(), kEventRead, 1));
    EXPECT_EQ(1u, set->size());
    {
        loom::test::LogCapture capture("warn");
        EXPECT_NE(Status::ok, set->add(a->fd(), kEventRead, 1));  // a member already: still one
        EXPECT_EQ(1, capture.count("already a member"));
    }
    EXPECT_EQ(1u, set->size());
    EventSet::Event out[2];
    // An eventfd is always writable: watching for writes reports it with the new cookie.
    ASSERT_EQ(Status::ok, set->modify(a->fd(), kEventWrite, 5));
    ASSERT_EQ(1u, set->wait(out, 0).value_or(99));
    EXPECT_EQ(5u, out[0].cookie);
    EXPECT_EQ(kEventWrite, out[0].events);
    ASSERT_EQ(Status::ok, set->modify(a->fd(), kEventRead, 6));
    EXPECT_EQ(0u, set->wait(out, 0).value_or(99));
    ASSERT_EQ(Status::ok, a->signal());
    ASSERT_EQ(Status::ok, set->remove(a->fd()));
    EXPECT_EQ(0u, set->size());
    EXPECT_EQ(0u, set->wait(out, 0).value_or(99));
    EXPECT_FALSE(readable(set->fd()));
}

TEST(EventSet, EdgeTriggeredReportsChangesOnce) {
    auto set = EventSet::create();
    auto a = EventFd::create();
    ASSERT_TRUE(set.ok() && a.ok());
    ASSERT_EQ(Status::ok, set->add(a->fd(), kEventRead | kEventEdgeTriggered, 1));
    EventSet::Event out[2];
    ASSERT_EQ(Status::ok, a->signal());
    EXPECT_EQ(1u, set->wait(out, 0).value_or(99));
    EXPECT_EQ(0u, set->wait(out, 0).value_or(99)) << "still readable, but no new edge";
    ASSERT_EQ(Status::ok, a->signal());
    EXPECT_EQ(1u, set->wait(out, 0).value_or(99));
}

TEST(EventSet, HangupIsReportedAsError) {
    auto set = EventSet::create();
    ASSERT_TRUE(set.ok());
    Pipe pipe;
    ASSERT_EQ(Status::ok, set->add(pipe.read_end(), kEventRead, 3));
    pipe.close_write();
    EventSet::Event out[2];
    ASSERT_EQ(1u, set->wait(out, 0).value_or(99));
    EXPECT_TRUE(out[0].events & kEventError);
}

TEST(EventSet, ErrorsAreReportedWithOneLogLine) {
    auto set = EventSet::create();
    auto a = EventFd::create();
    ASSERT_TRUE(set.ok() && a.ok());
    test::TempFile file("contents");
    int regular = ::open(file.path().c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(regular, 0);
    test::LogCapture capture("warn");
    // A high number nothing else gets (fds are allocated lowest first), so it stays closed.
    int closed = ::fcntl(a->fd(), F_DUPFD_CLOEXEC, 900);
    ASSERT_GE(closed, 900);
    ::close(closed);
    EXPECT_EQ(Status::invalid_param, set->add(-1, kEventRead, 0));
    EXPECT_EQ(1, capture.count("fd -1"));
    EXPECT_EQ(Status::invalid_param, set->add(closed, kEventRead, 0));
    EXPECT_EQ(1, capture.count("fd " + std::to_string(closed)));
    EXPECT_EQ(Status::unsupported, set->add(regular, kEventRead, 0));
    EXPECT_EQ(1, capture.count("does not support polling"));
    EXPECT_EQ(Status::invalid_param, set->add(a->fd(), 1u << 20, 0));
    EXPECT_EQ(1, capture.count("unknown event flags"));
    EXPECT_EQ(Status::no_element, set->remove(a->fd()));
    EXPECT_EQ(Status::no_element, set->modify(a->fd(), kEventRead, 0));
    EXPECT_EQ(2, capture.count("not a member"));
    ASSERT_EQ(Status::ok, set->add(a->fd(), kEventRead, 0));
    EXPECT_EQ(Status::already_exists, set->add(a->fd(), kEventRead, 0));
    EXPECT_EQ(1, capture.count("already a member"));
    EXPECT_EQ(Status::invalid_param, set->wait({}, 0).status());
    EXPECT_EQ(8, capture.count("event set"));
    ::close(regular);
}

TEST(EventSet, EmptyObjectFails) {
    EventSet empty;
    auto a = EventFd::create();
    ASSERT_TRUE(a.ok());
    test::LogCapture capture("warn");
    EXPECT_EQ(Status::invalid_param, empty.add(a->fd(), kEventRead, 0));
    EventSet::Event out[1];
    EXPECT_EQ(Status::invalid_param, empty.wait(out, 0).status());
    EXPECT_EQ(2, capture.count("event set -1"));
}

}  // namespace
}  // namespace loom::ucs
