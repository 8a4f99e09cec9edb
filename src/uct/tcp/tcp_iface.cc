/**
 * tcp iface: listening socket, connection establishment, progress, failures, pending
 * dispatch and flush.
 *
 * Progress does one epoll_wait(0) over the listening socket and every connection (or,
 * with a single idle connection, one recv() on it: see update_hot) and handles what is
 * ready: new connections are accepted, connecting sockets finish their handshake,
 * writable sockets continue their partial frame, readable ones are read and their frames
 * executed (tcp_rx.cc). Work that is rare (failures, connection timers,
 * pending requests, freeing endpoints destroyed from callbacks) runs only when flagged,
 * so an idle progress costs the one system call.
 *
 * Failures (reset, EOF, malformed frames, refused or timed-out connections) are only
 * marked where they are found, inside a send or in the middle of parsing; the teardown
 * and the callbacks (outstanding Completions with the error, then EpParams::on_error)
 * run at the end of progress. Pending requests of a failed endpoint are left for
 * pending_purge (pending_add returns the error from then on).
 */
#include "uct/tcp/tcp_iface.h"
#include "uct/tcp/tcp_log.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

namespace loom::uct::tcp {

namespace {

constexpr unsigned kMaxEventsPerProgress = 16;
constexpr unsigned kMaxAcceptsPerProgress = 64;
constexpr unsigned kMaxPendingRounds = 16;
constexpr unsigned kHotPollPeriod = 16;

std::string addr_text(const sockaddr_in& addr) {
    char ip[INET_ADDRSTRLEN] = "?";
    ::inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));
    return std::string(ip) + ":" + std::to_string(ntohs(addr.sin_port));
}

std::string ip_text(in_addr addr) {
    char ip[INET_ADDRSTRLEN] = "?";
    ::inet_ntop(AF_INET, &addr, ip, sizeof(ip));
    return ip;
}

/** The status of a connection that failed with errno @p err. */
Status errno_status(int err) {
    switch (err) {
    case ECONNREFUSED: return Status::connection_refused;
    case ECONNRESET:
    case EPIPE:
    case ECONNABORTED: return Status::connection_reset;
    case ETIMEDOUT: return Status::peer_timeout;
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENETDOWN:
    case EHOSTDOWN: return Status::unreachable;
    case ENOMEM:
    case ENOBUFS: return Status::no_memory;
    default: return Status::io_error;
    }
}

bool retryable(int err) {
    return err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH ||
           err == EAGAIN || err == EADDRNOTAVAIL;
}

std::uint64_t random_cookie() {
    std::random_device rd;
    std::uint64_t cookie;
    do {
        cookie = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
    } while (cookie == 0);
    return cookie;
}

/**
 * Parses a peer's addresses; invalid_address (with @p reason) for anything malformed.
 * The version byte is checked before anything else, so a peer of another version is
 * told apart from garbage.
 */
Status parse_addresses(const std::uint8_t* dev_addr, std::size_t dev_len, const std::uint8_t* iface_addr,
                       std::size_t iface_len, DeviceAddress& dev, IfaceAddress& iface, std::string* reason) {
    auto fail = [&](const char* why) {
        if (reason) *reason = why;
        return Status::invalid_address;
    };
    if (dev_addr == nullptr || dev_len != sizeof(DeviceAddress)) return fail("malformed device address (bad length)");
    if (iface_addr == nullptr || iface_len != sizeof(IfaceAddress)) {
        return fail("malformed iface address (bad length)");
    }
    std::memcpy(&dev, dev_addr, sizeof(dev));
    std::memcpy(&iface, iface_addr, sizeof(iface));
    if (dev.version != kWireVersion || iface.version != kWireVersion) return fail("address version mismatch");
    if (dev.family != kFamilyInet) return fail("unsupported address family (only IPv4)");
    if (iface.port == 0) return fail("malformed iface address (port 0)");
    if (iface.cookie == 0) return fail("malformed iface address (cookie 0)");
    return Status::ok;
}

bool is_loopback_ip(std::uint32_t ip_net) { return (ntohl(ip_net) >> 24) == 127; }


}  // namespace

std::uint64_t net_stack_id() {
    static const std::uint64_t id = [] {
        std::string text;
        if (std::ifstream boot("/proc/sys/kernel/random/boot_id"); boot) std::getline(boot, text);
        char ns[128] = {};
        if (ssize_t n = ::readlink("/proc/self/ns/net", ns, sizeof(ns) - 1); n > 0) text += ns;
        std::uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a
        for (unsigned char c : text) hash = (hash ^ c) * 0x100000001b3ull;
        return hash;
    }();
    return id;
}

// --- set-up ----------------------------------------------------------------------------------

TcpIface::TcpIface(TcpMd* md, Worker* worker, const TlResource& resource, const NetDevice& device,
                   const TcpConfig& config)
    : Iface(md, worker, resource, kTcpOps),
      md_(md),
      device_(device),
      config_(config),
      seg_size_(config.seg_size),
      // A short message is written from the caller's memory (sendmsg with the headers), so
      // it needs no copy on the way out whatever its size: it may fill a whole segment.
      max_short_(config.seg_size),
      cookie_(random_cookie()) {
    conn_timeout_ticks_ = config.conn_timeout == ucs::config::kTimeInf
                              ? ucs::Ticks(~0ull) / 2
                              : ucs::ns_to_ticks(static_cast<std::uint64_t>(config.conn_timeout.count()));
    retry_interval_ticks_ = ucs::ns_to_ticks(static_cast<std::uint64_t>(config.conn_retry_interval.count()));
    // Mb/s in sysfs; -1 or missing for virtual devices.
    long mbps = 0;
    if (std::FILE* f = std::fopen(("/sys/class/net/" + device.name + "/speed").c_str(), "r")) {
        if (std::fscanf(f, "%ld", &mbps) != 1) mbps = 0;
        std::fclose(f);
    }
    link_bandwidth_ = mbps > 0 ? static_cast<double>(mbps) * 1e6 / 8 : 1e9;
}

Result<std::unique_ptr<Iface>> TcpIface::open(TcpMd* md, Worker* worker, const TlResource& resource,
                                              const NetDevice& device, const TcpConfig& config) {
    std::uint16_t min_port, max_port;
    if (parse_port_range(config.port_range, min_port, max_port) != Status::ok) {
        LOOM_LOG_ERROR("LOOM_TCP_PORT_RANGE={} is not a port range", config.port_range);
        return Status::invalid_config;
    }
    std::unique_ptr<TcpIface> iface(new TcpIface(md, worker, resource, device, config));
    auto epoll = ucs::EventSet::create();
    if (!epoll) return epoll.status();
    iface->epoll_ = std::move(*epoll);
    if (Status s = iface->create_pools(); s != Status::ok) return s;
    if (Status s = iface->listen(min_port, max_port); s != Status::ok) return s;
    if (Status s = iface->choose_congestion(); s != Status::ok) return s;
    LOOM_LOG_DEBUG("tcp/{}: listening on {}", device.name, addr_text(iface->listen_addr_));
    return std::unique_ptr<Iface>(iface.release());
}

Status TcpIface::create_pools() {
    ucs::MemPoolParams tx;
    tx.name = "tcp_tx";
    tx.elem_size = sizeof(TxDesc) + kMaxHeaderRoom + seg_size_;
    tx.alignment = kCacheLineSize;
    tx.elems_per_chunk = 4;
    ucs::MemPoolParams req;
    req.name = "tcp_req";
    req.elem_size = sizeof(ReqDesc);
    req.alignment = kCacheLineSize;
    req.elems_per_chunk = 128;
    ucs::MemPoolParams rx;
    rx.name = "tcp_rx";
    rx.elem_size = sizeof(RxState);
    rx.alignment = kCacheLineSize;
    rx.elems_per_chunk = 64;
    ucs::MemPoolParams tx_small;
    tx_small.name = "tcp_tx_small";
    tx_small.elem_size = sizeof(TxDesc) + kSmallStageBytes;
    tx_small.alignment = kCacheLineSize;
    tx_small.elems_per_chunk = 64;
    ucs::MemPoolParams rx_buf;
    rx_buf.name = "tcp_rx_buf";
    rx_buf.elem_size = rx_size();
    rx_buf.alignment = kCacheLineSize;
    rx_buf.elems_per_chunk = 2;
    ucs::MemPoolParams reply;
    reply.name = "tcp_reply";
    reply.elem_size = sizeof(ReplyDesc);
    reply.elems_per_chunk = 128;
    for (auto [pool, params] :
         {std::pair{&tx_pool_, &tx}, {&tx_small_pool_, &tx_small}, {&req_pool_, &req}, {&rx_pool_, &rx}, {&rx_buf_pool_, &rx_buf}, {&reply_pool_, &reply}}) {
        if (Status s = pool->init(std::move(*params)); s != Status::ok) return s;
    }
    return Status::ok;
}

Status TcpIface::listen(std::uint16_t min_port, std::uint16_t max_port) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        LOOM_LOG_ERROR("tcp/{}: socket() failed: {}", device_.name, std::strerror(errno));
        return errno == EMFILE || errno == ENFILE ? Status::no_resource : Status::io_error;
    }
    int one = 1;
    (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr = device_.addr;
    int err = EADDRINUSE;
    for (unsigned port = min_port; port <= max_port; ++port) {
        addr.sin_port = htons(static_cast<std::uint16_t>(port));
        if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
            err = 0;
            break;
        }
        err = errno;
        if (err != EADDRINUSE && err != EACCES) break;
    }
    if (err != 0) {
        LOOM_LOG_ERROR("tcp/{}: cannot bind {} to a port in {}: {}", device_.name, ip_text(device_.addr),
                       config_.port_range, std::strerror(err));
        ::close(fd);
        return err == EADDRINUSE ? Status::busy : Status::io_error;
    }
    socklen_t len = sizeof(listen_addr_);
    if (::listen(fd, static_cast<int>(config_.backlog)) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&listen_addr_), &len) != 0) {
        LOOM_LOG_ERROR("tcp/{}: listen failed: {}", device_.name, std::strerror(errno));
        ::close(fd);
        return Status::io_error;
    }
    if (Status s = epoll_.add(fd, ucs::kEventRead, 0); s != Status::ok) {
        ::close(fd);
        return s;
    }
    listen_fd_ = fd;
    return Status::ok;
}

/**
 * Resolves LOOM_TCP_CONGESTION for this device. A fixed algorithm is set on the listening
 * socket first: the kernel checks the name there once (unknown, or not allowed to this
 * user), and accepted connections inherit it.
 *
 * auto, on loopback: a connection keeps the system's algorithm until it writes a bulk
 * frame (kBulkFrame bytes or more) and then uses reno, back to the system's after
 * kBulkLinger small frames in a row (note_bulk, note_small). Measured on the development
 * machine (2-core VM, Linux 6.18, bbr by default):
 *  - bulk: bbr paces every segment with a timer (there is no fq qdisc on lo) for a round
 *    trip of microseconds; a plain blocking socket pair streaming 1 and 4 MiB messages
 *    spent 145-215 us of CPU per MiB on each side with bbr, 86-137 us with reno, and
 *    tag_bw of 1 MiB moved 6.4 GB/s with bbr, 10.1 GB/s with reno, 9.9 GB/s switching
 *    at the first bulk frame (5 alternating runs);
 *  - small messages: bbr's pacing makes a stream of 8-byte sends leave as fewer segments
 *    (1.0 M messages took 0.31 M segments), reno sends one segment per message, whose
 *    delivery runs in the sender's system call on loopback: tag_bw 8 B -O 64 reached 1.2 M
 *    messages/s with bbr, 0.37 M with reno.
 * Loopback has no loss and no queue to protect, so the choice only trades these costs.
 */
Status TcpIface::choose_congestion() {
    if (config_.congestion == "system") return Status::ok;
    char current[16] = {};
    socklen_t len = sizeof(current) - 1;
    if (config_.congestion == "auto") {
        if (!device_.loopback) return Status::ok;
        if (::getsockopt(listen_fd_, IPPROTO_TCP, TCP_CONGESTION, current, &len) != 0) return Status::ok;
        default_cc_ = current;
        if (default_cc_ != kBulkCongestion) bulk_cc_ = kBulkCongestion;
        return Status::ok;
    }
    const std::string& name = config_.congestion;
    if (::setsockopt(listen_fd_, IPPROTO_TCP, TCP_CONGESTION, name.data(), static_cast<socklen_t>(name.size())) !=
        0) {
        int err = errno;
        LOOM_LOG_ERROR("tcp/{}: LOOM_TCP_CONGESTION={}: {}", device_.name, name,
                       err == ENOENT  ? "the kernel has no such algorithm"
                       : err == EPERM ? "not in net.ipv4.tcp_allowed_congestion_control (needs CAP_NET_ADMIN)"
                                      : std::strerror(err));
        return Status::invalid_config;
    }
    congestion_ = name;
    return Status::ok;
}

bool TcpIface::set_congestion(TcpEp* ep, const std::string& name) {
    if (::setsockopt(ep->fd, IPPROTO_TCP, TCP_CONGESTION, name.data(), static_cast<socklen_t>(name.size())) == 0) {
        return true;
    }
    if (errno == ENOENT || errno == EPERM) {
        // Not offered to this process after all: no more switching on this iface.
        LOOM_LOG_DEBUG("tcp/{}: congestion control {}: {}; keeping {} for bulk transfers", device_.name, name,
                       std::strerror(errno), default_cc_);
        bulk_cc_.clear();
    }
    return false;
}

void TcpIface::note_bulk(TcpEp* ep) {
    ep->cold->small_run = 0;
    if ((ep->flags & kEpBulk) || bulk_cc_.empty() || ep->fd < 0) return;
    if (set_congestion(ep, bulk_cc_)) ep->flags |= kEpBulk;
}

void TcpIface::note_small(TcpEp* ep) {
    if (++ep->cold->small_run < kBulkLinger) return;
    ep->flags &= ~kEpBulk;
    if (ep->fd >= 0) (void)set_congestion(ep, default_cc_);
}

TcpIface::~TcpIface() {
    // Endpoints the user did not destroy are destroyed here, silently; passive ones always are.
    ++defer_free_;
    while (!conns_.empty()) {
        TcpEp* ep = &conns_.front();
        ep->flags |= kEpDestroyed;
        if (ep->flags & kEpFailPending) {
            ep->flags &= ~kEpFailPending;
            --nfailing_;
        }
        teardown(ep, Status::canceled);
        ep->pending.clear();
        ucs::List<TcpEp, &TcpEp::conn_link>::remove(*ep);
        --nconns_;
        zombies_.push_back(*ep);
    }
    hot_ = nullptr;
    --defer_free_;
    while (TcpEp* ep = zombies_.pop_front()) free_ep(ep);
    std::free(spare_large_);
    if (listen_fd_ >= 0) {
        (void)epoll_.remove(listen_fd_);
        ::close(listen_fd_);
    }
}

Status TcpIface::query(IfaceAttr& attr) const {
    attr = {};
    attr.cap_flags = kCapAmShort | kCapAmBcopy | kCapAmZcopy | kCapPending | kCapPutShort | kCapPutBcopy |
                     kCapPutZcopy | kCapGetBcopy | kCapGetZcopy | kCapAtomic32 | kCapAtomic64 |
                     kCapConnectToIface | kCapErrHandlingPeerFailure | kCapEventRecv;
    std::size_t max_bcopy = max_am_bcopy();
    attr.am = {.max_short = max_short_, .max_bcopy = max_bcopy, .min_zcopy = 0, .max_zcopy = config_.max_am,
               .max_iov = kMaxIov, .opt_zcopy_align = 1, .max_hdr = kMaxAmZcopyHeader};
    attr.put = {.max_short = max_short_, .max_bcopy = seg_size_, .min_zcopy = 0, .max_zcopy = kMaxRmaFrame,
                .max_iov = kMaxIov, .opt_zcopy_align = 1, .max_hdr = 0};
    attr.get = {.max_short = 0, .max_bcopy = max_bcopy, .min_zcopy = 0, .max_zcopy = kMaxRmaFrame,
                .max_iov = kMaxIov, .opt_zcopy_align = 1, .max_hdr = 0};
    std::uint64_t ops = atomic_op_bit(AtomicOp::add) | atomic_op_bit(AtomicOp::and_) |
                        atomic_op_bit(AtomicOp::or_) | atomic_op_bit(AtomicOp::xor_) |
                        atomic_op_bit(AtomicOp::swap) | atomic_op_bit(AtomicOp::cswap);
    attr.atomic32_ops = attr.atomic64_ops = ops;
    attr.device_addr_len = sizeof(DeviceAddress);
    attr.iface_addr_len = sizeof(IfaceAddress);
    attr.ep_addr_len = 0;
    // Loopback figures measured on the development machine (2-core VM, Linux 6.12) with
    // loom_perftest between two processes, medians of alternating runs: 8-byte am_short
    // one-way latency 2.8 us (p50), of which the sender's send() is about 1.3 us
    // (perf: the rest is the receiver's recv and the kernel's delivery); 1 MiB am/put
    // zcopy streams at about the rate of a plain socket transfer, ~5.5 GB/s. Other
    // devices: the link speed from sysfs when the driver reports one, else 1 GB/s, plus
    // a wire latency of 10 us.
    attr.overhead = 1.3e-6;
    // A zero-copy get (a rendezvous's data) costs more than its round trip: the target
    // sends the payload with its own frame, and the initiator reads the headers alone
    // before it receives the payload straight into place. Calibrated on lo against the
    // protocol layer's forced-rendezvous and forced-eager tag_lat (64-256 KiB, medians of
    // 3, 2026-11-22): rendezvous is 8 us slower at 64 KiB, 5 us at 160 KiB, 1.5 us at
    // 192 KiB and 4.6 us faster at 256 KiB, so the curves cross near 210 KiB; 11 us puts
    // the rendezvous threshold model's switch point there. (The model charges eager the
    // sender's overhead per 64 KiB fragment, which tcp's pipelining mostly hides.)
    attr.zcopy_overhead = 11e-6;
    attr.latency = {device_.loopback ? 2.8e-6 : 10e-6, 0};
    attr.bandwidth_dedicated = device_.loopback ? 5.5e9 : link_bandwidth_;
    attr.bandwidth_shared = 0;
    attr.priority = 0;
    attr.ep_size = sizeof(TcpEp);
    return Status::ok;
}

Status TcpIface::get_device_address(std::uint8_t* out) const {
    DeviceAddress addr{kWireVersion, kFamilyInet, device_.addr.s_addr, net_stack_id()};
    std::memcpy(out, &addr, sizeof(addr));
    return Status::ok;
}

Status TcpIface::get_address(std::uint8_t* out) const {
    IfaceAddress addr{kWireVersion, listen_addr_.sin_port, cookie_};
    std::memcpy(out, &addr, sizeof(addr));
    return Status::ok;
}

/**
 * Reachability rule: the loopback device reaches only 127.0.0.0/8 addresses, and other
 * devices never reach those. Another device reaches a peer in its own IPv4 subnet, or
 * one the kernel routes out through this device's address (checked with a connected
 * UDP socket: no packet is sent, getsockname() tells the source address the route uses).
 */
bool TcpIface::is_reachable(const std::uint8_t* dev_addr, std::size_t dev_addr_len, const std::uint8_t* iface_addr,
                            std::size_t iface_addr_len, std::string* reason) const {
    DeviceAddress dev;
    IfaceAddress iface;
    if (parse_addresses(dev_addr, dev_addr_len, iface_addr, iface_addr_len, dev, iface, reason) != Status::ok) {
        return false;
    }
    bool peer_loopback = is_loopback_ip(dev.ip);
    if (device_.loopback || peer_loopback) {
        if (device_.loopback && peer_loopback) {
            if (dev.net_stack == net_stack_id()) return true;
            if (reason) *reason = "peer's loopback belongs to another host (network namespace)";
            return false;
        }
        if (reason) *reason = device_.loopback ? "lo reaches only 127.0.0.0/8" : "peer is on a loopback device";
        return false;
    }
    if ((dev.ip & device_.netmask.s_addr) == (device_.addr.s_addr & device_.netmask.s_addr)) return true;
    int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    bool routed = false;
    if (fd >= 0) {
        sockaddr_in peer{};
        peer.sin_family = AF_INET;
        peer.sin_addr.s_addr = dev.ip;
        peer.sin_port = iface.port;
        sockaddr_in local{};
        socklen_t len = sizeof(local);
        routed = ::connect(fd, reinterpret_cast<sockaddr*>(&peer), sizeof(peer)) == 0 &&
                 ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
                 local.sin_addr.s_addr == device_.addr.s_addr;
        ::close(fd);
    }
    if (!routed && reason) {
        *reason = "no route to " + ip_text(in_addr{dev.ip}) + " through " + device_.name;
    }
    return routed;
}

Result<int> TcpIface::event_fd() {
    // Someone may wait on the fd from now on: every connection must be in the set, also
    // the hot one (see update_hot). A segment that arrived while it was out is seen at once
    // (the set is level-triggered).
    keep_polled_ = true;
    if (hot_ != nullptr && (hot_->flags & kEpUnpolled)) repoll(hot_);
    return epoll_.fd();
}

Status TcpIface::event_arm() {
    // As event_fd(): whoever arms will sleep on the fd, which must see every connection.
    keep_polled_ = true;
    if (hot_ != nullptr && (hot_->flags & kEpUnpolled)) repoll(hot_);
    // The epoll set is level-triggered and parse_frames() consumes every whole frame it
    // read, so a readable socket keeps the fd readable: only the slow-path work (failures,
    // timers, pending sends, endpoints to free) needs progress without an fd event.
    if ((nfailing_ | ntimed_) != 0 || !pending_eps_.empty() || !zombies_.empty()) return Status::busy;
    return Status::ok;
}

std::string TcpIface::peer_name(const TcpEp* ep) const {
    return addr_text(ep->cold->peer) + (ep->flags & kEpPassive ? " (accepted on " : " (via ") + device_.name + ")";
}

// --- connections -------------------------------------------------------------------------------

Status TcpIface::set_socket_options(int fd, const char* what) {
    int one = 1;
    if (config_.nodelay && ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
        LOOM_LOG_WARN("tcp/{}: TCP_NODELAY on {} socket: {}", device_.name, what, std::strerror(errno));
    }
    if (!congestion_.empty() && ::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, congestion_.data(),
                                             static_cast<socklen_t>(congestion_.size())) != 0) {
        LOOM_LOG_WARN("tcp/{}: TCP_CONGESTION={} on {} socket: {}", device_.name, congestion_, what,
                      std::strerror(errno));
    }
    if (config_.keepalive_idle != ucs::config::kTimeInf) {
        // Whole seconds, at least one: the granularity of the socket options.
        auto secs = [](std::chrono::nanoseconds t) {
            auto s = std::chrono::duration_cast<std::chrono::seconds>(t).count();
            return static_cast<int>(std::clamp<long long>(s, 1, 32767));
        };
        int idle = secs(config_.keepalive_idle), intvl = secs(config_.keepalive_interval);
        int cnt = static_cast<int>(config_.keepalive_count);
        if (::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) != 0 ||
            ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) != 0 ||
            ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl)) != 0 ||
            ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt)) != 0) {
            LOOM_LOG_WARN("tcp/{}: keepalive on {} socket: {}", device_.name, what, std::strerror(errno));
        }
    }
    if (config_.sndbuf != ucs::config::kSizeAuto) {
        int v = static_cast<int>(std::min<std::size_t>(config_.sndbuf, INT32_MAX));
        if (::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)) != 0) {
            LOOM_LOG_WARN("tcp/{}: SO_SNDBUF={}: {}", device_.name, v, std::strerror(errno));
        }
    }
    if (config_.rcvbuf != ucs::config::kSizeAuto) {
        int v = static_cast<int>(std::min<std::size_t>(config_.rcvbuf, INT32_MAX));
        if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v)) != 0) {
            LOOM_LOG_WARN("tcp/{}: SO_RCVBUF={}: {}", device_.name, v, std::strerror(errno));
        }
    }
    return Status::ok;
}

std::uint32_t TcpIface::wanted_events(const TcpEp* ep) {
    switch (ep->state) {
    case ConnState::connecting: return ucs::kEventWrite;
    case ConnState::handshake: return ucs::kEventRead;
    case ConnState::connected: return ucs::kEventRead | (ep->tx != nullptr ? ucs::kEventWrite : 0);
    default: return 0;
    }
}

void TcpIface::update_poll(TcpEp* ep) {
    std::uint32_t events = wanted_events(ep);
    if (events == 0) return;
    update_hot();
    if ((ep->flags & kEpUnpolled) || events == ep->poll || ep->fd < 0) return;
    if (epoll_.modify(ep->fd, events, reinterpret_cast<std::uint64_t>(ep)) != Status::ok) {
        fail(ep, Status::io_error);
        return;
    }
    ep->poll = static_cast<std::uint8_t>(events);
}

/**
 * With a single established connection that has nothing waiting to be written and no
 * payload streaming in (the common case of two processes talking), progress reads that
 * socket directly: a recv() takes the place of epoll_wait() as the one system call of a
 * call, and a message that arrived is read in the same call instead of after an
 * epoll_wait that only says it is there (measured: ~10% of the loopback one-way
 * latency). Every kHotPollPeriod-th call still polls the whole set, for the listening
 * socket.
 *
 * The hot connection also leaves the epoll set (kEpUnpolled), unless someone asked for
 * the iface's event fd (to sleep on it): a socket in an epoll set runs the set's wake-up
 * callback in the sender's system call for every segment it receives (on loopback the
 * sender's CPU delivers it), which costs ~0.1 us of a 2.8 us one-way trip of 8 bytes
 * (measured with a plain socket pair, 6 alternating runs: 2.73 us median unregistered,
 * 2.83 us registered). Each change of the hot connection costs one epoll_ctl.
 */
void TcpIface::update_hot() {
    TcpEp* hot = nullptr;
    if (nconns_ == 1 && nfailing_ == 0) {
        TcpEp& only = conns_.front();
        if (only.state == ConnState::connected && only.tx == nullptr && only.fd >= 0 && only.rx->mode == kRxFrames) {
            hot = &only;
        }
    }
    if (hot_ != nullptr && hot_ != hot && (hot_->flags & kEpUnpolled)) repoll(hot_);
    hot_ = hot;
    if (hot != nullptr && !keep_polled_ && !(hot->flags & kEpUnpolled)) unpoll(hot);
}

void TcpIface::unpoll(TcpEp* ep) {
    if (epoll_.remove(ep->fd) != Status::ok) return;  // logged; it stays polled
    ep->flags |= kEpUnpolled;
    ep->poll = 0;
}

void TcpIface::repoll(TcpEp* ep) {
    ep->flags &= ~kEpUnpolled;
    std::uint32_t events = wanted_events(ep);
    if (ep->fd < 0 || events == 0) return;
    if (epoll_.add(ep->fd, events, reinterpret_cast<std::uint64_t>(ep)) != Status::ok) {
        fail(ep, Status::io_error);
        return;
    }
    ep->poll = static_cast<std::uint8_t>(events);
}

Result<Ep*> TcpIface::ep_create(const EpParams& params) {
    DeviceAddress dev;
    IfaceAddress addr;
    std::string reason;
    if (parse_addresses(params.dev_addr, params.dev_addr_len, params.iface_addr, params.iface_addr_len, dev, addr,
                        &reason) != Status::ok) {
        LOOM_LOG_ERROR("tcp/{}: ep_create: {}", device_.name, reason);
        return Status::invalid_address;
    }
    if (!is_reachable(params.dev_addr, params.dev_addr_len, params.iface_addr, params.iface_addr_len, &reason)) {
        LOOM_LOG_ERROR("tcp/{}: ep_create: {}", device_.name, reason);
        return Status::unreachable;
    }
    // The peer connected to us already and nobody uses that connection yet: it becomes the endpoint.
    if (TcpEp* conn = find_conn(addr.cookie, true, true); conn != nullptr) {
        conn->flags &= ~kEpPassive;
        conn->cold->on_error = params.on_error;
        conn->cold->on_error_arg = params.on_error_arg;
        LOOM_LOG_DEBUG("tcp/{}: endpoint to {} shares the connection the peer opened", device_.name, peer_name(conn));
        return static_cast<Ep*>(conn);
    }
    auto* rx = static_cast<RxState*>(rx_pool_.get());
    if (rx == nullptr) return Status::no_memory;
    auto* ep = new TcpEp{};
    ep->iface = this;
    ep->fd = -1;
    ep->state = ConnState::connecting;
    ep->rx = rx;
    *rx = RxState{};
    ep->cold = new EpCold{};
    ep->cold->on_error = params.on_error;
    ep->cold->on_error_arg = params.on_error_arg;
    ep->cold->peer.sin_family = AF_INET;
    ep->cold->peer.sin_addr.s_addr = dev.ip;
    ep->cold->peer.sin_port = addr.port;
    ep->cold->peer_cookie = addr.cookie;
    ep->cold->deadline = ucs::get_time() + conn_timeout_ticks_;
    ep->flags |= kEpTimed;
    ++ntimed_;
    conns_.push_back(*ep);
    ++nconns_;
    update_hot();
    Status status = connect_socket(ep);
    if (status == Status::no_resource || status == Status::io_error) {
        // The local system refused (no fds): nothing was attempted, the caller may retry.
        ep_destroy(ep);
        return status;
    }
    return static_cast<Ep*>(ep);
}

/** Starts a non-blocking connect; a failure to reach the peer goes through the retry logic. */
Status TcpIface::connect_socket(TcpEp* ep) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int err = errno;
        LOOM_LOG_ERROR("tcp/{}: socket() failed: {}", device_.name, std::strerror(err));
        return err == EMFILE || err == ENFILE ? Status::no_resource : Status::io_error;
    }
    (void)set_socket_options(fd, "connecting");
    ep->fd = fd;
    if (Status s = epoll_.add(fd, ucs::kEventWrite, reinterpret_cast<std::uint64_t>(ep)); s != Status::ok) {
        ::close(fd);
        ep->fd = -1;
        return Status::io_error;
    }
    ep->poll = ucs::kEventWrite;
    int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&ep->cold->peer), sizeof(ep->cold->peer));
    if (rc != 0 && errno != EINPROGRESS) connect_failed(ep, errno);
    // Connected at once (or in flight): EPOLLOUT reports it and on_connect_ready sends the handshake.
    return Status::ok;
}

void TcpIface::connect_failed(TcpEp* ep, int err) {
    (void)epoll_.remove(ep->fd);
    ::close(ep->fd);
    ep->fd = -1;
    ep->poll = 0;
    if (retryable(err) && ep->retries < config_.conn_retries) {
        ++ep->retries;
        ep->cold->retry_at = ucs::get_time() + retry_interval_ticks_;
        LOOM_LOG_DEBUG("tcp/{}: connect to {} failed ({}), retry {} of {}", device_.name, peer_name(ep),
                       std::strerror(err), ep->retries, config_.conn_retries);
        return;
    }
    LOOM_LOG_WARN("tcp/{}: connect to {} failed: {}", device_.name, peer_name(ep), std::strerror(err));
    fail(ep, errno_status(err));
}

void TcpIface::on_connect_ready(TcpEp* ep) {
    int err = 0;
    socklen_t len = sizeof(err);
    if (::getsockopt(ep->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err == 0) {
        // EPOLLOUT can also mean "not yet" for a socket that reports no error: check it is connected.
        sockaddr_in peer;
        socklen_t plen = sizeof(peer);
        if (::getpeername(ep->fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0) {
            if (errno == ENOTCONN) return;
            err = errno;
        }
    }
    if (err != 0) {
        connect_failed(ep, err);
        return;
    }
    ConnRequest req{};
    req.magic = kHandshakeMagic;
    req.version = kWireVersion;
    req.target_cookie = ep->cold->peer_cookie;
    req.source_cookie = cookie_;
    req.source_ip = device_.addr.s_addr;
    req.source_port = listen_addr_.sin_port;
    // A fresh socket's send buffer is empty: the request goes out whole or the socket is broken.
    ssize_t n = ::send(ep->fd, &req, sizeof(req), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n != static_cast<ssize_t>(sizeof(req))) {
        connect_failed(ep, n < 0 ? errno : EIO);
        return;
    }
    ep->state = ConnState::handshake;
    update_poll(ep);
}

void TcpIface::accept_connections() {
    for (unsigned i = 0; i < kMaxAcceptsPerProgress; ++i) {
        sockaddr_in peer{};
        socklen_t len = sizeof(peer);
        int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
                LOOM_LOG_WARN("tcp/{}: accept failed: {}", device_.name, std::strerror(errno));
            }
            return;
        }
        auto* rx = static_cast<RxState*>(rx_pool_.get());
        if (rx == nullptr) {
            LOOM_LOG_WARN("tcp/{}: out of memory: closing the connection from {}", device_.name, addr_text(peer));
            ::close(fd);
            continue;
        }
        *rx = RxState{};
        (void)set_socket_options(fd, "accepted");
        auto* ep = new TcpEp{};
        ep->iface = this;
        ep->fd = fd;
        ep->state = ConnState::handshake;
        ep->flags = kEpPassive | kEpTimed;
        ep->rx = rx;
        ep->cold = new EpCold{};
        ep->cold->peer = peer;
        ep->cold->deadline = ucs::get_time() + conn_timeout_ticks_;
        ++ntimed_;
        conns_.push_back(*ep);
        ++nconns_;
        update_hot();
        if (epoll_.add(fd, ucs::kEventRead, reinterpret_cast<std::uint64_t>(ep)) != Status::ok) {
            fail(ep, Status::io_error);
        }
        ep->poll = ucs::kEventRead;
        LOOM_LOG_DEBUG("tcp/{}: accepted a connection from {}", device_.name, addr_text(peer));
    }
}

/** Reads the handshake bytes still missing into rx->data; false while incomplete (or failed). */
static bool read_exact(TcpIface* iface, TcpEp* ep, std::size_t size) {
    if (!iface->rx_hold_buffer(ep)) return false;
    RxState* rx = ep->rx;
    ssize_t n = ::recv(ep->fd, rx->data + rx->length, size - rx->length, MSG_DONTWAIT);
    if (n > 0) {
        rx->length += static_cast<std::uint32_t>(n);
        return rx->length == size;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
    if (ep->flags & kEpPassive) {
        LOOM_LOG_DEBUG("tcp: {} closed during the handshake", iface->peer_name(ep));
    } else {
        LOOM_LOG_WARN("tcp: {} closed the connection during the handshake{}{}", iface->peer_name(ep),
                      n < 0 ? ": " : "", n < 0 ? std::strerror(errno) : "");
    }
    iface->fail(ep, n < 0 ? errno_status(errno) : Status::connection_reset);
    return false;
}

void TcpIface::on_handshake(TcpEp* ep) {
    if (ep->flags & kEpPassive) {
        on_conn_request(ep);
    } else {
        on_conn_reply(ep);
    }
}

void TcpIface::on_conn_request(TcpEp* ep) {
    if (!read_exact(this, ep, sizeof(ConnRequest))) return;
    ConnRequest req;
    std::memcpy(&req, ep->rx->data, sizeof(req));
    ep->rx->length = 0;
    rx_release_if_idle(ep);
    Status verdict = Status::ok;
    if (req.magic != kHandshakeMagic) {
        LOOM_LOG_WARN("tcp/{}: closing the connection from {}: not a Loom tcp handshake (magic {:#010x})",
                      device_.name, addr_text(ep->cold->peer), req.magic);
        fail(ep, Status::malformed_packet);
        return;
    }
    if (req.version != kWireVersion) {
        LOOM_LOG_WARN("tcp/{}: closing the connection from {}: protocol version {} (this side speaks {})",
                      device_.name, addr_text(ep->cold->peer), req.version, kWireVersion);
        verdict = Status::version_mismatch;
    } else if (req.target_cookie != cookie_) {
        LOOM_LOG_WARN("tcp/{}: closing the connection from {}: it was meant for another iface (stale address?)",
                      device_.name, addr_text(ep->cold->peer));
        verdict = Status::rejected;
    }
    if (verdict != Status::ok) {
        (void)send_conn_reply(ep, verdict, req.source_cookie);
        fail(ep, verdict);
        return;
    }
    ep->cold->peer_cookie = req.source_cookie;
    // Both sides connecting at once: keep the connection of the side with the lower cookie.
    // (An iface connected to itself has two ends with the same cookie: nothing to share.)
    TcpEp* mine = req.source_cookie != cookie_ ? find_conn(req.source_cookie, false, false) : nullptr;
    if (mine != nullptr && cookie_ < req.source_cookie) {
        // The peer will take over our connection and close this one once ours is up.
        ep->flags |= kEpDeferred;
        LOOM_LOG_DEBUG("tcp/{}: holding the handshake of {}: our own connection to it is on the way", device_.name,
                       addr_text(ep->cold->peer));
        return;
    }
    if (!send_conn_reply(ep, Status::ok, req.source_cookie)) return;
    if (mine != nullptr) {
        adopt(mine, ep);
        return;
    }
    LOOM_LOG_DEBUG("tcp/{}: connection from {} is up", device_.name, addr_text(ep->cold->peer));
    connection_up(ep);
}

bool TcpIface::send_conn_reply(TcpEp* ep, Status verdict, std::uint64_t source_cookie) {
    ConnReply reply{};
    reply.magic = kHandshakeMagic;
    reply.version = kWireVersion;
    reply.status = status_to_wire(verdict);
    reply.source_cookie = source_cookie;
    ssize_t n = ::send(ep->fd, &reply, sizeof(reply), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(sizeof(reply))) return true;
    if (verdict == Status::ok) fail(ep, n < 0 ? errno_status(errno) : Status::io_error);
    return false;
}

/**
 * A connection to the iface with @p peer_cookie: an unadopted accepted one (@p passive),
 * else a user endpoint not yet connected; @p connected asks for an established one.
 */
TcpEp* TcpIface::find_conn(std::uint64_t peer_cookie, bool passive, bool connected) const {
    for (const TcpEp& ep : conns_) {
        if (ep.cold->peer_cookie != peer_cookie || ep.state == ConnState::failed) continue;
        if (((ep.flags & kEpPassive) != 0) != passive) continue;
        if (connected ? ep.state == ConnState::connected : ep.state != ConnState::connected) {
            return const_cast<TcpEp*>(&ep);
        }
    }
    return nullptr;
}

/** @p user (not connected yet) takes over the socket of @p accepted, which goes away. */
void TcpIface::adopt(TcpEp* user, TcpEp* accepted) {
    if (user->fd >= 0) {
        (void)epoll_.remove(user->fd);
        ::close(user->fd);
    }
    user->fd = accepted->fd;
    accepted->fd = -1;
    user->poll = accepted->poll;
    if (epoll_.modify(user->fd, user->poll, reinterpret_cast<std::uint64_t>(user)) != Status::ok) {
        fail(user, Status::io_error);
    }
    user->rx->length = 0;  // a half-read answer to our own handshake is moot
    rx_release_if_idle(user);
    free_rx(accepted->rx);
    accepted->rx = nullptr;
    user->cold->peer = accepted->cold->peer;
    accepted->flags |= kEpDestroyed;
    accepted->state = ConnState::failed;  // later events of this progress call ignore it
    untime(accepted);
    ucs::List<TcpEp, &TcpEp::conn_link>::remove(*accepted);
    --nconns_;
    zombies_.push_back(*accepted);
    LOOM_LOG_DEBUG("tcp/{}: endpoint to {} shares the connection the peer opened", device_.name, peer_name(user));
    if (user->state != ConnState::failed) connection_up(user);
}

/** Answers the handshakes held for @p peer_cookie, now that our own connection to it is up or gone. */
void TcpIface::release_deferred(std::uint64_t peer_cookie) {
    for (TcpEp& ep : conns_.safe()) {
        if (!(ep.flags & kEpDeferred) || ep.cold->peer_cookie != peer_cookie || ep.state != ConnState::handshake) {
            continue;
        }
        ep.flags &= ~kEpDeferred;
        if (send_conn_reply(&ep, Status::ok, peer_cookie)) connection_up(&ep);
    }
}

void TcpIface::on_conn_reply(TcpEp* ep) {
    if (!read_exact(this, ep, sizeof(ConnReply))) return;
    ConnReply reply;
    std::memcpy(&reply, ep->rx->data, sizeof(reply));
    ep->rx->length = 0;
    rx_release_if_idle(ep);
    if (reply.magic != kHandshakeMagic || reply.source_cookie != cookie_) {
        LOOM_LOG_WARN("tcp/{}: {} answered the handshake with garbage (magic {:#010x})", device_.name,
                      peer_name(ep), reply.magic);
        fail(ep, Status::malformed_packet);
        return;
    }
    Status status = status_from_wire(reply.status);
    if (status != Status::ok) {
        LOOM_LOG_WARN("tcp/{}: {} refused the connection: {}", device_.name, peer_name(ep), to_string(status));
        fail(ep, is_peer_error(status) || status == Status::version_mismatch ? status : Status::rejected);
        return;
    }
    connection_up(ep);
}

void TcpIface::connection_up(TcpEp* ep) {
    ep->state = ConnState::connected;
    untime(ep);
    update_poll(ep);
    if (!(ep->flags & kEpPassive)) release_deferred(ep->cold->peer_cookie);
}

void TcpIface::untime(TcpEp* ep) {
    if (ep->flags & kEpTimed) {
        ep->flags &= ~kEpTimed;
        --ntimed_;
    }
}

void TcpIface::check_timers(ucs::Ticks now) {
    for (TcpEp& ep : conns_.safe()) {
        if (!(ep.flags & kEpTimed) || ep.state == ConnState::failed) continue;
        if (now >= ep.cold->deadline) {
            LOOM_LOG_WARN("tcp/{}: connection {} {} timed out", device_.name,
                          ep.flags & kEpPassive ? "from" : "to", peer_name(&ep));
            fail(&ep, Status::peer_timeout);
        } else if (ep.state == ConnState::connecting && ep.fd < 0 && now >= ep.cold->retry_at) {
            Status s = connect_socket(&ep);
            if (s != Status::ok) fail(&ep, s);
        }
    }
}

// --- progress ----------------------------------------------------------------------------------

unsigned TcpIface::progress() {
    // (Not while a large payload streams in: there, spinning on recv() holds the socket lock
    // against the sender's delivery; epoll_wait() checks readiness without it.)
    if (hot_ != nullptr && hot_->rx->mode == kRxFrames && (++poll_tick_ % kHotPollPeriod) != 0) {
        ++defer_free_;
        unsigned count = rx_progress(hot_) ? 1 : 0;
        --defer_free_;
        if (LOOM_UNLIKELY((nfailing_ | ntimed_) != 0 || !pending_eps_.empty() || !zombies_.empty())) {
            count += progress_slow();
        }
        return count;
    }
    // A payload started streaming into the hot connection: it goes back into the set.
    if (LOOM_UNLIKELY(hot_ != nullptr && hot_->rx->mode != kRxFrames)) update_hot();
    // epoll_wait() on the EventSet's fd directly: the one system call of an idle progress,
    // without EventSet::wait()'s conversion of every event (measurable at this rate).
    epoll_event events[kMaxEventsPerProgress];
    int ready = ::epoll_wait(epoll_.fd(), events, kMaxEventsPerProgress, 0);
    unsigned count = 0;
    if (hot_ != nullptr && (hot_->flags & kEpUnpolled)) {
        // Not in the set: read it here too, so this call misses nothing that arrived.
        ++defer_free_;
        count += rx_progress(hot_) ? 1 : 0;
        --defer_free_;
    }
    if (ready > 0) {
        count += static_cast<unsigned>(ready);
        ++defer_free_;
        for (int i = 0; i < ready; ++i) {
            auto* ep = reinterpret_cast<TcpEp*>(events[i].data.u64);
            std::uint32_t ev = events[i].events;
            if (ep == nullptr) {
                accept_connections();
                continue;
            }
            // (An endpoint destroyed by an earlier callback of this call is failed: skipped below.)
            if (LOOM_LIKELY(ep->state == ConnState::connected)) {
                if ((ev & EPOLLOUT) && ep->tx != nullptr) tx_progress(ep);
                if ((ev & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP)) && ep->state == ConnState::connected) {
                    rx_progress(ep);
                }
            } else if (ep->state == ConnState::handshake) {
                on_handshake(ep);
            } else if (ep->state == ConnState::connecting) {
                on_connect_ready(ep);
            }
        }
        --defer_free_;
    } else if (LOOM_UNLIKELY(ready < 0 && errno != EINTR) && !epoll_failed_) {
        epoll_failed_ = true;  // logged once: progress would repeat it at every call
        LOOM_LOG_ERROR("tcp/{}: epoll_wait failed: {}", device_.name, std::strerror(errno));
    }
    if (LOOM_UNLIKELY((nfailing_ | ntimed_) != 0 || !pending_eps_.empty() || !zombies_.empty())) {
        count += progress_slow();
    }
    return count;
}

unsigned TcpIface::progress_slow() {
    unsigned count = 0;
    ++defer_free_;
    if (ntimed_ != 0) check_timers(ucs::get_time());
    if (nfailing_ != 0) count += process_failures();
    if (!pending_eps_.empty()) count += dispatch_pending();
    --defer_free_;
    if (defer_free_ == 0) {
        while (TcpEp* ep = zombies_.pop_front()) free_ep(ep);
    }
    return count;
}

void TcpIface::tx_progress(TcpEp* ep) {
    TxDesc* desc = ep->tx;
    msghdr msg{};
    msg.msg_iov = desc->iov + desc->iov_pos;
    msg.msg_iovlen = desc->iovcnt - desc->iov_pos;
    ssize_t n = ::sendmsg(ep->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
        LOOM_LOG_DEBUG("tcp/{}: send to {} failed: {}", device_.name, peer_name(ep), std::strerror(errno));
        fail(ep, errno_status(errno));
        return;
    }
    auto left = static_cast<std::size_t>(n);
    while (desc->iov_pos < desc->iovcnt && left >= desc->iov[desc->iov_pos].iov_len) {
        left -= desc->iov[desc->iov_pos].iov_len;
        ++desc->iov_pos;
    }
    if (desc->iov_pos < desc->iovcnt) {
        iovec& cur = desc->iov[desc->iov_pos];
        cur.iov_base = static_cast<std::uint8_t*>(cur.iov_base) + left;
        cur.iov_len -= left;
        return;
    }
    Completion* comp = desc->comp;
    ep->tx = nullptr;
    put_tx_desc(desc);
    if (!ep->cold->replies.empty()) write_replies(ep);
    update_poll(ep);
    if (comp != nullptr) completion_update(comp, Status::ok);
}

void TcpIface::write_replies(TcpEp* ep) {
    while (ep->tx == nullptr && ep->state == ConnState::connected) {
        ReplyDesc* reply = ep->cold->replies.pop_front();
        if (reply == nullptr) return;
        iovec iov[2] = {{&reply->header, sizeof(reply->header)}, {const_cast<void*>(reply->data), reply->length}};
        unsigned iovcnt = reply->length ? 2 : 1;
        msghdr msg{};
        msg.msg_iov = iov;
        msg.msg_iovlen = iovcnt;
        ssize_t n = ::sendmsg(ep->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n != static_cast<ssize_t>(sizeof(reply->header) + reply->length)) {
            // Inline data is copied; a get reply's data is the registered memory itself.
            (void)send_incomplete(ep, iov, iovcnt, n, reply->data == &reply->value ? 2 : 1, nullptr);
        }
        reply_pool_.put(reply);
    }
}

bool TcpIface::queue_reply(TcpEp* ep, const FrameHeader& fh, const void* data, std::size_t length, bool copy_data) {
    auto* reply = static_cast<ReplyDesc*>(reply_pool_.get());
    if (reply == nullptr) {
        LOOM_LOG_ERROR("tcp/{}: out of memory for a reply to {}: failing the connection", device_.name, peer_name(ep));
        fail(ep, Status::no_memory);
        return false;
    }
    reply->header = fh;
    reply->length = length;
    if (copy_data && length > 0) {
        LOOM_ASSERT(length <= sizeof(reply->value));
        std::memcpy(&reply->value, data, length);
        reply->data = &reply->value;
    } else {
        reply->data = data;
    }
    ep->cold->replies.push_back(*reply);
    return true;
}

Status TcpIface::send_incomplete(TcpEp* ep, const iovec* iov, unsigned iovcnt, ssize_t sent, unsigned ncopy,
                                 Completion* comp) {
    if (sent < 0) {
        int err = errno;
        if (err != EAGAIN && err != EWOULDBLOCK && err != EINTR) {
            LOOM_LOG_DEBUG("tcp/{}: send to {} failed: {}", device_.name, peer_name(ep), std::strerror(err));
            fail(ep, errno_status(err));
            return ep->cold->error;
        }
        sent = 0;
    }
    TxDesc* desc = get_tx_desc();
    if (desc == nullptr) {
        // Part of the frame is on the wire and the rest cannot be kept: the stream is lost.
        LOOM_LOG_ERROR("tcp/{}: out of memory for a send buffer: failing the connection to {}", device_.name,
                       peer_name(ep));
        fail(ep, Status::no_memory);
        return sent == 0 ? Status::no_memory : Status::ok;
    }
    auto skip = static_cast<std::size_t>(sent);
    std::uint8_t* copy = desc->data;
    unsigned out = 0;
    bool referenced = false;  // user memory still to be read: the operation is not complete
    for (unsigned i = 0; i < iovcnt; ++i) {
        auto* base = static_cast<std::uint8_t*>(iov[i].iov_base);
        std::size_t len = iov[i].iov_len;
        if (skip >= len) {
            skip -= len;
            continue;
        }
        base += skip;
        len -= skip;
        skip = 0;
        if (i < ncopy) {
            // Copied pieces are contiguous in desc->data: one iovec covers them all.
            if (out == 0 || desc->iov[out - 1].iov_base != desc->data) {
                desc->iov[out++] = {copy, 0};
            }
            std::memcpy(copy, base, len);
            copy += len;
            desc->iov[out - 1].iov_len += len;
        } else {
            desc->iov[out++] = {base, len};
            referenced = true;
        }
    }
    desc->iovcnt = static_cast<std::uint8_t>(out);
    desc->iov_pos = 0;
    desc->comp = referenced ? comp : nullptr;
    ep->tx = desc;
    update_poll(ep);
    if (referenced) return Status::in_progress;
    // Everything left was copied: done for the caller (its Completion, if any, is not used).
    return Status::ok;
}

Status TcpIface::send_desc_incomplete(TcpEp* ep, TxDesc* desc, std::uint8_t* start, std::size_t total,
                                      ssize_t sent) {
    if (sent < 0) {
        int err = errno;
        if (err != EAGAIN && err != EWOULDBLOCK && err != EINTR) {
            put_tx_desc(desc);
            LOOM_LOG_DEBUG("tcp/{}: send to {} failed: {}", device_.name, peer_name(ep), std::strerror(err));
            fail(ep, errno_status(err));
            return ep->cold->error;
        }
        sent = 0;
    }
    desc->iov[0] = {start + sent, total - static_cast<std::size_t>(sent)};
    desc->iovcnt = 1;
    desc->iov_pos = 0;
    desc->comp = nullptr;
    ep->tx = desc;
    update_poll(ep);
    return Status::ok;
}

Status TcpIface::stage(TcpEp* ep, const iovec* iov, std::size_t iovcnt, std::size_t total) {
    TxDesc* desc = ep->tx;
    if (desc == nullptr) {
        if (total <= kSmallStageBytes && (desc = static_cast<TxDesc*>(tx_small_pool_.get())) != nullptr) {
            desc->small = true;
        } else if ((desc = get_tx_desc()) == nullptr) {
            return Status::no_resource;
        }
        desc->iov[0] = {desc->data, 0};
        desc->iovcnt = 1;
        desc->iov_pos = 0;
        desc->comp = nullptr;
        ep->tx = desc;
    }
    std::size_t used = desc->iov[0].iov_len;
    if (desc->small && used + total > kSmallStageBytes && used + total <= kMaxHeaderRoom + seg_size_) {
        // Outgrew the small buffer: move what is staged to a whole segment's.
        TxDesc* large = get_tx_desc();
        if (large == nullptr) return Status::no_resource;
        std::memcpy(large->data, desc->data, used);
        large->iov[0] = {large->data, used};
        large->iovcnt = 1;
        large->iov_pos = 0;
        large->comp = nullptr;
        put_tx_desc(desc);
        ep->tx = desc = large;
    }
    if (used + total > kMaxHeaderRoom + seg_size_) {
        if (used == 0) {
            ep->tx = nullptr;
            put_tx_desc(desc);
        }
        return Status::no_resource;
    }
    std::uint8_t* out = desc->data + used;
    for (std::size_t i = 0; i < iovcnt; ++i) {
        if (iov[i].iov_len == 0) continue;  // an empty piece may have a null base
        std::memcpy(out, iov[i].iov_base, iov[i].iov_len);
        out += iov[i].iov_len;
    }
    desc->iov[0].iov_len = used + total;
    return Status::ok;
}

Status TcpIface::not_ready(TcpEp* ep) const {
    return ep->state == ConnState::failed ? ep->cold->error : Status::no_resource;
}

// --- failures -----------------------------------------------------------------------------------

void TcpIface::fail(TcpEp* ep, Status status) {
    if (ep->state == ConnState::failed) return;
    ep->state = ConnState::failed;
    ep->cold->error = status;
    ep->flags |= kEpFailPending;
    ++nfailing_;
    // No connection is read directly while failures are pending; a hot one that is still
    // fine goes back into the epoll set (a failed one stays out: teardown closes it).
    TcpEp* hot = hot_;
    hot_ = nullptr;
    if (hot != nullptr && hot != ep && (hot->flags & kEpUnpolled)) repoll(hot);
}

unsigned TcpIface::process_failures() {
    unsigned count = 0;
    while (nfailing_ != 0) {
        TcpEp* ep = nullptr;
        for (TcpEp& e : conns_) {
            if (e.flags & kEpFailPending) {
                ep = &e;
                break;
            }
        }
        if (ep == nullptr) {
            nfailing_ = 0;  // cannot happen: every flagged ep is in conns_
            break;
        }
        ep->flags &= ~kEpFailPending;
        --nfailing_;
        ++count;
        Status status = ep->cold->error;
        teardown(ep, status);
        if (ep->flags & kEpPassive) {
            ucs::List<TcpEp, &TcpEp::conn_link>::remove(*ep);
            --nconns_;
            update_hot();
            zombies_.push_back(*ep);
            continue;
        }
        LOOM_LOG_DEBUG("tcp/{}: endpoint to {} failed: {}", device_.name, peer_name(ep), to_string(status));
        release_deferred(ep->cold->peer_cookie);
        if (!(ep->flags & kEpDestroyed) && ep->cold->on_error != nullptr) {
            ep->cold->on_error(ep->cold->on_error_arg, ep, status);
        }
    }
    update_hot();
    return count;
}

void TcpIface::teardown(TcpEp* ep, Status status) {
    if (ep->fd >= 0) {
        if (ep->poll != 0) (void)epoll_.remove(ep->fd);  // 0: not in the set (unpolled, or never added)
        ::close(ep->fd);
        ep->fd = -1;
    }
    untime(ep);
    if (ep->pending_link.linked()) ucs::List<TcpEp, &TcpEp::pending_link>::remove(*ep);
    ep->poll = 0;
    ep->flags &= ~(kEpDirty | kEpDeferred | kEpUnpolled);
    while (ReplyDesc* reply = ep->cold->replies.pop_front()) reply_pool_.put(reply);
    // The receive buffer stays until the endpoint is freed: a handler running on it may
    // have destroyed the endpoint, and the parser returns to the buffer afterwards.
    TxDesc* tx = ep->tx;
    ep->tx = nullptr;
    if (tx != nullptr) {
        Completion* comp = tx->comp;
        put_tx_desc(tx);
        if (comp != nullptr) completion_update(comp, status);
    }
    fail_outstanding(ep, status);
}

void TcpIface::fail_outstanding(TcpEp* ep, Status status) {
    while (ReqDesc* req = ep->outstanding.pop_front()) complete_req(ep, req, status);
}

void TcpIface::cancel(TcpEp* ep) {
    if (ep->state != ConnState::failed) {
        ep->state = ConnState::failed;
        ep->cold->error = Status::canceled;
    }
    ++defer_free_;
    teardown(ep, Status::canceled);
    --defer_free_;
}

void TcpIface::ep_destroy(Ep* base) {
    auto* ep = static_cast<TcpEp*>(base);
    if (ep->flags & kEpDestroyed) return;
    ep->flags |= kEpDestroyed;
    if (ep->flags & kEpFailPending) {
        ep->flags &= ~kEpFailPending;
        --nfailing_;
    }
    if (ep->state != ConnState::failed) {
        ep->state = ConnState::failed;
        ep->cold->error = Status::canceled;
    }
    ++defer_free_;
    teardown(ep, Status::canceled);
    ep->pending.clear();
    ucs::List<TcpEp, &TcpEp::conn_link>::remove(*ep);
    --nconns_;
    update_hot();
    // A handshake held for this endpoint's connection must not wait for it any more.
    if (!(ep->flags & kEpPassive)) release_deferred(ep->cold->peer_cookie);
    --defer_free_;
    if (defer_free_ > 0) {
        zombies_.push_back(*ep);
    } else {
        free_ep(ep);
    }
}

void TcpIface::free_ep(TcpEp* ep) {
    if (ep->rx != nullptr) {
        if (ep->rx->mode == kRxDirect && ep->rx->frame == FrameType::am) put_large_buffer(ep->rx->large);
        free_rx(ep->rx);
    }
    delete ep->cold;
    delete ep;
}

void TcpIface::free_rx(RxState* rx) {
    if (rx->data != nullptr) rx_buf_pool_.put(rx->data);
    rx_pool_.put(rx);
}

bool TcpIface::rx_hold_buffer(TcpEp* ep) {
    RxState* rx = ep->rx;
    if (LOOM_LIKELY(rx->data != nullptr)) return true;
    rx->data = static_cast<std::uint8_t*>(rx_buf_pool_.get());
    if (LOOM_LIKELY(rx->data != nullptr)) return true;
    LOOM_LOG_ERROR("tcp/{}: no memory for a receive buffer: closing the connection to {}", device_.name,
                   peer_name(ep));
    fail(ep, Status::no_memory);
    return false;
}

// --- pending requests and flush ------------------------------------------------------------------

void TcpIface::pending_purge(TcpEp* ep, PendingPurgeCallback cb, void* arg) {
    if (ep->pending_link.linked()) ucs::List<TcpEp, &TcpEp::pending_link>::remove(*ep);
    while (PendingReq* req = ep->pending.pop_front()) {
        if (cb != nullptr) cb(req, arg);
    }
}

unsigned TcpIface::dispatch_pending() {
    unsigned count = 0;
    bool progressed = true;
    // One request per endpoint per round: endpoints share the progress call fairly.
    for (unsigned round = 0; progressed && round < kMaxPendingRounds; ++round) {
        progressed = false;
        for (TcpEp& ep : pending_eps_.safe()) {
            if (!ep.can_send()) continue;
            PendingReq* req = ep.pending.pop_front();
            if (req == nullptr) {
                ucs::List<TcpEp, &TcpEp::pending_link>::remove(ep);
                continue;
            }
            Status status = req->func(req);
            if (status == Status::no_resource) {
                ep.pending.push_front(*req);
                continue;
            }
            ++count;
            progressed = true;
            if (ep.pending.empty() && ep.pending_link.linked()) {
                ucs::List<TcpEp, &TcpEp::pending_link>::remove(ep);
            }
        }
    }
    // The endpoint served first this time goes last next time.
    if (!pending_eps_.empty()) pending_eps_.push_back(*pending_eps_.pop_front());
    return count;
}

namespace {

/** Counts the endpoint flushes of one iface flush; completes the caller's Completion after the last. */
struct IfaceFlush {
    Completion comp;
    Completion* user;
};

void iface_flush_done(Completion* comp) {
    auto* flush = reinterpret_cast<IfaceFlush*>(comp);
    completion_update(flush->user, comp->status);
    delete flush;
}

}  // namespace

Status TcpIface::flush_iface(unsigned flags, Completion* comp) {
    if (flags & kFlushCancel) return Status::unsupported;
    // First make sure no endpoint would answer no_resource, so nothing is started half-way.
    for (TcpEp& ep : conns_) {
        if ((ep.flags & kEpPassive) || ep.state == ConnState::failed) continue;
        bool busy = (ep.flags & kEpDirty) || !ep.outstanding.empty() || ep.tx != nullptr;
        if (busy && !ep.can_send()) return Status::no_resource;
    }
    IfaceFlush* flush = nullptr;
    for (TcpEp& ep : conns_) {
        if ((ep.flags & kEpPassive) || ep.state == ConnState::failed) continue;
        if (!(ep.flags & kEpDirty) && ep.outstanding.empty()) continue;
        if (flush == nullptr) flush = new IfaceFlush{{iface_flush_done, 1, Status::ok}, comp};
        ++flush->comp.count;
        Status status = ops.ep_flush(&ep, kFlushLocal, &flush->comp);
        if (status != Status::in_progress) {
            flush->comp.count--;
            if (is_error(status) && flush->comp.status == Status::ok) flush->comp.status = status;
        }
    }
    if (flush == nullptr) return Status::ok;
    if (--flush->comp.count == 0) {
        Status status = flush->comp.status;
        delete flush;
        return status;
    }
    return Status::in_progress;
}

}  // namespace loom::uct::tcp
