/**
 * Fixed-capacity FIFO ring buffer for single-threaded use (see spsc_ring.h for the
 * lock-free single-producer/single-consumer variant).
 *
 *     RingBuffer<Completion> ring;
 *     if (Status s = ring.init(256); s != Status::ok) return s;   // set-up: allocates once
 *     if (!ring.try_push(c)) ... full ...                          // never allocates
 *     Completion c; while (ring.try_pop(c)) ...
 *
 * The capacity is a power of two chosen at init(), so a slot index is a mask of a
 * free-running 64-bit counter: no modulo, no wrap flag, and full/empty are told
 * apart by the counter difference (unsigned arithmetic stays correct when the
 * counters overflow because the capacity divides 2^64). Slots are constructed in
 * place on push and destroyed on pop, so T need not be default-constructible.
 */
#pragma once

#include "ucs/datastruct/checks.h"
#include "ucs/debug/assert.h"
#include "ucs/memory/aligned.h"
#include "ucs/sys/compiler.h"
#include "ucs/type/status.h"

#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>
#include <utility>

namespace loom::ucs {

/** Fixed-capacity single-threaded FIFO of T. */
template <typename T>
class RingBuffer {
    static_assert(std::is_nothrow_move_constructible_v<T> && std::is_nothrow_destructible_v<T>,
                  "ring elements must move and destroy without throwing");

public:
    /** Largest capacity init() accepts. */
    static constexpr std::size_t kMaxCapacity = std::size_t{1} << 32;

    /** A ring of capacity 0 (both empty and full) until init() is called. */
    RingBuffer() noexcept = default;

    /** Destroys the elements still queued and releases the slots. */
    ~RingBuffer() { release(); }

    /** Takes over @p other's slots and elements; @p other is left with capacity 0. */
    RingBuffer(RingBuffer&& other) noexcept { take(other); }

    /** Releases this ring's contents, then takes over @p other's. */
    RingBuffer& operator=(RingBuffer&& other) noexcept {
        if (this != &other) {
            release();
            take(other);
        }
        return *this;
    }

    RingBuffer(const RingBuffer&) = delete;
    RingBuffer& operator=(const RingBuffer&) = delete;

    /**
     * Allocates @p capacity slots (a power of two, 1 to kMaxCapacity). Returns
     * invalid_param for a bad capacity or a second call, no_memory when the slots
     * cannot be allocated.
     */
    [[nodiscard]] Status init(std::size_t capacity) noexcept {
        if (slots_ != nullptr) return detail::reinit_error("ring buffer");
        Status status = detail::check_pow2_size("ring buffer", capacity, kMaxCapacity);
        if (status != Status::ok) return status;
        void* mem = nullptr;
        status = alloc_aligned(capacity * sizeof(T),
                               alignof(T) > kCacheLineSize ? alignof(T) : kCacheLineSize, mem);
        if (status != Status::ok) return status;
        slots_ = static_cast<T*>(mem);
        capacity_ = capacity;
        mask_ = capacity - 1;
        head_ = tail_ = 0;
        return Status::ok;
    }

    /** Number of slots (0 before init()). */
    std::size_t capacity() const noexcept { return capacity_; }

    /** Number of queued elements. */
    std::size_t size() const noexcept { return tail_ - head_; }

    /** True when nothing is queued. */
    bool empty() const noexcept { return tail_ == head_; }

    /** True when every slot is taken (always true before init()). */
    bool full() const noexcept { return tail_ - head_ == capacity_; }

    /** Constructs an element from @p args at the tail; false (nothing built) when full. */
    template <typename... Args>
    [[nodiscard]] LOOM_ALWAYS_INLINE bool try_emplace(Args&&... args) noexcept(
        std::is_nothrow_constructible_v<T, Args...>) {
        if (LOOM_UNLIKELY(full())) return false;
        ::new (static_cast<void*>(&slots_[tail_ & mask_])) T(std::forward<Args>(args)...);
        ++tail_;
        return true;
    }

    /** Copies @p value to the tail; false when full. */
    [[nodiscard]] LOOM_ALWAYS_INLINE bool try_push(const T& value) noexcept(
        std::is_nothrow_copy_constructible_v<T>) {
        return try_emplace(value);
    }

    /** Moves @p value to the tail; false (and @p value untouched) when full. */
    [[nodiscard]] LOOM_ALWAYS_INLINE bool try_push(T&& value) noexcept {
        return try_emplace(std::move(value));
    }

    /** Moves the head element into @p out and removes it; false when empty. */
    [[nodiscard]] LOOM_ALWAYS_INLINE bool try_pop(T& out) noexcept(std::is_nothrow_move_assignable_v<T>) {
        if (LOOM_UNLIKELY(empty())) return false;
        T& slot = slots_[head_ & mask_];
        out = std::move(slot);
        slot.~T();
        ++head_;
        return true;
    }

    /** The head element, or nullptr when empty; use pop() to remove it after working in place. */
    LOOM_ALWAYS_INLINE T* front() noexcept { return empty() ? nullptr : &slots_[head_ & mask_]; }

    /** Destroys and removes the head element; the ring must not be empty. */
    LOOM_ALWAYS_INLINE void pop() noexcept {
        LOOM_ASSERT(!empty());
        slots_[head_ & mask_].~T();
        ++head_;
    }

    /** Destroys every queued element; the capacity stays. */
    void clear() noexcept {
        while (!empty()) pop();
    }

private:
    void release() noexcept {
        clear();
        free_aligned(slots_);
        slots_ = nullptr;
        capacity_ = mask_ = 0;
        head_ = tail_ = 0;
    }

    void take(RingBuffer& other) noexcept {
        slots_ = std::exchange(other.slots_, nullptr);
        capacity_ = std::exchange(other.capacity_, 0);
        mask_ = std::exchange(other.mask_, 0);
        head_ = std::exchange(other.head_, 0);
        tail_ = std::exchange(other.tail_, 0);
    }

    T* slots_ = nullptr;
    std::size_t capacity_ = 0;
    std::size_t mask_ = 0;
    std::size_t head_ = 0;  ///< counter of the next element to pop
    std::size_t tail_ = 0;  ///< counter of the next slot to fill
};

}  // namespace loom::ucs
