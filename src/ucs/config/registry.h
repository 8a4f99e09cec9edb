/**
 * The process-wide list of configuration tables.
 *
 * Every library and transport module registers its tables, usually by declaring
 * them as RegisteredTable objects at namespace scope: they register when the library
 * is loaded (also by dlopen) and unregister when it is unloaded. The registry is what
 * loom_info -c lists, what the documentation is generated from and what tells a
 * misspelt LOOM_* variable from a real one.
 */
#pragma once

#include "ucs/config/table.h"
#include "ucs/type/status.h"

#include <string>
#include <string_view>
#include <vector>

namespace loom::ucs::config {

/** Keeps @p table registered for the lifetime of this object. */
class Registration {
public:
    /** Registers @p table, which must outlive this object. */
    explicit Registration(const TableBase& table);
    ~Registration();
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;

private:
    const TableBase* table_;
};

/** A table that is registered while it exists: the usual way to declare one. */
template <typename S>
class RegisteredTable : public Table<S> {
public:
    using Table<S>::Table;

private:
    Registration registration_{*this};  // constructed after the table, unregisters before it goes
};

/**
 * The registered tables, the global one (prefix "") first, then by prefix and title.
 * The pointers stay valid while the libraries that registered them stay loaded.
 */
std::vector<const TableBase*> registered_tables();

/** True when @p name (with or without LOOM_, any case) is a variable of a registered table. */
bool is_known_variable(std::string_view name);

/**
 * The registered variable closest to @p name by edit distance (letters added, removed,
 * changed or swapped, ignoring case), or "" when none is close enough to be a likely
 * typo. Returns full names ("LOOM_LOG_LEVEL").
 */
std::string closest_variable(std::string_view name);

/**
 * Warns once per process about every LOOM_* environment variable, and every key of
 * the configuration file, that no registered table knows, suggesting the closest
 * known variable ("did you mean LOOM_LOG_LEVEL?"). Call it when all tables are
 * registered (after loading the transport modules): a variable of a table that is not
 * registered yet would be reported. Variables of Loom's scripts (LOOM_QS_*) are not
 * configuration and are skipped.
 */
void warn_unknown_variables();

/**
 * Checks programmatic overrides before they are used: returns no_element for a key
 * that is not a registered variable and invalid_config for a value its field does not
 * accept, after logging one line naming the key, the value and what is expected.
 */
Status check_overrides(const Overrides& overrides);

}  // namespace loom::ucs::config
