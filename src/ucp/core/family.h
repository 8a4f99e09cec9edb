/**
 * Protocol families as plug-ins of the worker. A family (tagged messages, active messages,
 * streams, RMA, rendezvous) owns its worker state and its wire handlers; the worker knows
 * families only through this control-path interface and calls every registered family at
 * the points below, in slot order (tag 0, active messages 1, stream 2, RMA 3, rendezvous
 * 4; where the order matters, the later slot's header says why). The data path never
 * comes through here: a family's protocols are in the endpoint's protocol table
 * (proto/proto.h), and its API calls reach its code directly.
 *
 * A family keeps its state in Worker::family_state[slot]; its slot is a constant of its
 * own header, so reaching the state costs one load. Registration checks that no two
 * families share a slot.
 */
#pragma once

#include "ucs/type/status.h"

#include <cstdint>

namespace loom::ucp {

class Worker;
class Ep;
struct Request;

/** How many families a worker has room for (Worker::family_state). */
inline constexpr unsigned kMaxFamilies = 8;

/** A protocol family's control path; every hook may be nullptr. */
struct ProtoFamily {
    const char* name;
    std::uint8_t slot;  ///< its index in Worker::family_state, unique
    /**
     * Worker creation: creates the family's state in family_state[slot] and registers its
     * AM handlers on the worker's ifaces. An error fails the worker's creation (cleanup
     * and destroy then run for the families whose state was created).
     */
    Status (*init)(Worker& worker);
    /**
     * The worker goes, its ifaces still open: fail what is outstanding; may free the state
     * (then sets its slot to nullptr). Called only when the slot is set.
     */
    void (*cleanup)(Worker& worker);
    /**
     * After the ifaces closed (nothing a transport holds can call back any more): frees
     * what is left of the state. Called only when the slot is still set.
     */
    void (*destroy)(Worker& worker);
    /**
     * @p ep failed or is destroyed, marked failed already, its lanes' send queues purged
     * (every queued request failed through its abort): fail what else of the family waits
     * on the endpoint. Runs before the endpoint's outstanding requests fail with @p status.
     */
    void (*ep_purge)(Worker& worker, Ep* ep, Status status);
    /** @p ep was just created (it may not be wired up yet: control messages queue). */
    void (*ep_created)(Worker& worker, Ep* ep);
    /** @p ep failed with @p status, its outstanding requests failed already. */
    void (*ep_failed)(Worker& worker, Ep* ep, Status status);
    /** @p ep is closed or destroyed: requests bound to it complete with @p status. */
    void (*ep_closed)(Worker& worker, Ep* ep, Status status);
    /**
     * Flush request @p req (endpoint req.ep, or every endpoint when nullptr) has
     * nothing outstanding: whether the family's part of the flush is done too (RMA: the
     * transports' remote completion), with its error in @p status.
     */
    bool (*flush_done)(Worker& worker, Request& req, Status& status);
    /**
     * The fast path of a flush of @p ep (every endpoint when nullptr) that has nothing
     * outstanding: true when the family's part is done in the call, with its result in
     * @p status (nothing to wait for: no request needed); false when it must wait
     * (flush_done then runs through a request). nullptr: nothing to do.
     */
    bool (*flush_idle)(Worker& worker, Ep* ep, Status& status);
    /**
     * @p req's deadline passed (req.expired is set; deadline.cc): if it is the family's and
     * can still be withdrawn, withdraw it (completing it with timed_out now, or once its
     * peer answered) and return true. false: not the family's, or too late to withdraw.
     */
    bool (*expire)(Worker& worker, Request& req);
};

/** Makes @p family known to every worker created from now on (LOOM_FAMILY_REGISTER). */
void family_register(const ProtoFamily& family);

/** The registered families in slot order. */
struct FamilyList {
    const ProtoFamily* const* begin;
    const ProtoFamily* const* end;
};
FamilyList families();

#define LOOM_FAMILY_CONCAT_(a, b) a##b
#define LOOM_FAMILY_CONCAT(a, b) LOOM_FAMILY_CONCAT_(a, b)
/** Registers @p family (a ProtoFamily constant) at load time. */
#define LOOM_FAMILY_REGISTER(family)                                                               \
    [[maybe_unused]] static const bool LOOM_FAMILY_CONCAT(loom_family_registered_, __LINE__) = \
        (::loom::ucp::family_register(family), true)

}  // namespace loom::ucp
