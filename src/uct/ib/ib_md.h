/**
 * The ib component and its memory domain: one md per verbs device, with its
 * protection domain, memory registration and remote keys.
 *
 * Registration goes through acquire_region() / release_region(), the only places
 * that call ibv_reg_mr / ibv_dereg_mr for user memory. A registration cache
 * (ucs/memory/rcache) plugs in there: acquire looks the range up and takes a
 * reference, release drops it; memory handles stay pointers to MemRegion.
 */
#pragma once

#include "uct/api/uct.h"
#include "uct/ib/ib_config.h"
#include "uct/ib/ib_device.h"

#include <infiniband/verbs.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

namespace loom::uct::ib {

/** Version byte of packed remote keys. */
inline constexpr std::uint8_t kRkeyVersion = 1;

/** Packed remote key: version byte and the 32-bit rkey (little-endian). */
inline constexpr std::size_t kPackedRkeySize = 5;

/** A registered memory range; memory handles of the ib md point at one. */
struct MemRegion {
    ibv_mr* mr;
    unsigned access;  ///< the MemAccess bits it was registered for
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

    /** Registers memory the transport itself owns (buffer pools); nullptr after logging on failure. */
    ibv_mr* reg_internal(void* address, std::size_t length, const char* what,
                         unsigned access = kAccessLocalWrite);

    /** The device's verbs context. */
    ibv_context* context() const noexcept { return ctx_.get(); }
    /** The protection domain every registration and QP of this md uses. */
    ibv_pd* pd() const noexcept { return pd_; }
    /** What the device offers (queried once at open). */
    const DeviceInfo& device() const noexcept { return dev_; }
    /** True when rdma_cm ids can carry QPs of this md (its context is librdmacm's). */
    bool rdmacm_usable() const noexcept { return ctx_.rdmacm_usable(); }

private:
    IbMd(const Component& component, const std::string& name, DeviceContext ctx, DeviceInfo dev, ibv_pd* pd);

    /** Registers [address, address+length) for @p access: the registration cache hook. */
    Result<MemRegion*> acquire_region(void* address, std::size_t length, unsigned access);
    /** Releases a region from acquire_region. */
    Status release_region(MemRegion* region);

    DeviceContext ctx_;
    DeviceInfo dev_;
    ibv_pd* pd_;
    std::mutex regions_lock_;  ///< mem_reg may be called from any thread
    std::unordered_set<MemRegion*> regions_;
};

}  // namespace loom::uct::ib
