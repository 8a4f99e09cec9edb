#include "ucs/topo/pci_address.h"

#include <fmt/format.h>

#include <charconv>
#include <optional>

namespace loom::ucs {
namespace {

// Between @p min_digits and @p max_digits hex digits, no sign or prefix.
std::optional<unsigned> parse_hex(std::string_view text, std::size_t min_digits, std::size_t max_digits) {
    if (text.size() < min_digits || text.size() > max_digits) return std::nullopt;
    for (char c : text) {
        const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
        if (!hex) return std::nullopt;
    }
    unsigned value = 0;
    std::from_chars(text.data(), text.data() + text.size(), value, 16);
    return value;
}

}  // namespace

Result<PciAddress> PciAddress::parse(std::string_view text) {
    // Count the colons to tell "dddd:bb:dd.f" from "bb:dd.f".
    std::string_view domain_text = "0000";
    const std::size_t first_colon = text.find(':');
    if (first_colon == std::string_view::npos) return Status::invalid_param;
    if (text.find(':', first_colon + 1) != std::string_view::npos) {
        domain_text = text.substr(0, first_colon);
        text.remove_prefix(first_colon + 1);
    }
    const std::size_t colon = text.find(':');
    const std::size_t dot = text.find('.');
    if (colon == std::string_view::npos || dot == std::string_view::npos || dot < colon) {
        return Status::invalid_param;
    }
    const auto domain = parse_hex(domain_text, 4, 8);
    const auto bus = parse_hex(text.substr(0, colon), 2, 2);
    const auto device = parse_hex(text.substr(colon + 1, dot - colon - 1), 2, 2);
    const auto function = parse_hex(text.substr(dot + 1), 1, 1);
    if (!domain || !bus || !device || !function || *device > 31 || *function > 7)
        return Status::invalid_param;
    return PciAddress{*domain, static_cast<std::uint8_t>(*bus), static_cast<std::uint8_t>(*device),
                      static_cast<std::uint8_t>(*function)};
}

std::string PciAddress::to_string() const {
    return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", domain, bus, device, function);
}

std::string_view pci_class_name(std::uint16_t class_id) noexcept {
    // Sub-classes worth telling apart for a communication library first.
    switch (class_id) {
        case 0x0200:
            return "Ethernet";
        case 0x0207:
            return "InfiniBand";
        case 0x0c06:
            return "InfiniBand";
        case 0x0208:
            return "Fabric";
        case 0x0302:
            return "3D";
        case 0x0b40:
            return "Co-Processor";
        case 0x0c03:
            return "USB";
        default:
            break;
    }
    switch (class_id >> 8) {
        case 0x01:
            return "Storage";
        case 0x02:
            return "Network";
        case 0x03:
            return "Display";
        case 0x04:
            return "Multimedia";
        case 0x05:
            return "Memory";
        case 0x06:
            return "Bridge";
        case 0x08:
            return "System";
        case 0x0b:
            return "Processor";
        case 0x0c:
            return "Serial";
        case 0x12:
            return "Accelerator";
        default:
            return "Other";
    }
}

}  // namespace loom::ucs
