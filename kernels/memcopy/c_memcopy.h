#ifndef MPILAB_MEMCOPY_H
#define MPILAB_MEMCOPY_H

#include <stddef.h>
#include <mpi.h>

enum { MPILAB_COPY_MEMCPY = 0, MPILAB_COPY_LOOP = 1 };

int mpilab_memcopy(MPI_Comm comm, double *dst, const double *src, size_t n, int method,
                   int warmup, int iters, int reps, double *times);

#endif
