/*
 * c_wave.c - the 2D acoustic wave of the coarray paper, on a 2D process grid.
 *
 * Purpose: the first-order velocity-pressure system with split pressure p = px + py,
 * second-order staggered grid (Virieux), Ricker point source, exactly as
 * mpilab.halo.serial_wave defines it, so the parallel field equals the serial one.
 * Units h = c = rho = 1 (kappa = 1), dt = courant. px, py at cell centres (j, i), vx at
 * faces (j, i + 1/2), vy at faces (j + 1/2, i). Rigid walls: the normal velocity on the
 * border is zero (the ghost faces outside and the last column of vx / row of vy).
 * Algorithm, one step (leapfrog): exchange the E and S ghosts of px and py, then
 *   vx -= dt * d(px + py)/dx,  vy -= dt * d(px + py)/dy;
 * exchange the W ghost of vx and the N ghost of vy, then
 *   px -= dt * dvx/dx,  py -= dt * dvy/dy,  and add dt * f(t_{n+1/2}) / 2 to px and py
 * at the source. Each exchange runs in the halo mode (mpilab_halo.h); in the OVERLAP modes the
 * points that need no ghost are updated while messages fly.
 *
 *   comm, nx, ny, py, px, mode, pack - as in c_stencil.c
 *   f0, courant - Ricker central frequency (t0 = 1/f0) and dt (c dt / h <= 1/sqrt 2)
 *   sx, sy      - source cell (global column, row)
 *   steps, last, timeline - steps from rest; the last `last` are timed phase by phase,
 *                 two exchange rounds per step (pressure ghosts, then velocity ghosts):
 *                 timeline gets last * 2 * MPILAB_NPHASES * 2 doubles
 *   block       - out (or NULL): p = px + py of this rank's rows x cols block
 *   warmup, iters, reps, times - if reps > 0, further steps timed (mpilab_timing.h)
 * Denormals are flushed to zero while it runs. Returns an MPI error code.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "c_wave.h"
#include "mpilab_timing.h"

typedef struct {
    mpilab_halo h;
    double *px, *py, *vx, *vy;
    double dt, f0;
    long n;
    int vxc, vyr;       /* columns of vx, rows of vy that move (the wall ones do not) */
    int has_src;
    size_t src;
    double *tl, t0;
} wave_ctx;

#define ROW(a, r) ((a) + (size_t)(r) * ld)

/* Loops run `i < n` from 0: Python builds with -fwrapv, under which `i <= c1` loops have
 * no computable trip count and stay scalar. */
MPILAB_VECTOR_CLONES
static void vx_update(wave_ctx *c, int c0, int c1)
{
    int ld = c->h.ld, r, i, n = c1 - c0 + 1;
    double dt = c->dt;
    for (r = 1; r <= c->h.rows; r++) {
        const double *restrict a = ROW(c->px, r) + c0, *restrict b = ROW(c->py, r) + c0;
        double *restrict v = ROW(c->vx, r) + c0;
        for (i = 0; i < n; i++)
            v[i] -= dt * ((a[i + 1] + b[i + 1]) - (a[i] + b[i]));
    }
}

MPILAB_VECTOR_CLONES
static void vy_update(wave_ctx *c, int r0, int r1)
{
    int ld = c->h.ld, r, i, n = c->h.cols;
    double dt = c->dt;
    for (r = r0; r <= r1; r++) {
        const double *restrict a0 = ROW(c->px, r) + 1, *restrict b0 = ROW(c->py, r) + 1;
        const double *restrict a1 = ROW(c->px, r + 1) + 1, *restrict b1 = ROW(c->py, r + 1) + 1;
        double *restrict v = ROW(c->vy, r) + 1;
        for (i = 0; i < n; i++)
            v[i] -= dt * ((a1[i] + b1[i]) - (a0[i] + b0[i]));
    }
}

MPILAB_VECTOR_CLONES
static void px_update(wave_ctx *c, int c0, int c1)
{
    int ld = c->h.ld, r, i, n = c1 - c0 + 1;
    double dt = c->dt;
    for (r = 1; r <= c->h.rows; r++) {
        const double *restrict v = ROW(c->vx, r) + c0;
        double *restrict p = ROW(c->px, r) + c0;
        for (i = 0; i < n; i++)
            p[i] -= dt * (v[i] - v[i - 1]);
    }
}

MPILAB_VECTOR_CLONES
static void py_update(wave_ctx *c, int r0, int r1)
{
    int ld = c->h.ld, r, i, n = c->h.cols;
    double dt = c->dt;
    for (r = r0; r <= r1; r++) {
        const double *restrict v0 = ROW(c->vy, r - 1) + 1, *restrict v1 = ROW(c->vy, r) + 1;
        double *restrict p = ROW(c->py, r) + 1;
        for (i = 0; i < n; i++)
            p[i] -= dt * (v1[i] - v0[i]);
    }
}

static void v_whole(void *p)
{
    wave_ctx *c = (wave_ctx *)p;
    vx_update(c, 1, c->vxc);
    vy_update(c, 1, c->vyr);
}

static void v_interior(void *p, int k, int parts)
{
    wave_ctx *c = (wave_ctx *)p;
    int a, b;
    halo_part(1, c->vxc < c->h.cols - 1 ? c->vxc : c->h.cols - 1, k, parts, &a, &b);
    if (a <= b) vx_update(c, a, b);
    halo_part(1, c->vyr < c->h.rows - 1 ? c->vyr : c->h.rows - 1, k, parts, &a, &b);
    if (a <= b) vy_update(c, a, b);
}

static void v_ring(void *p)
{
    wave_ctx *c = (wave_ctx *)p;
    if (c->vxc == c->h.cols) vx_update(c, c->h.cols, c->h.cols);
    if (c->vyr == c->h.rows) vy_update(c, c->h.rows, c->h.rows);
}

static void p_whole(void *p)
{
    wave_ctx *c = (wave_ctx *)p;
    px_update(c, 1, c->h.cols);
    py_update(c, 1, c->h.rows);
}

static void p_interior(void *p, int k, int parts)
{
    wave_ctx *c = (wave_ctx *)p;
    int a, b;
    halo_part(2, c->h.cols, k, parts, &a, &b);
    if (a <= b) px_update(c, a, b);
    halo_part(2, c->h.rows, k, parts, &a, &b);
    if (a <= b) py_update(c, a, b);
}

static void p_ring(void *p)
{
    wave_ctx *c = (wave_ctx *)p;
    px_update(c, 1, 1);
    py_update(c, 1, 1);
}

static double ricker(double t, double f0)
{
    double q = M_PI * f0 * (t - 1.0 / f0), a = q * q;
    return (1.0 - 2.0 * a) * exp(-a);
}

static int wave_step(void *p)
{
    wave_ctx *c = (wave_ctx *)p;
    halo_xfer xp[4] = {{c->px, HALO_E}, {c->py, HALO_E}, {c->px, HALO_S}, {c->py, HALO_S}};
    halo_xfer xv[2] = {{c->vx, HALO_W}, {c->vy, HALO_N}};
    int err;
    err = halo_round(&c->h, xp, 4, v_whole, v_interior, v_ring, c, c->tl, c->t0);
    if (err != MPI_SUCCESS) return err;
    if (c->tl) c->tl += 2 * MPILAB_NPHASES;
    err = halo_round(&c->h, xv, 2, p_whole, p_interior, p_ring, c, c->tl, c->t0);
    if (c->tl) c->tl += 2 * MPILAB_NPHASES;
    if (c->has_src) {
        double s = 0.5 * c->dt * ricker(((double)c->n + 0.5) * c->dt, c->f0);
        c->px[c->src] += s;
        c->py[c->src] += s;
    }
    c->n++;
    return err;
}

int mpilab_wave(MPI_Comm comm, int nx, int ny, int py, int px, int mode, int pack,
                double f0, double courant, int sx, int sy, int steps, int last,
                double *timeline, double *block, int warmup, int iters, int reps,
                double *times)
{
    wave_ctx c;
    int err, all, k, s, ly, lx;
    unsigned csr;

    memset(&c, 0, sizeof(c));
    if ((err = halo_init(&c.h, comm, nx, ny, py, px, mode, pack)) != MPI_SUCCESS) return err;
    csr = halo_ftz_on();
    c.px = halo_field_alloc(&c.h);
    c.py = halo_field_alloc(&c.h);
    c.vx = halo_field_alloc(&c.h);
    c.vy = halo_field_alloc(&c.h);
    err = halo_all_ok(c.h.cart, c.px && c.py && c.vx && c.vy, &all);
    if (err != MPI_SUCCESS) goto done;
    if (!all) { err = MPI_ERR_NO_MEM; goto done; }
    c.dt = courant;
    c.f0 = f0;
    c.vxc = c.h.cols - (c.h.x0 + c.h.cols == nx);
    c.vyr = c.h.rows - (c.h.y0 + c.h.rows == ny);
    ly = sy - c.h.y0;
    lx = sx - c.h.x0;
    if (ly >= 0 && ly < c.h.rows && lx >= 0 && lx < c.h.cols) {
        c.has_src = 1;
        c.src = (size_t)(ly + 1) * c.h.ld + (size_t)(lx + 1);
    }
    if (last > steps) last = steps;
    for (s = 0; s < steps - last; s++)
        if ((err = wave_step(&c)) != MPI_SUCCESS) goto done;
    if (last > 0 && timeline) {
        if ((err = MPI_Barrier(c.h.cart)) != MPI_SUCCESS) goto done;
        c.t0 = MPI_Wtime();
        c.tl = timeline;
    }
    for (; s < steps; s++)
        if ((err = wave_step(&c)) != MPI_SUCCESS) goto done;
    c.tl = NULL;
    if (block) {
        int ld = c.h.ld, i;
        for (k = 0; k < c.h.rows; k++) {
            const double *a = ROW(c.px, k + 1), *b = ROW(c.py, k + 1);
            for (i = 0; i < c.h.cols; i++)
                block[(size_t)k * c.h.cols + i] = a[i + 1] + b[i + 1];
        }
    }
    if (reps > 0)
        err = mpilab_time_steps(c.h.cart, wave_step, &c, warmup, iters, reps, 1.0, times);
done:
    halo_ftz_off(csr);
    halo_array_free(c.px);
    halo_array_free(c.py);
    halo_array_free(c.vx);
    halo_array_free(c.vy);
    halo_free(&c.h);
    return err;
}
