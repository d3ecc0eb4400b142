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

import sys

from .. import pingpong, validate
from ..netlab import where_line
from . import finish, parser


def main(argv=None) -> int:
    p = parser("contention", __doc__, transport=False, reps=5, rounds=3,
               min_time=0.01, nodes=True, sizes="8,65536,1048576")
    p.add_argument("--mode", choices=pingpong.MODES, default="oneway",
                   help="oneway: each pair streams rank 2i -> 2i+1 (default); roundtrip: "
                        "ping-pong; window: osu_bw's windows")
    p.add_argument("--pairs", default=None,
                   help="pair counts, e.g. 1,2,4 (default: up to one rank per core)")
    a = p.parse_args(argv)

    def measure():
        pairs = [int(k) for k in a.pairs.split(",")] if a.pairs else None
        return pingpong.run_contention(sizes=validate.sizes(a.sizes), pairs=pairs, mode=a.mode,
                                       reps=a.reps, rounds=a.rounds, min_time=a.min_time,
                                       nodes=a.nodes, link=a.link, timeout=a.timeout)

    def show(m, recs):
        s = m["settings"]
        return (where_line(s) + f"# {m['mpi_library_version']} | pairs {s['pairs']} on "
                f"{s['cores']} cores (one pair alone measured beside the others)\n"
                + pingpong.contention_table(recs))

    return finish("contention", a.json, measure, show)


if __name__ == "__main__":
    sys.exit(main())
