"""Which algorithm the library really ran, seen from its messages (Open MPI's pml
monitoring) and compared with the blocks each of our algorithms sends."""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .. import jobs, runtime
from ..collectives import LIBRARY, admissible, algorithm, kernel_module


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

    Parameters
    ----------
    ranks : int
        Processes of the MPI job.
    nbytes : int, optional
        Block size per rank, in bytes (default 64 KiB; at least 1).
    env : dict of str to str, optional
        Environment added to the job (:func:`library_env`, :func:`rules_env`).
    force : str, optional
        An allgather algorithm to force inside the job; None: none.
    calls : int, optional
        Allgather calls (default 2; raised so that they carry at least 64 KiB).
    transport : {"shm", "tcp"}, optional
        Transport between the ranks.
    timeout : float, optional
        Seconds the MPI job may take (default 120).

    Returns
    -------
    dict
        ``observed`` (``{"src->dst": blocks}``), ``matches`` (our algorithms with the
        same pattern; empty when the library did something else, e.g. its linear
        allgather, which gathers and broadcasts with its own tree algorithms), ``ranks``,
        ``nbytes``, ``env`` and ``force`` (as given).

    Raises
    ------
    ValueError
        The library is not Open MPI, or `nbytes` is not a positive integer.
    RuntimeError
        Open MPI's monitoring wrote no report for some rank (its component missing).
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
