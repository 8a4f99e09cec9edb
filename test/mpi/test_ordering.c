/*
 * MPI non-overtaking under mixed sizes and protocols: every rank sends every other rank a
 * stream of messages on one (source, tag, communicator) whose sizes alternate between
 * 0 B and 4 MiB (crossing every eager/rendezvous threshold), and the receiver checks that
 * message k of the stream lands in its k-th receive: count and every byte.
 *
 * Phases: receives posted before the sends (expected path); sends posted before the
 * receives (unexpected path: eager data and rendezvous requests wait at the receiver);
 * one pair at a time with blocking Send/Ssend/Recv mixed with Isend/Irecv; and two streams
 * with the same tag on two communicators, received one communicator after the other.
 */
#include "mpitest.h"

/* Sizes in stream order: small and large alternate, so eager messages follow rendezvous ones. */
static const int kOrder[] = {0, 8, 1, 7, 2, 6, 3, 5, 4};
enum { kCycles = 2, kStream = kCycles * 9, kSlack = 64 };

static size_t stream_size(int k) {
    return mt_sizes[kOrder[k % 9]];
}

/* Message id of message k of phase p, the second input of the pattern. */
static long msg_id(int phase, int k) {
    return phase * 1000L + k;
}

static char* send_buf(size_t len, long msg) {
    char* b = (char*)mt_malloc(len);
    mt_fill(b, len, mt_rank, msg);
    return b;
}

static void check_recv(int phase, const char* what, int src, int tag, int k, const char* buf,
                       const MPI_Status* st) {
    mt_check_status(st, src, tag, stream_size(k), what, msg_id(phase, k));
    int count = 0;
    MPI_Get_count(st, MPI_BYTE, &count);
    size_t n = (size_t)count < stream_size(k) ? (size_t)count : stream_size(k);
    mt_check_data(buf, n, src, msg_id(phase, k), "%s: stream position %d (%zu B)", what, k, stream_size(k));
}

/* All-pairs streams with Isend/Irecv; the receives are posted before or after the sends. */
static void all_pairs(MPI_Comm comm, int phase, int prepost) {
    const int tag = 10 + phase, n = mt_size;
    const char* what = prepost ? "preposted Irecv" : "Irecv after the sends";
    int nreq = 2 * (n - 1) * kStream, r = 0;
    MPI_Request* req = (MPI_Request*)mt_malloc(nreq * sizeof(MPI_Request));
    MPI_Status* st = (MPI_Status*)mt_malloc(nreq * sizeof(MPI_Status));
    char** buf = (char**)mt_malloc(nreq * sizeof(char*));

    mt_phase("%s", what);
    for (int pass = 0; pass < 2; ++pass) {
        int post_recvs = (pass == 0) == (prepost != 0);
        if (pass == 1) MPI_Barrier(comm); /* the first half is posted everywhere before the second */
        for (int peer = 0; peer < n; ++peer) {
            if (peer == mt_rank) continue;
            for (int k = 0; k < kStream; ++k) {
                if (post_recvs) {
                    buf[r] = (char*)mt_malloc(stream_size(k) + kSlack);
                    MT_CALL(MPI_Irecv(buf[r], (int)(stream_size(k) + kSlack), MPI_BYTE, peer, tag, comm,
                                      &req[r]));
                } else {
                    buf[r] = send_buf(stream_size(k), msg_id(phase, k));
                    MT_CALL(MPI_Isend(buf[r], (int)stream_size(k), MPI_BYTE, peer, tag, comm, &req[r]));
                }
                ++r;
            }
        }
    }
    int rc = MPI_Waitall(nreq, req, st);
    mt_check_rc(rc, "%s: MPI_Waitall", what);
    /* Receives are the first or second half of the requests, peer by peer. */
    int first = prepost ? 0 : nreq / 2;
    r = first;
    for (int peer = 0; peer < n; ++peer) {
        if (peer == mt_rank) continue;
        for (int k = 0; k < kStream; ++k, ++r) check_recv(phase, what, peer, tag, k, buf[r], &st[r]);
    }
    for (int i = 0; i < nreq; ++i) free(buf[i]);
    free(buf);
    free(st);
    free(req);
}

/* One pair at a time: the sender mixes Send, Isend and Ssend; the receiver Recv and Irecv. */
static void pair_blocking(MPI_Comm comm, int phase) {
    const int tag = 10 + phase;
    mt_phase("blocking and non-blocking mixed, one pair at a time");
    for (int s = 0; s < mt_size; ++s) {
        for (int d = 0; d < mt_size; ++d) {
            if (s == d || (mt_rank != s && mt_rank != d)) continue;
            MPI_Request req[kStream];
            MPI_Status st[kStream];
            char* buf[kStream];
            int nreq = 0;
            if (mt_rank == s) {
                for (int k = 0; k < kStream; ++k) {
                    buf[k] = send_buf(stream_size(k), msg_id(phase, k));
                    int len = (int)stream_size(k);
                    if (k % 3 == 0)
                        MT_CALL(MPI_Send(buf[k], len, MPI_BYTE, d, tag, comm));
                    else if (k % 3 == 1)
                        MT_CALL(MPI_Isend(buf[k], len, MPI_BYTE, d, tag, comm, &req[nreq++]));
                    else
                        MT_CALL(MPI_Ssend(buf[k], len, MPI_BYTE, d, tag, comm));
                }
                mt_check_rc(MPI_Waitall(nreq, req, st), "blocking stream: sender's MPI_Waitall");
            } else {
                int idx[kStream];
                for (int k = 0; k < kStream; ++k) {
                    buf[k] = (char*)mt_malloc(stream_size(k) + kSlack);
                    int cap = (int)(stream_size(k) + kSlack);
                    if (k % 2 == 0) {
                        MPI_Status one;
                        mt_check_rc(MPI_Recv(buf[k], cap, MPI_BYTE, s, tag, comm, &one),
                                    "blocking stream: MPI_Recv");
                        check_recv(phase, "blocking MPI_Recv", s, tag, k, buf[k], &one);
                    } else {
                        idx[nreq] = k;
                        MT_CALL(MPI_Irecv(buf[k], cap, MPI_BYTE, s, tag, comm, &req[nreq++]));
                    }
                }
                mt_check_rc(MPI_Waitall(nreq, req, st), "blocking stream: receiver's MPI_Waitall");
                for (int i = 0; i < nreq; ++i)
                    check_recv(phase, "Irecv between blocking Recvs", s, tag, idx[i], buf[idx[i]], &st[i]);
            }
            for (int k = 0; k < kStream; ++k) free(buf[k]);
        }
    }
}

/* The same tag on two communicators: the receiver drains the second one first. */
static void two_comms(MPI_Comm comm, int phase) {
    const int tag = 10 + phase, n = mt_size;
    const int right = (mt_rank + 1) % n, left = (mt_rank + n - 1) % n;
    MPI_Comm other;
    MPI_Comm_dup(comm, &other);
    mt_phase("one tag on two communicators");
    MPI_Request sreq[2 * 9];
    char* sbuf[2 * 9];
    for (int k = 0; k < 2 * 9; ++k) {
        /* Interleaved: even k on comm, odd k on other. */
        sbuf[k] = send_buf(stream_size(k / 2), msg_id(phase, k / 2 + (k % 2) * 100));
        MT_CALL(MPI_Isend(sbuf[k], (int)stream_size(k / 2), MPI_BYTE, right, tag, k % 2 ? other : comm,
                          &sreq[k]));
    }
    for (int c = 1; c >= 0; --c) {
        for (int k = 0; k < 9; ++k) {
            size_t len = stream_size(k);
            char* rbuf = (char*)mt_malloc(len + kSlack);
            MPI_Status st;
            mt_check_rc(MPI_Recv(rbuf, (int)(len + kSlack), MPI_BYTE, left, tag, c ? other : comm, &st),
                        "two communicators: MPI_Recv");
            mt_check_status(&st, left, tag, len, c ? "second communicator" : "first communicator",
                            msg_id(phase, k + c * 100));
            mt_check_data(rbuf, len, left, msg_id(phase, k + c * 100), "%s, stream position %d",
                          c ? "second communicator" : "first communicator", k);
            free(rbuf);
        }
    }
    mt_check_rc(MPI_Waitall(2 * 9, sreq, MPI_STATUSES_IGNORE), "two communicators: sender's MPI_Waitall");
    for (int k = 0; k < 2 * 9; ++k) free(sbuf[k]);
    MPI_Comm_free(&other);
}

int main(int argc, char** argv) {
    mt_init(&argc, &argv, "test_ordering");
    MPI_Comm comm = mt_comm_errors_return();
    all_pairs(comm, 1, 1);
    MPI_Barrier(comm);
    all_pairs(comm, 2, 0);
    MPI_Barrier(comm);
    pair_blocking(comm, 3);
    MPI_Barrier(comm);
    two_comms(comm, 4);
    MPI_Comm_free(&comm);
    return mt_finish();
}
