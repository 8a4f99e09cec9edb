/**
 * CpuSet: a set of CPU (or NUMA node) indexes, printed and parsed in the kernel's
 * list format ("0-3,8"). Used by the topology for node, device and thread locality;
 * not a hot-path type.
 */
#pragma once

#include "ucs/type/result.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom::ucs {

class CpuSet {
public:
    /** Largest index + 1 a set holds; Linux supports at most 8192 CPUs. */
    static constexpr unsigned kMaxCpus = 1u << 16;

    /** An empty set. */
    CpuSet() = default;

    /** The CPUs @p first .. @p last inclusive; empty when first > last. */
    static CpuSet range(unsigned first, unsigned last);

    /**
     * Parses a list such as "0-3,8" (surrounding white space, as in sysfs files, is
     * ignored; "" is the empty set). Returns Status::invalid_param for anything else,
     * or an index of kMaxCpus or more, with one log line naming the text.
     */
    static Result<CpuSet> parse(std::string_view list);

    /** Adds @p cpu; indexes of kMaxCpus or more are a caller bug and are ignored. */
    void add(unsigned cpu);

    /** Removes @p cpu if present. */
    void remove(unsigned cpu);

    /** True when @p cpu is in the set. */
    bool contains(unsigned cpu) const noexcept;

    /** True when the set has no CPU. */
    bool empty() const noexcept { return words_.empty(); }

    /** Number of CPUs in the set. */
    unsigned count() const noexcept;

    /** Lowest CPU in the set, nullopt when empty. */
    std::optional<unsigned> first() const noexcept;

    /** Every CPU in increasing order. */
    std::vector<unsigned> to_vector() const;

    /** True when the two sets share a CPU. */
    bool intersects(const CpuSet& other) const noexcept;

    /** True when every CPU of this set is in @p other (the empty set is a subset of all). */
    bool is_subset_of(const CpuSet& other) const noexcept;

    /** CPUs in both sets. */
    CpuSet operator&(const CpuSet& other) const;

    /** CPUs in either set. */
    CpuSet operator|(const CpuSet& other) const;

    CpuSet& operator&=(const CpuSet& other);
    CpuSet& operator|=(const CpuSet& other);

    bool operator==(const CpuSet& other) const noexcept = default;

    /** The kernel list format with ranges collapsed: "0-3,8"; "" for the empty set. */
    std::string to_string() const;

private:
    void trim() noexcept;

    // Bit i of word i / 64 is CPU i; no trailing zero words, so == compares contents.
    std::vector<std::uint64_t> words_;
};

}  // namespace loom::ucs
