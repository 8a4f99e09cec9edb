/**
 * Tag matching with MPI semantics: the expected queue (posted receives) and the
 * unexpected queue (arrived messages that no receive has taken yet) of one worker.
 *
 * A receive is posted with (tag, mask) and takes a message tagged t when
 * (t & mask) == (tag & mask). MPI requires that a message goes to the earliest posted
 * receive that matches it, and that a receive takes the earliest arrived message that
 * matches it. Both queues are hashed by tag so the common exact-tag case touches one
 * bucket, and keep a second structure for wildcards:
 *
 * - Expected: receives with a full mask sit in a hash table of buckets keyed by tag,
 *   the others in one wildcard list, both in post order. Every receive gets a sequence
 *   number when it is queued; an arriving message compares the oldest exact receive for
 *   its tag with the first matching wildcard receive and takes the one posted first.
 * - Unexpected: every message sits both in a hash table keyed by its tag (for exact
 *   receives) and in one list in arrival order (for wildcard receives). The lists are
 *   doubly linked, so a message taken through either structure leaves the other in O(1).
 *
 * Everything is intrusive: the caller's receive request embeds a TagRecvEntry and its
 * message descriptor a TagUnexpEntry, and gets back to its own object with
 * ucs::container_of(). Queuing and matching never allocate, throw or call virtually.
 * The matcher reads nothing of a message but its tag, so a protocol is free to keep
 * the first fragment of a multi-fragment message as the descriptor and collect the
 * rest elsewhere (by message id).
 *
 * Not thread-safe: a matcher belongs to one worker, which serializes access.
 */
#pragma once

#include "ucs/datastruct/hash_list.h"
#include "ucs/datastruct/list.h"
#include "ucs/sys/compiler.h"
#include "ucs/type/status.h"

#include <cstddef>
#include <cstdint>

namespace loom::ucp {

/** A message tag. MPI libraries pack source rank, communicator and user tag into it. */
using Tag = std::uint64_t;

/** The mask of a receive that accepts exactly one tag. */
inline constexpr Tag kTagMaskFull = ~Tag{0};

/** True when a message tagged @p msg_tag satisfies a receive posted with (@p tag, @p mask). */
constexpr bool tag_matches(Tag msg_tag, Tag tag, Tag mask) noexcept {
    return ((msg_tag ^ tag) & mask) == 0;
}

/**
 * What the matcher keeps of a posted receive; the receive request embeds it. The
 * matcher fills the fields when it queues the receive; the caller only reads them.
 */
struct TagRecvEntry {
    ucs::ListLink link;    ///< in the tag's bucket (full mask) or in the wildcard list
    Tag tag = 0;           ///< the posted tag with the mask applied
    Tag mask = 0;          ///< the posted mask
    std::uint64_t sn = 0;  ///< post order, compared between the bucket and the wildcard list

    /** True while the receive is in the expected queue. */
    bool queued() const noexcept { return link.linked(); }
};

/**
 * What the matcher keeps of an unexpected message; the message descriptor embeds it.
 * The tag is set by TagMatcher::push_unexpected().
 */
struct TagUnexpEntry {
    ucs::ListLink hash_link;   ///< in the bucket of its tag
    ucs::ListLink order_link;  ///< in the list of every unexpected message, in arrival order
    Tag tag = 0;               ///< the message's tag

    /** True while the message is in the unexpected queue. */
    bool queued() const noexcept { return order_link.linked(); }
};

// Both entries live inside hot request and descriptor objects: keep them small.
static_assert(sizeof(TagRecvEntry) == 40, "TagRecvEntry grew");
static_assert(sizeof(TagUnexpEntry) == 40, "TagUnexpEntry grew");

/**
 * The expected and unexpected queues of one worker. Call init() once before use.
 * Entries are referenced, never owned: the owner empties both queues (purge_*())
 * before destroying the matcher; anything left is unlinked without a callback.
 */
class TagMatcher {
public:
    /** Bucket count a worker uses when its configuration does not say otherwise. */
    static constexpr std::size_t kDefaultBuckets = 1024;

    /** A matcher with no buckets; init() must be called before anything is queued. */
    TagMatcher() noexcept = default;

    /** Unlinks every entry still queued, so none is left pointing into freed buckets. */
    ~TagMatcher();

    TagMatcher(const TagMatcher&) = delete;
    TagMatcher& operator=(const TagMatcher&) = delete;

    /**
     * Allocates @p num_buckets buckets (a power of two) for each of the two hash tables.
     * Returns invalid_param for a bad count or a second call and no_memory when the
     * buckets cannot be allocated; after an error the matcher must not be used.
     */
    [[nodiscard]] Status init(std::size_t num_buckets) noexcept;

    /** Buckets per hash table (0 before init()). */
    std::size_t num_buckets() const noexcept { return exact_.num_buckets(); }

    /** The bucket @p tag hashes to, in both tables; exposed so tests can build collisions. */
    std::size_t bucket_index(Tag tag) const noexcept { return exact_.bucket_index(tag); }

    /**
     * Posts a receive for (@p tag, @p mask). When an unexpected message matches, the
     * earliest one that does is removed from the unexpected queue and returned, and
     * @p recv is left unqueued; otherwise @p recv (which must not be queued) joins the
     * expected queue and the result is nullptr.
     */
    LOOM_ALWAYS_INLINE TagUnexpEntry* post_recv(TagRecvEntry& recv, Tag tag, Tag mask) noexcept {
        TagUnexpEntry* msg = probe(tag, mask, true);
        if (msg == nullptr) push_expected(recv, tag, mask);
        return msg;
    }

    /**
     * Queues @p recv as a receive for (@p tag, @p mask) without searching the unexpected
     * queue: for a caller that has just probed it and found nothing.
     */
    LOOM_ALWAYS_INLINE void push_expected(TagRecvEntry& recv, Tag tag, Tag mask) noexcept {
        recv.tag = tag & mask;
        recv.mask = mask;
        recv.sn = next_sn_++;
        if (LOOM_LIKELY(mask == kTagMaskFull)) {
            exact_.insert(recv);
        } else {
            wildcard_.push_back(recv);
            ++num_wildcard_;
        }
    }

    /**
     * Matches a message tagged @p msg_tag that has just arrived against the expected
     * queue: removes and returns the earliest posted receive that accepts it, or returns
     * nullptr, after which the caller normally pushes the message with push_unexpected().
     */
    LOOM_ALWAYS_INLINE TagRecvEntry* match_expected(Tag msg_tag) noexcept {
        TagRecvEntry* exact = exact_.empty() ? nullptr : exact_.find(msg_tag);
        if (LOOM_UNLIKELY(num_wildcard_ != 0)) return match_with_wildcards(msg_tag, exact);
        if (exact != nullptr) exact_.remove(*exact);
        return exact;
    }

    /** Adds @p msg (not queued) with tag @p msg_tag at the end of the unexpected queue. */
    LOOM_ALWAYS_INLINE void push_unexpected(TagUnexpEntry& msg, Tag msg_tag) noexcept {
        msg.tag = msg_tag;
        unexp_hash_.insert(msg);
        unexp_order_.push_back(msg);
    }

    /**
     * Searches the unexpected queue for the earliest message a receive for (@p tag,
     * @p mask) would take. Returns it, or nullptr when none matches; with @p remove the
     * message leaves the queue, and the caller owns it from then on (a message handle).
     */
    LOOM_ALWAYS_INLINE TagUnexpEntry* probe(Tag tag, Tag mask, bool remove) noexcept {
        if (unexp_hash_.empty()) return nullptr;
        TagUnexpEntry* msg =
            LOOM_LIKELY(mask == kTagMaskFull) ? unexp_hash_.find(tag) : find_unexpected_wildcard(tag, mask);
        if (msg != nullptr && remove) remove_unexpected(*msg);
        return msg;
    }

    /**
     * The oldest unexpected message tagged exactly @p tag for which @p pred(TagUnexpEntry&)
     * is true, left in the queue; nullptr when none is. O(messages with @p tag's bucket).
     */
    template <typename Pred>
    TagUnexpEntry* find_unexpected(Tag tag, Pred&& pred) noexcept {
        if (unexp_hash_.empty()) return nullptr;
        for (TagUnexpEntry* msg = unexp_hash_.find(tag); msg != nullptr; msg = unexp_hash_.find_next(*msg)) {
            if (pred(*msg)) return msg;
        }
        return nullptr;
    }

    /** Removes @p msg, which must be in the unexpected queue, from it; O(1). */
    LOOM_ALWAYS_INLINE void remove_unexpected(TagUnexpEntry& msg) noexcept {
        unexp_hash_.remove(msg);
        UnexpOrderList::remove(msg);
    }

    /**
     * Cancels the posted receive @p recv in O(1). Returns true when it was removed, false
     * when it is not queued (already matched, cancelled, or never posted).
     */
    LOOM_ALWAYS_INLINE bool cancel(TagRecvEntry& recv) noexcept {
        if (!recv.queued()) return false;
        if (recv.mask == kTagMaskFull) {
            exact_.remove(recv);
        } else {
            WildcardList::remove(recv);
            --num_wildcard_;
        }
        return true;
    }

    /** Number of posted receives waiting in the expected queue. */
    std::size_t num_expected() const noexcept { return exact_.size() + num_wildcard_; }

    /** Number of messages waiting in the unexpected queue. */
    std::size_t num_unexpected() const noexcept { return unexp_hash_.size(); }

    /**
     * Calls @p fn(TagRecvEntry&) on every posted receive: bucket by bucket, then the
     * wildcard list (not in post order). @p fn may cancel() the receive it is given, and
     * no other, which is how receives are failed selectively.
     */
    template <typename Fn>
    void for_each_expected(Fn&& fn) {
        exact_.for_each(fn);
        for (TagRecvEntry& recv : wildcard_.safe()) fn(recv);
    }

    /**
     * Calls @p fn(TagUnexpEntry&) on every unexpected message in arrival order. @p fn may
     * remove_unexpected() the message it is given, and no other: e.g. to drop those of a
     * failed endpoint.
     */
    template <typename Fn>
    void for_each_unexpected(Fn&& fn) {
        for (TagUnexpEntry& msg : unexp_order_.safe()) fn(msg);
    }

    /**
     * Empties the expected queue, calling @p fn(TagRecvEntry&) on each receive after it
     * is unlinked, so @p fn may complete and free the request (worker destroy). Same
     * order as for_each_expected().
     */
    template <typename Fn>
    void purge_expected(Fn&& fn) {
        for_each_expected([&](TagRecvEntry& recv) {
            (void)cancel(recv);
            fn(recv);
        });
    }

    /**
     * Empties the unexpected queue in arrival order, calling @p fn(TagUnexpEntry&) on
     * each message after it is unlinked, so @p fn may release the descriptor.
     */
    template <typename Fn>
    void purge_unexpected(Fn&& fn) {
        for_each_unexpected([&](TagUnexpEntry& msg) {
            remove_unexpected(msg);
            fn(msg);
        });
    }

private:
    using ExactTable = ucs::HashList<TagRecvEntry, &TagRecvEntry::link, &TagRecvEntry::tag>;
    using WildcardList = ucs::List<TagRecvEntry, &TagRecvEntry::link>;
    using UnexpHashTable = ucs::HashList<TagUnexpEntry, &TagUnexpEntry::hash_link, &TagUnexpEntry::tag>;
    using UnexpOrderList = ucs::List<TagUnexpEntry, &TagUnexpEntry::order_link>;

    /** match_expected() when wildcard receives are posted; @p exact is the bucket's candidate. */
    TagRecvEntry* match_with_wildcards(Tag msg_tag, TagRecvEntry* exact) noexcept;

    /** The earliest unexpected message matching the wildcard receive (@p tag, @p mask). */
    TagUnexpEntry* find_unexpected_wildcard(Tag tag, Tag mask) noexcept;

    ExactTable exact_;       // full-mask receives, FIFO per tag
    WildcardList wildcard_;  // every other receive, in post order
    std::size_t num_wildcard_ = 0;
    std::uint64_t next_sn_ = 0;   // 64 bits: never wraps, so sn order is post order
    UnexpHashTable unexp_hash_;   // unexpected messages by tag, FIFO per tag
    UnexpOrderList unexp_order_;  // the same messages in arrival order
};

}  // namespace loom::ucp
