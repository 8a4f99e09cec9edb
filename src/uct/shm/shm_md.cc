#include "uct/shm/shm_log.h"  // first: inline code of the other headers logs to shm_log()
#include "uct/shm/shm_common.h"

#include "uct/shm/shm_md.h"

#include "uct/shm/shm_iface.h"
#include "uct/shm/shm_wire.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>

namespace loom::uct::shm {

namespace detail {

RegionTable& region_table() {
    static RegionTable* table = new RegionTable();  // never destroyed: static mds may deregister late
    return *table;
}

}  // namespace detail

namespace {

/** The unique part of a key id (shm_reg_table.h); a random start so ids of different runs differ. */
std::uint64_t next_key_nonce() {
    constexpr std::uint64_t kNonceMask = (std::uint64_t{1} << (64 - kSlotBits)) - 1;
    static std::atomic<std::uint64_t> counter{random_u64()};
    std::uint64_t nonce;
    do {
        nonce = counter.fetch_add(1, std::memory_order_relaxed) & kNonceMask;
    } while (nonce == 0);  // a key id is never 0: 0 marks a free slot
    return nonce;
}

}  // namespace

/**
 * Mappings of peers' mem_alloc segments and registration tables, shared by every key that
 * names the same segment. A segment is unmapped with its last key, except a registration
 * table: every rendezvous unpacks a key and releases it, and mapping the table each time
 * cost ~20 us (shm tag_lat 16 KiB went from 3.6 to 25 us), so tables stay mapped while
 * their owner lives (at most kKeptTables unused ones).
 */
class SegmentCache {
public:
    /**
     * Maps (or finds) @p seg, read-write or read-only (a registration table); returns its
     * local address, its size and the key to release it with.
     */
    Result<std::pair<std::uint8_t*, std::uint64_t>> acquire(const SegmentId& seg, bool writable,
                                                            std::string* reason,
                                                            std::size_t* size = nullptr) {
        std::lock_guard guard(lock_);
        // The cookie is random per segment: it names the segment on its own (the pid only narrows it).
        std::uint64_t key = seg.cookie;
        auto it = entries_.find(key);
        if (it != entries_.end()) {
            if (it->second.pid != seg.pid || it->second.mapping.size() < seg.size ||
                it->second.writable != writable) {
                if (reason) *reason = "segment cookie reused with different contents";
                return Status::invalid_param;
            }
            ++it->second.refs;
            if (size != nullptr) *size = it->second.mapping.size();
            return std::make_pair(static_cast<std::uint8_t*>(it->second.mapping.address()), key);
        }
        if (!writable) drop_unused_tables();
        auto mapping = Mapping::attach(seg, reason, writable);
        if (!mapping) return mapping.status();
        auto* address = static_cast<std::uint8_t*>(mapping->address());
        if (size != nullptr) *size = mapping->size();
        entries_.emplace(key, Entry{std::move(*mapping), seg.pid, 1, writable});
        return std::make_pair(address, key);
    }

    /** Drops one reference; unmaps the segment with the last. */
    void release(std::uint64_t key) {
        std::lock_guard guard(lock_);
        auto it = entries_.find(key);
        if (it != entries_.end() && --it->second.refs == 0 && it->second.writable) entries_.erase(it);
    }

    /** Number of mapped segments (tests). */
    std::size_t size() {
        std::lock_guard guard(lock_);
        return entries_.size();
    }

private:
    static constexpr std::size_t kKeptTables = 64;

    /** Unmaps unused tables of processes that are gone, and the oldest beyond kKeptTables. */
    void drop_unused_tables() {
        std::size_t unused = 0;
        for (auto it = entries_.begin(); it != entries_.end();) {
            const Entry& e = it->second;
            if (e.writable || e.refs != 0) {
                ++it;
            } else if (::kill(static_cast<pid_t>(e.pid), 0) != 0 && errno == ESRCH) {
                it = entries_.erase(it);
            } else {
                ++unused;
                ++it;
            }
        }
        for (auto it = entries_.begin(); unused > kKeptTables && it != entries_.end();) {
            if (!it->second.writable && it->second.refs == 0) {
                it = entries_.erase(it);
                --unused;
            } else {
                ++it;
            }
        }
    }

    struct Entry {
        Mapping mapping;
        std::uint32_t pid;
        unsigned refs;
        bool writable;  ///< a mem_alloc segment; false: a registration table (kept while unused)
    };
    std::mutex lock_;
    std::map<std::uint64_t, Entry> entries_;
};

// --- Component --------------------------------------------------------------------------

ShmComponent::ShmComponent() : Component("shm"), cache_(std::make_unique<SegmentCache>()) {}

ShmComponent::~ShmComponent() = default;

std::vector<std::string> ShmComponent::query_md_resources() const {
    return {"shm"};
}

Result<std::unique_ptr<Md>> ShmComponent::md_open(std::string_view md_name) const {
    if (md_name != "shm") return Status::no_device;
    ShmConfig config;
    Status status = ucs::config::fill(shm_config_table(), config);
    if (status != Status::ok) return status;
    // A crashed process may have left posix segments behind: remove them once per process.
    static std::once_flag swept;
    std::call_once(swept, [] { (void)sweep_stale_segments(); });
    return std::unique_ptr<Md>(new ShmMd(*this, config));
}

Result<Rkey> ShmComponent::rkey_unpack(const std::uint8_t* packed, std::size_t length) const {
    if (packed == nullptr || length != sizeof(PackedRkey)) {
        LOOM_LOG_ERROR("rkey_unpack: a packed shm key has {} bytes, got {}", sizeof(PackedRkey), length);
        return Status::invalid_param;
    }
    PackedRkey pk;
    std::memcpy(&pk, packed, sizeof(pk));
    if (pk.version != kRkeyVersion) {
        LOOM_LOG_ERROR("rkey_unpack: key version {} (expected {})", pk.version, kRkeyVersion);
        return Status::invalid_param;
    }
    const bool alloc = pk.kind == static_cast<std::uint8_t>(PackedKind::alloc);
    if ((!alloc && pk.kind != static_cast<std::uint8_t>(PackedKind::reg)) || (pk.access & ~kAccessAll) != 0 ||
        pk.pid == 0 || pk.pid > static_cast<std::uint32_t>(INT32_MAX) ||
        pk.address + pk.length < pk.address) {
        LOOM_LOG_ERROR("rkey_unpack: malformed key (kind {}, access {:#x}, pid {}, region {:#x}+{})", pk.kind,
                       pk.access, pk.pid, pk.address, pk.length);
        return Status::invalid_param;
    }
    auto key = std::make_unique<RemoteKey>();
    key->address = pk.address;
    key->length = pk.length;
    key->base = nullptr;
    key->slot = nullptr;
    key->access = pk.access;
    key->pid = pk.pid;
    key->key_id = pk.key_id;
    key->cache = nullptr;
    key->cache_key = 0;
    const ProcessIdentity self = this_process();
    if (pk.pid == static_cast<std::uint32_t>(self.pid) && pk.process_cookie == self.cookie) {
        // Our own memory, reached with plain loads and stores: only a live registration of
        // this process may name it (a forged key would reach any address; found by fuzzing).
        if (with_region(pk.key_id, pk.address, pk.length, pk.access, [](std::uint8_t*) {}) != Status::ok) {
            LOOM_LOG_ERROR(
                "rkey_unpack: key {} of this process names no registration covering {:#x}+{} with "
                "access {:#x} (forged, or deregistered)",
                pk.key_id, pk.address, pk.length, pk.access);
            return Status::invalid_param;
        }
        key->kind = KeyKind::local;  // our own memory: the address is valid here
        key->base = reinterpret_cast<std::uint8_t*>(pk.address);
    } else if (pk.pid == static_cast<std::uint32_t>(self.pid)) {
        // Our pid, another process's cookie: a key of a process that had our pid before us.
        // Reaching "process pid" with it (CMA, or our own FIFO) would reach us instead.
        LOOM_LOG_ERROR("rkey_unpack: key of an earlier process with this pid {} (stale or forged)", pk.pid);
        return Status::invalid_param;
    } else if (alloc) {
        if (pk.seg.pid != pk.pid || pk.seg.size < pk.length) {
            LOOM_LOG_ERROR(
                "rkey_unpack: malformed key (segment of pid {} with {} bytes for a region of pid {} "
                "with {} bytes)",
                pk.seg.pid, pk.seg.size, pk.pid, pk.length);
            return Status::invalid_param;
        }
        std::string reason;
        auto mapped = cache_->acquire(pk.seg, true, &reason);
        if (!mapped) {
            LOOM_LOG_ERROR("rkey_unpack: cannot map the memory of process {}: {}", pk.pid, reason);
            return mapped.status();
        }
        key->kind = KeyKind::mapped;
        key->base = mapped->first;  // the region starts at the segment's start
        key->cache = cache_.get();
        key->cache_key = mapped->second;
    } else {
        key->kind = KeyKind::remote;
        if (Status status = attach_published_slot(pk, *key); status != Status::ok) return status;
    }
    RemoteKey* raw = key.release();
    return Rkey{reinterpret_cast<std::uint64_t>(raw), raw};
}

Status ShmComponent::attach_published_slot(const PackedRkey& pk, RemoteKey& key) const {
    if (pk.seg.kind == 0) return Status::ok;  // the owner publishes no table: emulated put/get only
    if (pk.seg.pid != pk.pid) {
        LOOM_LOG_ERROR("rkey_unpack: malformed key (registration table of pid {} for a region of pid {})",
                       pk.seg.pid, pk.pid);
        return Status::invalid_param;
    }
    std::string reason;
    std::size_t size = 0;
    auto mapped = cache_->acquire(pk.seg, false, &reason, &size);
    if (!mapped) {
        // CMA needs more rights than opening the table does, so it would fail too: emulate.
        LOOM_LOG_DEBUG("rkey_unpack: registration table of process {} not mapped ({}): put/get emulated",
                       pk.pid, reason);
        return Status::ok;
    }
    const RegSlot* slot = table_slot(mapped->first, size, pk.pid, pk.process_cookie, pk.seg.cookie,
                                     slot_of(pk.key_id), &reason);
    if (slot == nullptr) {
        cache_->release(mapped->second);
        LOOM_LOG_ERROR("rkey_unpack: key {:#x} of process {}: {} (forged or corrupt)", pk.key_id, pk.pid,
                       reason);
        return Status::invalid_param;
    }
    if (!slot_allows(*slot, pk.key_id, pk.address, pk.length, pk.access)) {
        cache_->release(mapped->second);
        LOOM_LOG_ERROR(
            "rkey_unpack: process {} has no registration {:#x} covering {:#x}+{} with access {:#x} "
            "(deregistered, or a forged key)",
            pk.pid, pk.key_id, pk.address, pk.length, pk.access);
        return Status::invalid_param;
    }
    key.slot = slot;
    key.cache = cache_.get();  // the table stays mapped while the key lives
    key.cache_key = mapped->second;
    return Status::ok;
}

void ShmComponent::rkey_release(const Rkey& rkey) const {
    auto* key = static_cast<RemoteKey*>(rkey.handle);
    if (key == nullptr) return;
    if (key->cache != nullptr) key->cache->release(key->cache_key);
    delete key;
}

Status ShmComponent::rkey_ptr(const Rkey& rkey, std::uint64_t remote_addr, void** address) const {
    const auto* key = static_cast<const RemoteKey*>(rkey.handle);
    if (key == nullptr || !key->allows(remote_addr, 0, 0)) return Status::invalid_param;
    // Registered memory of another process is reached by CMA or the owner's progress, never mapped.
    if (key->base == nullptr) return Status::unreachable;
    *address = key->base + (remote_addr - key->address);
    return Status::ok;
}

// --- Md ---------------------------------------------------------------------------------

ShmMd::ShmMd(const Component& component, const ShmConfig& config) : Md(component, "shm"), config_(config) {
    detail::RegionTable& table = detail::region_table();
    std::lock_guard guard(table.lock);
    ++table.open_mds;
}

ShmMd::~ShmMd() {
    detail::RegionTable& table = detail::region_table();
    std::lock_guard guard(table.lock);
    // With the last md, registrations are over: peers' keys stop working, the segment goes.
    if (--table.open_mds == 0) table.published.close();
}

Status ShmMd::query(MdAttr& attr) const {
    attr = {};
    attr.flags = MdAttr::kReg | MdAttr::kAlloc | MdAttr::kNeedRkey;
    attr.max_alloc = std::size_t{1} << 40;
    attr.max_reg = SIZE_MAX;
    attr.rkey_packed_size = sizeof(PackedRkey);
    // A registration is a table insert under a lock, nothing is pinned: 10000 mem_reg calls in a
    // loop took ~150 ns each on the development machine, whatever the length.
    attr.reg_cost_overhead = 150e-9;
    attr.reg_cost_per_byte = 0;
    attr.component_name = "shm";
    return Status::ok;
}

std::vector<TlResource> ShmMd::query_tl_resources() const {
    return {{"shm", "memory", DeviceType::shm}};
}

Result<std::unique_ptr<Iface>> ShmMd::iface_open(const TlResource& resource, Worker* worker,
                                                 const IfaceParams& params) {
    if (resource.tl_name != "shm" || resource.dev_name != "memory") return Status::no_device;
    ShmConfig config;
    Status status = ucs::config::fill(shm_config_table(), config, params.config_overrides);
    if (status != Status::ok) return status;
    return ShmIface::open(this, worker, resource, config);
}

Result<MemH> ShmMd::add_region(std::uint8_t* address, std::size_t length, unsigned access,
                               std::unique_ptr<Segment> segment) {
    auto region = std::make_unique<MemRegion>();
    region->md = this;
    region->address = address;
    region->length = length;
    region->access = access;
    detail::RegionTable& table = detail::region_table();
    std::lock_guard guard(table.lock);
    // Peers map a mem_alloc segment and cannot reach beyond it; a registration they reach by
    // CMA, so it is published for their checks.
    region->key_id = segment != nullptr ? (next_key_nonce() << kSlotBits) | kNoSlot
                                        : table.published.publish(next_key_nonce(), address, length, access,
                                                                  config_.segment);
    region->segment = std::move(segment);
    table.regions.emplace(region->key_id, region.get());
    table.handles.insert(region.get());
    return static_cast<MemH>(region.release());
}

Status ShmMd::remove_region(MemH memh, bool allocated) {
    auto* region = static_cast<MemRegion*>(memh);
    detail::RegionTable& table = detail::region_table();
    {
        std::lock_guard guard(table.lock);
        // Only a live handle may be dereferenced: a stale or foreign one is just a pointer value.
        if (table.handles.count(region) == 0 || region->md != this ||
            (region->segment != nullptr) != allocated) {
            LOOM_LOG_ERROR("{}: {} is not a {} of this md", allocated ? "mem_free" : "mem_dereg", memh,
                           allocated ? "mem_alloc allocation" : "registration");
            return Status::invalid_param;
        }
        table.regions.erase(region->key_id);
        table.handles.erase(region);
        table.published.withdraw(region->key_id);
    }
    delete region;  // unmaps and removes the segment of an allocation
    return Status::ok;
}

Result<MemH> ShmMd::mem_reg(void* address, std::size_t length, unsigned access) {
    if ((access & ~static_cast<unsigned>(kAccessAll)) != 0 || (address == nullptr && length != 0)) {
        LOOM_LOG_ERROR("mem_reg: invalid region {}+{} or access {:#x}", address, length, access);
        return Status::invalid_param;
    }
    return add_region(static_cast<std::uint8_t*>(address), length, access, nullptr);
}

Status ShmMd::mem_dereg(MemH memh) {
    return remove_region(memh, false);
}

Result<std::pair<void*, MemH>> ShmMd::mem_alloc_at(std::size_t length, unsigned access, void* fixed_address) {
    if (length == 0 || (access & ~static_cast<unsigned>(kAccessAll)) != 0) {
        LOOM_LOG_ERROR("mem_alloc: invalid length {} or access {:#x}", length, access);
        return Status::invalid_param;
    }
    auto kind = resolve_segment_kind(config_.segment);
    if (!kind) return kind.status();
    auto segment = Segment::create(length, *kind, fixed_address);
    if (!segment) return segment.status();
    auto owned = std::make_unique<Segment>(std::move(*segment));
    auto* address = static_cast<std::uint8_t*>(owned->address());
    auto memh = add_region(address, length, access, std::move(owned));
    if (!memh) return memh.status();
    return std::make_pair(static_cast<void*>(address), *memh);
}

Status ShmMd::mem_free(MemH memh) {
    return remove_region(memh, true);
}

Status ShmMd::mkey_pack(MemH memh, std::uint8_t* out) const {
    auto* region = static_cast<MemRegion*>(memh);
    PackedRkey pk{};
    {
        detail::RegionTable& table = detail::region_table();
        std::lock_guard guard(table.lock);
        if (table.handles.count(region) == 0 || region->md != this) {
            LOOM_LOG_ERROR("mkey_pack: {} is not a memory handle of this md", memh);
            return Status::invalid_param;
        }
        const ProcessIdentity self = this_process();
        pk.version = kRkeyVersion;
        pk.kind = static_cast<std::uint8_t>(region->segment ? PackedKind::alloc : PackedKind::reg);
        pk.access = static_cast<std::uint8_t>(region->access);
        pk.pid = static_cast<std::uint32_t>(self.pid);
        pk.process_cookie = self.cookie;
        pk.address = reinterpret_cast<std::uintptr_t>(region->address);
        pk.length = region->length;
        pk.key_id = region->key_id;
        if (region->segment) {
            pk.seg = region->segment->id();
        } else if (const SegmentId* published = table.published.segment_id();
                   published != nullptr && slot_of(region->key_id) != kNoSlot) {
            pk.seg = *published;  // the registration table peers check before CMA
        }
    }
    std::memcpy(out, &pk, sizeof(pk));
    return Status::ok;
}

namespace {

const ShmComponent g_component;

}  // namespace

}  // namespace loom::uct::shm
