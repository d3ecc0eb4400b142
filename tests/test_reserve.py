"""mpilab.autograder.reserve: a grader's measurement holds a class's servers back.

Real cgroups (root): a "student" is a busy process in a user's group of a class made by
mpilab.autograder.limits, as the hub makes one; whether it runs is read from its CPU time
(/proc/PID/stat), whether its group is frozen from cgroup.events.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time

import pytest

from mpilab.autograder import quiet, reserve
from mpilab.autograder.limits import Group, Limits, end_class, preexec

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="cgroups need root")
CTX = mp.get_context("fork")


def _ticks(pid: int) -> int:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _runs(pid: int, seconds: float = 1.0) -> bool:
    """Whether the process got CPU time within `seconds` (it spins: it gets some)."""
    start = _ticks(pid)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if _ticks(pid) > start:
            return True
    return False


def _frozen(group: Group) -> bool:
    d = group.dirs()["unified"]
    return "frozen 1" in open(os.path.join(d, "cgroup.events")).read()


@pytest.fixture
def klass():
    name = f"mpilab-reserve-{os.getpid()}"
    yield name
    end_class(name)


@pytest.fixture
def student(klass):
    """A busy process in the user's group `student` of the class."""
    group = Group(klass, "student")
    if "unified" not in group.where or "cpu" not in group.where:
        pytest.skip("no cgroup v2 hierarchy or no cpu controller here")
    group.create(Limits(cpus=1))
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                            preexec_fn=preexec(group, Limits()))
    try:
        assert _runs(proc.pid, 10)
        yield group, proc
    finally:
        proc.kill()
        proc.wait()


def test_modes_from_the_environment():
    assert reserve.mode({}) == "freeze"
    assert reserve.mode({reserve.ENV: "Weight"}) == "weight"
    with pytest.raises(ValueError, match="MPILAB_CLASSROOM_GRADER"):
        reserve.mode({reserve.ENV: "fifo"})
    assert reserve.class_name({"MPILAB_CLASSROOM_DIR": "/srv/mpilab-fall/"}) == "mpilab-fall"
    assert reserve.plan("freeze", "no-such-class-here") == []


def test_a_busy_student_is_frozen_while_held_and_runs_after(student, klass):
    group, proc = student
    with reserve.reserved("freeze", klass) as held:
        assert [os.path.dirname(e[0]) for e in held] == [group.dirs()["unified"]]
        assert _frozen(group) and not _runs(proc.pid)
    assert not _frozen(group) and _runs(proc.pid, 10)


def test_thawed_when_the_measurement_raises(student, klass):
    group, proc = student
    with pytest.raises(ValueError, match="a failed measurement"), reserve.reserved("freeze", klass):
        assert _frozen(group)
        raise ValueError("a failed measurement")
    assert not _frozen(group) and _runs(proc.pid, 10)


def test_off_holds_nothing_back(student, klass):
    group, proc = student
    with reserve.reserved("off", klass) as held:
        assert held == [] and not _frozen(group) and _runs(proc.pid, 10)


def test_every_measurement_of_the_grading_lock_freezes_the_class(student, klass, tmp_path,
                                                                   monkeypatch):
    group, proc = student
    monkeypatch.setenv("MPILAB_CLASSROOM_DIR", f"/srv/{klass}")
    monkeypatch.delenv(reserve.ENV, raising=False)
    with quiet.measuring(tmp_path):
        assert _frozen(group) and not _runs(proc.pid)
        with quiet.measuring(tmp_path):  # nested: held already
            assert _frozen(group)
        assert _frozen(group)
    assert not _frozen(group)
    with quiet.working(tmp_path):  # a grading's work holds nobody back
        assert not _frozen(group)
    monkeypatch.setenv(reserve.ENV, "off")
    with quiet.measuring(tmp_path):
        assert not _frozen(group)


def test_weight_lowers_the_students_and_puts_it_back(student, klass):
    group, _ = student
    version, _ = group.where["cpu"]
    name, lowest = reserve.LOWEST[version]
    path = os.path.join(group.dirs()["cpu"], name)
    before = open(path).read().strip()
    top = os.path.join(os.path.dirname(group.dirs()["cpu"]), name)
    with pytest.raises(RuntimeError), reserve.reserved("weight", klass):
        assert open(path).read().strip() == lowest != before
        assert open(top).read().strip() == lowest  # this grader is outside the class
        raise RuntimeError("a measurement that fails")
    assert open(path).read().strip() == before == open(top).read().strip()


def _grader(klass: str, ready, max_s: float) -> None:
    with reserve.reserved("freeze", klass, max_s=max_s):
        ready.set()
        time.sleep(3600)


def test_the_watchdog_thaws_when_the_grader_dies(student, klass):
    group, proc = student
    ready = CTX.Event()
    grader = CTX.Process(target=_grader, args=(klass, ready, 3600))
    grader.start()
    try:
        assert ready.wait(60) and _frozen(group)
        os.kill(grader.pid, signal.SIGKILL)  # no finally runs in the grader
        grader.join()
        deadline = time.monotonic() + 30
        while _frozen(group) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _frozen(group) and _runs(proc.pid, 10)
    finally:
        grader.kill()
        grader.join()


def test_the_watchdog_thaws_after_the_longest_hold(student, klass):
    group, proc = student
    ready = CTX.Event()
    grader = CTX.Process(target=_grader, args=(klass, ready, 1.0))
    grader.start()
    try:
        assert ready.wait(60)
        deadline = time.monotonic() + 30
        while _frozen(group) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert grader.is_alive()  # still "measuring", yet the students run again
        assert not _frozen(group) and _runs(proc.pid, 10)
    finally:
        grader.kill()
        grader.join()


def _plan_from(group: Group, klass: str, out) -> None:
    group.join()
    out.send(reserve.plan("freeze", klass))


def test_the_graders_own_server_is_left_alone(student, klass):
    group, _ = student
    own = Group(klass, "instructor", group.where)
    own.create(Limits())
    recv, send = CTX.Pipe(duplex=False)
    p = CTX.Process(target=_plan_from, args=(own, klass, send))
    p.start()
    got = recv.recv()
    p.join()
    assert [os.path.dirname(e[0]) for e in got] == [group.dirs()["unified"]]
    own.end()


def test_an_instructor_not_root_may_freeze_when_the_group_says_so(klass):
    """limits' ``graders``: the instructors' group may write each server's cgroup.freeze."""
    student = Group(klass, "student")
    if "unified" not in student.where:
        pytest.skip("no cgroup v2 hierarchy here")
    if not os.path.exists("/usr/bin/python3"):
        pytest.skip("no /usr/bin/python3 for the user nobody")
    nobody = 65534
    code = ("import sys; from mpilab.autograder import reserve\n"
            "with reserve.reserved('freeze', sys.argv[1]) as held:\n"
            "    print(len(held), open(held[0][0].replace('freeze', 'events')).read().split()[3]"
            " if held else '-')\n")
    as_nobody = ["setpriv", f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups",
                 "/usr/bin/python3", "-c", code, klass]  # (the venv: under /root)
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(reserve.__file__)),
           "TMPDIR": "/tmp"}
    student.create(Limits())
    got = subprocess.run(as_nobody, capture_output=True, text=True, env=env, timeout=120)
    # root's file (as a student's own measured self-check finds it): nothing held, silently
    assert got.stdout.split() == ["0", "-"] and got.stderr == "", got.stderr
    student.create(Limits(), graders=nobody)
    got = subprocess.run(as_nobody, capture_output=True, text=True, env=env, timeout=120)
    assert got.stdout.split() == ["1", "1"], got.stderr  # one group held, frozen meanwhile
    assert not _frozen(student)


def test_the_benchs_students_spin_in_a_class_of_their_own_and_leave_nothing():
    """grading-errors --load-as students: K busy students, each in a group of the class
    that the grader's measurement then finds and freezes."""
    from mpilab.bench import class_load

    before = os.environ.get("MPILAB_CLASSROOM_DIR")
    with class_load.students(2) as meta:
        klass = meta["load_class"]
        groups = [Group(klass, f"student-{i}") for i in range(2)]
        pids = [g.pids() for g in groups]
        assert all(len(p) == 1 for p in pids) and meta["load_processes"] == 2
        assert reserve.class_name() == klass
        with reserve.reserved("freeze") as held:
            assert len(held) == 2 and all(_frozen(g) for g in groups)
            assert not any(_runs(next(iter(p))) for p in pids)
        assert all(_runs(next(iter(p)), 10) for p in pids)
    assert not any(g.exists() for g in groups)
    assert not any(os.path.exists(f"/proc/{next(iter(p))}") for p in pids)
    assert os.environ.get("MPILAB_CLASSROOM_DIR") == before


def test_where_on_a_pure_v2_and_a_hybrid_machine(tmp_path):
    """The files a hold writes, on a v2-only layout (as Debian 12's default) and on the
    hybrid one (v1 cpu beside a controller-less v2), from their mount tables."""
    v2 = tmp_path / "v2"
    (v2 / "klass" / "alice").mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    for name, value in [("cgroup.freeze", "0"), ("cpu.weight", "100")]:
        (v2 / "klass" / "alice" / name).write_text(value + "\n")
    pure = tmp_path / "pure"
    pure.write_text(f"30 25 0:26 / {v2} rw - cgroup2 cgroup2 rw\n")
    alice = str(v2 / "klass" / "alice")
    assert reserve.plan("freeze", "klass", str(pure)) == [
        [f"{alice}/cgroup.freeze", "1", "0"]]
    (v2 / "klass" / "cpu.weight").write_text("100\n")  # the class's own: lowered too
    assert reserve.plan("weight", "klass", str(pure)) == [[f"{alice}/cpu.weight", "1", "100"],
                                                          [f"{v2}/klass/cpu.weight", "1", "100"]]
    v1 = tmp_path / "v1"
    (v1 / "klass" / "alice").mkdir(parents=True)
    (v1 / "klass" / "alice" / "cpu.shares").write_text("1024\n")
    hybrid = tmp_path / "hybrid"
    hybrid.write_text(f"30 25 0:26 / {v2} rw - cgroup2 cgroup2 rw\n"
                      f"31 25 0:27 / {v1} rw - cgroup cgroup rw,cpu,cpuacct\n")
    assert reserve.plan("weight", "klass", str(hybrid)) == [
        [str(v1 / "klass" / "alice" / "cpu.shares"), "2", "1024"]]  # (no class's file here)
    assert reserve.plan("off", "klass", str(pure)) == []
    entries = reserve.plan("weight", "klass", str(pure))
    assert reserve.apply(entries, 1) == [] and (v2 / "klass/alice/cpu.weight").read_text() == "1"
    assert reserve.restore(entries) == [] and (v2 / "klass/alice/cpu.weight").read_text() == "100"
