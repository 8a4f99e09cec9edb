/*
 * The flow-control test of the bound on unexpected messages (run_flow_rss.sh,
 * docs/reliability.md "Bounded memory for unexpected messages"), over the public C API.
 *
 * It forks into two processes joined by one endpoint each way (worker addresses exchanged
 * over pipes; the transports are LOOM_TLS's):
 *
 *   sender (child)     sends --bytes of --size messages (eager-sized: below the rendezvous
 *                      threshold), tag = sequence number, each filled with a pattern of its
 *                      sequence number, non-blocking with at most --window in flight,
 *                      progressing all the time;
 *   receiver (parent)  phase 1: posts NO receive, only progresses. Its senders are held back
 *                      once LOOM_UNEXPECTED_MAX bytes wait: the sends past the bound go by
 *                      rendezvous and stay in flight, so the sender's window fills and it
 *                      stalls. Phase 1 ends on that event (below), and its peak RSS (the
 *                      kernel's VmHWM, reset when the phase starts: exact, no sampling gap)
 *                      must stay under RSS at start + LOOM_UNEXPECTED_MAX + --slack;
 *                      phase 2: posts --window wildcard receives and receives every message,
 *                      checking that each is the next in sequence, of the right length and
 *                      intact; its peak RSS is measured the same way and held to the same
 *                      bound (receiving must not need more memory than refusing to).
 *
 * The stall is detected by events, not by time: a shared page holds both processes'
 * progress-call counts. The sender declares itself stalled when its window is full and
 * nothing completes while the receiver progresses --stall-rounds times after the sender
 * saw the window full, and then the sender itself --stall-rounds times. Whatever a
 * transport held when the window filled (a shm ring, socket buffers) is drained by those
 * receiver rounds (each consumes at least one message when one is there: 10,000 rounds
 * of 8 KiB are 78 MiB, more than the sockets' buffers and the ring hold), and the eager
 * sends queued for resources then go out in the sender's rounds and complete; only sends
 * that wait for a receive (rendezvous) stay. The sender must also have handed over at
 * least the bound: stalling earlier would mean the receiver never reached the bound, and
 * phase 1 would have tested nothing.
 *
 * The receiver prints one summary line ("flow_peer: ...") and exits 0 when everything held.
 * Every wait is bounded by --timeout (whole run); a peer that dies fails the endpoint (error
 * handling mode peer), so nothing hangs. A receiver whose RSS passes 4 times the limit in
 * phase 1 stops there: a broken bound fails the test, not the machine.
 *
 * Under AddressSanitizer (libasan loaded into the process) the default size is 1 GiB
 * instead of 10 GiB, to keep the instrumented run short; the summary says so.
 *
 *   flow_peer --probe   prints asan=1 in an ASan build, else asan=0
 *   flow_peer [--bytes N] [--size N] [--window N] [--slack N] [--stall-rounds N] [--timeout S]
 *   (sizes take k, m, g suffixes: KiB, MiB, GiB)
 */
#define _GNU_SOURCE /* RTLD_DEFAULT, getopt_long */
#include <loom/ucp.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const loom_tag_t kHelloTag = ~(loom_tag_t)0; /* data tags are sequence numbers, far below */
static const uint64_t kMiB = 1024 * 1024;

/* What the two processes share (an anonymous shared mapping made before fork). */
struct shared {
    _Atomic uint64_t recv_rounds;  /* the receiver's progress calls */
    _Atomic int go;                /* receiver: baseline taken, send */
    _Atomic int stalled;           /* sender: window full, nothing completes (phase 1 over) */
    _Atomic uint64_t stall_bytes;  /* sender: bytes whose sends had completed at the stall */
    _Atomic uint64_t stall_posted; /* sender: messages posted at the stall */
    _Atomic int sender_done;       /* sender: every send completed */
    _Atomic int receiver_done;     /* receiver: every message received */
};

struct options {
    uint64_t bytes, size, window, slack, stall_rounds;
    double timeout;
    int bytes_given;
};

static struct shared* g_sh;
static loom_worker_h g_worker;
static double g_end; /* absolute deadline of the whole run */
static const char* g_who = "flow_peer";
static int g_failures;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int parse_size(const char* s, uint64_t* out) {
    char* end;
    double v = strtod(s, &end);
    uint64_t mult = 1;
    if (end == s || v < 0) return -1;
    switch (*end) {
        case 'k': case 'K': mult = 1024; ++end; break;
        case 'm': case 'M': mult = kMiB; ++end; break;
        case 'g': case 'G': mult = 1024 * kMiB; ++end; break;
        case '\0': break;
        default: return -1;
    }
    if (*end != '\0') return -1;
    *out = (uint64_t)(v * (double)mult);
    return 0;
}

/* The pattern of message @p seq: one 64-bit word per 8 bytes, different in every message
 * and at every offset, so a lost, repeated, swapped or torn message shows. Word 0 is seq. */
static inline uint64_t word(uint64_t seq, size_t i) { return seq * 0x9E3779B97F4A7C15ull + i; }

static void fill(uint64_t* buf, size_t words, uint64_t seq) {
    for (size_t i = 0; i < words; ++i) buf[i] = word(seq, i);
    buf[0] = seq;
}

/* Index of the first wrong word, or words when intact. */
static size_t check(const uint64_t* buf, size_t words, uint64_t seq) {
    if (words > 0 && buf[0] != seq) return 0;
    for (size_t i = 1; i < words; ++i)
        if (buf[i] != word(seq, i)) return i;
    return words;
}

/* VmRSS or VmHWM of this process in bytes (0 when unreadable). */
static uint64_t proc_status_kb(const char* key) {
    char line[256];
    uint64_t kb = 0;
    size_t klen = strlen(key);
    FILE* f = fopen("/proc/self/status", "r");
    if (f == NULL) return 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            kb = strtoull(line + klen + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kb * 1024;
}

/* Resets the kernel's peak-RSS mark (VmHWM) to the current RSS: the next read of VmHWM is
 * then the exact peak since this call, whatever happened between samples. */
static int reset_peak(void) {
    int fd = open("/proc/self/clear_refs", O_WRONLY);
    int ok = fd >= 0 && write(fd, "5", 1) == 1;
    if (fd >= 0) close(fd);
    return ok ? 0 : -1;
}

static int timed_out(const char* what) {
    /* The clock is read every 1024th call only: progress loops call this once per round. */
    static unsigned calls;
    if ((++calls & 1023) != 0 || now_s() < g_end) return 0;
    fprintf(stderr, "%s: FAIL: timed out %s\n", g_who, what);
    return 1;
}

static void on_error(void* arg, loom_ep_h ep, loom_status_t status) {
    (void)arg;
    (void)ep;
    ++g_failures;
    fprintf(stderr, "%s: endpoint error callback: %s\n", g_who, loom_status_string(status));
}

/* One progress call. After 64 in a row that found nothing to do, the core goes to
 * whoever else wants it: the two processes may share one core (a loaded CI machine), and a
 * poller that keeps it while its peer waits for it only delays the event it polls for. Not
 * after every idle call: on a loaded machine each sched_yield can cost a time slice, and
 * the stall detection alone takes tens of thousands of idle calls. On an idle core
 * sched_yield returns at once. */
static void progress(void) {
    static unsigned idle;
    if (loom_worker_progress(g_worker) != 0)
        idle = 0;
    else if ((++idle & 63) == 0)
        sched_yield();
}

/* Progresses until @p r completes (its status) or the run's deadline (LOOM_ERR_TIMED_OUT). */
static loom_status_t wait_req(loom_status_ptr_t r, const char* what) {
    loom_status_t s;
    if (!LOOM_PTR_IS_PTR(r)) return LOOM_PTR_STATUS(r);
    while ((s = loom_request_check_status(r)) == LOOM_INPROGRESS) {
        progress();
        if (timed_out(what)) return LOOM_ERR_TIMED_OUT;
    }
    loom_request_free(r);
    return s;
}

/* --- set-up: fork, addresses over pipes, endpoints, a hello each way ---------------------- */

static int write_all(int fd, const void* p, size_t n) {
    const char* c = p;
    while (n > 0) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

static int read_all(int fd, void* p, size_t n) {
    char* c = p;
    while (n > 0) {
        ssize_t k = read(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Sends this worker's address on @p out, reads the peer's from @p in, creates the endpoint
 * and exchanges a hello message both ways, so both endpoints are wired up before the
 * receiver takes its baseline and the flow-control messages have their way back. */
static int connect_peer(int in, int out, loom_ep_h* ep) {
    void* mine;
    void* theirs;
    size_t mine_len, theirs_len;
    loom_ep_params_t params;
    uint64_t hello_out = 0x48454c4c4f, hello_in = 0;
    loom_status_ptr_t rr, sr;
    loom_request_param_t rp;
    int rc = -1;

    if (loom_worker_get_address(g_worker, &mine, &mine_len) != LOOM_OK) return -1;
    if (write_all(out, &mine_len, sizeof(mine_len)) != 0 || write_all(out, mine, mine_len) != 0) {
        loom_worker_release_address(g_worker, mine);
        return -1;
    }
    loom_worker_release_address(g_worker, mine);
    if (read_all(in, &theirs_len, sizeof(theirs_len)) != 0 || theirs_len > (1u << 20)) return -1;
    if ((theirs = malloc(theirs_len)) == NULL) return -1;
    if (read_all(in, theirs, theirs_len) != 0) goto out;
    memset(&params, 0, sizeof(params));
    params.field_mask = LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS | LOOM_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        LOOM_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = theirs;
    params.err_mode = LOOM_ERR_HANDLING_MODE_PEER; /* a dead peer fails requests instead of hanging them */
    params.err_handler.cb = on_error;
    if (loom_ep_create(g_worker, &params, ep) != LOOM_OK) goto out;
    memset(&rp, 0, sizeof(rp));
    rr = loom_tag_recv_nbx(g_worker, &hello_in, sizeof(hello_in), kHelloTag, ~(loom_tag_t)0, &rp);
    sr = loom_tag_send_nbx(*ep, &hello_out, sizeof(hello_out), kHelloTag, &rp);
    if (wait_req(sr, "sending the hello") != LOOM_OK || wait_req(rr, "receiving the hello") != LOOM_OK ||
        hello_in != hello_out) {
        fprintf(stderr, "%s: FAIL: the hello did not get through\n", g_who);
        goto out;
    }
    rc = 0;
out:
    free(theirs);
    return rc;
}

/* Closes @p ep: flushed after a good run, forced (cancelling what is left) after a failure. */
static void close_ep(loom_ep_h ep, int force) {
    loom_request_param_t rp;
    memset(&rp, 0, sizeof(rp));
    if (force) {
        rp.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
        rp.flags = LOOM_EP_CLOSE_FLAG_FORCE;
    }
    /* The peer may close first or be gone: whatever close returns is not the test's result. */
    (void)wait_req(loom_ep_close_nbx(ep, &rp), "closing the endpoint");
}

/* --- sender -------------------------------------------------------------------------------- */

struct slot {
    loom_status_ptr_t req; /* NULL: free */
    uint64_t* buf;
};

static int run_sender(const struct options* o, loom_ep_h ep) {
    const uint64_t total = o->bytes / o->size, words = o->size / 8;
    uint64_t posted = 0, completed = 0, done_bytes = 0, rounds = 0, in_flight = 0;
    /* The stall probe (see the comment at the top): 0 idle; 1 the window was seen full at
     * receiver round probe_theirs; 2 the receiver has since progressed stall_rounds times,
     * seen at my round probe_mine. Any completion starts it over. */
    int probe = 0;
    uint64_t probe_theirs = 0, probe_mine = 0;
    uint64_t bound = 0;
    const char* env = getenv("LOOM_UNEXPECTED_MAX");
    struct slot* slots = calloc(o->window, sizeof(*slots));
    int stalled = 0, rc = 1;

    if (env != NULL && strcmp(env, "inf") != 0 && parse_size(env, &bound) != 0) bound = 0;
    if (slots == NULL) return 1;
    for (uint64_t k = 0; k < o->window; ++k)
        if ((slots[k].buf = malloc(o->size)) == NULL) goto out;
    while (!atomic_load(&g_sh->go)) {
        progress();
        if (timed_out("waiting for the receiver's baseline")) goto out;
    }
    while (completed < total) {
        progress();
        ++rounds;
        for (uint64_t k = 0; k < o->window; ++k) {
            struct slot* sl = &slots[k];
            loom_status_t s;
            if (sl->req != NULL) {
                if ((s = loom_request_check_status(sl->req)) == LOOM_INPROGRESS) continue;
                loom_request_free(sl->req);
                sl->req = NULL;
                --in_flight;
                if (s != LOOM_OK) {
                    fprintf(stderr, "sender: FAIL: a send completed with %s\n", loom_status_string(s));
                    goto out;
                }
                ++completed;
                done_bytes += o->size;
                probe = 0;
            }
            if (posted == total) continue;
            fill(sl->buf, words, posted);
            loom_status_ptr_t r = loom_tag_send_nbx(ep, sl->buf, o->size, posted, NULL);
            ++posted;
            if (LOOM_PTR_IS_PTR(r)) {
                sl->req = r;
                ++in_flight;
            } else if ((s = LOOM_PTR_STATUS(r)) == LOOM_OK) {
                ++completed; /* sent at once: the buffer is free again */
                done_bytes += o->size;
                probe = 0;
            } else {
                fprintf(stderr, "sender: FAIL: a send failed at once: %s\n", loom_status_string(s));
                goto out;
            }
        }
        /* The stall (see the comment at the top). The two processes may share one core (a
         * loaded machine) and take turns: counting rounds since the last completion would
         * then see the sender spin while the receiver is off the core, and the receiver spin
         * while the sender is. So the receiver must progress stall_rounds times AFTER the
         * sender saw its window full (draining what the transport held then), and the
         * sender stall_rounds times after that (sending what then fits), with nothing
         * completing throughout. */
        if (!stalled && in_flight == o->window) {
            const uint64_t theirs = atomic_load(&g_sh->recv_rounds);
            if (probe == 0) {
                probe = 1;
                probe_theirs = theirs;
            } else if (probe == 1 && theirs - probe_theirs >= o->stall_rounds) {
                probe = 2;
                probe_mine = rounds;
            } else if (probe == 2 && rounds - probe_mine >= o->stall_rounds) {
                stalled = 1;
                atomic_store(&g_sh->stall_bytes, done_bytes);
                atomic_store(&g_sh->stall_posted, posted);
                atomic_store(&g_sh->stalled, 1);
                fprintf(stderr,
                        "sender: stalled: %llu in flight, %llu posted, %llu completed (%llu bytes%s); nothing "
                        "completed while the receiver progressed %llu times and then I did %llu times\n",
                        (unsigned long long)in_flight, (unsigned long long)posted,
                        (unsigned long long)completed, (unsigned long long)done_bytes,
                        done_bytes < bound ? ", UNDER THE BOUND" : "", (unsigned long long)(theirs - probe_theirs),
                        (unsigned long long)(rounds - probe_mine));
            }
        } else {
            probe = 0; /* room in the window: not stalled */
        }
        if (g_failures > 0) goto out;
        if (timed_out(stalled ? "sending (phase 2)" : "sending before the stall (phase 1)")) goto out;
    }
    if (!stalled) {
        /* The receiver waits for the stall: it never came, the sends all completed without a
         * receive, which is what the bound exists to prevent. */
        fprintf(stderr, "sender: FAIL: all %llu bytes were sent without any receive posted\n",
                (unsigned long long)done_bytes);
        atomic_store(&g_sh->stall_bytes, done_bytes);
        atomic_store(&g_sh->stall_posted, posted);
        atomic_store(&g_sh->stalled, 2);
        goto out;
    }
    rc = 0;
out:
    atomic_store(&g_sh->sender_done, rc == 0 ? 1 : 2);
    /* The receiver may still progress the last messages: wait for it before closing. */
    while (rc == 0 && !atomic_load(&g_sh->receiver_done) && g_failures == 0) {
        progress();
        if (timed_out("waiting for the receiver to finish")) break;
    }
    /* A send still in flight (failure path) is completed by the forced close. */
    close_ep(ep, rc != 0);
    for (uint64_t k = 0; k < o->window; ++k) {
        if (slots[k].req != NULL) (void)wait_req(slots[k].req, "a send to complete after the close");
        free(slots[k].buf);
    }
    free(slots);
    return rc;
}

/* --- receiver ------------------------------------------------------------------------------ */

struct rslot {
    loom_status_ptr_t req; /* the receive, or its status when it completed at once */
    loom_tag_recv_info_t info;
    uint64_t* buf;
};

static void post_recv(struct rslot* sl, uint64_t size) {
    loom_request_param_t rp;
    memset(&rp, 0, sizeof(rp));
    rp.op_attr_mask = LOOM_OP_ATTR_FIELD_RECV_INFO; /* info filled when it completes in the call */
    rp.recv_info.tag_recv = &sl->info;
    memset(&sl->info, 0, sizeof(sl->info));
    sl->buf[0] = ~(uint64_t)0; /* a receive that reports success without data shows */
    /* Any tag: the order of arrival is what is checked, not what the matcher can pick. */
    sl->req = loom_tag_recv_nbx(g_worker, sl->buf, size, 0, 0, &rp);
}

/* The receive's status: LOOM_INPROGRESS while it waits. */
static loom_status_t recv_state(struct rslot* sl) {
    loom_status_t s;
    if (!LOOM_PTR_IS_PTR(sl->req)) return LOOM_PTR_STATUS(sl->req);
    if ((s = loom_tag_recv_request_test(sl->req, &sl->info)) == LOOM_INPROGRESS) return s;
    loom_request_free(sl->req);
    sl->req = (loom_status_ptr_t)(intptr_t)s;
    return s;
}

static int run_receiver(const struct options* o, loom_ep_h ep, int asan, pid_t child) {
    const uint64_t total = o->bytes / o->size, words = o->size / 8;
    uint64_t bound = 0, expect = 0, start_rss, peak1, peak2, rss_stall, rss_end, rounds = 0;
    const char* env = getenv("LOOM_UNEXPECTED_MAX");
    const char* tls = getenv("LOOM_TLS");
    struct rslot* slots = calloc(o->window, sizeof(*slots));
    double t0, t_stall, t_end;
    int rc = 1, stalled, exact;
    uint64_t head = 0;

    if (env == NULL || strcmp(env, "inf") == 0 || parse_size(env, &bound) != 0) {
        fprintf(stderr, "receiver: FAIL: set LOOM_UNEXPECTED_MAX to a size: the bound this test checks\n");
        goto out;
    }
    if (slots == NULL) goto out;
    for (uint64_t k = 0; k < o->window; ++k)
        if ((slots[k].buf = malloc(o->size)) == NULL) goto out;
    /* Phase 2's buffers are touched now, so they are part of the baseline, not of the peak. */
    for (uint64_t k = 0; k < o->window; ++k) memset(slots[k].buf, 0, o->size);

    /* --- phase 1: no receive posted ----------------------------------------------------- */
    start_rss = proc_status_kb("VmRSS");
    exact = reset_peak() == 0;
    t0 = now_s();
    atomic_store(&g_sh->go, 1);
    while (!(stalled = atomic_load(&g_sh->stalled))) {
        progress();
        atomic_store_explicit(&g_sh->recv_rounds, ++rounds, memory_order_relaxed);
        if (g_failures > 0 || atomic_load(&g_sh->sender_done) == 2) goto out;
        if (timed_out("waiting for the sender to stall (phase 1)")) goto out;
        /* A receiver that keeps everything would grow to --bytes: stop it long before, so a
         * broken bound fails the test instead of the machine (and the check costs nothing
         * measurable every 4096 rounds). */
        if ((rounds & 4095) == 0 && proc_status_kb("VmRSS") > start_rss + 4 * (bound + o->slack)) {
            fprintf(stderr, "receiver: FAIL: RSS %.1f MiB in phase 1, 4 times over the bound: unbounded\n",
                    (double)proc_status_kb("VmRSS") / kMiB);
            goto out;
        }
    }
    t_stall = now_s();
    rss_stall = proc_status_kb("VmRSS");
    peak1 = exact ? proc_status_kb("VmHWM") : rss_stall;
    if (stalled != 1) {
        /* The sender sent everything without a receive posted: no backpressure at all. */
        fprintf(stderr, "receiver: FAIL: no backpressure: peak RSS %.1f MiB (start %.1f MiB)\n",
                (double)peak1 / kMiB, (double)start_rss / kMiB);
        goto out;
    }

    /* --- phase 2: receive everything, in order, intact ------------------------------------- */
    if (exact) reset_peak();
    for (uint64_t k = 0; k < o->window && k < total; ++k) post_recv(&slots[k], o->size);
    while (expect < total) {
        struct rslot* sl = &slots[head];
        loom_status_t s = recv_state(sl);
        if (s == LOOM_INPROGRESS) {
            progress();
            if (g_failures > 0 || atomic_load(&g_sh->sender_done) == 2) goto out;
            if (timed_out("receiving (phase 2)")) goto out;
            continue;
        }
        /* Receives are matched in the order they were posted, so slot head holds message expect. */
        if (s != LOOM_OK) {
            fprintf(stderr, "receiver: FAIL: message %llu: receive completed with %s\n",
                    (unsigned long long)expect, loom_status_string(s));
            goto out;
        }
        if (sl->info.sender_tag != expect || sl->info.length != o->size) {
            fprintf(stderr, "receiver: FAIL: message %llu expected, got tag %llu of %zu bytes (%s)\n",
                    (unsigned long long)expect, (unsigned long long)sl->info.sender_tag, sl->info.length,
                    sl->info.sender_tag < expect ? "repeated or late" : "one or more lost or reordered");
            goto out;
        }
        size_t bad = check(sl->buf, words, expect);
        if (bad != words) {
            fprintf(stderr, "receiver: FAIL: message %llu damaged at byte %zu\n", (unsigned long long)expect,
                    bad * 8);
            goto out;
        }
        ++expect;
        if (expect + o->window - 1 < total) post_recv(sl, o->size);
        head = (head + 1) % o->window;
    }
    t_end = now_s();
    rss_end = proc_status_kb("VmRSS");
    peak2 = exact ? proc_status_kb("VmHWM") : rss_end;
    atomic_store(&g_sh->receiver_done, 1);
    /* The sender's last sends complete once this side acknowledges them: progress until then. */
    while (atomic_load(&g_sh->sender_done) == 0 && g_failures == 0) {
        progress();
        if (timed_out("waiting for the sender's last completions")) goto out;
    }

    {
        const uint64_t limit = start_rss + bound + o->slack;
        const uint64_t sent1 = atomic_load(&g_sh->stall_bytes);
        const int ok1 = peak1 <= limit, ok2 = peak2 <= limit, ok_sent = sent1 >= bound,
                  ok_done = atomic_load(&g_sh->sender_done) == 1;
        printf("flow_peer: tls=%s bytes=%llu messages=%llu size=%llu window=%llu%s | phase 1 (no receive "
               "posted): sender stalled after %.1f MiB in %.1f s, receiver RSS start %.1f MiB peak %.1f MiB "
               "(+%.1f MiB) bound +%.1f MiB (LOOM_UNEXPECTED_MAX %.1f MiB + slack %.1f MiB)%s | phase 2: "
               "all %llu received in order and intact in %.1f s (%.0f MiB/s), peak RSS %.1f MiB | total "
               "%.1f s | %s\n",
               tls != NULL ? tls : "(all)", (unsigned long long)(total * o->size), (unsigned long long)total,
               (unsigned long long)o->size, (unsigned long long)o->window,
               asan && !o->bytes_given ? " (ASan build: 1 GiB instead of 10 GiB)" : "",
               (double)sent1 / kMiB, t_stall - t0, (double)start_rss / kMiB, (double)peak1 / kMiB,
               ((double)peak1 - (double)start_rss) / kMiB, (double)(bound + o->slack) / kMiB,
               (double)bound / kMiB, (double)o->slack / kMiB, exact ? "" : " [VmHWM not resettable: RSS at the stall, not the peak]",
               (unsigned long long)total, t_end - t_stall,
               (double)(total * o->size) / kMiB / (t_end - t_stall), (double)peak2 / kMiB, t_end - t0,
               ok1 && ok2 && ok_sent && ok_done ? "PASS" : "FAIL");
        if (!ok1) printf("receiver: FAIL: phase 1 peak RSS over the bound by %.1f MiB\n", (double)(peak1 - limit) / kMiB);
        if (!ok2) printf("receiver: FAIL: phase 2 peak RSS over the bound by %.1f MiB\n", (double)(peak2 - limit) / kMiB);
        if (!ok_sent) printf("receiver: FAIL: the sender stalled before the bound was reached: nothing tested\n");
        if (!ok_done) printf("receiver: FAIL: the sender did not complete every send\n");
        rc = ok1 && ok2 && ok_sent && ok_done ? 0 : 1;
    }
out:
    fflush(stdout);
    if (rc != 0 && expect < total) {
        fprintf(stderr, "receiver: stopped at message %llu of %llu; stall flag %d after %llu bytes\n",
                (unsigned long long)expect, (unsigned long long)total, atomic_load(&g_sh->stalled),
                (unsigned long long)atomic_load(&g_sh->stall_bytes));
        kill(child, SIGTERM); /* do not leave the sender waiting out its timeout */
    }
    atomic_store(&g_sh->receiver_done, rc == 0 ? 1 : 2);
    for (uint64_t k = 0; slots != NULL && k < o->window; ++k) {
        if (LOOM_PTR_IS_PTR(slots[k].req)) {
            loom_request_cancel(g_worker, slots[k].req);
            (void)wait_req(slots[k].req, "cancelling a receive");
        }
    }
    close_ep(ep, rc != 0);
    for (uint64_t k = 0; slots != NULL && k < o->window; ++k) free(slots[k].buf);
    free(slots);
    return rc;
}

/* --- main ---------------------------------------------------------------------------------- */

static int usage(const char* argv0) {
    fprintf(stderr,
            "usage: %s [--bytes N] [--size N] [--window N] [--slack N] [--stall-rounds N] [--timeout S]\n"
            "  LOOM_UNEXPECTED_MAX must be set (the bound checked); sizes take k, m, g suffixes\n",
            argv0);
    return 2;
}

/* One process's Loom: context, worker, endpoint to the other side, then its part. */
static int run_side(const struct options* o, int is_sender, int in, int out, int asan, pid_t child) {
    loom_params_t params;
    loom_context_h ctx;
    loom_ep_h ep;
    int rc = 1;
    memset(&params, 0, sizeof(params));
    params.field_mask = LOOM_PARAM_FIELD_FEATURES;
    params.features = LOOM_FEATURE_TAG;
    if (loom_init(&params, &ctx) != LOOM_OK) return 1;
    if (loom_worker_create(ctx, NULL, &g_worker) == LOOM_OK) {
        if (connect_peer(in, out, &ep) == 0)
            rc = is_sender ? run_sender(o, ep) : run_receiver(o, ep, asan, child);
        loom_worker_destroy(g_worker);
    }
    loom_cleanup(ctx);
    return rc;
}

int main(int argc, char** argv) {
    static const struct option longopts[] = {
        {"bytes", required_argument, NULL, 'b'},  {"size", required_argument, NULL, 's'},
        {"window", required_argument, NULL, 'w'}, {"slack", required_argument, NULL, 'S'},
        {"stall-rounds", required_argument, NULL, 'r'}, {"timeout", required_argument, NULL, 't'},
        {"probe", no_argument, NULL, 'p'},         {NULL, 0, NULL, 0}};
    /* libasan is in the process when the libraries (or this program) are instrumented. */
    const int asan = dlsym(RTLD_DEFAULT, "__asan_init") != NULL;
    struct options o = {.bytes = (asan ? 1ull : 10ull) << 30, .size = 8192, .window = 64,
                        .slack = 8 * kMiB, .stall_rounds = 10000, .timeout = 300};
    int opt, to_sender[2], to_receiver[2], status, rc;
    pid_t child;

    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        uint64_t v = 0;
        if (opt == 'p') { /* for the driver: which build is this? */
            printf("asan=%d\n", asan);
            return 0;
        }
        if (opt == 't') {
            o.timeout = atof(optarg);
            continue;
        }
        if (opt == '?' || parse_size(optarg, &v) != 0) return usage(argv[0]);
        switch (opt) {
            case 'b': o.bytes = v; o.bytes_given = 1; break;
            case 's': o.size = v; break;
            case 'w': o.window = v; break;
            case 'S': o.slack = v; break;
            case 'r': o.stall_rounds = v; break;
        }
    }
    if (optind != argc || o.size < 8 || o.size % 8 != 0 || o.window == 0 || o.bytes < o.size)
        return usage(argv[0]);
    g_sh = mmap(NULL, sizeof(*g_sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_sh == MAP_FAILED || pipe(to_sender) != 0 || pipe(to_receiver) != 0) {
        perror("flow_peer: set-up");
        return 1;
    }
    g_end = now_s() + o.timeout;
    fflush(stdout);
    if ((child = fork()) < 0) {
        perror("flow_peer: fork");
        return 1;
    }
    if (child == 0) {
        g_who = "sender";
        /* A receiver killed by the driver's timeout takes its sender with it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(to_sender[1]);
        close(to_receiver[0]);
        _exit(run_side(&o, 1, to_sender[0], to_receiver[1], asan, 0));
    }
    g_who = "receiver";
    close(to_sender[0]);
    close(to_receiver[1]);
    rc = run_side(&o, 0, to_receiver[0], to_sender[1], asan, child);
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "receiver: the sender ended with status 0x%x\n", status);
        rc = 1;
    }
    return rc;
}
