#include "uct/shm/shm_config.h"

namespace loom::uct::shm {

namespace {

using namespace ucs::config;

const RegisteredTable<ShmConfig> g_table{
    "SHM_",
    "shm transport",
    "Shared memory between processes of one host: a lock-free receive ring per interface, "
    "process_vm_readv/writev (CMA) for zero-copy put and get, CPU atomics on memory from mem_alloc.",
    {
        field("FIFO_SIZE", "256k",
              "Bytes of the receive ring of each interface (rounded up to a power of two of 64-byte "
              "cells). It must hold at least four of the largest messages (MAX_BCOPY plus 144 bytes of "
              "headers).",
              &ShmConfig::fifo_size, SizeParser()),
        field("MAX_BCOPY", "8256",
              "Largest payload of one am_bcopy, put_bcopy or get_bcopy, and the fragment size of "
              "emulated put/get. From 256 bytes to 1m. The default is 8 KiB plus 64 bytes, so a "
              "protocol's 8 KiB message and its headers travel as one message.",
              &ShmConfig::max_bcopy, SizeParser()),
        field("CMA", "try",
              "Zero-copy put and get with process_vm_writev/readv (cross memory attach): yes (fail "
              "the operation when the kernel forbids it), no (always emulate: the data goes through "
              "the target's receive ring and the target's progress copies it), or try (use it, and "
              "fall back to the emulation for a peer where the kernel says EPERM, e.g. under "
              "kernel.yama.ptrace_scope or across users).",
              &ShmConfig::cma, TernaryParser().disallow_auto()),
        field("SEGMENT", "auto",
              "How shared memory is created: memfd (peers open /proc/PID/fd/FD; nothing appears "
              "in /dev/shm), posix (named /dev/shm/loom-UID-PID-START-COOKIE, removed when "
              "the interface closes or the memory is freed, and by the next process when the owner "
              "crashed), or auto (memfd when peers can open our /proc links, else posix).",
              &ShmConfig::segment,
              EnumParser<SegmentMode>({{"auto", SegmentMode::auto_},
                                       {"memfd", SegmentMode::memfd},
                                       {"posix", SegmentMode::posix}})),
        field("PEER_CHECK_INTERVAL", "100ms",
              "How often progress checks that the peers of the endpoints are alive (a dead peer "
              "fails its endpoints). A full receive ring triggers a check at once.",
              &ShmConfig::peer_check_interval, TimeParser()),
        field("DEAD_PRODUCER_TIMEOUT", "2s",
              "A peer process killed between reserving cells of our receive ring and publishing its "
              "message there would stop the ring for good (every later message waits behind it). "
              "When the ring has waited that long on such a reservation and a peer process died "
              "meanwhile, progress skips to the next published message (one error line). Live "
              "peers publish within microseconds of reserving; the margin is for a loaded machine.",
              &ShmConfig::dead_producer_timeout, TimeParser()),
    }};

}  // namespace

const ucs::config::Table<ShmConfig>& shm_config_table() {
    return g_table;
}

}  // namespace loom::uct::shm
