#include "ucp/core/context.h"
#include "ucp/core/request.h"

#include "ucs/config/registry.h"
#include "ucs/config/table.h"
#include "ucs/debug/log.h"
#include "ucs/sys/module.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>
#include <utility>

namespace loom::ucp {

namespace {

using namespace ucs::config;

const RegisteredTable<ContextConfig> g_table{
    "",
    "Protocol layer",
    "Which transports and devices the protocol layer uses, and how it picks a protocol by "
    "message size.",
    {
        field("TLS", "all",
              "Transports to use: all, a list (tcp,shm), or ^ and a list (^tcp: all but tcp). Names: "
              "self, shm, tcp, rc; the alias ib stands for every verbs transport (rc). An endpoint "
              "can only reach a peer over a transport both sides allow. In a list, a name with :aux "
              "(rc,tcp:aux) only carries the wire-up of transports that connect endpoint to endpoint.",
              &ContextConfig::tls, AllowListParser()),
        field("NET_DEVICES", "all",
              "Network devices to use: all, a list (rxe0:1,eth0) or ^ and a list. Shared memory and "
              "self are not network devices and ignore it.",
              &ContextConfig::net_devices, AllowListParser()),
        field("RNDV_THRESH", "auto",
              "Message size from which tagged sends use the rendezvous protocol (the receiver "
              "fetches the data, or is told to be ready for it, before it moves). auto: from each "
              "endpoint's transports; see docs/protocols.md.",
              &ContextConfig::rndv_thresh, SizeParser().allow_auto().allow_inf()),
        field("ZCOPY_THRESH", "auto",
              "Message size from which eager sends would pass the user buffer to the transport "
              "without copying. Eager zero-copy is not implemented yet; the value is checked and "
              "reported only.",
              &ContextConfig::zcopy_thresh, SizeParser().allow_auto().allow_inf()),
        field("RNDV_SCHEME", "auto",
              "Rendezvous protocol: get_zcopy (the receiver reads the sender's buffer with RDMA "
              "GET or its emulation), put_zcopy (the receiver sends its buffer's key and the "
              "sender writes it with RDMA PUT), get_put (split: the receiver GETs the first "
              "half while the sender PUTs the second, each side's core copying on memory "
              "devices), am (the sender streams fragments after the receiver's ready-to-receive), "
              "or auto (get_put on memory devices from a size derived from the lane's model, "
              "get_zcopy below it and on network devices, am without a GET lane). The receiver "
              "decides; non-contiguous buffers always take am. See docs/protocols.md.",
              &ContextConfig::rndv_scheme,
              EnumParser<RndvScheme>({{"auto", RndvScheme::auto_},
                                      {"get_zcopy", RndvScheme::get_zcopy},
                                      {"put_zcopy", RndvScheme::put_zcopy},
                                      {"get_put", RndvScheme::get_put},
                                      {"am", RndvScheme::am}})),
        field("ATOMIC_MODE", "cpu",
              "Who performs atomic operations. cpu: CPU atomics on every transport (shm and tcp "
              "always; rc through the target's progress, LOOM_IB_ATOMICS=cpu), so atomics that "
              "reach one word over different transports are atomic together, and every operation "
              "exists in 32 and 64 bits. device: the NIC's own atomics on rc (verbs: 64-bit "
              "fetch-and-add and compare-and-swap only, no target CPU involved); they are not "
              "atomic with CPU atomics, so an atomic to a peer reached over another transport "
              "fails with LOOM_ERR_UNSUPPORTED. Each endpoint's protocol table "
              "(LOOM_PROTO_INFO) names the path. See docs/protocols.md.",
              &ContextConfig::atomic_mode,
              EnumParser<AtomicMode>({{"cpu", AtomicMode::cpu}, {"device", AtomicMode::device}})),
        field("PROTO_INFO", "n",
              "Print, for each new endpoint configuration, the protocol chosen for each message "
              "size range and the transport lanes it uses.",
              &ContextConfig::proto_info, BoolParser()),
        field("TAG_BUCKETS", "1k",
              "Hash buckets of each worker's expected and unexpected tag queues (a power of two).",
              &ContextConfig::tag_buckets, SizeParser()),
        field("UNEXPECTED_MAX", "64m",
              "Bytes of eager messages a worker keeps for receives not posted yet. Past it, "
              "every sender is told to send its tagged messages by rendezvous, so only their "
              "RTS waits here and their data stays with the sender (its sends complete once "
              "received), until the unexpected messages are back under half the bound. What "
              "was in flight when the bound was crossed still arrives. inf: no bound. See "
              "docs/reliability.md.",
              &ContextConfig::unexpected_max, SizeParser().allow_inf()),
        field("STREAM_WINDOW", "16m",
              "Bytes of one endpoint's stream that a receiver keeps before the application "
              "reads them. Past it the sender is told to hold its stream sends (they wait, "
              "in order, and complete later) until the receiver has read all but half. What "
              "was in flight when the window filled still arrives. inf: no window. See "
              "docs/reliability.md.",
              &ContextConfig::stream_window, SizeParser().allow_inf()),
        field("WIREUP_TIMEOUT", "30s",
              "How long an endpoint whose transports connect endpoint to endpoint (rc without "
              "rdma_cm) waits for its peer to answer the wire-up before it fails with "
              "LOOM_ERR_TIMED_OUT: a peer that never progresses, or whose LOOM_TLS or "
              "LOOM_NET_DEVICES leave those transports out. inf: wait for ever.",
              &ContextConfig::wireup_timeout, TimeParser().allow_inf()),
        field("LAZY_CONNECT", "y",
              "An endpoint created from a worker address with a connection to put off (tcp, "
              "rc over rdma_cm, or rc wired up endpoint to endpoint) connects on its first "
              "operation (a send, put, get or atomic): until then it sends nothing, tcp opens "
              "no socket, rc makes no queue pair, and the "
              "peer makes no endpoint back. A job that creates an endpoint to every rank pays "
              "only for the peers it talks to; an unreachable peer is reported by the first "
              "operation instead. Endpoints over shm alone, of a listener or to a socket "
              "address connect at once. n: every endpoint connects when it is created. See "
              "docs/protocols.md.",
              &ContextConfig::lazy_connect, BoolParser()),
        field("KEEPALIVE_INTERVAL", "2s",
              "Keep-alive of endpoints created with error handling mode peer: a peer host that "
              "vanished without a word (power loss, network cut) fails its endpoints with "
              "LOOM_ERR_PEER_TIMEOUT within LOOM_KEEPALIVE_INTERVAL x LOOM_KEEPALIVE_COUNT, idle "
              "or not, and their requests complete. The peer's transport answers, not its "
              "progress, so a peer busy computing is not taken for a vanished one. tcp: TCP "
              "keepalive probes and TCP_USER_TIMEOUT on every connection (whole seconds, at least "
              "1s), unless LOOM_TCP_KEEPALIVE_* are set; rc: one empty RDMA write per interval on "
              "an idle endpoint; shm: the peer's process is watched anyway "
              "(LOOM_SHM_PEER_CHECK_INTERVAL). inf: off. See docs/reliability.md.",
              &ContextConfig::keepalive_interval, TimeParser().allow_inf()),
        field("KEEPALIVE_COUNT", "5",
              "Keep-alive intervals without an answer after which an endpoint fails (see "
              "LOOM_KEEPALIVE_INTERVAL).",
              &ContextConfig::keepalive_count, IntParser<unsigned>().range(1, 1000)),
        field("MAX_RNDV_RAILS", "2",
              "Most devices a rendezvous message is split over (multi-rail): the receiver GETs "
              "each part over its own device, in proportion to the devices' bandwidth. Rails are "
              "devices of the rendezvous lane's transport that reach distinct devices of the peer, "
              "each with at least a quarter of the best one's bandwidth; a message goes over one "
              "device until each part would be 64 KiB or more. 1: one device. See "
              "docs/protocols.md (\"Multi-rail\").",
              &ContextConfig::max_rndv_rails, IntParser<unsigned>().range(1, kMaxRndvRails)),
        field("MAX_EAGER_RAILS", "1",
              "Most devices the fragments of one eager tagged message take turns on (multi-rail): "
              "the first fragment, with the tag, goes over the AM lane, the later ones round-robin "
              "over it and the rendezvous rails that carry active messages of the same size "
              "(LOOM_MAX_RNDV_RAILS chooses those). 1: the AM lane only, as UCX's default. See "
              "docs/protocols.md (\"Multi-rail\").",
              &ContextConfig::max_eager_rails, IntParser<unsigned>().range(1, kMaxRndvRails)),
    }};

bool is_net(const uct::TlResource& tl) { return tl.dev_type == uct::DeviceType::net; }

}  // namespace

const ucs::config::TableBase& context_config_table() { return g_table; }

bool Context::tl_allowed(const AllowList& tls, const std::string& tl_name, bool* aux_only) {
    // Every verbs transport answers to "ib" as well as to its own name.
    const bool verbs = tl_name == "rc";
    constexpr std::string_view kAux = ":aux";
    bool plain = false, aux = false;
    for (const std::string& n : tls.names()) {
        std::string lower = n;
        std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
        bool is_aux = lower.size() > kAux.size() && lower.ends_with(kAux);
        if (is_aux) lower.resize(lower.size() - kAux.size());
        if (lower == tl_name || (verbs && lower == "ib") || lower == "all") (is_aux ? aux : plain) = true;
    }
    if (aux_only != nullptr) *aux_only = tls.mode() == AllowList::Mode::only && aux && !plain;
    switch (tls.mode()) {
    case AllowList::Mode::all: return true;
    case AllowList::Mode::only: return plain || aux;
    case AllowList::Mode::all_except: return !plain && !aux;
    }
    return false;
}

Result<std::unique_ptr<Context>> Context::create(const ContextParams& params) {
    std::unique_ptr<Context> ctx(new Context());
    ctx->params_ = params;
    if (Status s = fill(g_table, ctx->config_, params.config_overrides); s != Status::ok) return s;
    const std::size_t buckets = ctx->config_.tag_buckets;
    if (buckets == 0 || (buckets & (buckets - 1)) != 0 || buckets > (1u << 24)) {
        LOOM_LOG_ERROR("LOOM_TAG_BUCKETS={} is not a power of two between 1 and 16m", buckets);
        return Status::invalid_config;
    }
    (void)ucs::load_modules("uct");

    std::string seen;
    for (const uct::Component* component : uct::components()) {
        const std::vector<std::string> md_names = component->query_md_resources();
        if (md_names.empty()) ctx->left_out_.push_back(component->name() + ": no device on this host");
        for (const std::string& md_name : md_names) {
            std::vector<std::pair<uct::TlResource, bool>> allowed;  // and whether it is aux only
            std::unique_ptr<uct::Md> md;
            auto opened = component->md_open(md_name);
            if (!opened) {
                LOOM_LOG_DEBUG("ucp: cannot open memory domain {}: {}", md_name, to_string(opened.status()));
                ctx->left_out_.push_back(fmt::format("{}: memory domain {} does not open: {}", component->name(),
                                                     md_name, to_string(opened.status())));
                continue;
            }
            md = std::move(*opened);
            for (const uct::TlResource& tl : md->query_tl_resources()) {
                seen += " " + tl.tl_name + "/" + tl.dev_name;
                bool aux_only = false;
                if (!tl_allowed(ctx->config_.tls, tl.tl_name, &aux_only)) {
                    ctx->left_out_.push_back(tl.tl_name + "/" + tl.dev_name + ": not in LOOM_TLS");
                    continue;
                }
                if (is_net(tl) && !ctx->config_.net_devices.allows(tl.dev_name)) {
                    ctx->left_out_.push_back(tl.tl_name + "/" + tl.dev_name + ": not in LOOM_NET_DEVICES");
                    continue;
                }
                allowed.emplace_back(tl, aux_only);
            }
            if (allowed.empty()) continue;
            uct::MdAttr md_attr;
            if (Status s = md->query(md_attr); s != Status::ok) return s;
            const auto md_index = static_cast<std::uint8_t>(std::min<std::size_t>(ctx->mds_.size(), UINT8_MAX));
            for (const auto& [tl, aux_only] : allowed) {
                ctx->resources_.push_back(ContextResource{component, md.get(), md_attr, tl, aux_only, md_index});
            }
            ctx->mds_.push_back(std::move(md));
        }
    }
    if (ctx->resources_.empty()) {
        LOOM_LOG_ERROR("ucp: no transport is allowed: LOOM_TLS={} LOOM_NET_DEVICES={}; this host has:{}",
                       ctx->config_.tls.to_string(), ctx->config_.net_devices.to_string(),
                       seen.empty() ? " nothing" : seen);
        return Status::no_device;
    }
    if (ctx->resources_.size() > 32) ctx->resources_.resize(32);  // address and lane indices are 5 bits
    return ctx;
}

Context::~Context() {
    resources_.clear();
    mds_.clear();
}

}  // namespace loom::ucp
