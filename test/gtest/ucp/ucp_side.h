/**
 * One process's side of a two-process protocol-layer test: a context with the features
 * asked, a worker, and an endpoint to the other process made from the address the
 * other sent over the ForkedPeer channel. Each suite derives its own Side, adding the
 * waits and helpers of its API.
 */
#pragma once

#include "loom/ucp.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace loom::test {

/**
 * LOOM_TLS of the two-process suites' Verbs instances: rc where test/rdma/run_rdma_tests.sh
 * runs the protocol layer suites on RDMA devices (LOOMTEST_UCP_VERBS=1), wired up over tcp
 * with LOOM_IB_CM=verbs; none elsewhere.
 */
inline std::vector<const char*> verbs_tls() {
    if (std::getenv("LOOMTEST_UCP_VERBS") == nullptr) return {};
    const char* cm = std::getenv("LOOM_IB_CM");
    if (cm != nullptr && std::string(cm) == "verbs") return {"rc,tcp:aux"};
    return {"rc"};
}

/** A test name part for LOOM_TLS @p tls ("rc,tcp:aux" gives "rc_tcp_aux"). */
inline std::string tls_name(const char* tls) {
    std::string name = tls;
    for (char& ch : name) {
        if (ch == ',' || ch == ':') ch = '_';
    }
    return name;
}

class UcpSide {
public:
    loom_context_h ctx = nullptr;
    loom_worker_h worker = nullptr;
    loom_ep_h ep = nullptr;
    int errors = 0;                     ///< error handler calls (peer error mode)
    loom_status_t last_error = LOOM_OK;  ///< the status the last of them reported

    /** Creates the context (LOOM_TLS=@p tls, @p features) and the worker; false on failure. */
    bool open(const char* tls, std::uint64_t features) {
        setenv("LOOM_TLS", tls, 1);
        loom_params_t params{};
        params.field_mask = LOOM_PARAM_FIELD_FEATURES;
        params.features = features;
        return loom_init(&params, &ctx) == LOOM_OK && loom_worker_create(ctx, nullptr, &worker) == LOOM_OK;
    }

    /** The worker's packed address, empty on failure. */
    std::vector<std::uint8_t> address() const {
        void* a;
        size_t n;
        if (loom_worker_get_address(worker, &a, &n) != LOOM_OK) return {};
        std::vector<std::uint8_t> v(static_cast<std::uint8_t*>(a), static_cast<std::uint8_t*>(a) + n);
        loom_worker_release_address(worker, a);
        return v;
    }

    /** Creates ep to @p peer; with @p peer_errors in peer error mode, counting errors. */
    bool connect(const std::vector<std::uint8_t>& peer, bool peer_errors) {
        loom_ep_params_t p{};
        p.field_mask = LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS;
        p.address = peer.data();
        if (peer_errors) {
            p.field_mask |= LOOM_EP_PARAM_FIELD_ERR_HANDLING_MODE | LOOM_EP_PARAM_FIELD_ERR_HANDLER;
            p.err_mode = LOOM_ERR_HANDLING_MODE_PEER;
            p.err_handler.cb = [](void* arg, loom_ep_h, loom_status_t status) {
                auto* self = static_cast<UcpSide*>(arg);
                ++self->errors;
                self->last_error = status;
            };
            p.err_handler.arg = this;
        }
        return loom_ep_create(worker, &p, &ep) == LOOM_OK;
    }

    /**
     * The forked child's half of meeting its parent: sends this worker's address over
     * @p ch, receives the parent's and connects to it (no error handler). False on failure.
     */
    template <typename Channel>
    bool meet_parent(Channel& ch) {
        ch.send(address());
        auto parent = ch.recv();
        return parent && connect(*parent, false);
    }

    /**
     * The parent's half: receives the child's address over @p ch, sends this worker's and
     * connects to the child (@p peer_errors as in connect). False on failure.
     */
    template <typename Channel>
    bool meet_child(Channel& ch, bool peer_errors) {
        auto child = ch.recv();
        if (!child) return false;
        ch.send(address());
        return connect(*child, peer_errors);
    }

    /** Progresses until @p done(), for at most @p seconds; returns done(). */
    template <typename F>
    bool progress_until(F done, int seconds = 30) {
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
        while (!done()) {
            if (std::chrono::steady_clock::now() > deadline) return false;
            loom_worker_progress(worker);
        }
        return true;
    }

    /**
     * Waits for a status-or-request, @p test reading its status (check_status or a
     * receive's test); frees the request. LOOM_ERR_TIMED_OUT after @p seconds.
     */
    template <typename Test>
    loom_status_t wait_with(loom_status_ptr_t r, Test test, int seconds) {
        if (!LOOM_PTR_IS_PTR(r)) return LOOM_PTR_STATUS(r);
        if (!progress_until([&] { return test(r) != LOOM_INPROGRESS; }, seconds)) return LOOM_ERR_TIMED_OUT;
        loom_status_t s = test(r);
        loom_request_free(r);
        return s;
    }

    /** Closes the endpoint by force, destroys the worker and the context. */
    ~UcpSide() {
        if (ep) {
            loom_request_param_t p{};
            p.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
            p.flags = LOOM_EP_CLOSE_FLAG_FORCE;
            (void)loom_ep_close_nbx(ep, &p);
        }
        if (worker) loom_worker_destroy(worker);
        if (ctx) loom_cleanup(ctx);
    }
};

}  // namespace loom::test
