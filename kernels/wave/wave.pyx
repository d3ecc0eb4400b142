# cython: language_level=3, boundscheck=False, wraparound=False
"""The 2D acoustic wave (split pressure, staggered grid) with a halo exchange (c_wave.c)."""
cimport mpi4py.MPI as MPI
from mpi4py.libmpi cimport MPI_Comm
cimport c_wave as c
import math

import numpy as np
from mpi4py import MPI as _MPI

include "mpilab_buffers.pxi"

MODES = {"blocking": c.MPILAB_HALO_BLOCKING, "sendrecv": c.MPILAB_HALO_SENDRECV,
         "nonblocking": c.MPILAB_HALO_NONBLOCKING, "overlap": c.MPILAB_HALO_OVERLAP}
PACKS = {"datatype": c.MPILAB_PACK_DATATYPE, "manual": c.MPILAB_PACK_MANUAL}
PHASES = ("exchange", "interior", "wait", "boundary")
ROUNDS = ("pressure", "velocity")  # two exchange rounds per step
MAX_COURANT = 1 / math.sqrt(2)


def layout(MPI.Comm comm not None, nx, ny, dims=None, mode="nonblocking", pack="datatype"):
    """Check a decomposition; ``(py, px, rows, cols, y0, x0)`` of this rank.

    Raises the same ValueError / TypeError on every rank (no communication).
    """
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
    if not isinstance(pack, str) or pack not in PACKS:
        raise ValueError(f"pack must be one of {list(PACKS)}, got {pack!r}")
    _check_count(nx, "nx", 1)
    _check_count(ny, "ny", 1)
    size = comm.Get_size()
    if dims is None:
        py, px = _MPI.Compute_dims(size, 2)
    else:
        try:
            py, px = dims
        except (TypeError, ValueError):
            raise TypeError(f"dims must be a pair (py, px), got {dims!r}") from None
        _check_count(py, "dims[0]", 1)
        _check_count(px, "dims[1]", 1)
        if py * px != size:
            raise ValueError(f"dims {tuple(dims)} need {py * px} ranks, the communicator "
                             f"has {size}")
    if px > nx or py > ny:
        raise ValueError(f"a {nx} x {ny} grid cannot be split over a {py} x {px} process "
                         f"grid: every rank needs at least one point per axis")
    rank = comm.Get_rank()
    cy, cx = rank // px, rank % px
    y0 = cy * (ny // py) + min(cy, ny % py)
    x0 = cx * (nx // px) + min(cx, nx % px)
    rows = ny // py + (cy < ny % py)
    cols = nx // px + (cx < nx % px)
    return int(py), int(px), rows, cols, y0, x0


cdef double _real(object value, str name) except? -1:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer,
                                                         np.floating)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return float(value)


cdef tuple _physics(nx, ny, f0, courant, source):
    cdef double f = _real(f0, "f0"), cr = _real(courant, "courant")
    if f <= 0:
        raise ValueError(f"f0 must be > 0, got {f0}")
    if not 0 < cr <= MAX_COURANT:
        raise ValueError(f"courant must be in (0, 1/sqrt(2)] for stability, got {courant}")
    if source is None:
        source = (nx // 2, ny // 2)
    try:
        sx, sy = source
    except (TypeError, ValueError):
        raise TypeError(f"source must be a pair (x, y), got {source!r}") from None
    _check_count(sx, "source x", 0)
    _check_count(sy, "source y", 0)
    if sx >= nx or sy >= ny:
        raise ValueError(f"source {tuple(source)} is outside the {nx} x {ny} grid")
    return f, cr, int(sx), int(sy)


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
    lay = layout(comm, nx, ny, dims, mode, pack) + (nx, ny)
    _check_count(steps, "steps", 0)
    phys = _physics(nx, ny, f0, courant, source)
    block = np.zeros(lay[2] * lay[3], dtype=np.float64)
    _run(comm, lay, mode, pack, phys, steps, 0, None, block, 0, 1, 0, None)
    return block.reshape(lay[2], lay[3]), (lay[4], lay[5])


def time_wave(MPI.Comm comm not None, nx, ny, *, mode="nonblocking", pack="datatype",
              f0=0.05, courant=0.5, source=None, dims=None, warmup=2, iters=10, reps=5):
    """Seconds per step (both exchanges + updates), `reps` values, slowest rank."""
    lay = layout(comm, nx, ny, dims, mode, pack) + (nx, ny)
    phys = _physics(nx, ny, f0, courant, source)
    _check_count(warmup, "warmup", 0)
    _check_count(iters, "iters", 1)
    _check_count(reps, "reps", 1)
    times = np.empty(reps, dtype=np.float64)
    _run(comm, lay, mode, pack, phys, 0, 0, None, None, warmup, iters, reps, times)
    return times


def timeline_wave(MPI.Comm comm not None, nx, ny, steps, *, last=None, mode="overlap",
                  pack="datatype", f0=0.05, courant=0.5, source=None, dims=None):
    """Phase timestamps of this rank for the last `last` of `steps` steps (collective).

    Returns a float64 array ``(2 * last, 4, 2)``: two exchange rounds per step
    (:data:`ROUNDS`), each with the (start, end) in seconds after a common barrier of
    every phase in :data:`PHASES` order; a phase the mode lacks is empty.
    """
    lay = layout(comm, nx, ny, dims, mode, pack) + (nx, ny)
    _check_count(steps, "steps", 1)
    if last is None:
        last = steps
    _check_count(last, "last", 1)
    if last > steps:
        raise ValueError(f"last={last} is more than steps={steps}")
    phys = _physics(nx, ny, f0, courant, source)
    tl = np.zeros(last * 16, dtype=np.float64)
    _run(comm, lay, mode, pack, phys, steps, last, tl, None, 0, 1, 0, None)
    return tl.reshape(2 * last, 4, 2)
