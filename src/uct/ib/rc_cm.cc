/**
 * rc over rdma_cm: the iface listens on an rdma_cm id bound to its IP address; an
 * endpoint created from a peer's addresses resolves the address and the route,
 * creates its QP on its cm id and connects; the peer accepts on a passive endpoint.
 * Private data (RcCmPrivate) carries each side's receive window and buffer size.
 * Events are read from a non-blocking channel by progress (see RcIface).
 */
#include "uct/ib/ib_log.h"
#include "uct/ib/ib_md.h"
#include "uct/ib/rc_iface.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>

namespace loom::uct::ib {

RcCmPrivate RcIface::cm_private() const {
    RcCmPrivate priv{};
    priv.version = kRcAddrVersion;
    priv.window = static_cast<std::uint16_t>(fc_window_);
    priv.seg_size = seg_size;
    if (flush_word_mr_ != nullptr) {
        priv.flush_addr = reinterpret_cast<std::uintptr_t>(flush_word_mr_->addr);
        priv.flush_rkey = flush_word_mr_->rkey;
    }
    return priv;
}

namespace {

sockaddr_storage make_sockaddr(int family, const std::uint8_t* bytes, std::uint16_t port) {
    sockaddr_storage ss{};
    if (family == AF_INET6) {
        auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons(port);
        std::memcpy(&sin6->sin6_addr, bytes, 16);
    } else {
        auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
        sin->sin_family = AF_INET;
        sin->sin_port = htons(port);
        std::memcpy(&sin->sin_addr, bytes, 4);
    }
    return ss;
}

std::string sockaddr_text(const sockaddr* sa) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (sa == nullptr) return "?";
    if (sa->sa_family == AF_INET) {
        const auto* sin = reinterpret_cast<const sockaddr_in*>(sa);
        inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf));
        return fmt::format("{}:{}", buf, ntohs(sin->sin_port));
    }
    if (sa->sa_family == AF_INET6) {
        const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(sa);
        inet_ntop(AF_INET6, &sin6->sin6_addr, buf, sizeof(buf));
        return fmt::format("[{}]:{}", buf, ntohs(sin6->sin6_port));
    }
    return "?";
}

bool busy_state(CmState state) {
    return state == CmState::resolving_addr || state == CmState::resolving_route ||
           state == CmState::connecting || state == CmState::accepting;
}

int timeout_ms(std::chrono::nanoseconds t) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t).count();
    return static_cast<int>(std::clamp<long long>(ms, 1, 3600 * 1000));
}

}  // namespace

void RcIface::cm_set_state(RcEp* ep, CmState state) {
    bool was_busy = busy_state(ep->cold->cm_state);
    bool is_busy = busy_state(state);
    ep->cold->cm_state = state;
    if (was_busy && !is_busy) --cm_busy_;
    if (!was_busy && is_busy) {
        ++cm_busy_;
        cm_countdown_ = 1;  // poll the channel on every progress call until it settles
    }
}

Status RcIface::cm_listen() {
    const std::string& name = resource().dev_name;
    cm_channel_ = rdma_create_event_channel();
    if (cm_channel_ == nullptr) {
        LOOM_LOG_ERROR("rc/{}: rdma_create_event_channel failed: {}", name, std::strerror(errno));
        return Status::no_device;
    }
    int fl = fcntl(cm_channel_->fd, F_GETFL);
    if (fl < 0 || fcntl(cm_channel_->fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        LOOM_LOG_ERROR("rc/{}: cannot make the rdma_cm channel non-blocking: {}", name, std::strerror(errno));
        return Status::io_error;
    }
    if (rdma_create_id(cm_channel_, &cm_listen_id_, nullptr, RDMA_PS_TCP) != 0) {
        LOOM_LOG_ERROR("rc/{}: rdma_create_id failed: {}", name, std::strerror(errno));
        cm_listen_id_ = nullptr;
        return Status::no_resource;
    }
    sockaddr_storage addr = make_sockaddr(ip_->family, ip_->bytes, 0);
    if (rdma_bind_addr(cm_listen_id_, reinterpret_cast<sockaddr*>(&addr)) != 0) {
        LOOM_LOG_ERROR("rc/{}: rdma_bind_addr({}) failed: {}", name, ip_->text(), std::strerror(errno));
        return Status::no_device;
    }
    if (cm_listen_id_->verbs != md_->context()) {
        LOOM_LOG_ERROR("rc/{}: IP address {} belongs to RDMA device {}, not to this one", name, ip_->text(),
                       cm_listen_id_->verbs ? ibv_get_device_name(cm_listen_id_->verbs->device) : "(none)");
        return Status::no_device;
    }
    if (rdma_listen(cm_listen_id_, 128) != 0) {
        LOOM_LOG_ERROR("rc/{}: rdma_listen on {} failed: {}", name, ip_->text(), std::strerror(errno));
        return Status::io_error;
    }
    cm_port_ = ntohs(rdma_get_src_port(cm_listen_id_));
    LOOM_LOG_DEBUG("rc/{}: listening for rdma_cm connections on {}:{}", name, ip_->text(), cm_port_);
    return Status::ok;
}

Status RcIface::cm_connect(RcEp* ep, const RcDeviceAddress& dev, std::uint16_t port) {
    const std::string& name = resource().dev_name;
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(cm_channel_, &id, ep, RDMA_PS_TCP) != 0) {
        LOOM_LOG_ERROR("rc/{}: rdma_create_id failed: {}", name, std::strerror(errno));
        return Status::no_resource;
    }
    ep->cold->cm_id = id;
    int family = (dev.flags & kDevAddrIpv6) ? AF_INET6 : AF_INET;
    sockaddr_storage src = make_sockaddr(ip_->family, ip_->bytes, 0);
    sockaddr_storage dst = make_sockaddr(family, dev.ip, port);
    ep->cold->peer = sockaddr_text(reinterpret_cast<sockaddr*>(&dst));
    if (rdma_resolve_addr(id, reinterpret_cast<sockaddr*>(&src), reinterpret_cast<sockaddr*>(&dst),
                          timeout_ms(config_.cm_timeout)) != 0) {
        LOOM_LOG_ERROR("rc/{}: rdma_resolve_addr({}) failed: {}", name, ep->cold->peer, std::strerror(errno));
        return Status::unreachable;
    }
    cm_set_state(ep, CmState::resolving_addr);
    return Status::ok;
}

unsigned RcIface::cm_poll() {
    unsigned count = 0;
    rdma_cm_event* event = nullptr;
    while (rdma_get_cm_event(cm_channel_, &event) == 0) {
        ++count;
        rdma_cm_id* reject = nullptr;
        cm_handle(event, reject);
        (void)rdma_ack_cm_event(event);
        // An id may only be destroyed once its events are acknowledged.
        if (reject != nullptr) (void)rdma_destroy_id(reject);
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
        LOOM_LOG_ERROR("rc/{}: rdma_get_cm_event failed: {}", resource().dev_name, std::strerror(errno));
    }
    return count;
}

void RcIface::cm_handle(rdma_cm_event* event, rdma_cm_id*& reject) {
    const std::string& name = resource().dev_name;
    if (event->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        cm_accept(event, reject);
        return;
    }
    if (event->id == cm_listen_id_) {
        LOOM_LOG_DEBUG("rc/{}: listener event {}", name, rdma_event_str(event->event));
        return;
    }
    auto* ep = static_cast<RcEp*>(event->id->context);
    if (ep == nullptr || (ep->flags & kEpClosing)) return;  // the endpoint is going away anyway
    LOOM_LOG_DEBUG("rc/{}: {} on the connection to {} (status {})", name, rdma_event_str(event->event),
                   ep->cold->peer, event->status);
    switch (event->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (event->id->verbs != md_->context()) {
            cm_set_state(ep, CmState::closed);
            fail_ep(ep, Status::unreachable,
                    fmt::format("the route to {} leaves through device {}", ep->cold->peer,
                                event->id->verbs ? ibv_get_device_name(event->id->verbs->device) : "(none)"));
            return;
        }
        if (rdma_resolve_route(event->id, timeout_ms(config_.cm_timeout)) != 0) {
            cm_set_state(ep, CmState::closed);
            fail_ep(ep, Status::unreachable,
                    fmt::format("rdma_resolve_route failed: {}", std::strerror(errno)));
            return;
        }
        cm_set_state(ep, CmState::resolving_route);
        return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
        if (Status s = create_qp(ep, event->id); s != Status::ok) {
            cm_set_state(ep, CmState::closed);
            fail_ep(ep, s, "cannot create the queue pair");
            return;
        }
        if (srq_ == nullptr) {
            if (Status s = post_rx_qp(ep, static_cast<int>(fc_window_ + kGrantSlots)); s != Status::ok) {
                cm_set_state(ep, CmState::closed);
                fail_ep(ep, s, "cannot post receive buffers");
                return;
            }
        }
        if (!iwarp_) {
            std::uint8_t timeout = timeout_exp_;
            (void)rdma_set_option(event->id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout,
                                  sizeof(timeout));
        }
        RcCmPrivate priv = cm_private();
        rdma_conn_param param{};
        param.private_data = &priv;
        param.private_data_len = sizeof(priv);
        param.responder_resources = static_cast<std::uint8_t>(max_dest_rd_atomic_);
        param.initiator_depth = static_cast<std::uint8_t>(max_rd_atomic_);
        param.retry_count = static_cast<std::uint8_t>(config_.retry_count);
        param.rnr_retry_count = static_cast<std::uint8_t>(config_.rnr_retry);
        if (rdma_connect(event->id, &param) != 0) {
            cm_set_state(ep, CmState::closed);
            fail_ep(ep, Status::connection_refused,
                    fmt::format("rdma_connect failed: {}", std::strerror(errno)));
            return;
        }
        cm_set_state(ep, CmState::connecting);
        return;
    }
    case RDMA_CM_EVENT_ESTABLISHED: {
        std::uint16_t window = ep->cold->peer_window;
        if (ep->cold->cm_state == CmState::connecting) {
            // The accepting side's window comes with the establishment.
            RcCmPrivate priv{};
            const void* data = event->param.conn.private_data;
            if (data == nullptr || event->param.conn.private_data_len < sizeof(priv)) {
                cm_set_state(ep, CmState::connected);
                fail_ep(ep, Status::malformed_packet, "the peer accepted without Loom's connection data");
                return;
            }
            std::memcpy(&priv, data, sizeof(priv));
            if (priv.version != kRcAddrVersion || priv.window == 0 || priv.seg_size != seg_size) {
                cm_set_state(ep, CmState::connected);
                fail_ep(ep, Status::version_mismatch,
                        fmt::format("the peer's connection data does not match (version {}, window {}, "
                                    "segment size {})",
                                    priv.version, priv.window, priv.seg_size));
                return;
            }
            window = priv.window;
            ep->cold->flush_addr = priv.flush_addr;
            ep->cold->flush_rkey = priv.flush_rkey;
        }
        cm_set_state(ep, CmState::connected);
        connected(ep, window);
        return;
    }
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
        cm_set_state(ep, CmState::closed);
        fail_ep(ep, Status::unreachable,
                fmt::format("{} (status {})", rdma_event_str(event->event), event->status));
        return;
    case RDMA_CM_EVENT_REJECTED:
        cm_set_state(ep, CmState::closed);
        fail_ep(ep, Status::connection_refused,
                fmt::format("connection rejected (status {})", event->status));
        return;
    case RDMA_CM_EVENT_CONNECT_ERROR:
        cm_set_state(ep, CmState::closed);
        fail_ep(ep, Status::connection_refused, fmt::format("connection error (status {})", event->status));
        return;
    case RDMA_CM_EVENT_DISCONNECTED:
        cm_set_state(ep, CmState::closed);
        fail_ep(ep, Status::connection_reset, "the peer disconnected");
        return;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        cm_set_state(ep, CmState::closed);
        fail_ep(ep, Status::endpoint_failure, "the device was removed");
        return;
    default: return;
    }
}

void RcIface::cm_accept(rdma_cm_event* event, rdma_cm_id*& reject) {
    const std::string& name = resource().dev_name;
    rdma_cm_id* id = event->id;
    std::string peer = sockaddr_text(rdma_get_peer_addr(id));
    auto refuse = [&](const std::string& why) {
        LOOM_LOG_WARN("rc/{}: refused a connection from {}: {}", name, peer, why);
        (void)rdma_reject(id, nullptr, 0);
        reject = id;
    };
    RcCmPrivate priv{};
    const void* data = event->param.conn.private_data;
    if (data == nullptr || event->param.conn.private_data_len < sizeof(priv)) {
        refuse("no Loom connection data");
        return;
    }
    std::memcpy(&priv, data, sizeof(priv));
    if (priv.version != kRcAddrVersion || priv.window == 0) {
        refuse(fmt::format("connection data version {} (expected {})", priv.version, kRcAddrVersion));
        return;
    }
    if (priv.seg_size != seg_size) {
        refuse(fmt::format("its LOOM_IB_SEG_SIZE is {}, this iface's {}", priv.seg_size, seg_size));
        return;
    }
    if (id->verbs != md_->context()) {
        refuse("it arrived on another device");
        return;
    }
    auto created = new_ep(EpParams{}, true);
    if (!created) {
        refuse(fmt::format("no endpoint: {}", to_string(created.status())));
        return;
    }
    RcEp* ep = *created;
    id->context = ep;
    ep->cold->peer = peer;
    ep->cold->peer_window = priv.window;
    Status status = create_qp(ep, id);
    if (status == Status::ok && srq_ == nullptr)
        status = post_rx_qp(ep, static_cast<int>(fc_window_ + kGrantSlots));
    if (status != Status::ok) {
        // The id goes with the endpoint's destruction; the peer is told now.
        (void)rdma_reject(id, nullptr, 0);
        close_ep(ep);
        return;
    }
    ep->cold->flush_addr = priv.flush_addr;
    ep->cold->flush_rkey = priv.flush_rkey;
    RcCmPrivate ours = cm_private();
    rdma_conn_param param{};
    param.private_data = &ours;
    param.private_data_len = sizeof(ours);
    param.responder_resources = static_cast<std::uint8_t>(
        std::min<std::uint32_t>(max_dest_rd_atomic_, event->param.conn.initiator_depth));
    param.initiator_depth = static_cast<std::uint8_t>(
        std::min<std::uint32_t>(max_rd_atomic_, event->param.conn.responder_resources));
    param.retry_count = static_cast<std::uint8_t>(config_.retry_count);
    param.rnr_retry_count = static_cast<std::uint8_t>(config_.rnr_retry);
    if (rdma_accept(id, &param) != 0) {
        LOOM_LOG_WARN("rc/{}: rdma_accept of {} failed: {}", name, peer, std::strerror(errno));
        close_ep(ep);
        return;
    }
    cm_set_state(ep, CmState::accepting);
    LOOM_LOG_DEBUG("rc/{}: accepted a connection from {} on QP {:#x}", name, peer, ep->qp_num);
}

}  // namespace loom::uct::ib
