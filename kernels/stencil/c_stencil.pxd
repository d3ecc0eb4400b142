# Mirrors c_stencil.h (the enums of mpilab_halo.h it includes: kernels/common/mpilab_halo.pxd).
from mpi4py.libmpi cimport MPI_Comm


cdef extern from "c_stencil.h" nogil:
    int mpilab_heat(MPI_Comm comm, int nx, int ny, int py, int px, int mode, int pack,
                    int small_pages, double energy, int steps, int last, double *timeline,
                    double *block, int warmup, int iters, int reps, double *times,
                    double *huge_share)

    int mpilab_heat_sweep(MPI_Comm comm, int nx, int ny, int prefetch, int warmup,
                          int iters, int reps, double *times)

    int mpilab_heat_sweep_on(MPI_Comm comm, double *a, double *b, int nx, int ny,
                             int warmup, int iters, int reps, double *times)

    int mpilab_store_copy(MPI_Comm comm, double *dst, const double *src, size_t n,
                          int warmup, int iters, int reps, double *times)
