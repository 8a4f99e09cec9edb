/**
 * A protocol-layer endpoint: the connection of one worker to one peer worker, made
 * of up to kMaxLanes transport endpoints ("lanes"). Wire-up picks the lanes from the
 * transports both sides have, deterministically and symmetrically (both sides rank
 * the same pairs the same way): the AM lane carries every tagged message and control
 * message in order; the rendezvous lane carries RDMA GET of large messages. When one of
 * them connects endpoint to endpoint (rc without rdma_cm), a wire-up lane on a transport
 * that connects to ifaces carries the exchange of endpoint addresses (wireup.cc).
 */
#pragma once

#include "loom/ucp_ep.h"
#include "ucp/core/request.h"
#include "ucs/datastruct/list.h"
#include "uct/api/uct.h"

#include <cstdint>
#include <string>

namespace loom::ucp {

class Worker;
class ProtoTable;
struct UnpackedAddress;

inline constexpr unsigned kMaxLanes = 4;
inline constexpr std::uint8_t kNoLane = 0xff;

/** Connection state of a lane (endpoint-to-endpoint transports are wired up; wireup.cc). */
enum LaneState : std::uint8_t {
    kLaneReady = 0,        ///< connected (connect-to-iface lanes always are)
    kLaneUnconnected = 1,  ///< endpoint-to-endpoint, waiting for the peer's endpoint address
    kLaneHeld = 2,         ///< connected, but sends wait until the peer says its side is up
};

/** One transport endpoint of an Ep. */
struct Lane {
    uct::Ep* ep = nullptr;
    std::uint8_t iface = 0;         ///< the local worker's iface index
    std::uint8_t remote_iface = 0;  ///< the peer's iface index in its worker (RemoteIface::index)
    std::uint8_t state = kLaneReady;
    std::uint8_t remote_md = 0;     ///< the peer's memory domain this lane reaches (picks its remote key entry)
    /** Requests send_request_start queued on this lane when it is not the AM lane (that one: Ep::num_pending). */
    std::uint32_t queued = 0;
};

/** Error callback of an endpoint: the C API's type, called through it (see SendCallback). */
using EpErrorCallback = loom_err_handler_cb_t;

enum EpFlags : std::uint8_t {
    kEpInternal = 1u << 0,  ///< created by a peer's wire-up, not (yet) by the application
    kEpFailed = 1u << 1,
    kEpClosing = 1u << 2,
    kEpErrModePeer = 1u << 3,
    /** The peer holds too many unexpected messages: tagged sends go by rendezvous (tag_flow.cc). */
    kEpTagHeld = 1u << 4,
    /** The peer's stream window is full: stream sends wait (stream_proto.cc). */
    kEpStreamHeld = 1u << 5,
    /**
     * The peer closed the connection of a rendezvous rail other than the first: no new
     * message is split over the rails, and the endpoint fails when its AM lane ends, or
     * after kRailCloseGraceNs (Worker::lane_failed).
     */
    kEpRailClosed = 1u << 6,
    /**
     * Created from a worker address with LOOM_LAZY_CONNECT and not used yet: nothing was
     * sent, so the peer does not know it. Its first operation sends the wire-up request
     * (Worker::ep_first_use); a request from the peer first makes that unnecessary.
     */
    kEpIdle = 1u << 7,
};

/**
 * The flags that take an API call off its fast path: the endpoint failed, is closing, or
 * is used for the first time. One test on the hot line for all three.
 */
inline constexpr std::uint8_t kEpNotReady = kEpFailed | kEpClosing | kEpIdle;

class Ep {
public:
    /** Hot fields first: the eager path reads only this cache line. */
    uct::Ep* am_ep;
    Worker* worker;
    /**
     * The protocol table of this endpoint's lanes (shared by endpoints over the same
     * ifaces; owned by the worker). The three limits below are read off it for the API
     * fast paths: sizes below them go by eager short.
     */
    const ProtoTable* protos;
    std::uint32_t tag_short_limit;     ///< ProtoOp::tag, contiguous
    std::uint32_t am_short_limit;      ///< ProtoOp::am, contiguous (header + data)
    std::uint32_t stream_short_limit;  ///< ProtoOp::stream, contiguous
    std::uint32_t max_bcopy;      ///< the AM lane's largest bcopy (headers included)
    std::uint32_t num_pending;    ///< own requests queued in the AM lane's pending queue
    std::uint8_t flags;
    std::uint8_t num_lanes;
    std::uint8_t am_lane;
    std::uint8_t rndv_lane;       ///< kNoLane: AM pipeline only
    std::uint64_t remote_uuid;

    Lane lanes[kMaxLanes];
    ucs::List<Request, &Request::ep_link> outstanding;  ///< sends not yet complete
    ucs::ListLink worker_link;
    Status failure;
    std::uint8_t rma_flags;       ///< RmaEpFlags (src/ucp/rma); these two fill padding
    std::uint8_t wireup_lane;     ///< the lane wire-up messages use, kNoLane without ep-to-ep lanes
    /**
     * The rendezvous rails (ep_select_lanes; rndv_rails.cc splits): rndv_rails[0] is rndv_lane, the others
     * are lanes of the same transport on other devices that reach other devices of the peer; a large
     * message's GETs are split over them by bandwidth. 1 without extra rails.
     */
    std::uint8_t num_rndv_rails;
    std::uint8_t rndv_rails[kMaxRndvRails];
    /**
     * The rendezvous rails that also carry the middle fragments of eager tagged messages
     * (LOOM_MAX_EAGER_RAILS): bit r for rndv_rails[r], never the AM lane. 0: the AM lane only.
     */
    std::uint8_t eager_rail_mask;
    EpErrorCallback on_error;
    void* on_error_arg;
    void* user_data;

    /**
     * The requests of the send queue waiting on lane @p lane (a new one must not overtake
     * them): num_pending for the AM lane, which the eager fast path reads on the hot line.
     */
    std::uint32_t& queued_on(std::uint8_t lane) { return lane == am_lane ? num_pending : lanes[lane].queued; }
    std::uint32_t queued_on(std::uint8_t lane) const { return lane == am_lane ? num_pending : lanes[lane].queued; }

    /** The uct endpoint of the lane over local iface @p iface, or kNoLane. */
    std::uint8_t lane_of_iface(std::uint8_t iface) const {
        for (std::uint8_t i = 0; i < num_lanes; ++i) {
            if (lanes[i].iface == iface) return i;
        }
        return kNoLane;
    }
};

// Endpoints exist per peer: keep them small (the request list and lanes dominate).
static_assert(sizeof(Ep) <= 192, "Ep grew: every peer pays for it");

}  // namespace loom::ucp
