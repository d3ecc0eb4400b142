# cython: language_level=3, boundscheck=False, wraparound=False
"""The 2D heat stencil with a halo exchange, run and timed inside C (see c_stencil.c)."""
cimport mpi4py.MPI as MPI
from mpi4py.libmpi cimport MPI_Comm
cimport c_stencil as c
import math

import numpy as np

include "mpilab_buffers.pxi"
include "mpilab_halo.pxi"


cdef double _energy(object energy) except? -1:
    if isinstance(energy, bool) or not isinstance(energy, (int, float, np.integer,
                                                           np.floating)):
        raise TypeError(f"energy must be a number, not {type(energy).__name__}")
    if not math.isfinite(energy):
        raise ValueError(f"energy must be finite, got {energy}")
    return float(energy)


#: the kinds of page the two-sided kernels can put their fields on (as
#: mpilab.buffers.BUFFER_KINDS names them): 2 MiB huge pages asked for, or 4 KiB pages only
PAGES = ("huge-pages", "4k-pages")


cdef int _small_pages(object pages) except -1:
    if not isinstance(pages, str) or pages not in PAGES:
        raise ValueError(f"pages must be one of {list(PAGES)}, got {pages!r}")
    return pages == "4k-pages"


cdef int _run(MPI.Comm comm, tuple lay, str mode, str pack, double energy, int steps,
              int last, double[::1] tl, double[::1] block, int warmup, int iters, int reps,
              double[::1] times, int small=0, double[::1] share=None) except -1:
    cdef MPI_Comm cc = comm.ob_mpi
    cdef int nx_, ny_, py, px, m = MODES[mode], pk = PACKS[pack], err
    cdef double *tp = &tl[0] if tl is not None else NULL
    cdef double *bp = &block[0] if block is not None else NULL
    cdef double *sp = &times[0] if times is not None else NULL
    cdef double *hp = &share[0] if share is not None else NULL
    nx_, ny_, py, px = lay[6], lay[7], lay[0], lay[1]
    with nogil:
        err = c.mpilab_heat(cc, nx_, ny_, py, px, m, pk, small, energy, steps, last, tp,
                            bp, warmup, iters, reps, sp, hp)
    _check_mpi(err)
    return 0


def heat(MPI.Comm comm not None, nx, ny, steps, *, mode="nonblocking", pack="datatype",
         energy=1.0, dims=None):
    """Run `steps` heat steps on the `nx` x `ny` grid split over `comm` (collective).

    Returns ``(block, (y0, x0))``: this rank's ``(rows, cols)`` float64 block and its
    offset in the global ``(ny, nx)`` field, equal to ``mpilab.halo.serial_heat`` there.
    """
    lay = _layout(comm, nx, ny, dims, mode, pack)
    _check_count(steps, "steps", 0)
    e = _energy(energy)
    block = _block(lay)
    _run(comm, lay, mode, pack, e, steps, 0, None, block, 0, 1, 0, None)
    return _placed(block, lay)


def time_heat(MPI.Comm comm not None, nx, ny, *, mode="nonblocking", pack="datatype",
              energy=1.0, dims=None, warmup=2, iters=10, reps=5, pages="huge-pages",
              share=None):
    """Seconds per step (exchange + update), `reps` values, slowest rank (collective).

    The fields sit on the kind of page `pages` names (one of :data:`PAGES`); `share`, a
    one-element float64 array, receives the least share of huge pages under them over
    the ranks (-1 where /proc/self/smaps could not be read).
    """
    lay = _layout(comm, nx, ny, dims, mode, pack)
    e = _energy(energy)
    _check_timing(warmup, iters, reps)
    small = _small_pages(pages)
    times = np.empty(reps, dtype=np.float64)
    _run(comm, lay, mode, pack, e, 0, 0, None, None, warmup, iters, reps, times, small,
         _share_out(share))
    return times


def huge_share(MPI.Comm comm not None, nx, ny, *, mode="nonblocking", pack="datatype",
               dims=None, pages="huge-pages"):
    """The share of huge pages Linux gave the fields :func:`time_heat` allocates with
    these arguments: the least over the ranks, read from /proc/self/smaps right after the
    allocation (collective); None where it could not be read.
    """
    lay = _layout(comm, nx, ny, dims, mode, pack)
    small = _small_pages(pages)
    share = _share_out(np.empty(1))
    _run(comm, lay, mode, pack, 1.0, 0, 0, None, None, 0, 1, 0, None, small, share)
    return None if share[0] < 0 else float(share[0])


def timeline_heat(MPI.Comm comm not None, nx, ny, steps, *, last=None, mode="overlap",
                  pack="datatype", energy=1.0, dims=None):
    """Phase timestamps of this rank for the last `last` of `steps` steps (collective).

    Returns a float64 array ``(last, 5, 2)``: for each step, the (start, end) in seconds
    after a common barrier of each phase in :data:`PHASES` order. A phase the mode does
    not have is empty (start == end).
    """
    lay = _layout(comm, nx, ny, dims, mode, pack)
    last = _check_last(steps, last)
    e = _energy(energy)
    tl = np.zeros(last * 2 * len(PHASES), dtype=np.float64)
    _run(comm, lay, mode, pack, e, steps, last, tl, None, 0, 1, 0, None)
    return tl.reshape(last, len(PHASES), 2)


def sweep(MPI.Comm comm not None, nx, ny, *, warmup=2, iters=10, reps=5, prefetch=True):
    """Seconds per stencil sweep of one `nx` x `ny` grid per rank, no exchange (collective).

    The compute side of the lesson: each sweep reads the old grid and writes the new one.
    With `prefetch` (as every kernel runs), a grid larger than the last-level cache takes
    the row loop that prefetches the streams from memory; without it, the plain loop, so
    that only the hardware's own prefetcher runs ahead.
    """
    _check_count(nx, "nx", 1)
    _check_count(ny, "ny", 1)
    _check_timing(warmup, iters, reps)
    if (nx + 2) * (ny + 2) > (1 << 31):
        raise ValueError(f"a {nx} x {ny} grid is too large")
    times = np.empty(reps, dtype=np.float64)
    cdef double[::1] t = times
    cdef MPI_Comm cc = comm.ob_mpi
    cdef int err, a = nx, b = ny, w = warmup, it = iters, r = reps, pf = bool(prefetch)
    with nogil:
        err = c.mpilab_heat_sweep(cc, a, b, pf, w, it, r, &t[0])
    _check_mpi(err)
    return times


def sweep_on(MPI.Comm comm not None, double[::1] a not None, double[::1] b not None, nx, ny,
             *, warmup=2, iters=10, reps=5):
    """Seconds per stencil sweep of :func:`sweep`, on two arrays the caller made (collective).

    So the caller decides what memory the grid lives in (the pages of
    :func:`mpilab.buffers.buffer`). `a` and `b` are ``(nx + 2) * (ny + 2)`` doubles each,
    a grid with its one-cell frame; each sweep writes the interior of one from the other
    and the two swap.
    """
    _check_count(nx, "nx", 1)
    _check_count(ny, "ny", 1)
    _check_timing(warmup, iters, reps)
    if (nx + 2) * (ny + 2) > (1 << 31):
        raise ValueError(f"a {nx} x {ny} grid is too large")
    cdef size_t n = (nx + 2) * (ny + 2)
    if a.shape[0] != n or b.shape[0] != n:
        raise ValueError(f"a and b must hold (nx + 2) * (ny + 2) = {n} doubles, got "
                         f"{a.shape[0]} and {b.shape[0]}")
    cdef double *ap = &a[0]
    cdef double *bp = &b[0]
    if (ap < bp + n) and (bp < ap + n):
        raise ValueError("a and b must not overlap")
    times = np.empty(reps, dtype=np.float64)
    cdef double[::1] t = times
    cdef MPI_Comm cc = comm.ob_mpi
    cdef int err, x = nx, y = ny, w = warmup, it = iters, r = reps
    with nogil:
        err = c.mpilab_heat_sweep_on(cc, ap, bp, x, y, w, it, r, &t[0])
    _check_mpi(err)
    return times


def store_copy(MPI.Comm comm not None, double[::1] dst not None, const double[::1] src not None,
               *, warmup=2, iters=10, reps=5):
    """Seconds per copy ``dst[:] = src`` as a loop with ordinary stores (collective).

    The copy the stencil sweep is fairly compared with: like the sweep, it reads each
    written cache line in first (a memcpy of a large array may skip that with
    non-temporal stores).
    """
    if dst.shape[0] != src.shape[0]:
        raise ValueError(f"dst and src must have the same length, got {dst.shape[0]} "
                         f"and {src.shape[0]}")
    _check_timing(warmup, iters, reps)
    cdef size_t n = dst.shape[0]
    cdef double *dp = NULL
    cdef const double *sp = NULL
    if n > 0:
        dp = &dst[0]
        sp = &src[0]
        if (dp < sp + n) and (sp < dp + n):
            raise ValueError("dst and src must not overlap")
    times = np.empty(reps, dtype=np.float64)
    cdef double[::1] t = times
    cdef MPI_Comm cc = comm.ob_mpi
    cdef int err, w = warmup, it = iters, r = reps
    with nogil:
        err = c.mpilab_store_copy(cc, dp, sp, n, w, it, r, &t[0])
    _check_mpi(err)
    return times
