/**
 * The Python bindings' objects (docs/python.md), over Loom's public C API only. Each
 * Python object owns one Loom handle; a parent keeps the raw pointers of what it made
 * that is still open, so that closing it closes them first (a worker its endpoints, a
 * context its workers), while each child holds a strong reference to its parent's
 * Python object, so a parent is never collected before its children.
 *
 * Everything here runs with the GIL held. Loom calls back into these objects only from
 * loom_worker_progress (completions, active messages, connection requests, endpoint
 * failures), which the bindings call with the GIL held too; only Worker::wait sleeps
 * without it.
 */
#ifndef LOOM_PY_CORE_H
#define LOOM_PY_CORE_H

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <loom/ucp.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace loompy {

namespace py = pybind11;

/** Sets loom/__init__.py's factory of exceptions: (code, what) -> a LoomError. */
void set_error_factory(py::object factory);

/** Raises the loom.LoomError subclass for @p status (from loom/__init__.py's factory). */
[[noreturn]] void raise_status(loom_status_t status, const char* what);

/** Raises unless @p status is LOOM_OK. */
inline void check(loom_status_t status, const char* what) {
    if (status != LOOM_OK) raise_status(status, what);
}

/** "LOOM_ERR_TIMED_OUT" for LOOM_ERR_TIMED_OUT; "LOOM_STATUS(-99)" for an unknown code. */
std::string status_name(int code);

/** A Python object's buffer export, held while Loom may touch the memory. */
class Buffer {
public:
    Buffer() = default;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    ~Buffer() { release(); }

    /** Exports @p obj's contiguous bytes (writable ones for a receive); raises BufferError. */
    void acquire(py::handle obj, bool writable);
    void release() {
        if (held_) {
            PyBuffer_Release(&view_);
            held_ = false;
        }
    }
    void* data() const { return view_.buf; }
    std::size_t size() const { return static_cast<std::size_t>(view_.len); }

private:
    Py_buffer view_{};
    bool held_ = false;
};

class Worker;

/** One operation's completion: what a Request object (and an asyncio future) reads. */
struct ReqState {
    enum class Result : std::uint8_t { none, tag_info, length, value, object };

    Worker* worker = nullptr;  ///< null once the operation completed or its worker closed
    Worker* owner = nullptr;   ///< Worker::completed only: its worker (null once closed)
    void* handle = nullptr;    ///< Loom's request while it runs
    loom_status_t status = LOOM_INPROGRESS;
    Result kind = Result::none;
    Buffer buf;                   ///< the operation's memory, held until it completes
    Buffer header;                ///< an active message's header, held as long
    loom_tag_recv_info_t info{};  ///< a tagged receive's sender tag and length
    std::size_t length = 0;       ///< a stream or active-message receive's length
    std::uint64_t operand = 0;    ///< an atomic operation's value (compared, for cswap)
    std::uint64_t reply = 0;      ///< a fetching atomic's previous value (swapped in, for cswap)
    std::uint64_t value_mask = ~0ull;
    py::object result_obj;           ///< Result::object: e.g. the buffer an AM was received into
    py::object future;               ///< an asyncio future awaiting completion
    std::shared_ptr<ReqState> self;  ///< keeps the state alive while Loom runs it

    bool done() const { return status != LOOM_INPROGRESS; }
    /** The Python result, or raises the operation's error. */
    py::object result() const;
};

using ReqPtr = std::shared_ptr<ReqState>;

class Context;
class Endpoint;
class Listener;
class AmMessage;

/** loom_worker_h, and the bookkeeping of what runs on it. */
class Worker {
public:
    Worker(Context& ctx, py::object ctx_ref);
    ~Worker();
    Worker(const Worker&) = delete;
    Worker& operator=(const Worker&) = delete;

    loom_worker_h handle() const;
    /** Closes what runs on it, then the worker; @p collected: from the destructor (no Python object to
     * detach). */
    void close(bool collected = false);
    unsigned progress();
    /** Progresses once from Request::wait: raises what a Python callback raised. */
    unsigned progress_once();

    /** Starts an operation with @p st as its completion (callbacks set in @p param). */
    template <typename Call>
    ReqPtr start(ReqPtr st, loom_request_param_t& param, Call&& call, const char* what);
    /** Loom completed @p st (from a callback): records it, releases its memory, wakes its future. */
    static void complete(ReqState* st, loom_status_t status);
    /** Runs a Python callback from inside progress; its exception is raised by progress. */
    void run_callback(const py::object& fn, py::handle arg);
    void run_callback(const py::object& fn, py::handle arg1, py::handle arg2);

    Context* ctx = nullptr;
    py::object ctx_ref;
    loom_worker_h h = nullptr;
    std::unordered_set<ReqState*> inflight;
    std::unordered_map<loom_ep_h, Endpoint*> eps;
    std::unordered_set<Listener*> listeners;
    std::unordered_set<AmMessage*> kept;  ///< rendezvous active messages not received yet
    struct AmEntry {
        Worker* w;
        unsigned id;
        py::object fn;
    };
    std::map<unsigned, std::unique_ptr<AmEntry>> am_handlers;
    std::optional<py::error_already_set> callback_error;
    /**
     * The one request of every operation of this worker that completed inside its call
     * with nothing to return (most small sends): returned instead of a new one, so that
     * the common case allocates nothing; completed_obj is its Python object, made once.
     */
    ReqPtr completed;
    PyObject* completed_obj = nullptr;
    bool aio_attached = false;  ///< its asyncio reader is registered (loom/__init__.py)
};

/** loom_context_h, with the workers and mappings to close before it. */
class Context {
public:
    Context(std::optional<py::iterable> features, std::optional<std::string> name);
    ~Context();
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;
    loom_context_h handle() const;
    void close();

    loom_context_h h = nullptr;
    std::unordered_set<Worker*> workers;
    std::unordered_set<class MemoryHandle*> mappings;
};

/** loom_ep_h; its error handler runs from progress. */
class Endpoint {
public:
    Endpoint(Worker& w, py::object worker_ref, py::object err_handler);
    ~Endpoint();
    Endpoint(const Endpoint&) = delete;
    Endpoint& operator=(const Endpoint&) = delete;
    loom_ep_h handle() const;
    /**
     * Closes it in Loom without waiting (@p param: the caller's completion, or nullptr);
     * returns what loom_ep_close_nbx returned (NULL once it was closed already).
     */
    loom_status_ptr_t close_handle(bool force, const loom_request_param_t* param = nullptr);

    Worker* w;
    py::object worker_ref;
    py::object err_handler;
    loom_ep_h h = nullptr;
    bool owned = true;  ///< false: a reply endpoint we did not create
};

/** loom_listener_h. */
class Listener {
public:
    Listener(Worker& w, py::object worker_ref, py::object on_connection);
    ~Listener();
    Listener(const Listener&) = delete;
    Listener& operator=(const Listener&) = delete;
    void close();

    Worker* w;
    py::object worker_ref;
    py::object on_connection;
    loom_listener_h h = nullptr;
};

/** A mapping, of a Python buffer (held) or of memory Loom allocated. */
class MemoryHandle {
public:
    MemoryHandle(Context& ctx, py::object ctx_ref);
    ~MemoryHandle();
    MemoryHandle(const MemoryHandle&) = delete;
    MemoryHandle& operator=(const MemoryHandle&) = delete;
    loom_mem_h handle() const;
    void close();

    Context* ctx;
    py::object ctx_ref;
    Buffer buf;
    loom_mem_h h = nullptr;
    void* address = nullptr;
    std::size_t length = 0;
    unsigned exports = 0;  ///< buffer views of it still alive (close refuses then)
};

/** An active message handed to a Python handler. */
class AmMessage {
public:
    ~AmMessage();
    void release();

    Worker* w = nullptr;
    py::object worker_ref;
    py::bytes header;
    py::object data;      ///< bytes (eager) or None (rendezvous)
    py::object reply_ep;  ///< Endpoint or None
    std::size_t length = 0;
    void* desc = nullptr;  ///< a rendezvous message's descriptor until received or released
    bool rndv = false;
};

template <typename Call>
ReqPtr Worker::start(ReqPtr st, loom_request_param_t& param, Call&& call, const char* what) {
    param.op_attr_mask |= LOOM_OP_ATTR_FIELD_USER_DATA;
    param.user_data = st.get();
    loom_status_ptr_t r = call(param);
    if (LOOM_PTR_IS_PTR(r)) {
        st->worker = this;
        st->handle = r;
        st->self = st;
        inflight.insert(st.get());
        return st;
    }
    st->buf.release();
    st->header.release();
    st->status = LOOM_PTR_STATUS(r);
    if (st->status != LOOM_OK) raise_status(st->status, what);
    return st->kind == ReqState::Result::none ? completed : st;
}

}  // namespace loompy

#endif  // LOOM_PY_CORE_H
