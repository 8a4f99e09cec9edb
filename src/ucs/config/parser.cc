#include "ucs/config/parser.h"

#include <strings.h>
#include <algorithm>
#include <cctype>

namespace loom::ucs::config {

namespace detail {

std::string_view trim(std::string_view text) noexcept {
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
    return text;
}

bool iequals(std::string_view a, std::string_view b) noexcept {
    return a.size() == b.size() && ::strncasecmp(a.data(), b.data(), a.size()) == 0;
}

namespace {

int digit_value(char c, unsigned base) noexcept {
    int value = -1;
    if (c >= '0' && c <= '9') {
        value = c - '0';
    } else if (c >= 'a' && c <= 'f') {
        value = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
        value = c - 'A' + 10;
    }
    return value >= 0 && static_cast<unsigned>(value) < base ? value : -1;
}

/** Parses the digits of an unsigned number (decimal, or hexadecimal after 0x). */
Status parse_magnitude(std::string_view text, std::uint64_t& value) noexcept {
    unsigned base = 10;
    if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
        base = 16;
        text.remove_prefix(2);
    }
    if (text.empty()) return Status::invalid_config;
    std::uint64_t result = 0;
    bool overflow = false;
    for (char c : text) {
        int digit = digit_value(c, base);
        if (digit < 0) return Status::invalid_config;
        if (result > (std::numeric_limits<std::uint64_t>::max() - static_cast<unsigned>(digit)) / base) {
            overflow = true;  // keep scanning: "99999999999999999999x" is a syntax error, not a range error
        }
        result = result * base + static_cast<unsigned>(digit);
    }
    if (overflow) return Status::out_of_range;
    value = result;
    return Status::ok;
}

}  // namespace

Status parse_int64(std::string_view text, std::int64_t& value) noexcept {
    text = trim(text);
    bool negative = false;
    if (!text.empty() && (text.front() == '-' || text.front() == '+')) {
        negative = text.front() == '-';
        text.remove_prefix(1);
    }
    std::uint64_t magnitude;
    Status status = parse_magnitude(text, magnitude);
    if (status != Status::ok) return status;
    constexpr auto kMaxPositive = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    if (negative) {
        if (magnitude > kMaxPositive + 1) return Status::out_of_range;
        value = magnitude == kMaxPositive + 1 ? std::numeric_limits<std::int64_t>::min()
                                              : -static_cast<std::int64_t>(magnitude);
    } else {
        if (magnitude > kMaxPositive) return Status::out_of_range;
        value = static_cast<std::int64_t>(magnitude);
    }
    return Status::ok;
}

Status parse_uint64(std::string_view text, std::uint64_t& value) noexcept {
    text = trim(text);
    bool negative = false;
    if (!text.empty() && (text.front() == '-' || text.front() == '+')) {
        negative = text.front() == '-';
        text.remove_prefix(1);
    }
    std::uint64_t magnitude;
    Status status = parse_magnitude(text, magnitude);
    if (status != Status::ok) return status;
    if (negative && magnitude != 0) return Status::out_of_range;
    value = magnitude;
    return Status::ok;
}

}  // namespace detail

namespace {

using detail::iequals;
using detail::trim;

constexpr std::uint64_t kUint64Max = std::numeric_limits<std::uint64_t>::max();

/**
 * Parses "<digits>[.<digits>]" and multiplies it by @p unit exactly: a fraction must
 * come out as a whole number of the base unit (bytes, nanoseconds), otherwise the
 * value would silently change when printed back. @p base_unit names that unit for
 * the error reason.
 */
Status parse_scaled(std::string_view number, std::uint64_t unit, std::string_view base_unit,
                    std::uint64_t& value, std::string& reason) {
    std::size_t dot = number.find('.');
    std::string_view whole = number.substr(0, dot);
    std::string_view fraction = dot == std::string_view::npos ? std::string_view() : number.substr(dot + 1);
    auto all_digits = [](std::string_view s) {
        return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (whole.empty() || !all_digits(whole) || (dot != std::string_view::npos && fraction.empty()) ||
        !all_digits(fraction)) {
        return Status::invalid_config;
    }

    std::uint64_t result = 0;
    for (char c : whole) {
        auto digit = static_cast<std::uint64_t>(c - '0');
        if (result > (kUint64Max - digit) / 10) return Status::out_of_range;
        result = result * 10 + digit;
    }
    if (unit != 0 && result > kUint64Max / unit) return Status::out_of_range;
    result *= unit;

    while (!fraction.empty() && fraction.back() == '0') fraction.remove_suffix(1);
    if (!fraction.empty()) {
        // 18 digits keep the numerator below 10^18, so numerator * unit fits 128 bits.
        if (fraction.size() > 18) {
            reason = "too many decimal places";
            return Status::invalid_config;
        }
        unsigned __int128 numerator = 0, denominator = 1;
        for (char c : fraction) {
            numerator = numerator * 10 + static_cast<unsigned>(c - '0');
            denominator *= 10;
        }
        numerator *= unit;
        if (numerator % denominator != 0) {
            reason = fmt::format("not a whole number of {}", base_unit);
            return Status::invalid_config;
        }
        auto extra = static_cast<std::uint64_t>(numerator / denominator);
        if (result > kUint64Max - extra) return Status::out_of_range;
        result += extra;
    }
    value = result;
    return Status::ok;
}

/** Splits "1.5m" into the number "1.5" and the unit "m". */
std::pair<std::string_view, std::string_view> split_unit(std::string_view text) {
    std::size_t end = 0;
    while (end < text.size() && ((text[end] >= '0' && text[end] <= '9') || text[end] == '.')) ++end;
    return {text.substr(0, end), trim(text.substr(end))};
}

struct Unit {
    std::string_view name;
    std::uint64_t scale;
};

/** Size suffixes, largest first (the printing order). */
constexpr Unit kSizeUnits[] = {
    {"t", 1ull << 40},
    {"g", 1ull << 30},
    {"m", 1ull << 20},
    {"k", 1ull << 10},
};

/** Time units in nanoseconds, largest first (the printing order). */
constexpr Unit kTimeUnits[] = {
    {"min", 60'000'000'000ull}, {"s", 1'000'000'000ull}, {"ms", 1'000'000ull}, {"us", 1'000ull}, {"ns", 1ull},
};

constexpr std::string_view kTrueNames[] = {"y", "yes", "on", "true", "1"};
constexpr std::string_view kFalseNames[] = {"n", "no", "off", "false", "0"};

bool is_one_of(std::string_view text, const auto& names) {
    return std::any_of(std::begin(names), std::end(names),
                       [&](std::string_view name) { return iequals(text, name); });
}

}  // namespace

std::string_view to_string(Ternary value) noexcept {
    switch (value) {
        case Ternary::no:
            return "no";
        case Ternary::yes:
            return "yes";
        case Ternary::try_:
            return "try";
        case Ternary::auto_:
            return "auto";
    }
    return "invalid";
}

// --- bool --------------------------------------------------------------------------------

Status BoolParser::parse(std::string_view text, bool& value, std::string& /*reason*/) const {
    text = trim(text);
    if (is_one_of(text, kTrueNames)) {
        value = true;
    } else if (is_one_of(text, kFalseNames)) {
        value = false;
    } else {
        return Status::invalid_config;
    }
    return Status::ok;
}

std::string BoolParser::print(const bool& value) const {
    return value ? "yes" : "no";
}

std::string BoolParser::syntax() const {
    return "yes or no; also y/n, on/off, true/false, 1/0";
}

// --- ternary -------------------------------------------------------------------------------

Status TernaryParser::parse(std::string_view text, Ternary& value, std::string& /*reason*/) const {
    text = trim(text);
    if (is_one_of(text, kTrueNames)) {
        value = Ternary::yes;
    } else if (is_one_of(text, kFalseNames)) {
        value = Ternary::no;
    } else if (iequals(text, "try")) {
        value = Ternary::try_;
    } else if (allow_auto_ && iequals(text, "auto")) {
        value = Ternary::auto_;
    } else {
        return Status::invalid_config;
    }
    return Status::ok;
}

std::string TernaryParser::print(const Ternary& value) const {
    return std::string(to_string(value));
}

std::string TernaryParser::syntax() const {
    return allow_auto_ ? "yes, no, try or auto" : "yes, no or try";
}

// --- size ------------------------------------------------------------------------------------

Status SizeParser::parse(std::string_view text, std::size_t& value, std::string& reason) const {
    text = trim(text);
    if (inf_ && iequals(text, "inf")) {
        value = kSizeInf;
        return Status::ok;
    }
    if (auto_ && iequals(text, "auto")) {
        value = kSizeAuto;
        return Status::ok;
    }
    auto [number, suffix] = split_unit(text);
    std::uint64_t scale = 1;
    if (!suffix.empty()) {
        // "64k", "64kb", "64KB" and "100b" all work; the b is decoration.
        std::string_view letter = suffix;
        if (letter.size() == 2 && (letter[1] == 'b' || letter[1] == 'B')) letter = letter.substr(0, 1);
        auto unit = std::find_if(std::begin(kSizeUnits), std::end(kSizeUnits),
                                 [&](const Unit& u) { return iequals(letter, u.name); });
        if (unit != std::end(kSizeUnits)) {
            scale = unit->scale;
        } else if (!iequals(suffix, "b")) {
            return Status::invalid_config;
        }
    }
    std::uint64_t bytes;
    Status status = parse_scaled(number, scale, "bytes", bytes, reason);
    if (status != Status::ok) return status;
    if ((inf_ && bytes == kSizeInf) || (auto_ && bytes == kSizeAuto)) {
        reason = fmt::format("{} is reserved for {}", bytes, bytes == kSizeInf ? "inf" : "auto");
        return Status::out_of_range;
    }
    static_assert(sizeof(std::size_t) == sizeof(std::uint64_t), "sizes are 64-bit");
    value = bytes;
    return Status::ok;
}

std::string SizeParser::print(const std::size_t& value) const {
    if (inf_ && value == kSizeInf) return "inf";
    if (auto_ && value == kSizeAuto) return "auto";
    for (const Unit& unit : kSizeUnits) {
        if (value != 0 && value % unit.scale == 0) return fmt::format("{}{}", value / unit.scale, unit.name);
    }
    return std::to_string(value);
}

std::string SizeParser::syntax() const {
    std::string text =
        "a number of bytes with an optional k, m, g or t suffix for KiB, MiB, GiB or TiB, e.g. 4096, 64k, "
        "1.5m";
    if (inf_ && auto_) return text + ", inf or auto";
    if (inf_) return text + ", or inf";
    if (auto_) return text + ", or auto";
    return text;
}

// --- time ------------------------------------------------------------------------------------

Status TimeParser::parse(std::string_view text, std::chrono::nanoseconds& value, std::string& reason) const {
    text = trim(text);
    if (inf_ && iequals(text, "inf")) {
        value = kTimeInf;
        return Status::ok;
    }
    auto [number, unit_name] = split_unit(text);
    std::uint64_t scale;
    if (unit_name.empty()) {
        // A bare number is ambiguous (seconds? milliseconds?), except zero.
        std::uint64_t zero;
        std::string ignored;
        if (parse_scaled(number, 1, "nanoseconds", zero, ignored) == Status::ok && zero == 0) {
            value = std::chrono::nanoseconds(0);
            return Status::ok;
        }
        if (!number.empty()) reason = "missing unit";
        return Status::invalid_config;
    }
    auto unit = std::find_if(std::begin(kTimeUnits), std::end(kTimeUnits),
                             [&](const Unit& u) { return iequals(unit_name, u.name); });
    if (unit == std::end(kTimeUnits)) return Status::invalid_config;
    scale = unit->scale;
    std::uint64_t nanoseconds;
    Status status = parse_scaled(number, scale, "nanoseconds", nanoseconds, reason);
    if (status != Status::ok) return status;
    auto max = static_cast<std::uint64_t>(std::chrono::nanoseconds::max().count());
    if (nanoseconds > max) return Status::out_of_range;
    if (inf_ && nanoseconds == max) {
        reason = "the largest time is reserved for inf";
        return Status::out_of_range;
    }
    value = std::chrono::nanoseconds(static_cast<std::int64_t>(nanoseconds));
    return Status::ok;
}

std::string TimeParser::print(const std::chrono::nanoseconds& value) const {
    if (inf_ && value == kTimeInf) return "inf";
    auto count = value.count();
    if (count == 0) return "0s";
    if (count < 0) return fmt::format("{}ns", count);  // never produced by parse(); shown as is
    auto ns = static_cast<std::uint64_t>(count);
    for (const Unit& unit : kTimeUnits) {
        if (ns % unit.scale == 0) return fmt::format("{}{}", ns / unit.scale, unit.name);
    }
    return fmt::format("{}ns", ns);
}

std::string TimeParser::syntax() const {
    std::string text = "a number with a unit: ns, us, ms, s or min, e.g. 300ns, 1.5us, 20s";
    return inf_ ? text + ", or inf" : text;
}

// --- lists -----------------------------------------------------------------------------------

Status StringListParser::parse(std::string_view text, std::vector<std::string>& value,
                               std::string& reason) const {
    text = trim(text);
    std::vector<std::string> names;
    if (!text.empty()) {
        std::size_t pos = 0;
        while (pos <= text.size()) {
            std::size_t comma = std::min(text.find(',', pos), text.size());
            std::string_view name = trim(text.substr(pos, comma - pos));
            pos = comma + 1;
            if (name.empty()) {
                reason = "empty name in the list";
                return Status::invalid_config;
            }
            if (known_.empty()) {
                names.emplace_back(name);
                continue;
            }
            auto known = std::find_if(known_.begin(), known_.end(),
                                      [&](const std::string& k) { return iequals(k, name); });
            if (known == known_.end()) {
                reason = fmt::format("unknown name '{}'", name);
                return Status::invalid_config;
            }
            names.push_back(*known);
        }
    }
    value = std::move(names);
    return Status::ok;
}

std::string StringListParser::print(const std::vector<std::string>& value) const {
    std::string text;
    for (std::size_t i = 0; i < value.size(); ++i) {
        if (i > 0) text += ',';
        text += value[i];
    }
    return text;
}

std::string StringListParser::syntax() const {
    std::string text = "a comma-separated list of names";
    if (!known_.empty()) {
        text += " out of ";
        for (std::size_t i = 0; i < known_.size(); ++i) {
            if (i > 0) text += ", ";
            text += known_[i];
        }
    }
    return text;
}

Status AllowListParser::parse(std::string_view text, AllowList& value, std::string& reason) const {
    text = trim(text);
    if (iequals(text, "all")) {
        value = AllowList::all();
        return Status::ok;
    }
    bool negate = !text.empty() && text.front() == '^';
    if (negate) text.remove_prefix(1);
    std::vector<std::string> names;
    Status status = names_.parse(text, names, reason);
    if (status != Status::ok) return status;
    for (const std::string& name : names) {
        if (iequals(name, "all")) {
            reason = "'all' stands alone";
            return Status::invalid_config;
        }
    }
    value = negate ? AllowList::all_except(std::move(names)) : AllowList::only(std::move(names));
    return Status::ok;
}

std::string AllowListParser::print(const AllowList& value) const {
    return value.to_string();
}

std::string AllowListParser::syntax() const {
    std::string list = names_.syntax();
    return "all, " + list + " to use only those, or ^ and a list to use all but those";
}

// --- string ----------------------------------------------------------------------------------

Status StringParser::parse(std::string_view text, std::string& value, std::string& /*reason*/) const {
    if (valid_ && !valid_(text)) return Status::invalid_config;
    value.assign(text);
    return Status::ok;
}

}  // namespace loom::ucs::config
