"""mpilab.autograder.parallel: a lab's submissions autograded side by side, from the command
line an instructor uses, on one gradebook; a grading past its time is killed and leaves
nothing behind. (Every lab module's batch grades side by side too: grading_batch.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lab_grading import leftover_processes

from mpilab.autograder import parallel
from mpilab.autograder.course import full, make_course, scores, solutions, submit

pytestmark = pytest.mark.slow

LAB = "lab00-mpi-basics"
WRONG_RING = '''
def ring_pass(comm, value):
    return value
'''


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    return make_course(tmp_path_factory.mktemp("course"), [LAB])


def test_default_jobs_follow_the_cores():
    assert parallel.default_jobs(1) == 2
    assert parallel.default_jobs(2) == 3
    assert parallel.default_jobs(64) == 8


@pytest.mark.graded_timing
def test_the_command_grades_every_submission_side_by_side(course):
    right = solutions(LAB)
    for student in ("ada", "bob", "cyd"):
        submit(course, LAB, student, right)
    submit(course, LAB, "dan", {**right, "ring_pass": WRONG_RING})
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "mpilab.autograder.parallel", LAB, "--jobs", "3",
                          "--force"], cwd=course / "autograder", capture_output=True,
                         text=True, timeout=600)
    wall = time.perf_counter() - t0
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-12000:]
    assert "autograding 4 submission(s) of lab00-mpi-basics, 3 at a time" in out
    for student in ("ada", "bob", "cyd", "dan"):
        assert f"[parallel] {student}: graded in" in out, out[-3000:]
        assert f"===== {student} (" in out  # each student's own nbgrader log
    got = scores(course, LAB, ["ada", "bob", "cyd", "dan"])
    assert got["ada"] == got["bob"] == got["cyd"] == full(LAB), got
    assert got["dan"] == {**full(LAB), "test_ring_pass": 0.0}, got
    assert not leftover_processes(course)
    print(f"\n[parallel] 4 submissions of {LAB}, 3 at a time: {wall:.0f} s")


def test_nothing_to_grade_is_said_not_failed(course):
    res = subprocess.run([sys.executable, "-m", "mpilab.autograder.parallel", "lab09-none"],
                         cwd=course / "autograder", capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0 and "nothing to grade" in res.stdout


@pytest.mark.graded_timing
def test_a_grading_past_its_time_is_killed_and_leaves_nothing(course):
    submit(course, LAB, "slow", solutions(LAB))
    t0 = time.perf_counter()
    [got] = parallel.autograde(course / "autograder", LAB, ["slow"], args=("--force",),
                               timeout=2)
    assert time.perf_counter() - t0 < 60
    assert got.returncode == 124 and not got.ok
    assert "nbgrader killed after 2 s" in got.log
    assert not leftover_processes(course, grace=30)


def test_validate_says_its_verdict_without_pythonunbuffered(tmp_path):
    """A plain shell's nbgrader validate, forked from the fork server: the verdict nbgrader
    writes through the stream it took at import reaches the output (it was lost where
    PYTHONUNBUFFERED was not set, as in a stock Debian root: every released lab then
    'passed' the check that its stubs fail every test)."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    path = tmp_path / "plain.ipynb"
    nbformat.write(nb, path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    code = ("import sys; from mpilab.autograder import parallel; "
            f"r = parallel.nbgrader(['validate', {str(path)!r}], {str(tmp_path)!r}, timeout=120); "
            "print('CODE', r.returncode); print(r.stdout)")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=180)
    assert "CODE 0" in res.stdout, res.stdout + res.stderr
    assert "Success! Your notebook passes all the tests." in res.stdout, res.stdout + res.stderr
