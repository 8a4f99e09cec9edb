/**
 * The addresses of the self transport (private, not installed). Nothing else crosses
 * an iface boundary: every operation runs inside its call, in the same process.
 */
#pragma once

#include <cstdint>

namespace loom::uct::self {

/** Version byte of both addresses. */
inline constexpr std::uint8_t kAddrVersion = 1;

/** Device address: which process. */
struct [[gnu::packed]] DeviceAddress {
    std::uint8_t version;
    std::uint64_t process_id;
};

/** Iface address: which iface in that process. */
struct [[gnu::packed]] IfaceAddress {
    std::uint8_t version;
    std::uint64_t iface_id;
};

}  // namespace loom::uct::self
