#include "ucp/rndv/rndv_thresh.h"

#include "ucp/core/worker.h"
#include "ucp/rndv/rndv.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace loom::ucp {

namespace {

/** Registration costs the rendezvous pays: the sender's buffer, and the receiver's where handles are needed. */
void registration_cost(const uct::MdAttr& md, double& per_op, double& per_byte) {
    per_op = per_byte = 0;
    if (md.flags & uct::MdAttr::kReg) {  // the sender registers its buffer
        per_op += md.reg_cost_overhead;
        per_byte += md.reg_cost_per_byte;
    }
    if (md.flags & uct::MdAttr::kNeedMemh) {  // and the receiver its own
        per_op += md.reg_cost_overhead;
        per_byte += md.reg_cost_per_byte;
    }
}

}  // namespace

PerfLine eager_cost_line(const RndvModelInput& in) {
    if (in.eager == nullptr || !(in.eager->bandwidth_dedicated > 0)) return {};
    // Per byte, eager moves the data through the AM lane (in max_bcopy fragments, each
    // paying the lane's per-message overhead) and copies it once more on the receiver, out
    // of the transport's buffer.
    const uct::IfaceAttr& e = *in.eager;
    const double frag = static_cast<double>(std::max<std::size_t>(e.am.max_bcopy, 1));
    return {0, 1.0 / e.bandwidth_dedicated + 1.0 / kRndvCopyBandwidth + e.overhead / frag};
}

bool rndv_cost_line(const RndvModelInput& in, PerfLine& line) {
    if (in.eager == nullptr || in.rndv == nullptr || in.rndv_md == nullptr) return false;  // AM pipeline
    const uct::IfaceAttr& r = *in.rndv;
    if (!(in.eager->bandwidth_dedicated > 0) || !(r.bandwidth_dedicated > 0)) return false;
    // Rendezvous moves the data once through the GET lane, after registering it. Its fixed
    // costs: the GET's round trip on its lane and the zero-copy operation's own cost (a
    // system call, pinning), plus the registration. The RTS takes the place of the eager
    // message; the ATS travels after the data has arrived.
    double reg_c = 0, reg_m = 0;
    registration_cost(*in.rndv_md, reg_c, reg_m);
    line = {2 * r.latency.c + r.overhead + r.zcopy_overhead + reg_c, 1.0 / r.bandwidth_dedicated + reg_m};
    return true;
}

std::size_t rndv_thresh_auto(const RndvModelInput& in) {
    // A message eager short can carry never waits for a handshake: no message below that size
    // pays the RTS's round trip for a copy it could not save anyway.
    const std::size_t floor = in.max_short + 1;
    const std::size_t cap = std::max(kRndvThreshMax, floor);
    PerfLine rndv;
    if (!rndv_cost_line(in, rndv)) return cap;  // no copy saved
    const PerfLine eager = eager_cost_line(in);
    const double saved_per_byte = eager.per_byte - rndv.per_byte;
    if (!(saved_per_byte > 0)) return cap;
    // The same rounding as the protocol table's (ProtoTable::build): rendezvous from the
    // first size where it costs no more.
    const double size = std::ceil((rndv.fixed - eager.fixed) / saved_per_byte);
    if (!(size < static_cast<double>(cap))) return cap;
    return std::max(floor, static_cast<std::size_t>(size));
}

std::size_t rndv_split_min(const WorkerIface& wi) {
    const uct::IfaceAttr& a = wi.attr;
    constexpr std::uint64_t kZcopyRma = uct::kCapPutZcopy | uct::kCapGetZcopy;
    // Memory devices: the process that issues a zero-copy GET or PUT copies the bytes with
    // its own core, so a GET by the receiver and a PUT by the sender run on two cores at
    // once. On a network device the adapter or the kernel moves them either way, and the
    // split only adds a message (measured on tcp: no gain; docs/protocols.md).
    if (wi.rsc->tl.dev_type != uct::DeviceType::shm || (a.cap_flags & kZcopyRma) != kZcopyRma ||
        !(a.bandwidth_dedicated > 0)) {
        return SIZE_MAX;
    }
    // It saves half the copy, S / 2B. It costs two messages on the critical path (the
    // sender starts its PUTs when the RTR arrived; the receiver completes when the FIN
    // did) and a registration on each side (the receiver's buffer; the sender unpacks its
    // key). Worth it from where the saving is twice that cost: on shm ~50 KB, where
    // measured tag_lat crosses over between 32 and 64 KiB (docs/protocols.md).
    const double reg = (wi.rsc->md_attr.flags & uct::MdAttr::kReg) ? wi.rsc->md_attr.reg_cost_overhead : 0;
    const double cost = 2 * (a.latency.c + a.overhead) + 2 * reg;
    const double from = 2 * (2 * a.bandwidth_dedicated * cost);
    return std::max<std::size_t>(static_cast<std::size_t>(std::ceil(from)), 2 * 4096);  // the split is never 0
}

bool rndv_zcopy(const ProtoInit& init) {
    if (init.ep.rndv_lane == kNoLane) return false;
    const ProtoTable::Class& c = init.table.ranges(ProtoOp::rndv_recv, true);
    return std::any_of(c.ranges, c.ranges + c.count, [](const ProtoRange& r) { return r.proto != &kRndvAm; });
}

std::uint8_t rndv_lane_of(const ProtoInit& init) { return rndv_zcopy(init) ? init.ep.rndv_lane : init.ep.am_lane; }

RndvModelInput rndv_model_input(const ProtoInit& init, bool zcopy) {
    RndvModelInput model;
    const WorkerIface& am = init.lane_iface(init.ep.am_lane);
    model.eager = &am.attr;
    if (zcopy && init.ep.rndv_lane != kNoLane) {
        const WorkerIface& rndv = init.lane_iface(init.ep.rndv_lane);
        model.rndv = &rndv.attr;
        model.rndv_md = &rndv.rsc->md_attr;
    }
    model.max_short = (am.attr.cap_flags & uct::kCapAmShort) ? am.attr.am.max_short : 0;
    return model;
}

bool eager_max_size(const ProtoInit& init, std::size_t& max) {
    if (init.op == ProtoOp::am_rndv) return false;
    if (init.op == ProtoOp::am_eager || init.op == ProtoOp::stream) {
        max = SIZE_MAX;
        return true;
    }
    if (init.user_thresh) {
        if (init.user_rndv_thresh == 0) return false;
        max = init.user_rndv_thresh - 1;
        return true;
    }
    // Where rendezvous never pays on time, it still keeps a receiver from buffering an
    // unexpected message whole.
    max = std::max(kRndvThreshMax, rndv_model_input(init, rndv_zcopy(init)).max_short + 1) - 1;
    return true;
}

void rndv_caps(const ProtoInit& init, ProtoCaps& caps) {
    caps.lane = rndv_lane_of(init);
    if (init.op == ProtoOp::am_rndv) {
        caps.forced = "LOOM_AM_SEND_FLAG_RNDV";  // every size
        return;
    }
    if (init.user_thresh) {
        caps.min_size = init.user_rndv_thresh;
        caps.forced = "LOOM_RNDV_THRESH";
        return;
    }
    const RndvModelInput model = rndv_model_input(init, rndv_zcopy(init));
    caps.min_size = model.max_short + 1;  // see rndv_thresh_auto
    caps.fallback = !rndv_cost_line(model, caps.cost);
}

const char* eager_caps(const ProtoInit& init, ProtoCaps& caps) {
    if (!eager_max_size(init, caps.max_size)) return "LOOM_RNDV_THRESH=0: every size goes by rendezvous";
    caps.lane = init.ep.am_lane;
    caps.cost = eager_cost_line(rndv_model_input(init, rndv_zcopy(init)));
    return nullptr;
}

const char* eager_short_caps(const ProtoInit& init, ProtoCaps& caps) {
    const uct::IfaceAttr& attr = init.lane_iface(init.ep.am_lane).attr;
    if (!(attr.cap_flags & uct::kCapAmShort) || attr.am.max_short == 0) return "the AM lane has no am_short";
    if (const char* why = eager_caps(init, caps)) return why;
    caps.max_size = std::min(caps.max_size, attr.am.max_short);
    return nullptr;
}

const char* eager_bcopy_caps(const ProtoInit& init, ProtoCaps& caps, std::size_t header) {
    const std::size_t max_bcopy = init.lane_iface(init.ep.am_lane).attr.am.max_bcopy;
    if (max_bcopy <= header) return "the AM lane's bcopy cannot hold the header";
    if (const char* why = eager_caps(init, caps)) return why;
    caps.max_size = std::min(caps.max_size, max_bcopy - header);
    return nullptr;
}

std::string eager_fragments_describe(const ProtoInit& init, const ProtoCaps&) {
    return fmt::format(" ({} B fragments)", init.lane_iface(init.ep.am_lane).attr.am.max_bcopy);
}

const char* rndv_proto_init(const ProtoInit& init, ProtoCaps& caps) {
    rndv_caps(init, caps);
    return nullptr;
}

}  // namespace loom::ucp
