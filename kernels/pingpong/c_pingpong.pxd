# Mirrors pingpong.h.
from mpi4py.libmpi cimport MPI_Comm


cdef extern from "c_pingpong.h" nogil:
    enum:
        MPILAB_PP_ROUNDTRIP
        MPILAB_PP_ONEWAY
        MPILAB_PP_WINDOW

    int mpilab_pingpong(MPI_Comm comm, int rank_a, int rank_b,
                        const void *sbuf, void *rbuf, int nbytes, int mode,
                        int warmup, int iters, int reps, double *times)
