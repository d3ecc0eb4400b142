"""Message matching: a ping-pong past queued entries, and a receiver that posts late.

    python -m mpilab.bench matching --depths 0,64,256,1024,4096 --json matching.json

Two ranks. Each first queues ``depth`` entries the ping-pong never matches: receives
posted ahead (``posted``) or messages sent ahead and not yet received (``unexpected``),
with and without ``MPI_ANY_SOURCE`` on the posted receives; then round trips of
``--nbytes`` bytes (the compiled kernel :mod:`mpilab.kernels.matching`, the course's one
timing protocol, one-way time). Open MPI's ob1 walks its queues from the head, so every
message pays for the entries ahead of it: the report fits ``base + depth · cost`` to each
column (a model, labelled as one). Then ``--late-sizes``: rank 0's ``MPI_Send`` when rank
1 posts its receive ``--delay-us`` later, computing meanwhile (``late``) or polling inside
MPI (``late-polling``): an eager message returns without waiting for the receive, a
rendezvous one waits for it.

A record per queue, wildcard and depth (``t_us_min`` etc. per one-way message, ``bad``:
messages a check after the timed ones found wrong) and per late mode and size (rank 0's
time in ``MPI_Send``, ``eager_limit``). Exit status 1 when a message arrived wrong.
"""

from __future__ import annotations

import sys

from .. import pingpong, validate
from . import finish, parser


def main(argv=None) -> int:
    p = parser("matching", __doc__, reps=15, rounds=2, min_time=0.001)
    p.add_argument("--depths", default=",".join(map(str, pingpong.DEPTHS)),
                   help="entries queued ahead of the ping-pong, per rank")
    p.add_argument("--queues", default="all", help="posted, unexpected or all")
    p.add_argument("--wildcards", default="all", help="none, source or all")
    p.add_argument("--nbytes", type=int, default=8, help="bytes of a ping-pong message")
    p.add_argument("--late-sizes", default=",".join(map(str, pingpong.LATE_SIZES)),
                   help="message sizes for the late receiver ('' for none)")
    p.add_argument("--delay-us", type=float, default=pingpong.DELAY_US,
                   help="how late the receiver posts, µs")
    a = p.parse_args(argv)

    def measure():
        return pingpong.run_matching(
            depths=validate.sizes(a.depths), queues=a.queues, wildcards=a.wildcards,
            nbytes=a.nbytes, late_sizes=validate.sizes(a.late_sizes) if a.late_sizes else [],
            delay_us=a.delay_us, reps=a.reps, rounds=a.rounds, min_time=a.min_time, transport=a.transport,
            timeout=a.timeout)

    def show(m, recs):
        s = m["settings"]
        over = ", oversubscribed" if 2 > s["cores"] else ""
        lines = [f"# {m['mpi_library_version']} | 2 ranks over {s['transport']} on "
                 f"{s['cores']} cores{over} | {s['nbytes']} B messages, fastest of "
                 f"{s['rounds']} rounds x {s['reps']}", pingpong.matching_table(recs)]
        for q in pingpong.QUEUES:
            for w in pingpong.WILDCARDS:
                got = sorted((r["depth"], r["t_us_min"]) for r in recs
                             if r["queue"] == q and r["wildcard"] == w)
                if len(got) >= 2:
                    base, cost = pingpong.fit_search(*zip(*got, strict=True))
                    lines.append(f"# model fitted to {q}/{w}: {base:.3f} µs + {cost:.2f} ns "
                                 "per queued entry")
        bad = sum({(r["queue"], r["wildcard"]): r["bad"] for r in recs}.values())
        if bad:
            lines.append(f"# {bad} messages arrived wrong")
        return "\n".join(lines)

    return finish("matching", a.json, measure, show,
                  ok=lambda recs: not any(r["bad"] for r in recs))


if __name__ == "__main__":
    sys.exit(main())
