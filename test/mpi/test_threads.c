/*
 * MPI_THREAD_MULTIPLE: the library must grant it (Open MPI's pml ucx asks the UCX worker
 * for thread mode multi and refuses the level otherwise), and four threads per rank then
 * exchange messages with every other rank at once, each on its own tag, at eager and
 * rendezvous sizes, with blocking and non-blocking calls and probes, while a fifth thread
 * keeps calling MPI_Iprobe on a tag nobody uses. Every byte is checked.
 */
#include "mpitest.h"

#include <pthread.h>

enum { kThreads = 4, kRounds = 6, kIdleTag = 999 };

static const size_t kThreadSizes[] = {0, 8, 1000, 20000, 300000, 1200000};
enum { kNumThreadSizes = sizeof(kThreadSizes) / sizeof(kThreadSizes[0]) };

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int g_stop_idle = 0;

/* A thread's own tally: mt_check and friends count without a lock, so threads count here. */
typedef struct {
    int index;
    long passed;
    long failed;
    char first_failure[256];
} Tally;

static void tally(Tally* t, int ok, const char* what, int peer, size_t len) {
    if (ok) {
        ++t->passed;
        return;
    }
    if (t->failed++ == 0) {
        snprintf(t->first_failure, sizeof(t->first_failure), "thread %d: %s (peer %d, %zu B)", t->index, what, peer,
                 len);
    }
}

static int data_ok(const unsigned char* buf, size_t len, int sender, long msg) {
    for (size_t i = 0; i < len; ++i) {
        if (buf[i] != mt_pattern(sender, msg, i)) return 0;
    }
    return 1;
}

static void* worker(void* arg) {
    Tally* t = (Tally*)arg;
    const int tag = 100 + t->index;
    for (int round = 0; round < kRounds; ++round) {
        for (int s = 0; s < kNumThreadSizes; ++s) {
            const size_t len = kThreadSizes[(s + t->index) % kNumThreadSizes];
            const long msg = 1000L * t->index + 10L * round + s;
            int n = mt_size - 1;
            MPI_Request* reqs = malloc(sizeof(MPI_Request) * 2 * (size_t)n);
            unsigned char** in = malloc(sizeof(unsigned char*) * (size_t)n);
            unsigned char* out = mt_malloc(len);
            mt_fill(out, len, mt_rank, msg);
            int k = 0;
            for (int p = 0; p < mt_size; ++p) {
                if (p == mt_rank) continue;
                in[k] = mt_malloc(len + 1);
                if (round % 2 == 0) {
                    MPI_Irecv(in[k], (int)len, MPI_BYTE, p, tag, MPI_COMM_WORLD, &reqs[2 * k]);
                } else {
                    reqs[2 * k] = MPI_REQUEST_NULL; /* received below with a probe */
                }
                MPI_Isend(out, (int)len, MPI_BYTE, p, tag, MPI_COMM_WORLD, &reqs[2 * k + 1]);
                ++k;
            }
            k = 0;
            for (int p = 0; p < mt_size; ++p) {
                if (p == mt_rank) continue;
                if (round % 2 != 0) {
                    MPI_Message m;
                    MPI_Status st;
                    MPI_Mprobe(p, tag, MPI_COMM_WORLD, &m, &st);
                    int count = -1;
                    MPI_Get_count(&st, MPI_BYTE, &count);
                    tally(t, count == (int)len, "MPI_Mprobe: wrong count", p, len);
                    MPI_Mrecv(in[k], (int)len, MPI_BYTE, &m, MPI_STATUS_IGNORE);
                }
                ++k;
            }
            MPI_Waitall(2 * n, reqs, MPI_STATUSES_IGNORE);
            k = 0;
            for (int p = 0; p < mt_size; ++p) {
                if (p == mt_rank) continue;
                tally(t, data_ok(in[k], len, p, msg), "wrong data", p, len);
                free(in[k]);
                ++k;
            }
            free(out);
            free(in);
            free(reqs);
        }
    }
    return NULL;
}

static void* idle_prober(void* arg) {
    (void)arg;
    while (!g_stop_idle) {
        int flag = 0;
        MPI_Iprobe(MPI_ANY_SOURCE, kIdleTag, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        if (flag) {
            pthread_mutex_lock(&g_lock);
            mt_fail("the idle prober found a message on a tag nobody sends");
            pthread_mutex_unlock(&g_lock);
            break;
        }
    }
    return NULL;
}

int main(int argc, char** argv) {
    int provided = -1;
    mt_name = "test_threads";
    setvbuf(stdout, NULL, _IOLBF, 0);
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &mt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &mt_size);
    if (provided != MPI_THREAD_MULTIPLE) {
        if (mt_rank == 0) printf("test_threads: FAIL MPI_THREAD_MULTIPLE not granted (provided %d)\n", provided);
        MPI_Finalize();
        return 1;
    }
    ++mt_passed;
    mt_phase("%d threads per rank, every pair of ranks", kThreads);
    pthread_t th[kThreads], idle;
    Tally tallies[kThreads];
    memset(tallies, 0, sizeof(tallies));
    pthread_create(&idle, NULL, idle_prober, NULL);
    for (int i = 0; i < kThreads; ++i) {
        tallies[i].index = i;
        pthread_create(&th[i], NULL, worker, &tallies[i]);
    }
    for (int i = 0; i < kThreads; ++i) pthread_join(th[i], NULL);
    g_stop_idle = 1;
    pthread_join(idle, NULL);
    for (int i = 0; i < kThreads; ++i) {
        mt_passed += tallies[i].passed;
        if (tallies[i].failed) {
            mt_fail("%s (%ld failed checks in this thread)", tallies[i].first_failure, tallies[i].failed);
            mt_failed += tallies[i].failed - 1;
        }
    }
    return mt_finish();
}
