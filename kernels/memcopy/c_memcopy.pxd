# Mirrors memcopy.h.
from mpi4py.libmpi cimport MPI_Comm


cdef extern from "c_memcopy.h" nogil:
    enum:
        MPILAB_COPY_MEMCPY
        MPILAB_COPY_LOOP

    int mpilab_memcopy(MPI_Comm comm, double *dst, const double *src, size_t n,
                       int method, int warmup, int iters, int reps, double *times)

    int mpilab_line_bounce(int cpu_a, int cpu_b, long iters, double *ns_per_round_trip)
