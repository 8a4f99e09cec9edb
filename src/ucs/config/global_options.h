/**
 * The global configuration table (prefix ""): logging, the configuration file and
 * the transport modules. libloom-ucs reads it when it is loaded and applies the log
 * settings at once, so LOOM_LOG_LEVEL and LOOM_LOG_FILE hold from the first message.
 */
#pragma once

#include "ucs/config/allow_list.h"
#include "ucs/config/table.h"
#include "ucs/type/status.h"

#include <string>
#include <string_view>

namespace loom::ucs::config {

/** Values of the global table. */
struct GlobalOptions {
    std::string log_level;    ///< LOOM_LOG_LEVEL: a level or a spec ("info,tcp=debug")
    std::string log_file;     ///< LOOM_LOG_FILE: "stderr", "stdout" or a path (%h, %p expand)
    std::string config_file;  ///< LOOM_CONFIG_FILE: path of the configuration file, "" for none
    AllowList modules;        ///< LOOM_MODULES: which transport modules to load
    std::string module_dir;   ///< LOOM_MODULE_DIR: where to load them from, "" for the built-in directory
    bool handle_errors_bt = true;  ///< LOOM_HANDLE_ERRORS: print a backtrace when the process crashes
};

/** The global table (registered while libloom-ucs is loaded). */
const Table<GlobalOptions>& global_table();

/**
 * The global options as read on first use (in practice when libloom-ucs is loaded).
 * Thread-safe. When the configuration is bad, the error has been logged and every
 * option has its default.
 */
const GlobalOptions& global_options();

/**
 * Reads the global options now. When a value or the configuration file is bad, logs
 * the error and returns the defaults: global options must never stop a process.
 */
GlobalOptions load_global_options();

/**
 * Applies LOOM_LOG_FILE and LOOM_LOG_LEVEL from @p options. A file that cannot be
 * opened is logged and leaves the output where it was (io_error); a level spec that
 * does not parse is logged and leaves the levels as they were (invalid_config).
 */
Status apply_log_options(const GlobalOptions& options);

/**
 * True when @p spec is accepted by log::set_level_spec: levels and component=level
 * items separated by commas. Checks without changing any level.
 */
bool is_valid_log_level_spec(std::string_view spec);

}  // namespace loom::ucs::config
