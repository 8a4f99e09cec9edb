/**
 * libucp: memory mapping, remote keys, puts, gets and atomics of the UCX API over Loom's
 * (docs/mpi.md says which one-sided forms are complete; the rest answer with a status and
 * one log line).
 *
 * Remote keys: UCX's ucp_ep_rkey_unpack takes no length, Loom's does (the bytes come from
 * another process). The layer's packed key is Loom's, preceded by a small header with its
 * length, so the unpack knows how far it may read, and a magic word, so a buffer that is
 * not a key of this layer is refused instead of read.
 */
#include "compat.h"

#include <cstdlib>
#include <cstring>

using namespace loom::ucx;

namespace {

constexpr std::uint32_t kRkeyMagic = 0x4b4d4f4c;  // "LOMK"
/** Keys longer than this are refused at unpack: far above any Loom key (a few hundred bytes). */
constexpr std::uint32_t kRkeyMaxLength = 64 * 1024;

struct RkeyHeader {
    std::uint32_t magic;
    std::uint32_t length;  ///< Loom's packed key that follows
};

inline loom_mem_h M(ucp_mem_h m) { return reinterpret_cast<loom_mem_h>(m); }
inline loom_rkey_h K(ucp_rkey_h k) { return reinterpret_cast<loom_rkey_h>(k); }

/** Waits for Loom's @p r on the endpoint's worker: the blocking UCX 1.x calls. */
ucs_status_t wait_ep(ucp_ep_h ep, loom_status_ptr_t r, const char* call) {
    if (!LOOM_PTR_IS_PTR(r)) return to_ucs(LOOM_PTR_STATUS(r));
    Worker* w = worker_of(E(ep));
    if (w == nullptr) {
        log_error(call, "endpoint %p was not created through this layer", static_cast<void*>(ep));
        return UCS_ERR_INVALID_PARAM;
    }
    return wait_blocking(w, r);
}

/**
 * A put or get without a request for the caller (the _nbi forms): done at once, or its
 * request is freed at once (a later flush completes it, as in UCX).
 */
ucs_status_t implicit(loom_status_ptr_t r) {
    if (LOOM_PTR_IS_PTR(r)) {
        loom_request_free(r);
        return UCS_INPROGRESS;
    }
    return to_ucs(LOOM_PTR_STATUS(r));
}

/** UCX's atomic opcode as Loom's; false for a value outside the enum. */
bool loom_atomic(ucp_atomic_op_t op, loom_atomic_op_t& out) {
    switch (op) {
    case UCP_ATOMIC_OP_ADD: out = LOOM_ATOMIC_OP_ADD; return true;
    case UCP_ATOMIC_OP_SWAP: out = LOOM_ATOMIC_OP_SWAP; return true;
    case UCP_ATOMIC_OP_CSWAP: out = LOOM_ATOMIC_OP_CSWAP; return true;
    case UCP_ATOMIC_OP_AND: out = LOOM_ATOMIC_OP_AND; return true;
    case UCP_ATOMIC_OP_OR: out = LOOM_ATOMIC_OP_OR; return true;
    case UCP_ATOMIC_OP_XOR: out = LOOM_ATOMIC_OP_XOR; return true;
    default: return false;
    }
}

}  // namespace

extern "C" {

// --- memory -----------------------------------------------------------------------------------

ucs_status_t ucp_mem_map(ucp_context_h context,
                                                                const ucp_mem_map_params_t* params,
                                                                ucp_mem_h* memh_p) {
    if (context == nullptr || params == nullptr || memh_p == nullptr) return UCS_ERR_INVALID_PARAM;
    const std::uint64_t m = params->field_mask;
    loom_mem_map_params_t lp{};
    if (m & UCP_MEM_MAP_PARAM_FIELD_ADDRESS) {
        lp.field_mask |= LOOM_MEM_MAP_PARAM_FIELD_ADDRESS;
        lp.address = params->address;
    }
    if (m & UCP_MEM_MAP_PARAM_FIELD_LENGTH) {
        lp.field_mask |= LOOM_MEM_MAP_PARAM_FIELD_LENGTH;
        lp.length = params->length;
    }
    const unsigned flags = (m & UCP_MEM_MAP_PARAM_FIELD_FLAGS) ? params->flags : 0;
    if (flags & UCP_MEM_MAP_ALLOCATE) {
        lp.field_mask |= LOOM_MEM_MAP_PARAM_FIELD_FLAGS;
        lp.flags = LOOM_MEM_MAP_ALLOCATE;
        if (flags & UCP_MEM_MAP_FIXED) {
            lp.flags |= LOOM_MEM_MAP_FIXED;  // spml ucx's symmetric heap, at the same address in every PE
        } else {
            lp.field_mask &= ~std::uint64_t{LOOM_MEM_MAP_PARAM_FIELD_ADDRESS};  // a hint UCX may ignore
        }
    } else if (flags & UCP_MEM_MAP_FIXED) {
        log_error("ucp_mem_map", "UCP_MEM_MAP_FIXED without UCP_MEM_MAP_ALLOCATE: nothing to place");
        return UCS_ERR_INVALID_PARAM;
    }
    // NONBLOCK: registration on first use is what Loom's caches do anyway.
    if (m & UCP_MEM_MAP_PARAM_FIELD_PROT) {
        lp.field_mask |= LOOM_MEM_MAP_PARAM_FIELD_PROT;
        const unsigned prot = params->prot;
        if (prot & UCP_MEM_MAP_PROT_LOCAL_READ) lp.prot |= LOOM_MEM_MAP_PROT_LOCAL_READ;
        if (prot & UCP_MEM_MAP_PROT_LOCAL_WRITE) lp.prot |= LOOM_MEM_MAP_PROT_LOCAL_WRITE;
        if (prot & UCP_MEM_MAP_PROT_REMOTE_READ) lp.prot |= LOOM_MEM_MAP_PROT_REMOTE_READ;
        // UCX has no separate atomic right: remote writers may apply atomics.
        if (prot & UCP_MEM_MAP_PROT_REMOTE_WRITE) lp.prot |= LOOM_MEM_MAP_PROT_REMOTE_WRITE | LOOM_MEM_MAP_PROT_REMOTE_ATOMIC;
    }
    if ((m & UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE) && params->memory_type != UCS_MEMORY_TYPE_HOST &&
        params->memory_type != UCS_MEMORY_TYPE_UNKNOWN) {
        log_error("ucp_mem_map", "memory type %d: only host memory is supported", static_cast<int>(params->memory_type));
        return UCS_ERR_UNSUPPORTED;
    }
    loom_mem_h mem = nullptr;
    loom_status_t s = loom_mem_map(C(context)->loom, &lp, &mem);
    if (s != LOOM_OK) {
        log_error("ucp_mem_map", "%s", loom_status_string(s));
        return to_ucs(s);
    }
    *memh_p = reinterpret_cast<ucp_mem_h>(mem);
    return UCS_OK;
}

ucs_status_t ucp_mem_unmap(ucp_context_h context, ucp_mem_h memh) {
    if (context == nullptr || memh == nullptr) return UCS_ERR_INVALID_PARAM;
    return to_ucs(loom_mem_unmap(C(context)->loom, M(memh)));
}

ucs_status_t ucp_mem_query(const ucp_mem_h memh, ucp_mem_attr_t* attr) {
    if (memh == nullptr || attr == nullptr) return UCS_ERR_INVALID_PARAM;
    loom_mem_attr_t a{};
    a.field_mask = LOOM_MEM_ATTR_FIELD_ADDRESS | LOOM_MEM_ATTR_FIELD_LENGTH;
    if (loom_status_t s = loom_mem_query(M(memh), &a); s != LOOM_OK) return to_ucs(s);
    if (attr->field_mask & UCP_MEM_ATTR_FIELD_ADDRESS) attr->address = a.address;
    if (attr->field_mask & UCP_MEM_ATTR_FIELD_LENGTH) attr->length = a.length;
    if (attr->field_mask & UCP_MEM_ATTR_FIELD_MEM_TYPE) attr->mem_type = UCS_MEMORY_TYPE_HOST;
    return UCS_OK;
}

/** Advice is a hint: Loom registers what it needs when it needs it, so none changes anything. */
ucs_status_t ucp_mem_advise(ucp_context_h context, ucp_mem_h memh,
                                                                   ucp_mem_advise_params_t* params) {
    if (context == nullptr || memh == nullptr || params == nullptr) return UCS_ERR_INVALID_PARAM;
    log_debug("ucp_mem_advise", "advice %d taken as a hint, nothing to do",
              (params->field_mask & UCP_MEM_ADVISE_PARAM_FIELD_ADVICE) ? static_cast<int>(params->advice) : -1);
    return UCS_OK;
}

ucs_status_t ucp_rkey_pack(ucp_context_h context, ucp_mem_h memh,
                                                                  void** rkey_buffer_p, size_t* size_p) {
    if (context == nullptr || memh == nullptr || rkey_buffer_p == nullptr || size_p == nullptr) {
        return UCS_ERR_INVALID_PARAM;
    }
    void* packed = nullptr;
    size_t size = 0;
    if (loom_status_t s = loom_rkey_pack(C(context)->loom, M(memh), &packed, &size); s != LOOM_OK) {
        log_error("ucp_rkey_pack", "%s", loom_status_string(s));
        return to_ucs(s);
    }
    auto* out = static_cast<std::uint8_t*>(std::malloc(sizeof(RkeyHeader) + size));
    if (out == nullptr) {
        loom_rkey_buffer_release(packed);
        return UCS_ERR_NO_MEMORY;
    }
    const RkeyHeader h{kRkeyMagic, static_cast<std::uint32_t>(size)};
    std::memcpy(out, &h, sizeof(h));
    std::memcpy(out + sizeof(h), packed, size);
    loom_rkey_buffer_release(packed);
    *rkey_buffer_p = out;
    *size_p = sizeof(RkeyHeader) + size;
    return UCS_OK;
}

void ucp_rkey_buffer_release(void* rkey_buffer) { std::free(rkey_buffer); }

ucs_status_t ucp_ep_rkey_unpack(ucp_ep_h ep, const void* rkey_buffer,
                                                                       ucp_rkey_h* rkey_p) {
    if (ep == nullptr || rkey_buffer == nullptr || rkey_p == nullptr) return UCS_ERR_INVALID_PARAM;
    RkeyHeader h;
    std::memcpy(&h, rkey_buffer, sizeof(h));
    if (h.magic != kRkeyMagic || h.length == 0 || h.length > kRkeyMaxLength) {
        log_error("ucp_ep_rkey_unpack", "not a remote key packed by Loom's ucp_rkey_pack (magic %#x, length %u)",
                  h.magic, h.length);
        return UCS_ERR_INVALID_PARAM;
    }
    loom_rkey_h k = nullptr;
    loom_status_t s =
        loom_ep_rkey_unpack(E(ep), static_cast<const std::uint8_t*>(rkey_buffer) + sizeof(h), h.length, &k);
    if (s != LOOM_OK) {
        log_error("ucp_ep_rkey_unpack", "%s", loom_status_string(s));
        return to_ucs(s);
    }
    *rkey_p = reinterpret_cast<ucp_rkey_h>(k);
    return UCS_OK;
}

void ucp_rkey_destroy(ucp_rkey_h rkey) {
    if (rkey != nullptr) loom_rkey_destroy(K(rkey));
}

/** Direct load/store access to a peer's memory where it is mapped here (shm; loom_rkey_ptr). */
ucs_status_t ucp_rkey_ptr(ucp_rkey_h rkey, uint64_t raddr, void** addr_p) {
    if (rkey == nullptr || addr_p == nullptr) return UCS_ERR_INVALID_PARAM;
    return to_ucs(loom_rkey_ptr(K(rkey), raddr, addr_p));
}

// --- puts and gets ----------------------------------------------------------------------------

ucs_status_ptr_t ucp_put_nbx(ucp_ep_h ep, const void* buffer, size_t count,
                                                                    uint64_t remote_addr, ucp_rkey_h rkey,
                                                                    const ucp_request_param_t* param) {
    loom_request_param_t p;
    if (!translate_param(param, p, "ucp_put_nbx")) return status_ptr(UCS_ERR_UNSUPPORTED);
    set_send_nbx_callback(param, p);
    return handle_result(loom_put_nbx(E(ep), buffer, count, remote_addr, K(rkey), &p));
}

ucs_status_ptr_t ucp_get_nbx(ucp_ep_h ep, void* buffer, size_t count,
                                                                    uint64_t remote_addr, ucp_rkey_h rkey,
                                                                    const ucp_request_param_t* param) {
    loom_request_param_t p;
    if (!translate_param(param, p, "ucp_get_nbx")) return status_ptr(UCS_ERR_UNSUPPORTED);
    set_send_nbx_callback(param, p);
    return handle_result(loom_get_nbx(E(ep), buffer, count, remote_addr, K(rkey), &p));
}

ucs_status_ptr_t ucp_put_nb(ucp_ep_h ep, const void* buffer, size_t length,
                                                                   uint64_t remote_addr, ucp_rkey_h rkey,
                                                                   ucp_send_callback_t cb) {
    loom_request_param_t p{};
    set_send_callback(cb, p);
    return handle_result(loom_put_nbx(E(ep), buffer, length, remote_addr, K(rkey), &p));
}

ucs_status_ptr_t ucp_get_nb(ucp_ep_h ep, void* buffer, size_t length,
                                                                   uint64_t remote_addr, ucp_rkey_h rkey,
                                                                   ucp_send_callback_t cb) {
    loom_request_param_t p{};
    set_send_callback(cb, p);
    return handle_result(loom_get_nbx(E(ep), buffer, length, remote_addr, K(rkey), &p));
}

ucs_status_t ucp_put_nbi(ucp_ep_h ep, const void* buffer, size_t length,
                                                                uint64_t remote_addr, ucp_rkey_h rkey) {
    return implicit(loom_put_nbx(E(ep), buffer, length, remote_addr, K(rkey), nullptr));
}

ucs_status_t ucp_get_nbi(ucp_ep_h ep, void* buffer, size_t length,
                                                                uint64_t remote_addr, ucp_rkey_h rkey) {
    return implicit(loom_get_nbx(E(ep), buffer, length, remote_addr, K(rkey), nullptr));
}

/** UCX 1.x blocking put: returns once the buffer may be reused (local completion). */
ucs_status_t ucp_put(ucp_ep_h ep, const void* buffer, size_t length,
                                                            uint64_t remote_addr, ucp_rkey_h rkey) {
    return wait_ep(ep, loom_put_nbx(E(ep), buffer, length, remote_addr, K(rkey), nullptr), "ucp_put");
}

/** UCX 1.x blocking get: returns with the data in @p buffer. */
ucs_status_t ucp_get(ucp_ep_h ep, void* buffer, size_t length,
                                                            uint64_t remote_addr, ucp_rkey_h rkey) {
    return wait_ep(ep, loom_get_nbx(E(ep), buffer, length, remote_addr, K(rkey), nullptr), "ucp_get");
}

// --- atomics ----------------------------------------------------------------------------------

ucs_status_ptr_t ucp_atomic_op_nbx(ucp_ep_h ep, ucp_atomic_op_t opcode,
                                                                          const void* buffer, size_t count,
                                                                          uint64_t remote_addr, ucp_rkey_h rkey,
                                                                          const ucp_request_param_t* param) {
    loom_atomic_op_t op;
    if (!loom_atomic(opcode, op)) {
        log_error("ucp_atomic_op_nbx", "unknown opcode %d", static_cast<int>(opcode));
        return status_ptr(UCS_ERR_INVALID_PARAM);
    }
    loom_request_param_t p;
    if (!translate_param(param, p, "ucp_atomic_op_nbx")) return status_ptr(UCS_ERR_UNSUPPORTED);
    set_send_nbx_callback(param, p);
    return handle_result(loom_atomic_op_nbx(E(ep), op, buffer, count, remote_addr, K(rkey), &p));
}

/** UCX 1.x: a posted (non-fetching) atomic; complete at the target after a flush. */
ucs_status_t ucp_atomic_post(ucp_ep_h ep, ucp_atomic_post_op_t opcode,
                                                                    uint64_t value, size_t op_size,
                                                                    uint64_t remote_addr, ucp_rkey_h rkey) {
    loom_atomic_op_t op;
    switch (opcode) {
    case UCP_ATOMIC_POST_OP_ADD: op = LOOM_ATOMIC_OP_ADD; break;
    case UCP_ATOMIC_POST_OP_AND: op = LOOM_ATOMIC_OP_AND; break;
    case UCP_ATOMIC_POST_OP_OR: op = LOOM_ATOMIC_OP_OR; break;
    case UCP_ATOMIC_POST_OP_XOR: op = LOOM_ATOMIC_OP_XOR; break;
    default:
        log_error("ucp_atomic_post", "unknown opcode %d", static_cast<int>(opcode));
        return UCS_ERR_INVALID_PARAM;
    }
    if (op_size != 4 && op_size != 8) {
        log_error("ucp_atomic_post", "operand size %zu (4 or 8)", op_size);
        return UCS_ERR_INVALID_PARAM;
    }
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_DATATYPE;
    p.datatype = loom_dt_make_contig(op_size);
    return implicit(loom_atomic_op_nbx(E(ep), op, &value, 1, remote_addr, K(rkey), &p));  // low bytes: little endian
}

/**
 * UCX 1.x: a fetching atomic; @p result gets the previous value. For CSWAP @p value is the
 * value to compare with and @p result holds the value to swap in on input, as in UCX (and
 * as loom_atomic_op_nbx takes them: operand and reply buffer).
 */
ucs_status_ptr_t ucp_atomic_fetch_nb(ucp_ep_h ep, ucp_atomic_fetch_op_t opcode,
                                                                            uint64_t value, void* result,
                                                                            size_t op_size, uint64_t remote_addr,
                                                                            ucp_rkey_h rkey, ucp_send_callback_t cb) {
    loom_atomic_op_t op;
    switch (opcode) {
    case UCP_ATOMIC_FETCH_OP_FADD: op = LOOM_ATOMIC_OP_ADD; break;
    case UCP_ATOMIC_FETCH_OP_SWAP: op = LOOM_ATOMIC_OP_SWAP; break;
    case UCP_ATOMIC_FETCH_OP_CSWAP: op = LOOM_ATOMIC_OP_CSWAP; break;
    case UCP_ATOMIC_FETCH_OP_FAND: op = LOOM_ATOMIC_OP_AND; break;
    case UCP_ATOMIC_FETCH_OP_FOR: op = LOOM_ATOMIC_OP_OR; break;
    case UCP_ATOMIC_FETCH_OP_FXOR: op = LOOM_ATOMIC_OP_XOR; break;
    default:
        log_error("ucp_atomic_fetch_nb", "unknown opcode %d", static_cast<int>(opcode));
        return status_ptr(UCS_ERR_INVALID_PARAM);
    }
    if (op_size != 4 && op_size != 8) {
        log_error("ucp_atomic_fetch_nb", "operand size %zu (4 or 8)", op_size);
        return status_ptr(UCS_ERR_INVALID_PARAM);
    }
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_DATATYPE | LOOM_OP_ATTR_FIELD_REPLY_BUFFER;
    p.datatype = loom_dt_make_contig(op_size);
    p.reply_buffer = result;
    set_send_callback(cb, p);
    return handle_result(loom_atomic_op_nbx(E(ep), op, &value, 1, remote_addr, K(rkey), &p));
}

}  // extern "C"
