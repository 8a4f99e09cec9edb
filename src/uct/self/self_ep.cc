/**
 * The data path of self endpoints: every operation completes in its call. An active
 * message runs the target iface's handler directly, put/get are memcpy, atomics are
 * CPU atomics on local memory. Every put, get and atomic first checks its key and range
 * against the target md's key table (self_md.h): the memory is reachable, but a key
 * grants only its region. Ends with the ops table, kSelfOps.
 */
#include "uct/self/self_ep.h"

#include "uct/base/cpu_atomic.h"
#include "uct/self/self_iface.h"
#include "uct/self/self_log.h"
#include "uct/self/self_md.h"

#include "ucs/sys/compiler.h"

#include <cstring>

namespace loom::uct::self {

namespace {

SelfIface* target_of(Ep* ep) { return static_cast<SelfEp*>(ep)->target; }

LOOM_COLD LOOM_NOINLINE Status refuse(const char* op, std::uint64_t remote_addr, std::uint64_t length,
                                      const char* why) {
    LOOM_LOG_WARN("self: refused a remote {} at {:#x} length {}: {}", op, remote_addr, length, why);
    return Status::access_denied;
}

/**
 * ok when the key @p rkey (a RegionKey*, as unpacked) grants @p access over
 * [remote_addr, remote_addr + length) in the target's memory domain; otherwise
 * access_denied with one warning line. A few predictable branches on the fast path.
 */
Status check_key(Ep* ep, const char* op, std::uint64_t rkey, std::uint64_t remote_addr, std::uint64_t length,
                 unsigned access) {
    const auto* key = reinterpret_cast<const RegionKey*>(rkey);
    if (LOOM_UNLIKELY(key == nullptr)) return refuse(op, remote_addr, length, "no remote key");
    const char* why = nullptr;
    const auto* md = static_cast<const SelfMd*>(target_of(ep)->md());
    if (LOOM_LIKELY(md->keys().check_access(key->key_id, key->cookie, remote_addr, length, access, &why))) {
        return Status::ok;
    }
    return refuse(op, remote_addr, length, why);
}

std::size_t iov_total(const Iov* iov, std::size_t iovcnt) {
    std::size_t total = 0;
    for (std::size_t i = 0; i < iovcnt; ++i) total += iov[i].length;
    return total;
}

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

Status self_put_short(Ep* ep, const void* buffer, unsigned length, std::uint64_t remote_addr,
                      std::uint64_t rkey) {
    if (Status s = check_key(ep, "put", rkey, remote_addr, length, kAccessRemotePut);
        LOOM_UNLIKELY(s != Status::ok)) {
        return s;
    }
    if (length != 0) std::memcpy(reinterpret_cast<void*>(remote_addr), buffer, length);
    return Status::ok;
}

ssize_t self_put_bcopy(Ep* ep, PackCallback pack, void* arg, std::uint64_t remote_addr, std::uint64_t rkey) {
    // Packed on the stack first: the length, which the key's range is checked against, is
    // known only once packed.
    alignas(8) std::uint8_t buf[kMaxBcopy];
    std::size_t length = pack(buf, arg);
    if (LOOM_UNLIKELY(length > kMaxBcopy)) {
        LOOM_FATAL("put_bcopy: pack callback wrote {} bytes past a {}-byte buffer", length, kMaxBcopy);
    }
    if (Status s = check_key(ep, "put", rkey, remote_addr, length, kAccessRemotePut);
        LOOM_UNLIKELY(s != Status::ok)) {
        return static_cast<ssize_t>(s);
    }
    if (length != 0) std::memcpy(reinterpret_cast<void*>(remote_addr), buf, length);
    return static_cast<ssize_t>(length);
}

Status self_put_zcopy(Ep* ep, const Iov* iov, std::size_t iovcnt, std::uint64_t remote_addr,
                      std::uint64_t rkey, Completion*) {
    if (Status s = check_key(ep, "put", rkey, remote_addr, iov_total(iov, iovcnt), kAccessRemotePut);
        LOOM_UNLIKELY(s != Status::ok)) {
        return s;
    }
    auto* dest = reinterpret_cast<std::uint8_t*>(remote_addr);
    for (std::size_t i = 0; i < iovcnt; ++i) {
        if (iov[i].length != 0) std::memcpy(dest, iov[i].buffer, iov[i].length);
        dest += iov[i].length;
    }
    return Status::ok;
}

Status self_get_bcopy(Ep* ep, UnpackCallback unpack, void* arg, std::size_t length, std::uint64_t remote_addr,
                      std::uint64_t rkey, Completion*) {
    if (Status s = check_key(ep, "get", rkey, remote_addr, length, kAccessRemoteGet);
        LOOM_UNLIKELY(s != Status::ok)) {
        return s;
    }
    unpack(arg, reinterpret_cast<const void*>(remote_addr), length);
    return Status::ok;
}

Status self_get_zcopy(Ep* ep, const Iov* iov, std::size_t iovcnt, std::uint64_t remote_addr,
                      std::uint64_t rkey, Completion*) {
    if (Status s = check_key(ep, "get", rkey, remote_addr, iov_total(iov, iovcnt), kAccessRemoteGet);
        LOOM_UNLIKELY(s != Status::ok)) {
        return s;
    }
    const auto* src = reinterpret_cast<const std::uint8_t*>(remote_addr);
    for (std::size_t i = 0; i < iovcnt; ++i) {
        if (iov[i].length != 0) std::memcpy(const_cast<void*>(iov[i].buffer), src, iov[i].length);
        src += iov[i].length;
    }
    return Status::ok;
}

template <typename T>
Status self_atomic_post(Ep* ep, AtomicOp op, T value, std::uint64_t remote_addr, std::uint64_t rkey) {
    if (LOOM_UNLIKELY(op == AtomicOp::cswap || op == AtomicOp::swap)) return Status::unsupported;
    if (LOOM_UNLIKELY(remote_addr % sizeof(T) != 0)) return Status::invalid_param;
    if (Status s = check_key(ep, "atomic", rkey, remote_addr, sizeof(T), kAccessRemoteAtomic);
        LOOM_UNLIKELY(s != Status::ok)) {
        return s;
    }
    (void)cpu_atomic<T>(op, reinterpret_cast<T*>(remote_addr), value);
    return Status::ok;
}

template <typename T>
Status self_atomic_fetch(Ep* ep, AtomicOp op, T value, T* result, std::uint64_t remote_addr,
                         std::uint64_t rkey, Completion*) {
    if (LOOM_UNLIKELY(op == AtomicOp::cswap)) return Status::unsupported;
    if (LOOM_UNLIKELY(remote_addr % sizeof(T) != 0)) return Status::invalid_param;
    if (Status s = check_key(ep, "atomic", rkey, remote_addr, sizeof(T), kAccessRemoteAtomic);
        LOOM_UNLIKELY(s != Status::ok)) {
        return s;
    }
    *result = cpu_atomic<T>(op, reinterpret_cast<T*>(remote_addr), value);
    return Status::ok;
}

template <typename T>
Status self_atomic_cswap(Ep* ep, T compare, T swap, std::uint64_t remote_addr, std::uint64_t rkey, T* result,
                         Completion*) {
    if (LOOM_UNLIKELY(remote_addr % sizeof(T) != 0)) return Status::invalid_param;
    if (Status s = check_key(ep, "atomic", rkey, remote_addr, sizeof(T), kAccessRemoteAtomic);
        LOOM_UNLIKELY(s != Status::ok)) {
        return s;
    }
    *result = cpu_atomic<T>(AtomicOp::cswap, reinterpret_cast<T*>(remote_addr), swap, compare);
    return Status::ok;
}

Status self_pending_add(Ep*, PendingReq*, unsigned) {
    return Status::busy;  // resources are always available: the caller should just retry now
}

void self_pending_purge(Ep*, PendingPurgeCallback, void*) {}

/** Nothing is ever queued (self_pending_add answers busy): there is nothing to remove. */
Status self_pending_remove(Ep*, PendingReq*) {
    return Status::no_element;
}

Status self_ep_flush(Ep*, unsigned, Completion*) { return Status::ok; }
Status self_ep_fence(Ep*, unsigned) { return Status::ok; }
unsigned self_iface_progress(Iface*) { return 0; }
Status self_iface_flush(Iface*, unsigned, Completion*) { return Status::ok; }
Status self_iface_fence(Iface*, unsigned) { return Status::ok; }

}  // namespace

const IfaceOps kSelfOps = {
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
    .ep_pending_remove = self_pending_remove,
    .ep_flush = self_ep_flush,
    .ep_fence = self_ep_fence,
    .iface_progress = self_iface_progress,
    .iface_flush = self_iface_flush,
    .iface_fence = self_iface_fence,
    .iface_release_desc = nullptr,
};

}  // namespace loom::uct::self
