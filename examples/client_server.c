/*
 * A C client and server over Loom: the server listens on a socket address, the client
 * connects to it by IP and port (no address exchange of its own), sends a text, and the
 * server answers it in upper case. The server sleeps while idle (LOOM_FEATURE_WAKEUP).
 *
 *   server:  client_server -l PORT [-p PORTFILE]   (PORT 0: any free port, written to PORTFILE)
 *   client:  client_server -c HOST -P PORT [TEXT]
 *
 * Build against the installed tree:
 *
 *   cc -std=c99 client_server.c $(pkg-config --cflags --libs loom) -o client_server
 *
 * LOOM_TLS picks the transports the endpoints use once connected (shm, tcp, rc, ...);
 * the listening socket is TCP whatever they are. Exit status 0 on success.
 */
#define _POSIX_C_SOURCE 200809L
#include <loom/ucp.h>

#include <arpa/inet.h>
#include <ctype.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { kMaxText = 4096 };
static const loom_tag_t kRequestTag = 7, kReplyTag = 8;

static loom_worker_h g_worker;

/* Waits for a status-or-request, sleeping on the worker while nothing happens. */
static loom_status_t wait_for(loom_status_ptr_t r) {
    loom_status_t s;
    if (!LOOM_PTR_IS_PTR(r)) return LOOM_PTR_STATUS(r);
    while ((s = loom_request_check_status(r)) == LOOM_INPROGRESS) {
        if (loom_worker_progress(g_worker) == 0) (void)loom_worker_wait(g_worker);
    }
    loom_request_free(r);
    return s;
}

/*
 * wait_for for a tagged receive: fills @p info however it completes. (Its
 * LOOM_OP_ATTR_FIELD_RECV_INFO fills info only when the receive completes in the call;
 * a request reports it through loom_tag_recv_request_test.)
 */
static loom_status_t wait_recv(loom_status_ptr_t r, loom_tag_recv_info_t* info) {
    loom_status_t s;
    if (!LOOM_PTR_IS_PTR(r)) return LOOM_PTR_STATUS(r);
    while ((s = loom_tag_recv_request_test(r, info)) == LOOM_INPROGRESS) {
        if (loom_worker_progress(g_worker) == 0) (void)loom_worker_wait(g_worker);
    }
    loom_request_free(r);
    return s;
}

static int check(loom_status_t s, const char* what) {
    if (s == LOOM_OK) return 0;
    fprintf(stderr, "client_server: %s: %s\n", what, loom_status_string(s));
    return 1;
}

/* The server's state: the endpoint its connection handler created. */
static loom_ep_h g_server_ep;

static void on_connection(loom_conn_request_h request, void* arg) {
    loom_ep_params_t params;
    struct sockaddr_storage client;
    char host[INET6_ADDRSTRLEN] = "?";
    (void)arg;
    if (loom_conn_request_query(request, &client) == LOOM_OK && client.ss_family == AF_INET) {
        inet_ntop(AF_INET, &((struct sockaddr_in*)&client)->sin_addr, host, sizeof(host));
    }
    printf("server: connection from %s\n", host);
    memset(&params, 0, sizeof(params));
    params.field_mask = LOOM_EP_PARAM_FIELD_CONN_REQUEST;
    params.conn_request = request;
    if (check(loom_ep_create(g_worker, &params, &g_server_ep), "accept")) g_server_ep = NULL;
}

static int serve(unsigned port, const char* port_file) {
    loom_listener_params_t params;
    loom_listener_h listener;
    struct sockaddr_in addr;
    struct sockaddr_storage bound;
    loom_tag_recv_info_t info;
    loom_request_param_t rp;
    char text[kMaxText];
    size_t i;
    int rc = 1;

    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_port = htons((unsigned short)port);
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    memset(&params, 0, sizeof(params));
    params.field_mask = LOOM_LISTENER_PARAM_FIELD_SOCK_ADDR | LOOM_LISTENER_PARAM_FIELD_CONN_HANDLER;
    params.sockaddr.addr = (const struct sockaddr*)&addr;
    params.sockaddr.addrlen = sizeof(addr);
    params.conn_handler.cb = on_connection;
    if (check(loom_listener_create(g_worker, &params, &listener), "listen")) return 1;
    if (check(loom_listener_query(listener, &bound), "listener address")) goto out;
    port = ntohs(((struct sockaddr_in*)&bound)->sin_port);
    printf("server: listening on port %u\n", port);
    fflush(stdout);
    if (port_file != NULL) {
        FILE* f = fopen(port_file, "w");
        if (f == NULL || fprintf(f, "%u\n", port) < 0 || fclose(f) != 0) {
            perror(port_file);
            goto out;
        }
    }
    /* One client: sleep until it connects, answer its text, and stop. */
    while (g_server_ep == NULL) {
        if (loom_worker_progress(g_worker) == 0) (void)loom_worker_wait(g_worker);
    }
    memset(&rp, 0, sizeof(rp));
    rp.op_attr_mask = LOOM_OP_ATTR_FIELD_RECV_INFO;
    rp.recv_info.tag_recv = &info;
    if (check(wait_recv(loom_tag_recv_nbx(g_worker, text, sizeof(text) - 1, kRequestTag, ~(loom_tag_t)0, &rp),
                        &info),
              "receive")) {
        goto out;
    }
    text[info.length] = '\0';
    printf("server: got \"%s\"\n", text);
    for (i = 0; i < info.length; ++i) text[i] = (char)toupper((unsigned char)text[i]);
    if (check(wait_for(loom_tag_send_nbx(g_server_ep, text, info.length, kReplyTag, NULL)), "reply")) goto out;
    if (check(wait_for(loom_ep_close_nbx(g_server_ep, NULL)), "close")) goto out;
    rc = 0;
out:
    loom_listener_destroy(listener);
    return rc;
}

static int connect_and_ask(const char* host, unsigned port, const char* text) {
    struct addrinfo hints, *res = NULL;
    loom_ep_params_t params;
    loom_ep_h ep;
    char port_text[16], reply[kMaxText];
    loom_tag_recv_info_t info;
    loom_request_param_t rp;
    loom_status_ptr_t rreq;
    size_t length = strlen(text), i;
    int rc = 1, err;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(port_text, sizeof(port_text), "%u", port);
    if ((err = getaddrinfo(host, port_text, &hints, &res)) != 0) {
        fprintf(stderr, "client_server: %s: %s\n", host, gai_strerror(err));
        return 1;
    }
    memset(&params, 0, sizeof(params));
    params.field_mask = LOOM_EP_PARAM_FIELD_SOCK_ADDR;
    params.sockaddr.addr = res->ai_addr;
    params.sockaddr.addrlen = res->ai_addrlen;
    err = check(loom_ep_create(g_worker, &params, &ep), "connect");
    freeaddrinfo(res);
    if (err) return 1;
    memset(&rp, 0, sizeof(rp));
    rp.op_attr_mask = LOOM_OP_ATTR_FIELD_RECV_INFO;
    rp.recv_info.tag_recv = &info;
    rreq = loom_tag_recv_nbx(g_worker, reply, sizeof(reply), kReplyTag, ~(loom_tag_t)0, &rp);
    if (check(wait_for(loom_tag_send_nbx(ep, text, length, kRequestTag, NULL)), "send")) goto out;
    if (check(wait_recv(rreq, &info), "reply")) goto out;
    if (info.length != length) {
        fprintf(stderr, "client_server: the reply has %zu bytes, not %zu\n", info.length, length);
        goto out;
    }
    for (i = 0; i < length; ++i) {
        if (reply[i] != (char)toupper((unsigned char)text[i])) {
            fprintf(stderr, "client_server: wrong reply at byte %zu\n", i);
            goto out;
        }
    }
    printf("client: the server answered \"%.*s\"\n", (int)length, reply);
    rc = 0;
out:
    (void)wait_for(loom_ep_close_nbx(ep, NULL));
    return rc;
}

int main(int argc, char** argv) {
    loom_params_t params;
    loom_context_h ctx;
    const char *host = NULL, *port_file = NULL, *text = "hello from a loom client";
    unsigned port = 0;
    int listen_mode = 0, opt, rc;

    while ((opt = getopt(argc, argv, "l:p:c:P:")) != -1) {
        switch (opt) {
        case 'l': listen_mode = 1; port = (unsigned)atoi(optarg); break;
        case 'p': port_file = optarg; break;
        case 'c': host = optarg; break;
        case 'P': port = (unsigned)atoi(optarg); break;
        default:
            fprintf(stderr, "usage: %s -l PORT [-p PORTFILE] | -c HOST -P PORT [TEXT]\n", argv[0]);
            return 2;
        }
    }
    if (optind < argc) text = argv[optind];
    if (!listen_mode && (host == NULL || port == 0)) {
        fprintf(stderr, "usage: %s -l PORT [-p PORTFILE] | -c HOST -P PORT [TEXT]\n", argv[0]);
        return 2;
    }
    if (strlen(text) >= kMaxText) {
        fprintf(stderr, "client_server: the text is longer than %d bytes\n", kMaxText - 1);
        return 2;
    }
    memset(&params, 0, sizeof(params));
    params.field_mask = LOOM_PARAM_FIELD_FEATURES;
    params.features = LOOM_FEATURE_TAG | LOOM_FEATURE_WAKEUP;
    if (check(loom_init(&params, &ctx), "loom_init")) return 1;
    if (check(loom_worker_create(ctx, NULL, &g_worker), "loom_worker_create")) {
        loom_cleanup(ctx);
        return 1;
    }
    rc = listen_mode ? serve(port, port_file) : connect_and_ask(host, port, text);
    loom_worker_destroy(g_worker);
    loom_cleanup(ctx);
    return rc;
}
