"""Simulated clusters: the course's own C kernels at the papers' process counts (SimGrid SMPI).

The papers ran 32 to 2304 processes; a student's machine has a few cores. SimGrid's SMPI
runs an unmodified C MPI program on a *simulated* platform: every rank is a thread of one
process, every message is timed by a network model of the platform's links, and the
program reads the simulated clock through ``MPI_Wtime``. This module builds the course's
standalone kernels (``kernels/pingpong/pingpong_main.c``, ``kernels/collectives/coll_main.c``,
``kernels/stencil/halo_main.c``, linked with the same ``c_*.c`` files the Python kernels
use) with ``smpicc``, runs them with ``smpirun`` through :mod:`mpilab.jobs` (so a hung or
killed simulation leaves nothing behind), and returns records shaped like the real
benchmarks' plus ``simulated: True``, ``platform`` and ``label``.

Platforms are XML files in ``mpilab/platforms/`` (one per paper's machine, every number
with its source or marked as assumed), plus ``this-machine``, written by
:func:`calibrate` from a real ping-pong on this machine: compare the two side by side
(:func:`check_this_machine`) before believing any scale-out.

What a simulation is, and is not
--------------------------------
* Messages: a latency + bandwidth model per link, with contention where flows share a
  link (a node's network card, the backbone). Messages inside a node cross the node's
  loopback link, with no contention: memory-bandwidth contention between the cores of a
  node, caches and shared-window effects are **not** simulated.
* Computation: the collective and ping-pong runs switch it off (``compute=False``: only
  communication costs time; results are exactly reproducible). The halo runs measure each
  rank's computing for real on this machine, one rank at a time, and charge it to the
  simulated clock at this machine's speed: a simulated core is as fast as one of this
  machine's, with a cache of its own and no neighbour competing for memory.
* The library: SMPI's own implementation of MPI, with ports of Open MPI's and MPICH's
  collective algorithms and decision rules (``--cfg=smpi/coll-selector:ompi``), not the
  real libraries.

Every record and every figure carries ``label``: ``"simulated (SMPI, platform NAME)"``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import collectives as _collectives
from . import jobs, models, paths, runtime, timing, validate
from . import kernels as _kernels

__all__ = ["SimUnavailable", "Platform", "available", "platforms", "platform", "label",
           "build", "run", "meta", "pingpong", "collective", "allgather", "halo", "calibrate",
           "check_this_machine", "check_collective", "measure_collective", "PROGRAMS", "SMPI_ALLGATHER", "OUR_ALGORITHMS"]

KERNELS = _kernels.source_dir()  # the checkout's kernels/, or the installed package's copy
PLATFORM_DIR = Path(__file__).resolve().parent / "platforms"
#: The standalone programs and their sources under kernels/: the list setup.py builds
#: with mpicc (the same C files the Python kernels are built from).
PROGRAMS = _kernels.STANDALONE
CFLAGS = ("-O3", "-std=gnu11", "-Wall", "-Wno-unused-function")
#: Our C algorithms per operation, in the order of kernels/collectives/c_collectives.h
#: (algorithm i is code i + 1; 0 is the library's collective): the teaching API's list,
#: which keeps that order (tests/test_sim.py checks it against the compiled kernel's).
OUR_ALGORITHMS = {op: tuple(algs) for op, algs in _collectives.ALGORITHMS.items()}
#: SMPI's own allgather algorithms that correspond to Open MPI's, and our name for each:
#: run forced, they show which one SMPI's port of Open MPI's decision picked.
SMPI_ALLGATHER = {"bruck": "bruck", "rdb": "recursive_doubling", "ring": "ring",
                  "ompi_neighborexchange": "neighbor_exchange", "pair": "pairwise"}
#: Elements per call are bytes for these operations, float64 for the reductions.
_DTYPE = {"reduce": "float64", "allreduce": "float64"}
SPEED = "1Gf"  # every platform's core speed and smpi/host-speed: simulated = measured
#: What every simulated result leaves out, in one sentence (tables and figures say it).
LEAVES_OUT = ("memory-bandwidth and cache contention inside a node, the real libraries' "
              "code (SMPI's own MPI with ports of their algorithms), and the networks' "
              "topology beyond one switch")


class SimUnavailable(RuntimeError):
    """SimGrid's smpicc/smpirun are missing (or a platform has not been calibrated)."""


# --------------------------------------------------------------------------- tools


def _tools() -> tuple[dict, str]:
    found = {k: shutil.which(k) for k in ("smpicc", "smpirun")}
    missing = [k for k, v in found.items() if not v]
    if missing:
        return {}, (f"no {' and '.join(missing)} (SimGrid SMPI) found: install SimGrid "
                    "(Debian/Ubuntu: `apt install libsimgrid-dev`, or `make setup` as "
                    "root; elsewhere build SimGrid from source, simgrid.org); the "
                    "lectures then show the reference results in reference/simulated/")
    return found, ""


def available() -> tuple[bool, str]:
    """Whether simulations can run here; ``(True, "")`` or ``(False, why)``."""
    tools, why = _tools()
    return bool(tools), why


def version() -> str:
    """SimGrid's version, e.g. ``"3.32"``."""
    tools, why = _tools()
    if not tools:
        raise SimUnavailable(why)
    out = subprocess.run([tools["smpirun"], "-version"], capture_output=True, text=True,
                         timeout=30).stdout
    m = re.search(r"version\s+([\w.]+)", out)
    return m.group(1) if m else out.strip()


# --------------------------------------------------------------------------- platforms


@dataclass(frozen=True)
class Platform:
    """A simulated machine: ``nodes`` hosts of ``cores`` cores, from an XML file.

    ``params`` are the cluster's attributes as SimGrid reads them (``bw``, ``lat``,
    ``loopback_bw``, ``loopback_lat``, ...); ``info`` the ``mpilab:*`` properties of the
    file (``description``, ``machine``, ``source:<attribute>``, ``assumed``).
    """

    name: str
    path: Path
    nodes: int
    cores: int
    prefix: str
    params: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)

    @property
    def description(self) -> str:
        return self.info.get("description", self.name)

    def host(self, i: int) -> str:
        return f"{self.prefix}{i}"

    @property
    def label(self) -> str:
        return label(self.name)

    def sources(self) -> dict:
        """Where each number comes from: ``{attribute: source}``."""
        return {k.split(":", 1)[1]: v for k, v in self.info.items() if k.startswith("source:")}


def label(name: str) -> str:
    """The label every simulated record, table and figure carries."""
    return f"simulated (SMPI, platform {name})"


def _cache_dir() -> Path:
    base = os.environ.get("MPILAB_SIM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "mpilab", "sim")
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _this_machine_path() -> Path:
    return _cache_dir() / "this-machine.xml"


def platforms() -> list[str]:
    """Names of the platforms: the papers' machines and ``this-machine``."""
    return sorted(p.stem for p in PLATFORM_DIR.glob("*.xml")) + ["this-machine"]


def _parse(path: Path, name: str) -> Platform:
    root = ET.parse(path).getroot()
    cluster = root.find("cluster")
    if cluster is None:
        raise ValueError(f"{path}: a course platform is one <cluster>")
    lo, hi = (int(x) for x in cluster.get("radical", "0-0").split("-"))
    info = {p.get("id")[len("mpilab:"):]: p.get("value") for p in cluster.findall("prop")
            if p.get("id", "").startswith("mpilab:")}
    return Platform(name, path, hi - lo + 1, int(cluster.get("core", "1")),
                    cluster.get("prefix", ""), dict(cluster.attrib), info)


def platform(name: str | Platform) -> Platform:
    """The platform called `name` (see :func:`platforms`), or a clear error."""
    if isinstance(name, Platform):
        return name
    if name == "this-machine":
        path = _this_machine_path()
        if not path.exists():
            raise SimUnavailable("this-machine is not calibrated yet: run "
                                 "mpilab.sim.calibrate() (a real ping-pong on this machine)")
        return _parse(path, name)
    path = PLATFORM_DIR / f"{name}.xml"
    if not isinstance(name, str) or not path.exists():
        raise ValueError(f"platform must be one of {platforms()}, got {name!r}")
    return _parse(path, name)


def hostfile(plat: Platform, ranks: int, map_by: str = "slot",
             per_node: int | None = None) -> tuple[str, list[int]]:
    """SMPI hostfile text for `ranks` ranks, and the node of each rank.

    ``map_by="slot"`` fills node 0 first, then node 1 (block placement), with
    `per_node` ranks per node (default: the node's cores; the SHM paper ran 36 of 44);
    ``"node"`` deals ranks round the nodes (cyclic: the allgather paper's placement).
    More ranks than cores: the cores are dealt again (oversubscribed, as the paper's 128
    processes on 64 cores).
    """
    validate.names(map_by, ("slot", "node"), "map_by")
    if per_node is not None:
        per_node = validate.count(per_node, "per_node")
        if map_by != "slot":
            raise ValueError("per_node applies to map_by='slot' (block placement)")
        if math.ceil(ranks / per_node) > plat.nodes:
            raise ValueError(f"{ranks} ranks at {per_node} per node need "
                             f"{math.ceil(ranks / per_node)} nodes; {plat.name} has "
                             f"{plat.nodes}")
    slots = plat.nodes * plat.cores
    if map_by == "slot":
        per = per_node or (math.ceil(ranks / plat.nodes) if ranks > slots else plat.cores)
        nodes = [min(r // per, plat.nodes - 1) for r in range(ranks)]
    else:
        nodes = [r % plat.nodes for r in range(ranks)]
    return "".join(f"{plat.host(n)}:1\n" for n in nodes), nodes


# --------------------------------------------------------------------------- build


def _stamp(name: str, smpicc: str) -> str:
    h = hashlib.sha256()
    for src in PROGRAMS[name]:
        h.update((KERNELS / src).read_bytes())
    for header in sorted((KERNELS / "common").glob("*.h")) + sorted(KERNELS.glob("*/c_*.h")):
        h.update(header.read_bytes())
    h.update(" ".join(CFLAGS).encode())
    h.update(Path(smpicc).read_bytes())
    return h.hexdigest()[:16]


def build(name: str) -> Path:
    """The program `name` of :data:`PROGRAMS` built with ``smpicc`` (cached by source hash)."""
    validate.names(name, tuple(PROGRAMS), "program")
    tools, why = _tools()
    if not tools:
        raise SimUnavailable(why)
    out = _cache_dir() / f"{name}-{_stamp(name, tools['smpicc'])}"
    if out.exists():
        return out
    srcs = [KERNELS / s for s in PROGRAMS[name]]
    includes = sorted({f"-I{s.parent}" for s in srcs} | {f"-I{KERNELS / 'common'}"})
    with open(_cache_dir() / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.exists():
            return out
        tmp = out.with_suffix(".tmp")
        res = subprocess.run([tools["smpicc"], *CFLAGS, *includes, *map(str, srcs), "-o",
                              str(tmp), "-lm"], capture_output=True, text=True, timeout=300)
        if res.returncode != 0:
            raise RuntimeError(f"smpicc failed to build {name}:\n{res.stderr[-3000:]}")
        tmp.rename(out)
    return out


# --------------------------------------------------------------------------- running


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
    """What a simulated result's JSON says about how it was made (bench ``meta``)."""
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
               check: bool | None = None,
               timeout: float = 600, progress=None) -> list[dict]:
    """Simulated times of `op` with each algorithm in `algs` (ours, or ``"library"``).

    ``sizes`` are bytes per rank (per block for allgather, gather, scatter); reductions
    use float64. `iters` calls per repetition (default 10 below 64 KiB, 2 from it: the
    first call after the timing protocol's barrier also pays the barrier's skew between
    ranks, which small messages must amortise). ``library`` is SMPI's algorithm for the library's own call
    (``smpi/<op>``): ``"ompi"`` (SMPI's port of Open MPI's decision), ``"mpich"``, or a
    forced SMPI algorithm such as ``"ring"``. Each algorithm is one simulated job; every
    result is checked against the expected values (``check``; by default when the
    buffers are small enough to be real, below 1 MiB per rank in all).
    Records: impl ``mpilab:<alg>`` or ``library:<library>``, alg, size_bytes, t_us_*.
    """
    validate.names(op, tuple(OUR_ALGORITHMS), "op")
    sizes = [validate.count(n, "size", 0) for n in sizes]
    dtype = _DTYPE.get(op, "uint8")
    esz = 8 if dtype == "float64" else 1
    out = []
    for alg in algs:
        code = _alg_code(op, alg)
        cfg = {f"smpi/{op}": library} if alg == "library" else {}
        total = max(sizes) * ranks
        do_check = check if check is not None else total <= (1 << 20)
        if not do_check:  # large buffers: one shared copy for all simulated ranks
            cfg["smpi/auto-shared-malloc-thresh"] = str(1 << 16)
        _progress(progress, f"{label(globals()['platform'](platform).name)}: {op} "
                            f"{alg if alg != 'library' else 'library:' + library} on "
                            f"{ranks} ranks, {len(sizes)} sizes")
        objs, meta = run("mpilab-coll", [op, code, dtype, root, 1, reps, int(do_check),
                                         *(f"{max(n // esz, 0)}:{iters or (10 if n < 65536 else 2)}"
                                           for n in sizes)],
                         ranks=ranks, platform=platform, map_by=map_by, cfg=cfg,
                         timeout=timeout)
        impl = f"library:{library}" if alg == "library" else f"mpilab:{alg}"
        for o in objs:
            out.append(_record(o["times"], meta, size_bytes=o["size_bytes"], impl=impl,
                               alg=alg if alg != "library" else library, op=op,
                               iters=o["iters"], checked=o["checked"]))
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
    """Per size: best C algorithm, library time and (from `forced`) choice, ratio."""
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


#: The halo modes :func:`halo` simulates, and why the other two-sided ones are not.
SIMULATED_HALO_MODES = ("blocking", "sendrecv", "nonblocking", "overlap", "persistent")
NOT_SIMULATED_HALO_MODES = {
    "neighbor": "SimGrid's SMPI does not implement MPI_Neighbor_alltoallw (an "
                "'unimplemented' stub in smpi_mpi.cpp)",
    "overlap-test": "SMPI moves every message in simulated time whatever the ranks do (it "
                    "has no progress rule for MPI_Testall to help), and charges each "
                    "unsuccessful MPI_Test a sleep that grows with every call (smpi/test, "
                    "0.1 ms at first: smpi_request.cpp), so the mode would measure SMPI's "
                    "sleeps",
}


def halo(app: str, modes: Sequence[str], *, ranks: int, platform: str | Platform,
         sub: int | None = None, nx: int | None = None, ny: int | None = None,
         map_by: str = "slot", per_node: int | None = None, compute: bool = True,
         pack: str = "datatype", steps: int = 2, warmup: int = 1, iters: int = 3,
         reps: int = 3, timeout: float = 900, progress=None) -> list[dict]:
    """Simulated halo exchange steps (heat or wave), one job per mode; seconds per step.

    The grid is `nx` x `ny`, or `sub` x `sub` points per rank (the coarray paper's
    subdomains). Computation is measured on this machine and charged to the simulated
    clock (see the module's notes); ``compute=False`` leaves it out, so a step costs
    only its exchange (deterministic). `per_node` ranks per node (block placement). Records: impl = mode, app, dims, sub, t_us_* per
    step, ``sum`` (the field's sum after `steps` steps: the same as the serial code's).
    """
    from . import halo as _halo

    validate.names(app, ("heat", "wave"), "app")
    ranks = validate.count(ranks, "ranks")
    py, px = _halo.process_grid(ranks)
    if sub is not None:
        nx = ny = None
        nx, ny = validate.count(sub, "sub") * px, sub * py
    if nx is None or ny is None:
        raise ValueError("give sub (points per rank and axis) or nx and ny")
    out = []
    for mode in modes:
        if mode in NOT_SIMULATED_HALO_MODES:
            raise ValueError(f"mode {mode!r} is not simulated: {NOT_SIMULATED_HALO_MODES[mode]}")
        validate.names(mode, SIMULATED_HALO_MODES, "mode")
        _progress(progress, f"{label(globals()['platform'](platform).name)}: {app} {mode} "
                            f"on {ranks} ranks ({py}x{px}), {nx}x{ny}")
        objs, meta = run("mpilab-halo", [app, mode, pack, nx, ny, py, px, steps, warmup,
                                         iters, reps],
                         ranks=ranks, platform=platform, map_by=map_by,
                         per_node=per_node, compute=compute, timeout=timeout)
        o = objs[0]
        rec = _record(o["times"], meta, size_bytes=8 * (nx // px), impl=mode, app=app,
                      mode=mode, pack=pack, nx=nx, ny=ny, dims=[py, px], sub=sub,
                      iters=o["iters"], steps=o["steps"], sum=o["sum"])
        rec["compute"] = meta["compute"]
        out.append(rec)
    return out


# --------------------------------------------------------------------------- calibration

CALIBRATION_SIZES = (8, 64, 512, 4096, 16384, 65536, 262144, 1 << 20)


def _measure_pingpong(sizes, reps: int, timeout: float) -> list[dict]:
    """One-way times of the real standalone ping-pong (2 ranks, shared memory)."""
    from . import kernels

    prog = kernels.program("mpilab-pingpong")
    args = ["roundtrip", "5", str(reps)] + [f"{n}:{max(20, min(2000, (1 << 24) // max(n, 1)))}"
                                             for n in sizes]
    launch = runtime.launch(2)
    res = jobs.run(launch, [str(prog), *args], timeout=timeout)
    objs = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    recs = [timing.record(o["times"], size_bytes=o["size_bytes"], impl="kernel",
                          iters=o["iters"]) for o in objs]
    for r in recs:
        r.update(oversubscribed=launch.oversubscribed, ranks=2, measured=True)
    return recs


_THIS_MACHINE = """<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<!-- this-machine: written by mpilab.sim.calibrate() on {when} from a real ping-pong
     (2 ranks, shared memory, the course's C kernel) on {host} ({cpu}, {mpi}).
     Fit: {model}.
     Below {switch} B one line, from it another: SMPI's lat/bw factors carry the second.
     Computation runs at this machine's speed (smpi/host-speed = core speed = {speed}). -->
<platform version="4.1">
  <config>
    <prop id="smpi/lat-factor" value="{latf}"/>
    <prop id="smpi/bw-factor" value="{bwf}"/>
    <prop id="network/crosstraffic" value="0"/>
  </config>
  <cluster id="this-machine" prefix="core-host-" suffix="" radical="0-0" speed="{speed}"
           core="{cores}" bw="10GBps" lat="1us" loopback_bw="{bw:.6g}Bps"
           loopback_lat="{lat:.6g}s">
    <prop id="mpilab:description" value="this machine ({cores} cores), calibrated from its own ping-pong"/>
    <prop id="mpilab:source:loopback_lat" value="measured: the fitted ping-pong latency below {switch} B"/>
    <prop id="mpilab:source:loopback_bw" value="measured: the fitted ping-pong bandwidth below {switch} B"/>
  </cluster>
</platform>
"""


def calibrate(*, sizes: Sequence[int] = CALIBRATION_SIZES, reps: int = 5,
              timeout: float = 300, measured: list[dict] | None = None) -> dict:
    """Write the ``this-machine`` platform from a real ping-pong on this machine.

    Measures the course's standalone C ping-pong (2 ranks, shared memory) unless
    `measured` records are given, fits a piecewise Hockney model
    (:func:`mpilab.models.fit_piecewise`: eager and rendezvous lines), and writes a
    platform whose node loopback has the lower line's latency and bandwidth, with SMPI
    latency/bandwidth factors from the switch size on for the upper line.
    Returns ``{"path", "fit", "measured"}``.
    """
    recs = measured if measured is not None else _measure_pingpong(sizes, reps, timeout)
    pw = models.fit_piecewise([r["size_bytes"] for r in recs],
                              [r["t_us_median"] for r in recs])
    low = pw.segments[0]
    lat_s, bw = low.alpha_us * 1e-6, low.beta_MBps * 1e6
    latf, bwf = "0:1", "0:1"
    if pw.switch_bytes is not None:
        high = pw.segments[1]
        latf = f"0:1;{pw.switch_bytes}:{max(high.alpha_us, 1e-3) / low.alpha_us:.6g}"
        bwf = f"0:1;{pw.switch_bytes}:{high.beta_MBps / low.beta_MBps:.6g}"
    info = runtime.machine_info()
    lib = f"{runtime.selected_library()}, {runtime.mpiexec()}"  # no MPI_Init for a label
    path = _this_machine_path()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(_THIS_MACHINE.format(
        when=time.strftime("%Y-%m-%d %H:%M"), host=info["hostname"], cpu=info["cpu_model"],
        mpi=lib, model=pw.model,
        switch=pw.switch_bytes or "-", latf=latf, bwf=bwf, speed=SPEED,
        cores=max(1, runtime.usable_cores()), bw=bw, lat=lat_s))
    tmp.replace(path)
    return {"path": str(path), "fit": pw, "measured": recs}


def check_this_machine(sizes: Sequence[int] = (8, 1024, 65536, 1 << 20), *,
                       recalibrate: bool = False, measured: list[dict] | None = None) -> list[dict]:
    """Measured vs simulated ping-pong on this machine, side by side, with the error.

    Calibrates first when there is no ``this-machine`` platform (or `recalibrate`).
    Rows: size_bytes, measured_us, simulated_us, error (simulated / measured - 1).
    """
    cal = None
    if recalibrate or not _this_machine_path().exists():
        cal = calibrate(measured=measured)
    meas = measured or (cal["measured"] if cal else _measure_pingpong(sizes, 5, 300))
    by = {r["size_bytes"]: r["t_us_median"] for r in meas}
    missing = [n for n in sizes if n not in by]
    if missing:
        by.update({r["size_bytes"]: r["t_us_median"] for r in _measure_pingpong(missing, 5, 300)})
    sim = {r["size_bytes"]: r["t_us_median"] for r in pingpong(sizes, platform="this-machine")}
    return [{"size_bytes": n, "measured_us": by[n], "simulated_us": sim[n],
             "error": sim[n] / by[n] - 1.0, "label": label("this-machine")} for n in sizes]


def measure_collective(op: str, alg: str, sizes: Iterable[int], *, ranks: int,
                       reps: int = 5, timeout: float = 300) -> list[dict]:
    """The same standalone program measured for real on this machine (not simulated).

    `op` with algorithm `alg` (ours, or ``"library"``: the real library's own) on `ranks`
    real MPI processes of this machine, timed in C exactly as the simulated runs are:
    records as :func:`collective`'s, with ``simulated: False`` and ``oversubscribed``.
    """
    from . import kernels

    validate.names(op, tuple(OUR_ALGORITHMS), "op")
    code = _alg_code(op, alg)
    dtype = _DTYPE.get(op, "uint8")
    esz = 8 if dtype == "float64" else 1
    sizes = [validate.count(n, "size", 0) for n in sizes]
    launch = runtime.launch(validate.count(ranks, "ranks"))
    args = [op, code, dtype, 0, 5, reps, 1,
            *(f"{n // esz}:{max(10, min(1000, (1 << 22) // max(n * ranks, 1)))}"
              for n in sizes)]
    res = jobs.run(launch, [str(kernels.program("mpilab-coll")), *map(str, args)],
                   timeout=timeout)
    out = []
    for o in (json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")):
        rec = timing.record(o["times"], size_bytes=o["size_bytes"], iters=o["iters"],
                            impl="library" if alg == "library" else f"mpilab:{alg}")
        rec.update(op=op, alg=alg, ranks=ranks, simulated=False, measured=True,
                   oversubscribed=launch.oversubscribed, checked=o["checked"])
        out.append(rec)
    return out


def check_collective(op: str = "allgather", algs: Sequence[str] = ("ring", "bruck"),
                     sizes: Sequence[int] = (64, 65536), *, ranks: Sequence[int] = (2, 3, 4),
                     recalibrate: bool = False) -> list[dict]:
    """Measured vs simulated collectives on this machine at 2-4 ranks, with the error.

    The check to make before believing a scale-out: the same C program on the same
    sizes, measured here and simulated on the calibrated ``this-machine`` platform.
    Runs with more ranks than cores are flagged (``oversubscribed``): there the real
    ranks share cores, which the platform (one core per rank) does not model.
    Rows: op, alg, ranks, size_bytes, measured_us, simulated_us, error, oversubscribed.
    """
    if recalibrate or not _this_machine_path().exists():
        calibrate()
    rows = []
    for p in ranks:
        for alg in algs:
            if _collectives.ALGORITHMS[op][alg].admissible(p) is not None:
                continue
            meas = {r["size_bytes"]: r for r in measure_collective(op, alg, sizes, ranks=p)}
            simd = {r["size_bytes"]: r for r in collective(op, [alg], sizes, ranks=p,
                                                           platform="this-machine")}
            for n in sizes:
                m, s_ = meas[n]["t_us_median"], simd[n]["t_us_median"]
                rows.append({"op": op, "alg": alg, "ranks": p, "size_bytes": n,
                             "measured_us": m, "simulated_us": s_, "error": s_ / m - 1.0,
                             "oversubscribed": meas[n]["oversubscribed"],
                             "label": label("this-machine")})
    return rows


def reference_dir() -> Path:
    """Where the simulated reference results live (for machines without SimGrid)."""
    return paths.reference_dir() / "simulated"


def load_reference(name: str) -> dict:
    """A saved simulation (``reference/simulated/<name>.json``), labelled as such."""
    path = reference_dir() / f"{name}.json"
    data = json.loads(path.read_text())
    data.setdefault("label", "reference data: " + data.get("meta", {}).get("label", "simulated"))
    return data
