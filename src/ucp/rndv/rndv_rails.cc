/**
 * Multi-rail rendezvous (rndv.h): a large message's GETs split over the endpoint's
 * rendezvous rails (Ep::rndv_rails, chosen by ep_select_lanes), each part over its own
 * device and completing on its own, the receive completing once every part has.
 *
 * The sender offers its buffer on every rail in the RTS (kRtsFlagRails: one RtsRail and
 * packed key per rail, a registration per memory domain); the receiver, which decides the
 * scheme, splits by its rails' bandwidth and GETs each part on its lane through that
 * lane's send queue. The handshake and the ATS stay on the AM lane, so ordering and
 * matching are those of one rail. A rail whose GETs fail (its device went down) fails
 * the receive with that error and the sender's send with it (the ATS says so); nothing
 * waits for it: the lane's transfers end by error or by the endpoint's failure.
 */
#include "ucp/core/ucp_log.h"
#include "ucp/rndv/rndv.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace loom::ucp {

namespace {

/** The memory domain of lane @p lane of @p ep. */
uct::Md* lane_md(const Worker& w, const Ep& ep, std::uint8_t lane) { return w.ifaces[ep.lanes[lane].iface].rsc->md; }

/** The GETs of one extra rail are done (or failed): their part of the receive is. */
void rail_get_done(uct::Completion* comp) {
    auto* part = reinterpret_cast<Request*>(reinterpret_cast<char*>(comp) - offsetof(Request, recv.comp));
    auto* whole = static_cast<Request*>(part->user_data);
    const Status status = comp->status;
    part->recv.rkey_component->rkey_release(part->recv.rkey);
    if (part->recv.md != nullptr && part->memh != uct::kMemHNull) (void)part->recv.md->mem_dereg(part->memh);
    part->worker->release(part);
    uct::completion_update(&whole->recv.comp, status);
}

/**
 * Where each rail's part of @p length bytes starts (@p bounds[count] = length), by the
 * rails' bandwidth @p weight, on 4 KiB boundaries; returns how many rails get a part
 * (the slowest are left out while a part would be below kRndvRailMinPart).
 */
unsigned split(std::size_t length, const double* weight, unsigned count, std::size_t* bounds) {
    for (; count > 1; --count) {
        double total = 0;
        for (unsigned i = 0; i < count; ++i) total += weight[i];
        double before = 0;
        bool small = false;
        bounds[0] = 0;
        for (unsigned i = 1; i < count; ++i) {
            before += weight[i - 1];
            bounds[i] = static_cast<std::size_t>(static_cast<double>(length) * (before / total)) & ~std::size_t{4095};
        }
        bounds[count] = length;
        for (unsigned i = 0; i < count; ++i) small |= bounds[i + 1] - bounds[i] < kRndvRailMinPart;
        if (!small) return count;
    }
    bounds[0] = 0;
    bounds[1] = length;
    return 1;
}

}  // namespace

std::size_t rndv_rails_offer(Request* req, RtsHdr& rts, std::uint8_t* buf, std::size_t key_len) {
    Worker& w = *req->worker;
    const Ep& ep = *req->ep;
    // A rail the peer closed (kEpRailClosed): the endpoint is about to fail; the first rail only.
    if (ep.num_rndv_rails < 2 || (ep.flags & kEpRailClosed) || rts.length < 2 * kRndvRailMinPart)
        return key_len;
    if (sizeof(RtsRail) + key_len > kMaxRtsRkey) return key_len;
    // Rail 0's key, as the first entry.
    std::memmove(buf + sizeof(RtsRail), buf, key_len);
    const RtsRail first{rts.iface_index, 0, static_cast<std::uint16_t>(key_len)};
    std::memcpy(buf, &first, sizeof(first));
    std::size_t used = sizeof(RtsRail) + key_len;
    uct::Md* md0 = lane_md(w, ep, ep.rndv_lane);
    unsigned offered = 0;
    for (unsigned r = 1; r < ep.num_rndv_rails; ++r) {
        const Lane& lane = ep.lanes[ep.rndv_rails[r]];
        const ContextResource& rsc = *w.ifaces[lane.iface].rsc;
        const std::size_t len = rsc.md_attr.rkey_packed_size;
        if (used + sizeof(RtsRail) + len > kMaxRtsRkey) break;
        // One registration per memory domain: rails of one domain (tcp on two devices) share it.
        uct::MemH memh = uct::kMemHNull;
        if (rsc.md == md0) {
            memh = req->memh;
        } else {
            for (unsigned e = 1; e < r; ++e) {
                if (lane_md(w, ep, ep.rndv_rails[e]) == rsc.md) memh = req->send.rndv_rail_memh[e - 1];
            }
            if (memh == uct::kMemHNull && (rsc.md_attr.flags & uct::MdAttr::kReg)) {
                auto reg = rsc.md->mem_reg(req->send.dt.buffer, rts.length, uct::kAccessRemoteGet | uct::kAccessLocalRead);
                if (reg) memh = req->send.rndv_rail_memh[r - 1] = *reg;
            }
        }
        if ((memh == uct::kMemHNull && (rsc.md_attr.flags & uct::MdAttr::kNeedRkey)) ||
            (len != 0 && rsc.md->mkey_pack(memh, buf + used + sizeof(RtsRail)) != Status::ok)) {
            continue;  // this rail is not offered; the receiver splits over the others
        }
        const RtsRail entry{lane.remote_iface, 0, static_cast<std::uint16_t>(len)};
        std::memcpy(buf + used, &entry, sizeof(entry));
        used += sizeof(entry) + len;
        ++offered;
    }
    if (!(req->flags & kReqRelease) &&
        std::any_of(std::begin(req->send.rndv_rail_memh), std::end(req->send.rndv_rail_memh),
                    [](uct::MemH m) { return m != uct::kMemHNull; })) {
        req->lane = ep.rndv_lane;
        req->flags |= kReqRelease;
        req->release = rndv_send_release;
    }
    if (offered == 0) {  // one rail after all: the plain format
        std::memmove(buf, buf + sizeof(RtsRail), key_len);
        return key_len;
    }
    rts.flags |= kRtsFlagRails;
    return used;
}

void rndv_rails_release(Request* req) {
    const Ep& ep = *req->ep;
    for (unsigned r = 1; r < kMaxRndvRails; ++r) {
        uct::MemH& memh = req->send.rndv_rail_memh[r - 1];
        if (memh == uct::kMemHNull) continue;
        (void)lane_md(*req->worker, ep, ep.rndv_rails[r])->mem_dereg(memh);
        memh = uct::kMemHNull;
    }
}

unsigned rndv_rails_parse(const RtsHdr& rts, const std::uint8_t* keys, std::size_t length, RndvRailKey* rails) {
    if (!(rts.flags & kRtsFlagRails)) {
        rails[0] = RndvRailKey{rts.iface_index, keys, length};
        return 1;
    }
    unsigned count = 0;
    std::size_t pos = 0;
    while (pos < length) {
        RtsRail rail;
        if (count == kMaxRndvRails || length - pos < sizeof(rail)) return 0;
        std::memcpy(&rail, keys + pos, sizeof(rail));
        pos += sizeof(rail);
        if (rail.rkey_length > length - pos) return 0;
        for (unsigned i = 0; i < count; ++i) {
            if (rails[i].iface_index == rail.iface_index) return 0;
        }
        rails[count++] = RndvRailKey{rail.iface_index, keys + pos, rail.rkey_length};
        pos += rail.rkey_length;
    }
    return count != 0 && rails[0].iface_index == rts.iface_index ? count : 0;
}

void rndv_rails_get_start(Worker& w, Request* req, Ep* ep, const RtsHdr& rts, const RndvRailKey* rails,
                          unsigned count) {
    // The rails this side can GET over, each with its key unpacked and, where its domain
    // needs one, the buffer registered; rail 0 is the request's own (set up by the caller).
    if (ep->flags & kEpRailClosed) count = 1;  // the first rail only (rndv_rails_offer)
    Request* parts[kMaxRndvRails] = {req};
    double weight[kMaxRndvRails] = {w.ifaces[ep->lanes[req->lane].iface].attr.bandwidth_dedicated};
    unsigned usable = 1;
    for (unsigned r = 1; r < count && r < kMaxRndvRails; ++r) {
        const std::uint8_t lane = ep->lane_of_iface(rails[r].iface_index);
        if (lane == kNoLane || lane == req->lane ||
            std::find(ep->rndv_rails, ep->rndv_rails + ep->num_rndv_rails, lane) == ep->rndv_rails + ep->num_rndv_rails) {
            LOOM_LOG_DEBUG("ucp: rendezvous from {:016x} offers iface {}, not a rail here; left out",
                           rts.sender_uuid, rails[r].iface_index);
            continue;
        }
        const WorkerIface& wi = w.ifaces[ep->lanes[lane].iface];
        auto key = wi.rsc->component->rkey_unpack(rails[r].rkey, rails[r].rkey_len);
        if (!key) {
            LOOM_LOG_DEBUG("ucp: rendezvous rail key for iface {} from {:016x}: {}; left out", rails[r].iface_index,
                           rts.sender_uuid, to_string(key.status()));
            continue;
        }
        Request* part = w.alloc_request();
        if (part == nullptr) {
            wi.rsc->component->rkey_release(*key);
            continue;
        }
        part->memh = uct::kMemHNull;
        part->recv.md = nullptr;  // owns no registration
        if (wi.rsc->md_attr.flags & uct::MdAttr::kNeedMemh) {
            if (wi.rsc->md == req->recv.md && req->memh != uct::kMemHNull) {
                part->memh = req->memh;
            } else {
                auto memh = wi.rsc->md->mem_reg(req->recv.dt.buffer, rts.length, uct::kAccessLocalWrite);
                if (!memh) {
                    wi.rsc->component->rkey_release(*key);
                    w.release(part);
                    continue;
                }
                part->memh = *memh;
                part->recv.md = wi.rsc->md;
            }
        }
        part->ep = ep;
        part->lane = lane;
        part->user_data = req;
        part->recv.dt = req->recv.dt;
        part->recv.sender_uuid = req->recv.sender_uuid;
        part->recv.sreq_id = req->recv.sreq_id;
        part->recv.rkey = *key;
        part->recv.rkey_component = wi.rsc->component;
        part->recv.remote_address = rts.address;
        part->recv.comp.func = rail_get_done;
        part->recv.comp.count = 1;
        part->recv.comp.status = Status::ok;
        parts[usable] = part;
        weight[usable++] = wi.attr.bandwidth_dedicated;
    }
    std::size_t bounds[kMaxRndvRails + 1];
    const unsigned used = split(rts.length, weight, usable, bounds);
    for (unsigned i = used; i < usable; ++i) {  // too small a share: not used after all
        Request* part = parts[i];
        part->recv.rkey_component->rkey_release(part->recv.rkey);
        if (part->recv.md != nullptr) (void)part->recv.md->mem_dereg(part->memh);
        w.release(part);
    }
    req->recv.received = bounds[1];  // rail 0's GET ends here
    if (used < 2) return;
    LOOM_LOG_DEBUG("ucp: rendezvous receive of {} B from {:016x} over {} rails", rts.length, rts.sender_uuid, used);
    // Every part holds a reference to the whole before any starts: one may finish at once.
    req->recv.comp.count += static_cast<int>(used - 1);
    w.rndv_rail_parts += used - 1;
    for (unsigned i = 1; i < used; ++i) {
        parts[i]->recv.get_offset = bounds[i];
        parts[i]->recv.received = bounds[i + 1];
        rndv_get_start(parts[i], ep);
    }
}

std::string rndv_rails_describe(const ProtoInit& init) {
    const Ep& ep = init.ep;
    if (ep.num_rndv_rails < 2) return {};
    double total = 0;
    for (unsigned r = 0; r < ep.num_rndv_rails; ++r) total += init.lane_iface(ep.rndv_rails[r]).attr.bandwidth_dedicated;
    std::string out = fmt::format(" ({} rails from {} B:", ep.num_rndv_rails, 2 * kRndvRailMinPart);
    for (unsigned r = 0; r < ep.num_rndv_rails; ++r) {
        const WorkerIface& wi = init.lane_iface(ep.rndv_rails[r]);
        out += fmt::format("{} {}/{} {:.0f}%", r == 0 ? "" : ",", wi.rsc->tl.tl_name, wi.rsc->tl.dev_name,
                           100 * wi.attr.bandwidth_dedicated / total);
    }
    return out + ")";
}

}  // namespace loom::ucp
