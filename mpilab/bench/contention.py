"""Contention: several pairs of ranks ping-ponging at once, on one memory system or one link.

    python -m mpilab.bench contention --sizes 8,65536,1048576 --pairs 1,2,4 --json OUT
    python -m mpilab.bench contention --nodes 2 --link fast-ethernet --sizes 1024,131072

A ping-pong (lecture 01) measures one pair alone. Here ``k`` pairs run the course's
compiled ping-pong kernel at the same moment, pair ``i`` being ranks ``2i`` and ``2i + 1``
on a communicator of their own, by default in its ``oneway`` mode (rank ``2i`` streams
blocking sends to ``2i + 1``, which acknowledges the last: every pair loads the same
direction, as the paper's one-way test; ``--mode roundtrip`` ping-pongs instead): every repetition starts from a barrier of all the ranks, and
lasts about ``--min-time`` seconds, so the pairs overlap for nearly all of it. Pair
counts alternate over ``--rounds`` in one job, so one pair alone and ``k`` together are
measured side by side. Per pair count and size, a record gives the slowest pair's
one-way time (min, median over repetitions), the bandwidth one pair gets, the aggregate
of all pairs, and ``slowdown``: the pair count's median time over one pair's.

On one host the pairs share the memory system (caches, memory bandwidth, the kernel's
copy path): large messages slow down once the pairs' copies together reach what memory
delivers; small ones should not, as long as every rank has a core. With ``--nodes 2``
(emulated nodes, root: :mod:`mpilab.netlab`, ``--map-by node``) rank ``2i`` sits on
node 0 and rank ``2i + 1`` on node 1, so every pair crosses the one shaped link and
``k`` pairs share its rate: the emulation shapes the rate and the delay, not a switch's
buffers or a NIC's queues, and its records say so.

The default pair counts are 1, 2, 4, ... up to one rank per usable core. More pairs than
that can be asked for; the run is then **oversubscribed** (ranks wait for a core, and the
slowdown measures the scheduler as much as the memory or link), and meta and every
record say so.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from .. import runtime, validate
from ..jobs import python_worker
from ..timing import MODES, record, run_meta
from . import finish, parser, placed, where_line

MODULE = "mpilab.bench.contention"


def default_pairs(cores: int) -> list[int]:
    """1, 2, 4, ... pairs up to one rank per core (at least 1 pair)."""
    out, k = [], 1
    while 2 * k <= max(2, cores):
        out.append(k)
        k *= 2
    return out


def _worker(args_path: str, out_path: str) -> int:
    from mpi4py import MPI

    from ..buffers import send_and_receive
    from ..kernels import pingpong as kernel
    from ..timing import calibrate_iters

    a = json.loads(open(args_path).read())
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
    if me == 0:
        with open(out_path, "w") as f:
            json.dump({"times": times, "iters": {str(k): v for k, v in iters.items()},
                       "library": runtime.library_info()}, f)
    return 0


def run(*, sizes, pairs=None, mode: str = "oneway", reps: int = 5, rounds: int = 3, min_time: float = 0.01,
        nodes: int | None = None, link: str = "fast-ethernet",
        timeout: float = 1800.0) -> tuple[dict, list[dict]]:
    """Measure; (meta, records)."""
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
        doc = python_worker(launch, MODULE, args, timeout)
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


def table(records: list[dict]) -> str:
    lines = [f"{'size (B)':>10} {'pairs':>5} {'one-way (us)':>13} {'per pair (MB/s)':>16} "
             f"{'all pairs (MB/s)':>17} {'slowdown':>9}"]
    for r in records:
        over = "  oversubscribed" if r["oversubscribed"] else ""
        lines.append(f"{r['size_bytes']:>10,} {r['pairs']:>5} {r['t_us_median']:>13.2f} "
                     f"{r['pair_bandwidth_MBps']:>16,.1f} {r['aggregate_MBps']:>17,.1f} "
                     f"{r['slowdown']:>8.2f}x{over}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = parser("contention", __doc__, worker=True, transport=False, reps=5, rounds=3,
               min_time=0.01, nodes=True)
    p.add_argument("--sizes", default="8,65536,1048576", help="message sizes in bytes")
    p.add_argument("--mode", choices=MODES, default="oneway",
                   help="oneway: each pair streams rank 2i -> 2i+1 (default); roundtrip: "
                        "ping-pong; window: osu_bw's windows")
    p.add_argument("--pairs", default=None,
                   help="pair counts, e.g. 1,2,4 (default: up to one rank per core)")
    a = p.parse_args(argv)
    if a.worker:
        return _worker(*a.worker)

    def measure():
        pairs = [int(k) for k in a.pairs.split(",")] if a.pairs else None
        return run(sizes=validate.sizes(a.sizes), pairs=pairs, mode=a.mode, reps=a.reps, rounds=a.rounds,
                   min_time=a.min_time, nodes=a.nodes, link=a.link, timeout=a.timeout)

    def show(m, recs):
        s = m["settings"]
        return (where_line(s) + f"# {m['mpi_library_version']} | pairs {s['pairs']} on "
                f"{s['cores']} cores (one pair alone measured beside the others)\n"
                + table(recs))

    return finish("contention", a.json, measure, show)


if __name__ == "__main__":
    sys.exit(main())
