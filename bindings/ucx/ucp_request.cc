/**
 * libucp: requests. The trampolines through which Loom reports completions to the
 * caller's UCX callbacks, and the request calls (test, free, cancel).
 */
#include "compat.h"

namespace loom::ucx {

static_assert(sizeof(ucp_tag_recv_info_t) == sizeof(loom_tag_recv_info_t) &&
                  offsetof(ucp_tag_recv_info_t, sender_tag) == offsetof(loom_tag_recv_info_t, sender_tag) &&
                  offsetof(ucp_tag_recv_info_t, length) == offsetof(loom_tag_recv_info_t, length),
              "receive information is handed over as it is: the layouts must agree");

inline const ucp_tag_recv_info_t* U(const loom_tag_recv_info_t* info) noexcept {
    return reinterpret_cast<const ucp_tag_recv_info_t*>(info);
}

void tramp_send(void* r, loom_status_t status, void*) {
    reinterpret_cast<ucp_send_callback_t>(part_of_loom(r)->cb)(ucx_handle(r), to_ucs(status));
}

void tramp_send_nbx(void* r, loom_status_t status, void* user_data) {
    reinterpret_cast<ucp_send_nbx_callback_t>(part_of_loom(r)->cb)(ucx_handle(r), to_ucs(status), user_data);
}

void tramp_tag_recv(void* r, loom_status_t status, const loom_tag_recv_info_t* info, void*) {
    // UCX 1.x's receive callback takes a non-const info; the copy keeps Loom's intact.
    ucp_tag_recv_info_t copy = *U(info);
    reinterpret_cast<ucp_tag_recv_callback_t>(part_of_loom(r)->cb)(ucx_handle(r), to_ucs(status), &copy);
}

void tramp_tag_recv_nbx(void* r, loom_status_t status, const loom_tag_recv_info_t* info, void* user_data) {
    reinterpret_cast<ucp_tag_recv_nbx_callback_t>(part_of_loom(r)->cb)(ucx_handle(r), to_ucs(status), U(info),
                                                                         user_data);
}

void tramp_length_nbx(void* r, loom_status_t status, size_t length, void* user_data) {
    reinterpret_cast<ucp_am_recv_data_nbx_callback_t>(part_of_loom(r)->cb)(ucx_handle(r), to_ucs(status), length,
                                                                             user_data);
}

}  // namespace loom::ucx

using namespace loom::ucx;

extern "C" {

ucs_status_t ucp_request_check_status(void* request) {
    return to_ucs(loom_request_check_status(loom_handle(request)));
}

ucs_status_t ucp_request_test(void* request, ucp_tag_recv_info_t* info) {
    return to_ucs(loom_tag_recv_request_test(loom_handle(request), reinterpret_cast<loom_tag_recv_info_t*>(info)));
}

int ucp_request_is_completed(void* request) {
    return loom_request_check_status(loom_handle(request)) != LOOM_INPROGRESS;
}

void ucp_request_free(void* request) {
    if (request != nullptr) loom_request_free(loom_handle(request));
}

void ucp_request_release(void* request) {
    if (request != nullptr) loom_request_free(loom_handle(request));
}

void ucp_request_cancel(ucp_worker_h worker, void* request) {
    if (worker == nullptr || request == nullptr) return;
    loom_request_cancel(W(worker)->loom, loom_handle(request));
}

ucs_status_t ucp_stream_recv_request_test(void* request, size_t* length_p) {
    return to_ucs(loom_stream_recv_request_test(loom_handle(request), length_p));
}

}  // extern "C"
