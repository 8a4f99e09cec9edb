/**
 * Holds bindings/ucx/ucx_abi.h, Loom's own declarations of UCX 1.13's ABI, against the real
 * UCX 1.13 headers (Debian libucx-dev 1.13.1).
 *
 * Why: the UCX compatibility layer is loaded by MPI libraries compiled against those headers,
 * so a wrong enum value, flag bit, field offset or prototype in ucx_abi.h corrupts memory or
 * misreads arguments in a way no functional test pins down. This test compiles the real
 * headers and ours into one program and compares, by name:
 * - every enumerator's value, and the enum it belongs to (type and underlying type);
 * - every struct and union: size, alignment; every field (nested union and struct members
 *   too): offset, size, alignment and type, the type compared after mapping our types onto
 *   UCX's (Real<> below), so `int` against `unsigned` or a wrong pointee fails;
 * - every type alias (handles, callbacks) and every `<name>_fn` prototype, parameter by
 *   parameter, against UCX's declaration of <name>;
 * - the constants and helpers that are macros in UCX (version, UCS_PTR_*, ucp_dt_make_*), on
 *   sample inputs.
 * A declaration of ours that UCX lacks does not compile here. UcxAbi.Coverage reads ucx_abi.h
 * and this file and fails for any declaration of the header that no CHECK_* line names, so
 * the header cannot grow unchecked. The UcxAbiChecker tests show the checks can fail.
 *
 * Build standalone (from the top of the source tree):
 *   g++ -std=c++20 -Wall -Wextra -Ibindings/ucx test/ucx_abi/test_ucx_abi.cc \
 *       -lgtest -lgtest_main -pthread -o /tmp/test_ucx_abi && /tmp/test_ucx_abi
 * UcxAbi.Coverage reads the two source files from $srcdir (set by automake's test driver), from
 * LOOM_SRCDIR if defined (-DLOOM_SRCDIR='"/abs/top/srcdir"'), or through this file's
 * compile-time path (__FILE__, relative to the working directory if it was relative); it fails,
 * saying so, if none holds them (a skipped coverage check would let the header drift).
 */

// UCX's headers come first: some of its names are macros, captured below and then removed so
// that ucx_abi.h, which declares the same names as constants and functions, can be included.
#include <ucm/api/ucm.h>
#include <ucp/api/ucp.h>

#include <cxxabi.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

// --- UCX's macros, as values and functions (real_<NAME>) ---------------------------------

#define CAPTURE(NAME) constexpr auto real_##NAME = (NAME);
CAPTURE(UCS_CPU_SETSIZE)
CAPTURE(UCS_NCPUBITS)
CAPTURE(UCP_VERSION_MAJOR_SHIFT)
CAPTURE(UCP_VERSION_MINOR_SHIFT)
CAPTURE(UCP_API_MAJOR)
CAPTURE(UCP_API_MINOR)
CAPTURE(UCP_API_VERSION)
CAPTURE(UCP_ENTITY_NAME_MAX)
#undef CAPTURE

namespace {
bool real_UCS_IS_LINK_ERROR(int code) {
    return UCS_IS_LINK_ERROR(code);
}
bool real_UCS_IS_ENDPOINT_ERROR(int code) {
    return UCS_IS_ENDPOINT_ERROR(code);
}
bool real_UCS_STATUS_IS_ERR(int status) {
    return UCS_STATUS_IS_ERR(status);
}
bool real_UCS_PTR_IS_ERR(const void* ptr) {
    return UCS_PTR_IS_ERR(ptr);
}
bool real_UCS_PTR_IS_PTR(const void* ptr) {
    return UCS_PTR_IS_PTR(ptr);
}
ucs_status_t real_UCS_PTR_RAW_STATUS(const void* ptr) {
    return UCS_PTR_RAW_STATUS(ptr);
}
ucs_status_t real_UCS_PTR_STATUS(const void* ptr) {
    return UCS_PTR_STATUS(ptr);
}
ucs_status_ptr_t real_UCS_STATUS_PTR(ucs_status_t status) {
    return UCS_STATUS_PTR(status);
}
unsigned real_UCP_VERSION(unsigned major, unsigned minor) {
    return UCP_VERSION(major, minor);
}
ucp_datatype_t real_ucp_dt_make_contig(std::size_t elem_size) {
    return ucp_dt_make_contig(elem_size);
}
ucp_datatype_t real_ucp_dt_make_iov() {
    return ucp_dt_make_iov();
}
}  // namespace

// Every UCX macro ucx_abi.h redeclares; a new one there fails to compile until listed here.
#undef UCS_IS_LINK_ERROR
#undef UCS_IS_ENDPOINT_ERROR
#undef UCS_STATUS_IS_ERR
#undef UCS_PTR_IS_ERR
#undef UCS_PTR_IS_PTR
#undef UCS_PTR_RAW_STATUS
#undef UCS_PTR_STATUS
#undef UCS_STATUS_PTR
#undef UCS_CPU_SETSIZE
#undef UCS_NCPUBITS
#undef UCP_VERSION
#undef UCP_VERSION_MAJOR_SHIFT
#undef UCP_VERSION_MINOR_SHIFT
#undef UCP_API_MAJOR
#undef UCP_API_MINOR
#undef UCP_API_VERSION
#undef UCP_ENTITY_NAME_MAX
#undef ucp_dt_make_contig
#undef ucp_dt_make_iov

#include "ucx_abi.h"

namespace {

// --- Mapping our types onto UCX's -----------------------------------------------------------

/** UCX's type for one of ours: mapped through pointers, const, arrays and function types. */
template <class T>
struct Real {
    using type = T;  // fundamental and system types are shared
};
template <class T>
using real_t = typename Real<T>::type;
template <class T>
struct Real<T*> {
    using type = real_t<T>*;
};
template <class T>
struct Real<const T> {
    using type = const real_t<T>;
};
template <class T, std::size_t N>
struct Real<T[N]> {
    using type = real_t<T>[N];
};
template <class R, class... A>
struct Real<R(A...)> {
    using type = real_t<R>(real_t<A>...);
};

}  // namespace

#define MAP_TYPE(OURS, REAL) \
    template <>              \
    struct Real<OURS> {      \
        using type = REAL;   \
    };
#define MAP(T) MAP_TYPE(loom::ucx::T, ::T)
#define MAP_MEMBER(T, M) MAP_TYPE(decltype(loom::ucx::T::M), decltype(::T::M))

namespace {

// Named enums, structs, unions and opaque structs of ucx_abi.h.
MAP(ucs_status_t)
MAP(ucs_thread_mode_t)
MAP(ucs_cpu_set_t)
MAP(ucs_memory_type_t)
MAP(ucs_sock_addr_t)
MAP(ucs_config_print_flags_t)
MAP(ucp_context)
MAP(ucp_config)
MAP(ucp_worker)
MAP(ucp_ep)
MAP(ucp_conn_request)
MAP(ucp_address)
MAP(ucp_rkey)
MAP(ucp_mem)
MAP(ucp_listener)
MAP(ucp_recv_desc)
MAP(ucp_err_handling_mode_t)
MAP(ucp_mem_attr_field)
MAP(ucp_mem_attr_t)
MAP(ucp_err_handler_t)
MAP(ucp_listener_conn_handler_t)
MAP(ucp_wakeup_event_t)
MAP(ucp_ep_params_t)
MAP(ucp_params_field)
MAP(ucp_feature)
MAP(ucp_worker_params_field)
MAP(ucp_worker_flags_t)
MAP(ucp_listener_params_field)
MAP(ucp_worker_address_flags_t)
MAP(ucp_ep_params_field)
MAP(ucp_ep_params_flags_field)
MAP(ucp_ep_close_flags_t)
MAP(ucp_ep_close_mode)
MAP(ucp_ep_perf_param_field_t)
MAP(ucp_ep_perf_attr_field_t)
MAP(ucp_mem_map_params_field)
MAP(ucp_mem_advise_params_field)
MAP(ucp_lib_attr_field)
MAP(ucp_context_attr_field)
MAP(ucp_worker_attr_field)
MAP(ucp_worker_address_attr_field)
MAP(ucp_listener_attr_field)
MAP(ucp_conn_request_attr_field)
MAP(ucp_dt_type)
MAP(ucp_am_cb_flags)
MAP(ucp_send_am_flags)
MAP(ucp_cb_param_flags)
MAP(ucp_atomic_post_op_t)
MAP(ucp_atomic_fetch_op_t)
MAP(ucp_atomic_op_t)
MAP(ucp_stream_recv_flags_t)
MAP(ucp_op_attr_t)
MAP(ucp_req_attr_field)
MAP(ucp_am_recv_attr_t)
MAP(ucp_am_handler_param_field)
MAP(ucp_ep_attr_field)
MAP(ucp_mem_advice_t)
MAP(ucp_dt_iov_t)
MAP(ucp_generic_dt_ops_t)
MAP(ucp_params_t)
MAP(ucp_lib_attr_t)
MAP(ucp_context_attr_t)
MAP(ucp_worker_attr_t)
MAP(ucp_worker_params_t)
MAP(ucp_worker_address_attr_t)
MAP(ucp_ep_evaluate_perf_param_t)
MAP(ucp_ep_evaluate_perf_attr_t)
MAP(ucp_listener_attr_t)
MAP(ucp_conn_request_attr_t)
MAP(ucp_listener_accept_handler_t)
MAP(ucp_listener_params_t)
MAP(ucp_stream_poll_ep_t)
MAP(ucp_mem_map_params_t)
MAP(ucp_tag_recv_info_t)
MAP(ucp_request_param_t)
MAP(ucp_request_attr_t)
MAP(ucp_am_handler_param_t)
MAP(ucp_am_recv_param_t)
MAP(ucp_mem_advise_params_t)
MAP(ucp_ep_attr_t)
MAP(ucm_event_type_t)
MAP(ucm_event_t)
// Unnamed types: the enums of the memory mapping flags, nested unions and structs.
MAP_TYPE(decltype(loom::ucx::UCP_MEM_MAP_NONBLOCK), decltype(::UCP_MEM_MAP_NONBLOCK))
MAP_TYPE(decltype(loom::ucx::UCP_MEM_MAP_PROT_LOCAL_READ), decltype(::UCP_MEM_MAP_PROT_LOCAL_READ))
MAP_MEMBER(ucp_request_param_t, cb)
MAP_MEMBER(ucp_request_param_t, recv_info)
MAP_MEMBER(ucm_event_t, mmap)
MAP_MEMBER(ucm_event_t, munmap)
MAP_MEMBER(ucm_event_t, mremap)
MAP_MEMBER(ucm_event_t, shmat)
MAP_MEMBER(ucm_event_t, shmdt)
MAP_MEMBER(ucm_event_t, sbrk)
MAP_MEMBER(ucm_event_t, madvise)
MAP_MEMBER(ucm_event_t, brk)
MAP_MEMBER(ucm_event_t, vm_mapped)  // vm_unmapped has the same type, in UCX and here
MAP_MEMBER(ucm_event_t, mem_type)

// --- The checks -----------------------------------------------------------------------------

/** Number of comparisons made, printed at the end. */
int g_checks = 0;

/** A type's name for failure messages (through type_identity: T may be incomplete). */
template <class T>
std::string type_name() {
    const char* mangled = typeid(std::type_identity<T>).name();
    int status = 0;
    char* s = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    std::string name = s != nullptr ? s : mangled;
    std::free(s);
    const std::string prefix = "std::type_identity<";
    if (name.rfind(prefix, 0) == 0 && name.back() == '>')
        name = name.substr(prefix.size(), name.size() - prefix.size() - 1);
    return name;
}

/** A value of any integral, enum or pointer type, as one integer type for EXPECT_EQ. */
template <class T>
long long as_int(T v) {
    if constexpr (std::is_pointer_v<T>) {
        return static_cast<long long>(reinterpret_cast<std::intptr_t>(v));
    } else {
        return static_cast<long long>(v);
    }
}

template <class T, class = void>
struct IsComplete : std::false_type {};
template <class T>
struct IsComplete<T, std::void_t<decltype(sizeof(T))>> : std::true_type {};

/** A status code that converts to both ucs_status_t types (for the helpers' arguments). */
struct AnyStatus {
    int v;
    operator loom::ucx::ucs_status_t() const { return static_cast<loom::ucx::ucs_status_t>(v); }
    operator ::ucs_status_t() const { return static_cast<::ucs_status_t>(v); }
};

}  // namespace

// The CHECK_* macros compare OURS::X with REAL::X (REAL empty: the global, UCX's). Each one
// names what it checks; UcxAbi.Coverage reads those names from this file.

#define EXPECT_SAME_TYPE(OURS_T, REAL_T, WHAT)            \
    EXPECT_TRUE((std::is_same_v<real_t<OURS_T>, REAL_T>)) \
        << WHAT ": ours maps to " << type_name<real_t<OURS_T>>() << ", UCX has " << type_name<REAL_T>()

#define CHECK_ENUM_IN(OURS, REAL, X)                                                           \
    do {                                                                                       \
        g_checks += 3;                                                                         \
        EXPECT_EQ(as_int(OURS::X), as_int(REAL::X)) << "value of " #X;                         \
        EXPECT_SAME_TYPE(decltype(OURS::X), decltype(REAL::X), "enum type of " #X);            \
        EXPECT_SAME_TYPE(std::underlying_type_t<decltype(OURS::X)>,                            \
                         std::underlying_type_t<decltype(REAL::X)>, "underlying type of " #X); \
    } while (0)
#define CHECK_ENUM(X) CHECK_ENUM_IN(loom::ucx, , X)

#define CHECK_ENUM_TYPE(T)                                                                  \
    do {                                                                                    \
        g_checks += 3;                                                                      \
        EXPECT_EQ(sizeof(loom::ucx::T), sizeof(::T)) << "sizeof(" #T ")";                   \
        EXPECT_EQ(alignof(loom::ucx::T), alignof(::T)) << "alignof(" #T ")";                \
        EXPECT_SAME_TYPE(std::underlying_type_t<loom::ucx::T>, std::underlying_type_t<::T>, \
                         "underlying type of " #T);                                         \
    } while (0)

#define CHECK_STRUCT_IN(OURS, REAL, T)                                                          \
    do {                                                                                        \
        g_checks += 3;                                                                          \
        EXPECT_EQ(sizeof(OURS::T), sizeof(REAL::T)) << "sizeof(" #T ")";                        \
        EXPECT_EQ(alignof(OURS::T), alignof(REAL::T)) << "alignof(" #T ")";                     \
        EXPECT_TRUE(std::is_standard_layout_v<OURS::T>&& std::is_trivially_copyable_v<OURS::T>) \
            << #T " must be a plain C layout";                                                  \
    } while (0)
#define CHECK_STRUCT(T) CHECK_STRUCT_IN(loom::ucx, , T)

#define CHECK_FIELD_IN(OURS, REAL, T, F)                                                     \
    do {                                                                                     \
        using Ours_ = decltype(std::declval<OURS::T&>().F);                                  \
        using Real_ = decltype(std::declval<REAL::T&>().F);                                  \
        g_checks += 4;                                                                       \
        EXPECT_EQ(offsetof(OURS::T, F), offsetof(REAL::T, F)) << "offsetof(" #T ", " #F ")"; \
        EXPECT_EQ(sizeof(Ours_), sizeof(Real_)) << "sizeof(" #T "." #F ")";                  \
        EXPECT_EQ(alignof(Ours_), alignof(Real_)) << "alignof(" #T "." #F ")";               \
        EXPECT_SAME_TYPE(Ours_, Real_, "type of " #T "." #F);                                \
    } while (0)
#define CHECK_FIELD(T, F) CHECK_FIELD_IN(loom::ucx, , T, F)

#define CHECK_ALIAS(T)                           \
    do {                                         \
        g_checks += 1;                           \
        EXPECT_SAME_TYPE(loom::ucx::T, ::T, #T); \
    } while (0)

#define CHECK_OPAQUE(T)                                                           \
    do {                                                                          \
        g_checks += 2;                                                            \
        EXPECT_FALSE(IsComplete<loom::ucx::T>::value) << #T " is opaque in UCX";  \
        EXPECT_FALSE(IsComplete<::T>::value) << #T " is no longer opaque in UCX"; \
    } while (0)

#define CHECK_CONST(X)                                                       \
    do {                                                                     \
        g_checks += 1;                                                       \
        EXPECT_EQ(as_int(loom::ucx::X), as_int(real_##X)) << "value of " #X; \
    } while (0)

#define CHECK_PROTO_IN(OURS_FN, REAL_FN, NAME)                                           \
    do {                                                                                 \
        g_checks += 1;                                                                   \
        EXPECT_SAME_TYPE(std::remove_pointer_t<OURS_FN>, REAL_FN, "prototype of " NAME); \
    } while (0)
#define CHECK_PROTO(F) CHECK_PROTO_IN(loom::ucx::F##_fn, decltype(::F), #F)

#define CHECK_FN(F, ...)                                                            \
    do {                                                                            \
        g_checks += 1;                                                              \
        EXPECT_EQ(as_int(loom::ucx::F(__VA_ARGS__)), as_int(real_##F(__VA_ARGS__))) \
            << #F "(" #__VA_ARGS__ ")";                                             \
    } while (0)

namespace {

/** Prints the number of comparisons once every test ran. */
class CheckCount : public ::testing::Environment {
public:
    void TearDown() override {
        std::printf("[ ucx_abi  ] %d comparisons with UCX 1.13's headers\n", g_checks);
    }
};
[[maybe_unused]] ::testing::Environment* const g_check_count =
    ::testing::AddGlobalTestEnvironment(new CheckCount);

/** Status codes to feed the helpers: every code and the edges of the error range. */
std::vector<int> status_samples() {
    std::vector<int> v;
    for (int i = -128; i <= 2; ++i) v.push_back(i);
    return v;
}

/** Status pointers to feed the helpers: NULL, statuses, small, large and real pointers. */
std::vector<const void*> pointer_samples() {
    static const int object = 0;
    std::vector<const void*> v = {nullptr, &object, reinterpret_cast<const void*>(0x1000),
                                  reinterpret_cast<const void*>(UINTPTR_MAX / 2),
                                  reinterpret_cast<const void*>(UINTPTR_MAX)};
    for (int s : status_samples()) v.push_back(reinterpret_cast<const void*>(static_cast<std::intptr_t>(s)));
    return v;
}

}  // namespace

// --- Values, layouts and prototypes, one test per family ------------------------------------

TEST(UcxAbi, Status) {
    CHECK_ENUM_TYPE(ucs_status_t);
    CHECK_ENUM(UCS_OK);
    CHECK_ENUM(UCS_INPROGRESS);
    CHECK_ENUM(UCS_ERR_NO_MESSAGE);
    CHECK_ENUM(UCS_ERR_NO_RESOURCE);
    CHECK_ENUM(UCS_ERR_IO_ERROR);
    CHECK_ENUM(UCS_ERR_NO_MEMORY);
    CHECK_ENUM(UCS_ERR_INVALID_PARAM);
    CHECK_ENUM(UCS_ERR_UNREACHABLE);
    CHECK_ENUM(UCS_ERR_INVALID_ADDR);
    CHECK_ENUM(UCS_ERR_NOT_IMPLEMENTED);
    CHECK_ENUM(UCS_ERR_MESSAGE_TRUNCATED);
    CHECK_ENUM(UCS_ERR_NO_PROGRESS);
    CHECK_ENUM(UCS_ERR_BUFFER_TOO_SMALL);
    CHECK_ENUM(UCS_ERR_NO_ELEM);
    CHECK_ENUM(UCS_ERR_SOME_CONNECTS_FAILED);
    CHECK_ENUM(UCS_ERR_NO_DEVICE);
    CHECK_ENUM(UCS_ERR_BUSY);
    CHECK_ENUM(UCS_ERR_CANCELED);
    CHECK_ENUM(UCS_ERR_SHMEM_SEGMENT);
    CHECK_ENUM(UCS_ERR_ALREADY_EXISTS);
    CHECK_ENUM(UCS_ERR_OUT_OF_RANGE);
    CHECK_ENUM(UCS_ERR_TIMED_OUT);
    CHECK_ENUM(UCS_ERR_EXCEEDS_LIMIT);
    CHECK_ENUM(UCS_ERR_UNSUPPORTED);
    CHECK_ENUM(UCS_ERR_REJECTED);
    CHECK_ENUM(UCS_ERR_NOT_CONNECTED);
    CHECK_ENUM(UCS_ERR_CONNECTION_RESET);
    CHECK_ENUM(UCS_ERR_FIRST_LINK_FAILURE);
    CHECK_ENUM(UCS_ERR_LAST_LINK_FAILURE);
    CHECK_ENUM(UCS_ERR_FIRST_ENDPOINT_FAILURE);
    CHECK_ENUM(UCS_ERR_ENDPOINT_TIMEOUT);
    CHECK_ENUM(UCS_ERR_LAST_ENDPOINT_FAILURE);
    CHECK_ENUM(UCS_ERR_LAST);
    CHECK_ALIAS(ucs_status_ptr_t);
    for (int s : status_samples()) {
        CHECK_FN(UCS_IS_LINK_ERROR, s);
        CHECK_FN(UCS_IS_ENDPOINT_ERROR, s);
        CHECK_FN(UCS_STATUS_IS_ERR, s);
        CHECK_FN(UCS_STATUS_PTR, AnyStatus{s});
    }
    for (const void* p : pointer_samples()) {
        CHECK_FN(UCS_PTR_IS_ERR, p);
        CHECK_FN(UCS_PTR_IS_PTR, p);
        CHECK_FN(UCS_PTR_RAW_STATUS, p);
        CHECK_FN(UCS_PTR_STATUS, p);
    }
}

TEST(UcxAbi, UcsTypes) {
    CHECK_ENUM_TYPE(ucs_thread_mode_t);
    CHECK_ENUM(UCS_THREAD_MODE_SINGLE);
    CHECK_ENUM(UCS_THREAD_MODE_SERIALIZED);
    CHECK_ENUM(UCS_THREAD_MODE_MULTI);
    CHECK_ENUM(UCS_THREAD_MODE_LAST);
    CHECK_ALIAS(ucs_cpu_mask_t);
    CHECK_CONST(UCS_CPU_SETSIZE);
    CHECK_CONST(UCS_NCPUBITS);
    CHECK_STRUCT(ucs_cpu_set_t);
    CHECK_FIELD(ucs_cpu_set_t, ucs_bits);
    CHECK_ENUM_TYPE(ucs_memory_type_t);
    CHECK_ENUM(UCS_MEMORY_TYPE_HOST);
    CHECK_ENUM(UCS_MEMORY_TYPE_CUDA);
    CHECK_ENUM(UCS_MEMORY_TYPE_CUDA_MANAGED);
    CHECK_ENUM(UCS_MEMORY_TYPE_ROCM);
    CHECK_ENUM(UCS_MEMORY_TYPE_ROCM_MANAGED);
    CHECK_ENUM(UCS_MEMORY_TYPE_LAST);
    CHECK_ENUM(UCS_MEMORY_TYPE_UNKNOWN);
    CHECK_STRUCT(ucs_sock_addr_t);
    CHECK_FIELD(ucs_sock_addr_t, addr);
    CHECK_FIELD(ucs_sock_addr_t, addrlen);
    CHECK_ENUM_TYPE(ucs_config_print_flags_t);
    CHECK_ENUM(UCS_CONFIG_PRINT_CONFIG);
    CHECK_ENUM(UCS_CONFIG_PRINT_HEADER);
    CHECK_ENUM(UCS_CONFIG_PRINT_DOC);
    CHECK_ENUM(UCS_CONFIG_PRINT_HIDDEN);
    CHECK_ENUM(UCS_CONFIG_PRINT_COMMENT_DEFAULT);
}

TEST(UcxAbi, Version) {
    CHECK_CONST(UCP_VERSION_MAJOR_SHIFT);
    CHECK_CONST(UCP_VERSION_MINOR_SHIFT);
    CHECK_CONST(UCP_API_MAJOR);
    CHECK_CONST(UCP_API_MINOR);
    CHECK_CONST(UCP_API_VERSION);
    CHECK_CONST(UCP_ENTITY_NAME_MAX);
    for (unsigned major : {0u, 1u, 2u, 255u}) {
        for (unsigned minor : {0u, 13u, 14u, 255u}) CHECK_FN(UCP_VERSION, major, minor);
    }
    static_assert(loom::ucx::UCP_API_VERSION == loom::ucx::UCP_VERSION(1, 13));
}

TEST(UcxAbi, Handles) {
    CHECK_OPAQUE(ucp_context);
    CHECK_ALIAS(ucp_context_h);
    CHECK_OPAQUE(ucp_config);
    CHECK_ALIAS(ucp_config_t);
    CHECK_OPAQUE(ucp_worker);
    CHECK_ALIAS(ucp_worker_h);
    CHECK_OPAQUE(ucp_ep);
    CHECK_ALIAS(ucp_ep_h);
    CHECK_OPAQUE(ucp_conn_request);
    CHECK_ALIAS(ucp_conn_request_h);
    CHECK_OPAQUE(ucp_address);
    CHECK_ALIAS(ucp_address_t);
    CHECK_OPAQUE(ucp_rkey);
    CHECK_ALIAS(ucp_rkey_h);
    CHECK_OPAQUE(ucp_mem);
    CHECK_ALIAS(ucp_mem_h);
    CHECK_OPAQUE(ucp_listener);
    CHECK_ALIAS(ucp_listener_h);
    CHECK_OPAQUE(ucp_recv_desc);
    CHECK_ALIAS(ucp_tag_message_h);
}

TEST(UcxAbi, Callbacks) {
    CHECK_ALIAS(ucp_request_init_callback_t);
    CHECK_ALIAS(ucp_request_cleanup_callback_t);
    CHECK_ALIAS(ucp_send_callback_t);
    CHECK_ALIAS(ucp_send_nbx_callback_t);
    CHECK_ALIAS(ucp_err_handler_cb_t);
    CHECK_ALIAS(ucp_listener_accept_callback_t);
    CHECK_ALIAS(ucp_listener_conn_callback_t);
    CHECK_ALIAS(ucp_stream_recv_callback_t);
    CHECK_ALIAS(ucp_stream_recv_nbx_callback_t);
    CHECK_ALIAS(ucp_tag_recv_callback_t);
    CHECK_ALIAS(ucp_tag_recv_nbx_callback_t);
    CHECK_ALIAS(ucp_am_recv_data_nbx_callback_t);
    CHECK_ALIAS(ucp_am_callback_t);
    CHECK_ALIAS(ucp_am_recv_callback_t);
    CHECK_ALIAS(ucm_event_callback_t);
}

TEST(UcxAbi, Datatypes) {
    CHECK_ALIAS(ucp_tag_t);
    CHECK_ALIAS(ucp_datatype_t);
    CHECK_ENUM_TYPE(ucp_dt_type);
    CHECK_ENUM(UCP_DATATYPE_CONTIG);
    CHECK_ENUM(UCP_DATATYPE_STRIDED);
    CHECK_ENUM(UCP_DATATYPE_IOV);
    CHECK_ENUM(UCP_DATATYPE_GENERIC);
    CHECK_ENUM(UCP_DATATYPE_SHIFT);
    CHECK_ENUM(UCP_DATATYPE_CLASS_MASK);
    CHECK_STRUCT(ucp_dt_iov_t);
    CHECK_FIELD(ucp_dt_iov_t, buffer);
    CHECK_FIELD(ucp_dt_iov_t, length);
    CHECK_STRUCT(ucp_generic_dt_ops_t);
    CHECK_FIELD(ucp_generic_dt_ops_t, start_pack);
    CHECK_FIELD(ucp_generic_dt_ops_t, start_unpack);
    CHECK_FIELD(ucp_generic_dt_ops_t, packed_size);
    CHECK_FIELD(ucp_generic_dt_ops_t, pack);
    CHECK_FIELD(ucp_generic_dt_ops_t, unpack);
    CHECK_FIELD(ucp_generic_dt_ops_t, finish);
    for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{4}, std::size_t{8},
                             std::size_t{16}, std::size_t{4096}, std::size_t{1} << 40}) {
        CHECK_FN(ucp_dt_make_contig, size);
    }
    CHECK_FN(ucp_dt_make_iov);
    static_assert(loom::ucx::ucp_dt_make_contig(1) == 8, "a byte datatype is 1 << UCP_DATATYPE_SHIFT");
}

TEST(UcxAbi, Context) {
    CHECK_ENUM_TYPE(ucp_params_field);
    CHECK_ENUM(UCP_PARAM_FIELD_FEATURES);
    CHECK_ENUM(UCP_PARAM_FIELD_REQUEST_SIZE);
    CHECK_ENUM(UCP_PARAM_FIELD_REQUEST_INIT);
    CHECK_ENUM(UCP_PARAM_FIELD_REQUEST_CLEANUP);
    CHECK_ENUM(UCP_PARAM_FIELD_TAG_SENDER_MASK);
    CHECK_ENUM(UCP_PARAM_FIELD_MT_WORKERS_SHARED);
    CHECK_ENUM(UCP_PARAM_FIELD_ESTIMATED_NUM_EPS);
    CHECK_ENUM(UCP_PARAM_FIELD_ESTIMATED_NUM_PPN);
    CHECK_ENUM(UCP_PARAM_FIELD_NAME);
    CHECK_ENUM_TYPE(ucp_feature);
    CHECK_ENUM(UCP_FEATURE_TAG);
    CHECK_ENUM(UCP_FEATURE_RMA);
    CHECK_ENUM(UCP_FEATURE_AMO32);
    CHECK_ENUM(UCP_FEATURE_AMO64);
    CHECK_ENUM(UCP_FEATURE_WAKEUP);
    CHECK_ENUM(UCP_FEATURE_STREAM);
    CHECK_ENUM(UCP_FEATURE_AM);
    CHECK_STRUCT(ucp_params_t);
    CHECK_FIELD(ucp_params_t, field_mask);
    CHECK_FIELD(ucp_params_t, features);
    CHECK_FIELD(ucp_params_t, request_size);
    CHECK_FIELD(ucp_params_t, request_init);
    CHECK_FIELD(ucp_params_t, request_cleanup);
    CHECK_FIELD(ucp_params_t, tag_sender_mask);
    CHECK_FIELD(ucp_params_t, mt_workers_shared);
    CHECK_FIELD(ucp_params_t, estimated_num_eps);
    CHECK_FIELD(ucp_params_t, estimated_num_ppn);
    CHECK_FIELD(ucp_params_t, name);
    CHECK_ENUM_TYPE(ucp_context_attr_field);
    CHECK_ENUM(UCP_ATTR_FIELD_REQUEST_SIZE);
    CHECK_ENUM(UCP_ATTR_FIELD_THREAD_MODE);
    CHECK_ENUM(UCP_ATTR_FIELD_MEMORY_TYPES);
    CHECK_ENUM(UCP_ATTR_FIELD_NAME);
    CHECK_STRUCT(ucp_context_attr_t);
    CHECK_FIELD(ucp_context_attr_t, field_mask);
    CHECK_FIELD(ucp_context_attr_t, request_size);
    CHECK_FIELD(ucp_context_attr_t, thread_mode);
    CHECK_FIELD(ucp_context_attr_t, memory_types);
    CHECK_FIELD(ucp_context_attr_t, name);
    CHECK_ENUM_TYPE(ucp_lib_attr_field);
    CHECK_ENUM(UCP_LIB_ATTR_FIELD_MAX_THREAD_LEVEL);
    CHECK_STRUCT(ucp_lib_attr_t);
    CHECK_FIELD(ucp_lib_attr_t, field_mask);
    CHECK_FIELD(ucp_lib_attr_t, max_thread_level);
}

TEST(UcxAbi, Worker) {
    CHECK_ENUM_TYPE(ucp_worker_params_field);
    CHECK_ENUM(UCP_WORKER_PARAM_FIELD_THREAD_MODE);
    CHECK_ENUM(UCP_WORKER_PARAM_FIELD_CPU_MASK);
    CHECK_ENUM(UCP_WORKER_PARAM_FIELD_EVENTS);
    CHECK_ENUM(UCP_WORKER_PARAM_FIELD_USER_DATA);
    CHECK_ENUM(UCP_WORKER_PARAM_FIELD_EVENT_FD);
    CHECK_ENUM(UCP_WORKER_PARAM_FIELD_FLAGS);
    CHECK_ENUM(UCP_WORKER_PARAM_FIELD_NAME);
    CHECK_ENUM(UCP_WORKER_PARAM_FIELD_AM_ALIGNMENT);
    CHECK_ENUM(UCP_WORKER_PARAM_FIELD_CLIENT_ID);
    CHECK_ENUM_TYPE(ucp_worker_flags_t);
    CHECK_ENUM(UCP_WORKER_FLAG_IGNORE_REQUEST_LEAK);
    CHECK_ENUM_TYPE(ucp_wakeup_event_t);
    CHECK_ENUM(UCP_WAKEUP_RMA);
    CHECK_ENUM(UCP_WAKEUP_AMO);
    CHECK_ENUM(UCP_WAKEUP_TAG_SEND);
    CHECK_ENUM(UCP_WAKEUP_TAG_RECV);
    CHECK_ENUM(UCP_WAKEUP_TX);
    CHECK_ENUM(UCP_WAKEUP_RX);
    CHECK_ENUM(UCP_WAKEUP_EDGE);
    CHECK_STRUCT(ucp_worker_params_t);
    CHECK_FIELD(ucp_worker_params_t, field_mask);
    CHECK_FIELD(ucp_worker_params_t, thread_mode);
    CHECK_FIELD(ucp_worker_params_t, cpu_mask);
    CHECK_FIELD(ucp_worker_params_t, events);
    CHECK_FIELD(ucp_worker_params_t, user_data);
    CHECK_FIELD(ucp_worker_params_t, event_fd);
    CHECK_FIELD(ucp_worker_params_t, flags);
    CHECK_FIELD(ucp_worker_params_t, name);
    CHECK_FIELD(ucp_worker_params_t, am_alignment);
    CHECK_FIELD(ucp_worker_params_t, client_id);
    CHECK_ENUM_TYPE(ucp_worker_attr_field);
    CHECK_ENUM(UCP_WORKER_ATTR_FIELD_THREAD_MODE);
    CHECK_ENUM(UCP_WORKER_ATTR_FIELD_ADDRESS);
    CHECK_ENUM(UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS);
    CHECK_ENUM(UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER);
    CHECK_ENUM(UCP_WORKER_ATTR_FIELD_NAME);
    CHECK_ENUM(UCP_WORKER_ATTR_FIELD_MAX_INFO_STRING);
    CHECK_ENUM_TYPE(ucp_worker_address_flags_t);
    CHECK_ENUM(UCP_WORKER_ADDRESS_FLAG_NET_ONLY);
    CHECK_STRUCT(ucp_worker_attr_t);
    CHECK_FIELD(ucp_worker_attr_t, field_mask);
    CHECK_FIELD(ucp_worker_attr_t, thread_mode);
    CHECK_FIELD(ucp_worker_attr_t, address_flags);
    CHECK_FIELD(ucp_worker_attr_t, address);
    CHECK_FIELD(ucp_worker_attr_t, address_length);
    CHECK_FIELD(ucp_worker_attr_t, max_am_header);
    CHECK_FIELD(ucp_worker_attr_t, name);
    CHECK_FIELD(ucp_worker_attr_t, max_debug_string);
    CHECK_ENUM_TYPE(ucp_worker_address_attr_field);
    CHECK_ENUM(UCP_WORKER_ADDRESS_ATTR_FIELD_UID);
    CHECK_STRUCT(ucp_worker_address_attr_t);
    CHECK_FIELD(ucp_worker_address_attr_t, field_mask);
    CHECK_FIELD(ucp_worker_address_attr_t, worker_uid);
}

TEST(UcxAbi, Endpoint) {
    CHECK_ENUM_TYPE(ucp_err_handling_mode_t);
    CHECK_ENUM(UCP_ERR_HANDLING_MODE_NONE);
    CHECK_ENUM(UCP_ERR_HANDLING_MODE_PEER);
    CHECK_STRUCT(ucp_err_handler_t);
    CHECK_FIELD(ucp_err_handler_t, cb);
    CHECK_FIELD(ucp_err_handler_t, arg);
    CHECK_ENUM_TYPE(ucp_ep_params_field);
    CHECK_ENUM(UCP_EP_PARAM_FIELD_REMOTE_ADDRESS);
    CHECK_ENUM(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE);
    CHECK_ENUM(UCP_EP_PARAM_FIELD_ERR_HANDLER);
    CHECK_ENUM(UCP_EP_PARAM_FIELD_USER_DATA);
    CHECK_ENUM(UCP_EP_PARAM_FIELD_SOCK_ADDR);
    CHECK_ENUM(UCP_EP_PARAM_FIELD_FLAGS);
    CHECK_ENUM(UCP_EP_PARAM_FIELD_CONN_REQUEST);
    CHECK_ENUM(UCP_EP_PARAM_FIELD_NAME);
    CHECK_ENUM(UCP_EP_PARAM_FIELD_LOCAL_SOCK_ADDR);
    CHECK_ENUM_TYPE(ucp_ep_params_flags_field);
    CHECK_ENUM(UCP_EP_PARAMS_FLAGS_CLIENT_SERVER);
    CHECK_ENUM(UCP_EP_PARAMS_FLAGS_NO_LOOPBACK);
    CHECK_ENUM(UCP_EP_PARAMS_FLAGS_SEND_CLIENT_ID);
    CHECK_STRUCT(ucp_ep_params_t);
    CHECK_FIELD(ucp_ep_params_t, field_mask);
    CHECK_FIELD(ucp_ep_params_t, address);
    CHECK_FIELD(ucp_ep_params_t, err_mode);
    CHECK_FIELD(ucp_ep_params_t, err_handler);
    CHECK_FIELD(ucp_ep_params_t, user_data);
    CHECK_FIELD(ucp_ep_params_t, flags);
    CHECK_FIELD(ucp_ep_params_t, sockaddr);
    CHECK_FIELD(ucp_ep_params_t, conn_request);
    CHECK_FIELD(ucp_ep_params_t, name);
    CHECK_FIELD(ucp_ep_params_t, local_sockaddr);
    CHECK_ENUM_TYPE(ucp_ep_close_flags_t);
    CHECK_ENUM(UCP_EP_CLOSE_FLAG_FORCE);
    CHECK_ENUM_TYPE(ucp_ep_close_mode);
    CHECK_ENUM(UCP_EP_CLOSE_MODE_FORCE);
    CHECK_ENUM(UCP_EP_CLOSE_MODE_FLUSH);
    CHECK_ENUM_TYPE(ucp_ep_attr_field);
    CHECK_ENUM(UCP_EP_ATTR_FIELD_NAME);
    CHECK_ENUM(UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR);
    CHECK_ENUM(UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR);
    CHECK_STRUCT(ucp_ep_attr_t);
    CHECK_FIELD(ucp_ep_attr_t, field_mask);
    CHECK_FIELD(ucp_ep_attr_t, name);
    CHECK_FIELD(ucp_ep_attr_t, local_sockaddr);
    CHECK_FIELD(ucp_ep_attr_t, remote_sockaddr);
    CHECK_ENUM_TYPE(ucp_ep_perf_param_field_t);
    CHECK_ENUM(UCP_EP_PERF_PARAM_FIELD_MESSAGE_SIZE);
    CHECK_ENUM_TYPE(ucp_ep_perf_attr_field_t);
    CHECK_ENUM(UCP_EP_PERF_ATTR_FIELD_ESTIMATED_TIME);
    CHECK_STRUCT(ucp_ep_evaluate_perf_param_t);
    CHECK_FIELD(ucp_ep_evaluate_perf_param_t, field_mask);
    CHECK_FIELD(ucp_ep_evaluate_perf_param_t, message_size);
    CHECK_STRUCT(ucp_ep_evaluate_perf_attr_t);
    CHECK_FIELD(ucp_ep_evaluate_perf_attr_t, field_mask);
    CHECK_FIELD(ucp_ep_evaluate_perf_attr_t, estimated_time);
}

TEST(UcxAbi, Listener) {
    CHECK_ENUM_TYPE(ucp_listener_params_field);
    CHECK_ENUM(UCP_LISTENER_PARAM_FIELD_SOCK_ADDR);
    CHECK_ENUM(UCP_LISTENER_PARAM_FIELD_ACCEPT_HANDLER);
    CHECK_ENUM(UCP_LISTENER_PARAM_FIELD_CONN_HANDLER);
    CHECK_ENUM_TYPE(ucp_listener_attr_field);
    CHECK_ENUM(UCP_LISTENER_ATTR_FIELD_SOCKADDR);
    CHECK_ENUM_TYPE(ucp_conn_request_attr_field);
    CHECK_ENUM(UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR);
    CHECK_ENUM(UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ID);
    CHECK_STRUCT(ucp_listener_conn_handler_t);
    CHECK_FIELD(ucp_listener_conn_handler_t, cb);
    CHECK_FIELD(ucp_listener_conn_handler_t, arg);
    CHECK_STRUCT(ucp_listener_accept_handler_t);
    CHECK_FIELD(ucp_listener_accept_handler_t, cb);
    CHECK_FIELD(ucp_listener_accept_handler_t, arg);
    CHECK_STRUCT(ucp_listener_params_t);
    CHECK_FIELD(ucp_listener_params_t, field_mask);
    CHECK_FIELD(ucp_listener_params_t, sockaddr);
    CHECK_FIELD(ucp_listener_params_t, accept_handler);
    CHECK_FIELD(ucp_listener_params_t, conn_handler);
    CHECK_STRUCT(ucp_listener_attr_t);
    CHECK_FIELD(ucp_listener_attr_t, field_mask);
    CHECK_FIELD(ucp_listener_attr_t, sockaddr);
    CHECK_STRUCT(ucp_conn_request_attr_t);
    CHECK_FIELD(ucp_conn_request_attr_t, field_mask);
    CHECK_FIELD(ucp_conn_request_attr_t, client_address);
    CHECK_FIELD(ucp_conn_request_attr_t, client_id);
}

TEST(UcxAbi, RequestParam) {
    CHECK_ENUM_TYPE(ucp_op_attr_t);
    CHECK_ENUM(UCP_OP_ATTR_FIELD_REQUEST);
    CHECK_ENUM(UCP_OP_ATTR_FIELD_CALLBACK);
    CHECK_ENUM(UCP_OP_ATTR_FIELD_USER_DATA);
    CHECK_ENUM(UCP_OP_ATTR_FIELD_DATATYPE);
    CHECK_ENUM(UCP_OP_ATTR_FIELD_FLAGS);
    CHECK_ENUM(UCP_OP_ATTR_FIELD_REPLY_BUFFER);
    CHECK_ENUM(UCP_OP_ATTR_FIELD_MEMORY_TYPE);
    CHECK_ENUM(UCP_OP_ATTR_FIELD_RECV_INFO);
    CHECK_ENUM(UCP_OP_ATTR_FIELD_MEMH);
    CHECK_ENUM(UCP_OP_ATTR_FLAG_NO_IMM_CMPL);
    CHECK_ENUM(UCP_OP_ATTR_FLAG_FAST_CMPL);
    CHECK_ENUM(UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL);
    CHECK_ENUM(UCP_OP_ATTR_FLAG_MULTI_SEND);
    CHECK_STRUCT(ucp_request_param_t);
    CHECK_FIELD(ucp_request_param_t, op_attr_mask);
    CHECK_FIELD(ucp_request_param_t, flags);
    CHECK_FIELD(ucp_request_param_t, request);
    CHECK_FIELD(ucp_request_param_t, cb);
    CHECK_FIELD(ucp_request_param_t, cb.send);
    CHECK_FIELD(ucp_request_param_t, cb.recv);
    CHECK_FIELD(ucp_request_param_t, cb.recv_stream);
    CHECK_FIELD(ucp_request_param_t, cb.recv_am);
    CHECK_FIELD(ucp_request_param_t, datatype);
    CHECK_FIELD(ucp_request_param_t, user_data);
    CHECK_FIELD(ucp_request_param_t, reply_buffer);
    CHECK_FIELD(ucp_request_param_t, memory_type);
    CHECK_FIELD(ucp_request_param_t, recv_info);
    CHECK_FIELD(ucp_request_param_t, recv_info.length);
    CHECK_FIELD(ucp_request_param_t, recv_info.tag_info);
    CHECK_FIELD(ucp_request_param_t, memh);
    CHECK_STRUCT(ucp_tag_recv_info_t);
    CHECK_FIELD(ucp_tag_recv_info_t, sender_tag);
    CHECK_FIELD(ucp_tag_recv_info_t, length);
    CHECK_ENUM_TYPE(ucp_req_attr_field);
    CHECK_ENUM(UCP_REQUEST_ATTR_FIELD_INFO_STRING);
    CHECK_ENUM(UCP_REQUEST_ATTR_FIELD_INFO_STRING_SIZE);
    CHECK_ENUM(UCP_REQUEST_ATTR_FIELD_STATUS);
    CHECK_ENUM(UCP_REQUEST_ATTR_FIELD_MEM_TYPE);
    CHECK_STRUCT(ucp_request_attr_t);
    CHECK_FIELD(ucp_request_attr_t, field_mask);
    CHECK_FIELD(ucp_request_attr_t, debug_string);
    CHECK_FIELD(ucp_request_attr_t, debug_string_size);
    CHECK_FIELD(ucp_request_attr_t, status);
    CHECK_FIELD(ucp_request_attr_t, mem_type);
}

TEST(UcxAbi, ActiveMessages) {
    CHECK_ENUM_TYPE(ucp_am_cb_flags);
    CHECK_ENUM(UCP_AM_FLAG_WHOLE_MSG);
    CHECK_ENUM(UCP_AM_FLAG_PERSISTENT_DATA);
    CHECK_ENUM_TYPE(ucp_send_am_flags);
    CHECK_ENUM(UCP_AM_SEND_FLAG_REPLY);
    CHECK_ENUM(UCP_AM_SEND_FLAG_EAGER);
    CHECK_ENUM(UCP_AM_SEND_FLAG_RNDV);
    CHECK_ENUM(UCP_AM_SEND_REPLY);
    CHECK_ENUM_TYPE(ucp_cb_param_flags);
    CHECK_ENUM(UCP_CB_PARAM_FLAG_DATA);
    CHECK_ENUM_TYPE(ucp_am_recv_attr_t);
    CHECK_ENUM(UCP_AM_RECV_ATTR_FIELD_REPLY_EP);
    CHECK_ENUM(UCP_AM_RECV_ATTR_FLAG_DATA);
    CHECK_ENUM(UCP_AM_RECV_ATTR_FLAG_RNDV);
    CHECK_ENUM_TYPE(ucp_am_handler_param_field);
    CHECK_ENUM(UCP_AM_HANDLER_PARAM_FIELD_ID);
    CHECK_ENUM(UCP_AM_HANDLER_PARAM_FIELD_FLAGS);
    CHECK_ENUM(UCP_AM_HANDLER_PARAM_FIELD_CB);
    CHECK_ENUM(UCP_AM_HANDLER_PARAM_FIELD_ARG);
    CHECK_STRUCT(ucp_am_handler_param_t);
    CHECK_FIELD(ucp_am_handler_param_t, field_mask);
    CHECK_FIELD(ucp_am_handler_param_t, id);
    CHECK_FIELD(ucp_am_handler_param_t, flags);
    CHECK_FIELD(ucp_am_handler_param_t, cb);
    CHECK_FIELD(ucp_am_handler_param_t, arg);
    CHECK_STRUCT(ucp_am_recv_param_t);
    CHECK_FIELD(ucp_am_recv_param_t, recv_attr);
    CHECK_FIELD(ucp_am_recv_param_t, reply_ep);
}

TEST(UcxAbi, Stream) {
    CHECK_ENUM_TYPE(ucp_stream_recv_flags_t);
    CHECK_ENUM(UCP_STREAM_RECV_FLAG_WAITALL);
    CHECK_STRUCT(ucp_stream_poll_ep_t);
    CHECK_FIELD(ucp_stream_poll_ep_t, ep);
    CHECK_FIELD(ucp_stream_poll_ep_t, user_data);
    CHECK_FIELD(ucp_stream_poll_ep_t, flags);
    CHECK_FIELD(ucp_stream_poll_ep_t, reserved);
}

TEST(UcxAbi, Memory) {
    CHECK_ENUM_TYPE(ucp_mem_map_params_field);
    CHECK_ENUM(UCP_MEM_MAP_PARAM_FIELD_ADDRESS);
    CHECK_ENUM(UCP_MEM_MAP_PARAM_FIELD_LENGTH);
    CHECK_ENUM(UCP_MEM_MAP_PARAM_FIELD_FLAGS);
    CHECK_ENUM(UCP_MEM_MAP_PARAM_FIELD_PROT);
    CHECK_ENUM(UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE);
    CHECK_ENUM(UCP_MEM_MAP_NONBLOCK);
    CHECK_ENUM(UCP_MEM_MAP_ALLOCATE);
    CHECK_ENUM(UCP_MEM_MAP_FIXED);
    CHECK_ENUM(UCP_MEM_MAP_PROT_LOCAL_READ);
    CHECK_ENUM(UCP_MEM_MAP_PROT_LOCAL_WRITE);
    CHECK_ENUM(UCP_MEM_MAP_PROT_REMOTE_READ);
    CHECK_ENUM(UCP_MEM_MAP_PROT_REMOTE_WRITE);
    CHECK_STRUCT(ucp_mem_map_params_t);
    CHECK_FIELD(ucp_mem_map_params_t, field_mask);
    CHECK_FIELD(ucp_mem_map_params_t, address);
    CHECK_FIELD(ucp_mem_map_params_t, length);
    CHECK_FIELD(ucp_mem_map_params_t, flags);
    CHECK_FIELD(ucp_mem_map_params_t, prot);
    CHECK_FIELD(ucp_mem_map_params_t, memory_type);
    CHECK_ENUM_TYPE(ucp_mem_attr_field);
    CHECK_ENUM(UCP_MEM_ATTR_FIELD_ADDRESS);
    CHECK_ENUM(UCP_MEM_ATTR_FIELD_LENGTH);
    CHECK_ENUM(UCP_MEM_ATTR_FIELD_MEM_TYPE);
    CHECK_STRUCT(ucp_mem_attr_t);
    CHECK_FIELD(ucp_mem_attr_t, field_mask);
    CHECK_FIELD(ucp_mem_attr_t, address);
    CHECK_FIELD(ucp_mem_attr_t, length);
    CHECK_FIELD(ucp_mem_attr_t, mem_type);
    CHECK_ENUM_TYPE(ucp_mem_advise_params_field);
    CHECK_ENUM(UCP_MEM_ADVISE_PARAM_FIELD_ADDRESS);
    CHECK_ENUM(UCP_MEM_ADVISE_PARAM_FIELD_LENGTH);
    CHECK_ENUM(UCP_MEM_ADVISE_PARAM_FIELD_ADVICE);
    CHECK_ENUM_TYPE(ucp_mem_advice_t);
    CHECK_ENUM(UCP_MADV_NORMAL);
    CHECK_ENUM(UCP_MADV_WILLNEED);
    CHECK_STRUCT(ucp_mem_advise_params_t);
    CHECK_FIELD(ucp_mem_advise_params_t, field_mask);
    CHECK_FIELD(ucp_mem_advise_params_t, address);
    CHECK_FIELD(ucp_mem_advise_params_t, length);
    CHECK_FIELD(ucp_mem_advise_params_t, advice);
}

TEST(UcxAbi, Atomics) {
    CHECK_ENUM_TYPE(ucp_atomic_post_op_t);
    CHECK_ENUM(UCP_ATOMIC_POST_OP_ADD);
    CHECK_ENUM(UCP_ATOMIC_POST_OP_AND);
    CHECK_ENUM(UCP_ATOMIC_POST_OP_OR);
    CHECK_ENUM(UCP_ATOMIC_POST_OP_XOR);
    CHECK_ENUM(UCP_ATOMIC_POST_OP_LAST);
    CHECK_ENUM_TYPE(ucp_atomic_fetch_op_t);
    CHECK_ENUM(UCP_ATOMIC_FETCH_OP_FADD);
    CHECK_ENUM(UCP_ATOMIC_FETCH_OP_SWAP);
    CHECK_ENUM(UCP_ATOMIC_FETCH_OP_CSWAP);
    CHECK_ENUM(UCP_ATOMIC_FETCH_OP_FAND);
    CHECK_ENUM(UCP_ATOMIC_FETCH_OP_FOR);
    CHECK_ENUM(UCP_ATOMIC_FETCH_OP_FXOR);
    CHECK_ENUM(UCP_ATOMIC_FETCH_OP_LAST);
    CHECK_ENUM_TYPE(ucp_atomic_op_t);
    CHECK_ENUM(UCP_ATOMIC_OP_ADD);
    CHECK_ENUM(UCP_ATOMIC_OP_SWAP);
    CHECK_ENUM(UCP_ATOMIC_OP_CSWAP);
    CHECK_ENUM(UCP_ATOMIC_OP_AND);
    CHECK_ENUM(UCP_ATOMIC_OP_OR);
    CHECK_ENUM(UCP_ATOMIC_OP_XOR);
    CHECK_ENUM(UCP_ATOMIC_OP_LAST);
}

TEST(UcxAbi, Ucm) {
    CHECK_ENUM_TYPE(ucm_event_type_t);
    CHECK_ENUM(UCM_EVENT_NONE);
    CHECK_ENUM(UCM_EVENT_MMAP);
    CHECK_ENUM(UCM_EVENT_MUNMAP);
    CHECK_ENUM(UCM_EVENT_MREMAP);
    CHECK_ENUM(UCM_EVENT_SHMAT);
    CHECK_ENUM(UCM_EVENT_SHMDT);
    CHECK_ENUM(UCM_EVENT_SBRK);
    CHECK_ENUM(UCM_EVENT_MADVISE);
    CHECK_ENUM(UCM_EVENT_BRK);
    CHECK_ENUM(UCM_EVENT_VM_MAPPED);
    CHECK_ENUM(UCM_EVENT_VM_UNMAPPED);
    CHECK_ENUM(UCM_EVENT_MEM_TYPE_ALLOC);
    CHECK_ENUM(UCM_EVENT_MEM_TYPE_FREE);
    CHECK_ENUM(UCM_EVENT_FLAG_NO_INSTALL);
    CHECK_ENUM(UCM_EVENT_FLAG_EXISTING_ALLOC);
    CHECK_STRUCT(ucm_event_t);
    CHECK_FIELD(ucm_event_t, mmap);
    CHECK_FIELD(ucm_event_t, mmap.result);
    CHECK_FIELD(ucm_event_t, mmap.address);
    CHECK_FIELD(ucm_event_t, mmap.size);
    CHECK_FIELD(ucm_event_t, mmap.prot);
    CHECK_FIELD(ucm_event_t, mmap.flags);
    CHECK_FIELD(ucm_event_t, mmap.fd);
    CHECK_FIELD(ucm_event_t, mmap.offset);
    CHECK_FIELD(ucm_event_t, munmap);
    CHECK_FIELD(ucm_event_t, munmap.result);
    CHECK_FIELD(ucm_event_t, munmap.address);
    CHECK_FIELD(ucm_event_t, munmap.size);
    CHECK_FIELD(ucm_event_t, mremap);
    CHECK_FIELD(ucm_event_t, mremap.result);
    CHECK_FIELD(ucm_event_t, mremap.address);
    CHECK_FIELD(ucm_event_t, mremap.old_size);
    CHECK_FIELD(ucm_event_t, mremap.new_size);
    CHECK_FIELD(ucm_event_t, mremap.flags);
    CHECK_FIELD(ucm_event_t, shmat);
    CHECK_FIELD(ucm_event_t, shmat.result);
    CHECK_FIELD(ucm_event_t, shmat.shmid);
    CHECK_FIELD(ucm_event_t, shmat.shmaddr);
    CHECK_FIELD(ucm_event_t, shmat.shmflg);
    CHECK_FIELD(ucm_event_t, shmdt);
    CHECK_FIELD(ucm_event_t, shmdt.result);
    CHECK_FIELD(ucm_event_t, shmdt.shmaddr);
    CHECK_FIELD(ucm_event_t, sbrk);
    CHECK_FIELD(ucm_event_t, sbrk.result);
    CHECK_FIELD(ucm_event_t, sbrk.increment);
    CHECK_FIELD(ucm_event_t, madvise);
    CHECK_FIELD(ucm_event_t, madvise.result);
    CHECK_FIELD(ucm_event_t, madvise.addr);
    CHECK_FIELD(ucm_event_t, madvise.length);
    CHECK_FIELD(ucm_event_t, madvise.advice);
    CHECK_FIELD(ucm_event_t, brk);
    CHECK_FIELD(ucm_event_t, brk.result);
    CHECK_FIELD(ucm_event_t, brk.addr);
    CHECK_FIELD(ucm_event_t, vm_mapped);
    CHECK_FIELD(ucm_event_t, vm_mapped.address);
    CHECK_FIELD(ucm_event_t, vm_mapped.size);
    CHECK_FIELD(ucm_event_t, vm_unmapped);
    CHECK_FIELD(ucm_event_t, vm_unmapped.address);
    CHECK_FIELD(ucm_event_t, vm_unmapped.size);
    CHECK_FIELD(ucm_event_t, mem_type);
    CHECK_FIELD(ucm_event_t, mem_type.address);
    CHECK_FIELD(ucm_event_t, mem_type.size);
    CHECK_FIELD(ucm_event_t, mem_type.mem_type);
}

TEST(UcxAbi, Prototypes) {
    CHECK_PROTO(ucs_status_string);
    CHECK_PROTO(ucm_set_event_handler);
    CHECK_PROTO(ucm_unset_event_handler);
    CHECK_PROTO(ucm_set_external_event);
    CHECK_PROTO(ucm_unset_external_event);
    CHECK_PROTO(ucm_test_events);
    CHECK_PROTO(ucm_test_external_events);
    CHECK_PROTO(ucm_vm_mmap);
    CHECK_PROTO(ucm_vm_munmap);
    CHECK_PROTO(ucp_lib_query);
    CHECK_PROTO(ucp_config_read);
    CHECK_PROTO(ucp_config_release);
    CHECK_PROTO(ucp_config_modify);
    CHECK_PROTO(ucp_config_print);
    CHECK_PROTO(ucp_get_version);
    CHECK_PROTO(ucp_get_version_string);
    CHECK_PROTO(ucp_init_version);
    CHECK_PROTO(ucp_init);
    CHECK_PROTO(ucp_cleanup);
    CHECK_PROTO(ucp_context_query);
    CHECK_PROTO(ucp_context_print_info);
    CHECK_PROTO(ucp_worker_create);
    CHECK_PROTO(ucp_worker_destroy);
    CHECK_PROTO(ucp_worker_query);
    CHECK_PROTO(ucp_worker_print_info);
    CHECK_PROTO(ucp_worker_get_address);
    CHECK_PROTO(ucp_worker_release_address);
    CHECK_PROTO(ucp_worker_address_query);
    CHECK_PROTO(ucp_worker_progress);
    CHECK_PROTO(ucp_stream_worker_poll);
    CHECK_PROTO(ucp_worker_get_efd);
    CHECK_PROTO(ucp_worker_wait);
    CHECK_PROTO(ucp_worker_wait_mem);
    CHECK_PROTO(ucp_worker_arm);
    CHECK_PROTO(ucp_worker_signal);
    CHECK_PROTO(ucp_listener_create);
    CHECK_PROTO(ucp_listener_destroy);
    CHECK_PROTO(ucp_listener_query);
    CHECK_PROTO(ucp_conn_request_query);
    CHECK_PROTO(ucp_request_query);
    CHECK_PROTO(ucp_ep_create);
    CHECK_PROTO(ucp_ep_close_nb);
    CHECK_PROTO(ucp_ep_close_nbx);
    CHECK_PROTO(ucp_listener_reject);
    CHECK_PROTO(ucp_ep_print_info);
    CHECK_PROTO(ucp_ep_flush_nb);
    CHECK_PROTO(ucp_ep_flush_nbx);
    CHECK_PROTO(ucp_ep_evaluate_perf);
    CHECK_PROTO(ucp_ep_query);
    CHECK_PROTO(ucp_mem_map);
    CHECK_PROTO(ucp_mem_unmap);
    CHECK_PROTO(ucp_mem_query);
    CHECK_PROTO(ucp_mem_print_info);
    CHECK_PROTO(ucp_mem_advise);
    CHECK_PROTO(ucp_rkey_pack);
    CHECK_PROTO(ucp_rkey_buffer_release);
    CHECK_PROTO(ucp_ep_rkey_unpack);
    CHECK_PROTO(ucp_rkey_ptr);
    CHECK_PROTO(ucp_rkey_destroy);
    CHECK_PROTO(ucp_worker_set_am_handler);
    CHECK_PROTO(ucp_worker_set_am_recv_handler);
    CHECK_PROTO(ucp_am_send_nb);
    CHECK_PROTO(ucp_am_send_nbx);
    CHECK_PROTO(ucp_am_recv_data_nbx);
    CHECK_PROTO(ucp_am_data_release);
    CHECK_PROTO(ucp_stream_send_nb);
    CHECK_PROTO(ucp_stream_send_nbx);
    CHECK_PROTO(ucp_stream_recv_nb);
    CHECK_PROTO(ucp_stream_recv_nbx);
    CHECK_PROTO(ucp_stream_recv_data_nb);
    CHECK_PROTO(ucp_stream_data_release);
    CHECK_PROTO(ucp_stream_recv_request_test);
    CHECK_PROTO(ucp_tag_send_nb);
    CHECK_PROTO(ucp_tag_send_nbr);
    CHECK_PROTO(ucp_tag_send_sync_nb);
    CHECK_PROTO(ucp_tag_send_nbx);
    CHECK_PROTO(ucp_tag_send_sync_nbx);
    CHECK_PROTO(ucp_tag_recv_nb);
    CHECK_PROTO(ucp_tag_recv_nbr);
    CHECK_PROTO(ucp_tag_recv_nbx);
    CHECK_PROTO(ucp_tag_probe_nb);
    CHECK_PROTO(ucp_tag_msg_recv_nb);
    CHECK_PROTO(ucp_tag_msg_recv_nbx);
    CHECK_PROTO(ucp_tag_recv_request_test);
    CHECK_PROTO(ucp_put_nbi);
    CHECK_PROTO(ucp_put_nb);
    CHECK_PROTO(ucp_put_nbx);
    CHECK_PROTO(ucp_get_nbi);
    CHECK_PROTO(ucp_get_nb);
    CHECK_PROTO(ucp_get_nbx);
    CHECK_PROTO(ucp_atomic_post);
    CHECK_PROTO(ucp_atomic_fetch_nb);
    CHECK_PROTO(ucp_atomic_op_nbx);
    CHECK_PROTO(ucp_request_check_status);
    CHECK_PROTO(ucp_request_cancel);
    CHECK_PROTO(ucp_request_free);
    CHECK_PROTO(ucp_request_alloc);
    CHECK_PROTO(ucp_dt_create_generic);
    CHECK_PROTO(ucp_dt_destroy);
    CHECK_PROTO(ucp_worker_fence);
    CHECK_PROTO(ucp_worker_flush_nb);
    CHECK_PROTO(ucp_worker_flush_nbx);
    CHECK_PROTO(ucp_request_is_completed);
    CHECK_PROTO(ucp_request_release);
    CHECK_PROTO(ucp_ep_destroy);
    CHECK_PROTO(ucp_disconnect_nb);
    CHECK_PROTO(ucp_request_test);
    CHECK_PROTO(ucp_ep_flush);
    CHECK_PROTO(ucp_worker_flush);
    CHECK_PROTO(ucp_put);
    CHECK_PROTO(ucp_get);
    CHECK_PROTO(ucp_atomic_add32);
    CHECK_PROTO(ucp_atomic_add64);
    CHECK_PROTO(ucp_atomic_fadd32);
    CHECK_PROTO(ucp_atomic_fadd64);
    CHECK_PROTO(ucp_atomic_swap32);
    CHECK_PROTO(ucp_atomic_swap64);
    CHECK_PROTO(ucp_atomic_cswap32);
    CHECK_PROTO(ucp_atomic_cswap64);
    CHECK_PROTO(ucp_ep_modify_nb);
}

// --- Coverage: every declaration of ucx_abi.h is checked above -------------------------------

namespace {

std::string strip_comments(const std::string& text) {
    static const std::regex kBlock(R"(/\*[\s\S]*?\*/)");
    static const std::regex kLine(R"(//[^\n]*)");
    static const std::regex kDirective(R"((^|\n)[ \t]*#[^\n]*)");
    std::string s = std::regex_replace(text, kBlock, " ");
    s = std::regex_replace(s, kLine, " ");
    return std::regex_replace(s, kDirective, "$1");
}

std::string squeeze(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (std::isspace(static_cast<unsigned char>(c))) {
            if (!out.empty() && out.back() != ' ') out += ' ';
        } else {
            out += c;
        }
    }
    if (!out.empty() && out.back() == ' ') out.pop_back();
    return out;
}

/**
 * The names ucx_abi.h declares: enumerators, enum/struct/union/alias names, constants,
 * functions, and fields as "record.field" ("record.member.field" inside nested unions and
 * structs). A statement it cannot classify is returned as "?<statement>" so it fails.
 */
std::set<std::string> declared_names(const std::string& header) {
    struct Scope {
        enum Kind { kNamespace, kRecord, kEnum, kBody } kind;
        std::string name;
        std::vector<std::string> fields;
    };
    static const std::regex kRecordHead(R"(^(struct|union) ?(\w+)?$)");
    static const std::regex kEnumHead(R"(^enum ?(\w+)? ?(:.*)?$)");
    static const std::regex kNamespaceHead(R"(^namespace [\w:]+$)");
    static const std::regex kFunctionHead(R"(^[^=]*?(\w+) ?\(.*\)[^()]*$)");
    static const std::regex kEnumerator(R"(^(\w+))");
    static const std::regex kFnPointerField(R"(\( ?\* ?(\w+) ?\))");
    static const std::regex kField(R"((\w+) ?(\[[^\]]*\])?$)");
    static const std::regex kUsing(R"(^using (\w+) ?=)");
    static const std::regex kForward(R"(^(struct|union) (\w+)$)");
    static const std::regex kConstant(R"(^(inline )?constexpr [\w:\s]+?\b(\w+) ?=)");

    const std::string s = strip_comments(header);
    std::set<std::string> names;
    std::vector<Scope> stack;
    std::string buf;
    Scope* nested = nullptr;  // a closed nested record waiting for its member names
    Scope closed_nested;
    std::smatch m;
    for (char c : s) {
        if (c != '{' && c != '}' && c != ';') {
            buf += c;
            continue;
        }
        const std::string head = squeeze(buf);
        buf.clear();
        Scope* top = stack.empty() ? nullptr : &stack.back();
        if (top != nullptr && top->kind == Scope::kBody) {
            if (c == '{') stack.push_back({Scope::kBody, "", {}});
            if (c == '}') stack.pop_back();
            continue;
        }
        if (c == '{') {
            if (std::regex_match(head, m, kRecordHead)) {
                stack.push_back({Scope::kRecord, m[2].str(), {}});
            } else if (std::regex_match(head, m, kEnumHead)) {
                stack.push_back({Scope::kEnum, m[1].str(), {}});
                if (m[1].matched) names.insert(m[1].str());
            } else if (std::regex_match(head, kNamespaceHead)) {
                stack.push_back({Scope::kNamespace, "", {}});
            } else if ((top == nullptr || top->kind == Scope::kNamespace) &&
                       std::regex_match(head, m, kFunctionHead)) {
                names.insert(m[1].str());
                stack.push_back({Scope::kBody, "", {}});
            } else {
                names.insert("?" + head + " {");
                stack.push_back({Scope::kBody, "", {}});
            }
            continue;
        }
        if (c == '}') {
            if (top == nullptr) {
                names.insert("?unbalanced }");
                continue;
            }
            if (top->kind == Scope::kEnum) {
                std::stringstream items(head);
                std::string item;
                while (std::getline(items, item, ',')) {
                    item = squeeze(item);
                    if (std::regex_search(item, m, kEnumerator)) names.insert(m[1].str());
                }
                stack.pop_back();
            } else if (top->kind == Scope::kRecord) {
                if (!head.empty()) names.insert("?" + head);
                Scope done = std::move(*top);
                stack.pop_back();
                if (!stack.empty() && stack.back().kind == Scope::kRecord) {
                    closed_nested = std::move(done);
                    nested = &closed_nested;
                } else {
                    names.insert(done.name);
                    for (const auto& f : done.fields) names.insert(done.name + "." + f);
                }
            } else {
                stack.pop_back();
            }
            continue;
        }
        // ';'
        if (nested != nullptr) {
            std::stringstream declarators(head);
            std::string d;
            while (std::getline(declarators, d, ',')) {
                d = squeeze(d);
                stack.back().fields.push_back(d);
                for (const auto& f : nested->fields) stack.back().fields.push_back(d + "." + f);
            }
            nested = nullptr;
            continue;
        }
        if (head.empty()) continue;
        if (top != nullptr && top->kind == Scope::kRecord) {
            if (std::regex_search(head, m, kFnPointerField) || std::regex_search(head, m, kField)) {
                top->fields.push_back(m[1].str());
            } else {
                names.insert("?" + head);
            }
        } else if (std::regex_search(head, m, kUsing)) {
            names.insert(m[1].str());
        } else if (std::regex_match(head, m, kForward)) {
            names.insert(m[2].str());
        } else if (std::regex_search(head, m, kConstant)) {
            names.insert(m[2].str());
        } else {
            names.insert("?" + head);
        }
    }
    return names;
}

/** The names the CHECK_* lines of a test source name (fields as "record.field"). */
std::set<std::string> checked_names(const std::string& source) {
    static const std::regex kCheck(
        R"(\bCHECK_(ENUM|ENUM_TYPE|STRUCT|FIELD|ALIAS|OPAQUE|CONST|PROTO|FN)\(\s*(\w+)\s*(?:,\s*([\w.]+))?)");
    const std::string s = strip_comments(source);
    std::set<std::string> names;
    for (auto it = std::sregex_iterator(s.begin(), s.end(), kCheck); it != std::sregex_iterator(); ++it) {
        const auto& m = *it;
        if (m[1] == "FIELD") {
            names.insert(m[2].str() + "." + m[3].str());
        } else if (m[1] == "PROTO") {
            names.insert(m[2].str() + "_fn");
        } else {
            names.insert(m[2].str());
        }
    }
    return names;
}

/** Declared but not checked, as one line each ("" if none). */
std::string unchecked(const std::set<std::string>& declared, const std::set<std::string>& checked) {
    std::string out;
    for (const auto& name : declared) {
        if (checked.count(name) == 0) out += "  " + name + "\n";
    }
    return out;
}

/** A source file's text, found under $srcdir or next to this file's compile-time path. */
bool read_source(const std::string& path_from_top, std::string& text, std::string& tried) {
    std::vector<std::string> candidates;
    if (const char* srcdir = std::getenv("srcdir"))
        candidates.push_back(std::string(srcdir) + "/" + path_from_top);
#ifdef LOOM_SRCDIR
    candidates.push_back(std::string(LOOM_SRCDIR) + "/" + path_from_top);
#endif
    std::string self = __FILE__;
    const std::string self_from_top = "test/ucx_abi/test_ucx_abi.cc";
    if (self.size() >= self_from_top.size() &&
        self.compare(self.size() - self_from_top.size(), self_from_top.size(), self_from_top) == 0) {
        candidates.push_back(self.substr(0, self.size() - self_from_top.size()) + path_from_top);
    }
    for (const auto& path : candidates) {
        std::ifstream in(path);
        if (!in) {
            tried += " " + path;
            continue;
        }
        std::stringstream ss;
        ss << in.rdbuf();
        text = ss.str();
        return true;
    }
    return false;
}

}  // namespace

TEST(UcxAbi, Coverage) {
    std::string header, source, tried;
    ASSERT_TRUE(read_source("bindings/ucx/ucx_abi.h", header, tried))
        << "cannot find ucx_abi.h (tried" << tried << "); set srcdir to the top of the source tree";
    ASSERT_TRUE(read_source("test/ucx_abi/test_ucx_abi.cc", source, tried))
        << "cannot find this test's source (tried" << tried << "); set srcdir to the top of the source tree";
    const auto declared = declared_names(header);
    // Sanity: the parser sees the header, not an empty or unparsed file.
    EXPECT_GT(declared.size(), 500u);
    EXPECT_TRUE(declared.count("ucp_request_param_t.cb.send"));
    EXPECT_TRUE(declared.count("UCS_ERR_ENDPOINT_TIMEOUT"));
    EXPECT_TRUE(declared.count("ucp_tag_send_nbx_fn"));
    const std::string missing = unchecked(declared, checked_names(source));
    EXPECT_EQ(missing, "") << "declared in ucx_abi.h but not checked against UCX (add CHECK_* lines; a "
                              "'?' marks a statement the coverage parser does not understand)";
    if (missing.empty())
        std::printf("[ ucx_abi  ] all %zu declarations of ucx_abi.h checked\n", declared.size());
}

// --- The checker can fail -------------------------------------------------------------------

namespace neg_ours {
/** A struct whose fields are in the wrong order, as a header mistake would put them. */
struct Moved {
    std::uint64_t field_mask;
    std::uint32_t flags;
    void* request;
    std::uint32_t op_attr_mask;
};
enum Flags : unsigned { NEG_FLAG_A = 1u << 0, NEG_FLAG_B = 1u << 3 };
using fn = void (*)(int count, void* buffer);
}  // namespace neg_ours
namespace neg_real {
struct Moved {
    std::uint64_t field_mask;
    std::uint32_t op_attr_mask;
    std::uint32_t flags;
    void* request;
};
enum Flags : unsigned { NEG_FLAG_A = 1u << 0, NEG_FLAG_B = 1u << 2 };
using fn = void (*)(void* buffer, int count);
}  // namespace neg_real

namespace {
MAP_TYPE(neg_ours::Flags, neg_real::Flags)

/** Keeps the checker's own failures out of the count of comparisons with UCX. */
class UcxAbiChecker : public ::testing::Test {
protected:
    void TearDown() override { g_checks = saved_; }

private:
    int saved_ = g_checks;
};
}  // namespace

TEST_F(UcxAbiChecker, CatchesMovedField) {
    EXPECT_NONFATAL_FAILURE(CHECK_FIELD_IN(neg_ours, neg_real, Moved, flags), "offsetof(Moved, flags)");
    EXPECT_NONFATAL_FAILURE(CHECK_STRUCT_IN(neg_ours, neg_real, Moved), "sizeof(Moved)");
}

TEST_F(UcxAbiChecker, CatchesWrongValue) {
    EXPECT_NONFATAL_FAILURE(CHECK_ENUM_IN(neg_ours, neg_real, NEG_FLAG_B), "value of NEG_FLAG_B");
}

TEST_F(UcxAbiChecker, CatchesWrongPrototype) {
    EXPECT_NONFATAL_FAILURE(CHECK_PROTO_IN(neg_ours::fn, std::remove_pointer_t<neg_real::fn>, "fn"),
                            "prototype of fn");
    // A pointee of ours that is not mapped onto UCX's is a mismatch too.
    EXPECT_NONFATAL_FAILURE(
        CHECK_PROTO_IN(loom::ucx::ucp_ep_destroy_fn, void(loom::ucx::ucp_ep*), "ucp_ep_destroy"),
        "prototype of ucp_ep_destroy");
}

TEST_F(UcxAbiChecker, CoverageCatchesUncheckedDeclaration) {
    const std::string header = R"(
        namespace loom::ucx {
        /** A flag. */
        enum demo_flags : unsigned {
            DEMO_A = 1u << 0,  ///< checked
            DEMO_B = 1u << 1,  ///< not checked
        };
        struct demo_t {
            int a;
            union {
                int x;
            } u;
        };
        using demo_fn = void (*)(int);
        inline constexpr unsigned DEMO_MAX = 4;
        constexpr unsigned DEMO_HELPER(unsigned v) noexcept {
            return v;
        }
        }  // namespace loom::ucx
    )";
    const std::string source =
        "CHECK_ENUM_TYPE(demo_flags); CHECK_ENUM(DEMO_A); CHECK_STRUCT(demo_t);\n"
        "CHECK_FIELD(demo_t, a); CHECK_FIELD(demo_t, u.x); CHECK_PROTO(demo);\n"
        "// CHECK_CONST(DEMO_MAX); a comment checks nothing\n";
    EXPECT_EQ(unchecked(declared_names(header), checked_names(source)),
              "  DEMO_B\n  DEMO_HELPER\n  DEMO_MAX\n  demo_t.u\n");
}
