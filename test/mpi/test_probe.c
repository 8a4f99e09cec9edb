/*
 * Probe, Iprobe, Mprobe/Improbe with Mrecv/Imrecv: the probe's status (source, tag,
 * count) describes the message the following receive gets, at every size from 0 B to
 * 4 MiB; a matched probe (Mprobe/Improbe) takes the message out of the matching queue, so
 * that a receive posted afterwards gets the *next* message and Mrecv the probed one; and
 * MPI_PROC_NULL gives MPI_MESSAGE_NO_PROC.
 *
 * Ranks pair up in a ring: each rank sends to its right neighbour and probes and receives
 * from its left one, at the same time.
 */
#include "mpitest.h"

enum { kTag = 7 };

static char* make_msg(size_t len, long msg) {
    char* b = (char*)mt_malloc(len);
    mt_fill(b, len, mt_rank, msg);
    return b;
}

static int right(void) {
    return (mt_rank + 1) % mt_size;
}
static int left(void) {
    return (mt_rank + mt_size - 1) % mt_size;
}

/* Probe (blocking, then Iprobe until found) and receive into a buffer of the probed size. */
static void probe_then_recv(MPI_Comm comm) {
    for (int i = 0; i < mt_num_sizes; ++i) {
        size_t len = mt_sizes[i];
        long id = 100 + i;
        char* s = make_msg(len, id);
        MPI_Request sreq;
        MT_CALL(MPI_Isend(s, (int)len, MPI_BYTE, right(), kTag + i, comm, &sreq));
        MPI_Status st;
        int count = -1;
        if (i % 2 == 0) {
            MT_CALL(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &st));
        } else {
            int flag = 0;
            while (!flag) MT_CALL(MPI_Iprobe(left(), kTag + i, comm, &flag, &st));
        }
        const char* how = i % 2 == 0 ? "MPI_Probe(ANY_SOURCE, ANY_TAG)" : "MPI_Iprobe";
        mt_check_status(&st, left(), kTag + i, len, how, id);
        MPI_Get_count(&st, MPI_BYTE, &count);
        /* A second probe sees the same message. */
        MPI_Status again;
        MT_CALL(MPI_Probe(left(), MPI_ANY_TAG, comm, &again));
        mt_check_status(&again, left(), kTag + i, len, "second MPI_Probe", id);
        char* r = (char*)mt_malloc(count > 0 ? (size_t)count : 1);
        MT_CALL(MPI_Recv(r, count, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, comm, &st));
        mt_check_status(&st, left(), kTag + i, len, "MPI_Recv after a probe", id);
        mt_check_data(r, len, left(), id, "%s then MPI_Recv (%zu B)", how, len);
        MT_CALL(MPI_Wait(&sreq, MPI_STATUS_IGNORE));
        free(r);
        free(s);
    }
}

/* Two messages on one tag: Mprobe/Improbe takes the first, a later Recv must get the second. */
static void mprobe_takes_message(MPI_Comm comm) {
    for (int i = 0; i < mt_num_sizes; ++i) {
        size_t len = mt_sizes[i];
        long id1 = 200 + 2 * i, id2 = 201 + 2 * i;
        size_t len2 = mt_sizes[mt_num_sizes - 1 - i]; /* the second has another size */
        char* s1 = make_msg(len, id1);
        char* s2 = make_msg(len2, id2);
        MPI_Request sreq[2];
        MT_CALL(MPI_Isend(s1, (int)len, MPI_BYTE, right(), kTag, comm, &sreq[0]));
        MT_CALL(MPI_Isend(s2, (int)len2, MPI_BYTE, right(), kTag, comm, &sreq[1]));

        const int use_improbe = i % 2;
        const char* how = use_improbe ? "MPI_Improbe" : "MPI_Mprobe";
        MPI_Message msg = MPI_MESSAGE_NULL;
        MPI_Status st;
        if (use_improbe) {
            int flag = 0;
            while (!flag) MT_CALL(MPI_Improbe(MPI_ANY_SOURCE, kTag, comm, &flag, &msg, &st));
        } else {
            MT_CALL(MPI_Mprobe(left(), MPI_ANY_TAG, comm, &msg, &st));
        }
        mt_check_status(&st, left(), kTag, len, how, id1);
        int count = -1;
        MPI_Get_count(&st, MPI_BYTE, &count);

        /* The probed message is no longer matchable: this receive gets the second one. */
        char* r2 = (char*)mt_malloc(len2 + 64);
        MPI_Status st2;
        MT_CALL(MPI_Recv(r2, (int)(len2 + 64), MPI_BYTE, left(), kTag, comm, &st2));
        mt_check_status(&st2, left(), kTag, len2, "MPI_Recv after a matched probe", id2);
        mt_check_data(r2, len2, left(), id2, "MPI_Recv after %s gets the next message", how);

        char* r1 = (char*)mt_malloc(count > 0 ? (size_t)count : 1);
        MPI_Status st1;
        if (use_improbe) {
            MPI_Request rreq;
            MT_CALL(MPI_Imrecv(r1, count, MPI_BYTE, &msg, &rreq));
            MT_CALL(MPI_Wait(&rreq, &st1));
        } else {
            MT_CALL(MPI_Mrecv(r1, count, MPI_BYTE, &msg, &st1));
        }
        mt_check(msg == MPI_MESSAGE_NULL, "%s: message handle not MPI_MESSAGE_NULL after the receive", how);
        mt_check_status(&st1, left(), kTag, len, use_improbe ? "MPI_Imrecv" : "MPI_Mrecv", id1);
        mt_check_data(r1, len, left(), id1, "%s gets the probed message (%zu B)",
                      use_improbe ? "MPI_Imrecv" : "MPI_Mrecv", len);
        MT_CALL(MPI_Waitall(2, sreq, MPI_STATUSES_IGNORE));
        free(r1);
        free(r2);
        free(s1);
        free(s2);
    }
}

/* Several matched probes outstanding at once, received in reverse order. */
static void many_mprobes(MPI_Comm comm) {
    enum { kN = 8 };
    MPI_Request sreq[kN];
    char* s[kN];
    for (int k = 0; k < kN; ++k) {
        s[k] = make_msg(mt_sizes[k], 300 + k);
        MT_CALL(MPI_Isend(s[k], (int)mt_sizes[k], MPI_BYTE, right(), kTag + k, comm, &sreq[k]));
    }
    MPI_Message msg[kN];
    MPI_Status st[kN];
    for (int k = 0; k < kN; ++k) {
        MT_CALL(MPI_Mprobe(left(), MPI_ANY_TAG, comm, &msg[k], &st[k]));
        mt_check_status(&st[k], left(), kTag + k, mt_sizes[k], "outstanding MPI_Mprobe", 300 + k);
    }
    for (int k = kN - 1; k >= 0; --k) {
        char* r = (char*)mt_malloc(mt_sizes[k]);
        MPI_Status rst;
        MT_CALL(MPI_Mrecv(r, (int)mt_sizes[k], MPI_BYTE, &msg[k], &rst));
        mt_check_status(&rst, left(), kTag + k, mt_sizes[k], "MPI_Mrecv in reverse order", 300 + k);
        mt_check_data(r, mt_sizes[k], left(), 300 + k, "MPI_Mrecv in reverse order, message %d", k);
        free(r);
    }
    MT_CALL(MPI_Waitall(kN, sreq, MPI_STATUSES_IGNORE));
    for (int k = 0; k < kN; ++k) free(s[k]);
}

static void proc_null(MPI_Comm comm) {
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status st;
    MT_CALL(MPI_Mprobe(MPI_PROC_NULL, kTag, comm, &msg, &st));
    mt_check(msg == MPI_MESSAGE_NO_PROC, "MPI_Mprobe(MPI_PROC_NULL) gives MPI_MESSAGE_NO_PROC");
    mt_check_long(st.MPI_SOURCE, MPI_PROC_NULL, "MPI_Mprobe(MPI_PROC_NULL): status.MPI_SOURCE");
    char b[4] = {1, 2, 3, 4};
    MT_CALL(MPI_Mrecv(b, 4, MPI_BYTE, &msg, &st));
    int count = -1;
    MPI_Get_count(&st, MPI_BYTE, &count);
    mt_check_long(count, 0, "MPI_Mrecv(MPI_MESSAGE_NO_PROC): count");
    mt_check(b[0] == 1 && b[3] == 4, "MPI_Mrecv(MPI_MESSAGE_NO_PROC) left the buffer alone");
    int flag = 0;
    MT_CALL(MPI_Iprobe(MPI_PROC_NULL, kTag, comm, &flag, &st));
    mt_check(flag == 1 && st.MPI_SOURCE == MPI_PROC_NULL, "MPI_Iprobe(MPI_PROC_NULL): flag %d source %d",
             flag, st.MPI_SOURCE);
}

int main(int argc, char** argv) {
    mt_init(&argc, &argv, "test_probe");
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    mt_phase("probe then receive");
    probe_then_recv(comm);
    MPI_Barrier(comm);
    mt_phase("matched probe takes the message out of the queue");
    mprobe_takes_message(comm);
    MPI_Barrier(comm);
    mt_phase("several matched probes outstanding");
    many_mprobes(comm);
    MPI_Barrier(comm);
    mt_phase("MPI_PROC_NULL");
    proc_null(comm);
    MPI_Comm_free(&comm);
    return mt_finish();
}
