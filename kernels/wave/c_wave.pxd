# Mirrors c_wave.h (the enums of mpilab_halo.h it includes: kernels/common/mpilab_halo.pxd).
from mpi4py.libmpi cimport MPI_Comm


cdef extern from "c_wave.h" nogil:
    int mpilab_wave(MPI_Comm comm, int nx, int ny, int py, int px, int mode, int pack,
                    double f0, double courant, int sx, int sy, int steps, int last,
                    double *timeline, double *block, int warmup, int iters, int reps,
                    double *times)
