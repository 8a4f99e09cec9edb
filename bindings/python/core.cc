/**
 * The lifetimes of the Python bindings' objects (core.h): opening and closing each
 * Loom handle, in the order Loom needs, and completing requests.
 */
#include "core.h"

#include <cstdio>

namespace loompy {

namespace {

/** loom/__init__.py's factory of exceptions: (code, what) -> a LoomError. */
PyObject* g_error_factory = nullptr;

struct StatusName {
    int code;
    const char* name;
};

constexpr StatusName kStatusNames[] = {
    {LOOM_OK, "LOOM_OK"},
    {LOOM_INPROGRESS, "LOOM_INPROGRESS"},
    {LOOM_ERR_NO_RESOURCE, "LOOM_ERR_NO_RESOURCE"},
    {LOOM_ERR_NO_MEMORY, "LOOM_ERR_NO_MEMORY"},
    {LOOM_ERR_INVALID_PARAM, "LOOM_ERR_INVALID_PARAM"},
    {LOOM_ERR_IO_ERROR, "LOOM_ERR_IO_ERROR"},
    {LOOM_ERR_BUSY, "LOOM_ERR_BUSY"},
    {LOOM_ERR_CANCELED, "LOOM_ERR_CANCELED"},
    {LOOM_ERR_TIMED_OUT, "LOOM_ERR_TIMED_OUT"},
    {LOOM_ERR_UNSUPPORTED, "LOOM_ERR_UNSUPPORTED"},
    {LOOM_ERR_NO_ELEM, "LOOM_ERR_NO_ELEM"},
    {LOOM_ERR_ALREADY_EXISTS, "LOOM_ERR_ALREADY_EXISTS"},
    {LOOM_ERR_OUT_OF_RANGE, "LOOM_ERR_OUT_OF_RANGE"},
    {LOOM_ERR_EXCEEDS_LIMIT, "LOOM_ERR_EXCEEDS_LIMIT"},
    {LOOM_ERR_NO_DEVICE, "LOOM_ERR_NO_DEVICE"},
    {LOOM_ERR_INVALID_CONFIG, "LOOM_ERR_INVALID_CONFIG"},
    {LOOM_ERR_UNREACHABLE, "LOOM_ERR_UNREACHABLE"},
    {LOOM_ERR_CONNECTION_REFUSED, "LOOM_ERR_CONNECTION_REFUSED"},
    {LOOM_ERR_CONNECTION_RESET, "LOOM_ERR_CONNECTION_RESET"},
    {LOOM_ERR_ENDPOINT_FAILURE, "LOOM_ERR_ENDPOINT_FAILURE"},
    {LOOM_ERR_NOT_CONNECTED, "LOOM_ERR_NOT_CONNECTED"},
    {LOOM_ERR_REJECTED, "LOOM_ERR_REJECTED"},
    {LOOM_ERR_PEER_TIMEOUT, "LOOM_ERR_PEER_TIMEOUT"},
    {LOOM_ERR_INVALID_ADDRESS, "LOOM_ERR_INVALID_ADDRESS"},
    {LOOM_ERR_MESSAGE_TRUNCATED, "LOOM_ERR_MESSAGE_TRUNCATED"},
    {LOOM_ERR_MALFORMED_PACKET, "LOOM_ERR_MALFORMED_PACKET"},
    {LOOM_ERR_VERSION_MISMATCH, "LOOM_ERR_VERSION_MISMATCH"},
    {LOOM_ERR_NO_MESSAGE, "LOOM_ERR_NO_MESSAGE"},
    {LOOM_ERR_ACCESS_DENIED, "LOOM_ERR_ACCESS_DENIED"},
};

}  // namespace

void set_error_factory(py::object factory) {
    Py_XDECREF(g_error_factory);
    g_error_factory = factory.release().ptr();  // lives until the interpreter ends
}

std::string status_name(int code) {
    for (const StatusName& s : kStatusNames) {
        if (s.code == code) return s.name;
    }
    return "LOOM_STATUS(" + std::to_string(code) + ")";
}

[[noreturn]] void raise_status(loom_status_t status, const char* what) {
    if (g_error_factory == nullptr) {
        throw std::runtime_error(std::string(what) + ": " + loom_status_string(status));
    }
    py::object exc = py::reinterpret_borrow<py::object>(g_error_factory)(static_cast<int>(status), what);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    throw py::error_already_set();
}

void Buffer::acquire(py::handle obj, bool writable) {
    release();
    // PyBUF_SIMPLE: contiguous bytes, no format; a strided numpy view is refused with a BufferError.
    if (PyObject_GetBuffer(obj.ptr(), &view_, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) != 0) {
        throw py::error_already_set();
    }
    held_ = true;
}

py::object ReqState::result() const {
    if (status == LOOM_INPROGRESS) raise_status(status, "the request has not completed");
    if (status != LOOM_OK) raise_status(status, "the request failed");
    switch (kind) {
        case Result::none:
            return py::none();
        case Result::tag_info:
            return py::make_tuple(info.sender_tag, info.length);
        case Result::length:
            return py::int_(length);
        case Result::value:
            return py::int_(reply & value_mask);
        case Result::object:
            return result_obj;
    }
    return py::none();
}

// --- Context ------------------------------------------------------------------------------------

Context::Context(std::optional<py::iterable> features, std::optional<std::string> name) {
    loom_params_t params{};
    params.field_mask = LOOM_PARAM_FIELD_FEATURES;
    params.features = LOOM_FEATURE_TAG | LOOM_FEATURE_RMA | LOOM_FEATURE_AMO32 | LOOM_FEATURE_AMO64 |
                      LOOM_FEATURE_WAKEUP | LOOM_FEATURE_STREAM | LOOM_FEATURE_AM;
    if (features) {
        params.features = 0;
        for (py::handle f : *features) {
            const std::string s = py::str(f);
            if (s == "tag")
                params.features |= LOOM_FEATURE_TAG;
            else if (s == "rma")
                params.features |= LOOM_FEATURE_RMA;
            else if (s == "amo")
                params.features |= LOOM_FEATURE_AMO32 | LOOM_FEATURE_AMO64;
            else if (s == "wakeup")
                params.features |= LOOM_FEATURE_WAKEUP;
            else if (s == "stream")
                params.features |= LOOM_FEATURE_STREAM;
            else if (s == "am")
                params.features |= LOOM_FEATURE_AM;
            else
                throw py::value_error("unknown feature '" + s + "' (tag, am, stream, rma, amo, wakeup)");
        }
    }
    if (name) {
        params.field_mask |= LOOM_PARAM_FIELD_NAME;
        params.name = name->c_str();
    }
    check(loom_init(&params, &h), "loom_init");
}

Context::~Context() {
    try {
        close();  // collected: no mapping (each holds us) and so no view of one is left
    } catch (py::error_already_set& e) {
        e.discard_as_unraisable("loom: closing a collected context");
    }
}

loom_context_h Context::handle() const {
    if (h == nullptr) raise_status(LOOM_ERR_INVALID_PARAM, "the context is closed");
    return h;
}

void Context::close() {
    if (h == nullptr) return;
    for (MemoryHandle* mh : mappings) {
        if (mh->exports != 0) {  // refused before anything closes
            PyErr_SetString(PyExc_BufferError,
                            "cannot close a context while buffer views of its memory exist");
            throw py::error_already_set();
        }
    }
    while (!workers.empty()) (*workers.begin())->close();
    while (!mappings.empty()) (*mappings.begin())->close();
    loom_cleanup(h);
    h = nullptr;
}

// --- Worker -------------------------------------------------------------------------------------

Worker::Worker(Context& c, py::object ref) : ctx(&c), ctx_ref(std::move(ref)) {
    loom_worker_params_t params{};
    params.field_mask = LOOM_WORKER_PARAM_FIELD_THREAD_MODE;
    params.thread_mode = LOOM_THREAD_MODE_SINGLE;
    check(loom_worker_create(c.handle(), &params, &h), "loom_worker_create");
    completed = std::make_shared<ReqState>();
    completed->status = LOOM_OK;
    completed->owner = this;
    ctx->workers.insert(this);
}

Worker::~Worker() {
    close(true);
}

loom_worker_h Worker::handle() const {
    if (h == nullptr) raise_status(LOOM_ERR_INVALID_PARAM, "the worker is closed");
    return h;
}

void Worker::close(bool collected) {
    if (h == nullptr) return;
    // The asyncio reader (loom/__init__.py) goes first: its fd is about to close.
    if (!collected) {
        py::object self = py::cast(this, py::return_value_policy::reference);
        if (py::hasattr(self, "_aio")) {
            py::object aio = self.attr("_aio");
            if (!aio.is_none()) aio.attr("detach")();
        }
    }
    for (AmMessage* m : std::vector<AmMessage*>(kept.begin(), kept.end())) m->release();
    while (!listeners.empty()) (*listeners.begin())->close();
    while (!eps.empty()) {
        Endpoint* ep = eps.begin()->second;
        if (loom_status_ptr_t r = ep->close_handle(true); LOOM_PTR_IS_PTR(r)) loom_request_free(r);
    }
    // Operations still running: their callbacks must not run after this, and their memory
    // stays held until the worker (which may still touch it) is gone.
    std::vector<ReqPtr> running;
    for (ReqState* st : inflight) {
        running.push_back(st->self);
        loom_request_free(st->handle);
    }
    inflight.clear();
    loom_worker_destroy(h);
    h = nullptr;
    am_handlers.clear();
    for (ReqPtr& st : running) {
        st->handle = nullptr;
        st->worker = nullptr;
        complete(st.get(), LOOM_ERR_CANCELED);
    }
    completed->owner = nullptr;  // may outlive us in a Request a caller keeps
    Py_CLEAR(completed_obj);
    ctx->workers.erase(this);
}

void Worker::complete(ReqState* st, loom_status_t status) {
    st->status = status;
    st->handle = nullptr;
    st->buf.release();
    st->header.release();
    if (st->worker != nullptr) st->worker->inflight.erase(st);
    st->worker = nullptr;
    ReqPtr keep = std::move(st->self);  // the last reference may be this one
    if (st->future) {
        py::object fut = std::move(st->future);
        try {
            if (!fut.attr("done")().cast<bool>()) fut.attr("set_result")(py::none());
        } catch (py::error_already_set& e) {
            e.discard_as_unraisable("loom: waking an asyncio future");
        }
    }
}

unsigned Worker::progress() {
    loom_worker_h wh = handle();
    const unsigned n = loom_worker_progress(wh);
    if (callback_error) {
        py::error_already_set e = std::move(*callback_error);
        callback_error.reset();
        throw e;
    }
    return n;
}

unsigned Worker::progress_once() {
    return progress();
}

void Worker::run_callback(const py::object& fn, py::handle arg) {
    try {
        fn(arg);
    } catch (py::error_already_set& e) {
        if (!callback_error) callback_error.emplace(std::move(e));
    }
}

void Worker::run_callback(const py::object& fn, py::handle arg1, py::handle arg2) {
    try {
        fn(arg1, arg2);
    } catch (py::error_already_set& e) {
        if (!callback_error) callback_error.emplace(std::move(e));
    }
}

// --- Endpoint, Listener -------------------------------------------------------------------------

Endpoint::Endpoint(Worker& worker, py::object ref, py::object handler)
    : w(&worker), worker_ref(std::move(ref)), err_handler(std::move(handler)) {}

Endpoint::~Endpoint() {
    // Collected while open: close it gently (queued sends still go), without waiting.
    if (loom_status_ptr_t r = close_handle(false); LOOM_PTR_IS_PTR(r)) loom_request_free(r);
}

loom_ep_h Endpoint::handle() const {
    if (h == nullptr) raise_status(LOOM_ERR_INVALID_PARAM, "the endpoint is closed");
    return h;
}

loom_status_ptr_t Endpoint::close_handle(bool force, const loom_request_param_t* param) {
    if (h == nullptr) return nullptr;
    loom_ep_h eh = h;
    h = nullptr;
    if (auto it = w->eps.find(eh); it != w->eps.end() && it->second == this) w->eps.erase(it);
    if (!owned || w->h == nullptr) return nullptr;
    loom_request_param_t p = param != nullptr ? *param : loom_request_param_t{};
    p.op_attr_mask |= LOOM_OP_ATTR_FIELD_FLAGS;
    p.flags = force ? LOOM_EP_CLOSE_FLAG_FORCE : 0;
    return loom_ep_close_nbx(eh, &p);
}

Listener::Listener(Worker& worker, py::object ref, py::object cb)
    : w(&worker), worker_ref(std::move(ref)), on_connection(std::move(cb)) {}

Listener::~Listener() {
    close();
}

void Listener::close() {
    if (h == nullptr) return;
    loom_listener_destroy(h);
    h = nullptr;
    w->listeners.erase(this);
}

// --- MemoryHandle, AmMessage --------------------------------------------------------------------

MemoryHandle::MemoryHandle(Context& c, py::object ref) : ctx(&c), ctx_ref(std::move(ref)) {}

MemoryHandle::~MemoryHandle() {
    try {
        close();  // collected: every view held us, so none is left
    } catch (py::error_already_set& e) {
        e.discard_as_unraisable("loom: closing a collected memory handle");
    }
}

loom_mem_h MemoryHandle::handle() const {
    if (h == nullptr) raise_status(LOOM_ERR_INVALID_PARAM, "the memory handle is closed");
    return h;
}

void MemoryHandle::close() {
    if (h == nullptr) return;
    if (exports != 0) {
        PyErr_Format(PyExc_BufferError, "cannot close a memory handle while %u buffer view(s) of it exist",
                     exports);
        throw py::error_already_set();
    }
    const loom_status_t s = loom_mem_unmap(ctx->h, h);
    if (s != LOOM_OK) std::fprintf(stderr, "loom: unmapping %p failed: %s\n", address, loom_status_string(s));
    h = nullptr;
    buf.release();
    ctx->mappings.erase(this);
}

AmMessage::~AmMessage() {
    release();
}

void AmMessage::release() {
    if (desc == nullptr) return;
    if (w != nullptr && w->h != nullptr) loom_am_data_release(w->h, desc);
    desc = nullptr;
    if (w != nullptr) w->kept.erase(this);
}

}  // namespace loompy
