/** The helpers of ucx_compat_test.h. */
#include "ucx_compat_test.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#ifndef LOOM_BUILDDIR
#error "LOOM_BUILDDIR (the build tree holding bindings/ucx/.libs) must be defined"
#endif

namespace ucx_compat {

std::string tls_name(const testing::TestParamInfo<const char*>& info) {
    std::string name = info.param;
    for (char& c : name) {
        if (c == ',' || c == ':') c = '_';
    }
    return name;
}

// --- the layer ------------------------------------------------------------------------------

namespace {

std::string real(const char* path) {
    char buf[PATH_MAX];
    if (::realpath(path, buf) == nullptr) return path;
    return buf;
}

/** The directory the layer's libraries must come from: the build tree's bindings/ucx/.libs. */
std::string layer_dir() {
    return real(LOOM_BUILDDIR "/bindings/ucx/.libs") + "/";
}

/** Whether @p path is one of UCX's libraries (ours or anybody's): libucp, libucs, libucm, libuct. */
bool is_ucx_library(const std::string& path) {
    const std::string base = path.substr(path.rfind('/') + 1);
    for (const char* lib : {"libucp.so", "libucs.so", "libucm.so", "libuct.so"}) {
        if (base.rfind(lib, 0) == 0) return true;
    }
    return false;
}

}  // namespace

std::string layer_problem() {
    std::ostringstream why;
    const char* version = ucp_get_version_string();
    if (version == nullptr || std::strstr(version, "Loom") == nullptr) {
        why << "ucp_get_version_string() is \"" << (version ? version : "(null)")
            << "\", not the Loom layer's; ";
    }
    const std::string dir = layer_dir();
    for (const char* sym : {"ucp_init_version", "ucs_status_string", "ucm_vm_munmap"}) {
        void* addr = ::dlsym(RTLD_DEFAULT, sym);
        Dl_info info{};
        if (addr == nullptr || ::dladdr(addr, &info) == 0 || info.dli_fname == nullptr) {
            why << sym << " resolves to no library; ";
            continue;
        }
        const std::string lib = real(info.dli_fname);
        if (lib.rfind(dir, 0) != 0) why << sym << " comes from " << lib << ", not from " << dir << "; ";
    }
    // The function this program calls (ucp_init is UCX's inline calling it) must be the same one.
    Dl_info called{};
    if (::dladdr(reinterpret_cast<void*>(&ucp_init_version), &called) != 0 && called.dli_fname != nullptr) {
        const std::string lib = real(called.dli_fname);
        if (lib.rfind(dir, 0) != 0) why << "&ucp_init_version lies in " << lib << "; ";
    }
    // No other UCX library in the process (Debian's /usr/lib/x86_64-linux-gnu/libucp.so.0...).
    std::vector<std::string> foreign;
    ::dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* arg) {
            const std::string name = info->dlpi_name ? info->dlpi_name : "";
            if (!name.empty() && is_ucx_library(name))
                static_cast<std::vector<std::string>*>(arg)->push_back(real(name.c_str()));
            return 0;
        },
        &foreign);
    for (const std::string& lib : foreign) {
        if (lib.rfind(dir, 0) != 0) why << "a foreign UCX library is loaded: " << lib << "; ";
    }
    return why.str();
}

// --- environment ----------------------------------------------------------------------------

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
        ::setenv(name, value, 1);
    } else {
        ::unsetenv(name);
    }
}

ScopedEnv::~ScopedEnv() {
    if (old_) {
        ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
        ::unsetenv(name_.c_str());
    }
}

// --- requests ---------------------------------------------------------------------------------

RequestHooks& hooks() {
    static auto* h = new RequestHooks;  // outlives static destructors (contexts cleaned at exit)
    return *h;
}

void request_init(void* request) {
    auto* u = static_cast<UserReq*>(request);
    std::memset(u, 0, sizeof(*u));
    u->magic = UserReq::kMagic;
    RequestHooks& h = hooks();
    ++h.inits;
    std::lock_guard<std::mutex> g(h.lock);
    if (!h.live.insert(request).second) ++h.reinit;
}

void request_cleanup(void* request) {
    auto* u = static_cast<UserReq*>(request);
    RequestHooks& h = hooks();
    ++h.cleanups;
    if (u->magic != UserReq::kMagic) ++h.unknown;
    u->magic = 0;
    std::lock_guard<std::mutex> g(h.lock);
    h.live.erase(request);
}

void take_request(void* request) {
    auto* u = static_cast<UserReq*>(request);
    RequestHooks& h = hooks();
    {
        std::lock_guard<std::mutex> g(h.lock);
        if (h.live.count(request) == 0) ++h.unknown;
    }
    EXPECT_EQ(UserReq::kMagic, u->magic) << "request_init did not run on request " << request;
    ++u->uses;
    // What the previous operation on this memory left (as an MPI library resets its fields).
    u->completed = 0;
    u->status = UCS_INPROGRESS;
    u->info = ucp_tag_recv_info_t{};
}

// --- callbacks --------------------------------------------------------------------------------

void send_nbx_cb(void* request, ucs_status_t status, void* user_data) {
    auto* d = static_cast<Done*>(user_data);
    ++d->calls;
    d->status = status;
    d->request = request;
}

void recv_nbx_cb(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data) {
    auto* d = static_cast<Done*>(user_data);
    ++d->calls;
    d->status = status;
    d->request = request;
    if (info != nullptr) d->info = *info;
}

void am_data_cb(void* request, ucs_status_t status, std::size_t length, void* user_data) {
    auto* d = static_cast<Done*>(user_data);
    ++d->calls;
    d->status = status;
    d->length = length;
    d->request = request;
}

namespace {
std::atomic<long> g_legacy_callbacks{0};
}  // namespace

long legacy_callbacks() {
    return g_legacy_callbacks.load();
}

void send_cb(void* request, ucs_status_t status) {
    ++g_legacy_callbacks;
    auto* u = static_cast<UserReq*>(request);
    ++u->completed;
    u->status = status;
}

void recv_cb(void* request, ucs_status_t status, ucp_tag_recv_info_t* info) {
    ++g_legacy_callbacks;
    auto* u = static_cast<UserReq*>(request);
    ++u->completed;
    u->status = status;
    if (info != nullptr) u->info = *info;
}

ucp_request_param_t send_param(Done* done, std::uint32_t extra_mask) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | extra_mask;
    p.cb.send = send_nbx_cb;
    p.user_data = done;
    return p;
}

ucp_request_param_t recv_param(Done* done, std::uint32_t extra_mask) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | extra_mask;
    p.cb.recv = recv_nbx_cb;
    p.user_data = done;
    return p;
}

// --- waits ------------------------------------------------------------------------------------

void progress_rounds(Workers workers, int rounds) {
    for (int i = 0; i < rounds; ++i) {
        for (ucp_worker_h w : workers) ucp_worker_progress(w);
    }
}

ucs_status_t wait(ucs_status_ptr_t r, Workers workers, ucp_tag_recv_info_t* info) {
    if (r == nullptr) return UCS_OK;
    if (UCS_PTR_IS_ERR(r)) return UCS_PTR_STATUS(r);
    if (!progress_until(workers, [r] { return ucp_request_check_status(r) != UCS_INPROGRESS; })) {
        ADD_FAILURE() << "request " << r << " did not complete within " << kDeadlineSeconds << " s";
        ucp_request_free(r);
        return UCS_ERR_TIMED_OUT;
    }
    ucs_status_t s = info != nullptr ? ucp_request_test(r, info) : ucp_request_check_status(r);
    ucp_request_free(r);
    return s;
}

std::vector<char> pattern(std::size_t n, unsigned seed) {
    std::vector<char> v(n);
    std::uint32_t x = seed * 2654435761u + 12345u;
    for (std::size_t i = 0; i < n; ++i) {
        x = x * 1103515245u + 12345u;
        v[i] = static_cast<char>(x >> 16);
    }
    return v;
}

int layer_log_lines(const std::string& text) {
    int n = 0;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("[loom-ucx", 0) == 0) ++n;
    }
    return n;
}

// --- contexts and workers ---------------------------------------------------------------------

Context::Context(const char* tls, std::uint64_t features) {
    ScopedEnv env("LOOM_TLS", tls);
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_REQUEST_SIZE |
                        UCP_PARAM_FIELD_REQUEST_INIT | UCP_PARAM_FIELD_REQUEST_CLEANUP | UCP_PARAM_FIELD_NAME;
    params.features = features;
    params.request_size = sizeof(UserReq);
    params.request_init = request_init;
    params.request_cleanup = request_cleanup;
    params.name = "test_ucx_compat";
    status_ = ucp_init(&params, nullptr, &ctx_);
    if (status_ != UCS_OK) ctx_ = nullptr;
}

Context::~Context() {
    if (ctx_ != nullptr) ucp_cleanup(ctx_);
}

std::size_t Context::request_size() const {
    ucp_context_attr_t attr{};
    attr.field_mask = UCP_ATTR_FIELD_REQUEST_SIZE;
    if (ucp_context_query(ctx_, &attr) != UCS_OK) return 0;
    return attr.request_size;
}

std::vector<std::uint8_t> worker_address(ucp_worker_h w, bool net_only) {
    ucp_worker_attr_t attr{};
    attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS;
    if (net_only) {
        attr.field_mask |= UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS;
        attr.address_flags = UCP_WORKER_ADDRESS_FLAG_NET_ONLY;
    }
    if (ucp_worker_query(w, &attr) != UCS_OK || attr.address == nullptr) return {};
    const auto* a = reinterpret_cast<const std::uint8_t*>(attr.address);
    std::vector<std::uint8_t> v(a, a + attr.address_length);
    ucp_worker_release_address(w, attr.address);
    return v;
}

ucs_status_t connect(ucp_worker_h w, const void* address, ucp_ep_h* ep, ucp_err_handler_cb_t handler,
                     void* arg) {
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    p.address = static_cast<const ucp_address_t*>(address);
    if (handler != nullptr) {
        p.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
        p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
        p.err_handler.cb = handler;
        p.err_handler.arg = arg;
    }
    return ucp_ep_create(w, &p, ep);
}

void close_force(ucp_ep_h ep, Workers workers) {
    if (ep == nullptr) return;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(r)) (void)wait(r, workers);
}

bool Pair::open(const char* tls, std::uint64_t features) {
    context = new Context(tls, features);
    ctx = context->get();
    EXPECT_EQ(UCS_OK, context->status()) << "ucp_init with LOOM_TLS=" << tls;
    if (ctx == nullptr) return false;
    for (auto& worker : w) {
        ucp_worker_params_t wp{};
        wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
        wp.thread_mode = UCS_THREAD_MODE_SINGLE;
        EXPECT_EQ(UCS_OK, ucp_worker_create(ctx, &wp, &worker));
        if (worker == nullptr) return false;
    }
    for (int i = 0; i < 2; ++i) {
        auto peer = worker_address(w[1 - i]);
        EXPECT_FALSE(peer.empty());
        EXPECT_EQ(UCS_OK, connect(w[i], peer.data(), &ep[i]));
        if (ep[i] == nullptr) return false;
    }
    return true;
}

Pair::~Pair() {
    for (ucp_ep_h& e : ep) {
        close_force(e, {w[0], w[1]});
        e = nullptr;
    }
    for (ucp_worker_h& worker : w) {
        if (worker != nullptr) ucp_worker_destroy(worker);
        worker = nullptr;
    }
    delete context;
}

void PairTest::SetUp() {
    ASSERT_TRUE(p.open(GetParam())) << "LOOM_TLS=" << GetParam();
}

// --- two processes ----------------------------------------------------------------------------

namespace {

bool write_all(int fd, const void* data, std::size_t n) {
    const auto* p = static_cast<const char*>(data);
    while (n > 0) {
        ssize_t w = ::write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= static_cast<std::size_t>(w);
    }
    return true;
}

bool read_all(int fd, void* data, std::size_t n, std::chrono::steady_clock::time_point deadline) {
    auto* p = static_cast<char*>(data);
    while (n > 0) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) return false;
        pollfd pfd{fd, POLLIN, 0};
        int r = ::poll(&pfd, 1, static_cast<int>(left.count()));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        ssize_t got = ::read(fd, p, n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return false;
        p += got;
        n -= static_cast<std::size_t>(got);
    }
    return true;
}

}  // namespace

bool Channel::send(const void* data, std::size_t n) {
    std::uint64_t len = n;
    return write_all(wfd_, &len, sizeof(len)) && write_all(wfd_, data, n);
}

std::optional<std::vector<std::uint8_t>> Channel::recv(int seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    std::uint64_t len = 0;
    if (!read_all(rfd_, &len, sizeof(len), deadline) || len > (64u << 20)) return std::nullopt;
    std::vector<std::uint8_t> v(len);
    if (!read_all(rfd_, v.data(), len, deadline)) return std::nullopt;
    return v;
}

std::optional<std::uint64_t> Channel::recv_u64(int seconds) {
    auto v = recv(seconds);
    if (!v || v->size() != sizeof(std::uint64_t)) return std::nullopt;
    std::uint64_t x;
    std::memcpy(&x, v->data(), sizeof(x));
    return x;
}

bool Channel::readable() const {
    pollfd pfd{rfd_, POLLIN, 0};
    return ::poll(&pfd, 1, 0) > 0;
}

void Channel::close() {
    if (rfd_ >= 0) ::close(rfd_);
    if (wfd_ >= 0) ::close(wfd_);
    rfd_ = wfd_ = -1;
}

Child::Child(std::function<int(Channel&)> fn) {
    int to_child[2];
    int to_parent[2];
    if (::pipe2(to_child, O_CLOEXEC) != 0 || ::pipe2(to_parent, O_CLOEXEC) != 0) {
        ADD_FAILURE() << "pipe: " << std::strerror(errno);
        return;
    }
    std::fflush(nullptr);  // nothing buffered is written twice
    pid_ = ::fork();
    if (pid_ == 0) {
        ::close(to_child[1]);
        ::close(to_parent[0]);
        Channel ch(to_child[0], to_parent[1]);
        int code = fn(ch);
        std::fflush(nullptr);
        ::_exit(code);
    }
    ::close(to_child[0]);
    ::close(to_parent[1]);
    ch_ = Channel(to_parent[0], to_child[1]);
    if (pid_ < 0) ADD_FAILURE() << "fork: " << std::strerror(errno);
}

Child::~Child() {
    if (pid_ > 0 && !reaped_) {
        ::kill(pid_, SIGKILL);
        int st;
        ::waitpid(pid_, &st, 0);
    }
    ch_.close();
}

int Child::wait() {
    if (pid_ <= 0) return -2000;
    // Waits on a pidfd (readable once the child ended) rather than polling waitpid in a loop.
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
    bool ended = true;
    if (pidfd >= 0) {
        pollfd pfd{pidfd, POLLIN, 0};
        int r;
        do {
            r = ::poll(&pfd, 1, kDeadlineSeconds * 1000);
        } while (r < 0 && errno == EINTR);
        ended = r > 0;
        ::close(pidfd);
    }
    if (!ended) ::kill(pid_, SIGKILL);
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    if (!ended) return -1000;
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return -WTERMSIG(st);
    return -4000;
}

void Child::kill(int sig) {
    if (pid_ > 0 && !reaped_) ::kill(pid_, sig);
}

// --- Side -------------------------------------------------------------------------------------

Side::Side(const char* tls, std::uint64_t features) : ctx(tls, features) {
    if (ctx.get() == nullptr) return;
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    if (ucp_worker_create(ctx.get(), &wp, &worker) != UCS_OK) worker = nullptr;
}

Side::~Side() {
    if (ep != nullptr) close_force(ep, {worker});
    if (worker != nullptr) ucp_worker_destroy(worker);
}

bool Side::meet(Channel& ch, bool err_handler) {
    if (!ok()) return false;
    auto mine = worker_address(worker);
    if (mine.empty() || !ch.send(mine)) return false;
    auto peer = ch.recv();
    if (!peer) return false;
    ucp_err_handler_cb_t cb = nullptr;
    if (err_handler) {
        cb = [](void* arg, ucp_ep_h failed, ucs_status_t status) {
            auto* self = static_cast<Side*>(arg);
            ++self->errors;
            self->last_error = status;
            self->error_ep = failed;
        };
    }
    return connect(worker, peer->data(), &ep, cb, this) == UCS_OK;
}

bool Side::serve_until_message(Channel& ch, int seconds) {
    return progress_until([&ch] { return ch.readable(); }, seconds);
}

}  // namespace ucx_compat
