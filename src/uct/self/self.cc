/**
 * self: loopback inside one process. Every operation completes in the call: an
 * active message runs the target iface's handler directly, put/get are memcpy,
 * atomics are CPU atomics on local memory. The device address identifies the
 * process, the iface address the target iface, so a peer in another process is
 * unreachable.
 */
#include "uct/api/uct.h"

#include "ucs/debug/log.h"
#include "ucs/sys/compiler.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

namespace loom::uct::self {

namespace {

log::Component g_log("self");
#undef LOOM_LOG_COMPONENT
#define LOOM_LOG_COMPONENT g_log

constexpr std::uint8_t kAddrVersion = 1;
constexpr std::size_t kMaxBcopy = 8192;
constexpr std::size_t kMaxShort = 4096;
constexpr std::size_t kMaxZcopyHeader = 128;

/** Device address: which process. */
struct [[gnu::packed]] DeviceAddress {
    std::uint8_t version;
    std::uint64_t process_id;
};

/** Iface address: which iface in that process. */
struct [[gnu::packed]] IfaceAddress {
    std::uint8_t version;
    std::uint64_t iface_id;
};

/** A value unique to this process (pid plus a random salt, so a reused pid differs). */
std::uint64_t process_id() {
    static const std::uint64_t id = [] {
        std::random_device rd;
        return (static_cast<std::uint64_t>(::getpid()) << 32) ^ rd();
    }();
    return id;
}

class SelfIface;

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

struct SelfEp : Ep {
    SelfIface* target;
};
static_assert(sizeof(SelfEp) == 16, "self endpoints stay two pointers");

class SelfIface final : public Iface {
public:
    SelfIface(Md* md, Worker* worker, const TlResource& resource);
    ~SelfIface() override;

    Status query(IfaceAttr& attr) const override;
    Status get_device_address(std::uint8_t* out) const override;
    Status get_address(std::uint8_t* out) const override;
    bool is_reachable(const std::uint8_t* dev_addr, std::size_t dev_addr_len, const std::uint8_t* iface_addr,
                      std::size_t iface_addr_len, std::string* reason) const override;
    Result<Ep*> ep_create(const EpParams& params) override;
    void ep_destroy(Ep* ep) override;
    /** Every operation is delivered inside its call: nothing ever waits for progress. */
    Status event_arm() override { return Status::ok; }

private:
    static const IfaceOps kOps;
    std::uint64_t id_;
};

SelfIface* target_of(Ep* ep) { return static_cast<SelfEp*>(ep)->target; }

Status self_am_short(Ep* ep, AmId id, std::uint64_t header, const void* payload, unsigned length) {
    if (LOOM_UNLIKELY(length > kMaxShort)) return Status::exceeds_limit;
    // The receiver sees header then payload, contiguous, as on every transport.
    alignas(8) std::uint8_t buf[sizeof(header) + kMaxShort];
    std::memcpy(buf, &header, sizeof(header));
    if (length != 0) std::memcpy(buf + sizeof(header), payload, length);  // payload may be null when empty
    return target_of(ep)->invoke_am(id, buf, sizeof(header) + length, 0);
}

ssize_t self_am_bcopy(Ep* ep, AmId id, PackCallback pack, void* arg, unsigned) {
    // A stack buffer, not one per iface: a handler may send again from inside the call.
    alignas(8) std::uint8_t buf[kMaxBcopy];
    std::size_t length = pack(buf, arg);
    if (LOOM_UNLIKELY(length > kMaxBcopy)) {
        LOOM_FATAL("am_bcopy: pack callback wrote {} bytes past a {}-byte buffer", length, kMaxBcopy);
    }
    // Without kAmCbFlagDesc the handler may not keep the data: its status has no meaning here.
    (void)target_of(ep)->invoke_am(id, buf, length, 0);
    return static_cast<ssize_t>(length);
}

Status self_am_zcopy(Ep* ep, AmId id, const void* header, unsigned header_length, const Iov* iov,
                     std::size_t iovcnt, unsigned, Completion*) {
    std::size_t payload = 0;
    for (std::size_t i = 0; i < iovcnt; ++i) payload += iov[i].length;
    if (LOOM_UNLIKELY(payload > kMaxBcopy || header_length > kMaxZcopyHeader)) return Status::exceeds_limit;
    std::size_t total = header_length + payload;
    alignas(8) std::uint8_t buf[kMaxZcopyHeader + kMaxBcopy];
    if (header_length != 0) std::memcpy(buf, header, header_length);
    std::size_t offset = header_length;
    for (std::size_t i = 0; i < iovcnt; ++i) {
        if (iov[i].length != 0) std::memcpy(buf + offset, iov[i].buffer, iov[i].length);
        offset += iov[i].length;
    }
    (void)target_of(ep)->invoke_am(id, buf, total, 0);
    return Status::ok;  // completed in the call: the completion is not used
}

Status self_put_short(Ep*, const void* buffer, unsigned length, std::uint64_t remote_addr, std::uint64_t) {
    if (length != 0) std::memcpy(reinterpret_cast<void*>(remote_addr), buffer, length);
    return Status::ok;
}

ssize_t self_put_bcopy(Ep*, PackCallback pack, void* arg, std::uint64_t remote_addr, std::uint64_t) {
    return static_cast<ssize_t>(pack(reinterpret_cast<void*>(remote_addr), arg));
}

Status self_put_zcopy(Ep*, const Iov* iov, std::size_t iovcnt, std::uint64_t remote_addr, std::uint64_t,
                      Completion*) {
    auto* dest = reinterpret_cast<std::uint8_t*>(remote_addr);
    for (std::size_t i = 0; i < iovcnt; ++i) {
        if (iov[i].length != 0) std::memcpy(dest, iov[i].buffer, iov[i].length);
        dest += iov[i].length;
    }
    return Status::ok;
}

Status self_get_bcopy(Ep*, UnpackCallback unpack, void* arg, std::size_t length, std::uint64_t remote_addr,
                      std::uint64_t, Completion*) {
    unpack(arg, reinterpret_cast<const void*>(remote_addr), length);
    return Status::ok;
}

Status self_get_zcopy(Ep*, const Iov* iov, std::size_t iovcnt, std::uint64_t remote_addr, std::uint64_t,
                      Completion*) {
    const auto* src = reinterpret_cast<const std::uint8_t*>(remote_addr);
    for (std::size_t i = 0; i < iovcnt; ++i) {
        if (iov[i].length != 0) std::memcpy(const_cast<void*>(iov[i].buffer), src, iov[i].length);
        src += iov[i].length;
    }
    return Status::ok;
}

/** Applies @p op atomically at @p addr and returns the previous value. */
template <typename T>
T atomic_apply(AtomicOp op, T* addr, T value) {
    switch (op) {
    case AtomicOp::add: return __atomic_fetch_add(addr, value, __ATOMIC_SEQ_CST);
    case AtomicOp::and_: return __atomic_fetch_and(addr, value, __ATOMIC_SEQ_CST);
    case AtomicOp::or_: return __atomic_fetch_or(addr, value, __ATOMIC_SEQ_CST);
    case AtomicOp::xor_: return __atomic_fetch_xor(addr, value, __ATOMIC_SEQ_CST);
    case AtomicOp::swap: return __atomic_exchange_n(addr, value, __ATOMIC_SEQ_CST);
    case AtomicOp::cswap: break;
    }
    return 0;
}

template <typename T>
Status self_atomic_post(Ep*, AtomicOp op, T value, std::uint64_t remote_addr, std::uint64_t) {
    if (LOOM_UNLIKELY(op == AtomicOp::cswap || op == AtomicOp::swap)) return Status::unsupported;
    if (LOOM_UNLIKELY(remote_addr % sizeof(T) != 0)) return Status::invalid_param;
    (void)atomic_apply(op, reinterpret_cast<T*>(remote_addr), value);
    return Status::ok;
}

template <typename T>
Status self_atomic_fetch(Ep*, AtomicOp op, T value, T* result, std::uint64_t remote_addr, std::uint64_t,
                         Completion*) {
    if (LOOM_UNLIKELY(op == AtomicOp::cswap)) return Status::unsupported;
    if (LOOM_UNLIKELY(remote_addr % sizeof(T) != 0)) return Status::invalid_param;
    *result = atomic_apply(op, reinterpret_cast<T*>(remote_addr), value);
    return Status::ok;
}

template <typename T>
Status self_atomic_cswap(Ep*, T compare, T swap, std::uint64_t remote_addr, std::uint64_t, T* result,
                         Completion*) {
    if (LOOM_UNLIKELY(remote_addr % sizeof(T) != 0)) return Status::invalid_param;
    T expected = compare;
    __atomic_compare_exchange_n(reinterpret_cast<T*>(remote_addr), &expected, swap, false, __ATOMIC_SEQ_CST,
                                __ATOMIC_SEQ_CST);
    *result = expected;  // the previous value, whether or not the swap happened
    return Status::ok;
}

Status self_pending_add(Ep*, PendingReq*, unsigned) {
    return Status::busy;  // resources are always available: the caller should just retry now
}

void self_pending_purge(Ep*, PendingPurgeCallback, void*) {}

Status self_ep_flush(Ep*, unsigned, Completion*) { return Status::ok; }
Status self_ep_fence(Ep*, unsigned) { return Status::ok; }
unsigned self_iface_progress(Iface*) { return 0; }
Status self_iface_flush(Iface*, unsigned, Completion*) { return Status::ok; }
Status self_iface_fence(Iface*, unsigned) { return Status::ok; }

const IfaceOps SelfIface::kOps = {
    .ep_am_short = self_am_short,
    .ep_am_bcopy = self_am_bcopy,
    .ep_am_zcopy = self_am_zcopy,
    .ep_put_short = self_put_short,
    .ep_put_bcopy = self_put_bcopy,
    .ep_put_zcopy = self_put_zcopy,
    .ep_get_bcopy = self_get_bcopy,
    .ep_get_zcopy = self_get_zcopy,
    .ep_atomic32_post = self_atomic_post<std::uint32_t>,
    .ep_atomic64_post = self_atomic_post<std::uint64_t>,
    .ep_atomic32_fetch = self_atomic_fetch<std::uint32_t>,
    .ep_atomic64_fetch = self_atomic_fetch<std::uint64_t>,
    .ep_atomic32_cswap = self_atomic_cswap<std::uint32_t>,
    .ep_atomic64_cswap = self_atomic_cswap<std::uint64_t>,
    .ep_pending_add = self_pending_add,
    .ep_pending_purge = self_pending_purge,
    .ep_flush = self_ep_flush,
    .ep_fence = self_ep_fence,
    .iface_progress = self_iface_progress,
    .iface_flush = self_iface_flush,
    .iface_fence = self_iface_fence,
    .iface_release_desc = nullptr,
};

SelfIface::SelfIface(Md* md, Worker* worker, const TlResource& resource) : Iface(md, worker, resource, kOps) {
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
    attr.put = {.max_short = kMaxShort, .max_bcopy = SIZE_MAX, .min_zcopy = 0, .max_zcopy = SIZE_MAX,
                .max_iov = 16, .opt_zcopy_align = 1, .max_hdr = 0};
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
    auto it = reg.ifaces.find(iface.iface_id);
    if (it == reg.ifaces.end()) return fail(Status::unreachable, "no such self iface in this process (closed?)");
    if (target) *target = it->second;
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

/** The self md: nothing to register (same address space), keys are empty. */
class SelfMd final : public Md {
public:
    explicit SelfMd(const Component& component) : Md(component, "self") {}

    Status query(MdAttr& attr) const override {
        attr = {};
        attr.flags = MdAttr::kReg;
        attr.max_reg = SIZE_MAX;
        attr.rkey_packed_size = 0;
        attr.component_name = "self";
        return Status::ok;
    }

    std::vector<TlResource> query_tl_resources() const override {
        return {{"self", "memory", DeviceType::self}};
    }

    Result<std::unique_ptr<Iface>> iface_open(const TlResource& resource, Worker* worker,
                                              const IfaceParams&) override {
        if (resource.tl_name != "self") return Status::no_device;
        return std::unique_ptr<Iface>(new SelfIface(this, worker, resource));
    }

    Result<MemH> mem_reg(void* address, std::size_t, unsigned) override {
        // Any non-null handle will do: the memory is already reachable.
        return static_cast<MemH>(address ? address : reinterpret_cast<void*>(1));
    }

    Status mem_dereg(MemH) override { return Status::ok; }

    Status mkey_pack(MemH, std::uint8_t*) const override { return Status::ok; }
};

class SelfComponent final : public Component {
public:
    SelfComponent() : Component("self") {}

    std::vector<std::string> query_md_resources() const override { return {"self"}; }

    Result<std::unique_ptr<Md>> md_open(std::string_view md_name) const override {
        if (md_name != "self") return Status::no_device;
        return std::unique_ptr<Md>(new SelfMd(*this));
    }

    Result<Rkey> rkey_unpack(const std::uint8_t*, std::size_t length) const override {
        if (length != 0) return Status::invalid_param;
        return Rkey{};
    }
};

const SelfComponent g_component;

}  // namespace

}  // namespace loom::uct::self
