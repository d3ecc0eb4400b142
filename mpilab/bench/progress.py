"""Does a nonblocking halo exchange overlap the computation? Only if something progresses it.

    python -m mpilab.bench progress --nx 131072 --ny 16 --json OUT
    python -m mpilab.bench progress --nodes 2 --link gige --nx 131072 --ny 64 --json OUT

Two ranks (``--ranks``) run the heat stencil's halo exchange in three modes, side by side
in one job, alternated over ``--rounds``:

* ``nonblocking``: post, ``MPI_Waitall``, then compute: nothing to overlap with, so its
  MPI time is the exchange alone and its computing the computation alone;
* ``overlap``: post, compute the interior, ``MPI_Waitall``, compute the boundary ring:
  no MPI call while computing;
* ``overlap-test``: the same with ``MPI_Testall`` after each of 16 parts of the interior,
  where the library may match a rendezvous offer, copy, or push the next fragment.

Every step of every rank is timed phase by phase (:func:`mpilab.halo.timeline`). Per
mode, the median over ranks and recorded steps of the step time, of the time inside the
exchange's MPI calls (posting, ``MPI_Waitall`` and, in ``overlap-test``, the
``MPI_Testall`` calls) and of the computing. Two measures of overlap, each clipped to
0..1:

* **hidden**: ``1 - t_mpi(mode) / t_mpi(nonblocking)``, the share of the exchange's time
  in MPI calls the mode no longer pays; it does not depend on how fast the computing
  happened to run;
* **OSU**: OSU's overlap for nonblocking collectives, from step times,
  ``1 - (t_step(mode) - t_compute(nonblocking)) / t_mpi(nonblocking)``: 1 when a step
  costs no more than the computing alone, 0 when it costs computing plus the whole
  exchange. It counts any change of the computing's speed as overlap (a cache that
  happens to be warmer), so it is the noisier of the two on one host. A row of ``131072`` doubles is 1 MiB, above every
eager limit, so it needs the receiver's match; ``--nx 2048`` (16 KiB rows) sits under
TCP's 64 KiB eager limit and travels without it.

With ``--nodes`` the ranks run on emulated nodes (:mod:`mpilab.netlab`: namespaces and
a shaped veth), one per node, so the row crosses TCP: the kernel moves what the library
handed it while the ranks compute. Records say ``emulated`` and what the shaping left
out; an emulated link is not a real network card.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from .. import runtime, validate
from ..jobs import python_worker
from ..timing import record, run_meta
from . import finish, parser, placed, where_line

MODES = ("nonblocking", "overlap", "overlap-test")
MODULE = "mpilab.bench.progress"


def step_phases(tl) -> dict[str, np.ndarray]:
    """Per (rank, recorded step) of a gathered heat timeline: ``step``, ``mpi``
    (posting, waiting, testing) and ``compute`` seconds (arrays of ranks x steps)."""
    from ..halo import PHASES

    tl = np.asarray(tl, dtype=float)
    d = {p: tl[:, :, i, 1] - tl[:, :, i, 0] for i, p in enumerate(PHASES)}
    return {"step": tl[:, :, :, 1].max(axis=2) - tl[:, :, :, 0].min(axis=2),
            "mpi": d["exchange"] + d["wait"] + d["progress"],
            "compute": d["interior"] - d["progress"] + d["boundary"]}


def _worker(args_path: str, out_path: str) -> int:
    from mpi4py import MPI

    from .. import halo

    a = json.loads(open(args_path).read())
    comm = MPI.COMM_WORLD
    pooled: dict[str, dict[str, list[float]]] = {m: {} for m in a["modes"]}
    for _ in range(a["rounds"]):
        for mode in a["modes"]:
            tl = halo.timeline(comm, "heat", a["nx"], a["ny"], mode=mode, steps=a["steps"],
                               last=a["last"])
            if comm.rank == 0:
                for k, v in step_phases(tl).items():
                    pooled[mode].setdefault(k, []).extend(float(x) for x in v.ravel())
    # and the result, checked against the serial code on a grid small enough for it
    ok = True
    for mode in a["modes"]:
        full = halo.gather(comm, *halo.run_heat(comm, 37, 23, 20, mode=mode))
        if comm.rank == 0:
            ok = ok and bool(np.allclose(full, halo.serial_heat(37, 23, 20), rtol=1e-12,
                                         atol=1e-12))
    if comm.rank == 0:
        with open(out_path, "w") as f:
            json.dump({"pooled": pooled, "valid": ok, "library": runtime.library_info()}, f)
    return 0


def _clip(x: float) -> float:
    return float(min(1.0, max(0.0, x)))


def hidden_share(mpi_s: float, exchange_alone_s: float) -> float:
    """The share of the exchange's time in MPI calls a mode no longer pays (0..1)."""
    if exchange_alone_s <= 0:
        raise ValueError(f"the exchange alone must take some time, got {exchange_alone_s}")
    return _clip(1.0 - mpi_s / exchange_alone_s)


def osu_overlap(step_s: float, compute_alone_s: float, exchange_alone_s: float) -> float:
    """OSU's overlap: the share of the exchange alone hidden behind the computation
    alone, from step times, clipped to 0..1 (see the module's text)."""
    if exchange_alone_s <= 0:
        raise ValueError(f"the exchange alone must take some time, got {exchange_alone_s}")
    return _clip(1.0 - (step_s - compute_alone_s) / exchange_alone_s)


def run(*, nx: int = 131072, ny: int = 16, ranks: int = 2, modes=MODES, steps: int = 30,
        last: int = 20, rounds: int = 3, nodes: int | None = None, link: str = "gige",
        timeout: float = 600.0) -> tuple[dict, list[dict]]:
    """Measure; (meta, records), one record per mode (times per step, per rank)."""
    modes = validate.names(modes, MODES, "mode")
    if "nonblocking" not in modes:
        raise ValueError("the modes must include 'nonblocking': its exchange and its "
                         "computing, each alone, are what overlap is measured against")
    for name, v in (("nx", nx), ("ny", ny), ("ranks", ranks), ("steps", steps),
                    ("last", last), ("rounds", rounds)):
        validate.count(v, name)
    if last > steps:
        raise ValueError(f"last={last} is more than steps={steps}")
    args = {"nx": nx, "ny": ny, "modes": list(modes), "steps": steps, "last": last,
            "rounds": rounds}
    with placed(ranks, "shm", nodes=nodes, link=link, map_by="node") as (launch, where):
        doc = python_worker(launch, MODULE, args, timeout)
    pooled = doc["pooled"]
    med = {m: {k: float(np.median(v)) for k, v in pooled[m].items()} for m in modes}
    alone_mpi, alone_compute = med["nonblocking"]["mpi"], med["nonblocking"]["compute"]
    py, px = (ranks, 1)
    records = []
    for m in modes:
        records.append(record(
            pooled[m]["step"], size_bytes=8 * (nx // px), impl=m, mode=m, app="heat",
            nx=nx, ny=ny, ranks=ranks, dims=[py, px], mpi_us_median=med[m]["mpi"] * 1e6,
            compute_us_median=med[m]["compute"] * 1e6,
            hidden=hidden_share(med[m]["mpi"], alone_mpi),
            overlap_osu=osu_overlap(med[m]["step"], alone_compute, alone_mpi),
            valid=doc["valid"], oversubscribed=launch.oversubscribed, **where))
    settings = {**args, "ranks": ranks, "exchange_alone_us": alone_mpi * 1e6,
                "compute_alone_us": alone_compute * 1e6, **where}
    return run_meta(launch, settings, doc["library"]), records


def table(records: list[dict]) -> str:
    """Per mode: step, MPI and computing time (median µs per step and rank), the share of
    the exchange hidden, OSU's overlap."""
    lines = [f"{'mode':>14} {'step (us)':>11} {'in MPI (us)':>12} {'computing (us)':>15} "
             f"{'hidden':>7} {'OSU':>5}"]
    for r in records:
        lines.append(f"{r['mode']:>14} {r['t_us_median']:>11.1f} {r['mpi_us_median']:>12.1f} "
                     f"{r['compute_us_median']:>15.1f} {r['hidden']:>7.0%} "
                     f"{r['overlap_osu']:>5.0%}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = parser("progress", __doc__, worker=True, transport=False, reps=None, rounds=3,
               min_time=None, nodes=True)
    p.add_argument("--nx", type=int, default=131072, help="columns (a row is 8 nx bytes)")
    p.add_argument("--ny", type=int, default=16, help="rows, split over the ranks")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--last", type=int, default=20, help="steps recorded (the last ones)")
    p.add_argument("--modes", default=",".join(MODES))
    a = p.parse_args(argv)
    if a.worker:
        return _worker(*a.worker)

    def measure():
        return run(nx=a.nx, ny=a.ny, ranks=a.ranks, modes=a.modes, steps=a.steps,
                   last=a.last, rounds=a.rounds, nodes=a.nodes, link=a.link,
                   timeout=a.timeout)

    def show(m, recs):
        s = m["settings"]
        return (where_line(s) + f"# {m['mpi_library_version']} | {s['ranks']} ranks on "
                f"{m['cores']} cores" + (" (oversubscribed)" if m.get("oversubscribed") else "")
                + f" | heat {s['nx']} x {s['ny']}, rows of {8 * s['nx']} B\n"
                + table(recs))

    return finish("progress", a.json, measure, show, ok=lambda recs: all(r["valid"]
                                                                         for r in recs))


if __name__ == "__main__":
    sys.exit(main())
