/**
 * The uct worker: the progress engine every iface of one thread (or one
 * serialized group of threads) registers with.
 */
#pragma once

#include "ucs/progress/callback_queue.h"
#include "ucs/type/status.h"

namespace loom::uct {

/** How the worker may be called. */
enum class ThreadMode : std::uint8_t {
    single,      ///< one thread only
    serialized,  ///< several threads, never at once (the caller serializes)
    multi,       ///< several threads at once (ucp adds the locking)
};

/** A progress engine: ifaces add their progress functions; progress() runs them all. */
class Worker {
public:
    explicit Worker(ThreadMode mode = ThreadMode::single) : mode_(mode) {}
    Worker(const Worker&) = delete;
    Worker& operator=(const Worker&) = delete;

    /** Runs every registered progress function once; returns how many events they handled. */
    unsigned progress() { return progress_q_.dispatch(); }

    /** The callback queue ifaces register their progress functions with. */
    ucs::CallbackQueue& progress_queue() { return progress_q_; }

    ThreadMode thread_mode() const { return mode_; }

private:
    ucs::CallbackQueue progress_q_;
    ThreadMode mode_;
};

}  // namespace loom::uct
