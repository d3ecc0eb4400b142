/*
 * mpilab_heat.h - the update of the heat problem (mpilab/halo/problem.py), shared by the kernels
 * that exchange its ghost cells in different ways (stencil: two-sided; onesided: RMA and
 * shared-memory windows), so every exchange is timed around the very same update.
 * Static inline, so each kernel stays one C file.
 *
 * Fields are (rows + 2) x ld doubles, row-major, interior at [1..rows][1..cols]
 * (mpilab_halo.h); one step sets new = old/2 + (N + S + E + W)/8 on the interior
 * (heat_rows) and then adds `energy` at the heat sources the block owns (heat_sources).
 */
#ifndef MPILAB_HEAT_H
#define MPILAB_HEAT_H

#include <stddef.h>
#include "mpilab_halo.h"

/* One row: o = md/2 + (up + dn + md[-1] + md[+1])/8 over n points, the additions in the
 * order NumPy's serial_heat uses, so results match bitwise. A plain loop over restrict
 * pointers, which the compiler vectorises (`i < n` from 0: Python builds with -fwrapv,
 * under which a `c <= c1` loop has no computable trip count and is left scalar). */
static inline void heat_row(double *restrict o, const double *restrict up,
                            const double *restrict md, const double *restrict dn, int n)
{
    int i;
    for (i = 0; i < n; i++)
        o[i] = md[i] / 2.0 + (((up[i] + dn[i]) + md[i - 1]) + md[i + 1]) / 8.0;
}

/* The same row when the fields stream from memory (heat_streams): one cache line of the
 * output (8 points) at a time, each preceded by prefetches of the line HEAT_AHEAD points
 * further on in the two streams that come from memory: the row below (read) and the
 * output row (written); the rows above and at r were read one and two rows ago and are
 * still in cache. The hardware prefetcher alone does not run far enough ahead. Measured
 * on the 4096^2 sweep against a copy of the same bytes with the same stores (bench
 * stencil-sweep, 2-core AMD EPYC, family 25 / Zen 4; standalone loops of this code at
 * Python's flags for the variants):
 *   no prefetch                                       0.5x the copy
 *   non-temporal prefetches (locality 0, prefetchnta) 0.5x (this loop's first form; it
 *                                                     gave 0.9x on an earlier EPYC VM)
 *   into L1 (locality 3, prefetcht0)                  0.5x: the prefetched lines crowd
 *                                                     out the rows above, read from L1
 *   into L2 (locality 2), 64 points per prefetch group, int offsets  0.7x (-fwrapv makes
 *                                                     every int address computation wrap)
 *   the same, size_t offsets                          0.8-0.88x
 *   into L2, one line per iteration, size_t offsets   0.9-0.96x (this form; 1024 to 4096
 *                                                     points ahead alike); in the
 *                                                     kernel 0.84-0.87x
 *   the same compiled for AVX-512 too                 1.04x in the kernel (0.92-0.95x
 *                                                     libc's memcpy): mpilab_halo.h
 * In cache the prefetches only cost instructions, hence the two versions. Prefetches
 * never fault, so reaching past the array is harmless. The arithmetic is heat_row's, in
 * its order: the bits are the same. */
#define HEAT_LINE 8
#define HEAT_AHEAD 2048
#define HEAT_LOCALITY 2
static inline void heat_row_stream(double *restrict o, const double *restrict up,
                                   const double *restrict md, const double *restrict dn,
                                   int n)
{
    size_t j, i, len = (size_t)n;
    for (j = 0; j + HEAT_LINE <= len; j += HEAT_LINE) {
        __builtin_prefetch(dn + (j + HEAT_AHEAD), 0, HEAT_LOCALITY);
        __builtin_prefetch(o + (j + HEAT_AHEAD), 1, HEAT_LOCALITY);
        for (i = j; i < j + HEAT_LINE; i++)
            o[i] = md[i] / 2.0 + (((up[i] + dn[i]) + md[i - 1]) + md[i + 1]) / 8.0;
    }
    heat_row(o + j, up + j, md + j, dn + j, (int)(len - j));
}

/* new from old on rows r0..r1, columns c0..c1 (1-based, inclusive) */
MPILAB_VECTOR_CLONES
static void heat_rows(double *restrict nw, const double *restrict old, int ld, int r0,
                      int r1, int c0, int c1, int stream)
{
    int r, n = c1 - c0 + 1;
    for (r = r0; r <= r1; r++) {
        const double *up = old + (size_t)(r - 1) * ld + c0;
        const double *md = old + (size_t)r * ld + c0;
        const double *dn = old + (size_t)(r + 1) * ld + c0;
        double *o = nw + (size_t)r * ld + c0;
        if (stream && n >= 2 * HEAT_LINE)
            heat_row_stream(o, up, md, dn, n);
        else
            heat_row(o, up, md, dn, n);
    }
}

/* Do two fields of n doubles each stream from memory? Taken as: together larger than
 * HEAT_LLC, the last-level cache one core sees on the course machine (32 MiB, one CCX of
 * an AMD EPYC; glibc's sysconf reports the whole package's 384 MiB there, so it is not
 * asked). The measured crossover was between 1024^2 and 1536^2 per field. A wrong guess
 * costs speed only, never bits. */
#define HEAT_LLC ((size_t)32 << 20)
static int heat_streams(size_t n)
{
    return 2 * n * sizeof(double) > HEAT_LLC;
}

/* The heat sources of mpilab.halo.heat_sources that lie in this rank's block, in the same
 * order, as offsets into a field of the halo's layout; returns how many (0 to 3). */
static inline int heat_sources(const mpilab_halo *h, int nx, int ny, size_t src[3])
{
    int sx[3] = {nx / 2, nx / 3, nx * 4 / 5}, sy[3] = {ny / 2, ny / 3, ny * 8 / 9};
    int k, n = 0;
    for (k = 0; k < 3; k++) {
        int ly = sy[k] - h->y0, lx = sx[k] - h->x0;
        if (ly >= 0 && ly < h->rows && lx >= 0 && lx < h->cols)
            src[n++] = (size_t)(ly + 1) * h->ld + (size_t)(lx + 1);
    }
    return n;
}

#endif
