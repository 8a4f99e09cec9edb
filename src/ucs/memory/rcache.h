/**
 * Rcache: a memory registration cache. Registering memory with a NIC (ibv_reg_mr)
 * pins its pages and costs tens of microseconds; the cache keeps registrations and
 * hands them out again to every operation on memory they cover.
 *
 *     RcacheParams params;
 *     params.name = "mlx5_0";
 *     params.ops = {&my_reg, &my_dereg};     // the registration backend
 *     params.context = my_device;
 *     params.private_size = sizeof(ibv_mr*); // per-region storage for the backend
 *     auto cache = Rcache::create(params);   // Result<std::unique_ptr<Rcache>>
 *
 *     RcacheRegion* region;
 *     if (Status s = cache->lookup(buf, len, IBV_ACCESS_LOCAL_WRITE, region); s != Status::ok) return s;
 *     ibv_mr* mr = *static_cast<ibv_mr**>(region->private_data());
 *     ...                                    // post the zero-copy send, wait for its completion
 *     cache->release(region);
 *
 * Regions. A lookup of [addr, addr + length) with an access mask returns a region that
 * covers the range, expanded to whole pages, with at least those rights (the mask is
 * opaque to the cache: a region registered with rights R serves lookups asking for a
 * subset of R), and takes a reference. When no region does, the cache registers a new
 * one through the backend: the union of the request and every cached region it
 * overlaps, with the union of their rights, so overlapping lookups converge on one
 * registration instead of piling up. The regions it replaces leave the cache at once
 * and are deregistered then, or when their last holder releases them. Regions that merely touch
 * the request are not merged: streaming through a large buffer piece by piece must not
 * re-register ever larger regions. When registering the union fails and the union is
 * larger than the request (say, part of an old region's memory is now read-only), the
 * cache registers the request alone instead.
 *
 * Limits and eviction. Unreferenced regions stay registered in least-recently-released
 * order; when there are more than max_regions regions or more than max_size bytes
 * registered (LOOM_RCACHE_MAX_REGIONS / LOOM_RCACHE_MAX_SIZE, or the creator's own
 * limits), the least recently released ones are deregistered. Regions in use are never
 * evicted, so the limits can be exceeded while they are held. When the backend reports
 * no_memory or no_resource (the pinned-memory limit, the NIC's table of registrations),
 * the cache deregisters every unreferenced region and tries once more.
 *
 * Memory events. The cache listens to memory events (ucs/memory/memhooks.h,
 * LOOM_MEM_EVENTS): a region overlapping memory that the application unmapped or freed
 * leaves the cache, so a buffer malloc'ed again at the same address is registered again
 * instead of being served by a registration of the old pages. Events are only queued
 * inside the application's munmap() or free(); the cache acts on them at the start of
 * its next lookup, release or flush, under its lock, and deregisters unreferenced
 * regions after dropping the lock. Calling the backend from inside the application's
 * free() could deadlock (free() may run under the backend's or the cache's own locks)
 * and would make every free() slow; the cost of deferring is that an invalidated
 * region stays pinned until the next operation on the cache. A region in use when its
 * memory goes keeps its registration until its holder releases it: deregistering
 * memory a NIC may still be reading is never right.
 *
 * Thread-safety: every member function may be called from any thread. One mutex
 * protects the cache; it is held while the backend registers (so two threads never
 * register the same memory twice) but not while it deregisters, except for the
 * evictions that make room for a retry after no_memory. The backend must not call
 * back into the same cache. A hit costs one lock and one map search (O(log n)) in
 * lookup() and one lock in release(): about 30-50 ns on a current x86 server core.
 */
#pragma once

#include "ucs/config/table.h"
#include "ucs/datastruct/list.h"
#include "ucs/memory/memhooks.h"
#include "ucs/sys/compiler.h"
#include "ucs/type/result.h"
#include "ucs/type/status.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace loom::ucs {

/** Limits of a cache: the values of the RCACHE_ configuration table. */
struct RcacheConfig {
    std::size_t max_size = 0;     ///< LOOM_RCACHE_MAX_SIZE: registered bytes (config::kSizeInf: no limit)
    std::size_t max_regions = 0;  ///< LOOM_RCACHE_MAX_REGIONS: registered regions (config::kInf: no limit)
};

/** The registration cache table (prefix "RCACHE_"), registered while libloom-ucs is loaded. */
const config::Table<RcacheConfig>& rcache_table();

/**
 * The limits as fill() reads them now (configuration file, environment, @p overrides).
 * Returns invalid_config, after logging the bad value, when one does not parse.
 */
Result<RcacheConfig> read_rcache_config(const config::Overrides& overrides = {});

/**
 * The registration backend. Both functions are called with the page-aligned range of
 * the region and its private area; they may be called from any thread that uses the
 * cache, and must not call back into the same cache.
 */
struct RcacheOps {
    /**
     * Registers [@p addr, @p addr + @p length) with @p access rights and stores what
     * deregistration needs in @p region_private (private_size bytes, zeroed). Returns
     * the backend's error otherwise, which lookup() returns to its caller.
     */
    Status (*register_mem)(void* context, void* addr, std::size_t length, unsigned access,
                           void* region_private) noexcept = nullptr;

    /** Deregisters what register_mem() registered; the memory may be unmapped by now. */
    void (*deregister_mem)(void* context, void* addr, std::size_t length, void* region_private) noexcept = nullptr;
};

/** How to create a cache. */
struct RcacheParams {
    std::string name = "rcache";                ///< for log messages ("mlx5_0")
    RcacheOps ops;                              ///< the backend (both functions required)
    void* context = nullptr;                    ///< passed to the backend's functions
    std::size_t private_size = 0;               ///< bytes of backend storage in every region (at most 4 KiB)
    std::optional<RcacheConfig> limits;         ///< empty: read LOOM_RCACHE_MAX_SIZE / _MAX_REGIONS
    std::optional<MemEventsMode> events;        ///< empty: read LOOM_MEM_EVENTS
};

/** Counters of a cache, for diagnostics and tests. */
struct RcacheStats {
    std::size_t regions = 0;            ///< registered regions: cached, in use, or invalidated but still held
    std::size_t bytes = 0;              ///< bytes those regions register
    std::size_t unreferenced = 0;       ///< cached regions nobody holds (the eviction candidates)
    std::uint64_t hits = 0;             ///< lookups served by a cached region
    std::uint64_t misses = 0;           ///< lookups that registered memory (or failed to)
    std::uint64_t registrations = 0;    ///< successful register_mem() calls
    std::uint64_t registration_failures = 0;  ///< failed register_mem() calls
    std::uint64_t deregistrations = 0;  ///< deregister_mem() calls, done or about to be done
    std::uint64_t merged = 0;           ///< regions replaced by a merged region
    std::uint64_t evicted = 0;          ///< regions deregistered to respect the limits or to retry
    std::uint64_t invalidated = 0;      ///< regions removed because their memory was unmapped
    std::uint64_t event_ranges = 0;     ///< memory event ranges processed
};

/**
 * A registered region, page-aligned. Holders read its bounds, rights and private
 * area; everything else belongs to the cache.
 */
class RcacheRegion {
public:
    /** First byte of the region (page-aligned). */
    std::uintptr_t start() const noexcept { return start_; }

    /** One past the last byte of the region (page-aligned). */
    std::uintptr_t end() const noexcept { return end_; }

    /** Bytes in the region. */
    std::size_t length() const noexcept { return end_ - start_; }

    /** The rights the region was registered with (a superset of every lookup it served). */
    unsigned access() const noexcept { return access_; }

    /** The backend's private area (RcacheParams::private_size bytes, max_align_t-aligned). */
    void* private_data() noexcept;
    const void* private_data() const noexcept;

    /**
     * True once the region left the cache (its memory was unmapped, a merged region
     * replaced it, or it was evicted while nobody held it): it stays registered for
     * its holders but no lookup returns it again.
     */
    bool invalidated() const noexcept { return invalid_.load(std::memory_order_relaxed); }

private:
    friend class Rcache;

    RcacheRegion(std::uintptr_t start, std::uintptr_t end, unsigned access) noexcept
        : start_(start), end_(end), access_(access) {}

    std::uintptr_t start_;
    std::uintptr_t end_;
    unsigned access_;
    std::uint32_t refcount_ = 0;        // under the cache lock
    std::atomic<bool> invalid_{false};  // written under the cache lock, read by holders
    bool watched_ = false;              // its range counts in the memory event filter
    ListLink link_;                     // LRU list when unreferenced, held list when invalid, or a dead list
};

namespace detail {

/** Offset of a region's private area: right after the region, max_align_t-aligned. */
inline constexpr std::size_t kRcachePrivateOffset =
    (sizeof(RcacheRegion) + alignof(std::max_align_t) - 1) / alignof(std::max_align_t) * alignof(std::max_align_t);

}  // namespace detail

inline void* RcacheRegion::private_data() noexcept {
    return reinterpret_cast<char*>(this) + detail::kRcachePrivateOffset;
}

inline const void* RcacheRegion::private_data() const noexcept {
    return reinterpret_cast<const char*>(this) + detail::kRcachePrivateOffset;
}

/** A memory registration cache; see the top of this file. */
class Rcache {
public:
    /** Largest private area per region. */
    static constexpr std::size_t kMaxPrivateSize = 4096;

    /**
     * Creates a cache. Returns invalid_param (after logging why) when a backend function
     * is missing or private_size is too large, invalid_config when the configuration
     * does not parse, and unsupported when memory events are off (LOOM_MEM_EVENTS=none)
     * or hooks were asked for but do not work in this process: the caller should then
     * register memory without a cache.
     */
    static Result<std::unique_ptr<Rcache>> create(const RcacheParams& params);

    /**
     * Deregisters every region. Regions still held are a bug of their holders: they are
     * deregistered too, after a warning, and must not be released afterwards.
     */
    ~Rcache();

    Rcache(const Rcache&) = delete;
    Rcache& operator=(const Rcache&) = delete;

    /**
     * A region covering [@p addr, @p addr + @p length) with at least @p access rights,
     * referenced until release(). Returns invalid_param for an empty range or one that
     * wraps around the address space, and the backend's status when registration fails
     * (the cache is then unchanged, apart from regions evicted to retry).
     */
    [[nodiscard]] Status lookup(const void* addr, std::size_t length, unsigned access, RcacheRegion*& region);

    /** Drops a reference taken by lookup(); @p region must not be used afterwards. */
    void release(RcacheRegion* region) noexcept;

    /** Acts on pending memory events and deregisters every unreferenced region. */
    void flush() noexcept;

    /** Current counters (after acting on pending memory events). */
    RcacheStats stats();

    /** The name given at creation. */
    const std::string& name() const noexcept { return name_; }

    /** The limits in force. */
    const RcacheConfig& limits() const noexcept { return limits_; }

    /** Where this cache's memory events come from. */
    MemEventsMode events_mode() const noexcept { return events_.mode(); }

private:
    using RegionList = List<RcacheRegion, &RcacheRegion::link_>;
    using RegionMap = std::map<std::uintptr_t, RcacheRegion*>;

    explicit Rcache(const RcacheParams& params, const RcacheConfig& limits);

    // Out of line: the hit path in lookup() stays small.
    LOOM_NOINLINE Status lookup_slow(std::uintptr_t start, std::uintptr_t end, unsigned access,
                                     RcacheRegion*& region, RegionList& dead);
    Status register_region(std::uintptr_t start, std::uintptr_t end, unsigned access, RcacheRegion*& region);
    void process_events(RegionList& dead) noexcept;
    void remove_from_cache(RegionMap::iterator it, RegionList& dead) noexcept;
    void retire(RcacheRegion& region, RegionList& dead) noexcept;
    void evict(RegionList& dead, bool everything) noexcept;
    void destroy(RegionList& dead) noexcept;
    RcacheRegion* allocate_region(std::uintptr_t start, std::uintptr_t end, unsigned access) noexcept;
    void free_region(RcacheRegion* region) noexcept;

    std::string name_;
    RcacheOps ops_;
    void* context_;
    std::size_t private_size_;
    RcacheConfig limits_;
    std::uintptr_t page_mask_;

    std::mutex lock_;
    RegionMap map_;           // cached regions by start address; they never overlap
    RegionList lru_;          // cached regions nobody holds, least recently released first
    RegionList held_invalid_; // regions out of the cache that someone still holds
    std::size_t num_regions_ = 0;
    std::size_t num_bytes_ = 0;
    RcacheStats stats_;
    MemEventListener events_;
};

}  // namespace loom::ucs
