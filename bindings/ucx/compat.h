/**
 * The UCX compatibility layer's own plumbing, shared by its files (never installed).
 *
 * The layer exports UCX 1.13's functions (libucp.so.0, libucs.so.0, libucm.so.0) over
 * Loom's public C API (loom/ucp.h). Callers were compiled against UCX's headers, so every
 * value that crosses the boundary is translated here, never passed through: statuses,
 * flag bits, datatypes, parameter structs (ucx_abi.h declares UCX's side; test/ucx_abi
 * holds it against the real headers).
 *
 * Requests. A request handle a UCX caller holds points at its own part (the request_size
 * bytes it asked for), with the library's state before it, exactly as in UCX. Here the
 * state before it is Loom's request followed by the layer's Part:
 *
 *     [ Loom's request ][ Part ][ caller's part ]
 *                      ^ Loom's handle         ^ the UCX handle
 *
 * so ucp_context_attr_t.request_size is Loom's request_size plus sizeof(Part), and a
 * caller-provided request (UCP_OP_ATTR_FIELD_REQUEST) becomes a Loom caller-provided
 * request sizeof(Part) bytes lower. The Part holds the caller's callback, which Loom
 * stores there before the operation starts (LOOM_OP_ATTR_FIELD_REQUEST_DATA, so even
 * another thread's progress finds it); Loom calls a trampoline of the layer (one per
 * callback shape), which translates the status and calls the caller's function with the
 * UCX handle. Loom never runs a callback inside the call that started the operation,
 * which UCX 1.13 does for some (loom/ucp_request.h, LOOM_OP_ATTR_FLAG_NO_IMM_CMPL).
 */
#pragma once

#include "loom/ucp.h"
#include "exports.h"
#include "ucx_abi.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <unordered_map>

namespace loom::ucx {

// --- logging ----------------------------------------------------------------------------

/**
 * One log line on stderr, "[loom-ucx] <call>: <why>", for what the layer cannot honour.
 * Quiet with LOOM_UCX_LOG=0 (default on); LOOM_UCX_LOG=debug adds the debug lines.
 */
void log_error(const char* call, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
/** A debug line (LOOM_UCX_LOG=debug only). */
void log_debug(const char* call, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// --- statuses ---------------------------------------------------------------------------

/** UCX's status for a Loom status. */
ucs_status_t to_ucs(loom_status_t status) noexcept;
/** Loom's status for a UCX status (a caller's generic datatype returns UCX's). */
loom_status_t to_loom(ucs_status_t status) noexcept;

/** A UCX status pointer: NULL, an error, never a request. */
inline ucs_status_ptr_t status_ptr(ucs_status_t s) noexcept {
    return reinterpret_cast<ucs_status_ptr_t>(static_cast<std::intptr_t>(s));
}

// --- requests ---------------------------------------------------------------------------

/** The layer's state in every request, between Loom's and the caller's (file comment). */
struct Part {
    void* cb;     ///< the caller's callback, of the shape its trampoline knows
    void* spare;  ///< keeps the caller's part 16-byte aligned
};
static_assert(sizeof(Part) == 16, "the caller's part stays 16-byte aligned after the Part");

inline Part* part_of_loom(void* loom_handle) noexcept { return static_cast<Part*>(loom_handle); }
inline void* ucx_handle(void* loom_handle) noexcept { return static_cast<char*>(loom_handle) + sizeof(Part); }
inline void* loom_handle(void* ucx_handle) noexcept { return static_cast<char*>(ucx_handle) - sizeof(Part); }
inline Part* part_of(void* ucx_handle) noexcept { return static_cast<Part*>(loom_handle(ucx_handle)); }

/** Loom's callback field of the trampoline's shape. */
inline void set_loom_cb(loom_request_param_t& p, loom_send_nbx_callback_t t) noexcept { p.cb.send = t; }
inline void set_loom_cb(loom_request_param_t& p, loom_tag_recv_nbx_callback_t t) noexcept { p.cb.recv = t; }
/// (loom_stream_recv_nbx_callback_t has the same shape: p.cb.am and p.cb.stream share it)
inline void set_loom_cb(loom_request_param_t& p, loom_am_recv_data_nbx_callback_t t) noexcept { p.cb.am = t; }

/** Makes Loom store @p cb in the Part of the operation's request and call @p trampoline. */
template <typename Trampoline>
inline void set_callback(loom_request_param_t& p, void* cb, Trampoline trampoline) noexcept {
    p.op_attr_mask |= LOOM_OP_ATTR_FIELD_CALLBACK | LOOM_OP_ATTR_FIELD_REQUEST_DATA;
    p.request_data = cb;
    set_loom_cb(p, trampoline);
}

/** What a layer call returns for Loom's @p r: NULL, a translated error, or the UCX handle. */
inline ucs_status_ptr_t handle_result(loom_status_ptr_t r) noexcept {
    if (LOOM_PTR_IS_PTR(r)) return ucx_handle(r);
    if (r == nullptr) return nullptr;
    return status_ptr(to_ucs(LOOM_PTR_STATUS(r)));
}

/** Loom's callbacks that call the caller's UCX callback of each shape (ucp_request.cc). */
void tramp_send(void* loom_request, loom_status_t status, void* user_data);     ///< ucp_send_callback_t
void tramp_send_nbx(void* loom_request, loom_status_t status, void* user_data); ///< ucp_send_nbx_callback_t
void tramp_tag_recv(void* loom_request, loom_status_t status, const loom_tag_recv_info_t* info,
                    void* user_data);  ///< ucp_tag_recv_callback_t
void tramp_tag_recv_nbx(void* loom_request, loom_status_t status, const loom_tag_recv_info_t* info,
                        void* user_data);  ///< ucp_tag_recv_nbx_callback_t
void tramp_length_nbx(void* loom_request, loom_status_t status, size_t length,
                      void* user_data);  ///< ucp_am_recv_data_nbx_callback_t, ucp_stream_recv_nbx_callback_t

/**
 * The callback of an nbx call's parameters, if any, on @p p (ucp_send_nbx_callback_t
 * shaped callbacks: sends, flushes, RMA, atomics, close).
 */
inline void set_send_nbx_callback(const ucp_request_param_t* in, loom_request_param_t& p) noexcept {
    if (in != nullptr && (in->op_attr_mask & UCP_OP_ATTR_FIELD_CALLBACK) && in->cb.send != nullptr) {
        set_callback(p, reinterpret_cast<void*>(in->cb.send), tramp_send_nbx);
    }
}

/** The callback of a legacy _nb call (ucp_send_callback_t) on @p p. */
inline void set_send_callback(ucp_send_callback_t cb, loom_request_param_t& p) noexcept {
    if (cb != nullptr) set_callback(p, reinterpret_cast<void*>(cb), tramp_send);
}

// --- datatypes --------------------------------------------------------------------------

/** A UCX generic datatype: the caller's ops and context, and the Loom datatype over them. */
struct GenericDt {
    ucp_generic_dt_ops_t ops;
    void* context;
    loom_datatype_t loom_dt;
};

/** Loom's datatype for a UCX one; false (logged, naming @p call) for a class Loom lacks. */
bool to_loom_dt(ucp_datatype_t dt, loom_datatype_t& out, const char* call) noexcept;

// --- handles ----------------------------------------------------------------------------

/** ucp_config_t: what ucp_config_read found and ucp_config_modify changed. */
struct Config;

/** ucp_context_h. */
struct Context {
    loom_context_h loom = nullptr;
    std::uint64_t features = 0;       ///< UCP_FEATURE_* asked for
    std::size_t user_request_size = 0;
    ucp_request_init_callback_t request_init = nullptr;
    ucp_request_cleanup_callback_t request_cleanup = nullptr;
    std::size_t loom_request_size = 0;  ///< Loom's part before a caller-provided request
};

/** An active-message handler of the UCX 1.x API (ucp_worker_set_am_handler) on one id. */
struct OldAmHandler {
    ucp_am_callback_t cb = nullptr;
    void* arg = nullptr;
    struct Worker* worker = nullptr;
};

/** A handler of the newer API (ucp_worker_set_am_recv_handler) on one id. */
struct AmRecvHandler {
    ucp_am_recv_callback_t cb = nullptr;
    void* arg = nullptr;
    struct Worker* worker = nullptr;
};

/** ucp_worker_h. */
struct Worker {
    loom_worker_h loom = nullptr;
    Context* context = nullptr;
    ucs_thread_mode_t thread_mode = UCS_THREAD_MODE_SINGLE;
    std::mutex lock;  ///< the control-path maps below
    std::unordered_map<unsigned, OldAmHandler*> old_am;    ///< by id
    std::unordered_map<unsigned, AmRecvHandler*> am_recv;  ///< by id
    std::unordered_map<loom_ep_h, struct EpErr*> ep_err;   ///< error handlers, by endpoint
};

/** An endpoint's UCX error handler, called through Loom's. */
struct EpErr {
    ucp_err_handler_cb_t cb;
    void* arg;
    Worker* worker;
};

/** ucp_ep_h is Loom's endpoint itself: no state of the layer on the data path. */
inline loom_ep_h E(ucp_ep_h ep) noexcept { return reinterpret_cast<loom_ep_h>(ep); }
inline ucp_ep_h U(loom_ep_h ep) noexcept { return reinterpret_cast<ucp_ep_h>(ep); }
inline Worker* W(ucp_worker_h w) noexcept { return reinterpret_cast<Worker*>(w); }
inline Context* C(ucp_context_h c) noexcept { return reinterpret_cast<Context*>(c); }

/**
 * Waits for Loom's @p r (a status or a request), progressing @p w, and frees the request:
 * the blocking UCX 1.x calls. Returns the operation's UCX status.
 */
ucs_status_t wait_blocking(Worker* w, loom_status_ptr_t r) noexcept;

/** The Loom worker an endpoint belongs to, through the layer's registry (control paths only). */
Worker* worker_of(loom_ep_h ep) noexcept;
/** Records that @p ep belongs to @p w (ucp_ep_create) or forgets it (nullptr). */
void set_worker_of(loom_ep_h ep, Worker* w) noexcept;

// --- request parameters -----------------------------------------------------------------

/**
 * Translates the fields of a UCX request parameter struct that every operation shares
 * (request, datatype, flags, user data, memh, reply buffer) into @p out; the callback is
 * the caller's business (a trampoline goes in out.cb). False, logged naming @p call, for
 * what Loom cannot do (a strided datatype, a memory type other than host).
 */
bool translate_param(const ucp_request_param_t* in, loom_request_param_t& out, const char* call) noexcept;

}  // namespace loom::ucx
