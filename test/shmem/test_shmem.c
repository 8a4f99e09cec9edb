/*
 * OpenSHMEM on Loom, checked value by value (Open MPI 4.1.4's oshmem: spml ucx carries every
 * operation below through Loom's RMA and atomics): puts and gets of sizes from 1 byte to
 * 1 MiB to the symmetric heap (shmem_malloc) and to a global (static data: registered, not
 * allocated, memory), atomics from every PE on one counter with exact final values (fetch-add,
 * add, inc, swap, compare-swap, and/or/xor; 32 and 64 bit), shmem_fence ordering, shmem_quiet,
 * barriers, shmem_wait_until and a distributed lock. Prints "test_shmem: N checks passed" on
 * PE 0 (or the failures), exit status 0 or 1 on every PE.
 */
#include <shmem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kMaxSize = 1 << 20, kRounds = 50 };

static int me, npes;
static long passed, failed, skipped;
/* TEST_SHMEM_KNOWN_BUGS=fetch_xor: the stack under test (UCX 1.13 under spml ucx) gets
 * fetch-xor wrong; its checks are counted as skipped (run_shmem_suite.sh says why). */
static int skip_fetch_xor;

/* Globals: the data segment, registered by spml ucx rather than allocated. */
static unsigned char global_buf[65536];
static long long global_counter;
static int global_counter32;
static long lock_word;
static long long flag_word;
static long long ordered[2];

static unsigned char pattern(int pe, int round, size_t off) {
    uint32_t x = (uint32_t)off * 0x9E3779B1u + (uint32_t)pe * 0x85EBCA6Bu + (uint32_t)round * 0xC2B2AE35u;
    x ^= x >> 15;
    x *= 0x2C1B3C6Du;
    x ^= x >> 12;
    return (unsigned char)(x ^ (x >> 24));
}

static void fill(unsigned char* p, size_t n, int pe, int round) {
    for (size_t i = 0; i < n; ++i) p[i] = pattern(pe, round, i);
}

static void check(int cond, const char* fmt, long long a, long long b) {
    if (cond) {
        ++passed;
        return;
    }
    if (++failed <= 20) {
        printf("test_shmem: FAIL pe %d: ", me);
        printf(fmt, a, b);
        printf("\n");
        fflush(stdout);
    }
}

static void check_data(const unsigned char* p, size_t n, int pe, int round, const char* what) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; ++i) {
        if (p[i] != pattern(pe, round, i) && bad++ == 0) first = i;
    }
    if (bad == 0) {
        ++passed;
    } else if (++failed <= 20) {
        printf("test_shmem: FAIL pe %d: %s, %zu bytes from pe %d: %zu differ, the first at %zu\n", me, what, n, pe,
               bad, first);
        fflush(stdout);
    }
}

/* Every PE puts `size` bytes into its slot of the right neighbour's buffer, then gets it back. */
static void put_get(unsigned char* sym, size_t slot, int round, const char* where) {
    int right = (me + 1) % npes, left = (me + npes - 1) % npes;
    unsigned char* src = malloc(slot);
    unsigned char* back = malloc(slot);
    for (size_t size = 1; size <= slot; size *= 4) {
        fill(src, size, me, round);
        shmem_putmem(sym, src, size, right);
        shmem_quiet();
        shmem_barrier_all();
        check_data(sym, size, left, round, where);
        memset(back, 0, size);
        shmem_getmem(back, sym, size, right);
        check_data(back, size, me, round, where);
        shmem_barrier_all();
        ++round;
    }
    free(src);
    free(back);
}

static void atomics(long long* c64, int* c32, const char* where) {
    shmem_barrier_all();
    /* Every PE adds on PE 0's counters: fetch-add, add and inc; then exact totals. */
    long long last = -1;
    for (int i = 0; i < kRounds; ++i) {
        long long prev = shmem_longlong_atomic_fetch_add(c64, 2, 0);
        check(prev > last, "fetch_add returned %lld after %lld (values must grow)", prev, last);
        last = prev;
        shmem_longlong_atomic_add(c64, 1, 0);
        shmem_int_atomic_inc(c32, 0);
        (void)shmem_int_atomic_fetch_add(c32, 3, 0);
    }
    shmem_quiet();
    shmem_barrier_all();
    if (me == 0) {
        check(*c64 == 3LL * kRounds * npes, "64-bit counter %lld, expected %lld", *c64, 3LL * kRounds * npes);
        check(*c32 == 4 * kRounds * npes, "32-bit counter %lld, expected %lld", *c32, 4LL * kRounds * npes);
    }
    shmem_barrier_all();
    /* Compare-and-swap increments from every PE: exact. */
    for (int i = 0; i < kRounds; ++i) {
        long long seen = shmem_longlong_atomic_fetch(c64, 0), want;
        do {
            want = seen;
            seen = shmem_longlong_atomic_compare_swap(c64, want, want + 1, 0);
        } while (seen != want);
    }
    shmem_barrier_all();
    if (me == 0) {
        check(*c64 == 4LL * kRounds * npes, "after compare-swap increments %lld, expected %lld", *c64,
              4LL * kRounds * npes);
    }
    shmem_barrier_all();
    /* Bitwise: every PE sets its bit with or, flips a shared mask with xor, clears with and. */
    if (me == 0) *c64 = 0;
    shmem_barrier_all();
    shmem_longlong_atomic_or(c64, 1LL << me, 0);
    shmem_barrier_all();
    if (me == 0) check(*c64 == (1LL << npes) - 1, "or of every PE's bit: %lld, expected %lld", *c64, (1LL << npes) - 1);
    shmem_barrier_all();
    if (skip_fetch_xor) {
        skipped += 2;
    } else {
        (void)shmem_longlong_atomic_fetch_xor(c64, 1LL << (me + 8), 0);
        shmem_barrier_all();
        long long x = shmem_longlong_atomic_fetch(c64, 0);
        check(x == (((1LL << npes) - 1) | (((1LL << npes) - 1) << 8)), "after xor %lld, expected %lld", x,
              ((1LL << npes) - 1) | (((1LL << npes) - 1) << 8));
        shmem_barrier_all();
        shmem_longlong_atomic_and(c64, ~(1LL << me), 0);
        shmem_barrier_all();
        if (me == 0) {
            check(*c64 == (((1LL << npes) - 1) << 8), "after and %lld, expected %lld", *c64,
                  ((1LL << npes) - 1) << 8);
        }
    }
    /* Swap: a chain through every PE, each sees the previous one's value. */
    if (me == 0) *c32 = -1;
    shmem_barrier_all();
    for (int turn = 0; turn < npes; ++turn) {
        if (turn == me) {
            int prev = shmem_int_atomic_swap(c32, me, 0);
            check(prev == turn - 1, "swap saw %lld, expected %lld", prev, turn - 1);
        }
        shmem_barrier_all();
    }
    if (me == 0) {
        *c64 = 0;
        *c32 = 0;
    }
    shmem_barrier_all();
    (void)where;
}

/* fence: PE 0 puts data then a flag to PE 1 with a fence between; PE 1 waits for the flag
 * and must see the data. quiet: then a put is complete at the target. */
static void ordering(void) {
    shmem_barrier_all();
    if (npes >= 2) {
        for (int round = 1; round <= kRounds; ++round) {
            if (me == 0) {
                long long v = round;
                shmem_longlong_put(&ordered[0], &v, 1, 1);
                shmem_fence();
                shmem_longlong_put(&flag_word, &v, 1, 1);
            } else if (me == 1) {
                shmem_longlong_wait_until(&flag_word, SHMEM_CMP_GE, round);
                check(ordered[0] >= round, "after the fence the data is %lld, the flag %lld", ordered[0], flag_word);
            }
        }
        shmem_barrier_all();
        if (me == 0) {
            long long v = 77;
            shmem_longlong_put(&ordered[1], &v, 1, 1);
            shmem_quiet();
            long long back = 0;
            shmem_longlong_get(&back, &ordered[1], 1, 1);
            check(back == 77, "get after quiet read %lld, expected %lld", back, 77);
        }
    }
    shmem_barrier_all();
}

/* A distributed lock: each PE increments a plain (non-atomic) counter on PE 0 inside it. */
static void locking(long long* c64) {
    shmem_barrier_all();
    for (int i = 0; i < 10; ++i) {
        shmem_set_lock(&lock_word);
        long long v = shmem_longlong_g(c64, 0);
        shmem_longlong_p(c64, v + 1, 0);
        shmem_quiet();
        shmem_clear_lock(&lock_word);
    }
    shmem_barrier_all();
    if (me == 0) check(*c64 == 10LL * npes, "counter under the lock %lld, expected %lld", *c64, 10LL * npes);
    shmem_barrier_all();
}

int main(void) {
    shmem_init();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    const char* bugs = getenv("TEST_SHMEM_KNOWN_BUGS");
    skip_fetch_xor = bugs && strstr(bugs, "fetch_xor") != NULL;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (npes < 2) {
        if (me == 0) printf("test_shmem: FAIL needs at least 2 PEs, got %d\n", npes);
        shmem_global_exit(1);
    }
    unsigned char* heap = shmem_malloc(kMaxSize);
    long long* heap_counter = shmem_malloc(sizeof(long long));
    int* heap_counter32 = shmem_malloc(sizeof(int));
    if (!heap || !heap_counter || !heap_counter32) {
        printf("test_shmem: FAIL pe %d: shmem_malloc\n", me);
        shmem_global_exit(1);
    }
    *heap_counter = 0;
    *heap_counter32 = 0;
    if (me == 0) printf("test_shmem: phase puts and gets, symmetric heap\n");
    put_get(heap, kMaxSize, 1, "symmetric heap");
    if (me == 0) printf("test_shmem: phase puts and gets, a global\n");
    put_get(global_buf, sizeof(global_buf), 100, "global");
    if (me == 0) printf("test_shmem: phase atomics, symmetric heap\n");
    atomics(heap_counter, heap_counter32, "symmetric heap");
    if (me == 0) printf("test_shmem: phase atomics, globals\n");
    atomics(&global_counter, &global_counter32, "global");
    if (me == 0) printf("test_shmem: phase fence, quiet, wait_until\n");
    ordering();
    if (me == 0) printf("test_shmem: phase lock\n");
    locking(heap_counter);
    shmem_free(heap);
    shmem_free(heap_counter);
    shmem_free(heap_counter32);
    /* Sum the verdicts on PE 0. */
    static long counts[3], totals[3];
    static long pwrk[SHMEM_REDUCE_MIN_WRKDATA_SIZE];
    static long psync[SHMEM_REDUCE_SYNC_SIZE];
    for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; ++i) psync[i] = SHMEM_SYNC_VALUE;
    counts[0] = passed;
    counts[1] = failed;
    counts[2] = skipped;
    shmem_barrier_all();
    shmem_long_sum_to_all(totals, counts, 3, 0, 0, npes, pwrk, psync);
    if (me == 0) {
        if (totals[2] != 0) printf("test_shmem: SKIP fetch_xor: %ld checks of fetch-xor and the and after it\n", totals[2]);
        if (totals[1] == 0)
            printf("test_shmem: %ld checks passed\n", totals[0]);
        else
            printf("test_shmem: %ld checks FAILED, %ld passed\n", totals[1], totals[0]);
    }
    int status = totals[1] == 0 ? 0 : 1;
    shmem_finalize();
    return status;
}
