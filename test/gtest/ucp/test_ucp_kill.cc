/**
 * kill -9 of a peer process at random points of every protocol (issue 17): eager short,
 * bcopy and multi-fragment, each rendezvous scheme, active-message rendezvous, streams,
 * RMA put and get, fetching atomics, an endpoint flush and an endpoint close, over shm and
 * tcp (and rc where test/rdma/run_rdma_tests.sh sets LOOMTEST_UCP_VERBS=1).
 *
 * The survivor keeps a window of operations outstanding while the peer serves them (or
 * it keeps receives posted while the peer sends), and the peer dies at a point drawn from
 * a seeded generator, in one of four ways:
 *   - peer-count:     the peer kills itself (SIGKILL) after a random number of its own
 *                     progress calls, counted from the survivor's first operation;
 *   - peer-step:      the peer kills itself right after its first step (its first sends
 *                     left, or its receives were posted), before progressing again;
 *   - survivor-count: the survivor kills it after a random number of its own progress calls;
 *   - survivor-delay: the survivor kills it after a random delay (microseconds).
 * Each case runs LOOMTEST_KILL_REPS times (3; 1 on rc), the modes rotating; every repetition prints
 * its mode and point, and LOOMTEST_KILL_SEED (default 1) changes every point
 * (LOOMTEST_KILL_POINT forces one).
 *
 * After the kill, every outstanding request of the survivor completes within a bound:
 * with an error, or with LOOM_OK and the right data when it completed before the peer
 * died. Tagged receives are the worker's (docs/reliability.md): the ones still posted
 * once the endpoint failed are cancelled and must then complete. The error handler runs
 * exactly once, a new operation on the endpoint fails at once, and the endpoint closes
 * and the worker is destroyed cleanly (the ASan build checks for leaks).
 */
#include "common/forked_peer.h"
#include "common/test_helpers.h"
#include "loom/ucp.h"
#include "ucp_side.h"

#include <gtest/gtest.h>

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

using loom::test::ForkedPeer;
using loom::test::verbs_tls;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kFeatures =
    LOOM_FEATURE_TAG | LOOM_FEATURE_RMA | LOOM_FEATURE_AMO64 | LOOM_FEATURE_STREAM | LOOM_FEATURE_AM;
constexpr int kBoundSeconds = 30;       ///< after the kill, everything must complete within this
constexpr int kPeerLifeSeconds = 60;    ///< a peer nobody killed gives up
/**
 * The survivor kills its peer after this much traffic at the latest, whatever the point:
 * a progress call that moves megabytes takes milliseconds on a loaded machine.
 */
constexpr auto kMaxTraffic = std::chrono::milliseconds(300);
constexpr loom_tag_t kTagBase = 1000;   ///< message seq goes with tag kTagBase + seq
constexpr unsigned kAmId = 1;
constexpr unsigned kSlots = 8;          ///< distinct send patterns: message seq uses pattern seq % kSlots
constexpr unsigned kRmaSeed = 99;       ///< the target's region holds pattern(size, kRmaSeed)

enum class Kind { Tag, Am, Stream, Put, Get, Atomic, Flush, Close };

struct Case {
    const char* name;
    Kind kind;
    bool survivor_sends;      ///< the survivor initiates; else the peer sends and the survivor receives
    std::size_t size;         ///< bytes per operation
    const char* scheme;       ///< LOOM_RNDV_SCHEME, or nullptr
    const char* rndv_thresh;  ///< LOOM_RNDV_THRESH, or nullptr
    unsigned window;          ///< operations the survivor keeps outstanding
    bool late_fetch = false;  ///< Am, survivor receives: keep the descriptors, fetch once the sender died
};

// clang-format off
const Case kCases[] = {
    {"EagerShortReceiverKilled",   Kind::Tag,    true,  8,         nullptr,     nullptr, 16},
    {"EagerShortSenderKilled",     Kind::Tag,    false, 8,         nullptr,     nullptr, 16},
    {"EagerBcopyReceiverKilled",   Kind::Tag,    true,  2000,      nullptr,     nullptr, 16},
    {"EagerBcopySenderKilled",     Kind::Tag,    false, 2000,      nullptr,     nullptr, 16},
    {"EagerMultiReceiverKilled",   Kind::Tag,    true,  200000,    nullptr,     "4m",    4},
    {"EagerMultiSenderKilled",     Kind::Tag,    false, 200000,    nullptr,     "4m",    4},
    {"RndvGetReceiverKilled",      Kind::Tag,    true,  1 << 20,   "get_zcopy", nullptr, 4},
    {"RndvGetSenderKilled",        Kind::Tag,    false, 1 << 20,   "get_zcopy", nullptr, 4},
    {"RndvPutReceiverKilled",      Kind::Tag,    true,  1 << 20,   "put_zcopy", nullptr, 4},
    {"RndvPutSenderKilled",        Kind::Tag,    false, 1 << 20,   "put_zcopy", nullptr, 4},
    {"RndvSplitReceiverKilled",    Kind::Tag,    true,  1 << 20,   "get_put",   nullptr, 4},
    {"RndvSplitSenderKilled",      Kind::Tag,    false, 1 << 20,   "get_put",   nullptr, 4},
    {"RndvAmPipelineReceiverKilled", Kind::Tag,  true,  1 << 20,   "am",        nullptr, 4},
    {"RndvAmPipelineSenderKilled", Kind::Tag,    false, 1 << 20,   "am",        nullptr, 4},
    {"AmRndvReceiverKilled",       Kind::Am,     true,  1 << 20,   nullptr,     nullptr, 4},
    {"AmRndvSenderKilled",         Kind::Am,     false, 1 << 20,   nullptr,     nullptr, 4},
    {"AmRndvSenderKilledBeforeFetch", Kind::Am,  false, 1 << 20,   nullptr,     nullptr, 4, true},
    {"StreamReceiverKilled",       Kind::Stream, true,  256 << 10, nullptr,     nullptr, 4},
    {"StreamSenderKilled",         Kind::Stream, false, 256 << 10, nullptr,     nullptr, 4},
    {"RmaPutTargetKilled",         Kind::Put,    true,  1 << 20,   nullptr,     nullptr, 4},
    {"RmaGetTargetKilled",         Kind::Get,    true,  1 << 20,   nullptr,     nullptr, 4},
    {"AtomicFetchTargetKilled",    Kind::Atomic, true,  8,         nullptr,     nullptr, 16},
    {"FlushTargetKilled",          Kind::Flush,  true,  1 << 20,   nullptr,     nullptr, 6},
    {"CloseReceiverKilled",        Kind::Close,  true,  1 << 20,   nullptr,     nullptr, 4},
};
// clang-format on

bool is_rma(Kind k) { return k == Kind::Put || k == Kind::Get || k == Kind::Atomic || k == Kind::Flush; }

enum class Mode { PeerCount, PeerStep, SurvivorCount, SurvivorDelay };

const char* mode_name(Mode m) {
    switch (m) {
        case Mode::PeerCount: return "peer-count";
        case Mode::PeerStep: return "peer-step";
        case Mode::SurvivorCount: return "survivor-count";
        default: return "survivor-delay";
    }
}

std::vector<char> pattern(std::size_t n, unsigned seed) {
    std::vector<char> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 13 + seed * 7 + 1) & 0xff);
    return v;
}

unsigned env_unsigned(const char* name, unsigned fallback) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? static_cast<unsigned>(std::strtoul(v, nullptr, 0)) : fallback;
}

/** FNV-1a: a hash that is the same in every build and run. */
std::uint64_t fnv(const std::string& s) {
    std::uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

/**
 * Shared between the two processes (an anonymous shared mapping made before the fork):
 * the survivor's progress, which the peer reads to count from the first operation and
 * to stay at most a few messages ahead of the survivor's receives.
 */
struct Shared {
    volatile std::uint64_t started;    ///< the survivor issued its first operation
    volatile std::uint64_t completed;  ///< operations the survivor saw complete
    volatile std::uint64_t received;   ///< messages the peer received (its receives completed)
};

struct Side : loom::test::UcpSide {
    bool open(const char* tls) { return UcpSide::open(tls, kFeatures); }
};

/** One message each way, so every connection is up before the case starts. */
bool warm_up(Side& me, bool first) {
    std::uint64_t out = 1, in = 0;
    for (bool sending : {first, !first}) {
        loom_status_t s = sending ? me.wait_with(loom_tag_send_nbx(me.ep, &out, sizeof(out), 1, nullptr),
                                                 loom_request_check_status, 30)
                                  : me.wait_with(loom_tag_recv_nbx(me.worker, &in, sizeof(in), 1, ~0ull, nullptr),
                                                 loom_request_check_status, 30);
        if (s != LOOM_OK) return false;
    }
    return in == 1;
}

// --- the peer --------------------------------------------------------------------------------

/** The peer's active-message handler: fetches every rendezvous into one of a ring of buffers. */
struct PeerAm {
    loom_worker_h worker = nullptr;
    Shared* shared = nullptr;
    std::vector<std::vector<char>> ring;
    unsigned next = 0;

    static loom_status_t cb(void* arg, const void*, size_t, void* data, size_t length, const loom_am_recv_param_t* param) {
        auto* self = static_cast<PeerAm*>(arg);
        if (!(param->recv_attr & LOOM_AM_RECV_ATTR_FLAG_RNDV)) return LOOM_OK;
        auto& buf = self->ring[self->next++ % self->ring.size()];
        buf.resize(length);
        loom_status_ptr_t r = loom_am_recv_data_nbx(self->worker, data, buf.data(), length, nullptr);
        if (LOOM_PTR_IS_PTR(r)) loom_request_free(r);  // goes on; the ring outlives the window
        self->shared->received = self->shared->received + 1;
        return LOOM_OK;
    }
};

/**
 * The peer: serves the survivor's operations (receives, or is the target of RMA), or
 * sends to it, until it is killed or kills itself (@p mode, @p point).
 */
int peer_main(ForkedPeer::Channel& ch, const char* tls, const Case& c, Mode mode, unsigned point, Shared* shared) {
    Side me;
    if (!me.open(tls)) return 10;
    PeerAm am;
    am.worker = me.worker;
    am.shared = shared;
    am.ring.resize(64);
    if (c.kind == Kind::Am) {
        loom_am_handler_param_t hp{};
        hp.field_mask = LOOM_AM_HANDLER_PARAM_FIELD_ID | LOOM_AM_HANDLER_PARAM_FIELD_CB | LOOM_AM_HANDLER_PARAM_FIELD_ARG;
        hp.id = kAmId;
        hp.cb = PeerAm::cb;
        hp.arg = &am;
        if (loom_worker_set_am_recv_handler(me.worker, &hp) != LOOM_OK) return 11;
    }
    if (!me.meet_parent(ch)) return 12;
    std::vector<char> region;
    if (is_rma(c.kind)) {
        // The target: a region holding pattern(size, kRmaSeed) (puts write the same bytes,
        // so a get that completes reads them whenever it ran), then a word for atomics.
        // Atomics get memory the transport allocated (shm atomics between processes need
        // it); puts and gets reach registered memory (shm: by CMA).
        const bool allocate = c.kind == Kind::Atomic;
        region.resize(allocate ? 0 : c.size + 64);
        loom_mem_map_params_t mp{};
        mp.field_mask = LOOM_MEM_MAP_PARAM_FIELD_ADDRESS | LOOM_MEM_MAP_PARAM_FIELD_LENGTH |
                        LOOM_MEM_MAP_PARAM_FIELD_FLAGS;
        mp.address = allocate ? nullptr : region.data();
        mp.length = c.size + 64;
        mp.flags = allocate ? LOOM_MEM_MAP_ALLOCATE : 0;
        loom_mem_h memh;
        if (loom_mem_map(me.ctx, &mp, &memh) != LOOM_OK) return 13;
        loom_mem_attr_t a{};
        a.field_mask = LOOM_MEM_ATTR_FIELD_ADDRESS;
        (void)loom_mem_query(memh, &a);
        auto* base = static_cast<char*>(a.address);
        auto fill = pattern(c.size, kRmaSeed);
        std::memcpy(base, fill.data(), c.size);
        std::memset(base + c.size, 0, 64);
        void* key;
        size_t key_len;
        if (loom_rkey_pack(me.ctx, memh, &key, &key_len) != LOOM_OK) return 14;
        std::uint64_t where = reinterpret_cast<std::uintptr_t>(base);
        ch.send(std::vector<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&where),
                                          reinterpret_cast<std::uint8_t*>(&where) + 8));
        ch.send(std::vector<std::uint8_t>(static_cast<std::uint8_t*>(key), static_cast<std::uint8_t*>(key) + key_len));
        loom_rkey_buffer_release(key);
    }
    if (!warm_up(me, false)) return 15;

    std::vector<std::vector<char>> sources;  // sends only read them: shared by sends in flight
    for (unsigned k = 0; k < kSlots; ++k) sources.push_back(pattern(c.size, k));
    std::vector<std::vector<char>> sinks(c.window * 2, std::vector<char>(c.size));
    std::deque<loom_status_ptr_t> inflight;
    std::vector<std::uint64_t> headers(4 * c.window);
    std::uint64_t seq = 0;
    std::size_t stream_length = 0;
    unsigned count = 0;
    const auto give_up = Clock::now() + std::chrono::seconds(kPeerLifeSeconds);
    while (Clock::now() < give_up) {
        // Retire what completed, in order (the window of this side).
        const bool receiver = c.survivor_sends && !is_rma(c.kind) && c.kind != Kind::Am;
        const bool sender = !c.survivor_sends;
        while (!inflight.empty() && loom_request_check_status(inflight.front()) != LOOM_INPROGRESS) {
            loom_request_free(inflight.front());
            inflight.pop_front();
            if (receiver) shared->received = shared->received + 1;
        }
        // Stay at most two windows ahead of what the survivor completed.
        while (inflight.size() < c.window &&
               (receiver || (sender && seq < shared->completed + 2 * c.window))) {
            loom_status_ptr_t r = nullptr;
            if (receiver && c.kind == Kind::Stream) {
                loom_request_param_t p{};
                p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
                p.flags = LOOM_STREAM_RECV_FLAG_WAITALL;
                r = loom_stream_recv_nbx(me.ep, sinks[seq % sinks.size()].data(), c.size, &stream_length, &p);
            } else if (receiver) {
                r = loom_tag_recv_nbx(me.worker, sinks[seq % sinks.size()].data(), c.size, 0, 0, nullptr);
            } else if (c.kind == Kind::Tag) {
                r = loom_tag_send_nbx(me.ep, sources[seq % kSlots].data(), c.size, kTagBase + seq, nullptr);
            } else if (c.kind == Kind::Am) {
                loom_request_param_t p{};
                p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
                p.flags = LOOM_AM_SEND_FLAG_RNDV;
                std::uint64_t& header = headers[seq % headers.size()];  // the caller's until the send completes
                header = seq;
                r = loom_am_send_nbx(me.ep, kAmId, &header, sizeof(header), sources[seq % kSlots].data(), c.size, &p);
            } else {
                r = loom_stream_send_nbx(me.ep, sources[seq % kSlots].data(), c.size, nullptr);
            }
            if (LOOM_PTR_IS_ERR(r)) return 16;
            if (LOOM_PTR_IS_PTR(r)) {
                inflight.push_back(r);
            } else if (receiver) {
                shared->received = shared->received + 1;
            }
            ++seq;
        }
        if (shared->started != 0) {
            if (mode == Mode::PeerStep || (mode == Mode::PeerCount && count >= point)) raise(SIGKILL);
            ++count;
        }
        loom_worker_progress(me.worker);
    }
    return 17;  // nobody killed us
}

// --- the survivor ----------------------------------------------------------------------------

/** One outstanding operation of the survivor. */
struct Op {
    loom_status_ptr_t req = nullptr;
    bool done = false;              ///< req completed (and was freed) with status
    loom_status_t status = LOOM_INPROGRESS;
    std::uint64_t seq = 0;
    bool receive = false;       ///< a tagged receive (cancellable once the endpoint failed)
    bool close = false;         ///< the endpoint's close
    std::unique_ptr<std::vector<char>> buf;  ///< received data (receives, gets)
    std::unique_ptr<std::uint64_t> reply;    ///< a fetching atomic's result
    std::unique_ptr<std::uint64_t> header;   ///< an active message's header (the seq), kept until it completes
};

class Survivor {
public:
    Survivor(const Case& c, Shared* shared) : c_(c), shared_(shared) {}

    Side me;
    std::deque<Op> ops;
    std::vector<Op> arrived;  ///< AM fetches started by the handler during progress
    std::uint64_t seq = 0;
    std::uint64_t remote = 0;
    loom_rkey_h rkey = nullptr;
    std::set<std::uint64_t> fetched;  ///< values returned by completed atomics
    int ok = 0, failed = 0, bad_data = 0;
    bool closing = false;
    loom_status_t close_status = LOOM_INPROGRESS;  ///< the close's, once complete

    static loom_status_t am_cb(void* arg, const void* header, size_t header_length, void* data, size_t length,
                               const loom_am_recv_param_t* param) {
        auto* self = static_cast<Survivor*>(arg);
        if (!(param->recv_attr & LOOM_AM_RECV_ATTR_FLAG_RNDV) || header_length != sizeof(std::uint64_t)) {
            ++self->bad_data;
            return LOOM_OK;
        }
        std::uint64_t seq;
        std::memcpy(&seq, header, sizeof(seq));
        if (self->c_.late_fetch) {
            self->kept.push_back({seq, data, length});
            return LOOM_INPROGRESS;
        }
        self->fetch(seq, data, length);
        return LOOM_OK;
    }

    /** Kept rendezvous descriptors: seq, descriptor, length. */
    struct Kept {
        std::uint64_t seq;
        void* desc;
        size_t length;
    };
    std::vector<Kept> kept;

    /** Fetches an active message's rendezvous data. */
    void fetch(std::uint64_t seq, void* data, size_t length) {
        Op op;
        op.seq = seq;
        op.buf = std::make_unique<std::vector<char>>(length);
        size_t got = 0;
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_RECV_INFO;
        p.recv_info.length = &got;
        op.req = loom_am_recv_data_nbx(me.worker, data, op.buf->data(), length, &p);
        arrived.push_back(std::move(op));
    }

    /** Issues one more operation of the case (an error status counts as its completion). */
    void issue() {
        Op op;
        op.seq = seq++;
        switch (c_.kind) {
            case Kind::Tag:
            case Kind::Close:
                if (c_.survivor_sends) {
                    op.req = loom_tag_send_nbx(me.ep, source(op.seq), c_.size, kTagBase + op.seq, nullptr);
                } else {
                    op.receive = true;
                    op.buf = std::make_unique<std::vector<char>>(c_.size);
                    op.req = loom_tag_recv_nbx(me.worker, op.buf->data(), c_.size, kTagBase + op.seq, ~0ull, nullptr);
                }
                break;
            case Kind::Am: {
                loom_request_param_t p{};
                p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
                p.flags = LOOM_AM_SEND_FLAG_RNDV;
                op.header = std::make_unique<std::uint64_t>(op.seq);
                op.req = loom_am_send_nbx(me.ep, kAmId, op.header.get(), sizeof(std::uint64_t), source(op.seq), c_.size,
                                          &p);
                break;
            }
            case Kind::Stream:
                if (c_.survivor_sends) {
                    op.req = loom_stream_send_nbx(me.ep, source(op.seq), c_.size, nullptr);
                } else {
                    op.buf = std::make_unique<std::vector<char>>(c_.size);
                    loom_request_param_t p{};
                    p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
                    p.flags = LOOM_STREAM_RECV_FLAG_WAITALL;
                    op.req = loom_stream_recv_nbx(me.ep, op.buf->data(), c_.size, &stream_length_, &p);
                }
                break;
            case Kind::Put:
                op.req = loom_put_nbx(me.ep, rma_source_.data(), c_.size, remote, rkey, nullptr);
                break;
            case Kind::Flush:
                // Two puts, then a flush of the endpoint.
                op.req = op.seq % 3 == 2 ? loom_ep_flush_nbx(me.ep, nullptr)
                                         : loom_put_nbx(me.ep, rma_source_.data(), c_.size, remote, rkey, nullptr);
                break;
            case Kind::Get:
                op.buf = std::make_unique<std::vector<char>>(c_.size);
                op.req = loom_get_nbx(me.ep, op.buf->data(), c_.size, remote, rkey, nullptr);
                break;
            case Kind::Atomic: {
                op.reply = std::make_unique<std::uint64_t>(~0ull);
                loom_request_param_t p{};
                p.op_attr_mask = LOOM_OP_ATTR_FIELD_DATATYPE | LOOM_OP_ATTR_FIELD_REPLY_BUFFER;
                p.datatype = loom_dt_make_contig(8);
                p.reply_buffer = op.reply.get();
                static const std::uint64_t one = 1;
                op.req = loom_atomic_op_nbx(me.ep, LOOM_ATOMIC_OP_ADD, &one, 1, remote + c_.size, rkey, &p);
                break;
            }
        }
        ops.push_back(std::move(op));
    }

    /** The endpoint's close, in flush mode (Kind::Close). */
    void close() {
        Op op;
        op.close = true;
        op.req = loom_ep_close_nbx(me.ep, nullptr);
        me.ep = nullptr;
        closing = true;
        ops.push_back(std::move(op));
    }

    /** Retires every completed operation (checking its data); returns the ones retired. */
    int reap() {
        for (Op& op : arrived) ops.push_back(std::move(op));
        arrived.clear();
        int n = 0;
        for (auto it = ops.begin(); it != ops.end();) {
            loom_status_t s = status_of(*it);
            if (s == LOOM_INPROGRESS) {
                ++it;
                continue;
            }
            account(*it, s);
            it = ops.erase(it);
            ++n;
        }
        return n;
    }

    void progress() {
        loom_worker_progress(me.worker);
        int n = reap();
        shared_->completed = shared_->completed + static_cast<std::uint64_t>(n);
    }

    bool ep_failed() const { return me.errors > 0 || failed > 0; }

    /** The operation's status; frees a request once it completed. */
    static loom_status_t status_of(Op& op) {
        if (op.done) return op.status;
        if (!LOOM_PTR_IS_PTR(op.req)) return LOOM_PTR_STATUS(op.req);
        loom_status_t s = loom_request_check_status(op.req);
        if (s != LOOM_INPROGRESS) {
            loom_request_free(op.req);
            op.done = true;
            op.status = s;
        }
        return s;
    }

    void account(const Op& op, loom_status_t s) {
        if (op.close) close_status = s;
        if (s != LOOM_OK) {
            ++failed;
            return;
        }
        ++ok;
        bool right = true;
        if (op.reply) {
            right = *op.reply < seq && fetched.insert(*op.reply).second;
        } else if (op.buf && c_.kind == Kind::Get) {
            right = *op.buf == pattern(c_.size, kRmaSeed);
        } else if (op.buf) {
            right = *op.buf == sources_[op.seq % kSlots];
        }
        if (!right) {
            ++bad_data;
            ADD_FAILURE() << c_.name << ": operation " << op.seq << " completed with LOOM_OK and wrong data";
        }
    }

    void init() {
        for (unsigned k = 0; k < kSlots; ++k) sources_.push_back(pattern(c_.size, k));
        rma_source_ = pattern(c_.size, kRmaSeed);
    }

    const char* source(std::uint64_t s) const { return sources_[s % kSlots].data(); }

private:
    const Case& c_;
    Shared* shared_;
    std::vector<std::vector<char>> sources_;
    std::vector<char> rma_source_;
    std::size_t stream_length_ = 0;
};

struct Param {
    const char* tls;
    const Case* c;
};

class UcpKillTest : public testing::TestWithParam<Param> {
protected:
    void run_once(unsigned rep, Mode mode, unsigned point);
};

void UcpKillTest::run_once(unsigned rep, Mode mode, unsigned point) {
    const char* tls = GetParam().tls;
    const Case& c = *GetParam().c;
    auto* shared = static_cast<Shared*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(MAP_FAILED, static_cast<void*>(shared));
    std::unique_ptr<Shared, void (*)(Shared*)> unmap(shared, [](Shared* s) { munmap(s, 4096); });
    shared->started = 0;
    shared->completed = 0;
    shared->received = 0;
    ForkedPeer peer([tls, &c, mode, point, shared](ForkedPeer::Channel& ch) {
        return peer_main(ch, tls, c, mode, point, shared);
    });
    int peer_exit = -1000;
    // Whatever happens below, the peer does not outlive the repetition.
    std::unique_ptr<ForkedPeer, void (*)(ForkedPeer*)> reaper(&peer, [](ForkedPeer* p) { p->kill(SIGKILL); });

    Survivor sv(c, shared);
    sv.init();
    Side& me = sv.me;
    ASSERT_TRUE(me.open(tls));
    if (c.kind == Kind::Am && !c.survivor_sends) {
        loom_am_handler_param_t hp{};
        hp.field_mask = LOOM_AM_HANDLER_PARAM_FIELD_ID | LOOM_AM_HANDLER_PARAM_FIELD_CB | LOOM_AM_HANDLER_PARAM_FIELD_ARG;
        hp.id = kAmId;
        hp.cb = Survivor::am_cb;
        hp.arg = &sv;
        ASSERT_EQ(LOOM_OK, loom_worker_set_am_recv_handler(me.worker, &hp));
    }
    ASSERT_TRUE(me.meet_child(peer.channel(), true)) << "no address from the peer, or no endpoint to it";
    if (is_rma(c.kind)) {
        auto where = peer.channel().recv();
        auto key = peer.channel().recv();
        ASSERT_TRUE(where && key) << "no region from the target; its exit " << peer.wait(std::chrono::milliseconds(1));
        std::memcpy(&sv.remote, where->data(), 8);
        ASSERT_EQ(LOOM_OK, loom_ep_rkey_unpack(me.ep, key->data(), key->size(), &sv.rkey));
    }
    ASSERT_TRUE(warm_up(me, true)) << "warm-up failed; peer exit " << peer.wait(std::chrono::milliseconds(1));

    // Run the protocol until the peer is dead.
    const auto start = Clock::now();
    const auto give_up = start + std::chrono::seconds(kBoundSeconds);
    const bool peer_kills_itself = mode == Mode::PeerCount || mode == Mode::PeerStep;
    unsigned count = 0;
    bool killed = false;
    for (;;) {
        if (c.kind == Kind::Close) {
            if (sv.seq == 0) {
                for (unsigned i = 0; i < c.window; ++i) sv.issue();
                sv.close();  // flush mode: waits for those sends
            }
        } else if (!sv.ep_failed() &&
                   (c.survivor_sends || c.kind != Kind::Am)) {  // AM receives: the handler's
            // Senders stay at most two windows ahead of the peer's receives, so that its
            // unexpected queue stays small (past LOOM_UNEXPECTED_MAX the protocol would change).
            const bool throttled = c.survivor_sends && !is_rma(c.kind);
            while (sv.ops.size() < c.window && (!throttled || sv.seq < shared->received + 2 * c.window)) sv.issue();
        }
        shared->started = 1;
        if (peer_kills_itself) {
            if ((count++ & 255) == 0 && (peer_exit = peer.wait(std::chrono::milliseconds(0))) != -1000) break;
        } else if ((mode == Mode::SurvivorCount ? count++ >= point
                                                : Clock::now() - start >= std::chrono::microseconds(point)) ||
                   Clock::now() - start >= kMaxTraffic) {
            peer.kill(SIGKILL);
            killed = true;
            break;
        }
        ASSERT_TRUE(Clock::now() < give_up) << "the peer did not die (" << mode_name(mode) << "); completed " << sv.ok;
        sv.progress();
    }
    if (killed) peer_exit = peer.wait();
    ASSERT_EQ(-SIGKILL, peer_exit) << "the peer failed on its own (its exit code) before the kill";

    // Everything outstanding completes; tagged receives still posted once the endpoint
    // failed are the worker's and are cancelled (a matched one must complete by itself).
    const auto bound = Clock::now() + std::chrono::seconds(kBoundSeconds);
    auto waiting = [&] {
        return std::count_if(sv.ops.begin(), sv.ops.end(), [](const Op& op) { return !op.receive; }) > 0 ||
               !sv.arrived.empty() || (!sv.closing && me.errors == 0);
    };
    while (waiting() && Clock::now() < bound) sv.progress();
    ASSERT_FALSE(waiting()) << c.name << ": " << sv.ops.size() << " operations still outstanding and "
                            << me.errors << " error handler calls " << kBoundSeconds
                            << " s after the peer died (a hang)";
    if (!sv.kept.empty()) {
        // Descriptors kept past the sender's death: their fetch fails (or has the data).
        for (const auto& k : sv.kept) sv.fetch(k.seq, k.desc, k.length);
        sv.kept.clear();
        while (waiting() && Clock::now() < bound) sv.progress();
        ASSERT_FALSE(waiting()) << c.name << ": " << sv.ops.size() << " fetches of kept descriptors hang";
    }
    for (int i = 0; i < 1000; ++i) sv.progress();
    for (Op& op : sv.ops) {
        if (!op.done && LOOM_PTR_IS_PTR(op.req)) loom_request_cancel(me.worker, op.req);
    }
    while (!sv.ops.empty() && Clock::now() < bound) sv.progress();
    ASSERT_TRUE(sv.ops.empty()) << c.name << ": " << sv.ops.size()
                                << " receives neither completed nor cancelled after the peer died (a hang)";
    EXPECT_EQ(0, sv.bad_data);
    if (sv.closing) {
        EXPECT_LE(me.errors, 1) << "the error handler runs at most once";
        // The close flushed the sends: it is ok only when they all were.
        if (sv.close_status == LOOM_OK) {
            EXPECT_EQ(0, sv.failed) << "the close reported ok after its sends failed";
        }
    } else {
        EXPECT_EQ(1, me.errors) << "the error handler must run exactly once";
        EXPECT_NE(LOOM_OK, me.last_error);
        // The endpoint stays failed: new operations fail at once.
        std::uint64_t word = 0;
        EXPECT_TRUE(LOOM_PTR_IS_ERR(loom_tag_send_nbx(me.ep, &word, sizeof(word), 7, nullptr)));
        loom_status_ptr_t again = nullptr;
        switch (c.kind) {
            case Kind::Am:
                again = loom_am_send_nbx(me.ep, kAmId, &word, sizeof(word), &word, sizeof(word), nullptr);
                break;
            case Kind::Stream:
                again = loom_stream_send_nbx(me.ep, &word, sizeof(word), nullptr);
                break;
            case Kind::Put:
            case Kind::Flush:
            case Kind::Get:
            case Kind::Atomic:
                again = loom_put_nbx(me.ep, &word, sizeof(word), sv.remote, sv.rkey, nullptr);
                break;
            default:
                again = loom_tag_send_nbx(me.ep, &word, sizeof(word), 8, nullptr);
                break;
        }
        EXPECT_TRUE(LOOM_PTR_IS_ERR(again)) << "a new operation on the failed endpoint did not fail at once";
        if (LOOM_PTR_IS_PTR(again)) (void)me.wait_with(again, loom_request_check_status, kBoundSeconds);
        if (sv.rkey != nullptr) loom_rkey_destroy(sv.rkey);
        sv.rkey = nullptr;
        // A close in flush mode of the failed endpoint completes too.
        loom_status_ptr_t closed = loom_ep_close_nbx(me.ep, nullptr);
        me.ep = nullptr;
        loom_status_t s = me.wait_with(closed, loom_request_check_status, kBoundSeconds);
        EXPECT_NE(LOOM_ERR_TIMED_OUT, s) << "closing the failed endpoint hung";
    }
    if (sv.rkey != nullptr) loom_rkey_destroy(sv.rkey);
    printf("[ KILL     ] %s/%s rep %u: %s at %u: %d ok, %d failed, error handler %d (%s)%s%s\n", tls, c.name,
           rep, mode_name(mode), point, sv.ok, sv.failed, me.errors, loom_status_string(me.last_error),
           sv.closing ? "; close: " : "", sv.closing ? loom_status_string(sv.close_status) : "");
    // The worker and context go with sv.me (destroyed cleanly; ASan checks what is left).
}

TEST_P(UcpKillTest, EveryRequestCompletes) {
    const Case& c = *GetParam().c;
    const unsigned base = env_unsigned("LOOMTEST_KILL_SEED", 1);
    // rc runs in an emulated VM, on three device setups: one repetition each there.
    const bool rc = std::string(GetParam().tls).rfind("rc", 0) == 0;
    const unsigned reps = env_unsigned("LOOMTEST_KILL_REPS", rc ? 1 : 3);
    std::vector<std::unique_ptr<loom::test::ScopedEnv>> env;
    if (c.scheme != nullptr) env.push_back(std::make_unique<loom::test::ScopedEnv>("LOOM_RNDV_SCHEME", c.scheme));
    if (c.rndv_thresh != nullptr) {
        env.push_back(std::make_unique<loom::test::ScopedEnv>("LOOM_RNDV_THRESH", c.rndv_thresh));
    }
    const std::uint64_t key = fnv(std::string(GetParam().tls) + "/" + c.name);
    for (unsigned rep = 0; rep < reps; ++rep) {
        std::mt19937_64 rng(key ^ (std::uint64_t{base} << 32) ^ rep);
        const Mode mode = static_cast<Mode>((key + rep) % 4);
        // Points spread over a few milliseconds of traffic: many messages of every case.
        const unsigned drawn = mode == Mode::SurvivorDelay ? static_cast<unsigned>(rng() % 10000)  // us
                               : mode == Mode::PeerStep
                                   ? 0
                                   : static_cast<unsigned>(rng() % 1000);  // progress calls
        // LOOMTEST_KILL_POINT replaces the drawn point (to reproduce or to probe one).
        const unsigned point = env_unsigned("LOOMTEST_KILL_POINT", drawn);
        SCOPED_TRACE(testing::Message() << "rep " << rep << ", " << mode_name(mode) << " at " << point
                                        << " (LOOMTEST_KILL_SEED=" << base << ")");
        run_once(rep, mode, point);
        if (HasFatalFailure()) return;
    }
}

class UcpKillCloseTest : public testing::TestWithParam<const char*> {};

/**
 * A close in flush mode whose flush the peer's death ends reports the failure, as the
 * flush issued just before it does, not LOOM_OK (docs/reliability.md: every send, flush
 * and close request of a failed endpoint completes with the failure's status). Found by
 * this file: Worker::check_flushes overwrote the failure with ok for a close (b3f5d7b).
 */
TEST_P(UcpKillCloseTest, CloseWhoseFlushThePeersDeathEndsReportsTheFailure) {
    const char* tls = GetParam();
    ForkedPeer peer([tls](ForkedPeer::Channel& ch) {
        Side me;
        if (!me.open(tls) || !me.meet_parent(ch) || !warm_up(me, false)) return 1;
        me.progress_until([] { return false; }, kPeerLifeSeconds);  // receives nothing; killed meanwhile
        return 2;
    });
    Side me;
    ASSERT_TRUE(me.open(tls));
    ASSERT_TRUE(me.meet_child(peer.channel(), true));
    ASSERT_TRUE(warm_up(me, true));
    auto data = pattern(1 << 20, 1);
    loom_status_ptr_t send = loom_tag_send_nbx(me.ep, data.data(), data.size(), 5, nullptr);  // rendezvous
    loom_status_ptr_t flush = loom_ep_flush_nbx(me.ep, nullptr);
    loom_status_ptr_t close = loom_ep_close_nbx(me.ep, nullptr);
    me.ep = nullptr;
    ASSERT_TRUE(LOOM_PTR_IS_PTR(send) && LOOM_PTR_IS_PTR(flush) && LOOM_PTR_IS_PTR(close))
        << "nobody received the send: it, the flush and the close must wait";
    peer.kill(SIGKILL);
    EXPECT_EQ(-SIGKILL, peer.wait());
    loom_status_t s = me.wait_with(send, loom_request_check_status, kBoundSeconds);
    loom_status_t f = me.wait_with(flush, loom_request_check_status, kBoundSeconds);
    loom_status_t c = me.wait_with(close, loom_request_check_status, kBoundSeconds);
    EXPECT_NE(LOOM_OK, s);
    EXPECT_NE(LOOM_ERR_TIMED_OUT, s);
    EXPECT_NE(LOOM_OK, f) << "the flush waited for a send that failed";
    EXPECT_NE(LOOM_ERR_TIMED_OUT, f);
    EXPECT_NE(LOOM_OK, c) << "the close's flush waited for a send that failed: " << loom_status_string(c);
    EXPECT_NE(LOOM_ERR_TIMED_OUT, c);
}

INSTANTIATE_TEST_SUITE_P(Tls, UcpKillCloseTest, testing::Values("shm", "tcp"),
                         [](const testing::TestParamInfo<const char*>& info) {
                             return std::string(info.param);
                         });

class UcpKillGetTest : public testing::TestWithParam<const char*> {};

/**
 * A rendezvous receive that GETs from a sender already dead completes with an error. With
 * rc wired up over tcp, the death shows on the tcp lane, and a GET posted on the rc lane
 * before that was noticed went to a queue pair that no longer exists: it waited for rc's
 * retries, which had not given up 30 s later under Soft-RoCE (the CI run of 45c9b67:
 * Verbs/UcpKillTest.EveryRequestCompletes/rc_tcp_aux_AmRndvSenderKilled). A failed
 * endpoint now cancels what its lanes have in flight. Here the survivor sees the RTS,
 * kills the sender, and only then receives, without progressing in between.
 */
TEST_P(UcpKillGetTest, AReceiveThatGetsFromADeadSenderCompletes) {
    const char* tls = GetParam();
    static constexpr std::size_t kLength = std::size_t{4} << 20;
    loom::test::ScopedEnv scheme("LOOM_RNDV_SCHEME", "get_zcopy");
    ForkedPeer peer([tls](ForkedPeer::Channel& ch) {
        Side me;
        if (!me.open(tls) || !me.meet_parent(ch) || !warm_up(me, false)) return 1;
        std::vector<unsigned char> data(kLength, 0x5a);
        loom_status_ptr_t send = loom_tag_send_nbx(me.ep, data.data(), data.size(), 9, nullptr);
        if (LOOM_PTR_IS_ERR(send)) return 3;
        me.progress_until([] { return false; }, kPeerLifeSeconds);  // killed meanwhile
        return 2;
    });
    Side me;
    ASSERT_TRUE(me.open(tls));
    ASSERT_TRUE(me.meet_child(peer.channel(), true));
    ASSERT_TRUE(warm_up(me, true));
    loom_tag_recv_info_t info{};
    ASSERT_TRUE(me.progress_until([&] { return loom_tag_probe_nb(me.worker, 9, ~0ull, 0, &info) != nullptr; },
                                  kBoundSeconds))
        << "no RTS from the peer";
    peer.kill(SIGKILL);
    ASSERT_EQ(-SIGKILL, peer.wait());
    std::vector<unsigned char> buf(kLength, 0);
    loom_status_ptr_t recv = loom_tag_recv_nbx(me.worker, buf.data(), buf.size(), 9, ~0ull, nullptr);
    const loom_status_t s = me.wait_with(recv, loom_request_check_status, kBoundSeconds);
    ASSERT_NE(LOOM_ERR_TIMED_OUT, s) << "the receive still waits for its GET " << kBoundSeconds
                                     << " s after the sender died (a hang)";
    EXPECT_NE(LOOM_OK, s) << "a GET from a dead process succeeded";
    EXPECT_TRUE(me.progress_until([&] { return me.errors != 0; }, kBoundSeconds));
    EXPECT_EQ(1, me.errors) << "the error handler must run once";
    printf("[ KILL     ] %s: the receive: %s; error handler: %s\n", tls, loom_status_string(s),
           loom_status_string(me.last_error));
}

INSTANTIATE_TEST_SUITE_P(Tls, UcpKillGetTest, testing::Values("tcp"),
                         [](const testing::TestParamInfo<const char*>& info) {
                             return std::string(info.param);
                         });

std::vector<Param> params(const std::vector<const char*>& tls) {
    std::vector<Param> out;
    for (const char* t : tls) {
        for (const Case& c : kCases) out.push_back({t, &c});
    }
    return out;
}

std::string param_name(const testing::TestParamInfo<Param>& info) {
    return loom::test::tls_name(info.param.tls) + "_" + info.param.c->name;
}

INSTANTIATE_TEST_SUITE_P(Tls, UcpKillTest, testing::ValuesIn(params({"shm", "tcp"})), param_name);

INSTANTIATE_TEST_SUITE_P(Verbs, UcpKillTest, testing::ValuesIn(params(verbs_tls())), param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(UcpKillTest);
INSTANTIATE_TEST_SUITE_P(Verbs, UcpKillGetTest, testing::ValuesIn(verbs_tls()),
                         [](const testing::TestParamInfo<const char*>& info) {
                             return loom::test::tls_name(info.param);
                         });

}  // namespace
