/**
 * Configuration of the tcp transport: the LOOM_TCP_* variables.
 */
#pragma once

#include "ucs/config/registry.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace loom::uct::tcp {

/** LOOM_TCP_* settings of one iface. */
struct TcpConfig {
    std::string port_range;          ///< "0" (any) or "min-max"
    std::size_t sndbuf = 0;          ///< kSizeAuto: leave the kernel's auto-tuning on
    std::size_t rcvbuf = 0;
    bool nodelay = true;
    std::string congestion;          ///< "auto", "system" or the name of a congestion control algorithm
    std::size_t seg_size = 0;        ///< largest short/bcopy payload: frames up to it pass through the receive buffer
    std::size_t max_am = 0;          ///< largest active message (am_zcopy beyond seg_size streams)
    unsigned conn_retries = 0;
    std::chrono::nanoseconds conn_retry_interval{};
    std::chrono::nanoseconds conn_timeout{};
    unsigned backlog = 0;
    std::chrono::nanoseconds keepalive_idle{};      ///< kTimeInf: no keepalive probes
    std::chrono::nanoseconds keepalive_interval{};
    unsigned keepalive_count = 0;
};

/** The LOOM_TCP_ table (registered while libloom-uct is loaded). */
const ucs::config::Table<TcpConfig>& tcp_config_table();

/** Parses "0" or "min-max" into a port range; invalid_config when malformed. */
Status parse_port_range(const std::string& text, std::uint16_t& min, std::uint16_t& max);

/** Smallest and largest accepted LOOM_TCP_SEG_SIZE. */
inline constexpr std::size_t kMinSegSize = 4096;
inline constexpr std::size_t kMaxSegSize = 64ull << 20;

}  // namespace loom::uct::tcp
