/**
 * @file loom/ucp_tag.h
 * Tagged messages: sends, receives matched by tag and mask, probes.
 *
 * Part of the C API of <loom/ucp.h>, whose conventions apply; it includes what it
 * uses, so it may also be included alone.
 */
#ifndef LOOM_UCP_TAG_H
#define LOOM_UCP_TAG_H

#include <stddef.h>

#include "ucp_def.h"
#include "ucp_request.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Sends @p count elements of the param's datatype (bytes by default) with @p tag. The
 * buffer may be reused when the operation completes. The protocol (eager or
 * rendezvous) is chosen by size; see docs/protocols.md.
 */
loom_status_ptr_t loom_tag_send_nbx(loom_ep_h ep, const void* buffer, size_t count, loom_tag_t tag,
                                    const loom_request_param_t* param);

/** Like loom_tag_send_nbx, completing only once a receive has matched the message. */
loom_status_ptr_t loom_tag_send_sync_nbx(loom_ep_h ep, const void* buffer, size_t count, loom_tag_t tag,
                                         const loom_request_param_t* param);

/**
 * Receives a message whose tag t satisfies (t & tag_mask) == (tag & tag_mask), from any
 * endpoint, into @p buffer (@p count elements). A longer message completes the request
 * with LOOM_ERR_MESSAGE_TRUNCATED, the info holding its full length. Messages between
 * one pair of endpoints match in the order they were sent.
 */
loom_status_ptr_t loom_tag_recv_nbx(loom_worker_h worker, void* buffer, size_t count, loom_tag_t tag,
                                    loom_tag_t tag_mask, const loom_request_param_t* param);

/**
 * loom_request_check_status for a tagged receive, filling @p info once it completed
 * (also when it completed with LOOM_ERR_MESSAGE_TRUNCATED).
 */
loom_status_t loom_tag_recv_request_test(void* request, loom_tag_recv_info_t* info);

/**
 * Looks for an arrived message matching (@p tag, @p tag_mask), filling @p info. With
 * @p remove, the message leaves the queue and the handle returned must be received
 * with loom_tag_msg_recv_nbx. NULL when nothing matches.
 */
loom_tag_message_h loom_tag_probe_nb(loom_worker_h worker, loom_tag_t tag, loom_tag_t tag_mask, int remove,
                                     loom_tag_recv_info_t* info);

/** Receives the message @p message removed by loom_tag_probe_nb. */
loom_status_ptr_t loom_tag_msg_recv_nbx(loom_worker_h worker, void* buffer, size_t count,
                                        loom_tag_message_h message, const loom_request_param_t* param);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_UCP_TAG_H */
