/**
 * @file loom/ucp.h
 * The Loom protocol layer's C API: contexts, workers, endpoints, tagged messages, active
 * messages, streams and RMA.
 *
 * C99 and C++ compatible. Conventions, as in UCX's ucp.h:
 * - every parameter struct starts with a field mask saying which fields are set, so
 *   fields can be added without breaking binaries built against an older header;
 * - non-blocking calls (the _nbx functions) take a loom_request_param_t and return a
 *   loom_status_ptr_t: NULL when the operation completed at once, an error status
 *   (test with LOOM_PTR_IS_ERR, read with LOOM_PTR_STATUS), or a request handle that
 *   completes later (its callback runs from loom_worker_progress) and must be released
 *   with loom_request_free;
 * - a request handle points at the caller's part of the request (the request_size bytes
 *   asked for in loom_params_t), so an MPI library keeps its own request inside Loom's.
 *
 * Thread safety: a worker created with LOOM_THREAD_MODE_SINGLE or _SERIALIZED must not
 * be entered by two threads at once. With LOOM_THREAD_MODE_MULTI any thread may call any
 * function on the worker, its endpoints and requests: each call holds the worker's lock
 * (recursive, so callbacks, which run under it, may call Loom again). Different workers
 * never share a lock.
 *
 * The declarations live in one header per family; this header includes them all. Each
 * may also be included alone (it includes what it uses):
 * - loom/ucp_def.h: status codes, the status-or-request pointer, the handles
 * - loom/ucp_dt.h: datatypes (contiguous, iov, generic)
 * - loom/ucp_context.h: loom_init and loom_cleanup, context attributes and resources
 * - loom/ucp_worker.h: workers, progress, worker addresses, wake-up
 * - loom/ucp_request.h: loom_request_param_t, completion callbacks, request handles
 * - loom/ucp_ep.h: endpoints, listeners (client/server), close, flush
 * - loom/ucp_tag.h: tagged messages
 * - loom/ucp_am.h: active messages
 * - loom/ucp_stream.h: streams
 * - loom/ucp_mem_events.h: memory events for the registration caches
 * - loom/ucp_rma.h: memory mappings, remote keys, put, get, atomics, fence
 */
#ifndef LOOM_UCP_H
#define LOOM_UCP_H

#include "ucp_def.h"
#include "ucp_dt.h"
#include "ucp_context.h"
#include "ucp_worker.h"
#include "ucp_request.h"
#include "ucp_ep.h"
#include "ucp_tag.h"
#include "ucp_am.h"
#include "ucp_stream.h"
#include "ucp_mem_events.h"
#include "ucp_rma.h"

#endif /* LOOM_UCP_H */
