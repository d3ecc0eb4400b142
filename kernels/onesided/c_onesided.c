/*
 * c_onesided.c - the heat stencil of the halo-exchange lesson with a one-sided exchange.
 *
 * Purpose: the problem and update of c_stencil.c (mpilab_heat.h; results equal
 * mpilab.halo.serial_heat bitwise), with the ghost cells filled through MPI-3 windows:
 * the RMA and SHM versions of the SHM-windows paper (lecture 03).
 * Algorithm: both fields of a rank (old and new, (rows + 2) x ld doubles each) live in
 * one window; each step fills the ghosts of old from the neighbours' edges (below), sets
 * new = old/2 + (N + S + E + W)/8, adds the sources and swaps old and new.
 *   PUT_FENCE - MPI_Put of every edge into the neighbour's ghost, one MPI_Win_fence;
 *   PUT_PSCW  - the same Puts in a post/start/complete/wait epoch of the neighbours only;
 *   PUT_LOCK  - passive target: the Puts, MPI_Win_flush_all, a zero-byte message to each
 *               neighbour, MPI_Win_sync;
 *   SHM       - MPI_Win_allocate_shared on the node: each rank copies the neighbours'
 *               edges into its own ghosts with plain loads, after one MPI_Barrier;
 *   SHM_NC    - the same, with alloc_shared_noncontig (each segment on its own pages);
 *   HYBRID    - the SHM-windows paper's hybrid: one SHM_NC window per node (the ranks
 *               MPI_Comm_split_type puts together), plain loads from the neighbours on
 *               this node after a barrier of the node, MPI_Isend / MPI_Irecv with the
 *               neighbours on other nodes, posted first so that they travel meanwhile.
 * Columns travel as MPI vector datatypes on both sides of a Put (the target's with the
 * neighbour's leading dimension, which differs on uneven grids).
 *
 * Why one synchronisation per step is enough for the Puts: the ghosts of field f are
 * written in the steps k with k % 2 == f and read by this rank's update of the same
 * step. The next Put into them (step k + 2) comes from a neighbour that has passed the
 * synchronisation of step k + 1, which needs this rank there too, so past its update of
 * step k. That update writes the interior of the other field, which no Put touches.
 * (SHM modes: the same argument for the neighbours' edges, see step_shm.)
 *
 *   comm      - communicator; size must equal py * px (all on one node for SHM, SHM_NC;
 *               any placement for HYBRID)
 *   nx, ny    - global grid (columns, rows); each rank needs >= 1 point per axis
 *   py, px    - process grid (rows of ranks, columns of ranks)
 *   mode      - MPILAB_OS_PUT_FENCE / PUT_PSCW / PUT_LOCK / SHM / SHM_NC / HYBRID
 *   energy    - heat added at each source after every step
 *   steps     - steps run from the zero field before `block` is copied out (>= 0)
 *   block     - out (or NULL): this rank's rows x cols block after `steps` steps
 *   warmup, iters, reps, times - if reps > 0, more steps are then timed with the
 *               protocol of mpilab_timing.h; times are seconds per step
 * Returns an MPI error code, or MPILAB_OS_NOT_SHARED on every rank when a shared-memory
 * mode is asked of ranks on several nodes. Denormals are flushed to zero while it runs.
 * mpilab_shm_layout reports where each rank's segment of a shared window lies (as rank 0
 * maps it): addr, size - out, one MPI_Aint per rank of comm, on every rank.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "c_onesided.h"
#include "mpilab_halo.h"
#include "mpilab_heat.h"
#include "mpilab_timing.h"

#define OS_TAG 7 /* the zero-byte notifications of PUT_LOCK */

typedef struct {
    mpilab_halo h;             /* layout, Cartesian communicator, neighbours, column type */
    int mode;
    MPI_Win win;
    MPI_Comm shm;              /* shared windows: the ranks of the node (all of cart
                                * for SHM, SHM_NC) */
    MPI_Group nbrs;            /* PUT_PSCW: the actual neighbours */
    int nnbr;
    MPI_Datatype tcol[4];      /* W, E: a column of that neighbour's field (its ld) */
    double *base;              /* this rank's two fields, fsize doubles each */
    size_t fsize;
    int cur;                   /* which field is old */
    double *old, *nw;
    /* the neighbour on each side: its block, its fields' size, (shared windows) its
     * fields when it is on this node, else NULL */
    int nrows[4], ncols[4], nld[4];
    size_t nfsize[4];
    const double *nbase[4];
    MPI_Request req[8];        /* HYBRID: the messages to and from other nodes */
    double energy;
    int nsrc, stream;
    size_t src[3];
} os_ctx;

/* Offsets, in a field of a rows x cols block (leading dimension ld), of the ghost line
 * on `side` and of the edge line next to it: halo_ghost / halo_edge for any block. */
static size_t os_ghost_off(int rows, int cols, int ld, int side)
{
    switch (side) {
    case HALO_W: return (size_t)ld;
    case HALO_E: return (size_t)ld + (size_t)cols + 1;
    case HALO_N: return 1;
    default:     return (size_t)(rows + 1) * (size_t)ld + 1;
    }
}

static size_t os_edge_off(int rows, int cols, int ld, int side)
{
    switch (side) {
    case HALO_W: return (size_t)ld + 1;
    case HALO_E: return (size_t)ld + (size_t)cols;
    case HALO_N: return (size_t)ld + 1;
    default:     return (size_t)rows * (size_t)ld + 1;
    }
}

static void os_fields(os_ctx *c)
{
    c->old = c->base + (size_t)c->cur * c->fsize;
    c->nw = c->base + (size_t)(1 - c->cur) * c->fsize;
}

/* The update of the block from old (ghosts filled) into new, the sources, the swap. */
static void os_update(os_ctx *c)
{
    int k;
    heat_rows(c->nw, c->old, c->h.ld, 1, c->h.rows, 1, c->h.cols, c->stream);
    for (k = 0; k < c->nsrc; k++)
        c->nw[c->src[k]] += c->energy;
    c->cur = 1 - c->cur;
    os_fields(c);
}

/* MPI_Put of this rank's edges of old into the facing ghosts of the same field (cur) of
 * each neighbour: my west edge into the east ghost of the west neighbour, and so on. */
static int os_put_edges(os_ctx *c)
{
    int s, err;
    for (s = 0; s < 4; s++) {
        int t = c->h.nbr[s];
        MPI_Aint disp;
        if (t == MPI_PROC_NULL) continue;
        disp = (MPI_Aint)((size_t)c->cur * c->nfsize[s] +
                          os_ghost_off(c->nrows[s], c->ncols[s], c->nld[s], halo_opp(s)));
        if (halo_is_col(s))
            err = MPI_Put(halo_edge(&c->h, c->old, s), 1, c->h.col, t, disp, 1, c->tcol[s],
                          c->win);
        else
            err = MPI_Put(halo_edge(&c->h, c->old, s), c->h.cols, MPI_DOUBLE, t, disp,
                          c->h.cols, MPI_DOUBLE, c->win);
        if (err != MPI_SUCCESS) return err;
    }
    return MPI_SUCCESS;
}

/* PUT_FENCE. One fence per step closes the epoch of this step's Puts (they are then in
 * the targets' windows) and opens the next. No assert fits it: the update stored into
 * the window since the last fence (so not MPI_MODE_NOSTORE), Puts follow it (not
 * NOPUT, NOSUCCEED) and it completes Puts (not NOPRECEDE). The first and last fences of
 * the run carry the asserts that do hold there (os_begin, os_end). */
static int step_fence(void *p)
{
    os_ctx *c = (os_ctx *)p;
    int err;
    if ((err = os_put_edges(c)) != MPI_SUCCESS) return err;
    if ((err = MPI_Win_fence(0, c->win)) != MPI_SUCCESS) return err;
    os_update(c);
    return MPI_SUCCESS;
}

/* PUT_PSCW. Only neighbours synchronise, pairwise, instead of the whole communicator.
 * Asserts: none holds. MPI_MODE_NOSTORE (post) is false, the last update stored into
 * the window; NOPUT (post) is false, the neighbours put; NOCHECK (post, start) would
 * need every start to be known matched already, which only another synchronisation
 * could tell. */
static int step_pscw(void *p)
{
    os_ctx *c = (os_ctx *)p;
    int err;
    if (c->nnbr > 0) {
        /* expose this rank's window to the neighbours: their Puts may land from now */
        if ((err = MPI_Win_post(c->nbrs, 0, c->win)) != MPI_SUCCESS) return err;
        /* access the neighbours' windows (may wait for their post, or defer the Puts) */
        if ((err = MPI_Win_start(c->nbrs, 0, c->win)) != MPI_SUCCESS) return err;
        if ((err = os_put_edges(c)) != MPI_SUCCESS) return err;
        /* this rank's Puts are done with (and complete at the targets by their wait) */
        if ((err = MPI_Win_complete(c->win)) != MPI_SUCCESS) return err;
        /* every neighbour's Puts into this rank's ghosts are complete */
        if ((err = MPI_Win_wait(c->win)) != MPI_SUCCESS) return err;
    }
    os_update(c);
    return MPI_SUCCESS;
}

/* PUT_LOCK. Inside the one MPI_Win_lock_all epoch of the run, the target takes no part
 * in a Put, so the ranks must tell each other when data has arrived and when ghosts may
 * be overwritten; a zero-byte message to each neighbour does both. */
static int step_lock(void *p)
{
    os_ctx *c = (os_ctx *)p;
    MPI_Request req[8];
    int s, n = 0, err;
    /* release: the loads and stores of the last update are done in the window before
     * the messages below let a neighbour put into the ghosts it read (unified memory
     * model: a memory barrier) */
    if ((err = MPI_Win_sync(c->win)) != MPI_SUCCESS) return err;
    if ((err = os_put_edges(c)) != MPI_SUCCESS) return err;
    /* the Puts are complete at their targets, not only at this origin */
    if ((err = MPI_Win_flush_all(c->win)) != MPI_SUCCESS) return err;
    /* "your ghosts are in": one empty message to each neighbour, one from each. A
     * neighbour's message means its Puts of this step are complete here (it flushed
     * first). Mine also tells it that my update of the step before is over, the update
     * that read the ghosts it will put into next step (the other field's): without
     * that, a fast neighbour could overwrite them while they are read */
    for (s = 0; s < 4; s++) {
        if (c->h.nbr[s] == MPI_PROC_NULL) continue;
        err = MPI_Irecv(NULL, 0, MPI_BYTE, c->h.nbr[s], OS_TAG, c->h.cart, &req[n++]);
        if (err != MPI_SUCCESS) return err;
    }
    for (s = 0; s < 4; s++) {
        if (c->h.nbr[s] == MPI_PROC_NULL) continue;
        err = MPI_Isend(NULL, 0, MPI_BYTE, c->h.nbr[s], OS_TAG, c->h.cart, &req[n++]);
        if (err != MPI_SUCCESS) return err;
    }
    if ((err = MPI_Waitall(n, req, MPI_STATUSES_IGNORE)) != MPI_SUCCESS) return err;
    /* acquire: the neighbours' Puts, complete in the public window, are seen by the
     * loads of the update */
    if ((err = MPI_Win_sync(c->win)) != MPI_SUCCESS) return err;
    os_update(c);
    return MPI_SUCCESS;
}

/* SHM, SHM_NC: no MPI data movement. One barrier per step is enough because the fields
 * are double-buffered: after the barrier of step k every neighbour has finished its
 * update of step k - 1, so the edges of old (written by that update) are final, and
 * nobody writes them again before the barrier of step k + 1 (the update of step k
 * writes the other field, the copies of step k write ghosts, never edges). With one
 * field updated in place, a second barrier between the copies and the update would be
 * needed. MPI_Win_sync on both sides of the barrier orders the stores before it with the
 * loads after it, on this rank and between ranks, as the unified model asks. */
static int os_node_copy(os_ctx *c)
{
    int s, r, err;
    if ((err = MPI_Win_sync(c->win)) != MPI_SUCCESS) return err;
    if ((err = MPI_Barrier(c->shm)) != MPI_SUCCESS) return err;
    if ((err = MPI_Win_sync(c->win)) != MPI_SUCCESS) return err;
    for (s = 0; s < 4; s++) {
        const double *from;
        double *to;
        if (c->nbase[s] == NULL) continue; /* no neighbour, or one on another node */
        /* the neighbour's edge facing this rank, in its field cur */
        from = c->nbase[s] + (size_t)c->cur * c->nfsize[s] +
               os_edge_off(c->nrows[s], c->ncols[s], c->nld[s], halo_opp(s));
        to = halo_ghost(&c->h, c->old, s);
        if (halo_is_col(s))
            for (r = 0; r < c->h.rows; r++)
                to[(size_t)r * c->h.ld] = from[(size_t)r * c->nld[s]];
        else
            memcpy(to, from, sizeof(double) * (size_t)c->h.cols);
    }
    return MPI_SUCCESS;
}

static int step_shm(void *p)
{
    os_ctx *c = (os_ctx *)p;
    int err;
    if ((err = os_node_copy(c)) != MPI_SUCCESS) return err;
    os_update(c);
    return MPI_SUCCESS;
}

/* HYBRID. The ghosts from other nodes arrive by message into old's ghost lines; the
 * rest as in step_shm. The barrier is the node's only: a rank on another node is
 * synchronised by its messages (its edges of old are final when it sends them, and
 * this rank's ghosts of old are not read before MPI_Waitall). Tags name the side of
 * the receiver's ghost, so a W and an E message between the same pair of ranks (2 x 1
 * grids never have one, but a tag costs nothing) cannot be confused. */
static int step_hybrid(void *p)
{
    os_ctx *c = (os_ctx *)p;
    int s, n = 0, err;
    for (s = 0; s < 4; s++) {
        if (c->h.nbr[s] == MPI_PROC_NULL || c->nbase[s] != NULL) continue;
        if (halo_is_col(s))
            err = MPI_Irecv(halo_ghost(&c->h, c->old, s), 1, c->h.col, c->h.nbr[s], s,
                            c->h.cart, &c->req[n++]);
        else
            err = MPI_Irecv(halo_ghost(&c->h, c->old, s), c->h.cols, MPI_DOUBLE,
                            c->h.nbr[s], s, c->h.cart, &c->req[n++]);
        if (err != MPI_SUCCESS) return err;
    }
    for (s = 0; s < 4; s++) {
        if (c->h.nbr[s] == MPI_PROC_NULL || c->nbase[s] != NULL) continue;
        /* my edge facing the neighbour fills its ghost on the opposite side */
        if (halo_is_col(s))
            err = MPI_Isend(halo_edge(&c->h, c->old, s), 1, c->h.col, c->h.nbr[s],
                            halo_opp(s), c->h.cart, &c->req[n++]);
        else
            err = MPI_Isend(halo_edge(&c->h, c->old, s), c->h.cols, MPI_DOUBLE,
                            c->h.nbr[s], halo_opp(s), c->h.cart, &c->req[n++]);
        if (err != MPI_SUCCESS) return err;
    }
    if ((err = os_node_copy(c)) != MPI_SUCCESS) return err;
    if ((err = MPI_Waitall(n, c->req, MPI_STATUSES_IGNORE)) != MPI_SUCCESS) return err;
    os_update(c);
    return MPI_SUCCESS;
}

static int os_is_shm(int mode) { return mode == MPILAB_OS_SHM || mode == MPILAB_OS_SHM_NC; }
/* the modes whose fields live in a shared-memory window of the node */
static int os_shared(int mode) { return os_is_shm(mode) || mode == MPILAB_OS_HYBRID; }

/* The neighbours' blocks (halo_split as halo_init does for this rank) and column types. */
static int os_neighbours(os_ctx *c, int nx, int ny)
{
    int s, y0, x0, err;
    for (s = 0; s < 4; s++) {
        c->tcol[s] = MPI_DATATYPE_NULL;
        c->nrows[s] = c->h.rows;
        c->ncols[s] = c->h.cols;
        if (c->h.nbr[s] == MPI_PROC_NULL) continue;
        if (s == HALO_W || s == HALO_E)
            halo_split(nx, c->h.dims[1], c->h.coords[1] + (s == HALO_E ? 1 : -1), &x0,
                       &c->ncols[s]);
        else
            halo_split(ny, c->h.dims[0], c->h.coords[0] + (s == HALO_S ? 1 : -1), &y0,
                       &c->nrows[s]);
        c->nld[s] = c->ncols[s] + 2;
        c->nfsize[s] = (size_t)(c->nrows[s] + 2) * (size_t)c->nld[s];
        if (halo_is_col(s) && !os_shared(c->mode)) {
            if ((err = MPI_Type_vector(c->h.rows, 1, c->nld[s], MPI_DOUBLE, &c->tcol[s]))
                != MPI_SUCCESS)
                return err;
            if ((err = MPI_Type_commit(&c->tcol[s])) != MPI_SUCCESS) return err;
        }
    }
    return MPI_SUCCESS;
}

/* The group of the actual neighbours (PUT_PSCW), each once. */
static int os_group(os_ctx *c)
{
    MPI_Group all;
    int ranks[4], s, k, err;
    c->nnbr = 0;
    for (s = 0; s < 4; s++) {
        int t = c->h.nbr[s];
        if (t == MPI_PROC_NULL) continue;
        for (k = 0; k < c->nnbr && ranks[k] != t; k++) {}
        if (k == c->nnbr) ranks[c->nnbr++] = t;
    }
    if ((err = MPI_Comm_group(c->h.cart, &all)) != MPI_SUCCESS) return err;
    err = MPI_Group_incl(all, c->nnbr, ranks, &c->nbrs);
    MPI_Group_free(&all);
    return err;
}

/* Ask for transparent huge pages over the whole 2 MiB extents inside [p, p + n). */
static void os_advise_huge(void *p, size_t n)
{
#ifdef MADV_HUGEPAGE
    uintptr_t huge = (uintptr_t)1 << 21;
    uintptr_t lo = ((uintptr_t)p + huge - 1) & ~(huge - 1), hi = ((uintptr_t)p + n) & ~(huge - 1);
    if (hi > lo) madvise((void *)lo, (size_t)(hi - lo), MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}

/* Create the window with both fields and start the mode's synchronisation. Collective. */
static int os_begin(os_ctx *c)
{
    MPI_Aint bytes = (MPI_Aint)(2 * c->fsize * sizeof(double));
    MPI_Info info = MPI_INFO_NULL;
    int err, all, s, n;

    if (os_shared(c->mode)) {
        /* ranks sharing memory with this one; SHM and SHM_NC need all of cart there,
         * HYBRID takes whatever the node holds. With key 0 the node communicator keeps
         * cart's order */
        err = MPI_Comm_split_type(c->h.cart, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                                  &c->shm);
        if (err != MPI_SUCCESS) return err;
        if ((err = MPI_Comm_size(c->shm, &n)) != MPI_SUCCESS) return err;
        if (os_is_shm(c->mode)) {
            int size;
            if ((err = MPI_Comm_size(c->h.cart, &size)) != MPI_SUCCESS) return err;
            if ((err = halo_all_ok(c->h.cart, n == size, &all)) != MPI_SUCCESS) return err;
            if (!all) return MPILAB_OS_NOT_SHARED;
        }
        /* HYBRID: SHM_NC inside the node, as the paper's hybrid */
        if (c->mode == MPILAB_OS_SHM_NC || c->mode == MPILAB_OS_HYBRID) {
            if ((err = MPI_Info_create(&info)) != MPI_SUCCESS) return err;
            MPI_Info_set(info, "alloc_shared_noncontig", "true");
        }
        err = MPI_Win_allocate_shared(bytes, sizeof(double), info, c->shm, &c->base, &c->win);
    } else {
        /* fence and PSCW never lock: the library may skip lock bookkeeping */
        if (c->mode != MPILAB_OS_PUT_LOCK) {
            if ((err = MPI_Info_create(&info)) != MPI_SUCCESS) return err;
            MPI_Info_set(info, "no_locks", "true");
        }
        err = MPI_Win_allocate(bytes, sizeof(double), info, c->h.cart, &c->base, &c->win);
    }
    if (info != MPI_INFO_NULL) MPI_Info_free(&info);
    if (err != MPI_SUCCESS) return err;
    MPI_Win_set_errhandler(c->win, MPI_ERRORS_RETURN);
    /* The fields as the stencil kernel's (halo_array_alloc): transparent huge pages asked
     * for over the whole 2 MiB extents inside this rank's part, before it is first
     * written. Advice only: on one node Open MPI maps windows from a shared file in
     * /dev/shm, which Linux backs with huge pages only where shmem_enabled (in
     * /sys/kernel/mm/transparent_hugepage) is advise or always; elsewhere they stay on
     * 4 KiB pages (lecture 03 measures what that costs the update). */
    os_advise_huge(c->base, (size_t)bytes);
    /* window memory is not zeroed by MPI; the ghosts on the grid's border stay zero. */
    memset(c->base, 0, (size_t)bytes);
    c->cur = 0;
    os_fields(c);
    for (s = 0; s < 4; s++) c->nbase[s] = NULL;
    if (os_shared(c->mode)) {
        MPI_Group cart_group, node_group;
        if ((err = MPI_Comm_group(c->h.cart, &cart_group)) != MPI_SUCCESS) return err;
        if ((err = MPI_Comm_group(c->shm, &node_group)) != MPI_SUCCESS) {
            MPI_Group_free(&cart_group);
            return err;
        }
        for (s = 0; s < 4 && err == MPI_SUCCESS; s++) {
            MPI_Aint size;
            int unit, on_node = MPI_UNDEFINED;
            void *ptr = NULL;
            if (c->h.nbr[s] == MPI_PROC_NULL) continue;
            /* the neighbour's rank in the node communicator, MPI_UNDEFINED off the node */
            err = MPI_Group_translate_ranks(cart_group, 1, &c->h.nbr[s], node_group,
                                            &on_node);
            if (err != MPI_SUCCESS || on_node == MPI_UNDEFINED) continue;
            err = MPI_Win_shared_query(c->win, on_node, &size, &unit, &ptr);
            c->nbase[s] = (const double *)ptr;
        }
        MPI_Group_free(&node_group);
        MPI_Group_free(&cart_group);
        if (err != MPI_SUCCESS) return err;
    }
    switch (c->mode) {
    case MPILAB_OS_PUT_FENCE:
        /* opens the first epoch; nothing precedes it (and it orders the zeroing above
         * before every Put) */
        return MPI_Win_fence(MPI_MODE_NOPRECEDE, c->win);
    case MPILAB_OS_PUT_PSCW:
        if ((err = os_group(c)) != MPI_SUCCESS) return err;
        /* no Put may land before its target has zeroed its fields */
        return MPI_Barrier(c->h.cart);
    default:
        /* one passive-target epoch for the whole run: shared locks on every rank, which
         * nobody contends (no exclusive lock is ever taken: MPI_MODE_NOCHECK) */
        if ((err = MPI_Win_lock_all(MPI_MODE_NOCHECK, c->win)) != MPI_SUCCESS) return err;
        /* the zeroing above is done everywhere before the first Put or load */
        if ((err = MPI_Win_sync(c->win)) != MPI_SUCCESS) return err;
        return MPI_Barrier(c->h.cart);
    }
}

/* Close the mode's synchronisation and free everything (also after a failed os_begin). */
static int os_end(os_ctx *c, int opened)
{
    int err = MPI_SUCCESS, s;
    if (c->win != MPI_WIN_NULL) {
        if (opened) {
            if (c->mode == MPILAB_OS_PUT_FENCE)
                /* closes the last epoch: no Put since the last fence, none after */
                err = MPI_Win_fence(MPI_MODE_NOPRECEDE | MPI_MODE_NOSUCCEED, c->win);
            else if (c->mode != MPILAB_OS_PUT_PSCW) {
                /* shared windows: a neighbour may still copy from this rank's fields */
                if (os_shared(c->mode)) err = MPI_Barrier(c->h.cart);
                MPI_Win_unlock_all(c->win);
            }
        }
        MPI_Win_free(&c->win);
    }
    if (c->nbrs != MPI_GROUP_NULL && c->nbrs != MPI_GROUP_EMPTY) MPI_Group_free(&c->nbrs);
    if (c->shm != MPI_COMM_NULL) MPI_Comm_free(&c->shm);
    for (s = 0; s < 4; s++)
        if (c->tcol[s] != MPI_DATATYPE_NULL) MPI_Type_free(&c->tcol[s]);
    halo_free(&c->h);
    return err;
}

int mpilab_onesided_heat(MPI_Comm comm, int nx, int ny, int py, int px, int mode,
                         double energy, int steps, double *block, int warmup, int iters,
                         int reps, double *times, double *huge_share)
{
    static const mpilab_step_fn fns[] = {step_fence, step_pscw, step_lock, step_shm,
                                         step_shm, step_hybrid};
    os_ctx c;
    mpilab_step_fn step;
    int err, err2, s, k, opened = 0;
    unsigned csr;

    if (mode < MPILAB_OS_PUT_FENCE || mode > MPILAB_OS_HYBRID) return MPI_ERR_ARG;
    step = fns[mode];
    memset(&c, 0, sizeof(c));
    c.win = MPI_WIN_NULL;
    c.shm = MPI_COMM_NULL;
    c.nbrs = MPI_GROUP_NULL;
    for (s = 0; s < 4; s++) c.tcol[s] = MPI_DATATYPE_NULL;
    c.mode = mode;
    err = halo_init(&c.h, comm, nx, ny, py, px, MPILAB_HALO_SENDRECV, MPILAB_PACK_DATATYPE);
    if (err != MPI_SUCCESS) return err;
    csr = halo_ftz_on();
    c.fsize = (size_t)(c.h.rows + 2) * (size_t)c.h.ld;
    c.energy = energy;
    c.stream = heat_streams(c.fsize);
    c.nsrc = heat_sources(&c.h, nx, ny, c.src);
    if ((err = os_neighbours(&c, nx, ny)) != MPI_SUCCESS) goto done;
    if ((err = os_begin(&c)) != MPI_SUCCESS) goto done;
    opened = 1;
    /* the pages the library's window got, this rank's part (both fields), least over
     * the ranks */
    if (huge_share) {
        err = halo_least_huge_share(c.h.cart, c.base, 2 * c.fsize * sizeof(double), huge_share);
        if (err != MPI_SUCCESS) goto done;
    }
    for (s = 0; s < steps; s++)
        if ((err = step(&c)) != MPI_SUCCESS) goto done;
    if (block)
        for (k = 0; k < c.h.rows; k++)
            memcpy(block + (size_t)k * c.h.cols, c.old + (size_t)(k + 1) * c.h.ld + 1,
                   sizeof(double) * (size_t)c.h.cols);
    if (reps > 0)
        err = mpilab_time_steps(c.h.cart, step, &c, warmup, iters, reps, 1.0, times);
done:
    err2 = os_end(&c, opened);
    halo_ftz_off(csr);
    return err != MPI_SUCCESS ? err : err2;
}

int mpilab_shm_layout(MPI_Comm comm, MPI_Aint nbytes, int noncontig, MPI_Aint *addr,
                      MPI_Aint *size)
{
    MPI_Comm shm = MPI_COMM_NULL;
    MPI_Win win = MPI_WIN_NULL;
    MPI_Info info = MPI_INFO_NULL;
    void *base;
    int err, n, me, all, r, q;

    if ((err = MPI_Comm_size(comm, &n)) != MPI_SUCCESS) return err;
    if ((err = MPI_Comm_rank(comm, &me)) != MPI_SUCCESS) return err;
    /* key 0: the node communicator keeps comm's order, so its ranks are comm's */
    err = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shm);
    if (err != MPI_SUCCESS) return err;
    if ((err = MPI_Comm_size(shm, &r)) != MPI_SUCCESS) goto done;
    if ((err = halo_all_ok(comm, r == n, &all)) != MPI_SUCCESS) goto done;
    if (!all) { err = MPILAB_OS_NOT_SHARED; goto done; }
    if (noncontig) {
        if ((err = MPI_Info_create(&info)) != MPI_SUCCESS) goto done;
        MPI_Info_set(info, "alloc_shared_noncontig", "true");
    }
    err = MPI_Win_allocate_shared(nbytes, 1, info, shm, &base, &win);
    if (info != MPI_INFO_NULL) MPI_Info_free(&info);
    if (err != MPI_SUCCESS) goto done;
    if (me == 0)
        for (r = 0; r < n; r++) {
            int unit;
            void *p = NULL;
            if ((err = MPI_Win_shared_query(win, r, &size[r], &unit, &p)) != MPI_SUCCESS)
                break;
            addr[r] = (MPI_Aint)p;
        }
    /* rank 0's error, if any, travels with the answer so that every rank returns it */
    q = err;
    if ((err = MPI_Bcast(&q, 1, MPI_INT, 0, comm)) == MPI_SUCCESS) err = q;
    if (err == MPI_SUCCESS) err = MPI_Bcast(addr, n, MPI_AINT, 0, comm);
    if (err == MPI_SUCCESS) err = MPI_Bcast(size, n, MPI_AINT, 0, comm);
done:
    if (win != MPI_WIN_NULL) MPI_Win_free(&win);
    if (shm != MPI_COMM_NULL) MPI_Comm_free(&shm);
    return err;
}
