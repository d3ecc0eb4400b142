/*
 * pingpong_main.c - the ping-pong kernel as a standalone MPI program.
 *
 * Purpose: the reference the Cython kernel is compared with in `mpilab.bench pingpong`:
 * the same C loop (mpilab_pingpong), with no Python in the process.
 * Usage: mpilab-pingpong MODE WARMUP REPS SIZE:ITERS [SIZE:ITERS ...]
 *   MODE   - roundtrip | oneway | window
 *   WARMUP, REPS - as in mpilab_pingpong
 *   SIZE:ITERS   - message size in bytes and timed iterations for it
 * Rank 0 prints one JSON object per size: {"size_bytes": N, "iters": I, "times": [...]}.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "c_pingpong.h"

static void usage(void)
{
    fprintf(stderr, "usage: mpilab-pingpong roundtrip|oneway|window WARMUP REPS SIZE:ITERS ...\n");
}

int main(int argc, char **argv)
{
    int rank, size, mode, warmup, reps, k, r, provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 5 || size < 2) {
        if (rank == 0) usage();
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    mode = strcmp(argv[1], "oneway") == 0   ? MPILAB_PP_ONEWAY
           : strcmp(argv[1], "window") == 0 ? MPILAB_PP_WINDOW
                                            : MPILAB_PP_ROUNDTRIP;
    warmup = atoi(argv[2]);
    reps = atoi(argv[3]);
    if (reps < 1 || warmup < 0) {
        if (rank == 0) usage();
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    double *times = malloc(sizeof(double) * (size_t)reps);
    for (k = 4; k < argc; k++) {
        long nbytes = -1, iters = -1;
        if (sscanf(argv[k], "%ld:%ld", &nbytes, &iters) != 2 || nbytes < 0 || iters < 1
            || nbytes > 2147483647L) {
            if (rank == 0) usage();
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        /* Separate send and receive buffers, laid out as mpilab.buffers.message_buffer
         * lays out the Python kernels' (2 MiB aligned, whole 2 MiB extents advised to
         * use transparent huge pages) at every size, so that the sweep changes the size
         * and not the page kind; touched before timing. */
        void *sbuf = NULL, *rbuf = NULL;
        size_t huge = (size_t)1 << 21;
        size_t alloc = nbytes > 0 ? (size_t)nbytes : 1;
        size_t whole = (alloc + huge - 1) / huge * huge;
        if (posix_memalign(&sbuf, huge, whole) || posix_memalign(&rbuf, huge, whole))
            MPI_Abort(MPI_COMM_WORLD, 3);
#ifdef MADV_HUGEPAGE
        madvise(sbuf, whole, MADV_HUGEPAGE); /* advice only: 4 KiB pages if refused */
        madvise(rbuf, whole, MADV_HUGEPAGE);
#endif
        memset(sbuf, rank + 1, alloc);
        memset(rbuf, 0, alloc);
        if (mpilab_pingpong(MPI_COMM_WORLD, 0, 1, sbuf, rbuf, (int)nbytes, mode, warmup,
                            (int)iters, reps, times) != MPI_SUCCESS)
            MPI_Abort(MPI_COMM_WORLD, 4);
        if (rank == 0) {
            printf("{\"size_bytes\": %ld, \"iters\": %ld, \"times\": [", nbytes, iters);
            for (r = 0; r < reps; r++) printf("%s%.9e", r ? ", " : "", times[r]);
            printf("]}\n");
            fflush(stdout);
        }
        free(sbuf);
        free(rbuf);
    }
    free(times);
    MPI_Finalize();
    return 0;
}
