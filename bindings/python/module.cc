/**
 * loom._loom: the Python classes of docs/python.md over Loom's C API. Every operation
 * starts one _nbx call on the caller's buffer in place (its buffer export is held until
 * the operation completes) and returns a Request; loom/__init__.py adds the exceptions
 * and asyncio on top.
 */
#include "core.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace loompy {

namespace {

// --- completions (called by Loom from loom_worker_progress) -------------------------------------

void on_send_done(void* request, loom_status_t status, void* user_data) {
    loom_request_free(request);
    Worker::complete(static_cast<ReqState*>(user_data), status);
}

void on_tag_recv_done(void* request, loom_status_t status, const loom_tag_recv_info_t* info,
                      void* user_data) {
    auto* st = static_cast<ReqState*>(user_data);
    if (info != nullptr) st->info = *info;
    loom_request_free(request);
    Worker::complete(st, status);
}

void on_length_done(void* request, loom_status_t status, std::size_t length, void* user_data) {
    auto* st = static_cast<ReqState*>(user_data);
    st->length = length;
    loom_request_free(request);
    Worker::complete(st, status);
}

/** A send-like operation's parameters: completion callback and optional deadline. */
loom_request_param_t send_param(std::optional<double> deadline) {
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_CALLBACK;
    p.cb.send = on_send_done;
    if (deadline) {
        if (*deadline < 0) throw py::value_error("deadline must be >= 0 seconds");
        p.op_attr_mask |= LOOM_OP_ATTR_FIELD_DEADLINE;
        p.deadline_ns = static_cast<std::uint64_t>(*deadline * 1e9);
    }
    return p;
}

// --- addresses ----------------------------------------------------------------------------------

/** host and port to a socket address (IPv4 or IPv6, by name or number). */
sockaddr_storage resolve(const std::string& host, unsigned port, bool passive, socklen_t* len) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    addrinfo* res = nullptr;
    const std::string service = std::to_string(port);
    if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res); rc != 0) {
        raise_status(LOOM_ERR_INVALID_ADDRESS, ("cannot resolve " + host + ": " + gai_strerror(rc)).c_str());
    }
    sockaddr_storage ss{};
    std::memcpy(&ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return ss;
}

py::tuple host_port(const sockaddr_storage& ss) {
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<const sockaddr*>(&ss), sizeof(ss), host, sizeof(host), serv,
                    sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        raise_status(LOOM_ERR_INVALID_ADDRESS, "cannot print a socket address");
    }
    return py::make_tuple(std::string(host), std::stoi(serv));
}

// --- endpoints ----------------------------------------------------------------------------------

void on_ep_error(void* arg, loom_ep_h eh, loom_status_t status) {
    auto* w = static_cast<Worker*>(arg);
    auto it = w->eps.find(eh);
    if (it == w->eps.end() || it->second->err_handler.is_none()) return;
    Endpoint* ep = it->second;
    w->run_callback(ep->err_handler, py::cast(ep, py::return_value_policy::reference),
                    py::str(status_name(status)));
}

/** An open endpoint of @p w, from @p params (to which the error handling is added). */
py::object make_endpoint(Worker& w, py::object err_handler, loom_ep_params_t& params, const char* what) {
    loom_worker_h wh = w.handle();
    auto ep = std::make_unique<Endpoint>(w, py::cast(&w, py::return_value_policy::reference),
                                         std::move(err_handler));
    params.field_mask |= LOOM_EP_PARAM_FIELD_ERR_HANDLING_MODE | LOOM_EP_PARAM_FIELD_ERR_HANDLER;
    params.err_mode = LOOM_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = on_ep_error;
    params.err_handler.arg = &w;
    check(loom_ep_create(wh, &params, &ep->h), what);
    w.eps[ep->h] = ep.get();
    return py::cast(std::move(ep));
}

py::object connect_address(Worker& w, py::buffer address, py::object err_handler) {
    Buffer addr;
    addr.acquire(address, false);
    loom_ep_params_t params{};
    params.field_mask = LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS;
    params.address = addr.data();
    return make_endpoint(w, std::move(err_handler), params, "connecting to a worker address");
}

py::object connect_sockaddr(Worker& w, const std::string& host, unsigned port, py::object err_handler) {
    socklen_t len = 0;
    sockaddr_storage ss = resolve(host, port, false, &len);
    loom_ep_params_t params{};
    params.field_mask = LOOM_EP_PARAM_FIELD_SOCK_ADDR;
    params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&ss);
    params.sockaddr.addrlen = len;
    return make_endpoint(w, std::move(err_handler), params, ("connecting to " + host).c_str());
}

// --- listeners ----------------------------------------------------------------------------------

/** A connection request handed to on_connection: accepted, rejected, or rejected when collected. */
class ConnRequest {
public:
    ConnRequest(Listener& l, loom_conn_request_h r)
        : listener(&l), listener_ref(py::cast(&l, py::return_value_policy::reference)), h(r) {}
    ~ConnRequest() {
        if (h != nullptr && listener->h != nullptr) (void)loom_listener_reject(listener->h, h);
    }
    loom_conn_request_h take() {
        if (h == nullptr)
            raise_status(LOOM_ERR_INVALID_PARAM, "the connection request was accepted or rejected");
        if (listener->h == nullptr) raise_status(LOOM_ERR_INVALID_PARAM, "the listener is closed");
        loom_conn_request_h r = h;
        h = nullptr;
        return r;
    }

    Listener* listener;
    py::object listener_ref;
    loom_conn_request_h h;
};

void on_conn_request(loom_conn_request_h request, void* arg) {
    auto* l = static_cast<Listener*>(arg);
    py::object conn = py::cast(std::make_unique<ConnRequest>(*l, request));
    l->w->run_callback(l->on_connection, conn);
}

py::object listen_on(Worker& w, py::object on_connection, const std::string& host, unsigned port) {
    loom_worker_h wh = w.handle();
    socklen_t len = 0;
    sockaddr_storage ss = resolve(host, port, true, &len);
    auto l = std::make_unique<Listener>(w, py::cast(&w, py::return_value_policy::reference),
                                        std::move(on_connection));
    loom_listener_params_t params{};
    params.field_mask = LOOM_LISTENER_PARAM_FIELD_SOCK_ADDR | LOOM_LISTENER_PARAM_FIELD_CONN_HANDLER;
    params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&ss);
    params.sockaddr.addrlen = len;
    params.conn_handler.cb = on_conn_request;
    params.conn_handler.arg = l.get();
    check(loom_listener_create(wh, &params, &l->h), ("listening on " + host).c_str());
    w.listeners.insert(l.get());
    return py::cast(std::move(l));
}

sockaddr_storage listener_address(Listener& l) {
    if (l.h == nullptr) raise_status(LOOM_ERR_INVALID_PARAM, "the listener is closed");
    sockaddr_storage ss{};
    check(loom_listener_query(l.h, &ss), "loom_listener_query");
    return ss;
}

// --- tagged messages ----------------------------------------------------------------------------

ReqPtr tag_send(Endpoint& ep, py::handle buf, loom_tag_t tag, bool sync, std::optional<double> deadline) {
    loom_ep_h eh = ep.handle();
    auto st = std::make_shared<ReqState>();
    st->buf.acquire(buf, false);
    loom_request_param_t p = send_param(deadline);
    return ep.w->start(
        st, p,
        [&](loom_request_param_t& pp) {
            return sync ? loom_tag_send_sync_nbx(eh, st->buf.data(), st->buf.size(), tag, &pp)
                        : loom_tag_send_nbx(eh, st->buf.data(), st->buf.size(), tag, &pp);
        },
        "tagged send");
}

ReqPtr tag_recv(Worker& w, py::handle buf, loom_tag_t tag, loom_tag_t mask, std::optional<double> deadline) {
    loom_worker_h wh = w.handle();
    auto st = std::make_shared<ReqState>();
    st->kind = ReqState::Result::tag_info;
    st->buf.acquire(buf, true);
    loom_request_param_t p = send_param(deadline);
    p.op_attr_mask |= LOOM_OP_ATTR_FIELD_RECV_INFO;
    p.cb.recv = on_tag_recv_done;
    p.recv_info.tag_recv = &st->info;
    return w.start(
        st, p,
        [&](loom_request_param_t& pp) {
            return loom_tag_recv_nbx(wh, st->buf.data(), st->buf.size(), tag, mask, &pp);
        },
        "tagged receive");
}

/** A message taken out of the unexpected queue by probe(remove=True). */
struct TagMessage {
    loom_tag_message_h h = nullptr;
    loom_tag_t tag = 0;
    std::size_t length = 0;
};

py::object probe(Worker& w, loom_tag_t tag, loom_tag_t mask, bool remove) {
    loom_tag_recv_info_t info{};
    loom_tag_message_h m = loom_tag_probe_nb(w.handle(), tag, mask, remove ? 1 : 0, &info);
    if (m == nullptr) return py::none();
    return py::cast(TagMessage{remove ? m : nullptr, info.sender_tag, info.length});
}

ReqPtr recv_message(Worker& w, py::handle buf, TagMessage& msg) {
    loom_worker_h wh = w.handle();
    if (msg.h == nullptr)
        raise_status(LOOM_ERR_INVALID_PARAM, "the message was not removed by probe, or was received");
    auto st = std::make_shared<ReqState>();
    st->kind = ReqState::Result::tag_info;
    st->info = {msg.tag, msg.length};
    st->buf.acquire(buf, true);
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_CALLBACK;
    p.cb.recv = on_tag_recv_done;
    loom_tag_message_h m = msg.h;
    msg.h = nullptr;
    return w.start(
        st, p,
        [&](loom_request_param_t& pp) {
            return loom_tag_msg_recv_nbx(wh, st->buf.data(), st->buf.size(), m, &pp);
        },
        "receiving a probed message");
}

// --- active messages ----------------------------------------------------------------------------

loom_status_t on_am(void* arg, const void* header, std::size_t header_length, void* data, std::size_t length,
                    const loom_am_recv_param_t* param) {
    auto* entry = static_cast<Worker::AmEntry*>(arg);
    Worker* w = entry->w;
    auto msg = std::make_unique<AmMessage>();
    msg->w = w;
    msg->worker_ref = py::cast(w, py::return_value_policy::reference);
    msg->header = py::bytes(static_cast<const char*>(header), header_length);
    msg->length = length;
    if (param->recv_attr & LOOM_AM_RECV_ATTR_FLAG_RNDV) {
        msg->rndv = true;
        msg->desc = data;
        msg->data = py::none();
    } else {
        msg->data = py::bytes(static_cast<const char*>(data), length);
    }
    msg->reply_ep = py::none();
    if (param->recv_attr & LOOM_AM_RECV_ATTR_FIELD_REPLY_EP) {
        if (auto it = w->eps.find(param->reply_ep); it != w->eps.end()) {
            msg->reply_ep = py::cast(it->second, py::return_value_policy::reference);
        } else {  // an endpoint Loom made for the sender: usable, but not ours to close
            auto ep = std::make_unique<Endpoint>(*w, msg->worker_ref, py::none());
            ep->h = param->reply_ep;
            ep->owned = false;
            msg->reply_ep = py::cast(std::move(ep));
        }
    }
    AmMessage* raw = msg.get();
    py::object obj = py::cast(std::move(msg));
    const py::object fn = entry->fn;  // the handler may replace itself
    w->run_callback(fn, obj);
    if (raw->desc == nullptr) return LOOM_OK;
    if (obj.ref_count() == 1) {  // nobody kept it: dropped, its sender completes
        raw->desc = nullptr;
        return LOOM_OK;
    }
    w->kept.insert(raw);
    return LOOM_INPROGRESS;
}

void set_am_handler(Worker& w, unsigned id, py::object fn) {
    loom_worker_h wh = w.handle();
    loom_am_handler_param_t p{};
    p.field_mask =
        LOOM_AM_HANDLER_PARAM_FIELD_ID | LOOM_AM_HANDLER_PARAM_FIELD_CB | LOOM_AM_HANDLER_PARAM_FIELD_ARG;
    p.id = id;
    std::unique_ptr<Worker::AmEntry> entry;
    if (!fn.is_none()) {
        entry = std::make_unique<Worker::AmEntry>(Worker::AmEntry{&w, id, std::move(fn)});
        p.cb = on_am;
        p.arg = entry.get();
    }
    check(loom_worker_set_am_recv_handler(wh, &p), "setting an active message handler");
    if (entry) {
        w.am_handlers[id] = std::move(entry);
    } else {
        w.am_handlers.erase(id);
    }
}

ReqPtr am_send(Endpoint& ep, unsigned id, py::handle header, py::handle data, bool reply, bool eager,
               bool rndv, std::optional<double> deadline) {
    loom_ep_h eh = ep.handle();
    auto st = std::make_shared<ReqState>();
    st->header.acquire(header, false);
    st->buf.acquire(data, false);
    loom_request_param_t p = send_param(deadline);
    p.op_attr_mask |= LOOM_OP_ATTR_FIELD_FLAGS;
    p.flags = (reply ? LOOM_AM_SEND_FLAG_REPLY : 0) | (eager ? LOOM_AM_SEND_FLAG_EAGER : 0) |
              (rndv ? LOOM_AM_SEND_FLAG_RNDV : 0);
    return ep.w->start(
        st, p,
        [&](loom_request_param_t& pp) {
            return loom_am_send_nbx(eh, id, st->header.data(), st->header.size(), st->buf.data(),
                                    st->buf.size(), &pp);
        },
        "active message send");
}

ReqPtr am_receive(AmMessage& m, py::object buf) {
    if (buf.is_none()) {
        buf = py::reinterpret_steal<py::object>(
            PyByteArray_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(m.length)));
        if (!buf) throw py::error_already_set();
    }
    auto st = std::make_shared<ReqState>();
    st->kind = ReqState::Result::object;
    st->result_obj = buf;
    if (!m.rndv) {  // eager: the data came with the message
        Buffer dst;
        dst.acquire(buf, true);
        if (dst.size() < m.length) raise_status(LOOM_ERR_MESSAGE_TRUNCATED, "receiving an active message");
        if (m.length != 0) std::memcpy(dst.data(), PyBytes_AS_STRING(m.data.ptr()), m.length);
        st->length = m.length;
        st->status = LOOM_OK;
        return st;
    }
    if (m.desc == nullptr)
        raise_status(LOOM_ERR_INVALID_PARAM, "the active message was received or released");
    Worker& w = *m.w;
    loom_worker_h wh = w.handle();
    st->buf.acquire(buf, true);
    loom_request_param_t p{};
    p.op_attr_mask = LOOM_OP_ATTR_FIELD_CALLBACK | LOOM_OP_ATTR_FIELD_RECV_INFO;
    p.cb.am = on_length_done;
    p.recv_info.length = &st->length;
    void* desc = m.desc;
    m.desc = nullptr;
    w.kept.erase(&m);
    return w.start(
        st, p,
        [&](loom_request_param_t& pp) {
            return loom_am_recv_data_nbx(wh, desc, st->buf.data(), st->buf.size(), &pp);
        },
        "receiving an active message");
}

// --- streams ------------------------------------------------------------------------------------

ReqPtr stream_send(Endpoint& ep, py::handle buf, std::optional<double> deadline) {
    loom_ep_h eh = ep.handle();
    auto st = std::make_shared<ReqState>();
    st->buf.acquire(buf, false);
    loom_request_param_t p = send_param(deadline);
    return ep.w->start(
        st, p,
        [&](loom_request_param_t& pp) {
            return loom_stream_send_nbx(eh, st->buf.data(), st->buf.size(), &pp);
        },
        "stream send");
}

ReqPtr stream_recv(Endpoint& ep, py::handle buf, bool waitall, std::optional<double> deadline) {
    loom_ep_h eh = ep.handle();
    auto st = std::make_shared<ReqState>();
    st->kind = ReqState::Result::length;
    st->buf.acquire(buf, true);
    loom_request_param_t p = send_param(deadline);
    p.cb.stream = on_length_done;
    p.op_attr_mask |= LOOM_OP_ATTR_FIELD_FLAGS;
    p.flags = waitall ? LOOM_STREAM_RECV_FLAG_WAITALL : 0;
    return ep.w->start(
        st, p,
        [&](loom_request_param_t& pp) {
            return loom_stream_recv_nbx(eh, st->buf.data(), st->buf.size(), &st->length, &pp);
        },
        "stream receive");
}

// --- memory and RMA -----------------------------------------------------------------------------

py::object mem_map(Context& ctx, py::object buf, std::optional<std::size_t> length) {
    loom_context_h ch = ctx.handle();
    auto mh = std::make_unique<MemoryHandle>(ctx, py::cast(&ctx, py::return_value_policy::reference));
    loom_mem_map_params_t params{};
    params.field_mask = LOOM_MEM_MAP_PARAM_FIELD_LENGTH | LOOM_MEM_MAP_PARAM_FIELD_PROT;
    params.prot = LOOM_MEM_MAP_PROT_LOCAL_READ | LOOM_MEM_MAP_PROT_LOCAL_WRITE |
                  LOOM_MEM_MAP_PROT_REMOTE_READ | LOOM_MEM_MAP_PROT_REMOTE_WRITE |
                  LOOM_MEM_MAP_PROT_REMOTE_ATOMIC;
    if (!buf.is_none()) {
        mh->buf.acquire(buf, true);
        params.field_mask |= LOOM_MEM_MAP_PARAM_FIELD_ADDRESS;
        params.address = mh->buf.data();
        params.length = length.value_or(mh->buf.size());
        if (params.length > mh->buf.size()) throw py::value_error("length is beyond the buffer");
    } else {
        if (!length) throw py::value_error("mem_map needs a buffer or a length");
        params.field_mask |= LOOM_MEM_MAP_PARAM_FIELD_FLAGS;
        params.flags = LOOM_MEM_MAP_ALLOCATE;
        params.length = *length;
    }
    check(loom_mem_map(ch, &params, &mh->h), "loom_mem_map");
    loom_mem_attr_t attr{};
    attr.field_mask = LOOM_MEM_ATTR_FIELD_ADDRESS | LOOM_MEM_ATTR_FIELD_LENGTH;
    check(loom_mem_query(mh->h, &attr), "loom_mem_query");
    mh->address = attr.address;
    mh->length = attr.length;
    ctx.mappings.insert(mh.get());
    return py::cast(std::move(mh));
}

py::bytes pack_rkey(MemoryHandle& mh) {
    loom_mem_h h = mh.handle();
    void* packed = nullptr;
    std::size_t size = 0;
    check(loom_rkey_pack(mh.ctx->h, h, &packed, &size), "loom_rkey_pack");
    py::bytes out(static_cast<const char*>(packed), size);
    loom_rkey_buffer_release(packed);
    return out;
}

/** A peer's packed key, unpacked for one endpoint. */
class RemoteKey {
public:
    RemoteKey(py::object ep) : ep_ref(std::move(ep)) {}
    ~RemoteKey() { close(); }
    void close() {
        if (h != nullptr) loom_rkey_destroy(h);
        h = nullptr;
    }
    loom_rkey_h handle() const {
        if (h == nullptr) raise_status(LOOM_ERR_INVALID_PARAM, "the remote key is closed");
        return h;
    }

    py::object ep_ref;
    loom_rkey_h h = nullptr;
};

py::object unpack_rkey(Endpoint& ep, py::buffer packed) {
    loom_ep_h eh = ep.handle();
    Buffer b;
    b.acquire(packed, false);
    auto rk = std::make_unique<RemoteKey>(py::cast(&ep, py::return_value_policy::reference));
    check(loom_ep_rkey_unpack(eh, b.data(), b.size(), &rk->h), "loom_ep_rkey_unpack");
    return py::cast(std::move(rk));
}

ReqPtr rma(Endpoint& ep, py::handle buf, std::uint64_t remote_addr, RemoteKey& rkey, bool is_put,
           std::optional<double> deadline) {
    loom_ep_h eh = ep.handle();
    loom_rkey_h rh = rkey.handle();
    auto st = std::make_shared<ReqState>();
    st->buf.acquire(buf, !is_put);
    loom_request_param_t p = send_param(deadline);
    return ep.w->start(
        st, p,
        [&](loom_request_param_t& pp) {
            return is_put ? loom_put_nbx(eh, st->buf.data(), st->buf.size(), remote_addr, rh, &pp)
                          : loom_get_nbx(eh, st->buf.data(), st->buf.size(), remote_addr, rh, &pp);
        },
        is_put ? "put" : "get");
}

ReqPtr atomic(Endpoint& ep, const std::string& op, std::uint64_t value, std::uint64_t remote_addr,
              RemoteKey& rkey, bool fetch, std::optional<std::uint64_t> compare, unsigned size,
              std::optional<double> deadline) {
    static const std::map<std::string, loom_atomic_op_t> kOps = {
        {"add", LOOM_ATOMIC_OP_ADD}, {"swap", LOOM_ATOMIC_OP_SWAP}, {"cswap", LOOM_ATOMIC_OP_CSWAP},
        {"and", LOOM_ATOMIC_OP_AND}, {"or", LOOM_ATOMIC_OP_OR},     {"xor", LOOM_ATOMIC_OP_XOR}};
    auto it = kOps.find(op);
    if (it == kOps.end())
        throw py::value_error("unknown atomic operation '" + op + "' (add, swap, cswap, and, or, xor)");
    if (size != 4 && size != 8) throw py::value_error("atomic size must be 4 or 8 bytes");
    if (it->second == LOOM_ATOMIC_OP_CSWAP && !compare) throw py::value_error("cswap needs compare=");
    loom_ep_h eh = ep.handle();
    loom_rkey_h rh = rkey.handle();
    auto st = std::make_shared<ReqState>();
    st->kind = ReqState::Result::value;
    st->value_mask = size == 4 ? 0xffffffffull : ~0ull;
    fetch = fetch || it->second == LOOM_ATOMIC_OP_SWAP || it->second == LOOM_ATOMIC_OP_CSWAP;
    if (!fetch) st->kind = ReqState::Result::none;
    // As UCX's: cswap compares with the operand and swaps in what the reply buffer holds.
    if (it->second == LOOM_ATOMIC_OP_CSWAP) {
        st->operand = *compare;
        st->reply = value;
    } else {
        st->operand = value;
    }
    if (size == 4) {  // the 32-bit values sit in the first bytes (little endian)
        st->operand &= 0xffffffffull;
        st->reply &= 0xffffffffull;
    }
    loom_request_param_t p = send_param(deadline);
    p.op_attr_mask |= LOOM_OP_ATTR_FIELD_DATATYPE;
    p.datatype = loom_dt_make_contig(size);
    if (fetch) {
        p.op_attr_mask |= LOOM_OP_ATTR_FIELD_REPLY_BUFFER;
        p.reply_buffer = &st->reply;
    }
    return ep.w->start(
        st, p,
        [&](loom_request_param_t& pp) {
            return loom_atomic_op_nbx(eh, it->second, &st->operand, 1, remote_addr, rh, &pp);
        },
        "atomic operation");
}

// --- flush, close -------------------------------------------------------------------------------

ReqPtr ep_flush(Endpoint& ep, std::optional<double> deadline) {
    loom_ep_h eh = ep.handle();
    auto st = std::make_shared<ReqState>();
    loom_request_param_t p = send_param(deadline);
    return ep.w->start(
        st, p, [&](loom_request_param_t& pp) { return loom_ep_flush_nbx(eh, &pp); }, "endpoint flush");
}

ReqPtr worker_flush(Worker& w, std::optional<double> deadline) {
    loom_worker_h wh = w.handle();
    auto st = std::make_shared<ReqState>();
    loom_request_param_t p = send_param(deadline);
    return w.start(
        st, p, [&](loom_request_param_t& pp) { return loom_worker_flush_nbx(wh, &pp); }, "worker flush");
}

ReqPtr ep_close(Endpoint& ep, bool force, std::optional<double> deadline) {
    auto st = std::make_shared<ReqState>();
    loom_request_param_t p = send_param(deadline);
    return ep.w->start(
        st, p, [&](loom_request_param_t& pp) { return ep.close_handle(force, &pp); }, "endpoint close");
}

// --- requests -----------------------------------------------------------------------------------

py::object request_wait(ReqState& st, std::optional<double> timeout) {
    if (!st.done()) {
        Worker* w = st.worker;
        py::object keep = py::cast(w, py::return_value_policy::reference);  // not collected meanwhile
        using clock = std::chrono::steady_clock;
        const auto end = timeout ? clock::now() + std::chrono::duration_cast<clock::duration>(
                                                      std::chrono::duration<double>(*timeout))
                                 : clock::time_point::max();
        for (unsigned spins = 1; !st.done(); ++spins) {
            w->progress();
            if ((spins & 1023) == 0) {
                if (PyErr_CheckSignals() != 0) throw py::error_already_set();
                if (timeout && clock::now() > end) raise_status(LOOM_ERR_TIMED_OUT, "waiting for a request");
            }
        }
    }
    return st.result();
}

/** Progresses until @p st completes or @p budget_ns passed: asyncio's await before it sleeps. */
bool request_spin(ReqState& st, double budget_us) {
    if (st.done() || budget_us <= 0) return st.done();
    Worker* w = st.worker;
    py::object keep = py::cast(w, py::return_value_policy::reference);
    using clock = std::chrono::steady_clock;
    const auto end = clock::now() + std::chrono::duration_cast<clock::duration>(
                                        std::chrono::duration<double, std::micro>(budget_us));
    for (unsigned spins = 1; !st.done(); ++spins) {
        w->progress();
        if ((spins & 15) == 0 && clock::now() > end) break;
    }
    return st.done();
}

py::object send_wait(Endpoint& ep, py::handle buf, loom_tag_t tag, bool sync, std::optional<double> timeout) {
    ReqPtr st = tag_send(ep, buf, tag, sync, std::nullopt);
    return request_wait(*st, timeout);
}

py::object recv_wait(Worker& w, py::handle buf, loom_tag_t tag, loom_tag_t mask,
                     std::optional<double> timeout) {
    ReqPtr st = tag_recv(w, buf, tag, mask, std::nullopt);
    return request_wait(*st, timeout);
}

py::object worker_of(const ReqState& st) {
    if (st.worker == nullptr) return py::none();
    return py::cast(st.worker, py::return_value_policy::reference);
}

// --- fast calls ---------------------------------------------------------------------------------
//
// pybind11's dispatcher costs ~150 ns a call here (argument casters, overload search); a
// ping-pong makes two calls per message, as much as Loom's own shm latency. The calls of a
// tight loop are therefore also plain CPython methods (METH_FASTCALL): positional
// arguments only, parsed by hand; any other call (keywords, defaults spelled out) goes on
// to the pybind11 method of the same name, kept as the fallback.

template <typename T>
T* self_of(PyObject* self) {
    // A method descriptor of the class only ever gets instances of it.
    return reinterpret_cast<py::detail::instance*>(self)->get_value_and_holder().value_ptr<T>();
}

/** Runs @p body, turning the C++ exceptions of the shared code into a Python error. */
template <typename Body>
PyObject* guarded(Body&& body) {
    try {
        return body();
    } catch (py::error_already_set& e) {
        e.restore();
    } catch (py::builtin_exception& e) {
        e.set_error();
    } catch (const std::exception& e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
    }
    return nullptr;
}

/** The pybind11 methods the fast calls fall back to, by name. */
std::map<std::string, PyObject*> g_fallback;

PyObject* fall_back(const char* name, PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                    PyObject* kwnames) {
    PyObject* fn = g_fallback.at(name);
    const Py_ssize_t nkw = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
    std::vector<PyObject*> all(static_cast<std::size_t>(1 + nargs + nkw));
    all[0] = self;
    for (Py_ssize_t i = 0; i < nargs + nkw; ++i) all[static_cast<std::size_t>(1 + i)] = args[i];
    return PyObject_Vectorcall(fn, all.data(), static_cast<std::size_t>(1 + nargs), kwnames);
}

bool tag_arg(PyObject* obj, loom_tag_t* tag) {
    *tag = PyLong_AsUnsignedLongLong(obj);
    return !(*tag == static_cast<loom_tag_t>(-1) && PyErr_Occurred());
}

PyObject* request_object(Worker& w, ReqPtr st) {
    if (st == w.completed) {
        if (w.completed_obj == nullptr) w.completed_obj = py::cast(st).release().ptr();
        Py_INCREF(w.completed_obj);
        return w.completed_obj;
    }
    return py::cast(std::move(st)).release().ptr();
}

PyObject* fast_send(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    if (nargs != 2 || kwnames != nullptr) return fall_back("send", self, args, nargs, kwnames);
    return guarded([&]() -> PyObject* {
        loom_tag_t tag;
        if (!tag_arg(args[1], &tag)) return nullptr;
        Endpoint& ep = *self_of<Endpoint>(self);
        return request_object(*ep.w, tag_send(ep, args[0], tag, false, std::nullopt));
    });
}

PyObject* fast_send_wait(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    if (nargs != 2 || kwnames != nullptr) return fall_back("send_wait", self, args, nargs, kwnames);
    return guarded([&]() -> PyObject* {
        loom_tag_t tag;
        if (!tag_arg(args[1], &tag)) return nullptr;
        ReqPtr st = tag_send(*self_of<Endpoint>(self), args[0], tag, false, std::nullopt);
        return request_wait(*st, std::nullopt).release().ptr();
    });
}

PyObject* fast_recv(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    if (nargs < 2 || nargs > 3 || kwnames != nullptr) return fall_back("recv", self, args, nargs, kwnames);
    return guarded([&]() -> PyObject* {
        loom_tag_t tag, mask = ~loom_tag_t{0};
        if (!tag_arg(args[1], &tag) || (nargs == 3 && !tag_arg(args[2], &mask))) return nullptr;
        Worker& w = *self_of<Worker>(self);
        return request_object(w, tag_recv(w, args[0], tag, mask, std::nullopt));
    });
}

PyObject* fast_recv_wait(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    if (nargs < 2 || nargs > 3 || kwnames != nullptr)
        return fall_back("recv_wait", self, args, nargs, kwnames);
    return guarded([&]() -> PyObject* {
        loom_tag_t tag, mask = ~loom_tag_t{0};
        if (!tag_arg(args[1], &tag) || (nargs == 3 && !tag_arg(args[2], &mask))) return nullptr;
        ReqPtr st = tag_recv(*self_of<Worker>(self), args[0], tag, mask, std::nullopt);
        return request_wait(*st, std::nullopt).release().ptr();
    });
}

PyObject* fast_progress(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    if (nargs != 0 || kwnames != nullptr) return fall_back("progress", self, args, nargs, kwnames);
    return guarded([&]() -> PyObject* { return PyLong_FromUnsignedLong(self_of<Worker>(self)->progress()); });
}

PyObject* fast_wait(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    if (nargs != 0 || kwnames != nullptr) return fall_back("wait", self, args, nargs, kwnames);
    return guarded(
        [&]() -> PyObject* { return request_wait(*self_of<ReqState>(self), std::nullopt).release().ptr(); });
}

PyObject* fast_done(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    if (nargs != 0 || kwnames != nullptr) return fall_back("done", self, args, nargs, kwnames);
    return PyBool_FromLong(self_of<ReqState>(self)->done());
}

/** asyncio's side (loom/__init__.py): the await of a request still running, and of a result. */
PyObject* g_await_later = nullptr;
PyObject* g_await_result = nullptr;
PyObject* g_loop_idle = nullptr;
PyObject* g_attach = nullptr;
double g_async_spin_us = 50.0;

/**
 * Request.__await__: progresses the worker for up to the spin budget first, so that an
 * operation done by then (a send, a reply close behind) is awaited without suspending
 * the coroutine; only one still running goes to the loop (g_await_later: a future woken
 * by its completion, the worker's fd registered with the loop).
 */
PyObject* fast_await(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    (void)args;
    if (nargs != 0 || kwnames != nullptr) {
        PyErr_SetString(PyExc_TypeError, "__await__() takes no arguments");
        return nullptr;
    }
    return guarded([&]() -> PyObject* {
        ReqState& st = *self_of<ReqState>(self);
        // A short spin first, then the rest of the budget only while the loop has nothing else
        // to run: many coroutines starting their awaits at once do not each hold the loop.
        constexpr double kFirstSpinUs = 2.0;
        bool done = request_spin(st, std::min(kFirstSpinUs, g_async_spin_us));
        if (!done && g_async_spin_us > kFirstSpinUs) {
            py::object idle = py::reinterpret_steal<py::object>(PyObject_CallNoArgs(g_loop_idle));
            if (!idle) return nullptr;
            if (PyObject_IsTrue(idle.ptr()) == 1) done = request_spin(st, g_async_spin_us - kFirstSpinUs);
        }
        if (!done) return PyObject_CallOneArg(g_await_later, self);
        if (st.owner != nullptr && !st.owner->aio_attached) {
            // Done inside its call (a send): nothing else would register its worker with the
            // loop, and a coroutine that only sends still needs it progressed.
            py::object w = py::cast(st.owner, py::return_value_policy::reference);
            if (!py::reinterpret_steal<py::object>(PyObject_CallOneArg(g_attach, w.ptr()))) return nullptr;
        }
        py::object result = st.result();
        if (result.is_none()) {  // an exhausted iterator: the await is over, its value None
            static PyObject* const empty = PyTuple_New(0);
            return PyObject_GetIter(empty);
        }
        return PyObject_CallOneArg(g_await_result, result.ptr());
    });
}

void set_await_hooks(py::object later, py::object result, py::object loop_idle, py::object attach) {
    for (PyObject* old : {g_await_later, g_await_result, g_loop_idle, g_attach}) Py_XDECREF(old);
    g_await_later = later.release().ptr();  // kept for the interpreter's life
    g_await_result = result.release().ptr();
    g_loop_idle = loop_idle.release().ptr();
    g_attach = attach.release().ptr();
}

// --- MemoryHandle's buffer export ---------------------------------------------------------------
//
// memoryview(mh), numpy.frombuffer(mh): the mapped bytes, counted, so that close() can
// refuse while a view still points there (BufferError, as mmap.close() does) instead of
// leaving it dangling. pybind11's own buffer support has no release hook to count with.

int memory_get_buffer(PyObject* self, Py_buffer* view, int flags) {
    MemoryHandle* mh = self_of<MemoryHandle>(self);
    if (mh == nullptr || mh->h == nullptr) {
        view->obj = nullptr;
        PyErr_SetString(PyExc_BufferError, "the memory handle is closed");
        return -1;
    }
    if (PyBuffer_FillInfo(view, self, mh->address, static_cast<Py_ssize_t>(mh->length), 0, flags) != 0)
        return -1;
    ++mh->exports;
    return 0;
}

void memory_release_buffer(PyObject* self, Py_buffer*) {
    if (MemoryHandle* mh = self_of<MemoryHandle>(self)) --mh->exports;
}

void install_buffer_export(py::handle type) {
    auto* heap = reinterpret_cast<PyHeapTypeObject*>(type.ptr());
    heap->as_buffer.bf_getbuffer = memory_get_buffer;
    heap->as_buffer.bf_releasebuffer = memory_release_buffer;
    heap->ht_type.tp_as_buffer = &heap->as_buffer;
}

/** Replaces @p type's method @p name by @p fn, keeping pybind11's as the fallback. */
void install_fast_call(py::handle type, const char* name, _PyCFunctionFastWithKeywords fn) {
    if (py::hasattr(type, name))
        g_fallback[name] = py::object(type.attr(name)).release().ptr();  // module's life
    // The descriptor keeps a pointer to its PyMethodDef: these live as long as the module.
    auto* def = new PyMethodDef{name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fn)),
                                METH_FASTCALL | METH_KEYWORDS, nullptr};
    py::object descr = py::reinterpret_steal<py::object>(
        PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(type.ptr()), def));
    if (!descr || PyObject_SetAttrString(type.ptr(), name, descr.ptr()) != 0) throw py::error_already_set();
}

}  // namespace

}  // namespace loompy

using namespace loompy;

PYBIND11_MODULE(_loom, m) {
    m.doc() = "Loom's C API for Python (docs/python.md); import loom, not this module";
    m.def("_set_error_factory", &set_error_factory, "Sets (code, what) -> exception (loom/__init__.py).");
    m.def("status_name", &status_name, py::arg("code"),
          "The C name of a status code, e.g. LOOM_ERR_TIMED_OUT.");
    m.def(
        "status_string",
        [](int code) { return std::string(loom_status_string(static_cast<loom_status_t>(code))); },
        py::arg("code"), "Loom's short description of a status code.");

    py::class_<ReqState, ReqPtr>(m, "Request", "One operation's completion (docs/python.md, Requests).")
        .def("done", &ReqState::done, "True once it completed (no progress is made).")
        .def_property_readonly(
            "status", [](const ReqState& st) { return status_name(st.status); },
            "LOOM_OK, LOOM_INPROGRESS or the error's name.")
        .def_property_readonly("result", &ReqState::result, "The result; raises the operation's error.")
        .def("wait", &request_wait, py::arg("timeout") = py::none(),
             "Progresses the worker until done; returns the result or raises.")
        .def(
            "cancel",
            [](ReqState& st) {
                if (st.handle != nullptr && st.worker != nullptr)
                    loom_request_cancel(st.worker->h, st.handle);
            },
            "loom_request_cancel: MPI's rules (docs/python.md).")
        .def("_spin", &request_spin, py::arg("budget_us"), "Progresses until done or budget_us passed.")
        .def_property_readonly("worker", &worker_of, "The worker it runs on, None once completed.")
        .def("_set_future", [](ReqState& st, py::object fut) { st.future = std::move(fut); })
        .def("__repr__", [](const ReqState& st) { return "<loom.Request " + status_name(st.status) + ">"; });

    py::class_<Context>(m, "Context", "loom_init: a context (docs/python.md).")
        .def(py::init<std::optional<py::iterable>, std::optional<std::string>>(),
             py::arg("features") = py::none(), py::arg("name") = py::none())
        .def("close", &Context::close, "Closes its workers and mappings, then the context.")
        .def("__enter__", [](py::object self) { return self; })
        .def("__exit__", [](Context& c, py::args) { c.close(); })
        .def(
            "worker",
            [](py::object self) {
                Context& c = self.cast<Context&>();
                c.handle();
                return std::make_unique<Worker>(c, self);
            },
            "A worker (thread mode single).")
        .def("mem_map", &mem_map, py::arg("buf") = py::none(), py::arg("length") = py::none(),
             "Maps a writable buffer, or length bytes Loom allocates, for RMA.")
        .def(
            "resources",
            [](Context& c) {
                loom_context_attr_t attr{};
                attr.field_mask = LOOM_ATTR_FIELD_NUM_RESOURCES;
                check(loom_context_query(c.handle(), &attr), "loom_context_query");
                py::list out;
                for (std::size_t i = 0; i < attr.num_resources; ++i) {
                    loom_resource_t r{};
                    check(loom_context_resource(c.h, i, &r), "loom_context_resource");
                    out.append(py::make_tuple(r.transport, r.device));
                }
                return out;
            },
            "The (transport, device) pairs the context may use.");

    py::class_<Worker>(m, "Worker", py::dynamic_attr(), "loom_worker_create: a worker (docs/python.md).")
        .def(
            "close", [](Worker& w) { w.close(); },
            "Closes its listeners, endpoints and requests, then the worker.")
        .def("__enter__", [](py::object self) { return self; })
        .def("__exit__", [](Worker& w, py::args) { w.close(); })
        .def("progress", &Worker::progress, "loom_worker_progress; raises what a handler raised.")
        .def_property_readonly("address",
                               [](Worker& w) {
                                   void* a = nullptr;
                                   std::size_t n = 0;
                                   check(loom_worker_get_address(w.handle(), &a, &n),
                                         "loom_worker_get_address");
                                   py::bytes out(static_cast<const char*>(a), n);
                                   loom_worker_release_address(w.h, a);
                                   return out;
                               })
        .def("fileno",
             [](Worker& w) {
                 int fd = -1;
                 check(loom_worker_get_efd(w.handle(), &fd), "loom_worker_get_efd");
                 return fd;
             })
        .def(
            "arm",
            [](Worker& w) {
                loom_status_t s = loom_worker_arm(w.handle());
                if (s == LOOM_ERR_BUSY) return false;
                check(s, "loom_worker_arm");
                return true;
            },
            "True: armed, sleep on fileno(); False: events are pending.")
        .def(
            "wait",
            [](Worker& w) {
                loom_worker_h wh = w.handle();
                loom_status_t s;
                {
                    py::gil_scoped_release nogil;
                    s = loom_worker_wait(wh);
                }
                check(s, "loom_worker_wait");
            },
            "Sleeps until the worker may have work (without the GIL).")
        .def("connect", &connect_address, py::arg("address"), py::arg("err_handler") = py::none())
        .def("connect_to", &connect_sockaddr, py::arg("host"), py::arg("port"),
             py::arg("err_handler") = py::none())
        .def("listen", &listen_on, py::arg("on_connection"), py::arg("host") = "0.0.0.0", py::arg("port") = 0)
        .def("recv", &tag_recv, py::arg("buf"), py::arg("tag"), py::arg("mask") = ~loom_tag_t{0},
             py::arg("deadline") = py::none())
        .def("recv_wait", &recv_wait, py::arg("buf"), py::arg("tag"), py::arg("mask") = ~loom_tag_t{0},
             py::arg("timeout") = py::none(), "recv(...).wait(timeout) in one call: (sender_tag, length).")
        .def("probe", &probe, py::arg("tag"), py::arg("mask") = ~loom_tag_t{0}, py::arg("remove") = false)
        .def("recv_message", &recv_message, py::arg("buf"), py::arg("msg"))
        .def("set_am_handler", &set_am_handler, py::arg("id"), py::arg("handler"))
        .def("flush", &worker_flush, py::arg("deadline") = py::none())
        .def("fence", [](Worker& w) { check(loom_worker_fence(w.handle()), "loom_worker_fence"); })
        .def("_set_aio_attached", [](Worker& w, bool on) { w.aio_attached = on; })
        .def_property_readonly("closed", [](const Worker& w) { return w.h == nullptr; });

    py::class_<Endpoint>(m, "Endpoint", "loom_ep_create: an endpoint (docs/python.md).")
        .def("close", &ep_close, py::arg("force") = false, py::arg("deadline") = py::none())
        .def("__enter__", [](py::object self) { return self; })
        .def("__exit__",
             [](Endpoint& ep, py::args) {
                 if (loom_status_ptr_t r = ep.close_handle(false); LOOM_PTR_IS_PTR(r)) loom_request_free(r);
             })
        .def("send", &tag_send, py::arg("buf"), py::arg("tag"), py::arg("sync") = false,
             py::arg("deadline") = py::none())
        .def("send_wait", &send_wait, py::arg("buf"), py::arg("tag"), py::arg("sync") = false,
             py::arg("timeout") = py::none(), "send(...).wait(timeout) in one call.")
        .def("am_send", &am_send, py::arg("id"), py::arg("header") = py::bytes(),
             py::arg("data") = py::bytes(), py::arg("reply") = false, py::arg("eager") = false,
             py::arg("rndv") = false, py::arg("deadline") = py::none())
        .def("stream_send", &stream_send, py::arg("buf"), py::arg("deadline") = py::none())
        .def("stream_recv", &stream_recv, py::arg("buf"), py::arg("waitall") = true,
             py::arg("deadline") = py::none())
        .def("unpack_rkey", &unpack_rkey, py::arg("packed"))
        .def(
            "put",
            [](Endpoint& ep, py::handle buf, std::uint64_t addr, RemoteKey& rk, std::optional<double> d) {
                return rma(ep, buf, addr, rk, true, d);
            },
            py::arg("buf"), py::arg("remote_addr"), py::arg("rkey"), py::arg("deadline") = py::none())
        .def(
            "get",
            [](Endpoint& ep, py::handle buf, std::uint64_t addr, RemoteKey& rk, std::optional<double> d) {
                return rma(ep, buf, addr, rk, false, d);
            },
            py::arg("buf"), py::arg("remote_addr"), py::arg("rkey"), py::arg("deadline") = py::none())
        .def("atomic", &atomic, py::arg("op"), py::arg("value"), py::arg("remote_addr"), py::arg("rkey"),
             py::arg("fetch") = false, py::arg("compare") = py::none(), py::arg("size") = 8,
             py::arg("deadline") = py::none())
        .def("flush", &ep_flush, py::arg("deadline") = py::none())
        .def("fence", [](Endpoint& ep) { check(loom_ep_fence(ep.handle()), "loom_ep_fence"); })
        .def_property_readonly(
            "worker", [](const Endpoint& ep) { return ep.worker_ref; }, "The worker it belongs to.")
        .def_property_readonly("closed", [](const Endpoint& ep) { return ep.h == nullptr; });

    py::class_<Listener>(m, "Listener", "loom_listener_create: accepts connections (docs/python.md).")
        .def("close", &Listener::close)
        .def("__enter__", [](py::object self) { return self; })
        .def("__exit__", [](Listener& l, py::args) { l.close(); })
        .def_property_readonly("address", [](Listener& l) { return host_port(listener_address(l)); })
        .def_property_readonly("port", [](Listener& l) {
            const py::tuple address = host_port(listener_address(l));
            return py::object(address[1]);  // a reference of its own: the tuple goes now
        });

    py::class_<ConnRequest>(m, "ConnRequest", "A client's connection request, passed to on_connection.")
        .def(
            "accept",
            [](ConnRequest& c, py::object err_handler) {
                Worker& w = *c.listener->w;
                loom_ep_params_t params{};
                params.field_mask = LOOM_EP_PARAM_FIELD_CONN_REQUEST;
                params.conn_request = c.take();
                return make_endpoint(w, std::move(err_handler), params, "accepting a connection");
            },
            py::arg("err_handler") = py::none())
        .def("reject",
             [](ConnRequest& c) {
                 loom_conn_request_h r = c.take();
                 check(loom_listener_reject(c.listener->h, r), "loom_listener_reject");
             })
        .def_property_readonly("client_address", [](ConnRequest& c) {
            if (c.h == nullptr)
                raise_status(LOOM_ERR_INVALID_PARAM, "the connection request was accepted or rejected");
            sockaddr_storage ss{};
            check(loom_conn_request_query(c.h, &ss), "loom_conn_request_query");
            return host_port(ss);
        });

    py::class_<TagMessage>(m, "TagMessage", "A probed message (probe).")
        .def_readonly("tag", &TagMessage::tag)
        .def_readonly("length", &TagMessage::length);

    py::class_<AmMessage>(m, "AmMessage", "An active message handed to a handler (docs/python.md).")
        .def_readonly("header", &AmMessage::header)
        .def_readonly("data", &AmMessage::data)
        .def_readonly("length", &AmMessage::length)
        .def_readonly("is_rndv", &AmMessage::rndv)
        .def_readonly("reply_ep", &AmMessage::reply_ep)
        .def("receive", &am_receive, py::arg("buf") = py::none())
        .def("release", &AmMessage::release);

    py::class_<MemoryHandle>(m, "MemoryHandle", "loom_mem_map: memory peers may access.")
        .def_property_readonly("address",
                               [](MemoryHandle& mh) {
                                   mh.handle();
                                   return reinterpret_cast<std::uintptr_t>(mh.address);
                               })
        .def_property_readonly("length",
                               [](MemoryHandle& mh) {
                                   mh.handle();
                                   return mh.length;
                               })
        .def("pack_rkey", &pack_rkey)
        .def("close", &MemoryHandle::close)
        .def("__enter__", [](py::object self) { return self; })
        .def("__exit__", [](MemoryHandle& mh, py::args) { mh.close(); });

    py::class_<RemoteKey>(m, "RemoteKey", "A peer's memory key, unpacked for one endpoint.")
        .def("close", &RemoteKey::close)
        .def("__enter__", [](py::object self) { return self; })
        .def("__exit__", [](RemoteKey& rk, py::args) { rk.close(); });

    install_buffer_export(m.attr("MemoryHandle"));
    install_fast_call(m.attr("Endpoint"), "send", fast_send);
    install_fast_call(m.attr("Endpoint"), "send_wait", fast_send_wait);
    install_fast_call(m.attr("Worker"), "recv", fast_recv);
    install_fast_call(m.attr("Worker"), "recv_wait", fast_recv_wait);
    install_fast_call(m.attr("Worker"), "progress", fast_progress);
    install_fast_call(m.attr("Request"), "done", fast_done);
    install_fast_call(m.attr("Request"), "wait", fast_wait);
    install_fast_call(m.attr("Request"), "__await__", fast_await);
    m.def("_set_await_hooks", &set_await_hooks, "asyncio's side of await (loom/__init__.py).");
    m.def(
        "set_async_spin_us", [](double us) { g_async_spin_us = us; }, py::arg("us"),
        "How long an await progresses the worker itself before its coroutine sleeps (us).");
    m.def("get_async_spin_us", [] { return g_async_spin_us; });
}
