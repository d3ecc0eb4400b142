"""The parts the autograder's isolation is built from, each on its own.

* :mod:`mpilab.autograder.wire`: what a student's process sends decodes to plain data or
  raises :class:`WireError`, and never runs anything;
* :class:`mpilab.autograder.sandbox.Sandbox`: a sandboxed process cannot read what is hidden,
  cannot write outside its folders, runs as ``nobody`` (as root), sees none of the host's
  processes, has no network, is held to its limits, and leaves nothing behind;
* :class:`mpilab.autograder.pool.Pool`: real sandboxed MPI ranks give results, stuck lines,
  deaths and garbled replies as the grader's own data;
* :mod:`mpilab.autograder.isolated`: the grader binds the student's exports without reading
  through links and without unpickling the student's bytes.

The whole path (nbgrader, kernels, hostile notebooks) is in test_grading_hostile.py.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import subprocess
import sys
import time
from pathlib import Path

import cloudpickle
import numpy as np
import pytest

from mpilab.autograder import isolated, sandbox, scratch, wire
from mpilab.autograder.pool import Pool
from mpilab.autograder.sandbox import Limits, Sandbox

# the functions below travel to the sandboxed ranks by value: the repository (and so this
# module) is hidden there
cloudpickle.register_pickle_by_value(sys.modules[__name__])

ROOT = os.geteuid() == 0
DEBIAN_ROOT = ROOT and Path("/etc/debian_version").exists()


# -- wire ---------------------------------------------------------------------------------
PLAIN = [
    None, True, 0, -7, 1 << 80, 2.5, float("inf"), complex(1, -2), "ünï", b"\x00\xff",
    [1, [2, (3, {"a": None})]], (), {1: "x", "k": [1.5], (1, 2): b""},
    np.arange(12, dtype=np.int32).reshape(3, 4), np.zeros((0, 3)), np.array(True),
    np.linspace(0, 1, 5, dtype=np.complex64), np.arange(6.0)[::2],
]


def same(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return (type(b) is np.ndarray and a.dtype == b.dtype and a.shape == b.shape
                and np.array_equal(a, b))
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b or (a != a and b != b)


@pytest.mark.parametrize("value", PLAIN, ids=lambda v: type(v).__name__)
def test_wire_round_trips_plain_data_exactly(value):
    assert same(wire.decode(wire.encode(value)), value)


def test_wire_keeps_nan():
    assert np.isnan(wire.decode(wire.encode(float("nan"))))


@pytest.mark.parametrize("value", [object(), np.array([object()]), {1, 2}, np.float64(1.0),
                                   np.zeros(2, dtype=[("a", "f8")]), print],
                         ids=["object", "object-array", "set", "numpy-scalar", "record",
                              "function"])
def test_wire_refuses_what_is_not_plain_data(value):
    with pytest.raises(wire.WireError):
        wire.encode(value)


class _Trap:
    """Unpickling this creates a file: proof that something unpickled it."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def test_wire_never_unpickles(tmp_path):
    proof = tmp_path / "unpickled"
    hostile = [pickle.dumps(_Trap(proof)), cloudpickle.dumps(_Trap(proof)),
               wire.MAGIC + pickle.dumps(_Trap(proof))]
    for data in hostile:
        with pytest.raises(wire.WireError):
            wire.decode(data)
    assert not proof.exists()


def _header(tree, bufs=()) -> bytes:
    import struct

    head = json.dumps(tree).encode()
    out = wire.MAGIC + struct.pack("<QI", len(head), len(bufs)) + head
    for b in bufs:
        out += struct.pack("<Q", len(b)) + b
    return out


@pytest.mark.parametrize("data", [
    b"", b"MPILAB", wire.encode([1, 2])[:-1], wire.encode([1, 2]) + b"x",
    _header({"a": [0, "|O", [1]]}, [b"\0" * 8]),  # object arrays would unpickle
    _header({"a": [0, "<f8", [2]]}, [b"\0" * 8]),  # buffer too small for the shape
    _header({"a": [3, "<f8", [1]]}, [b"\0" * 8]),  # no such buffer
    _header({"a": [0, "<f8", [-1]]}, [b"\0" * 8]),
    _header({"x": 1}), _header([1, 2]), _header({"i": "1" * 20000}),
    _header(json.loads("[" * 100 + "]" * 100)),
    wire.MAGIC + b"\xff" * 12,
], ids=lambda d: str(len(d)))
def test_wire_rejects_malformed_bytes(data):
    with pytest.raises(wire.WireError):
        wire.decode(data)


def test_wire_rejects_deep_nesting_and_oversize():
    deep: list = []
    for _ in range(wire.MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(wire.WireError):
        wire.encode(deep)
    with pytest.raises(wire.WireError, match="accepted"):
        wire.decode(wire.encode(b"x" * 1000), max_bytes=100)


def test_wire_mutated_bytes_give_data_or_wire_error():
    """Whatever a process sends, decode returns plain data or raises WireError."""
    rng = random.Random(1)
    base = wire.encode({"probe": np.arange(6.0).reshape(2, 3), "rank": [1, (2.5, "s")],
                        "b": b"xy", "c": 1j, "big": 1 << 70})
    kinds = set()
    for _ in range(3000):
        data = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            wire.decode(bytes(data))
            kinds.add("data")
        except wire.WireError:
            kinds.add("error")
    assert kinds == {"data", "error"}


# -- read_untrusted -----------------------------------------------------------------------
def test_read_untrusted_reads_only_small_regular_files(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("solution")
    link = tmp_path / "link"
    link.symlink_to(secret)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 2000)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it for reading would block a naive reader forever
    assert sandbox.read_untrusted(secret, 100) == b"solution"
    assert sandbox.read_untrusted(link, 100) is None
    assert sandbox.read_untrusted(big, 1000) is None
    assert sandbox.read_untrusted(fifo, 100) is None
    assert sandbox.read_untrusted(tmp_path, 100) is None
    assert sandbox.read_untrusted(tmp_path / "none", 100) is None


# -- the sandbox --------------------------------------------------------------------------
needs_sandbox = pytest.mark.skipif(sandbox.available() is not None,
                                   reason=f"no sandbox: {sandbox.available()}")


def test_the_sandbox_is_installed_where_setup_can_install_it():
    """setup.sh installs bubblewrap as root on Debian: there, the sandbox tests must run."""
    if not DEBIAN_ROOT or os.environ.get("MPILAB_SANDBOX", "").lower() == "off":
        pytest.skip("setup.sh installs bubblewrap only as root on Debian")
    assert sandbox.available() is None


@pytest.fixture
def box(tmp_path):
    b = Sandbox(str(tmp_path / "box"), hide=[str(tmp_path / "course")],
                limits=Limits(memory_bytes=256 << 20, processes=64, file_bytes=1 << 20,
                              cpu_seconds=30, tmp_bytes=8 << 20, shm_bytes=8 << 20))
    yield b
    b.close()
    assert not Path(b.root).exists()


def sh(box: Sandbox, script: str, *, rw=(), timeout=60, role="kernel") -> tuple[int, str]:
    """`script` run by Python in the sandbox: exit status and output."""
    home = str(box.folder("home"))
    p = box.popen([sys.executable, "-P", "-c", script], cwd=home,
                  env=isolated.sandbox_env(home), rw=[home, *rw], role=role,
                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = p.communicate(timeout=timeout)
    finally:
        box.kill(p)
    return p.returncode, out.decode(errors="replace")


@needs_sandbox
def test_a_sandboxed_process_cannot_see_the_course_or_change_anything(box, tmp_path):
    course = tmp_path / "course"
    (course / "source").mkdir(parents=True)
    (course / "source" / "lab.ipynb").write_text("BEGIN HIDDEN TESTS")
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    code, out = sh(box, f"""
import os, socket
print("uid", os.getuid())
print("course", os.listdir({str(course)!r}))
for p in [{str(outside)!r}, "/etc/passwd-mpilab", "/usr/lib/x"]:
    try:
        open(p, "w").write("x"); print("WROTE", p)
    except OSError as e:
        print("refused", p, type(e).__name__)
print("pids", sorted(int(d) for d in os.listdir("/proc") if d.isdigit()))
s = socket.socket()
s.settimeout(2)
try:
    s.connect(("1.1.1.1", 53)); print("NETWORK")
except OSError as e:
    print("no network", type(e).__name__)
open("mine.txt", "w").write("ok")
print("home", os.listdir("."))
""")
    assert code == 0, out
    assert "course []" in out
    assert "WROTE" not in out and out.count("refused") == 3
    assert outside.read_text() == "keep"
    assert "no network" in out
    pids = json.loads(out.split("pids ")[1].split("\n")[0])
    assert len(pids) <= 4, f"host processes are visible: {pids}"
    assert "mine.txt" in out.split("home ")[1]
    if ROOT:
        assert "uid 65534" in out


@needs_sandbox
def test_killing_the_sandbox_ends_everything_it_started(box):
    marker = f"mpilab-test-orphan-{os.getpid()}-{time.monotonic_ns()}"
    home = str(box.folder("home"))
    script = (f"import subprocess, time\n"
              f"subprocess.Popen(['sh', '-c', 'exec -a {marker} sleep 300'], "
              f"start_new_session=True)\n"
              f"print('started', flush=True)\ntime.sleep(300)\n")
    p = box.popen([sys.executable, "-P", "-c", script], cwd=home,
                  env=isolated.sandbox_env(home), rw=[home], stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"started"
    assert _processes(marker), "the grandchild did not start"
    box.kill(p)
    deadline = time.monotonic() + 10
    while _processes(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _processes(marker)


def _processes(marker: str) -> list[int]:
    import psutil

    out = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and marker in " ".join(
                    proc.info["cmdline"] or []):
                out.append(proc.pid)
        except psutil.Error:
            pass
    return out


@needs_sandbox
def test_the_limits_hold(box):
    code, out = sh(box, """
import os
try:
    open("big", "wb").write(b"x" * (2 << 20)); print("WROTE BIG")
except OSError as e:
    print("file limit", e.errno)
try:
    open("/tmp/fill", "wb").write(b"x" * (16 << 20)); print("FILLED TMP")
except OSError as e:
    print("tmp limit", e.errno)
""")
    assert "file limit" in out and "WROTE BIG" not in out, out
    assert "tmp limit" in out and "FILLED TMP" not in out, out
    if not ROOT:
        return  # memory and process counts are cgroup limits: root only
    code, out = sh(box, "x = bytearray(1 << 30); x[::4096] = b'y' * len(x[::4096])\n"
                        "print('ALLOCATED')")
    assert code != 0 and "ALLOCATED" not in out, out
    code, out = sh(box, """
import subprocess
procs = []
try:
    for i in range(200):
        procs.append(subprocess.Popen(["sleep", "30"]))
    print("SWARM", len(procs))
except OSError as e:
    print("process limit after", len(procs))
""")
    assert "process limit after" in out and "SWARM" not in out, out
    assert int(out.split("after ")[1].split()[0]) < 64


@needs_sandbox
def test_closing_leaves_no_cgroup_and_no_folder(tmp_path):
    b = Sandbox(str(tmp_path / "box"))
    code, _ = sh(b, "print('hi')")
    assert code == 0
    name = b.name
    b.close()
    assert not Path(b.root).exists()
    assert not [p for p in scratch.leftovers() if name in p]



@pytest.mark.skipif(not ROOT, reason="cgroups are made as root only")
def test_a_running_gradings_empty_cgroup_survives_another_gradings_clean_up(tmp_path,
                                                                             monkeypatch):
    """Two gradings at once (two instructors, two labs): each one's clean-up of stale
    cgroups must leave the other's alone, even while it is empty between two jobs (the
    next job would find no cgroup to join); once its grading ends, it is stale."""
    monkeypatch.setattr(scratch.tempfile, "tempdir", str(tmp_path))
    folder, claim = scratch.make_scratch()
    box = Sandbox(folder)
    assert box.name == Path(folder).name  # the cgroups carry the scratch folder's claim
    cg = box._ensure_cgroup("ranks")
    if cg is None:
        pytest.skip("no memory and pids cgroup controllers here")
    try:
        assert cg.pids() == [] and all(d.is_dir() for d in cg.dirs)
        scratch.remove_stale_cgroups()  # another grading starts
        assert all(d.is_dir() for d in cg.dirs), "a running grading's cgroup was removed"
        # one of no grading at all (no scratch folder): stale only once old
        orphan = sandbox._Cgroup(f"{scratch.SCRATCH_PREFIX}nosuchscratch-kernel", Limits())
        scratch.remove_stale_cgroups()
        assert all(d.is_dir() for d in orphan.dirs)
        assert scratch.remove_stale_cgroups(unclaimed_for=0) >= len(orphan.dirs)
        assert not any(d.exists() for d in orphan.dirs)
        assert all(d.is_dir() for d in cg.dirs)
        claim.close()  # the grading ends without cleaning up: now it is stale
        scratch.remove_stale_cgroups()
        assert not any(d.exists() for d in cg.dirs)
        # and a sandbox whose cgroup vanished makes it anew for its next job
        again = box._ensure_cgroup("ranks")
        assert again is not None and all(d.is_dir() for d in again.dirs)
    finally:
        claim.close()
        box.close()


def test_scratch_of_a_killed_grading_is_removed_by_the_next(tmp_path):
    """A grading killed before its clean-up leaves its scratch folder; the next grading
    removes it, but never one a running grading still claims, nor one kept on purpose."""
    base = tmp_path / "tmp"
    base.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", f"""
import sys, tempfile, time
tempfile.tempdir = {str(base)!r}
from mpilab.autograder.scratch import make_scratch
claims = []  # held open: a claim lasts while its file is open
for keep in (False, True):
    root, claim = make_scratch(keep=keep)
    claims.append(claim)
    print(root, flush=True)
if sys.argv[1] == 'die':
    import os, signal
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(60)
""", "live"], stdout=subprocess.PIPE, text=True)
    killed = subprocess.run([sys.executable, "-c", holder.args[2], "die"],
                            stdout=subprocess.PIPE, text=True)
    try:
        running, _kept_running = holder.stdout.readline().split()[0], holder.stdout.readline()
        dead, kept = killed.stdout.split()
        Path(dead, "home").mkdir()
        Path(dead, "home", "notes.txt").write_text("left behind")
        old_style = Path(base, "mpilab-grade-oldstyle")  # no claim file: by its age
        old_style.mkdir()
        young = Path(base, "mpilab-grade-young")
        young.mkdir()
        os.utime(old_style, (time.time() - 3600, time.time() - 3600))
        removed = scratch.remove_stale_scratch(str(base))
        assert sorted(removed) == sorted([dead, str(old_style)])
        assert Path(running).is_dir() and Path(kept).is_dir() and young.is_dir()
        assert scratch.remove_stale_scratch(str(base)) == []
    finally:
        holder.kill()
        holder.wait()
    assert scratch.remove_stale_scratch(str(base)) == [running]

# -- the pool of sandboxed ranks ----------------------------------------------------------
def ranks_and_sum(comm, x):
    from mpi4py import MPI

    return comm.Get_rank(), comm.allreduce(comm.Get_rank() * x, op=MPI.SUM), np.full(2, x)


def stuck_on_rank_one(comm):
    if comm.Get_rank() == 1:
        comm.recv(source=0)  # never sent
    return "done"


def exits(comm):
    if comm.Get_rank() == 1:
        os._exit(3)
    comm.Barrier()


def raises(comm):
    raise KeyError("nope")


def returns_object(comm):
    return object()


@pytest.fixture
def pool(tmp_path):
    b = Sandbox(str(tmp_path / "box"))
    home, work = str(b.folder("home")), str(b.folder("pool"))
    p = Pool(b, 2, cwd=home, env=isolated.sandbox_env(home), workdir=work, rw=[home])
    yield p
    p.stop()
    b.close()


def call(pool, func, *args, ranks=2, timeout=20.0):
    return pool.call(isolated.payload(func, args), ranks, timeout)


def test_the_pool_runs_functions_on_real_ranks(pool):
    out = call(pool, ranks_and_sum, 5)
    assert not (out.timed_out or out.died or out.bad), out
    got = {r: rep[1] for r, rep in out.replies.items()}
    assert sorted(g[0] for g in got.values()) == [0, 1]
    assert all(g[1] == 5 for g in got.values())
    assert np.array_equal(got[1][2], [5, 5])
    out = call(pool, ranks_and_sum, 2, ranks=1)  # the same job, fewer ranks
    assert out.replies[0][1][:2] == (0, 0) and out.replies[1] == ("out",)
    assert pool.starts == 1


def test_the_pool_says_where_a_stuck_rank_was_and_starts_afresh(pool):
    out = call(pool, stuck_on_rank_one, timeout=3)
    assert out.timed_out == [1]
    assert "stuck_on_rank_one" in out.stacks[1]
    assert not pool.alive
    out = call(pool, ranks_and_sum, 1)
    assert out.replies[1][1][1] == 1 and pool.starts == 2


def test_the_pool_reports_death_errors_and_unsendable_values(pool):
    out = call(pool, exits)
    assert out.died and "rank" in out.died
    out = call(pool, raises)
    assert {rep[:3] for rep in out.replies.values()} == {("raised", "KeyError", "'nope'")}
    out = call(pool, returns_object)
    assert all(rep[0] == "bad" for rep in out.replies.values()), out.replies


def loaded(comm, names):
    return [n for n in names if n in sys.modules]


def test_the_ranks_import_the_graders_check_modules_before_a_request(pool):
    """What a harness's module costs to import on a fresh job is not the student's time:
    the ranks import the check modules the grader has (lab 06's) when they start."""
    import mpilab.grading.allgather  # noqa: F401 - as lab 06's grader has it

    names = ["mpilab.grading.allgather", "mpilab.grading.simulated"]
    out = call(pool, loaded, [*names, "pandas", "scipy.optimize"])
    assert not (out.timed_out or out.died or out.bad), out
    # and nothing they do not need: pandas and SciPy's fits load where a table or fit is made
    assert {r: rep[1] for r, rep in out.replies.items()} == {0: names, 1: names}


def test_the_worker_imports_only_the_courses_modules(monkeypatch):
    from mpilab.autograder import worker

    monkeypatch.setattr(sys, "modules", dict(sys.modules))  # what it imports is undone
    got = worker.preload("os,mpilab.grading.hints,mpilab..x,mpilab.grading.no_such_module,"
                         "mpilab.grading.hints;import os,,json")
    assert got == ["mpilab.grading.hints"]
    assert worker.preload("") == []


# -- binding the student's exports in the grader -----------------------------------------
def test_bind_reads_exports_without_links_or_unpickling(tmp_path):
    proof = tmp_path / "unpickled"
    secret = tmp_path / "secret.ipynb"
    secret.write_text("BEGIN HIDDEN TESTS")
    out = tmp_path / "export"
    out.mkdir()
    (out / "index.json").write_text(json.dumps({
        "data": {"kind": "data"}, "func": {"kind": "function", "params": None},
        "linked": {"kind": "data"}, "garbled": {"kind": "data"},
        "obj": {"kind": "other", "type": "Foo"}, "pickled": {"kind": "data"},
        "not a name": {"kind": "data"}}))
    (out / "data.wire").write_bytes(wire.encode({"x": np.arange(3)}))
    (out / "func.pkl").write_bytes(pickle.dumps(_Trap(proof)))
    (out / "linked.wire").symlink_to(secret)
    (out / "garbled.wire").write_bytes(b"MPILAB-WIRE-1\n garbage")
    (out / "pickled.wire").write_bytes(pickle.dumps(_Trap(proof)))
    ns: dict = {}
    names = ["data", "func", "linked", "garbled", "obj", "pickled", "absent", "not a name"]
    bound = isolated.bind(ns, str(out), names)
    assert sorted(bound) == sorted(["data", "func", "linked", "garbled", "obj", "pickled"])
    assert np.array_equal(ns["data"]["x"], [0, 1, 2])
    assert isinstance(ns["func"], isolated.StudentFunction)
    repr(ns["func"])
    for name in ("linked", "garbled", "pickled", "obj"):
        assert isinstance(ns[name], isolated.StudentObject), name
        with pytest.raises(Exception, match=f"{name} is .*only functions and plain data"):
            ns[name]()
    assert "absent" not in ns
    assert not proof.exists(), "the grader unpickled the student's bytes"
    # a student function travels to the ranks as the student's own bytes, untouched
    reduced = ns["func"].__reduce__()
    assert reduced[1] == ((out / "func.pkl").read_bytes(),)
    # the next cell's export replaces what was bound from the student, and unbinds names
    # the student no longer has
    (out / "index.json").write_text(json.dumps({"data": {"kind": "missing"}}))
    isolated.bind(ns, str(out), ["data"])
    assert "data" not in ns


def test_missing_refreshes_student_names_but_keeps_the_graders(tmp_path):
    ns = {"np": np, "helper": len}
    assert isolated.missing(ns, ["np", "helper", "answer", "__builtins__", "1x"]) == ["answer"]


def test_the_sandbox_can_be_switched_off_or_required(tmp_path, monkeypatch):
    monkeypatch.setenv("MPILAB_SANDBOX", "off")
    assert not Sandbox(str(tmp_path / "a")).isolated
    monkeypatch.setenv("MPILAB_SANDBOX", "required")
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    with pytest.raises(sandbox.SandboxError, match="bwrap"):
        Sandbox(str(tmp_path / "b"))


def test_every_top_level_folder_but_the_systems_is_hidden(tmp_path):
    """Another copy of the course may sit anywhere (/work, /srv, /opt): only the system's
    folders stay readable; links such as /bin -> usr/bin are left alone."""
    from mpilab.autograder import sandbox

    for d in ("usr", "etc", "var", "work", "srv", "opt"):
        (tmp_path / d).mkdir()
    (tmp_path / "bin").symlink_to("usr")
    (tmp_path / "notes.txt").write_text("a file, not a folder")
    assert sandbox._outside_system(str(tmp_path)) == [str(tmp_path / d)
                                                      for d in ("opt", "srv", "work")]
