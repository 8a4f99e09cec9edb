#include "common/test_helpers.h"

#include "ucs/memory/aligned.h"
#include "ucs/memory/numa.h"
#include "ucs/memory/pages.h"

#include <gtest/gtest.h>

#include <sched.h>
#include <unistd.h>
#include <cstring>

namespace loom::ucs {
namespace {

/** Pins the calling thread to the CPU it runs on, so its node cannot change mid-test; restores on exit. */
class PinToCurrentCpu {
public:
    PinToCurrentCpu() {
        pinned_ = ::sched_getaffinity(0, sizeof(saved_), &saved_) == 0;
        int cpu = ::sched_getcpu();
        if (pinned_ && cpu >= 0) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            pinned_ = ::sched_setaffinity(0, sizeof(one), &one) == 0;
        }
    }
    ~PinToCurrentCpu() {
        if (pinned_) (void)::sched_setaffinity(0, sizeof(saved_), &saved_);
    }

private:
    cpu_set_t saved_;
    bool pinned_ = false;
};

/** Runs the NUMA API as on a machine without NUMA support for the lifetime of the object. */
class WithoutNuma {
public:
    WithoutNuma() { numa::force_unavailable_for_testing(true); }
    ~WithoutNuma() { numa::force_unavailable_for_testing(false); }
};

/** Touches every page, then checks the data and, with NUMA support, the node of each page. */
void expect_usable_on_node(void* ptr, std::size_t size, int node) {
    auto* bytes = static_cast<unsigned char*>(ptr);
    EXPECT_EQ(0, bytes[0]) << "fresh allocations are zeroed";
    for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<unsigned char>(i ^ 0x5a);
    for (std::size_t i = 0; i < size; ++i) ASSERT_EQ(static_cast<unsigned char>(i ^ 0x5a), bytes[i]) << i;
    for (std::size_t off = 0; off < size; off += page_size()) {
        auto where = numa::node_of_address(bytes + off);
        ASSERT_TRUE(where.ok());
        EXPECT_EQ(node, *where) << "page at offset " << off;
    }
}

TEST(Numa, Topology) {
    EXPECT_GE(numa::num_nodes(), 1);
    EXPECT_GE(numa::max_node(), numa::num_nodes() - 1);
    int node = numa::current_node();
    EXPECT_GE(node, 0);
    EXPECT_LE(node, numa::max_node());

    auto cpu0 = numa::node_of_cpu(0);
    ASSERT_TRUE(cpu0.ok());
    EXPECT_GE(*cpu0, 0);
    EXPECT_LE(*cpu0, numa::max_node());

    PinToCurrentCpu pin;
    auto mine = numa::node_of_cpu(::sched_getcpu());
    ASSERT_TRUE(mine.ok());
    EXPECT_EQ(*mine, numa::current_node()) << "the current node is the node of the current CPU";
}

TEST(Numa, BadCpuIsInvalidParam) {
    test::LogCapture capture("error");
    EXPECT_EQ(Status::invalid_param, numa::node_of_cpu(-1).status());
    EXPECT_EQ(Status::invalid_param, numa::node_of_cpu(1 << 20).status());
    EXPECT_EQ(1, capture.count("no node for cpu 1048576"));
}

TEST(Numa, AllocateOnNodeZero) {
    const std::size_t size = 3 * page_size() + 100;
    void* ptr = nullptr;
    ASSERT_EQ(Status::ok, numa::allocate(size, 0, ptr));
    ASSERT_NE(nullptr, ptr);
    EXPECT_TRUE(is_aligned(ptr, page_size()));
    expect_usable_on_node(ptr, size, 0);
    numa::release(ptr, size);
    numa::release(nullptr, size);  // ignored
}

TEST(Numa, AllocateOnCurrentNode) {
    PinToCurrentCpu pin;
    const int node = numa::current_node();
    const std::size_t size = 2 * page_size();
    void* ptr = nullptr;
    ASSERT_EQ(Status::ok, numa::allocate_local(size, ptr));
    expect_usable_on_node(ptr, size, node);
    numa::release(ptr, size);

    auto owned = numa::make_local(size);
    ASSERT_TRUE(owned.ok());
    EXPECT_EQ(size, owned->get_deleter().size);
    expect_usable_on_node(owned->get(), size, node);
}

TEST(Numa, EveryNodeWithMemory) {
    // On a multi-node machine this checks the binding for real; with one node it repeats node 0.
    for (int node = 0; node <= numa::max_node(); ++node) {
        test::LogCapture capture("error");  // nodes without memory are rejected with a log line
        auto owned = numa::make_on_node(page_size(), node);
        if (!owned.ok()) {
            EXPECT_EQ(Status::invalid_param, owned.status()) << "node " << node;
            continue;
        }
        expect_usable_on_node(owned->get(), page_size(), node);
    }
}

TEST(Numa, BadRequestsAreInvalidParam) {
    test::LogCapture capture("error");
    void* ptr = reinterpret_cast<void*>(0x1);
    EXPECT_EQ(Status::invalid_param, numa::allocate(page_size(), -1, ptr));
    EXPECT_EQ(nullptr, ptr);
    EXPECT_EQ(Status::invalid_param, numa::allocate(page_size(), numa::max_node() + 1, ptr));
    EXPECT_EQ(Status::invalid_param, numa::allocate(page_size(), 1 << 20, ptr));
    EXPECT_EQ(Status::invalid_param, numa::allocate(0, 0, ptr));
    EXPECT_EQ(nullptr, ptr);
    EXPECT_EQ(Status::invalid_param, numa::make_on_node(0, 0).status());
    EXPECT_GE(capture.count("node -1"), 1);
}

TEST(Numa, UnmappedAddressHasNoNode) {
    if (!numa::available()) GTEST_SKIP() << "NUMA is not available: node_of_address() answers 0 for anything";
    PageMapping mapping;
    ASSERT_EQ(Status::ok, map_pages(page_size(), HugePagePolicy::never, mapping));
    void* gone = mapping.address;
    unmap_pages(mapping);
    test::LogCapture capture("error");
    EXPECT_EQ(Status::invalid_param, numa::node_of_address(gone).status());
}

TEST(Numa, FallbackWithoutNumaSupport) {
    WithoutNuma off;
    EXPECT_FALSE(numa::available());
    EXPECT_EQ(1, numa::num_nodes());
    EXPECT_EQ(0, numa::max_node());
    EXPECT_EQ(0, numa::current_node());
    auto cpu0 = numa::node_of_cpu(0);
    ASSERT_TRUE(cpu0.ok());
    EXPECT_EQ(0, *cpu0);

    const std::size_t size = page_size() * 2;
    void* ptr = nullptr;
    ASSERT_EQ(Status::ok, numa::allocate(size, 0, ptr));
    expect_usable_on_node(ptr, size, 0);
    numa::release(ptr, size);

    auto local = numa::make_local(size);
    ASSERT_TRUE(local.ok());
    expect_usable_on_node(local->get(), size, 0);

    test::LogCapture capture("error");
    EXPECT_EQ(Status::invalid_param, numa::allocate(size, 1, ptr)) << "only node 0 exists without NUMA";
    EXPECT_EQ(1, capture.count("NUMA is not available"));
    EXPECT_EQ(Status::invalid_param, numa::node_of_cpu(1 << 20).status());
}

}  // namespace
}  // namespace loom::ucs
