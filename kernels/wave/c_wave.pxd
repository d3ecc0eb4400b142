# Mirrors c_wave.h (and the enums of mpilab_halo.h it includes).
from mpi4py.libmpi cimport MPI_Comm


cdef extern from "c_wave.h" nogil:
    enum:
        MPILAB_HALO_BLOCKING
        MPILAB_HALO_SENDRECV
        MPILAB_HALO_NONBLOCKING
        MPILAB_HALO_OVERLAP
        MPILAB_PACK_DATATYPE
        MPILAB_PACK_MANUAL
        MPILAB_NPHASES

    int mpilab_wave(MPI_Comm comm, int nx, int ny, int py, int px, int mode, int pack,
                    double f0, double courant, int sx, int sy, int steps, int last,
                    double *timeline, double *block, int warmup, int iters, int reps,
                    double *times)
