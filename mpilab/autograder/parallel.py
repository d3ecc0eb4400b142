"""A lab's submissions autograded side by side.

``nbgrader autograde LAB`` grades the submissions of a lab one after another in one
process (parallel autograding is nbgrader's oldest open wish, jupyter/nbgrader#174). Most
of a grading is waiting: kernels and MPI ranks starting, a deadlocked exchange running
into its timeout. So this runs one ``nbgrader autograde LAB --student=ID`` per student,
`jobs` of them at once, on the course's one gradebook:

* each grading has its own sandbox, cgroup and PID namespace already
  (:mod:`mpilab.autograder.sandbox`), so side by side they cannot see or kill each other;
* a graded prediction's measurement holds the cores while it measures
  (:mod:`mpilab.autograder.quiet`), is made once and shared by every grading of the session
  (:func:`mpilab.grading.measured.cached`), so grading side by side changes no
  measurement;
* the gradebook is SQLite: the course's ``nbgrader_config.py`` gives it a busy timeout,
  so a grading that finds another one writing waits instead of failing.

Each nbgrader is a child of one process that has imported nbgrader already
(:func:`nbgrader`: a ``multiprocessing`` fork server with nbgrader preloaded): importing
nbgrader costs 4 to 5 s of CPU (1.8 s of it jsonschema building the parsers of
``rfc3987-syntax``, python-jsonschema/jsonschema#1428), which once per student would be
most of what a grading spends on the cores.

From the course directory (``autograder/``)::

    python -m mpilab.autograder.parallel lab00-mpi-basics --jobs 2 [--force] [--student ID ...]

(``make lab-autograde JOBS=2`` does this). Each student's nbgrader output is kept whole
and printed after the run, student by student, with the time each took.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .. import runtime

__all__ = ["Graded", "autograde", "default_jobs", "submitted", "nbgrader", "main"]


@dataclass
class Graded:
    """One student's ``nbgrader autograde`` run."""

    student: str
    returncode: int
    seconds: float
    log: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and "Removing failed assignment" not in self.log


def default_jobs(cores: int | None = None) -> int:
    """Gradings at once: one per usable core, plus one (most of a grading waits), at most
    8 and at least 1.

    Parameters
    ----------
    cores : int, optional
        The cores to count on (default: :func:`mpilab.runtime.usable_cores`).

    Returns
    -------
    int
        ``cores + 1``, clipped to 1 to 8.
    """
    cores = runtime.usable_cores() if cores is None else cores
    return max(1, min(8, int(cores) + 1))


def submitted(course: str | os.PathLike, lab: str) -> list[str]:
    """The students with a submission of `lab` in the course directory `course`.

    Parameters
    ----------
    course : str or os.PathLike
        The nbgrader course directory (the one with ``submitted/``).
    lab : str
        The assignment's name.

    Returns
    -------
    list of str
        The student ids with a folder ``submitted/ID/LAB``, sorted; empty without
        ``submitted/``.
    """
    base = Path(course) / "submitted"
    if not base.is_dir():
        return []
    return sorted(d.name for d in base.iterdir() if (d / lab).is_dir())


@functools.cache
def _context():
    """The fork server nbgrader's children come from (it starts with the first child)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["nbgrader.apps.nbgraderapp", "mpilab.autograder.nbgrader"])
    return ctx


def _nbgrader_child(args: list[str], cwd: str, env: dict[str, str], out: str,
                    err: str) -> None:
    """In the forked child: ``nbgrader ARGS`` in `cwd`, its output in the files out/err.

    The fork server's own stream objects live on in modules that took them at import
    (nbgrader's ``Validator.stream`` is ``sys.stdout`` as it was then): they write to
    fds 1 and 2, the files from now on, through buffers of their own, which the child's
    exit (``os._exit``) would drop. They are made line-buffered and flushed at the end
    with the child's own. (Where ``PYTHONUNBUFFERED`` was set, nothing was ever held
    back, so only an instructor's plain shell lost ``nbgrader validate``'s verdict.)
    """
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    inherited = list({id(s): s for s in (sys.stdout, sys.stderr, sys.__stdout__,
                                         sys.__stderr__) if s is not None}.values())
    for s in inherited:  # what the fork server still held goes where it was going
        with contextlib.suppress(Exception):
            s.flush()
    for fd, path in ((1, out), (2, err)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(f, fd)
        os.close(f)
    for s in inherited:
        with contextlib.suppress(Exception):
            s.reconfigure(line_buffering=True)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.argv = ["nbgrader", *args]
    from nbgrader.apps.nbgraderapp import NbGraderApp

    try:
        NbGraderApp.launch_instance(argv=list(args))
    finally:
        for s in (sys.stdout, sys.stderr, *inherited):
            with contextlib.suppress(Exception):
                s.flush()


def _clean_after_kill(wait: float = 20.0) -> None:
    """The scratch folders and cgroups of a killed grading, once its processes are gone
    (only what no running grading claims)."""
    from .scratch import remove_stale_cgroups, remove_stale_scratch, unclaimed

    deadline = time.monotonic() + wait
    while True:
        remove_stale_cgroups(unclaimed_for=0)  # empty once its processes are gone
        remove_stale_scratch()
        if not unclaimed() or time.monotonic() > deadline:
            return
        time.sleep(0.5)


def nbgrader(args, cwd: str | os.PathLike, *, timeout: float | None = None,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``nbgrader ARGS`` run in `cwd`, as ``python -m nbgrader`` would run it, but forked
    from a process with nbgrader imported; its exit status and output (text).

    A run past `timeout` seconds is killed and returns status 124.

    Parameters
    ----------
    args : iterable
        nbgrader's arguments (``["autograde", LAB, "--student=ID"]``), each made a string.
    cwd : str or os.PathLike
        The folder to run in (the course directory).
    timeout : float, optional
        Seconds before the run is killed (default: no limit). What a killed run leaves
        (scratch folders, cgroups) is cleaned up.
    env : dict of str to str, optional
        The environment (default: this process's), with this Python's folder put first
        on ``PATH`` and ``JPY_SESSION_NAME`` removed.

    Returns
    -------
    subprocess.CompletedProcess
        ``args`` (``["nbgrader", ...]``), ``returncode`` (124 when killed), ``stdout`` and
        ``stderr`` (text).
    """
    env = dict(os.environ if env is None else env)
    # nbgrader runs the `alembic` command of its own environment
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("JPY_SESSION_NAME", None)
    with tempfile.TemporaryDirectory(prefix="mpilab-nbgrader-") as tmp:
        out, err = os.path.join(tmp, "out"), os.path.join(tmp, "err")
        p = _context().Process(target=_nbgrader_child,
                               args=(list(map(str, args)), str(cwd), env, out, err))
        p.start()
        p.join(timeout)
        code = p.exitcode
        if code is None:  # past its time; its kernels watch it and end, their sandboxes
            # with them (bwrap --die-with-parent); what they leave, unclaimed now, goes
            p.kill()
            p.join(10)
            code = 124
            _clean_after_kill()
        p.close()
        texts = []
        for path in (out, err):
            try:
                with open(path, errors="replace") as f:
                    texts.append(f.read())
            except OSError:
                texts.append("")
        if code == 124:
            texts[1] += f"\n[nbgrader killed after {timeout:g} s]"
    return subprocess.CompletedProcess(["nbgrader", *map(str, args)], code, *texts)


def autograde(course: str | os.PathLike, lab: str, students: list[str] | None = None, *,
              jobs: int | None = None, args: tuple[str, ...] = (),
              timeout: float | None = None, on_done=None) -> list[Graded]:
    """Autograde `lab` for `students` (all who submitted by default), `jobs` at a time.

    Parameters
    ----------
    course : path
        The nbgrader course directory (the course's ``autograder/``).
    lab : str
        The assignment's name.
    students : list of str, optional
        Whom to grade; every student with a submission of `lab` by default.
    jobs : int, optional
        Gradings at once; :func:`default_jobs` by default. 1 grades one after another.
    args : tuple of str
        More arguments for ``nbgrader autograde`` (``--force``, ...).
    timeout : float, optional
        Seconds one student's grading may take before its nbgrader is killed (it then
        counts as failed, with what it printed).
    on_done : callable, optional
        Called with each :class:`Graded` as it finishes (from a worker thread).

    Returns
    -------
    list of Graded
        One per student, in the order of `students`.
    """
    course = Path(course)
    students = submitted(course, lab) if students is None else list(students)
    jobs = default_jobs() if jobs is None else max(1, int(jobs))
    lock = threading.Lock()

    def one(student: str) -> Graded:
        t0 = time.perf_counter()
        res = nbgrader(["autograde", lab, f"--student={student}", *args], course,
                       timeout=timeout)
        got = Graded(student, res.returncode, time.perf_counter() - t0,
                     res.stdout + res.stderr)
        if on_done is not None:
            with lock:
                on_done(got)
        return got

    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(students)))) as pool:
        return list(pool.map(one, students))


def main(argv: list[str] | None = None) -> int:
    """The command line: autograde a lab's submissions side by side, then print their logs.

    Parameters
    ----------
    argv : list of str, optional
        ``LAB [--jobs N] [--student ID ...] [--course DIR] [--timeout SECONDS]``; any other
        argument goes to ``nbgrader autograde`` (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: 0 when every grading succeeded (or there was nothing to grade),
        1 when one failed.
    """
    ap = argparse.ArgumentParser(
        prog="python -m mpilab.autograder.parallel",
        description="nbgrader autograde, one process per student, several at once "
                    "(run it from the course directory, autograder/)")
    ap.add_argument("lab")
    ap.add_argument("--jobs", "-j", type=int, default=None,
                    help=f"gradings at once (default: usable cores + 1, here {default_jobs()})")
    ap.add_argument("--student", action="append", default=None,
                    help="grade this student (again for more); default: every submission")
    ap.add_argument("--course", default=".", help="the course directory (default: here)")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds one student's grading may take")
    opts, rest = ap.parse_known_args(argv)
    students = opts.student or submitted(opts.course, opts.lab)
    if not students:
        print(f"[parallel] {opts.lab}: nothing to grade (no submissions under "
              f"{opts.course}/submitted/)")
        return 0
    jobs = default_jobs() if opts.jobs is None else opts.jobs
    print(f"[parallel] autograding {len(students)} submission(s) of {opts.lab}, {jobs} at a time",
          flush=True)
    t0 = time.perf_counter()

    def said(g: Graded) -> None:
        print(f"[parallel] {g.student}: {'graded' if g.ok else 'FAILED'} in {g.seconds:.1f} s",
              flush=True)

    done = autograde(opts.course, opts.lab, students, jobs=jobs, args=tuple(rest),
                     timeout=opts.timeout, on_done=said)
    # the failures' logs last, where a terminal's end (or a truncated CI log) shows them
    for g in sorted(done, key=lambda g: not g.ok):
        print(f"\n===== {g.student} ({g.seconds:.1f} s, exit {g.returncode})\n{g.log.rstrip()}")
    failed = [g.student for g in done if not g.ok]
    wall = time.perf_counter() - t0
    print(f"\n[parallel] {len(done)} submission(s) of {opts.lab} in {wall:.0f} s "
          f"({60 * len(done) / wall:.1f} per minute, {jobs} at a time)"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
