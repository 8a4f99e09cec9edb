#include "ucs/memory/aligned.h"

#include "ucs/memory/memory_log.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace loom::ucs {

Status alloc_aligned(std::size_t size, std::size_t alignment, void*& out) noexcept {
    out = nullptr;
    if (!std::has_single_bit(alignment)) {
        LOOM_LOG_ERROR("aligned allocation: alignment {} is not a power of two", alignment);
        return Status::invalid_param;
    }
    if (size == 0) {
        LOOM_LOG_ERROR("aligned allocation: size 0 (alignment {})", alignment);
        return Status::invalid_param;
    }
    if (size > static_cast<std::size_t>(PTRDIFF_MAX)) {
        // No object can be this large; refuse before the allocator (or a sanitizer's) sees it.
        LOOM_LOG_ERROR("aligned allocation of {} bytes: too large", size);
        return Status::no_memory;
    }
    // posix_memalign wants at least pointer alignment; anything stricter it takes as is.
    if (alignment < sizeof(void*)) alignment = sizeof(void*);
    void* ptr = nullptr;
    int rc = ::posix_memalign(&ptr, alignment, size);
    if (rc != 0) {
        LOOM_LOG_ERROR("aligned allocation of {} bytes (alignment {}) failed: {}", size, alignment,
                       std::strerror(rc));
        return Status::no_memory;
    }
    out = ptr;
    return Status::ok;
}

void free_aligned(void* ptr) noexcept {
    std::free(ptr);
}

Result<AlignedPtr<void>> make_aligned(std::size_t size, std::size_t alignment) noexcept {
    void* ptr = nullptr;
    Status status = alloc_aligned(size, alignment, ptr);
    if (status != Status::ok) return status;
    return AlignedPtr<void>(ptr);
}

}  // namespace loom::ucs
