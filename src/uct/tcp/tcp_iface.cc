/**
 * tcp iface: listening socket, set-up and teardown, attributes and addresses, the
 * epoll set (which connection is polled for what, and the hot connection read
 * directly), failures, pending dispatch and flush. Connection set-up is in tcp_cm.cc,
 * progress and the receive side in tcp_rx.cc, the send side in tcp_ep.cc.
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
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

namespace loom::uct::tcp {

namespace {

constexpr unsigned kMaxPendingRounds = 16;

std::uint64_t random_cookie() {
    std::random_device rd;
    std::uint64_t cookie;
    do {
        cookie = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
    } while (cookie == 0);
    return cookie;
}

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
    if (Status s = iface->open_listen_socket(min_port, max_port); s != Status::ok) return s;
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
    for (std::size_t i = 0; i < kNumStageClasses; ++i) {
        ucs::MemPoolParams stage;
        stage.name = i == 0 ? "tcp_tx_stage" : "tcp_tx_stage_large";
        stage.elem_size = staged_desc_size(kStageBytes[i]);
        stage.alignment = kCacheLineSize;
        stage.elems_per_chunk = i == 0 ? 64 : 16;
        if (Status s = tx_stage_pools_[i].init(std::move(stage)); s != Status::ok) return s;
    }
    ucs::MemPoolParams rx_buf;
    rx_buf.name = "tcp_rx_buf";
    rx_buf.elem_size = rx_size();
    rx_buf.alignment = kCacheLineSize;
    rx_buf.elems_per_chunk = 2;
    ucs::MemPoolParams reply;
    reply.name = "tcp_reply";
    reply.elem_size = sizeof(ReplyDesc);
    reply.elems_per_chunk = 128;
    for (auto [pool, params] : {std::pair{&tx_pool_, &tx},
                                {&req_pool_, &req},
                                {&rx_pool_, &rx},
                                {&rx_buf_pool_, &rx_buf},
                                {&reply_pool_, &reply}}) {
        if (Status s = pool->init(std::move(*params)); s != Status::ok) return s;
    }
    return Status::ok;
}

Status TcpIface::open_listen_socket(std::uint16_t min_port, std::uint16_t max_port) {
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
    while (TcpEp* ep = idle_.pop_front()) free_ep(ep);
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
                     kCapConnectToIface | kCapErrHandlingPeerFailure | kCapEventRecv | kCapConnectOnFirstUse;
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
    idle_countdown_ = 1;  // woken by the listening socket, the next progress looks at it
    next_listen_poll_ = 0;
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

// --- polling -----------------------------------------------------------------------------------

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
    const bool was_idle = ep->state == ConnState::idle;  // in idle_, not counted in nconns_
    if (ep->state != ConnState::failed) {
        ep->state = ConnState::failed;
        ep->cold->error = Status::canceled;
    }
    ++defer_free_;
    teardown(ep, Status::canceled);
    ep->pending.clear();
    ucs::List<TcpEp, &TcpEp::conn_link>::remove(*ep);
    if (!was_idle) --nconns_;
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

// --- pending requests and flush ------------------------------------------------------------------

void TcpIface::pending_purge(TcpEp* ep, PendingPurgeCallback cb, void* arg) {
    if (ep->pending_link.linked()) ucs::List<TcpEp, &TcpEp::pending_link>::remove(*ep);
    while (PendingReq* req = ep->pending.pop_front()) {
        if (cb != nullptr) cb(req, arg);
    }
}

Status TcpIface::pending_remove(TcpEp* ep, PendingReq* req) {
    if (!ep->pending.remove(*req)) return Status::no_element;
    if (ep->pending.empty() && ep->pending_link.linked()) ucs::List<TcpEp, &TcpEp::pending_link>::remove(*ep);
    return Status::ok;
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
