/*
 * Thousands of outstanding requests: 5000 receives and 5000 sends per peer at once, to
 * and from every other rank, completed by MPI_Waitall, MPI_Waitany and MPI_Testsome.
 * Sizes are mostly small (0..199 B) with one 128 KiB message in 500 (rendezvous).
 *
 * Rounds:
 *  1. distinct tags, receives posted in a random order before the sends, MPI_Waitall;
 *  2. distinct tags, sends posted before the receives (2000 unexpected messages per peer),
 *     MPI_Waitany: requests complete in whatever order the stack completes them;
 *  3. distinct tags, sends and receives both in random orders, MPI_Testsome;
 *  4. one tag for everything, MPI_Testsome: receive k must get message k.
 */
#include "mpitest.h"

enum { kPerPeer = 5000, kWaitanyPerPeer = 2000, kBigEvery = 500, kBig = 131072, kSameTag = 32000 };

static size_t msg_size(int i) {
    return i % kBigEvery == kBigEvery - 1 ? kBig : (size_t)((i * 37) % 200);
}

typedef struct {
    int npeers;
    int* peer;        /* [npeers] */
    char* rarena;     /* receive buffers of all messages, peer by peer */
    char* sarena;     /* send buffers */
    size_t* off;      /* [kPerPeer] offset of message i inside a peer's block */
    size_t block;     /* bytes per peer */
    MPI_Request* req; /* [2 * npeers * kPerPeer]: receives, then sends */
    MPI_Status* st;
    int* done;
    int n; /* messages per peer in the current round (kPerPeer, or fewer for MPI_Waitany) */
} State;

/* Request index of message i from/to peer p. */
static int rix(const State* s, int p, int i) {
    return p * s->n + i;
}
static int six(const State* s, int p, int i) {
    return s->npeers * s->n + p * s->n + i;
}

static long msg_id(int round, int dest, int i) {
    return (long)round * 1000000 + (long)dest * kPerPeer + i;
}

static void post_recvs(State* s, MPI_Comm comm, int round, int same_tag, const int* order) {
    for (int p = 0; p < s->npeers; ++p) {
        for (int j = 0; j < s->n; ++j) {
            int i = order ? order[j] : j;
            MT_CALL(MPI_Irecv(s->rarena + p * s->block + s->off[i], (int)msg_size(i), MPI_BYTE, s->peer[p],
                              same_tag ? kSameTag : i, comm, &s->req[rix(s, p, i)]));
        }
    }
    (void)round;
}

static void post_sends(State* s, MPI_Comm comm, int round, int same_tag, const int* order) {
    for (int p = 0; p < s->npeers; ++p) {
        char* base = s->sarena + p * s->block;
        for (int i = 0; i < s->n; ++i)
            mt_fill(base + s->off[i], msg_size(i), mt_rank, msg_id(round, s->peer[p], i));
        for (int j = 0; j < s->n; ++j) {
            int i = order ? order[j] : j;
            MT_CALL(MPI_Isend(base + s->off[i], (int)msg_size(i), MPI_BYTE, s->peer[p],
                              same_tag ? kSameTag : i, comm, &s->req[six(s, p, i)]));
        }
    }
}

/* Checks one completed receive request (index r) against the message it must hold. */
static void check_recv(State* s, int round, int r, int same_tag) {
    int p = r / s->n, i = r % s->n;
    const char* what = round == 1 ? "MPI_Waitall" : round == 2 ? "MPI_Waitany" : "MPI_Testsome";
    mt_check_status(&s->st[r], s->peer[p], same_tag ? kSameTag : i, msg_size(i), what,
                    msg_id(round, mt_rank, i));
    mt_check_data(s->rarena + p * s->block + s->off[i], msg_size(i), s->peer[p], msg_id(round, mt_rank, i),
                  "round %d (%s), message %d of %d", round, what, i, s->n);
}

static void round_waitall(State* s, MPI_Comm comm, mt_rng* rng) {
    s->n = kPerPeer;
    int* order = (int*)mt_malloc(s->n * sizeof(int));
    mt_shuffle(order, s->n, rng);
    post_recvs(s, comm, 1, 0, order);
    MPI_Barrier(comm);
    post_sends(s, comm, 1, 0, NULL);
    int total = 2 * s->npeers * s->n;
    MT_CALL(MPI_Waitall(total, s->req, s->st));
    for (int r = 0; r < s->npeers * s->n; ++r) check_recv(s, 1, r, 0);
    free(order);
}

static void round_waitany(State* s, MPI_Comm comm, mt_rng* rng) {
    /* Every MPI_Waitany call scans its array, and MPICH's scan is slow enough on 2 cores
     * shared by 3 ranks to take seconds with 5000 per peer: fewer here. */
    s->n = kWaitanyPerPeer;
    int* order = (int*)mt_malloc(s->n * sizeof(int));
    mt_shuffle(order, s->n, rng);
    post_sends(s, comm, 2, 0, NULL);
    MPI_Barrier(comm);
    post_recvs(s, comm, 2, 0, order);
    int total = 2 * s->npeers * s->n, nrecv = s->npeers * s->n;
    /* MPI_Waitany scans its whole array: completed slots are swapped out of the active
     * range, so that the scans shrink (map[] gives each slot's request index). */
    MPI_Request* reqs = (MPI_Request*)mt_malloc(total * sizeof(MPI_Request));
    int* map = (int*)mt_malloc(total * sizeof(int));
    memcpy(reqs, s->req, total * sizeof(MPI_Request));
    for (int r = 0; r < total; ++r) map[r] = r;
    memset(s->done, 0, total * sizeof(int));
    for (int active = total; active > 0; --active) {
        int slot = -1;
        MPI_Status st;
        MT_CALL(MPI_Waitany(active, reqs, &slot, &st));
        if (slot < 0 || slot >= active || s->done[map[slot]]) {
            mt_fail("MPI_Waitany over %d requests returned index %d", active, slot);
            break;
        }
        int idx = map[slot];
        s->done[idx] = 1;
        if (idx < nrecv) {
            s->st[idx] = st;
            check_recv(s, 2, idx, 0);
        }
        reqs[slot] = reqs[active - 1];
        map[slot] = map[active - 1];
    }
    free(reqs);
    free(map);
    free(order);
}

static void round_testsome(State* s, MPI_Comm comm, mt_rng* rng, int same_tag) {
    const int round = same_tag ? 4 : 3;
    s->n = kPerPeer;
    int* rorder = (int*)mt_malloc(s->n * sizeof(int));
    int* sorder = (int*)mt_malloc(s->n * sizeof(int));
    mt_shuffle(rorder, s->n, rng);
    mt_shuffle(sorder, s->n, rng);
    /* One tag: the receives and the sends must go in order, so that receive k gets message k. */
    post_recvs(s, comm, round, same_tag, same_tag ? NULL : rorder);
    post_sends(s, comm, round, same_tag, same_tag ? NULL : sorder);
    int total = 2 * s->npeers * s->n, nrecv = s->npeers * s->n, left = total;
    int* idx = (int*)mt_malloc(total * sizeof(int));
    MPI_Status* st = (MPI_Status*)mt_malloc(total * sizeof(MPI_Status));
    memset(s->done, 0, total * sizeof(int));
    while (left > 0) {
        int outcount = 0;
        MT_CALL(MPI_Testsome(total, s->req, &outcount, idx, st));
        if (outcount == MPI_UNDEFINED) {
            mt_fail("MPI_Testsome: MPI_UNDEFINED with %d requests left", left);
            break;
        }
        for (int k = 0; k < outcount; ++k) {
            int r = idx[k];
            if (r < 0 || r >= total || s->done[r]) {
                mt_fail("MPI_Testsome returned index %d twice or out of range", r);
                continue;
            }
            s->done[r] = 1;
            --left;
            if (r < nrecv) {
                s->st[r] = st[k];
                check_recv(s, round, r, same_tag);
            }
        }
    }
    int outcount = 0;
    MT_CALL(MPI_Testsome(total, s->req, &outcount, idx, st));
    mt_check_long(outcount, MPI_UNDEFINED, "MPI_Testsome with every request inactive: outcount");
    free(idx);
    free(st);
    free(rorder);
    free(sorder);
}

int main(int argc, char** argv) {
    mt_init(&argc, &argv, "test_many_requests");
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    State s;
    s.npeers = mt_size - 1;
    s.peer = (int*)mt_malloc(s.npeers * sizeof(int));
    for (int p = 0, r = 0; r < mt_size; ++r)
        if (r != mt_rank) s.peer[p++] = r;
    s.off = (size_t*)mt_malloc(kPerPeer * sizeof(size_t));
    s.block = 0;
    for (int i = 0; i < kPerPeer; ++i) {
        s.off[i] = s.block;
        s.block += msg_size(i);
    }
    s.rarena = (char*)mt_malloc(s.block * s.npeers);
    s.sarena = (char*)mt_malloc(s.block * s.npeers);
    int total = 2 * s.npeers * kPerPeer;
    s.req = (MPI_Request*)mt_malloc(total * sizeof(MPI_Request));
    s.st = (MPI_Status*)mt_malloc(total * sizeof(MPI_Status));
    s.done = (int*)mt_malloc(total * sizeof(int));
    mt_rng rng = mt_rng_seed(1000 + mt_rank);

    mt_phase("%d receives and %d sends per peer, MPI_Waitall", kPerPeer, kPerPeer);
    round_waitall(&s, comm, &rng);
    MPI_Barrier(comm);
    mt_phase("%d sends per peer first (unexpected), MPI_Waitany", kWaitanyPerPeer);
    round_waitany(&s, comm, &rng);
    MPI_Barrier(comm);
    mt_phase("random orders, MPI_Testsome");
    round_testsome(&s, comm, &rng, 0);
    MPI_Barrier(comm);
    mt_phase("one tag, MPI_Testsome");
    round_testsome(&s, comm, &rng, 1);

    free(s.peer), free(s.off), free(s.rarena), free(s.sarena), free(s.req), free(s.st), free(s.done);
    MPI_Comm_free(&comm);
    return mt_finish();
}
