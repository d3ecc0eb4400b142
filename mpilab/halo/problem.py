"""The problems (heat and wave) and their decomposition, in plain NumPy: the modes'
names, the process grid and blocks, the serial references the parallel runs must equal,
and the bytes a step exchanges."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .. import validate

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

    Parameters
    ----------
    ranks : int
        Number of processes (>= 1).

    Returns
    -------
    (int, int)
        ``(py, px)``: process rows and columns, ``py >= px``, ``py * px == ranks``.

    Raises
    ------
    ValueError
        `ranks` is not a positive integer.
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

    Parameters
    ----------
    n : int
        Points to distribute (>= 1).
    parts : int
        Owners (ranks along one axis), at most `n`.

    Returns
    -------
    list of (int, int)
        ``(start, count)`` of each owner, in order; the counts add up to `n`.

    Raises
    ------
    TypeError
        `n` or `parts` is not an integer.
    ValueError
        `n` or `parts` below 1, or more owners than points.
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

    Parameters
    ----------
    nx, ny : int
        Grid points along x (columns) and y (rows).

    Returns
    -------
    list of (int, int)
        The three points ``(x, y)``, in the order above.
    """
    nx = validate.count(nx, "nx")
    ny = validate.count(ny, "ny")
    return [(nx // 2, ny // 2), (nx // 3, ny // 3), (nx * 4 // 5, ny * 8 // 9)]


def heat_step(old: np.ndarray, new: np.ndarray) -> None:
    """One stencil update of the interior of `old` (with its ghost frame) into `new`.

    Both arrays have shape ``(rows + 2, cols + 2)``; only ``new[1:-1, 1:-1]`` is written.

    Parameters
    ----------
    old : numpy.ndarray
        The field before the step, its ghost frame filled (zeros at the grid's edge).
    new : numpy.ndarray
        Where the interior after the step is written (in place), same shape.
    """
    new[1:-1, 1:-1] = old[1:-1, 1:-1] / 2.0 + (
        old[:-2, 1:-1] + old[2:, 1:-1] + old[1:-1, :-2] + old[1:-1, 2:]) / 8.0


def boundary_loss(u: np.ndarray) -> float:
    """Heat that one step moves out of the grid `u` (shape ``(ny, nx)``, no frame).

    Each point on the edge hands an eighth of its heat to each neighbour outside the
    grid, so ``sum(next) == sum(u) - boundary_loss(u) + sources added``: the
    conservation law every correct step obeys.

    Parameters
    ----------
    u : array_like
        The temperature field, shape ``(ny, nx)``.

    Returns
    -------
    float
        The heat lost in one step: an eighth of each edge point's heat per side it
        lies on (a corner counts twice).
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
    """Ricker wavelet ``(1 - 2 pi^2 f0^2 (t - t0)^2) exp(-pi^2 f0^2 (t - t0)^2)``, t0 = 1/f0.

    Parameters
    ----------
    t : float
        Time, in the wave's units (time steps of ``dt`` add up to it).
    f0 : float
        Central frequency (> 0); the peak is at ``t0 = 1/f0``.

    Returns
    -------
    float
        The wavelet's value, 1 at its peak.
    """
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

    Parameters
    ----------
    nx, ny : int
        Global grid points along x (columns) and y (rows).
    dims : (int, int)
        The process grid ``(py, px)``.

    Returns
    -------
    list of (int, int, int, int)
        ``(y0, rows, x0, cols)`` of each rank, indexed by rank.

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

    Parameters
    ----------
    app : {"heat", "wave"}
        The problem.
    nx, ny, dims
        As for :func:`blocks`.

    Returns
    -------
    int
        Bytes (8 per float64 value), all interfaces and both directions together.
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
    only.

    Parameters
    ----------
    app : {"heat", "wave"}
        The problem.
    modes : sequence of str
        The modes asked for; only the one-sided and hybrid ones are checked.
    packs : sequence of str
        The packings asked for.

    Raises
    ------
    ValueError
        A one-sided or hybrid mode with the wave, or with a packing other than
        ``"datatype"``.
    """
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
