#include "ucs/memory/pages.h"

#include "ucs/memory/aligned.h"
#include "ucs/memory/memory_log.h"

#include <sys/mman.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace loom::ucs {

namespace {

std::size_t read_huge_page_size() noexcept {
    std::FILE* file = std::fopen("/proc/meminfo", "r");
    if (file == nullptr) return 0;
    std::size_t result = 0;
    char line[256];
    while (std::fgets(line, sizeof(line), file) != nullptr) {
        unsigned long kib = 0;
        if (std::sscanf(line, "Hugepagesize: %lu kB", &kib) == 1) {
            result = static_cast<std::size_t>(kib) * 1024;
            break;
        }
    }
    std::fclose(file);
    return result;
}

void* map_anonymous(std::size_t length, int extra_flags) noexcept {
    void* ptr =
        ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra_flags, -1, 0);
    return ptr == MAP_FAILED ? nullptr : ptr;
}

}  // namespace

std::size_t page_size() noexcept {
    static const std::size_t size = [] {
        long value = ::sysconf(_SC_PAGESIZE);
        return value > 0 ? static_cast<std::size_t>(value) : std::size_t{4096};
    }();
    return size;
}

std::size_t huge_page_size() noexcept {
    static const std::size_t size = read_huge_page_size();
    return size;
}

const char* to_string(HugePagePolicy policy) noexcept {
    switch (policy) {
        case HugePagePolicy::never:
            return "never";
        case HugePagePolicy::prefer:
            return "prefer";
        case HugePagePolicy::require:
            return "require";
    }
    return "unknown";
}

Status map_pages(std::size_t length, HugePagePolicy policy, PageMapping& out) noexcept {
    out = PageMapping{};
    if (length == 0) {
        LOOM_LOG_ERROR("page mapping: length 0");
        return Status::invalid_param;
    }

    if (policy != HugePagePolicy::never) {
        std::size_t huge = huge_page_size();
        if (huge == 0) {
            LOOM_LOG_DEBUG("page mapping of {} bytes: the kernel reports no huge page size", length);
        } else if (length > SIZE_MAX - huge) {
            LOOM_LOG_ERROR("page mapping: length {} too large", length);
            return Status::no_memory;
        } else {
            std::size_t huge_length = align_up(length, huge);
            if (void* ptr = map_anonymous(huge_length, MAP_HUGETLB); ptr != nullptr) {
                out = PageMapping{ptr, huge_length, true};
                return Status::ok;
            }
            LOOM_LOG_DEBUG("huge page mapping of {} bytes failed: {}", huge_length, std::strerror(errno));
        }
        if (policy == HugePagePolicy::require) {
            LOOM_LOG_ERROR("page mapping of {} bytes: huge pages required but unavailable", length);
            return Status::no_memory;
        }
    }

    if (length > SIZE_MAX - page_size()) {
        LOOM_LOG_ERROR("page mapping: length {} too large", length);
        return Status::no_memory;
    }
    std::size_t normal_length = align_up(length, page_size());
    void* ptr = map_anonymous(normal_length, 0);
    if (ptr == nullptr) {
        LOOM_LOG_ERROR("page mapping of {} bytes failed: {}", normal_length, std::strerror(errno));
        return Status::no_memory;
    }
    out = PageMapping{ptr, normal_length, false};
    return Status::ok;
}

void unmap_pages(PageMapping& mapping) noexcept {
    if (mapping.address == nullptr) return;
    if (::munmap(mapping.address, mapping.length) != 0) {
        LOOM_LOG_WARN("munmap({}, {}) failed: {}", mapping.address, mapping.length, std::strerror(errno));
    }
    mapping = PageMapping{};
}

}  // namespace loom::ucs
