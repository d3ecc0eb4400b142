#ifndef MPILAB_C_MATCHING_H
#define MPILAB_C_MATCHING_H

#include <mpi.h>

/* where the queued entries wait: receives posted ahead (POSTED), messages that arrived
 * ahead (UNEXPECTED); or none, and a receiver that posts late (LATE: it computes
 * meanwhile, LATE_POLLING: it waits inside MPI) */
enum { MPILAB_MATCH_POSTED = 0, MPILAB_MATCH_UNEXPECTED = 1, MPILAB_MATCH_LATE = 2,
       MPILAB_MATCH_LATE_POLLING = 3 };
/* the wildcard of the receives that are posted: none, or MPI_ANY_SOURCE */
enum { MPILAB_WILD_NONE = 0, MPILAB_WILD_SOURCE = 1 };
/* the most queued entries per rank (their tags are 1 .. depth, below MPI's 32767) */
#define MPILAB_MATCH_MAX_DEPTH 16384

int mpilab_matching(MPI_Comm comm, int rank_a, int rank_b, int depth, int nbytes,
                    int queue, int wildcard, double delay_us,
                    const void *sbuf, void *rbuf, int warmup, int iters, int reps,
                    double *times, int *bad);

#endif
