/**
 * Keep-alive: noticing a peer host that vanished without a word.
 *
 * A peer process that dies is noticed by its transport at once (its sockets close, its
 * pidfd fires, rdma_cm disconnects). A peer host that loses power or its network says
 * nothing, and an idle endpoint waits for ever. Each transport watches for that in the
 * cheapest way it has, all to the bound LOOM_KEEPALIVE_INTERVAL x LOOM_KEEPALIVE_COUNT:
 * tcp by the kernel's keepalive probes and TCP_USER_TIMEOUT (keepalive_tcp_overrides; no
 * work here), shm by the peer's pidfd, and transports with kCapEpCheck (rc) by a probe that
 * this file's rounds ask for once per interval. A probe is answered by the peer's transport
 * (its NIC, its kernel), never by its progress: a peer that computes for minutes without
 * calling into Loom is alive.
 *
 * Only endpoints with error handling mode peer are checked, as in UCX: without it a
 * failed endpoint has nowhere to report to. The round runs from progress; the progress
 * loop pays one decrement and branch per call for it.
 */
#include "ucp/core/worker.h"

#include "ucp/core/ucp_log.h"
#include "ucs/config/table.h"

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace loom::ucp {

namespace {

/** Progress calls between two looks at the clock (shm's peer check and wire-up deadlines use the same). */
constexpr std::uint32_t kCallsPerClockRead = 256;

}  // namespace

ucs::config::Overrides keepalive_tcp_overrides(const ContextConfig& config) {
    ucs::config::Overrides overrides;
    if (config.keepalive_interval == ucs::config::kTimeInf) return overrides;  // tcp keeps its own
    if (std::getenv("LOOM_TCP_KEEPALIVE_IDLE") != nullptr ||
        std::getenv("LOOM_TCP_KEEPALIVE_INTERVAL") != nullptr ||
        std::getenv("LOOM_TCP_KEEPALIVE_COUNT") != nullptr) {
        return overrides;  // the user tuned tcp's keepalive: all three are theirs
    }
    // A probe after an idle interval, then one every interval; the connection fails once
    // nothing came back for idle + interval x (count - 1) = interval x count (the socket's
    // TCP_USER_TIMEOUT, which also bounds data in flight). tcp counts whole seconds.
    const std::string interval = ucs::config::TimeParser().print(config.keepalive_interval);
    overrides.emplace("TCP_KEEPALIVE_IDLE", interval);
    overrides.emplace("TCP_KEEPALIVE_INTERVAL", interval);
    overrides.emplace("TCP_KEEPALIVE_COUNT", std::to_string(std::max(1u, config.keepalive_count - 1)));
    return overrides;
}

void keepalive_init(Worker& worker) {
    const ContextConfig& config = worker.context.config();
    worker.keepalive_period = 0;
    worker.keepalive_countdown = UINT32_MAX;
    if (config.keepalive_interval == ucs::config::kTimeInf) return;
    bool wanted = false;
    for (const WorkerIface& wi : worker.ifaces) wanted |= (wi.attr.cap_flags & uct::kCapEpCheck) != 0;
    if (!wanted) return;  // every transport watches on its own: no rounds, no clock reads
    const auto ns = std::max<std::int64_t>(config.keepalive_interval.count(), 1000000);  // at least 1 ms
    worker.keepalive_period = ucs::ns_to_ticks(static_cast<std::uint64_t>(ns));
    worker.keepalive_next = ucs::get_time() + worker.keepalive_period;
    worker.keepalive_countdown = kCallsPerClockRead;
}

unsigned keepalive_progress(Worker& worker) {
    if (worker.keepalive_period == 0) {
        worker.keepalive_countdown = UINT32_MAX;
        return 0;
    }
    worker.keepalive_countdown = kCallsPerClockRead;
    const ucs::Ticks now = ucs::get_time();
    if (now < worker.keepalive_next) return 0;
    worker.keepalive_next = now + worker.keepalive_period;
    const ContextConfig& config = worker.context.config();
    // A probe started in a round fails the endpoint count - 1 rounds later, so the peer is
    // given up at most interval x count after it vanished (the probe of the round after).
    const auto timeout_ns =
        static_cast<std::uint64_t>(config.keepalive_interval.count()) * (config.keepalive_count - 1);
    std::vector<std::pair<Ep*, Status>> failed;
    for (Ep& ep : worker.eps) {
        // An idle endpoint has no connection to check (LOOM_LAZY_CONNECT): its first operation makes one.
        if (!(ep.flags & kEpErrModePeer) || (ep.flags & kEpNotReady)) continue;
        for (std::uint8_t l = 0; l < ep.num_lanes; ++l) {
            const Lane& lane = ep.lanes[l];
            if (lane.ep == nullptr || lane.state == kLaneUnconnected) continue;
            const WorkerIface& wi = worker.ifaces[lane.iface];
            if (!(wi.attr.cap_flags & uct::kCapEpCheck)) continue;
            const Status status = wi.iface->ops.ep_check(lane.ep, timeout_ns);
            if (status != Status::ok && status != Status::in_progress) {
                failed.emplace_back(&ep, status);
                break;
            }
        }
    }
    for (auto [ep, status] : failed) {
        LOOM_LOG_DIAG(
            "ucp: endpoint to worker {:016x}: keep-alive: {} (LOOM_KEEPALIVE_INTERVAL={} x "
            "LOOM_KEEPALIVE_COUNT={})",
            ep->remote_uuid, to_string(status), ucs::config::TimeParser().print(config.keepalive_interval),
            config.keepalive_count);
        worker.ep_fail(ep, status);
    }
    return static_cast<unsigned>(failed.size());
}

}  // namespace loom::ucp
