"""A link between emulated nodes, measured as lab 07 uses it: ping-pong and a ring.

One call measures what lab 07 models, on freshly made emulated nodes
(:mod:`mpilab.netlab`), through :mod:`mpilab.jobs` like every other measurement::

    from mpilab import network
    link = network.measure("fast-ethernet")      # needs root; else network.reference()
    link["pingpong"]          # one-way times across the link, 8 B ... 1 MiB
    link["ring"]["node"]      # the ring allgather, 4 ranks, cyclic placement

* **ping-pong** between one rank on each of two nodes (the course's C kernel, half a
  round trip): the records of :func:`mpilab.pingpong.measure_pingpong`;
* **the ring allgather** (the course's C ring, :mod:`mpilab.collectives`) on 4 ranks,
  2 per node, placed by block (``map_by="slot"``: ranks 0 1 | 2 3) and cyclically
  (``map_by="node"``: 0 2 | 1 3), each with ``node_of_rank``.

:func:`reference` reads the same measurement made on the reference machine, labelled as
reference data, for where emulated nodes cannot be made (no root: Binder, a student's
account). :func:`schedules` traces which messages the allgathers send, as a job on this
host: where ranks run does not change what they send.

``python -m mpilab.network --json OUT`` writes a measurement (how the reference file
was made).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from . import collectives, jobs, netlab, paths, pingpong, runtime, timing, tuning

__all__ = ["PINGPONG_SIZES", "RING_BLOCK", "PLACEMENTS", "REFERENCE", "measure", "reference",
           "schedules", "data_rate_MBps"]

PINGPONG_SIZES = (8, 64, 1024, 16384, 65536, 131072, 262144, 524288, 1 << 20)
RING_BLOCK = 256 * 1024  # bytes per rank: well past the token bucket and the eager limit
PLACEMENTS = {"slot": "block (0 1 | 2 3)", "node": "cyclic (0 2 | 1 3)"}
REFERENCE = Path("2core-epyc-openmpi414") / "net-lab07-fast-ethernet.json"  # in reference/
REFERENCE_MACHINE = "a 2-core AMD EPYC with Open MPI 4.1.4 (reference/2core-epyc-openmpi414)"
# TCP data per full Ethernet frame: 1448 B of data in 1514 B (IPv4, TCP with timestamps)
WIRE_DATA = 1448 / 1514
MODULE = "mpilab.network"  # python -m mpilab.network --worker: the measuring job


def data_rate_MBps(rate_bit_s: float) -> float:
    """The most TCP data a link of `rate_bit_s` carries, in MB/s (a model, not measured).

    Parameters
    ----------
    rate_bit_s : float
        The link's line rate, in bits per second.

    Returns
    -------
    float
        The TCP payload rate, in MB/s (10^6 bytes per second): the line rate in bytes
        times :data:`WIRE_DATA`, the share of a full Ethernet frame that is TCP data.
    """
    return rate_bit_s / 8 * WIRE_DATA / 1e6


def _worker(args_path: str, out_path: str) -> int:
    from mpi4py import MPI

    a = json.loads(Path(args_path).read_text())
    world = MPI.COMM_WORLD
    if a["what"] == "pingpong":
        out = pingpong.measure_pingpong(world, a["sizes"], impls=("kernel",), reps=a["reps"],
                                      min_time=a["min_time"])
    elif a["what"] == "trace-bcast":  # the binomial bcast from each root, 1-byte messages
        out = {str(root): collectives.trace(world, "bcast", "binomial", 1, root=root)
               for root in a["roots"]}
    else:
        out = {alg: collectives.trace(world, "allgather", alg, a["block"]) for alg in a["algs"]}
    if world.rank == 0:
        Path(out_path).write_text(json.dumps({"out": out, "library": runtime.library_info()}))
    return 0


def measure(link: str = "fast-ethernet", *, sizes=PINGPONG_SIZES, block: int = RING_BLOCK,
            reps: int = 5, min_time: float = 0.02, timeout: float = 300) -> dict:
    """Measure a link between two freshly made emulated nodes (needs root).

    The nodes (:func:`mpilab.netlab.fabric`) are removed before it returns, whether the
    measurement succeeded or not.

    Parameters
    ----------
    link : str, optional
        A link profile of :data:`mpilab.netlab.PROFILES` (default ``"fast-ethernet"``).
    sizes : iterable of int, optional
        The ping-pong's message sizes, in bytes (default :data:`PINGPONG_SIZES`).
    block : int, optional
        The ring allgather's block per rank, in bytes (default :data:`RING_BLOCK`).
    reps : int, optional
        Timed repetitions of each ping-pong size and of each ring (default 5).
    min_time : float, optional
        Seconds one repetition should last when its iterations are calibrated
        (default 0.02).
    timeout : float, optional
        Seconds each MPI job may run before it is killed (default 300).

    Returns
    -------
    dict
        ``source`` (a label: measured here), ``measured`` (True), ``started`` (local
        time with its UTC offset), ``link``, ``shaping`` (what was applied to the link and what
        could not be emulated), ``rate_bit_s``, ``burst_bytes`` (the token bucket's
        burst, or None), ``pingpong``: a list of records (``size_bytes``, ``t_us_min``,
        ``t_us_median``, ...) between one rank on each node, with the placement's
        fields; ``ring``: each placement of :data:`PLACEMENTS` (``"slot"``, ``"node"``)
        to the record of the course's ring allgather of `block` bytes per rank on 4
        ranks (``node_of_rank`` says where each rank ran); ``block_bytes`` and ``meta``
        (:func:`mpilab.timing.run_meta` of the ping-pong job, with the settings).

    Raises
    ------
    mpilab.netlab.NetlabUnavailable
        Emulated nodes cannot be made here (no root, no namespaces, turned off): use
        :func:`reference`.
    mpilab.jobs.JobTimeout, mpilab.jobs.JobFailed
        An MPI job ran past `timeout` or failed.
    """
    why = netlab.available()
    if why is not None:
        raise netlab.NetlabUnavailable(f"emulated nodes cannot be made here ({why}); "
                                       "use network.reference()")
    sizes = [int(n) for n in sizes]
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    with netlab.fabric(2, link) as fab:
        pair = fab.launch(2, map_by="node")
        doc = jobs.python_worker(pair, MODULE, {"what": "pingpong", "sizes": sizes,
                                                "reps": reps, "min_time": min_time}, timeout)
        where = fab.placement(2, 1, "node")
        pingpong = [{**r, **where} for r in doc["out"]]
        ring = {}
        for map_by in PLACEMENTS:
            launch = fab.launch(4, map_by=map_by)
            _, records = tuning.measure(4, [block], algs=["ring"], reps=reps, rounds=1,
                                        min_time=min_time, timeout=timeout, mode="jobs",
                                        launch=launch, where=launch.placement)
            ring[map_by] = next(r for r in records if r["source"] == "mpilab")
        shaping = fab.shaping
        meta = timing.run_meta(pair, {"link": link, "sizes": sizes, "block": block,
                                      "reps": reps, "min_time": min_time}, doc["library"])
    return {"source": "measured on this machine just now", "measured": True,
            "started": started, "link": link, "shaping": shaping,
            "rate_bit_s": shaping["rate_bit_s"], "burst_bytes": _burst(shaping),
            "pingpong": pingpong, "ring": ring, "block_bytes": block, "meta": meta}


def _burst(shaping: dict) -> int | None:
    import re

    for line in shaping.get("applied", []):
        m = re.search(r"burst (\d+) B", line)
        if m:
            return int(m.group(1))
    return None


def reference(path: str | Path = REFERENCE) -> dict:
    """The measurement of :func:`measure` made on the reference machine, labelled.

    Parameters
    ----------
    path : str or pathlib.Path, optional
        The measurement's JSON file (default :data:`REFERENCE`); a relative path is read
        from the course's ``reference/`` (:func:`mpilab.paths.reference_dir`).

    Returns
    -------
    dict
        The keys of :func:`measure` as the file has them, with ``measured`` False and
        ``source`` saying it is reference data and from which machine
        (:data:`REFERENCE_MACHINE`), not this one.

    Raises
    ------
    OSError
        The file cannot be read: ``FileNotFoundError`` where it is missing, or where a
        relative `path` is given and no ``reference/`` is found
        (:class:`mpilab.paths.CourseNotFound`).
    """
    path = Path(path)
    doc = json.loads((path if path.is_absolute() else paths.reference_dir() / path).read_text())
    return {**doc, "measured": False,
            "source": f"REFERENCE DATA measured on {REFERENCE_MACHINE}, not on this machine"}


def schedules(ranks: int, block: int, algs=None, *, timeout: float = 120) -> dict:
    """The traced messages of the course's allgathers on `ranks` ranks, in one MPI job.

    The job runs on this host: where the ranks run does not change what they send.

    Parameters
    ----------
    ranks : int
        Number of ranks.
    block : int
        The allgather's block per rank, in bytes.
    algs : sequence of str, optional
        Names of allgather algorithms to trace (keys of
        ``mpilab.collectives.ALGORITHMS["allgather"]``); None (default): every one
        admissible at `ranks`.
    timeout : float, optional
        Seconds the job may run before it is killed (default 120).

    Returns
    -------
    dict
        ``{alg: [{"step", "src", "dst", "bytes"}, ...]}`` for each of `algs`, from
        :func:`mpilab.collectives.trace`.

    Raises
    ------
    ValueError
        An algorithm of `algs` is unknown, or cannot run on `ranks` ranks.
    """
    ok = collectives.admissible("allgather", ranks)
    algs = list(ok if algs is None else algs)
    for alg in algs:
        if alg not in collectives.ALGORITHMS["allgather"]:
            raise ValueError(f"unknown allgather algorithm {alg!r}; choose from "
                             f"{tuple(collectives.ALGORITHMS['allgather'])}")
        if alg not in ok:
            raise ValueError(collectives.ALGORITHMS["allgather"][alg].admissible(ranks))
    launch = runtime.launch(ranks, "shm")
    return jobs.python_worker(launch, MODULE, {"what": "trace", "algs": algs,
                                               "block": int(block)}, timeout)["out"]


def bcast_schedules(ranks: int, roots=(0,), *, timeout: float = 120) -> dict:
    """The traced messages of the course's binomial bcast on `ranks` ranks, in one MPI job.

    Parameters
    ----------
    ranks : int
        Number of ranks.
    roots : sequence of int, optional
        The roots to trace a bcast from (default rank 0 only).
    timeout : float, optional
        Seconds the job may run before it is killed (default 120).

    Returns
    -------
    dict
        ``{root: [{"step", "src", "dst", "bytes"}, ...]}`` (1-byte messages), from
        :func:`mpilab.collectives.trace` in a job on this host.

    Raises
    ------
    ValueError
        A root of `roots` is not a rank of `ranks`.
    """
    roots = [int(r) for r in roots]
    bad = [r for r in roots if not 0 <= r < ranks]
    if bad:
        raise ValueError(f"roots {bad} are not ranks of {ranks}")
    launch = runtime.launch(ranks, "shm")
    out = jobs.python_worker(launch, MODULE, {"what": "trace-bcast", "roots": roots},
                             timeout)["out"]
    return {int(root): sched for root, sched in out.items()}


def main(argv: list[str] | None = None) -> int:
    """``python -m mpilab.network``: measure a link (:func:`measure`) and print it.

    Prints the ping-pong's one-way times and the ring allgather's time per placement;
    with ``--json OUT`` the measurement is written to OUT, without ``source`` and
    ``measured`` (how the reference file was made).

    Parameters
    ----------
    argv : list of str, optional
        ``[--link PROFILE] [--reps N] [--json OUT]`` (default ``sys.argv[1:]``).

    Returns
    -------
    int
        0 (a failed measurement raises, as :func:`measure` does).
    """
    p = argparse.ArgumentParser(prog="python -m mpilab.network", description=__doc__.split(
        "\n")[0])
    p.add_argument("--link", default="fast-ethernet", choices=sorted(netlab.PROFILES))
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--json", metavar="OUT", help="write the measurement here")
    a = p.parse_args(argv)
    doc = measure(a.link, reps=a.reps)
    for r in doc["pingpong"]:
        print(f"{r['size_bytes']:>9,} B  one way {r['t_us_min']:>10.1f} µs (min) "
              f"{r['t_us_median']:>10.1f} µs (median)")
    for map_by, r in doc["ring"].items():
        print(f"ring allgather, {PLACEMENTS[map_by]}, {doc['block_bytes']:,} B per rank: "
              f"{r['t_us_min'] / 1e3:.1f} ms (min) {r['t_us_median'] / 1e3:.1f} ms (median)")
    if a.json:
        doc = {k: v for k, v in doc.items() if k not in ("source", "measured")}
        Path(a.json).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"# wrote {a.json}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        sys.exit(_worker(sys.argv[2], sys.argv[3]))
    sys.exit(main())
