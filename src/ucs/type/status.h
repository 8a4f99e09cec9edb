/**
 * Status codes returned across every Loom layer.
 *
 * Values are fixed forever (they cross the C API and appear in logs), grouped in
 * ranges so a caller can classify an unknown code:
 *   0            ok
 *   1 .. 127     operation still running (in_progress)
 *  -1 .. -39     generic errors (parameters, resources, memory, I/O)
 *  -40 .. -69    peer and connection errors
 *  -70 .. -89    protocol and data errors (malformed input, truncation)
 *  -90 .. -128   reserved for future layers; never renumbered
 */
#pragma once

#include <cstdint>
#include <string_view>

namespace loom {

enum class [[nodiscard]] Status : std::int8_t {
    ok                  = 0,
    in_progress         = 1,

    // Generic errors
    no_resource         = -1,   ///< Transient: queue the operation and retry later
    no_memory           = -2,
    invalid_param       = -3,
    io_error            = -4,
    busy                = -5,
    canceled            = -6,
    timed_out           = -7,
    unsupported         = -8,   ///< Not implemented by this transport or device
    no_element          = -9,   ///< Lookup found nothing
    already_exists      = -10,
    out_of_range        = -11,
    exceeds_limit       = -12,
    no_device           = -13,
    invalid_config      = -14,  ///< A configuration value could not be parsed
    no_progress         = -15,
    buffer_too_small    = -16,
    not_found           = -17,  ///< A file, module or symbol is missing
    permission_denied   = -18,

    // Peer and connection errors
    unreachable         = -40,
    connection_refused  = -41,
    connection_reset    = -42,
    endpoint_failure    = -43,
    not_connected       = -44,
    rejected            = -45,
    peer_timeout        = -46,
    invalid_address     = -47,

    // Protocol and data errors
    message_truncated   = -70,
    malformed_packet    = -71,
    version_mismatch    = -72,
    no_message          = -73,
    access_denied       = -74,  ///< A remote key's bounds or rights were violated
};

/** Lowest code reserved by the ranges above; nothing is ever defined below it. */
inline constexpr int kStatusLastReserved = -128;

/** True for ok and in_progress, false for every error. */
constexpr bool is_ok_or_in_progress(Status s) noexcept { return static_cast<int>(s) >= 0; }

/** True for every error code (negative values). */
constexpr bool is_error(Status s) noexcept { return static_cast<int>(s) < 0; }

/** True for errors in the peer/connection range: the endpoint is unusable. */
constexpr bool is_peer_error(Status s) noexcept {
    return static_cast<int>(s) <= -40 && static_cast<int>(s) > -70;
}

/** Human-readable name of a status, e.g. "no resource"; "unknown status (-99)" style for others. */
std::string_view to_string(Status s) noexcept;

/** Name of a status code given as an integer (C API, logs of another version). */
std::string_view status_string(int code) noexcept;

}  // namespace loom
