"""Does a nonblocking exchange overlap the computation? Only if something progresses it.

    python -m mpilab.bench progress --nx 131072 --ny 16 --json OUT
    python -m mpilab.bench progress --nodes 2 --link fast-ethernet --nx 16384 --ny 1280
    python -m mpilab.bench progress --case iallreduce --n 16384 --nodes 2 --link fast-ethernet

The command line of :mod:`mpilab.halo.progress` (what runs, what is measured, the two
measures of overlap): ``nonblocking``, ``overlap`` and ``overlap-test`` side by side on
two ranks (``--ranks``), alternated over ``--rounds``; with ``--case iallreduce`` the
same question for ``MPI_Iallreduce`` (``allreduce``, ``iallreduce``,
``iallreduce-test``). A row of ``131072`` doubles is 1 MiB, above every eager limit;
``--nx 2048`` (16 KiB rows) sits under TCP's 64 KiB eager limit.

With ``--nodes`` the ranks run on emulated nodes (:mod:`mpilab.netlab`), one per node,
so the row crosses TCP. Records say ``emulated`` and what the shaping left out; an
emulated link is not a real network card.
"""

from __future__ import annotations

import sys

from ..halo.progress import CASES, run, table
from ..netlab import where_line
from . import finish, parser


def main(argv=None) -> int:
    """``python -m mpilab.bench progress``: measure, write the JSON, print the table.

    Parameters
    ----------
    argv : list of str, optional
        The arguments after ``progress``; None, the process's own, as
        :func:`mpilab.bench.halo.main` takes them.

    Returns
    -------
    int
        The exit status, as :func:`mpilab.bench.halo.main`'s.
    """
    p = parser("progress", __doc__, transport=False, reps=None, rounds=3,
               min_time=None, nodes=True)
    p.add_argument("--case", choices=tuple(CASES), default="halo")
    p.add_argument("--nx", type=int, default=131072, help="columns (a row is 8 nx bytes)")
    p.add_argument("--ny", type=int, default=16, help="rows, split over the ranks")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--last", type=int, default=20, help="steps recorded (the last ones)")
    p.add_argument("--n", type=int, default=16384, help="doubles per allreduce (iallreduce)")
    p.add_argument("--modes", default=None, help="comma-separated, among the case's: "
                   + "; ".join(f"{c}: {', '.join(m)}" for c, m in CASES.items()))
    a = p.parse_args(argv)

    def measure():
        return run(case=a.case, nx=a.nx, ny=a.ny, n=a.n, ranks=a.ranks, modes=a.modes,
                   steps=a.steps,
                   last=a.last, rounds=a.rounds, nodes=a.nodes, link=a.link,
                   timeout=a.timeout)

    def show(m, recs):
        s = m["settings"]
        what = (f"heat {s['nx']} x {s['ny']}, rows of {8 * s['nx']} B" if s["case"] == "halo"
                else f"allreduce of {s['n']} doubles ({8 * s['n']} B), computing "
                     f"{s['passes']} sweeps")
        return (where_line(s) + f"# {m['mpi_library_version']} | {s['ranks']} ranks on "
                f"{m['cores']} cores" + (" (oversubscribed)" if m.get("oversubscribed") else "")
                + f" | {what}\n" + table(recs))

    return finish("progress", a.json, measure, show, ok=lambda recs: all(r["valid"]
                                                                         for r in recs))


if __name__ == "__main__":
    sys.exit(main())
