/**
 * The shm component and memory domain: registrations, shared allocations and remote keys.
 *
 * mem_reg is a software registration: it records [address, length) and the access
 * rights under a random 64-bit key id, in a process-wide table. Peers reach registered
 * memory with CMA (process_vm_readv/writev) or, where the kernel forbids it, with the
 * emulated put/get that the owner's progress performs after looking the key id up in that
 * table and checking bounds and rights.
 *
 * mem_alloc creates a shared segment (memfd or posix, see shm_segment.h): peers map it
 * when they unpack its remote key (one mapping per segment per process, cached in the
 * component and reference-counted by the unpacked keys), so put/get of any size and CPU
 * atomics go straight to the memory.
 *
 * A packed remote key carries the owner's pid and process cookie, the region, its rights
 * and key id, and for mem_alloc memory the segment to map. The unpacked key (RemoteKey,
 * whose address is the uint64 rkey of the data path) says how to reach the memory:
 * local (the owner is this process: plain loads and stores), mapped (a mem_alloc segment
 * of a peer), or remote (a peer's registration: CMA or emulation).
 */
#pragma once

#include "uct/api/uct.h"
#include "uct/shm/shm_config.h"
#include "uct/shm/shm_reg_table.h"
#include "uct/shm/shm_segment.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>

namespace loom::uct::shm {

/** A registration or allocation of this process (what a MemH points at). */
struct MemRegion {
    const void* md;        ///< the ShmMd that created it (mem_dereg/mem_free check)
    std::uint64_t key_id;  ///< unique in this process, names the region in remote keys (shm_reg_table.h)
    std::uint8_t* address;
    std::size_t length;
    unsigned access;                   ///< MemAccess bits
    std::unique_ptr<Segment> segment;  ///< mem_alloc only
};

/**
 * Runs @p fn(base) with the process-wide region table locked, where base points at
 * @p remote_addr, after checking that [remote_addr, remote_addr + length) lies in the
 * region @p key_id and that its rights include @p access. Returns access_denied (the
 * region is unknown, deregistered, or the range or rights do not match) without calling
 * @p fn. Used by the target of emulated put/get: the lock keeps the region registered
 * while the data is copied.
 */
template <typename Fn>
Status with_region(std::uint64_t key_id, std::uint64_t remote_addr, std::uint64_t length, unsigned access,
                   Fn&& fn);

/** How the memory of an unpacked remote key is reached. */
enum class KeyKind : std::uint8_t {
    local = 1,   ///< our own memory: plain loads and stores
    mapped = 2,  ///< a peer's mem_alloc segment, mapped here
    remote = 3,  ///< a peer's registration: CMA or emulated put/get, emulated atomics
};

class SegmentCache;
struct PackedRkey;

/** An unpacked remote key; the data path's rkey word is its address. */
struct RemoteKey {
    std::uint64_t address;  ///< start of the region in the owner's address space
    std::uint64_t length;
    std::uint8_t* base;  ///< where address is in this process (local, mapped); null for remote
    /**
     * remote: the owner's published slot of this registration, checked before every CMA
     * access; null when the owner publishes none (then put/get are emulated: the owner checks).
     */
    const RegSlot* slot;
    KeyKind kind;
    std::uint8_t access;  ///< MemAccess bits granted by the owner
    std::uint32_t pid;    ///< owner
    std::uint64_t key_id;
    SegmentCache* cache;  ///< mapped (the segment), remote (the owner's table): where to release the mapping
    std::uint64_t cache_key;

    /** Checks that [addr, addr + len) lies in the region and @p need rights are granted. */
    LOOM_ALWAYS_INLINE bool allows(std::uint64_t addr, std::uint64_t len, unsigned need) const {
        const std::uint64_t offset = addr - address;  // wraps to a huge value below the region
        return offset <= length && len <= length - offset && (access & need) == need;
    }
};

/** The uct Component of the shm transport. */
class ShmComponent final : public Component {
public:
    ShmComponent();
    ~ShmComponent() override;

    std::vector<std::string> query_md_resources() const override;
    Result<std::unique_ptr<Md>> md_open(std::string_view md_name) const override;

    /**
     * Unpacks a packed key: invalid_param for a malformed one (length, version, region),
     * unreachable when a mem_alloc segment cannot be mapped (owner gone, cookie mismatch),
     * each with one log line.
     */
    Result<Rkey> rkey_unpack(const std::uint8_t* packed, std::size_t length) const override;
    void rkey_release(const Rkey& rkey) const override;
    /** The mapped address of memory the owner's md allocated (a segment); unreachable otherwise. */
    Status rkey_ptr(const Rkey& rkey, std::uint64_t remote_addr, void** address) const override;

private:
    /**
     * For a peer's registration key: maps the owner's registration table (read-only) and
     * points @p key at its slot, after checking that the table is the owner's and the slot
     * still publishes the key's region. invalid_param (logged) for a key the table denies;
     * ok with no slot when the key names no table or it cannot be mapped (emulated put/get).
     */
    Status attach_published_slot(const PackedRkey& pk, RemoteKey& key) const;

    std::unique_ptr<SegmentCache> cache_;
};

/** The shm memory domain. */
class ShmMd final : public Md {
public:
    ShmMd(const Component& component, const ShmConfig& config);
    ~ShmMd() override;

    Status query(MdAttr& attr) const override;
    std::vector<TlResource> query_tl_resources() const override;
    Result<std::unique_ptr<Iface>> iface_open(const TlResource& resource, Worker* worker,
                                              const IfaceParams& params) override;
    Result<MemH> mem_reg(void* address, std::size_t length, unsigned access) override;
    Status mem_dereg(MemH memh) override;
    Result<std::pair<void*, MemH>> mem_alloc_at(std::size_t length, unsigned access, void* fixed_address) override;
    Status mem_free(MemH memh) override;
    Status mkey_pack(MemH memh, std::uint8_t* out) const override;

private:
    Result<MemH> add_region(std::uint8_t* address, std::size_t length, unsigned access,
                            std::unique_ptr<Segment> segment);
    Status remove_region(MemH memh, bool allocated);

    ShmConfig config_;
};

// --- Region table (implementation of with_region) --------------------------------------

namespace detail {

/** The process-wide table of regions by key id, and its lock. */
struct RegionTable {
    std::mutex lock;
    std::map<std::uint64_t, MemRegion*> regions;  ///< by key id
    std::set<const MemRegion*> handles;           ///< the live MemH values, checked before use
    PublishedRegions published;                   ///< what peers check before CMA
    unsigned open_mds = 0;                        ///< the table is closed with the last md
};

RegionTable& region_table();

}  // namespace detail

template <typename Fn>
Status with_region(std::uint64_t key_id, std::uint64_t remote_addr, std::uint64_t length, unsigned access,
                   Fn&& fn) {
    detail::RegionTable& table = detail::region_table();
    std::lock_guard guard(table.lock);
    auto it = table.regions.find(key_id);
    if (it == table.regions.end()) return Status::access_denied;
    const MemRegion& region = *it->second;
    const std::uint64_t start = reinterpret_cast<std::uintptr_t>(region.address);
    const std::uint64_t offset = remote_addr - start;
    if (offset > region.length || length > region.length - offset || (region.access & access) != access) {
        return Status::access_denied;
    }
    fn(region.address + offset);
    return Status::ok;
}

}  // namespace loom::uct::shm
