/**
 * Requests of the protocol layer: one object per operation that does not complete
 * at once, taken from the worker's pool (or placed in the caller's memory) and
 * handed to the application as a pointer to the caller's part after it:
 *
 *     [ Request (Loom's state) ][ user part: request_size bytes ] <- the handle
 *
 * so request_of(handle) and handle_of(request) are pointer arithmetic. A request is
 * released when it has both completed and been freed by the application (or was
 * never seen by it).
 */
#pragma once

#include "loom/ucp_request.h"
#include "ucp/dt/datatype.h"
#include "ucs/datastruct/list.h"
#include "uct/api/uct_types.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace loom::ucp {

class Worker;
class Ep;

/** A message tag (the tag family's matching key; also carried by completions). */
using Tag = std::uint64_t;

/**
 * Completion callbacks: the C API's own types, so that the application's function is
 * called through its real type (a call through another function type is undefined
 * behaviour; clang's UBSan checks it).
 */
using SendCallback = loom_send_nbx_callback_t;
struct TagRecvInfo {
    Tag sender_tag;
    std::size_t length;
};
static_assert(sizeof(TagRecvInfo) == sizeof(loom_tag_recv_info_t) &&
                  offsetof(TagRecvInfo, length) == offsetof(loom_tag_recv_info_t, length),
              "TagRecvInfo is handed to the application as a loom_tag_recv_info_t");
using RecvCallback = loom_tag_recv_nbx_callback_t;
/** Completion of a receive that reports only its length (active-message data, streams). */
using RecvLengthCallback = loom_stream_recv_nbx_callback_t;

enum ReqFlags : std::uint16_t {
    kReqCompleted = 1u << 0,
    kReqReleased = 1u << 1,    ///< the application freed the handle (or never got it)
    kReqCallerMem = 1u << 2,   ///< lives in the caller's memory: never returned to the pool
    kReqRecv = 1u << 3,        ///< a receive (callback type RecvCallback)
    kReqSync = 1u << 4,        ///< a synchronous send: completes on the receiver's acknowledgement
    kReqHandedOut = 1u << 5,   ///< returned to the application as a handle
    kReqInEpList = 1u << 6,    ///< linked in its endpoint's outstanding list
    kReqCtrl = 1u << 7,        ///< an internal control message (no handle, no callback)
    kReqAcked = 1u << 8,       ///< sync send: the match was acknowledged before every fragment left
    kReqRelease = 1u << 9,     ///< holds resources (a registration in memh, a peer's key): complete() calls release
    kReqFlush = 1u << 10,      ///< an endpoint or worker flush waiting in Worker::flush_waiters
    kReqClose = 1u << 11,      ///< a flush that closes its endpoint when done
    kReqWaitAll = 1u << 14,    ///< stream receive: complete only once the buffer is full
    kReqRecvLength = 1u << 15, ///< a receive whose callback is a RecvLengthCallback (recv.info.length)
    kReqRma = 1u << 12,        ///< an RMA or atomic operation (src/ucp/rma; rma fields, in Ep::outstanding)
    kReqRmaFlush = 1u << 13,   ///< a flush whose transport-level RMA flush started (rma fields valid)
};

/** Request::kind: what loom_request_cancel can do with a request that is not a receive. */
enum RequestKind : std::uint8_t {
    kReqKindOther = 0,
    kReqKindTagSend = 1,  ///< a tagged send (tag_send_start): a cancel asks the receiver to withdraw it
};

/** What the protocol does with the request next. */
using ProtoProgress = Status (*)(struct Request* req);
/** Frees what a request's protocol holds (kReqRelease), as it completes. */
using ProtoRelease = void (*)(struct Request* req);
/** Fails a request waiting in a lane's send queue with a status (the queue refused it, or the endpoint went). */
using ProtoAbort = void (*)(struct Request* req, Status status);

/**
 * Room for the tag family's receive entry (tag/tag_match.h TagRecvEntry, asserted to
 * fit there): the request layout does not depend on the matcher's.
 */
struct alignas(8) RecvMatchSlot {
    std::uint8_t bytes[40];
};

/**
 * A request's flags (ReqFlags bits). One thread writes them at a time (the one progressing the
 * worker, under its lock in thread mode multi) while threads polling a request read them
 * without the lock. Every access is therefore atomic and relaxed, a plain load or store on
 * x86, so those reads are defined behaviour (and ThreadSanitizer agrees); publishing the
 * completion is a release store (Worker::report_completion), testing it an acquire load.
 */
struct RequestFlags {
    std::uint16_t bits;
    operator std::uint16_t() const noexcept { return __atomic_load_n(&bits, __ATOMIC_RELAXED); }
    RequestFlags& operator=(unsigned v) noexcept {
        __atomic_store_n(&bits, static_cast<std::uint16_t>(v), __ATOMIC_RELAXED);
        return *this;
    }
    RequestFlags& operator|=(unsigned v) noexcept { return *this = static_cast<std::uint16_t>(*this) | v; }
    RequestFlags& operator&=(unsigned v) noexcept { return *this = static_cast<std::uint16_t>(*this) & v; }
};

/** Most lanes a rendezvous is striped over (LOOM_MAX_RNDV_RAILS is at most this). */
inline constexpr unsigned kMaxRndvRails = 3;

struct Request {
    RequestFlags flags;
    Status status;
    std::uint8_t kind : 6;  ///< RequestKind
    /** Has an entry in Worker::deadlines (LOOM_OP_ATTR_FIELD_DEADLINE): complete() removes it. */
    std::uint8_t has_deadline : 1;
    /** Its deadline passed: what it withdraws from now on completes it with timed_out, not canceled. */
    std::uint8_t expired : 1;
    std::uint32_t id;   ///< in the worker's request table while a peer may name it (0: none)
    Worker* worker;
    void* user_data;
    union {
        SendCallback send;
        RecvCallback recv;
        RecvLengthCallback recv_length;
    } cb;
    ucs::ListLink ep_link;  ///< sends: in the endpoint's list of outstanding requests

    // The common head of a request that runs on an endpoint's lanes (sends, RMA, flush,
    // control messages, a receive's rendezvous GETs): what the send queue, purges and
    // complete() read, whatever the family.
    Ep* ep;                   ///< its endpoint (flush: nullptr for every endpoint)
    ProtoProgress progress;   ///< its protocol's next step (send_request_start runs it)
    uct::PendingReq pending;  ///< queued on a uct endpoint while it lacks resources
    uct::MemH memh;           ///< a registration it holds (kReqRelease) on lane `lane`'s memory domain
    ProtoRelease release;     ///< frees what it holds when kReqRelease is set
    ProtoAbort abort;         ///< how it fails while queued (nullptr: Worker::complete); set by send_request_start
    std::uint8_t lane;        ///< the lane of memh (sends: the rendezvous lane; RMA, GETs: theirs)

    union {
        struct {
            DtState dt;
            Tag tag;
            std::size_t offset;       ///< bytes sent so far
            std::uint64_t msg_id;
            void* ctrl_heap;          ///< a control message too long for ctrl_data
            std::uint8_t ctrl_am_id;  ///< control messages
            std::uint16_t ctrl_length;
            std::uint8_t ctrl_data[52];  ///< a control message's bytes (largest header fits)
            const void* am_header;       ///< active messages: the caller's header (send.tag holds the AmHdr)
            // Rendezvous by PUT (rndv/rndv_send.cc), from the receiver's kAmRndvPutRtr on; set up by
            // rndv_rts_prepare. The PUTs run from `offset` to the end of the message.
            std::uint64_t rndv_raddr;    ///< the receiver's address of message byte 0
            uct::Rkey rndv_rkey;         ///< its key, unpacked on lane `lane` (handle nullptr: none)
            std::uint64_t rndv_rreq_id;  ///< the receive, named by the FIN
            Status rndv_status;          ///< first error of the PUTs, or of the ATS
            std::uint8_t rndv_wait;      ///< RndvSendWait bits (rndv/rndv.h) still outstanding
            std::uint8_t rndv_records;   ///< PUT completion records with transfers in flight
            /** Multi-rail GET: registrations of the buffer on the other rails' domains (rndv_rails.cc). */
            uct::MemH rndv_rail_memh[kMaxRndvRails - 1];
        } send;
        struct {
            RecvMatchSlot entry;      ///< the tag family's TagRecvEntry
            DtState dt;
            TagRecvInfo info;
            std::size_t received;     ///< bytes of the message that arrived so far (rendezvous GET: where the GET ends)
            // rendezvous GET state (the registered buffer in memh, the lane in lane)
            uct::Completion comp;
            uct::Rkey rkey;
            const uct::Component* rkey_component;
            uct::Md* md;
            std::uint64_t sender_uuid;
            std::uint64_t sreq_id;
            std::uint64_t remote_address;
            std::size_t get_offset;
            std::uint8_t rndv_wait;   ///< rendezvous PUT schemes: RndvRecvWait bits (rndv/rndv.h), else 0
        } recv;
        /** RMA and atomics (src/ucp/rma/rma_proto.cc), and the RMA part of a flush. */
        struct {
            DtState dt;                ///< the local buffer
            std::uint64_t remote_addr;
            std::size_t offset;        ///< bytes issued so far
            std::uint64_t uct_rkey;    ///< the lane's remote key
            struct RmaOp* op;          ///< completion record of the transfers in flight, or nullptr
            std::uint8_t opcode;       ///< atomics: uct::AtomicOp
            std::uint8_t size;         ///< atomics: 4 or 8
            std::uint8_t fence;        ///< fence the lane before the first transfer
            std::uint8_t phase;        ///< flush: RmaFlushPhase
            Status error;              ///< the first error of a transfer that already finished
            const struct Mem* mapping; ///< the caller's mapping of the local buffer, or nullptr
            std::uint64_t value;       ///< atomics: the operand
            std::uint64_t compare;     ///< cswap: the value to compare with
            void* reply;               ///< fetching atomics: the caller's reply buffer
            std::uint32_t ifaces;      ///< worker flush: ifaces whose flush is still to start
        } rma;
    };
};

/** The caller's part of @p req. */
inline void* handle_of(Request* req) { return req + 1; }
/** The request behind a handle. */
inline Request* request_of(void* handle) { return static_cast<Request*>(handle) - 1; }

/**
 * Ids of requests a peer may name in a reply (sync acknowledgement, rendezvous): a slot
 * index plus a generation, so a stale or forged id finds nothing instead of a freed
 * request.
 */
class RequestTable {
public:
    /** Gives @p req an id; no_memory when the table cannot grow. */
    Status insert(Request* req);
    /** The request with @p id, removed from the table, or nullptr. */
    Request* take(std::uint64_t id);
    /** Removes @p req (whose id is set) without returning it. */
    void remove(Request* req) { (void)take(req->id | (std::uint64_t{gens_[slot(req->id)]} << 32)); }
    /** The request with @p id, left in the table, or nullptr. */
    Request* find(std::uint64_t id) const {
        const auto index = static_cast<std::uint32_t>(id);
        if (index == 0 || index > slots_.size() || gens_[slot(index)] != static_cast<std::uint32_t>(id >> 32)) {
            return nullptr;
        }
        return slots_[slot(index)];
    }
    /** The full id (with generation) the wire carries for @p req. */
    std::uint64_t wire_id(const Request* req) const {
        return req->id | (std::uint64_t{gens_[slot(req->id)]} << 32);
    }

private:
    static std::size_t slot(std::uint32_t id) { return id - 1; }
    std::vector<Request*> slots_;
    std::vector<std::uint32_t> gens_;
    std::vector<std::uint32_t> free_;
};

}  // namespace loom::ucp
