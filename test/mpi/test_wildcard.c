/*
 * Wildcard receives: MPI_ANY_SOURCE and MPI_ANY_TAG, with the status fields checked
 * (MPI_SOURCE, MPI_TAG, MPI_Get_count) and every byte. Every rank takes the receiver's
 * role in turn; the others send to it.
 *
 *  - ANY_SOURCE + ANY_TAG: every message of every sender arrives once, each sender's in
 *    the order it sent them (tags differ, sizes from 0 B to 1 MiB);
 *  - ANY_SOURCE with a tag: the receiver takes the second tag first;
 *  - a source with ANY_TAG: messages with different tags arrive in send order;
 *  - an ANY_SOURCE receive posted before a receive naming the source: the first message
 *    matches the wildcard one (one matching order across wildcard and specific receives).
 */
#include "mpitest.h"

enum { kMsgs = 12, kTagBase = 100 };

static size_t wsize(int k) {
    return mt_sizes[k % 8];
} /* 0 B .. 1 MiB */

static void any_source_any_tag(MPI_Comm comm, int root) {
    const int n = mt_size;
    if (mt_rank != root) {
        MPI_Request req[kMsgs];
        char* buf[kMsgs];
        for (int k = 0; k < kMsgs; ++k) {
            buf[k] = (char*)mt_malloc(wsize(k));
            mt_fill(buf[k], wsize(k), mt_rank, k);
            MT_CALL(MPI_Isend(buf[k], (int)wsize(k), MPI_BYTE, root, kTagBase + k, comm, &req[k]));
        }
        MT_CALL(MPI_Waitall(kMsgs, req, MPI_STATUSES_IGNORE));
        for (int k = 0; k < kMsgs; ++k) free(buf[k]);
        return;
    }
    const size_t cap = 1048576 + 64;
    int* next = (int*)calloc(n, sizeof(int)); /* next expected k per source */
    /* A few non-blocking wildcard receives posted first, then blocking ones. */
    enum { kPre = 4 };
    char* pre[kPre];
    MPI_Request req[kPre];
    int total = (n - 1) * kMsgs;
    for (int i = 0; i < kPre; ++i) {
        pre[i] = (char*)mt_malloc(cap);
        MT_CALL(MPI_Irecv(pre[i], (int)cap, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &req[i]));
    }
    char* buf = (char*)mt_malloc(cap);
    for (int i = 0; i < total; ++i) {
        MPI_Status st;
        char* data;
        if (i < kPre) {
            MT_CALL(MPI_Wait(&req[i], &st));
            data = pre[i];
        } else {
            MT_CALL(MPI_Recv(buf, (int)cap, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &st));
            data = buf;
        }
        int src = st.MPI_SOURCE, k = st.MPI_TAG - kTagBase, count = -1;
        MPI_Get_count(&st, MPI_BYTE, &count);
        if (!mt_check(src >= 0 && src < n && src != root && k >= 0 && k < kMsgs,
                      "ANY_SOURCE/ANY_TAG receive %d: status names source %d tag %d", i, src, st.MPI_TAG))
            continue;
        mt_check_long(k, next[src], "ANY_SOURCE/ANY_TAG receive %d from %d: tag (send order)", i, src);
        next[src] = k + 1;
        mt_check_long(count, (long)wsize(k), "ANY_SOURCE/ANY_TAG from %d tag %d: MPI_Get_count", src,
                      st.MPI_TAG);
        mt_check_data(data, (size_t)count < wsize(k) ? (size_t)count : wsize(k), src, k,
                      "ANY_SOURCE/ANY_TAG receive %d", i);
    }
    for (int s = 0; s < n; ++s)
        if (s != root) mt_check_long(next[s], kMsgs, "ANY_SOURCE/ANY_TAG: messages received from %d", s);
    for (int i = 0; i < kPre; ++i) free(pre[i]);
    free(buf);
    free(next);
}

static void any_source_tag_order(MPI_Comm comm, int root) {
    const int n = mt_size, tag_a = 200, tag_b = 201;
    const size_t len_a = 262144, len_b = 8;
    if (mt_rank != root) {
        char* a = (char*)mt_malloc(len_a);
        char* b = (char*)mt_malloc(len_b);
        mt_fill(a, len_a, mt_rank, tag_a);
        mt_fill(b, len_b, mt_rank, tag_b);
        MPI_Request req[2];
        MT_CALL(MPI_Isend(a, (int)len_a, MPI_BYTE, root, tag_a, comm, &req[0]));
        MT_CALL(MPI_Isend(b, (int)len_b, MPI_BYTE, root, tag_b, comm, &req[1]));
        MT_CALL(MPI_Waitall(2, req, MPI_STATUSES_IGNORE));
        free(a);
        free(b);
        return;
    }
    char* buf = (char*)mt_malloc(len_a + 64);
    int* seen = (int*)calloc(2 * n, sizeof(int));
    for (int t = 0; t < 2; ++t) {
        int tag = t == 0 ? tag_b : tag_a;
        size_t len = t == 0 ? len_b : len_a;
        for (int i = 0; i < n - 1; ++i) {
            MPI_Status st;
            MT_CALL(MPI_Recv(buf, (int)(len_a + 64), MPI_BYTE, MPI_ANY_SOURCE, tag, comm, &st));
            int src = st.MPI_SOURCE, count = -1;
            MPI_Get_count(&st, MPI_BYTE, &count);
            if (!mt_check(src >= 0 && src < n && src != root, "ANY_SOURCE tag %d: status.MPI_SOURCE %d", tag,
                          src))
                continue;
            mt_check_long(st.MPI_TAG, tag, "ANY_SOURCE tag %d from %d: status.MPI_TAG", tag, src);
            mt_check_long(count, (long)len, "ANY_SOURCE tag %d from %d: MPI_Get_count", tag, src);
            mt_check_long(++seen[2 * src + t], 1, "ANY_SOURCE tag %d: messages from %d", tag, src);
            mt_check_data(buf, len, src, tag, "ANY_SOURCE, the later tag %d first", tag);
        }
    }
    free(seen);
    free(buf);
}

static void source_any_tag(MPI_Comm comm, int root) {
    static const int tags[] = {7, 3, 9, 3, 0};
    enum { kN = sizeof(tags) / sizeof(tags[0]) };
    const int n = mt_size;
    if (mt_rank != root) {
        for (int k = 0; k < kN; ++k) {
            size_t len = mt_sizes[(k * 3) % 8];
            char* b = (char*)mt_malloc(len);
            mt_fill(b, len, mt_rank, 300 + k);
            MT_CALL(MPI_Send(b, (int)len, MPI_BYTE, root, tags[k], comm));
            free(b);
        }
        return;
    }
    char* buf = (char*)mt_malloc(1048576 + 64);
    /* Senders in descending rank order: the others' messages wait unexpected meanwhile. */
    for (int s = n - 1; s >= 0; --s) {
        if (s == root) continue;
        for (int k = 0; k < kN; ++k) {
            size_t len = mt_sizes[(k * 3) % 8];
            MPI_Status st;
            MT_CALL(MPI_Recv(buf, 1048576 + 64, MPI_BYTE, s, MPI_ANY_TAG, comm, &st));
            mt_check_status(&st, s, tags[k], len, "source with ANY_TAG", 300 + k);
            mt_check_data(buf, len, s, 300 + k, "source with ANY_TAG, message %d", k);
        }
    }
    free(buf);
}

static void wildcard_then_specific(MPI_Comm comm, int root) {
    const int sender = (root + 1) % mt_size, tag = 400;
    for (int big = 0; big < 2; ++big) {
        size_t len = big ? 1048576 : 64;
        if (mt_rank == sender) {
            MPI_Barrier(comm); /* both receives are posted */
            for (int k = 0; k < 2; ++k) {
                char* b = (char*)mt_malloc(len);
                mt_fill(b, len, mt_rank, 500 + k);
                MT_CALL(MPI_Send(b, (int)len, MPI_BYTE, root, tag, comm));
                free(b);
            }
        } else if (mt_rank == root) {
            char* any = (char*)mt_malloc(len);
            char* spec = (char*)mt_malloc(len);
            MPI_Request req[2];
            MPI_Status st[2];
            MT_CALL(MPI_Irecv(any, (int)len, MPI_BYTE, MPI_ANY_SOURCE, tag, comm, &req[0]));
            MT_CALL(MPI_Irecv(spec, (int)len, MPI_BYTE, sender, tag, comm, &req[1]));
            MPI_Barrier(comm);
            MT_CALL(MPI_Waitall(2, req, st));
            mt_check_status(&st[0], sender, tag, len, "ANY_SOURCE receive posted first", 500);
            mt_check_data(any, len, sender, 500, "ANY_SOURCE receive posted first (%zu B)", len);
            mt_check_status(&st[1], sender, tag, len, "receive naming the source, posted second", 501);
            mt_check_data(spec, len, sender, 501, "receive naming the source, posted second (%zu B)", len);
            free(any);
            free(spec);
        } else {
            MPI_Barrier(comm);
        }
    }
}

int main(int argc, char** argv) {
    mt_init(&argc, &argv, "test_wildcard");
    for (int root = 0; root < mt_size; ++root) {
        mt_phase("receiver %d: ANY_SOURCE + ANY_TAG", root);
        any_source_any_tag(MPI_COMM_WORLD, root);
        MPI_Barrier(MPI_COMM_WORLD);
        mt_phase("receiver %d: ANY_SOURCE with a tag, later tag first", root);
        any_source_tag_order(MPI_COMM_WORLD, root);
        MPI_Barrier(MPI_COMM_WORLD);
        mt_phase("receiver %d: a source with ANY_TAG", root);
        source_any_tag(MPI_COMM_WORLD, root);
        MPI_Barrier(MPI_COMM_WORLD);
        mt_phase("receiver %d: ANY_SOURCE posted before a specific receive", root);
        wildcard_then_specific(MPI_COMM_WORLD, root);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    return mt_finish();
}
