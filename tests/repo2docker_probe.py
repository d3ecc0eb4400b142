"""repo2docker's own reading of a repository's Binder files, for the tests (test_binder,
test_student_edition): which buildpack it picks, its environment file, postBuild, start and
the Dockerfile it renders. repo2docker is not a course dependency: ``make setup-test``
installs it into .venv/alt/repo2docker; ``repo2docker`` on PATH or ``MPILAB_REPO2DOCKER``
also work; without any, the tests that read through it skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

__all__ = ["python", "read"]


def python() -> str | None:
    """The Python that runs repo2docker, or None."""
    # scripts/setup.sh --test installs it into .venv/alt/repo2docker (root or not)
    local = ROOT / ".venv" / "alt" / "repo2docker" / "bin" / "repo2docker"
    exe = (os.environ.get("MPILAB_REPO2DOCKER") or shutil.which("repo2docker")
           or (str(local) if local.exists() else None))
    if not exe or not Path(exe).exists():
        return None
    first = Path(exe).read_text(errors="replace").splitlines()[0]
    return first[2:].strip() if first.startswith("#!") else None


PROBE = """
import json, os, sys
from repo2docker.app import Repo2Docker

os.chdir(sys.argv[1])
app = Repo2Docker()
for BuildPack in app.buildpacks:
    bp = BuildPack(base_image=app.base_image)
    if bp.detect():
        break
bp.platform = app.platform or "linux/amd64"
print(json.dumps({
    "buildpack": type(bp).__name__,
    "binder_dir": bp.binder_dir,
    "environment": getattr(bp, "environment_yaml_path", None),
    "post_build": bp.get_post_build_scripts(),
    "start": bp.get_start_script(),
    "preassemble": [script for _user, script in bp.get_preassemble_scripts()],
    "dockerfile": bp.render(),
}))
"""


def read(repo: Path) -> dict:
    """What repo2docker makes of `repo` (a folder as Binder clones it); skips the test
    where repo2docker is not installed."""
    exe = python()
    if exe is None:
        pytest.skip("repo2docker is not installed (pip install jupyter-repo2docker into a "
                    "venv, put it on PATH or set MPILAB_REPO2DOCKER)")
    r = subprocess.run([exe, "-c", PROBE, str(repo)], capture_output=True, text=True,
                       timeout=120, cwd=repo.parent)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)
