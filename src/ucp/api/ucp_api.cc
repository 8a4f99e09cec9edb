/**
 * The C API (include/loom/ucp.h) over the protocol layer's C++ objects. Handles are
 * the C++ objects themselves; statuses are the same numbers. Nothing here throws:
 * every entry point returns a status (allocation failures included).
 */
#include "loom/ucp.h"

#include "ucp/core/listener.h"
#include "ucp/api/api_common.h"
#include "ucp/api/handles.h"
#include "ucp/core/ucp_log.h"
#include "ucp/core/wire.h"
#include "ucp/core/worker.h"
#include "ucp/tag/tag_proto.h"
#include "ucp/am/am_proto.h"
#include "ucp/stream/stream_proto.h"
#include "ucs/memory/memhooks.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

using namespace loom;
using namespace loom::ucp;
using namespace loom::ucp::api;

struct loom_listener {
    std::unique_ptr<Listener> impl;
};
static_assert(sizeof(loom_dt_iov_t) == sizeof(DtIov));
static_assert(sizeof(loom_tag_recv_info_t) == sizeof(TagRecvInfo));

namespace {

Worker* W(loom_worker_h w) { return w->impl.get(); }
loom_ep_h H(Ep* ep) { return reinterpret_cast<loom_ep_h>(ep); }

template <typename F>
loom_status_t guarded(F&& f) {
    try {
        return f();
    } catch (const std::bad_alloc&) {
        return LOOM_ERR_NO_MEMORY;
    } catch (...) {
        LOOM_LOG_ERROR("ucp: unexpected exception in the C API");
        return LOOM_ERR_IO_ERROR;
    }
}

/** How long a client's loom_ep_create waits for the server's answer. */
constexpr int kConnectTimeoutMs = 10000;

/** A NULL worker handed to @p call: logged, invalid_param. */
LOOM_COLD Status null_worker(const char* call) {
    LOOM_LOG_ERROR("ucp: {}: NULL worker", call);
    return Status::invalid_param;
}

void* tag_send(loom_ep_h ep_h, const void* buffer, size_t count, loom_tag_t tag, const loom_request_param_t* p,
               bool sync) {
    Ep* ep = E(ep_h);
    if (LOOM_UNLIKELY(ep == nullptr)) return status_ptr(Status::invalid_param);
    Worker& w = *ep->worker;
    WorkerGuard guard(w);
    if (LOOM_UNLIKELY(ep->flags & kEpNotReady)) {
        if (Status s = w.ep_first_use(ep); s != Status::ok) return status_ptr(s);
    }
    const Datatype dt = dt_of(p);
    // Eager short (the protocol table's, below tag_short_limit): nothing to allocate when the
    // transport takes it at once.
    if (LOOM_LIKELY(dt == dt_make_contig(1) && !sync && count < ep->tag_short_limit &&
                    ep->num_pending == 0 && !(attr(p) & LOOM_OP_ATTR_FLAG_NO_IMM_CMPL))) {
        if (LOOM_UNLIKELY(buffer == nullptr) && count != 0) return status_ptr(DtState::null_buffer(true));
        Status s = uct::ep_am_short(ep->am_ep, kAmEagerOnly, tag, buffer, static_cast<unsigned>(count));
        if (LOOM_LIKELY(s == Status::ok)) return nullptr;
        if (s != Status::no_resource) return status_ptr(s);
    }
    if (LOOM_UNLIKELY(dt != dt_make_contig(1))) {
        if (Status s = dt_check(dt); s != Status::ok) return status_ptr(s);
    }
    if ((attr(p) & LOOM_OP_ATTR_FLAG_FORCE_IMM_CMPL) && count >= ep->tag_short_limit) {
        return status_ptr(Status::no_resource);
    }
    Request* req = new_request(w, p);
    if (req == nullptr) return status_ptr(Status::no_memory);
    if (Status s = req->send.dt.start_pack(dt, buffer, count); s != Status::ok) {
        w.complete(req, s);
        return finish_nbx(w, req, p);
    }
    (void)tag_send_start(req, ep, tag, sync);
    return finish_nbx(w, req, p);
}

}  // namespace

extern "C" {

const char* loom_status_string(loom_status_t status) {
    // Names are string_views over literals: NUL-terminated.
    return loom::status_string(static_cast<int>(status)).data();
}

loom_status_t loom_dt_create_generic(const loom_generic_dt_ops_t* ops, void* context, loom_datatype_t* datatype) {
    if (ops == nullptr || datatype == nullptr || !ops->start_pack || !ops->start_unpack || !ops->packed_size ||
        !ops->pack || !ops->unpack || !ops->finish) {
        return LOOM_ERR_INVALID_PARAM;
    }
    auto* g = static_cast<GenericDt*>(std::malloc(sizeof(GenericDt)));
    if (g == nullptr) return LOOM_ERR_NO_MEMORY;
    static_assert(sizeof(GenericDtOps) == sizeof(loom_generic_dt_ops_t));
    std::memcpy(&g->ops, ops, sizeof(g->ops));
    g->context = context;
    *datatype = reinterpret_cast<std::uintptr_t>(g) | kDtGeneric;
    return LOOM_OK;
}

void loom_dt_destroy(loom_datatype_t datatype) {
    if ((datatype & kDtClassMask) == kDtGeneric) std::free(dt_generic(datatype));
}

loom_status_t loom_init(const loom_params_t* params, loom_context_h* context) {
    if (context == nullptr) return LOOM_ERR_INVALID_PARAM;
    return guarded([&] {
        ContextParams cp;
        if (params != nullptr) {
            const std::uint64_t m = params->field_mask;
            if (m & LOOM_PARAM_FIELD_FEATURES) cp.features = params->features;
            if (m & LOOM_PARAM_FIELD_REQUEST_SIZE) cp.user_request_size = params->request_size;
            // The plain callbacks become hooks whose argument is the callback itself.
            using Plain = void (*)(void*);
            auto call_plain = [](void* request, void* fn) { reinterpret_cast<Plain>(fn)(request); };
            if ((m & LOOM_PARAM_FIELD_REQUEST_INIT) && params->request_init) {
                cp.request_init = call_plain;
                cp.request_init_arg = reinterpret_cast<void*>(params->request_init);
            }
            if ((m & LOOM_PARAM_FIELD_REQUEST_CLEANUP) && params->request_cleanup) {
                cp.request_cleanup = call_plain;
                cp.request_cleanup_arg = reinterpret_cast<void*>(params->request_cleanup);
            }
            if (m & LOOM_PARAM_FIELD_REQUEST_HOOKS) {
                if (m & (LOOM_PARAM_FIELD_REQUEST_INIT | LOOM_PARAM_FIELD_REQUEST_CLEANUP)) {
                    LOOM_LOG_ERROR("ucp: loom_init: request_hooks replace request_init and request_cleanup; "
                                   "give one or the other");
                    return LOOM_ERR_INVALID_PARAM;
                }
                cp.request_init = params->request_hooks.init;
                cp.request_init_arg = params->request_hooks.arg;
                cp.request_cleanup = params->request_hooks.cleanup;
                cp.request_cleanup_arg = params->request_hooks.arg;
            }
            if ((m & LOOM_PARAM_FIELD_NAME) && params->name) cp.name = params->name;
        }
        constexpr std::uint64_t kImplemented = kFeatureTag | kFeatureWakeup | kFeatureAm | kFeatureStream |
                                               kFeatureRma | kFeatureAmo32 | kFeatureAmo64;
        if (cp.features & ~kImplemented) {
            LOOM_LOG_ERROR("ucp: features {:#x} requested; this version implements tag, am, stream, RMA, AMO32, "
                           "AMO64 and wakeup",
                           cp.features);
            return LOOM_ERR_UNSUPPORTED;
        }
        auto ctx = Context::create(cp);
        if (!ctx) return C(ctx.status());
        *context = new loom_context{std::move(*ctx)};
        return LOOM_OK;
    });
}

void loom_cleanup(loom_context_h context) { delete context; }

loom_status_t loom_context_query(loom_context_h context, loom_context_attr_t* a) {
    if (context == nullptr || a == nullptr) return LOOM_ERR_INVALID_PARAM;
    if (a->field_mask & LOOM_ATTR_FIELD_REQUEST_SIZE) a->request_size = sizeof(Request);
    if (a->field_mask & LOOM_ATTR_FIELD_NUM_RESOURCES) a->num_resources = context->impl->resources().size();
    return LOOM_OK;
}

loom_status_t loom_context_resource(loom_context_h context, size_t index, loom_resource_t* resource) {
    if (context == nullptr || resource == nullptr) return LOOM_ERR_INVALID_PARAM;
    const auto& rscs = context->impl->resources();
    if (index >= rscs.size()) return LOOM_ERR_OUT_OF_RANGE;
    const ContextResource& r = rscs[index];
    resource->transport = r.tl.tl_name.c_str();
    resource->device = r.tl.dev_name.c_str();
    switch (r.tl.dev_type) {
    case uct::DeviceType::net: resource->device_type = LOOM_DEVICE_TYPE_NET; break;
    case uct::DeviceType::shm: resource->device_type = LOOM_DEVICE_TYPE_SHM; break;
    case uct::DeviceType::self: resource->device_type = LOOM_DEVICE_TYPE_SELF; break;
    }
    resource->md_index = r.md_index;
    return LOOM_OK;
}

loom_status_t loom_worker_create(loom_context_h context, const loom_worker_params_t* params, loom_worker_h* worker) {
    if (context == nullptr || worker == nullptr) return LOOM_ERR_INVALID_PARAM;
    return guarded([&] {
        WorkerParams wp;
        if (params && (params->field_mask & LOOM_WORKER_PARAM_FIELD_THREAD_MODE)) {
            switch (params->thread_mode) {
            case LOOM_THREAD_MODE_SINGLE: wp.thread_mode = uct::ThreadMode::single; break;
            case LOOM_THREAD_MODE_SERIALIZED: wp.thread_mode = uct::ThreadMode::serialized; break;
            case LOOM_THREAD_MODE_MULTI: wp.thread_mode = uct::ThreadMode::multi; break;
            default: return LOOM_ERR_INVALID_PARAM;
            }
        }
        auto w = Worker::create(*context->impl, wp);
        if (!w) return C(w.status());
        *worker = new loom_worker{std::move(*w)};
        return LOOM_OK;
    });
}

void loom_worker_destroy(loom_worker_h worker) { delete worker; }

unsigned loom_worker_progress(loom_worker_h worker) {
    if (LOOM_UNLIKELY(worker == nullptr)) {
        static std::atomic<bool> logged{false};  // a progress loop would repeat the line forever
        if (!logged.exchange(true)) LOOM_LOG_ERROR("ucp: loom_worker_progress: NULL worker (logged once)");
        return 0;
    }
    WorkerGuard guard(*W(worker));
    return W(worker)->progress();
}

loom_status_t loom_worker_get_address(loom_worker_h worker, void** address, size_t* length) {
    if (worker == nullptr || address == nullptr || length == nullptr) return LOOM_ERR_INVALID_PARAM;
    return guarded([&] {
        WorkerGuard guard(*W(worker));
        std::vector<std::uint8_t> a = W(worker)->pack_address();
        void* mem = std::malloc(a.size());
        if (mem == nullptr) return LOOM_ERR_NO_MEMORY;
        std::memcpy(mem, a.data(), a.size());
        *address = mem;
        *length = a.size();
        return LOOM_OK;
    });
}

void loom_worker_release_address(loom_worker_h, void* address) { std::free(address); }

loom_status_t loom_worker_query(loom_worker_h worker, loom_worker_attr_t* attr) {
    if (worker == nullptr || attr == nullptr) return LOOM_ERR_INVALID_PARAM;
    const std::uint64_t m = attr->field_mask;
    const std::uint32_t addr_flags = (m & LOOM_WORKER_ATTR_FIELD_ADDRESS_FLAGS) ? attr->address_flags : 0;
    if (addr_flags & ~std::uint32_t{LOOM_WORKER_ADDRESS_FLAG_NET_ONLY}) {
        LOOM_LOG_ERROR("ucp: loom_worker_query: unknown address flags {:#x}", addr_flags);
        return LOOM_ERR_INVALID_PARAM;
    }
    Worker& w = *W(worker);
    WorkerGuard guard(w);
    if (m & LOOM_WORKER_ATTR_FIELD_THREAD_MODE) {
        switch (w.thread_mode) {
        case uct::ThreadMode::single: attr->thread_mode = LOOM_THREAD_MODE_SINGLE; break;
        case uct::ThreadMode::serialized: attr->thread_mode = LOOM_THREAD_MODE_SERIALIZED; break;
        case uct::ThreadMode::multi: attr->thread_mode = LOOM_THREAD_MODE_MULTI; break;
        }
    }
    if (m & LOOM_WORKER_ATTR_FIELD_MAX_AM_HEADER) attr->max_am_header = am_worker_max_header(w);
    if (m & LOOM_WORKER_ATTR_FIELD_ADDRESS) {
        return guarded([&] {
            std::vector<std::uint8_t> a = w.pack_address(addr_flags & LOOM_WORKER_ADDRESS_FLAG_NET_ONLY);
            void* mem = std::malloc(a.size());
            if (mem == nullptr) return LOOM_ERR_NO_MEMORY;
            std::memcpy(mem, a.data(), a.size());
            attr->address = mem;
            attr->address_length = a.size();
            return LOOM_OK;
        });
    }
    return LOOM_OK;
}

void loom_mem_event_notify(const void* address, size_t length) { ucs::memory_event_notify(address, length); }

loom_status_t loom_mem_events_check(void) {
    return ucs::mem_hooks_info().unmap_hooks ? LOOM_OK : LOOM_ERR_UNSUPPORTED;
}

loom_status_t loom_worker_get_efd(loom_worker_h worker, int* fd) {
    if (worker == nullptr || fd == nullptr) return LOOM_ERR_INVALID_PARAM;
    if (W(worker)->event_fd() < 0) {
        LOOM_LOG_ERROR("ucp: loom_worker_get_efd needs a context created with LOOM_FEATURE_WAKEUP");
        return LOOM_ERR_UNSUPPORTED;
    }
    *fd = W(worker)->event_fd();
    return LOOM_OK;
}

loom_status_t loom_worker_arm(loom_worker_h worker) {
    if (worker == nullptr) return LOOM_ERR_INVALID_PARAM;
    WorkerGuard guard(*W(worker));
    return C(W(worker)->arm());
}

loom_status_t loom_worker_wait(loom_worker_h worker) {
    if (worker == nullptr) return LOOM_ERR_INVALID_PARAM;
    WorkerGuard guard(*W(worker));
    return C(W(worker)->wait());
}

loom_status_t loom_worker_signal(loom_worker_h worker) {
    if (worker == nullptr) return LOOM_ERR_INVALID_PARAM;
    return C(W(worker)->signal());  // no lock: it must reach a thread that holds it
}

// The request tests take no lock: a request may outlive its worker (caller memory), and
// polling it must not contend with the thread that progresses. They read the completed
// flag with acquire, which Worker::complete publishes after the results (release).
static bool completed(const Request* req) {
    return __atomic_load_n(&req->flags.bits, __ATOMIC_ACQUIRE) & kReqCompleted;
}

// What an _nbx call returned when it is not a request (NULL: done in the call, or an error
// code) is answered as its status, as LOOM_PTR_STATUS would; freeing or cancelling it does
// nothing: a caller that handles both kinds alike must not crash.

loom_status_t loom_request_check_status(void* request) {
    if (LOOM_UNLIKELY(!LOOM_PTR_IS_PTR(request))) return LOOM_PTR_STATUS(request);
    Request* req = request_of(request);
    return completed(req) ? C(req->status) : LOOM_INPROGRESS;
}

loom_status_t loom_tag_recv_request_test(void* request, loom_tag_recv_info_t* info) {
    if (LOOM_UNLIKELY(!LOOM_PTR_IS_PTR(request))) return LOOM_PTR_STATUS(request);
    Request* req = request_of(request);
    if (!completed(req)) return LOOM_INPROGRESS;
    if (info != nullptr && (req->flags & kReqRecv)) std::memcpy(info, &req->recv.info, sizeof(*info));
    return C(req->status);
}

void loom_request_free(void* request) {
    if (LOOM_UNLIKELY(!LOOM_PTR_IS_PTR(request))) return;
    Request* req = request_of(request);
    WorkerGuard guard(*req->worker);
    if (req->flags & kReqCompleted) {
        req->worker->release(req);
    } else {
        req->flags |= kReqReleased;
    }
}

void loom_request_cancel(loom_worker_h worker, void* request) {
    if (LOOM_UNLIKELY(!LOOM_PTR_IS_PTR(request))) return;
    Request* req = request_of(request);
    if (LOOM_UNLIKELY(worker == nullptr || W(worker) != req->worker)) {
        LOOM_LOG_ERROR("ucp: loom_request_cancel: {} worker, not the request's", worker ? "another" : "NULL");
        return;
    }
    WorkerGuard guard(*W(worker));
    if (req->flags & kReqCompleted) return;
    if (!(req->flags & kReqRecv)) {
        if (req->kind == kReqKindTagSend) tag_send_cancel(req);
        return;
    }
    // A receive whose completion waits for progress (NO_IMM_CMPL) is done: nothing to cancel.
    if (req->ep_link.linked()) return;
    if (tag_of(*W(worker)).tm.cancel(recv_entry(req))) {
        req->recv.dt.finish();
        W(worker)->complete(req, Status::canceled);
    }
}

loom_status_t loom_ep_create(loom_worker_h worker, const loom_ep_params_t* params, loom_ep_h* ep) {
    if (worker == nullptr || params == nullptr || ep == nullptr) return LOOM_ERR_INVALID_PARAM;
    const std::uint64_t how = params->field_mask & (LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS | LOOM_EP_PARAM_FIELD_SOCK_ADDR |
                                                    LOOM_EP_PARAM_FIELD_CONN_REQUEST);
    if (how == 0 || (how & (how - 1)) != 0) {
        LOOM_LOG_ERROR("ucp: loom_ep_create needs exactly one of a worker address, a socket address or a "
                       "connection request");
        return LOOM_ERR_INVALID_PARAM;
    }
    if ((how == LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS && params->address == nullptr) ||
        (how == LOOM_EP_PARAM_FIELD_SOCK_ADDR && params->sockaddr.addr == nullptr) ||
        (how == LOOM_EP_PARAM_FIELD_CONN_REQUEST && params->conn_request == nullptr)) {
        LOOM_LOG_ERROR("ucp: loom_ep_create: the peer's address (or request) is NULL");
        return LOOM_ERR_INVALID_PARAM;
    }
    return guarded([&] {
        Worker& w = *W(worker);
        WorkerGuard guard(w);
        Result<UnpackedAddress> address = Status::invalid_address;
        auto* request = reinterpret_cast<ConnRequest*>(params->conn_request);
        if (how == LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS) {
            // The address says its own length; read the header first to learn it.
            std::uint32_t total = 0;
            std::memcpy(&total, static_cast<const std::uint8_t*>(params->address) + 4, sizeof(total));
            address = Worker::unpack_address(params->address, total);
        } else if (how == LOOM_EP_PARAM_FIELD_SOCK_ADDR) {
            auto peer = cm_client_exchange(w, params->sockaddr.addr, params->sockaddr.addrlen, w.pack_address(),
                                           kConnectTimeoutMs);
            if (!peer) return C(peer.status());
            address = Worker::unpack_address(peer->data(), peer->size());
        } else {
            address = Worker::unpack_address(request->address.data(), request->address.size());
            if (!address) Listener::reject(request);
        }
        if (!address) return C(address.status());
        const bool peer_mode = (params->field_mask & LOOM_EP_PARAM_FIELD_ERR_HANDLING_MODE) &&
                               params->err_mode == LOOM_ERR_HANDLING_MODE_PEER;
        Ep* e = nullptr;
        auto it = w.ep_by_uuid.find(address->uuid);
        if (it != w.ep_by_uuid.end() && (it->second->flags & kEpInternal) && !(it->second->flags & kEpFailed)) {
            e = it->second;  // the peer connected first: adopt the endpoint its wire-up made
            e->flags &= ~kEpInternal;
        } else {
            // From a worker address, lazily (LOOM_LAZY_CONNECT): the first operation sends
            // the wire-up request. A listener's or a socket address's endpoint is wanted now.
            const bool lazy = how == LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS && w.context.config().lazy_connect;
            auto created = w.ep_create(*address, false, lazy ? kEpIdle : 0);
            if (!created) {
                if (request != nullptr) Listener::reject(request);
                return C(created.status());
            }
            e = *created;
            if (lazy && !ep_saves_by_waiting(w, *e)) {
                // Nothing to put off (shm is attached already): introduce it now, so the
                // peer makes its endpoint back while the application creates the next ones.
                e->flags &= ~kEpIdle;
                wireup_ep_woken(w, e);
            }
            if (e->flags & kEpIdle) {
                LOOM_LOG_DEBUG("ucp: endpoint to worker {:016x} connects on its first operation",
                               e->remote_uuid);
            } else if (Status s = w.send_wireup(e); s != Status::ok) {
                w.ep_destroy(e, Status::canceled);
                if (request != nullptr) Listener::reject(request);
                return C(s);
            }
        }
        if (request != nullptr) {
            // The client creates its endpoint from our address once it has this answer.
            if (Status s = Listener::accept(request, w.pack_address()); s != Status::ok) {
                w.ep_destroy(e, Status::canceled);
                return C(s);
            }
        }
        if (peer_mode) e->flags |= kEpErrModePeer;
        if (params->field_mask & LOOM_EP_PARAM_FIELD_ERR_HANDLER) {
            e->on_error = params->err_handler.cb;
            e->on_error_arg = params->err_handler.arg;
        }
        if (params->field_mask & LOOM_EP_PARAM_FIELD_USER_DATA) e->user_data = params->user_data;
        *ep = H(e);
        return LOOM_OK;
    });
}

loom_status_t loom_listener_create(loom_worker_h worker, const loom_listener_params_t* params,
                                   loom_listener_h* listener) {
    if (worker == nullptr || params == nullptr || listener == nullptr ||
        !(params->field_mask & LOOM_LISTENER_PARAM_FIELD_SOCK_ADDR) ||
        !(params->field_mask & LOOM_LISTENER_PARAM_FIELD_CONN_HANDLER) || params->conn_handler.cb == nullptr) {
        LOOM_LOG_ERROR("ucp: loom_listener_create needs a socket address and a connection handler");
        return LOOM_ERR_INVALID_PARAM;
    }
    return guarded([&] {
        WorkerGuard guard(*W(worker));
        auto l = Listener::create(*W(worker), params->sockaddr.addr, params->sockaddr.addrlen,
                                  reinterpret_cast<ConnHandler>(params->conn_handler.cb), params->conn_handler.arg);
        if (!l) return C(l.status());
        *listener = new loom_listener{std::move(*l)};
        return LOOM_OK;
    });
}

void loom_listener_destroy(loom_listener_h listener) {
    if (listener == nullptr) return;
    WorkerGuard guard(listener->impl->worker());
    delete listener;
}

loom_status_t loom_listener_query(loom_listener_h listener, struct sockaddr_storage* address) {
    if (listener == nullptr || address == nullptr) return LOOM_ERR_INVALID_PARAM;
    *address = listener->impl->address();
    return LOOM_OK;
}

loom_status_t loom_conn_request_query(loom_conn_request_h request, struct sockaddr_storage* client_address) {
    if (request == nullptr || client_address == nullptr) return LOOM_ERR_INVALID_PARAM;
    *client_address = reinterpret_cast<ConnRequest*>(request)->client;
    return LOOM_OK;
}

loom_status_t loom_listener_reject(loom_listener_h listener, loom_conn_request_h request) {
    if (listener == nullptr || request == nullptr) return LOOM_ERR_INVALID_PARAM;
    WorkerGuard guard(listener->impl->worker());
    Listener::reject(reinterpret_cast<ConnRequest*>(request));
    return LOOM_OK;
}

/** Starts a flush (and close) request; completes at once when nothing is outstanding. */
static void* flush_nbx(Worker& w, Ep* ep, bool close, const loom_request_param_t* p) {
    // Nothing in flight (put_nbi to mapped memory then flush, OpenSHMEM's put and quiet):
    // done in the call, without a request, as in UCX.
    if (Status s; !close && w.flush_idle(ep, s)) return completed_request(w, s, p);
    Request* req = new_request(w, p);
    if (req == nullptr) return status_ptr(Status::no_memory);
    w.flush_start(req, ep, close);
    return finish_nbx(w, req, p);
}

loom_status_ptr_t loom_ep_flush_nbx(loom_ep_h ep_h, const loom_request_param_t* p) {
    Ep* ep = E(ep_h);
    if (ep == nullptr) return status_ptr(Status::invalid_param);
    WorkerGuard guard(*ep->worker);
    if (ep->flags & kEpFailed) return status_ptr(ep->failure);
    return flush_nbx(*ep->worker, ep, false, p);
}

loom_status_ptr_t loom_worker_flush_nbx(loom_worker_h worker, const loom_request_param_t* p) {
    if (worker == nullptr) return status_ptr(Status::invalid_param);
    WorkerGuard guard(*W(worker));
    return flush_nbx(*W(worker), nullptr, false, p);
}

loom_status_ptr_t loom_ep_close_nbx(loom_ep_h ep_h, const loom_request_param_t* p) {
    Ep* ep = E(ep_h);
    if (ep == nullptr) return status_ptr(Status::invalid_param);
    Worker& w = *ep->worker;
    WorkerGuard guard(w);
    if (ep->flags & kEpClosing) return status_ptr(Status::invalid_param);
    const bool force = (attr(p) & LOOM_OP_ATTR_FIELD_FLAGS) && (p->flags & LOOM_EP_CLOSE_FLAG_FORCE);
    if (force || (ep->flags & kEpFailed)) {
        w.ep_close_now(ep, true);
        return completed_request(w, Status::ok, p);
    }
    return flush_nbx(w, ep, true, p);
}

loom_status_ptr_t loom_tag_send_nbx(loom_ep_h ep, const void* buffer, size_t count, loom_tag_t tag,
                                    const loom_request_param_t* param) {
    caller_request_begin(param);
    return caller_request_end(ep ? E(ep)->worker : nullptr, param, tag_send(ep, buffer, count, tag, param, false));
}

loom_status_ptr_t loom_tag_send_sync_nbx(loom_ep_h ep, const void* buffer, size_t count, loom_tag_t tag,
                                         const loom_request_param_t* param) {
    caller_request_begin(param);
    return caller_request_end(ep ? E(ep)->worker : nullptr, param, tag_send(ep, buffer, count, tag, param, true));
}

static void* tag_recv(Worker& w, void* buffer, size_t count, UnexpDesc* desc, Tag tag, Tag mask,
                      const loom_request_param_t* p) {
    const Datatype dt = dt_of(p);
    if (LOOM_UNLIKELY(dt != dt_make_contig(1))) {
        if (Status s = dt_check(dt); s != Status::ok) return status_ptr(s);
    }
    // A caller's request takes the request path: the receive information goes into it.
    if (desc != nullptr && desc->kind == UnexpDesc::eager && desc->complete &&
        !(attr(p) & (LOOM_OP_ATTR_FLAG_NO_IMM_CMPL | LOOM_OP_ATTR_FIELD_REQUEST))) {
        DtState st;
        if (Status s = st.start_unpack(dt, buffer, count); s != Status::ok) return status_ptr(s);
        TagRecvInfo info;
        Status s = tag_recv_immediate(w, desc, st, info);
        if ((attr(p) & LOOM_OP_ATTR_FIELD_RECV_INFO) && p->recv_info.tag_recv) {
            std::memcpy(p->recv_info.tag_recv, &info, sizeof(info));
        }
        return status_ptr(s);
    }
    Request* req = new_request(w, p);
    if (req == nullptr) return status_ptr(Status::no_memory);
    req->flags |= kReqRecv;
    if (Status s = req->recv.dt.start_unpack(dt, buffer, count); s != Status::ok) {
        if (desc != nullptr) tag_of(w).tm.push_unexpected(desc->entry, desc->entry.tag);  // keep the message
        w.complete(req, s);
        return finish_nbx(w, req, p);
    }
    tag_recv_start(w, req, desc, tag, mask);
    return finish_nbx(w, req, p);
}

loom_status_ptr_t loom_tag_recv_nbx(loom_worker_h worker, void* buffer, size_t count, loom_tag_t tag,
                                    loom_tag_t tag_mask, const loom_request_param_t* param) {
    if (LOOM_UNLIKELY(worker == nullptr)) return status_ptr(null_worker("loom_tag_recv_nbx"));
    // A buffer the receive would fault on is refused before a message is matched to it
    // (which would take the message out of the unexpected queue).
    if (LOOM_UNLIKELY((buffer == nullptr && count != 0) || dt_of(param) != dt_make_contig(1))) {
        if (Status s = dt_check_buffer(dt_of(param), buffer, count); s != Status::ok) return status_ptr(s);
    }
    Worker& w = *W(worker);
    WorkerGuard guard(w);
    TagUnexpEntry* entry = tag_of(w).tm.probe(tag, tag_mask, true);
    caller_request_begin(param);
    return caller_request_end(&w, param,
                              tag_recv(w, buffer, count, reinterpret_cast<UnexpDesc*>(entry), tag, tag_mask, param));
}

loom_tag_message_h loom_tag_probe_nb(loom_worker_h worker, loom_tag_t tag, loom_tag_t tag_mask, int remove,
                                     loom_tag_recv_info_t* info) {
    if (worker == nullptr) {
        (void)null_worker("loom_tag_probe_nb");
        return nullptr;
    }
    TagRecvInfo i;
    WorkerGuard guard(*W(worker));
    UnexpDesc* desc = tag_probe(*W(worker), tag, tag_mask, remove != 0, &i);
    if (desc != nullptr && info != nullptr) std::memcpy(info, &i, sizeof(i));
    return reinterpret_cast<loom_tag_message_h>(desc);
}

loom_status_ptr_t loom_tag_msg_recv_nbx(loom_worker_h worker, void* buffer, size_t count, loom_tag_message_h message,
                                        const loom_request_param_t* param) {
    if (worker == nullptr) return status_ptr(null_worker("loom_tag_msg_recv_nbx"));
    if (message == nullptr) return status_ptr(Status::invalid_param);
    auto* desc = reinterpret_cast<UnexpDesc*>(message);
    WorkerGuard guard(*W(worker));
    caller_request_begin(param);
    return caller_request_end(W(worker), param,
                              tag_recv(*W(worker), buffer, count, desc, desc->entry.tag, kTagMaskFull, param));
}

}  // extern "C"

// --- active messages ---------------------------------------------------------------------

static_assert(sizeof(loom_am_recv_param_t) == sizeof(AmRecvParam));
// The C enums and the C++ ones are the same bits.
constexpr std::uint64_t u(std::uint64_t v) { return v; }
static_assert(u(LOOM_AM_RECV_ATTR_FIELD_REPLY_EP) == kAmRecvAttrReplyEp && u(LOOM_AM_RECV_ATTR_FLAG_DATA) == kAmRecvAttrData &&
              u(LOOM_AM_RECV_ATTR_FLAG_RNDV) == kAmRecvAttrRndv);
static_assert(u(LOOM_AM_FLAG_WHOLE_MSG) == kAmHandlerWholeMsg && u(LOOM_AM_FLAG_PERSISTENT_DATA) == kAmHandlerPersistentData);
static_assert(u(LOOM_AM_SEND_FLAG_REPLY) == kAmSendReply && u(LOOM_AM_SEND_FLAG_EAGER) == kAmSendEager &&
              u(LOOM_AM_SEND_FLAG_RNDV) == kAmSendRndv);

namespace {

/** One log line naming the bad parameter; the status an _nbx call returns for it. */
LOOM_COLD void* bad_param(const char* call, const char* why) {
    LOOM_LOG_ERROR("ucp: {}: {}", call, why);
    return status_ptr(Status::invalid_param);
}

bool has_feature(const Worker& w, std::uint64_t feature) { return w.context.params().features & feature; }

std::uint32_t op_flags(const loom_request_param_t* p) { return (attr(p) & LOOM_OP_ATTR_FIELD_FLAGS) ? p->flags : 0; }

/** The reasons loom_am_send_nbx refuses its parameters, or nullptr. */
LOOM_COLD const char* am_send_check(const Ep* ep, unsigned id, const void* header, size_t header_length,
                                    std::uint32_t flags) {
    if (ep == nullptr) return "NULL endpoint";
    if (!has_feature(*ep->worker, kFeatureAm)) return "the context was created without LOOM_FEATURE_AM";
    if (id > kAmMaxUserId) return "active-message ids go up to 65535";
    if (header == nullptr && header_length != 0) return "NULL header with a nonzero length";
    if (flags & ~std::uint32_t{kAmSendReply | kAmSendEager | kAmSendRndv}) return "unknown flags";
    if ((flags & kAmSendEager) && (flags & kAmSendRndv)) return "LOOM_AM_SEND_FLAG_EAGER and _RNDV together";
    if (header_length > am_max_header(ep)) return "header longer than the endpoint's limit (see loom/ucp_am.h)";
    return nullptr;
}

/** A receive's request: the length callback, recv.dt started. nullptr with @p out set on failure. */
Request* new_length_recv(Worker& w, const loom_request_param_t* p, Datatype dt, void* buffer, size_t count,
                         void*& out) {
    Request* req = new_request(w, p);
    if (req == nullptr) {
        out = status_ptr(Status::no_memory);
        return nullptr;
    }
    req->flags |= kReqRecv | kReqRecvLength;
    req->recv.info = TagRecvInfo{0, 0};
    if (Status s = req->recv.dt.start_unpack(dt, buffer, count); s != Status::ok) {
        w.complete(req, s);
        out = finish_nbx(w, req, p);
        return nullptr;
    }
    return req;
}

}  // namespace

extern "C" {

loom_status_t loom_worker_set_am_recv_handler(loom_worker_h worker, const loom_am_handler_param_t* param) {
    const char* why = nullptr;
    if (worker == nullptr || param == nullptr) {
        why = "NULL worker or parameters";
    } else if (!has_feature(*W(worker), kFeatureAm)) {
        why = "the context was created without LOOM_FEATURE_AM";
    } else if (!(param->field_mask & LOOM_AM_HANDLER_PARAM_FIELD_ID) ||
               !(param->field_mask & LOOM_AM_HANDLER_PARAM_FIELD_CB)) {
        why = "the id and cb fields are required";
    } else if (param->id > kAmMaxUserId) {
        why = "active-message ids go up to 65535";
    } else if ((param->field_mask & LOOM_AM_HANDLER_PARAM_FIELD_FLAGS) &&
               (param->flags & ~std::uint32_t{kAmHandlerWholeMsg | kAmHandlerPersistentData})) {
        why = "unknown handler flags";
    }
    if (why != nullptr) {
        LOOM_LOG_ERROR("ucp: loom_worker_set_am_recv_handler: {}", why);
        return LOOM_ERR_INVALID_PARAM;
    }
    const std::uint32_t flags = (param->field_mask & LOOM_AM_HANDLER_PARAM_FIELD_FLAGS) ? param->flags : 0;
    void* arg = (param->field_mask & LOOM_AM_HANDLER_PARAM_FIELD_ARG) ? param->arg : nullptr;
    WorkerGuard guard(*W(worker));
    return C(am_set_handler(*W(worker), param->id, flags, param->cb, arg));
}

loom_status_ptr_t loom_am_send_nbx(loom_ep_h ep_h, unsigned id, const void* header, size_t header_length,
                                   const void* buffer, size_t count, const loom_request_param_t* p) {
    Ep* ep = E(ep_h);
    const std::uint32_t flags = op_flags(p);
    if (LOOM_UNLIKELY(ep == nullptr || id > kAmMaxUserId || (flags & ~std::uint32_t{kAmSendReply | kAmSendEager}) ||
                      (header == nullptr && header_length != 0) || !has_feature(*ep->worker, kFeatureAm))) {
        // The common flags pass the quick test; everything else is looked at closely.
        if (const char* why = am_send_check(ep, id, header, header_length, flags)) {
            return bad_param("loom_am_send_nbx", why);
        }
    }
    Worker& w = *ep->worker;
    WorkerGuard guard(w);
    if (LOOM_UNLIKELY(ep->flags & kEpNotReady)) {
        if (Status s = w.ep_first_use(ep); s != Status::ok) return status_ptr(s);
    }
    const Datatype dt = dt_of(p);
    // Eager short: the AM header word and one of header or data, nothing allocated.
    if (LOOM_LIKELY(dt == dt_make_contig(1) && !(flags & (kAmSendReply | kAmSendRndv)) && ep->num_pending == 0 &&
                    (header_length == 0 || count == 0) && header_length + count < ep->am_short_limit &&
                    !(attr(p) & LOOM_OP_ATTR_FLAG_NO_IMM_CMPL))) {
        Status s = uct::ep_am_short(ep->am_ep, kAmUserOnly, am_hdr_word(id, 0, header_length),
                                    header_length != 0 ? header : buffer,
                                    static_cast<unsigned>(header_length + count));
        if (LOOM_LIKELY(s == Status::ok)) return nullptr;
        if (s != Status::no_resource) return status_ptr(s);
    }
    if (LOOM_UNLIKELY(header_length > am_max_header(ep))) {
        return bad_param("loom_am_send_nbx", "header longer than the endpoint's limit (see loom/ucp_am.h)");
    }
    if (LOOM_UNLIKELY(dt != dt_make_contig(1))) {
        if (Status s = dt_check(dt); s != Status::ok) return status_ptr(s);
    }
    DtState st;
    if (Status s = st.start_pack(dt, buffer, count); s != Status::ok) return status_ptr(s);
    if (!(attr(p) & LOOM_OP_ATTR_FLAG_NO_IMM_CMPL)) {
        // One bcopy, still without a request when the lane takes it.
        Status s = am_send_try_now(ep, id, flags, header, header_length, st);
        if (s != Status::no_resource) {
            st.finish();
            return status_ptr(s);
        }
    }
    if (attr(p) & LOOM_OP_ATTR_FLAG_FORCE_IMM_CMPL) {
        st.finish();
        return status_ptr(Status::no_resource);
    }
    Request* req = new_request(w, p);
    if (req == nullptr) {
        st.finish();
        return status_ptr(Status::no_memory);
    }
    req->send.dt = st;
    (void)am_send_start(req, ep, id, flags, header, header_length);
    return finish_nbx(w, req, p);
}

loom_status_ptr_t loom_am_recv_data_nbx(loom_worker_h worker, void* data_desc, void* buffer, size_t count,
                                        const loom_request_param_t* p) {
    if (worker == nullptr || data_desc == nullptr) return bad_param("loom_am_recv_data_nbx", "NULL worker or data");
    Worker& w = *W(worker);
    WorkerGuard guard(w);
    if (!has_feature(w, kFeatureAm)) {
        return bad_param("loom_am_recv_data_nbx", "the context was created without LOOM_FEATURE_AM");
    }
    const AmDataKind kind = am_data_kind(w, data_desc);
    if (kind == AmDataKind::unknown) {
        return bad_param("loom_am_recv_data_nbx", "not a data descriptor a handler of this worker was given");
    }
    const Datatype dt = dt_of(p);
    if (LOOM_UNLIKELY(dt != dt_make_contig(1))) {
        if (Status s = dt_check(dt); s != Status::ok) {
            // Loom owns the descriptor from the call on: drop it.
            am_data_release(w, data_desc);
            return status_ptr(s);
        }
    }
    if (kind == AmDataKind::eager) {
        DtState st;
        Status s = st.start_unpack(dt, buffer, count);
        std::size_t length = 0;
        if (s == Status::ok) {
            s = am_recv_eager(w, data_desc, st, length);
            st.finish();
        } else {
            am_data_release(w, data_desc);
        }
        if ((attr(p) & LOOM_OP_ATTR_FIELD_RECV_INFO) && p->recv_info.length != nullptr) *p->recv_info.length = length;
        if (!(attr(p) & LOOM_OP_ATTR_FLAG_NO_IMM_CMPL)) return status_ptr(s);
        void* r = completed_request(w, s, p);
        if (LOOM_PTR_IS_PTR(r)) {
            Request* req = request_of(r);
            req->flags |= kReqRecv | kReqRecvLength;
            req->recv.info = TagRecvInfo{0, length};
        }
        return r;
    }
    void* out = nullptr;
    Request* req = new_length_recv(w, p, dt, buffer, count, out);
    if (req == nullptr) {
        am_data_release(w, data_desc);
        return out;
    }
    am_recv_rndv(w, data_desc, req);
    return finish_nbx(w, req, p);
}

size_t loom_am_max_header(loom_worker_h worker) {
    if (worker == nullptr) return 0;
    return am_worker_max_header(*W(worker));
}

void loom_am_data_release(loom_worker_h worker, void* data) {
    if (worker == nullptr || am_state(*W(worker)) == nullptr) return;
    WorkerGuard guard(*W(worker));
    am_data_release(*W(worker), data);
}

}  // extern "C"

// --- streams -----------------------------------------------------------------------------

static_assert(sizeof(loom_stream_poll_ep_t) == sizeof(StreamPollEp));
static_assert(LOOM_STREAM_RECV_FLAG_WAITALL == 1);

extern "C" {

loom_status_ptr_t loom_stream_send_nbx(loom_ep_h ep_h, const void* buffer, size_t count,
                                       const loom_request_param_t* p) {
    Ep* ep = E(ep_h);
    if (LOOM_UNLIKELY(ep == nullptr)) return bad_param("loom_stream_send_nbx", "NULL endpoint");
    if (LOOM_UNLIKELY(!has_feature(*ep->worker, kFeatureStream))) {
        return bad_param("loom_stream_send_nbx", "the context was created without LOOM_FEATURE_STREAM");
    }
    Worker& w = *ep->worker;
    WorkerGuard guard(w);
    if (LOOM_UNLIKELY(ep->flags & kEpNotReady)) {
        if (Status s = w.ep_first_use(ep); s != Status::ok) return status_ptr(s);
    }
    const Datatype dt = dt_of(p);
    const bool imm = !(attr(p) & LOOM_OP_ATTR_FLAG_NO_IMM_CMPL);
    if (LOOM_LIKELY(dt == dt_make_contig(1) && count < ep->stream_short_limit && ep->num_pending == 0 && imm)) {
        if (count == 0) return nullptr;  // nothing to append
        if (LOOM_UNLIKELY(buffer == nullptr)) return status_ptr(DtState::null_buffer(true));
        Status s = uct::ep_am_short(ep->am_ep, kAmStreamData, w.uuid, buffer, static_cast<unsigned>(count));
        if (LOOM_LIKELY(s == Status::ok)) return nullptr;
        if (s != Status::no_resource) return status_ptr(s);
    }
    if (LOOM_UNLIKELY(dt != dt_make_contig(1))) {
        if (Status s = dt_check(dt); s != Status::ok) return status_ptr(s);
    }
    DtState st;
    if (Status s = st.start_pack(dt, buffer, count); s != Status::ok) return status_ptr(s);
    if (imm) {
        Status s = st.length == 0 ? Status::ok : stream_send_try_now(ep, st);
        if (s != Status::no_resource) {
            st.finish();
            return status_ptr(s);
        }
    }
    if (attr(p) & LOOM_OP_ATTR_FLAG_FORCE_IMM_CMPL) {
        st.finish();
        return status_ptr(Status::no_resource);
    }
    Request* req = new_request(w, p);
    if (req == nullptr) {
        st.finish();
        return status_ptr(Status::no_memory);
    }
    req->send.dt = st;
    (void)stream_send_start(req, ep);
    return finish_nbx(w, req, p);
}

loom_status_ptr_t loom_stream_recv_nbx(loom_ep_h ep_h, void* buffer, size_t count, size_t* length,
                                       const loom_request_param_t* p) {
    Ep* ep = E(ep_h);
    const std::uint32_t flags = op_flags(p);
    const Datatype dt = dt_of(p);
    const char* why = nullptr;
    if (ep == nullptr || length == nullptr) {
        why = "NULL endpoint or length";
    } else if (!has_feature(*ep->worker, kFeatureStream)) {
        why = "the context was created without LOOM_FEATURE_STREAM";
    } else if (flags & ~std::uint32_t{LOOM_STREAM_RECV_FLAG_WAITALL}) {
        why = "unknown flags";
    } else if ((dt & kDtClassMask) == kDtGeneric) {
        why = "streams take contiguous and iov datatypes only";
    }
    if (LOOM_UNLIKELY(why != nullptr)) return bad_param("loom_stream_recv_nbx", why);
    if (LOOM_UNLIKELY(dt != dt_make_contig(1))) {
        if (Status s = dt_check(dt); s != Status::ok) return status_ptr(s);
    }
    Worker& w = *ep->worker;
    WorkerGuard guard(w);
    if (LOOM_UNLIKELY(ep->flags & kEpClosing)) return status_ptr(Status::not_connected);
    const bool waitall = flags & LOOM_STREAM_RECV_FLAG_WAITALL;
    if (!(attr(p) & LOOM_OP_ATTR_FLAG_NO_IMM_CMPL)) {
        DtState st;
        if (Status s = st.start_unpack(dt, buffer, count); s != Status::ok) return status_ptr(s);
        const bool done = stream_recv_now(w, ep, st, waitall, *length);
        st.finish();
        if (done) return nullptr;
    }
    void* out = nullptr;
    Request* req = new_length_recv(w, p, dt, buffer, count, out);
    if (req == nullptr) return out;
    if (waitall) req->flags |= kReqWaitAll;
    (void)stream_recv_start(w, ep, req);
    if ((req->flags & kReqCompleted) && !(attr(p) & LOOM_OP_ATTR_FLAG_NO_IMM_CMPL)) *length = req->recv.info.length;
    return finish_nbx(w, req, p);
}

loom_status_t loom_stream_recv_request_test(void* request, size_t* length) {
    if (LOOM_UNLIKELY(!LOOM_PTR_IS_PTR(request))) return LOOM_PTR_STATUS(request);
    Request* req = request_of(request);
    if (!completed(req)) return LOOM_INPROGRESS;
    if (length != nullptr && (req->status == Status::ok || req->status == Status::timed_out))
        *length = req->recv.info.length;
    return C(req->status);
}

ssize_t loom_stream_worker_poll(loom_worker_h worker, loom_stream_poll_ep_t* poll_eps, size_t max_eps, unsigned flags) {
    if (worker == nullptr || (poll_eps == nullptr && max_eps != 0) || flags != 0) {
        LOOM_LOG_ERROR("ucp: loom_stream_worker_poll: NULL worker or array, or nonzero flags");
        return LOOM_ERR_INVALID_PARAM;
    }
    if (!has_feature(*W(worker), kFeatureStream)) {
        LOOM_LOG_ERROR("ucp: loom_stream_worker_poll: the context was created without LOOM_FEATURE_STREAM");
        return LOOM_ERR_INVALID_PARAM;
    }
    WorkerGuard guard(*W(worker));
    return static_cast<ssize_t>(stream_poll(*W(worker), reinterpret_cast<StreamPollEp*>(poll_eps), max_eps));
}

loom_status_ptr_t loom_stream_recv_data_nb(loom_ep_h ep_h, size_t* length) {
    Ep* ep = E(ep_h);
    if (ep == nullptr || length == nullptr) return bad_param("loom_stream_recv_data_nb", "NULL endpoint or length");
    if (!has_feature(*ep->worker, kFeatureStream)) {
        return bad_param("loom_stream_recv_data_nb", "the context was created without LOOM_FEATURE_STREAM");
    }
    WorkerGuard guard(*ep->worker);
    void* data = stream_recv_data(*ep->worker, ep, *length);
    if (data == nullptr && (ep->flags & kEpFailed)) return status_ptr(ep->failure);
    return data;
}

void loom_stream_data_release(loom_ep_h ep_h, void* data) {
    Ep* ep = E(ep_h);
    if (ep == nullptr || stream_state(*ep->worker) == nullptr) return;
    WorkerGuard guard(*ep->worker);
    (void)stream_data_release(*ep->worker, data);
}

}  // extern "C"
