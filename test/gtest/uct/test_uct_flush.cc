#include "uct_test.h"

#include <cstring>
#include <vector>

namespace loom::uct::test {
namespace {

/**
 * Flush and fence semantics every transport must keep: after an ep or iface flush
 * completes, every put issued before it is visible at the target; operations
 * separated by a fence are applied in order; zcopy completions fire no later than
 * the flush that covers them.
 */
class UctFlushTest : public UctTest {
protected:
    void SetUp() override {
        UctTest::SetUp();
        target_.assign(kSize, 0);
        auto reg = receiver_->md().mem_reg(target_.data(), target_.size(), kAccessAll);
        ASSERT_TRUE(reg.ok()) << to_string(reg.status());
        memh_ = *reg;
        std::vector<std::uint8_t> packed(receiver_->md_attr().rkey_packed_size);
        ASSERT_EQ(Status::ok, receiver_->md().mkey_pack(memh_, packed.data()));
        auto rkey = sender_->md().component().rkey_unpack(packed.data(), packed.size());
        ASSERT_TRUE(rkey.ok());
        rkey_ = *rkey;
    }

    void TearDown() override {
        sender_->md().component().rkey_release(rkey_);
        if (memh_) {
            EXPECT_EQ(Status::ok, receiver_->md().mem_dereg(memh_));
        }
        UctTest::TearDown();
    }

    std::uint64_t remote(std::size_t offset) const {
        return reinterpret_cast<std::uint64_t>(target_.data()) + offset;
    }

    Status put_word(std::uint64_t value, std::size_t offset, Ep* ep = nullptr) {
        Status status;
        while ((status = ep_put_short(ep ? ep : ep_, &value, sizeof(value), remote(offset), rkey_.rkey)) ==
               Status::no_resource) {
            progress();
        }
        return status;
    }

    /** Runs a flush to completion; returns its final status. */
    template <typename Flush>
    Status complete(Flush flush) {
        CountingCompletion comp;
        Status status;
        while ((status = flush(&comp)) == Status::no_resource) progress();
        if (status == Status::in_progress) {
            if (!wait_for([&] { return comp.fired == 1; })) return Status::timed_out;
            status = comp.status;
        }
        return status;
    }

    std::uint64_t word(std::size_t offset) const {
        std::uint64_t v;
        std::memcpy(&v, target_.data() + offset, sizeof(v));
        return v;
    }

    static constexpr std::size_t kSize = 4096;
    std::vector<std::uint8_t> target_;
    MemH memh_ = kMemHNull;
    Rkey rkey_;
};

TEST_P(UctFlushTest, EpFlushMakesEveryPutVisible) {
    if (!has(kCapPutShort)) GTEST_SKIP() << "transport has no put_short";
    constexpr std::size_t kWords = 256;
    for (std::size_t i = 0; i < kWords; ++i) ASSERT_EQ(Status::ok, put_word(i + 1, i * 8));
    ASSERT_EQ(Status::ok, complete([&](Completion* c) { return ep_flush(ep_, kFlushLocal, c); }));
    // No progress on the target after the flush: the data must already be there.
    for (std::size_t i = 0; i < kWords; ++i) ASSERT_EQ(i + 1, word(i * 8)) << "word " << i;
}

TEST_P(UctFlushTest, IfaceFlushCoversEveryEndpoint) {
    if (!has(kCapPutShort)) GTEST_SKIP() << "transport has no put_short";
    Ep* second = sender_->connect_to(*receiver_);
    ASSERT_EQ(Status::ok, put_word(11, 0, ep_));
    ASSERT_EQ(Status::ok, put_word(22, 8, second));
    ASSERT_EQ(Status::ok, complete([&](Completion* c) { return iface_flush(&sender_->iface(), kFlushLocal, c); }));
    EXPECT_EQ(11u, word(0));
    EXPECT_EQ(22u, word(8));
}

TEST_P(UctFlushTest, FencedPutsApplyInOrder) {
    if (!has(kCapPutShort)) GTEST_SKIP() << "transport has no put_short";
    for (std::uint64_t v = 1; v <= 100; ++v) {
        ASSERT_EQ(Status::ok, put_word(v, 64));
        ASSERT_EQ(Status::ok, ep_fence(ep_, 0));
    }
    ASSERT_EQ(Status::ok, complete([&](Completion* c) { return ep_flush(ep_, kFlushLocal, c); }));
    EXPECT_EQ(100u, word(64)) << "a fenced put overtook a later one";
}

TEST_P(UctFlushTest, ZcopyCompletesNoLaterThanFlush) {
    if (!has(kCapPutZcopy)) GTEST_SKIP() << "transport has no put_zcopy";
    std::vector<std::uint8_t> data(2048, 0x5c);
    MemH memh = kMemHNull;
    if (sender_->md_attr().flags & MdAttr::kNeedMemh) {
        auto reg = sender_->md().mem_reg(data.data(), data.size(), kAccessLocalRead);
        ASSERT_TRUE(reg.ok());
        memh = *reg;
    }
    Iov iov{data.data(), data.size(), memh};
    CountingCompletion put_comp;
    Status status;
    while ((status = ep_put_zcopy(ep_, &iov, 1, remote(1024), rkey_.rkey, &put_comp)) == Status::no_resource) {
        progress();
    }
    ASSERT_TRUE(status == Status::ok || status == Status::in_progress) << to_string(status);
    bool zcopy_pending = status == Status::in_progress;
    ASSERT_EQ(Status::ok, complete([&](Completion* c) { return ep_flush(ep_, kFlushLocal, c); }));
    if (zcopy_pending) {
        EXPECT_EQ(1, put_comp.fired) << "flush completed before the zcopy it covers";
    }
    EXPECT_EQ(0, std::memcmp(target_.data() + 1024, data.data(), data.size()));
    if (memh) {
        EXPECT_EQ(Status::ok, sender_->md().mem_dereg(memh));
    }
}

TEST_P(UctFlushTest, AmOrderIsKeptAcrossFlushes) {
    if (!has(kCapAmShort)) GTEST_SKIP() << "transport has no am_short";
    std::vector<std::uint64_t> got;
    ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(
                              7,
                              [](void* arg, void* data, std::size_t, unsigned) {
                                  std::uint64_t v;
                                  std::memcpy(&v, data, sizeof(v));
                                  static_cast<std::vector<std::uint64_t>*>(arg)->push_back(v);
                                  return Status::ok;
                              },
                              &got, 0));
    for (std::uint64_t i = 0; i < 50; ++i) {
        Status status;
        while ((status = ep_am_short(ep_, 7, i, nullptr, 0)) == Status::no_resource) progress();
        ASSERT_EQ(Status::ok, status);
        if (i % 10 == 9) {
            ASSERT_EQ(Status::ok, complete([&](Completion* c) { return ep_flush(ep_, kFlushLocal, c); }));
        }
    }
    ASSERT_TRUE(wait_for([&] { return got.size() == 50; }));
    for (std::uint64_t i = 0; i < 50; ++i) EXPECT_EQ(i, got[i]);
}

INSTANTIATE_TEST_SUITE_P(Transports, UctFlushTest, testing::ValuesIn(all_resources()), resource_name);

}  // namespace
}  // namespace loom::uct::test
