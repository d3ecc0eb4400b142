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

The package's modules: :mod:`.problem` (the problems, the modes' names, the
decomposition and the serial references, plain NumPy) and :mod:`.parallel` (the
collective functions); every name of theirs is here as ``halo.<name>``. The lesson's
experiments, each an MPI job with its ranks' entry point (``python -m
mpilab.halo.<experiment> --worker``) and the command line ``python -m mpilab.bench
<name>`` over it, are imported by their module's name (``from mpilab.halo import
progress``): :mod:`.k1` (every mode timed by subdomain size, checked: the K1 table),
:mod:`.progress` (does a nonblocking exchange overlap the computation?) and
:mod:`.stencil_sweep` (the sweep against a memory copy of its bytes).
"""

# ruff: noqa: F401 - the names beyond __all__ are the module's API as before the split
from __future__ import annotations

from .parallel import (
    PAGES,
    _grid,
    _kernel,
    _single_mode,
    gather,
    huge_share,
    run_heat,
    run_wave,
    time_halo,
    timeline,
    timeline_frame,
)
from .problem import (
    ALL_MODES,
    APPS,
    CLASSIC_MODES,
    HYBRID_MODES,
    MODE_GROUPS,
    MODES,
    ONESIDED_MODES,
    PACKS,
    PHASES,
    PROGRESS_MODES,
    SHARED_WINDOW_MODES,
    _check_app,
    blocks,
    boundary_loss,
    check_onesided,
    halo_bytes,
    heat_sources,
    heat_step,
    process_grid,
    ricker,
    serial_heat,
    serial_wave,
    split,
)

__all__ = ["split", "process_grid", "heat_sources", "heat_step", "serial_heat", "boundary_loss",
           "MODES", "CLASSIC_MODES", "PROGRESS_MODES", "ONESIDED_MODES", "HYBRID_MODES", "SHARED_WINDOW_MODES", "ALL_MODES", "PACKS", "APPS", "PHASES", "ricker", "serial_wave", "blocks",
           "halo_bytes", "run_heat", "run_wave", "gather", "time_halo", "huge_share", "PAGES", "timeline",
           "timeline_frame"]
