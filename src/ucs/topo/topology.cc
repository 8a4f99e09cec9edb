#define LOOM_LOG_COMPONENT (::loom::ucs::topo_log())

#include "ucs/topo/topology.h"

#include "ucs/debug/log.h"
#include "ucs/topo/topo_log.h"

#include <sched.h>
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace loom::ucs {

log::Component& topo_log() {
    static log::Component component("topo");
    return component;
}

std::string_view to_string(DeviceType type) noexcept {
    switch (type) {
        case DeviceType::network:
            return "network";
        case DeviceType::openfabrics:
            return "openfabrics";
        case DeviceType::block:
            return "block";
        case DeviceType::gpu:
            return "gpu";
        case DeviceType::dma:
            return "dma";
        case DeviceType::coprocessor:
            return "coprocessor";
        case DeviceType::other:
            return "other";
    }
    return "other";
}

Result<CpuSet> thread_affinity() {
    // The kernel's mask may be larger than glibc's default cpu_set_t (1024 CPUs):
    // grow until sched_getaffinity stops saying EINVAL.
    for (int ncpus = 1024; ncpus <= static_cast<int>(CpuSet::kMaxCpus); ncpus *= 2) {
        std::unique_ptr<cpu_set_t, void (*)(cpu_set_t*)> mask(CPU_ALLOC(ncpus),
                                                              [](cpu_set_t* m) { CPU_FREE(m); });
        if (!mask) return Status::no_memory;
        const std::size_t size = CPU_ALLOC_SIZE(ncpus);
        if (::sched_getaffinity(0, size, mask.get()) == 0) {
            CpuSet cpus;
            for (int cpu = 0; cpu < ncpus; ++cpu) {
                if (CPU_ISSET_S(cpu, size, mask.get())) cpus.add(static_cast<unsigned>(cpu));
            }
            return cpus;
        }
        if (errno != EINVAL) break;
    }
    LOOM_LOG_WARN("cannot read the CPU affinity of the calling thread: {}", std::strerror(errno));
    return Status::io_error;
}

const NumaNode* Topology::find_numa_node(unsigned os_index) const noexcept {
    const int index = node_index(os_index);
    return index < 0 ? nullptr : &numa_nodes_[static_cast<std::size_t>(index)];
}

int Topology::node_index(unsigned os_index) const noexcept {
    for (std::size_t i = 0; i < numa_nodes_.size(); ++i) {
        if (numa_nodes_[i].os_index == os_index) return static_cast<int>(i);
    }
    return -1;
}

Result<const PciDevice*> Topology::find_pci_device(const PciAddress& address) const {
    for (const PciDevice& pci : pci_devices_) {
        if (pci.address == address) return &pci;
    }
    LOOM_LOG_DIAG("no PCI device {} in the topology", address.to_string());
    return Status::no_device;
}

Result<const Device*> Topology::find_device(std::string_view key) const {
    const auto on_function = [this](const PciAddress& address) -> const Device* {
        for (const Device& device : devices_) {
            if (device.pci && *device.pci == address) return &device;
        }
        return nullptr;
    };

    if (!key.empty() && key.front() == '/') {
        // A sysfs path: the device whose resolved path it is, else the device on
        // the last PCI function named along the path.
        std::string path(key);
        std::unique_ptr<char, void (*)(void*)> resolved(::realpath(path.c_str(), nullptr), ::free);
        if (resolved) path = resolved.get();
        for (const Device& device : devices_) {
            if (!device.sysfs_path.empty() && device.sysfs_path == path) return &device;
        }
        std::string_view rest = path;
        while (!rest.empty()) {
            const std::size_t slash = rest.rfind('/');
            const std::string_view component = rest.substr(slash == std::string_view::npos ? 0 : slash + 1);
            if (auto address = PciAddress::parse(component)) {
                if (const Device* device = on_function(*address)) return device;
            }
            if (slash == std::string_view::npos) break;
            rest = rest.substr(0, slash);
        }
    } else if (!key.empty()) {
        for (const Device& device : devices_) {
            if (device.name == key) return &device;
        }
        if (auto address = PciAddress::parse(key)) {
            if (const Device* device = on_function(*address)) return device;
        }
    }
    LOOM_LOG_DIAG("no device '{}' in the topology", key);
    return Status::no_device;
}

std::uint32_t Topology::numa_distance(unsigned from, unsigned to) const noexcept {
    const int i = node_index(from);
    const int j = node_index(to);
    if (i < 0 || j < 0) return kDistanceUnknown;
    return numa_distances_[static_cast<std::size_t>(i) * numa_nodes_.size() + static_cast<std::size_t>(j)];
}

std::vector<unsigned> Topology::numa_nodes_of(const CpuSet& cpus) const {
    std::vector<unsigned> nodes;
    for (const NumaNode& node : numa_nodes_) {
        if (node.cpus.intersects(cpus)) nodes.push_back(node.os_index);
    }
    return nodes;
}

Distance Topology::distance_from_node(const Device& device, unsigned from) const noexcept {
    if (device.is_virtual) return kDistanceLocal;
    const std::uint32_t self = numa_distance(from, from);
    Distance best = kDistanceUnknown;
    for (unsigned to : device.numa_nodes) {
        if (to == from) return kDistanceLocal;
        const std::uint32_t d = numa_distance(from, to);
        if (d == kDistanceUnknown) continue;  // a node the topology does not have
        // Relative to the local distance, and never 0: another node is never local.
        best = std::min<Distance>(best, d > self ? d - self : 1);
    }
    return best;
}

Result<Distance> Topology::distance(const Device& device, const CpuSet& cpus) const {
    const std::vector<unsigned> from = numa_nodes_of(cpus);
    if (from.empty()) {
        LOOM_LOG_DIAG("CPUs '{}' are not in the topology (CPUs {})", cpus.to_string(), cpus_.to_string());
        return Status::invalid_param;
    }
    Distance best = kDistanceUnknown;
    for (unsigned node : from) best = std::min(best, distance_from_node(device, node));
    return best;
}

Result<Distance> Topology::distance(const Device& device, unsigned numa_node) const {
    if (find_numa_node(numa_node) == nullptr) {
        LOOM_LOG_DIAG("no NUMA node {} in the topology", numa_node);
        return Status::no_element;
    }
    return distance_from_node(device, numa_node);
}

CpuSet Topology::current_cpus() const {
    Result<CpuSet> affinity = thread_affinity();
    if (affinity) {
        CpuSet cpus = *affinity & cpus_;
        if (!cpus.empty()) return cpus;
    }
    return cpus_;
}

unsigned Topology::current_numa_node() const {
    const int cpu = ::sched_getcpu();
    if (cpu >= 0) {
        for (const NumaNode& node : numa_nodes_) {
            if (node.cpus.contains(static_cast<unsigned>(cpu))) return node.os_index;
        }
    }
    const std::vector<unsigned> nodes = numa_nodes_of(current_cpus());
    return nodes.empty() ? numa_nodes_.front().os_index : nodes.front();
}

std::vector<RankedDevice> Topology::rank_devices(const std::vector<std::string>& names) const {
    return rank_devices(names, current_cpus());
}

std::vector<RankedDevice> Topology::rank_devices(const std::vector<std::string>& names,
                                                 const CpuSet& cpus) const {
    const CpuSet& from = numa_nodes_of(cpus).empty() ? cpus_ : cpus;
    std::vector<RankedDevice> ranked;
    ranked.reserve(names.size());
    for (const std::string& name : names) {
        RankedDevice entry{name, nullptr, kDistanceUnknown};
        if (Result<const Device*> device = find_device(name)) {
            entry.device = *device;
            entry.distance = distance(**device, from).value_or(kDistanceUnknown);
        }
        ranked.push_back(std::move(entry));
    }
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const RankedDevice& a, const RankedDevice& b) { return a.distance < b.distance; });
    return ranked;
}

const Topology& Topology::system() {
    static const Topology instance = load_or_degenerate({TopologyParams::From::this_machine, "", "/sys"});
    return instance;
}

}  // namespace loom::ucs
