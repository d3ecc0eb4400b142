"""The course inside a container's limits, made for real: a cgroup with a one-CPU quota
and 2 GiB of memory, and a 64 MiB /dev/shm (what Binder and a JupyterHub give).

A quota is not an affinity mask: inside such a container `nproc` and
``sched_getaffinity`` still list every core of the host, so a course that counted those
would run two ranks "on two cores" that get one CPU's time between them, and never say
so. Root only (making cgroups); skipped elsewhere with the reason.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from cgroups import CgroupUnavailable, limited
from conftest import ROOT, needs_mpi

pytestmark = needs_mpi

GiB = 1 << 30
SHM = 64 << 20


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("CPU_LIMIT", "MEM_LIMIT", "MPILAB_QUICK", "PYTEST_CURRENT_TEST")}
    env.update(extra)
    return env


@pytest.fixture
def binder_like():
    """One CPU of quota, 2 GiB, 64 MiB of /dev/shm."""
    try:
        with limited(cpus=1, memory=2 * GiB, shm=SHM) as cg:
            yield cg
            assert cg.oom_kills() == 0, "the memory limit killed a process"
    except CgroupUnavailable as exc:
        pytest.skip(str(exc))


def _run(cg, argv, timeout=120, **env):
    return subprocess.run([*cg.prefix, *argv], capture_output=True, text=True,
                          timeout=timeout, env=_env(**env), cwd=ROOT)


def test_a_one_cpu_quota_is_one_core_and_more_ranks_are_oversubscribed(binder_like):
    code = (
        "import json\n"
        "from mpilab import runtime\n"
        "print(json.dumps(dict(res=runtime.resources(), small=runtime.small_machine(),\n"
        "  over={n: runtime.launch(n).oversubscribed for n in (1, 2, 4)})))\n")
    out = _run(binder_like, [sys.executable, "-c", code])
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    res = got["res"]
    assert res["affinity_cores"] == len(os.sched_getaffinity(0))  # the mask is unchanged
    assert res["cores"] == 1 and res["cpu_quota"] == 1.0
    assert res["cpu_quota_from"].startswith("cgroup ")
    assert res["memory_bytes"] == 2 * GiB and res["memory_from"].startswith("cgroup ")
    assert res["shm_bytes"] == SHM
    assert got["over"] == {"1": False, "2": True, "4": True}
    assert got["small"] == "one core"


def test_a_benchmark_record_says_what_it_ran_under(binder_like, tmp_path):
    out_json = tmp_path / "pp.json"
    out = _run(binder_like, [sys.executable, "-m", "mpilab.bench", "pingpong", "--sizes",
                             "8,64K", "--reps", "3", "--rounds", "1", "--min-time", "0.002",
                             "--impls", "kernel", "--timeout", "100", "--json", str(out_json)])
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "2 ranks on 1 cores (oversubscribed)" in out.stdout
    data = json.loads(out_json.read_text())
    meta = data["meta"]
    assert meta["cores"] == 1 and meta["cpu_quota"] == 1.0 and meta["oversubscribed"]
    assert meta["memory_bytes"] == 2 * GiB and meta["shm_bytes"] == SHM
    assert [r["size_bytes"] for r in data["records"]] == [8, 65536]
    assert all(r["oversubscribed"] and r["t_us_median"] > 0 for r in data["records"])


@pytest.mark.measures
@pytest.mark.slow
def test_lecture_02_and_lab_02_pass_in_one_cpu_and_2_gib(binder_like):
    """Their own tests, run inside the limits; the lecture picks its small sweeps itself.

    Every test of the lecture (one execution of it), and a correct and a deadlocking
    submission of the lab autograded (the rest of test_lab02, its source's validation
    included, runs the same cells outside the limits)."""
    lab = "test_correct_gets_full_marks or test_deadlock_loses_only_that_part"
    out = _run(binder_like, [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                             "tests/test_lecture_02.py", "tests/test_lab02.py",
                             "-k", f"test_lecture_02 or {lab}"],
               timeout=1500, MPILAB_QUICK="auto", MPILAB_EXPECT_SMALL="one core")
    tail = (out.stdout[-4000:] + out.stderr[-2000:])
    assert out.returncode == 0, tail
    ran = re.search(r"(\d+) passed", out.stdout)
    assert ran and int(ran.group(1)) >= 10 and " failed" not in out.stdout, tail
    peak = binder_like.memory_peak()
    assert 0 < peak <= 2 * GiB
    print(f"peak memory {peak / GiB:.2f} GiB of 2 GiB; {out.stdout.strip().splitlines()[-1]}")
