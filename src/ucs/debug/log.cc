#include "ucs/debug/log.h"

#include "ucs/debug/backtrace.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <fcntl.h>
#include <unistd.h>

namespace loom::log {

namespace {

constexpr std::string_view kLevelNames[kNumLevels] = {
    "fatal", "error", "warn", "info", "diag", "debug", "trace", "trace_data",
};

/** Tags printed in each line, padded to one width by the format. */
constexpr std::string_view kLevelTags[kNumLevels] = {
    "FATAL", "ERROR", "WARN", "INFO", "DIAG", "DEBUG", "TRACE", "DATA",
};

constexpr Level kDefaultLevel = Level::warn;

/** Process-wide logging state; built on first use so static components can register early. */
struct Registry {
    std::mutex lock;
    std::vector<Component*> components;
    Level global_level = kDefaultLevel;
    std::map<std::string, Level, std::less<>> overrides;  ///< per-component levels by name
    std::atomic<std::shared_ptr<spdlog::logger>> logger;

    Registry() { logger = make_logger(std::make_shared<spdlog::sinks::stderr_sink_mt>()); }

    static std::shared_ptr<spdlog::logger> make_logger(spdlog::sink_ptr sink) {
        auto logger = std::make_shared<spdlog::logger>("loom", std::move(sink));
        char host[64] = "?";
        ::gethostname(host, sizeof(host) - 1);
        // Time, host:pid:thread, then the component/level/location prefix we build.
        logger->set_pattern(fmt::format("[%H:%M:%S.%f] [{}:{}:%t] %v", host, ::getpid()));
        logger->set_level(spdlog::level::trace);
        logger->flush_on(spdlog::level::trace);
        return logger;
    }

    Level level_for(const char* name) const {
        auto it = overrides.find(std::string_view(name));
        return it == overrides.end() ? global_level : it->second;
    }
};

Registry& registry() {
    static Registry* instance = new Registry();  // never destroyed: logging works in atexit handlers
    return *instance;
}

std::string lower(std::string_view text) {
    std::string out(text);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
    return out;
}

std::string_view trim(std::string_view text) {
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
    return text;
}

const char* basename_of(const char* path) {
    const char* slash = std::strrchr(path, '/');
    return slash ? slash + 1 : path;
}

}  // namespace

std::string_view level_name(Level level) noexcept {
    auto index = static_cast<std::size_t>(level);
    return index < kNumLevels ? kLevelNames[index] : "invalid";
}

Status parse_level(std::string_view text, Level& level) noexcept {
    std::string name = lower(trim(text));
    if (name == "warning") name = "warn";
    if (name == "data") name = "trace_data";
    for (int i = 0; i < kNumLevels; ++i) {
        if (name == kLevelNames[i]) {
            level = static_cast<Level>(i);
            return Status::ok;
        }
    }
    return Status::invalid_param;
}

Component::Component(const char* name) noexcept : name_(name), level_(0) {
    Registry& reg = registry();
    std::lock_guard guard(reg.lock);
    set_level(reg.level_for(name));
    reg.components.push_back(this);
}

Component::~Component() {
    Registry& reg = registry();
    std::lock_guard guard(reg.lock);
    std::erase(reg.components, this);
}

Component& default_component() noexcept {
    static Component component("loom");
    return component;
}

namespace {

/** A parsed level spec: the global level (if given) and per-component overrides. */
struct LevelSpec {
    Level global = kDefaultLevel;
    std::map<std::string, Level, std::less<>> overrides;
};

/** Parses "info,tcp=debug"; invalid_param on any bad item. */
Status parse_level_spec(std::string_view spec, LevelSpec& out) {
    std::size_t pos = 0;
    while (pos <= spec.size()) {
        std::size_t comma = spec.find(',', pos);
        if (comma == std::string_view::npos) comma = spec.size();
        std::string_view item = trim(spec.substr(pos, comma - pos));
        pos = comma + 1;
        if (item.empty()) continue;
        std::size_t eq = item.find_first_of("=:");
        Level level;
        if (eq == std::string_view::npos) {
            if (parse_level(item, level) != Status::ok) return Status::invalid_param;
            out.global = level;
        } else {
            std::string_view name = trim(item.substr(0, eq));
            if (name.empty() || parse_level(item.substr(eq + 1), level) != Status::ok) {
                return Status::invalid_param;
            }
            out.overrides[lower(name)] = level;
        }
    }
    return Status::ok;
}

}  // namespace

Status check_level_spec(std::string_view spec) {
    LevelSpec parsed;
    return parse_level_spec(spec, parsed);
}

Status set_level_spec(std::string_view spec) {
    // Parse everything first so a bad spec changes nothing.
    LevelSpec parsed;
    if (Status status = parse_level_spec(spec, parsed); status != Status::ok) return status;
    Level global = parsed.global;
    auto overrides = std::move(parsed.overrides);

    Registry& reg = registry();
    std::lock_guard guard(reg.lock);
    reg.global_level = global;
    reg.overrides = std::move(overrides);
    for (Component* component : reg.components) {
        component->set_level(reg.level_for(component->name()));
    }
    return Status::ok;
}

Status set_output_file(std::string_view path) {
    std::string resolved;
    for (std::size_t i = 0; i < path.size(); ++i) {
        if (path[i] == '%' && i + 1 < path.size() && (path[i + 1] == 'h' || path[i + 1] == 'p')) {
            if (path[i + 1] == 'h') {
                char host[64] = "unknown";
                ::gethostname(host, sizeof(host) - 1);
                resolved += host;
            } else {
                resolved += std::to_string(::getpid());
            }
            ++i;
        } else {
            resolved += path[i];
        }
    }

    spdlog::sink_ptr sink;
    try {
        if (resolved.empty() || resolved == "stderr") {
            sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
        } else if (resolved == "stdout") {
            sink = std::make_shared<spdlog::sinks::stdout_sink_mt>();
        } else {
            // spdlog would create missing directories; a typo in LOOM_LOG_FILE should fail instead.
            int fd = ::open(resolved.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
            if (fd < 0) return Status::io_error;
            ::close(fd);
            sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(resolved, /*truncate=*/false);
        }
    } catch (const std::exception&) {
        return Status::io_error;
    }
    Registry& reg = registry();
    std::lock_guard guard(reg.lock);
    reg.logger.store(Registry::make_logger(std::move(sink)));
    return Status::ok;
}

std::vector<std::string> component_names() {
    Registry& reg = registry();
    std::lock_guard guard(reg.lock);
    std::vector<std::string> names;
    for (const Component* component : reg.components) names.emplace_back(component->name());
    return names;
}

void emit(const Component& component, Level level, const char* file, int line,
          std::string_view message) noexcept {
    auto index = static_cast<std::size_t>(level);
    std::string_view tag = index < kNumLevels ? kLevelTags[index] : "?";
    try {
        std::shared_ptr<spdlog::logger> logger = registry().logger.load();
        logger->log(spdlog::level::info, "{} {:5} {}:{} {}", component.name(), tag, basename_of(file), line,
                    message);
    } catch (...) {
        // Logging must never take the process down; drop the message.
    }
}

void fatal_message(const Component& component, const char* file, int line, std::string_view message) noexcept {
    emit(component, Level::fatal, file, line, message);
    debug::print_backtrace(STDERR_FILENO, 2);
    std::abort();
}

}  // namespace loom::log
