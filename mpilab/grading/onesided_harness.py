"""Lab 03's harness, on the ranks: the one-sided exchange run with slow ranks, windows watched.

:func:`onesided_harness` is the run every check of :mod:`mpilab.grading.onesided` (and lab
04's :mod:`~mpilab.grading.coarrays`) makes on the ranks, which import it from this module
on disk: a probe on the numbered grid with slow ranks in a checkerboard
(:func:`slow_rank`, :data:`SLOW_SECONDS`; the fast ones scribble :data:`SCRIBBLE` over
their block as soon as their exchange returns), then a heat run. While the student's code
runs, ``mpi4py.MPI.Win`` is a subclass that records every window made and pauses a slow
rank after each synchronisation, so an unfreed window is named. What the results mean, in
words, is :mod:`mpilab.grading.onesided`'s, which re-exports these names.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from mpilab import halo
from mpilab.autograder.watch import student_facing
from mpilab.grading import ghosts

__all__ = ["SLOW_SECONDS", "SCRIBBLE", "slow_rank", "onesided_harness"]

#: How late a slow rank writes its block, and how long it pauses after a synchronisation.
SLOW_SECONDS = 0.15
#: What a fast rank writes over its own block as soon as its exchange has returned.
SCRIBBLE = -1.0

_KINDS = ("exchange", "shared")
_SYNCS = ("Fence", "Sync", "Start", "Complete", "Post", "Wait", "Lock", "Unlock", "Lock_all",
          "Unlock_all", "Flush", "Flush_all", "Flush_local", "Flush_local_all")
_MAKERS = ("Create", "Allocate", "Allocate_shared", "Create_dynamic")
#: Calls that move data two-sided (a one-sided exchange makes none; a collective that
#: shares the ranks' shapes is allowed), and a window's data calls: noted when the
#: student's own code makes them (lab 04 refuses every call of a window its code makes
#: itself: those are the coarray's to make).
_MOVES = ("Send", "Recv", "Sendrecv", "Sendrecv_replace", "Isend", "Irecv", "Ssend",
          "Issend", "Rsend", "Bsend", "send", "recv", "sendrecv", "isend", "irecv", "ssend")
_RMA = ("Put", "Get", "Accumulate", "Get_accumulate", "Rput", "Rget")


class _Watch:
    """What the student's code did with windows, and whether this rank is made slow."""

    def __init__(self) -> None:
        self.pause = 0.0
        self.made: list[tuple[object, str]] = []
        self.calls: list[str] = []  # the MPI calls the student's own code made

    def note(self, what: str) -> None:
        """Note `what` when the code that called the wrapper is the student's."""
        import sys

        from mpilab.autograder.watch import by_student

        if by_student(sys._getframe(2).f_code) and what not in self.calls:
            self.calls.append(what)

    def after_sync(self) -> None:
        if self.pause:
            time.sleep(self.pause)

    def unfreed(self, start: int = 0, keep: Sequence[object] = ()) -> list[str]:
        """How each window made since index `start` (except those in `keep`) was made."""
        from mpi4py import MPI

        return [how for w, how in self.made[start:]
                if not any(w is k for k in keep) and w != MPI.WIN_NULL]

    def free_unfreed(self, start: int = 0, keep: Sequence[object] = ()) -> None:
        from mpi4py import MPI

        for w, _how in self.made[start:]:
            if not any(w is k for k in keep) and w != MPI.WIN_NULL:
                w.Free()


_WATCH = {"now": None}
_CLASSES: dict[str, type] = {}


def _classes() -> dict[str, type]:
    """The watched subclasses of Win, Cartcomm and Intracomm (made once per engine)."""
    if _CLASSES:
        return _CLASSES
    import mpi4py.MPI as M

    base_win, base_intra, base_cart = M.Win, M.Intracomm, M.Cartcomm

    def watch() -> _Watch | None:
        return _WATCH["now"]

    def synced(name: str, base: type) -> Callable:
        method = getattr(base, name)

        def call(self, *args, **kwargs):
            w = watch()
            if w is not None:
                w.note(f"win.{name}")
            out = method(self, *args, **kwargs)
            if w is not None:
                w.after_sync()
            return out

        call.__name__ = name
        return student_facing(call)

    def maker(name: str) -> classmethod:
        make = getattr(base_win, name)

        def call(cls, *args, **kwargs):
            w = watch()
            if w is not None:
                w.note(f"MPI.Win.{name}")
            win = cls(make(*args, **kwargs))
            if w is not None:
                w.made.append((win, f"MPI.Win.{name}"))
            return win

        call.__name__ = name
        return classmethod(student_facing(call))

    def noted(name: str, base: type, prefix: str) -> Callable:
        method = getattr(base, name)

        def call(self, *args, **kwargs):
            w = watch()
            if w is not None:
                w.note(f"{prefix}.{name}")
            return method(self, *args, **kwargs)

        call.__name__ = name
        return student_facing(call)

    ns: dict = {name: synced(name, base_win) for name in _SYNCS}
    ns.update({name: noted(name, base_win, "win") for name in _RMA})
    ns.update({name: maker(name) for name in _MAKERS})
    win_cls = type("Win", (base_win,), ns)

    def comm_ns(base: type) -> dict:
        out = {name: synced(name, base) for name in ("Barrier", "barrier")}
        out.update({name: noted(name, base, "cart") for name in _MOVES if hasattr(base, name)})

        def wrapping(name: str) -> Callable:
            method = getattr(base, name)

            def call(self, *args, **kwargs):
                new = method(self, *args, **kwargs)
                return _CLASSES["Intracomm"](new) if type(new) is base_intra else new

            call.__name__ = name
            return student_facing(call)

        out.update({name: wrapping(name) for name in ("Split_type", "Split", "Dup")})
        return out

    _CLASSES["Win"] = win_cls
    _CLASSES["Intracomm"] = type("Intracomm", (base_intra,), comm_ns(base_intra))
    _CLASSES["Cartcomm"] = type("Cartcomm", (base_cart,), comm_ns(base_cart))
    _CLASSES["base_win"] = base_win
    return _CLASSES


class _Watching:
    """``with _Watching(watch):`` MPI.Win is the watched class while the student's code runs."""

    def __init__(self, watch: _Watch) -> None:
        self.watch = watch

    def __enter__(self) -> _Watch:
        import mpi4py.MPI as M

        M.Win = _classes()["Win"]
        _WATCH["now"] = self.watch
        return self.watch

    def __exit__(self, *exc) -> None:
        import mpi4py.MPI as M

        M.Win = _classes()["base_win"]
        _WATCH["now"] = None


def slow_rank(cy: int, cx: int) -> bool:
    """Whether the rank at coordinates ``(cy, cx)`` is made slow: a checkerboard.

    Parameters
    ----------
    cy, cx : int
        The rank's row and column in the process grid.

    Returns
    -------
    bool
        True where ``cy + cx`` is odd, so every neighbour of a slow rank is fast.
    """
    return (cy + cx) % 2 == 1


def _residency(win, u) -> str:
    """Why `u` is not this rank's segment of the shared window `win` ('' when it is)."""
    try:
        group = win.Get_group()
        me = group.Get_rank()
        group.Free()
        buf, _unit = win.Shared_query(me)
        seg = np.frombuffer(buf, dtype=np.uint8)
    except Exception as exc:  # noqa: BLE001 - not a shared window
        return f"win is not a shared-memory window (Shared_query failed: {exc})"
    start = seg.__array_interface__["data"][0]
    at = u.__array_interface__["data"][0]
    if not (start <= at and at + u.nbytes <= start + seg.nbytes):
        return ("u is not inside this rank's segment of win (make it a view of the buffer "
                "win.Shared_query(rank) returns, not a copy)")
    return ""


def _shared_field(setup: Callable, cart, rows: int, cols: int, watch: _Watch, name: str):
    """Call the student's setup; check what it returns; zero the array."""
    start = len(watch.made)
    out = setup(cart, rows, cols)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError(f"{name} should return (win, u), not {type(out).__name__}")
    win, u = out
    if not isinstance(u, np.ndarray) or u.shape != (rows + 2, cols + 2) or u.dtype != float:
        got = (f"an array of shape {u.shape} and dtype {u.dtype}" if isinstance(u, np.ndarray)
               else type(u).__name__)
        raise TypeError(f"{name}(cart, {rows}, {cols}) should return u of shape "
                        f"{(rows + 2, cols + 2)} and dtype float64, not {got}")
    why = _residency(win, u)
    if why:
        raise TypeError(f"{name}: {why}")
    extra = watch.unfreed(start, keep=[win])
    if extra:
        raise TypeError(f"{name} made {len(extra) + 1} windows; it should make one, the "
                        "shared window it returns (and free any other)")
    u[...] = 0.0
    return win, u


def onesided_harness(comm, kind: str, setup: Callable | None, exchange: Callable, nx: int,
                     ny: int, dims: Sequence[int], steps: int, slow: bool = True) -> dict:
    """The checks' own run, on every rank: a probe with slow ranks, then a heat run.

    As :func:`mpilab.grading.halo.halo_harness` (on ``dims[0] * dims[1]`` ranks of `comm`,
    which import it from this module on disk), with windows watched.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        At least ``dims[0] * dims[1]`` ranks; a Cartesian communicator of that grid is
        made from it.
    kind : {"exchange", "shared"}
        ``"exchange"``: ``exchange(cart, u)`` fills the ghost frame of the framed block
        ``u`` (it makes and frees its own windows). ``"shared"``: ``setup(cart, rows,
        cols)`` returns ``(win, u)``, a shared-memory window and this rank's framed block
        in it, and ``exchange(cart, win, u)`` fills the frame; the harness frees the
        windows `setup` made.
    setup : callable or None
        The student's ``shared_field`` (kind "shared"), else None.
    exchange : callable
        The student's exchange.
    nx, ny : int
        Grid points along x (columns) and y (rows).
    dims : (int, int)
        The process grid ``(py, px)``; rank ``r`` sits at ``(r // px, r % px)``.
    steps : int
        Heat steps of the second run (0: only the probe).
    slow : bool, optional
        Make the checkerboard's odd ranks slow in the probe (:data:`SLOW_SECONDS`), and
        the fast ones write :data:`SCRIBBLE` over their block once their exchange
        returns (default True).

    Returns
    -------
    dict
        ``{"probe": u after one exchange of the numbered grid, "field": this rank's block
        (no frame) after `steps` steps, "problems": [what this rank saw wrong, in words],
        "calls": [the communicator's and windows' calls the student's own code made that
        move data or synchronise ("cart.Sendrecv", "win.Put", "MPI.Win.Create")]}``.
    """
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
    name = getattr(exchange, "__name__", "the exchange")
    sname = getattr(setup, "__name__", "shared_field")
    py, px = (int(d) for d in dims)
    base_cart = comm.Create_cart([py, px], periods=[False, False], reorder=False)
    cart = _classes()["Cartcomm"](base_cart)
    rank = base_cart.Get_rank()
    cy, cx = base_cart.Get_coords(rank)
    y0, rows = halo.split(ny, py)[cy]
    x0, cols = halo.split(nx, px)[cx]
    watch = _Watch()
    problems: list[str] = []
    shared: list = []  # the windows of setup, freed at the end
    try:
        with _Watching(watch):
            # 1. the probe: numbered grid, slow ranks, fast ranks scribble at once
            is_slow = slow and slow_rank(cy, cx)
            if kind == "shared":
                win, u = _shared_field(setup, cart, rows, cols, watch, sname)
                shared.append(win)
            else:
                win, u = None, np.zeros((rows + 2, cols + 2))
            first = len(watch.made)
            if is_slow:
                time.sleep(SLOW_SECONDS)
            u[1:-1, 1:-1] = ghosts.numbered(nx, ny)[y0:y0 + rows, x0:x0 + cols]
            watch.pause = SLOW_SECONDS if is_slow else 0.0
            if kind == "shared":
                exchange(cart, win, u)
            else:
                exchange(cart, u)
            watch.pause = 0.0
            probe = u.copy()
            if slow and not is_slow:
                u[1:-1, 1:-1] = SCRIBBLE
            left = watch.unfreed(first)
            if left:
                problems.append(f"rank {rank}: one call of {name} left {len(left)} "
                                f"window{'s' * (len(left) != 1)} unfreed (made by "
                                f"{left[0]}): free every window it makes (win.Free()) "
                                "before it returns")
            watch.free_unfreed(first)
            # 2. the heat run
            if kind == "shared":
                (wa, old), (wb, new) = (_shared_field(setup, cart, rows, cols, watch, sname)
                                        for _ in range(2))
                shared += [wa, wb]
            else:
                wa = wb = None
                old, new = np.zeros((rows + 2, cols + 2)), np.zeros((rows + 2, cols + 2))
            first = len(watch.made)
            mine = [(y - y0 + 1, x - x0 + 1) for x, y in halo.heat_sources(nx, ny)
                    if y0 <= y < y0 + rows and x0 <= x < x0 + cols]
            for _ in range(steps):
                if kind == "shared":
                    exchange(cart, wa, old)
                else:
                    exchange(cart, old)
                halo.heat_step(old, new)
                for y, x in mine:
                    new[y, x] += 1.0
                old, new, wa, wb = new, old, wb, wa
            left = watch.unfreed(first)
            if left:
                problems.append(f"rank {rank}: {steps} calls of {name} left {len(left)} "
                                f"window{'s' * (len(left) != 1)} unfreed (made by "
                                f"{left[0]}): every call must free the windows it makes")
            watch.free_unfreed(first)
            field = old[1:-1, 1:-1].copy()
        return {"probe": probe, "field": field, "problems": problems, "calls": watch.calls}
    finally:
        from mpi4py import MPI

        for w in shared:
            if w != MPI.WIN_NULL:
                w.Free()
        base_cart.Free()
