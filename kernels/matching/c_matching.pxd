# Mirrors c_matching.h.
from mpi4py.libmpi cimport MPI_Comm


cdef extern from "c_matching.h" nogil:
    enum:
        MPILAB_MATCH_POSTED
        MPILAB_MATCH_UNEXPECTED
        MPILAB_MATCH_LATE
        MPILAB_MATCH_LATE_POLLING
        MPILAB_WILD_NONE
        MPILAB_WILD_SOURCE
        MPILAB_MATCH_MAX_DEPTH

    int mpilab_matching(MPI_Comm comm, int rank_a, int rank_b, int depth, int nbytes,
                        int queue, int wildcard, double delay_us,
                        const void *sbuf, void *rbuf, int warmup, int iters, int reps,
                        double *times, int *bad)
