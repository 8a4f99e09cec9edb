#include "uct/shm/shm_log.h"  // first: inline code of the other headers logs to shm_log()
#include "uct/shm/shm_common.h"

#include "uct/shm/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>

namespace loom::uct::shm {

namespace {

constexpr const char* kShmDir = "/dev/shm";
constexpr mode_t kSegmentMode = 0600;

std::size_t page_size() {
    static const std::size_t size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return size;
}

std::size_t round_to_page(std::size_t size) {
    std::size_t page = page_size();
    return (size + page - 1) / page * page;
}

/** The memfd name (shown by readlink as "/memfd:<name> (deleted)"). */
std::string memfd_name(std::uint64_t cookie) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "loom-shm-%016" PRIx64, cookie);
    return buf;
}

std::string fd_link(pid_t pid, int fd) {
    return "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
}

/**
 * Maps @p fd shared read-write. The owner populates its pages so its first messages take no
 * page faults; a peer attaching does not: populating a 256 KiB ring per peer made every
 * endpoint cost 60 us and a quarter of a megabyte of page-table-backed resident memory,
 * and most peers of a large job touch only the first cells of each other's rings.
 */
void* map_fd(int fd, std::size_t size, bool populate, void* fixed_address = nullptr, bool writable = true) {
    // MAP_FIXED_NOREPLACE: never over what is mapped there already (a kernel older than 4.17
    // ignores the flag and may place the mapping elsewhere: checked below).
    const int fixed = fixed_address != nullptr ? MAP_FIXED_NOREPLACE : 0;
    void* address = ::mmap(fixed_address, size, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                           MAP_SHARED | fixed | (populate ? MAP_POPULATE : 0), fd, 0);
    if (address == MAP_FAILED) return nullptr;
    if (fixed_address != nullptr && address != fixed_address) {
        ::munmap(address, size);
        errno = EEXIST;
        return nullptr;
    }
    return address;
}

}  // namespace

std::string posix_segment_name(const SegmentId& id) {
    char buf[128];
    std::snprintf(buf, sizeof(buf), "/loom-%" PRIu32 "-%" PRIu32 "-%" PRIu64 "-%016" PRIx64, id.uid, id.pid,
                  id.start_time, id.cookie);
    return buf;
}

// --- Segment ----------------------------------------------------------------------------

Result<Segment> Segment::create(std::size_t size, SegmentKind kind, void* fixed_address, bool populate) {
    if (size == 0) return Status::invalid_param;
    // tmpfs and memfd pages are memory (or swap): a segment larger than the machine's memory
    // would be sized, then populated until the OOM killer steps in, instead of failing.
    const auto memory = static_cast<std::size_t>(::sysconf(_SC_PHYS_PAGES)) * page_size();
    if (size > memory) {
        LOOM_LOG_ERROR("a shared segment of {} bytes is larger than this machine's memory ({} bytes)", size,
                       memory);
        return Status::no_memory;
    }
    if (reinterpret_cast<std::uintptr_t>(fixed_address) % page_size() != 0) {
        LOOM_LOG_ERROR("a shared segment at {}: the address is not page aligned", fixed_address);
        return Status::invalid_param;
    }
    const ProcessIdentity self = this_process();
    Segment seg;
    seg.size_ = round_to_page(size);
    seg.id_.kind = static_cast<std::uint8_t>(kind);
    seg.id_.uid = static_cast<std::uint32_t>(::geteuid());
    seg.id_.pid = static_cast<std::uint32_t>(self.pid);
    seg.id_.start_time = self.start_time;
    seg.id_.cookie = random_u64();
    seg.id_.size = seg.size_;

    int fd = -1;
    if (kind == SegmentKind::memfd) {
        fd = ::memfd_create(memfd_name(seg.id_.cookie).c_str(), MFD_CLOEXEC);
        if (fd < 0) {
            int err = errno;
            LOOM_LOG_ERROR("memfd_create failed: {}", errno_string(err));
            return err == EMFILE || err == ENFILE ? Status::no_resource : Status::unsupported;
        }
    } else {
        seg.name_ = posix_segment_name(seg.id_);
        fd = ::shm_open(seg.name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, kSegmentMode);
        if (fd < 0) {
            int err = errno;
            LOOM_LOG_ERROR("shm_open({}) failed: {}", seg.name_, errno_string(err));
            seg.name_.clear();
            return err == EMFILE || err == ENFILE ? Status::no_resource : Status::io_error;
        }
    }
    seg.fd_ = fd;  // from here on the destructor cleans up (fd, name)
    // The umask may only remove bits, never add: set the mode explicitly so it is exactly 0600.
    if (::fchmod(fd, kSegmentMode) != 0 || ::ftruncate(fd, static_cast<off_t>(seg.size_)) != 0) {
        int err = errno;
        LOOM_LOG_ERROR("sizing a {}-byte shared segment failed: {}", seg.size_, errno_string(err));
        return err == ENOSPC || err == EFBIG ? Status::no_memory : Status::io_error;
    }
    seg.address_ = map_fd(fd, seg.size_, populate, fixed_address);
    if (seg.address_ == nullptr) {
        int err = errno;
        if (fixed_address != nullptr) {
            LOOM_LOG_ERROR("mapping a {}-byte shared segment at {} failed: {}", seg.size_, fixed_address,
                           err == EEXIST ? "something is mapped there already" : errno_string(err));
        } else {
            LOOM_LOG_ERROR("mapping a {}-byte shared segment failed: {}", seg.size_, errno_string(err));
        }
        return Status::no_memory;
    }
    if (kind == SegmentKind::memfd) {
        seg.id_.fd = static_cast<std::uint32_t>(fd);  // peers open /proc/<pid>/fd/<fd>: keep it open
    } else {
        ::close(fd);  // peers open the name; the mapping keeps the memory
        seg.fd_ = -1;
    }
    return seg;
}

Segment::Segment(Segment&& other) noexcept
    : address_(std::exchange(other.address_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      fd_(std::exchange(other.fd_, -1)),
      id_(other.id_),
      name_(std::move(other.name_)) {
    other.name_.clear();
}

Segment& Segment::operator=(Segment&& other) noexcept {
    if (this != &other) {
        release();
        address_ = std::exchange(other.address_, nullptr);
        size_ = std::exchange(other.size_, 0);
        fd_ = std::exchange(other.fd_, -1);
        id_ = other.id_;
        name_ = std::move(other.name_);
        other.name_.clear();
    }
    return *this;
}

Segment::~Segment() {
    release();
}

void Segment::unlink_name() {
    if (!name_.empty()) {
        if (::shm_unlink(name_.c_str()) != 0 && errno != ENOENT) {
            LOOM_LOG_WARN("shm_unlink({}) failed: {}", name_, errno_string(errno));
        }
        name_.clear();
    }
}

void Segment::release() noexcept {
    unlink_name();
    if (address_ != nullptr) ::munmap(address_, size_);
    if (fd_ >= 0) ::close(fd_);
    address_ = nullptr;
    fd_ = -1;
    size_ = 0;
}

// --- ArenaSlot ---------------------------------------------------------------------------

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack the name
#endif

namespace {

/** The arena slots are taken from, per kind; a forked child's registry starts empty. */
struct ArenaRegistry {
    std::mutex lock;
    pid_t pid = 0;
    struct Open {
        std::weak_ptr<Segment> arena;
        std::size_t next = 0;  ///< where the next slot starts
    };
    Open open[2];  ///< memfd, posix
};

ArenaRegistry& arena_registry() {
    static ArenaRegistry* registry =
        new ArenaRegistry;  // never destroyed: slots may outlive static destruction
    return *registry;
}

/**
 * Bytes of a new arena: room for many FIFOs at the default size (256 KiB each), and
 * never more than an eighth of the machine's memory (Segment::create refuses segments
 * larger than it; an arena's pages are only allocated as slots use them).
 */
std::size_t arena_size(std::size_t slot) {
    constexpr std::size_t kArenaBytes = 256u << 20;
    const auto memory = static_cast<std::size_t>(::sysconf(_SC_PHYS_PAGES)) * page_size();
    return std::max(std::min(kArenaBytes, memory / 8), page_size() + slot);
}

}  // namespace

Result<ArenaSlot> ArenaSlot::create(std::size_t size, SegmentKind kind) {
    if (size == 0) return Status::invalid_param;
    const std::size_t bytes = round_to_page(size);
    ArenaRegistry& registry = arena_registry();
    std::lock_guard<std::mutex> guard(registry.lock);
    if (registry.pid != ::getpid()) {  // a forked child: the parent's arenas are not ours to hand out
        for (auto& open : registry.open) open = ArenaRegistry::Open{};
        registry.pid = ::getpid();
    }
    ArenaRegistry::Open& open = registry.open[kind == SegmentKind::memfd ? 0 : 1];
    std::shared_ptr<Segment> arena = open.arena.lock();
    if (arena == nullptr || open.next + bytes > arena->size()) {
        auto segment = Segment::create(arena_size(bytes), kind, nullptr, false);
        if (!segment) return segment.status();
        arena = std::make_shared<Segment>(std::move(*segment));
        auto* header = static_cast<ArenaHeader*>(arena->address());
        header->magic = kArenaMagic;
        header->cookie = arena->id().cookie;
        open.arena = arena;
        open.next = page_size();
    }
    ArenaSlot slot;
    slot.offset_ = open.next;
    slot.size_ = bytes;
    slot.address_ = static_cast<std::uint8_t*>(arena->address()) + slot.offset_;
    open.next += bytes;
    slot.arena_ = std::move(arena);
    // Allocated now, as a segment of its own was (MAP_POPULATE): the receive path never
    // faults. A kernel without MADV_POPULATE_WRITE (before 5.14) touches it page by page.
    if (::madvise(slot.address_, bytes, MADV_POPULATE_WRITE) != 0) {
        for (std::size_t off = 0; off < bytes; off += page_size())
            static_cast<volatile std::uint8_t*>(slot.address_)[off] = 0;
    }
    return slot;
}

ArenaSlot::ArenaSlot(ArenaSlot&& other) noexcept
    : arena_(std::move(other.arena_)),
      address_(std::exchange(other.address_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      offset_(std::exchange(other.offset_, 0)) {}

ArenaSlot& ArenaSlot::operator=(ArenaSlot&& other) noexcept {
    if (this != &other) {
        release();
        arena_ = std::move(other.arena_);
        address_ = std::exchange(other.address_, nullptr);
        size_ = std::exchange(other.size_, 0);
        offset_ = std::exchange(other.offset_, 0);
    }
    return *this;
}

ArenaSlot::~ArenaSlot() {
    release();
}

void ArenaSlot::release() noexcept {
    if (address_ != nullptr && size_ > page_size()) {
        // The memory goes back now, even from a peer's mapping of the arena (which keeps the
        // arena after our last slot); the first page stays: peers read the header there.
        (void)::madvise(static_cast<std::uint8_t*>(address_) + page_size(), size_ - page_size(), MADV_REMOVE);
    }
    arena_.reset();
    address_ = nullptr;
    size_ = 0;
}

const SegmentId& ArenaSlot::arena_id() const {
    return arena_->id();
}

bool arena_header_ok(const Mapping& mapping, std::uint64_t cookie) {
    if (mapping.size() < sizeof(ArenaHeader)) return false;
    auto* header = static_cast<ArenaHeader*>(mapping.address());
    header->touch.fetch_add(0, std::memory_order_relaxed);
    return header->magic == kArenaMagic && header->cookie == cookie;
}

// --- Mapping ----------------------------------------------------------------------------

Result<Mapping> Mapping::attach(const SegmentId& id, std::string* reason, bool writable, bool check_name) {
    auto fail = [&](Status status, std::string why) -> Result<Mapping> {
        if (reason) *reason = std::move(why);
        return status;
    };
    if (id.size == 0 || id.size > (1ull << 46)) {
        return fail(Status::invalid_address, "segment size " + std::to_string(id.size) + " is not plausible");
    }
    if (id.pid == 0 || id.pid > static_cast<std::uint32_t>(INT32_MAX)) {
        return fail(Status::invalid_address, "owner pid " + std::to_string(id.pid) + " is not plausible");
    }
    int fd = -1;
    std::string what;
    if (id.kind == static_cast<std::uint8_t>(SegmentKind::memfd)) {
        if (id.fd > static_cast<std::uint32_t>(INT32_MAX))
            return fail(Status::invalid_address, "bad fd number");
        what = fd_link(static_cast<pid_t>(id.pid), static_cast<int>(id.fd));
        fd = ::open(what.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
        if (fd < 0) {
            int err = errno;
            if (err == EACCES || err == EPERM) {
                return fail(Status::unreachable,
                            "cannot open " + what + ": " + errno_string(err) +
                                " (the owner's /proc links are not accessible to us; the owner can use "
                                "LOOM_SHM_SEGMENT=posix)");
            }
            return fail(Status::unreachable, "cannot open " + what + ": " + errno_string(err) +
                                                 " (owner process or segment gone)");
        }
        // Check what we opened, not what the link pointed at a moment ago: our own fd cannot change.
        char link[256];
        const ssize_t n =
            check_name ? ::readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), link, sizeof(link) - 1)
                       : 0;
        if (check_name && (n < 0 || std::string(link, static_cast<std::size_t>(n)) !=
                                        "/memfd:" + memfd_name(id.cookie) + " (deleted)")) {
            ::close(fd);
            return fail(Status::unreachable, what +
                                                 " is not the expected segment (cookie mismatch: the pid or "
                                                 "fd was reused)");
        }
    } else if (id.kind == static_cast<std::uint8_t>(SegmentKind::posix)) {
        what = posix_segment_name(id);
        fd = ::shm_open(what.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC, 0);
        if (fd < 0) {
            int err = errno;
            return fail(Status::unreachable,
                        "cannot open shared memory " + what + ": " + errno_string(err) +
                            (err == ENOENT ? " (owner gone, or a cookie mismatch)" : ""));
        }
    } else {
        return fail(Status::invalid_address, "unknown segment kind " + std::to_string(id.kind));
    }
    struct stat st;
    if (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) < id.size) {
        ::close(fd);
        return fail(Status::unreachable, what + " is smaller than the " + std::to_string(id.size) +
                                             " bytes announced (not the expected segment)");
    }
    Mapping mapping;
    mapping.size_ = static_cast<std::size_t>(id.size);
    mapping.address_ = map_fd(fd, mapping.size_, false, nullptr, writable);
    int err = errno;
    ::close(fd);
    if (mapping.address_ == nullptr) {
        return fail(Status::no_memory, "mapping " + what + " failed: " + errno_string(err));
    }
    return mapping;
}

Mapping::Mapping(Mapping&& other) noexcept
    : address_(std::exchange(other.address_, nullptr)), size_(std::exchange(other.size_, 0)) {}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
    if (this != &other) {
        if (address_ != nullptr) ::munmap(address_, size_);
        address_ = std::exchange(other.address_, nullptr);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

Mapping::~Mapping() {
    if (address_ != nullptr) ::munmap(address_, size_);
}

// --- Stale names and the segment kind -----------------------------------------------------

std::size_t sweep_stale_segments() {
    DIR* dir = ::opendir(kShmDir);
    if (dir == nullptr) return 0;
    const auto my_uid = static_cast<std::uint32_t>(::geteuid());
    std::size_t removed = 0;
    while (dirent* entry = ::readdir(dir)) {
        std::uint32_t uid = 0, pid = 0;
        std::uint64_t start_time = 0, cookie = 0;
        char rest = 0;
        // sscanf with %c after the last field makes trailing junk a mismatch.
        int fields = std::sscanf(entry->d_name, "loom-%" SCNu32 "-%" SCNu32 "-%" SCNu64 "-%16" SCNx64 "%c",
                                 &uid, &pid, &start_time, &cookie, &rest);
        if (fields != 4 || uid != my_uid) continue;
        SegmentId id{};
        id.uid = uid;
        id.pid = pid;
        id.start_time = start_time;
        id.cookie = cookie;
        // Only names we would have created: the canonical spelling round-trips.
        if (posix_segment_name(id) != std::string("/") + entry->d_name) continue;
        bool alive;
        auto start = process_start_time(static_cast<pid_t>(id.pid));
        if (id.start_time != 0) {
            alive = start.ok() && *start == id.start_time;
        } else {
            // The owner could not read its own start time: trust only a definite "no such process".
            alive = !(::kill(static_cast<pid_t>(id.pid), 0) != 0 && errno == ESRCH);
        }
        if (alive) continue;
        std::string name = std::string("/") + entry->d_name;
        if (::shm_unlink(name.c_str()) == 0) {
            ++removed;
            LOOM_LOG_DIAG("removed {} left behind by process {}, which no longer exists", name, id.pid);
        }
    }
    ::closedir(dir);
    return removed;
}

Result<SegmentKind> resolve_segment_kind(SegmentMode mode) {
    if (mode == SegmentMode::posix) return SegmentKind::posix;
    // memfd works for peers only if they can open our /proc/<pid>/fd links: memfd_create must
    // exist, /proc must be mounted, and we must be dumpable (otherwise /proc/<pid> belongs to root).
    std::string why;
    int fd = ::memfd_create("loom-shm-probe", MFD_CLOEXEC);
    if (fd < 0) {
        why = "memfd_create failed: " + errno_string(errno);
    } else {
        int reopened = ::open(fd_link(::getpid(), fd).c_str(), O_RDWR | O_CLOEXEC);
        if (reopened < 0) {
            why = "/proc/<pid>/fd links cannot be opened: " + errno_string(errno);
        } else {
            ::close(reopened);
            if (::prctl(PR_GET_DUMPABLE) != 1)
                why = "the process is not dumpable, so peers cannot open its /proc links";
        }
        ::close(fd);
    }
    if (why.empty()) return SegmentKind::memfd;
    if (mode == SegmentMode::memfd) {
        LOOM_LOG_ERROR("LOOM_SHM_SEGMENT=memfd cannot work here: {}", why);
        return Status::unsupported;
    }
    LOOM_LOG_DIAG("using POSIX shared memory segments: {}", why);
    return SegmentKind::posix;
}

}  // namespace loom::uct::shm
