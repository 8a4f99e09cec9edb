/**
 * Fixed-capacity lock-free FIFO for exactly one producer thread and one consumer
 * thread (for example a progress thread handing completions to a worker).
 *
 *     SpscRing<Event> ring;
 *     if (Status s = ring.init(1024); s != Status::ok) return s;   // before the threads start
 *     producer:  if (!ring.try_push(ev)) ... full, retry later ...
 *     consumer:  Event ev; while (ring.try_pop(ev)) handle(ev);
 *
 * Synchronisation: the producer fills a slot and then publishes it with a release
 * store of the tail counter; the consumer acquires the tail before reading the slot.
 * Symmetrically the consumer releases the head counter after destroying a slot, and
 * the producer acquires it before reusing the slot. No lock, no read-modify-write.
 *
 * Layout: the producer's counter and the consumer's counter live on separate cache
 * lines, each next to a private copy of the other side's counter; a side reads the
 * other's line only when its copy says the ring looks full (producer) or empty
 * (consumer), so in steady state each line stays in one core's cache.
 *
 * init() and the destructor must not race with the two threads; everything else is
 * producer-only (try_push, try_emplace) or consumer-only (try_pop, front, pop), as
 * marked. Capacity rules and counter arithmetic are those of RingBuffer.
 */
#pragma once

#include "ucs/datastruct/checks.h"
#include "ucs/debug/assert.h"
#include "ucs/memory/aligned.h"
#include "ucs/sys/compiler.h"
#include "ucs/type/status.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>
#include <utility>

namespace loom::ucs {

/** Fixed-capacity single-producer/single-consumer lock-free FIFO of T. */
template <typename T>
class alignas(kCacheLineSize) SpscRing {
    static_assert(std::is_nothrow_move_constructible_v<T> && std::is_nothrow_destructible_v<T>,
                  "ring elements must move and destroy without throwing");
    static_assert(std::atomic<std::size_t>::is_always_lock_free);

public:
    /** Largest capacity init() accepts. */
    static constexpr std::size_t kMaxCapacity = std::size_t{1} << 32;

    /** A ring of capacity 0 (both empty and full) until init() is called. */
    SpscRing() noexcept = default;

    /** Destroys the elements still queued and releases the slots; no thread may still use the ring. */
    ~SpscRing() {
        std::size_t head = cons_.head.load(std::memory_order_acquire);
        std::size_t tail = prod_.tail.load(std::memory_order_acquire);
        for (; head != tail; ++head) slots_[head & mask_].~T();
        free_aligned(slots_);
    }

    SpscRing(const SpscRing&) = delete;
    SpscRing& operator=(const SpscRing&) = delete;

    /**
     * Allocates @p capacity slots (a power of two, 1 to kMaxCapacity), before either
     * thread uses the ring. Returns invalid_param for a bad capacity or a second call,
     * no_memory when the slots cannot be allocated.
     */
    [[nodiscard]] Status init(std::size_t capacity) noexcept {
        if (slots_ != nullptr) return detail::reinit_error("spsc ring");
        Status status = detail::check_pow2_size("spsc ring", capacity, kMaxCapacity);
        if (status != Status::ok) return status;
        void* mem = nullptr;
        status = alloc_aligned(capacity * sizeof(T),
                               alignof(T) > kCacheLineSize ? alignof(T) : kCacheLineSize, mem);
        if (status != Status::ok) return status;
        slots_ = static_cast<T*>(mem);
        capacity_ = capacity;
        mask_ = capacity - 1;
        return Status::ok;
    }

    /** Number of slots (0 before init()). */
    std::size_t capacity() const noexcept { return capacity_; }

    /**
     * Number of queued elements. Exact when called by the consumer or producer while
     * the other side is idle; otherwise a snapshot that may be stale, never above the
     * capacity.
     */
    std::size_t size() const noexcept {
        std::size_t head = cons_.head.load(std::memory_order_acquire);
        std::size_t tail = prod_.tail.load(std::memory_order_acquire);
        std::size_t n = tail - head;
        return n > capacity_ ? capacity_ : n;
    }

    /** True when nothing is queued (exact for the consumer: nothing it can pop). */
    bool empty() const noexcept {
        return cons_.head.load(std::memory_order_relaxed) == prod_.tail.load(std::memory_order_acquire);
    }

    /** Producer: constructs an element from @p args at the tail; false (nothing built) when full. */
    template <typename... Args>
    [[nodiscard]] LOOM_ALWAYS_INLINE bool try_emplace(Args&&... args) noexcept(
        std::is_nothrow_constructible_v<T, Args...>) {
        std::size_t tail = prod_.tail.load(std::memory_order_relaxed);
        if (LOOM_UNLIKELY(tail - prod_.head_cache == capacity_)) {
            prod_.head_cache = cons_.head.load(std::memory_order_acquire);
            if (tail - prod_.head_cache == capacity_) return false;
        }
        ::new (static_cast<void*>(&slots_[tail & mask_])) T(std::forward<Args>(args)...);
        prod_.tail.store(tail + 1, std::memory_order_release);
        return true;
    }

    /** Producer: copies @p value to the tail; false when full. */
    [[nodiscard]] LOOM_ALWAYS_INLINE bool try_push(const T& value) noexcept(
        std::is_nothrow_copy_constructible_v<T>) {
        return try_emplace(value);
    }

    /** Producer: moves @p value to the tail; false (and @p value untouched) when full. */
    [[nodiscard]] LOOM_ALWAYS_INLINE bool try_push(T&& value) noexcept {
        return try_emplace(std::move(value));
    }

    /** Consumer: the head element, or nullptr when empty; pop() removes it after working in place. */
    LOOM_ALWAYS_INLINE T* front() noexcept {
        std::size_t head = cons_.head.load(std::memory_order_relaxed);
        if (LOOM_UNLIKELY(head == cons_.tail_cache)) {
            cons_.tail_cache = prod_.tail.load(std::memory_order_acquire);
            if (head == cons_.tail_cache) return nullptr;
        }
        return &slots_[head & mask_];
    }

    /** Consumer: destroys and removes the head element; front() must have returned it. */
    LOOM_ALWAYS_INLINE void pop() noexcept {
        std::size_t head = cons_.head.load(std::memory_order_relaxed);
        LOOM_ASSERT(head != cons_.tail_cache);
        slots_[head & mask_].~T();
        cons_.head.store(head + 1, std::memory_order_release);
    }

    /** Consumer: moves the head element into @p out and removes it; false when empty. */
    [[nodiscard]] LOOM_ALWAYS_INLINE bool try_pop(T& out) noexcept(std::is_nothrow_move_assignable_v<T>) {
        T* slot = front();
        if (slot == nullptr) return false;
        out = std::move(*slot);
        pop();
        return true;
    }

private:
    /** Written by the producer only. */
    struct alignas(kCacheLineSize) ProducerSide {
        std::atomic<std::size_t> tail{0};  ///< counter of the next slot to fill
        std::size_t head_cache = 0;        ///< last head seen; refreshed only when the ring looks full
    };

    /** Written by the consumer only. */
    struct alignas(kCacheLineSize) ConsumerSide {
        std::atomic<std::size_t> head{0};  ///< counter of the next element to pop
        std::size_t tail_cache = 0;        ///< last tail seen; refreshed only when the ring looks empty
    };

    // Read-only after init(), shared by both sides on its own line.
    T* slots_ = nullptr;
    std::size_t capacity_ = 0;
    std::size_t mask_ = 0;

    ProducerSide prod_;
    ConsumerSide cons_;
};

static_assert(sizeof(SpscRing<std::uint64_t>) == 3 * kCacheLineSize,
              "SpscRing: shared, producer and consumer state take one cache line each");

}  // namespace loom::ucs
