"""Grading outside the student's process: the grader kernel's side.

At autograde time (:mod:`mpilab.autograder.nbgrader`) two kernels run one notebook. The
student's kernel, in a sandbox, runs the student's cells. The grader's kernel, outside it,
runs the test cells, with the instructor's imports and definitions from the locked cells,
and never runs a line of student code:

* a name the test cells use that only the student's notebook defines is bound here by
  :func:`bind`, from what the student's kernel exported (:mod:`mpilab.autograder.student`):
  plain data as decoded values, a function as a :class:`StudentFunction`, a handle on
  bytes this process never unpickles;
* :func:`mpilab.grading.run_on_ranks` and :func:`~mpilab.grading.call_local` send such
  handles, with the test's own harness, to MPI ranks in the sandbox (:class:`Pool`), and
  decide the verdict here from the plain data that comes back (:func:`call` is
  ``call_local``'s way, and what calling a :class:`StudentFunction` does);
* :func:`mpilab.build.cython` compiles a student's Cython source in the sandbox too, and
  the module is only ever loaded there.

Whatever the student's kernel did to itself (patching ``mpilab.grading``, NumPy,
``importlib`` or builtins) stays in that kernel. The environment variable
``MPILAB_GRADER`` names this submission's configuration (written by the preprocessor);
without it, this module is inactive and checks run in the notebook's own kernel.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..sources import SourceMap, describe_frame, parse_stack
from . import failures, quiet, wire
from .pool import Outcome, Pool, PoolError
from .sandbox import Sandbox, read_untrusted
from .worker import student_function

__all__ = ["ENV", "GRADING_ENV", "active", "students_kernel", "nbgrader_executing",
           "StudentFunction", "StudentObject", "bind", "missing", "run",
           "local", "call", "compile_cython", "shutdown", "sandbox_env"]

ENV = "MPILAB_GRADER"
#: set in every process of a grading's sandbox (:func:`sandbox_env`): the student's
#: kernel, the grader's, the ranks, the compiler
GRADING_ENV = "MPILAB_GRADING"
POOL_RANKS = 4
MAX_EXPORT = 64 << 20

_state: dict[str, Any] = {}
_STUDENT_NAMES: set[str] = set()


def active() -> bool:
    """True in the grader's kernel at autograde time.

    Returns
    -------
    bool
        Whether the environment variable ``MPILAB_GRADER`` (``ENV``) is set and not empty.
    """
    return bool(os.environ.get(ENV))


def students_kernel() -> bool:
    """True in the student's kernel while a submission is graded (not in the grader's).

    Returns
    -------
    bool
        Whether ``MPILAB_GRADING`` (:data:`GRADING_ENV`) is set and :func:`active` is not.
    """
    return bool(os.environ.get(GRADING_ENV)) and not active()


def nbgrader_executing() -> bool:
    """True while nbgrader executes the notebook (``nbgrader autograde`` or ``validate``).

    Returns
    -------
    bool
        Whether nbgrader's own ``NBGRADER_EXECUTION`` is set (also in the grading's
        sandboxed processes, :func:`sandbox_env`).
    """
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def config() -> dict:
    """This submission's settings: sandbox, folders (written by the preprocessor).

    Returns
    -------
    dict
        The JSON file named by ``$MPILAB_ISOLATED`` (:data:`ENV`), read once per process,
        with ``box``: its :class:`Sandbox`.
    """
    if "config" not in _state:
        path = os.environ[ENV]
        cfg = json.loads(Path(path).read_text())
        cfg["box"] = Sandbox.load(cfg["sandbox"])
        _state["config"] = cfg
    return _state["config"]


def sandbox_env(home: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a sandboxed process of the course (kernel, ranks, compiler).

    Parameters
    ----------
    home : str
        The process's home folder (``HOME``; IPython's and the caches' folders under it).
    extra : dict of str to str, optional
        More variables, set last (they win).

    Returns
    -------
    dict of str to str
        The whole environment: this Python's ``PATH``, one thread per BLAS and OpenMP,
        the MPI library selected here (``MPILAB_MPI``), ``MPILAB_GRADING=1``, and
        ``MPICC`` and ``MPILAB_MPIEXEC`` where this process has them.
    """
    import mpilab

    from .. import runtime

    venv_bin = os.path.dirname(sys.executable)
    env = {
        "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
        "MPLBACKEND": "Agg",
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "IPYTHONDIR": os.path.join(home, ".ipython"),
        "XDG_CACHE_HOME": os.path.join(home, ".cache"),
        "MPILAB_MPI": runtime.selected_library(),
        GRADING_ENV: "1",
        "NBGRADER_EXECUTION": "autograde",
        # the mpilab the grader runs, also where an editable install points elsewhere (a
        # second checkout's worktree): the sandbox binds this package's folder alone
        "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.realpath(mpilab.__file__))),
    }
    for k in ("MPICC", "MPILAB_MPIEXEC"):
        if os.environ.get(k):
            env[k] = os.environ[k]
    env.update(extra or {})
    return env


# ---------------------------------------------------------------------------------------
# the student's objects, as the grader holds them


class StudentFunction:
    """A function of the student's notebook: its name, what their kernel said about it,
    and the pickle of it, which only the sandboxed ranks ever load.

    Passed to :func:`~mpilab.grading.run_on_ranks` it runs on the ranks; called, it runs
    on one sandboxed process (:func:`call`, as :func:`~mpilab.grading.call_local` does).
    ``source``, ``__signature__`` and ``source_map`` serve the checks that read code and the
    messages that name lines.
    """

    def __init__(self, name: str, payload: bytes, meta: dict):
        self.__name__ = _text(meta.get("name"), 200) or name
        self.__qualname__ = _text(meta.get("qualname"), 200) or self.__name__
        self.payload = payload
        # the key the student's kernel computed (failures.fingerprint): the same
        # code is the same function here and there, so a timeout in one is remembered
        key = _text(meta.get("fingerprint"), 80)
        self.mpilab_key = key or hashlib.sha1(payload).hexdigest()
        self.source = _text(meta.get("source"), 200_000)
        self.source_map = SourceMap.from_plain(meta.get("source_map"))
        self.source_map.files = False
        sig = _signature(meta.get("params"))
        if sig is not None:
            self.__signature__ = sig

    def __reduce__(self):
        return (student_function, (self.payload,))

    def __call__(self, *args, **kwargs):
        return call(self, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<{self.__name__} from the student's notebook>"


class StudentObject:
    """Something of the student's that is neither plain data nor a function."""

    def __init__(self, name: str, what: str):
        self._name, self._what = name, what

    def _refuse(self, *args, **kwargs):
        failures.fail(failures.CheckFailed(
            f"{self._name} is {self._what}: the checks can use only functions and plain "
            "data (numbers, strings, lists, arrays) from your notebook"))

    __call__ = _refuse

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        self._refuse()

    def __repr__(self) -> str:
        return f"<{self._name}: {self._what}>"


def _text(x: Any, limit: int) -> str:
    return x[:limit] if type(x) is str else ""


def _signature(params: Any) -> inspect.Signature | None:
    if type(params) is not list or len(params) > 64:
        return None
    out = []
    try:
        for item in params:
            name, kind, has_default = item
            if type(name) is not str or not name.isidentifier() or type(kind) is not int:
                return None
            default = None if has_default is True else inspect.Parameter.empty
            out.append(inspect.Parameter(name, inspect._ParameterKind(kind), default=default))
        return inspect.Signature(out)
    except (TypeError, ValueError):
        return None


def missing(ns: dict, names: list[str]) -> list[str]:
    """Of `names`, those this namespace lacks or holds from the student (to refresh).

    Parameters
    ----------
    ns : dict
        The grader kernel's namespace (``globals()`` of its cells).
    names : list of str
        The names a test cell reads (:func:`mpilab.autograder.cells.free_names`).

    Returns
    -------
    list of str
        Those of `names` that are identifiers, not dunder names, and either not in `ns`
        or bound there by an earlier :func:`bind`; in the order of `names`.
    """
    return [n for n in names if isinstance(n, str) and n.isidentifier()
            and not n.startswith("__") and (n not in ns or n in _STUDENT_NAMES)]


def bind(ns: dict, folder: str, names: list[str],
         sources: dict[str, str] | None = None) -> list[str]:
    """Bind the student's `names` exported into `folder`; returns the names bound.

    Missing names are unbound (a test that uses them fails with NameError); plain data is
    decoded; functions become :class:`StudentFunction`; anything else a
    :class:`StudentObject` that refuses to be used.

    Parameters
    ----------
    ns : dict
        The grader kernel's namespace, changed in place.
    folder : str
        Where the student's kernel exported them (:func:`mpilab.autograder.student.export`:
        ``index.json`` and a file per name); every file is read as untrusted.
    names : list of str
        The names to bind; only those :func:`missing` returns are looked at.
    sources : dict of str to str, optional
        A function's source as the notebook shows it (the preprocessor's
        :func:`~mpilab.autograder.cells.defined_sources`): with it, the source the checks
        read is this, never what the student's kernel reported.

    Returns
    -------
    list of str
        The names bound (to a value, a :class:`StudentFunction` or a
        :class:`StudentObject`); a name the student's kernel lacks is left out, and
        removed from `ns` where an earlier call bound it.
    """
    raw = read_untrusted(os.path.join(folder, "index.json"), 1 << 20)
    try:
        index = json.loads(raw) if raw else {}
    except ValueError:
        index = {}
    if type(index) is not dict:
        index = {}
    bound = []
    for name in missing(ns, names):
        meta = index.get(name)
        meta = meta if type(meta) is dict else {"kind": "missing"}
        kind = meta.get("kind")
        value: Any = None
        if kind == "data":
            data = read_untrusted(os.path.join(folder, f"{name}.wire"), MAX_EXPORT)
            try:
                value = wire.decode(data) if data is not None else None
                kind = "data" if data is not None else "unreadable"
            except wire.WireError:
                kind = "unreadable"
        elif kind == "function":
            data = read_untrusted(os.path.join(folder, f"{name}.pkl"), MAX_EXPORT)
            if sources is not None:
                meta = {**meta, "source": sources.get(name, "")}
            value = StudentFunction(name, data, meta) if data else None
            kind = "function" if data else "unreadable"
        if kind in ("data", "function"):
            ns[name] = value
        elif kind == "other":
            what = _text(meta.get("type"), 200) or "an object"
            ns[name] = StudentObject(name, f"a {what}" if what != "module" else "a module")
        elif kind == "unreadable":
            ns[name] = StudentObject(name, "something the grader could not read back")
        else:
            if name in _STUDENT_NAMES:
                ns.pop(name, None)
            _STUDENT_NAMES.discard(name)
            continue
        _STUDENT_NAMES.add(name)
        bound.append(name)
    return bound


# ---------------------------------------------------------------------------------------
# running: the sandboxed ranks


def _pool(ranks: int) -> Pool:
    pool = _state.get("pool")
    size = max(POOL_RANKS, ranks)
    if pool is None or pool.ranks < size:
        if pool is not None:
            pool.stop()
        cfg = config()
        box = cfg["box"]
        home = cfg["home"]
        pool = Pool(box, size, cwd=home, env=sandbox_env(home), workdir=cfg["pool"],
                    rw=[home], ro=[cfg["build"]])
        _state["pool"] = pool
    return pool


def payload(func: Any, args: tuple, kwargs: dict | None = None) -> bytes:
    """What a request carries: the grader's pickle of ``(func, args, kwargs)``.

    Test-cell harnesses travel by value, mpilab's by reference, the student's functions
    as the bytes their kernel made (:class:`StudentFunction`).

    Parameters
    ----------
    func : callable
        What the ranks call.
    args : tuple
        Its positional arguments.
    kwargs : dict, optional
        Its keyword arguments.

    Returns
    -------
    bytes
        The cloudpickle of ``(func, args, kwargs)``.
    """
    import cloudpickle

    return cloudpickle.dumps((func, tuple(args), dict(kwargs or {})))


def run(func: Any, args: tuple, ranks: int, timeout: float) -> Outcome:
    """``func(comm, *args)`` on `ranks` sandboxed ranks (a fresh job after any failure).

    Parameters
    ----------
    func : callable
        The harness to run on each rank (a test cell's or mpilab's), or a
        :class:`StudentFunction`; called with the call's communicator first.
    args : tuple
        Its further arguments (pickled by the grader with cloudpickle).
    ranks : int
        Ranks in the call's communicator; the job has at least ``POOL_RANKS`` (4).
    timeout : float
        Seconds the call may take on the ranks.

    Returns
    -------
    Outcome
        Each rank's reply and which ranks timed out, died or replied garbage; the verdict
        is the caller's (:func:`mpilab.grading.run_on_ranks`).

    Raises
    ------
    PoolError
        When the sandboxed ranks cannot start.
    """
    return _pool(ranks).call(payload(func, args), ranks, timeout)


def local(func: Any, args: tuple, kwargs: dict, timeout: float) -> Outcome:
    """``func(*args, **kwargs)`` on one sandboxed rank.

    Parameters
    ----------
    func : callable
        What to call (a :class:`StudentFunction`, or a harness).
    args : tuple
        Its positional arguments.
    kwargs : dict
        Its keyword arguments.
    timeout : float
        Seconds the call may take.

    Returns
    -------
    Outcome
        Rank 0's reply, or that it timed out, died or replied garbage (:func:`call`
        turns it into a result or a failure).

    Raises
    ------
    PoolError
        When the sandboxed ranks cannot start.
    """
    return _pool(1).local(payload(func, args, kwargs), timeout)


def call(func: Any, *args: Any, timeout: float = failures.DEFAULT_TIMEOUT,
         **kwargs: Any) -> Any:
    """:func:`mpilab.grading.call_local` at autograde time: on one sandboxed rank, never
    in the grader; the plain result, or the :class:`~mpilab.autograder.failures.CheckFailed`
    that says what happened.

    Parameters
    ----------
    func : callable
        What to call (a :class:`StudentFunction`, or a harness).
    *args : object
        Its positional arguments.
    timeout : float, optional
        Seconds the call may take (default ``DEFAULT_TIMEOUT``, 10).
    **kwargs : object
        Its keyword arguments.

    Returns
    -------
    object
        What `func` returned, as plain data (:mod:`mpilab.autograder.wire`).

    Raises
    ------
    CheckFailed
        :class:`~mpilab.autograder.failures.RaisedError` when it raised (or its arguments
        could not be sent), ``EngineDied`` when its process died, ``TimedOut`` (or
        ``Skipped``, when it timed out in an earlier check) and ``BadResult`` when it
        returned something that is not plain data.
    Ungradable
        When the sandboxed process could not start.
    """
    __tracebackhide__ = True
    name = failures.name_of(func)
    keys = [failures.fingerprint(func)]
    failures.check_not_timed_out(keys, name)
    smap = SourceMap.of(func, *args, *kwargs.values())
    smap.files = False
    try:
        out = local(func, args, kwargs, timeout)
    except PoolError as exc:
        failures.fail(failures.Ungradable(
            f"{name} could not run: the grader's process did not start ({exc})"))
    except Exception as exc:  # the grader's pickle of the arguments
        failures.fail(failures.RaisedError(f"{name} could not be sent to the grader's "
                                           f"process: {type(exc).__name__}: {exc}"))
    if out.died:
        failures.fail(failures.EngineDied(f"{name} crashed: {out.died}"))
    if out.timed_out:
        where = describe_frame(parse_stack(out.stacks.get(0, "")), smap)
        msg = (f"{name} did not return within {timeout:g} s"
               + (f"; it was at {where}" if where else "") + ". An endless loop?")
        failures.remember_timeout(keys, msg)
        failures.fail(failures.TimedOut(msg))
    if out.bad:
        failures.fail(failures.BadResult(f"{name} sent back {out.bad[0]}"))
    reply = out.replies.get(0, ())
    if reply[:1] == ("raised",) and len(reply) == 4:
        _tag, ename, emsg, frames = reply
        where = describe_frame(frames, smap)
        failures.fail(failures.RaisedError(f"{name} raised {ename}: {emsg}"
                                           + (f"\n    at {where}" if where else "")))
    if reply[:1] == ("bad",) and len(reply) == 2:
        failures.fail(failures.BadResult(
            str(reply[1]).replace("the value", f"the value {name} returned", 1)))
    if reply[:1] != ("ok",) or len(reply) != 2 or not wire.verify_plain(reply[1]):
        failures.fail(failures.BadResult(f"{name} sent back an unexpected reply"))
    return reply[1]


def output() -> str:
    """The last output of this submission's rank job (:meth:`Pool.output`).

    Returns
    -------
    str
        Empty when no job was started.
    """
    pool = _state.get("pool")
    return pool.output() if pool is not None else ""


def compile_cython(source: str, module_name: str, final: str, timeout: float) -> tuple[int, str]:
    """Compile `source` as `module_name` into the folder `final`, in the sandbox.

    Returns the compiler's exit status and its (untrusted) report.

    Parameters
    ----------
    source : str
        The Cython source.
    module_name : str
        The extension module's name.
    final : str
        The folder the built module goes into (under the sandbox's build folder).
    timeout : float
        Seconds the compile may take.

    Returns
    -------
    status : int
        The exit status of ``python -m mpilab.build`` (124 when it ran past `timeout`).
    report : str
        Its output (the last 20,000 bytes, stdout and stderr together), or why it was
        stopped.
    """
    import subprocess

    cfg = config()
    box, build = cfg["box"], cfg["build"]
    src = Path(build) / f"{module_name}.pyx.in"
    # the folder is the sandbox's: never write through a link a compile may have left
    with contextlib.suppress(FileNotFoundError):
        src.unlink()
    fd = os.open(src, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(source)
    argv = [sys.executable, "-P", "-m", "mpilab.build", str(src), module_name, final]
    with quiet.working():  # a compile keeps a core busy: not while another grading measures
        p = box.popen(argv, cwd=build, env=sandbox_env(cfg["home"]), rw=[build],
                      role="compile", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            box.kill(p)
            return 124, f"compiling took longer than {timeout:g} s"
        finally:
            box.kill(p)
    return p.returncode, out[-20000:].decode(errors="replace")


class _Compiler:
    """:class:`mpilab.build.SandboxedCompiler` of this submission's sandbox."""

    def folder(self) -> str:
        return config()["build"]

    def compile(self, source: str, module_name: str, final: str,
                timeout: float) -> tuple[int, str]:
        return compile_cython(source, module_name, final, timeout)


if active():  # the grader's kernel: mpilab.build compiles in the sandbox
    from .. import build as _build

    _build.use_sandboxed_compiler(_Compiler())


def shutdown() -> None:
    """Stop the ranks (the preprocessor also kills the whole sandbox afterwards)."""
    pool = _state.pop("pool", None)
    if pool is not None:
        pool.stop()
