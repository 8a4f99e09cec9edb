/*
 * Persistent requests: MPI_Send_init / MPI_Ssend_init / MPI_Recv_init, started many times
 * with MPI_Start and MPI_Startall and new data every time (the receive buffer is wiped
 * before each start, so stale data from the previous round shows), completed by
 * MPI_Waitall, MPI_Wait and MPI_Test loops, at eager and rendezvous sizes; MPI_Test_cancelled
 * false and the status right each time; MPI_Request_free of the inactive requests at the end.
 * Ranks form a ring: each sends to its right neighbour and receives from its left one.
 */
#include "mpitest.h"

enum { kIters = 30, kN = 5, kTag = 61 };
static const size_t kLen[kN] = {0, 64, 8192, 262144, 1048576};

int main(int argc, char** argv) {
    mt_init(&argc, &argv, "test_persistent");
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    const int right = (mt_rank + 1) % mt_size, left = (mt_rank + mt_size - 1) % mt_size;

    char* sbuf[kN];
    char* rbuf[kN];
    MPI_Request req[2 * kN]; /* receives, then sends */
    for (int k = 0; k < kN; ++k) {
        sbuf[k] = (char*)mt_malloc(kLen[k]);
        rbuf[k] = (char*)mt_malloc(kLen[k] + 16);
        /* Odd message kinds take the source from ANY_SOURCE; the last one is synchronous. */
        MT_CALL(MPI_Recv_init(rbuf[k], (int)kLen[k] + 16, MPI_BYTE, k % 2 ? MPI_ANY_SOURCE : left, kTag + k,
                              comm, &req[k]));
        if (k == kN - 1 || k == 1)
            MT_CALL(MPI_Ssend_init(sbuf[k], (int)kLen[k], MPI_BYTE, right, kTag + k, comm, &req[kN + k]));
        else
            MT_CALL(MPI_Send_init(sbuf[k], (int)kLen[k], MPI_BYTE, right, kTag + k, comm, &req[kN + k]));
    }
    mt_phase("%d rounds of %d persistent sends and receives", kIters, kN);
    for (int it = 0; it < kIters; ++it) {
        for (int k = 0; k < kN; ++k) {
            mt_fill(sbuf[k], kLen[k], mt_rank, 1000L * it + k);
            memset(rbuf[k], 0, kLen[k] + 16);
        }
        MPI_Status st[2 * kN];
        int how = it % 3;
        if (how == 0) {
            /* Everything at once. */
            MT_CALL(MPI_Startall(kN, req));
            MT_CALL(MPI_Startall(kN, req + kN));
            MT_CALL(MPI_Waitall(2 * kN, req, st));
        } else {
            /* One by one, sends first; completed by MPI_Wait or by an MPI_Test loop. */
            for (int k = 0; k < kN; ++k) MT_CALL(MPI_Start(&req[kN + k]));
            for (int k = kN - 1; k >= 0; --k) MT_CALL(MPI_Start(&req[k]));
            for (int r = 0; r < 2 * kN; ++r) {
                if (how == 1) {
                    MT_CALL(MPI_Wait(&req[r], &st[r]));
                } else {
                    int flag = 0;
                    while (!flag) MT_CALL(MPI_Test(&req[r], &flag, &st[r]));
                }
            }
        }
        for (int k = 0; k < kN; ++k) {
            int cancelled = 1;
            MPI_Test_cancelled(&st[k], &cancelled);
            mt_check(!cancelled, "round %d, persistent receive %d: cancelled", it, k);
            mt_check_status(&st[k], left, kTag + k, kLen[k], "persistent receive", 1000L * it + k);
            mt_check_data(rbuf[k], kLen[k], left, 1000L * it + k,
                          "round %d (%s), persistent receive of %zu B", it,
                          how == 0   ? "MPI_Startall + MPI_Waitall"
                          : how == 1 ? "MPI_Start + MPI_Wait"
                                     : "MPI_Start + MPI_Test",
                          kLen[k]);
            mt_check(req[k] != MPI_REQUEST_NULL && req[kN + k] != MPI_REQUEST_NULL,
                     "round %d: a completed persistent request became MPI_REQUEST_NULL", it);
        }
    }
    /* An inactive persistent request completes at once with an empty status. */
    MPI_Status st;
    int flag = 0;
    MT_CALL(MPI_Test(&req[0], &flag, &st));
    mt_check(flag && st.MPI_TAG == MPI_ANY_TAG && st.MPI_SOURCE == MPI_ANY_SOURCE,
             "MPI_Test of an inactive persistent request: flag %d tag %d source %d", flag, st.MPI_TAG,
             st.MPI_SOURCE);
    for (int r = 0; r < 2 * kN; ++r) {
        MT_CALL(MPI_Request_free(&req[r]));
        mt_check(req[r] == MPI_REQUEST_NULL,
                 "MPI_Request_free of a persistent request: handle not MPI_REQUEST_NULL");
    }
    for (int k = 0; k < kN; ++k) {
        free(sbuf[k]);
        free(rbuf[k]);
    }
    MPI_Comm_free(&comm);
    return mt_finish();
}
