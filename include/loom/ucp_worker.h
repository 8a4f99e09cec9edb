/**
 * @file loom/ucp_worker.h
 * The worker: creation, progress, its address, its attributes, and sleeping until
 * there is work (wake-up).
 *
 * Part of the C API of <loom/ucp.h>, whose conventions apply; it includes what it
 * uses, so it may also be included alone.
 */
#ifndef LOOM_UCP_WORKER_H
#define LOOM_UCP_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include "ucp_def.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    LOOM_THREAD_MODE_SINGLE,
    LOOM_THREAD_MODE_SERIALIZED,
    LOOM_THREAD_MODE_MULTI
} loom_thread_mode_t;

enum { LOOM_WORKER_PARAM_FIELD_THREAD_MODE = 1u << 0 };

/** How to create a worker. */
typedef struct {
    uint64_t field_mask;
    loom_thread_mode_t thread_mode;
} loom_worker_params_t;

/** Creates a worker: one communication interface per transport the context allows. */
loom_status_t loom_worker_create(loom_context_h context, const loom_worker_params_t* params,
                                 loom_worker_h* worker);

/**
 * Destroys a worker. Endpoints still open are closed by force; outstanding requests
 * complete with LOOM_ERR_CANCELED first.
 */
void loom_worker_destroy(loom_worker_h worker);

/** Makes communication progress; returns nonzero when something happened. */
unsigned loom_worker_progress(loom_worker_h worker);

/**
 * The worker's address: one versioned blob holding every usable transport address.
 * Release it with loom_worker_release_address.
 */
loom_status_t loom_worker_get_address(loom_worker_h worker, void** address, size_t* length);

/** Releases an address from loom_worker_get_address or loom_worker_query. */
void loom_worker_release_address(loom_worker_h worker, void* address);

/** loom_worker_attr_t.address_flags */
enum {
    /**
     * Only the network transports' addresses (no shm, no self): what a peer on another
     * host can use, e.g. for an MPI library's out-of-band exchange between nodes.
     */
    LOOM_WORKER_ADDRESS_FLAG_NET_ONLY = 1u << 0
};

enum {
    LOOM_WORKER_ATTR_FIELD_THREAD_MODE = 1u << 0,   /**< thread_mode */
    LOOM_WORKER_ATTR_FIELD_ADDRESS = 1u << 1,       /**< address, address_length */
    LOOM_WORKER_ATTR_FIELD_ADDRESS_FLAGS = 1u << 2, /**< address_flags is an input */
    LOOM_WORKER_ATTR_FIELD_MAX_AM_HEADER = 1u << 3  /**< max_am_header */
};

/** What loom_worker_query reports. */
typedef struct {
    uint64_t field_mask;            /**< LOOM_WORKER_ATTR_FIELD_* bits */
    loom_thread_mode_t thread_mode; /**< the thread mode the worker provides */
    uint32_t address_flags;         /**< input: LOOM_WORKER_ADDRESS_FLAG_* bits for address */
    void* address;                  /**< release with loom_worker_release_address */
    size_t address_length;
    size_t max_am_header;           /**< loom_am_max_header */
} loom_worker_attr_t;

/**
 * Fills the fields of @p attr that its field mask asks for. LOOM_ERR_INVALID_PARAM
 * (logged) for unknown address flags; LOOM_ERR_NO_MEMORY for the address.
 */
loom_status_t loom_worker_query(loom_worker_h worker, loom_worker_attr_t* attr);

/*
 * Sleeping until there is work (LOOM_FEATURE_WAKEUP). The loop of a thread that sleeps:
 *
 *     for (;;) {
 *         if (loom_worker_progress(w)) continue;
 *         ... check what you wait for ...
 *         if (loom_worker_arm(w) == LOOM_ERR_BUSY) continue;
 *         poll(efd) or epoll_wait(efd), or simply loom_worker_wait(w) instead of arm+poll
 *     }
 *
 * A worker of a context with LOOM_FEATURE_WAKEUP uses only transports that can wake it
 * (shm, tcp, self; not rc yet: docs/protocols.md).
 */

/**
 * The worker's event fd: it becomes readable when progress may find work, once
 * loom_worker_arm returned LOOM_OK. Poll it for readability; never read or close it.
 * LOOM_ERR_UNSUPPORTED without LOOM_FEATURE_WAKEUP.
 */
loom_status_t loom_worker_get_efd(loom_worker_h worker, int* fd);

/**
 * Prepares a sleep on the event fd. LOOM_OK: nothing is pending, sleep; LOOM_ERR_BUSY:
 * events are waiting (or loom_worker_signal was called): progress, then arm again.
 */
loom_status_t loom_worker_arm(loom_worker_h worker);

/**
 * Arms the worker and sleeps until it may have work; returns at once when it has some.
 * LOOM_OK or an error (LOOM_ERR_UNSUPPORTED without LOOM_FEATURE_WAKEUP).
 */
loom_status_t loom_worker_wait(loom_worker_h worker);

/** Wakes a thread in loom_worker_wait or asleep on the event fd; any thread, any time. */
loom_status_t loom_worker_signal(loom_worker_h worker);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_UCP_WORKER_H */
