# cython: language_level=3, boundscheck=False, wraparound=False
"""The 2D acoustic wave (split pressure, staggered grid) with a halo exchange (c_wave.c)."""
cimport mpi4py.MPI as MPI
from mpi4py.libmpi cimport MPI_Comm
cimport c_wave as c
import math

import numpy as np
# The problem's parameters (f0, courant, source) are checked where the problem is defined,
# by the serial reference's own check: one rule and one set of messages for both.
from mpilab.validate import wave_params

include "mpilab_buffers.pxi"
include "mpilab_halo.pxi"

ROUNDS = ("pressure", "velocity")  # two exchange rounds per step
MAX_COURANT = 1 / math.sqrt(2)


cdef int _run(MPI.Comm comm, tuple lay, str mode, str pack, tuple phys, int steps,
              int last, double[::1] tl, double[::1] block, int warmup, int iters, int reps,
              double[::1] times) except -1:
    cdef MPI_Comm cc = comm.ob_mpi
    cdef int nx_, ny_, py, px, sx, sy, m = MODES[mode], pk = PACKS[pack], err
    cdef double f0 = phys[0], cr = phys[1]
    cdef double *tp = &tl[0] if tl is not None else NULL
    cdef double *bp = &block[0] if block is not None else NULL
    cdef double *sp = &times[0] if times is not None else NULL
    nx_, ny_, py, px, sx, sy = lay[6], lay[7], lay[0], lay[1], phys[2], phys[3]
    with nogil:
        err = c.mpilab_wave(cc, nx_, ny_, py, px, m, pk, f0, cr, sx, sy, steps, last, tp,
                            bp, warmup, iters, reps, sp)
    _check_mpi(err)
    return 0


def wave(MPI.Comm comm not None, nx, ny, steps, *, mode="nonblocking", pack="datatype",
         f0=0.05, courant=0.5, source=None, dims=None):
    """Run `steps` wave steps on the `nx` x `ny` grid split over `comm` (collective).

    Returns ``(block, (y0, x0))``: the pressure p = px + py of this rank's ``(rows, cols)``
    block and its offset, equal to ``mpilab.halo.serial_wave`` there to rounding.
    """
    lay = _layout(comm, nx, ny, dims, mode, pack)
    _check_count(steps, "steps", 0)
    phys = wave_params(nx, ny, f0, courant, source)
    block = _block(lay)
    _run(comm, lay, mode, pack, phys, steps, 0, None, block, 0, 1, 0, None)
    return _placed(block, lay)


def time_wave(MPI.Comm comm not None, nx, ny, *, mode="nonblocking", pack="datatype",
              f0=0.05, courant=0.5, source=None, dims=None, warmup=2, iters=10, reps=5):
    """Seconds per step (both exchanges + updates), `reps` values, slowest rank."""
    lay = _layout(comm, nx, ny, dims, mode, pack)
    phys = wave_params(nx, ny, f0, courant, source)
    _check_timing(warmup, iters, reps)
    times = np.empty(reps, dtype=np.float64)
    _run(comm, lay, mode, pack, phys, 0, 0, None, None, warmup, iters, reps, times)
    return times


def timeline_wave(MPI.Comm comm not None, nx, ny, steps, *, last=None, mode="overlap",
                  pack="datatype", f0=0.05, courant=0.5, source=None, dims=None):
    """Phase timestamps of this rank for the last `last` of `steps` steps (collective).

    Returns a float64 array ``(2 * last, 5, 2)``: two exchange rounds per step
    (:data:`ROUNDS`), each with the (start, end) in seconds after a common barrier of
    every phase in :data:`PHASES` order; a phase the mode lacks is empty.
    """
    lay = _layout(comm, nx, ny, dims, mode, pack)
    last = _check_last(steps, last)
    phys = wave_params(nx, ny, f0, courant, source)
    tl = np.zeros(last * 4 * len(PHASES), dtype=np.float64)
    _run(comm, lay, mode, pack, phys, steps, last, tl, None, 0, 1, 0, None)
    return tl.reshape(2 * last, len(PHASES), 2)
