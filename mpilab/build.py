"""Compile Cython source from a notebook against mpi4py and the machine's MPI, once.

>>> from mpilab import build
>>> pp = build.cython(PINGPONG_PYX, name="pingpong_cy")   # compiles, or finds it cached
>>> run_on_ranks(run_compiled, pp.pingpong, 1024, 100, ranks=2)  # called on the engines

The source is compiled the way the course's own kernels are (``setup.py``): Cython 3 with
``cimport mpi4py.MPI`` and ``mpi4py.libmpi`` available, then C through the MPI compiler
wrapper (:func:`mpilab.runtime.mpicc`). The extension lands in a per-user cache
(``$MPILAB_BUILD_CACHE``, else ``$XDG_CACHE_HOME/mpilab/build``, else
``~/.cache/mpilab/build``) under a hash of everything that shapes it (source, name, Cython,
mpi4py, Python, compiler, flags), so the same source is compiled once and a changed one
gets a fresh module (a process cannot reload an extension module in place).

What :func:`cython` returns is a handle, not the imported module: ``pp.pingpong`` is a
small picklable :class:`CompiledFunction` that imports the extension by path wherever it
is called, so it can be sent to ipyparallel engines on the same host. Nothing is imported
in the notebook's process until a function is called there (importing it would start MPI
in the notebook).

A compile error raises :class:`CompileError` carrying Cython's or the C compiler's own
message, with line numbers of the source as given.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

from . import kernels as _kernels
from . import runtime

__all__ = ["CompileError", "CythonModule", "CompiledFunction", "cython", "load", "cache_dir"]

CFLAGS = ("-O3", "-std=gnu11", "-fPIC", "-Wno-unused-function", "-Wno-unused-variable")
_VERSION = "1"  # bump when the build recipe changes: old cache entries are then ignored
_LOADED: dict[str, Any] = {}


class CompileError(RuntimeError):
    """The source did not compile; the message is the compiler's, trimmed to the point."""


def cache_dir() -> Path:
    """Where compiled modules are kept (per user).

    Returns
    -------
    pathlib.Path
        ``$MPILAB_BUILD_CACHE`` when set, else ``$XDG_CACHE_HOME/mpilab/build``, else
        ``~/.cache/mpilab/build``. It may not exist yet: the first compile makes it.
    """
    if os.environ.get("MPILAB_BUILD_CACHE"):
        return Path(os.environ["MPILAB_BUILD_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mpilab" / "build"


def _tool_versions() -> str:
    import Cython
    import mpi4py

    return f"cython {Cython.__version__}; mpi4py {mpi4py.__version__}"


def _ext_suffix() -> str:
    return sysconfig.get_config_var("EXT_SUFFIX") or ".so"


class CompiledFunction:
    """A function of a compiled module, callable here and on engines of this host.

    Pickles as (path, module name, function name): the receiving process imports the
    extension from `path` on first call.
    """

    def __init__(self, path: str, module_name: str, name: str, fingerprint: str,
                 module: CythonModule | None = None):
        self.path = str(path)
        self.module_name = module_name
        self.name = self.__name__ = name
        self.fingerprint = f"{fingerprint}:{name}"
        self._module = module  # a module whose compile was deferred: compiled before use

    def __call__(self, *args, **kwargs):
        if self._module is not None:
            self._module.ensure()
        return getattr(load(self.path, self.module_name), self.name)(*args, **kwargs)

    def __reduce__(self):
        if self._module is not None:
            self._module.ensure()  # the receiving process imports it from `path`
        return (CompiledFunction, (self.path, self.module_name, self.name,
                                   self.fingerprint.rsplit(":", 1)[0]))

    def __repr__(self) -> str:
        return f"<compiled function {self.name} of {self.module_name}>"


class CythonModule:
    """Handle on a compiled Cython module: attributes are :class:`CompiledFunction`."""

    def __init__(self, path: Path, module_name: str, digest: str, source: str,
                 cached: bool, seconds: float, deferred: tuple | None = None):
        self.path = path
        self.module_name = module_name
        self.fingerprint = digest
        self.source = source
        self.cached = cached
        self.seconds = seconds
        self._deferred = deferred  # (label, root, final, timeout) until compiled

    def ensure(self) -> None:
        """Compile now if the compile was deferred (the student's kernel at autograde).

        Does nothing when the module is compiled already.

        Raises
        ------
        CompileError
            As :func:`cython`.
        """
        if self._deferred is not None:
            label, root, final, timeout = self._deferred
            t0 = time.perf_counter()
            if not self.path.exists():
                _compile(self.source, label, self.module_name, root, final, timeout)
            self.seconds = time.perf_counter() - t0
            self._deferred = None

    def __getattr__(self, name: str) -> CompiledFunction:
        if name.startswith("_"):
            raise AttributeError(name)
        return CompiledFunction(str(self.path), self.module_name, name, self.fingerprint,
                                module=self if self._deferred is not None else None)

    def load(self):
        """Import the module in this process (this starts MPI here, through mpi4py).

        A deferred compile is made first (:meth:`ensure`).

        Returns
        -------
        module
            The extension module, as :func:`load` gives it.

        Raises
        ------
        CompileError
            The deferred compile failed.
        RuntimeError, ImportError
            As :func:`load`.
        """
        self.ensure()
        return load(str(self.path), self.module_name)

    def __repr__(self) -> str:
        how = ("compiled when first used: autograding" if self._deferred is not None
               else "cached" if self.cached else f"compiled in {self.seconds:.1f} s")
        return f"<Cython module {self.module_name} ({how}): {self.path}>"


class SandboxedCompiler(Protocol):
    """How the grader compiles a student's Cython: in its sandbox (set by the grader)."""

    def folder(self) -> str:
        """The build folder the sandbox may write.

        Returns
        -------
        str
            The folder's path: :func:`cython` keeps the modules it compiles there.
        """

    def compile(self, source: str, module_name: str, final: str,
                timeout: float) -> tuple[int, str]:
        """Compile `source` into the folder `final`; exit status and the report.

        Parameters
        ----------
        source : str
            The Cython source (a ``.pyx`` file's text).
        module_name : str
            The extension module's name; the module is ``final/module_name`` with the
            interpreter's extension suffix.
        final : str
            The folder the built module goes into, under :meth:`folder`.
        timeout : float
            Seconds the compile may take.

        Returns
        -------
        status : int
            The compiler's exit status.
        report : str
            Its output, untrusted: shown as the error when no module was made.
        """


# How this process compiles, as the autograder sets it (this module never asks the
# environment): the grader's compiler, and whether compiles wait until first use.
_SANDBOXED: list[SandboxedCompiler] = []
_DEFER: list[bool] = [False]


def use_sandboxed_compiler(compiler: SandboxedCompiler) -> None:
    """Compile through `compiler` from now on in this process (the grader's kernel).

    :mod:`mpilab.autograder.isolated` calls this when it is imported in the grader: this
    module, below the grading layer, never imports it. From then on a source is compiled
    in the sandbox, never here, and :func:`load` refuses to load a module.

    Parameters
    ----------
    compiler : SandboxedCompiler
        The grader's compiler; it replaces any set before.
    """
    _SANDBOXED[:] = [compiler]


def defer_compiles(defer: bool = True) -> None:
    """From now on in this process, compile a source only when its functions are first used.

    For the student's kernel at autograde, and the grader's ranks beside it:
    :mod:`mpilab.autograder.student` calls this when the student's kernel starts: the
    checks compile their own copy in the grader's sandbox, so the student's is compiled
    only if their kernel uses it (a function called or sent to ranks, ``load()``). Has no
    effect in the grader's kernel (:func:`use_sandboxed_compiler`).

    Parameters
    ----------
    defer : bool, optional
        True (default): defer the compiles of later :func:`cython` calls; False: compile
        at once again. A source already compiled (in the cache) is never compiled again.
    """
    _DEFER[0] = bool(defer)


def _sandboxed() -> SandboxedCompiler | None:
    """The grader's compiler, in the grader's kernel; None elsewhere."""
    return _SANDBOXED[0] if _SANDBOXED else None


def load(path: str, module_name: str):
    """Import the extension module at `path` (once per process).

    Importing a module compiled against mpi4py starts MPI in this process.

    Parameters
    ----------
    path : str
        The extension module's file (a :class:`CythonModule`'s ``path``).
    module_name : str
        The module's name, as it was compiled (``{name}_{hash}``).

    Returns
    -------
    module
        The imported module; the same object on every later call with `path`.

    Raises
    ------
    RuntimeError
        In the grader's kernel (:func:`use_sandboxed_compiler`), which never loads a
        student's module: its functions run on the sandboxed ranks instead.
    ImportError
        `path` does not exist on this host, or the module cannot be imported.
    """
    if _sandboxed() is not None:
        raise RuntimeError("the grader never loads a student's compiled module: pass its "
                           "functions to mpilab.grading.run_on_ranks, which runs them on "
                           "the sandboxed MPI ranks")
    mod = _LOADED.get(path)
    if mod is not None:
        return mod
    if not os.path.exists(path):
        raise ImportError(f"{path} does not exist on this host: compiled modules are shared "
                          "by path, so engines must run on the machine that compiled them")
    loader = importlib.machinery.ExtensionFileLoader(module_name, path)
    spec = importlib.util.spec_from_file_location(module_name, path, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    _LOADED[path] = mod
    return mod


def _digest(source: str, name: str, mpicc: str) -> str:
    h = hashlib.sha256()
    for part in (_VERSION, source, name, _tool_versions(), _ext_suffix(), sys.version, mpicc,
                 " ".join(CFLAGS)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _trim_cython(text: str, pyx: Path, label: str) -> str:
    text = text.replace(str(pyx), label).replace(pyx.name, label)
    text = text.replace(str(pyx.parent) + os.sep, "")
    return "\n".join(text.strip().splitlines()[-60:])


def _trim_cc(text: str, workdir: Path) -> str:
    text = text.replace(str(workdir) + os.sep, "")
    lines = text.splitlines()
    keep = [i for i, ln in enumerate(lines) if "error" in ln.lower()]
    if not keep:
        return "\n".join(lines[-30:])
    shown: list[str] = []
    for i in keep[:6]:
        for ln in lines[i:i + 3]:
            if ln not in shown:
                shown.append(ln)
    return "\n".join(shown)


def _run(cmd: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CompileError(f"compiling took longer than {timeout:g} s: {' '.join(cmd[:3])} "
                           "...") from None
    except OSError as exc:
        raise CompileError(f"could not run {cmd[0]}: {exc}") from None


def _compile(source: str, name: str, module_name: str, root: Path, final: Path,
             timeout: float) -> None:
    """Cython, then the MPI C compiler: `source` as `final`/`module_name` + EXT_SUFFIX."""
    so = final / f"{module_name}{_ext_suffix()}"
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    try:
        pyx = work / f"{module_name}.pyx"
        pyx.write_text(source)
        label = f"{name}.pyx"
        # Cython finds mpi4py's .pxd files on sys.path, as setup.py's cythonize does.
        try:  # the checkout's kernels/common, or the installed package's copy
            kernels_common = _kernels.source_dir() / "common"
        except FileNotFoundError:
            kernels_common = None
        cy = [sys.executable, "-m", "cython", "-3", "--fast-fail", pyx.name, "-o",
              f"{module_name}.c"]
        if kernels_common is not None and kernels_common.is_dir():
            cy[3:3] = ["-I", str(kernels_common)]
        res = _run(cy, work, timeout)
        if res.returncode != 0:
            raise CompileError(f"Cython could not compile {label}:\n"
                               + _trim_cython(res.stderr + res.stdout, pyx, label))
        import mpi4py

        mpicc = runtime.mpicc()
        cc = [*shlex.split(mpicc), *CFLAGS, "-shared",
              f"-I{sysconfig.get_paths()['include']}", f"-I{mpi4py.get_include()}",
              f"{module_name}.c", "-o", so.name]
        res = _run(cc, work, timeout)
        if res.returncode != 0:
            raise CompileError(
                f"the C compiler ({Path(shlex.split(mpicc)[0]).name}) rejected the C that "
                f"Cython generated from {label}; this usually points at a C-level call in "
                "your source (an MPI_* call with wrong argument types?):\n"
                + _trim_cc(res.stderr, work))
        try:
            os.rename(work, final)  # atomic: a concurrent build of the same source wins
        except OSError:
            if not so.exists():
                raise
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)


def cython(source: str, name: str = "student", *, timeout: float = 180.0,
           cache: str | os.PathLike | None = None) -> CythonModule:
    """Compile Cython `source` (or find it compiled); a :class:`CythonModule` handle.

    Parameters
    ----------
    source : str
        A ``.pyx`` file's text. ``cimport mpi4py.MPI as MPI`` and
        ``from mpi4py.libmpi cimport *`` work; the language level is 3.
    name : str, optional
        A label (a letter or underscore, then up to 40 letters, digits, underscores;
        default ``"student"``): the module is ``{name}_{hash}``.
    timeout : float, optional
        Seconds allowed to each compiler step (default 180).
    cache : str or os.PathLike, optional
        Cache directory instead of :func:`cache_dir` (ignored in the grader's kernel,
        which compiles into its sandbox's folder).

    Returns
    -------
    CythonModule
        The handle: its attributes are the module's functions (:class:`CompiledFunction`);
        ``cached`` says whether it was found compiled, ``seconds`` how long the compile
        took. Where compiles are deferred (:func:`defer_compiles`), nothing is compiled
        until a function is first used.

    Raises
    ------
    TypeError
        `source` is not a str.
    ValueError
        `name` is not a short identifier.
    CompileError
        With Cython's error report (line and column in `source`), or the C compiler's;
        or a compiler step ran past `timeout` or could not be started.
    mpilab.runtime.MPINotFound
        No MPI compiler wrapper was found (:func:`mpilab.runtime.mpicc`).
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be the Cython code as a str, not {type(source).__name__}")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,40}", name):
        raise ValueError(f"name must be a short identifier, got {name!r}")
    mpicc = runtime.mpicc()
    digest = _digest(source, name, mpicc)
    module_name = f"{name}_{digest[:12]}"
    root = Path(cache) if cache is not None else cache_dir()
    grader = _sandboxed()
    if grader is not None:  # autograde: compiled in the sandbox, never here
        root = Path(grader.folder())
    final = root / digest[:16]
    so = final / f"{module_name}{_ext_suffix()}"
    if so.exists():
        return CythonModule(so, module_name, digest, source, cached=True, seconds=0.0)
    if _DEFER[0] and grader is None:
        # the student's kernel at autograde: the checks compile their own copy in the
        # grader's sandbox, so this one is compiled only if this kernel uses it
        return CythonModule(so, module_name, digest, source, cached=False, seconds=0.0,
                            deferred=(name, root, final, timeout))
    t0 = time.perf_counter()
    if grader is not None:
        status, report = grader.compile(source, module_name, str(final), timeout)
        if not so.exists():
            raise CompileError(report.strip() or f"the compiler exited with {status}")
    else:
        _compile(source, name, module_name, root, final, timeout)
    return CythonModule(so, module_name, digest, source, cached=False,
                        seconds=time.perf_counter() - t0)


def _main(argv: list[str] | None = None) -> int:
    """``python -m mpilab.build SOURCE_FILE MODULE_NAME FINAL_DIR``: compile one module.

    What the grader runs in the sandbox (:func:`use_sandboxed_compiler`);
    a compile error is printed and the exit status is 1.
    """
    src, module_name, final = (argv or sys.argv[1:])[:3]
    label = module_name.rsplit("_", 1)[0]
    try:
        _compile(Path(src).read_text(), label, module_name, Path(final).parent, Path(final),
                 timeout=170.0)
    except CompileError as exc:
        print(exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main())
