/**
 * Parameter checks shared by the containers' set-up functions, kept out of line so
 * the header-only containers carry no logging code of their own.
 */
#pragma once

#include "ucs/type/status.h"

#include <cstddef>
#include <string_view>

namespace loom::ucs::detail {

/**
 * Checks that @p value is a power of two no larger than @p max. Returns ok, or
 * invalid_param after logging one line naming @p what and the value.
 */
[[nodiscard]] Status check_pow2_size(std::string_view what, std::size_t value, std::size_t max) noexcept;

/** Logs that set-up of @p what was called twice and returns invalid_param. */
[[nodiscard]] Status reinit_error(std::string_view what) noexcept;

/** Logs that @p bytes could not be allocated for @p what and returns no_memory. */
[[nodiscard]] Status alloc_error(std::string_view what, std::size_t bytes) noexcept;

}  // namespace loom::ucs::detail
