/**
 * shm receive path: progress consumes the iface's FIFO in place (one acquire load per
 * message, the handler runs on the cells), and, when flagged or when the clock check is
 * due, runs the slow path: peer checks, emulated puts and get replies still to push
 * (shm_rma.cc), pending requests, failed endpoints to report, iface flushes.
 */
#include "uct/shm/shm_log.h"  // first: inline code of the other headers logs to shm_log()

#include "uct/shm/shm_iface.h"

namespace loom::uct::shm {

namespace {

/** Messages handled per progress call at most, so one busy FIFO cannot starve the worker. */
constexpr unsigned kRxBatch = 16;
/** Pending requests run per progress call at most (in rounds over the endpoints). */
constexpr unsigned kPendingBatch = 64;

}  // namespace

// --- Progress -------------------------------------------------------------------------------

unsigned ShmIface::progress(Iface* base) {
    auto* iface = static_cast<ShmIface*>(base);
    Rx& rx = iface->rx_;
    unsigned count = 0;
    for (;;) {
        Cell* cell = rx.cells + (rx.tail & rx.mask);
        if (cell->hdr.seq.load(std::memory_order_acquire) != seq_of(rx.tail, rx.salt)) break;
        tsan_fifo_acquire();
        const std::uint32_t cells = cell->hdr.cells;
        const std::uint32_t length = cell->hdr.length;
        const bool cells_fit = cells != 0 && (rx.tail & rx.mask) + cells <= rx.mask + 1;
        const bool valid = cells_fit && length <= cells * kCellSize - sizeof(MsgHeader);
        if (LOOM_LIKELY(cell->hdr.type == MsgType::am && valid)) {
            // In place: the cells stay ours until tail moves past them. No descriptor to keep.
            (void)iface->invoke_am(cell->hdr.am_id, cell->payload(), length, 0);
            rx.tail += cells;
        } else if (valid) {
            iface->handle_other(cell, cells);
            rx.tail += cells;
        } else {
            iface->bad_message(cell);
            // Skip the whole run the producer reserved when its size is plausible: the next
            // header is after it (skipping one cell would wait forever for a header inside
            // the run, which nobody publishes; found by fuzzing).
            rx.tail += cells_fit ? cells : 1;
        }
        if (++count == kRxBatch) break;
    }
    // Once per batch, not per message: producers poll this line when the ring looks full,
    // and every store would take it back from them (a cross-core miss per message).
    if (count != 0) rx.ctl->tail.store(rx.tail, std::memory_order_release);
    if (LOOM_UNLIKELY(rx.slow_work != 0) || LOOM_UNLIKELY(--rx.countdown == 0))
        count += iface->slow_progress();
    return count;
}

void ShmIface::handle_other(Cell* cell, std::uint32_t) {
    const std::uint8_t* data = cell->payload();
    const std::size_t length = cell->hdr.length;
    switch (cell->hdr.type) {
        case MsgType::pad:
            break;
        case MsgType::put:
            handle_put(data, length);
            break;
        case MsgType::get_req:
            handle_get_request(data, length);
            break;
        case MsgType::get_rep:
            handle_get_reply(data, length);
            break;
        case MsgType::atomic_req:
            handle_atomic_request(data, length);
            break;
        case MsgType::atomic_rep:
            handle_atomic_reply(data, length);
            break;
        default:
            bad_message(cell);
            break;
    }
}

void ShmIface::bad_message(Cell* cell) {
    // Only a peer that writes garbage into our FIFO gets here: say so once, skip what we can.
    if (!bad_message_logged_) {
        bad_message_logged_ = true;
        LOOM_LOG_ERROR(
            "dropped a malformed message at FIFO position {} (type {}, {} cells, {} bytes); further "
            "ones are dropped silently",
            rx_.tail, static_cast<unsigned>(cell->hdr.type), cell->hdr.cells, cell->hdr.length);
    }
}

unsigned ShmIface::slow_progress() {
    unsigned count = 0;
    if (rx_.countdown == 0 || --rx_.countdown == 0) {
        rx_.countdown = kClockCheckPeriod;
        if (!peers_.empty()) {
            const ucs::Ticks now = ucs::get_time();
            // Messages already published in our ring go first: a peer that sent them and
            // then closed its iface or exited must have them delivered before its
            // endpoints fail. (A run left unpublished does not hold the check back.)
            const Cell* next = rx_.cells + (rx_.tail & rx_.mask);
            const bool message_waiting =
                next->hdr.seq.load(std::memory_order_acquire) == seq_of(rx_.tail, rx_.salt);
            if (now >= next_peer_check_ && !message_waiting) {
                next_peer_check_ = now + peer_check_ticks_;
                check_peers();
                check_stalled_ring(now);
            }
        }
    }
    if (rx_.slow_work & kWorkReplies) count += push_replies();
    if (rx_.slow_work & kWorkSending) count += push_sending();
    if (rx_.slow_work & kWorkPending) count += dispatch_pending();
    if (rx_.slow_work & kWorkErrors) report_errors();
    if (rx_.slow_work & kWorkFlush) complete_iface_flush();
    return count;
}

void ShmIface::check_stalled_ring(ucs::Ticks now) {
    // A producer reserves cells (a CAS on head), writes its message, then publishes it; one
    // killed in between leaves a run nobody will ever publish, and the ring would wait at it
    // forever, with every later message (of live peers) behind it.
    Rx& rx = rx_;
    const std::uint64_t head = rx.ctl->head.load(std::memory_order_acquire);
    const Cell* cell = rx.cells + (rx.tail & rx.mask);
    if (head == rx.tail || cell->hdr.seq.load(std::memory_order_acquire) == seq_of(rx.tail, rx.salt)) {
        stalled_at_ = kNotStalled;  // empty, or the next message is there
        return;
    }
    if (stalled_at_ != rx.tail) {
        stalled_at_ = rx.tail;
        stalled_since_ = now;
        return;
    }
    // Only a peer found dead after the wait began can have left it: a live one publishes
    // within microseconds, and the timeout leaves room for one descheduled mid-copy.
    const auto timeout = ucs::ns_to_ticks(static_cast<std::uint64_t>(config_.dead_producer_timeout.count()));
    if (last_peer_death_ < stalled_since_ || now - stalled_since_ < timeout) return;
    // The next message published after the dead run starts the live part of the ring; until
    // one is (a live producer may still be writing right behind), keep waiting.
    for (std::uint64_t pos = rx.tail + 1; pos != head; ++pos) {
        const Cell* next = rx.cells + (pos & rx.mask);
        if (next->hdr.seq.load(std::memory_order_acquire) != seq_of(pos, rx.salt)) continue;
        LOOM_LOG_ERROR(
            "receive ring position {}: skipped {} cells a peer process reserved and never published "
            "(it died while sending); its message there is lost",
            rx.tail, pos - rx.tail);
        rx.tail = pos;
        rx.ctl->tail.store(rx.tail, std::memory_order_release);
        stalled_at_ = kNotStalled;
        return;
    }
}

unsigned ShmIface::dispatch_pending() {
    // Rounds until nothing could run or the batch is done: one progress call drains a burst of
    // queued sends (a message rate limited by progress calls otherwise), and the rounds keep
    // the round-robin order across endpoints.
    // An endpoint starts only with room for the largest message (pending_room_), then goes on
    // while its requests fit (each reserves its own cells): a burst, not one send per cell the
    // receiver frees.
    unsigned count = 0, ran;
    bool first = true;
    do {
        ran = dispatch_pending_round(first);
        first = false;
        count += ran;
    } while (ran != 0 && count < kPendingBatch && !pending_eps_.empty());
    return count;
}

unsigned ShmIface::dispatch_pending_round(bool check_room) {
    // One request per endpoint per round. An endpoint whose request ran moves to the back; one
    // that could not run keeps its place, so the next round starts with it: round-robin.
    ucs::List<ShmEp, &ShmEp::pending_link> kept, ran;
    unsigned count = 0;
    while (ShmEp* ep = pending_eps_.pop_front()) {
        if (ep->status != Status::ok || ep->pending.empty()) continue;
        if ((check_room || (ep->flags & kEpBlocked)) && fifo_free_cells(ep->fifo) < pending_room_) {
            if (!(ep->flags & kEpBlocked) && send_blocked(ep) != Status::no_resource) continue;  // it failed
            kept.push_back(*ep);
            continue;
        }
        PendingReq* req = ep->pending.pop_front();
        const Status status = req->func(req);
        if (status == Status::no_resource)
            ep->pending.push_front(*req);
        else
            ++count;
        // A request that queued another on its endpoint put the endpoint back into the
        // list it was taken from: this round decides where it goes.
        if (ep->pending_link.linked()) decltype(pending_eps_)::remove(*ep);
        // The request may have failed the endpoint (then it left every list).
        if (ep->status != Status::ok || ep->pending.empty()) continue;
        if (status == Status::no_resource)
            kept.push_back(*ep);
        else
            ran.push_back(*ep);
    }
    pending_eps_.splice_back(kept);
    pending_eps_.splice_back(ran);
    if (pending_eps_.empty()) rx_.slow_work &= ~kWorkPending;
    return count;
}

}  // namespace loom::uct::shm
