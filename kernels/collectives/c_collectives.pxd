# Mirrors c_collectives.h.
from mpi4py.libmpi cimport MPI_Comm


cdef extern from "c_collectives.h" nogil:
    enum:
        MPILAB_ALG_LIBRARY

    int mpilab_coll_elem_size(int dtype)

    long long mpilab_coll_work_bytes(int op, int alg, int p, int count, int dtype)

    int mpilab_coll_run(MPI_Comm comm, int op, int alg, const void *sbuf, void *rbuf,
                        int count, int dtype, int redop, int root, void *work,
                        long long *trace, int trace_cap, int *trace_n)

    int mpilab_coll_time(MPI_Comm comm, int op, int alg, const void *sbuf, void *rbuf,
                         int count, int dtype, int redop, int root, void *work,
                         int warmup, int iters, int reps, double *times)

    int mpilab_coll_time_separated(MPI_Comm comm, int op, int alg, const void *sbuf,
                                   void *rbuf, int count, int dtype, int redop, int root,
                                   void *work, int warmup, int iters, int reps,
                                   double *times)

    int mpilab_coll_set_cvar_int(const char *name, int value)

    int mpilab_iallreduce_overlap(MPI_Comm comm, int mode, const double *sbuf, double *rbuf,
                                  int n, double *a, const double *b, int m, int passes,
                                  int parts, int warmup, int iters, double *out, int *wrong)
