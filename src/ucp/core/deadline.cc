/**
 * Per-operation deadlines (LOOM_OP_ATTR_FIELD_DEADLINE). An operation that is handed to
 * the application as a request gets an entry in Worker::deadlines; progress() reads the
 * clock only while there are entries, and at an entry's time marks its request expired
 * and withdraws the operation where that is still possible:
 *
 *   - a flush or close: check_flushes completes it (a close closes by force), without
 *     waiting for the endpoints any more;
 *   - anything else: the families' expire hooks (a tagged receive not matched yet, a
 *     tagged send the receiver has not matched, a stream receive).
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
    // Collect first: withdrawing a request may complete it, which edits the vector.
    std::vector<Request*> due;
    ucs::Ticks next = UINT64_MAX;
    for (std::size_t i = 0; i < deadlines.size();) {
        if (deadlines[i].at <= now) {
            due.push_back(deadlines[i].req);
            deadlines[i] = deadlines.back();
            deadlines.pop_back();
        } else {
            next = std::min(next, deadlines[i].at);
            ++i;
        }
    }
    next_deadline = next;
    for (Request* req : due) {
        req->has_deadline = 0;
        req->expired = 1;
        if (req->flags & kReqFlush) continue;  // check_flushes completes it, at the next progress
        for (const ProtoFamily* const* f = families().begin; f != families().end; ++f) {
            if ((*f)->expire != nullptr && (*f)->expire(*this, *req)) break;
        }
    }
    return static_cast<unsigned>(due.size());
}

}  // namespace loom::ucp
