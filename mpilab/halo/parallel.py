"""The collective functions: the heat and the wave run, gathered and timed on an mpi4py
communicator through the compiled kernels (every rank of it calls them)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import validate
from . import problem as _problem
from .problem import (
    ALL_MODES,
    HYBRID_MODES,
    MODES,
    ONESIDED_MODES,
    PACKS,
    PHASES,
    _check_app,
    check_onesided,
    halo_bytes,
)


def _kernel(app: str, mode: str | None = None):
    from ..kernels import stencil, wave

    if mode in ONESIDED_MODES + HYBRID_MODES:
        from ..kernels import onesided

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

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        Every rank of it calls this function.
    nx, ny : int
        Global grid, in cells (columns, rows).
    steps : int
        Time steps from the field at rest.
    mode : str
        One of the two-sided :data:`MODES` (see :func:`run_heat`).
    pack : str
        One of :data:`PACKS` (see :func:`run_heat`).
    f0 : float
        Central frequency of the Ricker wavelet (as in :func:`serial_wave`).
    courant : float
        The time step ``dt``, in ``(0, 1/sqrt(2)]``.
    source : (x, y), optional
        Source cell in the global grid; default the centre, as :func:`serial_wave`.
    dims : (py, px), optional
        Process grid; default ``MPI_Dims_create(size, 2)``.

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


#: the pages the two-sided heat kernel can put its fields on (``pages=`` of
#: :func:`time_halo`): huge pages asked for (the default), or 4 KiB pages only
PAGES = ("huge-pages", "4k-pages")


def huge_share(comm, app: str, mode: str, *, nx: int, ny: int, pack="datatype", dims=None,
               pages: str = "huge-pages") -> float | None:
    """The share of huge pages under the fields `mode` computes on (collective).

    The kernel allocates them as :func:`time_halo` does (the two-sided modes: the
    course's own fields on the kind of page `pages` names; the one-sided and hybrid
    modes: the MPI library's window, huge pages asked for in the same way) and reads
    ``/proc/self/smaps`` right after: a shared window's memory comes from a file in
    ``/dev/shm``, which takes huge pages only where Linux lets shared memory have them
    (lecture 03); on one rank it is the library's ordinary memory from ``malloc``, whose
    pages depend on what the process freed before (each allocation may differ:
    :func:`time_halo`'s records keep the least over their own calls).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
    app : {"heat"}
        Only the heat's kernels say it.
    mode : str
        One of :data:`ALL_MODES`.
    nx, ny : int
        The global grid.
    pack : str
        One of :data:`PACKS` (``"datatype"`` for a one-sided mode).
    dims : (py, px), optional
        Process grid; default ``MPI_Dims_create``.
    pages : {"huge-pages", "4k-pages"}
        Two-sided modes only: what :func:`time_halo` is asked for.

    Returns
    -------
    float or None
        The least share over the ranks (0 to 1), the same on every rank; None where
        ``/proc/self/smaps`` could not be read.
    """
    if _check_app(app) != "heat":
        raise ValueError("only the heat's kernels say what pages their fields got")
    mode = _single_mode(mode, ALL_MODES)
    gx, gy, dims = _grid(comm, None, nx, ny, dims)
    if mode in ONESIDED_MODES + HYBRID_MODES:
        if pages != "huge-pages":
            raise ValueError(f"the {mode!r} fields are the MPI library's window: pages= "
                             "applies to the two-sided modes only")
        return _kernel(app, mode).huge_share(comm, gx, gy, mode=mode, pack=pack, dims=dims)
    return _kernel(app, mode).huge_share(comm, gx, gy, mode=mode, pack=pack, dims=dims,
                                         pages=pages)


def time_halo(comm, app: str, mode="all", sub: int | None = None, *, nx: int | None = None,
              ny: int | None = None, pack="datatype", iters: int | None = None,
              warmup: int | None = None, reps: int = 5, rounds: int = 1,
              min_time: float = 0.01, dims=None, pages="huge-pages",
              **problem) -> list[dict]:
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
    min_time : float
        Seconds a repetition should last when `iters` is calibrated (default 0.01).
    dims : (py, px), optional
        Process grid; default ``MPI_Dims_create``.
    pages : str or list of str
        :data:`PAGES` the two-sided modes' fields sit on (heat only; the wave's are
        always on huge pages): each two-sided mode is measured on each kind, side by
        side. The one-sided and hybrid modes compute on the MPI library's window,
        whatever pages it got, once: ``"4k-pages"`` puts the two kinds of field alike
        where shared memory takes no huge pages (lecture 03).
    **problem
        ``energy`` for the heat; ``f0``, ``courant``, ``source`` for the wave.

    Returns
    -------
    list of dict
        One record per (mode, pack, pages) in the shape of :func:`mpilab.timing.record`, times
        per step: ``t_us_min``, ``t_us_median``, quartiles, ``spread``, ``times_us``, plus
        ``app``, ``mode``, ``pack``, ``sub``, ``nx``, ``ny``, ``dims``, ``ranks``,
        ``iters``, ``warmup``; ``size_bytes`` is :func:`halo_bytes` (all ranks, one step).
        The heat's also say ``pages`` (what the two-sided fields were asked for; None for
        a window) and ``huge_page_share``: the least share of huge pages under the
        fields over the timed calls (each call allocates its own; None where
        /proc/self/smaps could not be read).
        Identical on every rank.

    Examples
    --------
    ::

        recs = halo.time_halo(comm, "heat", ["blocking", "overlap"], sub=256)
        k1 = recs[0]["t_us_median"] / recs[1]["t_us_median"]
    """
    from ..timing import record

    app = _check_app(app)
    modes = validate.names(mode, ALL_MODES, "mode", _problem.MODE_GROUPS)
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
    kinds = validate.names(pages, PAGES, "pages")
    if app == "wave" and kinds != ["huge-pages"]:
        raise ValueError("the wave's fields are on huge pages only: pages= is the heat's")
    gx, gy, dims = _grid(comm, sub, nx, ny, dims)

    def two_sided(m):
        return m not in ONESIDED_MODES + HYBRID_MODES

    def timer(comm, gx, gy, *, mode, pages=None, **kw):
        k = _kernel(app, mode)
        if app == "wave":
            return k.time_wave(comm, gx, gy, mode=mode, **kw)
        if pages is not None:
            kw["pages"] = pages
        return k.time_heat(comm, gx, gy, mode=mode, **kw)

    for m in modes:  # raises on every rank alike
        if m in ONESIDED_MODES + HYBRID_MODES:
            _kernel(app, m).check_layout(comm, gx, gy, dims, m, packs[0])
        else:
            _kernel(app, m).layout(comm, gx, gy, dims, m, packs[0])
    # what is measured: every mode and packing; the heat's two-sided modes once per kind
    # of page, a window (the MPI library's memory) once
    runs = [(m, p, g) for p in packs for m in modes
            for g in (kinds if app == "heat" and two_sided(m) else [None])]

    if iters is None:
        it = 1
        m0, p0, g0 = runs[0]
        while True:
            t = timer(comm, gx, gy, mode=m0, pack=p0, pages=g0, dims=dims, warmup=1,
                      iters=it, reps=3, **problem).min()
            if t * it >= min_time / 4 or it >= 1 << 20:
                iters = int(max(1, min(1 << 20, round(it * min_time / max(t * it, 1e-9)))))
                break
            it *= 8
    if warmup is None:
        warmup = min(iters, 10)
    pooled = {run: [] for run in runs}
    shares = {run: [] for run in runs}  # the heat's: what each timed call's fields got
    for _ in range(rounds):
        for m, p, g in runs:
            got = np.full(1, -1.0) if app == "heat" else None
            pooled[(m, p, g)].extend(timer(comm, gx, gy, mode=m, pack=p, pages=g, dims=dims,
                                           warmup=warmup, iters=iters, reps=reps,
                                           **({"share": got} if got is not None else {}),
                                           **problem))
            if got is not None:
                shares[(m, p, g)].append(None if got[0] < 0 else float(got[0]))
    nbytes = halo_bytes(app, gx, gy, dims)

    def where(run):
        if app != "heat":
            return {}
        seen = shares[run]
        return {"pages": run[2],  # the least over the calls, as the ping-pong's records
                "huge_page_share": None if None in seen else min(seen)}

    return [record(pooled[run], size_bytes=nbytes, app=app, mode=run[0], pack=run[1],
                   sub=sub, nx=gx, ny=gy, dims=list(dims), ranks=comm.Get_size(),
                   iters=iters, warmup=warmup, **where(run))
            for run in runs]


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

    Parameters
    ----------
    tl : array_like
        What :func:`timeline` returns on its root: shape ``(ranks, rounds, 5, 2)``.
    app : {"heat", "wave"}
        The problem timed: the wave has two exchange rounds per step.

    Returns
    -------
    pandas.DataFrame
        One row per rank, round and phase; times in seconds after the common barrier.

    Raises
    ------
    ValueError
        An unknown `app`, or `tl` of another shape (one rank's timeline, for instance).
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
