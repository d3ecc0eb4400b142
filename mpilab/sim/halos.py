"""The halo exchange on a simulated platform: :func:`halo`, and the fixed compute model
its steps are charged with (:func:`compute_cost`).

SMPI runs every simulated rank in one process on this machine, one after another. Timing
each rank's loops on the host and charging that time (``smpi/simulate-computation:yes``)
puts this machine's noise into every step: in a run of one mode the ranks' computing came
out a few per cent slower than in a run of another, larger than the whole exchange at
1024² per rank. So the steps are charged with a fixed model instead: the computing of
one grid point, benchmarked once per block size on this machine (one simulated rank
alone, :func:`compute_cost`), is charged per point that each update touches, with SMPI's
``smpi_execute_benched`` (``HALO_CHARGE`` in ``kernels/common/mpilab_halo.h``), and the
host time of the loops is not counted (``smpi/simulate-computation:no``). Every mode of a
call then pays exactly the same computing, and the difference between modes is the
communication alone. The loops still run, so every field is the serial program's.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from .. import validate
from . import machines
from .experiments import _progress, _record, run
from .machines import Platform, label

#: The functions below read it as ``globals()["platform"]``: their parameter has its name.
platform = machines.platform
#: What the fixed compute model leaves out, in one sentence (records and tables say it).
MODEL_LEAVES_OUT = ("the computing's variation from step to step and rank to rank (every "
                    "point costs the benchmarked time), the cost of packing and copying "
                    "halo data, and anything that makes a rank compute slower while "
                    "messages arrive (memory traffic of the copies, a shared cache)")


def compute_cost(app: str, rows: int, cols: int, *, platform: str | Platform,
                 reps: int = 5, timeout: float = 600) -> float:
    """Seconds of computing per grid point and step of `app` on a `rows` x `cols` block.

    Benchmarked on this machine: one simulated rank alone (a 1 x 1 process grid: every
    neighbour is ``MPI_PROC_NULL``, so nothing is sent), its host time charged
    (``smpi/simulate-computation:yes``, ``smpi/cpu-threshold:-1`` so that no short
    stretch between MPI calls is dropped), enough steps per repetition for about two
    million point updates; the median of `reps` repetitions, divided by the points.

    Parameters
    ----------
    app : {"heat", "wave"}
        The stencil.
    rows, cols : int
        The block one rank computes.
    platform : str or Platform
        The simulated machine the benchmark runs on (its host speed is every platform's,
        :data:`mpilab.sim.SPEED`: simulated time is host time).
    reps : int, optional
        Timed repetitions (default 5).
    timeout : float, optional
        Seconds of real time the benchmark may take (default 600).

    Returns
    -------
    float
        Seconds per point and step.
    """
    validate.names(app, ("heat", "wave"), "app")
    rows, cols = validate.count(rows, "rows"), validate.count(cols, "cols")
    iters = max(3, math.ceil(2e6 / (rows * cols)))
    objs, _ = run("mpilab-halo", [app, "blocking", "datatype", cols, rows, 1, 1, 0, 2, iters,
                                  reps], ranks=1, platform=platform, compute=True,
                  cfg={"smpi/cpu-threshold": "-1"}, timeout=timeout)
    return statistics.median(objs[0]["times"]) / (rows * cols)


#: The halo modes :func:`halo` simulates, and why the other two-sided ones are not.
SIMULATED_HALO_MODES = ("blocking", "sendrecv", "nonblocking", "overlap", "persistent")
NOT_SIMULATED_HALO_MODES = {
    "neighbor": "SimGrid's SMPI does not implement MPI_Neighbor_alltoallw (an "
                "'unimplemented' stub in smpi_mpi.cpp)",
    "overlap-test": "SMPI moves every message in simulated time whatever the ranks do (it "
                    "has no progress rule for MPI_Testall to help), and charges each "
                    "unsuccessful MPI_Test a sleep that grows with every call (smpi/test, "
                    "0.1 ms at first: smpi_request.cpp), so the mode would measure SMPI's "
                    "sleeps",
}


def halo(app: str, modes: Sequence[str], *, ranks: int, platform: str | Platform,
         sub: int | None = None, nx: int | None = None, ny: int | None = None,
         map_by: str = "slot", per_node: int | None = None, compute: bool | str = "model",
         pack: str = "datatype", steps: int = 2, warmup: int = 1, iters: int = 3,
         reps: int = 3, timeout: float = 900, progress=None) -> list[dict]:
    """Simulated halo exchange steps (heat or wave), one job per mode; seconds per step.

    The grid is `nx` x `ny`, or `sub` x `sub` points per rank (the coarray paper's
    subdomains). The computing is charged by the fixed model of the module's notes
    (``compute="model"``, the default: one :func:`compute_cost` benchmark for the call,
    the same for every mode); ``compute="measured"`` charges each rank's loops timed on
    this machine instead (host noise included); ``compute=False`` leaves it out, so a step
    costs only its exchange. With the model or without computing the simulation is
    deterministic. `per_node` ranks per node (block placement). Records: impl = mode,
    app, dims, sub, t_us_* per step, ``sum`` (the field's sum after `steps` steps: the
    same as the serial code's), ``compute`` (how the computing was charged).

    Parameters
    ----------
    app : {"heat", "wave"}
        The stencil: the heat equation or the acoustic wave.
    modes : sequence of str
        Exchange modes among :data:`SIMULATED_HALO_MODES`.
    ranks : int
        Simulated MPI processes, on a process grid of :func:`mpilab.halo.process_grid`.
    platform : str or Platform
        The simulated machine.
    sub : int, optional
        Points per rank and axis (the grid is ``sub * px`` x ``sub * py``); overrides
        `nx` and `ny`.
    nx, ny : int, optional
        The global grid, instead of `sub`.
    map_by : {"slot", "node"}, optional
        Block (default) or cyclic placement.
    per_node : int, optional
        Ranks per node with ``map_by="slot"`` (default: the node's cores).
    compute : {"model", "measured", False}, optional
        How the computing is charged to the simulated clock (default ``"model"``; True
        is ``"measured"``).
    pack : str, optional
        How halo columns are sent: ``"datatype"`` (default), ``"manual"`` or
        ``"subarray"``.
    steps : int, optional
        Steps from rest whose field ``sum`` is reported (default 2).
    warmup : int, optional
        Untimed warm-up steps of the timing protocol (default 1).
    iters : int, optional
        Timed steps per repetition (default 3).
    reps : int, optional
        Timed repetitions (default 3).
    timeout : float, optional
        Seconds of real time each simulated job may take (default 900).
    progress : bool or callable, optional
        As :func:`mpilab.sim.collective`.

    Returns
    -------
    list of dict
        One record per mode: times per step in µs (``t_us_min``, ``t_us_median``, ...)
        and ``impl``, ``app``, ``mode``, ``pack``, ``nx``, ``ny``, ``dims``, ``sub``,
        ``iters``, ``steps``, ``sum``, ``compute`` (``"fixed model: ... ns per point and
        step, benchmarked on this machine"``, ``"measured on this machine"`` or ``"not
        simulated"``), ``point_s`` (the model's seconds per point and step, or None),
        with the simulated run's ``simulated``, ``platform``, ``label``, ``ranks``,
        ``map_by``, ``oversubscribed``.

    Raises
    ------
    ValueError
        An unknown `app` or mode, a mode SMPI cannot simulate
        (:data:`NOT_SIMULATED_HALO_MODES`), neither `sub` nor `nx` and `ny`, or an
        unknown `compute`.
    """
    from .. import halo as _halo

    validate.names(app, ("heat", "wave"), "app")
    ranks = validate.count(ranks, "ranks")
    py, px = _halo.process_grid(ranks)
    if sub is not None:
        nx = ny = None
        nx, ny = validate.count(sub, "sub") * px, sub * py
    if nx is None or ny is None:
        raise ValueError("give sub (points per rank and axis) or nx and ny")
    compute = "measured" if compute is True else compute
    if compute not in ("model", "measured", False):
        raise ValueError(f"compute must be 'model', 'measured' or False, not {compute!r}")
    point_s, extra = None, []
    if compute == "model":  # one benchmark for every mode: the largest block of the grid
        point_s = compute_cost(app, -(-ny // py), -(-nx // px), platform=platform,
                               timeout=timeout)
        extra = [f"{point_s:.6e}"]
    out = []
    for mode in modes:
        if mode in NOT_SIMULATED_HALO_MODES:
            raise ValueError(f"mode {mode!r} is not simulated: {NOT_SIMULATED_HALO_MODES[mode]}")
        validate.names(mode, SIMULATED_HALO_MODES, "mode")
        _progress(progress, f"{label(globals()['platform'](platform).name)}: {app} {mode} "
                            f"on {ranks} ranks ({py}x{px}), {nx}x{ny}")
        objs, meta = run("mpilab-halo", [app, mode, pack, nx, ny, py, px, steps, warmup,
                                         iters, reps, *extra],
                         ranks=ranks, platform=platform, map_by=map_by,
                         per_node=per_node, compute=compute == "measured", timeout=timeout)
        o = objs[0]
        rec = _record(o["times"], meta, size_bytes=8 * (nx // px), impl=mode, app=app,
                      mode=mode, pack=pack, nx=nx, ny=ny, dims=[py, px], sub=sub,
                      iters=o["iters"], steps=o["steps"], sum=o["sum"])
        rec["compute"] = meta["compute"] if point_s is None else (
            f"fixed model: {point_s * 1e9:.3f} ns per point and step, benchmarked on this "
            "machine")
        rec["point_s"] = point_s
        out.append(rec)
    return out


