#define LOOM_LOG_COMPONENT (::loom::ucs::config::detail::log_component())
#include "ucs/config/registry.h"

#include "ucs/config/config_file.h"
#include "ucs/config/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <set>

extern char** environ;

namespace loom::ucs::config {

namespace {

struct Registry {
    std::mutex lock;
    std::vector<const TableBase*> tables;  ///< one entry per Registration
};

Registry& registry() {
    static Registry* instance = new Registry();  // never destroyed: modules may unregister at exit
    return *instance;
}

/** LOOM_* variables that are not configuration: the knobs of quickstart.sh. */
constexpr std::string_view kIgnoredPrefixes[] = {"LOOM_QS_"};

std::string upper(std::string_view text) {
    std::string out(text);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::toupper(c); });
    return out;
}

std::string full_name(std::string_view name) {
    std::string full = upper(detail::trim(name));
    if (!full.starts_with(kVariablePrefix)) full.insert(0, kVariablePrefix);
    return full;
}

std::set<std::string> known_variables() {
    std::set<std::string> names;
    for (const TableBase* table : registered_tables()) {
        for (std::size_t i = 0; i < table->size(); ++i) names.insert(table->variable_name(i));
    }
    return names;
}

/** Optimal string alignment distance: insertions, deletions, substitutions and adjacent swaps. */
std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
    for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        for (std::size_t j = 1; j <= b.size(); ++j) {
            std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
                d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
            }
        }
    }
    return d[a.size()][b.size()];
}

std::string closest_in(const std::set<std::string>& known, std::string_view name) {
    // Compare without the common LOOM_ so it does not dilute the distance of short names.
    std::string wanted = full_name(name).substr(kVariablePrefix.size());
    std::size_t limit = std::clamp<std::size_t>(wanted.size() / 4, 1, 3);
    std::string best;
    std::size_t best_distance = limit + 1;
    for (const std::string& candidate : known) {  // sorted: ties go to the first name
        std::size_t distance =
            edit_distance(wanted, std::string_view(candidate).substr(kVariablePrefix.size()));
        if (distance < best_distance) {
            best = candidate;
            best_distance = distance;
        }
    }
    return best;
}

void report_unknown(const std::set<std::string>& known, std::string_view name, std::string_view where,
                    log::Level level) {
    std::string suggestion = closest_in(known, name);
    std::string message =
        suggestion.empty()
            ? fmt::format("{}unknown configuration variable {} (loom_info -c lists the known ones)", where,
                          name)
            : fmt::format("{}unknown configuration variable {}; did you mean {}?", where, name, suggestion);
    if (detail::first_report(message)) LOOM_LOG(level, "{}", message);
}

bool is_ignored(std::string_view name) {
    return std::any_of(std::begin(kIgnoredPrefixes), std::end(kIgnoredPrefixes),
                       [&](std::string_view prefix) { return name.starts_with(prefix); });
}

}  // namespace

Registration::Registration(const TableBase& table) : table_(&table) {
    Registry& reg = registry();
    std::lock_guard guard(reg.lock);
    reg.tables.push_back(table_);
}

Registration::~Registration() {
    Registry& reg = registry();
    std::lock_guard guard(reg.lock);
    auto it = std::find(reg.tables.begin(), reg.tables.end(), table_);
    if (it != reg.tables.end()) reg.tables.erase(it);
}

std::vector<const TableBase*> registered_tables() {
    std::vector<const TableBase*> tables;
    {
        Registry& reg = registry();
        std::lock_guard guard(reg.lock);
        tables = reg.tables;
    }
    std::sort(tables.begin(), tables.end(), [](const TableBase* a, const TableBase* b) {
        return std::tie(a->prefix(), a->title()) < std::tie(b->prefix(), b->title());
    });
    tables.erase(std::unique(tables.begin(), tables.end()), tables.end());
    return tables;
}

bool is_known_variable(std::string_view name) {
    return known_variables().count(full_name(name)) > 0;
}

std::string closest_variable(std::string_view name) {
    return closest_in(known_variables(), name);
}

void warn_unknown_variables() {
    std::set<std::string> known = known_variables();
    std::vector<std::string> unknown;
    for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
        std::string_view variable(*entry);
        std::string_view name = variable.substr(0, variable.find('='));
        if (name.starts_with(kVariablePrefix) && !is_ignored(name) && known.count(std::string(name)) == 0) {
            unknown.emplace_back(name);
        }
    }
    std::sort(unknown.begin(), unknown.end());  // a stable order for people reading the log
    for (const std::string& name : unknown) report_unknown(known, name, "", log::Level::warn);

    // Keys of the configuration file; a file that does not load is reported by fill().
    const char* path = std::getenv("LOOM_CONFIG_FILE");
    ConfigFile file;
    std::string error;
    if (path != nullptr && *path != '\0' && ConfigFile::load(path, file, error) == Status::ok) {
        for (const ConfigFileEntry& entry : file.entries()) {
            if (known.count(entry.name) == 0) {
                report_unknown(known, entry.name, fmt::format("configuration file {}:{}: ", path, entry.line),
                               log::Level::warn);
            }
        }
    }
}

Status check_overrides(const Overrides& overrides) {
    std::vector<const TableBase*> tables = registered_tables();
    for (const auto& [key, value] : overrides) {
        std::string name = full_name(key);
        bool found = false;
        for (const TableBase* table : tables) {
            std::optional<std::size_t> index = table->find(name);
            if (!index) continue;
            found = true;
            std::string canonical, reason;
            Status status = table->check_value(*index, value, canonical, reason);
            if (status != Status::ok) {
                detail::report_invalid(*table, *index, {value, detail::Origin::application, ""}, status,
                                       reason);
                return Status::invalid_config;
            }
        }
        if (!found) {
            std::set<std::string> known = known_variables();
            report_unknown(known, name, "set by the application: ", log::Level::error);
            return Status::no_element;
        }
    }
    return Status::ok;
}

}  // namespace loom::ucs::config
