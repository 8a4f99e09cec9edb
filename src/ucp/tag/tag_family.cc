/**
 * The tag family as a plug-in of the worker (core/family.h): its state (the matcher and
 * the pool of small unexpected-message descriptors), handlers, and what it does when an
 * endpoint fails or the worker goes.
 */
#include "ucp/rndv/rndv.h"
#include "ucp/tag/tag_proto.h"

#include <cstdlib>
#include <memory>

namespace loom::ucp {

namespace {

void free_unexpected(TagWorker& t, UnexpDesc* desc) {
    if (desc->pooled) {
        t.desc_pool.put(desc);
    } else {
        std::free(desc);
    }
}

Status tag_family_init(Worker& w) {
    auto t = std::make_unique<TagWorker>();
    if (Status s = t->tm.init(w.context.config().tag_buckets); s != Status::ok) return s;
    t->unexp_max = w.context.config().unexpected_max;
    ucs::MemPoolParams dp;
    dp.name = "ucp_unexp_small";
    dp.elem_size = sizeof(UnexpDesc) + TagWorker::kSmallDescData;
    dp.alignment = 64;
    dp.elems_per_chunk = 128;
    if (Status s = t->desc_pool.init(std::move(dp)); s != Status::ok) return s;
    w.family_state[kTagSlot] = t.release();
    return tag_register_handlers(w);
}

void tag_family_cleanup(Worker& w) {
    TagWorker& t = tag_of(w);
    // Messages still being assembled (tag's and the other families' receives alike) first:
    // a descriptor that is also queued as unexpected goes with the queue below (purging the
    // queue first freed it before this loop asked whether it was queued; found by fuzzing).
    for (auto& [key, target] : w.frags) {
        if (target.recv != nullptr) w.complete(target.recv, Status::canceled);
        if (target.desc != nullptr && !target.desc->entry.queued()) free_unexpected(t, target.desc);
    }
    w.frags.clear();
    t.tm.purge_expected([&](TagRecvEntry& entry) {
        auto* req =
            reinterpret_cast<Request*>(reinterpret_cast<char*>(&entry) - offsetof(Request, recv.entry));
        w.complete(req, Status::canceled);
    });
    t.tm.purge_unexpected(
        [&](TagUnexpEntry& entry) { free_unexpected(t, reinterpret_cast<UnexpDesc*>(&entry)); });
    delete &t;
    w.family_state[kTagSlot] = nullptr;
}

void tag_family_ep_failed(Worker& w, Ep* ep, Status status) { tag_fail_peer_receives(w, ep->remote_uuid, status); }

const ProtoFamily kTagFamily{.name = "tag",
                             .slot = kTagSlot,
                             .init = tag_family_init,
                             .cleanup = tag_family_cleanup,
                             .ep_created = tag_flow_ep_created,
                             .ep_failed = tag_family_ep_failed,
                             .expire = tag_expire};
LOOM_FAMILY_REGISTER(kTagFamily);

}  // namespace

}  // namespace loom::ucp
