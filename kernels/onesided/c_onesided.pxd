# Mirrors c_onesided.h.
from mpi4py.libmpi cimport MPI_Aint, MPI_Comm


cdef extern from "c_onesided.h" nogil:
    enum:
        MPILAB_OS_PUT_FENCE
        MPILAB_OS_PUT_PSCW
        MPILAB_OS_PUT_LOCK
        MPILAB_OS_SHM
        MPILAB_OS_SHM_NC
        MPILAB_OS_HYBRID
        MPILAB_OS_NOT_SHARED

    int mpilab_onesided_heat(MPI_Comm comm, int nx, int ny, int py, int px, int mode,
                             double energy, int steps, double *block, int warmup, int iters,
                             int reps, double *times, double *huge_share)

    int mpilab_shm_layout(MPI_Comm comm, MPI_Aint nbytes, int noncontig, MPI_Aint *addr,
                          MPI_Aint *size)
