/**
 * Rendezvous: what tagged messages and active messages share to move a large message
 * after a handshake. The family's own RTS (the tag, or the AM headers) is sent by its
 * protocol (tag_send.cc, am_proto.cc) with the fields rndv_rts_prepare fills; the
 * receiving family matches it and hands it to rndv_recv_start, which runs the scheme the
 * receiver's protocol table names (GET, PUT, GET of the head + PUT of the tail, or the AM
 * pipeline). rndv_send.cc is the sender's side (RTS fields, the answers ATS/RTR/PUT_RTR,
 * the PUTs and the FIN), rndv_recv.cc the receiver's (the choice, GET, RTR, FIN, purge).
 * docs/protocols.md ("Rendezvous") describes the wire.
 */
#pragma once

#include "ucp/core/wire.h"
#include "ucp/core/worker.h"
#include "ucp/proto/proto.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace loom::ucp {

/** Marks a send whose first fragment left: eager_multi_progress sends only middle fragments. */
inline constexpr std::uint64_t kRndvMsgBit = 1ull << 63;

/** Largest packed remote key an RTS carries (a larger one falls back to the AM pipeline). */
inline constexpr std::size_t kMaxRtsRkey = 256;

/**
 * What a rendezvous send by PUT still waits for (Request::send.rndv_wait). kSendWaitRtr
 * from the RTS on: only then is a kAmRndvPutRtr for it accepted.
 */
enum RndvSendWait : std::uint8_t {
    kSendWaitRtr = 1u << 0,    ///< the receiver's answer to the RTS
    kSendWaitPuts = 1u << 1,   ///< PUTs to issue or in flight
    kSendWaitFlush = 1u << 2,  ///< the PUT lane is not the AM lane: flush it before the FIN
    kSendWaitAts = 1u << 3,    ///< split scheme: the receiver's ATS (it GETs the head)
    kSendIssuing = 1u << 4,    ///< not a wait: a pass of rndv_put_issue runs (it sends the FIN itself)
    kSendWaitFin = 1u << 5,    ///< the FIN is still to leave (the PUTs are done)
    kSendKeyHeld = 1u << 7,    ///< not a wait: send.rndv_rkey holds an unpacked key to release
};
/** The bits that say a send is in a PUT scheme (after the receiver's PUT_RTR). */
inline constexpr std::uint8_t kSendWaitPutScheme = kSendWaitPuts | kSendWaitFlush | kSendWaitAts | kSendWaitFin;

/** What a rendezvous receive by PUT still waits for (Request::recv.rndv_wait; 0 otherwise). */
enum RndvRecvWait : std::uint8_t {
    kRecvWaitGet = 1u << 0,  ///< split scheme: the GETs of the head
    kRecvWaitFin = 1u << 1,  ///< the sender's FIN
};

/**
 * Rendezvous's slot in Worker::family_state (core/family.h). It keeps no state there; as a
 * family it registers the answers' handlers for tag and AM and fails the receives still
 * waiting for a failed peer's PUTs.
 */
inline constexpr std::uint8_t kRndvSlot = 4;

/** Registers the rendezvous answers' AM handlers (ATS, RTR, PUT_RTR, FIN) on every iface of @p w. */
Status rndv_register_handlers(Worker& w);

/** kAmRndvFin: the sender's PUTs are in place (rndv_recv.cc; registered by rndv_register_handlers). */
Status rndv_fin_handler(void* arg, void* data, std::size_t length, unsigned flags);

/** Releases what a rendezvous send holds (its registration, the receiver's key for PUTs); a ProtoRelease. */
void rndv_send_release(Request* req);

/**
 * @p ep failed or goes (marked so, its lanes' queues purged: queued GETs failed their
 * receives, queued PUTs are left to the failure of Ep::outstanding, which follows): fails
 * with @p status the receives waiting for the PUTs of its peer when @p ep is the one
 * replies to that peer use.
 */
void rndv_ep_purge(Worker& worker, Ep* ep, Status status);

/** Sends an AckHdr (@p id: kAmSyncAck, kAmRndvAts, kAmRndvRtr) to worker @p uuid; logs a failure. */
void send_ack(Worker& w, std::uint64_t uuid, uct::AmId id, std::uint64_t sreq_id, Status status);

/**
 * Fills @p rts for rendezvous send @p req (which has a request id): sender, id, length,
 * msg_id, and, where the rendezvous lane can GET the buffer, its address and iface with
 * the packed key written to @p rkey_buf (kMaxRtsRkey bytes). Registers the buffer once.
 * Returns the key's length (0: AM pipeline only). rts.tag is left 0.
 */
std::size_t rndv_rts_prepare(Request* req, RtsHdr& rts, std::uint8_t* rkey_buf);

/**
 * Starts receiving the rendezvous message @p rts (with its packed key) into receive
 * @p req (recv.dt set) by the scheme the table of the endpoint replies go on selects for
 * its size (GET where PUT cannot be offered, the AM pipeline where GET cannot run);
 * completes @p req (message_truncated when its buffer is short, nothing moving then).
 */
void rndv_recv_start(Worker& w, Request* req, const RtsHdr& rts, const std::uint8_t* rkey, std::size_t rkey_len);

/** The FIN (or the failure of the sender's endpoint, @p status) arrived for receive @p req (kRecvWaitFin set). */
void rndv_recv_fin(Worker& w, Request* req, Status status);

/**
 * Starts the GETs of receive (or rail part) @p req, set up for them, on its lane of @p ep
 * (the endpoint replies to the sender use) through that lane's send queue.
 */
void rndv_get_start(Request* req, Ep* ep);

// --- multi-rail (rndv_rails.cc) -----------------------------------------------------------

/** The smallest part of a message a rail carries: messages below twice this go over one rail. */
inline constexpr std::size_t kRndvRailMinPart = 64 * 1024;

/** One rail of an RTS: the receiver's iface to GET over and the sender's packed key for it. */
struct RndvRailKey {
    std::uint8_t iface_index;
    const std::uint8_t* rkey;
    std::size_t rkey_len;
};

/**
 * Sender: where @p req's endpoint has more rendezvous rails and the message is large
 * enough to split, rewrites the RTS's key (@p key_len bytes in @p buf, kMaxRtsRkey long)
 * as one entry per rail (kRtsFlagRails), registering the buffer on each further memory
 * domain. Returns the keys' new length (@p key_len when nothing was added).
 */
std::size_t rndv_rails_offer(Request* req, RtsHdr& rts, std::uint8_t* buf, std::size_t key_len);

/** Sender: releases the registrations rndv_rails_offer made (part of rndv_send_release). */
void rndv_rails_release(Request* req);

/**
 * Receiver: the rails of RTS @p rts from its key bytes into @p rails (kMaxRndvRails long):
 * their count, rails[0] being the one of rts.iface_index; 0 when the entries are malformed.
 */
unsigned rndv_rails_parse(const RtsHdr& rts, const std::uint8_t* keys, std::size_t length,
                          RndvRailKey* rails);

/**
 * Receiver: splits the GET of receive @p req (set up for the whole message on rail 0) over
 * rails[1..count) by the local rails' bandwidth, starting each other part's GETs as a
 * request of its own that completes its share of req->recv.comp; leaves rail 0's end in
 * req->recv.received for the caller, who starts rail 0.
 */
void rndv_rails_get_start(Worker& w, Request* req, Ep* ep, const RtsHdr& rts, const RndvRailKey* rails,
                          unsigned count);

/** The printout's note on the rails of init.ep (" (2 rails from ... B: tcp/lo 50%, ...)"), or "". */
std::string rndv_rails_describe(const ProtoInit& init);

/** Split scheme: the sender PUTs message bytes from this offset on (half, on a 4 KiB boundary; 0 below 8 KiB). */
std::size_t rndv_split_point(std::size_t length);

/**
 * The receiver's schemes (class ProtoOp::rndv_recv of the endpoint's table; rndv_recv.cc):
 * the receiver GETs everything; the sender PUTs everything (only where
 * LOOM_RNDV_SCHEME=put_zcopy forces it); the receiver GETs the head while the sender
 * PUTs the tail (auto: on memory devices from rndv_split_min); the AM pipeline (where
 * nothing else can: non-contiguous data, no rendezvous lane; or forced).
 */
extern const Proto kRndvGetZcopy, kRndvPutZcopy, kRndvGetPut, kRndvAm;

/** What rendezvous does by size on the endpoint of @p table (its contiguous rndv_recv ranges), for the printout. */
std::string rndv_describe(const ProtoTable& table);

/** Proto::describe of the rendezvous protocols (tag, AM): ", " and rndv_describe. */
std::string rndv_scheme_describe(const ProtoInit& init, const ProtoCaps& caps);

}  // namespace loom::ucp
