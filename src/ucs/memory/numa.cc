#include "ucs/memory/numa.h"

#include "ucs/memory/aligned.h"
#include "ucs/memory/memory_log.h"
#include "ucs/memory/pages.h"

#include <numa.h>
#include <numaif.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>

namespace loom::ucs::numa {

namespace {

std::atomic<bool> g_forced_off{false};

/** Node numbers mbind() can be given; Linux's MAX_NUMNODES is at most 1024. */
constexpr int kMaxNodes = 1024;
constexpr int kMaskBits = static_cast<int>(CHAR_BIT * sizeof(unsigned long));

Status check_node(int node) noexcept {
    if (!available()) {
        // Without NUMA support the whole machine is node 0.
        if (node == 0) return Status::ok;
        LOOM_LOG_ERROR("numa: node {} requested but NUMA is not available (only node 0 exists)", node);
        return Status::invalid_param;
    }
    if (node < 0 || node > ::numa_max_node() || node >= kMaxNodes ||
        ::numa_bitmask_isbitset(::numa_all_nodes_ptr, static_cast<unsigned>(node)) == 0) {
        LOOM_LOG_ERROR("numa: node {} does not exist or has no memory this process may use (max node {})",
                       node, ::numa_max_node());
        return Status::invalid_param;
    }
    return Status::ok;
}

}  // namespace

bool available() noexcept {
    static const bool supported = ::numa_available() >= 0;
    return supported && !g_forced_off.load(std::memory_order_relaxed);
}

int num_nodes() noexcept {
    if (!available()) return 1;
    int n = ::numa_num_configured_nodes();
    return n > 0 ? n : 1;
}

int max_node() noexcept {
    return available() ? ::numa_max_node() : 0;
}

Result<int> node_of_cpu(int cpu) {
    if (cpu >= 0 && available()) {
        int node = ::numa_node_of_cpu(cpu);
        if (node >= 0) return node;
    } else if (cpu >= 0) {
        long ncpus = ::sysconf(_SC_NPROCESSORS_CONF);
        if (ncpus <= 0 || cpu < ncpus) return 0;
    }
    LOOM_LOG_ERROR("numa: no node for cpu {}", cpu);
    return Status::invalid_param;
}

int current_node() noexcept {
    if (!available()) return 0;
    unsigned cpu = 0;
    unsigned node = 0;
    if (::getcpu(&cpu, &node) == 0) return static_cast<int>(node);
    int c = ::sched_getcpu();
    int n = c >= 0 ? ::numa_node_of_cpu(c) : -1;
    return n >= 0 ? n : 0;
}

Result<int> node_of_address(const void* address) {
    if (!available()) return 0;
    int node = -1;
    if (::get_mempolicy(&node, nullptr, 0, const_cast<void*>(address), MPOL_F_NODE | MPOL_F_ADDR) != 0) {
        LOOM_LOG_ERROR("numa: cannot get the node of address {}: {}", address, std::strerror(errno));
        return Status::invalid_param;
    }
    return node;
}

Status allocate(std::size_t size, int node, void*& out) noexcept {
    out = nullptr;
    if (size == 0) {
        LOOM_LOG_ERROR("numa: allocation of size 0 on node {}", node);
        return Status::invalid_param;
    }
    Status status = check_node(node);
    if (status != Status::ok) return status;

    PageMapping mapping;
    status = map_pages(size, HugePagePolicy::never, mapping);
    if (status != Status::ok) return status;

    if (available()) {
        // Bind before the first touch, so every page is faulted in on the node.
        unsigned long mask[kMaxNodes / kMaskBits] = {};
        mask[node / kMaskBits] = 1UL << (node % kMaskBits);
        // The kernel reads maxnode - 1 bits, hence the + 1.
        if (::mbind(mapping.address, mapping.length, MPOL_BIND, mask, kMaxNodes + 1, 0) != 0) {
            int err = errno;
            LOOM_LOG_ERROR("numa: cannot bind {} bytes to node {}: {}", mapping.length, node,
                           std::strerror(err));
            unmap_pages(mapping);
            return err == ENOMEM ? Status::no_memory : Status::invalid_param;
        }
    }
    LOOM_LOG_DEBUG("numa: allocated {} bytes at {} on node {}", mapping.length, mapping.address, node);
    out = mapping.address;
    return Status::ok;
}

Status allocate_local(std::size_t size, void*& out) noexcept {
    return allocate(size, current_node(), out);
}

void release(void* ptr, std::size_t size) noexcept {
    if (ptr == nullptr) return;
    PageMapping mapping{ptr, align_up(size, page_size()), false};
    unmap_pages(mapping);
}

Result<Ptr> make_on_node(std::size_t size, int node) {
    void* ptr = nullptr;
    Status status = allocate(size, node, ptr);
    if (status != Status::ok) return status;
    return Ptr(ptr, Delete{size});
}

Result<Ptr> make_local(std::size_t size) {
    return make_on_node(size, current_node());
}

void force_unavailable_for_testing(bool disable) noexcept {
    g_forced_off.store(disable, std::memory_order_relaxed);
}

}  // namespace loom::ucs::numa
