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
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
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


/* ------------------------------------------------------------------ line bounce */

/* One cache line bounced between two threads pinned to two CPUs: the first writes 2i+1,
 * the second answers 2i+2, `iters` times. What one round trip of a line between the two
 * cores costs (cache-to-cache latency): the price every line of a just-written buffer pays
 * when another core's copy fetches it. No MPI. */
enum { BOUNCE_STARTING = 0, BOUNCE_READY = 1, BOUNCE_FAILED = 2, BOUNCE_STOP = 3 };

typedef struct {
    _Alignas(64) _Atomic long flag; /* the line bounced */
    _Alignas(64) _Atomic int state;
    long iters;
    int cpu;
    int err;
} bounce_ctx;

static int pin_self(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *bounce_partner(void *p)
{
    bounce_ctx *c = (bounce_ctx *)p;
    long i;
    if ((c->err = pin_self(c->cpu))) {
        atomic_store(&c->state, BOUNCE_FAILED);
        return NULL;
    }
    atomic_store(&c->state, BOUNCE_READY);
    for (i = 0; i < c->iters; i++) {
        long want = 2 * i + 1;
        while (atomic_load_explicit(&c->flag, memory_order_acquire) != want)
            if (atomic_load_explicit(&c->state, memory_order_relaxed) == BOUNCE_STOP)
                return NULL;
        atomic_store_explicit(&c->flag, want + 1, memory_order_release);
    }
    return NULL;
}

int mpilab_line_bounce(int cpu_a, int cpu_b, long iters, double *ns_per_round_trip)
{
    static bounce_ctx c;
    pthread_t t;
    cpu_set_t saved;
    struct timespec t0, t1;
    long i;
    int err, st;
    if (iters < 1 || cpu_a < 0 || cpu_b < 0 || cpu_a == cpu_b || cpu_a >= CPU_SETSIZE ||
        cpu_b >= CPU_SETSIZE)
        return EINVAL;
    if ((err = pthread_getaffinity_np(pthread_self(), sizeof saved, &saved)))
        return err;
    if ((err = pin_self(cpu_a)))
        return err;
    atomic_store(&c.flag, 0);
    atomic_store(&c.state, BOUNCE_STARTING);
    c.iters = iters;
    c.cpu = cpu_b;
    c.err = 0;
    if ((err = pthread_create(&t, NULL, bounce_partner, &c))) {
        pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
        return err;
    }
    while ((st = atomic_load(&c.state)) == BOUNCE_STARTING)
        ;
    if (st == BOUNCE_READY) {
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (i = 0; i < iters; i++) {
            atomic_store_explicit(&c.flag, 2 * i + 1, memory_order_release);
            while (atomic_load_explicit(&c.flag, memory_order_acquire) != 2 * i + 2)
                ;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        *ns_per_round_trip =
            ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / (double)iters;
    }
    atomic_store(&c.state, BOUNCE_STOP);
    pthread_join(t, NULL);
    pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
    return st == BOUNCE_READY ? 0 : c.err;
}
