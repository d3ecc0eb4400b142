# cython: language_level=3, boundscheck=False, wraparound=False
"""Ping-pong between two ranks, timed inside C (see c_pingpong.c)."""
cimport mpi4py.MPI as MPI
from mpi4py.libmpi cimport MPI_Comm
cimport c_pingpong as c
import numpy as np

include "mpilab_buffers.pxi"

MODES = {"roundtrip": c.MPILAB_PP_ROUNDTRIP, "oneway": c.MPILAB_PP_ONEWAY,
         "window": c.MPILAB_PP_WINDOW}


def pingpong(MPI.Comm comm not None, sbuf, rbuf, nbytes=None, *, rank_a=0, rank_b=1,
             mode="roundtrip", warmup=10, iters=100, reps=5):
    """Time one-way messages of `nbytes` between `rank_a` and `rank_b`.

    Collective over `comm`. Returns a float64 array of `reps` times in seconds per
    one-way message, the slowest rank's, identical on every rank. `sbuf` and `rbuf`
    are distinct buffers of at least `nbytes` bytes (default: the size of `sbuf`).
    """
    cdef const unsigned char[::1] s
    cdef unsigned char[::1] r
    cdef double[::1] t
    cdef const void *sp = NULL
    cdef void *rp = NULL
    cdef int err, n, a, b, m, w, it, rp_
    cdef MPI_Comm cc = comm.ob_mpi

    if mode not in MODES:
        raise ValueError(f"mode must be one of {sorted(MODES)}, got {mode!r}")
    sv, rv, nbytes = _pair_args(comm, sbuf, rbuf, nbytes, rank_a, rank_b, warmup, iters,
                                reps, "ping-pong")

    times = np.empty(reps, dtype=np.float64)
    t = times
    n, a, b, m, w, it, rp_ = nbytes, rank_a, rank_b, MODES[mode], warmup, iters, reps
    if n > 0:
        s = sv
        r = rv
        sp = &s[0]
        rp = &r[0]
    with nogil:
        err = c.mpilab_pingpong(cc, a, b, sp, rp, n, m, w, it, rp_, &t[0])
    _check_mpi(err)
    return times
