#define LOOM_LOG_COMPONENT (::loom::ucs::config::detail::log_component())
#include "ucs/config/table.h"

#include "ucs/config/config_file.h"
#include "ucs/config/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <set>

namespace loom::ucs::config {

namespace detail {

log::Component& log_component() noexcept {
    static log::Component component("config");
    return component;
}

namespace {

struct Reports {
    std::mutex lock;
    std::set<std::string> seen;
};

Reports& reports() {
    static Reports* instance = new Reports();  // never destroyed: reports may come from atexit handlers
    return *instance;
}

bool is_upper_name(std::string_view name) {
    return std::all_of(name.begin(), name.end(),
                       [](char c) { return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; });
}

/** The full variable name for an override key: upper case, with LOOM_. */
std::string normalize_name(std::string_view key) {
    std::string name(trim(key));
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::toupper(c); });
    if (!name.starts_with(kVariablePrefix)) name.insert(0, kVariablePrefix);
    return name;
}

}  // namespace

bool first_report(const std::string& message) {
    Reports& r = reports();
    std::lock_guard guard(r.lock);
    return r.seen.insert(message).second;
}

void forget_reports() {
    Reports& r = reports();
    std::lock_guard guard(r.lock);
    r.seen.clear();
}

Status resolve(const TableBase& table, const Overrides& overrides, std::vector<RawValue>& values) {
    std::map<std::string, const std::string*, std::less<>> application;
    for (const auto& [key, value] : overrides) application[normalize_name(key)] = &value;

    // The file is named by the application or the environment, never by a file.
    std::string path;
    if (auto it = application.find("LOOM_CONFIG_FILE"); it != application.end()) {
        path = *it->second;
    } else if (const char* env = std::getenv("LOOM_CONFIG_FILE")) {
        path = env;
    }
    ConfigFile file;
    if (!path.empty()) {
        std::string error;
        if (ConfigFile::load(path, file, error) != Status::ok) {
            if (first_report(error)) LOOM_LOG_ERROR("{}", error);
            return Status::invalid_config;
        }
    }

    std::vector<RawValue> result(table.size());
    for (std::size_t i = 0; i < table.size(); ++i) {
        std::string name = table.variable_name(i);
        RawValue& value = result[i];
        value.text = table.field_info(i).default_value;
        if (const ConfigFileEntry* entry = file.find(name)) {
            value = {entry->value, Origin::file, fmt::format("{}:{}", path, entry->line)};
        }
        if (const char* env = std::getenv(name.c_str())) value = {env, Origin::environment, ""};
        if (auto it = application.find(name); it != application.end()) {
            value = {*it->second, Origin::application, ""};
        }
    }
    values = std::move(result);
    return Status::ok;
}

void report_invalid(const TableBase& table, std::size_t index, const RawValue& value, Status status,
                    const std::string& reason) {
    const FieldInfo& info = table.field_info(index);
    std::string origin;
    switch (value.origin) {
        case Origin::default_value:
            origin = " (the built-in default)";
            break;
        case Origin::file:
            origin = fmt::format(" (in {})", value.location);
            break;
        case Origin::environment:
            break;
        case Origin::application:
            origin = " (set by the application)";
            break;
    }
    std::string problem = reason;
    if (problem.empty()) {
        problem = status == Status::out_of_range ? info.what + " out of range" : "invalid " + info.what;
    }
    std::string message = fmt::format("{}={}{}: {} (expected {})", table.variable_name(index), value.text,
                                      origin, problem, info.syntax);
    if (first_report(message)) LOOM_LOG_ERROR("{}", message);
}

}  // namespace detail

TableBase::TableBase(std::string prefix, std::string title, std::string doc)
    : prefix_(std::move(prefix)), title_(std::move(title)), doc_(std::move(doc)) {}

std::string TableBase::variable_name(std::size_t index) const {
    return fmt::format("{}{}{}", kVariablePrefix, prefix_, field_info(index).name);
}

std::optional<std::size_t> TableBase::find(std::string_view name) const {
    std::string full = detail::normalize_name(name);
    for (std::size_t i = 0; i < size(); ++i) {
        if (variable_name(i) == full) return i;
    }
    return std::nullopt;
}

void TableBase::validate() const {
    if (!detail::is_upper_name(prefix_) || (!prefix_.empty() && prefix_.back() != '_') ||
        std::string_view(prefix_).starts_with(kVariablePrefix)) {
        LOOM_FATAL("configuration table '{}': invalid prefix '{}' (expected \"\" or upper case ending in _)",
                   title_, prefix_);
    }
    std::set<std::string> names;
    for (std::size_t i = 0; i < size(); ++i) {
        const FieldInfo& info = field_info(i);
        if (info.name.empty() || !detail::is_upper_name(info.name) || info.name.front() == '_') {
            LOOM_FATAL("configuration table '{}': invalid field name '{}'", title_, info.name);
        }
        if (!names.insert(info.name).second) {
            LOOM_FATAL("configuration table '{}': field {} is listed twice", title_, variable_name(i));
        }
        std::string canonical, reason;
        if (check_value(i, info.default_value, canonical, reason) != Status::ok) {
            LOOM_FATAL("configuration table '{}': the default '{}' of {} does not parse ({}; expected {})",
                       title_, info.default_value, variable_name(i),
                       reason.empty() ? "invalid " + info.what : reason, info.syntax);
        }
    }
}

}  // namespace loom::ucs::config
