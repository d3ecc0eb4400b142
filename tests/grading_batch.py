"""A lab's submissions autograded together, as an instructor grades a class.

An instructor grades a lab's submissions together, and so do the lab tests: side by side
(:mod:`mpilab.autograder.parallel`, :data:`JOBS` at a time, one ``nbgrader autograde
--student`` each), where one student's deadlock, endless loop or hostile code must cost
nobody graded beside it a mark, and no measurement may change. A module that sets
``GRADING_JOBS = 1`` grades its submissions one after another instead (test_labs.py:
that keeps the plain one-process ``nbgrader autograde`` path tested too, where the
grader's workers and sandboxes serve student after student). A test declares its
submission with a marker::

    @pytest.mark.submission(LAB, "wrong", lambda: {**solutions(LAB), "ring_pass": BAD})
    def test_wrong_gets_partial_marks(request, course):
        nb, seconds = check_run(request, course, {"test_ring_pass": 0.0, ...})

The first test of a module that asks for its grade submits the submissions of every test
of that module and lab that this session runs (deselected tests' submissions are not
graded), autogrades them together and checks that nothing of their clusters or sandboxes
is left; each test then checks its own student's scores and messages.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from lab_grading import leftover_processes

from mpilab.autograder.course import nbgrader, submit
from mpilab.autograder.parallel import autograde

HANG_CEILING = 240  # s per submission: beyond it the run hangs (the bench has the bars)
#: gradings at once, as an instructor grades a class (mpilab.autograder.parallel): side by
#: side they must score as they would alone
JOBS = 3


@dataclass
class Run:
    """One autograde of a lab's submissions."""
    scores: dict[str, dict[str, float]]
    seconds: dict[str, float]  # student -> the notebook's grading time
    wall: float
    log: str
    left: list = field(default_factory=list)  # what outlived the run


_RUNS: dict[tuple[str, str], Run] = {}


def declared(item) -> tuple[str, str, object] | None:
    marker = item.get_closest_marker("submission")
    return tuple(marker.args) if marker else None


def check_run(request, course: Path, expected: dict[str, float]):
    """This test's submission, graded with the others of its lab and module: checks that
    it scored `expected` and that the run left nothing; (graded notebook, seconds the
    autograder spent on it)."""
    mine = declared(request.node)
    assert mine, "check_run needs @pytest.mark.submission(lab, student, answers)"
    lab, student, _ = mine
    key = (str(course), lab)
    if key not in _RUNS:
        _RUNS[key] = _grade(request, course, lab)
    run = _RUNS[key]
    assert student in run.scores, (f"{student}'s {lab} was not graded", run.log[-5000:])
    if run.scores[student] != expected:
        raise AssertionError(f"{student}'s {lab} scored {run.scores[student]}, expected "
                             f"{expected}\n" + why_scored(course, lab, student, expected,
                                                         run.scores[student]))
    assert not run.left, f"an MPI cluster or sandbox outlived the autograde: {run.left}"
    nb = graded_notebook(course, lab, student)
    if student == "correct":
        assert_locked_cells_ran(nb, lab)
    return nb, run.seconds.get(student, float("nan"))


def assert_locked_cells_ran(nb: dict, lab: str) -> None:
    """The lab's own (locked, untested) cells ran without an error in the student's
    sandboxed kernel: a set-up cell that fails there leaves every name after the failing
    line undefined, which only a test that reads one of them would show (lab 07's set-up
    could not find the course's reference/ in the sandbox, and Part F's test read its
    placements)."""
    failed = []
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] == "code" and meta.get("locked") and not meta.get("grade"):
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    failed.append(f"{meta.get('grade_id')}: {out['ename']}: "
                                  f"{out['evalue'][:300]}")
    assert not failed, f"{lab}: the lab's own cells failed in the sandbox: {failed}"


def _grade(request, course: Path, lab: str) -> Run:
    from nbgrader.api import Gradebook

    cases = {}
    for item in request.session.items:
        got = declared(item)
        if got and got[0] == lab and getattr(item, "module", None) is request.module:
            _, student, answers = got
            assert student not in cases, f"two tests submit {lab} as {student}"
            cases[student] = answers() if callable(answers) else answers
    for student, answers in cases.items():
        submit(course, lab, student, answers)
    t0 = time.perf_counter()
    jobs = getattr(request.module, "GRADING_JOBS", JOBS)
    if jobs == 1:  # plain nbgrader: one process grades them one after another
        res = nbgrader(course, "autograde", lab, "--force",
                       timeout=60 + HANG_CEILING * len(cases))
        logs = {None: res.stdout + res.stderr}
        failed = [logs[None][-5000:]] if res.returncode or "Removing failed assignment" \
            in logs[None] else []
    else:
        done = autograde(course / "autograder", lab, list(cases), jobs=jobs,
                         args=("--force",), timeout=60 + HANG_CEILING)
        logs = {g.student: g.log for g in done}
        failed = [g.log[-5000:] for g in done if not g.ok]
    wall = time.perf_counter() - t0
    log = "\n".join(f"===== {s or lab}\n{text}" for s, text in logs.items())
    assert not failed, "\n".join(failed)
    scores = {}
    with Gradebook(f"sqlite:///{course / 'autograder' / 'gradebook.db'}") as gb:
        for student in cases:
            sub = gb.find_submission_notebook(lab, lab, student)
            scores[student] = {g.name: g.score for g in sub.grades if g.max_score}
    # "Autograding .../submitted/<student>/<lab>" comes before each "Graded <nb> in N s"
    order = re.findall(r"submitted/([^/\s]+)/" + re.escape(lab), log)
    times = [float(t) for t in re.findall(r"Graded \S+ in ([0-9.]+) s", log)]
    seen = list(dict.fromkeys(order))
    seconds = dict(zip(seen, times, strict=True)) if len(seen) == len(times) else {}
    print(f"\n[autograde] {lab}: {len(cases)} submissions in {wall:.0f} s, {jobs} at a time; "
          + ", ".join(f"{s} {t:.0f} s" for s, t in seconds.items()))
    return Run(scores, seconds, wall, log, leftover_processes(course))


def why_scored(course: Path, lab: str, student: str, expected: dict, got: dict) -> str:
    """What the graded notebook says in each cell whose score differs from `expected`: its
    output and error, as the student would read them (the grader's log says nothing)."""
    try:
        nb = graded_notebook(course, lab, student)
    except OSError as e:
        return f"(no graded notebook: {e})"
    text = []
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid is None or gid not in got or got[gid] == expected.get(gid):
            continue
        text.append(f"--- cell {gid}: scored {got[gid]}, expected {expected.get(gid)}")
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                text.append(out.text[-2000:])
            elif out.output_type == "error":
                tb = "\n".join(out.traceback[-6:])
                text.append(re.sub(r"\x1b\[[0-9;]*m", "", tb)[-3000:])
    return "\n".join(text)


def graded_notebook(course: Path, lab: str, student: str) -> nbformat.NotebookNode:
    return nbformat.read(course / "autograder" / "autograded" / student / lab / f"{lab}.ipynb", 4)

