"""A made-up lab for the tests that grade one through real nbgrader runs (test_ungradable,
test_lab08_recipe): its cells with nbgrader's metadata, and a throw-away repository
holding its source notebook and the course's autograder/, generated into a course."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
from conftest import ROOT

from mpilab.autograder.course import make_course

__all__ = ["cell", "notebook", "course"]


def cell(kind: str, source: str, gid: str, points: int = 0, solution: bool = False):
    """A markdown or code cell with nbgrader's metadata: graded when it has points, locked
    unless it is a solution."""
    make = nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell
    out = make(source)
    out.metadata["nbgrader"] = {"grade": bool(points), "grade_id": gid, "locked": not solution,
                                "schema_version": 3, "solution": solution, "task": False}
    if points:
        out.metadata["nbgrader"]["points"] = points
    return out


def notebook(cells) -> nbformat.NotebookNode:
    """A source notebook of `cells` on the installed Python kernel."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    nb.cells = list(cells)
    return nb


def course(tmp_path_factory, lab: str, nb: nbformat.NotebookNode) -> tuple[Path, Path]:
    """A repository with `nb` as labs/<lab>/<lab>.ipynb and the course's autograder/, and a
    course generated from it (:func:`mpilab.autograder.course.make_course`): (course, repo)."""
    repo = tmp_path_factory.mktemp("repo")
    (repo / "labs" / lab).mkdir(parents=True)
    nbformat.write(nb, repo / "labs" / lab / f"{lab}.ipynb")
    shutil.copytree(ROOT / "autograder", repo / "autograder",
                    ignore=shutil.ignore_patterns("release", "submitted", "autograded",
                                                  "feedback", "gradebook.db"))
    return make_course(tmp_path_factory.mktemp("course"), [lab], repo=repo), repo
