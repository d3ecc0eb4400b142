"""Where a large message's bytes were: an array resent against one forwarded, side by side.

    python -m mpilab.bench forwarding --sizes 65536,1048576,16777216 --rounds 10 --pause 2

Two ranks, two ping-pongs of the same size timed in one loop that alternates them
(:func:`mpilab.timing.forwarding_times`): one sends the same array every time, as
ping-pong benchmarks do, so that after the first message the receiving core already holds
it in its cache; in the other each rank sends on the array it has just received, as a
ring or a tree does, so the array sits, just written, in the sending core's cache and the
receiver's copy (Open MPI's single copy, above the eager limit) must fetch every line of
it from there. Rounds spaced ``--pause`` seconds apart sample the machine over time: on
the 2-core virtual machine this course was written on, forwarding 1 MiB cost about twice
a resent message most of the time and about ten times at moments, which one round alone
would not show.

Each round is an MPI job of its own, and before it this process bounces one cache line
between the first two usable CPUs (:func:`mpilab.kernels.memcopy.line_bounce_ns`, two
threads, no MPI): the round trip of a line between two cores is what every line of a
forwarded array pays, so the two numbers side by side say whether a slow round was a
slow moment of the machine's cores.

A record per implementation (``resent``, ``forwarded``) and size: the one-way time of
every round (each the fastest of ``--reps``), their minimum and median; the forwarded
record adds every round's ratio forwarded / resent, their median and maximum, and every
round's ``line_round_trip_ns`` (None on one CPU).
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from .. import runtime, validate
from ..jobs import python_worker
from ..timing import record, run_meta
from . import finish, parser, placed

MODULE = "mpilab.bench.forwarding"


def _worker(args_path: str, out_path: str) -> int:
    from mpi4py import MPI

    from ..timing import forwarding_times

    a = json.loads(open(args_path).read())
    world = MPI.COMM_WORLD
    got = {str(n): forwarding_times(world, n, a["reps"]) for n in a["sizes"]}
    if world.Get_rank() == 0:
        with open(out_path, "w") as f:
            json.dump({"sizes": got, "library": runtime.library_info()}, f)
    return 0


def line_round_trip_ns(iters: int = 200_000) -> float | None:
    """A cache line's round trip between the first two CPUs this process may use (ns), or
    None with fewer than two."""
    from ..kernels import memcopy

    cpus = sorted(os.sched_getaffinity(0))
    return memcopy.line_bounce_ns(cpus[0], cpus[1], iters) if len(cpus) > 1 else None


def run(*, sizes, reps: int = 15, rounds: int = 5, pause: float = 1.0,
        timeout: float = 1800.0) -> tuple[dict, list[dict]]:
    """Measure; (meta, records)."""
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
            doc = python_worker(launch, MODULE, args, timeout)
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


def table(records: list[dict]) -> str:
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


def main(argv=None) -> int:
    p = parser("forwarding", __doc__, worker=True, transport=False, reps=15, rounds=5)
    p.add_argument("--sizes", default="65536,1048576,16777216", help="message sizes in bytes")
    p.add_argument("--pause", type=float, default=1.0, help="seconds between rounds")
    a = p.parse_args(argv)
    if a.worker:
        return _worker(*a.worker)

    def measure():
        return run(sizes=validate.sizes(a.sizes), reps=a.reps, rounds=a.rounds,
                   pause=a.pause, timeout=a.timeout)

    def show(m, recs):
        s = m["settings"]
        over = ", oversubscribed" if 2 > s["cores"] else ""
        return (f"# {m['mpi_library_version']} | 2 ranks on {s['cores']} cores{over} | "
                f"{s['rounds']} rounds {s['pause']:g} s apart, each the fastest of "
                f"{s['reps']}\n" + table(recs))

    return finish("forwarding", a.json, measure, show)


if __name__ == "__main__":
    sys.exit(main())
