/**
 * libucp's translation helpers: datatypes, the request parameters every operation shares,
 * and the endpoint-to-worker registry.
 */
#include "compat.h"

namespace loom::ucx {

bool to_loom_dt(ucp_datatype_t dt, loom_datatype_t& out, const char* call) noexcept {
    switch (dt & UCP_DATATYPE_CLASS_MASK) {
    case UCP_DATATYPE_CONTIG:
        out = loom_dt_make_contig(dt >> UCP_DATATYPE_SHIFT);
        return true;
    case UCP_DATATYPE_IOV:
        out = loom_dt_make_iov();
        return true;
    case UCP_DATATYPE_GENERIC:
        out = reinterpret_cast<const GenericDt*>(dt & ~static_cast<ucp_datatype_t>(UCP_DATATYPE_CLASS_MASK))->loom_dt;
        return true;
    default:
        log_error(call, "datatype class %u (strided) is not supported (nor implemented by UCX 1.13)",
                  static_cast<unsigned>(dt & UCP_DATATYPE_CLASS_MASK));
        return false;
    }
}

bool translate_param(const ucp_request_param_t* in, loom_request_param_t& out, const char* call) noexcept {
    out.op_attr_mask = 0;
    if (in == nullptr) return true;
    const std::uint32_t m = in->op_attr_mask;
    std::uint32_t lm = 0;
    if (m & UCP_OP_ATTR_FIELD_REQUEST) {
        lm |= LOOM_OP_ATTR_FIELD_REQUEST;
        out.request = loom_handle(in->request);
    }
    if (m & UCP_OP_ATTR_FIELD_USER_DATA) {
        lm |= LOOM_OP_ATTR_FIELD_USER_DATA;
        out.user_data = in->user_data;
    }
    if (m & UCP_OP_ATTR_FIELD_DATATYPE) {
        if (!to_loom_dt(in->datatype, out.datatype, call)) return false;
        lm |= LOOM_OP_ATTR_FIELD_DATATYPE;
    }
    if (m & UCP_OP_ATTR_FIELD_FLAGS) {
        lm |= LOOM_OP_ATTR_FIELD_FLAGS;
        out.flags = in->flags;  // operation-specific: the caller of this function translates them
    }
    if (m & UCP_OP_ATTR_FIELD_REPLY_BUFFER) {
        lm |= LOOM_OP_ATTR_FIELD_REPLY_BUFFER;
        out.reply_buffer = in->reply_buffer;
    }
    if (m & UCP_OP_ATTR_FIELD_MEMH) {
        lm |= LOOM_OP_ATTR_FIELD_MEMH;
        out.memh = reinterpret_cast<loom_mem_h>(in->memh);
    }
    if ((m & UCP_OP_ATTR_FIELD_MEMORY_TYPE) && in->memory_type != UCS_MEMORY_TYPE_HOST &&
        in->memory_type != UCS_MEMORY_TYPE_UNKNOWN) {
        log_error(call, "memory type %d: only host memory is supported", static_cast<int>(in->memory_type));
        return false;
    }
    if (m & UCP_OP_ATTR_FLAG_NO_IMM_CMPL) lm |= LOOM_OP_ATTR_FLAG_NO_IMM_CMPL;
    if (m & UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL) lm |= LOOM_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    // FAST_CMPL and MULTI_SEND are hints; UCX ignores what it cannot use, and so do we.
    out.op_attr_mask = lm;
    return true;
}

namespace {
std::mutex g_ep_lock;
std::unordered_map<loom_ep_h, Worker*>& ep_workers() {
    static auto* map = new std::unordered_map<loom_ep_h, Worker*>;  // outlives static destructors
    return *map;
}
}  // namespace

ucs_status_t wait_blocking(Worker* w, loom_status_ptr_t r) noexcept {
    if (!LOOM_PTR_IS_PTR(r)) return to_ucs(LOOM_PTR_STATUS(r));
    loom_status_t s;
    while ((s = loom_request_check_status(r)) == LOOM_INPROGRESS) loom_worker_progress(w->loom);
    loom_request_free(r);
    return to_ucs(s);
}

Worker* worker_of(loom_ep_h ep) noexcept {
    std::lock_guard<std::mutex> g(g_ep_lock);
    auto it = ep_workers().find(ep);
    return it == ep_workers().end() ? nullptr : it->second;
}

void set_worker_of(loom_ep_h ep, Worker* w) noexcept {
    try {
        std::lock_guard<std::mutex> g(g_ep_lock);
        if (w == nullptr) {
            ep_workers().erase(ep);
        } else {
            ep_workers()[ep] = w;
        }
    } catch (...) {
        log_error("ucp_ep_create", "out of memory recording an endpoint");
    }
}

}  // namespace loom::ucx
