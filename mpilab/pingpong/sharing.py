"""What a ping-pong shares: pairs ping-ponging at once, and a message whose bytes sit in the
other core's cache, as MPI jobs of their own.

:func:`run_contention` runs ``k`` pairs of ranks through the compiled kernel at the same
moment, one pair alone measured beside them (``python -m mpilab.bench contention``,
lecture 01); :func:`run_forwarding` times an array resent against one forwarded
(:func:`mpilab.pingpong.forwarding_times`) in rounds spaced in time, each beside a cache
line's round trip between two cores (``python -m mpilab.bench forwarding``). Their ranks
run ``python -m mpilab.pingpong --worker``, which calls :func:`contention_worker` or
:func:`forwarding_worker`.
"""

from __future__ import annotations

import time

import numpy as np

from .. import runtime, validate
from ..jobs import python_worker
from ..netlab.placing import placed
from ..timing import record, run_meta
from .copying import line_round_trip_ns
from .experiments import MODULE
from .loops import MODES, calibrate_iters, forwarding_times


def default_pairs(cores: int) -> list[int]:
    """1, 2, 4, ... pairs up to one rank per core (at least 1 pair).

    Parameters
    ----------
    cores : int
        Usable cores; the largest pair count puts one rank on each.

    Returns
    -------
    list of int
        The pair counts.
    """
    out, k = [], 1
    while 2 * k <= max(2, cores):
        out.append(k)
        k *= 2
    return out


def contention_worker(a: dict) -> dict | None:
    """On every rank of a :func:`run_contention` job: pair ``i`` is ranks ``2i`` and
    ``2i + 1``; every repetition starts from a barrier of all the ranks.

    Parameters
    ----------
    a : dict
        The job's arguments: ``sizes``, ``pairs``, ``mode``, ``reps``, ``rounds``,
        ``min_time``.

    Returns
    -------
    dict or None
        On rank 0 ``times`` (by size, then pair count: the slowest pair's time per
        repetition, seconds), ``iters`` and ``library``; None on the other ranks.
    """
    from mpi4py import MPI

    from ..buffers import send_and_receive
    from ..kernels import pingpong as kernel

    world = MPI.COMM_WORLD
    me = world.Get_rank()
    pair = world.Split(me // 2, me)
    times: dict[str, dict[str, list[float]]] = {}
    iters = {}
    for n in a["sizes"]:
        bufs = send_and_receive(n, me)
        # calibrated on one pair alone, then the same count for every pair count
        if me < 2:
            iters[n] = calibrate_iters(pair, n, min_time=a["min_time"], mode=a["mode"])
        iters[n] = world.bcast(iters.get(n), root=0)
        for _ in range(a["rounds"]):
            for k in a["pairs"]:
                key = str(k)
                active = me < 2 * k
                for _ in range(a["reps"]):
                    world.Barrier()
                    if active:
                        t = kernel.pingpong(pair, bufs[0], bufs[1], n, mode=a["mode"],
                                            warmup=2, iters=iters[n], reps=1)[0]
                    else:
                        t = 0.0
                    slowest = world.allreduce(t, op=MPI.MAX)
                    times.setdefault(str(n), {}).setdefault(key, []).append(slowest)
    pair.Free()
    if me != 0:
        return None
    return {"times": times, "iters": {str(k): v for k, v in iters.items()},
            "library": runtime.library_info()}


def run_contention(*, sizes, pairs=None, mode: str = "oneway", reps: int = 5, rounds: int = 3,
                   min_time: float = 0.01, nodes: int | None = None,
                   link: str = "fast-ethernet",
                   timeout: float = 1800.0) -> tuple[dict, list[dict]]:
    """Several pairs of ranks ping-ponging at once, one pair alone measured beside them.

    Parameters
    ----------
    sizes : sequence of int
        Message sizes, in bytes.
    pairs : sequence of int, optional
        Pair counts (1 is always added); None: :func:`default_pairs` of the usable cores.
    mode : {"roundtrip", "oneway", "window"}, optional
        The kernel's pattern (default ``oneway``: every pair streams rank 2i -> 2i+1).
    reps, rounds : int, optional
        Repetitions per pair count, and rounds alternating the pair counts (5 and 3).
    min_time : float, optional
        Seconds one repetition should last (default 0.01).
    nodes : int, optional
        Emulated nodes (``map_by`` node: every pair crosses the link); None: this host.
    link : str, optional
        The emulated nodes' link profile (with `nodes`).
    timeout : float, optional
        Seconds the MPI job may run (default 1800).

    Returns
    -------
    tuple of (dict, list of dict)
        The meta and one record per size and pair count: the slowest pair's one-way
        time, ``pair_bandwidth_MBps``, ``aggregate_MBps``, ``slowdown`` (over one pair
        alone), ``oversubscribed``.

    Raises
    ------
    ValueError
        No size, a pair count, `reps` or `rounds` below 1, or an unknown `mode`.
    """
    sizes = [validate.count(n, "size", lowest=0) for n in sizes]
    cores = runtime.usable_cores()
    pairs = sorted({validate.count(k, "pairs") for k in (pairs or default_pairs(cores))})
    if not sizes:
        raise ValueError("give at least one message size")
    for v, name in ((reps, "reps"), (rounds, "rounds")):
        validate.count(v, name)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if 1 not in pairs:
        pairs = [1, *pairs]  # the side-by-side reference
    ranks = 2 * max(pairs)
    args = {"sizes": sizes, "pairs": pairs, "mode": mode, "reps": reps, "rounds": rounds,
            "min_time": min_time}
    with placed(ranks, "shm", nodes=nodes, link=link, map_by="node") as (launch, where):
        doc = python_worker(launch, MODULE, {"what": "contention", **args}, timeout)
    records = []
    for n in sizes:
        per = doc["times"][str(n)]
        alone = float(np.median(per["1"]))
        for k in pairs:
            t = np.asarray(per[str(k)])
            med = float(np.median(t))
            records.append(record(
                t, size_bytes=n, impl="kernel", mode=mode, pairs=k, ranks=2 * k,
                iters=doc["iters"][str(n)],
                pair_bandwidth_MBps=n / med / 1e6 if med > 0 else None,
                aggregate_MBps=k * n / med / 1e6 if med > 0 else None,
                slowdown=med / alone if alone > 0 else None,
                oversubscribed=2 * k > cores, **where))
    settings = {**args, "ranks": ranks, "cores": cores, **where}
    return run_meta(launch, settings, doc["library"]), records


def contention_table(records: list[dict]) -> str:
    """One line per size and pair count.

    Parameters
    ----------
    records : list of dict
        :func:`run_contention`'s records, one per size and pair count.

    Returns
    -------
    str
        One-way time, bandwidth per pair and of all pairs, slowdown, oversubscription.
    """
    lines = [f"{'size (B)':>10} {'pairs':>5} {'one-way (us)':>13} {'per pair (MB/s)':>16} "
             f"{'all pairs (MB/s)':>17} {'slowdown':>9}"]
    for r in records:
        over = "  oversubscribed" if r["oversubscribed"] else ""
        lines.append(f"{r['size_bytes']:>10,} {r['pairs']:>5} {r['t_us_median']:>13.2f} "
                     f"{r['pair_bandwidth_MBps']:>16,.1f} {r['aggregate_MBps']:>17,.1f} "
                     f"{r['slowdown']:>8.2f}x{over}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- forwarding


def forwarding_worker(a: dict) -> dict | None:
    """On every rank of a :func:`run_forwarding` job: :func:`forwarding_times` per size.

    Parameters
    ----------
    a : dict
        The job's arguments: ``sizes`` and ``reps``.

    Returns
    -------
    dict or None
        On rank 0 ``sizes`` (each size's times) and ``library``; None on the others.
    """
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    got = {str(n): forwarding_times(world, n, a["reps"]) for n in a["sizes"]}
    if world.Get_rank() != 0:
        return None
    return {"sizes": got, "library": runtime.library_info()}


def run_forwarding(*, sizes, reps: int = 15, rounds: int = 5, pause: float = 1.0,
                   timeout: float = 1800.0) -> tuple[dict, list[dict]]:
    """An array resent against one forwarded, in rounds `pause` seconds apart.

    Each round is an MPI job of its own, and before it this process bounces one cache
    line between the first two usable CPUs (:func:`line_round_trip_ns`).

    Parameters
    ----------
    sizes : sequence of int
        Message sizes, in bytes (8 or more).
    reps : int, optional
        Repetitions per round; each round's time is the fastest (default 15).
    rounds : int, optional
        Rounds, each an MPI job (default 5).
    pause : float, optional
        Seconds between rounds (default 1).
    timeout : float, optional
        Seconds each MPI job may run (default 1800).

    Returns
    -------
    tuple of (dict, list of dict)
        The meta and per size a ``resent`` and a ``forwarded`` record (one time per
        round); the forwarded one adds ``ratios``, ``ratio_median``, ``ratio_max`` and
        ``line_round_trip_ns``.

    Raises
    ------
    ValueError
        No size, a size below 8, `reps` or `rounds` below 1, or a negative `pause`.
    """
    sizes = [validate.count(n, "size", lowest=8) for n in sizes]
    if not sizes:
        raise ValueError("give at least one message size")
    for v, name in ((reps, "reps"), (rounds, "rounds")):
        validate.count(v, name)
    if not pause >= 0:
        raise ValueError(f"pause is seconds between rounds, 0 or more, got {pause!r}")
    cores = runtime.usable_cores()
    args = {"sizes": sizes, "reps": reps, "pause": float(pause)}
    done, lines = [], []
    for i in range(rounds):
        if i and pause > 0:
            time.sleep(pause)
        lines.append(line_round_trip_ns())
        with placed(2, "shm") as (launch, where):
            doc = python_worker(launch, MODULE, {"what": "forwarding", **args}, timeout)
        done.append(doc["sizes"])
    records = []
    for n in sizes:
        per = [r[str(n)] for r in done]
        resent = [x["resent_us"] * 1e-6 for x in per]
        forwarded = [x["forwarded_us"] * 1e-6 for x in per]
        ratios = [f / r for f, r in zip(forwarded, resent, strict=True)]
        common = {"size_bytes": n, "ranks": 2, "oversubscribed": 2 > cores,
                  "alpha_us": float(np.median([x["alpha_us"] for x in per])), **where}
        records.append(record(resent, impl="resent", **common))
        records.append(record(forwarded, impl="forwarded", ratios=ratios,
                              ratio_median=float(np.median(ratios)),
                              ratio_max=float(max(ratios)), line_round_trip_ns=lines,
                              **common))
    settings = {**args, "rounds": rounds, "ranks": 2, "cores": cores, **where}
    return run_meta(launch, settings, doc["library"]), records


def forwarding_table(records: list[dict]) -> str:
    """Resent and forwarded one-way times per size, and the ratios of every round.

    Parameters
    ----------
    records : list of dict
        The records of :func:`run_forwarding` (every round's).

    Returns
    -------
    str
        The table, with a first line of the cache line's round trips where measured.
    """
    lines = [f"{'size (B)':>11} {'resent (us)':>12} {'forwarded (us)':>15} "
             f"{'ratio, median':>14} {'ratio, max':>11}   every round's ratio"]
    fw = next((r for r in records if r["impl"] == "forwarded"), None)
    if fw and any(x is not None for x in fw["line_round_trip_ns"]):
        lines.insert(0, "# a cache line's round trip between the two cores before each round "
                     "(ns): " + " ".join(f"{x:.0f}" for x in fw["line_round_trip_ns"]))
    by = {(r["size_bytes"], r["impl"]): r for r in records}
    for n in sorted({r["size_bytes"] for r in records}):
        rs, fw = by[(n, "resent")], by[(n, "forwarded")]
        lines.append(f"{n:>11,} {rs['t_us_median']:>12.1f} {fw['t_us_median']:>15.1f} "
                     f"{fw['ratio_median']:>13.2f}x {fw['ratio_max']:>10.2f}x   "
                     + " ".join(f"{x:.1f}" for x in fw["ratios"]))
    return "\n".join(lines)
