"""Which MPI this machine has: the library, its compiler wrapper and launcher, its facts.

``$MPILAB_MPI`` picks the library (else the one the active environment ships), and the
tools are looked up in the environment's own bin folders first, then under Debian's
side-by-side names, then on ``PATH``. Nothing here imports mpi4py at import time
(:func:`library_info` does when called), so ``setup.py`` can find the compiler wrapper.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys

from .cleanup import release_singleton_segments

LIBRARIES = ("openmpi", "mpich")


class MPINotFound(RuntimeError):
    """No usable MPI installation (compiler wrapper or launcher) was found."""


def selected_library() -> str:
    """The MPI the course uses on this machine: ``$MPILAB_MPI``; unset, the MPI the active
    environment ships (a venv with the PyPI ``mpich`` wheel: mpich), else openmpi.

    Returns
    -------
    str
        One of :data:`LIBRARIES`: ``"openmpi"`` or ``"mpich"``.

    Raises
    ------
    ValueError
        ``$MPILAB_MPI`` names another library.
    """
    lib = os.environ.get("MPILAB_MPI", "").strip().lower()
    if not lib:
        for d in env_bins():
            if os.path.exists(os.path.join(d, "mpichversion")):
                return "mpich"
        lib = "openmpi"
    if lib not in LIBRARIES:
        raise ValueError(f"MPILAB_MPI must be one of {LIBRARIES}, got {lib!r}")
    return lib


def env_bins() -> list[str]:
    """The active Python environment's bin folders: a venv with the PyPI ``openmpi`` or
    ``mpich`` wheel, or a conda environment, ships its own ``mpicc`` and ``mpiexec``.

    Returns
    -------
    list of str
        ``sys.prefix/bin``, then ``$CONDA_PREFIX/bin`` where that is set; whether they
        exist is not checked.
    """
    dirs = [os.path.join(sys.prefix, "bin")]
    if os.environ.get("CONDA_PREFIX"):
        dirs.append(os.path.join(os.environ["CONDA_PREFIX"], "bin"))
    return dirs


def _find_tool(base: str, lib: str) -> str:
    # The active environment's own MPI first (the one its mpi4py loads), then Debian's
    # side-by-side names (mpicc.openmpi / mpicc.mpich), then the plain name on PATH
    # (most clusters' modules).
    for d in env_bins():
        path = os.path.join(d, base)
        if os.access(path, os.X_OK) and _launcher_family_of_tool(path, base) in (lib, "unknown"):
            return path
    for name in (f"{base}.{lib}", base):
        path = shutil.which(name)
        if path:
            return path
    raise MPINotFound(
        f"no {base} found for {lib}: run `make setup` (Debian, as root) or "
        "`conda env create -f environment.yml`"
    )


def mpicc(lib: str | None = None) -> str:
    """Path of the MPI C compiler wrapper (``$MPICC`` wins).

    Parameters
    ----------
    lib : {"openmpi", "mpich"}, optional
        The library whose wrapper is wanted (default :func:`selected_library`).

    Returns
    -------
    str
        ``$MPICC`` if set, else the first ``mpicc`` of `lib` found in the environment's
        bin folders, as ``mpicc.<lib>`` or as ``mpicc`` on ``PATH``.

    Raises
    ------
    MPINotFound
        No such wrapper was found.
    """
    return os.environ.get("MPICC") or _find_tool("mpicc", lib or selected_library())


def mpiexec(lib: str | None = None) -> str:
    """Path of the MPI launcher (``$MPILAB_MPIEXEC`` wins).

    Parameters
    ----------
    lib : {"openmpi", "mpich"}, optional
        The library whose launcher is wanted; the default as for :func:`mpicc`.

    Returns
    -------
    str
        ``$MPILAB_MPIEXEC`` if set, else the first ``mpiexec`` of `lib` found in the
        environment's bin folders, as ``mpiexec.<lib>`` or as ``mpiexec`` on ``PATH``.

    Raises
    ------
    MPINotFound
        No such launcher was found.
    """
    return os.environ.get("MPILAB_MPIEXEC") or _find_tool("mpiexec", lib or selected_library())


@functools.cache
def library_info() -> dict:
    """Name, family and version of the MPI library mpi4py loaded.

    Imports ``mpi4py.MPI`` (which initialises MPI) on the first call; cached after it.

    Returns
    -------
    dict
        ``mpi_library`` (``"openmpi"``, ``"mpich"`` or ``"other"``), ``mpi_version``
        (``"4.1.4"``; empty when it cannot be told), ``mpi_library_version`` (the first
        line of ``MPI_Get_library_version``), ``mpi_standard`` (``"3.1"``),
        ``mpi4py_version`` and ``thread_level``: the level ``MPI_Init_thread`` provided
        to this process (``MPI_Query_thread``: ``single``, ``funneled``, ``serialized``
        or ``multiple``; the cluster's engines ask for ``funneled``, the benchmarks'
        jobs for ``single``, :func:`mpilab.runtime.launch`; None where MPI is not
        running, as in the doctor's probe, which does not start it).
    """
    from mpi4py import MPI

    release_singleton_segments()
    text = MPI.Get_library_version().replace("\x00", "").strip()  # C string: NUL-ended
    first = text.splitlines()[0].strip() if text else "unknown"
    low = text.lower()
    family = "openmpi" if "open mpi" in low else "mpich" if "mpich" in low else "other"
    version = ""
    if family == "openmpi":
        # "Open MPI v4.1.4, package: ..."
        version = first.split(",")[0].replace("Open MPI", "").strip().lstrip("v")
    elif family == "mpich":
        for line in text.splitlines():
            if line.lower().startswith("mpich version:"):
                version = line.split(":", 1)[1].strip()
    import mpi4py

    return {
        "mpi_library": family,
        "mpi_version": version,
        "mpi_library_version": first,
        "mpi_standard": "{}.{}".format(*MPI.Get_version()),
        "mpi4py_version": mpi4py.__version__,
        # MPI_Query_thread is erroneous before MPI_Init (Open MPI 5 raises): the doctor
        # asks for the library's name without starting MPI
        "thread_level": ({MPI.THREAD_SINGLE: "single", MPI.THREAD_FUNNELED: "funneled",
                          MPI.THREAD_SERIALIZED: "serialized",
                          MPI.THREAD_MULTIPLE: "multiple"}[MPI.Query_thread()]
                         if MPI.Is_initialized() and not MPI.Is_finalized() else None),
    }


def library_info_of_a_fresh_process(thread_level: str = "funneled") -> dict:
    """:func:`library_info` as a fresh Python process reports it, MPI asked for at
    `thread_level`: for a process that must stay without MPI itself (a bench that starts
    graders) yet label its results with the library their ranks load.

    Parameters
    ----------
    thread_level : str, optional
        The level the fresh process's mpi4py asks for (``MPI4PY_RC_THREAD_LEVEL``); default
        ``"funneled"``, the graders' ranks' (:mod:`mpilab.autograder.pool`).

    Returns
    -------
    dict
        What :func:`library_info` returned there; empty when the process failed.
    """
    import json

    res = subprocess.run([sys.executable, "-c", "import json; from mpilab import runtime; "
                          "print(json.dumps(runtime.library_info()))"],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "MPI4PY_RC_THREAD_LEVEL": thread_level})
    return json.loads(res.stdout) if res.returncode == 0 else {}


def _launcher_family_of_tool(path: str, base: str) -> str:
    """Which library an environment's mpicc/mpiexec belongs to (by the files beside it)."""
    bindir = os.path.dirname(path)
    if os.path.exists(os.path.join(bindir, "ompi_info")):
        return "openmpi"
    if os.path.exists(os.path.join(bindir, "mpichversion")):
        return "mpich"
    return "unknown"


def _launcher_family(path: str) -> str:
    """Ask the launcher itself which library it belongs to."""
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=20
        ).stdout.lower()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if "open mpi" in out or "open-mpi" in out or "openrte" in out or "prte" in out:
        return "openmpi"
    if "hydra" in out or "mpich" in out:
        return "mpich"
    return "unknown"


@functools.cache
def launcher_family(path: str | None = None) -> str:
    """Which library a launcher belongs to, as its ``--version`` says (cached per path).

    Parameters
    ----------
    path : str, optional
        The launcher (default :func:`mpiexec`).

    Returns
    -------
    str
        ``"openmpi"``, ``"mpich"`` or ``"unknown"`` (no answer within 20 seconds, or an
        answer that names neither).
    """
    return _launcher_family(path or mpiexec())


def openmpi_major(path: str | None = None) -> int:
    """The major version of the Open MPI whose launcher is `path` (default: this course's);
    4 when it cannot be told.

    Parameters
    ----------
    path : str, optional
        The launcher to ask (``--version``); default :func:`mpiexec`.

    Returns
    -------
    int
        The major version (4, 5, ...); 4 when the launcher does not answer within 20
        seconds or prints no version number.
    """
    return _openmpi_major(path or mpiexec())


@functools.cache
def _openmpi_major(path: str) -> int:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return 4
    for tok in out.stdout.replace("(", " ").replace(")", " ").split():
        if tok[:1].isdigit() and "." in tok:
            try:
                return int(tok.split(".")[0])
            except ValueError:
                pass
    return 4


def eager_limits(library: str | None = None) -> dict:
    """Configured eager limits in bytes by transport (``{"shm": 4096, "tcp": 65536}``).

    Read from ``ompi_info`` for Open MPI. MPICH keeps them in control variables that
    this does not read: ``{}``, as for an unknown library.

    Parameters
    ----------
    library : {"openmpi", "mpich"}, optional
        The library (default :func:`selected_library`).

    Returns
    -------
    dict of str to int
        Eager limit in bytes by transport (``"shm"``: the ``vader`` or ``sm`` BTL,
        ``"tcp"``); a transport ``ompi_info`` does not report is left out, and so is
        every one for MPICH or where ``ompi_info`` is not on ``PATH``.
    """
    library = library or selected_library()
    info = shutil.which("ompi_info")
    if library != "openmpi" or not info:
        return {}
    found = {}
    for transport, btls in {"shm": ("vader", "sm"), "tcp": ("tcp",)}.items():
        for btl in btls:
            try:
                text = subprocess.run([info, "--param", "btl", btl, "--level", "9",
                                       "--parsable"], capture_output=True, text=True,
                                      timeout=30).stdout
            except (OSError, subprocess.TimeoutExpired):
                continue
            for line in text.splitlines():
                if line.startswith(f"mca:btl:{btl}:param:btl_{btl}_eager_limit:value:"):
                    found[transport] = int(line.rsplit(":", 1)[1])
                    break
            if transport in found:
                break
    return found
