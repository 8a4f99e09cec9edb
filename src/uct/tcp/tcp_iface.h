/**
 * The tcp iface: a listening socket on one network device, an epoll set over it and
 * every connection of the iface, and the progress function that drives them. Its code
 * is in four files: tcp_iface.cc (set-up, polling, failures, pending requests, flush),
 * tcp_cm.cc (connection set-up), tcp_ep.cc (the send side) and tcp_rx.cc (progress and
 * the receive side).
 */
#pragma once

#include "uct/api/uct.h"
#include "uct/tcp/tcp_ep.h"
#include "uct/tcp/tcp_md.h"

#include "ucs/async/event_set.h"
#include "ucs/datastruct/list.h"
#include "ucs/memory/mem_pool.h"
#include "ucs/time/clock.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cerrno>
#include <string>

namespace loom::uct::tcp {

/** Cold per-connection state: callbacks, the peer's address, timers, errors. */
struct EpCold {
    void (*on_error)(void* arg, Ep* ep, Status status) = nullptr;
    void* on_error_arg = nullptr;
    sockaddr_in peer{};            ///< active: the peer iface's listening address; passive: the remote socket
    std::uint64_t peer_cookie = 0; ///< active: the cookie of the peer iface
    Status error = Status::ok;     ///< why the connection failed
    Status sticky = Status::ok;    ///< first rejected posted operation since the last remote flush
    ucs::Ticks deadline = 0;       ///< connecting/handshake: give up after this
    ucs::Ticks retry_at = 0;       ///< connecting with fd == -1: reconnect at this time
    ucs::Queue<ReplyDesc, &ReplyDesc::link> replies;  ///< replies waiting for tx, in order
    unsigned small_run = 0;        ///< kEpBulk: small frames written since the last bulk one
};

/**
 * Names this process's network stack (the kernel's boot id and the network namespace):
 * sent in device addresses, so that loopback devices of two stacks do not pair up.
 */
std::uint64_t net_stack_id();

// --- small helpers of the transport's files ---------------------------------------------------

/** "1.2.3.4:5678" for logs. */
inline std::string addr_text(const sockaddr_in& addr) {
    char ip[INET_ADDRSTRLEN] = "?";
    ::inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));
    return std::string(ip) + ":" + std::to_string(ntohs(addr.sin_port));
}

/** "1.2.3.4" for logs. */
inline std::string ip_text(in_addr addr) {
    char ip[INET_ADDRSTRLEN] = "?";
    ::inet_ntop(AF_INET, &addr, ip, sizeof(ip));
    return ip;
}

/** The status of a connection that failed with errno @p err. */
inline Status errno_status(int err) {
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

class TcpIface final : public Iface {
public:
    /** Opens the listening socket and the epoll set; the result's status says why not. */
    static Result<std::unique_ptr<Iface>> open(TcpMd* md, Worker* worker, const TlResource& resource,
                                               const NetDevice& device, const TcpConfig& config);
    ~TcpIface() override;

    Status query(IfaceAttr& attr) const override;
    Status get_device_address(std::uint8_t* out) const override;
    Status get_address(std::uint8_t* out) const override;
    bool is_reachable(const std::uint8_t* dev_addr, std::size_t dev_addr_len, const std::uint8_t* iface_addr,
                      std::size_t iface_addr_len, std::string* reason) const override;
    Result<Ep*> ep_create(const EpParams& params) override;
    void ep_destroy(Ep* ep) override;
    Result<int> event_fd() override;
    Status event_arm() override;

    // --- progress and the receive side (tcp_rx.cc) -----------------------------------------------

    /** Handles ready sockets, failures, timeouts and pending requests; returns events handled. */
    unsigned progress();

    /** Reads and handles what arrived on @p ep; true when something was read. */
    bool rx_progress(TcpEp* ep);

    /**
     * Gives @p ep's connection a receive buffer if it has none; false (the connection
     * failed with no_memory, logged) when none can be had.
     */
    bool rx_hold_buffer(TcpEp* ep);
    /** Returns @p ep's receive buffer to the pool when nothing in it is left to parse. */
    void rx_release_if_idle(TcpEp* ep);
    /** rx_progress's reads, with a buffer held: true when something was received. */
    bool rx_read(TcpEp* ep);

    // --- the send side (tcp_ep.cc) ---------------------------------------------------------------

    /** Writes more of @p ep's partial frame; completes it when done. */
    void tx_progress(TcpEp* ep);

    /**
     * Called when sendmsg() of a frame returned @p sent (< the frame size, or -1 with
     * errno). Keeps the unsent bytes in a TxDesc, copying the first @p ncopy iovecs and
     * referencing the rest, so the frame is committed: returns in_progress when user
     * memory is still referenced (@p comp, which may be null, completes once the frame is
     * written), ok when everything left was copied. A socket error fails the connection
     * and returns its status (nothing was committed).
     */
    LOOM_COLD Status send_incomplete(TcpEp* ep, const iovec* iov, unsigned iovcnt, ssize_t sent, unsigned ncopy,
                                     Completion* comp);

    /** As send_incomplete, for a frame packed in @p desc at @p start; desc is kept or released. */
    LOOM_COLD Status send_desc_incomplete(TcpEp* ep, TxDesc* desc, std::uint8_t* start, std::size_t total,
                                          ssize_t sent);

    /**
     * Copies a whole frame into @p ep's staging buffer while its connection is being
     * established; no_resource when it does not fit (or no buffer is available).
     */
    LOOM_COLD Status stage(TcpEp* ep, const iovec* iov, std::size_t iovcnt, std::size_t total);

    /**
     * The first operation on idle @p ep: wakes it. ok once it is connecting; else the
     * status to return (the endpoint failed, or the system refused and it stays idle).
     */
    LOOM_COLD Status wake_on_send(TcpEp* ep);

    /** The status a send returns when @p ep cannot send now (no_resource, or the failure). */
    LOOM_COLD Status not_ready(TcpEp* ep) const;

    // --- failures, polling, congestion control, buffers, pending requests, flush (tcp_iface.cc) ---

    /** Flush with kFlushCancel: completes everything outstanding with canceled and closes the connection. */
    void cancel(TcpEp* ep);

    /** Marks @p ep failed with @p status; teardown and on_error happen at the end of progress. */
    LOOM_COLD void fail(TcpEp* ep, Status status);

    /** Connections of this iface (user endpoints and accepted ones), for tests and diagnostics. */
    std::size_t num_connections() const { return conns_.length(); }
    /** Receive buffers ever allocated (each a segment), for tests and diagnostics. */
    std::size_t num_rx_buffers() const { return rx_buf_pool_.num_elems(); }
    /** Segment-sized send buffers ever allocated, for tests and diagnostics. */
    std::size_t num_tx_buffers() const { return tx_pool_.num_elems(); }

    /**
     * @p ep writes a frame of kBulkFrame bytes or more: with LOOM_TCP_CONGESTION=auto on
     * loopback, it switches to the bulk congestion control (one setsockopt, once).
     */
    LOOM_COLD void note_bulk(TcpEp* ep);

    /** A kEpBulk connection writes a small frame: after kBulkLinger in a row it switches back. */
    LOOM_COLD void note_small(TcpEp* ep);

    /** Registers the epoll events @p ep needs in its state (a system call only when they change). */
    void update_poll(TcpEp* ep);

    TxDesc* get_tx_desc() {
        auto* desc = static_cast<TxDesc*>(tx_pool_.get());
        if (desc != nullptr) desc->stage_class = 0;
        return desc;
    }
    void put_tx_desc(TxDesc* desc) {
        (desc->stage_class == 0 ? tx_pool_ : tx_stage_pools_[desc->stage_class - 1]).put(desc);
    }
    ReqDesc* get_req_desc() { return static_cast<ReqDesc*>(req_pool_.get()); }
    void put_req_desc(ReqDesc* desc) { req_pool_.put(desc); }

    std::size_t seg_size() const { return seg_size_; }
    /** Bytes of a connection's receive buffer: a segment of payload and the headers of its frame. */
    std::size_t rx_size() const { return seg_size_ + kRxHeadroom; }
    std::size_t max_short() const { return max_short_; }
    std::size_t max_am_bcopy() const { return seg_size_; }
    std::size_t max_am() const { return config_.max_am; }
    TcpMd* tcp_md() const { return md_; }

    /** Ep flush (see tcp_ep.cc); exposed for iface_flush. */
    Status flush_iface(unsigned flags, Completion* comp);

    /** Adds @p ep to the round-robin list of endpoints with pending requests. */
    void pending_schedule(TcpEp* ep) {
        if (!ep->pending_link.linked()) pending_eps_.push_back(*ep);
    }

    /** Removes every pending request of @p ep, calling @p cb for each. */
    void pending_purge(TcpEp* ep, PendingPurgeCallback cb, void* arg);
    /** Takes @p req out of @p ep's pending queue: ok, or no_element when it is not there. */
    Status pending_remove(TcpEp* ep, PendingReq* req);

    /** Completes every outstanding request of @p ep with @p status. */
    void fail_outstanding(TcpEp* ep, Status status);

    /** "1.2.3.4:5678 (eth0)" for logs. */
    std::string peer_name(const TcpEp* ep) const;

private:
    TcpIface(TcpMd* md, Worker* worker, const TlResource& resource, const NetDevice& device,
             const TcpConfig& config);

    // set-up, polling, failures, pending requests (tcp_iface.cc)
    Status open_listen_socket(std::uint16_t min_port, std::uint16_t max_port);
    Status choose_congestion();
    bool set_congestion(TcpEp* ep, const std::string& name);
    Status create_pools();
    unsigned process_failures();
    void teardown(TcpEp* ep, Status status);
    void free_ep(TcpEp* ep);
    /** Returns @p rx and the buffer it holds, if any, to their pools. */
    void free_rx(RxState* rx);
    unsigned dispatch_pending();
    void update_hot();
    static std::uint32_t wanted_events(const TcpEp* ep);
    void unpoll(TcpEp* ep);
    void repoll(TcpEp* ep);

    // connection set-up (tcp_cm.cc)
    Status set_socket_options(int fd, const char* what);
    Status connect_socket(TcpEp* ep);
    void connect_failed(TcpEp* ep, int err);
    void accept_connections();
    void on_connect_ready(TcpEp* ep);
    void on_handshake(TcpEp* ep);
    void on_conn_request(TcpEp* ep);
    void on_conn_reply(TcpEp* ep);
    void connection_up(TcpEp* ep);
    TcpEp* find_conn(std::uint64_t peer_cookie, bool passive, bool connected) const;
    /** An idle endpoint (connect_on_first_use, not woken) to the iface with @p peer_cookie, or nullptr. */
    TcpEp* find_idle(std::uint64_t peer_cookie) const;
    /**
     * Starts the connection of idle @p ep: receive state, the connecting set, connect().
     * no_memory, no_resource or io_error when the local system refused (nothing changed
     * but the receive state, or the endpoint is connecting and failed).
     */
    Status wake(TcpEp* ep);
    void adopt(TcpEp* user, TcpEp* accepted);
    void release_deferred(std::uint64_t peer_cookie);
    bool send_conn_reply(TcpEp* ep, Status verdict, std::uint64_t source_cookie);
    void check_timers(ucs::Ticks now);
    void untime(TcpEp* ep);

    // the send side (tcp_ep.cc)
    void write_replies(TcpEp* ep);
    LOOM_COLD bool queue_reply(TcpEp* ep, const FrameHeader& fh, const void* data, std::size_t length,
                               bool copy_data);

    // progress and the receive side (tcp_rx.cc)
    unsigned progress_slow();
    bool parse_frames(TcpEp* ep);
    bool rx_direct(TcpEp* ep);
    void finish_direct(TcpEp* ep);
    std::uint8_t* get_large_buffer();
    void put_large_buffer(std::uint8_t* buf);
    bool handle_request(TcpEp* ep, const FrameHeader& fh, std::uint8_t* payload, std::size_t avail,
                        std::size_t* consumed);
    bool handle_reply(TcpEp* ep, const FrameHeader& fh, std::uint8_t* payload, std::size_t avail,
                      std::size_t* consumed);
    bool send_reply(TcpEp* ep, FrameType type, Status status, std::uint8_t flags, const void* data,
                    std::size_t length, bool copy_data);
    void complete_markers(TcpEp* ep);
    void complete_req(TcpEp* ep, ReqDesc* req, Status status);
    LOOM_COLD void malformed(TcpEp* ep, const char* what, unsigned value);
    LOOM_COLD void log_denied(TcpEp* ep, const char* op, std::uint32_t key_id, std::uint64_t addr,
                              std::uint64_t length, const char* why);

    TcpMd* md_;
    NetDevice device_;
    TcpConfig config_;
    std::string congestion_;  ///< TCP_CONGESTION of every connection; empty: the system default
    std::string bulk_cc_;     ///< auto on loopback: the algorithm of bulk transfers; empty: no switching
    std::string default_cc_;  ///< auto on loopback: the system's algorithm, which small messages keep
    std::size_t seg_size_;
    std::size_t max_short_;
    ucs::EventSet epoll_;
    int listen_fd_ = -1;
    sockaddr_in listen_addr_{};
    std::uint64_t cookie_ = 0;
    ucs::MemPool tx_pool_;
    /** TxDesc with kStageBytes[i] of data, for staging (stage()). */
    std::array<ucs::MemPool, kNumStageClasses> tx_stage_pools_;
    ucs::MemPool req_pool_;
    ucs::MemPool rx_pool_;      ///< RxState, one per connection
    ucs::MemPool rx_buf_pool_;  ///< RxState::data, held while a connection reads
    ucs::MemPool reply_pool_;
    ucs::List<TcpEp, &TcpEp::conn_link> conns_;
    ucs::List<TcpEp, &TcpEp::conn_link> zombies_;
    /** Endpoints created with connect_on_first_use and not used yet: no socket, not polled, not counted in
     * nconns_. */
    ucs::List<TcpEp, &TcpEp::conn_link> idle_;
    ucs::List<TcpEp, &TcpEp::pending_link> pending_eps_;
    unsigned nfailing_ = 0;    ///< connections with kEpFailPending
    unsigned ntimed_ = 0;      ///< connections with kEpTimed
    unsigned defer_free_ = 0;  ///< > 0 while callbacks run: destroyed eps become zombies
    bool epoll_failed_ = false;
    unsigned nconns_ = 0;        ///< length of conns_
    TcpEp* hot_ = nullptr;       ///< the only connection, when it is established and idle-sending: read directly
    bool keep_polled_ = false;   ///< event_fd() was asked for: the hot connection stays in the epoll set
    unsigned poll_tick_ = 0;     ///< counts direct reads between full polls
    /** Progress calls until an iface with no connection reads the clock (tcp_rx.cc). */
    unsigned idle_countdown_ = 1;
    ucs::Ticks next_listen_poll_ = 0;      ///< when an iface with no connection polls its listening socket
    std::uint8_t* spare_large_ = nullptr;  ///< a receive buffer of max_am bytes kept for the next large message
    double link_bandwidth_ = 1e9;  ///< bytes/s of a non-loopback device
    ucs::Ticks conn_timeout_ticks_ = 0;
    ucs::Ticks retry_interval_ticks_ = 0;
};

}  // namespace loom::uct::tcp
