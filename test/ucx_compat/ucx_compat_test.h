/**
 * Shared helpers of test_ucx_compat: the unit tests of the UCX compatibility layer
 * (bindings/ucx) through the UCX 1.13 API, compiled against UCX's real headers and linked
 * against the layer's libraries (never Debian's libucp).
 *
 * Everything here speaks UCX only: contexts made with ucp_init, two workers of one
 * context in this process (Pair), or one side of a two-process test (Side, Child). Waits
 * progress until a condition holds, for at most kDeadlineSeconds, and fail the test
 * otherwise: no sleeps, no timing assertions.
 */
#pragma once

#include <ucm/api/ucm.h>
#include <ucp/api/ucp.h>

#include <gtest/gtest.h>

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ucx_compat {

/** Every wait of these tests gives up (and fails) after this long. */
inline constexpr int kDeadlineSeconds = 30;

/** The features the tests' contexts ask for by default. */
inline constexpr std::uint64_t kAllFeatures =
    UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_AMO32 | UCP_FEATURE_AMO64 | UCP_FEATURE_AM;

/** Transports of the single-process suites (LOOM_TLS): two workers in this process. */
inline const char* const kLocalTls[] = {"shm,self", "tcp"};
/** Transports of the two-process suites. */
inline const char* const kRemoteTls[] = {"shm", "tcp"};

/** A gtest parameter name for a LOOM_TLS value ("shm,self" -> "shm_self"). */
std::string tls_name(const testing::TestParamInfo<const char*>& info);

// --- the layer itself -----------------------------------------------------------------------

/** Why this process did not load the layer's libraries, or empty when it did. */
std::string layer_problem();

// --- environment ----------------------------------------------------------------------------

/** Sets (or with nullptr unsets) an environment variable for a scope. */
class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value);
    ~ScopedEnv();
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    std::string name_;
    std::optional<std::string> old_;
};

// --- the caller's part of every request --------------------------------------------------------

/**
 * What the tests keep in each request (ucp_params_t.request_size), as an MPI library keeps
 * its own request there: request_init writes magic once per request memory, callbacks
 * record the completion, the tests count uses across reuse.
 */
struct UserReq {
    static constexpr std::uint64_t kMagic = 0x55435852455131ull;
    std::uint64_t magic;
    std::uint64_t uses;  ///< incremented by the tests each time they get this memory
    int completed;       ///< callbacks that ran on it
    ucs_status_t status;
    ucp_tag_recv_info_t info;
    std::size_t length;
    void* user_data;
    char pad[8];
};

/** Counts of the request hooks of every context made by Context (process-wide). */
struct RequestHooks {
    std::atomic<long> inits{0};
    std::atomic<long> cleanups{0};
    std::atomic<long> reinit{0};   ///< request_init on memory already initialized and not cleaned up
    std::atomic<long> unknown{0};  ///< a request handed out whose memory request_init never saw
    std::mutex lock;
    std::set<void*> live;  ///< request memory initialized and not cleaned up
};
RequestHooks& hooks();

/** request_init / request_cleanup of the tests' contexts. */
void request_init(void* request);
void request_cleanup(void* request);

/**
 * Takes a library request handed to the test: checks request_init ran on its memory,
 * counts a use, and resets the per-operation fields (completed, status, info) that the
 * previous operation on the same memory left.
 */
void take_request(void* request);

// --- callbacks recording into a Done ---------------------------------------------------------

/** What a completion callback saw, through user_data (callbacks never run twice). */
struct Done {
    int calls = 0;
    ucs_status_t status = UCS_INPROGRESS;
    ucp_tag_recv_info_t info{};
    std::size_t length = 0;
    void* request = nullptr;
};

void send_nbx_cb(void* request, ucs_status_t status, void* user_data);
void recv_nbx_cb(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data);
void am_data_cb(void* request, ucs_status_t status, std::size_t length, void* user_data);

/** UCX 1.x callbacks: they record into the request's UserReq (there is no user_data). */
void send_cb(void* request, ucs_status_t status);
void recv_cb(void* request, ucs_status_t status, ucp_tag_recv_info_t* info);
/** How many times send_cb and recv_cb ran in this process. */
long legacy_callbacks();

/** A request parameter with a callback of the send shape and @p done as user data. */
ucp_request_param_t send_param(Done* done, std::uint32_t extra_mask = 0);
/** A request parameter with a tag receive callback and @p done as user data. */
ucp_request_param_t recv_param(Done* done, std::uint32_t extra_mask = 0);

// --- progress and waits -----------------------------------------------------------------------

using Workers = std::initializer_list<ucp_worker_h>;

/** Progresses @p workers until @p done() holds or the deadline passes; returns done(). */
template <typename F>
bool progress_until(Workers workers, F done, int seconds = kDeadlineSeconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (!done()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        for (ucp_worker_h w : workers) ucp_worker_progress(w);
    }
    return true;
}

/** Progresses @p workers @p rounds times (to show that something does NOT happen). */
void progress_rounds(Workers workers, int rounds);

/**
 * The final status of a status-or-request returned by an _nb/_nbx call, progressing
 * @p workers; frees the request (ucp_request_free). With @p info the receive's tag and
 * length (ucp_request_test). UCS_ERR_TIMED_OUT (and a test failure) at the deadline.
 */
ucs_status_t wait(ucs_status_ptr_t r, Workers workers, ucp_tag_recv_info_t* info = nullptr);

/** UCS_PTR_STATUS as a function: the macro evaluates its argument twice (never pass it a call). */
inline ucs_status_t status_of(ucs_status_ptr_t r) {
    return UCS_PTR_STATUS(r);
}

/** A byte pattern of @p n bytes for message @p seed. */
std::vector<char> pattern(std::size_t n, unsigned seed);

/** Lines of @p text that start with "[loom-ucx". */
int layer_log_lines(const std::string& text);

// --- contexts and workers -------------------------------------------------------------------

/**
 * A context made the way an MPI library makes it: ucp_init (UCX's inline, calling
 * ucp_init_version) with the features, request_size = sizeof(UserReq), request_init and
 * request_cleanup, and LOOM_TLS set to @p tls while it is created.
 */
class Context {
public:
    explicit Context(const char* tls, std::uint64_t features = kAllFeatures);
    ~Context();
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;
    ucp_context_h get() const { return ctx_; }
    ucs_status_t status() const { return status_; }
    /** ucp_context_query's request_size: the bytes before a caller-provided request. */
    std::size_t request_size() const;

private:
    ucp_context_h ctx_ = nullptr;
    ucs_status_t status_ = UCS_ERR_NO_MESSAGE;
};

/** A worker's full address (or the network-only one) as bytes; empty on failure. */
std::vector<std::uint8_t> worker_address(ucp_worker_h w, bool net_only = false);

/** Creates an endpoint from worker @p w to @p address; err mode peer with @p handler when given. */
ucs_status_t connect(ucp_worker_h w, const void* address, ucp_ep_h* ep,
                     ucp_err_handler_cb_t handler = nullptr, void* arg = nullptr);

/** Closes @p ep by force (waiting on @p workers): the teardown of every test. */
void close_force(ucp_ep_h ep, Workers workers);

/**
 * Two workers of one context in this process and endpoints between them: ep[0] from w[0]
 * to w[1], ep[1] from w[1] to w[0]. open() fails the test (returns false) when any step does.
 */
class Pair {
public:
    Pair() = default;
    ~Pair();
    bool open(const char* tls, std::uint64_t features = kAllFeatures);
    Context* context = nullptr;
    ucp_context_h ctx = nullptr;
    ucp_worker_h w[2] = {nullptr, nullptr};
    ucp_ep_h ep[2] = {nullptr, nullptr};
    /** wait() progressing both workers. */
    ucs_status_t wait(ucs_status_ptr_t r, ucp_tag_recv_info_t* info = nullptr) {
        return ucx_compat::wait(r, {w[0], w[1]}, info);
    }
    template <typename F>
    bool progress_until(F done) {
        return ucx_compat::progress_until({w[0], w[1]}, done);
    }
};

/** A fixture over the single-process transports: a Pair opened with GetParam() as LOOM_TLS. */
class PairTest : public testing::TestWithParam<const char*> {
protected:
    void SetUp() override;
    Pair p;
};

// --- two processes ----------------------------------------------------------------------------

/** One end of the pipes between a test and its forked child: length-prefixed blobs. */
class Channel {
public:
    Channel() = default;
    Channel(int rfd, int wfd) : rfd_(rfd), wfd_(wfd) {}
    bool send(const void* data, std::size_t n);
    bool send(const std::vector<std::uint8_t>& v) { return send(v.data(), v.size()); }
    bool send_u64(std::uint64_t v) { return send(&v, sizeof(v)); }
    /** The next blob; nullopt when the peer closed its end or after the deadline. */
    std::optional<std::vector<std::uint8_t>> recv(int seconds = kDeadlineSeconds);
    std::optional<std::uint64_t> recv_u64(int seconds = kDeadlineSeconds);
    /** True when a blob (or the peer's end of file) is waiting: never blocks. */
    bool readable() const;
    void close();

private:
    int rfd_ = -1;
    int wfd_ = -1;
};

/**
 * A forked child running @p fn (its return value is the child's exit code; it must not
 * use gtest assertions) with a Channel to the parent. The child _exit()s after @p fn.
 */
class Child {
public:
    explicit Child(std::function<int(Channel&)> fn);
    ~Child();
    Channel& channel() { return ch_; }
    /** The exit code, -signal when killed; -1000 when it did not end within the deadline (then killed). */
    int wait();
    void kill(int sig);
    pid_t pid() const { return pid_; }

private:
    pid_t pid_ = -1;
    Channel ch_;
    bool reaped_ = false;
};

/**
 * One process's side of a two-process test: its own context (LOOM_TLS=@p tls) and worker,
 * and an endpoint to the other process made from the address received over the channel.
 */
class Side {
public:
    explicit Side(const char* tls, std::uint64_t features = kAllFeatures);
    ~Side();
    bool ok() const { return ctx.get() != nullptr && worker != nullptr; }
    /**
     * Sends this worker's address, receives the peer's, creates ep (err mode peer and a handler
     * on request).
     */
    bool meet(Channel& ch, bool err_handler = false);
    ucs_status_t wait(ucs_status_ptr_t r, ucp_tag_recv_info_t* info = nullptr) {
        return ucx_compat::wait(r, {worker}, info);
    }
    template <typename F>
    bool progress_until(F done, int seconds = kDeadlineSeconds) {
        return ucx_compat::progress_until({worker}, done, seconds);
    }
    /** Progresses until the peer sends something on @p ch (the child's "serve until told" loop). */
    bool serve_until_message(Channel& ch, int seconds = kDeadlineSeconds);

    Context ctx;
    ucp_worker_h worker = nullptr;
    ucp_ep_h ep = nullptr;
    int errors = 0;                    ///< error handler calls
    ucs_status_t last_error = UCS_OK;  ///< their last status
    ucp_ep_h error_ep = nullptr;       ///< the endpoint they named
};

}  // namespace ucx_compat
