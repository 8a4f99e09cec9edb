/**
 * Put and get to memory another process registered (not mem_alloc'ed, so not mapped here).
 *
 * CMA: process_vm_writev/readv copy between our buffers and the peer's address space in
 * one pass; the call completes the operation. The kernel allows it when we may ptrace the
 * peer (same uid and no yama restriction, or CAP_SYS_PTRACE). LOOM_SHM_CMA=try turns an
 * EPERM into the emulation for that peer, for good; yes reports it; no never tries.
 *
 * Emulation: a put travels as fragments (PutHeader + data, at most LOOM_SHM_MAX_BCOPY
 * bytes each) through the peer's FIFO; the peer's progress looks the key id up in its
 * region table, checks bounds and rights, and copies. A put that does not fit in the FIFO
 * at once blocks its endpoint (new sends return no_resource) until progress has pushed
 * the rest, so operations stay in order. A get sends one GetRequest naming our FIFO; the
 * peer's progress answers with GetReply fragments (or one reply with an error status) and
 * our progress copies them out and completes the operation. An atomic sends one
 * AtomicRequest; the peer's progress applies it with a CPU atomic after the same checks
 * and, for a fetching one, answers with an AtomicReply. A posted atomic, like a put, is
 * done once it is in the FIFO: the peer applies the FIFO's messages in order.
 */
#include "uct/shm/shm_log.h"  // first: inline code of the other headers logs to shm_log()
#include "uct/shm/shm_common.h"

#include "uct/shm/shm_iface.h"

#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace loom::uct::shm {

namespace {

/**
 * Copies between the local @p iov and [@p remote_addr, + @p total) of process @p pid with
 * process_vm_writev (@p write) or process_vm_readv, resuming after partial transfers.
 * Returns 0 or the errno of the failure.
 */
int cma_transfer(bool write, pid_t pid, const Iov* iov, std::size_t iovcnt, std::uint64_t remote_addr,
                 std::uint64_t total) {
    iovec local[kMaxIov];
    std::size_t count = 0;
    for (std::size_t i = 0; i < iovcnt; ++i) {
        if (iov[i].length != 0) local[count++] = {const_cast<void*>(iov[i].buffer), iov[i].length};
    }
    std::size_t first = 0;
    std::uint64_t done = 0;
    while (done < total) {
        iovec remote{reinterpret_cast<void*>(remote_addr + done), total - done};
        ssize_t n = write ? ::process_vm_writev(pid, local + first, count - first, &remote, 1, 0)
                          : ::process_vm_readv(pid, local + first, count - first, &remote, 1, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (n == 0) return EFAULT;  // no progress: the remote range ends in unmapped memory
        done += static_cast<std::uint64_t>(n);
        std::size_t left = static_cast<std::size_t>(n);
        while (left > 0 && first < count) {
            if (left >= local[first].iov_len) {
                left -= local[first].iov_len;
                ++first;
            } else {
                local[first].iov_base = static_cast<std::uint8_t*>(local[first].iov_base) + left;
                local[first].iov_len -= left;
                left = 0;
            }
        }
    }
    return 0;
}

/** Copies @p length bytes from offset @p offset of the gathered @p iov to @p dest. */
void gather(const Iov* iov, std::size_t iovcnt, std::uint64_t offset, std::size_t length,
            std::uint8_t* dest) {
    for (std::size_t i = 0; i < iovcnt && length > 0; ++i) {
        if (offset >= iov[i].length) {
            offset -= iov[i].length;
            continue;
        }
        std::size_t n = std::min<std::size_t>(iov[i].length - offset, length);
        std::memcpy(dest, static_cast<const std::uint8_t*>(iov[i].buffer) + offset, n);
        dest += n;
        length -= n;
        offset = 0;
    }
}

/** Copies @p length bytes from @p src to offset @p offset of the scattered @p iov. */
void scatter(const std::vector<Iov>& iov, std::uint64_t offset, const std::uint8_t* src, std::size_t length) {
    for (const Iov& piece : iov) {
        if (length == 0) break;
        if (offset >= piece.length) {
            offset -= piece.length;
            continue;
        }
        std::size_t n = std::min<std::size_t>(piece.length - offset, length);
        std::memcpy(static_cast<std::uint8_t*>(const_cast<void*>(piece.buffer)) + offset, src, n);
        src += n;
        length -= n;
        offset = 0;
    }
}

/** Fills the header of the message at @p cell (everything but seq). */
void set_header(Cell* cell, MsgType type, std::size_t length, std::uint64_t cells) {
    cell->hdr.length = static_cast<std::uint32_t>(length);
    cell->hdr.cells = static_cast<std::uint16_t>(cells);
    cell->hdr.type = type;
    cell->hdr.am_id = 0;
}

/**
 * Pushes put fragments of the bytes [*@p done, @p total) of @p iov through @p fifo, each
 * at most @p max_chunk bytes; advances *@p done. Returns true when everything is out.
 */
bool push_fragments(ShmEp* ep, FifoCtl* fifo, const Iov* iov, std::size_t iovcnt, std::uint64_t total,
                    std::uint64_t remote_addr, std::uint64_t key_id, std::uint64_t* done,
                    std::size_t max_chunk) {
    while (*done < total) {
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(max_chunk, total - *done));
        const std::uint64_t cells = msg_cells(sizeof(PutHeader) + n);
        std::uint64_t pos;
        if (!fifo_reserve(fifo, &ep->cached_tail, cells, &pos)) return false;
        Cell* cell = fifo->cells() + (pos & fifo->mask);
        const PutHeader header{remote_addr + *done, key_id};
        std::memcpy(cell->payload(), &header, sizeof(header));
        gather(iov, iovcnt, *done, n, cell->payload() + sizeof(header));
        set_header(cell, MsgType::put, sizeof(header) + n, cells);
        publish(cell, pos, fifo->salt);
        fifo_notify(fifo);
        *done += n;
    }
    return true;
}

}  // namespace

// --- Sender side --------------------------------------------------------------------------------

bool EpOps::use_cma(ShmEp* ep, const RemoteKey* rk) {
    auto* iface = static_cast<ShmIface*>(ep->iface);
    // Without the owner's published slot nothing could check a CMA access: emulate (the owner checks).
    return rk->slot != nullptr && iface->config_.cma != ucs::config::Ternary::no &&
           ep->peer->cma != CmaState::forbidden;
}

Status EpOps::cma_failed(ShmEp* ep, int err, bool write) {
    auto* iface = static_cast<ShmIface*>(ep->iface);
    Peer& peer = *ep->peer;
    const char* op = write ? "process_vm_writev" : "process_vm_readv";
    switch (err) {
        case ESRCH:
            if (peer.failure == Status::ok) iface->peer_failed(peer, Status::endpoint_failure);
            return Status::endpoint_failure;
        case EFAULT:
            LOOM_LOG_ERROR("{} to process {}: the remote range is not mapped there (freed memory?)", op,
                           peer.seg.pid);
            return Status::access_denied;
        case EPERM:
            if (peer.cma != CmaState::forbidden) {
                peer.cma = CmaState::forbidden;  // log once per peer
                LOOM_LOG_ERROR("{} to process {}: {} (LOOM_SHM_CMA=yes; try would emulate put/get instead)",
                               op, peer.seg.pid, errno_string(err));
            }
            return Status::permission_denied;
        case ENOMEM:
            return Status::no_memory;
        default:
            LOOM_LOG_ERROR("{} to process {} failed: {}", op, peer.seg.pid, errno_string(err));
            return Status::io_error;
    }
}

namespace {

/** Whether CMA's EPERM means "emulate from now on" (try) and records it; false means report it. */
bool cma_forbidden(ShmEp* ep, const ShmConfig& config, int err) {
    if (err != EPERM || config.cma != ucs::config::Ternary::try_) return false;
    if (ep->peer->cma != CmaState::forbidden) {
        ep->peer->cma = CmaState::forbidden;
        LOOM_LOG_INFO(
            "process {} may not be accessed with CMA ({}): put/get to it are emulated through its FIFO",
            ep->peer->seg.pid, errno_string(err));
    }
    return true;
}

/**
 * Whether the owner still publishes @p rk's registration covering the access (checked
 * before every CMA access: the kernel checks nothing); otherwise logs why and returns false.
 */
bool published_allows(const RemoteKey* rk, std::uint64_t addr, std::uint64_t len, unsigned need) {
    if (LOOM_LIKELY(slot_allows(*rk->slot, rk->key_id, addr, len, need))) return true;
    LOOM_LOG_ERROR(
        "refused a {} of {:#x}+{} in process {}: it no longer has registration {:#x} (deregistered), or the "
        "registration does not cover the key's region (forged key)",
        need == kAccessRemotePut ? "put" : "get", addr, len, rk->pid, rk->key_id);
    return false;
}

/** Remote memory is reached through the endpoint's peer: a key of another process cannot work. */
LOOM_COLD Status wrong_process(const RemoteKey* rk, const ShmEp* ep) {
    LOOM_LOG_ERROR("the remote key belongs to process {} but the endpoint leads to process {}", rk->pid,
                   ep->peer->seg.pid);
    return Status::invalid_param;
}

}  // namespace

Status EpOps::remote_write(ShmEp* ep, RemoteKey* rk, const Iov* iov, std::size_t iovcnt, std::uint64_t total,
                           std::uint64_t remote_addr, Completion* comp) {
    auto* iface = static_cast<ShmIface*>(ep->iface);
    if (rk->pid != ep->peer->seg.pid) return wrong_process(rk, ep);
    if (total == 0) return Status::ok;
    if (use_cma(ep, rk)) {
        if (!published_allows(rk, remote_addr, total, kAccessRemotePut)) return Status::access_denied;
        int err = cma_transfer(true, static_cast<pid_t>(rk->pid), iov, iovcnt, remote_addr, total);
        if (err == 0) {
            ep->peer->cma = CmaState::works;
            return Status::ok;
        }
        if (!cma_forbidden(ep, iface->config_, err)) return cma_failed(ep, err, true);
    }
    return emu_put(ep, rk, iov, iovcnt, total, remote_addr, comp);
}

ssize_t EpOps::remote_put_bcopy(ShmEp* ep, RemoteKey* rk, PackCallback pack, void* arg,
                                std::uint64_t remote_addr) {
    auto* iface = static_cast<ShmIface*>(ep->iface);
    const std::size_t max = iface->config_.max_bcopy;
    if (rk->pid != ep->peer->seg.pid) return static_cast<ssize_t>(wrong_process(rk, ep));
    if (use_cma(ep, rk)) {
        const std::size_t length = pack(iface->bounce_.data(), arg);
        if (length > max)
            LOOM_FATAL("put_bcopy: pack callback wrote {} bytes, more than the {}-byte limit", length, max);
        if (!rk->allows(remote_addr, length, kAccessRemotePut)) {
            return static_cast<ssize_t>(access_denied(rk, remote_addr, length, kAccessRemotePut));
        }
        if (!published_allows(rk, remote_addr, length, kAccessRemotePut)) {
            return static_cast<ssize_t>(Status::access_denied);
        }
        const Iov iov{iface->bounce_.data(), length, kMemHNull};
        int err =
            length == 0 ? 0 : cma_transfer(true, static_cast<pid_t>(rk->pid), &iov, 1, remote_addr, length);
        if (err == 0) return static_cast<ssize_t>(length);
        if (!cma_forbidden(ep, iface->config_, err)) return static_cast<ssize_t>(cma_failed(ep, err, true));
        // Already packed: send it emulated (one fragment, so it completes or finds no room).
        Status status = emu_put(ep, rk, &iov, 1, length, remote_addr, nullptr);
        return status == Status::ok ? static_cast<ssize_t>(length) : static_cast<ssize_t>(status);
    }
    // Emulated: pack straight into the message.
    const std::uint64_t reserved = msg_cells(sizeof(PutHeader) + max);
    FifoCtl* fifo = ep->fifo;
    std::uint64_t pos;
    if (!fifo_reserve(fifo, &ep->cached_tail, reserved, &pos))
        return static_cast<ssize_t>(iface->send_blocked(ep));
    Cell* cell = fifo->cells() + (pos & fifo->mask);
    const std::size_t length = pack(cell->payload() + sizeof(PutHeader), arg);
    if (length > max)
        LOOM_FATAL("put_bcopy: pack callback wrote {} bytes, more than the {}-byte limit", length, max);
    if (!rk->allows(remote_addr, length, kAccessRemotePut)) {
        write_pad(fifo, pos, reserved);  // the reservation is ours: hand it to the consumer as padding
        return static_cast<ssize_t>(access_denied(rk, remote_addr, length, kAccessRemotePut));
    }
    const PutHeader header{remote_addr, rk->key_id};
    std::memcpy(cell->payload(), &header, sizeof(header));
    const std::uint64_t cells = msg_cells(sizeof(PutHeader) + length);
    set_header(cell, MsgType::put, sizeof(PutHeader) + length, cells);
    if (cells < reserved) fifo_shrink(fifo, pos, cells, reserved);
    publish(cell, pos, fifo->salt);
    fifo_notify(fifo);
    return static_cast<ssize_t>(length);
}

Status EpOps::emu_put(ShmEp* ep, RemoteKey* rk, const Iov* iov, std::size_t iovcnt, std::uint64_t total,
                      std::uint64_t remote_addr, Completion* comp) {
    auto* iface = static_cast<ShmIface*>(ep->iface);
    std::uint64_t done = 0;
    push_fragments(ep, ep->fifo, iov, iovcnt, total, remote_addr, rk->key_id, &done,
                   iface->config_.max_bcopy);
    if (done == total) return Status::ok;
    if (done == 0) return iface->send_blocked(ep);
    // Partly out (only a zcopy is ever larger than one fragment): progress pushes the rest, and
    // the endpoint accepts nothing else until then, so what follows cannot overtake it.
    auto* op = new EmuOp();
    op->kind = EmuOp::Kind::put;
    op->ep = ep;
    op->comp = comp;
    op->iov.assign(iov, iov + iovcnt);
    op->remote_addr = remote_addr;
    op->key_id = rk->key_id;
    op->total = total;
    op->done = done;
    iface->emu_of(ep).sending.push_back(op);
    ++iface->outstanding_;
    ep->flags |= kEpBlocked;
    ep->fifo = &iface->blocked_fifo_;
    iface->set_work(ShmIface::kWorkSending);
    return Status::in_progress;
}

bool EpOps::push_put(ShmEp* ep, FifoCtl* fifo, EmuOp& op) {
    auto* iface = static_cast<ShmIface*>(ep->iface);
    return push_fragments(ep, fifo, op.iov.data(), op.iov.size(), op.total, op.remote_addr, op.key_id,
                          &op.done, iface->config_.max_bcopy);
}

Status EpOps::remote_read(ShmEp* ep, RemoteKey* rk, const Iov* iov, std::size_t iovcnt, UnpackCallback unpack,
                          void* arg, std::uint64_t total, std::uint64_t remote_addr, Completion* comp) {
    auto* iface = static_cast<ShmIface*>(ep->iface);
    if (rk->pid != ep->peer->seg.pid) return wrong_process(rk, ep);
    if (total == 0) {
        if (unpack != nullptr) unpack(arg, iface->bounce_.data(), 0);
        return Status::ok;
    }
    if (use_cma(ep, rk)) {
        if (!published_allows(rk, remote_addr, total, kAccessRemoteGet)) return Status::access_denied;
        // get_bcopy reads into the staging buffer (total <= max_bcopy, checked by the caller).
        const Iov staging{iface->bounce_.data(), static_cast<std::size_t>(total), kMemHNull};
        int err = unpack != nullptr
                      ? cma_transfer(false, static_cast<pid_t>(rk->pid), &staging, 1, remote_addr, total)
                      : cma_transfer(false, static_cast<pid_t>(rk->pid), iov, iovcnt, remote_addr, total);
        if (err == 0) {
            ep->peer->cma = CmaState::works;
            if (unpack != nullptr) unpack(arg, iface->bounce_.data(), total);
            return Status::ok;
        }
        if (!cma_forbidden(ep, iface->config_, err)) return cma_failed(ep, err, false);
    }
    return emu_get(ep, rk, iov, iovcnt, unpack, arg, total, remote_addr, comp);
}

Status EpOps::emu_get(ShmEp* ep, RemoteKey* rk, const Iov* iov, std::size_t iovcnt, UnpackCallback unpack,
                      void* arg, std::uint64_t total, std::uint64_t remote_addr, Completion* comp) {
    auto* iface = static_cast<ShmIface*>(ep->iface);
    const std::uint64_t cells = msg_cells(sizeof(GetRequest));
    FifoCtl* fifo = ep->fifo;
    std::uint64_t pos;
    if (!fifo_reserve(fifo, &ep->cached_tail, cells, &pos)) return iface->send_blocked(ep);
    auto* op = new EmuOp();
    op->kind = EmuOp::Kind::get;
    op->id = iface->next_op_id_++;
    op->ep = ep;
    op->comp = comp;
    if (unpack != nullptr) {
        op->unpack = unpack;
        op->unpack_arg = arg;
        op->staging.resize(total);
    } else {
        op->iov.assign(iov, iov + iovcnt);
    }
    op->remote_addr = remote_addr;
    op->key_id = rk->key_id;
    op->total = total;
    GetRequest request{};
    request.remote_addr = remote_addr;
    request.length = total;
    request.key_id = rk->key_id;
    request.op_id = op->id;
    request.max_chunk = static_cast<std::uint32_t>(iface->config_.max_bcopy);
    const FifoAddress own = iface->own_fifo();
    static_assert(sizeof(request.reply_to) == sizeof(FifoAddress));
    std::memcpy(request.reply_to, &own, sizeof(own));
    Cell* cell = fifo->cells() + (pos & fifo->mask);
    std::memcpy(cell->payload(), &request, sizeof(request));
    set_header(cell, MsgType::get_req, sizeof(request), cells);
    publish(cell, pos, fifo->salt);
    fifo_notify(fifo);
    iface->emu_of(ep).gets.push_back(op);
    iface->gets_.emplace(op->id, op);
    ++iface->outstanding_;
    return Status::in_progress;
}

Status EpOps::emu_atomic(ShmEp* ep, RemoteKey* rk, AtomicOp op, unsigned size, std::uint64_t value,
                         std::uint64_t compare, void* result, std::uint64_t remote_addr, Completion* comp) {
    auto* iface = static_cast<ShmIface*>(ep->iface);
    if (rk->pid != ep->peer->seg.pid) return wrong_process(rk, ep);
    const std::uint64_t cells = msg_cells(sizeof(AtomicRequest));
    FifoCtl* fifo = ep->fifo;
    std::uint64_t pos;
    if (!fifo_reserve(fifo, &ep->cached_tail, cells, &pos)) return iface->send_blocked(ep);
    AtomicRequest request{};
    request.remote_addr = remote_addr;
    request.key_id = rk->key_id;
    request.value = value;
    request.compare = compare;
    request.op = static_cast<std::uint8_t>(op);
    request.size = static_cast<std::uint8_t>(size);
    EmuOp* pending = nullptr;
    if (result != nullptr) {
        pending = new EmuOp();
        pending->kind = EmuOp::Kind::atomic;
        pending->id = iface->next_op_id_++;
        pending->ep = ep;
        pending->comp = comp;
        pending->result = result;
        pending->result_size = static_cast<std::uint8_t>(size);
        pending->remote_addr = remote_addr;
        pending->key_id = rk->key_id;
        request.op_id = pending->id;
        const FifoAddress own = iface->own_fifo();
        static_assert(sizeof(request.reply_to) == sizeof(FifoAddress));
        std::memcpy(request.reply_to, &own, sizeof(own));
    }
    Cell* cell = fifo->cells() + (pos & fifo->mask);
    std::memcpy(cell->payload(), &request, sizeof(request));
    set_header(cell, MsgType::atomic_req, sizeof(request), cells);
    publish(cell, pos, fifo->salt);
    fifo_notify(fifo);
    if (pending == nullptr) return Status::ok;
    iface->emu_of(ep).gets.push_back(pending);
    iface->gets_.emplace(pending->id, pending);
    ++iface->outstanding_;
    return Status::in_progress;
}

// --- Progress: pushing the rest of puts -----------------------------------------------------------

unsigned ShmIface::push_sending() {
    unsigned count = 0;
    bool more = false;
    for (ShmEp& ep : eps_) {
        if (ep.emu == nullptr || ep.emu->sending.empty() || ep.status != Status::ok) continue;
        while (!ep.emu->sending.empty()) {
            EmuOp* op = ep.emu->sending.front();
            if (!EpOps::push_put(&ep, ep.peer->fifo, *op)) break;
            finish_op(op, Status::ok);
            ++count;
        }
        maybe_unblock(&ep);
        if (!ep.emu->sending.empty()) more = true;
    }
    if (!more) rx_.slow_work &= ~kWorkSending;
    return count;
}

// --- Target side: emulated put and get -------------------------------------------------------------

void ShmIface::handle_put(const std::uint8_t* data, std::size_t length) {
    if (length < sizeof(PutHeader)) {
        LOOM_LOG_WARN("dropped an emulated put of {} bytes: shorter than its header", length);
        return;
    }
    PutHeader header;
    std::memcpy(&header, data, sizeof(header));
    const std::size_t n = length - sizeof(header);
    Status status = with_region(header.key_id, header.remote_addr, n, kAccessRemotePut,
                                [&](std::uint8_t* dest) { std::memcpy(dest, data + sizeof(header), n); });
    if (status != Status::ok) {
        LOOM_LOG_WARN("refused an emulated put of {} bytes at {:#x}: no registration (key {:#x}) allows it",
                      n, header.remote_addr, header.key_id);
    }
}

void ShmIface::handle_get_request(const std::uint8_t* data, std::size_t length) {
    if (length != sizeof(GetRequest)) {
        LOOM_LOG_WARN("dropped a get request of {} bytes (expected {})", length, sizeof(GetRequest));
        return;
    }
    GetRequest request;
    std::memcpy(&request, data, sizeof(request));
    FifoAddress reply_to;
    std::memcpy(&reply_to, request.reply_to, sizeof(reply_to));
    std::string reason;
    auto peer = attach_peer(reply_to, &reason);
    if (!peer) {
        LOOM_LOG_WARN("dropped a get request from process {}: cannot reach its FIFO: {}", reply_to.arena.pid,
                      reason);
        return;
    }
    // The requester's chunk limit, but never more than our own messages; the replies must fit its ring.
    const auto chunk = static_cast<std::uint32_t>(
        std::clamp<std::uint64_t>(request.max_chunk, kMinMaxBcopy, config_.max_bcopy));
    if ((*peer)->fifo->cell_count < 2 * msg_cells(sizeof(GetReply) + chunk)) {
        LOOM_LOG_WARN("dropped a get request from process {}: its FIFO is too small for {}-byte replies",
                      reply_to.arena.pid, chunk);
        return;
    }
    ++(*peer)->refs;
    replies_.push_back(
        ReplyJob{*peer, request.op_id, request.remote_addr, request.key_id, request.length, 0, chunk, false, 0, 0});
    set_work(kWorkReplies);
}

void ShmIface::handle_atomic_request(const std::uint8_t* data, std::size_t length) {
    if (length != sizeof(AtomicRequest)) {
        LOOM_LOG_WARN("dropped an atomic request of {} bytes (expected {})", length, sizeof(AtomicRequest));
        return;
    }
    AtomicRequest request;
    std::memcpy(&request, data, sizeof(request));
    const auto op = static_cast<AtomicOp>(request.op);
    std::uint64_t old = 0;
    Status status = Status::invalid_param;
    if ((request.size == 4 || request.size == 8) && request.op <= static_cast<std::uint8_t>(AtomicOp::cswap) &&
        request.remote_addr % request.size == 0) {
        status = with_region(request.key_id, request.remote_addr, request.size, kAccessRemoteAtomic,
                             [&](std::uint8_t* word) {
                                 if (request.size == 8) {
                                     old =
                                         cpu_atomic<std::uint64_t>(op, reinterpret_cast<std::uint64_t*>(word),
                                                                   request.value, request.compare);
                                 } else {
                                     old = cpu_atomic<std::uint32_t>(
                                         op, reinterpret_cast<std::uint32_t*>(word),
                                         static_cast<std::uint32_t>(request.value),
                                         static_cast<std::uint32_t>(request.compare));
                                 }
                             });
    }
    if (status != Status::ok) {
        LOOM_LOG_WARN("refused an emulated {}-byte atomic at {:#x}: {}", request.size, request.remote_addr,
                      status == Status::invalid_param ? "bad size, operation or alignment"
                                                      : "no registration allows it (key " +
                                                            fmt::format("{:#x}", request.key_id) + ")");
    }
    if (request.op_id == 0) return;  // posted: nobody waits for an answer
    FifoAddress reply_to;
    std::memcpy(&reply_to, request.reply_to, sizeof(reply_to));
    std::string reason;
    auto peer = attach_peer(reply_to, &reason);
    if (!peer) {
        LOOM_LOG_WARN("dropped the reply to an atomic of process {}: cannot reach its FIFO: {}",
                      reply_to.arena.pid, reason);
        return;
    }
    ++(*peer)->refs;
    replies_.push_back(ReplyJob{*peer, request.op_id, request.remote_addr, request.key_id, 0, 0, 0, true, old,
                                static_cast<std::int32_t>(status)});
    set_work(kWorkReplies);
}

bool ShmIface::push_atomic_reply(ReplyJob& job) {
    FifoCtl* fifo = job.peer->fifo;
    const std::uint64_t cells = msg_cells(sizeof(AtomicReply));
    std::uint64_t pos;
    if (!fifo_reserve(fifo, &job.peer->cached_tail, cells, &pos)) return false;
    Cell* cell = fifo->cells() + (pos & fifo->mask);
    const AtomicReply reply{job.op_id, job.old, job.status, 0};
    std::memcpy(cell->payload(), &reply, sizeof(reply));
    set_header(cell, MsgType::atomic_rep, sizeof(reply), cells);
    publish(cell, pos, fifo->salt);
    fifo_notify(fifo);
    return true;
}

bool ShmIface::push_reply(ReplyJob& job) {
    if (job.atomic) return push_atomic_reply(job);
    FifoCtl* fifo = job.peer->fifo;
    do {
        const std::size_t n =
            static_cast<std::size_t>(std::min<std::uint64_t>(job.max_chunk, job.length - job.offset));
        const std::uint64_t reserved = msg_cells(sizeof(GetReply) + n);
        std::uint64_t pos;
        if (!fifo_reserve(fifo, &job.peer->cached_tail, reserved, &pos)) return false;
        Cell* cell = fifo->cells() + (pos & fifo->mask);
        std::uint8_t* dest = cell->payload() + sizeof(GetReply);
        const Status status = with_region(job.key_id, job.remote_addr + job.offset, n, kAccessRemoteGet,
                                          [&](const std::uint8_t* src) { std::memcpy(dest, src, n); });
        const GetReply reply{job.op_id, job.offset, static_cast<std::int32_t>(status), 0};
        std::memcpy(cell->payload(), &reply, sizeof(reply));
        const std::size_t length = sizeof(GetReply) + (status == Status::ok ? n : 0);
        const std::uint64_t cells = msg_cells(length);
        set_header(cell, MsgType::get_rep, length, cells);
        if (cells < reserved) fifo_shrink(fifo, pos, cells, reserved);
        publish(cell, pos, fifo->salt);
        fifo_notify(fifo);
        if (status != Status::ok) {
            LOOM_LOG_WARN(
                "refused an emulated get of {} bytes at {:#x} from process {}: no registration (key {:#x}) "
                "allows it",
                job.length, job.remote_addr, job.peer->seg.pid, job.key_id);
            return true;
        }
        job.offset += n;
    } while (job.offset < job.length);
    return true;
}

unsigned ShmIface::push_replies() {
    unsigned count = 0;
    for (auto it = replies_.begin(); it != replies_.end();) {
        if (it->peer->failure == Status::ok && !push_reply(*it)) {
            ++it;  // its requester's FIFO is full: the others may still have room
            continue;
        }
        Peer* peer = it->peer;
        it = replies_.erase(it);
        release_peer(peer);
        ++count;
    }
    if (replies_.empty()) rx_.slow_work &= ~kWorkReplies;
    return count;
}

void ShmIface::handle_get_reply(const std::uint8_t* data, std::size_t length) {
    if (length < sizeof(GetReply)) {
        LOOM_LOG_WARN("dropped a get reply of {} bytes: shorter than its header", length);
        return;
    }
    GetReply reply;
    std::memcpy(&reply, data, sizeof(reply));
    auto it = gets_.find(reply.op_id);
    if (it == gets_.end()) {
        LOOM_LOG_DEBUG("dropped a reply to get {} (destroyed endpoint or canceled operation)", reply.op_id);
        return;
    }
    EmuOp* op = it->second;
    if (op->kind != EmuOp::Kind::get) {
        LOOM_LOG_WARN("malformed reply: get reply to operation {}, which is not a get", reply.op_id);
        finish_op(op, Status::malformed_packet);
        return;
    }
    const std::size_t n = length - sizeof(GetReply);
    const auto status = static_cast<Status>(reply.status);
    if (status != Status::ok) {
        finish_op(op, is_error(status) ? status : Status::malformed_packet);
        return;
    }
    if (reply.offset != op->done || n > op->total - op->done || (n == 0 && op->total != 0)) {
        LOOM_LOG_WARN("malformed reply to get {}: {} bytes at offset {} (expected offset {} of {})",
                      reply.op_id, n, reply.offset, op->done, op->total);
        finish_op(op, Status::malformed_packet);
        return;
    }
    if (op->unpack != nullptr) {
        std::memcpy(op->staging.data() + op->done, data + sizeof(GetReply), n);
    } else {
        scatter(op->iov, op->done, data + sizeof(GetReply), n);
    }
    op->done += n;
    if (op->done == op->total) {
        if (op->unpack != nullptr) op->unpack(op->unpack_arg, op->staging.data(), op->total);
        finish_op(op, Status::ok);
    }
}

void ShmIface::handle_atomic_reply(const std::uint8_t* data, std::size_t length) {
    if (length != sizeof(AtomicReply)) {
        LOOM_LOG_WARN("dropped an atomic reply of {} bytes (expected {})", length, sizeof(AtomicReply));
        return;
    }
    AtomicReply reply;
    std::memcpy(&reply, data, sizeof(reply));
    auto it = gets_.find(reply.op_id);
    if (it == gets_.end()) {
        LOOM_LOG_DEBUG("dropped a reply to atomic {} (destroyed endpoint or canceled operation)", reply.op_id);
        return;
    }
    EmuOp* op = it->second;
    const auto status = static_cast<Status>(reply.status);
    if (op->kind != EmuOp::Kind::atomic) {
        LOOM_LOG_WARN("malformed reply: atomic reply to operation {}, which is not an atomic", reply.op_id);
        finish_op(op, Status::malformed_packet);
        return;
    }
    if (status != Status::ok) {
        finish_op(op, is_error(status) ? status : Status::malformed_packet);
        return;
    }
    if (op->result_size == 8) {
        std::memcpy(op->result, &reply.old, 8);
    } else {
        const auto old = static_cast<std::uint32_t>(reply.old);
        std::memcpy(op->result, &old, 4);
    }
    finish_op(op, Status::ok);
}

}  // namespace loom::uct::shm
