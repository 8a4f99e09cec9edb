/**
 * The protocol layer's context: the configuration (LOOM_TLS, LOOM_NET_DEVICES, the
 * protocol thresholds), the memory domains it opened and the transport resources it
 * may use, shared by every worker created from it.
 */
#pragma once

#include "ucs/config/allow_list.h"
#include "ucs/config/table.h"
#include "ucs/type/result.h"
#include "uct/api/uct.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace loom::ucp {

/** The protocol layer's configuration table (LOOM_TLS, LOOM_RNDV_THRESH, ...), for tools that list tables. */
const ucs::config::TableBase& context_config_table();

/** Which rendezvous protocol to use (LOOM_RNDV_SCHEME). */
enum class RndvScheme : std::uint8_t {
    auto_,      ///< RDMA GET where the rendezvous lane has it (split with PUT on memory devices above a size), else the AM pipeline
    get_zcopy,  ///< the receiver reads the sender's buffer
    am,         ///< the sender streams fragments once the receiver is ready
    put_zcopy,  ///< the sender writes the receiver's buffer after its ready-to-receive
    get_put,    ///< split: the receiver GETs the head while the sender PUTs the tail
};

/** Who performs atomic operations (LOOM_ATOMIC_MODE). */
enum class AtomicMode : std::uint8_t {
    cpu,     ///< CPU atomics on every transport (rc: the target's progress): all atomic together
    device,  ///< the NIC's atomics (rc); atomics to peers reached by another transport are refused
};

/** The protocol layer's configuration (the table is in context.cc; docs/configuration.md lists it). */
struct ContextConfig {
    ucs::config::AllowList tls;          ///< LOOM_TLS, with aliases expanded by tl_allowed()
    ucs::config::AllowList net_devices;  ///< LOOM_NET_DEVICES
    std::size_t rndv_thresh = 0;         ///< LOOM_RNDV_THRESH (kSizeAuto: from the performance model)
    std::size_t zcopy_thresh = 0;        ///< LOOM_ZCOPY_THRESH (reserved for eager zcopy)
    RndvScheme rndv_scheme = RndvScheme::auto_;
    AtomicMode atomic_mode = AtomicMode::cpu;  ///< LOOM_ATOMIC_MODE
    bool proto_info = false;             ///< LOOM_PROTO_INFO
    std::size_t tag_buckets = 0;         ///< LOOM_TAG_BUCKETS
    std::size_t unexpected_max = 0;      ///< LOOM_UNEXPECTED_MAX (kSizeInf: unbounded)
    std::size_t stream_window = 0;       ///< LOOM_STREAM_WINDOW (kSizeInf: unbounded)
    std::chrono::nanoseconds wireup_timeout{};  ///< LOOM_WIREUP_TIMEOUT (ucs::config::kTimeInf: none)
    bool lazy_connect = true;                   ///< LOOM_LAZY_CONNECT
    std::chrono::nanoseconds keepalive_interval{};  ///< LOOM_KEEPALIVE_INTERVAL (kTimeInf: off)
    unsigned keepalive_count = 0;                   ///< LOOM_KEEPALIVE_COUNT
    unsigned max_rndv_rails = 0;                    ///< LOOM_MAX_RNDV_RAILS
    unsigned max_eager_rails = 0;                   ///< LOOM_MAX_EAGER_RAILS
};

/** One transport on one device that this context may use. */
struct ContextResource {
    const uct::Component* component = nullptr;
    uct::Md* md = nullptr;  ///< owned by the context
    uct::MdAttr md_attr;
    uct::TlResource tl;
    bool aux_only = false;  ///< LOOM_TLS named it "<tl>:aux": it only carries wire-up messages
    /** Its memory domain's position among the context's domains: names it in addresses and remote keys. */
    std::uint8_t md_index = 0;
};

/** Context creation parameters (the C API's loom_params_t, checked). */
struct ContextParams {
    std::uint64_t features = 0;
    std::size_t user_request_size = 0;
    /**
     * Run once on the caller's part of every request the worker's pool creates
     * (request_init) and once when the pool frees it (request_cleanup), each with its
     * argument: loom_params_t's request_hooks, or its plain request_init/request_cleanup
     * (then the argument is that function and the hook calls it).
     */
    void (*request_init)(void* request, void* arg) = nullptr;
    void* request_init_arg = nullptr;
    void (*request_cleanup)(void* request, void* arg) = nullptr;
    void* request_cleanup_arg = nullptr;
    std::string name = "loom";
    ucs::config::Overrides config_overrides;
};

/** Feature bits (the C API's LOOM_FEATURE_*). */
enum Feature : std::uint64_t {
    kFeatureTag = 1u << 0,
    kFeatureRma = 1u << 1,
    kFeatureAmo32 = 1u << 2,
    kFeatureAmo64 = 1u << 3,
    kFeatureWakeup = 1u << 4,
    kFeatureStream = 1u << 5,
    kFeatureAm = 1u << 6,
};

class Context {
public:
    /**
     * Reads the configuration, loads the transport modules and opens every memory
     * domain that has an allowed resource. invalid_config for a bad variable,
     * no_device (logged with what exists) when nothing is allowed.
     */
    static Result<std::unique_ptr<Context>> create(const ContextParams& params);

    ~Context();
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

    const ContextParams& params() const { return params_; }
    const ContextConfig& config() const { return config_; }
    const std::vector<ContextResource>& resources() const { return resources_; }
    /** The transports and devices this host has that the context does not use, each with why ("tcp/eth0: not in LOOM_TLS"). */
    const std::vector<std::string>& left_out() const { return left_out_; }

    /**
     * True when LOOM_TLS allows transport @p tl_name (aliases: ib = every verbs transport,
     * all). @p aux_only (optional) is set when the list names it only as "<name>:aux".
     */
    static bool tl_allowed(const ucs::config::AllowList& tls, const std::string& tl_name, bool* aux_only = nullptr);

private:
    Context() = default;

    ContextParams params_;
    ContextConfig config_;
    std::vector<std::unique_ptr<uct::Md>> mds_;
    std::vector<ContextResource> resources_;
    std::vector<std::string> left_out_;
};

}  // namespace loom::ucp
