"""Lab 08's recipe (ARCHITECTURE.md, "Where does lab 08 go?"), followed end to end on a
made-up lab: its checks are one module on the shared shapes (mpilab/grading/example.py: a
graded function, a graded prediction declared as data), its notebook an nbgrader source
with solutions and hidden tests. Generated, released (no solution, no hidden test),
autograded (a correct submission full marks, a wrong one none, with the check's message),
feedback written without the hidden tests.
"""

from __future__ import annotations

import made_up_lab
import nbformat
import pytest

from mpilab.autograder.course import full, nbgrader, scores, solutions, submit

LAB = "lab08-recipe"
_cell = made_up_lab.cell
HIDDEN = "example.check_message_us(message_us, cases=((4096, 3.0, 2000.0),))"


def _lab() -> nbformat.NotebookNode:
    return made_up_lab.notebook([
        _cell("markdown", "# Lab 08 — a made-up lab on the recipe", "intro"),
        _cell("code", "from mpilab.grading import example", "setup"),
        _cell("code", "def rank_sum(comm):\n    ### BEGIN SOLUTION\n"
              "    return comm.allreduce(comm.Get_rank() + 1)\n    ### END SOLUTION",
              "rank_sum", solution=True),
        _cell("code", "example.check_rank_sum(rank_sum)", "test_rank_sum", points=2),
        _cell("code", "def message_us(n_bytes, alpha_us, beta_MBps):\n    ### BEGIN SOLUTION\n"
              "    return alpha_us + n_bytes / beta_MBps\n    ### END SOLUTION",
              "message_us", solution=True),
        _cell("code", "example.check_message_us(message_us)\n### BEGIN HIDDEN TESTS\n"
              f"{HIDDEN}\n### END HIDDEN TESTS", "test_message_us", points=3),
    ])


def _errors(course, student: str, grade_id: str) -> str:
    """The error messages of a graded test cell in the student's autograded notebook."""
    nb = nbformat.read(course / "autograder" / "autograded" / student / LAB / f"{LAB}.ipynb", 4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    return "\n".join(f"{o.ename}: {o.evalue}" for o in cell.outputs if o.output_type == "error")


WRONG = {"rank_sum": "def rank_sum(comm):\n    return comm.Get_rank() + 1",
         "message_us": "def message_us(n_bytes, alpha_us, beta_MBps):\n"
                       "    return n_bytes / beta_MBps"}


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root, repo = made_up_lab.course(tmp_path_factory, LAB, _lab())
    root.joinpath("repo").symlink_to(repo)
    return root


@pytest.mark.slow
@pytest.mark.graded_timing
def test_a_lab_made_on_the_recipe_is_released_graded_and_fed_back(course):
    repo = course / "repo"
    released = nbformat.read(course / "autograder" / "release" / LAB / f"{LAB}.ipynb", 4)
    text = "\n".join(c.source for c in released.cells)
    assert "comm.allreduce" not in text and "alpha_us + n_bytes" not in text
    assert "BEGIN HIDDEN TESTS" not in text and HIDDEN not in text
    assert "example.check_message_us(message_us)" in text  # the visible test stays

    submit(course, LAB, "right", solutions(LAB, repo))
    submit(course, LAB, "wrong", {**solutions(LAB, repo), **WRONG})
    res = nbgrader(course, "autograde", LAB, "--force")
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert scores(course, LAB, ["right"]) == {"right": full(LAB, repo)}, _errors(
        course, "right", "test_message_us")
    assert scores(course, LAB, ["right", "wrong"]) == {
        "right": full(LAB, repo), "wrong": {"test_rank_sum": 0.0, "test_message_us": 0.0}}
    assert "rank 0 returned 1, expected 3" in _errors(course, "wrong", "test_rank_sum")
    assert "A message costs α even with no bytes: add it." in _errors(course, "wrong",
                                                                      "test_message_us")

    fb = nbgrader(course, "generate_feedback", LAB, "--force")
    assert fb.returncode == 0, fb.stdout + fb.stderr
    html = (course / "autograder" / "feedback" / "wrong" / LAB / f"{LAB}.html").read_text()
    assert "A message costs" in html and "4096, 3.0, 2000.0" not in html
