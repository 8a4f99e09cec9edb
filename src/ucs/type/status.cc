#include "ucs/type/status.h"

#include <array>
#include <cstdio>
#include <utility>

namespace loom {

namespace {

struct StatusName {
    Status status;
    std::string_view name;
};

constexpr StatusName kStatusNames[] = {
    {Status::ok, "success"},
    {Status::in_progress, "operation in progress"},
    {Status::no_resource, "no resource"},
    {Status::no_memory, "out of memory"},
    {Status::invalid_param, "invalid parameter"},
    {Status::io_error, "input/output error"},
    {Status::busy, "device or resource busy"},
    {Status::canceled, "canceled"},
    {Status::timed_out, "timed out"},
    {Status::unsupported, "unsupported operation"},
    {Status::no_element, "no such element"},
    {Status::already_exists, "already exists"},
    {Status::out_of_range, "out of range"},
    {Status::exceeds_limit, "exceeds limit"},
    {Status::no_device, "no such device"},
    {Status::invalid_config, "invalid configuration"},
    {Status::no_progress, "no progress"},
    {Status::buffer_too_small, "buffer too small"},
    {Status::not_found, "not found"},
    {Status::permission_denied, "permission denied"},
    {Status::unreachable, "destination unreachable"},
    {Status::connection_refused, "connection refused"},
    {Status::connection_reset, "connection reset by peer"},
    {Status::endpoint_failure, "endpoint failure"},
    {Status::not_connected, "not connected"},
    {Status::rejected, "connection request rejected"},
    {Status::peer_timeout, "peer timed out"},
    {Status::invalid_address, "invalid address"},
    {Status::message_truncated, "message truncated"},
    {Status::malformed_packet, "malformed packet"},
    {Status::version_mismatch, "version mismatch"},
    {Status::no_message, "no message"},
    {Status::access_denied, "remote access denied"},
};

}  // namespace

std::string_view status_string(int code) noexcept {
    for (const auto& entry : kStatusNames) {
        if (static_cast<int>(entry.status) == code) {
            return entry.name;
        }
    }
    // Unknown codes get a per-thread buffer so the returned view stays valid.
    thread_local std::array<char, 40> buf;
    int n = std::snprintf(buf.data(), buf.size(), "unknown status (%d)", code);
    return {buf.data(), static_cast<std::size_t>(n)};
}

std::string_view to_string(Status s) noexcept { return status_string(static_cast<int>(s)); }

}  // namespace loom
