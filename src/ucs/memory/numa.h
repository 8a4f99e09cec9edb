/**
 * NUMA queries and node-bound allocation (libnuma).
 *
 *     auto buf = numa::make_local(1 << 20);       // bound to the calling thread's node
 *     if (!buf) return buf.status();
 *     std::memset(buf->get(), 0, 1 << 20);        // numa::Ptr frees on scope exit
 *
 * On a machine or container without NUMA support (numa_available() fails) every
 * query answers as for one node, node 0, and allocations are plain anonymous
 * mappings, so callers need no special case.
 *
 * Allocations are whole pages (mmap) bound to their node with a strict MPOL_BIND
 * policy: they are meant for large, long-lived buffers (rings, pools, bounce
 * buffers), not for small objects.
 */
#pragma once

#include "ucs/type/result.h"
#include "ucs/type/status.h"

#include <cstddef>
#include <memory>

namespace loom::ucs::numa {

/** True when the kernel and libnuma support NUMA policies here. */
bool available() noexcept;

/** Number of NUMA nodes that have memory (1 without NUMA support). */
int num_nodes() noexcept;

/** Highest node number (node numbers may be sparse); 0 without NUMA support. */
int max_node() noexcept;

/** Node of @p cpu; invalid_param for a negative or unknown CPU number. */
Result<int> node_of_cpu(int cpu);

/**
 * Node of the CPU the calling thread runs on now (the thread may migrate right
 * after, unless it is pinned); 0 without NUMA support or when the kernel cannot say.
 */
int current_node() noexcept;

/**
 * The node holding the page that contains @p address, which must be mapped (the
 * kernel faults an untouched page in as for a read). invalid_param when the kernel
 * cannot tell, e.g. for an unmapped address; 0 without NUMA support.
 */
Result<int> node_of_address(const void* address);

/**
 * Allocates @p size bytes (rounded up to pages, zeroed) bound to @p node. Returns
 * invalid_param for a zero size or a node that does not exist or has no memory,
 * no_memory when mapping fails; @p out is null on error. Release with release().
 */
[[nodiscard]] Status allocate(std::size_t size, int node, void*& out) noexcept;

/** allocate() on current_node(), the node of the calling thread. */
[[nodiscard]] Status allocate_local(std::size_t size, void*& out) noexcept;

/** Releases @p size bytes at @p ptr from allocate(); null is ignored. */
void release(void* ptr, std::size_t size) noexcept;

/** unique_ptr deleter for allocate(): remembers the size release() needs. */
struct Delete {
    std::size_t size = 0;
    void operator()(void* ptr) const noexcept { release(ptr, size); }
};

/** Owner of a node-bound allocation. */
using Ptr = std::unique_ptr<void, Delete>;

/** allocate() returning the owner; the error statuses are the same. */
Result<Ptr> make_on_node(std::size_t size, int node);

/** allocate_local() returning the owner; the error statuses are the same. */
Result<Ptr> make_local(std::size_t size);

/**
 * For tests: makes available() report false, and every function behave as without
 * NUMA support, while @p disable is true, so the fallback is exercised on NUMA
 * machines too. Must not race with other calls of this API.
 */
void force_unavailable_for_testing(bool disable) noexcept;

}  // namespace loom::ucs::numa
