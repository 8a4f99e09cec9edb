#include "ucs/datastruct/checks.h"

#include "ucs/debug/log.h"

#include <bit>

namespace loom::ucs::detail {

Status check_pow2_size(std::string_view what, std::size_t value, std::size_t max) noexcept {
    if (!std::has_single_bit(value)) {
        LOOM_LOG_ERROR("{}: size {} is not a power of two", what, value);
        return Status::invalid_param;
    }
    if (value > max) {
        LOOM_LOG_ERROR("{}: size {} exceeds the maximum {}", what, value, max);
        return Status::invalid_param;
    }
    return Status::ok;
}

Status reinit_error(std::string_view what) noexcept {
    LOOM_LOG_ERROR("{}: already initialized", what);
    return Status::invalid_param;
}

Status alloc_error(std::string_view what, std::size_t bytes) noexcept {
    LOOM_LOG_ERROR("{}: cannot allocate {} bytes", what, bytes);
    return Status::no_memory;
}

}  // namespace loom::ucs::detail
