/* Start-up cost of Loom's protocol layer through the C API: loom_init,
 * loom_worker_create, the worker address, then teardown. Prints
 * "init_us worker_us address_us cleanup_us address_bytes". Built and run by
 * startup.py (pkg-config loom from an installed tree). */
#define _POSIX_C_SOURCE 199309L
#include <loom/ucp.h>

#include <stdio.h>
#include <time.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int main(void) {
    double t0 = now_us();
    loom_params_t params = {0};
    params.field_mask = LOOM_PARAM_FIELD_FEATURES;
    params.features = LOOM_FEATURE_TAG;
    loom_context_h context;
    loom_status_t s = loom_init(&params, &context);
    if (s != LOOM_OK) {
        fprintf(stderr, "loom_init: %s\n", loom_status_string(s));
        return 1;
    }
    double t1 = now_us();
    loom_worker_params_t wp = {0};
    wp.field_mask = LOOM_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = LOOM_THREAD_MODE_SINGLE;
    loom_worker_h worker;
    s = loom_worker_create(context, &wp, &worker);
    if (s != LOOM_OK) {
        fprintf(stderr, "loom_worker_create: %s\n", loom_status_string(s));
        return 1;
    }
    double t2 = now_us();
    void* address;
    size_t length;
    s = loom_worker_get_address(worker, &address, &length);
    if (s != LOOM_OK) {
        fprintf(stderr, "loom_worker_get_address: %s\n", loom_status_string(s));
        return 1;
    }
    double t3 = now_us();
    loom_worker_release_address(worker, address);
    loom_worker_destroy(worker);
    loom_cleanup(context);
    double t4 = now_us();
    printf("%.1f %.1f %.1f %.1f %zu\n", t1 - t0, t2 - t1, t3 - t2, t4 - t3, length);
    return 0;
}
