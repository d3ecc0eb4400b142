"""Compiled kernels (C + Cython), one module per folder of ``kernels/``.

``from mpilab.kernels import pingpong`` gives the module; its function of the same name
is the kernel. Each takes an mpi4py communicator and never initialises MPI itself.
"""

import importlib
import os
import re
from pathlib import Path

#: The one list of kernels: module name -> its C sources in ``kernels/<name>/`` (besides
#: ``<name>.pyx``). setup.py builds exactly these; this package imports exactly these.
KERNELS = {
    "pingpong": ["c_pingpong.c"],
    "memcopy": ["c_memcopy.c"],
    "stencil": ["c_stencil.c"],
    "wave": ["c_wave.c"],
    "collectives": ["c_collectives.c"],
    "onesided": ["c_onesided.c"],
    "matching": ["c_matching.c"],
}
#: Standalone MPI programs (into ``_bin/``): name -> sources under ``kernels/``.
#: The same programs are built with SimGrid's smpicc by mpilab.sim (simulated clusters).
STANDALONE = {
    "mpilab-pingpong": ["pingpong/c_pingpong.c", "pingpong/pingpong_main.c"],
    "mpilab-coll": ["collectives/c_collectives.c", "collectives/coll_main.c"],
    "mpilab-halo": ["stencil/c_stencil.c", "wave/c_wave.c", "stencil/halo_main.c"],
}
NAMES = tuple(KERNELS)
BIN = Path(__file__).parent / "_bin"
#: Where the sources live. A checkout keeps them in the repository's ``kernels/``; an
#: installed wheel carries the same tree as package data in ``mpilab/_kernel_src/``
#: (setup.py maps the package ``mpilab._kernel_src`` onto ``kernels/``), so what
#: builds from source at run time (coarray programs, SimGrid programs, a notebook's
#: Cython that includes ``kernels/common``) finds it either way.
_PACKAGED_SOURCES = Path(__file__).resolve().parent.parent / "_kernel_src"
_CHECKOUT_SOURCES = Path(__file__).resolve().parent.parent.parent / "kernels"


def mpi_libraries() -> list[str]:
    """The MPI libraries (``libmpi.so*``, ``libmpich.so*``) this process has loaded.

    Whoever asks has loaded MPI (``from mpi4py import MPI`` initialises it): an MPI
    singleton's segment is released here too (runtime.release_singleton_segments).
    """
    from .. import runtime

    runtime.release_singleton_segments()
    found = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split(None, 5)[-1].strip()
                if re.match(r"libmpi(ch)?\.so", os.path.basename(path)):
                    found.add(os.path.realpath(path))
    except OSError:  # pragma: no cover - not Linux
        pass
    return sorted(found)


def compiled(name: str):
    """The compiled kernel module `name`, imported as it is (no check of its MPI library).

    The one place that imports a kernel by its name: :func:`__getattr__` (``kernels.X``)
    and the grader's watch over the kernels (:func:`mpilab.autograder.watch.guard_kernels`).

    Parameters
    ----------
    name : str
        The kernel's name, one of :data:`NAMES` (``"pingpong"``, ``"stencil"`` ...).

    Returns
    -------
    module
        ``mpilab.kernels.<name>``.

    Raises
    ------
    ImportError
        When it is not built (or `name` is not a kernel's).
    """
    if name not in NAMES:
        raise ImportError(f"{name!r} is not one of the course's kernels {NAMES}")
    return importlib.import_module(f"{__name__}.{name}")


def __getattr__(name):
    if name not in NAMES:
        raise AttributeError(f"module 'mpilab.kernels' has no attribute {name!r}")
    try:
        module = compiled(name)
    except ImportError as exc:
        raise ImportError(
            f"the compiled kernel {name!r} is not built ({exc}); run `make kernels`"
        ) from exc
    # Importing a kernel initialises MPI: a process that did so alone (a notebook's kernel)
    # must not leave Open MPI 5's singleton segment in /dev/shm; mpi_libraries() below
    # releases it. A kernel compiled with another MPI's mpicc than the library mpi4py
    # loaded brings a second libmpi into the process, and its first call crashes: say so.
    libs = mpi_libraries()
    if len(libs) > 1:
        raise ImportError(
            f"the compiled kernel {name!r} and mpi4py use different MPI libraries "
            f"({', '.join(libs)}): the kernels were built for another MPI than the one in "
            "use; run `make kernels` (a checkout) or reinstall mpilab with this MPI")
    return module


def source_dir() -> Path:
    """The folder of the kernels' sources (``common/``, ``caf/``, one folder per kernel).

    The package's own copy when mpilab is installed from a wheel, else the checkout's
    ``kernels/`` (an editable install, or ``make kernels`` in place).
    """
    if _PACKAGED_SOURCES.is_dir():
        return _PACKAGED_SOURCES
    if _CHECKOUT_SOURCES.is_dir():
        return _CHECKOUT_SOURCES
    raise FileNotFoundError(
        f"the kernels' sources are neither in {_PACKAGED_SOURCES} (an installed mpilab) nor "
        f"in {_CHECKOUT_SOURCES} (a checkout): reinstall mpilab")


def program(name: str) -> Path:
    """Path of a standalone kernel program, e.g. ``program('mpilab-pingpong')``."""
    path = BIN / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is not built; run `make kernels` (in a checkout) "
                                "or reinstall mpilab")
    return path
