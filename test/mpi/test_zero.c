/*
 * Zero-byte messages, with NULL and non-NULL buffers, between ranks and to self: the
 * status says count 0 with the right source and tag, a non-NULL receive buffer stays
 * untouched, a zero-byte message keeps its place in a stream of non-empty ones on the same
 * tag, and count 0 of a derived datatype, probes, MPI_Ssend and wildcards all work.
 * Ranks form a ring: each sends to its right neighbour and receives from its left one.
 */
#include "mpitest.h"

enum { kTag = 21, kCap = 64, kStream = 24 };
static const unsigned char kUntouched = 0xA5;

static int right(void) {
    return (mt_rank + 1) % mt_size;
}
static int left(void) {
    return (mt_rank + mt_size - 1) % mt_size;
}

/* One zero-byte message from `to`'s point of view: sent to `to`, received from `from`. */
static void zero_pair(MPI_Comm comm, int to, int from, const char* who) {
    unsigned char sbuf[8] = {1, 2, 3, 4, 5, 6, 7, 8}, rbuf[kCap];
    MPI_Status st;
    MPI_Request req;
    /* NULL buffers at both ends, the receive posted first. */
    MT_CALL(MPI_Irecv(NULL, 0, MPI_BYTE, from, kTag, comm, &req));
    MT_CALL(MPI_Send(NULL, 0, MPI_BYTE, to, kTag, comm));
    MT_CALL(MPI_Wait(&req, &st));
    mt_check_status(&st, from, kTag, 0, who, 1);
    /* A non-NULL send buffer into a larger non-NULL receive buffer, the message first. */
    memset(rbuf, kUntouched, kCap);
    MT_CALL(MPI_Isend(sbuf, 0, MPI_BYTE, to, kTag + 1, comm, &req));
    MT_CALL(MPI_Recv(rbuf, kCap, MPI_BYTE, from, kTag + 1, comm, &st));
    MT_CALL(MPI_Wait(&req, MPI_STATUS_IGNORE));
    mt_check_status(&st, from, kTag + 1, 0, who, 2);
    mt_check_untouched(rbuf, kCap, kUntouched, "%s: receive buffer after a zero-byte message", who);
    /* NULL send buffer, non-NULL receive buffer; wildcards. */
    memset(rbuf, kUntouched, kCap);
    MT_CALL(MPI_Irecv(rbuf, kCap, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &req));
    MT_CALL(MPI_Send(NULL, 0, MPI_INT, to, kTag + 2, comm));
    MT_CALL(MPI_Wait(&req, &st));
    mt_check_status(&st, from, kTag + 2, 0, who, 3);
    mt_check_untouched(rbuf, kCap, kUntouched, "%s: ANY_SOURCE receive buffer after a zero-byte message",
                       who);
    /* Synchronous, probed. */
    MT_CALL(MPI_Issend(sbuf, 0, MPI_BYTE, to, kTag + 3, comm, &req));
    MT_CALL(MPI_Probe(from, kTag + 3, comm, &st));
    mt_check_status(&st, from, kTag + 3, 0, "MPI_Probe of a zero-byte message", 4);
    MT_CALL(MPI_Recv(NULL, 0, MPI_BYTE, from, kTag + 3, comm, &st));
    MT_CALL(MPI_Wait(&req, MPI_STATUS_IGNORE));
    mt_check_status(&st, from, kTag + 3, 0, "zero-byte MPI_Issend", 4);
    /* Count 0 of a derived datatype. */
    MPI_Datatype vec;
    MPI_Type_vector(3, 1, 2, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    memset(rbuf, kUntouched, kCap);
    MT_CALL(MPI_Irecv(rbuf, 2, vec, from, kTag + 4, comm, &req)); /* room for 2, gets 0 */
    MT_CALL(MPI_Send(sbuf, 0, vec, to, kTag + 4, comm));
    MT_CALL(MPI_Wait(&req, &st));
    int count = -1;
    MPI_Get_count(&st, vec, &count);
    mt_check_long(count, 0, "%s: count 0 of a vector type: MPI_Get_count", who);
    mt_check_untouched(rbuf, kCap, kUntouched, "%s: receive buffer after count 0 of a vector type", who);
    MPI_Type_free(&vec);
}

/* Zero-byte messages keep their place among non-empty ones on the same tag. */
static void zero_in_stream(MPI_Comm comm) {
    static const size_t big[] = {1, 8, 1024, 65536, 1048576};
    size_t len[kStream];
    for (int k = 0; k < kStream; ++k) len[k] = k % 2 ? 0 : big[(k / 2) % 5];
    MPI_Request sreq[kStream], rreq[kStream];
    char* sbuf[kStream];
    char* rbuf[kStream];
    for (int k = 0; k < kStream; ++k) {
        rbuf[k] = (char*)mt_malloc(1048576 + 8);
        memset(rbuf[k], kUntouched, 1048576 + 8);
        MT_CALL(MPI_Irecv(rbuf[k], 1048576 + 8, MPI_BYTE, left(), kTag + 10, comm, &rreq[k]));
    }
    for (int k = 0; k < kStream; ++k) {
        sbuf[k] = len[k] ? (char*)mt_malloc(len[k]) : (k % 4 == 1 ? NULL : (char*)mt_malloc(1));
        if (len[k]) mt_fill(sbuf[k], len[k], mt_rank, 100 + k);
        MT_CALL(MPI_Isend(sbuf[k], (int)len[k], MPI_BYTE, right(), kTag + 10, comm, &sreq[k]));
    }
    MPI_Status st[kStream];
    MT_CALL(MPI_Waitall(kStream, rreq, st));
    MT_CALL(MPI_Waitall(kStream, sreq, MPI_STATUSES_IGNORE));
    for (int k = 0; k < kStream; ++k) {
        mt_check_status(&st[k], left(), kTag + 10, len[k], "zero-byte messages in a stream", 100 + k);
        if (len[k])
            mt_check_data(rbuf[k], len[k], left(), 100 + k,
                          "stream position %d (%zu B) between zero-byte messages", k, len[k]);
        else
            mt_check_untouched(rbuf[k], 1048576 + 8, kUntouched,
                               "stream position %d: zero-byte message's buffer", k);
        free(rbuf[k]);
        free(sbuf[k]);
    }
}

int main(int argc, char** argv) {
    mt_init(&argc, &argv, "test_zero");
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    mt_phase("zero-byte messages between ranks");
    zero_pair(comm, right(), left(), "zero bytes between ranks");
    MPI_Barrier(comm);
    mt_phase("zero-byte messages to self");
    zero_pair(comm, mt_rank, mt_rank, "zero bytes to self");
    MPI_Barrier(comm);
    mt_phase("zero-byte messages in a stream");
    zero_in_stream(comm);
    MPI_Comm_free(&comm);
    return mt_finish();
}
