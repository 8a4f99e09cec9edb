/**
 * Aligned heap allocation and alignment arithmetic.
 *
 *     void* buf;
 *     if (Status s = alloc_aligned(4096, kCacheLineSize, buf); s != Status::ok) return s;
 *     AlignedPtr<void> owner(buf);   // or make_aligned(), which returns the owner directly
 */
#pragma once

#include "ucs/type/result.h"
#include "ucs/type/status.h"

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace loom::ucs {

/** @p value rounded up to a multiple of @p alignment (a power of two). */
constexpr std::size_t align_up(std::size_t value, std::size_t alignment) noexcept {
    return (value + alignment - 1) & ~(alignment - 1);
}

/** @p value rounded down to a multiple of @p alignment (a power of two). */
constexpr std::size_t align_down(std::size_t value, std::size_t alignment) noexcept {
    return value & ~(alignment - 1);
}

/** True when @p ptr is a multiple of @p alignment (a power of two). */
inline bool is_aligned(const void* ptr, std::size_t alignment) noexcept {
    return (reinterpret_cast<std::uintptr_t>(ptr) & (alignment - 1)) == 0;
}

/**
 * Allocates @p size bytes aligned to @p alignment (a power of two; values below the
 * pointer size are raised to it) and stores the address in @p out. Release with
 * free_aligned(). Returns invalid_param for a zero size or an alignment that is not
 * a power of two, no_memory when the allocation fails or the size exceeds
 * PTRDIFF_MAX; @p out is null on error.
 */
[[nodiscard]] Status alloc_aligned(std::size_t size, std::size_t alignment, void*& out) noexcept;

/** Releases memory from alloc_aligned(); null is ignored. */
void free_aligned(void* ptr) noexcept;

/** unique_ptr deleter for memory from alloc_aligned(). */
struct AlignedDelete {
    void operator()(void* ptr) const noexcept { free_aligned(ptr); }
};

/** Owner of an alloc_aligned() block, viewed as T. */
template <typename T = void>
using AlignedPtr = std::unique_ptr<T, AlignedDelete>;

/** alloc_aligned() returning the owner; the error statuses are the same. */
Result<AlignedPtr<void>> make_aligned(std::size_t size, std::size_t alignment) noexcept;

}  // namespace loom::ucs
