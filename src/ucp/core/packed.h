/**
 * Writing and bounds-checked reading of the protocol layer's packed blobs (worker
 * addresses, remote keys): little endian, unaligned, every read checked against what is
 * left, so a truncated or forged blob sets `ok` to false instead of reading past its end.
 */
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace loom::ucp {

/** Appends the bytes of @p value. */
template <typename T>
void pack_put(std::vector<std::uint8_t>& out, T value) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&value);
    out.insert(out.end(), p, p + sizeof(T));
}

/** Appends @p text as a u8 length and at most 255 bytes. */
inline void pack_put_string(std::vector<std::uint8_t>& out, const std::string& text) {
    const std::size_t n = std::min<std::size_t>(text.size(), 255);
    out.push_back(static_cast<std::uint8_t>(n));
    out.insert(out.end(), text.begin(), text.begin() + static_cast<long>(n));
}

/** Reads a packed blob; after a read past the end `ok` is false and every later read returns nothing. */
struct PackedReader {
    const std::uint8_t* p;
    std::size_t left;
    bool ok = true;

    /** The next value, or T{} (and ok false) when fewer than sizeof(T) bytes are left. */
    template <typename T>
    T get() {
        T value{};
        if (left < sizeof(T)) {
            ok = false;
            return value;
        }
        std::memcpy(&value, p, sizeof(T));
        p += sizeof(T);
        left -= sizeof(T);
        return value;
    }

    /** The next @p n bytes in place, or nullptr (and ok false). */
    const std::uint8_t* bytes(std::size_t n) {
        if (left < n) {
            ok = false;
            return nullptr;
        }
        const std::uint8_t* b = p;
        p += n;
        left -= n;
        return b;
    }

    /** A copy of the next @p n bytes (empty, and ok false, when fewer are left). */
    std::vector<std::uint8_t> copy(std::size_t n) {
        const std::uint8_t* b = bytes(n);
        return b == nullptr ? std::vector<std::uint8_t>() : std::vector<std::uint8_t>(b, b + n);
    }

    /** A u8-length-prefixed string, in place. */
    std::string_view text() {
        const std::size_t n = get<std::uint8_t>();
        const std::uint8_t* b = bytes(n);
        return b == nullptr ? std::string_view() : std::string_view(reinterpret_cast<const char*>(b), n);
    }
};

}  // namespace loom::ucp
