/**
 * @file loom/ucp_ep.h
 * Endpoints: creation (by worker address, or client/server through a listener), close
 * and flush.
 *
 * Part of the C API of <loom/ucp.h>, whose conventions apply; it includes what it
 * uses, so it may also be included alone.
 */
#ifndef LOOM_UCP_EP_H
#define LOOM_UCP_EP_H

#include <stdint.h>
#include <sys/socket.h>

#include "ucp_def.h"
#include "ucp_request.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    LOOM_ERR_HANDLING_MODE_NONE, /**< no failure detection beyond what transports do anyway */
    LOOM_ERR_HANDLING_MODE_PEER  /**< only transports that detect a dead peer; failures reach err_handler */
} loom_err_handling_mode_t;

/** Called from progress when an endpoint failed; outstanding requests complete with errors first. */
typedef void (*loom_err_handler_cb_t)(void* arg, loom_ep_h ep, loom_status_t status);

enum {
    LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS = 1u << 0,
    LOOM_EP_PARAM_FIELD_ERR_HANDLING_MODE = 1u << 1,
    LOOM_EP_PARAM_FIELD_ERR_HANDLER = 1u << 2,
    LOOM_EP_PARAM_FIELD_USER_DATA = 1u << 3,
    LOOM_EP_PARAM_FIELD_SOCK_ADDR = 1u << 4,   /**< client: connect to the listener at sockaddr */
    LOOM_EP_PARAM_FIELD_CONN_REQUEST = 1u << 5 /**< server: accept conn_request */
};

/** How to create an endpoint. */
typedef struct {
    uint64_t field_mask;
    const void* address; /**< a peer worker's address (loom_worker_get_address) */
    loom_err_handling_mode_t err_mode;
    struct {
        loom_err_handler_cb_t cb;
        void* arg;
    } err_handler;
    void* user_data;
    /** Client: the server's listening address (LOOM_EP_PARAM_FIELD_SOCK_ADDR). */
    struct {
        const struct sockaddr* addr;
        socklen_t addrlen;
    } sockaddr;
    /** Server: a request from the listener's handler (LOOM_EP_PARAM_FIELD_CONN_REQUEST). */
    loom_conn_request_h conn_request;
} loom_ep_params_t;

/**
 * Creates an endpoint to another worker, named by one of:
 * - its worker address (LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS): returns at once; the
 *   connection is completed in the background and sends issued meanwhile are queued;
 * - a listener's socket address (LOOM_EP_PARAM_FIELD_SOCK_ADDR, client side): the two
 *   workers exchange addresses through the listener, and the call returns once the
 *   server accepted (LOOM_OK), rejected (LOOM_ERR_REJECTED) or could not be reached
 *   (LOOM_ERR_CONNECTION_REFUSED, LOOM_ERR_UNREACHABLE, LOOM_ERR_TIMED_OUT after 10 s),
 *   progressing this worker while it waits;
 * - a connection request (LOOM_EP_PARAM_FIELD_CONN_REQUEST, server side), which it
 *   accepts; the request is consumed whatever the outcome.
 * LOOM_ERR_INVALID_ADDRESS for a malformed or foreign-version address,
 * LOOM_ERR_UNREACHABLE when no allowed transport reaches the peer (logged with why).
 */
loom_status_t loom_ep_create(loom_worker_h worker, const loom_ep_params_t* params, loom_ep_h* ep);

enum { LOOM_EP_CLOSE_FLAG_FORCE = 1u << 0 };

/**
 * Closes an endpoint: by default after flushing what was sent on it; with
 * LOOM_EP_CLOSE_FLAG_FORCE at once, completing its outstanding requests with
 * LOOM_ERR_CANCELED. The handle is invalid after the call.
 */
loom_status_ptr_t loom_ep_close_nbx(loom_ep_h ep, const loom_request_param_t* param);

/* --- client/server ---------------------------------------------------------------------- */

/** Called from loom_worker_progress for each client that asks to connect. */
typedef void (*loom_listener_conn_callback_t)(loom_conn_request_h request, void* arg);

enum {
    LOOM_LISTENER_PARAM_FIELD_SOCK_ADDR = 1u << 0,
    LOOM_LISTENER_PARAM_FIELD_CONN_HANDLER = 1u << 1
};

/** How to listen for clients. */
typedef struct {
    uint64_t field_mask;
    struct {
        const struct sockaddr* addr; /**< IPv4 or IPv6 address and port; port 0: any free port */
        socklen_t addrlen;
    } sockaddr;
    struct {
        loom_listener_conn_callback_t cb;
        void* arg;
    } conn_handler;
} loom_listener_params_t;

/**
 * Listens on a socket address for clients of @p worker (served by its progress). Each
 * request reaches the handler, which answers it, then or later, with loom_ep_create
 * (LOOM_EP_PARAM_FIELD_CONN_REQUEST) or loom_listener_reject. LOOM_ERR_BUSY when the
 * address is in use, LOOM_ERR_INVALID_PARAM without an address or handler.
 */
loom_status_t loom_listener_create(loom_worker_h worker, const loom_listener_params_t* params,
                                   loom_listener_h* listener);

/** Stops listening; requests not answered yet are rejected and their handles become invalid. */
void loom_listener_destroy(loom_listener_h listener);

/** The address listened on, with the port chosen when 0 was asked for. */
loom_status_t loom_listener_query(loom_listener_h listener, struct sockaddr_storage* address);

/** The client's socket address of @p request. */
loom_status_t loom_conn_request_query(loom_conn_request_h request, struct sockaddr_storage* client_address);

/** Refuses @p request: the client's loom_ep_create returns LOOM_ERR_REJECTED. */
loom_status_t loom_listener_reject(loom_listener_h listener, loom_conn_request_h request);

/**
 * Completes when everything sent on @p ep so far has completed at the transport level,
 * and every RMA and atomic operation started on it so far is complete at the target (a
 * put that the target refused makes the flush complete with that error, e.g.
 * LOOM_ERR_ACCESS_DENIED on tcp).
 */
loom_status_ptr_t loom_ep_flush_nbx(loom_ep_h ep, const loom_request_param_t* param);

/** loom_ep_flush_nbx on every endpoint of @p worker. */
loom_status_ptr_t loom_worker_flush_nbx(loom_worker_h worker, const loom_request_param_t* param);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_UCP_EP_H */
