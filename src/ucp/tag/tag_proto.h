/** Entry points of the tag protocols (tag_proto.cc) for the API layer. */
#pragma once

#include "ucp/core/worker.h"

namespace loom::ucp {

/**
 * Starts a tagged send of @p req, whose send.dt is set: picks eager or rendezvous by
 * size and runs or queues the first step. ok when started (the request completes
 * itself, possibly at once), an error (the request is completed with it) otherwise.
 */
Status tag_send_start(Request* req, Ep* ep, Tag tag, bool sync);

/**
 * Starts a receive of @p req (recv.dt set): takes @p desc, a matching unexpected
 * message already out of the queue, or queues the receive for (@p tag, @p mask).
 */
void tag_recv_start(Worker& w, Request* req, UnexpDesc* desc, Tag tag, Tag mask);

/** Probes the unexpected queue; fills @p info when found. */
UnexpDesc* tag_probe(Worker& w, Tag tag, Tag mask, bool remove, TagRecvInfo* info);

/**
 * Receives a complete unexpected eager message @p desc into @p dt at once, without a
 * request, and releases the descriptor. ok, message_truncated or an unpack error.
 */
Status tag_recv_immediate(Worker& w, UnexpDesc* desc, DtState& dt, TagRecvInfo& info);

}  // namespace loom::ucp
