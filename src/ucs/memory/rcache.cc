#include "ucs/memory/rcache.h"

#include "ucs/config/parser.h"
#include "ucs/config/registry.h"
#include "ucs/debug/assert.h"
#include "ucs/memory/memory_log.h"
#include "ucs/memory/pages.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <new>

namespace loom::ucs {

namespace {

const config::RegisteredTable<RcacheConfig>& make_rcache_table() {
    // Never destroyed: caches may be created from other libraries' static initializers.
    static const auto* table = new config::RegisteredTable<RcacheConfig>(
        "RCACHE_", "Registration cache",
        "Limits of the memory registration caches of the RDMA transports (one cache per device). "
        "Unreferenced registrations are kept for reuse and deregistered least recently used first "
        "when a limit is exceeded; registrations in use are never deregistered, so a limit can be "
        "exceeded while they are held. When the device refuses a registration for lack of resources, "
        "the cache deregisters every unreferenced registration and tries again. A transport may set "
        "its own limits for its cache.",
        {
            config::field("MAX_SIZE", "inf",
                          "Most bytes a cache keeps registered (pinned); inf for no limit, the memory "
                          "events and the retry on failure being what bounds the cache then.",
                          &RcacheConfig::max_size, config::SizeParser().allow_inf()),
            config::field("MAX_REGIONS", "inf",
                          "Most registrations a cache keeps; inf for no limit. 0 keeps none: every "
                          "registration is dropped when its last user releases it.",
                          &RcacheConfig::max_regions, config::IntParser<std::size_t>().allow_inf()),
        });
    return *table;
}

// Registered when libloom-ucs is loaded, so loom_info and the documentation list it.
[[maybe_unused]] const config::TableBase& g_rcache_table_at_load = make_rcache_table();

// Regions are cache-line aligned: a hit reads the bounds and rights and updates the
// count and the link, and the transport then reads its memory handle from the start
// of the private area, all in one line.
constexpr std::align_val_t kRegionAlignment{kCacheLineSize};
static_assert(detail::kRcachePrivateOffset + 16 <= kCacheLineSize || sizeof(void*) != 8,
              "RcacheRegion grew: keep it and the first private bytes in one cache line");

}  // namespace

const config::Table<RcacheConfig>& rcache_table() { return make_rcache_table(); }

Result<RcacheConfig> read_rcache_config(const config::Overrides& overrides) {
    const config::Table<RcacheConfig>& table = rcache_table();
    RcacheConfig values = table.defaults();
    if (Status status = config::fill(table, values, overrides); status != Status::ok) return status;
    return values;
}

Result<std::unique_ptr<Rcache>> Rcache::create(const RcacheParams& params) {
    if (params.ops.register_mem == nullptr || params.ops.deregister_mem == nullptr) {
        LOOM_LOG_ERROR("rcache {}: the backend must provide both register_mem and deregister_mem", params.name);
        return Status::invalid_param;
    }
    if (params.private_size > kMaxPrivateSize) {
        LOOM_LOG_ERROR("rcache {}: private area of {} bytes is larger than the maximum of {}", params.name,
                       params.private_size, kMaxPrivateSize);
        return Status::invalid_param;
    }
    RcacheConfig limits;
    if (params.limits) {
        limits = *params.limits;
    } else {
        Result<RcacheConfig> configured = read_rcache_config();
        if (!configured) return configured.status();  // fill() logged the bad value
        limits = *configured;
    }
    MemEventsMode mode;
    if (params.events) {
        mode = *params.events;
    } else {
        Result<MemEventsMode> configured = read_mem_events_mode();
        if (!configured) return configured.status();
        mode = *configured;
    }
    if (mode == MemEventsMode::none) {
        LOOM_LOG_DIAG("rcache {}: disabled, memory events are off (LOOM_MEM_EVENTS=none)", params.name);
        return Status::unsupported;
    }
    std::unique_ptr<Rcache> cache(new Rcache(params, limits));
    if (Status status = cache->events_.start(mode); status != Status::ok) return status;  // start() logged why
    LOOM_LOG_DEBUG("rcache {}: created, max size {}, max regions {}, memory events from {}", params.name,
                   limits.max_size == config::kSizeInf ? std::string("inf") : std::to_string(limits.max_size),
                   limits.max_regions == config::kInf<std::size_t> ? std::string("inf")
                                                                   : std::to_string(limits.max_regions),
                   to_string(mode));
    return cache;
}

Rcache::Rcache(const RcacheParams& params, const RcacheConfig& limits)
    : name_(params.name),
      ops_(params.ops),
      context_(params.context),
      private_size_(params.private_size),
      limits_(limits),
      page_mask_(~static_cast<std::uintptr_t>(page_size() - 1)) {}

Rcache::~Rcache() {
    RegionList dead;
    std::size_t in_use = 0;
    {
        std::lock_guard guard(lock_);
        while (!map_.empty()) {
            RcacheRegion& region = *map_.begin()->second;
            map_.erase(map_.begin());
            if (region.refcount_ > 0) {
                ++in_use;
                region.refcount_ = 0;
            } else {
                RegionList::remove(region);  // from the LRU list
            }
            retire(region, dead);
        }
        while (RcacheRegion* region = held_invalid_.pop_front()) {
            ++in_use;
            region->refcount_ = 0;
            retire(*region, dead);
        }
    }
    if (in_use > 0) {
        LOOM_LOG_WARN("rcache {}: destroyed with {} regions in use; deregistering them anyway", name_, in_use);
    }
    destroy(dead);
    events_.stop();
}

Status Rcache::lookup(const void* addr, std::size_t length, unsigned access, RcacheRegion*& region) {
    region = nullptr;
    const auto first = reinterpret_cast<std::uintptr_t>(addr);
    const std::uintptr_t last = first + length;  // one past the end
    const std::uintptr_t start = first & page_mask_;
    const std::uintptr_t end = (last + ~page_mask_) & page_mask_;
    if (LOOM_UNLIKELY(length == 0 || last < first || end < last)) {
        LOOM_LOG_ERROR("rcache {}: cannot register {} bytes at {}", name_, length, addr);
        return Status::invalid_param;
    }

    RegionList dead;
    Status status = Status::ok;
    {
        std::lock_guard guard(lock_);
        if (LOOM_UNLIKELY(events_.pending())) process_events(dead);
        auto it = map_.upper_bound(start);
        RcacheRegion* found = it != map_.begin() ? std::prev(it)->second : nullptr;
        if (LOOM_LIKELY(found != nullptr && found->end_ >= end && (found->access_ & access) == access)) {
            if (found->refcount_++ == 0) RegionList::remove(*found);  // no longer an eviction candidate
            ++stats_.hits;
            region = found;
        } else {
            status = lookup_slow(start, end, access, region, dead);
        }
    }
    if (LOOM_UNLIKELY(!dead.empty())) destroy(dead);
    return status;
}

Status Rcache::lookup_slow(std::uintptr_t start, std::uintptr_t end, unsigned access, RcacheRegion*& region,
                           RegionList& dead) {
    ++stats_.misses;
    for (int attempt = 0;; ++attempt) {
        // The cached regions overlapping [start, end), and their union with it.
        auto first = map_.upper_bound(start);
        if (first != map_.begin() && std::prev(first)->second->end_ > start) --first;
        auto last = first;
        std::uintptr_t union_start = start;
        std::uintptr_t union_end = end;
        unsigned union_access = access;
        for (; last != map_.end() && last->first < end; ++last) {
            const RcacheRegion& r = *last->second;
            union_start = std::min(union_start, r.start_);
            union_end = std::max(union_end, r.end_);
            union_access |= r.access_;
        }

        RcacheRegion* created = nullptr;
        Status status = register_region(union_start, union_end, union_access, created);
        if (status != Status::ok && (union_start != start || union_end != end || union_access != access)) {
            LOOM_LOG_DEBUG("rcache {}: registering the merged region [{:#x}, {:#x}) failed ({}); registering "
                           "[{:#x}, {:#x}) alone",
                           name_, union_start, union_end, to_string(status), start, end);
            status = register_region(start, end, access, created);
        }
        if (status == Status::ok) {
            // Whatever the new region overlaps leaves the cache, so cached regions never overlap.
            for (auto it = first; it != last;) {
                auto next = std::next(it);
                ++stats_.merged;
                remove_from_cache(it, dead);
                it = next;
            }
            try {
                map_.emplace(created->start_, created);
            } catch (const std::bad_alloc&) {
                LOOM_LOG_ERROR("rcache {}: out of memory while caching [{:#x}, {:#x})", name_, created->start_,
                               created->end_);
                retire(*created, dead);
                return Status::no_memory;
            }
            created->refcount_ = 1;
            evict(dead, false);
            region = created;
            return Status::ok;
        }
        if ((status == Status::no_memory || status == Status::no_resource) && attempt == 0 && !lru_.empty()) {
            // Probably the pinned-memory limit or the device's table: make room and retry once.
            // The evicted regions must really be deregistered before retrying, so this is
            // the one place where the backend deregisters under the lock.
            LOOM_LOG_DIAG("rcache {}: registering [{:#x}, {:#x}) failed ({}); deregistering every unreferenced "
                          "region and retrying",
                          name_, start, end, to_string(status));
            evict(dead, true);
            destroy(dead);
            continue;
        }
        LOOM_LOG_DEBUG("rcache {}: registering [{:#x}, {:#x}) failed: {}", name_, start, end, to_string(status));
        return status;
    }
}

Status Rcache::register_region(std::uintptr_t start, std::uintptr_t end, unsigned access, RcacheRegion*& region) {
    RcacheRegion* r = allocate_region(start, end, access);
    if (r == nullptr) {
        LOOM_LOG_ERROR("rcache {}: out of memory for a region of [{:#x}, {:#x})", name_, start, end);
        return Status::no_memory;
    }
    // Watched before registering: memory unmapped while the backend registers it is
    // reported at the next operation instead of being missed.
    events_.watch(start, end);
    r->watched_ = true;
    const Status status =
        ops_.register_mem(context_, reinterpret_cast<void*>(start), end - start, access, r->private_data());
    if (status != Status::ok) {
        events_.unwatch(start, end);
        free_region(r);
        ++stats_.registration_failures;
        return status;
    }
    ++stats_.registrations;
    ++num_regions_;
    num_bytes_ += end - start;
    region = r;
    return Status::ok;
}

void Rcache::release(RcacheRegion* region) noexcept {
    RegionList dead;
    {
        std::lock_guard guard(lock_);
        LOOM_ASSERT(region != nullptr && region->refcount_ > 0);
        if (LOOM_UNLIKELY(events_.pending())) process_events(dead);
        if (--region->refcount_ == 0) {
            if (region->invalidated()) {
                RegionList::remove(*region);  // from held_invalid_
                retire(*region, dead);
            } else {
                lru_.push_back(*region);
                if (LOOM_UNLIKELY(num_regions_ > limits_.max_regions || num_bytes_ > limits_.max_size)) {
                    evict(dead, false);
                }
            }
        }
    }
    if (LOOM_UNLIKELY(!dead.empty())) destroy(dead);
}

void Rcache::flush() noexcept {
    RegionList dead;
    {
        std::lock_guard guard(lock_);
        if (events_.pending()) process_events(dead);
        evict(dead, true);
    }
    destroy(dead);
}

RcacheStats Rcache::stats() {
    RegionList dead;
    RcacheStats result;
    {
        std::lock_guard guard(lock_);
        if (events_.pending()) process_events(dead);
        result = stats_;
        result.regions = num_regions_;
        result.bytes = num_bytes_;
        result.unreferenced = lru_.length();
    }
    destroy(dead);
    return result;
}

void Rcache::process_events(RegionList& dead) noexcept {
    MemEventListener::Range ranges[MemEventListener::kCapacity];
    const std::size_t n = events_.drain(ranges);
    stats_.event_ranges += n;
    for (std::size_t i = 0; i < n; ++i) {
        const MemEventListener::Range& range = ranges[i];
        auto it = map_.upper_bound(range.start);
        if (it != map_.begin() && std::prev(it)->second->end_ > range.start) --it;
        while (it != map_.end() && it->first < range.end) {
            auto next = std::next(it);
            LOOM_LOG_TRACE("rcache {}: [{:#x}, {:#x}) invalidated by an event on [{:#x}, {:#x})", name_,
                           it->second->start_, it->second->end_, range.start, range.end);
            ++stats_.invalidated;
            remove_from_cache(it, dead);
            it = next;
        }
    }
}

void Rcache::remove_from_cache(RegionMap::iterator it, RegionList& dead) noexcept {
    RcacheRegion& region = *it->second;
    map_.erase(it);
    if (region.refcount_ == 0) {
        RegionList::remove(region);  // from the LRU list
        retire(region, dead);
    } else {
        // Still registered for its holders; release() deregisters it.
        region.invalid_.store(true, std::memory_order_relaxed);
        if (region.watched_) {
            events_.unwatch(region.start_, region.end_);
            region.watched_ = false;
        }
        held_invalid_.push_back(region);
    }
}

void Rcache::retire(RcacheRegion& region, RegionList& dead) noexcept {
    // The region is in no list and has no holder: it goes to the dead list, to be
    // deregistered (outside the lock) by destroy().
    region.invalid_.store(true, std::memory_order_relaxed);
    if (region.watched_) {
        events_.unwatch(region.start_, region.end_);
        region.watched_ = false;
    }
    --num_regions_;
    num_bytes_ -= region.length();
    ++stats_.deregistrations;
    dead.push_back(region);
}

void Rcache::evict(RegionList& dead, bool everything) noexcept {
    while (!lru_.empty() &&
           (everything || num_regions_ > limits_.max_regions || num_bytes_ > limits_.max_size)) {
        RcacheRegion* region = lru_.pop_front();
        map_.erase(region->start_);
        ++stats_.evicted;
        retire(*region, dead);
    }
}

void Rcache::destroy(RegionList& dead) noexcept {
    while (RcacheRegion* region = dead.pop_front()) {
        ops_.deregister_mem(context_, reinterpret_cast<void*>(region->start_), region->length(),
                            region->private_data());
        free_region(region);
    }
}

RcacheRegion* Rcache::allocate_region(std::uintptr_t start, std::uintptr_t end, unsigned access) noexcept {
    void* memory = ::operator new(detail::kRcachePrivateOffset + private_size_, kRegionAlignment, std::nothrow);
    if (memory == nullptr) return nullptr;
    auto* region = new (memory) RcacheRegion(start, end, access);
    std::memset(region->private_data(), 0, private_size_);
    return region;
}

void Rcache::free_region(RcacheRegion* region) noexcept {
    region->~RcacheRegion();
    ::operator delete(region, kRegionAlignment);
}

}  // namespace loom::ucs
