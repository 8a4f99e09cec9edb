/**
 * Intrusive hash table keyed by a 64-bit key, for lookups such as exact tag
 * matching where one key may be present many times and the elements of one key
 * must come out in insertion (FIFO) order.
 *
 *     struct Recv { ListLink hlink; std::uint64_t tag; ... };
 *     HashList<Recv, &Recv::hlink, &Recv::tag> expected;
 *     Status s = expected.init(1024);      // set-up: allocates the buckets
 *     expected.insert(recv);               // O(1), never allocates
 *     Recv* r = expected.pop(tag);         // oldest element with that tag, or nullptr
 *
 * Buckets are intrusive doubly-linked lists (ListLink, 16 bytes per element), so
 * insert and remove are O(1) and a lookup walks one bucket. Every element of one key
 * lands in the same bucket and is appended at its tail, which is what keeps FIFO
 * order per key, across collisions with other keys.
 *
 * The bucket count is a power of two fixed by init(); the table never grows by
 * itself, because growing allocates and the insert path must not. A control path
 * that sees size() well above num_buckets() calls rehash(), which keeps per-key
 * order. Not thread-safe: a table is owned by one worker.
 */
#pragma once

#include "ucs/datastruct/checks.h"
#include "ucs/datastruct/list.h"
#include "ucs/debug/assert.h"
#include "ucs/sys/compiler.h"
#include "ucs/type/status.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

namespace loom::ucs {

/** 64-bit finalizer (from MurmurHash3): spreads structured keys such as tags over every bit. */
constexpr std::uint64_t hash_u64(std::uint64_t key) noexcept {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    key *= 0xc4ceb9fe1a85ec53ULL;
    key ^= key >> 33;
    return key;
}

/**
 * Intrusive multimap from the 64-bit member @p Key of T to elements of T, linked
 * through the ListLink member @p Link. The key of an element must not change while
 * it is in the table.
 */
template <typename T, ListLink T::*Link, std::uint64_t T::*Key>
class HashList {
public:
    using Bucket = List<T, Link>;

    /** Largest bucket count init() and rehash() accept. */
    static constexpr std::size_t kMaxBuckets = std::size_t{1} << 30;

    /** A table with no buckets: init() must be called before anything is inserted. */
    HashList() noexcept = default;

    HashList(const HashList&) = delete;
    HashList& operator=(const HashList&) = delete;

    /**
     * Allocates @p num_buckets buckets (a power of two, at most kMaxBuckets).
     * Returns invalid_param for a bad count or a second call, no_memory when the
     * buckets cannot be allocated.
     */
    [[nodiscard]] Status init(std::size_t num_buckets) noexcept {
        if (buckets_) return detail::reinit_error("hash list");
        return allocate(num_buckets, buckets_, mask_);
    }

    /** True when the table has no element. */
    bool empty() const noexcept { return size_ == 0; }

    /** Number of elements in the table. */
    std::size_t size() const noexcept { return size_; }

    /** Number of buckets (0 before init()). */
    std::size_t num_buckets() const noexcept { return buckets_ ? mask_ + 1 : 0; }

    /** Index of the bucket that holds @p key; exposed so tests can build collisions. */
    std::size_t bucket_index(std::uint64_t key) const noexcept { return hash_u64(key) & mask_; }

    /** Adds @p elem (not in any list) after every element with the same key; O(1). */
    LOOM_ALWAYS_INLINE void insert(T& elem) noexcept {
        LOOM_ASSERT(buckets_ != nullptr);
        buckets_[bucket_index(elem.*Key)].push_back(elem);
        ++size_;
    }

    /** The oldest element with @p key, or nullptr. */
    LOOM_ALWAYS_INLINE T* find(std::uint64_t key) noexcept {
        if (LOOM_UNLIKELY(buckets_ == nullptr)) return nullptr;
        Bucket& bucket = buckets_[bucket_index(key)];
        for (T& elem : bucket) {
            if (elem.*Key == key) return &elem;
        }
        return nullptr;
    }

    /** The next element (in insertion order) with the same key as @p elem, which must be in the table; or
     * nullptr. */
    T* find_next(T& elem) noexcept {
        Bucket& bucket = buckets_[bucket_index(elem.*Key)];
        for (T* next = bucket.next(elem); next != nullptr; next = bucket.next(*next)) {
            if (next->*Key == elem.*Key) return next;
        }
        return nullptr;
    }

    /** Removes and returns the oldest element with @p key, or nullptr when there is none. */
    LOOM_ALWAYS_INLINE T* pop(std::uint64_t key) noexcept {
        T* elem = find(key);
        if (elem != nullptr) remove(*elem);
        return elem;
    }

    /** Removes @p elem, which must be in this table; O(1). */
    LOOM_ALWAYS_INLINE void remove(T& elem) noexcept {
        LOOM_ASSERT(size_ > 0);
        Bucket::remove(elem);
        --size_;
    }

    /** Number of elements with @p key; O(bucket length). */
    std::size_t count(std::uint64_t key) noexcept {
        std::size_t n = 0;
        for (T* elem = find(key); elem != nullptr; elem = find_next(*elem)) ++n;
        return n;
    }

    /** Calls @p fn(T&) on every element, bucket by bucket; @p fn may remove the element it is given. */
    template <typename Fn>
    void for_each(Fn&& fn) {
        for (std::size_t i = 0; i < num_buckets(); ++i) {
            for (T& elem : buckets_[i].safe()) fn(elem);
        }
    }

    /** Removes every element (resetting their links, so O(n + buckets)). */
    void clear() noexcept {
        for (std::size_t i = 0; i < num_buckets(); ++i) buckets_[i].clear();
        size_ = 0;
    }

    /**
     * Moves every element into @p num_buckets new buckets (a control-path operation:
     * it allocates). Per-key order is kept because each old bucket is drained in
     * order and all elements of one key go to the same new bucket. Returns
     * invalid_param for a bad count and no_memory (with the table unchanged) when
     * allocation fails; also valid as the first set-up call.
     */
    [[nodiscard]] Status rehash(std::size_t num_buckets) noexcept {
        std::unique_ptr<Bucket[]> buckets;
        std::size_t mask = 0;
        Status status = allocate(num_buckets, buckets, mask);
        if (status != Status::ok) return status;
        for (std::size_t i = 0; i < this->num_buckets(); ++i) {
            while (T* elem = buckets_[i].pop_front()) {
                buckets[hash_u64(elem->*Key) & mask].push_back(*elem);
            }
        }
        buckets_ = std::move(buckets);
        mask_ = mask;
        return Status::ok;
    }

private:
    static Status allocate(std::size_t num_buckets, std::unique_ptr<Bucket[]>& buckets,
                           std::size_t& mask) noexcept {
        Status status = detail::check_pow2_size("hash list buckets", num_buckets, kMaxBuckets);
        if (status != Status::ok) return status;
        buckets.reset(new (std::nothrow) Bucket[num_buckets]);
        if (!buckets) return detail::alloc_error("hash list buckets", num_buckets * sizeof(Bucket));
        mask = num_buckets - 1;
        return Status::ok;
    }

    std::unique_ptr<Bucket[]> buckets_;
    std::size_t mask_ = 0;
    std::size_t size_ = 0;
};

}  // namespace loom::ucs
