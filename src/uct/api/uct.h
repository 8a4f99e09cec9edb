/**
 * The transport API (uct): components, memory domains, interfaces and endpoints.
 *
 * Control operations (discovery, open, query, addresses, endpoint creation) are
 * virtual member functions: they run rarely and clarity wins. Data operations are
 * plain function pointers in an IfaceOps table stored by value at the start of
 * every Iface, called through the one-line inline wrappers at the end of this file
 * (ep_am_short(ep, ...) and friends): one indirect call, no vtable walk, and the
 * table can be swapped per iface (error stubs for a failed peer, tracing).
 *
 * Flavours: short (payload copied inline), bcopy (a pack callback writes into a
 * transport buffer; returns the packed length or a negative Status), zcopy (the
 * transport reads registered user memory; returns in_progress and updates a
 * Completion later). Status::no_resource means "queue a PendingReq and retry",
 * never "spin".
 */
#pragma once

#include "ucs/config/table.h"
#include "ucs/progress/callback_queue.h"
#include "ucs/type/result.h"
#include "uct/api/uct_types.h"

#include <sys/socket.h>

#include <memory>
#include <string_view>
#include <vector>

namespace loom::uct {

/**
 * A connection request a listener received (Iface::listen); answered once, by
 * ep_create(conn_request) on that iface or by Iface::reject. Transports derive from it.
 */
struct ConnRequest {
    Iface* iface = nullptr;
};

/**
 * A listener's report of a client asking to connect: its private data and address.
 * Runs from progress. The callee answers now or later with ep_create(conn_request) or
 * Iface::reject; the data is valid until then.
 */
using ConnRequestCallback = void (*)(void* arg, ConnRequest* request, const void* priv, std::size_t priv_len,
                                     const sockaddr* client);

/** Client/server connection outcome: the peer's private data on success (ok), or why it failed. */
using ConnectCallback = void (*)(void* arg, Ep* ep, Status status, const void* peer_priv, std::size_t priv_len);

/** How to listen for client connections (kCapConnectToSockaddr). */
struct ListenParams {
    /** IP address and port to listen on; null: the iface's own address, any free port. */
    const sockaddr* addr = nullptr;
    socklen_t addr_len = 0;
    ConnRequestCallback on_request = nullptr;
    void* arg = nullptr;
};

/** A listening socket address; destroying it rejects the requests nobody answered. */
class Listener {
public:
    virtual ~Listener();
    /** The address it listens on (the port filled in when 0 was asked for). */
    virtual sockaddr_storage address() const = 0;
};

/** Data-path operations of an iface and its endpoints. Unsupported entries return Status::unsupported. */
struct IfaceOps {
    Status (*ep_am_short)(Ep* ep, AmId id, std::uint64_t header, const void* payload, unsigned length);
    ssize_t (*ep_am_bcopy)(Ep* ep, AmId id, PackCallback pack, void* arg, unsigned flags);
    Status (*ep_am_zcopy)(Ep* ep, AmId id, const void* header, unsigned header_length, const Iov* iov,
                          std::size_t iovcnt, unsigned flags, Completion* comp);

    Status (*ep_put_short)(Ep* ep, const void* buffer, unsigned length, std::uint64_t remote_addr,
                           std::uint64_t rkey);
    ssize_t (*ep_put_bcopy)(Ep* ep, PackCallback pack, void* arg, std::uint64_t remote_addr, std::uint64_t rkey);
    Status (*ep_put_zcopy)(Ep* ep, const Iov* iov, std::size_t iovcnt, std::uint64_t remote_addr,
                           std::uint64_t rkey, Completion* comp);

    Status (*ep_get_bcopy)(Ep* ep, UnpackCallback unpack, void* arg, std::size_t length,
                           std::uint64_t remote_addr, std::uint64_t rkey, Completion* comp);
    Status (*ep_get_zcopy)(Ep* ep, const Iov* iov, std::size_t iovcnt, std::uint64_t remote_addr,
                           std::uint64_t rkey, Completion* comp);

    Status (*ep_atomic32_post)(Ep* ep, AtomicOp op, std::uint32_t value, std::uint64_t remote_addr,
                               std::uint64_t rkey);
    Status (*ep_atomic64_post)(Ep* ep, AtomicOp op, std::uint64_t value, std::uint64_t remote_addr,
                               std::uint64_t rkey);
    Status (*ep_atomic32_fetch)(Ep* ep, AtomicOp op, std::uint32_t value, std::uint32_t* result,
                                std::uint64_t remote_addr, std::uint64_t rkey, Completion* comp);
    Status (*ep_atomic64_fetch)(Ep* ep, AtomicOp op, std::uint64_t value, std::uint64_t* result,
                                std::uint64_t remote_addr, std::uint64_t rkey, Completion* comp);
    Status (*ep_atomic32_cswap)(Ep* ep, std::uint32_t compare, std::uint32_t swap, std::uint64_t remote_addr,
                                std::uint64_t rkey, std::uint32_t* result, Completion* comp);
    Status (*ep_atomic64_cswap)(Ep* ep, std::uint64_t compare, std::uint64_t swap, std::uint64_t remote_addr,
                                std::uint64_t rkey, std::uint64_t* result, Completion* comp);

    Status (*ep_pending_add)(Ep* ep, PendingReq* req, unsigned flags);
    void (*ep_pending_purge)(Ep* ep, PendingPurgeCallback cb, void* arg);
    /**
     * Takes @p req out of @p ep's pending queue without running it, the others keeping
     * their order: ok, or no_element when it is not queued there (it ran already).
     */
    Status (*ep_pending_remove)(Ep* ep, PendingReq* req);
    Status (*ep_flush)(Ep* ep, unsigned flags, Completion* comp);
    Status (*ep_fence)(Ep* ep, unsigned flags);
    /**
     * Keep-alive (kCapEpCheck), called about once per keep-alive interval: starts a probe
     * of the peer when none is outstanding (in_progress), and fails the endpoint with
     * peer_timeout (reported to on_error as any failure, and returned) once the probe an
     * earlier call started has gone unanswered for @p timeout_ns. The probe is answered by
     * the peer's device, not its progress: a peer busy computing is not a vanished one.
     * ok: nothing to watch (connecting, closing); the endpoint's error status once failed.
     */
    Status (*ep_check)(Ep* ep, std::uint64_t timeout_ns);

    unsigned (*iface_progress)(Iface* iface);
    Status (*iface_flush)(Iface* iface, unsigned flags, Completion* comp);
    Status (*iface_fence)(Iface* iface, unsigned flags);
    void (*iface_release_desc)(Iface* iface, void* desc);
};

/** Every endpoint starts with this: the iface whose ops serve it. Transports derive from it. */
struct Ep {
    Iface* iface;
};

/** How to create an endpoint. */
struct EpParams {
    /** Connect-to-iface: the peer's device and iface addresses. Null for connect-to-ep. */
    const std::uint8_t* dev_addr = nullptr;
    std::size_t dev_addr_len = 0;
    const std::uint8_t* iface_addr = nullptr;
    std::size_t iface_addr_len = 0;
    /** Optional error callback, invoked from progress when the peer fails. */
    void (*on_error)(void* arg, Ep* ep, Status status) = nullptr;
    void* on_error_arg = nullptr;
    /**
     * Connect-to-iface: the transport may put off connecting until the endpoint's first
     * operation (tcp opens its socket then); the endpoint is usable at once either way.
     * Transports whose endpoints cost nothing until used ignore it.
     */
    bool connect_on_first_use = false;

    /** Client (kCapConnectToSockaddr): connect to the listener at this socket address (peer_sockaddr_len bytes). */
    const ::sockaddr* peer_sockaddr = nullptr;
    socklen_t peer_sockaddr_len = 0;
    /** Server: accept this request (from a ConnRequestCallback) on a new endpoint. */
    ConnRequest* conn_request = nullptr;
    /** Client/server: private data for the request or the accept (at most attr.max_conn_priv bytes). */
    const void* priv_data = nullptr;
    std::size_t priv_len = 0;
    /**
     * Client/server: runs from progress once the connection is established (ok, with the
     * peer's private data) or failed (refused, unreachable; a refusal may carry the
     * server's private data). A failure before establishment is reported here, not to
     * on_error.
     */
    ConnectCallback on_connect = nullptr;
    void* on_connect_arg = nullptr;
};

/** Parameters of Md::iface_open. */
struct IfaceParams {
    /** Values of the transport's config table set by the application, applied after the environment. */
    ucs::config::Overrides config_overrides;
};

/** A registered active-message handler. */
struct AmHandler {
    AmCallback cb;
    void* arg;
    unsigned flags;
};

/**
 * A communication interface: one transport on one device, bound to a worker.
 * ops sits at a fixed offset, so the data path reaches an entry with two loads
 * (ep->iface, then the function pointer).
 */
class Iface {
public:
    IfaceOps ops;

    virtual ~Iface();
    Iface(const Iface&) = delete;
    Iface& operator=(const Iface&) = delete;

    /** Capabilities and performance model. */
    virtual Status query(IfaceAttr& attr) const = 0;

    /** Writes the device address (attr.device_addr_len bytes) to @p out. */
    virtual Status get_device_address(std::uint8_t* out) const = 0;

    /** Writes the iface address (attr.iface_addr_len bytes) to @p out. */
    virtual Status get_address(std::uint8_t* out) const = 0;

    /**
     * Whether this iface can reach the peer at the given addresses. Malformed or
     * truncated addresses are unreachable, never a crash; @p reason (optional) says why.
     */
    virtual bool is_reachable(const std::uint8_t* dev_addr, std::size_t dev_addr_len,
                              const std::uint8_t* iface_addr, std::size_t iface_addr_len,
                              std::string* reason) const = 0;

    /** Creates an endpoint; Status::invalid_address for garbage addresses, unreachable when it cannot connect. */
    virtual Result<Ep*> ep_create(const EpParams& params) = 0;

    /** Destroys an endpoint, discarding what is still queued on it (flush first to keep it). */
    virtual void ep_destroy(Ep* ep) = 0;

    /** Writes the endpoint's address (attr.ep_addr_len bytes), for connect-to-ep transports. */
    virtual Status ep_get_address(Ep* ep, std::uint8_t* out);

    /**
     * Listens for client connections (kCapConnectToSockaddr); each request reaches
     * @p params.on_request from progress. unsupported where the transport cannot.
     */
    virtual Result<std::unique_ptr<Listener>> listen(const ListenParams& params);

    /** Refuses @p request with optional private data for the client (kCapConnectToSockaddr). */
    virtual Status reject(ConnRequest* request, const void* priv, std::size_t priv_len);

    /**
     * Connects a connect-to-ep endpoint to the peer's endpoint address. With
     * kConnectHoldSends in @p flags the endpoint receives at once but sends nothing
     * (sends return no_resource and wait in the pending queue) until ep_release_sends:
     * the side that connects first cannot know whether the peer's endpoint is ready to
     * receive yet, and traffic sent too early would wait for a retransmission timeout.
     */
    virtual Status ep_connect_to_ep(Ep* ep, const std::uint8_t* dev_addr, std::size_t dev_addr_len,
                                    const std::uint8_t* ep_addr, std::size_t ep_addr_len, unsigned flags = 0);

    /** Lets an endpoint connected with kConnectHoldSends send; ok (nothing to do) when it already can. */
    virtual Status ep_release_sends(Ep* ep);

    /**
     * An fd that becomes readable when progress may find work (kCapEventRecv), or
     * unsupported. An iface whose events are never asynchronous (self: everything
     * happens inside the calls) has kCapEventRecv without an fd.
     */
    virtual Result<int> event_fd();

    /**
     * Prepares a sleep on event_fd(): ok when nothing is pending, so the fd will become
     * readable when something arrives; busy when progress has work now (the caller must
     * call progress and arm again instead of sleeping); unsupported without kCapEventRecv.
     */
    virtual Status event_arm();

    /**
     * Registers the handler of active message @p id (replacing any); a null @p cb
     * restores the default handler, which drops the message with a warning.
     */
    Status set_am_handler(AmId id, AmCallback cb, void* arg, unsigned flags);

    /** Adds this iface's progress function to its worker's progress engine (idempotent); no_memory on failure. */
    Status progress_enable();

    /** Removes this iface's progress function from its worker (idempotent). */
    void progress_disable();

    /** Calls the handler of @p id; data from a peer with an out-of-range id is dropped with a warning. */
    Status invoke_am(AmId id, void* data, std::size_t length, unsigned flags) {
        if (LOOM_UNLIKELY(id >= kAmIdMax)) return invalid_am_id(id);
        const AmHandler& h = am_handlers_[id];
        return h.cb(h.arg, data, length, flags);
    }

    /** The handler registered for @p id (< kAmIdMax): tools that wrap handlers read it first. */
    const AmHandler& am_handler(AmId id) const { return am_handlers_[id]; }

    Md* md() const { return md_; }
    Worker* worker() const { return worker_; }
    const TlResource& resource() const { return resource_; }

protected:
    Iface(Md* md, Worker* worker, TlResource resource, const IfaceOps& ops);

private:
    Status invalid_am_id(AmId id);

    Md* md_;
    Worker* worker_;
    TlResource resource_;
    ucs::CallbackId progress_id_ = ucs::CallbackId::invalid;
    AmHandler am_handlers_[kAmIdMax];
};

/** A memory domain: registers memory for one device family and packs remote keys. */
class Md {
public:
    virtual ~Md();
    Md(const Md&) = delete;
    Md& operator=(const Md&) = delete;

    virtual Status query(MdAttr& attr) const = 0;

    /** Transports and devices this md can open ifaces on. */
    virtual std::vector<TlResource> query_tl_resources() const = 0;

    /** Opens an iface for @p resource on @p worker. */
    virtual Result<std::unique_ptr<Iface>> iface_open(const TlResource& resource, Worker* worker,
                                                      const IfaceParams& params) = 0;

    /** Registers [address, address+length) with @p access rights (MemAccess bits). */
    virtual Result<MemH> mem_reg(void* address, std::size_t length, unsigned access);

    /** Releases a registration; invalid_param for a handle this md did not give out. */
    virtual Status mem_dereg(MemH memh);

    /** Allocates @p length bytes that peers can access (shared memory where useful); returns address and handle. */
    Result<std::pair<void*, MemH>> mem_alloc(std::size_t length, unsigned access) {
        return mem_alloc_at(length, access, nullptr);
    }

    /**
     * As mem_alloc, placed at exactly @p fixed_address (page aligned) when it is not null
     * (an OpenSHMEM symmetric heap): unsupported where the domain cannot place its memory,
     * no_memory (logged) when something is already mapped in the range.
     */
    virtual Result<std::pair<void*, MemH>> mem_alloc_at(std::size_t length, unsigned access, void* fixed_address);

    /** Frees memory from mem_alloc. */
    virtual Status mem_free(MemH memh);

    /** Packs the remote key of @p memh into @p out (attr.rkey_packed_size bytes). */
    virtual Status mkey_pack(MemH memh, std::uint8_t* out) const;

    /**
     * A human-readable description of the device behind this domain, one fact per line
     * (for a network device: transport, link layer, MTU, speed, addresses), as loom_info -d
     * prints it. Empty by default.
     */
    virtual std::string describe() const;

    const Component& component() const { return component_; }
    const std::string& name() const { return name_; }

protected:
    Md(const Component& component, std::string name) : component_(component), name_(std::move(name)) {}

private:
    const Component& component_;
    std::string name_;
};

/**
 * A transport family (self, shm, tcp, ib). Components register themselves from static
 * objects, in the core library or in a loaded module, and are found by name.
 */
class Component {
public:
    explicit Component(std::string name);
    virtual ~Component();
    Component(const Component&) = delete;
    Component& operator=(const Component&) = delete;

    const std::string& name() const { return name_; }

    /** Names of the memory domains this component can open here (empty when no device). */
    virtual std::vector<std::string> query_md_resources() const = 0;

    /** Opens the memory domain @p md_name. */
    virtual Result<std::unique_ptr<Md>> md_open(std::string_view md_name) const = 0;

    /** Unpacks a peer's packed key, validating its length and contents. */
    virtual Result<Rkey> rkey_unpack(const std::uint8_t* packed, std::size_t length) const;

    /** Releases an unpacked key. */
    virtual void rkey_release(const Rkey& rkey) const;

    /**
     * Where @p remote_addr (in the owner's address space, inside the key's region) is in this
     * process, when the owner's memory is mapped here (shm on memory its md allocated):
     * loads and stores there reach the owner's memory. unreachable when it is not mapped;
     * unsupported for components without mappable keys.
     */
    virtual Status rkey_ptr(const Rkey& rkey, std::uint64_t remote_addr, void** address) const;

private:
    std::string name_;
};

/** Every registered component (built-in and from loaded modules), in registration order. */
std::vector<const Component*> components();

/** The component named @p name, or nullptr. */
const Component* find_component(std::string_view name);

// --- Data-path wrappers: one indirect call each ------------------------------------

inline Status ep_am_short(Ep* ep, AmId id, std::uint64_t header, const void* payload, unsigned length) {
    return ep->iface->ops.ep_am_short(ep, id, header, payload, length);
}
inline ssize_t ep_am_bcopy(Ep* ep, AmId id, PackCallback pack, void* arg, unsigned flags) {
    return ep->iface->ops.ep_am_bcopy(ep, id, pack, arg, flags);
}
inline Status ep_am_zcopy(Ep* ep, AmId id, const void* header, unsigned header_length, const Iov* iov,
                          std::size_t iovcnt, unsigned flags, Completion* comp) {
    return ep->iface->ops.ep_am_zcopy(ep, id, header, header_length, iov, iovcnt, flags, comp);
}
inline Status ep_put_short(Ep* ep, const void* buffer, unsigned length, std::uint64_t remote_addr,
                           std::uint64_t rkey) {
    return ep->iface->ops.ep_put_short(ep, buffer, length, remote_addr, rkey);
}
inline ssize_t ep_put_bcopy(Ep* ep, PackCallback pack, void* arg, std::uint64_t remote_addr, std::uint64_t rkey) {
    return ep->iface->ops.ep_put_bcopy(ep, pack, arg, remote_addr, rkey);
}
inline Status ep_put_zcopy(Ep* ep, const Iov* iov, std::size_t iovcnt, std::uint64_t remote_addr,
                           std::uint64_t rkey, Completion* comp) {
    return ep->iface->ops.ep_put_zcopy(ep, iov, iovcnt, remote_addr, rkey, comp);
}
inline Status ep_get_bcopy(Ep* ep, UnpackCallback unpack, void* arg, std::size_t length,
                           std::uint64_t remote_addr, std::uint64_t rkey, Completion* comp) {
    return ep->iface->ops.ep_get_bcopy(ep, unpack, arg, length, remote_addr, rkey, comp);
}
inline Status ep_get_zcopy(Ep* ep, const Iov* iov, std::size_t iovcnt, std::uint64_t remote_addr,
                           std::uint64_t rkey, Completion* comp) {
    return ep->iface->ops.ep_get_zcopy(ep, iov, iovcnt, remote_addr, rkey, comp);
}
inline Status ep_atomic32_post(Ep* ep, AtomicOp op, std::uint32_t value, std::uint64_t remote_addr,
                               std::uint64_t rkey) {
    return ep->iface->ops.ep_atomic32_post(ep, op, value, remote_addr, rkey);
}
inline Status ep_atomic64_post(Ep* ep, AtomicOp op, std::uint64_t value, std::uint64_t remote_addr,
                               std::uint64_t rkey) {
    return ep->iface->ops.ep_atomic64_post(ep, op, value, remote_addr, rkey);
}
inline Status ep_atomic32_fetch(Ep* ep, AtomicOp op, std::uint32_t value, std::uint32_t* result,
                                std::uint64_t remote_addr, std::uint64_t rkey, Completion* comp) {
    return ep->iface->ops.ep_atomic32_fetch(ep, op, value, result, remote_addr, rkey, comp);
}
inline Status ep_atomic64_fetch(Ep* ep, AtomicOp op, std::uint64_t value, std::uint64_t* result,
                                std::uint64_t remote_addr, std::uint64_t rkey, Completion* comp) {
    return ep->iface->ops.ep_atomic64_fetch(ep, op, value, result, remote_addr, rkey, comp);
}
inline Status ep_atomic32_cswap(Ep* ep, std::uint32_t compare, std::uint32_t swap, std::uint64_t remote_addr,
                                std::uint64_t rkey, std::uint32_t* result, Completion* comp) {
    return ep->iface->ops.ep_atomic32_cswap(ep, compare, swap, remote_addr, rkey, result, comp);
}
inline Status ep_atomic64_cswap(Ep* ep, std::uint64_t compare, std::uint64_t swap, std::uint64_t remote_addr,
                                std::uint64_t rkey, std::uint64_t* result, Completion* comp) {
    return ep->iface->ops.ep_atomic64_cswap(ep, compare, swap, remote_addr, rkey, result, comp);
}
inline Status ep_pending_add(Ep* ep, PendingReq* req, unsigned flags) {
    return ep->iface->ops.ep_pending_add(ep, req, flags);
}
inline void ep_pending_purge(Ep* ep, PendingPurgeCallback cb, void* arg) {
    ep->iface->ops.ep_pending_purge(ep, cb, arg);
}
inline Status ep_pending_remove(Ep* ep, PendingReq* req) {
    return ep->iface->ops.ep_pending_remove(ep, req);
}
inline Status ep_flush(Ep* ep, unsigned flags, Completion* comp) { return ep->iface->ops.ep_flush(ep, flags, comp); }
inline Status ep_fence(Ep* ep, unsigned flags) { return ep->iface->ops.ep_fence(ep, flags); }
inline unsigned iface_progress(Iface* iface) { return iface->ops.iface_progress(iface); }
inline Status iface_flush(Iface* iface, unsigned flags, Completion* comp) {
    return iface->ops.iface_flush(iface, flags, comp);
}
inline Status iface_fence(Iface* iface, unsigned flags) { return iface->ops.iface_fence(iface, flags); }
inline void iface_release_desc(Iface* iface, void* desc) { iface->ops.iface_release_desc(iface, desc); }

}  // namespace loom::uct
