#define LOOM_LOG_COMPONENT (::loom::ucs::detail::async_log_component())

#include "ucs/async/timer_queue.h"

#include "ucs/async/async_log.h"
#include "ucs/debug/assert.h"

#include <new>
#include <utility>

namespace loom::ucs {

Result<TimerId> TimerQueue::add(TimerClock::time_point deadline, TimerClock::duration period,
                                TimerCallback cb, void* arg) {
    if (cb == nullptr) {
        LOOM_LOG_WARN("timer queue: cannot add a timer with a null callback (arg {})", arg);
        return Status::invalid_param;
    }
    if (period.count() < 0) {
        LOOM_LOG_WARN("timer queue: cannot add a timer with a negative period ({} ns)",
                      std::chrono::duration_cast<std::chrono::nanoseconds>(period).count());
        return Status::invalid_param;
    }
    try {
        heap_.reserve(heap_.size() + 1);  // so that the push below cannot fail
        if (free_head_ == kNil) {
            slots_.emplace_back();
            free_head_ = static_cast<std::uint32_t>(slots_.size() - 1);
        }
    } catch (const std::bad_alloc&) {
        LOOM_LOG_ERROR("timer queue: out of memory adding a timer ({} pending)", heap_.size());
        return Status::no_memory;
    }
    std::uint32_t slot = free_head_;
    Slot& s = slots_[slot];
    free_head_ = s.next_free;
    s.deadline = deadline;
    s.period = period;
    s.sequence = next_sequence_++;
    s.cb = cb;
    s.arg = arg;
    s.next_free = kNil;
    heap_.push_back(slot);
    s.heap_index = static_cast<std::uint32_t>(heap_.size() - 1);
    sift_up(heap_.size() - 1);
    return static_cast<TimerId>((static_cast<std::uint64_t>(s.generation) << 32) | slot);
}

std::uint32_t TimerQueue::find(TimerId id) const noexcept {
    auto raw = static_cast<std::uint64_t>(id);
    auto slot = static_cast<std::uint32_t>(raw);
    auto generation = static_cast<std::uint32_t>(raw >> 32);
    if (slot >= slots_.size() || slots_[slot].generation != generation || slots_[slot].heap_index == kNil) {
        return kNil;
    }
    return slot;
}

bool TimerQueue::contains(TimerId id) const noexcept {
    return find(id) != kNil;
}

Status TimerQueue::cancel(TimerId id) noexcept {
    std::uint32_t slot = find(id);
    if (slot == kNil) {
        return Status::no_element;
    }
    heap_erase(slots_[slot].heap_index);
    free_slot(slot);
    return Status::ok;
}

std::optional<TimerClock::time_point> TimerQueue::next_deadline() const noexcept {
    if (heap_.empty()) {
        return std::nullopt;
    }
    return slots_[heap_.front()].deadline;
}

bool TimerQueue::pop_expired(TimerClock::time_point now, std::uint64_t sequence_limit,
                             Expired& out) noexcept {
    if (heap_.empty()) {
        return false;
    }
    std::uint32_t slot = heap_.front();
    Slot& s = slots_[slot];
    if (s.deadline > now || s.sequence >= sequence_limit) {
        return false;
    }
    out = Expired{static_cast<TimerId>((static_cast<std::uint64_t>(s.generation) << 32) | slot), s.cb, s.arg};
    if (s.period.count() > 0) {
        // Next deadline on the period's grid strictly after now.
        auto missed = (now - s.deadline) / s.period;
        s.deadline += (missed + 1) * s.period;
        s.sequence = next_sequence_++;
        sift_down(0);
    } else {
        heap_erase(0);
        free_slot(slot);
    }
    return true;
}

bool TimerQueue::earlier(std::uint32_t a, std::uint32_t b) const noexcept {
    const Slot& sa = slots_[a];
    const Slot& sb = slots_[b];
    return sa.deadline < sb.deadline || (sa.deadline == sb.deadline && sa.sequence < sb.sequence);
}

void TimerQueue::heap_set(std::size_t index, std::uint32_t slot) noexcept {
    heap_[index] = slot;
    slots_[slot].heap_index = static_cast<std::uint32_t>(index);
}

void TimerQueue::sift_up(std::size_t index) noexcept {
    std::uint32_t slot = heap_[index];
    while (index > 0) {
        std::size_t parent = (index - 1) / 2;
        if (!earlier(slot, heap_[parent])) {
            break;
        }
        heap_set(index, heap_[parent]);
        index = parent;
    }
    heap_set(index, slot);
}

void TimerQueue::sift_down(std::size_t index) noexcept {
    std::uint32_t slot = heap_[index];
    std::size_t size = heap_.size();
    for (;;) {
        std::size_t child = 2 * index + 1;
        if (child >= size) {
            break;
        }
        if (child + 1 < size && earlier(heap_[child + 1], heap_[child])) {
            ++child;
        }
        if (!earlier(heap_[child], slot)) {
            break;
        }
        heap_set(index, heap_[child]);
        index = child;
    }
    heap_set(index, slot);
}

void TimerQueue::heap_erase(std::size_t index) noexcept {
    LOOM_ASSERT(index < heap_.size());
    std::uint32_t removed = heap_[index];
    std::uint32_t last = heap_.back();
    heap_.pop_back();
    slots_[removed].heap_index = kNil;
    if (index < heap_.size()) {
        // The last element fills the hole and may need to move either way.
        heap_set(index, last);
        sift_up(index);
        sift_down(slots_[last].heap_index);
    }
}

void TimerQueue::free_slot(std::uint32_t slot) noexcept {
    Slot& s = slots_[slot];
    s.cb = nullptr;
    s.arg = nullptr;
    s.heap_index = kNil;
    s.generation = s.generation == ~std::uint32_t{0} ? 1 : s.generation + 1;
    s.next_free = free_head_;
    free_head_ = slot;
}

}  // namespace loom::ucs
