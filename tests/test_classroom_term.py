"""A whole term on one class server, end to end, with real parts only (issue 27, item 5).

The instructor releases lab 00 through nbgrader's exchange. Three students (real Unix
accounts from a roster, PAM passwords) fetch it and run its cells on their own engines
(``cluster.start(4)`` in a kernel of their own server): one in Chromium, logged in through
the hub's login page, fetching and submitting in nbgrader's Assignment List; two through
the hub's REST API and their server's (:mod:`mpilab.bench.hub_client`, the kernel's
websocket). They submit a correct lab, a wrong one (Part C's model swapped) and a hostile
one (:func:`mpilab.autograder.course.hostile`: patches the grader from a correct answer,
leaves Part B as released, kills its kernel after a correct Part C). The instructor
collects, autogrades (the course's sandboxed grader), generates and releases feedback;
each student fetches their feedback through their server and gets theirs alone, and
cannot read a classmate's. Scores: correct full marks, wrong all but Part C, hostile what
its honest part earns. When the class stops nothing of it is left (classroom_hub.a_class).

Root on Debian with Debian's proxy and MPI; the class's Python, with the compiled kernels,
is built once into ``$MPILAB_CLASSROOM_MPI_VENV`` (default /srv/mpilab-test-venv-mpi, kept
between runs; minutes the first time).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from classroom_hub import a_class, refused
from conftest import ROOT
from lab_grading import errors_of

from mpilab.autograder.course import full, hostile, scores, solutions
from mpilab.bench.hub_client import Student, code_cells, fill_answers

pytestmark = [pytest.mark.slow]

TAG = f"{os.getpid() % 100000}"
STATE = Path(f"/srv/mpilab-pytest-term-{TAG}")
VENV = os.environ.get("MPILAB_CLASSROOM_MPI_VENV", "/srv/mpilab-test-venv-mpi")
CORRECT, WRONG, HOSTILE, TEACHER = (f"mptc{TAG}", f"mptw{TAG}", f"mpth{TAG}", f"mptt{TAG}")
COURSE, LAB = "mpilab", "lab00-mpi-basics"
NOTEBOOK = f"{LAB}/{LAB}.ipynb"
CELL_TIMEOUT = 600  # seconds one cell may run in a student's kernel (a guard, not a limit)

WRONG_TIMES = '''def ring_times_us(p, hop_us):
    """The model's (lap_us, shift_us) for a ring of p ranks, one hop taking hop_us."""
    return hop_us, p * hop_us  # swapped: a lap as one hop, a shift as p
'''


def answers_of(student: str) -> dict[str, str]:
    sol = solutions(LAB)
    if student == WRONG:
        return {**sol, "ring_times_us": WRONG_TIMES}
    if student == HOSTILE:
        return hostile(LAB)[0]
    return sol


def wanted(student: str) -> dict[str, float]:
    if student == WRONG:
        return {**full(LAB), "test_ring_times": 0.0}
    if student == HOSTILE:
        return hostile(LAB)[1]
    return full(LAB)


def graders_errors(course: str, cells: dict[str, list[str]]) -> dict[str, str]:
    """What the autograded notebooks printed as errors in `cells` (grade ids by student):
    the grader's own words for a score the test did not expect (a measured part under load,
    say, fails or is left ungradable, and only its message tells which)."""
    said = {}
    for name, ids in cells.items():
        path = Path(course, "autograded", name, LAB, f"{LAB}.ipynb")
        nb = nbformat.read(path, as_version=4) if path.exists() else None
        for gid in ids:
            said[f"{name}/{gid}"] = errors_of(nb, gid) if nb else f"no {path}"
    return said


@pytest.fixture
def term():
    with a_class([CORRECT, WRONG, HOSTILE], TEACHER, VENV, ROOT, STATE) as klass:
        yield klass


def headless(klass, name: str) -> tuple[Student, list]:
    """A student through the REST APIs: log in, start, fetch, answer, run every cell
    in a kernel of their server, save, submit. The cells run, in order."""
    student = Student(klass.url, name)
    student.log_in(klass.passwords[name])
    student.start_server()
    student.assignment("fetch", COURSE, LAB)
    nb = fill_answers(student.read_notebook(NOTEBOOK), answers_of(name))
    student.write_notebook(NOTEBOOK, nb)
    kernel = student.open_kernel(NOTEBOOK)
    try:
        runs = student.run_cells(kernel, code_cells(nb), timeout=CELL_TIMEOUT)
    finally:
        student.close_kernels()
    student.assignment("submit", COURSE, LAB)
    return student, runs


def wait_for_idle_kernel(student: Student, page, timeout: float = 180.0) -> None:
    """The browser's notebook has its kernel, started and idle (asked of the server)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        states = [s["kernel"]["execution_state"] for s in student.server("/api/sessions")
                  if s["path"] == NOTEBOOK]
        if states == ["idle"]:
            return
        assert time.monotonic() < deadline, f"no idle kernel for {NOTEBOOK}: {states}"
        page.wait_for_timeout(1000)


def in_chromium(klass, browser, name: str) -> Student:
    """A student in Chromium: the hub's login page, the Assignment List's Fetch, the
    answers typed into the notebook's solution cells (set through the server, as a save
    would), Run All Cells, save, the Assignment List's Submit."""
    from jupyterlab_harness import main_tab, screenshot_on_failure
    from playwright.sync_api import expect

    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    try:
        with screenshot_on_failure(page, "classroom-term-browser"):
            page.goto(f"{klass.url}/hub/login")
            page.fill("#username_input", name)
            page.fill("#password_input", klass.passwords[name])
            page.click("#login_submit")
            page.wait_for_url(re.compile(f"/user/{name}/lab"), timeout=180_000)
            page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=120_000)
            page.wait_for_selector("#jp-main-dock-panel", state="visible", timeout=60_000)

            def assignment_list():
                page.locator("#jp-menu-panel .lm-MenuBar-itemLabel",
                             has_text=re.compile("^Nbgrader$")).click()
                page.locator(".lm-Menu-itemLabel", has_text=re.compile("^Assignment List$")).click()
                expect(main_tab(page, "Assignments")).to_be_visible(timeout=30_000)

            assignment_list()
            fetch = page.locator("#released_assignments_list .list_item",
                                 has_text=LAB).locator("button", has_text="Fetch")
            fetch.click(timeout=60_000)
            expect(page.locator("#fetched_assignments_list", has_text=LAB)).to_be_visible(
                timeout=120_000)

            # the answers, saved as JupyterLab saves a notebook (the same PUT of the
            # contents API); then the browser opens it from disk
            student = Student(klass.url, name)
            student.log_in(klass.passwords[name])
            nb = fill_answers(student.read_notebook(NOTEBOOK), answers_of(name))
            student.write_notebook(NOTEBOOK, nb)
            # opened from the Assignment List, as a student opens it: the assignment's
            # row unfolds its notebooks, each a link
            links = page.locator("#fetched_assignments_list a", has_text=LAB)
            links.first.click()
            expect(links).to_have_count(2, timeout=30_000)
            links.nth(1).click()
            expect(main_tab(page, f"{LAB}.ipynb")).to_be_visible(timeout=60_000)
            cells = page.locator(".jp-Notebook .jp-CodeCell")
            expect(cells).to_have_count(len(code_cells(nb)), timeout=60_000)
            wait_for_idle_kernel(student, page)
            page.locator("#jp-menu-panel .lm-MenuBar-itemLabel", has_text=re.compile("^Run$")).click()
            page.locator(".lm-Menu-itemLabel", has_text=re.compile("^Run All Cells$")).click()
            # every code cell ran: a number in each prompt, none waiting ([*]) or skipped
            prompts = page.locator(".jp-Notebook .jp-CodeCell .jp-InputArea-prompt")
            page.wait_for_function(
                """n => { const ps = [...document.querySelectorAll(
                        '.jp-Notebook .jp-CodeCell .jp-InputArea-prompt')];
                        return ps.length === n && ps.every(p => /\\[\\d+\\]/.test(p.textContent)); }""",
                arg=len(code_cells(nb)), timeout=CELL_TIMEOUT * 1000, polling=2000)
            assert prompts.count() == len(code_cells(nb))
            page.keyboard.press("Control+s")
            expect(main_tab(page, f"{LAB}.ipynb")).not_to_have_class(
                re.compile("jp-mod-dirty"), timeout=30_000)
            main_tab(page, "Assignments").click()
            page.click("#refresh_assignments_list")
            page.locator("#fetched_assignments_list .list_item", has_text=LAB).locator(
                "button", has_text="Submit").click(timeout=60_000)
            expect(page.locator("#submitted_assignments_list", has_text=LAB)).to_be_visible(
                timeout=120_000)
    finally:
        context.close()
    return student


@pytest.mark.browser
# The instructor's autograde measures lab 00's ring as the instructor, a user of its own: the
# grading lock (mpilab.autograder.quiet) holds back that user's gradings and the students'
# servers, not the tests beside it, and beside phase 1's other worker a correct model's
# measured part once scored 0. Alone, as every test whose score rests on a measurement.
@pytest.mark.measures
@pytest.mark.timeout(3600)  # pytest-timeout's guard (600 s in pyproject.toml): a term is longer
def test_a_term(term, browser):
    klass = term
    course = klass.course_dir()
    klass.release(LAB)

    # three students, their own engines: one in Chromium, two headless
    students = {CORRECT: in_chromium(klass, browser, CORRECT)}
    runs = {}
    for name in (WRONG, HOSTILE):
        students[name], runs[name] = headless(klass, name)
    sources = code_cells(fill_answers(students[WRONG].read_notebook(NOTEBOOK), {}))
    graded = {i for i, s in enumerate(sources) if "check_ring_times(" in s and "def " not in s}
    # the wrong model fails its check in the student's own run, and only that
    failed = [r.index for r in runs[WRONG] if not r.ok]
    assert len(runs[WRONG]) == len(sources), runs[WRONG][-1]
    assert failed and set(failed) <= graded, [(r.index, r.ename, r.evalue) for r in runs[WRONG]]
    # the hostile one's kernel dies where it kills it (os._exit after Part C's answer)
    assert runs[HOSTILE][-1].status == "died", runs[HOSTILE][-1]

    # the instructor: collect, autograde, feedback
    for step in ("collect", "autograde", "generate_feedback", "release_feedback"):
        klass.nbgrader(TEACHER, step, LAB, cwd=course)
    got = scores(Path(course).parent, LAB, list(students))
    assert got == {name: wanted(name) for name in students}, (got, graders_errors(
        course, {n: [g for g, v in got[n].items() if v != wanted(n).get(g)] for n in got}))
    assert sum(got[WRONG].values()) < sum(full(LAB).values())

    # each fetches their own feedback through their server, and only theirs
    feedback = {}
    for name, student in students.items():
        student.assignment("fetch_feedback", COURSE, LAB)
        home = Path(pwd.getpwnam(name).pw_dir)
        mine = list((home / LAB / "feedback").rglob(f"{LAB}.html"))
        assert len(mine) == 1, mine
        given = Path(course, "feedback", name, LAB, f"{LAB}.html").read_bytes()
        assert mine[0].read_bytes() == given
        feedback[name] = mine[0]
    assert len({p.read_bytes() for p in feedback.values()}) == 3
    exchange = klass.state / "exchange" / COURSE / "feedback"
    for name, other in ((WRONG, CORRECT), (HOSTILE, WRONG), (CORRECT, HOSTILE)):
        refused(klass.as_user, name, "cat", str(feedback[other]))
        refused(klass.as_user, name, "ls", str(exchange))
        # nor through the hub: a student's token opens their own server only
        code, _ = students[name].call(f"/user/{other}/api/contents/{LAB}")
        assert code in (403, 404), code
    for student in students.values():
        student.stop_server()


# Alone (make test's last phase), as test_a_term: beside phase 1's other worker, one of the
# two students' 4 engines did not start within the notebook's 60 s (clean-clone CI,
# 2026-11-29, 2 cores: 8 engines plus another test module's jobs).
@pytest.mark.measures
@pytest.mark.timeout(3600)
def test_the_class_benchmark(tmp_path):
    """``python -m mpilab.bench classroom --students 2``: a class of its own, two students
    side by side through the REST APIs; every server, cluster and cell worked, nothing
    was left, and the JSON says what ran where (no time is judged: a loaded machine)."""
    if os.geteuid() != 0:
        pytest.skip("a class needs root")
    out = tmp_path / "classroom.json"
    done = subprocess.run(
        [sys.executable, "-m", "mpilab.bench", "classroom", "--students", "2",
         "--venv", VENV, "--json", str(out)],
        capture_output=True, text=True, timeout=3000, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode == 2 and "no class here" in done.stderr:
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(out.read_text())
    meta, records = doc["meta"], doc["records"]
    for key in ("hostname", "cores", "mpi_library", "mpi_library_version", "settings",
                "oversubscribed", "engines", "wall_s", "loadavg_before"):
        assert key in meta, key
    assert meta["settings"]["students"] == 2 and meta["engines"] == 8
    assert meta["oversubscribed"] == (8 > meta["cores"])
    students, total = records[:-1], records[-1]
    assert [r["impl"] for r in students] == ["student", "student"] and total["impl"] == "class"
    for r in students:
        assert r["failures"] == [], r["failures"]
        # a measured check may fail a correct answer on a loaded machine, or say it cannot
        # judge it (Ungradable) when the load keeps its measurement from settling (issue
        # 27, item 4): listed apart, in words
        assert all("measured" in x or "could not be made stable" in x
                   for x in r["measured_checks_failed"]), r["measured_checks_failed"]
        assert r["server_start_s"] > 0
        assert len(r["cluster_start_s"]) == 2  # lecture 00's cluster, lab 00's
        assert r["cells"] > 20 and 0 < r["cell_p50_s"] <= r["cell_p95_s"]
    assert total["failures"] == 0 and total["left"] == []
    assert total["cells"] == sum(r["cells"] for r in students)
    for key in ("server_start", "cluster_start"):
        assert 0 < total[f"{key}_p50_s"] <= total[f"{key}_p95_s"]
    assert "oversubscribed" in done.stdout or not meta["oversubscribed"]
