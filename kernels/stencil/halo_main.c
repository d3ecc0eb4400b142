/*
 * halo_main.c - the heat and wave kernels as one standalone MPI program.
 *
 * Purpose: run the halo-exchange lesson's applications (c_stencil.c, c_wave.c) with the
 * timing protocol of mpilab_timing.h in a process with no Python, so the same C source
 * runs under a real MPI and under SimGrid's SMPI (the simulated clusters of mpilab.sim).
 * Usage: mpilab-halo APP MODE PACK NX NY PY PX STEPS WARMUP ITERS REPS [POINT_S]
 *   APP    - heat | wave (the wave with f0 = 0.05, Courant 0.5, source at the centre:
 *            mpilab.halo.serial_wave's defaults)
 *   MODE   - blocking | sendrecv | nonblocking | overlap | overlap-test | persistent |
 *            neighbor (mpilab_halo.h)
 *   PACK   - datatype | manual | subarray
 *   NX, NY - global grid; PY x PX - process grid (PY * PX ranks)
 *   STEPS  - steps run from rest before the field is summed (the check)
 *   WARMUP, ITERS, REPS - the timing protocol, on further steps
 *   POINT_S - built for the simulated clusters only (smpicc -DMPILAB_SIM): seconds of
 *            computing per grid point and step charged to the simulated clock by
 *            HALO_CHARGE (mpilab_halo.h), split evenly over the step's exchange rounds
 *            (heat 1, wave 2); 0 or absent: none (the host time counts instead, if
 *            smpi/simulate-computation is on). Elsewhere it must be absent or 0.
 * Rank 0 prints one JSON object:
 *   {"app": ..., "mode": ..., "nx": .., "ny": .., "py": .., "px": .., "steps": S,
 *    "sum": field summed over the grid after S steps, "iters": I, "times": [...]}
 * times are seconds per step, the slowest rank's. Bad arguments abort with status 2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "c_stencil.h"
#include "c_wave.h"

#ifdef MPILAB_SIM
double mpilab_sim_point_s = 0.0;   /* seconds per point and exchange round: HALO_CHARGE */
#endif

static const char *MODES[] = {"blocking", "sendrecv", "nonblocking", "overlap",
                              "overlap-test", "persistent", "neighbor"};
static const char *PACKS[] = {"datatype", "manual", "subarray"};

static int lookup(const char *name, const char **names, int n)
{
    int i;
    for (i = 0; i < n; i++)
        if (strcmp(name, names[i]) == 0) return i;
    return -1;
}

int main(int argc, char **argv)
{
    int me, p, provided, app, mode, pack, nx, ny, py, px, steps, warmup, iters, reps, i;
    int y0, rows, x0, cols, err;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    double point_s = argc == 13 ? atof(argv[12]) : 0.0;
    if (argc != 12 && argc != 13) {
        if (me == 0)
            fprintf(stderr, "usage: mpilab-halo heat|wave MODE PACK NX NY PY PX STEPS "
                            "WARMUP ITERS REPS [POINT_S]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    app = strcmp(argv[1], "heat") == 0 ? 0 : strcmp(argv[1], "wave") == 0 ? 1 : -1;
    mode = lookup(argv[2], MODES, 7);
    pack = lookup(argv[3], PACKS, 3);
    nx = atoi(argv[4]);
    ny = atoi(argv[5]);
    py = atoi(argv[6]);
    px = atoi(argv[7]);
    steps = atoi(argv[8]);
    warmup = atoi(argv[9]);
    iters = atoi(argv[10]);
    reps = atoi(argv[11]);
    if (app < 0 || mode < 0 || pack < 0 || py < 1 || px < 1 || py * px != p || nx < px
        || ny < py || steps < 0 || warmup < 0 || iters < 1 || reps < 1 || point_s < 0) {
        if (me == 0) fprintf(stderr, "mpilab-halo: bad arguments (PY * PX must be %d)\n", p);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
#ifdef MPILAB_SIM
    mpilab_sim_point_s = point_s / (app == 1 ? 2 : 1);   /* the wave has two rounds a step */
#else
    if (point_s != 0.0) {
        if (me == 0) fprintf(stderr, "mpilab-halo: POINT_S needs a build for SimGrid\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
#endif
    /* this rank's block, as halo_init places it: rank r at (r / px, r % px) */
    halo_split(ny, py, me / px, &y0, &rows);
    halo_split(nx, px, me % px, &x0, &cols);
    double *block = malloc(sizeof(double) * (size_t)rows * (size_t)cols);
    double *times = malloc(sizeof(double) * (size_t)reps);
    if (!block || !times) MPI_Abort(MPI_COMM_WORLD, 3);
    if (app == 0)
        err = mpilab_heat(MPI_COMM_WORLD, nx, ny, py, px, mode, pack, 0, 1.0, steps, 0, NULL,
                          block, warmup, iters, reps, times, NULL);
    else
        err = mpilab_wave(MPI_COMM_WORLD, nx, ny, py, px, mode, pack, 0.05, 0.5, nx / 2,
                          ny / 2, steps, 0, NULL, block, warmup, iters, reps, times);
    if (err != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 4);
    double local = 0.0, sum = 0.0;
    for (i = 0; i < rows * cols; i++) local += block[i];
    MPI_Reduce(&local, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (me == 0) {
        printf("{\"app\": \"%s\", \"mode\": \"%s\", \"pack\": \"%s\", \"nx\": %d, \"ny\": %d, "
               "\"py\": %d, \"px\": %d, \"steps\": %d, \"sum\": %.17g, \"iters\": %d, "
               "\"times\": [", argv[1], argv[2], argv[3], nx, ny, py, px, steps, sum, iters);
        for (i = 0; i < reps; i++) printf("%s%.9e", i ? ", " : "", times[i]);
        printf("]}\n");
        fflush(stdout);
    }
    free(block);
    free(times);
    MPI_Finalize();
    return 0;
}
