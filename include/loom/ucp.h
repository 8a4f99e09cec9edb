/**
 * @file loom/ucp.h
 * The Loom protocol layer's C API: contexts, workers, endpoints, tagged messages, active
 * messages and streams.
 *
 * C99 and C++ compatible. Conventions, as in UCX's ucp.h:
 * - every parameter struct starts with a field mask saying which fields are set, so
 *   fields can be added without breaking binaries built against an older header;
 * - non-blocking calls (the _nbx functions) take a loom_request_param_t and return a
 *   loom_status_ptr_t: NULL when the operation completed at once, an error status
 *   (test with LOOM_PTR_IS_ERR, read with LOOM_PTR_STATUS), or a request handle that
 *   completes later (its callback runs from loom_worker_progress) and must be released
 *   with loom_request_free;
 * - a request handle points at the caller's part of the request (the request_size bytes
 *   asked for in loom_params_t), so an MPI library keeps its own request inside Loom's.
 *
 * Thread safety: a worker created with LOOM_THREAD_MODE_SINGLE or _SERIALIZED must not
 * be entered by two threads at once. With LOOM_THREAD_MODE_MULTI any thread may call any
 * function on the worker, its endpoints and requests: each call holds the worker's lock
 * (recursive, so callbacks, which run under it, may call Loom again). Different workers
 * never share a lock.
 */
#ifndef LOOM_UCP_H
#define LOOM_UCP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Status codes; the values are those of every Loom layer and never change. */
typedef enum {
    LOOM_OK = 0,
    LOOM_INPROGRESS = 1,
    LOOM_ERR_NO_RESOURCE = -1,
    LOOM_ERR_NO_MEMORY = -2,
    LOOM_ERR_INVALID_PARAM = -3,
    LOOM_ERR_IO_ERROR = -4,
    LOOM_ERR_BUSY = -5,
    LOOM_ERR_CANCELED = -6,
    LOOM_ERR_TIMED_OUT = -7,
    LOOM_ERR_UNSUPPORTED = -8,
    LOOM_ERR_NO_ELEM = -9,
    LOOM_ERR_ALREADY_EXISTS = -10,
    LOOM_ERR_OUT_OF_RANGE = -11,
    LOOM_ERR_EXCEEDS_LIMIT = -12,
    LOOM_ERR_NO_DEVICE = -13,
    LOOM_ERR_INVALID_CONFIG = -14,
    LOOM_ERR_UNREACHABLE = -40,
    LOOM_ERR_CONNECTION_REFUSED = -41,
    LOOM_ERR_CONNECTION_RESET = -42,
    LOOM_ERR_ENDPOINT_FAILURE = -43,
    LOOM_ERR_NOT_CONNECTED = -44,
    LOOM_ERR_REJECTED = -45,
    LOOM_ERR_PEER_TIMEOUT = -46,
    LOOM_ERR_INVALID_ADDRESS = -47,
    LOOM_ERR_MESSAGE_TRUNCATED = -70,
    LOOM_ERR_MALFORMED_PACKET = -71,
    LOOM_ERR_VERSION_MISMATCH = -72,
    LOOM_ERR_NO_MESSAGE = -73,
    LOOM_ERR_ACCESS_DENIED = -74,
    LOOM_ERR_LAST = -128 /**< no status is below this */
} loom_status_t;

/** A status, or a request handle, as returned by the _nbx calls. */
typedef void* loom_status_ptr_t;

/** True when @p p carries an error status. */
#define LOOM_PTR_IS_ERR(p) ((uintptr_t)(p) >= (uintptr_t)(intptr_t)LOOM_ERR_LAST)
/** True when @p p is a request handle. */
#define LOOM_PTR_IS_PTR(p) (((uintptr_t)(p) - 1) < ((uintptr_t)(intptr_t)LOOM_ERR_LAST - 1))
/** The status @p p stands for: LOOM_OK (NULL), an error, or LOOM_INPROGRESS for a request. */
#define LOOM_PTR_STATUS(p) (LOOM_PTR_IS_PTR(p) ? LOOM_INPROGRESS : (loom_status_t)(intptr_t)(p))

/** A short name of @p status, e.g. "message truncated". */
const char* loom_status_string(loom_status_t status);

/* --- handles -------------------------------------------------------------------------- */

typedef struct loom_context* loom_context_h;
typedef struct loom_worker* loom_worker_h;
typedef struct loom_ep* loom_ep_h;
typedef struct loom_tag_message* loom_tag_message_h;
typedef struct loom_listener* loom_listener_h;
typedef struct loom_conn_request* loom_conn_request_h;
typedef uint64_t loom_tag_t;

/* --- datatypes ------------------------------------------------------------------------ */

/**
 * A datatype: contiguous elements, an iov list or a generic (user pack/unpack) type.
 * The low 3 bits say which; contiguous types keep their element size above them.
 */
typedef uint64_t loom_datatype_t;

enum {
    LOOM_DATATYPE_CONTIG = 0, /**< count elements of (dt >> 3) bytes each */
    LOOM_DATATYPE_IOV = 2,    /**< buffer is a loom_dt_iov_t array of count entries */
    LOOM_DATATYPE_GENERIC = 7, /**< made by loom_dt_create_generic */
    LOOM_DATATYPE_CLASS_MASK = 7
};

/** A contiguous datatype of @p elem_size bytes per element. */
#define loom_dt_make_contig(elem_size) (((loom_datatype_t)(elem_size) << 3) | LOOM_DATATYPE_CONTIG)
/** The iov datatype. */
#define loom_dt_make_iov() ((loom_datatype_t)LOOM_DATATYPE_IOV)

/** One entry of an iov datatype. */
typedef struct {
    void* buffer;
    size_t length;
} loom_dt_iov_t;

/**
 * Callbacks of a generic datatype. start_pack/start_unpack return a state that the
 * other calls get back; packed_size gives the packed bytes of that state; pack writes
 * up to max_length bytes at @p offset and returns how many; unpack consumes @p length
 * bytes at @p offset; finish releases the state.
 */
typedef struct {
    void* (*start_pack)(void* context, const void* buffer, size_t count);
    void* (*start_unpack)(void* context, void* buffer, size_t count);
    size_t (*packed_size)(void* state);
    size_t (*pack)(void* state, size_t offset, void* dest, size_t max_length);
    loom_status_t (*unpack)(void* state, size_t offset, const void* src, size_t length);
    void (*finish)(void* state);
} loom_generic_dt_ops_t;

/** Creates a generic datatype calling @p ops with @p context. */
loom_status_t loom_dt_create_generic(const loom_generic_dt_ops_t* ops, void* context, loom_datatype_t* datatype);

/** Destroys a generic datatype (no operation may still use it). */
void loom_dt_destroy(loom_datatype_t datatype);

/* --- context -------------------------------------------------------------------------- */

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

/* --- worker --------------------------------------------------------------------------- */

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

/* --- requests ------------------------------------------------------------------------- */

typedef struct {
    loom_tag_t sender_tag; /**< the tag of the message received */
    size_t length;         /**< its length in bytes (the full length when truncated) */
} loom_tag_recv_info_t;

/** Completion callback of a send (and flush, close). */
typedef void (*loom_send_nbx_callback_t)(void* request, loom_status_t status, void* user_data);

/** Completion callback of a tagged receive. */
typedef void (*loom_tag_recv_nbx_callback_t)(void* request, loom_status_t status, const loom_tag_recv_info_t* info,
                                             void* user_data);

/**
 * Completion callback of loom_am_recv_data_nbx: @p length is the message's length in
 * bytes (the full length also when it completes with LOOM_ERR_MESSAGE_TRUNCATED).
 */
typedef void (*loom_am_recv_data_nbx_callback_t)(void* request, loom_status_t status, size_t length,
                                                 void* user_data);

/** Completion callback of loom_stream_recv_nbx: @p length bytes were received (valid with LOOM_OK). */
typedef void (*loom_stream_recv_nbx_callback_t)(void* request, loom_status_t status, size_t length,
                                                void* user_data);

enum {
    LOOM_OP_ATTR_FIELD_REQUEST = 1u << 0,  /**< request: caller's memory (see loom_context_attr_t.request_size) */
    LOOM_OP_ATTR_FIELD_CALLBACK = 1u << 1, /**< cb */
    LOOM_OP_ATTR_FIELD_USER_DATA = 1u << 2,
    LOOM_OP_ATTR_FIELD_DATATYPE = 1u << 3,
    LOOM_OP_ATTR_FIELD_FLAGS = 1u << 4,
    LOOM_OP_ATTR_FIELD_RECV_INFO = 1u << 5, /**< recv_info: filled when a receive completes at once */
    LOOM_OP_ATTR_FIELD_REPLY_BUFFER = 1u << 6, /**< reply_buffer: a fetching atomic (loom_atomic_op_nbx) */
    LOOM_OP_ATTR_FIELD_MEMH = 1u << 7,         /**< memh: the local buffer of an RMA operation is mapped */
    /**
     * request_data: stored in the first pointer-sized bytes of the caller's part of the
     * request (loom_params_t.request_size must leave room) before the operation starts,
     * when it needs a request. Per-operation state its callback reads, set without racing
     * the completion (in thread mode multi another thread's progress may complete the
     * operation before the call that started it returns).
     */
    LOOM_OP_ATTR_FIELD_REQUEST_DATA = 1u << 8,
    /**
     * Always return a request, never NULL. An operation done inside the call still
     * reports its completion (loom_request_check_status, the callback) only from the
     * next loom_worker_progress: a callback never runs inside the call that started it.
     */
    LOOM_OP_ATTR_FLAG_NO_IMM_CMPL = 1u << 16,
    LOOM_OP_ATTR_FLAG_FORCE_IMM_CMPL = 1u << 17 /**< complete at once or fail with LOOM_ERR_NO_RESOURCE */
};

/** Parameters of every non-blocking operation. */
typedef struct {
    uint32_t op_attr_mask; /**< LOOM_OP_ATTR_FIELD_* and LOOM_OP_ATTR_FLAG_* bits */
    uint32_t flags;        /**< operation-specific flags (LOOM_EP_CLOSE_FLAG_FORCE) */
    /**
     * Caller's request memory: the handle returned, with loom_context_attr_t.request_size
     * bytes before it for Loom. Such a request is never freed by Loom.
     */
    void* request;
    union {
        loom_send_nbx_callback_t send;
        loom_tag_recv_nbx_callback_t recv;
        loom_am_recv_data_nbx_callback_t am;         /**< loom_am_recv_data_nbx */
        loom_stream_recv_nbx_callback_t stream;      /**< loom_stream_recv_nbx */
    } cb;
    loom_datatype_t datatype; /**< default: bytes (loom_dt_make_contig(1)) */
    void* user_data;
    union {
        loom_tag_recv_info_t* tag_recv;
        size_t* length; /**< loom_am_recv_data_nbx: the message's length, when it completes at once */
    } recv_info;
    /**
     * loom_atomic_op_nbx: where the remote location's previous value goes (its presence
     * makes the operation fetching); for LOOM_ATOMIC_OP_CSWAP it also holds the value to
     * compare with on input.
     */
    void* reply_buffer;
    /** loom_put_nbx / loom_get_nbx: a mapping (loom_mem_map) that covers the local buffer. */
    struct loom_mem* memh;
    void* request_data; /**< LOOM_OP_ATTR_FIELD_REQUEST_DATA */
} loom_request_param_t;

/** LOOM_OK or an error once @p request completed, LOOM_INPROGRESS before. */
loom_status_t loom_request_check_status(void* request);

/**
 * loom_request_check_status for a tagged receive, filling @p info once it completed
 * (also when it completed with LOOM_ERR_MESSAGE_TRUNCATED).
 */
loom_status_t loom_tag_recv_request_test(void* request, loom_tag_recv_info_t* info);

/**
 * Releases a request handle. A request still running goes on and is freed once it
 * completes, but its callback never runs after this call (as in UCX: a library may
 * free a request and reuse the memory its callback would have touched).
 */
void loom_request_free(void* request);

/** Cancels a tagged receive that has not matched; it completes with LOOM_ERR_CANCELED. */
void loom_request_cancel(loom_worker_h worker, void* request);

/* --- endpoints ------------------------------------------------------------------------ */

typedef enum {
    LOOM_ERR_HANDLING_MODE_NONE, /**< no failure detection beyond what transports do anyway */
    LOOM_ERR_HANDLING_MODE_PEER  /**< only transports that detect a dead peer; failures reach err_handler */
} loom_err_handling_mode_t;

/** Called from progress when an endpoint failed; outstanding requests complete with errors first. */
typedef void (*loom_err_handler_cb_t)(void* arg, loom_ep_h ep, loom_status_t status);

enum {
    LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS = 1u << 0,
    LOOM_EP_PARAM_FIELD_ERR_HANDLING_MODE = 1u << 1,
    LOOM_EP_PARAM_FIELD_ERR_HANDLER = 1u << 2,
    LOOM_EP_PARAM_FIELD_USER_DATA = 1u << 3,
    LOOM_EP_PARAM_FIELD_SOCK_ADDR = 1u << 4,   /**< client: connect to the listener at sockaddr */
    LOOM_EP_PARAM_FIELD_CONN_REQUEST = 1u << 5 /**< server: accept conn_request */
};

/** How to create an endpoint. */
typedef struct {
    uint64_t field_mask;
    const void* address; /**< a peer worker's address (loom_worker_get_address) */
    loom_err_handling_mode_t err_mode;
    struct {
        loom_err_handler_cb_t cb;
        void* arg;
    } err_handler;
    void* user_data;
    /** Client: the server's listening address (LOOM_EP_PARAM_FIELD_SOCK_ADDR). */
    struct {
        const struct sockaddr* addr;
        socklen_t addrlen;
    } sockaddr;
    /** Server: a request from the listener's handler (LOOM_EP_PARAM_FIELD_CONN_REQUEST). */
    loom_conn_request_h conn_request;
} loom_ep_params_t;

/**
 * Creates an endpoint to another worker, named by one of:
 * - its worker address (LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS): returns at once; the
 *   connection is completed in the background and sends issued meanwhile are queued;
 * - a listener's socket address (LOOM_EP_PARAM_FIELD_SOCK_ADDR, client side): the two
 *   workers exchange addresses through the listener, and the call returns once the
 *   server accepted (LOOM_OK), rejected (LOOM_ERR_REJECTED) or could not be reached
 *   (LOOM_ERR_CONNECTION_REFUSED, LOOM_ERR_UNREACHABLE, LOOM_ERR_TIMED_OUT after 10 s),
 *   progressing this worker while it waits;
 * - a connection request (LOOM_EP_PARAM_FIELD_CONN_REQUEST, server side), which it
 *   accepts; the request is consumed whatever the outcome.
 * LOOM_ERR_INVALID_ADDRESS for a malformed or foreign-version address,
 * LOOM_ERR_UNREACHABLE when no allowed transport reaches the peer (logged with why).
 */
loom_status_t loom_ep_create(loom_worker_h worker, const loom_ep_params_t* params, loom_ep_h* ep);

enum { LOOM_EP_CLOSE_FLAG_FORCE = 1u << 0 };

/**
 * Closes an endpoint: by default after flushing what was sent on it; with
 * LOOM_EP_CLOSE_FLAG_FORCE at once, completing its outstanding requests with
 * LOOM_ERR_CANCELED. The handle is invalid after the call.
 */
loom_status_ptr_t loom_ep_close_nbx(loom_ep_h ep, const loom_request_param_t* param);

/* --- client/server ---------------------------------------------------------------------- */

/** Called from loom_worker_progress for each client that asks to connect. */
typedef void (*loom_listener_conn_callback_t)(loom_conn_request_h request, void* arg);

enum {
    LOOM_LISTENER_PARAM_FIELD_SOCK_ADDR = 1u << 0,
    LOOM_LISTENER_PARAM_FIELD_CONN_HANDLER = 1u << 1
};

/** How to listen for clients. */
typedef struct {
    uint64_t field_mask;
    struct {
        const struct sockaddr* addr; /**< IPv4 or IPv6 address and port; port 0: any free port */
        socklen_t addrlen;
    } sockaddr;
    struct {
        loom_listener_conn_callback_t cb;
        void* arg;
    } conn_handler;
} loom_listener_params_t;

/**
 * Listens on a socket address for clients of @p worker (served by its progress). Each
 * request reaches the handler, which answers it, then or later, with loom_ep_create
 * (LOOM_EP_PARAM_FIELD_CONN_REQUEST) or loom_listener_reject. LOOM_ERR_BUSY when the
 * address is in use, LOOM_ERR_INVALID_PARAM without an address or handler.
 */
loom_status_t loom_listener_create(loom_worker_h worker, const loom_listener_params_t* params,
                                   loom_listener_h* listener);

/** Stops listening; requests not answered yet are rejected and their handles become invalid. */
void loom_listener_destroy(loom_listener_h listener);

/** The address listened on, with the port chosen when 0 was asked for. */
loom_status_t loom_listener_query(loom_listener_h listener, struct sockaddr_storage* address);

/** The client's socket address of @p request. */
loom_status_t loom_conn_request_query(loom_conn_request_h request, struct sockaddr_storage* client_address);

/** Refuses @p request: the client's loom_ep_create returns LOOM_ERR_REJECTED. */
loom_status_t loom_listener_reject(loom_listener_h listener, loom_conn_request_h request);

/**
 * Completes when everything sent on @p ep so far has completed at the transport level,
 * and every RMA and atomic operation started on it so far is complete at the target (a
 * put that the target refused makes the flush complete with that error, e.g.
 * LOOM_ERR_ACCESS_DENIED on tcp).
 */
loom_status_ptr_t loom_ep_flush_nbx(loom_ep_h ep, const loom_request_param_t* param);

/** loom_ep_flush_nbx on every endpoint of @p worker. */
loom_status_ptr_t loom_worker_flush_nbx(loom_worker_h worker, const loom_request_param_t* param);

/* --- tagged messages ------------------------------------------------------------------ */

/**
 * Sends @p count elements of the param's datatype (bytes by default) with @p tag. The
 * buffer may be reused when the operation completes. The protocol (eager or
 * rendezvous) is chosen by size; see docs/protocols.md.
 */
loom_status_ptr_t loom_tag_send_nbx(loom_ep_h ep, const void* buffer, size_t count, loom_tag_t tag,
                                    const loom_request_param_t* param);

/** Like loom_tag_send_nbx, completing only once a receive has matched the message. */
loom_status_ptr_t loom_tag_send_sync_nbx(loom_ep_h ep, const void* buffer, size_t count, loom_tag_t tag,
                                         const loom_request_param_t* param);

/**
 * Receives a message whose tag t satisfies (t & tag_mask) == (tag & tag_mask), from any
 * endpoint, into @p buffer (@p count elements). A longer message completes the request
 * with LOOM_ERR_MESSAGE_TRUNCATED, the info holding its full length. Messages between
 * one pair of endpoints match in the order they were sent.
 */
loom_status_ptr_t loom_tag_recv_nbx(loom_worker_h worker, void* buffer, size_t count, loom_tag_t tag,
                                    loom_tag_t tag_mask, const loom_request_param_t* param);

/**
 * Looks for an arrived message matching (@p tag, @p tag_mask), filling @p info. With
 * @p remove, the message leaves the queue and the handle returned must be received
 * with loom_tag_msg_recv_nbx. NULL when nothing matches.
 */
loom_tag_message_h loom_tag_probe_nb(loom_worker_h worker, loom_tag_t tag, loom_tag_t tag_mask, int remove,
                                     loom_tag_recv_info_t* info);

/** Receives the message @p message removed by loom_tag_probe_nb. */
loom_status_ptr_t loom_tag_msg_recv_nbx(loom_worker_h worker, void* buffer, size_t count,
                                        loom_tag_message_h message, const loom_request_param_t* param);

/* --- active messages ------------------------------------------------------------------ */
/*
 * A message for a handler the receiving worker registered under an id (0 .. 65535):
 * an optional header of the sender's, and data. Needs LOOM_FEATURE_AM. The protocol
 * is chosen by the data's size as for tagged messages (docs/protocols.md): small ones
 * arrive in place, large ones by rendezvous, where the handler gets a descriptor and
 * fetches the data into a buffer of its choice with loom_am_recv_data_nbx. Messages
 * sent on one endpoint reach their handlers in the order they were sent.
 */

/** Bits of loom_am_recv_param_t.recv_attr. */
enum {
    LOOM_AM_RECV_ATTR_FIELD_REPLY_EP = 1u << 0, /**< reply_ep is set (the sender asked for it) */
    /**
     * The data may outlive the callback: returning LOOM_INPROGRESS keeps it until
     * loom_am_data_release. Without this flag the data is valid only during the callback.
     */
    LOOM_AM_RECV_ATTR_FLAG_DATA = 1u << 16,
    /**
     * Rendezvous: data is a descriptor, length the message's length. The handler fetches
     * the data with loom_am_recv_data_nbx (during the callback or, after returning
     * LOOM_INPROGRESS, later), or drops it with loom_am_data_release; returning anything
     * else drops it and completes the send with that status (LOOM_OK for a plain drop).
     */
    LOOM_AM_RECV_ATTR_FLAG_RNDV = 1u << 17
};

/** What a handler learns besides the message. */
typedef struct {
    uint64_t recv_attr; /**< LOOM_AM_RECV_ATTR_* bits */
    loom_ep_h reply_ep; /**< with LOOM_AM_RECV_ATTR_FIELD_REPLY_EP: an endpoint to the sending worker */
} loom_am_recv_param_t;

/**
 * An active-message handler, run from loom_worker_progress (or from inside a send to
 * the worker itself). @p header (valid during the call only) is the sender's header,
 * @p data and @p length the data or, with LOOM_AM_RECV_ATTR_FLAG_RNDV, a descriptor and
 * the length it describes. Returns LOOM_OK when done with the data, LOOM_INPROGRESS to
 * keep it (LOOM_AM_RECV_ATTR_FLAG_DATA or _RNDV only).
 */
typedef loom_status_t (*loom_am_recv_callback_t)(void* arg, const void* header, size_t header_length, void* data,
                                                 size_t length, const loom_am_recv_param_t* param);

enum {
    LOOM_AM_HANDLER_PARAM_FIELD_ID = 1u << 0,    /**< id (required) */
    LOOM_AM_HANDLER_PARAM_FIELD_FLAGS = 1u << 1, /**< flags */
    LOOM_AM_HANDLER_PARAM_FIELD_CB = 1u << 2,    /**< cb (required; NULL removes the handler) */
    LOOM_AM_HANDLER_PARAM_FIELD_ARG = 1u << 3    /**< arg */
};

/** Handler flags. */
enum {
    LOOM_AM_FLAG_WHOLE_MSG = 1u << 0,      /**< one call per message (always the case in Loom) */
    LOOM_AM_FLAG_PERSISTENT_DATA = 1u << 1 /**< eager data always comes with LOOM_AM_RECV_ATTR_FLAG_DATA
                                                (copied out of the transport when it cannot lend it) */
};

/** An active-message handler registration. */
typedef struct {
    uint64_t field_mask; /**< LOOM_AM_HANDLER_PARAM_FIELD_* bits */
    unsigned id;         /**< 0 .. 65535 */
    uint32_t flags;      /**< LOOM_AM_FLAG_* bits */
    loom_am_recv_callback_t cb;
    void* arg;           /**< passed to cb */
} loom_am_handler_param_t;

/**
 * Registers (or with a NULL cb removes) the handler of active-message id @p param->id,
 * replacing any earlier one. Messages for an id without a handler are dropped, with one
 * warning per id (a rendezvous sender completes with LOOM_ERR_NO_ELEM).
 * LOOM_ERR_INVALID_PARAM (logged) for a missing id or cb field, an id above 65535,
 * unknown flags or a context without LOOM_FEATURE_AM.
 */
loom_status_t loom_worker_set_am_recv_handler(loom_worker_h worker, const loom_am_handler_param_t* param);

/** Flags of loom_am_send_nbx (in loom_request_param_t.flags, with LOOM_OP_ATTR_FIELD_FLAGS). */
enum {
    LOOM_AM_SEND_FLAG_REPLY = 1u << 0, /**< the handler gets a reply endpoint to this worker */
    LOOM_AM_SEND_FLAG_EAGER = 1u << 1, /**< eager whatever the size */
    LOOM_AM_SEND_FLAG_RNDV = 1u << 2   /**< rendezvous whatever the size */
};

/**
 * Sends an active message to handler @p id of the peer: @p header_length bytes at
 * @p header and @p count elements of the param's datatype at @p buffer. Both must stay
 * untouched until the operation completes (at once when NULL is returned). The header
 * travels in one transport message: loom_am_max_header says how long it may be.
 * LOOM_ERR_INVALID_PARAM (logged) for an id above 65535, a NULL header of nonzero
 * length, a header too long for the endpoint, conflicting or unknown flags, or a
 * context without LOOM_FEATURE_AM.
 */
loom_status_ptr_t loom_am_send_nbx(loom_ep_h ep, unsigned id, const void* header, size_t header_length,
                                   const void* buffer, size_t count, const loom_request_param_t* param);

/**
 * The longest header loom_am_send_nbx takes on every endpoint of @p worker: the
 * smallest message of its transports minus Loom's largest AM protocol header (7872
 * bytes with shm or self; an endpoint over a transport with larger messages, such as
 * tcp, takes longer ones). 0 for a NULL worker.
 */
size_t loom_am_max_header(loom_worker_h worker);

/**
 * Receives the data of @p data_desc, a rendezvous descriptor (LOOM_AM_RECV_ATTR_FLAG_RNDV)
 * or data a handler was given (during its callback, or kept with LOOM_INPROGRESS), into
 * @p count elements of the param's datatype at @p buffer. Loom owns the descriptor from
 * then on, even when the call fails. A buffer shorter than the message completes with
 * LOOM_ERR_MESSAGE_TRUNCATED (a rendezvous then moves nothing). When it completes at once
 * the length goes to param->recv_info.length (with LOOM_OP_ATTR_FIELD_RECV_INFO); a
 * request's callback is cb.am. LOOM_ERR_INVALID_PARAM (logged) for anything else.
 */
loom_status_ptr_t loom_am_recv_data_nbx(loom_worker_h worker, void* data_desc, void* buffer, size_t count,
                                        const loom_request_param_t* param);

/**
 * Releases data a handler kept by returning LOOM_INPROGRESS; for a rendezvous descriptor,
 * drops the message (its send completes with LOOM_OK). Unknown pointers are ignored with
 * one warning.
 */
void loom_am_data_release(loom_worker_h worker, void* data);

/* --- streams -------------------------------------------------------------------------- */
/*
 * A byte stream in each direction of an endpoint (LOOM_FEATURE_STREAM): bytes arrive in
 * the order they were sent, without message boundaries; what arrives before a receive
 * asks for it waits in the endpoint's queue. The stream of an endpoint is the one
 * between its two workers: a worker's endpoints to two different workers never mix
 * bytes.
 */

/** Flags of loom_stream_recv_nbx (in loom_request_param_t.flags, with LOOM_OP_ATTR_FIELD_FLAGS). */
enum {
    LOOM_STREAM_RECV_FLAG_WAITALL = 1u << 0 /**< complete only once all @p count elements arrived */
};

/** An endpoint loom_stream_worker_poll found with data. */
typedef struct {
    loom_ep_h ep;
    void* user_data; /**< the endpoint's user_data (loom_ep_params_t) */
    unsigned flags;  /**< reserved */
    uint8_t reserved[16];
} loom_stream_poll_ep_t;

/**
 * Appends @p count elements of the param's datatype at @p buffer to the stream of
 * @p ep. The buffer may be reused once the operation completes (at once when NULL is
 * returned). LOOM_ERR_INVALID_PARAM (logged) for a NULL endpoint or a context without
 * LOOM_FEATURE_STREAM.
 */
loom_status_ptr_t loom_stream_send_nbx(loom_ep_h ep, const void* buffer, size_t count,
                                       const loom_request_param_t* param);

/**
 * Receives up to @p count elements of the param's contiguous or iov datatype from the
 * stream of @p ep: completes as soon as at least one whole element arrived (only whole
 * elements are taken), or with LOOM_STREAM_RECV_FLAG_WAITALL once all of them did.
 * Receives of one endpoint complete in the order they were posted. When it completes
 * at once (NULL), *@p length holds the bytes received; a request reports them to
 * cb.stream and loom_stream_recv_request_test. A failed endpoint still hands out the
 * bytes that arrived before its failure, then the error. LOOM_ERR_INVALID_PARAM
 * (logged) for a NULL endpoint or length, a generic datatype, unknown flags, or a
 * context without LOOM_FEATURE_STREAM.
 */
loom_status_ptr_t loom_stream_recv_nbx(loom_ep_h ep, void* buffer, size_t count, size_t* length,
                                       const loom_request_param_t* param);

/** loom_request_check_status for a stream receive, filling @p length once it completed with LOOM_OK. */
loom_status_t loom_stream_recv_request_test(void* request, size_t* length);

/**
 * Fills up to @p max_eps entries of @p poll_eps with endpoints whose stream received
 * data since they were last reported, and returns how many (or a negative status:
 * LOOM_ERR_INVALID_PARAM). An endpoint is reported again once more data arrives.
 * @p flags is reserved (0).
 */
ssize_t loom_stream_worker_poll(loom_worker_h worker, loom_stream_poll_ep_t* poll_eps, size_t max_eps,
                                unsigned flags);

/**
 * Takes the next piece of data waiting in the stream of @p ep without copying it:
 * returns a pointer to *@p length bytes, to be given back with loom_stream_data_release,
 * or NULL when nothing waits (or a receive is posted), or an error status.
 */
loom_status_ptr_t loom_stream_recv_data_nb(loom_ep_h ep, size_t* length);

/** Releases data from loom_stream_recv_data_nb. */
void loom_stream_data_release(loom_ep_h ep, void* data);
/* --- memory events --------------------------------------------------------------------- */

/**
 * Tells Loom that [@p address, @p address + @p length) was unmapped (or is about to be),
 * or had its pages replaced, so that no registration cache hands out a registration of
 * the old pages. Needed only for memory released in ways Loom cannot see (raw system
 * calls, another allocator) or with LOOM_MEM_EVENTS=user; any thread, any time, never
 * blocks, never allocates.
 */
void loom_mem_event_notify(const void* address, size_t length);

/**
 * LOOM_OK when Loom sees this process's munmap() calls by itself (its hooks are in the
 * process's global symbol scope: LOOM_MEM_EVENTS=hooks works), else LOOM_ERR_UNSUPPORTED
 * (then tell it with loom_mem_event_notify). The first call probes, once per process.
 */
loom_status_t loom_mem_events_check(void);

/* --- memory and RMA ------------------------------------------------------------------- */
/*
 * One-sided access to a peer's memory: the owner maps it (loom_mem_map), packs a remote
 * key (loom_rkey_pack) and hands the bytes to the peer by any means; the peer unpacks the
 * key on its endpoint to the owner (loom_ep_rkey_unpack) and puts, gets and applies atomic
 * operations without the owner taking part. An operation completes when its local buffer
 * may be reused (put) or holds the data (get, fetching atomics); loom_ep_flush_nbx and
 * loom_worker_flush_nbx complete once every earlier operation is complete at the target.
 * See docs/protocols.md ("RMA and atomics").
 */

typedef struct loom_mem* loom_mem_h;
typedef struct loom_rkey* loom_rkey_h;

enum {
    LOOM_MEM_MAP_PARAM_FIELD_ADDRESS = 1u << 0,
    LOOM_MEM_MAP_PARAM_FIELD_LENGTH = 1u << 1,
    LOOM_MEM_MAP_PARAM_FIELD_FLAGS = 1u << 2,
    LOOM_MEM_MAP_PARAM_FIELD_PROT = 1u << 3
};

/** loom_mem_map_params_t.flags */
enum {
    /** Loom allocates the memory (a shared-memory segment where a transport offers one, so
        that peers on the host can map it: shm atomics need such memory); address is ignored. */
    LOOM_MEM_MAP_ALLOCATE = 1u << 1
};

/** loom_mem_map_params_t.prot: who may access the memory; default: everything. */
enum {
    LOOM_MEM_MAP_PROT_LOCAL_READ = 1u << 0,
    LOOM_MEM_MAP_PROT_LOCAL_WRITE = 1u << 1,
    LOOM_MEM_MAP_PROT_REMOTE_READ = 1u << 8,   /**< peers may get */
    LOOM_MEM_MAP_PROT_REMOTE_WRITE = 1u << 9,  /**< peers may put */
    LOOM_MEM_MAP_PROT_REMOTE_ATOMIC = 1u << 10 /**< peers may apply atomic operations */
};

/** What to map. */
typedef struct {
    uint64_t field_mask;
    void* address;  /**< the memory to register (without LOOM_MEM_MAP_ALLOCATE) */
    size_t length;  /**< bytes; required, nonzero */
    unsigned flags; /**< LOOM_MEM_MAP_* */
    unsigned prot;  /**< LOOM_MEM_MAP_PROT_* bits */
} loom_mem_map_params_t;

/**
 * Registers [address, address + length) with every memory domain of @p context (or
 * allocates length bytes with LOOM_MEM_MAP_ALLOCATE), so that local zero-copy transfers
 * and peers holding its remote key can reach it. LOOM_ERR_INVALID_PARAM (logged) for a
 * missing or zero length, a missing address, unknown flags or prot bits; the status of
 * the transport that refused the registration or allocation otherwise.
 */
loom_status_t loom_mem_map(loom_context_h context, const loom_mem_map_params_t* params, loom_mem_h* memh);

/**
 * Releases a mapping (and frees memory loom_mem_map allocated). Remote keys packed from
 * it stop working on transports that check accesses at the target (tcp); elsewhere the
 * memory must not be accessed afterwards: unmap only once the peers are done with it.
 */
loom_status_t loom_mem_unmap(loom_context_h context, loom_mem_h memh);

enum {
    LOOM_MEM_ATTR_FIELD_ADDRESS = 1u << 0,
    LOOM_MEM_ATTR_FIELD_LENGTH = 1u << 1
};

/** What loom_mem_query reports. */
typedef struct {
    uint64_t field_mask;
    void* address;
    size_t length;
} loom_mem_attr_t;

/** Fills the fields of @p attr that its field mask asks for (where allocated memory is, its length). */
loom_status_t loom_mem_query(loom_mem_h memh, loom_mem_attr_t* attr);

/**
 * Packs the remote key of @p memh into a new buffer (*rkey_buffer, *size bytes: a version,
 * the region and one key per memory domain), to be released with
 * loom_rkey_buffer_release. The bytes mean nothing outside Loom and may be sent anywhere.
 */
loom_status_t loom_rkey_pack(loom_context_h context, loom_mem_h memh, void** rkey_buffer, size_t* size);

/** Releases a buffer from loom_rkey_pack. */
void loom_rkey_buffer_release(void* rkey_buffer);

/**
 * Unpacks a peer's packed key for use on @p ep (an endpoint to the peer that packed it):
 * the key of the transport of the endpoint's RMA lane. Unlike UCX's, the call takes the
 * buffer's @p size, since the bytes come from another process: a truncated, padded,
 * foreign-version or otherwise malformed buffer is refused with LOOM_ERR_INVALID_PARAM
 * and one log line, never read past @p size. LOOM_ERR_UNSUPPORTED when the context has
 * none of the features RMA, AMO32, AMO64, or the key has no entry for the lane's transport.
 */
loom_status_t loom_ep_rkey_unpack(loom_ep_h ep, const void* rkey_buffer, size_t size, loom_rkey_h* rkey);

/** Releases an unpacked key; no operation may still use it. */
void loom_rkey_destroy(loom_rkey_h rkey);

/**
 * Writes @p count elements of the param's datatype (bytes by default) from @p buffer to
 * @p remote_addr (in the owner's address space) through @p rkey, unpacked on @p ep.
 * Completes when @p buffer may be reused; the data is at the target after a flush.
 * Datatypes: contiguous (short, bcopy or zero-copy transfers by size) and iov (copied
 * in bcopy fragments); generic: LOOM_ERR_UNSUPPORTED. LOOM_ERR_ACCESS_DENIED (logged)
 * for a range outside the key's region or a right the owner did not grant;
 * LOOM_ERR_INVALID_PARAM for a key unpacked on another endpoint. With
 * LOOM_OP_ATTR_FLAG_FORCE_IMM_CMPL only a contiguous put of up to the lane's bcopy size
 * may complete; larger ones return LOOM_ERR_NO_RESOURCE.
 */
loom_status_ptr_t loom_put_nbx(loom_ep_h ep, const void* buffer, size_t count, uint64_t remote_addr,
                               loom_rkey_h rkey, const loom_request_param_t* param);

/**
 * Reads @p count elements (contiguous datatypes only; others: LOOM_ERR_UNSUPPORTED)
 * from @p remote_addr into @p buffer; completes when the data is in @p buffer. Errors
 * as loom_put_nbx.
 */
loom_status_ptr_t loom_get_nbx(loom_ep_h ep, void* buffer, size_t count, uint64_t remote_addr, loom_rkey_h rkey,
                               const loom_request_param_t* param);

/** Atomic operations of loom_atomic_op_nbx (UCX's order). */
typedef enum {
    LOOM_ATOMIC_OP_ADD,
    LOOM_ATOMIC_OP_SWAP,
    LOOM_ATOMIC_OP_CSWAP,
    LOOM_ATOMIC_OP_AND,
    LOOM_ATOMIC_OP_OR,
    LOOM_ATOMIC_OP_XOR,
    LOOM_ATOMIC_OP_LAST
} loom_atomic_op_t;

/**
 * Applies @p opcode with the operand at @p buffer to the 4- or 8-byte word at
 * @p remote_addr (naturally aligned). The size comes from the param's datatype, which is
 * required: loom_dt_make_contig(4) or (8), with @p count 1. Without
 * LOOM_OP_ATTR_FIELD_REPLY_BUFFER the operation is posted (ADD, AND, OR, XOR; it is at the
 * target after a flush); with it the previous value is fetched into param->reply_buffer
 * (every operation; SWAP and CSWAP require it, and CSWAP reads the value to compare with
 * from it, swapping in @p buffer's when they are equal). LOOM_ERR_INVALID_PARAM (logged)
 * for a bad opcode, datatype, count or alignment; LOOM_ERR_UNSUPPORTED (logged) when the
 * context lacks LOOM_FEATURE_AMO32/AMO64 or the endpoint's RMA lane cannot do the
 * operation at that size (rc: 64-bit ADD and CSWAP only, none on iWARP).
 */
loom_status_ptr_t loom_atomic_op_nbx(loom_ep_h ep, loom_atomic_op_t opcode, const void* buffer, size_t count,
                                     uint64_t remote_addr, loom_rkey_h rkey, const loom_request_param_t* param);

/**
 * Orders the RMA and atomic operations of @p ep: those started after the fence are
 * performed at the target after those started before it (no completion is awaited).
 */
loom_status_t loom_ep_fence(loom_ep_h ep);

/** loom_ep_fence on every endpoint of @p worker. */
loom_status_t loom_worker_fence(loom_worker_h worker);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_UCP_H */
