#include "uct/api/uct.h"

#include "ucs/debug/log.h"

#include <algorithm>
#include <mutex>

namespace loom::uct {

namespace {

struct ComponentRegistry {
    std::mutex lock;
    std::vector<const Component*> components;
};

ComponentRegistry& registry() {
    static ComponentRegistry* instance = new ComponentRegistry();  // outlives static components
    return *instance;
}

}  // namespace

const char* to_string(DeviceType type) noexcept {
    switch (type) {
    case DeviceType::net: return "net";
    case DeviceType::shm: return "shm";
    case DeviceType::self: return "self";
    }
    return "unknown";
}

Component::Component(std::string name) : name_(std::move(name)) {
    ComponentRegistry& reg = registry();
    std::lock_guard guard(reg.lock);
    reg.components.push_back(this);
}

Component::~Component() {
    ComponentRegistry& reg = registry();
    std::lock_guard guard(reg.lock);
    std::erase(reg.components, this);
}

Result<Rkey> Component::rkey_unpack(const std::uint8_t*, std::size_t) const { return Status::unsupported; }

void Component::rkey_release(const Rkey&) const {}

Status Component::rkey_ptr(const Rkey&, std::uint64_t, void**) const {
    return Status::unsupported;
}

std::vector<const Component*> components() {
    ComponentRegistry& reg = registry();
    std::lock_guard guard(reg.lock);
    return reg.components;
}

const Component* find_component(std::string_view name) {
    ComponentRegistry& reg = registry();
    std::lock_guard guard(reg.lock);
    auto it = std::find_if(reg.components.begin(), reg.components.end(),
                           [&](const Component* c) { return c->name() == name; });
    return it == reg.components.end() ? nullptr : *it;
}

}  // namespace loom::uct
