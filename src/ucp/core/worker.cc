#include "ucp/core/worker.h"

#include "ucp/core/listener.h"
#include "ucp/core/packed.h"
#include "ucp/core/ucp_log.h"
#include "ucp/core/wire.h"

#include <algorithm>
#include <sstream>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <cstring>
#include <optional>
#include <random>

#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

namespace loom::ucp {

log::Component g_log("ucp");

// --- request table -----------------------------------------------------------------------

Status RequestTable::insert(Request* req) {
    if (free_.empty()) {
        if (slots_.size() >= UINT32_MAX - 1) return Status::no_memory;
        slots_.push_back(nullptr);
        gens_.push_back(1);
        free_.push_back(static_cast<std::uint32_t>(slots_.size()));
    }
    const std::uint32_t id = free_.back();
    free_.pop_back();
    slots_[slot(id)] = req;
    req->id = id;
    return Status::ok;
}

Request* RequestTable::take(std::uint64_t wire_id) {
    const auto id = static_cast<std::uint32_t>(wire_id);
    const auto gen = static_cast<std::uint32_t>(wire_id >> 32);
    if (id == 0 || id > slots_.size() || gens_[slot(id)] != gen || slots_[slot(id)] == nullptr) return nullptr;
    Request* req = slots_[slot(id)];
    slots_[slot(id)] = nullptr;
    ++gens_[slot(id)];
    free_.push_back(id);
    req->id = 0;
    return req;
}

// --- worker ------------------------------------------------------------------------------

namespace {

/**
 * The rc ifaces' settings that the protocol layer decides (unless the user set them).
 * rc connects either endpoint to endpoint (verbs: QP addresses exchanged by wire-up over
 * another lane, wireup.cc) or through rdma_cm (the iface listens on its IP address, and
 * rc needs no other transport). Unless LOOM_IB_CM says otherwise, the protocol layer's rc
 * ifaces use rdma_cm where the port has an IP address (RoCE, iWARP, InfiniBand with
 * IPoIB) and verbs elsewhere (docs/protocols.md).
 */
ucs::config::Overrides rc_overrides(const ContextConfig& config) {
    ucs::config::Overrides overrides;
    const char* cm = std::getenv("LOOM_IB_CM");
    if (cm == nullptr || std::string_view(cm) == "auto") overrides.emplace("IB_CM", "prefer_rdmacm");
    // LOOM_ATOMIC_MODE decides who performs rc's atomics, unless LOOM_IB_ATOMICS does.
    if (std::getenv("LOOM_IB_ATOMICS") == nullptr) {
        overrides.emplace("IB_ATOMICS", config.atomic_mode == AtomicMode::device ? "device" : "cpu");
    }
    return overrides;
}

}  // namespace

Result<std::unique_ptr<Worker>> Worker::create(Context& ctx, const WorkerParams& params) {
    // Multi: the protocol layer serializes every call with its own lock, so the
    // transports below only ever see one thread at a time.
    const bool multi = params.thread_mode == uct::ThreadMode::multi;
    std::unique_ptr<Worker> worker(new Worker(ctx, multi ? uct::ThreadMode::serialized : params.thread_mode));
    worker->multi_threaded = multi;
    worker->thread_mode = params.thread_mode;
    if (Status s = worker->init(); s != Status::ok) return s;
    return worker;
}

Status Worker::init() {
    std::random_device rd;
    uuid = (std::uint64_t{rd()} << 32) ^ rd() ^ (static_cast<std::uint64_t>(::getpid()) << 16);
    if (uuid == 0) uuid = 1;
    ucs::MemPoolParams rp;
    rp.name = "ucp_requests";
    // Room for LOOM_OP_ATTR_FIELD_REQUEST_DATA even when the caller asked for less.
    rp.elem_size = sizeof(Request) + std::max(context.params().user_request_size, sizeof(void*));
    rp.alignment = 64;
    rp.elems_per_chunk = 128;
    // As in UCX: the caller's part of a request is set up once per request memory, so a
    // library may keep state in it across uses (Open MPI's pml recycles its requests).
    if (const ContextParams& cp = context.params(); cp.request_init != nullptr) {
        rp.obj_init = [init = cp.request_init, arg = cp.request_init_arg](void* elem) {
            init(handle_of(static_cast<Request*>(elem)), arg);
        };
    }
    if (const ContextParams& cp = context.params(); cp.request_cleanup != nullptr) {
        rp.obj_cleanup = [cleanup = cp.request_cleanup, arg = cp.request_cleanup_arg](void* elem) {
            cleanup(handle_of(static_cast<Request*>(elem)), arg);
        };
    }
    if (Status s = req_pool.init(std::move(rp)); s != Status::ok) return s;
    for (const ContextResource& rsc : context.resources()) {
        uct::IfaceParams iface_params;
        if (rsc.tl.tl_name == "rc") iface_params.config_overrides = rc_overrides(context.config());
        if (rsc.tl.tl_name == "tcp")
            iface_params.config_overrides = keepalive_tcp_overrides(context.config());
        auto iface = rsc.md->iface_open(rsc.tl, &uct_worker, iface_params);
        if (!iface) {
            LOOM_LOG_WARN("ucp: cannot open {} on {}: {}; going on without it", rsc.tl.tl_name, rsc.tl.dev_name,
                          to_string(iface.status()));
            ifaces_left_out.push_back(fmt::format("{}/{}: does not open: {}", rsc.tl.tl_name, rsc.tl.dev_name,
                                                  to_string(iface.status())));
            continue;
        }
        WorkerIface wi;
        wi.iface = std::move(*iface);
        wi.rsc = &rsc;
        if (Status s = wi.iface->query(wi.attr); s != Status::ok) return s;
        if (context.config().atomic_mode == AtomicMode::device &&
            !(wi.attr.cap_flags & uct::kCapAtomicDevice)) {
            // One atomic path per word: with the NIC's atomics chosen, CPU atomics are not offered
            // (rma_atomic_check explains a refused one).
            wi.attr.cap_flags &= ~(uct::kCapAtomic32 | uct::kCapAtomic64);
            wi.attr.atomic32_ops = wi.attr.atomic64_ops = 0;
        }
        if ((context.params().features & kFeatureWakeup) && !(wi.attr.cap_flags & uct::kCapEventRecv)) {
            // As in UCX: a worker that may sleep uses only transports that can wake it.
            LOOM_LOG_INFO("ucp: {} on {} not used: it cannot wake a sleeping worker (LOOM_FEATURE_WAKEUP)",
                          rsc.tl.tl_name, rsc.tl.dev_name);
            ifaces_left_out.push_back(rsc.tl.tl_name + "/" + rsc.tl.dev_name +
                                      ": cannot wake a sleeping worker (LOOM_FEATURE_WAKEUP)");
            continue;
        }
        if (Status s = wi.iface->progress_enable(); s != Status::ok) return s;
        if (Status s = wi.iface->set_am_handler(kAmWireup, wireup_handler, this, 0); s != Status::ok) return s;
        ifaces.push_back(std::move(wi));
    }
    if (ifaces.empty()) {
        LOOM_LOG_ERROR("ucp: no transport could be opened for the worker");
        return Status::no_device;
    }
    if (context.params().features & kFeatureWakeup) {
        if (Status s = init_wakeup(); s != Status::ok) return s;
    }
    keepalive_init(*this);
    for (const ProtoFamily* const* f = families().begin; f != families().end; ++f) {
        if ((*f)->init == nullptr) continue;
        if (Status s = (*f)->init(*this); s != Status::ok) {
            LOOM_LOG_ERROR("ucp: the {} protocols cannot start: {}", (*f)->name, to_string(s));
            return s;
        }
    }
    return Status::ok;
}

// --- protocol families -------------------------------------------------------------------

namespace {

/** Every registered family, kept in slot order. */
std::vector<const ProtoFamily*>& family_registry() {
    static std::vector<const ProtoFamily*> list;
    return list;
}

/** Calls @p hook of every family that has it with @p args. */
template <auto Hook, class... Args>
void for_each_family(Args&&... args) {
    for (const ProtoFamily* const* f = families().begin; f != families().end; ++f) {
        if ((*f)->*Hook != nullptr) ((*f)->*Hook)(args...);
    }
}

}  // namespace

void family_register(const ProtoFamily& family) {
    auto& list = family_registry();
    bool clash = family.slot >= kMaxFamilies;
    for (const ProtoFamily* f : list) clash = clash || f->slot == family.slot;
    if (clash) {
        // A build error in all but name: two families would share their state.
        std::fprintf(stderr, "loom: protocol family %s: slot %u is taken or out of range\n", family.name,
                     unsigned{family.slot});
        std::abort();
    }
    list.insert(std::upper_bound(list.begin(), list.end(), &family,
                                 [](const ProtoFamily* a, const ProtoFamily* b) { return a->slot < b->slot; }),
                &family);
}

FamilyList families() {
    const auto& list = family_registry();
    return {list.data(), list.data() + list.size()};
}

// --- wake-up -----------------------------------------------------------------------------

Status Worker::init_wakeup() {
    auto signal_fd = ucs::EventFd::create();
    if (!signal_fd) return signal_fd.status();
    wake_signal_ = std::move(*signal_fd);
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) {
        LOOM_LOG_ERROR("ucp: cannot create the worker's event fd: {}", std::strerror(errno));
        return Status::no_resource;
    }
    auto add = [&](int fd, const char* what) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = fd;
        if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
            LOOM_LOG_ERROR("ucp: cannot watch the event fd of {}: {}", what, std::strerror(errno));
            return Status::io_error;
        }
        return Status::ok;
    };
    if (Status s = add(wake_signal_.fd(), "the worker signal"); s != Status::ok) return s;
    deadline_timer_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (deadline_timer_ < 0) {
        LOOM_LOG_ERROR("ucp: cannot create the worker's deadline timer: {}", std::strerror(errno));
        return Status::no_resource;
    }
    if (Status s = add(deadline_timer_, "the deadline timer"); s != Status::ok) return s;
    for (WorkerIface& wi : ifaces) {
        auto fd = wi.iface->event_fd();
        if (!fd) {
            if (fd.status() == Status::unsupported) continue;  // events never asynchronous (self)
            return fd.status();
        }
        if (Status s = add(*fd, wi.rsc->tl.tl_name.c_str()); s != Status::ok) return s;
    }
    return Status::ok;
}

Status Worker::arm() {
    if (epoll_fd_ < 0) {
        LOOM_LOG_ERROR("ucp: the worker cannot sleep: its context was created without LOOM_FEATURE_WAKEUP");
        return Status::unsupported;
    }
    // Drain everything first, then report: every source is armed before we say busy.
    Status result = wake_signal_.arm();
    if (result != Status::ok && result != Status::busy) return result;
    if (completed_since_arm_) {
        completed_since_arm_ = false;
        result = Status::busy;
    }
    if (arm_deadline_timer() == Status::busy) result = Status::busy;
    for (WorkerIface& wi : ifaces) {
        Status s = wi.iface->event_arm();
        if (s == Status::busy) {
            result = Status::busy;
        } else if (s != Status::ok) {
            return s;
        }
    }
    return result;
}

Status Worker::arm_deadline_timer() {
    ucs::Ticks next = deadlines.empty() ? UINT64_MAX : next_deadline;
    for (const auto& [ep, st] : wireup_state) {
        if (st.deadline != 0) next = std::min(next, st.deadline);
    }
    itimerspec spec{};
    if (next != UINT64_MAX) {
        const ucs::Ticks now = ucs::get_time();
        if (next <= now) return Status::busy;  // due: progress expires it now
        // At least 1 ns (0 would disarm); the deadline check itself happens in progress.
        const std::uint64_t ns = std::max<std::uint64_t>(ucs::ticks_to_ns(next - now), 1);
        spec.it_value.tv_sec = static_cast<time_t>(ns / 1000000000);
        spec.it_value.tv_nsec = static_cast<long>(ns % 1000000000);
    } else if (!deadline_timer_armed_) {
        return Status::ok;  // nothing to disarm: no system call
    }
    // Setting the timer also clears an expiry not read yet, so a fired timer stops waking.
    if (::timerfd_settime(deadline_timer_, 0, &spec, nullptr) != 0) {
        LOOM_LOG_ERROR("ucp: cannot arm the worker's deadline timer: {}", std::strerror(errno));
        return Status::busy;  // the caller progresses instead of sleeping past a deadline
    }
    deadline_timer_armed_ = next != UINT64_MAX;
    return Status::ok;
}

Status Worker::wait() {
    Status s = arm();
    if (s == Status::busy) return Status::ok;
    if (s != Status::ok) return s;
    ++sleepers;
    const unsigned depth = multi_threaded ? 1 : 0;
    if (depth) mt_lock.unlock();  // other threads may progress and signal meanwhile
    epoll_event ev;
    int n = ::epoll_wait(epoll_fd_, &ev, 1, -1);
    const int err = errno;
    if (depth) mt_lock.lock();
    --sleepers;
    if (n < 0 && err != EINTR) {
        LOOM_LOG_ERROR("ucp: waiting on the worker's event fd failed: {}", std::strerror(err));
        return Status::io_error;
    }
    return Status::ok;
}

void Worker::watch_fd(int fd) {
    if (epoll_fd_ < 0) return;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
        LOOM_LOG_WARN("ucp: a sleeping worker will not wake for socket {}: {}", fd, std::strerror(errno));
    }
}

unsigned Worker::cm_progress(unsigned busy) {
    if (busy != 0 && --cm_countdown_ != 0) return 0;
    cm_countdown_ = 64;
    unsigned n = 0;
    // A handler may destroy a listener (or make one): walk a copy, skipping the gone.
    std::vector<Listener*> current = listeners;
    for (Listener* l : current) {
        if (std::find(listeners.begin(), listeners.end(), l) != listeners.end()) n += l->progress();
    }
    return n;
}

Status Worker::signal() {
    if (epoll_fd_ < 0) {
        LOOM_LOG_ERROR("ucp: loom_worker_signal needs LOOM_FEATURE_WAKEUP");
        return Status::unsupported;
    }
    return wake_signal_.signal();
}

Worker::~Worker() {
    // Operations that completed inside their calls: reported now, as a progress would have.
    (void)run_deferred_callbacks();
    for (Request& req : flush_waiters.safe()) {
        decltype(flush_waiters)::remove(req);
        complete(&req, Status::canceled);
    }
    // Endpoints first: their outstanding sends complete with canceled.
    while (!eps.empty()) ep_destroy(&eps.front(), Status::canceled);
    for (const ProtoFamily* const* f = families().begin; f != families().end; ++f) {
        if ((*f)->cleanup != nullptr && family_state[(*f)->slot] != nullptr) (*f)->cleanup(*this);
    }
    frags.clear();
    for (WorkerIface& wi : ifaces) wi.iface->progress_disable();
    ifaces.clear();
    for (const ProtoFamily* const* f = families().begin; f != families().end; ++f) {
        if ((*f)->destroy != nullptr && family_state[(*f)->slot] != nullptr) (*f)->destroy(*this);
    }
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    if (deadline_timer_ >= 0) ::close(deadline_timer_);
}

// --- flush and close ---------------------------------------------------------------------

namespace {

bool ep_flushed(const Ep* ep) { return ep->outstanding.empty() || (ep->flags & kEpFailed); }

}  // namespace

void Worker::flush_start(Request* req, Ep* ep, bool close) {
    req->flags |= kReqFlush | (close ? kReqClose : 0);
    req->ep = ep;
    if (close) ep->flags |= kEpClosing;
    flush_waiters.push_back(*req);
    (void)check_flushes();
}

bool Worker::flush_idle(Ep* ep, Status& status) {
    status = Status::ok;
    if (!flush_waiters.empty()) return false;  // an earlier flush waits: this one completes after it
    if (ep != nullptr) {
        if (!ep_flushed(ep)) return false;
    } else {
        for (const Ep& e : eps) {
            if (!ep_flushed(&e)) return false;
        }
    }
    for (const ProtoFamily* const* f = families().begin; f != families().end; ++f) {
        if ((*f)->flush_idle == nullptr) continue;
        Status fs = Status::ok;
        if (!(*f)->flush_idle(*this, ep, fs)) return false;
        if (status == Status::ok) status = fs;
    }
    return true;
}

unsigned Worker::check_flushes() {
    unsigned done = 0;
    for (Request& req : flush_waiters.safe()) {
        Ep* ep = req.ep;
        // Past its deadline a flush waits no more for the endpoints, only for a transport
        // flush it already started (that flush's completion record points at the request).
        const bool expired = req.expired;
        bool flushed = true;
        if (!expired && ep != nullptr) {
            flushed = ep_flushed(ep);
        } else if (!expired) {
            for (const Ep& e : eps) flushed = flushed && ep_flushed(&e);
        }
        if (!flushed) continue;
        // A family's part, e.g. RMA's remote completion; the first error found is reported.
        Status family_status = Status::ok;
        bool families_done = true;
        for (const ProtoFamily* const* f = families().begin;
             families_done && f != families().end && (!expired || (req.flags & kReqRmaFlush)); ++f) {
            Status fs = Status::ok;
            if ((*f)->flush_done != nullptr) families_done = (*f)->flush_done(*this, req, fs);
            if (family_status == Status::ok) family_status = fs;
        }
        if (!families_done) continue;
        decltype(flush_waiters)::remove(req);
        Status status = ep != nullptr && (ep->flags & kEpFailed) ? ep->failure : family_status;
        if (expired) {
            // A close past its deadline closes by force, as LOOM_EP_CLOSE_FLAG_FORCE would.
            if (req.flags & kReqClose) ep_close_now(ep, true);
            status = Status::timed_out;
        } else if (req.flags & kReqClose) {
            // A close whose endpoint failed while it flushed reports the failure, as every
            // request of a failed endpoint does (docs/reliability.md).
            const bool failed = ep->flags & kEpFailed;
            ep_close_now(ep, false);
            if (!failed) status = Status::ok;
        }
        complete(&req, status);
        ++done;
    }
    return done;
}

void Worker::ep_close_now(Ep* ep, bool force) {
    // The peer may still send to us and need replies (acknowledgements, rendezvous): the
    // endpoint its wire-up would use stays, as an internal one, until the worker goes.
    ep->on_error = nullptr;
    for_each_family<&ProtoFamily::ep_closed>(*this, ep, Status::canceled);
    auto it = ep_by_uuid.find(ep->remote_uuid);
    if (!force && !(ep->flags & kEpFailed) && it != ep_by_uuid.end() && it->second == ep) {
        ep->flags = static_cast<std::uint8_t>((ep->flags | kEpInternal) & ~kEpClosing);
        return;
    }
    ep_destroy(ep, Status::canceled);
}

// --- addresses ---------------------------------------------------------------------------
//
// Layout (little endian, packed, no alignment):
//   u8 magic 'L', u8 version, u8 num_ifaces, u8 reserved, u32 total_length, u64 uuid
//   per iface: u8 tl_name_len, tl_name, u8 dev_type, u64 cap_flags,
//              f32 latency, f32 bandwidth, f32 overhead, u8 priority,
//              u16 dev_addr_len, dev_addr, u16 iface_addr_len, iface_addr

namespace {

constexpr std::uint8_t kAddressMagic = 'L';
constexpr std::size_t kAddressHeader = 16;

}  // namespace

std::vector<std::uint8_t> Worker::pack_address(bool net_only) const {
    std::vector<std::uint8_t> out;
    auto packed = [net_only](const WorkerIface& wi) { return !net_only || wi.rsc->tl.dev_type == uct::DeviceType::net; };
    pack_put<std::uint8_t>(out, kAddressMagic);
    pack_put<std::uint8_t>(out, kAddressVersion);
    pack_put<std::uint8_t>(out, static_cast<std::uint8_t>(std::count_if(ifaces.begin(), ifaces.end(), packed)));
    pack_put<std::uint8_t>(out, 0);
    pack_put<std::uint32_t>(out, 0);  // total length, set below
    pack_put<std::uint64_t>(out, uuid);
    for (std::size_t index = 0; index < ifaces.size(); ++index) {
        const WorkerIface& wi = ifaces[index];
        if (!packed(wi)) continue;
        pack_put<std::uint8_t>(out, static_cast<std::uint8_t>(index));
        const std::string& name = wi.rsc->tl.tl_name;
        pack_put<std::uint8_t>(out, static_cast<std::uint8_t>(name.size()));
        out.insert(out.end(), name.begin(), name.end());
        pack_put<std::uint8_t>(out, static_cast<std::uint8_t>(wi.rsc->tl.dev_type));
        pack_put<std::uint64_t>(out, wi.attr.cap_flags | (wi.rsc->aux_only ? kAddrCapAuxOnly : 0));
        pack_put<float>(out, static_cast<float>(wi.attr.latency.c));
        pack_put<float>(out, static_cast<float>(wi.attr.bandwidth_dedicated));
        pack_put<float>(out, static_cast<float>(wi.attr.overhead));
        pack_put<std::uint8_t>(out, wi.attr.priority);
        pack_put<std::uint8_t>(out, wi.rsc->md_index);
        std::vector<std::uint8_t> dev(wi.attr.device_addr_len), ifa(wi.attr.iface_addr_len);
        if (!dev.empty()) (void)wi.iface->get_device_address(dev.data());
        if (!ifa.empty()) (void)wi.iface->get_address(ifa.data());
        pack_put<std::uint16_t>(out, static_cast<std::uint16_t>(dev.size()));
        out.insert(out.end(), dev.begin(), dev.end());
        pack_put<std::uint16_t>(out, static_cast<std::uint16_t>(ifa.size()));
        out.insert(out.end(), ifa.begin(), ifa.end());
    }
    const auto total = static_cast<std::uint32_t>(out.size());
    std::memcpy(out.data() + 4, &total, sizeof(total));
    return out;
}

Result<UnpackedAddress> Worker::unpack_address(const void* data, std::size_t max_length) {
    if (data == nullptr || max_length < kAddressHeader) {
        LOOM_LOG_ERROR("ucp: worker address is missing or shorter than its {}-byte header", kAddressHeader);
        return Status::invalid_address;
    }
    PackedReader r{static_cast<const std::uint8_t*>(data), kAddressHeader};
    const auto magic = r.get<std::uint8_t>();
    const auto version = r.get<std::uint8_t>();
    const auto num = r.get<std::uint8_t>();
    (void)r.get<std::uint8_t>();
    const auto total = r.get<std::uint32_t>();
    UnpackedAddress addr;
    addr.uuid = r.get<std::uint64_t>();
    if (magic != kAddressMagic) {
        LOOM_LOG_ERROR("ucp: not a Loom worker address (first byte {:#x})", magic);
        return Status::invalid_address;
    }
    if (version != kAddressVersion) {
        LOOM_LOG_ERROR("ucp: worker address version {} (this Loom reads version {})", version, kAddressVersion);
        return Status::version_mismatch;
    }
    if (total < kAddressHeader || total > max_length) {
        LOOM_LOG_ERROR("ucp: worker address claims {} bytes, {} available", total, max_length);
        return Status::invalid_address;
    }
    r = PackedReader{static_cast<const std::uint8_t*>(data) + kAddressHeader, total - kAddressHeader};
    for (unsigned i = 0; i < num && r.ok; ++i) {
        RemoteIface ri;
        ri.index = r.get<std::uint8_t>();
        auto name = r.copy(r.get<std::uint8_t>());
        ri.tl_name.assign(name.begin(), name.end());
        const auto type = r.get<std::uint8_t>();
        if (type > static_cast<std::uint8_t>(uct::DeviceType::self)) r.ok = false;
        ri.dev_type = static_cast<uct::DeviceType>(type);
        ri.cap_flags = r.get<std::uint64_t>();
        ri.latency = r.get<float>();
        ri.bandwidth = r.get<float>();
        ri.overhead = r.get<float>();
        ri.priority = r.get<std::uint8_t>();
        ri.md_index = r.get<std::uint8_t>();
        ri.dev_addr = r.copy(r.get<std::uint16_t>());
        ri.iface_addr = r.copy(r.get<std::uint16_t>());
        // Entries come in the peer's iface order, each index once: anything else is forged.
        if (!addr.ifaces.empty() && ri.index <= addr.ifaces.back().index) r.ok = false;
        addr.ifaces.push_back(std::move(ri));
    }
    if (!r.ok || r.left != 0) {
        LOOM_LOG_ERROR("ucp: worker address is malformed (its transport entries do not fill its {} bytes)", total);
        return Status::invalid_address;
    }
    return addr;
}

// --- requests ----------------------------------------------------------------------------

Request* Worker::alloc_request() {
    void* mem = req_pool.get();
    if (LOOM_UNLIKELY(mem == nullptr)) return nullptr;
    auto* req = static_cast<Request*>(mem);
    req->flags = 0;
    req->status = Status::in_progress;
    req->kind = kReqKindOther;
    req->has_deadline = 0;
    req->expired = 0;
    req->id = 0;
    req->worker = this;
    req->user_data = nullptr;
    req->cb.send = nullptr;
    req->ep_link = {};
    return req;
}

Request* Worker::init_caller_request(void* handle) {
    Request* req = request_of(handle);
    req->flags = kReqCallerMem;
    req->status = Status::in_progress;
    req->kind = kReqKindOther;
    req->has_deadline = 0;
    req->expired = 0;
    req->id = 0;
    req->worker = this;
    req->user_data = nullptr;
    req->cb.send = nullptr;
    req->ep_link = {};
    return req;
}

namespace {

/**
 * One line for a handed-out receive that ends in an error other than the ones every
 * consumer reports itself (cancelled, truncated, past its deadline): MPICH 4.0's ch4:ucx
 * turns any other status into MPI_SUCCESS, so this line is the only sign that the buffer
 * is not the message.
 */
[[gnu::cold, gnu::noinline]] void log_failed_receive(const Request* req, Status status) {
    if (status == Status::canceled || status == Status::message_truncated || status == Status::timed_out)
        return;
    LOOM_LOG_WARN("ucp: a receive of {} B failed: {}; its buffer does not hold the message",
                  req->recv.info.length, to_string(status));
}

}  // namespace

void Worker::complete(Request* req, Status status) {
    req->status = status;
    if (LOOM_UNLIKELY(req->has_deadline)) deadline_forget(req);
    if (req->id != 0) req_table.remove(req);
    if (req->flags & kReqInEpList) {
        decltype(Ep::outstanding)::remove(*req);
        req->flags &= ~kReqInEpList;
    }
    if (req->flags & kReqRelease) {
        req->flags &= ~kReqRelease;
        req->release(req);
    }
    if (req->flags & kReqCtrl) {
        // Sent, or purged from a failed endpoint's queue: either way the copy goes here.
        if (req->send.ctrl_length > sizeof(req->send.ctrl_data)) std::free(req->send.ctrl_heap);
        release(req);
        return;
    }
    if (!(req->flags & kReqHandedOut)) {
        // Completed inside the call that started it, which reports it (finish_nbx).
        req->flags |= kReqCompleted;
        return;
    }
    // Only a callback or a test reports this one: failed receives say so once in the log too.
    if (LOOM_UNLIKELY(status < Status::ok) && (req->flags & kReqRecv)) log_failed_receive(req, status);
    // Multi: a thread asleep in wait(), or about to arm, may be waiting for this request,
    // completed by another thread: wake it, or make its next arm() say busy.
    if (LOOM_UNLIKELY(multi_threaded)) {
        completed_since_arm_ = true;
        if (sleepers.load(std::memory_order_relaxed) != 0 && epoll_fd_ >= 0) (void)wake_signal_.signal();
    }
    if (req->flags & kReqReleased) {
        // Freed by the application before it completed: no callback, ever (as UCX promises).
        req->flags |= kReqCompleted;
        release(req);
        return;
    }
    report_completion(req);
}

void Worker::report_completion(Request* req) {
    // Everything the callback needs is read before the completed flag is published: from
    // then on the request may be gone (a caller's request polled by another thread, or a
    // callback that frees it), so this is the last access to it.
    const auto cb = req->cb;
    void* const user_data = req->user_data;
    void* const handle = handle_of(req);
    const auto status = static_cast<loom_status_t>(req->status);
    const std::uint16_t flags = req->flags;
    TagRecvInfo info{};
    if (flags & kReqRecv) info = req->recv.info;
    // Release: a thread polling the request without the lock (loom_request_check_status)
    // that sees the flag sees the results written before it.
    __atomic_store_n(&req->flags.bits, static_cast<std::uint16_t>(flags | kReqCompleted), __ATOMIC_RELEASE);
    if (flags & kReqRecvLength) {
        if (cb.recv_length) cb.recv_length(handle, status, info.length, user_data);
    } else if (flags & kReqRecv) {
        if (cb.recv) cb.recv(handle, status, reinterpret_cast<const loom_tag_recv_info_t*>(&info), user_data);
    } else if (cb.send) {
        cb.send(handle, status, user_data);
    }
}

void Worker::defer_callback(Request* req) {
    // Completed inside its call under LOOM_OP_ATTR_FLAG_NO_IMM_CMPL: the callback waits
    // for the next progress, so that it never runs inside the call (ep_link is free: a
    // completed request is in no endpoint list).
    LOOM_ASSERT(!req->ep_link.linked());
    req->flags &= ~kReqCompleted;
    deferred_callbacks.push_back(*req);
}

unsigned Worker::run_deferred_callbacks() {
    unsigned n = 0;
    while (!deferred_callbacks.empty()) {
        Request& req = deferred_callbacks.front();
        decltype(deferred_callbacks)::remove(req);
        ++n;
        if (req.flags & kReqReleased) {
            req.flags |= kReqCompleted;
            release(&req);
        } else {
            report_completion(&req);
        }
    }
    return n;
}

void request_release_memh(Request* req) {
    if (req->memh == uct::kMemHNull) return;
    const Worker& w = *req->worker;
    (void)w.ifaces[req->ep->lanes[req->lane].iface].rsc->md->mem_dereg(req->memh);
    req->memh = uct::kMemHNull;
}

void Worker::release(Request* req) {
    if (req->flags & kReqCallerMem) return;
    req_pool.put(req);
}

// --- control messages --------------------------------------------------------------------

ssize_t am_bcopy_bytes(uct::Ep* ep, uct::AmId id, const void* data, std::size_t length) {
    struct Arg {
        const void* data;
        std::size_t length;
    } arg{data, length};
    return uct::ep_am_bcopy(
        ep, id,
        [](void* dest, void* a) -> std::size_t {
            auto* x = static_cast<Arg*>(a);
            std::memcpy(dest, x->data, x->length);
            return x->length;
        },
        &arg, 0);
}

namespace {

/** Sends control request @p req on its lane: ok (done, completed) or no_resource. */
Status ctrl_progress(Request* req) {
    Ep* ep = req->ep;
    const std::uint8_t* data = req->send.ctrl_length <= sizeof(req->send.ctrl_data)
                                   ? req->send.ctrl_data
                                   : static_cast<const std::uint8_t*>(req->send.ctrl_heap);
    uct::Ep* uep = req->lane == ep->am_lane ? ep->am_ep : ep->lanes[req->lane].ep;
    ssize_t n = am_bcopy_bytes(uep, req->send.ctrl_am_id, data, req->send.ctrl_length);
    if (n == static_cast<ssize_t>(Status::no_resource)) return Status::no_resource;
    req->worker->complete(req, n < 0 ? static_cast<Status>(n) : Status::ok);
    return Status::ok;
}

}  // namespace

Request* make_ctrl_request(Worker& worker, Ep* ep, std::uint8_t lane, uct::AmId id, const void* data,
                           std::size_t length) {
    Request* req = worker.alloc_request();
    if (req == nullptr) return nullptr;
    req->flags |= kReqCtrl;
    req->ep = ep;
    req->lane = lane;
    req->progress = ctrl_progress;
    req->send.ctrl_am_id = id;
    req->send.ctrl_length = static_cast<std::uint16_t>(length);
    if (length <= sizeof(req->send.ctrl_data)) {
        std::memcpy(req->send.ctrl_data, data, length);
        return req;
    }
    void* copy = std::malloc(length);
    if (copy == nullptr) {
        worker.release(req);
        return nullptr;
    }
    std::memcpy(copy, data, length);
    req->send.ctrl_heap = copy;
    return req;
}

Status Worker::send_ctrl(Ep* ep, uct::AmId id, const void* data, std::size_t length) {
    if (ep->flags & kEpFailed) return ep->failure;
    if (ep->num_pending == 0) {
        ssize_t n = am_bcopy_bytes(ep->am_ep, id, data, length);
        if (n >= 0) return Status::ok;
        if (n != static_cast<ssize_t>(Status::no_resource)) return static_cast<Status>(n);
    }
    Request* req = make_ctrl_request(*this, ep, ep->am_lane, id, data, length);
    if (req == nullptr) return Status::no_memory;
    Status s = send_request_start(req);
    return s == Status::in_progress ? Status::ok : s;
}

// --- pending sends -----------------------------------------------------------------------

namespace {

/** A queued request's turn: its protocol step again, counted off its lane's queue when it ran. */
template <bool kAmLane>
Status pending_cb(uct::PendingReq* pending) {
    auto* req = reinterpret_cast<Request*>(reinterpret_cast<char*>(pending) - offsetof(Request, pending));
    Ep* ep = req->ep;  // the request may be gone once its step ran
    const std::uint8_t req_lane = req->lane;
    Status s = req->progress(req);
    if (s == Status::no_resource) return s;
    --(kAmLane ? ep->num_pending : ep->lanes[req_lane].queued);
    return Status::ok;
}

}  // namespace

namespace {

/** Whether @p pending is a request send_request_start queued (on any lane). */
bool is_send_queued(const uct::PendingReq* pending) {
    return pending->func == pending_cb<true> || pending->func == pending_cb<false>;
}

/** Fails @p req, which send_request_start could not queue or which waited on a lane of a failed endpoint. */
void abort_queued(Request* req, Status status) {
    if (req->abort != nullptr) {
        req->abort(req, status);
    } else {
        req->worker->complete(req, status);
    }
}

}  // namespace

Status send_request_start(Request* req, std::uint8_t lane, ProtoAbort abort) {
    Ep* ep = req->ep;
    const bool am_lane = lane == ep->am_lane;
    // Off the AM lane the request names its queue (pending_cb counts it off there).
    LOOM_ASSERT(am_lane || req->lane == lane);
    std::uint32_t& queued = ep->queued_on(lane);
    if (queued == 0) {
        Status s = req->progress(req);
        if (s != Status::no_resource) return s;
    }
    req->abort = abort;
    req->pending.func = am_lane ? pending_cb<true> : pending_cb<false>;
    uct::Ep* uep = ep->lanes[lane].ep;
    for (;;) {
        Status s = uct::ep_pending_add(uep, &req->pending, 0);
        if (s == Status::ok) {
            ++queued;
            return Status::ok;
        }
        if (s != Status::busy) {
            abort_queued(req, s);
            return s;
        }
        s = req->progress(req);
        if (s != Status::no_resource) return s;
    }
}

bool send_request_withdraw(Request* req) {
    Ep* ep = req->ep;
    if (ep == nullptr || (req->flags & (kReqRecv | kReqFlush | kReqCtrl | kReqCompleted)) ||
        !is_send_queued(&req->pending) || !proto_is_first_step(req->progress)) {
        return false;
    }
    // The first step of a multi-fragment protocol may have sent some and queued the rest.
    if (((req->flags & kReqRma) ? req->rma.offset : req->send.offset) != 0) return false;
    // pending.func names the queue (and may be stale: then the request is in neither).
    const bool am_lane = req->pending.func == pending_cb<true>;
    const std::uint8_t lane = am_lane ? ep->am_lane : req->lane;
    uct::Ep* uep = am_lane ? ep->am_ep : ep->lanes[lane].ep;
    if (uep == nullptr || uct::ep_pending_remove(uep, &req->pending) != Status::ok) return false;
    --ep->queued_on(lane);
    LOOM_LOG_DEBUG("ucp: a request to worker {:016x} left its lane's queue at its deadline, unsent",
                   ep->remote_uuid);
    if (req->abort != nullptr) {
        req->abort(req, Status::timed_out);
    } else {
        req->send.dt.finish();  // tag, active message, stream: nothing else is held before the first step
        req->worker->complete(req, Status::timed_out);
    }
    return true;
}

// --- endpoints ---------------------------------------------------------------------------

namespace {

void uct_ep_error(void* arg, uct::Ep* uep, Status status) {
    auto* ep = static_cast<Ep*>(arg);
    ep->worker->lane_failed(ep, uep, status);
}

/**
 * The transports an endpoint was made from, for LOOM_PROTO_INFO and loom_info -e: each
 * lane and what it carries, every iface of the worker that is not a lane with the reason
 * (@p verdict, else @p not_chosen), and what the context and worker left out.
 */
template <typename NotChosen>
void explain_lanes(const Worker& worker, const UnpackedAddress& address, const Ep& ep,
                   const std::vector<std::string>& verdict, NotChosen&& not_chosen, std::string& out) {
    out += "transports for this peer:\n";
    for (std::size_t i = 0; i < worker.ifaces.size(); ++i) {
        const WorkerIface& wi = worker.ifaces[i];
        std::string roles;
        for (std::uint8_t l = 0; l < ep.num_lanes; ++l) {
            if (ep.lanes[l].iface != i) continue;
            if (l == ep.am_lane) roles += roles.empty() ? "AM lane" : ", AM lane";
            if (l == ep.rndv_lane) roles += roles.empty() ? "rendezvous and RMA lane" : ", rendezvous and RMA lane";
            for (std::uint8_t r = 1; r < ep.num_rndv_rails; ++r) {
                if (l == ep.rndv_rails[r])
                    roles += fmt::format("{}rendezvous rail {}", roles.empty() ? "" : ", ", r + 1);
            }
            if (l == ep.wireup_lane) roles += roles.empty() ? "wire-up lane" : ", wire-up lane";
        }
        std::string text;
        if (!roles.empty()) {
            text = "used: " + roles;
        } else if (std::string reachable = not_chosen(i); !reachable.empty()) {
            text = "not used: " + reachable;  // reached some address of the peer: slower
        } else if (!verdict[i].empty()) {
            text = "not used: " + verdict[i];
        } else {
            const bool offered = std::any_of(address.ifaces.begin(), address.ifaces.end(),
                                             [&](const RemoteIface& ri) { return ri.tl_name == wi.rsc->tl.tl_name; });
            text = offered ? "not used" : "not used: the peer offers no " + wi.rsc->tl.tl_name;
        }
        out += fmt::format("  {}/{}: {}\n", wi.rsc->tl.tl_name, wi.rsc->tl.dev_name, text);
    }
    for (const std::string& l : worker.ifaces_left_out) out += "  " + l + "\n";
    for (const std::string& l : worker.context.left_out()) out += "  " + l + "\n";
}

/** A rendezvous rail needs at least 1/this of the first rail's bandwidth (LOOM_MAX_RNDV_RAILS). */
constexpr double kRailMaxBandwidthRatio = 4.0;

}  // namespace

void ep_select_eager_rails(const Worker& worker, Ep& ep) {
    ep.eager_rail_mask = 0;
    const std::size_t am_max_bcopy = worker.ifaces[ep.lanes[ep.am_lane].iface].attr.am.max_bcopy;
    unsigned rails = 1;  // the AM lane
    for (unsigned r = 0; r < ep.num_rndv_rails && rails < worker.context.config().max_eager_rails; ++r) {
        const std::uint8_t lane = ep.rndv_rails[r];
        if (lane == ep.am_lane) continue;
        // A fragment is cut to the AM lane's size, so it must fit the rail's bcopy too.
        const uct::IfaceAttr& attr = worker.ifaces[ep.lanes[lane].iface].attr;
        if (!(attr.cap_flags & uct::kCapAmBcopy) || attr.am.max_bcopy < am_max_bcopy) continue;
        ep.eager_rail_mask |= static_cast<std::uint8_t>(1u << r);
        ++rails;
    }
}

Status ep_select_lanes(Worker& worker, const UnpackedAddress& address, Ep& ep, std::string* explain) {
    std::vector<std::string> verdict(worker.ifaces.size());
    // What became of each local iface for this peer (the explanation). Unreachable from one
    // of the peer's addresses says less than a reason found after reaching another one.
    auto judge = [&](std::size_t iface, std::string text, bool reached = false) {
        if (verdict[iface].empty() || reached) verdict[iface] = std::move(text);
    };
    struct Candidate {
        std::uint8_t local, remote;
        double cost, bandwidth;
        bool get_zcopy;
        bool to_ep;     ///< connects endpoint to endpoint: needs a wire-up lane
        bool aux_only;  ///< "<tl>:aux" on either side: a wire-up lane only
    };
    std::vector<Candidate> candidates;
    std::string why;
    for (std::size_t i = 0; i < worker.ifaces.size(); ++i) {
        const WorkerIface& wi = worker.ifaces[i];
        for (std::size_t j = 0; j < address.ifaces.size(); ++j) {
            const RemoteIface& ri = address.ifaces[j];
            if (ri.tl_name != wi.rsc->tl.tl_name) continue;
            const bool to_ep = !(wi.attr.cap_flags & uct::kCapConnectToIface);
            if (to_ep && !(wi.attr.cap_flags & uct::kCapConnectToEp)) {
                why += " " + ri.tl_name + ": connects neither to ifaces nor to endpoints;";
                judge(i, "connects neither to ifaces nor to endpoints");
                continue;
            }
            if ((wi.attr.cap_flags & uct::kCapSelfOnly) && address.uuid != worker.uuid) {
                why += " " + ri.tl_name + ": reaches only its own worker;";
                judge(i, "unreachable: reaches only its own worker");
                continue;
            }
            std::string reason;
            if (!wi.iface->is_reachable(ri.dev_addr.data(), ri.dev_addr.size(), ri.iface_addr.data(),
                                        ri.iface_addr.size(), &reason)) {
                why += " " + ri.tl_name + "/" + wi.rsc->tl.dev_name + ": " + reason + ";";
                judge(i, "unreachable: " + reason);
                continue;
            }
            Candidate c;
            c.local = static_cast<std::uint8_t>(i);
            c.remote = static_cast<std::uint8_t>(j);
            c.cost = std::max<double>(wi.attr.latency.c, ri.latency) + wi.attr.overhead + ri.overhead;
            c.bandwidth = std::min<double>(wi.attr.bandwidth_dedicated, ri.bandwidth);
            c.get_zcopy = (wi.attr.cap_flags & uct::kCapGetZcopy) && (ri.cap_flags & uct::kCapGetZcopy);
            c.to_ep = to_ep;
            c.aux_only = wi.rsc->aux_only || (ri.cap_flags & kAddrCapAuxOnly);
            candidates.push_back(c);
        }
    }
    // Endpoint-to-endpoint lanes exchange their addresses over a lane that is up at once:
    // the cheapest connect-to-iface candidate that carries active messages (both sides
    // rank the same way, so both pick the same one). Without one they cannot be used.
    auto name_of = [&](const Candidate& c) { return worker.ifaces[c.local].rsc->tl.tl_name; };
    auto cheaper = [&](const Candidate& a, const Candidate& b) {
        if (a.cost != b.cost) return a.cost < b.cost;
        return name_of(a) < name_of(b);
    };
    std::optional<Candidate> wireup;
    for (const Candidate& c : candidates) {
        if (c.to_ep || !(worker.ifaces[c.local].attr.cap_flags & uct::kCapAmBcopy)) continue;
        if (!wireup || cheaper(c, *wireup)) wireup = c;
    }
    std::erase_if(candidates, [&](const Candidate& c) {
        const std::string name = name_of(c) + "/" + worker.ifaces[c.local].rsc->tl.dev_name;
        if (c.aux_only) {
            why += " " + name + ": only carries wire-up (:aux in LOOM_TLS);";
            judge(c.local, "only carries wire-up (:aux in LOOM_TLS)", true);
            return true;
        }
        if (c.to_ep && !wireup) {
            why += " " + name +
                   ": connects endpoint to endpoint and needs a transport that connects to ifaces (tcp, shm) "
                   "for its wire-up;";
            judge(c.local, "connects endpoint to endpoint and no transport that connects to ifaces carries its wire-up",
                  true);
            return true;
        }
        return false;
    });
    if (candidates.empty()) {
        LOOM_LOG_ERROR("ucp: no transport reaches the peer:{}", why.empty() ? " no transport in common" : why);
        return Status::unreachable;
    }
    // Both sides rank by the same symmetric figures; the transport name breaks ties so
    // both pick the same pair.
    auto am_best = *std::min_element(candidates.begin(), candidates.end(), cheaper);
    const Candidate* rndv_best = nullptr;
    for (const Candidate& c : candidates) {
        if (!c.get_zcopy) continue;
        if (rndv_best == nullptr || c.bandwidth > rndv_best->bandwidth ||
            (c.bandwidth == rndv_best->bandwidth && c.cost < rndv_best->cost)) {
            rndv_best = &c;
        }
    }

    auto open_lane = [&](const Candidate& c) -> Status {
        const WorkerIface& wi = worker.ifaces[c.local];
        const RemoteIface& ri = address.ifaces[c.remote];
        uct::EpParams params;
        if (!c.to_ep) {  // else created unconnected, connected by wire-up (wireup.cc)
            params.dev_addr = ri.dev_addr.data();
            params.dev_addr_len = ri.dev_addr.size();
            params.iface_addr = ri.iface_addr.data();
            params.iface_addr_len = ri.iface_addr.size();
        }
        params.on_error = uct_ep_error;
        params.on_error_arg = &ep;
        // Every lane, not only an idle endpoint's: a rendezvous rail opens on its first GET.
        params.connect_on_first_use = worker.context.config().lazy_connect;
        auto uep = wi.iface->ep_create(params);
        if (!uep) {
            LOOM_LOG_ERROR("ucp: cannot connect {} on {} to the peer: {}", wi.rsc->tl.tl_name, wi.rsc->tl.dev_name,
                           to_string(uep.status()));
            return uep.status();
        }
        ep.lanes[ep.num_lanes++] = Lane{*uep, c.local, ri.index, c.to_ep ? kLaneUnconnected : kLaneReady, ri.md_index};
        return Status::ok;
    };
    ep.wireup_lane = kNoLane;
    if (Status s = open_lane(am_best); s != Status::ok) return s;
    ep.am_lane = 0;
    ep.am_ep = ep.lanes[0].ep;
    ep.rndv_lane = kNoLane;
    if (rndv_best != nullptr) {
        if (rndv_best->local == am_best.local && rndv_best->remote == am_best.remote) {
            ep.rndv_lane = 0;
        } else if (open_lane(*rndv_best) == Status::ok) {
            ep.rndv_lane = 1;
        }
    }
    // Multi-rail: more lanes of the rendezvous lane's transport, each from another local
    // device to another device of the peer, best bandwidth first (the same ranking on both
    // sides). A rail much slower than the first would hold up the message (its share is
    // small, but its fixed costs are not), and another transport's overheads differ: both
    // are left out. The receiver splits its GETs over the rails (rndv_rails.cc).
    ep.num_rndv_rails = 0;
    bool rail_to_ep = false;
    if (ep.rndv_lane != kNoLane) {
        ep.rndv_rails[ep.num_rndv_rails++] = ep.rndv_lane;
        std::vector<const Candidate*> rails{rndv_best};
        std::vector<const Candidate*> more;
        for (const Candidate& c : candidates) {
            if (c.get_zcopy && name_of(c) == name_of(*rndv_best) &&
                c.bandwidth * kRailMaxBandwidthRatio >= rndv_best->bandwidth) {
                more.push_back(&c);
            }
        }
        std::stable_sort(more.begin(), more.end(), [](const Candidate* a, const Candidate* b) {
            return a->bandwidth != b->bandwidth ? a->bandwidth > b->bandwidth : a->cost < b->cost;
        });
        for (const Candidate* c : more) {
            if (ep.num_rndv_rails >= worker.context.config().max_rndv_rails) break;
            // Room for its lane, and for a wire-up lane when one will be needed.
            const bool wireup_needed = am_best.to_ep || rndv_best->to_ep || rail_to_ep || c->to_ep;
            if (ep.num_lanes + 1u + (wireup_needed ? 1u : 0u) > kMaxLanes) continue;
            const bool taken = std::any_of(rails.begin(), rails.end(), [&](const Candidate* r) {
                return r->local == c->local || r->remote == c->remote;
            });
            if (taken) continue;
            std::uint8_t lane = kNoLane;
            if (c->local == am_best.local && c->remote == am_best.remote) {
                lane = 0;
            } else if (open_lane(*c) == Status::ok) {
                lane = static_cast<std::uint8_t>(ep.num_lanes - 1);
            } else {
                continue;
            }
            rails.push_back(c);
            rail_to_ep |= c->to_ep;
            ep.rndv_rails[ep.num_rndv_rails++] = lane;
        }
    }
    ep_select_eager_rails(worker, ep);
    if (am_best.to_ep || (ep.rndv_lane != kNoLane && rndv_best->to_ep) || rail_to_ep) {
        // A lane of its own, even when the rendezvous lane is the same pair: its queue
        // then holds only wire-up messages, never behind a long rendezvous.
        if (Status s = open_lane(*wireup); s != Status::ok) return s;
        ep.wireup_lane = static_cast<std::uint8_t>(ep.num_lanes - 1);
    }
    if (explain != nullptr) {
        explain_lanes(worker, address, ep, verdict, [&](std::size_t iface) -> std::string {
            // Reachable, and not a lane: say what the chosen lanes had that it had not.
            const Candidate* c = nullptr;
            for (const Candidate& x : candidates) {
                if (x.local == iface) c = &x;
            }
            if (c == nullptr) return {};
            std::string text = fmt::format("reachable; the AM lane costs {:.3f} us by the model, this {:.3f} us",
                                           am_best.cost * 1e6, c->cost * 1e6);
            if (rndv_best == nullptr) return text;
            if (!c->get_zcopy) return text + "; no zero-copy GET on both sides for rendezvous";
            text += fmt::format("; rendezvous gets {:.2f} GB/s there, {:.2f} GB/s here",
                                rndv_best->bandwidth / 1e9, c->bandwidth / 1e9);
            if (name_of(*c) == name_of(*rndv_best) &&
                c->bandwidth * kRailMaxBandwidthRatio < rndv_best->bandwidth) {
                text += " (a rendezvous rail needs a quarter of the first one's)";
            }
            return text;
        }, *explain);
    }
    const WorkerIface& am = worker.ifaces[am_best.local];
    ep.max_bcopy = static_cast<std::uint32_t>(std::min<std::size_t>(am.attr.am.max_bcopy, UINT32_MAX));
    ep.protos = worker.proto_table(ep);
    if (ep.protos == nullptr) return Status::no_memory;
    ep.tag_short_limit = fast_path_limit(ep, ProtoOp::tag);
    ep.am_short_limit = fast_path_limit(ep, ProtoOp::am);
    ep.stream_short_limit = fast_path_limit(ep, ProtoOp::stream);
    return Status::ok;
}

std::uint32_t fast_path_limit(const Ep& ep, ProtoOp op) {
    return static_cast<std::uint32_t>(std::min<std::size_t>(ep.protos->fast_path_limit(op), UINT32_MAX));
}

const ProtoTable* Worker::proto_table(const Ep& ep) {
    const std::uint8_t am_iface = ep.lanes[ep.am_lane].iface;
    const std::uint8_t rndv_iface = ep.rndv_lane != kNoLane ? ep.lanes[ep.rndv_lane].iface : 0xff;
    std::array<std::uint8_t, kMaxRndvRails> rail_ifaces;
    rail_ifaces.fill(0xff);
    for (unsigned r = 1; r < ep.num_rndv_rails; ++r) rail_ifaces[r] = ep.lanes[ep.rndv_rails[r]].iface;
    for (const ProtoTableEntry& e : proto_tables) {
        // The lanes' order follows from their ifaces (ep_select_lanes): same ifaces, same lane numbers.
        if (e.am_iface == am_iface && e.rndv_iface == rndv_iface && e.rail_ifaces == rail_ifaces)
            return e.table.get();
    }
    try {
        proto_tables.push_back({am_iface, rndv_iface, rail_ifaces, ProtoTable::build(*this, ep)});
    } catch (const std::bad_alloc&) {
        return nullptr;
    }
    return proto_tables.back().table.get();
}

Result<Ep*> Worker::ep_create(const UnpackedAddress& address, bool internal, unsigned flags_to_set,
                              std::string* explain_out) {
    auto* ep = static_cast<Ep*>(std::calloc(1, sizeof(Ep)));
    if (ep == nullptr) return Status::no_memory;
    new (&ep->outstanding) decltype(ep->outstanding)();
    ep->worker = this;
    ep->remote_uuid = address.uuid;
    ep->flags = static_cast<std::uint8_t>(flags_to_set | (internal ? kEpInternal : 0));
    ep->failure = Status::ok;
    std::string lanes_explained;
    const bool explain = context.config().proto_info || explain_out != nullptr;
    if (Status s = ep_select_lanes(*this, address, *ep, explain ? &lanes_explained : nullptr); s != Status::ok) {
        for (unsigned i = 0; i < ep->num_lanes; ++i) ifaces[ep->lanes[i].iface].iface->ep_destroy(ep->lanes[i].ep);
        std::free(ep);
        return s;
    }
    eps.push_back(*ep);
    ep_by_uuid.emplace(address.uuid, ep);  // keeps the first endpoint to that worker
    wireup_ep_created(*this, ep);
    for_each_family<&ProtoFamily::ep_created>(*this, ep);
    if (explain_out != nullptr) *explain_out = std::move(lanes_explained);
    if (context.config().proto_info) {
        // Asked for explicitly: printed whatever the log level.
        std::string lines = describe_protocols(*ep, "[loom] ");
        if (explain_out == nullptr) {
            std::istringstream in(lanes_explained);
            for (std::string line; std::getline(in, line);) lines += "[loom]   " + line + "\n";
        }
        std::fputs(lines.c_str(), stderr);
    }
    return ep;
}

std::string Worker::describe_protocols(const Ep& ep, const char* prefix) const {
    const WorkerIface& am = ifaces[ep.lanes[ep.am_lane].iface];
    std::string out = fmt::format("{}protocols of the endpoint to worker {:016x} (AM lane {}/{}):\n", prefix,
                                  ep.remote_uuid, am.rsc->tl.tl_name, am.rsc->tl.dev_name);
    if (ep.wireup_lane != kNoLane) {
        const WorkerIface& wl = ifaces[ep.lanes[ep.wireup_lane].iface];
        out += fmt::format("{}  endpoint-to-endpoint lanes wired up over {}/{}\n", prefix, wl.rsc->tl.tl_name,
                           wl.rsc->tl.dev_name);
    }
    return out + ep.protos->describe(*this, ep, prefix);
}

namespace {

/** What purging one lane's queue hands to purge_cb. */
struct Purge {
    Ep* ep;
    std::uint8_t lane;
    std::vector<Request*> queued;        ///< the send queue's requests: aborted after the purge
    std::vector<uct::PendingReq*> others;  ///< anything else: run once more, it finds the endpoint failed
};

void purge_cb(uct::PendingReq* pending, void* arg) {
    auto* purge = static_cast<Purge*>(arg);
    if (!is_send_queued(pending)) {
        purge->others.push_back(pending);
        return;
    }
    --purge->ep->queued_on(purge->lane);
    purge->queued.push_back(reinterpret_cast<Request*>(reinterpret_cast<char*>(pending) - offsetof(Request, pending)));
}

/**
 * Empties the queue of every lane of @p ep (marked failed): each request fails through
 * its abort with @p status, after the purge, so that what an abort starts finds the
 * queues settled.
 */
void purge_lanes(Ep* ep, Status status) {
    for (std::uint8_t lane = 0; lane < ep->num_lanes; ++lane) {
        uct::Ep* uep = lane == ep->am_lane ? ep->am_ep : ep->lanes[lane].ep;
        if (uep == nullptr) continue;
        Purge purge{ep, lane, {}, {}};
        uct::ep_pending_purge(uep, purge_cb, &purge);
        for (Request* req : purge.queued) abort_queued(req, status);
        for (uct::PendingReq* pending : purge.others) (void)pending->func(pending);
    }
}

/**
 * Ends every transfer still in flight on the lanes of @p ep (failed), as UCX discards a
 * failed endpoint's lanes. One lane's failure says the peer is gone, but a transfer on
 * another lane ends only when that transport notices too: a rendezvous GET on rc waits for
 * the QP's retries, which had not given up 30 s after the peer died (Soft-RoCE, in the VM,
 * the failure seen on the tcp lane that wired rc up). Cancelled transfers complete with
 * canceled; the requests they serve report the endpoint's failure.
 */
void cancel_lanes(Ep* ep) {
    for (std::uint8_t lane = 0; lane < ep->num_lanes; ++lane) {
        uct::Ep* uep = ep->lanes[lane].ep;
        if (uep != nullptr) (void)uct::ep_flush(uep, uct::kFlushCancel, nullptr);
    }
}

}  // namespace

void Worker::ep_destroy(Ep* ep, Status status) {
    for (Request& req : flush_waiters.safe()) {
        if (req.ep != ep) continue;
        decltype(flush_waiters)::remove(req);
        complete(&req, Status::canceled);
    }
    forget_rail_closed(ep);
    // Failed from here on: anything retried during the purges below fails instead of
    // starting transfers on lanes about to be destroyed.
    ep->flags |= kEpFailed;
    if (ep->failure == Status::ok) ep->failure = status;
    purge_lanes(ep, status);
    for_each_family<&ProtoFamily::ep_purge>(*this, ep, status);
    wireup_ep_gone(*this, ep);
    while (!ep->outstanding.empty()) complete(&ep->outstanding.front(), status);
    for_each_family<&ProtoFamily::ep_closed>(*this, ep, status);
    for (unsigned i = 0; i < ep->num_lanes; ++i) ifaces[ep->lanes[i].iface].iface->ep_destroy(ep->lanes[i].ep);
    auto it = ep_by_uuid.find(ep->remote_uuid);
    if (it != ep_by_uuid.end() && it->second == ep) ep_by_uuid.erase(it);
    decltype(eps)::remove(*ep);
    std::free(ep);
}

bool rail_close_waits(const Ep& ep, const uct::Ep* uep, Status status) {
    if (status != Status::connection_reset || (ep.flags & kEpFailed) || uep == nullptr || uep == ep.am_ep)
        return false;
    for (unsigned r = 1; r < ep.num_rndv_rails; ++r) {
        const std::uint8_t lane = ep.rndv_rails[r];
        if (ep.lanes[lane].ep == uep) return lane != ep.am_lane && lane != ep.wireup_lane;
    }
    return false;
}

void Worker::lane_failed(Ep* ep, const uct::Ep* uep, Status status) {
    if (!rail_close_waits(*ep, uep, status)) {
        ep_fail(ep, status);
        return;
    }
    // A rail's GETs in flight fail on their own (their receive reports it); new messages
    // go over the first rail only.
    if (ep->flags & kEpRailClosed) return;
    ep->flags |= kEpRailClosed;
    rails_closed.emplace_back(ep, ucs::get_time() + ucs::ns_to_ticks(kRailCloseGraceNs));
    LOOM_LOG_DEBUG(
        "ucp: endpoint to {:016x}: the peer closed a rendezvous rail; its AM lane's messages first",
        ep->remote_uuid);
}

unsigned Worker::check_rails_closed() {
    const ucs::Ticks now = ucs::get_time();
    std::vector<Ep*> due;
    std::erase_if(rails_closed, [&](const std::pair<Ep*, ucs::Ticks>& e) {
        if (e.second > now) return false;
        due.push_back(e.first);
        return true;
    });
    for (Ep* ep : due) {
        LOOM_LOG_DIAG(
            "ucp: endpoint to {:016x}: the peer closed a rendezvous rail, and its AM lane stayed up {} ms",
            ep->remote_uuid, kRailCloseGraceNs / 1000000);
        ep_fail(ep, Status::connection_reset);
    }
    return static_cast<unsigned>(due.size());
}

void Worker::forget_rail_closed(Ep* ep) {
    if (!(ep->flags & kEpRailClosed)) return;
    std::erase_if(rails_closed, [ep](const std::pair<Ep*, ucs::Ticks>& e) { return e.first == ep; });
}

void Worker::ep_fail(Ep* ep, Status status) {
    if (ep->flags & kEpFailed) return;
    forget_rail_closed(ep);
    ep->flags |= kEpFailed;
    ep->failure = status;
    LOOM_LOG_DIAG("ucp: endpoint to {:016x} failed: {}", ep->remote_uuid, to_string(status));
    purge_lanes(ep, status);
    for_each_family<&ProtoFamily::ep_purge>(*this, ep, status);
    while (!ep->outstanding.empty()) complete(&ep->outstanding.front(), status);
    for_each_family<&ProtoFamily::ep_failed>(*this, ep, status);
    cancel_lanes(ep);
    if (ep->on_error != nullptr && !(ep->flags & kEpInternal)) {
        ep->on_error(ep->on_error_arg, reinterpret_cast<loom_ep_h>(ep), static_cast<loom_status_t>(status));
    }
}

}  // namespace loom::ucp
