#ifndef MPILAB_C_COLLECTIVES_H
#define MPILAB_C_COLLECTIVES_H

#include <mpi.h>

/* Operations. */
enum {
    MPILAB_COLL_BCAST = 0,
    MPILAB_COLL_REDUCE = 1,
    MPILAB_COLL_ALLREDUCE = 2,
    MPILAB_COLL_BARRIER = 3,
    MPILAB_COLL_SCATTER = 4,
    MPILAB_COLL_GATHER = 5,
    MPILAB_COLL_ALLGATHER = 6,
    MPILAB_COLL_ALLTOALL = 7,
    MPILAB_COLL_REDUCE_SCATTER_BLOCK = 8
};

/* Algorithm 0 of every operation is the library's own collective (MPI_Bcast, ...). */
enum { MPILAB_ALG_LIBRARY = 0 };
enum { MPILAB_BCAST_LINEAR = 1, MPILAB_BCAST_BINARY_TREE = 2, MPILAB_BCAST_BINOMIAL = 3 };
enum { MPILAB_REDUCE_GATHER_REDUCE = 1, MPILAB_REDUCE_BINOMIAL = 2,
       MPILAB_REDUCE_RECURSIVE_HALVING = 3 };
enum { MPILAB_ALLREDUCE_RECURSIVE_DOUBLING = 1, MPILAB_ALLREDUCE_RING = 2 };
enum { MPILAB_BARRIER_LINEAR = 1, MPILAB_BARRIER_TREE = 2, MPILAB_BARRIER_DISSEMINATION = 3 };
enum { MPILAB_SCATTER_LINEAR = 1, MPILAB_SCATTER_BINOMIAL = 2 };
enum { MPILAB_GATHER_LINEAR = 1, MPILAB_GATHER_BINOMIAL = 2 };
enum { MPILAB_ALLGATHER_LINEAR = 1, MPILAB_ALLGATHER_BRUCK = 2,
       MPILAB_ALLGATHER_RECURSIVE_DOUBLING = 3, MPILAB_ALLGATHER_RING = 4,
       MPILAB_ALLGATHER_NEIGHBOR_EXCHANGE = 5, MPILAB_ALLGATHER_TWO_PROC = 6 };
enum { MPILAB_ALLTOALL_PAIRWISE = 1, MPILAB_ALLTOALL_BRUCK = 2 };
enum { MPILAB_REDUCE_SCATTER_BLOCK_RING = 1, MPILAB_REDUCE_SCATTER_BLOCK_RECURSIVE_HALVING = 2 };

/* Element types and reduction operations. */
enum { MPILAB_FLOAT64 = 0, MPILAB_FLOAT32 = 1, MPILAB_INT32 = 2, MPILAB_INT64 = 3,
       MPILAB_UINT8 = 4 };
enum { MPILAB_OP_SUM = 0, MPILAB_OP_MAX = 1, MPILAB_OP_MIN = 2, MPILAB_OP_PROD = 3 };

/* Trace events: (kind, peer, nbytes) triples, kind 0 = send, 1 = recv. */
enum { MPILAB_EV_SEND = 0, MPILAB_EV_RECV = 1 };

int mpilab_coll_elem_size(int dtype);

long long mpilab_coll_work_bytes(int op, int alg, int p, int count, int dtype);

int mpilab_coll_run(MPI_Comm comm, int op, int alg, const void *sbuf, void *rbuf,
                    int count, int dtype, int redop, int root, void *work,
                    long long *trace, int trace_cap, int *trace_n);

int mpilab_coll_time(MPI_Comm comm, int op, int alg, const void *sbuf, void *rbuf,
                     int count, int dtype, int redop, int root, void *work,
                     int warmup, int iters, int reps, double *times);

/* The same with every call separated by an untimed barrier (mpilab_timing.h) */
int mpilab_coll_time_separated(MPI_Comm comm, int op, int alg, const void *sbuf,
                               void *rbuf, int count, int dtype, int redop, int root,
                               void *work, int warmup, int iters, int reps, double *times);

int mpilab_coll_set_cvar_int(const char *name, int value);

/* OSU-style overlap of MPI_Iallreduce with computing (c_collectives.c) */
enum { MPILAB_OVERLAP_BLOCKING = 0, MPILAB_OVERLAP_NONBLOCKING = 1, MPILAB_OVERLAP_TEST = 2 };
int mpilab_iallreduce_overlap(MPI_Comm comm, int mode, const double *sbuf, double *rbuf,
                              int n, double *a, const double *b, int m, int passes,
                              int parts, int warmup, int iters, double *out, int *wrong);

#endif
