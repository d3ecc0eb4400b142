"""The phases `make test` runs the suite in (tests/conftest.py): the groups a pytest-xdist
worker takes whole."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT, group_of

from mpilab.grading import measured


def test_a_module_is_its_own_group():
    assert group_of("tests/test_jobs.py::test_x[2]") == "test_jobs"


def test_the_modules_of_one_lecture_share_a_group():
    assert group_of("tests/test_lectures.py::test_lecture_runs_cleanly[04-coarrays]") \
        == group_of("tests/test_lecture_04.py::test_y") == "lecture-04"
    assert group_of("tests/test_lectures.py::test_lecture_runs_cleanly[01-pingpong]") \
        == "test_lectures"


def test_a_split_module_is_a_group_per_function():
    a = group_of("tests/test_grading_hostile.py::test_every_lab_survives[lab00]")
    b = group_of("tests/test_grading_hostile.py::test_every_lab_survives[lab01]")
    c = group_of("tests/test_grading_hostile.py::test_lab00_hostile_corpus")
    assert a == b != c


def test_a_session_measures_afresh(tmp_path):
    """A session that may measure removes the measurements graders keep (a phase never
    grades against another's), and keeps what is not a measurement (simulations)."""
    folder = tmp_path / f"mpilab-grading-{os.getuid()}"
    folder.mkdir(mode=0o700)
    kept = folder / "sim-x.json"
    gone = folder / f"held-out-x{measured.MEASURED_SUFFIX}"
    for f in (kept, gone):
        f.write_text("{}")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    env["TMPDIR"] = str(tmp_path)
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "tests/test_phases.py::test_a_module_is_its_own_group"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert kept.exists() and not gone.exists()
