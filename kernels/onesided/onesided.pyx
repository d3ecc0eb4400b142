# cython: language_level=3, boundscheck=False, wraparound=False
"""The 2D heat stencil with a one-sided halo exchange, run and timed inside C.

RMA windows (Put + fence, PSCW or passive-target lock), MPI-3 shared-memory windows
(plain loads from the neighbours' fields), and the hybrid of both worlds: a shared
window per node, messages between nodes; see c_onesided.c. The problem, the layout and
the results are those of the stencil kernel (``MODES`` and ``layout`` here are its
two-sided ones, from mpilab_halo.pxi; the one-sided modes are ``ONESIDED_MODES``, the
hybrid one ``HYBRID_MODES``).
"""
cimport mpi4py.MPI as MPI
from mpi4py.libmpi cimport MPI_Aint, MPI_Comm
cimport c_onesided as c
import math

import numpy as np

include "mpilab_buffers.pxi"
include "mpilab_halo.pxi"

ONESIDED_MODES = {"put-fence": c.MPILAB_OS_PUT_FENCE, "put-pscw": c.MPILAB_OS_PUT_PSCW,
                  "put-lock": c.MPILAB_OS_PUT_LOCK, "shm": c.MPILAB_OS_SHM,
                  "shm-nc": c.MPILAB_OS_SHM_NC}
HYBRID_MODES = {"hybrid": c.MPILAB_OS_HYBRID}
_KERNEL_MODES = {**ONESIDED_MODES, **HYBRID_MODES}


cdef double _energy(object energy) except? -1:
    if isinstance(energy, bool) or not isinstance(energy, (int, float, np.integer,
                                                           np.floating)):
        raise TypeError(f"energy must be a number, not {type(energy).__name__}")
    if not math.isfinite(energy):
        raise ValueError(f"energy must be finite, got {energy}")
    return float(energy)


def check_layout(MPI.Comm comm not None, nx, ny, dims=None, mode="put-fence",
                 pack="datatype"):
    """Check a one-sided or hybrid run's arguments; ``(py, px, rows, cols, y0, x0)``.

    Raises the same ValueError / TypeError on every rank (no communication). Only
    ``pack="datatype"`` exists: the Put modes move columns as MPI vector datatypes on
    both sides, the shared-memory modes copy them with plain loads, and the hybrid mode
    does both, so there is nothing to pack by hand.
    """
    if not isinstance(mode, str) or mode not in _KERNEL_MODES:
        raise ValueError(f"mode must be one of {list(_KERNEL_MODES)}, got {mode!r}")
    if pack == "manual":
        raise ValueError("pack='manual' does not apply to the one-sided and hybrid modes: "
                         "the Put modes send columns as MPI vector datatypes on both sides, "
                         "the shm modes copy them with plain loads and the hybrid mode does "
                         "one or the other; use pack='datatype'")
    if not isinstance(pack, str) or pack != "datatype":
        raise ValueError(f"pack must be 'datatype' for the one-sided modes, got {pack!r}")
    return layout(comm, nx, ny, dims, "sendrecv", "datatype")


cdef int _run(MPI.Comm comm, tuple lay, str mode, double energy, int steps,
              double[::1] block, int warmup, int iters, int reps,
              double[::1] times, double[::1] share=None) except -1:
    cdef MPI_Comm cc = comm.ob_mpi
    cdef int nx_, ny_, py, px, m = _KERNEL_MODES[mode], err
    cdef double *bp = &block[0] if block is not None else NULL
    cdef double *sp = &times[0] if times is not None else NULL
    cdef double *hp = &share[0] if share is not None else NULL
    nx_, ny_, py, px = lay[6], lay[7], lay[0], lay[1]
    with nogil:
        err = c.mpilab_onesided_heat(cc, nx_, ny_, py, px, m, energy, steps, bp, warmup,
                                     iters, reps, sp, hp)
    if err == c.MPILAB_OS_NOT_SHARED:
        raise ValueError(f"mode {mode!r} needs every rank of the communicator on one node "
                         "(MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) splits this one); "
                         "use a put-* mode")
    _check_mpi(err)
    return 0


def heat(MPI.Comm comm not None, nx, ny, steps, *, mode="put-fence", pack="datatype",
         energy=1.0, dims=None):
    """Run `steps` heat steps on the `nx` x `ny` grid split over `comm` (collective).

    `mode` is one of ``ONESIDED_MODES``: ``"put-fence"``, ``"put-pscw"``, ``"put-lock"``
    (MPI_Put into the neighbours' ghosts, synchronised by a fence, a post/start/
    complete/wait epoch of the neighbours, or a lock_all epoch with flushes and empty
    messages), ``"shm"``, ``"shm-nc"`` (a shared-memory window, contiguous or not;
    the ghosts are copied from the neighbours' fields with plain loads; ValueError on
    every rank unless all ranks share one node), or ``"hybrid"`` (``HYBRID_MODES``: a
    noncontiguous shared window per node, plain loads from the neighbours on this node,
    MPI_Isend / MPI_Irecv with those on other nodes; any placement). `pack` must be
    ``"datatype"``.

    Returns ``(block, (y0, x0))``: this rank's ``(rows, cols)`` float64 block and its
    offset in the global ``(ny, nx)`` field, equal to ``mpilab.halo.serial_heat`` there.
    """
    lay = check_layout(comm, nx, ny, dims, mode, pack) + (nx, ny)
    _check_count(steps, "steps", 0)
    e = _energy(energy)
    block = _block(lay)
    _run(comm, lay, mode, e, steps, block, 0, 1, 0, None)
    return _placed(block, lay)


def time_heat(MPI.Comm comm not None, nx, ny, *, mode="put-fence", pack="datatype",
              energy=1.0, dims=None, warmup=2, iters=10, reps=5, share=None):
    """Seconds per step (exchange + update), `reps` values, slowest rank (collective).

    `share`, a one-element float64 array, receives the least share of huge pages under
    the window's fields over the ranks (-1 where /proc/self/smaps could not be read).
    """
    lay = check_layout(comm, nx, ny, dims, mode, pack) + (nx, ny)
    e = _energy(energy)
    _check_timing(warmup, iters, reps)
    times = np.empty(reps, dtype=np.float64)
    _run(comm, lay, mode, e, 0, None, warmup, iters, reps, times, _share_out(share))
    return times


def huge_share(MPI.Comm comm not None, nx, ny, *, mode="put-fence", pack="datatype",
               dims=None):
    """The share of huge pages Linux gave the window :func:`time_heat` allocates with these
    arguments (the MPI library's memory; this rank's two fields, huge pages asked for as
    the two-sided kernel asks): the least over the ranks, read from /proc/self/smaps right
    after the allocation (collective); None where it could not be read.
    """
    lay = check_layout(comm, nx, ny, dims, mode, pack) + (nx, ny)
    share = np.full(1, -1.0)
    _run(comm, lay, mode, 1.0, 0, None, 0, 1, 0, None, share)
    return None if share[0] < 0 else float(share[0])


def shm_layout(MPI.Comm comm not None, nbytes, noncontig=False):
    """Where each rank's segment of a shared-memory window lies, as rank 0 sees it.

    Every rank allocates `nbytes` with ``MPI_Win_allocate_shared`` (with info
    ``alloc_shared_noncontig=true`` if `noncontig`); rank 0 asks
    ``MPI_Win_shared_query`` for each rank's segment. Collective; the window is freed
    before returning.

    Returns a list, one ``(address, size)`` per rank of `comm`, the same on every rank:
    addresses in rank 0's address space (other ranks map the window elsewhere), sizes in
    bytes as ``MPI_Win_shared_query`` reports them. Contiguous windows put segment r + 1
    right after segment r; with `noncontig` each segment may start on its own page (Open
    MPI 4.1 rounds every segment up to whole pages and reports the rounded size).
    Raises ValueError on every rank if the ranks are not all on one node.
    """
    _check_count(nbytes, "nbytes", 0)
    if not isinstance(noncontig, (bool, np.bool_)):
        raise TypeError(f"noncontig must be a bool, not {type(noncontig).__name__}")
    n = comm.Get_size()
    addr = np.zeros(n, dtype=np.intp)
    size = np.zeros(n, dtype=np.intp)
    cdef MPI_Aint[::1] a = addr
    cdef MPI_Aint[::1] s = size
    cdef MPI_Comm cc = comm.ob_mpi
    cdef MPI_Aint nb = nbytes
    cdef int nc = bool(noncontig), err
    with nogil:
        err = c.mpilab_shm_layout(cc, nb, nc, &a[0], &s[0])
    if err == c.MPILAB_OS_NOT_SHARED:
        raise ValueError("shm_layout needs every rank of the communicator on one node "
                         "(MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) splits this one)")
    _check_mpi(err)
    return [(int(x), int(y)) for x, y in zip(addr, size)]
