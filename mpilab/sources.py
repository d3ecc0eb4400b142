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

Line numbers are the notebook's: a function defined in a notebook cell has IPython's line
numbers, counted from the top of its cell (after IPython dropped the cell's leading blank
lines, which the map adds back), so the map also records the cell (``In [7]``) and
:func:`describe_frame` says "line 5 of cell In [7] (in ring_pass)", which is what the
student finds with the editor's line numbers, never a line counted inside the function.
"""

from __future__ import annotations

import functools
import linecache
import os
import re
import types
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

__all__ = ["SourceMap", "cell_of", "describe_frame", "is_library", "parse_stack", "stuck_hint"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__))  # mpilab/
MAX_FUNCTIONS = 200  # code objects mapped per call: a student's helpers, not a library
MAX_LINES = 600  # lines kept per code object


def is_library(filename: str) -> bool:
    """Whether `filename` is code of mpilab, an installed package or the standard library.

    Parameters
    ----------
    filename : str
        A code object's file name (``co_filename``).

    Returns
    -------
    bool
        True for a file in the mpilab package, under ``site-packages`` or
        ``/lib/python3``, or a frozen module; False otherwise (the student's code).
    """
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

    Entries are ``(name, first_line, last_line, filename, {line: text}, cell)``, where
    ``cell`` is ``(execution count, leading blank lines)`` for code from a notebook cell
    (:func:`cell_of`) and None otherwise; only code that is not library code
    (:func:`is_library`) keeps its lines.

    Parameters
    ----------
    entries : iterable of tuple, optional
        The entries, as above (a five-item entry gets None for its cell); none by
        default.
    files : bool, optional
        Whether the file a frame names may be read on this host (default True); False
        for frames reported by a student's process, resolved through the map only.
    """

    def __init__(self, entries: Iterable[tuple] = (), files: bool = True):
        self.entries = [(*e[:5], e[5] if len(e) > 5 else None) for e in entries]
        # Frames reported by a student's process name whatever files they like: the
        # grader resolves them through the map only, never by reading a file it names.
        self.files = files

    @classmethod
    def of(cls, *objs: Any, limit: int = MAX_FUNCTIONS) -> SourceMap:
        """The map of every function reachable from `objs`, read from this process.

        Functions are reached through partials, bound methods, closures, the functions
        they name as globals and lists, tuples and dicts of up to 64 items; library code
        (:func:`is_library`) is left out. An object with a ``source_map`` (a handle on a
        function that lives elsewhere) brings that map's entries.

        Parameters
        ----------
        *objs : object
            Functions and the arguments they are sent with.
        limit : int, optional
            The most functions followed (default :data:`MAX_FUNCTIONS`).

        Returns
        -------
        SourceMap
            One entry per code object (nested ones included), with at most
            :data:`MAX_LINES` source lines each, from this process's ``linecache``.
        """
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
                entries.append((code.co_name, first, last, code.co_filename, lines,
                                cell_of(code.co_filename)))
        return cls(entries)

    def __add__(self, other: SourceMap) -> SourceMap:
        return SourceMap(self.entries + other.entries, self.files and other.files)

    def __len__(self) -> int:
        return len(self.entries)

    def text(self, filename: str, lineno: int, func: str) -> str:
        """The source text of `lineno` in `func` (stripped), or "" when unknown.

        The file is tried first (code run in this process, or a real file on this host;
        not where the map was made with ``files=False``); then the map, by function name
        and a line range that holds `lineno`.

        Parameters
        ----------
        filename : str
            The file the frame names.
        lineno : int
            The frame's line number.
        func : str
            The frame's function name.

        Returns
        -------
        str
            The line, without surrounding white space; "" when neither knows it.
        """
        if self.files and filename and not filename.startswith("<"):
            line = linecache.getline(filename, lineno).strip()
            if line:
                return line
        for name, first, last, _file, lines, _cell in self.entries:
            if name == func and first <= lineno <= last and lineno in lines:
                return lines[lineno].strip()
        return ""

    def file(self, filename: str, lineno: int, func: str) -> str:
        """The file this frame's code came from, as the map knows it.

        A pickled function names ``<dynamic-code>`` wherever it runs: the map has the
        file it was defined in.

        Parameters
        ----------
        filename, lineno, func : str, int, str
            As for :meth:`text`.

        Returns
        -------
        str
            The file of the map's entry for `func` whose line range holds `lineno`, else
            `filename`; "" when that is not a real file (a name in angle brackets, or
            empty).
        """
        for name, first, last, file, _lines, _cell in self.entries:
            if name == func and first <= lineno <= last:
                filename = file
                break
        return filename if filename and not filename.startswith("<") else ""

    def cell(self, filename: str, lineno: int, func: str) -> tuple[int, int] | None:
        """The notebook cell this frame's code came from, or None.

        Parameters
        ----------
        filename, lineno, func : str, int, str
            The frame's file, line and function, as :meth:`text` takes them.

        Returns
        -------
        (int, int) or None
            ``(execution count, leading blank lines)`` of the cell, from the map's entry
            for `func` whose line range holds `lineno`, else (where the map may read
            files) from this process's IPython (:func:`cell_of`); None when neither
            knows one.
        """
        for name, first, last, _file, _lines, cell in self.entries:
            if name == func and first <= lineno <= last and cell:
                return cell
        return cell_of(filename) if self.files else None

    def is_user(self, filename: str, func: str, lineno: int) -> bool:
        """Whether this frame is the student's code.

        Parameters
        ----------
        filename : str
            The file the frame names.
        func : str
            The frame's function name.
        lineno : int
            The frame's line number.

        Returns
        -------
        bool
            True when the map holds `func` with a line range that holds `lineno`, or
            `filename` is not library code (:func:`is_library`).
        """
        if any(name == func and first <= lineno <= last
               for name, first, last, *_ in self.entries):
            return True
        return not is_library(filename)

    # -- as plain data -----------------------------------------------------------------
    def to_plain(self) -> list:
        """The map as plain data (JSON-serialisable), for :meth:`from_plain`.

        Returns
        -------
        list of list
            One ``[name, first_line, last_line, filename, {str(line): text}, cell]`` per
            entry, where ``cell`` is ``[execution count, leading blank lines]`` or None.
        """
        return [[name, first, last, filename, {str(k): v for k, v in lines.items()},
                 list(cell) if cell else None]
                for name, first, last, filename, lines, cell in self.entries]

    @classmethod
    def from_plain(cls, data: Any) -> SourceMap:
        """Rebuild from :meth:`to_plain`; whatever does not fit the shape is dropped.

        `data` may come from a student's process: entries are checked item by item and
        trimmed (at most ``4 * MAX_FUNCTIONS`` entries, :data:`MAX_LINES` lines each,
        500 characters a line and a file name, 200 a function name).

        Parameters
        ----------
        data : object
            What :meth:`to_plain` gave, or anything else.

        Returns
        -------
        SourceMap
            The entries that fit the shape; an empty map when `data` is not a list.
        """
        entries = []
        if not isinstance(data, list):
            return cls()
        for item in data[:MAX_FUNCTIONS * 4]:
            try:
                name, first, last, filename, lines, *rest = item
                if not (type(name) is str and type(first) is int and type(last) is int
                        and type(filename) is str and type(lines) is dict):
                    continue
                kept = {int(k): v[:500] for k, v in list(lines.items())[:MAX_LINES]
                        if type(v) is str}
                cell = rest[0] if rest else None
                cell = ((cell[0], cell[1]) if isinstance(cell, list) and len(cell) == 2
                        and all(type(x) is int and 0 <= x < 10**9 for x in cell) else None)
            except (TypeError, ValueError):
                continue
            entries.append((name[:200], first, last, filename[:500], kept, cell))
        return cls(entries)


def cell_of(filename: str) -> tuple[int, int] | None:
    """The IPython cell compiled as `filename` in this process, or None.

    IPython drops a cell's leading blank lines before compiling it, so its line numbers
    are that many lines short of the editor's; the raw cell in IPython's history says
    how many.

    Parameters
    ----------
    filename : str
        The name IPython compiled the cell under, as a frame's code object carries it
        (``co_filename``; IPython's compiler maps it to the cell's execution count).

    Returns
    -------
    (int, int) or None
        ``(execution count, leading blank lines)`` of the cell (0 blank lines where the
        history does not say); None when `filename` is not a cell's, or this process
        does not run IPython.
    """
    try:
        from IPython import get_ipython

        ip = get_ipython()
        if ip is None:
            return None
        count = ip.compile._filename_map.get(filename)
        if not isinstance(count, int):
            return None
        blank = 0
        try:
            raw = ip.history_manager.input_hist_raw[count]
            for line in raw.splitlines():
                if line and not line.isspace():
                    break
                blank += 1
        except (AttributeError, IndexError, TypeError):
            pass
        return count, blank
    except Exception:  # noqa: BLE001 - IPython's internals may change: then no cell
        return None


_STACK_LINE = re.compile(r'^\s*File "(?P<file>.*)", line (?P<line>\d+) in (?P<func>\S+)')


def parse_stack(text: str) -> list[tuple[str, int, str]]:
    """faulthandler's dump (most recent call first) as frames, outermost first.

    Parameters
    ----------
    text : str
        The dump: lines ``File "NAME", line N in FUNC``; other lines are skipped.

    Returns
    -------
    list of (str, int, str)
        ``(filename, lineno, func)`` of each frame, the outermost first.
    """
    frames = []
    for line in text.splitlines():
        m = _STACK_LINE.match(line)
        if m:
            frames.append((m["file"], int(m["line"]), m["func"]))
    return frames[::-1]


def describe_frame(frames: Sequence[tuple[str, int, str]], smap: SourceMap | None = None) -> str:
    """Where the innermost frame of the student's code was, the way the notebook shows it.

    As in 'line 6 of cell In [7] (in ring_exchange): comm.Send(data, dest=right)'.
    `smap` maps frames of code that ran elsewhere (an engine) back to its source: it is
    built where the function objects are (:class:`SourceMap`). A function from a file
    names the file; one whose cell is not known, only the function.

    Parameters
    ----------
    frames : sequence of (str, int, str)
        ``(filename, lineno, func)`` of each frame, the outermost first
        (:func:`parse_stack`).
    smap : SourceMap, optional
        The map of the code that ran; None (default): an empty map (files on this host
        only).

    Returns
    -------
    str
        Where the innermost frame of the student's code (:meth:`SourceMap.is_user`; the
        innermost frame when none is) was, with the line's text after ": " where known;
        "" when there are no frames.
    """
    if not frames:
        return ""
    smap = smap if smap is not None else SourceMap()
    pick = next((f for f in reversed(frames) if smap.is_user(f[0], f[2], f[1])), frames[-1])
    filename, lineno, func = pick
    text = smap.text(filename, lineno, func)
    cell = smap.cell(filename, lineno, func)
    if cell:
        s = f"line {lineno + cell[1]} of cell In [{cell[0]}] (in {func})"
    elif (file := smap.file(filename, lineno, func)) and not file.startswith(
            ("/tmp/ipykernel_", "<")):
        s = f"line {lineno} of {os.path.basename(file)} (in {func})"
    else:
        s = f"line {lineno} of {func}"
    return f"{s}: {text}" if text else s


_MPI_CALL = re.compile(r"\b(I?[sS]end|Ssend|Rsend|Bsend|I?[rR]ecv|[sS]endrecv\w*|Waitall|Wait"
                       r"|wait|Barrier|barrier|[bB]cast|[rR]educe|[aA]llreduce|[gG]ather"  # codespell:ignore ather
                       r"|[aA]llgather|[sS]catter|[aA]lltoall|[pP]robe|Fence|sync_all|sync_images"
                       r"|MPI_\w+)\s*\(")
_COLLECTIVE = re.compile(r"\b(sync_all|sync_images|Fence|Barrier|barrier|CoArray|free|Free"
                         r"|[aA]llreduce|[bB]cast|[rR]educe|[aA]llgather|[gG]ather"  # codespell:ignore ather
                         r"|[sS]catter|[aA]lltoall\w*|Allocate\w*|Create\w*|Split\w*|Dup"
                         r"|Neighbor_\w+)\s*\(")
_SEND_FIRST = re.compile(r"\b(Send|send|Ssend|MPI_Send|MPI_Ssend)\s*\(")
_RECV = re.compile(r"\b(Recv|recv|MPI_Recv)\s*\(")


class MessageOnly:
    """Mixin for the course's own exceptions: the notebook shows the message alone
    (IPython's ``_render_traceback_`` protocol). The message names the student's lines
    and what to do; mpilab's and ipyparallel's frames would only bury it."""

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[0;31m{type(self).__name__}\x1b[0m: {self}"]


def stuck_hint_at(where: dict[int, str], finished: Sequence[int]) -> str:
    """:func:`stuck_hint` from what :func:`describe_frame` said of each stuck rank.

    Parameters
    ----------
    where : dict of int to str
        Each stuck rank's place ("line 6 of cell In [3]: comm.Send(...)"; "" where
        unknown): the code after the first ": " is the stuck line.
    finished : sequence of int
        The ranks that had returned.

    Returns
    -------
    str
        As :func:`stuck_hint`.
    """
    return stuck_hint({r: w.split(": ", 1)[1] if ": " in w else "" for r, w in where.items()},
                      finished)


def stuck_hint(lines: dict[int, str], finished: Sequence[int]) -> str:
    """A guess at why ranks did not finish, from the source lines they were stuck on.

    Parameters
    ----------
    lines : dict of int to str
        Each stuck rank's source line (rank -> text, "" where unknown).
    finished : sequence of int
        The ranks that had returned (only whether there are any matters).

    Returns
    -------
    str
        One or a few sentences for the student, by what the known lines have in
        common: collective calls (the same one or different ones), sends, receives, a
        line with no MPI call; else a deadlock in general (also when no line is known).
    """
    texts = [t for t in lines.values() if t]
    if not texts:
        return "Ranks waiting on each other (a deadlock) or an endless loop?"
    if all(_COLLECTIVE.search(t) for t in texts):
        same = ("every rank (image) must make the same collective calls, the same number "
                "of times, in the same order (a collective call inside an `if` that not "
                "every rank takes?).")
        if len(set(texts)) > 1:
            return ("The stuck ranks wait in different collective calls (sync_all, Fence, "
                    "Barrier, a reduction, making or freeing a window): they disagree on "
                    "the sequence of collective calls, so none can complete: " + same)
        return ("Every stuck rank waits in the same collective call, which "
                + ("the ranks that returned never made" if finished else
                   "some rank never made, or made as another call")
                + ": " + same)
    if all(_SEND_FIRST.search(t) for t in texts):
        return ("Every stuck rank is in a send: each waits for a receive its partner never "
                "posts, because the partner is sending too (a deadlock). A large message "
                "is not buffered, so Send waits for the matching Recv. Pair them: "
                "comm.Sendrecv, or even ranks send first while odd ranks receive first.")
    if all(_RECV.search(t) for t in texts):
        return ("Every stuck rank is waiting to receive a message nobody sends (check "
                "source, tag and that every rank sends what its partner expects)"
                + (" — or the ranks that finished returned without sending" if finished
                   else "") + ".")
    if any(not _MPI_CALL.search(t) for t in texts):
        return ("A rank was not in an MPI call made from Python: either an endless loop, or "
                "it is waiting inside compiled code it called (a Cython or C function that "
                "sends and receives: check its sends and receives pair up, as for a deadlock).")
    return "The ranks are waiting on each other in MPI calls: a deadlock?"
