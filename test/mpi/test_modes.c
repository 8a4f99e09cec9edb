/*
 * Send modes, at eager and rendezvous sizes.
 *  - MPI_Issend does not complete before its receive is posted: the receiver waits with
 *    MPI_Iprobe until the message (or its rendezvous request) is there and tells the
 *    sender, who checks its MPI_Issend is still incomplete; only then does the receiver
 *    post the receive. A handshake, no sleeps.
 *  - MPI_Ssend against a posted receive.
 *  - MPI_Bsend and MPI_Ibsend with MPI_Buffer_attach: they complete before the receiver
 *    posts anything; the send buffer is overwritten as soon as they return (the attached
 *    buffer holds the copy); MPI_Buffer_detach waits for delivery.
 *  - MPI_Rsend and MPI_Irsend into receives posted before a barrier.
 * Ranks form a ring: each sends to its right neighbour and receives from its left one.
 */
#include "mpitest.h"

enum { kTagData = 70, kTagArrived = 71, kTagGo = 72, kTagB = 73, kTagR = 74, kTagS = 75 };
static const size_t kLen[] = {0, 64, 8192, 262144, 1048576};
enum { kN = sizeof(kLen) / sizeof(kLen[0]) };

static int right(void) {
    return (mt_rank + 1) % mt_size;
}
static int left(void) {
    return (mt_rank + mt_size - 1) % mt_size;
}

static char* filled(size_t len, long id) {
    char* b = (char*)mt_malloc(len);
    mt_fill(b, len, mt_rank, id);
    return b;
}

static void issend_waits_for_receive(MPI_Comm comm) {
    for (int i = 0; i < kN; ++i) {
        size_t len = kLen[i];
        long id = 10 + i;
        char* s = filled(len, id);
        MPI_Request sreq, arrived_req, go_req, notify_req = MPI_REQUEST_NULL;
        char dummy_in = 0, dummy_go = 0, one = 1;
        MT_CALL(MPI_Irecv(&dummy_in, 1, MPI_CHAR, right(), kTagArrived, comm, &arrived_req));
        MT_CALL(MPI_Irecv(&dummy_go, 1, MPI_CHAR, left(), kTagGo, comm, &go_req));
        MT_CALL(MPI_Issend(s, (int)len, MPI_BYTE, right(), kTagData, comm, &sreq));

        /* Sender: until the receiver says the message is there, MPI_Issend must not complete.
         * Receiver: probe until the message from the left is there, then say so. */
        int arrived = 0, probed = 0, completed_early = 0;
        while (!arrived || !probed) {
            if (!probed) {
                int flag = 0;
                MT_CALL(MPI_Iprobe(left(), kTagData, comm, &flag, MPI_STATUS_IGNORE));
                if (flag) {
                    MT_CALL(MPI_Isend(&one, 1, MPI_CHAR, left(), kTagArrived, comm, &notify_req));
                    probed = 1;
                }
            }
            if (!arrived) MT_CALL(MPI_Test(&arrived_req, &arrived, MPI_STATUS_IGNORE));
            if (!completed_early) {
                int done = 0;
                MT_CALL(MPI_Test(&sreq, &done, MPI_STATUS_IGNORE));
                completed_early = done;
            }
        }
        mt_check(!completed_early, "MPI_Issend of %zu B completed before the receiver posted its receive",
                 len);
        MT_CALL(MPI_Send(&one, 1, MPI_CHAR, right(), kTagGo, comm));
        MT_CALL(MPI_Wait(&go_req, MPI_STATUS_IGNORE));
        char* r = (char*)mt_malloc(len);
        MPI_Status st;
        MT_CALL(MPI_Recv(r, (int)len, MPI_BYTE, left(), kTagData, comm, &st));
        mt_check_status(&st, left(), kTagData, len, "MPI_Issend", id);
        mt_check_data(r, len, left(), id, "MPI_Issend (%zu B) received after the handshake", len);
        MT_CALL(MPI_Wait(&sreq, MPI_STATUS_IGNORE));
        MT_CALL(MPI_Wait(&notify_req, MPI_STATUS_IGNORE));
        free(r);
        free(s);
    }
}

static void ssend(MPI_Comm comm) {
    for (int i = 0; i < kN; ++i) {
        size_t len = kLen[i];
        long id = 20 + i;
        char* s = filled(len, id);
        char* r = (char*)mt_malloc(len);
        MPI_Request req;
        MPI_Status st;
        MT_CALL(MPI_Irecv(r, (int)len, MPI_BYTE, left(), kTagS, comm, &req));
        MT_CALL(MPI_Ssend(s, (int)len, MPI_BYTE, right(), kTagS, comm));
        MT_CALL(MPI_Wait(&req, &st));
        mt_check_status(&st, left(), kTagS, len, "MPI_Ssend", id);
        mt_check_data(r, len, left(), id, "MPI_Ssend (%zu B)", len);
        free(r);
        free(s);
    }
}

static void bsend(MPI_Comm comm) {
    /* Every size twice: once by MPI_Bsend, once by MPI_Ibsend. */
    size_t need = 0;
    for (int i = 0; i < kN; ++i) need += 2 * (kLen[i] + MPI_BSEND_OVERHEAD);
    char* attached = (char*)mt_malloc(need);
    MT_CALL(MPI_Buffer_attach(attached, (int)need));
    MPI_Request ireq[kN];
    for (int i = 0; i < kN; ++i) {
        char* s = filled(kLen[i], 30 + i);
        MT_CALL(MPI_Bsend(s, (int)kLen[i], MPI_BYTE, right(), kTagB, comm));
        memset(s, 0x5A, kLen[i]); /* the attached buffer has the copy */
        mt_fill(s, kLen[i], mt_rank, 40 + i);
        MT_CALL(MPI_Ibsend(s, (int)kLen[i], MPI_BYTE, right(), kTagB, comm, &ireq[i]));
        /* A buffered send completes locally, whatever the receiver does. */
        int done = 0;
        for (int t = 0; t < 1000 && !done; ++t) MT_CALL(MPI_Test(&ireq[i], &done, MPI_STATUS_IGNORE));
        mt_check(done, "MPI_Ibsend of %zu B not complete after 1000 MPI_Test calls, receiver not yet posted",
                 kLen[i]);
        if (!done) MT_CALL(MPI_Wait(&ireq[i], MPI_STATUS_IGNORE));
        memset(s, 0x5A, kLen[i]);
        free(s);
    }
    MPI_Barrier(comm); /* only now do the receivers post */
    char* r = (char*)mt_malloc(1048576);
    for (int k = 0; k < 2 * kN; ++k) {
        int i = k / 2;
        long id = (k % 2 ? 40 : 30) + i;
        MPI_Status st;
        MT_CALL(MPI_Recv(r, 1048576, MPI_BYTE, left(), kTagB, comm, &st));
        mt_check_status(&st, left(), kTagB, kLen[i], k % 2 ? "MPI_Ibsend" : "MPI_Bsend", id);
        mt_check_data(r, kLen[i], left(), id, "%s (%zu B), the send buffer overwritten after the call",
                      k % 2 ? "MPI_Ibsend" : "MPI_Bsend", kLen[i]);
    }
    void* back = NULL;
    int back_size = 0;
    MT_CALL(MPI_Buffer_detach(&back, &back_size));
    mt_check(back == attached && (size_t)back_size == need, "MPI_Buffer_detach gave %p/%d, attached %p/%zu",
             back, back_size, (void*)attached, need);
    free(attached);
    free(r);
}

static void rsend(MPI_Comm comm) {
    MPI_Request rreq[2 * kN], sreq[kN];
    char* r[2 * kN];
    for (int k = 0; k < 2 * kN; ++k) {
        r[k] = (char*)mt_malloc(kLen[k / 2]);
        MT_CALL(MPI_Irecv(r[k], (int)kLen[k / 2], MPI_BYTE, left(), kTagR, comm, &rreq[k]));
    }
    MPI_Barrier(comm); /* every receive is posted: ready mode is legal now */
    char* s[2 * kN];
    for (int k = 0; k < 2 * kN; ++k) {
        s[k] = filled(kLen[k / 2], 50 + k);
        if (k % 2)
            MT_CALL(MPI_Irsend(s[k], (int)kLen[k / 2], MPI_BYTE, right(), kTagR, comm, &sreq[k / 2]));
        else
            MT_CALL(MPI_Rsend(s[k], (int)kLen[k / 2], MPI_BYTE, right(), kTagR, comm));
    }
    MPI_Status st[2 * kN];
    MT_CALL(MPI_Waitall(2 * kN, rreq, st));
    MT_CALL(MPI_Waitall(kN, sreq, MPI_STATUSES_IGNORE));
    for (int k = 0; k < 2 * kN; ++k) {
        mt_check_status(&st[k], left(), kTagR, kLen[k / 2], k % 2 ? "MPI_Irsend" : "MPI_Rsend", 50 + k);
        mt_check_data(r[k], kLen[k / 2], left(), 50 + k, "%s (%zu B)", k % 2 ? "MPI_Irsend" : "MPI_Rsend",
                      kLen[k / 2]);
        free(r[k]);
        free(s[k]);
    }
}

int main(int argc, char** argv) {
    mt_init(&argc, &argv, "test_modes");
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    mt_phase("MPI_Issend stays incomplete until the receive is posted");
    issend_waits_for_receive(comm);
    MPI_Barrier(comm);
    mt_phase("MPI_Ssend");
    ssend(comm);
    MPI_Barrier(comm);
    mt_phase("MPI_Bsend and MPI_Ibsend");
    bsend(comm);
    MPI_Barrier(comm);
    mt_phase("MPI_Rsend and MPI_Irsend");
    rsend(comm);
    MPI_Comm_free(&comm);
    return mt_finish();
}
