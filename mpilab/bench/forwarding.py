"""Where a large message's bytes were: an array resent against one forwarded, side by side.

    python -m mpilab.bench forwarding --sizes 65536,1048576,16777216 --rounds 10 --pause 2

Two ranks, two ping-pongs of the same size timed in one loop that alternates them
(:func:`mpilab.pingpong.forwarding_times`): one sends the same array every time, as
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

import sys

from .. import pingpong, validate
from . import finish, parser


def main(argv=None) -> int:
    p = parser("forwarding", __doc__, transport=False, reps=15, rounds=5,
               sizes="65536,1048576,16777216")
    p.add_argument("--pause", type=float, default=1.0, help="seconds between rounds")
    a = p.parse_args(argv)

    def measure():
        return pingpong.run_forwarding(sizes=validate.sizes(a.sizes), reps=a.reps,
                                       rounds=a.rounds, pause=a.pause, timeout=a.timeout)

    def show(m, recs):
        s = m["settings"]
        over = ", oversubscribed" if 2 > s["cores"] else ""
        return (f"# {m['mpi_library_version']} | 2 ranks on {s['cores']} cores{over} | "
                f"{s['rounds']} rounds {s['pause']:g} s apart, each the fastest of "
                f"{s['reps']}\n" + pingpong.forwarding_table(recs))

    return finish("forwarding", a.json, measure, show)


if __name__ == "__main__":
    sys.exit(main())
