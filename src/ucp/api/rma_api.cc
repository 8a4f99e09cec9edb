/**
 * The C API of memory mappings, remote keys, RMA and atomics (include/loom/ucp_rma.h)
 * over src/ucp/rma. Parameters from the application are checked here, each refusal with
 * one log line; nothing here throws.
 * The request rules are those of every _nbx call (api_common.h).
 */
#include "loom/ucp.h"

#include "ucp/api/api_common.h"
#include "ucp/api/handles.h"
#include "ucp/core/ucp_log.h"
#include "ucp/rma/rma.h"

#include <cstdlib>
#include <cstring>
#include <new>

using namespace loom;
using namespace loom::ucp;
using namespace loom::ucp::api;

namespace {

Mem* M(loom_mem_h mem) {
    return reinterpret_cast<Mem*>(mem);
}
RmaRkey* K(loom_rkey_h rkey) {
    return reinterpret_cast<RmaRkey*>(rkey);
}
/** A completed operation: NULL, or a completed request under NO_IMM_CMPL. */
void* completed(Worker& w, const loom_request_param_t* p) { return completed_request(w, Status::ok, p); }

LOOM_COLD void* bad_param(const char* what) {
    LOOM_LOG_ERROR("ucp: {}", what);
    return status_ptr(Status::invalid_param);
}

/**
 * The mapping the caller named for the local buffer [@p buffer, + @p length), or nullptr;
 * @p bad is set when the field is given but does not cover the buffer.
 */
const Mem* mapping_of(const loom_request_param_t* p, const void* buffer, std::size_t length, bool& bad) {
    bad = false;
    if (!(attr(p) & LOOM_OP_ATTR_FIELD_MEMH)) return nullptr;
    const Mem* m = M(p->memh);
    const auto* b = static_cast<const std::uint8_t*>(buffer);
    if (m == nullptr || b < m->address || length > m->length ||
        static_cast<std::size_t>(b - m->address) > m->length - length) {
        LOOM_LOG_ERROR("ucp: the mapping given for the local buffer {}+{} does not cover it", buffer, length);
        bad = true;
    }
    return m;
}

/** Put and get: checks, the immediate put, else a request. */
void* transfer(loom_ep_h ep_h, void* buffer, size_t count, uint64_t remote_addr, loom_rkey_h rkey_h,
               const loom_request_param_t* p, bool get) {
    Ep* ep = E(ep_h);
    const RmaRkey* rkey = K(rkey_h);
    if (LOOM_UNLIKELY(ep == nullptr || rkey == nullptr || (buffer == nullptr && count != 0))) {
        return bad_param("put/get: null endpoint, remote key or buffer");
    }
    WorkerGuard guard(*ep->worker);
    const unsigned access = get ? uct::kAccessRemoteGet : uct::kAccessRemotePut;
    const Datatype dt = dt_of(p);
    Worker& w = *ep->worker;
    std::size_t length = count;
    const Mem* mapping = nullptr;
    bool bad = false;
    if (LOOM_LIKELY(dt == dt_make_contig(1))) {
        if (Status s = rma_check(ep, rkey, remote_addr, length, access); LOOM_UNLIKELY(s != Status::ok)) {
            return status_ptr(s);
        }
        if (LOOM_UNLIKELY(attr(p) & LOOM_OP_ATTR_FIELD_MEMH)) {
            mapping = mapping_of(p, buffer, length, bad);
            if (bad) return status_ptr(Status::invalid_param);
        }
        if (LOOM_UNLIKELY(length == 0)) return completed(w, p);
        if (!get && !(attr(p) & LOOM_OP_ATTR_FLAG_NO_IMM_CMPL)) {
            // Short and bcopy: complete in the call, no request.
            Status s = rma_put_immediate(ep, buffer, length, remote_addr, rkey);
            if (LOOM_LIKELY(s == Status::ok)) return nullptr;
            if (s != Status::no_resource) return status_ptr(s);
        }
    } else {
        if (Status s = dt_check(dt); s != Status::ok) return status_ptr(s);
        const Datatype cls = dt & kDtClassMask;
        if (cls == kDtGeneric || (get && cls != kDtContig)) {
            LOOM_LOG_ERROR("ucp: {} does not take {} datatypes", get ? "loom_get_nbx" : "loom_put_nbx",
                           cls == kDtGeneric ? "generic" : "iov");
            return status_ptr(Status::unsupported);
        }
        DtState st;
        if (Status s = st.start_pack(dt, buffer, count); s != Status::ok) return status_ptr(s);
        length = st.length;
        if (Status s = rma_check(ep, rkey, remote_addr, length, access); s != Status::ok)
            return status_ptr(s);
        if (cls == kDtContig) {  // iov data goes in bcopy fragments: a mapping would not be used
            mapping = mapping_of(p, buffer, length, bad);
            if (bad) return status_ptr(Status::invalid_param);
        }
    }
    if (length == 0) return completed(w, p);
    // Only short and bcopy puts complete in the call (tried above).
    if (attr(p) & LOOM_OP_ATTR_FLAG_FORCE_IMM_CMPL) return status_ptr(Status::no_resource);
    Request* req = new_request(w, p);
    if (req == nullptr) return status_ptr(Status::no_memory);
    Status s = get ? req->rma.dt.start_unpack(dt, buffer, count) : req->rma.dt.start_pack(dt, buffer, count);
    if (s != Status::ok) {
        w.complete(req, s);
        return finish_nbx(w, req, p);
    }
    rma_start_transfer(req, ep, remote_addr, rkey, get, mapping);
    return finish_nbx(w, req, p);
}

bool atomic_op_of(loom_atomic_op_t opcode, uct::AtomicOp& op) {
    switch (opcode) {
        case LOOM_ATOMIC_OP_ADD:
            op = uct::AtomicOp::add;
            return true;
        case LOOM_ATOMIC_OP_SWAP:
            op = uct::AtomicOp::swap;
            return true;
        case LOOM_ATOMIC_OP_CSWAP:
            op = uct::AtomicOp::cswap;
            return true;
        case LOOM_ATOMIC_OP_AND:
            op = uct::AtomicOp::and_;
            return true;
        case LOOM_ATOMIC_OP_OR:
            op = uct::AtomicOp::or_;
            return true;
        case LOOM_ATOMIC_OP_XOR:
            op = uct::AtomicOp::xor_;
            return true;
        default:
            return false;
    }
}

unsigned access_of_prot(unsigned prot) {
    unsigned access = 0;
    if (prot & LOOM_MEM_MAP_PROT_LOCAL_READ) access |= uct::kAccessLocalRead;
    if (prot & LOOM_MEM_MAP_PROT_LOCAL_WRITE) access |= uct::kAccessLocalWrite;
    if (prot & LOOM_MEM_MAP_PROT_REMOTE_READ) access |= uct::kAccessRemoteGet;
    if (prot & LOOM_MEM_MAP_PROT_REMOTE_WRITE) access |= uct::kAccessRemotePut;
    if (prot & LOOM_MEM_MAP_PROT_REMOTE_ATOMIC) access |= uct::kAccessRemoteAtomic;
    return access;
}

constexpr unsigned kAllProt = LOOM_MEM_MAP_PROT_LOCAL_READ | LOOM_MEM_MAP_PROT_LOCAL_WRITE |
                              LOOM_MEM_MAP_PROT_REMOTE_READ | LOOM_MEM_MAP_PROT_REMOTE_WRITE |
                              LOOM_MEM_MAP_PROT_REMOTE_ATOMIC;

}  // namespace

extern "C" {

loom_status_t loom_mem_map(loom_context_h context, const loom_mem_map_params_t* params, loom_mem_h* memh) {
    if (context == nullptr || params == nullptr || memh == nullptr) return LOOM_ERR_INVALID_PARAM;
    const std::uint64_t fm = params->field_mask;
    const unsigned flags = (fm & LOOM_MEM_MAP_PARAM_FIELD_FLAGS) ? params->flags : 0;
    const std::size_t length = (fm & LOOM_MEM_MAP_PARAM_FIELD_LENGTH) ? params->length : 0;
    void* address = (fm & LOOM_MEM_MAP_PARAM_FIELD_ADDRESS) ? params->address : nullptr;
    const unsigned prot = (fm & LOOM_MEM_MAP_PARAM_FIELD_PROT) ? params->prot : kAllProt;
    const bool allocate = flags & LOOM_MEM_MAP_ALLOCATE;
    const bool fixed = flags & LOOM_MEM_MAP_FIXED;
    if (flags & ~static_cast<unsigned>(LOOM_MEM_MAP_ALLOCATE | LOOM_MEM_MAP_FIXED)) {
        LOOM_LOG_ERROR("ucp: loom_mem_map: unknown flags {:#x}", flags);
        return LOOM_ERR_INVALID_PARAM;
    }
    if (fixed && (!allocate || address == nullptr || reinterpret_cast<std::uintptr_t>(address) % 4096 != 0)) {
        LOOM_LOG_ERROR("ucp: loom_mem_map: LOOM_MEM_MAP_FIXED needs LOOM_MEM_MAP_ALLOCATE and a page-aligned "
                       "address (got flags {:#x}, address {})", flags, address);
        return LOOM_ERR_INVALID_PARAM;
    }
    if (prot & ~kAllProt) {
        LOOM_LOG_ERROR("ucp: loom_mem_map: unknown protection bits {:#x}", prot);
        return LOOM_ERR_INVALID_PARAM;
    }
    if (length == 0) {
        LOOM_LOG_ERROR("ucp: loom_mem_map needs a nonzero length (LOOM_MEM_MAP_PARAM_FIELD_LENGTH)");
        return LOOM_ERR_INVALID_PARAM;
    }
    if (address != nullptr && reinterpret_cast<std::uintptr_t>(address) > UINTPTR_MAX - length) {
        LOOM_LOG_ERROR("ucp: loom_mem_map: {} bytes at {} wrap around the address space", length, address);
        return LOOM_ERR_INVALID_PARAM;
    }
    if (!allocate && address == nullptr) {
        LOOM_LOG_ERROR(
            "ucp: loom_mem_map needs an address (LOOM_MEM_MAP_PARAM_FIELD_ADDRESS) or "
            "LOOM_MEM_MAP_ALLOCATE");
        return LOOM_ERR_INVALID_PARAM;
    }
    try {
        auto mem = mem_map(*context->impl, address, length, allocate, access_of_prot(prot), fixed);
        if (!mem) return static_cast<loom_status_t>(mem.status());
        *memh = reinterpret_cast<loom_mem_h>(*mem);
        return LOOM_OK;
    } catch (const std::bad_alloc&) {
        return LOOM_ERR_NO_MEMORY;
    }
}

loom_status_t loom_mem_unmap(loom_context_h context, loom_mem_h memh) {
    if (context == nullptr || memh == nullptr) return LOOM_ERR_INVALID_PARAM;
    return static_cast<loom_status_t>(mem_unmap(*context->impl, M(memh)));
}

loom_status_t loom_mem_query(loom_mem_h memh, loom_mem_attr_t* a) {
    if (memh == nullptr || a == nullptr) return LOOM_ERR_INVALID_PARAM;
    if (a->field_mask & LOOM_MEM_ATTR_FIELD_ADDRESS) a->address = M(memh)->address;
    if (a->field_mask & LOOM_MEM_ATTR_FIELD_LENGTH) a->length = M(memh)->length;
    return LOOM_OK;
}

loom_status_t loom_rkey_pack(loom_context_h context, loom_mem_h memh, void** rkey_buffer, size_t* size) {
    if (context == nullptr || memh == nullptr || rkey_buffer == nullptr || size == nullptr) {
        return LOOM_ERR_INVALID_PARAM;
    }
    if (M(memh)->context != context->impl.get()) {
        LOOM_LOG_ERROR("ucp: loom_rkey_pack: the mapping belongs to another context");
        return LOOM_ERR_INVALID_PARAM;
    }
    try {
        std::vector<std::uint8_t> packed = rkey_pack(*M(memh));
        void* buf = std::malloc(packed.size());
        if (buf == nullptr) return LOOM_ERR_NO_MEMORY;
        std::memcpy(buf, packed.data(), packed.size());
        *rkey_buffer = buf;
        *size = packed.size();
        return LOOM_OK;
    } catch (const std::bad_alloc&) {
        return LOOM_ERR_NO_MEMORY;
    }
}

void loom_rkey_buffer_release(void* rkey_buffer) {
    std::free(rkey_buffer);
}

loom_status_t loom_ep_rkey_unpack(loom_ep_h ep, const void* rkey_buffer, size_t size, loom_rkey_h* rkey) {
    if (ep == nullptr || rkey_buffer == nullptr || rkey == nullptr) {
        LOOM_LOG_ERROR("ucp: loom_ep_rkey_unpack: null endpoint, buffer or result");
        return LOOM_ERR_INVALID_PARAM;
    }
    try {
        WorkerGuard guard(*E(ep)->worker);
        auto unpacked = rkey_unpack(E(ep), rkey_buffer, size);
        if (!unpacked) return static_cast<loom_status_t>(unpacked.status());
        *rkey = reinterpret_cast<loom_rkey_h>(*unpacked);
        return LOOM_OK;
    } catch (const std::bad_alloc&) {
        return LOOM_ERR_NO_MEMORY;
    }
}

void loom_rkey_destroy(loom_rkey_h rkey) {
    if (rkey != nullptr) rkey_destroy(K(rkey));
}

loom_status_t loom_rkey_ptr(loom_rkey_h rkey_h, uint64_t remote_addr, void** address) {
    const RmaRkey* rkey = K(rkey_h);
    if (rkey == nullptr || address == nullptr) {
        LOOM_LOG_ERROR("ucp: loom_rkey_ptr: {} is null", rkey == nullptr ? "the key" : "the address pointer");
        return LOOM_ERR_INVALID_PARAM;
    }
    if (!rkey->allows(remote_addr, 0, 0)) {
        LOOM_LOG_ERROR("ucp: loom_rkey_ptr: {:#x} is outside the key's region {:#x}+{}", remote_addr,
                       rkey->address, rkey->length);
        return LOOM_ERR_INVALID_PARAM;
    }
    const Status s = rkey->component->rkey_ptr(rkey->handle, remote_addr, address);
    // unsupported (a transport without mappable keys) means the same to the caller: not mapped here.
    return s == Status::unsupported ? LOOM_ERR_UNREACHABLE : static_cast<loom_status_t>(s);
}

loom_status_ptr_t loom_put_nbx(loom_ep_h ep_h, const void* buffer, size_t count, uint64_t remote_addr,
                               loom_rkey_h rkey_h, const loom_request_param_t* param) {
    // The message-rate case first, in a few instructions: bytes without parameters, small
    // enough for put_short, on a worker that takes no lock, nothing queued before it. The
    // same checks as transfer()'s (rma_check: endpoint, key, bounds, rights); whatever does
    // not pass them, or finds the lane busy, takes transfer(), which logs and queues.
    Ep* ep = E(ep_h);
    const RmaRkey* rkey = K(rkey_h);
    if (LOOM_LIKELY(param == nullptr && ep != nullptr && rkey != nullptr && buffer != nullptr && count != 0 &&
                    count <= rkey->put_short && !ep->worker->multi_threaded)) {
        const std::uint8_t lane = rma_lane(ep);
        const std::uint32_t queued = ep->queued_on(lane);
        if (LOOM_LIKELY(queued == 0 && !(ep->rma_flags & kRmaFence) &&
                        rma_check(ep, rkey, remote_addr, count, uct::kAccessRemotePut) == Status::ok)) {
            Status s = uct::ep_put_short(ep->lanes[lane].ep, buffer, static_cast<unsigned>(count), remote_addr,
                                         rkey->uct_rkey);
            if (LOOM_LIKELY(s == Status::ok)) return nullptr;
            if (s != Status::no_resource) return status_ptr(s);
        }
    }
    caller_request_begin(param);
    return caller_request_end(ep ? ep->worker : nullptr, param,
                              transfer(ep_h, const_cast<void*>(buffer), count, remote_addr, rkey_h, param, false));
}

loom_status_ptr_t loom_get_nbx(loom_ep_h ep, void* buffer, size_t count, uint64_t remote_addr,
                               loom_rkey_h rkey, const loom_request_param_t* param) {
    caller_request_begin(param);
    return caller_request_end(ep ? E(ep)->worker : nullptr, param,
                              transfer(ep, buffer, count, remote_addr, rkey, param, true));
}

loom_status_ptr_t loom_atomic_op_nbx(loom_ep_h ep_h, loom_atomic_op_t opcode, const void* buffer,
                                     size_t count, uint64_t remote_addr, loom_rkey_h rkey_h,
                                     const loom_request_param_t* p) {
    Ep* ep = E(ep_h);
    const RmaRkey* rkey = K(rkey_h);
    if (LOOM_UNLIKELY(ep == nullptr || rkey == nullptr || buffer == nullptr)) {
        return bad_param("loom_atomic_op_nbx: null endpoint, remote key or operand");
    }
    WorkerGuard guard(*ep->worker);
    if (LOOM_UNLIKELY(!(attr(p) & LOOM_OP_ATTR_FIELD_DATATYPE))) {
        return bad_param("loom_atomic_op_nbx needs a datatype: loom_dt_make_contig(4) or (8)");
    }
    const unsigned size = p->datatype == dt_make_contig(4) ? 4 : p->datatype == dt_make_contig(8) ? 8 : 0;
    uct::AtomicOp op;
    if (LOOM_UNLIKELY(size == 0 || count != 1)) {
        LOOM_LOG_ERROR(
            "ucp: loom_atomic_op_nbx: datatype {:#x} and count {}; an atomic is one element of "
            "loom_dt_make_contig(4) or (8)",
            p->datatype, count);
        return status_ptr(Status::invalid_param);
    }
    if (LOOM_UNLIKELY(!atomic_op_of(opcode, op))) {
        LOOM_LOG_ERROR("ucp: loom_atomic_op_nbx: unknown opcode {}", static_cast<int>(opcode));
        return status_ptr(Status::invalid_param);
    }
    void* reply = (attr(p) & LOOM_OP_ATTR_FIELD_REPLY_BUFFER) ? p->reply_buffer : nullptr;
    if (LOOM_UNLIKELY((attr(p) & LOOM_OP_ATTR_FIELD_REPLY_BUFFER) && reply == nullptr)) {
        return bad_param("loom_atomic_op_nbx: LOOM_OP_ATTR_FIELD_REPLY_BUFFER with a null reply_buffer");
    }
    if (LOOM_UNLIKELY(reply == nullptr && (op == uct::AtomicOp::swap || op == uct::AtomicOp::cswap))) {
        return bad_param(
            "loom_atomic_op_nbx: SWAP and CSWAP need a reply buffer (LOOM_OP_ATTR_FIELD_REPLY_BUFFER)");
    }
    if (LOOM_UNLIKELY(remote_addr % size != 0)) {
        LOOM_LOG_ERROR("ucp: loom_atomic_op_nbx: remote address {:#x} is not aligned to {} bytes",
                       remote_addr, size);
        return status_ptr(Status::invalid_param);
    }
    if (Status s = rma_atomic_check(ep, rkey, op, size, remote_addr); LOOM_UNLIKELY(s != Status::ok)) {
        return status_ptr(s);
    }
    // As in UCX: @p buffer holds the operand; for CSWAP it is the value to compare with and
    // the reply buffer holds the value to swap in (both read here, in the call).
    std::uint64_t value = 0, compare = 0;
    if (op == uct::AtomicOp::cswap) {
        std::memcpy(&compare, buffer, size);  // little endian: the low bytes
        std::memcpy(&value, reply, size);
    } else {
        std::memcpy(&value, buffer, size);
    }
    Worker& w = *ep->worker;
    if (reply == nullptr && !(attr(p) & LOOM_OP_ATTR_FLAG_NO_IMM_CMPL)) {
        Status s = rma_atomic_post_immediate(ep, op, size, value, remote_addr, rkey);
        if (LOOM_LIKELY(s == Status::ok)) return nullptr;
        if (s != Status::no_resource) return status_ptr(s);
    }
    // Only a posted atomic completes in the call (tried above).
    if (attr(p) & LOOM_OP_ATTR_FLAG_FORCE_IMM_CMPL) return status_ptr(Status::no_resource);
    Request* req = new_request(w, p);
    if (req == nullptr) return status_ptr(Status::no_memory);
    rma_start_atomic(req, ep, op, size, value, compare, reply, remote_addr, rkey);
    return finish_nbx(w, req, p);
}

loom_status_t loom_ep_fence(loom_ep_h ep) {
    if (ep == nullptr) return LOOM_ERR_INVALID_PARAM;
    WorkerGuard guard(*E(ep)->worker);
    return static_cast<loom_status_t>(rma_ep_fence(E(ep)));
}

loom_status_t loom_worker_fence(loom_worker_h worker) {
    if (worker == nullptr) return LOOM_ERR_INVALID_PARAM;
    WorkerGuard guard(*worker->impl);
    for (Ep& ep : worker->impl->eps) {
        if (!(ep.flags & kEpFailed)) (void)rma_ep_fence(&ep);  // a failed endpoint has nothing to order
    }
    return LOOM_OK;
}

}  // extern "C"
