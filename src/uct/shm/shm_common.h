/**
 * Shared pieces of the shm transport (private, not installed): the identity of this
 * process and of this host, and small system helpers. Its log component is in
 * shm_log.h.
 */
#pragma once

#include "ucs/type/result.h"

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace loom::uct::shm {

/**
 * Who this process is, as peers see it: the pid, its start time (clock ticks after
 * boot, field 22 of /proc/<pid>/stat) and a random cookie. pid + start time name a
 * process uniquely for the lifetime of the host (a reused pid has a later start);
 * the cookie tells this process from a forked child that inherited its memory.
 */
struct ProcessIdentity {
    pid_t pid = 0;
    std::uint64_t start_time = 0;
    std::uint64_t cookie = 0;
};

/** This process's identity; recomputed in a child after fork (pthread_atfork), a lock otherwise. */
ProcessIdentity this_process();

/**
 * The start time of process @p pid, or no_element when there is no such process
 * (or /proc cannot tell). Used to tell a live owner from a dead one whose pid was reused.
 */
Result<std::uint64_t> process_start_time(pid_t pid);

/**
 * Identifies the shared-memory domain this process lives in: a hash of the kernel
 * boot id, the host name, the pid namespace and the file system behind /dev/shm (a
 * mount namespace with its own /dev/shm is another host). Processes that agree on it can map
 * each other's segments and name each other by pid; anything else is another host
 * (or a container that cannot see our /proc).
 */
std::uint64_t host_id();

/** 64 random bits from the kernel (getrandom), never 0. */
std::uint64_t random_u64();

/** strerror(errno) for @p err, thread-safe. */
std::string errno_string(int err);

}  // namespace loom::uct::shm
