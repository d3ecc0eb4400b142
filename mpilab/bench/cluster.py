"""The cluster's lifecycle (:mod:`mpilab.cluster.lifecycle`): cold start, reconnect from a
new process, restart, stop.

    python -m mpilab.bench cluster --ranks 4 --reps 3 --json OUT

Records carry ``impl`` (the phase), ``ranks``, ``t_us_min``, ``t_us_median`` (and
``t_s_median`` for reading), and meta says whether the engines were oversubscribed.
"""

from __future__ import annotations

import sys

from ..cluster.lifecycle import run
from . import finish, parser


def main(argv=None) -> int:
    p = parser("cluster", __doc__, reps=3, timeout=False)
    p.add_argument("--ranks", "-n", type=int, default=4, help="engines (MPI ranks)")
    a = p.parse_args(argv)

    def show(m, recs):
        lines = [f"# {a.ranks} engines over {a.transport} on {m['cores']} cores"
                 + (" (oversubscribed)" if m.get("oversubscribed") else ""),
                 f"{'phase':>12} {'min (s)':>9} {'median (s)':>11}"]
        lines += [f"{r['impl']:>12} {r['t_us_min'] / 1e6:>9.2f} {r['t_s_median']:>11.2f}"
                  for r in recs]
        return "\n".join(lines)

    return finish("cluster", a.json, lambda: run(a.ranks, a.reps, a.transport), show)


if __name__ == "__main__":
    sys.exit(main())
