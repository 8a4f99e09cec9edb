/**
 * The rc iface: a reliable-connection transport on one port of a verbs device. Its code:
 * rc_iface.cc (resources, attributes, addresses, endpoint objects, receive buffers),
 * rc_qp.cc (the queue pair of an endpoint), rc_cm.cc (connection set-up), rc_rx.cc
 * (progress and completions), rc_event.cc (wake-up events); the data path is rc_ep.cc.
 *
 * Resources per iface: a send CQ and a receive CQ shared by all its endpoints, an SRQ
 * where the device has one (LOOM_IB_SRQ), registered pools of receive buffers and of
 * bounce buffers, and, in rdma_cm mode, an event channel with a listening id.
 *
 * Receive flow control: every endpoint reserves fc_window + 2 receive buffers of the
 * iface's LOOM_IB_RX_QUEUE_LEN budget (the SRQ, or its own receive queue), and the peer
 * starts with fc_window credits, one per active message. The receiver returns credits
 * in the header of every send (piggy-backed) or, once half a window has accumulated, in
 * a grant of its own. At most two grants are ever unconsumed (each carries at least
 * half a window of the credits in circulation), which is what the 2 extra buffers are
 * for. So a sender never finds a receiver without a posted buffer: there is no
 * receiver-not-ready (RNR) retry in normal operation.
 *
 * Connection models:
 *  - verbs (InfiniBand, RoCE): connect-to-ep. ep_create without an address creates a QP
 *    in INIT; ep_get_address gives QP number, PSN, MTU, window and buffer size (the GID
 *    and LID are in the device address); ep_connect_to_ep moves it to RTR and RTS.
 *  - rdmacm (iWARP, which needs a connection manager, or LOOM_IB_CM=rdmacm): connect-
 *    to-iface. The iface listens on an rdma_cm id bound to its IP address; the iface
 *    address carries the port. ep_create starts address and route resolution and
 *    connects; the peer iface accepts on an endpoint of its own (kEpPassive, never seen
 *    by the user) that receives the messages and returns credits. The rdma_cm event
 *    channel is polled from progress: every progress call while a connection is being
 *    set up, else at most every kCmIdlePollUs (checked every kCmPollInterval-th call), so
 *    idle progress makes almost no system calls.
 *    On iWARP an initiator also probes its acceptor once after its first requests (see
 *    probe_acceptors): soft-iWARP can leave the first frames of a connection unread.
 *
 * Wake-up (kCapEventRecv, rc_event.cc): both CQs report to one completion channel; the
 * event fd is an epoll set of the iface's holding that channel, the rdma_cm channel and
 * a timer for failed endpoints' flush grace. event_arm requests a notification on both
 * CQs and then polls each once more, keeping what it finds for the next progress call
 * (the stashes), so a completion that came before the request is not slept through.
 * Nothing of this runs unless a caller arms: progress pays one predictable branch per CQ.
 */
#pragma once

#include "uct/api/uct.h"
#include "uct/ib/ib_config.h"
#include "uct/ib/ib_device.h"
#include "uct/ib/rc_ep.h"
#include "uct/ib/rc_peer_data.h"

#include "ucs/async/event_set.h"
#include "ucs/memory/mem_pool.h"
#include "ucs/time/clock.h"

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

namespace loom::uct::ib {

class RcListener;

/** A client's connection request, waiting for ep_create(conn_request) or reject. */
struct RcConnRequest : ConnRequest {
    RcListener* listener = nullptr;
    rdma_cm_id* id = nullptr;
    RcCmPrivate peer{};                   ///< the client's Loom header (window, flush word)
    std::vector<std::uint8_t> user_priv;  ///< the client's private data
    std::string peer_text;                ///< for log lines
};

class IbMd;

/** An iface flush in progress: completes the user's Completion when every endpoint's part is done. */
struct IfaceFlush {
    Completion* comp;
    int remaining;
    Status status;
    IfaceFlush* next;  ///< in the iface's list of flushes in progress (freed with the iface)
    IfaceFlush* prev;
};

/** Opens an rc iface on @p port of @p md. */
Result<std::unique_ptr<Iface>> rc_iface_open(IbMd* md, const PortInfo& port, Worker* worker,
                                             const TlResource& resource, const IfaceParams& params);

/** See the file comment. */
class RcIface final : public Iface {
    // Declared before the pools, which deregister their chunks through it when they are destroyed.
    std::vector<ibv_mr*> chunk_mrs_;  ///< registrations of pool chunks
    std::uint32_t chunk_lkey_ = 0;    ///< lkey of the chunk whose elements are being initialized

public:
    /** rdma_cm channel polling interval of an idle iface, in progress calls. */
    static constexpr unsigned kCmPollInterval = 64;
    /** rdma_cm channel polling interval of an idle iface, in microseconds (new requests, disconnects). */
    static constexpr unsigned kCmIdlePollUs = 1000;

    /** iWARP initiators: the first probe of the acceptor, after the connection is established. */
    static constexpr std::chrono::milliseconds kProbeFirst{1};
    /** iWARP initiators: probes at most, each after twice the previous wait (1 ms ... 2 s, 4 s in all). */
    static constexpr std::uint8_t kProbeMax = 12;

    /** Receive buffers an endpoint reserves beyond its window: room for the two grants that can be
     * unconsumed. */
    static constexpr std::uint32_t kGrantSlots = 2;

    RcIface(IbMd* md, const PortInfo& port, Worker* worker, const TlResource& resource,
            const IbConfig& config);
    ~RcIface() override;

    /** Checks the configuration and creates the CQs, SRQ, pools and (rdma_cm) the listener. */
    Status init();

    Status query(IfaceAttr& attr) const override;
    Status get_device_address(std::uint8_t* out) const override;
    Status get_address(std::uint8_t* out) const override;
    bool is_reachable(const std::uint8_t* dev_addr, std::size_t dev_addr_len, const std::uint8_t* iface_addr,
                      std::size_t iface_addr_len, std::string* reason) const override;
    Result<Ep*> ep_create(const EpParams& params) override;
    void ep_destroy(Ep* ep) override;
    /** Listens on an rdma_cm id of its own (rdma_cm ifaces only); destroy listeners before the iface. */
    Result<std::unique_ptr<Listener>> listen(const ListenParams& params) override;
    Status reject(ConnRequest* request, const void* priv, std::size_t priv_len) override;
    Status ep_get_address(Ep* ep, std::uint8_t* out) override;
    Status ep_connect_to_ep(Ep* ep, const std::uint8_t* dev_addr, std::size_t dev_addr_len,
                            const std::uint8_t* ep_addr, std::size_t ep_addr_len, unsigned flags = 0) override;
    Status ep_release_sends(Ep* ep) override;
    /** The iface's epoll set (completion channel, rdma_cm channel, grace timer); made on first use. */
    Result<int> event_fd() override;
    /** Requests CQ notifications and checks nothing waits; busy when progress has work (rc_event.cc). */
    Status event_arm() override;

    // --- used by the data path (rc_ep.cc) ----------------------------------------------------

    /** Polls both CQs, serves the arbiter, reports failures, reaps closed endpoints, polls rdma_cm when due.
     */
    unsigned progress();

    /** ep_flush of @p ep: ok when idle, in_progress (with @p comp queued), no_resource, or the failure. */
    Status ep_flush(RcEp* ep, unsigned flags, Completion* comp);
    /** IfaceOps::ep_check: a keep-alive probe of @p ep's peer (rc_rx.cc). */
    Status ep_check(RcEp* ep, std::uint64_t timeout_ns);
    /**
     * The first operation of an endpoint created with connect_on_first_use has to wait for
     * the connection: starts it (rdma_cm). ok, or the status the endpoint failed with (rc_cm.cc).
     */
    LOOM_COLD Status cm_connect_on_first_use(RcEp* ep);

    /** iface_flush: flushes every usable endpoint; @p comp completes when all have. */
    Status iface_flush(unsigned flags, Completion* comp);

    /** Puts @p ep on the arbiter (pending requests or a due grant), once. */
    void arbiter_add(RcEp* ep) {
        if (!(ep->flags & kEpInArbiter)) {
            ep->flags |= kEpInArbiter;
            arbiter_fresh_ = true;
            arbiter_.push_back(*ep);
        }
    }

    /**
     * Status of an operation that found no resources on @p ep: no_resource, or why it cannot
     * send. The first operation of an endpoint created with connect_on_first_use starts its
     * connection here.
     */
    LOOM_COLD Status resource_status(RcEp* ep);

    /** Logs and converts an ibv_post_send failure (ENOMEM: no_resource, else io_error). */
    LOOM_COLD Status post_failed(RcEp* ep, int rc, const char* what);

    /** Every live endpoint (user-visible and passive). */
    const std::vector<RcEp*>& endpoints() const noexcept { return eps_; }

    /** True on an iWARP device. */
    bool iwarp() const noexcept { return iwarp_; }

    // Hot fields, read on every operation.
    std::int32_t cq_avail = 0;  ///< free send CQ entries
    std::uint32_t signal_interval = 1;
    std::uint32_t max_inline = 0;    ///< bytes of inline data per request
    std::uint32_t max_am_short = 0;  ///< payload of am_short (inline minus the 4+8 header bytes)
    std::uint32_t seg_size = 0;      ///< am/put/get bcopy payload
    std::uint32_t max_send_sge = 1;
    std::uint32_t max_read_sge = 1;
    std::uint32_t max_zcopy = 0;  ///< put/get zcopy bytes per request
    std::uint32_t max_am_zcopy_hdr = 0;
    std::uint16_t grant_threshold = 1;  ///< send a grant once this many credits are owed
    std::uint32_t atomic_scratch_lkey = 0;
    std::uint64_t* atomic_scratch = nullptr;  ///< where posted atomics' old values land
    ucs::MemPool tx_desc_pool;                ///< registered bounce descriptors (TxOp + header + payload)
    ucs::MemPool op_pool;                     ///< TxOp records without a buffer
    ucs::MemPool rx_pool;                     ///< registered receive descriptors

    /** Records that request @p sn of @p ep (a read or an atomic) waits for its response. */
    void response_due(RcEp* ep, std::uint64_t sn);

    /** Records that request @p sn of @p ep (an atomic for the target's CPU) waits for its reply. */
    void cpu_atomic_due(RcEp* ep, std::uint64_t sn);

    /** ep_fence's part for atomics for the target's CPU: holds new requests until they are applied. */
    void fence_cpu_atomics(RcEp* ep);

    /** Free send queue entries of @p ep, a held fence not counted (for grants and replies). */
    static std::int32_t sq_room(const RcEp* ep) {
        return ep->sq_avail + (LOOM_UNLIKELY(ep->cold->fence_held) ? kFenceHold : 0);
    }

    /** iWARP initiators whose acceptor has not answered a probe yet (probe_acceptors). */
    std::size_t unconfirmed_count() const { return unconfirmed_.size(); }

private:
    // construction, attributes and addresses (rc_iface.cc)
    Status check_config();
    bool ooo_seen_ = false;  ///< completions came out of order once (logged once)
    Status init_pools();
    void perf_model(IfaceAttr& attr) const;
    /** What this iface is, for the checks of a peer's addresses (rc_peer_data.h). */
    RcLocalInfo local_info() const;
    Status parse_dev_address(const std::uint8_t* dev_addr, std::size_t len, RcDeviceAddress& out,
                             std::string* reason) const {
        return check_dev_address(dev_addr, len, local_info(), out, reason);
    }
    Status parse_iface_address(const std::uint8_t* iface_addr, std::size_t len, RcIfaceAddress& out,
                               std::string* reason) const {
        return check_iface_address(iface_addr, len, local_info(), out, reason);
    }

    // endpoint objects and receive buffers (rc_iface.cc)
    /**
     * A new endpoint in eps_, with its receive buffers reserved unless @p reserve is false
     * (connect on first use: reserved when it connects).
     */
    Result<RcEp*> new_ep(const EpParams& params, bool passive, bool reserve = true);
    /**
     * Drops @p ep's operations in flight. With @p complete their completions run with
     * canceled (an endpoint destroyed by its user: what tcp and shm do, so the layer above
     * frees what it tracks them with); without, silently (the iface itself goes away).
     */
    void discard_ops(RcEp* ep, bool complete);
    void close_ep(RcEp* ep);
    void delete_ep(RcEp* ep);
    /** Frees an endpoint whose creation failed half-way (never seen by the user). */
    void abandon_ep(RcEp* ep);
    void reap_closing();

    /** Takes @p ep's window of receive buffers out of the iface's budget (RcEpCold::rx_reserved). */
    Status reserve_rx(RcEp* ep);
    /** Gives @p ep's reservation back, when it has one. */
    void release_rx(RcEp* ep);
    void prepare_recv(void* desc, ibv_recv_wr& wr, ibv_sge& sge);
    void mark_posted(void* desc, std::uint8_t posted);
    /** The endpoint of @p qpn (nullptr when none), through the one-entry cache. */
    RcEp* rx_ep_of(std::uint32_t qpn) {
        if (LOOM_LIKELY(rx_last_ep_ != nullptr && qpn == rx_last_qpn_)) return rx_last_ep_;
        auto it = qp_map_.find(qpn);
        if (it == qp_map_.end()) return nullptr;
        rx_last_qpn_ = qpn;
        rx_last_ep_ = it->second;
        return it->second;
    }
    void post_rx_srq(int count);
    Status post_rx_qp(RcEp* ep, int count);

    // the queue pair of an endpoint (rc_qp.cc)
    ibv_qp_init_attr qp_init_attr(std::uint32_t inline_size) const;
    Status probe_inline();
    Status create_qp(RcEp* ep, rdma_cm_id* cm_id);
    Status qp_to_init(RcEp* ep);
    /**
     * Moves a verbs endpoint's QP from INIT to RTR and RTS, connected to the QP of the
     * peer's endpoint address @p peer on the device of @p dev; io_error (logged) when
     * the device refuses.
     */
    Status qp_to_rts(RcEp* ep, const RcDeviceAddress& dev, const RcEpAddress& peer);
    /**
     * Moves an rdma_cm endpoint's QP to @p state with rdma_cm's attributes (we own the QP,
     * so librdmacm does not); @p rd_atomic, when not 0, overrides the RTR responder
     * resources or the RTS initiator depth.
     */
    Status cm_qp_to(RcEp* ep, ibv_qp_state state, std::uint32_t rd_atomic);
    /** INIT, RTR and RTS for an rdma_cm endpoint: before rdma_accept, or on the connect response. */
    Status cm_qp_ready(RcEp* ep, std::uint32_t responder_resources, std::uint32_t initiator_depth);
    void qp_to_error(RcEp* ep);
    /** Destroys @p ep's QP, if it has one, and forgets its QP number. */
    void destroy_qp(RcEp* ep);

    // progress, completions, credit grants, the arbiter, failures, flush (rc_rx.cc)
    /** A completion event_arm took out of a CQ, for the next progress call to handle first. */
    struct CqStash {
        ibv_wc wc{};
        bool full = false;
    };

    unsigned poll_tx();
    unsigned poll_rx();
    /** Fills wcs_ from @p cq, the completion in @p stash first; returns how many (errors logged, 0). */
    int poll_cq(ibv_cq* cq, CqStash& stash, const char* what);
    void complete_upto(RcEp* ep, std::uint64_t sn, Status status);
    /** The last sn whose operation may complete now (acked, and no response or reply due before it). */
    std::uint64_t completable(RcEp* ep);
    // atomics for the target's CPU (rc_rx.cc)
    void cpu_atomic_request(RcEp* ep, const std::uint8_t* data, std::size_t length);
    void cpu_atomic_reply(RcEp* ep, const std::uint8_t* data, std::size_t length);
    /** Sends the replies of @p ep's replies_due that find room; true when none is left. */
    bool send_replies(RcEp* ep);
    void fence_release(RcEp* ep);
    void finish_op(TxOp* op, Status status);
    LOOM_COLD void tx_error(RcEp* ep, const ibv_wc& wc);
    LOOM_COLD void rx_error(RcEp* ep, const ibv_wc& wc);
    void send_grant(RcEp* ep);
    /** What kEpGrantDue stands for: the atomic replies due, then the credit grant. */
    void send_control(RcEp* ep);
    void dispatch_arbiter();
    LOOM_COLD void fail_ep(RcEp* ep, Status status, const std::string& why);
    void report_errors();
    void drain_failed();

    Status post_flush_marker(RcEp* ep);
    void probe_acceptors(std::chrono::steady_clock::time_point now);
    /** True while @p ep (in unconfirmed_) has requests its acceptor may not have read. */
    static bool probe_wanted(const RcEp* ep);
    /** True once the response to @p ep's last probe has arrived (its read's own completion). */
    static bool probe_answered(const RcEp* ep);
    /** True once request @p sn of @p ep, and every one before it, has its answer from the peer. */
    static bool sn_answered(const RcEp* ep, std::uint64_t sn);
    Status flush_prepare(RcEp* ep, bool& needs_marker) const;
    void finish_flush_part(IfaceFlush* flush, Status status);
    void unlink_flush(IfaceFlush* flush);

    // wake-up events (rc_event.cc)
    Status create_comp_channel();
    Status open_events();
    void close_events();
    void ack_cq_events();
    bool failure_to_report() const;
    Status set_grace_timer();

    // connection set-up, both models (rc_cm.cc)
    void connected(RcEp* ep, std::uint16_t peer_window);
    /** True when @p ctx (an rdma_cm id's context) is a context of this iface's device. */
    bool cm_on_our_device(const ibv_context* ctx) const;
    friend class RcListener;
    Status cm_listen();
    Status cm_connect_sockaddr(RcEp* ep, const sockaddr* dst);
    /** Stops the listeners the user still holds (their ids use this iface's channel). */
    void cm_close_listeners();
    Result<RcEp*> cm_accept_request(RcConnRequest* request, const EpParams& params);
    void cm_listener_request(RcListener* listener, rdma_cm_event* event, rdma_cm_id*& reject);
    /** @p request when it is an unanswered request of one of this iface's listeners, else null. */
    RcConnRequest* find_request(ConnRequest* request) const;
    /** Calls the endpoint's on_connect with a failure, once; true when it did (on_error stays quiet). */
    bool report_connect_failure(RcEp* ep, Status status, const void* data, std::size_t len);
    Status cm_connect(RcEp* ep, const RcDeviceAddress& dev, std::uint16_t port);
    unsigned cm_poll();
    void cm_handle(rdma_cm_event* event, rdma_cm_id*& reject);
    void cm_accept(rdma_cm_event* event, rdma_cm_id*& reject);
    void cm_set_state(RcEp* ep, CmState state);
    /** Connection parameters for rdma_connect/rdma_accept carrying @p priv (which must outlive the call). */
    rdma_conn_param conn_param(const std::vector<std::uint8_t>& priv, std::uint32_t responder_resources,
                               std::uint32_t initiator_depth) const;
    /** Our rdma_cm private data: version, receive window, segment size, flush word. */
    RcCmPrivate cm_private() const;

    IbMd* md_;
    IbConfig config_;
    const PortInfo& port_;
    bool iwarp_;
    bool atomics_;  ///< the device has atomics (the QPs allow remote atomics)
    AtomicPath
        atomic_path_;  ///< who performs ours: device, cpu, or auto_ for nobody (LOOM_IB_ATOMICS=device, none)
    bool use_rdmacm_ = false;
    unsigned gid_index_ = 0;
    ibv_gid gid_{};
    ibv_mtu path_mtu_ = IBV_MTU_1024;
    std::uint8_t timeout_exp_ = 0;
    std::uint32_t max_rd_atomic_ = 1;
    std::uint32_t max_dest_rd_atomic_ = 1;
    std::uint32_t tx_queue_len_ = 0;
    std::uint32_t rx_budget_ = 0;  ///< receive buffers not reserved by an endpoint
    std::uint32_t fc_window_ = 0;
    std::optional<IpAddress> ip_;
    std::uint16_t gen_ = 0;  ///< generation of the last endpoint created

    ibv_comp_channel* comp_channel_ = nullptr;  ///< events of both CQs (non-blocking)
    ibv_cq* send_cq_ = nullptr;
    ibv_cq* recv_cq_ = nullptr;
    CqStash rx_stash_;
    CqStash tx_stash_;
    ibv_srq* srq_ = nullptr;
    std::int32_t srq_posted_ = 0;          ///< receives on the SRQ
    std::int32_t srq_target_ = 0;          ///< receives the SRQ should hold (sum of reservations)
    std::vector<void*> rx_descs_;          ///< every receive descriptor, to take back posted ones at the end
    std::vector<std::uint8_t> rx_posted_;  ///< per descriptor of rx_descs_: posted to a receive queue
    void* atomic_scratch_mem_ = nullptr;
    ibv_mr* scratch_mr_ = nullptr;
    ibv_mr* flush_word_mr_ = nullptr;  ///< iWARP: the word peers read to flush (second cache line)
    std::vector<ibv_wc> wcs_;

    std::unordered_map<std::uint32_t, RcEp*> qp_map_;
    /**
     * The endpoint of the QP number the receive path looked up last (a hit saves a hash
     * lookup per message when one peer talks: ping-pong, streams); reset whenever qp_map_
     * changes.
     */
    std::uint32_t rx_last_qpn_ = 0;
    RcEp* rx_last_ep_ = nullptr;
    ucs::Queue<RcEp, &RcEp::arb_link> arbiter_;
    bool arbiter_fresh_ = false;  ///< an endpoint joined the arbiter since it was last dispatched
    std::vector<RcEp*> eps_;      ///< live endpoints (user-visible and passive)
    std::vector<RcEp*> closing_;  ///< destroyed, waiting for their flushed requests
    std::vector<RcEp*> failed_unreported_;
    std::vector<RcEp*> draining_;  ///< failed, waiting for the device to flush their requests
    std::vector<RcEp*> unconfirmed_;  ///< iWARP initiators whose acceptor has not answered a probe yet
    IfaceFlush* flushes_ = nullptr;

    rdma_event_channel* cm_channel_ = nullptr;
    rdma_cm_id* cm_listen_id_ = nullptr;
    std::vector<RcListener*> listeners_;  ///< client/server listeners (Iface::listen)
    std::vector<rdma_cm_id*> cm_dead_ids_;  ///< to destroy once no event of theirs is being handled
    std::uint16_t cm_port_ = 0;
    unsigned cm_countdown_ = 1;
    ucs::Ticks cm_last_poll_ = 0;
    ucs::Ticks cm_idle_ticks_ = 0;  ///< kCmIdlePollUs in clock ticks (set by init, once the clock runs)
    unsigned cm_busy_ = 0;  ///< endpoints in connection set-up

    ucs::EventSet events_;  ///< the event fd (event_fd), made on first use
    int timer_fd_ = -1;     ///< in events_: the earliest flush grace of a failed endpoint, or probe
    bool timer_set_ = false;
};

/** Defined here, where RcIface is complete. */
inline RcIface* RcEp::rc_iface() const noexcept { return static_cast<RcIface*>(iface); }

}  // namespace loom::uct::ib
