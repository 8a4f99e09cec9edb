#include "common/forked_peer.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

namespace loom::test {
namespace {

TEST(ForkedPeer, ExchangesBlobsAndReturnsExitCode) {
    ForkedPeer peer([](ForkedPeer::Channel& ch) {
        auto msg = ch.recv_text();
        if (!msg) return 10;
        ch.send(*msg + " from " + std::to_string(::getpid()));
        return 7;
    });
    ASSERT_TRUE(peer.channel().send(std::string("hello")));
    auto reply = peer.channel().recv_text();
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ("hello from " + std::to_string(peer.pid()), *reply);
    EXPECT_NE(::getpid(), peer.pid());
    EXPECT_EQ(7, peer.wait());
}

TEST(ForkedPeer, KilledPeerIsReportedAndRecvDoesNotHang) {
    ForkedPeer peer([](ForkedPeer::Channel&) {
        ::pause();
        return 0;
    });
    peer.kill(SIGKILL);
    EXPECT_FALSE(peer.channel().recv(std::chrono::seconds(5)).has_value());
    EXPECT_EQ(-SIGKILL, peer.wait());
}

TEST(ForkedPeer, RecvTimesOut) {
    ForkedPeer peer([](ForkedPeer::Channel& ch) {
        (void)ch.recv(std::chrono::seconds(5));  // until the parent closes
        return 0;
    });
    EXPECT_FALSE(peer.channel().recv(std::chrono::milliseconds(50)).has_value());
    peer.channel().close();
    EXPECT_EQ(0, peer.wait());
}

}  // namespace
}  // namespace loom::test
