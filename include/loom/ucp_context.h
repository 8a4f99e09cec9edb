/**
 * @file loom/ucp_context.h
 * The context: features and request sizes asked for, set-up and clean-up, its
 * attributes and the transport resources it may use.
 *
 * Part of the C API of <loom/ucp.h>, whose conventions apply; it includes what it
 * uses, so it may also be included alone.
 */
#ifndef LOOM_UCP_CONTEXT_H
#define LOOM_UCP_CONTEXT_H

#include <stddef.h>
#include <stdint.h>

#include "ucp_def.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Features an application asks for in loom_params_t. */
enum {
    LOOM_FEATURE_TAG = 1u << 0,
    LOOM_FEATURE_RMA = 1u << 1,
    LOOM_FEATURE_AMO32 = 1u << 2,
    LOOM_FEATURE_AMO64 = 1u << 3,
    LOOM_FEATURE_WAKEUP = 1u << 4,
    LOOM_FEATURE_STREAM = 1u << 5,
    LOOM_FEATURE_AM = 1u << 6
};

enum {
    LOOM_PARAM_FIELD_FEATURES = 1u << 0,
    LOOM_PARAM_FIELD_REQUEST_SIZE = 1u << 1,
    LOOM_PARAM_FIELD_REQUEST_INIT = 1u << 2,
    LOOM_PARAM_FIELD_REQUEST_CLEANUP = 1u << 3,
    LOOM_PARAM_FIELD_NAME = 1u << 4,
    LOOM_PARAM_FIELD_REQUEST_HOOKS = 1u << 5
};

/** What loom_init should set up. */
typedef struct {
    uint64_t field_mask;
    uint64_t features; /**< LOOM_FEATURE_* bits */
    /** Bytes the caller keeps in every request Loom allocates (the handle points at them). */
    size_t request_size;
    /**
     * Called once on the caller's part of every request memory Loom creates (not each
     * time the memory is reused for another operation: what the caller keeps there
     * survives from one use to the next), never on caller-provided requests.
     */
    void (*request_init)(void* request);
    /** Called once on the caller's part of every request memory before Loom frees it. */
    void (*request_cleanup)(void* request);
    const char* name; /**< for logs */
    /**
     * LOOM_PARAM_FIELD_REQUEST_HOOKS, instead of request_init and request_cleanup: the
     * same calls, with @p arg, for a library that serves several contexts from one set of
     * functions (e.g. a compatibility layer keeping its own state in each request).
     */
    struct {
        void (*init)(void* request, void* arg);
        void (*cleanup)(void* request, void* arg);
        void* arg;
    } request_hooks;
} loom_params_t;

/**
 * Creates a context: reads the LOOM_* configuration (LOOM_TLS, LOOM_NET_DEVICES, ...),
 * loads transport modules and opens the memory domains allowed. Returns
 * LOOM_ERR_INVALID_CONFIG for a bad variable and LOOM_ERR_NO_DEVICE when no transport
 * is left, each with one log line saying why.
 */
loom_status_t loom_init(const loom_params_t* params, loom_context_h* context);

/** Destroys a context; its workers must be destroyed first. */
void loom_cleanup(loom_context_h context);

enum {
    LOOM_ATTR_FIELD_REQUEST_SIZE = 1u << 0,
    LOOM_ATTR_FIELD_NUM_RESOURCES = 1u << 1
};

/** What loom_context_query reports. */
typedef struct {
    uint64_t field_mask;
    /** Bytes Loom needs before a caller-provided request (LOOM_OP_ATTR_FIELD_REQUEST). */
    size_t request_size;
    size_t num_resources; /**< transports on devices this context may use */
} loom_context_attr_t;

/** Fills the fields of @p attr that its field mask asks for. */
loom_status_t loom_context_query(loom_context_h context, loom_context_attr_t* attr);

/** Kinds of device a resource lives on. */
typedef enum {
    LOOM_DEVICE_TYPE_NET,  /**< a network device: reaches other hosts */
    LOOM_DEVICE_TYPE_SHM,  /**< shared memory: processes of this host */
    LOOM_DEVICE_TYPE_SELF  /**< loopback inside one process */
} loom_device_type_t;

/** One transport on one device (see loom_info -d). */
typedef struct {
    const char* transport;          /**< "self", "shm", "tcp", "rc" */
    const char* device;             /**< "memory", "lo", "eth0", "rxe0:1" */
    loom_device_type_t device_type;
    unsigned md_index;              /**< its memory domain among the context's */
} loom_resource_t;

/**
 * Describes resource @p index (0 .. num_resources - 1 of loom_context_query) of
 * @p context; the strings live as long as the context. LOOM_ERR_OUT_OF_RANGE past the end.
 */
loom_status_t loom_context_resource(loom_context_h context, size_t index, loom_resource_t* resource);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_UCP_CONTEXT_H */
