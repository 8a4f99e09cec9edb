#include "uct/shm/shm_log.h"  // first: inline code of the other headers logs to shm_log()
#include "uct/shm/shm_common.h"

#include <pthread.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

namespace loom::uct::shm {

log::Component& shm_log() {
    static log::Component* component = new log::Component("shm");  // never destroyed: logged from exit paths
    return *component;
}

std::uint64_t random_u64() {
    std::uint64_t value = 0;
    for (;;) {
        ssize_t n = ::getrandom(&value, sizeof(value), 0);
        if (n == static_cast<ssize_t>(sizeof(value)) && value != 0) return value;
        if (n < 0 && errno != EINTR) {
            // No getrandom (ancient kernel): mix the time and addresses, good enough to tell processes apart.
            value ^= static_cast<std::uint64_t>(::getpid()) * 0x9e3779b97f4a7c15ull;
            value ^= static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&value));
            timespec ts;
            ::clock_gettime(CLOCK_MONOTONIC, &ts);
            value ^= static_cast<std::uint64_t>(ts.tv_nsec) << 20 ^ static_cast<std::uint64_t>(ts.tv_sec);
            if (value != 0) return value;
        }
    }
}

std::string errno_string(int err) {
    char buf[128];
    // GNU strerror_r returns the message, which may or may not live in buf.
    const char* text = ::strerror_r(err, buf, sizeof(buf));
    return text;
}

Result<std::uint64_t> process_start_time(pid_t pid) {
    if (pid <= 0) return Status::no_element;
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!in || !std::getline(in, line)) return Status::no_element;
    // The command name (field 2) is in parentheses and may contain anything, spaces included:
    // the fields after the last ')' are reliable.
    std::size_t close = line.rfind(')');
    if (close == std::string::npos) return Status::no_element;
    std::istringstream fields(line.substr(close + 1));
    std::string field;
    // After ')' come field 3 (state) .. field 22 (starttime): skip 19, read the 20th.
    for (int i = 3; i < 22; ++i) {
        if (!(fields >> field)) return Status::no_element;
    }
    std::uint64_t start = 0;
    if (!(fields >> start)) return Status::no_element;
    return start;
}

namespace {

/** Set in a child after fork (and before the first call): this_process() must recompute. */
std::atomic<bool> g_identity_stale{true};

void mark_identity_stale() {
    g_identity_stale.store(true, std::memory_order_relaxed);
}

}  // namespace

ProcessIdentity this_process() {
    static std::mutex lock;
    static ProcessIdentity identity;
    // Every registration, key and rendezvous asks: a getpid each time cost ~1 us per shm
    // rendezvous (ten calls), so the identity is recomputed only after fork.
    static std::once_flag at_fork;
    std::call_once(at_fork, [] { ::pthread_atfork(nullptr, nullptr, mark_identity_stale); });
    std::lock_guard guard(lock);
    if (g_identity_stale.exchange(false, std::memory_order_relaxed)) {  // first call, or in a forked child
        const pid_t pid = ::getpid();
        identity.pid = pid;
        identity.start_time = process_start_time(pid).value_or(0);
        identity.cookie = random_u64();
    }
    return identity;
}

namespace {

std::string read_first_line(const char* path) {
    std::ifstream in(path);
    std::string line;
    if (in) std::getline(in, line);
    return line;
}

std::uint64_t fnv1a(std::uint64_t hash, const std::string& text) {
    for (unsigned char c : text) {
        hash ^= c;
        hash *= 0x100000001b3ull;
    }
    // A separator, so "ab"+"c" and "a"+"bc" differ.
    hash ^= 0xff;
    hash *= 0x100000001b3ull;
    return hash;
}

}  // namespace

std::uint64_t host_id() {
    static const std::uint64_t id = [] {
        char host[256] = {};
        ::gethostname(host, sizeof(host) - 1);
        char ns[128] = {};
        ssize_t n = ::readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
        if (n < 0) ns[0] = '\0';
        // The file system behind /dev/shm (where segments are named): two processes in
        // different mount namespaces, each with its own /dev/shm, cannot share segments
        // even with the same host name (containers, or test hosts made of namespaces).
        char shm_fs[64] = {};
        struct stat st {};
        if (::stat("/dev/shm", &st) == 0) {
            std::snprintf(shm_fs, sizeof(shm_fs), "%llx:%llx", static_cast<unsigned long long>(st.st_dev),
                          static_cast<unsigned long long>(st.st_ino));
        }
        std::uint64_t hash = 0xcbf29ce484222325ull;
        hash = fnv1a(hash, read_first_line("/proc/sys/kernel/random/boot_id"));
        hash = fnv1a(hash, host);
        hash = fnv1a(hash, ns);
        hash = fnv1a(hash, shm_fs);
        return hash;
    }();
    return id;
}

}  // namespace loom::uct::shm
