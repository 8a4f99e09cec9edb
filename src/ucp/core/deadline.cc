/**
 * Per-operation deadlines (LOOM_OP_ATTR_FIELD_DEADLINE). An operation that is handed to
 * the application as a request gets an entry in Worker::deadlines; progress() reads the
 * clock only while there are entries, and at an entry's time marks its request expired
 * and withdraws the operation where that is still possible:
 *
 *   - a flush or close: check_flushes completes it (a close closes by force), without
 *     waiting for the endpoints any more;
 *   - a send or RMA operation still in its lane's queue, nothing of it handed to the
 *     transport (send_request_withdraw): it leaves the queue, the rest keep their order;
 *   - anything else: the families' expire hooks (a tagged receive not matched yet, a
 *     tagged send the receiver has not matched, a stream receive, a stream send held by
 *     the receiver's window); a receive's rendezvous GETs stop issuing (rndv_recv.cc).
 *
 * What no hook withdraws (already matched, or its data in the transport's hands)
 * completes normally: the peer has it or is taking it. docs/reliability.md says what
 * the peer sees in each case.
 */
#include "ucp/core/request.h"
#include "ucp/core/worker.h"
#include "ucs/time/clock.h"

#include <algorithm>

namespace loom::ucp {

void Worker::deadline_arm(Request* req, ucs::Ticks at) {
    if (deadlines.empty() || at < next_deadline) next_deadline = at;
    deadlines.push_back({at, req});
    req->has_deadline = 1;
}

void Worker::deadline_forget(Request* req) {
    req->has_deadline = 0;
    auto it = std::find_if(deadlines.begin(), deadlines.end(),
                           [req](const DeadlineEntry& e) { return e.req == req; });
    if (it == deadlines.end()) return;
    *it = deadlines.back();
    deadlines.pop_back();
    // next_deadline may now be early: check_deadlines then finds nothing due and moves it on.
}

unsigned Worker::check_deadlines() {
    const ucs::Ticks now = ucs::get_time();
    if (now < next_deadline) return 0;
    // One due request at a time, its entry dropped before it is withdrawn: withdrawing may
    // run callbacks that complete (and free) other requests, whose entries complete()
    // drops in turn, so nothing here ever holds a pointer to a request that is gone.
    unsigned expired = 0;
    for (;;) {
        auto due = std::find_if(deadlines.begin(), deadlines.end(),
                                [now](const DeadlineEntry& e) { return e.at <= now; });
        if (due == deadlines.end()) break;
        Request* req = due->req;
        *due = deadlines.back();
        deadlines.pop_back();
        req->has_deadline = 0;
        req->expired = 1;
        ++expired;
        if (req->flags & kReqFlush) continue;  // check_flushes completes it, at the next progress
        if (send_request_withdraw(req)) continue;  // still in its lane's queue: the peer never saw it
        for (const ProtoFamily* const* f = families().begin; f != families().end; ++f) {
            if ((*f)->expire != nullptr && (*f)->expire(*this, *req)) break;
        }
    }
    next_deadline = UINT64_MAX;
    for (const DeadlineEntry& e : deadlines) next_deadline = std::min(next_deadline, e.at);
    return expired;
}

}  // namespace loom::ucp
