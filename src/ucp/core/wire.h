/**
 * What the protocol layer puts on the wire: its active-message ids and the headers
 * that lead each message. Every header is read with memcpy from a possibly
 * unaligned transport buffer and every handler checks the length before reading, so
 * a truncated or malformed message is dropped with one log line, never a crash.
 */
#pragma once

#include "uct/api/uct_types.h"

#include <cstdint>

namespace loom::ucp {

/** Active-message ids the protocol layer registers on every iface of a worker. */
enum AmIds : uct::AmId {
    kAmWireup = 1,         ///< WireupHdr + the sender's worker address
    kAmEagerOnly = 2,      ///< tag (8 bytes) + the whole payload
    kAmEagerFirst = 3,     ///< EagerFirstHdr + the first fragment
    kAmEagerMiddle = 4,    ///< EagerMiddleHdr + a later fragment
    kAmEagerSyncOnly = 5,  ///< EagerSyncHdr + the whole payload; the receiver acknowledges the match
    kAmSyncAck = 6,        ///< AckHdr: a synchronous send matched
    kAmRndvRts = 7,        ///< RtsHdr + the sender's packed remote key
    kAmRndvAts = 8,        ///< AckHdr: the receiver has the rendezvous data
    kAmRndvRtr = 9,        ///< AckHdr: the receiver is ready for AM-pipeline data, sent as
                           ///< kAmEagerMiddle fragments of the RTS's msg_id
    kAmRndvPutRtr = 10,    ///< RndvRtrHdr + the receiver's packed remote key: PUT [offset, length) there
    kAmRndvFin = 11,       ///< RndvFinHdr: the sender's PUTs of a rendezvous are in place
    kAmTagCancel = 12,     ///< CancelHdr: the sender withdraws an unmatched send (rendezvous or sync)
    kAmTagCancelAck = 13,  ///< AckHdr: ok (withdrawn: the send completes canceled) or no_element (too late)
    kAmTagFlow =
        14,  ///< FlowHdr: the receiver's unexpected messages crossed LOOM_UNEXPECTED_MAX, or are back under
    // Active messages and streams (src/ucp/am, src/ucp/stream): ids 20..29.
    kAmUserOnly = 20,    ///< AmHdr [+ sender uuid when kAmWireReply] + user header + data
    kAmUserFirst = 21,   ///< AmFirstHdr + user header + first data fragment; kAmEagerMiddle fragments follow
    kAmUserRts = 22,     ///< AmRtsHdr + packed key + user header; answered with kAmRndvAts or kAmRndvRtr
    kAmStreamData = 25,  ///< sender uuid (8 bytes) + stream bytes
    kAmStreamFlow = 26,  ///< FlowHdr: the receiver's window of our stream is full (hold), or has room again
};

/** First fragment of a multi-fragment eager message (sync sends set sreq_id). */
struct EagerFirstHdr {
    std::uint64_t tag;
    std::uint64_t sender_uuid;
    std::uint64_t msg_id;
    std::uint64_t total_length;
    std::uint64_t sreq_id;  ///< nonzero: acknowledge the match (synchronous send)
};

/** A later fragment: where it goes in message (sender_uuid, msg_id). */
struct EagerMiddleHdr {
    std::uint64_t sender_uuid;
    std::uint64_t msg_id;
    std::uint64_t offset;
};

/** A single-fragment synchronous send. */
struct EagerSyncHdr {
    std::uint64_t tag;
    std::uint64_t sender_uuid;
    std::uint64_t sreq_id;
};

/** Acknowledgement of a sync send's match (kAmSyncAck) or of rendezvous data (kAmRndvAts). */
struct AckHdr {
    std::uint64_t sreq_id;
    std::int32_t status;
    std::uint32_t reserved;
};

/**
 * Withdraws send sreq_id of worker sender_uuid, tagged `tag`, if no receive has taken it:
 * the receiver drops the unexpected RTS or synchronous eager message and answers with
 * kAmTagCancelAck either way.
 */
struct CancelHdr {
    std::uint64_t tag;
    std::uint64_t sender_uuid;
    std::uint64_t sreq_id;
};

/** Flow control of unexpected messages (src/ucp/tag/tag_flow.cc). */
struct FlowHdr {
    std::uint64_t receiver_uuid;  ///< who holds the messages
    std::uint8_t hold;            ///< 1: send tagged messages by rendezvous; 0: as before
    std::uint8_t reserved[7];
};

/** Ready-to-send: a rendezvous message waits at the sender. */
struct RtsHdr {
    std::uint64_t tag;
    std::uint64_t sender_uuid;
    std::uint64_t sreq_id;
    std::uint64_t length;
    std::uint64_t msg_id;      ///< names the AM-pipeline fragments, as for eager messages
    std::uint64_t address;     ///< sender's buffer (GET scheme), 0 when only the AM pipeline is offered
    std::uint8_t iface_index;  ///< receiver's iface (in its own address order) to GET over
    std::uint8_t flags;        ///< RtsFlags
    std::uint16_t rkey_length; ///< packed key bytes following the header
    std::uint32_t reserved;
};

enum RtsFlags : std::uint8_t {
    /**
     * Multi-rail: the bytes after the header are RtsRail entries, each followed by its
     * packed key: the first for iface_index, the others for more ifaces of the receiver
     * the buffer may be read over (src/ucp/rndv/rndv_rails.cc). Without it: one key.
     */
    kRtsFlagRails = 1u << 0,
};

/** One rail of a multi-rail RTS (kRtsFlagRails); rkey_length key bytes follow. */
struct RtsRail {
    std::uint8_t iface_index;  ///< receiver's iface to GET over
    std::uint8_t reserved;
    std::uint16_t rkey_length;
};

/**
 * Ready-to-receive for the PUT schemes (kAmRndvPutRtr): the receiver matched the RTS of
 * sreq_id and asks the sender to PUT bytes [offset, offset + length) of the message, the
 * message's tail, at `address` (the receiver's address of byte `offset`) with the packed
 * key that follows, then to send kAmRndvFin naming rreq_id. With kRtrFlagAts the receiver
 * GETs the head [0, offset) itself and sends kAmRndvAts when it has it.
 */
struct RndvRtrHdr {
    std::uint64_t sreq_id;        ///< the sender's request, from the RTS
    std::uint64_t rreq_id;        ///< the receive, named by the FIN
    std::uint64_t receiver_uuid;  ///< the receiver's worker
    std::uint64_t address;        ///< where byte `offset` of the message goes
    std::uint64_t offset;         ///< first byte to PUT
    std::uint64_t length;         ///< bytes to PUT: always up to the end of the message
    std::uint16_t rkey_length;    ///< packed key bytes following the header
    std::uint8_t flags;           ///< kRtrFlag*
    std::uint8_t reserved[5];
};
static_assert(sizeof(RndvRtrHdr) == 56);
/** RndvRtrHdr::flags: the receiver GETs [0, offset) itself and acknowledges with kAmRndvAts. */
inline constexpr std::uint8_t kRtrFlagAts = 1u << 0;

/** The sender's PUTs for receive rreq_id completed (with `status`: ok, or why they failed). */
struct RndvFinHdr {
    std::uint64_t rreq_id;
    std::uint64_t sender_uuid;  ///< checked against the RTS's sender
    std::int32_t status;
    std::uint32_t reserved;
};
static_assert(sizeof(RndvFinHdr) == 24);

/**
 * Wire-up message (wireup.cc). A request or a reply carries the sender's packed worker
 * address and then num_lanes WireupLaneHdr entries, one per endpoint-to-endpoint lane,
 * each followed by the sender's transport endpoint address. An acknowledgement carries
 * the header only.
 */
struct WireupHdr {
    std::uint8_t type;       ///< kWireupRequest, kWireupReply or kWireupAck
    std::uint8_t num_lanes;  ///< endpoint-to-endpoint lane entries after the address
    std::uint8_t reserved[6];
    std::uint64_t src_ep_id;  ///< the sender's endpoint (0: it has no endpoint-to-endpoint lanes)
    std::uint64_t dst_ep_id;  ///< the receiver's endpoint (reply, acknowledgement; 0 in a request)
};
/** Request: "here is my address (and my endpoints' addresses): make an endpoint back". */
inline constexpr std::uint8_t kWireupRequest = 1;
/** Reply to a request with endpoint entries: the sender's lanes are connected, sends held. */
inline constexpr std::uint8_t kWireupReply = 2;
/** After a reply: the sender's lanes are connected too, the receiver may release its sends. */
inline constexpr std::uint8_t kWireupAck = 3;

/** One endpoint-to-endpoint lane in a wire-up request or reply; ep_addr_len address bytes follow. */
struct WireupLaneHdr {
    std::uint8_t sender_iface;    ///< the sender's iface index (in its address order)
    std::uint8_t receiver_iface;  ///< the receiver's iface index (in its address order)
    std::uint16_t ep_addr_len;
};

/**
 * What leads every active message: the application's id, kAmWire* flags and the
 * length of the application's header. 8 bytes: the header word of an am_short.
 */
struct AmHdr {
    std::uint16_t am_id;
    std::uint8_t flags;
    std::uint8_t reserved;
    std::uint32_t header_length;
};
static_assert(sizeof(AmHdr) == 8);
inline constexpr std::uint8_t kAmWireReply = 1u << 0;  ///< the sender's uuid follows: give the receiver a reply ep

/** First fragment of a multi-fragment active message. */
struct AmFirstHdr {
    AmHdr am;
    std::uint64_t sender_uuid;
    std::uint64_t msg_id;
    std::uint64_t total_length;  ///< data bytes, the application's header excluded
};

/** Rendezvous active message: the tag protocol's RTS (its tag unused) and the AM header. */
struct AmRtsHdr {
    RtsHdr rts;
    AmHdr am;
};

}  // namespace loom::ucp
