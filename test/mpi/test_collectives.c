/*
 * Collectives with exact results:
 *  - MPI_Allreduce over several types and operations (SUM, PROD, MAX, MIN, BAND, BOR, BXOR,
 *    LAND, LOR, MAXLOC, MINLOC), from 1 element to 4 MiB, also MPI_IN_PLACE; the values
 *    are integers (in the floating-point types too) small enough that every result is exact;
 *  - MPI_Alltoall, blocks from 1 B to 256 KiB;
 *  - MPI_Alltoallv with irregular counts (zeros included) and gaps in the receive buffer,
 *    which must stay untouched;
 *  - MPI_Bcast from every root, 1 B to 4 MiB.
 * Every element is compared with the value computed here from every rank's inputs.
 */
#include "mpitest.h"

#include <math.h>

static const int kCounts[] = {1, 7, 1000, 65537, 1048576};
enum { kNumCounts = sizeof(kCounts) / sizeof(kCounts[0]) };

/* Each rank's input element i: small integers, varied by rank and index. */
static long value(int rank, long i, int salt) {
    return (long)((i * 7 + rank * 13 + salt * 3) % 11) - 3;
}

typedef enum { kTInt, kTLong, kTUnsigned, kTDouble, kTFloat, kTUChar } TypeId;

typedef struct {
    const char* name;
    TypeId t;
    MPI_Op op;
    const char* op_name;
    int max_count; /* largest count used with this pair */
} RedCase;

static size_t type_size(TypeId t) {
    switch (t) {
        case kTInt:
            return sizeof(int);
        case kTLong:
            return sizeof(long);
        case kTUnsigned:
            return sizeof(unsigned);
        case kTDouble:
            return sizeof(double);
        case kTFloat:
            return sizeof(float);
        default:
            return 1;
    }
}

static MPI_Datatype mpi_type(TypeId t) {
    switch (t) {
        case kTInt:
            return MPI_INT;
        case kTLong:
            return MPI_LONG;
        case kTUnsigned:
            return MPI_UNSIGNED;
        case kTDouble:
            return MPI_DOUBLE;
        case kTFloat:
            return MPI_FLOAT;
        default:
            return MPI_UNSIGNED_CHAR;
    }
}

/* The input of `rank` at element i for operation op, as a long (exact in every type used). */
static long input(const RedCase* c, int rank, long i) {
    long v = value(rank, i, (int)c->t);
    if (c->op == MPI_PROD)
        return (v % 2 == 0) ? 1 : (v < 0 ? -2 : 2); /* powers of two: exact, no overflow for n <= 16 */
    if (c->t == kTUnsigned || c->t == kTUChar) return (v + 3) * 19 + rank; /* non-negative */
    if (c->op == MPI_LAND || c->op == MPI_LOR) return (i + rank) % 3 == 0;
    return v;
}

static long combine(const RedCase* c, long a, long b) {
    if (c->op == MPI_SUM) return a + b;
    if (c->op == MPI_PROD) return a * b;
    if (c->op == MPI_MAX) return a > b ? a : b;
    if (c->op == MPI_MIN) return a < b ? a : b;
    if (c->op == MPI_BAND) return a & b;
    if (c->op == MPI_BOR) return a | b;
    if (c->op == MPI_BXOR) return a ^ b;
    if (c->op == MPI_LAND) return (a && b) ? 1 : 0;
    return (a || b) ? 1 : 0; /* MPI_LOR */
}

static void store(TypeId t, void* buf, long i, long v) {
    switch (t) {
        case kTInt:
            ((int*)buf)[i] = (int)v;
            break;
        case kTLong:
            ((long*)buf)[i] = v;
            break;
        case kTUnsigned:
            ((unsigned*)buf)[i] = (unsigned)v;
            break;
        case kTDouble:
            ((double*)buf)[i] = (double)v;
            break;
        case kTFloat:
            ((float*)buf)[i] = (float)v;
            break;
        default:
            ((unsigned char*)buf)[i] = (unsigned char)v;
            break;
    }
}

static long load(TypeId t, const void* buf, long i) {
    switch (t) {
        case kTInt:
            return ((const int*)buf)[i];
        case kTLong:
            return ((const long*)buf)[i];
        case kTUnsigned:
            return ((const unsigned*)buf)[i];
        case kTDouble:
            return (long)((const double*)buf)[i];
        case kTFloat:
            return (long)((const float*)buf)[i];
        default:
            return ((const unsigned char*)buf)[i];
    }
}

static void allreduce_case(MPI_Comm comm, const RedCase* c, int count, int in_place) {
    size_t es = type_size(c->t);
    char* in = (char*)mt_malloc(count * es);
    char* out = (char*)mt_malloc(count * es);
    for (long i = 0; i < count; ++i) store(c->t, in, i, input(c, mt_rank, i));
    if (in_place) {
        memcpy(out, in, count * es);
        MT_CALL(MPI_Allreduce(MPI_IN_PLACE, out, count, mpi_type(c->t), c->op, comm));
    } else {
        memset(out, 0x5A, count * es);
        MT_CALL(MPI_Allreduce(in, out, count, mpi_type(c->t), c->op, comm));
    }
    long bad = 0, first = -1, want_first = 0, got_first = 0;
    for (long i = 0; i < count; ++i) {
        long want = input(c, 0, i);
        for (int r = 1; r < mt_size; ++r) want = combine(c, want, input(c, r, i));
        store(c->t, in, i, want); /* the type's own wrap-around (unsigned char) */
        want = load(c->t, in, i);
        long got = load(c->t, out, i);
        int exact = 1;
        if (c->t == kTDouble) exact = ((const double*)out)[i] == (double)want;
        if (c->t == kTFloat) exact = ((const float*)out)[i] == (float)want;
        if (got != want || !exact) {
            if (bad++ == 0) first = i, want_first = want, got_first = got;
        }
    }
    mt_check(bad == 0,
             "MPI_Allreduce%s %s %s, %d elements: element %ld expected %ld got %ld (%ld of %d differ)",
             in_place ? " (MPI_IN_PLACE)" : "", c->name, c->op_name, count, first, want_first, got_first, bad,
             count);
    free(in);
    free(out);
}

/* MAXLOC and MINLOC over MPI_2INT: the value and the lowest rank holding it. */
static void allreduce_loc(MPI_Comm comm, int count) {
    int* in = (int*)mt_malloc(2 * count * sizeof(int));
    int* out = (int*)mt_malloc(2 * count * sizeof(int));
    for (int pass = 0; pass < 2; ++pass) {
        MPI_Op op = pass ? MPI_MINLOC : MPI_MAXLOC;
        for (int i = 0; i < count; ++i) {
            in[2 * i] = (int)value(mt_rank, i, 9) / 2; /* ties between ranks happen */
            in[2 * i + 1] = mt_rank;
        }
        MT_CALL(MPI_Allreduce(in, out, count, MPI_2INT, op, comm));
        long bad = 0, first = -1;
        for (int i = 0; i < count; ++i) {
            int best = (int)value(0, i, 9) / 2, where = 0;
            for (int r = 1; r < mt_size; ++r) {
                int v = (int)value(r, i, 9) / 2;
                if (pass ? v < best : v > best) best = v, where = r;
            }
            if (out[2 * i] != best || out[2 * i + 1] != where) {
                if (bad++ == 0) first = i;
            }
        }
        mt_check(bad == 0, "MPI_Allreduce MPI_2INT %s, %d elements: %ld differ, the first at %ld",
                 pass ? "MINLOC" : "MAXLOC", count, bad, first);
    }
    free(in);
    free(out);
}

static void alltoall(MPI_Comm comm) {
    static const int kBlock[] = {1, 8, 1024, 65536, 262144};
    for (int b = 0; b < 5; ++b) {
        size_t blk = (size_t)kBlock[b];
        char* s = (char*)mt_malloc(blk * mt_size);
        char* r = (char*)mt_malloc(blk * mt_size);
        for (int d = 0; d < mt_size; ++d) mt_fill(s + d * blk, blk, mt_rank, 100 * b + d);
        memset(r, 0, blk * mt_size);
        MT_CALL(MPI_Alltoall(s, (int)blk, MPI_BYTE, r, (int)blk, MPI_BYTE, comm));
        for (int src = 0; src < mt_size; ++src)
            mt_check_data(r + src * blk, blk, src, 100 * b + mt_rank,
                          "MPI_Alltoall, %zu B blocks, the block from %d", blk, src);
        free(s);
        free(r);
    }
}

/* Bytes rank s sends rank d in round k: irregular, zero for some pairs. */
static int v_count(int s, int d, int k) {
    static const int unit[] = {1, 100, 16384};
    return ((s * 7 + d * 13 + k * 5) % 4) * unit[k % 3];
}

static void alltoallv(MPI_Comm comm) {
    const int n = mt_size;
    for (int k = 0; k < 6; ++k) {
        int *sc = (int*)mt_malloc(n * sizeof(int)), *sd = (int*)mt_malloc(n * sizeof(int));
        int *rc = (int*)mt_malloc(n * sizeof(int)), *rd = (int*)mt_malloc(n * sizeof(int));
        int stot = 0, rtot = 0;
        for (int p = 0; p < n; ++p) {
            /* Gaps of 3 bytes between blocks on both sides; the receive blocks in reverse order. */
            sc[p] = v_count(mt_rank, p, k);
            sd[p] = stot;
            stot += sc[p] + 3;
        }
        for (int p = n - 1; p >= 0; --p) {
            rc[p] = v_count(p, mt_rank, k);
            rd[p] = rtot;
            rtot += rc[p] + 3;
        }
        char* s = (char*)mt_malloc(stot);
        unsigned char* r = (unsigned char*)mt_malloc(rtot);
        memset(s, 0xEE, stot);
        memset(r, 0xA5, rtot);
        for (int p = 0; p < n; ++p) mt_fill(s + sd[p], sc[p], mt_rank, 200 + 10 * k + p);
        MT_CALL(MPI_Alltoallv(s, sc, sd, MPI_BYTE, r, rc, rd, MPI_BYTE, comm));
        for (int p = 0; p < n; ++p) {
            mt_check_data(r + rd[p], rc[p], p, 200 + 10 * k + mt_rank, "MPI_Alltoallv round %d, %d B from %d",
                          k, rc[p], p);
            mt_check_untouched(r + rd[p] + rc[p], 3, 0xA5,
                               "MPI_Alltoallv round %d: the gap after the block from %d", k, p);
        }
        free(s), free(r), free(sc), free(sd), free(rc), free(rd);
    }
}

static void bcast(MPI_Comm comm) {
    static const size_t kLen[] = {1, 100, 8192, 65536, 1048576, 4194304};
    char* buf = (char*)mt_malloc(4194304);
    for (int root = 0; root < mt_size; ++root) {
        for (int i = 0; i < 6; ++i) {
            size_t len = kLen[i];
            long id = 300 + 10 * root + i;
            if (mt_rank == root)
                mt_fill(buf, len, root, id);
            else
                memset(buf, 0, len);
            MT_CALL(MPI_Bcast(buf, (int)len, MPI_BYTE, root, comm));
            mt_check_data(buf, len, root, id, "MPI_Bcast from root %d (%zu B)", root, len);
        }
        /* And 1 MiB of doubles, whose values must come through bit for bit. */
        double* d = (double*)buf;
        const int nd = 131072;
        for (int i = 0; i < nd; ++i)
            d[i] = mt_rank == root ? ldexp((double)(i % 1000) + 0.25, i % 40 - 20) : 0.0;
        MT_CALL(MPI_Bcast(d, nd, MPI_DOUBLE, root, comm));
        int bad = 0;
        for (int i = 0; i < nd; ++i) bad += d[i] != ldexp((double)(i % 1000) + 0.25, i % 40 - 20);
        mt_check(bad == 0, "MPI_Bcast of %d doubles from root %d: %d differ", nd, root, bad);
    }
    free(buf);
}

int main(int argc, char** argv) {
    mt_init(&argc, &argv, "test_collectives");
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    static const RedCase kCases[] = {
        {"int", kTInt, MPI_SUM, "SUM", 1048576},
        {"int", kTInt, MPI_PROD, "PROD", 65537},
        {"int", kTInt, MPI_MAX, "MAX", 65537},
        {"int", kTInt, MPI_MIN, "MIN", 65537},
        {"int", kTInt, MPI_BAND, "BAND", 1000},
        {"int", kTInt, MPI_BOR, "BOR", 1000},
        {"int", kTInt, MPI_LAND, "LAND", 1000},
        {"int", kTInt, MPI_LOR, "LOR", 1000},
        {"long", kTLong, MPI_SUM, "SUM", 65537},
        {"unsigned", kTUnsigned, MPI_BXOR, "BXOR", 65537},
        {"double", kTDouble, MPI_SUM, "SUM", 1048576},
        {"double", kTDouble, MPI_MAX, "MAX", 65537},
        {"double", kTDouble, MPI_PROD, "PROD", 1000},
        {"float", kTFloat, MPI_SUM, "SUM", 65537},
        {"float", kTFloat, MPI_MIN, "MIN", 1000},
        {"unsigned char", kTUChar, MPI_MAX, "MAX", 65537},
        {"unsigned char", kTUChar, MPI_BXOR, "BXOR", 1000},
    };
    mt_phase("MPI_Allreduce");
    for (size_t c = 0; c < sizeof(kCases) / sizeof(kCases[0]); ++c) {
        /* MPICH 4.0's reductions (yaksa) compare unsigned types as signed (the runner's
         * mpich_unsigned_max); with values above 127 the unsigned char MAX comes out wrong. */
        if (kCases[c].t == kTUChar && kCases[c].op == MPI_MAX && mt_known_bug("mpich_unsigned_max")) {
            mt_skip("mpich_unsigned_max", "MPI_Allreduce MAX of unsigned char");
            continue;
        }
        for (int k = 0; k < kNumCounts && kCounts[k] <= kCases[c].max_count; ++k)
            allreduce_case(comm, &kCases[c], kCounts[k], k % 2);
    }
    for (int k = 0; k < 4; ++k) allreduce_loc(comm, kCounts[k]);
    mt_phase("MPI_Alltoall");
    alltoall(comm);
    mt_phase("MPI_Alltoallv");
    alltoallv(comm);
    mt_phase("MPI_Bcast");
    bcast(comm);
    MPI_Comm_free(&comm);
    return mt_finish();
}
