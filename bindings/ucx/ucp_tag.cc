/**
 * libucp: tagged messages, in the _nbx forms and the UCX 1.x _nb/_nbr forms, over Loom's
 * loom_tag_* calls. The hot path of an MPI library: one parameter translation and a call.
 */
#include "compat.h"

using namespace loom::ucx;

namespace {

/** The legacy calls' datatype as Loom's parameters; false (logged) for a class Loom lacks. */
inline bool legacy_param(ucp_datatype_t dt, loom_request_param_t& p, const char* call) noexcept {
    p.op_attr_mask = 0;
    if (dt == ucp_dt_make_contig(1)) return true;  // Loom's default: bytes
    if (!to_loom_dt(dt, p.datatype, call)) return false;
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_DATATYPE;
    return true;
}

inline ucs_status_ptr_t send_nbx(ucp_ep_h ep, const void* buffer, size_t count, ucp_tag_t tag,
                                 const ucp_request_param_t* param, bool sync, const char* call) {
    loom_request_param_t p;
    if (!translate_param(param, p, call)) return status_ptr(UCS_ERR_UNSUPPORTED);
    set_send_nbx_callback(param, p);
    loom_status_ptr_t r = sync ? loom_tag_send_sync_nbx(E(ep), buffer, count, tag, &p)
                               : loom_tag_send_nbx(E(ep), buffer, count, tag, &p);
    return handle_result(r);
}

inline ucs_status_ptr_t send_nb(ucp_ep_h ep, const void* buffer, size_t count, ucp_datatype_t datatype,
                                ucp_tag_t tag, ucp_send_callback_t cb, bool sync, const char* call) {
    loom_request_param_t p;
    if (!legacy_param(datatype, p, call)) return status_ptr(UCS_ERR_UNSUPPORTED);
    set_send_callback(cb, p);
    loom_status_ptr_t r = sync ? loom_tag_send_sync_nbx(E(ep), buffer, count, tag, &p)
                               : loom_tag_send_nbx(E(ep), buffer, count, tag, &p);
    return handle_result(r);
}

/** The receive callback of an nbx call's parameters, if any. */
inline void set_recv_nbx_callback(const ucp_request_param_t* in, loom_request_param_t& p) noexcept {
    if (in != nullptr && (in->op_attr_mask & UCP_OP_ATTR_FIELD_CALLBACK) && in->cb.recv != nullptr) {
        set_callback(p, reinterpret_cast<void*>(in->cb.recv), tramp_tag_recv_nbx);
    }
    if (in != nullptr && (in->op_attr_mask & UCP_OP_ATTR_FIELD_RECV_INFO)) {
        p.op_attr_mask |= LOOM_OP_ATTR_FIELD_RECV_INFO;
        p.recv_info.tag_recv = reinterpret_cast<loom_tag_recv_info_t*>(in->recv_info.tag_info);
    }
}

/**
 * A UCX 1.x receive (_nb): always a request, its callback run once the message is in
 * (UCX runs it inside the call when the message was there already; Loom from progress).
 */
inline void set_legacy_recv(ucp_tag_recv_callback_t cb, loom_request_param_t& p) noexcept {
    p.op_attr_mask |= LOOM_OP_ATTR_FLAG_NO_IMM_CMPL;
    if (cb != nullptr) set_callback(p, reinterpret_cast<void*>(cb), tramp_tag_recv);
}

}  // namespace

extern "C" {

ucs_status_ptr_t ucp_tag_send_nbx(ucp_ep_h ep, const void* buffer,
                                                                         size_t count, ucp_tag_t tag,
                                                                         const ucp_request_param_t* param) {
    return send_nbx(ep, buffer, count, tag, param, false, "ucp_tag_send_nbx");
}

ucs_status_ptr_t ucp_tag_send_sync_nbx(ucp_ep_h ep, const void* buffer,
                                                                              size_t count, ucp_tag_t tag,
                                                                              const ucp_request_param_t* param) {
    return send_nbx(ep, buffer, count, tag, param, true, "ucp_tag_send_sync_nbx");
}

ucs_status_ptr_t ucp_tag_send_nb(ucp_ep_h ep, const void* buffer,
                                                                        size_t count, ucp_datatype_t datatype,
                                                                        ucp_tag_t tag, ucp_send_callback_t cb) {
    return send_nb(ep, buffer, count, datatype, tag, cb, false, "ucp_tag_send_nb");
}

ucs_status_ptr_t ucp_tag_send_sync_nb(ucp_ep_h ep, const void* buffer,
                                                                             size_t count, ucp_datatype_t datatype,
                                                                             ucp_tag_t tag, ucp_send_callback_t cb) {
    return send_nb(ep, buffer, count, datatype, tag, cb, true, "ucp_tag_send_sync_nb");
}

/** UCX 1.x: a send into the caller's request memory; UCS_OK when done at once, UCS_INPROGRESS after. */
ucs_status_t ucp_tag_send_nbr(ucp_ep_h ep, const void* buffer, size_t count,
                                                                     ucp_datatype_t datatype, ucp_tag_t tag,
                                                                     void* req) {
    loom_request_param_t p;
    if (!legacy_param(datatype, p, "ucp_tag_send_nbr")) return UCS_ERR_UNSUPPORTED;
    p.op_attr_mask |= LOOM_OP_ATTR_FIELD_REQUEST;
    p.request = loom_handle(req);
    loom_status_ptr_t r = loom_tag_send_nbx(E(ep), buffer, count, tag, &p);
    return LOOM_PTR_IS_PTR(r) ? UCS_INPROGRESS : to_ucs(LOOM_PTR_STATUS(r));
}

ucs_status_ptr_t ucp_tag_recv_nbx(ucp_worker_h worker, void* buffer,
                                                                         size_t count, ucp_tag_t tag,
                                                                         ucp_tag_t tag_mask,
                                                                         const ucp_request_param_t* param) {
    loom_request_param_t p;
    if (!translate_param(param, p, "ucp_tag_recv_nbx")) return status_ptr(UCS_ERR_UNSUPPORTED);
    set_recv_nbx_callback(param, p);
    return handle_result(loom_tag_recv_nbx(W(worker)->loom, buffer, count, tag, tag_mask, &p));
}

ucs_status_ptr_t ucp_tag_recv_nb(ucp_worker_h worker, void* buffer,
                                                                        size_t count, ucp_datatype_t datatype,
                                                                        ucp_tag_t tag, ucp_tag_t tag_mask,
                                                                        ucp_tag_recv_callback_t cb) {
    loom_request_param_t p;
    if (!legacy_param(datatype, p, "ucp_tag_recv_nb")) return status_ptr(UCS_ERR_UNSUPPORTED);
    set_legacy_recv(cb, p);
    return handle_result(loom_tag_recv_nbx(W(worker)->loom, buffer, count, tag, tag_mask, &p));
}

/** UCX 1.x: a receive into the caller's request memory; test it with ucp_request_test. */
ucs_status_t ucp_tag_recv_nbr(ucp_worker_h worker, void* buffer, size_t count,
                                                                     ucp_datatype_t datatype, ucp_tag_t tag,
                                                                     ucp_tag_t tag_mask, void* req) {
    loom_request_param_t p;
    if (!legacy_param(datatype, p, "ucp_tag_recv_nbr")) return UCS_ERR_UNSUPPORTED;
    p.op_attr_mask |= LOOM_OP_ATTR_FIELD_REQUEST | LOOM_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.request = loom_handle(req);
    loom_status_ptr_t r = loom_tag_recv_nbx(W(worker)->loom, buffer, count, tag, tag_mask, &p);
    return LOOM_PTR_IS_ERR(r) ? to_ucs(LOOM_PTR_STATUS(r)) : UCS_OK;
}

ucp_tag_message_h ucp_tag_probe_nb(ucp_worker_h worker, ucp_tag_t tag,
                                                                          ucp_tag_t tag_mask, int remove,
                                                                          ucp_tag_recv_info_t* info) {
    return reinterpret_cast<ucp_tag_message_h>(loom_tag_probe_nb(W(worker)->loom, tag, tag_mask, remove,
                                                                 reinterpret_cast<loom_tag_recv_info_t*>(info)));
}

ucs_status_ptr_t ucp_tag_msg_recv_nbx(ucp_worker_h worker, void* buffer,
                                                                             size_t count, ucp_tag_message_h message,
                                                                             const ucp_request_param_t* param) {
    loom_request_param_t p;
    if (!translate_param(param, p, "ucp_tag_msg_recv_nbx")) return status_ptr(UCS_ERR_UNSUPPORTED);
    set_recv_nbx_callback(param, p);
    return handle_result(loom_tag_msg_recv_nbx(W(worker)->loom, buffer, count,
                                               reinterpret_cast<loom_tag_message_h>(message), &p));
}

ucs_status_ptr_t ucp_tag_msg_recv_nb(ucp_worker_h worker, void* buffer,
                                                                            size_t count, ucp_datatype_t datatype,
                                                                            ucp_tag_message_h message,
                                                                            ucp_tag_recv_callback_t cb) {
    loom_request_param_t p;
    if (!legacy_param(datatype, p, "ucp_tag_msg_recv_nb")) return status_ptr(UCS_ERR_UNSUPPORTED);
    set_legacy_recv(cb, p);
    return handle_result(loom_tag_msg_recv_nbx(W(worker)->loom, buffer, count,
                                               reinterpret_cast<loom_tag_message_h>(message), &p));
}

}  // extern "C"
