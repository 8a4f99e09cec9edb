/**
 * Two real processes (test::ForkedPeer) talking over every transport that can reach
 * another process: both run the same script at the same time, so every operation goes
 * both ways. Active messages of every flavour and size are self-describing (a header
 * with kind, sequence number and length, then a seeded pattern) and checked by the
 * receiver, in order; puts of every flavour are read back with gets and checked by
 * the target in its own memory; atomics check the values they fetch; flush makes puts
 * visible. Each side ends with a "done" message and stays in progress until the
 * peer's arrives, so neither leaves while the other still needs it. Transports with
 * wake-up events also wake a peer process asleep on its iface's event fd.
 */
#include "uct_peer.h"

#include "common/test_helpers.h"

#include <poll.h>
#include <sys/syscall.h>

#include <cstdio>
#include <cstring>
#include <sstream>

namespace loom::uct::test {
namespace {

constexpr AmId kAmData = 7;
constexpr AmId kAmDone = 8;
constexpr std::size_t kBufferSize = 256 * 1024;

enum Kind : std::uint8_t { kShort = 1, kBcopy = 2, kZcopy = 3 };

/** Header of every test message: what it is, so the receiver can check it alone. */
struct MsgDesc {
    std::uint8_t kind;
    std::uint8_t reserved[3];
    std::uint32_t seq;
    std::uint32_t length;  ///< pattern bytes after the descriptor (short: the payload)
    std::uint32_t seed;
};
static_assert(sizeof(MsgDesc) == 16);

/** Receiver state: counts per kind and the first problem seen. */
struct Inbox {
    unsigned count[4] = {};
    bool peer_done = false;
    std::string error;

    void fail(const std::string& what) {
        if (error.empty()) error = what;
    }

    static Status on_data(void* arg, void* data, std::size_t length, unsigned) {
        auto* self = static_cast<Inbox*>(arg);
        const auto* bytes = static_cast<const std::uint8_t*>(data);
        if (length < 8) {
            self->fail("message shorter than its header");
            return Status::ok;
        }
        // am_short: an 8-byte header (kind, seq, length) then the payload; others: a MsgDesc first.
        MsgDesc desc{};
        std::size_t offset;
        std::uint64_t word;
        std::memcpy(&word, bytes, 8);
        if ((word & 0xff) == kShort) {
            desc.kind = kShort;
            desc.seq = static_cast<std::uint32_t>(word >> 8) & 0xffffff;
            desc.length = static_cast<std::uint32_t>(word >> 32);
            desc.seed = desc.seq + 1000;
            offset = 8;
        } else {
            if (length < sizeof(MsgDesc)) {
                self->fail("message shorter than its descriptor");
                return Status::ok;
            }
            std::memcpy(&desc, bytes, sizeof(desc));
            offset = sizeof(desc);
        }
        if (desc.kind < kShort || desc.kind > kZcopy) {
            self->fail("unknown message kind " + std::to_string(desc.kind));
            return Status::ok;
        }
        if (desc.seq != self->count[desc.kind]) {
            self->fail("kind " + std::to_string(desc.kind) + ": message " + std::to_string(desc.seq) +
                       " arrived when " + std::to_string(self->count[desc.kind]) + " was expected");
        }
        ++self->count[desc.kind];
        if (length != offset + desc.length) {
            self->fail("kind " + std::to_string(desc.kind) + " message " + std::to_string(desc.seq) + ": length " +
                       std::to_string(length) + ", expected " + std::to_string(offset + desc.length));
            return Status::ok;
        }
        auto expected = test_pattern(desc.length, desc.seed);
        if (desc.length > 0 && std::memcmp(bytes + offset, expected.data(), desc.length) != 0) {
            self->fail("kind " + std::to_string(desc.kind) + " message " + std::to_string(desc.seq) +
                       ": payload differs");
        }
        return Status::ok;
    }

    static Status on_done(void* arg, void*, std::size_t, unsigned) {
        static_cast<Inbox*>(arg)->peer_done = true;
        return Status::ok;
    }
};

/** Message sizes of the script, from the transport's limits (the same on both sides). */
struct Plan {
    std::vector<std::size_t> short_sizes, bcopy_sizes, zcopy_sizes;
    explicit Plan(const IfaceAttr& attr) {
        if (attr.cap_flags & kCapAmShort) {
            for (std::size_t s : {std::size_t(0), std::size_t(1), std::size_t(8), std::size_t(63), attr.am.max_short}) {
                short_sizes.push_back(std::min(s, attr.am.max_short));
            }
        }
        if ((attr.cap_flags & kCapAmBcopy) && attr.am.max_bcopy >= sizeof(MsgDesc)) {
            std::size_t max = attr.am.max_bcopy - sizeof(MsgDesc);
            for (std::size_t s : {std::size_t(0), std::size_t(100), std::size_t(1000), max / 2, max}) {
                bcopy_sizes.push_back(std::min(s, max));
            }
        }
        if ((attr.cap_flags & kCapAmZcopy) && attr.am.max_hdr >= sizeof(MsgDesc) &&
            attr.am.max_zcopy >= sizeof(MsgDesc)) {
            std::size_t max = attr.am.max_zcopy - sizeof(MsgDesc);
            for (std::size_t s : {std::size_t(1), std::size_t(3000), max}) zcopy_sizes.push_back(std::min(s, max));
        }
    }
};

std::size_t pack_bytes(void* dest, void* arg) {
    auto* data = static_cast<std::vector<std::uint8_t>*>(arg);
    std::memcpy(dest, data->data(), data->size());
    return data->size();
}

void unpack_bytes(void* arg, const void* data, std::size_t length) {
    auto* out = static_cast<std::vector<std::uint8_t>*>(arg);
    const auto* bytes = static_cast<const std::uint8_t*>(data);
    out->assign(bytes, bytes + length);
}

/** Where each side's puts land in the peer's buffer, and with which seed. */
struct PutRegion {
    std::size_t offset;
    std::size_t length;
    std::uint32_t seed;
};

std::vector<PutRegion> put_regions(const IfaceAttr& attr) {
    std::vector<PutRegion> regions;
    if (attr.cap_flags & kCapPutShort) regions.push_back({0, std::min<std::size_t>(attr.put.max_short, 200), 11});
    if (attr.cap_flags & kCapPutBcopy) regions.push_back({4096, std::min<std::size_t>(attr.put.max_bcopy, 5000), 12});
    if (attr.cap_flags & kCapPutZcopy) {
        regions.push_back({16384, std::min<std::size_t>(attr.put.max_zcopy, 128 * 1024), 13});
    }
    return regions;
}

constexpr std::size_t kAtomic64Offset = kBufferSize - 64;
constexpr std::size_t kAtomic32Offset = kBufferSize - 128;

/** The script both processes run; returns "" or what went wrong. */
/**
 * Atomic words start at known values. This must happen before the address exchange:
 * a transport with true one-sided atomics (shm, rc) may change them as soon as the
 * peer knows the address, without this process's progress.
 */
void init_atomic_words(ProcSide& side) {
    auto* w64 = reinterpret_cast<std::uint64_t*>(side.buffer() + kAtomic64Offset);
    auto* w32 = reinterpret_cast<std::uint32_t*>(side.buffer() + kAtomic32Offset);
    *w64 = 100;
    *w32 = 10;
}

class Script {
public:
    Script(ProcSide& side) : side_(side), attr_(side.entity().attr()), plan_(attr_) {}

    std::string run() {
        Iface& iface = side_.entity().iface();
        if (iface.set_am_handler(kAmData, Inbox::on_data, &inbox_, 0) != Status::ok ||
            iface.set_am_handler(kAmDone, Inbox::on_done, &inbox_, 0) != Status::ok) {
            return "set_am_handler failed";
        }
        if (Status s = side_.connect(); s != Status::ok) return std::string("connect: ") + std::string(to_string(s));
        std::string err;
        if (err.empty()) err = send_short();
        if (err.empty()) err = send_bcopy();
        if (err.empty()) err = send_zcopy();
        if (err.empty()) err = rma();
        if (err.empty()) err = atomics();
        if (err.empty()) err = finish();
        if (err.empty()) err = inbox_.error;
        if (err.empty()) err = check_own_buffer();
        return err;
    }

private:
    ProcSide& side_;
    const IfaceAttr& attr_;
    Plan plan_;
    Inbox inbox_;

    static std::string failed(const std::string& what, Status s) { return what + ": " + std::string(to_string(s)); }

    std::string send_short() {
        for (std::size_t i = 0; i < plan_.short_sizes.size(); ++i) {
            std::size_t len = plan_.short_sizes[i];
            auto seq = static_cast<std::uint32_t>(i);
            auto payload = test_pattern(len, seq + 1000);
            std::uint64_t header = kShort | (static_cast<std::uint64_t>(seq) << 8) | (static_cast<std::uint64_t>(len) << 32);
            Status s = side_.retry([&] {
                return ep_am_short(side_.ep(), kAmData, header, payload.data(), static_cast<unsigned>(len));
            });
            if (s != Status::ok) return failed("am_short of " + std::to_string(len) + " bytes", s);
        }
        return "";
    }

    std::string send_bcopy() {
        for (std::size_t i = 0; i < plan_.bcopy_sizes.size(); ++i) {
            std::size_t len = plan_.bcopy_sizes[i];
            MsgDesc desc{kBcopy, {}, static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(len),
                         static_cast<std::uint32_t>(2000 + i)};
            std::vector<std::uint8_t> msg(sizeof(desc));
            std::memcpy(msg.data(), &desc, sizeof(desc));
            auto payload = test_pattern(len, desc.seed);
            msg.insert(msg.end(), payload.begin(), payload.end());
            ssize_t packed = side_.retry([&] { return ep_am_bcopy(side_.ep(), kAmData, pack_bytes, &msg, 0); });
            if (packed != static_cast<ssize_t>(msg.size())) {
                return "am_bcopy of " + std::to_string(len) + " bytes returned " + std::to_string(packed);
            }
        }
        return "";
    }

    std::string send_zcopy() {
        for (std::size_t i = 0; i < plan_.zcopy_sizes.size(); ++i) {
            std::size_t len = plan_.zcopy_sizes[i];
            MsgDesc desc{kZcopy, {}, static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(len),
                         static_cast<std::uint32_t>(3000 + i)};
            auto payload = test_pattern(len, desc.seed);
            MemH memh = kMemHNull;
            if (side_.entity().md_attr().flags & MdAttr::kNeedMemh) {
                auto reg = side_.entity().md().mem_reg(payload.data(), payload.size(), kAccessLocalRead);
                if (!reg) return failed("mem_reg", reg.status());
                memh = *reg;
            }
            // Up to three pieces, of uneven sizes.
            std::vector<Iov> iov;
            std::size_t pieces = std::min<std::size_t>({attr_.am.max_iov, 3, len});
            std::size_t done = 0;
            for (std::size_t p = 0; p < pieces; ++p) {
                std::size_t piece = p + 1 == pieces ? len - done : (len - done) / 3 + 1;
                iov.push_back({payload.data() + done, piece, memh});
                done += piece;
            }
            CountingCompletion comp;
            Status s = side_.retry([&] {
                return ep_am_zcopy(side_.ep(), kAmData, &desc, sizeof(desc), iov.data(), iov.size(), 0, &comp);
            });
            s = side_.finish(s, comp);
            if (memh != kMemHNull) (void)side_.entity().md().mem_dereg(memh);
            if (s != Status::ok) return failed("am_zcopy of " + std::to_string(len) + " bytes", s);
        }
        return "";
    }

    Status flush() {
        CountingCompletion comp;
        Status s = side_.retry([&] { return ep_flush(side_.ep(), kFlushLocal, &comp); });
        return side_.finish(s, comp);
    }

    std::string rma() {
        std::uint64_t rkey = side_.peer_rkey();
        for (const PutRegion& r : put_regions(attr_)) {
            auto data = test_pattern(r.length, r.seed);
            Status s;
            if (r.seed == 11) {
                s = side_.retry([&] {
                    return ep_put_short(side_.ep(), data.data(), static_cast<unsigned>(data.size()),
                                        side_.peer_addr(r.offset), rkey);
                });
            } else if (r.seed == 12) {
                ssize_t n = side_.retry([&] { return ep_put_bcopy(side_.ep(), pack_bytes, &data, side_.peer_addr(r.offset), rkey); });
                s = n == static_cast<ssize_t>(data.size()) ? Status::ok : static_cast<Status>(n < 0 ? n : -3);
            } else {
                MemH memh = kMemHNull;
                if (side_.entity().md_attr().flags & MdAttr::kNeedMemh) memh = *side_.entity().md().mem_reg(data.data(), data.size(), kAccessLocalRead);
                std::size_t half = std::min<std::size_t>(attr_.put.max_iov, 2) == 2 ? data.size() / 2 : data.size();
                Iov iov[2] = {{data.data(), half, memh}, {data.data() + half, data.size() - half, memh}};
                CountingCompletion comp;
                s = side_.retry([&] {
                    return ep_put_zcopy(side_.ep(), iov, half == data.size() ? 1 : 2, side_.peer_addr(r.offset), rkey, &comp);
                });
                s = side_.finish(s, comp);
                if (memh != kMemHNull) (void)side_.entity().md().mem_dereg(memh);
            }
            if (s != Status::ok) return failed("put of " + std::to_string(r.length) + " bytes", s);
        }
        if (Status s = flush(); s != Status::ok) return failed("flush after puts", s);
        // Read every region back, with both get flavours where they fit.
        for (const PutRegion& r : put_regions(attr_)) {
            auto expected = test_pattern(r.length, r.seed);
            if ((attr_.cap_flags & kCapGetBcopy) && r.length <= attr_.get.max_bcopy) {
                std::vector<std::uint8_t> got;
                CountingCompletion comp;
                Status s = side_.retry([&] {
                    return ep_get_bcopy(side_.ep(), unpack_bytes, &got, r.length, side_.peer_addr(r.offset), rkey, &comp);
                });
                if ((s = side_.finish(s, comp)) != Status::ok) return failed("get_bcopy", s);
                if (got != expected) return "get_bcopy of the put region at " + std::to_string(r.offset) + " differs";
            }
            if ((attr_.cap_flags & kCapGetZcopy) && r.length <= attr_.get.max_zcopy) {
                std::vector<std::uint8_t> got(r.length, 0);
                MemH memh = kMemHNull;
                if (side_.entity().md_attr().flags & MdAttr::kNeedMemh) memh = *side_.entity().md().mem_reg(got.data(), got.size(), kAccessLocalWrite);
                Iov iov{got.data(), got.size(), memh};
                CountingCompletion comp;
                Status s = side_.retry([&] {
                    return ep_get_zcopy(side_.ep(), &iov, 1, side_.peer_addr(r.offset), rkey, &comp);
                });
                s = side_.finish(s, comp);
                if (memh != kMemHNull) (void)side_.entity().md().mem_dereg(memh);
                if (s != Status::ok) return failed("get_zcopy", s);
                if (got != expected) return "get_zcopy of the put region at " + std::to_string(r.offset) + " differs";
            }
        }
        return "";
    }

    std::string atomics() {
        std::uint64_t rkey = side_.peer_rkey();
        Ep* ep = side_.ep();
        if ((attr_.cap_flags & kCapAtomic64) && (attr_.atomic64_ops & atomic_op_bit(AtomicOp::add))) {
            std::uint64_t addr = side_.peer_addr(kAtomic64Offset);
            std::uint64_t old = 0;
            CountingCompletion c1;
            Status s = side_.finish(side_.retry([&] { return ep_atomic64_fetch(ep, AtomicOp::add, 5, &old, addr, rkey, &c1); }), c1);
            if (s != Status::ok || old != 100) return "atomic64 fetch-add: " + std::string(to_string(s)) + ", old " + std::to_string(old);
            // A posted (non-fetching) xor where the transport has one (verbs offer only add).
            bool has_xor = attr_.atomic64_ops & atomic_op_bit(AtomicOp::xor_);
            AtomicOp post_op = has_xor ? AtomicOp::xor_ : AtomicOp::add;
            std::uint64_t expected = has_xor ? (105 ^ 0xff) : 105 + 0xff;
            s = side_.retry([&] { return ep_atomic64_post(ep, post_op, 0xff, addr, rkey); });
            if (s != Status::ok || (s = flush()) != Status::ok) return failed("atomic64 post", s);
            if (attr_.atomic64_ops & atomic_op_bit(AtomicOp::cswap)) {
                CountingCompletion c2;
                s = side_.finish(side_.retry([&] { return ep_atomic64_cswap(ep, expected, 7, addr, rkey, &old, &c2); }), c2);
                if (s != Status::ok || old != expected) return "atomic64 cswap: old " + std::to_string(old);
            }
        }
        if ((attr_.cap_flags & kCapAtomic32) && (attr_.atomic32_ops & atomic_op_bit(AtomicOp::swap))) {
            std::uint64_t addr = side_.peer_addr(kAtomic32Offset);
            std::uint32_t old = 0;
            CountingCompletion c;
            Status s = side_.finish(side_.retry([&] { return ep_atomic32_fetch(ep, AtomicOp::swap, 77, &old, addr, rkey, &c); }), c);
            if (s != Status::ok || old != 10) return "atomic32 swap: " + std::string(to_string(s)) + ", old " + std::to_string(old);
        }
        return "";
    }

    std::string finish() {
        if (Status s = flush(); s != Status::ok) return failed("final flush", s);
        Status s = side_.retry([&] { return ep_am_short(side_.ep(), kAmDone, 0, nullptr, 0); });
        if (s != Status::ok) return failed("done message", s);
        Plan& p = plan_;
        // The peer runs the same script; under emulation with sanitizers (and siw's accept
        // window widened) it may finish well after this side.
        bool ok = side_.progress_until(
            [&] {
                return inbox_.peer_done && inbox_.count[kShort] >= p.short_sizes.size() &&
                       inbox_.count[kBcopy] >= p.bcopy_sizes.size() &&
                       inbox_.count[kZcopy] >= p.zcopy_sizes.size();
            },
            std::chrono::seconds(30));
        if (!ok) {
            std::ostringstream os;
            os << "timed out waiting for the peer: done " << inbox_.peer_done << ", short " << inbox_.count[kShort]
               << "/" << p.short_sizes.size() << ", bcopy " << inbox_.count[kBcopy] << "/" << p.bcopy_sizes.size()
               << ", zcopy " << inbox_.count[kZcopy] << "/" << p.zcopy_sizes.size();
            return os.str();
        }
        // Once the done message is in, the peer finished: nothing more can arrive.
        if (inbox_.count[kShort] != p.short_sizes.size() || inbox_.count[kBcopy] != p.bcopy_sizes.size() ||
            inbox_.count[kZcopy] != p.zcopy_sizes.size()) {
            return "received more messages than were sent";
        }
        return "";
    }

    /** The peer's puts and atomics, as seen in this process's own memory. */
    std::string check_own_buffer() {
        for (const PutRegion& r : put_regions(attr_)) {
            auto expected = test_pattern(r.length, r.seed);
            if (std::memcmp(side_.buffer() + r.offset, expected.data(), r.length) != 0) {
                return "the peer's put at offset " + std::to_string(r.offset) + " is not in this process's memory";
            }
        }
        if ((attr_.cap_flags & kCapAtomic64) && (attr_.atomic64_ops & atomic_op_bit(AtomicOp::cswap))) {
            std::uint64_t w;
            std::memcpy(&w, side_.buffer() + kAtomic64Offset, 8);
            if (w != 7) return "atomic64 word is " + std::to_string(w) + ", expected 7";
        }
        if ((attr_.cap_flags & kCapAtomic32) && (attr_.atomic32_ops & atomic_op_bit(AtomicOp::swap))) {
            std::uint32_t w;
            std::memcpy(&w, side_.buffer() + kAtomic32Offset, 4);
            if (w != 77) return "atomic32 word is " + std::to_string(w) + ", expected 77";
        }
        return "";
    }
};

class UctMultiProcTest : public testing::TestWithParam<Resource> {
protected:
    void SetUp() override {
        // Probe the capabilities without keeping anything open across fork().
        Entity probe(GetParam());
        attr_ = probe.attr();
        if (attr_.cap_flags & kCapSelfOnly) {
            GTEST_SKIP() << GetParam().name() << " reaches only its own process";
        }
    }

    IfaceAttr attr_;
};

/** The peer of EverythingBothWays (args: the resource name). */
int everything_peer(loom::test::ForkedPeer::Channel& ch, const std::vector<std::string>& args) {
    ProcSide side(find_resource(args.at(0)), kBufferSize);
    init_atomic_words(side);
    if (!side.exchange(ch)) return 3;
    std::string err = Script(side).run();
    ch.send(err.empty() ? std::string("ok") : err);
    // Stay until the parent has read the result: leaving early would reset its connections mid-test.
    (void)ch.recv(std::chrono::seconds(20));
    return err.empty() ? 0 : 1;
}
LOOM_TEST_PEER_ROLE(everything_peer);

constexpr unsigned kInOrderCount = 20000;

/** The receiving peer of ManyMessagesStayInOrder (args: the resource name). */
int in_order_peer(loom::test::ForkedPeer::Channel& ch, const std::vector<std::string>& args) {
    ProcSide side(find_resource(args.at(0)), 4096);
    struct Seen {
        std::uint64_t next = 0;
        bool ok = true;
    } seen;
    (void)side.entity().iface().set_am_handler(
        kAmData,
        [](void* arg, void* data, std::size_t, unsigned) {
            auto* s = static_cast<Seen*>(arg);
            std::uint64_t seq;
            std::memcpy(&seq, data, 8);
            s->ok = s->ok && seq == s->next;
            ++s->next;
            return Status::ok;
        },
        &seen, 0);
    if (!side.exchange(ch)) return 3;
    bool done = side.progress_until([&] { return seen.next >= kInOrderCount; }, std::chrono::seconds(20));
    ch.send(std::string(done && seen.ok ? "ok" : "bad order or missing messages"));
    (void)ch.recv(std::chrono::seconds(20));
    return 0;
}
LOOM_TEST_PEER_ROLE(in_order_peer);

TEST_P(UctMultiProcTest, EverythingBothWays) {
    Resource resource = GetParam();
    loom::test::ForkedPeer peer("everything_peer", {resource.name()});
    ProcSide side(resource, kBufferSize);
    init_atomic_words(side);
    ASSERT_TRUE(side.exchange(peer.channel())) << "the peer did not answer";
    std::string err = Script(side).run();
    EXPECT_EQ("", err) << "parent side";
    auto child = peer.channel().recv_text(std::chrono::seconds(20));
    ASSERT_TRUE(child.has_value()) << "the peer died";
    EXPECT_EQ("ok", *child) << "peer side";
    peer.channel().send(std::string("bye"));
    EXPECT_EQ(0, peer.wait());
}

TEST_P(UctMultiProcTest, ManyMessagesStayInOrder) {
    if (!(attr_.cap_flags & kCapAmShort)) GTEST_SKIP() << "no am_short";
    Resource resource = GetParam();
    constexpr unsigned kCount = kInOrderCount;
    loom::test::ForkedPeer peer("in_order_peer", {resource.name()});
    ProcSide side(resource, 4096);
    ASSERT_TRUE(side.exchange(peer.channel()));
    ASSERT_EQ(Status::ok, side.connect());
    for (std::uint64_t seq = 0; seq < kCount; ++seq) {
        ASSERT_EQ(Status::ok, side.retry([&] { return ep_am_short(side.ep(), kAmData, seq, nullptr, 0); }));
    }
    CountingCompletion comp;
    ASSERT_EQ(Status::ok, side.finish(side.retry([&] { return ep_flush(side.ep(), kFlushLocal, &comp); }), comp));
    auto result = peer.channel().recv_text(std::chrono::seconds(30));
    ASSERT_TRUE(result.has_value());
    EXPECT_EQ("ok", *result);
    peer.channel().send(std::string("bye"));
    EXPECT_EQ(0, peer.wait());
}

/** The receiving peer of AMessageBeforeTheFirstProbeArrives (args: the resource name). */
int first_message_peer(loom::test::ForkedPeer::Channel& ch, const std::vector<std::string>& args) {
    ProcSide side(find_resource(args.at(0)), 4096);
    std::uint64_t got = 0;
    (void)side.entity().iface().set_am_handler(
        kAmData, [](void* arg, void*, std::size_t, unsigned) { return ++*static_cast<std::uint64_t*>(arg), Status::ok; },
        &got, 0);
    if (!side.exchange(ch)) return 3;
    bool arrived = side.progress_until([&] { return got != 0; }, std::chrono::seconds(15));
    ch.send(std::string(arrived ? "ok" : "the first message never arrived (15 s)"));
    // Progressing on: the parent's put needs it where the target's progress performs puts (tcp).
    (void)side.progress_until([&] { return ch.readable(); }, std::chrono::seconds(20));
    (void)ch.recv(std::chrono::seconds(1));
    return 0;
}
LOOM_TEST_PEER_ROLE(first_message_peer);

/**
 * The first message of a connection arrives although a later request completed before
 * the acceptor answered anything. On soft-iWARP the first frames can wait unread in the
 * acceptor's socket (rc's probe, src/uct/ib/rc_rx.cc); siw completes a put once TCP has
 * it, so a put posted after the first probe completes first, and taking that for the
 * probe's answer stopped the probing with the message still unread (a CI failure of
 * EverythingBothWays on siw). The bpftrace pass of the rdma-vm suite widens the window
 * so that this order happens on every run there; elsewhere it is a plain check.
 */
TEST_P(UctMultiProcTest, AMessageBeforeTheFirstProbeArrives) {
    if (!(attr_.cap_flags & kCapAmShort) || !(attr_.cap_flags & kCapPutZcopy)) GTEST_SKIP() << "no am_short or put_zcopy";
    Resource resource = GetParam();
    loom::test::ForkedPeer peer("first_message_peer", {resource.name()});
    ProcSide side(resource, 4096);
    ASSERT_TRUE(side.exchange(peer.channel()));
    ASSERT_EQ(Status::ok, side.connect());
    ASSERT_EQ(Status::ok, side.retry([&] { return ep_am_short(side.ep(), kAmData, 1, nullptr, 0); }));
    // Past rc's first probe (1 ms after the connection), progressing so that it is posted.
    auto probe_due = std::chrono::steady_clock::now() + std::chrono::milliseconds(3);
    (void)side.progress_until([&] { return std::chrono::steady_clock::now() > probe_due; });
    std::vector<std::uint8_t> data(64, 0x5a);
    MemH memh = kMemHNull;
    if (side.entity().md_attr().flags & MdAttr::kNeedMemh) {
        memh = *side.entity().md().mem_reg(data.data(), data.size(), kAccessLocalRead);
    }
    Iov iov{data.data(), data.size(), memh};
    CountingCompletion comp;
    Status s = side.finish(side.retry([&] { return ep_put_zcopy(side.ep(), &iov, 1, side.peer_addr(0), side.peer_rkey(), &comp); }), comp);
    EXPECT_EQ(Status::ok, s);
    // Keep progressing (probes go out from progress) until the peer says.
    (void)side.progress_until([&] { return peer.channel().readable(); }, std::chrono::seconds(20));
    std::optional<std::string> result = peer.channel().recv_text();
    if (memh != kMemHNull) (void)side.entity().md().mem_dereg(memh);
    ASSERT_TRUE(result.has_value()) << "the peer did not answer";
    EXPECT_EQ("ok", *result);
    peer.channel().send(std::string("bye"));
    EXPECT_EQ(0, peer.wait());
}

constexpr AmId kAmWake = 9;
constexpr std::uint64_t kWakeRounds = 4;
/** How long the sleeping peer sleeps in poll() at most: a lost wake-up fails, it does not hang. */
constexpr int kSleepMs = 20000;

/** The messages of SleepingPeerIsWokenByEachMessage: how many, and the last one's number. */
struct WakeCount {
    std::uint64_t count = 0;
    std::uint64_t last = ~0ull;
    static Status handler(void* arg, void* data, std::size_t length, unsigned) {
        auto* self = static_cast<WakeCount*>(arg);
        if (length >= 8) std::memcpy(&self->last, data, 8);
        ++self->count;
        return Status::ok;
    }
};

/**
 * The peer of SleepingPeerIsWokenByEachMessage (args: the resource name): it progresses
 * only when event_arm says busy or poll() on the iface's event fd wakes it, and answers
 * each of the parent's messages.
 */
int sleeping_peer(loom::test::ForkedPeer::Channel& ch, const std::vector<std::string>& args) {
    ProcSide side(find_resource(args.at(0)), 4096);
    Iface& iface = side.entity().iface();
    WakeCount got;
    if (iface.set_am_handler(kAmWake, WakeCount::handler, &got, 0) != Status::ok) return 2;
    if (!side.exchange(ch)) return 3;
    if (side.connect() != Status::ok) return 4;
    auto fd = iface.event_fd();
    if (!fd) return 5;
    for (std::uint64_t round = 0; round < kWakeRounds; ++round) {
        while (got.count <= round) {
            if (side.entity().worker().progress() != 0) continue;
            Status s = iface.event_arm();
            if (s == Status::busy) continue;
            if (s != Status::ok) return 6;
            pollfd pfd{*fd, POLLIN, 0};
            if (::poll(&pfd, 1, kSleepMs) != 1) {
                ch.send("round " + std::to_string(round) + ": asleep for 20 s, never woken");
                return 7;
            }
        }
        if (got.last != round) {
            ch.send("round " + std::to_string(round) + ": got message " + std::to_string(got.last));
            return 8;
        }
        // The answer; the parent sends the next message once this process sleeps again.
        if (side.retry([&] { return ep_am_short(side.ep(), kAmWake, round, nullptr, 0); }) != Status::ok)
            return 9;
    }
    ch.send(std::string("ok"));
    (void)ch.recv(std::chrono::seconds(20));
    return 0;
}
LOOM_TEST_PEER_ROLE(sleeping_peer);

TEST_P(UctMultiProcTest, SleepingPeerIsWokenByEachMessage) {
    if (!(attr_.cap_flags & kCapEventRecv) || !(attr_.cap_flags & kCapAmShort)) {
        GTEST_SKIP() << "no wake-up events or no am_short";
    }
    {
        Entity probe(GetParam());
        if (probe.iface().event_fd().status() == Status::unsupported) GTEST_SKIP() << "no event fd";
    }
    Resource resource = GetParam();
    loom::test::ForkedPeer peer("sleeping_peer", {resource.name()});
    ProcSide side(resource, 4096);
    WakeCount got;
    ASSERT_EQ(Status::ok, side.entity().iface().set_am_handler(kAmWake, WakeCount::handler, &got, 0));
    ASSERT_TRUE(side.exchange(peer.channel())) << "the peer did not answer";
    ASSERT_EQ(Status::ok, side.connect());
    bool can_look = true;  // /proc/<pid>/syscall is readable here
    for (std::uint64_t round = 0; round < kWakeRounds; ++round) {
        // Wait until the peer sleeps in its poll() (progressing meanwhile: a connection set up
        // through rdma_cm needs this side's answers), so the message really has to wake it.
        bool asleep = false;
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (can_look && !asleep && std::chrono::steady_clock::now() < deadline) {
            side.entity().worker().progress();
            auto call = loom::test::blocked_syscall(peer.pid());
            can_look = call.has_value();
            asleep = call && call->number == SYS_poll && static_cast<std::int32_t>(call->args[2]) == kSleepMs;
        }
        if (can_look) {
            ASSERT_TRUE(asleep) << "round " << round << ": the peer never went to sleep";
        }
        ASSERT_EQ(Status::ok, side.retry([&] { return ep_am_short(side.ep(), kAmWake, round, nullptr, 0); }));
        ASSERT_TRUE(side.progress_until([&] { return got.count == round + 1; }, std::chrono::seconds(30)))
            << "round " << round << ": the sleeping peer did not answer; it says: "
            << peer.channel().recv_text(std::chrono::seconds(1)).value_or("nothing");
        EXPECT_EQ(round, got.last);
    }
    auto result = peer.channel().recv_text(std::chrono::seconds(20));
    ASSERT_TRUE(result.has_value()) << "the peer died";
    EXPECT_EQ("ok", *result);
    peer.channel().send(std::string("bye"));
    EXPECT_EQ(0, peer.wait());
    if (!can_look)
        std::printf("note: /proc/%d/syscall is unreadable here: the peer's sleep was not checked\n",
                    peer.pid());
}

INSTANTIATE_TEST_SUITE_P(Transports, UctMultiProcTest, testing::ValuesIn(all_resources()), resource_name);

}  // namespace
}  // namespace loom::uct::test
