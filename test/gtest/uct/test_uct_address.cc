#include "uct_test.h"

#include "common/test_helpers.h"

#include <random>

namespace loom::uct::test {
namespace {

/** Garbage from peers (addresses, keys) must give an error, never a crash. */
class UctAddressTest : public UctTest {
protected:
    bool reachable(const std::vector<std::uint8_t>& dev, const std::vector<std::uint8_t>& iface,
                   std::string* reason = nullptr) {
        return sender_->iface().is_reachable(dev.data(), dev.size(), iface.data(), iface.size(), reason);
    }

    Status create(const std::vector<std::uint8_t>& dev, const std::vector<std::uint8_t>& iface) {
        EpParams params;
        params.dev_addr = dev.data();
        params.dev_addr_len = dev.size();
        params.iface_addr = iface.data();
        params.iface_addr_len = iface.size();
        auto ep = sender_->iface().ep_create(params);
        if (ep) {
            sender_->iface().ep_destroy(*ep);
            return Status::ok;
        }
        return ep.status();
    }
};

TEST_P(UctAddressTest, OwnPeerIsReachable) {
    std::string reason;
    EXPECT_TRUE(reachable(receiver_->device_address(), receiver_->iface_address(), &reason)) << reason;
}

TEST_P(UctAddressTest, TruncatedAddressesAreUnreachable) {
    loom::test::LogCapture capture("fatal");
    auto dev = receiver_->device_address();
    auto iface = receiver_->iface_address();
    std::string reason;
    if (!dev.empty()) {
        auto short_dev = std::vector<std::uint8_t>(dev.begin(), dev.end() - 1);
        EXPECT_FALSE(reachable(short_dev, iface, &reason));
        EXPECT_FALSE(reason.empty());
        EXPECT_NE(Status::ok, create(short_dev, iface));
    }
    if (!iface.empty()) {
        auto short_iface = std::vector<std::uint8_t>(iface.begin(), iface.end() - 1);
        EXPECT_FALSE(reachable(dev, short_iface));
        EXPECT_NE(Status::ok, create(dev, short_iface));
    }
    EXPECT_FALSE(reachable({}, {}));
}

TEST_P(UctAddressTest, WrongVersionIsRejected) {
    loom::test::LogCapture capture("fatal");
    auto dev = receiver_->device_address();
    auto iface = receiver_->iface_address();
    ASSERT_FALSE(dev.empty());
    dev[0] ^= 0xff;  // every Loom address starts with its version byte
    std::string reason;
    EXPECT_FALSE(reachable(dev, iface, &reason));
    EXPECT_NE(std::string::npos, reason.find("version")) << reason;
    EXPECT_EQ(Status::invalid_address, create(dev, iface));
}

TEST_P(UctAddressTest, RandomGarbageNeverCrashes) {
    loom::test::LogCapture capture("fatal");
    std::mt19937 rng(1234);
    for (int round = 0; round < 200; ++round) {
        std::vector<std::uint8_t> dev(rng() % 40), iface(rng() % 40);
        for (auto& b : dev) b = static_cast<std::uint8_t>(rng());
        for (auto& b : iface) b = static_cast<std::uint8_t>(rng());
        if (reachable(dev, iface)) continue;  // astronomically unlikely, but then it is a valid address
        EXPECT_NE(Status::ok, create(dev, iface));
    }
}

TEST_P(UctAddressTest, GarbageRemoteKeyIsRejected) {
    loom::test::LogCapture capture("fatal");
    const Component& component = sender_->md().component();
    std::size_t size = receiver_->md_attr().rkey_packed_size;
    std::vector<std::uint8_t> junk(size + 3, 0xa5);
    auto too_long = component.rkey_unpack(junk.data(), junk.size());
    EXPECT_FALSE(too_long.ok());
    if (size > 0) {
        auto too_short = component.rkey_unpack(junk.data(), size - 1);
        EXPECT_FALSE(too_short.ok());
    }
}

INSTANTIATE_TEST_SUITE_P(Transports, UctAddressTest, testing::ValuesIn(all_resources()), resource_name);

}  // namespace
}  // namespace loom::uct::test
