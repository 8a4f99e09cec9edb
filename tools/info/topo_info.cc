/**
 * loom_info -T: the machine as Loom sees it, and how far each NIC is from us.
 */
#include "info.h"

#include "ucs/time/clock.h"
#include "ucs/topo/topology.h"

#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

namespace loom::info {
namespace {

using ucs::CpuSet;
using ucs::Device;
using ucs::DeviceType;
using ucs::Topology;

std::string format_bytes(std::uint64_t bytes) {
    if (bytes == 0) return "unknown";
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double value = static_cast<double>(bytes);
    std::size_t unit = 0;
    while (value >= 1024 && unit + 1 < std::size(units)) {
        value /= 1024;
        ++unit;
    }
    return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", value, units[unit]);
}

// "0", "0-1", or "all" when the list is every node of a multi-node machine.
std::string format_nodes(const Topology& topo, const std::vector<unsigned>& nodes) {
    if (nodes.size() == topo.numa_nodes().size() && nodes.size() > 1) return "all";
    CpuSet set;
    for (unsigned node : nodes) set.add(node);
    return set.empty() ? "-" : set.to_string();
}

std::string format_location(const Device& device) {
    if (device.is_virtual) return "virtual";
    if (device.pci) return device.pci->to_string();
    return "-";
}

void print_numa_distances(const Topology& topo) {
    const auto& nodes = topo.numa_nodes();
    std::printf(
        "#\n# NUMA distances (%s):\n#      ",
        topo.has_os_numa_distances() ? "from the OS" : "not reported by the OS, assumed 10 local, 20 remote");
    for (const auto& node : nodes) std::printf(" %6s", fmt::format("node{}", node.os_index).c_str());
    std::printf("\n");
    for (const auto& from : nodes) {
        std::printf("# %6s", fmt::format("node{}", from.os_index).c_str());
        for (const auto& to : nodes) std::printf(" %6u", topo.numa_distance(from.os_index, to.os_index));
        std::printf("\n");
    }
}

}  // namespace

int print_topology() {
    const Topology& topo = Topology::system();
    const ucs::ClockInfo clock = ucs::clock_info();

    std::printf("# Topology: %s\n", topo.source().c_str());
    std::printf("# NUMA nodes: %zu, packages: %zu, cores: %u, PUs: %u\n", topo.numa_nodes().size(),
                topo.packages().size(), topo.num_cores(), topo.num_pus());
    std::printf("# clock: %s, %.3f MHz%s\n", std::string(ucs::to_string(clock.source)).c_str(),
                static_cast<double>(clock.ticks_per_second) / 1e6,
                clock.cpu_has_invariant_tsc ? " (invariant TSC)" : "");
    std::printf("#\n");
    for (const auto& node : topo.numa_nodes()) {
        std::printf("# NUMA node %u: CPUs %s, memory %s\n", node.os_index,
                    node.cpus.empty() ? "none" : node.cpus.to_string().c_str(),
                    format_bytes(node.memory_bytes).c_str());
    }

    const CpuSet here = topo.current_cpus();
    std::printf("#\n# This process: CPUs %s, running on NUMA node %u\n", here.to_string().c_str(),
                topo.current_numa_node());

    std::printf("#\n# Network and RDMA devices (distance from this process, 0 = local):\n");
    std::printf("# %-16s %-12s %-14s %-6s %s\n", "device", "type", "PCI", "NUMA", "distance");
    bool any = false;
    for (const Device& device : topo.devices()) {
        if (device.type != DeviceType::network && device.type != DeviceType::openfabrics) continue;
        any = true;
        const auto distance = topo.distance(device, here);
        const std::string shown = distance ? std::to_string(*distance) : "unknown";
        std::printf("# %-16s %-12s %-14s %-6s %s\n", device.name.c_str(),
                    std::string(to_string(device.type)).c_str(), format_location(device).c_str(),
                    format_nodes(topo, device.numa_nodes).c_str(), shown.c_str());
    }
    if (!any) std::printf("#   none\n");

    if (!topo.pci_devices().empty()) {
        std::printf("#\n# PCI devices:\n");
        for (const auto& pci : topo.pci_devices()) {
            std::string os_devices;
            for (const auto& name : pci.os_devices) os_devices += (os_devices.empty() ? "" : ",") + name;
            std::string name = pci.device_name.empty() ? "" : "  " + pci.device_name;
            std::printf("# %s  %-12s [%04x:%04x]  NUMA %-4s %s%s\n", pci.address.to_string().c_str(),
                        std::string(ucs::pci_class_name(pci.class_id)).c_str(), pci.vendor_id, pci.device_id,
                        format_nodes(topo, pci.numa_nodes).c_str(),
                        os_devices.empty() ? "-" : os_devices.c_str(), name.c_str());
        }
    }

    if (topo.numa_nodes().size() > 1) print_numa_distances(topo);
    return 0;
}

}  // namespace loom::info
