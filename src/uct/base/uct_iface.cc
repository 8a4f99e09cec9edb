#include "uct/api/uct.h"
#include "uct/base/uct_worker.h"

#include "ucs/debug/log.h"

#include <type_traits>

namespace loom::uct {

namespace {

/** Stand-in for an operation a transport does not implement. */
template <typename R, typename... Args>
R unsupported_op(Args...) {
    if constexpr (std::is_void_v<R>) {
        return;
    } else if constexpr (std::is_same_v<R, unsigned>) {
        return 0;  // progress: nothing done
    } else {
        return static_cast<R>(Status::unsupported);
    }
}

template <typename R, typename... Args>
void fill_unsupported(R (*&fn)(Args...)) {
    if (fn == nullptr) fn = &unsupported_op<R, Args...>;
}

IfaceOps complete_ops(IfaceOps ops) {
    fill_unsupported(ops.ep_am_short);
    fill_unsupported(ops.ep_am_bcopy);
    fill_unsupported(ops.ep_am_zcopy);
    fill_unsupported(ops.ep_put_short);
    fill_unsupported(ops.ep_put_bcopy);
    fill_unsupported(ops.ep_put_zcopy);
    fill_unsupported(ops.ep_get_bcopy);
    fill_unsupported(ops.ep_get_zcopy);
    fill_unsupported(ops.ep_atomic32_post);
    fill_unsupported(ops.ep_atomic64_post);
    fill_unsupported(ops.ep_atomic32_fetch);
    fill_unsupported(ops.ep_atomic64_fetch);
    fill_unsupported(ops.ep_atomic32_cswap);
    fill_unsupported(ops.ep_atomic64_cswap);
    fill_unsupported(ops.ep_pending_add);
    fill_unsupported(ops.ep_pending_purge);
    fill_unsupported(ops.ep_pending_remove);
    fill_unsupported(ops.ep_flush);
    fill_unsupported(ops.ep_fence);
    fill_unsupported(ops.ep_check);
    fill_unsupported(ops.iface_progress);
    fill_unsupported(ops.iface_flush);
    fill_unsupported(ops.iface_fence);
    fill_unsupported(ops.iface_release_desc);
    return ops;
}

/** Handler of an id nobody registered: the message is dropped, loudly. */
Status default_am_handler(void* arg, void*, std::size_t length, unsigned) {
    auto id = static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(arg));
    LOOM_LOG_WARN("dropped an active message with id {} ({} bytes): no handler registered", id, length);
    return Status::ok;
}

}  // namespace

Iface::Iface(Md* md, Worker* worker, TlResource resource, const IfaceOps& iface_ops)
    : ops(complete_ops(iface_ops)), md_(md), worker_(worker), resource_(std::move(resource)) {
    for (unsigned id = 0; id < kAmIdMax; ++id) {
        am_handlers_[id] = {default_am_handler, reinterpret_cast<void*>(static_cast<std::uintptr_t>(id)), 0};
    }
}

Iface::~Iface() { progress_disable(); }

Status Iface::set_am_handler(AmId id, AmCallback cb, void* arg, unsigned flags) {
    if (id >= kAmIdMax) {
        LOOM_LOG_ERROR("set_am_handler: id {} is out of range (0..{})", id, kAmIdMax - 1);
        return Status::invalid_param;
    }
    if (cb == nullptr) {
        am_handlers_[id] = {default_am_handler, reinterpret_cast<void*>(static_cast<std::uintptr_t>(id)), 0};
    } else {
        am_handlers_[id] = {cb, arg, flags};
    }
    return Status::ok;
}

Status Iface::invalid_am_id(AmId id) {
    LOOM_LOG_WARN("{}/{}: dropped an active message with invalid id {}", resource_.tl_name, resource_.dev_name, id);
    return Status::ok;
}

namespace {

unsigned dispatch_iface_progress(void* arg) {
    auto* iface = static_cast<Iface*>(arg);
    return iface->ops.iface_progress(iface);
}

}  // namespace

Status Iface::progress_enable() {
    if (progress_id_ == ucs::CallbackId::invalid && worker_ != nullptr) {
        auto id = worker_->progress_queue().add(dispatch_iface_progress, this);
        if (!id) return id.status();
        progress_id_ = *id;
    }
    return Status::ok;
}

void Iface::progress_disable() {
    if (progress_id_ != ucs::CallbackId::invalid) {
        (void)worker_->progress_queue().remove(progress_id_);
        progress_id_ = ucs::CallbackId::invalid;
    }
}

Status Iface::ep_get_address(Ep*, std::uint8_t*) { return Status::unsupported; }

Status Iface::ep_connect_to_ep(Ep*, const std::uint8_t*, std::size_t, const std::uint8_t*, std::size_t, unsigned) {
    return Status::unsupported;
}

Status Iface::ep_release_sends(Ep*) { return Status::unsupported; }

Result<int> Iface::event_fd() { return Status::unsupported; }

Status Iface::event_arm() { return Status::unsupported; }

Result<std::unique_ptr<Listener>> Iface::listen(const ListenParams&) {
    LOOM_LOG_ERROR("{}/{}: this transport cannot listen on a socket address", resource_.tl_name,
                   resource_.dev_name);
    return Status::unsupported;
}

Status Iface::reject(ConnRequest*, const void*, std::size_t) { return Status::unsupported; }

Listener::~Listener() = default;

}  // namespace loom::uct
