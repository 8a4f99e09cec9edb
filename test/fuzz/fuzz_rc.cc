/**
 * Fuzz target: what an rc peer sends outside its packets (uct/ib/rc_peer_data.h), the
 * functions rc calls before it reads a field of any of it:
 *  - rdma_cm private data (a connect request, an accept or a reject): parse_cm_data and
 *    the log line of each refusal; what it returns must lie within the input and agree
 *    with the header;
 *  - a peer's device, iface and endpoint addresses (is_reachable, ep_create,
 *    ep_connect_to_ep): check_dev_address, check_iface_address, check_ep_address against
 *    an iface described by the input (iWARP or not, link layer, rdma_cm, IP family, GID);
 *    an address they accept must be one rc can use.
 * The rdma_cm events and the queue pairs around them need a device: the RDMA VM's suites
 * exercise those, this target exercises what the peer controls.
 *
 * Input: the first byte picks the case (private data as a reject, with the default
 * LOOM_IB_SEG_SIZE, or with the segment size in the next four bytes; or one of the three
 * addresses, whose next byte describes the local iface); the rest is the peer's bytes,
 * copied to a heap block of exactly their size, so that ASan sees any read past them.
 */
#include "uct/ib/rc_peer_data.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using namespace loom::uct::ib;
using loom::Status;

constexpr std::uint32_t kSegSize = 8192;  // LOOM_IB_SEG_SIZE's default

void check(bool ok, const char* what) {
    if (!ok) {
        std::fprintf(stderr, "fuzz_rc: %s\n", what);
        std::abort();
    }
}

void private_data(std::uint32_t seg_size, const std::vector<std::uint8_t>& priv) {
    const void* p = priv.empty() ? nullptr : priv.data();
    RcCmData out;
    RcCmDataError error = parse_cm_data(p, priv.size(), seg_size, out);
    check(!describe_cm_data(error, out, priv.size(), seg_size).empty(), "an empty log line");
    if (out.user != nullptr) {  // also after a refusal of the window or the segment size
        check(out.user_len == out.header.user_len, "the user's part is not the header's length");
        check(out.user == priv.data() + sizeof(RcCmPrivate), "the user's part is not after the header");
        check(out.user + out.user_len <= priv.data() + priv.size(), "the user's part runs past the data");
    }
    if (error != RcCmDataError::none) return;
    check(out.user != nullptr, "accepted data without its user part");
    check(out.header.version == kRcAddrVersion, "accepted another version");
    check(seg_size == 0 || (out.header.window != 0 && out.header.seg_size == seg_size),
          "accepted a connection whose window or segment size cannot work");
    // What the listener does with it: the user's part is copied for the application.
    std::vector<std::uint8_t> user(out.user, out.user + out.user_len);
    check(user.size() == out.user_len, "copy");
}

/** The local iface the input describes: bit 0 iWARP, 1 Ethernet, 2 rdma_cm, 3 IPv6, 4 an IPv4-mapped GID. */
RcLocalInfo local_from(std::uint8_t bits) {
    RcLocalInfo local;
    local.iwarp = bits & 1;
    local.ethernet = bits & 2;
    local.rdmacm = bits & 4;
    local.ipv6 = bits & 8;
    static const std::uint8_t v4_mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
    static const std::uint8_t link_local[16] = {0xfe, 0x80, 0,    0,    0,    0, 0, 0,
                                                2,    0x15, 0x5d, 0xff, 0xfe, 1, 2, 3};
    std::memcpy(local.gid, (bits & 16) ? v4_mapped : link_local, sizeof(local.gid));
    local.seg_size = kSegSize;
    return local;
}

void address(int which, const RcLocalInfo& local, bool with_reason, const std::vector<std::uint8_t>& bytes) {
    const std::uint8_t* p = bytes.empty() ? nullptr : bytes.data();
    std::string reason;
    std::string* r = with_reason ? &reason : nullptr;
    Status s;
    if (which == 0) {
        RcDeviceAddress dev;
        s = check_dev_address(p, bytes.size(), local, dev, r);
        if (s == Status::ok) {
            check(dev.version == kRcAddrVersion, "a device address of another version");
            check(static_cast<bool>(dev.flags & kDevAddrIwarp) == local.iwarp,
                  "a device of another transport");
            check(!local.rdmacm || (dev.flags & kDevAddrHasIp), "rdma_cm to a device without an IP address");
        }
    } else if (which == 1) {
        RcIfaceAddress iface;
        s = check_iface_address(p, bytes.size(), local, iface, r);
        if (s == Status::ok) {
            check(iface.seg_size == local.seg_size, "an iface of another segment size");
            check(!local.rdmacm || iface.port != 0, "rdma_cm to port 0");
        }
    } else {
        RcEpAddress ep;
        s = check_ep_address(p, bytes.size(), local, ep, r);
        if (s == Status::ok) {
            check(ep.qpn != 0 && ep.qpn <= 0xffffff && ep.window != 0, "an endpoint address rc cannot use");
            check(ep.mtu >= 1 && ep.mtu <= 5, "an MTU verbs does not have");
        }
    }
    check(s == Status::ok || s == Status::invalid_address || s == Status::unreachable,
          "an unexpected status");
    check(!with_reason || s == Status::ok || !reason.empty(), "a refusal without its reason");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const unsigned what = data[0] % 6;
    if (what < 3) {
        std::uint32_t seg_size =
            what == 0 ? 0 : kSegSize;  // 0: a reject, only the header and user part count
        std::size_t skip = 1;
        if (what == 2) {
            if (size < 5) return 0;
            std::memcpy(&seg_size, data + 1, sizeof(seg_size));
            skip = 5;
        }
        private_data(seg_size, std::vector<std::uint8_t>(data + skip, data + size));
        return 0;
    }
    if (size < 2) return 0;
    address(static_cast<int>(what - 3), local_from(data[1]), data[0] & 0x80,
            std::vector<std::uint8_t>(data + 2, data + size));
    return 0;
}
