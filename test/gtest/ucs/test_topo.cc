#include "common/test_helpers.h"

#include "ucs/topo/cpu_set.h"
#include "ucs/topo/pci_address.h"
#include "ucs/topo/topology.h"

#include <gtest/gtest.h>

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace loom::ucs {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------

CpuSet cpus_of(std::initializer_list<unsigned> list) {
    CpuSet set;
    for (unsigned cpu : list) set.add(cpu);
    return set;
}

std::vector<std::string> names_of(const std::vector<RankedDevice>& ranked) {
    std::vector<std::string> names;
    for (const auto& entry : ranked) names.push_back(entry.name);
    return names;
}

std::string realpath_of(const std::string& path) {
    std::error_code error;
    fs::path resolved = fs::canonical(path, error);
    return error ? "" : resolved.string();
}

/** A temporary directory tree, removed on destruction. */
class TempDir {
public:
    TempDir() {
        std::string pattern = (fs::temp_directory_path() / "loomtest-topo-XXXXXX").string();
        if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
        path_ = pattern;
    }
    ~TempDir() {
        std::error_code ignored;
        fs::remove_all(path_, ignored);
    }
    const std::string& path() const { return path_; }

    void write(const std::string& relative, const std::string& contents) const {
        fs::create_directories(fs::path(path_ + "/" + relative).parent_path());
        std::ofstream(path_ + "/" + relative) << contents;
    }
    void mkdir(const std::string& relative) const { fs::create_directories(path_ + "/" + relative); }
    // <root>/class/<cls>/<name> -> <root>/<target>, as the kernel links its class directories.
    void link_class(const std::string& cls, const std::string& name, const std::string& target) const {
        mkdir(target);
        mkdir("class/" + cls);
        fs::create_symlink("../../" + target, path_ + "/class/" + cls + "/" + name);
    }

private:
    std::string path_;
};

/**
 * Two packages, one NUMA node each (CPUs 0-1 and 2-3), and an asymmetric SLIT
 * (0->1 is 21, 1->0 is 31) so the direction of a distance shows. eth1 hangs off
 * node 0, mlx5_0 and ib0 off node 1, and eth0 off the machine (locality unknown).
 */
const char* const kTwoNodeXml = R"(<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
  <object type="Machine" os_index="0" cpuset="0x0000000f" complete_cpuset="0x0000000f" allowed_cpuset="0x0000000f" nodeset="0x00000003" complete_nodeset="0x00000003" allowed_nodeset="0x00000003" gp_index="1">
    <object type="Package" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="2">
      <object type="NUMANode" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="3" local_memory="1073741824"/>
      <object type="Core" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="4">
        <object type="PU" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="5"/>
      </object>
      <object type="Core" os_index="1" cpuset="0x00000002" complete_cpuset="0x00000002" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="6">
        <object type="PU" os_index="1" cpuset="0x00000002" complete_cpuset="0x00000002" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="7"/>
      </object>
      <object type="Bridge" gp_index="20" bridge_type="0-1" depth="0" bridge_pci="0000:[01-01]">
        <object type="PCIDev" gp_index="21" pci_busid="0000:01:00.0" pci_type="0200 [8086:1572] [8086:0000] 01">
          <object type="OSDev" gp_index="22" name="eth1" osdev_type="2"/>
        </object>
      </object>
    </object>
    <object type="Package" os_index="1" cpuset="0x0000000c" complete_cpuset="0x0000000c" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="8">
      <object type="NUMANode" os_index="1" cpuset="0x0000000c" complete_cpuset="0x0000000c" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="9" local_memory="2147483648"/>
      <object type="Core" os_index="2" cpuset="0x00000004" complete_cpuset="0x00000004" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="10">
        <object type="PU" os_index="2" cpuset="0x00000004" complete_cpuset="0x00000004" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="11"/>
      </object>
      <object type="Core" os_index="3" cpuset="0x00000008" complete_cpuset="0x00000008" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="12">
        <object type="PU" os_index="3" cpuset="0x00000008" complete_cpuset="0x00000008" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="13"/>
      </object>
      <object type="Bridge" gp_index="30" bridge_type="0-1" depth="0" bridge_pci="0000:[81-81]">
        <object type="PCIDev" gp_index="31" pci_busid="0000:81:00.0" pci_type="0207 [15b3:1017] [15b3:0007] 00">
          <info name="PCIVendor" value="Mellanox Technologies"/>
          <info name="PCIDevice" value="MT27800 Family [ConnectX-5]"/>
          <object type="OSDev" gp_index="32" name="mlx5_0" osdev_type="3"/>
          <object type="OSDev" gp_index="33" name="ib0" osdev_type="2"/>
        </object>
      </object>
    </object>
    <object type="Bridge" gp_index="40" bridge_type="0-1" depth="0" bridge_pci="0000:[00-00]">
      <object type="PCIDev" gp_index="41" pci_busid="0000:00:03.0" pci_type="0200 [1af4:1041] [1af4:1041] 01">
        <object type="OSDev" gp_index="42" name="eth0" osdev_type="2"/>
      </object>
    </object>
  </object>
  <distances2 type="NUMANode" nbobjs="2" kind="5" name="NUMALatency" indexing="os">
    <indexes length="4">0 1 </indexes>
    <u64values length="12">10 21 31 10 </u64values>
  </distances2>
</topology>
)";

/** The same machine without the distance matrix: the 10/20 fallback applies. */
std::string two_node_xml_without_distances() {
    std::string xml = kTwoNodeXml;
    const std::size_t begin = xml.find("  <distances2");
    const std::size_t end = xml.find("</distances2>\n") + std::string("</distances2>\n").size();
    xml.erase(begin, end - begin);
    return xml;
}

std::string replace_once(std::string text, const std::string& from, const std::string& to) {
    const std::size_t pos = text.find(from);
    if (pos == std::string::npos) throw std::runtime_error("test XML lacks " + from);
    return text.replace(pos, from.size(), to);
}

/**
 * The same machine plus a memory-only node 2 (like KNL MCDRAM or SPR HBM) on
 * package 0: hwloc gives it package 0's CPUs. SLIT: 0-2 is 15, 1-2 is 25.
 */
std::string three_node_xml() {
    std::string xml = kTwoNodeXml;
    xml = replace_once(xml,
                       R"(nodeset="0x00000003" complete_nodeset="0x00000003" allowed_nodeset="0x00000003")",
                       R"(nodeset="0x00000007" complete_nodeset="0x00000007" allowed_nodeset="0x00000007")");
    xml = replace_once(xml, R"(nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="2">)",
                       R"(nodeset="0x00000005" complete_nodeset="0x00000005" gp_index="2">)");
    xml = replace_once(xml, R"(local_memory="1073741824"/>)",
                       R"(local_memory="1073741824"/>
      <object type="NUMANode" os_index="2" cpuset="0x00000003" complete_cpuset="0x00000003" nodeset="0x00000004" complete_nodeset="0x00000004" gp_index="50" subtype="MCDRAM" local_memory="536870912"/>)");
    xml = replace_once(xml, R"(nbobjs="2")", R"(nbobjs="3")");
    xml =
        replace_once(xml, R"(<indexes length="4">0 1 </indexes>)", R"(<indexes length="6">0 1 2 </indexes>)");
    xml = replace_once(xml, R"(<u64values length="12">10 21 31 10 </u64values>)",
                       R"(<u64values length="27">10 21 15 21 10 25 15 25 10 </u64values>)");
    return xml;
}

Topology load_two_node(const std::string& sysfs_root = "") {
    Result<Topology> topo = Topology::load({TopologyParams::From::xml, kTwoNodeXml, sysfs_root});
    EXPECT_TRUE(topo.ok()) << to_string(topo.status());
    if (!topo) throw std::runtime_error("cannot load the two-node XML topology");
    return std::move(*topo);
}

const Device& device_named(const Topology& topo, const std::string& name) {
    Result<const Device*> device = topo.find_device(name);
    if (!device) throw std::runtime_error("no device " + name);
    return **device;
}

std::vector<unsigned> all_node_indexes(const Topology& topo) {
    std::vector<unsigned> nodes;
    for (const auto& node : topo.numa_nodes()) nodes.push_back(node.os_index);
    return nodes;
}

/**
 * A fake sysfs tree with what hwloc never reports: a soft-RoCE device and a veth
 * (virtual), a PCI NIC on NUMA node 1, a USB NIC, and ib0 (also in the XML).
 */
void populate_fake_sysfs(const TempDir& dir) {
    dir.link_class("infiniband", "rxe0", "devices/virtual/infiniband/rxe0");
    dir.link_class("net", "veth0", "devices/virtual/net/veth0");
    const std::string nic = "devices/pci0000:00/0000:00:1f.6";
    dir.write(nic + "/vendor", "0x8086\n");
    dir.write(nic + "/device", "0x15bb\n");
    dir.write(nic + "/class", "0x020000\n");
    dir.write(nic + "/numa_node", "1\n");
    dir.link_class("net", "enp0s31f6", nic + "/net/enp0s31f6");
    dir.link_class("net", "usb0", "devices/platform/usb1/1-1/net/usb0");
    dir.link_class("net", "ib0", "devices/pci0000:80/0000:80:01.0/0000:81:00.0/net/ib0");
}

// ---------------------------------------------------------------------------------
// CpuSet
// ---------------------------------------------------------------------------------

TEST(CpuSet, FormatsCompactRanges) {
    EXPECT_EQ("0-3,8", cpus_of({0, 1, 2, 3, 8}).to_string());
    EXPECT_EQ("", CpuSet().to_string());
    EXPECT_EQ("5", cpus_of({5}).to_string());
    EXPECT_EQ("0,2,4", cpus_of({4, 2, 0}).to_string());
    EXPECT_EQ("1-2", cpus_of({1, 2}).to_string());
    EXPECT_EQ("63-65,127-128", cpus_of({63, 64, 65, 127, 128}).to_string());
    EXPECT_EQ("0-15", CpuSet::range(0, 15).to_string());
    EXPECT_TRUE(CpuSet::range(3, 2).empty());
}

TEST(CpuSet, ParsesKernelLists) {
    Result<CpuSet> set = CpuSet::parse("0-3,8");
    ASSERT_TRUE(set.ok());
    EXPECT_EQ(cpus_of({0, 1, 2, 3, 8}), *set);
    EXPECT_EQ(cpus_of({1, 3}), CpuSet::parse("3,1").value());
    EXPECT_EQ(CpuSet::range(0, 127), CpuSet::parse(" 0-127\n").value());  // as read from sysfs
    EXPECT_TRUE(CpuSet::parse("").value().empty());
    EXPECT_TRUE(CpuSet::parse("\n").value().empty());
    EXPECT_EQ(cpus_of({CpuSet::kMaxCpus - 1}), CpuSet::parse(std::to_string(CpuSet::kMaxCpus - 1)).value());
    for (const char* text : {"0-3,8", "7", "0,2,4-6,100-200"}) {
        EXPECT_EQ(text, CpuSet::parse(text).value().to_string());
    }
}

TEST(CpuSet, RejectsMalformedLists) {
    test::LogCapture capture("diag");
    const std::string too_big = std::to_string(CpuSet::kMaxCpus);
    for (const std::string text : {"a", "1-", "-1", "3-1", "1,,2", "1,", ",1", "1 2", "0x3", "1-2-3", "+1"}) {
        EXPECT_EQ(Status::invalid_param, CpuSet::parse(text).status()) << text;
    }
    EXPECT_EQ(Status::invalid_param, CpuSet::parse(too_big).status());
    EXPECT_EQ(Status::invalid_param, CpuSet::parse("0-" + too_big).status());
    EXPECT_EQ(1, capture.count("invalid CPU list '1,,2'"));
    EXPECT_EQ(1, capture.count("invalid CPU list '" + too_big + "'"));
}

TEST(CpuSet, SetOperations) {
    const CpuSet a = cpus_of({0, 1, 2, 70});
    const CpuSet b = cpus_of({2, 3, 70, 200});
    EXPECT_EQ(4u, a.count());
    EXPECT_TRUE(a.contains(70));
    EXPECT_FALSE(a.contains(3));
    EXPECT_FALSE(a.contains(100000));
    EXPECT_EQ(0u, a.first().value());
    EXPECT_FALSE(CpuSet().first().has_value());
    EXPECT_TRUE(a.intersects(b));
    EXPECT_FALSE(a.intersects(cpus_of({3, 200})));
    EXPECT_EQ(cpus_of({2, 70}), a & b);
    EXPECT_EQ(cpus_of({0, 1, 2, 3, 70, 200}), a | b);
    EXPECT_TRUE(cpus_of({1, 70}).is_subset_of(a));
    EXPECT_FALSE(b.is_subset_of(a));
    EXPECT_TRUE(CpuSet().is_subset_of(a));
    EXPECT_EQ((std::vector<unsigned>{0, 1, 2, 70}), a.to_vector());
    // Removing the highest CPU leaves a set equal to one never holding it.
    CpuSet c = cpus_of({1, 300});
    c.remove(300);
    EXPECT_EQ(cpus_of({1}), c);
    c.remove(1);
    EXPECT_TRUE(c.empty());
    EXPECT_EQ(CpuSet(), c);
    // The intersection of disjoint sets is empty and compares equal to an empty set.
    EXPECT_EQ(CpuSet(), cpus_of({200}) & cpus_of({1}));
    // Out-of-range indexes are ignored rather than allocating gigabytes.
    CpuSet d;
    d.add(CpuSet::kMaxCpus);
    EXPECT_TRUE(d.empty());
}

// ---------------------------------------------------------------------------------
// PciAddress
// ---------------------------------------------------------------------------------

TEST(PciAddress, ParsesAndFormats) {
    Result<PciAddress> address = PciAddress::parse("0000:3b:00.1");
    ASSERT_TRUE(address.ok());
    EXPECT_EQ(0u, address->domain);
    EXPECT_EQ(0x3b, address->bus);
    EXPECT_EQ(0, address->device);
    EXPECT_EQ(1, address->function);
    EXPECT_EQ("0000:3b:00.1", address->to_string());
    EXPECT_EQ("0000:3b:1f.7", PciAddress::parse("3B:1F.7")->to_string());
    EXPECT_EQ("10000:e1:00.0", PciAddress::parse("10000:e1:00.0")->to_string());
    EXPECT_EQ(*PciAddress::parse("0000:81:00.0"), *PciAddress::parse("81:00.0"));
}

TEST(PciAddress, RejectsOtherText) {
    for (const char* text :
         {"", "eth0", "3b:00", "0000:3b:00.8", "0000:3b:20.0", "000:3b:00.0", "zz:00.0", "0000:3b:00.1x",
          "0000:3b:00.", ":3b:00.0", "0000:3b.00:0", "123456789:00:00.0"}) {
        EXPECT_EQ(Status::invalid_param, PciAddress::parse(text).status()) << text;
    }
}

TEST(PciAddress, ClassNames) {
    EXPECT_EQ("Ethernet", pci_class_name(0x0200));
    EXPECT_EQ("InfiniBand", pci_class_name(0x0207));
    EXPECT_EQ("Network", pci_class_name(0x0280));
    EXPECT_EQ("Storage", pci_class_name(0x0108));
    EXPECT_EQ("Accelerator", pci_class_name(0x1200));
    EXPECT_EQ("Other", pci_class_name(0xff00));
}

// ---------------------------------------------------------------------------------
// This machine
// ---------------------------------------------------------------------------------

TEST(Topology, DiscoversThisMachine) {
    Result<Topology> topo = Topology::discover();
    ASSERT_TRUE(topo.ok()) << to_string(topo.status());
    EXPECT_FALSE(topo->is_degenerate());
    EXPECT_NE(std::string::npos, topo->source().find("this machine")) << topo->source();
    EXPECT_FALSE(topo->cpus().empty());
    ASSERT_FALSE(topo->numa_nodes().empty());
    EXPECT_EQ(kNumaDistanceLocal,
              topo->numa_distance(topo->numa_nodes()[0].os_index, topo->numa_nodes()[0].os_index));
}

TEST(Topology, CountsMatchTheKernel) {
    const Topology& topo = Topology::system();
    const CpuSet online = CpuSet::parse(test::read_file("/sys/devices/system/cpu/online")).value();
    const long online_count = ::sysconf(_SC_NPROCESSORS_ONLN);
    ASSERT_EQ(static_cast<unsigned>(online_count), online.count());
    const CpuSet affinity = thread_affinity().value();

    // hwloc leaves out the CPUs our cgroup forbids; the affinity is within those.
    EXPECT_TRUE(topo.cpus().is_subset_of(online));
    EXPECT_TRUE(affinity.is_subset_of(topo.cpus()));
    if (affinity == online) {
        EXPECT_EQ(static_cast<unsigned>(online_count), topo.num_pus());
    }
    EXPECT_EQ(topo.cpus().count(), topo.num_pus());
    EXPECT_GE(topo.num_cores(), 1u);
    EXPECT_LE(topo.num_cores(), topo.num_pus());

    // Every CPU is on a node; nodes are the kernel's and have at least the CPUs the
    // kernel lists for them (memory-only nodes list none but get their package's).
    const CpuSet kernel_nodes = CpuSet::parse(test::read_file("/sys/devices/system/node/online")).value();
    CpuSet seen;
    std::uint64_t memory = 0;
    for (const NumaNode& node : topo.numa_nodes()) {
        SCOPED_TRACE("node " + std::to_string(node.os_index));
        EXPECT_TRUE(kernel_nodes.contains(node.os_index));
        const std::string cpulist =
            "/sys/devices/system/node/node" + std::to_string(node.os_index) + "/cpulist";
        const CpuSet kernel_cpus = CpuSet::parse(test::read_file(cpulist)).value() & topo.cpus();
        EXPECT_TRUE(kernel_cpus.is_subset_of(node.cpus))
            << kernel_cpus.to_string() << " vs " << node.cpus.to_string();
        seen |= node.cpus;
        memory += node.memory_bytes;
        EXPECT_EQ(&node, topo.find_numa_node(node.os_index));
    }
    EXPECT_EQ(topo.cpus(), seen);
    EXPECT_GT(memory, 0u);
    if (affinity == online) {
        EXPECT_EQ(kernel_nodes.count(), topo.numa_nodes().size());
    }

    CpuSet in_packages;
    for (const Package& package : topo.packages()) {
        EXPECT_GE(package.num_cores, 1u);
        in_packages |= package.cpus;
    }
    if (!topo.packages().empty()) {
        EXPECT_EQ(topo.cpus(), in_packages);
    }
}

TEST(Topology, SystemInstanceIsSharedAcrossThreads) {
    const Topology* seen[4] = {};
    std::vector<std::thread> threads;
    for (auto& slot : seen) threads.emplace_back([&slot] { slot = &Topology::system(); });
    for (auto& thread : threads) thread.join();
    for (const Topology* topo : seen) EXPECT_EQ(&Topology::system(), topo);
}

TEST(Topology, EveryNetworkInterfaceIsFound) {
    const Topology& topo = Topology::system();
    int checked = 0;
    for (const char* cls : {"net", "infiniband"}) {
        std::error_code error;
        for (const auto& entry : fs::directory_iterator(std::string("/sys/class/") + cls, error)) {
            const std::string name = entry.path().filename().string();
            const std::string real = realpath_of(entry.path().string());
            SCOPED_TRACE(name + " -> " + real);
            Result<const Device*> found = topo.find_device(name);
            ASSERT_TRUE(found.ok());
            const Device& device = **found;
            EXPECT_EQ(std::string(cls) == "net" ? DeviceType::network : DeviceType::openfabrics, device.type);
            EXPECT_EQ(real, device.sysfs_path);
            EXPECT_EQ(real.find("/devices/virtual/") != std::string::npos, device.is_virtual);
            EXPECT_FALSE(device.cpus.empty());
            EXPECT_FALSE(device.numa_nodes.empty());
            // The class link finds the same device.
            EXPECT_EQ(&device, topo.find_device(entry.path().string()).value());
            if (device.pci) {
                EXPECT_NE(std::string::npos, real.find("/" + device.pci->to_string() + "/"));
                const PciDevice* pci = topo.find_pci_device(*device.pci).value();
                EXPECT_NE(pci->os_devices.end(),
                          std::find(pci->os_devices.begin(), pci->os_devices.end(), name));
                EXPECT_EQ(*device.pci, *topo.find_device(device.pci->to_string()).value()->pci);
            }
            ++checked;
        }
    }
    EXPECT_GT(checked, 0);  // every Linux machine has lo
}

TEST(Topology, LoopbackIsVirtualAndLocalEverywhere) {
    const Topology& topo = Topology::system();
    if (!fs::exists("/sys/class/net/lo")) GTEST_SKIP() << "no /sys/class/net/lo";
    const Device& lo = device_named(topo, "lo");
    EXPECT_TRUE(lo.is_virtual);
    EXPECT_FALSE(lo.pci.has_value());
    EXPECT_EQ(DeviceType::network, lo.type);
    EXPECT_EQ(topo.cpus(), lo.cpus);
    EXPECT_EQ(all_node_indexes(topo), lo.numa_nodes);
    for (const NumaNode& node : topo.numa_nodes()) {
        EXPECT_EQ(kDistanceLocal, topo.distance(lo, node.os_index).value());
    }
    EXPECT_EQ(kDistanceLocal, topo.distance(lo, topo.current_cpus()).value());
}

TEST(Topology, UnknownDevicesAreNoDevice) {
    const Topology& topo = Topology::system();
    test::LogCapture capture("diag");
    EXPECT_EQ(Status::no_device, topo.find_device("loom-no-such-dev0").status());
    EXPECT_EQ(Status::no_device, topo.find_device("").status());
    EXPECT_EQ(Status::no_device, topo.find_device("/sys/class/net/loom-no-such-dev0").status());
    EXPECT_EQ(Status::no_device, topo.find_device("/").status());
    EXPECT_EQ(1, capture.count("no device 'loom-no-such-dev0'"));
    // A PCI function no OS device sits on (domain ffff does not exist on Linux).
    const PciAddress nowhere = PciAddress::parse("ffff:ff:1f.7").value();
    EXPECT_EQ(Status::no_device, topo.find_device(nowhere.to_string()).status());
    EXPECT_EQ(Status::no_device, topo.find_pci_device(nowhere).status());
    EXPECT_EQ(1, capture.count("no PCI device ffff:ff:1f.7"));
}

TEST(Topology, RankingMyOwnDevices) {
    const Topology& topo = Topology::system();
    std::vector<std::string> names;
    for (const Device& device : topo.devices()) names.push_back(device.name);
    names.push_back("loom-no-such-dev0");
    const std::vector<RankedDevice> ranked = topo.rank_devices(names);
    ASSERT_EQ(names.size(), ranked.size());
    for (std::size_t i = 1; i < ranked.size(); ++i) {
        EXPECT_LE(ranked[i - 1].distance, ranked[i].distance) << i;
    }
    EXPECT_EQ("loom-no-such-dev0", ranked.back().name);
    EXPECT_EQ(nullptr, ranked.back().device);
    EXPECT_EQ(kDistanceUnknown, ranked.back().distance);
    for (const RankedDevice& entry : ranked) {
        if (entry.device == nullptr) continue;
        EXPECT_EQ(entry.name, entry.device->name);
        EXPECT_EQ(topo.distance(*entry.device, topo.current_cpus()).value(), entry.distance);
    }
}

TEST(Topology, CurrentLocalityFollowsTheThreadAffinity) {
    const Topology& topo = Topology::system();
    EXPECT_EQ(thread_affinity().value() & topo.cpus(), topo.current_cpus());
    // A thread pinned to one CPU sees exactly that CPU and its node.
    const unsigned cpu = thread_affinity().value().first().value();
    CpuSet pinned_cpus;
    unsigned pinned_node = UINT32_MAX;
    std::thread pinned([&] {
        cpu_set_t mask;
        CPU_ZERO(&mask);
        CPU_SET(cpu, &mask);
        if (::pthread_setaffinity_np(::pthread_self(), sizeof(mask), &mask) != 0) return;
        pinned_cpus = topo.current_cpus();
        pinned_node = topo.current_numa_node();
    });
    pinned.join();
    EXPECT_EQ(cpus_of({cpu}), pinned_cpus);
    const NumaNode* node = topo.find_numa_node(pinned_node);
    ASSERT_NE(nullptr, node);
    EXPECT_TRUE(node->cpus.contains(cpu));
}

// ---------------------------------------------------------------------------------
// Synthetic and XML machines
// ---------------------------------------------------------------------------------

TEST(Topology, SyntheticTwoNodes) {
    Result<Topology> topo = Topology::from_synthetic("node:2 core:2 pu:1");
    ASSERT_TRUE(topo.ok());
    EXPECT_NE(std::string::npos, topo->source().find("synthetic")) << topo->source();
    ASSERT_EQ(2u, topo->numa_nodes().size());
    EXPECT_EQ("0-1", topo->numa_nodes()[0].cpus.to_string());
    EXPECT_EQ("2-3", topo->numa_nodes()[1].cpus.to_string());
    EXPECT_EQ(4u, topo->num_cores());
    EXPECT_EQ(4u, topo->num_pus());
    EXPECT_TRUE(topo->devices().empty());
    EXPECT_TRUE(topo->pci_devices().empty());
    // No matrix in a synthetic topology: the ACPI defaults.
    EXPECT_FALSE(topo->has_os_numa_distances());
    EXPECT_EQ(kNumaDistanceLocal, topo->numa_distance(1, 1));
    EXPECT_EQ(kNumaDistanceRemote, topo->numa_distance(0, 1));
    EXPECT_EQ(kDistanceUnknown, topo->numa_distance(0, 7));
    EXPECT_EQ((std::vector<unsigned>{0, 1}), topo->numa_nodes_of(cpus_of({1, 2})));
    EXPECT_EQ((std::vector<unsigned>{1}), topo->numa_nodes_of(cpus_of({3, 99})));
}

TEST(Topology, SyntheticPackagesAndThreads) {
    Result<Topology> topo = Topology::from_synthetic("pack:2 numa:1 core:2 pu:2");
    ASSERT_TRUE(topo.ok());
    ASSERT_EQ(2u, topo->packages().size());
    EXPECT_EQ(2u, topo->packages()[0].num_cores);
    EXPECT_EQ("4-7", topo->packages()[1].cpus.to_string());
    EXPECT_EQ(4u, topo->num_cores());
    EXPECT_EQ(8u, topo->num_pus());
    EXPECT_EQ("0-7", topo->cpus().to_string());
}

TEST(Topology, InvalidDescriptionsFailWithOneLogLine) {
    test::LogCapture capture("warn");
    EXPECT_EQ(Status::invalid_param, Topology::from_synthetic("node:banana").status());
    EXPECT_EQ(1, capture.count("banana"));
    EXPECT_EQ(Status::invalid_param, Topology::from_xml("<topology").status());
    EXPECT_EQ(Status::invalid_param, Topology::from_xml("").status());
    EXPECT_EQ(2, capture.count("cannot load the XML topology"));
}

TEST(Topology, FallsBackToDegenerate) {
    test::LogCapture capture("warn");
    const Topology topo = Topology::load_or_degenerate({TopologyParams::From::xml, "<not-hwloc/>", ""});
    EXPECT_EQ(1, capture.count("cannot load the XML topology"));
    EXPECT_TRUE(topo.is_degenerate());
    const CpuSet online = CpuSet::parse(test::read_file("/sys/devices/system/cpu/online")).value();
    EXPECT_EQ(online, topo.cpus());
    ASSERT_EQ(1u, topo.numa_nodes().size());
    EXPECT_EQ(0u, topo.numa_nodes()[0].os_index);
    EXPECT_EQ(online, topo.numa_nodes()[0].cpus);
    EXPECT_GT(topo.numa_nodes()[0].memory_bytes, 0u);
    ASSERT_EQ(1u, topo.packages().size());
    EXPECT_EQ(online.count(), topo.num_cores());
    EXPECT_EQ(kNumaDistanceLocal, topo.numa_distance(0, 0));
    EXPECT_TRUE(topo.devices().empty());  // no sysfs root given
    // The calling thread lives on the single node, whatever its affinity.
    EXPECT_EQ(0u, topo.current_numa_node());
    EXPECT_TRUE(topo.current_cpus().is_subset_of(online));
}

TEST(Topology, XmlTwoNodesWithDevices) {
    const Topology topo = load_two_node();
    EXPECT_EQ("XML", topo.source());
    ASSERT_EQ(2u, topo.numa_nodes().size());
    EXPECT_EQ(1073741824u, topo.numa_nodes()[0].memory_bytes);
    EXPECT_EQ(2147483648u, topo.numa_nodes()[1].memory_bytes);
    EXPECT_TRUE(topo.has_os_numa_distances());
    EXPECT_EQ(21u, topo.numa_distance(0, 1));
    EXPECT_EQ(31u, topo.numa_distance(1, 0));

    ASSERT_EQ(3u, topo.pci_devices().size());
    const PciDevice* hca = topo.find_pci_device(PciAddress::parse("81:00.0").value()).value();
    EXPECT_EQ(0x0207, hca->class_id);
    EXPECT_EQ(0x15b3, hca->vendor_id);
    EXPECT_EQ(0x1017, hca->device_id);
    EXPECT_EQ("Mellanox Technologies", hca->vendor_name);
    EXPECT_EQ((std::vector<std::string>{"mlx5_0", "ib0"}), hca->os_devices);
    EXPECT_EQ((std::vector<unsigned>{1}), hca->numa_nodes);
    EXPECT_EQ("2-3", hca->cpus.to_string());

    const Device& mlx = device_named(topo, "mlx5_0");
    EXPECT_EQ(DeviceType::openfabrics, mlx.type);
    EXPECT_FALSE(mlx.is_virtual);
    EXPECT_EQ("0000:81:00.0", mlx.pci->to_string());
    EXPECT_EQ((std::vector<unsigned>{1}), mlx.numa_nodes);
    EXPECT_TRUE(mlx.sysfs_path.empty());
    EXPECT_EQ(DeviceType::network, device_named(topo, "ib0").type);
    EXPECT_EQ((std::vector<unsigned>{0}), device_named(topo, "eth1").numa_nodes);
    // Attached to the machine, not to a package: local to both nodes.
    EXPECT_EQ((std::vector<unsigned>{0, 1}), device_named(topo, "eth0").numa_nodes);

    // Lookup by bus id and by sysfs path give the first OS device on the function.
    EXPECT_EQ(&mlx, topo.find_device("0000:81:00.0").value());
    EXPECT_EQ(&mlx, topo.find_device("81:00.0").value());
    EXPECT_EQ(&mlx, topo.find_device("/sys/bus/pci/devices/0000:81:00.0").value());
    EXPECT_EQ(
        &mlx,
        topo.find_device("/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/infiniband/mlx5_0").value());
}

TEST(Topology, DistanceIsZeroOnTheDevicesOwnNode) {
    const Topology topo = load_two_node();
    for (const Device& device : topo.devices()) {
        for (unsigned node : device.numa_nodes) {
            EXPECT_EQ(kDistanceLocal, topo.distance(device, node).value()) << device.name << " node " << node;
            EXPECT_EQ(kDistanceLocal, topo.distance(device, topo.find_numa_node(node)->cpus).value());
        }
    }
}

TEST(Topology, DistanceFollowsTheSlit) {
    const Topology topo = load_two_node();
    const Device& mlx = device_named(topo, "mlx5_0");
    const Device& eth1 = device_named(topo, "eth1");
    // From node 0 to node 1 is 21 - 10; from node 1 to node 0 is 31 - 10.
    EXPECT_EQ(11u, topo.distance(mlx, 0).value());
    EXPECT_EQ(21u, topo.distance(eth1, 1).value());
    EXPECT_EQ(11u, topo.distance(mlx, cpus_of({0})).value());
    // CPUs on both nodes: the closest node counts.
    EXPECT_EQ(kDistanceLocal, topo.distance(mlx, cpus_of({1, 2})).value());
    EXPECT_EQ(kDistanceLocal, topo.distance(device_named(topo, "eth0"), 0).value());

    test::LogCapture capture("diag");
    EXPECT_EQ(Status::no_element, topo.distance(mlx, 5).status());
    EXPECT_EQ(Status::invalid_param, topo.distance(mlx, cpus_of({99})).status());
    EXPECT_EQ(Status::invalid_param, topo.distance(mlx, CpuSet()).status());
    EXPECT_EQ(1, capture.count("no NUMA node 5"));
}

TEST(Topology, DistanceFallsBackWithoutMatrix) {
    Result<Topology> topo = Topology::from_xml(two_node_xml_without_distances());
    ASSERT_TRUE(topo.ok());
    EXPECT_FALSE(topo->has_os_numa_distances());
    const Distance remote = kNumaDistanceRemote - kNumaDistanceLocal;
    EXPECT_EQ(remote, topo->distance(device_named(*topo, "mlx5_0"), 0).value());
    EXPECT_EQ(remote, topo->distance(device_named(*topo, "eth1"), 1).value());
    EXPECT_EQ(kDistanceLocal, topo->distance(device_named(*topo, "eth1"), 0).value());
}

TEST(Topology, MemoryOnlyNodeSharesItsPackagesCpus) {
    Result<Topology> topo = Topology::from_xml(three_node_xml());
    ASSERT_TRUE(topo.ok());
    ASSERT_EQ(3u, topo->numa_nodes().size());
    const NumaNode* hbm = topo->find_numa_node(2);
    ASSERT_NE(nullptr, hbm);
    EXPECT_EQ(536870912u, hbm->memory_bytes);
    EXPECT_EQ("0-1", hbm->cpus.to_string());
    EXPECT_EQ((std::vector<unsigned>{0, 2}), topo->numa_nodes_of(cpus_of({1})));
    EXPECT_EQ(15u, topo->numa_distance(0, 2));
    EXPECT_EQ(25u, topo->numa_distance(2, 1));

    const Device& mlx = device_named(*topo, "mlx5_0");
    const Device& eth1 = device_named(*topo, "eth1");
    EXPECT_EQ((std::vector<unsigned>{0, 2}), eth1.numa_nodes);
    // From the node itself: its own row of the matrix.
    EXPECT_EQ(15u, topo->distance(mlx, 2).value());
    EXPECT_EQ(kDistanceLocal, topo->distance(eth1, 2).value());
    // From CPUs 0-1 (nodes 0 and 2): the closer of 21 - 10 and 25 - 10.
    EXPECT_EQ(11u, topo->distance(mlx, cpus_of({0})).value());
}

TEST(Topology, RankDevicesByDistanceStably) {
    const Topology topo = load_two_node();
    const std::vector<std::string> names = {"mlx5_0", "eth1", "nope0", "ib0", "eth0"};

    const auto from_node0 = topo.rank_devices(names, topo.find_numa_node(0)->cpus);
    EXPECT_EQ((std::vector<std::string>{"eth1", "eth0", "mlx5_0", "ib0", "nope0"}), names_of(from_node0));
    EXPECT_EQ(0u, from_node0[0].distance);
    EXPECT_EQ(11u, from_node0[2].distance);
    EXPECT_EQ(kDistanceUnknown, from_node0[4].distance);
    EXPECT_EQ(nullptr, from_node0[4].device);
    EXPECT_EQ(&device_named(topo, "eth1"), from_node0[0].device);

    const auto from_node1 = topo.rank_devices(names, topo.find_numa_node(1)->cpus);
    EXPECT_EQ((std::vector<std::string>{"mlx5_0", "ib0", "eth0", "eth1", "nope0"}), names_of(from_node1));
    EXPECT_EQ(21u, from_node1[3].distance);

    // Ranking again gives the same order; CPUs outside the machine mean "anywhere".
    EXPECT_EQ(names_of(from_node0), names_of(topo.rank_devices(names, topo.find_numa_node(0)->cpus)));
    const auto from_nowhere = topo.rank_devices(names, cpus_of({99}));
    EXPECT_EQ((std::vector<std::string>{"mlx5_0", "eth1", "ib0", "eth0", "nope0"}), names_of(from_nowhere));
    EXPECT_TRUE(topo.rank_devices({}, topo.cpus()).empty());
}

// ---------------------------------------------------------------------------------
// Software devices found in sysfs
// ---------------------------------------------------------------------------------

TEST(Topology, SysfsDevicesAreAdded) {
    TempDir sysfs;
    populate_fake_sysfs(sysfs);
    const Topology topo = load_two_node(sysfs.path());

    const Device& rxe = device_named(topo, "rxe0");
    EXPECT_EQ(DeviceType::openfabrics, rxe.type);
    EXPECT_TRUE(rxe.is_virtual);
    EXPECT_FALSE(rxe.pci.has_value());
    EXPECT_EQ(topo.cpus(), rxe.cpus);
    EXPECT_EQ((std::vector<unsigned>{0, 1}), rxe.numa_nodes);
    EXPECT_EQ(realpath_of(sysfs.path() + "/devices/virtual/infiniband/rxe0"), rxe.sysfs_path);
    EXPECT_EQ(&rxe, topo.find_device(sysfs.path() + "/class/infiniband/rxe0").value());
    EXPECT_TRUE(device_named(topo, "veth0").is_virtual);

    // A PCI NIC hwloc did not report: PCI data and locality from sysfs.
    const Device& nic = device_named(topo, "enp0s31f6");
    EXPECT_FALSE(nic.is_virtual);
    EXPECT_EQ("0000:00:1f.6", nic.pci->to_string());
    EXPECT_EQ((std::vector<unsigned>{1}), nic.numa_nodes);
    EXPECT_EQ("2-3", nic.cpus.to_string());
    const PciDevice* pci = topo.find_pci_device(*nic.pci).value();
    EXPECT_EQ(0x0200, pci->class_id);
    EXPECT_EQ(0x8086, pci->vendor_id);
    EXPECT_EQ(0x15bb, pci->device_id);
    EXPECT_EQ((std::vector<std::string>{"enp0s31f6"}), pci->os_devices);

    // Hardware without a PCI function: real, locality unknown.
    const Device& usb = device_named(topo, "usb0");
    EXPECT_FALSE(usb.is_virtual);
    EXPECT_FALSE(usb.pci.has_value());
    EXPECT_EQ((std::vector<unsigned>{0, 1}), usb.numa_nodes);

    // ib0 is hwloc's: not added twice, but its sysfs path is resolved.
    EXPECT_EQ(1, std::count_if(topo.devices().begin(), topo.devices().end(),
                               [](const Device& d) { return d.name == "ib0"; }));
    const Device& ib0 = device_named(topo, "ib0");
    EXPECT_EQ(realpath_of(sysfs.path() + "/class/net/ib0"), ib0.sysfs_path);
    EXPECT_EQ(&ib0, topo.find_device(sysfs.path() + "/class/net/ib0").value());

    // Software devices come after hwloc's, sorted by name.
    std::vector<std::string> order;
    for (const Device& device : topo.devices()) order.push_back(device.name);
    EXPECT_EQ(
        (std::vector<std::string>{"eth1", "mlx5_0", "ib0", "eth0", "enp0s31f6", "rxe0", "usb0", "veth0"}),
        order);
}

TEST(Topology, VirtualDevicesRankFirstFromAnyNode) {
    TempDir sysfs;
    populate_fake_sysfs(sysfs);
    Result<Topology> topo =
        Topology::load({TopologyParams::From::synthetic, "node:2 core:2 pu:1", sysfs.path()});
    ASSERT_TRUE(topo.ok());
    const std::vector<std::string> names = {"enp0s31f6", "rxe0", "usb0"};
    // enp0s31f6 is on node 1; no matrix, so node 0 sees it at the default remote distance.
    const auto from_node0 = topo->rank_devices(names, topo->find_numa_node(0)->cpus);
    EXPECT_EQ((std::vector<std::string>{"rxe0", "usb0", "enp0s31f6"}), names_of(from_node0));
    EXPECT_EQ(kNumaDistanceRemote - kNumaDistanceLocal, from_node0[2].distance);
    const auto from_node1 = topo->rank_devices(names, topo->find_numa_node(1)->cpus);
    EXPECT_EQ(names, names_of(from_node1));
    for (const auto& entry : from_node1) EXPECT_EQ(kDistanceLocal, entry.distance) << entry.name;
}

TEST(Topology, DegenerateKeepsSysfsDevices) {
    TempDir sysfs;
    populate_fake_sysfs(sysfs);
    const Topology topo = Topology::degenerate(sysfs.path());
    EXPECT_TRUE(topo.is_degenerate());
    EXPECT_TRUE(device_named(topo, "rxe0").is_virtual);
    const Device& nic = device_named(topo, "enp0s31f6");
    // numa_node says 1, which a one-node topology does not have: all nodes.
    EXPECT_EQ((std::vector<unsigned>{0}), nic.numa_nodes);
    EXPECT_EQ("0000:00:1f.6", nic.pci->to_string());
    EXPECT_EQ(kDistanceLocal, topo.distance(nic, 0).value());
    EXPECT_EQ(5u, topo.devices().size());
}

TEST(Topology, DeviceTypeNames) {
    EXPECT_EQ("network", to_string(DeviceType::network));
    EXPECT_EQ("openfabrics", to_string(DeviceType::openfabrics));
    EXPECT_EQ("block", to_string(DeviceType::block));
    EXPECT_EQ("other", to_string(DeviceType::other));
}

}  // namespace
}  // namespace loom::ucs
