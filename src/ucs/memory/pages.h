/**
 * Page sizes and anonymous page mappings, with optional huge pages.
 *
 * Huge pages (MAP_HUGETLB) must be reserved by the administrator
 * (/proc/sys/vm/nr_hugepages); most machines have none, so callers normally ask for
 * HugePagePolicy::prefer and look at PageMapping::huge to learn what they got.
 */
#pragma once

#include "ucs/type/status.h"

#include <cstddef>
#include <cstdint>

namespace loom::ucs {

/** Base page size of the system (sysconf(_SC_PAGESIZE)). */
std::size_t page_size() noexcept;

/** Default huge page size (Hugepagesize in /proc/meminfo), or 0 when the kernel has none. */
std::size_t huge_page_size() noexcept;

/** Whether a mapping is backed by huge pages. */
enum class HugePagePolicy : std::uint8_t {
    never,    ///< normal pages only
    prefer,   ///< huge pages when available, otherwise normal pages
    require,  ///< huge pages or failure
};

/** Name of a policy ("never", "prefer", "require"). */
const char* to_string(HugePagePolicy policy) noexcept;

/** An anonymous private read-write mapping. */
struct PageMapping {
    void* address = nullptr;
    std::size_t length = 0;  ///< mapped bytes: the request rounded up to the page size used
    bool huge = false;       ///< backed by huge pages of huge_page_size() bytes
};

/**
 * Maps at least @p length bytes of zeroed memory following @p policy, and describes
 * the result in @p out (page aligned; huge-page aligned when huge). Returns
 * invalid_param for a zero length, no_memory when no mapping could be made (with
 * `require`: when huge pages are unavailable); @p out is empty on error.
 */
[[nodiscard]] Status map_pages(std::size_t length, HugePagePolicy policy, PageMapping& out) noexcept;

/** Unmaps a mapping made by map_pages() and empties @p mapping; an empty mapping is ignored. */
void unmap_pages(PageMapping& mapping) noexcept;

}  // namespace loom::ucs
