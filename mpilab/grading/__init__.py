"""Graded checks for the mpilab labs: run the student's code on MPI ranks, compare, explain.

Every graded cell of the labs goes through this module, so grading policy lives here::

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

import marshal
import math
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from ..autograder.quiet import measuring
from ..autograder.wire import _SCALARS, _plain
from ..sources import MessageOnly, SourceMap, stuck_hint_at
from ..sources import describe_frame as _describe_frame
from ..sources import parse_stack as _parse_stack

__all__ = [
    "CheckFailed",
    "TimedOut",
    "Skipped",
    "RaisedError",
    "EngineDied",
    "BadResult",
    "run_on_ranks",
    "try_on_ranks",
    "call_local",
    "expect",
    "expect_equal",
    "expect_close",
    "expect_per_rank",
    "expect_timing",
    "measuring",
    "autograding",
    "not_while_grading",
    "source_of",
    "forget_timeouts",
]

DEFAULT_TIMEOUT = 10.0
DEFAULT_RANKS = 4  # engines started when a check finds no cluster
_RESTART_NOTE = "The MPI engines were restarted, so the next check starts clean."

# The one piece of state, kept across importlib.reload (hidden tests reload this module):
# fingerprint -> message of the first timeout. It can only make checks fail.
_STATE = globals().get("_STATE")
if type(_STATE) is not dict or type(_STATE.get("timed_out")) is not dict:
    _STATE = {"timed_out": {}}


# ---------------------------------------------------------------------------------------
# failures


def _keep(cls: type) -> type:
    """Keep the first class of this name across importlib.reload.

    Hidden tests reload this module; code that already holds the old classes (an
    ``except TimedOut`` written before the reload) must still catch what the reloaded
    functions raise. Only an AssertionError subclass of the same name is kept, so a
    replaced class can at worst raise something else, which fails the check all the same.
    """
    old = globals().get(cls.__name__)
    if isinstance(old, type) and issubclass(old, AssertionError) and old.__module__ == __name__:
        return old
    return cls


@_keep
class CheckFailed(MessageOnly, AssertionError):
    """A graded check failed; the message says why, in the student's terms."""


@_keep
class TimedOut(CheckFailed):
    """The code did not finish in time (a deadlock or an endless loop)."""


@_keep
class Skipped(TimedOut):
    """Not run: the same function timed out in an earlier check."""


@_keep
class RaisedError(CheckFailed):
    """The student's code raised an exception (on some rank, or in the notebook)."""


@_keep
class EngineDied(CheckFailed):
    """An engine process died while running the student's code."""


@_keep
class BadResult(CheckFailed):
    """The code returned something that is not plain data."""


def _fail(failure: CheckFailed) -> NoReturn:
    """Raise `failure` with nothing chained: the student reads one message, not two."""
    raise failure from None


def autograding() -> bool:
    """True while nbgrader executes the notebook (``nbgrader autograde`` or ``validate``)."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def forget_timeouts() -> None:
    """Forget which functions timed out (tests use it; a fixed function is new anyway)."""
    _STATE["timed_out"].clear()


# ---------------------------------------------------------------------------------------
# fingerprints: "the same function" across checks


def _code_key(code) -> bytes:
    parts = [code.co_code, code.co_names, code.co_varnames, code.co_freevars]
    for c in code.co_consts:
        parts.append(_code_key(c) if hasattr(c, "co_code") else repr(c).encode())
    return marshal.dumps(tuple(p if isinstance(p, bytes) else repr(p).encode() for p in parts))


def _fingerprint(obj: Any) -> str:
    """Same behaviour, same key: the function's bytecode and plain constants it reads.

    Comments and the function's name do not count: the naive exchange shown in a lab and
    a student's unchanged copy of it are the same function.
    """
    import hashlib

    key = getattr(obj, "mpilab_key", None)  # a student's function, keyed in their kernel
    if isinstance(key, str):
        return key
    h = hashlib.sha1()
    fp = getattr(obj, "fingerprint", None)  # mpilab.build.CompiledFunction
    if isinstance(fp, str):
        h.update(fp.encode())
    elif hasattr(obj, "__code__"):
        code = obj.__code__
        h.update(_code_key(code))
        h.update(repr(getattr(obj, "__defaults__", None)).encode())
        glb = getattr(obj, "__globals__", {}) or {}
        for name in code.co_names:
            v = glb.get(name)
            if type(v) in (int, float, str, bool, bytes):
                h.update(f"{name}={v!r}".encode())
        for cell in getattr(obj, "__closure__", None) or ():  # what a closure wraps counts
            try:
                v = cell.cell_contents
            except ValueError:  # empty cell
                continue
            if callable(v) and not isinstance(v, type):
                h.update(_fingerprint(v).encode())
            elif type(v) in (int, float, str, bool, bytes):
                h.update(repr(v).encode())
    elif hasattr(obj, "func"):  # functools.partial
        h.update(_fingerprint(obj.func).encode())
        h.update(repr((obj.args, obj.keywords)).encode()[:10000])
    else:
        h.update(f"{type(obj).__module__}.{type(obj).__qualname__}:{id(obj)}".encode())
    return h.hexdigest()


def _name(func: Any) -> str:
    return (getattr(func, "__name__", None) or getattr(func, "name", None)
            or type(func).__name__)


def _check_not_timed_out(keys: Sequence[str], name: str) -> None:
    __tracebackhide__ = True
    for k in keys:
        first = _STATE["timed_out"].get(k)
        if isinstance(first, str):
            _fail(Skipped(f"{name} timed out in an earlier check, so this check does not run "
                          f"it again (it would only wait for the same timeout).\n"
                          f"Earlier: {first}\nFix it, run its cell, then the checks again."))


def _remember_timeout(keys: Sequence[str], message: str) -> None:
    for k in keys:
        _STATE["timed_out"][k] = message.split("\n")[0]


# ---------------------------------------------------------------------------------------
# plain data (what it is: mpilab.autograder.wire._plain)


def _verify_plain(x: Any, depth: int = 0) -> bool:
    """True when `x` is plain data by exact type (what came back can be trusted to compare)."""
    t = type(x)
    if t in _SCALARS:
        return True
    if depth > 21:
        return False
    if t is np.ndarray:
        return x.dtype.kind in "biufc" and x.dtype.fields is None
    if t in (list, tuple):
        return all(_verify_plain(v, depth + 1) for v in x)
    if t is dict:
        return all(_verify_plain(k, depth + 1) and _verify_plain(v, depth + 1)
                   for k, v in x.items())
    return False


# ---------------------------------------------------------------------------------------
# where code was: frames and source lines


# ---------------------------------------------------------------------------------------
# engine side


def _engine_call(func, args, nranks, workdir):
    """Run on every engine: split the first `nranks` ranks off, call func(comm, *args).

    Returns ("ok", plain value) | ("out",) | ("raised", name, message, frames) |
    ("bad", description). Exceptions of `func` come back as values, so the client tells
    the student's errors from the machinery's.
    """
    import traceback

    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    inside = rank < nranks
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
            return ("ok", _plain(value, "the value"))
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
        ranks = c.n
    if not isinstance(ranks, int) or isinstance(ranks, bool) or ranks < 1:
        raise ValueError(f"ranks must be a positive integer, got {ranks!r}")
    if ranks > c.n:
        _fail(CheckFailed(f"this check needs {ranks} ranks but the notebook's cluster has "
                          f"{c.n}: run `lab = mpilab.cluster.start({ranks})` and check again"))
    return c, ranks


def _restart(c) -> None:
    __tracebackhide__ = True
    from .. import cluster as cl

    try:
        c.restart()
    except cl.ClusterError as exc:
        _fail(CheckFailed(f"the MPI engines could not be restarted: {exc}"))


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
    name = _name(func)
    if blame is None:
        blame = tuple(a for a in args if callable(a) and not isinstance(a, type)) or func
    blamed = blame if isinstance(blame, (tuple, list)) else (blame,)
    keys = [_fingerprint(b) for b in blamed]
    smap = SourceMap.of(func, *args)  # the engines' frames, mapped back here
    if blamed != (func,):
        name = f"{name} with {' and '.join(_name(b) for b in blamed)}"
    _check_not_timed_out(keys, " and ".join(_name(b) for b in blamed))
    if _isolated():
        smap.files = False  # frames come from the student's processes: map them only
        ran = _run_isolated(func, args, ranks, timeout, name)
    else:
        ran = _run_on_cluster(func, args, ranks, timeout, name)
    return _verdict(ran, name, keys, smap, timeout)


class _Ran:
    """What running code on the ranks came to, whichever way it ran."""

    def __init__(self, n: int):
        self.n = n
        self.outs: list[tuple] | None = None  # one reply per rank of the communicator
        self.stuck: list[int] = []
        self.finished: list[int] = []
        self.frames: dict[int, list] = {}  # a stuck rank's stack, outermost frame first
        self.errors: dict[int, tuple] = {}  # a rank that raised while others were stuck
        self.restarted = ""  # what was done after a timeout or a death


def _isolated() -> bool:
    return bool(os.environ.get("MPILAB_GRADER"))


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
            _fail(EngineDied(f"{name} {on} crashed: {str(exc).split(':')[0]}. A crash in compiled "
                             "code (a buffer too small for the count?) or os._exit? "
                             + _RESTART_NOTE))
        except cl.RankError as exc:  # the harness itself failed, e.g. func not unpicklable
            first = min(exc.errors)
            ename, msg = exc.errors[first]
            _fail(RaisedError(f"{name} could not run {on}: {ename}: {msg}. Does it use a "
                              "module or a variable the engines do not have?"))
        except cl.ClusterError as exc:
            _fail(CheckFailed(f"{name} could not run {on}: {exc}"))
        except (KeyboardInterrupt, SystemExit):
            c.broken = "interrupted during a check"
            raise
        except Exception as exc:  # pickling func or args on the way out
            _fail(RaisedError(f"{name} could not be sent to the engines: "
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
        _fail(CheckFailed(f"{name} could not run {on}: the grader's MPI ranks did not start "
                          f"({exc})"))
    except Exception as exc:  # the grader's pickle of the harness and its arguments
        _fail(RaisedError(f"{name} could not be sent to the MPI ranks: "
                          f"{type(exc).__name__}: {exc}"))
    if out.died:
        _fail(EngineDied(f"{name} {on} crashed: {out.died}. A crash in compiled code (a "
                         "buffer too small for the count?), MPI_Abort, os._exit, or more "
                         "memory than the grader allows? The MPI ranks were started again "
                         "for the next check."))
    if out.bad:
        r = min(out.bad)
        _fail(BadResult(f"{name} on rank {r} sent back {out.bad[r]}"))
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
    n = ran.n
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
        _remember_timeout(keys, msg)
        _fail(TimedOut(msg + "\n" + ran.restarted))
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
        _fail(RaisedError(f"{name} raised an exception {on}:\n" + "\n".join(detail)))
    bad = {r: o for r, o in enumerate(outs) if o[0] != "ok" or len(o) != 2}
    if bad:
        r = min(bad)
        desc = (bad[r][1] if bad[r][0] == "bad" and len(bad[r]) == 2 and type(bad[r][1]) is str
                else f"an unexpected reply {_fmt(bad[r])}")
        _fail(BadResult(f"{name} on rank {r} returned something the check cannot compare: "
                        f"{desc.replace('the value', 'the value returned', 1)}"))
    values = [o[1] for o in outs]
    for r, v in enumerate(values):
        if not _verify_plain(v):
            _fail(BadResult(f"rank {r} returned a {type(v).__name__}, which is not plain data"))
    return values


def source_of(func: Any) -> str:
    """The source text of `func` ("" when it cannot be found).

    At autograde time a student's function is a handle (:mod:`mpilab.autograder.isolated`)
    that carries the text their kernel read; elsewhere :func:`inspect.getsource`.
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
    """
    if os.environ.get("MPILAB_GRADING") and not _isolated():
        print("(not run while grading: trying code out earns no points; the graded "
              "checks run separately)")
        return True
    return False


def try_on_ranks(func: Callable, *args: Any, ranks: int | None = None,
                 timeout: float = DEFAULT_TIMEOUT) -> list | None:
    """Like :func:`run_on_ranks`, for trying code out: print the outcome, never raise.

    Returns the results by rank, or None after printing why there are none (or that it
    is not run while grading).
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
    is not plain data. Without a main thread to signal, there is no timer.
    """
    __tracebackhide__ = True
    name = _name(func)
    keys = [_fingerprint(func)]
    _check_not_timed_out(keys, name)
    if _isolated():
        return _call_isolated(func, args, kwargs, timeout, name, keys)
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
        _remember_timeout(keys, msg)
        _fail(TimedOut(msg))
    except Exception as exc:
        import traceback

        frames = [(f.filename, f.lineno, f.name) for f in traceback.extract_tb(
            exc.__traceback__)[1:]]
        where = _describe_frame(frames)
        _fail(RaisedError(f"{name} raised {type(exc).__name__}: {exc}"
                          + (f"\n    at {where}" if where else "")))
    finally:
        if timer:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    try:
        return _plain(value, f"the value {name} returned")
    except TypeError as exc:
        _fail(BadResult(str(exc)))


def _call_isolated(func, args, kwargs, timeout, name, keys) -> Any:
    """call_local at autograde time: on one sandboxed rank, never in the grader."""
    __tracebackhide__ = True
    from ..autograder import isolated
    from ..autograder.pool import PoolError

    smap = SourceMap.of(func, *args, *kwargs.values())
    smap.files = False
    try:
        out = isolated.local(func, args, kwargs, timeout)
    except PoolError as exc:
        _fail(CheckFailed(f"{name} could not run: the grader's process did not start ({exc})"))
    except Exception as exc:  # the grader's pickle of the arguments
        _fail(RaisedError(f"{name} could not be sent to the grader's process: "
                          f"{type(exc).__name__}: {exc}"))
    if out.died:
        _fail(EngineDied(f"{name} crashed: {out.died}"))
    if out.timed_out:
        where = _describe_frame(_parse_stack(out.stacks.get(0, "")), smap)
        msg = (f"{name} did not return within {timeout:g} s"
               + (f"; it was at {where}" if where else "") + ". An endless loop?")
        _remember_timeout(keys, msg)
        _fail(TimedOut(msg))
    if out.bad:
        _fail(BadResult(f"{name} sent back {out.bad[0]}"))
    reply = out.replies.get(0, ())
    if reply[:1] == ("raised",) and len(reply) == 4:
        _tag, ename, emsg, frames = reply
        where = _describe_frame(frames, smap)
        _fail(RaisedError(f"{name} raised {ename}: {emsg}" + (f"\n    at {where}" if where else "")))
    if reply[:1] == ("bad",) and len(reply) == 2:
        _fail(BadResult(str(reply[1]).replace("the value", f"the value {name} returned", 1)))
    if reply[:1] != ("ok",) or len(reply) != 2 or not _verify_plain(reply[1]):
        _fail(BadResult(f"{name} sent back an unexpected reply"))
    return reply[1]


# ---------------------------------------------------------------------------------------
# comparisons that say what is wrong


def _fmt(x: Any, limit: int = 80) -> str:
    if isinstance(x, np.ndarray):
        if x.size <= 8:
            return f"array({x.tolist()})"
        head = np.array2string(x.ravel()[:3], separator=", ")[1:-1]
        tail = np.array2string(x.ravel()[-2:], separator=", ")[1:-1]
        return f"an array of {x.size:,} {x.dtype} [{head}, ..., {tail}]"
    if isinstance(x, float):
        return f"{x:.6g}"
    if type(x) in (list, tuple) and any(isinstance(v, (np.ndarray, float)) for v in x):
        inner = ", ".join(_fmt(v, limit) for v in x[:4]) + (", ..." if len(x) > 4 else "")
        return f"({inner})" if type(x) is tuple else f"[{inner}]"
    s = repr(x)
    return s if len(s) <= limit else s[: limit - 5] + " ...]"


def _is_seq(x: Any) -> bool:
    return isinstance(x, (list, tuple, np.ndarray))


def _is_num(x: Any) -> bool:
    return type(x) in (int, float, complex) or (isinstance(x, np.number)
                                                 and type(x).__module__ == "numpy")


def _trusted(x: Any) -> tuple[Any, str | None]:
    """`x` as plain data (so its == is ours, not the student's), or why it cannot be."""
    try:
        return _plain(x), None
    except TypeError as exc:
        return None, str(exc).replace("the result ", "", 1)


def _diff(got: Any, want: Any, close: tuple[float, float] | None) -> str | None:
    """None when equal (or close); else what differs, e.g. '[3] is 5, expected 3'."""
    got, why = _trusted(got)
    if why:
        return why
    return _diff_plain(got, want, close)


def _numeric(x: Any) -> np.ndarray | None:
    """`x` as a numeric array when it is one (an array, or a rectangular list of numbers)."""
    if isinstance(x, np.ndarray):
        return x if x.dtype.kind in "biufc" else None
    try:
        a = np.asarray(x)
    except (ValueError, TypeError):
        return None
    return a if a.dtype.kind in "biufc" and a.ndim >= 1 else None


def _diff_plain(got: Any, want: Any, close: tuple[float, float] | None) -> str | None:
    if _is_seq(want):
        if not _is_seq(got):
            return f"is {_fmt(got)}, expected a sequence like {_fmt(want)}"
        g, w = _numeric(got), _numeric(want)
        if g is not None and w is not None and (w.size > 8 or w.ndim > 1):
            if g.shape != w.shape:
                if g.ndim == 1 and w.ndim == 1:
                    return f"has {len(g):,} elements, expected {len(w):,}"
                return f"has shape {g.shape}, expected {w.shape}"
            if close is None:
                bad = g != w
            else:
                with np.errstate(invalid="ignore"):
                    bad = ~np.isclose(g, w, rtol=close[0], atol=close[1])
            if not bad.any():
                return None
            idx = np.argwhere(bad)
            i = tuple(int(k) for k in idx[0])
            return (f"differs at {len(idx):,} of {g.size:,} elements; the first at index "
                    f"{i[0] if len(i) == 1 else i}: {_fmt(g[i].item())}, expected "
                    f"{_fmt(w[i].item())}")
        if len(got) != len(want):
            return f"has {len(got):,} elements, expected {len(want):,}"
        for i, (a, b) in enumerate(zip(list(got), list(want), strict=True)):
            d = _diff_plain(a.item() if isinstance(a, np.generic) else a,
                            b.item() if isinstance(b, np.generic) else b, close)
            if d is not None:
                return f"[{i}]{d}" if d.startswith("[") else f"[{i}] {d}"
        return None
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return f"is {_fmt(got)}, expected a dict"
        if set(got) != set(want):
            return f"has keys {sorted(map(str, got))}, expected {sorted(map(str, want))}"
        for k in want:
            d = _diff_plain(got[k], want[k], close)
            if d is not None:
                return f"[{k!r}] {d}"
        return None
    if _is_num(want) and _is_num(got):
        if close is None:
            ok = bool(got == want)
        else:
            ok = bool(np.isfinite(got) and abs(got - want) <= close[1] + close[0] * abs(want))
        return None if ok else f"is {_fmt(got)}, expected {_fmt(want)}"
    if type(got) is not type(want):
        return f"is {_fmt(got)} ({type(got).__name__}), expected {_fmt(want)}"
    return None if got == want else f"is {_fmt(got)}, expected {_fmt(want)}"


def expect(condition: Any, message: str) -> None:
    """Fail with `message` unless `condition` holds (a bare ``assert`` says nothing)."""
    __tracebackhide__ = True
    if not (condition is True or (type(condition) in (bool, np.bool_) and bool(condition))):
        _fail(CheckFailed(message))


def expect_equal(got: Any, want: Any, what: str = "the result", hint: str = "") -> None:
    """Fail unless `got` equals `want`, saying where they differ.

    >>> expect_equal([1, 2, 5], [1, 2, 3], what="the list")
    Traceback (most recent call last):
    ...
    mpilab.grading.CheckFailed: the list[2] is 5, expected 3
    """
    __tracebackhide__ = True
    d = _diff(got, want, None)
    if d is not None:
        _fail(CheckFailed(f"{what}{'' if d.startswith('[') else ' '}{d}"
                          + (f"\n{hint}" if hint else "")))


def expect_close(got: Any, want: Any, what: str = "the result", *, rtol: float = 1e-6,
                 atol: float = 0.0, hint: str = "") -> None:
    """Fail unless `got` is within ``atol + rtol * |want|`` of `want` (numbers or arrays)."""
    __tracebackhide__ = True
    d = _diff(got, want, (rtol, atol))
    if d is not None:
        tol = f"within {rtol:g} relative" + (f" + {atol:g}" if atol else "")
        _fail(CheckFailed(f"{what}{'' if d.startswith('[') else ' '}{d} ({tol})"
                          + (f"\n{hint}" if hint else "")))


def expect_per_rank(got: Sequence, want: Sequence, what: str = "returned", *,
                    rtol: float | None = None, atol: float = 0.0,
                    known: dict[str, Any] | None = None, label: str = "",
                    hint: str = "") -> None:
    """Fail unless rank k's result equals (or is close to) ``want[k]`` for every rank.

    The message names each wrong rank: "rank 2 received 5, expected 3". `what` is the
    verb ("received", "saw", "returned"); `label` says which case this is ("ring_pass on
    4 ranks, token 7"); `hint` follows the list. With `known`, a wrong value equal to one
    of its values is named by its key ("rank 1 received rank 1's array, expected rank
    0's array"). With `rtol`, values are compared as :func:`expect_close` does.
    """
    __tracebackhide__ = True
    if len(got) != len(want):
        _fail(CheckFailed(f"expected results from {len(want)} ranks, got {len(got)}"))
    close = None if rtol is None else (rtol, atol)
    wrong = []
    for r, (g, w) in enumerate(zip(got, want, strict=True)):
        d = _diff(g, w, close)
        if d is None:
            continue
        got_known = next((k for k, v in (known or {}).items() if _diff(g, v, close) is None),
                         None)
        want_known = next((k for k, v in (known or {}).items() if _diff(w, v, close) is None),
                          None)
        if _trusted(g)[1]:
            wrong.append(f"rank {r} returned a value that {_trusted(g)[1]}")
        elif g is None and w is not None:
            wrong.append(f"rank {r} returned None, expected {want_known or _fmt(w)} "
                         "(a missing return?)")
        elif got_known:
            wrong.append(f"rank {r} {what} {got_known}, expected {want_known or _fmt(w)}")
        elif _is_seq(w) and not (_is_seq(g) and np.size(g) <= 8 and np.size(w) <= 8):
            wrong.append(f"rank {r} {what} a value that {d}")
        else:
            wrong.append(f"rank {r} {what} {_fmt(g)}, expected {want_known or _fmt(w)}")
    if wrong:
        head = f"{label}: " if label else ""
        if len(wrong) > 1:
            head += f"{len(wrong)} of {len(want)} ranks are wrong:\n  "
        shown = wrong[:4] + ([f"... and {len(wrong) - 4} more"] if len(wrong) > 4 else [])
        _fail(CheckFailed(head + "\n  ".join(shown) + (f"\n{hint}" if hint else "")))


def expect_timing(got_us: Any, reference_us: float, what: str = "the one-way time", *,
                  factor: float = 20.0, iters: int | None = None) -> float:
    """Fail unless `got_us` is a time in µs within `factor` of a reference measured alongside.

    Timings on a shared machine vary by several times, so only what is off by far more
    than noise fails: a time in seconds, or the total of a loop instead of one message.
    Returns the ratio ``got_us / reference_us``.
    """
    __tracebackhide__ = True
    got, why = _trusted(got_us)
    if why or not _is_num(got) or isinstance(got, complex):
        _fail(CheckFailed(f"{what} should be a number of microseconds, but it "
                          f"{why or 'is ' + _fmt(got)}"))
    if not math.isfinite(got) or got <= 0:
        _fail(CheckFailed(f"{what} is {_fmt(got)}: a time must be positive and finite "
                          "(was the clock read before and after the loop?)"))
    ratio = got / reference_us
    said = (f"{what} is {_fmt(got)} µs, {ratio:.3g}× the course's own measurement "
            f"({reference_us:.3g} µs, taken just now on the same ranks)")
    if 1 / factor <= ratio <= factor:
        return ratio
    # Which slip explains the ratio best? (factor of the slip, what to say)
    slips = [(1e-6, "seconds instead of µs (× 1e6)"),
             (1e-3, "milliseconds instead of µs (× 1e3)"),
             (1e3, "nanoseconds instead of µs (÷ 1e3)")]
    if iters:
        slips += [(2 * iters, f"the time of the whole loop: divide by the {2 * iters} "
                              "one-way messages (2 per round trip)"),
                  (2 * iters * 1e-6, "the whole loop's time in seconds: divide by the "
                                     f"{2 * iters} one-way messages and report µs")]
    # within a factor 8: the student's time is one run on a shared machine, the reference
    # the best of three, so several times apart is noise; two close slips are both named
    scored = sorted((abs(math.log(ratio / f)), text) for f, text in slips)
    likely = [text for d, text in scored if d < math.log(8)]
    if likely:
        hint = "It looks like " + " — or ".join(likely[:2]) + "."
    elif ratio < 1:
        hint = "Too fast to be true: is the time divided by too much?"
    else:
        hint = "Is the loop timing only the messages, with the clock in µs?"
    _fail(CheckFailed(f"{said}. {hint}"))
