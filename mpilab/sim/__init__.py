"""Simulated clusters: the course's own C kernels at the papers' process counts (SimGrid SMPI).

The papers ran 32 to 2304 processes; a student's machine has a few cores. SimGrid's SMPI
runs an unmodified C MPI program on a *simulated* platform: every rank is a thread of one
process, every message is timed by a network model of the platform's links, and the
program reads the simulated clock through ``MPI_Wtime``. This module builds the course's
standalone kernels (``kernels/pingpong/pingpong_main.c``, ``kernels/collectives/coll_main.c``,
``kernels/stencil/halo_main.c``, linked with the same ``c_*.c`` files the Python kernels
use) with ``smpicc``, runs them with ``smpirun`` through :mod:`mpilab.jobs` (so a hung or
killed simulation leaves nothing behind), and returns records shaped like the real
benchmarks' plus ``simulated: True``, ``platform`` and ``label``.

Platforms are XML files in ``mpilab/platforms/`` (one per paper's machine, every number
with its source or marked as assumed), plus ``this-machine``, written by
:func:`calibrate` from a real ping-pong on this machine: compare the two side by side
(:func:`check_this_machine`) before believing any scale-out.

What a simulation is, and is not
--------------------------------
* Messages: a latency + bandwidth model per link, with contention where flows share a
  link (a node's network card, the backbone). Messages inside a node cross the node's
  loopback link, with no contention: memory-bandwidth contention between the cores of a
  node, caches and shared-window effects are **not** simulated.
* Computation: the collective and ping-pong runs switch it off (``compute=False``: only
  communication costs time; results are exactly reproducible). The halo runs charge a
  fixed compute model (:mod:`.halos`): each point a rank updates costs the time one point
  took on this machine, benchmarked once per block size with one simulated rank alone,
  the same in every mode, so modes differ by their communication only and the results
  are reproducible for a given benchmark. A simulated core is as fast as one of this
  machine's, with a cache of its own and no neighbour competing for memory.
  (``compute="measured"`` times each rank's loops on the host instead, one rank after
  another: this machine's noise, a few per cent, then differs between runs of modes.)
* The library: SMPI's own implementation of MPI, with ports of Open MPI's and MPICH's
  collective algorithms and decision rules (``--cfg=smpi/coll-selector:ompi``), not the
  real libraries.

Every record and every figure carries ``label``: ``"simulated (SMPI, platform NAME)"``.

The package's modules: :mod:`.smpi` (SimGrid's tools, the programs built with
``smpicc``), :mod:`.machines` (the platforms and the hostfile), :mod:`.experiments`
(:func:`run`, the ping-pong and collective experiments, the saved references),
:mod:`.halos` (the halo exchange and its compute model)
and :mod:`.calibration` (``this-machine`` and the checks against real runs). Every name
is here as ``sim.<name>``.
"""

# ruff: noqa: F401 - the names beyond __all__ are the module's API as before the split
from __future__ import annotations

from .calibration import (
    _THIS_MACHINE,
    CALIBRATION_SIZES,
    calibrate,
    check_collective,
    check_this_machine,
    measure_collective,
)
from .experiments import (
    _DTYPE,
    LEAVES_OUT,
    OUR_ALGORITHMS,
    SMPI_ALLGATHER,
    _alg_code,
    _launch,
    _progress,
    _record,
    allgather,
    allgather_summary,
    collective,
    load_reference,
    meta,
    pingpong,
    reference_dir,
    run,
)
from .halos import (
    MODEL_LEAVES_OUT,
    NOT_SIMULATED_HALO_MODES,
    SIMULATED_HALO_MODES,
    compute_cost,
    halo,
)
from .machines import (
    PLATFORM_DIR,
    SPEED,
    Platform,
    _parse,
    _this_machine_path,
    hostfile,
    label,
    platform,
    platforms,
)
from .smpi import (
    CFLAGS,
    KERNELS,
    PROGRAMS,
    SimUnavailable,
    _cache_dir,
    _stamp,
    _tools,
    available,
    build,
    version,
)

__all__ = ["SimUnavailable", "Platform", "available", "platforms", "platform", "label",
           "build", "run", "meta", "pingpong", "collective", "allgather", "halo", "compute_cost", "calibrate",
           "check_this_machine", "check_collective", "measure_collective", "PROGRAMS", "SMPI_ALLGATHER", "OUR_ALGORITHMS"]
