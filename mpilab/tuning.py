"""The library's choice: measure every allgather algorithm, compare, tune.

The allgather paper's question, "did the library pick the best algorithm?", asked on the
machine in use. :func:`measure` times every admissible allgather algorithm of the library
(each one forced), the course's C version of each beside it, and the library's default, in
the same MPI job(s), so ratios compare like with like; :func:`summary` turns the records
into own/library ratios and the k-of-n count. :func:`tune` does that for several process
counts and writes a decision table; :func:`write_ompi_rules` turns the table into an Open
MPI ``coll_tuned`` rules file and :func:`rules_env` into the environment that applies it;
:func:`library_run` times the library's choice with such an environment.
:func:`library_default` is Open MPI 4.1's documented decision (derived from its source,
not queried) and :func:`observe_library` sees which algorithm the library really ran,
from its messages (pml monitoring).

The algorithms themselves, and their traces and predictions, are in
:mod:`mpilab.collectives`; ``python -m mpilab.bench allgather`` is the command-line front
end (its tables and report).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from . import jobs, runtime
from .collectives import ALGORITHMS, LIBRARY, admissible, algorithm, calibrate, kernel_module
from .jobs import python_worker
from .timing import record, run_meta

__all__ = [
    "decision_table",
    "library_default",
    "library_env",
    "library_has",
    "library_run",
    "measure",
    "observe_library",
    "rules_env",
    "summary",
    "tune",
    "write_ompi_rules",
]

# Open MPI's enum COLLTYPE_T (coll_base_functions.h): the collective ids of a rules file.
_OMPI_COLL_ID = {"allgather": 0, "allreduce": 2, "barrier": 6, "bcast": 7, "gather": 9,
                 "reduce": 11, "scatter": 15}


def library_env(op: str, alg: str | None, lib: str | None = None) -> dict:
    """Environment that makes the library run `alg` for `op` (None: its default choice).

    Open MPI: ``coll_tuned`` dynamic rules with the algorithm forced
    (``OMPI_MCA_coll_tuned_use_dynamic_rules=1``, ``OMPI_MCA_coll_tuned_<op>_algorithm``);
    it is read once at ``MPI_Init``, so each forced algorithm needs its own MPI job.
    MPICH: the ``MPIR_CVAR_<OP>_INTRA_ALGORITHM`` control variables (not tested here:
    only Open MPI is installed on the course machine).

    Raises
    ------
    ValueError
        When the library has no such algorithm (e.g. MPICH has no linear allgather).
    """
    lib = lib or runtime.selected_library()
    if alg is None or alg == "default":
        return {}
    spec = algorithm(op, alg)
    if lib == "openmpi":
        return {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
                f"OMPI_MCA_coll_tuned_{op}_algorithm": str(spec.ompi)}
    if lib == "mpich":
        if not spec.mpich:
            raise ValueError(f"MPICH has no {alg} {op} to select")
        return dict(spec.mpich)
    raise ValueError(f"unknown MPI library {lib!r}")


def library_has(op: str, alg: str, lib: str | None = None) -> bool:
    """Whether the library can be made to run `alg` (see :func:`library_env`)."""
    try:
        library_env(op, alg, lib)
    except ValueError:
        return False
    return True


# Open MPI 4.1's fixed rule for a reduce with a commutative operation (MPI_SUM), from
# coll_tuned_decision_fixed.c (ompi_coll_tuned_reduce_intra_dec_fixed): (communicator
# size bound, [(message size bound, algorithm), ...]); None closes a list.
_REDUCE_NAMES = {1: "linear", 2: "chain", 3: "pipeline", 4: "binary", 5: "binomial",
                 6: "in-order_binary", 7: "rabenseifner"}
_REDUCE_RULE = [
    (4, [(8, 7), (16, 4), (32, 3), (262144, 1), (524288, 3), (1048576, 2), (None, 3)]),
    (8, [(4096, 4), (65536, 2), (262144, 5), (524288, 1), (1048576, 5), (None, 1)]),
    (16, [(8192, 4), (None, 5)]),
    (32, [(4096, 4), (None, 5)]),
    (256, [(None, 5)]),
    (512, [(8192, 5), (16384, 6), (None, 5)]),
    (2048, [(None, 5)]),
    (4096, [(512, 5), (1024, 6), (8192, 5), (16384, 6), (None, 5)]),
    (None, [(16, 5), (32, 6), (1024, 5), (2048, 6), (8192, 5), (16384, 6), (None, 5)]),
]


def _reduce_default(p: int, n: int) -> str:
    for bound, rules in _REDUCE_RULE:
        if bound is None or p < bound:
            return _REDUCE_NAMES[next(a for lim, a in rules if lim is None or n < lim)]
    raise AssertionError("unreachable: the last rule has no bound")


def library_default(op: str, p: int, nbytes: int) -> dict:
    """The allgather or reduce algorithm Open MPI 4.1 picks by default: its documented rule.

    Derived by reading Open MPI 4.1's ``coll_tuned_decision_fixed.c``
    (``ompi_coll_tuned_allgather_intra_dec_fixed``, and for a reduce with a commutative
    operation such as a sum ``ompi_coll_tuned_reduce_intra_dec_fixed``), not asked from
    the library: a label for comparison with measurements, which is where to check it.
    ``nbytes`` is the per-rank block for an allgather (the rule's ``dsize * scount``), the
    whole message for a reduce (``dsize * count``).

    Returns
    -------
    dict
        ``{"decision": alg, "runs": alg, "source": ...}``: ``runs`` differs from
        ``decision`` where the library falls back (recursive doubling on a
        non-power-of-two count runs Bruck, neighbor exchange on an odd count runs ring).
    """
    if op not in ("allgather", "reduce"):
        raise ValueError(f"only the allgather and reduce rules are encoded, not {op!r}")
    n = int(nbytes)
    if op == "reduce":
        alg = _reduce_default(int(p), n)
        return {"decision": alg, "runs": alg,
                "source": "library's documented default for a commutative operation: "
                          "derived from Open MPI 4.1 coll_tuned_decision_fixed.c, not "
                          "queried from the library"}
    if p == 2:
        alg = "two_proc"
    elif p < 32:
        alg = "recursive_doubling"
    else:
        # (communicator-size bound, [(size bound, alg), ...]) for p < 1024
        table = [
            (64, [(1024, 3), (65536, 5), (None, 4)]),
            (128, [(512, 3), (65536, 5), (None, 4)]),
            (256, [(512, 3), (131072, 5), (524288, 4), (1048576, 5), (None, 4)]),
            (512, [(32, 3), (128, 2), (1024, 3), (131072, 5), (524288, 4), (1048576, 5),
                   (None, 4)]),
            (1024, [(64, 3), (256, 2), (2048, 3), (None, 5)]),
        ]
        names = {2: "bruck", 3: "recursive_doubling", 4: "ring", 5: "neighbor_exchange"}
        alg = "neighbor_exchange"  # p >= 1024 and large blocks; small blocks not encoded
        for bound, rules in table:
            if p < bound:
                alg = next(names[a] for lim, a in rules if lim is None or n < lim)
                break
    runs = alg
    if alg == "recursive_doubling" and p & (p - 1):
        runs = "bruck"
    if alg == "neighbor_exchange" and p % 2:
        runs = "ring"
    return {"decision": alg, "runs": runs,
            "source": "library's documented default: derived from Open MPI 4.1 "
                      "coll_tuned_decision_fixed.c, not queried from the library"}


# --------------------------------------------------------------------------- tuning


def beyond_noise(fast: dict, slow: dict) -> bool:
    """Is `fast` faster than `slow` by more than their measured noise?

    Both are timing records (:func:`mpilab.timing.record`): yes when `fast`'s upper
    quartile lies below `slow`'s lower quartile, so that at least three quarters of the
    repetitions of each agree on the order (their middle halves do not overlap).
    """
    return fast["t_us_q3"] < slow["t_us_q1"]


def decision_table(records: Sequence[dict], *, op: str = "allgather",
                   prefix: str = "library:") -> dict:
    """Best algorithm per (ranks, size) from measured records; with the library's choice.

    Only records whose impl starts with `prefix` and names an algorithm take part
    (``library:<alg>``: what a rules file can apply); ``library:default`` is the
    library's own choice, compared against the best. Each entry's ``choice`` is what a
    rules file applies: the best algorithm only where it beats the library's default by
    more than the noise (:func:`beyond_noise`, ``switch`` true), else the library's own
    (documented) choice: a tuner that switched on every difference would follow noise.
    """
    by: dict[tuple[int, int], dict[str, dict]] = {}
    for r in records:
        by.setdefault((int(r["ranks"]), int(r["size_bytes"])), {})[r["impl"]] = r
    rules = []
    for (p, n), row in sorted(by.items()):
        cands = {k.removeprefix(prefix): v for k, v in row.items()
                 if k.startswith(prefix) and k.removeprefix(prefix) in ALGORITHMS[op]}
        if not cands:
            continue
        best = min(cands, key=lambda a: cands[a]["t_us_median"])
        t_best = cands[best]["t_us_median"]
        entry = {"ranks": p, "size_bytes": n, "best": best, "t_us_best": t_best,
                 "t_us": {a: r["t_us_median"] for a, r in cands.items()}}
        documented = library_default(op, p, n)["runs"] if op == "allgather" else None
        if documented is not None:
            entry["library_documented_choice"] = documented
        default = row.get("library:default")
        if default is not None:
            d = default["t_us_median"]
            entry["t_us_library_default"] = d
            entry["library_default_vs_best"] = d / t_best if t_best > 0 else None
        if default is None or documented is None:
            entry["switch"], entry["choice"] = True, best
            entry["why"] = "no library default measured or documented to compare with"
        elif best == documented:
            entry["switch"], entry["choice"] = False, best
            entry["why"] = "the library's own choice is the fastest"
        elif beyond_noise(cands[best], default):
            entry["switch"], entry["choice"] = True, best
            entry["why"] = (f"{best} beats the library's default beyond the noise (upper "
                            f"quartile {cands[best]['t_us_q3']:.1f} < lower quartile "
                            f"{default['t_us_q1']:.1f} us)")
        else:
            entry["switch"], entry["choice"] = False, documented
            entry["why"] = (f"{best} was faster by its median, but within the noise "
                            f"(upper quartile {cands[best]['t_us_q3']:.1f} >= the "
                            f"default's lower quartile {default['t_us_q1']:.1f} us): "
                            "keep the library's choice")
        rules.append(entry)
    return {"op": op, "library": runtime.selected_library(), "rules": rules,
            "note": "best = lowest median time among the library's forced algorithms; "
                    "choice = best where it beats the library's default beyond the "
                    "noise (quartiles apart), else the library's own choice"}


def write_ompi_rules(table: dict, path: str | os.PathLike) -> Path:
    """Write a decision table as an Open MPI ``coll_tuned`` dynamic rules file.

    Open MPI matches the largest listed communicator size not above the job's, then
    the largest message size not above the call's; for allgather that size is the
    whole result (block x ranks), so block sizes are scaled here. Use it with
    :func:`rules_env`.
    """
    op = table["op"]
    if op not in _OMPI_COLL_ID:
        raise ValueError(f"no Open MPI collective id for {op!r}")
    by_p: dict[int, list[tuple[int, int]]] = {}
    for r in table["rules"]:
        p = int(r["ranks"])
        msg = int(r["size_bytes"]) * (p if op in ("allgather", "gather", "scatter") else 1)
        by_p.setdefault(p, []).append((msg, ALGORITHMS[op][r.get("choice", r["best"])].ompi))
    lines = ["1  # collectives in this file", f"{_OMPI_COLL_ID[op]}  # {op}",
             f"{len(by_p)}  # communicator sizes"]
    for p, rules in sorted(by_p.items()):
        rules.sort()
        rules[0] = (0, rules[0][1])  # the smallest size rule covers everything below it
        lines += [f"{p}  # communicator size", f"{len(rules)}  # message sizes"]
        lines += [f"{m} {a} 0 0  # bytes, algorithm, fan-in/out, segment size"
                  for m, a in rules]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Open MPI's reader skips text after the numbers it needs on a line.
    path.write_text("\n".join(lines) + "\n")
    return path


def rules_env(path: str | os.PathLike) -> dict:
    """Environment that makes Open MPI use a rules file written by :func:`write_ompi_rules`."""
    return {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
            "OMPI_MCA_coll_tuned_dynamic_rules_filename": str(Path(path).resolve())}


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
        table["rules_file"] = str(write_ompi_rules(table, rules))
        table["rules_env"] = rules_env(rules)
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(table, indent=2, default=str) + "\n")
    return table


# --------------------------------------------------------------------------- observing


def _sent_blocks(events_of_rank: Sequence[tuple], rank: int) -> dict:
    out: dict[str, int] = {}
    for kind, peer, nbytes in events_of_rank:
        if kind == "send" and nbytes and peer != rank:
            out[f"{rank}->{peer}"] = out.get(f"{rank}->{peer}", 0) + nbytes
    return out


def _observe_worker(args_path: str, out_path: str) -> int:
    from mpi4py import MPI

    k = kernel_module()
    a = json.loads(Path(args_path).read_text())
    comm = MPI.COMM_WORLD
    n = int(a["nbytes"])
    on = comm
    if a.get("force") is not None:  # as the benchmark forces: MPI_T, then a new communicator
        k.set_cvar("coll_tuned_allgather_algorithm", a["force"])
        on = comm.Dup()
    # the calls in one C loop: no per-call argument checks adding their own messages
    k.time(on, "allgather", LIBRARY, n, warmup=0, iters=a["calls"], reps=1)
    expected = {}
    for alg in admissible("allgather", comm.Get_size()):
        # one-byte blocks: bytes sent = blocks sent (our messages are user-level, so the
        # monitoring counts them apart from the library's internal ones)
        mine = _sent_blocks(k.trace(comm, "allgather", alg, 1), comm.Get_rank())
        every = comm.gather(mine)
        if comm.rank == 0:
            expected[alg] = {key: v for d in every for key, v in d.items()}
    if comm.rank == 0:
        Path(out_path).write_text(json.dumps({"expected": expected}))
    return 0


def observe_library(ranks: int, nbytes: int = 65536, *, env: dict | None = None,
                    force: str | None = None, calls: int = 2, transport: str = "shm",
                    timeout: float = 120) -> dict:
    """Which allgather algorithm the library really ran, seen from its messages.

    Runs ``calls`` MPI_Allgather of `nbytes` per rank (more for small blocks, so that
    they carry at least 64 KiB) under Open MPI's ``pml monitoring``
    (which counts the bytes each rank sends each peer inside collectives), converts the
    counts to blocks, and compares that pattern with the blocks each of our algorithms
    sends (from their traces). `env` forces an algorithm or a rules file
    (:func:`library_env`, :func:`rules_env`); `force` forces one inside the job, as
    the allgather benchmark does (coll_tuned's MPI_T control variable, then a new
    communicator); without either, this observes the default.

    Returns
    -------
    dict
        ``observed`` (``{"src->dst": blocks}``), ``matches`` (our algorithms with the
        same pattern; empty when the library did something else, e.g. its linear
        allgather, which gathers and broadcasts with its own tree algorithms), ``ranks``,
        ``nbytes``, ``env``.
    """
    if runtime.selected_library() != "openmpi":
        raise ValueError("observing the library's messages needs Open MPI's pml monitoring")
    if not isinstance(nbytes, int) or nbytes < 1:
        raise ValueError(f"nbytes must be a positive integer, got {nbytes!r}")
    # enough calls that the allgather's bytes stand far above the job's other traffic
    calls = max(int(calls), -(-65536 // nbytes))
    launch = runtime.launch(ranks, transport)
    # enable_output 3: each rank writes its report to <filename>.<rank>.prof at finalize
    # (1 and 2 would interleave the ranks' reports on one stream; mpiexec's own
    # --output-filename fails in Open MPI 5.0.7: PMIX_ERR_IOF_FAILURE, no files)
    extra = {**(env or {}), "OMPI_MCA_pml_monitoring_enable": "2",
             "OMPI_MCA_pml_monitoring_enable_output": "3"}
    number = None
    if force is not None:
        number = algorithm("allgather", force).ompi
        extra["OMPI_MCA_coll_tuned_use_dynamic_rules"] = "1"
    with tempfile.TemporaryDirectory(prefix="mpilab-observe-") as d:
        a, o = Path(d) / "args.json", Path(d) / "out.json"
        a.write_text(json.dumps({"nbytes": int(nbytes), "calls": int(calls), "force": number}))
        extra["OMPI_MCA_pml_monitoring_filename"] = str(Path(d) / "monitoring")
        job = dataclasses.replace(launch, env={**launch.env, **extra})
        jobs.run(job, [sys.executable, "-m", "mpilab.tuning", "--observe", str(a),
                       str(o)], timeout=timeout)
        expected = json.loads(o.read_text())["expected"]
        reports = sorted(Path(d).glob("monitoring.*.prof"))
        if len(reports) != ranks:
            raise RuntimeError(f"Open MPI's pml monitoring wrote {len(reports)} report(s) for "
                               f"{ranks} ranks: is its monitoring component missing?")
        text = "\n".join(f.read_text() for f in reports)
    unit = calls * int(nbytes)
    observed = {}
    for line in text.splitlines():
        f = line.split("\t")
        if len(f) >= 4 and f[0] == "I" and f[3].endswith(" bytes"):
            b = int(f[3].split()[0])
            if b >= unit / 2:  # below: the job's own small collectives, not the allgather
                observed[f"{f[1]}->{f[2]}"] = round(b / unit)
    matches = [alg for alg, pattern in expected.items() if pattern == observed]
    return {"ranks": ranks, "nbytes": int(nbytes), "observed": observed, "matches": matches,
            "env": env or {}, "force": force}


# --------------------------------------------------------------------------- measuring


MODULE = "mpilab.tuning"  # python -m mpilab.tuning --worker: the measuring job
TOLERANCE = 0.05  # "within 5 % of the best" in the k-of-n count


def _worker(args_path: str, out_path: str) -> int:
    import numpy as np
    from mpi4py import MPI

    from .kernels import collectives as K

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


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        sys.exit(_worker(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 4 and sys.argv[1] == "--observe":
        sys.exit(_observe_worker(sys.argv[2], sys.argv[3]))
    sys.exit("usage: python -m mpilab.tuning --worker|--observe ARGS.json OUT.json")
