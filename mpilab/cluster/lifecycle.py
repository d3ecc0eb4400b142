"""The cluster's lifecycle, timed: cold start, reconnect from a new process, restart, stop.

What a student waits for: starting the notebook's MPI engines (``cold-start``), a notebook
kernel restarted while the engines run on (``reconnect``: a new process connects to the
running cluster and gets an answer from every rank), the one-call recovery after a
deadlock (``restart``) and ``stop``. Each repetition is timed in full, from the call to
the first answer of every rank. ``python -m mpilab.bench cluster`` is its command line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from .. import runtime
from ..timing import record, run_meta
from .core import MPICluster

__all__ = ["PHASES", "run"]

PHASES = ("cold-start", "reconnect", "restart", "stop")

_PROBE = (
    "import sys, time\n"
    "t = time.perf_counter()\n"
    "from mpilab import cluster\n"
    "c = cluster.connect(sys.argv[1])\n"
    "assert c.run(lambda: 1, timeout=30) == [1] * c.ranks\n"
    "print(time.perf_counter() - t)\n"
)


def _answer(c: MPICluster) -> None:
    got = c.run(lambda: 1, timeout=30)
    if got != [1] * c.ranks:
        raise RuntimeError(f"the cluster answered {got}")


def run(ranks: int = 4, reps: int = 3, transport: str = "shm") -> tuple[dict, list[dict]]:
    """Time each phase `reps` times on `ranks` engines.

    Parameters
    ----------
    ranks : int, optional
        Engines (MPI ranks), 4 unless said.
    reps : int, optional
        Repetitions of the whole cycle (at least 1).
    transport : str, optional
        As for :class:`~mpilab.cluster.MPICluster`.

    Returns
    -------
    (dict, list of dict)
        The run's meta (:func:`mpilab.timing.run_meta`, with whether the engines were
        oversubscribed), and one record per phase: ``impl`` (the phase), ``ranks``,
        ``t_us_min``, ``t_us_median`` and ``t_s_median``.

    Raises
    ------
    ValueError
        When `reps` is below 1.
    RuntimeError
        When the cluster answers wrong, or a new process cannot reconnect to it.
    """
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    cid = f"mpilab-bench-{os.getpid()}"
    times: dict[str, list[float]] = {p: [] for p in PHASES}
    c = MPICluster(ranks, transport, cid)
    try:
        for _ in range(reps):
            t0 = time.perf_counter()
            c.start()
            _answer(c)
            times["cold-start"].append(time.perf_counter() - t0)
            c.keep_after_exit()  # the engines outlive the probe below
            res = subprocess.run([sys.executable, "-c", _PROBE, cid], capture_output=True,
                                 text=True, timeout=120)
            if res.returncode != 0:
                raise RuntimeError(f"reconnect failed:\n{res.stderr[-2000:]}")
            times["reconnect"].append(float(res.stdout.split()[-1]))
            t0 = time.perf_counter()
            c.restart()
            _answer(c)
            times["restart"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            c.stop()
            times["stop"].append(time.perf_counter() - t0)
    finally:
        c.stop()
    launch = runtime.launch(ranks, transport)
    records = [record(times[p], size_bytes=0, impl=p, ranks=ranks, transport=transport,
                      oversubscribed=launch.oversubscribed) for p in PHASES]
    for r in records:
        r["t_s_median"] = r["t_us_median"] / 1e6
    library = c.library or {}
    # "n": the settings' key since the reference runs (reference/*/cluster.json)
    return run_meta(launch, {"n": ranks, "reps": reps, "cluster_id": cid}, library), records
