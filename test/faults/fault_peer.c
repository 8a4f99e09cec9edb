/*
 * The program of the network fault tests (run_net_faults.sh): a server that echoes every
 * tagged message back, checking that they arrive in order and intact, and a client that
 * drives one of three scenarios over the public C API. Endpoints use error handling mode
 * peer, so LOOM_KEEPALIVE_* apply.
 *
 *   server: fault_peer -l PORT -p PORTFILE
 *   client: fault_peer -c HOST -P PORT -m MODE -f GOFILE [-L HOST:PORT] [-n COUNT] [-t SECONDS]
 *
 * Modes (the client prints READY once traffic flows, then waits for GOFILE to exist: the
 * test makes the fault in between):
 *   flow  echoes messages of every size (eager short to rendezvous) with up to 4 in flight
 *         until GOFILE exists, then COUNT more; every echo is compared with what was sent.
 *         With -L, a second server (on the client's host) gets the same traffic: a fault
 *         on one link must not disturb it. Exit 0 when every message came back intact and
 *         no endpoint failed.
 *   idle  after GOFILE, sends nothing and waits for the endpoint's error callback; prints
 *         "FAILED <status> after <seconds> s". Exit 0 on LOOM_ERR_PEER_TIMEOUT.
 *   busy  after GOFILE, posts two eager and two rendezvous sends and their echo receives,
 *         then waits: every send completes (an eager one may have been handed over before
 *         the fault: ok; a rendezvous one cannot: an error), the error callback runs once,
 *         and then the receives, which belong to the worker, not to the endpoint, are
 *         cancelled as an application would. Exit 0 when all that holds and nothing hung.
 *   lost  busy, for a fault that takes one of several links (a rail): an echo may also come
 *         back intact over a link that is still up; every other receive is cancelled.
 * -t bounds every wait (default 60 s): the client gives up with exit 1, never hangs.
 */
#define _POSIX_C_SOURCE 200809L
#include <loom/ucp.h>

#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { kWindow = 4, kMaxEps = 2, kNumSizes = 7 };
static const size_t kSizes[kNumSizes] = {8, 100, 2000, 9000, 70000, 300000, 2u << 20};
static const loom_tag_t kByeTag = ~(loom_tag_t)0;
static const size_t kMaxSize = 2u << 20;

static loom_worker_h g_worker;
static double g_limit = 60.0;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fill(uint8_t* buf, size_t length, uint64_t seq) {
    size_t i;
    for (i = 0; i < length; ++i) buf[i] = (uint8_t)(seq * 131u + i * 7u + (i >> 9));
    if (length >= sizeof(seq)) memcpy(buf, &seq, sizeof(seq));
}

/* An endpoint and the record of its failure (from its error callback). */
struct peer {
    loom_ep_h ep;
    int failures;
    loom_status_t status;
    double failed_at;
};

static void on_error(void* arg, loom_ep_h ep, loom_status_t status) {
    struct peer* p = arg;
    (void)ep;
    ++p->failures;
    p->status = status;
    p->failed_at = now_s();
    fprintf(stderr, "fault_peer: endpoint error callback: %s\n", loom_status_string(status));
}

static void set_err_mode(loom_ep_params_t* params, struct peer* p) {
    params->field_mask |= LOOM_EP_PARAM_FIELD_ERR_HANDLING_MODE | LOOM_EP_PARAM_FIELD_ERR_HANDLER;
    params->err_mode = LOOM_ERR_HANDLING_MODE_PEER;
    params->err_handler.cb = on_error;
    params->err_handler.arg = p;
}

/* Progresses until @p r completes or the time limit passes (then LOOM_ERR_TIMED_OUT, request kept). */
static loom_status_t wait_req(loom_status_ptr_t r, loom_tag_recv_info_t* info) {
    double end = now_s() + g_limit;
    loom_status_t s;
    if (!LOOM_PTR_IS_PTR(r)) return LOOM_PTR_STATUS(r);
    for (;;) {
        s = info != NULL ? loom_tag_recv_request_test(r, info) : loom_request_check_status(r);
        if (s != LOOM_INPROGRESS) break;
        loom_worker_progress(g_worker);
        if (now_s() > end) return LOOM_ERR_TIMED_OUT;
    }
    loom_request_free(r);
    return s;
}

/* --- server ------------------------------------------------------------------------------ */

static struct peer g_client;
static loom_listener_h g_listener;

static void on_connection(loom_conn_request_h request, void* arg) {
    loom_ep_params_t params;
    (void)arg;
    if (g_client.ep != NULL) {
        (void)loom_listener_reject(g_listener, request);
        return;
    }
    memset(&params, 0, sizeof(params));
    params.field_mask = LOOM_EP_PARAM_FIELD_CONN_REQUEST;
    params.conn_request = request;
    set_err_mode(&params, &g_client);
    if (loom_ep_create(g_worker, &params, &g_client.ep) != LOOM_OK) g_client.ep = NULL;
}

static int serve(unsigned port, const char* port_file) {
    loom_listener_params_t params;
    loom_listener_h listener;
    struct sockaddr_in addr;
    struct sockaddr_storage bound;
    loom_tag_recv_info_t info;
    loom_request_param_t rp;
    uint8_t* buf = malloc(kMaxSize);
    uint64_t expect = 0, seq;
    int rc = 1;
    FILE* f;

    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_port = htons((unsigned short)port);
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    memset(&params, 0, sizeof(params));
    params.field_mask = LOOM_LISTENER_PARAM_FIELD_SOCK_ADDR | LOOM_LISTENER_PARAM_FIELD_CONN_HANDLER;
    params.sockaddr.addr = (const struct sockaddr*)&addr;
    params.sockaddr.addrlen = sizeof(addr);
    params.conn_handler.cb = on_connection;
    if (buf == NULL || loom_listener_create(g_worker, &params, &listener) != LOOM_OK) return 1;
    g_listener = listener;
    if (loom_listener_query(listener, &bound) != LOOM_OK) goto out;
    f = fopen(port_file, "w");
    if (f == NULL || fprintf(f, "%u\n", ntohs(((struct sockaddr_in*)&bound)->sin_port)) < 0 ||
        fclose(f) != 0) {
        perror(port_file);
        goto out;
    }
    g_limit = 1e9; /* the server waits as long as the test lets it live */
    while (g_client.ep == NULL) loom_worker_progress(g_worker);
    for (;;) {
        loom_status_t s;
        memset(&rp, 0, sizeof(rp));
        rp.op_attr_mask = LOOM_OP_ATTR_FIELD_RECV_INFO; /* fills info when it completes in the call */
        rp.recv_info.tag_recv = &info;
        s = wait_req(loom_tag_recv_nbx(g_worker, buf, kMaxSize, 0, 0, &rp), &info);
        if (s != LOOM_OK) {
            printf("server: receive ended: %s\n", loom_status_string(s));
            rc = g_client.failures > 0 ? 0 : 1;
            break;
        }
        if (info.sender_tag == kByeTag) {
            printf("server: %llu messages in order and intact\n", (unsigned long long)expect);
            rc = 0;
            break;
        }
        seq = info.sender_tag;
        if (seq != expect) {
            printf("server: ORDER: message %llu arrived when %llu was due\n", (unsigned long long)seq,
                   (unsigned long long)expect);
            break;
        }
        ++expect;
        /* The client checks the content of the echo against what it sent. */
        s = wait_req(loom_tag_send_nbx(g_client.ep, buf, info.length, seq, NULL), NULL);
        if (s != LOOM_OK) {
            printf("server: echo of %llu: %s\n", (unsigned long long)seq, loom_status_string(s));
            rc = g_client.failures > 0 ? 0 : 1;
            break;
        }
    }
    fflush(stdout);
    if (g_client.ep != NULL) (void)wait_req(loom_ep_close_nbx(g_client.ep, NULL), NULL);
out:
    loom_listener_destroy(listener);
    free(buf);
    return rc;
}

/* --- client ------------------------------------------------------------------------------ */

struct slot {
    int busy;
    loom_status_ptr_t send, recv;
    uint64_t seq;
    size_t length;
    uint8_t *out, *in;
};

struct stream {
    struct peer peer;
    struct slot slots[kWindow];
    uint64_t next, done;
};

static int connect_to(const char* host, const char* port, struct peer* p) {
    struct addrinfo hints, *res = NULL;
    loom_ep_params_t params;
    int err;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if ((err = getaddrinfo(host, port, &hints, &res)) != 0) {
        fprintf(stderr, "fault_peer: %s: %s\n", host, gai_strerror(err));
        return 1;
    }
    memset(&params, 0, sizeof(params));
    params.field_mask = LOOM_EP_PARAM_FIELD_SOCK_ADDR;
    params.sockaddr.addr = res->ai_addr;
    params.sockaddr.addrlen = res->ai_addrlen;
    set_err_mode(&params, p);
    err = loom_ep_create(g_worker, &params, &p->ep) != LOOM_OK;
    freeaddrinfo(res);
    return err;
}

static void post_sized(struct stream* st, struct slot* sl, size_t length) {
    loom_request_param_t rp;
    sl->busy = 1;
    sl->seq = st->next++;
    sl->length = length;
    fill(sl->out, sl->length, sl->seq);
    memset(sl->in, 0, sl->length);
    memset(&rp, 0, sizeof(rp));
    sl->recv = loom_tag_recv_nbx(g_worker, sl->in, sl->length, sl->seq, ~(loom_tag_t)0, &rp);
    sl->send = loom_tag_send_nbx(st->peer.ep, sl->out, sl->length, sl->seq, &rp);
}

static void post(struct stream* st, struct slot* sl) {
    post_sized(st, sl, kSizes[st->next % kNumSizes]);
}

/* One request's state: 1 done (status in *s), 0 in flight. */
static int finished(loom_status_ptr_t* r, loom_status_t* s) {
    if (!LOOM_PTR_IS_PTR(*r)) {
        *s = LOOM_PTR_STATUS(*r);
        return 1;
    }
    if ((*s = loom_request_check_status(*r)) == LOOM_INPROGRESS) return 0;
    loom_request_free(*r);
    *r = (loom_status_ptr_t)(intptr_t)*s;
    return 1;
}

/* Drives the streams until @p until more messages came back on each (or GOFILE appears when
 * @p gofile is set). Returns 0, or 1 on a wrong echo, an error or the time limit. */
static int run_flow(struct stream* sts, int nst, uint64_t until, const char* gofile) {
    double end = now_s() + g_limit;
    uint64_t target[kMaxEps];
    struct stat sb;
    int i, k, more = 1;
    for (i = 0; i < nst; ++i) target[i] = sts[i].done + until;
    while (more) {
        more = 0;
        loom_worker_progress(g_worker);
        for (i = 0; i < nst; ++i) {
            struct stream* st = &sts[i];
            for (k = 0; k < kWindow; ++k) {
                struct slot* sl = &st->slots[k];
                loom_status_t ss, rs;
                if (!sl->busy) {
                    if (gofile != NULL || st->next < target[i]) post(st, sl);
                    continue;
                }
                if (!finished(&sl->send, &ss) || !finished(&sl->recv, &rs)) continue;
                if (ss != LOOM_OK || rs != LOOM_OK || memcmp(sl->in, sl->out, sl->length) != 0) {
                    fprintf(stderr, "fault_peer: stream %d message %llu (%zu bytes): send %s, echo %s%s\n", i,
                            (unsigned long long)sl->seq, sl->length, loom_status_string(ss),
                            loom_status_string(rs),
                            ss == LOOM_OK && rs == LOOM_OK ? ", content differs" : "");
                    return 1;
                }
                ++st->done;
                sl->busy = 0;
            }
            if (gofile == NULL && st->done < target[i]) more = 1;
        }
        if (gofile != NULL) more = stat(gofile, &sb) != 0;
        if (now_s() > end) {
            fprintf(stderr, "fault_peer: no progress within %.0f s\n", g_limit);
            return 1;
        }
    }
    return 0;
}

static int client(const char* host, const char* port, const char* local, const char* mode, const char* gofile,
                  uint64_t count) {
    struct stream sts[kMaxEps];
    int nst = 1, i, k, rc = 1;
    struct stat sb;
    double t0, end;
    memset(sts, 0, sizeof(sts));
    if (connect_to(host, port, &sts[0].peer) != 0) return 1;
    if (local != NULL) {
        char lhost[256];
        const char* colon = strrchr(local, ':');
        if (colon == NULL || (size_t)(colon - local) >= sizeof(lhost)) return 2;
        memcpy(lhost, local, (size_t)(colon - local));
        lhost[colon - local] = '\0';
        if (connect_to(lhost, colon + 1, &sts[1].peer) != 0) return 1;
        nst = 2;
    }
    for (i = 0; i < nst; ++i) {
        for (k = 0; k < kWindow; ++k) {
            sts[i].slots[k].out = malloc(kMaxSize);
            sts[i].slots[k].in = malloc(kMaxSize);
            if (sts[i].slots[k].out == NULL || sts[i].slots[k].in == NULL) return 1;
        }
    }
    /* Traffic flows: every size once on every endpoint. */
    if (run_flow(sts, nst, kNumSizes, NULL) != 0) goto out;
    printf("READY\n");
    fflush(stdout);
    if (strcmp(mode, "flow") == 0) {
        if (run_flow(sts, nst, 0, gofile) != 0) goto out; /* the fault happens meanwhile */
        if (run_flow(sts, nst, count, NULL) != 0) goto out;
        for (i = 0; i < nst; ++i) {
            if (sts[i].peer.failures != 0) goto out;
            if (wait_req(loom_tag_send_nbx(sts[i].peer.ep, NULL, 0, kByeTag, NULL), NULL) != LOOM_OK)
                goto out;
            printf("client: endpoint %d: %llu messages echoed intact\n", i, (unsigned long long)sts[i].done);
        }
        rc = 0;
        goto out;
    }
    end = now_s() + g_limit;
    while (stat(gofile, &sb) != 0) {
        loom_worker_progress(g_worker);
        if (now_s() > end) goto out;
    }
    t0 = now_s();
    if (strcmp(mode, "busy") == 0 || strcmp(mode, "lost") == 0) {
        for (k = 0; k < kWindow; ++k) post_sized(&sts[0], &sts[0].slots[k], k % 2 ? kMaxSize : kSizes[k]);
    }
    for (;;) {
        int open = 0;
        loom_worker_progress(g_worker);
        for (k = 0; k < kWindow; ++k) {
            struct slot* sl = &sts[0].slots[k];
            loom_status_t ss;
            if (!sl->busy || !LOOM_PTR_IS_PTR(sl->send)) continue;
            if (!finished(&sl->send, &ss)) {
                ++open;
            } else if (ss == LOOM_OK && sl->length == kMaxSize) {
                fprintf(stderr, "fault_peer: the rendezvous send %llu completed although the peer is gone\n",
                        (unsigned long long)sl->seq);
                goto out;
            }
        }
        if (sts[0].peer.failures > 0 && open == 0) break;
        if (now_s() > t0 + g_limit) {
            fprintf(stderr, "fault_peer: %s: the endpoint did not fail within %.0f s (%d sends open)\n", mode,
                    g_limit, open);
            goto out;
        }
    }
    for (k = 0; k < kWindow; ++k) {
        struct slot* sl = &sts[0].slots[k];
        loom_status_t rs;
        if (!sl->busy || !LOOM_PTR_IS_PTR(sl->recv)) continue;
        loom_request_cancel(g_worker, sl->recv);
        rs = wait_req(sl->recv, NULL);
        if (strcmp(mode, "lost") == 0 && rs == LOOM_OK && memcmp(sl->in, sl->out, sl->length) == 0) {
            continue; /* the echo came back over the link that is still up */
        }
        if (rs != LOOM_ERR_CANCELED) {
            fprintf(stderr, "fault_peer: receive %llu: %s after cancel\n", (unsigned long long)sl->seq,
                    loom_status_string(rs));
            goto out;
        }
    }
    printf("FAILED %s after %.1f s\n", loom_status_string(sts[0].peer.status), sts[0].peer.failed_at - t0);
    rc = sts[0].peer.failures == 1 &&
                 (strcmp(mode, "idle") != 0 || sts[0].peer.status == LOOM_ERR_PEER_TIMEOUT)
             ? 0
             : 1;
out:
    fflush(stdout);
    for (i = 0; i < nst; ++i) {
        loom_request_param_t rp;
        memset(&rp, 0, sizeof(rp));
        rp.op_attr_mask = LOOM_OP_ATTR_FIELD_FLAGS;
        rp.flags = LOOM_EP_CLOSE_FLAG_FORCE;
        (void)wait_req(loom_ep_close_nbx(sts[i].peer.ep, &rp), NULL);
        for (k = 0; k < kWindow; ++k) {
            /* A send still in flight was failed by the forced close: its buffers are free now. */
            free(sts[i].slots[k].out);
            free(sts[i].slots[k].in);
        }
    }
    return rc;
}

int main(int argc, char** argv) {
    loom_params_t params;
    loom_context_h ctx;
    const char *host = NULL, *port_file = NULL, *port = NULL, *mode = "flow", *gofile = NULL, *local = NULL;
    unsigned listen_port = 0;
    uint64_t count = 2 * kNumSizes;
    int listen_mode = 0, opt, rc;

    while ((opt = getopt(argc, argv, "l:p:c:P:m:f:L:n:t:")) != -1) {
        switch (opt) {
            case 'l':
                listen_mode = 1;
                listen_port = (unsigned)atoi(optarg);
                break;
            case 'p':
                port_file = optarg;
                break;
            case 'c':
                host = optarg;
                break;
            case 'P':
                port = optarg;
                break;
            case 'm':
                mode = optarg;
                break;
            case 'f':
                gofile = optarg;
                break;
            case 'L':
                local = optarg;
                break;
            case 'n':
                count = strtoull(optarg, NULL, 0);
                break;
            case 't':
                g_limit = atof(optarg);
                break;
            default:
                return 2;
        }
    }
    if (listen_mode ? port_file == NULL : (host == NULL || port == NULL || gofile == NULL)) {
        fprintf(stderr,
                "usage: %s -l PORT -p PORTFILE | -c HOST -P PORT -m flow|idle|busy -f GOFILE [-L HOST:PORT] "
                "[-n COUNT] [-t SECONDS]\n",
                argv[0]);
        return 2;
    }
    memset(&params, 0, sizeof(params));
    params.field_mask = LOOM_PARAM_FIELD_FEATURES;
    params.features = LOOM_FEATURE_TAG;
    if (loom_init(&params, &ctx) != LOOM_OK) return 1;
    if (loom_worker_create(ctx, NULL, &g_worker) != LOOM_OK) return 1;
    rc = listen_mode ? serve(listen_port, port_file) : client(host, port, local, mode, gofile, count);
    loom_worker_destroy(g_worker);
    loom_cleanup(ctx);
    return rc;
}
