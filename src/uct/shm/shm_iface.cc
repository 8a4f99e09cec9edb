#include "uct/shm/shm_log.h"  // first: inline code of the other headers logs to shm_log()
#include "uct/shm/shm_common.h"

#include "uct/shm/shm_iface.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>

namespace loom::uct::shm {

namespace {

/** A full FIFO checks its peer at most this often. */
constexpr std::uint64_t kFullCheckNs = 1000000;
/** Head of the always-full FIFO: far beyond any tail. */
constexpr std::uint64_t kBlockedHead = 1ull << 62;
/** Largest ring: 2^24 cells (1 GiB); cell counts travel in 32 bits, message sizes in 16. */
constexpr std::uint64_t kMaxFifoCells = 1ull << 24;

/*
 * Performance model, measured on the development machine (a 2-core KVM guest, Xeon 4th
 * generation) with a throwaway program: two processes pinned to the two cores, default
 * configuration, the figures of the quietest runs, rounded.
 *  - overhead: CPU time of one 8-byte am_short, from batches of 1000 calls into a FIFO
 *    nobody drains (17 ns);
 *  - latency: half the round trip of an 8-byte am_short ping-pong, median (150 ns);
 *  - bandwidth: 1 MiB put_zcopy by CMA into a registered, page-aligned buffer of the other
 *    process (20 GB/s; memory from mem_alloc goes through the mapping at ~30 GB/s).
 */
constexpr double kOverhead = 17e-9;
constexpr double kLatency = 150e-9;
constexpr double kBandwidth = 20e9;
/*
 * Zero-copy overhead: the fixed part of a CMA get or put (process_vm_readv/writev: a system
 * call that finds the peer and pins its pages). From the protocol layer's tag_lat between
 * two processes with eager and rendezvous forced (LOOM_RNDV_THRESH), 4 to 32 KiB: the lines
 * through both give rendezvous ~0.72 us more fixed cost than eager; a round trip, the
 * overhead above and a registration (150 ns) explain ~0.47 us of it, CMA the rest.
 */
constexpr double kZcopyOverhead = 250e-9;

int pidfd_open(pid_t pid) {
    return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

}  // namespace

struct PeerProcess {
    int pidfd = -1;
    ~PeerProcess() {
        if (pidfd >= 0) ::close(pidfd);
    }
};

namespace {

/**
 * What the ifaces of this process share about their peers: one mapping of each peer
 * segment and one pidfd of each peer process, checked against its start time once. A
 * process with many workers (a worker per thread, or the scale test's 32) attaches a peer
 * once instead of once per worker: an attachment's open, readlink, fstat and mmap and the
 * pidfd's /proc/<pid>/stat read were most of an endpoint's creation, and of the endpoint
 * a first message makes back (contrib/bench/epmem.c). Entries whose last user went are
 * replaced when looked up again.
 */
struct ProcessPeers {
    std::mutex lock;
    std::map<std::pair<std::uint32_t, std::uint64_t>, std::weak_ptr<const Mapping>>
        mappings;  ///< (pid, cookie)
    std::map<std::pair<std::uint32_t, std::uint64_t>, std::weak_ptr<PeerProcess>>
        processes;  ///< (pid, start time)
};

ProcessPeers& process_peers() {
    static ProcessPeers* peers = new ProcessPeers;  // never destroyed: ifaces may outlive static destruction
    return *peers;
}

/** The mapping of @p seg this process has, or a new one (nullptr with @p reason when it cannot be made). */
std::shared_ptr<const Mapping> shared_mapping(const SegmentId& seg, std::string* reason, Status& status) {
    ProcessPeers& pp = process_peers();
    const auto key = std::make_pair(seg.pid, seg.cookie);
    {
        std::lock_guard<std::mutex> guard(pp.lock);
        auto it = pp.mappings.find(key);
        if (it != pp.mappings.end()) {
            if (auto mapping = it->second.lock()) return mapping;
        }
    }
    // (System calls: not under the lock.) The FIFO's header carries the cookie, checked by
    // attach_peer: the memfd's name need not be read as well.
    auto mapping = Mapping::attach(seg, reason, true, false);
    if (!mapping) {
        status = mapping.status();
        return nullptr;
    }
    auto shared = std::make_shared<const Mapping>(std::move(*mapping));
    std::lock_guard<std::mutex> guard(pp.lock);
    auto& slot = pp.mappings[key];
    if (auto other = slot.lock()) return other;  // another thread attached meanwhile: one mapping
    slot = shared;
    return shared;
}

/**
 * The pidfd of the process @p seg names, checked once against the start time in the
 * address; nullptr with @p reason when it is gone (or its pid was reused).
 */
std::shared_ptr<PeerProcess> shared_process(const SegmentId& seg, std::string* reason) {
    ProcessPeers& pp = process_peers();
    const auto key = std::make_pair(seg.pid, seg.start_time);
    auto gone = [&](const char* why) -> std::shared_ptr<PeerProcess> {
        if (reason) *reason = "process " + std::to_string(seg.pid) + " is gone" + why;
        return nullptr;
    };
    if (seg.start_time != 0) {
        std::lock_guard<std::mutex> guard(pp.lock);
        auto it = pp.processes.find(key);
        if (it != pp.processes.end()) {
            if (auto process = it->second.lock()) {
                // Still running? (A pidfd is readable once its process has exited.)
                pollfd pfd{process->pidfd, POLLIN, 0};
                if (::poll(&pfd, 1, 0) == 1) return gone("");
                return process;
            }
        }
    }
    auto process = std::make_shared<PeerProcess>();
    process->pidfd = pidfd_open(static_cast<pid_t>(seg.pid));
    if (process->pidfd < 0 && errno == ESRCH) return gone("");
    // The pid may have been reused since the address was made: the pidfd must name the owner.
    if (seg.start_time != 0) {
        auto start = process_start_time(static_cast<pid_t>(seg.pid));
        if (!start || *start != seg.start_time) return gone(" (pid reused)");
        if (process->pidfd >= 0) {
            std::lock_guard<std::mutex> guard(pp.lock);
            pp.processes[key] = process;
        }
    }
    return process;
}

}  // namespace

void copy_long(void* dest, const void* src, std::size_t length) {
    std::memcpy(dest, src, length);
}

// --- Wake-up events -------------------------------------------------------------------------
//
// An owner about to sleep arms its FIFO; the next producer that publishes into it clears the
// flag and sends one datagram to the owner's abstract unix socket, named after the FIFO, so
// any process that can write the FIFO can wake its owner without exchanging another address.
// Only sleeping owners cost a system call; UCX's shared-memory transport does the same.
//
// A sleeper must also wake when a peer dies: its requests to that peer wait for a failure
// that only progress's peer check reports. So the event fd is an epoll set of the wake
// socket and the pidfd of every live peer (readable once its process exits); arming makes
// the next progress check the peers at once, and a peer found failed leaves the set (its
// pidfd stays readable for good).

std::size_t wake_socket_name(std::uint32_t owner_pid, std::uint64_t cookie, char (&out)[64]) {
    out[0] = '\0';  // abstract namespace: no file, gone with the socket
    int n = std::snprintf(out + 1, sizeof(out) - 1, "loom-shm-wake-%u-%016llx", owner_pid,
                          static_cast<unsigned long long>(cookie));
    return 1 + static_cast<std::size_t>(n);
}

void fifo_wake(FifoCtl* fifo) {
    if (fifo->armed.exchange(0, std::memory_order_seq_cst) == 0) return;  // another producer woke it
    // One unbound socket per process sends every wake-up (a static: created once, thread-safe).
    static const int sender = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (sender < 0) return;  // the owner's arm failed too, then: it never sleeps
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    char name[64];
    const std::size_t len = wake_socket_name(fifo->owner_pid, fifo->cookie, name);
    std::memcpy(addr.sun_path, name, len);
    // EAGAIN: the owner has unread wake-ups already; ECONNREFUSED: it is gone. Either way
    // there is nobody to wake, so errors are ignored.
    (void)::sendto(sender, "w", 1, MSG_DONTWAIT | MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&addr),
                   static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len));
}

void ShmIface::watch_in_event_set(WatchedProcess& process) {
    const int pidfd = process.process->pidfd;
    if (event_set_ < 0 || pidfd < 0 || process.failure != Status::ok || process.in_event_set) return;
    epoll_event ev{};
    ev.events = EPOLLIN;
    if (::epoll_ctl(event_set_, EPOLL_CTL_ADD, pidfd, &ev) != 0 && errno != EEXIST) {
        LOOM_LOG_WARN("shm: a sleeping worker will not wake when a peer process dies: {}",
                      std::strerror(errno));
        return;
    }
    process.in_event_set = true;
}

void ShmIface::unwatch_in_event_set(WatchedProcess& process) {
    if (!process.in_event_set) return;
    (void)::epoll_ctl(event_set_, EPOLL_CTL_DEL, process.process->pidfd, nullptr);
    process.in_event_set = false;
}

Result<int> ShmIface::event_fd() {
    if (event_set_ >= 0) return event_set_;
    int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        LOOM_LOG_ERROR("shm: cannot create the wake-up socket: {}", std::strerror(errno));
        return Status::no_resource;
    }
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    char name[64];
    const std::size_t len = wake_socket_name(rx_.ctl->owner_pid, rx_.ctl->cookie, name);
    std::memcpy(addr.sun_path, name, len);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len)) !=
        0) {
        LOOM_LOG_ERROR("shm: cannot bind the wake-up socket: {}", std::strerror(errno));
        ::close(fd);
        return Status::io_error;
    }
    const int set = ::epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    if (set < 0 || ::epoll_ctl(set, EPOLL_CTL_ADD, fd, &ev) != 0) {
        LOOM_LOG_ERROR("shm: cannot make the wake-up event set: {}", std::strerror(errno));
        if (set >= 0) ::close(set);
        ::close(fd);
        return Status::no_resource;
    }
    wake_fd_ = fd;
    event_set_ = set;
    for (auto& [key, process] : processes_) watch_in_event_set(process);
    return set;
}

Status ShmIface::event_arm() {
    auto fd = event_fd();
    if (!fd) return fd.status();
    char drain[64];
    while (::recv(wake_fd_, drain, sizeof(drain), MSG_DONTWAIT) > 0) {
    }
    if (rx_.slow_work != 0) return Status::busy;
    // Woken by a pidfd (or anything), progress checks the peers first thing.
    rx_.countdown = 1;
    next_peer_check_ = 0;
    rx_.ctl->armed.store(1, std::memory_order_seq_cst);
    // A reservation not yet consumed means a message is (or is about to be) there.
    if (rx_.ctl->head.load(std::memory_order_seq_cst) != rx_.tail) return Status::busy;
    return Status::ok;
}

// --- Open and close -------------------------------------------------------------------------

Result<std::unique_ptr<Iface>> ShmIface::open(ShmMd* md, Worker* worker, const TlResource& resource,
                                              const ShmConfig& config) {
    if (config.max_bcopy < kMinMaxBcopy || config.max_bcopy > kMaxMaxBcopy) {
        LOOM_LOG_ERROR("LOOM_SHM_MAX_BCOPY={} is out of range ({} to {})", config.max_bcopy, kMinMaxBcopy,
                       kMaxMaxBcopy);
        return Status::invalid_config;
    }
    // The largest message: a zcopy header plus a full payload, or a put/get fragment with its header.
    const std::uint64_t max_msg_cells = msg_cells(config.max_bcopy + kMaxZcopyHeader);
    const std::uint64_t min_cells = 4 * max_msg_cells;
    std::uint64_t cells = std::bit_ceil(std::max<std::uint64_t>(config.fifo_size / kCellSize, 1));
    if (cells < min_cells || cells > kMaxFifoCells) {
        LOOM_LOG_ERROR(
            "LOOM_SHM_FIFO_SIZE={} must be from {} to {} bytes with LOOM_SHM_MAX_BCOPY={} (four of "
            "the largest messages must fit)",
            config.fifo_size, min_cells * kCellSize, kMaxFifoCells * kCellSize, config.max_bcopy);
        return Status::invalid_config;
    }
    auto kind = resolve_segment_kind(config.segment);
    if (!kind) return kind.status();
    auto slot = ArenaSlot::create(fifo_segment_size(cells), *kind);
    if (!slot) return slot.status();

    auto* ctl = new (slot->address()) FifoCtl();
    ctl->magic = kFifoMagic;
    ctl->layout_version = kFifoLayoutVersion;
    ctl->cell_count = static_cast<std::uint32_t>(cells);
    ctl->mask = cells - 1;
    ctl->salt = random_u64() | (1ull << 63);  // never a small number: see shm_wire.h
    ctl->cookie = random_u64();               // names this FIFO (its wake-up socket too) among the arena's
    ctl->owner_pid = slot->arena_id().pid;
    ctl->max_msg_cells = static_cast<std::uint32_t>(max_msg_cells);
    ctl->state.store(kFifoOpen, std::memory_order_release);
    std::unique_ptr<Iface> iface(new ShmIface(md, worker, resource, config, std::move(*slot)));
    return iface;
}

ShmIface::ShmIface(ShmMd* md, Worker* worker, const TlResource& resource, const ShmConfig& config,
                   ArenaSlot fifo)
    : Iface(md, worker, resource, kShmOps), config_(config), fifo_slot_(std::move(fifo)) {
    auto* ctl = static_cast<FifoCtl*>(fifo_slot_.address());
    rx_.ctl = ctl;
    rx_.cells = ctl->cells();
    rx_.mask = ctl->mask;
    rx_.salt = ctl->salt;
    rx_.tail = 0;
    rx_.slow_work = 0;
    rx_.countdown = kClockCheckPeriod;
    rx_.bcopy_cells = msg_cells(config_.max_bcopy);
    rx_.max_bcopy = config_.max_bcopy;
    max_msg_cells_ = ctl->max_msg_cells;
    pending_room_ = 2 * max_msg_cells_;
    blocked_fifo_.magic = kFifoMagic;
    blocked_fifo_.cell_count = 1;
    blocked_fifo_.mask = 0;
    blocked_fifo_.salt = 0;
    blocked_fifo_.head.store(kBlockedHead, std::memory_order_relaxed);
    blocked_fifo_.tail.store(0, std::memory_order_relaxed);
    bounce_.resize(config_.max_bcopy);
    peer_check_ticks_ = ucs::ns_to_ticks(static_cast<std::uint64_t>(config_.peer_check_interval.count()));
    next_peer_check_ = ucs::get_time() + peer_check_ticks_;
}

ShmIface::~ShmIface() {
    progress_disable();
    // Peers that still send here see the flag and fail their endpoints (connection_reset).
    rx_.ctl->state.store(kFifoClosed, std::memory_order_release);
    if (event_set_ >= 0) ::close(event_set_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
    while (!eps_.empty()) ep_destroy(&eps_.front());  // endpoints the user did not destroy
    for (ReplyJob& job : replies_) --job.peer->refs;
    replies_.clear();
    peers_.clear();
}

// --- Attributes and addresses ------------------------------------------------------------------

Status ShmIface::query(IfaceAttr& attr) const {
    attr = {};
    attr.cap_flags = kCapAmShort | kCapAmBcopy | kCapAmZcopy | kCapPending | kCapPutShort | kCapPutBcopy |
                     kCapPutZcopy | kCapGetBcopy | kCapGetZcopy | kCapAtomic32 | kCapAtomic64 |
                     kCapConnectToIface | kCapErrHandlingPeerFailure | kCapIntraNode | kCapEventRecv;
    const std::size_t max_bcopy = config_.max_bcopy;
    // am_zcopy gathers the header and iovs into the FIFO like a bcopy: it completes in the call,
    // and saves the caller a pack callback for scattered data.
    attr.am = {.max_short = kMaxShort,
               .max_bcopy = max_bcopy,
               .min_zcopy = 0,
               .max_zcopy = max_bcopy,
               .max_iov = kMaxIov,
               .opt_zcopy_align = 1,
               .max_hdr = kMaxZcopyHeader};
    // put/get zcopy is never worse than bcopy: both end in the same process_vm_writev/readv (or
    // memcpy into mapped memory, or emulated fragments), bcopy with one more copy.
    attr.put = {.max_short = kMaxPutShort,
                .max_bcopy = max_bcopy,
                .min_zcopy = 0,
                .max_zcopy = SIZE_MAX,
                .max_iov = kMaxIov,
                .opt_zcopy_align = 1,
                .max_hdr = 0};
    attr.get = {.max_short = 0,
                .max_bcopy = max_bcopy,
                .min_zcopy = 0,
                .max_zcopy = SIZE_MAX,
                .max_iov = kMaxIov,
                .opt_zcopy_align = 1,
                .max_hdr = 0};
    const std::uint64_t ops = atomic_op_bit(AtomicOp::add) | atomic_op_bit(AtomicOp::and_) |
                              atomic_op_bit(AtomicOp::or_) | atomic_op_bit(AtomicOp::xor_) |
                              atomic_op_bit(AtomicOp::swap) | atomic_op_bit(AtomicOp::cswap);
    attr.atomic32_ops = attr.atomic64_ops = ops;
    attr.device_addr_len = kDeviceAddrLen;
    attr.iface_addr_len = kIfaceAddrLen;
    attr.ep_addr_len = 0;
    attr.overhead = kOverhead;
    attr.zcopy_overhead = kZcopyOverhead;
    attr.bandwidth_dedicated = kBandwidth;
    attr.bandwidth_shared = 0;
    attr.latency = {kLatency, 0};
    attr.priority = 0;
    attr.ep_size = sizeof(ShmEp);
    return Status::ok;
}

// --- Addresses ------------------------------------------------------------------------------

Status ShmIface::get_device_address(std::uint8_t* out) const {
    const std::uint64_t host = host_id();
    out[0] = kAddrVersion;
    std::memcpy(out + 1, &host, sizeof(host));
    return Status::ok;
}

Status ShmIface::get_address(std::uint8_t* out) const {
    const FifoAddress addr = own_fifo();
    out[0] = kAddrVersion;
    std::memcpy(out + 1, &addr, sizeof(addr));
    return Status::ok;
}

namespace {

/**
 * Whether a FIFO can start at @p offset of a @p size-byte arena and hold @p bytes there:
 * past the arena's header, aligned for its header. (Addresses and the requesters named
 * by get and atomic requests come from peers.)
 */
bool fifo_fits(std::uint64_t offset, std::uint64_t size, std::uint64_t bytes) {
    return offset >= sizeof(ArenaHeader) && offset % alignof(FifoCtl) == 0 && offset <= size &&
           size - offset >= bytes;
}

/** Checks a peer's addresses; fills @p fifo. invalid_address for garbage, unreachable for another host. */
Status parse_addresses(const std::uint8_t* dev_addr, std::size_t dev_addr_len, const std::uint8_t* iface_addr,
                       std::size_t iface_addr_len, FifoAddress* fifo, std::string* reason) {
    auto fail = [&](Status status, std::string why) {
        if (reason) *reason = std::move(why);
        return status;
    };
    if (dev_addr == nullptr || dev_addr_len != kDeviceAddrLen) {
        return fail(Status::invalid_address, "malformed device address (length " +
                                                 std::to_string(dev_addr_len) + ", expected " +
                                                 std::to_string(kDeviceAddrLen) + ")");
    }
    if (iface_addr == nullptr || iface_addr_len != kIfaceAddrLen) {
        return fail(Status::invalid_address, "malformed iface address (length " +
                                                 std::to_string(iface_addr_len) + ", expected " +
                                                 std::to_string(kIfaceAddrLen) + ")");
    }
    if (dev_addr[0] != kAddrVersion || iface_addr[0] != kAddrVersion) {
        return fail(Status::invalid_address,
                    "address version mismatch (device " + std::to_string(dev_addr[0]) + ", iface " +
                        std::to_string(iface_addr[0]) + ", expected " + std::to_string(kAddrVersion) + ")");
    }
    std::uint64_t host;
    std::memcpy(&host, dev_addr + 1, sizeof(host));
    FifoAddress addr;
    std::memcpy(&addr, iface_addr + 1, sizeof(addr));
    const SegmentId& seg = addr.arena;
    if (host != host_id()) {
        return fail(Status::unreachable, "peer is on another host (or another pid namespace)");
    }
    if ((seg.kind != static_cast<std::uint8_t>(SegmentKind::memfd) &&
         seg.kind != static_cast<std::uint8_t>(SegmentKind::posix)) ||
        seg.pid == 0 || seg.pid > static_cast<std::uint32_t>(INT32_MAX) ||
        !fifo_fits(addr.offset, seg.size, fifo_segment_size(2))) {
        return fail(Status::invalid_address,
                    "malformed iface address (segment kind " + std::to_string(seg.kind) + ", pid " +
                        std::to_string(seg.pid) + ", size " + std::to_string(seg.size) + ", FIFO at " +
                        std::to_string(addr.offset) + ")");
    }
    *fifo = addr;
    return Status::ok;
}

}  // namespace

bool ShmIface::is_reachable(const std::uint8_t* dev_addr, std::size_t dev_addr_len,
                            const std::uint8_t* iface_addr, std::size_t iface_addr_len,
                            std::string* reason) const {
    FifoAddress addr;
    if (parse_addresses(dev_addr, dev_addr_len, iface_addr, iface_addr_len, &addr, reason) != Status::ok) {
        return false;
    }
    const SegmentId& seg = addr.arena;
    // A process this iface already watches (a live peer's pidfd) needs no system call: its
    // end is noticed by the watch. Only an unknown pid is looked for.
    if (seg.pid == static_cast<std::uint32_t>(this_process().pid)) return true;
    for (auto it = processes_.lower_bound({seg.pid, 0}); it != processes_.end() && it->first.first == seg.pid;
         ++it) {
        if (it->second.failure == Status::ok && it->second.process->pidfd >= 0) return true;
    }
    if (::kill(static_cast<pid_t>(seg.pid), 0) != 0 && errno == ESRCH) {
        if (reason) *reason = "no process " + std::to_string(seg.pid) + " on this host";
        return false;
    }
    return true;
}

// --- Endpoints and peers ---------------------------------------------------------------------

Result<Peer*> ShmIface::attach_peer(const FifoAddress& addr, std::string* reason) {
    const SegmentId& seg = addr.arena;
    const auto key = std::make_pair(seg.pid, addr.cookie);
    auto it = peers_.find(key);
    if (it != peers_.end()) {
        if (it->second->failure != Status::ok) {
            if (reason) *reason = "the peer failed: " + std::string(to_string(it->second->failure));
            return Status::unreachable;
        }
        return it->second.get();
    }
    Status mapped = Status::ok;
    std::shared_ptr<const Mapping> mapping = shared_mapping(seg, reason, mapped);
    if (mapping == nullptr) return mapped;
    auto fail = [&](std::string why) -> Result<Peer*> {
        if (reason) *reason = std::move(why);
        return Status::unreachable;
    };
    if (!arena_header_ok(*mapping, seg.cookie)) {
        return fail(
            "process " + std::to_string(seg.pid) +
            "'s segment is not the one the address names (cookie mismatch: the pid or fd was reused)");
    }
    if (!fifo_fits(addr.offset, mapping->size(), sizeof(FifoCtl))) {
        return fail("process " + std::to_string(seg.pid) + "'s FIFO cannot be at " +
                    std::to_string(addr.offset) + " of its " + std::to_string(mapping->size()) +
                    "-byte segment");
    }
    auto* fifo = reinterpret_cast<FifoCtl*>(static_cast<std::uint8_t*>(mapping->address()) + addr.offset);
    const std::size_t room = mapping->size() - addr.offset;
    // The first touch of the ring is a write (one that changes nothing): a read fault would
    // make the kernel map up to 64 KiB of the ring around the page (fault-around), resident
    // memory charged to every endpoint, while a write fault maps just the page. Our own
    // senders write the cells they use, so only touched pages get mapped.
    fifo->state.fetch_add(0, std::memory_order_relaxed);
    if (fifo->magic != kFifoMagic || fifo->layout_version != kFifoLayoutVersion) {
        return fail("process " + std::to_string(seg.pid) + "'s segment is not the expected shm FIFO");
    }
    if (fifo->cookie != addr.cookie || fifo->owner_pid != seg.pid) {
        return fail(
            "process " + std::to_string(seg.pid) +
            "'s segment is another FIFO than the address names (cookie mismatch: the pid or fd was reused)");
    }
    const std::uint64_t cells = fifo->cell_count;
    if (cells < 2 || !std::has_single_bit(cells) || fifo->mask != cells - 1 ||
        fifo_segment_size(cells) > room) {
        return fail("process " + std::to_string(seg.pid) + "'s FIFO header is inconsistent");
    }
    if (fifo->state.load(std::memory_order_acquire) != kFifoOpen) {
        return fail("process " + std::to_string(seg.pid) + " closed that interface");
    }
    auto peer = std::make_unique<Peer>();
    peer->seg = seg;
    peer->fifo_cookie = addr.cookie;
    peer->fifo = fifo;
    peer->mapping = std::move(mapping);
    peer->same_process = seg.pid == static_cast<std::uint32_t>(this_process().pid);
    if (!peer->same_process) {
        peer->process = watch_process(seg, reason);
        if (peer->process == nullptr) return Status::unreachable;
        ++peer->process->peers;
    }
    Peer* raw = peer.get();
    peers_.emplace(key, std::move(peer));
    return raw;
}

WatchedProcess* ShmIface::watch_process(const SegmentId& seg, std::string* reason) {
    const auto key = std::make_pair(seg.pid, seg.start_time);
    auto it = processes_.find(key);
    if (it != processes_.end()) {
        // Watched already (another peer iface of it): its end shows in the watch, no system call.
        if (it->second.failure == Status::ok) return &it->second;
        if (it->second.peers != 0) {
            if (reason) *reason = "process " + std::to_string(seg.pid) + " is gone";
            return nullptr;
        }
        processes_.erase(it);  // gone, and nothing refers to it: a new look (start time 0: a reused pid)
    }
    std::shared_ptr<PeerProcess> process = shared_process(seg, reason);
    if (process == nullptr) return nullptr;
    WatchedProcess& watched = processes_[key];
    watched.process = std::move(process);
    watched.pid = seg.pid;
    watched.start_time = seg.start_time;
    watch_in_event_set(watched);
    return &watched;
}

void ShmIface::release_peer(Peer* peer) {
    if (--peer->refs > 0) return;
    // An unused peer stays mapped for the next endpoint or reply, unless it is dead.
    if (peer->failure != Status::ok) erase_peer(peer);
}

void ShmIface::erase_peer(Peer* peer) {
    WatchedProcess* process = peer->process;
    peers_.erase(std::make_pair(peer->seg.pid, peer->fifo_cookie));
    if (process != nullptr && --process->peers == 0) {
        unwatch_in_event_set(*process);
        processes_.erase(std::make_pair(process->pid, process->start_time));
    }
}

Result<Ep*> ShmIface::ep_create(const EpParams& params) {
    FifoAddress addr;
    std::string reason;
    Status status = parse_addresses(params.dev_addr, params.dev_addr_len, params.iface_addr,
                                    params.iface_addr_len, &addr, &reason);
    if (status != Status::ok) {
        LOOM_LOG_ERROR("ep_create: {}", reason);
        return status;
    }
    auto peer = attach_peer(addr, &reason);
    if (!peer) {
        LOOM_LOG_ERROR("ep_create: {}", reason);
        return peer.status();
    }
    // Every message must fit the ring even when it has to wrap (a padding record before it).
    const std::uint64_t cells = (*peer)->fifo->cell_count;
    if (cells < 2 * max_msg_cells_) {
        LOOM_LOG_ERROR(
            "ep_create: process {}'s FIFO ({} bytes) cannot hold our largest messages; raise its "
            "LOOM_SHM_FIFO_SIZE or lower our LOOM_SHM_MAX_BCOPY",
            addr.arena.pid, cells * kCellSize);
        if ((*peer)->refs == 0) erase_peer(*peer);
        return Status::unreachable;
    }
    auto* ep = new ShmEp{};
    ep->iface = this;
    ep->fifo = (*peer)->fifo;
    ep->cached_tail = (*peer)->fifo->tail.load(std::memory_order_acquire);
    ep->peer = *peer;
    ep->status = Status::ok;
    ep->flags = 0;
    ep->on_error = params.on_error;
    ep->on_error_arg = params.on_error_arg;
    ep->emu = nullptr;
    ++ep->peer->refs;
    eps_.push_back(*ep);
    return static_cast<Ep*>(ep);
}

void ShmIface::ep_destroy(Ep* base) {
    auto* ep = static_cast<ShmEp*>(base);
    if (ep->pending_link.linked()) decltype(pending_eps_)::remove(*ep);
    if (ep->ep_link.linked()) decltype(eps_)::remove(*ep);
    std::erase(errors_, ep);
    if (ep->emu != nullptr) {
        // Discarded without callbacks (the API's contract): late replies find no operation and are dropped.
        for (EmuOp* op : ep->emu->sending) delete op;
        for (EmuOp* op : ep->emu->gets) {
            gets_.erase(op->id);
            delete op;
        }
        outstanding_ -= ep->emu->outstanding();
        delete ep->emu;
        if (outstanding_ == 0 && !flush_waiters_.empty()) set_work(kWorkFlush);
    }
    release_peer(ep->peer);
    delete ep;
}

// --- Failures --------------------------------------------------------------------------------

Status ShmIface::check_process(WatchedProcess& process) {
    if (process.failure != Status::ok) return process.failure;
    const int pidfd = process.process->pidfd;
    bool gone;
    if (pidfd >= 0) {
        pollfd pfd{pidfd, POLLIN, 0};
        gone = ::poll(&pfd, 1, 0) > 0;  // readable: the process exited
    } else {
        // No pidfd (old kernel): the owner is alive while its pid has the same start time.
        auto start = process_start_time(static_cast<pid_t>(process.pid));
        gone = !start || (process.start_time != 0 && *start != process.start_time);
    }
    if (gone) {
        process.failure = Status::endpoint_failure;
        unwatch_in_event_set(process);  // readable for good: it would wake every wait
    }
    return process.failure;
}

Status ShmIface::check_peer(Peer& peer) {
    if (peer.failure != Status::ok) return peer.failure;
    if (peer.fifo->state.load(std::memory_order_acquire) != kFifoOpen) return Status::connection_reset;
    if (peer.process != nullptr) return check_process(*peer.process);
    return Status::ok;
}

void ShmIface::check_peers() {
    // Each process once, however many of its ifaces are peers here.
    for (auto& [key, process] : processes_) (void)check_process(process);
    std::vector<Peer*> dead;
    for (auto& [key, peer] : peers_) {
        if (peer->failure == Status::ok) {
            Status status = check_peer(*peer);
            if (status != Status::ok) peer_failed(*peer, status);
        }
        if (peer->failure != Status::ok && peer->refs == 0) dead.push_back(peer.get());
    }
    for (Peer* peer : dead) erase_peer(peer);
}

void ShmIface::peer_failed(Peer& peer, Status status) {
    peer.failure = status;
    last_peer_death_ = ucs::get_time();  // it may have died mid-message in our ring (check_stalled_ring)
    unsigned count = 0;
    for (ShmEp& ep : eps_) {
        if (ep.peer == &peer && ep.status == Status::ok) {
            fail_ep(&ep, status);
            ++count;
        }
    }
    std::size_t replies = std::erase_if(replies_, [&](const ReplyJob& job) {
        if (job.peer != &peer) return false;
        --peer.refs;
        return true;
    });
    // A peer we only answered gets for may leave without anything of ours failing: no error then.
    const log::Level level = count == 0 && replies == 0 ? log::Level::diag : log::Level::error;
    LOOM_LOG(level, "peer process {} {}: {} endpoint(s) failed, {} get repl{} dropped", peer.seg.pid,
             status == Status::connection_reset ? "closed its interface" : "is gone", count, replies,
             replies == 1 ? "y" : "ies");
}

void ShmIface::fail_ep(ShmEp* ep, Status status) {
    if (ep->status != Status::ok) return;
    ep->status = status;
    ep->fifo = &blocked_fifo_;
    // Its pending requests stay queued for pending_purge, but are not dispatched any more.
    if (ep->pending_link.linked()) decltype(pending_eps_)::remove(*ep);
    if (!(ep->flags & kEpErrorQueued)) {
        ep->flags |= kEpErrorQueued;
        errors_.push_back(ep);
        set_work(kWorkErrors);
    }
}

Status ShmIface::send_blocked(ShmEp* ep) {
    if (ep->status != Status::ok) return ep->status;
    if (ep->flags & kEpBlocked) return Status::no_resource;
    // The FIFO is full: a dead receiver would keep it so forever, so look at it now (rate-limited).
    Peer& peer = *ep->peer;
    const ucs::Ticks now = ucs::get_time();
    if (now >= peer.next_full_check) {
        peer.next_full_check = now + ucs::ns_to_ticks(kFullCheckNs);
        Status status = check_peer(peer);
        if (status != Status::ok) {
            peer_failed(peer, status);
            return status;
        }
    }
    return Status::no_resource;
}

void ShmIface::report_errors() {
    while (!errors_.empty()) {
        ShmEp* ep = errors_.front();
        errors_.erase(errors_.begin());
        ep->flags &= ~kEpErrorQueued;
        const Status status = ep->status;
        if (ep->emu != nullptr) {
            while (!ep->emu->sending.empty()) finish_op(ep->emu->sending.front(), status);
            while (!ep->emu->gets.empty()) finish_op(ep->emu->gets.front(), status);
        }
        // The callback may destroy the endpoint: nothing touches it afterwards.
        if (ep->on_error != nullptr) ep->on_error(ep->on_error_arg, ep, status);
    }
    rx_.slow_work &= ~kWorkErrors;
}

// --- Flush and operation completion ----------------------------------------------------------

Status ShmIface::flush(Iface* base, unsigned, Completion* comp) {
    auto* iface = static_cast<ShmIface*>(base);
    if (iface->outstanding_ == 0) return Status::ok;
    if (comp != nullptr) iface->flush_waiters_.push_back(comp);
    return Status::in_progress;
}

void ShmIface::complete_iface_flush() {
    rx_.slow_work &= ~kWorkFlush;
    if (outstanding_ != 0) return;
    std::vector<Completion*> waiters;
    waiters.swap(flush_waiters_);
    for (Completion* comp : waiters) completion_update(comp, Status::ok);
}

EmuState& ShmIface::emu_of(ShmEp* ep) {
    if (ep->emu == nullptr) ep->emu = new EmuState();
    return *ep->emu;
}

void ShmIface::finish_op(EmuOp* op, Status status) {
    ShmEp* ep = op->ep;
    EmuState& emu = *ep->emu;
    if (op->kind == EmuOp::Kind::put) {
        emu.sending.erase(std::find(emu.sending.begin(), emu.sending.end(), op));
    } else {
        std::erase(emu.gets, op);
        gets_.erase(op->id);
    }
    --outstanding_;
    Completion* comp = op->comp;
    delete op;
    if (comp != nullptr) completion_update(comp, status);
    if (emu.outstanding() == 0 && !emu.flush_waiters.empty()) {
        std::vector<Completion*> waiters;
        waiters.swap(emu.flush_waiters);
        for (Completion* waiter : waiters) completion_update(waiter, ep->status);
    }
    if (outstanding_ == 0 && !flush_waiters_.empty()) set_work(kWorkFlush);
}

void ShmIface::maybe_unblock(ShmEp* ep) {
    if ((ep->flags & kEpBlocked) && ep->emu->sending.empty()) {
        ep->flags &= ~kEpBlocked;
        if (ep->status == Status::ok) ep->fifo = ep->peer->fifo;
    }
}

}  // namespace loom::uct::shm
