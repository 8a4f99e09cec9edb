/**
 * uct-level tests of loom_perftest: one transport on one device, measured alone.
 *
 * Latency tests are ping-pongs (one-way latency = round trip / 2); bandwidth tests
 * stream messages with a credit window (am_bw) or issue puts/gets and finish with a
 * "done" active message, so the target's progress runs wherever the transport
 * needs it (tcp performs put/get in the target's progress).
 */
#include "perftest.h"

#include "ucs/debug/log.h"
#include "ucs/memory/aligned.h"
#include "ucs/sys/module.h"
#include "ucs/time/clock.h"
#include "uct/api/uct.h"
#include "uct/base/uct_worker.h"

#include <poll.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace loom::perftest {

namespace {

constexpr uct::AmId kAmData = 1;    ///< ping/pong and bandwidth payload
constexpr uct::AmId kAmCredit = 2;  ///< am_bw: the receiver returns credits
constexpr uct::AmId kAmDone = 3;    ///< put/get tests: the initiator has finished

/** One endpoint of the test: a worker, a memory domain, an iface, buffers and an ep to the peer. */
struct Side {
    uct::Worker worker;
    std::unique_ptr<uct::Md> md;
    std::unique_ptr<uct::Iface> iface;
    uct::IfaceAttr attr;
    uct::MdAttr md_attr;
    const uct::Component* component = nullptr;

    std::uint8_t* send_buf = nullptr;
    std::uint8_t* recv_buf = nullptr;
    std::size_t buf_size = 0;
    uct::MemH send_memh = uct::kMemHNull;
    uct::MemH recv_memh = uct::kMemHNull;

    uct::Ep* ep = nullptr;
    uct::Rkey peer_rkey;
    std::uint64_t peer_recv_addr = 0;

    // Written by AM handlers, read by the loops (same thread).
    std::uint64_t last_sn = ~0ull;
    std::uint64_t received = 0;
    std::uint64_t credits_returned = 0;  ///< initiator: credits the target returned
    std::uint64_t credited = 0;          ///< target: messages it has returned credits for
    bool done = false;
    int wait_fd = -1;  ///< -E sleep: the iface's event fd, slept on when progress finds nothing

    ~Side() {
        if (ep) iface->ep_destroy(ep);
        if (peer_rkey.handle) component->rkey_release(peer_rkey);
        if (send_memh) (void)md->mem_dereg(send_memh);
        if (recv_memh) (void)md->mem_dereg(recv_memh);
        iface.reset();
        md.reset();
        ucs::free_aligned(send_buf);
        ucs::free_aligned(recv_buf);
    }
};

Status on_data(void* arg, void* data, std::size_t length, unsigned) {
    auto* side = static_cast<Side*>(arg);
    std::uint64_t sn;
    std::memcpy(&sn, data, sizeof(sn));
    (void)length;
    side->last_sn = sn;
    ++side->received;
    return Status::ok;
}

Status on_credit(void* arg, void* data, std::size_t, unsigned) {
    auto* side = static_cast<Side*>(arg);
    std::memcpy(&side->credits_returned, data, sizeof(std::uint64_t));
    return Status::ok;
}

Status on_done(void* arg, void*, std::size_t, unsigned) {
    static_cast<Side*>(arg)->done = true;
    return Status::ok;
}

/** Finds and opens @p tl on @p dev; explains what exists when it is not there. */
Status open_side(const Params& params, Side& side) {
    (void)ucs::load_modules("uct");
    std::string available;
    for (const uct::Component* component : uct::components()) {
        for (const std::string& md_name : component->query_md_resources()) {
            auto md = component->md_open(md_name);
            if (!md) continue;
            for (const uct::TlResource& tl : (*md)->query_tl_resources()) {
                available += " " + tl.tl_name + "/" + tl.dev_name;
                if (tl.tl_name != params.tl || tl.dev_name != params.dev) continue;
                side.component = component;
                side.md = std::move(*md);
                auto iface = side.md->iface_open(tl, &side.worker, {});
                if (!iface) {
                    LOOM_LOG_ERROR("perftest: cannot open {} on {}: {}", params.tl, params.dev,
                                   to_string(iface.status()));
                    return iface.status();
                }
                side.iface = std::move(*iface);
                if (Status s = side.iface->query(side.attr); s != Status::ok) return s;
                if (Status s = side.md->query(side.md_attr); s != Status::ok) return s;
                return side.iface->progress_enable();
            }
        }
    }
    LOOM_LOG_ERROR("perftest: transport '{}' on device '{}' is not available here; available:{}", params.tl,
                   params.dev, available.empty() ? " none" : available);
    return Status::no_device;
}

/** Checks that the transport can run the test as asked, with one clear line when not. */
Status check_support(const Params& params, const Side& side) {
    using namespace uct;
    const IfaceAttr& a = side.attr;
    auto need = [&](std::uint64_t cap, const char* what) {
        if (a.cap_flags & cap) return Status::ok;
        LOOM_LOG_ERROR("perftest: {} does not support {}", params.tl, what);
        return Status::unsupported;
    };
    auto fits = [&](std::size_t max, const char* what) {
        if (params.size <= max) return Status::ok;
        LOOM_LOG_ERROR("perftest: size {} exceeds the {} limit of {} ({})", params.size, what, max, params.tl);
        return Status::exceeds_limit;
    };
    bool am = params.test == TestKind::am_lat || params.test == TestKind::am_bw;
    bool put = params.test == TestKind::put_lat || params.test == TestKind::put_bw;
    if (params.size < 8) {
        LOOM_LOG_ERROR("perftest: message size must be at least 8 bytes (it carries a sequence number)");
        return Status::invalid_param;
    }
    if (am) {
        switch (params.layout) {
        case DataLayout::short_:
            if (Status s = need(kCapAmShort, "am_short"); s != Status::ok) return s;
            return fits(a.am.max_short + 8, "am_short");
        case DataLayout::bcopy:
            if (Status s = need(kCapAmBcopy, "am_bcopy"); s != Status::ok) return s;
            return fits(a.am.max_bcopy, "am_bcopy");
        case DataLayout::zcopy:
            if (Status s = need(kCapAmZcopy, "am_zcopy"); s != Status::ok) return s;
            return fits(a.am.max_zcopy + 8, "am_zcopy");
        }
    }
    if (put) {
        switch (params.layout) {
        case DataLayout::short_:
            if (Status s = need(kCapPutShort, "put_short"); s != Status::ok) return s;
            return fits(a.put.max_short, "put_short");
        case DataLayout::bcopy:
            if (Status s = need(kCapPutBcopy, "put_bcopy"); s != Status::ok) return s;
            return fits(a.put.max_bcopy, "put_bcopy");
        case DataLayout::zcopy:
            if (Status s = need(kCapPutZcopy, "put_zcopy"); s != Status::ok) return s;
            return fits(a.put.max_zcopy, "put_zcopy");
        }
    }
    switch (params.layout) {
    case DataLayout::short_:
        LOOM_LOG_ERROR("perftest: get has no short flavour (use -D bcopy or -D zcopy)");
        return Status::invalid_param;
    case DataLayout::bcopy:
        if (Status s = need(kCapGetBcopy, "get_bcopy"); s != Status::ok) return s;
        return fits(a.get.max_bcopy, "get_bcopy");
    case DataLayout::zcopy:
        if (Status s = need(kCapGetZcopy, "get_zcopy"); s != Status::ok) return s;
        return fits(a.get.max_zcopy, "get_zcopy");
    }
    return Status::ok;
}

Status setup_buffers(const Params& params, Side& side) {
    side.buf_size = std::max<std::size_t>(params.size, 64);
    void* send = nullptr;
    void* recv = nullptr;
    if (Status s = ucs::alloc_aligned(side.buf_size, 4096, send); s != Status::ok) return s;
    side.send_buf = static_cast<std::uint8_t*>(send);
    if (Status s = ucs::alloc_aligned(side.buf_size, 4096, recv); s != Status::ok) return s;
    side.recv_buf = static_cast<std::uint8_t*>(recv);
    std::memset(side.send_buf, 0xab, side.buf_size);
    std::memset(side.recv_buf, 0, side.buf_size);
    if (side.md_attr.flags & uct::MdAttr::kReg) {
        auto send = side.md->mem_reg(side.send_buf, side.buf_size, uct::kAccessAll);
        auto recv = side.md->mem_reg(side.recv_buf, side.buf_size, uct::kAccessAll);
        if (!send || !recv) {
            LOOM_LOG_ERROR("perftest: memory registration failed");
            return send ? recv.status() : send.status();
        }
        side.send_memh = *send;
        side.recv_memh = *recv;
    }
    (void)side.iface->set_am_handler(kAmData, on_data, &side, 0);
    (void)side.iface->set_am_handler(kAmCredit, on_credit, &side, 0);
    (void)side.iface->set_am_handler(kAmDone, on_done, &side, 0);
    return Status::ok;
}

/** True when the transport connects endpoint to endpoint only (rc over verbs: RoCE, InfiniBand). */
bool connects_to_ep(const Side& side) {
    return !(side.attr.cap_flags & uct::kCapConnectToIface) && (side.attr.cap_flags & uct::kCapConnectToEp);
}

/**
 * What a peer needs: device and iface addresses, the endpoint address (connect-to-ep
 * transports: the endpoint is created here, connected later by connect_side), the
 * packed key and address of its receive buffer.
 */
Result<std::vector<std::uint8_t>> pack_info(Side& side) {
    std::vector<std::uint8_t> dev(side.attr.device_addr_len), iface(side.attr.iface_addr_len), ep_addr;
    std::vector<std::uint8_t> rkey(side.md_attr.rkey_packed_size);
    (void)side.iface->get_device_address(dev.data());
    (void)side.iface->get_address(iface.data());
    if (connects_to_ep(side)) {
        if (side.ep == nullptr) {
            auto ep = side.iface->ep_create(uct::EpParams{});
            if (!ep) {
                LOOM_LOG_ERROR("perftest: cannot create an endpoint: {}", to_string(ep.status()));
                return ep.status();
            }
            side.ep = *ep;
        }
        ep_addr.resize(side.attr.ep_addr_len);
        if (Status s = side.iface->ep_get_address(side.ep, ep_addr.data()); s != Status::ok) return s;
    }
    if (side.recv_memh && !rkey.empty()) (void)side.md->mkey_pack(side.recv_memh, rkey.data());
    std::vector<std::uint8_t> blob;
    auto put = [&](const std::vector<std::uint8_t>& part) {
        std::uint32_t n = static_cast<std::uint32_t>(part.size());
        blob.insert(blob.end(), reinterpret_cast<std::uint8_t*>(&n), reinterpret_cast<std::uint8_t*>(&n) + 4);
        blob.insert(blob.end(), part.begin(), part.end());
    };
    put(dev);
    put(iface);
    put(ep_addr);
    put(rkey);
    std::uint64_t addr = reinterpret_cast<std::uint64_t>(side.recv_buf);
    blob.insert(blob.end(), reinterpret_cast<std::uint8_t*>(&addr), reinterpret_cast<std::uint8_t*>(&addr) + 8);
    return blob;
}

Status connect_side(Side& side, const std::vector<std::uint8_t>& peer) {
    std::vector<std::vector<std::uint8_t>> parts;
    std::size_t pos = 0;
    for (int i = 0; i < 4; ++i) {
        std::uint32_t n;
        if (pos + 4 > peer.size()) return Status::malformed_packet;
        std::memcpy(&n, peer.data() + pos, 4);
        pos += 4;
        if (pos + n > peer.size()) return Status::malformed_packet;
        parts.emplace_back(peer.begin() + static_cast<long>(pos), peer.begin() + static_cast<long>(pos + n));
        pos += n;
    }
    if (pos + 8 != peer.size()) return Status::malformed_packet;
    std::memcpy(&side.peer_recv_addr, peer.data() + pos, 8);
    if (connects_to_ep(side)) {
        // pack_info made the endpoint; now it learns the peer's.
        if (side.ep == nullptr) return Status::invalid_param;
        if (Status s = side.iface->ep_connect_to_ep(side.ep, parts[0].data(), parts[0].size(), parts[2].data(),
                                                    parts[2].size());
            s != Status::ok) {
            LOOM_LOG_ERROR("perftest: cannot connect to the peer's endpoint: {}", to_string(s));
            return s;
        }
    } else {
        uct::EpParams ep_params;
        ep_params.dev_addr = parts[0].data();
        ep_params.dev_addr_len = parts[0].size();
        ep_params.iface_addr = parts[1].data();
        ep_params.iface_addr_len = parts[1].size();
        auto ep = side.iface->ep_create(ep_params);
        if (!ep) {
            LOOM_LOG_ERROR("perftest: cannot create an endpoint to the peer: {}", to_string(ep.status()));
            return ep.status();
        }
        side.ep = *ep;
    }
    auto rkey = side.component->rkey_unpack(parts[3].data(), parts[3].size());
    if (!rkey) {
        LOOM_LOG_ERROR("perftest: cannot unpack the peer's remote key: {}", to_string(rkey.status()));
        return rkey.status();
    }
    side.peer_rkey = *rkey;
    return Status::ok;
}

// --- sending ------------------------------------------------------------------------

struct PackArg {
    const Side* side;
    std::uint64_t sn;
    std::size_t size;
};

std::size_t pack_data(void* dest, void* arg) {
    auto* a = static_cast<PackArg*>(arg);
    std::memcpy(dest, &a->sn, 8);
    std::memcpy(static_cast<std::uint8_t*>(dest) + 8, a->side->send_buf + 8, a->size - 8);
    return a->size;
}

/** Sends one data message carrying @p sn; no_resource is returned to the caller. */
Status send_am(Side& side, const Params& params, std::uint64_t sn) {
    switch (params.layout) {
    case DataLayout::short_:
        return uct::ep_am_short(side.ep, kAmData, sn, side.send_buf + 8, static_cast<unsigned>(params.size - 8));
    case DataLayout::bcopy: {
        PackArg arg{&side, sn, params.size};
        ssize_t n = uct::ep_am_bcopy(side.ep, kAmData, pack_data, &arg, 0);
        return n < 0 ? static_cast<Status>(n) : Status::ok;
    }
    case DataLayout::zcopy: {
        uct::Iov iov{side.send_buf + 8, params.size - 8, side.send_memh};
        Status s = uct::ep_am_zcopy(side.ep, kAmData, &sn, 8, &iov, params.size > 8 ? 1 : 0, 0, nullptr);
        return s == Status::in_progress ? Status::ok : s;  // completion counted by the flush at the end
    }
    }
    return Status::invalid_param;
}

/** Puts @p size bytes ending with @p sn into the peer's receive buffer. */
Status send_put(Side& side, const Params& params, std::uint64_t sn) {
    std::memcpy(side.send_buf + params.size - 8, &sn, 8);
    std::uint64_t rkey = side.peer_rkey.rkey;
    switch (params.layout) {
    case DataLayout::short_:
        return uct::ep_put_short(side.ep, side.send_buf, static_cast<unsigned>(params.size), side.peer_recv_addr,
                                 rkey);
    case DataLayout::bcopy: {
        PackArg arg{&side, sn, params.size};
        ssize_t n = uct::ep_put_bcopy(
            side.ep,
            [](void* dest, void* a) -> std::size_t {
                auto* p = static_cast<PackArg*>(a);
                std::memcpy(dest, p->side->send_buf, p->size);
                return p->size;
            },
            &arg, side.peer_recv_addr, rkey);
        return n < 0 ? static_cast<Status>(n) : Status::ok;
    }
    case DataLayout::zcopy: {
        uct::Iov iov{side.send_buf, params.size, side.send_memh};
        Status s = uct::ep_put_zcopy(side.ep, &iov, 1, side.peer_recv_addr, rkey, nullptr);
        return s == Status::in_progress ? Status::ok : s;
    }
    }
    return Status::invalid_param;
}

/**
 * One progress call of @p side; with -E sleep, a call that found nothing arms the iface
 * and sleeps on its event fd until a completion (at most 100 ms, a safety net).
 */
unsigned progress_or_sleep(Side& side) {
    unsigned n = side.worker.progress();
    if (n != 0 || side.wait_fd < 0) return n;
    if (side.iface->event_arm() == Status::ok) {
        pollfd pfd{side.wait_fd, POLLIN, 0};
        (void)::poll(&pfd, 1, 100);
    }
    return n;
}

/** Retries @p op while it says no_resource, progressing @p side in between. */
template <typename Op>
Status retry(Side& side, Op op) {
    for (;;) {
        Status s = op();
        if (s != Status::no_resource) return s;
        progress_or_sleep(side);
    }
}

/** Progresses until @p done(). */
template <typename Pred>
void progress_until(Side& side, Pred done) {
    while (!done()) progress_or_sleep(side);
}

/**
 * The passive side of a one-sided bandwidth test: progresses while there is work and
 * sleeps once there has been none for a while, as perftest's ib_write_bw target does
 * (it waits in a socket read). Where the iface has an event fd (tcp, rc) it arms the
 * iface and sleeps on the fd until a completion or connection event (the "done" message
 * is one), with a 100 ms bound as a safety net; a network iface without one naps 50 us at
 * a time. shm and self keep busy-polling: their emulated put/get runs in the target's
 * progress and they have no fd to wake on.
 * Measured reason (docs/performance.md): under Soft-RoCE every CPU cycle a target spends
 * is taken from the emulator's kernel work that moves the data, even its wake-ups.
 */
void idle_until_done(Side& side) {
    const bool can_sleep = side.iface->resource().dev_type == uct::DeviceType::net;
    int fd = -1;
    if (can_sleep && (side.attr.cap_flags & uct::kCapEventRecv)) {
        if (auto efd = side.iface->event_fd()) fd = *efd;
    }
    constexpr unsigned kIdleSpins = 1000;
    unsigned idle = 0;
    while (!side.done) {
        if (side.worker.progress() != 0) {
            idle = 0;
            continue;
        }
        if (!can_sleep || ++idle < kIdleSpins) continue;
        if (fd >= 0) {
            Status armed = side.iface->event_arm();
            if (armed == Status::busy) continue;  // work arrived meanwhile: progress it first
            if (armed != Status::ok) {
                fd = -1;  // the iface cannot sleep after all: nap instead
                continue;
            }
            pollfd pfd{fd, POLLIN, 0};
            (void)::poll(&pfd, 1, 100);
        } else {
            timespec nap{0, 50'000};
            (void)::nanosleep(&nap, nullptr);
        }
    }
}

Status flush(Side& side) {
    struct Flag : uct::Completion {
        bool fired = false;
    } comp;
    comp.func = [](uct::Completion* c) { static_cast<Flag*>(c)->fired = true; };
    comp.count = 1;
    comp.status = Status::ok;
    Status s = retry(side, [&] { return uct::ep_flush(side.ep, uct::kFlushLocal, &comp); });
    if (s == Status::in_progress) {
        progress_until(side, [&] { return comp.fired; });
        s = comp.status;
    }
    return s;
}

Status send_done(Side& side) {
    return retry(side, [&] { return uct::ep_am_short(side.ep, kAmDone, 0, nullptr, 0); });
}

// --- measurement ------------------------------------------------------------------------

// --- the tests ---------------------------------------------------------------------------

/** One ping-pong: the initiator sends sn and waits for it to come back. */
Status am_ping(Side& me, const Params& params, std::uint64_t sn, Side* loop_peer) {
    if (Status s = retry(me, [&] { return send_am(me, params, sn); }); s != Status::ok) return s;
    if (loop_peer) {
        progress_until(*loop_peer, [&] { return loop_peer->last_sn == sn; });
        if (Status s = retry(*loop_peer, [&] { return send_am(*loop_peer, params, sn); }); s != Status::ok) return s;
    }
    progress_until(me, [&] { return me.last_sn == sn; });
    return Status::ok;
}

Status am_pong(Side& me, const Params& params, std::uint64_t sn) {
    progress_until(me, [&] { return me.last_sn == sn; });
    return retry(me, [&] { return send_am(me, params, sn); });
}

Status put_ping(Side& me, const Params& params, std::uint64_t sn, Side* loop_peer) {
    auto arrived = [&](Side& s) {
        std::uint64_t got;
        std::memcpy(&got, const_cast<const std::uint8_t*>(s.recv_buf) + params.size - 8, 8);
        return got == sn;
    };
    if (Status s = retry(me, [&] { return send_put(me, params, sn); }); s != Status::ok) return s;
    if (loop_peer) {
        progress_until(*loop_peer, [&] { return arrived(*loop_peer); });
        if (Status s = retry(*loop_peer, [&] { return send_put(*loop_peer, params, sn); }); s != Status::ok) return s;
    }
    progress_until(me, [&] { return arrived(me); });
    return Status::ok;
}

Status put_pong(Side& me, const Params& params, std::uint64_t sn) {
    progress_until(me, [&] {
        std::uint64_t got;
        std::memcpy(&got, const_cast<const std::uint8_t*>(me.recv_buf) + params.size - 8, 8);
        return got == sn;
    });
    return retry(me, [&] { return send_put(me, params, sn); });
}

struct GetCompletion : uct::Completion {
    bool fired = false;
};

Status get_one(Side& me, const Params& params, Side* loop_peer) {
    GetCompletion comp;
    comp.func = [](uct::Completion* c) { static_cast<GetCompletion*>(c)->fired = true; };
    comp.count = 1;
    comp.status = Status::ok;
    Status s;
    if (params.layout == DataLayout::bcopy) {
        s = retry(me, [&] {
            return uct::ep_get_bcopy(
                me.ep, [](void* arg, const void* data, std::size_t n) { std::memcpy(arg, data, n); }, me.recv_buf,
                params.size, me.peer_recv_addr, me.peer_rkey.rkey, &comp);
        });
    } else {
        uct::Iov iov{me.recv_buf, params.size, me.recv_memh};
        s = retry(me, [&] { return uct::ep_get_zcopy(me.ep, &iov, 1, me.peer_recv_addr, me.peer_rkey.rkey, &comp); });
    }
    if (s == Status::in_progress) {
        while (!comp.fired) {
            me.worker.progress();
            if (loop_peer) loop_peer->worker.progress();
        }
        s = comp.status;
    }
    return s;
}

/**
 * get_bw: issues one more get while keeping at most @p window in flight (the data of
 * all of them lands in the same buffer: only the bandwidth is measured, as ib_read_bw
 * does). get_bw_drain() waits for the rest at the end.
 */
struct GetWindow : uct::Completion {
    std::uint64_t issued = 0;
    std::uint64_t completed = 0;
    Status first_error = Status::ok;
};
GetWindow g_get_window;

void get_window_done(uct::Completion* c) {
    auto* w = static_cast<GetWindow*>(c);
    ++w->completed;
    if (w->status != Status::ok && w->first_error == Status::ok) w->first_error = w->status;
    w->status = Status::ok;
    w->count = 1;  // re-armed: every get completes it once
}

Status get_windowed(Side& me, const Params& params, std::uint64_t window, Side* loop_peer) {
    GetWindow& w = g_get_window;
    if (w.func == nullptr) {
        w.func = get_window_done;
        w.count = 1;
        w.status = Status::ok;
    }
    while (w.issued - w.completed >= window) {
        progress_or_sleep(me);
        if (loop_peer) loop_peer->worker.progress();
    }
    Status s;
    if (params.layout == DataLayout::bcopy) {
        s = retry(me, [&] {
            return uct::ep_get_bcopy(
                me.ep, [](void* arg, const void* data, std::size_t n) { std::memcpy(arg, data, n); }, me.recv_buf,
                params.size, me.peer_recv_addr, me.peer_rkey.rkey, &w);
        });
    } else {
        uct::Iov iov{me.recv_buf, params.size, me.recv_memh};
        s = retry(me, [&] { return uct::ep_get_zcopy(me.ep, &iov, 1, me.peer_recv_addr, me.peer_rkey.rkey, &w); });
    }
    if (s == Status::in_progress) {
        ++w.issued;
        return w.first_error;
    }
    return s;
}

Status get_bw_drain(Side& me) {
    GetWindow& w = g_get_window;
    while (w.completed < w.issued) progress_or_sleep(me);
    return w.first_error;
}

/**
 * am_bw target: progresses once and returns credits in batches of half a window (and
 * for the last warm-up and the last message, which the initiator waits for), so the
 * initiator never has more than a window in flight.
 */
Status credit_step(Side& me, const Params& params) {
    me.worker.progress();
    std::uint64_t window = params.outstanding ? params.outstanding : params.window;
    std::uint64_t total = params.warmup + params.iters;
    if (me.received == me.credited) return Status::ok;
    if (me.received >= me.credited + std::max<std::uint64_t>(window / 2, 1) || me.received == total ||
        me.received == params.warmup) {
        std::uint64_t credit = me.received;
        Status s = uct::ep_am_short(me.ep, kAmCredit, credit, nullptr, 0);
        if (s == Status::ok) me.credited = credit;
        return s == Status::no_resource ? Status::ok : s;  // retried on the next step
    }
    return Status::ok;
}

/**
 * Waits until every warm-up operation of a bandwidth test has completed: the target
 * returned credit for all of them (am_bw), a flush (put_bw), or the window is empty
 * (get_bw).
 */
Status drain_warmup(const Params& params, Side& me, Side* loop_peer) {
    switch (params.test) {
    case TestKind::am_bw:
        while (me.credits_returned < params.warmup) {
            me.worker.progress();
            if (loop_peer && credit_step(*loop_peer, params) != Status::ok) return Status::io_error;
        }
        return Status::ok;
    case TestKind::put_bw: return flush(me);
    case TestKind::get_bw: return get_bw_drain(me);
    default: return Status::ok;
    }
}

/** The initiator's loop (client, or both roles in loopback mode). */
Status run_initiator(const Params& params, Side& me, Side* loop_peer, const OutputOptions& out, Report& report) {
    const std::uint64_t total = params.warmup + params.iters;
    bool latency = is_latency_test(params.test);
    std::unique_ptr<Meter> meter;
    ucs::Ticks t0 = 0;
    std::uint64_t window = params.outstanding ? params.outstanding : params.window;
    for (std::uint64_t i = 0; i < total; ++i) {
        if (i == params.warmup) {
            // Warm-up operations of a bandwidth test may still be in flight: measuring from
            // here would charge their transfer to the measured ones (10 % of the run with
            // -w 5 -n 50). Wait for them, as ucx_perftest flushes after its warm-up.
            if (i != 0 && !latency) {
                if (Status s = drain_warmup(params, me, loop_peer); s != Status::ok) return s;
            }
            meter = std::make_unique<Meter>(params, out, latency);
        }
        if (meter) t0 = ucs::get_time();
        Status s = Status::ok;
        switch (params.test) {
        case TestKind::am_lat: s = am_ping(me, params, i, loop_peer); break;
        case TestKind::put_lat: s = put_ping(me, params, i, loop_peer); break;
        case TestKind::get_lat: s = get_one(me, params, loop_peer); break;
        case TestKind::get_bw: s = get_windowed(me, params, window, loop_peer); break;
        case TestKind::am_bw:
            // Keep at most `window` messages beyond the last credit the receiver returned.
            while (i >= me.credits_returned + window) {
                me.worker.progress();
                if (loop_peer && credit_step(*loop_peer, params) != Status::ok) return Status::io_error;
            }
            s = retry(me, [&] {
                Status r = send_am(me, params, i);
                if (r == Status::no_resource && loop_peer) loop_peer->worker.progress();
                return r;
            });
            break;
        case TestKind::put_bw:
            s = retry(me, [&] {
                Status r = send_put(me, params, i);
                if (r == Status::no_resource && loop_peer) loop_peer->worker.progress();
                return r;
            });
            break;
        default: return Status::invalid_param;  // ucp tests run in ucp_runner.cc
        }
        if (s != Status::ok) {
            LOOM_LOG_ERROR("perftest: iteration {} failed: {}", i, to_string(s));
            return s;
        }
        if (meter) {
            ucs::Ticks now = ucs::get_time();
            meter->sample(i - params.warmup, now, now - t0);
        }
    }
    // Bandwidth tests end when the target has everything: wait for the last credit, or flush.
    if (params.test == TestKind::am_bw) {
        while (me.credits_returned < total) {
            me.worker.progress();
            if (loop_peer && credit_step(*loop_peer, params) != Status::ok) return Status::io_error;
        }
    } else if (params.test == TestKind::put_bw) {
        if (Status s = flush(me); s != Status::ok) return s;
    } else if (params.test == TestKind::get_bw) {
        if (Status s = get_bw_drain(me); s != Status::ok) return s;
    }
    if (meter) meter->finish(params.iters, report);
    return send_done(me);
}

/** The target's loop (server). */
Status run_target(const Params& params, Side& me) {
    const std::uint64_t total = params.warmup + params.iters;
    switch (params.test) {
    case TestKind::am_lat:
        for (std::uint64_t i = 0; i < total; ++i) {
            if (Status s = am_pong(me, params, i); s != Status::ok) return s;
        }
        break;
    case TestKind::put_lat:
        for (std::uint64_t i = 0; i < total; ++i) {
            if (Status s = put_pong(me, params, i); s != Status::ok) return s;
        }
        break;
    case TestKind::am_bw:
        while (me.credited < total) {
            if (Status s = credit_step(me, params); s != Status::ok) return s;
        }
        break;
    case TestKind::put_bw:
    case TestKind::get_bw:
        idle_until_done(me);
        return flush(me);
    default: break;
    }
    // Every test ends with the initiator's "done": keep progressing until then (the
    // target's progress performs put/get for transports that emulate them).
    progress_until(me, [&] { return me.done; });
    return flush(me);
}

}  // namespace

Status run_uct_test(const Params& params, Role role, Oob* oob, const OutputOptions& out, Report& report) {
    if (is_ucp_test(params.test)) return Status::invalid_param;
    Side me;
    if (Status s = open_side(params, me); s != Status::ok) return s;
    if (Status s = check_support(params, me); s != Status::ok) return s;
    if (Status s = setup_buffers(params, me); s != Status::ok) return s;

    if (role == Role::loopback) {
        Side peer;
        if (Status s = open_side(params, peer); s != Status::ok) return s;
        if (Status s = setup_buffers(params, peer); s != Status::ok) return s;
        auto my_info = pack_info(me);
        auto peer_info = pack_info(peer);
        if (!my_info) return my_info.status();
        if (!peer_info) return peer_info.status();
        if (Status s = connect_side(me, *peer_info); s != Status::ok) return s;
        if (Status s = connect_side(peer, *my_info); s != Status::ok) return s;
        print_header(out, params);
        Status s = run_initiator(params, me, &peer, out, report);
        if (s == Status::ok) progress_until(peer, [&] { return peer.done; });
        return s;
    }

    auto my_info = pack_info(me);
    if (!my_info) return my_info.status();
    std::vector<std::uint8_t> peer_info;
    if (Status s = oob->exchange(*my_info, peer_info); s != Status::ok) return s;
    if (Status s = connect_side(me, peer_info); s != Status::ok) return s;
    if (Status s = oob->barrier(); s != Status::ok) return s;

    if (role == Role::client) {
        if (params.sleep) {
            auto fd = (me.attr.cap_flags & uct::kCapEventRecv) ? me.iface->event_fd() : Result<int>(Status::unsupported);
            if (!fd) {
                LOOM_LOG_ERROR("perftest: -E sleep: {} has no event fd to sleep on", params.tl);
                return Status::unsupported;
            }
            me.wait_fd = *fd;
        }
        print_header(out, params);
        if (Status s = run_initiator(params, me, nullptr, out, report); s != Status::ok) return s;
        if (Status s = flush(me); s != Status::ok) return s;
    } else {
        if (Status s = run_target(params, me); s != Status::ok) return s;
    }
    // Nobody tears down while the other may still need its memory.
    return oob->barrier();
}

}  // namespace loom::perftest
