/**
 * Configuration of the shm transport: the LOOM_SHM_* variables.
 */
#pragma once

#include "uct/shm/shm_segment.h"

#include "ucs/config/registry.h"

#include <chrono>
#include <cstddef>

namespace loom::uct::shm {

/** Values of the LOOM_SHM_* table. */
struct ShmConfig {
    std::size_t fifo_size = 0;                              ///< bytes of each iface's receive ring
    std::size_t max_bcopy = 0;                              ///< largest am/put/get bcopy payload
    ucs::config::Ternary cma = ucs::config::Ternary::try_;  ///< process_vm_readv/writev for put/get
    SegmentMode segment = SegmentMode::auto_;               ///< memfd or posix segments
    std::chrono::nanoseconds peer_check_interval{};         ///< how often progress checks that peers live
    std::chrono::nanoseconds dead_producer_timeout{};       ///< a reservation left unpublished by a dead peer
};

/** The LOOM_SHM_ table. */
const ucs::config::Table<ShmConfig>& shm_config_table();

/** Smallest and largest accepted LOOM_SHM_MAX_BCOPY. */
inline constexpr std::size_t kMinMaxBcopy = 256;
inline constexpr std::size_t kMaxMaxBcopy = 1u << 20;

}  // namespace loom::uct::shm
