"""One timing protocol, and tidy records of what it measured.

The protocol (the same in every kernel, see ``kernels/common/mpilab_timing.h``): warm-up
steps discarded, ``MPI_Barrier``, the timed loop inside C, ``MPI_Wtime``, the slowest
rank's time (``MPI_MAX``), several repetitions summarised as min / quartiles / median.
The mpi4py reference implementation below follows the same steps in Python.

Functions whose name starts with ``measure_`` are collective: every rank of the
communicator calls them (on the cluster, through :meth:`MPICluster.run`, or under
``mpiexec``), and every rank returns the same records. :func:`pingpong` and
:func:`memcopy` are the notebook-side helpers that run them on a cluster and return a
pandas DataFrame carrying where it was measured.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterable, Sequence

import numpy as np

from . import runtime, validate
from .buffers import BUFFER_KINDS, doubles, huge_page_share, send_and_receive

IMPLS = ("kernel", "mpi4py")
MODES = ("roundtrip", "oneway", "window")
#: osu_bw's window: messages posted at once before one wait (the kernel's PP_WINDOW)
WINDOW = 64


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


def round_trip(comm, out, into, times: int = 1):
    """A function of no argument: `times` round trips of `out` between ranks 0 and 1 of
    `comm`, each answered from `into` once it has arrived (the other ranks do nothing).
    With `out` and `into` the same array each rank sends on what it has just received.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator (2 ranks or more; only ranks 0 and 1 take part).
    out, into : numpy.ndarray
        The array sent, and the array received into (same size).
    times : int, optional
        Round trips per call (default 1).

    Returns
    -------
    callable
        A function of no argument that every rank of `comm` calls.
    """
    rank = comm.Get_rank()

    def go():
        for _ in range(times):
            if rank == 0:
                comm.Send(out, dest=1)
                comm.Recv(into, source=1)
            elif rank == 1:
                comm.Recv(into, source=0)
                comm.Send(out, dest=0)

    return go


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


def forwarding_times(comm, nbytes: int = 1 << 20, reps: int = 15, *,
                     extra: dict | None = None) -> dict:
    """On every rank of `comm`: where the bytes of a large message were, and what that
    costs. One loop times each operation once per repetition, so a change of the
    machine's state during the loop reaches all of them alike; each result is the fastest
    of `reps`, in µs, the slowest rank's, every rank on a core of its own where there are
    cores enough (:func:`pinned`), every buffer on huge pages (:func:`buffer`):

    * ``alpha_us``: half a round trip of 8 B between ranks 0 and 1 (a loop of 20);
    * ``resent_us``: one way of `nbytes` by a ping-pong that sends the same array every
      time, as ping-pong benchmarks do: after the first, the receiving core holds the
      array in its cache;
    * ``forwarded_us``: one way of `nbytes` by a ping-pong in which each of the two ranks
      sends on the array it has just received, as a ring or a tree does: the array sits,
      just written, in the sending core's cache, and the receiver's copy (Open MPI's
      single copy) must fetch every line from there;
    * ``{name}_us`` for each of `extra` (name: a function of no argument that every rank
      calls, a collective operation), one call from a barrier to the slowest rank: lab 06
      times the course's allgathers in the same loop.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator (2 ranks or more); collective: every rank calls this.
    nbytes : int, optional
        The large message's size, in bytes (default 1 MiB; at least 8).
    reps : int, optional
        Repetitions; each result is the fastest (default 15).
    extra : dict of str to callable, optional
        More operations to time in the same loop, by name.

    Returns
    -------
    dict
        ``alpha_us``, ``resent_us``, ``forwarded_us`` and one ``{name}_us`` per `extra`
        (µs), with ``nbytes`` and ``ranks`` (the size of `comm`); the same on every rank.

    Raises
    ------
    ValueError
        `comm` has a single rank, or `nbytes` or `reps` is out of range.
    """
    from mpi4py import MPI

    r, p = comm.Get_rank(), comm.Get_size()
    if p < 2:
        raise ValueError(f"forwarding_times needs 2 ranks or more, got {p}")
    validate.count(nbytes, "nbytes", lowest=8)
    validate.count(reps, "reps")

    n = max(1, int(nbytes) // 8)
    tiny, tiny_in = doubles(1), doubles(1, 0.0)
    out, into, potato = doubles(n), doubles(n, 0.0), doubles(n, float(r))
    ops = {"alpha": (round_trip(comm, tiny, tiny_in, 20), 40),
           "resent": (round_trip(comm, out, into), 2),
           "forwarded": (round_trip(comm, potato, potato), 2)}
    for name, op in (extra or {}).items():
        ops[name] = (op, 1)
    best = dict.fromkeys(ops, float("inf"))
    with pinned(comm):
        for op, _ in ops.values():  # warm-up: connections, first touch of the pages
            comm.Barrier()
            op()
        for _ in range(reps):
            for name, (op, per) in ops.items():
                comm.Barrier()
                t0 = MPI.Wtime()
                op()
                best[name] = min(best[name],
                                 comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX) / per)
    got = {f"{k}_us": v * 1e6 for k, v in best.items()}
    return {**got, "nbytes": int(nbytes), "ranks": p}


def _mpi4py_pingpong(comm, sbuf, rbuf, nbytes, rank_a, rank_b, mode, warmup, iters, reps):
    """The kernel's protocol with mpi4py's buffer Send/Recv (NumPy, no pickling)."""
    from mpi4py import MPI

    me = comm.Get_rank()
    sb, rb = [sbuf, nbytes, MPI.BYTE], [rbuf, nbytes, MPI.BYTE]

    def roundtrip(k):
        for _ in range(k):
            if me == rank_a:
                comm.Send(sb, rank_b, 17)
                comm.Recv(rb, rank_b, 17)
            elif me == rank_b:
                comm.Recv(rb, rank_a, 17)
                comm.Send(sb, rank_a, 17)

    def oneway(k):
        if me == rank_a:
            for _ in range(k):
                comm.Send(sb, rank_b, 17)
            comm.Recv([rbuf, 0, MPI.BYTE], rank_b, 18)
        elif me == rank_b:
            for _ in range(k):
                comm.Recv(rb, rank_a, 17)
            comm.Send([sbuf, 0, MPI.BYTE], rank_a, 18)

    ack = np.zeros(4, dtype=np.uint8)

    def window(k):
        done = 0
        while done < k:
            w = min(WINDOW, k - done)
            if me == rank_a:
                MPI.Request.Waitall([comm.Isend(sb, rank_b, 17) for _ in range(w)])
                comm.Recv([ack, 4, MPI.BYTE], rank_b, 18)
            elif me == rank_b:
                MPI.Request.Waitall([comm.Irecv(rb, rank_a, 17) for _ in range(w)])
                comm.Send([ack, 4, MPI.BYTE], rank_a, 18)
            done += w

    if mode in ("oneway", "window"):
        burst = oneway if mode == "oneway" else window
        if warmup:
            burst(min(warmup, iters))
        step, per, count = burst, iters, iters
    else:
        roundtrip(warmup)
        step, per, count = roundtrip, 2 * iters, iters
    out = np.empty(reps)
    for r in range(reps):
        comm.Barrier()
        t0 = MPI.Wtime()
        step(count)
        local = MPI.Wtime() - t0
        out[r] = comm.allreduce(local, op=MPI.MAX) / per
    return out


def _run_pingpong(comm, impl, sbuf, rbuf, nbytes, rank_a, rank_b, mode, warmup, iters, reps):
    if impl == "kernel":
        from .kernels import pingpong as k

        return k.pingpong(comm, sbuf, rbuf, nbytes, rank_a=rank_a, rank_b=rank_b, mode=mode,
                          warmup=warmup, iters=iters, reps=reps)
    if impl == "mpi4py":
        return _mpi4py_pingpong(comm, sbuf, rbuf, nbytes, rank_a, rank_b, mode, warmup, iters,
                                reps)
    raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")


def calibrate_iters(comm, nbytes: int, *, min_time: float = 0.01, mode: str = "roundtrip",
                    rank_a: int = 0, rank_b: int = 1, max_iters: int = 1_000_000) -> int:
    """Timed iterations for one repetition to last about `min_time` seconds (collective).

    Every rank gets the same answer, because the kernel returns the slowest rank's time.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator; every rank calls this.
    nbytes : int
        Message size, in bytes.
    min_time : float, optional
        Seconds one repetition should last (default 0.01).
    mode : {"roundtrip", "oneway", "window"}, optional
        The ping-pong's pattern (see :func:`measure_pingpong`).
    rank_a, rank_b : int, optional
        The two ranks that exchange messages (default 0 and 1).
    max_iters : int, optional
        The most iterations returned (default 1,000,000).

    Returns
    -------
    int
        Timed iterations per repetition, between 1 and `max_iters`.
    """
    s, r = send_and_receive(nbytes, comm.Get_rank())
    iters = 1
    while True:
        # best of 3: one preemption must not make the count tiny
        t = _run_pingpong(comm, "kernel", s, r, nbytes, rank_a, rank_b, mode, 2, iters, 3).min()
        per_rep = t * (2 if mode == "roundtrip" else 1) * iters
        if per_rep >= min_time / 4 or iters >= max_iters:
            want = iters * min_time / max(per_rep, 1e-9)
            return int(min(max_iters, max(1, round(want))))
        iters = min(max_iters, iters * 8)


def measure_pingpong(comm, sizes: Iterable[int], *, impls: Sequence[str] = ("kernel",),
                     mode: str = "roundtrip", reps: int = 7, warmup: int | None = None,
                     iters: dict | int | None = None, min_time: float = 0.01,
                     rank_a: int = 0, rank_b: int = 1, rounds: int = 1,
                     buffers: str = "huge-pages") -> list[dict]:
    """Ping-pong records for each size and implementation (collective over `comm`).

    Implementations are measured side by side: for each size, `rounds` rounds each run
    every implementation for `reps` repetitions, and their timings are pooled.
    `iters` fixes the timed iterations (per size with a dict); by default they are
    calibrated so one repetition lasts about `min_time` seconds. `buffers` is the kind
    of memory the messages live in (:data:`mpilab.buffers.BUFFER_KINDS`); records say it, and from
    64 KiB up how much of the sender's buffer sits on huge pages (:func:`mpilab.buffers.huge_page_share`).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator (ranks `rank_a` and `rank_b` exchange; the others wait).
    sizes : iterable of int
        Message sizes, in bytes (0 or more).
    impls : sequence of {"kernel", "mpi4py"}, optional
        The compiled C kernel, mpi4py's buffer ``Send``/``Recv``, or both.
    mode : {"roundtrip", "oneway", "window"}, optional
        ``roundtrip``: half a round trip per message; ``oneway``: a stream of messages
        and one acknowledgement; ``window``: ``WINDOW`` messages posted at once, then
        one acknowledgement (osu_bw's pattern).
    reps : int, optional
        Repetitions per round and implementation (default 7).
    warmup : int, optional
        Untimed iterations first; None: as many as the timed ones, 100 at most.
    iters : int or dict of int to int, optional
        Timed iterations per repetition, or per size; None (or a size missing from the
        dict): calibrated with :func:`calibrate_iters`.
    min_time : float, optional
        Seconds one repetition should last when calibrated (default 0.01).
    rank_a, rank_b : int, optional
        The two ranks that exchange messages (default 0 and 1).
    rounds : int, optional
        Rounds over the implementations, pooled (default 1).
    buffers : {"huge-pages", "numpy", "4k-pages"}, optional
        The memory the messages live in.

    Returns
    -------
    list of dict
        One :func:`record` per size and implementation (``impl``, ``mode``, ``iters``,
        ``warmup``, ``buffer``, ``huge_page_share``; times per message, µs), the same on
        every rank.

    Raises
    ------
    ValueError
        An unknown `buffers`, `mode` or implementation, or a negative size.
    """
    if buffers not in BUFFER_KINDS:
        raise ValueError(f"buffers must be one of {BUFFER_KINDS}, got {buffers!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    for impl in impls:
        if impl not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    out = []
    for n in sizes:
        n = int(n)
        if n < 0:
            raise ValueError(f"message sizes must be >= 0, got {n}")
        s, r = send_and_receive(n, comm.Get_rank(), buffers)
        share = huge_page_share(s) if n >= (1 << 16) else None
        it = (iters.get(n) if isinstance(iters, dict) else iters) or calibrate_iters(
            comm, n, min_time=min_time, mode=mode, rank_a=rank_a, rank_b=rank_b)
        wu = warmup if warmup is not None else max(1, min(it, 100))
        pooled = {impl: [] for impl in impls}
        for _ in range(rounds):
            for impl in impls:
                pooled[impl].extend(_run_pingpong(comm, impl, s, r, n, rank_a, rank_b, mode,
                                                  wu, it, reps))
        for impl in impls:
            out.append(record(pooled[impl], size_bytes=n, impl=impl, mode=mode, iters=it,
                              warmup=wu, buffer=buffers, huge_page_share=share))
    return out


def measure_memcopy(comm, sizes: Iterable[int], *, method: str = "loop", reps: int = 7,
                    min_time: float = 0.005) -> list[dict]:
    """Local copy ``dst[:] = src`` records, sizes in bytes (multiples of 8; collective).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator; every rank copies, and times are the slowest rank's.
    sizes : iterable of int
        Bytes copied, multiples of 8 (whole doubles).
    method : {"loop", "memcpy"}, optional
        The kernel's copy: a C loop over the doubles, or ``memcpy``.
    reps : int, optional
        Repetitions (default 7).
    min_time : float, optional
        Seconds one repetition should last; iterations are calibrated to it
        (default 0.005).

    Returns
    -------
    list of dict
        One :func:`record` per size (``impl`` is ``memcopy-<method>``; times per copy,
        µs).

    Raises
    ------
    ValueError
        A size that is negative or not a multiple of 8.
    """
    from .kernels import memcopy as k

    out = []
    for n in sizes:
        n = int(n)
        if n < 0 or n % 8:
            raise ValueError(f"copy sizes are whole doubles: multiples of 8 bytes, got {n}")
        src = np.random.default_rng(0).random(n // 8)
        dst = np.zeros_like(src)
        iters = 1
        while True:
            t = k.memcopy(comm, dst, src, method=method, warmup=1, iters=iters, reps=3).min()
            if t * iters >= min_time / 4 or iters >= 10_000_000:
                iters = int(max(1, min(10_000_000, round(iters * min_time / max(t * iters, 1e-9)))))
                break
            iters *= 8
        times = k.memcopy(comm, dst, src, method=method, warmup=min(iters, 100), iters=iters,
                          reps=reps)
        if not np.array_equal(dst, src):
            raise RuntimeError("memcopy kernel did not copy the array")
        out.append(record(times, size_bytes=n, impl=f"memcopy-{method}", iters=iters))
    return out


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
        ranks, transport = cluster.n, cluster.transport
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


def _on_world(fn, *args, **kwargs):
    """``fn(COMM_WORLD, *args, **kwargs)`` on an engine (`fn` travels by its module's name)."""
    from mpi4py import MPI

    return fn(MPI.COMM_WORLD, *args, **kwargs)


def pingpong(cluster, sizes: Iterable[int], *, timeout: float = 300, **kwargs):
    """Run :func:`measure_pingpong` on the cluster; a DataFrame with context columns.

    Parameters
    ----------
    cluster : MPICluster
        The running cluster; all its ranks take part (``COMM_WORLD``).
    sizes : iterable of int
        Message sizes, in bytes.
    timeout : float, optional
        Seconds the whole measurement may take (default 300).
    **kwargs
        The options of :func:`measure_pingpong` (``impls``, ``mode``, ``reps``, ...).

    Returns
    -------
    pandas.DataFrame
        Rank 0's records, one row per size and implementation, with the cluster's
        context (:func:`frame`).
    """
    recs = cluster.run(_on_world, measure_pingpong, list(sizes), timeout=timeout, **kwargs)[0]
    return frame(recs, {**context(cluster), **cluster.info})


def forwarding(cluster, nbytes: int = 1 << 20, *, reps: int = 15,
               timeout: float = 120) -> dict:
    """Run :func:`forwarding_times` on the cluster: rank 0's times, with the context
    (machine, library, ranks, whether they were oversubscribed) and ``ratio``, the
    forwarded message's time over the resent one's.

    Parameters
    ----------
    cluster : MPICluster
        The running cluster (2 ranks or more).
    nbytes : int, optional
        The large message's size, in bytes (default 1 MiB).
    reps : int, optional
        Repetitions; each time is the fastest (default 15).
    timeout : float, optional
        Seconds the measurement may take (default 120).

    Returns
    -------
    dict
        The context, the cluster's :attr:`~MPICluster.info`, :func:`forwarding_times`'
        results (µs) and ``ratio``.
    """
    got = cluster.run(_on_world, forwarding_times, int(nbytes), int(reps),
                      timeout=timeout)[0]
    got["ratio"] = got["forwarded_us"] / got["resent_us"]
    return {**context(cluster), **cluster.info, **got}


def memcopy(cluster, sizes: Iterable[int], *, timeout: float = 300, **kwargs):
    """Time the local copy on rank 0 alone (the others wait); a DataFrame.

    Parameters
    ----------
    cluster : MPICluster
        The running cluster; only its rank 0 copies.
    sizes : iterable of int
        Bytes copied, multiples of 8.
    timeout : float, optional
        Seconds the whole measurement may take (default 300).
    **kwargs
        The options of :func:`measure_memcopy` (``method``, ``reps``, ``min_time``).

    Returns
    -------
    pandas.DataFrame
        One row per size, with the cluster's context; ``ranks`` is 1 and
        ``oversubscribed`` False (one process copied).

    Raises
    ------
    ValueError
        A size that is negative or not a multiple of 8.
    """
    sizes = [int(n) for n in sizes]
    bad = [n for n in sizes if n < 0 or n % 8]
    if bad:
        raise ValueError(f"copy sizes are whole doubles: multiples of 8 bytes, got {bad}")
    recs = cluster.run(_on_self_rank0, sizes, timeout=timeout, **kwargs)[0]
    ctx = {**context(cluster), **cluster.info}
    df = frame(recs, ctx)
    df["ranks"] = 1
    df["oversubscribed"] = False
    return df


def _on_self_rank0(sizes, **kwargs):
    from mpi4py import MPI

    from . import timing

    comm = MPI.COMM_WORLD
    recs = err = None
    if comm.rank == 0:
        try:
            recs = timing.measure_memcopy(MPI.COMM_SELF, sizes, **kwargs)
        except Exception as exc:  # every rank must leave the bcast, and raise alike
            err = exc
    recs, err = comm.bcast((recs, err), root=0)
    if err is not None:
        raise err
    return recs


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
