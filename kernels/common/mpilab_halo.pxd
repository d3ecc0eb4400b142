# Mirrors the enums of mpilab_halo.h that the halo kernels' wrappers (stencil, wave) use.


cdef extern from "mpilab_halo.h" nogil:
    enum:
        MPILAB_HALO_BLOCKING
        MPILAB_HALO_SENDRECV
        MPILAB_HALO_NONBLOCKING
        MPILAB_HALO_OVERLAP
        MPILAB_HALO_OVERLAP_TEST
        MPILAB_HALO_PERSISTENT
        MPILAB_HALO_NEIGHBOR
        MPILAB_PACK_DATATYPE
        MPILAB_PACK_MANUAL
        MPILAB_PACK_SUBARRAY
        MPILAB_NPHASES
