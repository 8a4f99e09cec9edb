/*
 * Derived datatypes, small (a few bytes) and large (about 3 MiB of data, past every
 * rendezvous threshold): vector, indexed, struct with gaps (and displacements out of
 * order), resized, contiguous of vector. Each case sends with one datatype and receives
 * with another of the same type signature; the receiver checks every byte the receive
 * type covers and that every byte it does not cover (the gaps) is untouched.
 *
 * The test computes each type's layout itself (Td below mirrors the MPI constructors),
 * so the check does not trust the MPI datatype engine it exercises. The bytes of a
 * message are numbered in type-map order: data byte k is pattern(sender, msg, k).
 *
 * Ranks form a ring: each sends to its right neighbour and receives from its left one.
 */
#include "mpitest.h"

#include <stddef.h>

enum { kTag = 9 };
static const unsigned char kGapByte = 0xA5, kSendGapByte = 0xEE;

/* One contiguous run of one basic type at a byte offset. */
typedef struct {
    size_t off, len;
    int basic; /* index into kBasic */
} Seg;

/* A datatype and its type map, as runs (lb is always 0 here). */
typedef struct {
    MPI_Datatype type;
    Seg* seg;
    size_t nseg, cap;
    size_t extent;
} Td;

typedef struct {
    MPI_Datatype type;
    size_t size;
} Basic;
static Basic kBasic[5];
enum { kChar, kShort, kInt, kFloat, kDouble };

static void td_append(Td* t, size_t off, size_t len, int basic) {
    if (t->nseg && t->seg[t->nseg - 1].basic == basic &&
        t->seg[t->nseg - 1].off + t->seg[t->nseg - 1].len == off) {
        t->seg[t->nseg - 1].len += len;
        return;
    }
    if (t->nseg == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 16;
        t->seg = (Seg*)realloc(t->seg, t->cap * sizeof(Seg));
        if (!t->seg) MPI_Abort(MPI_COMM_WORLD, 1);
    }
    Seg s = {off, len, basic};
    t->seg[t->nseg++] = s;
}

/* Appends `n` copies of base's map, one extent apart, starting at `off`. */
static void td_append_copies(Td* t, const Td* base, size_t off, size_t n) {
    for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < base->nseg; ++j)
            td_append(t, off + i * base->extent + base->seg[j].off, base->seg[j].len, base->seg[j].basic);
}

static Td td_basic(int b) {
    Td t = {kBasic[b].type, NULL, 0, 0, kBasic[b].size};
    td_append(&t, 0, kBasic[b].size, b);
    return t;
}

static Td td_commit(Td t) {
    MT_CALL(MPI_Type_commit(&t.type));
    MPI_Aint lb, extent;
    MPI_Type_get_extent(t.type, &lb, &extent);
    if (lb != 0 || (size_t)extent != t.extent) {
        printf(
            "test_datatype: FAIL rank %d: test bug: MPI says lb %ld extent %ld, the test computed 0 and "
            "%zu\n",
            mt_rank, (long)lb, (long)extent, t.extent);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return t;
}

static Td td_contiguous(int n, const Td* base) {
    Td t = {MPI_DATATYPE_NULL, NULL, 0, 0, (size_t)n * base->extent};
    MT_CALL(MPI_Type_contiguous(n, base->type, &t.type));
    td_append_copies(&t, base, 0, (size_t)n);
    return td_commit(t);
}

static Td td_vector(int count, int blocklen, int stride, const Td* base) {
    Td t = {MPI_DATATYPE_NULL, NULL, 0, 0, ((size_t)(count - 1) * stride + blocklen) * base->extent};
    MT_CALL(MPI_Type_vector(count, blocklen, stride, base->type, &t.type));
    for (int i = 0; i < count; ++i)
        td_append_copies(&t, base, (size_t)i * stride * base->extent, (size_t)blocklen);
    return td_commit(t);
}

static Td td_indexed(int n, const int* blens, const int* displs, const Td* base) {
    Td t = {MPI_DATATYPE_NULL, NULL, 0, 0, 0};
    MT_CALL(MPI_Type_indexed(n, blens, displs, base->type, &t.type));
    for (int i = 0; i < n; ++i) {
        td_append_copies(&t, base, (size_t)displs[i] * base->extent, (size_t)blens[i]);
        size_t end = ((size_t)displs[i] + blens[i]) * base->extent;
        if (end > t.extent) t.extent = end;
    }
    return td_commit(t);
}

/* A struct resized to `extent` (a struct's own extent may be padded as the implementation likes). */
static Td td_struct(int n, const int* blens, const size_t* displs, const Td* bases, size_t extent) {
    Td t = {MPI_DATATYPE_NULL, NULL, 0, 0, extent};
    MPI_Aint d[8];
    MPI_Datatype types[8], raw;
    for (int i = 0; i < n; ++i) {
        d[i] = (MPI_Aint)displs[i];
        types[i] = bases[i].type;
        td_append_copies(&t, &bases[i], displs[i], (size_t)blens[i]);
    }
    MT_CALL(MPI_Type_create_struct(n, blens, d, types, &raw));
    MT_CALL(MPI_Type_create_resized(raw, 0, (MPI_Aint)extent, &t.type));
    MPI_Type_free(&raw);
    return td_commit(t);
}

static Td td_resized(const Td* base, size_t extent) {
    Td t = {MPI_DATATYPE_NULL, NULL, 0, 0, extent};
    MT_CALL(MPI_Type_create_resized(base->type, 0, (MPI_Aint)extent, &t.type));
    td_append_copies(&t, base, 0, 1);
    return td_commit(t);
}

static void td_free(Td* t) {
    if (t->type != MPI_DATATYPE_NULL) MPI_Type_free(&t->type);
    free(t->seg);
    t->seg = NULL;
}

/* A message: `count` copies of a type; its map is built once for the checks. */
typedef struct {
    Td map;      /* runs of the whole message */
    size_t span; /* buffer bytes */
    size_t size; /* data bytes */
} Msg;

static Msg msg_layout(const Td* t, int count) {
    Msg m = {{MPI_DATATYPE_NULL, NULL, 0, 0, 0}, (size_t)count * t->extent, 0};
    td_append_copies(&m.map, t, 0, (size_t)count);
    for (size_t i = 0; i < m.map.nseg; ++i) m.size += m.map.seg[i].len;
    return m;
}

/* Whether two messages have the same type signature: the same basic types, in order, by bytes. */
static int same_signature(const Msg* a, const Msg* b) {
    size_t i = 0, j = 0, ia = 0, jb = 0; /* seg index and bytes used in it */
    while (i < a->map.nseg && j < b->map.nseg) {
        if (a->map.seg[i].basic != b->map.seg[j].basic) return 0;
        size_t n =
            a->map.seg[i].len - ia < b->map.seg[j].len - jb ? a->map.seg[i].len - ia : b->map.seg[j].len - jb;
        ia += n;
        jb += n;
        if (ia == a->map.seg[i].len) ++i, ia = 0;
        if (jb == b->map.seg[j].len) ++j, jb = 0;
    }
    return i == a->map.nseg && j == b->map.nseg;
}

typedef struct {
    const char* name;
    Td send, recv;
    int send_count, recv_count;
} Case;

static void run_case(MPI_Comm comm, const Case* c, long id) {
    const int right = (mt_rank + 1) % mt_size, left = (mt_rank + mt_size - 1) % mt_size;
    Msg sm = msg_layout(&c->send, c->send_count), rm = msg_layout(&c->recv, c->recv_count);
    if (!same_signature(&sm, &rm)) {
        printf("test_datatype: FAIL rank %d: test bug: %s: the send and receive type signatures differ\n",
               mt_rank, c->name);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    unsigned char* sbuf = (unsigned char*)mt_malloc(sm.span);
    unsigned char* rbuf = (unsigned char*)mt_malloc(rm.span);
    memset(sbuf, kSendGapByte, sm.span);
    memset(rbuf, kGapByte, rm.span);
    size_t k = 0;
    for (size_t i = 0; i < sm.map.nseg; ++i) {
        for (size_t b = 0; b < sm.map.seg[i].len; ++b)
            sbuf[sm.map.seg[i].off + b] = mt_pattern(mt_rank, id, k + b);
        k += sm.map.seg[i].len;
    }
    MPI_Request req[2];
    MPI_Status st[2];
    MT_CALL(MPI_Irecv(rbuf, c->recv_count, c->recv.type, left, kTag, comm, &req[0]));
    MT_CALL(MPI_Isend(sbuf, c->send_count, c->send.type, right, kTag, comm, &req[1]));
    MT_CALL(MPI_Waitall(2, req, st));

    mt_check_long(st[0].MPI_SOURCE, left, "%s: status.MPI_SOURCE", c->name);
    int count = -1, elements = -1;
    MPI_Get_count(&st[0], c->recv.type, &count);
    mt_check_long(count, c->recv_count, "%s (%zu data bytes): MPI_Get_count with the receive type", c->name,
                  rm.size);
    MPI_Get_count(&st[0], MPI_BYTE, &elements);
    mt_check_long(elements, (long)rm.size, "%s: MPI_Get_count in bytes", c->name);

    /* The data, run by run; one failure line per case at most. */
    k = 0;
    int ok = 1;
    for (size_t i = 0; i < rm.map.nseg && ok; ++i) {
        const Seg* s = &rm.map.seg[i];
        for (size_t b = 0; b < s->len; ++b) {
            if (rbuf[s->off + b] != mt_pattern(left, id, k + b)) {
                mt_fail(
                    "%s (%zu data bytes, msg %ld from %d): data byte %zu (buffer offset %zu) expected 0x%02x "
                    "got 0x%02x",
                    c->name, rm.size, id, left, k + b, s->off + b, mt_pattern(left, id, k + b),
                    rbuf[s->off + b]);
                ok = 0;
                break;
            }
        }
        k += s->len;
    }
    if (ok) mt_check(1, "data");
    /* The gaps: every byte no run covers (runs need not be in address order). */
    unsigned char* covered = (unsigned char*)calloc(rm.span ? rm.span : 1, 1);
    for (size_t i = 0; i < rm.map.nseg; ++i) memset(covered + rm.map.seg[i].off, 1, rm.map.seg[i].len);
    size_t changed = 0, first = 0;
    for (size_t b = 0; b < rm.span; ++b) {
        if (!covered[b] && rbuf[b] != kGapByte && changed++ == 0) first = b;
    }
    free(covered);
    mt_check(changed == 0,
             "%s: %zu gap bytes of the receive buffer changed, the first at offset %zu (0x%02x)", c->name,
             changed, first, changed ? rbuf[first] : 0);
    free(sbuf);
    free(rbuf);
    td_free(&sm.map);
    td_free(&rm.map);
}

/* The cases at one scale: `n` grows the data to a few bytes (n = 1) or a few MiB. */
static int make_cases(Case* cs, int n, int large) {
    Td d = td_basic(kDouble), in = td_basic(kInt), f = td_basic(kFloat), ch = td_basic(kChar),
       sh = td_basic(kShort);
    int nc = 0;
    const char* scale = large ? "large" : "small";
    char* name;

    /* vector of double (3 of every 5) -> contiguous doubles, and back. */
    int vcount = large ? 131072 * n : n; /* 3 MiB of data when large */
    name = (char*)mt_malloc(80);
    snprintf(name, 80, "%s vector(%d,3,5) of double -> contiguous", scale, vcount);
    cs[nc++] = (Case){name, td_vector(vcount, 3, 5, &d), td_contiguous(3 * vcount, &d), 1, 1};
    name = (char*)mt_malloc(80);
    snprintf(name, 80, "%s contiguous double -> vector(%d,3,5)", scale, vcount);
    cs[nc++] = (Case){name, td_contiguous(3 * vcount, &d), td_vector(vcount, 3, 5, &d), 1, 1};

    /* contiguous ints -> indexed with blocks of 1..5 ints and gaps of 0..2 ints. */
    int nblk = large ? 262144 * n : 2 * n + 1, total = 0;
    int* blens = (int*)mt_malloc(nblk * sizeof(int));
    int* displs = (int*)mt_malloc(nblk * sizeof(int));
    for (int i = 0, at = 0; i < nblk; ++i) {
        blens[i] = 1 + i % 5;
        displs[i] = at;
        at += blens[i] + i % 3;
        total += blens[i];
    }
    name = (char*)mt_malloc(80);
    snprintf(name, 80, "%s contiguous int -> indexed (%d blocks)", scale, nblk);
    Td idx = td_indexed(nblk, blens, displs, &in);
    cs[nc++] = (Case){name, td_contiguous(total, &in), idx, 1, 1};
    free(blens);
    free(displs);

    /* struct {char; int; double; short} with gaps -> the same fields at other places, out of order. */
    struct S {
        char c;
        int i;
        double d;
        short s;
    };
    int sblens[4] = {1, 1, 1, 1};
    size_t sdispl[4] = {offsetof(struct S, c), offsetof(struct S, i), offsetof(struct S, d),
                        offsetof(struct S, s)};
    size_t rdispl[4] = {20, 0, 8, 4};
    Td sbases[4] = {ch, in, d, sh};
    int scount = large ? 98304 * n : n; /* 15 data bytes each */
    name = (char*)mt_malloc(80);
    snprintf(name, 80, "%s struct with gaps x%d -> struct out of order", scale, scount);
    cs[nc++] = (Case){name, td_struct(4, sblens, sdispl, sbases, sizeof(struct S)),
                      td_struct(4, sblens, rdispl, sbases, 32), scount, scount};

    /* resized: ints at 0 and 12 in 24 bytes -> pairs of ints every 12 bytes. */
    Td v2 = td_vector(2, 1, 3, &in);
    Td pair = td_contiguous(2, &in);
    int rcount = large ? 393216 * n : n;
    name = (char*)mt_malloc(80);
    snprintf(name, 80, "%s resized vector x%d -> resized contiguous", scale, rcount);
    cs[nc++] = (Case){name, td_resized(&v2, 24), td_resized(&pair, 12), rcount, rcount};
    td_free(&v2);
    td_free(&pair);

    /* contiguous of vector of float -> a vector with another stride. */
    Td fv = td_vector(4, 2, 3, &f);
    int ccount = large ? 98304 * n : n;
    name = (char*)mt_malloc(80);
    snprintf(name, 80, "%s contiguous(%d) of vector(4,2,3) of float -> vector(%d,2,4)", scale, ccount,
             4 * ccount);
    cs[nc++] = (Case){name, td_contiguous(ccount, &fv), td_vector(4 * ccount, 2, 4, &f), 1, 1};
    td_free(&fv);
    /* The basic descriptors own no MPI type. */
    free(d.seg), free(in.seg), free(f.seg), free(ch.seg), free(sh.seg);
    return nc;
}

int main(int argc, char** argv) {
    mt_init(&argc, &argv, "test_datatype");
    Basic b[5] = {{MPI_CHAR, 1},
                  {MPI_SHORT, sizeof(short)},
                  {MPI_INT, sizeof(int)},
                  {MPI_FLOAT, sizeof(float)},
                  {MPI_DOUBLE, sizeof(double)}};
    memcpy(kBasic, b, sizeof(b));
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    long id = 0;
    for (int large = 0; large < 2; ++large) {
        for (int n = 1; n <= (large ? 1 : 3); ++n) {
            Case cs[8];
            int nc = make_cases(cs, n, large);
            for (int i = 0; i < nc; ++i) {
                mt_phase("%s", cs[i].name);
                run_case(comm, &cs[i], id++);
                td_free(&cs[i].send);
                td_free(&cs[i].recv);
                free((char*)cs[i].name);
            }
        }
    }
    MPI_Comm_free(&comm);
    return mt_finish();
}
