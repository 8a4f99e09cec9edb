/**
 * self: loopback inside one process. Every operation completes in the call: an
 * active message runs the target iface's handler directly, put/get are memcpy,
 * atomics are CPU atomics on local memory (self_ep.cc). The device address identifies
 * the process, the iface address the target iface, so a peer in another process is
 * unreachable.
 */
#include "uct/self/self_iface.h"

#include "uct/self/self_ep.h"
#include "uct/self/self_log.h"
#include "uct/self/self_wire.h"

#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <random>

namespace loom::uct::self {

namespace {

/** A value unique to this process (pid plus a random salt, so a reused pid differs). */
std::uint64_t process_id() {
    static const std::uint64_t id = [] {
        std::random_device rd;
        return (static_cast<std::uint64_t>(::getpid()) << 32) ^ rd();
    }();
    return id;
}

/** Ifaces of this process by id, so endpoints resolve addresses safely. */
struct IfaceRegistry {
    std::mutex lock;
    std::map<std::uint64_t, SelfIface*> ifaces;
    std::uint64_t next_id = 1;
};

IfaceRegistry& iface_registry() {
    static IfaceRegistry* instance = new IfaceRegistry();
    return *instance;
}

/**
 * Validates a peer's addresses and finds the target iface: invalid_address for
 * garbage, unreachable for another process or a closed iface; @p reason says which.
 */
Status resolve(const std::uint8_t* dev_addr, std::size_t dev_addr_len, const std::uint8_t* iface_addr,
               std::size_t iface_addr_len, SelfIface** target, std::string* reason) {
    auto fail = [&](Status status, const char* why) {
        if (reason) *reason = why;
        return status;
    };
    if (!dev_addr || dev_addr_len != sizeof(DeviceAddress)) {
        return fail(Status::invalid_address, "malformed device address (bad length)");
    }
    if (!iface_addr || iface_addr_len != sizeof(IfaceAddress)) {
        return fail(Status::invalid_address, "malformed iface address (bad length)");
    }
    DeviceAddress dev;
    IfaceAddress iface;
    std::memcpy(&dev, dev_addr, sizeof(dev));
    std::memcpy(&iface, iface_addr, sizeof(iface));
    if (dev.version != kAddrVersion || iface.version != kAddrVersion) {
        return fail(Status::invalid_address, "address version mismatch");
    }
    if (dev.process_id != process_id()) {
        return fail(Status::unreachable, "peer is another process (self reaches only its own)");
    }
    IfaceRegistry& reg = iface_registry();
    std::lock_guard guard(reg.lock);
    const std::uint64_t iface_id = iface.iface_id;  // a packed member: no reference to it
    auto it = reg.ifaces.find(iface_id);
    if (it == reg.ifaces.end()) return fail(Status::unreachable, "no such self iface in this process (closed?)");
    if (target) *target = it->second;
    return Status::ok;
}

}  // namespace

SelfIface::SelfIface(Md* md, Worker* worker, const TlResource& resource) : Iface(md, worker, resource, kSelfOps) {
    IfaceRegistry& reg = iface_registry();
    std::lock_guard guard(reg.lock);
    id_ = reg.next_id++;
    reg.ifaces[id_] = this;
}

SelfIface::~SelfIface() {
    IfaceRegistry& reg = iface_registry();
    std::lock_guard guard(reg.lock);
    reg.ifaces.erase(id_);
}

Status SelfIface::query(IfaceAttr& attr) const {
    attr = {};
    attr.cap_flags = kCapAmShort | kCapAmBcopy | kCapAmZcopy | kCapPending | kCapPutShort | kCapPutBcopy |
                     kCapPutZcopy | kCapGetBcopy | kCapGetZcopy | kCapAtomic32 | kCapAtomic64 |
                     kCapConnectToIface | kCapSelfOnly | kCapIntraNode | kCapEventRecv;
    attr.am = {.max_short = kMaxShort, .max_bcopy = kMaxBcopy, .min_zcopy = 0, .max_zcopy = kMaxBcopy,
               .max_iov = 16, .opt_zcopy_align = 1, .max_hdr = kMaxZcopyHeader};
    attr.put = {.max_short = kMaxShort,
                .max_bcopy = kMaxBcopy,
                .min_zcopy = 0,
                .max_zcopy = SIZE_MAX,
                .max_iov = 16,
                .opt_zcopy_align = 1,
                .max_hdr = 0};
    attr.get = {.max_short = 0, .max_bcopy = SIZE_MAX, .min_zcopy = 0, .max_zcopy = SIZE_MAX, .max_iov = 16,
                .opt_zcopy_align = 1, .max_hdr = 0};
    std::uint64_t ops = atomic_op_bit(AtomicOp::add) | atomic_op_bit(AtomicOp::and_) |
                        atomic_op_bit(AtomicOp::or_) | atomic_op_bit(AtomicOp::xor_) |
                        atomic_op_bit(AtomicOp::swap) | atomic_op_bit(AtomicOp::cswap);
    attr.atomic32_ops = attr.atomic64_ops = ops;
    attr.device_addr_len = sizeof(DeviceAddress);
    attr.iface_addr_len = sizeof(IfaceAddress);
    attr.ep_addr_len = 0;
    // A function call and a memcpy: figures measured on the reference machine (docs/performance.md).
    attr.overhead = 10e-9;
    attr.bandwidth_dedicated = 6e9;
    attr.bandwidth_shared = 0;
    attr.latency = {0, 0};
    attr.priority = 0;
    attr.ep_size = sizeof(SelfEp);
    return Status::ok;
}

Status SelfIface::get_device_address(std::uint8_t* out) const {
    DeviceAddress addr{kAddrVersion, process_id()};
    std::memcpy(out, &addr, sizeof(addr));
    return Status::ok;
}

Status SelfIface::get_address(std::uint8_t* out) const {
    IfaceAddress addr{kAddrVersion, id_};
    std::memcpy(out, &addr, sizeof(addr));
    return Status::ok;
}

bool SelfIface::is_reachable(const std::uint8_t* dev_addr, std::size_t dev_addr_len,
                             const std::uint8_t* iface_addr, std::size_t iface_addr_len,
                             std::string* reason) const {
    return resolve(dev_addr, dev_addr_len, iface_addr, iface_addr_len, nullptr, reason) == Status::ok;
}

Result<Ep*> SelfIface::ep_create(const EpParams& params) {
    SelfIface* target = nullptr;
    std::string reason;
    Status status =
        resolve(params.dev_addr, params.dev_addr_len, params.iface_addr, params.iface_addr_len, &target, &reason);
    if (status != Status::ok) {
        LOOM_LOG_ERROR("ep_create: {}", reason);
        return status;
    }
    auto* ep = new SelfEp{};
    ep->iface = this;
    ep->target = target;
    return static_cast<Ep*>(ep);
}

void SelfIface::ep_destroy(Ep* ep) { delete static_cast<SelfEp*>(ep); }

}  // namespace loom::uct::self
