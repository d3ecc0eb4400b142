"""One timing protocol, and tidy records of what it measured.

The protocol (the same in every kernel, see ``kernels/common/mpilab_timing.h``): warm-up
steps discarded, ``MPI_Barrier``, the timed loop inside C, ``MPI_Wtime``, the slowest
rank's time (``MPI_MAX``), several repetitions summarised as min / quartiles / median
(:func:`summarize`, :func:`record`). :func:`best_us` is the same steps in Python for an
operation timed from Python (the labs' graders), every rank on a core of its own
(:func:`pinned`).

The records carry where they were measured: :func:`context` (machine, library, ranks),
:func:`frame` (records as a pandas DataFrame with those columns), :func:`run_meta` (what
produced a benchmark's run). The experiments that measure with this protocol live with
their topic: the ping-pong, a local copy and the forwarded message in
:mod:`mpilab.pingpong`, the halo's in :mod:`mpilab.halo`, the collectives' in
:mod:`mpilab.collectives` and :mod:`mpilab.tuning`.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

from . import runtime


def summarize(times_s: Sequence[float]) -> dict:
    """Min, quartiles, median, max (µs) and relative spread of repeated timings.

    Parameters
    ----------
    times_s : sequence of float
        The repetitions' times, in seconds (at least one, all finite).

    Returns
    -------
    dict
        ``t_us_min``, ``t_us_q1``, ``t_us_median``, ``t_us_q3``, ``t_us_max`` (µs) and
        ``spread``: the interquartile range over the median (0 when the median is 0).

    Raises
    ------
    ValueError
        `times_s` is empty or holds a NaN or an infinity.
    """
    t = np.asarray(times_s, dtype=float) * 1e6
    if t.size == 0 or not np.all(np.isfinite(t)):
        raise ValueError("need at least one finite timing")
    q1, med, q3 = np.percentile(t, [25, 50, 75])
    return {
        "t_us_min": float(t.min()),
        "t_us_q1": float(q1),
        "t_us_median": float(med),
        "t_us_q3": float(q3),
        "t_us_max": float(t.max()),
        # interquartile range over the median: 0.02 is a quiet machine, 0.3 a busy one
        "spread": float((q3 - q1) / med) if med > 0 else 0.0,
    }


def record(times_s: Sequence[float], *, size_bytes: int, **fields) -> dict:
    """A tidy record: the fields given, the summary of `times_s`, and bandwidth (MB/s).

    Parameters
    ----------
    times_s : sequence of float
        The repetitions' times, in seconds.
    size_bytes : int
        The message (or copy) size, in bytes.
    **fields
        More columns, copied as given (``impl``, ``mode``, ``iters``, ...).

    Returns
    -------
    dict
        `fields`, ``size_bytes``, the :func:`summarize` columns, ``bandwidth_MBps``
        (`size_bytes` over the median time), ``reps`` and ``times_us`` (each repetition,
        µs).
    """
    r = dict(fields)
    r["size_bytes"] = int(size_bytes)
    r.update(summarize(times_s))
    r["bandwidth_MBps"] = size_bytes / r["t_us_median"] if r["t_us_median"] > 0 else 0.0
    r["reps"] = len(times_s)
    r["times_us"] = [float(t) * 1e6 for t in times_s]  # the raw repetitions
    return r


@contextlib.contextmanager
def pinned(comm):
    """Each rank of `comm` on a core of its own while the block runs, where there are
    cores enough (``sched_setaffinity``: rank r on the r-th CPU this process may use);
    the affinity is restored after. The cluster's engines are not bound (more engines
    than cores are allowed), and two ranks the scheduler happens to put on one core
    take turns: an exchange measured so took 2.3 times the same exchange on two cores.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator whose ranks are pinned (each rank pins itself).

    Yields
    ------
    None
        Inside the block the rank is pinned; with fewer usable CPUs than ranks, or where
        the affinity cannot be set, nothing changes.
    """
    try:
        mask = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        yield
        return
    if len(mask) < comm.Get_size():
        yield
        return
    try:
        os.sched_setaffinity(0, {mask[comm.Get_rank()]})
    except OSError:
        yield
        return
    try:
        yield
    finally:
        os.sched_setaffinity(0, mask)


def best_us(comm, op: Callable[[], None], iters: int, reps: int) -> float:
    """The fastest of `reps` repetitions of `iters` calls of `op`, per call in µs.

    Each repetition is timed from a barrier to the slowest rank's end, every rank on a
    core of its own where there are cores enough (:func:`pinned`), after one untimed call
    (connections, registration, first touch of the pages). The labs' graders time the
    course's operations with it (:mod:`mpilab.grading.measured`), and the ping-pong's
    one-way times (:func:`mpilab.pingpong.one_way_times`).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator; collective: every rank calls this.
    op : callable
        A function of no argument that every rank calls (a collective operation).
    iters : int
        Calls timed back to back per repetition.
    reps : int
        Repetitions; the fastest counts.

    Returns
    -------
    float
        µs per call, the same on every rank.
    """
    from mpi4py import MPI

    with pinned(comm):
        comm.Barrier()
        op()  # warm-up: connections, registration, first touch of the pages
        best = math.inf
        for _ in range(reps):
            comm.Barrier()
            t0 = MPI.Wtime()
            for _ in range(iters):
                op()
            t = comm.allreduce((MPI.Wtime() - t0) / iters, op=MPI.MAX)
            best = min(best, t)
    return best * 1e6


# ---------------------------------------------------------------------------------------
# notebook side: run on a cluster, return a DataFrame that says where it was measured


def context(cluster=None, *, ranks: int | None = None, transport: str | None = None,
            library: dict | None = None) -> dict:
    """Machine, MPI library and run settings every record carries.

    The library facts come from the ranks (`cluster.library`, or `library` as a worker
    reported it), never from this process, which may not run MPI at all.

    Parameters
    ----------
    cluster : MPICluster, optional
        The cluster measured on; when given, its ranks, transport and library are used
        and `ranks`, `transport` and `library` ignored.
    ranks : int, optional
        Ranks of the run (without a cluster).
    transport : str, optional
        ``shm`` or ``tcp`` (without a cluster).
    library : dict, optional
        The MPI library as a rank reported it (without a cluster).

    Returns
    -------
    dict
        :func:`mpilab.runtime.machine_info`, the library facts, ``ranks`` and
        ``oversubscribed`` (more ranks than cores), ``transport`` and ``measured_at``
        (local time, ISO 8601).
    """
    d = {}
    d.update(runtime.machine_info())
    if cluster is not None:
        ranks, transport = cluster.ranks, cluster.transport
        library = cluster.library
    d.update(library or {})
    if ranks is not None:
        d["ranks"] = ranks
        d["oversubscribed"] = ranks > d["cores"]
    if transport is not None:
        d["transport"] = transport
    d["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return d


def frame(records: list[dict], ctx: dict):
    """Records as a pandas DataFrame, each row carrying the context columns.

    Parameters
    ----------
    records : list of dict
        Measurement records (:func:`record`).
    ctx : dict
        Their context (:func:`context`).

    Returns
    -------
    pandas.DataFrame
        One row per record; the machine, library and run columns of `ctx` that the
        records lack are added, and all of `ctx` is in ``df.attrs["context"]``.
    """
    import pandas as pd

    df = pd.DataFrame.from_records(records)
    for key in ("hostname", "cpu_model", "cores", "mpi_library", "mpi_version", "transport",
                "ranks", "oversubscribed", "nodes", "emulated", "link", "map_by"):
        if key in ctx and key not in df.columns:
            df[key] = ctx[key]
    df.attrs["context"] = ctx
    return df


def run_meta(launch: runtime.Launch, settings: dict, library: dict) -> dict:
    """What produced a measurement run: machine, MPI library (as a rank reported it),
    launcher, settings and the command line (``python -m mpilab.bench ...`` or the
    notebook kernel's).

    Parameters
    ----------
    launch : mpilab.runtime.Launch
        How the ranks were started (ranks, transport, command, environment).
    settings : dict
        The run's settings, stored as given.
    library : dict
        The MPI library as a rank reported it.

    Returns
    -------
    dict
        :func:`context`, with ``launcher`` (the command line up to the program),
        ``launcher_env``, ``settings`` and ``command`` (this process's command line).
    """
    m = context(ranks=launch.ranks, transport=launch.transport, library=library)
    m["launcher"] = " ".join(launch.command)
    m["launcher_env"] = launch.env
    m["settings"] = settings
    argv = list(sys.argv) or [""]
    if argv[0].endswith(os.path.join("bench", "__main__.py")):
        argv = ["-m", "mpilab.bench", *argv[1:]]
    m["command"] = " ".join([os.path.basename(sys.executable), *argv])
    return m
