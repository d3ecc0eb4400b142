"""The ping-pong's experiments as MPI jobs of their own: implementations side by side, and
the memory a large message lives in.

:func:`run_pingpong` times the compiled kernel, the same C loop as a standalone program
(:func:`standalone`) and mpi4py in one run, with the same iteration counts (calibrated once
per size on the kernel), alternating over rounds, optionally at several levels of
``MPI_Init_thread`` and with rank 0's local copy (``python -m mpilab.bench pingpong``,
lecture 00). :func:`run_buffers` times the kernel's one-way ping-pong on every kind of
buffer (:data:`mpilab.buffers.BUFFER_KINDS`) under both shared-memory large-message paths
(``python -m mpilab.bench buffers``, lecture 01). Their ranks run
``python -m mpilab.pingpong --worker`` (:mod:`mpilab.pingpong.__main__`), which calls
:func:`pingpong_worker` or :func:`buffers_worker`.
"""

from __future__ import annotations

import dataclasses
import json

from .. import jobs, runtime, validate
from ..buffers import BUFFER_KINDS, transparent_hugepages
from ..jobs import python_worker
from ..netlab.placing import placed
from ..timing import barrier_skew, needs_more, record, run_meta, skew_summary, stopping
from .loops import calibrate_iters, measure_pingpong

#: the implementations :func:`run_pingpong` compares
JOB_IMPLS = ("kernel", "c-standalone", "mpi4py")
#: the shared-memory transport's two ways of moving a large message (:func:`run_buffers`)
MECHANISMS = ("single-copy", "copy-in-out")
#: what the jobs' ranks run: ``python -m mpilab.pingpong --worker ARGS OUT``
MODULE = "mpilab.pingpong"


def pingpong_worker(a: dict) -> dict | None:
    """On every rank of a :func:`run_pingpong` job: calibrate or measure, as `a` says.

    Parameters
    ----------
    a : dict
        The job's arguments: ``sizes``, ``mode``, ``reps``, ``min_time``, ``impls``,
        ``copy`` and ``iters`` (empty: calibrate only).

    Returns
    -------
    dict or None
        On rank 0 ``iters``, ``records``, ``library``, ``thread_provided`` and, when it
        measured, ``barrier_skew`` (:func:`mpilab.timing.barrier_skew`, before the
        measurements); None on the other ranks.
    """
    from mpi4py import MPI

    from .copying import measure_memcopy

    comm = MPI.COMM_WORLD
    iters = a.get("iters") or {}
    if not iters:
        iters = {n: calibrate_iters(comm, n, min_time=a["min_time"], mode=a["mode"])
                 for n in a["sizes"]}
    iters = {int(k): v for k, v in iters.items()}
    skew = barrier_skew(comm) if a.get("iters") else None
    py_impls = [i for i in a["impls"] if i != "c-standalone"]
    recs = measure_pingpong(comm, a["sizes"], impls=py_impls, mode=a["mode"], reps=a["reps"],
                            iters=iters, rounds=1) if py_impls else []
    if a.get("copy") and comm.rank == 0:
        recs += [{**r, "impl": "copy"} for r in
                 measure_memcopy(MPI.COMM_SELF, a["sizes"], reps=a["reps"])]
    if comm.rank != 0:
        return None
    levels = {MPI.THREAD_SINGLE: "single", MPI.THREAD_FUNNELED: "funneled",
              MPI.THREAD_SERIALIZED: "serialized", MPI.THREAD_MULTIPLE: "multiple"}
    return {"iters": iters, "records": recs, "library": runtime.library_info(),
            "thread_provided": levels[MPI.Query_thread()], "barrier_skew": skew}


def standalone(launch: runtime.Launch, iters: dict, mode: str, reps: int, warmup: int,
               timeout: float) -> list[dict]:
    """The standalone C ping-pong (``mpilab-pingpong``, the kernel's loop in a program of
    its own) as one MPI job: what it printed for each size.

    Parameters
    ----------
    launch : mpilab.runtime.Launch
        How to start its two ranks.
    iters : dict of int to int
        Timed iterations per repetition, by message size (bytes).
    mode : {"roundtrip", "oneway", "window"}
        The ping-pong's pattern (:func:`mpilab.pingpong.measure_pingpong`).
    reps : int
        Repetitions per size.
    warmup : int
        Untimed iterations before each size.
    timeout : float
        Seconds the job may run.

    Returns
    -------
    list of dict
        One per size, as the program printed it: ``size_bytes``, ``iters`` and ``times``
        (seconds per message, one per repetition).
    """
    from ..kernels import program

    spec = [f"{n}:{k}" for n, k in iters.items()]
    out = jobs.run(launch, [str(program("mpilab-pingpong")), mode, str(warmup), str(reps),
                            *spec], timeout=timeout).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def measure_standalone(sizes, reps: int = 5, timeout: float = 300) -> list[dict]:
    """Records of the standalone C ping-pong (:func:`standalone`) on 2 ranks of this host,
    shared memory, half a round trip, with a fixed count of iterations per size: what
    :func:`mpilab.sim.calibrate` fits ``this-machine`` to.

    Parameters
    ----------
    sizes : sequence of int
        Message sizes, in bytes.
    reps : int, optional
        Repetitions per size (default 5).
    timeout : float, optional
        Seconds the job may run (default 300).

    Returns
    -------
    list of dict
        One :func:`mpilab.timing.record` per size (``impl`` ``kernel``, ``iters``,
        ``oversubscribed``, ``ranks`` 2, ``measured`` True).
    """
    iters = {n: max(20, min(2000, (1 << 24) // max(n, 1))) for n in sizes}
    launch = runtime.launch(2)
    recs = [record(o["times"], size_bytes=o["size_bytes"], impl="kernel", iters=o["iters"])
            for o in standalone(launch, iters, "roundtrip", reps, 5, timeout)]
    for r in recs:
        r.update(oversubscribed=launch.oversubscribed, ranks=2, measured=True)
    return recs


def run_pingpong(sizes, *, transport="shm", impls=JOB_IMPLS, mode="roundtrip", reps=7,
                 rounds=2, min_time=0.01, timeout=1800.0, nodes=None, link="fast-ethernet",
                 map_by="node", copy=False, thread_levels=("single",), ci=None,
                 max_reps=200) -> tuple[dict, list[dict]]:
    """The kernel, the standalone C program and mpi4py measured side by side in jobs.

    With `nodes`, the two ranks run on emulated nodes joined by `link` (``map_by``
    ``node``: one on each, across the link; ``slot``: both on node0). With `copy`, rank
    0 also times the local copy of each size (records with impl ``copy``). Each of
    `thread_levels` gets its own job per round (``MPI_Init_thread``'s level). With `ci`,
    rounds are added after the first `rounds` until every record's median has a 95 %
    confidence interval narrower than `ci` times the median, or `max_reps` repetitions
    (:func:`mpilab.timing.needs_more`); records then say whether it was reached. Every
    measuring job first measures the barrier's exit skew (``meta["barrier_exit_skew"]``).

    Parameters
    ----------
    sizes : sequence of int
        Message sizes, in bytes.
    transport : str, optional
        ``shm`` or ``tcp`` (default ``shm``).
    impls : sequence of str, optional
        Of :data:`JOB_IMPLS` (default all three).
    mode : {"roundtrip", "oneway", "window"}, optional
        The ping-pong's pattern (default ``roundtrip``).
    reps, rounds : int, optional
        Repetitions per round, and rounds alternating the implementations (7 and 2).
    min_time : float, optional
        Seconds one repetition should last; sets the iterations (default 0.01).
    timeout : float, optional
        Seconds each MPI job may run (default 1800).
    nodes : int, optional
        Emulated nodes to run on (:func:`mpilab.netlab.placed`); None: this host.
    link : str, optional
        The emulated nodes' link profile (with `nodes`).
    map_by : {"node", "slot"}, optional
        Rank placement on the nodes (with `nodes`).
    copy : bool, optional
        Also time rank 0's local copy of each size (sizes multiples of 8).
    thread_levels : sequence of str, optional
        ``MPI_Init_thread`` levels to compare (:data:`mpilab.runtime.THREAD_LEVELS`).
    ci : float, optional
        Target width of the median's 95 % interval over the median (0.05: 5 %); None
        (default): exactly `rounds` rounds.
    max_reps : int, optional
        With `ci`, the cap on repetitions per record (default 200).

    Returns
    -------
    tuple of (dict, list of dict)
        The run's meta (:func:`mpilab.timing.run_meta`) and one record per size,
        implementation and thread level (times per message, µs; ``huge_page_share``:
        the least share of huge pages under a size's two buffers over the rounds, None
        for the standalone program, which does not report it).

    Raises
    ------
    ValueError
        An unknown implementation or thread level, or with `copy` a size that is not a
        multiple of 8.
    """
    impls = validate.names(impls, JOB_IMPLS, "impl")
    thread_levels = validate.names(thread_levels, runtime.THREAD_LEVELS, "thread level")
    if copy and any(int(n) % 8 for n in sizes):
        raise ValueError("with --copy the sizes are whole doubles: multiples of 8 bytes, "
                         f"got {[n for n in sizes if int(n) % 8]}")
    with placed(2, transport, nodes=nodes, link=link, map_by=map_by) as (launch, where):
        return _run(launch, where, sizes, transport=transport, impls=impls, mode=mode,
                    reps=reps, rounds=rounds, min_time=min_time, timeout=timeout, copy=copy,
                    thread_levels=thread_levels, ci=ci, max_reps=max_reps)


def _at_level(launch: runtime.Launch, level: str) -> runtime.Launch:
    return dataclasses.replace(launch, env={**launch.env, "MPI4PY_RC_THREAD_LEVEL": level})


def _run(launch, where0, sizes, *, transport, impls, mode, reps, rounds, min_time, timeout,
         copy, thread_levels=("single",), ci=None, max_reps=200):
    base = {"what": "pingpong", "sizes": sizes, "mode": mode, "reps": reps,
            "min_time": min_time, "impls": list(impls), "copy": copy}
    # Calibrate once on the kernel; every implementation then runs the same iterations.
    first = python_worker(_at_level(launch, thread_levels[0]), MODULE,
                          {**base, "impls": [], "copy": False}, timeout)
    iters = {int(k): v for k, v in first["iters"].items()}
    warmup = {n: max(1, min(it, 100)) for n, it in iters.items()}
    pooled: dict[tuple[str, int, str], list[float]] = {}
    copy_iters: dict[int, int] = {}
    provided = {}
    shares: dict[tuple[str, int, str], float] = {}  # huge pages under the kernels' buffers
    skews = []
    done = 0

    def more() -> bool:  # the stopping rule, on every series pooled so far
        return ci is not None and any(
            needs_more([t for part in parts for t in part], rel=ci, max_reps=max_reps)
            for parts in pooled.values())

    while done < rounds or more():
        done += 1
        for level in thread_levels if (any(i != "c-standalone" for i in impls) or copy) else ():
            doc = python_worker(_at_level(launch, level), MODULE, {**base, "iters": iters},
                                timeout)
            provided[level] = doc["thread_provided"]
            skews.append(doc["barrier_skew"])
            for rec in doc["records"]:
                if rec["impl"] == "copy" and level != thread_levels[0]:
                    continue  # a local copy does not depend on MPI's thread level
                times = [t * 1e-6 for t in rec["times_us"]]
                key = (rec["impl"], rec["size_bytes"], level)
                pooled.setdefault(key, []).append(times)
                if rec.get("huge_page_share") is not None:  # the least over the rounds
                    shares[key] = min(shares.get(key, 1.0), rec["huge_page_share"])
                if rec["impl"] == "copy":
                    copy_iters[rec["size_bytes"]] = rec["iters"]
        if "c-standalone" in impls:
            # one warm-up per size, as the kernel does (capped at 100 steps)
            raw = {}
            for n in sizes:
                raw.update({int(d["size_bytes"]): d["times"] for d in
                            standalone(launch, {n: iters[n]}, mode, reps, warmup[n], timeout)})
            for n, times in raw.items():
                pooled.setdefault(("c-standalone", n, "single"), []).append(times)
    records = []
    order = {lv: i for i, lv in enumerate(runtime.THREAD_LEVELS)}
    for (impl, n, level), parts in sorted(pooled.items(),
                                          key=lambda kv: (kv[0][1], kv[0][0], order[kv[0][2]])):
        times = [t for part in parts for t in part]
        # the C program asks for single and does not report what it got
        where = {**where0, "thread_level": level,
                 "thread_provided": None if impl == "c-standalone" else provided.get(level)}
        if ci is not None:
            where.update(stopping(times, rel=ci, max_reps=max_reps))
        if impl == "copy":  # rank 0 alone, on its node
            records.append(record(times, size_bytes=n, impl=impl, transport="none",
                                  mode="local", iters=copy_iters[n], ranks=1,
                                  oversubscribed=launch.oversubscribed, **where))
            continue
        records.append(record(times, size_bytes=n, impl=impl, transport=transport, mode=mode,
                              iters=iters[n], ranks=2, oversubscribed=launch.oversubscribed,
                              huge_page_share=shares.get((impl, n, level)), **where))
    settings = {"sizes": sizes, "impls": list(impls), "mode": mode, "reps": reps,
                "rounds": rounds, "rounds_run": done, "min_time": min_time, "iters": iters,
                "copy": copy, "thread_levels": list(thread_levels), "ci": ci,
                "max_reps": max_reps, **where0}
    meta = run_meta(launch, settings, first["library"])
    if len(thread_levels) > 1:  # each record says its own (thread_level, thread_provided)
        meta["thread_level"] = {lv: provided.get(lv) for lv in thread_levels}
    if skew_summary(skews):
        meta["barrier_exit_skew"] = skew_summary(skews)
    return meta, records


def pingpong_table(records: list[dict]) -> str:
    """Plain-text summary of :func:`run_pingpong`'s records.

    Parameters
    ----------
    records : list of dict
        What :func:`run_pingpong` returned (its second item).

    Returns
    -------
    str
        Median one-way time per implementation (and thread level, when several were
        compared) and size, ratios to c-standalone, and with copies the paper's
        transfer / copy ratio per implementation.
    """
    sizes = sorted({r["size_bytes"] for r in records})
    levels = {r.get("thread_level", "single") for r in records
              if r["impl"] not in ("copy", "c-standalone")}

    def name(r: dict) -> str:  # "kernel", or "kernel@funneled" when levels were compared
        level = r.get("thread_level", "single")
        return r["impl"] if len(levels) < 2 or r["impl"] in ("copy", "c-standalone") \
            else f"{r['impl']}@{level}"

    impls: list[str] = []  # columns: implementations in JOB_IMPLS order, levels in order
    for i in JOB_IMPLS:
        for level in runtime.THREAD_LEVELS:
            n = name({"impl": i, "thread_level": level})
            if n not in impls and any(name(r) == n for r in records):
                impls.append(n)
    copies = {r["size_bytes"]: r["t_us_median"] for r in records if r["impl"] == "copy"}
    by = {(name(r), r["size_bytes"]): r for r in records}
    head = f"{'size (B)':>10} " + " ".join(f"{i + ' (us)':>18}" for i in impls)
    if "c-standalone" in impls:
        head += "  " + " ".join(f"{i + '/C':>12}" for i in impls if i != "c-standalone")
    if copies:
        head += f"  {'copy (us)':>10} " + " ".join(f"{i + '/copy':>18}" for i in impls)
    lines = [head]
    for n in sizes:
        row = f"{n:>10} " + " ".join(
            f"{by[(i, n)]['t_us_median']:>18.3f}" if (i, n) in by else f"{'-':>18}"
            for i in impls)
        if "c-standalone" in impls and ("c-standalone", n) in by:
            c = by[("c-standalone", n)]["t_us_median"]
            row += "  " + " ".join(
                f"{by[(i, n)]['t_us_median'] / c:>12.3f}" if (i, n) in by else f"{'-':>12}"
                for i in impls if i != "c-standalone")
        if copies.get(n, 0) > 0:
            row += f"  {copies[n]:>10.3f} " + " ".join(
                f"{by[(i, n)]['t_us_median'] / copies[n]:>18.1f}" if (i, n) in by
                else f"{'-':>18}" for i in impls)
        lines.append(row)
    return "\n".join(lines)


# --------------------------------------------------------------------------- buffers


def buffers_worker(a: dict) -> dict | None:
    """On every rank of a :func:`run_buffers` job: calibrate, or measure every kind.

    Parameters
    ----------
    a : dict
        The job's arguments: ``sizes``, ``kinds``, ``reps``, ``min_time`` and ``iters``
        (None: calibrate).

    Returns
    -------
    dict or None
        On rank 0 ``iters``, ``records`` and ``library``; None on the other ranks.
    """
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    iters = {int(k): v for k, v in (a.get("iters") or {}).items()}
    if not iters:
        iters = {n: calibrate_iters(comm, n, min_time=a["min_time"], mode="oneway")
                 for n in a["sizes"]}
    recs = []
    for kind in a["kinds"]:
        recs += measure_pingpong(comm, a["sizes"], impls=("kernel",), mode="oneway",
                                 reps=a["reps"], iters=iters, buffers=kind)
    if comm.rank != 0:
        return None
    return {"iters": iters, "records": recs, "library": runtime.library_info()}


def run_buffers(sizes, *, kinds=BUFFER_KINDS, mechanisms=MECHANISMS, reps: int = 5,
                rounds: int = 3, min_time: float = 0.01,
                timeout: float = 600.0) -> tuple[dict, list[dict]]:
    """Every kind of buffer under every large-message mechanism, side by side.

    Each mechanism is its own job (a launch setting), alternated over `rounds`; the kinds
    alternate inside each job. Where the single-copy path cannot work (a container
    without ptrace) its records are missing and the meta's settings say why.

    Parameters
    ----------
    sizes : sequence of int
        Message sizes, in bytes (positive).
    kinds : sequence of str, optional
        Of :data:`mpilab.buffers.BUFFER_KINDS` (default all).
    mechanisms : sequence of str, optional
        Of :data:`MECHANISMS` (default both).
    reps, rounds : int, optional
        Repetitions per job, and rounds (5 and 3).
    min_time : float, optional
        Seconds one repetition should last (default 0.01).
    timeout : float, optional
        Seconds each MPI job may run (default 600).

    Returns
    -------
    tuple of (dict, list of dict)
        The meta (settings with ``transparent_hugepages`` and ``skipped``) and one record
        per size, mechanism and kind (one-way times, µs; ``huge_page_share``).

    Raises
    ------
    ValueError
        An unknown kind or mechanism, or a size below 1.
    RuntimeError
        No mechanism can run on this machine.
    """
    kinds = validate.names(kinds, BUFFER_KINDS, "buffer kind")
    mechanisms = validate.names(mechanisms, MECHANISMS, "mechanism")
    sizes = [int(n) for n in sizes]
    if not sizes or min(sizes) < 1:
        raise ValueError(f"sizes must be positive, got {sizes}")
    launches = {m: runtime.launch(2, "shm", single_copy=(m == "single-copy")) for m in mechanisms}
    skipped = {}
    if "single-copy" in launches and runtime.launcher_family() == "openmpi" \
            and not runtime.cma_works():
        skipped["single-copy"] = ("this machine forbids process_vm_readv (no ptrace): "
                                  "Open MPI falls back to copy-in/copy-out")
        del launches["single-copy"]
    if not launches:
        raise RuntimeError("nothing to measure: " + "; ".join(skipped.values()))
    base = {"what": "buffers", "sizes": sizes, "kinds": list(kinds), "reps": reps,
            "min_time": min_time}
    first_launch = next(iter(launches.values()))
    first = python_worker(first_launch, MODULE, {**base, "kinds": [], "iters": None}, timeout)
    iters = {int(k): v for k, v in first["iters"].items()}
    pooled: dict[tuple[str, str, int], list[float]] = {}
    shares: dict[tuple[str, str, int], float | None] = {}
    for _ in range(rounds):
        for mech, launch in launches.items():
            doc = python_worker(launch, MODULE, {**base, "iters": iters}, timeout)
            for rec in doc["records"]:
                key = (mech, rec["buffer"], rec["size_bytes"])
                pooled.setdefault(key, []).extend(t * 1e-6 for t in rec["times_us"])
                shares[key] = rec.get("huge_page_share")
    records = []
    order = {k: i for i, k in enumerate(BUFFER_KINDS)}
    for (mech, kind, n), times in sorted(pooled.items(),
                                         key=lambda kv: (kv[0][2], kv[0][0], order[kv[0][1]])):
        records.append(record(times, size_bytes=n, impl="kernel", mode="oneway", ranks=2,
                              transport="shm", mechanism=mech, buffer=kind,
                              huge_page_share=shares[(mech, kind, n)], iters=iters[n],
                              oversubscribed=first_launch.oversubscribed))
    settings = {"sizes": sizes, "kinds": list(kinds), "mechanisms": list(mechanisms),
                "reps": reps, "rounds": rounds, "min_time": min_time, "iters": iters,
                "transparent_hugepages": transparent_hugepages(), "skipped": skipped}
    return run_meta(first_launch, settings, first["library"]), records


def buffers_table(records: list[dict]) -> str:
    """One-way time (µs) per size, kind and mechanism, and each kind's time relative to
    the course's huge-page buffer under the same mechanism.

    Parameters
    ----------
    records : list of dict
        :func:`run_buffers`' records.

    Returns
    -------
    str
        The table, one line per size.
    """
    cols = [(m, k) for m in MECHANISMS for k in BUFFER_KINDS
            if any(r["mechanism"] == m and r["buffer"] == k for r in records)]
    by = {(r["mechanism"], r["buffer"], r["size_bytes"]): r for r in records}
    lines = [f"{'size (B)':>10} " + " ".join(f"{m + '/' + k:>24}" for m, k in cols)]
    for n in sorted({r["size_bytes"] for r in records}):
        cells = []
        for m, k in cols:
            r = by.get((m, k, n))
            if r is None:
                cells.append(f"{'-':>24}")
                continue
            ref = by.get((m, "huge-pages", n))
            rel = f" ({r['t_us_median'] / ref['t_us_median']:.2f}x)" if ref else ""
            cells.append(f"{r['t_us_median']:>14.1f}{rel:>10}")
        lines.append(f"{n:>10} " + " ".join(cells))
    return "\n".join(lines)
