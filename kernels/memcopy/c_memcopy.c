/*
 * c_memcopy.c - the local copy a transfer is compared with.
 *
 * Purpose: the paper's comparison column: how long the array assignment a(i) = b(i) of
 * the same size takes on one core, so a transfer can be expressed in local copies.
 * Algorithm: copy n doubles from src to dst with memcpy, or with an element loop (the
 * compiled form of the paper's Fortran assignment); a compiler barrier after each copy
 * keeps repeated copies from being merged. Timed with the protocol of mpilab_timing.h;
 * every rank of comm copies its own arrays at the same time.
 *
 *   comm     - communicator (use MPI_COMM_SELF for one rank alone)
 *   dst, src - n doubles each, not overlapping
 *   n        - number of doubles (>= 0)
 *   method   - MPILAB_COPY_MEMCPY or MPILAB_COPY_LOOP
 *   warmup, iters, reps, times - the timing protocol; times are seconds per copy
 * Returns an MPI error code.
 */
#include <string.h>
#include "c_memcopy.h"
#include "mpilab_timing.h"

typedef struct {
    double *dst;
    const double *src;
    size_t n;
} copy_ctx;

static int memcpy_step(void *p)
{
    copy_ctx *c = (copy_ctx *)p;
    memcpy(c->dst, c->src, c->n * sizeof(double));
    __asm__ __volatile__("" ::: "memory");
    return MPI_SUCCESS;
}

static int loop_step(void *p)
{
    copy_ctx *c = (copy_ctx *)p;
    double *restrict d = c->dst;
    const double *restrict s = c->src;
    size_t i;
    for (i = 0; i < c->n; i++)
        d[i] = s[i];
    __asm__ __volatile__("" ::: "memory");
    return MPI_SUCCESS;
}

int mpilab_memcopy(MPI_Comm comm, double *dst, const double *src, size_t n, int method,
                   int warmup, int iters, int reps, double *times)
{
    copy_ctx c = {dst, src, n};
    return mpilab_time_steps(comm, method == MPILAB_COPY_LOOP ? loop_step : memcpy_step,
                             &c, warmup, iters, reps, 1.0, times);
}
