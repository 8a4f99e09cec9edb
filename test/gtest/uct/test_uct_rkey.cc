/**
 * Remote-access checks of the transports that emulate RMA in software (tcp, self): the
 * target validates every put, get and atomic against its own key table. Forged keys
 * (wrong cookie or key id), addresses outside the region, missing rights and released
 * keys are refused with access_denied at the initiator, one log line where the check is
 * made (tcp: the target, and one at the initiator; self: one), and the target's memory
 * is never touched; the endpoint stays usable. Checked in one process on tcp and self,
 * and across two processes on tcp.
 */
#include "test_uct_tcp_common.h"
#include "uct/base/key_table.h"
#include "uct_peer.h"

#include "common/test_helpers.h"

#include <cstring>
#include <vector>

namespace loom::uct::test {
namespace {

constexpr std::size_t kSize = 64 * 1024;

/** Returns @p packed with its fields changed by @p edit. */
template <typename Edit>
std::vector<std::uint8_t> forge(const std::vector<std::uint8_t>& packed, Edit edit) {
    PackedRegionKey key;
    std::memcpy(&key, packed.data(), sizeof(key));
    edit(key);
    std::vector<std::uint8_t> out(sizeof(key));
    std::memcpy(out.data(), &key, sizeof(key));
    return out;
}

/** The transport under test: "tcp" (on lo) or "self". */
class RegionKeyTest : public TcpTest, public testing::WithParamInterface<std::string> {
protected:
    void SetUp() override {
        std::optional<Resource> resource;
        for (const Resource& r : all_resources()) {
            if (r.tl.tl_name == GetParam() && (GetParam() != "tcp" || r.tl.dev_name == "lo")) resource = r;
        }
        if (!resource) GTEST_SKIP() << "no " << GetParam() << " resource here";
        sender_ = std::make_unique<Entity>(*resource);
        receiver_ = std::make_unique<Entity>(*resource);
        ep_ = sender_->connect_to(*receiver_);
    }

    void TearDown() override {
        for (Rkey& k : keys_) sender_->md().component().rkey_release(k);
        for (MemH m : memhs_) (void)receiver_->md().mem_dereg(m);
        TcpTest::TearDown();
    }

    /** Log lines of the initiator for each refused access (tcp: it hears the target's refusal). */
    int initiator_lines() const { return GetParam() == "tcp" ? 1 : 0; }

    /** Registers @p buf on the receiver with @p access; returns the packed key. */
    std::vector<std::uint8_t> register_target(std::vector<std::uint8_t>& buf, unsigned access,
                                              MemH* memh = nullptr) {
        auto reg = receiver_->md().mem_reg(buf.data(), buf.size(), access);
        EXPECT_TRUE(reg.ok());
        std::vector<std::uint8_t> packed(receiver_->md_attr().rkey_packed_size);
        EXPECT_EQ(Status::ok, receiver_->md().mkey_pack(*reg, packed.data()));
        if (memh != nullptr) {
            *memh = *reg;
        } else {
            memhs_.push_back(*reg);
        }
        return packed;
    }

    std::uint64_t unpack(const std::vector<std::uint8_t>& packed) {
        auto rkey = sender_->md().component().rkey_unpack(packed.data(), packed.size());
        EXPECT_TRUE(rkey.ok());
        keys_.push_back(*rkey);
        return rkey->rkey;
    }

    Status finish(Status status, CountingCompletion& comp) {
        if (status != Status::in_progress) return status;
        if (!wait_for([&] { return comp.fired > 0; })) return Status::timed_out;
        return comp.status;
    }

    Status put_zcopy(std::uint64_t addr, std::uint64_t rkey, std::size_t length) {
        std::vector<std::uint8_t> data(length, 0xee);
        Iov iov{data.data(), data.size(), kMemHNull};
        CountingCompletion comp;
        Status s;
        while ((s = ep_put_zcopy(ep_, &iov, 1, addr, rkey, &comp)) == Status::no_resource) progress();
        return finish(s, comp);
    }

    Status put_short_and_flush(std::uint64_t addr, std::uint64_t rkey) {
        std::uint64_t value = 0xabababababababab;
        Status s;
        while ((s = ep_put_short(ep_, &value, sizeof(value), addr, rkey)) == Status::no_resource) progress();
        if (s != Status::ok) return s;
        CountingCompletion comp;
        while ((s = ep_flush(ep_, kFlushLocal, &comp)) == Status::no_resource) progress();
        return finish(s, comp);
    }

    Status get(std::uint64_t addr, std::uint64_t rkey, std::size_t length) {
        std::vector<std::uint8_t> out;
        CountingCompletion comp;
        Status s;
        while ((s = ep_get_bcopy(
                    ep_,
                    [](void* arg, const void* data, std::size_t len) {
                        auto* v = static_cast<std::vector<std::uint8_t>*>(arg);
                        v->assign(static_cast<const std::uint8_t*>(data),
                                  static_cast<const std::uint8_t*>(data) + len);
                    },
                    &out, length, addr, rkey, &comp)) == Status::no_resource) {
            progress();
        }
        return finish(s, comp);
    }

    Status atomic(std::uint64_t addr, std::uint64_t rkey) {
        std::uint64_t old = 0;
        CountingCompletion comp;
        Status s;
        while ((s = ep_atomic64_fetch(ep_, AtomicOp::add, 1, &old, addr, rkey, &comp)) ==
               Status::no_resource) {
            progress();
        }
        return finish(s, comp);
    }

    /** Runs every operation kind with @p rkey at @p addr and expects each to be refused, memory untouched. */
    void expect_all_denied(std::vector<std::uint8_t>& target, std::uint64_t addr, std::uint64_t rkey) {
        std::vector<std::uint8_t> before = target;
        loom::test::LogCapture capture("warn");
        EXPECT_EQ(Status::access_denied, put_zcopy(addr, rkey, 64));
        EXPECT_EQ(Status::access_denied, put_short_and_flush(addr, rkey));
        EXPECT_EQ(Status::access_denied, get(addr, rkey, 64));
        EXPECT_EQ(Status::access_denied, atomic(addr, rkey));
        EXPECT_EQ(before, target) << "refused accesses touched the target memory";
        // One line on the target per refused operation (and one on a tcp initiator).
        EXPECT_EQ(4, capture.count("refused a remote")) << capture.text();
        EXPECT_EQ(4 * initiator_lines(), capture.count("refused a") - capture.count("refused a remote"))
            << capture.text();
        // The endpoint stays usable.
        EXPECT_EQ(Status::ok, ep_am_short(ep_, 9, 0, nullptr, 0));
    }

    Ep* ep_ = nullptr;
    std::vector<Rkey> keys_;
    std::vector<MemH> memhs_;
};

TEST_P(RegionKeyTest, GenuineKeyWorks) {
    std::vector<std::uint8_t> target(kSize, 0);
    std::uint64_t rkey = unpack(register_target(target, kAccessAll));
    auto base = reinterpret_cast<std::uint64_t>(target.data());
    EXPECT_EQ(Status::ok, put_zcopy(base + kSize - 64, rkey, 64));
    EXPECT_EQ(0xee, target[kSize - 1]);
    EXPECT_EQ(Status::ok, get(base, rkey, 64));
    EXPECT_EQ(Status::ok, atomic(base + 8, rkey));
    EXPECT_EQ(1, target[8]);
}

TEST_P(RegionKeyTest, ForgedCookieIsRefused) {
    std::vector<std::uint8_t> target(kSize, 0);
    auto packed = register_target(target, kAccessAll);
    std::uint64_t rkey = unpack(forge(packed, [](PackedRegionKey& k) { k.cookie ^= 0x5555; }));
    expect_all_denied(target, reinterpret_cast<std::uint64_t>(target.data()), rkey);
}

TEST_P(RegionKeyTest, UnknownKeyIdIsRefused) {
    std::vector<std::uint8_t> target(kSize, 0);
    auto packed = register_target(target, kAccessAll);
    std::uint64_t rkey = unpack(forge(packed, [](PackedRegionKey& k) { k.key_id += 1000; }));
    expect_all_denied(target, reinterpret_cast<std::uint64_t>(target.data()), rkey);
}

TEST_P(RegionKeyTest, AddressesOutsideTheRegionAreRefused) {
    std::vector<std::uint8_t> memory(3 * kSize, 0);
    // Register the middle third only: the neighbours must stay untouched.
    auto reg = receiver_->md().mem_reg(memory.data() + kSize, kSize, kAccessAll);
    ASSERT_TRUE(reg.ok());
    memhs_.push_back(*reg);
    std::vector<std::uint8_t> packed(receiver_->md_attr().rkey_packed_size);
    ASSERT_EQ(Status::ok, receiver_->md().mkey_pack(*reg, packed.data()));
    // A key enlarged by the initiator does not help: the target checks its own table.
    std::uint64_t rkey = unpack(forge(packed, [](PackedRegionKey& k) { k.length *= 3; }));
    auto base = reinterpret_cast<std::uint64_t>(memory.data()) + kSize;
    expect_all_denied(memory, base + kSize, rkey);      // just past the end
    expect_all_denied(memory, base - 64, rkey);         // before the start
    expect_all_denied(memory, base + 2 * kSize, rkey);  // far beyond
    expect_all_denied(memory, ~0ull - 15, rkey);        // the end wraps around
    // Straddling the end: the part inside is not written either.
    std::vector<std::uint8_t> before = memory;
    EXPECT_EQ(Status::access_denied, put_zcopy(base + kSize - 32, rkey, 64));
    EXPECT_EQ(Status::access_denied, get(base + kSize - 32, rkey, 64));
    EXPECT_EQ(before, memory);
}

TEST_P(RegionKeyTest, MissingRightsAreRefused) {
    std::vector<std::uint8_t> target(kSize, 7);
    std::uint64_t rkey = unpack(register_target(target, kAccessRemoteGet));
    auto base = reinterpret_cast<std::uint64_t>(target.data());
    loom::test::LogCapture capture("warn");
    EXPECT_EQ(Status::ok, get(base, rkey, 64));
    EXPECT_EQ(Status::access_denied, put_zcopy(base, rkey, 64));
    EXPECT_EQ(Status::access_denied, atomic(base, rkey));
    EXPECT_EQ(std::vector<std::uint8_t>(kSize, 7), target);
    EXPECT_EQ(2, capture.count("access right not granted")) << capture.text();
}

TEST_P(RegionKeyTest, ReleasedKeyIsRefused) {
    std::vector<std::uint8_t> target(kSize, 0);
    MemH memh;
    std::uint64_t rkey = unpack(register_target(target, kAccessAll, &memh));
    ASSERT_EQ(Status::ok, receiver_->md().mem_dereg(memh));
    // The slot is reused by a new registration with a fresh cookie: the old key still fails.
    std::vector<std::uint8_t> other(kSize, 0);
    (void)register_target(other, kAccessAll);
    expect_all_denied(target, reinterpret_cast<std::uint64_t>(target.data()), rkey);
    EXPECT_EQ(std::vector<std::uint8_t>(kSize, 0), other);
}

TEST_P(RegionKeyTest, LargeRefusedPutIsDiscardedAndTheConnectionSurvives) {
    std::vector<std::uint8_t> target(4 << 20, 0);
    auto packed = register_target(target, kAccessAll);
    std::uint64_t bad = unpack(forge(packed, [](PackedRegionKey& k) { k.cookie ^= 1; }));
    std::uint64_t good = unpack(packed);
    auto base = reinterpret_cast<std::uint64_t>(target.data());
    loom::test::LogCapture capture("warn");
    EXPECT_EQ(Status::access_denied, put_zcopy(base, bad, 2 << 20));
    EXPECT_EQ(std::vector<std::uint8_t>(4 << 20, 0), target);
    EXPECT_EQ(Status::ok, put_zcopy(base, good, 3 << 20));
    EXPECT_EQ(0xee, target[(3 << 20) - 1]);
    EXPECT_EQ(0, target[3 << 20]);
}

TEST_P(RegionKeyTest, GarbageKeysDoNotUnpack) {
    std::vector<std::uint8_t> target(64, 0);
    auto packed = register_target(target, kAccessAll);
    const Component& c = sender_->md().component();
    loom::test::LogCapture capture("error");
    auto bad_version = forge(packed, [](PackedRegionKey& k) { k.version = 9; });
    EXPECT_EQ(Status::invalid_param, c.rkey_unpack(bad_version.data(), bad_version.size()).status());
    auto bad_access = forge(packed, [](PackedRegionKey& k) { k.access = 0xff; });
    EXPECT_EQ(Status::invalid_param, c.rkey_unpack(bad_access.data(), bad_access.size()).status());
    auto wrapping = forge(packed, [](PackedRegionKey& k) { k.base = ~0ull - 4; });
    EXPECT_EQ(Status::invalid_param, c.rkey_unpack(wrapping.data(), wrapping.size()).status());
    EXPECT_EQ(3, capture.count("rkey_unpack")) << capture.text();
    EXPECT_EQ(Status::invalid_param, receiver_->md().mem_dereg(reinterpret_cast<MemH>(&target)));
}

INSTANTIATE_TEST_SUITE_P(SoftwareRma, RegionKeyTest, testing::Values("tcp", "self"),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(TcpRkeyTwoProcesses, ForgedAndOutOfRangeKeysAreRefusedByTheTarget) {
    auto lo = find_tcp_resource("lo");
    if (!lo) GTEST_SKIP() << "no tcp on lo";
    Resource resource = *lo;
    constexpr std::size_t kBuf = 16 * 1024;
    loom::test::ForkedPeer peer([resource](loom::test::ForkedPeer::Channel& ch) {
        ProcSide side(resource, kBuf);
        std::memset(side.buffer(), 0x33, kBuf);
        loom::test::LogCapture capture("warn");
        if (!side.exchange(ch)) return 3;
        // Serve until the parent reports it is done.
        bool done = false;
        (void)side.entity().iface().set_am_handler(
            1,
            [](void* arg, void*, std::size_t, unsigned) {
                *static_cast<bool*>(arg) = true;
                return Status::ok;
            },
            &done, 0);
        (void)side.progress_until([&] { return done; }, std::chrono::seconds(20));
        bool untouched = true;
        for (std::size_t i = 0; i < kBuf; ++i) untouched = untouched && side.buffer()[i] == 0x33;
        ch.send(std::to_string(capture.count("refused a remote")) + (untouched ? " untouched" : " touched"));
        (void)ch.recv(std::chrono::seconds(20));
        return 0;
    });
    ProcSide side(resource, 4096);
    ASSERT_TRUE(side.exchange(peer.channel()));
    ASSERT_EQ(Status::ok, side.connect());
    loom::test::LogCapture capture("warn");
    const Component& c = side.entity().md().component();
    auto forged = forge(side.peer().rkey, [](PackedRegionKey& k) { k.cookie += 1; });
    auto rk = c.rkey_unpack(forged.data(), forged.size());
    ASSERT_TRUE(rk.ok());
    std::vector<std::uint8_t> data(256, 0xcc);
    Iov iov{data.data(), data.size(), kMemHNull};
    CountingCompletion c1, c2, c3;
    EXPECT_EQ(Status::access_denied, side.finish(side.retry([&] {
        return ep_put_zcopy(side.ep(), &iov, 1, side.peer_addr(0), rk->rkey, &c1);
    }),
                                                 c1));
    EXPECT_EQ(Status::access_denied, side.finish(side.retry([&] {
        return ep_put_zcopy(side.ep(), &iov, 1, side.peer_addr(kBuf - 100), side.peer_rkey(), &c2);
    }),
                                                 c2));
    std::uint64_t old = 0;
    EXPECT_EQ(Status::access_denied, side.finish(side.retry([&] {
        return ep_atomic64_fetch(side.ep(), AtomicOp::swap, 1, &old, side.peer_addr(kBuf), side.peer_rkey(),
                                 &c3);
    }),
                                                 c3));
    c.rkey_release(*rk);
    EXPECT_EQ(3, capture.count("refused a")) << capture.text();
    ASSERT_EQ(Status::ok, side.retry([&] { return ep_am_short(side.ep(), 1, 0, nullptr, 0); }));
    auto report = peer.channel().recv_text(std::chrono::seconds(20));
    ASSERT_TRUE(report.has_value());
    EXPECT_EQ("3 untouched", *report);
    peer.channel().send(std::string("bye"));
    EXPECT_EQ(0, peer.wait());
}

}  // namespace
}  // namespace loom::uct::test
