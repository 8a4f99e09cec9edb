#include "uct_test.h"

#include "ucs/sys/module.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace loom::uct::test {

std::string Resource::name() const {
    std::string n = tl.tl_name + "_" + tl.dev_name;
    for (char& c : n) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    }
    return n;
}

std::string resource_name(const testing::TestParamInfo<Resource>& info) { return info.param.name(); }

Resource find_resource(const std::string& name) {
    for (const Resource& r : all_resources()) {
        if (r.name() == name) return r;
    }
    throw std::runtime_error("no transport resource " + name + " in this process");
}

std::vector<Resource> all_resources() {
    (void)ucs::load_modules("uct", {ucs::default_module_dirs(), nullptr});
    std::vector<std::string> allowed;
    if (const char* env = std::getenv("LOOMTEST_UCT_TLS")) {
        std::stringstream ss(env);
        for (std::string item; std::getline(ss, item, ',');) {
            if (!item.empty()) allowed.push_back(item);
        }
    }
    std::vector<Resource> resources;
    for (const Component* component : components()) {
        for (const std::string& md_name : component->query_md_resources()) {
            auto md = component->md_open(md_name);
            if (!md) continue;
            for (const TlResource& tl : (*md)->query_tl_resources()) {
                if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), tl.tl_name) == allowed.end()) {
                    continue;
                }
                resources.push_back({component, md_name, tl});
            }
        }
    }
    return resources;
}

Entity::Entity(const Resource& resource) {
    auto md = resource.component->md_open(resource.md_name);
    if (!md) throw std::runtime_error("md_open(" + resource.md_name + "): " + std::string(to_string(md.status())));
    md_ = std::move(*md);
    auto iface = md_->iface_open(resource.tl, &worker_, {});
    if (!iface) {
        throw std::runtime_error("iface_open(" + resource.name() + "): " + std::string(to_string(iface.status())));
    }
    iface_ = std::move(*iface);
    if (iface_->query(attr_) != Status::ok) throw std::runtime_error("iface query failed");
    if (md_->query(md_attr_) != Status::ok) throw std::runtime_error("md query failed");
    dev_addr_.resize(attr_.device_addr_len);
    iface_addr_.resize(attr_.iface_addr_len);
    if (iface_->get_device_address(dev_addr_.data()) != Status::ok ||
        iface_->get_address(iface_addr_.data()) != Status::ok) {
        throw std::runtime_error("get address failed");
    }
    if (iface_->progress_enable() != Status::ok) throw std::runtime_error("progress_enable failed");
}

Entity::~Entity() {
    for (Ep* ep : eps_) iface_->ep_destroy(ep);
    iface_.reset();
    md_.reset();
}

Ep* Entity::connect_to(Entity& peer, bool on_first_use) {
    if (!(attr_.cap_flags & kCapConnectToIface) && (attr_.cap_flags & kCapConnectToEp)) {
        // Endpoint to endpoint: one endpoint on each side, connected to the other's address.
        auto ep = iface_->ep_create(EpParams{});
        if (!ep) throw std::runtime_error("ep_create failed: " + std::string(to_string(ep.status())));
        eps_.push_back(*ep);
        auto peer_ep = peer.iface_->ep_create(EpParams{});
        if (!peer_ep) throw std::runtime_error("peer ep_create failed: " + std::string(to_string(peer_ep.status())));
        peer.eps_.push_back(*peer_ep);
        std::vector<std::uint8_t> addr(attr_.ep_addr_len), peer_addr(peer.attr_.ep_addr_len);
        if (iface_->ep_get_address(*ep, addr.data()) != Status::ok ||
            peer.iface_->ep_get_address(*peer_ep, peer_addr.data()) != Status::ok) {
            throw std::runtime_error("ep_get_address failed");
        }
        if (iface_->ep_connect_to_ep(*ep, peer.dev_addr_.data(), peer.dev_addr_.size(), peer_addr.data(),
                                     peer_addr.size()) != Status::ok ||
            peer.iface_->ep_connect_to_ep(*peer_ep, dev_addr_.data(), dev_addr_.size(), addr.data(),
                                          addr.size()) != Status::ok) {
            throw std::runtime_error("ep_connect_to_ep failed");
        }
        return *ep;
    }
    EpParams params;
    params.dev_addr = peer.dev_addr_.data();
    params.dev_addr_len = peer.dev_addr_.size();
    params.iface_addr = peer.iface_addr_.data();
    params.iface_addr_len = peer.iface_addr_.size();
    params.connect_on_first_use = on_first_use;
    auto ep = iface_->ep_create(params);
    if (!ep) throw std::runtime_error("ep_create failed: " + std::string(to_string(ep.status())));
    eps_.push_back(*ep);
    return *ep;
}

void Entity::destroy_ep(Ep* ep) {
    auto it = std::find(eps_.begin(), eps_.end(), ep);
    if (it != eps_.end()) eps_.erase(it);
    iface_->ep_destroy(ep);
}

void UctTest::SetUp() {
    sender_ = std::make_unique<Entity>(GetParam());
    receiver_ = std::make_unique<Entity>(GetParam());
    ep_ = sender_->connect_to(*receiver_);
}

void UctTest::TearDown() {
    sender_.reset();
    receiver_.reset();
}

unsigned UctTest::progress() { return sender_->worker().progress() + receiver_->worker().progress(); }

}  // namespace loom::uct::test
