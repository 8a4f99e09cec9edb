/**
 * libucp: workers (addresses, progress, wake-up, flush and fence) and endpoints (create,
 * close, flush, error handlers) of the UCX API over Loom's.
 */
#include "compat.h"

#include <cstdlib>
#include <cstring>
#include <new>

using namespace loom::ucx;

namespace {

/** Loom's error handler of an endpoint whose UCX creator asked for one. */
void ep_err_trampoline(void* arg, loom_ep_h ep, loom_status_t status) {
    auto* e = static_cast<EpErr*>(arg);
    e->cb(e->arg, U(ep), to_ucs(status));
}

/** Forgets what the layer kept for @p ep (before Loom's handle goes). */
void forget_ep(loom_ep_h ep) {
    Worker* w = worker_of(ep);
    if (w == nullptr) return;
    set_worker_of(ep, nullptr);
    std::lock_guard<std::mutex> g(w->lock);
    auto it = w->ep_err.find(ep);
    if (it != w->ep_err.end()) {
        // Loom may still report the failure of a closing endpoint: the handler stays valid
        // until the worker goes (a few bytes per endpoint ever closed with a handler).
        it->second->cb = [](void*, ucp_ep_h, ucs_status_t) {};
    }
}

ucs_status_ptr_t close_nbx(ucp_ep_h ep, const ucp_request_param_t* param, bool force, const char* call) {
    if (ep == nullptr) return status_ptr(UCS_ERR_INVALID_PARAM);
    loom_request_param_t p;
    if (!translate_param(param, p, call)) return status_ptr(UCS_ERR_UNSUPPORTED);
    set_send_nbx_callback(param, p);
    p.op_attr_mask |= LOOM_OP_ATTR_FIELD_FLAGS;
    p.flags = force ? LOOM_EP_CLOSE_FLAG_FORCE : 0;
    forget_ep(E(ep));
    return handle_result(loom_ep_close_nbx(E(ep), &p));
}

}  // namespace

extern "C" {

// --- workers --------------------------------------------------------------------------------

ucs_status_t ucp_worker_create(ucp_context_h context,
                                                                      const ucp_worker_params_t* params,
                                                                      ucp_worker_h* worker_p) {
    if (context == nullptr || worker_p == nullptr) return UCS_ERR_INVALID_PARAM;
    auto* w = new (std::nothrow) Worker;
    if (w == nullptr) return UCS_ERR_NO_MEMORY;
    w->context = C(context);
    loom_worker_params_t wp{};
    if (params != nullptr && (params->field_mask & UCP_WORKER_PARAM_FIELD_THREAD_MODE)) {
        wp.field_mask = LOOM_WORKER_PARAM_FIELD_THREAD_MODE;
        switch (params->thread_mode) {
        case UCS_THREAD_MODE_SINGLE: wp.thread_mode = LOOM_THREAD_MODE_SINGLE; break;
        case UCS_THREAD_MODE_SERIALIZED: wp.thread_mode = LOOM_THREAD_MODE_SERIALIZED; break;
        case UCS_THREAD_MODE_MULTI: wp.thread_mode = LOOM_THREAD_MODE_MULTI; break;
        default:
            log_error("ucp_worker_create", "unknown thread mode %d", static_cast<int>(params->thread_mode));
            delete w;
            return UCS_ERR_INVALID_PARAM;
        }
    }
    if (params != nullptr && (params->field_mask & UCP_WORKER_PARAM_FIELD_EVENT_FD)) {
        log_error("ucp_worker_create", "an external event fd is not supported; use ucp_worker_get_efd");
        delete w;
        return UCS_ERR_UNSUPPORTED;
    }
    // cpu_mask, events, user_data, flags (request-leak warnings), name, am_alignment and
    // client_id change nothing Loom does.
    loom_status_t s = loom_worker_create(w->context->loom, &wp, &w->loom);
    if (s != LOOM_OK) {
        log_error("ucp_worker_create", "loom_worker_create failed: %s", loom_status_string(s));
        delete w;
        return to_ucs(s);
    }
    loom_worker_attr_t a{};
    a.field_mask = LOOM_WORKER_ATTR_FIELD_THREAD_MODE;
    (void)loom_worker_query(w->loom, &a);
    w->thread_mode = a.thread_mode == LOOM_THREAD_MODE_MULTI        ? UCS_THREAD_MODE_MULTI
                     : a.thread_mode == LOOM_THREAD_MODE_SERIALIZED ? UCS_THREAD_MODE_SERIALIZED
                                                                    : UCS_THREAD_MODE_SINGLE;
    *worker_p = reinterpret_cast<ucp_worker_h>(w);
    return UCS_OK;
}

void ucp_worker_destroy(ucp_worker_h worker) {
    Worker* w = W(worker);
    if (w == nullptr) return;
    loom_worker_destroy(w->loom);
    for (auto& [ep, e] : w->ep_err) {
        set_worker_of(ep, nullptr);
        delete e;
    }
    for (auto& [id, h] : w->old_am) delete h;
    for (auto& [id, h] : w->am_recv) delete h;
    delete w;
}

ucs_status_t ucp_worker_query(ucp_worker_h worker, ucp_worker_attr_t* attr) {
    if (worker == nullptr || attr == nullptr) return UCS_ERR_INVALID_PARAM;
    Worker* w = W(worker);
    const std::uint64_t m = attr->field_mask;
    loom_worker_attr_t a{};
    if (m & UCP_WORKER_ATTR_FIELD_THREAD_MODE) attr->thread_mode = w->thread_mode;
    if (m & UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER) a.field_mask |= LOOM_WORKER_ATTR_FIELD_MAX_AM_HEADER;
    if (m & UCP_WORKER_ATTR_FIELD_ADDRESS) {
        a.field_mask |= LOOM_WORKER_ATTR_FIELD_ADDRESS;
        if ((m & UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS) && (attr->address_flags & UCP_WORKER_ADDRESS_FLAG_NET_ONLY)) {
            a.field_mask |= LOOM_WORKER_ATTR_FIELD_ADDRESS_FLAGS;
            a.address_flags = LOOM_WORKER_ADDRESS_FLAG_NET_ONLY;
        }
    }
    if (a.field_mask != 0) {
        if (loom_status_t s = loom_worker_query(w->loom, &a); s != LOOM_OK) return to_ucs(s);
    }
    if (m & UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER) attr->max_am_header = a.max_am_header;
    if (m & UCP_WORKER_ATTR_FIELD_ADDRESS) {
        attr->address = static_cast<ucp_address_t*>(a.address);
        attr->address_length = a.address_length;
    }
    if (m & UCP_WORKER_ATTR_FIELD_NAME) std::snprintf(attr->name, sizeof(attr->name), "loom:%d", ::getpid());
    if (m & UCP_WORKER_ATTR_FIELD_MAX_INFO_STRING) attr->max_debug_string = 128;
    return UCS_OK;
}

ucs_status_t ucp_worker_get_address(ucp_worker_h worker,
                                                                           ucp_address_t** address_p,
                                                                           size_t* address_length_p) {
    if (worker == nullptr || address_p == nullptr || address_length_p == nullptr) return UCS_ERR_INVALID_PARAM;
    void* a = nullptr;
    loom_status_t s = loom_worker_get_address(W(worker)->loom, &a, address_length_p);
    *address_p = static_cast<ucp_address_t*>(a);
    return to_ucs(s);
}

void ucp_worker_release_address(ucp_worker_h worker, ucp_address_t* address) {
    loom_worker_release_address(worker ? W(worker)->loom : nullptr, address);
}

unsigned ucp_worker_progress(ucp_worker_h worker) {
    return loom_worker_progress(W(worker)->loom);
}

void ucp_worker_print_info(ucp_worker_h worker, FILE* stream) {
    if (worker == nullptr || stream == nullptr) return;
    std::fprintf(stream, "#\n# UCP worker 'loom:%d' (Loom's UCX compatibility layer)\n#\n", ::getpid());
    std::fprintf(stream, "#   thread mode: %s\n#\n",
                 W(worker)->thread_mode == UCS_THREAD_MODE_MULTI        ? "multi"
                 : W(worker)->thread_mode == UCS_THREAD_MODE_SERIALIZED ? "serialized"
                                                                        : "single");
}

ucs_status_t ucp_worker_get_efd(ucp_worker_h worker, int* fd) {
    return to_ucs(loom_worker_get_efd(W(worker)->loom, fd));
}

ucs_status_t ucp_worker_arm(ucp_worker_h worker) {
    return to_ucs(loom_worker_arm(W(worker)->loom));
}

ucs_status_t ucp_worker_wait(ucp_worker_h worker) {
    return to_ucs(loom_worker_wait(W(worker)->loom));
}

ucs_status_t ucp_worker_signal(ucp_worker_h worker) {
    return to_ucs(loom_worker_signal(W(worker)->loom));
}

ucs_status_t ucp_worker_fence(ucp_worker_h worker) {
    return to_ucs(loom_worker_fence(W(worker)->loom));
}

ucs_status_ptr_t ucp_worker_flush_nbx(ucp_worker_h worker,
                                                                             const ucp_request_param_t* param) {
    loom_request_param_t p;
    if (!translate_param(param, p, "ucp_worker_flush_nbx")) return status_ptr(UCS_ERR_UNSUPPORTED);
    set_send_nbx_callback(param, p);
    return handle_result(loom_worker_flush_nbx(W(worker)->loom, &p));
}

ucs_status_ptr_t ucp_worker_flush_nb(ucp_worker_h worker, unsigned /*flags*/,
                                                                            ucp_send_callback_t cb) {
    loom_request_param_t p{};
    set_send_callback(cb, p);
    return handle_result(loom_worker_flush_nbx(W(worker)->loom, &p));
}

ucs_status_t ucp_worker_flush(ucp_worker_h worker) {
    Worker* w = W(worker);
    return wait_blocking(w, loom_worker_flush_nbx(w->loom, nullptr));
}

// --- endpoints ------------------------------------------------------------------------------

ucs_status_t ucp_ep_create(ucp_worker_h worker, const ucp_ep_params_t* params,
                                                                  ucp_ep_h* ep_p) {
    if (worker == nullptr || params == nullptr || ep_p == nullptr) return UCS_ERR_INVALID_PARAM;
    Worker* w = W(worker);
    const std::uint64_t m = params->field_mask;
    loom_ep_params_t lp{};
    if (m & UCP_EP_PARAM_FIELD_REMOTE_ADDRESS) {
        lp.field_mask |= LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS;
        lp.address = params->address;
    }
    if (m & UCP_EP_PARAM_FIELD_SOCK_ADDR) {
        lp.field_mask |= LOOM_EP_PARAM_FIELD_SOCK_ADDR;
        lp.sockaddr.addr = params->sockaddr.addr;
        lp.sockaddr.addrlen = params->sockaddr.addrlen;
    }
    if (m & UCP_EP_PARAM_FIELD_CONN_REQUEST) {
        lp.field_mask |= LOOM_EP_PARAM_FIELD_CONN_REQUEST;
        lp.conn_request = reinterpret_cast<loom_conn_request_h>(params->conn_request);
    }
    if ((m & UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE) && params->err_mode == UCP_ERR_HANDLING_MODE_PEER) {
        lp.field_mask |= LOOM_EP_PARAM_FIELD_ERR_HANDLING_MODE;
        lp.err_mode = LOOM_ERR_HANDLING_MODE_PEER;
    }
    if (m & UCP_EP_PARAM_FIELD_USER_DATA) {
        lp.field_mask |= LOOM_EP_PARAM_FIELD_USER_DATA;
        lp.user_data = params->user_data;
    }
    EpErr* err = nullptr;
    if ((m & UCP_EP_PARAM_FIELD_ERR_HANDLER) && params->err_handler.cb != nullptr) {
        err = new (std::nothrow) EpErr{params->err_handler.cb, params->err_handler.arg, w};
        if (err == nullptr) return UCS_ERR_NO_MEMORY;
        lp.field_mask |= LOOM_EP_PARAM_FIELD_ERR_HANDLER;
        lp.err_handler.cb = ep_err_trampoline;
        lp.err_handler.arg = err;
    }
    // flags (client-server, no loopback, client id), name, local_sockaddr: nothing to do.
    loom_ep_h ep = nullptr;
    loom_status_t s = loom_ep_create(w->loom, &lp, &ep);
    if (s != LOOM_OK) {
        delete err;
        log_error("ucp_ep_create", "%s", loom_status_string(s));
        return to_ucs(s);
    }
    set_worker_of(ep, w);
    if (err != nullptr) {
        std::lock_guard<std::mutex> g(w->lock);
        EpErr*& slot = w->ep_err[ep];
        delete slot;  // of an endpoint closed earlier at the same address
        slot = err;
    }
    *ep_p = U(ep);
    return UCS_OK;
}

ucs_status_ptr_t ucp_ep_close_nbx(ucp_ep_h ep,
                                                                         const ucp_request_param_t* param) {
    const bool force = param != nullptr && (param->op_attr_mask & UCP_OP_ATTR_FIELD_FLAGS) &&
                       (param->flags & UCP_EP_CLOSE_FLAG_FORCE);
    return close_nbx(ep, param, force, "ucp_ep_close_nbx");
}

ucs_status_ptr_t ucp_ep_close_nb(ucp_ep_h ep, unsigned mode) {
    return close_nbx(ep, nullptr, mode == UCP_EP_CLOSE_MODE_FORCE, "ucp_ep_close_nb");
}

ucs_status_ptr_t ucp_disconnect_nb(ucp_ep_h ep) {
    return close_nbx(ep, nullptr, false, "ucp_disconnect_nb");
}

void ucp_ep_destroy(ucp_ep_h ep) {
    if (ep == nullptr) return;
    Worker* w = worker_of(E(ep));
    ucs_status_ptr_t r = close_nbx(ep, nullptr, false, "ucp_ep_destroy");
    if (w != nullptr && r != nullptr && !UCS_PTR_IS_ERR(r)) (void)wait_blocking(w, loom_handle(r));
}

ucs_status_ptr_t ucp_ep_flush_nbx(ucp_ep_h ep,
                                                                         const ucp_request_param_t* param) {
    loom_request_param_t p;
    if (!translate_param(param, p, "ucp_ep_flush_nbx")) return status_ptr(UCS_ERR_UNSUPPORTED);
    set_send_nbx_callback(param, p);
    return handle_result(loom_ep_flush_nbx(E(ep), &p));
}

ucs_status_ptr_t ucp_ep_flush_nb(ucp_ep_h ep, unsigned /*flags*/,
                                                                        ucp_send_callback_t cb) {
    loom_request_param_t p{};
    set_send_callback(cb, p);
    return handle_result(loom_ep_flush_nbx(E(ep), &p));
}

ucs_status_t ucp_ep_flush(ucp_ep_h ep) {
    Worker* w = worker_of(E(ep));
    if (w == nullptr) {
        log_error("ucp_ep_flush", "unknown endpoint %p", static_cast<void*>(ep));
        return UCS_ERR_INVALID_PARAM;
    }
    return wait_blocking(w, loom_ep_flush_nbx(E(ep), nullptr));
}

void ucp_ep_print_info(ucp_ep_h ep, FILE* stream) {
    if (stream != nullptr) std::fprintf(stream, "# UCP endpoint %p (Loom)\n", static_cast<void*>(ep));
}

}  // extern "C"
