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
 */
#include "fuzz_common.h"

#include "ucp/api/handles.h"
#include "ucp/core/worker.h"

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

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
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
