/**
 * Remote keys of transports that emulate RMA in software (tcp, self): the target keeps a
 * table of its registered regions and checks every remote access against it, trusting
 * nothing of a key beyond the slot it names and the cookie that proves the key is current.
 *
 * A region's slot index is its key id; every registration draws a fresh random 64-bit
 * cookie, so a key that was released (its slot reused) or forged does not match. The
 * packed key carries the key id, cookie, base, length and rights.
 */
#pragma once

#include "ucs/debug/log.h"
#include "ucs/sys/compiler.h"
#include "ucs/type/result.h"
#include "uct/api/uct_types.h"

#include <cstdint>
#include <random>
#include <unordered_set>
#include <vector>

namespace loom::uct {

/** One registered region of a key table. */
struct KeyRegion {
    std::uint64_t base = 0;
    std::uint64_t length = 0;
    std::uint64_t cookie = 0;  ///< 0 while the slot is free
    unsigned access = 0;
};

/** A memory handle handed out by KeyTable::add (a transport's MemH). */
struct KeyHandle {
    std::uint32_t key_id;
    std::uint64_t cookie;
};

/** Version byte of a PackedRegionKey: a key of another layout is refused on unpack. */
inline constexpr std::uint8_t kRegionKeyVersion = 2;

/** A packed remote key: what a peer needs to name a registered region. */
struct [[gnu::packed]] PackedRegionKey {
    std::uint8_t version;
    std::uint8_t access;  ///< MemAccess bits granted
    std::uint32_t key_id;
    std::uint64_t base;
    std::uint64_t length;
    std::uint64_t cookie;
};
static_assert(sizeof(PackedRegionKey) == 30);

/** A peer's key as unpacked on the initiator; Rkey::rkey points at it. */
struct RegionKey {
    std::uint64_t cookie;
    std::uint32_t key_id;
    std::uint8_t access;
    std::uint64_t base;
    std::uint64_t length;
};

/**
 * Validates a packed key (length, version, rights, a region that does not wrap) and
 * unpacks it; invalid_param with one error line, on the transport's log @p component,
 * naming what is wrong.
 */
Result<Rkey> region_key_unpack(const log::Component& component, const std::uint8_t* packed, std::size_t length);

/** Frees what region_key_unpack allocated. */
void region_key_release(const Rkey& rkey);

/** See the file comment. Not thread safe: calls are serialized like the md's. */
class KeyTable {
public:
    /** Errors are logged on the transport's log @p component. */
    explicit KeyTable(const log::Component& component);
    /** Frees handles still registered, with a warning giving their count. */
    ~KeyTable();
    KeyTable(const KeyTable&) = delete;
    KeyTable& operator=(const KeyTable&) = delete;

    /** Registers [address, address + length) with @p access; invalid_param for a bad region. */
    Result<KeyHandle*> add(void* address, std::size_t length, unsigned access);
    /** Releases a handle of add(); invalid_param (logged) for anything else. */
    Status remove(KeyHandle* handle);
    /** Packs @p handle's key into @p out (sizeof(PackedRegionKey) bytes). */
    Status pack(const KeyHandle* handle, std::uint8_t* out) const;

    /**
     * The region key @p key_id with @p cookie names, when it grants @p access over
     * [addr, addr + length); otherwise nullptr and @p why says what failed.
     */
    const KeyRegion* check_access(std::uint32_t key_id, std::uint64_t cookie, std::uint64_t addr,
                                  std::uint64_t length, unsigned access, const char** why) const noexcept {
        if (LOOM_UNLIKELY(key_id >= regions_.size())) {
            *why = "unknown key id";
            return nullptr;
        }
        const KeyRegion& r = regions_[key_id];
        if (LOOM_UNLIKELY(r.cookie == 0 || r.cookie != cookie)) {
            *why = "key cookie mismatch (forged or released key)";
            return nullptr;
        }
        if (LOOM_UNLIKELY(addr < r.base || length > r.length || addr - r.base > r.length - length)) {
            *why = "address range outside the registered region";
            return nullptr;
        }
        if (LOOM_UNLIKELY((r.access & access) != access)) {
            *why = "access right not granted";
            return nullptr;
        }
        return &r;
    }

    /** Number of live registrations. */
    std::size_t size() const { return handles_.size(); }

private:
    const log::Component& log_;
    std::vector<KeyRegion> regions_;
    std::vector<std::uint32_t> free_slots_;
    std::unordered_set<KeyHandle*> handles_;
    std::mt19937_64 rng_;
};

}  // namespace loom::uct
