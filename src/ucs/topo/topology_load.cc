/**
 * Building a Topology: hwloc discovery (or a synthetic/XML description), the
 * software devices hwloc does not report, and the degenerate fallback.
 */
#define LOOM_LOG_COMPONENT (::loom::ucs::topo_log())

#include "ucs/debug/log.h"
#include "ucs/topo/topo_log.h"
#include "ucs/topo/topology.h"

#include <fmt/format.h>

#include <dirent.h>
#include <hwloc.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

namespace loom::ucs {
namespace {

/** Owns an hwloc topology handle. */
struct HwlocHandle {
    hwloc_topology_t topology = nullptr;
    HwlocHandle() = default;
    HwlocHandle(const HwlocHandle&) = delete;
    HwlocHandle& operator=(const HwlocHandle&) = delete;
    ~HwlocHandle() {
        if (topology != nullptr) hwloc_topology_destroy(topology);
    }
};

/** The indexes of a finite hwloc bitmap (object cpusets and nodesets are finite). */
CpuSet to_cpu_set(hwloc_const_bitmap_t bitmap) {
    CpuSet set;
    if (bitmap == nullptr || hwloc_bitmap_weight(bitmap) < 0) return set;
    for (int i = hwloc_bitmap_first(bitmap); i >= 0; i = hwloc_bitmap_next(bitmap, i)) {
        set.add(static_cast<unsigned>(i));
    }
    return set;
}

std::string info_or_empty(hwloc_obj_t obj, const char* name) {
    const char* value = hwloc_obj_get_info_by_name(obj, name);
    return value != nullptr ? value : "";
}

/** A small sysfs file's contents; "" when it cannot be read. */
std::string read_small_file(const std::string& path) {
    std::ifstream file(path);
    if (!file) return "";
    std::ostringstream text;
    text << file.rdbuf();
    return text.str();
}

/** A sysfs number such as "0x8086\n" or "-1\n"; nullopt when absent or garbage. */
std::optional<long> read_number_file(const std::string& path, int base) {
    const std::string text = read_small_file(path);
    if (text.empty()) return std::nullopt;
    char* end = nullptr;
    errno = 0;
    const long value = std::strtol(text.c_str(), &end, base);
    if (errno != 0 || end == text.c_str()) return std::nullopt;
    return value;
}

std::optional<std::string> resolve_path(const std::string& path) {
    std::unique_ptr<char, void (*)(void*)> resolved(::realpath(path.c_str(), nullptr), ::free);
    if (!resolved) return std::nullopt;
    return std::string(resolved.get());
}

/** The sysfs class directory of a device type ("net"), or nullptr for types looked up nowhere. */
const char* sysfs_class(DeviceType type) {
    switch (type) {
        case DeviceType::network:
            return "net";
        case DeviceType::openfabrics:
            return "infiniband";
        case DeviceType::block:
            return "block";
        default:
            return nullptr;
    }
}

DeviceType device_type(hwloc_obj_osdev_type_t type) {
    switch (type) {
        case HWLOC_OBJ_OSDEV_BLOCK:
            return DeviceType::block;
        case HWLOC_OBJ_OSDEV_GPU:
            return DeviceType::gpu;
        case HWLOC_OBJ_OSDEV_NETWORK:
            return DeviceType::network;
        case HWLOC_OBJ_OSDEV_OPENFABRICS:
            return DeviceType::openfabrics;
        case HWLOC_OBJ_OSDEV_DMA:
            return DeviceType::dma;
        case HWLOC_OBJ_OSDEV_COPROC:
            return DeviceType::coprocessor;
        default:
            return DeviceType::other;
    }
}

/**
 * The last PCI function named along a resolved sysfs path
 * ("/sys/devices/pci0000:00/0000:00:03.0/virtio2/net/eth0" -> 0000:00:03.0) and the
 * path of its directory.
 */
std::optional<std::pair<PciAddress, std::string>> pci_function_of(const std::string& path) {
    std::optional<std::pair<PciAddress, std::string>> found;
    std::size_t start = 0;
    while (start < path.size()) {
        std::size_t end = path.find('/', start);
        if (end == std::string::npos) end = path.size();
        if (auto address = PciAddress::parse(std::string_view(path).substr(start, end - start))) {
            found.emplace(*address, path.substr(0, end));
        }
        start = end + 1;
    }
    return found;
}

std::string describe(const TopologyParams& params) {
    switch (params.from) {
        case TopologyParams::From::this_machine:
            return "this machine";
        case TopologyParams::From::synthetic:
            return fmt::format("synthetic topology '{}'", params.description);
        case TopologyParams::From::xml:
            return fmt::format("XML topology ({} bytes)", params.description.size());
    }
    return "topology";
}

}  // namespace

struct Topology::Builder {
    // Fills every part of @p topo that comes from hwloc.
    static void read_hwloc(hwloc_topology_t hwloc, const TopologyParams& params, Topology& topo) {
        hwloc_obj_t root = hwloc_get_root_obj(hwloc);
        topo.cpus_ = to_cpu_set(root->cpuset);

        for (hwloc_obj_t obj = nullptr; (obj = hwloc_get_next_obj_by_type(hwloc, HWLOC_OBJ_NUMANODE, obj));) {
            topo.numa_nodes_.push_back(
                {obj->os_index, obj->attr->numanode.local_memory, to_cpu_set(obj->cpuset)});
        }
        if (topo.numa_nodes_.empty()) {
            // hwloc 2 always has a node; a bad XML file might not.
            topo.numa_nodes_.push_back({0, root->total_memory, topo.cpus_});
        }

        for (hwloc_obj_t obj = nullptr; (obj = hwloc_get_next_obj_by_type(hwloc, HWLOC_OBJ_PACKAGE, obj));) {
            const int cores = hwloc_get_nbobjs_inside_cpuset_by_type(hwloc, obj->cpuset, HWLOC_OBJ_CORE);
            const unsigned index = obj->os_index != HWLOC_UNKNOWN_INDEX ? obj->os_index : obj->logical_index;
            topo.packages_.push_back(
                {index, to_cpu_set(obj->cpuset), static_cast<unsigned>(std::max(cores, 0))});
        }
        const int cores = hwloc_get_nbobjs_by_type(hwloc, HWLOC_OBJ_CORE);
        topo.num_cores_ = cores > 0 ? static_cast<unsigned>(cores) : topo.cpus_.count();

        read_distances(hwloc, topo);

        for (hwloc_obj_t obj = nullptr; (obj = hwloc_get_next_pcidev(hwloc, obj));) {
            PciDevice pci;
            const auto& attr = obj->attr->pcidev;
            pci.address = {attr.domain, attr.bus, attr.dev, attr.func};
            pci.class_id = attr.class_id;
            pci.vendor_id = attr.vendor_id;
            pci.device_id = attr.device_id;
            pci.vendor_name = info_or_empty(obj, "PCIVendor");
            pci.device_name = info_or_empty(obj, "PCIDevice");
            locality(hwloc, obj, topo, pci.cpus, pci.numa_nodes);
            topo.pci_devices_.push_back(std::move(pci));
        }

        for (hwloc_obj_t obj = nullptr; (obj = hwloc_get_next_osdev(hwloc, obj));) {
            if (obj->name == nullptr) continue;
            Device device;
            device.name = obj->name;
            device.type = device_type(obj->attr->osdev.type);
            hwloc_obj_t parent = obj->parent;
            while (parent != nullptr && parent->type != HWLOC_OBJ_PCI_DEVICE &&
                   hwloc_obj_type_is_io(parent->type)) {
                parent = parent->parent;
            }
            if (parent != nullptr && parent->type == HWLOC_OBJ_PCI_DEVICE) {
                const auto& attr = parent->attr->pcidev;
                device.pci = PciAddress{attr.domain, attr.bus, attr.dev, attr.func};
                for (PciDevice& pci : topo.pci_devices_) {
                    if (pci.address == *device.pci) pci.os_devices.push_back(device.name);
                }
            }
            locality(hwloc, obj, topo, device.cpus, device.numa_nodes);
            const char* cls = sysfs_class(device.type);
            if (!params.sysfs_root.empty() && cls != nullptr) {
                device.sysfs_path =
                    resolve_path(fmt::format("{}/class/{}/{}", params.sysfs_root, cls, device.name))
                        .value_or("");
            }
            topo.devices_.push_back(std::move(device));
        }
    }

    // The CPUs and NUMA nodes of the first non-I/O ancestor of @p obj.
    static void locality(hwloc_topology_t hwloc, hwloc_obj_t obj, const Topology& topo, CpuSet& cpus,
                         std::vector<unsigned>& nodes) {
        hwloc_obj_t ancestor = hwloc_get_non_io_ancestor_obj(hwloc, obj);
        cpus = ancestor != nullptr ? to_cpu_set(ancestor->cpuset) : CpuSet();
        if (ancestor != nullptr) {
            for (unsigned node : to_cpu_set(ancestor->nodeset).to_vector()) {
                if (topo.find_numa_node(node) != nullptr) nodes.push_back(node);
            }
        }
        if (cpus.empty()) cpus = topo.cpus_;
        if (nodes.empty()) nodes = all_nodes(topo);
    }

    static std::vector<unsigned> all_nodes(const Topology& topo) {
        std::vector<unsigned> nodes;
        for (const NumaNode& node : topo.numa_nodes_) nodes.push_back(node.os_index);
        return nodes;
    }

    // The first latency matrix that covers every NUMA node, else the ACPI defaults.
    static void read_distances(hwloc_topology_t hwloc, Topology& topo) {
        const std::size_t n = topo.numa_nodes_.size();
        default_distances(topo);
        constexpr unsigned kMaxMatrices = 8;
        hwloc_distances_s* matrices[kMaxMatrices] = {};
        unsigned nr = kMaxMatrices;
        if (hwloc_distances_get_by_type(hwloc, HWLOC_OBJ_NUMANODE, &nr, matrices,
                                        HWLOC_DISTANCES_KIND_MEANS_LATENCY, 0) != 0) {
            return;
        }
        nr = std::min(nr, kMaxMatrices);
        for (unsigned m = 0; m < nr; ++m) {
            const hwloc_distances_s* matrix = matrices[m];
            if (!topo.os_numa_distances_ && matrix->nbobjs == n) {
                std::vector<std::uint32_t> values(n * n, 0);
                bool complete = true;
                for (unsigned i = 0; i < n && complete; ++i) {
                    const int row = topo.node_index(matrix->objs[i]->os_index);
                    for (unsigned j = 0; j < n && row >= 0; ++j) {
                        const int col = topo.node_index(matrix->objs[j]->os_index);
                        if (col < 0) break;
                        const hwloc_uint64_t value = matrix->values[i * n + j];
                        values[static_cast<std::size_t>(row) * n + static_cast<std::size_t>(col)] =
                            static_cast<std::uint32_t>(std::min<hwloc_uint64_t>(value, kDistanceUnknown - 1));
                    }
                    complete = row >= 0;
                }
                if (complete && std::find(values.begin(), values.end(), 0u) == values.end()) {
                    topo.numa_distances_ = std::move(values);
                    topo.os_numa_distances_ = true;
                }
            }
            hwloc_distances_release(hwloc, matrices[m]);
        }
    }

    static void default_distances(Topology& topo) {
        const std::size_t n = topo.numa_nodes_.size();
        topo.numa_distances_.assign(n * n, kNumaDistanceRemote);
        for (std::size_t i = 0; i < n; ++i) topo.numa_distances_[i * n + i] = kNumaDistanceLocal;
        topo.os_numa_distances_ = false;
    }

    /**
     * Adds the network and RDMA devices of <root>/class/{net,infiniband} that are not
     * in the topology yet: software devices (rxe0, siw0, lo, veth...), and hardware
     * ones hwloc did not report (all of them in a degenerate topology).
     */
    static void add_sysfs_devices(Topology& topo, const std::string& root) {
        if (root.empty()) return;
        std::vector<Device> found;
        for (DeviceType type : {DeviceType::network, DeviceType::openfabrics}) {
            const std::string dir = fmt::format("{}/class/{}", root, sysfs_class(type));
            std::unique_ptr<DIR, int (*)(DIR*)> listing(::opendir(dir.c_str()), ::closedir);
            if (!listing) continue;  // no RDMA stack loaded, or not Linux
            while (const dirent* entry = ::readdir(listing.get())) {
                const std::string name = entry->d_name;
                if (name == "." || name == "..") continue;
                const bool known =
                    std::any_of(topo.devices_.begin(), topo.devices_.end(),
                                [&](const Device& d) { return d.name == name && d.type == type; });
                if (known) continue;
                const std::optional<std::string> path = resolve_path(dir + "/" + name);
                if (!path) continue;  // vanished meanwhile
                found.push_back(sysfs_device(topo, name, type, *path));
            }
        }
        std::sort(found.begin(), found.end(),
                  [](const Device& a, const Device& b) { return a.name < b.name; });
        for (Device& device : found) topo.devices_.push_back(std::move(device));
    }

    static Device sysfs_device(Topology& topo, const std::string& name, DeviceType type,
                               const std::string& path) {
        Device device;
        device.name = name;
        device.type = type;
        device.sysfs_path = path;
        device.cpus = topo.cpus_;
        device.numa_nodes = all_nodes(topo);
        // Software devices live under /sys/devices/virtual; everything else has hardware.
        device.is_virtual = path.find("/devices/virtual/") != std::string::npos;
        if (device.is_virtual) return device;
        const auto function = pci_function_of(path);
        if (!function) return device;  // USB, platform device...: locality unknown
        device.pci = function->first;
        for (PciDevice& pci : topo.pci_devices_) {
            if (pci.address == function->first) {
                device.cpus = pci.cpus;
                device.numa_nodes = pci.numa_nodes;
                pci.os_devices.push_back(name);
                return device;
            }
        }
        // A PCI function hwloc did not report: what sysfs tells about it.
        PciDevice pci;
        const std::string& dir = function->second;
        pci.address = function->first;
        pci.class_id = static_cast<std::uint16_t>(read_number_file(dir + "/class", 16).value_or(0) >> 8);
        pci.vendor_id = static_cast<std::uint16_t>(read_number_file(dir + "/vendor", 16).value_or(0));
        pci.device_id = static_cast<std::uint16_t>(read_number_file(dir + "/device", 16).value_or(0));
        const long node = read_number_file(dir + "/numa_node", 10).value_or(-1);
        const NumaNode* numa = node >= 0 ? topo.find_numa_node(static_cast<unsigned>(node)) : nullptr;
        if (numa != nullptr && !numa->cpus.empty()) {
            device.cpus = numa->cpus;
            device.numa_nodes = {numa->os_index};
        }
        pci.cpus = device.cpus;
        pci.numa_nodes = device.numa_nodes;
        pci.os_devices.push_back(name);
        topo.pci_devices_.push_back(std::move(pci));
        return device;
    }

    static Topology degenerate(std::string_view sysfs_root) {
        Topology topo;
        topo.source_ = "degenerate: one NUMA node with every online CPU";
        topo.degenerate_ = true;
        Result<CpuSet> online = CpuSet::parse(read_small_file("/sys/devices/system/cpu/online"));
        if (online && !online->empty()) {
            topo.cpus_ = std::move(*online);
        } else {
            const long count = ::sysconf(_SC_NPROCESSORS_ONLN);
            topo.cpus_ = CpuSet::range(0, count > 0 ? static_cast<unsigned>(count - 1) : 0);
        }
        const long pages = ::sysconf(_SC_PHYS_PAGES);
        const long page_size = ::sysconf(_SC_PAGE_SIZE);
        const std::uint64_t memory = pages > 0 && page_size > 0 ? static_cast<std::uint64_t>(pages) *
                                                                      static_cast<std::uint64_t>(page_size)
                                                                : 0;
        topo.numa_nodes_.push_back({0, memory, topo.cpus_});
        topo.packages_.push_back({0, topo.cpus_, topo.cpus_.count()});
        topo.num_cores_ = topo.cpus_.count();
        default_distances(topo);
        add_sysfs_devices(topo, std::string(sysfs_root));
        return topo;
    }
};

Result<Topology> Topology::load(const TopologyParams& params) {
    const std::string what = describe(params);
    HwlocHandle hwloc;
    if (hwloc_topology_init(&hwloc.topology) != 0) {
        hwloc.topology = nullptr;
        LOOM_LOG_WARN("cannot load the {}: hwloc_topology_init failed: {}", what, std::strerror(errno));
        return Status::no_memory;
    }
    switch (params.from) {
        case TopologyParams::From::this_machine:
            break;
        case TopologyParams::From::synthetic:
            if (hwloc_topology_set_synthetic(hwloc.topology, params.description.c_str()) != 0) {
                LOOM_LOG_WARN("cannot load the {}: hwloc rejects the description", what);
                return Status::invalid_param;
            }
            break;
        case TopologyParams::From::xml:
            if (params.description.size() >= INT_MAX ||
                hwloc_topology_set_xmlbuffer(hwloc.topology, params.description.c_str(),
                                             static_cast<int>(params.description.size() + 1)) != 0) {
                LOOM_LOG_WARN("cannot load the {}: hwloc rejects the buffer", what);
                return Status::invalid_param;
            }
            break;
    }
    // The Linux backend reads PCI ids, classes and locality from sysfs. hwloc's
    // libpciaccess plugin adds only vendor names, at the cost of reading every
    // function's config space and a name cache it never frees; the GPU runtimes'
    // plugins are slow to initialise and not needed to place NICs.
    for (const char* component : {"pci", "opencl", "gl", "cuda", "nvml", "rsmi", "levelzero"}) {
        if (hwloc_topology_set_components(hwloc.topology, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                          component) != 0) {
            LOOM_LOG_DEBUG("hwloc cannot leave out its '{}' component", component);
        }
    }
    // Keep the PCI and OS devices that matter (NICs, RDMA devices, GPUs, disks);
    // KEEP_IMPORTANT drops the bridges and the many uninteresting PCI functions.
    hwloc_topology_set_io_types_filter(hwloc.topology, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(hwloc.topology) != 0) {
        const int error = errno;
        LOOM_LOG_WARN("cannot load the {}: hwloc_topology_load failed: {}", what, std::strerror(error));
        if (params.from != TopologyParams::From::this_machine) return Status::invalid_param;
        return error == ENOMEM ? Status::no_memory : Status::io_error;
    }

    Topology topo;
    switch (params.from) {
        case TopologyParams::From::this_machine: {
            const std::string version = info_or_empty(hwloc_get_root_obj(hwloc.topology), "hwlocVersion");
            topo.source_ = version.empty() ? "this machine" : fmt::format("this machine (hwloc {})", version);
            // HWLOC_XMLFILE or HWLOC_SYNTHETIC in the environment replace the discovery.
            if (!hwloc_topology_is_thissystem(hwloc.topology))
                topo.source_ += ", emulated (HWLOC_XMLFILE or HWLOC_SYNTHETIC)";
            break;
        }
        case TopologyParams::From::synthetic:
            topo.source_ = fmt::format("synthetic '{}'", params.description);
            break;
        case TopologyParams::From::xml:
            topo.source_ = "XML";
            break;
    }
    Builder::read_hwloc(hwloc.topology, params, topo);
    if (topo.cpus_.empty()) {
        LOOM_LOG_WARN("cannot load the {}: it has no CPU", what);
        return Status::invalid_param;
    }
    Builder::add_sysfs_devices(topo, params.sysfs_root);
    return topo;
}

Topology Topology::load_or_degenerate(const TopologyParams& params) {
    Result<Topology> loaded = load(params);
    if (loaded) return std::move(*loaded);
    LOOM_LOG_DIAG("using a degenerate topology (one NUMA node with every online CPU)");
    return Builder::degenerate(params.sysfs_root);
}

Topology Topology::degenerate(std::string_view sysfs_root) {
    return Builder::degenerate(sysfs_root);
}

Result<Topology> Topology::discover() {
    return load({TopologyParams::From::this_machine, "", "/sys"});
}

Result<Topology> Topology::from_synthetic(std::string_view description) {
    return load({TopologyParams::From::synthetic, std::string(description), ""});
}

Result<Topology> Topology::from_xml(std::string_view xml) {
    return load({TopologyParams::From::xml, std::string(xml), ""});
}

}  // namespace loom::ucs
