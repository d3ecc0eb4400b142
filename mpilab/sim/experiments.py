"""Running a program on a simulated platform, and the course's experiments on it:
ping-pong, the collectives (the allgather paper's table), the halo exchange; the saved
reference results for machines without SimGrid."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from .. import collectives as _collectives
from .. import jobs, paths, runtime, timing, validate
from . import machines
from .machines import SPEED, Platform, hostfile, label
from .smpi import SimUnavailable, _tools, build, version

#: The functions below read it as ``globals()["platform"]``: their parameter has its name.
platform = machines.platform
#: Our C algorithms per operation, in the order of kernels/collectives/c_collectives.h
#: (algorithm i is code i + 1; 0 is the library's collective): the teaching API's list,
#: which keeps that order (tests/test_sim.py checks it against the compiled kernel's).
OUR_ALGORITHMS = {op: tuple(algs) for op, algs in _collectives.ALGORITHMS.items()}
#: SMPI's own allgather algorithms that correspond to Open MPI's, and our name for each:
#: run forced, they show which one SMPI's port of Open MPI's decision picked.
SMPI_ALLGATHER = {"bruck": "bruck", "rdb": "recursive_doubling", "ring": "ring",
                  "ompi_neighborexchange": "neighbor_exchange", "pair": "pairwise"}
#: Elements per call are bytes for these operations, float64 for the reductions.
_DTYPE = {"reduce": "float64", "allreduce": "float64", "reduce_scatter_block": "float64"}
#: SMPI's selector of each operation, where it is not ``smpi/<op>``: its
#: MPI_Reduce_scatter_block calls its reduce_scatter with equal counts (smpi_pmpi_coll.cpp).
_SMPI_SELECTOR = {"reduce_scatter_block": "reduce_scatter"}


#: What every simulated result leaves out, in one sentence (tables and figures say it).
LEAVES_OUT = ("memory-bandwidth and cache contention inside a node, the real libraries' "
              "code (SMPI's own MPI with ports of their algorithms), and the networks' "
              "topology beyond one switch")


def _launch(plat: Platform, ranks: int, host_file: Path, cfg: dict) -> runtime.Launch:
    tools, why = _tools()
    if not tools:
        raise SimUnavailable(why)
    args = ["-platform", str(plat.path), "-hostfile", str(host_file),
            "--log=root.thresh:warning", "--log=smpi_config.thresh:error"]
    args += [f"--cfg={k}:{v}" for k, v in cfg.items()]
    return runtime.Launch(ranks, "simulated", tools["smpirun"], tuple(args), {}, False,
                          "smpi", {"platform": plat.name})


def run(program: str, args: Sequence, *, ranks: int, platform: str | Platform,
        map_by: str = "slot", per_node: int | None = None, compute: bool = False,
        cfg: dict | None = None, timeout: float = 600) -> tuple[list[dict], dict]:
    """Run a program of :data:`PROGRAMS` on `ranks` simulated ranks; its JSON lines.

    Returns ``(objects printed by rank 0, meta)``; meta says the platform, placement,
    SimGrid version, settings, and the wall time the simulation took on this machine.

    Parameters
    ----------
    program : str
        One of :data:`PROGRAMS` (``"mpilab-pingpong"``, ``"mpilab-coll"``,
        ``"mpilab-halo"``), built with ``smpicc`` on first use.
    args : sequence
        The program's command-line arguments (converted with ``str``).
    ranks : int
        Simulated MPI processes.
    platform : str or Platform
        The simulated machine (see :func:`platforms`).
    map_by : {"slot", "node"}, optional
        Block (default) or cyclic placement of ranks on nodes (see :func:`hostfile`).
    per_node : int, optional
        Ranks per node with ``map_by="slot"`` (default: the node's cores).
    compute : bool, optional
        Charge the ranks' computation, measured on this machine, to the simulated clock
        (default False: only communication takes simulated time).
    cfg : dict, optional
        Extra SimGrid settings, passed as ``--cfg=key:value`` (they override the
        course's).
    timeout : float, optional
        Seconds of real time the simulation may take (default 600).

    Returns
    -------
    objects : list of dict
        The JSON objects the program printed, one per line.
    meta : dict
        ``simulated``, ``platform``, ``label``, ``platform_description``, ``simgrid``,
        ``ranks``, ``map_by``, ``nodes_used``, ``ranks_per_node``, ``node_of_rank``,
        ``oversubscribed``, ``compute``, ``settings`` and ``wall_s`` (seconds of real
        time).

    Raises
    ------
    SimUnavailable
        SimGrid's tools are not installed (or ``this-machine`` is not calibrated).
    RuntimeError
        The simulated program failed or reported an error.
    mpilab.jobs.JobTimeout
        The simulation ran past `timeout`.
    """
    ranks = validate.count(ranks, "ranks")
    plat = globals()["platform"](platform)
    exe = build(program)
    text, nodes = hostfile(plat, ranks, map_by, per_node)
    settings = {"smpi/simulate-computation": "yes" if compute else "no",
                "smpi/host-speed": SPEED, "smpi/display-timing": "no",
                "smpi/privatization": "1"}
    settings.update(cfg or {})
    with tempfile.TemporaryDirectory(prefix="mpilab-sim-") as d:
        hf = Path(d) / "hostfile"
        hf.write_text(text)
        t0 = time.perf_counter()
        res = jobs.run(_launch(plat, ranks, hf, settings), [str(exe), *map(str, args)],
                       timeout=timeout, cwd=d, check=False)
        wall = time.perf_counter() - t0
    objs = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    errors = [o["error"] for o in objs if "error" in o]
    if errors or res.returncode != 0:
        raise RuntimeError(f"simulated {program} on {ranks} ranks ({plat.name}) failed "
                           f"(exit {res.returncode}): {'; '.join(errors)}\n"
                           f"{res.stderr[-2000:]}")
    per_node = [nodes.count(n) for n in range(plat.nodes)]
    meta = {"simulated": True, "platform": plat.name, "label": plat.label,
            "platform_description": plat.description, "simgrid": version(),
            "ranks": ranks, "map_by": map_by, "nodes_used": sum(1 for c in per_node if c),
            "ranks_per_node": per_node, "node_of_rank": nodes,
            "oversubscribed": any(c > plat.cores for c in per_node),
            "compute": "measured on this machine" if compute else "not simulated",
            "settings": settings, "wall_s": round(wall, 3)}
    return objs, meta


def meta(platform: str | Platform, **settings) -> dict:
    """What a simulated result's JSON says about how it was made (bench ``meta``).

    Parameters
    ----------
    platform : str or Platform
        The simulated machine.
    **settings
        The experiment's settings, recorded as they are (``op="allgather"``,
        ``ranks=128``, ...).

    Returns
    -------
    dict
        ``simulated``, ``label``, ``platform``, ``platform_description``,
        ``platform_file``, ``platform_params`` (the network's numbers),
        ``platform_sources``, ``simgrid`` (version), ``simulated_by`` (this machine's
        :func:`mpilab.runtime.machine_info`), ``settings`` and ``leaves_out``
        (:data:`LEAVES_OUT`).

    Raises
    ------
    SimUnavailable
        SimGrid's tools are not installed.
    """
    plat = globals()["platform"](platform)
    return {"simulated": True, "label": plat.label, "platform": plat.name,
            "platform_description": plat.description, "platform_file": plat.path.name,
            "platform_params": {k: v for k, v in plat.params.items()
                                if k in ("radical", "core", "bw", "lat", "bb_bw", "bb_lat",
                                         "loopback_bw", "loopback_lat")},
            "platform_sources": plat.sources(), "simgrid": version(),
            "simulated_by": runtime.machine_info(), "settings": settings,
            "leaves_out": LEAVES_OUT}


def _record(times_s, meta: dict, **fields) -> dict:
    rec = timing.record(times_s, **fields)
    rec.update(simulated=True, platform=meta["platform"], label=meta["label"],
               ranks=meta["ranks"], map_by=meta["map_by"],
               oversubscribed=meta["oversubscribed"])
    return rec


def _progress(progress, text: str) -> None:
    if progress is True:
        print(text, flush=True)
    elif callable(progress):
        progress(text)


# --------------------------------------------------------------------------- kernels


def pingpong(sizes: Iterable[int], *, platform: str | Platform = "this-machine",
             across: bool = False, reps: int = 5, iters: int = 100,
             timeout: float = 300) -> list[dict]:
    """Simulated ping-pong (the course's C loop), one-way time per size.

    Two ranks on one node (``across=False``: the node's loopback, i.e. its shared
    memory) or one on each of two nodes. `iters` round trips per repetition: the first
    after the timing protocol's barrier also pays the barrier's skew between the two
    ranks (about one latency), which many iterations amortise (cheap: nothing computes). Records as :func:`mpilab.timing.record` plus
    ``simulated``, ``platform``, ``label``, ``placement``.

    Parameters
    ----------
    sizes : iterable of int
        Message sizes in bytes (>= 0).
    platform : str or Platform, optional
        The simulated machine (default ``"this-machine"``: needs :func:`calibrate`).
    across : bool, optional
        Put the two ranks on two nodes (default False: both on one node).
    reps : int, optional
        Timed repetitions per size (default 5).
    iters : int, optional
        Round trips per repetition (default 100).
    timeout : float, optional
        Seconds of real time the simulation may take (default 300).

    Returns
    -------
    list of dict
        One record per size: one-way times in µs (``t_us_min``, ``t_us_median``, ...)
        and ``size_bytes``, ``impl="kernel"``, ``iters``, ``placement``, ``simulated``,
        ``platform``, ``label``, ``ranks``, ``map_by``, ``oversubscribed``.

    Raises
    ------
    ValueError
        `across` on a platform of one node, or a negative size.
    SimUnavailable
        SimGrid's tools are not installed, or the platform is not calibrated.
    """
    sizes = [validate.count(n, "size", 0) for n in sizes]
    plat = globals()["platform"](platform)
    if across and plat.nodes < 2:
        raise ValueError(f"platform {plat.name} has one node: nothing to cross")
    objs, meta = run("mpilab-pingpong", ["roundtrip", 1, reps,
                                         *(f"{n}:{iters}" for n in sizes)],
                     ranks=2, platform=plat, map_by="node" if across else "slot",
                     timeout=timeout)
    return [_record(o["times"], meta, size_bytes=o["size_bytes"], impl="kernel",
                    iters=o["iters"], placement="across nodes" if across else "one node")
            for o in objs]


def _alg_code(op: str, alg: str) -> int:
    if alg == "library":
        return 0
    validate.names(alg, OUR_ALGORITHMS[op], f"{op} algorithm")
    return OUR_ALGORITHMS[op].index(alg) + 1


def collective(op: str, algs: Sequence[str], sizes: Iterable[int], *, ranks: int,
               platform: str | Platform, map_by: str = "slot", library: str = "ompi",
               reps: int = 3, iters: int | None = None, root: int = 0,
               check: bool | None = None, separated: bool = False,
               timeout: float = 600, progress=None) -> list[dict]:
    """Simulated times of `op` with each algorithm in `algs` (ours, or ``"library"``).

    ``sizes`` are bytes per rank (per block for allgather, gather, scatter); reductions
    use float64. `iters` calls per repetition (default 10 below 64 KiB, 2 from it: the
    first call after the timing protocol's barrier also pays the barrier's skew between
    ranks, which small messages must amortise). With `separated` every call is preceded by
    an untimed barrier and timed alone, as the lectures time rooted collectives (back to
    back, the calls of a rooted collective overlap and the loop measures a throughput:
    lecture 05). ``library`` is SMPI's algorithm for the library's own call
    (``smpi/<op>``): ``"ompi"`` (SMPI's port of Open MPI's decision), ``"mpich"``, or a
    forced SMPI algorithm such as ``"ring"``. Each algorithm is one simulated job; every
    result is checked against the expected values (``check``; by default when the
    buffers are small enough to be real, below 1 MiB per rank in all).
    Records: impl ``mpilab:<alg>`` or ``library:<library>``, alg, size_bytes, t_us_*.

    Parameters
    ----------
    op : str
        A key of :data:`OUR_ALGORITHMS`: ``"bcast"``, ``"reduce"``, ``"allreduce"``,
        ``"barrier"``, ``"scatter"``, ``"gather"`` or ``"allgather"``.
    algs : sequence of str
        Our algorithms of `op` (``OUR_ALGORITHMS[op]``) and/or ``"library"``.
    sizes : iterable of int
        Bytes per rank (per block for allgather, gather, scatter), >= 0.
    ranks : int
        Simulated MPI processes.
    platform : str or Platform
        The simulated machine.
    map_by : {"slot", "node"}, optional
        Block (default) or cyclic placement.
    library : str, optional
        SMPI's algorithm for ``"library"`` (default ``"ompi"``).
    reps : int, optional
        Timed repetitions per size (default 3).
    iters : int, optional
        Calls per repetition (default 10 below 64 KiB, 2 from it).
    root : int, optional
        The root rank of rooted operations (default 0).
    check : bool, optional
        Check every result against the expected values (default: when all ranks'
        buffers total at most 1 MiB).
    separated : bool, optional
        Time each call alone after an untimed barrier (default False: `iters` calls back
        to back, timed as a whole).
    timeout : float, optional
        Seconds of real time each simulated job may take (default 600).
    progress : bool or callable, optional
        True prints a line before each job; a callable gets that line (default None:
        silent).

    Returns
    -------
    list of dict
        One record per algorithm and size: times per call in µs (``t_us_min``,
        ``t_us_median``, ...), ``size_bytes``, ``impl``, ``alg`` (`library` for the
        library's), ``op``, ``iters``, ``checked``, ``timing`` (``"separated"`` or
        ``"back-to-back"``) and the simulated run's ``simulated``,
        ``platform``, ``label``, ``ranks``, ``map_by``, ``oversubscribed``.

    Raises
    ------
    ValueError
        An unknown `op` or algorithm.
    RuntimeError
        A simulated job failed, e.g. with a wrong result or an algorithm that cannot run
        on `ranks` (:func:`mpilab.collectives.admissible`).
    """
    validate.names(op, tuple(OUR_ALGORITHMS), "op")
    sizes = [validate.count(n, "size", 0) for n in sizes]
    dtype = _DTYPE.get(op, "uint8")
    esz = 8 if dtype == "float64" else 1
    out = []
    for alg in algs:
        code = _alg_code(op, alg)
        cfg = {f"smpi/{_SMPI_SELECTOR.get(op, op)}": library} if alg == "library" else {}
        total = max(sizes) * ranks
        do_check = check if check is not None else total <= (1 << 20)
        if not do_check:  # large buffers: one shared copy for all simulated ranks
            cfg["smpi/auto-shared-malloc-thresh"] = str(1 << 16)
        _progress(progress, f"{label(globals()['platform'](platform).name)}: {op} "
                            f"{alg if alg != 'library' else 'library:' + library} on "
                            f"{ranks} ranks, {len(sizes)} sizes")
        objs, meta = run("mpilab-coll", [op, code, dtype, root, 1, reps, int(do_check),
                                         *(f"{max(n // esz, 0)}:{iters or (10 if n < 65536 else 2)}"
                                           + (":separated" if separated else "")
                                           for n in sizes)],
                         ranks=ranks, platform=platform, map_by=map_by, cfg=cfg,
                         timeout=timeout)
        impl = f"library:{library}" if alg == "library" else f"mpilab:{alg}"
        for o in objs:
            out.append(_record(o["times"], meta, size_bytes=o["size_bytes"], impl=impl,
                               alg=alg if alg != "library" else library, op=op,
                               iters=o["iters"], checked=o["checked"],
                               timing=o["timing"]))
    return out


def allgather(ranks: int, sizes: Iterable[int], *, platform: str | Platform,
              map_by: str = "node", algs: Sequence[str] | None = None,
              library: str = "ompi", identify: bool = True, reps: int = 3,
              timeout: float = 900, progress=None) -> tuple[list[dict], dict]:
    """The allgather paper's table, simulated: every admissible C algorithm and the library.

    Our C algorithms (those that admit `ranks`), the library's own allgather under
    SMPI's port of Open MPI's decision (``library:ompi``), and, with `identify`, SMPI's
    own versions of Open MPI's algorithms forced one by one (records ``library:<SMPI
    name>``, e.g. ``library:rdb``): the simulation is
    deterministic (computation off), so the forced run whose time equals the library's
    names the algorithm the decision picked, per size. Returns ``(records, summary)``:
    summary gives per size the best of our algorithms, the library's time and choice,
    and whether the library picked the best (:func:`allgather_summary`).

    Parameters
    ----------
    ranks : int
        Simulated MPI processes (at least 2).
    sizes : iterable of int
        Bytes per block (per rank), at least 1.
    platform : str or Platform
        The simulated machine.
    map_by : {"node", "slot"}, optional
        Cyclic (default: the paper's placement) or block placement.
    algs : sequence of str, optional
        Our algorithms to run (default: every one that admits `ranks`).
    library : str, optional
        SMPI's algorithm for the library's call (default ``"ompi"``).
    identify : bool, optional
        Also run SMPI's versions of Open MPI's algorithms, forced, to name the
        library's choice (default True).
    reps : int, optional
        Timed repetitions per size (default 3; 1 for the forced runs).
    timeout : float, optional
        Seconds of real time each simulated job may take (default 900).
    progress : bool or callable, optional
        As :func:`collective`.

    Returns
    -------
    records : list of dict
        :func:`collective`'s records of every run.
    summary : dict
        :func:`allgather_summary` of them, by size in bytes.
    """
    ranks = validate.count(ranks, "ranks", 2)
    sizes = [validate.count(n, "size", 1) for n in sizes]
    if algs is None:
        algs = [a for a in OUR_ALGORITHMS["allgather"]
                if _collectives.ALGORITHMS["allgather"][a].admissible(ranks) is None]
    recs = collective("allgather", [*algs, "library"], sizes, ranks=ranks, platform=platform,
                      map_by=map_by, library=library, reps=reps, timeout=timeout,
                      progress=progress)
    forced = {}
    if identify:
        for smpi_name, ours in SMPI_ALLGATHER.items():
            if smpi_name == "pair" and ranks & (ranks - 1):
                continue  # SMPI's pairwise exchange needs a power of two
            try:
                rs = collective("allgather", ["library"], sizes, ranks=ranks,
                                platform=platform, map_by=map_by, library=smpi_name, reps=1,
                                timeout=timeout, progress=progress)
            except RuntimeError:  # an algorithm SMPI refuses on this many ranks
                continue
            forced[ours] = {r["size_bytes"]: r["t_us_median"] for r in rs}
            recs += rs
    return recs, allgather_summary(recs, forced, library)


def allgather_summary(recs: list[dict], forced: dict | None = None,
                      library: str = "ompi") -> dict:
    """Per size: best C algorithm, library time and (from `forced`) choice, ratio.

    Parameters
    ----------
    recs : list of dict
        Allgather records of :func:`collective`, at least one ``mpilab:<alg>`` per size.
    forced : dict, optional
        ``{algorithm: {size_bytes: t_us}}``, SMPI's algorithms run forced; the one whose
        time equals the library's (to a millionth) is its choice.
    library : str, optional
        Which ``library:<library>`` records are the library's (default ``"ompi"``).

    Returns
    -------
    dict
        By size in bytes: ``best`` and ``best_us`` (our fastest algorithm, its median
        µs), ``library_us`` (None without a library record); with `forced`,
        ``library_choice`` (an algorithm, several joined by ``/``, or
        ``"unidentified"``); with a library time, ``library_over_best`` (its ratio to
        the best) and ``library_picked_best``.
    """
    lib = f"library:{library}"
    out = {}
    for n in sorted({r["size_bytes"] for r in recs}):
        row = {r["impl"]: r["t_us_median"] for r in recs if r["size_bytes"] == n}
        ours = {k.split(":", 1)[1]: v for k, v in row.items() if k.startswith("mpilab:")}
        best = min(ours, key=ours.get)
        entry = {"best": best, "best_us": ours[best], "library_us": row.get(lib)}
        if forced:
            t = row.get(lib)
            match = [a for a, ts in forced.items()
                     if t is not None and n in ts and abs(ts[n] - t) <= 1e-6 * max(t, 1e-9)]
            entry["library_choice"] = match[0] if len(match) == 1 else (
                "/".join(match) if match else "unidentified")
        if entry["library_us"]:
            entry["library_over_best"] = entry["library_us"] / entry["best_us"]
            entry["library_picked_best"] = entry["library_over_best"] <= 1.0 + 1e-9 or (
                entry.get("library_choice") == best)
        out[n] = entry
    return out


def reference_dir() -> Path:
    """Where the simulated reference results live (for machines without SimGrid).

    Returns
    -------
    pathlib.Path
        ``reference/simulated/`` in the course's folder (:func:`mpilab.paths.course_root`).
    """
    return paths.reference_dir() / "simulated"


def load_reference(name: str) -> dict:
    """A saved simulation (``reference/simulated/<name>.json``), labelled as such.

    Parameters
    ----------
    name : str
        The file's name without ``.json`` (``"allgather-paper-128"``).

    Returns
    -------
    dict
        The saved run (``"meta"``, ``"records"``, ...) with ``"label"``:
        ``"reference data: "`` and the simulation's label, unless it had one.

    Raises
    ------
    FileNotFoundError
        No such reference.
    """
    path = reference_dir() / f"{name}.json"
    data = json.loads(path.read_text())
    data.setdefault("label", "reference data: " + data.get("meta", {}).get("label", "simulated"))
    return data
