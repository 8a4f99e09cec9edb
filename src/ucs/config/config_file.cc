#include "ucs/config/config_file.h"

#include "ucs/config/parser.h"
#include "ucs/config/table.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <system_error>

namespace loom::ucs::config {

namespace {

/** Configuration files are a few lines; anything this large is not one. */
constexpr std::size_t kMaxFileSize = 1 << 20;

/** A line as shown in an error: shortened, with control characters replaced. */
std::string quote(std::string_view text) {
    constexpr std::size_t kMaxShown = 60;
    std::string shown;
    for (char c : text.substr(0, kMaxShown)) {
        shown += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
    }
    if (text.size() > kMaxShown) shown += "...";
    return "'" + shown + "'";
}

bool is_name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

/** Cuts a comment that starts with # or ; after white space off an unquoted value. */
std::string_view strip_comment(std::string_view value) {
    for (std::size_t i = 1; i < value.size(); ++i) {
        if ((value[i] == '#' || value[i] == ';') && std::isspace(static_cast<unsigned char>(value[i - 1]))) {
            return value.substr(0, i);
        }
    }
    return value;
}

/** Parses one non-empty, non-comment line; returns the problem, or "" when it is fine. */
std::string parse_line(std::string_view line, ConfigFileEntry& entry, bool& is_setting) {
    is_setting = false;
    if (line.find('\0') != std::string_view::npos) return "binary data";
    if (line.front() == '[') {
        std::string_view inner = line.substr(1);
        if (inner.empty() || inner.back() != ']' || detail::trim(inner.substr(0, inner.size() - 1)).empty() ||
            inner.substr(0, inner.size() - 1).find_first_of("[]") != std::string_view::npos) {
            return fmt::format("malformed section header {} (expected [name])", quote(line));
        }
        return "";
    }
    std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
        return fmt::format("expected KEY = value, found {}", quote(line));
    }
    std::string_view key = detail::trim(line.substr(0, eq));
    if (key.empty() || !std::all_of(key.begin(), key.end(), is_name_char)) {
        return fmt::format("invalid variable name {} (expected letters, digits and _)", quote(key));
    }
    std::string name(key);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::toupper(c); });
    if (!name.starts_with(kVariablePrefix)) name.insert(0, kVariablePrefix);
    if (name.size() == kVariablePrefix.size()) {
        return fmt::format("invalid variable name {}", quote(key));
    }
    if (name == "LOOM_CONFIG_FILE") return "LOOM_CONFIG_FILE cannot be set in a configuration file";

    std::string_view value = detail::trim(line.substr(eq + 1));
    if (!value.empty() && value.front() == '"') {
        std::size_t close = value.find('"', 1);
        if (close == std::string_view::npos) return fmt::format("unterminated quote in {}", quote(line));
        std::string_view rest = detail::trim(value.substr(close + 1));
        if (!rest.empty() && rest.front() != '#' && rest.front() != ';') {
            return fmt::format("unexpected text after the closing quote in {}", quote(line));
        }
        value = value.substr(1, close - 1);
    } else {
        value = detail::trim(strip_comment(value));
    }
    entry.name = std::move(name);
    entry.value.assign(value);
    is_setting = true;
    return "";
}

}  // namespace

Status ConfigFile::parse(const std::string& path, std::string_view text, ConfigFile& file,
                         std::string& error) {
    ConfigFile result;
    result.path_ = path;
    int line_number = 0;
    std::size_t pos = 0;
    while (pos < text.size()) {
        std::size_t end = std::min(text.find('\n', pos), text.size());
        std::string_view line = text.substr(pos, end - pos);
        pos = end + 1;
        ++line_number;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        line = detail::trim(line);
        if (line.empty() || line.front() == '#' || line.front() == ';') continue;
        ConfigFileEntry entry;
        bool is_setting;
        std::string problem = parse_line(line, entry, is_setting);
        if (!problem.empty()) {
            error = fmt::format("configuration file {}:{}: {}", path, line_number, problem);
            return Status::invalid_config;
        }
        if (is_setting) {
            entry.line = line_number;
            result.entries_.push_back(std::move(entry));
        }
    }
    file = std::move(result);
    return Status::ok;
}

Status ConfigFile::load(const std::string& path, ConfigFile& file, std::string& error) {
    auto fail = [&](std::string_view problem) {
        error = fmt::format("configuration file {} (LOOM_CONFIG_FILE): {}", path, problem);
        return Status::invalid_config;
    };
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(
            fmt::format("cannot open: {}", std::error_code(errno, std::generic_category()).message()));
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        return fail("not a regular file");
    }
    std::string text;
    char buffer[4096];
    while (true) {
        ssize_t n = ::read(fd, buffer, sizeof(buffer));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int err = errno;
            ::close(fd);
            return fail(
                fmt::format("cannot read: {}", std::error_code(err, std::generic_category()).message()));
        }
        if (n == 0) break;
        text.append(buffer, static_cast<std::size_t>(n));
        if (text.size() > kMaxFileSize) {
            ::close(fd);
            return fail(fmt::format("larger than {} bytes", kMaxFileSize));
        }
    }
    ::close(fd);
    return parse(path, text, file, error);
}

const ConfigFileEntry* ConfigFile::find(std::string_view name) const noexcept {
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
        if (it->name == name) return &*it;
    }
    return nullptr;
}

}  // namespace loom::ucs::config
