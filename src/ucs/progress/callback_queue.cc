#include "ucs/progress/callback_queue.h"

#include "ucs/debug/assert.h"
#include "ucs/debug/log.h"

#include <algorithm>
#include <new>

namespace loom::ucs {

namespace {

constexpr std::uint64_t make_id(std::uint32_t slot, std::uint32_t generation) {
    return (static_cast<std::uint64_t>(generation) << 32) | slot;
}

}  // namespace

CallbackQueue::CallbackQueue() = default;

CallbackQueue::~CallbackQueue() {
    LOOM_ASSERTV(hot_.dispatcher.load(std::memory_order_relaxed) == nullptr,
                 "callback queue {} destroyed while dispatching", static_cast<void*>(this));
}

unsigned CallbackQueue::noop_callback(void*) noexcept {
    return 0;
}

Result<CallbackId> CallbackQueue::add(ProgressCallback cb, void* arg) {
    return add_entry(cb, arg, false);
}

Result<CallbackId> CallbackQueue::add_oneshot(ProgressCallback cb, void* arg) {
    return add_entry(cb, arg, true);
}

Result<CallbackId> CallbackQueue::add_entry(ProgressCallback cb, void* arg, bool oneshot) {
    if (cb == nullptr) {
        LOOM_LOG_WARN("callback queue: cannot add a null callback (arg {})", arg);
        return Status::invalid_param;
    }
    std::lock_guard guard(lock_);
    try {
        // Grow everything this entry may need now, before changing any state, so that
        // the dispatcher never allocates and a failure leaves the queue untouched.
        if (slow_spare_.capacity() < live_count_ + 1) {
            std::vector<SlowElem> spare;
            spare.reserve(std::max<std::size_t>(16, 2 * (live_count_ + 1)));
            slow_spare_.swap(spare);
        }
        if (free_head_ == kNil) {
            entries_.emplace_back();
            entries_.back().next = free_head_;
            free_head_ = static_cast<std::uint32_t>(entries_.size() - 1);
        }
    } catch (const std::bad_alloc&) {
        LOOM_LOG_ERROR("callback queue: out of memory adding a callback ({} registered)", registered_);
        return Status::no_memory;
    }
    std::uint32_t slot = free_head_;
    Entry& entry = entries_[slot];
    free_head_ = entry.next;
    entry.cb = cb;
    entry.arg = arg;
    entry.next = kNil;
    entry.state = State::adding;
    entry.place = Place::none;
    entry.oneshot = oneshot;
    ++live_count_;
    ++registered_;
    push_pending_locked(slot);
    hot_.pending.store(true, std::memory_order_release);
    return static_cast<CallbackId>(make_id(slot, entry.generation));
}

Status CallbackQueue::remove(CallbackId id) noexcept {
    auto raw = static_cast<std::uint64_t>(id);
    auto slot = static_cast<std::uint32_t>(raw);
    auto generation = static_cast<std::uint32_t>(raw >> 32);
    std::lock_guard guard(lock_);
    if (slot >= entries_.size() || entries_[slot].generation != generation ||
        (entries_[slot].state != State::adding && entries_[slot].state != State::active)) {
        LOOM_LOG_DEBUG("callback queue: remove({:#x}): no such callback", raw);
        return Status::no_element;
    }
    mark_removing_locked(slot);
    return Status::ok;
}

unsigned CallbackQueue::remove_matching(bool (*match)(void* ctx, ProgressCallback cb, void* arg), void* ctx) {
    std::lock_guard guard(lock_);
    unsigned removed = 0;
    for (std::uint32_t slot = 0; slot < entries_.size(); ++slot) {
        const Entry& entry = entries_[slot];
        if ((entry.state == State::adding || entry.state == State::active) &&
            match(ctx, entry.cb, entry.arg)) {
            mark_removing_locked(slot);
            ++removed;
        }
    }
    return removed;
}

std::size_t CallbackQueue::size() const {
    std::lock_guard guard(lock_);
    return registered_;
}

void CallbackQueue::mark_removing_locked(std::uint32_t slot) noexcept {
    Entry& entry = entries_[slot];
    entry.state = State::removing;
    --registered_;
    if (!entry.on_pending) {
        push_pending_locked(slot);
    }
    hot_.pending.store(true, std::memory_order_release);
    // The dispatcher may be in the middle of a pass and about to call this element:
    // make it harmless right away. Only the dispatcher thread may touch its arrays, and
    // only it needs this, because other threads get the weaker "next dispatch" guarantee.
    if (entry.place != Place::none && hot_.dispatcher.load(std::memory_order_relaxed) == thread_token()) {
        if (entry.place == Place::fast) {
            hot_.fast[entry.index] = FastElem{&noop_callback, nullptr};
        } else {
            slow_[entry.index].cb = &noop_callback;
            slow_[entry.index].arg = nullptr;
        }
    }
}

void CallbackQueue::push_pending_locked(std::uint32_t slot) noexcept {
    Entry& entry = entries_[slot];
    LOOM_ASSERT(!entry.on_pending);
    entry.on_pending = true;
    entry.next = kNil;
    if (pending_tail_ == kNil) {
        pending_head_ = slot;
    } else {
        entries_[pending_tail_].next = slot;
    }
    pending_tail_ = slot;
}

void CallbackQueue::free_slot_locked(std::uint32_t slot) noexcept {
    Entry& entry = entries_[slot];
    LOOM_ASSERT(entry.place == Place::none && !entry.on_pending);
    entry.cb = nullptr;
    entry.arg = nullptr;
    entry.state = State::free;
    // Generation 0 would let a handle collide with CallbackId::invalid.
    entry.generation = entry.generation == ~std::uint32_t{0} ? 1 : entry.generation + 1;
    entry.next = free_head_;
    free_head_ = slot;
    --live_count_;
}

void CallbackQueue::apply_pending() noexcept {
    std::lock_guard guard(lock_);
    apply_locked();
}

void CallbackQueue::apply_locked() noexcept {
    hot_.pending.store(false, std::memory_order_relaxed);
    std::uint32_t slot = pending_head_;
    pending_head_ = pending_tail_ = kNil;
    while (slot != kNil) {
        Entry& entry = entries_[slot];
        std::uint32_t next = entry.next;
        entry.on_pending = false;
        entry.next = kNil;
        if (entry.state == State::adding) {
            place_locked(slot);
            entry.state = State::active;
        } else if (entry.state == State::removing) {
            if (entry.place != Place::none) {
                unplace_locked(slot);
            }
            free_slot_locked(slot);
        }
        slot = next;
    }
    promote_locked();
    hot_.has_slow = !slow_.empty();
}

void CallbackQueue::place_locked(std::uint32_t slot) noexcept {
    Entry& entry = entries_[slot];
    if (!entry.oneshot && hot_.fast_count < kFastSlots) {
        std::uint32_t index = hot_.fast_count;
        hot_.fast[index] = FastElem{entry.cb, entry.arg};
        fast_slot_[index] = slot;
        ++hot_.fast_count;
        entry.place = Place::fast;
        entry.index = index;
    } else {
        slow_push_locked(SlowElem{entry.cb, entry.arg, slot, entry.oneshot});
        entry.place = Place::slow;
        entry.index = static_cast<std::uint32_t>(slow_.size() - 1);
    }
}

void CallbackQueue::unplace_locked(std::uint32_t slot) noexcept {
    Entry& entry = entries_[slot];
    std::uint32_t index = entry.index;
    if (entry.place == Place::fast) {
        std::uint32_t last = --hot_.fast_count;
        if (index != last) {
            hot_.fast[index] = hot_.fast[last];
            fast_slot_[index] = fast_slot_[last];
            entries_[fast_slot_[index]].index = index;
        }
    } else {
        LOOM_ASSERT(entry.place == Place::slow);
        auto last = static_cast<std::uint32_t>(slow_.size() - 1);
        if (index != last) {
            slow_[index] = slow_[last];
            entries_[slow_[index].slot].index = index;
        }
        slow_.pop_back();
    }
    entry.place = Place::none;
}

void CallbackQueue::slow_push_locked(const SlowElem& elem) noexcept {
    if (slow_.size() == slow_.capacity()) {
        // add() keeps the spare big enough for every live entry, and this one is live
        // but not in slow_ yet, so the copy below fits without allocating.
        LOOM_ASSERT(slow_spare_.empty() && slow_spare_.capacity() > slow_.size());
        slow_spare_.assign(slow_.begin(), slow_.end());
        slow_.swap(slow_spare_);
        slow_spare_.clear();
    }
    slow_.push_back(elem);
}

void CallbackQueue::promote_locked() noexcept {
    // A fast slot freed by a removal goes to a persistent callback waiting in the slow list.
    std::size_t i = 0;
    while (hot_.fast_count < kFastSlots && i < slow_.size()) {
        if (slow_[i].oneshot) {
            ++i;
            continue;
        }
        std::uint32_t slot = slow_[i].slot;
        unplace_locked(slot);  // moves the last slow element to i: look at i again
        place_locked(slot);
    }
}

unsigned CallbackQueue::dispatch_slow() noexcept {
    unsigned count = 0;
    bool fired = false;
    // No structural change to slow_ can happen during the pass (only apply does that, and
    // apply does not run while the dispatcher token is set), so indexes stay valid.
    for (std::size_t i = 0; i < slow_.size(); ++i) {
        ProgressCallback cb = slow_[i].cb;
        void* arg = slow_[i].arg;
        if (slow_[i].oneshot) {
            if (cb == &noop_callback) {
                continue;  // removed, or already ran
            }
            slow_[i].cb = &noop_callback;
            slow_[i].arg = nullptr;
            fired = true;
        }
        count += cb(arg);
    }
    if (fired) {
        retire_fired_oneshots();
    }
    return count;
}

void CallbackQueue::retire_fired_oneshots() noexcept {
    std::lock_guard guard(lock_);
    for (const SlowElem& elem : slow_) {
        // A neutralized oneshot whose entry is still active has run; one whose entry is
        // removing was removed before running and is already queued for compaction.
        if (elem.oneshot && elem.cb == &noop_callback && entries_[elem.slot].state == State::active) {
            mark_removing_locked(elem.slot);
        }
    }
    // The pass is over, so the arrays can be compacted right away.
    apply_locked();
}

}  // namespace loom::ucs
