/**
 * MemPool: a pool of fixed-size elements with an inline, lock-free free list, for
 * descriptors and requests on the data path.
 *
 *     MemPool pool;
 *     MemPoolParams params;
 *     params.name = "tcp_tx_desc";
 *     params.elem_size = sizeof(TxDesc) + max_inline;
 *     params.alignment = kCacheLineSize;
 *     params.elems_per_chunk = 256;
 *     params.max_elems = 4096;
 *     if (Status s = pool.init(std::move(params)); s != Status::ok) return s;
 *
 *     void* desc = pool.get();            // a few instructions; nullptr when exhausted
 *     if (desc == nullptr) return Status::no_resource;
 *     ...
 *     pool.put(desc);                     // or MemPool::owner(desc)->put(desc)
 *
 * Memory comes in chunks of elems_per_chunk elements, allocated when the free list
 * runs dry (the out-of-line slow path of get()) until max_elems exist; chunks are
 * only released when the pool is destroyed, so a steady-state data path never
 * allocates. An optional callback initializes every element once, when its chunk is
 * created, for state that survives get/put cycles (e.g. a memory registration).
 *
 * Element layout, inside a chunk, every `stride()` bytes:
 *
 *     [ user header (header_size, rounded up to 8) ][ 8-byte pool word ][ element ... ]
 *                                                                        ^ aligned to `alignment`
 *
 * The pool word links the element into the free list while it is free and holds the
 * owning pool (tagged with bit 0) while it is handed out. That gives owner() without
 * a pool pointer in the element, and lets assertion builds catch a double put(): the
 * word of a free element is a list pointer, which never carries the tag. In
 * AddressSanitizer builds free elements are poisoned, so a use after put() is
 * reported.
 *
 * Thread-safety: none. A pool belongs to one worker (or is protected by its owner's
 * lock); get() and put() take no lock and use no atomics.
 */
#pragma once

#include "ucs/debug/assert.h"
#include "ucs/memory/pages.h"
#include "ucs/sys/build_options.h"
#include "ucs/sys/compiler.h"
#include "ucs/type/status.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#if defined(__SANITIZE_ADDRESS__)
#define LOOM_MEMPOOL_POISON 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LOOM_MEMPOOL_POISON 1
#endif
#endif
#ifdef LOOM_MEMPOOL_POISON
#include <sanitizer/asan_interface.h>
#endif

namespace loom::ucs {

namespace detail {

/** put() checks for double and foreign puts in assertion builds only: it costs a compare on the hot path. */
#ifdef LOOM_ENABLE_ASSERT
inline constexpr bool kMemPoolCheckPut = true;
#else
inline constexpr bool kMemPoolCheckPut = false;
#endif

/** Free elements are poisoned in AddressSanitizer builds, so a use after put() is reported. */
#ifdef LOOM_MEMPOOL_POISON
inline constexpr bool kMemPoolPoison = true;
#else
inline constexpr bool kMemPoolPoison = false;
#endif

/** Marks @p size bytes at @p addr unaddressable (@p poison) or addressable for AddressSanitizer. */
LOOM_ALWAYS_INLINE void asan_poison([[maybe_unused]] const void* addr, [[maybe_unused]] std::size_t size,
                                    [[maybe_unused]] bool poison) noexcept {
#ifdef LOOM_MEMPOOL_POISON
    if (poison) {
        ASAN_POISON_MEMORY_REGION(addr, size);
    } else {
        ASAN_UNPOISON_MEMORY_REGION(addr, size);
    }
#endif
}

}  // namespace detail

/** Parameters of MemPool::init(). */
struct MemPoolParams {
    /** max_elems value meaning "no limit". */
    static constexpr std::size_t kUnlimited = SIZE_MAX;

    std::string name = "mempool";  ///< for logs
    std::size_t elem_size = 0;     ///< bytes per element, > 0
    std::size_t alignment = 8;     ///< element alignment: a power of two, 8 .. page_size()
    std::size_t header_size = 0;   ///< bytes reserved before each element (see header())
    std::size_t elems_per_chunk = 64;
    std::size_t max_elems = kUnlimited;  ///< get() returns nullptr once this many exist and none is free
    /**
     * Chunk backing. `prefer` tries huge pages and falls back to normal pages
     * (logged, and visible in num_hugepage_chunks()); `require` fails the growth
     * instead. Page-backed chunks are filled to the end of their last page, so they
     * may hold more than elems_per_chunk elements.
     */
    HugePagePolicy huge_pages = HugePagePolicy::never;
    /** Called once on every element (element pointer) when its chunk is created. */
    std::function<void(void* elem)> obj_init;
    /**
     * Called once on every element (free or still handed out) when the pool releases its
     * chunks, the counterpart of obj_init.
     */
    std::function<void(void* elem)> obj_cleanup;
    /**
     * Called with the memory of every new chunk (all its elements and headers lie in
     * [base, base + length)) before obj_init runs on its elements, e.g. to register the
     * chunk with a network device once instead of element by element. A status other
     * than ok fails the growth with that status and frees the chunk.
     */
    std::function<Status(void* base, std::size_t length)> chunk_init;
    /** Called with every chunk that chunk_init accepted, just before the chunk is freed. */
    std::function<void(void* base, std::size_t length)> chunk_cleanup;
};

/** Pool of fixed-size elements; see the file comment. Not thread-safe. */
class MemPool {
public:
    /** An uninitialized pool: get() returns nullptr until init() succeeds. */
    MemPool() noexcept = default;

    /** Releases every chunk; warns when elements are still handed out. */
    ~MemPool();

    MemPool(const MemPool&) = delete;
    MemPool& operator=(const MemPool&) = delete;

    /**
     * Checks @p params and sets the pool up; no memory is allocated until the first
     * get() (or reserve()). Returns invalid_param, with one log line naming the bad
     * value, for a zero elem_size, elems_per_chunk or max_elems, an alignment that is
     * not a power of two between 8 and the page size, sizes that overflow, or a
     * second call.
     */
    [[nodiscard]] Status init(MemPoolParams params);

    /**
     * Takes an element. Returns nullptr when the pool is exhausted: max_elems exist
     * and none is free (try_get() says no_resource), or a new chunk could not be
     * allocated (no_memory).
     */
    LOOM_ALWAYS_INLINE void* get() noexcept {
        ElemHeader* hdr = free_list_;
        if (LOOM_UNLIKELY(hdr == nullptr)) return get_slow();
        free_list_ = reinterpret_cast<ElemHeader*>(hdr->word);
        hdr->word = tag_;
        void* elem = hdr + 1;
        unpoison(elem);
        return elem;
    }

    /**
     * Takes an element into @p elem. Returns ok, no_resource when max_elems exist
     * and none is free (transient: retry after a put()), or no_memory when a new
     * chunk could not be allocated; @p elem is null on error.
     */
    [[nodiscard]] LOOM_ALWAYS_INLINE Status try_get(void*& elem) noexcept {
        elem = get();
        return LOOM_LIKELY(elem != nullptr) ? Status::ok : exhausted_status_;
    }

    /** Returns @p elem, which get() of this pool handed out. Assertion builds abort on a double put. */
    LOOM_ALWAYS_INLINE void put(void* elem) noexcept {
        ElemHeader* hdr = static_cast<ElemHeader*>(elem) - 1;
        if constexpr (detail::kMemPoolCheckPut) {
            if (LOOM_UNLIKELY(hdr->word != tag_)) bad_put(elem);
        }
        poison(elem);
        hdr->word = reinterpret_cast<std::uintptr_t>(free_list_);
        free_list_ = hdr;
    }

    /** The pool that handed out @p elem (which must not have been put back). */
    static LOOM_ALWAYS_INLINE MemPool* owner(void* elem) noexcept {
        std::uintptr_t word = (static_cast<ElemHeader*>(elem) - 1)->word;
        LOOM_ASSERT((word & kTagBit) != 0);
        return reinterpret_cast<MemPool*>(word & ~kTagBit);
    }

    /** The header_size bytes reserved before @p elem (8-byte aligned); meaningless when header_size is 0. */
    LOOM_ALWAYS_INLINE void* header(void* elem) const noexcept {
        return static_cast<char*>(elem) - sizeof(ElemHeader) - header_room_;
    }

    /**
     * Grows the pool until at least @p count elements exist (capped at max_elems),
     * so later get() calls do not allocate. Returns ok, or the status of the first
     * growth that failed (no_memory), leaving what was allocated.
     */
    [[nodiscard]] Status reserve(std::size_t count) noexcept;

    /** True after a successful init(). */
    bool initialized() const noexcept { return stride_ != 0; }

    /** Name given in the parameters. */
    const std::string& name() const noexcept { return name_; }

    /** Element size given in the parameters. */
    std::size_t elem_size() const noexcept { return elem_size_; }

    /** Distance between consecutive elements of a chunk (header, pool word, element, padding). */
    std::size_t stride() const noexcept { return stride_; }

    /** Element limit given in the parameters. */
    std::size_t max_elems() const noexcept { return max_elems_; }

    /** Elements created so far (free or handed out). */
    std::size_t num_elems() const noexcept { return num_elems_; }

    /** Chunks allocated so far. */
    std::size_t num_chunks() const noexcept { return num_chunks_; }

    /** Chunks backed by huge pages; below num_chunks() when huge pages were unavailable. */
    std::size_t num_hugepage_chunks() const noexcept { return num_huge_chunks_; }

    /** Free elements, by walking the free list: O(n), for diagnostics and tests. */
    std::size_t count_free() const noexcept;

private:
    /** The pool word in front of every element. */
    struct ElemHeader {
        std::uintptr_t word;  ///< next free ElemHeader* while free; owner | kTagBit while handed out
    };
    static_assert(sizeof(ElemHeader) == 8);

    struct Chunk;

    static constexpr std::uintptr_t kTagBit = 1;

    LOOM_COLD LOOM_NOINLINE void* get_slow() noexcept;
    [[noreturn]] LOOM_COLD LOOM_NOINLINE void bad_put(void* elem) const noexcept;
    Status grow() noexcept;
    void release_chunks() noexcept;

    /** ASan: makes a free element's header and body unaddressable, or addressable again. */
    LOOM_ALWAYS_INLINE void poison(void* elem) const noexcept {
        if constexpr (detail::kMemPoolPoison) {
            detail::asan_poison(elem, elem_size_, true);
            if (header_room_ != 0) detail::asan_poison(header(elem), header_room_, true);
        }
    }
    LOOM_ALWAYS_INLINE void unpoison(void* elem) const noexcept {
        if constexpr (detail::kMemPoolPoison) {
            detail::asan_poison(elem, elem_size_, false);
            if (header_room_ != 0) detail::asan_poison(header(elem), header_room_, false);
        }
    }

    // Fast-path state first: get() and put() touch only these two words of the pool.
    ElemHeader* free_list_ = nullptr;
    std::uintptr_t tag_ = 0;  ///< this | kTagBit, set by init()
    Status exhausted_status_ = Status::no_resource;

    std::size_t elem_size_ = 0;
    std::size_t header_room_ = 0;  ///< header_size rounded up to 8
    std::size_t stride_ = 0;
    std::size_t first_offset_ = 0;  ///< chunk start to the first element
    std::size_t chunk_alignment_ = 0;
    std::size_t elems_per_chunk_ = 0;
    std::size_t max_elems_ = 0;
    HugePagePolicy huge_pages_ = HugePagePolicy::never;
    bool huge_fallback_logged_ = false;
    bool limit_logged_ = false;

    std::size_t num_elems_ = 0;
    std::size_t num_chunks_ = 0;
    std::size_t num_huge_chunks_ = 0;
    Chunk* chunks_ = nullptr;

    std::string name_;
    std::function<void(void*)> obj_init_;
    std::function<void(void*)> obj_cleanup_;
    std::function<Status(void*, std::size_t)> chunk_init_;
    std::function<void(void*, std::size_t)> chunk_cleanup_;
};

}  // namespace loom::ucs
