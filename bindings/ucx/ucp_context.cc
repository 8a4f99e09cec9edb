/**
 * libucp: version, configuration, contexts and generic datatypes of the UCX API over
 * Loom's contexts.
 */
#include "compat.h"

#include <cstdlib>
#include <dlfcn.h>
#include <cstring>
#include <map>
#include <new>
#include <string>

namespace loom::ucx {

/** ucp_config_t: the prefix it was read with and the variables ucp_config_modify set. */
struct Config {
    std::string env_prefix;
    std::map<std::string, std::string> modified;
};

namespace {

/** The UCX API version the layer implements (ucp_get_version, ucp_init_version). */
constexpr unsigned kApiMajor = 1;
constexpr unsigned kApiMinor = 13;
constexpr unsigned kRelease = 0;

/** Loom's request_init hook: the layer's Part, then the caller's own initializer. */
void request_init_hook(void* loom_request, void* arg) {
    auto* ctx = static_cast<Context*>(arg);
    *part_of_loom(loom_request) = Part{nullptr, nullptr};
    if (ctx->request_init != nullptr) ctx->request_init(ucx_handle(loom_request));
}

void request_cleanup_hook(void* loom_request, void* arg) {
    auto* ctx = static_cast<Context*>(arg);
    if (ctx->request_cleanup != nullptr) ctx->request_cleanup(ucx_handle(loom_request));
}

/**
 * Open MPI reports every munmap itself through libucm (ucm_set_external_event, then
 * ucm_vm_munmap), and Loom's own hooks cannot see them from inside a plugin (docs/mpi.md):
 * then Loom's registration caches take their events from those reports
 * (LOOM_MEM_EVENTS=user) instead of being turned off. Without such reports (MPICH, or a
 * program that never loads libucm) nothing changes. A LOOM_MEM_EVENTS the user set wins.
 */
void use_external_memory_events() {
    if (std::getenv("LOOM_MEM_EVENTS") != nullptr) return;
    using TestFn = ucs_status_t (*)(int);
    auto test = reinterpret_cast<TestFn>(::dlsym(RTLD_DEFAULT, "ucm_test_external_events"));
    if (test == nullptr || test(UCM_EVENT_VM_UNMAPPED) != UCS_OK) return;
    ::setenv("LOOM_MEM_EVENTS", "user", 0);
    log_debug("ucp_init", "the application reports unmapped memory through libucm: LOOM_MEM_EVENTS=user");
}

/** Says once that UCX_* variables do not configure Loom (a user setting UCX_TLS expects an effect). */
void warn_ucx_variables() {
    static bool warned = false;
    if (warned) return;
    warned = true;
    for (const char* name : {"UCX_TLS", "UCX_NET_DEVICES", "UCX_RNDV_THRESH"}) {
        if (std::getenv(name) != nullptr) {
            log_error("ucp_init", "%s is set but Loom reads LOOM_* variables (LOOM_TLS, LOOM_NET_DEVICES, "
                      "LOOM_RNDV_THRESH; loom_info -c lists them); it is ignored", name);
        }
    }
}

// --- generic datatypes: Loom's ops over the caller's, translating the unpack status --------

/** The state of one pack or unpack: the datatype and the caller's own state. */
struct GenState {
    const GenericDt* dt;
    void* user;
    GenState* next_free;
};

/** Per-thread free list: a generic datatype's message costs no malloc once warm. */
thread_local GenState* t_free_states = nullptr;

GenState* new_state(const GenericDt* dt, void* user) {
    GenState* s = t_free_states;
    if (s != nullptr) {
        t_free_states = s->next_free;
    } else {
        s = static_cast<GenState*>(std::malloc(sizeof(GenState)));
        if (s == nullptr) return nullptr;
    }
    *s = GenState{dt, user, nullptr};
    return s;
}

void* gen_start_pack(void* context, const void* buffer, size_t count) {
    auto* dt = static_cast<const GenericDt*>(context);
    void* user = dt->ops.start_pack(dt->context, buffer, count);
    return user == nullptr ? nullptr : new_state(dt, user);
}

void* gen_start_unpack(void* context, void* buffer, size_t count) {
    auto* dt = static_cast<const GenericDt*>(context);
    void* user = dt->ops.start_unpack(dt->context, buffer, count);
    return user == nullptr ? nullptr : new_state(dt, user);
}

size_t gen_packed_size(void* state) {
    auto* s = static_cast<GenState*>(state);
    return s->dt->ops.packed_size(s->user);
}

size_t gen_pack(void* state, size_t offset, void* dest, size_t max_length) {
    auto* s = static_cast<GenState*>(state);
    return s->dt->ops.pack(s->user, offset, dest, max_length);
}

loom_status_t gen_unpack(void* state, size_t offset, const void* src, size_t length) {
    auto* s = static_cast<GenState*>(state);
    return to_loom(s->dt->ops.unpack(s->user, offset, src, length));
}

void gen_finish(void* state) {
    auto* s = static_cast<GenState*>(state);
    s->dt->ops.finish(s->user);
    s->next_free = t_free_states;
    t_free_states = s;
}

}  // namespace

}  // namespace loom::ucx

using namespace loom::ucx;

extern "C" {

void ucp_get_version(unsigned* major_version, unsigned* minor_version,
                                                            unsigned* release_number) {
    if (major_version) *major_version = kApiMajor;
    if (minor_version) *minor_version = kApiMinor;
    if (release_number) *release_number = kRelease;
}

const char* ucp_get_version_string(void) {
    return "1.13.0 (Loom UCX compatibility layer)";
}

ucs_status_t ucp_config_read(const char* env_prefix, const char* filename,
                                                                    ucp_config_t** config_p) {
    if (config_p == nullptr) return UCS_ERR_INVALID_PARAM;
    if (filename != nullptr) log_debug("ucp_config_read", "configuration file %s ignored (LOOM_* variables and "
                                                          "loom.conf configure Loom)", filename);
    auto* cfg = new (std::nothrow) Config;
    if (cfg == nullptr) return UCS_ERR_NO_MEMORY;
    if (env_prefix != nullptr) cfg->env_prefix = env_prefix;
    *config_p = reinterpret_cast<ucp_config_t*>(cfg);
    return UCS_OK;
}

void ucp_config_release(ucp_config_t* config) {
    delete reinterpret_cast<Config*>(config);
}

ucs_status_t ucp_config_modify(ucp_config_t* config, const char* name,
                                                                      const char* value) {
    if (config == nullptr || name == nullptr || value == nullptr) return UCS_ERR_INVALID_PARAM;
    try {
        reinterpret_cast<Config*>(config)->modified[name] = value;
    } catch (...) {
        return UCS_ERR_NO_MEMORY;
    }
    log_debug("ucp_config_modify", "UCX setting %s=%s recorded; it does not configure Loom", name, value);
    return UCS_OK;
}

ucs_status_t ucp_init_version(unsigned api_major_version,
                                                                     unsigned api_minor_version,
                                                                     const ucp_params_t* params,
                                                                     const ucp_config_t* /*config*/,
                                                                     ucp_context_h* context_p) {
    if (params == nullptr || context_p == nullptr) {
        log_error("ucp_init", "NULL parameters or context pointer");
        return UCS_ERR_INVALID_PARAM;
    }
    if (api_major_version != kApiMajor || api_minor_version > kApiMinor) {
        // A caller built against newer headers may fill fields this layer does not know.
        log_error("ucp_init", "built against UCX API %u.%u; this layer implements %u.%u", api_major_version,
                  api_minor_version, kApiMajor, kApiMinor);
        if (api_major_version != kApiMajor) return UCS_ERR_UNSUPPORTED;
    }
    warn_ucx_variables();
    use_external_memory_events();
    const std::uint64_t m = params->field_mask;
    auto* ctx = new (std::nothrow) Context;
    if (ctx == nullptr) return UCS_ERR_NO_MEMORY;
    std::uint64_t features = (m & UCP_PARAM_FIELD_FEATURES) ? params->features : 0;
    ctx->features = features;
    loom_params_t lp{};
    lp.field_mask = LOOM_PARAM_FIELD_FEATURES | LOOM_PARAM_FIELD_REQUEST_SIZE | LOOM_PARAM_FIELD_REQUEST_HOOKS;
    struct {
        std::uint64_t ucx;
        std::uint64_t loom;
    } constexpr kFeatures[] = {{UCP_FEATURE_TAG, LOOM_FEATURE_TAG},       {UCP_FEATURE_RMA, LOOM_FEATURE_RMA},
                               {UCP_FEATURE_AMO32, LOOM_FEATURE_AMO32},   {UCP_FEATURE_AMO64, LOOM_FEATURE_AMO64},
                               {UCP_FEATURE_WAKEUP, LOOM_FEATURE_WAKEUP}, {UCP_FEATURE_STREAM, LOOM_FEATURE_STREAM},
                               {UCP_FEATURE_AM, LOOM_FEATURE_AM}};
    for (const auto& f : kFeatures) {
        if (features & f.ucx) {
            lp.features |= f.loom;
            features &= ~f.ucx;
        }
    }
    if (features != 0) {
        log_error("ucp_init", "features %#llx are not supported (Loom implements TAG, RMA, AMO32, AMO64, "
                  "WAKEUP, STREAM and AM)", static_cast<unsigned long long>(features));
        delete ctx;
        return UCS_ERR_UNSUPPORTED;
    }
    if (m & UCP_PARAM_FIELD_REQUEST_SIZE) ctx->user_request_size = params->request_size;
    if (m & UCP_PARAM_FIELD_REQUEST_INIT) ctx->request_init = params->request_init;
    if (m & UCP_PARAM_FIELD_REQUEST_CLEANUP) ctx->request_cleanup = params->request_cleanup;
    lp.request_size = sizeof(Part) + ctx->user_request_size;
    lp.request_hooks.init = request_init_hook;
    lp.request_hooks.cleanup = request_cleanup_hook;
    lp.request_hooks.arg = ctx;
    if ((m & UCP_PARAM_FIELD_NAME) && params->name != nullptr) {
        lp.field_mask |= LOOM_PARAM_FIELD_NAME;
        lp.name = params->name;
    }
    // tag_sender_mask, mt_workers_shared, estimated_num_eps/ppn: hints Loom does not need.
    loom_status_t s = loom_init(&lp, &ctx->loom);
    if (s != LOOM_OK) {
        log_error("ucp_init", "loom_init failed: %s", loom_status_string(s));
        delete ctx;
        return to_ucs(s);
    }
    loom_context_attr_t a{};
    a.field_mask = LOOM_ATTR_FIELD_REQUEST_SIZE;
    (void)loom_context_query(ctx->loom, &a);
    ctx->loom_request_size = a.request_size;
    *context_p = reinterpret_cast<ucp_context_h>(ctx);
    return UCS_OK;
}

void ucp_cleanup(ucp_context_h context) {
    Context* ctx = C(context);
    if (ctx == nullptr) return;
    loom_cleanup(ctx->loom);
    delete ctx;
}

ucs_status_t ucp_context_query(ucp_context_h context,
                                                                      ucp_context_attr_t* attr) {
    if (context == nullptr || attr == nullptr) return UCS_ERR_INVALID_PARAM;
    Context* ctx = C(context);
    if (attr->field_mask & UCP_ATTR_FIELD_REQUEST_SIZE) attr->request_size = ctx->loom_request_size + sizeof(Part);
    // Workers are what MPI threads share (their thread mode is ucp_worker_query's); the context
    // itself is not claimed safe for concurrent calls.
    if (attr->field_mask & UCP_ATTR_FIELD_THREAD_MODE) attr->thread_mode = UCS_THREAD_MODE_SINGLE;
    if (attr->field_mask & UCP_ATTR_FIELD_MEMORY_TYPES) attr->memory_types = 1ull << UCS_MEMORY_TYPE_HOST;
    if (attr->field_mask & UCP_ATTR_FIELD_NAME) std::snprintf(attr->name, sizeof(attr->name), "loom");
    return UCS_OK;
}

/**
 * The context's transports in the shape UCX prints them: Open MPI's pml reads the
 * "# resource N : md N dev N flags -- <transport>/<device>" lines to decide whether UCX
 * may be used (opal_common_ucx_tls and _devices name the ones it accepts).
 */
void ucp_context_print_info(ucp_context_h context, FILE* stream) {
    if (context == nullptr || stream == nullptr) return;
    Context* ctx = C(context);
    loom_context_attr_t a{};
    a.field_mask = LOOM_ATTR_FIELD_NUM_RESOURCES;
    (void)loom_context_query(ctx->loom, &a);
    std::fprintf(stream, "#\n# UCP context (Loom's UCX compatibility layer: UCX API %u.%u)\n#\n", kApiMajor,
                 kApiMinor);
    std::map<std::string, unsigned> devices;
    for (size_t i = 0; i < a.num_resources; ++i) {
        loom_resource_t r{};
        if (loom_context_resource(ctx->loom, i, &r) != LOOM_OK) continue;
        auto it = devices.try_emplace(r.device, static_cast<unsigned>(devices.size())).first;
        std::fprintf(stream, "#   resource %zu  :  md %u  dev %u  flags -- %s/%s\n", i, r.md_index, it->second,
                     r.transport, r.device);
    }
    std::fprintf(stream, "#\n");
}

ucs_status_t ucp_dt_create_generic(const ucp_generic_dt_ops_t* ops,
                                                                          void* context,
                                                                          ucp_datatype_t* datatype_p) {
    if (ops == nullptr || datatype_p == nullptr) return UCS_ERR_INVALID_PARAM;
    auto* dt = new (std::nothrow) GenericDt;
    if (dt == nullptr) return UCS_ERR_NO_MEMORY;
    dt->ops = *ops;
    dt->context = context;
    static const loom_generic_dt_ops_t kOps = {gen_start_pack, gen_start_unpack, gen_packed_size,
                                               gen_pack,       gen_unpack,       gen_finish};
    if (loom_status_t s = loom_dt_create_generic(&kOps, dt, &dt->loom_dt); s != LOOM_OK) {
        delete dt;
        log_error("ucp_dt_create_generic", "%s", loom_status_string(s));
        return to_ucs(s);
    }
    static_assert(alignof(GenericDt) >= 8, "the class bits of a generic datatype go in the pointer's low bits");
    *datatype_p = reinterpret_cast<std::uintptr_t>(dt) | UCP_DATATYPE_GENERIC;
    return UCS_OK;
}

void ucp_dt_destroy(ucp_datatype_t datatype) {
    if ((datatype & UCP_DATATYPE_CLASS_MASK) != UCP_DATATYPE_GENERIC) return;
    auto* dt = reinterpret_cast<GenericDt*>(datatype & ~static_cast<ucp_datatype_t>(UCP_DATATYPE_CLASS_MASK));
    loom_dt_destroy(dt->loom_dt);
    delete dt;
}

}  // extern "C"
