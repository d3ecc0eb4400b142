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
default per size, own/library ratios and the best per size.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys

from .. import runtime
from ..timing import record
from . import meta, parse_sizes, python_worker, write

MODULE = "mpilab.bench.allgather"
DEFAULT_SIZES = "32,128,512,2K,8K,32K,128K,512K"
TOLERANCE = 0.05  # "within 5 % of the best" in the k-of-n count


def _worker(args_path: str, out_path: str) -> int:
    import numpy as np
    from mpi4py import MPI

    from ..collectives import calibrate
    from ..kernels import collectives as K

    a = json.loads(open(args_path).read())
    world = MPI.COMM_WORLD
    # A forced algorithm (Open MPI): write coll_tuned's control variable, then create a
    # communicator, which reads it; 0 gives the library's default decision.
    comms = {}
    for label, _alg, force in a["impls"]:
        comms[label] = world
        if force is not None:
            K.set_cvar("coll_tuned_allgather_algorithm", force)
            comms[label] = world.Dup()
    if any(force is not None for *_, force in a["impls"]):
        K.set_cvar("coll_tuned_allgather_algorithm", 0)
    comm = comms.get("library:default", world)
    iters = {int(k): v for k, v in (a.get("iters") or {}).items()}
    for n in a["sizes"]:
        if n not in iters:
            iters[n] = calibrate(comm, "allgather", "library", n, min_time=a["min_time"])
    times: dict[str, dict[int, list[float]]] = {}
    medians: dict[str, dict[int, list[float]]] = {}  # one per round: paired comparisons
    for _ in range(a["rounds"]):
        for n in a["sizes"]:
            for label, alg, _force in a["impls"]:
                w = max(1, min(iters[n], 20))
                t = K.time(comms[label], "allgather", alg, n, warmup=w, iters=iters[n],
                           reps=a["reps"])
                times.setdefault(label, {}).setdefault(n, []).extend(t.tolist())
                medians.setdefault(label, {}).setdefault(n, []).append(float(np.median(t)))
    if comm.rank == 0:
        with open(out_path, "w") as f:
            json.dump({"iters": iters, "times": times, "round_medians": medians,
                       "library": runtime.library_info()}, f)
    return 0


CVAR = "coll_tuned_allgather_algorithm"


def _jobs(ranks: int, algs, lib: str, mode: str) -> list[tuple[dict, list[list]]]:
    """(extra environment, [[impl label, kernel alg, forced number or None], ...]) per job.

    ``mode="cvar"`` (Open MPI): one job; each library algorithm gets its own
    communicator, created after writing coll_tuned's MPI_T control variable, so every
    row is measured interleaved with every other. ``mode="jobs"``: one job per forced
    algorithm (environment variables, read at MPI_Init), our algorithm beside it.
    """
    from ..collectives import ALGORITHMS, library_env, library_has

    if mode == "cvar":
        impls = [["library:default", "library", 0]]
        for alg in algs:
            impls.append([f"mpilab:{alg}", alg, None])
            impls.append([f"library:{alg}", "library", ALGORITHMS["allgather"][alg].ompi])
        return [({"OMPI_MCA_coll_tuned_use_dynamic_rules": "1"}, impls)]
    jobs = [({}, [["library:default", "library", None]])]
    for alg in algs:
        impls = [[f"mpilab:{alg}", alg, None]]
        env = {}
        if library_has("allgather", alg, lib):
            env = library_env("allgather", alg, lib)
            impls.append([f"library:{alg}", "library", None])
        jobs.append((env, impls))
    return jobs


def run(ranks: int, sizes, *, algs=None, reps: int = 7, rounds: int = 2, passes: int = 1,
        min_time: float = 0.005, timeout: float = 600.0, transport: str = "shm",
        observe: bool = False, mode: str | None = None) -> tuple[dict, list[dict]]:
    """Measure; returns (meta, records).

    `mode` (see :func:`_jobs`): ``"cvar"``, the default with Open MPI, measures every
    row in one job, each library algorithm forced on its own communicator; ``"jobs"``
    (MPICH, or on request) runs one MPI job per forced algorithm. Each of `passes`
    passes runs every MPI job once; inside a job the rows alternate `rounds` times
    per size. Timings of all passes are pooled, so a job that happened
    to share the machine with a busy neighbour does not decide a row alone. With
    `observe` (Open MPI), the algorithm the library runs by default is also observed
    from its messages at the smallest and largest size (:func:`observe_library`).
    """
    from ..collectives import ALGORITHMS, admissible, library_default, observe_library

    launch = runtime.launch(ranks, transport)
    lib = runtime.selected_library()
    mode = mode or ("cvar" if lib == "openmpi" else "jobs")
    if mode not in ("cvar", "jobs") or (mode == "cvar" and lib != "openmpi"):
        raise ValueError(f"mode must be 'jobs', or 'cvar' with Open MPI; got {mode!r}")
    ok = admissible("allgather", ranks)
    if algs is None:
        algs = ok
    for alg in algs:
        if alg not in ALGORITHMS["allgather"]:
            raise ValueError(f"unknown allgather algorithm {alg!r}; "
                             f"choose from {tuple(ALGORITHMS['allgather'])}")
        if alg not in ok:
            raise ValueError(ALGORITHMS["allgather"][alg].admissible(ranks))
    sizes = [int(n) for n in sizes]
    base = {"sizes": sizes, "reps": reps, "rounds": rounds, "min_time": min_time}
    if passes < 1:
        raise ValueError(f"passes must be >= 1, got {passes}")
    load_before = os.getloadavg()
    iters = None
    library = {}
    pooled: dict[str, dict[int, list[float]]] = {}
    rounds_: dict[str, dict[int, list[float]]] = {}
    envs: dict[str, dict] = {}
    for _ in range(passes):
        for env, impls in _jobs(ranks, algs, lib, mode):
            job = dataclasses.replace(launch, env={**launch.env, **env})
            doc = python_worker(job, MODULE, {**base, "impls": impls, "iters": iters},
                                timeout)
            if iters is None:  # the first job calibrates; every later one reuses its counts
                iters = {int(k): v for k, v in doc["iters"].items()}
                library = doc["library"]
            forced = {label: force for label, _alg, force in impls}
            for label, by_size in doc["times"].items():
                envs[label] = env if label.startswith("library:") else {}
                if label.startswith("library:") and forced[label] is not None:
                    envs[label] = {**env, f"MPI_T:{CVAR}": str(forced[label])}
                for n, times in by_size.items():
                    pooled.setdefault(label, {}).setdefault(int(n), []).extend(times)
                    rounds_.setdefault(label, {}).setdefault(int(n), []).extend(
                        doc["round_medians"][label][n])
    records = []
    for label, by_size in pooled.items():
        for n, times in by_size.items():
            records.append(record(
                times, size_bytes=n, impl=label, alg=label.split(":", 1)[1],
                source=label.split(":", 1)[0], op="allgather", ranks=ranks, iters=iters[n],
                oversubscribed=launch.oversubscribed, library_env=envs[label],
                round_medians_us=[x * 1e6 for x in rounds_[label][n]]))
    records.sort(key=lambda r: (r["size_bytes"], r["impl"]))
    settings = {"sizes": sizes, "algs": list(algs), "reps": reps, "rounds": rounds,
                "passes": passes, "mode": mode, "min_time": min_time, "iters": iters,
                "size_meaning": "bytes per rank block"}
    m = meta(launch, settings, library)
    m["oversubscribed"] = launch.oversubscribed
    # other jobs on the machine show here: a load above the cores means shared cores
    m["loadavg_1min"] = {"before": load_before[0], "after": os.getloadavg()[0]}
    m["op"] = "allgather"
    if lib == "openmpi":
        m["library_documented_default"] = {
            n: library_default("allgather", ranks, n)["runs"] for n in sizes}
        m["library_documented_default_source"] = library_default("allgather", ranks, 1)["source"]
        if observe:
            m["library_observed_default"] = {
                n: observe_library(ranks, max(n, 1), transport=transport)["matches"]
                for n in sorted({min(sizes), max(sizes)})}
    m["summary"] = summary(records)
    return m, records


def library_run(ranks: int, sizes, env: dict | None = None, *, iters=None, reps: int = 7,
                rounds: int = 2, min_time: float = 0.005, timeout: float = 600.0,
                transport: str = "shm", label: str = "library") -> list[dict]:
    """Time the library's own ``MPI_Allgather`` choice in one job with `env` added.

    For applying a tuning: run once with the environment a rules file needs
    (:func:`mpilab.collectives.rules_env`) and once without, at the same iteration counts
    (`iters`, ``{size: iterations}``, e.g. from an earlier run's
    ``meta["settings"]["iters"]``; calibrated here when None). Returns one record per
    size (``impl`` = `label`, ``library_env`` = `env`), as :func:`run` makes them.
    """
    env = dict(env or {})
    sizes = [int(n) for n in sizes]
    launch = runtime.launch(ranks, transport)
    job = dataclasses.replace(launch, env={**launch.env, **env})
    its = None if iters is None else {int(k): int(v) for k, v in iters.items()}
    doc = python_worker(job, MODULE, {"sizes": sizes, "reps": reps, "rounds": rounds,
                                      "min_time": min_time, "iters": its,
                                      "impls": [[label, "library", None]]}, timeout)
    got = {int(k): v for k, v in doc["iters"].items()}
    return [record(times, size_bytes=int(n), impl=label, alg="library", source="library",
                   op="allgather", ranks=ranks, iters=got[int(n)],
                   oversubscribed=launch.oversubscribed, library_env=env)
            for n, times in sorted(doc["times"][label].items(), key=lambda kv: int(kv[0]))]


def _by(records):
    return {(r["impl"], r["size_bytes"]): r["t_us_median"] for r in records}


def summary(records: list[dict]) -> dict:
    """Own/library ratios per algorithm and size, the best row per size, the k-of-n count."""
    by = _by(records)
    by_min = {(r["impl"], r["size_bytes"]): r["t_us_min"] for r in records}
    rounds = {(r["impl"], r["size_bytes"]): r.get("round_medians_us", []) for r in records}
    sizes = sorted({r["size_bytes"] for r in records})
    algs = sorted({r["alg"] for r in records if r["source"] == "mpilab"})
    ratios = {}
    for alg in algs:
        row = {n: by[(f"mpilab:{alg}", n)] / by[(f"library:{alg}", n)] for n in sizes
               if (f"library:{alg}", n) in by and by[(f"library:{alg}", n)] > 0}
        if row:
            mins = {n: by_min[(f"mpilab:{alg}", n)] / by_min[(f"library:{alg}", n)]
                    for n in row}
            paired = {}
            for n in row:
                own = rounds.get((f"mpilab:{alg}", n), [])
                lib = rounds.get((f"library:{alg}", n), [])
                pairs = [a / b for a, b in zip(own, lib, strict=False) if b > 0]
                if pairs:
                    paired[n] = statistics.median(pairs)
            ratios[alg] = {"by_size": row,
                           "geomean": math.exp(sum(map(math.log, row.values())) / len(row)),
                           "max": max(row.values()),
                           "by_size_min_times": mins,
                           "by_size_paired": paired}
            if paired:
                ratios[alg]["paired_geomean"] = math.exp(
                    sum(map(math.log, paired.values())) / len(paired))
                ratios[alg]["paired_max"] = max(paired.values())
    best, strict, close = {}, 0, 0
    lib_rows = sorted({r["impl"] for r in records if r["source"] == "library"})
    for n in sizes:
        row = {i: by[(i, n)] for i in lib_rows if (i, n) in by}
        if not row:
            continue
        b = min(row, key=row.get)
        best[n] = b
        if "library:default" in row:
            strict += b == "library:default"
            close += row["library:default"] <= row[b] * (1 + TOLERANCE)
    return {"own_vs_library": ratios, "best_library_row": best,
            "library_choice_best": {"strict": strict, "within_5pct": close,
                                    "sizes": len(best)}}


def _human(n: int) -> str:
    for unit, k in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k}{unit}"
    return str(n)


def table(records: list[dict], rows: list[str] | None = None) -> str:
    """The paper's table: rows algorithms, columns sizes, median µs; * best, ! worst."""
    by = _by(records)
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m mpilab.bench allgather",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--sizes", default=DEFAULT_SIZES,
                   help="block sizes per rank in bytes, comma-separated (K/M suffixes)")
    p.add_argument("--algs", default="",
                   help="algorithms, comma-separated (default: all admissible at --ranks)")
    p.add_argument("--transport", choices=runtime.TRANSPORTS, default="shm")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--rounds", type=int, default=2,
                   help="alternations of ours and the library's inside each job")
    p.add_argument("--passes", type=int, default=1,
                   help="passes over all the MPI jobs, timings pooled")
    p.add_argument("--mode", choices=("cvar", "jobs"), default=None,
                   help="cvar: every row in one job, each forced algorithm on its own "
                        "communicator (Open MPI, the default there); jobs: one MPI job "
                        "per forced algorithm")
    p.add_argument("--observe", action="store_true",
                   help="also observe the library's default from its messages (Open MPI)")
    p.add_argument("--min-time", type=float, default=0.005,
                   help="seconds one repetition should last (sets iterations)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per MPI job")
    p.add_argument("--json", metavar="OUT", help="write {meta, records} JSON here")
    a = p.parse_args(argv)
    if a.worker:
        return _worker(*a.worker)
    try:
        sizes = parse_sizes(a.sizes)
        algs = [x.strip() for x in a.algs.split(",") if x.strip()] or None
        m, recs = run(a.ranks, sizes, algs=algs, reps=a.reps, rounds=a.rounds,
                      passes=a.passes, min_time=a.min_time, timeout=a.timeout,
                      transport=a.transport, observe=a.observe, mode=a.mode)
    except (ValueError, RuntimeError, runtime.MPINotFound) as exc:
        print(f"mpilab.bench allgather: {exc}", file=sys.stderr)
        return 2
    write(a.json, m, recs)
    print(report(m, recs))
    if a.json and a.json != "-":
        print(f"# wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
