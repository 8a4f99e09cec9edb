#include "ucp/tag/rndv_thresh.h"

#include <algorithm>
#include <cmath>

namespace loom::ucp {

std::size_t rndv_thresh_auto(const RndvModelInput& in) {
    // A message eager short can carry never waits for a handshake: no message below that size
    // pays the RTS's round trip for a copy it could not save anyway.
    const std::size_t floor = in.max_short + 1;
    const std::size_t cap = std::max(kRndvThreshMax, floor);
    if (in.eager == nullptr || in.rndv == nullptr || in.rndv_md == nullptr) return cap;  // AM pipeline: no copy saved
    const uct::IfaceAttr& e = *in.eager;
    const uct::IfaceAttr& r = *in.rndv;
    if (!(e.bandwidth_dedicated > 0) || !(r.bandwidth_dedicated > 0)) return cap;

    // Per byte, eager moves the data through the AM lane (in max_bcopy fragments, each
    // paying the lane's per-message overhead) and copies it once more on the receiver, out
    // of the transport's buffer; rendezvous moves it once through the GET lane, after
    // registering it.
    double reg_c = 0, reg_m = 0;
    if (in.rndv_md->flags & uct::MdAttr::kReg) {  // the sender registers its buffer
        reg_c += in.rndv_md->reg_cost_overhead;
        reg_m += in.rndv_md->reg_cost_per_byte;
    }
    if (in.rndv_md->flags & uct::MdAttr::kNeedMemh) {  // and the receiver its own
        reg_c += in.rndv_md->reg_cost_overhead;
        reg_m += in.rndv_md->reg_cost_per_byte;
    }
    const double frag = static_cast<double>(std::max<std::size_t>(e.am.max_bcopy, 1));
    const double eager_per_byte = 1.0 / e.bandwidth_dedicated + 1.0 / kRndvCopyBandwidth + e.overhead / frag;
    const double rndv_per_byte = 1.0 / r.bandwidth_dedicated + reg_m;
    const double saved_per_byte = eager_per_byte - rndv_per_byte;
    // Fixed costs rendezvous adds: the GET's round trip on its lane and the zero-copy
    // operation's own cost (a system call, pinning), plus the registration. The RTS takes
    // the place of the eager message; the ATS travels after the data has arrived.
    const double fixed = 2 * r.latency.c + r.overhead + r.zcopy_overhead + reg_c;
    if (!(saved_per_byte > 0)) return cap;
    const double size = std::ceil(fixed / saved_per_byte);
    if (!(size < static_cast<double>(cap))) return cap;
    return std::max(floor, static_cast<std::size_t>(size));
}

}  // namespace loom::ucp
