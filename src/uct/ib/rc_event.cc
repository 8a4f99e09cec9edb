/**
 * rc wake-up events (kCapEventRecv): what makes the iface's event fd readable, and how
 * event_arm makes sure that a caller who sleeps on it misses nothing.
 *
 * The event fd is an epoll set owned by the iface, made by the first event_fd() or
 * event_arm() call (an iface nobody sleeps on never has one), holding:
 *  - the completion channel that both CQs report to. The receive CQ brings messages
 *    and credit grants (which let pending sends go); the send CQ brings the completion
 *    of operations, the flush markers, and the send-queue and CQ entries that pending
 *    requests and due grants wait for. A failed connection's flushed requests arrive
 *    on both.
 *  - in rdma_cm mode, the rdma_cm event channel: connection requests (accepted here, or
 *    handed to a listener's callback), established and rejected connections, address and
 *    route resolution, disconnects.
 *  - a timerfd, set while a failed endpoint waits for the device to flush its requests:
 *    after RcIface's grace time progress completes them itself (siw never flushes some),
 *    and that must not wait for an unrelated event; and while an iWARP initiator's next
 *    probe of its acceptor is due (RcIface::probe_acceptors), which is what may wake the
 *    completion a sleeper waits for.
 *
 * event_arm, in this order: acknowledges the CQ events read so far (batched: one
 * ibv_ack_cq_events per CQ and arm, and only events already read can hold up a CQ's
 * destruction); says busy when progress has work that raises no event (a stashed
 * completion, endpoints added to the arbiter since it last ran, a failure to report, a
 * grace time over); sets the timer; requests a notification for the next completion of
 * each CQ; then polls each CQ for one completion. A completion that arrived before the
 * request raises no event, so one found now is kept in the CQ's stash, which progress
 * handles before polling, and arm says busy. Last, in rdma_cm mode, events already
 * waiting in its channel make arm busy too; and arm makes the next progress call read
 * that channel whatever its idle pacing, so a wake-up by the channel is served at once.
 *
 * Devices differ in what arming costs, not in what it means: rxe requests a
 * notification with a system call per CQ, siw (and hardware) by a store in memory the
 * provider shares with the kernel or the device. Neither raises an event for a
 * completion that was already queued, hence the poll after the request. Progress never
 * arms, reads the channels or touches the timer: an application that does not sleep
 * pays for none of this.
 */
#include "uct/ib/ib_log.h"
#include "uct/ib/ib_md.h"
#include "uct/ib/rc_iface.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

namespace loom::uct::ib {

namespace {

/** Makes @p fd non-blocking and close-on-exec; false (errno set) on failure. */
bool set_nonblocking(int fd) {
    int fl = ::fcntl(fd, F_GETFL);
    if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) return false;
    int fd_flags = ::fcntl(fd, F_GETFD);
    return fd_flags >= 0 && ::fcntl(fd, F_SETFD, fd_flags | FD_CLOEXEC) == 0;
}

}  // namespace

Status RcIface::create_comp_channel() {
    comp_channel_ = ibv_create_comp_channel(md_->context());
    if (comp_channel_ == nullptr) {
        LOOM_LOG_ERROR("rc/{}: ibv_create_comp_channel failed: {}", resource().dev_name,
                       std::strerror(errno));
        return Status::no_resource;
    }
    // Non-blocking: event_arm drains it with ibv_get_cq_event until EAGAIN.
    if (!set_nonblocking(comp_channel_->fd)) {
        LOOM_LOG_ERROR("rc/{}: cannot make the completion channel non-blocking: {}", resource().dev_name,
                       std::strerror(errno));
        return Status::io_error;
    }
    return Status::ok;
}

Status RcIface::open_events() {
    const std::string& name = resource().dev_name;
    auto set = ucs::EventSet::create();
    if (!set) return set.status();
    int timer = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (timer < 0) {
        int err = errno;
        LOOM_LOG_ERROR("rc/{}: timerfd_create failed: {}", name, std::strerror(err));
        return err == EMFILE || err == ENFILE ? Status::no_resource : Status::io_error;
    }
    // The cookies are unused: whatever is ready, progress looks at everything.
    Status status = set->add(comp_channel_->fd, ucs::kEventRead, 0);
    if (status == Status::ok && cm_channel_ != nullptr) {
        status = set->add(cm_channel_->fd, ucs::kEventRead, 1);
    }
    if (status == Status::ok) status = set->add(timer, ucs::kEventRead, 2);
    if (status != Status::ok) {
        ::close(timer);
        return status;  // logged by the set
    }
    events_ = std::move(*set);
    timer_fd_ = timer;
    LOOM_LOG_DEBUG(
        "rc/{}: event fd {} (completion channel {}{}, timer {})", name, events_.fd(), comp_channel_->fd,
        cm_channel_ != nullptr ? fmt::format(", rdma_cm channel {}", cm_channel_->fd) : std::string(),
        timer_fd_);
    return Status::ok;
}

void RcIface::close_events() {
    events_ = ucs::EventSet{};  // closes the set before its members
    if (timer_fd_ >= 0) ::close(timer_fd_);
    timer_fd_ = -1;
    timer_set_ = false;
}

Result<int> RcIface::event_fd() {
    if (events_.fd() < 0) {
        if (Status s = open_events(); s != Status::ok) return s;
    }
    return events_.fd();
}

void RcIface::ack_cq_events() {
    unsigned send = 0, recv = 0;
    ibv_cq* cq = nullptr;
    void* context = nullptr;
    while (ibv_get_cq_event(comp_channel_, &cq, &context) == 0) {
        if (cq == send_cq_) {
            ++send;
        } else {
            ++recv;
        }
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
        LOOM_LOG_ERROR("rc/{}: ibv_get_cq_event failed: {}", resource().dev_name, std::strerror(errno));
    }
    if (send != 0) ibv_ack_cq_events(send_cq_, send);
    if (recv != 0) ibv_ack_cq_events(recv_cq_, recv);
}

bool RcIface::failure_to_report() const {
    // report_errors calls on_error once an endpoint's requests have all completed (else it
    // waits: for flushed completions, which raise events, or for the grace timer).
    return std::any_of(failed_unreported_.begin(), failed_unreported_.end(), [](const RcEp* ep) {
        return (ep->flags & kEpClosing) || ep->cold->error_reported || ep->tx_sn == ep->acked_sn;
    });
}

Status RcIface::set_grace_timer() {
    if (timer_set_) {
        std::uint64_t expirations;
        (void)::read(timer_fd_, &expirations, sizeof(expirations));  // EAGAIN when it has not expired
    }
    std::optional<std::chrono::steady_clock::time_point> next;
    for (const RcEp* ep : draining_) {
        if (ep->tx_sn == ep->acked_sn) continue;  // nothing left to wait for
        if (!next || ep->cold->deadline < *next) next = ep->cold->deadline;
    }
    for (const RcEp* ep : unconfirmed_) {
        if (!probe_wanted(ep)) continue;
        if (!next || ep->cold->probe_at < *next) next = ep->cold->probe_at;
    }
    itimerspec spec{};
    if (next) {
        // steady_clock is CLOCK_MONOTONIC on Linux: the deadline, as a relative time.
        auto left =
            std::chrono::duration_cast<std::chrono::nanoseconds>(*next - std::chrono::steady_clock::now());
        if (left.count() <= 0) return Status::busy;
        spec.it_value.tv_sec = static_cast<time_t>(left.count() / 1000000000);
        spec.it_value.tv_nsec = static_cast<long>(left.count() % 1000000000);
    } else if (!timer_set_) {
        return Status::ok;
    }
    if (::timerfd_settime(timer_fd_, 0, &spec, nullptr) != 0) {
        LOOM_LOG_ERROR("rc/{}: timerfd_settime failed: {}", resource().dev_name, std::strerror(errno));
        return Status::io_error;
    }
    timer_set_ = next.has_value();
    return Status::ok;
}

Status RcIface::event_arm() {
    if (events_.fd() < 0) {
        if (Status s = open_events(); s != Status::ok) return s;
    }
    const std::string& name = resource().dev_name;
    if (cm_channel_ != nullptr) {
        cm_countdown_ = 1;  // the next progress call reads the rdma_cm channel, and
        cm_last_poll_ = 0;  // does not wait for kCmIdlePollUs to have passed
    }
    ack_cq_events();
    if (rx_stash_.full || tx_stash_.full) return Status::busy;
    if (arbiter_fresh_ && !arbiter_.empty()) return Status::busy;
    if (failure_to_report()) return Status::busy;
    if (Status s = set_grace_timer(); s != Status::ok) return s;
    for (ibv_cq* cq : {recv_cq_, send_cq_}) {
        if (int rc = ibv_req_notify_cq(cq, 0); rc != 0) {
            LOOM_LOG_ERROR("rc/{}: ibv_req_notify_cq ({}) failed: {}", name,
                           cq == send_cq_ ? "send" : "receive", std::strerror(rc < 0 ? -rc : rc));
            return Status::io_error;
        }
    }
    for (auto [cq, stash] : {std::pair{recv_cq_, &rx_stash_}, std::pair{send_cq_, &tx_stash_}}) {
        int n = ibv_poll_cq(cq, 1, &stash->wc);
        if (n < 0) {
            LOOM_LOG_ERROR("rc/{}: ibv_poll_cq ({}) failed: {}", name, cq == send_cq_ ? "send" : "receive",
                           n);
            return Status::io_error;
        }
        stash->full = n > 0;
    }
    if (rx_stash_.full || tx_stash_.full) return Status::busy;
    if (cm_channel_ != nullptr) {
        pollfd pfd{cm_channel_->fd, POLLIN, 0};
        if (::poll(&pfd, 1, 0) > 0) return Status::busy;
    }
    return Status::ok;
}

}  // namespace loom::uct::ib
