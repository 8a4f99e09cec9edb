#define LOOM_LOG_COMPONENT (::loom::ucs::config::detail::log_component())
#include "ucs/config/global_options.h"

#include "ucs/debug/signals.h"

#include "ucs/config/registry.h"
#include "ucs/config/report.h"

namespace loom::ucs::config {

namespace {

const RegisteredTable<GlobalOptions>& make_global_table() {
    // Never destroyed: libraries and atexit handlers may read the options until the very end.
    static const auto* table = new RegisteredTable<GlobalOptions>(
        "", "Global options",
        "Logging, the configuration file and the transport modules. The log settings apply when "
        "libloom-ucs is loaded, before anything else runs.",
        {
            field("LOG_LEVEL", "warn",
                  "Which messages are logged: a level for every component, or a level followed by "
                  "component=level items for individual components (info,tcp=debug). Components include "
                  "loom, config and each transport.",
                  &GlobalOptions::log_level,
                  StringParser("log level",
                               "a level: fatal, error, warn, info, diag, debug, trace or trace_data; or a "
                               "spec like info,tcp=debug that also sets levels per component",
                               is_valid_log_level_spec)),
            field("LOG_FILE", "stderr",
                  "Where log messages go. In a file name, %h becomes the host name and %p the process id, "
                  "so every process of a parallel job can write its own file.",
                  &GlobalOptions::log_file,
                  StringParser("log file", "stderr, stdout or a file name; %h and %p expand", nullptr)),
            field("CONFIG_FILE", "",
                  "A configuration file read before the environment, with one KEY = value line per "
                  "variable (the key with or without LOOM_); # and ; start comments, [section] lines "
                  "are allowed and ignored. The environment overrides the file. Only the environment "
                  "or the application can set this variable.",
                  &GlobalOptions::config_file,
                  StringParser("file name", "a file name, or empty for none", nullptr)),
            field("MODULES", "all",
                  "Which transport modules to load: all, a list (tcp,shm loads only those), or ^ and a "
                  "list (^tcp loads every module except tcp).",
                  &GlobalOptions::modules, AllowListParser()),
            field("MODULE_DIR", "",
                  "The directories (colon-separated) to load transport modules from; empty for the "
                  "lib/loom directory beside libloom-ucs, then the directory Loom was installed with.",
                  &GlobalOptions::module_dir,
                  StringParser("directories", "directory names separated by colons, or empty for the built-in ones", nullptr)),
            field("HANDLE_ERRORS", "yes",
                  "Print the signal and a backtrace when the process crashes (SIGSEGV, SIGBUS, SIGILL, "
                  "SIGFPE, SIGABRT), then let the signal take its default action. Handlers the "
                  "application or a sanitizer installed first are left alone.",
                  &GlobalOptions::handle_errors_bt, BoolParser()),
        });
    return *table;
}

/** Applies the log settings as soon as libloom-ucs is loaded; never fails the process. */
__attribute__((constructor)) void apply_global_options_at_load() {
    try {
        const GlobalOptions& options = global_options();
        (void)apply_log_options(options);
        if (options.handle_errors_bt) (void)debug::install_crash_handlers();
    } catch (...) {
        // Out of memory this early: keep the built-in log settings.
    }
}

}  // namespace

const Table<GlobalOptions>& global_table() {
    return make_global_table();
}

GlobalOptions load_global_options() {
    const Table<GlobalOptions>& table = global_table();
    GlobalOptions options = table.defaults();
    if (fill(table, options) != Status::ok) return table.defaults();  // fill() logged why
    return options;
}

const GlobalOptions& global_options() {
    static const auto* options = new GlobalOptions(load_global_options());
    return *options;
}

Status apply_log_options(const GlobalOptions& options) {
    Status result = Status::ok;
    if (log::set_output_file(options.log_file) != Status::ok) {
        LOOM_LOG_ERROR(
            "LOOM_LOG_FILE={}: cannot open the log file (expected stderr, stdout or a writable "
            "file name); logging stays where it was",
            options.log_file);
        result = Status::io_error;
    }
    if (log::set_level_spec(options.log_level) != Status::ok) {
        LOOM_LOG_ERROR("LOOM_LOG_LEVEL={}: invalid log level; the levels stay as they were",
                       options.log_level);
        result = Status::invalid_config;
    }
    return result;
}

bool is_valid_log_level_spec(std::string_view spec) { return log::check_level_spec(spec) == Status::ok; }

}  // namespace loom::ucs::config
