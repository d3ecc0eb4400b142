/*
 * mpilab_halo.h - ghost-cell (halo) exchange on a 2D Cartesian process grid, shared by the
 * stencil and wave kernels (static inline, so each kernel stays one C file).
 *
 * Purpose: fill the one-cell ghost frame of fields of shape (rows + 2) x (cols + 2)
 * (row-major, leading dimension ld = cols + 2, interior at [1..rows][1..cols]) from the
 * neighbouring blocks, in four ways the lecture compares:
 *   BLOCKING    - MPI_Send / MPI_Recv; along each axis ranks with an even coordinate send
 *                 first and odd ones receive first, so the chain cannot deadlock at any
 *                 message size (no reliance on eager buffering);
 *   SENDRECV    - one MPI_Sendrecv per transfer;
 *   NONBLOCKING - MPI_Irecv + MPI_Isend for every transfer, MPI_Waitall, then compute;
 *   OVERLAP     - the same posts, compute the points that need no ghost, MPI_Waitall,
 *                 compute the boundary ring.
 * Column ghosts travel either as an MPI vector datatype (rows doubles, stride ld) straight
 * from and into the field (PACK_DATATYPE), or packed by hand into contiguous buffers
 * (PACK_MANUAL). Row ghosts are contiguous and always sent in place.
 *
 * A transfer (halo_xfer) names a field and the side s whose ghost it fills: the rank
 * receives that ghost from its neighbour on side s and sends its own edge on the
 * opposite side to the opposite neighbour. Borders of the global grid have
 * MPI_PROC_NULL neighbours, so their ghosts keep whatever they hold (zero here).
 *
 *   comm, dims, coords - communicator (any size) and process grid (py, px); rank r at
 *                        (r / px, r % px) because the Cartesian communicator is built
 *                        with reorder = 0
 *   rows, cols, y0, x0 - this rank's block and its offset in the global grid
 */
#ifndef MPILAB_HALO_H
#define MPILAB_HALO_H

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <mpi.h>

enum { MPILAB_HALO_BLOCKING = 0, MPILAB_HALO_SENDRECV = 1, MPILAB_HALO_NONBLOCKING = 2,
       MPILAB_HALO_OVERLAP = 3 };
enum { MPILAB_PACK_DATATYPE = 0, MPILAB_PACK_MANUAL = 1 };
/* sides: W = x - 1, E = x + 1, N = y - 1, S = y + 1 */
enum { HALO_W = 0, HALO_E = 1, HALO_N = 2, HALO_S = 3 };
/* phases of the timeline, in this order, each as (start, end) */
enum { MPILAB_PHASE_EXCHANGE = 0, MPILAB_PHASE_INTERIOR = 1, MPILAB_PHASE_WAIT = 2,
       MPILAB_PHASE_BOUNDARY = 3, MPILAB_NPHASES = 4 };

#define HALO_MAXX 8

/* Compute loops are compiled twice, for AVX2 and for the baseline, and the loader picks
 * the one the CPU runs (GNU ifunc): the same simple loop then moves 4 doubles per
 * instruction instead of 2. AVX2 alone does not enable FMA, so results keep their bits. */
#if defined(__x86_64__) && defined(__linux__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define MPILAB_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef MPILAB_VECTOR_CLONES
#define MPILAB_VECTOR_CLONES
#endif

/* Flush denormals to zero while a kernel runs: a heat or wave front far from its source
 * carries values below 1e-308 whose arithmetic is ~100x slower on x86 and would make the
 * step time depend on how far the front has travelled. Differences stay below 1e-300. */
#if defined(__x86_64__) || defined(__SSE__)
#include <xmmintrin.h>
static inline unsigned halo_ftz_on(void)
{
    unsigned old = _mm_getcsr();
    _mm_setcsr(old | 0x8040); /* FTZ | DAZ */
    return old;
}
static inline void halo_ftz_off(unsigned old) { _mm_setcsr(old); }
#else
static inline unsigned halo_ftz_on(void) { return 0; }
static inline void halo_ftz_off(unsigned old) { (void)old; }
#endif

typedef struct {
    double *field;
    int side;
} halo_xfer;

typedef struct {
    MPI_Comm cart;
    int dims[2], coords[2], nbr[4];
    int rows, cols, y0, x0, ld;
    int mode, pack;
    MPI_Datatype col;
    double *sbuf, *rbuf;         /* manual packing: HALO_MAXX columns of rows doubles */
    MPI_Request req[2 * HALO_MAXX];
    int nreq;
} mpilab_halo;

/* start and count of part `c` of n points split over `parts` (as mpilab.halo.split) */
static inline void halo_split(int n, int parts, int c, int *start, int *count)
{
    int base = n / parts, extra = n % parts;
    *start = c * base + (c < extra ? c : extra);
    *count = base + (c < extra);
}

/* n zeroed doubles, to be released with free(). From 4 MiB up the array is 2 MiB aligned
 * and advised to use transparent huge pages, as mpilab.timing.message_buffer lays out
 * the arrays it is compared with: on 4 KiB pages the hardware prefetcher stops at every
 * page boundary and a 4096^2 sweep ran ~10 % slower. Every page is written here, so the
 * first timed step does not pay for faulting the array in. */
static inline double *halo_array_alloc(size_t n)
{
    size_t nbytes = (n ? n : 1) * sizeof(double), huge = (size_t)1 << 21;
    void *p = NULL;
    if (nbytes < ((size_t)4 << 20)) {
        p = malloc(nbytes);
    } else {
        nbytes = (nbytes + huge - 1) / huge * huge;
        if (posix_memalign(&p, huge, nbytes) != 0) p = NULL;
#ifdef MADV_HUGEPAGE
        if (p) madvise(p, nbytes, MADV_HUGEPAGE); /* advice only: 4 KiB pages if refused */
#endif
    }
    if (p) memset(p, 0, nbytes);
    return (double *)p;
}

static inline double *halo_field_alloc(const mpilab_halo *h)
{
    return halo_array_alloc((size_t)(h->rows + 2) * (size_t)h->ld);
}

/* Collective: every rank learns whether all ranks succeeded (so none is left waiting). */
static inline int halo_all_ok(MPI_Comm comm, int ok, int *all)
{
    return MPI_Allreduce(&ok, all, 1, MPI_INT, MPI_LAND, comm);
}

static inline void halo_free(mpilab_halo *h)
{
    if (h->col != MPI_DATATYPE_NULL) MPI_Type_free(&h->col);
    if (h->cart != MPI_COMM_NULL) MPI_Comm_free(&h->cart);
    free(h->sbuf);
    free(h->rbuf);
    h->sbuf = h->rbuf = NULL;
}

/* Collective over comm. On error everything allocated is released. */
static inline int halo_init(mpilab_halo *h, MPI_Comm comm, int nx, int ny, int py, int px,
                            int mode, int pack)
{
    int periods[2] = {0, 0}, err, ok, all;
    memset(h, 0, sizeof(*h));
    h->cart = MPI_COMM_NULL;
    h->col = MPI_DATATYPE_NULL;
    h->dims[0] = py;
    h->dims[1] = px;
    h->mode = mode;
    h->pack = pack;
    if ((err = MPI_Cart_create(comm, 2, h->dims, periods, 0, &h->cart)) != MPI_SUCCESS)
        return err;
    {
        int me;
        if ((err = MPI_Comm_rank(h->cart, &me)) != MPI_SUCCESS) goto fail;
        if ((err = MPI_Cart_coords(h->cart, me, 2, h->coords)) != MPI_SUCCESS) goto fail;
    }
    if ((err = MPI_Cart_shift(h->cart, 1, 1, &h->nbr[HALO_W], &h->nbr[HALO_E])) != MPI_SUCCESS)
        goto fail;
    if ((err = MPI_Cart_shift(h->cart, 0, 1, &h->nbr[HALO_N], &h->nbr[HALO_S])) != MPI_SUCCESS)
        goto fail;
    halo_split(ny, py, h->coords[0], &h->y0, &h->rows);
    halo_split(nx, px, h->coords[1], &h->x0, &h->cols);
    h->ld = h->cols + 2;
    if ((err = MPI_Type_vector(h->rows, 1, h->ld, MPI_DOUBLE, &h->col)) != MPI_SUCCESS)
        goto fail;
    if ((err = MPI_Type_commit(&h->col)) != MPI_SUCCESS) goto fail;
    h->sbuf = (double *)malloc(sizeof(double) * HALO_MAXX * (size_t)h->rows);
    h->rbuf = (double *)malloc(sizeof(double) * HALO_MAXX * (size_t)h->rows);
    ok = h->sbuf != NULL && h->rbuf != NULL;
    if ((err = halo_all_ok(h->cart, ok, &all)) != MPI_SUCCESS) goto fail;
    if (!all) { err = MPI_ERR_NO_MEM; goto fail; }
    return MPI_SUCCESS;
fail:
    halo_free(h);
    return err;
}

static inline int halo_opp(int side) { return side ^ 1; }
static inline int halo_is_col(int side) { return side == HALO_W || side == HALO_E; }

/* Address of the ghost line on `side` (receive) or of the edge line next to it (send). */
static inline double *halo_ghost(const mpilab_halo *h, double *a, int side)
{
    switch (side) {
    case HALO_W: return a + h->ld;
    case HALO_E: return a + h->ld + h->cols + 1;
    case HALO_N: return a + 1;
    default:     return a + (size_t)(h->rows + 1) * h->ld + 1;
    }
}

static inline double *halo_edge(const mpilab_halo *h, double *a, int side)
{
    switch (side) {
    case HALO_W: return a + h->ld + 1;
    case HALO_E: return a + h->ld + h->cols;
    case HALO_N: return a + h->ld + 1;
    default:     return a + (size_t)h->rows * h->ld + 1;
    }
}

static inline void halo_pack_col(const mpilab_halo *h, double *restrict buf,
                                 const double *restrict src)
{
    int r;
    for (r = 0; r < h->rows; r++) buf[r] = src[(size_t)r * h->ld];
}

static inline void halo_unpack_col(const mpilab_halo *h, double *restrict dst,
                                   const double *restrict buf)
{
    int r;
    for (r = 0; r < h->rows; r++) dst[(size_t)r * h->ld] = buf[r];
}

/* What one transfer sends and receives: buffer, count, datatype. */
typedef struct {
    double *sptr, *rptr;
    int count, dest, src;
    MPI_Datatype type;
} halo_msg;

static inline halo_msg halo_message(mpilab_halo *h, const halo_xfer *x, int k)
{
    halo_msg m;
    int s = x->side;
    m.src = h->nbr[s];
    m.dest = h->nbr[halo_opp(s)];
    if (!halo_is_col(s)) {
        m.sptr = halo_edge(h, x->field, halo_opp(s));
        m.rptr = halo_ghost(h, x->field, s);
        m.count = h->cols;
        m.type = MPI_DOUBLE;
    } else if (h->pack == MPILAB_PACK_DATATYPE) {
        m.sptr = halo_edge(h, x->field, halo_opp(s));
        m.rptr = halo_ghost(h, x->field, s);
        m.count = 1;
        m.type = h->col;
    } else {
        m.sptr = h->sbuf + (size_t)k * h->rows;
        m.rptr = h->rbuf + (size_t)k * h->rows;
        m.count = h->rows;
        m.type = MPI_DOUBLE;
    }
    return m;
}

static inline void halo_pack_all(mpilab_halo *h, const halo_xfer *x, int n)
{
    int k;
    if (h->pack != MPILAB_PACK_MANUAL) return;
    for (k = 0; k < n; k++)
        if (halo_is_col(x[k].side) && h->nbr[halo_opp(x[k].side)] != MPI_PROC_NULL)
            halo_pack_col(h, h->sbuf + (size_t)k * h->rows,
                          halo_edge(h, x[k].field, halo_opp(x[k].side)));
}

static inline void halo_unpack_all(mpilab_halo *h, const halo_xfer *x, int n)
{
    int k;
    if (h->pack != MPILAB_PACK_MANUAL) return;
    for (k = 0; k < n; k++)
        if (halo_is_col(x[k].side) && h->nbr[x[k].side] != MPI_PROC_NULL)
            halo_unpack_col(h, halo_ghost(h, x[k].field, x[k].side),
                            h->rbuf + (size_t)k * h->rows);
}

/* Post every receive, then every send (tag = transfer index). */
static inline int halo_start(mpilab_halo *h, const halo_xfer *x, int n)
{
    int k, err;
    halo_pack_all(h, x, n);
    h->nreq = 0;
    for (k = 0; k < n; k++) {
        halo_msg m = halo_message(h, &x[k], k);
        err = MPI_Irecv(m.rptr, m.count, m.type, m.src, k, h->cart, &h->req[h->nreq++]);
        if (err != MPI_SUCCESS) return err;
    }
    for (k = 0; k < n; k++) {
        halo_msg m = halo_message(h, &x[k], k);
        err = MPI_Isend(m.sptr, m.count, m.type, m.dest, k, h->cart, &h->req[h->nreq++]);
        if (err != MPI_SUCCESS) return err;
    }
    return MPI_SUCCESS;
}

static inline int halo_finish(mpilab_halo *h, const halo_xfer *x, int n)
{
    int err = MPI_Waitall(h->nreq, h->req, MPI_STATUSES_IGNORE);
    h->nreq = 0;
    if (err == MPI_SUCCESS) halo_unpack_all(h, x, n);
    return err;
}

/* Blocking or Sendrecv exchange, one transfer after the other. */
static inline int halo_sync(mpilab_halo *h, const halo_xfer *x, int n)
{
    int k, err = MPI_SUCCESS;
    halo_pack_all(h, x, n);
    for (k = 0; k < n && err == MPI_SUCCESS; k++) {
        halo_msg m = halo_message(h, &x[k], k);
        if (h->mode == MPILAB_HALO_SENDRECV) {
            err = MPI_Sendrecv(m.sptr, m.count, m.type, m.dest, k, m.rptr, m.count, m.type,
                               m.src, k, h->cart, MPI_STATUS_IGNORE);
        } else {
            int coord = halo_is_col(x[k].side) ? h->coords[1] : h->coords[0];
            if (coord % 2 == 0) {
                err = MPI_Send(m.sptr, m.count, m.type, m.dest, k, h->cart);
                if (err == MPI_SUCCESS)
                    err = MPI_Recv(m.rptr, m.count, m.type, m.src, k, h->cart,
                                   MPI_STATUS_IGNORE);
            } else {
                err = MPI_Recv(m.rptr, m.count, m.type, m.src, k, h->cart,
                               MPI_STATUS_IGNORE);
                if (err == MPI_SUCCESS)
                    err = MPI_Send(m.sptr, m.count, m.type, m.dest, k, h->cart);
            }
        }
    }
    if (err == MPI_SUCCESS) halo_unpack_all(h, x, n);
    return err;
}

typedef void (*halo_compute_fn)(void *ctx);

static inline void halo_stamp(double *tl, int phase, double a, double b)
{
    if (tl) {
        tl[2 * phase] = a;
        tl[2 * phase + 1] = b;
    }
}

/*
 * One exchange followed by the update that needs it, in the halo's mode:
 * `whole` updates every point; in OVERLAP mode `interior` updates the points that need
 * no ghost while messages fly and `ring` the rest after MPI_Waitall. If tl is not NULL
 * it receives the (start, end) of each phase, MPI_Wtime() - t0, in the order of the
 * MPILAB_PHASE_* enum; a phase a mode does not have is empty (start == end).
 */
static inline int halo_round(mpilab_halo *h, const halo_xfer *x, int n, halo_compute_fn whole,
                             halo_compute_fn interior, halo_compute_fn ring, void *ctx,
                             double *tl, double t0)
{
    int err;
    double a = 0, b = 0, c = 0, d = 0, e = 0;
    if (tl) a = MPI_Wtime() - t0;
    switch (h->mode) {
    case MPILAB_HALO_BLOCKING:
    case MPILAB_HALO_SENDRECV:
        err = halo_sync(h, x, n);
        if (tl) b = MPI_Wtime() - t0;
        whole(ctx);
        if (tl) {
            c = MPI_Wtime() - t0;
            halo_stamp(tl, MPILAB_PHASE_EXCHANGE, a, b);
            halo_stamp(tl, MPILAB_PHASE_WAIT, b, b);
            halo_stamp(tl, MPILAB_PHASE_INTERIOR, b, c);
            halo_stamp(tl, MPILAB_PHASE_BOUNDARY, c, c);
        }
        return err;
    case MPILAB_HALO_NONBLOCKING:
        if ((err = halo_start(h, x, n)) != MPI_SUCCESS) return err;
        if (tl) b = MPI_Wtime() - t0;
        if ((err = halo_finish(h, x, n)) != MPI_SUCCESS) return err;
        if (tl) c = MPI_Wtime() - t0;
        whole(ctx);
        if (tl) {
            d = MPI_Wtime() - t0;
            halo_stamp(tl, MPILAB_PHASE_EXCHANGE, a, b);
            halo_stamp(tl, MPILAB_PHASE_WAIT, b, c);
            halo_stamp(tl, MPILAB_PHASE_INTERIOR, c, d);
            halo_stamp(tl, MPILAB_PHASE_BOUNDARY, d, d);
        }
        return MPI_SUCCESS;
    default:
        if ((err = halo_start(h, x, n)) != MPI_SUCCESS) return err;
        if (tl) b = MPI_Wtime() - t0;
        interior(ctx);
        if (tl) c = MPI_Wtime() - t0;
        if ((err = halo_finish(h, x, n)) != MPI_SUCCESS) return err;
        if (tl) d = MPI_Wtime() - t0;
        ring(ctx);
        if (tl) {
            e = MPI_Wtime() - t0;
            halo_stamp(tl, MPILAB_PHASE_EXCHANGE, a, b);
            halo_stamp(tl, MPILAB_PHASE_INTERIOR, b, c);
            halo_stamp(tl, MPILAB_PHASE_WAIT, c, d);
            halo_stamp(tl, MPILAB_PHASE_BOUNDARY, d, e);
        }
        return MPI_SUCCESS;
    }
}

#endif
