"""Ping-pong: the Cython kernel, the same C loop as a standalone program, and mpi4py.

    python -m mpilab.bench pingpong --transport shm|tcp --sizes 8,1024,4194304 --json OUT

All three run in one invocation with the same iteration counts (calibrated once per
size on the kernel), alternating in `--rounds` rounds, so their ratios are measured
side by side. Records carry impl (kernel, c-standalone, mpi4py), transport, size_bytes,
t_us_min, t_us_median, quartiles, spread and bandwidth_MBps; meta says which machine,
MPI and launcher produced them and whether the run was oversubscribed.
"""

from __future__ import annotations

import json
import sys

from .. import jobs, runtime, validate
from ..jobs import python_worker
from ..timing import record, run_meta
from . import TIMEOUT, finish, parser

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
    if comm.rank == 0:
        with open(out_path, "w") as f:
            json.dump({"iters": iters, "records": recs, "library": runtime.library_info()}, f)
    return 0


def _standalone(launch, sizes, iters, mode, reps, warmup, timeout):
    from ..kernels import program

    spec = [f"{n}:{iters[n]}" for n in sizes]
    out = jobs.run(launch, [str(program("mpilab-pingpong")), mode, str(warmup), str(reps), *spec],
                   timeout=timeout).stdout
    return {int(d["size_bytes"]): d["times"] for d in map(json.loads, out.splitlines())}


def run(sizes, *, transport="shm", impls=IMPLS, mode="roundtrip", reps=7, rounds=2,
        min_time=0.01, timeout=TIMEOUT) -> tuple[dict, list[dict]]:
    """Measure; returns (meta, records)."""
    impls = validate.names(impls, IMPLS, "impl")
    launch = runtime.launch(2, transport)
    module = "mpilab.bench.pingpong"
    base = {"sizes": sizes, "mode": mode, "reps": reps, "min_time": min_time,
            "impls": list(impls)}
    # Calibrate once on the kernel; every implementation then runs the same iterations.
    first = python_worker(launch, module, {**base, "impls": []}, timeout)
    iters = {int(k): v for k, v in first["iters"].items()}
    warmup = {n: max(1, min(it, 100)) for n, it in iters.items()}
    pooled: dict[tuple[str, int], list[float]] = {}
    for _ in range(rounds):
        if any(i != "c-standalone" for i in impls):
            doc = python_worker(launch, module, {**base, "iters": iters}, timeout)
            for rec in doc["records"]:
                times = [t * 1e-6 for t in rec["times_us"]]
                pooled.setdefault((rec["impl"], rec["size_bytes"]), []).append(times)
        if "c-standalone" in impls:
            # one warm-up per size, as the kernel does (capped at 100 steps)
            raw = {}
            for n in sizes:
                raw.update(_standalone(launch, [n], iters, mode, reps, warmup[n], timeout))
            for n, times in raw.items():
                pooled.setdefault(("c-standalone", n), []).append(times)
    records = []
    for (impl, n), parts in sorted(pooled.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        times = [t for part in parts for t in part]
        records.append(record(times, size_bytes=n, impl=impl, transport=transport, mode=mode,
                              iters=iters[n], ranks=2, oversubscribed=launch.oversubscribed))
    settings = {"sizes": sizes, "impls": list(impls), "mode": mode, "reps": reps,
                "rounds": rounds, "min_time": min_time, "iters": iters}
    return run_meta(launch, settings, first["library"]), records


def table(records: list[dict]) -> str:
    """Plain-text summary: median one-way time per impl, and ratios to c-standalone."""
    sizes = sorted({r["size_bytes"] for r in records})
    impls = [i for i in IMPLS if any(r["impl"] == i for r in records)]
    by = {(r["impl"], r["size_bytes"]): r for r in records}
    head = f"{'size (B)':>10} " + " ".join(f"{i + ' (us)':>18}" for i in impls)
    if "c-standalone" in impls:
        head += "  " + " ".join(f"{i + '/C':>12}" for i in impls if i != "c-standalone")
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
        lines.append(row)
    return "\n".join(lines)


def main(argv=None) -> int:
    p = parser("pingpong", __doc__, worker=True, reps=7, rounds=2, min_time=0.01)
    p.add_argument("--sizes", default="8,1024,65536,1048576,4194304",
                   help="message sizes in bytes, comma-separated (K/M suffixes allowed)")
    p.add_argument("--impls", default=",".join(IMPLS))
    p.add_argument("--mode", choices=("roundtrip", "oneway"), default="roundtrip")
    a = p.parse_args(argv)
    if a.worker:
        return _worker(*a.worker)

    def measure():
        return run(validate.sizes(a.sizes), transport=a.transport,
                   impls=a.impls, mode=a.mode, reps=a.reps,
                   rounds=a.rounds, min_time=a.min_time, timeout=a.timeout)

    def show(m, recs):
        return (f"# {m['mpi_library_version']} | {a.transport} | 2 ranks on {m['cores']} "
                "cores" + (" (oversubscribed)" if m.get("oversubscribed") else "")
                + "\n" + table(recs))

    return finish("pingpong", a.json, measure, show)


if __name__ == "__main__":
    sys.exit(main())
