/**
 * rc connection set-up. ep_create chooses the connection model of the iface (see
 * RcIface). verbs: the endpoint's QP waits in INIT until ep_connect_to_ep gets the
 * peer's endpoint address and moves it to RTR and RTS (rc_qp.cc), optionally holding
 * the sends until ep_release_sends.
 *
 * rdma_cm: the iface listens on an rdma_cm id bound to its IP address; an
 * endpoint created from a peer's addresses resolves the address and the route,
 * creates its QP on its cm id and connects; the peer accepts on a passive endpoint.
 * Private data (RcCmPrivate) carries each side's receive window and buffer size.
 * Events are read from a non-blocking channel by progress (see RcIface).
 *
 * Client/server (kCapConnectToSockaddr): Iface::listen binds an rdma_cm id of its own
 * to a socket address; a request on it becomes an RcConnRequest handed to the user,
 * who accepts it with ep_create(conn_request) (a user endpoint, not a passive one) or
 * refuses it with Iface::reject. A client endpoint is ep_create(sockaddr). The user's
 * private data travels after Loom's header, its length in RcCmPrivate::user_len (IB
 * pads private data, so the received length says nothing). Ids that must go while an
 * event of theirs is being handled are destroyed after it is acknowledged
 * (cm_dead_ids_).
 */
#include "uct/ib/ib_log.h"
#include "uct/ib/ib_md.h"
#include "uct/ib/rc_iface.h"
#include "uct/ib/rc_peer_data.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>

namespace loom::uct::ib {

rdma_conn_param RcIface::conn_param(const std::vector<std::uint8_t>& priv, std::uint32_t responder_resources,
                                    std::uint32_t initiator_depth) const {
    rdma_conn_param param{};
    param.private_data = priv.data();
    param.private_data_len = static_cast<std::uint8_t>(priv.size());
    param.responder_resources = static_cast<std::uint8_t>(responder_resources);
    param.initiator_depth = static_cast<std::uint8_t>(initiator_depth);
    param.retry_count = static_cast<std::uint8_t>(config_.retry_count);
    param.rnr_retry_count = static_cast<std::uint8_t>(config_.rnr_retry);
    param.srq = srq_ != nullptr ? 1 : 0;
    return param;
}

bool RcIface::cm_on_our_device(const ibv_context* ctx) const {
    // By name: the id's context is librdmacm's own, never ours (see create_qp).
    return ctx != nullptr && ibv_get_device_name(ctx->device) == md_->device().name;
}

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

/** A client/server listener: an rdma_cm id bound to the user's address, on the iface's channel. */
class RcListener : public Listener {
public:
    RcListener(RcIface* iface, rdma_cm_id* id, ConnRequestCallback cb, void* arg)
        : iface_(iface), id_(id), cb_(cb), arg_(arg) {}

    ~RcListener() override { detach(); }

    sockaddr_storage address() const override {
        sockaddr_storage ss{};
        if (id_ != nullptr) {
            const sockaddr* sa = rdma_get_local_addr(id_);
            std::memcpy(&ss, sa, sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
        }
        return ss;
    }

    /** Refuses what nobody answered and stops listening; the iface forgets this listener. */
    void detach() {
        if (iface_ == nullptr) return;
        for (auto& request : requests) {
            (void)rdma_reject(request->id, nullptr, 0);
            iface_->cm_dead_ids_.push_back(request->id);
        }
        requests.clear();
        std::erase(iface_->listeners_, this);
        (void)rdma_destroy_id(id_);
        id_ = nullptr;
        iface_ = nullptr;
    }

    /** Removes @p request from the unanswered ones (it is deleted); false when it is not one. */
    bool take(RcConnRequest* request) {
        for (auto it = requests.begin(); it != requests.end(); ++it) {
            if (it->get() == request) {
                requests.erase(it);
                return true;
            }
        }
        return false;
    }

    rdma_cm_id* id() const { return id_; }
    void notify(RcConnRequest* request) {
        cb_(arg_, request, request->user_priv.data(), request->user_priv.size(), rdma_get_peer_addr(request->id));
    }

    std::vector<std::unique_ptr<RcConnRequest>> requests;  ///< unanswered

private:
    RcIface* iface_;
    rdma_cm_id* id_;
    ConnRequestCallback cb_;
    void* arg_;
};

namespace {

/** Loom's header followed by the user's private data, as one buffer. */
std::vector<std::uint8_t> with_user_priv(RcCmPrivate header, const void* user, std::size_t len) {
    header.user_len = static_cast<std::uint8_t>(len);
    std::vector<std::uint8_t> buf(sizeof(header) + len);
    std::memcpy(buf.data(), &header, sizeof(header));
    if (len > 0) std::memcpy(buf.data() + sizeof(header), user, len);
    return buf;
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
    if (!cm_on_our_device(cm_listen_id_->verbs)) {
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

Status RcIface::cm_connect_on_first_use(RcEp* ep) {
    ep->cold->connect_on_first_use = false;
    if (Status s = reserve_rx(ep); s != Status::ok) {
        fail_ep(ep, s, "no receive buffers for its connection");  // reserve_rx said why
        return ep->cold->status;
    }
    if (Status s = cm_connect(ep, ep->cold->first_use_dev, ep->cold->first_use_port); s != Status::ok) {
        // cm_connect said why; the endpoint fails as one whose connection failed later would.
        fail_ep(ep, s, "cannot start its connection");
        return ep->cold->status;
    }
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
    // Ids refused by the user (possibly while their request event was being handled).
    for (rdma_cm_id* id : cm_dead_ids_) (void)rdma_destroy_id(id);
    cm_dead_ids_.clear();
    return count;
}

void RcIface::cm_handle(rdma_cm_event* event, rdma_cm_id*& reject) {
    const std::string& name = resource().dev_name;
    if (event->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        for (RcListener* listener : listeners_) {
            if (event->listen_id == listener->id()) {
                cm_listener_request(listener, event, reject);
                return;
            }
        }
        cm_accept(event, reject);
        return;
    }
    bool listener_event = event->id == cm_listen_id_;
    for (RcListener* listener : listeners_) listener_event = listener_event || event->id == listener->id();
    if (listener_event) {
        LOOM_LOG_DEBUG("rc/{}: listener event {}", name, rdma_event_str(event->event));
        return;
    }
    auto* ep = static_cast<RcEp*>(event->id->context);
    if (ep == nullptr || (ep->flags & kEpClosing)) return;  // the endpoint is going away anyway
    LOOM_LOG_DEBUG("rc/{}: {} on the connection to {} (status {})", name, rdma_event_str(event->event),
                   ep->cold->peer, event->status);
    switch (event->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (!cm_on_our_device(event->id->verbs)) {
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
        std::vector<std::uint8_t> priv =
            with_user_priv(cm_private(), ep->cold->user_priv.data(), ep->cold->user_priv.size());
        rdma_conn_param param = conn_param(priv, max_dest_rd_atomic_, max_rd_atomic_);
        param.qp_num = ep->qp_num;
        if (rdma_connect(event->id, &param) != 0) {
            cm_set_state(ep, CmState::closed);
            std::string why = fmt::format("rdma_connect failed: {}", std::strerror(errno));
            report_connect_failure(ep, Status::connection_refused, nullptr, 0);
            fail_ep(ep, Status::connection_refused, why);
            return;
        }
        cm_set_state(ep, CmState::connecting);
        return;
    }
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
        // InfiniBand and RoCE only (the iWARP kernel moves the QP itself and reports
        // ESTABLISHED): the QP is ours, not librdmacm's, so its last two steps are ours too,
        // then rdma_establish sends the RTU.
        if (Status s = cm_qp_ready(ep, 0, 0); s != Status::ok || rdma_establish(event->id) != 0) {
            std::string why = s != Status::ok ? std::string("cannot move the queue pair to RTS")
                                              : fmt::format("rdma_establish failed: {}", std::strerror(errno));
            cm_set_state(ep, CmState::closed);
            report_connect_failure(ep, Status::connection_refused, nullptr, 0);
            fail_ep(ep, Status::connection_refused, why);
            return;
        }
        [[fallthrough]];
    case RDMA_CM_EVENT_ESTABLISHED: {
        if (ep->cold->cm_state == CmState::connected) return;  // completed by its connect response
        std::uint16_t window = ep->cold->peer_window;
        const bool initiator = ep->cold->cm_state == CmState::connecting;
        const std::uint8_t* user = nullptr;
        std::size_t user_len = 0;
        if (ep->cold->cm_state == CmState::connecting) {
            // The accepting side's window comes with the establishment.
            RcCmData priv;
            const std::size_t len = event->param.conn.private_data_len;
            RcCmDataError error = parse_cm_data(event->param.conn.private_data, len, seg_size, priv);
            if (error != RcCmDataError::none) {
                Status status =
                    error == RcCmDataError::missing ? Status::malformed_packet : Status::version_mismatch;
                cm_set_state(ep, CmState::connected);
                report_connect_failure(ep, status, nullptr, 0);
                fail_ep(
                    ep, status,
                    fmt::format("the peer accepted with {}", describe_cm_data(error, priv, len, seg_size)));
                return;
            }
            window = priv.header.window;
            user = priv.user;
            user_len = priv.user_len;
            ep->cold->flush_addr = priv.header.flush_addr;
            ep->cold->flush_rkey = priv.header.flush_rkey;
        }
        cm_set_state(ep, CmState::connected);
        connected(ep, window);
        if (iwarp_ && initiator) {
            // See probe_acceptors: our first frames may wait unread in the acceptor's socket.
            ep->cold->probe_at = std::chrono::steady_clock::now() + kProbeFirst;
            unconfirmed_.push_back(ep);
        }
        if (ep->cold->on_connect != nullptr) {
            // Client: the server's private data; server: it had the client's in the request.
            ConnectCallback cb = std::exchange(ep->cold->on_connect, nullptr);
            cb(ep->cold->on_connect_arg, ep, Status::ok, user, user_len);
        }
        return;
    }
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
        cm_set_state(ep, CmState::closed);
        report_connect_failure(ep, Status::unreachable, nullptr, 0);
        fail_ep(ep, Status::unreachable,
                fmt::format("{} (status {})", rdma_event_str(event->event), event->status));
        return;
    case RDMA_CM_EVENT_REJECTED:
        cm_set_state(ep, CmState::closed);
        report_connect_failure(ep, Status::connection_refused, event->param.conn.private_data,
                               event->param.conn.private_data_len);
        fail_ep(ep, Status::connection_refused,
                fmt::format("connection rejected (status {})", event->status));
        return;
    case RDMA_CM_EVENT_CONNECT_ERROR:
        cm_set_state(ep, CmState::closed);
        report_connect_failure(ep, Status::connection_refused, nullptr, 0);
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
    RcCmData priv;
    const std::size_t len = event->param.conn.private_data_len;
    if (RcCmDataError error = parse_cm_data(event->param.conn.private_data, len, seg_size, priv);
        error != RcCmDataError::none) {
        refuse(describe_cm_data(error, priv, len, seg_size));
        return;
    }
    if (!cm_on_our_device(id->verbs)) {
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
    ep->cold->peer_window = priv.header.window;
    Status status = create_qp(ep, id);
    if (status == Status::ok && srq_ == nullptr)
        status = post_rx_qp(ep, static_cast<int>(fc_window_ + kGrantSlots));
    if (status != Status::ok) {
        // The id goes with the endpoint's destruction; the peer is told now.
        (void)rdma_reject(id, nullptr, 0);
        close_ep(ep);
        return;
    }
    ep->cold->flush_addr = priv.header.flush_addr;
    ep->cold->flush_rkey = priv.header.flush_rkey;
    std::vector<std::uint8_t> ours = with_user_priv(cm_private(), nullptr, 0);
    rdma_conn_param param =
        conn_param(ours, std::min<std::uint32_t>(max_dest_rd_atomic_, event->param.conn.initiator_depth),
                   std::min<std::uint32_t>(max_rd_atomic_, event->param.conn.responder_resources));
    param.qp_num = ep->qp_num;
    if (cm_qp_ready(ep, param.responder_resources, param.initiator_depth) != Status::ok) {
        (void)rdma_reject(id, nullptr, 0);
        close_ep(ep);
        return;
    }
    if (rdma_accept(id, &param) != 0) {
        LOOM_LOG_WARN("rc/{}: rdma_accept of {} failed: {}", name, peer, std::strerror(errno));
        close_ep(ep);
        return;
    }
    cm_set_state(ep, CmState::accepting);
    LOOM_LOG_DEBUG("rc/{}: accepted a connection from {} on QP {:#x}", name, peer, ep->qp_num);
}

// --- endpoints: ep_create, verbs connect-to-ep --------------------------------------------

Result<Ep*> RcIface::ep_create(const EpParams& params) {
    const std::string& name = resource().dev_name;
    if (params.peer_sockaddr != nullptr || params.conn_request != nullptr) {
        // Client/server: through rdma_cm, with the user's private data.
        if (!use_rdmacm_) {
            LOOM_LOG_ERROR("rc/{}: ep_create: client/server connections go through rdma_cm, which this iface "
                           "does not use (set LOOM_IB_CM=rdmacm; iWARP always uses it)",
                           name);
            return Status::unsupported;
        }
        if (params.priv_len > kRcMaxUserPriv || (params.priv_len > 0 && params.priv_data == nullptr)) {
            LOOM_LOG_ERROR("rc/{}: ep_create: {} bytes of private data (at most {})", name, params.priv_len,
                           kRcMaxUserPriv);
            return Status::invalid_param;
        }
        if (params.conn_request != nullptr) {
            auto ep = cm_accept_request(static_cast<RcConnRequest*>(params.conn_request), params);
            if (!ep) return ep.status();
            return static_cast<Ep*>(*ep);
        }
        if ((params.peer_sockaddr->sa_family != AF_INET || params.peer_sockaddr_len < sizeof(sockaddr_in)) &&
            (params.peer_sockaddr->sa_family != AF_INET6 || params.peer_sockaddr_len < sizeof(sockaddr_in6))) {
            LOOM_LOG_ERROR("rc/{}: ep_create: not an IPv4 or IPv6 socket address", name);
            return Status::invalid_address;
        }
        auto ep = new_ep(params, false);
        if (!ep) return ep.status();
        (*ep)->cold->on_connect = params.on_connect;
        (*ep)->cold->on_connect_arg = params.on_connect_arg;
        const auto* user = static_cast<const std::uint8_t*>(params.priv_data);
        if (params.priv_len > 0) (*ep)->cold->user_priv.assign(user, user + params.priv_len);
        if (Status s = cm_connect_sockaddr(*ep, params.peer_sockaddr); s != Status::ok) {
            abandon_ep(*ep);
            return s;
        }
        return static_cast<Ep*>(*ep);
    }
    if (params.dev_addr != nullptr || params.iface_addr != nullptr) {
        RcDeviceAddress dev;
        RcIfaceAddress iface;
        std::string reason;
        Status status = parse_dev_address(params.dev_addr, params.dev_addr_len, dev, &reason);
        if (status == Status::ok) {
            status = parse_iface_address(params.iface_addr, params.iface_addr_len, iface, &reason);
        }
        if (status != Status::ok) {
            LOOM_LOG_ERROR("rc/{}: ep_create: {}", name, reason);
            return status;
        }
        if (!use_rdmacm_) {
            LOOM_LOG_ERROR(
                "rc/{}: ep_create: this iface connects endpoint to endpoint (LOOM_IB_CM=verbs); create "
                "the endpoint without an address and call ep_connect_to_ep",
                name);
            return Status::unsupported;
        }
        // An endpoint that connects on first use takes its receive buffers then.
        auto ep = new_ep(params, false, !params.connect_on_first_use);
        if (!ep) return ep.status();
        if (params.connect_on_first_use) {
            (*ep)->cold->connect_on_first_use = true;
            (*ep)->cold->first_use_dev = dev;
            (*ep)->cold->first_use_port = iface.port;
            LOOM_LOG_DEBUG("rc/{}: endpoint to port {} connects on its first operation", name, iface.port);
            return static_cast<Ep*>(*ep);
        }
        if (Status s = cm_connect(*ep, dev, iface.port); s != Status::ok) {
            abandon_ep(*ep);
            return s;
        }
        return static_cast<Ep*>(*ep);
    }
    if (use_rdmacm_) {
        LOOM_LOG_ERROR(
            "rc/{}: ep_create: this iface connects through rdma_cm and needs the peer's device and "
            "iface addresses",
            name);
        return Status::invalid_param;
    }
    auto ep = new_ep(params, false);
    if (!ep) return ep.status();
    Status status = create_qp(*ep, nullptr);
    if (status == Status::ok) status = qp_to_init(*ep);
    if (status == Status::ok && srq_ == nullptr) {
        status = post_rx_qp(*ep, static_cast<int>(fc_window_ + kGrantSlots));
    }
    if (status != Status::ok) {
        abandon_ep(*ep);
        return status;
    }
    return static_cast<Ep*>(*ep);
}

Status RcIface::ep_get_address(Ep* tl_ep, std::uint8_t* out) {
    auto* ep = static_cast<RcEp*>(tl_ep);
    if (use_rdmacm_) return Status::unsupported;
    RcEpAddress addr{};
    addr.version = kRcAddrVersion;
    addr.mtu = static_cast<std::uint8_t>(path_mtu_);
    addr.window = static_cast<std::uint16_t>(fc_window_);
    addr.qpn = ep->qp_num;
    addr.psn = ep->cold->psn;
    addr.seg_size = seg_size;
    std::memcpy(out, &addr, sizeof(addr));
    return Status::ok;
}

Status RcIface::ep_connect_to_ep(Ep* tl_ep, const std::uint8_t* dev_addr, std::size_t dev_addr_len,
                                 const std::uint8_t* ep_addr, std::size_t ep_addr_len, unsigned flags) {
    auto* ep = static_cast<RcEp*>(tl_ep);
    const std::string& name = resource().dev_name;
    if (use_rdmacm_) return Status::unsupported;
    if ((ep->flags & (kEpConnected | kEpFailed | kEpClosing)) || ep->cold->hold_sends) {
        LOOM_LOG_ERROR("rc/{}: ep_connect_to_ep: the endpoint is already connected or failed", name);
        return Status::invalid_param;
    }
    RcDeviceAddress dev;
    std::string reason;
    if (Status s = parse_dev_address(dev_addr, dev_addr_len, dev, &reason); s != Status::ok) {
        LOOM_LOG_ERROR("rc/{}: ep_connect_to_ep: {}", name, reason);
        return s;
    }
    RcEpAddress peer;
    if (Status s = check_ep_address(ep_addr, ep_addr_len, local_info(), peer, &reason); s != Status::ok) {
        LOOM_LOG_ERROR("rc/{}: ep_connect_to_ep: {}", name, reason);
        return s;
    }
    if (Status s = qp_to_rts(ep, dev, peer); s != Status::ok) return s;
    ibv_gid peer_gid;
    std::memcpy(peer_gid.raw, dev.gid, sizeof(peer_gid.raw));
    ep->cold->peer = fmt::format("QP {:#x} at {}", peer.qpn, gid_text(peer_gid));
    if (flags & kConnectHoldSends) {
        // Ready to receive; sends wait (no_resource, pending) until ep_release_sends says the
        // peer's QP is past RTR: packets reaching a QP still in INIT are dropped and would
        // only be retransmitted after LOOM_IB_TIMEOUT.
        ep->cold->hold_sends = true;
        ep->cold->peer_window = peer.window;
        LOOM_LOG_DEBUG("rc/{}: endpoint QP {:#x} receives from {}; its sends wait for the peer", name, ep->qp_num,
                       ep->cold->peer);
        return Status::ok;
    }
    connected(ep, peer.window);
    return Status::ok;
}

Status RcIface::ep_release_sends(Ep* tl_ep) {
    auto* ep = static_cast<RcEp*>(tl_ep);
    if (!ep->cold->hold_sends) {
        if (ep->flags & kEpFailed) return ep->cold->status;
        if (ep->flags & kEpConnected) return Status::ok;
        LOOM_LOG_ERROR("rc/{}: ep_release_sends: the endpoint is not connected", resource().dev_name);
        return Status::invalid_param;
    }
    ep->cold->hold_sends = false;
    if (ep->flags & (kEpFailed | kEpClosing)) return resource_status(ep);
    connected(ep, ep->cold->peer_window);
    return Status::ok;
}

void RcIface::connected(RcEp* ep, std::uint16_t peer_window) {
    ep->flags |= kEpConnected;
    ep->sq_avail = static_cast<std::int32_t>(tx_queue_len_);
    ep->fc_credits = static_cast<std::int16_t>(std::min<std::uint32_t>(peer_window, INT16_MAX));
    if (ep->flags & kEpGrantDue) send_control(ep);
    if (!ep->pending.empty()) arbiter_add(ep);
    LOOM_LOG_DEBUG("rc/{}: endpoint QP {:#x} connected to {}, {} credits", resource().dev_name, ep->qp_num,
                   ep->cold->peer, ep->fc_credits);
}

// --- client/server ------------------------------------------------------------------------

Result<std::unique_ptr<Listener>> RcIface::listen(const ListenParams& params) {
    const std::string& name = resource().dev_name;
    if (!use_rdmacm_) {
        LOOM_LOG_ERROR("rc/{}: listen: client/server connections go through rdma_cm, which this iface does not "
                       "use (set LOOM_IB_CM=rdmacm; iWARP always uses it)",
                       name);
        return Status::unsupported;
    }
    if (params.on_request == nullptr ||
        (params.addr != nullptr && params.addr->sa_family != AF_INET && params.addr->sa_family != AF_INET6)) {
        LOOM_LOG_ERROR("rc/{}: listen: {}", name,
                       params.on_request == nullptr ? "no request callback" : "not an IPv4 or IPv6 address");
        return Status::invalid_param;
    }
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(cm_channel_, &id, nullptr, RDMA_PS_TCP) != 0) {
        LOOM_LOG_ERROR("rc/{}: rdma_create_id failed: {}", name, std::strerror(errno));
        return Status::no_resource;
    }
    sockaddr_storage addr{};
    if (params.addr != nullptr) {
        std::memcpy(&addr, params.addr,
                    std::min<std::size_t>(params.addr_len, sizeof(addr)));
    } else {
        addr = make_sockaddr(ip_->family, ip_->bytes, 0);
    }
    std::string text = sockaddr_text(reinterpret_cast<sockaddr*>(&addr));
    auto fail = [&](Status s, const std::string& why) -> Result<std::unique_ptr<Listener>> {
        LOOM_LOG_ERROR("rc/{}: listen on {}: {}", name, text, why);
        (void)rdma_destroy_id(id);
        return s;
    };
    if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&addr)) != 0) {
        int err = errno;
        return fail(err == EADDRINUSE ? Status::busy : Status::invalid_address,
                    fmt::format("rdma_bind_addr failed: {}", std::strerror(err)));
    }
    if (id->verbs != nullptr && !cm_on_our_device(id->verbs)) {
        return fail(Status::invalid_address, fmt::format("the address belongs to RDMA device {}, not to this one",
                                                         ibv_get_device_name(id->verbs->device)));
    }
    if (rdma_listen(id, 128) != 0) return fail(Status::io_error, fmt::format("rdma_listen failed: {}", std::strerror(errno)));
    auto listener = std::make_unique<RcListener>(this, id, params.on_request, params.arg);
    id->context = nullptr;  // events of a listener id are recognized by the id (cm_handle)
    listeners_.push_back(listener.get());
    LOOM_LOG_DEBUG("rc/{}: listening for client connections on {}", name,
                   sockaddr_text(rdma_get_local_addr(id)));
    return std::unique_ptr<Listener>(std::move(listener));
}

RcConnRequest* RcIface::find_request(ConnRequest* base) const {
    // Compared by address only: a request already answered is freed, and must not be read.
    for (RcListener* listener : listeners_) {
        for (const auto& request : listener->requests) {
            if (request.get() == base) return request.get();
        }
    }
    return nullptr;
}

Status RcIface::reject(ConnRequest* base, const void* priv, std::size_t priv_len) {
    RcConnRequest* request = find_request(base);
    if (request == nullptr || priv_len > kRcMaxUserPriv || (priv_len > 0 && priv == nullptr)) {
        LOOM_LOG_ERROR("rc/{}: reject: {}", resource().dev_name,
                       priv_len > kRcMaxUserPriv ? fmt::format("{} bytes of private data (at most {})", priv_len,
                                                               kRcMaxUserPriv)
                                                 : std::string("not a pending request of this iface"));
        return Status::invalid_param;
    }
    rdma_cm_id* id = request->id;
    RcListener* listener = request->listener;
    std::vector<std::uint8_t> buf = with_user_priv(cm_private(), priv, priv_len);
    int rc = rdma_reject(id, buf.data(), static_cast<std::uint8_t>(buf.size()));
    LOOM_LOG_DEBUG("rc/{}: rejected the connection request from {}", resource().dev_name, request->peer_text);
    cm_dead_ids_.push_back(id);
    cm_countdown_ = 1;  // destroyed at the next progress call
    if (!listener->take(request)) return Status::invalid_param;
    return rc == 0 ? Status::ok : Status::io_error;
}

void RcIface::cm_listener_request(RcListener* listener, rdma_cm_event* event, rdma_cm_id*& reject) {
    const std::string& name = resource().dev_name;
    rdma_cm_id* id = event->id;
    id->context = nullptr;  // not an endpoint (yet): cm_handle ignores its events
    std::string peer = sockaddr_text(rdma_get_peer_addr(id));
    auto refuse = [&](const std::string& why) {
        LOOM_LOG_WARN("rc/{}: refused a client connection from {}: {}", name, peer, why);
        (void)rdma_reject(id, nullptr, 0);
        reject = id;
    };
    RcCmData data;
    const std::size_t len = event->param.conn.private_data_len;
    if (RcCmDataError error = parse_cm_data(event->param.conn.private_data, len, seg_size, data);
        error != RcCmDataError::none) {
        refuse(describe_cm_data(error, data, len, seg_size));
        return;
    }
    if (!cm_on_our_device(id->verbs)) {
        refuse("it arrived on another device");
        return;
    }
    auto request = std::make_unique<RcConnRequest>();
    request->iface = this;
    request->listener = listener;
    request->id = id;
    request->peer = data.header;
    request->user_priv.assign(data.user, data.user + data.user_len);
    request->peer_text = peer;
    RcConnRequest* raw = request.get();
    listener->requests.push_back(std::move(request));
    LOOM_LOG_DEBUG("rc/{}: connection request from {} ({} bytes of private data)", name, peer, data.user_len);
    listener->notify(raw);
}

Result<RcEp*> RcIface::cm_accept_request(RcConnRequest* request, const EpParams& params) {
    const std::string& name = resource().dev_name;
    if (find_request(request) == nullptr) {
        LOOM_LOG_ERROR("rc/{}: ep_create: the connection request is not a pending one of this iface", name);
        return Status::invalid_param;
    }
    rdma_cm_id* id = request->id;
    auto created = new_ep(params, false);
    if (!created) {
        (void)reject(request, nullptr, 0);
        return created.status();
    }
    RcEp* ep = *created;
    ep->cold->on_connect = params.on_connect;
    ep->cold->on_connect_arg = params.on_connect_arg;
    ep->cold->peer = request->peer_text;
    ep->cold->peer_window = request->peer.window;
    ep->cold->flush_addr = request->peer.flush_addr;
    ep->cold->flush_rkey = request->peer.flush_rkey;
    Status status = create_qp(ep, id);
    if (status == Status::ok) {
        id->context = ep;
        if (srq_ == nullptr) status = post_rx_qp(ep, static_cast<int>(fc_window_ + kGrantSlots));
    }
    if (status == Status::ok) {
        std::vector<std::uint8_t> buf = with_user_priv(cm_private(), params.priv_data, params.priv_len);
        rdma_conn_param param =
            conn_param(buf, std::min<std::uint32_t>(max_dest_rd_atomic_, max_rd_atomic_), max_rd_atomic_);
        param.qp_num = ep->qp_num;
        status = cm_qp_ready(ep, param.responder_resources, param.initiator_depth);
        if (status != Status::ok) {
            (void)rdma_reject(id, nullptr, 0);
        } else if (rdma_accept(id, &param) != 0) {
            LOOM_LOG_ERROR("rc/{}: rdma_accept of {} failed: {}", name, request->peer_text, std::strerror(errno));
            status = Status::io_error;
        }
    }
    request->listener->take(request);  // answered either way; the id now belongs to the endpoint
    if (status != Status::ok) {
        if (ep->cold->cm_id == nullptr) {
            (void)rdma_reject(id, nullptr, 0);
            cm_dead_ids_.push_back(id);
        }
        id->context = nullptr;
        ep->cold->on_connect = nullptr;
        abandon_ep(ep);
        return status;
    }
    cm_set_state(ep, CmState::accepting);
    LOOM_LOG_DEBUG("rc/{}: accepted the client connection from {} on QP {:#x}", name, ep->cold->peer, ep->qp_num);
    return ep;
}

Status RcIface::cm_connect_sockaddr(RcEp* ep, const sockaddr* dst) {
    const std::string& name = resource().dev_name;
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(cm_channel_, &id, ep, RDMA_PS_TCP) != 0) {
        LOOM_LOG_ERROR("rc/{}: rdma_create_id failed: {}", name, std::strerror(errno));
        return Status::no_resource;
    }
    ep->cold->cm_id = id;
    sockaddr_storage src = make_sockaddr(ip_->family, ip_->bytes, 0);
    ep->cold->peer = sockaddr_text(dst);
    if (rdma_resolve_addr(id, reinterpret_cast<sockaddr*>(&src), const_cast<sockaddr*>(dst),
                          timeout_ms(config_.cm_timeout)) != 0) {
        LOOM_LOG_ERROR("rc/{}: rdma_resolve_addr({}) failed: {}", name, ep->cold->peer, std::strerror(errno));
        return Status::unreachable;
    }
    cm_set_state(ep, CmState::resolving_addr);
    return Status::ok;
}

void RcIface::cm_close_listeners() {
    while (!listeners_.empty()) {
        LOOM_LOG_WARN("rc/{}: the iface is closed before one of its listeners; it stops listening",
                      resource().dev_name);
        listeners_.back()->detach();
    }
}

bool RcIface::report_connect_failure(RcEp* ep, Status status, const void* data, std::size_t len) {
    if (ep->cold->on_connect == nullptr || (ep->flags & kEpConnected) || ep->cold->error_reported) return false;
    ep->cold->error_reported = true;  // the failure is told here, not to on_error
    // A reject's user data, when it has a valid header (a reject by rdma_cm itself has none).
    RcCmData priv;
    bool valid = parse_cm_data(data, len, 0, priv) == RcCmDataError::none;
    ep->cold->on_connect(ep->cold->on_connect_arg, ep, status, valid ? priv.user : nullptr,
                         valid ? priv.user_len : 0);
    return true;
}

}  // namespace loom::uct::ib
