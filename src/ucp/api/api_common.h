/**
 * Helpers shared by the files of the C API (ucp_api.cc, rma_api.cc): handle casts,
 * status pointers, and the request rules every _nbx call follows (a request from the
 * caller's memory or the pool; NULL or the status when the operation completed in the
 * call). Internal to src/ucp/api.
 */
#pragma once

#include "loom/ucp.h"

#include "ucp/api/handles.h"
#include "ucp/core/request.h"
#include "ucp/core/worker.h"

#include <cstdint>
#include <cstring>

namespace loom::ucp::api {

inline Ep* E(loom_ep_h ep) { return reinterpret_cast<Ep*>(ep); }
inline loom_status_t C(Status s) { return static_cast<loom_status_t>(s); }
inline void* status_ptr(Status s) { return reinterpret_cast<void*>(static_cast<std::intptr_t>(s)); }
inline std::uint32_t attr(const loom_request_param_t* p) { return p ? p->op_attr_mask : 0; }

/** The operation's datatype: bytes unless the parameters name one. */
inline Datatype dt_of(const loom_request_param_t* p) {
    return (attr(p) & LOOM_OP_ATTR_FIELD_DATATYPE) ? p->datatype : dt_make_contig(1);
}

/** A request for an operation: the caller's memory or the pool; nullptr without memory. */
inline Request* new_request(Worker& w, const loom_request_param_t* p) {
    Request* req = (attr(p) & LOOM_OP_ATTR_FIELD_REQUEST) ? w.init_caller_request(p->request) : w.alloc_request();
    if (req == nullptr) return nullptr;
    if (attr(p) & LOOM_OP_ATTR_FIELD_USER_DATA) req->user_data = p->user_data;
    if (attr(p) & LOOM_OP_ATTR_FIELD_CALLBACK) req->cb.send = p->cb.send;
    if (LOOM_UNLIKELY(attr(p) & LOOM_OP_ATTR_FIELD_REQUEST_DATA)) {
        std::memcpy(handle_of(req), &p->request_data, sizeof(p->request_data));
    }
    return req;
}

/**
 * A caller-provided request reports every operation started in it, also one done inside
 * the call without needing a request (as UCX does: Open MPI's blocking receive polls the
 * request it passed, not the call's return value). Around such an operation:
 * caller_request_begin() marks the memory unused, caller_request_end() marks it complete
 * with the operation's status unless the operation completed it itself (with its receive
 * information). No cost without LOOM_OP_ATTR_FIELD_REQUEST.
 */
inline void caller_request_begin(const loom_request_param_t* p) {
    if (LOOM_UNLIKELY(attr(p) & LOOM_OP_ATTR_FIELD_REQUEST)) request_of(p->request)->flags = 0;
}
inline void* caller_request_end(Worker* w, const loom_request_param_t* p, void* r) {
    if (LOOM_UNLIKELY(attr(p) & LOOM_OP_ATTR_FIELD_REQUEST) && !LOOM_PTR_IS_PTR(r) && w != nullptr) {
        Request* req = request_of(p->request);
        if (!(req->flags & kReqCompleted)) {
            (void)w->init_caller_request(p->request);
            req->status = static_cast<Status>(reinterpret_cast<std::intptr_t>(r));
            req->flags |= kReqCompleted;
        }
    }
    return r;
}

/**
 * The worker clock's time of @p p's deadline: deadline_ns from now, or the CLOCK_MONOTONIC
 * time deadline_ns with LOOM_OP_ATTR_FLAG_DEADLINE_ABSOLUTE (already past: now).
 */
inline ucs::Ticks deadline_of(const loom_request_param_t* p) {
    const ucs::Ticks now = ucs::get_time();
    std::uint64_t delay_ns = p->deadline_ns;
    if (p->op_attr_mask & LOOM_OP_ATTR_FLAG_DEADLINE_ABSOLUTE) {
        const std::uint64_t mono = ucs::detail::monotonic_ns();
        delay_ns = p->deadline_ns > mono ? p->deadline_ns - mono : 0;
    }
    const ucs::Ticks delay = ucs::ns_to_ticks(delay_ns);
    return delay > UINT64_MAX - now ? UINT64_MAX : now + delay;
}

/** What an _nbx call returns for @p req once its first step ran. */
inline void* finish_nbx(Worker& w, Request* req, const loom_request_param_t* p) {
    if ((req->flags & kReqCompleted) && !(attr(p) & LOOM_OP_ATTR_FLAG_NO_IMM_CMPL)) {
        Status s = req->status;
        if ((req->flags & kReqRecv) && (attr(p) & LOOM_OP_ATTR_FIELD_RECV_INFO) && p->recv_info.tag_recv) {
            if (req->flags & kReqRecvLength) {
                *p->recv_info.length = req->recv.info.length;  // active-message and stream data
            } else {
                std::memcpy(p->recv_info.tag_recv, &req->recv.info, sizeof(TagRecvInfo));
            }
        }
        w.release(req);
        return status_ptr(s);
    }
    req->flags |= kReqHandedOut;
    // NO_IMM_CMPL and done already: a callback runs from progress, never inside the call.
    if ((req->flags & kReqCompleted) && req->cb.send != nullptr) w.defer_callback(req);
    if (LOOM_UNLIKELY(attr(p) & LOOM_OP_ATTR_FIELD_DEADLINE) && !(req->flags & kReqCompleted)) {
        w.deadline_arm(req, deadline_of(p));
    }
    return handle_of(req);
}

/** An operation that completed without a request: its status, or under NO_IMM_CMPL a completed request. */
inline void* completed_request(Worker& w, Status s, const loom_request_param_t* p) {
    if (!(attr(p) & LOOM_OP_ATTR_FLAG_NO_IMM_CMPL)) return status_ptr(s);
    Request* req = new_request(w, p);
    if (req == nullptr) return status_ptr(Status::no_memory);
    req->status = s;
    req->flags |= kReqCompleted | kReqHandedOut;
    if (req->cb.send != nullptr) w.defer_callback(req);  // from progress, never inside the call
    return handle_of(req);
}

}  // namespace loom::ucp::api
