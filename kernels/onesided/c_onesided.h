#ifndef MPILAB_C_ONESIDED_H
#define MPILAB_C_ONESIDED_H

#include <mpi.h>

/* how the ghost cells are filled (c_onesided.c) */
enum { MPILAB_OS_PUT_FENCE = 0, MPILAB_OS_PUT_PSCW = 1, MPILAB_OS_PUT_LOCK = 2,
       MPILAB_OS_SHM = 3, MPILAB_OS_SHM_NC = 4, MPILAB_OS_HYBRID = 5 };
/* returned (on every rank) instead of an MPI error code when a shared-memory mode is asked
 * of a communicator whose ranks are not all on one node; MPI error codes are >= 0 */
#define MPILAB_OS_NOT_SHARED (-1)

int mpilab_onesided_heat(MPI_Comm comm, int nx, int ny, int py, int px, int mode,
                         double energy, int steps, double *block, int warmup, int iters,
                         int reps, double *times, double *huge_share);

int mpilab_shm_layout(MPI_Comm comm, MPI_Aint nbytes, int noncontig, MPI_Aint *addr,
                      MPI_Aint *size);

#endif
