"""What the lab test modules share (test_labs, test_lab02 ... test_lab07, test_lab06_simulated,
test_grading_hostile, test_parallel, and tests/grading_batch.py): whether an autograde left
anything of its clusters or sandboxes behind, a lab's source validating and its release
failing every test, its given code and solutions with a piece changed, what a graded cell
raised or printed, and submissions more than one module hands in (a patch of
``mpilab.grading``, an endless loop). A graded notebook is tests/grading_batch.py's.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import nbformat
from conftest import TEST_PROCESS

from mpilab.autograder.course import REPO, nbgrader, solutions


def leftover_processes(course: Path, grace: float = 10.0) -> list:
    """:func:`_leftovers`, after waiting up to `grace` seconds for processes that were
    killed (SIGKILL is asynchronous) to be gone."""
    deadline = time.monotonic() + grace
    while True:
        left = _leftovers(course)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def _another_tests(p) -> bool:
    """Whether `p` is part of tests that another pytest process runs beside this one (make
    test runs test modules side by side in xdist workers; CI runs the MPIs' suites beside
    them): it, or the nearest ancestor whose environment can be read (a sandbox clears its
    own), carries another test process's mark. Such a process is that one's to check; an
    orphan (its test gone) is everybody's."""
    import psutil

    mine = os.environ.get(TEST_PROCESS)
    for q in [p, *p.parents()]:
        try:
            env = q.environ()
        except (psutil.Error, OSError):
            continue
        if TEST_PROCESS in env:
            owner = env[TEST_PROCESS]
            return owner != mine and owner.isdigit() and psutil.pid_exists(int(owner))
    return False


def _leftovers(course: Path) -> list:
    """What an autograde of this course copy left behind: processes of its MPI clusters
    (validate runs the notebook in its own kernel), processes of the grading sandboxes
    (anything of the sandbox user ``nobody``, ``bwrap``, the grader's kernel, the
    sandboxed MPI ranks), and the cgroups and scratch folders of gradings that ended.
    Not the running gradings of other test modules beside this one (make test)."""
    import psutil

    from mpilab.autograder.sandbox import NOBODY
    from mpilab.autograder.scratch import unclaimed
    from mpilab.cluster import cluster_processes

    left = []
    for p in cluster_processes():
        try:
            if p.environ().get("MPILAB_NOTEBOOK", "").startswith(str(course)):
                left.append(p)
        except Exception:  # noqa: BLE001 - gone meanwhile
            pass
    for p in psutil.process_iter(["pid", "uids", "name", "cmdline", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue  # exited; this VM's init does not reap orphans
            cmd = " ".join(p.info["cmdline"] or [])
            if ((p.info["uids"].real == NOBODY or p.info["name"] == "bwrap"
                    or "mpilab.autograder.worker" in cmd or "mpilab-sandbox" in cmd
                    or "MPILAB_GRADER" in (p.environ() if p.pid != os.getpid() else {}))
                    and not _another_tests(p)):
                left.append(p)
        except (psutil.Error, OSError):
            pass
    return left + unclaimed()


# ---------------------------------------------------------------------------------------
# validate


def assert_source_validates(course: Path, lab: str) -> None:
    """The lab's source notebook passes every test under ``nbgrader validate`` (wall time
    printed), and its cluster is gone afterwards. Every lab's test module calls this."""
    t0 = time.perf_counter()
    res = nbgrader(course, "validate", f"../labs/{lab}/{lab}.ipynb")
    print(f"\n[validate] {lab} source in {time.perf_counter() - t0:.1f} s")
    assert "Success! Your notebook passes all the tests." in res.stdout, res.stdout + res.stderr
    assert not leftover_processes(course)


def released_failing_every_test(course: Path, lab: str) -> nbformat.NotebookNode:
    """The released notebook, after checking that ``nbgrader validate --invert`` finds
    every test failing on its stubs, that no hidden test nor solution was released, that
    stubs raise NotImplementedError, and that nothing outlived the validation."""
    res = nbgrader(course, "validate", "--invert", f"release/{lab}/{lab}.ipynb")
    assert "Success! The notebook does not pass any tests." in res.stdout, res.stdout + res.stderr
    release = nbformat.read(course / "autograder" / "release" / lab / f"{lab}.ipynb", 4)
    text = "\n".join(c.source for c in release.cells)
    assert "BEGIN HIDDEN TESTS" not in text
    assert "BEGIN SOLUTION" not in text and "raise NotImplementedError()" in text
    assert not leftover_processes(course)
    return release


def given_code(lab: str, grade_id: str, name: str, as_name: str) -> str:
    """The source of the lab's read-only cell `grade_id` with its function `name` renamed
    `as_name`: given code handed in unchanged as the student's answer."""
    nb = nbformat.read(REPO / "labs" / lab / f"{lab}.ipynb", 4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            return cell.source.replace(f"def {name}(", f"def {as_name}(")
    raise KeyError(grade_id)


def solution_with(lab: str, grade_id: str, old: str, new: str) -> str:
    """The lab's solution of `grade_id` with one piece of code replaced (which must be there)."""
    src = solutions(lab)[grade_id]
    assert old in src, old
    return src.replace(old, new)


def stubs_and_tests(release: nbformat.NotebookNode) -> tuple[list[str], list[str]]:
    """The released notebook's code cells that raise NotImplementedError, and its graded
    test cells."""
    stubs = [c.source for c in release.cells if c.cell_type == "code"
             and "raise NotImplementedError()" in c.source]
    tests = [c.source for c in release.cells if c.metadata.get("nbgrader", {}).get("grade")]
    return stubs, tests


# ---------------------------------------------------------------------------------------
# submissions


def errors_of(nb, grade_id: str) -> str:
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            return "\n".join(f"{o.get('ename')}: {o.get('evalue')}" for o in cell.outputs
                             if o.output_type == "error")
    raise KeyError(grade_id)


HOSTILE_PATCH = '''
import mpilab.grading as _g


def _always_pass(*args, **kwargs):
    return None


for _name in ("expect", "expect_equal", "expect_close", "expect_per_rank", "expect_timing"):
    setattr(_g, _name, _always_pass)  # what the test cells call through the module ...
    globals()[_name] = _always_pass  # ... and the names the setup cell imported
'''

RING_LOOP = '''
def ring_pass(comm, token):
    while True:
        pass
'''


def printed_by(nb, grade_id: str) -> str:
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    raise KeyError(grade_id)
