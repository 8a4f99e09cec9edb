/**
 * Compiler helpers shared by every layer: branch hints, inlining control and the
 * cache-line size that hot-path structures are laid out against.
 */
#pragma once

#include <cstddef>

#define LOOM_LIKELY(x)      __builtin_expect(!!(x), 1)
#define LOOM_UNLIKELY(x)    __builtin_expect(!!(x), 0)
#define LOOM_NOINLINE       __attribute__((noinline))
#define LOOM_COLD           __attribute__((cold))
#define LOOM_ALWAYS_INLINE  inline __attribute__((always_inline))
#define LOOM_PRINTF(f, a)   __attribute__((format(printf, f, a)))

namespace loom {

/** Cache line size the data structures are padded and aligned to (x86-64, aarch64). */
inline constexpr std::size_t kCacheLineSize = 64;

}  // namespace loom
