/*
 * One process of the all-to-all scale test (test/scale/run_alltoall.sh, issue 18): it hosts
 * W workers; every worker of every process connects to every other worker of every process
 * (its own process's other workers too), sends each one small tagged message and receives
 * one from each, checking every byte.
 *
 *   alltoall_peer -i ID -n NPROCS -w WORKERS -d DIR [-t BOUND]
 *
 * DIR is shared by the processes: addr.ID holds process ID's worker addresses (written to
 * a temporary name and renamed, so a reader never sees half a file); done.ID says process
 * ID has received everything (endpoints are closed only once every process has, so a close
 * never races a peer's last receive). Waits for files progress the workers between looks
 * (no fixed sleeps decide anything); every wait is bounded by BOUND seconds (default 60):
 * past it the process prints what it was waiting for and exits 1, never hangs.
 *
 * Message from global worker s to global worker d: tag s, kMsgLen bytes, byte k being
 * pattern(s, d, k), so a message delivered to the wrong worker or corrupted fails.
 *
 * Prints one machine-readable line per process:
 *   "alltoall id=ID workers=W eps=E anon_before=B ep_anon_created=C ep_anon_exchanged=X
 *    create_us_per_ep=U wireup_us_per_ep=V"
 * (bytes per endpoint from RssAnon of /proc/self/status; wire-up = creating every
 * endpoint up to every message sent and received, divided by the endpoints), and with -P
 * the time of one loom_worker_progress on worker 0 once its endpoints are connected and
 * idle: "idle_progress id=ID eps_per_worker=N ns_per_progress=T".
 * Exits 0 only when every message arrived intact and every endpoint closed cleanly.
 */
#define _POSIX_C_SOURCE 200809L
#include <loom/ucp.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { kMsgLen = 32, kMaxAddr = 4096 };

static int g_id, g_nprocs, g_w, g_total;
static const char* g_dir;
static double g_bound = 60.0, g_start;
static loom_context_h g_ctx;
static loom_worker_h* g_workers;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char* what) {
    fprintf(stderr, "alltoall_peer %d: %.1f s: FAILED: %s\n", g_id, now_s() - g_start, what);
    exit(1);
}

/* The byte k of the message from global worker s to global worker d. */
static uint8_t pattern(int s, int d, int k) {
    return (uint8_t)(s * 131 + d * 7 + k * 29 + 1);
}

static void progress_all(void) {
    for (int i = 0; i < g_w; ++i) loom_worker_progress(g_workers[i]);
}

/* Fails the process once the bound has passed since the start. */
static void check_bound(const char* waiting_for) {
    if (now_s() - g_start > g_bound) {
        char msg[256];
        snprintf(msg, sizeof(msg), "still waiting for %s after %.0f s", waiting_for, g_bound);
        die(msg);
    }
}

/* Waits until DIR/NAME exists, progressing the workers meanwhile (peers may need them to
 * finish their own part). */
static void wait_file(const char* name) {
    char path[4096];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    while (stat(path, &st) != 0) {
        progress_all();
        check_bound(name);
        /* A short pause between looks keeps 8 waiting processes from eating 2 cores; it
         * decides nothing: the file's existence does. */
        struct timespec ts = {0, 200 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Writes @p len bytes to DIR/NAME atomically (temporary name, then rename). */
static void write_file(const char* name, const void* buf, size_t len) {
    char tmp[4096], path[4096];
    snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", g_dir, name);
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    FILE* f = fopen(tmp, "wb");
    if (f == NULL || fwrite(buf, 1, len, f) != len || fclose(f) != 0) die("writing a file");
    if (rename(tmp, path) != 0) die("renaming a file");
}

/* Private resident bytes (RssAnon): what the process itself costs. */
static long rss_anon(void) {
    long kb = -1;
    char line[256];
    FILE* f = fopen("/proc/self/status", "r");
    if (f == NULL) die("opening /proc/self/status");
    while (fgets(line, sizeof(line), f) != NULL) sscanf(line, "RssAnon: %ld kB", &kb);
    fclose(f);
    if (kb < 0) die("reading RssAnon");
    return kb * 1024;
}

/* True once @p r (a request or an immediate status) is complete; fails on an error. */
static int req_done(void* r, const char* what) {
    if (!LOOM_PTR_IS_PTR(r)) {
        if (LOOM_PTR_STATUS(r) != LOOM_OK) die(what);
        return 1;
    }
    loom_status_t s = loom_request_check_status(r);
    if (s == LOOM_INPROGRESS) return 0;
    loom_request_free(r);
    if (s != LOOM_OK) die(what);
    return 1;
}

/* Progresses until every request of @p reqs (NULL once done) is complete. */
static void wait_all(void** reqs, size_t n, const char* what) {
    size_t left = n;
    while (left > 0) {
        left = 0;
        for (size_t i = 0; i < n; ++i) {
            if (reqs[i] == NULL) continue;
            if (req_done(reqs[i], what))
                reqs[i] = NULL;
            else
                ++left;
        }
        if (left > 0) {
            progress_all();
            check_bound(what);
        }
    }
}

int main(int argc, char** argv) {
    int opt, idle_bench = 0;
    while ((opt = getopt(argc, argv, "i:n:w:d:t:P")) != -1) {
        switch (opt) {
            case 'i':
                g_id = atoi(optarg);
                break;
            case 'n':
                g_nprocs = atoi(optarg);
                break;
            case 'w':
                g_w = atoi(optarg);
                break;
            case 'd':
                g_dir = optarg;
                break;
            case 't':
                g_bound = atof(optarg);
                break;
            case 'P':
                idle_bench = 1;
                break;
            default:
                fprintf(stderr, "usage: alltoall_peer -i ID -n NPROCS -w WORKERS -d DIR [-t BOUND] [-P]\n");
                return 2;
        }
    }
    if (g_nprocs < 1 || g_w < 1 || g_dir == NULL || g_id < 0 || g_id >= g_nprocs) {
        fprintf(stderr, "alltoall_peer: bad arguments\n");
        return 2;
    }
    g_start = now_s();
    g_total = g_nprocs * g_w;
    const int eps_per_worker = g_total - 1;
    const size_t n_eps = (size_t)g_w * (size_t)eps_per_worker;

    loom_params_t cp = {0};
    cp.field_mask = LOOM_PARAM_FIELD_FEATURES;
    cp.features = LOOM_FEATURE_TAG;
    if (loom_init(&cp, &g_ctx) != LOOM_OK) die("loom_init");
    g_workers = calloc((size_t)g_w, sizeof(*g_workers));

    /* Addresses of this process's workers, one file: "len" then bytes, per worker. */
    size_t blob_len = 0;
    uint8_t* blob = malloc((size_t)g_w * (kMaxAddr + sizeof(uint32_t)));
    for (int i = 0; i < g_w; ++i) {
        loom_worker_params_t wp = {0};
        wp.field_mask = LOOM_WORKER_PARAM_FIELD_THREAD_MODE;
        wp.thread_mode = LOOM_THREAD_MODE_SINGLE;
        if (loom_worker_create(g_ctx, &wp, &g_workers[i]) != LOOM_OK) die("loom_worker_create");
        void* a;
        size_t alen;
        if (loom_worker_get_address(g_workers[i], &a, &alen) != LOOM_OK) die("loom_worker_get_address");
        if (alen > kMaxAddr) die("worker address too long");
        uint32_t l32 = (uint32_t)alen;
        memcpy(blob + blob_len, &l32, sizeof(l32));
        memcpy(blob + blob_len + sizeof(l32), a, alen);
        blob_len += sizeof(l32) + alen;
        loom_worker_release_address(g_workers[i], a);
    }
    char name[64];
    snprintf(name, sizeof(name), "addr.%d", g_id);
    write_file(name, blob, blob_len);

    /* Everyone's addresses, by global worker id. */
    uint8_t** addrs = calloc((size_t)g_total, sizeof(*addrs));
    for (int p = 0; p < g_nprocs; ++p) {
        snprintf(name, sizeof(name), "addr.%d", p);
        wait_file(name);
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", g_dir, name);
        FILE* f = fopen(path, "rb");
        if (f == NULL) die("opening an address file");
        for (int i = 0; i < g_w; ++i) {
            uint32_t l32;
            if (fread(&l32, sizeof(l32), 1, f) != 1 || l32 > kMaxAddr) die("reading an address file");
            addrs[p * g_w + i] = malloc(l32);
            if (fread(addrs[p * g_w + i], 1, l32, f) != l32) die("reading an address file");
        }
        fclose(f);
    }

    loom_ep_h* eps = calloc(n_eps, sizeof(*eps));
    void** sreqs = calloc(n_eps, sizeof(*sreqs));
    void** rreqs = calloc(n_eps, sizeof(*rreqs));
    uint8_t* sbuf = malloc(n_eps * kMsgLen);
    uint8_t* rbuf = malloc(n_eps * kMsgLen);
    if (!eps || !sreqs || !rreqs || !sbuf || !rbuf) die("malloc");
    memset(rbuf, 0, n_eps * kMsgLen);
    /* Touch the buffers now so that their pages are not counted as endpoint memory. */
    memset(sbuf, 0, n_eps * kMsgLen);
    memset(eps, 0, n_eps * sizeof(*eps));
    memset(sreqs, 0, n_eps * sizeof(*sreqs));
    memset(rreqs, 0, n_eps * sizeof(*rreqs));

    /* Receives first: one per other worker, matched by the sender's id as the tag. */
    for (int i = 0; i < g_w; ++i) {
        int me = g_id * g_w + i;
        size_t k = 0;
        for (int s = 0; s < g_total; ++s) {
            if (s == me) continue;
            size_t slot = (size_t)i * eps_per_worker + k++;
            loom_request_param_t rp = {0};
            rreqs[slot] = loom_tag_recv_nbx(g_workers[i], rbuf + slot * kMsgLen, kMsgLen, (loom_tag_t)s,
                                            ~(loom_tag_t)0, &rp);
            if (LOOM_PTR_IS_ERR(rreqs[slot])) die("loom_tag_recv_nbx");
        }
    }

    const long anon_before = rss_anon();
    const double t0 = now_s();
    for (int i = 0; i < g_w; ++i) {
        int me = g_id * g_w + i;
        size_t k = 0;
        for (int d = 0; d < g_total; ++d) {
            if (d == me) continue;
            size_t slot = (size_t)i * eps_per_worker + k++;
            loom_ep_params_t ep = {0};
            ep.field_mask = LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS;
            ep.address = addrs[d];
            if (loom_ep_create(g_workers[i], &ep, &eps[slot]) != LOOM_OK) die("loom_ep_create");
        }
    }
    const double t_created = now_s();
    const long anon_created = rss_anon();

    for (int i = 0; i < g_w; ++i) {
        int me = g_id * g_w + i;
        size_t k = 0;
        for (int d = 0; d < g_total; ++d) {
            if (d == me) continue;
            size_t slot = (size_t)i * eps_per_worker + k++;
            uint8_t* b = sbuf + slot * kMsgLen;
            for (int j = 0; j < kMsgLen; ++j) b[j] = pattern(me, d, j);
            loom_request_param_t sp = {0};
            sreqs[slot] = loom_tag_send_nbx(eps[slot], b, kMsgLen, (loom_tag_t)me, &sp);
            if (LOOM_PTR_IS_ERR(sreqs[slot])) die("loom_tag_send_nbx");
        }
    }
    wait_all(sreqs, n_eps, "sends");
    wait_all(rreqs, n_eps, "receives");
    const double t_exchanged = now_s();
    const long anon_exchanged = rss_anon();

    /* Every byte of every message: the receive slot of sender s at worker me. */
    size_t bad = 0;
    for (int i = 0; i < g_w; ++i) {
        int me = g_id * g_w + i;
        size_t k = 0;
        for (int s = 0; s < g_total; ++s) {
            if (s == me) continue;
            const uint8_t* b = rbuf + ((size_t)i * eps_per_worker + k++) * kMsgLen;
            for (int j = 0; j < kMsgLen; ++j) {
                if (b[j] != pattern(s, me, j)) {
                    if (bad < 5)
                        fprintf(stderr, "alltoall_peer %d: bad byte %d from %d to %d\n", g_id, j, s, me);
                    ++bad;
                    break;
                }
            }
        }
    }
    if (bad > 0) die("corrupted messages");

    printf(
        "alltoall id=%d workers=%d eps=%zu anon_before=%ld ep_anon_created=%.0f ep_anon_exchanged=%.0f "
        "create_us_per_ep=%.2f wireup_us_per_ep=%.2f\n",
        g_id, g_w, n_eps, anon_before, (double)(anon_created - anon_before) / (double)n_eps,
        (double)(anon_exchanged - anon_before) / (double)n_eps, (t_created - t0) * 1e6 / (double)n_eps,
        (t_exchanged - t0) * 1e6 / (double)n_eps);
    fflush(stdout);

    if (idle_bench) {
        /* Worker 0's endpoints are connected and idle now: what one progress call costs. */
        enum { kCalls = 20000 };
        for (int c = 0; c < 1000; ++c) loom_worker_progress(g_workers[0]);
        double p0 = now_s();
        for (int c = 0; c < kCalls; ++c) loom_worker_progress(g_workers[0]);
        double p1 = now_s();
        printf("idle_progress id=%d eps_per_worker=%d ns_per_progress=%.1f\n", g_id, eps_per_worker,
               (p1 - p0) * 1e9 / kCalls);
        fflush(stdout);
    }

    /* Close only once everyone has received everything (see the head comment). */
    snprintf(name, sizeof(name), "done.%d", g_id);
    write_file(name, "", 0);
    for (int p = 0; p < g_nprocs; ++p) {
        snprintf(name, sizeof(name), "done.%d", p);
        wait_file(name);
    }
    for (size_t e = 0; e < n_eps; ++e) {
        loom_request_param_t clp = {0};
        sreqs[e] = loom_ep_close_nbx(eps[e], &clp);
        if (LOOM_PTR_IS_ERR(sreqs[e])) die("loom_ep_close_nbx");
    }
    wait_all(sreqs, n_eps, "endpoint closes");
    /* Peers may still be closing their endpoints to us: keep progressing until all are. */
    snprintf(name, sizeof(name), "closed.%d", g_id);
    write_file(name, "", 0);
    for (int p = 0; p < g_nprocs; ++p) {
        snprintf(name, sizeof(name), "closed.%d", p);
        wait_file(name);
    }
    for (int i = 0; i < g_w; ++i) loom_worker_destroy(g_workers[i]);
    loom_cleanup(g_ctx);
    for (int t = 0; t < g_total; ++t) free(addrs[t]);
    free(addrs);
    free(blob);
    free(eps);
    free(sreqs);
    free(rreqs);
    free(sbuf);
    free(rbuf);
    free(g_workers);
    return 0;
}
