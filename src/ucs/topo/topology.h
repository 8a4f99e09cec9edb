/**
 * Topology: what the machine looks like to a communication library. NUMA nodes
 * with their CPUs and memory, packages, cores and hardware threads (PUs), PCI
 * devices, and the OS devices on them (network interfaces such as eth0,
 * OpenFabrics devices such as mlx5_0, block devices), each with its locality: the
 * CPUs and NUMA nodes it hangs off.
 *
 * Discovery uses hwloc once; the result is plain immutable data, so a Topology can
 * be shared by every thread without locking. Topology::system() is the shared
 * instance for this machine. When hwloc fails, it falls back to a degenerate
 * topology (one NUMA node with every online CPU) and Loom keeps working.
 *
 * Software devices with no hardware parent (rxe0 and siw0 over a veth, lo, bridges,
 * tunnels) are not seen by hwloc; they are found in sysfs, marked virtual and treated
 * as local to every NUMA node.
 *
 * Distances rank devices for a process: distance(device, cpus) is 0 when the device
 * is on a NUMA node the CPUs belong to, and grows with the OS NUMA distance matrix
 * (ACPI SLIT) otherwise; see distance() for the exact rule and the fallback.
 */
#pragma once

#include "ucs/topo/cpu_set.h"
#include "ucs/topo/pci_address.h"
#include "ucs/type/result.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom::ucs {

/** How far a device is from a set of CPUs; smaller is closer, 0 is local. */
using Distance = std::uint32_t;

/** The device is on a NUMA node of the CPUs (or is virtual). */
inline constexpr Distance kDistanceLocal = 0;

/** Distance of a device the topology does not know (rank_devices puts it last). */
inline constexpr Distance kDistanceUnknown = UINT32_MAX;

/** NUMA distance of a node to itself in the ACPI SLIT convention. */
inline constexpr std::uint32_t kNumaDistanceLocal = 10;

/** NUMA distance assumed between two different nodes when the OS reports none (ACPI default). */
inline constexpr std::uint32_t kNumaDistanceRemote = 20;

/**
 * A NUMA node: memory and the CPUs closest to it. As in hwloc, a memory-only node
 * (HBM, CXL memory) has the CPUs of the package or machine it is attached to, so
 * a CPU may be close to several nodes.
 */
struct NumaNode {
    unsigned os_index = 0;           ///< the kernel's node number (node0 in sysfs)
    std::uint64_t memory_bytes = 0;  ///< local memory, 0 when unknown
    CpuSet cpus;
};

/** A processor package (socket). */
struct Package {
    unsigned os_index = 0;
    CpuSet cpus;
    unsigned num_cores = 0;
};

/** Kind of an OS device. */
enum class DeviceType : std::uint8_t {
    network,      ///< a network interface: eth0, ib0, lo
    openfabrics,  ///< an RDMA device: mlx5_0, rxe0, siw0
    block,        ///< a disk: nvme0n1, vda
    gpu,
    dma,
    coprocessor,
    other,
};

/** Name of a device type: "network", "openfabrics", "block", ... */
std::string_view to_string(DeviceType type) noexcept;

/** A PCI function and what the OS made of it. */
struct PciDevice {
    PciAddress address;
    std::uint16_t class_id = 0;  ///< class << 8 | subclass, e.g. 0x0200 Ethernet
    std::uint16_t vendor_id = 0;
    std::uint16_t device_id = 0;
    std::string vendor_name;  ///< "" when unknown (discovery reads ids, not names; XML may have them)
    std::string device_name;  ///< "" when unknown
    CpuSet cpus;              ///< CPUs it is local to
    std::vector<unsigned> numa_nodes;     ///< os indexes of the NUMA nodes it is local to
    std::vector<std::string> os_devices;  ///< names of the OS devices on it ("mlx5_0", "ib0")
};

/** An OS device: a network interface, an RDMA device, a disk... */
struct Device {
    std::string name;  ///< the OS name: "eth0", "mlx5_0", "rxe0"
    DeviceType type = DeviceType::other;
    bool is_virtual = false;           ///< software device without hardware: local to every node
    std::optional<PciAddress> pci;     ///< the PCI function it is on, when known
    std::string sysfs_path;            ///< resolved /sys/devices/... path; "" when unknown
    CpuSet cpus;                       ///< CPUs it is local to (all CPUs when unknown or virtual)
    std::vector<unsigned> numa_nodes;  ///< os indexes of its NUMA nodes (all when unknown or virtual)
};

/** One entry of rank_devices(). */
struct RankedDevice {
    std::string name;                ///< as given
    const Device* device = nullptr;  ///< nullptr when the topology does not know the name
    Distance distance = kDistanceUnknown;
};

/** Where a topology comes from (see Topology::load). */
struct TopologyParams {
    enum class From : std::uint8_t {
        this_machine,  ///< hwloc discovery of the running system
        synthetic,     ///< an hwloc synthetic description, "pack:2 numa:1 core:4 pu:2"
        xml,           ///< an hwloc XML export (lstopo --of xml)
    };
    From from = From::this_machine;
    std::string description;  ///< the synthetic description or the XML text
    /**
     * Directory where software network and RDMA devices are looked up
     * (<root>/class/net, <root>/class/infiniband) and device paths resolved: "/sys"
     * for this machine, "" for none (synthetic and XML topologies describe another
     * machine). A fake tree lets tests add devices such as rxe0.
     */
    std::string sysfs_root;
};

class Topology {
public:
    /**
     * Discovers this machine with hwloc (PCI and OS devices included) and adds the
     * software devices from /sys. Returns Status::io_error (hwloc could not read the
     * machine) or Status::no_memory, with one log line.
     */
    static Result<Topology> discover();

    /**
     * Builds the topology of an hwloc synthetic description such as
     * "pack:2 numa:1 core:2 pu:1" (no devices, no NUMA distance matrix).
     * Status::invalid_param with one log line when hwloc rejects the description.
     */
    static Result<Topology> from_synthetic(std::string_view description);

    /**
     * Builds the topology of an hwloc XML export, with its PCI and OS devices and its
     * NUMA distances. Status::invalid_param with one log line when it does not parse.
     */
    static Result<Topology> from_xml(std::string_view xml);

    /**
     * Builds a topology as @p params say. Failures return Status::invalid_param (bad
     * description), Status::io_error (hwloc could not discover the machine) or
     * Status::no_memory, with one log line.
     */
    static Result<Topology> load(const TopologyParams& params);

    /** load(), or degenerate() (with @p params.sysfs_root) when load() fails. */
    static Topology load_or_degenerate(const TopologyParams& params);

    /**
     * The fallback when hwloc fails: one NUMA node (os index 0) with every online CPU
     * and all the memory, one package, one core per CPU, and the network and RDMA
     * devices found under @p sysfs_root ("" for none).
     */
    static Topology degenerate(std::string_view sysfs_root = "/sys");

    /**
     * The shared topology of this machine: discovered on first use (thread-safe),
     * degenerate if discovery fails. Never changes afterwards.
     */
    static const Topology& system();

    /** What the topology describes: "this machine (hwloc 2.9.0)", "synthetic '...'", "degenerate"... */
    const std::string& source() const noexcept { return source_; }

    /** True for the fallback topology built without hwloc. */
    bool is_degenerate() const noexcept { return degenerate_; }

    /** Every CPU (PU) of the topology. */
    const CpuSet& cpus() const noexcept { return cpus_; }

    /** NUMA nodes, at least one, in hwloc's logical order. */
    const std::vector<NumaNode>& numa_nodes() const noexcept { return numa_nodes_; }

    /** Processor packages; may be empty when the platform does not report them. */
    const std::vector<Package>& packages() const noexcept { return packages_; }

    /** Number of cores (the number of PUs when the platform reports no cores). */
    unsigned num_cores() const noexcept { return num_cores_; }

    /** Number of hardware threads (PUs). */
    unsigned num_pus() const noexcept { return cpus_.count(); }

    /** PCI functions hwloc considers important (network, storage, GPUs...), then those of NICs only sysfs
     * knows. */
    const std::vector<PciDevice>& pci_devices() const noexcept { return pci_devices_; }

    /** OS devices: hardware ones first in hwloc's order, then the software ones by name. */
    const std::vector<Device>& devices() const noexcept { return devices_; }

    /** The NUMA node with kernel number @p os_index; nullptr when there is none. */
    const NumaNode* find_numa_node(unsigned os_index) const noexcept;

    /** The PCI function at @p address; Status::no_device when the topology has none. */
    Result<const PciDevice*> find_pci_device(const PciAddress& address) const;

    /**
     * Finds a device by OS name ("eth0", "mlx5_0", "rxe0"), by PCI address
     * ("0000:3b:00.0" or "3b:00.0": the first OS device on that function), or by a
     * sysfs path ("/sys/class/net/eth0", "/sys/bus/pci/devices/0000:3b:00.0").
     * Status::no_device with one log line (diag level: callers probe) otherwise.
     */
    Result<const Device*> find_device(std::string_view key) const;

    /** True when the NUMA distances come from the OS (else the ACPI defaults 10/20 are assumed). */
    bool has_os_numa_distances() const noexcept { return os_numa_distances_; }

    /**
     * NUMA distance between nodes with kernel numbers @p from and @p to in the ACPI
     * SLIT convention (10 = local); kDistanceUnknown if either node does not exist.
     */
    std::uint32_t numa_distance(unsigned from, unsigned to) const noexcept;

    /** Kernel numbers of the NUMA nodes whose CPUs intersect @p cpus. */
    std::vector<unsigned> numa_nodes_of(const CpuSet& cpus) const;

    /**
     * How far @p device is from NUMA node @p numa_node (kernel number): 0 when the
     * device is virtual or local to that node; otherwise, over the device's nodes M,
     * the smallest numa_distance(node, M) - numa_distance(node, node), at least 1.
     * The row is the caller's node: with an asymmetric matrix, distance from A to a
     * device on B is the A->B entry. Without an OS matrix every other node is at
     * kNumaDistanceRemote - kNumaDistanceLocal (10). Status::no_element for an
     * unknown node.
     */
    Result<Distance> distance(const Device& device, unsigned numa_node) const;

    /**
     * How far @p device is from @p cpus: the smallest distance() from the NUMA nodes
     * those CPUs belong to (numa_nodes_of), so 0 when any of them is local.
     * Status::invalid_param when @p cpus has no CPU of the topology.
     */
    Result<Distance> distance(const Device& device, const CpuSet& cpus) const;

    /**
     * The CPUs the calling thread may run on (its affinity, which threads inherit
     * from the process binding) within this topology; all the topology's CPUs when
     * the affinity cannot be read or lies outside (a topology of another machine).
     */
    CpuSet current_cpus() const;

    /**
     * The NUMA node (kernel number) of the CPU the calling thread runs on; if that is
     * unknown, the first node of current_cpus().
     */
    unsigned current_numa_node() const;

    /**
     * Sorts @p names (as accepted by find_device) by distance from the calling
     * thread's CPUs; stable, so equally close devices keep their order. Names the
     * topology does not know come last with kDistanceUnknown.
     */
    std::vector<RankedDevice> rank_devices(const std::vector<std::string>& names) const;

    /** rank_devices() from @p cpus instead of the calling thread (all CPUs if none is in the topology). */
    std::vector<RankedDevice> rank_devices(const std::vector<std::string>& names, const CpuSet& cpus) const;

private:
    struct Builder;
    friend struct Builder;

    Topology() = default;

    // Logical index of the node with kernel number @p os_index, or -1.
    int node_index(unsigned os_index) const noexcept;

    // distance() from the single node with kernel number @p from (which exists).
    Distance distance_from_node(const Device& device, unsigned from) const noexcept;

    std::string source_;
    bool degenerate_ = false;
    CpuSet cpus_;
    std::vector<NumaNode> numa_nodes_;
    std::vector<Package> packages_;
    unsigned num_cores_ = 0;
    std::vector<PciDevice> pci_devices_;
    std::vector<Device> devices_;
    bool os_numa_distances_ = false;
    std::vector<std::uint32_t> numa_distances_;  // row-major, logical node order
};

/**
 * The CPUs the calling thread may run on (sched_getaffinity). Status::io_error with
 * one log line when the kernel refuses.
 */
Result<CpuSet> thread_affinity();

}  // namespace loom::ucs
