/*
 * The MPI program of the two-host test (test/mpi/run_two_hosts.sh): where the ranks ran,
 * whether every byte arrived, how much of it had to cross between hosts, and which shared
 * memory the ranks of a host really share.
 *
 *   xhost [MAX_BYTES]      (largest ping-pong message, default 4 MiB)
 *
 * Phases, every byte checked (pattern of sender, message number and offset):
 *   1. ping-pong between every pair of ranks, sizes 0 B .. MAX_BYTES, both directions;
 *   2. MPI_Alltoall of 64 KiB per pair, then MPI_Alltoallv with sizes that differ per pair.
 *
 * Then every rank scans /proc/self/maps for its shared-memory objects (a shared mapping of
 * a file in /dev/shm, a memfd or a SysV segment, known by device and inode) and rank 0
 * works out which objects ranks of one host share and which are shared across hosts. An
 * object mapped by two processes is memory they really share, whatever the transport
 * named it; one mapped by ranks of both hosts means the two "hosts" are not isolated.
 *
 * Output (lines start with "xhost:"; the test greps them):
 *   xhost: rank R of N host H pid P
 *   xhost: rank R ucp PATH                           (the libucp.so this rank loaded, or none)
 *   xhost: rank R shm DEV:INO NAME                 (each shared object, with XHOST_VERBOSE=1)
 *   xhost: host H ranks 2 shm_shared K              (objects mapped by >= 2 ranks of H;
 *                                                   with XHOST_SHM_MATCH=TEXT, only those
 *                                                   whose name contains TEXT)
 *   xhost: shm_cross_host K                          (objects mapped on both hosts; 0 expected)
 *   xhost: shm_foreign K                             (/dev/shm files of another host's tmpfs)
 *   xhost: cross_host_payload_bytes B                (payload sent between hosts, all ranks)
 *   xhost: PASS | xhost: FAIL E errors
 * A rank that finds a wrong byte prints "xhost: rank R FAIL ..." (the first few per rank).
 * The exit status is 0 when every check passed on every rank, else 1.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

enum { kHostLen = 64, kMaxObjs = 128, kMaxPrinted = 5 };

static int rank, nranks, verbose;
static long errors;
static long long cross_bytes;  /* payload this rank sent to ranks of other hosts */
static char (*hosts)[kHostLen]; /* host name of every rank */

static unsigned char pattern(int sender, long msg, size_t off) {
    uint32_t x = (uint32_t)off * 0x9E3779B1u + (uint32_t)sender * 0x85EBCA6Bu + (uint32_t)msg * 0xC2B2AE35u;
    x ^= x >> 15;
    x *= 0x2C1B3C6Du;
    x ^= x >> 12;
    return (unsigned char)(x ^ (x >> 24));
}

static void fill(unsigned char* buf, size_t len, int sender, long msg) {
    for (size_t i = 0; i < len; ++i) buf[i] = pattern(sender, msg, i);
}

static void check(const unsigned char* buf, size_t len, int sender, long msg, const char* what) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < len; ++i) {
        if (buf[i] != pattern(sender, msg, i)) {
            if (bad++ == 0) first = i;
        }
    }
    if (bad == 0) return;
    if (++errors <= kMaxPrinted) {
        printf("xhost: rank %d FAIL %s from rank %d (msg %ld, %zu B): %zu bytes differ, first at %zu\n", rank, what,
               sender, msg, len, bad, first);
        fflush(stdout);
    }
}

static void count_sent(int peer, size_t len) {
    if (strcmp(hosts[peer], hosts[rank]) != 0) cross_bytes += (long long)len;
}

static void* xmalloc(size_t len) {
    void* p = malloc(len ? len : 1);
    if (!p) {
        fprintf(stderr, "xhost: rank %d: out of memory (%zu B)\n", rank, len);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

/* Phase 1: pairs in one global order (0,1) (0,2) .. (1,2) ..: no cycle, no deadlock. */
static void ping_pong(size_t max_bytes) {
    static const size_t sizes[] = {0, 1, 8, 1024, 8192, 65536, 262144, 1048576, 4194304, 16777216};
    unsigned char* sbuf = xmalloc(max_bytes);
    unsigned char* rbuf = xmalloc(max_bytes);
    for (int a = 0; a < nranks; ++a) {
        for (int b = a + 1; b < nranks; ++b) {
            if (rank != a && rank != b) continue;
            const int peer = rank == a ? b : a;
            for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]) && sizes[s] <= max_bytes; ++s) {
                const size_t len = sizes[s];
                for (int it = 0; it < 2; ++it) {
                    const long msg = (long)s * 16 + it;
                    MPI_Status st;
                    int count = -1;
                    if (rank == a) {
                        fill(sbuf, len, rank, msg);
                        MPI_Send(sbuf, (int)len, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                        count_sent(peer, len);
                        memset(rbuf, 0, len);
                        MPI_Recv(rbuf, (int)len, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &st);
                    } else {
                        memset(rbuf, 0, len);
                        MPI_Recv(rbuf, (int)len, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &st);
                        fill(sbuf, len, rank, msg);
                        MPI_Send(sbuf, (int)len, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
                        count_sent(peer, len);
                    }
                    MPI_Get_count(&st, MPI_BYTE, &count);
                    if (count != (int)len && ++errors <= kMaxPrinted) {
                        printf("xhost: rank %d FAIL ping-pong from rank %d: got %d B, expected %zu\n", rank, peer,
                               count, len);
                    }
                    check(rbuf, len, peer, msg, "ping-pong");
                }
            }
        }
    }
    free(sbuf);
    free(rbuf);
}

/* Phase 2: all-to-all, equal blocks then blocks whose size depends on the pair. */
static void all_to_all(void) {
    const size_t block = 65536;
    unsigned char* sbuf = xmalloc(block * nranks);
    unsigned char* rbuf = xmalloc(block * nranks);
    for (int p = 0; p < nranks; ++p) {
        fill(sbuf + p * block, block, rank, 1000 + p);
        if (p != rank) count_sent(p, block);
    }
    memset(rbuf, 0, block * nranks);
    MPI_Alltoall(sbuf, (int)block, MPI_BYTE, rbuf, (int)block, MPI_BYTE, MPI_COMM_WORLD);
    for (int p = 0; p < nranks; ++p) check(rbuf + p * block, block, p, 1000 + rank, "alltoall");
    free(sbuf);
    free(rbuf);

    /* rank r sends (r + 1) * (p + 1) * 7919 bytes to p: every pair a different size. */
    int *scounts = xmalloc(sizeof(int) * nranks), *rcounts = xmalloc(sizeof(int) * nranks);
    int *sdispls = xmalloc(sizeof(int) * nranks), *rdispls = xmalloc(sizeof(int) * nranks);
    int stotal = 0, rtotal = 0;
    for (int p = 0; p < nranks; ++p) {
        scounts[p] = (rank + 1) * (p + 1) * 7919;
        rcounts[p] = (p + 1) * (rank + 1) * 7919;
        sdispls[p] = stotal;
        rdispls[p] = rtotal;
        stotal += scounts[p];
        rtotal += rcounts[p];
    }
    sbuf = xmalloc((size_t)stotal);
    rbuf = xmalloc((size_t)rtotal);
    for (int p = 0; p < nranks; ++p) {
        fill(sbuf + sdispls[p], (size_t)scounts[p], rank, 2000 + p);
        if (p != rank) count_sent(p, (size_t)scounts[p]);
    }
    memset(rbuf, 0, (size_t)rtotal);
    MPI_Alltoallv(sbuf, scounts, sdispls, MPI_BYTE, rbuf, rcounts, rdispls, MPI_BYTE, MPI_COMM_WORLD);
    for (int p = 0; p < nranks; ++p) check(rbuf + rdispls[p], (size_t)rcounts[p], p, 2000 + rank, "alltoallv");
    free(sbuf);
    free(rbuf);
    free(scounts);
    free(rcounts);
    free(sdispls);
    free(rdispls);
}

typedef struct {
    uint64_t dev, ino;
    int32_t foreign; /* a /dev/shm file on another file system than our /dev/shm */
    int32_t match;   /* its name contains XHOST_SHM_MATCH (or that is not set) */
} shm_obj;

/* Our shared-memory objects: shared mappings of /dev/shm files, memfds and SysV segments.
 * A SysV segment's "inode" in /proc/self/maps is its shmid, numbered per IPC namespace:
 * its identity is (IPC namespace, shmid), the namespace standing in for the device. */
static int scan_shm(shm_obj* objs) {
    const char* match = getenv("XHOST_SHM_MATCH");
    struct stat shm_st, ipc_st;
    const int have_shm = stat("/dev/shm", &shm_st) == 0;
    const uint64_t ipc_ns = stat("/proc/self/ns/ipc", &ipc_st) == 0 ? (uint64_t)ipc_st.st_ino : 0;
    FILE* f = fopen("/proc/self/maps", "r");
    if (!f) return 0;
    int n = 0;
    char line[4096];
    while (fgets(line, sizeof(line), f)) {
        char perms[8], path[4096] = "";
        unsigned long long inode;
        unsigned maj, min;
        if (sscanf(line, "%*x-%*x %7s %*x %x:%x %llu %4095[^\n]", perms, &maj, &min, &inode, path) < 4) continue;
        if (perms[3] != 's' || inode == 0) continue;
        const char* name = path + strspn(path, " ");
        const int in_dev_shm = strncmp(name, "/dev/shm/", 9) == 0;
        if (!in_dev_shm && strncmp(name, "/memfd:", 7) != 0 && strncmp(name, "/SYSV", 5) != 0) continue;
        const uint64_t dev = strncmp(name, "/SYSV", 5) == 0 ? (ipc_ns | 1ull << 63) : makedev(maj, min);
        int seen = 0;
        for (int i = 0; i < n && !seen; ++i) seen = objs[i].dev == dev && objs[i].ino == inode;
        if (seen || n == kMaxObjs) continue;
        objs[n].dev = dev;
        objs[n].ino = inode;
        objs[n].foreign = in_dev_shm && have_shm && dev != shm_st.st_dev;
        objs[n].match = !match || !*match || strstr(name, match) != NULL;
        if (verbose || objs[n].foreign) {
            printf("xhost: rank %d shm %u:%u:%llu %s%s\n", rank, maj, min, inode, name,
                   objs[n].foreign ? " (FOREIGN: not this host's /dev/shm)" : "");
        }
        ++n;
    }
    fclose(f);
    return n;
}

static int same_obj(const shm_obj* a, const shm_obj* b) { return a->dev == b->dev && a->ino == b->ino; }

/* Rank 0: per host, the objects two of its ranks map; and the objects mapped on two hosts. */
static void report_shm(void) {
    shm_obj mine[kMaxObjs];
    memset(mine, 0, sizeof(mine));
    scan_shm(mine);
    shm_obj* all = rank == 0 ? xmalloc(sizeof(mine) * nranks) : NULL;
    MPI_Gather(mine, (int)sizeof(mine), MPI_BYTE, all, (int)sizeof(mine), MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rank != 0) return;
    long cross = 0, foreign = 0;
    long* shared = xmalloc(sizeof(long) * nranks); /* by the host's lowest rank */
    memset(shared, 0, sizeof(long) * nranks);
    /* Each object once: at the lowest rank that maps it. */
    for (int r = 0; r < nranks; ++r) {
        for (int i = 0; i < kMaxObjs && all[r * kMaxObjs + i].ino; ++i) {
            const shm_obj* o = &all[r * kMaxObjs + i];
            foreign += o->foreign;
            int earlier = 0, mappers_here = 1, mappers_elsewhere = 0;
            for (int q = 0; q < nranks && !earlier; ++q) {
                if (q == r) continue;
                for (int j = 0; j < kMaxObjs && all[q * kMaxObjs + j].ino; ++j) {
                    if (!same_obj(&all[q * kMaxObjs + j], o)) continue;
                    if (q < r) earlier = 1;
                    if (strcmp(hosts[q], hosts[r]) == 0) {
                        ++mappers_here;
                    } else {
                        ++mappers_elsewhere;
                    }
                    break;
                }
            }
            if (earlier) continue;
            if (mappers_elsewhere) {
                ++cross;
            } else if (mappers_here >= 2 && o->match) {
                int lowest = r;
                for (int q = 0; q < r; ++q) {
                    if (strcmp(hosts[q], hosts[r]) == 0) {
                        lowest = q;
                        break;
                    }
                }
                ++shared[lowest];
            }
        }
    }
    for (int h = 0; h < nranks; ++h) {
        int first = 1, nlocal = 0;
        for (int q = 0; q < nranks; ++q) {
            if (strcmp(hosts[q], hosts[h]) != 0) continue;
            first = first && q >= h;
            ++nlocal;
        }
        if (first) printf("xhost: host %s ranks %d shm_shared %ld\n", hosts[h], nlocal, shared[h]);
    }
    if (getenv("XHOST_SHM_MATCH")) printf("xhost: shm_match %s\n", getenv("XHOST_SHM_MATCH"));
    printf("xhost: shm_cross_host %ld\n", cross);
    printf("xhost: shm_foreign %ld\n", foreign);
    free(shared);
    free(all);
}

/* Which libucp the dynamic linker gave us: UCX's or a compatible one (LD_LIBRARY_PATH). */
static void report_ucp(void) {
    char path[4096] = "none";
    FILE* f = fopen("/proc/self/maps", "r");
    if (f) {
        char line[4096];
        while (fgets(line, sizeof(line), f)) {
            const char* p = strchr(line, '/');
            if (p && strstr(p, "/libucp.so")) {
                snprintf(path, sizeof(path), "%s", p);
                path[strcspn(path, "\n")] = '\0';
                break;
            }
        }
        fclose(f);
    }
    printf("xhost: rank %d ucp %s\n", rank, path);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    verbose = getenv("XHOST_VERBOSE") && atoi(getenv("XHOST_VERBOSE")) > 0;
    size_t max_bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : 4194304;

    char me[kHostLen] = {0};
    gethostname(me, sizeof(me) - 1);
    hosts = xmalloc(sizeof(*hosts) * nranks);
    MPI_Allgather(me, kHostLen, MPI_CHAR, hosts, kHostLen, MPI_CHAR, MPI_COMM_WORLD);
    printf("xhost: rank %d of %d host %s pid %d\n", rank, nranks, me, (int)getpid());
    report_ucp();
    fflush(stdout);

    ping_pong(max_bytes);
    all_to_all();
    report_shm(); /* before the barrier below, while every transport still has its segments */

    long long total_cross = 0;
    long total_errors = 0;
    MPI_Reduce(&cross_bytes, &total_cross, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Allreduce(&errors, &total_errors, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("xhost: cross_host_payload_bytes %lld\n", total_cross);
        if (total_errors == 0) {
            printf("xhost: PASS\n");
        } else {
            printf("xhost: FAIL %ld errors\n", total_errors);
        }
    }
    fflush(stdout);
    free(hosts);
    MPI_Finalize();
    return total_errors == 0 ? 0 : 1;
}
