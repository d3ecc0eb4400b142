"""Does a nonblocking exchange overlap the computation? Only if something progresses it.

The progress experiment of lecture 02 (section 6b); ``python -m mpilab.bench progress``
is its command line. Two ranks (`ranks`) run the heat stencil's halo exchange in three
modes, side by side in one job, alternated over `rounds`:

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

* **hidden** (:func:`hidden_share`): ``1 - t_mpi(mode) / t_mpi(nonblocking)``, the share
  of the exchange's time in MPI calls the mode no longer pays; it does not depend on how
  fast the computing happened to run;
* **OSU** (:func:`osu_overlap`): OSU's overlap for nonblocking collectives, from step
  times, ``1 - (t_step(mode) - t_compute(nonblocking)) / t_mpi(nonblocking)``: 1 when a
  step costs no more than the computing alone, 0 when it costs computing plus the whole
  exchange. It counts any change of the computing's speed as overlap (a cache that
  happens to be warmer), so it is the noisier of the two on one host. A row of
  ``131072`` doubles is 1 MiB, above every eager limit, so it needs the receiver's
  match; ``nx=2048`` (16 KiB rows) sits under TCP's 64 KiB eager limit and travels
  without it.

``case="iallreduce"`` asks the same of a nonblocking collective, as OSU's
``osu_iallreduce`` does: ``allreduce`` (``MPI_Allreduce`` of `n` doubles, then the
computation), ``iallreduce`` (start, compute, ``MPI_Wait``) and ``iallreduce-test``
(``MPI_Test`` after each of 16 parts of the computation), the computation being sweeps
over a private array, as many as make it last about as long as the allreduce alone
(measured first). ``allreduce`` plays ``nonblocking``'s part in both measures.

With `nodes` the ranks run on emulated nodes (:mod:`mpilab.netlab`: namespaces and a
shaped veth), one per node, so the row crosses TCP: the kernel moves what the library
handed it while the ranks compute. Records say ``emulated`` and what the shaping left
out; an emulated link is not a real network card.

The job's ranks run this module: ``python -m mpilab.halo.progress --worker ARGS OUT``
(started by :func:`run` through :func:`mpilab.jobs.python_worker`).
"""

from __future__ import annotations

import json
import sys

import numpy as np

from .. import runtime, validate
from ..jobs import python_worker, worker_main
from ..netlab import placed
from ..timing import record, run_meta, text_table
from .parallel import gather, run_heat, timeline
from .problem import PHASES, serial_heat

#: Per case, its modes; the first does the exchange and the computation one after the
#: other, and is what the others are measured against.
CASES = {"halo": ("nonblocking", "overlap", "overlap-test"),
         "iallreduce": ("allreduce", "iallreduce", "iallreduce-test")}
MODES = CASES["halo"]
MODULE = "mpilab.halo.progress"  # python -m mpilab.halo.progress --worker: the job
PARTS = 16  # MPI_Test calls per computation, as the halo kernel's HALO_TEST_PARTS


def step_phases(tl) -> dict[str, np.ndarray]:
    """Per (rank, recorded step) of a gathered heat timeline: step, MPI and computing time.

    Parameters
    ----------
    tl : array_like
        A heat timeline gathered on rank 0 (:func:`mpilab.halo.timeline`): ranks x
        recorded steps x :data:`mpilab.halo.PHASES` x (start, end) seconds.

    Returns
    -------
    dict of str to numpy.ndarray
        ``step`` (first start to last end), ``mpi`` (posting, waiting, testing) and
        ``compute`` seconds, each an array of ranks x steps.
    """
    tl = np.asarray(tl, dtype=float)
    d = {p: tl[:, :, i, 1] - tl[:, :, i, 0] for i, p in enumerate(PHASES)}
    return {"step": tl[:, :, :, 1].max(axis=2) - tl[:, :, :, 0].min(axis=2),
            "mpi": d["exchange"] + d["wait"] + d["progress"],
            "compute": d["interior"] - d["progress"] + d["boundary"]}


def _iallreduce(comm, a: dict) -> tuple[dict, bool, dict]:
    """The iallreduce case on every rank: (pooled times on rank 0, valid, settings)."""
    from ..kernels import collectives as k

    n = a["n"]
    # the allreduce alone, and one sweep of the computation alone: as many sweeps as
    # make the computation last about as long as the allreduce (at least one per part)
    t, _ = k.iallreduce_overlap(comm, "allreduce", n, 0, warmup=3, iters=10)
    alone = float(np.median(t[:, 1]))
    passes = PARTS
    for _ in range(2):  # the second estimate corrects a first one made with cold caches
        t, _ = k.iallreduce_overlap(comm, "allreduce", n, passes, warmup=1, iters=5)
        sweep = float(np.median(t[:, 2])) / passes
        passes = comm.bcast(max(PARTS, int(round(alone / max(sweep, 1e-9)))), root=0)
    pooled: dict[str, dict[str, list[float]]] = {m: {} for m in a["modes"]}
    wrong = 0
    for _ in range(a["rounds"]):
        for mode in a["modes"]:
            t, bad = k.iallreduce_overlap(comm, mode, n, passes, parts=PARTS, warmup=1,
                                          iters=a["last"])
            wrong += bad
            every = comm.gather(t, root=0)
            if comm.rank == 0:
                for i, key in enumerate(("step", "mpi", "compute")):
                    pooled[mode].setdefault(key, []).extend(
                        float(x) for tr in every for x in tr[:, i])
    wrong = comm.allreduce(wrong)
    return pooled, wrong == 0, {"passes": passes, "sweep_us": sweep * 1e6}


def _halo(comm, a: dict) -> tuple[dict, bool, dict]:
    """The halo case on every rank: (pooled phase times on rank 0, valid, settings)."""
    pooled: dict[str, dict[str, list[float]]] = {m: {} for m in a["modes"]}
    for _ in range(a["rounds"]):
        for mode in a["modes"]:
            tl = timeline(comm, "heat", a["nx"], a["ny"], mode=mode, steps=a["steps"],
                          last=a["last"])
            if comm.rank == 0:
                for k, v in step_phases(tl).items():
                    pooled[mode].setdefault(k, []).extend(float(x) for x in v.ravel())
    # and the result, checked against the serial code on a grid small enough for it
    ok = True
    for mode in a["modes"]:
        full = gather(comm, *run_heat(comm, 37, 23, 20, mode=mode))
        if comm.rank == 0:
            ok = ok and bool(np.allclose(full, serial_heat(37, 23, 20), rtol=1e-12,
                                         atol=1e-12))
    return pooled, ok, {}


def _worker(args_path: str, out_path: str) -> int:
    from mpi4py import MPI

    a = json.loads(open(args_path).read())
    comm = MPI.COMM_WORLD
    pooled, ok, extra = (_iallreduce if a["case"] == "iallreduce" else _halo)(comm, a)
    if comm.rank == 0:
        with open(out_path, "w") as f:
            json.dump({"pooled": pooled, "valid": ok, "extra": extra,
                       "library": runtime.library_info()}, f)
    return 0


def _clip(x: float) -> float:
    return float(min(1.0, max(0.0, x)))


def hidden_share(mpi_s: float, exchange_alone_s: float) -> float:
    """The share of the exchange's time in MPI calls a mode no longer pays (0..1).

    Parameters
    ----------
    mpi_s : float
        The mode's time in the exchange's MPI calls per step.
    exchange_alone_s : float
        The exchange alone: ``nonblocking``'s (or ``allreduce``'s) time in MPI calls.

    Returns
    -------
    float
        ``1 - mpi_s / exchange_alone_s``, clipped to 0..1.

    Raises
    ------
    ValueError
        If `exchange_alone_s` is not positive.
    """
    return _share_hidden(mpi_s, exchange_alone_s)


def osu_overlap(step_s: float, compute_alone_s: float, exchange_alone_s: float) -> float:
    """OSU's overlap: the share of the exchange alone hidden behind the computation
    alone, from step times, clipped to 0..1 (see the module's text).

    Parameters
    ----------
    step_s : float
        The mode's time per step.
    compute_alone_s : float
        The computation alone (``nonblocking``'s computing time per step).
    exchange_alone_s : float
        The exchange alone (``nonblocking``'s time in MPI calls per step).

    Returns
    -------
    float
        ``1 - (step_s - compute_alone_s) / exchange_alone_s``, clipped to 0..1.

    Raises
    ------
    ValueError
        As :func:`hidden_share`.
    """
    return _share_hidden(step_s - compute_alone_s, exchange_alone_s)


def _share_hidden(exposed_s: float, exchange_alone_s: float) -> float:
    """``1 - exposed_s / exchange_alone_s`` clipped to 0..1: the share of the exchange alone
    that did not show; ValueError if `exchange_alone_s` is not positive."""
    if exchange_alone_s <= 0:
        raise ValueError(f"the exchange alone must take some time, got {exchange_alone_s}")
    return _clip(1.0 - exposed_s / exchange_alone_s)


def run(*, case: str = "halo", nx: int = 131072, ny: int = 16, n: int = 16384,
        ranks: int = 2, modes=None, steps: int = 30, last: int = 20, rounds: int = 3,
        nodes: int | None = None, link: str = "fast-ethernet",
        timeout: float = 600.0) -> tuple[dict, list[dict]]:
    """Measure the modes of `case` side by side in one MPI job.

    Parameters
    ----------
    case : str, optional
        ``"halo"`` (the heat's exchange, the default) or ``"iallreduce"``.
    nx, ny : int, optional
        The heat grid (``case="halo"``): `nx` columns (a row is ``8 * nx`` bytes), `ny`
        rows split over the ranks.
    n : int, optional
        Doubles per allreduce (``case="iallreduce"``).
    ranks : int, optional
        MPI ranks (default 2).
    modes : str or sequence of str, optional
        Among the case's :data:`CASES` (default: all of them); the first, the exchange
        and the computation one after the other, must be among them.
    steps : int, optional
        Steps per run (``case="halo"``).
    last : int, optional
        Steps (or calls) recorded per run: the last ones; at most `steps`.
    rounds : int, optional
        Alternations of the modes.
    nodes : int or None, optional
        Emulated nodes, one rank per node (None: this host; :func:`mpilab.netlab.placed`).
    link : str, optional
        The emulated nodes' link profile (with `nodes`).
    timeout : float, optional
        Seconds the job may run before it is killed.

    Returns
    -------
    tuple of (dict, list of dict)
        The run's meta (:func:`mpilab.timing.run_meta`) and one record per mode: times
        per step (or call) and rank, ``mpi_us_median``, ``compute_us_median``,
        ``hidden``, ``overlap_osu``, ``valid`` and where the ranks ran.

    Raises
    ------
    ValueError
        For bad arguments, or modes without the case's first.
    """
    (case,) = validate.names([case], tuple(CASES), "case")
    modes = validate.names(CASES[case] if modes is None else modes, CASES[case], "mode")
    base = CASES[case][0]
    if base not in modes:
        raise ValueError(f"the modes must include {base!r}: its exchange and its "
                         "computing, each alone, are what overlap is measured against")
    for name, v in (("nx", nx), ("ny", ny), ("n", n), ("ranks", ranks), ("steps", steps),
                    ("last", last), ("rounds", rounds)):
        validate.count(v, name)
    if last > steps:
        raise ValueError(f"last={last} is more than steps={steps}")
    args = {"case": case, "nx": nx, "ny": ny, "n": n, "modes": list(modes), "steps": steps,
            "last": last, "rounds": rounds}
    with placed(ranks, "shm", nodes=nodes, link=link, map_by="node") as (launch, where):
        doc = python_worker(launch, MODULE, args, timeout)
    pooled = doc["pooled"]
    med = {m: {k: float(np.median(v)) for k, v in pooled[m].items()} for m in modes}
    alone_mpi, alone_compute = med[base]["mpi"], med[base]["compute"]
    if case == "halo":
        size, what = 8 * nx, {"app": "heat", "nx": nx, "ny": ny, "dims": [ranks, 1]}
    else:
        size, what = 8 * n, {"op": "allreduce", "n": n, **doc["extra"]}
    records = []
    for m in modes:
        records.append(record(
            pooled[m]["step"], size_bytes=size, impl=m, mode=m, case=case, **what,
            ranks=ranks, mpi_us_median=med[m]["mpi"] * 1e6,
            compute_us_median=med[m]["compute"] * 1e6,
            hidden=hidden_share(med[m]["mpi"], alone_mpi),
            overlap_osu=osu_overlap(med[m]["step"], alone_compute, alone_mpi),
            valid=doc["valid"], oversubscribed=launch.oversubscribed, **where))
    settings = {**args, **doc["extra"], "ranks": ranks, "exchange_alone_us": alone_mpi * 1e6,
                "compute_alone_us": alone_compute * 1e6, **where}
    return run_meta(launch, settings, doc["library"]), records


def table(records: list[dict]) -> str:
    """Per mode: step, MPI and computing time (median µs per step and rank), the share of
    the exchange hidden, OSU's overlap.

    Parameters
    ----------
    records : list of dict
        What :func:`run` returned.

    Returns
    -------
    str
        The table, one line per mode under a header.
    """
    columns = [("mode", 15, ""), ("step (us)", 11, ".1f"), ("in MPI (us)", 12, ".1f"),
               ("computing (us)", 15, ".1f"), ("hidden", 7, ".0%"), ("OSU", 5, ".0%")]
    return "\n".join(text_table(columns, [
        (r["mode"], r["t_us_median"], r["mpi_us_median"], r["compute_us_median"], r["hidden"],
         r["overlap_osu"]) for r in records]))


if __name__ == "__main__":
    sys.exit(worker_main(_worker, "mpilab.halo.progress"))
