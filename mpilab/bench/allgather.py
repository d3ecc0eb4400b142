"""Allgather: every algorithm in C, the library with each algorithm forced, and its default.

    python -m mpilab.bench allgather --ranks 4 --sizes 32,128,512,2K,8K,32K,128K,512K --json OUT
    (--passes N: repeat every MPI job N times and pool; --observe: also observe the
    library's default choice from its messages, Open MPI only)

Sizes are blocks per rank (the allgather paper's convention). With Open MPI every row
is measured in one MPI job (``--mode cvar``): the library runs with coll_tuned's
dynamic rules switched on, and each forced algorithm gets its own communicator, created
after writing the ``coll_tuned_allgather_algorithm`` control variable through MPI_T
(0: the library's default decision); our C version of each algorithm is measured
beside it. All rows alternate in `--rounds` rounds with the same iteration counts
(calibrated once, on the library's default), so every ratio compares like with like.
``--mode jobs`` (MPICH's way: MPIR_CVAR_* environment) runs one MPI job per forced
algorithm instead. Every call is timed inside C (mpilab_timing.h).

Records: impl (mpilab:<alg>, library:<alg>, library:default), alg, ranks, size_bytes,
t_us_min, t_us_median, quartiles, iters, library_env; meta says which machine, MPI and
launcher produced them, whether the run was oversubscribed, the library's documented
default per size, own/library ratios and the best per size. With ``--nodes N --link
PROFILE --map-by node|slot`` the ranks run on emulated nodes (:mod:`mpilab.netlab`) and
every record says where.

    python -m mpilab.bench allgather --simulate allgather-paper --ranks 128 --json OUT

``--simulate PLATFORM`` runs our C algorithms and the library's allgather (SMPI's port of
Open MPI's decision, ``library:ompi``) on a simulated platform (SimGrid SMPI,
:mod:`mpilab.sim`), placed by ``--map-by`` (default node: cyclic, as the paper), plus
SMPI's versions of Open MPI's algorithms forced one by one (``library:bruck``,
``library:rdb``, ...), which name the library's choice per size. Records carry
``simulated: true``, ``platform`` and ``label``.
"""

from __future__ import annotations

import sys

from .. import tuning, validate
from ..collectives import ALGORITHMS
from ..netlab import placed, where_line
from ..tuning import summary
from . import finish, parser, simulated_line

DEFAULT_SIZES = "32,128,512,2K,8K,32K,128K,512K"

def _human(n: int) -> str:
    for unit, k in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k}{unit}"
    return str(n)


def table(records: list[dict], rows: list[str] | None = None) -> str:
    """The paper's table: rows algorithms, columns sizes, median µs; * best, ! worst."""
    by = {(r["impl"], r["size_bytes"]): r["t_us_median"] for r in records}
    sizes = sorted({r["size_bytes"] for r in records})
    rows = rows or sorted({r["impl"] for r in records})
    w = max(10, *(len(r) for r in rows)) + 1
    lines = [f"{'µs (median)':<{w}}" + "".join(f"{_human(n):>11}" for n in sizes)]
    for impl in rows:
        cells = []
        for n in sizes:
            col = {i: by[(i, n)] for i in rows if (i, n) in by}
            if (impl, n) not in by:
                cells.append(f"{'-':>11}")
                continue
            mark = " "
            if len(col) > 1 and by[(impl, n)] == min(col.values()):
                mark = "*"
            elif len(col) > 1 and by[(impl, n)] == max(col.values()):
                mark = "!"
            cells.append(f"{by[(impl, n)]:>10.1f}{mark}")
        lines.append(f"{impl:<{w}}" + "".join(cells))
    return "\n".join(lines)


def report(m: dict, records: list[dict]) -> str:
    """Both tables, the k-of-n count and the own/library ratios, as printed by main()."""
    s = m.get("summary") or summary(records)
    lib_rows = ["library:default"] + sorted(
        {r["impl"] for r in records if r["source"] == "library"} - {"library:default"})
    own_rows = sorted({r["impl"] for r in records if r["source"] == "mpilab"})
    out = [f"# {m.get('mpi_library_version', '?')} | allgather | {m.get('ranks')} ranks on "
           f"{m.get('cores')} cores" + (" (oversubscribed)" if m.get("oversubscribed") else "")
           + " | sizes are blocks per rank"
           + (" | load average {before:.1f} -> {after:.1f}".format(**m["loadavg_1min"])
              if "loadavg_1min" in m else ""),
           "# The library, each algorithm forced ("
           + ("on its own communicator, all in one job"
              if m.get("settings", {}).get("mode") == "cvar" else "one MPI job each")
           + ") and its default (* best, ! worst per column)",
           table(records, lib_rows)]
    where = where_line(m.get("settings", {}))
    if where:
        out.insert(1, where.rstrip("\n"))
    doc = m.get("library_documented_default")
    if doc:
        out.append("# library's documented default (derived from Open MPI 4.1 source, not "
                   "queried): " + ", ".join(f"{_human(int(n))}: {a}" for n, a in doc.items()))
    seen = m.get("library_observed_default")
    if seen:
        out.append("# library's default as observed from its messages (pml monitoring): "
                   + ", ".join(f"{_human(int(n))}: {'/'.join(a) or 'none of ours'}"
                               for n, a in seen.items()))
    k = s["library_choice_best"]
    out.append(f"library's choice was the best in {k['strict']} of {k['sizes']} sizes "
               f"(within 5 % of the best in {k['within_5pct']} of {k['sizes']})")
    out += ["# Our C algorithms (* best, ! worst per column)", table(records, own_rows)]
    out.append("# own C / library, same algorithm (median over median)")
    sizes = sorted({r["size_bytes"] for r in records})
    out.append(f"{'algorithm':<20}" + "".join(f"{_human(n):>9}" for n in sizes)
               + f"{'geomean':>9}{'max':>7}")
    for alg, r in s["own_vs_library"].items():
        out.append(f"{alg:<20}" + "".join(
            f"{r['by_size'][n]:>9.2f}" if n in r["by_size"] else f"{'-':>9}" for n in sizes)
            + f"{r['geomean']:>9.2f}{r['max']:>7.2f}")
    out.append("# the same paired: median over rounds of (ours / library's) in the same round"
               " (the load changes slower than a round)")
    for alg, r in s["own_vs_library"].items():
        pr = r.get("by_size_paired", {})
        out.append(f"{alg:<20}" + "".join(
            f"{pr[n]:>9.2f}" if n in pr else f"{'-':>9}" for n in sizes)
            + (f"{r['paired_geomean']:>9.2f}{r['paired_max']:>7.2f}" if pr else ""))
    out.append("# the same with minimum times")
    for alg, r in s["own_vs_library"].items():
        mins = r.get("by_size_min_times", {})
        out.append(f"{alg:<20}" + "".join(
            f"{mins[n]:>9.2f}" if n in mins else f"{'-':>9}" for n in sizes))
    return "\n".join(out)


def simulate(ranks: int, sizes, platform: str, *, map_by: str = "node",
             algs: str = "") -> tuple[dict, list[dict]]:
    """The paper's table on a simulated platform (:func:`mpilab.sim.allgather`)."""
    import time

    from .. import sim

    t0 = time.perf_counter()
    chosen = (validate.names(algs, tuple(ALGORITHMS["allgather"]), "algorithm")
              if algs.strip() else None)
    recs, summ = sim.allgather(ranks, sizes, platform=platform, map_by=map_by, algs=chosen,
                               progress=lambda text: print("#", text, file=sys.stderr,
                                                           flush=True))
    m = sim.meta(platform, ranks=ranks, sizes=list(sizes), map_by=map_by)
    m.update(ranks=ranks, map_by=map_by, wall_s=time.perf_counter() - t0,
             summary={str(n): e for n, e in summ.items()})
    best = sum(bool(e.get("library_picked_best")) for e in summ.values())
    m["library_choice_best"] = {"strict": best, "sizes": len(summ)}
    return m, recs


def sim_report(m: dict, records: list[dict]) -> str:
    """The simulated table: the library's rows, ours, the library's choice per size."""
    lib = ["library:ompi"] + sorted({r["impl"] for r in records
                                     if r["impl"].startswith("library:")} - {"library:ompi"})
    own = sorted({r["impl"] for r in records if r["impl"].startswith("mpilab:")})
    out = [simulated_line(m).rstrip("\n"),
           f"# allgather | {m['ranks']} simulated ranks, placed by {m['map_by']} | sizes are "
           "blocks per rank | library:ompi = SMPI's port of Open MPI's decision, "
           "library:<name> = SMPI's algorithm forced",
           table(records, lib), "# Our C algorithms (* best, ! worst per column)",
           table(records, own),
           "# library's choice (the forced run with the same simulated time): "
           + ", ".join(f"{_human(int(n))}: {e.get('library_choice', '?')}"
                       for n, e in m["summary"].items())]
    k = m["library_choice_best"]
    out.append(f"library's choice was the best in {k['strict']} of {k['sizes']} sizes "
               f"({m['label']})")
    return "\n".join(out)


def main(argv=None) -> int:
    p = parser("allgather", __doc__, reps=7, rounds=2, min_time=0.005, nodes=True,
               simulate=True, sizes=DEFAULT_SIZES, blocks=True)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--algs", default="",
                   help="algorithms, comma-separated (default: all admissible at --ranks)")
    p.add_argument("--passes", type=int, default=1,
                   help="passes over all the MPI jobs, timings pooled")
    p.add_argument("--mode", choices=("cvar", "jobs"), default=None,
                   help="cvar: every row in one job, each forced algorithm on its own "
                        "communicator (Open MPI, the default there); jobs: one MPI job "
                        "per forced algorithm")
    p.add_argument("--observe", action="store_true",
                   help="also observe the library's default from its messages (Open MPI)")
    a = p.parse_args(argv)
    if a.simulate:
        return finish("allgather", a.json,
                      lambda: simulate(a.ranks, validate.sizes(a.sizes), a.simulate,
                                       map_by=a.map_by, algs=a.algs), sim_report)

    def measure():
        algs = (validate.names(a.algs, tuple(ALGORITHMS["allgather"]), "algorithm")
                if a.algs.strip() else None)
        sizes = validate.sizes(a.sizes)
        validate.count(a.ranks, "ranks")
        with placed(a.ranks, a.transport, nodes=a.nodes, link=a.link,
                    map_by=a.map_by) as (launch, where):
            return tuning.measure(a.ranks, sizes, algs=algs, reps=a.reps, rounds=a.rounds,
                                  passes=a.passes, min_time=a.min_time, timeout=a.timeout,
                                  transport=a.transport, observe=a.observe, mode=a.mode,
                                  launch=launch, where=where)

    return finish("allgather", a.json, measure, report)


if __name__ == "__main__":
    sys.exit(main())
