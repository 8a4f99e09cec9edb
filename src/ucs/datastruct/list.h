/**
 * Intrusive doubly-linked list.
 *
 * The element embeds a ListLink (two pointers, 16 bytes) and the list names it by
 * member pointer:
 *
 *     struct Request { ListLink link; ... };
 *     List<Request, &Request::link> pending;
 *     pending.push_back(req);            // O(1), never allocates
 *     List<Request, &Request::link>::remove(req);   // O(1), the list is not needed
 *
 * The list is circular around a sentinel link stored in the List object, so insert
 * and remove have no branches for the empty or the end case. A link that is not in
 * a list has null pointers (set by its initializer and again by every removal), so
 * ListLink::linked() is always accurate; assertion builds use it to catch inserting
 * an element that is already in a list, which would silently corrupt both lists.
 *
 * Not thread-safe: a list is owned by one worker.
 */
#pragma once

#include "ucs/datastruct/intrusive.h"
#include "ucs/debug/assert.h"
#include "ucs/sys/compiler.h"

#include <cstddef>
#include <iterator>
#include <type_traits>

namespace loom::ucs {

/** The link an element embeds to be put in a List (or a HashList). */
struct ListLink {
    ListLink* next = nullptr;
    ListLink* prev = nullptr;

    /** True while the element is in a list. */
    bool linked() const noexcept { return next != nullptr; }
};

static_assert(sizeof(ListLink) == 16, "ListLink must stay two pointers");

/**
 * Intrusive doubly-linked list of T, linked through the ListLink member @p Link.
 * Elements are referenced, never copied or owned: destroying a list that still holds
 * elements leaves their links pointing at it, so call clear() first when the
 * elements outlive the list.
 */
template <typename T, ListLink T::*Link>
class List {
    template <typename U>
    class Iterator;
    template <typename U>
    class SafeIterator;

public:
    using iterator = Iterator<T>;
    using const_iterator = Iterator<const T>;

    /** An empty list. */
    List() noexcept { reset(); }

    /** Takes over every element of @p other, which is left empty. */
    List(List&& other) noexcept {
        reset();
        splice_back(other);
    }

    /** Unlinks this list's elements (see clear()) and takes over those of @p other. */
    List& operator=(List&& other) noexcept {
        if (this != &other) {
            clear();
            splice_back(other);
        }
        return *this;
    }

    List(const List&) = delete;
    List& operator=(const List&) = delete;

    /** True when the list has no element. */
    bool empty() const noexcept { return head_.next == &head_; }

    /** Number of elements; O(n), meant for statistics and tests. */
    std::size_t length() const noexcept {
        std::size_t n = 0;
        for (const ListLink* l = head_.next; l != &head_; l = l->next) ++n;
        return n;
    }

    /** First element; the list must not be empty. */
    T& front() noexcept {
        LOOM_ASSERT(!empty());
        return element(*head_.next);
    }
    const T& front() const noexcept {
        LOOM_ASSERT(!empty());
        return element(*head_.next);
    }

    /** Last element; the list must not be empty. */
    T& back() noexcept {
        LOOM_ASSERT(!empty());
        return element(*head_.prev);
    }
    const T& back() const noexcept {
        LOOM_ASSERT(!empty());
        return element(*head_.prev);
    }

    /** Inserts @p elem, which must not be in any list, as the first element. */
    LOOM_ALWAYS_INLINE void push_front(T& elem) noexcept { link_between(link(elem), &head_, head_.next); }

    /** Inserts @p elem, which must not be in any list, as the last element. */
    LOOM_ALWAYS_INLINE void push_back(T& elem) noexcept { link_between(link(elem), head_.prev, &head_); }

    /** Inserts @p elem right after @p pos, which must be in a list. */
    static LOOM_ALWAYS_INLINE void insert_after(T& pos, T& elem) noexcept {
        ListLink& p = link(pos);
        LOOM_ASSERT(p.linked());
        link_between(link(elem), &p, p.next);
    }

    /** Inserts @p elem right before @p pos, which must be in a list. */
    static LOOM_ALWAYS_INLINE void insert_before(T& pos, T& elem) noexcept {
        ListLink& p = link(pos);
        LOOM_ASSERT(p.linked());
        link_between(link(elem), p.prev, &p);
    }

    /** Removes @p elem, which must be in a list, from it; O(1). */
    static LOOM_ALWAYS_INLINE void remove(T& elem) noexcept {
        ListLink& l = link(elem);
        LOOM_ASSERT(l.linked());
        l.prev->next = l.next;
        l.next->prev = l.prev;
        l.next = nullptr;
        l.prev = nullptr;
    }

    /** Removes and returns the first element; nullptr when the list is empty. */
    LOOM_ALWAYS_INLINE T* pop_front() noexcept {
        if (empty()) return nullptr;
        T& elem = element(*head_.next);
        remove(elem);
        return &elem;
    }

    /** Removes and returns the last element; nullptr when the list is empty. */
    LOOM_ALWAYS_INLINE T* pop_back() noexcept {
        if (empty()) return nullptr;
        T& elem = element(*head_.prev);
        remove(elem);
        return &elem;
    }

    /** The element after @p elem (which must be in this list); nullptr at the end. */
    T* next(T& elem) noexcept {
        ListLink* l = link(elem).next;
        return l == &head_ ? nullptr : &element(*l);
    }

    /** The element before @p elem (which must be in this list); nullptr at the start. */
    T* prev(T& elem) noexcept {
        ListLink* l = link(elem).prev;
        return l == &head_ ? nullptr : &element(*l);
    }

    /** Moves every element of @p other to the end of this list, in order; O(1). */
    void splice_back(List& other) noexcept {
        if (other.empty() || &other == this) return;
        ListLink* first = other.head_.next;
        ListLink* last = other.head_.prev;
        first->prev = head_.prev;
        head_.prev->next = first;
        last->next = &head_;
        head_.prev = last;
        other.reset();
    }

    /** Moves every element of @p other to the start of this list, in order; O(1). */
    void splice_front(List& other) noexcept {
        if (other.empty() || &other == this) return;
        ListLink* first = other.head_.next;
        ListLink* last = other.head_.prev;
        last->next = head_.next;
        head_.next->prev = last;
        first->prev = &head_;
        head_.next = first;
        other.reset();
    }

    /** Removes every element (resetting their links, so O(n)). */
    void clear() noexcept {
        ListLink* l = head_.next;
        while (l != &head_) {
            ListLink* next = l->next;
            l->next = nullptr;
            l->prev = nullptr;
            l = next;
        }
        reset();
    }

    iterator begin() noexcept { return iterator(head_.next); }
    iterator end() noexcept { return iterator(&head_); }
    const_iterator begin() const noexcept { return const_iterator(head_.next); }
    const_iterator end() const noexcept { return const_iterator(const_cast<ListLink*>(&head_)); }

    /**
     * A range for iterating while removing: the successor is read before the loop
     * body runs, so the body may remove (or move to another list) the current
     * element. It must not remove any other element of this list.
     *
     *     for (Request& r : pending.safe()) if (r.done) List<...>::remove(r);
     */
    class SafeRange {
    public:
        SafeIterator<T> begin() const noexcept { return SafeIterator<T>(head_->next, head_); }
        SafeIterator<T> end() const noexcept { return SafeIterator<T>(head_, head_); }

    private:
        friend class List;
        explicit SafeRange(ListLink* head) noexcept : head_(head) {}
        ListLink* head_;
    };

    /** See SafeRange. */
    SafeRange safe() noexcept { return SafeRange(&head_); }

    /** The element that embeds @p l. */
    static LOOM_ALWAYS_INLINE T& element(ListLink& l) noexcept { return container_of<Link>(l); }
    static LOOM_ALWAYS_INLINE const T& element(const ListLink& l) noexcept { return container_of<Link>(l); }

    /** The link embedded in @p elem. */
    static LOOM_ALWAYS_INLINE ListLink& link(T& elem) noexcept { return elem.*Link; }

private:
    template <typename U>
    class Iterator {
    public:
        using iterator_category = std::bidirectional_iterator_tag;
        using value_type = std::remove_const_t<U>;
        using difference_type = std::ptrdiff_t;
        using pointer = U*;
        using reference = U&;

        Iterator() noexcept = default;
        U& operator*() const noexcept { return element(*cur_); }
        U* operator->() const noexcept { return &element(*cur_); }
        Iterator& operator++() noexcept {
            cur_ = cur_->next;
            return *this;
        }
        Iterator operator++(int) noexcept {
            Iterator old = *this;
            cur_ = cur_->next;
            return old;
        }
        Iterator& operator--() noexcept {
            cur_ = cur_->prev;
            return *this;
        }
        Iterator operator--(int) noexcept {
            Iterator old = *this;
            cur_ = cur_->prev;
            return old;
        }
        bool operator==(const Iterator& other) const noexcept { return cur_ == other.cur_; }

    private:
        friend class List;
        explicit Iterator(ListLink* cur) noexcept : cur_(cur) {}
        ListLink* cur_ = nullptr;
    };

    template <typename U>
    class SafeIterator {
    public:
        U& operator*() const noexcept { return element(*cur_); }
        SafeIterator& operator++() noexcept {
            cur_ = next_;
            next_ = cur_ == head_ ? head_ : cur_->next;
            return *this;
        }
        bool operator==(const SafeIterator& other) const noexcept { return cur_ == other.cur_; }

    private:
        friend class List;
        SafeIterator(ListLink* cur, ListLink* head) noexcept : cur_(cur), next_(cur->next), head_(head) {}
        ListLink* cur_;
        ListLink* next_;
        ListLink* head_;
    };

    static LOOM_ALWAYS_INLINE void link_between(ListLink& l, ListLink* prev, ListLink* next) noexcept {
        LOOM_ASSERT(!l.linked());
        l.prev = prev;
        l.next = next;
        prev->next = &l;
        next->prev = &l;
    }

    void reset() noexcept {
        head_.next = &head_;
        head_.prev = &head_;
    }

    ListLink head_;
};

}  // namespace loom::ucs
