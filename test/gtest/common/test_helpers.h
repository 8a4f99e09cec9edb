/**
 * Shared helpers for the gtest suites: scoped environment variables, temporary
 * files and a log capture, so tests can check what a user would see.
 */
#pragma once

#include "ucs/debug/log.h"

#include <gtest/gtest.h>

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loom::test {

/** Sets an environment variable for the lifetime of the object, restoring the old value. */
class ScopedEnv {
public:
    ScopedEnv(std::string name, const std::optional<std::string>& value);
    ~ScopedEnv();
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    std::string name_;
    std::optional<std::string> saved_;
};

/** A file under the test temp dir, removed on destruction. */
class TempFile {
public:
    explicit TempFile(const std::string& contents, const std::string& suffix = "");
    ~TempFile();
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

/** Reads a whole file; empty when it cannot be read. */
std::string read_file(const std::string& path);

/**
 * Redirects Loom's log output to a temporary file while alive and restores stderr
 * afterwards; text() returns everything logged so far.
 */
class LogCapture {
public:
    explicit LogCapture(const std::string& level_spec = "warn");
    ~LogCapture();
    std::string text() const;
    /** Number of lines containing @p needle. */
    int count(const std::string& needle) const;

private:
    std::string path_;
};

/** Seconds the watchdog lets one test run (LOOMTEST_TIMEOUT, default 120). */
int watchdog_timeout_seconds();

/** A system call a process is blocked in, as /proc/<pid>/syscall shows it. */
struct BlockedSyscall {
    long number = -1;  ///< -1: running, or blocked outside a system call
    std::uint64_t args[6] = {};
};

/**
 * What process @p pid is blocked in now, so a test can tell that a peer really sleeps
 * (e.g. in epoll_wait with an infinite timeout) before waking it. nullopt when
 * /proc/<pid>/syscall cannot be read here (it needs ptrace access to the process).
 */
std::optional<BlockedSyscall> blocked_syscall(pid_t pid);

}  // namespace loom::test
