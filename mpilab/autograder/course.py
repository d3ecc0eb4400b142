"""A throw-away copy of the nbgrader course, with submissions: what the tests and the
autograde benchmark grade.

    root = make_course(tmp, ["lab00-mpi-basics"])       # labs/ + autograder/, generated
    submit(root, "lab00-mpi-basics", "ada", solutions("lab00-mpi-basics"))
    nbgrader(root, "autograde", "lab00-mpi-basics", "--force")
    scores(root, "lab00-mpi-basics", ["ada"])           # {'ada': {'test_ring_pass': 3.0, ...}}

:func:`hostile` builds the submission an instructor can grade to see that the sandbox and
the grader's kernel hold on their machine: its first answer is correct and then
patches everything it can in its kernel (the grading helpers, NumPy, ``importlib``,
builtins), its second is the unanswered stub, its third kills its own kernel right after
defining a correct answer, the rest is correct. It must score exactly what the honest
parts earn.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from .. import paths
from . import quiet

__all__ = ["REPO", "LABS", "nbgrader", "make_course", "solutions", "submit", "full",
           "scores", "checks_of", "hostile", "PATCH_EVERYTHING", "graded_seconds"]

try:  # the course's folders: the checkout, or MPILAB_COURSE for an installed package
    REPO = paths.course_root()
except paths.CourseNotFound:
    REPO = Path(__file__).resolve().parents[2]  # a clear FileNotFoundError when used
LABS = ["lab00-mpi-basics", "lab01-pingpong", "lab02-halo", "lab03-one-sided",
        "lab04-coarrays", "lab05-collectives", "lab06-allgather", "lab07-across-the-link"]


def _read(lab: str, repo: Path = REPO):
    import nbformat

    return nbformat.read(repo / "labs" / lab / f"{lab}.ipynb", 4)


def nbgrader(course: Path, *args: str, timeout: float = 550) -> subprocess.CompletedProcess:
    """``nbgrader ARGS`` in the course copy's autograder/ folder (forked from a process
    with nbgrader imported: :func:`mpilab.autograder.parallel.nbgrader`); a run past
    `timeout` seconds is killed and returns status 124.

    Parameters
    ----------
    course : Path
        The course copy (what :func:`make_course` returned).
    *args : str
        nbgrader's arguments (``"autograde", LAB, "--force"``).
    timeout : float, optional
        Seconds before the run is killed (default 550).

    Returns
    -------
    subprocess.CompletedProcess
        Its exit status (124 when killed) and output, as text.
    """
    from .parallel import nbgrader as run

    return run(args, course / "autograder", timeout=timeout)


def make_course(root: Path, labs, repo: Path = REPO) -> Path:
    """Copy the given labs and autograder/ into ``root`` and generate those labs there.

    Only the given labs are copied and generated (release/ and gradebook), so a lab another
    author is still writing cannot break the tests of the others. Returns ``root``.

    Parameters
    ----------
    root : Path
        An empty folder for the copy (a test's ``tmp_path``).
    labs : sequence of str
        The labs to copy and generate (names of folders under ``labs/``).
    repo : Path, optional
        The course to copy from (default ``REPO``: the checkout or ``MPILAB_COURSE``).

    Returns
    -------
    Path
        `root`, holding ``labs/`` and ``autograder/`` with the labs released.

    Raises
    ------
    RuntimeError
        When ``nbgrader generate_assignment`` fails for a lab, or warns of duplicate
        cell ids.
    """
    root = Path(root)
    for lab in labs:
        shutil.copytree(repo / "labs" / lab, root / "labs" / lab,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    shutil.copytree(repo / "autograder", root / "autograder",
                    ignore=shutil.ignore_patterns("release", "submitted", "autograded",
                                                  "feedback", "gradebook.db", "__pycache__"))
    for lab in labs:
        with quiet.working():  # seconds of a core: not while a grading beside it measures
            res = nbgrader(root, "generate_assignment", lab, "--force")
        if res.returncode != 0 or not (root / "autograder" / "release" / lab).is_dir():
            raise RuntimeError(f"nbgrader generate_assignment {lab} failed:\n"
                               f"{res.stdout}{res.stderr}")
        if "DuplicateCellId" in res.stdout + res.stderr:  # the header's ids against the lab's
            raise RuntimeError(f"nbgrader generate_assignment {lab} warned of duplicate cell "
                               f"ids:\n{res.stdout}{res.stderr}")
    return root


def solutions(lab: str, repo: Path = REPO) -> dict[str, str]:
    """The source notebook's solution cells, delimiters removed: a correct submission.

    Parameters
    ----------
    lab : str
        The lab's name (``"lab00-mpi-basics"``).
    repo : Path, optional
        The course to read the lab from (default ``REPO``).

    Returns
    -------
    dict of str to str
        The source of each solution cell, by its ``grade_id``, without its
        ``### BEGIN SOLUTION`` and ``### END SOLUTION`` lines.
    """
    out = {}
    for cell in _read(lab, repo).cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            lines = [ln for ln in cell.source.splitlines()
                     if "### BEGIN SOLUTION" not in ln and "### END SOLUTION" not in ln]
            out[meta["grade_id"]] = "\n".join(lines)
    return out


def submit(course: Path, lab: str, student: str, answers: dict[str, str]) -> Path:
    """Write a submission: the released notebook with its solution cells filled in.

    Parameters
    ----------
    course : Path
        The course copy (what :func:`make_course` returned), with `lab` released.
    lab : str
        The lab's name.
    student : str
        The student's id; an earlier submission of theirs is replaced.
    answers : dict of str to str
        The source of solution cells, by ``grade_id`` (:func:`solutions`); a cell not
        named keeps the released stub.

    Returns
    -------
    Path
        The submission's folder, ``autograder/submitted/STUDENT/LAB``.
    """
    import nbformat

    release = course / "autograder" / "release" / lab
    dest = course / "autograder" / "submitted" / student / lab
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(release, dest)
    nb = nbformat.read(dest / f"{lab}.ipynb", 4)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.metadata.get("nbgrader", {}).get("solution") and gid in answers:
            cell.source = answers[gid]
    nbformat.write(nb, dest / f"{lab}.ipynb")
    return dest


def full(lab: str, repo: Path = REPO) -> dict[str, float]:
    """Every graded test cell of the lab, with its points.

    Parameters
    ----------
    lab : str
        The lab's name.
    repo : Path, optional
        The course to read the lab from (default ``REPO``).

    Returns
    -------
    dict of str to float
        The points of each graded cell, by ``grade_id``: a full score.
    """
    return {c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"]["points"])
            for c in _read(lab, repo).cells if c.metadata.get("nbgrader", {}).get("grade")}


def scores(course: Path, lab: str, students) -> dict[str, dict[str, float]]:
    """The gradebook's score of each graded test cell, by student (KeyError-free: a
    student without a graded notebook is left out).

    Parameters
    ----------
    course : Path
        The course copy (what :func:`make_course` returned), autograded.
    lab : str
        The lab's name (also its notebook's).
    students : iterable of str
        The students' ids.

    Returns
    -------
    dict of str to dict of str to float
        By student, the score of each cell worth points, by its ``grade_id``.
    """
    from nbgrader.api import Gradebook, MissingEntry

    out = {}
    with Gradebook(f"sqlite:///{course / 'autograder' / 'gradebook.db'}") as gb:
        for student in students:
            try:
                sub = gb.find_submission_notebook(lab, lab, student)
            except MissingEntry:
                continue
            out[student] = {g.name: g.score for g in sub.grades if g.max_score}
    return out


def graded_seconds(log: str) -> list[float]:
    """What each notebook took, from the autograder's "Graded X in N s" log lines.

    Parameters
    ----------
    log : str
        nbgrader's output.

    Returns
    -------
    list of float
        Seconds per graded notebook, in the order of the log.
    """
    return [float(t) for t in re.findall(r"Graded \S+ in ([0-9.]+) s", log)]


def _top_level_names(source: str) -> set[str]:
    """The names a cell defines at top level (functions, classes, assignments)."""
    import ast

    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def checks_of(lab: str, solution_id: str, repo: Path = REPO) -> list[str]:
    """The test cells that check what the solution cell `solution_id` defines.

    A solution cell that uses one of those names counts as broken with it, so the checks
    of what it defines are included too.

    Parameters
    ----------
    lab : str
        The lab's name.
    solution_id : str
        The ``grade_id`` of a solution cell.
    repo : Path, optional
        The course to read the lab from (default ``REPO``).

    Returns
    -------
    list of str
        The ``grade_id`` of each graded code cell that names one of those definitions, in
        notebook order.
    """
    defined, order = {}, []
    for cell in _read(lab, repo).cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            defined[meta["grade_id"]] = _top_level_names(cell.source)
        elif meta.get("grade") and cell.cell_type == "code":
            order.append((meta["grade_id"], cell.source))
    names = set(defined[solution_id])
    sources = {gid: cell.source for cell in _read(lab, repo).cells
               if (gid := cell.metadata.get("nbgrader", {}).get("grade_id")) in defined}
    grew = True
    while grew:  # a solution that calls a broken one is broken too (lab 07's predict_ms)
        grew = False
        for gid, src in sources.items():
            if gid != solution_id and not defined[gid] <= names and any(
                    re.search(rf"\b{n}\b", src) for n in names):
                names |= defined[gid]
                grew = True
    return [gid for gid, src in order if any(re.search(rf"\b{n}\b", src) for n in names)]


PATCH_EVERYTHING = '''
import builtins
import importlib
import sys
import types

import numpy as np

import mpilab
import mpilab.grading as _g


def _yes(*args, **kwargs):
    return None


for _mod in [m for n, m in list(sys.modules.items()) if n.startswith("mpilab")]:
    for _name in dir(_mod):
        if _name.startswith(("expect", "check_", "run_on", "call_local", "try_on")):
            setattr(_mod, _name, _yes)
_fake = types.ModuleType("mpilab.grading")
_fake.__dict__.update({n: _yes for n in dir(_g) if not n.startswith("_")})
sys.modules["mpilab.grading"] = _fake
importlib.reload = lambda m: m
np.array_equal = np.allclose = lambda *a, **k: True
np.isclose = lambda a, b, *r, **k: np.ones(np.shape(a), dtype=bool)
np.testing.assert_array_equal = np.testing.assert_allclose = _yes
builtins.AssertionError = type("AssertionError", (Exception,), {})
get_ipython().showtraceback = _yes  # nbgrader's own exploit (its PR 1324)
sys.excepthook = _yes
'''


def hostile(lab: str, repo: Path = REPO) -> tuple[dict[str, str], dict[str, float]]:
    """A hostile submission of `lab` and the scores its honest parts earn.

    The first answer is correct and then patches everything it can in its kernel; the
    second is left as the released stub (wrong), so the patch is all that could earn its
    points; the third, where the lab has one, is correct but kills its kernel right
    after; the rest are correct. Expected: the first and the rest full marks, the second
    and third nothing.

    Parameters
    ----------
    lab : str
        The lab's name (with at least two solution cells).
    repo : Path, optional
        The course to read the lab from (default ``REPO``).

    Returns
    -------
    answers : dict of str to str
        The submission's solution cells, by ``grade_id`` (for :func:`submit`).
    want : dict of str to float
        The score each graded cell must get, by ``grade_id``: full points, 0 for the
        checks of the second and third answers (:func:`checks_of`).
    """
    sol = solutions(lab, repo)
    ids = list(sol)
    answers = dict(sol)
    answers[ids[0]] = sol[ids[0]] + "\n" + PATCH_EVERYTHING
    answers[ids[1]] = "# YOUR CODE HERE\nraise NotImplementedError()\n"
    lost = checks_of(lab, ids[1], repo)
    if len(ids) > 2:
        answers[ids[2]] = sol[ids[2]] + "\n\nimport os\nos._exit(0)\n"
        lost += checks_of(lab, ids[2], repo)
    want = full(lab, repo)
    for gid in lost:
        want[gid] = 0.0
    return answers, want
