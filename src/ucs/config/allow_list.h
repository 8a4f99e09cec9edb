/**
 * AllowList: which named things (transport modules, devices) a user lets Loom use.
 * Written in configuration as "all", "tcp,shm" (only those) or "^tcp,shm" (all but
 * those); see AllowListParser in ucs/config/parser.h.
 */
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::ucs::config {

class AllowList {
public:
    enum class Mode : std::uint8_t {
        all,         ///< every name is allowed
        only,        ///< only the listed names (an empty list allows nothing)
        all_except,  ///< every name except the listed ones
    };

    /** Allows everything. */
    AllowList() = default;

    /** Allows everything. */
    static AllowList all() { return AllowList(); }

    /** Allows only @p names; duplicates are dropped, the order is kept. */
    static AllowList only(std::vector<std::string> names) { return AllowList(Mode::only, std::move(names)); }

    /** Allows every name except @p names; an empty list allows everything (and becomes Mode::all). */
    static AllowList all_except(std::vector<std::string> names) {
        return names.empty() ? all() : AllowList(Mode::all_except, std::move(names));
    }

    /** How names() is read: ignored (all), the allowed names (only) or the excluded ones (all_except). */
    Mode mode() const noexcept { return mode_; }

    /** The listed names, in the order given. */
    const std::vector<std::string>& names() const noexcept { return names_; }

    /** True when @p name may be used; names compare case-insensitively. */
    bool allows(std::string_view name) const noexcept;

    /** The configuration syntax of this list: "all", "tcp,shm" or "^tcp,shm". */
    std::string to_string() const;

    bool operator==(const AllowList&) const = default;

private:
    AllowList(Mode mode, std::vector<std::string> names);

    Mode mode_ = Mode::all;
    std::vector<std::string> names_;
};

}  // namespace loom::ucs::config
