#include "test_uct_shm.h"

#include <dirent.h>

#include <algorithm>

namespace loom::uct::shmtest {

const Component& shm_component() {
    const Component* component = find_component("shm");
    if (component == nullptr) throw std::runtime_error("the shm component is not registered");
    return *component;
}

ShmSide::ShmSide(const ucs::config::Overrides& overrides) {
    auto md = shm_component().md_open("shm");
    if (!md) throw std::runtime_error("md_open(shm): " + std::string(to_string(md.status())));
    md_ = std::move(*md);
    IfaceParams params;
    params.config_overrides = overrides;
    auto iface = md_->iface_open({"shm", "memory", DeviceType::shm}, &worker_, params);
    if (!iface) throw std::runtime_error("iface_open(shm): " + std::string(to_string(iface.status())));
    iface_ = std::move(*iface);
    if (iface_->query(attr_) != Status::ok || md_->query(md_attr_) != Status::ok) {
        throw std::runtime_error("query failed");
    }
    if (iface_->progress_enable() != Status::ok) throw std::runtime_error("progress_enable failed");
}

ShmSide::~ShmSide() {
    for (Ep* ep : eps_) iface_->ep_destroy(ep);
    for (MemH memh : regs_) (void)md_->mem_dereg(memh);
    iface_.reset();
    md_.reset();
}

std::vector<std::uint8_t> ShmSide::address() const {
    std::vector<std::uint8_t> out(attr_.device_addr_len + attr_.iface_addr_len);
    if (iface_->get_device_address(out.data()) != Status::ok ||
        iface_->get_address(out.data() + attr_.device_addr_len) != Status::ok) {
        throw std::runtime_error("get address failed");
    }
    return out;
}

Result<Ep*> ShmSide::connect(const std::vector<std::uint8_t>& address, void (*on_error)(void*, Ep*, Status),
                             void* on_error_arg) {
    EpParams params;
    std::size_t dev_len = std::min(attr_.device_addr_len, address.size());
    params.dev_addr = address.data();
    params.dev_addr_len = dev_len;
    params.iface_addr = address.data() + dev_len;
    params.iface_addr_len = address.size() - dev_len;
    params.on_error = on_error;
    params.on_error_arg = on_error_arg;
    auto ep = iface_->ep_create(params);
    if (ep) eps_.push_back(*ep);
    return ep;
}

Ep* ShmSide::connect_or_throw(const std::vector<std::uint8_t>& address) {
    auto ep = connect(address);
    if (!ep) throw std::runtime_error("ep_create: " + std::string(to_string(ep.status())));
    return *ep;
}

void ShmSide::destroy(Ep* ep) {
    eps_.erase(std::remove(eps_.begin(), eps_.end(), ep), eps_.end());
    iface_->ep_destroy(ep);
}

std::vector<std::uint8_t> ShmSide::register_and_pack(void* address, std::size_t length, unsigned access) {
    auto memh = md_->mem_reg(address, length, access);
    if (!memh) throw std::runtime_error("mem_reg: " + std::string(to_string(memh.status())));
    regs_.push_back(*memh);
    return pack(*memh);
}

std::vector<std::uint8_t> ShmSide::pack(MemH memh) {
    std::vector<std::uint8_t> packed(md_attr_.rkey_packed_size);
    if (md_->mkey_pack(memh, packed.data()) != Status::ok) throw std::runtime_error("mkey_pack failed");
    return packed;
}

bool reachable(ShmSide& side, const std::vector<std::uint8_t>& address, std::string* reason) {
    std::size_t dev_len = std::min(side.attr().device_addr_len, address.size());
    return side.iface().is_reachable(address.data(), dev_len, address.data() + dev_len,
                                     address.size() - dev_len, reason);
}

std::vector<std::string> loom_shm_names() {
    std::vector<std::string> names;
    if (DIR* dir = ::opendir("/dev/shm")) {
        while (dirent* entry = ::readdir(dir)) {
            std::string name = entry->d_name;
            if (name.rfind("loom-", 0) == 0) names.push_back(name);
        }
        ::closedir(dir);
    }
    std::sort(names.begin(), names.end());
    return names;
}

std::vector<std::uint8_t> pattern(std::size_t length, unsigned seed) {
    std::vector<std::uint8_t> data(length);
    std::uint32_t x = seed * 2654435761u + 12345;
    for (std::size_t i = 0; i < length; ++i) {
        x = x * 1664525u + 1013904223u;
        data[i] = static_cast<std::uint8_t>(x >> 24);
    }
    return data;
}

Status flush_ep(ShmSide& side, Ep* ep) {
    TestCompletion comp;
    Status status;
    while ((status = ep_flush(ep, kFlushLocal, &comp)) == Status::no_resource) side.progress();
    if (status != Status::in_progress) return status;
    if (!side.progress_until([&] { return comp.fired == 1; })) return Status::timed_out;
    return comp.status;
}

}  // namespace loom::uct::shmtest
