/*
 * mpilab_timing.h - the one timing protocol every mpilab kernel uses.
 *
 * Purpose: time a communication or copy step the same way everywhere, so numbers from
 * different kernels (and from the standalone programs) can be compared.
 * Protocol: `warmup` untimed steps; then for each repetition an MPI_Barrier, MPI_Wtime,
 * `iters` steps inside C, MPI_Wtime, and the slowest rank's time (MPI_MAX allreduce),
 * so every rank returns the same numbers.
 *
 *   comm   - communicator every rank of which calls this (collective)
 *   step   - the step to time; returns an MPI error code (MPI_SUCCESS when fine)
 *   ctx    - passed to step unchanged
 *   warmup - untimed steps before the first repetition (>= 0)
 *   iters  - steps per timed repetition (>= 1)
 *   reps   - repetitions (>= 1)
 *   per    - divisor: the time of one repetition is divided by iters * per
 *   times  - out: reps values, seconds per (step / per), slowest rank
 */
#ifndef MPILAB_TIMING_H
#define MPILAB_TIMING_H

#include <mpi.h>

typedef int (*mpilab_step_fn)(void *ctx);

static inline int mpilab_time_steps(MPI_Comm comm, mpilab_step_fn step, void *ctx,
                                    int warmup, int iters, int reps, double per,
                                    double *times)
{
    int err, i, r;
    for (i = 0; i < warmup; i++)
        if ((err = step(ctx)) != MPI_SUCCESS) return err;
    for (r = 0; r < reps; r++) {
        double t0, local, slowest;
        if ((err = MPI_Barrier(comm)) != MPI_SUCCESS) return err;
        t0 = MPI_Wtime();
        for (i = 0; i < iters; i++)
            if ((err = step(ctx)) != MPI_SUCCESS) return err;
        local = MPI_Wtime() - t0;
        err = MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
        if (err != MPI_SUCCESS) return err;
        times[r] = slowest / ((double)iters * per);
    }
    return MPI_SUCCESS;
}

/*
 * The same, but every step is separated from the next by an MPI_Barrier that is not
 * timed (as OSU's collective benchmarks do): each rank sums the time of its own steps
 * only, and the slowest rank's sum counts. Back-to-back steps of a *rooted* collective
 * (bcast, reduce, scatter, gather) can overlap, since the ranks at the start of the
 * flow need not wait for the others: the loop above then measures a throughput. Here
 * no step starts before every rank has finished the previous one, so a step's time is
 * its latency (plus the skew with which the ranks leave the barrier).
 */
static inline int mpilab_time_steps_separated(MPI_Comm comm, mpilab_step_fn step,
                                              void *ctx, int warmup, int iters, int reps,
                                              double per, double *times)
{
    int err, i, r;
    for (i = 0; i < warmup; i++)
        if ((err = step(ctx)) != MPI_SUCCESS) return err;
    for (r = 0; r < reps; r++) {
        double local = 0.0, slowest, t0;
        for (i = 0; i < iters; i++) {
            if ((err = MPI_Barrier(comm)) != MPI_SUCCESS) return err;
            t0 = MPI_Wtime();
            if ((err = step(ctx)) != MPI_SUCCESS) return err;
            local += MPI_Wtime() - t0;
        }
        err = MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
        if (err != MPI_SUCCESS) return err;
        times[r] = slowest / ((double)iters * per);
    }
    return MPI_SUCCESS;
}

#endif
