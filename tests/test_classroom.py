"""A class on one server (``scripts/classroom.sh``, ``make classroom``), with real parts only.

The module starts the hub from a roster of two students and an instructor (real Unix
accounts, PAM passwords, Debian's proxy), logs a student in through the hub's REST API and
starts their JupyterLab, goes through nbgrader's exchange as the three of them (the
instructor generates, releases, collects, autogrades and returns feedback; the students
fetch and submit), tries as one student to reach the other's home, submission and
feedback, and stops the class: no process of the hub or of the accounts is left, nothing
listens on its ports. The accounts and the state folder are removed at the end.

Root on Debian/Ubuntu with Debian's proxy (``scripts/setup.sh --classroom``); elsewhere
the script says why and the tests skip. The class's Python is built once into
``$MPILAB_CLASSROOM_TEST_VENV`` (default /srv/mpilab-test-venv, kept between runs, without
the compiled kernels: nothing here runs MPI) and takes minutes the first time.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
from pathlib import Path

import classroom_hub
import nbformat
import psutil
import pytest
from classroom_hub import free_ports
from conftest import ROOT
from nbgrader.utils import notebook_hash

from mpilab.autograder import edition

SCRIPT = ROOT / "scripts" / "classroom.sh"
TAG = f"{os.getpid() % 100000}"
STATE = Path(f"/srv/mpilab-pytest-{TAG}")  # world-searchable: the students reach the exchange
VENV = Path(os.environ.get("MPILAB_CLASSROOM_TEST_VENV", "/srv/mpilab-test-venv"))
A, B, TEACHER = f"mpa{TAG}", f"mpb{TAG}", f"mpt{TAG}"
COURSE = "mpilab"
EXCHANGE = STATE / "exchange" / COURSE
LAB = "ps1"


PORT = free_ports()
ENV = {**os.environ, "MPILAB_CLASSROOM_DIR": str(STATE), "MPILAB_CLASSROOM_PORT": str(PORT),
       "MPILAB_CLASSROOM_VENV": str(VENV), "MPILAB_KERNELS": "none",
       "MPILAB_CLASSROOM_IP": "127.0.0.1"}
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="root only")


def _script(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=ENV,
                          timeout=timeout)


def as_user(login: str, *cmd: str, cwd: str | Path | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
    """`cmd` as `login` (runuser), in a clean environment with the class's Python."""
    home = pwd.getpwnam(login).pw_dir
    env = ["env", "-i", f"HOME={home}", f"USER={login}", "LANG=C.UTF-8",
           f"PATH={VENV}/bin:/usr/local/bin:/usr/bin:/bin",
           f"MPILAB_EXCHANGE={STATE / 'exchange'}"]  # as in a terminal of their server
    return subprocess.run(["runuser", "-u", login, "--", *env, *cmd], capture_output=True,
                          text=True, cwd=cwd or home, timeout=timeout)


def nbgrader(login: str, *args: str, cwd: str | Path | None = None) -> str:
    done = as_user(login, str(VENV / "bin" / "nbgrader"), *args, cwd=cwd, timeout=300)
    assert done.returncode == 0, f"nbgrader {' '.join(args)} as {login}:\n{done.stdout}{done.stderr}"
    return done.stdout + done.stderr


def refused(login: str, *cmd: str) -> str:
    """`cmd` as `login` fails with 'Permission denied' (or 'Operation not permitted')."""
    return classroom_hub.refused(as_user, login, *cmd)


def api(path: str, method: str = "GET", token: str | None = None,
        body: dict | None = None) -> tuple[int, dict]:
    return classroom_hub.api(PORT, path, method, token, body)


# --- without a hub -----------------------------------------------------------------------------
def test_the_class_nbgrader_config_names_the_private_plugins():
    from nbgrader.exchange.default import ExchangeReleaseFeedback, ExchangeSubmit
    from traitlets.config.loader import PyFileConfigLoader
    from traitlets.utils.importstring import import_item

    cfg = PyFileConfigLoader("nbgrader_config.py", str(ROOT / "classroom")).load_config()
    assert cfg.CourseDirectory.groupshared is True
    assert issubclass(import_item(cfg.ExchangeFactory.submit), ExchangeSubmit)
    assert issubclass(import_item(cfg.ExchangeFactory.release_feedback), ExchangeReleaseFeedback)


@needs_root
def test_readable_by_lets_one_account_read():
    """The ACL of a released feedback file: `nobody` reads it, `daemon` does not."""
    from mpilab.autograder.exchange import readable_by

    with tempfile.TemporaryDirectory(dir="/tmp") as d:  # pytest's own folders are root's alone
        os.chmod(d, 0o755)
        f = Path(d) / "feedback.html"
        f.write_text("yours")
        try:
            readable_by(str(f), pwd.getpwnam("nobody").pw_uid)
        except OSError as exc:
            pytest.skip(f"no POSIX ACLs here: {exc}")
        assert as_user_plain("nobody", "cat", str(f)).stdout == "yours"
        denied = as_user_plain("daemon", "cat", str(f))
        assert denied.returncode != 0 and "Permission denied" in denied.stderr


def as_user_plain(login: str, *cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", login, "--", *cmd], capture_output=True, text=True,
                          cwd="/", timeout=30)


@needs_root
def test_a_roster_is_checked_before_any_account_is_made(tmp_path):
    roster = tmp_path / "roster.txt"
    roster.write_text("good\nBad Name\n")
    done = _script("start", str(roster), timeout=60)
    assert done.returncode == 2 and "roster.txt:2" in done.stderr, done.stderr
    roster.write_text("root\n")
    done = _script("start", str(roster), timeout=60)
    assert done.returncode == 2 and "not the class's" in done.stderr, done.stderr
    with pytest.raises(KeyError):
        pwd.getpwnam("good")
    assert not STATE.exists()


# --- a class -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("a class needs root (accounts, PAM, the hub runs users' servers)")
    for name in (A, B, TEACHER):
        try:
            pwd.getpwnam(name)
            pytest.skip(f"an account {name} exists already")
        except KeyError:
            pass
    roster = tmp_path_factory.mktemp("classroom") / "roster.txt"
    roster.write_text(f"# the class\n{A}\n{B}\n{TEACHER} instructor\n")
    started = _script("start", str(roster), timeout=1200)  # the first run builds the venv
    if started.returncode == 2:
        shutil.rmtree(STATE, ignore_errors=True)
        pytest.skip(f"no class here: {started.stderr.strip()}")
    try:
        assert started.returncode == 0, (
            f"classroom.sh start failed ({started.returncode}):\n{started.stdout}{started.stderr}")
        passwords = {}
        for line in (STATE / "passwords").read_text().splitlines():
            login, password, _ = line.split()
            passwords[login] = password
        yield passwords
    finally:
        _script("stop", timeout=300)
        removed = _script("remove", timeout=300)
        assert removed.returncode == 0, removed.stdout + removed.stderr
        for name in (A, B, TEACHER):
            with pytest.raises(KeyError):
                pwd.getpwnam(name)
        assert not STATE.exists()


@pytest.mark.slow
def test_accounts_homes_and_passwords(classroom):
    assert set(classroom) == {A, B, TEACHER}
    st = (STATE / "passwords").stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o600), "the passwords are root's alone"
    assert {A, B} <= set(grp.getgrnam("mpilab-students").gr_mem)
    assert TEACHER in grp.getgrnam("mpilab-instructors").gr_mem
    for login in (A, B, TEACHER):
        home = Path(pwd.getpwnam(login).pw_dir)
        st = home.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (pwd.getpwnam(login).pw_uid, 0o700)
    # the instructor's copy of the course, for the formgrader
    assert (Path(pwd.getpwnam(TEACHER).pw_dir) / "mpilab" / "autograder").is_dir()
    # each student's own copy of the students' edition: the lectures, the labs as released,
    # the reference data, and nothing a student must not see
    for login in (A, B):
        course = Path(pwd.getpwnam(login).pw_dir) / "mpilab"
        assert (course / "lectures" / "00-mpi-in-a-notebook.md").is_file(), login
        assert not (course / "autograder").exists() and not (course / "tests").exists()
        owners = {p.stat().st_uid for p in course.rglob("*")}
        assert owners == {pwd.getpwnam(login).pw_uid}, (login, owners)
        assert not set(edition.leaks(course)) - set(edition.KNOWN), edition.leaks(course)
    modes = {d: stat.S_IMODE((EXCHANGE / d).stat().st_mode) for d in ("outbound", "inbound", "feedback")}
    assert modes == {"outbound": 0o2775, "inbound": 0o3773, "feedback": 0o2771}
    assert (EXCHANGE / "inbound").stat().st_uid == 0


@pytest.mark.slow
def test_a_student_logs_in_through_the_hub_and_gets_the_students_lab(classroom):
    code, _ = api(f"/hub/api/users/{A}/tokens", "POST",
                  body={"auth": {"username": A, "password": "not-the-password"}})
    assert code == 403, "a wrong password gets no token"
    token = log_in_and_start(A, classroom[A])
    code, status = api(f"/user/{A}/api/status", token=token)
    assert code == 200, code
    # it runs as the student, with the students' JupyterLab: the Assignment List, no formgrader
    mine = [p for p in psutil.process_iter(["username", "cmdline"])
            if p.info["username"] == A and any("jupyterhub-singleuser" in a
                                                for a in p.info["cmdline"] or ())]
    assert mine, f"no jupyterhub-singleuser of {A}"
    config_path = mine[0].environ()["JUPYTER_CONFIG_PATH"]
    assert config_path.endswith("/jupyter/student") and "classroom-student" in config_path
    assert api(f"/user/{A}/formgrader", token=token)[0] == 404
    code, courses = api(f"/user/{A}/assignments?course_id={COURSE}", token=token)
    assert code == 200 and courses.get("success"), courses


@pytest.mark.slow
def test_the_instructor_gets_the_formgrader(classroom):
    token = log_in_and_start(TEACHER, classroom[TEACHER])
    code, _ = api(f"/user/{TEACHER}/formgrader/manage_assignments", token=token)
    assert code == 200, code


def log_in_and_start(login: str, password: str) -> str:
    """A token from the hub for `login`'s password (PAM), and their server started."""
    return classroom_hub.log_in_and_start(PORT, login, password)


def _course_of_the_instructor() -> Path:
    """A one-notebook assignment in a course folder of the instructor's, generated."""
    course = Path(pwd.getpwnam(TEACHER).pw_dir) / "course"
    source = course / "source" / LAB
    source.mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("answer = 42", metadata={"nbgrader": {
        "grade": False, "solution": True, "locked": False, "task": False,
        "grade_id": "answer", "schema_version": 3}})]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, source / f"{LAB}.ipynb")
    subprocess.run(["chown", "-R", f"{TEACHER}:", str(course)], check=True)
    return course


@pytest.mark.slow
def test_students_cannot_reach_each_others_work(classroom):
    course = _course_of_the_instructor()
    nbgrader(TEACHER, "generate_assignment", LAB, cwd=course)
    nbgrader(TEACHER, "release_assignment", LAB, cwd=course)
    for student in (A, B):
        nbgrader(student, "fetch_assignment", LAB)
        nbgrader(student, "submit", LAB)  # nbgrader submit as a student works
    inbound = EXCHANGE / "inbound"
    b_submission = next(inbound.glob(f"{B}+{LAB}+*"))
    b_notebook = b_submission / f"{LAB}.ipynb"
    assert stat.S_IMODE(b_notebook.stat().st_mode) == 0o640
    assert b_submission.stat().st_gid == grp.getgrnam("mpilab-instructors").gr_gid
    b_home = pwd.getpwnam(B).pw_dir
    assert Path(b_home, LAB, f"{LAB}.ipynb").exists()

    # as A: B's home, B's submission (even knowing its name), the exchange's listings
    refused(A, "ls", b_home)
    refused(A, "cat", f"{b_home}/{LAB}/{LAB}.ipynb")
    refused(A, "ls", str(inbound))
    refused(A, "ls", str(b_submission))
    refused(A, "cat", str(b_notebook))
    refused(A, "cp", "/etc/hostname", str(b_notebook))
    refused(A, "mv", str(b_submission), str(inbound / f"{A}+{LAB}+stolen"))
    refused(A, "touch", f"{EXCHANGE}/outbound/{LAB}/{LAB}.ipynb")

    # the instructor collects, grades, returns feedback; B fetches theirs, A cannot read it
    nbgrader(TEACHER, "collect", LAB, cwd=course)
    assert (course / "submitted" / B / LAB / f"{LAB}.ipynb").exists()
    nbgrader(TEACHER, "autograde", LAB, cwd=course)
    nbgrader(TEACHER, "generate_feedback", LAB, cwd=course)
    nbgrader(TEACHER, "release_feedback", LAB, cwd=course)
    released = {}  # each student's feedback file in the exchange, named as nbgrader names it
    for student in (A, B):
        secret = (course / "submitted" / student / LAB / "submission_secret.txt").read_text()
        released[student] = EXCHANGE / "feedback" / f"{notebook_hash(secret=secret, notebook_id=LAB)}.html"
    assert sorted((EXCHANGE / "feedback").glob("*.html")) == sorted(released.values())
    refused(A, "ls", str(EXCHANGE / "feedback"))
    refused(A, "cat", str(released[B]))
    for student in (A, B):  # each gets their own, and only theirs
        nbgrader(student, "fetch_feedback", LAB)
        home = pwd.getpwnam(student).pw_dir
        got = list(Path(home, LAB, "feedback").rglob(f"{LAB}.html"))
        assert len(got) == 1, got
        assert got[0].read_bytes() == released[student].read_bytes()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
def test_stop_leaves_nothing_running(classroom):
    hub = int((STATE / "hub" / "hub.pid").read_text())
    proxy = int((STATE / "hub" / "proxy.pid").read_text())
    assert psutil.pid_exists(hub) and psutil.pid_exists(proxy) and _listening(PORT)
    stopped = _script("stop", timeout=300)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert not psutil.pid_exists(hub) and not psutil.pid_exists(proxy)
    left = [(p.pid, p.info["username"], " ".join(p.info["cmdline"] or ())[:80])
            for p in psutil.process_iter(["username", "cmdline"])
            if p.info["username"] in (A, B, TEACHER)
            or str(STATE) in " ".join(p.info["cmdline"] or ())
            or "configurable-http-proxy" in " ".join(p.info["cmdline"] or ())
            and f"{PORT + 1}" in " ".join(p.info["cmdline"] or ())]
    assert not left, left
    assert not any(_listening(p) for p in (PORT, PORT + 1, PORT + 2))
    assert _script("status", timeout=30).returncode == 3
