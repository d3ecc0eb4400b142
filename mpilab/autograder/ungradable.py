"""Ungradable is a state, not a zero: a part the grader could not check for its own reasons
costs the student nothing, and the instructor gets a list to grade again.

A test cell is ungradable when its error says the grader failed, not the student's code:

- ``GraderError``: the grader's kernel died, stopped answering or ran past its time while
  it ran the checks (:class:`mpilab.autograder.nbgrader.IsolatedExecute` writes it, and
  starts a new grader's kernel for the next cell);
- ``Ungradable`` (:class:`mpilab.autograder.failures.Ungradable`): a check found missing
  what it needs on the grader's side (lab 06's simulator and its saved simulation of a
  hidden case, say).

:class:`SaveGrades` takes the place of nbgrader's ``SaveAutoGrades`` in the autograde
preprocessors (``autograder/nbgrader_config.py``): such a cell gets no automatic score
(nbgrader's ``auto_score`` None, where a failed check gets 0) and ``needs_manual_grade``,
so formgrader shows the submission as needing a grade and the feedback shows the cell's
message (the grader's problem, not the student's). Until it is graded, nbgrader's totals
count the part as 0: a pending grade, never a final one. :func:`pending` lists every such part from the
gradebook with its reason (``make lab-ungradable``); grading again once the grader is
mended (``make lab-autograde LAB=... NBFLAGS=--force``) gives them their scores.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from nbgrader.preprocessors import SaveAutoGrades
from nbgrader.utils import is_solution

__all__ = ["ERRORS", "reason", "SaveGrades", "pending", "main"]

#: The error names that mean the grader failed, not the student's code.
ERRORS = ("GraderError", "Ungradable")


def reason(cell) -> str | None:
    """Why `cell` (an executed test cell) could not be graded, or None when it was.

    Parameters
    ----------
    cell : NotebookNode
        A cell of an autograded notebook, with its outputs.

    Returns
    -------
    str or None
        ``"ENAME: evalue"`` of its first error output named in ``ERRORS``; None for a
        solution cell, a markdown cell or a cell without such an error.
    """
    if cell.get("cell_type") != "code" or is_solution(cell):
        return None
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error" and out.get("ename") in ERRORS:
            return f"{out['ename']}: {out.get('evalue', '')}"
    return None


class SaveGrades(SaveAutoGrades):
    """nbgrader's SaveAutoGrades, except that an ungradable test cell (:func:`reason`) gets
    no score and needs a manual grade, instead of 0 points."""

    def _add_score(self, cell, resources) -> None:
        why = reason(cell)
        if why is None:
            super()._add_score(cell, resources)
            return
        grade = self.gradebook.find_grade(cell.metadata["nbgrader"]["grade_id"],
                                          self.notebook_id, self.assignment_id,
                                          self.student_id)
        grade.auto_score = None
        grade.needs_manual_grade = True
        self.gradebook.db.commit()
        self.log.warning("Ungradable (costs the student nothing; grade again): %s, %s, %s: %s",
                         self.student_id, self.assignment_id,
                         cell.metadata["nbgrader"]["grade_id"], why)


def _why(course: Path, lab: str, student: str, notebook: str, grade_id: str) -> str:
    import nbformat

    path = course / "autograded" / student / lab / f"{notebook}.ipynb"
    try:
        nb = nbformat.read(path, 4)
    except (OSError, ValueError):
        return f"(no autograded notebook at {path})"
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            return reason(cell) or "(graded since: its cell now has no grader's error)"
    return f"(no cell {grade_id} in {path})"


def pending(course: Path, labs: Sequence[str] | None = None) -> list[dict]:
    """Every test cell of the gradebook in `course` (nbgrader's course folder) that waits
    for a grade because the grader could not check it: lab, student, notebook, cell,
    points and the reason (from the autograded notebook).

    Parameters
    ----------
    course : Path
        nbgrader's course folder (with ``gradebook.db`` and ``autograded/``).
    labs : sequence of str, optional
        Only these assignments (default: all of them).

    Returns
    -------
    list of dict
        One dict per part, with keys ``lab``, ``student``, ``notebook``, ``cell``,
        ``points`` (the cell's maximum score) and ``reason``; sorted by lab, student and
        cell.
    """
    from nbgrader.api import Gradebook

    course = Path(course)
    out = []
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for assignment in gb.assignments:
            if labs and assignment.name not in labs:
                continue
            for sub in assignment.submissions:
                for snb in sub.notebooks:
                    solutions = {c.name for c in snb.notebook.solution_cells}
                    for g in snb.grades:
                        if (g.needs_manual_grade and g.auto_score is None
                                and g.manual_score is None and g.name not in solutions):
                            out.append({"lab": assignment.name, "student": sub.student.id,
                                        "notebook": snb.name, "cell": g.name,
                                        "points": g.max_score,
                                        "reason": _why(course, assignment.name,
                                                       sub.student.id, snb.name, g.name)})
    return sorted(out, key=lambda r: (r["lab"], r["student"], r["cell"]))


def main(argv: Sequence[str] | None = None) -> int:
    """Print the parts waiting for a grade, and how to grade them again.

    Parameters
    ----------
    argv : sequence of str, optional
        The command line's arguments, ``[LAB ...] [--course FOLDER]`` (default:
        ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status, 0 (also when parts are ungradable).
    """
    ap = argparse.ArgumentParser(prog="python -m mpilab.autograder.ungradable",
                                 description="List the parts the grader could not check "
                                 "(they cost the students nothing until graded again).")
    ap.add_argument("labs", nargs="*", help="only these labs (default: every lab)")
    ap.add_argument("--course", default=".", help="nbgrader's course folder (default: .)")
    args = ap.parse_args(argv)
    rows = pending(Path(args.course), args.labs or None)
    if not rows:
        print("ungradable: none")
        return 0
    for r in rows:
        print(f"{r['lab']}  {r['student']}  {r['cell']} ({r['points']:g} points): "
              f"{r['reason']}")
    labs = " ".join(sorted({r["lab"] for r in rows}))
    print(f"ungradable: {len(rows)} part(s); once the grader is mended, grade again: "
          f"make lab-autograde LAB='{labs}' NBFLAGS=--force")
    return 0


if __name__ == "__main__":
    sys.exit(main())
