#include "common/test_helpers.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace loom::test {

ScopedEnv::ScopedEnv(std::string name, const std::optional<std::string>& value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) saved_ = old;
    if (value) {
        ::setenv(name_.c_str(), value->c_str(), 1);
    } else {
        ::unsetenv(name_.c_str());
    }
}

ScopedEnv::~ScopedEnv() {
    if (saved_) {
        ::setenv(name_.c_str(), saved_->c_str(), 1);
    } else {
        ::unsetenv(name_.c_str());
    }
}

TempFile::TempFile(const std::string& contents, const std::string& suffix) {
    const char* dir = std::getenv("TMPDIR");
    std::string pattern = std::string(dir ? dir : "/tmp") + "/loomtest-XXXXXX" + suffix;
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    int fd = ::mkstemps(buf.data(), static_cast<int>(suffix.size()));
    if (fd < 0) throw std::runtime_error("mkstemps failed for " + pattern);
    path_ = buf.data();
    ssize_t n = ::write(fd, contents.data(), contents.size());
    ::close(fd);
    if (n != static_cast<ssize_t>(contents.size())) throw std::runtime_error("short write to " + path_);
}

TempFile::~TempFile() { ::unlink(path_.c_str()); }

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

LogCapture::LogCapture(const std::string& level_spec) {
    TempFile file("", ".log");
    path_ = file.path() + ".capture";
    if (log::set_output_file(path_) != Status::ok) throw std::runtime_error("cannot capture log to " + path_);
    if (log::set_level_spec(level_spec) != Status::ok) throw std::runtime_error("bad level spec " + level_spec);
}

LogCapture::~LogCapture() {
    (void)log::set_output_file("stderr");
    (void)log::set_level_spec("warn");
    ::unlink(path_.c_str());
}

std::string LogCapture::text() const { return read_file(path_); }

int LogCapture::count(const std::string& needle) const {
    std::istringstream in(text());
    int n = 0;
    for (std::string line; std::getline(in, line);) {
        if (line.find(needle) != std::string::npos) ++n;
    }
    return n;
}

int watchdog_timeout_seconds() {
    const char* value = std::getenv("LOOMTEST_TIMEOUT");
    int seconds = value ? std::atoi(value) : 0;
    return seconds > 0 ? seconds : 120;
}

std::optional<BlockedSyscall> blocked_syscall(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/syscall");
    std::string first;
    if (!(in >> first)) return std::nullopt;
    BlockedSyscall call;
    if (first == "running") return call;
    // "<number> <arg0> .. <arg5> <sp> <pc>", the arguments in hex; "-1 <sp> <pc>" outside a call.
    try {
        call.number = std::stol(first);
        for (std::uint64_t& arg : call.args) {
            std::string word;
            if (!(in >> word)) break;
            arg = std::stoull(word, nullptr, 16);
        }
    } catch (const std::exception&) {
        return std::nullopt;
    }
    return call;
}

}  // namespace loom::test
