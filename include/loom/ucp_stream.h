/**
 * @file loom/ucp_stream.h
 * Streams.
 *
 * A byte stream in each direction of an endpoint (LOOM_FEATURE_STREAM): bytes arrive in
 * the order they were sent, without message boundaries; what arrives before a receive
 * asks for it waits in the endpoint's queue. The stream of an endpoint is the one
 * between its two workers: a worker's endpoints to two different workers never mix
 * bytes.
 *
 * Part of the C API of <loom/ucp.h>, whose conventions apply; it includes what it
 * uses, so it may also be included alone.
 */
#ifndef LOOM_UCP_STREAM_H
#define LOOM_UCP_STREAM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ucp_def.h"
#include "ucp_request.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Flags of loom_stream_recv_nbx (in loom_request_param_t.flags, with LOOM_OP_ATTR_FIELD_FLAGS). */
enum {
    LOOM_STREAM_RECV_FLAG_WAITALL = 1u << 0 /**< complete only once all @p count elements arrived */
};

/** An endpoint loom_stream_worker_poll found with data. */
typedef struct {
    loom_ep_h ep;
    void* user_data; /**< the endpoint's user_data (loom_ep_params_t) */
    unsigned flags;  /**< reserved */
    uint8_t reserved[16];
} loom_stream_poll_ep_t;

/**
 * Appends @p count elements of the param's datatype at @p buffer to the stream of
 * @p ep. The buffer may be reused once the operation completes (at once when NULL is
 * returned). LOOM_ERR_INVALID_PARAM (logged) for a NULL endpoint or a context without
 * LOOM_FEATURE_STREAM.
 */
loom_status_ptr_t loom_stream_send_nbx(loom_ep_h ep, const void* buffer, size_t count,
                                       const loom_request_param_t* param);

/**
 * Receives up to @p count elements of the param's contiguous or iov datatype from the
 * stream of @p ep: completes as soon as at least one whole element arrived (only whole
 * elements are taken), or with LOOM_STREAM_RECV_FLAG_WAITALL once all of them did.
 * Receives of one endpoint complete in the order they were posted. When it completes
 * at once (NULL), *@p length holds the bytes received; a request reports them to
 * cb.stream and loom_stream_recv_request_test. A failed endpoint still hands out the
 * bytes that arrived before its failure, then the error. A receive past its deadline
 * (LOOM_OP_ATTR_FIELD_DEADLINE) completes with LOOM_ERR_TIMED_OUT and the bytes it took,
 * which are not received again. LOOM_ERR_INVALID_PARAM
 * (logged) for a NULL endpoint or length, a generic datatype, unknown flags, or a
 * context without LOOM_FEATURE_STREAM.
 */
loom_status_ptr_t loom_stream_recv_nbx(loom_ep_h ep, void* buffer, size_t count, size_t* length,
                                       const loom_request_param_t* param);

/**
 * loom_request_check_status for a stream receive, filling @p length once it completed
 * with LOOM_OK, or with LOOM_ERR_TIMED_OUT (the bytes it took before its deadline).
 */
loom_status_t loom_stream_recv_request_test(void* request, size_t* length);

/**
 * Fills up to @p max_eps entries of @p poll_eps with endpoints whose stream received
 * data since they were last reported, and returns how many (or a negative status:
 * LOOM_ERR_INVALID_PARAM). An endpoint is reported again once more data arrives.
 * @p flags is reserved (0).
 */
ssize_t loom_stream_worker_poll(loom_worker_h worker, loom_stream_poll_ep_t* poll_eps, size_t max_eps,
                                unsigned flags);

/**
 * Takes the next piece of data waiting in the stream of @p ep without copying it:
 * returns a pointer to *@p length bytes, to be given back with loom_stream_data_release,
 * or NULL when nothing waits (or a receive is posted), or an error status.
 */
loom_status_ptr_t loom_stream_recv_data_nb(loom_ep_h ep, size_t* length);

/** Releases data from loom_stream_recv_data_nb. */
void loom_stream_data_release(loom_ep_h ep, void* data);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_UCP_STREAM_H */
