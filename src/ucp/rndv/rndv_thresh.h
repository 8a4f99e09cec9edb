/**
 * The automatic eager/rendezvous switch point (LOOM_RNDV_THRESH=auto): the message size
 * from which rendezvous costs less than eager, derived from the performance model the
 * transports report (uct::IfaceAttr, uct::MdAttr). docs/protocols.md ("Thresholds")
 * gives the formula and the reasoning.
 */
#pragma once

#include "ucp/proto/proto.h"
#include "uct/api/uct_types.h"

#include <cstddef>
#include <string>

namespace loom::ucp {

/**
 * Bytes per second of the copy the eager protocol pays on the receiver (from the
 * transport's buffer into the user's) and rendezvous does not. Measured on the
 * development machine as the slope of eager minus that of rendezvous in shm tag_lat
 * (8 KiB .. 32 KiB, both forced with LOOM_RNDV_THRESH): ~15 GB/s of memcpy across cores.
 */
inline constexpr double kRndvCopyBandwidth = 15e9;

/**
 * Largest automatic threshold: where rendezvous never pays on time, it still keeps a
 * receiver from buffering an unexpected message whole (malloc'ed at its full length).
 */
inline constexpr std::size_t kRndvThreshMax = 256 * 1024;

/** What the model reads of an endpoint's lanes. */
struct RndvModelInput {
    const uct::IfaceAttr* eager = nullptr;  ///< the AM lane, which carries eager messages and the RTS
    const uct::IfaceAttr* rndv = nullptr;   ///< the rendezvous (GET) lane; nullptr: AM pipeline only
    const uct::MdAttr* rndv_md = nullptr;   ///< the rendezvous lane's memory domain
    std::size_t max_short = 0;              ///< the AM lane's eager-short limit (0: none)
};

/**
 * The size from which rendezvous is expected to be faster than eager, per the model:
 *
 *     eager(S) = S / B_eager + S / kRndvCopyBandwidth          (+ what both share: the first message)
 *     rndv(S)  = 2 L_rndv + O_rndv + Z_rndv + reg.c + S (1 / B_rndv + reg.m)
 *
 * (L latency, O overhead, Z zcopy_overhead, B bandwidth_dedicated of the lanes; reg the
 * rendezvous md's registration cost, counted on the receiver too when its zero-copy
 * buffers need handles.) The result is at least max_short + 1 (a message eager short can
 * carry never waits for a handshake) and at most kRndvThreshMax, which is also the answer
 * when rendezvous never saves time (no GET lane, or a per-byte cost no lower than eager's).
 */
std::size_t rndv_thresh_auto(const RndvModelInput& in);

/** The eager protocols' cost line of the model above (fixed part 0: what both share is left out). */
PerfLine eager_cost_line(const RndvModelInput& in);

/** Rendezvous's cost line of the model above; false when the model cannot price it (no GET lane). */
bool rndv_cost_line(const RndvModelInput& in, PerfLine& line);

/**
 * What the model reads of the endpoint a protocol table is built for: the AM lane, and
 * the rendezvous lane where @p zcopy (the receiver moves the data over it).
 */
RndvModelInput rndv_model_input(const ProtoInit& init, bool zcopy);

/**
 * Whether the receiver's schemes on init.ep move contiguous data over the rendezvous
 * lane somewhere (class rndv_recv of init.table, built before the senders' classes).
 */
bool rndv_zcopy(const ProtoInit& init);

/**
 * The largest size eager protocols carry in class init.op: below the user's threshold, or
 * below the automatic cap (kRndvThreshMax; no cap for classes rendezvous does not serve).
 * False when eager carries nothing (LOOM_RNDV_THRESH=0).
 */
bool eager_max_size(const ProtoInit& init, std::size_t& max);

/**
 * The sizes, cost and lane of a rendezvous protocol in class init.op: from the user's
 * threshold (forced), else from just above what eager short carries, priced by the model
 * (a fallback where it cannot be priced); every size for LOOM_AM_SEND_FLAG_RNDV.
 */
void rndv_caps(const ProtoInit& init, ProtoCaps& caps);

/**
 * What the eager protocols of every family (tag, AM, stream) share on the AM lane: the
 * lane, the eager cost line, and the sizes rendezvous leaves them (eager_max_size). Fills
 * @p caps and returns nullptr, or says why eager cannot run.
 */
const char* eager_caps(const ProtoInit& init, ProtoCaps& caps);

/** eager_caps, up to the AM lane's am_short; the AM lane must have one. */
const char* eager_short_caps(const ProtoInit& init, ProtoCaps& caps);

/** eager_caps, up to what one bcopy of the AM lane carries after @p header bytes. */
const char* eager_bcopy_caps(const ProtoInit& init, ProtoCaps& caps, std::size_t header);

/** " (N B fragments)": the AM lane's bcopy size, for the printout of a fragmenting protocol. */
std::string eager_fragments_describe(const ProtoInit& init, const ProtoCaps& caps);

/** Proto::init of every rendezvous protocol (rndv_caps; rendezvous always can run). */
const char* rndv_proto_init(const ProtoInit& init, ProtoCaps& caps);

/**
 * LOOM_RNDV_SCHEME=auto: the size from which a rendezvous over the lane of iface @p wi
 * splits (the receiver GETs the head, the sender PUTs the tail); SIZE_MAX: never on that
 * lane. From the lane's device type and performance model (docs/protocols.md).
 */
std::size_t rndv_split_min(const WorkerIface& wi);

/** The rendezvous lane init.ep uses (its GET/PUT lane where rndv_zcopy, else the AM lane for the AM pipeline). */
std::uint8_t rndv_lane_of(const ProtoInit& init);

}  // namespace loom::ucp
