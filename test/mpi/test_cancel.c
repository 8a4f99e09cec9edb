/*
 * MPI_Cancel.
 *  - A posted receive that never matches: MPI_Test_cancelled is true after MPI_Wait (or
 *    an MPI_Test loop), one or many at once, ANY_SOURCE too; a message sent on the same
 *    tag afterwards goes to a receive posted afterwards, intact (the cancelled receive
 *    is really gone).
 *  - A receive that already matched (its sender's MPI_Ssend completed): MPI_Cancel does
 *    not cancel it and the data arrive intact, eager and rendezvous sizes.
 *  - A send (cancelling sends is optional in MPI): whatever happens, nothing breaks. The
 *    sender tells the receiver whether the send was cancelled; if it was, it sends a
 *    marker instead, so the receiver's receive always matches. Rank 0 prints what the
 *    stack did ("send cancel ...: cancelled" / "not cancelled").
 * Ranks form a ring: each sends to its right neighbour and receives from its left one.
 */
#include "mpitest.h"

enum { kTagNever = 50, kTagLate = 51, kTagMatched = 52, kTagData = 53, kTagCtl = 54, kTagFlag = 55 };

static int right(void) {
    return (mt_rank + 1) % mt_size;
}
static int left(void) {
    return (mt_rank + mt_size - 1) % mt_size;
}

static void cancel_unmatched(MPI_Comm comm) {
    enum { kMany = 100 };
    static const size_t sizes[] = {8, 1048576};
    for (int si = 0; si < 2; ++si) {
        size_t len = sizes[si];
        char* buf = (char*)mt_malloc(len);
        /* One receive, completed by MPI_Wait; one with ANY_SOURCE, completed by an MPI_Test loop. */
        for (int how = 0; how < 2; ++how) {
            MPI_Request req;
            MPI_Status st;
            int src = how ? MPI_ANY_SOURCE : left(), flag = 0, cancelled = 0;
            MT_CALL(MPI_Irecv(buf, (int)len, MPI_BYTE, src, kTagLate, comm, &req));
            MT_CALL(MPI_Cancel(&req));
            if (how == 0) {
                MT_CALL(MPI_Wait(&req, &st));
            } else {
                while (!flag) MT_CALL(MPI_Test(&req, &flag, &st));
            }
            MPI_Test_cancelled(&st, &cancelled);
            mt_check(cancelled, "cancel of an unmatched %s receive (%zu B) completed by %s: not cancelled",
                     how ? "ANY_SOURCE" : "source", len, how ? "MPI_Test" : "MPI_Wait");
            mt_check(req == MPI_REQUEST_NULL,
                     "cancelled receive: request not MPI_REQUEST_NULL after completion");
        }
        /* Many at once, cancelled in reverse order, completed by MPI_Waitall. */
        MPI_Request reqs[kMany];
        MPI_Status sts[kMany];
        for (int i = 0; i < kMany; ++i)
            MT_CALL(MPI_Irecv(buf, (int)(i % 2 ? len : 0), MPI_BYTE, left(), kTagNever, comm, &reqs[i]));
        for (int i = kMany - 1; i >= 0; --i) MT_CALL(MPI_Cancel(&reqs[i]));
        MT_CALL(MPI_Waitall(kMany, reqs, sts));
        int n_cancelled = 0;
        for (int i = 0; i < kMany; ++i) {
            int c = 0;
            MPI_Test_cancelled(&sts[i], &c);
            n_cancelled += c;
        }
        mt_check_long(n_cancelled, kMany, "%d cancelled receives completed by MPI_Waitall: cancelled", kMany);

        /* The tag of the cancelled receives is used now: the new receive gets the message. */
        MPI_Barrier(comm);
        char* s = (char*)mt_malloc(len);
        mt_fill(s, len, mt_rank, 10 + si);
        MPI_Request sreq;
        MT_CALL(MPI_Isend(s, (int)len, MPI_BYTE, right(), kTagLate, comm, &sreq));
        MPI_Status st;
        memset(buf, 0, len);
        MT_CALL(MPI_Recv(buf, (int)len, MPI_BYTE, left(), kTagLate, comm, &st));
        mt_check_status(&st, left(), kTagLate, len, "receive after cancelled ones on the same tag", 10 + si);
        mt_check_data(buf, len, left(), 10 + si, "receive after cancelled ones on the same tag (%zu B)", len);
        MT_CALL(MPI_Wait(&sreq, MPI_STATUS_IGNORE));
        free(s);
        free(buf);
        MPI_Barrier(comm);
    }
}

static void cancel_matched(MPI_Comm comm) {
    static const size_t sizes[] = {0, 64, 8192, 262144, 4194304};
    for (int si = 0; si < 5; ++si) {
        size_t len = sizes[si];
        long id = 20 + si;
        char* s = (char*)mt_malloc(len);
        char* r = (char*)mt_malloc(len + 1);
        mt_fill(s, len, mt_rank, id);
        MPI_Request rreq;
        MT_CALL(MPI_Irecv(r, (int)len, MPI_BYTE, left(), kTagMatched, comm, &rreq));
        /* MPI_Ssend completes only once the receive has matched; the barrier after it tells
         * every receiver that its receive matched. */
        MT_CALL(MPI_Ssend(s, (int)len, MPI_BYTE, right(), kTagMatched, comm));
        MPI_Barrier(comm);
        MT_CALL(MPI_Cancel(&rreq));
        MPI_Status st;
        MT_CALL(MPI_Wait(&rreq, &st));
        int cancelled = 1;
        MPI_Test_cancelled(&st, &cancelled);
        mt_check(!cancelled, "cancel of a matched receive (%zu B): cancelled", len);
        if (!cancelled) {
            mt_check_status(&st, left(), kTagMatched, len, "matched receive, then MPI_Cancel", id);
            mt_check_data(r, len, left(), id, "matched receive, then MPI_Cancel (%zu B)", len);
        }
        free(s);
        free(r);
    }
}

static void cancel_send(MPI_Comm comm) {
    static const size_t sizes[] = {64, 1048576};
    enum { kMarker = 16 };
    for (int si = 0; si < 2; ++si) {
        size_t len = sizes[si];
        long id = 30 + si, marker_id = 40 + si;
        char* s = (char*)mt_malloc(len);
        mt_fill(s, len, mt_rank, id);
        MPI_Request sreq, rreq;
        MT_CALL(MPI_Isend(s, (int)len, MPI_BYTE, right(), kTagData, comm, &sreq));
        MT_CALL(MPI_Cancel(&sreq));
        /* The receiver posts its receive only after this message: a cancelled send has no
         * match to race with, an uncancelled one completes once it is received. */
        MT_CALL(MPI_Send(NULL, 0, MPI_BYTE, right(), kTagCtl, comm));
        MT_CALL(MPI_Recv(NULL, 0, MPI_BYTE, left(), kTagCtl, comm, MPI_STATUS_IGNORE));
        char* r = (char*)mt_malloc(len);
        MT_CALL(MPI_Irecv(r, (int)len, MPI_BYTE, left(), kTagData, comm, &rreq));

        MPI_Status st;
        MT_CALL(MPI_Wait(&sreq, &st));
        int cancelled = 0;
        MPI_Test_cancelled(&st, &cancelled);
        char marker[kMarker];
        mt_fill(marker, kMarker, mt_rank, marker_id);
        if (cancelled) MT_CALL(MPI_Send(marker, kMarker, MPI_BYTE, right(), kTagData, comm));
        MT_CALL(MPI_Send(&cancelled, 1, MPI_INT, right(), kTagFlag, comm));

        int peer_cancelled = -1;
        MT_CALL(MPI_Wait(&rreq, &st));
        MT_CALL(MPI_Recv(&peer_cancelled, 1, MPI_INT, left(), kTagFlag, comm, MPI_STATUS_IGNORE));
        if (peer_cancelled) {
            mt_check_status(&st, left(), kTagData, kMarker, "after a cancelled send: the marker", marker_id);
            mt_check_data(r, kMarker, left(), marker_id, "after a cancelled send: the marker");
        } else {
            mt_check_status(&st, left(), kTagData, len, "a send whose cancel failed", id);
            mt_check_data(r, len, left(), id, "a send whose cancel failed (%zu B)", len);
        }
        int all = 0;
        MPI_Allreduce(&cancelled, &all, 1, MPI_INT, MPI_SUM, comm);
        if (mt_rank == 0)
            printf("test_cancel: send cancel (%zu B, receiver not yet posted): %d of %d sends cancelled\n",
                   len, all, mt_size);
        free(s);
        free(r);
    }
}

int main(int argc, char** argv) {
    mt_init(&argc, &argv, "test_cancel");
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    mt_phase("cancel receives that never match");
    cancel_unmatched(comm);
    MPI_Barrier(comm);
    mt_phase("cancel receives that matched");
    cancel_matched(comm);
    MPI_Barrier(comm);
    mt_phase("cancel sends");
    cancel_send(comm);
    MPI_Comm_free(&comm);
    return mt_finish();
}
