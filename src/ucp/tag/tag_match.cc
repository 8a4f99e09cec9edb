/**
 * Tag matcher: set-up and the wildcard searches. The exact-tag paths are inline in
 * tag_match.h; the loops here only run when wildcard receives are posted or a
 * wildcard receive looks at the unexpected queue.
 */
#include "ucp/tag/tag_match.h"

namespace loom::ucp {

TagMatcher::~TagMatcher() {
    exact_.clear();
    wildcard_.clear();
    num_wildcard_ = 0;
    unexp_hash_.clear();
    unexp_order_.clear();
}

Status TagMatcher::init(std::size_t num_buckets) noexcept {
    Status status = exact_.init(num_buckets);
    if (status != Status::ok) return status;
    return unexp_hash_.init(num_buckets);
}

TagRecvEntry* TagMatcher::match_with_wildcards(Tag msg_tag, TagRecvEntry* exact) noexcept {
    // The wildcard list is in post order, so once its receives are younger than the
    // bucket's candidate none of them can win: the scan stops there, and an exact
    // receive posted early is found without walking every wildcard behind it.
    const std::uint64_t limit = exact != nullptr ? exact->sn : ~std::uint64_t{0};
    for (TagRecvEntry& recv : wildcard_) {
        if (recv.sn > limit) break;
        if (tag_matches(msg_tag, recv.tag, recv.mask)) {
            WildcardList::remove(recv);
            --num_wildcard_;
            return &recv;
        }
    }
    if (exact != nullptr) exact_.remove(*exact);
    return exact;
}

TagUnexpEntry* TagMatcher::find_unexpected_wildcard(Tag tag, Tag mask) noexcept {
    // Only the arrival-order list can answer a wildcard: matching messages may sit in
    // any bucket, and MPI wants the earliest of them.
    for (TagUnexpEntry& msg : unexp_order_) {
        if (tag_matches(msg.tag, tag, mask)) return &msg;
    }
    return nullptr;
}

}  // namespace loom::ucp
