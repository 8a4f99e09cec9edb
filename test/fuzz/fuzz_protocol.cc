/**
 * Fuzz target: the protocol layer's wire messages, as a peer would send them. The first
 * byte picks the active-message id (the protocol's: wire-up, eager only/first/middle,
 * sync eager and its ack, rendezvous RTS, ATS, RTR, PUT RTR, FIN, send cancel and its
 * ack, unexpected-memory flow, user AM only/first/RTS, stream data and flow), the rest is
 * the message, handed to the real handlers of a worker through its self iface exactly as
 * a transport delivers one (Iface::invoke_am), followed by progress. The worker has an
 * endpoint to itself, a posted wildcard tag receive and user AM handlers, so headers that
 * name endpoints, requests and handlers can reach them. Every 512 inputs the worker and its
 * state are replaced, so that kept unexpected messages do not pile up.
 *
 * Seeds come from real traffic: with FUZZ_CAPTURE_DIR set, the target sends itself one
 * operation of each kind (capture_traffic below) and writes every message its self iface
 * delivers to that directory as an input of this target ("captured-<id>-<n>"), then exits.
 * test/fuzz/corpus/fuzz_protocol/captured-* were made so.
 */
#include "fuzz_common.h"

#include "ucp/api/handles.h"
#include "ucp/core/worker.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace {

constexpr unsigned kIdRange = 40;  ///< protocol ids are below 30; a few unused ones too
constexpr int kInputsPerWorker = 512;

loom_status_t user_am(void*, const void*, size_t, void*, size_t, const loom_am_recv_param_t*) {
    return LOOM_OK;
}

/** The worker under test and what it holds between inputs. */
struct Target {
    loom::fuzz::Stack stack{"self",
                            LOOM_FEATURE_TAG | LOOM_FEATURE_AM | LOOM_FEATURE_STREAM | LOOM_FEATURE_RMA};
    loom_ep_h ep = stack.self_ep();
    int inputs = 0;
    /** Receives land here: one left in progress may still be written by a later input. */
    std::vector<char> buffer = std::vector<char>(64 * 1024);

    Target() {
        for (unsigned id = 0; id < 4; ++id) {
            loom_am_handler_param_t hp{};
            hp.field_mask = LOOM_AM_HANDLER_PARAM_FIELD_ID | LOOM_AM_HANDLER_PARAM_FIELD_CB;
            hp.id = id;
            hp.cb = user_am;
            (void)loom_worker_set_am_recv_handler(stack.worker, &hp);
        }
    }
    ~Target() {
        loom_request_param_t p{};
        p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
        p.flags = LOOM_EP_CLOSE_FLAG_FORCE;
        void* r = loom_ep_close_nbx(ep, &p);
        if (LOOM_PTR_IS_PTR(r)) {
            while (loom_request_check_status(r) == LOOM_INPROGRESS) loom_worker_progress(stack.worker);
            loom_request_free(r);
        }
    }
};

std::unique_ptr<Target> g_target;

/** Writes every message of one active-message id to a file, then hands it to the real handler. */
struct Recorder {
    loom::uct::AmHandler original;
    loom::uct::AmId id = 0;
    const char* dir = nullptr;
    unsigned* count = nullptr;

    static loom::Status record(void* arg, void* data, std::size_t length, unsigned flags) {
        auto* self = static_cast<Recorder*>(arg);
        char path[4096];
        std::snprintf(path, sizeof(path), "%s/captured-%02u-%03u", self->dir, self->id, (*self->count)++);
        if (std::FILE* f = std::fopen(path, "wb")) {
            const std::uint8_t id = self->id;
            std::fwrite(&id, 1, 1, f);
            std::fwrite(data, 1, length, f);
            std::fclose(f);
        }
        return self->original.cb(self->original.arg, data, length, flags);
    }
};

/** Progresses @p worker until @p request completes (or 10 s pass), then frees it. */
void finish(loom_worker_h worker, void* request) {
    if (!LOOM_PTR_IS_PTR(request)) return;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (loom_request_check_status(request) == LOOM_INPROGRESS &&
           std::chrono::steady_clock::now() < deadline) {
        loom_worker_progress(worker);
    }
    loom_request_free(request);
}

/**
 * One operation of each kind through the target's endpoint to itself: tagged sends from
 * eager-only to rendezvous, a synchronous one, a canceled unmatched rendezvous send, active
 * messages eager (one and several fragments) and rendezvous, with a reply endpoint, and stream
 * bytes.
 */
void capture_traffic(Target& t) {
    loom_worker_h w = t.stack.worker;
    std::vector<char> out(1 << 20, 'x'), in(1 << 20);
    for (std::size_t size : {std::size_t{8}, std::size_t{2000}, std::size_t{40000}, std::size_t{1} << 20}) {
        void* recv = loom_tag_recv_nbx(w, in.data(), in.size(), 7, ~loom_tag_t{0}, nullptr);
        finish(w, loom_tag_send_nbx(t.ep, out.data(), size, 7, nullptr));
        finish(w, recv);
    }
    void* recv = loom_tag_recv_nbx(w, in.data(), in.size(), 8, ~loom_tag_t{0}, nullptr);
    finish(w, loom_tag_send_sync_nbx(t.ep, out.data(), 8, 8, nullptr));
    finish(w, recv);
    void* unmatched = loom_tag_send_nbx(t.ep, out.data(), out.size(), 9, nullptr);
    if (LOOM_PTR_IS_PTR(unmatched)) loom_request_cancel(w, unmatched);
    finish(w, unmatched);
    for (unsigned flags : {0u, unsigned{LOOM_AM_SEND_FLAG_REPLY}, unsigned{LOOM_AM_SEND_FLAG_EAGER},
                           unsigned{LOOM_AM_SEND_FLAG_RNDV}}) {
        for (std::size_t size : {std::size_t{8}, std::size_t{40000}}) {
            loom_request_param_t p{};
            p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
            p.flags = flags;
            const std::uint64_t header = 0x1234;
            finish(w, loom_am_send_nbx(t.ep, 1, &header, sizeof(header), out.data(), size, &p));
        }
    }
    std::size_t got = 0;
    void* stream_recv = loom_stream_recv_nbx(t.ep, in.data(), 100, &got, nullptr);
    finish(w, loom_stream_send_nbx(t.ep, out.data(), 100, nullptr));
    finish(w, stream_recv);
    for (int i = 0; i < 100; ++i) loom_worker_progress(w);
}

/** FUZZ_CAPTURE_DIR: records the messages of capture_traffic as seeds, then exits. */
void capture_seeds(const char* dir) {
    Target t;
    loom::uct::Iface& iface = *t.stack.worker->impl->ifaces[0].iface;
    static Recorder recorders[kIdRange];
    static unsigned count = 0;
    for (unsigned id = 0; id < kIdRange; ++id) {
        Recorder& r = recorders[id];
        r.original = iface.am_handler(static_cast<loom::uct::AmId>(id));
        r.id = static_cast<loom::uct::AmId>(id);
        r.dir = dir;
        r.count = &count;
        (void)iface.set_am_handler(r.id, Recorder::record, &r, r.original.flags);
    }
    capture_traffic(t);
    std::fprintf(stderr, "fuzz_protocol: %u messages written to %s\n", count, dir);
    std::_Exit(0);  // not a fuzzing run: skip the leak check of what the capture left
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    if (const char* dir = std::getenv("FUZZ_CAPTURE_DIR")) capture_seeds(dir);
    g_target = std::make_unique<Target>();
    // Registered after the leak checker's own exit handler, so it runs before it.
    std::atexit([] { g_target.reset(); });
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    if (++g_target->inputs > kInputsPerWorker) {
        g_target.reset();
        g_target = std::make_unique<Target>();
    }
    loom_worker_h worker = g_target->stack.worker;
    // A receive that any tagged message matches, so eager and rendezvous headers go past
    // the unexpected queue into the receive paths.
    std::vector<char>& buffer = g_target->buffer;
    void* recv = loom_tag_recv_nbx(worker, buffer.data(), buffer.size(), 0, 0, nullptr);
    // The message in a buffer of its exact size, so a read past its end is caught.
    std::vector<std::uint8_t> message(data + 1, data + size);
    loom::ucp::Worker* w = worker->impl.get();
    (void)w->ifaces[0].iface->invoke_am(static_cast<loom::uct::AmId>(data[0] % kIdRange), message.data(),
                                        message.size(), 0);
    for (int i = 0; i < 4; ++i) loom_worker_progress(worker);
    if (LOOM_PTR_IS_PTR(recv)) {
        if (loom_request_check_status(recv) == LOOM_INPROGRESS) loom_request_cancel(worker, recv);
        for (int i = 0; i < 1000 && loom_request_check_status(recv) == LOOM_INPROGRESS; ++i) {
            loom_worker_progress(worker);
        }
        // A receive still in progress (its rendezvous data never comes) is freed all the
        // same: the worker completes it without a callback when it is replaced.
        loom_request_free(recv);
    }
    return 0;
}
