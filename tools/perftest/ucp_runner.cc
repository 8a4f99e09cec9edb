/**
 * Protocol-layer tests of loom_perftest, with ucx_perftest's names and semantics:
 *
 *   tag_lat       ping-pong of tagged messages; one-way latency = round trip / 2
 *   tag_sync_lat  the same with loom_tag_send_sync_nbx (completes once matched)
 *   tag_bw        the client streams tagged messages keeping up to -O sends in flight
 *                 (default 32, ucx_perftest's window for tag_bw); the server keeps as
 *                 many receives posted and acknowledges the last message, and the
 *                 client's clock stops at that acknowledgement, so the time covers
 *                 delivery.
 *   ucp_am_lat    ping-pong of active messages (no header, ucx_perftest's -H 0); the
 *                 handler uses eager data in place and fetches rendezvous data into a
 *                 buffer, as ucx_perftest's does; a message counts once its data is in
 *   ucp_am_bw     the client sends active messages with up to -O in flight; the server
 *                 answers the last one with an acknowledgement, as for tag_bw
 *   stream_lat    ping-pong on the endpoint's stream: -s bytes each way, received whole
 *                 (LOOM_STREAM_RECV_FLAG_WAITALL)
 *   stream_bw     the client streams -s byte sends with up to -O in flight; the server
 *                 keeps as many whole-message receives posted and acknowledges the end
 *
 * Only the public C API (include/loom/ucp.h) is used: this is what an MPI library sees.
 * Transports come from LOOM_TLS, as UCX_TLS for ucx_perftest; the client's -x, when
 * given, replaces LOOM_TLS in both processes. -d is ignored (LOOM_NET_DEVICES selects
 * devices).
 *
 * The hot loops do not allocate: operations are issued with a NULL parameter (NULL back
 * means completed at once), a returned request is waited for (progress until its status
 * is no longer LOOM_INPROGRESS) and freed; tag_bw keeps its in-flight requests in
 * arrays sized once. Every wait gives up after 60 s in which the worker made no progress.
 */
#include "perftest.h"
#include "ucp_session.h"

#include <loom/ucp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace loom::perftest {

namespace {

constexpr loom_tag_t kTagPing = 0x1337a880u;  ///< client -> server data (ucx_perftest's tag)
constexpr loom_tag_t kTagPong = 0x1337a881u;  ///< server -> client (latency tests)
constexpr loom_tag_t kTagAck = 0x1337a882u;   ///< server -> client: tag_bw received everything
constexpr loom_tag_t kFullMask = ~loom_tag_t{0};
constexpr std::uint32_t kDefaultBwOutstanding = 32;

/** A buffer aligned to a page; never empty, so a zero-size message has a valid pointer. */
struct Buffer {
    std::uint8_t* data = nullptr;
    explicit Buffer(std::size_t size) {
        void* p = nullptr;
        if (::posix_memalign(&p, 4096, size < 64 ? 64 : size) == 0) {
            data = static_cast<std::uint8_t*>(p);
            std::memset(data, 0xab, size < 64 ? 64 : size);
        }
    }
    ~Buffer() { std::free(data); }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
};

/** The session, with the tagged send and receive the tag tests use. */
class Ucp : public UcpSession {
public:
    explicit Ucp(const Params& params) : UcpSession(params) {}

    /** The context with the feature the test needs (tag, am or stream), and the worker. */
    Status open() {
        std::uint64_t features = LOOM_FEATURE_TAG;
        if (params_.test == TestKind::ucp_am_lat || params_.test == TestKind::ucp_am_bw) features = LOOM_FEATURE_AM;
        if (params_.test == TestKind::stream_lat || params_.test == TestKind::stream_bw) {
            features = LOOM_FEATURE_STREAM;
        }
        return UcpSession::open(features);
    }

    /** True when @p r (from an _nbx call) is no longer running; error statuses count as done. */
    static bool done(loom_status_ptr_t r) {
        return !LOOM_PTR_IS_PTR(r) || loom_request_check_status(r) != LOOM_INPROGRESS;
    }

    /** The final status of a done @p r, releasing it. */
    static loom_status_t finish(loom_status_ptr_t r) {
        if (!LOOM_PTR_IS_PTR(r)) return LOOM_PTR_STATUS(r);
        loom_status_t s = loom_request_check_status(r);
        loom_request_free(r);
        return s;
    }

    /** A tagged send (synchronous when @p sync) to the peer. */
    loom_status_ptr_t send(const void* buffer, std::size_t length, loom_tag_t tag, bool sync) {
        return sync ? loom_tag_send_sync_nbx(ep(), buffer, length, tag, nullptr)
                    : loom_tag_send_nbx(ep(), buffer, length, tag, nullptr);
    }

    /** A receive of @p tag exactly. */
    loom_status_ptr_t recv(void* buffer, std::size_t length, loom_tag_t tag) {
        return loom_tag_recv_nbx(worker(), buffer, length, tag, kFullMask, nullptr);
    }
};

// --- latency ---------------------------------------------------------------------------------

/**
 * The server's half of a ping-pong: @p posted is the receive posted for this ping; the
 * receive of the next ping is posted before the pong is sent.
 */
Status pong(Ucp& ucp, const Params& params, Buffer& rbuf, Buffer& sbuf, loom_status_ptr_t& posted,
            bool post_next) {
    const bool sync = params.test == TestKind::tag_sync_lat;
    if (loom_status_t s = ucp.wait(posted); s != LOOM_OK) return fail_wait(params, "receive of the ping", s);
    posted = nullptr;
    if (post_next) {
        posted = ucp.recv(rbuf.data, params.size, kTagPing);
        if (LOOM_PTR_IS_ERR(posted)) return fail(params, "loom_tag_recv_nbx", LOOM_PTR_STATUS(posted));
    }
    if (loom_status_t s = ucp.wait(ucp.send(sbuf.data, params.size, kTagPong, sync)); s != LOOM_OK) {
        return fail_wait(params, sync ? "loom_tag_send_sync_nbx (pong)" : "loom_tag_send_nbx (pong)", s);
    }
    return Status::ok;
}

/** Client (and loopback): @p total ping-pongs, the last params.iters measured. */
Status run_latency_client(Ucp& ucp, const Params& params, bool loopback, const OutputOptions& out,
                          Report& report) {
    const std::uint64_t total = params.warmup + params.iters;
    const bool sync = params.test == TestKind::tag_sync_lat;
    Buffer sbuf(params.size), rbuf(params.size), peer_sbuf(loopback ? params.size : 0),
        peer_rbuf(loopback ? params.size : 0);
    if (!sbuf.data || !rbuf.data || !peer_sbuf.data || !peer_rbuf.data) return fail(params, "malloc", LOOM_ERR_NO_MEMORY);
    loom_status_ptr_t peer_posted = nullptr;
    if (loopback) {
        peer_posted = ucp.recv(peer_rbuf.data, params.size, kTagPing);
        if (LOOM_PTR_IS_ERR(peer_posted)) return fail(params, "loom_tag_recv_nbx", LOOM_PTR_STATUS(peer_posted));
    }
    std::unique_ptr<Meter> meter;
    for (std::uint64_t i = 0; i < total; ++i) {
        if (i == params.warmup) meter = std::make_unique<Meter>(params, out, true);
        ucs::Ticks t0 = ucs::get_time();
        // The receive of the pong is posted before the ping leaves, as ucx_perftest does.
        loom_status_ptr_t r = ucp.recv(rbuf.data, params.size, kTagPong);
        if (LOOM_PTR_IS_ERR(r)) return fail(params, "loom_tag_recv_nbx", LOOM_PTR_STATUS(r));
        loom_status_ptr_t s = ucp.send(sbuf.data, params.size, kTagPing, sync);
        if (LOOM_PTR_IS_ERR(s)) {
            (void)Ucp::finish(r);
            return fail(params, sync ? "loom_tag_send_sync_nbx" : "loom_tag_send_nbx", LOOM_PTR_STATUS(s));
        }
        if (loopback) {
            if (Status st = pong(ucp, params, peer_rbuf, peer_sbuf, peer_posted, i + 1 < total); st != Status::ok) {
                return st;
            }
        }
        if (loom_status_t st = ucp.wait(s); st != LOOM_OK) {
            (void)Ucp::finish(r);
            return fail_wait(params, sync ? "loom_tag_send_sync_nbx" : "loom_tag_send_nbx", st);
        }
        if (loom_status_t st = ucp.wait(r); st != LOOM_OK) return fail_wait(params, "receive of the pong", st);
        if (meter) {
            ucs::Ticks now = ucs::get_time();
            meter->sample(i - params.warmup, now, now - t0);
        }
    }
    if (meter) meter->finish(params.iters, report);
    return Status::ok;
}

Status run_latency_server(Ucp& ucp, const Params& params) {
    const std::uint64_t total = params.warmup + params.iters;
    Buffer sbuf(params.size), rbuf(params.size);
    if (!sbuf.data || !rbuf.data) return fail(params, "malloc", LOOM_ERR_NO_MEMORY);
    loom_status_ptr_t posted = ucp.recv(rbuf.data, params.size, kTagPing);
    if (LOOM_PTR_IS_ERR(posted)) return fail(params, "loom_tag_recv_nbx", LOOM_PTR_STATUS(posted));
    for (std::uint64_t i = 0; i < total; ++i) {
        if (Status s = pong(ucp, params, rbuf, sbuf, posted, i + 1 < total); s != Status::ok) return s;
    }
    return Status::ok;
}

// --- bandwidth -------------------------------------------------------------------------------

/**
 * The receiving side of tag_bw: keeps up to `window` receives posted (all into one
 * buffer: only the bandwidth is measured, as ucx_perftest does) and sends the
 * acknowledgement once all @p total messages arrived. step() never blocks, so the
 * loopback client can call it from its waits.
 */
class BwReceiver {
public:
    BwReceiver(Ucp& ucp, const Params& params, std::uint32_t window)
        : ucp_(ucp), params_(params), total_(params.warmup + params.iters), rbuf_(params.size),
          posted_(window, nullptr) {}

    ~BwReceiver() {
        for (loom_status_ptr_t& r : posted_) {
            if (LOOM_PTR_IS_PTR(r)) loom_request_free(r);
        }
        if (LOOM_PTR_IS_PTR(ack_)) loom_request_free(ack_);
    }

    loom_status_t start() {
        if (rbuf_.data == nullptr) return LOOM_ERR_NO_MEMORY;
        while (posted_count_ < total_ && posted_count_ < posted_.size()) {
            if (loom_status_t s = post(); s != LOOM_OK) return s;
        }
        return LOOM_OK;
    }

    /** Takes the receives that completed, in order, reposting; sends the ack at the end. */
    loom_status_t step() {
        while (received_ < posted_count_) {
            loom_status_ptr_t& r = posted_[received_ % posted_.size()];
            if (!Ucp::done(r)) return LOOM_OK;
            if (loom_status_t s = Ucp::finish(r); s != LOOM_OK) {
                r = nullptr;
                what_ = "receive";
                return s;
            }
            r = nullptr;
            ++received_;
            if (posted_count_ < total_) {
                if (loom_status_t s = post(); s != LOOM_OK) return s;
            }
        }
        if (received_ == total_ && !ack_sent_) {
            ack_sent_ = true;
            ack_ = ucp_.send(&total_, sizeof(total_), kTagAck, false);
            if (LOOM_PTR_IS_ERR(ack_)) {
                what_ = "loom_tag_send_nbx (ack)";
                return LOOM_PTR_STATUS(ack_);
            }
        }
        return LOOM_OK;
    }

    bool all_received() const { return received_ == total_; }
    bool finished() const { return ack_sent_ && Ucp::done(ack_); }
    loom_status_t ack_status() {
        loom_status_t s = Ucp::finish(ack_);
        ack_ = nullptr;
        return s;
    }
    const char* what() const { return what_; }

private:
    loom_status_t post() {
        loom_status_ptr_t r = ucp_.recv(rbuf_.data, params_.size, kTagPing);
        if (LOOM_PTR_IS_ERR(r)) {
            what_ = "loom_tag_recv_nbx";
            return LOOM_PTR_STATUS(r);
        }
        posted_[posted_count_ % posted_.size()] = r;
        ++posted_count_;
        return LOOM_OK;
    }

    Ucp& ucp_;
    const Params& params_;
    std::uint64_t total_;
    Buffer rbuf_;
    std::vector<loom_status_ptr_t> posted_;
    std::uint64_t posted_count_ = 0;
    std::uint64_t received_ = 0;
    bool ack_sent_ = false;
    loom_status_ptr_t ack_ = nullptr;
    const char* what_ = "";
};

std::uint32_t bw_window(const Params& params) {
    return params.outstanding ? params.outstanding : kDefaultBwOutstanding;
}

Status run_bw_client(Ucp& ucp, const Params& params, bool loopback, const OutputOptions& out, Report& report) {
    const std::uint64_t total = params.warmup + params.iters;
    const std::uint32_t window = bw_window(params);
    Buffer sbuf(params.size);
    std::uint64_t ack_value = 0;
    if (!sbuf.data) return fail(params, "malloc", LOOM_ERR_NO_MEMORY);
    std::unique_ptr<BwReceiver> receiver;
    if (loopback) {
        receiver = std::make_unique<BwReceiver>(ucp, params, window);
        if (loom_status_t s = receiver->start(); s != LOOM_OK) return fail(params, receiver->what(), s);
    }
    auto hook = [&]() -> loom_status_t { return receiver ? receiver->step() : LOOM_OK; };
    auto hook_failed = [&](loom_status_t s, const char* what) {
        return fail_wait(params, receiver && *receiver->what() ? receiver->what() : what, s);
    };

    // The acknowledgement's receive is posted first: it may arrive before the last send completes.
    loom_status_ptr_t ack = ucp.recv(&ack_value, sizeof(ack_value), kTagAck);
    if (LOOM_PTR_IS_ERR(ack)) return fail(params, "loom_tag_recv_nbx (ack)", LOOM_PTR_STATUS(ack));
    std::vector<loom_status_ptr_t> inflight(window, nullptr);
    auto drop_all = [&] {
        for (loom_status_ptr_t& r : inflight) {
            if (LOOM_PTR_IS_PTR(r)) loom_request_free(r);
            r = nullptr;
        }
        if (LOOM_PTR_IS_PTR(ack)) loom_request_free(ack);
    };
    std::unique_ptr<Meter> meter;
    for (std::uint64_t i = 0; i < total; ++i) {
        if (i == params.warmup) {
            // The warm-up ends before the clock starts (as ucx_perftest's, which runs apart).
            if (loom_status_t s = ucp.wait_all(inflight, hook); s != LOOM_OK) {
                drop_all();
                return hook_failed(s, "loom_tag_send_nbx");
            }
            meter = std::make_unique<Meter>(params, out, false);
        }
        loom_status_ptr_t& slot = inflight[i % window];
        if (slot != nullptr) {  // the send `window` messages ago: wait until it left
            loom_status_t s = ucp.wait(slot, hook);
            slot = nullptr;
            if (s != LOOM_OK) {
                drop_all();
                return hook_failed(s, "loom_tag_send_nbx");
            }
        }
        slot = ucp.send(sbuf.data, params.size, kTagPing, false);
        if (LOOM_PTR_IS_ERR(slot)) {
            loom_status_t s = LOOM_PTR_STATUS(slot);
            slot = nullptr;
            drop_all();
            return fail(params, "loom_tag_send_nbx", s);
        }
        if (receiver) {
            if (loom_status_t s = receiver->step(); s != LOOM_OK) {
                drop_all();
                return fail(params, receiver->what(), s);
            }
        }
        if (meter) {
            ucs::Ticks now = ucs::get_time();
            meter->sample(i - params.warmup, now, 0);
        }
    }
    if (loom_status_t s = ucp.wait_all(inflight, hook); s != LOOM_OK) {
        drop_all();
        return hook_failed(s, "loom_tag_send_nbx");
    }
    loom_status_t s = ucp.wait(ack, hook);
    ack = nullptr;
    if (s != LOOM_OK) return hook_failed(s, "receive of the acknowledgement");
    if (meter) meter->finish(params.iters, report);
    if (receiver) {
        if (loom_status_t st = ucp.progress_until([&] { return receiver->finished(); }, hook); st != LOOM_OK) {
            return hook_failed(st, "loom_tag_send_nbx (ack)");
        }
        if (loom_status_t st = receiver->ack_status(); st != LOOM_OK) return fail(params, "loom_tag_send_nbx (ack)", st);
    }
    return Status::ok;
}

Status run_bw_server(Ucp& ucp, const Params& params) {
    BwReceiver receiver(ucp, params, bw_window(params));
    if (loom_status_t s = receiver.start(); s != LOOM_OK) return fail(params, receiver.what(), s);
    loom_status_t s = ucp.progress_until([&] { return receiver.finished(); }, [&] { return receiver.step(); });
    if (s != LOOM_OK) {
        return fail_wait(params, *receiver.what() ? receiver.what() : "receive of the stream", s);
    }
    if (loom_status_t st = receiver.ack_status(); st != LOOM_OK) return fail(params, "loom_tag_send_nbx (ack)", st);
    return Status::ok;
}

Status run_am_stream(Ucp& ucp, const Params& params, Role role, const OutputOptions& out, Report& report);

Status run(Ucp& ucp, const Params& params, Role role, const OutputOptions& out, Report& report) {
    if (params.test == TestKind::ucp_am_lat || params.test == TestKind::ucp_am_bw ||
        params.test == TestKind::stream_lat || params.test == TestKind::stream_bw) {
        return run_am_stream(ucp, params, role, out, report);
    }
    const bool bw = params.test == TestKind::tag_bw;
    if (role == Role::server) return bw ? run_bw_server(ucp, params) : run_latency_server(ucp, params);
    print_header(out, params);
    const bool loopback = role == Role::loopback;
    return bw ? run_bw_client(ucp, params, loopback, out, report)
              : run_latency_client(ucp, params, loopback, out, report);
}

// --- active messages and streams ---------------------------------------------------------

constexpr unsigned kAmPing = 0x37;  ///< client -> server data
constexpr unsigned kAmPong = 0x38;  ///< server -> client (ucp_am_lat)
constexpr unsigned kAmAck = 0x39;   ///< server -> client: ucp_am_bw received everything

/**
 * The handler of one active-message id: counts messages whose data is in. Eager data is
 * used in place; rendezvous data is fetched into @p buffer, counted when it arrived
 * (ucx_perftest's handler does the same).
 */
struct AmCounter {
    loom_worker_h worker = nullptr;
    std::uint8_t* buffer = nullptr;
    std::size_t size = 0;
    std::uint64_t arrived = 0;
    loom_status_t error = LOOM_OK;

    static loom_status_t cb(void* arg, const void*, size_t, void* data, size_t length,
                            const loom_am_recv_param_t* param) {
        auto* self = static_cast<AmCounter*>(arg);
        if (!(param->recv_attr & LOOM_AM_RECV_ATTR_FLAG_RNDV)) {
            ++self->arrived;
            return LOOM_OK;
        }
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_CALLBACK | LOOM_OP_ATTR_FIELD_USER_DATA;
        p.cb.am = [](void* request, loom_status_t status, size_t, void* user_data) {
            auto* counter = static_cast<AmCounter*>(user_data);
            if (status == LOOM_OK) {
                ++counter->arrived;
            } else {
                counter->error = status;
            }
            loom_request_free(request);
        };
        p.user_data = self;
        loom_status_ptr_t r =
            loom_am_recv_data_nbx(self->worker, data, self->buffer, length < self->size ? length : self->size, &p);
        if (r == nullptr) {
            ++self->arrived;
        } else if (LOOM_PTR_IS_ERR(r)) {
            self->error = LOOM_PTR_STATUS(r);
        }
        return LOOM_OK;
    }

    Status attach(const Params& params, loom_worker_h w, unsigned id) {
        worker = w;
        loom_am_handler_param_t hp{};
        hp.field_mask = LOOM_AM_HANDLER_PARAM_FIELD_ID | LOOM_AM_HANDLER_PARAM_FIELD_CB | LOOM_AM_HANDLER_PARAM_FIELD_ARG;
        hp.id = id;
        hp.cb = cb;
        hp.arg = this;
        if (loom_status_t s = loom_worker_set_am_recv_handler(w, &hp); s != LOOM_OK) {
            return fail(params, "loom_worker_set_am_recv_handler", s);
        }
        return Status::ok;
    }
};

/** The operations of the ucp_am_* and stream_* tests on one endpoint. */
class Ops {
public:
    Ops(Ucp& ucp, const Params& params)
        : ucp_(ucp), am_(params.test == TestKind::ucp_am_lat || params.test == TestKind::ucp_am_bw) {
        waitall_.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
        waitall_.flags = LOOM_STREAM_RECV_FLAG_WAITALL;
    }

    bool am() const { return am_; }
    const char* send_name() const { return am_ ? "loom_am_send_nbx" : "loom_stream_send_nbx"; }

    /** Sends @p length bytes: an active message to @p id, or stream bytes. */
    loom_status_ptr_t send(unsigned id, const void* buffer, std::size_t length) {
        return am_ ? loom_am_send_nbx(ucp_.ep(), id, nullptr, 0, buffer, length, nullptr)
                   : loom_stream_send_nbx(ucp_.ep(), buffer, length, nullptr);
    }

    /** Streams: receives exactly @p length bytes. */
    loom_status_ptr_t recv(void* buffer, std::size_t length) {
        return loom_stream_recv_nbx(ucp_.ep(), buffer, length, &length_, &waitall_);
    }

private:
    Ucp& ucp_;
    bool am_;
    loom_request_param_t waitall_{};
    std::size_t length_ = 0;
};

/** Waits until @p counter counted more than @p n messages (or failed). */
template <typename Hook>
loom_status_t wait_count(Ucp& ucp, const AmCounter& counter, std::uint64_t n, Hook hook) {
    loom_status_t s = ucp.progress_until([&] { return counter.arrived > n || counter.error != LOOM_OK; }, hook);
    return s != LOOM_OK ? s : counter.error;
}

/** ucp_am_lat and stream_lat: @p total ping-pongs, the last params.iters measured. */
Status run_am_stream_latency(Ucp& ucp, const Params& params, Role role, const OutputOptions& out, Report& report) {
    const std::uint64_t total = params.warmup + params.iters;
    const bool loopback = role == Role::loopback;
    Ops ops(ucp, params);
    Buffer sbuf(params.size), rbuf(params.size), peer_sbuf(params.size), peer_rbuf(params.size);
    if (!sbuf.data || !rbuf.data || !peer_sbuf.data || !peer_rbuf.data) return fail(params, "malloc", LOOM_ERR_NO_MEMORY);
    AmCounter pong{nullptr, rbuf.data, params.size}, ping{nullptr, peer_rbuf.data, params.size};
    if (ops.am()) {
        if (role != Role::server) {
            if (Status s = pong.attach(params, ucp.worker(), kAmPong); s != Status::ok) return s;
        }
        if (role != Role::client) {
            if (Status s = ping.attach(params, ucp.worker(), kAmPing); s != Status::ok) return s;
        }
    }
    auto none = [] { return LOOM_OK; };
    // The server's half: the ping is in (counted, or received whole), the pong leaves.
    auto answer = [&](std::uint64_t i) -> Status {
        loom_status_t s = ops.am() ? wait_count(ucp, ping, i, none) : ucp.wait(ops.recv(peer_rbuf.data, params.size));
        if (s != LOOM_OK) return fail_wait(params, "receive of the ping", s);
        if (s = ucp.wait(ops.send(kAmPong, peer_sbuf.data, params.size)); s != LOOM_OK) {
            return fail_wait(params, ops.send_name(), s);
        }
        return Status::ok;
    };
    if (role == Role::server) {
        for (std::uint64_t i = 0; i < total; ++i) {
            if (Status s = answer(i); s != Status::ok) return s;
        }
        return Status::ok;
    }
    std::unique_ptr<Meter> meter;
    for (std::uint64_t i = 0; i < total; ++i) {
        if (i == params.warmup) meter = std::make_unique<Meter>(params, out, true);
        ucs::Ticks t0 = ucs::get_time();
        // A stream receive of the pong is posted first, except in loopback, where the one
        // stream of the endpoint carries the ping too.
        loom_status_ptr_t r = nullptr;
        if (!ops.am() && !loopback) r = ops.recv(rbuf.data, params.size);
        if (LOOM_PTR_IS_ERR(r)) return fail(params, "loom_stream_recv_nbx", LOOM_PTR_STATUS(r));
        loom_status_ptr_t s = ops.send(kAmPing, sbuf.data, params.size);
        if (LOOM_PTR_IS_ERR(s)) {
            (void)Ucp::finish(r);
            return fail(params, ops.send_name(), LOOM_PTR_STATUS(s));
        }
        if (loopback) {
            if (Status st = answer(i); st != Status::ok) return st;
            if (!ops.am()) r = ops.recv(rbuf.data, params.size);
        }
        if (loom_status_t st = ucp.wait(s); st != LOOM_OK) {
            (void)Ucp::finish(r);
            return fail_wait(params, ops.send_name(), st);
        }
        loom_status_t st = ops.am() ? wait_count(ucp, pong, i, none) : ucp.wait(r);
        if (st != LOOM_OK) return fail_wait(params, "receive of the pong", st);
        if (meter) {
            ucs::Ticks now = ucs::get_time();
            meter->sample(i - params.warmup, now, now - t0);
        }
    }
    if (meter) meter->finish(params.iters, report);
    return Status::ok;
}

/**
 * The receiving side of ucp_am_bw and stream_bw: counts active messages, or keeps up to
 * `window` whole-message stream receives posted (into one buffer), and sends the
 * acknowledgement once all arrived. step() never blocks.
 */
class AmStreamReceiver {
public:
    AmStreamReceiver(Ucp& ucp, Ops& ops, const Params& params, std::uint32_t window)
        : ucp_(ucp), ops_(ops), params_(params), total_(params.warmup + params.iters), rbuf_(params.size),
          posted_(window, nullptr) {}

    ~AmStreamReceiver() {
        for (loom_status_ptr_t& r : posted_) {
            if (LOOM_PTR_IS_PTR(r)) loom_request_free(r);
        }
        if (LOOM_PTR_IS_PTR(ack_)) loom_request_free(ack_);
    }

    loom_status_t start() {
        if (rbuf_.data == nullptr) return LOOM_ERR_NO_MEMORY;
        if (ops_.am()) {
            counter_ = AmCounter{nullptr, rbuf_.data, params_.size};
            return counter_.attach(params_, ucp_.worker(), kAmPing) == Status::ok ? LOOM_OK : LOOM_ERR_INVALID_PARAM;
        }
        while (posted_count_ < total_ && posted_count_ < posted_.size()) {
            if (loom_status_t s = post(); s != LOOM_OK) return s;
        }
        return LOOM_OK;
    }

    loom_status_t step() {
        if (ops_.am()) {
            if (counter_.error != LOOM_OK) {
                what_ = "receive of rendezvous data";
                return counter_.error;
            }
            received_ = counter_.arrived;
        }
        while (!ops_.am() && received_ < posted_count_) {
            loom_status_ptr_t& r = posted_[received_ % posted_.size()];
            if (!Ucp::done(r)) break;
            loom_status_t s = Ucp::finish(r);
            r = nullptr;
            if (s != LOOM_OK) {
                what_ = "loom_stream_recv_nbx";
                return s;
            }
            ++received_;
            if (posted_count_ < total_) {
                if (loom_status_t st = post(); st != LOOM_OK) return st;
            }
        }
        if (received_ == total_ && !ack_sent_) {
            ack_sent_ = true;
            ack_ = ops_.send(kAmAck, &total_, sizeof(total_));
            if (LOOM_PTR_IS_ERR(ack_)) {
                what_ = "send of the acknowledgement";
                return LOOM_PTR_STATUS(ack_);
            }
        }
        return LOOM_OK;
    }

    bool finished() const { return ack_sent_ && Ucp::done(ack_); }
    loom_status_t ack_status() {
        loom_status_t s = Ucp::finish(ack_);
        ack_ = nullptr;
        return s;
    }
    const char* what() const { return what_; }

private:
    loom_status_t post() {
        loom_status_ptr_t r = ops_.recv(rbuf_.data, params_.size);
        if (LOOM_PTR_IS_ERR(r)) {
            what_ = "loom_stream_recv_nbx";
            return LOOM_PTR_STATUS(r);
        }
        posted_[posted_count_ % posted_.size()] = r;
        ++posted_count_;
        return LOOM_OK;
    }

    Ucp& ucp_;
    Ops& ops_;
    const Params& params_;
    std::uint64_t total_;
    Buffer rbuf_;
    AmCounter counter_;
    std::vector<loom_status_ptr_t> posted_;
    std::uint64_t posted_count_ = 0;
    std::uint64_t received_ = 0;
    bool ack_sent_ = false;
    loom_status_ptr_t ack_ = nullptr;
    const char* what_ = "";
};

/** ucp_am_bw and stream_bw: the client's clock stops at the acknowledgement of the last message. */
Status run_am_stream_bw(Ucp& ucp, const Params& params, Role role, const OutputOptions& out, Report& report) {
    const std::uint64_t total = params.warmup + params.iters;
    const std::uint32_t window = bw_window(params);
    const bool loopback = role == Role::loopback;
    Ops ops(ucp, params);
    std::unique_ptr<AmStreamReceiver> receiver;
    if (role != Role::client) {
        receiver = std::make_unique<AmStreamReceiver>(ucp, ops, params, window);
        if (loom_status_t s = receiver->start(); s != LOOM_OK) return fail(params, "the receiver's set-up", s);
    }
    auto hook = [&]() -> loom_status_t { return receiver ? receiver->step() : LOOM_OK; };
    auto hook_failed = [&](loom_status_t s, const char* what) {
        return fail_wait(params, receiver && *receiver->what() ? receiver->what() : what, s);
    };
    if (role == Role::server) {
        loom_status_t s = ucp.progress_until([&] { return receiver->finished(); }, hook);
        if (s != LOOM_OK) return hook_failed(s, "receive of the data");
        if (loom_status_t st = receiver->ack_status(); st != LOOM_OK) return fail(params, "acknowledgement", st);
        return Status::ok;
    }
    Buffer sbuf(params.size);
    std::uint64_t ack_value = 0;
    if (!sbuf.data) return fail(params, "malloc", LOOM_ERR_NO_MEMORY);
    AmCounter ack{nullptr, reinterpret_cast<std::uint8_t*>(&ack_value), sizeof(ack_value)};
    if (ops.am()) {
        if (Status s = ack.attach(params, ucp.worker(), kAmAck); s != Status::ok) return s;
    }
    std::vector<loom_status_ptr_t> inflight(window, nullptr);
    auto drop_all = [&] {
        for (loom_status_ptr_t& r : inflight) {
            if (LOOM_PTR_IS_PTR(r)) loom_request_free(r);
            r = nullptr;
        }
    };
    std::unique_ptr<Meter> meter;
    for (std::uint64_t i = 0; i < total; ++i) {
        if (i == params.warmup) {
            // The warm-up ends before the clock starts (as ucx_perftest's, which runs apart).
            if (loom_status_t s = ucp.wait_all(inflight, hook); s != LOOM_OK) {
                drop_all();
                return hook_failed(s, ops.send_name());
            }
            meter = std::make_unique<Meter>(params, out, false);
        }
        loom_status_ptr_t& slot = inflight[i % window];
        if (slot != nullptr) {
            loom_status_t s = ucp.wait(slot, hook);
            slot = nullptr;
            if (s != LOOM_OK) {
                drop_all();
                return hook_failed(s, ops.send_name());
            }
        }
        slot = ops.send(kAmPing, sbuf.data, params.size);
        if (LOOM_PTR_IS_ERR(slot)) {
            loom_status_t s = LOOM_PTR_STATUS(slot);
            slot = nullptr;
            drop_all();
            return fail(params, ops.send_name(), s);
        }
        if (loom_status_t s = hook(); s != LOOM_OK) {
            drop_all();
            return hook_failed(s, ops.send_name());
        }
        if (meter) meter->sample(i - params.warmup, ucs::get_time(), 0);
    }
    if (loom_status_t s = ucp.wait_all(inflight, hook); s != LOOM_OK) {
        drop_all();
        return hook_failed(s, ops.send_name());
    }
    loom_status_t s;
    if (ops.am()) {
        s = wait_count(ucp, ack, 0, hook);
    } else {
        // The acknowledgement's receive comes last: in loopback the endpoint's one stream
        // carries the data too, which the receiver must have taken first.
        if (loopback) {
            s = ucp.progress_until([&] { return receiver->finished(); }, hook);
            if (s != LOOM_OK) return hook_failed(s, "receive of the data");
        }
        s = ucp.wait(ops.recv(&ack_value, sizeof(ack_value)), hook);
    }
    if (s != LOOM_OK) return hook_failed(s, "receive of the acknowledgement");
    if (meter) meter->finish(params.iters, report);
    if (receiver) {
        if (loom_status_t st = ucp.progress_until([&] { return receiver->finished(); }, hook); st != LOOM_OK) {
            return hook_failed(st, "acknowledgement");
        }
        if (loom_status_t st = receiver->ack_status(); st != LOOM_OK) return fail(params, "acknowledgement", st);
    }
    return Status::ok;
}

Status run_am_stream(Ucp& ucp, const Params& params, Role role, const OutputOptions& out, Report& report) {
    const bool bw = params.test == TestKind::ucp_am_bw || params.test == TestKind::stream_bw;
    if (role != Role::server) print_header(out, params);
    return bw ? run_am_stream_bw(ucp, params, role, out, report) : run_am_stream_latency(ucp, params, role, out, report);
}


}  // namespace

Status run_ucp_test(const Params& params, Role role, Oob* oob, const OutputOptions& out, Report& report) {
    if (is_ucp_rma_test(params.test)) return run_ucp_rma_test(params, role, oob, out, report);
    Ucp ucp(params);
    if (Status s = ucp.open(); s != Status::ok) return s;
    if (role == Role::loopback) {
        // One worker talking to itself, as ucx_perftest -l does.
        std::vector<std::uint8_t> self = ucp.address();
        if (Status s = ucp.connect(self.data()); s != Status::ok) return s;
        if (Status s = run(ucp, params, role, out, report); s != Status::ok) return s;
        return ucp.close();
    }
    // Both sides make their endpoint before either progresses, so the wire-up each one
    // sends finds the other's endpoint in place.
    std::vector<std::uint8_t> peer;
    Status s = oob->exchange(ucp.address(), peer);
    if (s != Status::ok) {
        std::fprintf(stderr, "loom_perftest: %s: the worker address exchange failed: %s\n", test_name(params.test),
                     std::string(to_string(s)).c_str());
        return s;
    }
    // On failure this process skips the barrier and main calls Oob::fail(): the peer sees
    // the out-of-band connection close and stops too (under MPI the job is aborted).
    if (s = ucp.connect(peer.data()); s != Status::ok) return s;
    if (s = oob->barrier(); s != Status::ok) {
        std::fprintf(stderr, "loom_perftest: %s: the peer failed before the test (see its output)\n",
                     test_name(params.test));
        return s;
    }
    if (s = run(ucp, params, role, out, report); s != Status::ok) return s;
    if (s = ucp.close(); s != Status::ok) return s;
    // Nobody tears down its worker while the other may still progress a close.
    if (s = oob->barrier(); s != Status::ok) {
        std::fprintf(stderr, "loom_perftest: %s: the peer failed after the test\n", test_name(params.test));
        return s;
    }
    return Status::ok;
}

}  // namespace loom::perftest
