/**
 * Tests of the verbs transport (rc) that the generic suites cannot express: device
 * discovery and description, the GID choice, remote keys, traffic between two
 * devices (rxe0 -> rxe1, siw0 -> siw1: the realistic path, packets cross a wire),
 * flow control without receiver-not-ready, per-QP receive queues, rdma_cm on RoCE,
 * pending fairness, flush, endpoint failure on a bad remote key or a dead peer, and
 * the md's registration cache: hits, and memory given back and obtained again at the
 * same address, whose new pages the peer must receive rather than the old, pinned ones;
 * wake-up events: a completion already queued makes arm busy, and a credit grant, a
 * send completion, rdma_cm connection set-up and a disconnect wake an armed iface.
 *
 * They run wherever verbs devices exist (in CI: the rdma-vm with Soft-RoCE and
 * soft-iWARP) and skip elsewhere.
 */
#include "uct_test.h"

#include "common/silent_device.h"
#include "common/test_helpers.h"
#include "ucs/memory/memhooks.h"
#include "ucs/memory/pages.h"
#include "uct/ib/ib_md.h"
#include "uct/ib/rc_iface.h"
#include "uct/ib/rc_peer_data.h"
#include "uct/ib/rc_wire.h"

#include <malloc.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace loom::uct::test {
namespace {

using ib::RcDeviceAddress;

constexpr AmId kAmId = 7;

/** Every rc resource found here. */
std::vector<Resource> rc_resources() {
    std::vector<Resource> rc;
    for (const Resource& r : all_resources()) {
        if (r.tl.tl_name == "rc") rc.push_back(r);
    }
    return rc;
}

/** True when the md of @p r describes an iWARP device. */
bool is_iwarp(const Resource& r) {
    auto md = r.component->md_open(r.md_name);
    return md.ok() && (*md)->describe().find("transport iWARP") != std::string::npos;
}

/** Two resources of the same kind on different devices: a sender and a receiver across a wire. */
struct Pair {
    Resource a, b;
    std::string name() const {
        std::string n = a.md_name + "_to_" + b.md_name;
        for (char& c : n) {
            if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
        }
        return n;
    }
};

void PrintTo(const Pair& p, std::ostream* os) { *os << p.name(); }

std::vector<Pair> device_pairs() {
    std::vector<Pair> pairs;
    std::vector<Resource> rc = rc_resources();
    std::vector<bool> used(rc.size(), false);
    for (std::size_t i = 0; i < rc.size(); ++i) {
        for (std::size_t j = i + 1; j < rc.size() && !used[i]; ++j) {
            if (used[j] || rc[i].md_name == rc[j].md_name || is_iwarp(rc[i]) != is_iwarp(rc[j])) continue;
            pairs.push_back({rc[i], rc[j]});
            used[i] = used[j] = true;
        }
    }
    return pairs;
}

/** One side: worker, md and iface opened with configuration overrides. */
class Side {
public:
    explicit Side(const Resource& r, const ucs::config::Overrides& overrides = {}) : resource_(r) {
        auto md = r.component->md_open(r.md_name);
        if (!md) throw std::runtime_error("md_open failed");
        md_ = std::move(*md);
        IfaceParams params;
        params.config_overrides = overrides;
        auto iface = md_->iface_open(r.tl, &worker_, params);
        if (!iface) {
            throw std::runtime_error(std::string("iface_open failed: ") +
                                     std::string(to_string(iface.status())));
        }
        iface_ = std::move(*iface);
        if (iface_->query(attr_) != Status::ok || md_->query(md_attr_) != Status::ok) {
            throw std::runtime_error("query failed");
        }
        dev_addr_.resize(attr_.device_addr_len);
        iface_addr_.resize(attr_.iface_addr_len);
        if (iface_->get_device_address(dev_addr_.data()) != Status::ok ||
            iface_->get_address(iface_addr_.data()) != Status::ok ||
            iface_->progress_enable() != Status::ok) {
            throw std::runtime_error("iface set-up failed");
        }
    }

    ~Side() {
        for (Ep* ep : eps_) iface_->ep_destroy(ep);
        iface_.reset();
        md_.reset();
    }

    /** An endpoint-to-endpoint endpoint not connected yet (destroyed with the side). */
    Ep* unconnected_ep() {
        auto ep = iface_->ep_create({});
        if (!ep) throw std::runtime_error("ep_create failed");
        eps_.push_back(*ep);
        return *ep;
    }

    /** @p ep's address. */
    std::vector<std::uint8_t> ep_address(Ep* ep) {
        std::vector<std::uint8_t> a(attr_.ep_addr_len);
        if (iface_->ep_get_address(ep, a.data()) != Status::ok) throw std::runtime_error("ep_get_address failed");
        return a;
    }

    /** Forgets @p ep (the test destroyed it). */
    void forget(Ep* ep) { std::erase(eps_, ep); }

    Worker& worker() { return worker_; }
    Md& md() { return *md_; }
    Iface& iface() { return *iface_; }
    const IfaceAttr& attr() const { return attr_; }
    const Resource& resource() const { return resource_; }
    const std::vector<std::uint8_t>& dev_addr() const { return dev_addr_; }
    const std::vector<std::uint8_t>& iface_addr() const { return iface_addr_; }
    bool connect_to_ep() const { return !(attr_.cap_flags & kCapConnectToIface); }

    /**
     * An endpoint to @p peer. Endpoint to endpoint: @p peer gets one back (returned in
     * @p back); to an iface: the peer accepts by itself and @p back is null.
     */
    Ep* connect(Side& peer, const EpParams& params = {}, Ep** back = nullptr,
                const EpParams& back_params = {}) {
        if (connect_to_ep()) {
            auto ep = iface_->ep_create(params);
            auto peer_ep = peer.iface_->ep_create(back_params);
            if (!ep || !peer_ep) throw std::runtime_error("ep_create failed");
            eps_.push_back(*ep);
            peer.eps_.push_back(*peer_ep);
            std::vector<std::uint8_t> a(attr_.ep_addr_len), b(peer.attr_.ep_addr_len);
            if (iface_->ep_get_address(*ep, a.data()) != Status::ok ||
                peer.iface_->ep_get_address(*peer_ep, b.data()) != Status::ok ||
                iface_->ep_connect_to_ep(*ep, peer.dev_addr_.data(), peer.dev_addr_.size(), b.data(),
                                         b.size()) != Status::ok ||
                peer.iface_->ep_connect_to_ep(*peer_ep, dev_addr_.data(), dev_addr_.size(), a.data(),
                                              a.size()) != Status::ok) {
                throw std::runtime_error("connect to ep failed");
            }
            if (back != nullptr) *back = *peer_ep;
            return *ep;
        }
        EpParams p = params;
        p.dev_addr = peer.dev_addr_.data();
        p.dev_addr_len = peer.dev_addr_.size();
        p.iface_addr = peer.iface_addr_.data();
        p.iface_addr_len = peer.iface_addr_.size();
        auto ep = iface_->ep_create(p);
        if (!ep) throw std::runtime_error("ep_create failed");
        eps_.push_back(*ep);
        if (back != nullptr) *back = nullptr;
        return *ep;
    }

private:
    Resource resource_;
    Worker worker_;
    std::unique_ptr<Md> md_;
    std::unique_ptr<Iface> iface_;
    IfaceAttr attr_;
    MdAttr md_attr_;
    std::vector<std::uint8_t> dev_addr_, iface_addr_;
    std::vector<Ep*> eps_;
};

/** What a receiver saw. */
struct Received {
    std::vector<std::vector<std::uint8_t>> messages;
    static Status handler(void* arg, void* data, std::size_t length, unsigned) {
        auto* self = static_cast<Received*>(arg);
        auto* bytes = static_cast<std::uint8_t*>(data);
        self->messages.emplace_back(bytes, bytes + length);
        return Status::ok;
    }
};

/** Records endpoint failures. */
struct ErrorLog {
    int calls = 0;
    Status status = Status::ok;
    Ep* ep = nullptr;
    static void on_error(void* arg, Ep* ep, Status status) {
        auto* self = static_cast<ErrorLog*>(arg);
        ++self->calls;
        self->status = status;
        self->ep = ep;
    }
    EpParams params() {
        EpParams p;
        p.on_error = on_error;
        p.on_error_arg = this;
        return p;
    }
};

std::vector<std::uint8_t> pattern(std::size_t length, unsigned seed) {
    std::vector<std::uint8_t> data(length);
    for (std::size_t i = 0; i < length; ++i) {
        data[i] = static_cast<std::uint8_t>(seed * 131 + i * 7 + (i >> 8));
    }
    return data;
}

std::size_t pack_vector(void* dest, void* arg) {
    auto* data = static_cast<std::vector<std::uint8_t>*>(arg);
    if (!data->empty()) std::memcpy(dest, data->data(), data->size());
    return data->size();
}

std::string read_line(const std::string& path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line;
}

/** The rdma-vm exports RDMA_VM_<DEV>_GID_INDEX; empty elsewhere. */
std::string vm_gid_index(const std::string& dev) {
    std::string var = "RDMA_VM_" + dev + "_GID_INDEX";
    std::transform(var.begin(), var.end(), var.begin(), [](unsigned char c) { return std::toupper(c); });
    const char* value = std::getenv(var.c_str());
    return value ? value : "";
}

bool readable(int fd, int timeout_ms) {
    pollfd pfd{fd, POLLIN, 0};
    return ::poll(&pfd, 1, timeout_ms) == 1;
}

/** Progresses @p side until its iface can be armed; false (a failure recorded) when it stays busy. */
bool quiesce_and_arm(Side& side) {
    for (int i = 0; i < 100000; ++i) {
        Status s = side.iface().event_arm();
        if (s == Status::ok) return true;
        if (s != Status::busy) {
            ADD_FAILURE() << "event_arm: " << to_string(s);
            return false;
        }
        while (side.worker().progress() != 0) {
        }
    }
    ADD_FAILURE() << "event_arm stays busy with nothing to do";
    return false;
}

/**
 * One step of a side that runs only on events: progress when it is not armed (then arm
 * again), or when its event fd is readable. Counts the times the fd woke it.
 */
struct EventDriven {
    Side* side;
    int fd;
    bool armed = false;
    unsigned wakeups = 0;

    /** False when arming failed (recorded). */
    bool step() {
        if (armed) {
            if (!readable(fd, 0)) return true;
            armed = false;
            ++wakeups;
        }
        side->worker().progress();
        Status s = side->iface().event_arm();
        if (s != Status::ok && s != Status::busy) {
            ADD_FAILURE() << "event_arm: " << to_string(s);
            return false;
        }
        armed = s == Status::ok;
        return true;
    }
};

/** A receiver's memory registered for every remote access, with the sender's key. */
struct RemoteBuffer {
    std::vector<std::uint8_t> data;
    MemH memh = kMemHNull;
    Rkey rkey;
    Side* owner;
    Side* user;

    RemoteBuffer(Side& owner_side, Side& user_side, std::size_t size)
        : data(size, 0), owner(&owner_side), user(&user_side) {
        auto reg = owner->md().mem_reg(data.data(), data.size(), kAccessAll);
        if (!reg) throw std::runtime_error("mem_reg failed");
        memh = *reg;
        std::vector<std::uint8_t> packed(kIbRkeySize);
        if (owner->md().mkey_pack(memh, packed.data()) != Status::ok) {
            throw std::runtime_error("mkey_pack failed");
        }
        auto unpacked = user->md().component().rkey_unpack(packed.data(), packed.size());
        if (!unpacked) throw std::runtime_error("rkey_unpack failed");
        rkey = *unpacked;
    }
    ~RemoteBuffer() {
        user->md().component().rkey_release(rkey);
        (void)owner->md().mem_dereg(memh);
    }
    std::uint64_t addr(std::size_t offset = 0) const {
        return reinterpret_cast<std::uint64_t>(data.data()) + offset;
    }
    static constexpr std::size_t kIbRkeySize = 5;
};

/** Local memory registered on @p side. */
struct LocalBuffer {
    std::vector<std::uint8_t> data;
    MemH memh = kMemHNull;
    Side* side;
    LocalBuffer(Side& s, std::size_t size, unsigned access, std::uint8_t fill = 0)
        : data(size, fill), side(&s) {
        auto reg = side->md().mem_reg(data.data(), data.size(), access);
        if (!reg) throw std::runtime_error("mem_reg failed");
        memh = *reg;
    }
    ~LocalBuffer() { (void)side->md().mem_dereg(memh); }
};

// ---------------------------------------------------------------------------------------------
// Single resource: discovery, addressing, keys, attributes.
// ---------------------------------------------------------------------------------------------

class IbResourceTest : public testing::TestWithParam<Resource> {};

TEST_P(IbResourceTest, DescribeShowsTheDevice) {
    auto md = GetParam().component->md_open(GetParam().md_name);
    ASSERT_TRUE(md.ok());
    std::string text = (*md)->describe();
    EXPECT_NE(std::string::npos, text.find("device " + GetParam().md_name + ": transport ")) << text;
    for (const char* fact : {"link layer ", "active MTU ", "Gb/s", "GID[", "limits: ", "atomics: "}) {
        EXPECT_NE(std::string::npos, text.find(fact)) << "missing '" << fact << "' in:\n" << text;
    }
    // Every GID the kernel lists is shown with its index.
    std::string port = GetParam().tl.dev_name.substr(GetParam().tl.dev_name.rfind(':') + 1);
    std::string gid0 =
        read_line("/sys/class/infiniband/" + GetParam().md_name + "/ports/" + port + "/gids/0");
    if (!gid0.empty()) {
        EXPECT_NE(std::string::npos, text.find("GID[0] ")) << text;
    }
}

TEST_P(IbResourceTest, AttributesMatchTheDevice) {
    Side side(GetParam());
    const IfaceAttr& attr = side.attr();
    bool iwarp = is_iwarp(GetParam());
    EXPECT_TRUE(attr.cap_flags & kCapPutShort);
    EXPECT_EQ(attr.put.max_short, attr.am.max_short + 12) << "am_short = inline minus 4 + 8 header bytes";
    EXPECT_EQ(8192u, attr.am.max_bcopy);
    EXPECT_LE(attr.am.max_zcopy + attr.am.max_hdr, attr.am.max_bcopy)
        << "a zcopy message fits a receive buffer";
    EXPECT_GE(attr.get.max_iov, 1u);
    EXPECT_GT(attr.bandwidth_dedicated, 0);
    EXPECT_GT(attr.latency.c, 0);
    EXPECT_LE(attr.ep_size, 128u);
    if (iwarp) {
        EXPECT_TRUE(attr.cap_flags & kCapConnectToIface) << "iWARP connects through rdma_cm";
        // siw has no atomics: LOOM_IB_ATOMICS=auto performs them with the target's CPU.
        EXPECT_TRUE((attr.cap_flags & (kCapAtomic32 | kCapAtomic64)) == (kCapAtomic32 | kCapAtomic64));
        EXPECT_FALSE(attr.cap_flags & kCapAtomicDevice) << "iWARP (siw) has no NIC atomics";
        EXPECT_EQ(0u, attr.ep_addr_len);
    } else {
        EXPECT_TRUE(attr.cap_flags & kCapConnectToEp);
        EXPECT_GT(attr.ep_addr_len, 0u);
        EXPECT_TRUE(attr.cap_flags & kCapAtomic64);
        EXPECT_TRUE(attr.cap_flags & kCapAtomicDevice) << "rxe has NIC atomics: auto uses them";
        EXPECT_EQ(atomic_op_bit(AtomicOp::add) | atomic_op_bit(AtomicOp::cswap), attr.atomic64_ops)
            << "verbs has 64-bit fetch-add and compare-swap only";
        EXPECT_FALSE(attr.cap_flags & kCapAtomic32);
    }
}

TEST_P(IbResourceTest, CpuAtomicsOfferEveryOperation) {
    Side side(GetParam(), {{"IB_ATOMICS", "cpu"}});
    const IfaceAttr& attr = side.attr();
    const std::uint64_t all = atomic_op_bit(AtomicOp::add) | atomic_op_bit(AtomicOp::and_) |
                              atomic_op_bit(AtomicOp::or_) | atomic_op_bit(AtomicOp::xor_) |
                              atomic_op_bit(AtomicOp::swap) | atomic_op_bit(AtomicOp::cswap);
    EXPECT_TRUE((attr.cap_flags & (kCapAtomic32 | kCapAtomic64)) == (kCapAtomic32 | kCapAtomic64));
    EXPECT_FALSE(attr.cap_flags & kCapAtomicDevice) << "the target's CPU performs them";
    EXPECT_EQ(all, attr.atomic32_ops);
    EXPECT_EQ(all, attr.atomic64_ops);
}

TEST_P(IbResourceTest, UnsupportedAtomicsSayUnsupported) {
    // The NIC's atomics (none at all on siw, where device mode leaves rc without atomics).
    Side a(GetParam(), {{"IB_ATOMICS", "device"}}), b(GetParam(), {{"IB_ATOMICS", "device"}});
    Ep* ep = a.connect(b);
    std::uint64_t result = 0;
    std::uint32_t result32 = 0;
    EXPECT_EQ(Status::unsupported, ep_atomic32_post(ep, AtomicOp::add, 1, 0, 0));
    EXPECT_EQ(Status::unsupported, ep_atomic32_fetch(ep, AtomicOp::add, 1, &result32, 0, 0, nullptr));
    EXPECT_EQ(Status::unsupported, ep_atomic64_post(ep, AtomicOp::xor_, 1, 0, 0));
    EXPECT_EQ(Status::unsupported, ep_atomic64_fetch(ep, AtomicOp::swap, 1, &result, 0, 0, nullptr));
}

TEST_P(IbResourceTest, GidAutoPicksRoceV2Ipv4) {
    if (is_iwarp(GetParam())) GTEST_SKIP() << "iWARP addresses by IP, not by GID";
    loom::test::LogCapture capture("info");
    Side side(GetParam());
    ASSERT_EQ(1, capture.count("using GID index")) << capture.text();
    std::string text = capture.text();
    auto pos = text.find("using GID index ");
    unsigned index = static_cast<unsigned>(std::stoul(text.substr(pos + 16)));
    std::string port = GetParam().tl.dev_name.substr(GetParam().tl.dev_name.rfind(':') + 1);
    std::string base = "/sys/class/infiniband/" + GetParam().md_name + "/ports/" + port;
    EXPECT_EQ("RoCE v2", read_line(base + "/gid_attrs/types/" + std::to_string(index)));
    EXPECT_NE(std::string::npos, text.find("RoCE v2 IPv4")) << text;
    std::string expected = vm_gid_index(GetParam().md_name);
    if (!expected.empty()) {
        EXPECT_EQ(expected, std::to_string(index)) << "the rdma-vm says which index is IPv4";
    }
    // The device address carries that GID.
    RcDeviceAddress addr;
    ASSERT_EQ(sizeof(addr), side.dev_addr().size());
    std::memcpy(&addr, side.dev_addr().data(), sizeof(addr));
    std::string gid = read_line(base + "/gids/" + std::to_string(index));  // "0000:0000:...:ffff:c000:0201"
    std::string hex;
    for (unsigned i = 0; i < 16; ++i) {
        hex += fmt::format("{:02x}{}", addr.gid[i], (i % 2 == 1 && i != 15) ? ":" : "");
    }
    EXPECT_EQ(gid, hex);
    EXPECT_EQ(0xff, addr.gid[10]);
    EXPECT_EQ(0xff, addr.gid[11]);
}

TEST_P(IbResourceTest, GidIndexCanBeChosenAndIsChecked) {
    if (is_iwarp(GetParam())) GTEST_SKIP() << "iWARP addresses by IP, not by GID";
    {
        Side side(GetParam(), {{"IB_GID_INDEX", "0"}});
        RcDeviceAddress addr;
        std::memcpy(&addr, side.dev_addr().data(), sizeof(addr));
        EXPECT_EQ(0xfe, addr.gid[0]) << "index 0 of a RoCE port is the link-local fe80:: GID";
    }
    loom::test::LogCapture capture("error");
    auto md = GetParam().component->md_open(GetParam().md_name);
    ASSERT_TRUE(md.ok());
    Worker worker;
    IfaceParams params;
    params.config_overrides = {{"IB_GID_INDEX", "999"}};
    auto iface = (*md)->iface_open(GetParam().tl, &worker, params);
    EXPECT_EQ(Status::invalid_config, iface.status());
    EXPECT_EQ(1, capture.count("LOOM_IB_GID_INDEX=999"));
}

TEST_P(IbResourceTest, BadConfigurationIsRejectedWithOneLine) {
    auto md = GetParam().component->md_open(GetParam().md_name);
    ASSERT_TRUE(md.ok());
    Worker worker;
    for (const auto& [key, value] :
         std::vector<std::pair<std::string, std::string>>{{"IB_FC_WINDOW", "0"},
                                                          {"IB_SEG_SIZE", "16"},
                                                          {"IB_RX_QUEUE_LEN", "10"},
                                                          {"IB_PATH_MTU", "1000"}}) {
        loom::test::LogCapture capture("error");
        IfaceParams params;
        params.config_overrides = {{key, value}};
        auto iface = (*md)->iface_open(GetParam().tl, &worker, params);
        EXPECT_EQ(Status::invalid_config, iface.status()) << key << "=" << value;
        EXPECT_EQ(1, capture.count("LOOM_" + key)) << capture.text();
    }
}

TEST_P(IbResourceTest, RemoteKeysAreValidated) {
    Side side(GetParam());
    std::vector<std::uint8_t> buffer(4096);
    auto reg = side.md().mem_reg(buffer.data(), buffer.size(), kAccessAll);
    ASSERT_TRUE(reg.ok());
    std::vector<std::uint8_t> packed(5);
    ASSERT_EQ(Status::ok, side.md().mkey_pack(*reg, packed.data()));
    const Component& component = side.md().component();
    auto rkey = component.rkey_unpack(packed.data(), packed.size());
    ASSERT_TRUE(rkey.ok());
    EXPECT_NE(0u, rkey->rkey);
    loom::test::LogCapture capture("fatal");
    auto bad = packed;
    bad[0] ^= 0xff;
    EXPECT_FALSE(component.rkey_unpack(bad.data(), bad.size()).ok()) << "version byte";
    EXPECT_FALSE(component.rkey_unpack(packed.data(), 4).ok());
    EXPECT_FALSE(component.rkey_unpack(nullptr, 5).ok());
    EXPECT_EQ(Status::invalid_param, side.md().mem_dereg(reinterpret_cast<MemH>(buffer.data())))
        << "a handle the md did not give out";
    EXPECT_FALSE(side.md().mem_reg(nullptr, 10, kAccessAll).ok());
    EXPECT_EQ(Status::ok, side.md().mem_dereg(*reg));
}

// These tests look at the ib md only through Md and its handles (MemRegion, a plain
// struct): the test is not linked with the module, which holds IbMd's type information
// that UBSan's checks of a downcast would need.

/** The verbs registration behind a handle of the ib md. */
const ibv_mr& mr_of(MemH memh) {
    return *static_cast<const ib::MemRegion*>(memh)->mr;
}

/** True when @p md serves a second mem_reg of the same memory with the first registration. */
bool md_caches(Md& md) {
    std::vector<std::uint8_t> probe(4096);
    auto a = md.mem_reg(probe.data(), probe.size(), kAccessLocalRead);
    auto b = md.mem_reg(probe.data(), probe.size(), kAccessLocalRead);
    const bool same = a.ok() && b.ok() && mr_of(*a).lkey == mr_of(*b).lkey;
    if (a) {
        EXPECT_EQ(Status::ok, md.mem_dereg(*a));
    }
    if (b) {
        EXPECT_EQ(Status::ok, md.mem_dereg(*b));
    }
    return same;
}

/** The packed remote key of @p memh. */
std::vector<std::uint8_t> packed_rkey(Md& md, MemH memh) {
    std::vector<std::uint8_t> packed(RemoteBuffer::kIbRkeySize);
    EXPECT_EQ(Status::ok, md.mkey_pack(memh, packed.data()));
    return packed;
}

TEST_P(IbResourceTest, RegisteringTheSameMemoryAgainHitsTheCache) {
    if (!ucs::mem_hooks_info().unmap_hooks) {
        GTEST_SKIP() << "no memory hooks in this process: " << ucs::mem_hooks_info().detail;
    }
    Side side(GetParam());
    std::vector<std::uint8_t> buffer(64 * 1024, 1);
    auto first = side.md().mem_reg(buffer.data(), buffer.size(), kAccessAll);
    ASSERT_TRUE(first.ok());
    auto second = side.md().mem_reg(buffer.data(), buffer.size(), kAccessAll);
    ASSERT_TRUE(second.ok());
    // Fewer rights on part of it: served by the same registration too.
    auto part = side.md().mem_reg(buffer.data() + 100, 1000, kAccessLocalRead);
    ASSERT_TRUE(part.ok());
    // Two registrations alive at once never share keys: equal keys are one registration.
    EXPECT_EQ(mr_of(*first).lkey, mr_of(*second).lkey) << "registered again instead of hitting the cache";
    EXPECT_EQ(mr_of(*first).rkey, mr_of(*second).rkey);
    EXPECT_EQ(mr_of(*first).lkey, mr_of(*part).lkey);
    EXPECT_EQ(packed_rkey(side.md(), *first), packed_rkey(side.md(), *second));
    EXPECT_EQ(*first, *second) << "one registration, one handle";
    const std::uint32_t lkey = mr_of(*first).lkey;
    EXPECT_EQ(Status::ok, side.md().mem_dereg(*first));
    EXPECT_EQ(Status::ok, side.md().mem_dereg(*part));
    EXPECT_EQ(Status::ok, side.md().mem_dereg(*second));
    {
        // Every mem_reg has had its mem_dereg: one more is a handle the md no longer gave out.
        loom::test::LogCapture capture("error");
        EXPECT_EQ(Status::invalid_param, side.md().mem_dereg(*first));
        EXPECT_EQ(1, capture.count("did not give out")) << capture.text();
    }
    // The registration outlives its last user: the next mem_reg is a hit as well.
    auto again = side.md().mem_reg(buffer.data(), buffer.size(), kAccessLocalWrite);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(lkey, mr_of(*again).lkey);
    EXPECT_EQ(Status::ok, side.md().mem_dereg(*again));
}

TEST_P(IbResourceTest, RegistrationCacheFollowsLoomIbRcache) {
    std::vector<std::uint8_t> buffer(8192, 2);
    {
        loom::test::ScopedEnv rcache("LOOM_IB_RCACHE", "no");
        Side side(GetParam());
        // Every mem_reg is a registration of its own.
        auto a = side.md().mem_reg(buffer.data(), buffer.size(), kAccessAll);
        auto b = side.md().mem_reg(buffer.data(), buffer.size(), kAccessAll);
        ASSERT_TRUE(a.ok() && b.ok());
        EXPECT_NE(mr_of(*a).lkey, mr_of(*b).lkey);
        EXPECT_EQ(Status::ok, side.md().mem_dereg(*a));
        EXPECT_EQ(Status::ok, side.md().mem_dereg(*b));
        loom::test::LogCapture capture("fatal");
        EXPECT_EQ(Status::invalid_param, side.md().mem_dereg(*a)) << "released already";
    }
    loom::test::ScopedEnv events("LOOM_MEM_EVENTS", "none");
    {
        // try (the default): without memory events the md registers directly, and says why.
        loom::test::LogCapture capture("diag");
        auto md = GetParam().component->md_open(GetParam().md_name);
        ASSERT_TRUE(md.ok());
        EXPECT_EQ(1, capture.count("without a registration cache: memory events are off")) << capture.text();
        EXPECT_FALSE(md_caches(**md));
    }
    {
        loom::test::ScopedEnv rcache("LOOM_IB_RCACHE", "yes");
        loom::test::LogCapture capture("error");
        EXPECT_EQ(Status::unsupported, GetParam().component->md_open(GetParam().md_name).status());
        EXPECT_EQ(1, capture.count("LOOM_IB_RCACHE=yes")) << capture.text();
    }
}

TEST_P(IbResourceTest, ConnectModelIsEnforced) {
    Side side(GetParam());
    loom::test::LogCapture capture("fatal");
    if (side.connect_to_ep()) {
        EpParams params;
        params.dev_addr = side.dev_addr().data();
        params.dev_addr_len = side.dev_addr().size();
        params.iface_addr = side.iface_addr().data();
        params.iface_addr_len = side.iface_addr().size();
        EXPECT_EQ(Status::unsupported, side.iface().ep_create(params).status())
            << "valid address, wrong model";
        auto ep = side.iface().ep_create(EpParams{});
        ASSERT_TRUE(ep.ok());
        std::vector<std::uint8_t> addr(side.attr().ep_addr_len);
        ASSERT_EQ(Status::ok, side.iface().ep_get_address(*ep, addr.data()));
        auto bad = addr;
        bad[0] ^= 0xff;
        EXPECT_EQ(Status::invalid_address,
                  side.iface().ep_connect_to_ep(*ep, side.dev_addr().data(), side.dev_addr().size(),
                                                bad.data(), bad.size()));
        EXPECT_EQ(Status::invalid_address,
                  side.iface().ep_connect_to_ep(*ep, side.dev_addr().data(), side.dev_addr().size(),
                                                addr.data(), 3));
        // Not connected yet: operations wait, they do not fail.
        EXPECT_EQ(Status::no_resource, ep_am_short(*ep, kAmId, 0, nullptr, 0));
        side.iface().ep_destroy(*ep);
    } else {
        EXPECT_EQ(Status::invalid_param, side.iface().ep_create(EpParams{}).status())
            << "rdma_cm needs an address";
    }
}

TEST_P(IbResourceTest, EndpointsBeyondTheReceiveBudgetAreRefused) {
    // Every endpoint reserves its window + 2 receive buffers: 14 hold two endpoints of 4 + 2.
    ucs::config::Overrides small = {{"IB_RX_QUEUE_LEN", "14"}, {"IB_FC_WINDOW", "4"}};
    Side a(GetParam(), small), b(GetParam(), small);
    EpParams params;
    if (!a.connect_to_ep()) {
        params.dev_addr = b.dev_addr().data();
        params.dev_addr_len = b.dev_addr().size();
        params.iface_addr = b.iface_addr().data();
        params.iface_addr_len = b.iface_addr().size();
    }
    auto first = a.iface().ep_create(params);
    auto second = a.iface().ep_create(params);
    ASSERT_TRUE(first.ok() && second.ok()) << to_string(first.status()) << " " << to_string(second.status());
    loom::test::LogCapture capture("error");
    auto third = a.iface().ep_create(params);
    EXPECT_EQ(Status::no_resource, third.status());
    EXPECT_EQ(1, capture.count("LOOM_IB_RX_QUEUE_LEN=14")) << capture.text();
    // Destroying one gives its buffers back.
    a.iface().ep_destroy(*first);
    auto again = a.iface().ep_create(params);
    EXPECT_TRUE(again.ok()) << to_string(again.status());
    a.iface().ep_destroy(*second);
    if (again.ok()) a.iface().ep_destroy(*again);
    for (int i = 0; i < 100; ++i) {
        a.worker().progress();
        b.worker().progress();
    }
}

INSTANTIATE_TEST_SUITE_P(Rc, IbResourceTest, testing::ValuesIn(rc_resources()), resource_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(IbResourceTest);

// ---------------------------------------------------------------------------------------------
// Two devices: traffic across the wire, flow control, pending, flush, failures.
// ---------------------------------------------------------------------------------------------

/** Memory that can be given back and asked for again: mmap/munmap, malloc/free, ... */
struct Reusable {
    std::function<void*()> allocate;  ///< nullptr on failure
    std::function<void(void*)> release;
};

class IbPairTest : public testing::TestWithParam<Pair> {
protected:
    void open(const ucs::config::Overrides& overrides = {}) {
        sender_ = std::make_unique<Side>(GetParam().a, overrides);
        receiver_ = std::make_unique<Side>(GetParam().b, overrides);
        ASSERT_EQ(Status::ok, receiver_->iface().set_am_handler(kAmId, Received::handler, &received_, 0));
        ASSERT_EQ(Status::ok, sender_->iface().set_am_handler(kAmId, Received::handler, &back_received_, 0));
    }

    void TearDown() override {
        sender_.reset();
        receiver_.reset();
    }

    unsigned progress() {
        unsigned n = sender_ ? sender_->worker().progress() : 0;
        return n + (receiver_ ? receiver_->worker().progress() : 0);
    }

    template <typename Pred>
    bool wait_for(Pred done, std::chrono::seconds timeout = std::chrono::seconds(30)) {
        auto deadline = std::chrono::steady_clock::now() + timeout;
        while (!done()) {
            if (std::chrono::steady_clock::now() > deadline) return false;
            progress();
        }
        return true;
    }

    /** Retries @p op while it says no_resource; returns its final status (a bcopy length counts as ok). */
    template <typename Op>
    Status retry(Op op) {
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        for (;;) {
            auto result = op();
            if constexpr (std::is_same_v<decltype(result), Status>) {
                if (result != Status::no_resource || std::chrono::steady_clock::now() > deadline) {
                    return result;
                }
            } else {
                if (result != static_cast<ssize_t>(Status::no_resource) ||
                    std::chrono::steady_clock::now() > deadline) {
                    return result >= 0 ? Status::ok : static_cast<Status>(result);
                }
            }
            progress();
        }
    }

    /** Finishes an operation that returned @p status on @p comp. */
    void finish(Status status, CountingCompletion& comp) {
        ASSERT_TRUE(status == Status::ok || status == Status::in_progress) << to_string(status);
        if (status == Status::in_progress) {
            ASSERT_TRUE(wait_for([&] { return comp.fired == 1; })) << "completion never fired";
            EXPECT_EQ(Status::ok, comp.status);
        }
    }

    void flush(Ep* ep) {
        CountingCompletion comp;
        Status status;
        while ((status = ep_flush(ep, kFlushLocal, &comp)) == Status::no_resource) progress();
        finish(status, comp);
    }

    /**
     * On iWARP, waits until the sender's acceptor has answered its probe (see
     * RcIface::probe_acceptors): until then a probe's completion, or the timer of the next
     * one, can wake the sender, and a test that sleeps it "with nothing to wake for" must
     * not race them.
     */
    void settle_probe() {
        Iface& iface = sender_->iface();
        ASSERT_TRUE(wait_for([&] { return unconfirmed_initiators(iface) == 0; }))
            << "the acceptor never answered";
    }

    /**
     * RcIface::unconfirmed_count of @p iface, an rc iface. Not checked by UBSan's vptr
     * check, which needs RcIface's type information: it lives in the module, which this
     * binary loads but does not link.
     */
    __attribute__((no_sanitize("vptr"))) static std::size_t unconfirmed_initiators(Iface& iface) {
        return static_cast<ib::RcIface&>(iface).unconfirmed_count();
    }

    /** EpParams with the receiver's device and iface addresses (they stay valid while it lives). */
    EpParams to_receiver() const {
        EpParams params;
        params.dev_addr = receiver_->dev_addr().data();
        params.dev_addr_len = receiver_->dev_addr().size();
        params.iface_addr = receiver_->iface_addr().data();
        params.iface_addr_len = receiver_->iface_addr().size();
        return params;
    }

    /** Sends until the endpoint reports no_resource; returns how many went out. */
    int fill_credits(Ep* ep, int limit) {
        int sent = 0;
        for (; sent < limit; ++sent) {
            Status s = ep_am_short(ep, kAmId, static_cast<std::uint64_t>(sent), nullptr, 0);
            if (s == Status::no_resource) break;
            EXPECT_EQ(Status::ok, s);
        }
        return sent;
    }

    /** Progresses only the receiver until nothing has arrived for a while. */
    void drain_receiver() {
        std::size_t last = received_.messages.size();
        for (int quiet = 0; quiet < 20000;) {
            receiver_->worker().progress();
            quiet = received_.messages.size() == last ? quiet + 1 : 0;
            last = received_.messages.size();
        }
    }

    /** Connects the sender to the receiver and waits until an active message gets through. */
    Ep* connect(const EpParams& params = {}, Ep** back = nullptr, const EpParams& back_params = {}) {
        Ep* ep = sender_->connect(*receiver_, params, back, back_params);
        std::size_t before = received_.messages.size();
        EXPECT_EQ(Status::ok, retry([&] { return ep_am_short(ep, kAmId, 0xc0ffee, nullptr, 0); }));
        EXPECT_TRUE(wait_for([&] { return received_.messages.size() == before + 1; }))
            << "connection never worked";
        received_.messages.clear();
        return ep;
    }

    /**
     * put zcopy of [@p buf, @p buf + @p length), registered as @p memh, to @p remote at
     * @p offset, in pieces the iface accepts, then a flush: the peer has the bytes now.
     */
    void put_zcopy_all(Ep* ep, const void* buf, std::size_t length, MemH memh, RemoteBuffer& remote,
                       std::size_t offset = 0) {
        const std::size_t step = std::min<std::size_t>(sender_->attr().put.max_zcopy, 256 * 1024);
        for (std::size_t off = 0; off < length; off += step) {
            Iov iov{static_cast<const std::uint8_t*>(buf) + off, std::min(step, length - off), memh};
            CountingCompletion comp;
            Status status;
            while ((status = ep_put_zcopy(ep, &iov, 1, remote.addr(offset + off), remote.rkey.rkey, &comp)) ==
                   Status::no_resource) {
                progress();
            }
            ASSERT_NO_FATAL_FAILURE(finish(status, comp));
        }
        flush(ep);
    }

    /**
     * The classic failure of a registration cache, over the wire. @p length bytes from
     * @p memory.allocate are filled with 'A', registered, put into @p remote (a window at
     * their start and one at their end, each half of @p remote at most), deregistered and
     * given back; then allocated again until the same address comes back, with new pages,
     * filled with 'B', registered and put again. The old pages stay pinned as long as a
     * registration of them exists, so a registration the cache serves without having seen
     * the memory go sends 'A's. With @p notify the application reports every release
     * (memory_event_notify()). Returns the bytes of @p remote the puts wrote, as they are
     * after the second one; nullopt after a failure.
     */
    std::optional<std::vector<std::uint8_t>> send_after_reuse(Ep* ep, RemoteBuffer& remote,
                                                              std::size_t length, const Reusable& memory,
                                                              bool notify = false) {
        const std::size_t window = std::min(length, remote.data.size() / 2);
        auto send = [&](std::uint8_t* p, std::uint8_t fill) {
            std::memset(p, fill, length);  // written before registering: the registration pins these pages
            auto reg = sender_->md().mem_reg(p, length, kAccessLocalRead);
            if (!reg) {
                ADD_FAILURE() << "mem_reg failed: " << to_string(reg.status());
                return false;
            }
            put_zcopy_all(ep, p, window, *reg, remote, 0);
            if (HasFatalFailure()) return false;
            put_zcopy_all(ep, p + length - window, window, *reg, remote, window);
            if (HasFatalFailure()) return false;
            const Status dereg = sender_->md().mem_dereg(*reg);
            EXPECT_EQ(Status::ok, dereg);
            return dereg == Status::ok;
        };
        auto give_back = [&](void* p) {
            memory.release(p);
            if (notify) ucs::memory_event_notify(p, length);
        };
        auto written = [&] {
            return std::vector<std::uint8_t>(remote.data.begin(), remote.data.begin() + 2 * window);
        };

        auto* p = static_cast<std::uint8_t*>(memory.allocate());
        if (p == nullptr) {
            ADD_FAILURE() << "cannot allocate " << length << " bytes";
            return std::nullopt;
        }
        if (!send(p, 'A')) return std::nullopt;
        const std::vector<std::uint8_t> first = written();
        if (static_cast<std::size_t>(std::count(first.begin(), first.end(), 'A')) != first.size()) {
            ADD_FAILURE() << "the first put did not arrive";
            return std::nullopt;
        }
        const auto address = reinterpret_cast<std::uintptr_t>(p);
        give_back(p);
        // The allocator picks the address: keep what it returns until it is the old one.
        std::vector<void*> others;
        void* q = memory.allocate();
        while (q != nullptr && reinterpret_cast<std::uintptr_t>(q) != address && others.size() < 8) {
            others.push_back(q);
            q = memory.allocate();
        }
        for (void* other : others) give_back(other);
        if (reinterpret_cast<std::uintptr_t>(q) != address) {
            ADD_FAILURE() << "the address " << reinterpret_cast<void*>(address) << " never came back";
            if (q != nullptr) give_back(q);
            return std::nullopt;
        }
        const bool sent = send(static_cast<std::uint8_t*>(q), 'B');
        give_back(q);
        if (!sent) return std::nullopt;
        return written();
    }

    std::unique_ptr<Side> sender_, receiver_;
    Received received_, back_received_;
};

TEST_P(IbPairTest, ActiveMessagesBothWays) {
    open();
    Ep* back = nullptr;
    Ep* ep = connect({}, &back);
    // Every flavour, sizes across the inline limit and the MTU.
    std::vector<std::size_t> sizes = {0, 1, 60, sender_->attr().am.max_short, 1000, 4000, 8192};
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        auto payload = pattern(sizes[i], static_cast<unsigned>(i));
        if (sizes[i] <= sender_->attr().am.max_short) {
            ASSERT_EQ(Status::ok, retry([&] {
                          return ep_am_short(ep, kAmId, i, payload.data(),
                                             static_cast<unsigned>(payload.size()));
                      }));
        } else {
            ASSERT_EQ(Status::ok, retry([&] { return ep_am_bcopy(ep, kAmId, pack_vector, &payload, 0); }));
        }
    }
    ASSERT_TRUE(wait_for([&] { return received_.messages.size() == sizes.size(); }));
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        auto expected = pattern(sizes[i], static_cast<unsigned>(i));
        const auto& got = received_.messages[i];
        if (sizes[i] <= sender_->attr().am.max_short) {
            ASSERT_EQ(8 + sizes[i], got.size());
            EXPECT_TRUE(std::equal(expected.begin(), expected.end(), got.begin() + 8)) << "message " << i;
        } else {
            EXPECT_EQ(expected, got) << "message " << i;
        }
    }
    // zcopy with several iovs from registered memory.
    LocalBuffer src(*sender_, 6000, kAccessLocalRead);
    auto zdata = pattern(6000, 77);
    std::copy(zdata.begin(), zdata.end(), src.data.begin());  // the registered storage, not a new vector
    std::size_t iovcnt = std::min<std::size_t>(sender_->attr().am.max_iov, 3);
    std::vector<Iov> iov;
    std::size_t piece = 6000 / iovcnt;
    for (std::size_t i = 0; i < iovcnt; ++i) {
        iov.push_back({src.data.data() + i * piece, i + 1 == iovcnt ? 6000 - i * piece : piece, src.memh});
    }
    std::uint64_t header = 0x123456789abcdef0ull;
    CountingCompletion comp;
    Status status;
    while ((status = ep_am_zcopy(ep, kAmId, &header, 8, iov.data(), iov.size(), 0, &comp)) ==
           Status::no_resource) {
        progress();
    }
    finish(status, comp);
    ASSERT_TRUE(wait_for([&] { return received_.messages.size() == sizes.size() + 1; }));
    const auto& z = received_.messages.back();
    ASSERT_EQ(8 + 6000u, z.size());
    EXPECT_EQ(0, std::memcmp(z.data(), &header, 8));
    EXPECT_EQ(0, std::memcmp(z.data() + 8, src.data.data(), 6000));
    // The other way: on ep-to-ep transports the receiver has its own endpoint; on rdma_cm it
    // connects to the sender's iface.
    if (back == nullptr) back = receiver_->connect(*sender_);
    auto reply = pattern(3000, 5);
    ASSERT_EQ(Status::ok, retry([&] { return ep_am_bcopy(back, kAmId, pack_vector, &reply, 0); }));
    ASSERT_TRUE(wait_for([&] { return back_received_.messages.size() == 1; }));
    EXPECT_EQ(reply, back_received_.messages[0]);
}

TEST_P(IbPairTest, BothSidesFlushAtOnceAfterTheQueueWrapped) {
    // Both peers flush after a ping-pong, as a benchmark's end does. The short send queue
    // has wrapped many times with inline sends, so a flush request (a zero-length read on
    // iWARP) must not rely on anything a previous request left in its queue slot.
    open({{"IB_TX_QUEUE_LEN", "16"}, {"IB_TX_SIGNAL_INTERVAL", "8"}});
    Ep* back = nullptr;
    Ep* ep = connect({}, &back);
    if (back == nullptr) back = receiver_->connect(*sender_);
    constexpr std::uint64_t kRounds = 60;
    for (std::uint64_t i = 0; i < kRounds; ++i) {
        ASSERT_EQ(Status::ok, retry([&] { return ep_am_short(ep, kAmId, i, nullptr, 0); }));
        ASSERT_TRUE(wait_for([&] { return received_.messages.size() == i + 1; }));
        ASSERT_EQ(Status::ok, retry([&] { return ep_am_short(back, kAmId, i, nullptr, 0); }));
        ASSERT_TRUE(wait_for([&] { return back_received_.messages.size() == i + 1; }));
    }
    CountingCompletion a, b;
    Status sa = ep_flush(ep, kFlushLocal, &a);
    Status sb = ep_flush(back, kFlushLocal, &b);
    ASSERT_TRUE(sa == Status::ok || sa == Status::in_progress) << to_string(sa);
    ASSERT_TRUE(sb == Status::ok || sb == Status::in_progress) << to_string(sb);
    ASSERT_TRUE(
        wait_for([&] { return (sa == Status::ok || a.fired == 1) && (sb == Status::ok || b.fired == 1); }));
    EXPECT_EQ(Status::ok, a.status);
    EXPECT_EQ(Status::ok, b.status);
    // Empty reads name a valid sink too.
    RemoteBuffer remote(*receiver_, *sender_, 64);
    CountingCompletion empty_get;
    Status status;
    while ((status = ep_get_bcopy(
                ep, [](void*, const void*, std::size_t) {}, nullptr, 0, remote.addr(0), remote.rkey.rkey,
                &empty_get)) == Status::no_resource) {
        progress();
    }
    finish(status, empty_get);
    for (int i = 0; i < 500; ++i) progress();
    ASSERT_EQ(Status::ok, retry([&] { return ep_am_short(ep, kAmId, 99, nullptr, 0); }));
    ASSERT_TRUE(wait_for([&] { return received_.messages.size() == kRounds + 1; }));
}

TEST_P(IbPairTest, FlowControlNeverOverrunsTheReceiver) {
    // A small window so the test exercises many credit round trips.
    open({{"IB_FC_WINDOW", "8"}});
    Ep* ep = connect();
    std::string port = GetParam().b.tl.dev_name.substr(GetParam().b.tl.dev_name.rfind(':') + 1);
    auto counter = [&](const Resource& r, const char* name) {
        std::string value =
            read_line("/sys/class/infiniband/" + r.md_name + "/ports/" + port + "/hw_counters/" + name);
        return value.empty() ? -1L : std::stol(value);
    };
    long rnr_before = counter(GetParam().a, "rcvd_rnr_err") + counter(GetParam().b, "send_rnr_err");
    // The receiver does not progress: after one window the sender must stop by itself.
    int sent = fill_credits(ep, 1000);
    EXPECT_EQ(7, sent) << "credits = the receiver's window, less the message connect() sent";
    for (int i = 0; i < 1000; ++i) sender_->worker().progress();
    EXPECT_EQ(Status::no_resource, ep_am_short(ep, kAmId, 0, nullptr, 0))
        << "no credits came back by themselves";
    // Now a long stream in both directions' worth of credit returns.
    constexpr std::uint64_t kCount = 600;
    for (std::uint64_t seq = static_cast<std::uint64_t>(sent); seq < kCount; ++seq) {
        ASSERT_EQ(Status::ok, retry([&] { return ep_am_short(ep, kAmId, seq, nullptr, 0); }));
    }
    ASSERT_TRUE(wait_for([&] { return received_.messages.size() == kCount; }));
    for (std::uint64_t seq = 0; seq < kCount; ++seq) {
        std::uint64_t got;
        std::memcpy(&got, received_.messages[seq].data(), 8);
        ASSERT_EQ(seq, got) << "order";
    }
    long rnr_after = counter(GetParam().a, "rcvd_rnr_err") + counter(GetParam().b, "send_rnr_err");
    if (rnr_before >= 0 && rnr_after >= 0) {
        EXPECT_EQ(rnr_before, rnr_after) << "receiver-not-ready NAKs were exchanged";
    }
}

TEST_P(IbPairTest, PerQpReceiveQueuesWork) {
    open({{"IB_SRQ", "no"}, {"IB_FC_WINDOW", "4"}});
    Ep* back = nullptr;
    Ep* ep = connect({}, &back);
    EXPECT_EQ(3, fill_credits(ep, 100)) << "the window less the message connect() sent";
    constexpr std::uint64_t kCount = 200;
    for (std::uint64_t seq = 3; seq < kCount; ++seq) {
        auto data = pattern(seq * 37 % 8000, static_cast<unsigned>(seq));
        ASSERT_EQ(Status::ok, retry([&] { return ep_am_bcopy(ep, kAmId, pack_vector, &data, 0); }));
    }
    ASSERT_TRUE(wait_for([&] { return received_.messages.size() == kCount; }));
    for (std::uint64_t seq = 3; seq < kCount; ++seq) {
        EXPECT_EQ(pattern(seq * 37 % 8000, static_cast<unsigned>(seq)), received_.messages[seq]);
    }
    if (back != nullptr) {
        std::uint64_t v = 5;
        ASSERT_EQ(Status::ok, retry([&] { return ep_am_short(back, kAmId, v, nullptr, 0); }));
        ASSERT_TRUE(wait_for([&] { return back_received_.messages.size() == 1; }));
    }
}

TEST_P(IbPairTest, BounceBuffersAreNotRewrittenWhileTheWireStillReadsThem) {
    // A burst of sends of a page or more, a completion asked for every 16th: each
    // completion gives bounce buffers back and the next sends rewrite them at once.
    // soft-iWARP sends unsignaled requests of a page or more from their pages, which wait
    // in its TCP socket (or on a slow link) after the completion of a later request: unless
    // the transport signals those, messages arrive with later messages' bytes. The RDMA
    // suite runs this test again with a delay on the devices' links (netem), where that
    // happens to a few percent of the messages (run_rdma_tests.sh).
    open({{"IB_TX_SIGNAL_INTERVAL", "16"}});
    Ep* ep = connect();
    constexpr std::uint64_t kCount = 1000;
    const std::size_t size = std::min<std::size_t>(sender_->attr().am.max_bcopy, 8192);
    ASSERT_GE(size, 4096u);
    for (std::uint64_t seq = 0; seq < kCount; ++seq) {
        auto data = pattern(size, static_cast<unsigned>(seq));
        ASSERT_EQ(Status::ok, retry([&] { return ep_am_bcopy(ep, kAmId, pack_vector, &data, 0); }));
    }
    ASSERT_TRUE(wait_for([&] { return received_.messages.size() == kCount; }));
    int changed = 0;
    for (std::uint64_t seq = 0; seq < kCount; ++seq) {
        if (pattern(size, static_cast<unsigned>(seq)) != received_.messages[seq]) ++changed;
    }
    EXPECT_EQ(0, changed) << "messages whose bytes changed on the way, of " << kCount;
}

TEST_P(IbPairTest, LargeRdmaAcrossTheWire) {
    open();
    Ep* ep = connect();
    constexpr std::size_t kSize = 2 * 1024 * 1024;
    RemoteBuffer remote(*receiver_, *sender_, kSize);
    LocalBuffer src(*sender_, kSize, kAccessLocalRead);
    auto bytes = pattern(kSize, 3);
    std::copy(bytes.begin(), bytes.end(), src.data.begin());
    // put zcopy in pieces of at most max_zcopy, then read it back with get zcopy.
    std::size_t step = std::min<std::size_t>(sender_->attr().put.max_zcopy, 512 * 1024);
    for (std::size_t off = 0; off < kSize; off += step) {
        Iov iov{src.data.data() + off, std::min(step, kSize - off), src.memh};
        CountingCompletion comp;
        Status status;
        while ((status = ep_put_zcopy(ep, &iov, 1, remote.addr(off), remote.rkey.rkey, &comp)) ==
               Status::no_resource) {
            progress();
        }
        finish(status, comp);
    }
    flush(ep);
    EXPECT_TRUE(remote.data == src.data) << "put zcopy data differs";
    LocalBuffer dst(*sender_, kSize, kAccessLocalWrite);
    for (std::size_t off = 0; off < kSize; off += step) {
        Iov iov{dst.data.data() + off, std::min(step, kSize - off), dst.memh};
        CountingCompletion comp;
        Status status;
        while ((status = ep_get_zcopy(ep, &iov, 1, remote.addr(off), remote.rkey.rkey, &comp)) ==
               Status::no_resource) {
            progress();
        }
        finish(status, comp);
    }
    EXPECT_TRUE(dst.data == src.data) << "get zcopy data differs";
    // bcopy flavours and inline puts at odd offsets.
    auto small = pattern(std::min<std::size_t>(100, sender_->attr().put.max_short), 9);
    ASSERT_EQ(Status::ok, retry([&] {
                  return ep_put_short(ep, small.data(), static_cast<unsigned>(small.size()), remote.addr(3),
                                      remote.rkey.rkey);
              }));
    auto mid = pattern(7000, 10);
    ASSERT_EQ(Status::ok, retry([&] {
                  return ep_put_bcopy(ep, pack_vector, &mid, remote.addr(5000), remote.rkey.rkey);
              }));
    flush(ep);
    EXPECT_EQ(0, std::memcmp(remote.data.data() + 3, small.data(), small.size()));
    EXPECT_EQ(0, std::memcmp(remote.data.data() + 5000, mid.data(), mid.size()));
    std::vector<std::uint8_t> got;
    CountingCompletion comp;
    auto unpack = [](void* arg, const void* data, std::size_t length) {
        auto* out = static_cast<std::vector<std::uint8_t>*>(arg);
        out->insert(out->end(), static_cast<const std::uint8_t*>(data),
                    static_cast<const std::uint8_t*>(data) + length);
    };
    Status status;
    while ((status = ep_get_bcopy(ep, unpack, &got, mid.size(), remote.addr(5000), remote.rkey.rkey,
                                  &comp)) == Status::no_resource) {
        progress();
    }
    finish(status, comp);
    EXPECT_EQ(mid, got);
}

TEST_P(IbPairTest, AtomicsAcrossTheWire) {
    open();
    if (!(sender_->attr().cap_flags & kCapAtomic64))
        GTEST_SKIP()
            << "no atomics on this iface (LOOM_IB_ATOMICS=device on a device without NIC atomics: siw)";
    Ep* ep = connect();
    RemoteBuffer remote(*receiver_, *sender_, 64);
    auto* word = reinterpret_cast<std::uint64_t*>(remote.data.data() + 8);
    *word = 1000;
    // Many posted adds, then a fetch: the fence makes the fetch see all of them.
    for (int i = 0; i < 50; ++i) {
        ASSERT_EQ(Status::ok, retry([&] {
                      return ep_atomic64_post(ep, AtomicOp::add, 2, remote.addr(8), remote.rkey.rkey);
                  }));
    }
    ASSERT_EQ(Status::ok, ep_fence(ep, 0));
    std::uint64_t result = 0;
    CountingCompletion comp;
    Status status;
    while ((status = ep_atomic64_fetch(ep, AtomicOp::add, 0, &result, remote.addr(8), remote.rkey.rkey,
                                       &comp)) == Status::no_resource) {
        progress();
    }
    finish(status, comp);
    EXPECT_EQ(1100u, result);
    CountingCompletion swap;
    while ((status = ep_atomic64_cswap(ep, 1100, 7, remote.addr(8), remote.rkey.rkey, &result, &swap)) ==
           Status::no_resource) {
        progress();
    }
    finish(status, swap);
    EXPECT_EQ(1100u, result);
    EXPECT_EQ(7u, *word);
}

/** Runs @p op until it stops saying no_resource, progressing both sides; then waits for @p comp. */
#define IB_CPU_ATOMIC(op, comp)                                     \
    do {                                                            \
        Status status_;                                             \
        while ((status_ = (op)) == Status::no_resource) progress(); \
        finish(status_, comp);                                      \
    } while (0)

TEST_P(IbPairTest, CpuAtomicsEveryOperationBothSizes) {
    open({{"IB_ATOMICS", "cpu"}});
    Ep* ep = connect();
    RemoteBuffer remote(*receiver_, *sender_, 64);
    auto* w64 = reinterpret_cast<std::uint64_t*>(remote.data.data() + 8);
    auto* w32 = reinterpret_cast<std::uint32_t*>(remote.data.data() + 20);
    const std::uint64_t a = 0xf0f0f0f00ff00ff0ull, b = 0x0123456789abcdefull;
    struct Case {
        AtomicOp op;
        std::uint64_t expect;
    };
    for (const Case& c : {Case{AtomicOp::add, a + b}, Case{AtomicOp::and_, a & b}, Case{AtomicOp::or_, a | b},
                          Case{AtomicOp::xor_, a ^ b}, Case{AtomicOp::swap, b}}) {
        *w64 = a;
        *w32 = static_cast<std::uint32_t>(a);
        std::uint64_t old64 = 0;
        std::uint32_t old32 = 0;
        CountingCompletion c64, c32;
        IB_CPU_ATOMIC(ep_atomic64_fetch(ep, c.op, b, &old64, remote.addr(8), remote.rkey.rkey, &c64), c64);
        IB_CPU_ATOMIC(ep_atomic32_fetch(ep, c.op, static_cast<std::uint32_t>(b), &old32, remote.addr(20),
                                        remote.rkey.rkey, &c32),
                      c32);
        EXPECT_EQ(a, old64) << static_cast<int>(c.op);
        EXPECT_EQ(static_cast<std::uint32_t>(a), old32) << static_cast<int>(c.op);
        EXPECT_EQ(c.expect, *w64) << static_cast<int>(c.op);
        EXPECT_EQ(static_cast<std::uint32_t>(c.expect), *w32) << static_cast<int>(c.op);
        if (c.op == AtomicOp::swap) continue;
        // Posted: the flush completes only once the target has applied it.
        *w64 = a;
        *w32 = static_cast<std::uint32_t>(a);
        ASSERT_EQ(Status::ok,
                  retry([&] { return ep_atomic64_post(ep, c.op, b, remote.addr(8), remote.rkey.rkey); }));
        ASSERT_EQ(Status::ok, retry([&] {
                      return ep_atomic32_post(ep, c.op, static_cast<std::uint32_t>(b), remote.addr(20),
                                              remote.rkey.rkey);
                  }));
        CountingCompletion flushed;
        IB_CPU_ATOMIC(ep_flush(ep, 0, &flushed), flushed);
        EXPECT_EQ(c.expect, *w64) << "posted " << static_cast<int>(c.op);
        EXPECT_EQ(static_cast<std::uint32_t>(c.expect), *w32) << "posted " << static_cast<int>(c.op);
    }
    for (bool equal : {true, false}) {
        *w64 = a;
        *w32 = static_cast<std::uint32_t>(a);
        std::uint64_t old64 = 0;
        std::uint32_t old32 = 0;
        CountingCompletion c64, c32;
        IB_CPU_ATOMIC(
            ep_atomic64_cswap(ep, equal ? a : a + 1, b, remote.addr(8), remote.rkey.rkey, &old64, &c64), c64);
        IB_CPU_ATOMIC(
            ep_atomic32_cswap(ep, static_cast<std::uint32_t>(equal ? a : a + 1),
                              static_cast<std::uint32_t>(b), remote.addr(20), remote.rkey.rkey, &old32, &c32),
            c32);
        EXPECT_EQ(a, old64);
        EXPECT_EQ(static_cast<std::uint32_t>(a), old32);
        EXPECT_EQ(equal ? b : a, *w64);
        EXPECT_EQ(static_cast<std::uint32_t>(equal ? b : a), *w32);
    }
    EXPECT_EQ(Status::unsupported, ep_atomic64_post(ep, AtomicOp::swap, 1, remote.addr(8), remote.rkey.rkey))
        << "a posted swap returns nothing: only the fetching form exists";
}

TEST_P(IbPairTest, CpuAtomicsAreAtomicWithTheCpusOwn) {
    // The owner's threads add to the same word with CPU atomics while the peer's adds arrive:
    // the target's progress applies those with the same instructions, so none is lost.
    open({{"IB_ATOMICS", "cpu"}});
    Ep* ep = connect();
    RemoteBuffer remote(*receiver_, *sender_, 64);
    auto* word = reinterpret_cast<std::uint64_t*>(remote.data.data());
    *word = 0;
    constexpr int kEach = 5000;
    std::atomic<bool> go{false};
    std::thread local([&] {
        while (!go.load()) {
        }
        for (int i = 0; i < kEach; ++i) __atomic_fetch_add(word, 1, __ATOMIC_SEQ_CST);
    });
    go = true;
    for (int i = 0; i < kEach; ++i) {
        ASSERT_EQ(Status::ok, retry([&] {
                      return ep_atomic64_post(ep, AtomicOp::add, 1, remote.addr(0), remote.rkey.rkey);
                  }));
    }
    CountingCompletion flushed;
    IB_CPU_ATOMIC(ep_flush(ep, 0, &flushed), flushed);
    local.join();
    EXPECT_EQ(2u * kEach, __atomic_load_n(word, __ATOMIC_SEQ_CST));
}

TEST_P(IbPairTest, CpuAtomicsFenceHoldsLaterRequests) {
    open({{"IB_ATOMICS", "cpu"}});
    Ep* ep = connect();
    RemoteBuffer remote(*receiver_, *sender_, 64);
    auto* word = reinterpret_cast<std::uint64_t*>(remote.data.data());
    for (std::uint64_t round = 0; round < 20; ++round) {
        *word = 0;
        for (int i = 0; i < 4; ++i) {
            ASSERT_EQ(Status::ok, retry([&] {
                          return ep_atomic64_post(ep, AtomicOp::add, 1, remote.addr(0), remote.rkey.rkey);
                      }));
        }
        ASSERT_EQ(Status::ok, ep_fence(ep, 0));
        // The put may not be posted before the adds are applied: it waits (no_resource) until then.
        const std::uint64_t value = 1000 + round;
        ASSERT_EQ(Status::ok, retry([&] {
                      return ep_put_short(ep, &value, sizeof(value), remote.addr(0), remote.rkey.rkey);
                  }));
        CountingCompletion flushed;
        IB_CPU_ATOMIC(ep_flush(ep, 0, &flushed), flushed);
        ASSERT_EQ(value, *word) << "round " << round
                                << ": an add posted before the fence landed after the put";
    }
}

TEST_P(IbPairTest, CpuAtomicsRefuseForgedKeysAndBounds) {
    open({{"IB_ATOMICS", "cpu"}});
    Ep* ep = connect();
    RemoteBuffer remote(*receiver_, *sender_, 64);
    std::uint64_t old = 0;
    loom::test::LogCapture capture("warn");
    {
        CountingCompletion c;
        Status s;
        while ((s = ep_atomic64_fetch(ep, AtomicOp::add, 1, &old, remote.addr(8), remote.rkey.rkey ^ 0x5a5a00,
                                      &c)) == Status::no_resource) {
            progress();
        }
        ASSERT_EQ(Status::in_progress, s);
        ASSERT_TRUE(wait_for([&] { return c.fired == 1; }));
        EXPECT_EQ(Status::access_denied, c.status) << "a key no registration has";
    }
    {
        CountingCompletion c;
        Status s;
        // Registrations cover whole pages (as the NIC sees them): far past the buffer is outside.
        while ((s = ep_atomic64_fetch(ep, AtomicOp::add, 1, &old, remote.addr(0) + (64ull << 20),
                                      remote.rkey.rkey, &c)) == Status::no_resource) {
            progress();
        }
        ASSERT_EQ(Status::in_progress, s);
        ASSERT_TRUE(wait_for([&] { return c.fired == 1; }));
        EXPECT_EQ(Status::access_denied, c.status) << "a word past the registration";
    }
    EXPECT_EQ(1, capture.count("no registration has this key")) << capture.text();
    EXPECT_EQ(1, capture.count("the word is outside the registration")) << capture.text();
    EXPECT_EQ(Status::invalid_param, ep_atomic64_post(ep, AtomicOp::add, 1, remote.addr(4), remote.rkey.rkey))
        << "misaligned";
    // The endpoint still works.
    CountingCompletion c;
    IB_CPU_ATOMIC(ep_atomic64_fetch(ep, AtomicOp::add, 1, &old, remote.addr(8), remote.rkey.rkey, &c), c);
    EXPECT_EQ(0u, old);
}

#undef IB_CPU_ATOMIC

TEST_P(IbPairTest, PendingRequestsAreServedRoundRobin) {
    open({{"IB_FC_WINDOW", "4"}});
    // Two endpoints to the same receiver, both out of credits.
    Ep* eps[2] = {connect(), connect()};
    for (Ep* ep : eps) ASSERT_EQ(3, fill_credits(ep, 100)) << "the window less the message connect() sent";
    struct Req : PendingReq {
        Ep* ep;
        int index;
        std::vector<int>* order;
    };
    std::vector<int> order;
    std::vector<Req> reqs(6);
    for (int i = 0; i < 6; ++i) {
        Req& r = reqs[static_cast<std::size_t>(i)];
        r.ep = eps[i % 2];
        r.index = i % 2;
        r.order = &order;
        r.func = [](PendingReq* self) {
            auto* req = static_cast<Req*>(self);
            Status s = ep_am_short(req->ep, kAmId, 7, nullptr, 0);
            if (s == Status::ok) req->order->push_back(req->index);
            return s;
        };
        ASSERT_EQ(Status::ok, ep_pending_add(r.ep, &r, 0)) << "no credits: the request must be queued";
    }
    // The receiver consumes everything and returns credits to both; then the sender sees both at once.
    drain_receiver();
    ASSERT_TRUE(wait_for([&] { return order.size() == 6; }));
    for (std::size_t i = 1; i < order.size(); ++i) {
        EXPECT_NE(order[i - 1], order[i]) << "dispatch " << i << " served the same endpoint twice in a row";
    }
    // Resources available now: pending_add declines.
    PendingReq idle{[](PendingReq*) { return Status::ok; }, {}};
    EXPECT_EQ(Status::busy, ep_pending_add(eps[0], &idle, 0));
}

TEST_P(IbPairTest, HeldSendsWaitForTheRelease) {
    open();
    if (!sender_->connect_to_ep()) {
        GTEST_SKIP() << "rdma_cm connects this device (iWARP or LOOM_IB_CM=rdmacm): holding sends is for "
                        "endpoint-to-endpoint connections";
    }
    // The protocol layer's wire-up: the first side connects holding its sends, because the
    // peer's QP may still be in INIT; the peer connects normally and can send at once.
    Ep* held = sender_->unconnected_ep();
    Ep* peer = receiver_->unconnected_ep();
    auto held_addr = sender_->ep_address(held);
    auto peer_addr = receiver_->ep_address(peer);
    ASSERT_EQ(Status::ok, sender_->iface().ep_connect_to_ep(held, receiver_->dev_addr().data(),
                                                            receiver_->dev_addr().size(), peer_addr.data(),
                                                            peer_addr.size(), kConnectHoldSends));
    EXPECT_EQ(Status::no_resource, ep_am_short(held, kAmId, 1, nullptr, 0)) << "a held endpoint must not send";
    struct Req : PendingReq {
        Ep* ep;
        bool sent = false;
    } req;
    req.ep = held;
    req.func = [](PendingReq* self) {
        auto* r = static_cast<Req*>(self);
        Status s = ep_am_short(r->ep, kAmId, 2, nullptr, 0);
        r->sent = s == Status::ok;
        return s;
    };
    ASSERT_EQ(Status::ok, ep_pending_add(held, &req, 0)) << "a held endpoint queues sends";
    ASSERT_EQ(Status::ok, receiver_->iface().ep_connect_to_ep(peer, sender_->dev_addr().data(),
                                                              sender_->dev_addr().size(), held_addr.data(),
                                                              held_addr.size()));
    // The held side receives at once.
    ASSERT_EQ(Status::ok, retry([&] { return ep_am_short(peer, kAmId, 3, nullptr, 0); }));
    ASSERT_TRUE(wait_for([&] { return back_received_.messages.size() == 1; }));
    for (int i = 0; i < 1000; ++i) progress();
    EXPECT_FALSE(req.sent) << "the queued send went out before the release";
    EXPECT_TRUE(received_.messages.empty());
    // Released: the queued send goes, then direct sends work.
    ASSERT_EQ(Status::ok, sender_->iface().ep_release_sends(held));
    ASSERT_TRUE(wait_for([&] { return received_.messages.size() == 1; }));
    EXPECT_TRUE(req.sent);
    ASSERT_EQ(Status::ok, retry([&] { return ep_am_short(held, kAmId, 4, nullptr, 0); }));
    ASSERT_TRUE(wait_for([&] { return received_.messages.size() == 2; }));
    EXPECT_EQ(Status::ok, sender_->iface().ep_release_sends(held)) << "releasing twice is harmless";
    {
        loom::test::LogCapture errors("error");
        EXPECT_EQ(Status::invalid_param,
                  sender_->iface().ep_connect_to_ep(held, receiver_->dev_addr().data(), receiver_->dev_addr().size(),
                                                    peer_addr.data(), peer_addr.size()));
        EXPECT_EQ(1, errors.count("already connected"));
    }
}

TEST_P(IbPairTest, FlushCoversEveryEndpointAndCancelCompletesWithCanceled) {
    open();
    Ep* a = connect();
    Ep* b = connect();
    RemoteBuffer remote(*receiver_, *sender_, 64 * 1024);
    LocalBuffer src(*sender_, 64 * 1024, kAccessLocalRead, 0x5a);
    // Unsignaled puts on both, then one iface flush.
    auto data = pattern(200, 1);
    for (int i = 0; i < 10; ++i) {
        ASSERT_EQ(Status::ok, retry([&] {
                      return ep_put_short(a, data.data(), 64, remote.addr(static_cast<std::size_t>(i) * 64),
                                          remote.rkey.rkey);
                  }));
        ASSERT_EQ(Status::ok, retry([&] {
                      return ep_put_short(b, data.data() + 64, 64,
                                          remote.addr(4096 + static_cast<std::size_t>(i) * 64),
                                          remote.rkey.rkey);
                  }));
    }
    CountingCompletion comp;
    Status status;
    while ((status = iface_flush(&sender_->iface(), kFlushLocal, &comp)) == Status::no_resource) progress();
    finish(status, comp);
    for (int i = 0; i < 10; ++i) {
        EXPECT_EQ(0, std::memcmp(remote.data.data() + i * 64, data.data(), 64));
        EXPECT_EQ(0, std::memcmp(remote.data.data() + 4096 + i * 64, data.data() + 64, 64));
    }
    // Idle: done at once. (On iWARP, rc's probe read of a new connection's acceptor,
    // posted about 1 ms after its first requests, may still be in flight: let it end.)
    for (int i = 0; i < 200000 && iface_flush(&sender_->iface(), kFlushLocal, nullptr) != Status::ok; ++i) progress();
    EXPECT_EQ(Status::ok, iface_flush(&sender_->iface(), kFlushLocal, nullptr)) << "idle: done at once";
    // Cancel: outstanding operations complete with canceled; the endpoint answers canceled after.
    CountingCompletion put;
    Iov iov{src.data.data(), src.data.size(), src.memh};
    ASSERT_EQ(Status::in_progress,
              retry([&] { return ep_put_zcopy(a, &iov, 1, remote.addr(0), remote.rkey.rkey, &put); }));
    CountingCompletion cancel;
    status = ep_flush(a, kFlushCancel, &cancel);
    ASSERT_TRUE(status == Status::in_progress || status == Status::ok) << to_string(status);
    ASSERT_TRUE(wait_for([&] { return put.fired == 1 && (status == Status::ok || cancel.fired == 1); }));
    EXPECT_TRUE(put.status == Status::canceled || put.status == Status::ok) << to_string(put.status);
    EXPECT_EQ(Status::canceled, ep_am_short(a, kAmId, 0, nullptr, 0));
    // The other endpoint is unaffected.
    ASSERT_EQ(Status::ok, retry([&] { return ep_am_short(b, kAmId, 99, nullptr, 0); }));
    ASSERT_TRUE(wait_for([&] { return !received_.messages.empty(); }));
}

TEST_P(IbPairTest, BadRemoteKeyFailsTheEndpoint) {
    open();
    ErrorLog errors;
    Ep* ep = connect(errors.params());
    RemoteBuffer remote(*receiver_, *sender_, 4096);
    LocalBuffer dst(*sender_, 4096, kAccessLocalWrite);
    loom::test::LogCapture capture("warn");
    // A read with a key the peer never gave out, and more work queued behind it.
    CountingCompletion bad, after;
    Iov iov{dst.data.data(), 1024, dst.memh};
    ASSERT_EQ(Status::in_progress,
              ep_get_zcopy(ep, &iov, 1, remote.addr(0), remote.rkey.rkey ^ 0x5a5a00, &bad));
    Iov iov2{dst.data.data() + 2048, 1024, dst.memh};
    Status second = ep_get_zcopy(ep, &iov2, 1, remote.addr(0), remote.rkey.rkey, &after);
    ASSERT_TRUE(wait_for([&] { return errors.calls == 1 && bad.fired == 1; })) << "the endpoint never failed";
    if (second == Status::in_progress) {
        ASSERT_TRUE(wait_for([&] { return after.fired == 1; }))
            << "an operation behind the error never completed";
        EXPECT_NE(Status::ok, after.status);
    }
    EXPECT_EQ(ep, errors.ep);
    EXPECT_TRUE(is_error(bad.status));
    if (!is_iwarp(GetParam().a)) {
        EXPECT_EQ(Status::access_denied, errors.status) << to_string(errors.status);
        EXPECT_EQ(Status::access_denied, bad.status);
    } else {
        // iWARP ends the connection (TERMINATE) on a remote access error.
        EXPECT_TRUE(errors.status == Status::access_denied || errors.status == Status::connection_reset)
            << to_string(errors.status);
    }
    for (int i = 0; i < 200; ++i) progress();
    EXPECT_EQ(1, errors.calls) << "the error is reported once";
    EXPECT_EQ(1, capture.count("failed")) << capture.text();
    // The endpoint answers with its error now; flush too.
    EXPECT_EQ(errors.status, ep_am_short(ep, kAmId, 0, nullptr, 0));
    EXPECT_EQ(errors.status, ep_flush(ep, kFlushLocal, nullptr));
    PendingReq req{[](PendingReq*) { return Status::ok; }, {}};
    EXPECT_EQ(errors.status, ep_pending_add(ep, &req, 0)) << "a failed endpoint answers at once, with its error";
    // The iface is fine: a new connection works.
    Ep* fresh = connect();
    ASSERT_EQ(Status::ok, retry([&] { return ep_am_short(fresh, kAmId, 1, nullptr, 0); }));
    ASSERT_TRUE(wait_for([&] { return received_.messages.size() == 1; }));
}

TEST_P(IbPairTest, DeadPeerFailsTheEndpoint) {
    // Short transport timeouts: a RoCE peer that vanished is noticed by retries running out.
    open({{"IB_TIMEOUT", "10ms"}, {"IB_RETRY_COUNT", "2"}});
    ErrorLog errors;
    Ep* back = nullptr;
    Ep* ep = connect(errors.params(), &back);
    loom::test::LogCapture capture(std::getenv("DBG") ? "debug" : "warn");
    if (back != nullptr) {
        receiver_->iface().ep_destroy(back);  // the peer's QP goes away
        receiver_->forget(back);
        for (int i = 0; i < 10; ++i) receiver_->worker().progress();
    } else {
        receiver_.reset();  // rdma_cm: the peer iface closes its accepted connection
    }
    // Operations in flight when the failure is found complete with an error.
    std::vector<CountingCompletion> comps(4);
    LocalBuffer src(*sender_, 4096, kAccessLocalRead);
    int posted = 0;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (errors.calls == 0 && std::chrono::steady_clock::now() < deadline) {
        if (posted < 4) {
            Iov iov{src.data.data(), 512, src.memh};
            Status s =
                ep_am_zcopy(ep, kAmId, nullptr, 0, &iov, 1, 0, &comps[static_cast<std::size_t>(posted)]);
            if (s == Status::in_progress) ++posted;
        }
        sender_->worker().progress();
        if (receiver_) receiver_->worker().progress();
    }
    ASSERT_EQ(1, errors.calls) << "the endpoint never failed";
    EXPECT_TRUE(is_peer_error(errors.status)) << to_string(errors.status);
    ASSERT_TRUE(wait_for([&] {
        return std::all_of(comps.begin(), comps.begin() + posted,
                           [](const CountingCompletion& c) { return c.fired == 1; });
    })) << "outstanding operations did not complete; log:\n"
        << capture.text();
    for (int i = 0; i < posted; ++i) EXPECT_NE(Status::ok, comps[static_cast<std::size_t>(i)].status) << i;
    EXPECT_EQ(1, capture.count("failed")) << capture.text();
    EXPECT_EQ(errors.status, ep_am_short(ep, kAmId, 0, nullptr, 0));
}

TEST_P(IbPairTest, KeepaliveFailsAnIdleEndpointWhosePeerVanished) {
    // A peer host that vanishes says nothing: without a probe an idle endpoint waits for ever
    // (the QP retries only what it sends). ep_check's probe notices within its timeout.
    open();
    ErrorLog errors;
    Ep* back = nullptr;
    Ep* ep = connect(errors.params(), &back);
    IfaceAttr attr;
    ASSERT_EQ(Status::ok, sender_->iface().query(attr));
    ASSERT_TRUE(attr.cap_flags & kCapEpCheck);
    loom::test::LogCapture capture(std::getenv("DBG") ? "debug" : "warn");
    constexpr std::uint64_t kTimeoutNs = 300'000'000;
    auto check = [&] { return ep->iface->ops.ep_check(ep, kTimeoutNs); };
    // Alive but never progressing (busy computing): its device answers every probe.
    for (int round = 0; round < 5; ++round) {
        Status s = check();
        ASSERT_TRUE(s == Status::in_progress || s == Status::ok) << to_string(s);
        auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
        while (std::chrono::steady_clock::now() < until) sender_->worker().progress();
    }
    ASSERT_EQ(0, errors.calls) << "a live peer was given up: " << to_string(errors.status);
    std::optional<loom::test::SilentDevice> silent;
    if (back != nullptr) {
        receiver_->iface().ep_destroy(back);  // the peer's QP goes away without a word
        receiver_->forget(back);
    } else {
        // rdma_cm (iWARP, or RoCE with IB_CM=rdmacm): closing would disconnect; cut the wire instead.
        silent.emplace(GetParam().b.md_name);
        if (!silent->why_not().empty()) GTEST_SKIP() << "cannot silence the peer: " << silent->why_not();
    }
    Status last = Status::ok;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (errors.calls == 0 && std::chrono::steady_clock::now() < deadline) {
        last = check();
        auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
        while (std::chrono::steady_clock::now() < until) sender_->worker().progress();
    }
    ASSERT_EQ(1, errors.calls) << "the endpoint never failed; log:\n" << capture.text();
    EXPECT_EQ(Status::peer_timeout, errors.status) << to_string(errors.status);
    EXPECT_EQ(Status::peer_timeout, last);
    EXPECT_EQ(1, capture.count("keep-alive")) << capture.text();
    EXPECT_EQ(Status::peer_timeout, check()) << "a failed endpoint answers with its error";
    EXPECT_EQ(Status::peer_timeout, ep_am_short(ep, kAmId, 0, nullptr, 0));
}

TEST_P(IbPairTest, EndpointDestroyedWithWorkInFlight) {
    open();
    Ep* ep = connect();
    RemoteBuffer remote(*receiver_, *sender_, 256 * 1024);
    LocalBuffer src(*sender_, 256 * 1024, kAccessLocalRead);
    for (int i = 0; i < 8; ++i) {
        Iov iov{src.data.data(), src.data.size(), src.memh};
        (void)ep_put_zcopy(ep, &iov, 1, remote.addr(0), remote.rkey.rkey, nullptr);
        auto data = pattern(3000, static_cast<unsigned>(i));
        (void)ep_am_bcopy(ep, kAmId, pack_vector, &data, 0);
    }
    sender_->iface().ep_destroy(ep);
    sender_->forget(ep);
    for (int i = 0; i < 2000; ++i) progress();
    // The iface goes on: a new endpoint works.
    Ep* fresh = connect();
    ASSERT_EQ(Status::ok, retry([&] { return ep_am_short(fresh, kAmId, 1, nullptr, 0); }));
    ASSERT_TRUE(wait_for([&] { return !received_.messages.empty(); }));
}

TEST_P(IbPairTest, RdmaCmOnRoce) {
    if (is_iwarp(GetParam().a)) GTEST_SKIP() << "iWARP always uses rdma_cm (the other tests)";
    open({{"IB_CM", "rdmacm"}});
    EXPECT_TRUE(sender_->attr().cap_flags & kCapConnectToIface);
    Ep* ep = connect();
    auto data = pattern(5000, 4);
    ASSERT_EQ(Status::ok, retry([&] { return ep_am_bcopy(ep, kAmId, pack_vector, &data, 0); }));
    ASSERT_TRUE(wait_for([&] { return received_.messages.size() == 1; }));
    EXPECT_EQ(data, received_.messages[0]);
    RemoteBuffer remote(*receiver_, *sender_, 64);
    std::uint64_t result = 0;
    CountingCompletion comp;
    Status status;
    while ((status = ep_atomic64_fetch(ep, AtomicOp::add, 5, &result, remote.addr(0), remote.rkey.rkey,
                                       &comp)) == Status::no_resource) {
        progress();
    }
    finish(status, comp);
    EXPECT_EQ(0u, result);
    EXPECT_EQ(5u, *reinterpret_cast<std::uint64_t*>(remote.data.data()));
    // A verbs iface and an rdma_cm iface cannot talk.
    Side verbs(GetParam().b);
    std::string reason;
    EXPECT_FALSE(sender_->iface().is_reachable(verbs.dev_addr().data(), verbs.dev_addr().size(),
                                               verbs.iface_addr().data(), verbs.iface_addr().size(),
                                               &reason));
    EXPECT_NE(std::string::npos, reason.find("rdma_cm")) << reason;
}

TEST_P(IbPairTest, CreditsOwedBeforeTheAcceptorSawTheConnectionAreReturned) {
    // rdma_cm: the accepting side may receive messages before it has processed its own
    // ESTABLISHED event. Credits it owes by then must still be returned once it has,
    // or a sender that used its whole window waits forever.
    open({{"IB_CM", "rdmacm"}, {"IB_FC_WINDOW", "4"}});
    loom::test::LogCapture capture("debug");
    EpParams params = to_receiver();
    auto created = sender_->iface().ep_create(params);
    ASSERT_TRUE(created.ok());
    Ep* ep = *created;
    // The receiver accepts, and then stops progressing.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (capture.count("accepted a connection") == 0 && std::chrono::steady_clock::now() < deadline) {
        sender_->worker().progress();
        receiver_->worker().progress();
    }
    ASSERT_EQ(1, capture.count("accepted a connection"));
    // The sender connects and uses its whole window while the receiver does not look.
    int sent = 0;
    while (sent < 4 && std::chrono::steady_clock::now() < deadline) {
        Status s = ep_am_short(ep, kAmId, static_cast<std::uint64_t>(sent), nullptr, 0);
        if (s == Status::ok) {
            ++sent;
        } else {
            ASSERT_EQ(Status::no_resource, s);
            sender_->worker().progress();
        }
    }
    ASSERT_EQ(4, sent);
    EXPECT_EQ(Status::no_resource, ep_am_short(ep, kAmId, 4, nullptr, 0));
    // Give the messages time to land, so that the receiver's next progress call finds them
    // before it reads its ESTABLISHED event (messages are polled first).
    for (int i = 0; i < 20000; ++i) sender_->worker().progress();
    // Everything arrives, and the window opens again.
    ASSERT_TRUE(wait_for([&] { return received_.messages.size() == 4; }));
    ASSERT_EQ(Status::ok, retry([&] { return ep_am_short(ep, kAmId, 4, nullptr, 0); }))
        << "the receiver never returned the credits it owed";
    ASSERT_TRUE(wait_for([&] { return received_.messages.size() == 5; }));
    sender_->iface().ep_destroy(ep);
}

/**
 * connect_on_first_use (LOOM_LAZY_CONNECT) over rdma_cm: no connection until the first
 * operation, which starts it and finds no resources until it is made; a flush of the unused
 * endpoint has nothing to wait for. An endpoint never used never connects, so destroying it
 * cannot wait for a connection half made (iWARP waits up to 10 s in the kernel for an
 * unanswered one).
 */
TEST_P(IbPairTest, LazyEndpointConnectsOnItsFirstSend) {
    open({{"IB_CM", "rdmacm"}});
    ASSERT_TRUE(sender_->attr().cap_flags & kCapConnectOnFirstUse);
    loom::test::LogCapture capture("debug");
    EpParams params = to_receiver();
    params.connect_on_first_use = true;
    auto created = sender_->iface().ep_create(params);
    ASSERT_TRUE(created.ok());
    Ep* ep = *created;
    for (int i = 0; i < 20000; ++i) progress();
    EXPECT_EQ(0, capture.count("accepted a connection")) << "connected before its first use";
    EXPECT_EQ(Status::ok, ep_flush(ep, 0, nullptr)) << "a flush of an unused endpoint waits for nothing";
    EXPECT_EQ(0, capture.count("RDMA_CM_EVENT_ADDR_RESOLVED")) << "a flush does not connect";
    ASSERT_EQ(Status::ok, retry([&] { return ep_am_short(ep, kAmId, 7, nullptr, 0); }));
    ASSERT_TRUE(wait_for([&] { return received_.messages.size() == 1; }));
    EXPECT_EQ(1, capture.count("accepted a connection"));
    auto unused = sender_->iface().ep_create(params);
    ASSERT_TRUE(unused.ok());
    sender_->iface().ep_destroy(*unused);
    sender_->iface().ep_destroy(ep);
}

/**
 * An endpoint that waits for its first use takes no receive buffers until it connects
 * (RcEpCold::rx_reserved): LOOM_IB_RX_QUEUE_LEN bounds the connections, not the endpoints.
 * Here the budget holds two connections (2 x (window 4 + 2)): eight endpoints are made,
 * two connect and deliver.
 */
TEST_P(IbPairTest, UnusedLazyEndpointsTakeNoReceiveBuffers) {
    open({{"IB_CM", "rdmacm"}, {"IB_FC_WINDOW", "4"}, {"IB_RX_QUEUE_LEN", "12"}});
    EpParams params = to_receiver();
    params.connect_on_first_use = true;
    std::vector<Ep*> eps;
    for (int i = 0; i < 8; ++i) {
        auto created = sender_->iface().ep_create(params);
        ASSERT_TRUE(created.ok()) << "endpoint " << i << ": " << to_string(created.status());
        eps.push_back(*created);
    }
    for (std::uint64_t i = 0; i < 2; ++i) {
        ASSERT_EQ(Status::ok, retry([&] { return ep_am_short(eps[i], kAmId, i, nullptr, 0); }));
        ASSERT_TRUE(wait_for([&] { return received_.messages.size() == i + 1; }));
    }
    for (Ep* ep : eps) sender_->iface().ep_destroy(ep);
}

TEST_P(IbPairTest, ConnectionToAClosedIfaceFails) {
    if (!is_iwarp(GetParam().a)) GTEST_SKIP() << "connect-to-ep has no connection set-up to refuse";
    open();
    std::vector<std::uint8_t> dev = receiver_->dev_addr(), iface = receiver_->iface_addr();
    receiver_.reset();  // nobody listens on that port any more
    ErrorLog errors;
    EpParams params = errors.params();
    params.dev_addr = dev.data();
    params.dev_addr_len = dev.size();
    params.iface_addr = iface.data();
    params.iface_addr_len = iface.size();
    loom::test::LogCapture capture("warn");
    auto ep = sender_->iface().ep_create(params);
    ASSERT_TRUE(ep.ok());
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (errors.calls == 0 && std::chrono::steady_clock::now() < deadline) sender_->worker().progress();
    EXPECT_EQ(1, errors.calls);
    EXPECT_TRUE(is_peer_error(errors.status)) << to_string(errors.status);
    sender_->iface().ep_destroy(*ep);
}

// ---------------------------------------------------------------------------------------------
// The md's registration cache across the wire: memory that went away must not be sent from
// the pages it had, and a registration the cache dropped stays usable for its holder.
// ---------------------------------------------------------------------------------------------

/** Counts @p byte in @p data. */
std::size_t count_of(const std::vector<std::uint8_t>& data, std::uint8_t byte) {
    return static_cast<std::size_t>(std::count(data.begin(), data.end(), byte));
}

/** Anonymous mappings of @p length bytes, asking for the address given back last (a hint, not MAP_FIXED). */
Reusable mapped_memory(std::size_t length) {
    auto hint = std::make_shared<void*>(nullptr);
    return {[length, hint]() -> void* {
                void* p = ::mmap(*hint, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                return p == MAP_FAILED ? nullptr : p;
            },
            [length, hint](void* p) {
                ::munmap(p, length);
                *hint = p;
            }};
}

/** The most send_after_reuse() puts from each end of a buffer. */
constexpr std::size_t kPutWindow = 256 * 1024;

/** Bytes the peer needs for send_after_reuse() of @p length bytes. */
std::size_t remote_size(std::size_t length) {
    return 2 * std::min(length, kPutWindow);
}

TEST_P(IbPairTest, RemappedBufferIsSentWithItsNewContents) {
    open();
    Ep* ep = connect();
    constexpr std::size_t kSize = 1 << 20;
    RemoteBuffer remote(*receiver_, *sender_, remote_size(kSize));
    auto got = send_after_reuse(ep, remote, kSize, mapped_memory(kSize));
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->size(), count_of(*got, 'B'))
        << count_of(*got, 'A') << " bytes came from the unmapped pages";
}

TEST_P(IbPairTest, ReallocatedBufferIsSentWithItsNewContents) {
    if (ucs::mem_hooks_info().free_events != ucs::FreeEvents::glibc) {
        // The sanitizer's allocator keeps freed blocks in quarantine, so their addresses do
        // not come back soon (its free hook invalidates at free(), which ucs tests check).
        GTEST_SKIP() << "needs glibc's malloc (free events here: "
                     << ucs::to_string(ucs::mem_hooks_info().free_events) << ")";
    }
    open();
    Ep* ep = connect();
    RemoteBuffer remote(*receiver_, *sender_, 2 * kPutWindow);
    // glibc serves a request from its heaps while a free chunk there is large enough; only
    // then, from its mmap threshold up (32 MiB at most, however far the dynamic threshold
    // has risen as mapped blocks were freed), it maps a block of its own, which free()
    // unmaps: the classic case. Larger than both, the block is mapped wherever the heaps
    // stand after the tests before this one.
    const std::size_t large = std::max<std::size_t>(33u << 20, ((::mallinfo2().fordblks >> 20) + 2) << 20);
    void* probe = std::malloc(large);
    ASSERT_NE(nullptr, probe);
    const bool mapped = reinterpret_cast<std::uintptr_t>(probe) % ucs::page_size() == 2 * sizeof(std::size_t);
    std::free(probe);
    ASSERT_TRUE(mapped) << "a block of " << large << " bytes is not mapped on its own";
    auto got = send_after_reuse(ep, remote, large,
                                {[large] { return std::malloc(large); }, [](void* p) { std::free(p); }});
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->size(), count_of(*got, 'B')) << count_of(*got, 'A') << " bytes came from the freed block";

    // A block of a heap keeps its pages when it is freed, so a registration of them would
    // still be right; malloc_trim() gives its free pages back, and reuse brings new ones.
    // Blocks in use on both sides keep it from merging with a free neighbour, so that
    // malloc returns its address again.
    constexpr std::size_t kSmall = 24 * 1024;
    std::vector<void*> guards;
    Reusable heap{[&guards]() -> void* {
                      if (!guards.empty()) return std::malloc(kSmall);
                      guards.push_back(std::malloc(kSmall));
                      void* block = std::malloc(kSmall);
                      guards.push_back(std::malloc(kSmall));
                      return block;
                  },
                  [](void* p) {
                      std::free(p);
                      ::malloc_trim(0);
                  }};
    got = send_after_reuse(ep, remote, kSmall, heap);
    for (void* guard : guards) std::free(guard);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->size(), count_of(*got, 'B'))
        << count_of(*got, 'A') << " bytes came from the trimmed pages";
}

TEST_P(IbPairTest, WithoutMemoryEventsTheCacheWouldSendStalePages) {
    // What the two tests above guard against, shown on this device: a cache that does not
    // see the unmap hands out the registration of the old pages, and the peer gets the old
    // bytes. Reported by the application (memory_event_notify), the unmap is seen.
    loom::test::ScopedEnv events("LOOM_MEM_EVENTS", "user");
    open();
    ASSERT_TRUE(md_caches(sender_->md())) << "with LOOM_MEM_EVENTS=user the md has a registration cache";
    Ep* ep = connect();
    constexpr std::size_t kSize = 1 << 20;
    // One remote buffer for both runs: the receiver's cache does not see memory go either.
    RemoteBuffer remote(*receiver_, *sender_, remote_size(kSize));
    auto told = send_after_reuse(ep, remote, kSize, mapped_memory(kSize), true);
    ASSERT_TRUE(told.has_value());
    EXPECT_EQ(told->size(), count_of(*told, 'B')) << count_of(*told, 'A') << " stale bytes";
    auto blind = send_after_reuse(ep, remote, kSize, mapped_memory(kSize));
    ASSERT_TRUE(blind.has_value());
    EXPECT_EQ(blind->size(), count_of(*blind, 'A')) << "the device did not send from the old, pinned pages";
}

TEST_P(IbPairTest, RegistrationDroppedByTheCacheStaysUsableUntilDeregistered) {
    if (!ucs::mem_hooks_info().unmap_hooks) {
        GTEST_SKIP() << "no memory hooks in this process: " << ucs::mem_hooks_info().detail;
    }
    open();
    ASSERT_TRUE(md_caches(sender_->md())) << "memory hooks work here, so the md has a registration cache";
    Ep* ep = connect();
    const std::size_t page = ucs::page_size();
    auto* p = static_cast<std::uint8_t*>(
        ::mmap(nullptr, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(MAP_FAILED, static_cast<void*>(p));
    std::memset(p, 'C', 4 * page);
    auto held = sender_->md().mem_reg(p, 4 * page, kAccessLocalRead);
    ASSERT_TRUE(held.ok());
    // Its last page goes while it is held: the cache drops the region, so a lookup of the
    // pages still there registers them anew instead of returning it.
    ASSERT_EQ(0, ::munmap(p + 3 * page, page));
    auto fresh = sender_->md().mem_reg(p, 2 * page, kAccessLocalRead);
    ASSERT_TRUE(fresh.ok());
    EXPECT_NE(mr_of(*held).lkey, mr_of(*fresh).lkey) << "the cache kept a region whose memory went";
    // The holder's handle still names a live registration: keys, data.
    std::vector<std::uint8_t> packed(RemoteBuffer::kIbRkeySize);
    EXPECT_EQ(Status::ok, sender_->md().mkey_pack(*held, packed.data()));
    RemoteBuffer remote(*receiver_, *sender_, 3 * page);
    ASSERT_NO_FATAL_FAILURE(put_zcopy_all(ep, p, 3 * page, *held, remote));
    EXPECT_EQ(3 * page, count_of(remote.data, 'C'));
    EXPECT_EQ(Status::ok, sender_->md().mem_dereg(*held));
    EXPECT_EQ(Status::ok, sender_->md().mem_dereg(*fresh));
    ::munmap(p, 3 * page);
}

std::string pair_name(const testing::TestParamInfo<Pair>& info) { return info.param.name(); }

// --- wake-up events ---------------------------------------------------------------------------

TEST_P(IbPairTest, ArmIsBusyWhileACompletionWaitsInTheQueue) {
    open();
    Ep* ep = connect();
    auto fd = receiver_->iface().event_fd();
    ASSERT_TRUE(fd.ok()) << to_string(fd.status());
    ASSERT_TRUE(quiesce_and_arm(*receiver_));
    ASSERT_EQ(Status::ok, retry([&] { return ep_am_short(ep, kAmId, 1, nullptr, 0); }));
    for (int i = 0; i < 100; ++i) sender_->worker().progress();
    ASSERT_TRUE(readable(*fd, 10000)) << "the message did not wake the armed receiver";
    // The receive completion is queued and its event raised. Arming consumes the event and
    // requests the next one, which this completion will never raise: arm must see it.
    EXPECT_EQ(Status::busy, receiver_->iface().event_arm());
    EXPECT_EQ(Status::busy, receiver_->iface().event_arm()) << "busy until progress has handled it";
    ASSERT_TRUE(wait_for([&] { return received_.messages.size() == 1; }));
    for (int i = 0; i < 1000; ++i) progress();
    ASSERT_EQ(1u, received_.messages.size()) << "the message was handled twice";
    std::uint64_t seq;
    std::memcpy(&seq, received_.messages[0].data(), 8);
    EXPECT_EQ(1u, seq);
    ASSERT_TRUE(quiesce_and_arm(*receiver_));
    EXPECT_FALSE(readable(*fd, 0));
}

TEST_P(IbPairTest, CreditGrantWakesASenderThatRanOutOfCredits) {
    // A window of 4: connect() used one credit, three remain; no send is signaled before
    // the 32nd, so nothing but the receiver's grant can wake the sender.
    open({{"IB_FC_WINDOW", "4"}});
    Ep* ep = connect();
    ASSERT_NO_FATAL_FAILURE(settle_probe());
    ASSERT_EQ(3, fill_credits(ep, 100));
    struct Waiting {
        PendingReq req;
        Ep* ep;
        int sent = 0;
    } waiting{{[](PendingReq* self) {
                   auto* w = reinterpret_cast<Waiting*>(self);
                   Status s = ep_am_short(w->ep, kAmId, 100, nullptr, 0);
                   if (s == Status::ok) ++w->sent;
                   return s;
               },
               {}},
              ep};
    ASSERT_EQ(Status::ok, ep_pending_add(ep, &waiting.req, 0));
    auto fd = sender_->iface().event_fd();
    ASSERT_TRUE(fd.ok()) << to_string(fd.status());
    ASSERT_TRUE(quiesce_and_arm(*sender_));
    EXPECT_FALSE(readable(*fd, 0)) << "no credits and no completions: nothing to wake for";
    EXPECT_EQ(0, waiting.sent);
    drain_receiver();  // handles the messages and returns their credits in a grant
    ASSERT_EQ(3u, received_.messages.size());
    EXPECT_TRUE(readable(*fd, 10000)) << "the grant did not wake the sender";
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (waiting.sent == 0 && std::chrono::steady_clock::now() < deadline) sender_->worker().progress();
    ASSERT_EQ(1, waiting.sent) << "the pending send never went out";
    ASSERT_TRUE(wait_for([&] { return received_.messages.size() == 4; }));
}

TEST_P(IbPairTest, SendCompletionsWakeAnArmedSender) {
    // The sender only runs on events while RDMA writes complete; a lost send-completion
    // event leaves it asleep (poll times out) and fails the test.
    open();
    Ep* ep = connect();
    constexpr std::size_t kSize = 1 << 20;
    RemoteBuffer remote(*receiver_, *sender_, kSize);
    LocalBuffer src(*sender_, kSize, kAccessLocalRead);
    auto bytes = pattern(kSize, 9);
    std::copy(bytes.begin(), bytes.end(), src.data.begin());
    // Arming first: the event fd is made on first use by either call.
    Status first = sender_->iface().event_arm();
    ASSERT_TRUE(first == Status::ok || first == Status::busy) << to_string(first);
    auto fd = sender_->iface().event_fd();
    ASSERT_TRUE(fd.ok());
    unsigned sleeps = 0;
    for (int round = 0; round < 4; ++round) {
        Iov iov{src.data.data(), kSize, src.memh};
        CountingCompletion comp;
        ASSERT_EQ(Status::in_progress,
                  retry([&] { return ep_put_zcopy(ep, &iov, 1, remote.addr(0), remote.rkey.rkey, &comp); }));
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (comp.fired == 0) {
            ASSERT_LT(std::chrono::steady_clock::now(), deadline);
            Status s = sender_->iface().event_arm();
            if (s == Status::busy) {
                sender_->worker().progress();
                continue;
            }
            ASSERT_EQ(Status::ok, s);
            ++sleeps;
            ASSERT_TRUE(readable(*fd, 10000))
                << "round " << round << ": the write's completion did not wake the sender";
            sender_->worker().progress();
        }
        EXPECT_EQ(Status::ok, comp.status);
    }
    EXPECT_EQ(bytes, remote.data);
    RecordProperty("sleeps", static_cast<int>(sleeps));
}

TEST_P(IbPairTest, RdmaCmConnectionSetUpWakesASleepingIface) {
    // The receiver runs only on events: the connection request, then the establishment,
    // then the message must each wake it (or make arm busy), or the connection never forms.
    open({{"IB_CM", "rdmacm"}});
    auto fd = receiver_->iface().event_fd();
    ASSERT_TRUE(fd.ok()) << to_string(fd.status());
    EventDriven rx{receiver_.get(), *fd};
    ASSERT_TRUE(rx.step());
    ASSERT_TRUE(rx.armed) << "a new iface has nothing to do";
    Ep* ep = sender_->connect(*receiver_);
    bool sent = false;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (received_.messages.empty()) {
        ASSERT_LT(std::chrono::steady_clock::now(), deadline)
            << "the receiver, running on events only, never got the message (sent: " << sent << ")";
        sender_->worker().progress();
        if (!sent) {
            Status s = ep_am_short(ep, kAmId, 42, nullptr, 0);
            ASSERT_TRUE(s == Status::ok || s == Status::no_resource) << to_string(s);
            sent = s == Status::ok;
        }
        ASSERT_TRUE(rx.step());
    }
    // It was armed when the connection request came: only its fd could have woken it.
    EXPECT_GT(rx.wakeups, 0u);
    std::uint64_t seq;
    std::memcpy(&seq, received_.messages[0].data(), 8);
    EXPECT_EQ(42u, seq);
}

TEST_P(IbPairTest, DisconnectWakesASleepingIface) {
    // rdma_cm: the peer closes; the DISCONNECTED event (and the flushed receives) must wake
    // the armed side, whose endpoint then fails and reports it.
    open({{"IB_CM", "rdmacm"}});
    loom::test::LogCapture capture("warn");
    ErrorLog errors;
    Ep* ep = connect(errors.params());
    (void)ep;
    ASSERT_NO_FATAL_FAILURE(settle_probe());
    auto fd = sender_->iface().event_fd();
    ASSERT_TRUE(fd.ok());
    ASSERT_TRUE(quiesce_and_arm(*sender_));
    ASSERT_FALSE(readable(*fd, 0));
    receiver_.reset();  // disconnects its accepted connection
    EXPECT_TRUE(readable(*fd, 10000)) << "the disconnect did not wake the sender";
    EventDriven tx{sender_.get(), *fd};
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (errors.calls == 0 && std::chrono::steady_clock::now() < deadline) ASSERT_TRUE(tx.step());
    ASSERT_EQ(1, errors.calls) << "the endpoint never failed; log:\n" << capture.text();
    EXPECT_TRUE(is_peer_error(errors.status)) << to_string(errors.status);
    ASSERT_TRUE(quiesce_and_arm(*sender_));
}

INSTANTIATE_TEST_SUITE_P(Rc, IbPairTest, testing::ValuesIn(device_pairs()), pair_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(IbPairTest);

// --- rdma_cm private data (no device needed) --------------------------------------------------

/** What rc_cm.cc sends: Loom's header, then @p user. */
std::vector<std::uint8_t> cm_data(std::uint16_t window, std::uint32_t seg_size, const std::string& user) {
    ib::RcCmPrivate header{};
    header.version = ib::kRcAddrVersion;
    header.user_len = static_cast<std::uint8_t>(user.size());
    header.window = window;
    header.seg_size = seg_size;
    std::vector<std::uint8_t> bytes(sizeof(header) + user.size());
    std::memcpy(bytes.data(), &header, sizeof(header));
    std::memcpy(bytes.data() + sizeof(header), user.data(), user.size());
    return bytes;
}

TEST(RcCmData, ValidDataGivesTheUsersPartAlsoWhenPadded) {
    auto bytes = cm_data(32, 8192, "hello");
    bytes.resize(56, 0);  // InfiniBand pads a request's private data to 56 bytes
    ib::RcCmData out;
    ASSERT_EQ(ib::RcCmDataError::none, ib::parse_cm_data(bytes.data(), bytes.size(), 8192, out));
    EXPECT_EQ(32, out.header.window);
    EXPECT_EQ("hello", std::string(reinterpret_cast<const char*>(out.user), out.user_len));
}

TEST(RcCmData, WhatCannotWorkIsRefusedWithItsReason) {
    struct Case {
        std::vector<std::uint8_t> bytes;
        std::uint32_t seg_size;
        ib::RcCmDataError error;
        const char* says;
    };
    auto bad_version = cm_data(32, 8192, "");
    bad_version[0] = ib::kRcAddrVersion + 1;
    auto long_user = cm_data(32, 8192, "abc");
    long_user[1] = 4;  // claims one byte more than came
    const Case cases[] = {
        {{}, 8192, ib::RcCmDataError::missing, "no Loom connection data (0 bytes"},
        {std::vector<std::uint8_t>(sizeof(ib::RcCmPrivate) - 1, 0), 8192, ib::RcCmDataError::missing,
         "(23 bytes"},
        {bad_version, 8192, ib::RcCmDataError::version, "version 3 (expected 2)"},
        {long_user, 8192, ib::RcCmDataError::user_len, "claims 4 bytes of user data in 3"},
        {cm_data(0, 8192, ""), 8192, ib::RcCmDataError::window, "window of 0"},
        {cm_data(32, 4096, ""), 8192, ib::RcCmDataError::seg_size,
         "LOOM_IB_SEG_SIZE is 4096, this iface's 8192"},
    };
    for (const Case& c : cases) {
        ib::RcCmData out;
        const void* data = c.bytes.empty() ? nullptr : c.bytes.data();
        ib::RcCmDataError error = ib::parse_cm_data(data, c.bytes.size(), c.seg_size, out);
        EXPECT_EQ(c.error, error) << c.says;
        EXPECT_NE(std::string::npos,
                  ib::describe_cm_data(error, out, c.bytes.size(), c.seg_size).find(c.says))
            << ib::describe_cm_data(error, out, c.bytes.size(), c.seg_size);
    }
    // A reject's data: only the header and the user's part count.
    ib::RcCmData out;
    auto reject = cm_data(0, 0, "no");
    EXPECT_EQ(ib::RcCmDataError::none, ib::parse_cm_data(reject.data(), reject.size(), 0, out));
    EXPECT_EQ(2u, out.user_len);
    EXPECT_EQ(ib::RcCmDataError::user_len, ib::parse_cm_data(long_user.data(), long_user.size(), 0, out));
}

TEST(RcPeerData, AddressesAreCheckedAgainstTheLocalIface) {
    ib::RcLocalInfo roce;
    roce.ethernet = true;
    const std::uint8_t v4_gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
    std::memcpy(roce.gid, v4_gid, sizeof(v4_gid));
    roce.seg_size = 8192;
    ib::RcDeviceAddress dev{};
    dev.version = ib::kRcAddrVersion;
    dev.flags = ib::kDevAddrEthernet | ib::kDevAddrHasIp;
    std::memcpy(dev.gid, v4_gid, sizeof(v4_gid));
    auto bytes = [](const auto& a) {
        return std::vector<std::uint8_t>(reinterpret_cast<const std::uint8_t*>(&a),
                                         reinterpret_cast<const std::uint8_t*>(&a) + sizeof(a));
    };
    ib::RcDeviceAddress out_dev;
    std::string why;
    auto d = bytes(dev);
    EXPECT_EQ(Status::ok, ib::check_dev_address(d.data(), d.size(), roce, out_dev, &why)) << why;
    EXPECT_EQ(Status::invalid_address, ib::check_dev_address(d.data(), d.size() - 1, roce, out_dev, &why));
    EXPECT_NE(std::string::npos, why.find("35 bytes, expected 36")) << why;
    dev.flags |= ib::kDevAddrIwarp;
    d = bytes(dev);
    EXPECT_EQ(Status::unreachable, ib::check_dev_address(d.data(), d.size(), roce, out_dev, &why));
    EXPECT_NE(std::string::npos, why.find("peer is iWARP")) << why;
    dev.flags = 0x80;
    d = bytes(dev);
    EXPECT_EQ(Status::invalid_address, ib::check_dev_address(d.data(), d.size(), roce, out_dev, nullptr));

    ib::RcIfaceAddress iface{ib::kRcAddrVersion, static_cast<std::uint8_t>(ib::CmMode::verbs), 0, 8192};
    ib::RcIfaceAddress out_iface;
    auto i = bytes(iface);
    EXPECT_EQ(Status::ok, ib::check_iface_address(i.data(), i.size(), roce, out_iface, &why)) << why;
    iface.seg_size = 4096;
    i = bytes(iface);
    EXPECT_EQ(Status::unreachable, ib::check_iface_address(i.data(), i.size(), roce, out_iface, &why));
    EXPECT_NE(std::string::npos, why.find("LOOM_IB_SEG_SIZE is 4096")) << why;

    ib::RcEpAddress ep{ib::kRcAddrVersion, 3, 32, 0x11, 0x123456, 8192};
    ib::RcEpAddress out_ep;
    auto e = bytes(ep);
    EXPECT_EQ(Status::ok, ib::check_ep_address(e.data(), e.size(), roce, out_ep, &why)) << why;
    ep.qpn = 0x1000000;  // QP numbers have 24 bits
    e = bytes(ep);
    EXPECT_EQ(Status::invalid_address, ib::check_ep_address(e.data(), e.size(), roce, out_ep, &why));
    EXPECT_NE(std::string::npos, why.find("qpn 0x1000000")) << why;
}

}  // namespace
}  // namespace loom::uct::test
