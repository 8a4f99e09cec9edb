/*
 * Messages from a rank to itself, at every size from 0 B to 4 MiB (eager and rendezvous):
 * receive posted first then MPI_Send; MPI_Isend then MPI_Recv (the message waits
 * unexpected); MPI_Sendrecv; MPI_Ssend against a posted receive; a stream of sizes to
 * self received in order; ANY_SOURCE (the status names the rank itself); a matched probe;
 * a derived datatype; and messages to self mixed with messages from the other ranks on one
 * tag. Every rank does it at once.
 */
#include "mpitest.h"

enum { kTag = 31 };

static char* filled(size_t len, long id) {
    char* b = (char*)mt_malloc(len);
    mt_fill(b, len, mt_rank, id);
    return b;
}

static void each_size(MPI_Comm comm) {
    const int me = mt_rank;
    for (int i = 0; i < mt_num_sizes; ++i) {
        size_t len = mt_sizes[i];
        long id = 10 * i;
        char* r = (char*)mt_malloc(len + 8);
        MPI_Status st;
        MPI_Request req;

        char* s = filled(len, id);
        MT_CALL(MPI_Irecv(r, (int)len, MPI_BYTE, me, kTag, comm, &req));
        MT_CALL(MPI_Send(s, (int)len, MPI_BYTE, me, kTag, comm));
        MT_CALL(MPI_Wait(&req, &st));
        mt_check_status(&st, me, kTag, len, "to self: MPI_Irecv then MPI_Send", id);
        mt_check_data(r, len, me, id, "to self: MPI_Irecv then MPI_Send (%zu B)", len);
        free(s);

        s = filled(len, id + 1);
        MT_CALL(MPI_Isend(s, (int)len, MPI_BYTE, me, kTag, comm, &req));
        MT_CALL(MPI_Recv(r, (int)len, MPI_BYTE, MPI_ANY_SOURCE, kTag, comm, &st));
        MT_CALL(MPI_Wait(&req, MPI_STATUS_IGNORE));
        mt_check_status(&st, me, kTag, len, "to self: MPI_Isend then MPI_Recv(ANY_SOURCE)", id + 1);
        mt_check_data(r, len, me, id + 1, "to self: MPI_Isend then MPI_Recv (%zu B)", len);
        free(s);

        s = filled(len, id + 2);
        MT_CALL(MPI_Sendrecv(s, (int)len, MPI_BYTE, me, kTag, r, (int)len, MPI_BYTE, me, kTag, comm, &st));
        mt_check_status(&st, me, kTag, len, "to self: MPI_Sendrecv", id + 2);
        mt_check_data(r, len, me, id + 2, "to self: MPI_Sendrecv (%zu B)", len);
        free(s);

        s = filled(len, id + 3);
        MT_CALL(MPI_Irecv(r, (int)len, MPI_BYTE, me, kTag, comm, &req));
        MT_CALL(MPI_Ssend(s, (int)len, MPI_BYTE, me, kTag, comm));
        MT_CALL(MPI_Wait(&req, &st));
        mt_check_status(&st, me, kTag, len, "to self: MPI_Ssend", id + 3);
        mt_check_data(r, len, me, id + 3, "to self: MPI_Ssend (%zu B)", len);
        free(s);

        s = filled(len, id + 4);
        MPI_Message msg;
        MT_CALL(MPI_Isend(s, (int)len, MPI_BYTE, me, kTag, comm, &req));
        MT_CALL(MPI_Mprobe(me, kTag, comm, &msg, &st));
        mt_check_status(&st, me, kTag, len, "to self: MPI_Mprobe", id + 4);
        MT_CALL(MPI_Mrecv(r, (int)len, MPI_BYTE, &msg, &st));
        MT_CALL(MPI_Wait(&req, MPI_STATUS_IGNORE));
        mt_check_data(r, len, me, id + 4, "to self: MPI_Mprobe + MPI_Mrecv (%zu B)", len);
        free(s);
        free(r);
    }
}

/* All sizes sent to self before any receive: they must come back in send order. */
static void stream_to_self(MPI_Comm comm) {
    MPI_Request req[mt_num_sizes];
    char* s[mt_num_sizes];
    for (int k = 0; k < mt_num_sizes; ++k) {
        size_t len = mt_sizes[(k * 4) % mt_num_sizes]; /* 0, 64K, 1, 256K, ... */
        s[k] = filled(len, 200 + k);
        MT_CALL(MPI_Isend(s[k], (int)len, MPI_BYTE, mt_rank, kTag + 1, comm, &req[k]));
    }
    char* r = (char*)mt_malloc(4194304 + 64);
    for (int k = 0; k < mt_num_sizes; ++k) {
        size_t len = mt_sizes[(k * 4) % mt_num_sizes];
        MPI_Status st;
        MT_CALL(MPI_Recv(r, 4194304 + 64, MPI_BYTE, mt_rank, kTag + 1, comm, &st));
        mt_check_status(&st, mt_rank, kTag + 1, len, "stream to self", 200 + k);
        mt_check_data(r, len, mt_rank, 200 + k, "stream to self, position %d (%zu B)", k, len);
    }
    MT_CALL(MPI_Waitall(mt_num_sizes, req, MPI_STATUSES_IGNORE));
    for (int k = 0; k < mt_num_sizes; ++k) free(s[k]);
    free(r);
}

/* A vector of doubles to self, received as contiguous doubles (3 MiB of data). */
static void datatype_to_self(MPI_Comm comm) {
    const int n = 131072;
    MPI_Datatype vec;
    MPI_Type_vector(n, 3, 4, MPI_DOUBLE, &vec);
    MPI_Type_commit(&vec);
    size_t span = ((size_t)(n - 1) * 4 + 3) * sizeof(double), data = (size_t)n * 3 * sizeof(double);
    unsigned char* s = (unsigned char*)mt_malloc(span);
    unsigned char* r = (unsigned char*)mt_malloc(data);
    memset(s, 0xEE, span);
    for (int b = 0; b < n; ++b)
        for (size_t k = 0; k < 3 * sizeof(double); ++k)
            s[(size_t)b * 4 * sizeof(double) + k] =
                mt_pattern(mt_rank, 300, (size_t)b * 3 * sizeof(double) + k);
    MPI_Request req;
    MPI_Status st;
    MT_CALL(MPI_Isend(s, 1, vec, mt_rank, kTag + 2, comm, &req));
    MT_CALL(MPI_Recv(r, 3 * n, MPI_DOUBLE, mt_rank, kTag + 2, comm, &st));
    MT_CALL(MPI_Wait(&req, MPI_STATUS_IGNORE));
    mt_check_status(&st, mt_rank, kTag + 2, data, "vector to self", 300);
    mt_check_data(r, data, mt_rank, 300, "vector of double to self, received contiguous");
    MPI_Type_free(&vec);
    free(s);
    free(r);
}

/* Every rank sends one message to every rank, itself included, on one tag; ANY_SOURCE receives. */
static void self_among_others(MPI_Comm comm) {
    const size_t len = 262144;
    MPI_Request* req = (MPI_Request*)mt_malloc(mt_size * sizeof(MPI_Request));
    char* s = filled(len, 400);
    for (int d = 0; d < mt_size; ++d) MT_CALL(MPI_Isend(s, (int)len, MPI_BYTE, d, kTag + 3, comm, &req[d]));
    char* r = (char*)mt_malloc(len);
    int* seen = (int*)calloc(mt_size, sizeof(int));
    for (int k = 0; k < mt_size; ++k) {
        MPI_Status st;
        MT_CALL(MPI_Recv(r, (int)len, MPI_BYTE, MPI_ANY_SOURCE, kTag + 3, comm, &st));
        int src = st.MPI_SOURCE;
        if (!mt_check(src >= 0 && src < mt_size && !seen[src],
                      "ANY_SOURCE with self among the senders: source %d", src))
            continue;
        seen[src] = 1;
        mt_check_data(r, len, src, 400, "ANY_SOURCE with self among the senders, from %d", src);
    }
    MT_CALL(MPI_Waitall(mt_size, req, MPI_STATUSES_IGNORE));
    free(seen);
    free(r);
    free(s);
    free(req);
}

int main(int argc, char** argv) {
    mt_init(&argc, &argv, "test_self");
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    mt_phase("every size to self");
    each_size(comm);
    mt_phase("a stream of sizes to self");
    stream_to_self(comm);
    mt_phase("a derived datatype to self");
    datatype_to_self(comm);
    MPI_Barrier(comm);
    mt_phase("self among the other senders");
    self_among_others(comm);
    MPI_Comm_free(&comm);
    return mt_finish();
}
