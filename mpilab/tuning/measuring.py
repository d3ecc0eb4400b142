"""Measuring every allgather algorithm of the library and ours side by side (the
``python -m mpilab.tuning --worker`` job), the summary's ratios and k-of-n count, and
:func:`tune`, which turns measurements at several process counts into a decision table."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
from collections.abc import Sequence
from pathlib import Path

from .. import runtime
from ..collectives import ALGORITHMS, admissible, calibrate
from ..jobs import python_worker
from ..timing import barrier_skew, record, run_meta, skew_summary
from . import decisions
from .decisions import decision_table, library_default, library_env, rules_env
from .observing import observe_library

MODULE = "mpilab.tuning"  # python -m mpilab.tuning --worker: the measuring job
TOLERANCE = 0.05  # "within 5 % of the best" in the k-of-n count


def _worker(args_path: str, out_path: str) -> int:
    import numpy as np
    from mpi4py import MPI

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
    skew = barrier_skew(world)  # how far apart the ranks start a repetition
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
                       "library": runtime.library_info(), "barrier_skew": skew}, f)
    return 0


CVAR = "coll_tuned_allgather_algorithm"


def _jobs(ranks: int, algs, lib: str, mode: str) -> list[tuple[dict, list[list]]]:
    """(extra environment, [[impl label, kernel alg, forced number or None], ...]) per job.

    ``mode="cvar"`` (Open MPI): one job; each library algorithm gets its own
    communicator, created after writing coll_tuned's MPI_T control variable, so every
    row is measured interleaved with every other. ``mode="jobs"``: one job per forced
    algorithm (environment variables, read at MPI_Init), our algorithm beside it.
    """
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
        if decisions.library_has("allgather", alg, lib):
            env = library_env("allgather", alg, lib)
            impls.append([f"library:{alg}", "library", None])
        jobs.append((env, impls))
    return jobs


def measure(ranks: int, sizes, *, algs=None, reps: int = 7, rounds: int = 2, passes: int = 1,
        min_time: float = 0.005, timeout: float = 600.0, transport: str = "shm",
        observe: bool = False, mode: str | None = None, launch: runtime.Launch | None = None,
        where: dict | None = None) -> tuple[dict, list[dict]]:
    """Measure; returns (meta, records).

    `launch` runs the jobs somewhere other than this host's default (emulated nodes:
    :meth:`mpilab.netlab.Fabric.launch`), and `where` is what every record then carries
    about the placement (``nodes``, ``link``, ``map_by``, ...).

    `mode` (see :func:`_jobs`): ``"cvar"``, the default with Open MPI, measures every
    row in one job, each library algorithm forced on its own communicator; ``"jobs"``
    (MPICH, or on request) runs one MPI job per forced algorithm. Each of `passes`
    passes runs every MPI job once; inside a job the rows alternate `rounds` times
    per size. Timings of all passes are pooled, so a job that happened
    to share the machine with a busy neighbour does not decide a row alone. With
    `observe` (Open MPI), the algorithm the library runs by default is also observed
    from its messages at the smallest and largest size (:func:`observe_library`).

    Parameters
    ----------
    ranks : int
        Processes of each MPI job (oversubscribed when above the cores).
    sizes : iterable of int
        Allgather block sizes per rank, in bytes.
    algs : sequence of str, optional
        Allgather algorithms to measure; None: every one admissible on `ranks`.
    reps : int, optional
        Timed repetitions per row, size and round (default 7).
    rounds : int, optional
        Times the rows alternate per size inside a job (default 2).
    passes : int, optional
        Times every MPI job runs (default 1, at least 1).
    min_time : float, optional
        Seconds a repetition should last; the first job calibrates the iterations and
        every later job reuses them (default 0.005).
    timeout : float, optional
        Seconds each MPI job may take (default 600).
    transport : {"shm", "tcp"}, optional
        Transport between the ranks (when `launch` is None).
    observe : bool, optional
        Also observe the library's default algorithm (Open MPI, this host only).
    mode : {"cvar", "jobs"}, optional
        As above; None: ``"cvar"`` with Open MPI, ``"jobs"`` otherwise.
    launch : mpilab.runtime.Launch, optional
        How to start the jobs; it must start `ranks` ranks. None: this host's.
    where : dict, optional
        Placement fields every record and the settings carry.

    Returns
    -------
    meta : dict
        :func:`mpilab.timing.run_meta` with the settings (iterations included), the load
        average before and after, ``barrier_exit_skew`` (each job measures it before its
        repetitions, :func:`mpilab.timing.skew_summary`), the library's documented (and
        with `observe`,
        observed) default per size, and ``summary`` (:func:`summary`).
    records : list of dict
        One :func:`mpilab.timing.record` per row and size, sorted by size then
        ``impl``: ``library:default``, ``library:<alg>`` (forced) and ``mpilab:<alg>``
        (ours), times per call in µs, pooled over passes and rounds.

    Raises
    ------
    ValueError
        A `launch` of another rank count; `observe` on emulated nodes; an unknown
        `mode` (or ``"cvar"`` without Open MPI); an unknown or inadmissible algorithm;
        `passes` below 1.
    """
    if launch is None:
        launch = runtime.launch(ranks, transport)
    elif launch.ranks != ranks:
        raise ValueError(f"the launch starts {launch.ranks} ranks, not {ranks}")
    if observe and launch.placement:
        raise ValueError("observing the library's default runs on this host only "
                         "(not on emulated nodes)")
    where = dict(where or {})
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
    skews = []
    for _ in range(passes):
        for env, impls in _jobs(ranks, algs, lib, mode):
            job = dataclasses.replace(launch, env={**launch.env, **env})
            doc = python_worker(job, MODULE, {**base, "impls": impls, "iters": iters},
                                timeout)
            if iters is None:  # the first job calibrates; every later one reuses its counts
                iters = {int(k): v for k, v in doc["iters"].items()}
                library = doc["library"]
            skews.append(doc.get("barrier_skew"))
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
                round_medians_us=[x * 1e6 for x in rounds_[label][n]], **where))
    records.sort(key=lambda r: (r["size_bytes"], r["impl"]))
    settings = {"sizes": sizes, "algs": list(algs), "reps": reps, "rounds": rounds,
                "passes": passes, "mode": mode, "min_time": min_time, "iters": iters,
                "size_meaning": "bytes per rank block", **where}
    m = run_meta(launch, settings, library)
    m["oversubscribed"] = launch.oversubscribed
    # other jobs on the machine show here: a load above the cores means shared cores
    m["loadavg_1min"] = {"before": load_before[0], "after": os.getloadavg()[0]}
    m["op"] = "allgather"
    if skew_summary(skews):
        m["barrier_exit_skew"] = skew_summary(skews)
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
    (:func:`rules_env`) and once without, at the same iteration counts
    (`iters`, ``{size: iterations}``, e.g. from an earlier run's
    ``meta["settings"]["iters"]``; calibrated here when None). Returns one record per
    size (``impl`` = `label`, ``library_env`` = `env`), as :func:`measure` makes them.

    Parameters
    ----------
    ranks : int
        Processes of the MPI job.
    sizes : iterable of int
        Allgather block sizes per rank, in bytes.
    env : dict of str to str, optional
        Environment added to the job (e.g. :func:`rules_env`); None: none.
    iters : dict, optional
        Timed calls per repetition, by size; None: calibrated to `min_time`.
    reps : int, optional
        Timed repetitions per size and round (default 7).
    rounds : int, optional
        Rounds over the sizes, pooled (default 2).
    min_time : float, optional
        Seconds a repetition should last when calibrated (default 0.005).
    timeout : float, optional
        Seconds the MPI job may take (default 600).
    transport : {"shm", "tcp"}, optional
        Transport between the ranks.
    label : str, optional
        The records' ``impl`` (default ``"library"``).

    Returns
    -------
    list of dict
        One :func:`mpilab.timing.record` per size, by size; times per call in µs.
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
    """Own/library ratios per algorithm and size, the best row per size, the k-of-n count.

    Parameters
    ----------
    records : list of dict
        The records of :func:`measure` (``impl``, ``alg``, ``source``, ``size_bytes``,
        the times in µs).

    Returns
    -------
    dict
        ``own_vs_library``: per algorithm measured both ways, our median over the
        library's forced one per size (``by_size``), their geometric mean and maximum,
        the same of the minimum times and of the per-round medians paired
        (``by_size_paired``, ``paired_geomean``, ``paired_max``);
        ``best_library_row``: the fastest ``library:`` row per size (by median);
        ``library_choice_best``: at how many of the ``sizes`` the library's default was
        the fastest (``strict``) or within ``TOLERANCE`` (5 %) of it (``within_5pct``).
    """
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


def tune(ranks: Sequence[int] = (4,), sizes: Sequence[int] = (8, 1024, 65536), *,
         out: str | os.PathLike | None = None, rules: str | os.PathLike | None = None,
         reps: int = 5, rounds: int = 1, min_time: float = 0.003, timeout: float = 600,
         transport: str = "shm", mode: str | None = None) -> dict:
    """Measure every admissible allgather algorithm per (ranks, size); the decision table.

    Runs :func:`measure` (what ``python -m mpilab.bench allgather`` runs) for each rank
    count: every library algorithm forced in turn (with Open MPI in one job, each on its
    own communicator; otherwise one job each), our C version beside it, and the library's
    default. Picks the fastest library algorithm per size (:func:`decision_table`) and
    compares it with the library's default choice, both
    measured (``library_default_vs_best``) and documented
    (``library_documented_choice``, see :func:`library_default`).

    Parameters
    ----------
    ranks : sequence of int
        Process counts to tune for (each run oversubscribes when above the cores).
    sizes : sequence of int
        Block sizes per rank, in bytes.
    out : path, optional
        Write the table, with the measurements behind it, as JSON here.
    rules : path, optional
        Open MPI only: also write a ``coll_tuned`` rules file that applies the table;
        ``table["rules_env"]`` is then the environment that makes a job use it.
    reps, rounds, min_time, timeout, transport, mode
        Passed to :func:`measure` (``mode="jobs"``: one MPI job per forced algorithm,
        forced through the environment at ``MPI_Init``; the default with Open MPI,
        ``"cvar"``, forces each on its own communicator in one job).

    Returns
    -------
    dict
        ``{"op", "library", "rules": [{"ranks", "size_bytes", "best", "t_us_best",
        "t_us", "t_us_library_default", "library_default_vs_best",
        "library_documented_choice"}, ...], "measured", ...}``. Times are measured
        medians (µs), not predictions.
    """
    records, metas = [], []
    for p in ranks:
        m, recs = measure(p, list(sizes), reps=reps, rounds=rounds, min_time=min_time,
                            timeout=timeout, transport=transport, mode=mode)
        records += recs
        metas.append(m)
    table = decision_table(records)
    table["measured"] = {"meta": metas, "records": records}
    if rules is not None:
        if table["library"] != "openmpi":
            raise ValueError("rules files are Open MPI's; MPICH takes MPIR_CVAR_* settings")
        table["rules_file"] = str(decisions.write_ompi_rules(table, rules))
        table["rules_env"] = rules_env(rules)
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(table, indent=2, default=str) + "\n")
    return table


# --------------------------------------------------------------------------- observing
