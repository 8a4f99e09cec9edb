/**
 * Intrusive singly-linked FIFO queue, for pending and request queues.
 *
 * The element embeds a QueueLink (one pointer, 8 bytes):
 *
 *     struct Op { QueueLink qlink; ... };
 *     Queue<Op, &Op::qlink> pending;
 *     pending.push_back(op);                       // O(1), never allocates
 *     while (Op* op = pending.pop_front()) ...     // O(1)
 *
 * The queue keeps its head and the address of the last `next` field (the head
 * itself when empty), so push_back, push_front, pop_front and splice are O(1) with
 * no end-of-queue special case in push_back. Removing an arbitrary element is O(n)
 * (remove()), or O(1) through an iterator (erase()), which is how a queue is
 * filtered in one pass.
 *
 * Not thread-safe: a queue is owned by one worker.
 */
#pragma once

#include "ucs/datastruct/intrusive.h"
#include "ucs/debug/assert.h"
#include "ucs/sys/compiler.h"

#include <cstddef>
#include <iterator>

namespace loom::ucs {

/** The link an element embeds to be put in a Queue. */
struct QueueLink {
    QueueLink* next = nullptr;
};

static_assert(sizeof(QueueLink) == 8, "QueueLink must stay one pointer");

/** Intrusive FIFO queue of T, linked through the QueueLink member @p Link. */
template <typename T, QueueLink T::*Link>
class Queue {
public:
    class iterator;

    /** An empty queue. */
    Queue() noexcept = default;

    /** Takes over every element of @p other, which is left empty. */
    Queue(Queue&& other) noexcept { splice_back(other); }

    /** Forgets this queue's elements and takes over those of @p other. */
    Queue& operator=(Queue&& other) noexcept {
        if (this != &other) {
            clear();
            splice_back(other);
        }
        return *this;
    }

    Queue(const Queue&) = delete;
    Queue& operator=(const Queue&) = delete;

    /** True when the queue has no element. */
    bool empty() const noexcept { return head_ == nullptr; }

    /** Number of elements; O(n), meant for statistics and tests. */
    std::size_t length() const noexcept {
        std::size_t n = 0;
        for (const QueueLink* l = head_; l != nullptr; l = l->next) ++n;
        return n;
    }

    /** First element; the queue must not be empty. */
    T& front() noexcept {
        LOOM_ASSERT(!empty());
        return element(*head_);
    }

    /** Last element; the queue must not be empty. */
    T& back() noexcept {
        LOOM_ASSERT(!empty());
        // ptail_ points at the `next` field of the last link, which is its first member.
        return element(*reinterpret_cast<QueueLink*>(ptail_));
    }

    /** Appends @p elem, which must not be in a queue; O(1). */
    LOOM_ALWAYS_INLINE void push_back(T& elem) noexcept {
        QueueLink& l = link(elem);
        l.next = nullptr;
        *ptail_ = &l;
        ptail_ = &l.next;
    }

    /** Prepends @p elem, which must not be in a queue; O(1). */
    LOOM_ALWAYS_INLINE void push_front(T& elem) noexcept {
        QueueLink& l = link(elem);
        l.next = head_;
        if (head_ == nullptr) ptail_ = &l.next;
        head_ = &l;
    }

    /** Removes and returns the first element; nullptr when the queue is empty. */
    LOOM_ALWAYS_INLINE T* pop_front() noexcept {
        QueueLink* l = head_;
        if (l == nullptr) return nullptr;
        head_ = l->next;
        if (head_ == nullptr) ptail_ = &head_;
        l->next = nullptr;
        return &element(*l);
    }

    /** Removes @p elem from this queue; O(n). Returns false when it is not in it. */
    bool remove(T& elem) noexcept {
        for (auto it = begin(); it != end(); ++it) {
            if (&*it == &elem) {
                erase(it);
                return true;
            }
        }
        return false;
    }

    /**
     * Removes the element @p it points at in O(1) and returns an iterator to the
     * element that followed it (end() if none).
     */
    iterator erase(iterator it) noexcept {
        QueueLink** pos = it.pos_;
        QueueLink* l = *pos;
        LOOM_ASSERT(l != nullptr);
        *pos = l->next;
        if (ptail_ == &l->next) ptail_ = pos;
        l->next = nullptr;
        return iterator(pos);
    }

    /** Removes every element for which @p pred(T&) is true, keeping the order of the rest. Returns how many.
     */
    template <typename Pred>
    std::size_t remove_if(Pred&& pred) {
        std::size_t removed = 0;
        for (auto it = begin(); it != end();) {
            if (pred(*it)) {
                it = erase(it);
                ++removed;
            } else {
                ++it;
            }
        }
        return removed;
    }

    /** Appends every element of @p other, in order, leaving @p other empty; O(1). */
    void splice_back(Queue& other) noexcept {
        if (other.empty() || &other == this) return;
        *ptail_ = other.head_;
        ptail_ = other.ptail_;
        other.reset();
    }

    /** Prepends every element of @p other, in order, leaving @p other empty; O(1). */
    void splice_front(Queue& other) noexcept {
        if (other.empty() || &other == this) return;
        *other.ptail_ = head_;
        if (head_ == nullptr) ptail_ = other.ptail_;
        head_ = other.head_;
        other.reset();
    }

    /** Forgets every element in O(1); their links are left as they are. */
    void clear() noexcept { reset(); }

    /**
     * Forward iterator. It refers to the link field that points at the current
     * element, which is what lets erase() unlink in O(1) and keep iterating.
     */
    class iterator {
    public:
        using iterator_category = std::forward_iterator_tag;
        using value_type = T;
        using difference_type = std::ptrdiff_t;
        using pointer = T*;
        using reference = T&;

        iterator() noexcept = default;
        T& operator*() const noexcept { return element(**pos_); }
        T* operator->() const noexcept { return &element(**pos_); }
        iterator& operator++() noexcept {
            pos_ = &(*pos_)->next;
            return *this;
        }
        iterator operator++(int) noexcept {
            iterator old = *this;
            ++*this;
            return old;
        }
        // Compares the elements, not the positions: end() stays valid across erase().
        bool operator==(const iterator& other) const noexcept { return *pos_ == *other.pos_; }

    private:
        friend class Queue;
        explicit iterator(QueueLink** pos) noexcept : pos_(pos) {}
        QueueLink** pos_ = nullptr;
    };

    iterator begin() noexcept { return iterator(&head_); }
    iterator end() noexcept { return iterator(ptail_); }

    /** Calls @p fn(const T&) for each element in order. */
    template <typename Fn>
    void for_each(Fn&& fn) const {
        for (const QueueLink* l = head_; l != nullptr; l = l->next) fn(element(*l));
    }

    /** The element that embeds @p l. */
    static LOOM_ALWAYS_INLINE T& element(QueueLink& l) noexcept { return container_of<Link>(l); }
    static LOOM_ALWAYS_INLINE const T& element(const QueueLink& l) noexcept { return container_of<Link>(l); }

    /** The link embedded in @p elem. */
    static LOOM_ALWAYS_INLINE QueueLink& link(T& elem) noexcept { return elem.*Link; }

private:
    void reset() noexcept {
        head_ = nullptr;
        ptail_ = &head_;
    }

    QueueLink* head_ = nullptr;
    QueueLink** ptail_ = &head_;
};

}  // namespace loom::ucs
