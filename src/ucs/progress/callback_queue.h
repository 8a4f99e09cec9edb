/**
 * CallbackQueue: the heart of the progress engine. Workers and transports register
 * plain function pointers that poll for completions; one dispatcher thread calls
 * dispatch() in its progress loop and gets back the number of events processed.
 *
 * Layout: the first kFastSlots persistent callbacks live in a fixed array walked by an
 * inline loop (two cache lines together with the queue's state); any further callback
 * and every oneshot callback goes to a slow list that one branch skips when it is empty.
 *
 * Threading model (the exact guarantees):
 *  - dispatch() is called by at most one thread at a time, "the dispatcher". It takes no
 *    lock and allocates nothing unless an add or remove happened since the previous
 *    dispatch (noticed through one atomic flag) or a oneshot callback ran.
 *  - add(), add_oneshot(), remove() and remove_if() may be called from any thread,
 *    including from inside a callback while dispatch() runs. They take an internal lock
 *    and queue the change; the dispatcher applies queued changes at the start of its next
 *    dispatch(), so a callback added while dispatch() runs is first called by the next one.
 *  - remove() called by the dispatcher thread (from a callback, or between dispatches):
 *    once it returns, the callback is never called again, not even later in the same
 *    dispatch pass. This is what makes removing yourself or another callback from inside
 *    a callback safe.
 *  - remove() called by another thread: the callback may be running at that moment and
 *    may still be called by the dispatch() in progress, but it is not called by any
 *    dispatch() that starts after remove() returned (as ordered by whatever synchronizes
 *    the two threads). To release the callback's argument safely from another thread,
 *    either synchronize with the dispatcher (e.g. wait for one complete dispatch pass that
 *    started after remove() returned), or post a oneshot callback that removes the
 *    callback and frees the argument on the dispatcher thread.
 *  - No order among callbacks is guaranteed; every registered callback is called once
 *    per dispatch().
 *  - dispatch() is not re-entrant: a callback that calls dispatch() on its own queue gets
 *    0 back and nothing is dispatched. Callbacks must not throw (dispatch() is noexcept).
 *    Destroying the queue while dispatch() runs is undefined.
 */
#pragma once

#include "ucs/sys/compiler.h"
#include "ucs/type/result.h"
#include "ucs/type/status.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#if !defined(__x86_64__) && !defined(__aarch64__)
#include <pthread.h>
#endif

namespace loom::ucs {

/** A progress callback: polls for work on behalf of @p arg, returns the number of events processed. */
using ProgressCallback = unsigned (*)(void* arg);

/**
 * Handle of a registered callback. Handles are never reused while a program could
 * still hold them by mistake: a slot's handle changes every time the slot is recycled,
 * so removing a stale handle returns no_element instead of removing someone else's.
 */
enum class CallbackId : std::uint64_t { invalid = 0 };

/** The progress engine's callback list; see the file comment for the threading guarantees. */
class alignas(kCacheLineSize) CallbackQueue {
public:
    /** Number of persistent callbacks dispatched from the fixed array. */
    static constexpr unsigned kFastSlots = 7;

    /** An empty queue. */
    CallbackQueue();
    /** Drops every callback; no thread may be inside dispatch(). */
    ~CallbackQueue();
    CallbackQueue(const CallbackQueue&) = delete;
    CallbackQueue& operator=(const CallbackQueue&) = delete;

    /**
     * Registers @p cb to be called with @p arg on every dispatch(), starting with the
     * next dispatch() call. Returns the handle for remove(); invalid_param when @p cb is
     * null, no_memory when the bookkeeping cannot grow. Any thread.
     */
    Result<CallbackId> add(ProgressCallback cb, void* arg);

    /**
     * Registers @p cb to be called once, by the next dispatch(), after which it is removed
     * automatically (deferred work). Its return value counts like any callback's. remove()
     * cancels it as long as it has not run; once it has run and dispatch() has retired it
     * (at the end of the same dispatch() call), remove() returns no_element. Errors as add().
     */
    Result<CallbackId> add_oneshot(ProgressCallback cb, void* arg);

    /**
     * Unregisters the callback behind @p id, with the guarantees in the file comment.
     * O(1): the dispatcher's arrays are compacted at its next dispatch(). Returns
     * no_element (logged at debug level: a oneshot that already ran is a normal race)
     * when @p id is unknown, stale or already removed. Any thread.
     */
    Status remove(CallbackId id) noexcept;

    /**
     * Unregisters every callback for which @p pred(ProgressCallback, void* arg) returns
     * true, with the same guarantees as remove(); meant for cleanup by argument when an
     * object owning several callbacks goes away. @p pred runs under the queue's lock and
     * must not call back into this queue. Returns the number of callbacks removed.
     */
    template <typename Pred>
    unsigned remove_if(Pred&& pred) {
        using P = std::remove_reference_t<Pred>;
        return remove_matching(
            [](void* ctx, ProgressCallback cb, void* arg) -> bool {
                return static_cast<bool>((*static_cast<P*>(ctx))(cb, arg));
            },
            const_cast<void*>(static_cast<const void*>(std::addressof(pred))));
    }

    /**
     * Calls every registered callback once and returns the sum of their results. The
     * dispatcher thread only; returns 0 without calling anything when called from inside
     * one of this queue's callbacks.
     */
    LOOM_ALWAYS_INLINE unsigned dispatch() noexcept {
        const void* self = thread_token();
        if (LOOM_UNLIKELY(hot_.dispatcher.load(std::memory_order_relaxed) == self)) {
            return 0;  // nested call from a callback: the arrays are being walked
        }
        if (LOOM_UNLIKELY(hot_.pending.load(std::memory_order_acquire))) {
            apply_pending();
        }
        hot_.dispatcher.store(self, std::memory_order_relaxed);
        unsigned count = 0;
        // fast_count and the elements are re-read after every call on purpose: a callback
        // may neutralize an element (remove) but never changes the count during a pass.
        for (unsigned i = 0; i < hot_.fast_count; ++i) {
            count += hot_.fast[i].cb(hot_.fast[i].arg);
        }
        if (LOOM_UNLIKELY(hot_.has_slow)) {
            count += dispatch_slow();
        }
        hot_.dispatcher.store(nullptr, std::memory_order_relaxed);
        return count;
    }

    /** Number of registered callbacks (removed ones excluded, even before compaction). Any thread. */
    std::size_t size() const;

private:
    static constexpr std::uint32_t kNil = ~std::uint32_t{0};

    struct FastElem {
        ProgressCallback cb;
        void* arg;
    };

    struct SlowElem {
        ProgressCallback cb;
        void* arg;
        std::uint32_t slot;
        bool oneshot;
    };

    /** Everything dispatch() touches when nothing changed: two cache lines. */
    struct Hot {
        std::atomic<const void*> dispatcher{nullptr};  ///< token of the thread inside dispatch()
        std::atomic<bool> pending{false};              ///< changes queued since the last apply
        std::uint8_t fast_count = 0;
        bool has_slow = false;
        FastElem fast[kFastSlots] = {};
    };
    static_assert(sizeof(Hot) <= 2 * kCacheLineSize, "the fast path must fit in two cache lines");

    enum class State : std::uint8_t { free, adding, active, removing };
    enum class Place : std::uint8_t { none, fast, slow };

    /** Bookkeeping of one registration; guarded by lock_. */
    struct Entry {
        ProgressCallback cb = nullptr;
        void* arg = nullptr;
        std::uint32_t generation = 1;  ///< part of the handle; bumped when the slot is freed
        std::uint32_t next = kNil;     ///< free-list or pending-list link
        std::uint32_t index = 0;       ///< position in fast or slow array
        State state = State::free;
        Place place = Place::none;
        bool oneshot = false;
        bool on_pending = false;
    };

    /** Identifies the calling thread without a syscall or TLS lookup (the thread pointer). */
    static LOOM_ALWAYS_INLINE const void* thread_token() noexcept {
#if defined(__x86_64__) || defined(__aarch64__)
        return __builtin_thread_pointer();
#else
        return reinterpret_cast<const void*>(pthread_self());
#endif
    }

    static unsigned noop_callback(void* arg) noexcept;

    Result<CallbackId> add_entry(ProgressCallback cb, void* arg, bool oneshot);
    unsigned remove_matching(bool (*match)(void* ctx, ProgressCallback cb, void* arg), void* ctx);
    LOOM_NOINLINE void apply_pending() noexcept;
    LOOM_NOINLINE unsigned dispatch_slow() noexcept;
    void apply_locked() noexcept;
    void mark_removing_locked(std::uint32_t slot) noexcept;
    void push_pending_locked(std::uint32_t slot) noexcept;
    void free_slot_locked(std::uint32_t slot) noexcept;
    void place_locked(std::uint32_t slot) noexcept;
    void unplace_locked(std::uint32_t slot) noexcept;
    void slow_push_locked(const SlowElem& elem) noexcept;
    void promote_locked() noexcept;
    void retire_fired_oneshots() noexcept;

    Hot hot_;

    // Dispatcher-owned: read by dispatch() without the lock, modified only by the
    // dispatcher thread while holding lock_ (apply, retire) or neutralized by it (remove).
    std::uint32_t fast_slot_[kFastSlots] = {};  ///< entry slot of each fast element
    std::vector<SlowElem> slow_;

    // Guarded by lock_.
    mutable std::mutex lock_;
    std::vector<Entry> entries_;
    /// Always empty, with capacity for every live entry, so the dispatcher can grow
    /// slow_ by swapping buffers instead of allocating.
    std::vector<SlowElem> slow_spare_;
    std::uint32_t free_head_ = kNil;
    std::uint32_t pending_head_ = kNil;
    std::uint32_t pending_tail_ = kNil;
    std::size_t live_count_ = 0;  ///< entries not free (including removed, not yet compacted)
    std::size_t registered_ = 0;  ///< entries adding or active
};

}  // namespace loom::ucs
