/*
 * coll_main.c - the collectives kernel as a standalone MPI program.
 *
 * Purpose: run one collective (one of our C algorithms, or the library's own) with the
 * timing protocol of mpilab_timing.h in a process with no Python, so the same C source
 * runs under a real MPI (mpicc, mpiexec) and under SimGrid's SMPI (smpicc, smpirun: the
 * simulated clusters of mpilab.sim).
 * Usage: mpilab-coll OP ALG DTYPE ROOT WARMUP REPS CHECK COUNT:ITERS[:separated] [...]
 *   OP     - bcast | reduce | allreduce | barrier | scatter | gather | allgather |
 *            alltoall | reduce_scatter_block
 *   ALG    - the algorithm number of c_collectives.h (0: the library's collective)
 *   DTYPE  - float64 | float32 | int32 | int64 | uint8
 *   ROOT   - root rank of the rooted operations
 *   WARMUP, REPS - as in mpilab_timing.h
 *   CHECK  - 1: before timing, one call's result is compared with the value every rank
 *            must hold (reductions: the sum); 0: not (buffers SMPI shares between
 *            simulated ranks hold no meaningful data)
 *   COUNT:ITERS - elements per rank (per block for allgather/gather/scatter/alltoall/
 *            reduce_scatter_block) and timed
 *            calls per repetition for that count; with ":separated" every call is
 *            preceded by an untimed barrier and timed alone (mpilab_timing.h's
 *            mpilab_time_steps_separated), else the calls run back to back
 * Rank 0 prints one JSON object per count:
 *   {"count": C, "size_bytes": B, "iters": I, "checked": true|false,
 *    "timing": "back-to-back"|"separated", "times": [...]}
 * times are seconds per call, the slowest rank's. A wrong result prints
 * {"error": "..."} and aborts with status 5; bad arguments abort with status 2.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "c_collectives.h"

static const char *OPS[] = {"bcast", "reduce", "allreduce", "barrier", "scatter", "gather",
                            "allgather", "alltoall", "reduce_scatter_block"};
#define N_OPS ((int)(sizeof OPS / sizeof OPS[0]))
static const char *DTYPES[] = {"float64", "float32", "int32", "int64", "uint8"};

static int lookup(const char *name, const char **names, int n)
{
    int i;
    for (i = 0; i < n; i++)
        if (strcmp(name, names[i]) == 0) return i;
    return -1;
}

static void usage(void)
{
    fprintf(stderr, "usage: mpilab-coll OP ALG DTYPE ROOT WARMUP REPS CHECK "
                    "COUNT:ITERS[:separated] ...\n");
}

/* The byte of block `r` (the rank that owns it) at offset j. */
static unsigned char pattern(int r, long j)
{
    return (unsigned char)((r * 131 + j * 7 + 1) & 0xff);
}

/* Element j of rank r's contribution to a reduction: small integers, exact in every
 * type, so the sum is the same whatever order an algorithm adds in. */
static double term(int r, long j)
{
    return (double)((r + j) % 7);
}

static void put(void *buf, int dtype, long j, double v)
{
    switch (dtype) {
    case MPILAB_FLOAT64: ((double *)buf)[j] = v; break;
    case MPILAB_FLOAT32: ((float *)buf)[j] = (float)v; break;
    case MPILAB_INT32: ((int32_t *)buf)[j] = (int32_t)v; break;
    case MPILAB_INT64: ((int64_t *)buf)[j] = (int64_t)v; break;
    default: ((unsigned char *)buf)[j] = (unsigned char)v; break;
    }
}

static double get(const void *buf, int dtype, long j)
{
    switch (dtype) {
    case MPILAB_FLOAT64: return ((const double *)buf)[j];
    case MPILAB_FLOAT32: return ((const float *)buf)[j];
    case MPILAB_INT32: return ((const int32_t *)buf)[j];
    case MPILAB_INT64: return (double)((const int64_t *)buf)[j];
    default: return ((const unsigned char *)buf)[j];
    }
}

/* Fill the buffers for one checked call. */
static void fill(int op, int dtype, int me, int p, int root, long count, long nb,
                 unsigned char *s, unsigned char *r)
{
    long j;
    int q;
    memset(r, 0, (size_t)(p * nb));
    switch (op) {
    case MPILAB_COLL_REDUCE:
    case MPILAB_COLL_ALLREDUCE:
        for (j = 0; j < count; j++) put(s, dtype, j, term(me, j));
        break;
    case MPILAB_COLL_REDUCE_SCATTER_BLOCK: /* p blocks: element j of the whole buffer */
        for (j = 0; j < p * count; j++) put(s, dtype, j, term(me, j));
        break;
    case MPILAB_COLL_ALLTOALL: /* block q, for rank q: pattern of the pair (me, q) */
        for (q = 0; q < p; q++)
            for (j = 0; j < nb; j++) s[q * nb + j] = pattern(me * p + q, j);
        break;
    case MPILAB_COLL_BCAST:
        if (me == root)
            for (j = 0; j < nb; j++) r[j] = pattern(root, j);
        break;
    case MPILAB_COLL_SCATTER:
        if (me == root)
            for (q = 0; q < p; q++)
                for (j = 0; j < nb; j++) s[q * nb + j] = pattern(q, j);
        break;
    default:
        for (j = 0; j < nb; j++) s[j] = pattern(me, j);
    }
}

/* The first wrong element of a checked call, or -1. */
static long verify(int op, int dtype, int me, int p, int root, long count, long nb,
                   const unsigned char *r)
{
    long j;
    int q;
    switch (op) {
    case MPILAB_COLL_REDUCE:
    case MPILAB_COLL_ALLREDUCE:
        if (op == MPILAB_COLL_REDUCE && me != root) return -1;
        for (j = 0; j < count; j++) {
            double want = 0.0;
            for (q = 0; q < p; q++) want += term(q, j);
            if (dtype == MPILAB_UINT8) want = (double)((long)want & 0xff);
            if (get(r, dtype, j) != want) return j;
        }
        return -1;
    case MPILAB_COLL_REDUCE_SCATTER_BLOCK: /* block me of every rank, summed */
        for (j = 0; j < count; j++) {
            double want = 0.0;
            for (q = 0; q < p; q++) want += term(q, me * count + j);
            if (dtype == MPILAB_UINT8) want = (double)((long)want & 0xff);
            if (get(r, dtype, j) != want) return j;
        }
        return -1;
    case MPILAB_COLL_ALLTOALL: /* block q came from rank q, for me */
        for (q = 0; q < p; q++)
            for (j = 0; j < nb; j++)
                if (r[q * nb + j] != pattern(q * p + me, j)) return q * nb + j;
        return -1;
    case MPILAB_COLL_BCAST:
        for (j = 0; j < nb; j++)
            if (r[j] != pattern(root, j)) return j;
        return -1;
    case MPILAB_COLL_SCATTER:
        for (j = 0; j < nb; j++)
            if (r[j] != pattern(me, j)) return j;
        return -1;
    case MPILAB_COLL_GATHER:
    case MPILAB_COLL_ALLGATHER:
        if (op == MPILAB_COLL_GATHER && me != root) return -1;
        for (q = 0; q < p; q++)
            for (j = 0; j < nb; j++)
                if (r[q * nb + j] != pattern(q, j)) return q * nb + j;
        return -1;
    }
    return -1;
}

int main(int argc, char **argv)
{
    int me, p, op, alg, dtype, root, warmup, reps, check, k, i, provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    if (argc < 9) {
        if (me == 0) usage();
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    op = lookup(argv[1], OPS, N_OPS);
    alg = atoi(argv[2]);
    dtype = lookup(argv[3], DTYPES, 5);
    root = atoi(argv[4]);
    warmup = atoi(argv[5]);
    reps = atoi(argv[6]);
    check = atoi(argv[7]);
    if (op < 0 || dtype < 0 || alg < 0 || alg > 15 || root < 0 || root >= p || warmup < 0
        || reps < 1) {
        if (me == 0) usage();
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int esz = mpilab_coll_elem_size(dtype);
    double *times = malloc(sizeof(double) * (size_t)reps);
    for (k = 8; k < argc; k++) {
        long count = -1, iters = -1;
        int used = 0, separated;
        if (sscanf(argv[k], "%ld:%ld%n", &count, &iters, &used) != 2 || count < 0 || iters < 1
            || count * esz > 2147483647L / p
            || (argv[k][used] != '\0' && strcmp(argv[k] + used, ":separated") != 0)) {
            if (me == 0) usage();
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        separated = argv[k][used] != '\0';
        long nb = count * esz;
        /* every operation's send and receive buffers fit p blocks; plain malloc, so that
         * SMPI's automatic shared malloc can fold large ones (smpi/auto-shared-malloc-thresh) */
        size_t bytes = (size_t)(p * nb > 0 ? p * nb : 1);
        unsigned char *s = malloc(bytes), *r = malloc(bytes);
        long long wb = mpilab_coll_work_bytes(op, alg, p, (int)count, dtype);
        void *w = wb > 0 ? malloc((size_t)wb) : NULL;
        if (!s || !r || (wb > 0 && !w)) MPI_Abort(MPI_COMM_WORLD, 3);
        memset(s, 0, bytes);
        if (check) {
            long bad, worst;
            fill(op, dtype, me, p, root, count, nb, s, r);
            if (mpilab_coll_run(MPI_COMM_WORLD, op, alg, s, r, (int)count, dtype,
                                MPILAB_OP_SUM, root, w, NULL, 0, NULL) != MPI_SUCCESS)
                MPI_Abort(MPI_COMM_WORLD, 4);
            bad = verify(op, dtype, me, p, root, count, nb, r);
            MPI_Allreduce(&bad, &worst, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
            if (worst >= 0) {
                if (bad >= 0)
                    printf("{\"error\": \"%s algorithm %d: rank %d holds a wrong value at "
                           "element %ld (count %ld)\"}\n", argv[1], alg, me, bad, count);
                fflush(stdout);
                MPI_Abort(MPI_COMM_WORLD, 5);
            }
        }
        if ((separated ? mpilab_coll_time_separated : mpilab_coll_time)(
                MPI_COMM_WORLD, op, alg, s, r, (int)count, dtype, MPILAB_OP_SUM, root, w,
                warmup, (int)iters, reps, times) != MPI_SUCCESS)
            MPI_Abort(MPI_COMM_WORLD, 4);
        if (me == 0) {
            printf("{\"count\": %ld, \"size_bytes\": %ld, \"iters\": %ld, \"checked\": %s, "
                   "\"timing\": \"%s\", \"times\": [", count, nb, iters,
                   check ? "true" : "false", separated ? "separated" : "back-to-back");
            for (i = 0; i < reps; i++) printf("%s%.9e", i ? ", " : "", times[i]);
            printf("]}\n");
            fflush(stdout);
        }
        free(s);
        free(r);
        free(w);
    }
    free(times);
    MPI_Finalize();
    return 0;
}
