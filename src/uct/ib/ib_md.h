/**
 * The ib component and its memory domain: one md per verbs device, with its
 * protection domain, memory registration and remote keys.
 *
 * Registration goes through acquire_region() / release_region(), the only places
 * that register user memory. With the registration cache (ucs/memory/rcache,
 * LOOM_IB_RCACHE) acquire looks the range up and takes a reference, and release drops
 * it: the MemRegion lives in the cache region's private area, so registering the same
 * memory again returns the same handle, and the handle stays valid until its last
 * mem_dereg even when the cache has dropped the region meanwhile (its memory was
 * unmapped, or a larger registration replaced it), since a held region stays
 * registered. Without the cache (memory events off, LOOM_IB_RCACHE=no) acquire calls
 * ibv_reg_mr and release ibv_dereg_mr. Either way the md counts the handles it gave
 * out, to reject the ones it did not.
 */
#pragma once

#include "ucs/memory/rcache.h"
#include "uct/api/uct.h"
#include "uct/ib/ib_config.h"
#include "uct/ib/ib_device.h"

#include <infiniband/verbs.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace loom::uct::ib {

/** Version byte of packed remote keys. */
inline constexpr std::uint8_t kRkeyVersion = 1;

/** Packed remote key: version byte and the 32-bit rkey (little-endian). */
inline constexpr std::size_t kPackedRkeySize = 5;

/** A registered memory range; memory handles of the ib md point at one. */
struct MemRegion {
    ibv_mr* mr;
    /// The ibv_access_flags it was registered with; a cached region may have more than a
    /// mem_reg asked for (the cache serves subsets, and merges overlapping registrations).
    int access_flags;
};

/** The ib component: every verbs device is a memory domain. */
class IbComponent final : public Component {
public:
    /** Registers the component (a static object of the module). */
    IbComponent() : Component("ib") {}

    std::vector<std::string> query_md_resources() const override;
    Result<std::unique_ptr<Md>> md_open(std::string_view md_name) const override;
    Result<Rkey> rkey_unpack(const std::uint8_t* packed, std::size_t length) const override;
};

/** Memory domain of one verbs device. */
class IbMd final : public Md {
public:
    /** Opens device @p name: context, device query, protection domain. */
    static Result<std::unique_ptr<IbMd>> open(const Component& component, const std::string& name);
    ~IbMd() override;

    Status query(MdAttr& attr) const override;
    std::vector<TlResource> query_tl_resources() const override;
    Result<std::unique_ptr<Iface>> iface_open(const TlResource& resource, Worker* worker,
                                              const IfaceParams& params) override;
    Result<MemH> mem_reg(void* address, std::size_t length, unsigned access) override;
    Status mem_dereg(MemH memh) override;
    Status mkey_pack(MemH memh, std::uint8_t* out) const override;
    std::string describe() const override;

    /** ibv_access_flags for @p access (MemAccess bits) on this device. */
    int ibv_access(unsigned access) const noexcept;

    /**
     * Where a CPU atomic of @p size bytes at @p address under remote key @p rkey may act
     * (rc's atomics performed by the target's progress): the address when @p rkey names a
     * live registration of user memory that covers the word and grants atomic rights, else
     * nullptr with @p why saying what is wrong.
     */
    void* cpu_atomic_target(std::uint32_t rkey, std::uint64_t address, unsigned size, const char** why);

    /** Registers memory the transport itself owns (buffer pools); nullptr after logging on failure. */
    ibv_mr* reg_internal(void* address, std::size_t length, const char* what,
                         unsigned access = kAccessLocalWrite);

    /** The device's verbs context. */
    ibv_context* context() const noexcept { return ctx_.get(); }
    /** The protection domain every registration and QP of this md uses. */
    ibv_pd* pd() const noexcept { return pd_; }
    /** What the device offers (queried once at open). */
    const DeviceInfo& device() const noexcept { return dev_; }
    /** True when rdma_cm connections are possible here (see rdmacm_available). */
    bool rdmacm_usable() const { return rdmacm_available(); }

private:
    /** A handle given out by mem_reg and not yet released by as many mem_dereg calls. */
    struct Handle {
        ucs::RcacheRegion* cached;  ///< the cache region holding the MemRegion; nullptr: direct
        std::size_t count;          ///< mem_reg calls that returned it (each holds one cache reference)
    };

    IbMd(const Component& component, const std::string& name, DeviceContext ctx, DeviceInfo dev, ibv_pd* pd);

    /**
     * Sets up registration for @p config: creates the cache, or decides (and logs at
     * diag level, once) to register directly. Returns the status that fails md_open.
     */
    Status init_registration(const IbConfig& config);

    /** Registers [address, address+length) for @p access: through the cache when there is one. */
    Result<MemRegion*> acquire_region(void* address, std::size_t length, unsigned access);
    /** Releases a region from acquire_region; invalid_param (and one log line) for an unknown handle. */
    Status release_region(MemRegion* region);

    /** ibv_reg_mr; nullptr with errno set on failure (the caller decides how loudly to log it). */
    ibv_mr* register_mr(void* address, std::size_t length, int flags) noexcept;

    /**
     * A registration of user memory, by remote key: what cpu_atomic_target checks. Kept
     * for user memory only (mem_reg, directly or through the cache), never for the
     * transport's own buffers.
     */
    struct Window {
        std::uintptr_t address;
        std::size_t length;
        int flags;  ///< ibv_access_flags
    };
    /** Records @p mr of user memory in windows_ (false: out of memory, logged). */
    bool add_window(const ibv_mr* mr, int flags) noexcept;
    void remove_window(const ibv_mr* mr) noexcept;

    /** RcacheOps::register_mem: a MemRegion in the cache region's private area. */
    static Status cache_register(void* context, void* address, std::size_t length, unsigned flags,
                                 void* region_private) noexcept;
    /** RcacheOps::deregister_mem. */
    static void cache_deregister(void* context, void* address, std::size_t length,
                                 void* region_private) noexcept;

    DeviceContext ctx_;
    DeviceInfo dev_;
    ibv_pd* pd_;
    std::unique_ptr<ucs::Rcache> rcache_;  ///< null: every mem_reg calls ibv_reg_mr
    std::mutex regions_lock_;              ///< mem_reg may be called from any thread
    std::unordered_map<MemRegion*, Handle> regions_;
    std::mutex windows_lock_;  ///< registrations come from any thread, lookups from progress
    std::unordered_map<std::uint32_t, Window> windows_;
};

}  // namespace loom::uct::ib
