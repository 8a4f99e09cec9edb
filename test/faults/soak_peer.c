/*
 * One process of the soak (contrib/bench/soak.py, docs/reliability.md "Soak"): a worker
 * with a listener that connects to every other process of the soak and sends them random
 * mixed traffic over the public C API, checking everything it receives.
 *
 *   soak_peer -i ID -n NPROCS -g INCARNATION -d DIR [-s SEED] [-t BOUND] [-k CHANNELS] [-T MAX] [-a ADDR]
 *
 * CHANNELS: the letters of the kinds of traffic sent (default "tasr": tag, am, stream, rma);
 * MAX: the largest tagged message (default 4 MiB). Both narrow a failure down. ADDR: the IPv4
 * address this process listens on and others connect to (default 127.0.0.1; another when
 * the processes live on different simulated hosts, test/faults/run_soak_netem.sh).
 *
 * DIR is shared with soak.py and the other processes:
 *   port.ID             "PORT INCARNATION ADDR" of process ID's listener (written by it);
 *   killed.ID.INC       made by soak.py before it kills incarnation INC of process ID: an
 *                       error on an endpoint to a killed incarnation is expected, any other
 *                       error is not;
 *   stop                made by soak.py at the end: stop sending, drain, say goodbye, exit;
 *   stats.ID.INC.json   this process's counters, rewritten every second and at exit.
 *
 * One endpoint per pair of processes (the lower id connects), error handling mode peer.
 * The first record on its stream is a hello naming the sender (this is how the accepting
 * side learns who connected), then an active message carries the packed remote key of a
 * region every peer puts to and gets from. Traffic, up to kWindow operations in flight
 * per peer, sizes log-uniform:
 *   tag     8 B .. 4 MiB (eager and rendezvous); the tag holds sender, incarnation and
 *           sequence number; received by a ring of wildcard receives, checked in order;
 *   am      8 B .. 1 MiB (eager and rendezvous, fetched with loom_am_recv_data_nbx);
 *   stream  records of 8 B .. 256 KiB behind a 32-byte header;
 *   rma     put 8 B .. 256 KiB into this process's own slot of the peer's region, flush,
 *           get it back and compare.
 * Every payload ends with a checksum of the rest and of (channel, sender, incarnation,
 * sequence, length); tag, am and stream are checked in order per sender incarnation.
 * At the end each side sends a FIN with its counts per channel; the receiver compares
 * them with what it got (a difference is "lost") and answers DONE.
 * Every wait is bounded by BOUND seconds (default 30): past it the operation counts as an
 * unexpected error ("stalled"), never a hang.
 */
#define _POSIX_C_SOURCE 200809L
#include <loom/ucp.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum {
    kMaxPeers = 8,
    kMaxInc = 1024,
    kWindow = 4,
    kRing = 4,
    kMaxPending = 64,
    kMaxLog = 20,
    kRkeyMax = 1024
};
enum { kTagMax = 4u << 20, kAmMax = 1u << 20, kStreamMax = 256u << 10, kRmaMax = 256u << 10 };
enum { kAmData = 1, kAmRkey = 2, kAmFin = 3, kAmDone = 4 };
enum { kChTag = 1, kChAm = 2, kChStream = 3, kChRma = 4 };
enum { kMagicData = 0x534f414b, kMagicHello = 0x48454c4f };

static const uint64_t kTagDataMask = 3ull << 62; /* channel bits: 0 = data */

/* The header of an active message and of a stream record. */
struct hdr {
    uint32_t magic;
    uint16_t src, inc;
    uint64_t seq, len, aux;
};

struct counts {
    uint64_t tag, am, stream;
};

/* --- globals ---------------------------------------------------------------------------- */

static loom_context_h g_ctx;
static loom_worker_h g_worker;
static loom_listener_h g_listener;
static int g_id, g_n, g_inc;
static const char* g_dir;
static double g_bound = 30.0, g_start;
static uint64_t g_rand;
static int g_stopping;
static const char* g_kinds = "tasr"; /* -k: the channels used (tag, am, stream, rma) */
static struct in_addr g_addr;        /* -a: where this process listens (127.0.0.1 by default) */
static size_t g_tag_max = kTagMax;   /* -T: the largest tagged message */

static struct {
    uint64_t msgs_sent, bytes_sent, msgs_rcvd, bytes_rcvd;
    uint64_t by_ch[5];
    uint64_t expected_errors, unexpected_errors, lost, corrupted, reconnects, expected_gaps;
} g_st;
static char g_log[kMaxLog][200];
static int g_nlog;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rnd(void) { /* xorshift64* */
    g_rand ^= g_rand >> 12;
    g_rand ^= g_rand << 25;
    g_rand ^= g_rand >> 27;
    return g_rand * 2685821657736338717ull;
}

/* An unexpected event: counted, logged to stderr, and the first few kept for the report. */
static void unexpected(const char* fmt, ...) {
    va_list ap;
    char line[200];
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    ++g_st.unexpected_errors;
    fprintf(stderr, "soak_peer %d.%d: %.1f s: UNEXPECTED: %s\n", g_id, g_inc, now_s() - g_start, line);
    if (g_nlog < kMaxLog) snprintf(g_log[g_nlog++], sizeof(g_log[0]), "%s", line);
}

/* --- payloads ----------------------------------------------------------------------------- */

static uint64_t mix(uint64_t x) { /* splitmix64's finalizer */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t key_of(int ch, int src, int inc, uint64_t seq, uint64_t len) {
    return mix(((uint64_t)ch << 56) ^ ((uint64_t)src << 48) ^ ((uint64_t)inc << 32) ^ seq) ^ mix(len + 1);
}

static uint64_t hash(const uint8_t* p, size_t n, uint64_t h) {
    size_t i;
    uint64_t w;
    for (i = 0; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    for (; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Fills @p len (>= 8) bytes: pseudo-random data, then the checksum of it and of the key. */
static void fill(uint8_t* p, size_t len, uint64_t key) {
    uint64_t s = key | 1, c;
    size_t i;
    for (i = 0; i + 8 <= len - 8; i += 8) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        memcpy(p + i, &s, 8);
    }
    for (; i < len - 8; ++i) p[i] = (uint8_t)(i * 7u);
    c = hash(p, len - 8, key);
    memcpy(p + len - 8, &c, 8);
}

static int intact(const uint8_t* p, size_t len, uint64_t key) {
    uint64_t c;
    if (len < 8) return 0;
    memcpy(&c, p + len - 8, 8);
    return c == hash(p, len - 8, key);
}

static size_t rand_size(size_t max) { /* log-uniform from 8 B */
    unsigned k = 0, top = 0;
    size_t lo;
    while ((8u << (top + 1)) <= max) ++top;
    k = (unsigned)(rnd() % (top + 1));
    lo = (size_t)8 << k;
    lo += rnd() % lo;
    return lo > max ? max : lo;
}

/* --- what soak.py tells us through DIR ------------------------------------------------------ */

static unsigned char g_killed[kMaxPeers][kMaxInc]; /* 1: killed (cached), 0: not known */

static int killed(int id, int inc) {
    char path[512];
    struct stat sb;
    if (id < 0 || id >= kMaxPeers || inc < 0 || inc >= kMaxInc) return 0;
    if (g_killed[id][inc]) return 1;
    snprintf(path, sizeof(path), "%s/killed.%d.%d", g_dir, id, inc);
    if (stat(path, &sb) == 0) g_killed[id][inc] = 1;
    return g_killed[id][inc];
}

/* Whether any process was killed in the last BOUND seconds (for an error whose sender is unknown). */
static int recent_kill(void) {
    char path[512];
    struct stat sb;
    struct timespec ts;
    snprintf(path, sizeof(path), "%s/lastkill", g_dir);
    if (stat(path, &sb) != 0) return 0;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec - (double)sb.st_mtime < g_bound + 2;
}

static int read_port(int id, unsigned* port, int* inc, struct in_addr* addr) {
    char path[512], text[64];
    FILE* f;
    int ok;
    snprintf(path, sizeof(path), "%s/port.%d", g_dir, id);
    if ((f = fopen(path, "r")) == NULL) return 0;
    ok = fscanf(f, "%u %d %63s", port, inc, text) == 3 && inet_pton(AF_INET, text, addr) == 1;
    fclose(f);
    return ok;
}

static void write_file(const char* name, const char* text) { /* atomically, by rename */
    char path[512], tmp[520];
    FILE* f;
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    snprintf(tmp, sizeof(tmp), "%s.tmp%d", path, g_id);
    if ((f = fopen(tmp, "w")) == NULL) return;
    fputs(text, f);
    if (fclose(f) == 0) rename(tmp, path);
}

/* --- connections and peers ------------------------------------------------------------------ */

/* One endpoint, and what arrives on its stream. Its error callback's argument. */
struct conn {
    loom_ep_h ep;
    int peer, inc; /* -1 until the hello on an accepted endpoint */
    int failures;
    loom_status_t status;
    /* stream receive: a header, then its payload */
    loom_status_ptr_t srx;
    int srx_phase; /* 0 header, 1 payload */
    size_t srx_len;
    int srx_imm;  /* the last receive completed in the call */
    int srx_over; /* the stream ended with an error: nothing more to receive */
    struct hdr srx_hdr;
    uint8_t* srx_buf;
    int hello_seen, started;
};

struct op {
    int kind; /* 0 free, else kCh* */
    int phase;
    loom_status_ptr_t req;
    size_t len;
    uint64_t seq;
    double t0;
    int stalled;
    struct hdr hdr;
    uint8_t *out, *in;
};

enum { kDown, kUp, kFailing };

struct peer {
    int state;
    struct conn* conn;
    struct conn* next; /* an accepted endpoint of a newer incarnation, waiting for the old one to go */
    double fail_t0;
    struct counts tx;
    uint64_t tx_rma;
    struct op ops[kWindow];
    loom_rkey_h rkey;
    uint64_t raddr;
    /* the latest packed key received, for incarnation rkey_inc */
    uint8_t rkey_buf[kRkeyMax];
    size_t rkey_len;
    int rkey_inc;
    uint64_t rkey_addr;
    /* end of the run */
    loom_status_ptr_t fin_req, done_req;
    int fin_sent, done_sent, done_rcvd;
    struct hdr fin_hdr, done_hdr;
    struct counts fin_payload;
    int last_port_inc; /* the client's: incarnation last connected to */
    int left;          /* it sent everything (its FIN came) and exited at the end */
    double killed_t0;  /* when its incarnation was seen killed while its endpoint was still up */
};

/* What this process received from incarnation inc of process src. */
struct rx {
    struct counts next; /* next sequence number per channel */
    struct counts fin;
    int fin_rcvd;
};

static struct peer g_peers[kMaxPeers];
static struct rx g_rx[kMaxPeers][kMaxInc];
static struct conn* g_accepted[kMaxPeers * 4]; /* accepted, not yet identified */
static loom_mem_h g_memh;
static void* g_region;
static void* g_rkey_packed;
static size_t g_rkey_size;

static struct rx* rx_of(int src, int inc) {
    if (src < 0 || src >= g_n || src == g_id || inc < 0 || inc >= kMaxInc) return NULL;
    return &g_rx[src][inc];
}

static void on_error(void* arg, loom_ep_h ep, loom_status_t status) {
    struct conn* c = arg;
    (void)ep;
    ++c->failures;
    c->status = status;
}

static void set_err_mode(loom_ep_params_t* params, struct conn* c) {
    params->field_mask |= LOOM_EP_PARAM_FIELD_ERR_HANDLING_MODE | LOOM_EP_PARAM_FIELD_ERR_HANDLER;
    params->err_mode = LOOM_ERR_HANDLING_MODE_PEER;
    params->err_handler.cb = on_error;
    params->err_handler.arg = c;
}

/* At the end: incarnation @p inc of @p peer sent its FIN and we have all it counted. */
static int peer_finished(int peer, int inc) {
    struct rx* r = rx_of(peer, inc);
    return g_stopping && r != NULL && r->fin_rcvd && r->next.tag >= r->fin.tag && r->next.am >= r->fin.am &&
           r->next.stream >= r->fin.stream;
}

/* An error of a request to or from incarnation @p inc of @p peer. */
static void request_error(int peer, int inc, const char* what, loom_status_t s) {
    if (killed(peer, inc) || peer_finished(peer, inc)) {
        ++g_st.expected_errors;
    } else {
        unexpected("%s to/from %d.%d: %s", what, peer, inc, loom_status_string(s));
    }
}

/* Progresses until @p r completes or BOUND passes (LOOM_ERR_TIMED_OUT, the request kept). */
static loom_status_t wait_req(loom_status_ptr_t r) {
    double end = now_s() + g_bound;
    loom_status_t s;
    if (!LOOM_PTR_IS_PTR(r)) return LOOM_PTR_STATUS(r);
    while ((s = loom_request_check_status(r)) == LOOM_INPROGRESS) {
        loom_worker_progress(g_worker);
        if (now_s() > end) return LOOM_ERR_TIMED_OUT;
    }
    loom_request_free(r);
    return s;
}

/* One request's state: 1 done (status in *s, request freed), 0 in flight. */
static int finished(loom_status_ptr_t* r, loom_status_t* s) {
    if (!LOOM_PTR_IS_PTR(*r)) {
        *s = LOOM_PTR_STATUS(*r);
        return 1;
    }
    if ((*s = loom_request_check_status(*r)) == LOOM_INPROGRESS) return 0;
    loom_request_free(*r);
    *r = NULL;
    return 1;
}

static void stream_post(struct conn* c) {
    loom_request_param_t rp;
    size_t got = 0;
    memset(&rp, 0, sizeof(rp));
    rp.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
    rp.flags = LOOM_STREAM_RECV_FLAG_WAITALL;
    c->srx_len = c->srx_phase == 0 ? sizeof(struct hdr) : c->srx_hdr.len;
    c->srx = loom_stream_recv_nbx(c->ep, c->srx_phase == 0 ? (void*)&c->srx_hdr : (void*)c->srx_buf, c->srx_len,
                                  &got, &rp);
    c->srx_imm = c->srx == NULL;
    if (c->srx == NULL && got != c->srx_len) {
        unexpected("stream receive of %zu bytes completed with %zu", c->srx_len, got);
    }
}

static void send_hello(struct conn* c) {
    static struct hdr hello; /* sent from here: stays valid */
    loom_status_t s;
    hello.magic = kMagicHello;
    hello.src = (uint16_t)g_id;
    hello.inc = (uint16_t)g_inc;
    s = wait_req(loom_stream_send_nbx(c->ep, &hello, sizeof(hello), NULL));
    if (s != LOOM_OK && c->peer >= 0) request_error(c->peer, c->inc, "hello", s);
    if (s == LOOM_OK) {
        struct hdr h = {kMagicData, (uint16_t)g_id, (uint16_t)g_inc, 0, g_rkey_size, (uint64_t)(uintptr_t)g_region};
        s = wait_req(loom_am_send_nbx(c->ep, kAmRkey, &h, sizeof(h), g_rkey_packed, g_rkey_size, NULL));
        if (s != LOOM_OK && c->peer >= 0) request_error(c->peer, c->inc, "rkey", s);
    }
}

static struct conn* conn_new(void) {
    struct conn* c = calloc(1, sizeof(*c));
    if (c == NULL || (c->srx_buf = malloc(kStreamMax)) == NULL) {
        fprintf(stderr, "soak_peer: out of memory\n");
        exit(1);
    }
    c->peer = -1;
    return c;
}

static void conn_free(struct conn* c) {
    free(c->srx_buf);
    free(c);
}

/* Closes @p c's endpoint (force: whatever is outstanding completes with an error). */
static void conn_close(struct conn* c, int force) {
    loom_request_param_t rp;
    loom_status_t s;
    memset(&rp, 0, sizeof(rp));
    if (force) {
        rp.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
        rp.flags = LOOM_EP_CLOSE_FLAG_FORCE;
    }
    s = wait_req(loom_ep_close_nbx(c->ep, &rp));
    if (s == LOOM_ERR_TIMED_OUT) unexpected("close of the endpoint to %d.%d did not complete", c->peer, c->inc);
    if (c->srx != NULL && LOOM_PTR_IS_PTR(c->srx)) {
        if (wait_req(c->srx) == LOOM_ERR_TIMED_OUT) {
            unexpected("stream receive from %d.%d did not complete after close", c->peer, c->inc);
        }
    }
    conn_free(c);
}

static void peer_up(int j, struct conn* c) {
    struct peer* p = &g_peers[j];
    int k;
    p->conn = c;
    p->state = kUp;
    memset(&p->tx, 0, sizeof(p->tx));
    p->tx_rma = 0;
    p->fin_sent = p->done_sent = p->done_rcvd = p->left = 0;
    p->killed_t0 = 0;
    p->fin_req = p->done_req = NULL;
    for (k = 0; k < kWindow; ++k) p->ops[k].kind = 0;
    fprintf(stderr, "soak_peer %d.%d: %.1f s: connected to %d.%d\n", g_id, g_inc, now_s() - g_start, j, c->inc);
}

/* The listener's handler: accept; the hello on the stream says who it is. */
static void on_connection(loom_conn_request_h request, void* arg) {
    loom_ep_params_t params;
    struct conn* c;
    size_t i;
    (void)arg;
    for (i = 0; i < sizeof(g_accepted) / sizeof(g_accepted[0]) && g_accepted[i] != NULL; ++i) {
    }
    if (i == sizeof(g_accepted) / sizeof(g_accepted[0]) || g_stopping == 2) {
        (void)loom_listener_reject(g_listener, request);
        return;
    }
    c = conn_new();
    memset(&params, 0, sizeof(params));
    params.field_mask = LOOM_EP_PARAM_FIELD_CONN_REQUEST;
    params.conn_request = request;
    set_err_mode(&params, c);
    if (loom_ep_create(g_worker, &params, &c->ep) != LOOM_OK) {
        /* the client's side sees it fail; nothing to count here: who it was is unknown */
        fprintf(stderr, "soak_peer %d.%d: accepting a connection failed\n", g_id, g_inc);
        conn_free(c);
        return;
    }
    g_accepted[i] = c;
}

static int connect_to(int j, unsigned port, int inc, struct in_addr where) {
    struct sockaddr_in addr;
    loom_ep_params_t params;
    loom_status_t s;
    struct conn* c = conn_new();
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_port = htons((unsigned short)port);
    addr.sin_addr = where;
    memset(&params, 0, sizeof(params));
    params.field_mask = LOOM_EP_PARAM_FIELD_SOCK_ADDR;
    params.sockaddr.addr = (const struct sockaddr*)&addr;
    params.sockaddr.addrlen = sizeof(addr);
    set_err_mode(&params, c);
    c->peer = j;
    c->inc = inc;
    s = loom_ep_create(g_worker, &params, &c->ep);
    if (s != LOOM_OK) {
        request_error(j, inc, "connect", s);
        conn_free(c);
        return 0;
    }
    peer_up(j, c);
    c->started = 1;
    send_hello(c);
    stream_post(c);
    return 1;
}

/* --- receiving -------------------------------------------------------------------------------- */

/* Checks a message's sequence number against the next expected one of its channel. */
static void check_order(int ch, int src, int inc, uint64_t seq, uint64_t* next) {
    if (seq == *next) {
        ++*next;
    } else if (seq > *next) {
        if (killed(src, inc)) {
            ++g_st.expected_gaps;
        } else {
            unexpected("channel %d from %d.%d: message %llu arrived when %llu was due", ch, src, inc,
                       (unsigned long long)seq, (unsigned long long)*next);
            g_st.lost += seq - *next;
        }
        *next = seq + 1;
    } else {
        unexpected("channel %d from %d.%d: message %llu arrived again or late (next %llu)", ch, src, inc,
                   (unsigned long long)seq, (unsigned long long)*next);
    }
}

static void received(int ch, int src, int inc, uint64_t seq, const uint8_t* p, size_t len) {
    if (!intact(p, len, key_of(ch, src, inc, seq, len))) {
        ++g_st.corrupted;
        unexpected("channel %d from %d.%d: message %llu of %zu bytes CORRUPTED", ch, src, inc,
                   (unsigned long long)seq, len);
        return;
    }
    ++g_st.msgs_rcvd;
    g_st.bytes_rcvd += len;
}

/* The ring of wildcard tagged receives, completed in the order they were posted (the order
 * they matched in), so that each sender's sequence numbers must come in order. */
static struct {
    loom_status_ptr_t req;
    uint8_t* buf;
} g_ring[kRing];
static int g_ring_head;

static void ring_post(int k) {
    loom_request_param_t rp;
    memset(&rp, 0, sizeof(rp));
    rp.op_attr_mask = LOOM_OP_ATTR_FLAG_NO_IMM_CMPL; /* a request even when a message waits: the ring holds handles */
    g_ring[k].req = loom_tag_recv_nbx(g_worker, g_ring[k].buf, kTagMax, 0, kTagDataMask, &rp);
    if (!LOOM_PTR_IS_PTR(g_ring[k].req) && LOOM_PTR_STATUS(g_ring[k].req) != LOOM_OK) {
        unexpected("posting a tagged receive: %s", loom_status_string(LOOM_PTR_STATUS(g_ring[k].req)));
    }
}

static void ring_progress(void) {
    for (;;) {
        int k = g_ring_head;
        loom_tag_recv_info_t info;
        loom_status_t s;
        int src, inc;
        uint64_t seq;
        struct rx* r;
        info.sender_tag = ~(loom_tag_t)0;
        info.length = 0;
        if (!LOOM_PTR_IS_PTR(g_ring[k].req)) { /* the post failed (counted): try again */
            ring_post(k);
            return;
        }
        s = loom_tag_recv_request_test(g_ring[k].req, &info);
        if (s == LOOM_INPROGRESS) return;
        loom_request_free(g_ring[k].req);
        src = (int)((info.sender_tag >> 54) & 0xff);
        inc = (int)((info.sender_tag >> 38) & 0xffff);
        seq = info.sender_tag & ((1ull << 38) - 1);
        r = info.sender_tag == ~(loom_tag_t)0 ? NULL : rx_of(src, inc);
        if (s != LOOM_OK) {
            if (r != NULL) {
                request_error(src, inc, "tagged receive", s);
            } else if (recent_kill()) {
                ++g_st.expected_errors; /* its sender is unknown; a process was just killed */
            } else {
                unexpected("tagged receive from an unknown sender: %s", loom_status_string(s));
            }
        } else if (r == NULL) {
            unexpected("tagged message with a foreign tag %llx", (unsigned long long)info.sender_tag);
        } else {
            check_order(kChTag, src, inc, seq, &r->next.tag);
            received(kChTag, src, inc, seq, g_ring[k].buf, info.length);
        }
        ring_post(k);
        g_ring_head = (g_ring_head + 1) % kRing;
    }
}

/* Active-message rendezvous receives in flight. */
static struct {
    loom_status_ptr_t req;
    struct hdr hdr;
    uint8_t* buf;
} g_amrx[kMaxPending];

static loom_status_t on_am_data(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                const loom_am_recv_param_t* param) {
    struct hdr h;
    struct rx* r;
    int k;
    (void)arg;
    if (header_length != sizeof(h)) {
        unexpected("active message with a header of %zu bytes", header_length);
        return LOOM_OK;
    }
    memcpy(&h, header, sizeof(h));
    if ((r = rx_of(h.src, h.inc)) == NULL || h.magic != kMagicData || h.len != length) {
        ++g_st.corrupted;
        unexpected("active message with a bad header (from %d.%d, %zu bytes)", h.src, h.inc, length);
        return LOOM_OK;
    }
    check_order(kChAm, h.src, h.inc, h.seq, &r->next.am);
    if (!(param->recv_attr & LOOM_AM_RECV_ATTR_FLAG_RNDV)) {
        received(kChAm, h.src, h.inc, h.seq, data, length);
        return LOOM_OK;
    }
    for (k = 0; k < kMaxPending && g_amrx[k].buf != NULL; ++k) {
    }
    if (k == kMaxPending || (g_amrx[k].buf = malloc(length)) == NULL) {
        unexpected("too many active-message rendezvous receives in flight");
        return LOOM_OK;
    }
    g_amrx[k].hdr = h;
    g_amrx[k].req = loom_am_recv_data_nbx(g_worker, data, g_amrx[k].buf, length, NULL);
    return LOOM_OK;
}

static void amrx_progress(void) {
    int k;
    for (k = 0; k < kMaxPending; ++k) {
        loom_status_t s;
        if (g_amrx[k].buf == NULL || !finished(&g_amrx[k].req, &s)) continue;
        if (s == LOOM_OK) {
            received(kChAm, g_amrx[k].hdr.src, g_amrx[k].hdr.inc, g_amrx[k].hdr.seq, g_amrx[k].buf, g_amrx[k].hdr.len);
        } else {
            request_error(g_amrx[k].hdr.src, g_amrx[k].hdr.inc, "active-message rendezvous receive", s);
        }
        free(g_amrx[k].buf);
        g_amrx[k].buf = NULL;
    }
}

static loom_status_t on_am_rkey(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                const loom_am_recv_param_t* param) {
    struct hdr h;
    struct peer* p;
    (void)arg;
    (void)param;
    if (header_length != sizeof(h) || length > kRkeyMax || (param->recv_attr & LOOM_AM_RECV_ATTR_FLAG_RNDV)) {
        unexpected("malformed remote key message");
        return LOOM_OK;
    }
    memcpy(&h, header, sizeof(h));
    if (rx_of(h.src, h.inc) == NULL) return LOOM_OK;
    p = &g_peers[h.src];
    memcpy(p->rkey_buf, data, length);
    p->rkey_len = length;
    p->rkey_inc = h.inc;
    p->rkey_addr = h.aux;
    return LOOM_OK;
}

static loom_status_t on_am_fin(void* arg, const void* header, size_t header_length, void* data, size_t length,
                               const loom_am_recv_param_t* param) {
    struct hdr h;
    struct rx* r;
    (void)param;
    memcpy(&h, header, header_length < sizeof(h) ? header_length : sizeof(h));
    if (header_length != sizeof(h) || (r = rx_of(h.src, h.inc)) == NULL) return LOOM_OK;
    if (arg == NULL) { /* FIN: the peer's counts */
        if (length == sizeof(r->fin)) memcpy(&r->fin, data, sizeof(r->fin));
        r->fin_rcvd = 1;
    } else if (g_peers[h.src].conn != NULL && g_peers[h.src].conn->inc == h.inc) { /* DONE */
        g_peers[h.src].done_rcvd = 1;
    }
    return LOOM_OK;
}

/* The stream of @p c: a hello first, then records. */
static void stream_progress(struct conn* c) {
    loom_status_t s;
    size_t got;
    for (;;) {
        if (c->srx_over || !c->started) return;
        if (LOOM_PTR_IS_PTR(c->srx)) {
            if ((s = loom_stream_recv_request_test(c->srx, &got)) == LOOM_INPROGRESS) return;
            loom_request_free(c->srx);
        } else if (c->srx == NULL && !c->srx_imm) {
            return; /* nothing posted */
        } else {
            s = LOOM_PTR_STATUS(c->srx);
            got = c->srx_len;
        }
        c->srx = NULL;
        c->srx_imm = 0;
        if (s != LOOM_OK) {
            c->srx_over = 1; /* the endpoint failed or closed */
            if (c->peer >= 0 && c->failures == 0) {
                request_error(c->peer, c->inc, "stream receive", s);
            }
            return;
        }
        if (got != c->srx_len) unexpected("stream receive: %zu bytes of %zu", got, c->srx_len);
        if (c->srx_phase == 0) {
            struct hdr* h = &c->srx_hdr;
            if (!c->hello_seen) {
                if (h->magic != kMagicHello || (c->peer >= 0 && (h->src != c->peer || h->inc != c->inc)) ||
                    rx_of(h->src, h->inc) == NULL) {
                    ++g_st.corrupted;
                    unexpected("bad hello on a stream");
                    c->srx_over = 1;
                    return;
                }
                c->hello_seen = 1;
                c->peer = h->src;
                c->inc = h->inc;
            } else if (h->magic != kMagicData || h->src != c->peer || h->inc != c->inc || h->len < 8 ||
                       h->len > kStreamMax) {
                ++g_st.corrupted;
                unexpected("bad stream record header from %d.%d", c->peer, c->inc);
                c->srx_over = 1;
                return;
            } else {
                c->srx_phase = 1;
            }
        } else {
            struct rx* r = rx_of(c->peer, c->inc);
            check_order(kChStream, c->peer, c->inc, c->srx_hdr.seq, &r->next.stream);
            received(kChStream, c->peer, c->inc, c->srx_hdr.seq, c->srx_buf, c->srx_len);
            c->srx_phase = 0;
        }
        stream_post(c);
    }
}

/* Accepted endpoints: once their hello came, they become their peer's. */
static void accepted_progress(void) {
    size_t i;
    for (i = 0; i < sizeof(g_accepted) / sizeof(g_accepted[0]); ++i) {
        struct conn* c = g_accepted[i];
        struct peer* p;
        if (c == NULL) continue;
        if (!c->started) {
            c->started = 1;
            send_hello(c);
            stream_post(c);
        }
        stream_progress(c);
        if (c->failures > 0 && !c->hello_seen) { /* died before it said who it was */
            if (recent_kill()) {
                ++g_st.expected_errors;
            } else {
                unexpected("an accepted endpoint failed before its hello: %s", loom_status_string(c->status));
            }
            g_accepted[i] = NULL;
            conn_close(c, 1);
            continue;
        }
        if (!c->hello_seen) continue;
        g_accepted[i] = NULL;
        p = &g_peers[c->peer];
        if (p->state == kDown) {
            peer_up(c->peer, c);
        } else {
            if (p->next != NULL) conn_close(p->next, 1);
            p->next = c; /* the old incarnation's endpoint must fail first */
        }
    }
}

/* --- sending ----------------------------------------------------------------------------------- */

static void op_start(struct peer* p, int j, struct op* o, int slot) {
    loom_request_param_t rp;
    int ch, tries = 0;
    uint64_t r = rnd() % 100;
    memset(&rp, 0, sizeof(rp));
    do {
        ch = r < 40 ? kChTag : r < 65 ? kChAm : r < 85 ? kChStream : kChRma;
        if (ch == kChRma && p->rkey == NULL) ch = kChTag;
        r = rnd() % 100;
        if (++tries > 100) return; /* only rma asked for, and no key yet */
    } while (strchr(g_kinds, "tasr"[ch - 1]) == NULL);
    o->kind = ch;
    o->phase = 0;
    o->t0 = now_s();
    o->stalled = 0;
    switch (ch) {
        case kChTag:
            o->len = rand_size(g_tag_max);
            o->seq = p->tx.tag++;
            fill(o->out, o->len, key_of(ch, g_id, g_inc, o->seq, o->len));
            o->req = loom_tag_send_nbx(p->conn->ep, o->out, o->len,
                                       ((uint64_t)g_id << 54) | ((uint64_t)g_inc << 38) | o->seq, &rp);
            break;
        case kChAm:
            o->len = rand_size(kAmMax);
            o->seq = p->tx.am++;
            fill(o->out, o->len, key_of(ch, g_id, g_inc, o->seq, o->len));
            o->hdr = (struct hdr){kMagicData, (uint16_t)g_id, (uint16_t)g_inc, o->seq, o->len, 0};
            o->req = loom_am_send_nbx(p->conn->ep, kAmData, &o->hdr, sizeof(o->hdr), o->out, o->len, &rp);
            break;
        case kChStream:
            /* header and payload in one buffer: one send keeps the record whole */
            o->len = rand_size(kStreamMax);
            o->seq = p->tx.stream++;
            o->hdr = (struct hdr){kMagicData, (uint16_t)g_id, (uint16_t)g_inc, o->seq, o->len, 0};
            memcpy(o->out, &o->hdr, sizeof(o->hdr));
            fill(o->out + sizeof(o->hdr), o->len, key_of(ch, g_id, g_inc, o->seq, o->len));
            o->req = loom_stream_send_nbx(p->conn->ep, o->out, sizeof(o->hdr) + o->len, &rp);
            break;
        case kChRma:
            o->len = rand_size(kRmaMax);
            o->seq = p->tx_rma++;
            fill(o->out, o->len, key_of(ch, g_id, g_inc, o->seq ^ ((uint64_t)j << 40), o->len));
            o->hdr.aux = p->raddr + ((uint64_t)g_id * kWindow + (uint64_t)slot) * kRmaMax;
            o->req = loom_put_nbx(p->conn->ep, o->out, o->len, o->hdr.aux, p->rkey, &rp);
            break;
    }
}

/* Advances @p o; returns 1 when it is over (its peer's failure included). */
static int op_progress(struct peer* p, int j, struct op* o) {
    loom_request_param_t rp;
    loom_status_t s;
    if (!finished(&o->req, &s)) {
        if (!o->stalled && now_s() - o->t0 > g_bound && !killed(j, p->conn->inc)) {
            o->stalled = 1;
            unexpected("operation of channel %d (%zu bytes, phase %d) to %d.%d stalled for %.0f s", o->kind, o->len,
                       o->phase, j, p->conn->inc, g_bound);
        }
        return 0;
    }
    if (s != LOOM_OK) {
        request_error(j, p->conn->inc, o->kind == kChRma ? "rma" : "send", s);
        return 1;
    }
    if (o->kind != kChRma || o->phase == 2) {
        if (o->kind == kChRma && memcmp(o->in, o->out, o->len) != 0) {
            ++g_st.corrupted;
            unexpected("rma to %d.%d: %zu bytes read back differ from those put", j, p->conn->inc, o->len);
            return 1;
        }
        ++g_st.msgs_sent;
        ++g_st.by_ch[o->kind];
        g_st.bytes_sent += o->len;
        return 1;
    }
    memset(&rp, 0, sizeof(rp));
    if (o->phase == 0) { /* the put is out of the buffer: flush it to the target */
        o->phase = 1;
        o->req = loom_ep_flush_nbx(p->conn->ep, &rp);
    } else { /* at the target: read it back */
        o->phase = 2;
        memset(o->in, 0, o->len);
        o->req = loom_get_nbx(p->conn->ep, o->in, o->len, o->hdr.aux, p->rkey, &rp);
    }
    return 0;
}

static int ops_idle(struct peer* p) {
    int k;
    for (k = 0; k < kWindow; ++k) {
        if (p->ops[k].kind != 0) return 0;
    }
    return 1;
}

static void send_ctl(struct peer* p, int id, struct hdr* h, const void* data, size_t len, loom_status_ptr_t* req) {
    loom_request_param_t rp;
    memset(&rp, 0, sizeof(rp));
    *h = (struct hdr){kMagicData, (uint16_t)g_id, (uint16_t)g_inc, 0, len, 0};
    *req = loom_am_send_nbx(p->conn->ep, (unsigned)id, h, sizeof(*h), data, len, &rp);
}

static void peer_progress(int j) {
    struct peer* p = &g_peers[j];
    struct conn* c = p->conn;
    int k;
    if (p->state == kDown) {
        unsigned port;
        int inc;
        struct in_addr where;
        if (p->next != NULL) { /* an accepted endpoint of the new incarnation waited */
            peer_up(j, p->next);
            p->next = NULL;
            return;
        }
        /* the lower id connects, to each incarnation once */
        if (j > g_id && read_port(j, &port, &inc, &where) && inc > p->last_port_inc && !killed(j, inc)) {
            p->last_port_inc = inc;
            ++g_st.reconnects;
            connect_to(j, port, inc, where);
        }
        return;
    }
    stream_progress(c);
    if (p->state == kUp && p->rkey == NULL && p->rkey_inc == c->inc && p->rkey_len > 0 && c->failures == 0) {
        loom_status_t s = loom_ep_rkey_unpack(c->ep, p->rkey_buf, p->rkey_len, &p->rkey);
        if (s != LOOM_OK) {
            unexpected("unpacking the remote key of %d.%d: %s", j, c->inc, loom_status_string(s));
            p->rkey_len = 0;
        }
        p->raddr = p->rkey_addr;
    }
    for (k = 0; k < kWindow; ++k) {
        struct op* o = &p->ops[k];
        if (o->kind != 0 && op_progress(p, j, o)) o->kind = 0;
        if (o->kind == 0 && p->state == kUp && !g_stopping && c->failures == 0) op_start(p, j, o, k);
    }
    if (p->state == kUp && c->failures == 0 && killed(j, c->inc)) {
        /* soak.py killed it: its endpoint must fail within the bound */
        if (p->killed_t0 == 0) p->killed_t0 = now_s();
        if (now_s() - p->killed_t0 > g_bound) {
            unexpected("the endpoint to killed %d.%d did not fail within %.0f s", j, c->inc, g_bound);
            c->failures = 1;
            c->status = LOOM_ERR_TIMED_OUT;
            p->state = kFailing;
            p->fail_t0 = now_s();
        }
    }
    if (p->state == kUp && c->failures > 0) {
        if (peer_finished(j, c->inc)) {
            /* it had all it needed from us (it answers our FIN only then) and sent us all it
             * had: it left at the end (soak.py checks its exit status) */
            p->left = 1;
        } else {
            request_error(j, c->inc, "endpoint", c->status);
        }
        p->state = kFailing;
        p->fail_t0 = now_s();
    }
    if (p->state == kUp && g_stopping && ops_idle(p)) {
        loom_status_t s;
        struct rx* r = rx_of(j, c->inc);
        if (!p->fin_sent) {
            p->fin_payload = p->tx;
            send_ctl(p, kAmFin, &p->fin_hdr, &p->fin_payload, sizeof(p->fin_payload), &p->fin_req);
            p->fin_sent = 1;
        }
        if (p->fin_req != NULL && finished(&p->fin_req, &s) && s != LOOM_OK) request_error(j, c->inc, "fin", s);
        if (!p->done_sent && r->fin_rcvd && r->next.tag >= r->fin.tag && r->next.am >= r->fin.am &&
            r->next.stream >= r->fin.stream) {
            send_ctl(p, kAmDone, &p->done_hdr, NULL, 0, &p->done_req);
            p->done_sent = 1;
        }
        if (p->done_req != NULL && finished(&p->done_req, &s) && s != LOOM_OK) request_error(j, c->inc, "done", s);
    }
    if (p->state == kFailing) {
        /* every request of the endpoint completes with the error; then it goes */
        int stuck = now_s() - p->fail_t0 > g_bound;
        if (!stuck && (!ops_idle(p) || (c->srx != NULL && LOOM_PTR_IS_PTR(c->srx)) ||
                       (p->fin_req != NULL && LOOM_PTR_IS_PTR(p->fin_req)) ||
                       (p->done_req != NULL && LOOM_PTR_IS_PTR(p->done_req)))) {
            return;
        }
        if (stuck) unexpected("requests to failed %d.%d not completed within %.0f s", j, c->inc, g_bound);
        if (p->rkey != NULL) loom_rkey_destroy(p->rkey);
        p->rkey = NULL;
        conn_close(c, 1);
        for (k = 0; k < kWindow; ++k) p->ops[k].kind = 0;
        p->conn = NULL;
        p->state = kDown;
    }
}

/* --- reporting --------------------------------------------------------------------------------- */

static void write_stats(int final) {
    char text[8192];
    size_t n = 0;
    int j, k;
    n += (size_t)snprintf(text + n, sizeof(text) - n,
                          "{\"id\": %d, \"inc\": %d, \"pid\": %d, \"final\": %d, \"uptime\": %.2f, "
                          "\"msgs_sent\": %llu, \"bytes_sent\": %llu, \"msgs_rcvd\": %llu, \"bytes_rcvd\": %llu, "
                          "\"tag\": %llu, \"am\": %llu, \"stream\": %llu, \"rma\": %llu, "
                          "\"expected_errors\": %llu, \"unexpected_errors\": %llu, \"lost\": %llu, "
                          "\"corrupted\": %llu, \"expected_gaps\": %llu, \"connects\": %llu, \"peers\": {",
                          g_id, g_inc, (int)getpid(), final, now_s() - g_start,
                          (unsigned long long)g_st.msgs_sent, (unsigned long long)g_st.bytes_sent,
                          (unsigned long long)g_st.msgs_rcvd, (unsigned long long)g_st.bytes_rcvd,
                          (unsigned long long)g_st.by_ch[kChTag], (unsigned long long)g_st.by_ch[kChAm],
                          (unsigned long long)g_st.by_ch[kChStream], (unsigned long long)g_st.by_ch[kChRma],
                          (unsigned long long)g_st.expected_errors, (unsigned long long)g_st.unexpected_errors,
                          (unsigned long long)g_st.lost, (unsigned long long)g_st.corrupted,
                          (unsigned long long)g_st.expected_gaps, (unsigned long long)g_st.reconnects);
    for (j = 0, k = 0; j < g_n; ++j) {
        if (j == g_id || g_peers[j].state != kUp) continue;
        n += (size_t)snprintf(text + n, sizeof(text) - n, "%s\"%d\": %d", k++ ? ", " : "", j, g_peers[j].conn->inc);
    }
    n += (size_t)snprintf(text + n, sizeof(text) - n, "}, \"log\": [");
    for (k = 0; k < g_nlog && n < sizeof(text) - 300; ++k) {
        char* q;
        for (q = g_log[k]; *q; ++q) {
            if (*q == '"' || *q == '\\') *q = '\'';
        }
        n += (size_t)snprintf(text + n, sizeof(text) - n, "%s\"%s\"", k ? ", " : "", g_log[k]);
    }
    snprintf(text + n, sizeof(text) - n, "]}\n");
    {
        char name[64];
        snprintf(name, sizeof(name), "stats.%d.%d.json", g_id, g_inc);
        write_file(name, text);
    }
}

/* --- main -------------------------------------------------------------------------------------- */

static int setup(void) {
    loom_params_t params;
    loom_listener_params_t lp;
    loom_mem_map_params_t mp;
    loom_mem_attr_t ma;
    struct sockaddr_in addr;
    struct sockaddr_storage bound;
    loom_am_handler_param_t ap;
    char text[96], name[32], where[INET_ADDRSTRLEN];
    static const struct {
        unsigned id;
        void* arg;
        loom_am_recv_callback_t cb;
    } handlers[] = {{kAmData, NULL, on_am_data}, {kAmRkey, NULL, on_am_rkey}, {kAmFin, NULL, on_am_fin},
                    {kAmDone, (void*)1, on_am_fin}};
    size_t i;
    int j, k;

    memset(&params, 0, sizeof(params));
    params.field_mask = LOOM_PARAM_FIELD_FEATURES;
    params.features = LOOM_FEATURE_TAG | LOOM_FEATURE_AM | LOOM_FEATURE_STREAM | LOOM_FEATURE_RMA;
    if (loom_init(&params, &g_ctx) != LOOM_OK || loom_worker_create(g_ctx, NULL, &g_worker) != LOOM_OK) return 1;
    for (i = 0; i < sizeof(handlers) / sizeof(handlers[0]); ++i) {
        memset(&ap, 0, sizeof(ap));
        ap.field_mask = LOOM_AM_HANDLER_PARAM_FIELD_ID | LOOM_AM_HANDLER_PARAM_FIELD_CB | LOOM_AM_HANDLER_PARAM_FIELD_ARG;
        ap.id = handlers[i].id;
        ap.cb = handlers[i].cb;
        ap.arg = handlers[i].arg;
        if (loom_worker_set_am_recv_handler(g_worker, &ap) != LOOM_OK) return 1;
    }
    /* the region peers put to and get from: one slot per (peer, window slot) */
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = LOOM_MEM_MAP_PARAM_FIELD_LENGTH | LOOM_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.length = (size_t)kMaxPeers * kWindow * kRmaMax;
    mp.flags = LOOM_MEM_MAP_ALLOCATE;
    ma.field_mask = LOOM_MEM_ATTR_FIELD_ADDRESS;
    if (loom_mem_map(g_ctx, &mp, &g_memh) != LOOM_OK || loom_mem_query(g_memh, &ma) != LOOM_OK ||
        loom_rkey_pack(g_ctx, g_memh, &g_rkey_packed, &g_rkey_size) != LOOM_OK || g_rkey_size > kRkeyMax) {
        fprintf(stderr, "soak_peer: mapping the RMA region failed\n");
        return 1;
    }
    g_region = ma.address;
    for (k = 0; k < kRing; ++k) {
        if ((g_ring[k].buf = malloc(kTagMax)) == NULL) return 1;
        memset(g_ring[k].buf, 0x5a, kTagMax);
        ring_post(k);
    }
    for (j = 0; j < g_n; ++j) {
        for (k = 0; k < kWindow; ++k) {
            g_peers[j].ops[k].out = malloc(kTagMax + sizeof(struct hdr));
            g_peers[j].ops[k].in = malloc(kRmaMax);
            if (g_peers[j].ops[k].out == NULL || g_peers[j].ops[k].in == NULL) return 1;
            /* touched now: the RSS soak.py samples is the working set from the start */
            memset(g_peers[j].ops[k].out, 0x5a, kTagMax + sizeof(struct hdr)); /* (not 0: calloc) */
            memset(g_peers[j].ops[k].in, 0x5a, kRmaMax);
        }
        g_peers[j].rkey_inc = -1;
        g_peers[j].last_port_inc = -1;
    }
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_addr = g_addr;
    memset(&lp, 0, sizeof(lp));
    lp.field_mask = LOOM_LISTENER_PARAM_FIELD_SOCK_ADDR | LOOM_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = (const struct sockaddr*)&addr;
    lp.sockaddr.addrlen = sizeof(addr);
    lp.conn_handler.cb = on_connection;
    if (loom_listener_create(g_worker, &lp, &g_listener) != LOOM_OK ||
        loom_listener_query(g_listener, &bound) != LOOM_OK) {
        return 1;
    }
    inet_ntop(AF_INET, &g_addr, where, sizeof(where));
    snprintf(text, sizeof(text), "%u %d %s\n", ntohs(((struct sockaddr_in*)&bound)->sin_port), g_inc, where);
    snprintf(name, sizeof(name), "port.%d", g_id);
    write_file(name, text);
    return 0;
}

/* After the stop file: every peer has said DONE, or the bound passed. */
static int drained(double stop_t0) {
    int j, all = 1;
    for (j = 0; j < g_n; ++j) {
        struct peer* p = &g_peers[j];
        if (j == g_id) continue;
        if (p->left) continue;
        if (p->state != kUp || !p->done_sent || !p->done_rcvd || LOOM_PTR_IS_PTR(p->fin_req) ||
            LOOM_PTR_IS_PTR(p->done_req)) {
            all = 0;
        }
    }
    if (all) return 1;
    if (now_s() - stop_t0 < g_bound) return 0;
    for (j = 0; j < g_n; ++j) {
        struct peer* p = &g_peers[j];
        struct rx* r;
        if (j == g_id || p->left) continue;
        if (p->state != kUp) {
            unexpected("at the end, no live endpoint to %d", j);
            continue;
        }
        r = rx_of(j, p->conn->inc);
        if (!r->fin_rcvd) {
            unexpected("no FIN from %d.%d within %.0f s", j, p->conn->inc, g_bound);
            continue;
        }
        if (r->next.tag < r->fin.tag || r->next.am < r->fin.am || r->next.stream < r->fin.stream) {
            g_st.lost += (r->fin.tag - r->next.tag) + (r->fin.am - r->next.am) + (r->fin.stream - r->next.stream);
            unexpected("from %d.%d: got tag %llu/%llu, am %llu/%llu, stream %llu/%llu", j, p->conn->inc,
                       (unsigned long long)r->next.tag, (unsigned long long)r->fin.tag,
                       (unsigned long long)r->next.am, (unsigned long long)r->fin.am,
                       (unsigned long long)r->next.stream, (unsigned long long)r->fin.stream);
        }
        if (!p->done_rcvd) unexpected("no DONE from %d.%d within %.0f s", j, p->conn->inc, g_bound);
    }
    return 1;
}

static void teardown(void) {
    int j, k;
    g_stopping = 2; /* closes are ours now */
    for (k = 0; k < kRing; ++k) {
        if (!LOOM_PTR_IS_PTR(g_ring[k].req)) continue;
        loom_request_cancel(g_worker, g_ring[k].req);
        (void)wait_req(g_ring[k].req);
    }
    for (j = 0; j < g_n; ++j) {
        struct peer* p = &g_peers[j];
        if (j == g_id || p->conn == NULL) continue;
        if (p->rkey != NULL) loom_rkey_destroy(p->rkey);
        conn_close(p->conn, p->state != kUp || p->conn->failures > 0); /* a live one flushes first */
        if (p->next != NULL) conn_close(p->next, 1);
        p->conn = p->next = NULL;
        p->rkey = NULL;
        p->state = kDown; /* (the final counters list no peers) */
    }
    for (k = 0; k < (int)(sizeof(g_accepted) / sizeof(g_accepted[0])); ++k) {
        if (g_accepted[k] != NULL) conn_close(g_accepted[k], 1);
    }
    amrx_progress();
    for (k = 0; k < kMaxPending; ++k) free(g_amrx[k].buf);
    loom_listener_destroy(g_listener);
    for (j = 0; j < g_n; ++j) {
        for (k = 0; k < kWindow; ++k) {
            free(g_peers[j].ops[k].out);
            free(g_peers[j].ops[k].in);
        }
    }
    for (k = 0; k < kRing; ++k) free(g_ring[k].buf);
    loom_rkey_buffer_release(g_rkey_packed);
    (void)loom_mem_unmap(g_ctx, g_memh);
    loom_worker_destroy(g_worker);
    loom_cleanup(g_ctx);
}

int main(int argc, char** argv) {
    int opt, j;
    unsigned long long seed = 1;
    double last_stats = 0, last_check = 0, stop_t0 = 0;
    char path[512];
    struct stat sb;

    g_addr.s_addr = htonl(INADDR_LOOPBACK);
    while ((opt = getopt(argc, argv, "i:n:g:d:s:t:k:T:a:")) != -1) {
        switch (opt) {
            case 'i': g_id = atoi(optarg); break;
            case 'n': g_n = atoi(optarg); break;
            case 'g': g_inc = atoi(optarg); break;
            case 'd': g_dir = optarg; break;
            case 's': seed = strtoull(optarg, NULL, 0); break;
            case 't': g_bound = atof(optarg); break;
            case 'k': g_kinds = optarg; break;
            case 'T': g_tag_max = strtoul(optarg, NULL, 0); break;
            case 'a':
                if (inet_pton(AF_INET, optarg, &g_addr) != 1) {
                    fprintf(stderr, "soak_peer: -a %s is not an IPv4 address\n", optarg);
                    return 2;
                }
                break;
            default: return 2;
        }
    }
    if (g_tag_max < 8 || g_tag_max > kTagMax) g_tag_max = kTagMax;
    if (g_dir == NULL || g_n < 2 || g_n > kMaxPeers || g_id < 0 || g_id >= g_n || g_inc < 0 || g_inc >= kMaxInc) {
        fprintf(stderr,
                "usage: %s -i ID -n NPROCS(2..%d) -g INCARNATION(0..%d) -d DIR [-s SEED] [-t BOUND] "
                "[-k tasr] [-T MAX] [-a ADDR]\n",
                argv[0], kMaxPeers, kMaxInc - 1);
        return 2;
    }
    g_start = now_s();
    g_rand = mix(seed * 1000003u + (uint64_t)g_id * 7919u + (uint64_t)g_inc) | 1;
    if (setup() != 0) {
        fprintf(stderr, "soak_peer %d.%d: set-up failed\n", g_id, g_inc);
        return 1;
    }
    snprintf(path, sizeof(path), "%s/stop", g_dir);
    for (;;) {
        double t = now_s();
        loom_worker_progress(g_worker);
        ring_progress();
        amrx_progress();
        accepted_progress();
        for (j = 0; j < g_n; ++j) {
            if (j != g_id) peer_progress(j);
        }
        if (t - last_check > 0.05) { /* the files soak.py writes */
            last_check = t;
            if (!g_stopping && stat(path, &sb) == 0) {
                g_stopping = 1;
                stop_t0 = t;
                fprintf(stderr, "soak_peer %d.%d: %.1f s: stop\n", g_id, g_inc, t - g_start);
            }
            if (g_stopping && drained(stop_t0)) break;
        }
        if (t - last_stats > 1.0) {
            last_stats = t;
            write_stats(0);
        }
    }
    teardown();
    write_stats(1);
    fprintf(stderr, "soak_peer %d.%d: %.1f s: done: %llu sent, %llu received, %llu unexpected\n", g_id, g_inc,
            now_s() - g_start, (unsigned long long)g_st.msgs_sent, (unsigned long long)g_st.msgs_rcvd,
            (unsigned long long)g_st.unexpected_errors);
    return g_st.unexpected_errors || g_st.lost || g_st.corrupted ? 1 : 0;
}
