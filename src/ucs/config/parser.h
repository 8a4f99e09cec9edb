/**
 * Typed parsers of configuration values.
 *
 * A parser turns the text of a variable into a typed value, prints a value back in
 * canonical form (parsing the printed text gives the same value, so `loom_info -c`
 * output can be pasted into a configuration file) and describes what it accepts, for
 * error messages and the generated documentation. Parsers are small copyable objects
 * configured fluently where a field needs it:
 *
 *   IntParser<unsigned>().range(1, 64).allow_inf()
 *   SizeParser().allow_inf()
 *   EnumParser<Mode>({{"poll", Mode::poll}, {"event", Mode::event}})
 *
 * Every parser's parse(), print(), syntax() and what() follow the ValueParser
 * contract below. Accepted syntax (every parser except StringParser ignores leading
 * and trailing white space):
 *   bool       y, yes, n, no, on, off, true, false, 1, 0 (any case); prints yes / no
 *   ternary    yes, no, try, auto (and the bool spellings for yes and no)
 *   integer    decimal or 0x hexadecimal, optionally inf / auto where the field allows
 *   size       bytes with an optional k, m, g or t suffix (powers of 1024, an optional
 *              trailing b: 64k, 64kb, 1.5m); fractions must come out as whole bytes;
 *              prints with the largest suffix that divides exactly (65536 -> 64k)
 *   time       a number and a unit: ns, us, ms, s or min (300ns, 1.5us, 20s, 2min);
 *              "0" needs no unit; fractions must come out as whole nanoseconds;
 *              prints with the largest unit that divides exactly (1500ms -> 1500ms,
 *              2000ms -> 2s)
 *   enum       one of a list of names (any case)
 *   list       comma-separated names; "" is the empty list; empty items are errors
 *   allow-list all, a list (only those), or ^ and a list (all but those)
 *   string     anything, optionally checked by a validator
 */
#pragma once

#include "ucs/config/allow_list.h"
#include "ucs/type/status.h"

#include <fmt/format.h>

#include <chrono>
#include <concepts>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace loom::ucs::config {

/**
 * What every parser provides. parse() returns Status::ok, Status::invalid_config for
 * text that does not have the expected form or Status::out_of_range for a well-formed
 * value the field does not allow; on failure it leaves @p value unchanged and may put
 * a short explanation in @p reason (otherwise the caller says "invalid <what()>").
 */
template <typename P>
concept ValueParser = std::copy_constructible<P> &&
    requires(const P& parser, std::string_view text, typename P::value_type& value,
             const typename P::value_type& const_value, std::string& reason) {
    { parser.parse(text, value, reason) } -> std::same_as<Status>;
    { parser.print(const_value) } -> std::same_as<std::string>;
    { parser.syntax() } -> std::same_as<std::string>;
    { parser.what() } -> std::same_as<std::string>;
};

/** A parser whose values have type T, the type of the member it fills. */
template <typename P, typename T>
concept ParserFor = ValueParser<P> && std::same_as<T, typename P::value_type>;

/** The value an integer field holds when set to "inf" (fields that allow it). */
template <std::integral T>
inline constexpr T kInf = std::numeric_limits<T>::max();

/** The value an integer field holds when set to "auto" (fields that allow it). */
template <std::integral T>
inline constexpr T kAuto = std::numeric_limits<T>::max() - 1;

/** A size field set to "inf". */
inline constexpr std::size_t kSizeInf = kInf<std::size_t>;

/** A size field set to "auto". */
inline constexpr std::size_t kSizeAuto = kAuto<std::size_t>;

/** A time field set to "inf". */
inline constexpr std::chrono::nanoseconds kTimeInf = std::chrono::nanoseconds::max();

/** Value of a ternary field. */
enum class Ternary : std::uint8_t {
    no,
    yes,
    try_,   ///< use it if it works, silently fall back otherwise
    auto_,  ///< let Loom decide
};

/** Configuration spelling of a ternary value: "no", "yes", "try" or "auto". */
std::string_view to_string(Ternary value) noexcept;

namespace detail {

/** @p text without leading and trailing white space. */
std::string_view trim(std::string_view text) noexcept;

/** Case-insensitive ASCII comparison. */
bool iequals(std::string_view a, std::string_view b) noexcept;

/** Parses a decimal or 0x-hexadecimal integer with an optional sign; out_of_range on overflow. */
Status parse_int64(std::string_view text, std::int64_t& value) noexcept;

/** Parses a decimal or 0x-hexadecimal integer; out_of_range for negative numbers or overflow. */
Status parse_uint64(std::string_view text, std::uint64_t& value) noexcept;

}  // namespace detail

/** Booleans: y/yes/on/true/1 and n/no/off/false/0, any case. Prints "yes" or "no". */
class BoolParser {
public:
    using value_type = bool;
    Status parse(std::string_view text, bool& value, std::string& reason) const;
    std::string print(const bool& value) const;
    std::string syntax() const;
    std::string what() const { return "boolean"; }
};

/** Ternary values: yes, no, try and, unless disallow_auto(), auto. */
class TernaryParser {
public:
    using value_type = Ternary;

    /** A parser that rejects "auto", for fields where Loom has nothing to decide. */
    TernaryParser disallow_auto() const {
        TernaryParser copy = *this;
        copy.allow_auto_ = false;
        return copy;
    }

    Status parse(std::string_view text, Ternary& value, std::string& reason) const;
    std::string print(const Ternary& value) const;
    std::string syntax() const;
    std::string what() const { return "ternary value"; }

private:
    bool allow_auto_ = true;
};

/**
 * Integers of type T (signed or unsigned), optionally limited to a range and
 * optionally accepting "inf" (kInf<T>) and "auto" (kAuto<T>). A number that equals
 * one of the enabled special values is out of range, so reading back is unambiguous.
 */
template <std::integral T>
class IntParser {
    static_assert(!std::same_as<T, bool>, "a bool field takes BoolParser");

public:
    using value_type = T;

    /** Accepts only numbers from @p min to @p max (inclusive). */
    IntParser range(T min, T max) const {
        IntParser copy = *this;
        copy.min_ = min;
        copy.max_ = max;
        copy.ranged_ = true;
        return copy;
    }

    /** Also accepts "inf", stored as kInf<T>. */
    IntParser allow_inf() const {
        IntParser copy = *this;
        copy.inf_ = true;
        return copy;
    }

    /** Also accepts "auto", stored as kAuto<T>. */
    IntParser allow_auto() const {
        IntParser copy = *this;
        copy.auto_ = true;
        return copy;
    }

    Status parse(std::string_view text, T& value, std::string& reason) const {
        text = detail::trim(text);
        if (inf_ && detail::iequals(text, "inf")) {
            value = kInf<T>;
            return Status::ok;
        }
        if (auto_ && detail::iequals(text, "auto")) {
            value = kAuto<T>;
            return Status::ok;
        }
        T parsed;
        if constexpr (std::is_signed_v<T>) {
            std::int64_t wide;
            Status status = detail::parse_int64(text, wide);
            if (status != Status::ok) return status;
            if (!std::in_range<T>(wide)) return Status::out_of_range;
            parsed = static_cast<T>(wide);
        } else {
            std::uint64_t wide;
            Status status = detail::parse_uint64(text, wide);
            if (status != Status::ok) return status;
            if (!std::in_range<T>(wide)) return Status::out_of_range;
            parsed = static_cast<T>(wide);
        }
        // The special values must not be writable as numbers, or print() would not round-trip.
        if ((inf_ && parsed == kInf<T>) || (auto_ && parsed == kAuto<T>)) {
            reason = fmt::format("{} is reserved for {}", parsed, parsed == kInf<T> ? "inf" : "auto");
            return Status::out_of_range;
        }
        if (parsed < min_ || parsed > max_) return Status::out_of_range;
        value = parsed;
        return Status::ok;
    }

    std::string print(const T& value) const {
        if (inf_ && value == kInf<T>) return "inf";
        if (auto_ && value == kAuto<T>) return "auto";
        return std::to_string(value);
    }

    std::string syntax() const {
        std::string text;
        if (ranged_) {
            text = fmt::format("an integer from {} to {}", min_, max_);
        } else {
            text = std::is_signed_v<T> ? "an integer" : "a non-negative integer";
        }
        if (inf_ && auto_) return text + ", inf or auto";
        if (inf_) return text + ", or inf";
        if (auto_) return text + ", or auto";
        return text;
    }

    std::string what() const { return "integer"; }

private:
    T min_ = std::numeric_limits<T>::lowest();
    T max_ = std::numeric_limits<T>::max();
    bool ranged_ = false;
    bool inf_ = false;
    bool auto_ = false;
};

/** Sizes in bytes with binary k/m/g/t suffixes, optionally "inf" (kSizeInf) and "auto" (kSizeAuto). */
class SizeParser {
public:
    using value_type = std::size_t;

    /** Also accepts "inf", stored as kSizeInf. */
    SizeParser allow_inf() const {
        SizeParser copy = *this;
        copy.inf_ = true;
        return copy;
    }

    /** Also accepts "auto", stored as kSizeAuto. */
    SizeParser allow_auto() const {
        SizeParser copy = *this;
        copy.auto_ = true;
        return copy;
    }

    Status parse(std::string_view text, std::size_t& value, std::string& reason) const;
    std::string print(const std::size_t& value) const;
    std::string syntax() const;
    std::string what() const { return "size"; }

private:
    bool inf_ = false;
    bool auto_ = false;
};

/** Durations with an explicit unit (ns, us, ms, s, min), optionally "inf" (kTimeInf). */
class TimeParser {
public:
    using value_type = std::chrono::nanoseconds;

    /** Also accepts "inf", stored as kTimeInf. */
    TimeParser allow_inf() const {
        TimeParser copy = *this;
        copy.inf_ = true;
        return copy;
    }

    Status parse(std::string_view text, std::chrono::nanoseconds& value, std::string& reason) const;
    std::string print(const std::chrono::nanoseconds& value) const;
    std::string syntax() const;
    std::string what() const { return "time"; }

private:
    bool inf_ = false;
};

/** One name out of a fixed list mapped to enum values; names compare case-insensitively. */
template <typename E>
class EnumParser {
    static_assert(std::is_enum_v<E>, "EnumParser parses enums");

public:
    using value_type = E;

    /** @p names maps each accepted name to its value; the first name of a value is how it prints. */
    EnumParser(std::initializer_list<std::pair<const char*, E>> names) {
        for (const auto& [name, value] : names) names_.emplace_back(name, value);
    }

    Status parse(std::string_view text, E& value, std::string& /*reason*/) const {
        text = detail::trim(text);
        for (const auto& [name, candidate] : names_) {
            if (detail::iequals(text, name)) {
                value = candidate;
                return Status::ok;
            }
        }
        return Status::invalid_config;
    }

    std::string print(const E& value) const {
        for (const auto& [name, candidate] : names_) {
            if (candidate == value) return name;
        }
        return fmt::format("<invalid {}>", static_cast<std::underlying_type_t<E>>(value));
    }

    std::string syntax() const {
        std::string text = "one of ";
        for (std::size_t i = 0; i < names_.size(); ++i) {
            if (i > 0) text += i + 1 == names_.size() ? " or " : ", ";
            text += names_[i].first;
        }
        return text;
    }

    std::string what() const { return "value"; }

private:
    std::vector<std::pair<std::string, E>> names_;
};

/** Comma-separated lists of names; restrict_to() limits them to known names. */
class StringListParser {
public:
    using value_type = std::vector<std::string>;

    /** Accepts only names from @p names (any case; the value holds the spelling given here). */
    StringListParser restrict_to(std::vector<std::string> names) const {
        StringListParser copy = *this;
        copy.known_ = std::move(names);
        return copy;
    }

    Status parse(std::string_view text, std::vector<std::string>& value, std::string& reason) const;
    std::string print(const std::vector<std::string>& value) const;
    std::string syntax() const;
    std::string what() const { return "list"; }

private:
    std::vector<std::string> known_;  ///< empty: any name
};

/** Allow-lists: "all", "a,b" (only those) or "^a,b" (all but those). */
class AllowListParser {
public:
    using value_type = AllowList;

    /** Accepts only names from @p names (any case; the value holds the spelling given here). */
    AllowListParser restrict_to(std::vector<std::string> names) const {
        AllowListParser copy = *this;
        copy.names_ = copy.names_.restrict_to(std::move(names));
        return copy;
    }

    Status parse(std::string_view text, AllowList& value, std::string& reason) const;
    std::string print(const AllowList& value) const;
    std::string syntax() const;
    std::string what() const { return "allow-list"; }

private:
    StringListParser names_;
};

/** Strings, kept verbatim (not trimmed); optionally checked by a validator. */
class StringParser {
public:
    using value_type = std::string;
    using Validator = std::function<bool(std::string_view)>;

    /** Accepts any string. */
    StringParser() = default;

    /**
     * Accepts strings for which @p valid returns true; @p what names the kind of value
     * ("log level") and @p syntax says what is accepted, both for error messages.
     */
    StringParser(std::string what, std::string syntax, Validator valid)
        : what_(std::move(what)), syntax_(std::move(syntax)), valid_(std::move(valid)) {}

    Status parse(std::string_view text, std::string& value, std::string& reason) const;
    std::string print(const std::string& value) const { return value; }
    std::string syntax() const { return syntax_; }
    std::string what() const { return what_; }

private:
    std::string what_ = "string";
    std::string syntax_ = "any string";
    Validator valid_;
};

}  // namespace loom::ucs::config
