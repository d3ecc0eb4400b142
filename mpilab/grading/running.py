"""Running the student's code for a check: on MPI ranks, or here under a timer.

Every graded cell of the labs goes through :mod:`mpilab.grading` (this module and
:mod:`mpilab.grading.compare`), so grading policy lives here::

    from mpilab.grading import run_on_ranks, expect_per_rank
    saw = run_on_ranks(ring_pass, 10, ranks=3)   # ring_pass(comm, 10) on 3 ranks
    expect_per_rank(saw, [13, 10, 11], what="saw")

A check that fails raises :class:`CheckFailed`, an ``AssertionError``, whose message says
what is wrong in the student's terms ("rank 2 received 5, expected 3"; "timed out: rank 0
was stuck at line 6, ``comm.Send(...)``: both ranks sending first?"). A failed check never
takes the kernel or the grader down, and never hangs it:

* :func:`run_on_ranks` runs ``func(comm, *args)`` on the notebook's cluster
  (:func:`mpilab.cluster.current`, or 4 fresh engines), on a sub-communicator of the first
  `ranks` ranks split from ``COMM_WORLD``, so one cluster of 4 engines serves checks on 2,
  3 and 4 ranks. After `timeout` seconds it asks each stuck rank where it is (a Python
  stack dump through ``faulthandler``), restarts the engines and fails with the lines the
  ranks were stuck on. A crashed engine is restarted too. A cluster that does not answer
  before a check (e.g. a student's own run was interrupted) is restarted first, so a
  check never pays for someone else's deadlock.
* :func:`call_local` calls a function in the notebook's own process, under a timer.
* A function that timed out once is remembered, by a fingerprint of its code, for the
  life of the kernel: a later check of the same function fails at once ("skipped: ... in
  an earlier check"). A submission that deadlocks everywhere costs one timeout per
  function, not one per check.
* Results come back as plain data (``None``, ``bool``, ``int``, ``float``, ``complex``,
  ``str``, ``bytes``, lists, tuples and dicts of them, and base-class NumPy arrays of
  numbers; NumPy scalars become Python numbers). Anything else is refused with a message
  ("rank 1 returned a generator"), so a returned object cannot bring its own ``__eq__``.
  Arrays stay arrays rather than lists: payloads of several MiB compare fast and
  :func:`expect_equal` can name the first differing element.

Where the verdicts are decided
------------------------------
While a student works, the checks run in their own kernel: they can see what they
patched, and that is fine. At autograde time nbgrader runs each notebook through
:class:`mpilab.autograder.nbgrader.IsolatedExecute`, and no verdict is computed where the
student's code runs:

* the student's cells run in a sandboxed kernel (:mod:`mpilab.autograder.sandbox`: no view
  of the course, unprivileged, limited), and the checked functions run on fresh sandboxed
  MPI ranks (:mod:`mpilab.autograder.pool`);
* the test cells run in a second kernel, the grader's, which never runs student code:
  the names a test cell uses are exported from the student's kernel (functions as the
  bytes it pickled, never unpickled by the grader; values as plain data in
  :mod:`mpilab.autograder.wire`'s format) and this module, in the grader's kernel, runs the
  functions on the ranks and compares what came back.

So a submission that patches this module, NumPy, ``importlib`` or builtins in its kernel
changes nothing the grader uses, and scores what its honest parts earn. What is left to a
student: code that runs on the ranks computes its own results, so a function can
compute the right answer in a way the lab did not ask for (say, call ``comm.allgather``
where the lab wants a ring): checks that care inspect what the ranks did (the traced
message counts of labs 05 and 06), and the instructor reads the code of suspicious
submissions. See autograder/README.md.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..autograder.failures import (
    DEFAULT_TIMEOUT,
    BadResult,
    CheckFailed,
    EngineDied,
    RaisedError,
    TimedOut,
    Ungradable,
    check_not_timed_out,
    fail,
    fingerprint,
    name_of,
    remember_timeout,
)
from ..autograder.wire import plain, verify_plain
from ..sources import SourceMap, stuck_hint_at
from ..sources import describe_frame as _describe_frame
from ..sources import parse_stack as _parse_stack
from .compare import _fmt

__all__ = ["run_on_ranks", "try_on_ranks", "call_local", "autograding", "not_while_grading",
           "source_of", "DEFAULT_TIMEOUT", "DEFAULT_RANKS"]

DEFAULT_RANKS = 4  # engines started when a check finds no cluster
_RESTART_NOTE = "The MPI engines were restarted, so the next check starts clean."


def autograding() -> bool:
    """True while nbgrader executes the notebook (``nbgrader autograde`` or ``validate``).

    Returns
    -------
    bool
        As :func:`mpilab.autograder.isolated.nbgrader_executing`, which owns the switch.
    """
    from ..autograder import isolated

    return isolated.nbgrader_executing()


# ---------------------------------------------------------------------------------------
# engine side


def _engine_call(func, args, ranks, workdir):
    """Run on every engine: split the first `ranks` ranks off, call func(comm, *args).

    Returns ("ok", plain value) | ("out",) | ("raised", name, message, frames) |
    ("bad", description). Exceptions of `func` come back as values, so the client tells
    the student's errors from the machinery's.
    """
    import traceback

    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    inside = rank < ranks
    comm = world.Split(0 if inside else MPI.UNDEFINED, rank)
    if not inside:
        return ("out",)
    # (where a stuck rank is: the cluster's own SIGUSR1 stack dump, MPICluster.stacks)
    try:
        try:
            value = func(comm, *args)
        except BaseException as exc:  # noqa: BLE001 - SystemExit from student code too
            frames = [(f.filename, f.lineno, f.name)
                      for f in traceback.extract_tb(exc.__traceback__)[1:]]
            out = ("raised", type(exc).__name__, str(exc)[:2000], frames)
            try:  # for a timeout report, when the other ranks then wait for this one
                with open(os.path.join(workdir, f"error.{rank}"), "w") as f:
                    f.write(repr(out))
            except OSError:
                pass
            return out
        try:
            return ("ok", plain(value, "the value"))
        except TypeError as exc:
            return ("bad", str(exc))
    finally:
        try:
            comm.Free()
        except Exception:  # noqa: BLE001
            pass


# ---------------------------------------------------------------------------------------
# the cluster a check runs on


def _cluster(ranks: int | None):
    from .. import cluster as cl

    c = cl.current()
    if c is not None and c.client is None and c.lazy:
        c.lazy = False
        c.start()
    if c is None or c.client is None:
        print(f"(no MPI cluster in this notebook: starting {DEFAULT_RANKS} engines)")
        c = cl.start(DEFAULT_RANKS)
    elif c.broken or not c.healthy(timeout=3):
        why = c.broken or "not answering"
        print(f"(the MPI engines were {why}: restarting them before this check)")
        _restart(c)
    if ranks is None:
        ranks = c.ranks
    if not isinstance(ranks, int) or isinstance(ranks, bool) or ranks < 1:
        raise ValueError(f"ranks must be a positive integer, got {ranks!r}")
    if ranks > c.ranks:
        fail(CheckFailed(f"this check needs {ranks} ranks but the notebook's cluster has "
                         f"{c.ranks}: run `lab = mpilab.cluster.start({ranks})` and check again"))
    return c, ranks


def _restart(c) -> None:
    __tracebackhide__ = True
    from .. import cluster as cl

    try:
        c.restart()
    except cl.ClusterError as exc:
        fail(CheckFailed(f"the MPI engines could not be restarted: {exc}"))


def _read_errors(workdir: Path) -> dict[int, tuple]:
    import ast

    out = {}
    for f in workdir.glob("error.*"):
        try:
            out[int(f.suffix[1:])] = ast.literal_eval(f.read_text())
        except (OSError, ValueError, SyntaxError):
            pass
    return out


def _join(xs: Sequence[int]) -> str:
    xs = list(xs)
    if len(xs) <= 1:
        return "".join(map(str, xs))
    return ", ".join(map(str, xs[:-1])) + " and " + str(xs[-1])


def _ranks_word(xs: Sequence[int]) -> str:
    return f"rank{'s' * (len(xs) != 1)} {_join(xs)}"


def _raised_line(rank: int, out: tuple, smap: SourceMap) -> str:
    _tag, ename, msg, frames = out
    where = _describe_frame(frames, smap)
    return f"rank {rank}: {ename}: {msg}" + (f"\n    at {where}" if where else "")


# ---------------------------------------------------------------------------------------
# running student code


def run_on_ranks(func: Callable, *args: Any, ranks: int | None = None,
                 timeout: float = DEFAULT_TIMEOUT, blame: Any = None) -> list:
    """Run ``func(comm, *args)`` on `ranks` MPI ranks; return the results by rank.

    Parameters
    ----------
    func : callable
        Called on every rank of a communicator ``comm`` holding the first `ranks` ranks
        of the notebook's cluster (ranks outside it do not call `func`).
    *args
        Passed to `func` after ``comm`` (pickled to the engines).
    ranks : int, optional
        Size of the communicator; all engines of the cluster by default. Must not exceed
        the cluster's size.
    timeout : float
        Seconds before the check fails as stuck; the engines are then restarted.
    blame : callable or tuple of callables, optional
        What a timeout is remembered against. By default the callables among `args` when
        there are any (``run_on_ranks(harness, student_function, ...)``: the function
        under test is the argument), else `func` itself.

    Returns
    -------
    list
        ``ranks`` plain-data results, the result of rank ``k`` at index ``k``.

    Raises
    ------
    TimedOut, Skipped, RaisedError, EngineDied, BadResult
        All :class:`CheckFailed`, i.e. ``AssertionError``, with a readable message.
    """
    __tracebackhide__ = True
    name = name_of(func)
    if blame is None:
        blame = tuple(a for a in args if callable(a) and not isinstance(a, type)) or func
    blamed = blame if isinstance(blame, (tuple, list)) else (blame,)
    keys = [fingerprint(b) for b in blamed]
    smap = SourceMap.of(func, *args)  # the engines' frames, mapped back here
    if blamed != (func,):
        name = f"{name} with {' and '.join(name_of(b) for b in blamed)}"
    check_not_timed_out(keys, " and ".join(name_of(b) for b in blamed))
    if _isolated():
        smap.files = False  # frames come from the student's processes: map them only
        ran = _run_isolated(func, args, ranks, timeout, name)
    else:
        ran = _run_on_cluster(func, args, ranks, timeout, name)
    return _verdict(ran, name, keys, smap, timeout)


class _Ran:
    """What running code on the ranks came to, whichever way it ran."""

    def __init__(self, ranks: int):
        self.ranks = ranks
        self.outs: list[tuple] | None = None  # one reply per rank of the communicator
        self.stuck: list[int] = []
        self.finished: list[int] = []
        self.frames: dict[int, list] = {}  # a stuck rank's stack, outermost frame first
        self.errors: dict[int, tuple] = {}  # a rank that raised while others were stuck
        self.restarted = ""  # what was done after a timeout or a death


def _isolated() -> bool:
    from ..autograder import isolated

    return isolated.active()


def _run_on_cluster(func, args, ranks, timeout, name) -> _Ran:
    """On the notebook's ipyparallel engines (a sub-communicator of the first `ranks`)."""
    __tracebackhide__ = True
    from .. import cluster as cl

    c, n = _cluster(ranks)
    ran = _Ran(n)
    on = f"on {n} rank{'s' * (n != 1)}"
    workdir = Path(tempfile.mkdtemp(prefix="mpilab-check-"))
    try:
        try:
            ran.outs = c.run(_engine_call, func, args, n, str(workdir), timeout=timeout,
                             restart_on_timeout=False)[:n]
        except cl.MPITimeout as exc:
            ran.stuck = [r for r in exc.pending if r < n]
            ran.finished = [r for r in exc.finished if r < n]
            ran.frames = {r: f for r, f in exc.stacks.items() if r < n}
            ran.errors = _read_errors(workdir)
            _restart(c)
            ran.restarted = _RESTART_NOTE
        except cl.ClusterDied as exc:
            _restart(c)
            fail(EngineDied(f"{name} {on} crashed: {str(exc).split(':')[0]}. A crash in compiled "
                            "code (a buffer too small for the count?) or os._exit? "
                            + _RESTART_NOTE))
        except cl.RankError as exc:  # the harness itself failed, e.g. func not unpicklable
            first = min(exc.errors)
            ename, msg = exc.errors[first]
            fail(RaisedError(f"{name} could not run {on}: {ename}: {msg}. Does it use a "
                             "module or a variable the engines do not have?"))
        except cl.ClusterError as exc:
            fail(CheckFailed(f"{name} could not run {on}: {exc}"))
        except (KeyboardInterrupt, SystemExit):
            c.broken = "interrupted during a check"
            raise
        except Exception as exc:  # pickling func or args on the way out
            fail(RaisedError(f"{name} could not be sent to the engines: "
                             f"{type(exc).__name__}: {exc}. Does it use something that "
                             "only exists in the notebook, such as `lab` or an open "
                             "file?"))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return ran


def _run_isolated(func, args, ranks, timeout, name) -> _Ran:
    """At autograde time: on sandboxed ranks started by the grader (never in its process)."""
    __tracebackhide__ = True
    from ..autograder import isolated
    from ..autograder.pool import PoolError

    n = DEFAULT_RANKS if ranks is None else ranks
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"ranks must be a positive integer, got {ranks!r}")
    ran = _Ran(n)
    on = f"on {n} rank{'s' * (n != 1)}"
    try:
        out = isolated.run(func, args, n, timeout)
    except PoolError as exc:
        fail(Ungradable(f"{name} could not run {on}: the grader's MPI ranks did not start "
                        f"({exc})"))
    except Exception as exc:  # the grader's pickle of the harness and its arguments
        fail(RaisedError(f"{name} could not be sent to the MPI ranks: "
                         f"{type(exc).__name__}: {exc}"))
    if out.died:
        fail(EngineDied(f"{name} {on} crashed: {out.died}. A crash in compiled code (a "
                        "buffer too small for the count?), MPI_Abort, os._exit, or more "
                        "memory than the grader allows? The MPI ranks were started again "
                        "for the next check."))
    if out.bad:
        r = min(out.bad)
        fail(BadResult(f"{name} on rank {r} sent back {out.bad[r]}"))
    if out.timed_out:
        ran.stuck = [r for r in out.timed_out if r < n]
        ran.finished = [r for r in range(n) if r not in out.timed_out]
        ran.frames = {r: _parse_stack(t) for r, t in out.stacks.items()}
        ran.errors = {r: o for r, o in out.replies.items() if r < n and o[0] == "raised"}
        ran.restarted = "The MPI ranks were started again for the next check."
        return ran
    ran.outs = [out.replies[r] for r in range(n)]
    return ran


def _verdict(ran: _Ran, name: str, keys: Sequence[str], smap: SourceMap,
             timeout: float) -> list:
    """The results by rank, or the failure that explains what happened, in words."""
    __tracebackhide__ = True
    n = ran.ranks
    on = f"on {n} rank{'s' * (n != 1)}"
    if ran.outs is None:
        where = {r: _describe_frame(f, smap) for r, f in ran.frames.items()}
        lines = [f"{name} did not finish within {timeout:g} s {on}: "
                 f"{_ranks_word(ran.stuck)} still running"
                 + (f", {_ranks_word(ran.finished)} returned" if ran.finished else "") + "."]
        for r in ran.stuck:
            if where.get(r):
                lines.append(f"  rank {r} was at {where[r]}")
        for r, out in sorted(ran.errors.items()):
            lines.append("  it had raised on " + _raised_line(r, out, smap)
                         + "\n  (the other ranks then waited for it forever)")
        lines.append(stuck_hint_at(where, ran.finished) if not ran.errors else
                     "Fix the error first: a rank that fails leaves its partners waiting.")
        msg = "\n".join(lines)
        remember_timeout(keys, msg)
        fail(TimedOut(msg + "\n" + ran.restarted))
    outs = ran.outs
    raised = {r: o for r, o in enumerate(outs) if o[0] == "raised" and len(o) == 4}
    if raised:
        groups: dict[tuple, list[int]] = {}  # the same error on many ranks is said once
        for r in sorted(raised):
            _tag, ename, emsg, frames = raised[r]
            groups.setdefault((ename, emsg, _describe_frame(frames, smap)), []).append(r)
        detail = []
        for (ename, emsg, where), rs in list(groups.items())[:3]:
            detail.append(f"{_ranks_word(rs)}: {ename}: {emsg}"
                          + (f"\n    at {where}" if where else ""))
        fail(RaisedError(f"{name} raised an exception {on}:\n" + "\n".join(detail)))
    bad = {r: o for r, o in enumerate(outs) if o[0] != "ok" or len(o) != 2}
    if bad:
        r = min(bad)
        desc = (bad[r][1] if bad[r][0] == "bad" and len(bad[r]) == 2 and type(bad[r][1]) is str
                else f"an unexpected reply {_fmt(bad[r])}")
        fail(BadResult(f"{name} on rank {r} returned something the check cannot compare: "
                       f"{desc.replace('the value', 'the value returned', 1)}"))
    values = [o[1] for o in outs]
    for r, v in enumerate(values):
        if not verify_plain(v):
            fail(BadResult(f"rank {r} returned a {type(v).__name__}, which is not plain data"))
    return values


def source_of(func: Any) -> str:
    """The source text of `func` ("" when it cannot be found).

    At autograde time a student's function is a handle (:mod:`mpilab.autograder.isolated`)
    that carries the text their kernel read; elsewhere :func:`inspect.getsource`.

    Parameters
    ----------
    func : callable
        The function whose source is wanted: a student's function or its handle.

    Returns
    -------
    str
        Its source text, or ``""`` when none can be found (a builtin, a lambda typed at
        a prompt).
    """
    src = getattr(func, "source", None)
    if isinstance(getattr(func, "mpilab_key", None), str) and isinstance(src, str):
        return src
    import inspect

    try:
        return inspect.getsource(func)
    except (OSError, TypeError):
        return ""


def not_while_grading() -> bool:
    """True (after saying so) in the student's kernel at autograde time.

    Code that only shows a student what their function does (:func:`try_on_ranks`, the
    labs' ``show_*`` and ``compare_*``) earns no points and is skipped while grading: the
    graded checks run in the grader's kernel (:mod:`mpilab.autograder.isolated`).

    Returns
    -------
    bool
        True (after printing a note) in the student's kernel while grading, so the caller
        returns at once; False otherwise, including in the grader's own kernel.
    """
    from ..autograder import isolated

    if isolated.students_kernel():
        print("(not run while grading: trying code out earns no points; the graded "
              "checks run separately)")
        return True
    return False


def try_on_ranks(func: Callable, *args: Any, ranks: int | None = None,
                 timeout: float = DEFAULT_TIMEOUT) -> list | None:
    """Like :func:`run_on_ranks`, for trying code out: print the outcome, never raise.

    Parameters
    ----------
    func : callable
        Called as ``func(comm, *args)`` on every rank of the communicator.
    *args
        Passed to `func` after ``comm``.
    ranks : int, optional
        Size of the communicator; all engines of the cluster by default.
    timeout : float, optional
        Seconds before the run counts as stuck (default ``DEFAULT_TIMEOUT``, 10 s).

    Returns
    -------
    list or None
        The results by rank (each also printed), or None after printing why there are
        none (the check's failure message, or that it is not run while grading).
    """
    if not_while_grading():
        return None
    try:
        out = run_on_ranks(func, *args, ranks=ranks, timeout=timeout)
    except CheckFailed as exc:
        print(f"{type(exc).__name__}: {exc}")
        return None
    for r, v in enumerate(out):
        print(f"rank {r}: {_fmt(v)}")
    return out


class _Alarm(BaseException):
    """Raised into a local call by the timer (BaseException: `except Exception` misses it)."""

    def __init__(self, frame):
        super().__init__("timeout")
        self.frame = frame


def call_local(func: Callable, *args: Any, timeout: float = DEFAULT_TIMEOUT,
               **kwargs: Any) -> Any:
    """Call ``func(*args, **kwargs)`` here, in the notebook, under a timer; plain result.

    Fails with :class:`TimedOut` after `timeout` seconds (naming the line it was on),
    :class:`RaisedError` if it raised, :class:`BadResult` if it returned something that
    is not plain data. Without a main thread to signal, there is no timer. At autograde
    time the call runs on one sandboxed rank instead, never in the grader's process.

    Parameters
    ----------
    func : callable
        The function to call (usually the student's).
    *args
        Positional arguments for `func`.
    timeout : float, optional
        Seconds before the call fails as stuck (default ``DEFAULT_TIMEOUT``, 10 s).
    **kwargs
        Keyword arguments for `func`.

    Returns
    -------
    object
        What `func` returned, as plain data (NumPy scalars become Python numbers).

    Raises
    ------
    TimedOut, Skipped, RaisedError, BadResult
        All :class:`CheckFailed`, i.e. ``AssertionError``, with a readable message.
    """
    __tracebackhide__ = True
    if _isolated():  # at autograde time: on one sandboxed rank, never in the grader
        from ..autograder import isolated

        return isolated.call(func, *args, timeout=timeout, **kwargs)
    name = name_of(func)
    keys = [fingerprint(func)]
    check_not_timed_out(keys, name)
    timer = (threading.current_thread() is threading.main_thread()
             and hasattr(signal, "setitimer"))
    old = None
    if timer:
        def on_alarm(signum, frame):
            raise _Alarm(frame)

        old = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout, 0.5)  # again every 0.5 s if swallowed
    try:
        value = func(*args, **kwargs)
    except _Alarm as alarm:
        if timer:
            signal.setitimer(signal.ITIMER_REAL, 0)
        frames = []
        f = alarm.frame
        while f is not None:
            frames.append((f.f_code.co_filename, f.f_lineno, f.f_code.co_name))
            f = f.f_back
        where = _describe_frame(frames[::-1])
        msg = (f"{name} did not return within {timeout:g} s"
               + (f"; it was at {where}" if where else "") + ". An endless loop?")
        remember_timeout(keys, msg)
        fail(TimedOut(msg))
    except Exception as exc:
        import traceback

        frames = [(f.filename, f.lineno, f.name) for f in traceback.extract_tb(
            exc.__traceback__)[1:]]
        where = _describe_frame(frames)
        fail(RaisedError(f"{name} raised {type(exc).__name__}: {exc}"
                         + (f"\n    at {where}" if where else "")))
    finally:
        if timer:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    try:
        return plain(value, f"the value {name} returned")
    except TypeError as exc:
        fail(BadResult(str(exc)))
