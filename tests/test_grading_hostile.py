"""Hostile submissions, autograded for real by nbgrader with the course's configuration.

Every case is a notebook a student could hand in, written to attack the grading: a
deadlock, MPI_Abort, a rank or the kernel exiting, killing the kernel's parent, an
endless loop, sleeping forever, a segfault, an output flood, a process swarm, a filled
/dev/shm, more memory than allowed, reading the hidden tests, the solutions and the
gradebook, deleting the course, patching builtins / NumPy / importlib / mpilab, shipping a
module that shadows the course's. Most attack one part and answer the other honestly.
For each, the test asserts:

* the autograde ends (nbgrader never records "Removing failed assignment") and the
  gradebook has the student's row;
* the score is what the honest parts earn, to the point;
* the feedback is written and holds no line of the hidden tests or of the solutions, nor
  the course's paths; the message says what went wrong;
* the course is intact (source notebooks, gradebook, other submissions);
* nothing is left: no process of the sandbox, no grader kernel, no MPI rank, no cgroup,
  no scratch folder, no shared-memory segment on the host.

Wall times are printed (``pytest -s``), not asserted beyond a ceiling that only catches a
hang: ``python -m mpilab.bench autograde`` measures them against the course's bars.
The attacks get the real paths of this course copy, as if the student had guessed them.
"""

from __future__ import annotations

import json
import os
import re
from html import unescape
from pathlib import Path
from typing import Any

import nbformat
import pytest
from grading_batch import graded_notebook
from lab_grading import RING_LOOP, errors_of, leftover_processes, printed_by
from side_by_side_grading import HANG_CEILING, grade_all

from mpilab.autograder.course import (
    PATCH_EVERYTHING,
    REPO,
    checks_of,
    full,
    make_course,
    solutions,
    submit,
)

pytestmark = [pytest.mark.slow, pytest.mark.graded_timing]

LAB0 = "lab00-mpi-basics"
OTHER_LABS = ["lab01-pingpong", "lab02-halo", "lab03-one-sided", "lab05-collectives",
              "lab06-allgather"]


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    root = make_course(tmp_path_factory.mktemp("hostile"), [LAB0, *OTHER_LABS])
    for lab in [LAB0, *OTHER_LABS]:  # a classmate's work, for the attacks to go after
        submit(root, lab, "classmate", solutions(lab))
    return root


def paths(course: Path, lab: str) -> dict[str, str]:
    ag = course / "autograder"
    return {"@SOURCE@": str(course / "labs" / lab / f"{lab}.ipynb"),
            "@LABS@": str(course / "labs"), "@COURSE@": str(ag),
            "@GRADEBOOK@": str(ag / "gradebook.db"),
            "@OTHER@": str(ag / "submitted" / "classmate" / lab / f"{lab}.ipynb"),
            "@LABNAME@": lab}


def fill(code: str, course: Path, lab: str) -> str:
    for k, v in paths(course, lab).items():
        code = code.replace(k, v)
    return code


def secrets(lab: str) -> list[str]:
    """Distinctive lines of the lab's hidden tests and solutions (what must never leak)."""
    nb = nbformat.read(REPO / "labs" / lab / f"{lab}.ipynb", 4)
    out = []
    for cell in nb.cells:
        for region in ("HIDDEN TESTS", "SOLUTION"):
            for m in re.finditer(rf"### BEGIN {region}\n(.*?)### END {region}", cell.source,
                                 re.S):
                out += [ln.strip() for ln in m.group(1).splitlines() if len(ln.strip()) > 30]
    return sorted(set(out))


def hidden_line_number(lab: str) -> int:
    """A line of the source notebook's file that is inside a hidden test."""
    lines = (REPO / "labs" / lab / f"{lab}.ipynb").read_text().splitlines()
    first = next(i for i, ln in enumerate(lines) if "BEGIN HIDDEN TESTS" in ln)
    return first + 2


def course_state(course: Path, lab: str, new: list[str] = (), graded: list[str] = ()) -> dict:
    """What a submission must not change: the lab's source, its release, the submissions
    (besides the `new` ones, submitted for this run) and the gradebook's students (besides
    the `graded` ones, whom the run added)."""
    from nbgrader.api import Gradebook

    ag = course / "autograder"
    with Gradebook(f"sqlite:///{ag / 'gradebook.db'}") as gb:
        students = {s.id for s in gb.students}
    return {"source": (course / "labs" / lab / f"{lab}.ipynb").read_bytes(),
            "config": (ag / "nbgrader_config.py").read_bytes(),
            "release": sorted(p.name for p in (ag / "release" / lab).iterdir()),
            "submitted": sorted({p.name for p in (ag / "submitted").iterdir()} - set(new)),
            "students": sorted(students - set(graded))}


def host_shm() -> set[str]:
    return {n for n in os.listdir("/dev/shm")
            if os.stat(os.path.join("/dev/shm", n)).st_uid == 65534}


def feedback(course: Path, lab: str, student: str) -> str:
    return (course / "autograder" / "feedback" / student / lab / f"{lab}.html").read_text()


def visible(html: str) -> str:
    """What a browser shows of `html`: tags gone, entities decoded, whitespace collapsed
    (highlighted code is split into many spans, so raw HTML hides a leaked line)."""
    text = re.sub(r"<style.*?</style>|<script.*?</script>", " ", html, flags=re.S)
    return squash(unescape(re.sub(r"<[^>]+>", "", text)))


def squash(text: str) -> str:
    return " ".join(text.split())


def notebook_text(path: Path) -> str:
    return squash("\n".join(c.source for c in nbformat.read(path, 4).cells))


def assert_no_leak(course: Path, lab: str, student: str) -> None:
    """The student's feedback shows no hidden test and no solution they did not write
    themselves (nor that the released notebook shows), and no course path."""
    shown = visible(feedback(course, lab, student))
    ag = course / "autograder"
    public = notebook_text(ag / "release" / lab / f"{lab}.ipynb")
    own = notebook_text(ag / "submitted" / student / lab / f"{lab}.ipynb")
    leaked = [s for s in map(squash, secrets(lab))
              if s in shown and s not in own and s not in public]
    assert not leaked, f"{student}: the feedback shows hidden tests or solutions: {leaked[:3]}"
    assert "BEGIN HIDDEN TESTS" not in shown or "BEGIN HIDDEN TESTS" in own
    cells = graded_notebook(course, lab, student)["cells"]
    outputs = json.dumps([c.get("outputs", []) for c in cells])
    for p in (str(course), str(REPO)):
        assert p not in outputs, f"{student}: an output shows a course path: {p}"
        # the feedback repeats the student's own code, which may name the path itself
        assert p not in shown or p in own, f"{student}: the feedback shows a course path: {p}"


def test_the_leak_check_sees_a_leak_in_highlighted_html():
    """The check itself: a hidden-test line rendered as nbconvert highlights it is found."""
    line = secrets(LAB0)[0]
    html = "<div class=highlight><pre>" + "".join(
        f'<span class="n">{unescape_inv(ch)}</span>' for ch in line) + "</pre></div>"
    assert squash(line) in visible(html)


def unescape_inv(ch: str) -> str:
    return {"<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;", "'": "&#39;"}.get(ch, ch)


# ---------------------------------------------------------------------------------------
# the attacks (answer-cell code)

CORRECT0 = solutions(LAB0)

ABORT = '''
def ring_pass(comm, token):
    comm.Abort(3)
'''

RANK_EXITS = '''
def ring_pass(comm, token):
    import os
    if comm.Get_rank() == 1:
        os._exit(1)
    return comm.recv(source=1)
'''

KILLS_PARENTS = '''
import os
import signal

for _pid in (os.getppid(), 1):  # the kernel's parent and the sandbox's init
    try:
        os.kill(_pid, signal.SIGKILL)
    except OSError as exc:
        print("could not kill", _pid, exc)


def ring_pass(comm, token):
    import os, signal
    os.kill(os.getppid(), signal.SIGKILL)  # the rank's launcher
'''

SLEEPS = '''
def ring_exchange(comm, data):
    import time
    time.sleep(10 ** 9)
'''

SEGFAULT_TOP = CORRECT0["ring_pass"] + '''

import ctypes
ctypes.string_at(0)  # the kernel crashes here: ring_pass above is lost with it
'''

EXIT_TOP = CORRECT0["ring_pass"] + '''

import os
os._exit(0)
'''

DEAF_LOOP = CORRECT0["ring_exchange"] + '''

import signal
signal.signal(signal.SIGINT, signal.SIG_IGN)  # an interrupt no longer stops it
while True:
    pass
'''

FLOOD_TOP = CORRECT0["ring_pass"] + '''

for _ in range(200):
    print("x" * 250_000)
'''

FLOOD_RANKS = CORRECT0["ring_exchange"].replace(
    "    rank, size = comm.Get_rank(), comm.Get_size()",
    "    rank, size = comm.Get_rank(), comm.Get_size()\n"
    "    import sys\n    for _ in range(40):\n        sys.stdout.write('y' * 250_000)", 1)

SWARM_TOP = CORRECT0["ring_pass"] + '''

import subprocess
_procs = []
try:
    for _ in range(3000):
        _procs.append(subprocess.Popen(["sleep", "100000"], start_new_session=True))
except OSError as exc:
    print(f"started {len(_procs)} processes, then: {exc}")
'''

SHM_TOP = CORRECT0["ring_exchange"] + '''

import os
_chunk = b"z" * (64 << 20)
_written = 0
try:
    with open("/dev/shm/fill", "wb") as f:
        for _ in range(64):
            f.write(_chunk)
            _written += len(_chunk)
except OSError as exc:
    print(f"/dev/shm full after {_written >> 20} MiB: {exc}")
'''

MEMORY_TOP = CORRECT0["ring_pass"] + '''

import numpy as np
_hog = [np.ones(1 << 27) for _ in range(200)]  # 200 GiB, touched
'''

MEMORY_RANKS = '''
def ring_exchange(comm, data):
    import numpy as np
    hog = [np.ones(1 << 27) for _ in range(200)]
    return data
'''

READ_AND_DELETE = '''
import glob
import os
import shutil

for _p in ["@SOURCE@", "@GRADEBOOK@", "@OTHER@", "@COURSE@/nbgrader_config.py"]:
    try:
        with open(_p, "rb") as _f:
            print("READ", _p, _f.read().decode(errors="replace"))
    except OSError as exc:
        print("could not read", _p, type(exc).__name__)
for _root in ["/tmp", "/work", "/root", "/home", "/srv", "/var/tmp", "@LABS@", "@COURSE@"]:
    for _p in glob.glob(_root + "/**/*.ipynb", recursive=True):
        _text = open(_p, errors="replace").read()
        if "BEGIN HIDDEN TESTS" in _text and "@LABNAME@" in _text:
            print("FOUND", _p, _text)
for _p in ["@COURSE@", "@LABS@", "@GRADEBOOK@"]:
    shutil.rmtree(_p, ignore_errors=True)
    try:
        os.remove(_p)
    except OSError:
        pass
'''

SNOOP_RANKS = '''
def ring_pass(comm, token):
    """Returns the hidden tests if it can read them, else raises from a frame that names
    them (a grader that reads the file a frame names would quote it)."""
    try:
        return open("@SOURCE@").read()
    except OSError:
        exec(compile("\\n" * (@LINE@ - 1) + "raise ValueError('nothing to read')",
                     "@SOURCE@", "exec"))
'''

SHADOW_MODULE = '''
open("/tmp/mpilab-shadow-was-imported", "w").write(__file__)
raise ImportError("this is not the course's mpilab")
'''

RING_WRONG = '''
def ring_pass(comm, token):
    return token
'''

EXCHANGE_NAIVE = '''
def ring_exchange(comm, data):
    received = np.empty_like(data)
    comm.Send(data, dest=(comm.Get_rank() + 1) % comm.Get_size())
    comm.Recv(received, source=(comm.Get_rank() - 1) % comm.Get_size())
    return received
'''


def lab0_cases(course: Path) -> dict[str, tuple[dict[str, str], dict[str, float], Any]]:
    """student -> (answers, expected scores, what its failing part must say: a text, or a
    tuple of texts one of which it must say)."""
    ok = CORRECT0
    A, B = "test_ring_pass", "test_ring_exchange"

    def score(a, b):
        return {A: a, B: b}

    f = lambda code: fill(code, course, LAB0)  # noqa: E731
    cases = {
        "abort": ({**ok, "ring_pass": ABORT}, score(0, 3), "MPI_Abort"),
        "rank-exits": ({**ok, "ring_pass": RANK_EXITS}, score(0, 3), "crashed"),
        # the first rank kills the launcher; the others, orphaned, may not kill the
        # sandbox's init (root's) and say so, unless the grader saw the job die first
        "kills-parents": ({**ok, "ring_pass": KILLS_PARENTS}, score(0, 3),
                          ("crashed", "PermissionError: [Errno 1] Operation not permitted",
                           # the ranks can return (None) before the launcher's death is seen
                           "rank 0 returned None")),
        "loops-sleeps": ({"ring_pass": RING_LOOP, "ring_exchange": SLEEPS}, score(0, 0),
                         "did not finish"),
        "segfault": ({**ok, "ring_pass": SEGFAULT_TOP}, score(0, 3), "not defined"),
        "exits": ({**ok, "ring_pass": EXIT_TOP}, score(0, 3), "not defined"),
        "deaf-loop": ({**ok, "ring_exchange": DEAF_LOOP}, score(3, 0), ""),
        "floods": ({"ring_pass": FLOOD_TOP, "ring_exchange": FLOOD_RANKS}, score(3, 3), ""),
        "swarm-shm": ({"ring_pass": SWARM_TOP, "ring_exchange": SHM_TOP}, score(3, 3), ""),
        "memory": ({"ring_pass": MEMORY_TOP, "ring_exchange": MEMORY_RANKS}, score(0, 0),
                   "not defined"),
        "secrets": ({**ok, "ring_pass": f(SNOOP_RANKS.replace("@LINE@", str(
            hidden_line_number(LAB0)))) + f(READ_AND_DELETE)}, score(0, 3), "ValueError"),
        "patch-wrong": ({"ring_pass": PATCH_EVERYTHING + RING_WRONG,
                         "ring_exchange": EXCHANGE_NAIVE}, score(0, 0), "expected"),
        "patch-right": ({"ring_pass": PATCH_EVERYTHING + ok["ring_pass"],
                         "ring_exchange": ok["ring_exchange"]}, score(3, 3), ""),
        "shadow": (dict(ok), score(3, 3), ""),
    }
    # Part C (a prediction, plain Python): full marks where the case keeps the correct
    # ring_times_us, none where it is left as the released stub
    C = "test_ring_times"
    return {s: (a, {**w, C: 2.0 if a.get("ring_times_us") == ok["ring_times_us"] else 0.0}, m)
            for s, (a, w, m) in cases.items()}


# Alone (make test's last phase), not beside other gradings: once, graded beside two other
# lab modules, the memory hog was not killed by its cgroup's limit within the cell's 30 s
# (CellTimeoutError, not KernelDied). Not understood yet; the grade is the same (no marks).
@pytest.mark.measures
def test_lab00_hostile_corpus(course):
    cases = lab0_cases(course)
    before = course_state(course, LAB0)
    shm_before = host_shm()
    marker = Path("/tmp/mpilab-shadow-was-imported")
    marker.unlink(missing_ok=True)
    got = grade_all(course, LAB0, {s: c[0] for s, c in cases.items()},
                    extra_files={"shadow": {"mpilab.py": SHADOW_MODULE}})
    wrong = {s: (got["scores"][s], want) for s, (_a, want, _m) in cases.items()
             if got["scores"][s] != want}
    assert not wrong, f"scores (got, expected): {wrong}"
    for student, (_answers, want, says) in cases.items():
        nb = graded_notebook(course, LAB0, student)
        if says:
            failing = [g for g, pts in want.items() if pts == 0]
            text = "\n".join(errors_of(nb, g) for g in failing)
            alternatives = (says,) if isinstance(says, str) else says
            assert any(a in text for a in alternatives), (student, text)
        assert_no_leak(course, LAB0, student)
    # what the attacks did not achieve
    after = course_state(course, LAB0, new=list(cases), graded=[*cases, "classmate"])
    assert after == before, "the course directory was changed"
    assert not marker.exists(), "the grader imported a module the submission shipped"
    assert not leftover_processes(course)
    assert host_shm() == shm_before
    secrets_nb = graded_notebook(course, LAB0, "secrets")
    assert "could not read" in printed_by(secrets_nb, "ring_pass")
    assert "READ " not in printed_by(secrets_nb, "ring_pass")
    assert "FOUND " not in printed_by(secrets_nb, "ring_pass")
    floods = graded_notebook(course, LAB0, "floods")
    assert len(json.dumps(floods["cells"])) < 3 << 20, "an output flood was kept"
    assert "were not kept" in printed_by(floods, "ring_pass")
    assert "KernelDied" in errors_of(graded_notebook(course, LAB0, "segfault"), "ring_pass")
    assert "KernelDied" in errors_of(graded_notebook(course, LAB0, "memory"), "ring_pass")
    assert "CellTimeoutError" in errors_of(graded_notebook(course, LAB0, "deaf-loop"),
                                           "ring_exchange")
    assert max(got["times"]) < HANG_CEILING


# ---------------------------------------------------------------------------------------
# every other lab: the attacks that matter there, beside honest parts


def lab_cases(course: Path, lab: str) -> tuple[dict[str, str], dict[str, float]]:
    """One submission: part 1 patches everything (honest otherwise), part 2 kills its
    kernel after defining a right answer, part 3 snoops and deletes (honest otherwise),
    the rest right; the expected scores."""
    sol = solutions(lab)
    ids = list(sol)
    want = dict(full(lab))
    answers = dict(sol)
    answers[ids[0]] = PATCH_EVERYTHING + sol[ids[0]]
    answers[ids[1]] = sol[ids[1]] + "\n\nimport os\nos._exit(0)\n"
    snoop = ids[2] if len(ids) > 2 else ids[0]  # lab 05 has two answer cells
    answers[snoop] = answers[snoop] + "\n" + fill(READ_AND_DELETE, course, lab)
    for gid in checks_of(lab, ids[1]):
        want[gid] = 0.0
    return answers, want


@pytest.mark.parametrize("lab", OTHER_LABS)
def test_every_lab_survives_its_hostile_submission(course, lab):
    answers, want = lab_cases(course, lab)
    mine = {"new": ["hostile"], "graded": ["hostile", "classmate"]}  # added by the runs
    before = course_state(course, lab, **mine)
    got = grade_all(course, lab, {"hostile": answers})
    assert got["scores"]["hostile"] == want
    assert_no_leak(course, lab, "hostile")
    assert course_state(course, lab, **mine) == before
    assert not leftover_processes(course)
    nb = graded_notebook(course, lab, "hostile")
    killed = list(solutions(lab))[1]
    assert "KernelDied" in errors_of(nb, killed)
    assert max(got["times"]) < HANG_CEILING


def test_the_autograde_benchmark_grades_as_expected(tmp_path):
    """``python -m mpilab.bench autograde`` (the bars live there): it runs, and its hostile
    submission scores exactly what its honest parts earn."""
    import subprocess
    import sys

    out = tmp_path / "autograde.json"
    res = subprocess.run([sys.executable, "-m", "mpilab.bench", "autograde", "--labs", LAB0,
                          "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    doc = json.loads(out.read_text())
    recs = {r["impl"]: r for r in doc["records"]}
    assert set(recs) == {"correct", "hostile"}
    assert recs["correct"]["score"] == recs["correct"]["max_score"] == 8
    assert recs["hostile"]["scores_as_expected"] and recs["hostile"]["score"] == 3
    assert all(r["nbgrader_ok"] and r["t_s"] > 0 for r in recs.values())
    assert doc["meta"]["sandbox"] and "cores" in doc["meta"] and "mpi_library" in doc["meta"]


def test_the_class_benchmark_grades_a_class_side_by_side(tmp_path):
    """``python -m mpilab.bench autograde --students N``: a class (every fifth hostile)
    graded side by side, each submission scored as it would be alone, and the class's
    rate and p95 reported against the course's bar."""
    import subprocess
    import sys

    out = tmp_path / "class.json"
    res = subprocess.run([sys.executable, "-m", "mpilab.bench", "autograde", "--labs", LAB0,
                          "--students", "5", "--jobs", "3", "--json", str(out)],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    doc = json.loads(out.read_text())
    subs = [r for r in doc["records"] if r["impl"] != "class"]
    [cls] = [r for r in doc["records"] if r["impl"] == "class"]
    assert [r["impl"] for r in subs] == ["correct"] * 4 + ["hostile"]
    assert all(r["scores_as_expected"] and r["nbgrader_ok"] for r in subs), subs
    assert cls["students"] == 5 and cls["jobs"] == 3 and cls["scores_as_expected"]
    assert 0 < cls["p95_s"] <= cls["wall_s"] and cls["per_minute"] > 0
    assert cls["bar_s"] == 60.0  # lab 00: 6 minutes for 30, so 1 for 5
    assert doc["meta"]["settings"]["students"] == 5
