/**
 * @file loom/ucp_request.h
 * Requests: the parameters of every non-blocking operation (loom_request_param_t), the
 * completion callbacks, and testing, releasing and cancelling request handles.
 *
 * Part of the C API of <loom/ucp.h>, whose conventions apply; it includes what it
 * uses, so it may also be included alone.
 */
#ifndef LOOM_UCP_REQUEST_H
#define LOOM_UCP_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "ucp_def.h"
#include "ucp_dt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    loom_tag_t sender_tag; /**< the tag of the message received */
    size_t length;         /**< its length in bytes (the full length when truncated) */
} loom_tag_recv_info_t;

/** Completion callback of a send (and flush, close). */
typedef void (*loom_send_nbx_callback_t)(void* request, loom_status_t status, void* user_data);

/** Completion callback of a tagged receive. */
typedef void (*loom_tag_recv_nbx_callback_t)(void* request, loom_status_t status, const loom_tag_recv_info_t* info,
                                             void* user_data);

/**
 * Completion callback of loom_am_recv_data_nbx: @p length is the message's length in
 * bytes (the full length also when it completes with LOOM_ERR_MESSAGE_TRUNCATED).
 */
typedef void (*loom_am_recv_data_nbx_callback_t)(void* request, loom_status_t status, size_t length,
                                                 void* user_data);

/** Completion callback of loom_stream_recv_nbx: @p length bytes were received (valid with LOOM_OK). */
typedef void (*loom_stream_recv_nbx_callback_t)(void* request, loom_status_t status, size_t length,
                                                void* user_data);

enum {
    LOOM_OP_ATTR_FIELD_REQUEST =
        1u << 0, /**< request: caller's memory (see loom_context_attr_t.request_size) */
    LOOM_OP_ATTR_FIELD_CALLBACK = 1u << 1, /**< cb */
    LOOM_OP_ATTR_FIELD_USER_DATA = 1u << 2,
    LOOM_OP_ATTR_FIELD_DATATYPE = 1u << 3,
    LOOM_OP_ATTR_FIELD_FLAGS = 1u << 4,
    LOOM_OP_ATTR_FIELD_RECV_INFO = 1u << 5,    /**< recv_info: filled when a receive completes at once */
    LOOM_OP_ATTR_FIELD_REPLY_BUFFER = 1u << 6, /**< reply_buffer: a fetching atomic (loom_atomic_op_nbx) */
    LOOM_OP_ATTR_FIELD_MEMH = 1u << 7,         /**< memh: the local buffer of an RMA operation is mapped */
    /**
     * request_data: stored in the first pointer-sized bytes of the caller's part of the
     * request (loom_params_t.request_size must leave room) before the operation starts,
     * when it needs a request. Per-operation state its callback reads, set without racing
     * the completion (in thread mode multi another thread's progress may complete the
     * operation before the call that started it returns).
     */
    LOOM_OP_ATTR_FIELD_REQUEST_DATA = 1u << 8,
    /**
     * deadline_ns: when the operation gives up with LOOM_ERR_TIMED_OUT if it has not
     * completed, nanoseconds from the call (or, with LOOM_OP_ATTR_FLAG_DEADLINE_ABSOLUTE, a
     * CLOCK_MONOTONIC time). Looked at from loom_worker_progress. What an operation can
     * still withdraw at its deadline, and what its peer sees, is in docs/reliability.md:
     * a receive not matched yet, a tagged send its receiver has not matched (withdrawn, as
     * loom_request_cancel does), a stream receive (with the bytes it took), a stream send
     * the receiver's window holds back, a flush (the operations it waited for go on) and a
     * close (the endpoint closes by force). An operation already matched, or whose data the
     * transport holds, completes normally: its peer has it or is taking it.
     */
    LOOM_OP_ATTR_FIELD_DEADLINE = 1u << 9,
    /**
     * Always return a request, never NULL. An operation done inside the call still
     * reports its completion (loom_request_check_status, the callback) only from the
     * next loom_worker_progress: a callback never runs inside the call that started it.
     */
    LOOM_OP_ATTR_FLAG_NO_IMM_CMPL = 1u << 16,
    LOOM_OP_ATTR_FLAG_FORCE_IMM_CMPL = 1u << 17,   /**< complete at once or fail with LOOM_ERR_NO_RESOURCE */
    LOOM_OP_ATTR_FLAG_DEADLINE_ABSOLUTE = 1u << 18 /**< deadline_ns is a CLOCK_MONOTONIC time, not a delay */
};

/** Parameters of every non-blocking operation. */
typedef struct {
    uint32_t op_attr_mask; /**< LOOM_OP_ATTR_FIELD_* and LOOM_OP_ATTR_FLAG_* bits */
    uint32_t flags;        /**< operation-specific flags (LOOM_EP_CLOSE_FLAG_FORCE) */
    /**
     * Caller's request memory: the handle returned, with loom_context_attr_t.request_size
     * bytes before it for Loom. Such a request is never freed by Loom.
     */
    void* request;
    union {
        loom_send_nbx_callback_t send;
        loom_tag_recv_nbx_callback_t recv;
        loom_am_recv_data_nbx_callback_t am;         /**< loom_am_recv_data_nbx */
        loom_stream_recv_nbx_callback_t stream;      /**< loom_stream_recv_nbx */
    } cb;
    loom_datatype_t datatype; /**< default: bytes (loom_dt_make_contig(1)) */
    void* user_data;
    union {
        loom_tag_recv_info_t* tag_recv;
        size_t* length; /**< loom_am_recv_data_nbx: the message's length, when it completes at once */
    } recv_info;
    /**
     * loom_atomic_op_nbx: where the remote location's previous value goes (its presence
     * makes the operation fetching); for LOOM_ATOMIC_OP_CSWAP it also holds the value to
     * swap in on input (the operand buffer holds the value to compare with, as in UCX).
     */
    void* reply_buffer;
    /** loom_put_nbx / loom_get_nbx: a mapping (loom_mem_map) that covers the local buffer. */
    struct loom_mem* memh;
    void* request_data; /**< LOOM_OP_ATTR_FIELD_REQUEST_DATA */
    uint64_t deadline_ns; /**< LOOM_OP_ATTR_FIELD_DEADLINE */
} loom_request_param_t;

/**
 * LOOM_OK or an error once @p request completed, LOOM_INPROGRESS before. What an _nbx
 * call returned that is not a request (NULL, an error code) is answered as its status
 * (LOOM_PTR_STATUS); loom_request_free and loom_request_cancel ignore it.
 */
loom_status_t loom_request_check_status(void* request);

/**
 * Releases a request handle. A request still running goes on and is freed once it
 * completes, but its callback never runs after this call (as in UCX: a library may
 * free a request and reuse the memory its callback would have touched).
 */
void loom_request_free(void* request);

/**
 * Cancels a request, with MPI's rules: it completes with LOOM_ERR_CANCELED if it had not
 * matched, normally otherwise. A tagged receive that has not matched is cancelled in the
 * call. A tagged send that waits for its receiver (a rendezvous-sized or synchronous send)
 * is withdrawn from the receiver's unexpected queue if no receive has taken it yet: the
 * receiver answers, and the send completes from progress, with LOOM_ERR_CANCELED (the
 * receiver never sees the message) or, when it was already matched, normally. A send
 * that completed, an eager send (complete once handed over), active messages, streams
 * and RMA are not cancelled. @p worker must be the request's (otherwise one error line
 * and nothing happens).
 */
void loom_request_cancel(loom_worker_h worker, void* request);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_UCP_REQUEST_H */
