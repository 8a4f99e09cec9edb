/* Start-up cost of UCX's protocol layer: ucp_init, ucp_worker_create, the worker
 * address, then teardown. Prints "init_us worker_us address_us cleanup_us". Built and
 * run by startup.py (pkg-config ucx). */
#define _POSIX_C_SOURCE 199309L
#include <ucp/api/ucp.h>

#include <stdio.h>
#include <time.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int main(void) {
    double t0 = now_us();
    ucp_params_t params = {0};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    ucp_context_h context;
    ucs_status_t s = ucp_init(&params, NULL, &context);
    if (s != UCS_OK) {
        fprintf(stderr, "ucp_init: %s\n", ucs_status_string(s));
        return 1;
    }
    double t1 = now_us();
    ucp_worker_params_t wp = {0};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    ucp_worker_h worker;
    s = ucp_worker_create(context, &wp, &worker);
    if (s != UCS_OK) {
        fprintf(stderr, "ucp_worker_create: %s\n", ucs_status_string(s));
        return 1;
    }
    double t2 = now_us();
    ucp_address_t* address;
    size_t length;
    s = ucp_worker_get_address(worker, &address, &length);
    if (s != UCS_OK) {
        fprintf(stderr, "ucp_worker_get_address: %s\n", ucs_status_string(s));
        return 1;
    }
    double t3 = now_us();
    ucp_worker_release_address(worker, address);
    ucp_worker_destroy(worker);
    ucp_cleanup(context);
    double t4 = now_us();
    printf("%.1f %.1f %.1f %.1f %zu\n", t1 - t0, t2 - t1, t3 - t2, t4 - t3, length);
    return 0;
}
