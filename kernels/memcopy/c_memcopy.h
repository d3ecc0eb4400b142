#ifndef MPILAB_MEMCOPY_H
#define MPILAB_MEMCOPY_H

#include <stddef.h>
#include <mpi.h>

enum { MPILAB_COPY_MEMCPY = 0, MPILAB_COPY_LOOP = 1 };

int mpilab_memcopy(MPI_Comm comm, double *dst, const double *src, size_t n, int method,
                   int warmup, int iters, int reps, double *times);

/* One cache line bounced between threads pinned to cpu_a and cpu_b, iters times: the
 * nanoseconds of one round trip. Returns 0 or an errno value (EINVAL for bad CPUs). */
int mpilab_line_bounce(int cpu_a, int cpu_b, long iters, double *ns_per_round_trip);

#endif
