/**
 * @file ucx_abi.h
 * UCX 1.13's application binary interface, declared by Loom for the UCX compatibility layer.
 *
 * Why: Open MPI and MPICH binaries were compiled against UCX 1.13's headers, so its struct
 * layouts, flag bits, enum values and status codes are baked into their machine code. The
 * layer (libucp/libucs/libucm.so.0 in this folder) exports UCX's functions and translates
 * every value between that compiled-in ABI and Loom's C API (loom/ucp.h). Loom's values
 * differ from UCX's, so nothing is ever passed through unconverted: these declarations are
 * the UCX side of each translation.
 *
 * The names are UCX's own, inside namespace loom::ucx, so the mapping is obvious; the
 * underlying types are those GCC gives UCX's C declarations on x86-64 (unsigned int for
 * flag enums, int8_t for the packed ucs_status_t). UCX's macros become constexpr or inline
 * functions and constants of the same name. The real UCX headers are not needed to build
 * the layer; test/ucx_abi/test_ucx_abi.cc holds every declaration here (value, size,
 * alignment, field offset and type, function prototype) against them, and fails on any
 * declaration it does not check.
 *
 * The test lists what this file declares by reading it (a small parser: enums, structs,
 * unions, using-aliases, constants and one-line-headed functions), so keep to those: no
 * macros, templates or nested namespaces. The exported functions themselves are declared
 * extern "C" by the layer's .cc files; here they only appear as `<name>_fn` pointer types
 * (the test includes this header next to UCX's, whose global declarations would clash).
 */
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>

namespace loom::ucx {

// ===== ucs/type/status.h ===================================================================

/** Status codes: 0 and 1 are success, negative values are errors. One byte: UCX packs it. */
enum ucs_status_t : std::int8_t {
    UCS_OK = 0,                            ///< done
    UCS_INPROGRESS = 1,                    ///< started, completes later
    UCS_ERR_NO_MESSAGE = -1,               ///< nothing to receive
    UCS_ERR_NO_RESOURCE = -2,              ///< out of resources for now, retry
    UCS_ERR_IO_ERROR = -3,                 ///< input/output failure
    UCS_ERR_NO_MEMORY = -4,                ///< allocation failed
    UCS_ERR_INVALID_PARAM = -5,            ///< bad argument
    UCS_ERR_UNREACHABLE = -6,              ///< destination cannot be reached
    UCS_ERR_INVALID_ADDR = -7,             ///< bad address
    UCS_ERR_NOT_IMPLEMENTED = -8,          ///< not implemented
    UCS_ERR_MESSAGE_TRUNCATED = -9,        ///< receive buffer too small for the message
    UCS_ERR_NO_PROGRESS = -10,             ///< no progress was made
    UCS_ERR_BUFFER_TOO_SMALL = -11,        ///< output buffer too small
    UCS_ERR_NO_ELEM = -12,                 ///< element not found
    UCS_ERR_SOME_CONNECTS_FAILED = -13,    ///< part of a connection set failed
    UCS_ERR_NO_DEVICE = -14,               ///< no such device
    UCS_ERR_BUSY = -15,                    ///< resource busy
    UCS_ERR_CANCELED = -16,                ///< operation canceled
    UCS_ERR_SHMEM_SEGMENT = -17,           ///< shared memory segment failure
    UCS_ERR_ALREADY_EXISTS = -18,          ///< already exists
    UCS_ERR_OUT_OF_RANGE = -19,            ///< value out of range
    UCS_ERR_TIMED_OUT = -20,               ///< timed out
    UCS_ERR_EXCEEDS_LIMIT = -21,           ///< a limit was exceeded
    UCS_ERR_UNSUPPORTED = -22,             ///< not supported
    UCS_ERR_REJECTED = -23,                ///< connection request rejected by the peer
    UCS_ERR_NOT_CONNECTED = -24,           ///< endpoint not connected
    UCS_ERR_CONNECTION_RESET = -25,        ///< connection reset by the peer
    UCS_ERR_FIRST_LINK_FAILURE = -40,      ///< first of the link failure range
    UCS_ERR_LAST_LINK_FAILURE = -59,       ///< last of the link failure range
    UCS_ERR_FIRST_ENDPOINT_FAILURE = -60,  ///< first of the endpoint failure range
    UCS_ERR_ENDPOINT_TIMEOUT = -80,        ///< the peer stopped answering
    UCS_ERR_LAST_ENDPOINT_FAILURE = -89,   ///< last of the endpoint failure range
    UCS_ERR_LAST = -100,                   ///< below every error; bounds status pointers
};

/** NULL (done), an error status cast to a pointer, or a request handle. */
using ucs_status_ptr_t = void*;

/** True for a link failure code (UCS_IS_LINK_ERROR). */
constexpr bool UCS_IS_LINK_ERROR(int code) noexcept {
    return code <= UCS_ERR_FIRST_LINK_FAILURE && code >= UCS_ERR_LAST_LINK_FAILURE;
}
/** True for an endpoint failure code (UCS_IS_ENDPOINT_ERROR). */
constexpr bool UCS_IS_ENDPOINT_ERROR(int code) noexcept {
    return code <= UCS_ERR_FIRST_ENDPOINT_FAILURE && code >= UCS_ERR_LAST_ENDPOINT_FAILURE;
}
/** True for an error status (UCS_STATUS_IS_ERR). */
constexpr bool UCS_STATUS_IS_ERR(int status) noexcept {
    return status < 0;
}
/** True if the status pointer holds an error (UCS_PTR_IS_ERR); not constexpr: pointer casts. */
inline bool UCS_PTR_IS_ERR(const void* ptr) noexcept {
    return reinterpret_cast<std::uintptr_t>(ptr) >=
           static_cast<std::uintptr_t>(static_cast<std::intptr_t>(UCS_ERR_LAST));
}
/** True if the status pointer is a request handle, neither NULL nor an error (UCS_PTR_IS_PTR). */
inline bool UCS_PTR_IS_PTR(const void* ptr) noexcept {
    return reinterpret_cast<std::uintptr_t>(ptr) - 1 <
           static_cast<std::uintptr_t>(static_cast<std::intptr_t>(UCS_ERR_LAST)) - 1;
}
/** The status a non-request status pointer holds (UCS_PTR_RAW_STATUS). */
inline ucs_status_t UCS_PTR_RAW_STATUS(const void* ptr) noexcept {
    return static_cast<ucs_status_t>(reinterpret_cast<std::intptr_t>(ptr));
}
/** The status of a status pointer: UCS_INPROGRESS for a request (UCS_PTR_STATUS). */
inline ucs_status_t UCS_PTR_STATUS(const void* ptr) noexcept {
    return UCS_PTR_IS_PTR(ptr) ? UCS_INPROGRESS : UCS_PTR_RAW_STATUS(ptr);
}
/** A status as a status pointer (UCS_STATUS_PTR). */
inline ucs_status_ptr_t UCS_STATUS_PTR(ucs_status_t status) noexcept {
    return reinterpret_cast<void*>(static_cast<std::intptr_t>(status));
}

// ===== ucs/type/thread_mode.h, cpu_set.h, memory/memory_type.h, config/types.h =============

/** How many threads may enter a worker or context at once. */
enum ucs_thread_mode_t : unsigned {
    UCS_THREAD_MODE_SINGLE = 0,      ///< one thread only
    UCS_THREAD_MODE_SERIALIZED = 1,  ///< several threads, one at a time
    UCS_THREAD_MODE_MULTI = 2,       ///< several threads concurrently
    UCS_THREAD_MODE_LAST = 3,        ///< number of modes
};

/** One word of a CPU set. */
using ucs_cpu_mask_t = unsigned long;
/** Number of CPUs a ucs_cpu_set_t can hold. */
inline constexpr int UCS_CPU_SETSIZE = 1024;
/** Bits per ucs_cpu_mask_t word. */
inline constexpr std::size_t UCS_NCPUBITS = 8 * sizeof(ucs_cpu_mask_t);

/** A CPU affinity set (1024 bits, 128 bytes). */
struct ucs_cpu_set_t {
    ucs_cpu_mask_t ucs_bits[UCS_CPU_SETSIZE / UCS_NCPUBITS];  ///< bit i of the set is CPU i
};

/** Where a buffer lives. */
enum ucs_memory_type_t : unsigned {
    UCS_MEMORY_TYPE_HOST = 0,          ///< ordinary host memory
    UCS_MEMORY_TYPE_CUDA = 1,          ///< CUDA device memory
    UCS_MEMORY_TYPE_CUDA_MANAGED = 2,  ///< CUDA managed memory
    UCS_MEMORY_TYPE_ROCM = 3,          ///< ROCm device memory
    UCS_MEMORY_TYPE_ROCM_MANAGED = 4,  ///< ROCm managed memory
    UCS_MEMORY_TYPE_LAST = 5,          ///< number of types
    UCS_MEMORY_TYPE_UNKNOWN = 5,       ///< "detect it" (same value as LAST)
};

/** A socket address and its length. */
struct ucs_sock_addr_t {
    const ::sockaddr* addr;  ///< the address
    ::socklen_t addrlen;     ///< its length in bytes
};

/** What ucp_config_print prints (bits). */
enum ucs_config_print_flags_t : unsigned {
    UCS_CONFIG_PRINT_CONFIG = 1u << 0,           ///< the values
    UCS_CONFIG_PRINT_HEADER = 1u << 1,           ///< a title
    UCS_CONFIG_PRINT_DOC = 1u << 2,              ///< descriptions
    UCS_CONFIG_PRINT_HIDDEN = 1u << 3,           ///< hidden variables too
    UCS_CONFIG_PRINT_COMMENT_DEFAULT = 1u << 4,  ///< defaults commented out
};

// ===== ucp/api/ucp_version.h, ucp_def.h ====================================================

/** Shift of the major number in a version word. */
inline constexpr unsigned UCP_VERSION_MAJOR_SHIFT = 24;
/** Shift of the minor number in a version word. */
inline constexpr unsigned UCP_VERSION_MINOR_SHIFT = 16;
/** A version word from major and minor numbers (UCP_VERSION). */
constexpr unsigned UCP_VERSION(unsigned major, unsigned minor) noexcept {
    return (major << UCP_VERSION_MAJOR_SHIFT) | (minor << UCP_VERSION_MINOR_SHIFT);
}
/** The API major version the layer implements. */
inline constexpr unsigned UCP_API_MAJOR = 1;
/** The API minor version the layer implements. */
inline constexpr unsigned UCP_API_MINOR = 13;
/** Both, as a version word. */
inline constexpr unsigned UCP_API_VERSION = UCP_VERSION(1, 13);
/** Size of the name arrays in attribute structs, terminating zero included. */
inline constexpr std::size_t UCP_ENTITY_NAME_MAX = 32;

/** Opaque: a UCP context. */
struct ucp_context;
/** Context handle. */
using ucp_context_h = ucp_context*;
/** Opaque: configuration read from the environment. */
struct ucp_config;
/** Configuration object. */
using ucp_config_t = ucp_config;
/** Opaque: a worker. */
struct ucp_worker;
/** Worker handle. */
using ucp_worker_h = ucp_worker*;
/** Opaque: an endpoint. */
struct ucp_ep;
/** Endpoint handle. */
using ucp_ep_h = ucp_ep*;
/** Opaque: an incoming connection request on a listener. */
struct ucp_conn_request;
/** Connection request handle. */
using ucp_conn_request_h = ucp_conn_request*;
/** Opaque: a packed worker address (a byte blob). */
struct ucp_address;
/** Worker address. */
using ucp_address_t = ucp_address;
/** Opaque: an unpacked remote key. */
struct ucp_rkey;
/** Remote key handle. */
using ucp_rkey_h = ucp_rkey*;
/** Opaque: a registered memory region. */
struct ucp_mem;
/** Memory handle. */
using ucp_mem_h = ucp_mem*;
/** Opaque: a listening socket. */
struct ucp_listener;
/** Listener handle. */
using ucp_listener_h = ucp_listener*;
/** Opaque: a received but not yet matched tagged message. */
struct ucp_recv_desc;
/** Probed message handle. */
using ucp_tag_message_h = ucp_recv_desc*;

/** A message tag. */
using ucp_tag_t = std::uint64_t;
/** A datatype: class in the low UCP_DATATYPE_SHIFT bits, parameter (or pointer) above. */
using ucp_datatype_t = std::uint64_t;

/** How an endpoint reacts to a peer failure. */
enum ucp_err_handling_mode_t : unsigned {
    UCP_ERR_HANDLING_MODE_NONE = 0,  ///< no handling (peer failure is undefined behaviour)
    UCP_ERR_HANDLING_MODE_PEER = 1,  ///< detect peer failure and call the error handler
};

/** Fields of ucp_mem_attr_t (bits of field_mask). */
enum ucp_mem_attr_field : unsigned {
    UCP_MEM_ATTR_FIELD_ADDRESS = 1u << 0,   ///< address
    UCP_MEM_ATTR_FIELD_LENGTH = 1u << 1,    ///< length
    UCP_MEM_ATTR_FIELD_MEM_TYPE = 1u << 2,  ///< mem_type
};

/** What ucp_mem_query reports about a memory handle. */
struct ucp_mem_attr_t {
    std::uint64_t field_mask;    ///< ucp_mem_attr_field bits to fill
    void* address;               ///< start of the region
    std::size_t length;          ///< its length
    ucs_memory_type_t mem_type;  ///< its memory type
};

/** Called on a request when the library creates it (context's request_init). */
using ucp_request_init_callback_t = void (*)(void* request);
/** Called on a request before the library frees it (context's request_cleanup). */
using ucp_request_cleanup_callback_t = void (*)(void* request);
/** Completion of an old-style (_nb) send, flush or RMA. */
using ucp_send_callback_t = void (*)(void* request, ucs_status_t status);
/** Completion of an nbx send, flush, RMA, atomic or close. */
using ucp_send_nbx_callback_t = void (*)(void* request, ucs_status_t status, void* user_data);
/** Peer failure on an endpoint. */
using ucp_err_handler_cb_t = void (*)(void* arg, ucp_ep_h ep, ucs_status_t status);

/** An endpoint error handler and its argument. */
struct ucp_err_handler_t {
    ucp_err_handler_cb_t cb;  ///< the handler
    void* arg;                ///< its first argument
};

/** A listener created an endpoint for a client (deprecated accept flow). */
using ucp_listener_accept_callback_t = void (*)(ucp_ep_h ep, void* arg);
/** A client asks a listener to connect. */
using ucp_listener_conn_callback_t = void (*)(ucp_conn_request_h conn_request, void* arg);

/** A connection request handler and its argument. */
struct ucp_listener_conn_handler_t {
    ucp_listener_conn_callback_t cb;  ///< the handler
    void* arg;                        ///< its last argument
};

/** Completion of an old-style stream receive. */
using ucp_stream_recv_callback_t = void (*)(void* request, ucs_status_t status, std::size_t length);
/** Completion of an nbx stream receive. */
using ucp_stream_recv_nbx_callback_t = void (*)(void* request, ucs_status_t status, std::size_t length,
                                                void* user_data);

struct ucp_tag_recv_info_t;

/** Completion of an old-style tagged receive (info is writable). */
using ucp_tag_recv_callback_t = void (*)(void* request, ucs_status_t status, ucp_tag_recv_info_t* info);
/** Completion of an nbx tagged receive. */
using ucp_tag_recv_nbx_callback_t = void (*)(void* request, ucs_status_t status,
                                             const ucp_tag_recv_info_t* tag_info, void* user_data);
/** Completion of ucp_am_recv_data_nbx. */
using ucp_am_recv_data_nbx_callback_t = void (*)(void* request, ucs_status_t status, std::size_t length,
                                                 void* user_data);

/** Events a worker can wake up on (bits). */
enum ucp_wakeup_event_t : unsigned {
    UCP_WAKEUP_RMA = 1u << 0,       ///< remote memory access completions
    UCP_WAKEUP_AMO = 1u << 1,       ///< atomic completions
    UCP_WAKEUP_TAG_SEND = 1u << 2,  ///< tagged send completions
    UCP_WAKEUP_TAG_RECV = 1u << 3,  ///< tagged receive completions
    UCP_WAKEUP_TX = 1u << 10,       ///< any send completion
    UCP_WAKEUP_RX = 1u << 11,       ///< any receive
    UCP_WAKEUP_EDGE = 1u << 16,     ///< edge-triggered
};

/** Handler of the 1.x active-message API; returns UCS_INPROGRESS to keep data (flags: ucp_cb_param_flags). */
using ucp_am_callback_t = ucs_status_t (*)(void* arg, void* data, std::size_t length, ucp_ep_h reply_ep,
                                           unsigned flags);

struct ucp_am_recv_param_t;

/** Handler of the newer active-message API; returns UCS_INPROGRESS to keep data. */
using ucp_am_recv_callback_t = ucs_status_t (*)(void* arg, const void* header, std::size_t header_length,
                                                void* data, std::size_t length,
                                                const ucp_am_recv_param_t* param);

/** How to create an endpoint (ucp_ep_create). */
struct ucp_ep_params_t {
    std::uint64_t field_mask;          ///< ucp_ep_params_field bits in use
    const ucp_address_t* address;      ///< peer worker address
    ucp_err_handling_mode_t err_mode;  ///< error handling mode
    ucp_err_handler_t err_handler;     ///< peer failure handler
    void* user_data;                   ///< for the error handler and queries
    unsigned flags;                    ///< ucp_ep_params_flags_field bits
    ucs_sock_addr_t sockaddr;          ///< server address (client side)
    ucp_conn_request_h conn_request;   ///< request to accept (server side)
    const char* name;                  ///< endpoint name for diagnostics
    ucs_sock_addr_t local_sockaddr;    ///< local address to bind (client side)
};

// ===== ucp/api/ucp.h: field masks and flags ================================================

/** Fields of ucp_params_t (bits of field_mask). */
enum ucp_params_field : unsigned {
    UCP_PARAM_FIELD_FEATURES = 1u << 0,           ///< features
    UCP_PARAM_FIELD_REQUEST_SIZE = 1u << 1,       ///< request_size
    UCP_PARAM_FIELD_REQUEST_INIT = 1u << 2,       ///< request_init
    UCP_PARAM_FIELD_REQUEST_CLEANUP = 1u << 3,    ///< request_cleanup
    UCP_PARAM_FIELD_TAG_SENDER_MASK = 1u << 4,    ///< tag_sender_mask
    UCP_PARAM_FIELD_MT_WORKERS_SHARED = 1u << 5,  ///< mt_workers_shared
    UCP_PARAM_FIELD_ESTIMATED_NUM_EPS = 1u << 6,  ///< estimated_num_eps
    UCP_PARAM_FIELD_ESTIMATED_NUM_PPN = 1u << 7,  ///< estimated_num_ppn
    UCP_PARAM_FIELD_NAME = 1u << 8,               ///< name
};

/** Features a context is asked for (bits of ucp_params_t.features). */
enum ucp_feature : unsigned {
    UCP_FEATURE_TAG = 1u << 0,     ///< tagged messages
    UCP_FEATURE_RMA = 1u << 1,     ///< put and get
    UCP_FEATURE_AMO32 = 1u << 2,   ///< 32-bit atomics
    UCP_FEATURE_AMO64 = 1u << 3,   ///< 64-bit atomics
    UCP_FEATURE_WAKEUP = 1u << 4,  ///< event-driven progress (efd, arm, wait)
    UCP_FEATURE_STREAM = 1u << 5,  ///< streams
    UCP_FEATURE_AM = 1u << 6,      ///< active messages
};

/** Fields of ucp_worker_params_t (bits of field_mask). */
enum ucp_worker_params_field : unsigned {
    UCP_WORKER_PARAM_FIELD_THREAD_MODE = 1u << 0,   ///< thread_mode
    UCP_WORKER_PARAM_FIELD_CPU_MASK = 1u << 1,      ///< cpu_mask
    UCP_WORKER_PARAM_FIELD_EVENTS = 1u << 2,        ///< events
    UCP_WORKER_PARAM_FIELD_USER_DATA = 1u << 3,     ///< user_data
    UCP_WORKER_PARAM_FIELD_EVENT_FD = 1u << 4,      ///< event_fd
    UCP_WORKER_PARAM_FIELD_FLAGS = 1u << 5,         ///< flags
    UCP_WORKER_PARAM_FIELD_NAME = 1u << 6,          ///< name
    UCP_WORKER_PARAM_FIELD_AM_ALIGNMENT = 1u << 7,  ///< am_alignment
    UCP_WORKER_PARAM_FIELD_CLIENT_ID = 1u << 8,     ///< client_id
};

/** Worker flags (bits of ucp_worker_params_t.flags). */
enum ucp_worker_flags_t : unsigned {
    UCP_WORKER_FLAG_IGNORE_REQUEST_LEAK = 1u << 0,  ///< no warning for unreleased requests at destroy
};

/** Fields of ucp_listener_params_t (bits of field_mask). */
enum ucp_listener_params_field : unsigned {
    UCP_LISTENER_PARAM_FIELD_SOCK_ADDR = 1u << 0,       ///< sockaddr
    UCP_LISTENER_PARAM_FIELD_ACCEPT_HANDLER = 1u << 1,  ///< accept_handler
    UCP_LISTENER_PARAM_FIELD_CONN_HANDLER = 1u << 2,    ///< conn_handler
};

/** What a worker address contains (bits of ucp_worker_attr_t.address_flags). */
enum ucp_worker_address_flags_t : unsigned {
    UCP_WORKER_ADDRESS_FLAG_NET_ONLY = 1u << 0,  ///< network devices only (no shared memory)
};

/** Fields of ucp_ep_params_t (bits of field_mask). */
enum ucp_ep_params_field : unsigned {
    UCP_EP_PARAM_FIELD_REMOTE_ADDRESS = 1u << 0,     ///< address
    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE = 1u << 1,  ///< err_mode
    UCP_EP_PARAM_FIELD_ERR_HANDLER = 1u << 2,        ///< err_handler
    UCP_EP_PARAM_FIELD_USER_DATA = 1u << 3,          ///< user_data
    UCP_EP_PARAM_FIELD_SOCK_ADDR = 1u << 4,          ///< sockaddr
    UCP_EP_PARAM_FIELD_FLAGS = 1u << 5,              ///< flags
    UCP_EP_PARAM_FIELD_CONN_REQUEST = 1u << 6,       ///< conn_request
    UCP_EP_PARAM_FIELD_NAME = 1u << 7,               ///< name
    UCP_EP_PARAM_FIELD_LOCAL_SOCK_ADDR = 1u << 8,    ///< local_sockaddr
};

/** Endpoint creation flags (bits of ucp_ep_params_t.flags). */
enum ucp_ep_params_flags_field : unsigned {
    UCP_EP_PARAMS_FLAGS_CLIENT_SERVER = 1u << 0,   ///< connect through a sockaddr listener
    UCP_EP_PARAMS_FLAGS_NO_LOOPBACK = 1u << 1,     ///< never connect to the own worker
    UCP_EP_PARAMS_FLAGS_SEND_CLIENT_ID = 1u << 2,  ///< send the worker's client_id to the server
};

/** Flags of ucp_ep_close_nbx (in ucp_request_param_t.flags). */
enum ucp_ep_close_flags_t : unsigned {
    UCP_EP_CLOSE_FLAG_FORCE = 1u << 0,  ///< close without flushing
};

/** Modes of ucp_ep_close_nb (a value, not bits). */
enum ucp_ep_close_mode : unsigned {
    UCP_EP_CLOSE_MODE_FORCE = 0,  ///< close without flushing
    UCP_EP_CLOSE_MODE_FLUSH = 1,  ///< flush, then close
};

/** Fields of ucp_ep_evaluate_perf_param_t. */
enum ucp_ep_perf_param_field_t : unsigned {
    UCP_EP_PERF_PARAM_FIELD_MESSAGE_SIZE = 1u << 0,  ///< message_size
};

/** Fields of ucp_ep_evaluate_perf_attr_t. */
enum ucp_ep_perf_attr_field_t : unsigned {
    UCP_EP_PERF_ATTR_FIELD_ESTIMATED_TIME = 1u << 0,  ///< estimated_time
};

/** Fields of ucp_mem_map_params_t (bits of field_mask). */
enum ucp_mem_map_params_field : unsigned {
    UCP_MEM_MAP_PARAM_FIELD_ADDRESS = 1u << 0,      ///< address
    UCP_MEM_MAP_PARAM_FIELD_LENGTH = 1u << 1,       ///< length
    UCP_MEM_MAP_PARAM_FIELD_FLAGS = 1u << 2,        ///< flags
    UCP_MEM_MAP_PARAM_FIELD_PROT = 1u << 3,         ///< prot
    UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE = 1u << 4,  ///< memory_type
};

/** Fields of ucp_mem_advise_params_t (bits of field_mask). */
enum ucp_mem_advise_params_field : unsigned {
    UCP_MEM_ADVISE_PARAM_FIELD_ADDRESS = 1u << 0,  ///< address
    UCP_MEM_ADVISE_PARAM_FIELD_LENGTH = 1u << 1,   ///< length
    UCP_MEM_ADVISE_PARAM_FIELD_ADVICE = 1u << 2,   ///< advice
};

/** Fields of ucp_lib_attr_t. */
enum ucp_lib_attr_field : unsigned {
    UCP_LIB_ATTR_FIELD_MAX_THREAD_LEVEL = 1u << 0,  ///< max_thread_level
};

/** Fields of ucp_context_attr_t (bits of field_mask). */
enum ucp_context_attr_field : unsigned {
    UCP_ATTR_FIELD_REQUEST_SIZE = 1u << 0,  ///< request_size
    UCP_ATTR_FIELD_THREAD_MODE = 1u << 1,   ///< thread_mode
    UCP_ATTR_FIELD_MEMORY_TYPES = 1u << 2,  ///< memory_types
    UCP_ATTR_FIELD_NAME = 1u << 3,          ///< name
};

/** Fields of ucp_worker_attr_t (bits of field_mask). */
enum ucp_worker_attr_field : unsigned {
    UCP_WORKER_ATTR_FIELD_THREAD_MODE = 1u << 0,      ///< thread_mode
    UCP_WORKER_ATTR_FIELD_ADDRESS = 1u << 1,          ///< address, address_length
    UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS = 1u << 2,    ///< address_flags (an input)
    UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER = 1u << 3,    ///< max_am_header
    UCP_WORKER_ATTR_FIELD_NAME = 1u << 4,             ///< name
    UCP_WORKER_ATTR_FIELD_MAX_INFO_STRING = 1u << 5,  ///< max_debug_string (named differently)
};

/** Fields of ucp_worker_address_attr_t. */
enum ucp_worker_address_attr_field : unsigned {
    UCP_WORKER_ADDRESS_ATTR_FIELD_UID = 1u << 0,  ///< worker_uid
};

/** Fields of ucp_listener_attr_t. */
enum ucp_listener_attr_field : unsigned {
    UCP_LISTENER_ATTR_FIELD_SOCKADDR = 1u << 0,  ///< sockaddr
};

/** Fields of ucp_conn_request_attr_t. */
enum ucp_conn_request_attr_field : unsigned {
    UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR = 1u << 0,  ///< client_address
    UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ID = 1u << 1,    ///< client_id
};

/** Datatype classes and the shift of a datatype's parameter. */
enum ucp_dt_type : unsigned {
    UCP_DATATYPE_CONTIG = 0,      ///< contiguous elements; element size above the shift
    UCP_DATATYPE_STRIDED = 1,     ///< strided (no constructor in 1.13)
    UCP_DATATYPE_IOV = 2,         ///< the buffer is a ucp_dt_iov_t array, count its length
    UCP_DATATYPE_GENERIC = 7,     ///< pack/unpack callbacks; pointer above the class bits
    UCP_DATATYPE_SHIFT = 3,       ///< bits of the class
    UCP_DATATYPE_CLASS_MASK = 7,  ///< mask of the class
};

/** A contiguous datatype of elements of @p elem_size bytes (ucp_dt_make_contig). */
constexpr ucp_datatype_t ucp_dt_make_contig(std::size_t elem_size) noexcept {
    return (static_cast<ucp_datatype_t>(elem_size) << UCP_DATATYPE_SHIFT) | UCP_DATATYPE_CONTIG;
}
/** The scatter-gather datatype (ucp_dt_make_iov). */
constexpr ucp_datatype_t ucp_dt_make_iov() noexcept {
    return static_cast<ucp_datatype_t>(UCP_DATATYPE_IOV);
}

/** Memory mapping flags (bits of ucp_mem_map_params_t.flags); unnamed in UCX 1.13. */
enum : unsigned {
    UCP_MEM_MAP_NONBLOCK = 1u << 0,  ///< register lazily
    UCP_MEM_MAP_ALLOCATE = 1u << 1,  ///< allocate the memory too
    UCP_MEM_MAP_FIXED = 1u << 2,     ///< allocate exactly at address
};

/** Memory protection (bits of ucp_mem_map_params_t.prot); unnamed in UCX 1.13. */
enum : unsigned {
    UCP_MEM_MAP_PROT_LOCAL_READ = 1u << 0,    ///< local reads
    UCP_MEM_MAP_PROT_LOCAL_WRITE = 1u << 1,   ///< local writes
    UCP_MEM_MAP_PROT_REMOTE_READ = 1u << 8,   ///< remote gets
    UCP_MEM_MAP_PROT_REMOTE_WRITE = 1u << 9,  ///< remote puts and atomics
};

/** Active-message handler flags (ucp_worker_set_am_handler, ucp_am_handler_param_t.flags). */
enum ucp_am_cb_flags : unsigned {
    UCP_AM_FLAG_WHOLE_MSG = 1u << 0,        ///< call only for whole messages
    UCP_AM_FLAG_PERSISTENT_DATA = 1u << 1,  ///< the handler may keep the data
};

/** Active-message send flags (ucp_am_send_nb flags, ucp_request_param_t.flags). */
enum ucp_send_am_flags : unsigned {
    UCP_AM_SEND_FLAG_REPLY = 1u << 0,            ///< pass the sender's endpoint to the handler
    UCP_AM_SEND_FLAG_EAGER = 1u << 1,            ///< force the eager protocol
    UCP_AM_SEND_FLAG_RNDV = 1u << 2,             ///< force the rendezvous protocol
    UCP_AM_SEND_REPLY = UCP_AM_SEND_FLAG_REPLY,  ///< old name of UCP_AM_SEND_FLAG_REPLY
};

/** Flags a 1.x active-message handler receives. */
enum ucp_cb_param_flags : unsigned {
    UCP_CB_PARAM_FLAG_DATA = 1u << 0,  ///< the data may be kept (return UCS_INPROGRESS)
};

/** Operations of ucp_atomic_post (deprecated). */
enum ucp_atomic_post_op_t : unsigned {
    UCP_ATOMIC_POST_OP_ADD = 0,   ///< add
    UCP_ATOMIC_POST_OP_AND = 1,   ///< and
    UCP_ATOMIC_POST_OP_OR = 2,    ///< or
    UCP_ATOMIC_POST_OP_XOR = 3,   ///< xor
    UCP_ATOMIC_POST_OP_LAST = 4,  ///< number of operations
};

/** Operations of ucp_atomic_fetch_nb (deprecated). */
enum ucp_atomic_fetch_op_t : unsigned {
    UCP_ATOMIC_FETCH_OP_FADD = 0,   ///< fetch and add
    UCP_ATOMIC_FETCH_OP_SWAP = 1,   ///< swap
    UCP_ATOMIC_FETCH_OP_CSWAP = 2,  ///< compare and swap
    UCP_ATOMIC_FETCH_OP_FAND = 3,   ///< fetch and and
    UCP_ATOMIC_FETCH_OP_FOR = 4,    ///< fetch and or
    UCP_ATOMIC_FETCH_OP_FXOR = 5,   ///< fetch and xor
    UCP_ATOMIC_FETCH_OP_LAST = 6,   ///< number of operations
};

/** Operations of ucp_atomic_op_nbx (fetching when a reply buffer is given). */
enum ucp_atomic_op_t : unsigned {
    UCP_ATOMIC_OP_ADD = 0,    ///< add
    UCP_ATOMIC_OP_SWAP = 1,   ///< swap
    UCP_ATOMIC_OP_CSWAP = 2,  ///< compare and swap
    UCP_ATOMIC_OP_AND = 3,    ///< and
    UCP_ATOMIC_OP_OR = 4,     ///< or
    UCP_ATOMIC_OP_XOR = 5,    ///< xor
    UCP_ATOMIC_OP_LAST = 6,   ///< number of operations
};

/** Stream receive flags. */
enum ucp_stream_recv_flags_t : unsigned {
    UCP_STREAM_RECV_FLAG_WAITALL = 1u << 0,  ///< complete only when the whole buffer is filled
};

/** Fields (bits 0-15) and flags (16-31) of ucp_request_param_t.op_attr_mask. */
enum ucp_op_attr_t : unsigned {
    UCP_OP_ATTR_FIELD_REQUEST = 1u << 0,         ///< request
    UCP_OP_ATTR_FIELD_CALLBACK = 1u << 1,        ///< cb
    UCP_OP_ATTR_FIELD_USER_DATA = 1u << 2,       ///< user_data
    UCP_OP_ATTR_FIELD_DATATYPE = 1u << 3,        ///< datatype
    UCP_OP_ATTR_FIELD_FLAGS = 1u << 4,           ///< flags
    UCP_OP_ATTR_FIELD_REPLY_BUFFER = 1u << 5,    ///< reply_buffer
    UCP_OP_ATTR_FIELD_MEMORY_TYPE = 1u << 6,     ///< memory_type
    UCP_OP_ATTR_FIELD_RECV_INFO = 1u << 7,       ///< recv_info
    UCP_OP_ATTR_FIELD_MEMH = 1u << 8,            ///< memh
    UCP_OP_ATTR_FLAG_NO_IMM_CMPL = 1u << 16,     ///< always return a request, never complete at once
    UCP_OP_ATTR_FLAG_FAST_CMPL = 1u << 17,       ///< favour quick local completion
    UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL = 1u << 18,  ///< complete at once or fail with NO_RESOURCE
    UCP_OP_ATTR_FLAG_MULTI_SEND = 1u << 19,      ///< hint: many sends in a row
};

/** Fields of ucp_request_attr_t. */
enum ucp_req_attr_field : unsigned {
    UCP_REQUEST_ATTR_FIELD_INFO_STRING = 1u << 0,       ///< debug_string
    UCP_REQUEST_ATTR_FIELD_INFO_STRING_SIZE = 1u << 1,  ///< debug_string_size
    UCP_REQUEST_ATTR_FIELD_STATUS = 1u << 2,            ///< status
    UCP_REQUEST_ATTR_FIELD_MEM_TYPE = 1u << 3,          ///< mem_type
};

/** Fields (bit 0) and flags (16, 17) of ucp_am_recv_param_t.recv_attr. */
enum ucp_am_recv_attr_t : unsigned {
    UCP_AM_RECV_ATTR_FIELD_REPLY_EP = 1u << 0,  ///< reply_ep is set
    UCP_AM_RECV_ATTR_FLAG_DATA = 1u << 16,      ///< data may be kept (return UCS_INPROGRESS)
    UCP_AM_RECV_ATTR_FLAG_RNDV = 1u << 17,      ///< data is a descriptor for ucp_am_recv_data_nbx
};

/** Fields of ucp_am_handler_param_t (bits of field_mask). */
enum ucp_am_handler_param_field : unsigned {
    UCP_AM_HANDLER_PARAM_FIELD_ID = 1u << 0,     ///< id
    UCP_AM_HANDLER_PARAM_FIELD_FLAGS = 1u << 1,  ///< flags
    UCP_AM_HANDLER_PARAM_FIELD_CB = 1u << 2,     ///< cb
    UCP_AM_HANDLER_PARAM_FIELD_ARG = 1u << 3,    ///< arg
};

/** Fields of ucp_ep_attr_t. */
enum ucp_ep_attr_field : unsigned {
    UCP_EP_ATTR_FIELD_NAME = 1u << 0,             ///< name
    UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR = 1u << 1,   ///< local_sockaddr
    UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR = 1u << 2,  ///< remote_sockaddr
};

/** Advice of ucp_mem_advise (a value). */
enum ucp_mem_advice_t : unsigned {
    UCP_MADV_NORMAL = 0,    ///< no special treatment
    UCP_MADV_WILLNEED = 1,  ///< the range will be accessed soon
};

// ===== ucp/api/ucp.h, ucp_compat.h: structs ================================================

/** One buffer of an IOV datatype. */
struct ucp_dt_iov_t {
    void* buffer;        ///< start
    std::size_t length;  ///< length in bytes
};

/** Callbacks of a generic datatype (ucp_dt_create_generic). */
struct ucp_generic_dt_ops_t {
    /** Begins packing @p count elements at @p buffer; returns the pack state. */
    void* (*start_pack)(void* context, const void* buffer, std::size_t count);
    /** Begins unpacking into @p count elements at @p buffer; returns the unpack state. */
    void* (*start_unpack)(void* context, void* buffer, std::size_t count);
    /** Packed length of the whole message. */
    std::size_t (*packed_size)(void* state);
    /** Packs at most @p max_length bytes from @p offset into @p dest; returns the length. */
    std::size_t (*pack)(void* state, std::size_t offset, void* dest, std::size_t max_length);
    /** Unpacks @p length bytes of @p src at @p offset. */
    ucs_status_t (*unpack)(void* state, std::size_t offset, const void* src, std::size_t length);
    /** Releases a state. */
    void (*finish)(void* state);
};

/** How to create a context (ucp_init). */
struct ucp_params_t {
    std::uint64_t field_mask;                        ///< ucp_params_field bits in use
    std::uint64_t features;                          ///< ucp_feature bits
    std::size_t request_size;                        ///< bytes the caller reserves in each request
    ucp_request_init_callback_t request_init;        ///< called when a request is created
    ucp_request_cleanup_callback_t request_cleanup;  ///< called before a request is freed
    std::uint64_t tag_sender_mask;                   ///< tag bits that identify the sender
    int mt_workers_shared;                           ///< workers shared between threads
    std::size_t estimated_num_eps;                   ///< expected endpoint count
    std::size_t estimated_num_ppn;                   ///< expected processes per node
    const char* name;                                ///< context name
};

/** What ucp_lib_query reports. */
struct ucp_lib_attr_t {
    std::uint64_t field_mask;            ///< ucp_lib_attr_field bits to fill
    ucs_thread_mode_t max_thread_level;  ///< highest thread mode the build supports
};

/** What ucp_context_query reports. */
struct ucp_context_attr_t {
    std::uint64_t field_mask;        ///< ucp_context_attr_field bits to fill
    std::size_t request_size;        ///< bytes the library keeps before each request
    ucs_thread_mode_t thread_mode;   ///< the context's thread mode
    std::uint64_t memory_types;      ///< bit i: ucs_memory_type_t i supported
    char name[UCP_ENTITY_NAME_MAX];  ///< context name
};

/** What ucp_worker_query reports. */
struct ucp_worker_attr_t {
    std::uint64_t field_mask;        ///< ucp_worker_attr_field bits to fill
    ucs_thread_mode_t thread_mode;   ///< the worker's thread mode
    std::uint32_t address_flags;     ///< input: ucp_worker_address_flags_t for address
    ucp_address_t* address;          ///< worker address (release with ucp_worker_release_address)
    std::size_t address_length;      ///< its length
    std::size_t max_am_header;       ///< largest active-message header
    char name[UCP_ENTITY_NAME_MAX];  ///< worker name
    std::size_t max_debug_string;    ///< longest request debug string
};

/** How to create a worker (ucp_worker_create). */
struct ucp_worker_params_t {
    std::uint64_t field_mask;       ///< ucp_worker_params_field bits in use
    ucs_thread_mode_t thread_mode;  ///< requested thread mode
    ucs_cpu_set_t cpu_mask;         ///< CPUs for the progress threads
    unsigned events;                ///< ucp_wakeup_event_t bits
    void* user_data;                ///< for event notifications
    int event_fd;                   ///< external event fd to add the worker's events to
    std::uint64_t flags;            ///< ucp_worker_flags_t bits
    const char* name;               ///< worker name
    std::size_t am_alignment;       ///< alignment of active-message data
    std::uint64_t client_id;        ///< sent to servers with UCP_EP_PARAMS_FLAGS_SEND_CLIENT_ID
};

/** What ucp_worker_address_query reports. */
struct ucp_worker_address_attr_t {
    std::uint64_t field_mask;  ///< ucp_worker_address_attr_field bits to fill
    std::uint64_t worker_uid;  ///< unique id of the address's worker
};

/** Input of ucp_ep_evaluate_perf. */
struct ucp_ep_evaluate_perf_param_t {
    std::uint64_t field_mask;  ///< ucp_ep_perf_param_field_t bits in use
    std::size_t message_size;  ///< message size to estimate
};

/** Output of ucp_ep_evaluate_perf. */
struct ucp_ep_evaluate_perf_attr_t {
    std::uint64_t field_mask;  ///< ucp_ep_perf_attr_field_t bits to fill
    double estimated_time;     ///< seconds
};

/** What ucp_listener_query reports. */
struct ucp_listener_attr_t {
    std::uint64_t field_mask;     ///< ucp_listener_attr_field bits to fill
    ::sockaddr_storage sockaddr;  ///< the listening address
};

/** What ucp_conn_request_query reports. */
struct ucp_conn_request_attr_t {
    std::uint64_t field_mask;           ///< ucp_conn_request_attr_field bits to fill
    ::sockaddr_storage client_address;  ///< the client's address
    std::uint64_t client_id;            ///< the client's worker client_id
};

/** An accept handler and its argument (deprecated). */
struct ucp_listener_accept_handler_t {
    ucp_listener_accept_callback_t cb;  ///< the handler
    void* arg;                          ///< its last argument
};

/** How to create a listener (ucp_listener_create). */
struct ucp_listener_params_t {
    std::uint64_t field_mask;                      ///< ucp_listener_params_field bits in use
    ucs_sock_addr_t sockaddr;                      ///< address to listen on
    ucp_listener_accept_handler_t accept_handler;  ///< deprecated accept flow
    ucp_listener_conn_handler_t conn_handler;      ///< connection request flow
};

/** One endpoint with stream data ready (ucp_stream_worker_poll). */
struct ucp_stream_poll_ep_t {
    ucp_ep_h ep;                ///< the endpoint
    void* user_data;            ///< its user_data
    unsigned flags;             ///< reserved
    std::uint8_t reserved[16];  ///< reserved
};

/** How to map memory (ucp_mem_map). */
struct ucp_mem_map_params_t {
    std::uint64_t field_mask;       ///< ucp_mem_map_params_field bits in use
    void* address;                  ///< region start (or hint with ALLOCATE)
    std::size_t length;             ///< region length
    unsigned flags;                 ///< UCP_MEM_MAP_NONBLOCK/ALLOCATE/FIXED bits
    unsigned prot;                  ///< UCP_MEM_MAP_PROT_* bits
    ucs_memory_type_t memory_type;  ///< memory type of the region
};

/** Tag and length of a received (or probed) tagged message. */
struct ucp_tag_recv_info_t {
    ucp_tag_t sender_tag;  ///< the message's tag
    std::size_t length;    ///< its length in bytes
};

/** Optional parameters of every nbx operation; op_attr_mask says which fields are set. */
struct ucp_request_param_t {
    std::uint32_t op_attr_mask;  ///< ucp_op_attr_t fields and flags
    std::uint32_t flags;         ///< operation-specific flags
    void* request;               ///< caller-provided request
    union {
        ucp_send_nbx_callback_t send;                ///< sends, RMA, atomics, flush, close
        ucp_tag_recv_nbx_callback_t recv;            ///< tagged receives
        ucp_stream_recv_nbx_callback_t recv_stream;  ///< stream receives
        ucp_am_recv_data_nbx_callback_t recv_am;     ///< ucp_am_recv_data_nbx
    } cb;                                            ///< completion callback, one shape per operation
    ucp_datatype_t datatype;                         ///< datatype (default: bytes)
    void* user_data;                                 ///< last argument of the callback
    void* reply_buffer;                              ///< atomics: where the old value goes (fetching)
    ucs_memory_type_t memory_type;                   ///< memory type of the buffer
    union {
        std::size_t* length;            ///< stream receives
        ucp_tag_recv_info_t* tag_info;  ///< tagged receives
    } recv_info;                        ///< where an immediately completed receive reports
    ucp_mem_h memh;                     ///< registration of the buffer
};

/** What ucp_request_query reports. */
struct ucp_request_attr_t {
    std::uint64_t field_mask;       ///< ucp_req_attr_field bits to fill
    char* debug_string;             ///< output buffer for a description
    std::size_t debug_string_size;  ///< its size
    ucs_status_t status;            ///< the request's status
    ucs_memory_type_t mem_type;     ///< memory type of its buffer
};

/** An active-message handler for ucp_worker_set_am_recv_handler. */
struct ucp_am_handler_param_t {
    std::uint64_t field_mask;   ///< ucp_am_handler_param_field bits in use
    unsigned id;                ///< message id
    std::uint32_t flags;        ///< ucp_am_cb_flags bits
    ucp_am_recv_callback_t cb;  ///< the handler (NULL removes it)
    void* arg;                  ///< its first argument
};

/** What an active-message handler (ucp_am_recv_callback_t) learns about the message. */
struct ucp_am_recv_param_t {
    std::uint64_t recv_attr;  ///< ucp_am_recv_attr_t bits
    ucp_ep_h reply_ep;        ///< sender's endpoint, with UCP_AM_RECV_ATTR_FIELD_REPLY_EP
};

/** How to advise on a mapped region (ucp_mem_advise). */
struct ucp_mem_advise_params_t {
    std::uint64_t field_mask;  ///< ucp_mem_advise_params_field bits in use
    void* address;             ///< range start
    std::size_t length;        ///< range length
    ucp_mem_advice_t advice;   ///< the advice
};

/** What ucp_ep_query reports. */
struct ucp_ep_attr_t {
    std::uint64_t field_mask;            ///< ucp_ep_attr_field bits to fill
    char name[UCP_ENTITY_NAME_MAX];      ///< endpoint name
    ::sockaddr_storage local_sockaddr;   ///< local address (client-server endpoints)
    ::sockaddr_storage remote_sockaddr;  ///< remote address (client-server endpoints)
};

// ===== ucm/api/ucm.h =======================================================================

/** Memory events (bits); the layer only reports them, it hooks nothing. */
enum ucm_event_type_t : unsigned {
    UCM_EVENT_NONE = 0,                        ///< no event
    UCM_EVENT_MMAP = 1u << 0,                  ///< mmap
    UCM_EVENT_MUNMAP = 1u << 1,                ///< munmap
    UCM_EVENT_MREMAP = 1u << 2,                ///< mremap
    UCM_EVENT_SHMAT = 1u << 3,                 ///< shmat
    UCM_EVENT_SHMDT = 1u << 4,                 ///< shmdt
    UCM_EVENT_SBRK = 1u << 5,                  ///< sbrk
    UCM_EVENT_MADVISE = 1u << 6,               ///< madvise
    UCM_EVENT_BRK = 1u << 7,                   ///< brk
    UCM_EVENT_VM_MAPPED = 1u << 16,            ///< any mapping appeared
    UCM_EVENT_VM_UNMAPPED = 1u << 17,          ///< any mapping went away
    UCM_EVENT_MEM_TYPE_ALLOC = 1u << 20,       ///< accelerator memory allocated
    UCM_EVENT_MEM_TYPE_FREE = 1u << 21,        ///< accelerator memory freed
    UCM_EVENT_FLAG_NO_INSTALL = 1u << 24,      ///< register the handler without installing hooks
    UCM_EVENT_FLAG_EXISTING_ALLOC = 1u << 25,  ///< also report existing allocations
};

/** Details of a memory event; the member matches the event type. */
union ucm_event_t {
    struct {
        void* result;      ///< mmap's return value
        void* address;     ///< requested address
        std::size_t size;  ///< length
        int prot;          ///< protection
        int flags;         ///< flags
        int fd;            ///< file descriptor
        ::off_t offset;    ///< file offset
    } mmap;                ///< UCM_EVENT_MMAP
    struct {
        int result;        ///< munmap's return value
        void* address;     ///< start
        std::size_t size;  ///< length
    } munmap;              ///< UCM_EVENT_MUNMAP
    struct {
        void* result;          ///< mremap's return value
        void* address;         ///< old address
        std::size_t old_size;  ///< old length
        std::size_t new_size;  ///< new length
        int flags;             ///< flags
    } mremap;                  ///< UCM_EVENT_MREMAP
    struct {
        void* result;         ///< shmat's return value
        int shmid;            ///< segment id
        const void* shmaddr;  ///< requested address
        int shmflg;           ///< flags
    } shmat;                  ///< UCM_EVENT_SHMAT
    struct {
        int result;           ///< shmdt's return value
        const void* shmaddr;  ///< address
    } shmdt;                  ///< UCM_EVENT_SHMDT
    struct {
        void* result;             ///< sbrk's return value
        std::intptr_t increment;  ///< increment
    } sbrk;                       ///< UCM_EVENT_SBRK
    struct {
        int result;          ///< madvise's return value
        void* addr;          ///< start
        std::size_t length;  ///< length
        int advice;          ///< advice
    } madvise;               ///< UCM_EVENT_MADVISE
    struct {
        int result;  ///< brk's return value
        void* addr;  ///< new break
    } brk;           ///< UCM_EVENT_BRK
    struct {
        void* address;         ///< start
        std::size_t size;      ///< length
    } vm_mapped, vm_unmapped;  ///< UCM_EVENT_VM_MAPPED, UCM_EVENT_VM_UNMAPPED (one struct type)
    struct {
        void* address;               ///< start
        std::size_t size;            ///< length
        ucs_memory_type_t mem_type;  ///< memory type
    } mem_type;                      ///< UCM_EVENT_MEM_TYPE_ALLOC, UCM_EVENT_MEM_TYPE_FREE
};

/** A memory event handler (ucm_set_event_handler). */
using ucm_event_callback_t = void (*)(ucm_event_type_t event_type, ucm_event_t* event, void* arg);

// ===== Prototypes of the exported functions, as pointer types ==============================
// The layer defines each as extern "C" with exactly this signature; the test compares every
// one with UCX's declaration, parameter by parameter.

/** libucs: the text of a status. */
using ucs_status_string_fn = const char* (*)(ucs_status_t status);

/** libucm: register a memory event handler. */
using ucm_set_event_handler_fn = ucs_status_t (*)(int events, int priority, ucm_event_callback_t cb,
                                                  void* arg);
/** libucm: unregister a memory event handler. */
using ucm_unset_event_handler_fn = void (*)(int events, ucm_event_callback_t cb, void* arg);
/** libucm: the caller reports these events itself (ucm_vm_munmap). */
using ucm_set_external_event_fn = void (*)(int events);
/** libucm: undo ucm_set_external_event. */
using ucm_unset_external_event_fn = void (*)(int events);
/** libucm: are the hooks for these events working. */
using ucm_test_events_fn = ucs_status_t (*)(int events);
/** libucm: are these events reported externally. */
using ucm_test_external_events_fn = ucs_status_t (*)(int events);
/** libucm: report a mapping (external events). */
using ucm_vm_mmap_fn = void (*)(void* addr, std::size_t length);
/** libucm: report an unmapping (external events). */
using ucm_vm_munmap_fn = void (*)(void* addr, std::size_t length);

/** Library attributes. */
using ucp_lib_query_fn = ucs_status_t (*)(ucp_lib_attr_t* attr);
/** Reads the configuration from the environment. */
using ucp_config_read_fn = ucs_status_t (*)(const char* env_prefix, const char* filename,
                                            ucp_config_t** config_p);
/** Frees a configuration. */
using ucp_config_release_fn = void (*)(ucp_config_t* config);
/** Sets one configuration variable. */
using ucp_config_modify_fn = ucs_status_t (*)(ucp_config_t* config, const char* name, const char* value);
/** Prints a configuration. */
using ucp_config_print_fn = void (*)(const ucp_config_t* config, std::FILE* stream, const char* title,
                                     ucs_config_print_flags_t print_flags);
/** The library's version numbers. */
using ucp_get_version_fn = void (*)(unsigned* major_version, unsigned* minor_version,
                                    unsigned* release_number);
/** The library's version string. */
using ucp_get_version_string_fn = const char* (*)();
/** Creates a context for a caller built against API major.minor. */
using ucp_init_version_fn = ucs_status_t (*)(unsigned api_major_version, unsigned api_minor_version,
                                             const ucp_params_t* params, const ucp_config_t* config,
                                             ucp_context_h* context_p);
/** ucp_init_version with the header's version (inline in UCX's header: callers never import it). */
using ucp_init_fn = ucs_status_t (*)(const ucp_params_t* params, const ucp_config_t* config,
                                     ucp_context_h* context_p);
/** Destroys a context. */
using ucp_cleanup_fn = void (*)(ucp_context_h context_p);
/** Context attributes. */
using ucp_context_query_fn = ucs_status_t (*)(ucp_context_h context_p, ucp_context_attr_t* attr);
/** Prints a context's description. */
using ucp_context_print_info_fn = void (*)(ucp_context_h context, std::FILE* stream);

/** Creates a worker. */
using ucp_worker_create_fn = ucs_status_t (*)(ucp_context_h context, const ucp_worker_params_t* params,
                                              ucp_worker_h* worker_p);
/** Destroys a worker. */
using ucp_worker_destroy_fn = void (*)(ucp_worker_h worker);
/** Worker attributes. */
using ucp_worker_query_fn = ucs_status_t (*)(ucp_worker_h worker, ucp_worker_attr_t* attr);
/** Prints a worker's description. */
using ucp_worker_print_info_fn = void (*)(ucp_worker_h worker, std::FILE* stream);
/** The worker's address (release with ucp_worker_release_address). */
using ucp_worker_get_address_fn = ucs_status_t (*)(ucp_worker_h worker, ucp_address_t** address_p,
                                                   std::size_t* address_length_p);
/** Frees a worker address. */
using ucp_worker_release_address_fn = void (*)(ucp_worker_h worker, ucp_address_t* address);
/** Attributes of a worker address. */
using ucp_worker_address_query_fn = ucs_status_t (*)(ucp_address_t* address, ucp_worker_address_attr_t* attr);
/** Progresses a worker; returns how many events it handled. */
using ucp_worker_progress_fn = unsigned (*)(ucp_worker_h worker);
/** Polls for endpoints with stream data. */
using ucp_stream_worker_poll_fn = ::ssize_t (*)(ucp_worker_h worker, ucp_stream_poll_ep_t* poll_eps,
                                                std::size_t max_eps, unsigned flags);
/** The worker's event file descriptor. */
using ucp_worker_get_efd_fn = ucs_status_t (*)(ucp_worker_h worker, int* fd);
/** Blocks until the worker has events. */
using ucp_worker_wait_fn = ucs_status_t (*)(ucp_worker_h worker);
/** Blocks until a memory word may have changed. */
using ucp_worker_wait_mem_fn = void (*)(ucp_worker_h worker, void* address);
/** Arms the event fd; UCS_ERR_BUSY if events are pending. */
using ucp_worker_arm_fn = ucs_status_t (*)(ucp_worker_h worker);
/** Wakes a worker blocked in wait or on its fd. */
using ucp_worker_signal_fn = ucs_status_t (*)(ucp_worker_h worker);
/** Creates a listener. */
using ucp_listener_create_fn = ucs_status_t (*)(ucp_worker_h worker, const ucp_listener_params_t* params,
                                                ucp_listener_h* listener_p);
/** Destroys a listener. */
using ucp_listener_destroy_fn = void (*)(ucp_listener_h listener);
/** Listener attributes. */
using ucp_listener_query_fn = ucs_status_t (*)(ucp_listener_h listener, ucp_listener_attr_t* attr);
/** Connection request attributes. */
using ucp_conn_request_query_fn = ucs_status_t (*)(ucp_conn_request_h conn_request,
                                                   ucp_conn_request_attr_t* attr);
/** Request attributes. */
using ucp_request_query_fn = ucs_status_t (*)(void* request, ucp_request_attr_t* attr);
/** Creates an endpoint. */
using ucp_ep_create_fn = ucs_status_t (*)(ucp_worker_h worker, const ucp_ep_params_t* params, ucp_ep_h* ep_p);
/** Closes an endpoint (mode: ucp_ep_close_mode). */
using ucp_ep_close_nb_fn = ucs_status_ptr_t (*)(ucp_ep_h ep, unsigned mode);
/** Closes an endpoint (flags: ucp_ep_close_flags_t). */
using ucp_ep_close_nbx_fn = ucs_status_ptr_t (*)(ucp_ep_h ep, const ucp_request_param_t* param);
/** Refuses a connection request. */
using ucp_listener_reject_fn = ucs_status_t (*)(ucp_listener_h listener, ucp_conn_request_h conn_request);
/** Prints an endpoint's description. */
using ucp_ep_print_info_fn = void (*)(ucp_ep_h ep, std::FILE* stream);
/** Flushes an endpoint (flags unused). */
using ucp_ep_flush_nb_fn = ucs_status_ptr_t (*)(ucp_ep_h ep, unsigned flags, ucp_send_callback_t cb);
/** Flushes an endpoint. */
using ucp_ep_flush_nbx_fn = ucs_status_ptr_t (*)(ucp_ep_h ep, const ucp_request_param_t* param);
/** Estimates an endpoint's performance. */
using ucp_ep_evaluate_perf_fn = ucs_status_t (*)(ucp_ep_h ep, const ucp_ep_evaluate_perf_param_t* param,
                                                 ucp_ep_evaluate_perf_attr_t* attr);
/** Endpoint attributes. */
using ucp_ep_query_fn = ucs_status_t (*)(ucp_ep_h ep, ucp_ep_attr_t* attr);

/** Registers (or allocates) memory. */
using ucp_mem_map_fn = ucs_status_t (*)(ucp_context_h context, const ucp_mem_map_params_t* params,
                                        ucp_mem_h* memh_p);
/** Deregisters memory. */
using ucp_mem_unmap_fn = ucs_status_t (*)(ucp_context_h context, ucp_mem_h memh);
/** Memory handle attributes. */
using ucp_mem_query_fn = ucs_status_t (*)(ucp_mem_h memh, ucp_mem_attr_t* attr);
/** Prints what mapping a size would do. */
using ucp_mem_print_info_fn = void (*)(const char* mem_size, ucp_context_h context, std::FILE* stream);
/** Advice on a mapped range. */
using ucp_mem_advise_fn = ucs_status_t (*)(ucp_context_h context, ucp_mem_h memh,
                                           ucp_mem_advise_params_t* params);
/** Packs a remote key for a peer (release with ucp_rkey_buffer_release). */
using ucp_rkey_pack_fn = ucs_status_t (*)(ucp_context_h context, ucp_mem_h memh, void** rkey_buffer_p,
                                          std::size_t* size_p);
/** Frees a packed remote key. */
using ucp_rkey_buffer_release_fn = void (*)(void* rkey_buffer);
/** Unpacks a peer's remote key for an endpoint. */
using ucp_ep_rkey_unpack_fn = ucs_status_t (*)(ucp_ep_h ep, const void* rkey_buffer, ucp_rkey_h* rkey_p);
/** A local pointer to remote memory, if directly accessible. */
using ucp_rkey_ptr_fn = ucs_status_t (*)(ucp_rkey_h rkey, std::uint64_t raddr, void** addr_p);
/** Frees an unpacked remote key. */
using ucp_rkey_destroy_fn = void (*)(ucp_rkey_h rkey);

/** Sets a 1.x active-message handler (id is 16 bits here). */
using ucp_worker_set_am_handler_fn = ucs_status_t (*)(ucp_worker_h worker, std::uint16_t id,
                                                      ucp_am_callback_t cb, void* arg, std::uint32_t flags);
/** Sets an active-message handler. */
using ucp_worker_set_am_recv_handler_fn = ucs_status_t (*)(ucp_worker_h worker,
                                                           const ucp_am_handler_param_t* param);
/** Sends a 1.x active message (flags: ucp_send_am_flags). */
using ucp_am_send_nb_fn = ucs_status_ptr_t (*)(ucp_ep_h ep, std::uint16_t id, const void* buffer,
                                               std::size_t count, ucp_datatype_t datatype,
                                               ucp_send_callback_t cb, unsigned flags);
/** Sends an active message with a header (id is unsigned here). */
using ucp_am_send_nbx_fn = ucs_status_ptr_t (*)(ucp_ep_h ep, unsigned id, const void* header,
                                                std::size_t header_length, const void* buffer,
                                                std::size_t count, const ucp_request_param_t* param);
/** Receives the data of a rendezvous active message. */
using ucp_am_recv_data_nbx_fn = ucs_status_ptr_t (*)(ucp_worker_h worker, void* data_desc, void* buffer,
                                                     std::size_t count, const ucp_request_param_t* param);
/** Releases active-message data a handler kept. */
using ucp_am_data_release_fn = void (*)(ucp_worker_h worker, void* data);

/** Sends on a stream (old style). */
using ucp_stream_send_nb_fn = ucs_status_ptr_t (*)(ucp_ep_h ep, const void* buffer, std::size_t count,
                                                   ucp_datatype_t datatype, ucp_send_callback_t cb,
                                                   unsigned flags);
/** Sends on a stream. */
using ucp_stream_send_nbx_fn = ucs_status_ptr_t (*)(ucp_ep_h ep, const void* buffer, std::size_t count,
                                                    const ucp_request_param_t* param);
/** Receives from a stream (old style). */
using ucp_stream_recv_nb_fn = ucs_status_ptr_t (*)(ucp_ep_h ep, void* buffer, std::size_t count,
                                                   ucp_datatype_t datatype, ucp_stream_recv_callback_t cb,
                                                   std::size_t* length, unsigned flags);
/** Receives from a stream. */
using ucp_stream_recv_nbx_fn = ucs_status_ptr_t (*)(ucp_ep_h ep, void* buffer, std::size_t count,
                                                    std::size_t* length, const ucp_request_param_t* param);
/** Takes the stream data available on an endpoint. */
using ucp_stream_recv_data_nb_fn = ucs_status_ptr_t (*)(ucp_ep_h ep, std::size_t* length);
/** Releases data of ucp_stream_recv_data_nb. */
using ucp_stream_data_release_fn = void (*)(ucp_ep_h ep, void* data);
/** Status (and length) of a stream receive request. */
using ucp_stream_recv_request_test_fn = ucs_status_t (*)(void* request, std::size_t* length_p);

/** Tagged send (old style). */
using ucp_tag_send_nb_fn = ucs_status_ptr_t (*)(ucp_ep_h ep, const void* buffer, std::size_t count,
                                                ucp_datatype_t datatype, ucp_tag_t tag,
                                                ucp_send_callback_t cb);
/** Tagged send into a caller-provided request. */
using ucp_tag_send_nbr_fn = ucs_status_t (*)(ucp_ep_h ep, const void* buffer, std::size_t count,
                                             ucp_datatype_t datatype, ucp_tag_t tag, void* req);
/** Synchronous tagged send (old style). */
using ucp_tag_send_sync_nb_fn = ucs_status_ptr_t (*)(ucp_ep_h ep, const void* buffer, std::size_t count,
                                                     ucp_datatype_t datatype, ucp_tag_t tag,
                                                     ucp_send_callback_t cb);
/** Tagged send. */
using ucp_tag_send_nbx_fn = ucs_status_ptr_t (*)(ucp_ep_h ep, const void* buffer, std::size_t count,
                                                 ucp_tag_t tag, const ucp_request_param_t* param);
/** Synchronous tagged send. */
using ucp_tag_send_sync_nbx_fn = ucs_status_ptr_t (*)(ucp_ep_h ep, const void* buffer, std::size_t count,
                                                      ucp_tag_t tag, const ucp_request_param_t* param);
/** Tagged receive (old style). */
using ucp_tag_recv_nb_fn = ucs_status_ptr_t (*)(ucp_worker_h worker, void* buffer, std::size_t count,
                                                ucp_datatype_t datatype, ucp_tag_t tag, ucp_tag_t tag_mask,
                                                ucp_tag_recv_callback_t cb);
/** Tagged receive into a caller-provided request. */
using ucp_tag_recv_nbr_fn = ucs_status_t (*)(ucp_worker_h worker, void* buffer, std::size_t count,
                                             ucp_datatype_t datatype, ucp_tag_t tag, ucp_tag_t tag_mask,
                                             void* req);
/** Tagged receive. */
using ucp_tag_recv_nbx_fn = ucs_status_ptr_t (*)(ucp_worker_h worker, void* buffer, std::size_t count,
                                                 ucp_tag_t tag, ucp_tag_t tag_mask,
                                                 const ucp_request_param_t* param);
/** Looks for a matching message; with remove != 0 takes it (receive it with ucp_tag_msg_recv_*). */
using ucp_tag_probe_nb_fn = ucp_tag_message_h (*)(ucp_worker_h worker, ucp_tag_t tag, ucp_tag_t tag_mask,
                                                  int remove, ucp_tag_recv_info_t* info);
/** Receives a probed message (old style). */
using ucp_tag_msg_recv_nb_fn = ucs_status_ptr_t (*)(ucp_worker_h worker, void* buffer, std::size_t count,
                                                    ucp_datatype_t datatype, ucp_tag_message_h message,
                                                    ucp_tag_recv_callback_t cb);
/** Receives a probed message. */
using ucp_tag_msg_recv_nbx_fn = ucs_status_ptr_t (*)(ucp_worker_h worker, void* buffer, std::size_t count,
                                                     ucp_tag_message_h message,
                                                     const ucp_request_param_t* param);
/** Status (and tag info) of a tagged receive request. */
using ucp_tag_recv_request_test_fn = ucs_status_t (*)(void* request, ucp_tag_recv_info_t* info);

/** Put, completion implicit (flush). */
using ucp_put_nbi_fn = ucs_status_t (*)(ucp_ep_h ep, const void* buffer, std::size_t length,
                                        std::uint64_t remote_addr, ucp_rkey_h rkey);
/** Put (old style). */
using ucp_put_nb_fn = ucs_status_ptr_t (*)(ucp_ep_h ep, const void* buffer, std::size_t length,
                                           std::uint64_t remote_addr, ucp_rkey_h rkey,
                                           ucp_send_callback_t cb);
/** Put. */
using ucp_put_nbx_fn = ucs_status_ptr_t (*)(ucp_ep_h ep, const void* buffer, std::size_t count,
                                            std::uint64_t remote_addr, ucp_rkey_h rkey,
                                            const ucp_request_param_t* param);
/** Get, completion implicit (flush). */
using ucp_get_nbi_fn = ucs_status_t (*)(ucp_ep_h ep, void* buffer, std::size_t length,
                                        std::uint64_t remote_addr, ucp_rkey_h rkey);
/** Get (old style). */
using ucp_get_nb_fn = ucs_status_ptr_t (*)(ucp_ep_h ep, void* buffer, std::size_t length,
                                           std::uint64_t remote_addr, ucp_rkey_h rkey,
                                           ucp_send_callback_t cb);
/** Get. */
using ucp_get_nbx_fn = ucs_status_ptr_t (*)(ucp_ep_h ep, void* buffer, std::size_t count,
                                            std::uint64_t remote_addr, ucp_rkey_h rkey,
                                            const ucp_request_param_t* param);
/** Non-fetching atomic of op_size 4 or 8 bytes (deprecated). */
using ucp_atomic_post_fn = ucs_status_t (*)(ucp_ep_h ep, ucp_atomic_post_op_t opcode, std::uint64_t value,
                                            std::size_t op_size, std::uint64_t remote_addr, ucp_rkey_h rkey);
/** Fetching atomic; for CSWAP, *result holds the swap value on entry (deprecated). */
using ucp_atomic_fetch_nb_fn = ucs_status_ptr_t (*)(ucp_ep_h ep, ucp_atomic_fetch_op_t opcode,
                                                    std::uint64_t value, void* result, std::size_t op_size,
                                                    std::uint64_t remote_addr, ucp_rkey_h rkey,
                                                    ucp_send_callback_t cb);
/** Atomic; the operand is *buffer, its size from param's datatype, the old value to reply_buffer. */
using ucp_atomic_op_nbx_fn = ucs_status_ptr_t (*)(ucp_ep_h ep, ucp_atomic_op_t opcode, const void* buffer,
                                                  std::size_t count, std::uint64_t remote_addr,
                                                  ucp_rkey_h rkey, const ucp_request_param_t* param);

/** A request's status: UCS_INPROGRESS until it completes. */
using ucp_request_check_status_fn = ucs_status_t (*)(void* request);
/** Cancels a pending request (it completes with UCS_ERR_CANCELED). */
using ucp_request_cancel_fn = void (*)(ucp_worker_h worker, void* request);
/** Releases a request (completed or not). */
using ucp_request_free_fn = void (*)(void* request);
/** Allocates a request (for the _nbr calls). */
using ucp_request_alloc_fn = void* (*)(ucp_worker_h worker);
/** Creates a generic datatype. */
using ucp_dt_create_generic_fn = ucs_status_t (*)(const ucp_generic_dt_ops_t* ops, void* context,
                                                  ucp_datatype_t* datatype_p);
/** Destroys a generic datatype. */
using ucp_dt_destroy_fn = void (*)(ucp_datatype_t datatype);
/** Orders earlier RMA and atomics before later ones. */
using ucp_worker_fence_fn = ucs_status_t (*)(ucp_worker_h worker);
/** Flushes a worker (flags unused). */
using ucp_worker_flush_nb_fn = ucs_status_ptr_t (*)(ucp_worker_h worker, unsigned flags,
                                                    ucp_send_callback_t cb);
/** Flushes a worker. */
using ucp_worker_flush_nbx_fn = ucs_status_ptr_t (*)(ucp_worker_h worker, const ucp_request_param_t* param);

// ucp_compat.h: deprecated calls still exported by UCX 1.13.

/** Nonzero once a request completed. */
using ucp_request_is_completed_fn = int (*)(void* request);
/** Releases a request (old name of ucp_request_free). */
using ucp_request_release_fn = void (*)(void* request);
/** Destroys an endpoint at once. */
using ucp_ep_destroy_fn = void (*)(ucp_ep_h ep);
/** Closes an endpoint (flush mode). */
using ucp_disconnect_nb_fn = ucs_status_ptr_t (*)(ucp_ep_h ep);
/** Status (and tag info) of a receive request. */
using ucp_request_test_fn = ucs_status_t (*)(void* request, ucp_tag_recv_info_t* info);
/** Flushes an endpoint, blocking. */
using ucp_ep_flush_fn = ucs_status_t (*)(ucp_ep_h ep);
/** Flushes a worker, blocking. */
using ucp_worker_flush_fn = ucs_status_t (*)(ucp_worker_h worker);
/** Put, blocking until local completion. */
using ucp_put_fn = ucs_status_t (*)(ucp_ep_h ep, const void* buffer, std::size_t length,
                                    std::uint64_t remote_addr, ucp_rkey_h rkey);
/** Get, blocking. */
using ucp_get_fn = ucs_status_t (*)(ucp_ep_h ep, void* buffer, std::size_t length, std::uint64_t remote_addr,
                                    ucp_rkey_h rkey);
/** Blocking 32-bit atomic add. */
using ucp_atomic_add32_fn = ucs_status_t (*)(ucp_ep_h ep, std::uint32_t add, std::uint64_t remote_addr,
                                             ucp_rkey_h rkey);
/** Blocking 64-bit atomic add. */
using ucp_atomic_add64_fn = ucs_status_t (*)(ucp_ep_h ep, std::uint64_t add, std::uint64_t remote_addr,
                                             ucp_rkey_h rkey);
/** Blocking 32-bit fetch and add. */
using ucp_atomic_fadd32_fn = ucs_status_t (*)(ucp_ep_h ep, std::uint32_t add, std::uint64_t remote_addr,
                                              ucp_rkey_h rkey, std::uint32_t* result);
/** Blocking 64-bit fetch and add. */
using ucp_atomic_fadd64_fn = ucs_status_t (*)(ucp_ep_h ep, std::uint64_t add, std::uint64_t remote_addr,
                                              ucp_rkey_h rkey, std::uint64_t* result);
/** Blocking 32-bit swap. */
using ucp_atomic_swap32_fn = ucs_status_t (*)(ucp_ep_h ep, std::uint32_t swap, std::uint64_t remote_addr,
                                              ucp_rkey_h rkey, std::uint32_t* result);
/** Blocking 64-bit swap. */
using ucp_atomic_swap64_fn = ucs_status_t (*)(ucp_ep_h ep, std::uint64_t swap, std::uint64_t remote_addr,
                                              ucp_rkey_h rkey, std::uint64_t* result);
/** Blocking 32-bit compare and swap. */
using ucp_atomic_cswap32_fn = ucs_status_t (*)(ucp_ep_h ep, std::uint32_t compare, std::uint32_t swap,
                                               std::uint64_t remote_addr, ucp_rkey_h rkey,
                                               std::uint32_t* result);
/** Blocking 64-bit compare and swap. */
using ucp_atomic_cswap64_fn = ucs_status_t (*)(ucp_ep_h ep, std::uint64_t compare, std::uint64_t swap,
                                               std::uint64_t remote_addr, ucp_rkey_h rkey,
                                               std::uint64_t* result);
/** Changes an endpoint's parameters. */
using ucp_ep_modify_nb_fn = ucs_status_ptr_t (*)(ucp_ep_h ep, const ucp_ep_params_t* params);

}  // namespace loom::ucx

// Not declared (public in UCX 1.13, not needed by the layer):
// - ucs: ucs_log_level_t, ucs_async_mode_t, ucs_ternary_auto_value_t, ucs_on_off_auto_value_t,
//   ucs_handle_error_t, ucs_config_names_array_t, ucs_config_allow_list_t and the other
//   configuration-parser types of ucs/config/types.h; the UCS_CPU_* macros and
//   ucs_cpu_is_set(); UCS_MEMORY_TYPES_CPU_ACCESSIBLE and ucs_memory_type_for_each; the data
//   symbols ucs_thread_mode_names, ucs_memory_type_names, ucs_memory_type_descs,
//   ucs_async_mode_names; UCS_BIT / UCS_MASK (written out as shifts here).
// - ucm: ucm_global_config_t, ucm_global_opts, ucm_set_global_opts, ucm_mmap_hook_mode_t,
//   ucm_module_unload_prevent_mode_t, and the interposed system calls ucm_orig_* /
//   ucm_mmap, ucm_munmap, ucm_mremap, ucm_shmat, ucm_shmdt, ucm_sbrk, ucm_brk, ucm_madvise,
//   ucm_dlopen (the layer hooks nothing).
// - ucp: nothing of ucp.h / ucp_compat.h / ucp_def.h is left out except the UCS_BIT-style
//   helper macros; UCP's internal headers (ucp/core, ucp/dt) are not part of the ABI.
