#ifndef MPILAB_C_WAVE_H
#define MPILAB_C_WAVE_H

#include <stddef.h>
#include <mpi.h>
#include "mpilab_halo.h"

int mpilab_wave(MPI_Comm comm, int nx, int ny, int py, int px, int mode, int pack,
                double f0, double courant, int sx, int sy, int steps, int last,
                double *timeline, double *block, int warmup, int iters, int reps,
                double *times);

#endif
