"""Message matching: what a message pays to find its receive, as an MPI job of its own.

An MPI library keeps two queues per communicator: receives posted before their message
arrived (the *posted* queue) and messages that arrived before their receive (the
*unexpected* queue). Open MPI 4.1's ob1 walks either list from its head
(``ompi/mca/pml/ob1/pml_ob1_recvfrag.c``, ``pml_ob1_recvreq.c``), so a message that
finds N entries ahead of its own receive pays N comparisons. :func:`queue_times` times a
ping-pong of small messages past N entries queued on purpose (the compiled kernel
:mod:`mpilab.kernels.matching`), :func:`late_times` how long a send waits for a receiver
that posts late, eager against rendezvous. :func:`run_matching` runs both in one job
(``python -m mpilab.bench matching``, lecture 01); its ranks run
``python -m mpilab.pingpong --worker``, which calls :func:`matching_worker`;
:func:`fit_search` turns the times into a cost per queued entry, a model labelled as one.
"""

from __future__ import annotations

import numpy as np

from .. import runtime, validate
from ..jobs import python_worker
from ..netlab.placing import placed
from ..timing import pinned, record, run_meta
from .experiments import MODULE

#: queued entries per rank that :func:`run_matching` measures by default
DEPTHS = (0, 64, 256, 1024, 4096)
#: where the entries wait: receives posted ahead, or messages that arrived ahead
QUEUES = ("posted", "unexpected")
#: the posted receives' wildcard: none, or ``MPI_ANY_SOURCE``
WILDCARDS = ("none", "source")
#: a receiver that posts late: computing outside MPI meanwhile, or polling inside it
LATE = ("late", "late-polling")
#: message sizes for the late receiver: inline (≤ 256 B), eager, rendezvous on Open MPI's
#: shared memory (its ``btl_vader_eager_limit`` is 4 KiB, the header included)
LATE_SIZES = (8, 1024, 65536)
#: how late the receiver posts, µs
DELAY_US = 200.0


def _iters_for(run, min_time: float) -> int:
    """Iterations for a repetition of about `min_time` s, from one short timed try."""
    t = float(run(10, 1)[0][0])
    return int(min(100_000, max(10, min_time / max(t, 1e-9))))


def queue_times(comm, depths, *, queue: str = "unexpected", wildcard: str = "none",
                nbytes: int = 8, reps: int = 15, min_time: float = 0.001) -> dict:
    """On every rank of `comm`: one-way times of a ping-pong between ranks 0 and 1 past
    each of `depths` queued entries (the compiled kernel, the course's timing protocol,
    each rank on a core of its own where there are cores enough: :func:`pinned`).

    Unpinned, two ranks of a notebook's 4 engines on 2 cores measured 1.1 µs a message
    behind no queue for milliseconds at a time and 0.39 µs otherwise (two ranks taking
    turns on one core, as pinning them removes it: 19 of 450 repetitions above 0.8 µs
    pinned), and lab 01's measured check then could not find two rounds that agreed
    (2026-11-29, the course's 2-core VM).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        Two ranks or more; ranks 0 and 1 exchange, the others join the barriers.
    depths : sequence of int
        Entries each of the two ranks queues first (0 .. the kernel's ``MAX_DEPTH``).
    queue : {"posted", "unexpected"}, optional
        Where they wait (default ``unexpected``).
    wildcard : {"none", "source"}, optional
        ``source``: the posted receives use ``MPI_ANY_SOURCE``.
    nbytes : int, optional
        Bytes of a ping-pong message (default 8).
    reps : int, optional
        Timed repetitions per depth (default 15).
    min_time : float, optional
        Seconds one repetition should last; sets the iterations (default 0.001: on a busy
        2-core machine many short repetitions find a quiet moment where a few long ones
        do not).

    Returns
    -------
    dict
        ``depths``, ``iters``, ``times_s`` (each depth's repetitions, seconds per one-way
        message, the slowest rank's), ``t_us`` (each depth's fastest, µs) and ``bad``
        (messages that arrived wrong, summed over the ranks), the same on every rank.
    """
    from mpi4py import MPI

    from ..kernels import matching as kernel

    s = ((np.arange(max(nbytes, 1)) * 7 + 3) % 251).astype(np.uint8)
    r = np.zeros_like(s)
    out: dict = {"depths": [], "iters": [], "times_s": [], "t_us": [], "bad": 0}
    with pinned(comm):
        for d in depths:
            def run(iters, reps_, d=d):
                return kernel.matching(comm, s, r, d, nbytes, queue=queue,
                                       wildcard=wildcard, warmup=10, iters=iters, reps=reps_)

            iters = _iters_for(run, min_time)
            times, bad = run(iters, reps)
            out["depths"].append(int(d))
            out["iters"].append(iters)
            out["times_s"].append(times.tolist())
            out["t_us"].append(float(times.min()) * 1e6)
            out["bad"] += comm.allreduce(bad, op=MPI.SUM)
    return out


def late_times(comm, sizes, *, delay_us: float = DELAY_US, reps: int = 7,
               iters: int = 10) -> dict:
    """On every rank of `comm`: how long rank 0's ``MPI_Send`` of each size takes when
    rank 1 posts its receive `delay_us` later, computing outside MPI (``late``) or
    polling inside it (``late-polling``) meanwhile.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        Two ranks or more; ranks 0 and 1 exchange, the others join the barriers.
    sizes : sequence of int
        Message sizes, in bytes.
    delay_us : float, optional
        How late the receive is posted, µs (default :data:`DELAY_US`).
    reps, iters : int, optional
        Repetitions, and sends per repetition (each after an untimed barrier).

    Returns
    -------
    dict
        ``{"late": {size: times_s}, "late-polling": {...}}`` (rank 0's seconds in
        ``MPI_Send`` per send, each repetition) and ``bad``, the same on every rank.
    """
    from mpi4py import MPI

    from ..kernels import matching as kernel

    out: dict = {q: {} for q in LATE}
    bad_all = 0
    with pinned(comm):  # as queue_times
        for q in LATE:
            for n in sizes:
                s = ((np.arange(max(n, 1)) * 7 + 3) % 251).astype(np.uint8)
                r = np.zeros_like(s)
                times, bad = kernel.matching(comm, s, r, 0, n, queue=q, delay_us=delay_us,
                                             warmup=2, iters=iters, reps=reps)
                out[q][str(n)] = times.tolist()
                bad_all += comm.allreduce(bad, op=MPI.SUM)
    out["bad"] = bad_all
    return out


def matching_worker(a: dict) -> dict | None:
    """On every rank of a :func:`run_matching` job: every queue and wildcard, then the
    late receiver.

    Parameters
    ----------
    a : dict
        The job's arguments: ``depths``, ``queues``, ``wildcards``, ``nbytes``, ``reps``,
        ``rounds``, ``min_time``, ``late_sizes``, ``delay_us``.

    Returns
    -------
    dict or None
        On rank 0 ``queues`` (``"<queue>/<wildcard>"``: :func:`queue_times`, the
        repetitions of every round pooled), ``late``
        (:func:`late_times`) and ``library``; None on the other ranks.
    """
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    got: dict = {}
    for _ in range(a["rounds"]):  # the cases alternate: a busy moment hits one round
        for q in a["queues"]:
            for w in a["wildcards"]:
                t = queue_times(comm, a["depths"], queue=q, wildcard=w, nbytes=a["nbytes"],
                                reps=a["reps"], min_time=a["min_time"])
                if f"{q}/{w}" not in got:
                    got[f"{q}/{w}"] = t
                    continue
                g = got[f"{q}/{w}"]
                for i in range(len(g["depths"])):
                    g["times_s"][i] += t["times_s"][i]
                    g["t_us"][i] = min(g["t_us"][i], t["t_us"][i])
                g["bad"] += t["bad"]
    late = (late_times(comm, a["late_sizes"], delay_us=a["delay_us"], reps=a["reps"])
            if a["late_sizes"] else None)
    if comm.Get_rank() != 0:
        return None
    return {"queues": got, "late": late, "library": runtime.library_info()}


def run_matching(*, depths=DEPTHS, queues=QUEUES, wildcards=WILDCARDS, nbytes: int = 8,
                 late_sizes=LATE_SIZES, delay_us: float = DELAY_US, reps: int = 15,
                 rounds: int = 2, min_time: float = 0.001, transport: str = "shm",
                 timeout: float = 1800.0) -> tuple[dict, list[dict]]:
    """A ping-pong past queued entries and a late receiver, on 2 ranks, in one MPI job.

    Parameters
    ----------
    depths : sequence of int, optional
        Entries each rank queues first (default :data:`DEPTHS`).
    queues : sequence of str, optional
        Of :data:`QUEUES` (default both).
    wildcards : sequence of str, optional
        Of :data:`WILDCARDS` (default both).
    nbytes : int, optional
        Bytes of a ping-pong message (default 8).
    late_sizes : sequence of int, optional
        Message sizes for the late receiver (default :data:`LATE_SIZES`; empty: none).
    delay_us : float, optional
        How late that receiver posts, µs (default :data:`DELAY_US`).
    reps : int, optional
        Timed repetitions of each case per round (default 15).
    rounds : int, optional
        Rounds of the queued cases, one after the other, their repetitions pooled
        (default 2); the late receiver runs once.
    min_time : float, optional
        Seconds one repetition of the ping-pong should last (default 0.001).
    transport : str, optional
        ``shm`` or ``tcp`` (default ``shm``).
    timeout : float, optional
        Seconds the MPI job may run (default 1800).

    Returns
    -------
    tuple of (dict, list of dict)
        The meta and the records: per queue, wildcard and depth a ``kernel`` record
        (one-way µs, ``depth``, ``queue``, ``wildcard``, ``iters``, ``bad``); per late
        mode and size a record of rank 0's time in ``MPI_Send`` (``queue`` ``late`` or
        ``late-polling``, ``delay_us``, ``eager_limit``, ``bad``).

    Raises
    ------
    ValueError
        No depth, a depth out of range, an unknown queue or wildcard, `reps` below 1 or
        a negative `delay_us`, `rounds` below 1.
    """
    depths = sorted({validate.count(d, "depth", lowest=0) for d in depths})
    if not depths:
        raise ValueError("give at least one depth")
    if depths[-1] > 16384:
        raise ValueError(f"a depth is at most 16384 entries, got {depths[-1]}")
    queues = validate.names(queues, QUEUES, "queue")
    wildcards = validate.names(wildcards, WILDCARDS, "wildcard")
    late_sizes = [validate.count(n, "size", lowest=0) for n in late_sizes]
    validate.count(reps, "reps")
    validate.count(rounds, "rounds")
    validate.count(nbytes, "nbytes", lowest=0)
    if not 0 <= delay_us <= 1e6:
        raise ValueError(f"delay_us is between 0 and 1e6 µs, got {delay_us!r}")
    cores = runtime.usable_cores()
    args = {"depths": depths, "queues": queues, "wildcards": wildcards, "nbytes": nbytes,
            "late_sizes": late_sizes, "delay_us": float(delay_us), "reps": reps,
            "rounds": rounds, "min_time": min_time}
    with placed(2, transport) as (launch, where):
        doc = python_worker(launch, MODULE, {"what": "matching", **args}, timeout)
    common = {"ranks": 2, "transport": transport, "oversubscribed": 2 > cores, **where}
    records = []
    for key, got in doc["queues"].items():
        q, w = key.split("/")
        for d, it, times in zip(got["depths"], got["iters"], got["times_s"], strict=True):
            records.append(record(times, size_bytes=nbytes, impl="kernel", queue=q,
                                  wildcard=w, depth=d, iters=it, bad=got["bad"], **common))
    limit = runtime.eager_limits(doc["library"].get("mpi_library")).get(transport)
    for q, per in (doc["late"] or {}).items():
        if q == "bad":
            continue
        for n, times in per.items():
            records.append(record(times, size_bytes=int(n), impl="kernel", queue=q,
                                  wildcard="none", depth=0, delay_us=float(delay_us),
                                  eager_limit=limit, bad=doc["late"]["bad"], **common))
    settings = {**args, "ranks": 2, "cores": cores, "transport": transport, **where}
    return run_meta(launch, settings, doc["library"]), records


def fit_search(depths, t_us) -> tuple[float, float]:
    """A model, not a measurement: the least-squares line ``t = base + depth · cost``.

    Parameters
    ----------
    depths : sequence of float
        Entries queued ahead of each message.
    t_us : sequence of float
        The one-way times measured at those depths, µs.

    Returns
    -------
    tuple of (float, float)
        ``base_us`` (the line at depth 0, µs) and ``per_entry_ns`` (its slope, ns per
        queued entry).

    Raises
    ------
    ValueError
        Fewer than two distinct depths.
    """
    d = np.asarray(depths, dtype=float)
    t = np.asarray(t_us, dtype=float)
    if d.shape != t.shape or len(set(d.tolist())) < 2:
        raise ValueError("fit_search needs times at two depths or more, one per depth")
    slope, intercept = np.polyfit(d, t, 1)
    return float(intercept), float(slope * 1e3)


def matching_table(records: list[dict]) -> str:
    """The one-way time per depth (a column per queue and wildcard), then the late sends.

    Parameters
    ----------
    records : list of dict
        :func:`run_matching`'s records.

    Returns
    -------
    str
        The tables, the fastest repetition of each case in µs (a send that waited for a
        late receive cannot be faster than the wait; the median adds the moments another
        process held a core).
    """
    qs = [r for r in records if r["queue"] in QUEUES]
    cols = sorted({(r["queue"], r["wildcard"]) for r in qs})
    by = {(r["queue"], r["wildcard"], r["depth"]): r for r in qs}
    lines = [f"{'queued':>8} " + " ".join(f"{q + '/' + w:>18}" for q, w in cols)
             + "   one-way µs, fastest repetition"]
    for d in sorted({r["depth"] for r in qs}):
        lines.append(f"{d:>8} " + " ".join(
            f"{by[(q, w, d)]['t_us_min']:>18.3f}" if (q, w, d) in by else f"{'':>18}"
            for q, w in cols))
    late = [r for r in records if r["queue"] in LATE]
    if late:
        lines.append(f"\n# rank 0's MPI_Send when the receive is posted "
                     f"{late[0]['delay_us']:g} µs late (µs, fastest repetition)")
        lines.append(f"{'size (B)':>10} " + " ".join(f"{q:>14}" for q in LATE))
        lb = {(r["queue"], r["size_bytes"]): r for r in late}
        for n in sorted({r["size_bytes"] for r in late}):
            lines.append(f"{n:>10,} " + " ".join(
                f"{lb[(q, n)]['t_us_min']:>14.2f}" if (q, n) in lb else f"{'':>14}"
                for q in LATE))
    return "\n".join(lines)
