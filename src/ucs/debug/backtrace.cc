#include "ucs/debug/backtrace.h"

#include <cxxabi.h>
#include <execinfo.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

namespace loom::debug {

namespace {

constexpr int kMaxFrames = 64;

/** Turns one backtrace_symbols() line "obj(mangled+0x1f) [0x..]" into "obj: demangled+0x1f". */
std::string describe_frame(const char* symbol) {
    std::string line(symbol);
    std::size_t open = line.find('(');
    std::size_t plus = line.find('+', open);
    std::size_t close = line.find(')', open);
    if (open == std::string::npos || plus == std::string::npos || close == std::string::npos || plus <= open + 1) {
        return line;
    }
    std::string mangled = line.substr(open + 1, plus - open - 1);
    int status = 0;
    char* demangled = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
    std::string name = (status == 0 && demangled) ? demangled : mangled;
    std::free(demangled);
    return line.substr(0, open) + ": " + name + line.substr(plus, close - plus);
}

}  // namespace

std::string backtrace_string(int skip) {
    void* frames[kMaxFrames];
    int count = ::backtrace(frames, kMaxFrames);
    char** symbols = ::backtrace_symbols(frames, count);
    std::string out;
    for (int i = skip; i < count; ++i) {
        out += "  #" + std::to_string(i - skip) + " ";
        out += symbols ? describe_frame(symbols[i]) : std::string("?");
        out += '\n';
    }
    std::free(symbols);
    return out;
}

void print_backtrace(int fd, int skip) noexcept {
    try {
        std::string text = "==== backtrace ====\n" + backtrace_string(skip + 1) + "===================\n";
        ssize_t written = ::write(fd, text.data(), text.size());
        (void)written;
    } catch (...) {
        // Out of memory while crashing: fall back to the raw, allocation-free form.
        void* frames[kMaxFrames];
        int count = ::backtrace(frames, kMaxFrames);
        ::backtrace_symbols_fd(frames, count, fd);
    }
}

}  // namespace loom::debug
