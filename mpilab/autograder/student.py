"""What the student's kernel does for the grader at autograde time: hand objects over.

The grader's kernel runs the test cells; when one names something the student's notebook
defined (``ring_pass``, ``PINGPONG_PYX``), the autograde preprocessor asks the student's
kernel, in the sandbox, to :func:`export` it into a folder the grader reads:

* plain data (numbers, strings, lists, NumPy arrays ...) in :mod:`mpilab.autograder.wire`'s
  format, which the grader decodes without running anything;
* a function (or anything else callable) as the bytes ``cloudpickle`` makes of it, which
  the grader never opens: it hands them to the sandboxed MPI ranks, the only place they
  are loaded. Beside them: its name, a fingerprint, its source text and parameters (for
  the checks that read code), and a :class:`~mpilab.sources.SourceMap` (for the
  lines of its frames);
* for anything else, only what it is.

Everything written here comes from a process the student controls and is treated as
such by the grader (:mod:`mpilab.autograder.isolated`). The preprocessor imports this module
when the kernel starts, before any student cell, with the notebook's folder off
``sys.path``; so what it uses is bound here (it imports no check), and a student who
replaces ``mpilab.grading`` or ships a module named ``mpilab`` still has their functions
graded.

Imported, it also tells :mod:`mpilab.cluster` that this kernel's cluster starts its engines
only if a cell uses them (:func:`mpilab.cluster.start_engines_on_first_use`), and
:mod:`mpilab.build` to compile a source only when it is first used: the graded checks run
in the grader's kernel, not on this notebook's engines.
"""

from __future__ import annotations

import inspect
import json
import os
from typing import Any

import cloudpickle

from .. import build, cluster
from ..sources import SourceMap
from . import wire
from .failures import fingerprint
from .wire import plain

__all__ = ["export"]

MAX_PAYLOAD = 64 << 20

# At autograde time the tests run elsewhere (mpilab.autograder.isolated): the checks
# compile their own copy of a Cython source in the grader's sandbox, so this kernel
# compiles one only if it uses it, and its own engines start only if a cell uses them.
build.defer_compiles()
cluster.start_engines_on_first_use()


def _write(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _describe_function(obj: Any) -> dict:
    try:
        src = inspect.getsource(obj)
    except (OSError, TypeError):
        src = ""
    try:
        params = [[p.name, int(p.kind), p.default is not inspect.Parameter.empty]
                  for p in inspect.signature(obj).parameters.values()]
    except (TypeError, ValueError):
        params = None
    return {"kind": "function", "name": str(getattr(obj, "__name__", ""))[:200],
            "qualname": str(getattr(obj, "__qualname__", ""))[:200],
            "fingerprint": fingerprint(obj), "source": src[:200_000], "params": params,
            "source_map": SourceMap.of(obj).to_plain()}


def _export_one(name: str, ns: dict, outdir: str) -> dict:

    if name not in ns:
        return {"kind": "missing"}
    obj = ns[name]
    if inspect.ismodule(obj):
        return {"kind": "other", "type": "module"}
    if callable(obj) and not isinstance(obj, type):
        meta = _describe_function(obj)
        data = cloudpickle.dumps(obj)
        if len(data) > MAX_PAYLOAD:
            return {"kind": "other", "type": f"function pickling to {len(data):,} bytes"}
        _write(os.path.join(outdir, f"{name}.pkl"), data)
        return meta
    try:
        data = wire.encode(plain(obj, name))
    except (TypeError, wire.WireError) as exc:
        return {"kind": "other", "type": type(obj).__name__[:200], "why": str(exc)[:500]}
    if len(data) > MAX_PAYLOAD:
        return {"kind": "other", "type": f"value of {len(data):,} bytes"}
    _write(os.path.join(outdir, f"{name}.wire"), data)
    return {"kind": "data"}


def export(names: list[str], outdir: str) -> None:
    """Write each of `names` from this kernel's namespace into `outdir` (never raises).

    Functions go to ``NAME.pkl`` (cloudpickle), plain data to ``NAME.wire``; what each
    name turned out to be (``function`` with its description, ``data``, ``missing`` or
    ``other`` with why) goes to ``index.json``.

    Parameters
    ----------
    names : list of str
        The names a test cell reads; those that are not identifiers are skipped.
    outdir : str
        The folder to write into (the grader reads it).
    """
    try:
        from IPython import get_ipython

        ns = get_ipython().user_ns
    except Exception:  # noqa: BLE001
        import __main__

        ns = vars(__main__)
    index = {}
    for name in names:
        if not (isinstance(name, str) and name.isidentifier()):
            continue
        try:
            index[name] = _export_one(name, ns, outdir)
        except BaseException as exc:  # noqa: BLE001 - a student's object may do anything
            index[name] = {"kind": "other", "type": "unexportable",
                           "why": f"{type(exc).__name__}: {exc}"[:500]}
    _write(os.path.join(outdir, "index.json"), json.dumps(index).encode())
