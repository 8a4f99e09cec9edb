/* Memory and time per endpoint, Loom's C API against UCX's ucp, from one source: built
 * twice by startup.py, with -DEPMEM_UCX for UCX. A child process hosts N workers; the
 * measured parent creates one endpoint to each, sends one 8-byte tagged message on each
 * and progresses until the child has received all of them, so every endpoint is connected
 * and has carried traffic, as an MPI rank's endpoints are after a first exchange with
 * every peer. Resident memory is
 * read from /proc/self/status, private (RssAnon) and shared-memory pages mapped
 * (RssShmem) apart; the kernel's socket buffers are in neither. Prints
 *   "worker_anon worker_shmem ep_anon_created ep_anon_connected ep_shmem_connected
 *    create_us_per_ep connect_us_per_ep"
 * (bytes, microseconds) where "worker" is the context and one worker, and the per-endpoint
 * figures are the growth over all N endpoints divided by N. */
#define _GNU_SOURCE
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef EPMEM_UCX
#include <ucp/api/ucp.h>
typedef ucp_context_h ctx_t;
typedef ucp_worker_h worker_t;
typedef ucp_ep_h ep_t;
#define LIB "ucp"
#else
#include <loom/ucp.h>
typedef loom_context_h ctx_t;
typedef loom_worker_h worker_t;
typedef loom_ep_h ep_t;
#define LIB "loom"
#endif

static void die(const char* what) {
    fprintf(stderr, "epmem(%s): %s failed\n", LIB, what);
    exit(1);
}

/* --- the two libraries behind one small interface ---------------------------------- */

static ctx_t lib_init(void) {
    ctx_t ctx;
#ifdef EPMEM_UCX
    ucp_params_t p = {0};
    p.field_mask = UCP_PARAM_FIELD_FEATURES;
    p.features = UCP_FEATURE_TAG;
    if (ucp_init(&p, NULL, &ctx) != UCS_OK) die("ucp_init");
#else
    loom_params_t p = {0};
    p.field_mask = LOOM_PARAM_FIELD_FEATURES;
    p.features = LOOM_FEATURE_TAG;
    if (loom_init(&p, &ctx) != LOOM_OK) die("loom_init");
#endif
    return ctx;
}

static worker_t lib_worker(ctx_t ctx) {
    worker_t w;
#ifdef EPMEM_UCX
    ucp_worker_params_t p = {0};
    p.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    p.thread_mode = UCS_THREAD_MODE_SINGLE;
    if (ucp_worker_create(ctx, &p, &w) != UCS_OK) die("ucp_worker_create");
#else
    loom_worker_params_t p = {0};
    p.field_mask = LOOM_WORKER_PARAM_FIELD_THREAD_MODE;
    p.thread_mode = LOOM_THREAD_MODE_SINGLE;
    if (loom_worker_create(ctx, &p, &w) != LOOM_OK) die("loom_worker_create");
#endif
    return w;
}

static void lib_address(worker_t w, void** addr, size_t* len) {
#ifdef EPMEM_UCX
    if (ucp_worker_get_address(w, (ucp_address_t**)addr, len) != UCS_OK) die("ucp_worker_get_address");
#else
    if (loom_worker_get_address(w, addr, len) != LOOM_OK) die("loom_worker_get_address");
#endif
}

static void lib_progress(worker_t w) {
#ifdef EPMEM_UCX
    ucp_worker_progress(w);
#else
    loom_worker_progress(w);
#endif
}

static ep_t lib_ep(worker_t w, const void* addr) {
    ep_t ep;
#ifdef EPMEM_UCX
    ucp_ep_params_t p = {0};
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    p.address = (const ucp_address_t*)addr;
    if (ucp_ep_create(w, &p, &ep) != UCS_OK) die("ucp_ep_create");
#else
    loom_ep_params_t p = {0};
    p.field_mask = LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS;
    p.address = addr;
    if (loom_ep_create(w, &p, &ep) != LOOM_OK) die("loom_ep_create");
#endif
    return ep;
}

/* Progresses @p w until the request (or immediate status) @p r is done. */
static void lib_wait(worker_t w, void* r, const char* what) {
#ifdef EPMEM_UCX
    if (UCS_PTR_IS_ERR(r)) die(what);
    if (r == NULL) return;
    ucs_status_t s;
    while ((s = ucp_request_check_status(r)) == UCS_INPROGRESS) ucp_worker_progress(w);
    ucp_request_free(r);
    if (s != UCS_OK) die(what);
#else
    if (!LOOM_PTR_IS_PTR(r)) {
        if (LOOM_PTR_STATUS(r) != LOOM_OK) die(what);
        return;
    }
    loom_status_t s;
    while ((s = loom_request_check_status(r)) == LOOM_INPROGRESS) loom_worker_progress(w);
    loom_request_free(r);
    if (s != LOOM_OK) die(what);
#endif
}

static void* lib_send(ep_t ep, const void* buf, size_t len) {
#ifdef EPMEM_UCX
    ucp_request_param_t p = {0};
    return ucp_tag_send_nbx(ep, buf, len, 7, &p);
#else
    loom_request_param_t p = {0};
    return loom_tag_send_nbx(ep, buf, len, 7, &p);
#endif
}

/* Posts a receive of the one 8-byte message a peer worker gets. */
static void* lib_recv(worker_t w, uint64_t* buf) {
#ifdef EPMEM_UCX
    ucp_request_param_t p = {0};
    void* r = ucp_tag_recv_nbx(w, buf, sizeof(*buf), 7, ~(ucp_tag_t)0, &p);
    if (UCS_PTR_IS_ERR(r)) die("ucp_tag_recv_nbx");
#else
    loom_request_param_t p = {0};
    void* r = loom_tag_recv_nbx(w, buf, sizeof(*buf), 7, ~(loom_tag_t)0, &p);
    if (LOOM_PTR_IS_ERR(r)) die("loom_tag_recv_nbx");
#endif
    return r;
}

/* True once request @p r (or an immediate result) is complete. */
static int lib_done(void* r) {
#ifdef EPMEM_UCX
    return !UCS_PTR_IS_PTR(r) || ucp_request_check_status(r) != UCS_INPROGRESS;
#else
    return !LOOM_PTR_IS_PTR(r) || loom_request_check_status(r) != LOOM_INPROGRESS;
#endif
}

static void* lib_flush(worker_t w) {
#ifdef EPMEM_UCX
    ucp_request_param_t p = {0};
    return ucp_worker_flush_nbx(w, &p);
#else
    loom_request_param_t p = {0};
    return loom_worker_flush_nbx(w, &p);
#endif
}

/* --- measurement ----------------------------------------------------------------------- */

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Resident memory by kind, from /proc/self/status: private anonymous pages (the heap and
 * private mappings: what the process costs) and shared-memory pages mapped (segments,
 * which belong to whoever created them and are counted once per process mapping them). */
typedef struct {
    long anon, shmem;
} rss_t;

static rss_t rss_now(void) {
    rss_t r = {-1, -1};
    char line[256];
    FILE* f = fopen("/proc/self/status", "r");
    if (f == NULL) die("opening /proc/self/status");
    while (fgets(line, sizeof(line), f) != NULL) {
        sscanf(line, "RssAnon: %ld kB", &r.anon);
        sscanf(line, "RssShmem: %ld kB", &r.shmem);
    }
    fclose(f);
    if (r.anon < 0 || r.shmem < 0) die("reading RssAnon/RssShmem from /proc/self/status");
    r.anon *= 1024;
    r.shmem *= 1024;
    return r;
}

static void read_all(int fd, void* buf, size_t len) {
    char* p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n <= 0) die("reading the peers' addresses");
        p += n;
        len -= (size_t)n;
    }
}

/* The child: N workers, their addresses down @p out, then progress; one byte down @p out
 * once every worker received its message; exits when @p stop closes. */
static void host_peers(int n, int out, int stop) {
    ctx_t ctx = lib_init();
    worker_t* workers = calloc((size_t)n, sizeof(*workers));
    void** recvs = calloc((size_t)n, sizeof(*recvs));
    uint64_t* bufs = calloc((size_t)n, sizeof(*bufs));
    for (int i = 0; i < n; ++i) {
        workers[i] = lib_worker(ctx);
        recvs[i] = lib_recv(workers[i], &bufs[i]);
        void* addr;
        size_t len;
        lib_address(workers[i], &addr, &len);
        uint32_t len32 = (uint32_t)len;
        if (write(out, &len32, sizeof(len32)) != sizeof(len32) || write(out, addr, len) != (ssize_t)len) {
            die("writing an address");
        }
    }
    struct pollfd pfd = {.fd = stop, .events = POLLIN};
    int received = 0;
    for (unsigned round = 0;; ++round) {
        for (int i = 0; i < n; ++i) {
            lib_progress(workers[i]);
            if (recvs[i] != NULL && lib_done(recvs[i])) {
                recvs[i] = NULL; /* (not freed: the process ends without teardown) */
                if (++received == n && write(out, "r", 1) != 1) die("reporting the messages");
            }
        }
        if ((round & 63) == 0 && poll(&pfd, 1, 0) > 0) break;
    }
    _exit(0); /* the parent measured what it needed; tearing down N workers is not part of it */
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 128;
    if (n <= 0) die("the endpoint count argument");
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max; /* N workers each hold several descriptors */
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    int to_parent[2], to_child[2];
    if (pipe(to_parent) != 0 || pipe(to_child) != 0) die("pipe");
    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) {
        close(to_parent[0]);
        close(to_child[1]);
        host_peers(n, to_parent[1], to_child[0]);
    }
    close(to_parent[1]);
    close(to_child[0]);
    char** addrs = calloc((size_t)n, sizeof(*addrs));
    for (int i = 0; i < n; ++i) {
        uint32_t len;
        read_all(to_parent[0], &len, sizeof(len));
        addrs[i] = malloc(len);
        read_all(to_parent[0], addrs[i], len);
    }
    ep_t* eps = calloc((size_t)n, sizeof(*eps));
    void** reqs = calloc((size_t)n, sizeof(*reqs));
    uint64_t payload = 42;

    rss_t rss0 = rss_now();
    ctx_t ctx = lib_init();
    worker_t w = lib_worker(ctx);
    rss_t rss1 = rss_now();
    double t0 = now_us();
    for (int i = 0; i < n; ++i) eps[i] = lib_ep(w, addrs[i]);
    double t1 = now_us();
    rss_t rss2 = rss_now();
    for (int i = 0; i < n; ++i) reqs[i] = lib_send(eps[i], &payload, sizeof(payload));
    for (int i = 0; i < n; ++i) lib_wait(w, reqs[i], "a send");
    lib_wait(w, lib_flush(w), "the worker flush");
    /* Every message arrived (connections fully established): the peer process says so. */
    struct pollfd pfd = {.fd = to_parent[0], .events = POLLIN};
    for (unsigned round = 0;; ++round) {
        lib_progress(w);
        if ((round & 63) == 0 && poll(&pfd, 1, 0) > 0) break;
    }
    char ack;
    if (read(to_parent[0], &ack, 1) != 1) die("waiting for the peers' receipt");
    double t2 = now_us();
    rss_t rss3 = rss_now();

    close(to_child[1]);
    int status;
    waitpid(child, &status, 0);
    printf("%ld %ld %.0f %.0f %.0f %.2f %.2f\n", rss1.anon - rss0.anon, rss1.shmem - rss0.shmem,
           (double)(rss2.anon - rss1.anon) / n, (double)(rss3.anon - rss1.anon) / n,
           (double)(rss3.shmem - rss1.shmem) / n, (t1 - t0) / n, (t2 - t1) / n);
    /* Endpoints and contexts are left to process exit: closing N endpoints needs the
     * peers, which are gone, and is not what is measured. */
    return 0;
}
