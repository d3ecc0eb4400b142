"""One timing protocol, and tidy records of what it measured.

The protocol (the same in every kernel, see ``kernels/common/mpilab_timing.h``): warm-up
steps discarded, ``MPI_Barrier``, the timed loop inside C, ``MPI_Wtime``, the slowest
rank's time (``MPI_MAX``), several repetitions summarised as min / quartiles / median
(:func:`summarize`, :func:`record`), and every record carries a distribution-free 95 %
confidence interval of its median (:func:`median_ci`, from order statistics). Where the
number of repetitions is chosen by that interval (:func:`until_ci`, :func:`needs_more`),
repetitions are added until the interval's width is within a stated fraction of the
median, or a cap is reached; the record says which. :func:`barrier_skew` measures how far
apart the ranks leave the ``MPI_Barrier`` that starts each repetition. :func:`best_us` is the same steps in Python for an
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
from collections.abc import Callable, Iterable, Sequence

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
        (`size_bytes` over the median time), ``reps``, the median's confidence interval
        (:func:`median_ci`): ``ci_level`` (stated, :data:`CI_LEVEL`), ``ci_lo_us``,
        ``ci_hi_us``, ``ci_coverage`` (exact) and ``ci_rel`` (width over the median),
        each None when there are too few repetitions (under 6 at 95 %), and
        ``times_us`` (each repetition, µs).
    """
    r = dict(fields)
    r["size_bytes"] = int(size_bytes)
    r.update(summarize(times_s))
    r["bandwidth_MBps"] = size_bytes / r["t_us_median"] if r["t_us_median"] > 0 else 0.0
    r["reps"] = len(times_s)
    ci = median_ci(times_s)
    r["ci_level"] = CI_LEVEL
    if ci is None:  # too few repetitions for any interval at CI_LEVEL
        r.update(ci_lo_us=None, ci_hi_us=None, ci_coverage=None, ci_rel=None)
    else:
        r.update(ci_lo_us=ci["lo"] * 1e6, ci_hi_us=ci["hi"] * 1e6, ci_coverage=ci["coverage"],
                 ci_rel=ci["rel"])
    r["times_us"] = [float(t) * 1e6 for t in times_s]  # the raw repetitions
    return r


#: the stated confidence of the median's interval in every record (:func:`median_ci`)
CI_LEVEL = 0.95


def _order_index(n: int, level: float) -> tuple[int, float] | None:
    """The largest k with P(B <= k - 1) <= (1 - level) / 2, B ~ Binomial(n, 1/2), and the
    coverage 1 - 2 P(B <= k - 1) of [x(k), x(n-k+1)]; None when even k = 1 falls short."""
    from scipy.stats import binom

    cdf2 = 2 * binom.cdf(np.arange((n + 1) // 2), n, 0.5)  # 2 P(B <= j), j < n - j
    k = int(np.count_nonzero(cdf2 <= 1 - level))  # cdf2 increases with the index
    return (k, float(1 - cdf2[k - 1])) if k else None


def median_ci(times_s: Sequence[float], level: float = CI_LEVEL) -> dict | None:
    """A distribution-free confidence interval of the median, from order statistics.

    With the repetitions sorted, x(1) <= ... <= x(n), the interval [x(k), x(n-k+1)]
    holds the true median with probability 1 - 2 P(B <= k - 1), B ~ Binomial(n, 1/2),
    whatever the distribution of the times (they need only be independent and
    identically distributed): k is the largest order for which that is at least `level`
    (Hoefler and Belli, SC'15; Le Boudec, *Performance Evaluation of Computer and
    Communication Systems*, chapter 2). At 95 % it needs at least 6 repetitions.

    Parameters
    ----------
    times_s : sequence of float
        The repetitions' times (any unit; the interval is in the same unit).
    level : float, optional
        The confidence asked for, between 0 and 1 (default :data:`CI_LEVEL`, 0.95).

    Returns
    -------
    dict or None
        ``lo``, ``hi`` (the interval), ``coverage`` (its exact confidence, at least
        `level`), ``k`` (the lower order statistic, 1-based), ``n`` and ``rel``: its
        width over the median (``inf`` when the median is 0); None when there are too
        few repetitions for any interval at `level`.

    Raises
    ------
    ValueError
        `times_s` is empty or not finite, or `level` is not between 0 and 1.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be between 0 and 1, got {level!r}")
    x = np.sort(np.asarray(times_s, dtype=float))
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError("need at least one finite timing")
    found = _order_index(int(x.size), level)
    if found is None:
        return None
    k, coverage = found
    lo, hi, med = float(x[k - 1]), float(x[x.size - k]), float(np.median(x))
    rel = (hi - lo) / med if med > 0 else math.inf
    return {"lo": lo, "hi": hi, "coverage": coverage, "k": k, "n": int(x.size), "rel": rel}


def needs_more(times_s: Sequence[float], *, rel: float, max_reps: int,
               level: float = CI_LEVEL) -> bool:
    """The stopping rule: are more repetitions wanted?

    Yes while the median's confidence interval (:func:`median_ci` at `level`) is wider
    than `rel` times the median, or does not exist yet, and fewer than `max_reps`
    repetitions were made. Applied to the slowest rank's times (the same on every rank),
    every rank comes to the same answer.

    Parameters
    ----------
    times_s : sequence of float
        The repetitions so far.
    rel : float
        The target: the interval's width over the median (0.05: within 5 %).
    max_reps : int
        The cap on repetitions.
    level : float, optional
        The interval's confidence (default :data:`CI_LEVEL`).

    Returns
    -------
    bool
        True when another batch of repetitions should be made.
    """
    if len(times_s) >= max_reps:
        return False
    ci = median_ci(times_s, level) if len(times_s) else None
    return ci is None or not ci["rel"] <= rel


def until_ci(more: Callable[[], Sequence[float]], *, rel: float = 0.05, max_reps: int = 200,
             level: float = CI_LEVEL) -> tuple[list[float], dict]:
    """Repetitions made in batches until the median's interval is narrow enough, or a cap.

    Parameters
    ----------
    more : callable
        Makes one batch of repetitions and returns their times (at least one).
    rel : float, optional
        Target width of the interval over the median (default 0.05).
    max_reps : int, optional
        Stop once this many repetitions were made (default 200), reached or not.
    level : float, optional
        The interval's confidence (default :data:`CI_LEVEL`).

    Returns
    -------
    tuple of (list of float, dict)
        Every repetition's time, and the stopping record: ``ci_target_rel``,
        ``ci_level``, ``max_reps``, ``batches``, ``ci_reached`` (the target was met; False
        when the cap stopped it) and ``ci_rel`` (the width reached, None without an
        interval).
    """
    times: list[float] = []
    batches = 0
    while batches == 0 or needs_more(times, rel=rel, max_reps=max_reps, level=level):
        batch = list(more())
        if not batch:
            raise ValueError("a batch of repetitions returned no time")
        times += batch
        batches += 1
    return times, stopping(times, rel=rel, max_reps=max_reps, level=level, batches=batches)


def stopping(times_s: Sequence[float], *, rel: float, max_reps: int, level: float = CI_LEVEL,
             batches: int | None = None) -> dict:
    """What the stopping rule reached for `times_s` (the fields :func:`until_ci` returns).

    Parameters
    ----------
    times_s : sequence of float
        The repetitions made.
    rel : float
        The target width of the median's interval over the median.
    max_reps : int
        The cap on repetitions.
    level : float, optional
        The interval's confidence (default :data:`CI_LEVEL`).
    batches : int, optional
        How many batches made them (stored when given).

    Returns
    -------
    dict
        ``ci_target_rel``, ``ci_level``, ``max_reps``, ``ci_reached``, ``ci_rel`` and,
        when given, ``batches``.
    """
    ci = median_ci(times_s, level)
    out = {"ci_target_rel": rel, "ci_level": level, "max_reps": max_reps,
           "ci_reached": ci is not None and ci["rel"] <= rel,
           "ci_rel": None if ci is None else ci["rel"]}
    if batches is not None:
        out["batches"] = batches
    return out


def barrier_skew(comm, reps: int = 30, pings: int = 20) -> dict:
    """How far apart in time the ranks leave an ``MPI_Barrier``: its exit skew.

    Each rank's clock is first put on rank 0's: rank 0 exchanges `pings` messages with
    every other rank in turn, and the round trip that was shortest gives that rank's
    offset, as the midpoint (Cristian's method; SKaMPI's offset algorithm, which ReproMPI
    offers for its window-based start, likewise estimates offsets from ping-pongs with
    rank 0); the offset is uncertain by half that round trip. Then `reps`
    times: a barrier, and every rank reads ``MPI_Wtime`` at once. The skew of one barrier
    is the latest exit minus the earliest, on rank 0's clock. The timing protocol's
    repetitions start after such a barrier: a skew comparable with the time measured
    inflates it by up to the skew.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator; collective: every rank calls this.
    reps : int, optional
        Barriers measured (default 30).
    pings : int, optional
        Round trips per rank for its clock offset (default 20).

    Returns
    -------
    dict
        On every rank: ``barrier_exit_skew_us_median`` and ``barrier_exit_skew_us_max``
        (over the barriers), ``clock_offset_uncertainty_us`` (half the largest of the
        ranks' shortest round trips: skews below it are not resolved), ``reps``,
        ``ranks`` and ``method`` (in words).
    """
    from mpi4py import MPI

    size, rank = comm.Get_size(), comm.Get_rank()
    offset, half_rtt = 0.0, 0.0
    buf = np.zeros(1)
    comm.Barrier()
    for peer in range(1, size):
        if rank == 0:
            best = (math.inf, 0.0)
            for _ in range(pings):
                t0 = MPI.Wtime()
                comm.Send(buf, dest=peer, tag=71)
                comm.Recv(buf, source=peer, tag=72)
                t2 = MPI.Wtime()
                if t2 - t0 < best[0]:
                    best = (t2 - t0, float(buf[0]) - (t0 + t2) / 2)
            comm.send(best, dest=peer, tag=73)
        elif rank == peer:
            for _ in range(pings):
                comm.Recv(buf, source=0, tag=71)
                buf[0] = MPI.Wtime()
                comm.Send(buf, dest=0, tag=72)
            rtt, offset = comm.recv(source=0, tag=73)
            half_rtt = rtt / 2
    exits = np.empty(reps)
    for i in range(reps):
        comm.Barrier()
        exits[i] = MPI.Wtime()
    exits -= offset  # on rank 0's clock
    every = comm.gather(exits, root=0)
    worst_half_rtt = comm.allreduce(half_rtt, op=MPI.MAX)
    out = None
    if rank == 0:
        t = np.vstack(every)
        skew = (t.max(axis=0) - t.min(axis=0)) * 1e6
        out = {"barrier_exit_skew_us_median": float(np.median(skew)),
               "barrier_exit_skew_us_max": float(skew.max()), "reps": int(reps),
               "clock_offset_uncertainty_us": worst_half_rtt * 1e6, "ranks": int(size),
               "method": "MPI_Wtime after each barrier on every rank, put on rank 0's clock "
                         "by the shortest of the ping-pong round trips (Cristian)"}
    return comm.bcast(out, root=0)


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


def rep_times(comm, op: Callable[[], None], iters: int, reps: int) -> list[float]:
    """Every repetition of `iters` calls of `op`, seconds per call: the course's timing
    protocol for an operation every rank calls.

    Each repetition is timed from a barrier to the slowest rank's end, every rank on a
    core of its own where there are cores enough (:func:`pinned`), after one untimed call
    (connections, registration, first touch of the pages). :func:`best_us` keeps the
    fastest; lab 06 draws them all (:func:`mpilab.grading.allgather.time_allgather`).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator; collective: every rank calls this.
    op : callable
        A function of no argument that every rank calls (a collective operation).
    iters : int
        Calls timed back to back per repetition.
    reps : int
        Repetitions.

    Returns
    -------
    list of float
        Seconds per call of each repetition, the same on every rank.
    """
    from mpi4py import MPI

    times = []
    with pinned(comm):
        comm.Barrier()
        op()  # warm-up: connections, registration, first touch of the pages
        for _ in range(reps):
            comm.Barrier()
            t0 = MPI.Wtime()
            for _ in range(iters):
                op()
            times.append(comm.allreduce((MPI.Wtime() - t0) / iters, op=MPI.MAX))
    return times


def best_us(comm, op: Callable[[], None], iters: int, reps: int) -> float:
    """The fastest of `reps` repetitions of `iters` calls of `op`, per call in µs
    (:func:`rep_times`). The labs' graders time the course's operations with it
    (:mod:`mpilab.grading.measured`), and the ping-pong's one-way times
    (:func:`mpilab.pingpong.one_way_times`).

    Parameters
    ----------
    comm, op, iters
        As for :func:`rep_times`.
    reps : int
        Repetitions; the fastest counts.

    Returns
    -------
    float
        µs per call, the same on every rank.
    """
    return min(rep_times(comm, op, iters, reps)) * 1e6


def skew_summary(skews: Sequence[dict | None]) -> dict | None:
    """The barrier exit skews of several jobs (:func:`barrier_skew`) as one meta entry.

    Parameters
    ----------
    skews : sequence of dict or None
        One :func:`barrier_skew` result per job (None entries are left out).

    Returns
    -------
    dict or None
        ``us_median`` (the median of the jobs' medians), ``us_max``,
        ``clock_offset_uncertainty_us`` (the largest), ``jobs``, ``reps_per_job`` and
        ``method``; None when no job measured it.
    """
    got = [k for k in skews if k]
    if not got:
        return None
    return {"us_median": float(np.median([k["barrier_exit_skew_us_median"] for k in got])),
            "us_max": max(k["barrier_exit_skew_us_max"] for k in got),
            "clock_offset_uncertainty_us": max(k["clock_offset_uncertainty_us"] for k in got),
            "jobs": len(got), "reps_per_job": got[0]["reps"], "method": got[0]["method"]}


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
        :func:`mpilab.runtime.machine_info`, the library facts (with
        ``thread_level``: what ``MPI_Init_thread`` provided the ranks), ``ranks`` and
        ``oversubscribed`` (more ranks than cores), ``transport``, ``measured_at``
        (local time, ISO 8601) and ``load_average_1min`` (this host's, when the context
        was taken).
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
    with contextlib.suppress(OSError, AttributeError):  # what else the machine was doing
        d["load_average_1min"] = round(os.getloadavg()[0], 2)
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
    for key in ("hostname", "cpu_model", "cores", "mpi_library", "mpi_version", "thread_level",
                "transport", "ranks", "oversubscribed", "nodes", "emulated", "link", "map_by"):
        if key in ctx and key not in df.columns:
            df[key] = ctx[key]
    df.attrs["context"] = ctx
    return df


def text_table(columns: Sequence[tuple[str, int, str]], rows: Iterable[Sequence]) -> list[str]:
    """Rows of values as the lines of a text table, under a header of the columns' titles.

    Every column is right-aligned to its width, one space apart from the next.

    Parameters
    ----------
    columns : sequence of (str, int, str)
        Each column's title, width and format spec of its values (``".1f"``, ``".0%"``;
        ``""`` writes a value as :func:`format` does).
    rows : iterable of sequence
        The values of each line, one per column.

    Returns
    -------
    list of str
        The header, then one line per row.
    """
    header = " ".join(f"{title:>{width}}" for title, width, _ in columns)
    return [header] + [" ".join(f"{value:>{width}{spec}}"
                                for value, (_, width, spec) in zip(row, columns, strict=True))
                       for row in rows]


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
