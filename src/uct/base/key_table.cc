/**
 * The key table of software-emulated RMA (key_table.h): registration, release, packing
 * and the validation of a peer's packed key.
 */
#include "uct/base/key_table.h"

#include <cstring>

namespace loom::uct {

Result<Rkey> region_key_unpack(const log::Component& component, const std::uint8_t* packed, std::size_t length) {
    if (packed == nullptr || length != sizeof(PackedRegionKey)) {
        LOOM_LOG_C(component, log::Level::error, "rkey_unpack: packed key has {} bytes, expected {}", length,
                   sizeof(PackedRegionKey));
        return Status::invalid_param;
    }
    PackedRegionKey key;
    std::memcpy(&key, packed, sizeof(key));
    if (key.version != kRegionKeyVersion) {
        LOOM_LOG_C(component, log::Level::error, "rkey_unpack: key version {} (expected {})", key.version,
                   kRegionKeyVersion);
        return Status::invalid_param;
    }
    if ((key.access & ~static_cast<unsigned>(kAccessAll)) != 0 || key.cookie == 0 || key.base + key.length < key.base) {
        std::uint64_t base = key.base, len = key.length;
        LOOM_LOG_C(component, log::Level::error, "rkey_unpack: malformed key (access {:#x}, region {:#x}+{})",
                   key.access, base, len);
        return Status::invalid_param;
    }
    auto* rk = new RegionKey{key.cookie, key.key_id, key.access, key.base, key.length};
    return Rkey{reinterpret_cast<std::uint64_t>(rk), rk};
}

void region_key_release(const Rkey& rkey) { delete static_cast<RegionKey*>(rkey.handle); }

KeyTable::KeyTable(const log::Component& component) : log_(component), rng_(std::random_device{}()) {}

KeyTable::~KeyTable() {
    if (handles_.empty()) return;
    LOOM_LOG_C(log_, log::Level::warn, "memory domain closed with {} memory registrations still active",
               handles_.size());
    for (KeyHandle* h : handles_) delete h;
}

Result<KeyHandle*> KeyTable::add(void* address, std::size_t length, unsigned access) {
    auto base = reinterpret_cast<std::uint64_t>(address);
    if ((address == nullptr && length != 0) || (access & ~static_cast<unsigned>(kAccessAll)) != 0 ||
        base + length < base) {
        LOOM_LOG_C(log_, log::Level::error, "mem_reg: invalid region {}+{} or access {:#x}", address, length,
                   access);
        return Status::invalid_param;
    }
    std::uint32_t slot;
    if (!free_slots_.empty()) {
        slot = free_slots_.back();
        free_slots_.pop_back();
    } else {
        if (regions_.size() >= UINT32_MAX) return Status::no_resource;
        slot = static_cast<std::uint32_t>(regions_.size());
        regions_.emplace_back();
    }
    std::uint64_t cookie;
    do {
        cookie = rng_();
    } while (cookie == 0);  // 0 marks a free slot
    regions_[slot] = KeyRegion{base, length, cookie, access};
    auto* handle = new KeyHandle{slot, cookie};
    handles_.insert(handle);
    return handle;
}

Status KeyTable::remove(KeyHandle* handle) {
    if (handles_.erase(handle) == 0) {
        LOOM_LOG_C(log_, log::Level::error, "mem_dereg: {} is not a registration of this md",
                   static_cast<void*>(handle));
        return Status::invalid_param;
    }
    regions_[handle->key_id] = KeyRegion{};
    free_slots_.push_back(handle->key_id);
    delete handle;
    return Status::ok;
}

Status KeyTable::pack(const KeyHandle* handle, std::uint8_t* out) const {
    if (handles_.count(const_cast<KeyHandle*>(handle)) == 0) {
        LOOM_LOG_C(log_, log::Level::error, "mkey_pack: {} is not a registration of this md",
                   static_cast<const void*>(handle));
        return Status::invalid_param;
    }
    const KeyRegion& r = regions_[handle->key_id];
    PackedRegionKey packed{kRegionKeyVersion, static_cast<std::uint8_t>(r.access), handle->key_id, r.base, r.length,
                           r.cookie};
    std::memcpy(out, &packed, sizeof(packed));
    return Status::ok;
}

}  // namespace loom::uct
