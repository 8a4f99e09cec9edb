/**
 * Active messages (the C API's loom_am_*): the application registers a handler per id
 * on a worker; a peer sends a header and data to that id. Small messages travel eager
 * (short, one bcopy, or fragments reassembled by the receiver), large ones by the tag
 * protocol's rendezvous machinery (RTS carrying the header, then GET or the AM
 * pipeline when the handler asks for the data). docs/protocols.md describes the wire.
 */
#pragma once

#include "loom/ucp_am.h"
#include "ucp/core/wire.h"
#include "ucp/core/worker.h"
#include "ucs/memory/mem_pool.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace loom::ucp {

/** Layout of loom_am_recv_param_t. */
struct AmRecvParam {
    std::uint64_t recv_attr;
    void* reply_ep;
};

/** Bits of AmRecvParam::recv_attr (the C API's LOOM_AM_RECV_ATTR_*). */
enum AmRecvAttr : std::uint64_t {
    kAmRecvAttrReplyEp = 1u << 0,
    kAmRecvAttrData = 1u << 16,
    kAmRecvAttrRndv = 1u << 17,
};

/** The application's handler: the C API's type, called through it (see SendCallback). */
using AmRecvCallback = loom_am_recv_callback_t;
static_assert(sizeof(AmRecvParam) == sizeof(loom_am_recv_param_t) &&
                  offsetof(AmRecvParam, reply_ep) == offsetof(loom_am_recv_param_t, reply_ep),
              "AmRecvParam is handed to the application as a loom_am_recv_param_t");

/** Handler flags (LOOM_AM_FLAG_*). */
enum AmHandlerFlags : std::uint32_t {
    kAmHandlerWholeMsg = 1u << 0,
    kAmHandlerPersistentData = 1u << 1,
};

/** Send flags (LOOM_AM_SEND_FLAG_*). */
enum AmSendFlags : std::uint32_t {
    kAmSendReply = 1u << 0,
    kAmSendEager = 1u << 1,
    kAmSendRndv = 1u << 2,
};

/** Largest application AM id: ids travel as 16 bits. */
inline constexpr unsigned kAmMaxUserId = 0xffff;

struct AmDataDesc;
struct AmRndvDesc;

/** The active-message family's slot in Worker::family_state (core/family.h). */
inline constexpr std::uint8_t kAmSlot = 1;

/** A worker's active-message state (Worker::family_state[kAmSlot]). */
class AmWorker {
public:
    /** A registered handler. */
    struct Handler {
        AmRecvCallback cb = nullptr;
        void* arg = nullptr;
        std::uint32_t flags = 0;
    };
    /** What the AM handlers of one iface get as their argument. */
    struct IfaceArg {
        Worker* worker;
        std::uint8_t iface;
    };
    /** Data an application kept (returned in_progress): ours (iface null) or the transport's descriptor. */
    struct Kept {
        uct::Iface* iface;
        void* desc;  ///< AmDataDesc*, or the transport's data pointer to release
        std::size_t length;
    };
    /** The eager data of the callback running now (for loom_am_recv_data_nbx and release inside it). */
    struct Current {
        void* data = nullptr;
        std::size_t length = 0;
        bool consumed = false;  ///< received or released during the callback: never kept
    };

    explicit AmWorker(Worker& w) : worker(w) {}

    Worker& worker;
    std::vector<Handler> handlers;              ///< by id
    std::vector<IfaceArg> iface_args;           ///< by iface index; never reallocated after registration
    std::unordered_set<unsigned> warned_ids;    ///< ids whose dropped messages were reported
    std::unordered_map<void*, Kept> kept;       ///< by the data pointer the handler got
    std::unordered_set<AmRndvDesc*> rndv;       ///< rendezvous descriptors not yet received or dropped
    ucs::MemPool small_pool;                    ///< AmDataDesc with up to kSmallData bytes
    Current current;
    bool warned_inprogress = false;

    static constexpr std::size_t kSmallData = 512;
};

/** @p w's active-message state, nullptr before the family's init. */
inline AmWorker* am_state(Worker& w) { return static_cast<AmWorker*>(w.family_state[kAmSlot]); }
/** @p w's active-message state (initialised). */
inline AmWorker& am_of(Worker& w) { return *am_state(w); }

/** The largest application header an active message on @p ep may carry (it travels in one bcopy). */
std::size_t am_max_header(const Ep* ep);

/** The active-message protocols (in the endpoint's protocol table, src/ucp/proto). */
extern const Proto kAmEagerShort, kAmEagerBcopy, kAmEagerMulti, kAmRndv;

/** The largest header every endpoint of @p w takes (its smallest AM bcopy). */
std::size_t am_worker_max_header(const Worker& w);

/** The 8-byte AmHdr of a message to @p id, as the header word of an am_short. */
inline std::uint64_t am_hdr_word(unsigned id, std::uint8_t wire_flags, std::size_t header_length) {
    const AmHdr hdr{static_cast<std::uint16_t>(id), wire_flags, 0, static_cast<std::uint32_t>(header_length)};
    std::uint64_t word;
    std::memcpy(&word, &hdr, sizeof(word));
    return word;
}

/** Sets (or with a null @p cb removes) the handler of @p id. no_memory, else ok. */
Status am_set_handler(Worker& w, unsigned id, std::uint32_t flags, AmRecvCallback cb, void* arg);

/**
 * Sends the message in one bcopy at once when it fits one and @p ep has nothing
 * queued: ok when sent, no_resource when the caller needs a request (too large, a
 * rendezvous, or the lane is busy), or the transport's error. @p dt stays started.
 */
Status am_send_try_now(Ep* ep, unsigned id, std::uint32_t flags, const void* header, std::size_t header_length,
                       DtState& dt);

/**
 * Starts the send of @p req (send.dt set): eager in one bcopy or in fragments, or a
 * rendezvous, by size and @p flags, run now or queued behind the endpoint's earlier
 * sends. The request completes itself; ok, or the error it completed with.
 */
Status am_send_start(Request* req, Ep* ep, unsigned id, std::uint32_t flags, const void* header,
                     std::size_t header_length);

/** What a data pointer given to loom_am_recv_data_nbx is. */
enum class AmDataKind : std::uint8_t { unknown, eager, rndv };

/** Whether @p data is a rendezvous descriptor, eager data of this worker's handlers, or unknown. */
AmDataKind am_data_kind(Worker& w, void* data);

/**
 * Copies eager data @p data (kept, or the running callback's) into @p dt and releases
 * it; @p length gets its length. ok, message_truncated (what fits is copied), or the
 * datatype's unpack error.
 */
Status am_recv_eager(Worker& w, void* data, DtState& dt, std::size_t& length);

/** Starts fetching rendezvous descriptor @p data into receive @p req (recv.dt set); the descriptor is consumed. */
void am_recv_rndv(Worker& w, void* data, Request* req);

/** loom_am_data_release: kept data is released, a rendezvous descriptor dropped (the send completes). */
void am_data_release(Worker& w, void* data);

}  // namespace loom::ucp
