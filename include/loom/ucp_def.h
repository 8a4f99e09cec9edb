/**
 * @file loom/ucp_def.h
 * Definitions every part of the C API uses: status codes, the status-or-request
 * pointers the _nbx calls return, and the opaque handles.
 *
 * Part of the C API of <loom/ucp.h>, whose conventions apply; it includes what it
 * uses, so it may also be included alone.
 */
#ifndef LOOM_UCP_DEF_H
#define LOOM_UCP_DEF_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Status codes; the values are those of every Loom layer and never change. */
typedef enum {
    LOOM_OK = 0,
    LOOM_INPROGRESS = 1,
    LOOM_ERR_NO_RESOURCE = -1,
    LOOM_ERR_NO_MEMORY = -2,
    LOOM_ERR_INVALID_PARAM = -3,
    LOOM_ERR_IO_ERROR = -4,
    LOOM_ERR_BUSY = -5,
    LOOM_ERR_CANCELED = -6,
    LOOM_ERR_TIMED_OUT = -7,
    LOOM_ERR_UNSUPPORTED = -8,
    LOOM_ERR_NO_ELEM = -9,
    LOOM_ERR_ALREADY_EXISTS = -10,
    LOOM_ERR_OUT_OF_RANGE = -11,
    LOOM_ERR_EXCEEDS_LIMIT = -12,
    LOOM_ERR_NO_DEVICE = -13,
    LOOM_ERR_INVALID_CONFIG = -14,
    LOOM_ERR_UNREACHABLE = -40,
    LOOM_ERR_CONNECTION_REFUSED = -41,
    LOOM_ERR_CONNECTION_RESET = -42,
    LOOM_ERR_ENDPOINT_FAILURE = -43,
    LOOM_ERR_NOT_CONNECTED = -44,
    LOOM_ERR_REJECTED = -45,
    LOOM_ERR_PEER_TIMEOUT = -46,
    LOOM_ERR_INVALID_ADDRESS = -47,
    LOOM_ERR_MESSAGE_TRUNCATED = -70,
    LOOM_ERR_MALFORMED_PACKET = -71,
    LOOM_ERR_VERSION_MISMATCH = -72,
    LOOM_ERR_NO_MESSAGE = -73,
    LOOM_ERR_ACCESS_DENIED = -74,
    LOOM_ERR_LAST = -128 /**< no status is below this */
} loom_status_t;

/** A status, or a request handle, as returned by the _nbx calls. */
typedef void* loom_status_ptr_t;

/** True when @p p carries an error status. */
#define LOOM_PTR_IS_ERR(p) ((uintptr_t)(p) >= (uintptr_t)(intptr_t)LOOM_ERR_LAST)
/** True when @p p is a request handle. */
#define LOOM_PTR_IS_PTR(p) (((uintptr_t)(p) - 1) < ((uintptr_t)(intptr_t)LOOM_ERR_LAST - 1))
/** The status @p p stands for: LOOM_OK (NULL), an error, or LOOM_INPROGRESS for a request. */
#define LOOM_PTR_STATUS(p) (LOOM_PTR_IS_PTR(p) ? LOOM_INPROGRESS : (loom_status_t)(intptr_t)(p))

/** A short name of @p status, e.g. "message truncated". */
const char* loom_status_string(loom_status_t status);

/* --- handles -------------------------------------------------------------------------- */

typedef struct loom_context* loom_context_h;
typedef struct loom_worker* loom_worker_h;
typedef struct loom_ep* loom_ep_h;
typedef struct loom_tag_message* loom_tag_message_h;
typedef struct loom_listener* loom_listener_h;
typedef struct loom_conn_request* loom_conn_request_h;
typedef uint64_t loom_tag_t;

#ifdef __cplusplus
}
#endif

#endif /* LOOM_UCP_DEF_H */
