/**
 * Flow control of unexpected messages. A receiver that posts nothing while its peers send
 * eager messages would keep every one of them (data included) until it does: its memory
 * grows with what the senders send. LOOM_UNEXPECTED_MAX bounds the eager bytes a worker
 * keeps for receives not posted yet. When they cross it, the worker tells every peer
 * (kAmTagFlow, hold) to send its tagged messages by rendezvous: only an RTS then waits at
 * the receiver, the data stays with the sender, whose send completes once it is received
 * (an application that waits for its sends stops there: backpressure, nothing dropped).
 * Once the unexpected messages are back under half the bound, the peers are told to go on.
 * Order is kept: an RTS is matched in the same queue, in arrival order, as eager messages.
 *
 * The sender pays nothing on its fast path: a held endpoint's tag_short_limit is 0, so
 * every send takes the slow path, where tag_send_start picks the rendezvous. The receiver
 * pays an addition per unexpected eager message (never for an expected one). What was in
 * flight when the bound was crossed still arrives and is kept (at most what the transports
 * buffer), and a new peer hears of the hold when its endpoint is created.
 */
#include "ucp/tag/tag_proto.h"

#include "ucp/core/ucp_log.h"
#include "ucp/core/wire.h"
#include "ucs/config/parser.h"

#include <cstring>

namespace loom::ucp {

namespace {

void tell(Worker& w, Ep* ep, bool hold) {
    if (ep->flags & (kEpFailed | kEpClosing)) return;
    FlowHdr hdr{};
    hdr.receiver_uuid = w.uuid;
    hdr.hold = hold ? 1 : 0;
    if (Status s = w.send_ctrl(ep, kAmTagFlow, &hdr, sizeof(hdr)); s != Status::ok) {
        LOOM_LOG_DEBUG("ucp: cannot tell worker {:016x} to {}: {}", ep->remote_uuid,
                       hold ? "hold back" : "go on", to_string(s));
    }
}

}  // namespace

void tag_flow_tell_all(Worker& w, bool hold) {
    TagWorker& t = tag_of(w);
    t.holding = hold;
    LOOM_LOG_INFO("ucp: unexpected messages hold {} bytes (LOOM_UNEXPECTED_MAX={}): {}", t.unexp_bytes,
                  ucs::config::SizeParser().print(t.unexp_max),
                  hold ? "senders send by rendezvous until they are received" : "senders go on as before");
    for (Ep& ep : w.eps) tell(w, &ep, hold);
}

void tag_flow_ep_created(Worker& w, Ep* ep) {
    if (tag_of(w).holding) tell(w, ep, true);
}

Status tag_flow_handler(void* arg, void* data, std::size_t length, unsigned) {
    auto& w = *static_cast<Worker*>(arg);
    if (length < sizeof(FlowHdr)) {
        LOOM_LOG_WARN("ucp: dropped a flow control message of {} bytes (truncated)", length);
        return Status::ok;
    }
    FlowHdr hdr;
    std::memcpy(&hdr, data, sizeof(hdr));
    unsigned eps = 0;
    for (Ep& ep : w.eps) {
        if (ep.remote_uuid != hdr.receiver_uuid) continue;
        ++eps;
        if (hdr.hold != 0) {
            ep.flags |= kEpTagHeld;
            ep.tag_short_limit = 0;  // every send takes the slow path (tag_send_start)
        } else {
            ep.flags &= static_cast<std::uint8_t>(~kEpTagHeld);
            ep.tag_short_limit = fast_path_limit(ep, ProtoOp::tag);
        }
    }
    if (eps == 0)
        LOOM_LOG_WARN("ucp: dropped a flow control message from unknown worker {:016x}", hdr.receiver_uuid);
    return Status::ok;
}

}  // namespace loom::ucp
