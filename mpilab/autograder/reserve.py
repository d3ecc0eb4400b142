"""The cores for a grader's measurement, kept from the students' servers on a class server.

The grading lock (:mod:`mpilab.autograder.quiet`) keeps other *gradings* off the cores
while a graded prediction is measured; it does not see what the students themselves run
(a classmate's sweep, a busy notebook), which on a class server is most of the load. On a
class server each student's server is a cgroup of its own, ``<mount>/<klass>/<user>``
(:mod:`mpilab.autograder.limits`), so the grader can hold those back for the seconds a
measurement lasts. :func:`reserved` does, as ``$MPILAB_CLASSROOM_GRADER`` says:

``freeze`` (the default on a class server)
    Every user's group of the class is frozen (cgroup v2 ``cgroup.freeze``: a v2
    hierarchy, or the controller-less v2 one of the hybrid layout, where limits puts
    every server too) until the measurement ends. Their processes do not run at all; a
    student sees their kernel stop (a cell's output pauses, a keystroke in the terminal
    echoes late) for as long as the measurement lasts, at most
    ``$MPILAB_CLASSROOM_FREEZE_MAX`` seconds (default 30), after which a watchdog thaws
    them whatever the grader does. Nothing is lost: the processes carry on where they were.
``weight``
    Every user's group gets the lowest CPU weight (v2 ``cpu.weight`` 1, v1 ``cpu.shares``
    2) until the measurement ends, and so does the class's folder where the grader is
    outside the class (a weight counts among siblings), beside the grader's 100 / 1024:
    the students keep
    running on what the grader leaves idle. Weaker: a student's busy process still gets a
    core whenever a measuring rank sleeps or waits, and the scheduler's wake-up
    preemption is not bought by weight alone.
``off``
    Nothing is held back.

Real-time priority for the measuring ranks (SCHED_FIFO) is not offered: a rank that spins
while it waits for a message (MPI's shared-memory transport polls) would take its core
from everything else on it, the grader's other rank and the kernel's own threads
included, and a measurement that hangs would hang the machine's core until its timeout;
the kernel's real-time throttling (95 % of each second) then decides the timing instead;
and it needs CAP_SYS_NICE, which an instructor's grading, run as the instructor, has not.

The group that holds the grader itself (an instructor grading from their own server) is
left alone. What undoes a freeze or a weight: the block's end (also when it raises); a
watchdog process, started with it, when the grader dies before (it reads a pipe from the
grader: end of file without the grader's "done" means the grader is gone) or when the
block outlasts the maximum. The class is found at ``<mount>/<klass>``, ``klass`` the last
part of ``$MPILAB_CLASSROOM_DIR`` (default ``/srv/mpilab``, as scripts/classroom.sh);
without that folder this is no class server and nothing is done. Writing a group's
``cgroup.freeze`` (or weight) needs root or write access to that file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence

__all__ = ["MODES", "class_name", "mode", "plan", "reserved", "restore", "apply", "cgroup_mounts"]

MODES = ("freeze", "weight", "off")
ENV, MAX_ENV = "MPILAB_CLASSROOM_GRADER", "MPILAB_CLASSROOM_FREEZE_MAX"
DEFAULT_MAX_S = 30.0
LOWEST = {1: ("cpu.shares", "2"), 2: ("cpu.weight", "1")}
#: ``(mode, seconds, groups)`` of each hold this process made, in order: how long the
#: students were held back (``grading-errors --load-as students`` reports them)
HOLDS: list[tuple[str, float, int]] = []


def mode(environ: dict | None = None) -> str:
    """What a measurement holds back on a class server: ``$MPILAB_CLASSROOM_GRADER``.

    Parameters
    ----------
    environ : dict, optional
        The environment that holds the variable (default ``os.environ``).

    Returns
    -------
    str
        One of :data:`MODES` (default ``freeze``); another value raises ValueError.
    """
    env = os.environ if environ is None else environ
    got = env.get(ENV, "freeze").strip().lower() or "freeze"
    if got not in MODES:
        raise ValueError(f"${ENV}={got!r}: one of {', '.join(MODES)}")
    return got


def class_name(environ: dict | None = None) -> str:
    """The class's cgroup folder name: the last part of ``$MPILAB_CLASSROOM_DIR``.

    Parameters
    ----------
    environ : dict, optional
        As :func:`mode`.

    Returns
    -------
    str
        The name (``mpilab`` by default, as scripts/classroom.sh).
    """
    env = os.environ if environ is None else environ
    return os.path.basename(env.get("MPILAB_CLASSROOM_DIR", "/srv/mpilab").rstrip("/"))


def cgroup_mounts(controllers: Sequence[str],
                  mountinfo: str = "/proc/self/mountinfo") -> dict[str, tuple[int, str]]:
    """Where each of `controllers` is mounted, and the cgroup2 hierarchy.

    Here rather than in :mod:`mpilab.autograder.limits` (which calls it for its
    :func:`~mpilab.autograder.limits.hierarchies`): this module stays standard library
    only, for its watchdog, which runs this file alone.

    Parameters
    ----------
    controllers : sequence of str
        The controllers wanted (``"cpu"``, ``"memory"``, ``"pids"``).
    mountinfo : str, optional
        The mount table to read (default this process's).

    Returns
    -------
    dict
        ``controller -> (version, mount point)`` for the controllers found (a v1
        hierarchy that carries one wins over v2), and ``"unified" -> (2, mount point)``
        where a cgroup2 file system is mounted.
    """
    found: dict[str, tuple[int, str]] = {}
    with open(mountinfo) as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            fstype, point = fields[sep + 1], fields[4]
            if fstype == "cgroup2" and "unified" not in found:
                found["unified"] = (2, point)
            elif fstype == "cgroup":
                opts = fields[sep + 3].split(",")
                for c in controllers:
                    if c in opts and c not in found:
                        found[c] = (1, point)
    if "unified" in found:
        try:
            with open(os.path.join(found["unified"][1], "cgroup.controllers")) as f:
                there = f.read().split()
        except OSError:
            there = []
        for c in controllers:
            if c in there and c not in found:
                found[c] = (2, found["unified"][1])
    return found


def _own(point: str) -> set[str]:
    """The folders under `point` that hold this process (its cgroup and their parents)."""
    out: set[str] = set()
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, _, path = line.rstrip("\n").partition(":")[2].partition(":")
            d = os.path.normpath(point + path)
            while d.startswith(point) and d != point:
                out.add(d)
                d = os.path.dirname(d)
    return out


def plan(how: str | None = None, klass: str | None = None,
         mountinfo: str = "/proc/self/mountinfo") -> list[list[str]]:
    """What :func:`reserved` would write: ``[file, value while held, value to restore]``.

    Parameters
    ----------
    how : str, optional
        One of :data:`MODES` (default :func:`mode`).
    klass : str, optional
        The class's folder name (default :func:`class_name`).
    mountinfo : str, optional
        The mount table that says where the hierarchies are (default this process's).

    Returns
    -------
    list of list of str
        One entry per user's group of the class but the grader's own whose file this
        process may write; empty for ``off``, where the class has no folder (no class
        server), or where it may write none (a student's measured self-check).
    """
    how = mode() if how is None else how
    klass = class_name() if klass is None else klass
    if how == "off":
        return []
    where = cgroup_mounts(("cpu",), mountinfo)
    key = "unified" if how == "freeze" else "cpu"
    if key not in where:
        return []
    version, point = where[key]
    top = os.path.join(point, klass)
    if not os.path.isdir(top):
        return []
    name, value = ("cgroup.freeze", "1") if how == "freeze" else LOWEST[version]
    own = _own(point)
    folders = [e.path for e in sorted(os.scandir(top), key=lambda e: e.name)
               if e.is_dir() and e.path not in own]
    if how == "weight" and top not in own:
        # a weight counts among siblings: the users' groups are each other's, and the
        # class's folder is the grader's (a grader outside the class: lowered too)
        folders.append(top)
    out = []
    for d in folders:
        path = os.path.join(d, name)
        if os.access(path, os.W_OK):  # (a student's own self-check: none, and silent)
            with open(path) as f:
                was = f.read().strip()
            out.append([path, value, "0" if how == "freeze" else was])
    return out


def apply(entries: list[list[str]], which: int) -> list[str]:
    """Write each entry's value `which` (1: held, 2: restored); a group gone is skipped.

    Parameters
    ----------
    entries : list of list of str
        :func:`plan`'s answer.
    which : int
        1 to hold the students back, 2 to restore.

    Returns
    -------
    list of str
        The files that could not be written, with why.
    """
    bad = []
    for entry in entries:
        try:
            with open(entry[0], "w") as f:
                f.write(entry[which])
        except FileNotFoundError:
            pass  # the user's server ended meanwhile
        except OSError as exc:
            bad.append(f"{entry[0]}: {exc.strerror}")
    return bad


def restore(entries: list[list[str]]) -> list[str]:
    """Undo :func:`apply`: thaw, or put the weights back.

    Parameters
    ----------
    entries : list of list of str
        :func:`plan`'s answer.

    Returns
    -------
    list of str
        The files that could not be written, with why.
    """
    return apply(entries, 2)


def _frozen(entries: list[list[str]], timeout: float = 2.0) -> None:
    """Wait (at most `timeout` s) until each frozen group says ``frozen 1``."""
    deadline = time.monotonic() + timeout
    for entry in entries:
        events = os.path.join(os.path.dirname(entry[0]), "cgroup.events")
        while time.monotonic() < deadline:
            try:
                with open(events) as f:
                    if "frozen 1" in f.read():
                        break
            except OSError:
                break
            time.sleep(0.005)


def _class_lock(klass: str):
    """An exclusive lock of the class's reservations (two graders: one at a time)."""
    path = os.path.join(tempfile.gettempdir(), f"mpilab-reserve-{klass}.lock")
    try:
        f = open(path, "a")
    except OSError:
        return None
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


@contextlib.contextmanager
def reserved(how: str | None = None, klass: str | None = None,
             max_s: float | None = None) -> Iterator[list[list[str]]]:
    """Hold the class's students back meanwhile (see the module's text); a watchdog undoes
    it if this process dies or the block outlasts `max_s`.

    Parameters
    ----------
    how : str, optional
        One of :data:`MODES` (default :func:`mode`, ``$MPILAB_CLASSROOM_GRADER``).
    klass : str, optional
        The class's folder name (default :func:`class_name`).
    max_s : float, optional
        The longest hold in seconds (default ``$MPILAB_CLASSROOM_FREEZE_MAX`` or 30).

    Yields
    ------
    list of list of str
        :func:`plan`'s entries held (empty: nothing held; not a class server, or ``off``).
    """
    how = mode() if how is None else how
    klass = class_name() if klass is None else klass
    if max_s is None:
        max_s = float(os.environ.get(MAX_ENV, DEFAULT_MAX_S))
    entries = plan(how, klass)
    if not entries:
        yield []
        return
    lock = _class_lock(klass)
    dog = None
    start = time.monotonic()
    try:
        entries = plan(how, klass)  # after the lock: as another grader left them
        # the watchdog: this file alone (standard library only), isolated from the folders
        try:
            dog = subprocess.Popen([sys.executable, "-I", os.path.abspath(__file__),
                                    json.dumps(entries), str(max_s)],
                                   stdin=subprocess.PIPE, start_new_session=True)
        except OSError as exc:  # no hold without a watchdog: measured as off
            print(f"mpilab: no watchdog ({exc}): the students' servers are not held back "
                  "during this measurement", file=sys.stderr)
            entries = []
        bad = apply(entries, 1)
        if bad:  # measured all the same, as without a class server; said, without names
            print(f"mpilab: the measurement could not hold {len(bad)} of the class's "
                  f"servers back (${ENV}={how}; {bad[0].rpartition(': ')[2]})",
                  file=sys.stderr)
        if how == "freeze":
            _frozen(entries)
        yield entries
    finally:
        try:
            restore(entries)
            if entries:
                HOLDS.append((how, time.monotonic() - start, len(entries)))
        finally:
            if dog is not None:
                try:
                    dog.stdin.write(b"done\n")
                    dog.stdin.close()
                except OSError:
                    pass
                try:
                    dog.wait(10)
                except subprocess.TimeoutExpired:
                    dog.kill()
                    dog.wait()
            if lock is not None:
                lock.close()


def watch(entries: list[list[str]], max_s: float, stream=None) -> str:
    """The watchdog: restore `entries` when `stream` ends without ``done`` or after `max_s`.

    Parameters
    ----------
    entries : list of list of str
        :func:`plan`'s entries the grader holds.
    max_s : float
        Seconds after which they are restored whatever the grader does.
    stream : file, optional
        The grader's pipe (default this process's stdin).

    Returns
    -------
    str
        ``done`` (the grader restored them), ``gone`` (the grader died: restored) or
        ``timeout`` (restored after `max_s`).
    """
    fd = (sys.stdin if stream is None else stream).fileno()
    deadline = time.monotonic() + max_s
    got = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            restore(entries)
            return "timeout"
        if select.select([fd], [], [], left)[0]:
            chunk = os.read(fd, 1 << 16)
            got += chunk
            if b"done" in got:
                return "done"
            if not chunk:
                restore(entries)
                return "gone"


if __name__ == "__main__":
    watch(json.loads(sys.argv[1]), float(sys.argv[2]))
