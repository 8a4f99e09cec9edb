/**
 * tcp connection set-up: addresses and reachability, ep_create, connecting (with
 * retries and a deadline), accepting, and the handshake that names the iface a
 * connection is for. The connection states and how two ifaces end up sharing one socket
 * are described in tcp_ep.h.
 *
 * An endpoint's connect() runs non-blocking: EPOLLOUT reports it (on_connect_ready),
 * the ConnRequest goes out, and the ConnReply moves the endpoint to connected. The
 * accepting side reads the ConnRequest on an internal passive endpoint and answers it,
 * except when both sides connect at once and its own connection is on the way: then
 * the answer waits (kEpDeferred, release_deferred), so the race has one outcome.
 * A refused or unreachable peer is retried every LOOM_TCP_CONN_RETRY_INTERVAL up to
 * LOOM_TCP_CONN_RETRIES times; a connection not up by LOOM_TCP_CONN_TIMEOUT fails
 * (check_timers, from progress's slow path).
 */
#include "uct/tcp/tcp_iface.h"
#include "uct/tcp/tcp_log.h"

#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace loom::uct::tcp {

namespace {

constexpr unsigned kMaxAcceptsPerProgress = 64;

bool retryable(int err) {
    return err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH ||
           err == EAGAIN || err == EADDRNOTAVAIL;
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

// --- addresses -------------------------------------------------------------------------------

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

// --- connecting --------------------------------------------------------------------------------

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
        // The same bound for a connection with data in flight: without it, unacknowledged
        // data is retransmitted for about 15 minutes (tcp_retries2) before the socket fails,
        // and keepalive probes only start on an idle connection.
        unsigned user_timeout_ms = static_cast<unsigned>((idle + intvl * cnt) * 1000);
        if (::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) != 0 ||
            ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) != 0 ||
            ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl)) != 0 ||
            ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt)) != 0 ||
            ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms)) != 0) {
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
    auto* ep = new TcpEp{};
    ep->iface = this;
    ep->fd = -1;
    ep->state = ConnState::idle;
    ep->cold = new EpCold{};
    ep->cold->on_error = params.on_error;
    ep->cold->on_error_arg = params.on_error_arg;
    ep->cold->peer.sin_family = AF_INET;
    ep->cold->peer.sin_addr.s_addr = dev.ip;
    ep->cold->peer.sin_port = addr.port;
    ep->cold->peer_cookie = addr.cookie;
    idle_.push_back(*ep);
    if (params.connect_on_first_use) {
        LOOM_LOG_DEBUG("tcp/{}: endpoint to {} connects on its first operation", device_.name, peer_name(ep));
        return static_cast<Ep*>(ep);
    }
    if (Status status = wake(ep); status != Status::ok) {
        // The local system refused (no fds, no memory): nothing was attempted, the caller may retry.
        ep_destroy(ep);
        return status;
    }
    return static_cast<Ep*>(ep);
}

Status TcpIface::wake(TcpEp* ep) {
    auto* rx = static_cast<RxState*>(rx_pool_.get());
    if (rx == nullptr) return Status::no_memory;
    *rx = RxState{};
    ep->rx = rx;
    ucs::List<TcpEp, &TcpEp::conn_link>::remove(*ep);
    ep->state = ConnState::connecting;
    ep->cold->deadline = ucs::get_time() + conn_timeout_ticks_;
    ep->flags |= kEpTimed;
    ++ntimed_;
    conns_.push_back(*ep);
    ++nconns_;
    update_hot();
    const Status status = connect_socket(ep);
    return status == Status::no_resource || status == Status::io_error ? status : Status::ok;
}

Status TcpIface::wake_on_send(TcpEp* ep) {
    if (Status status = wake(ep); status != Status::ok) {
        if (ep->state == ConnState::idle) {
            LOOM_LOG_ERROR("tcp/{}: cannot start the connection to {}: {}", device_.name, peer_name(ep),
                           to_string(status));
            return status;  // nothing changed: the caller may retry
        }
        fail(ep, status);
    }
    return ep->state == ConnState::failed ? ep->cold->error : Status::ok;
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

// --- accepting and the handshake ---------------------------------------------------------------

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
    // An endpoint of ours to the peer that has not connected yet (idle) takes this
    // connection: one socket for the pair, and nothing more to open on its first send.
    if (mine == nullptr && req.source_cookie != cookie_) mine = find_idle(req.source_cookie);
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

TcpEp* TcpIface::find_idle(std::uint64_t peer_cookie) const {
    for (const TcpEp& ep : idle_) {
        if (ep.cold->peer_cookie == peer_cookie) return const_cast<TcpEp*>(&ep);
    }
    return nullptr;
}

/** @p user (not connected yet, or idle) takes over the socket of @p accepted, which goes away. */
void TcpIface::adopt(TcpEp* user, TcpEp* accepted) {
    if (user->fd >= 0) {
        (void)epoll_.remove(user->fd);
        ::close(user->fd);
    }
    if (user->state == ConnState::idle) {
        // Never woken: it has no receive state yet, and joins the connections.
        user->rx = accepted->rx;
        accepted->rx = nullptr;
        user->state = ConnState::connecting;
        ucs::List<TcpEp, &TcpEp::conn_link>::remove(*user);
        conns_.push_back(*user);
        ++nconns_;
    }
    user->fd = accepted->fd;
    accepted->fd = -1;
    user->poll = accepted->poll;
    if (epoll_.modify(user->fd, user->poll, reinterpret_cast<std::uint64_t>(user)) != Status::ok) {
        fail(user, Status::io_error);
    }
    user->rx->length = 0;  // a half-read answer to our own handshake is moot
    rx_release_if_idle(user);
    if (accepted->rx != nullptr) free_rx(accepted->rx);
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

}  // namespace loom::uct::tcp
