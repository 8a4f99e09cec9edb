/**
 * PciAddress: a PCI function's location, domain:bus:device.function, as in sysfs
 * ("0000:3b:00.1"), lspci and hwloc.
 */
#pragma once

#include "ucs/type/result.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace loom::ucs {

struct PciAddress {
    std::uint32_t domain = 0;  ///< 16 bits, more behind Intel VMD ("10000:00:00.0")
    std::uint8_t bus = 0;
    std::uint8_t device = 0;    ///< 0..31
    std::uint8_t function = 0;  ///< 0..7

    /**
     * Parses "dddd:bb:dd.f" (hex, as in sysfs; 4 to 8 domain digits) or the short "bb:dd.f" of lspci
     * (domain 0). Returns Status::invalid_param for anything else; does not log, as
     * callers probe path components with it.
     */
    static Result<PciAddress> parse(std::string_view text);

    /** The sysfs form, "0000:3b:00.1". */
    std::string to_string() const;

    bool operator==(const PciAddress& other) const noexcept = default;
};

/** A short name for a PCI class code (class << 8 | subclass): "Ethernet", "InfiniBand", "Storage"... */
std::string_view pci_class_name(std::uint16_t class_id) noexcept;

}  // namespace loom::ucs
