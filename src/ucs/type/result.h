/**
 * Result<T>: a value or an error Status, for set-up paths (opening devices,
 * parsing addresses). The data path returns plain Status codes instead.
 */
#pragma once

#include "ucs/type/status.h"

#include <cassert>
#include <type_traits>
#include <utility>
#include <variant>

namespace loom {

template <typename T>
class [[nodiscard]] Result {
public:
    static_assert(!std::is_same_v<std::remove_cv_t<T>, Status>,
                  "Result<Status> is meaningless: return Status");

    /** A successful result holding @p value. */
    Result(T value) : storage_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design

    /** A failed result; @p status must be an error code. */
    Result(Status status) : storage_(std::in_place_index<1>, status) {  // NOLINT: implicit by design
        assert(is_error(status) && "Result built from a non-error status");
    }

    /** True when a value is held. */
    bool ok() const noexcept { return storage_.index() == 0; }
    explicit operator bool() const noexcept { return ok(); }

    /** Status::ok when a value is held, else the error. */
    Status status() const noexcept { return ok() ? Status::ok : std::get<1>(storage_); }

    T& value() & { return std::get<0>(storage_); }
    const T& value() const& { return std::get<0>(storage_); }
    T&& value() && { return std::get<0>(std::move(storage_)); }

    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }

    /** The value, or @p fallback when this holds an error. */
    T value_or(T fallback) const& { return ok() ? value() : std::move(fallback); }

private:
    std::variant<T, Status> storage_;
};

}  // namespace loom
