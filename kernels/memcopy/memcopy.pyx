# cython: language_level=3, boundscheck=False, wraparound=False
"""The local array copy a transfer is compared with (see c_memcopy.c)."""
cimport mpi4py.MPI as MPI
from mpi4py.libmpi cimport MPI_Comm
cimport c_memcopy as c
import numpy as np

include "mpilab_buffers.pxi"

METHODS = {"memcpy": c.MPILAB_COPY_MEMCPY, "loop": c.MPILAB_COPY_LOOP}


def memcopy(MPI.Comm comm not None, double[::1] dst not None,
            const double[::1] src not None, *, method="loop", warmup=10, iters=100,
            reps=5):
    """Time the copy ``dst[:] = src`` on every rank of `comm`.

    Collective over `comm` (pass ``MPI.COMM_SELF`` to time one rank alone). Returns a
    float64 array of `reps` times in seconds per copy, the slowest rank's.
    """
    cdef double[::1] t
    cdef int err, m, w, it, r
    cdef size_t n
    cdef MPI_Comm cc = comm.ob_mpi
    cdef double *dp = NULL
    cdef const double *sp = NULL

    if method not in METHODS:
        raise ValueError(f"method must be one of {sorted(METHODS)}, got {method!r}")
    if dst.shape[0] != src.shape[0]:
        raise ValueError(f"dst and src must have the same length, got {dst.shape[0]} "
                         f"and {src.shape[0]}")
    _check_count(warmup, "warmup", 0)
    _check_count(iters, "iters", 1)
    _check_count(reps, "reps", 1)
    times = np.empty(reps, dtype=np.float64)
    t = times
    n = dst.shape[0]
    if n > 0:
        dp = &dst[0]
        sp = &src[0]
        if (dp < sp + n) and (sp < dp + n):
            raise ValueError("dst and src must not overlap")
    m, w, it, r = METHODS[method], warmup, iters, reps
    with nogil:
        err = c.mpilab_memcopy(cc, dp, sp, n, m, w, it, r, &t[0])
    _check_mpi(err)
    return times


def line_bounce_ns(int cpu_a, int cpu_b, long iters=100000):
    """Nanoseconds one cache line takes to go from CPU `cpu_a` to `cpu_b` and back: a line
    bounced between two threads pinned there, `iters` times (no MPI). What each line of a
    buffer just written on one core costs a copy made on the other. This thread's affinity
    is restored after. Raises ValueError for CPUs this process may not use, or equal."""
    cdef double ns = 0.0
    cdef int err
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    import os
    allowed = os.sched_getaffinity(0)
    if cpu_a == cpu_b or cpu_a not in allowed or cpu_b not in allowed:
        raise ValueError(f"two different CPUs of {sorted(allowed)} are needed, got "
                         f"{cpu_a} and {cpu_b}")
    with nogil:
        err = c.mpilab_line_bounce(cpu_a, cpu_b, iters, &ns)
    if err:
        raise OSError(err, f"line bounce between CPUs {cpu_a} and {cpu_b} failed")
    return ns
