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
 *   OVERLAP_TEST - OVERLAP with MPI_Testall between HALO_TEST_PARTS equal parts of the
 *                 points that need no ghost: the library gets a chance to progress (match
 *                 a rendezvous offer, copy, push the next fragment) while the rank computes;
 *   PERSISTENT  - OVERLAP with persistent requests (MPI_Recv_init / MPI_Send_init once per
 *                 set of fields, MPI_Startall every step): the arguments are checked and
 *                 the requests built once, not every step;
 *   NEIGHBOR    - one MPI_Neighbor_alltoallw on the Cartesian communicator: each of the
 *                 four neighbours (N, S, W, E: the standard's order, dimension by
 *                 dimension, -1 then +1) gets one message, several fields' lines combined
 *                 in one struct datatype of absolute addresses (MPI_BOTTOM); then compute.
 * Column ghosts travel either as an MPI vector datatype (rows doubles, stride ld) straight
 * from and into the field (PACK_DATATYPE), or packed by hand into contiguous buffers
 * (PACK_MANUAL); row ghosts are contiguous and sent in place. PACK_SUBARRAY describes
 * every line, rows and columns, as MPI_Type_create_subarray of the whole field (its
 * sizes, the line's shape and its start: the offset is in the type, the buffer is the
 * field itself), eight types made once: each side's edge and ghost.
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

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <mpi.h>

enum { MPILAB_HALO_BLOCKING = 0, MPILAB_HALO_SENDRECV = 1, MPILAB_HALO_NONBLOCKING = 2,
       MPILAB_HALO_OVERLAP = 3, MPILAB_HALO_OVERLAP_TEST = 4, MPILAB_HALO_PERSISTENT = 5,
       MPILAB_HALO_NEIGHBOR = 6 };
enum { MPILAB_PACK_DATATYPE = 0, MPILAB_PACK_MANUAL = 1, MPILAB_PACK_SUBARRAY = 2 };
/* sides: W = x - 1, E = x + 1, N = y - 1, S = y + 1 */
enum { HALO_W = 0, HALO_E = 1, HALO_N = 2, HALO_S = 3 };
/* phases of the timeline, in this order, each as (start, end); PROGRESS is the total
 * time of OVERLAP_TEST's MPI_Testall calls, which are spread through the interior: it is
 * stamped as (interior start, interior start + total), inside the interior's span */
enum { MPILAB_PHASE_EXCHANGE = 0, MPILAB_PHASE_INTERIOR = 1, MPILAB_PHASE_WAIT = 2,
       MPILAB_PHASE_BOUNDARY = 3, MPILAB_PHASE_PROGRESS = 4, MPILAB_NPHASES = 5 };

#define HALO_MAXX 8
/* OVERLAP_TEST: the interior is computed in this many parts, MPI_Testall after each */
#define HALO_TEST_PARTS 16
/* PERSISTENT and NEIGHBOR: requests or datatypes for this many sets of fields */
#define HALO_MAXPLANS 4

/* Compute loops are compiled three times, for AVX-512, AVX2 and the baseline, and the
 * loader picks the one the CPU runs (GNU ifunc): the same simple loop then moves 8 or 4
 * doubles per instruction instead of 2. AVX-512 (which brings FMA) matters on Zen 4 even
 * though it splits 512-bit operations in two: the streaming sweep has fewer instructions
 * to issue while it waits for memory (0.91-0.95x a copy's speed in a standalone loop
 * with AVX2, 1.02-1.06x with AVX-512, 2-core EPYC VM). No multiply and add may be fused
 * into an FMA: every build of these kernels passes -ffp-contract=off (setup.py, the
 * SimGrid build in mpilab/sim/smpi.py), since a fused one rounds once instead of twice and
 * the fields would no longer equal NumPy's serial reference bit for bit. (Not as an
 * optimize attribute here: a function's own optimize attribute, as store_copy's, would
 * replace it.) */
#if defined(__x86_64__) && defined(__linux__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define MPILAB_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
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

/* What a set of transfers needs, built once (PERSISTENT: its requests; NEIGHBOR: the
 * arguments of MPI_Neighbor_alltoallw, slot j = the standard's j-th neighbour). */
typedef struct {
    int n, nreq;
    double *fields[HALO_MAXX];
    int sides[HALO_MAXX];
    MPI_Request req[2 * HALO_MAXX];
    int scount[4], rcount[4];
    MPI_Aint sdispl[4], rdispl[4];
    MPI_Datatype stype[4], rtype[4];
    int sowned[4], rowned[4];      /* struct types made here, freed with the plan */
} halo_plan;

typedef struct {
    MPI_Comm cart;
    int dims[2], coords[2], nbr[4];
    int rows, cols, y0, x0, ld;
    int mode, pack;
    int small_pages;             /* halo_field_alloc: 4 KiB pages, not huge ones */
    MPI_Datatype col;
    MPI_Datatype sub[4][2];      /* PACK_SUBARRAY: [side][0 = edge, 1 = ghost] */
    double *sbuf, *rbuf;         /* manual packing: HALO_MAXX columns of rows doubles */
    MPI_Request req[2 * HALO_MAXX];
    int nreq;
    halo_plan plans[HALO_MAXPLANS];
    int nplans;
    MPI_Request *active;         /* the requests halo_finish waits for */
} mpilab_halo;

/*
 * A fixed compute model for the simulated clusters (mpilab.sim builds mpilab-halo with
 * smpicc and -DMPILAB_SIM, and runs it with smpi/simulate-computation:no, so the host time
 * of the loops is not charged): each update in halo_round charges mpilab_sim_point_s
 * seconds per point it updates to the simulated clock with SMPI's smpi_execute_benched
 * (duration x the simulated host's speed in flops, smpi_bench.cpp). Every mode then pays
 * the same computing per step and differs only in communication. 0 (the default) charges
 * nothing. Outside MPILAB_SIM this compiles to nothing.
 */
#ifdef MPILAB_SIM
extern double mpilab_sim_point_s;   /* defined in halo_main.c */
#define HALO_CHARGE(points) \
    do { if (mpilab_sim_point_s > 0) smpi_execute_benched(mpilab_sim_point_s * (double)(points)); } while (0)
#else
#define HALO_CHARGE(points) ((void)0)
#endif

/* start and count of part `c` of n points split over `parts` (as mpilab.halo.split) */
static inline void halo_split(int n, int parts, int c, int *start, int *count)
{
    int base = n / parts, extra = n % parts;
    *start = c * base + (c < extra ? c : extra);
    *count = base + (c < extra);
}

/* n zeroed doubles, to be released with halo_array_free(), on one kind of page at every
 * size. With `huge`: 2 MiB aligned and advised to use transparent huge pages over whole
 * 2 MiB extents (the last one filled out), as mpilab.buffers.message_buffer lays out the arrays it is compared with
 * (on 4 KiB pages the hardware prefetcher stops at every page boundary and a 4096^2 sweep
 * ran ~10 % slower; one page kind at every size, so a sweep over grid sizes changes the
 * size only). Without: advised never to use them (MADV_NOHUGEPAGE), as the fields in an
 * MPI shared window get where /dev/shm takes no huge pages (lecture 03 compares the two
 * kinds of field on the same pages). Each array is a fresh anonymous mapping, never
 * memory malloc had before: memory reused from the heap keeps the pages it was first
 * given, so an array on huge pages asked for after arrays on 4 KiB pages were freed got
 * 4 KiB pages (measured: posix_memalign did that). Every byte is written here, so the
 * first timed step does not pay for faulting the array in. The mapping's address and
 * length sit in the 16 bytes before the array. */
static inline double *halo_array_alloc_on(size_t n, int huge)
{
    size_t page = 4096, align = huge ? (size_t)1 << 21 : page;
    size_t nbytes = ((n ? n : 1) * sizeof(double) + align - 1) / align * align;
    size_t len = nbytes + page + align;   /* a page for the header, slack to align */
    char *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uintptr_t p;

    if (base == MAP_FAILED) return NULL;
    p = ((uintptr_t)base + page + align - 1) & ~(uintptr_t)(align - 1);
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
    /* before any byte is written; advice only: 4 KiB pages if huge ones are refused */
    madvise((void *)p, nbytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#endif
    ((void **)p)[-2] = base;
    ((size_t *)p)[-1] = len;
    memset((void *)p, 0, nbytes);
    return (double *)p;
}

/* Release an array of halo_array_alloc_on (NULL is ignored). */
static inline void halo_array_free(double *a)
{
    if (a) munmap(((void **)a)[-2], ((size_t *)a)[-1]);
}

static inline double *halo_array_alloc(size_t n) { return halo_array_alloc_on(n, 1); }

static inline double *halo_field_alloc(const mpilab_halo *h)
{
    return halo_array_alloc_on((size_t)(h->rows + 2) * (size_t)h->ld, !h->small_pages);
}

/* The share of the memory mappings holding [p, p + n) that Linux backs with transparent
 * huge pages, read from /proc/self/smaps as mpilab.buffers.huge_page_share reads it:
 * (AnonHugePages + ShmemPmdMapped + FilePmdMapped) / Rss over the mappings it overlaps
 * (ShmemPmdMapped counts a shared window's file in /dev/shm). -1 where the file cannot be
 * read or those mappings hold nothing resident. */
static inline double halo_huge_share(const void *p, size_t n)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[4096], key[64];
    unsigned long lo, hi, lo_p = (unsigned long)(uintptr_t)p, hi_p = lo_p + (n ? n : 1);
    unsigned long long rss = 0, huge = 0, kb;
    int inside = 0, whole = 1;   /* whole: this read starts a line */

    if (!f) return -1.0;
    while (fgets(line, sizeof line, f)) {
        int starts = whole;
        whole = strchr(line, '\n') != NULL;
        if (!starts) continue;   /* the rest of a line longer than the buffer */
        if (sscanf(line, "%63s", key) != 1) continue;
        if (key[strlen(key) - 1] != ':') {   /* a mapping's first line: "lo-hi perms ..." */
            inside = sscanf(key, "%lx-%lx", &lo, &hi) == 2 && lo < hi_p && lo_p < hi;
        } else if (inside && sscanf(line, "%63s %llu", key, &kb) == 2) {
            if (strcmp(key, "Rss:") == 0) rss += kb;
            else if (strcmp(key, "AnonHugePages:") == 0 || strcmp(key, "ShmemPmdMapped:") == 0
                     || strcmp(key, "FilePmdMapped:") == 0) huge += kb;
        }
    }
    fclose(f);
    if (!rss) return -1.0;
    return huge >= rss ? 1.0 : (double)huge / (double)rss;
}

/* The least share of huge pages under [p, p + n) over the ranks of comm (collective);
 * -1 where any rank could not read it. */
static inline int halo_least_huge_share(MPI_Comm comm, const void *p, size_t n, double *out)
{
    double mine = halo_huge_share(p, n);
    return MPI_Allreduce(&mine, out, 1, MPI_DOUBLE, MPI_MIN, comm);
}

/* Collective: every rank learns whether all ranks succeeded (so none is left waiting). */
static inline int halo_all_ok(MPI_Comm comm, int ok, int *all)
{
    return MPI_Allreduce(&ok, all, 1, MPI_INT, MPI_LAND, comm);
}

static inline void halo_free(mpilab_halo *h)
{
    int p, j;
    for (p = 0; p < h->nplans; p++) {
        halo_plan *pl = &h->plans[p];
        for (j = 0; j < pl->nreq; j++)
            if (pl->req[j] != MPI_REQUEST_NULL) MPI_Request_free(&pl->req[j]);
        for (j = 0; j < 4; j++) {
            if (pl->sowned[j]) MPI_Type_free(&pl->stype[j]);
            if (pl->rowned[j]) MPI_Type_free(&pl->rtype[j]);
        }
    }
    h->nplans = 0;
    for (p = 0; p < 4; p++)
        for (j = 0; j < 2; j++)
            if (h->sub[p][j] != MPI_DATATYPE_NULL) MPI_Type_free(&h->sub[p][j]);
    if (h->col != MPI_DATATYPE_NULL) MPI_Type_free(&h->col);
    if (h->cart != MPI_COMM_NULL) MPI_Comm_free(&h->cart);
    free(h->sbuf);
    free(h->rbuf);
    h->sbuf = h->rbuf = NULL;
}

static inline int halo_opp(int side) { return side ^ 1; }
static inline int halo_is_col(int side) { return side == HALO_W || side == HALO_E; }

/* Collective over comm. On error everything allocated is released. */
static inline int halo_init(mpilab_halo *h, MPI_Comm comm, int nx, int ny, int py, int px,
                            int mode, int pack)
{
    int periods[2] = {0, 0}, err, ok, all;
    memset(h, 0, sizeof(*h));
    h->cart = MPI_COMM_NULL;
    h->col = MPI_DATATYPE_NULL;
    {
        int a, b;
        for (a = 0; a < 4; a++)
            for (b = 0; b < 2; b++) h->sub[a][b] = MPI_DATATYPE_NULL;
    }
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
    if (pack == MPILAB_PACK_SUBARRAY) {
        /* the field is (rows + 2) x ld; for each side its edge (the block's outer line)
         * and its ghost (the line beyond it), as (start row, start column) */
        int sizes[2] = {h->rows + 2, h->ld}, row[2] = {1, h->cols}, col[2] = {h->rows, 1};
        int at[4][2][2] = {
            {{1, 1}, {1, 0}},                       /* W: first column, ghost column 0 */
            {{1, h->cols}, {1, h->cols + 1}},       /* E */
            {{1, 1}, {0, 1}},                       /* N: first row, ghost row 0 */
            {{h->rows, 1}, {h->rows + 1, 1}}};      /* S */
        int side, which;
        for (side = 0; side < 4; side++)
            for (which = 0; which < 2; which++) {
                err = MPI_Type_create_subarray(2, sizes, halo_is_col(side) ? col : row,
                                               at[side][which], MPI_ORDER_C, MPI_DOUBLE,
                                               &h->sub[side][which]);
                if (err == MPI_SUCCESS) err = MPI_Type_commit(&h->sub[side][which]);
                if (err != MPI_SUCCESS) goto fail;
            }
    }
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

/* What one transfer sends and receives: buffers, count, datatypes (type sends, rtype
 * receives: they differ only for subarrays, whose offset is in the type). */
typedef struct {
    double *sptr, *rptr;
    int count, dest, src;
    MPI_Datatype type, rtype;
} halo_msg;

static inline halo_msg halo_message(mpilab_halo *h, const halo_xfer *x, int k)
{
    halo_msg m;
    int s = x->side;
    m.src = h->nbr[s];
    m.dest = h->nbr[halo_opp(s)];
    if (h->pack == MPILAB_PACK_SUBARRAY) {
        m.sptr = m.rptr = x->field; /* the line's place is in its subarray type */
        m.count = 1;
        m.type = h->sub[halo_opp(s)][0];
        m.rtype = h->sub[s][1];
        return m;
    }
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
    m.rtype = m.type;
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
    h->active = h->req;
    h->nreq = 0;
    for (k = 0; k < n; k++) {
        halo_msg m = halo_message(h, &x[k], k);
        err = MPI_Irecv(m.rptr, m.count, m.rtype, m.src, k, h->cart, &h->req[h->nreq++]);
        if (err != MPI_SUCCESS) return err;
    }
    for (k = 0; k < n; k++) {
        halo_msg m = halo_message(h, &x[k], k);
        err = MPI_Isend(m.sptr, m.count, m.type, m.dest, k, h->cart, &h->req[h->nreq++]);
        if (err != MPI_SUCCESS) return err;
    }
    return MPI_SUCCESS;
}

/* The neighbour slot (N, S, W, E: MPI's order for a 2D Cartesian topology) of a side. */
static inline int halo_slot(int side)
{
    switch (side) {
    case HALO_N: return 0;
    case HALO_S: return 1;
    case HALO_W: return 2;
    default:     return 3;
    }
}

/* One slot's message of a NEIGHBOR plan: nothing, one line (count, type at an absolute
 * address), or several lines combined in a struct datatype made here (owned). */
static inline int halo_slot_type(int nb, const int *counts, const MPI_Aint *addrs,
                                 const MPI_Datatype *types, int *count, MPI_Aint *displ,
                                 MPI_Datatype *type, int *owned)
{
    int err;
    *owned = 0;
    if (nb == 0) {
        *count = 0;
        *displ = 0;
        *type = MPI_DOUBLE;
        return MPI_SUCCESS;
    }
    if (nb == 1) {
        *count = counts[0];
        *displ = addrs[0];
        *type = types[0];
        return MPI_SUCCESS;
    }
    if ((err = MPI_Type_create_struct(nb, counts, addrs, types, type)) != MPI_SUCCESS)
        return err;
    if ((err = MPI_Type_commit(type)) != MPI_SUCCESS) {
        MPI_Type_free(type);
        return err;
    }
    *owned = 1;
    *count = 1;
    *displ = 0;
    return MPI_SUCCESS;
}

/* The plan of this set of transfers (same fields, same sides), built the first time. */
static inline int halo_plan_for(mpilab_halo *h, const halo_xfer *x, int n, halo_plan **out)
{
    halo_plan *pl;
    int p, k, j, err;
    for (p = 0; p < h->nplans; p++) {
        pl = &h->plans[p];
        if (pl->n != n) continue;
        for (k = 0; k < n; k++)
            if (pl->fields[k] != x[k].field || pl->sides[k] != x[k].side) break;
        if (k == n) {
            *out = pl;
            return MPI_SUCCESS;
        }
    }
    if (h->nplans == HALO_MAXPLANS || n > HALO_MAXX) return MPI_ERR_OTHER;
    pl = &h->plans[h->nplans];
    memset(pl, 0, sizeof(*pl));
    pl->n = n;
    for (k = 0; k < n; k++) {
        pl->fields[k] = x[k].field;
        pl->sides[k] = x[k].side;
    }
    for (j = 0; j < 2 * HALO_MAXX; j++) pl->req[j] = MPI_REQUEST_NULL;
    for (j = 0; j < 4; j++) pl->stype[j] = pl->rtype[j] = MPI_DOUBLE;
    h->nplans++; /* from here on halo_free releases what the plan holds */
    if (h->mode == MPILAB_HALO_PERSISTENT) {
        for (k = 0; k < n; k++) {
            halo_msg m = halo_message(h, &x[k], k);
            err = MPI_Recv_init(m.rptr, m.count, m.rtype, m.src, k, h->cart,
                                &pl->req[pl->nreq++]);
            if (err != MPI_SUCCESS) return err;
        }
        for (k = 0; k < n; k++) {
            halo_msg m = halo_message(h, &x[k], k);
            err = MPI_Send_init(m.sptr, m.count, m.type, m.dest, k, h->cart,
                                &pl->req[pl->nreq++]);
            if (err != MPI_SUCCESS) return err;
        }
    } else {
        for (j = 0; j < 4; j++) {
            int sc[HALO_MAXX], rc[HALO_MAXX], ns = 0, nr = 0;
            MPI_Aint sa[HALO_MAXX], ra[HALO_MAXX];
            MPI_Datatype st[HALO_MAXX], rt[HALO_MAXX];
            for (k = 0; k < n; k++) {
                halo_msg m = halo_message(h, &x[k], k);
                if (halo_slot(x[k].side) == j) { /* the ghost on side s comes from slot s */
                    if ((err = MPI_Get_address(m.rptr, &ra[nr])) != MPI_SUCCESS) return err;
                    rc[nr] = m.count;
                    rt[nr++] = m.rtype;
                }
                if (halo_slot(halo_opp(x[k].side)) == j) { /* our edge goes the other way */
                    if ((err = MPI_Get_address(m.sptr, &sa[ns])) != MPI_SUCCESS) return err;
                    sc[ns] = m.count;
                    st[ns++] = m.type;
                }
            }
            err = halo_slot_type(ns, sc, sa, st, &pl->scount[j], &pl->sdispl[j],
                                 &pl->stype[j], &pl->sowned[j]);
            if (err != MPI_SUCCESS) return err;
            err = halo_slot_type(nr, rc, ra, rt, &pl->rcount[j], &pl->rdispl[j],
                                 &pl->rtype[j], &pl->rowned[j]);
            if (err != MPI_SUCCESS) return err;
        }
    }
    *out = pl;
    return MPI_SUCCESS;
}

/* PERSISTENT: start this set's requests (packing columns first). */
static inline int halo_start_persistent(mpilab_halo *h, const halo_xfer *x, int n)
{
    halo_plan *pl;
    int err = halo_plan_for(h, x, n, &pl);
    if (err != MPI_SUCCESS) return err;
    halo_pack_all(h, x, n);
    h->active = pl->req;
    h->nreq = pl->nreq;
    return MPI_Startall(pl->nreq, pl->req);
}

/* NEIGHBOR: the whole exchange in one neighbourhood collective. */
static inline int halo_neighbor(mpilab_halo *h, const halo_xfer *x, int n)
{
    halo_plan *pl;
    int err = halo_plan_for(h, x, n, &pl);
    if (err != MPI_SUCCESS) return err;
    halo_pack_all(h, x, n);
    err = MPI_Neighbor_alltoallw(MPI_BOTTOM, pl->scount, pl->sdispl, pl->stype, MPI_BOTTOM,
                                 pl->rcount, pl->rdispl, pl->rtype, h->cart);
    if (err == MPI_SUCCESS) halo_unpack_all(h, x, n);
    return err;
}

/* Let the library progress the posted requests; *done once they have all completed. */
static inline int halo_test(mpilab_halo *h, int *done)
{
    return MPI_Testall(h->nreq, h->active, done, MPI_STATUSES_IGNORE);
}

static inline int halo_finish(mpilab_halo *h, const halo_xfer *x, int n)
{
    int err = MPI_Waitall(h->nreq, h->active, MPI_STATUSES_IGNORE);
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
            err = MPI_Sendrecv(m.sptr, m.count, m.type, m.dest, k, m.rptr, m.count, m.rtype,
                               m.src, k, h->cart, MPI_STATUS_IGNORE);
        } else {
            int coord = halo_is_col(x[k].side) ? h->coords[1] : h->coords[0];
            if (coord % 2 == 0) {
                err = MPI_Send(m.sptr, m.count, m.type, m.dest, k, h->cart);
                if (err == MPI_SUCCESS)
                    err = MPI_Recv(m.rptr, m.count, m.rtype, m.src, k, h->cart,
                                   MPI_STATUS_IGNORE);
            } else {
                err = MPI_Recv(m.rptr, m.count, m.rtype, m.src, k, h->cart,
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
/* part `k` of `parts` of the points that need no ghost (parts == 1: all of them) */
typedef void (*halo_part_fn)(void *ctx, int k, int parts);

/* Part k of parts of the lines lo..hi (inclusive): *a..*b, empty (a > b) if too few. */
static inline void halo_part(int lo, int hi, int k, int parts, int *a, int *b)
{
    int start, count;
    if (hi < lo) {
        *a = lo;
        *b = lo - 1;
        return;
    }
    halo_split(hi - lo + 1, parts, k, &start, &count);
    *a = lo + start;
    *b = lo + start + count - 1;
}

/* Points that need no ghost, for HALO_CHARGE: the block less its one-point ring. */
static inline long halo_interior_points(const mpilab_halo *h)
{
    return h->rows > 2 && h->cols > 2 ? (long)(h->rows - 2) * (h->cols - 2) : 0;
}

static inline void halo_stamp(double *tl, int phase, double a, double b)
{
    if (tl) {
        tl[2 * phase] = a;
        tl[2 * phase + 1] = b;
    }
}

/*
 * One exchange followed by the update that needs it, in the halo's mode:
 * `whole` updates every point; in the OVERLAP modes `interior` updates the points that
 * need no ghost while messages fly (in OVERLAP_TEST part by part, MPI_Testall after each
 * part: the interior's span includes those calls, PROGRESS gives their total) and `ring`
 * the rest after
 * MPI_Waitall. If tl is not NULL
 * it receives the (start, end) of each phase, MPI_Wtime() - t0, in the order of the
 * MPILAB_PHASE_* enum; a phase a mode does not have is empty (start == end).
 */
static inline int halo_round(mpilab_halo *h, const halo_xfer *x, int n, halo_compute_fn whole,
                             halo_part_fn interior, halo_compute_fn ring, void *ctx,
                             double *tl, double t0)
{
    int err, k, done = 0;
    double a = 0, b = 0, c = 0, d = 0, e = 0, t = 0, tests = 0;
    if (tl) a = MPI_Wtime() - t0;
    switch (h->mode) {
    case MPILAB_HALO_BLOCKING:
    case MPILAB_HALO_SENDRECV:
    case MPILAB_HALO_NEIGHBOR:
        err = h->mode == MPILAB_HALO_NEIGHBOR ? halo_neighbor(h, x, n) : halo_sync(h, x, n);
        if (tl) b = MPI_Wtime() - t0;
        whole(ctx);
        HALO_CHARGE(h->rows * h->cols);
        if (tl) {
            c = MPI_Wtime() - t0;
            halo_stamp(tl, MPILAB_PHASE_EXCHANGE, a, b);
            halo_stamp(tl, MPILAB_PHASE_WAIT, b, b);
            halo_stamp(tl, MPILAB_PHASE_INTERIOR, b, c);
            halo_stamp(tl, MPILAB_PHASE_BOUNDARY, c, c);
            halo_stamp(tl, MPILAB_PHASE_PROGRESS, c, c);
        }
        return err;
    case MPILAB_HALO_NONBLOCKING:
        if ((err = halo_start(h, x, n)) != MPI_SUCCESS) return err;
        if (tl) b = MPI_Wtime() - t0;
        if ((err = halo_finish(h, x, n)) != MPI_SUCCESS) return err;
        if (tl) c = MPI_Wtime() - t0;
        whole(ctx);
        HALO_CHARGE(h->rows * h->cols);
        if (tl) {
            d = MPI_Wtime() - t0;
            halo_stamp(tl, MPILAB_PHASE_EXCHANGE, a, b);
            halo_stamp(tl, MPILAB_PHASE_WAIT, b, c);
            halo_stamp(tl, MPILAB_PHASE_INTERIOR, c, d);
            halo_stamp(tl, MPILAB_PHASE_BOUNDARY, d, d);
            halo_stamp(tl, MPILAB_PHASE_PROGRESS, d, d);
        }
        return MPI_SUCCESS;
    default:
        err = h->mode == MPILAB_HALO_PERSISTENT ? halo_start_persistent(h, x, n)
                                                : halo_start(h, x, n);
        if (err != MPI_SUCCESS) return err;
        if (tl) b = MPI_Wtime() - t0;
        if (h->mode != MPILAB_HALO_OVERLAP_TEST) {
            interior(ctx, 0, 1);
            HALO_CHARGE(halo_interior_points(h));
        } else {
            for (k = 0; k < HALO_TEST_PARTS; k++) {
                interior(ctx, k, HALO_TEST_PARTS);
                HALO_CHARGE(halo_interior_points(h) / HALO_TEST_PARTS);
                if (done) continue;
                if (tl) t = MPI_Wtime();
                if ((err = halo_test(h, &done)) != MPI_SUCCESS) return err;
                if (tl) tests += MPI_Wtime() - t;
            }
        }
        if (tl) c = MPI_Wtime() - t0;
        if ((err = halo_finish(h, x, n)) != MPI_SUCCESS) return err;
        if (tl) d = MPI_Wtime() - t0;
        ring(ctx);
        HALO_CHARGE(h->rows * h->cols - (h->mode != MPILAB_HALO_OVERLAP_TEST
                                         ? halo_interior_points(h)
                                         : halo_interior_points(h) / HALO_TEST_PARTS
                                               * HALO_TEST_PARTS));
        if (tl) {
            e = MPI_Wtime() - t0;
            halo_stamp(tl, MPILAB_PHASE_EXCHANGE, a, b);
            halo_stamp(tl, MPILAB_PHASE_INTERIOR, b, c);
            halo_stamp(tl, MPILAB_PHASE_WAIT, c, d);
            halo_stamp(tl, MPILAB_PHASE_BOUNDARY, d, e);
            halo_stamp(tl, MPILAB_PHASE_PROGRESS, b, b + tests);
        }
        return MPI_SUCCESS;
    }
}

#endif
