/*
 * c_stencil.c - the 2D heat stencil of the halo-exchange lesson, on a 2D process grid.
 *
 * Purpose: the S/R heat code of the SHM-windows paper (Balaji et al.'s tutorial problem),
 * exactly as mpilab/halo/problem.py defines it, so the parallel result equals serial_heat.
 * Algorithm: each step exchanges the one-cell ghost frame (mpilab_halo.h, seven modes,
 * datatype or manual packing), sets new = old/2 + (N + S + E + W)/8 on the block
 * (the update of mpilab_heat.h, shared with the onesided kernel), adds
 * `energy` at the heat sources this rank owns, and swaps old and new.
 *
 *   comm      - communicator; size must equal py * px
 *   nx, ny    - global grid (columns, rows); each rank needs >= 1 point per axis
 *   py, px    - process grid (rows of ranks, columns of ranks)
 *   mode      - MPILAB_HALO_BLOCKING / SENDRECV / NONBLOCKING / OVERLAP / OVERLAP_TEST /
 *               PERSISTENT / NEIGHBOR
 *   pack      - MPILAB_PACK_DATATYPE or MPILAB_PACK_MANUAL (column ghosts)
 *   energy    - heat added at each source after every step
 *   steps     - steps run from the zero field before `block` is copied out (>= 0)
 *   last, timeline - if last > 0, the last `last` steps are timed phase by phase:
 *               timeline gets last * MPILAB_NPHASES * 2 doubles, (start, end) of each
 *               phase in seconds after a barrier that precedes them
 *   block     - out (or NULL): this rank's rows x cols block after `steps` steps
 *   warmup, iters, reps, times - if reps > 0, more steps are then timed with the
 *               protocol of mpilab_timing.h; times are seconds per step
 * Denormals are flushed to zero while it runs (see mpilab_halo.h).
 * mpilab_heat_sweep times the update alone on one nx x ny grid per rank (no exchange):
 * the memory-bandwidth side of the lesson (mpilab_heat_sweep_on: the same on two arrays
 * a, b of (nx + 2) x (ny + 2) doubles the caller made, so the caller picks their pages;
 * b's interior is overwritten, the two swap each sweep); mpilab_store_copy times dst[i] = src[i] as a
 * loop with ordinary stores (kept from becoming a memcpy call, which may write large
 * arrays with non-temporal stores that skip the cache) - the copy that pays for its
 * writes the way the sweep does. All return an MPI error code.
 */
#include <stdlib.h>
#include <string.h>
#include "c_stencil.h"
#include "mpilab_timing.h"
#include "mpilab_heat.h"

typedef struct {
    mpilab_halo h;
    double *old, *nw;
    double energy;
    int nsrc, stream;
    size_t src[3];
    double *tl, t0;
} heat_ctx;

static void heat_whole(void *p)
{
    heat_ctx *c = (heat_ctx *)p;
    heat_rows(c->nw, c->old, c->h.ld, 1, c->h.rows, 1, c->h.cols, c->stream);
}

static void heat_interior(void *p, int k, int parts)
{
    heat_ctx *c = (heat_ctx *)p;
    int r0, r1;
    halo_part(2, c->h.rows - 1, k, parts, &r0, &r1);
    if (r0 <= r1 && c->h.cols > 2)
        heat_rows(c->nw, c->old, c->h.ld, r0, r1, 2, c->h.cols - 1, c->stream);
}

static void heat_ring(void *p)
{
    heat_ctx *c = (heat_ctx *)p;
    int rows = c->h.rows, cols = c->h.cols, ld = c->h.ld;
    heat_rows(c->nw, c->old, ld, 1, 1, 1, cols, 0);
    if (rows > 1) heat_rows(c->nw, c->old, ld, rows, rows, 1, cols, 0);
    if (rows > 2) {
        heat_rows(c->nw, c->old, ld, 2, rows - 1, 1, 1, 0);
        if (cols > 1) heat_rows(c->nw, c->old, ld, 2, rows - 1, cols, cols, 0);
    }
}

static int heat_step(void *p)
{
    heat_ctx *c = (heat_ctx *)p;
    halo_xfer x[4] = {{c->old, HALO_W}, {c->old, HALO_E}, {c->old, HALO_N}, {c->old, HALO_S}};
    double *tmp;
    int k, err;
    err = halo_round(&c->h, x, 4, heat_whole, heat_interior, heat_ring, c, c->tl, c->t0);
    for (k = 0; k < c->nsrc; k++)
        c->nw[c->src[k]] += c->energy;
    tmp = c->old;
    c->old = c->nw;
    c->nw = tmp;
    if (c->tl) c->tl += 2 * MPILAB_NPHASES;
    return err;
}

int mpilab_heat(MPI_Comm comm, int nx, int ny, int py, int px, int mode, int pack,
                int small_pages, double energy, int steps, int last, double *timeline,
                double *block, int warmup, int iters, int reps, double *times,
                double *huge_share)
{
    heat_ctx c;
    int err, all, k, s;
    unsigned csr;

    memset(&c, 0, sizeof(c));
    if ((err = halo_init(&c.h, comm, nx, ny, py, px, mode, pack)) != MPI_SUCCESS) return err;
    csr = halo_ftz_on();
    c.h.small_pages = small_pages;
    c.old = halo_field_alloc(&c.h);
    c.nw = halo_field_alloc(&c.h);
    if ((err = halo_all_ok(c.h.cart, c.old && c.nw, &all)) != MPI_SUCCESS) goto done;
    if (!all) { err = MPI_ERR_NO_MEM; goto done; }
    if (huge_share) {   /* the least over the ranks; the two fields are alike */
        err = halo_least_huge_share(c.h.cart, c.old,
                                    sizeof(double) * (size_t)(c.h.rows + 2) * (size_t)c.h.ld,
                                    huge_share);
        if (err != MPI_SUCCESS) goto done;
    }
    c.energy = energy;
    c.stream = heat_streams((size_t)(c.h.rows + 2) * (size_t)c.h.ld);
    c.nsrc = heat_sources(&c.h, nx, ny, c.src);
    if (last > steps) last = steps;
    for (s = 0; s < steps - last; s++)
        if ((err = heat_step(&c)) != MPI_SUCCESS) goto done;
    if (last > 0 && timeline) {
        if ((err = MPI_Barrier(c.h.cart)) != MPI_SUCCESS) goto done;
        c.t0 = MPI_Wtime();
        c.tl = timeline;
    }
    for (; s < steps; s++)
        if ((err = heat_step(&c)) != MPI_SUCCESS) goto done;
    c.tl = NULL;
    if (block)
        for (k = 0; k < c.h.rows; k++)
            memcpy(block + (size_t)k * c.h.cols, c.old + (size_t)(k + 1) * c.h.ld + 1,
                   sizeof(double) * (size_t)c.h.cols);
    if (reps > 0)
        err = mpilab_time_steps(c.h.cart, heat_step, &c, warmup, iters, reps, 1.0, times);
done:
    halo_ftz_off(csr);
    halo_array_free(c.old);
    halo_array_free(c.nw);
    halo_free(&c.h);
    return err;
}

typedef struct {
    double *a, *b;
    int nx, ny, stream;
} sweep_ctx;

static int sweep_step(void *p)
{
    sweep_ctx *c = (sweep_ctx *)p;
    double *t;
    heat_rows(c->b, c->a, c->nx + 2, 1, c->ny, 1, c->nx, c->stream);
    __asm__ __volatile__("" ::: "memory");
    t = c->a;
    c->a = c->b;
    c->b = t;
    return MPI_SUCCESS;
}

/* prefetch: 1, the streaming rows where heat_streams says the grid streams (as every
 * kernel does); 0, the plain rows always (what the hardware prefetcher alone gives) */
static int sweep_on(MPI_Comm comm, double *a, double *b, int nx, int ny, int prefetch,
                    int warmup, int iters, int reps, double *times)
{
    sweep_ctx c;
    c.nx = nx;
    c.ny = ny;
    c.stream = prefetch && heat_streams((size_t)(nx + 2) * (size_t)(ny + 2));
    c.a = a;
    c.b = b;
    return mpilab_time_steps(comm, sweep_step, &c, warmup, iters, reps, 1.0, times);
}

int mpilab_heat_sweep_on(MPI_Comm comm, double *a, double *b, int nx, int ny, int warmup,
                         int iters, int reps, double *times)
{
    return sweep_on(comm, a, b, nx, ny, 1, warmup, iters, reps, times);
}

int mpilab_heat_sweep(MPI_Comm comm, int nx, int ny, int prefetch, int warmup, int iters,
                      int reps, double *times)
{
    size_t n = (size_t)(nx + 2) * (size_t)(ny + 2);
    double *a = halo_array_alloc(n), *b = halo_array_alloc(n);
    int err, all;
    err = halo_all_ok(comm, a && b, &all);
    if (err == MPI_SUCCESS && !all) err = MPI_ERR_NO_MEM;
    if (err == MPI_SUCCESS)
        err = sweep_on(comm, a, b, nx, ny, prefetch, warmup, iters, reps, times);
    halo_array_free(a);
    halo_array_free(b);
    return err;
}

typedef struct {
    double *dst;
    const double *src;
    size_t n;
} copy_ctx;

/* GCC would turn this loop into a call to memcpy; keep it a loop with ordinary stores */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
MPILAB_VECTOR_CLONES
static void store_copy(double *restrict d, const double *restrict s, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        d[i] = s[i];
}

static int copy_step(void *p)
{
    copy_ctx *c = (copy_ctx *)p;
    store_copy(c->dst, c->src, c->n);
    __asm__ __volatile__("" ::: "memory");
    return MPI_SUCCESS;
}

int mpilab_store_copy(MPI_Comm comm, double *dst, const double *src, size_t n, int warmup,
                      int iters, int reps, double *times)
{
    copy_ctx c = {dst, src, n};
    return mpilab_time_steps(comm, copy_step, &c, warmup, iters, reps, 1.0, times);
}
