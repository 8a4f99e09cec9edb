/**
 * What the libFuzzer targets of test/fuzz share: a quiet log (a target sees mostly
 * malformed input, and each refusal logs one line), and a protocol-layer context and
 * worker of the real library over the transports a target names.
 */
#pragma once

#include "loom/ucp.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace loom::fuzz {

/**
 * Makes the library log only fatal errors unless LOOM_LOG_LEVEL says otherwise, and leaves
 * crash signals to libFuzzer (which saves the input that crashed) unless
 * LOOM_HANDLE_ERRORS says otherwise.
 */
inline void quiet_log() {
    setenv("LOOM_LOG_LEVEL", "fatal", 0);
    setenv("LOOM_HANDLE_ERRORS", "no", 0);
}

/** The next sizeof(T) bytes of an input as a T (zeros past its end); consumes them. */
template <typename T>
T take(const std::uint8_t*& data, std::size_t& size) {
    T value{};
    const std::size_t n = size < sizeof(T) ? size : sizeof(T);
    std::memcpy(&value, data, n);
    data += n;
    size -= n;
    return value;
}

/** A context with @p features over LOOM_TLS=@p tls and one worker; aborts if either fails. */
struct Stack {
    loom_context_h ctx = nullptr;
    loom_worker_h worker = nullptr;

    Stack(const char* tls, std::uint64_t features) {
        quiet_log();
        setenv("LOOM_TLS", tls, 1);
        loom_params_t params{};
        params.field_mask = LOOM_PARAM_FIELD_FEATURES;
        params.features = features;
        if (loom_init(&params, &ctx) != LOOM_OK || loom_worker_create(ctx, nullptr, &worker) != LOOM_OK) {
            std::fprintf(stderr, "fuzz: cannot open a context and worker over %s\n", tls);
            std::abort();
        }
    }
    ~Stack() {
        loom_worker_destroy(worker);
        loom_cleanup(ctx);
    }

    /** An endpoint of this worker to itself; aborts on failure. */
    loom_ep_h self_ep() const {
        void* addr;
        size_t len;
        loom_ep_h ep = nullptr;
        if (loom_worker_get_address(worker, &addr, &len) != LOOM_OK) std::abort();
        loom_ep_params_t p{};
        p.field_mask = LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS;
        p.address = addr;
        if (loom_ep_create(worker, &p, &ep) != LOOM_OK) std::abort();
        loom_worker_release_address(worker, addr);
        return ep;
    }
};

}  // namespace loom::fuzz
