/**
 * Logging: spdlog behind macros whose first instruction is the level check.
 *
 *   LOOM_LOG_WARN("tcp: connect to {} failed: {}", peer, to_string(status));
 *
 * Format strings use fmt syntax and are checked at compile time. Formatting and
 * output happen in an out-of-line cold function, so a disabled log statement costs
 * one load and one compare on the hot path, and levels above LOOM_MAX_LOG_LEVEL
 * (configure --with-max-log-level) are removed by the compiler.
 *
 * Every message belongs to a component (its prefix in the output, its own level):
 * a file logs to LOOM_LOG_COMPONENT, which defaults to the "loom" component; a
 * transport defines LOOM_LOG_COMPONENT before including this header.
 */
#pragma once

#include "ucs/sys/build_options.h"
#include "ucs/sys/compiler.h"
#include "ucs/type/status.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::log {

enum class Level : std::uint8_t {
    fatal = 0,
    error,
    warn,
    info,
    diag,
    debug,
    trace,
    trace_data,
};

inline constexpr int kNumLevels = 8;

/** Name of a level as accepted by LOOM_LOG_LEVEL ("warn", "trace_data", ...). */
std::string_view level_name(Level level) noexcept;

/** Parses a level name (case-insensitive); Status::invalid_param on anything else. */
Status parse_level(std::string_view text, Level& level) noexcept;

/**
 * A log component: a prefix and a level of its own. Components are static objects
 * that register themselves on construction; their level starts at the global one.
 */
class Component {
public:
    explicit Component(const char* name) noexcept;
    ~Component();
    Component(const Component&) = delete;
    Component& operator=(const Component&) = delete;

    const char* name() const noexcept { return name_; }
    Level level() const noexcept { return static_cast<Level>(level_.load(std::memory_order_relaxed)); }
    void set_level(Level level) noexcept { level_.store(static_cast<std::uint8_t>(level), std::memory_order_relaxed); }

    /** The hot check: a relaxed load and a compare. */
    bool enabled(Level level) const noexcept {
        return level_.load(std::memory_order_relaxed) >= static_cast<std::uint8_t>(level);
    }

private:
    const char* name_;
    std::atomic<std::uint8_t> level_;
};

/** The default component ("loom"), used when LOOM_LOG_COMPONENT is not defined. */
Component& default_component() noexcept;

/**
 * Applies a level spec: "warn" sets every component, "info,tcp=debug,ucp=trace"
 * sets all to info and then tcp and ucp. Unknown component names are kept and
 * applied when such a component registers later (transports are loaded lazily).
 * Returns invalid_param with nothing changed when the spec does not parse.
 */
Status set_level_spec(std::string_view spec);

/**
 * Sends output to @p path ("" or "stderr" for standard error). "%h" and "%p" in
 * the path are replaced by the host name and the process id, so every process of a
 * parallel job gets its own file. Returns io_error when the file cannot be opened
 * (the previous destination stays).
 */
Status set_output_file(std::string_view path);

/** Checks a level spec (the grammar of set_level_spec) without applying it; invalid_param when bad. */
Status check_level_spec(std::string_view spec);

/** Names of every registered component, for help texts and tests. */
std::vector<std::string> component_names();

/** Emits one formatted message; called by the macros only after the level check. */
LOOM_COLD void emit(const Component& component, Level level, const char* file, int line,
                    std::string_view message) noexcept;

/** Formats and emits; kept out of line so call sites stay small. */
template <typename... Args>
LOOM_COLD LOOM_NOINLINE void format_and_emit(const Component& component, Level level, const char* file,
                                             int line, fmt::format_string<Args...> format,
                                             Args&&... args) noexcept {
    try {
        emit(component, level, file, line, fmt::vformat(format, fmt::make_format_args(args...)));
    } catch (...) {
        emit(component, level, file, line, "<log message could not be formatted>");
    }
}

/** Logs @p message at fatal level with a backtrace, then aborts the process. */
[[noreturn]] LOOM_COLD void fatal_message(const Component& component, const char* file, int line,
                                          std::string_view message) noexcept;

/** Formats a fatal message, logs it with a backtrace and aborts. */
template <typename... Args>
[[noreturn]] LOOM_COLD LOOM_NOINLINE void fatal(const Component& component, const char* file, int line,
                                                fmt::format_string<Args...> format, Args&&... args) noexcept {
    std::string message;
    try {
        message = fmt::vformat(format, fmt::make_format_args(args...));
    } catch (...) {
        message = "<fatal message could not be formatted>";
    }
    fatal_message(component, file, line, message);
}

}  // namespace loom::log

#ifndef LOOM_LOG_COMPONENT
#define LOOM_LOG_COMPONENT (::loom::log::default_component())
#endif

/** True when a message at @p level would be printed for @p component. */
#define LOOM_LOG_IS_ENABLED(component, level)                                        \
    (static_cast<int>(level) <= LOOM_MAX_LOG_LEVEL && LOOM_UNLIKELY((component).enabled(level)))

/** Logs to an explicit component. */
#define LOOM_LOG_C(component, level, ...)                                                          \
    do {                                                                                           \
        if (LOOM_LOG_IS_ENABLED(component, level)) {                                               \
            ::loom::log::format_and_emit(component, level, __FILE__, __LINE__, __VA_ARGS__);       \
        }                                                                                          \
    } while (0)

#define LOOM_LOG(level, ...) LOOM_LOG_C(LOOM_LOG_COMPONENT, level, __VA_ARGS__)

#define LOOM_LOG_ERROR(...)      LOOM_LOG(::loom::log::Level::error, __VA_ARGS__)
#define LOOM_LOG_WARN(...)       LOOM_LOG(::loom::log::Level::warn, __VA_ARGS__)
#define LOOM_LOG_INFO(...)       LOOM_LOG(::loom::log::Level::info, __VA_ARGS__)
#define LOOM_LOG_DIAG(...)       LOOM_LOG(::loom::log::Level::diag, __VA_ARGS__)
#define LOOM_LOG_DEBUG(...)      LOOM_LOG(::loom::log::Level::debug, __VA_ARGS__)
#define LOOM_LOG_TRACE(...)      LOOM_LOG(::loom::log::Level::trace, __VA_ARGS__)
#define LOOM_LOG_TRACE_DATA(...) LOOM_LOG(::loom::log::Level::trace_data, __VA_ARGS__)

/** Logs at fatal level, prints a backtrace and aborts. Never compiled out. */
#define LOOM_FATAL(...) ::loom::log::fatal(LOOM_LOG_COMPONENT, __FILE__, __LINE__, __VA_ARGS__)
