/*
 * A C ping-pong over Loom's tagged messages: two processes on one host.
 *
 *   server:  tag_ping_pong -s /tmp/addr     (writes its worker address to the file)
 *   client:  tag_ping_pong -c /tmp/addr     (reads it, connects, pings)
 *
 * The address travels through a file to keep the example short; an MPI library would
 * exchange it with its own bootstrap. Build against the installed tree:
 *
 *   cc -std=c99 tag_ping_pong.c $(pkg-config --cflags --libs loom) -o tag_ping_pong
 *
 * LOOM_TLS picks the transport (shm, tcp, ...). Exit status 0 when every reply carried
 * the expected bytes.
 */
#define _POSIX_C_SOURCE 200809L
#include <loom/ucp.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { kIters = 1000, kSize = 64 };
static const loom_tag_t kPingTag = 1, kPongTag = 2, kHelloTag = 3;

static loom_worker_h g_worker;

/* Waits for a status-or-request to complete and releases the request. */
static loom_status_t wait_for(loom_status_ptr_t r) {
    loom_status_t s;
    if (!LOOM_PTR_IS_PTR(r)) return LOOM_PTR_STATUS(r);
    while ((s = loom_request_check_status(r)) == LOOM_INPROGRESS) loom_worker_progress(g_worker);
    loom_request_free(r);
    return s;
}

static int check(loom_status_t s, const char* what) {
    if (s == LOOM_OK) return 0;
    fprintf(stderr, "tag_ping_pong: %s: %s\n", what, loom_status_string(s));
    return 1;
}

int main(int argc, char** argv) {
    loom_params_t params;
    loom_context_h ctx;
    loom_ep_params_t ep_params;
    loom_ep_h ep;
    void* addr;
    size_t addr_len;
    char buf[kSize];
    int server, i;
    FILE* f;

    if (argc != 3 || (strcmp(argv[1], "-s") != 0 && strcmp(argv[1], "-c") != 0)) {
        fprintf(stderr, "usage: %s -s|-c ADDRESS_FILE\n", argv[0]);
        return 2;
    }
    server = strcmp(argv[1], "-s") == 0;

    memset(&params, 0, sizeof(params));
    params.field_mask = LOOM_PARAM_FIELD_FEATURES;
    params.features = LOOM_FEATURE_TAG;
    if (check(loom_init(&params, &ctx), "loom_init")) return 1;
    if (check(loom_worker_create(ctx, NULL, &g_worker), "loom_worker_create")) return 1;
    if (check(loom_worker_get_address(g_worker, &addr, &addr_len), "get_address")) return 1;

    if (server) {
        /* Publish our address, then wait for the client's in a hello message. */
        char tmp[4096];
        loom_tag_recv_info_t info;
        loom_request_param_t rp;
        snprintf(tmp, sizeof(tmp), "%s.tmp", argv[2]);
        f = fopen(tmp, "wb");
        if (!f || fwrite(addr, 1, addr_len, f) != addr_len || fclose(f) != 0 || rename(tmp, argv[2]) != 0) {
            perror("tag_ping_pong: writing the address");
            return 1;
        }
        {
            char peer[4096];
            memset(&rp, 0, sizeof(rp));
            rp.op_attr_mask = LOOM_OP_ATTR_FIELD_RECV_INFO;
            rp.recv_info.tag_recv = &info;
            if (check(wait_for(loom_tag_recv_nbx(g_worker, peer, sizeof(peer), kHelloTag, ~(loom_tag_t)0, &rp)),
                      "hello")) {
                return 1;
            }
            memset(&ep_params, 0, sizeof(ep_params));
            ep_params.field_mask = LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS;
            ep_params.address = peer;
            if (check(loom_ep_create(g_worker, &ep_params, &ep), "loom_ep_create")) return 1;
        }
        for (i = 0; i < kIters; ++i) {
            if (check(wait_for(loom_tag_recv_nbx(g_worker, buf, kSize, kPingTag, ~(loom_tag_t)0, NULL)), "ping")) return 1;
            if (check(wait_for(loom_tag_send_nbx(ep, buf, kSize, kPongTag, NULL)), "pong")) return 1;
        }
    } else {
        char peer[4096];
        size_t n = 0;
        for (i = 0; i < 3000 && n == 0; ++i) { /* wait up to 30 s for the server */
            f = fopen(argv[2], "rb");
            if (f) {
                n = fread(peer, 1, sizeof(peer), f);
                fclose(f);
            }
            if (n == 0) {
                struct timespec nap = {0, 10000000};
                nanosleep(&nap, NULL);
            }
        }
        if (n == 0) {
            fprintf(stderr, "tag_ping_pong: no server address in %s\n", argv[2]);
            return 1;
        }
        memset(&ep_params, 0, sizeof(ep_params));
        ep_params.field_mask = LOOM_EP_PARAM_FIELD_REMOTE_ADDRESS;
        ep_params.address = peer;
        if (check(loom_ep_create(g_worker, &ep_params, &ep), "loom_ep_create")) return 1;
        if (check(wait_for(loom_tag_send_nbx(ep, addr, addr_len, kHelloTag, NULL)), "hello")) return 1;
        for (i = 0; i < kIters; ++i) {
            char back[kSize];
            memset(buf, i & 0xff, kSize);
            if (check(wait_for(loom_tag_send_nbx(ep, buf, kSize, kPingTag, NULL)), "ping")) return 1;
            if (check(wait_for(loom_tag_recv_nbx(g_worker, back, kSize, kPongTag, ~(loom_tag_t)0, NULL)), "pong")) {
                return 1;
            }
            if (memcmp(buf, back, kSize) != 0) {
                fprintf(stderr, "tag_ping_pong: reply %d differs from the ping\n", i);
                return 1;
            }
        }
        printf("tag_ping_pong: %d round trips of %d bytes OK\n", kIters, kSize);
    }
    {
        loom_request_param_t cp;
        memset(&cp, 0, sizeof(cp));
        if (check(wait_for(loom_ep_close_nbx(ep, &cp)), "close")) return 1;
    }
    loom_worker_release_address(g_worker, addr);
    loom_worker_destroy(g_worker);
    loom_cleanup(ctx);
    return 0;
}
