/**
 * libucp: active messages, in the UCX 1.x form MPICH uses (ucp_worker_set_am_handler,
 * ucp_am_send_nb: no header, the whole message to the handler) and the newer one
 * (ucp_worker_set_am_recv_handler, ucp_am_send_nbx, ucp_am_recv_data_nbx), over Loom's
 * active messages.
 */
#include "compat.h"

#include <new>

using namespace loom::ucx;

namespace {

/** Loom's handler for an id registered through the UCX 1.x call. */
loom_status_t old_am_trampoline(void* arg, const void* /*header*/, size_t /*header_length*/, void* data,
                                size_t length, const loom_am_recv_param_t* param) {
    auto* h = static_cast<OldAmHandler*>(arg);
    if (param->recv_attr & LOOM_AM_RECV_ATTR_FLAG_RNDV) {
        // Senders of this API always send eagerly (ucp_am_send_nb below); another sender's
        // rendezvous cannot be handed to a handler that expects the data itself.
        log_error("ucp_am_handler", "a rendezvous active message reached a UCX 1.x handler; dropped");
        return LOOM_OK;
    }
    const unsigned flags = (param->recv_attr & LOOM_AM_RECV_ATTR_FLAG_DATA) ? static_cast<unsigned>(UCP_CB_PARAM_FLAG_DATA) : 0u;
    ucp_ep_h reply = (param->recv_attr & LOOM_AM_RECV_ATTR_FIELD_REPLY_EP) ? U(param->reply_ep) : nullptr;
    ucs_status_t s = h->cb(h->arg, data, length, reply, flags);
    return (s == UCS_INPROGRESS && flags != 0) ? LOOM_INPROGRESS : LOOM_OK;
}

/** Loom's handler for an id registered through ucp_worker_set_am_recv_handler. */
loom_status_t am_recv_trampoline(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                 const loom_am_recv_param_t* param) {
    auto* h = static_cast<AmRecvHandler*>(arg);
    ucp_am_recv_param_t p{};
    if (param->recv_attr & LOOM_AM_RECV_ATTR_FIELD_REPLY_EP) {
        p.recv_attr |= UCP_AM_RECV_ATTR_FIELD_REPLY_EP;
        p.reply_ep = U(param->reply_ep);
    }
    if (param->recv_attr & LOOM_AM_RECV_ATTR_FLAG_DATA) p.recv_attr |= UCP_AM_RECV_ATTR_FLAG_DATA;
    if (param->recv_attr & LOOM_AM_RECV_ATTR_FLAG_RNDV) p.recv_attr |= UCP_AM_RECV_ATTR_FLAG_RNDV;
    return to_loom(h->cb(h->arg, header, header_length, data, length, &p));
}

/** Registers (or removes, @p cb null) Loom's handler of @p id for worker @p w. */
ucs_status_t set_loom_handler(Worker* w, unsigned id, uint32_t flags, loom_am_recv_callback_t cb, void* arg,
                              const char* call) {
    loom_am_handler_param_t hp{};
    hp.field_mask = LOOM_AM_HANDLER_PARAM_FIELD_ID | LOOM_AM_HANDLER_PARAM_FIELD_CB | LOOM_AM_HANDLER_PARAM_FIELD_ARG |
                    LOOM_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.id = id;
    hp.cb = cb;
    hp.arg = arg;
    hp.flags = LOOM_AM_FLAG_WHOLE_MSG | ((flags & UCP_AM_FLAG_PERSISTENT_DATA) ? LOOM_AM_FLAG_PERSISTENT_DATA : 0);
    loom_status_t s = loom_worker_set_am_recv_handler(w->loom, &hp);
    if (s != LOOM_OK) log_error(call, "id %u: %s", id, loom_status_string(s));
    return to_ucs(s);
}

/** Loom's AM send flags for UCX's; false (logged) for unknown bits. */
bool am_send_flags(uint32_t in, uint32_t& out, const char* call) {
    out = 0;
    if (in & UCP_AM_SEND_FLAG_REPLY) out |= LOOM_AM_SEND_FLAG_REPLY;
    if (in & UCP_AM_SEND_FLAG_EAGER) out |= LOOM_AM_SEND_FLAG_EAGER;
    if (in & UCP_AM_SEND_FLAG_RNDV) out |= LOOM_AM_SEND_FLAG_RNDV;
    if (in & ~uint32_t{UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_RNDV}) {
        log_error(call, "unknown flags %#x", in);
        return false;
    }
    return true;
}

}  // namespace

extern "C" {

ucs_status_t ucp_worker_set_am_handler(ucp_worker_h worker, uint16_t id,
                                                                              ucp_am_callback_t cb, void* arg,
                                                                              uint32_t flags) {
    if (worker == nullptr) return UCS_ERR_INVALID_PARAM;
    Worker* w = W(worker);
    std::lock_guard<std::mutex> g(w->lock);
    OldAmHandler*& h = w->old_am[id];
    if (cb == nullptr) {
        loom_am_handler_param_t hp{};
        hp.field_mask = LOOM_AM_HANDLER_PARAM_FIELD_ID | LOOM_AM_HANDLER_PARAM_FIELD_CB;
        hp.id = id;
        (void)loom_worker_set_am_recv_handler(w->loom, &hp);
        delete h;
        w->old_am.erase(id);
        return UCS_OK;
    }
    if (h == nullptr) h = new (std::nothrow) OldAmHandler;
    if (h == nullptr) return UCS_ERR_NO_MEMORY;
    *h = OldAmHandler{cb, arg, w};
    return set_loom_handler(w, id, flags, old_am_trampoline, h, "ucp_worker_set_am_handler");
}

ucs_status_t ucp_worker_set_am_recv_handler(
    ucp_worker_h worker, const ucp_am_handler_param_t* param) {
    if (worker == nullptr || param == nullptr || !(param->field_mask & UCP_AM_HANDLER_PARAM_FIELD_ID) ||
        !(param->field_mask & UCP_AM_HANDLER_PARAM_FIELD_CB)) {
        log_error("ucp_worker_set_am_recv_handler", "a worker, an id and a callback field are required");
        return UCS_ERR_INVALID_PARAM;
    }
    Worker* w = W(worker);
    const uint32_t flags = (param->field_mask & UCP_AM_HANDLER_PARAM_FIELD_FLAGS) ? param->flags : 0;
    std::lock_guard<std::mutex> g(w->lock);
    AmRecvHandler*& h = w->am_recv[param->id];
    if (param->cb == nullptr) {
        loom_am_handler_param_t hp{};
        hp.field_mask = LOOM_AM_HANDLER_PARAM_FIELD_ID | LOOM_AM_HANDLER_PARAM_FIELD_CB;
        hp.id = param->id;
        (void)loom_worker_set_am_recv_handler(w->loom, &hp);
        delete h;
        w->am_recv.erase(param->id);
        return UCS_OK;
    }
    if (h == nullptr) h = new (std::nothrow) AmRecvHandler;
    if (h == nullptr) return UCS_ERR_NO_MEMORY;
    *h = AmRecvHandler{param->cb, (param->field_mask & UCP_AM_HANDLER_PARAM_FIELD_ARG) ? param->arg : nullptr, w};
    return set_loom_handler(w, param->id, flags, am_recv_trampoline, h, "ucp_worker_set_am_recv_handler");
}

ucs_status_ptr_t ucp_am_send_nb(ucp_ep_h ep, uint16_t id, const void* buffer,
                                                                       size_t count, ucp_datatype_t datatype,
                                                                       ucp_send_callback_t cb, unsigned flags) {
    loom_request_param_t p{};
    if (datatype != ucp_dt_make_contig(1)) {
        if (!to_loom_dt(datatype, p.datatype, "ucp_am_send_nb")) return status_ptr(UCS_ERR_UNSUPPORTED);
        p.op_attr_mask |= LOOM_OP_ATTR_FIELD_DATATYPE;
    }
    uint32_t lflags = 0;
    if (!am_send_flags(flags, lflags, "ucp_am_send_nb")) return status_ptr(UCS_ERR_INVALID_PARAM);
    // UCX 1.x handlers get the whole message, never a rendezvous descriptor.
    p.op_attr_mask |= LOOM_OP_ATTR_FIELD_FLAGS;
    p.flags = (lflags & ~uint32_t{LOOM_AM_SEND_FLAG_RNDV}) | LOOM_AM_SEND_FLAG_EAGER;
    set_send_callback(cb, p);
    return handle_result(loom_am_send_nbx(E(ep), id, nullptr, 0, buffer, count, &p));
}

ucs_status_ptr_t ucp_am_send_nbx(ucp_ep_h ep, unsigned id,
                                                                        const void* header, size_t header_length,
                                                                        const void* buffer, size_t count,
                                                                        const ucp_request_param_t* param) {
    loom_request_param_t p;
    if (!translate_param(param, p, "ucp_am_send_nbx")) return status_ptr(UCS_ERR_UNSUPPORTED);
    if (p.op_attr_mask & LOOM_OP_ATTR_FIELD_FLAGS) {
        uint32_t lflags = 0;
        if (!am_send_flags(param->flags, lflags, "ucp_am_send_nbx")) return status_ptr(UCS_ERR_INVALID_PARAM);
        p.flags = lflags;
    }
    set_send_nbx_callback(param, p);
    return handle_result(loom_am_send_nbx(E(ep), id, header, header_length, buffer, count, &p));
}

ucs_status_ptr_t ucp_am_recv_data_nbx(ucp_worker_h worker, void* data_desc,
                                                                             void* buffer, size_t count,
                                                                             const ucp_request_param_t* param) {
    loom_request_param_t p;
    if (!translate_param(param, p, "ucp_am_recv_data_nbx")) return status_ptr(UCS_ERR_UNSUPPORTED);
    if (param != nullptr && (param->op_attr_mask & UCP_OP_ATTR_FIELD_CALLBACK) && param->cb.recv_am != nullptr) {
        set_callback(p, reinterpret_cast<void*>(param->cb.recv_am), tramp_length_nbx);
    }
    if (param != nullptr && (param->op_attr_mask & UCP_OP_ATTR_FIELD_RECV_INFO)) {
        p.op_attr_mask |= LOOM_OP_ATTR_FIELD_RECV_INFO;
        p.recv_info.length = param->recv_info.length;
    }
    return handle_result(loom_am_recv_data_nbx(W(worker)->loom, data_desc, buffer, count, &p));
}

void ucp_am_data_release(ucp_worker_h worker, void* data) {
    if (worker != nullptr) loom_am_data_release(W(worker)->loom, data);
}

}  // extern "C"
