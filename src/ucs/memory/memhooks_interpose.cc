/*
 * The interposed functions of the memory events (LOOM_MEM_EVENTS=hooks).
 *
 * libloom-ucs defines munmap, mremap, madvise, mmap, mmap64, shmat, shmdt, brk, sbrk,
 * free, realloc, reallocarray and malloc_trim. The dynamic linker resolves every call
 * an executable or a library makes through its symbol table to the first definition
 * in the global search order, and libloom-ucs comes before libc there whenever it is
 * linked into the program (or preloaded). Each definition here reports the range the
 * call may release, before the call when the range is known in advance, and then
 * calls the next definition, found with dlsym(RTLD_NEXT) on first use. Under
 * AddressSanitizer, whose runtime comes first and defines mmap, free and realloc
 * itself, the sanitizer's mmap forwards to this one (it looks the real one up with
 * RTLD_NEXT too), and its allocator reports freed blocks through the free hook
 * installed by the probe.
 *
 * glibc's malloc. free() and realloc() release memory with calls internal to libc
 * (munmap_chunk, systrim, shrink_heap), which never go through the symbol table, so
 * the munmap hook alone misses the classic case: a large block, which glibc maps with
 * mmap, freed and malloc'ed again at the same address with new pages. When the probe
 * found that the process's malloc and the free() this file forwards to are glibc's,
 * free() and realloc() read the header glibc keeps in front of every block: the size
 * word at ptr - 8, whose bit 1 (IS_MMAPPED) marks a block mapped on its own and bit 2
 * (NON_MAIN_ARENA) a block of a thread's arena; for a mapped block the word at
 * ptr - 16 is the offset of the block from the start of its mapping. This layout has
 * not changed since glibc 2.3 and glibc's own free() checks the same bits. From it:
 *  - a mapped block: its whole mapping is reported, before the call;
 *  - a block of the main arena: its heap can only shrink from the top, through brk,
 *    so the break (glibc's exported __curbrk) is read before and after the call and
 *    a decrease is reported;
 *  - a block of a thread's arena: such heaps shrink with an internal madvise or
 *    munmap at a place Loom cannot compute cheaply, so the block itself is reported
 *    before the call. Every byte of such a heap that can be released was freed by
 *    some call that reported it, and a page still holding live bytes is never
 *    released, so no region survives on released pages; the price is that a
 *    registration of a block freed in a thread's arena is not reused when malloc
 *    returns the same block again.
 * malloc_trim() releases free pages anywhere in any arena, so it reports the whole
 * address space. Other allocators (jemalloc, tcmalloc) release memory by calling
 * munmap or madvise through the symbol table, which the other hooks see.
 *
 * Recursion and early calls. These functions run before libloom-ucs's constructors
 * and after its destructors, from any thread, so they use only constant-initialized
 * atomics. dlsym() may allocate (and free) on its error paths; a thread that re-enters
 * a hook while resolving one gets the fallback: the raw system call for the kernel
 * wrappers, glibc's exported __sbrk for sbrk, and for free() a leak of that one
 * block (safer than freeing it with a free() that may not be the right allocator's).
 */
#include "ucs/memory/memhooks_internal.h"

#include "ucs/sys/compiler.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#if defined(__linux__) && defined(__GLIBC__)
#define LOOM_MEMHOOKS_INTERPOSE 1
#endif

#ifdef LOOM_MEMHOOKS_INTERPOSE

// glibc exports the current program break and its own sbrk under these names.
extern "C" void* __curbrk;                   // NOLINT: glibc's name
extern "C" void* __sbrk(intptr_t increment);  // NOLINT: glibc's name

#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24  // Linux 5.18: like MADV_DONTNEED, also for locked pages
#endif

namespace loom::ucs {
namespace {

using MmapFn = void* (*)(void*, std::size_t, int, int, int, off_t);
using MunmapFn = int (*)(void*, std::size_t);
using MremapFn = void* (*)(void*, std::size_t, std::size_t, int, ...);
using MadviseFn = int (*)(void*, std::size_t, int);
using ShmatFn = void* (*)(int, const void*, int);
using ShmdtFn = int (*)(const void*);
using BrkFn = int (*)(void*);
using SbrkFn = void* (*)(intptr_t);
using MallocFn = void* (*)(std::size_t);
using FreeFn = void (*)(void*);
using ReallocFn = void* (*)(void*, std::size_t);
using ReallocarrayFn = void* (*)(void*, std::size_t, std::size_t);
using MallocTrimFn = int (*)(std::size_t);
using SanitizerInstallFn = int (*)(void (*)(const volatile void*, std::size_t), void (*)(const volatile void*));
using SanitizerSizeFn = std::size_t (*)(const volatile void*);

enum Symbol : unsigned {
    kMmap,
    kMmap64,
    kMunmap,
    kMremap,
    kMadvise,
    kShmat,
    kShmdt,
    kBrk,
    kSbrk,
    kFree,
    kRealloc,
    kReallocarray,
    kMallocTrim,
    kNumSymbols
};

/** The next definition of each interposed function, resolved on first use. */
struct RealSymbol {
    const char* name;
    std::atomic<void*> address;
};

constinit RealSymbol g_real[kNumSymbols] = {
    {"mmap", nullptr},     {"mmap64", nullptr}, {"munmap", nullptr},  {"mremap", nullptr},
    {"madvise", nullptr},  {"shmat", nullptr},  {"shmdt", nullptr},   {"brk", nullptr},
    {"sbrk", nullptr},     {"free", nullptr},   {"realloc", nullptr}, {"reallocarray", nullptr},
    {"malloc_trim", nullptr},
};

// initial-exec: reading it never allocates, unlike the general dynamic TLS model.
thread_local bool t_resolving __attribute__((tls_model("initial-exec"))) = false;

/** free() and realloc() may read glibc's chunk headers (set by the probe). */
constinit std::atomic<bool> g_glibc_chunks{false};

/** The sanitizer's allocated-size query, when its free hook is installed. */
constinit std::atomic<SanitizerSizeFn> g_sanitizer_size{nullptr};

/** The probe's page or block, and who saw it: 1 an interposed function, 2 the sanitizer hook. */
constinit std::atomic<std::uintptr_t> g_probe_address{0};
constinit std::atomic<int> g_probe_seen_by{0};

constexpr std::uint64_t kProbeBias = std::uint64_t{1} << 40;
constexpr std::size_t kMinPageSize = 4096;  // the smallest page size Linux has; only used to check alignment

LOOM_COLD LOOM_NOINLINE void* resolve(Symbol symbol) noexcept {
    if (t_resolving) return nullptr;  // dlsym() called a hooked function: the caller falls back
    t_resolving = true;
    void* address = ::dlsym(RTLD_NEXT, g_real[symbol].name);
    t_resolving = false;
    if (address != nullptr) g_real[symbol].address.store(address, std::memory_order_release);
    return address;
}

template <typename Fn>
LOOM_ALWAYS_INLINE Fn real(Symbol symbol) noexcept {
    void* address = g_real[symbol].address.load(std::memory_order_acquire);
    if (LOOM_UNLIKELY(address == nullptr)) address = resolve(symbol);
    return reinterpret_cast<Fn>(address);
}

LOOM_ALWAYS_INLINE bool armed() noexcept {
    return detail::g_hook_armed.load(std::memory_order_relaxed) != 0;
}

/** Reports [start, end) from a hook; the probe's own address is only noted. */
LOOM_NOINLINE void report(std::uintptr_t start, std::uintptr_t end, int seen_by = 1) noexcept {
    const std::uintptr_t probe = g_probe_address.load(std::memory_order_relaxed);
    if (LOOM_UNLIKELY(probe != 0) && start == probe) {
        g_probe_seen_by.store(seen_by, std::memory_order_relaxed);
        return;
    }
    detail::dispatch_event(start, end, detail::EventSource::hook);
}

void report_length(const void* addr, std::size_t length) noexcept {
    const auto start = reinterpret_cast<std::uintptr_t>(addr);
    if (length == 0) return;
    report(start, start + length < start ? UINTPTR_MAX : start + length);
}

/** What glibc's header says about a block (see the top of this file). */
struct GlibcBlock {
    enum class Kind : std::uint8_t { mapped, thread_arena, main_arena, unknown } kind;
    std::uintptr_t start;  ///< for mapped: the mapping; for thread_arena: the chunk
    std::uintptr_t end;
};

GlibcBlock inspect_glibc_block(const void* ptr) noexcept {
    constexpr std::size_t kIsMmapped = 0x2;
    constexpr std::size_t kNonMainArena = 0x4;
    constexpr std::size_t kFlagBits = 0x7;
    const auto* header = static_cast<const std::size_t*>(ptr);
    const std::size_t size_word = header[-1];
    const std::size_t size = size_word & ~kFlagBits;
    const std::uintptr_t chunk = reinterpret_cast<std::uintptr_t>(ptr) - 2 * sizeof(std::size_t);
    if (size_word & kIsMmapped) {
        const std::size_t offset = header[-2];
        const std::uintptr_t start = chunk - offset;
        const std::size_t total = size + offset;
        // glibc checks the same alignment before unmapping; anything else is not one of its blocks.
        if (((start | total) & (kMinPageSize - 1)) != 0 || total == 0 || start + total < start) {
            return {GlibcBlock::Kind::unknown, 0, 0};
        }
        return {GlibcBlock::Kind::mapped, start, start + total};
    }
    if (size_word & kNonMainArena) return {GlibcBlock::Kind::thread_arena, chunk, chunk + size};
    return {GlibcBlock::Kind::main_arena, 0, 0};
}

/**
 * Runs @p call (which frees or reallocates @p ptr) with the events it may cause: the
 * slow path of free(), realloc() and reallocarray() while something is watched.
 */
template <typename Call>
LOOM_NOINLINE auto with_block_events(void* ptr, Call call) noexcept {
    const auto address = reinterpret_cast<std::uintptr_t>(ptr);
    const std::uintptr_t probe = g_probe_address.load(std::memory_order_relaxed);
    if (LOOM_UNLIKELY(probe != 0) && address == probe) g_probe_seen_by.store(1, std::memory_order_relaxed);
    if (!g_glibc_chunks.load(std::memory_order_relaxed)) return call();
    const GlibcBlock block = inspect_glibc_block(ptr);
    switch (block.kind) {
    case GlibcBlock::Kind::mapped:
    case GlibcBlock::Kind::thread_arena:
        report(block.start, block.end);
        return call();
    case GlibcBlock::Kind::main_arena: {
        const auto before = reinterpret_cast<std::uintptr_t>(__curbrk);
        auto result = call();
        const auto after = reinterpret_cast<std::uintptr_t>(__curbrk);
        if (after < before) report(after, before);  // the heap was trimmed
        return result;
    }
    case GlibcBlock::Kind::unknown:
        break;
    }
    return call();
}

/**
 * The attached range of the System V segment at @p addr, from /proc/self/maps read
 * with raw system calls into a stack buffer (this runs inside shmdt(): no malloc).
 * The segment may span several lines when parts were mprotect'ed; they share the
 * inode and follow each other. Returns false when @p addr starts no mapping.
 */
bool shm_attached_range(std::uintptr_t addr, std::uintptr_t& end) noexcept {
    const int fd = static_cast<int>(::syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC));
    if (fd < 0) return false;
    char buf[4096];
    std::size_t have = 0;
    bool found = false;
    bool done = false;
    unsigned long inode = 0;
    auto parse_hex = [](const char*& p, const char* limit) {
        std::uintptr_t value = 0;
        for (; p < limit; ++p) {
            const char c = *p;
            const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (digit < 0) break;
            value = value * 16 + static_cast<unsigned>(digit);
        }
        return value;
    };
    auto skip_field = [](const char*& p, const char* limit) {
        while (p < limit && *p != ' ') ++p;
        while (p < limit && *p == ' ') ++p;
    };
    auto parse_line = [&](const char* p, const char* limit) {
        const std::uintptr_t start = parse_hex(p, limit);
        if (p < limit && *p == '-') ++p;
        const std::uintptr_t line_end = parse_hex(p, limit);
        skip_field(p, limit);  // to perms
        skip_field(p, limit);  // to offset
        skip_field(p, limit);  // to device
        skip_field(p, limit);  // to inode
        unsigned long line_inode = 0;
        for (; p < limit && *p >= '0' && *p <= '9'; ++p) line_inode = line_inode * 10 + static_cast<unsigned>(*p - '0');
        if (!found) {
            if (start == addr) {
                found = true;
                end = line_end;
                inode = line_inode;
            }
        } else if (start == end && line_inode == inode) {
            end = line_end;
        } else {
            done = true;
        }
    };
    while (!done) {
        const long n = ::syscall(SYS_read, fd, buf + have, sizeof(buf) - have);
        if (n <= 0) break;
        have += static_cast<std::size_t>(n);
        const char* line = buf;
        const char* limit = buf + have;
        while (!done) {
            const auto* newline = static_cast<const char*>(std::memchr(line, '\n', static_cast<std::size_t>(limit - line)));
            if (newline == nullptr) break;
            parse_line(line, newline);
            line = newline + 1;
        }
        have = static_cast<std::size_t>(limit - line);
        if (have == sizeof(buf)) have = 0;  // a line longer than the buffer: a path; skip it
        std::memmove(buf, line, have);
    }
    ::syscall(SYS_close, fd);
    return found;
}

void sanitizer_malloc_hook(const volatile void*, std::size_t) {}

/** Called by the sanitizer's allocator for every free (and the free half of realloc). */
void sanitizer_free_hook(const volatile void* ptr) {
    if (LOOM_LIKELY(!armed()) || ptr == nullptr) return;
    const auto start = reinterpret_cast<std::uintptr_t>(const_cast<const void*>(ptr));
    const SanitizerSizeFn size_of = g_sanitizer_size.load(std::memory_order_relaxed);
    const std::size_t size = size_of != nullptr ? size_of(ptr) : 0;
    // The sanitizer keeps freed blocks in quarantine and later unmaps or madvises
    // them with raw system calls, which no hook sees: invalidate at free time.
    report(start, start + (size != 0 ? size : 1), 2);
}

/** True when @p a and @p b are addresses inside the same loaded object. */
bool same_object(const void* a, const void* b) noexcept {
    Dl_info info_a{};
    Dl_info info_b{};
    if (a == nullptr || b == nullptr) return false;
    if (::dladdr(a, &info_a) == 0 || ::dladdr(b, &info_b) == 0) return false;
    return info_a.dli_fbase == info_b.dli_fbase;
}

/**
 * Other objects' calls to free() or munmap() are bound to the definitions in this
 * library for the rest of the process, whether or not anything listens: unloading it
 * would leave them jumping into unmapped code. It is made undeletable when loaded (a
 * no-op when it is a dependency of the executable, which is never unloaded anyway).
 */
__attribute__((constructor)) void pin_this_library() {
    Dl_info info{};
    if (::dladdr(reinterpret_cast<const void*>(&pin_this_library), &info) != 0 && info.dli_fname != nullptr) {
        (void)::dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    }
}

}  // namespace

namespace detail {

ProbeResult probe_interposers() {
    ProbeResult result;
    for (unsigned s = 0; s < kNumSymbols; ++s) (void)real<void*>(static_cast<Symbol>(s));
    auto global_munmap = reinterpret_cast<MunmapFn>(::dlsym(RTLD_DEFAULT, "munmap"));
    auto global_malloc = reinterpret_cast<MallocFn>(::dlsym(RTLD_DEFAULT, "malloc"));
    auto global_free = reinterpret_cast<FreeFn>(::dlsym(RTLD_DEFAULT, "free"));
    const void* libc_marker = ::dlsym(RTLD_DEFAULT, "gnu_get_libc_version");
    auto real_mmap = real<MmapFn>(kMmap);
    if (global_munmap == nullptr || global_malloc == nullptr || global_free == nullptr || real_mmap == nullptr) {
        result.why = "the C library's memory functions cannot be looked up";
        return result;
    }

    bool sanitizer = false;
    auto install = reinterpret_cast<SanitizerInstallFn>(
        ::dlsym(RTLD_DEFAULT, "__sanitizer_install_malloc_and_free_hooks"));
    auto size_of = reinterpret_cast<SanitizerSizeFn>(::dlsym(RTLD_DEFAULT, "__sanitizer_get_allocated_size"));
    if (install != nullptr && size_of != nullptr) {
        g_sanitizer_size.store(size_of, std::memory_order_relaxed);
        sanitizer = install(&sanitizer_malloc_hook, &sanitizer_free_hook) != 0;
    }

    // The interposers take their reporting path while the bias is added.
    g_hook_armed.fetch_add(kProbeBias, std::memory_order_relaxed);
    const long page = ::sysconf(_SC_PAGESIZE);
    void* probe_page = real_mmap(nullptr, static_cast<std::size_t>(page), PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (probe_page != MAP_FAILED) {
        g_probe_seen_by.store(0, std::memory_order_relaxed);
        g_probe_address.store(reinterpret_cast<std::uintptr_t>(probe_page), std::memory_order_relaxed);
        global_munmap(probe_page, static_cast<std::size_t>(page));
        result.unmap_seen = g_probe_seen_by.load(std::memory_order_relaxed) == 1;
    }
    int free_seen_by = 0;
    if (void* block = global_malloc(64); block != nullptr) {
        g_probe_seen_by.store(0, std::memory_order_relaxed);
        g_probe_address.store(reinterpret_cast<std::uintptr_t>(block), std::memory_order_relaxed);
        global_free(block);
        free_seen_by = g_probe_seen_by.load(std::memory_order_relaxed);
    }
    g_probe_address.store(0, std::memory_order_relaxed);
    g_hook_armed.fetch_sub(kProbeBias, std::memory_order_relaxed);

    if (!result.unmap_seen) {
        result.why = probe_page == MAP_FAILED
                         ? "the probe could not map a page"
                         : "libloom-ucs is not in the global symbol scope (loaded with dlopen and RTLD_LOCAL?)";
        return result;
    }
    result.free_seen = free_seen_by != 0;
    if (free_seen_by == 2 && sanitizer) {
        result.free_events = FreeEvents::sanitizer;
    } else if (free_seen_by == 1 && same_object(reinterpret_cast<const void*>(global_malloc), libc_marker) &&
               same_object(g_real[kFree].address.load(std::memory_order_relaxed), libc_marker)) {
        g_glibc_chunks.store(true, std::memory_order_release);
        result.free_events = FreeEvents::glibc;
    } else if (free_seen_by == 1) {
        result.why = "the allocator is not glibc's malloc";
    } else {
        result.why = "another allocator's free() comes first in the symbol search order";
    }
    return result;
}

}  // namespace detail
}  // namespace loom::ucs

using loom::ucs::armed;
using loom::ucs::real;
using loom::ucs::report;
using loom::ucs::report_length;
namespace hooks = loom::ucs;

#define LOOM_INTERPOSE extern "C" __attribute__((visibility("default")))

LOOM_INTERPOSE void* mmap(void* addr, size_t length, int prot, int flags, int fd, off_t offset) noexcept {
    // MAP_FIXED replaces whatever was mapped there (MAP_FIXED_NOREPLACE fails instead).
    if (LOOM_UNLIKELY(armed()) && (flags & MAP_FIXED) != 0) report_length(addr, length);
    if (auto fn = real<hooks::MmapFn>(hooks::kMmap); LOOM_LIKELY(fn != nullptr)) {
        return fn(addr, length, prot, flags, fd, offset);
    }
    return reinterpret_cast<void*>(::syscall(SYS_mmap, addr, length, prot, flags, fd, offset));
}

LOOM_INTERPOSE void* mmap64(void* addr, size_t length, int prot, int flags, int fd, off64_t offset) noexcept {
    if (LOOM_UNLIKELY(armed()) && (flags & MAP_FIXED) != 0) report_length(addr, length);
    if (auto fn = real<hooks::MmapFn>(hooks::kMmap64); LOOM_LIKELY(fn != nullptr)) {
        return fn(addr, length, prot, flags, fd, offset);
    }
    return reinterpret_cast<void*>(::syscall(SYS_mmap, addr, length, prot, flags, fd, offset));
}

LOOM_INTERPOSE int munmap(void* addr, size_t length) noexcept {
    if (LOOM_UNLIKELY(armed())) report_length(addr, length);
    if (auto fn = real<hooks::MunmapFn>(hooks::kMunmap); LOOM_LIKELY(fn != nullptr)) return fn(addr, length);
    return static_cast<int>(::syscall(SYS_munmap, addr, length));
}

LOOM_INTERPOSE void* mremap(void* old_address, size_t old_size, size_t new_size, int flags, ...) noexcept {
    void* new_address = nullptr;
    if ((flags & MREMAP_FIXED) != 0) {
        va_list args;
        va_start(args, flags);
        new_address = va_arg(args, void*);
        va_end(args);
    }
    if (LOOM_UNLIKELY(armed())) {
        // The old pages move or go away (an old size of 0 duplicates a shared mapping),
        // and MREMAP_FIXED replaces whatever was mapped at the new address.
        report_length(old_address, old_size);
        if (new_address != nullptr) report_length(new_address, new_size);
    }
    if (auto fn = real<hooks::MremapFn>(hooks::kMremap); LOOM_LIKELY(fn != nullptr)) {
        return fn(old_address, old_size, new_size, flags, new_address);
    }
    return reinterpret_cast<void*>(::syscall(SYS_mremap, old_address, old_size, new_size, flags, new_address));
}

LOOM_INTERPOSE int madvise(void* addr, size_t length, int advice) noexcept {
    // These advices drop the pages: the next touch maps new ones. The others
    // (MADV_DONTFORK, which verbs itself uses, MADV_WILLNEED, ...) keep them.
    if (LOOM_UNLIKELY(armed()) && (advice == MADV_DONTNEED || advice == MADV_FREE || advice == MADV_REMOVE ||
                                   advice == MADV_DONTNEED_LOCKED)) {
        report_length(addr, length);
    }
    if (auto fn = real<hooks::MadviseFn>(hooks::kMadvise); LOOM_LIKELY(fn != nullptr)) {
        return fn(addr, length, advice);
    }
    return static_cast<int>(::syscall(SYS_madvise, addr, length, advice));
}

LOOM_INTERPOSE void* shmat(int shmid, const void* addr, int flags) noexcept {
    if (LOOM_UNLIKELY(armed()) && addr != nullptr && (flags & SHM_REMAP) != 0) {
        // SHM_REMAP replaces what was mapped at addr by the whole segment.
        struct shmid_ds ds {};
        if (::shmctl(shmid, IPC_STAT, &ds) == 0) {
            auto start = reinterpret_cast<std::uintptr_t>(addr);
            if ((flags & SHM_RND) != 0) start &= ~(static_cast<std::uintptr_t>(SHMLBA) - 1);
            report_length(reinterpret_cast<const void*>(start), ds.shm_segsz);
        }
    }
    if (auto fn = real<hooks::ShmatFn>(hooks::kShmat); LOOM_LIKELY(fn != nullptr)) return fn(shmid, addr, flags);
    return reinterpret_cast<void*>(::syscall(SYS_shmat, shmid, addr, flags));
}

LOOM_INTERPOSE int shmdt(const void* addr) noexcept {
    if (LOOM_UNLIKELY(armed())) {
        const auto start = reinterpret_cast<std::uintptr_t>(addr);
        std::uintptr_t end = 0;
        if (hooks::shm_attached_range(start, end) && end > start) report(start, end);
    }
    if (auto fn = real<hooks::ShmdtFn>(hooks::kShmdt); LOOM_LIKELY(fn != nullptr)) return fn(addr);
    return static_cast<int>(::syscall(SYS_shmdt, addr));
}

LOOM_INTERPOSE int brk(void* addr) noexcept {
    if (LOOM_UNLIKELY(armed())) {
        const auto current = reinterpret_cast<std::uintptr_t>(__curbrk);
        const auto target = reinterpret_cast<std::uintptr_t>(addr);
        if (target < current) report(target, current);
    }
    if (auto fn = real<hooks::BrkFn>(hooks::kBrk); LOOM_LIKELY(fn != nullptr)) return fn(addr);
    // What glibc's brk() does, keeping its record of the break up to date.
    void* result = reinterpret_cast<void*>(::syscall(SYS_brk, addr));
    __curbrk = result;
    if (reinterpret_cast<std::uintptr_t>(result) < reinterpret_cast<std::uintptr_t>(addr)) {
        errno = ENOMEM;
        return -1;
    }
    return 0;
}

LOOM_INTERPOSE void* sbrk(intptr_t increment) noexcept {
    if (LOOM_UNLIKELY(armed()) && increment < 0) {
        const auto current = reinterpret_cast<std::uintptr_t>(__curbrk);
        const auto decrement = static_cast<std::uintptr_t>(-increment);
        if (current >= decrement) report(current - decrement, current);
    }
    if (auto fn = real<hooks::SbrkFn>(hooks::kSbrk); LOOM_LIKELY(fn != nullptr)) return fn(increment);
    return __sbrk(increment);
}

LOOM_INTERPOSE void free(void* ptr) noexcept {
    auto fn = real<hooks::FreeFn>(hooks::kFree);
    if (LOOM_UNLIKELY(fn == nullptr)) return;  // only while dlsym() resolves free(): leak this block
    if (LOOM_LIKELY(!armed()) || ptr == nullptr) {
        fn(ptr);
        return;
    }
    hooks::with_block_events(ptr, [fn, ptr] {
        fn(ptr);
        return 0;
    });
}

LOOM_INTERPOSE void* realloc(void* ptr, size_t size) noexcept {
    auto fn = real<hooks::ReallocFn>(hooks::kRealloc);
    if (LOOM_UNLIKELY(fn == nullptr)) {
        errno = ENOMEM;
        return nullptr;
    }
    if (LOOM_LIKELY(!armed()) || ptr == nullptr) return fn(ptr, size);
    return hooks::with_block_events(ptr, [fn, ptr, size] { return fn(ptr, size); });
}

LOOM_INTERPOSE void* reallocarray(void* ptr, size_t count, size_t size) noexcept {
    // glibc's reallocarray calls its realloc internally, past the realloc above.
    auto fn = real<hooks::ReallocarrayFn>(hooks::kReallocarray);
    if (LOOM_UNLIKELY(fn == nullptr)) {
        errno = ENOMEM;
        return nullptr;
    }
    if (LOOM_LIKELY(!armed()) || ptr == nullptr) return fn(ptr, count, size);
    return hooks::with_block_events(ptr, [fn, ptr, count, size] { return fn(ptr, count, size); });
}

LOOM_INTERPOSE int malloc_trim(size_t pad) noexcept {
    // Releases free pages in the middle of every arena: nothing smaller than everything is safe.
    if (LOOM_UNLIKELY(armed())) report(0, UINTPTR_MAX);
    if (auto fn = real<hooks::MallocTrimFn>(hooks::kMallocTrim); LOOM_LIKELY(fn != nullptr)) return fn(pad);
    return 0;
}

#else  // !LOOM_MEMHOOKS_INTERPOSE

namespace loom::ucs::detail {

ProbeResult probe_interposers() {
    ProbeResult result;
    result.why = "memory hooks are implemented for Linux with glibc only";
    return result;
}

}  // namespace loom::ucs::detail

#endif
