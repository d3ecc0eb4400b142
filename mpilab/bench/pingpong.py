"""Ping-pong: the Cython kernel, the same C loop as a standalone program, and mpi4py.

    python -m mpilab.bench pingpong --transport shm|tcp --sizes 8,1024,4194304 --json OUT
    python -m mpilab.bench pingpong --nodes 2 --link fast-ethernet --mode oneway --copy \
        --sizes 40,80,800,4000,8000,16000,24000,32000     # the ping-pong paper's Table 1

All three run in one invocation with the same iteration counts (calibrated once per
size on the kernel), alternating in `--rounds` rounds, so their ratios are measured
side by side. Records carry impl (kernel, c-standalone, mpi4py), transport, size_bytes,
thread_level, t_us_min, t_us_median, quartiles, spread and bandwidth_MBps; meta says which
machine, MPI and launcher produced them and whether the run was oversubscribed.

``--thread-levels single,funneled`` runs the Python implementations once per level of
``MPI_Init_thread`` in every round (a job each: the level is fixed at start-up), so what a
level costs is measured side by side; records carry ``thread_level`` (asked) and
``thread_provided`` (what MPI gave). The standalone C program always runs at ``single``.

With ``--nodes N`` the two ranks run on emulated nodes (:mod:`mpilab.netlab`, root):
``--map-by node`` puts them on two nodes, across the ``--link``; ``--map-by slot`` both
on node0. Records then carry ``nodes``, ``ranks_per_node``, ``link``, ``map_by``,
``node_of_rank`` and ``shaping`` (what the emulation applied and left out). ``--copy``
also times rank 0's local copy ``a(i) = b(i)`` of each size (impl ``copy``, one rank)
in the same job, and the table adds the paper's ratio transfer / copy.

    python -m mpilab.bench pingpong --simulate this-machine --sizes 8,1048576 --json OUT

``--simulate PLATFORM`` runs the same C loop on a simulated platform (SimGrid SMPI,
:mod:`mpilab.sim`): two ranks on one node and, where the platform has several nodes, one
on each of two; records carry ``simulated: true``, ``platform``, ``label`` and
``placement``. ``this-machine`` is calibrated first from a real ping-pong here when it
has not been, and then the measured times are printed beside the simulated ones.
"""

from __future__ import annotations

import dataclasses
import json
import sys

from .. import jobs, runtime, validate
from ..jobs import python_worker
from ..timing import MODES, record, run_meta
from . import TIMEOUT, finish, parser, placed, simulated_line, where_line

IMPLS = ("kernel", "c-standalone", "mpi4py")


def _worker(args_path: str, out_path: str) -> int:
    from mpi4py import MPI

    from ..timing import calibrate_iters, measure_pingpong

    a = json.loads(open(args_path).read())
    comm = MPI.COMM_WORLD
    iters = a.get("iters") or {}
    if not iters:
        iters = {n: calibrate_iters(comm, n, min_time=a["min_time"], mode=a["mode"])
                 for n in a["sizes"]}
    iters = {int(k): v for k, v in iters.items()}
    py_impls = [i for i in a["impls"] if i != "c-standalone"]
    recs = measure_pingpong(comm, a["sizes"], impls=py_impls, mode=a["mode"], reps=a["reps"],
                            iters=iters, rounds=1) if py_impls else []
    if a.get("copy") and comm.rank == 0:
        from ..timing import measure_memcopy

        recs += [{**r, "impl": "copy"} for r in
                 measure_memcopy(MPI.COMM_SELF, a["sizes"], reps=a["reps"])]
    if comm.rank == 0:
        levels = {MPI.THREAD_SINGLE: "single", MPI.THREAD_FUNNELED: "funneled",
                  MPI.THREAD_SERIALIZED: "serialized", MPI.THREAD_MULTIPLE: "multiple"}
        with open(out_path, "w") as f:
            json.dump({"iters": iters, "records": recs, "library": runtime.library_info(),
                       "thread_provided": levels[MPI.Query_thread()]}, f)
    return 0


def _standalone(launch, sizes, iters, mode, reps, warmup, timeout):
    from ..kernels import program

    spec = [f"{n}:{iters[n]}" for n in sizes]
    out = jobs.run(launch, [str(program("mpilab-pingpong")), mode, str(warmup), str(reps), *spec],
                   timeout=timeout).stdout
    return {int(d["size_bytes"]): d["times"] for d in map(json.loads, out.splitlines())}


def run(sizes, *, transport="shm", impls=IMPLS, mode="roundtrip", reps=7, rounds=2,
        min_time=0.01, timeout=TIMEOUT, nodes=None, link="fast-ethernet",
        map_by="node", copy=False, thread_levels=("single",)) -> tuple[dict, list[dict]]:
    """Measure; returns (meta, records).

    With `nodes`, the two ranks run on emulated nodes joined by `link` (``map_by``
    ``node``: one on each, across the link; ``slot``: both on node0). With `copy`, rank
    0 also times the local copy of each size (records with impl ``copy``). Each of
    `thread_levels` gets its own job per round (``MPI_Init_thread``'s level).
    """
    impls = validate.names(impls, IMPLS, "impl")
    thread_levels = validate.names(thread_levels, runtime.THREAD_LEVELS, "thread level")
    if copy and any(int(n) % 8 for n in sizes):
        raise ValueError("with --copy the sizes are whole doubles: multiples of 8 bytes, "
                         f"got {[n for n in sizes if int(n) % 8]}")
    with placed(2, transport, nodes=nodes, link=link, map_by=map_by) as (launch, where):
        return _run(launch, where, sizes, transport=transport, impls=impls, mode=mode,
                    reps=reps, rounds=rounds, min_time=min_time, timeout=timeout, copy=copy,
                    thread_levels=thread_levels)


def _at_level(launch: runtime.Launch, level: str) -> runtime.Launch:
    return dataclasses.replace(launch, env={**launch.env, "MPI4PY_RC_THREAD_LEVEL": level})


def _run(launch, where0, sizes, *, transport, impls, mode, reps, rounds, min_time, timeout,
         copy, thread_levels=("single",)):
    module = "mpilab.bench.pingpong"
    base = {"sizes": sizes, "mode": mode, "reps": reps, "min_time": min_time,
            "impls": list(impls), "copy": copy}
    # Calibrate once on the kernel; every implementation then runs the same iterations.
    first = python_worker(_at_level(launch, thread_levels[0]), module,
                          {**base, "impls": [], "copy": False}, timeout)
    iters = {int(k): v for k, v in first["iters"].items()}
    warmup = {n: max(1, min(it, 100)) for n, it in iters.items()}
    pooled: dict[tuple[str, int, str], list[float]] = {}
    copy_iters: dict[int, int] = {}
    provided = {}
    for _ in range(rounds):
        for level in thread_levels if (any(i != "c-standalone" for i in impls) or copy) else ():
            doc = python_worker(_at_level(launch, level), module, {**base, "iters": iters},
                                timeout)
            provided[level] = doc["thread_provided"]
            for rec in doc["records"]:
                if rec["impl"] == "copy" and level != thread_levels[0]:
                    continue  # a local copy does not depend on MPI's thread level
                times = [t * 1e-6 for t in rec["times_us"]]
                pooled.setdefault((rec["impl"], rec["size_bytes"], level), []).append(times)
                if rec["impl"] == "copy":
                    copy_iters[rec["size_bytes"]] = rec["iters"]
        if "c-standalone" in impls:
            # one warm-up per size, as the kernel does (capped at 100 steps)
            raw = {}
            for n in sizes:
                raw.update(_standalone(launch, [n], iters, mode, reps, warmup[n], timeout))
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
        if impl == "copy":  # rank 0 alone, on its node
            records.append(record(times, size_bytes=n, impl=impl, transport="none",
                                  mode="local", iters=copy_iters[n], ranks=1,
                                  oversubscribed=launch.oversubscribed, **where))
            continue
        records.append(record(times, size_bytes=n, impl=impl, transport=transport, mode=mode,
                              iters=iters[n], ranks=2, oversubscribed=launch.oversubscribed,
                              **where))
    settings = {"sizes": sizes, "impls": list(impls), "mode": mode, "reps": reps,
                "rounds": rounds, "min_time": min_time, "iters": iters, "copy": copy,
                "thread_levels": list(thread_levels), **where0}
    return run_meta(launch, settings, first["library"]), records


def table(records: list[dict]) -> str:
    """Plain-text summary: median one-way time per impl, ratios to c-standalone, and with
    copies the paper's transfer / copy ratio per impl."""
    sizes = sorted({r["size_bytes"] for r in records})
    levels = {r.get("thread_level", "single") for r in records
              if r["impl"] not in ("copy", "c-standalone")}

    def name(r: dict) -> str:  # "kernel", or "kernel@funneled" when levels were compared
        level = r.get("thread_level", "single")
        return r["impl"] if len(levels) < 2 or r["impl"] in ("copy", "c-standalone") \
            else f"{r['impl']}@{level}"

    impls: list[str] = []  # columns: implementations in IMPLS order, levels in order
    for i in IMPLS:
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


def simulate(sizes, platform: str, *, reps: int = 5) -> tuple[dict, list[dict]]:
    """Simulated ping-pong on `platform`: one node, and across two where it has two.

    On ``this-machine`` the simulation is checked against a real ping-pong of the same C
    loop here (calibrating the platform first if needed): ``meta["check"]`` rows give
    measured, simulated and the error per size.
    """
    import time

    from .. import sim

    t0 = time.perf_counter()
    check = None
    if platform == "this-machine":
        check = sim.check_this_machine(sizes)
    plat = sim.platform(platform)
    recs = sim.pingpong(sizes, platform=plat, reps=reps)
    if plat.nodes > 1:
        recs += sim.pingpong(sizes, platform=plat, across=True, reps=reps)
    m = sim.meta(plat, sizes=list(sizes), reps=reps)
    m["wall_s"] = time.perf_counter() - t0
    if check is not None:
        m["check"] = check
    return m, recs


def sim_table(m: dict, recs: list[dict]) -> str:
    lines = [simulated_line(m).rstrip("\n"),
             f"{'size B':>10} {'placement':>13} {'t_us (simulated)':>17}"]
    for r in recs:
        lines.append(f"{r['size_bytes']:>10} {r['placement']:>13} {r['t_us_median']:>17.3f}")
    if m.get("check"):
        lines.append(f"# this machine, measured vs simulated ({m['label']}):")
        lines.append(f"{'size B':>10} {'measured us':>12} {'simulated us':>13} {'error':>8}")
        for c in m["check"]:
            lines.append(f"{c['size_bytes']:>10} {c['measured_us']:>12.3f} "
                         f"{c['simulated_us']:>13.3f} {c['error']:>+8.1%}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = parser("pingpong", __doc__, worker=True, reps=7, rounds=2, min_time=0.01, nodes=True,
               simulate=True)
    p.add_argument("--sizes", default="8,1024,65536,1048576,4194304",
                   help="message sizes in bytes, comma-separated (K/M suffixes allowed)")
    p.add_argument("--impls", default=",".join(IMPLS))
    p.add_argument("--mode", choices=MODES, default="roundtrip",
                   help="roundtrip: half a round trip (IMB PingPong, osu_latency); oneway: "
                        "back-to-back blocking sends (the ping-pong paper); window: 64 "
                        "MPI_Isend at a time (osu_bw)")
    p.add_argument("--copy", action="store_true",
                   help="also time rank 0's local copy of each size (transfer / copy ratio)")
    p.add_argument("--thread-levels", default="single",
                   help="MPI_Init_thread levels to compare, comma-separated: "
                        + ", ".join(runtime.THREAD_LEVELS) + " (one job each per round)")
    a = p.parse_args(argv)
    if a.worker:
        return _worker(*a.worker)
    if a.simulate:
        return finish("pingpong", a.json, lambda: simulate(validate.sizes(a.sizes), a.simulate,
                                                            reps=a.reps), sim_table)

    def measure():
        return run(validate.sizes(a.sizes), transport=a.transport,
                   impls=a.impls, mode=a.mode, reps=a.reps,
                   rounds=a.rounds, min_time=a.min_time, timeout=a.timeout,
                   nodes=a.nodes, link=a.link, map_by=a.map_by, copy=a.copy,
                   thread_levels=a.thread_levels)

    def show(m, recs):
        return (f"# {m['mpi_library_version']} | {a.transport} | 2 ranks on {m['cores']} "
                "cores" + (" (oversubscribed)" if m.get("oversubscribed") else "")
                + "\n" + where_line(m["settings"]) + table(recs))

    return finish("pingpong", a.json, measure, show)


if __name__ == "__main__":
    sys.exit(main())
