"""Quiet cores for the grader's measurements while gradings run side by side.

Several gradings may run at once (:mod:`mpilab.autograder.parallel`), and they share the
machine's cores. Most of a grading does not care: a student's halo is right or wrong
however busy the machine is. A graded *prediction* does: it compares the student's model
with a measurement made now (:mod:`mpilab.grading.measured`), and another grading's ranks
spinning on the same cores would change that measurement. So the gradings of one user
share a reader-writer lock:

* :func:`working` (shared): anything of a grading that keeps cores busy: every request
  to its MPI ranks, every compile, its kernels' and rank pool's start and imports, a
  course's generation. Many gradings work at once.
* :func:`measuring` (exclusive): a measurement waits until every running piece of work
  has ended, and no new one starts until it is done. It comes first: a measurement
  waiting for the lock stops new work from starting (no starving behind a busy class).

Both are ``flock`` locks on files in this user's private grading folder, so a grading
that dies releases what it held. Inside :func:`measuring`, this process's own work (the
measurement's ranks) does not wait for itself. What the lock does not hold back: nbgrader's
own bookkeeping between kernels (its processes are forked with nbgrader imported:
:mod:`mpilab.autograder.parallel`) and the ending of kernels and pools, bursts of a fraction
of a second that a measurement's best-of-repetitions rides out. Beside two other lab
modules' gradings, a grader's ping-pong once measured three times slow while kernels
started unheld; their start is held since. Lab 01's 4 MiB message once measured 2.7
times its prediction beside two other modules all the same: its repetitions outlasted a
time slice, so whatever the lock let through cut every one of them; they are short since
(:data:`mpilab.pingpong.loops.REP_BYTES`).

Nor does the lock see the students' own work on a class server: once the cores are held,
a measurement also holds the students' servers back (:func:`mpilab.autograder.reserve.reserved`:
frozen by default, ``$MPILAB_CLASSROOM_GRADER``), and lets them go before the cores.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from . import reserve

__all__ = ["folder", "measuring", "working"]

_local = threading.local()


def folder() -> Path | None:
    """This user's grading folder (``$TMPDIR/mpilab-grading-<uid>``, mode 700), or None
    where it is not safely this user's alone.

    Returns
    -------
    Path or None
        The folder, made if missing; None when it cannot be made or read, or belongs to
        another user, or its group or others have any access to it.
    """
    d = Path(tempfile.gettempdir()) / f"mpilab-grading-{os.getuid()}"
    try:
        d.mkdir(mode=0o700, exist_ok=True)
        st = d.stat()
    except OSError:
        return None
    return d if st.st_uid == os.getuid() and not st.st_mode & 0o077 else None


@contextlib.contextmanager
def _files(where: str | os.PathLike | None):
    """The two lock files (gate, cores), open; (None, None) without a private folder."""
    where = folder() if where is None else Path(where)
    if where is None:
        yield None, None
        return
    with open(where / "gate.lock", "a") as gate, open(where / "cores.lock", "a") as cores:
        yield gate, cores


@contextlib.contextmanager
def _held(kind: str) -> Iterator[None]:
    """This thread holds the cores as `kind` ("measuring" or "working") meanwhile."""
    _local.held = kind
    try:
        yield
    finally:
        _local.held = None


#: ``MPILAB_MEASURING=forbidden`` in a process's environment: it and its children run side
#: by side with other work that this lock does not see (the side-by-side phase of the test
#: suite, pytest-xdist workers: tests/conftest.py), so a measurement there would time the
#: others too. It is refused rather than made, whatever it would have waited for.
FORBIDDEN = "forbidden"


@contextlib.contextmanager
def measuring(where: str | os.PathLike | None = None) -> Iterator[None]:
    """Hold the cores for a measurement: no other grading of this user works meanwhile.

    Waits until every piece of work running under :func:`working` has ended; new work
    waits from the moment this call starts waiting. Nested in another ``measuring`` of the
    same thread, it holds nothing more.

    Parameters
    ----------
    where : str or os.PathLike, optional
        The folder of the lock files (default: this user's grading folder,
        :func:`folder`; without one, nothing is locked).

    Yields
    ------
    None
        While the cores are held.

    Raises
    ------
    RuntimeError
        Inside this thread's own :func:`working` block, or (with `where` left out) in a
        process whose environment says ``MPILAB_MEASURING=forbidden``.
    """
    held = getattr(_local, "held", None)
    if held == "measuring":  # nested: held already
        yield
        return
    if held == "working":
        raise RuntimeError("a measurement was started inside a grading's own work")
    if where is None and os.environ.get("MPILAB_MEASURING") == FORBIDDEN:
        raise RuntimeError(
            "no measurement here: this process runs side by side with work the grading "
            "lock does not see (MPILAB_MEASURING=forbidden; in the test suite, a test not "
            "marked `measures`, which pytest-xdist runs beside others: mark it)")
    with _files(where) as (gate, cores), _held("measuring"):
        if gate is not None:  # (without a private folder there is nobody to share with)
            fcntl.flock(gate, fcntl.LOCK_EX)  # new work waits behind us from here on
            fcntl.flock(cores, fcntl.LOCK_EX)  # running work has ended
        with reserve.reserved():  # on a class server: the students' servers held back
            yield


@contextlib.contextmanager
def working(where: str | os.PathLike | None = None) -> Iterator[None]:
    """Work that keeps cores busy; waits while a measurement holds (or waits for) them.

    Shared: many gradings work at once. Inside a :func:`measuring` or ``working`` block of
    the same thread, it holds nothing more (a measurement's own ranks do not wait for it).

    Parameters
    ----------
    where : str or os.PathLike, optional
        As for :func:`measuring`.

    Yields
    ------
    None
        While the work may run.
    """
    if getattr(_local, "held", None):  # inside a measurement (its own ranks) or nested
        yield
        return
    with _files(where) as (gate, cores), _held("working"):
        if gate is not None:
            fcntl.flock(gate, fcntl.LOCK_EX)  # passes only while no measurement waits
            try:
                fcntl.flock(cores, fcntl.LOCK_SH)
            finally:
                fcntl.flock(gate, fcntl.LOCK_UN)
        yield
