/**
 * Put, get, atomics, fence and the RMA part of flush.
 *
 * Every operation of an endpoint goes on its RMA lane (the rendezvous lane, else the AM
 * lane). A put picks its flavour by size from the lane's limits: short up to
 * put.max_short, bcopy up to put.max_bcopy, then zero-copy in put.max_zcopy pieces (the
 * local buffer registered for the operation when the memory domain needs a handle and the
 * caller gave no mapping); non-contiguous data goes in bcopy fragments. A get is bcopy up
 * to get.max_bcopy, then zero-copy pieces. Short and bcopy puts and posted atomics
 * complete in the call without a request; everything else takes a request, which is in
 * Ep::outstanding until it completes.
 *
 * Transfers that complete later (zero-copy, get, fetching atomics, the transports' flush)
 * report to an RmaOp record from the worker's pool, not to the request: the record names
 * its request by a generation-checked id (Worker::req_table), so a request completed
 * meanwhile by a peer failure or a forced close is simply not found, and its memory can
 * be reused at once. While a request issues, it holds one reference of its record; when it
 * has issued everything the reference is dropped and the last transfer to finish
 * completes it.
 *
 * A request that finds the lane busy waits in the lane's pending queue (send_request_start:
 * counted by Ep::queued_on(lane)); later operations
 * queue behind it, so they stay in order.
 */
#include "ucp/rma/rma.h"

#include "ucp/core/ucp_log.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace loom::ucp {

/** Completion record of transfers in flight; see the file comment. */
struct RmaOp {
    uct::Completion comp;
    Worker* worker;
    std::uint64_t req_id;   ///< the request's wire id (with generation)
    std::uint64_t fetched;  ///< fetching atomics: the previous value
    bool last;              ///< the request issued everything: complete it when the count drops to zero
};

namespace {

/** Flush requests: where their transport-level RMA flush stands (Request::rma.phase). */
enum RmaFlushPhase : std::uint8_t { kFlushIssuing = 1, kFlushWaiting = 2, kFlushDone = 3 };

const WorkerIface& lane_iface(const Ep* ep, std::uint8_t lane) {
    return ep->worker->ifaces[ep->lanes[lane].iface];
}

/** Requests of @p ep's RMA lane queued before a new one (which must not overtake them). */
std::uint32_t queued_on_lane(const Ep* ep, std::uint8_t lane) {
    return ep->queued_on(lane);
}

/** Completes operation @p req with @p status (or the error of an earlier part). */
void finish(Request* req, Status status, const RmaOp* op) {
    if (status == Status::ok) status = req->rma.error;
    if (status == Status::ok && req->rma.reply != nullptr && op != nullptr) {
        std::memcpy(req->rma.reply, &op->fetched, req->rma.size);  // little endian: the low bytes
    }
    req->rma.op = nullptr;
    req->rma.dt.finish();
    req->worker->complete(req, status);
}

/** What the end of record @p op means for its request @p req (which is out of the id table). */
void op_settle(Request* req, RmaOp* op) {
    req->rma.op = nullptr;
    if (op->comp.status != Status::ok && req->rma.error == Status::ok) req->rma.error = op->comp.status;
    if (req->flags & kReqFlush) {
        if (op->last) req->rma.phase = kFlushDone;
    } else if (op->last) {
        finish(req, Status::ok, op);
    }
    // Otherwise the request waits in a pending queue and takes a new record when it resumes.
}

void op_done(uct::Completion* comp) {
    auto* op = reinterpret_cast<RmaOp*>(reinterpret_cast<char*>(comp) - offsetof(RmaOp, comp));
    Worker& w = *op->worker;
    // nullptr when the request completed meanwhile (peer failure, forced close): nothing to do.
    if (Request* req = w.req_table.take(op->req_id)) op_settle(req, op);
    rma_of(w).ops.put(op);
}

/** @p req's record with one more issuing reference; a new record when it has none. */
RmaOp* op_acquire(Request* req) {
    if (RmaOp* op = req->rma.op) {
        ++op->comp.count;
        return op;
    }
    Worker& w = *req->worker;
    auto* op = static_cast<RmaOp*>(rma_of(w).ops.get());
    if (LOOM_UNLIKELY(op == nullptr)) return nullptr;
    op->comp.func = op_done;
    op->comp.count = 1;
    op->comp.status = Status::ok;
    op->worker = &w;
    op->req_id = 0;
    op->fetched = 0;
    op->last = false;
    req->rma.op = op;
    return op;
}

/**
 * Drops the issuing reference; @p last: the request issued everything. With nothing in
 * flight the record ends here (the common case of transports that complete in the call);
 * otherwise the request gets an id, by which the last transfer to finish finds it.
 */
void op_release(Request* req, bool last) {
    RmaOp* op = req->rma.op;
    Worker& w = *op->worker;
    op->last = last;
    if (op->comp.count == 1) {
        op->comp.count = 0;
        if (req->id != 0) w.req_table.remove(req);
        op_settle(req, op);
        rma_of(w).ops.put(op);
        return;
    }
    if (req->id == 0 && LOOM_UNLIKELY(w.req_table.insert(req) != Status::ok)) {
        // Nothing could find the request later: fail it now; its transfers end unseen.
        LOOM_LOG_ERROR("ucp: out of memory for the id of an RMA request; it fails");
        req->rma.op = nullptr;
        --op->comp.count;  // the record ends with its last transfer (op_done finds no request)
        if (req->flags & kReqFlush) {
            req->rma.error = Status::no_memory;
            req->rma.phase = kFlushDone;
        } else {
            finish(req, Status::no_memory, nullptr);
        }
        return;
    }
    op->req_id = w.req_table.wire_id(req);
    --op->comp.count;  // transfers remain: no callback here
}

/** Issues one transfer counted in @p op; returns what the transport returned, the count adjusted. */
template <typename Issue>
Status counted(RmaOp* op, Issue&& issue) {
    ++op->comp.count;
    Status s = issue();
    if (s != Status::in_progress) --op->comp.count;  // done, refused or not started: no callback comes
    return s;
}

LOOM_COLD void record_error(RmaOp* op, Status s) {
    if (op->comp.status == Status::ok) op->comp.status = s;
}

/** Fences the lane before the first transfer of a request that came after a deferred fence. */
void apply_fence(Request* req, uct::Ep* uep) {
    if (LOOM_UNLIKELY(req->rma.fence)) {
        (void)uct::ep_fence(uep, 0);
        req->rma.fence = 0;
    }
}

/**
 * The local buffer's handle for zero-copy on @p req's lane: none where the memory domain
 * needs none, the caller's mapping, or a registration for this operation (released by
 * Worker::complete through kReqRelease). Registration costs little next to copying a large
 * buffer through bcopy fragments, and rc's registration cache makes a repeated buffer a
 * lookup. no_memory-like statuses when registration fails.
 */
Status zcopy_memh(Request* req, unsigned access, uct::MemH& memh) {
    const ContextResource& rsc = *lane_iface(req->ep, req->lane).rsc;
    memh = uct::kMemHNull;
    if (!(rsc.md_attr.flags & uct::MdAttr::kNeedMemh)) return Status::ok;
    if (req->memh != uct::kMemHNull) {
        memh = req->memh;
        return Status::ok;
    }
    if (req->rma.mapping != nullptr) {
        memh = req->rma.mapping->memh_of(rsc.md);
        if (memh != uct::kMemHNull) return Status::ok;
    }
    auto reg = rsc.md->mem_reg(req->rma.dt.buffer, req->rma.dt.length, access);
    if (!reg) return reg.status();
    req->memh = *reg;
    req->flags |= kReqRelease;
    req->release = request_release_memh;
    memh = *reg;
    return Status::ok;
}

struct PackArg {
    DtState* dt;
    std::size_t offset;
    std::size_t length;
};

std::size_t pack_piece(void* dest, void* a) {
    auto* arg = static_cast<PackArg*>(a);
    return arg->dt->pack(arg->offset, dest, arg->length);
}

struct BytesArg {
    const void* src;
    std::size_t length;
};

std::size_t pack_bytes(void* dest, void* a) {
    auto* arg = static_cast<BytesArg*>(a);
    std::memcpy(dest, arg->src, arg->length);
    return arg->length;
}

/** get_bcopy: the fetched bytes go straight to their place in the buffer (arg). */
void unpack_to(void* dest, const void* data, std::size_t length) {
    if (length != 0) std::memcpy(dest, data, length);
}

/** Puts the bytes of @p req from rma.offset on in bcopy fragments. */
Status put_bcopy_fragments(Request* req, uct::Ep* uep, std::size_t max_bcopy) {
    DtState& dt = req->rma.dt;
    const std::size_t length = dt.length;
    while (req->rma.offset < length) {
        const std::size_t chunk = std::min(length - req->rma.offset, max_bcopy);
        PackArg arg{&dt, req->rma.offset, chunk};
        ssize_t n = uct::ep_put_bcopy(uep, pack_piece, &arg, req->rma.remote_addr + req->rma.offset,
                                      req->rma.uct_rkey);
        if (n == static_cast<ssize_t>(Status::no_resource)) return Status::no_resource;
        if (n < 0) {
            finish(req, static_cast<Status>(n), nullptr);
            return Status::ok;
        }
        req->rma.offset += chunk;
    }
    finish(req, Status::ok, nullptr);
    return Status::ok;
}

/**
 * Issues @p req's transfers in pieces of @p max bytes from rma.offset on, each through
 * @p issue(buffer, length, remote_addr, comp). no_resource: queue the request.
 */
template <typename Issue>
Status pieces_progress(Request* req, std::size_t max, Issue&& issue) {
    RmaOp* op = op_acquire(req);
    if (op == nullptr) {
        finish(req, Status::no_memory, nullptr);
        return Status::ok;
    }
    const std::size_t length = req->rma.dt.length;
    auto* buffer = static_cast<std::uint8_t*>(req->rma.dt.buffer);
    while (req->rma.offset < length) {
        const std::size_t chunk = std::min(length - req->rma.offset, max);
        Status s = counted(op, [&] {
            return issue(buffer + req->rma.offset, chunk, req->rma.remote_addr + req->rma.offset, &op->comp);
        });
        if (s == Status::no_resource) {
            op_release(req, false);
            return Status::no_resource;
        }
        if (s != Status::ok && s != Status::in_progress) {
            record_error(op, s);
            break;  // the rest is not issued: the request fails once what is in flight finished
        }
        req->rma.offset += chunk;
    }
    op_release(req, true);
    return Status::ok;
}

/** The endpoint's RMA lane as a request uses it. */
struct RmaLane {
    uct::Ep* uep;
    const uct::IfaceAttr& attr;
};
RmaLane rma_lane_of(Request* req) {
    Ep* ep = req->ep;
    return {ep->lanes[req->lane].ep, lane_iface(ep, req->lane).attr};
}

Status put_short_progress(Request* req) {
    const RmaLane lane = rma_lane_of(req);
    apply_fence(req, lane.uep);
    DtState& dt = req->rma.dt;
    Status s = uct::ep_put_short(lane.uep, dt.buffer, static_cast<unsigned>(dt.length), req->rma.remote_addr,
                                 req->rma.uct_rkey);
    if (s == Status::no_resource) return s;
    finish(req, s, nullptr);
    return Status::ok;
}

Status put_bcopy_progress(Request* req) {
    const RmaLane lane = rma_lane_of(req);
    apply_fence(req, lane.uep);
    return put_bcopy_fragments(req, lane.uep, std::max<std::size_t>(lane.attr.put.max_bcopy, 1));
}

Status put_zcopy_progress(Request* req) {
    const RmaLane lane = rma_lane_of(req);
    apply_fence(req, lane.uep);
    uct::MemH memh;
    if (Status s = zcopy_memh(req, uct::kAccessLocalRead, memh); s != Status::ok) {
        finish(req, s, nullptr);
        return Status::ok;
    }
    const std::uint64_t rkey = req->rma.uct_rkey;
    return pieces_progress(req, std::max<std::size_t>(lane.attr.put.max_zcopy, 1),
                           [&](std::uint8_t* buf, std::size_t n, std::uint64_t raddr, uct::Completion* comp) {
                               uct::Iov iov{buf, n, memh};
                               return uct::ep_put_zcopy(lane.uep, &iov, 1, raddr, rkey, comp);
                           });
}

Status get_bcopy_progress(Request* req) {
    const RmaLane lane = rma_lane_of(req);
    apply_fence(req, lane.uep);
    const std::uint64_t rkey = req->rma.uct_rkey;
    return pieces_progress(req, std::max<std::size_t>(lane.attr.get.max_bcopy, 1),
                           [&](std::uint8_t* buf, std::size_t n, std::uint64_t raddr, uct::Completion* comp) {
                               return uct::ep_get_bcopy(lane.uep, unpack_to, buf, n, raddr, rkey, comp);
                           });
}

Status get_zcopy_progress(Request* req) {
    const RmaLane lane = rma_lane_of(req);
    apply_fence(req, lane.uep);
    uct::MemH memh;
    if (Status s = zcopy_memh(req, uct::kAccessLocalWrite, memh); s != Status::ok) {
        finish(req, s, nullptr);
        return Status::ok;
    }
    const std::uint64_t rkey = req->rma.uct_rkey;
    return pieces_progress(req, std::max<std::size_t>(lane.attr.get.max_zcopy, 1),
                           [&](std::uint8_t* buf, std::size_t n, std::uint64_t raddr, uct::Completion* comp) {
                               uct::Iov iov{buf, n, memh};
                               return uct::ep_get_zcopy(lane.uep, &iov, 1, raddr, rkey, comp);
                           });
}

Status atomic_post(uct::Ep* uep, uct::AtomicOp op, unsigned size, std::uint64_t value,
                   std::uint64_t remote_addr, std::uint64_t rkey) {
    return size == 4 ? uct::ep_atomic32_post(uep, op, static_cast<std::uint32_t>(value), remote_addr, rkey)
                     : uct::ep_atomic64_post(uep, op, value, remote_addr, rkey);
}

Status atomic_progress(Request* req) {
    Ep* ep = req->ep;
    uct::Ep* uep = ep->lanes[req->lane].ep;
    apply_fence(req, uep);
    const auto aop = static_cast<uct::AtomicOp>(req->rma.opcode);
    const unsigned size = req->rma.size;
    const std::uint64_t raddr = req->rma.remote_addr;
    const std::uint64_t rkey = req->rma.uct_rkey;
    if (req->rma.reply == nullptr) {
        Status s = atomic_post(uep, aop, size, req->rma.value, raddr, rkey);
        if (s == Status::no_resource) return s;
        finish(req, s, nullptr);
        return Status::ok;
    }
    RmaOp* op = op_acquire(req);
    if (op == nullptr) {
        finish(req, Status::no_memory, nullptr);
        return Status::ok;
    }
    auto* result32 = reinterpret_cast<std::uint32_t*>(&op->fetched);
    const auto value32 = static_cast<std::uint32_t>(req->rma.value);
    const auto compare32 = static_cast<std::uint32_t>(req->rma.compare);
    Status s = counted(op, [&] {
        if (aop == uct::AtomicOp::cswap) {
            return size == 4
                       ? uct::ep_atomic32_cswap(uep, compare32, value32, raddr, rkey, result32, &op->comp)
                       : uct::ep_atomic64_cswap(uep, req->rma.compare, req->rma.value, raddr, rkey,
                                                &op->fetched, &op->comp);
        }
        return size == 4
                   ? uct::ep_atomic32_fetch(uep, aop, value32, result32, raddr, rkey, &op->comp)
                   : uct::ep_atomic64_fetch(uep, aop, req->rma.value, &op->fetched, raddr, rkey, &op->comp);
    });
    if (s == Status::no_resource) {
        op_release(req, false);
        return Status::no_resource;
    }
    if (s != Status::ok && s != Status::in_progress) record_error(op, s);
    op_release(req, true);
    return Status::ok;
}

// --- the RMA protocols of the endpoint's table (src/ucp/proto) ---------------------------------
//
// The lane's limits choose among them, as its attributes say (short up to put.max_short;
// bcopy up to max_bcopy where zero-copy exists, else in fragments of any size): the model
// prices them alike, the preference and those limits decide.

/** The RMA lane's cost line: one message's latency and overhead, then its bandwidth. */
const char* rma_init(const ProtoInit& init, ProtoCaps& caps, std::uint64_t cap) {
    caps.lane = rma_lane(&init.ep);
    const uct::IfaceAttr& attr = init.lane_iface(caps.lane).attr;
    if (!(attr.cap_flags & cap)) return "the RMA lane lacks the operation";
    caps.cost = {attr.latency.c + attr.overhead, attr.bandwidth_dedicated > 0 ? 1.0 / attr.bandwidth_dedicated : 0};
    return nullptr;
}

const char* put_short_init(const ProtoInit& init, ProtoCaps& caps) {
    if (const char* why = rma_init(init, caps, uct::kCapPutShort)) return why;
    caps.max_size = init.lane_iface(caps.lane).attr.put.max_short;
    return nullptr;
}

/** The put or get limits and capability bits of the RMA lane, by init.op. */
struct RmaKind {
    const uct::OpLimits& limits;
    std::uint64_t bcopy, zcopy;
};
RmaKind rma_kind(const ProtoInit& init, std::uint8_t lane) {
    const uct::IfaceAttr& attr = init.lane_iface(lane).attr;
    if (init.op == ProtoOp::put) return {attr.put, uct::kCapPutBcopy, uct::kCapPutZcopy};
    return {attr.get, uct::kCapGetBcopy, uct::kCapGetZcopy};
}

/** Put or get bcopy: up to max_bcopy where zero-copy takes the rest, else in pieces of any size. */
const char* bcopy_init(const ProtoInit& init, ProtoCaps& caps) {
    const RmaKind kind = rma_kind(init, rma_lane(&init.ep));
    if (const char* why = rma_init(init, caps, kind.bcopy)) return why;
    if (init.contig && (init.lane_iface(caps.lane).attr.cap_flags & kind.zcopy)) caps.max_size = kind.limits.max_bcopy;
    return nullptr;
}

/** Put or get zcopy: above max_bcopy where bcopy takes the rest, else every size. */
const char* zcopy_init(const ProtoInit& init, ProtoCaps& caps) {
    const RmaKind kind = rma_kind(init, rma_lane(&init.ep));
    if (const char* why = rma_init(init, caps, kind.zcopy)) return why;
    if (init.lane_iface(caps.lane).attr.cap_flags & kind.bcopy) caps.min_size = kind.limits.max_bcopy + 1;
    return nullptr;
}

const char* atomic_init(const ProtoInit& init, ProtoCaps& caps) {
    if (const char* why = rma_init(init, caps, uct::kCapAtomic32 | uct::kCapAtomic64)) return why;
    caps.min_size = 4;  // the operand: 4 or 8 bytes
    caps.max_size = 8;
    return nullptr;
}

/**
 * Who performs the lane's atomics (LOOM_ATOMIC_MODE): the one atomic path of every word this
 * endpoint's atomics reach.
 */
std::string atomic_describe(const ProtoInit& init, const ProtoCaps& caps) {
    const uct::IfaceAttr& attr = init.lane_iface(caps.lane).attr;
    if (attr.cap_flags & uct::kCapAtomicDevice)
        return " by the NIC (LOOM_ATOMIC_MODE=device; not atomic with CPU atomics)";
    return " by CPU atomics (atomic with every other transport's)";
}

/** The piece size of a bcopy RMA, when the lane has a limit. */
std::string pieces(std::size_t max, const char* what) {
    return max == SIZE_MAX ? std::string{} : fmt::format(" ({} B {})", max, what);
}

std::string put_bcopy_describe(const ProtoInit& init, const ProtoCaps& caps) {
    return pieces(init.lane_iface(caps.lane).attr.put.max_bcopy, "fragments");
}

std::string get_bcopy_describe(const ProtoInit& init, const ProtoCaps& caps) {
    return pieces(init.lane_iface(caps.lane).attr.get.max_bcopy, "pieces");
}

}  // namespace

const Proto kPutShort{"put short", "the bytes inline in one transport operation", proto_op_bit(ProtoOp::put), false,
                      true, 0, put_short_init, put_short_progress, nullptr};
const Proto kPutBcopy{"put bcopy", "the bytes copied into the transport's buffers, in fragments",
                      proto_op_bit(ProtoOp::put), true, false, 1, bcopy_init, put_bcopy_progress,
                      put_bcopy_describe};
const Proto kPutZcopy{"put zcopy", "from the registered buffer (registered for the operation when not mapped)",
                      proto_op_bit(ProtoOp::put), false, false, 2, zcopy_init, put_zcopy_progress, nullptr};
const Proto kGetBcopy{"get bcopy", "the bytes copied out of the transport's buffers, in pieces",
                      proto_op_bit(ProtoOp::get), false, false, 1, bcopy_init, get_bcopy_progress,
                      get_bcopy_describe};
const Proto kGetZcopy{"get zcopy", "into the registered buffer (registered for the operation when not mapped)",
                      proto_op_bit(ProtoOp::get), false, false, 2, zcopy_init, get_zcopy_progress, nullptr};
const Proto kAtomic{"atomic",
                    "the transport's atomic (posted, or fetching into a completion record)",
                    proto_op_bit(ProtoOp::atomic),
                    false,
                    false,
                    0,
                    atomic_init,
                    atomic_progress,
                    atomic_describe};
LOOM_PROTO_REGISTER(kPutShort);
LOOM_PROTO_REGISTER(kPutBcopy);
LOOM_PROTO_REGISTER(kPutZcopy);
LOOM_PROTO_REGISTER(kGetBcopy);
LOOM_PROTO_REGISTER(kGetZcopy);
LOOM_PROTO_REGISTER(kAtomic);

namespace {

// --- pending queue of an RMA lane that is not the AM lane ----------------------------------------

/** How an RMA request fails in the send queue (refused, or its endpoint went): its records are dropped too. */
void fail_request(Request* req, Status status) { finish(req, status, nullptr); }

/** Common start of every request: in the endpoint's outstanding list, then run or queued. */
void start(Request* req, Ep* ep, std::uint64_t remote_addr, const RmaRkey* rkey, ProtoProgress progress,
           const Mem* mapping) {
    req->flags |= kReqRma | kReqInEpList;
    req->ep = ep;
    req->rma.remote_addr = remote_addr;
    req->rma.offset = 0;
    req->rma.uct_rkey = rkey->uct_rkey;
    req->rma.mapping = mapping;
    req->progress = progress;
    req->memh = uct::kMemHNull;
    req->rma.op = nullptr;
    req->lane = rma_lane(ep);
    req->rma.fence = (ep->rma_flags & kRmaFence) ? 1 : 0;
    ep->rma_flags &= static_cast<std::uint8_t>(~kRmaFence);
    req->rma.error = Status::ok;
    ep->outstanding.push_back(*req);
    (void)send_request_start(req, req->lane, fail_request);  // fails the request itself on errors
}

// --- logging of refused operations ------------------------------------------------------------

LOOM_COLD Status foreign_key(const Ep* ep, const RmaRkey* rkey) {
    LOOM_LOG_ERROR(
        "ucp: a remote key unpacked on an endpoint to worker {:016x} (iface {}) used on an endpoint to "
        "worker {:016x} (iface {}); unpack it on this endpoint",
        rkey->remote_uuid, rkey->iface, ep->remote_uuid, ep->lanes[rma_lane(ep)].iface);
    return Status::invalid_param;
}

LOOM_COLD Status outside_key(const RmaRkey* rkey, std::uint64_t addr, std::size_t length, unsigned access) {
    LOOM_LOG_ERROR(
        "ucp: remote access to {:#x}+{} (rights {:#x}) is outside the remote key's region {:#x}+{} "
        "(rights {:#x})",
        addr, length, access, rkey->address, rkey->length, static_cast<unsigned>(rkey->access));
    return Status::access_denied;
}

LOOM_COLD Status ep_unusable(const Ep* ep) {
    return (ep->flags & kEpFailed) ? ep->failure : Status::not_connected;
}

LOOM_COLD Status missing_feature(const char* what, const char* feature) {
    LOOM_LOG_ERROR("ucp: {} needs a context created with {}", what, feature);
    return Status::unsupported;
}

}  // namespace

// --- entry points ----------------------------------------------------------------------------

Status rma_check_failed(Ep* ep, const RmaRkey* rkey, std::uint64_t remote_addr, std::size_t length,
                        unsigned access) {
    if (ep->flags & (kEpFailed | kEpClosing)) return ep_unusable(ep);
    if (rkey->remote_uuid != ep->remote_uuid || rkey->iface != ep->lanes[rma_lane(ep)].iface) {
        return foreign_key(ep, rkey);
    }
    if (!(rkey->features & kFeatureRma)) return missing_feature("put and get", "LOOM_FEATURE_RMA");
    if (!rkey->allows(remote_addr, length, access)) return outside_key(rkey, remote_addr, length, access);
    // Only idle was left: the endpoint's first operation.
    return ep->worker->ep_first_use(ep);
}

ssize_t rma_put_bcopy_bytes(uct::Ep* ep, const void* buffer, std::size_t length, std::uint64_t remote_addr,
                            std::uint64_t rkey) {
    BytesArg arg{buffer, length};
    return uct::ep_put_bcopy(ep, pack_bytes, &arg, remote_addr, rkey);
}

void rma_start_transfer(Request* req, Ep* ep, std::uint64_t remote_addr, const RmaRkey* rkey, bool get,
                        const Mem* memh) {
    req->rma.reply = nullptr;
    req->rma.size = 0;
    const ProtoRange* range = ep->protos->select(get ? ProtoOp::get : ProtoOp::put, req->rma.dt.contig(),
                                                 req->rma.dt.length);
    if (LOOM_UNLIKELY(range == nullptr)) {
        LOOM_LOG_ERROR("ucp: the RMA lane of the endpoint to {:016x} cannot {} {} bytes", ep->remote_uuid,
                       get ? "get" : "put", req->rma.dt.length);
        req->rma.dt.finish();
        req->worker->complete(req, Status::unsupported);
        return;
    }
    start(req, ep, remote_addr, rkey, range->progress, memh);
}

Status rma_atomic_check(Ep* ep, const RmaRkey* rkey, uct::AtomicOp op, unsigned size,
                        std::uint64_t remote_addr) {
    if (LOOM_UNLIKELY(ep->flags & (kEpFailed | kEpClosing))) return ep_unusable(ep);
    if (LOOM_UNLIKELY(rkey->remote_uuid != ep->remote_uuid || rkey->iface != ep->lanes[rma_lane(ep)].iface)) {
        return foreign_key(ep, rkey);
    }
    if (LOOM_UNLIKELY(!(rkey->features & (size == 4 ? kFeatureAmo32 : kFeatureAmo64)))) {
        return missing_feature(size == 4 ? "a 32-bit atomic" : "a 64-bit atomic",
                               size == 4 ? "LOOM_FEATURE_AMO32" : "LOOM_FEATURE_AMO64");
    }
    if (LOOM_UNLIKELY(!rkey->allows(remote_addr, size, uct::kAccessRemoteAtomic))) {
        return outside_key(rkey, remote_addr, size, uct::kAccessRemoteAtomic);
    }
    const WorkerIface& wi = lane_iface(ep, rma_lane(ep));
    const std::uint64_t ops = size == 4 ? wi.attr.atomic32_ops : wi.attr.atomic64_ops;
    const std::uint64_t cap = size == 4 ? uct::kCapAtomic32 : uct::kCapAtomic64;
    if (LOOM_UNLIKELY(!(wi.attr.cap_flags & cap) || !(ops & uct::atomic_op_bit(op)))) {
        static const char* const kNames[] = {"add", "and", "or", "xor", "swap", "cswap"};
        if (ep->worker->context.config().atomic_mode == AtomicMode::device &&
            !(wi.attr.cap_flags & uct::kCapAtomicDevice)) {
            LOOM_LOG_ERROR(
                "ucp: LOOM_ATOMIC_MODE=device: the RMA lane of the endpoint ({}/{}) would perform the "
                "{}-bit atomic {} with CPU atomics, which are not atomic with the NIC's; use "
                "LOOM_ATOMIC_MODE=cpu",
                wi.rsc->tl.tl_name, wi.rsc->tl.dev_name, size * 8, kNames[static_cast<unsigned>(op)]);
        } else {
            LOOM_LOG_ERROR("ucp: the RMA lane of the endpoint ({}/{}) has no {}-bit atomic {}",
                           wi.rsc->tl.tl_name, wi.rsc->tl.dev_name, size * 8,
                           kNames[static_cast<unsigned>(op)]);
        }
        return Status::unsupported;
    }
    // Checked: an idle endpoint's first operation (a refused one does not wake it).
    if (LOOM_UNLIKELY(ep->flags & kEpIdle)) return ep->worker->ep_first_use(ep);
    return Status::ok;
}

Status rma_atomic_post_immediate(Ep* ep, uct::AtomicOp op, unsigned size, std::uint64_t value,
                                 std::uint64_t remote_addr, const RmaRkey* rkey) {
    const std::uint8_t lane = rma_lane(ep);
    if (LOOM_UNLIKELY((ep->rma_flags & kRmaFence) || queued_on_lane(ep, lane) != 0))
        return Status::no_resource;
    return atomic_post(ep->lanes[lane].ep, op, size, value, remote_addr, rkey->uct_rkey);
}

void rma_start_atomic(Request* req, Ep* ep, uct::AtomicOp op, unsigned size, std::uint64_t value,
                      std::uint64_t compare, void* reply, std::uint64_t remote_addr, const RmaRkey* rkey) {
    req->rma.dt = DtState{};
    req->rma.opcode = static_cast<std::uint8_t>(op);
    req->rma.size = static_cast<std::uint8_t>(size);
    req->rma.value = value;
    req->rma.compare = compare;
    req->rma.reply = reply;
    const ProtoRange* range = ep->protos->select(ProtoOp::atomic, true, size);
    // rma_atomic_check refused what the lane cannot do.
    start(req, ep, remote_addr, rkey, range != nullptr ? range->progress : atomic_progress, nullptr);
}

Status rma_ep_fence(Ep* ep) {
    if (ep->flags & kEpFailed) return ep->failure;
    const std::uint8_t lane = rma_lane(ep);
    if (queued_on_lane(ep, lane) != 0) {
        // Queued requests are issued later: the fence goes with the next new operation.
        ep->rma_flags |= kRmaFence;
        return Status::ok;
    }
    return uct::ep_fence(ep->lanes[lane].ep, 0);
}

namespace {

/**
 * The RMA part of flush @p req, whose endpoint(s) have nothing outstanding: starts or
 * checks the transports' flush of the RMA lanes (remote completion). True when done, with
 * its status in @p status (ok, or the error a transport reported, e.g. a refused put).
 */
bool rma_flush_done(Worker& w, Request& req, Status& status) {
    Ep* ep = req.ep;
    if (ep != nullptr && (ep->flags & kEpFailed)) return true;
    if (!(req.flags & kReqRmaFlush)) {
        std::uint32_t ifaces = 0;
        if (ep != nullptr) {
            if (!(ep->rma_flags & kRmaUsed)) return true;
            ifaces = 1;  // the endpoint's RMA lane
        } else {
            for (const Ep& e : w.eps) {
                if ((e.rma_flags & kRmaUsed) && !(e.flags & kEpFailed))
                    ifaces |= 1u << e.lanes[rma_lane(&e)].iface;
            }
            if (ifaces == 0) return true;
        }
        req.flags |= kReqRmaFlush;
        req.rma.op = nullptr;
        req.rma.error = Status::ok;
        req.rma.phase = kFlushIssuing;
        req.rma.ifaces = ifaces;
    }
    if (req.rma.phase == kFlushIssuing) {
        RmaOp* op = op_acquire(&req);
        if (op == nullptr) return false;  // out of memory: try again at the next progress
        while (req.rma.ifaces != 0) {
            const unsigned bit = static_cast<unsigned>(__builtin_ctz(req.rma.ifaces));
            Status s = counted(op, [&] {
                return ep != nullptr
                           ? uct::ep_flush(ep->lanes[rma_lane(ep)].ep, uct::kFlushLocal, &op->comp)
                           : uct::iface_flush(w.ifaces[bit].iface.get(), uct::kFlushLocal, &op->comp);
            });
            if (s == Status::no_resource) break;  // busy: again at the next progress
            if (s != Status::ok && s != Status::in_progress) record_error(op, s);
            req.rma.ifaces &= ~(1u << bit);
        }
        const bool last = req.rma.ifaces == 0;
        if (last) req.rma.phase = kFlushWaiting;
        op_release(&req, last);
    }
    if (req.rma.phase != kFlushDone) return false;
    status = req.rma.error;
    return true;
}

/**
 * The transport flush of @p ep's RMA lane, without a completion: ok when nothing is in flight,
 * in_progress or no_resource when it must be waited for, or the error of a refused posted
 * operation (which the transport reports once).
 */
Status lane_flush_now(const Ep& ep) {
    if ((ep.flags & kEpFailed) || !(ep.rma_flags & kRmaUsed)) return Status::ok;
    return uct::ep_flush(ep.lanes[rma_lane(&ep)].ep, uct::kFlushLocal, nullptr);
}

/**
 * The idle flush: done when every RMA lane is idle, or at the first error, which the flush
 * reports at once (a transport reports it only once: a later flush would not see it).
 */
bool rma_flush_idle(Worker& w, Ep* ep, Status& status) {
    bool idle = true;
    auto check = [&](const Ep& e) {
        const Status s = lane_flush_now(e);
        if (s == Status::in_progress || s == Status::no_resource) {
            idle = false;
            return true;
        }
        status = s;
        return s == Status::ok;
    };
    status = Status::ok;
    if (ep != nullptr) {
        check(*ep);
        return idle;
    }
    for (const Ep& e : w.eps) {
        if (!check(e)) return true;  // an error: reported now
    }
    return idle;
}

Status rma_family_init(Worker& w) {
    auto* rw = new (std::nothrow) RmaWorker;
    if (rw == nullptr) return Status::no_memory;
    w.family_state[kRmaSlot] = rw;
    ucs::MemPoolParams p;
    p.name = "ucp_rma_ops";
    p.elem_size = sizeof(RmaOp);
    p.alignment = 64;
    p.elems_per_chunk = 128;
    return rw->ops.init(std::move(p));
}

/** After the ifaces: a transport's completion of a transfer in flight may still name a record. */
void rma_family_destroy(Worker& w) {
    delete &rma_of(w);
    w.family_state[kRmaSlot] = nullptr;
}

const ProtoFamily kRmaFamily{.name = "RMA", .slot = kRmaSlot,
                             .init = rma_family_init,
                             .destroy = rma_family_destroy,
                             .flush_done = rma_flush_done,
                             .flush_idle = rma_flush_idle};
LOOM_FAMILY_REGISTER(kRmaFamily);

}  // namespace

}  // namespace loom::ucp
