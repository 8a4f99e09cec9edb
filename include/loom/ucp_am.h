/**
 * @file loom/ucp_am.h
 * Active messages.
 *
 * A message for a handler the receiving worker registered under an id (0 .. 65535):
 * an optional header of the sender's, and data. Needs LOOM_FEATURE_AM. The protocol
 * is chosen by the data's size as for tagged messages (docs/protocols.md): small ones
 * arrive in place, large ones by rendezvous, where the handler gets a descriptor and
 * fetches the data into a buffer of its choice with loom_am_recv_data_nbx. Messages
 * sent on one endpoint reach their handlers in the order they were sent.
 *
 * Part of the C API of <loom/ucp.h>, whose conventions apply; it includes what it
 * uses, so it may also be included alone.
 */
#ifndef LOOM_UCP_AM_H
#define LOOM_UCP_AM_H

#include <stddef.h>
#include <stdint.h>

#include "ucp_def.h"
#include "ucp_request.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Bits of loom_am_recv_param_t.recv_attr. */
enum {
    LOOM_AM_RECV_ATTR_FIELD_REPLY_EP = 1u << 0, /**< reply_ep is set (the sender asked for it) */
    /**
     * The data may outlive the callback: returning LOOM_INPROGRESS keeps it until
     * loom_am_data_release. Without this flag the data is valid only during the callback.
     */
    LOOM_AM_RECV_ATTR_FLAG_DATA = 1u << 16,
    /**
     * Rendezvous: data is a descriptor, length the message's length. The handler fetches
     * the data with loom_am_recv_data_nbx (during the callback or, after returning
     * LOOM_INPROGRESS, later), or drops it with loom_am_data_release; returning anything
     * else drops it and completes the send with that status (LOOM_OK for a plain drop).
     */
    LOOM_AM_RECV_ATTR_FLAG_RNDV = 1u << 17
};

/** What a handler learns besides the message. */
typedef struct {
    uint64_t recv_attr; /**< LOOM_AM_RECV_ATTR_* bits */
    loom_ep_h reply_ep; /**< with LOOM_AM_RECV_ATTR_FIELD_REPLY_EP: an endpoint to the sending worker */
} loom_am_recv_param_t;

/**
 * An active-message handler, run from loom_worker_progress (or from inside a send to
 * the worker itself). @p header (valid during the call only) is the sender's header,
 * @p data and @p length the data or, with LOOM_AM_RECV_ATTR_FLAG_RNDV, a descriptor and
 * the length it describes. Returns LOOM_OK when done with the data, LOOM_INPROGRESS to
 * keep it (LOOM_AM_RECV_ATTR_FLAG_DATA or _RNDV only).
 */
typedef loom_status_t (*loom_am_recv_callback_t)(void* arg, const void* header, size_t header_length, void* data,
                                                 size_t length, const loom_am_recv_param_t* param);

enum {
    LOOM_AM_HANDLER_PARAM_FIELD_ID = 1u << 0,    /**< id (required) */
    LOOM_AM_HANDLER_PARAM_FIELD_FLAGS = 1u << 1, /**< flags */
    LOOM_AM_HANDLER_PARAM_FIELD_CB = 1u << 2,    /**< cb (required; NULL removes the handler) */
    LOOM_AM_HANDLER_PARAM_FIELD_ARG = 1u << 3    /**< arg */
};

/** Handler flags. */
enum {
    LOOM_AM_FLAG_WHOLE_MSG = 1u << 0,      /**< one call per message (always the case in Loom) */
    LOOM_AM_FLAG_PERSISTENT_DATA = 1u << 1 /**< eager data always comes with LOOM_AM_RECV_ATTR_FLAG_DATA
                                                (copied out of the transport when it cannot lend it) */
};

/** An active-message handler registration. */
typedef struct {
    uint64_t field_mask; /**< LOOM_AM_HANDLER_PARAM_FIELD_* bits */
    unsigned id;         /**< 0 .. 65535 */
    uint32_t flags;      /**< LOOM_AM_FLAG_* bits */
    loom_am_recv_callback_t cb;
    void* arg;           /**< passed to cb */
} loom_am_handler_param_t;

/**
 * Registers (or with a NULL cb removes) the handler of active-message id @p param->id,
 * replacing any earlier one. Messages for an id without a handler are dropped, with one
 * warning per id (a rendezvous sender completes with LOOM_ERR_NO_ELEM).
 * LOOM_ERR_INVALID_PARAM (logged) for a missing id or cb field, an id above 65535,
 * unknown flags or a context without LOOM_FEATURE_AM.
 */
loom_status_t loom_worker_set_am_recv_handler(loom_worker_h worker, const loom_am_handler_param_t* param);

/** Flags of loom_am_send_nbx (in loom_request_param_t.flags, with LOOM_OP_ATTR_FIELD_FLAGS). */
enum {
    LOOM_AM_SEND_FLAG_REPLY = 1u << 0, /**< the handler gets a reply endpoint to this worker */
    LOOM_AM_SEND_FLAG_EAGER = 1u << 1, /**< eager whatever the size */
    LOOM_AM_SEND_FLAG_RNDV = 1u << 2   /**< rendezvous whatever the size */
};

/**
 * Sends an active message to handler @p id of the peer: @p header_length bytes at
 * @p header and @p count elements of the param's datatype at @p buffer. Both must stay
 * untouched until the operation completes (at once when NULL is returned). The header
 * travels in one transport message: loom_am_max_header says how long it may be.
 * LOOM_ERR_INVALID_PARAM (logged) for an id above 65535, a NULL header of nonzero
 * length, a header too long for the endpoint, conflicting or unknown flags, or a
 * context without LOOM_FEATURE_AM.
 */
loom_status_ptr_t loom_am_send_nbx(loom_ep_h ep, unsigned id, const void* header, size_t header_length,
                                   const void* buffer, size_t count, const loom_request_param_t* param);

/**
 * The longest header loom_am_send_nbx takes on every endpoint of @p worker: the
 * smallest message of its transports minus Loom's largest AM protocol header (7872
 * bytes with shm or self; an endpoint over a transport with larger messages, such as
 * tcp, takes longer ones). 0 for a NULL worker.
 */
size_t loom_am_max_header(loom_worker_h worker);

/**
 * Receives the data of @p data_desc, a rendezvous descriptor (LOOM_AM_RECV_ATTR_FLAG_RNDV)
 * or data a handler was given (during its callback, or kept with LOOM_INPROGRESS), into
 * @p count elements of the param's datatype at @p buffer. Loom owns the descriptor from
 * then on, even when the call fails. A buffer shorter than the message completes with
 * LOOM_ERR_MESSAGE_TRUNCATED (a rendezvous then moves nothing). When it completes at once
 * the length goes to param->recv_info.length (with LOOM_OP_ATTR_FIELD_RECV_INFO); a
 * request's callback is cb.am. LOOM_ERR_INVALID_PARAM (logged) for anything else.
 */
loom_status_ptr_t loom_am_recv_data_nbx(loom_worker_h worker, void* data_desc, void* buffer, size_t count,
                                        const loom_request_param_t* param);

/**
 * Releases data a handler kept by returning LOOM_INPROGRESS; for a rendezvous descriptor,
 * drops the message (its send completes with LOOM_OK). Unknown pointers are ignored with
 * one warning.
 */
void loom_am_data_release(loom_worker_h worker, void* data);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_UCP_AM_H */
