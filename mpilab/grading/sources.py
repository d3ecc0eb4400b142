"""Source lines of code that ran somewhere else, looked up where the function objects are.

A function sent to MPI engines travels as a pickle. What the engine reports back, a
traceback or a stack dump, names a file and a line, but the file is only as good as the
pickler made it: cloudpickle 3.1.3 writes ``co_filename = "<dynamic-code>"``, earlier
versions the original path, which may not exist on the engine (a notebook cell's
``/tmp/ipykernel_…/….py`` lives in the kernel's ``linecache`` only). Function names and
line numbers do survive pickling, so the process that *holds* the function objects builds
a :class:`SourceMap` of every code object they reach (the functions, the functions they
call by global name, closures, nested functions) with the source lines from its own
``linecache``, and frames are mapped back through it::

    smap = SourceMap.of(func, *args)               # in the caller, before sending
    smap.text("<dynamic-code>", 79, "exchange")    # -> 'cart.Send(u[-2, 1:-1], dest=south)'

A map is plain data (:meth:`SourceMap.to_plain`), so one built in a student's kernel can
travel to the grader with the pickled function and explain that function's frames there.
"""

from __future__ import annotations

import functools
import linecache
import os
import types
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["SourceMap", "is_library"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_FUNCTIONS = 200  # code objects mapped per call: a student's helpers, not a library
MAX_LINES = 600  # lines kept per code object


def is_library(filename: str) -> bool:
    """Code of mpilab, an installed package or the standard library (not the student's)."""
    return (filename.startswith(_PACKAGE + os.sep) or "site-packages" in filename
            or filename.startswith("<frozen") or "/lib/python3" in filename)


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _code_objects(c)


def _line_range(code: types.CodeType) -> tuple[int, int]:
    lines = [ln for _s, _e, ln in code.co_lines() if ln is not None]
    first = code.co_firstlineno
    return first, max([first, *lines])


def _callables(objs: Iterable[Any], limit: int) -> list:
    """Functions reachable from `objs` through partials, methods, closures and globals."""
    found: list[types.FunctionType] = []
    seen: set[int] = set()
    todo = list(objs)
    while todo and len(found) < limit:
        obj = todo.pop(0)
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, functools.partial):
            todo += [obj.func, *obj.args, *(obj.keywords or {}).values()]
        elif isinstance(obj, types.MethodType):
            todo.append(obj.__func__)
        elif isinstance(obj, (list, tuple)) and len(obj) <= 64:
            todo += list(obj)
        elif isinstance(obj, dict) and len(obj) <= 64:
            todo += list(obj.values())
        elif isinstance(getattr(obj, "source_map", None), SourceMap):
            found.append(obj)  # a handle on a function that lives elsewhere (the grader's)
        elif isinstance(obj, types.FunctionType):
            if is_library(obj.__code__.co_filename):
                continue  # mpilab's own harness: its globals are not the student's
            found.append(obj)
            for cell in obj.__closure__ or ():
                try:
                    todo.append(cell.cell_contents)
                except ValueError:  # an empty cell
                    pass
            glb = obj.__globals__
            for code in _code_objects(obj.__code__):
                for name in code.co_names:
                    v = glb.get(name)
                    if isinstance(v, (types.FunctionType, functools.partial)):
                        todo.append(v)
    return found


class SourceMap:
    """Code objects by name and line range, with their source lines.

    Entries are ``(name, first_line, last_line, filename, {line: text})``; only code that
    is not library code (:func:`is_library`) keeps its lines.
    """

    def __init__(self, entries: Iterable[tuple[str, int, int, str, dict[int, str]]] = (),
                 files: bool = True):
        self.entries = list(entries)
        # Frames reported by a student's process name whatever files they like: the
        # grader resolves them through the map only, never by reading a file it names.
        self.files = files

    @classmethod
    def of(cls, *objs: Any, limit: int = MAX_FUNCTIONS) -> SourceMap:
        """The map of every function reachable from `objs`, read from this process."""
        entries, seen = [], set()
        for func in _callables(objs, limit):
            if not isinstance(func, types.FunctionType):
                entries += func.source_map.entries
                continue
            for code in _code_objects(func.__code__):
                key = (code.co_filename, code.co_name, code.co_firstlineno)
                if key in seen or is_library(code.co_filename):
                    continue
                seen.add(key)
                first, last = _line_range(code)
                lines = {}
                for ln in range(first, min(last, first + MAX_LINES) + 1):
                    text = linecache.getline(code.co_filename, ln, func.__globals__)
                    if text:
                        lines[ln] = text.rstrip("\n")
                entries.append((code.co_name, first, last, code.co_filename, lines))
        return cls(entries)

    def __add__(self, other: SourceMap) -> SourceMap:
        return SourceMap(self.entries + other.entries, self.files and other.files)

    def __len__(self) -> int:
        return len(self.entries)

    def text(self, filename: str, lineno: int, func: str) -> str:
        """The source text of `lineno` in `func` (stripped), or "" when unknown.

        The file is tried first (code run in this process, or a real file on this host);
        then the map, by function name and a line range that holds `lineno`.
        """
        if self.files and filename and not filename.startswith("<"):
            line = linecache.getline(filename, lineno).strip()
            if line:
                return line
        for name, first, last, _file, lines in self.entries:
            if name == func and first <= lineno <= last and lineno in lines:
                return lines[lineno].strip()
        return ""

    def is_user(self, filename: str, func: str, lineno: int) -> bool:
        """Is this frame the student's code (mapped here, or a file outside libraries)?"""
        if any(name == func and first <= lineno <= last
               for name, first, last, _f, _l in self.entries):
            return True
        return not is_library(filename)

    # -- as plain data -----------------------------------------------------------------
    def to_plain(self) -> list:
        return [[name, first, last, filename, {str(k): v for k, v in lines.items()}]
                for name, first, last, filename, lines in self.entries]

    @classmethod
    def from_plain(cls, data: Any) -> SourceMap:
        """Rebuild from :meth:`to_plain`; whatever does not fit the shape is dropped."""
        entries = []
        if not isinstance(data, list):
            return cls()
        for item in data[:MAX_FUNCTIONS * 4]:
            try:
                name, first, last, filename, lines = item
                if not (type(name) is str and type(first) is int and type(last) is int
                        and type(filename) is str and type(lines) is dict):
                    continue
                kept = {int(k): v[:500] for k, v in list(lines.items())[:MAX_LINES]
                        if type(v) is str}
            except (TypeError, ValueError):
                continue
            entries.append((name[:200], first, last, filename[:500], kept))
        return cls(entries)
