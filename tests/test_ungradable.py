"""Ungradable is a state, not a zero (mpilab.autograder.ungradable), through real nbgrader
runs on a made-up lab: a part whose check raises ``Ungradable`` (the grader lacks what it
needs) and a part whose check kills the grader's kernel get no score and need a grade,
while the parts around them are graded as usual (the grader's kernel is started again);
the list names both with their reasons, the feedback says whose problem it was, and
grading again once the grader is mended gives them their points.
"""

from __future__ import annotations

import made_up_lab
import nbformat
import pytest
from nbgrader.api import Gradebook

from mpilab.autograder import ungradable
from mpilab.autograder.course import nbgrader, scores, solutions, submit

LAB = "lab99-ungradable"
_cell = made_up_lab.cell


def _lab(flag) -> nbformat.NotebookNode:
    """The made-up grader misses what it needs until the file `flag` exists."""
    mended = f"__import__('os').path.exists({str(flag)!r})"
    return made_up_lab.notebook([
        _cell("markdown", "# A made-up lab", "intro"),
        _cell("code", "from mpilab.autograder.failures import Ungradable", "setup"),
        _cell("code", "def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION",
              "answer", solution=True),
        _cell("code", "assert f() == 1", "test_before", points=1),
        _cell("code", f"if not {mended}:\n    raise Ungradable('the simulator is missing "
              "here, and no saved simulation of this case (made up)')\nassert f() == 1",
              "test_missing", points=2),
        _cell("code", f"if not {mended}:\n    __import__('os')._exit(1)\nassert f() == 1",
              "test_dies", points=3),
        _cell("code", "assert f() == 1", "test_after", points=1),
    ])


@pytest.fixture(scope="module")
def flag(tmp_path_factory):
    return tmp_path_factory.mktemp("grader") / "mended"


@pytest.fixture(scope="module")
def course(tmp_path_factory, flag):
    root, repo = made_up_lab.course(tmp_path_factory, LAB, _lab(flag))
    submit(root, LAB, "ada", solutions(LAB, repo))
    return root


def _states(course) -> dict[str, tuple]:
    """Each graded cell's (automatic score, needs a manual grade) in the gradebook."""
    with Gradebook(f"sqlite:///{course / 'autograder' / 'gradebook.db'}") as gb:
        sub = gb.find_submission_notebook(LAB, LAB, "ada")
        return {g.name: (g.auto_score, g.needs_manual_grade) for g in sub.grades}


@pytest.mark.slow
def test_an_ungradable_part_costs_nothing_and_is_listed_until_graded_again(course, flag):
    res = nbgrader(course, "autograde", LAB, "--force")
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert _states(course) == {"test_before": (1.0, False), "test_missing": (None, True),
                               "test_dies": (None, True), "test_after": (1.0, False)}
    assert "Ungradable (costs the student nothing; grade again): ada" in res.stdout + res.stderr
    rows = ungradable.pending(course / "autograder")
    assert [(r["student"], r["cell"], r["points"]) for r in rows] == [
        ("ada", "test_dies", 3.0), ("ada", "test_missing", 2.0)]
    why = {r["cell"]: r["reason"] for r in rows}
    assert why["test_missing"].startswith("Ungradable: the simulator is missing here"), why
    assert why["test_dies"].startswith("GraderError: the checks of this part could not run"), why
    assert "not yours" in why["test_dies"], why

    fb = nbgrader(course, "generate_feedback", LAB, "--force")
    assert fb.returncode == 0, fb.stdout + fb.stderr
    html = (course / "autograder" / "feedback" / "ada" / LAB / f"{LAB}.html").read_text()
    assert "the simulator is missing here" in html and "not yours" in html

    flag.touch()  # the grader mended: grade again
    res = nbgrader(course, "autograde", LAB, "--force")
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert scores(course, LAB, ["ada"]) == {"ada": {
        "test_before": 1.0, "test_missing": 2.0, "test_dies": 3.0, "test_after": 1.0}}
    assert not any(manual for _, manual in _states(course).values())
    assert ungradable.pending(course / "autograder") == []


def test_only_the_graders_errors_make_a_cell_ungradable():
    def cell(ename):
        c = nbformat.v4.new_code_cell("check()")
        c.metadata["nbgrader"] = {"grade": True, "grade_id": "t", "points": 1,
                                  "solution": False, "locked": True}
        c.outputs = [nbformat.v4.new_output("error", ename=ename, evalue="why",
                                            traceback=[])]
        return c

    assert ungradable.reason(cell("GraderError")) == "GraderError: why"
    assert ungradable.reason(cell("Ungradable")) == "Ungradable: why"
    for ename in ("CheckFailed", "RaisedError", "AssertionError", "TimedOut"):
        assert ungradable.reason(cell(ename)) is None, ename
    answer = cell("Ungradable")
    answer.metadata["nbgrader"]["solution"] = True  # a student's cell never is
    assert ungradable.reason(answer) is None
