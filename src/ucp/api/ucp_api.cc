/**
 * The C API (include/loom/ucp.h) over the protocol layer's C++ objects. Handles are
 * the C++ objects themselves; statuses are the same numbers. Nothing here throws:
 * every entry point returns a status (allocation failures included).
 */
#include "loom/ucp.h"

#include "ucp/api/handles.h"
#include "ucp/core/ucp_log.h"
#include "ucp/core/wire.h"
#include "ucp/core/worker.h"
#include "ucp/tag/tag_proto.h"

#include <cstdlib>
#include <cstring>
#include <new>

using namespace loom;
using namespace loom::ucp;

static_assert(sizeof(loom_dt_iov_t) == sizeof(DtIov));
static_assert(sizeof(loom_tag_recv_info_t) == sizeof(TagRecvInfo));

namespace {

Worker* W(loom_worker_h w) { return w->impl.get(); }
Ep* E(loom_ep_h ep) { return reinterpret_cast<Ep*>(ep); }
loom_ep_h H(Ep* ep) { return reinterpret_cast<loom_ep_h>(ep); }
loom_status_t C(Status s) { return static_cast<loom_status_t>(s); }
void* status_ptr(Status s) { return reinterpret_cast<void*>(static_cast<std::intptr_t>(s)); }

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

std::uint32_t attr(const loom_request_param_t* p) { return p ? p->op_attr_mask : 0; }

Datatype dt_of(const loom_request_param_t* p) {
    return (attr(p) & LOOM_OP_ATTR_FIELD_DATATYPE) ? p->datatype : dt_make_contig(1);
}

/** A request for an operation: the caller's memory or the pool; nullptr without memory. */
Request* new_request(Worker& w, const loom_request_param_t* p) {
    Request* req = (attr(p) & LOOM_OP_ATTR_FIELD_REQUEST) ? w.init_caller_request(p->request) : w.alloc_request();
    if (req == nullptr) return nullptr;
    if (attr(p) & LOOM_OP_ATTR_FIELD_USER_DATA) req->user_data = p->user_data;
    if (attr(p) & LOOM_OP_ATTR_FIELD_CALLBACK) req->cb.send = reinterpret_cast<SendCallback>(p->cb.send);
    return req;
}

/** What an _nbx call returns for @p req once its first step ran. */
void* finish_nbx(Worker& w, Request* req, const loom_request_param_t* p) {
    if ((req->flags & kReqCompleted) && !(attr(p) & LOOM_OP_ATTR_FLAG_NO_IMM_CMPL)) {
        Status s = req->status;
        if ((req->flags & kReqRecv) && (attr(p) & LOOM_OP_ATTR_FIELD_RECV_INFO) && p->recv_info.tag_recv) {
            std::memcpy(p->recv_info.tag_recv, &req->recv.info, sizeof(TagRecvInfo));
        }
        w.release(req);
        return status_ptr(s);
    }
    req->flags |= kReqHandedOut;
    return handle_of(req);
}

/** An operation that completed without a request, under NO_IMM_CMPL: make one, completed. */
void* completed_request(Worker& w, Status s, const loom_request_param_t* p) {
    if (!(attr(p) & LOOM_OP_ATTR_FLAG_NO_IMM_CMPL)) return status_ptr(s);
    Request* req = new_request(w, p);
    if (req == nullptr) return status_ptr(Status::no_memory);
    req->status = s;
    req->flags |= kReqCompleted | kReqHandedOut;
    return handle_of(req);
}

void* tag_send(loom_ep_h ep_h, const void* buffer, size_t count, loom_tag_t tag, const loom_request_param_t* p,
               bool sync) {
    Ep* ep = E(ep_h);
    if (LOOM_UNLIKELY(ep == nullptr)) return status_ptr(Status::invalid_param);
    if (LOOM_UNLIKELY(ep->flags & (kEpFailed | kEpClosing))) {
        return status_ptr(ep->flags & kEpFailed ? ep->failure : Status::not_connected);
    }
    Worker& w = *ep->worker;
    const Datatype dt = dt_of(p);
    // Eager short: nothing to allocate when the transport takes it at once.
    if (LOOM_LIKELY(dt == dt_make_contig(1) && !sync && count <= ep->max_short && ep->num_pending == 0 &&
                    !(attr(p) & LOOM_OP_ATTR_FLAG_NO_IMM_CMPL))) {
        Status s = uct::ep_am_short(ep->am_ep, kAmEagerOnly, tag, buffer, static_cast<unsigned>(count));
        if (LOOM_LIKELY(s == Status::ok)) return nullptr;
        if (s != Status::no_resource) return status_ptr(s);
    }
    if (LOOM_UNLIKELY(dt != dt_make_contig(1))) {
        if (Status s = dt_check(dt); s != Status::ok) return status_ptr(s);
    }
    if ((attr(p) & LOOM_OP_ATTR_FLAG_FORCE_IMM_CMPL) && count > ep->max_short) {
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
            if (m & LOOM_PARAM_FIELD_REQUEST_INIT) cp.request_init = params->request_init;
            if (m & LOOM_PARAM_FIELD_REQUEST_CLEANUP) cp.request_cleanup = params->request_cleanup;
            if ((m & LOOM_PARAM_FIELD_NAME) && params->name) cp.name = params->name;
        }
        constexpr std::uint64_t kImplemented =
            kFeatureTag | kFeatureWakeup | kFeatureRma | kFeatureAmo32 | kFeatureAmo64;
        if (cp.features & ~kImplemented) {
            LOOM_LOG_ERROR("ucp: features {:#x} requested; this version implements tag, RMA, AMO32, AMO64 (and "
                           "wakeup via progress only)",
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

unsigned loom_worker_progress(loom_worker_h worker) { return W(worker)->progress(); }

loom_status_t loom_worker_get_address(loom_worker_h worker, void** address, size_t* length) {
    if (worker == nullptr || address == nullptr || length == nullptr) return LOOM_ERR_INVALID_PARAM;
    return guarded([&] {
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

loom_status_t loom_request_check_status(void* request) {
    Request* req = request_of(request);
    return (req->flags & kReqCompleted) ? C(req->status) : LOOM_INPROGRESS;
}

loom_status_t loom_tag_recv_request_test(void* request, loom_tag_recv_info_t* info) {
    Request* req = request_of(request);
    if (!(req->flags & kReqCompleted)) return LOOM_INPROGRESS;
    if (info != nullptr && (req->flags & kReqRecv)) std::memcpy(info, &req->recv.info, sizeof(*info));
    return C(req->status);
}

void loom_request_free(void* request) {
    Request* req = request_of(request);
    if (req->flags & kReqCompleted) {
        req->worker->release(req);
    } else {
        req->flags |= kReqReleased;
    }
}

void loom_request_cancel(loom_worker_h worker, void* request) {
    Request* req = request_of(request);
    if (!(req->flags & kReqRecv) || (req->flags & kReqCompleted)) return;
    if (W(worker)->tm.cancel(req->recv.entry)) {
        req->recv.dt.finish();
        W(worker)->complete(req, Status::canceled);
    }
}

loom_status_t loom_ep_create(loom_worker_h worker, const loom_ep_params_t* params, loom_ep_h* ep) {
    if (worker == nullptr || params == nullptr || ep == nullptr) return LOOM_ERR_INVALID_PARAM;
    if (!(params->field_mask & LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS) || params->address == nullptr) {
        LOOM_LOG_ERROR("ucp: loom_ep_create needs the peer's worker address (LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS)");
        return LOOM_ERR_INVALID_PARAM;
    }
    return guarded([&] {
        Worker& w = *W(worker);
        // The address says its own length; read the header first to learn it.
        std::uint32_t total = 0;
        std::memcpy(&total, static_cast<const std::uint8_t*>(params->address) + 4, sizeof(total));
        auto address = Worker::unpack_address(params->address, total);
        if (!address) return C(address.status());
        const bool peer_mode = (params->field_mask & LOOM_EP_PARAM_FIELD_ERR_HANDLING_MODE) &&
                               params->err_mode == LOOM_ERR_HANDLING_MODE_PEER;
        Ep* e = nullptr;
        auto it = w.ep_by_uuid.find(address->uuid);
        if (it != w.ep_by_uuid.end() && (it->second->flags & kEpInternal) && !(it->second->flags & kEpFailed)) {
            e = it->second;  // the peer connected first: adopt the endpoint its wire-up made
            e->flags &= ~kEpInternal;
        } else {
            auto created = w.ep_create(*address, false, 0);
            if (!created) return C(created.status());
            e = *created;
            if (Status s = w.send_wireup(e); s != Status::ok) {
                w.ep_destroy(e, Status::canceled);
                return C(s);
            }
        }
        if (peer_mode) e->flags |= kEpErrModePeer;
        if (params->field_mask & LOOM_EP_PARAM_FIELD_ERR_HANDLER) {
            e->on_error = reinterpret_cast<EpErrorCallback>(params->err_handler.cb);
            e->on_error_arg = params->err_handler.arg;
        }
        if (params->field_mask & LOOM_EP_PARAM_FIELD_USER_DATA) e->user_data = params->user_data;
        *ep = H(e);
        return LOOM_OK;
    });
}

/** Starts a flush (and close) request; completes at once when nothing is outstanding. */
static void* flush_nbx(Worker& w, Ep* ep, bool close, const loom_request_param_t* p) {
    Request* req = new_request(w, p);
    if (req == nullptr) return status_ptr(Status::no_memory);
    w.flush_start(req, ep, close);
    return finish_nbx(w, req, p);
}

loom_status_ptr_t loom_ep_flush_nbx(loom_ep_h ep_h, const loom_request_param_t* p) {
    Ep* ep = E(ep_h);
    if (ep == nullptr) return status_ptr(Status::invalid_param);
    if (ep->flags & kEpFailed) return status_ptr(ep->failure);
    return flush_nbx(*ep->worker, ep, false, p);
}

loom_status_ptr_t loom_worker_flush_nbx(loom_worker_h worker, const loom_request_param_t* p) {
    if (worker == nullptr) return status_ptr(Status::invalid_param);
    return flush_nbx(*W(worker), nullptr, false, p);
}

loom_status_ptr_t loom_ep_close_nbx(loom_ep_h ep_h, const loom_request_param_t* p) {
    Ep* ep = E(ep_h);
    if (ep == nullptr || (ep->flags & kEpClosing)) return status_ptr(Status::invalid_param);
    Worker& w = *ep->worker;
    const bool force = (attr(p) & LOOM_OP_ATTR_FIELD_FLAGS) && (p->flags & LOOM_EP_CLOSE_FLAG_FORCE);
    if (force || (ep->flags & kEpFailed)) {
        w.ep_close_now(ep, true);
        return completed_request(w, Status::ok, p);
    }
    return flush_nbx(w, ep, true, p);
}

loom_status_ptr_t loom_tag_send_nbx(loom_ep_h ep, const void* buffer, size_t count, loom_tag_t tag,
                                    const loom_request_param_t* param) {
    return tag_send(ep, buffer, count, tag, param, false);
}

loom_status_ptr_t loom_tag_send_sync_nbx(loom_ep_h ep, const void* buffer, size_t count, loom_tag_t tag,
                                         const loom_request_param_t* param) {
    return tag_send(ep, buffer, count, tag, param, true);
}

static void* tag_recv(Worker& w, void* buffer, size_t count, UnexpDesc* desc, Tag tag, Tag mask,
                      const loom_request_param_t* p) {
    const Datatype dt = dt_of(p);
    if (LOOM_UNLIKELY(dt != dt_make_contig(1))) {
        if (Status s = dt_check(dt); s != Status::ok) return status_ptr(s);
    }
    if (desc != nullptr && desc->kind == UnexpDesc::eager && desc->complete &&
        !(attr(p) & LOOM_OP_ATTR_FLAG_NO_IMM_CMPL)) {
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
        if (desc != nullptr) w.tm.push_unexpected(desc->entry, desc->entry.tag);  // keep the message
        w.complete(req, s);
        return finish_nbx(w, req, p);
    }
    tag_recv_start(w, req, desc, tag, mask);
    return finish_nbx(w, req, p);
}

loom_status_ptr_t loom_tag_recv_nbx(loom_worker_h worker, void* buffer, size_t count, loom_tag_t tag,
                                    loom_tag_t tag_mask, const loom_request_param_t* param) {
    Worker& w = *W(worker);
    TagUnexpEntry* entry = w.tm.probe(tag, tag_mask, true);
    return tag_recv(w, buffer, count, reinterpret_cast<UnexpDesc*>(entry), tag, tag_mask, param);
}

loom_tag_message_h loom_tag_probe_nb(loom_worker_h worker, loom_tag_t tag, loom_tag_t tag_mask, int remove,
                                     loom_tag_recv_info_t* info) {
    TagRecvInfo i;
    UnexpDesc* desc = tag_probe(*W(worker), tag, tag_mask, remove != 0, &i);
    if (desc != nullptr && info != nullptr) std::memcpy(info, &i, sizeof(i));
    return reinterpret_cast<loom_tag_message_h>(desc);
}

loom_status_ptr_t loom_tag_msg_recv_nbx(loom_worker_h worker, void* buffer, size_t count, loom_tag_message_h message,
                                        const loom_request_param_t* param) {
    if (message == nullptr) return status_ptr(Status::invalid_param);
    auto* desc = reinterpret_cast<UnexpDesc*>(message);
    return tag_recv(*W(worker), buffer, count, desc, desc->entry.tag, kTagMaskFull, param);
}

}  // extern "C"
