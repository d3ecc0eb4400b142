"""What the memory a large message lives in does to its transfer, on one host.

    python -m mpilab.bench buffers --sizes 1M,4M,16M --json OUT

Two ranks ping-pong the same Cython kernel (one-way time: half a round trip) with three
kinds of buffer (:data:`mpilab.buffers.BUFFER_KINDS`): the course's own (2 MiB aligned,
transparent huge pages asked for), ``np.ones`` as any user's array, and ordinary 4 KiB
pages only; and with the shared-memory transport's two ways of moving a large message:

* ``single-copy``: the receiver copies straight out of the sender's buffer
  (``process_vm_readv``, CMA), which makes the kernel walk and pin the sender's pages:
  a cost per page, so 512 times fewer pages on 2 MiB huge pages matter;
* ``copy-in-out``: the sender copies into the shared segment and the receiver out of
  it, fragment after fragment (``runtime.launch(single_copy=False)``): two copies, but
  of memory that is already mapped, whatever pages the user's buffer has.

Each mechanism is its own job (a launch setting), alternated over ``--rounds``; the kinds
alternate inside each job, so every ratio is measured side by side. Records carry
``buffer``, ``mechanism``, ``huge_page_share`` (how much of the sender's buffer the kernel
really backed with huge pages) and the usual timing fields; meta says the kernel's
transparent huge page mode. Where the single-copy path cannot work (a container without
ptrace) its records are missing and meta says why.
"""

from __future__ import annotations

import json
import sys

from .. import runtime, validate
from ..buffers import BUFFER_KINDS, transparent_hugepages
from ..jobs import python_worker
from ..timing import record, run_meta
from . import finish, parser

MECHANISMS = ("single-copy", "copy-in-out")
MODULE = "mpilab.bench.buffers"


def _worker(args_path: str, out_path: str) -> int:
    from mpi4py import MPI

    from ..timing import calibrate_iters, measure_pingpong

    a = json.loads(open(args_path).read())
    comm = MPI.COMM_WORLD
    iters = {int(k): v for k, v in (a.get("iters") or {}).items()}
    if not iters:
        iters = {n: calibrate_iters(comm, n, min_time=a["min_time"], mode="oneway")
                 for n in a["sizes"]}
    recs = []
    for kind in a["kinds"]:
        recs += measure_pingpong(comm, a["sizes"], impls=("kernel",), mode="oneway",
                                 reps=a["reps"], iters=iters, buffers=kind)
    if comm.rank == 0:
        with open(out_path, "w") as f:
            json.dump({"iters": iters, "records": recs, "library": runtime.library_info()}, f)
    return 0


def run(sizes, *, kinds=BUFFER_KINDS, mechanisms=MECHANISMS, reps: int = 5, rounds: int = 3,
        min_time: float = 0.01, timeout: float = 600.0) -> tuple[dict, list[dict]]:
    """Measure every kind of buffer under every mechanism; (meta, records)."""
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
    base = {"sizes": sizes, "kinds": list(kinds), "reps": reps, "min_time": min_time}
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


def table(records: list[dict]) -> str:
    """One-way time (us) per size, kind and mechanism, and each kind's time relative to
    the course's huge-page buffer under the same mechanism."""
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


def main(argv=None) -> int:
    p = parser("buffers", __doc__, worker=True, transport=False, reps=5, rounds=3,
               min_time=0.01)
    p.add_argument("--sizes", default="1M,4M,16M",
                   help="message sizes in bytes, comma-separated (K/M suffixes allowed)")
    p.add_argument("--kinds", default=",".join(BUFFER_KINDS),
                   help="buffer kinds: " + ", ".join(BUFFER_KINDS))
    p.add_argument("--mechanisms", default=",".join(MECHANISMS),
                   help="large-message paths: " + ", ".join(MECHANISMS))
    a = p.parse_args(argv)
    if a.worker:
        return _worker(*a.worker)

    def measure():
        return run(validate.sizes(a.sizes), kinds=a.kinds, mechanisms=a.mechanisms,
                   reps=a.reps, rounds=a.rounds, min_time=a.min_time, timeout=a.timeout)

    def show(m, recs):
        s = m["settings"]
        return (f"# {m['mpi_library_version']} | shm | 2 ranks on {m['cores']} cores"
                + (" (oversubscribed)" if m.get("oversubscribed") else "")
                + f" | transparent huge pages: {s['transparent_hugepages']}\n"
                + "".join(f"# {k} not measured: {why}\n" for k, why in s["skipped"].items())
                + table(recs))

    return finish("buffers", a.json, measure, show)


if __name__ == "__main__":
    sys.exit(main())
