/**
 * What every protocol-level test of loom_perftest shares: one context, worker and
 * endpoint to the peer through the public C API, the waits on requests (with a
 * no-progress timeout and the peer's failure noticed at once), and the one-line errors.
 */
#pragma once

#include "perftest.h"

#include "ucs/time/clock.h"

#include <loom/ucp.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace loom::perftest {

/** Seconds without progress after which a wait gives up (the peer is presumed gone). */
inline constexpr double kUcpTimeoutSec = 60.0;

/** One line on stderr naming the operation and the status; returns the status as a loom::Status. */
inline Status fail(const Params& params, const char* what, loom_status_t status) {
    std::fprintf(stderr, "loom_perftest: %s: %s failed: %s\n", test_name(params.test), what,
                 loom_status_string(status));
    return static_cast<Status>(status);
}

/** A failed wait: names the operation, and says so when it was the timeout or the peer's death. */
inline Status fail_wait(const Params& params, const char* what, loom_status_t s) {
    if (s == LOOM_ERR_TIMED_OUT) {
        std::fprintf(stderr, "loom_perftest: %s: %s did not complete: no progress for %.0f s (peer gone?)\n",
                     test_name(params.test), what, kUcpTimeoutSec);
        return Status::timed_out;
    }
    if (s == LOOM_ERR_ENDPOINT_FAILURE || s == LOOM_ERR_CONNECTION_RESET || s == LOOM_ERR_PEER_TIMEOUT) {
        std::fprintf(stderr, "loom_perftest: %s: %s failed: the peer is gone (%s)\n", test_name(params.test), what,
                     loom_status_string(s));
        return static_cast<Status>(s);
    }
    return fail(params, what, s);
}

/** Context, worker, endpoint to the peer, and the waits on requests. */
class UcpSession {
public:
    explicit UcpSession(const Params& params) : params_(params), timeout_(ucs::sec_to_ticks(kUcpTimeoutSec)) {}

    ~UcpSession() {
        force_close();
        if (address_ != nullptr) loom_worker_release_address(worker_, address_);
        if (worker_ != nullptr) loom_worker_destroy(worker_);
        if (context_ != nullptr) loom_cleanup(context_);
    }
    UcpSession(const UcpSession&) = delete;
    UcpSession& operator=(const UcpSession&) = delete;

    /** Sets LOOM_TLS from -x, then creates the context (with @p features) and the worker. */
    Status open(std::uint64_t features) {
        if (!params_.tl.empty() && ::setenv("LOOM_TLS", params_.tl.c_str(), 1) != 0) {
            std::fprintf(stderr, "loom_perftest: cannot set LOOM_TLS\n");
            return Status::no_memory;
        }
        loom_params_t cp{};
        cp.field_mask = LOOM_PARAM_FIELD_FEATURES | LOOM_PARAM_FIELD_NAME;
        cp.features = features;
        cp.name = "loom_perftest";
        if (loom_status_t s = loom_init(&cp, &context_); s != LOOM_OK) return fail(params_, "loom_init", s);
        loom_worker_params_t wp{};
        wp.field_mask = LOOM_WORKER_PARAM_FIELD_THREAD_MODE;
        wp.thread_mode = LOOM_THREAD_MODE_SINGLE;
        if (loom_status_t s = loom_worker_create(context_, &wp, &worker_); s != LOOM_OK) {
            return fail(params_, "loom_worker_create", s);
        }
        if (loom_status_t s = loom_worker_get_address(worker_, &address_, &address_length_); s != LOOM_OK) {
            return fail(params_, "loom_worker_get_address", s);
        }
        return Status::ok;
    }

    /** This worker's address, for the peer. */
    std::vector<std::uint8_t> address() const {
        auto* p = static_cast<const std::uint8_t*>(address_);
        return {p, p + address_length_};
    }

    /** Creates the endpoint to the worker at @p peer_address. */
    Status connect(const void* peer_address) {
        loom_ep_params_t ep{};
        ep.field_mask = LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS | LOOM_EP_PARAM_FIELD_ERR_HANDLER;
        ep.address = peer_address;
        // A transport that sees the peer die (shm, tcp, rc) fails the endpoint: stop at once
        // instead of waiting for the timeout (a posted receive from any source does not fail).
        ep.err_handler.cb = [](void* arg, loom_ep_h, loom_status_t status) {
            static_cast<UcpSession*>(arg)->peer_failure_ = status;
        };
        ep.err_handler.arg = this;
        if (loom_status_t s = loom_ep_create(worker_, &ep, &ep_); s != LOOM_OK) {
            ep_ = nullptr;
            return fail(params_, "loom_ep_create", s);
        }
        return Status::ok;
    }

    /**
     * Progresses until @p done(), calling @p hook (a loopback server's step) between
     * progress calls; LOOM_ERR_TIMED_OUT after kUcpTimeoutSec without progress.
     */
    template <typename Done, typename Hook>
    loom_status_t progress_until(Done done, Hook hook) {
        ucs::Ticks idle_since = 0;
        unsigned spins = 0;
        while (!done()) {
            if (__builtin_expect(peer_failure_ != LOOM_OK, 0)) return peer_failure_;
            if (loom_worker_progress(worker_) != 0) {
                idle_since = 0;
                spins = 0;
            } else if (++spins >= 1024) {
                spins = 0;
                ucs::Ticks now = ucs::get_time();
                if (idle_since == 0) {
                    idle_since = now;
                } else if (now - idle_since > timeout_) {
                    return LOOM_ERR_TIMED_OUT;
                }
            }
            if (loom_status_t s = hook(); s != LOOM_OK) return s;
        }
        return LOOM_OK;
    }

    /** progress_until without a hook. */
    template <typename Done>
    loom_status_t progress_until(Done done) {
        return progress_until(done, [] { return LOOM_OK; });
    }

    /** Waits for what an _nbx call returned (NULL, an error or a request) and frees the request. */
    template <typename Hook>
    loom_status_t wait(loom_status_ptr_t r, Hook hook) {
        if (r == nullptr) return LOOM_OK;
        if (LOOM_PTR_IS_ERR(r)) return LOOM_PTR_STATUS(r);
        loom_status_t s = progress_until([&] { return loom_request_check_status(r) != LOOM_INPROGRESS; }, hook);
        if (s == LOOM_OK) s = loom_request_check_status(r);
        loom_request_free(r);  // when still running (timed out), Loom frees it once it completes
        return s;
    }

    /** wait without a hook. */
    loom_status_t wait(loom_status_ptr_t r) {
        return wait(r, [] { return LOOM_OK; });
    }

    /** Waits for the requests of @p reqs in turn, emptying their slots; stops at the first failure. */
    template <typename Hook>
    loom_status_t wait_all(std::vector<loom_status_ptr_t>& reqs, Hook hook) {
        for (loom_status_ptr_t& r : reqs) {
            loom_status_t s = wait(r, hook);
            r = nullptr;
            if (s != LOOM_OK) return s;
        }
        return LOOM_OK;
    }

    /** wait_all without a hook. */
    loom_status_t wait_all(std::vector<loom_status_ptr_t>& reqs) {
        return wait_all(reqs, [] { return LOOM_OK; });
    }

    /** One progress call; the peer's failure when the endpoint's error handler reported one. */
    loom_status_t progress_once() {
        (void)loom_worker_progress(worker_);
        return peer_failure_;
    }

    /** Closes the endpoint after flushing it. */
    Status close() {
        if (ep_ == nullptr) return Status::ok;
        loom_status_ptr_t r = loom_ep_close_nbx(ep_, nullptr);
        ep_ = nullptr;
        if (loom_status_t s = wait(r); s != LOOM_OK) return fail(params_, "loom_ep_close_nbx", s);
        return Status::ok;
    }

    loom_context_h context() const { return context_; }
    loom_worker_h worker() const { return worker_; }
    loom_ep_h ep() const { return ep_; }

protected:
    /** After a failure: closes the endpoint dropping what is outstanding. */
    void force_close() {
        if (ep_ == nullptr) return;
        loom_request_param_t force{};
        force.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
        force.flags = LOOM_EP_CLOSE_FLAG_FORCE;
        void* r = loom_ep_close_nbx(ep_, &force);
        if (LOOM_PTR_IS_PTR(r)) loom_request_free(r);
        ep_ = nullptr;
    }

    const Params& params_;

private:
    ucs::Ticks timeout_;
    loom_context_h context_ = nullptr;
    loom_worker_h worker_ = nullptr;
    loom_ep_h ep_ = nullptr;
    void* address_ = nullptr;
    std::size_t address_length_ = 0;
    loom_status_t peer_failure_ = LOOM_OK;  ///< set by the endpoint's error handler
};

}  // namespace loom::perftest
