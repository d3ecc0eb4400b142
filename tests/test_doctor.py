"""`python -m mpilab.doctor`: its facts agree with the machine's, and it never raises.

Each test runs the doctor as a user would, in a fresh process, and compares what it
says with what mpilab.runtime and mpi4py (in another fresh process) say.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from mpilab import doctor, runtime

ROOT = Path(__file__).resolve().parent.parent
GIB = 1 << 30


def run_doctor(*args: str, env: dict | None = None, tmp_path: Path) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items()
            if k not in ("CPU_LIMIT", "MEM_LIMIT", "MPILAB_QUICK")}
    res = subprocess.run([sys.executable, "-m", "mpilab.doctor", *args],
                         env={**base, **(env or {})}, cwd=tmp_path, capture_output=True,
                         text=True, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    return res


def test_json_agrees_with_the_machine(tmp_path):
    """--json: one object whose cores, memory, /dev/shm and MPI are this machine's."""
    f = json.loads(run_doctor("--json", tmp_path=tmp_path).stdout)
    for key in ("cores", "memory_bytes", "shm_bytes", "mpi", "mpi_version", "netns",
                "coarrays", "slurm", "cpu_quota", "cpu_quota_from", "memory_from",
                "affinity_cores", "mpi4py_version", "launcher", "compiler", "simgrid",
                "sandbox", "browser", "lectures"):
        assert key in f, key
    env_free = {k: v for k, v in os.environ.items() if k not in ("CPU_LIMIT", "MEM_LIMIT")}
    facts = json.loads(subprocess.run(
        [sys.executable, "-c", "import json; from mpilab import runtime; "
         "print(json.dumps([runtime.usable_cores(), runtime.memory_limit()[0], "
         "runtime.shm_size()[0], runtime.mpiexec(), runtime.mpicc()]))"],
        env=env_free, capture_output=True, text=True, timeout=60, check=True).stdout)
    assert [f["cores"], f["memory_bytes"], f["shm_bytes"], f["launcher"],
            f["compiler"]] == facts

    # mpi4py's own answer, with MPI started for real in another process
    said = subprocess.run(
        [sys.executable, "-c", "import mpi4py; from mpi4py import MPI; "
         "print(mpi4py.__version__); print(MPI.Get_library_version())"],
        env=runtime.clean_env(), capture_output=True, text=True, timeout=60, check=True)
    version, library = said.stdout.split("\n", 1)
    assert f["mpi4py_version"] == version.strip()
    first = library.strip().splitlines()[0]
    if "Open MPI" in first:
        assert f["mpi"] == "openmpi"
        assert first.startswith(f"Open MPI v{f['mpi_version']}")
    else:
        assert f["mpi"] == "mpich" and f["mpi_version"] in library
    assert f["problems"] == {}, f["problems"]


def test_a_one_cpu_two_gib_container_gets_small_sweeps(tmp_path):
    """CPU_LIMIT=1 MEM_LIMIT=2 GiB: 1 core, 2 GiB, small sweeps, oversubscription said."""
    env = {"CPU_LIMIT": "1", "MEM_LIMIT": str(2 * GIB)}
    f = json.loads(run_doctor("--json", env=env, tmp_path=tmp_path).stdout)
    assert f["cores"] == 1
    assert (f["cpu_quota"], f["cpu_quota_from"]) == (1, "$CPU_LIMIT")
    assert f["memory_bytes"] == min(2 * GIB, runtime.memory_limit()[0])
    if runtime.memory_limit()[0] > 2 * GIB:
        assert f["memory_from"] == "$MEM_LIMIT"
    assert f["small"] == "one core"
    assert all("small sweeps: one core" in f["lectures"][n] for n in ("01", "02", "05", "06"))
    text = run_doctor(env=env, tmp_path=tmp_path).stdout
    assert re.search(r"cores\s+1 usable .*quota 1 CPUs from \$CPU_LIMIT", text), text
    assert re.search(r"memory\s+2\.0 GiB \(from \$MEM_LIMIT", text), text
    assert "2- and 4-rank runs are oversubscribed on 1 core" in text


def test_the_report_says_what_each_lecture_does(tmp_path):
    """The text names every lecture in lectures/ and what it will do."""
    text = run_doctor(tmp_path=tmp_path).stdout
    numbers = sorted(p.name[:2] for p in (ROOT / "lectures").glob("[0-9][0-9]-*.md"))
    assert numbers == sorted(doctor.TITLES)
    for n in numbers:
        line = re.search(rf"^  lecture {n} \(.*\): (.+)$", text, re.M)
        assert line, f"lecture {n} missing from:\n{text}"
        assert "runs live" in line.group(1) or "reference data" in line.group(1)


def test_what_is_turned_off_is_reported_with_its_lecture(tmp_path):
    """Emulated nodes and the sandbox turned off: lecture 07 falls back, both say why."""
    env = {"MPILAB_NETLAB": "off", "MPILAB_SANDBOX": "off"}
    f = json.loads(run_doctor("--json", env=env, tmp_path=tmp_path).stdout)
    assert f["netns"] is False and "MPILAB_NETLAB=off" in f["netns_why_not"]
    assert f["sandbox"] is False and f["sandbox_why_not"] == "MPILAB_SANDBOX=off"
    assert f["lectures"]["07"].startswith("shows reference data, no emulated nodes")
    assert "MPILAB_NETLAB=off" in f["lectures"]["07"]


def test_a_machine_without_the_tools_is_reported_not_raised(tmp_path):
    """Nothing on PATH (no launcher, compilers, SimGrid, Slurm, ip): every part says so."""
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {"PATH": str(empty), "MPILAB_MPIEXEC": "", "MPICC": ""}
    f = json.loads(run_doctor("--json", env=env, tmp_path=tmp_path).stdout)
    assert f["launcher"] is None and f["compiler"] is None
    assert "mpiexec" in f["problems"]["mpi"]
    assert f["coarrays"] is False and f["coarrays_why_not"]
    assert f["netns"] is False and "`ip`" in f["netns_why_not"]
    assert f["simgrid"]["available"] is False and "smpicc" in f["simgrid"]["why_not"]
    assert f["slurm"]["controller"] is False and "sbatch" in f["slurm"]["why_not"]
    assert f["browser"] is None
    assert all(line.startswith("cannot run") for line in f["lectures"].values())
    text = run_doctor(env=env, tmp_path=tmp_path).stdout
    assert "Problems found:" in text and "cannot run" in text
