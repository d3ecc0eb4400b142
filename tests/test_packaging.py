"""A non-editable install works away from the checkout.

The tree as git knows it (tracked files and new ones not ignored: no build outputs) is
copied to a temporary folder and installed with ``pip install`` (not ``-e``) into a
fresh virtual environment that sees none of this machine's Python packages, at the
versions of constraints.txt. Then, from a folder outside both trees, the installed
package runs its kernels: a 2-rank job on the compiled Cython kernel, the ping-pong
benchmark's command line, and the programs mpilab builds from its packaged sources at
run time (the coarray programs, the SimGrid programs) where their compilers are here.
The environment is removed afterwards.

It needs the package index (or pip's cache, which makes a second run fast) and runs
on the default MPI only: other MPIs get their mpi4py built for them by scripts/setup.sh.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from mpilab import coarrays, jobs, runtime, sim

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "constraints.txt"
BUILD_REQUIREMENTS = ["pip", "setuptools", "wheel", "cython", "mpi4py", "numpy"]

# run on every rank of a 2-rank job: the kernel is the installed one, and it works
RANK_SCRIPT = """
import json, sys
import numpy as np
from mpi4py import MPI
import mpilab, mpilab.kernels
from mpilab.kernels import pingpong
comm = MPI.COMM_WORLD
sbuf, rbuf = np.ones(1024, dtype=np.uint8), np.zeros(1024, dtype=np.uint8)
times = pingpong.pingpong(comm, sbuf, rbuf, 1024, iters=50, reps=3)
mine = {"rank": comm.rank, "mpilab": mpilab.__file__, "kernel": pingpong.__file__,
        "time_s": float(np.min(times))}
every = comm.gather(mine)  # one line from rank 0: the ranks' prints would interleave
if comm.rank == 0:
    print(json.dumps(every))
"""

# in the installed package: where it lives and where it finds its sources
WHERE_SCRIPT = """
import json, os, sysconfig
import mpilab, mpilab.kernels as k
print(json.dumps({"site": sysconfig.get_paths()["platlib"], "mpilab": mpilab.__file__,
                  "sources": str(k.source_dir()),
                  "programs": {p: os.access(k.program(p), os.X_OK) for p in k.STANDALONE}}))
"""

# builds from the packaged sources and runs what it built
COARRAY_SCRIPT = """
import json
import numpy as np
from mpilab import coarrays, halo
built = coarrays.build()
p = coarrays.run_wave(24, 16, 12, mode="coarray", ranks=2)
print(json.dumps({"built": {k: str(v) for k, v in built.items()}, "src": str(coarrays.SRC),
                  "equal": bool(np.array_equal(p, halo.serial_wave(24, 16, 12)))}))
"""

SIM_SCRIPT = """
import json
from mpilab import sim
exe = sim.build("mpilab-pingpong")
recs = sim.pingpong([8, 1024], platform="deck-paper", reps=1, iters=10, timeout=120)
print(json.dumps({"exe": str(exe), "kernels": str(sim.KERNELS),
                  "t_us": [r["t_us_median"] for r in recs]}))
"""


def _tree_files() -> list[str]:
    res = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, capture_output=True, timeout=60)
    if res.returncode != 0:
        pytest.skip("not a git checkout: the clean tree to install is what git lists")
    return [f for f in res.stdout.decode().split("\0") if f and (ROOT / f).is_file()]


def _run(argv, *, env, cwd, timeout=600) -> subprocess.CompletedProcess:
    res = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True,
                         timeout=timeout)
    assert res.returncode == 0, (f"{' '.join(map(str, argv))} failed ({res.returncode}):\n"
                                 f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return res


def _last_json(text: str):
    return json.loads([line for line in text.splitlines() if line.startswith("{")][-1])


@pytest.fixture(scope="module")
def installed():
    """(venv python, env, outside folder, seconds per step) of a fresh non-editable install."""
    if runtime.selected_library() != "openmpi":
        pytest.skip("the install test runs on the default MPI (MPILAB_MPI=openmpi)")
    try:
        runtime.mpicc(), runtime.mpiexec()
    except runtime.MPINotFound as exc:
        pytest.skip(f"no MPI here: {exc}")
    files = _tree_files()
    base = Path(tempfile.mkdtemp(prefix="mpilab-install-"))
    seconds: dict[str, float] = {}
    try:
        t0 = time.perf_counter()
        src, venv, outside = base / "src", base / "venv", base / "elsewhere"
        for f in files:
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, src / f)
        outside.mkdir()
        # a clean environment: no PYTHONPATH, the new venv first on PATH, this checkout's
        # .venv nowhere, and fresh caches so run-time builds really happen from the wheel
        path = [p for p in os.environ.get("PATH", "").split(os.pathsep)
                if p and not p.startswith(str(ROOT))]
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONHOME", "MPILAB_BUILD_CACHE", "MPILAB_SIM_CACHE")}
        env.update(PATH=os.pathsep.join([str(venv / "bin"), *path]), VIRTUAL_ENV=str(venv),
                   PYTHONPATH="",  # (jobs.run adds env to this process's: set, not removed)
                   XDG_CACHE_HOME=str(base / "cache"),
                   PIP_CACHE_DIR=os.environ.get("PIP_CACHE_DIR")
                   or str(Path.home() / ".cache" / "pip"))
        seconds["copy"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        _run([sys.executable, "-m", "venv", str(venv)], env=env, cwd=outside, timeout=300)
        py = str(venv / "bin" / "python")
        _run([py, "-m", "pip", "install", "-q", "-c", str(CONSTRAINTS), *BUILD_REQUIREMENTS],
             env=env, cwd=outside)
        seconds["venv and build requirements"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        _run([py, "-m", "pip", "install", "-q", "-c", str(CONSTRAINTS),
              "--no-build-isolation", str(src)], env=env, cwd=outside, timeout=1200)
        seconds["pip install ."] = time.perf_counter() - t0
        shutil.rmtree(src)  # nothing may come from the tree it was built from
        yield py, env, outside, seconds
    finally:
        shutil.rmtree(base, ignore_errors=True)
        print("\nnon-editable install, seconds: "
              + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items()))


def test_the_installed_package_has_its_kernels_programs_and_sources(installed):
    py, env, outside, _ = installed
    got = _last_json(_run([py, "-c", WHERE_SCRIPT], env=env, cwd=outside).stdout)
    site = Path(got["site"])
    assert Path(got["mpilab"]).parent == site / "mpilab"
    assert Path(got["sources"]) == site / "mpilab" / "_kernel_src"
    for sub in ("common/mpilab_timing.h", "caf/wave_caf.f90", "pingpong/pingpong_main.c"):
        assert (Path(got["sources"]) / sub).is_file(), sub
    assert got["programs"] == {p: True for p in got["programs"]} and got["programs"]
    doc = json.loads(_run([py, "-m", "mpilab.doctor", "--json"], env=env, cwd=outside).stdout)
    assert doc["kernels"]["missing"] == [] and doc["kernels"]["sources"] == got["sources"]
    assert doc["mpi"] == "openmpi" and doc["problems"] == {}


def test_a_kernel_runs_on_two_ranks_from_outside_the_checkout(installed):
    py, env, outside, _ = installed
    res = jobs.run(runtime.launch(2), [py, "-c", RANK_SCRIPT], env=env, cwd=outside,
                   timeout=120)
    ranks = json.loads([ln for ln in res.stdout.splitlines() if ln.startswith("[")][-1])
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    site = Path(py).parent.parent
    for r in ranks:
        assert Path(r["kernel"]).is_relative_to(site) and Path(r["mpilab"]).is_relative_to(site)
        assert 0 < r["time_s"] < 1


def test_the_pingpong_benchmark_runs_from_outside_the_checkout(installed):
    py, env, outside, _ = installed
    out = outside / "pp.json"
    _run([py, "-m", "mpilab.bench", "pingpong", "--sizes", "8,65536", "--reps", "2",
          "--rounds", "1", "--min-time", "0.001", "--json", str(out)], env=env, cwd=outside,
         timeout=300)
    data = json.loads(out.read_text())
    assert data["meta"]["mpi_library"] == "openmpi" and data["meta"]["ranks"] == 2
    got = {(r["impl"], r["size_bytes"]) for r in data["records"]}
    assert got == {(i, n) for i in ("kernel", "c-standalone", "mpi4py") for n in (8, 65536)}
    assert all(0 < r["t_us_median"] < 1e5 for r in data["records"])


def test_coarray_programs_build_from_the_packaged_sources(installed):
    ok, why = coarrays.available()
    if not ok:
        pytest.skip(why)
    py, env, outside, _ = installed
    got = _last_json(_run([py, "-c", COARRAY_SCRIPT], env=env, cwd=outside).stdout)
    site = Path(py).parent.parent
    assert Path(got["src"]).is_relative_to(site) and got["src"].endswith("_kernel_src/caf")
    assert all(Path(p).is_relative_to(site) for p in got["built"].values())
    assert got["equal"], "the coarray wave differs from the serial reference"


def test_simgrid_programs_build_from_the_packaged_sources(installed):
    ok, why = sim.available()
    if not ok:
        pytest.skip(why)
    py, env, outside, _ = installed
    got = _last_json(_run([py, "-c", SIM_SCRIPT], env=env, cwd=outside).stdout)
    assert got["kernels"].endswith("site-packages/mpilab/_kernel_src")
    assert Path(got["exe"]).is_relative_to(Path(env["XDG_CACHE_HOME"]))
    assert len(got["t_us"]) == 2 and 0 < got["t_us"][0] < got["t_us"][1]
