/**
 * shm between real processes (test::ForkedPeer): active messages both ways, put/get
 * with CMA and with its emulation (chosen, and forced by the kernel), atomics on shared
 * allocations, peers that die, garbage keys and addresses, and /dev/shm after it all.
 *
 * A child reports through the channel: "ok", or what went wrong.
 */
#include "test_uct_shm.h"

#include "common/forked_peer.h"
#include "common/test_helpers.h"
#include "uct/shm/shm_iface.h"
#include "uct/shm/shm_segment.h"
#include "uct/shm/shm_wire.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

namespace loom::uct::shmtest {
namespace {

namespace impl = loom::uct::shm;
using loom::test::ForkedPeer;
using Channel = ForkedPeer::Channel;
using namespace std::chrono_literals;

constexpr AmId kAmId = 11;

/** Collects what went wrong in a child, for the parent to print. */
class ChildReport {
public:
    void check(bool ok, const std::string& what) {
        if (!ok) errors_ += what + "; ";
    }
    bool ok() const { return errors_.empty(); }
    int finish(Channel& ch) {
        ch.send(errors_.empty() ? std::string("ok") : errors_);
        return errors_.empty() ? 0 : 1;
    }

private:
    std::string errors_;
};

/** The parent's view of a child's report. */
std::string verdict(ForkedPeer& peer, std::chrono::milliseconds timeout = 30s) {
    return peer.channel().recv_text(timeout).value_or("<the child did not answer>");
}

/**
 * Progress-driven signalling: a process that must keep progressing (it serves emulated
 * operations) cannot block on the channel, so its peer tells it with an active message.
 */
constexpr AmId kSignalAm = 12;

struct Signal {
    bool raised = false;
    static Status handler(void* arg, void*, std::size_t, unsigned) {
        static_cast<Signal*>(arg)->raised = true;
        return Status::ok;
    }
};

/** Sends the signal active message on @p ep. */
Status raise_signal(ShmSide& side, Ep* ep) {
    Status status;
    while ((status = ep_am_short(ep, kSignalAm, 0, nullptr, 0)) == Status::no_resource) side.progress();
    return status;
}

struct Inbox {
    std::vector<std::vector<std::uint8_t>> messages;

    static Status handler(void* arg, void* data, std::size_t length, unsigned) {
        auto* bytes = static_cast<std::uint8_t*>(data);
        static_cast<Inbox*>(arg)->messages.emplace_back(bytes, bytes + length);
        return Status::ok;
    }
};

std::size_t pack_vector(void* dest, void* arg) {
    auto* data = static_cast<std::vector<std::uint8_t>*>(arg);
    if (!data->empty()) std::memcpy(dest, data->data(), data->size());
    return data->size();
}

// --- Active messages ------------------------------------------------------------------------

/** One message of the AM exchange: its flavour, header size (zcopy) and payload size. */
struct AmCase {
    enum Flavour { kShort, kBcopy, kZcopy } flavour;
    std::size_t header;
    std::size_t payload;
};

std::vector<AmCase> am_cases(const IfaceAttr& attr) {
    std::vector<AmCase> cases;
    for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{8}, std::size_t{40}, std::size_t{41},
                             std::size_t{100}, attr.am.max_short}) {
        cases.push_back({AmCase::kShort, 0, size});
    }
    for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{100}, std::size_t{1000},
                             std::size_t{4000}, attr.am.max_bcopy}) {
        cases.push_back({AmCase::kBcopy, 0, size});
    }
    for (std::size_t header : {std::size_t{0}, std::size_t{16}, attr.am.max_hdr}) {
        for (std::size_t size : {std::size_t{0}, std::size_t{1000}, attr.am.max_zcopy}) {
            cases.push_back({AmCase::kZcopy, header, size});
        }
    }
    return cases;
}

/** The bytes the receiver must see for case @p i. */
std::vector<std::uint8_t> am_expected(const AmCase& c, unsigned i) {
    std::vector<std::uint8_t> bytes;
    if (c.flavour == AmCase::kShort) {
        const std::uint64_t header = 0x5555000000000000ull + i;
        bytes.resize(sizeof(header));
        std::memcpy(bytes.data(), &header, sizeof(header));
    } else if (c.flavour == AmCase::kZcopy) {
        bytes = pattern(c.header, 1000 + i);
    }
    auto payload = pattern(c.payload, i);
    bytes.insert(bytes.end(), payload.begin(), payload.end());
    return bytes;
}

/** Sends every case on @p ep; returns "" or what failed. */
std::string am_send_all(ShmSide& side, Ep* ep) {
    auto cases = am_cases(side.attr());
    for (unsigned i = 0; i < cases.size(); ++i) {
        const AmCase& c = cases[i];
        auto payload = pattern(c.payload, i);
        Status status;
        for (;;) {
            if (c.flavour == AmCase::kShort) {
                status = ep_am_short(ep, kAmId, 0x5555000000000000ull + i, payload.data(),
                                     static_cast<unsigned>(payload.size()));
            } else if (c.flavour == AmCase::kBcopy) {
                ssize_t n = ep_am_bcopy(ep, kAmId, pack_vector, &payload, 0);
                status = n >= 0 ? (n == static_cast<ssize_t>(payload.size()) ? Status::ok
                                                                             : Status::message_truncated)
                                : static_cast<Status>(n);
            } else {
                auto header = pattern(c.header, 1000 + i);
                std::size_t third = payload.size() / 3;
                Iov iov[3] = {{payload.data(), third, kMemHNull},
                              {payload.data() + third, third, kMemHNull},
                              {payload.data() + 2 * third, payload.size() - 2 * third, kMemHNull}};
                TestCompletion comp;
                status = ep_am_zcopy(ep, kAmId, header.data(), static_cast<unsigned>(header.size()), iov, 3,
                                     0, &comp);
            }
            if (status != Status::no_resource) break;
            side.progress();
        }
        if (status != Status::ok) return "case " + std::to_string(i) + ": " + std::string(to_string(status));
    }
    return "";
}

/** Checks that @p inbox holds exactly the cases, in order; returns "" or the first difference. */
std::string am_check_all(const IfaceAttr& attr, const Inbox& inbox) {
    auto cases = am_cases(attr);
    if (inbox.messages.size() != cases.size()) {
        return "got " + std::to_string(inbox.messages.size()) + " messages, expected " +
               std::to_string(cases.size());
    }
    for (unsigned i = 0; i < cases.size(); ++i) {
        if (inbox.messages[i] != am_expected(cases[i], i)) return "message " + std::to_string(i) + " differs";
    }
    return "";
}

TEST(ShmMultiProcess, ActiveMessagesOfEveryFlavourBothWays) {
    ForkedPeer child([](Channel& ch) {
        ChildReport report;
        ShmSide side;
        Inbox inbox;
        report.check(side.iface().set_am_handler(kAmId, Inbox::handler, &inbox, 0) == Status::ok,
                     "set handler");
        ch.send(side.address());
        auto parent = ch.recv();
        if (!parent) return 3;
        Ep* ep = side.connect_or_throw(*parent);
        const std::size_t expected = am_cases(side.attr()).size();
        report.check(side.progress_until([&] { return inbox.messages.size() >= expected; }),
                     "receive timed out");
        std::string diff = am_check_all(side.attr(), inbox);
        report.check(diff.empty(), "child received: " + diff);
        std::string sent = am_send_all(side, ep);
        report.check(sent.empty(), "child sending: " + sent);
        // Stay (and keep the FIFO the parent sends to) until the parent has checked.
        int code = report.finish(ch);
        (void)ch.recv();
        return code;
    });
    ShmSide side;
    Inbox inbox;
    ASSERT_EQ(Status::ok, side.iface().set_am_handler(kAmId, Inbox::handler, &inbox, 0));
    auto address = child.channel().recv();
    ASSERT_TRUE(address.has_value());
    child.channel().send(side.address());
    Ep* ep = side.connect_or_throw(*address);
    EXPECT_EQ("", am_send_all(side, ep));
    EXPECT_EQ("ok", verdict(child));
    ASSERT_TRUE(side.progress_until([&] { return inbox.messages.size() >= am_cases(side.attr()).size(); }));
    EXPECT_EQ("", am_check_all(side.attr(), inbox));
    child.channel().send(std::string("done"));
    EXPECT_EQ(0, child.wait());
}

// --- Put and get to a registration of another process ----------------------------------------

constexpr std::size_t kBig = 1 << 20;
constexpr std::size_t kSmall = 4096;

/** What the target's big buffer holds after the initiator's puts. */
std::vector<std::uint8_t> expected_big() {
    auto big = pattern(kBig, 1);
    auto a = pattern(100, 2);
    auto b = pattern(3000, 3);
    std::copy(a.begin(), a.end(), big.begin() + 5000);
    std::copy(b.begin(), b.end(), big.begin() + 10000);
    return big;
}

/**
 * The target: registers a big buffer (zeroed) and a small one (a pattern), sends their
 * keys and addresses, progresses (or not) until told to check, then checks the big one.
 */
int rma_target(Channel& ch, bool progress) {
    ChildReport report;
    ShmSide side;
    std::vector<std::uint8_t> big(kBig, 0);
    std::vector<std::uint8_t> small = pattern(kSmall, 9);
    ch.send(side.address());
    ch.send(side.register_and_pack(big.data(), big.size(), kAccessAll));
    ch.send(side.register_and_pack(small.data(), small.size(), kAccessRemoteGet));
    std::uint64_t addresses[2] = {reinterpret_cast<std::uint64_t>(big.data()),
                                  reinterpret_cast<std::uint64_t>(small.data())};
    ch.send(std::vector<std::uint8_t>(reinterpret_cast<std::uint8_t*>(addresses),
                                      reinterpret_cast<std::uint8_t*>(addresses) + sizeof(addresses)));
    if (progress) {
        Signal signal;
        report.check(side.iface().set_am_handler(kSignalAm, Signal::handler, &signal, 0) == Status::ok,
                     "handler");
        report.check(side.progress_until([&] { return signal.raised; }, 30s), "no signal");
    }
    report.check(ch.recv_text() == "check", "no check command");
    report.check(big == expected_big(), "the big buffer does not hold what the initiator put");
    report.check(small == pattern(kSmall, 9), "the small buffer changed");
    int code = report.finish(ch);
    (void)ch.recv();
    return code;
}

/** The initiator's view of a target: an endpoint, the unpacked keys and the addresses. */
struct Target {
    Ep* ep = nullptr;
    Rkey big, small;
    std::uint64_t big_addr = 0, small_addr = 0;

    void receive(ShmSide& side, Channel& ch) {
        auto address = ch.recv();
        auto big_key = ch.recv();
        auto small_key = ch.recv();
        auto addresses = ch.recv();
        if (!address || !big_key || !small_key || !addresses || addresses->size() != 16) {
            throw std::runtime_error("the target sent no keys");
        }
        ep = side.connect_or_throw(*address);
        big = shm_component().rkey_unpack(big_key->data(), big_key->size()).value();
        small = shm_component().rkey_unpack(small_key->data(), small_key->size()).value();
        std::memcpy(&big_addr, addresses->data(), 8);
        std::memcpy(&small_addr, addresses->data() + 8, 8);
    }

    void release() {
        shm_component().rkey_release(big);
        shm_component().rkey_release(small);
    }
};

/** Waits for an operation that returned @p status; returns its final status. */
Status finish(ShmSide& side, Status status, TestCompletion& comp) {
    if (status != Status::in_progress) return status;
    if (!side.progress_until([&] { return comp.fired == 1; })) return Status::timed_out;
    return comp.status;
}

struct Unpacked {
    std::vector<std::uint8_t> data;
    static void unpack(void* arg, const void* src, std::size_t length) {
        auto* self = static_cast<Unpacked*>(arg);
        auto* bytes = static_cast<const std::uint8_t*>(src);
        self->data.insert(self->data.end(), bytes, bytes + length);
    }
};

/**
 * Every put/get flavour against a target; @p emulated says whether the operations go
 * through the target's FIFO (then a big put blocks the endpoint until it is all out).
 * Returns "" or what failed.
 */
std::string exercise_rma(ShmSide& side, Target& t, bool emulated) {
    auto big = pattern(kBig, 1);
    const std::size_t third = kBig / 3;
    Iov iov[3] = {{big.data(), third, kMemHNull},
                  {big.data() + third, third, kMemHNull},
                  {big.data() + 2 * third, kBig - 2 * third, kMemHNull}};
    TestCompletion put;
    Status status;
    while ((status = ep_put_zcopy(t.ep, iov, 3, t.big_addr, t.big.rkey, &put)) == Status::no_resource)
        side.progress();
    if (emulated && status == Status::in_progress) {
        // The rest of the put is still going out: nothing may overtake it.
        if (ep_am_short(t.ep, kAmId, 0, nullptr, 0) != Status::no_resource)
            return "an am_short overtook a put";
    }
    if ((status = finish(side, status, put)) != Status::ok)
        return std::string("put_zcopy: ") + std::string(to_string(status));
    if ((status = flush_ep(side, t.ep)) != Status::ok)
        return std::string("flush: ") + std::string(to_string(status));

    std::vector<std::uint8_t> back(kBig, 0);
    Iov whole{back.data(), back.size(), kMemHNull};
    TestCompletion get;
    while ((status = ep_get_zcopy(t.ep, &whole, 1, t.big_addr, t.big.rkey, &get)) == Status::no_resource)
        side.progress();
    if ((status = finish(side, status, get)) != Status::ok)
        return std::string("get_zcopy: ") + std::string(to_string(status));
    if (back != big) return "get_zcopy read something else than the put wrote";

    auto a = pattern(100, 2);
    while ((status = ep_put_short(t.ep, a.data(), 100, t.big_addr + 5000, t.big.rkey)) ==
           Status::no_resource) {
        side.progress();
    }
    if (status != Status::ok) return std::string("put_short: ") + std::string(to_string(status));
    auto b = pattern(3000, 3);
    ssize_t packed;
    while ((packed = ep_put_bcopy(t.ep, pack_vector, &b, t.big_addr + 10000, t.big.rkey)) ==
           static_cast<ssize_t>(Status::no_resource)) {
        side.progress();
    }
    if (packed != 3000) return "put_bcopy returned " + std::to_string(packed);
    Unpacked unpacked;
    TestCompletion get_b;
    while ((status = ep_get_bcopy(t.ep, Unpacked::unpack, &unpacked, 3000, t.big_addr + 10000, t.big.rkey,
                                  &get_b)) == Status::no_resource) {
        side.progress();
    }
    if ((status = finish(side, status, get_b)) != Status::ok)
        return std::string("get_bcopy: ") + std::string(to_string(status));
    if (unpacked.data != b) return "get_bcopy read something else than put_bcopy wrote";

    // The small buffer: read-only for us, and its bounds hold.
    std::vector<std::uint8_t> small(kSmall, 0);
    Iov small_iov{small.data(), small.size(), kMemHNull};
    TestCompletion get_s;
    while ((status = ep_get_zcopy(t.ep, &small_iov, 1, t.small_addr, t.small.rkey, &get_s)) ==
           Status::no_resource) {
        side.progress();
    }
    if ((status = finish(side, status, get_s)) != Status::ok)
        return std::string("get small: ") + std::string(to_string(status));
    if (small != pattern(kSmall, 9)) return "the small buffer read back wrong";
    if (ep_put_short(t.ep, a.data(), 8, t.small_addr, t.small.rkey) != Status::access_denied) {
        return "a put without the right was not denied";
    }
    Iov past{small.data(), 16, kMemHNull};
    if (ep_get_zcopy(t.ep, &past, 1, t.small_addr + kSmall - 8, t.small.rkey, &get_s) !=
        Status::access_denied) {
        return "a get past the end was not denied";
    }
    return "";
}

class ShmRmaTest : public testing::TestWithParam<const char*> {};

TEST_P(ShmRmaTest, PutAndGetOfEveryFlavour) {
    const bool emulated = std::string(GetParam()) == "no";
    // With CMA the target never needs to progress: that it does not proves the data went by CMA.
    ForkedPeer child([emulated](Channel& ch) { return rma_target(ch, emulated); });
    // A small FIFO, so a 1 MiB emulated put takes many refills by the target.
    ShmSide side({{"SHM_CMA", GetParam()}, {"SHM_FIFO_SIZE", "64k"}});
    Target t;
    t.receive(side, child.channel());
    loom::test::LogCapture capture("error");
    EXPECT_EQ("", exercise_rma(side, t, emulated));
    EXPECT_EQ(2, capture.count("outside the remote key's region"));
    // Atomics on a registration are checked here first, like puts (the target applies them).
    std::uint64_t old = 0;
    TestCompletion comp;
    EXPECT_EQ(Status::access_denied, ep_atomic64_post(t.ep, AtomicOp::add, 1, t.small_addr, t.small.rkey));
    EXPECT_EQ(Status::access_denied,
              ep_atomic64_fetch(t.ep, AtomicOp::add, 1, &old, t.big_addr + kBig, t.big.rkey, &comp));
    EXPECT_EQ(Status::ok, raise_signal(side, t.ep));  // ignored by a target that does not progress
    child.channel().send(std::string("check"));
    EXPECT_EQ("ok", verdict(child));
    t.release();
    child.channel().send(std::string("done"));
    EXPECT_EQ(0, child.wait());
}

INSTANTIATE_TEST_SUITE_P(Cma, ShmRmaTest, testing::Values("yes", "no"),
                         [](const testing::TestParamInfo<const char*>& info) {
                             return std::string(info.param) == "yes" ? "Cma" : "Emulated";
                         });

/** A packed shm key with its region moved to @p address + @p length (a forged key). */
std::vector<std::uint8_t> forge_region(std::vector<std::uint8_t> key, std::uint64_t address,
                                       std::uint64_t length) {
    std::memcpy(key.data() + offsetof(loom::uct::shm::PackedRkey, address), &address, sizeof(address));
    std::memcpy(key.data() + offsetof(loom::uct::shm::PackedRkey, length), &length, sizeof(length));
    return key;
}

/**
 * CMA is performed by the kernel, which checks nothing of Loom's keys: the initiator checks
 * each access against the registrations the target publishes. The target registers one
 * page between two canary pages; a key forged to cover the canaries is refused, and once
 * the target deregistered the page the old key reaches nothing (every put and get
 * flavour), also after the same page is registered again (new key, same slot).
 */
TEST(ShmMultiProcess, CmaReachesOnlyWhatTheTargetStillRegisters) {
    constexpr std::size_t kPage = 4096;
    ForkedPeer child([](Channel& ch) {
        ChildReport report;
        ShmSide side;
        std::vector<std::uint8_t> area(3 * kPage, 0xc5);  // canary, region, canary
        std::uint8_t* region = area.data() + kPage;
        std::memset(region, 0, kPage);
        auto memh = side.md().mem_reg(region, kPage, kAccessAll);
        report.check(memh.ok(), "mem_reg");
        ch.send(side.address());
        ch.send(side.pack(*memh));
        const auto where = reinterpret_cast<std::uint64_t>(region);
        ch.send(std::vector<std::uint8_t>(reinterpret_cast<const std::uint8_t*>(&where),
                                          reinterpret_cast<const std::uint8_t*>(&where) + sizeof(where)));
        report.check(ch.recv_text() == "dereg", "no dereg command");
        report.check(side.md().mem_dereg(*memh) == Status::ok, "mem_dereg");
        ch.send(std::string("deregistered"));
        report.check(ch.recv_text() == "again", "no again command");
        auto again = side.md().mem_reg(region, kPage, kAccessAll);
        report.check(again.ok(), "mem_reg again");
        ch.send(side.pack(*again));
        report.check(ch.recv_text() == "check", "no check command");
        for (std::size_t i = 0; i < kPage; ++i) {
            if (area[i] != 0xc5 || area[2 * kPage + i] != 0xc5) {
                report.check(false, "a canary changed at offset " + std::to_string(i));
                break;
            }
        }
        auto expected = pattern(kPage, 7);
        std::memcpy(expected.data() + 100, pattern(200, 8).data(), 200);  // the put with the new key
        report.check(std::memcmp(region, expected.data(), kPage) == 0,
                     "the region does not hold exactly the puts made while it was registered");
        report.check(side.md().mem_dereg(*again) == Status::ok, "mem_dereg again");
        return report.finish(ch);
    });
    Channel& ch = child.channel();
    ShmSide side({{"SHM_CMA", "yes"}});
    auto address = ch.recv();
    auto packed = ch.recv();
    auto where_bytes = ch.recv();
    ASSERT_TRUE(address && packed && where_bytes && where_bytes->size() == 8);
    std::uint64_t where;
    std::memcpy(&where, where_bytes->data(), 8);
    Ep* ep = side.connect_or_throw(*address);
    const Component& component = shm_component();

    // A key forged to cover the canaries around the region is refused on unpack.
    {
        loom::test::LogCapture capture("error");
        for (auto [from, length] : {std::pair{where - kPage, 3 * kPage}, std::pair{where, 2 * kPage},
                                    std::pair{where - 64, kPage}}) {
            auto forged = forge_region(*packed, from, length);
            EXPECT_EQ(Status::invalid_param, component.rkey_unpack(forged.data(), forged.size()).status());
        }
        EXPECT_EQ(3, capture.count("has no registration"));
    }

    // The genuine key works by CMA (the target does not progress).
    Rkey key = component.rkey_unpack(packed->data(), packed->size()).value();
    auto data = pattern(kPage, 7);
    Iov iov{data.data(), kPage, kMemHNull};
    TestCompletion comp;
    ASSERT_EQ(Status::ok, ep_put_zcopy(ep, &iov, 1, where, key.rkey, &comp));

    // Deregistered: the key unpacked before reaches nothing, whatever the flavour.
    ch.send(std::string("dereg"));
    ASSERT_EQ("deregistered", ch.recv_text());
    auto other = pattern(kPage, 9);
    std::vector<std::uint8_t> back(kPage, 0);
    {
        loom::test::LogCapture capture("error");
        Iov other_iov{other.data(), kPage, kMemHNull};
        EXPECT_EQ(Status::access_denied, ep_put_zcopy(ep, &other_iov, 1, where, key.rkey, &comp));
        EXPECT_EQ(Status::access_denied, ep_put_short(ep, other.data(), 8, where, key.rkey));
        EXPECT_EQ(static_cast<ssize_t>(Status::access_denied),
                  ep_put_bcopy(ep, pack_vector, &other, where, key.rkey));
        Iov back_iov{back.data(), kPage, kMemHNull};
        EXPECT_EQ(Status::access_denied, ep_get_zcopy(ep, &back_iov, 1, where, key.rkey, &comp));
        Unpacked unpacked;
        EXPECT_EQ(Status::access_denied,
                  ep_get_bcopy(ep, Unpacked::unpack, &unpacked, 64, where, key.rkey, &comp));
        EXPECT_EQ(5, capture.count("no longer has registration"));
        // Unpacking it again is refused at once.
        EXPECT_EQ(Status::invalid_param, component.rkey_unpack(packed->data(), packed->size()).status());
    }
    EXPECT_EQ(std::vector<std::uint8_t>(kPage, 0), back) << "a refused get wrote into our buffer";

    // Registered again (a new key, most likely in the same slot): the old key stays refused.
    ch.send(std::string("again"));
    auto renewed = ch.recv();
    ASSERT_TRUE(renewed);
    Rkey new_key = component.rkey_unpack(renewed->data(), renewed->size()).value();
    {
        loom::test::LogCapture capture("error");
        EXPECT_EQ(Status::access_denied, ep_put_short(ep, other.data(), 8, where, key.rkey));
    }
    auto small = pattern(200, 8);
    Iov small_iov{small.data(), small.size(), kMemHNull};
    EXPECT_EQ(Status::ok, ep_put_zcopy(ep, &small_iov, 1, where + 100, new_key.rkey, &comp));
    Iov back_iov{back.data(), kPage, kMemHNull};
    EXPECT_EQ(Status::ok, ep_get_zcopy(ep, &back_iov, 1, where, new_key.rkey, &comp));
    EXPECT_EQ(0, std::memcmp(back.data() + 100, small.data(), small.size()));
    component.rkey_release(key);
    component.rkey_release(new_key);
    ch.send(std::string("check"));
    EXPECT_EQ("ok", verdict(child));
    EXPECT_EQ(0, child.wait());
}

/** Makes this process non-dumpable for a while: peers without CAP_SYS_PTRACE may not ptrace it. */
class NonDumpable {
public:
    NonDumpable() { ::prctl(PR_SET_DUMPABLE, 0); }
    ~NonDumpable() { ::prctl(PR_SET_DUMPABLE, 1); }
};

/** Drops CAP_SYS_PTRACE (a no-op for an unprivileged process). */
bool drop_ptrace_capability() {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    if (::syscall(SYS_capget, &header, data) != 0) return false;
    const unsigned word = CAP_SYS_PTRACE / 32, bit = 1u << (CAP_SYS_PTRACE % 32);
    data[word].effective &= ~bit;
    data[word].permitted &= ~bit;
    data[word].inheritable &= ~bit;
    return ::syscall(SYS_capset, &header, data) == 0;
}

TEST(ShmMultiProcess, KernelForbiddingCmaFallsBackToEmulation) {
    // The target (this process) keeps one memfd iface from before it turns non-dumpable.
    ShmSide memfd_side({{"SHM_SEGMENT", "memfd"}});
    ForkedPeer child([](Channel& ch) {
        ChildReport report;
        report.check(drop_ptrace_capability(), "cannot drop CAP_SYS_PTRACE");
        loom::test::LogCapture capture("info");
        ShmSide side;  // CMA=try, the default
        Target t;
        t.receive(side, ch);
        std::string result = exercise_rma(side, t, true);
        report.check(result.empty(), "with CMA=try: " + result);
        report.check(capture.count("may not be accessed with CMA") == 1, "no single line about the fallback");
        // CMA=yes reports the refusal instead.
        ShmSide strict({{"SHM_CMA", "yes"}});
        auto address = ch.recv();
        Ep* ep = strict.connect_or_throw(*address);
        std::vector<std::uint8_t> data(64, 1);
        Iov iov{data.data(), data.size(), kMemHNull};
        TestCompletion comp;
        report.check(ep_put_zcopy(ep, &iov, 1, t.big_addr, t.big.rkey, &comp) == Status::permission_denied,
                     "CMA=yes did not report permission_denied");
        // The memfd FIFO of a non-dumpable process cannot be opened through /proc.
        auto memfd_address = ch.recv();
        auto refused = side.connect(*memfd_address);
        report.check(!refused.ok() && refused.status() == Status::unreachable, "a memfd FIFO was reachable");
        report.check(capture.count("LOOM_SHM_SEGMENT=posix") == 1, "no hint at LOOM_SHM_SEGMENT=posix");
        t.release();
        report.check(raise_signal(side, t.ep) == Status::ok, "cannot signal the parent");
        return report.finish(ch);
    });
    NonDumpable non_dumpable;
    // auto notices that peers cannot open our /proc links and picks POSIX shared memory.
    auto before = loom_shm_names();
    ShmSide side;
    EXPECT_EQ(before.size() + 1, loom_shm_names().size());
    {
        loom::test::LogCapture capture("error");
        EXPECT_THROW(ShmSide forced({{"SHM_SEGMENT", "memfd"}}), std::runtime_error);
        EXPECT_EQ(1, capture.count("LOOM_SHM_SEGMENT=memfd cannot work here"));
    }
    std::vector<std::uint8_t> big(kBig, 0);
    std::vector<std::uint8_t> small = pattern(kSmall, 9);
    Channel& ch = child.channel();
    ch.send(side.address());
    ch.send(side.register_and_pack(big.data(), big.size(), kAccessAll));
    ch.send(side.register_and_pack(small.data(), small.size(), kAccessRemoteGet));
    std::uint64_t addresses[2] = {reinterpret_cast<std::uint64_t>(big.data()),
                                  reinterpret_cast<std::uint64_t>(small.data())};
    ch.send(std::vector<std::uint8_t>(reinterpret_cast<std::uint8_t*>(addresses),
                                      reinterpret_cast<std::uint8_t*>(addresses) + sizeof(addresses)));
    ch.send(side.address());
    ch.send(memfd_side.address());
    // Serve the emulated operations until the child signals that it is done.
    Signal signal;
    ASSERT_EQ(Status::ok, side.iface().set_am_handler(kSignalAm, Signal::handler, &signal, 0));
    EXPECT_TRUE(side.progress_until([&] { return signal.raised; }, 30s));
    EXPECT_EQ("ok", verdict(child));
    EXPECT_TRUE(big == expected_big()) << "the emulated puts did not land";
    EXPECT_EQ(0, child.wait());
}

/**
 * Segments are the owner's user's only: a process of another user (the child, as nobody)
 * can open neither kind of FIFO (memfd through /proc, posix in /dev/shm) nor a mem_alloc
 * segment behind a key, so it can neither send into nor read from them, and each refusal
 * says why in one line.
 */
TEST(ShmMultiProcess, AnotherUserCannotReachOurSegments) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a peer as another user (nobody)";
    ShmSide memfd_side({{"SHM_SEGMENT", "memfd"}});
    ShmSide posix_side({{"SHM_SEGMENT", "posix"}});
    auto alloc = posix_side.md().mem_alloc(4096, kAccessAll);
    ASSERT_TRUE(alloc.ok());
    auto key = posix_side.pack(alloc->second);
    ForkedPeer child([&](Channel& ch) {
        ChildReport report;
        constexpr uid_t kNobody = 65534;
        if (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) {
            report.check(false, std::string("cannot become nobody: ") + std::strerror(errno));
            return report.finish(ch);
        }
        loom::test::LogCapture capture("error");
        ShmSide side;  // its own FIFO works, as nobody
        for (const auto& [what, address] :
             {std::pair{"memfd FIFO", memfd_side.address()}, std::pair{"posix FIFO", posix_side.address()}}) {
            auto ep = side.connect(address);
            report.check(!ep.ok() && ep.status() == Status::unreachable,
                         std::string("the ") + what + " of another user was reachable");
        }
        auto rkey = shm_component().rkey_unpack(key.data(), key.size());
        report.check(!rkey.ok() && rkey.status() == Status::unreachable,
                     "a mem_alloc segment of another user was mapped");
        report.check(capture.count("Permission denied") == 3,
                     "not one line saying permission was denied for each: " + capture.text());
        // Nor can it open the owner's segments by their names.
        int fd = -1;
        for (const std::string& name : loom_shm_names()) {
            if (name.rfind("loom-0-", 0) != 0) continue;  // the parent's (root's); the child's own are its
            int f = ::shm_open(("/" + name).c_str(), O_RDWR, 0);
            if (f >= 0) fd = f;
        }
        report.check(fd < 0, "a segment in /dev/shm of another user opened read-write");
        return report.finish(ch);
    });
    EXPECT_EQ("ok", verdict(child));
    EXPECT_EQ(0, child.wait());
    EXPECT_EQ(Status::ok, posix_side.md().mem_free(alloc->second));
}

// --- Atomics on shared allocations ----------------------------------------------------------------

TEST(ShmMultiProcess, AtomicsOnMemAllocMemoryAreExactAcrossProcesses) {
    constexpr int kOps = 10000;
    constexpr int kCswaps = 1000;
    ShmSide side;
    auto alloc = side.md().mem_alloc(4096, kAccessAll);
    ASSERT_TRUE(alloc.ok());
    const auto base = reinterpret_cast<std::uint64_t>(alloc->first);
    auto packed = side.pack(alloc->second);
    // Both processes run the same loop: add 1 to a 64-bit and a 32-bit counter, and increment a
    // third word with compare-and-swap retries.
    auto hammer = [&](Ep* ep, std::uint64_t rkey) -> std::string {
        TestCompletion comp;
        for (int i = 0; i < kOps; ++i) {
            std::uint64_t old64;
            std::uint32_t old32;
            if (ep_atomic64_fetch(ep, AtomicOp::add, 1, &old64, base, rkey, &comp) != Status::ok)
                return "fetch64";
            if (ep_atomic32_post(ep, AtomicOp::add, 1, base + 8, rkey) != Status::ok) return "post32";
            (void)old32;
        }
        for (int i = 0; i < kCswaps; ++i) {
            std::uint64_t seen = 0, expected = 0;
            do {
                expected = seen;
                if (ep_atomic64_cswap(ep, expected, expected + 1, base + 16, rkey, &seen, &comp) !=
                    Status::ok) {
                    return "cswap";
                }
            } while (seen != expected);
        }
        return "";
    };
    ForkedPeer child([&](Channel& ch) {
        ChildReport report;
        ShmSide child_side;
        auto address = ch.recv();
        auto key = ch.recv();
        if (!address || !key) return 3;
        Ep* ep = child_side.connect_or_throw(*address);
        auto rkey = shm_component().rkey_unpack(key->data(), key->size());
        report.check(rkey.ok(), "rkey_unpack of a mem_alloc key failed");
        if (!rkey.ok()) return report.finish(ch);
        (void)ch.recv();  // go
        std::string result = hammer(ep, rkey->rkey);
        report.check(result.empty(), "child atomics: " + result);
        shm_component().rkey_release(*rkey);
        return report.finish(ch);
    });
    child.channel().send(side.address());
    child.channel().send(packed);
    Ep* self_ep = side.connect_or_throw(side.address());
    auto rkey = shm_component().rkey_unpack(packed.data(), packed.size());
    ASSERT_TRUE(rkey.ok());
    child.channel().send(std::string("go"));
    EXPECT_EQ("", hammer(self_ep, rkey->rkey));
    EXPECT_EQ("ok", verdict(child));
    EXPECT_EQ(0, child.wait());
    auto* words = static_cast<std::uint64_t*>(alloc->first);
    EXPECT_EQ(2u * kOps, words[0]);
    EXPECT_EQ(2u * kOps, *reinterpret_cast<std::uint32_t*>(&words[1]));
    EXPECT_EQ(2u * kCswaps, words[2]);
    shm_component().rkey_release(*rkey);
    EXPECT_EQ(Status::ok, side.md().mem_free(alloc->second));
}

/**
 * Atomics on memory the target registered (not mem_alloc'ed: not mapped by the initiator)
 * are applied by the target's progress with CPU atomics, so they stay exact against the
 * target's own atomics on the same words, which it runs between progress calls: fetch-add
 * (64 bit), posted add (32 bit), compare-and-swap increments (64 bit) and swap (32 bit).
 * This is what MPI_Win_create windows and OpenSHMEM's static data need.
 */
TEST(ShmMultiProcess, AtomicsOnRegisteredMemoryAreExactAgainstTheOwnersOwn) {
    constexpr int kOps = 3000;
    constexpr int kCswaps = 500;
    ForkedPeer child([&](Channel& ch) {
        ChildReport report;
        ShmSide side;
        alignas(64) static std::uint64_t words[8];
        ch.send(side.address());
        ch.send(side.register_and_pack(words, sizeof(words), kAccessAll));
        const auto base = reinterpret_cast<std::uint64_t>(words);
        ch.send(std::vector<std::uint8_t>(reinterpret_cast<const std::uint8_t*>(&base),
                                          reinterpret_cast<const std::uint8_t*>(&base) + 8));
        // Our own atomics on the same words, one between two progress calls once the
        // initiator's have begun, until all are done and we are told to check.
        int mine = 0;
        while (mine < kOps || !ch.readable()) {
            side.progress();
            if (mine < kOps && __atomic_load_n(&words[0], __ATOMIC_SEQ_CST) != 0) {
                __atomic_fetch_add(&words[0], 1, __ATOMIC_SEQ_CST);
                __atomic_fetch_add(reinterpret_cast<std::uint32_t*>(&words[1]), 1u, __ATOMIC_SEQ_CST);
                ++mine;
            }
        }
        report.check(ch.recv_text() == "check", "no check command");
        report.check(mine == kOps, "the target ran only " + std::to_string(mine) + " of its atomics");
        std::uint32_t counter32, swapped;
        std::memcpy(&counter32, &words[1], 4);
        std::memcpy(&swapped, &words[3], 4);
        report.check(words[0] == 2u * kOps, "64-bit counter " + std::to_string(words[0]));
        report.check(counter32 == 2u * kOps, "32-bit counter " + std::to_string(counter32));
        report.check(words[2] == kCswaps, "compare-and-swap counter " + std::to_string(words[2]));
        report.check(swapped == 0xabcd, "swapped word");
        int code = report.finish(ch);
        (void)ch.recv();
        return code;
    });
    ShmSide side({{"SHM_CMA", "yes"}});
    auto address = child.channel().recv();
    auto key = child.channel().recv();
    auto base_bytes = child.channel().recv();
    ASSERT_TRUE(address && key && base_bytes && base_bytes->size() == 8);
    std::uint64_t base;
    std::memcpy(&base, base_bytes->data(), 8);
    Ep* ep = side.connect_or_throw(*address);
    auto rkey = shm_component().rkey_unpack(key->data(), key->size());
    ASSERT_TRUE(rkey.ok());
    std::uint64_t last = 0;
    for (int i = 0; i < kOps; ++i) {
        std::uint64_t old = ~0ull;
        TestCompletion comp;
        Status s;
        while ((s = ep_atomic64_fetch(ep, AtomicOp::add, 1, &old, base, rkey->rkey, &comp)) == Status::no_resource)
            side.progress();
        ASSERT_EQ(Status::ok, finish(side, s, comp)) << "fetch-add " << i;
        ASSERT_TRUE(i == 0 || old > last) << "fetch-add " << i << " saw " << old << " after " << last;
        last = old;
        while ((s = ep_atomic32_post(ep, AtomicOp::add, 1, base + 8, rkey->rkey)) == Status::no_resource)
            side.progress();
        ASSERT_EQ(Status::ok, s) << "posted add " << i;
    }
    for (int i = 0; i < kCswaps; ++i) {
        std::uint64_t seen = 0, expected = 0;
        do {
            expected = seen;
            TestCompletion comp;
            Status s;
            while ((s = ep_atomic64_cswap(ep, expected, expected + 1, base + 16, rkey->rkey, &seen, &comp)) ==
                   Status::no_resource)
                side.progress();
            ASSERT_EQ(Status::ok, finish(side, s, comp));
        } while (seen != expected);
    }
    std::uint32_t old32 = 1;
    TestCompletion swap_comp;
    Status s = ep_atomic32_fetch(ep, AtomicOp::swap, 0xabcd, &old32, base + 24, rkey->rkey, &swap_comp);
    ASSERT_EQ(Status::ok, finish(side, s, swap_comp));
    EXPECT_EQ(0u, old32);
    // A misaligned word is refused here; a forged address outside the key, too.
    EXPECT_EQ(Status::invalid_param, ep_atomic64_post(ep, AtomicOp::add, 1, base + 4, rkey->rkey));
    EXPECT_EQ(Status::access_denied, ep_atomic64_post(ep, AtomicOp::add, 1, base + 64, rkey->rkey));
    EXPECT_EQ(Status::ok, flush_ep(side, ep));
    child.channel().send(std::string("check"));
    EXPECT_EQ("ok", verdict(child));
    shm_component().rkey_release(*rkey);
    child.channel().send(std::string("done"));
    EXPECT_EQ(0, child.wait());
}

TEST(ShmMultiProcess, PutAndGetToMemAllocMemoryGoThroughTheMapping) {
    // The target never progresses and CMA is off: only the mapping can carry the data.
    ForkedPeer child([](Channel& ch) {
        ChildReport report;
        ShmSide side;
        auto alloc = side.md().mem_alloc(kBig, kAccessAll);
        if (!alloc) return 3;
        std::memset(alloc->first, 0, kBig);
        ch.send(side.address());
        ch.send(side.pack(alloc->second));
        std::uint64_t address = reinterpret_cast<std::uint64_t>(alloc->first);
        ch.send(std::vector<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&address),
                                          reinterpret_cast<std::uint8_t*>(&address) + 8));
        report.check(ch.recv_text() == "check", "no check command");
        auto expected = pattern(kBig, 4);
        report.check(std::memcmp(alloc->first, expected.data(), kBig) == 0, "the mapping was not written");
        report.check(side.md().mem_free(alloc->second) == Status::ok, "mem_free");
        return report.finish(ch);
    });
    ShmSide side({{"SHM_CMA", "no"}});
    auto address = child.channel().recv();
    auto key = child.channel().recv();
    auto remote = child.channel().recv();
    ASSERT_TRUE(address && key && remote);
    Ep* ep = side.connect_or_throw(*address);
    auto rkey = shm_component().rkey_unpack(key->data(), key->size());
    ASSERT_TRUE(rkey.ok());
    std::uint64_t base;
    std::memcpy(&base, remote->data(), 8);
    auto data = pattern(kBig, 4);
    Iov iov{data.data(), data.size(), kMemHNull};
    TestCompletion comp;
    ASSERT_EQ(Status::ok, ep_put_zcopy(ep, &iov, 1, base, rkey->rkey, &comp));
    std::vector<std::uint8_t> back(kBig);
    Iov out{back.data(), back.size(), kMemHNull};
    ASSERT_EQ(Status::ok, ep_get_zcopy(ep, &out, 1, base, rkey->rkey, &comp));
    EXPECT_TRUE(back == data);
    Unpacked unpacked;
    ASSERT_EQ(Status::ok, ep_get_bcopy(ep, Unpacked::unpack, &unpacked, 1000, base + 77, rkey->rkey, &comp));
    EXPECT_TRUE(std::equal(unpacked.data.begin(), unpacked.data.end(), data.begin() + 77));
    EXPECT_EQ(0, comp.fired);
    child.channel().send(std::string("check"));
    EXPECT_EQ("ok", verdict(child));
    EXPECT_EQ(0, child.wait());
    shm_component().rkey_release(*rkey);
}

// --- Peers that die -----------------------------------------------------------------------------

struct ErrorRecord {
    int calls = 0;
    Status status = Status::ok;
    static void on_error(void* arg, Ep*, Status status) {
        auto* self = static_cast<ErrorRecord*>(arg);
        ++self->calls;
        self->status = status;
    }
};

/** A child that opens an iface, sends its address (and a key of a registered buffer) and then idles. */
int idle_peer(Channel& ch) {
    ShmSide side;
    std::vector<std::uint8_t> buffer(kSmall, 5);
    ch.send(side.address());
    ch.send(side.register_and_pack(buffer.data(), buffer.size(), kAccessAll));
    std::uint64_t address = reinterpret_cast<std::uint64_t>(buffer.data());
    ch.send(std::vector<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&address),
                                      reinterpret_cast<std::uint8_t*>(&address) + 8));
    (void)ch.recv(60s);  // until killed, or the parent closes the channel
    return 0;
}

TEST(ShmPeerFailure, IdleEndpointFailsWhenThePeerIsKilled) {
    ForkedPeer child(idle_peer);
    ShmSide side({{"SHM_PEER_CHECK_INTERVAL", "2ms"}});
    auto address = child.channel().recv();
    ASSERT_TRUE(address);
    ErrorRecord error;
    auto ep = side.connect(*address, ErrorRecord::on_error, &error);
    ASSERT_TRUE(ep.ok());
    ASSERT_EQ(Status::ok, ep_am_short(*ep, kAmId, 1, nullptr, 0));
    loom::test::LogCapture capture("error");
    child.kill(SIGKILL);
    EXPECT_EQ(-SIGKILL, child.wait());
    ASSERT_TRUE(side.progress_until([&] { return error.calls > 0; }, 10s)) << "the death went unnoticed";
    EXPECT_EQ(Status::endpoint_failure, error.status);
    EXPECT_EQ(1, capture.count("is gone"));
    EXPECT_EQ(Status::endpoint_failure, ep_am_short(*ep, kAmId, 2, nullptr, 0));
    EXPECT_EQ(Status::endpoint_failure, flush_ep(side, *ep));
    for (int i = 0; i < 1000; ++i) side.progress();
    EXPECT_EQ(1, error.calls);
}

TEST(ShmPeerFailure, EndpointsToTwoIfacesOfOneProcessBothNoticeItsDeath) {
    // The second interface of a process shares the first one's checked process handle
    // (attach_peer): both endpoints must still fail when that process dies.
    ForkedPeer child([](Channel& ch) {
        ShmSide one, two;
        ch.send(one.address());
        ch.send(two.address());
        (void)ch.recv(60s);
        return 0;
    });
    ShmSide side({{"SHM_PEER_CHECK_INTERVAL", "2ms"}});
    auto first = child.channel().recv();
    auto second = child.channel().recv();
    ASSERT_TRUE(first && second);
    ErrorRecord errors;
    auto ep1 = side.connect(*first, ErrorRecord::on_error, &errors);
    auto ep2 = side.connect(*second, ErrorRecord::on_error, &errors);
    ASSERT_TRUE(ep1.ok() && ep2.ok());
    ASSERT_EQ(Status::ok, ep_am_short(*ep1, kAmId, 1, nullptr, 0));
    ASSERT_EQ(Status::ok, ep_am_short(*ep2, kAmId, 2, nullptr, 0));
    loom::test::LogCapture capture("error");
    child.kill(SIGKILL);
    EXPECT_EQ(-SIGKILL, child.wait());
    ASSERT_TRUE(side.progress_until([&] { return errors.calls == 2; }, 10s)) << "a death went unnoticed";
    EXPECT_EQ(Status::endpoint_failure, ep_am_short(*ep1, kAmId, 3, nullptr, 0));
    EXPECT_EQ(Status::endpoint_failure, ep_am_short(*ep2, kAmId, 3, nullptr, 0));
}

/** File descriptors this process has open. */
std::size_t open_fds() {
    std::size_t n = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
        (void)entry;
        ++n;
    }
    return n;
}

/** Mappings of shm segments (memfd files named loom-shm-...) in this process. */
std::size_t shm_mappings() {
    std::ifstream maps("/proc/self/maps");
    std::size_t n = 0;
    for (std::string line; std::getline(maps, line);) {
        if (line.find("/memfd:loom-shm-") != std::string::npos) ++n;
    }
    return n;
}

constexpr int kPeerIfaces = 8;

/**
 * The child of the tests below: opens kPeerIfaces ifaces and sends their addresses; on the
 * parent's first message closes the first iface and answers; then waits to be killed or
 * told to finish.
 */
int host_ifaces(Channel& ch) {
    std::vector<std::unique_ptr<ShmSide>> sides;
    for (int i = 0; i < kPeerIfaces; ++i) {
        sides.push_back(std::make_unique<ShmSide>());
        ch.send(sides.back()->address());
    }
    if (!ch.recv(60s)) return 1;
    sides.front().reset();
    ch.send(std::vector<std::uint8_t>{1});
    (void)ch.recv(60s);
    return 0;
}

/** The kPeerIfaces addresses host_ifaces sends (fewer when the child failed). */
std::vector<std::vector<std::uint8_t>> peer_addresses(ForkedPeer& child) {
    std::vector<std::vector<std::uint8_t>> addresses;
    for (int i = 0; i < kPeerIfaces; ++i) {
        auto address = child.channel().recv();
        if (!address) break;
        addresses.push_back(*address);
    }
    return addresses;
}

TEST(ShmMultiProcess, AllIfacesOfAPeerProcessAreMappedOnce) {
    // A process reaching many workers of another maps that process's arena once: a
    // segment per iface cost every endpoint an open, fstat, mmap and close (epmem.c).
    ForkedPeer child(host_ifaces);
    loom::test::ScopedEnv env("LOOM_SHM_SEGMENT", "memfd");
    ShmSide side;
    const auto addresses = peer_addresses(child);
    ASSERT_EQ(static_cast<std::size_t>(kPeerIfaces), addresses.size());
    const std::size_t before = shm_mappings();
    for (const auto& address : addresses) {
        auto ep = side.connect(address);
        ASSERT_TRUE(ep.ok());
        ASSERT_EQ(Status::ok, ep_am_short(*ep, kAmId, 1, nullptr, 0));
    }
    EXPECT_EQ(before + 1, shm_mappings()) << "one mapping for the " << kPeerIfaces << " FIFOs of the peer";
    child.channel().send(std::string("close the first"));
    ASSERT_TRUE(child.channel().recv(30s));
    child.channel().send(std::string("done"));
    EXPECT_EQ(0, child.wait());
}

TEST(ShmPeerFailure, IfacesOfOneProcessAreWatchedOnceAndEachClosesAlone) {
    // An iface watches a peer process once however many of its ifaces it reaches (one
    // pidfd, one poll per check, one entry in the event set); a peer iface that closes
    // fails its own endpoint only, and the process's death still wakes a sleeper after.
    constexpr int kIfaces = kPeerIfaces;
    ForkedPeer child(host_ifaces);
    ShmSide side({{"SHM_PEER_CHECK_INTERVAL", "2ms"}});
    const auto addresses = peer_addresses(child);
    ASSERT_EQ(static_cast<std::size_t>(kIfaces), addresses.size());
    auto event = side.iface().event_fd();
    ASSERT_TRUE(event.ok());
    const std::size_t fds_before = open_fds();
    std::vector<ErrorRecord> errors(kIfaces);
    std::vector<Ep*> eps;
    for (int i = 0; i < kIfaces; ++i) {
        auto ep = side.connect(addresses[static_cast<std::size_t>(i)], ErrorRecord::on_error,
                               &errors[static_cast<std::size_t>(i)]);
        ASSERT_TRUE(ep.ok());
        eps.push_back(*ep);
        ASSERT_EQ(Status::ok, ep_am_short(*ep, kAmId, static_cast<std::uint64_t>(i), nullptr, 0));
    }
    EXPECT_LE(open_fds(), fds_before + 1) << "more than the one pidfd of the peer process";
    ASSERT_TRUE(child.channel().send(std::vector<std::uint8_t>{0}));
    ASSERT_TRUE(child.channel().recv(30s));
    ASSERT_TRUE(side.progress_until([&] { return errors[0].calls > 0; }, 10s))
        << "the closed iface went unnoticed";
    EXPECT_EQ(Status::connection_reset, errors[0].status);
    side.destroy(eps[0]);  // its peer goes: the process stays watched for the others
    for (int i = 1; i < kIfaces; ++i) {
        EXPECT_EQ(0, errors[static_cast<std::size_t>(i)].calls);
        EXPECT_EQ(Status::ok, ep_am_short(eps[static_cast<std::size_t>(i)], kAmId, 9, nullptr, 0));
    }
    while (side.progress() != 0) {
    }
    ASSERT_EQ(Status::ok, side.iface().event_arm());
    loom::test::LogCapture capture("error");
    child.kill(SIGKILL);
    EXPECT_EQ(-SIGKILL, child.wait());
    pollfd pfd{*event, POLLIN, 0};
    ASSERT_EQ(1, ::poll(&pfd, 1, 30000)) << "the sleeper was not woken by the process's death";
    ASSERT_TRUE(side.progress_until(
        [&] {
            for (int i = 1; i < kIfaces; ++i) {
                if (errors[static_cast<std::size_t>(i)].calls == 0) return false;
            }
            return true;
        },
        10s))
        << "a death went unnoticed";
    for (int i = 1; i < kIfaces; ++i)
        EXPECT_EQ(Status::endpoint_failure, errors[static_cast<std::size_t>(i)].status);
}

TEST(ShmPeerFailure, FullFifoWithPendingRequestsFailsWhenThePeerIsKilled) {
    ForkedPeer child(idle_peer);
    // A long period: the detection must come from the full FIFO, not from the periodic check.
    ShmSide side({{"SHM_PEER_CHECK_INTERVAL", "10min"}});
    auto address = child.channel().recv();
    ASSERT_TRUE(address);
    ErrorRecord error;
    auto connected = side.connect(*address, ErrorRecord::on_error, &error);
    ASSERT_TRUE(connected.ok());
    Ep* ep = *connected;
    while (ep_am_short(ep, kAmId, 0, nullptr, 0) == Status::ok) {
    }
    struct Request : PendingReq {
        int* calls;
    };
    int calls = 0;
    Request requests[3];
    for (Request& req : requests) {
        req.calls = &calls;
        req.func = [](PendingReq* self) {
            ++*static_cast<Request*>(self)->calls;
            return Status::ok;
        };
        ASSERT_EQ(Status::ok, ep_pending_add(ep, &req, 0));
    }
    loom::test::LogCapture capture("error");
    child.kill(SIGKILL);
    EXPECT_EQ(-SIGKILL, child.wait());
    ASSERT_TRUE(side.progress_until([&] { return error.calls > 0; }, 10s)) << "the death went unnoticed";
    EXPECT_EQ(Status::endpoint_failure, error.status);
    EXPECT_EQ(0, calls) << "pending requests of a failed endpoint must not run";
    int purged = 0;
    ep_pending_purge(
        ep, [](PendingReq*, void* arg) { ++*static_cast<int*>(arg); }, &purged);
    EXPECT_EQ(3, purged);
    EXPECT_EQ(Status::endpoint_failure, ep_am_short(ep, kAmId, 0, nullptr, 0));
    // A failed endpoint queues nothing more and returns its error.
    EXPECT_EQ(Status::endpoint_failure, ep_pending_add(ep, &requests[0], 0));
    EXPECT_EQ(1, capture.count("is gone"));
}

TEST(ShmPeerFailure, OutstandingOperationsCompleteWithAnErrorWhenThePeerIsKilled) {
    ForkedPeer child(idle_peer);
    ShmSide side({{"SHM_CMA", "no"}, {"SHM_PEER_CHECK_INTERVAL", "2ms"}});
    auto address = child.channel().recv();
    auto key = child.channel().recv();
    auto remote = child.channel().recv();
    ASSERT_TRUE(address && key && remote);
    ErrorRecord error;
    auto ep = side.connect(*address, ErrorRecord::on_error, &error);
    ASSERT_TRUE(ep.ok());
    auto rkey = shm_component().rkey_unpack(key->data(), key->size());
    ASSERT_TRUE(rkey.ok());
    std::uint64_t base;
    std::memcpy(&base, remote->data(), 8);
    // The idle target never answers: the get stays outstanding, and so does the flush.
    std::vector<std::uint8_t> local(kSmall);
    Iov iov{local.data(), local.size(), kMemHNull};
    TestCompletion get, flush, iface_flush;
    ASSERT_EQ(Status::in_progress, ep_get_zcopy(*ep, &iov, 1, base, rkey->rkey, &get));
    ASSERT_EQ(Status::in_progress, ep_flush(*ep, kFlushLocal, &flush));
    ASSERT_EQ(Status::in_progress, uct::iface_flush(&side.iface(), kFlushLocal, &iface_flush));
    for (int i = 0; i < 100; ++i) side.progress();
    EXPECT_EQ(0, get.fired);
    loom::test::LogCapture capture("error");
    child.kill(SIGKILL);
    EXPECT_EQ(-SIGKILL, child.wait());
    ASSERT_TRUE(side.progress_until([&] { return error.calls > 0 && iface_flush.fired > 0; }, 10s));
    EXPECT_EQ(1, get.fired);
    EXPECT_EQ(Status::endpoint_failure, get.status);
    EXPECT_EQ(1, flush.fired);
    EXPECT_EQ(Status::endpoint_failure, flush.status);
    EXPECT_EQ(1, iface_flush.fired);
    EXPECT_EQ(Status::endpoint_failure, error.status);
    shm_component().rkey_release(*rkey);
}

TEST(ShmMultiProcess, CancelingFlushCompletesOutstandingEmulatedOperations) {
    ForkedPeer child(idle_peer);  // never progresses: nothing it is sent gets done
    // 1 KiB fragments: a 3000-byte put takes three, so one of them ends up half out when the
    // peer's 256 KiB FIFO fills (the 82nd, as the sizes go).
    ShmSide side({{"SHM_CMA", "no"}, {"SHM_MAX_BCOPY", "1k"}});
    auto address = child.channel().recv();
    auto key = child.channel().recv();
    auto remote = child.channel().recv();
    ASSERT_TRUE(address && key && remote);
    Ep* ep = side.connect_or_throw(*address);
    auto rkey = shm_component().rkey_unpack(key->data(), key->size());
    ASSERT_TRUE(rkey.ok());
    std::uint64_t base;
    std::memcpy(&base, remote->data(), 8);
    std::vector<std::uint8_t> local(kSmall);
    Iov get_iov{local.data(), local.size(), kMemHNull};
    TestCompletion get, put, flush;
    ASSERT_EQ(Status::in_progress, ep_get_zcopy(ep, &get_iov, 1, base, rkey->rkey, &get));
    std::vector<std::uint8_t> data(3000, 1);
    Iov put_iov{data.data(), data.size(), kMemHNull};
    Status status;
    int puts = 0;
    while ((status = ep_put_zcopy(ep, &put_iov, 1, base, rkey->rkey, &put)) == Status::ok) ++puts;
    ASSERT_EQ(Status::in_progress, status) << "after " << puts << " puts";
    EXPECT_EQ(Status::no_resource, ep_am_short(ep, kAmId, 0, nullptr, 0)) << "the endpoint waits for the put";
    ASSERT_EQ(Status::in_progress, ep_flush(ep, kFlushLocal, &flush));
    EXPECT_EQ(Status::ok, ep_flush(ep, kFlushCancel, nullptr));
    EXPECT_EQ(1, get.fired);
    EXPECT_EQ(Status::canceled, get.status);
    EXPECT_EQ(1, put.fired);
    EXPECT_EQ(Status::canceled, put.status);
    EXPECT_EQ(1, flush.fired);
    // Nothing is outstanding any more, and the endpoint takes new work again (when there is room).
    EXPECT_EQ(Status::ok, ep_flush(ep, kFlushLocal, nullptr));
    TestCompletion iface;
    EXPECT_EQ(Status::ok, uct::iface_flush(&side.iface(), kFlushLocal, &iface));
    // The half-sent put left a few cells: enough for a one-cell message once nothing blocks it.
    EXPECT_EQ(Status::ok, ep_am_short(ep, kAmId, 0, nullptr, 0));
    shm_component().rkey_release(*rkey);
}

TEST(ShmPeerFailure, EndpointDestroyedInItsErrorCallback) {
    ForkedPeer child(idle_peer);
    ShmSide side({{"SHM_PEER_CHECK_INTERVAL", "2ms"}});
    auto address = child.channel().recv();
    ASSERT_TRUE(address);
    struct Arg {
        ShmSide* side;
        int calls = 0;
    } arg{&side};
    auto on_error = [](void* a, Ep* ep, Status) {
        auto* self = static_cast<Arg*>(a);
        ++self->calls;
        self->side->destroy(ep);
    };
    ASSERT_TRUE(side.connect(*address, on_error, &arg).ok());
    ASSERT_TRUE(side.connect(*address, on_error, &arg).ok());
    loom::test::LogCapture capture("error");
    child.kill(SIGKILL);
    EXPECT_EQ(-SIGKILL, child.wait());
    ASSERT_TRUE(side.progress_until([&] { return arg.calls == 2; }, 10s));
    for (int i = 0; i < 1000; ++i) side.progress();
    EXPECT_EQ(2, arg.calls);
}

// --- Garbage from peers ---------------------------------------------------------------------------

TEST(ShmMultiProcess, KeysAndAddressesOfGoneOrMismatchedSegmentsAreRejected) {
    ForkedPeer child([](Channel& ch) {
        ShmSide side;
        auto alloc = side.md().mem_alloc(4096, kAccessAll);
        if (!alloc) return 3;
        ch.send(side.address());
        ch.send(side.pack(alloc->second));
        (void)ch.recv();  // until the parent is done with the live checks
        return side.md().mem_free(alloc->second) == Status::ok ? 0 : 4;
    });
    ShmSide side;
    auto address = child.channel().recv();
    auto key = child.channel().recv();
    ASSERT_TRUE(address && key);
    // The genuine key maps; the segment fields sit at the end of the packed key.
    auto good = shm_component().rkey_unpack(key->data(), key->size());
    ASSERT_TRUE(good.ok());
    shm_component().rkey_release(*good);
    const std::size_t seg_offset = key->size() - sizeof(impl::SegmentId);
    impl::SegmentId seg;
    std::memcpy(&seg, key->data() + seg_offset, sizeof(seg));
    loom::test::LogCapture capture("error");
    {
        auto bad = *key;
        impl::SegmentId wrong = seg;
        wrong.cookie ^= 0xff;
        std::memcpy(bad.data() + seg_offset, &wrong, sizeof(wrong));
        EXPECT_EQ(Status::unreachable, shm_component().rkey_unpack(bad.data(), bad.size()).status());
        EXPECT_EQ(1, capture.count("cookie mismatch"));
    }
    {
        auto bad = *key;
        impl::SegmentId wrong = seg;
        wrong.size = 1ull << 40;  // bigger than the file
        std::memcpy(bad.data() + seg_offset, &wrong, sizeof(wrong));
        EXPECT_EQ(Status::unreachable, shm_component().rkey_unpack(bad.data(), bad.size()).status());
    }
    // An address whose cookie is wrong.
    auto bad_address = *address;
    bad_address[side.attr().device_addr_len + 1 + offsetof(impl::SegmentId, cookie)] ^= 1;
    EXPECT_EQ(Status::unreachable, side.connect(bad_address).status());
    // After the child is gone, its address and keys lead nowhere.
    child.channel().send(std::string("done"));
    EXPECT_EQ(0, child.wait());
    std::string reason;
    EXPECT_FALSE(reachable(side, *address, &reason));
    EXPECT_EQ(Status::unreachable, side.connect(*address).status());
    EXPECT_EQ(Status::unreachable, shm_component().rkey_unpack(key->data(), key->size()).status());
}

// --- /dev/shm after processes come and go -----------------------------------------------------------

TEST(ShmDevShm, MemfdProcessesLeaveNothingWhetherTheyExitOrAreKilled) {
    auto before = loom_shm_names();
    auto body = [](Channel& ch) {
        ShmSide side;
        auto alloc = side.md().mem_alloc(1 << 16, kAccessAll);
        ch.send(side.address());
        (void)ch.recv(60s);
        return alloc.ok() ? 0 : 3;
    };
    {
        ForkedPeer exits(body);
        ForkedPeer killed(body);
        ASSERT_TRUE(exits.channel().recv());
        ASSERT_TRUE(killed.channel().recv());
        EXPECT_EQ(before, loom_shm_names());
        killed.kill(SIGKILL);
        EXPECT_EQ(-SIGKILL, killed.wait());
        exits.channel().send(std::string("done"));
        EXPECT_EQ(0, exits.wait());
    }
    EXPECT_EQ(before, loom_shm_names());
}

TEST(ShmDevShm, PosixNamesOfAKilledProcessAreSweptAndAnExitingOneRemovesItsOwn) {
    auto before = loom_shm_names();
    auto body = [](Channel& ch) {
        ::setenv("LOOM_SHM_SEGMENT", "posix", 1);
        ShmSide side;
        auto alloc = side.md().mem_alloc(1 << 16, kAccessAll);
        if (!alloc) return 3;
        ch.send(side.address());
        (void)ch.recv(60s);
        return side.md().mem_free(alloc->second) == Status::ok ? 0 : 4;
    };
    {
        ForkedPeer exits(body);
        ASSERT_TRUE(exits.channel().recv());
        EXPECT_EQ(before.size() + 2, loom_shm_names().size()) << "a FIFO and an allocation";
        exits.channel().send(std::string("done"));
        EXPECT_EQ(0, exits.wait());
        EXPECT_EQ(before, loom_shm_names());
    }
    ForkedPeer killed(body);
    ASSERT_TRUE(killed.channel().recv());
    EXPECT_EQ(before.size() + 2, loom_shm_names().size());
    killed.kill(SIGKILL);
    EXPECT_EQ(-SIGKILL, killed.wait());
    EXPECT_EQ(before.size() + 2, loom_shm_names().size()) << "a killed process cannot clean up itself";
    EXPECT_GE(impl::sweep_stale_segments(), 2u);
    EXPECT_EQ(before, loom_shm_names()) << "the next process removes what the dead one left";
}

}  // namespace
}  // namespace loom::uct::shmtest
