"""Compiled kernels (C + Cython), one module per folder of ``kernels/``.

``from mpilab.kernels import pingpong`` gives the module; its function of the same name
is the kernel. Each takes an mpi4py communicator and never initialises MPI itself.
"""

import importlib
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


def __getattr__(name):
    if name not in NAMES:
        raise AttributeError(f"module 'mpilab.kernels' has no attribute {name!r}")
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ImportError as exc:
        raise ImportError(
            f"the compiled kernel {name!r} is not built ({exc}); run `make kernels`"
        ) from exc


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
