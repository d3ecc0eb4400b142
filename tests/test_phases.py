"""The phases `make test` runs the suite in (tests/conftest.py): the groups a worker takes
whole, and the cores lock that keeps CI's background work off the measuring phases."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys

from conftest import ROOT, group_of

SELF = "tests/test_phases.py::test_a_module_is_its_own_group"


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


def _pytest(env: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_XDIST_WORKER", "MPILAB_TEST_PHASE")} | env
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           SELF], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_measuring_session_waits_for_the_work_beside_it(tmp_path):
    """While something holds the lock shared (CI's background), a session that may measure
    does not start its tests; one of the side-by-side phase does."""
    lock = tmp_path / "cores.lock"
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_SH)
        waits = _pytest({"MPILAB_CORES_LOCK": str(lock), "MPILAB_CORES_LOCK_WAIT": "2"})
        assert waits.returncode == 3, waits.stdout + waits.stderr
        assert "still holds" in waits.stdout + waits.stderr
        side = _pytest({"MPILAB_CORES_LOCK": str(lock), "MPILAB_TEST_PHASE": "side-by-side"})
        assert side.returncode == 0, side.stdout + side.stderr
    alone = _pytest({"MPILAB_CORES_LOCK": str(lock)})  # let go: it gets the cores
    assert alone.returncode == 0, alone.stdout + alone.stderr
    assert "cores: held alone" in alone.stdout
