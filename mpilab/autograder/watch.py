"""What a student's function calls on the grader's ranks: the course's own answers refused.

The course's package is in the sandbox (the ranks import their harnesses from it), so a
student's function could return the course's answer instead of computing its own: call
the grader's reference model (``mpilab.grading.*``), the course's collectives and their
cost models (``mpilab.collectives``), its ping-pong, halo and network experiments, or
forge what a check records (a :class:`mpilab.tracing.TracingComm`'s private methods).
:func:`watched` wraps each function the ranks load from a student's pickle
(:func:`mpilab.autograder.worker.student_function`): while it runs, a trace function
notes every call that the student's own code makes into those parts of the course, or to
the interpreter's means of undoing the watch (``sys.setprofile``, ``sys._getframe``,
``gc.get_referrers`` ...). When the function returns, a noted call raises
:class:`Refused`, whose message names the call; the check that ran it fails with that
message. Calls the course's code makes (a harness, the tracing communicator's public
methods a student calls) are the course's, not the student's.

This is a watch, not a wall: it sees Python calls only (not a compiled kernel's MPI
calls, nor mpi4py's methods), and code copied out of the course's files runs as the
student's own. What it refuses, it names.
"""

from __future__ import annotations

import functools
import gc
import os
import sys
import sysconfig
import threading
import time
import types
from typing import Any

__all__ = ["Refused", "watched", "refusal", "course_part", "by_student", "guard_kernels",
           "student_facing"]

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../mpilab

#: Parts of the course whose every function is an answer or a measurement a lab grades
#: (paths relative to the package): the checks and their reference models, the
#: autograder, the course's collectives, experiments and models.
ANSWER_PARTS = ("grading/", "autograder/", "collectives/running.py", "network.py",
                "tuning/", "sim/", "pingpong/", "models/", "halo/parallel.py", "halo/k1.py",
                "halo/progress.py", "halo/stencil_sweep.py", "coarrays.py", "timing.py",
                "netlab/")
#: Functions of other modules that are a lab's answer (file, function name): the cost
#: model of every collective (lab 05's and lab 06's predictions). Choosing among the
#: admissible algorithms (``admissible``, ``algorithm``) stays allowed.
ANSWER_FUNCTIONS = {("collectives/algorithms.py", name)
                    for name in ("predict", "predict_table", "time_us", "steps")}
#: What undoes or gets around the watch: while a student's function runs, each of these
#: is a Python function in front of the real one, so the watch sees a call of it.
_UNDOING = [(sys, "settrace"), (sys, "gettrace"), (sys, "setprofile"), (sys, "getprofile"),
            (sys, "_getframe"), (gc, "get_objects"), (gc, "get_referrers"),
            (gc, "get_referents"), (threading, "settrace"), (threading, "setprofile")]
_REAL = {(mod.__name__, name): getattr(mod, name) for mod, name in _UNDOING}
#: the clock of ``watched_seconds``, held here: a student's function replacing
#: ``time.perf_counter`` does not change it
_CLOCK = time.perf_counter


class Refused(Exception):
    """A student's function called a part of the course it may not use in a graded answer."""


def _library_roots() -> tuple[str, ...]:
    roots = {_PKG, sys.prefix, sys.base_prefix, sys.exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        with_path = sysconfig.get_paths().get(key)
        if with_path:
            roots.add(with_path)
    out = set()
    for r in roots:
        out.add(os.path.abspath(r))
        out.add(os.path.realpath(r))
    return tuple(sorted(out))


_ROOTS = _library_roots()
_IS_STUDENT: dict[Any, bool] = {}
_RULE: dict[Any, str | None] = {}


def _student(code: types.CodeType) -> bool:
    """Whether `code` is the student's: their notebook's cells, pickled by value (by
    cloudpickle 3 as ``<dynamic-code>``, by others with the cell's file), not a file of
    the course, of Python or its packages, nor code those make at run time
    (``<string>``: a dataclass's ``__init__``)."""
    got = _IS_STUDENT.get(code)
    if got is None:
        f = code.co_filename
        if f == "<dynamic-code>":
            got = True
        elif f.startswith("<"):
            got = False
        else:
            got = not (os.path.isabs(f) and f.startswith(_ROOTS))
        _IS_STUDENT[code] = got
    return got


def _by_student(frame) -> bool:
    """Whether `frame` runs the student's code. Code made at run time (``exec``,
    ``compile``, a dataclass's ``__init__``: a file name in brackets) is whoever ran it."""
    while frame is not None:
        f = frame.f_code.co_filename
        if f.startswith("<") and f != "<dynamic-code>" and not f.startswith("<frozen"):
            frame = frame.f_back
            continue
        return _student(frame.f_code)
    return False


def by_student(code: types.CodeType) -> bool:
    """Whether `code` is the student's own (their notebook's), not the course's, Python's
    or a package's: the harnesses ask it of the code that called them.

    Parameters
    ----------
    code : code object
        A frame's code.

    Returns
    -------
    bool
        True for code pickled from the student's notebook (or a notebook's cell).
    """
    return _student(code)


def course_part(filename: str, function: str) -> str | None:
    """What a call of `function` in the course's file `filename` is, when a student's
    graded answer may not make it; None when it may.

    Parameters
    ----------
    filename : str
        The file of the called code.
    function : str
        The called function's name.

    Returns
    -------
    str or None
        "the course's own answer (mpilab.grading.network.reference_loads)", "a private
        function of the course (...)", or None.
    """
    path = os.path.abspath(filename)
    for base in {_PKG, os.path.realpath(_PKG)}:
        if path.startswith(base + os.sep):
            rel = path[len(base) + 1:]
            break
    else:
        return None
    module = "mpilab." + rel[:-3].replace(os.sep, ".").removesuffix(".__init__")
    where = f"{module}.{function}"
    if rel.startswith(ANSWER_PARTS) or (rel, function) in ANSWER_FUNCTIONS:
        return f"the course's own answer ({where})"
    if function.startswith("_") and not function.startswith("__") and function != "<module>":
        return f"a private function of the course ({where}): what a check records"
    return None


def guard_kernels() -> None:
    """Put a Python function in front of every function of the course's compiled kernels
    (``mpilab.kernels.*``), on this process only, so that the watch sees a student's
    function call one (a compiled call is invisible to it): the kernels are the course's
    own collectives, ping-pong and stencils, the answers of labs 01, 05 and 06."""
    from mpilab import kernels

    for name in kernels.NAMES:
        try:
            mod = kernels.compiled(name)
        except ImportError:
            continue
        for attr, obj in list(vars(mod).items()):
            if not attr.startswith("_") and callable(obj) and not isinstance(obj, type) \
                    and getattr(obj, "__module__", None) == mod.__name__:
                setattr(mod, attr, _kernel(f"{mod.__name__}.{attr}", obj))


def _kernel(where: str, compiled: Any) -> Any:
    def course_kernel(*args, **kwargs):
        return compiled(*args, **kwargs)

    course_kernel.__name__ = where.rsplit(".", 1)[1]
    course_kernel.__qualname__ = where
    course_kernel.__doc__ = getattr(compiled, "__doc__", None)
    return course_kernel


_KERNEL_CODE = _kernel("k.k", None).__code__


def _guard(where: str, real: Any) -> Any:
    def guarded(*args, **kwargs):
        if where == "sys._getframe":  # the caller's frame, not this one's
            return real((args[0] if args else kwargs.get("depth", 0)) + 1)
        return real(*args, **kwargs)

    guarded.__name__ = where.rsplit(".", 1)[1]
    return guarded


_GUARD_CODE = _guard("m.f", None).__code__
_GUARDS = {(mod, name): _guard(f"{mod.__name__}.{name}", _REAL[(mod.__name__, name)])
           for mod, name in _UNDOING}


_FACING: set[types.CodeType] = set()


def student_facing(func: Any) -> Any:
    """Mark `func`, a function of the course that a check hands to the student's code (a
    method of a harness's watched communicator or window), as one the student may call.

    Parameters
    ----------
    func : function
        The course's function.

    Returns
    -------
    function
        `func` itself.
    """
    _FACING.add(func.__code__)
    return func


def _rule(code: types.CodeType) -> str | None:
    got = _RULE.get(code, _MISSING)
    if got is _MISSING:
        if code is _KERNEL_CODE or code is _GUARD_CODE:
            got = "the course's own code"  # named from the frame by the watch
        elif code in _FACING:
            got = None
        else:
            got = course_part(code.co_filename, code.co_name)
        _RULE[code] = got
    return got


_MISSING = object()


class _Watch:
    """The trace function of one watched call, and what it saw."""

    def __init__(self, name: str):
        self.name = name
        self.seen: list[str] = []

    def __call__(self, frame, event, arg):
        # a global trace function: called once per new frame (no line, no C events),
        # and returns None: nothing more is traced in the frame
        code = frame.f_code
        what = _RULE.get(code, _MISSING)  # the callee first: mostly nothing to refuse
        if what is None:
            return None
        if what is _MISSING:
            what = _rule(code)
            if what is None:
                return None
        if event == "call" and _by_student(frame.f_back):
            if code is _KERNEL_CODE:
                k = frame.f_locals.get("compiled")
                what = (f"the course's compiled kernel ({getattr(k, '__module__', '')}"
                        f".{getattr(k, '__name__', '')})")
            elif code is _GUARD_CODE:
                what = f"{frame.f_locals.get('where')}, which gets around the grader's watch"
            self._refuse("called " + what)
        return None

    def _refuse(self, what: str) -> None:
        """Note `what` and stop the call before it runs (the trace is then switched off,
        and the watched function refused when it returns)."""
        if what not in self.seen:
            self.seen.append(what)
        raise Refused(refusal(self.name, self.seen))


_active = threading.local()

#: Modules outside the course whose functions the harnesses on the ranks call after a
#: student's function returned: patching them is tampering with the check.
_PATCHABLE = ("builtins", "numpy", "numpy.linalg", "numpy.testing", "math", "pickle",
              "json")


def _snapshot() -> dict[tuple[str, str], int]:
    """The identity of every function, class and module the course's modules hold (and
    of their classes' methods), and of those of the modules the harnesses use."""
    out: dict[tuple[str, str], int] = {}
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name == "mpilab" or name.startswith("mpilab.")
                               or name in _PATCHABLE):
            continue
        try:
            items = list(vars(mod).items())
        except TypeError:
            continue
        for attr, obj in items:
            if callable(obj) or isinstance(obj, types.ModuleType):
                out[(name, attr)] = id(obj)
            if isinstance(obj, type) and getattr(obj, "__module__", "") == name:
                for cattr, cobj in list(vars(obj).items()):
                    if callable(cobj) or isinstance(cobj, (staticmethod, classmethod,
                                                           property)):
                        out[(name, f"{attr}.{cattr}")] = id(cobj)
    return out


def _patched(before: dict[tuple[str, str], int]) -> list[str]:
    after = _snapshot()
    return [f"{m}.{a}" for (m, a), i in before.items()
            if after.get((m, a), i) != i and not a.startswith("__")]


def refusal(name: str, seen: list[str]) -> str:
    """The message of a :class:`Refused`: what `name` did.

    Parameters
    ----------
    name : str
        The student's function.
    seen : list of str
        What it did ("called" and :func:`course_part`'s description, "replaced ...").

    Returns
    -------
    str
        One sentence per call, and why the grade refuses it.
    """
    did = "; ".join(seen[:4]) + (" ..." if len(seen) > 4 else "")
    return (f"{name} {did}. Refused: a graded answer must compute its result itself, "
            "with the course's checks and answers left alone (the checks grade the code "
            "you wrote).")


def watched(func: Any) -> Any:
    """`func`, watched while it runs (a plain function; anything else is returned as is).

    Parameters
    ----------
    func : object
        What a student's pickle gave.

    Returns
    -------
    object
        For a Python function, a function of the same name and signature that runs it
        under a :class:`_Watch` (a trace function: one call per Python frame; C calls
        cost nothing) and raises :class:`Refused` when it returns (or raises)
        after calling a part of the course it may not use; else `func` itself. Its
        ``watched_seconds`` is how long `func` itself ran in the last call (the
        watch's own checks before and after, tens of ms, left out): a harness bounds a
        time the student measured inside `func` by it (lab 01's ping-pong).
    """
    if not isinstance(func, types.FunctionType):
        return func

    @functools.wraps(func)
    def run(*args, **kwargs):
        if getattr(_active, "on", False):  # called from a watched function: one watch
            return func(*args, **kwargs)
        watch = _Watch(getattr(func, "__name__", "the function"))
        before = _snapshot()
        gettrace, settrace = _REAL[("sys", "gettrace")], _REAL[("sys", "settrace")]
        _active.on = True
        for (mod, name), guard in _GUARDS.items():
            setattr(mod, name, guard)
        _REAL[("threading", "settrace")](watch)
        settrace(watch)
        started = _CLOCK()
        try:
            value = func(*args, **kwargs)
        except BaseException:
            if watch.seen or gettrace() is not watch:
                value = _MISSING
            else:
                raise
        finally:
            run.watched_seconds = _CLOCK() - started  # set after the student's code ran
            undone = gettrace() is not watch
            settrace(None)
            _REAL[("threading", "settrace")](None)
            for (mod, name) in _GUARDS:
                setattr(mod, name, _REAL[(mod.__name__, name)])
            _active.on = False
        if undone and not watch.seen:  # a refusal switches the trace off itself
            watch.seen.append("switched off the grader's watch")
        patched = _patched(before)
        if patched:
            watch.seen.append("replaced " + ", ".join(patched[:3])
                              + " on the ranks, where the checks run after it")
        if watch.seen:
            raise Refused(refusal(watch.name, watch.seen))
        return value

    return run
