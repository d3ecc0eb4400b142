"""SimGrid's tools: finding ``smpicc`` and ``smpirun``, and the course's standalone
programs built with ``smpicc`` (cached by their sources' hash)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from .. import kernels as _kernels
from .. import validate

KERNELS = _kernels.source_dir()  # the checkout's kernels/, or the installed package's copy


#: The standalone programs and their sources under kernels/: the list setup.py builds
#: with mpicc (the same C files the Python kernels are built from).
PROGRAMS = _kernels.STANDALONE
#: -DMPILAB_SIM: the fixed compute model of kernels/common/mpilab_halo.h (HALO_CHARGE).
CFLAGS = ("-O3", "-std=gnu11", "-Wall", "-Wno-unused-function", "-ffp-contract=off",
          "-DMPILAB_SIM")


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
    """Whether simulations can run here; ``(True, "")`` or ``(False, why)``.

    Returns
    -------
    ok : bool
        True if ``smpicc`` and ``smpirun`` are on ``PATH``.
    why : str
        ``""``, or which tool is missing and how to install SimGrid.
    """
    tools, why = _tools()
    return bool(tools), why


def version() -> str:
    """SimGrid's version, e.g. ``"3.32"``.

    Returns
    -------
    str
        The version ``smpirun -version`` prints (its whole output where it names none).

    Raises
    ------
    SimUnavailable
        SimGrid's tools are not installed.
    """
    tools, why = _tools()
    if not tools:
        raise SimUnavailable(why)
    out = subprocess.run([tools["smpirun"], "-version"], capture_output=True, text=True,
                         timeout=30).stdout
    m = re.search(r"version\s+([\w.]+)", out)
    return m.group(1) if m else out.strip()


def _cache_dir() -> Path:
    base = os.environ.get("MPILAB_SIM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "mpilab", "sim")
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path


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
    """The program `name` of :data:`PROGRAMS` built with ``smpicc`` (cached by source hash).

    Parameters
    ----------
    name : str
        One of :data:`PROGRAMS`: ``"mpilab-pingpong"``, ``"mpilab-coll"`` or
        ``"mpilab-halo"``.

    Returns
    -------
    pathlib.Path
        The executable in the simulation cache (``$MPILAB_SIM_CACHE``, else
        ``~/.cache/mpilab/sim``), built now unless its sources are unchanged.

    Raises
    ------
    SimUnavailable
        SimGrid's tools are not installed.
    RuntimeError
        ``smpicc`` failed (its error output is in the message).
    """
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
