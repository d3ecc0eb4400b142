"""The heat problem of the halo-exchange lesson: definition, decomposition, serial reference.

The problem is the 2D heat example of Balaji, Gropp, Hoefler and Thakur's *Advanced MPI
Programming* tutorial (2014), which the SHM-windows paper times:

* an ``nx`` × ``ny`` grid of temperatures, all zero at the start, stored as an array of
  shape ``(ny, nx)`` (rows are ``y``, columns are ``x``), surrounded by a border that is
  held at zero (heat leaves through it);
* each step replaces every point by half its value plus an eighth of each of its four
  neighbours (a 5-point stencil): ``new = old/2 + (N + S + E + W)/8``;
* then ``energy`` units of heat are added at three fixed points (:func:`heat_sources`).

Parallel versions split the grid over a 2D process grid (``MPI_Dims_create`` order:
``dims = (py, px)``, rank ``r`` at coordinates ``(r // px, r % px)``), each rank owning a
block of :func:`split` rows and columns plus a one-cell ghost zone, and must reproduce
:func:`serial_heat` to rounding whatever the process count and grid size.

The acoustic wave of the coarray paper (:func:`serial_wave`) is the second problem: the
same decomposition, two exchanges per step.

The problem definitions and serial references here are plain NumPy (no MPI), so they run
in a notebook, on an engine and in the grader alike. The *collective* functions
(:func:`run_heat`, :func:`run_wave`, :func:`gather`, :func:`time_halo`,
:func:`timeline`) take an mpi4py communicator and must be called by every rank of it: on
the engines through ``cluster.run`` (or ``%%px``), or in a script under ``mpiexec``. They
call the compiled kernels ``mpilab.kernels.stencil`` and ``mpilab.kernels.wave``, which
exchange the ghost cells in one of the two-sided :data:`MODES`, sending column ghosts
as an MPI vector datatype, packed by hand, or as subarray datatypes (:data:`PACKS`). The heat problem also
runs with a one-sided exchange (:data:`ONESIDED_MODES`, kernel
``mpilab.kernels.onesided``): ``MPI_Put`` into the neighbours' ghosts synchronised by
fence, post/start/complete/wait or a passive-target lock, or plain loads from the
neighbours' fields in an MPI-3 shared-memory window; and with the SHM-windows paper's
hybrid (:data:`HYBRID_MODES`): a shared-memory window per node for the neighbours on the
same node, messages for those on other nodes. Bad arguments raise the same
ValueError / TypeError on every rank before any communication (:func:`gather`, whose
blocks differ by rank, first shares one small verdict per rank, so that a bad block on
one rank also raises everywhere instead of leaving the others waiting).

From a notebook, with an :class:`mpilab.cluster.MPICluster` ``cluster``::

    def k1(sub):
        from mpi4py import MPI
        from mpilab import halo
        return halo.time_halo(MPI.COMM_WORLD, "heat", ["blocking", "overlap"], sub)

    blocking, overlap = cluster.run(k1, 256, timeout=120)[0]   # same records on every rank
    print(blocking["t_us_median"] / overlap["t_us_median"])     # K1
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from . import validate

__all__ = ["split", "process_grid", "heat_sources", "heat_step", "serial_heat", "boundary_loss",
           "MODES", "CLASSIC_MODES", "PROGRESS_MODES", "ONESIDED_MODES", "HYBRID_MODES", "SHARED_WINDOW_MODES", "ALL_MODES", "PACKS", "APPS", "PHASES", "ricker", "serial_wave", "blocks",
           "halo_bytes", "run_heat", "run_wave", "gather", "time_halo", "timeline",
           "timeline_frame"]

#: Halo-exchange modes of the kernels (see kernels/common/mpilab_halo.h): the four of the
#: coarray paper, then overlap with ``MPI_Testall`` calls between parts of the interior
#: (the library's chance to progress), overlap with persistent requests, and one
#: ``MPI_Neighbor_alltoallw`` on the Cartesian communicator.
CLASSIC_MODES = ("blocking", "sendrecv", "nonblocking", "overlap")
PROGRESS_MODES = ("overlap-test", "persistent")
MODES = CLASSIC_MODES + PROGRESS_MODES + ("neighbor",)
#: The modes whose ranks share one window (MPI_Win_allocate_shared): one node only.
SHARED_WINDOW_MODES = ("shm", "shm-nc")
#: One-sided exchanges of the heat problem (kernels/onesided/c_onesided.c): MPI_Put with
#: fence, with post/start/complete/wait, with a passive-target lock; a shared-memory
#: window, contiguous or not (``alloc_shared_noncontig``). Heat only; column ghosts always
#: travel as datatypes (Put) or plain loads (shm), so ``pack="datatype"`` only.
ONESIDED_MODES = ("put-fence", "put-pscw", "put-lock", *SHARED_WINDOW_MODES)
#: The SHM-windows paper's hybrid (kernels/onesided/c_onesided.c): a shared-memory window
#: per node (noncontiguous, as its S/R + SHM-NC version), plain loads from the neighbours
#: on the same node, MPI_Isend/MPI_Irecv with those on other nodes. Any placement; heat
#: and ``pack="datatype"`` only, like the one-sided modes.
HYBRID_MODES = ("hybrid",)
#: Every mode of the heat problem.
ALL_MODES = MODES + ONESIDED_MODES + HYBRID_MODES
#: Names that stand for several modes: "all" for the two-sided ones, "classic" for the
#: coarray paper's four, "onesided".
MODE_GROUPS = {"all": MODES, "classic": CLASSIC_MODES, "onesided": ONESIDED_MODES}
#: How column ghosts travel: an MPI vector datatype, packed by hand, or (every line, rows
#: too) an MPI subarray datatype of the whole field.
PACKS = ("datatype", "manual", "subarray")
#: The two problems.
APPS = ("heat", "wave")
#: Phases of a :func:`timeline`, in the order of its third axis.
PHASES = ("exchange", "interior", "wait", "boundary", "progress")


def process_grid(ranks: int) -> tuple[int, int]:
    """The process grid ``(py, px)`` ``MPI_Dims_create(ranks, 2)`` gives, without MPI.

    The most square factorisation, larger factor first (Open MPI and MPICH agree):
    1 -> (1, 1), 2 -> (2, 1), 4 -> (2, 2), 6 -> (3, 2), 7 -> (7, 1). The Fortran programs
    and the lab checks use it where this process must not initialise MPI.
    """
    if isinstance(ranks, bool) or not isinstance(ranks, (int, np.integer)) or ranks < 1:
        raise ValueError(f"ranks must be a positive integer, got {ranks!r}")
    px = math.isqrt(int(ranks))
    while ranks % px:
        px -= 1
    return int(ranks) // px, px


def split(n: int, parts: int) -> list[tuple[int, int]]:
    """Block distribution of `n` points over `parts` owners: ``[(start, count), ...]``.

    The first ``n % parts`` owners get one point more, so counts differ by at most one
    (``split(10, 4) == [(0, 3), (3, 3), (6, 2), (8, 2)]``). Every owner needs at least
    one point.
    """
    n = validate.count(n, "n")
    parts = validate.count(parts, "parts")
    if parts > n:
        raise ValueError(f"cannot split {n} points over {parts} owners (each needs one)")
    base, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        count = base + (i < extra)
        out.append((start, count))
        start += count
    return out


def heat_sources(nx: int, ny: int) -> list[tuple[int, int]]:
    """The three fixed points ``(x, y)`` where heat enters, as in the tutorial's code.

    ``(nx/2, ny/2)``, ``(nx/3, ny/3)`` and ``(4nx/5, 8ny/9)``, rounded down; on very small
    grids two may coincide (they then add their heat to the same point).
    """
    nx = validate.count(nx, "nx")
    ny = validate.count(ny, "ny")
    return [(nx // 2, ny // 2), (nx // 3, ny // 3), (nx * 4 // 5, ny * 8 // 9)]


def heat_step(old: np.ndarray, new: np.ndarray) -> None:
    """One stencil update of the interior of `old` (with its ghost frame) into `new`.

    Both arrays have shape ``(rows + 2, cols + 2)``; only ``new[1:-1, 1:-1]`` is written.
    """
    new[1:-1, 1:-1] = old[1:-1, 1:-1] / 2.0 + (
        old[:-2, 1:-1] + old[2:, 1:-1] + old[1:-1, :-2] + old[1:-1, 2:]) / 8.0


def boundary_loss(u: np.ndarray) -> float:
    """Heat that one step moves out of the grid `u` (shape ``(ny, nx)``, no frame).

    Each point on the edge hands an eighth of its heat to each neighbour outside the
    grid, so ``sum(next) == sum(u) - boundary_loss(u) + sources added``: the
    conservation law every correct step obeys.
    """
    u = np.asarray(u, dtype=float)
    return float(u[0, :].sum() + u[-1, :].sum() + u[:, 0].sum() + u[:, -1].sum()) / 8.0


def serial_heat(nx: int, ny: int, steps: int, *, energy: float = 1.0,
                sources: list[tuple[int, int]] | None = None) -> np.ndarray:
    """The temperature field after `steps` steps, computed on one process.

    Parameters
    ----------
    nx, ny : int
        Grid points along x (columns) and y (rows).
    steps : int
        Time steps (>= 0).
    energy : float
        Heat added at each source point after every step.
    sources : list of (x, y), optional
        Defaults to :func:`heat_sources`.

    Returns
    -------
    numpy.ndarray
        Shape ``(ny, nx)``, float64.
    """
    nx = validate.count(nx, "nx")
    ny = validate.count(ny, "ny")
    steps = validate.count(steps, "steps", 0)
    srcs = heat_sources(nx, ny) if sources is None else list(sources)
    for x, y in srcs:
        if not (0 <= x < nx and 0 <= y < ny):
            raise ValueError(f"source {(x, y)} is outside the {nx} x {ny} grid")
    old = np.zeros((ny + 2, nx + 2))
    new = np.zeros_like(old)
    for _ in range(steps):
        heat_step(old, new)
        for x, y in srcs:
            new[y + 1, x + 1] += energy
        old, new = new, old
    return old[1:-1, 1:-1].copy()


# ---------------------------------------------------------------------------------------
# The acoustic wave of the coarray paper


def ricker(t: float, f0: float) -> float:
    """Ricker wavelet ``(1 - 2 pi^2 f0^2 (t - t0)^2) exp(-pi^2 f0^2 (t - t0)^2)``, t0 = 1/f0."""
    q = math.pi * f0 * (t - 1.0 / f0)
    a = q * q
    return (1.0 - 2.0 * a) * math.exp(-a)


def serial_wave(nx: int, ny: int, steps: int, *, f0: float = 0.05, courant: float = 0.5,
                source: tuple[int, int] | None = None, fields: bool = False):
    """The pressure of the 2D acoustic wave after `steps` steps, computed on one process.

    The first-order velocity-pressure system of Reshetova, Cheverda and Koinov with split
    pressure ``p = px + py``::

        dvx/dt = -dp/dx,   dvy/dt = -dp/dy,   dpx/dt = -dvx/dx + F/2,   dpy/dt = -dvy/dy + F/2

    in units where the grid step, sound speed and density are 1 (so kappa = 1), on
    Virieux's staggered grid: ``px``, ``py`` at cell centres ``(y, x)``, ``vx`` on the faces
    ``(y, x + 1/2)``, ``vy`` on ``(y + 1/2, x)``; second order in space and time (leapfrog:
    velocities at half steps). The signs are those of the physical system (2) of the paper
    (its split form (3) drops them). The source ``F = f(t)`` is a Ricker wavelet
    (:func:`ricker`) at one cell, split equally between ``px`` and ``py`` (the paper's
    ``Fx``, ``Fy``). The time step is ``dt = courant`` (Courant number ``c dt / h``, stable for
    ``courant <= 1/sqrt(2)``).

    Boundary: **rigid walls** (zero normal velocity). The faces on the border of the
    ``nx`` x ``ny`` grid, i.e. the last column of ``vx``, the last row of ``vy`` and the
    faces just outside the first column and row, stay zero, so waves reflect.

    One step: ``vx -= dt * (p[x+1] - p[x])``, ``vy -= dt * (p[y+1] - p[y])`` with
    ``p = px + py``; then ``px -= dt * (vx[x] - vx[x-1])``, ``py -= dt * (vy[y] - vy[y-1])``;
    then ``dt * f((n + 1/2) dt) / 2`` is added to ``px`` and to ``py`` at the source.

    Parameters
    ----------
    nx, ny : int
        Cells along x (columns) and y (rows).
    steps : int
        Time steps (>= 0).
    f0 : float
        Central frequency of the Ricker wavelet (its delay is ``t0 = 1/f0``). The default
        0.05 gives about 20 cells per wavelength.
    courant : float
        ``dt``; must be in ``(0, 1/sqrt(2)]``.
    source : (x, y), optional
        Source cell; defaults to ``(nx // 2, ny // 2)``.
    fields : bool
        Return ``(p, vx, vy)`` instead of ``p`` alone.

    Returns
    -------
    numpy.ndarray
        The pressure ``p = px + py``, shape ``(ny, nx)``, float64.

    Examples
    --------
    >>> p = serial_wave(64, 48, 60)
    >>> p.shape
    (48, 64)
    """
    nx = validate.count(nx, "nx")
    ny = validate.count(ny, "ny")
    steps = validate.count(steps, "steps", 0)
    f0, dt, sx, sy = validate.wave_params(nx, ny, f0, courant, source)
    px, py, vx, vy = (np.zeros((ny + 2, nx + 2)) for _ in range(4))
    for n in range(steps):
        p = px + py
        vx[1:-1, 1:nx] -= dt * (p[1:-1, 2:nx + 1] - p[1:-1, 1:nx])
        vy[1:ny, 1:-1] -= dt * (p[2:ny + 1, 1:-1] - p[1:ny, 1:-1])
        px[1:-1, 1:-1] -= dt * (vx[1:-1, 1:-1] - vx[1:-1, :-2])
        py[1:-1, 1:-1] -= dt * (vy[1:-1, 1:-1] - vy[:-2, 1:-1])
        s = 0.5 * dt * ricker((n + 0.5) * dt, f0)
        px[sy + 1, sx + 1] += s
        py[sy + 1, sx + 1] += s
    p = (px + py)[1:-1, 1:-1].copy()
    if fields:
        return p, vx[1:-1, 1:-1].copy(), vy[1:-1, 1:-1].copy()
    return p


# ---------------------------------------------------------------------------------------
# Decomposition (plain Python) and the collective functions


def blocks(nx: int, ny: int, dims: tuple[int, int]) -> list[tuple[int, int, int, int]]:
    """Every rank's block ``(y0, rows, x0, cols)`` on a ``dims = (py, px)`` process grid.

    Rank ``r`` sits at ``(r // px, r % px)``; rows and columns come from :func:`split`,
    so uneven grids give blocks that differ by one point.

    Examples
    --------
    >>> blocks(5, 3, (1, 2))
    [(0, 3, 0, 3), (0, 3, 3, 2)]
    """
    py, px = dims
    ys, xs = split(ny, py), split(nx, px)
    return [(ys[r // px][0], ys[r // px][1], xs[r % px][0], xs[r % px][1])
            for r in range(py * px)]


def halo_bytes(app: str, nx: int, ny: int, dims: tuple[int, int]) -> int:
    """Bytes all ranks together send in one step of `app` on this decomposition.

    Heat sends both neighbours' ghosts across every interface (2 values per interface
    point); the wave sends px and py one way and one velocity the other (3 values).
    """
    py, px = dims
    per_point = {"heat": 2, "wave": 3}[_check_app(app)]
    return 8 * per_point * ((px - 1) * ny + (py - 1) * nx)


def _check_app(app) -> str:
    if not isinstance(app, str) or app not in APPS:
        raise ValueError(f"app must be one of {APPS}, got {app!r}")
    return app


def check_onesided(app: str, modes: Sequence[str], packs: Sequence[str]) -> None:
    """The one-sided and hybrid modes exist for the heat problem and its datatype packing
    only."""
    one = [m for m in modes if m in ONESIDED_MODES + HYBRID_MODES]
    if not one:
        return
    if app != "heat":
        raise ValueError(f"the one-sided and hybrid modes ({', '.join(one)}) exist for the "
                         f"heat problem only, not for {app!r}")
    other = [p for p in packs if p != "datatype"]
    if other:
        raise ValueError(f"pack={other[0]!r} does not apply to the one-sided and hybrid "
                         "modes: the Put modes send columns as MPI vector datatypes on both "
                         "sides, the shm modes copy them with plain loads and the hybrid mode "
                         "does one or the other; use pack='datatype'")


def _kernel(app: str, mode: str | None = None):
    from .kernels import stencil, wave

    if mode in ONESIDED_MODES + HYBRID_MODES:
        from .kernels import onesided

        return onesided
    return stencil if app == "heat" else wave


def _single_mode(mode, allowed: Sequence[str]) -> str:
    if not isinstance(mode, str) or mode not in allowed:
        raise ValueError(f"mode must be one of {tuple(allowed)}, got {mode!r}")
    return mode


def run_heat(comm, nx: int, ny: int, steps: int, *, mode: str = "nonblocking",
             pack: str = "datatype", energy: float = 1.0, dims=None):
    """Run the heat problem in parallel; this rank's block and its offset (collective).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        Every rank of it calls this function.
    nx, ny : int
        Global grid (columns, rows). Each rank needs at least one point per axis.
    steps : int
        Steps from the zero field.
    mode : str
        One of :data:`ALL_MODES`. Two-sided (:data:`MODES`): ``"blocking"`` (Send/Recv
        ordered by coordinate parity), ``"sendrecv"``, ``"nonblocking"`` (Isend/Irecv,
        Waitall, compute), ``"overlap"`` (Isend/Irecv, interior, Waitall, boundary
        ring), ``"overlap-test"`` (overlap with MPI_Testall after each of 16 parts of the
        interior), ``"persistent"`` (overlap with MPI_Send_init/MPI_Recv_init once and
        MPI_Startall every step) or ``"neighbor"`` (one MPI_Neighbor_alltoallw on the
        Cartesian communicator, then compute). One-sided (:data:`ONESIDED_MODES`): ``"put-fence"`` (MPI_Put, one
        MPI_Win_fence per step), ``"put-pscw"`` (MPI_Put in a post/start/complete/wait
        epoch of the neighbours), ``"put-lock"`` (MPI_Win_lock_all once; MPI_Put,
        MPI_Win_flush_all, an empty message to each neighbour), ``"shm"`` and ``"shm-nc"``
        (MPI_Win_allocate_shared, contiguous or not; the ghosts copied from the
        neighbours' fields with plain loads after an MPI_Barrier; every rank on one node,
        else ValueError). Hybrid (:data:`HYBRID_MODES`): ``"hybrid"``, a shared window
        per node (``shm-nc`` among the ranks of a node, a barrier of the node only) and
        MPI_Isend/MPI_Irecv with the neighbours on other nodes, posted before the node's
        barrier; any placement of the ranks on nodes.
    pack : str
        One of :data:`PACKS`: column ghosts as an MPI vector datatype, packed by hand,
        or every line as an MPI subarray datatype of the whole field. The one-sided and
        hybrid modes take ``"datatype"`` only (ValueError for the others).
    energy : float
        Heat added at each of :func:`heat_sources` after every step.
    dims : (py, px), optional
        Process grid; default ``MPI_Dims_create(size, 2)``.

    Returns
    -------
    block : numpy.ndarray
        This rank's ``(rows, cols)`` part of the field.
    offset : (int, int)
        ``(y0, x0)``: where the block starts in the global ``(ny, nx)`` field.

    Examples
    --------
    On every rank (e.g. in a ``%%px`` cell, or ``cluster.run``)::

        block, off = halo.run_heat(comm, 17, 11, 20, mode="overlap")
        u = halo.gather(comm, block, off)          # the whole field on rank 0
        if comm.rank == 0:
            assert np.allclose(u, halo.serial_heat(17, 11, 20))
    """
    mode = _single_mode(mode, ALL_MODES)
    validate.names(pack, PACKS, "pack")
    check_onesided("heat", [mode], [pack])
    return _kernel("heat", mode).heat(comm, nx, ny, steps, mode=mode, pack=pack,
                                      energy=energy, dims=dims)


def run_wave(comm, nx: int, ny: int, steps: int, *, mode: str = "nonblocking",
             pack: str = "datatype", f0: float = 0.05, courant: float = 0.5,
             source: tuple[int, int] | None = None, dims=None):
    """Run the acoustic wave in parallel; this rank's pressure block and offset (collective).

    The problem is :func:`serial_wave`'s (same parameters); `mode`, `pack` and `dims`
    as in :func:`run_heat`, two-sided :data:`MODES` only (the one-sided modes exist for
    the heat alone: ValueError). Each step makes two exchanges: the pressure ghosts the
    velocity update reads (east and south), then the velocity ghosts the pressure update
    reads (west for vx, north for vy).

    Returns
    -------
    block : numpy.ndarray
        ``p = px + py`` on this rank's ``(rows, cols)`` block.
    offset : (int, int)
        ``(y0, x0)`` of the block in the global field.

    Examples
    --------
    ::

        p, off = halo.run_wave(comm, 40, 30, 80, mode="overlap", pack="manual")
        full = halo.gather(comm, p, off)
        if comm.rank == 0:
            assert np.allclose(full, halo.serial_wave(40, 30, 80), rtol=1e-12, atol=1e-12)
    """
    check_onesided("wave", [mode] if isinstance(mode, str) else [], [])
    validate.names(mode, MODES, "mode")
    validate.names(pack, PACKS, "pack")
    return _kernel("wave").wave(comm, nx, ny, steps, mode=mode, pack=pack, f0=f0,
                                courant=courant, source=source, dims=dims)


def gather(comm, block, offset, *, root: int = 0):
    """Assemble the global field from every rank's block on `root` (collective).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
    block : array_like
        This rank's 2D block.
    offset : (int, int)
        ``(y0, x0)`` of the block, as :func:`run_heat` returns it.
    root : int
        Rank that receives the field.

    Returns
    -------
    numpy.ndarray or None
        The ``(ny, nx)`` field on `root` (its shape is the union of the blocks), None on
        the other ranks.
    """
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)):
        raise TypeError(f"root must be an integer, not {type(root).__name__}")
    if not 0 <= root < comm.Get_size():
        raise ValueError(f"root={root} is not a rank of a {comm.Get_size()}-rank communicator")
    try:
        b = np.asarray(block, dtype=float)
        y0, x0 = (int(v) for v in offset)
        why = None if b.ndim == 2 else f"block must be 2D, got shape {b.shape}"
    except (TypeError, ValueError) as exc:
        why = f"block must be a 2D array and offset a pair (y0, x0): {exc}"
    # one rank's bad block must not leave the others waiting in the gather
    bad = comm.allgather(why)
    if any(bad):
        r = next(i for i, w in enumerate(bad) if w)
        raise ValueError(f"rank {r}: {bad[r]}")
    parts = comm.gather((y0, x0, b), root=root)
    if comm.Get_rank() != root:
        return None
    ny = max(y + p.shape[0] for y, _, p in parts)
    nx = max(x + p.shape[1] for _, x, p in parts)
    out = np.zeros((ny, nx))
    for y, x, p in parts:
        out[y:y + p.shape[0], x:x + p.shape[1]] = p
    return out


def _grid(comm, sub, nx, ny, dims):
    from mpi4py import MPI

    size = comm.Get_size()
    if dims is None:
        dims = tuple(MPI.Compute_dims(size, 2))
    py, px = dims
    if sub is not None:
        if nx is not None or ny is not None:
            raise ValueError("give either sub or nx and ny, not both")
        sub = validate.count(sub, "sub")
        return sub * px, sub * py, (py, px)
    if nx is None or ny is None:
        raise ValueError("give sub (points per rank and axis) or both nx and ny")
    return validate.count(nx, "nx"), validate.count(ny, "ny"), (py, px)


def time_halo(comm, app: str, mode="all", sub: int | None = None, *, nx: int | None = None,
              ny: int | None = None, pack="datatype", iters: int | None = None,
              warmup: int | None = None, reps: int = 5, rounds: int = 1,
              min_time: float = 0.01, dims=None, **problem) -> list[dict]:
    """Time steps of `app` in one or several modes, side by side (collective).

    Each step is one exchange + update for the heat, two for the wave, timed inside C with
    the one protocol (warm-up, barrier, timed loop, ``MPI_Wtime``, slowest rank).
    Modes and packings alternate within each of `rounds` rounds, so their ratios are
    measured under the same machine load.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
    app : {"heat", "wave"}
    mode : str or list of str
        One of :data:`ALL_MODES`, a list of them, or a comma-separated string;
        ``"all"`` stands for the two-sided :data:`MODES`, ``"onesided"`` for the
        :data:`ONESIDED_MODES` (heat only, ``pack="datatype"`` only, as ``"hybrid"``).
    sub : int, optional
        Subdomain edge per rank: every rank owns ``sub`` x ``sub`` points and the global
        grid is ``sub * px`` x ``sub * py`` (as in the coarray paper's tables).
    nx, ny : int, optional
        The global grid instead of `sub`.
    pack : str or list of str
        :data:`PACKS` to measure (``"all"`` for every one); ``"datatype"`` only when a
        one-sided or the hybrid mode is among `mode` (ValueError otherwise).
    iters : int, optional
        Timed steps per repetition; default: calibrated once on the first mode so that
        a repetition lasts about `min_time` seconds, then the same for every mode.
    warmup : int, optional
        Untimed steps before each measurement (default ``min(iters, 10)``).
    reps, rounds : int
        Repetitions per measurement, and rounds (each round measures every mode).
    dims : (py, px), optional
        Process grid; default ``MPI_Dims_create``.
    **problem
        ``energy`` for the heat; ``f0``, ``courant``, ``source`` for the wave.

    Returns
    -------
    list of dict
        One record per (mode, pack) in the shape of :func:`mpilab.timing.record`, times
        per step: ``t_us_min``, ``t_us_median``, quartiles, ``spread``, ``times_us``, plus
        ``app``, ``mode``, ``pack``, ``sub``, ``nx``, ``ny``, ``dims``, ``ranks``,
        ``iters``, ``warmup``; ``size_bytes`` is :func:`halo_bytes` (all ranks, one step).
        Identical on every rank.

    Examples
    --------
    ::

        recs = halo.time_halo(comm, "heat", ["blocking", "overlap"], sub=256)
        k1 = recs[0]["t_us_median"] / recs[1]["t_us_median"]
    """
    from .timing import record

    app = _check_app(app)
    modes = validate.names(mode, ALL_MODES, "mode", MODE_GROUPS)
    packs = validate.names(pack, PACKS, "pack")
    check_onesided(app, modes, packs)
    validate.count(reps, "reps")
    validate.count(rounds, "rounds")
    if iters is not None:
        validate.count(iters, "iters")
    if warmup is not None:
        validate.count(warmup, "warmup", 0)
    allowed = {"heat": {"energy"}, "wave": {"f0", "courant", "source"}}[app]
    extra = set(problem) - allowed
    if extra:
        raise TypeError(f"unexpected argument(s) for {app}: {sorted(extra)}")
    gx, gy, dims = _grid(comm, sub, nx, ny, dims)

    def timer(comm, gx, gy, *, mode, **kw):
        k = _kernel(app, mode)
        return (k.time_heat if app == "heat" else k.time_wave)(comm, gx, gy, mode=mode, **kw)

    for m in modes:  # raises on every rank alike
        if m in ONESIDED_MODES + HYBRID_MODES:
            _kernel(app, m).check_layout(comm, gx, gy, dims, m, packs[0])
        else:
            _kernel(app, m).layout(comm, gx, gy, dims, m, packs[0])

    if iters is None:
        it = 1
        while True:
            t = timer(comm, gx, gy, mode=modes[0], pack=packs[0], dims=dims, warmup=1,
                      iters=it, reps=3, **problem).min()
            if t * it >= min_time / 4 or it >= 1 << 20:
                iters = int(max(1, min(1 << 20, round(it * min_time / max(t * it, 1e-9)))))
                break
            it *= 8
    if warmup is None:
        warmup = min(iters, 10)
    pooled = {(m, p): [] for p in packs for m in modes}
    for _ in range(rounds):
        for p in packs:
            for m in modes:
                pooled[(m, p)].extend(timer(comm, gx, gy, mode=m, pack=p, dims=dims,
                                            warmup=warmup, iters=iters, reps=reps,
                                            **problem))
    nbytes = halo_bytes(app, gx, gy, dims)
    return [record(pooled[(m, p)], size_bytes=nbytes, app=app, mode=m, pack=p, sub=sub,
                   nx=gx, ny=gy, dims=list(dims), ranks=comm.Get_size(), iters=iters,
                   warmup=warmup)
            for p in packs for m in modes]


def timeline(comm, app: str, nx: int, ny: int, *, mode: str = "overlap",
             pack: str = "datatype", steps: int = 20, last: int = 5, root: int | None = 0,
             dims=None, **problem):
    """When each rank posted, computed, waited: phase timestamps of the last steps.

    Runs `steps` steps of `app` (collective) and records, for the last `last` of them,
    the start and end of every phase of every exchange round, in seconds after a barrier
    all ranks passed just before (``MPI_Wtime`` on one node is one clock):

    * ``exchange`` - the MPI calls that start (nonblocking, overlap) or do (blocking,
      sendrecv) the exchange, manual packing included;
    * ``interior`` - computing: the points that need no ghost while messages fly
      (overlap), or the whole block after the exchange (other modes);
    * ``wait`` - ``MPI_Waitall`` (nonblocking, overlap), unpacking included; empty for
      blocking and sendrecv;
    * ``boundary`` - the ring that needed the ghosts (the overlap modes; else empty);
    * ``progress`` - the total time of the ``MPI_Testall`` calls of ``overlap-test``,
      which are spread through its interior: not an interval of its own but the total,
      stamped from the interior's start (empty in the other modes).

    The exchange is the posting calls (``MPI_Startall`` for ``persistent``) or the whole
    exchange (blocking, sendrecv, and ``MPI_Neighbor_alltoallw`` for ``neighbor``).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
    app : {"heat", "wave"}
    nx, ny : int
        Global grid.
    mode, pack, dims, **problem
        As in :func:`run_heat` / :func:`run_wave`; two-sided :data:`MODES` only (the
        one-sided kernel records no phases: ValueError).
    steps, last : int
        Steps run, and how many of the last ones are recorded.
    root : int or None
        Rank that gathers every rank's timeline; None returns each rank its own.

    Returns
    -------
    numpy.ndarray or None
        On `root`: shape ``(ranks, rounds, 5, 2)`` (``rounds = last`` for the heat,
        ``2 * last`` for the wave: pressure exchange then velocity exchange), the last
        axis ``(start, end)``, the third :data:`PHASES`. None on other ranks. With
        ``root=None``: ``(rounds, 5, 2)`` of this rank on every rank.

    Examples
    --------
    ::

        tl = halo.timeline(comm, "heat", 2048, 2048, mode="overlap", steps=10, last=3)
        if comm.rank == 0:
            busy = (tl[..., 1] - tl[..., 0]).sum(axis=1)   # seconds per rank and phase
    """
    app = _check_app(app)
    if isinstance(mode, str) and mode in ONESIDED_MODES + HYBRID_MODES:
        raise ValueError(f"timeline has no one-sided modes ({mode!r}): the one-sided kernel "
                         f"records no phases; use one of {MODES}")
    validate.names(mode, MODES, "mode")
    validate.names(pack, PACKS, "pack")
    if root is not None:
        if isinstance(root, bool) or not isinstance(root, (int, np.integer)):
            raise TypeError(f"root must be an integer or None, not {type(root).__name__}")
        if not 0 <= root < comm.Get_size():
            raise ValueError(f"root={root} is not a rank of a {comm.Get_size()}-rank "
                             f"communicator")
    allowed = {"heat": {"energy"}, "wave": {"f0", "courant", "source"}}[app]
    extra = set(problem) - allowed
    if extra:
        raise TypeError(f"unexpected argument(s) for {app}: {sorted(extra)}")
    k = _kernel(app)
    fn = k.timeline_heat if app == "heat" else k.timeline_wave
    tl = fn(comm, nx, ny, steps, last=last, mode=mode, pack=pack, dims=dims, **problem)
    if root is None:
        return tl
    every = comm.gather(tl, root=root)
    return np.stack(every) if comm.Get_rank() == root else None


def timeline_frame(tl, app: str = "heat"):
    """A gathered :func:`timeline` as a tidy pandas DataFrame (one row per phase).

    Columns: ``rank``, ``step``, ``round`` (``"heat"``, or ``"pressure"`` /
    ``"velocity"`` for the wave), ``phase``, ``start``, ``end``, ``duration`` (s).
    """
    import pandas as pd

    app = _check_app(app)
    tl = np.asarray(tl, dtype=float)
    if tl.ndim != 4 or tl.shape[2:] != (len(PHASES), 2):
        raise ValueError(f"expected a gathered timeline (ranks, rounds, 5, 2), got {tl.shape}")
    names = ("heat",) if app == "heat" else ("pressure", "velocity")
    rows = []
    for r in range(tl.shape[0]):
        for k in range(tl.shape[1]):
            for f, phase in enumerate(PHASES):
                a, b = tl[r, k, f]
                rows.append({"rank": r, "step": k // len(names), "round": names[k % len(names)],
                             "phase": phase, "start": a, "end": b, "duration": b - a})
    return pd.DataFrame(rows)
