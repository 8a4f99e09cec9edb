#include "uct_test.h"

#include "common/test_helpers.h"

#include <cstring>
#include <numeric>
#include <vector>

namespace loom::uct::test {
namespace {

constexpr AmId kAmId = 5;

/** What the receiver saw: every message's bytes, in arrival order. */
struct Received {
    std::vector<std::vector<std::uint8_t>> messages;

    static Status handler(void* arg, void* data, std::size_t length, unsigned) {
        auto* self = static_cast<Received*>(arg);
        auto* bytes = static_cast<std::uint8_t*>(data);
        self->messages.emplace_back(bytes, bytes + length);
        return Status::ok;
    }
};

std::vector<std::uint8_t> pattern(std::size_t length, unsigned seed) {
    std::vector<std::uint8_t> data(length);
    for (std::size_t i = 0; i < length; ++i) data[i] = static_cast<std::uint8_t>(seed * 31 + i * 7);
    return data;
}

class UctAmTest : public UctTest {
protected:
    void SetUp() override {
        UctTest::SetUp();
        ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, Received::handler, &received_, 0));
    }

    /** Sends with retries on no_resource (progressing in between), as a protocol would. */
    template <typename Send>
    void send_retrying(Send send) {
        for (;;) {
            auto result = send();
            if (static_cast<int>(result) != static_cast<int>(Status::no_resource)) {
                ASSERT_GE(static_cast<int>(result), 0) << to_string(static_cast<Status>(result));
                return;
            }
            progress();
        }
    }

    bool wait_messages(std::size_t n) {
        return wait_for([&] { return received_.messages.size() >= n; });
    }

    Received received_;
};

TEST_P(UctAmTest, ShortAllSizes) {
    if (!has(kCapAmShort)) GTEST_SKIP() << "transport has no am_short";
    std::vector<std::size_t> sizes = {0, 1, 7, 8, 63, 64, sender_->attr().am.max_short};
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        auto payload = pattern(sizes[i], static_cast<unsigned>(i));
        std::uint64_t header = 0x1122334455667788ull + i;
        send_retrying([&] {
            return ep_am_short(ep_, kAmId, header, payload.data(), static_cast<unsigned>(payload.size()));
        });
        ASSERT_TRUE(wait_messages(i + 1)) << "message of " << sizes[i] << " bytes did not arrive";
        const auto& got = received_.messages[i];
        ASSERT_EQ(sizeof(header) + payload.size(), got.size());
        std::uint64_t got_header;
        std::memcpy(&got_header, got.data(), sizeof(got_header));
        EXPECT_EQ(header, got_header);
        EXPECT_TRUE(std::equal(payload.begin(), payload.end(), got.begin() + sizeof(header)));
    }
}

TEST_P(UctAmTest, ShortTooLongIsRejected) {
    if (!has(kCapAmShort)) GTEST_SKIP() << "transport has no am_short";
    std::vector<std::uint8_t> payload(sender_->attr().am.max_short + 1);
    EXPECT_EQ(Status::exceeds_limit,
              ep_am_short(ep_, kAmId, 0, payload.data(), static_cast<unsigned>(payload.size())));
}

struct PackArg {
    const std::vector<std::uint8_t>* data;
};

std::size_t pack_vector(void* dest, void* arg) {
    const auto& data = *static_cast<PackArg*>(arg)->data;
    if (!data.empty()) std::memcpy(dest, data.data(), data.size());
    return data.size();
}

TEST_P(UctAmTest, BcopyAllSizes) {
    if (!has(kCapAmBcopy)) GTEST_SKIP() << "transport has no am_bcopy";
    std::size_t max = sender_->attr().am.max_bcopy;
    std::vector<std::size_t> sizes = {0, 1, 100, 1000, max / 2, max};
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        auto payload = pattern(sizes[i], static_cast<unsigned>(i + 100));
        PackArg arg{&payload};
        ssize_t packed = 0;
        send_retrying([&] {
            packed = ep_am_bcopy(ep_, kAmId, pack_vector, &arg, 0);
            return packed;
        });
        EXPECT_EQ(static_cast<ssize_t>(payload.size()), packed);
        ASSERT_TRUE(wait_messages(i + 1)) << "message of " << sizes[i] << " bytes did not arrive";
        EXPECT_EQ(payload, received_.messages[i]);
    }
}

TEST_P(UctAmTest, ZcopyHeaderAndIovs) {
    if (!has(kCapAmZcopy)) GTEST_SKIP() << "transport has no am_zcopy";
    const IfaceAttr& attr = sender_->attr();
    std::size_t iovcnt = std::min<std::size_t>(attr.am.max_iov, 4);
    std::size_t piece = std::min<std::size_t>(attr.am.max_zcopy / iovcnt, 3000);
    std::vector<std::uint8_t> buffer = pattern(piece * iovcnt, 9);
    MemH memh = kMemHNull;
    if (sender_->md_attr().flags & MdAttr::kNeedMemh) {
        auto reg = sender_->md().mem_reg(buffer.data(), buffer.size(), kAccessLocalRead);
        ASSERT_TRUE(reg.ok()) << to_string(reg.status());
        memh = *reg;
    }
    std::vector<Iov> iov;
    for (std::size_t i = 0; i < iovcnt; ++i) iov.push_back({buffer.data() + i * piece, piece, memh});
    std::uint8_t header[16];
    std::iota(header, header + sizeof(header), 200);
    std::size_t header_len = std::min<std::size_t>(attr.am.max_hdr, sizeof(header));

    CountingCompletion comp;
    Status status;
    do {
        status = ep_am_zcopy(ep_, kAmId, header, static_cast<unsigned>(header_len), iov.data(), iov.size(), 0, &comp);
        if (status == Status::no_resource) progress();
    } while (status == Status::no_resource);
    ASSERT_TRUE(status == Status::ok || status == Status::in_progress) << to_string(status);
    if (status == Status::in_progress) {
        ASSERT_TRUE(wait_for([&] { return comp.fired == 1; })) << "zcopy completion never fired";
        EXPECT_EQ(Status::ok, comp.status);
    }
    ASSERT_TRUE(wait_messages(1));
    const auto& got = received_.messages[0];
    ASSERT_EQ(header_len + buffer.size(), got.size());
    EXPECT_EQ(0, std::memcmp(got.data(), header, header_len));
    EXPECT_EQ(0, std::memcmp(got.data() + header_len, buffer.data(), buffer.size()));
    if (memh != kMemHNull) {
        EXPECT_EQ(Status::ok, sender_->md().mem_dereg(memh));
    }
}

TEST_P(UctAmTest, OrderIsKeptPerEndpoint) {
    if (!has(kCapAmShort)) GTEST_SKIP() << "transport has no am_short";
    constexpr std::uint64_t kCount = 2000;
    for (std::uint64_t seq = 0; seq < kCount; ++seq) {
        send_retrying([&] { return ep_am_short(ep_, kAmId, seq, nullptr, 0); });
    }
    ASSERT_TRUE(wait_messages(kCount));
    for (std::uint64_t seq = 0; seq < kCount; ++seq) {
        std::uint64_t got;
        std::memcpy(&got, received_.messages[seq].data(), sizeof(got));
        ASSERT_EQ(seq, got) << "message " << seq << " arrived out of order";
    }
}

TEST_P(UctAmTest, UnregisteredIdIsDroppedWithAWarning) {
    if (!has(kCapAmShort)) GTEST_SKIP() << "transport has no am_short";
    loom::test::LogCapture capture("warn");
    send_retrying([&] { return ep_am_short(ep_, kAmId + 1, 42, nullptr, 0); });
    send_retrying([&] { return ep_am_short(ep_, kAmId, 43, nullptr, 0); });
    ASSERT_TRUE(wait_messages(1));
    EXPECT_EQ(1u, received_.messages.size());
    EXPECT_EQ(1, capture.count("no handler registered"));
}

TEST_P(UctAmTest, HandlerCanBeReplacedAndReset) {
    if (!has(kCapAmShort)) GTEST_SKIP() << "transport has no am_short";
    Received other;
    ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, Received::handler, &other, 0));
    send_retrying([&] { return ep_am_short(ep_, kAmId, 1, nullptr, 0); });
    ASSERT_TRUE(wait_for([&] { return other.messages.size() == 1; }));
    EXPECT_TRUE(received_.messages.empty());
    ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, nullptr, nullptr, 0));
    loom::test::LogCapture capture("warn");
    send_retrying([&] { return ep_am_short(ep_, kAmId, 2, nullptr, 0); });
    ASSERT_TRUE(wait_for([&] { return capture.count("no handler registered") == 1; }));
    EXPECT_EQ(1u, other.messages.size());
}

TEST_P(UctAmTest, OutOfRangeHandlerIdIsInvalid) {
    loom::test::LogCapture capture("error");
    EXPECT_EQ(Status::invalid_param, receiver_->iface().set_am_handler(kAmIdMax, Received::handler, nullptr, 0));
    EXPECT_EQ(1, capture.count("out of range"));
}

TEST_P(UctAmTest, EndpointIsSmall) {
    // Endpoints exist per peer: their size is the memory cost of scale.
    EXPECT_GT(sender_->attr().ep_size, sizeof(Ep));
    EXPECT_LE(sender_->attr().ep_size, 128u) << GetParam().name() << " endpoints grew";
}

INSTANTIATE_TEST_SUITE_P(Transports, UctAmTest, testing::ValuesIn(all_resources()), resource_name);

}  // namespace
}  // namespace loom::uct::test
