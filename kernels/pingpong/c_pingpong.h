#ifndef MPILAB_C_PINGPONG_H
#define MPILAB_C_PINGPONG_H

#include <stddef.h>
#include <mpi.h>

enum { MPILAB_PP_ROUNDTRIP = 0, MPILAB_PP_ONEWAY = 1, MPILAB_PP_WINDOW = 2 };

int mpilab_pingpong(MPI_Comm comm, int rank_a, int rank_b,
                    const void *sbuf, void *rbuf, int nbytes, int mode,
                    int warmup, int iters, int reps, double *times);

#endif
