"""What this machine offers the course, and what each lecture will do with it.

    python -m mpilab.doctor            # a report to read
    python -m mpilab.doctor --json     # the same facts as one JSON object

The facts: the MPI library mpi4py loads and its version, the launcher and compiler the
course uses, the cores this process may keep busy (CPU affinity, cgroup quota,
``$CPU_LIMIT``) and its memory (physical, cgroup, ``$MEM_LIMIT``), the size of /dev/shm,
the compiled kernels, Coarray Fortran (gfortran + OpenCoarrays), network namespaces for
emulated nodes, SimGrid, Slurm, the grader's sandbox (bubblewrap) and a browser. Each
lecture's line then says whether it runs live here, with small or full sweeps, or shows
labelled reference data, and why.

Every probe that starts a program has a timeout, and a missing or broken part is
reported, never raised: the doctor is what to run when something does not work.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable

from . import runtime

__all__ = ["facts", "lectures", "report", "main"]

#: Seconds allowed to each program a probe starts.
TIMEOUT = 20.0
#: Below this /dev/shm, shared-memory windows are kept small (Docker's default is 64 MiB).
SMALL_SHM = 256 << 20


def _probe(fn: Callable, *args, **kwargs):
    """``(value, "")``, or ``(None, why)`` when `fn` raised."""
    try:
        return fn(*args, **kwargs), ""
    except Exception as exc:  # the doctor reports a broken part, whatever broke
        return None, f"{type(exc).__name__}: {exc}".strip()


def _run(argv: list[str], timeout: float = TIMEOUT) -> tuple[int | None, str]:
    """Exit status and output of `argv`; ``(None, why)`` if it could not run in time."""
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                             stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, f"`{' '.join(argv)}` gave no answer within {timeout:g} s"
    except OSError as exc:
        return None, f"`{argv[0]}` could not run: {exc}"
    return res.returncode, (res.stdout + res.stderr).strip()


# What mpi4py reports, asked in a child process: loading the MPI library can fail or hang
# on a broken installation, and the doctor's own process should not start MPI. The
# library's version and the standard's may be asked before MPI_Init, so MPI is not
# started at all.
_LIBRARY_PROBE = """
import json, mpi4py
mpi4py.rc.initialize = False
mpi4py.rc.finalize = False
from mpilab import runtime
print(json.dumps(runtime.library_info()))
"""


def _mpi(timeout: float) -> dict:
    out: dict = {"mpi": None, "mpi_version": None, "mpi_library_version": None,
                 "mpi4py_version": None, "mpi_selected": None, "launcher": None,
                 "launcher_family": None, "compiler": None, "mpi_problem": ""}
    lib, why = _probe(runtime.selected_library)
    out["mpi_selected"] = lib
    problems = [why] if why else []
    spec = importlib.util.find_spec("mpi4py")
    if spec is None:
        problems.append("mpi4py is not installed")
    else:
        code, text = _run([sys.executable, "-c", _LIBRARY_PROBE], timeout)
        if code == 0:
            try:
                info = json.loads(text.splitlines()[-1])
            except (ValueError, IndexError):
                info = None
            if info:
                out.update(mpi=info["mpi_library"], mpi_version=info["mpi_version"],
                           mpi_library_version=info["mpi_library_version"],
                           mpi4py_version=info["mpi4py_version"])
            else:
                problems.append(f"mpi4py printed no library: {text[-300:]}")
        else:
            problems.append("mpi4py could not load an MPI library: "
                            + (text.splitlines()[-1] if text else "no output"))
    if lib and out["mpi"] and not lib.startswith(out["mpi"]):
        problems.append(f"MPILAB_MPI={lib} but mpi4py loads {out['mpi']}: reinstall mpi4py "
                        "for the selected MPI (`make setup`)")
    if lib:
        launcher, why = _probe(runtime.mpiexec)
        out["launcher"] = launcher
        if launcher:
            code, text = _run([launcher, "--version"], timeout)
            low = text.lower() if code == 0 else ""
            out["launcher_family"] = (
                "openmpi" if any(k in low for k in ("open mpi", "open-mpi", "openrte", "prte"))
                else "mpich" if ("hydra" in low or "mpich" in low)
                else "unknown")
            if out["mpi"] and out["launcher_family"] not in ("unknown", out["mpi"]):
                problems.append(f"the launcher {launcher} is {out['launcher_family']}'s but "
                                f"mpi4py loads {out['mpi']}: select one MPI (MPILAB_MPI)")
        else:
            problems.append(why)
        compiler, why = _probe(runtime.mpicc)
        out["compiler"] = compiler
        if why:
            problems.append(why)
    out["mpi_problem"] = "; ".join(p for p in problems if p)
    return out


def _kernels() -> dict:
    from . import kernels

    built = [n for n in kernels.NAMES
             if importlib.util.find_spec(f"mpilab.kernels.{n}") is not None]
    programs = [p for p in kernels.STANDALONE if (kernels.BIN / p).exists()]
    src, why = _probe(kernels.source_dir)
    return {"built": built, "missing": [n for n in kernels.NAMES if n not in built],
            "programs": programs, "sources": str(src) if src else None,
            "sources_problem": why}


def _coarrays() -> tuple[bool, str]:
    from . import coarrays

    return coarrays.available()


def _netns() -> str | None:
    from . import netlab

    return netlab.available()


def _simgrid() -> dict:
    from . import sim

    ok, why = sim.available()
    version = _probe(sim.version)[0] if ok else None
    return {"available": ok, "why_not": why, "version": version}


def _slurm(timeout: float) -> dict:
    tools = {k: shutil.which(k) for k in ("sbatch", "sinfo", "scontrol")}
    out = {"sbatch": tools["sbatch"], "sinfo": tools["sinfo"], "controller": False,
           "partitions": [], "why_not": ""}
    if not tools["sbatch"] or not tools["sinfo"]:
        out["why_not"] = "no sbatch/sinfo on PATH (Slurm is not installed)"
        return out
    code, text = _run([tools["sinfo"], "--noheader", "--format=%P %a %D %t"], timeout)
    if code == 0:
        out["controller"] = True
        out["partitions"] = [line.split()[0] for line in text.splitlines() if line.split()]
    else:
        out["why_not"] = ("no Slurm controller answers: "
                          + (text.splitlines()[-1] if text else "no output"))
    return out


def _sandbox() -> str | None:
    from .autograder import sandbox

    return sandbox.available()


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def facts(timeout: float = TIMEOUT) -> dict:
    """What this machine offers, as one dict (the ``--json`` object).

    Never raises: a probe that fails is reported under ``problems`` (or its ``*_why_not``)
    instead. MPI is not started in this process; the library is asked in a child process.

    Parameters
    ----------
    timeout : float, optional
        Seconds allowed to each program a probe starts (default :data:`TIMEOUT`, 20).

    Returns
    -------
    dict
        Keys include ``python``, ``executable``, ``root``, ``mpilab`` (the package's
        folder), ``cores``, ``affinity_cores``, ``cpu_quota``, ``cpu_quota_from``,
        ``memory_bytes``, ``memory_from``, ``physical_memory_bytes``, ``shm_bytes``,
        ``shm_free_bytes`` (:func:`mpilab.runtime.resources`), ``small`` (why the lectures
        take small sweeps, or ""), ``mpi`` (the library mpi4py loads: ``openmpi``,
        ``mpich``, or None), ``mpi_version``, ``mpi_library_version``, ``mpi4py_version``,
        ``mpi_selected``, ``launcher``, ``launcher_family``, ``compiler``, ``kernels`` (a
        dict: ``built``, ``missing``, ``programs``, ``sources``, ``sources_problem``),
        ``coarrays`` (bool) with ``coarrays_why_not``, ``netns`` (bool) with
        ``netns_why_not``, ``simgrid`` (a dict: ``available``, ``why_not``, ``version``),
        ``slurm`` (a dict: ``controller``, ``partitions``, ``why_not``, ...), ``sandbox``
        (bool) with ``sandbox_why_not``, ``browser`` (a path or None), ``binder`` (bool),
        ``problems`` (the probes that failed: name -> why) and ``seconds`` (how long the
        probes took).
    """
    t0 = time.perf_counter()
    problems: dict[str, str] = {}
    out: dict = {"python": sys.version.split()[0], "executable": sys.executable,
                 "root": runtime.is_root()}
    import mpilab

    out["mpilab"] = os.path.dirname(os.path.abspath(mpilab.__file__))
    res, why = _probe(runtime.resources)
    if why:
        problems["resources"] = why
        res = {"cores": os.cpu_count() or 1}
    out.update(res)
    out["small"], why = _probe(runtime.small_machine)
    if why:
        problems["small"] = why
    mpi, why = _probe(_mpi, timeout)
    mpi = mpi or {"mpi": None, "mpi_version": None, "mpi_problem": why}
    if mpi.get("mpi_problem"):
        problems["mpi"] = mpi["mpi_problem"]
    mpi.pop("mpi_problem", None)
    out.update(mpi)
    out["kernels"], why = _probe(_kernels)
    if why:
        problems["kernels"] = why
    ok, why = _probe(_coarrays)
    out["coarrays"] = bool(ok and ok[0])
    out["coarrays_why_not"] = "" if out["coarrays"] else (ok[1] if ok else why)
    nn, why = _probe(_netns)
    out["netns"] = not why and nn is None
    out["netns_why_not"] = why or nn or ""
    out["simgrid"], why = _probe(_simgrid)
    if why:
        out["simgrid"] = {"available": False, "why_not": why, "version": None}
    out["slurm"], why = _probe(_slurm, timeout)
    if why:
        out["slurm"] = {"controller": False, "why_not": why}
    sb, why = _probe(_sandbox)
    out["sandbox"] = not why and sb is None
    out["sandbox_why_not"] = why or sb or ""
    out["browser"] = _browser()
    out["binder"] = bool(os.environ.get("MPILAB_BINDER") or os.environ.get("BINDER_LAUNCH_HOST"))
    out["problems"] = problems
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out


def _mib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**20:,.0f} MiB" if n < 2**30 else f"{n / 2**30:.1f} GiB"


#: The lectures, by number (lectures/NN-*.md).
TITLES = {
    "00": "MPI in a notebook", "01": "ping-pong", "02": "halo exchange",
    "03": "one-sided", "04": "coarrays vs MPI", "05": "collectives I (trees)",
    "06": "collectives II (allgather)", "07": "crossing the network",
}


def oversubscription(f: dict) -> str:
    """Which of the lectures' usual rank counts (2 and 4) oversubscribe the cores of `f`.

    Parameters
    ----------
    f : dict
        The facts (:func:`facts`); only ``cores`` is read (1 when missing).

    Returns
    -------
    str
        A phrase for the report: that 2- and 4-rank runs have a core each, or which of
        them are oversubscribed on how many cores.
    """
    cores = f.get("cores") or 1
    over = [r for r in (2, 4) if r > cores]
    if not over:
        return "2- and 4-rank runs have a core each"
    return (f"{'2- and 4' if len(over) == 2 else over[0]}-rank runs are oversubscribed on {cores} "
            f"core{'s' if cores != 1 else ''}: their records say so")


def lectures(f: dict) -> dict[str, str]:
    """What each lecture will do on the machine `f`: number -> one line.

    Parameters
    ----------
    f : dict
        The facts (:func:`facts`).

    Returns
    -------
    dict of str to str
        For each lecture of :data:`TITLES` (``"00"`` to ``"07"``), whether it runs live
        here, with small or full sweeps, or shows labelled reference data, and why;
        every lecture "cannot run" when no MPI library or launcher was found.
    """
    if not f.get("mpi") or not f.get("launcher"):
        why = f.get("problems", {}).get("mpi") or "no MPI library"
        return {n: f"cannot run: {why} (`make setup`, or conda: environment.yml)"
                for n in TITLES}
    cores = f.get("cores") or 1
    small = f.get("small") or ""
    live = "runs live, " + (f"small sweeps: {small}" if small else "full sweeps")
    missing = (f.get("kernels") or {}).get("missing") or []
    if missing:
        live = (f"cannot run its kernels ({', '.join(missing)} not built: `make kernels`, "
                "or reinstall mpilab)")
    sim = f.get("simgrid") or {}
    simulated = (f"paper-scale section simulated here (SimGrid {sim.get('version')})"
                 if sim.get("available")
                 else "paper-scale section shows reference data: no SimGrid")
    shm = f.get("shm_bytes")
    shm_note = (f"; /dev/shm is {_mib(shm)}: subdomains whose windows would not fit are left "
                "out" if shm is not None and shm < SMALL_SHM else "")
    caf = ("coarray runs live (gfortran + OpenCoarrays)" if f.get("coarrays")
           else f"coarray runs show reference data: no OpenCoarrays ({f.get('coarrays_why_not')})")
    net = ("runs live on emulated nodes (network namespaces, shaped links)" if f.get("netns")
           else f"shows reference data, no emulated nodes: {f.get('netns_why_not')}")
    bind = ("binding measured" if f.get("mpi") == "openmpi" and cores >= 2
            else "binding section skipped (needs Open MPI and 2 cores)")
    return {
        "00": f"runs live: engines as MPI ranks on {cores} core{'s' if cores != 1 else ''}",
        "01": live,
        "02": f"{live}; {simulated}",
        "03": f"{live}{shm_note}; the paper's table is simulated reference data",
        "04": f"{caf}; the Python coarray view {live}",
        "05": f"{live}; {simulated}",
        "06": f"{live}; {simulated}",
        "07": f"{net}; {bind}" if not missing else live,
    }


def report(f: dict) -> str:
    """The facts and each lecture's line, as text for a person.

    Parameters
    ----------
    f : dict
        What :func:`facts` found on this machine.

    Returns
    -------
    str
        The report, lines joined by newlines (no newline at the end): the facts, what
        each lecture does here (:func:`lectures`), and the problems found, if any.
    """
    def yes(ok, why):
        return "yes" if ok else f"no: {why}"

    quota = f.get("cpu_quota")
    lines = [
        "mpilab doctor: what this machine offers the course",
        "",
        f"  mpilab        {f.get('mpilab')} (Python {f.get('python')}, {f.get('executable')})",
        "  MPI           " + (f"{f['mpi']} {f.get('mpi_version') or ''}, mpi4py "
                               f"{f.get('mpi4py_version')} ({f.get('mpi_library_version')})"
                               if f.get("mpi") else
                               f"none usable: {f.get('problems', {}).get('mpi', '?')}"),
        f"  selected      MPILAB_MPI={f.get('mpi_selected')}; launcher {f.get('launcher')}"
        f" ({f.get('launcher_family')}); compiler {f.get('compiler')}",
        f"  cores         {f.get('cores')} usable (affinity {f.get('affinity_cores')}, quota "
        + (f"{quota:g} CPUs from {f.get('cpu_quota_from')})" if quota else "none)"),
        f"  memory        {_mib(f.get('memory_bytes'))} (from {f.get('memory_from')}; "
        f"physical {_mib(f.get('physical_memory_bytes'))})",
        f"  /dev/shm      {_mib(f.get('shm_bytes'))} ({_mib(f.get('shm_free_bytes'))} free)",
        "  sweeps        " + (f"small: {f['small']}" if f.get("small") else "full"),
    ]
    k = f.get("kernels") or {}
    lines.append("  kernels       " + (
        f"{len(k.get('built', []))} built, standalone {', '.join(k.get('programs', []))}"
        + (f"; missing {', '.join(k['missing'])}" if k.get("missing") else "")
        + f"; sources {k.get('sources')}" if k else "not found"))
    sim = f.get("simgrid") or {}
    slurm = f.get("slurm") or {}
    lines += [
        f"  coarrays      {yes(f.get('coarrays'), f.get('coarrays_why_not'))}",
        f"  netns         {yes(f.get('netns'), f.get('netns_why_not'))}",
        "  SimGrid       " + (f"yes, {sim.get('version')}" if sim.get("available")
                               else f"no: {sim.get('why_not')}"),
        "  Slurm         " + (f"a controller answers (partitions: "
                               f"{', '.join(slurm.get('partitions') or []) or 'none'}); "
                               "cluster.start(ranks, launcher='slurm') can use it"
                               if slurm.get("controller") else f"no: {slurm.get('why_not')}"),
        f"  sandbox       {yes(f.get('sandbox'), f.get('sandbox_why_not'))} (the autograder)",
        f"  browser       {f.get('browser') or 'none found (the JupyterLab test is skipped)'}",
    ]
    if f.get("binder"):
        lines.append("  Binder        yes")
    lines += ["", f"What each lecture does here ({oversubscription(f)}):"]
    for n, what in lectures(f).items():
        lines.append(f"  lecture {n} ({TITLES[n]}): {what}")
    if f.get("problems"):
        lines += ["", "Problems found:"]
        lines += [f"  {k}: {v}" for k, v in f["problems"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m mpilab.doctor``: print the report, or with ``--json`` the facts.

    The JSON object is :func:`facts` with ``lectures`` (:func:`lectures`) added.

    Parameters
    ----------
    argv : list of str, optional
        ``[--json] [--timeout SECONDS]`` (default ``sys.argv[1:]``).

    Returns
    -------
    int
        0: a missing or broken part is reported, not an error.
    """
    p = argparse.ArgumentParser(prog="python -m mpilab.doctor",
                                description="What this machine offers the course.")
    p.add_argument("--json", action="store_true", help="print the facts as one JSON object")
    p.add_argument("--timeout", type=float, default=TIMEOUT,
                   help=f"seconds allowed to each program a probe starts ({TIMEOUT:g})")
    a = p.parse_args(argv)
    f = facts(a.timeout)
    if a.json:
        print(json.dumps({**f, "lectures": lectures(f)}, indent=1, default=str))
    else:
        print(report(f))
    return 0


if __name__ == "__main__":
    sys.exit(main())
