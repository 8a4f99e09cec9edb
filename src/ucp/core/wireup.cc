/**
 * Wire-up: how two workers' endpoints come to know each other, and how endpoint-to-
 * endpoint lanes get connected.
 *
 * Connect-to-iface lanes (shm, tcp, rc over rdma_cm) are usable as soon as the endpoint
 * exists; the request only tells the peer who we are, so it can make an endpoint back
 * for its replies.
 *
 * Endpoint-to-endpoint lanes (rc over verbs: a QP must know the peer's QP number) are
 * connected by exchanging transport endpoint addresses over the endpoint's wire-up lane,
 * a lane on a transport that connects to ifaces (tcp, shm), in three messages:
 *
 *   A: request {A's address, A's endpoint addresses}          A's lanes unconnected
 *   B: connects its lanes, holding their sends; reply {B's}    B can receive
 *   A: connects its lanes (B receives already): sends flow; acknowledgement
 *   B: releases its sends
 *
 * B holds its sends because A's QP is not ready to receive until A has the reply: a
 * packet sent to it earlier is dropped and only retransmitted after LOOM_IB_TIMEOUT.
 * Until a lane is connected and released, the transport answers no_resource and every
 * send waits in its pending queue, in order, so nothing above this file knows about
 * wire-up. When both sides create endpoints to each other at the same time, each
 * connects on the other's request (holding) and releases on the other's reply.
 *
 * Messages name endpoints by ids (Worker::wireup_state) rather than pointers, so a stale
 * or forged message finds nothing instead of a freed endpoint.
 */
#include "ucp/core/ucp_log.h"
#include "ucp/core/wire.h"
#include "ucp/core/worker.h"

#include <cstring>

namespace loom::ucp {

namespace {

/** Whether lane @p lane of @p ep connects endpoint to endpoint. */
bool lane_is_ep_to_ep(const Worker& worker, const Ep& ep, unsigned lane) {
    return !(worker.ifaces[ep.lanes[lane].iface].attr.cap_flags & uct::kCapConnectToIface);
}

bool has_ep_to_ep_lanes(const Worker& worker, const Ep& ep) {
    for (unsigned i = 0; i < ep.num_lanes; ++i) {
        if (lane_is_ep_to_ep(worker, ep, i)) return true;
    }
    return false;
}


/** The largest message lane @p lane of @p ep takes in one am_bcopy. */
std::size_t lane_max_bcopy(const Worker& worker, const Ep& ep, std::uint8_t lane) {
    return worker.ifaces[ep.lanes[lane].iface].attr.am.max_bcopy;
}

/** Appends a WireupLaneHdr and the endpoint address for every endpoint-to-endpoint lane of @p ep. */
Status pack_lanes(Worker& worker, Ep& ep, std::vector<std::uint8_t>& out, std::uint8_t& count) {
    count = 0;
    for (std::uint8_t i = 0; i < ep.num_lanes; ++i) {
        if (!lane_is_ep_to_ep(worker, ep, i)) continue;
        const WorkerIface& wi = worker.ifaces[ep.lanes[i].iface];
        WireupLaneHdr lh{ep.lanes[i].iface, ep.lanes[i].remote_iface,
                         static_cast<std::uint16_t>(wi.attr.ep_addr_len)};
        const std::size_t at = out.size();
        out.resize(at + sizeof(lh) + wi.attr.ep_addr_len);
        std::memcpy(out.data() + at, &lh, sizeof(lh));
        if (Status s = wi.iface->ep_get_address(ep.lanes[i].ep, out.data() + at + sizeof(lh)); s != Status::ok) {
            LOOM_LOG_ERROR("ucp: cannot read the {} endpoint address for wire-up: {}", wi.rsc->tl.tl_name,
                           to_string(s));
            return s;
        }
        ++count;
    }
    return Status::ok;
}

/** Builds a request or reply of @p ep and sends it on the wire-up lane. */
Status send_address_message(Worker& worker, Ep* ep, std::uint8_t type, std::uint64_t dst_ep_id) {
    std::vector<std::uint8_t> msg(sizeof(WireupHdr));
    std::vector<std::uint8_t> addr = worker.pack_address();
    msg.insert(msg.end(), addr.begin(), addr.end());
    WireupHdr hdr{};
    hdr.type = type;
    hdr.dst_ep_id = dst_ep_id;
    auto st = worker.wireup_state.find(ep);
    if (st != worker.wireup_state.end()) {
        hdr.src_ep_id = st->second.id;
        if (Status s = pack_lanes(worker, *ep, msg, hdr.num_lanes); s != Status::ok) return s;
    }
    std::memcpy(msg.data(), &hdr, sizeof(hdr));
    const std::uint8_t lane = ep->wireup_lane != kNoLane ? ep->wireup_lane : ep->am_lane;
    if (msg.size() > lane_max_bcopy(worker, *ep, lane)) {
        LOOM_LOG_ERROR("ucp: the wire-up message ({} bytes) does not fit one message of its lane ({} bytes)",
                       msg.size(), lane_max_bcopy(worker, *ep, lane));
        return Status::exceeds_limit;
    }
    return worker.send_ctrl_on_lane(ep, lane, kAmWireup, msg.data(), msg.size());
}

/** One endpoint-to-endpoint lane entry of a received request or reply. */
struct LaneEntry {
    WireupLaneHdr hdr;
    const std::uint8_t* ep_addr;
};

/** Parses @p n lane entries from @p p (@p left bytes, which they must fill exactly). */
bool parse_lanes(const std::uint8_t* p, std::size_t left, unsigned n, std::vector<LaneEntry>& out) {
    for (unsigned i = 0; i < n; ++i) {
        LaneEntry e;
        if (left < sizeof(e.hdr)) return false;
        std::memcpy(&e.hdr, p, sizeof(e.hdr));
        p += sizeof(e.hdr);
        left -= sizeof(e.hdr);
        if (left < e.hdr.ep_addr_len) return false;
        e.ep_addr = p;
        p += e.hdr.ep_addr_len;
        left -= e.hdr.ep_addr_len;
        out.push_back(e);
    }
    return left == 0;
}

/**
 * Connects every unconnected endpoint-to-endpoint lane of @p ep to the peer's entry for
 * it; with @p hold their sends wait for an acknowledgement. Held lanes are released when
 * @p release. Fails (with a log line) when the peer has no entry for one of our lanes.
 */
Status connect_lanes(Worker& worker, Ep* ep, const UnpackedAddress& address, const std::vector<LaneEntry>& entries,
                     bool hold, bool release) {
    for (std::uint8_t i = 0; i < ep->num_lanes; ++i) {
        if (!lane_is_ep_to_ep(worker, *ep, i)) continue;
        Lane& lane = ep->lanes[i];
        const WorkerIface& wi = worker.ifaces[lane.iface];
        const LaneEntry* entry = nullptr;
        for (const LaneEntry& e : entries) {
            if (e.hdr.sender_iface == lane.remote_iface && e.hdr.receiver_iface == lane.iface) entry = &e;
        }
        const RemoteIface* ri = nullptr;
        for (const RemoteIface& r : address.ifaces) {
            if (r.index == lane.remote_iface) ri = &r;
        }
        if (entry == nullptr || ri == nullptr) {
            LOOM_LOG_ERROR("ucp: wire-up with {:016x}: the peer has no endpoint for our {} lane on {} (do both "
                           "sides use the same LOOM_TLS and devices?)",
                           ep->remote_uuid, wi.rsc->tl.tl_name, wi.rsc->tl.dev_name);
            return Status::unreachable;
        }
        if (lane.state == kLaneUnconnected) {
            Status s = wi.iface->ep_connect_to_ep(lane.ep, ri->dev_addr.data(), ri->dev_addr.size(), entry->ep_addr,
                                                  entry->hdr.ep_addr_len, hold ? unsigned{uct::kConnectHoldSends} : 0u);
            if (s != Status::ok) {
                LOOM_LOG_ERROR("ucp: wire-up with {:016x}: cannot connect {} on {}: {}", ep->remote_uuid,
                               wi.rsc->tl.tl_name, wi.rsc->tl.dev_name, to_string(s));
                return s;
            }
            lane.state = hold ? kLaneHeld : kLaneReady;
        } else if (lane.state == kLaneHeld && release) {
            if (Status s = wi.iface->ep_release_sends(lane.ep); s != Status::ok) return s;
            lane.state = kLaneReady;
        }
    }
    return Status::ok;
}

/** Releases @p ep's held lanes (the peer's acknowledgement, or its reply to our request). */
Status release_lanes(Worker& worker, Ep* ep) {
    for (std::uint8_t i = 0; i < ep->num_lanes; ++i) {
        Lane& lane = ep->lanes[i];
        if (lane.state != kLaneHeld) continue;
        if (Status s = worker.ifaces[lane.iface].iface->ep_release_sends(lane.ep); s != Status::ok) return s;
        lane.state = kLaneReady;
    }
    return Status::ok;
}

/** The endpoint a request from endpoint @p src_id of worker @p uuid is for, or nullptr. */
Ep* find_for_request(Worker& worker, std::uint64_t uuid, std::uint64_t src_id) {
    auto first = worker.ep_by_uuid.find(uuid);
    if (first != worker.ep_by_uuid.end() && !(first->second->flags & kEpFailed)) {
        auto st = worker.wireup_state.find(first->second);
        // Ours, not paired yet (we may have sent our own request): the same connection.
        if (st != worker.wireup_state.end() && (st->second.remote_id == 0 || st->second.remote_id == src_id)) {
            return first->second;
        }
    }
    // A repeated request, or one of several endpoints the peer made to us.
    for (auto& [ep, st] : worker.wireup_state) {
        if (ep->remote_uuid == uuid && st.remote_id == src_id && !(ep->flags & kEpFailed)) return const_cast<Ep*>(ep);
    }
    return nullptr;
}

/** Starts wire-up state @p st's LOOM_WIREUP_TIMEOUT deadline, unless there is none or it runs. */
void start_deadline(Worker& worker, Worker::EpWireup& st) {
    const auto timeout = worker.context.config().wireup_timeout;
    if (timeout == ucs::config::kTimeInf || st.deadline != 0) return;
    st.deadline = ucs::get_time() + ucs::ns_to_ticks(static_cast<std::uint64_t>(timeout.count()));
    ++worker.wireup_waiting;
}

/** @p ep's lanes are all up: its wire-up deadline no longer applies. */
void wireup_done(Worker& worker, Ep* ep) {
    auto st = worker.wireup_state.find(ep);
    if (st == worker.wireup_state.end() || st->second.deadline == 0) return;
    st->second.deadline = 0;
    --worker.wireup_waiting;
}

/** A request: make (or find) the endpoint back, connect its lanes holding sends, reply. */
void on_request(Worker& worker, const WireupHdr& hdr, const UnpackedAddress& address,
                const std::vector<LaneEntry>& entries) {
    if (hdr.num_lanes == 0) {
        if (auto it = worker.ep_by_uuid.find(address.uuid); it != worker.ep_by_uuid.end()) {
            // The peer has an endpoint to us: ours, if idle, need not introduce itself.
            it->second->flags &= ~kEpIdle;
            return;
        }
        // The peer will need replies (acknowledgements, rendezvous): an endpoint back to it.
        auto ep = worker.ep_create(address, true, 0);
        if (!ep) LOOM_LOG_WARN("ucp: cannot create the reply endpoint to {:016x}", address.uuid);
        return;
    }
    Ep* ep = find_for_request(worker, address.uuid, hdr.src_ep_id);
    bool created = false;
    if (ep == nullptr) {
        auto made = worker.ep_create(address, true, 0);
        if (!made) {
            LOOM_LOG_WARN("ucp: cannot create the reply endpoint to {:016x}", address.uuid);
            return;
        }
        ep = *made;
        created = true;
    }
    auto st = worker.wireup_state.find(ep);
    Status s = Status::ok;
    if (st == worker.wireup_state.end()) {
        LOOM_LOG_ERROR("ucp: worker {:016x} wires up endpoint-to-endpoint lanes this worker does not use (do both "
                       "sides use the same LOOM_TLS and devices?)",
                       address.uuid);
        s = Status::unreachable;
    } else {
        st->second.remote_id = hdr.src_ep_id;
        if (ep->flags & kEpIdle) {
            // Wired up from the peer's side: our reply introduces us, no request of ours is needed.
            ep->flags &= ~kEpIdle;
            start_deadline(worker, st->second);
        }
        s = connect_lanes(worker, ep, address, entries, true, false);
        if (s == Status::ok) s = send_address_message(worker, ep, kWireupReply, hdr.src_ep_id);
    }
    if (s == Status::ok) return;
    if (created) {
        worker.ep_destroy(ep, s);
    } else {
        worker.ep_fail(ep, s);
    }
}

/** A reply to our request: connect (the peer receives already) or release, then acknowledge. */
void on_reply(Worker& worker, const WireupHdr& hdr, const UnpackedAddress& address,
              const std::vector<LaneEntry>& entries) {
    auto it = worker.wireup_by_id.find(hdr.dst_ep_id);
    if (it == worker.wireup_by_id.end() || it->second->remote_uuid != address.uuid) {
        LOOM_LOG_DEBUG("ucp: wire-up reply from {:016x} for an endpoint that is gone", address.uuid);
        return;
    }
    Ep* ep = it->second;
    if (ep->flags & kEpFailed) return;
    Worker::EpWireup& st = worker.wireup_state[ep];
    if (st.remote_id != 0 && st.remote_id != hdr.src_ep_id) {
        LOOM_LOG_WARN("ucp: dropped a wire-up reply from {:016x}: it names another endpoint of ours", address.uuid);
        return;
    }
    st.remote_id = hdr.src_ep_id;
    Status s = connect_lanes(worker, ep, address, entries, false, true);
    if (s == Status::ok) {
        WireupHdr ack{};
        ack.type = kWireupAck;
        ack.src_ep_id = st.id;
        ack.dst_ep_id = hdr.src_ep_id;
        s = worker.send_ctrl_on_lane(ep, ep->wireup_lane, kAmWireup, &ack, sizeof(ack));
    }
    if (s != Status::ok) {
        worker.ep_fail(ep, s);
        return;
    }
    wireup_done(worker, ep);
}

/** The acknowledgement of our reply: the peer's lanes are up, ours may send. */
void on_ack(Worker& worker, const WireupHdr& hdr) {
    auto it = worker.wireup_by_id.find(hdr.dst_ep_id);
    if (it == worker.wireup_by_id.end()) {
        LOOM_LOG_DEBUG("ucp: wire-up acknowledgement for an endpoint that is gone");
        return;
    }
    Ep* ep = it->second;
    if (ep->flags & kEpFailed) return;
    if (worker.wireup_state[ep].remote_id != hdr.src_ep_id) {
        LOOM_LOG_WARN("ucp: dropped a wire-up acknowledgement from an endpoint that is not our peer");
        return;
    }
    if (Status s = release_lanes(worker, ep); s != Status::ok) {
        worker.ep_fail(ep, s);
        return;
    }
    wireup_done(worker, ep);
}

}  // namespace

Status Worker::send_ctrl_on_lane(Ep* ep, std::uint8_t lane, uct::AmId id, const void* data, std::size_t length) {
    if (lane == ep->am_lane) return send_ctrl(ep, id, data, length);
    if (ep->flags & kEpFailed) return ep->failure;
    Request* req = make_ctrl_request(*this, ep, lane, id, data, length);
    if (req == nullptr) return Status::no_memory;
    Status s = send_request_start(req, lane);
    return s == Status::in_progress ? Status::ok : s;
}

Status Worker::send_wireup(Ep* ep) { return send_address_message(*this, ep, kWireupRequest, 0); }

Status Worker::ep_first_use(Ep* ep) {
    if (ep->flags & kEpFailed) return ep->failure;
    if (ep->flags & kEpClosing) return Status::not_connected;
    if (!(ep->flags & kEpIdle)) return Status::ok;
    ep->flags &= ~kEpIdle;
    wireup_ep_woken(*this, ep);
    if (Status s = send_wireup(ep); s != Status::ok) {
        LOOM_LOG_ERROR("ucp: endpoint to worker {:016x}: cannot send its wire-up request: {}",
                       ep->remote_uuid, to_string(s));
        ep_fail(ep, s);
        return s;
    }
    return Status::ok;
}

bool ep_saves_by_waiting(const Worker& worker, const Ep& ep) {
    for (unsigned i = 0; i < ep.num_lanes; ++i) {
        if (lane_is_ep_to_ep(worker, ep, i) ||
            (worker.ifaces[ep.lanes[i].iface].attr.cap_flags & uct::kCapConnectOnFirstUse)) {
            return true;
        }
    }
    return false;
}

void wireup_ep_created(Worker& worker, Ep* ep) {
    if (!has_ep_to_ep_lanes(worker, *ep)) return;
    const std::uint64_t id = worker.next_wireup_id++;
    Worker::EpWireup& st = worker.wireup_state[ep] = Worker::EpWireup{id, 0, 0};
    worker.wireup_by_id[id] = ep;
    if (!(ep->flags & kEpIdle)) start_deadline(worker, st);
}

void wireup_ep_woken(Worker& worker, Ep* ep) {
    auto st = worker.wireup_state.find(ep);
    if (st == worker.wireup_state.end()) return;
    for (std::uint8_t i = 0; i < ep->num_lanes; ++i) {
        if (ep->lanes[i].state != kLaneReady) {
            start_deadline(worker, st->second);
            return;
        }
    }
}

unsigned wireup_check_deadlines(Worker& worker) {
    if (--worker.wireup_countdown != 0) return 0;
    worker.wireup_countdown = 256;
    const ucs::Ticks now = ucs::get_time();
    std::vector<Ep*> expired;
    for (auto& [ep, st] : worker.wireup_state) {
        if (st.deadline == 0) continue;
        if (ep->flags & kEpFailed) {
            st.deadline = 0;  // failed otherwise: nothing left to wait for
            --worker.wireup_waiting;
        } else if (now >= st.deadline) {
            expired.push_back(const_cast<Ep*>(ep));
        }
    }
    for (Ep* ep : expired) {
        const Worker::EpWireup st = worker.wireup_state[ep];
        wireup_done(worker, ep);
        LOOM_LOG_ERROR("ucp: endpoint to worker {:016x}: no wire-up answer within LOOM_WIREUP_TIMEOUT={} ({}); the "
                       "peer does not progress, or its LOOM_TLS/LOOM_NET_DEVICES leave out our lanes' transports",
                       ep->remote_uuid, ucs::config::TimeParser().print(worker.context.config().wireup_timeout),
                       st.remote_id == 0 ? "no reply to our request" : "no acknowledgement of our reply");
        worker.ep_fail(ep, Status::timed_out);
    }
    return static_cast<unsigned>(expired.size());
}

void wireup_ep_gone(Worker& worker, Ep* ep) {
    auto st = worker.wireup_state.find(ep);
    if (st == worker.wireup_state.end()) return;
    if (st->second.deadline != 0) --worker.wireup_waiting;
    worker.wireup_by_id.erase(st->second.id);
    worker.wireup_state.erase(st);
}

Status wireup_handler(void* arg, void* data, std::size_t length, unsigned) {
    auto* worker = static_cast<Worker*>(arg);
    if (length < sizeof(WireupHdr)) {
        LOOM_LOG_WARN("ucp: dropped a wire-up message of {} bytes (truncated)", length);
        return Status::ok;
    }
    WireupHdr hdr;
    std::memcpy(&hdr, data, sizeof(hdr));
    if (hdr.type == kWireupAck) {
        on_ack(*worker, hdr);
        return Status::ok;
    }
    if (hdr.type != kWireupRequest && hdr.type != kWireupReply) {
        LOOM_LOG_WARN("ucp: dropped a wire-up message of unknown type {}", hdr.type);
        return Status::ok;
    }
    const auto* body = static_cast<const std::uint8_t*>(data) + sizeof(hdr);
    const std::size_t body_length = length - sizeof(hdr);
    auto address = Worker::unpack_address(body, body_length);
    if (!address) {
        LOOM_LOG_WARN("ucp: dropped a wire-up message with a bad address");
        return Status::ok;
    }
    std::uint32_t address_length;  // validated by unpack_address: within body_length
    std::memcpy(&address_length, body + 4, sizeof(address_length));
    std::vector<LaneEntry> entries;
    if (!parse_lanes(body + address_length, body_length - address_length, hdr.num_lanes, entries) ||
        (hdr.num_lanes != 0 && hdr.src_ep_id == 0) || (hdr.type == kWireupReply && hdr.num_lanes == 0)) {
        LOOM_LOG_WARN("ucp: dropped a malformed wire-up message from {:016x} ({} lane entries in {} bytes)",
                      address->uuid, hdr.num_lanes, body_length - address_length);
        return Status::ok;
    }
    if (hdr.type == kWireupRequest) {
        on_request(*worker, hdr, *address, entries);
    } else {
        on_reply(*worker, hdr, *address, entries);
    }
    return Status::ok;
}

}  // namespace loom::ucp
