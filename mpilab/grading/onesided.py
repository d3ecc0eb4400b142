"""Lab 03's graded checks (one-sided halo exchanges), on top of :mod:`mpilab.grading`.

The lab's test cells call these functions; the checks, their harness and their messages
live here, as lab 02's live in :mod:`mpilab.grading.halo`, whose pure-Python parts
(the numbered grid, :func:`~mpilab.grading.halo.ghost_problems`, ...) they reuse::

    from mpilab.grading import onesided as grading_onesided
    grading_onesided.check_put(exchange_put, 16, 12, (2, 2), 10)

Every check runs the student's code through :func:`onesided_harness` on the notebook's
cluster (:func:`mpilab.grading.run_on_ranks`, with a timeout), in two runs:

1. **a probe on the numbered grid, with slow ranks**: grid point ``(y, x)`` holds
   ``y * nx + x + 1``, and one exchange must fill every ghost edge with the neighbour's
   edge. Half the ranks (a checkerboard: every neighbour of a slow rank is fast) are made
   slow on purpose: they write their block :data:`SLOW_SECONDS` (0.15 s) late, and pause
   as long after every synchronisation their code calls (``win.Fence``, ``win.Sync``, ``Barrier``, the PSCW
   and lock calls). The fast ranks overwrite their own block with -1.0 as soon as their
   exchange returns (what the next step would do). An exchange whose epochs are right
   does not notice; one that reads before the data is there (no opening synchronisation,
   ghost cells copied before the closing ``Fence``) or lets a neighbour go on while it
   still reads (no closing synchronisation) fails, every time, with the edge it got
   wrong and what it holds instead.
2. **a heat run**: `steps` steps of the heat equation with the student's exchange (no
   slow ranks), gathered and compared with :func:`mpilab.halo.serial_heat`.

Both runs count the windows the student's code creates: while it runs,
``mpi4py.MPI.Win`` is a subclass whose constructors (``Create``, ``Allocate``,
``Allocate_shared``, ``Create_dynamic``) record each window, so a window an exchange
leaves unfreed is named ("rank 0: 10 calls of exchange_put left 10 windows unfreed
(made by MPI.Win.Create)") and then freed by the harness. mpi4py never frees a window
when its Python object goes away, so an unfreed window per step is a real leak. Code
that reaches the class by another name than ``MPI.Win`` (``from mpi4py.MPI import Win``
at the top of a cell) is not watched: the count is a help, not a proof.

Part D, a prediction
--------------------
:func:`check_epoch_us` grades ``epoch_us(n_bytes, empty_epoch_us, beta_MBps)``, the
model of a fence epoch carrying one Put (the empty epoch plus ``n / β``), first against
:func:`reference_epoch_us` on made-up numbers, then against an epoch of 1 MiB measured
just now (:func:`epoch_times`, on the ranks through :mod:`mpilab.grading.measured`).

Where it runs
-------------
As in :mod:`mpilab.grading.halo`: the harness is a module-level function the ranks import
from disk, references are computed in the caller, and at autograde time the caller is
the grader's kernel and the ranks are sandboxed.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence

import numpy as np

from mpilab import grading, halo
from mpilab.grading import halo as grading_halo
from mpilab.grading import measured
from mpilab.grading.prediction import Part, Prediction, shown, where

__all__ = [
    "SLOW_SECONDS",
    "SCRIBBLE",
    "onesided_harness",
    "slow_rank",
    "probe_problems",
    "check_put",
    "check_shared",
    "check_mailbox",
    "show_exchange",
    "show_shared",
    "compare_heat",
    "epoch_times",
    "reference_epoch_us",
    "epoch_now",
    "check_epoch_us",
    "show_epoch",
    "PREDICTION_TOLERANCE",
    "EPOCH",
]

#: How late a slow rank writes its block, and how long it pauses after a synchronisation.
SLOW_SECONDS = 0.15
#: What a fast rank writes over its own block as soon as its exchange has returned.
SCRIBBLE = -1.0

_KINDS = ("exchange", "shared")
_P2P = r"\b(I?[sS]end|Ssend|Rsend|I?[rR]ecv|[sS]endrecv\w*)\s*\("
_SYNCS = ("Fence", "Sync", "Start", "Complete", "Post", "Wait", "Lock", "Unlock", "Lock_all",
          "Unlock_all", "Flush", "Flush_all", "Flush_local", "Flush_local_all")
_MAKERS = ("Create", "Allocate", "Allocate_shared", "Create_dynamic")


# ---------------------------------------------------------------------------------------
# engine side: watched windows and communicators


class _Watch:
    """What the student's code did with windows, and whether this rank is made slow."""

    def __init__(self) -> None:
        self.pause = 0.0
        self.made: list[tuple[object, str]] = []

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
            out = method(self, *args, **kwargs)
            w = watch()
            if w is not None:
                w.after_sync()
            return out

        call.__name__ = name
        return call

    def maker(name: str) -> classmethod:
        make = getattr(base_win, name)

        def call(cls, *args, **kwargs):
            win = cls(make(*args, **kwargs))
            w = watch()
            if w is not None:
                w.made.append((win, f"MPI.Win.{name}"))
            return win

        call.__name__ = name
        return classmethod(call)

    ns: dict = {name: synced(name, base_win) for name in _SYNCS}
    ns.update({name: maker(name) for name in _MAKERS})
    win_cls = type("Win", (base_win,), ns)

    def comm_ns(base: type) -> dict:
        out = {name: synced(name, base) for name in ("Barrier", "barrier")}

        def wrapping(name: str) -> Callable:
            method = getattr(base, name)

            def call(self, *args, **kwargs):
                new = method(self, *args, **kwargs)
                return _CLASSES["Intracomm"](new) if type(new) is base_intra else new

            call.__name__ = name
            return call

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
    """Whether the rank at coordinates ``(cy, cx)`` is made slow: a checkerboard."""
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

    Runs on the engines (through :func:`mpilab.grading.run_on_ranks`), which import it
    from this module on disk.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        ``dims[0] * dims[1]`` ranks.
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
    slow : bool
        Make the checkerboard's odd ranks slow in the probe (:data:`SLOW_SECONDS`).

    Returns
    -------
    dict
        ``{"probe": u after one exchange of the numbered grid, "field": this rank's block
        (no frame) after `steps` steps, "problems": [what this rank saw wrong, in words]}``.
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
            u[1:-1, 1:-1] = grading_halo.numbered(nx, ny)[y0:y0 + rows, x0:x0 + cols]
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
        return {"probe": probe, "field": field, "problems": problems}
    finally:
        from mpi4py import MPI

        for w in shared:
            if w != MPI.WIN_NULL:
                w.Free()
        base_cart.Free()


# ---------------------------------------------------------------------------------------
# client side: what went wrong, in words


def probe_problems(probes: Sequence[np.ndarray], nx: int, ny: int, dims: Sequence[int],
                   slow: bool = True) -> list[str]:
    """The wrong edges after the probe, each line naming rank, edge and neighbour.

    :func:`mpilab.grading.halo.ghost_problems`, with a word on timing where the edge a
    rank holds points to an epoch that closed too early or opened too late.
    """
    problems = grading_halo.ghost_problems(probes, nx, ny, dims)
    if not slow:
        return problems
    _py, px = dims
    out = []
    for line in problems:
        m = re.match(r"rank (\d+): the (\w+) ghost", line)
        r = int(m.group(1)) if m else -1
        if f"holds [{SCRIBBLE:g}" in line:
            line += (f" — it holds the {SCRIBBLE:g}s its neighbour wrote over its block "
                     "after its exchange returned: this rank read too late, after the "
                     "neighbour had gone on (no closing synchronisation?)")
        elif "(nothing arrived?)" in line and r >= 0:
            cy, cx = divmod(r, px)
            who = "slow" if slow_rank(cy, cx) else "fast"
            line += (f" — rank {r} is a {who} rank of the probe; if the code reads the "
                     "right neighbour, was the edge read before the neighbour wrote it (no "
                     "opening synchronisation?) or before its Put arrived (ghost cells used "
                     "before the closing Fence?)")
        out.append(line)
    return out


def _name(func: Callable, name: str | None) -> str:
    return name or getattr(func, "__name__", None) or "the function"


def _run(kind: str, setup: Callable | None, exchange: Callable, nx: int, ny: int,
         dims: Sequence[int], steps: int, slow: bool, timeout: float) -> list[dict]:
    py, px = (int(d) for d in dims)
    return grading.run_on_ranks(onesided_harness, kind, setup, exchange, nx, ny, (py, px),
                                steps, slow, ranks=py * px, timeout=timeout)


def _verdict(outs: list[dict], where: str, nx: int, ny: int, dims: Sequence[int],
             steps: int, hint: str) -> None:
    __tracebackhide__ = True
    problems = probe_problems([o["probe"] for o in outs], nx, ny, dims)
    grading.expect(not problems, f"{where}: after one exchange (slow ranks in a checkerboard, "
                   f"see the lab) {len(problems)} edge(s) are wrong:\n  "
                   + "\n  ".join(problems[:6]) + ("\n  ..." if len(problems) > 6 else "")
                   + "\nEvery point holds its own number (1, 2, ... row by row over the grid), "
                   "so a ghost edge must hold the numbers of the neighbour's edge.")
    leaks = [p for o in outs for p in o["problems"]]
    grading.expect(not leaks, f"{where}: windows left unfreed:\n  " + "\n  ".join(leaks[:4]))
    grading.expect_close(grading_halo.gathered([o["field"] for o in outs], nx, ny, dims),
                         halo.serial_heat(nx, ny, steps),
                         what=f"{where}: the heat field after {steps} steps", rtol=1e-10,
                         atol=1e-14, hint=hint)


def _code(func: Callable, name: str) -> str:
    return grading_halo.code_of(func, name)


# ---------------------------------------------------------------------------------------
# the graded checks


def check_put(exchange: Callable, nx: int, ny: int, dims: Sequence[int], steps: int, *,
              name: str | None = None, timeout: float = 20) -> None:
    """Part A: ``exchange(cart, u)`` with a window over ``u``, Put and Fence; fail saying why.

    Structure first (``MPI.Win.Create``, ``Put``, ``Fence``, no send or receive), then the
    probe with slow ranks and the heat run of :func:`onesided_harness`.

    Parameters
    ----------
    exchange : callable
        ``exchange(cart, u)``, run on every rank: fills the ghost frame of ``u``.
    nx, ny : int
        The grid.
    dims : (int, int)
        The process grid ``(py, px)``; the check runs on ``py * px`` ranks.
    steps : int
        Heat steps compared with :func:`mpilab.halo.serial_heat`.
    name : str, optional
        What messages call `exchange`; its ``__name__`` by default.
    timeout : float
        Seconds before the check fails as stuck.

    Raises
    ------
    mpilab.grading.CheckFailed
        With a message naming the rank, the ghost edge and the neighbour.
    """
    __tracebackhide__ = True
    name = _name(exchange, name)
    code = _code(exchange, name)
    grading.expect(bool(re.search(r"\bWin\.Create\s*\(", code) and re.search(r"\.Put\s*\(", code)
                        and re.search(r"\.Fence\s*\(", code) and not re.search(_P2P, code)),
                   f"{name} should make a window over u (MPI.Win.Create), put the edges "
                   "into the neighbours' ghost cells (win.Put) between two win.Fence(), "
                   "with no send or receive (that was lab 02)")
    where = f"{name} on a {nx} × {ny} grid, {dims[0]} × {dims[1]} process grid"
    outs = _run("exchange", None, exchange, nx, ny, dims, steps, True, timeout)
    _verdict(outs, where, nx, ny, dims, steps,
             hint="One exchange was right, so look at what changes between calls: every "
             "step makes a new window over the array it is given, and the frame on the "
             "border must stay 0.0.")


def check_shared(setup: Callable, exchange: Callable, nx: int, ny: int, dims: Sequence[int],
                 steps: int, *, timeout: float = 20) -> None:
    """Part B: ``setup(cart, rows, cols) -> (win, u)`` and ``exchange(cart, win, u)``.

    Structure first (``Split_type`` and ``Allocate_shared`` in `setup`, ``Shared_query``
    in `exchange`, no Put, Get, send or receive), then the probe with slow ranks and the
    heat run of :func:`onesided_harness`, on fields that live in the students' windows.

    Raises
    ------
    mpilab.grading.CheckFailed
        With a message naming the rank, the ghost edge and the neighbour.
    """
    __tracebackhide__ = True
    sname, name = _name(setup, None), _name(exchange, None)
    code = _code(setup, sname)
    grading.expect(bool(re.search(r"\bSplit_type\s*\(", code)
                        and re.search(r"\bAllocate_shared\s*\(", code)),
                   f"{sname} should split cart by node (cart.Split_type("
                   "MPI.COMM_TYPE_SHARED)) and allocate the block in a shared window "
                   "(MPI.Win.Allocate_shared)")
    code = _code(exchange, name)
    grading.expect(bool(re.search(r"\.Shared_query\s*\(", code)
                        and not re.search(_P2P, code)
                        and not re.search(r"\.(Put|Get|Accumulate|R?[Pp]ut|R?[Gg]et)\s*\(",
                                          code)),
                   f"{name} should read the neighbours' edges straight from their segments "
                   "of the shared window (win.Shared_query, then NumPy copies): no Put, "
                   "Get, send or receive")
    where = f"{sname} + {name} on a {nx} × {ny} grid, {dims[0]} × {dims[1]} process grid"
    outs = _run("shared", setup, exchange, nx, ny, dims, steps, True, timeout)
    _verdict(outs, where, nx, ny, dims, steps,
             hint="One exchange was right, so look at what changes between calls: the "
             "heat run alternates between two fields, each in its own window (win is the "
             "window u lives in), and the frame on the border must stay 0.0.")


def check_mailbox(exchange: Callable, nx: int, ny: int, dims: Sequence[int], steps: int, *,
                  given: Callable | None = None, name: str | None = None,
                  timeout: float = 20) -> None:
    """Part C: the mailbox exchange, fixed; with `given`, first show the given one failing.

    Structure (``Put`` and ``Fence``, no send or receive), then :func:`onesided_harness`.
    """
    __tracebackhide__ = True
    if given is not None:
        print("The given exchange, with slow ranks:")
        show_exchange(given, nx, ny, dims=dims, blocks=False)
    name = _name(exchange, name)
    code = _code(exchange, name)
    grading.expect(bool(re.search(r"\.Put\s*\(", code) and re.search(r"\.Fence\s*\(", code)
                        and not re.search(_P2P, code)),
                   f"{name} should keep the Puts into the mailbox window and the Fences, "
                   "with no send or receive")
    where = f"{name} on a {nx} × {ny} grid, {dims[0]} × {dims[1]} process grid"
    outs = _run("exchange", None, exchange, nx, ny, dims, steps, True, timeout)
    _verdict(outs, where, nx, ny, dims, steps,
             hint="One exchange was right, so look at what changes between calls: the "
             "mailbox is made anew each call, and the frame on the border must stay 0.0.")


# ---------------------------------------------------------------------------------------
# trying code out (not graded)


def _print(outs: list[dict], nx: int, ny: int, dims: Sequence[int], blocks: bool) -> None:
    if blocks:
        for r, out in enumerate(outs):
            print(f"rank {r} (frame included):")
            print(np.array2string(out["probe"],
                                  formatter={"float_kind": lambda v: f"{v:4.0f}"}))
    problems = probe_problems([o["probe"] for o in outs], nx, ny, dims)
    problems += [p for o in outs for p in o["problems"]]
    if problems:
        print(f"{len(problems)} problem(s):\n  " + "\n  ".join(problems[:8]))
    else:
        print("Every ghost edge holds its neighbour's edge, and no window was left unfreed.")


def show_exchange(exchange: Callable, nx: int = 8, ny: int = 6, ranks: int | None = None,
                  dims: Sequence[int] | None = None, *, blocks: bool = True,
                  timeout: float = 10) -> None:
    """Not graded: one exchange ``exchange(cart, u)`` of the numbered grid, slow ranks on.

    Prints every rank's block (with `blocks`) and what is wrong; a failure (a deadlock,
    an exception) is printed, not raised. `ranks` and `dims` as in
    :func:`mpilab.grading.halo.show_exchange` (4 ranks, 2 × 2, by default).
    """
    if grading.not_while_grading():
        return None
    dims = grading_halo.grid_of(ranks, dims)
    try:
        outs = _run("exchange", None, exchange, nx, ny, dims, 0, True, timeout)
    except grading.CheckFailed as exc:
        print(f"{type(exc).__name__}: {exc}")
        return
    _print(outs, nx, ny, dims, blocks)


def show_shared(setup: Callable, exchange: Callable, nx: int = 8, ny: int = 6,
                ranks: int | None = None, dims: Sequence[int] | None = None, *,
                blocks: bool = True, timeout: float = 10) -> None:
    """Not graded: :func:`show_exchange` for ``setup(cart, rows, cols)`` + ``exchange(cart, win, u)``."""
    if grading.not_while_grading():
        return None
    dims = grading_halo.grid_of(ranks, dims)
    try:
        outs = _run("shared", setup, exchange, nx, ny, dims, 0, True, timeout)
    except grading.CheckFailed as exc:
        print(f"{type(exc).__name__}: {exc}")
        return
    _print(outs, nx, ny, dims, blocks)


def compare_heat(nx: int, ny: int, steps: int, exchange: Callable,
                 setup: Callable | None = None, ranks: int | None = None,
                 dims: Sequence[int] | None = None, *, timeout: float = 20) -> float | None:
    """Not graded: a heat run with the exchange (and `setup` for a shared window), vs serial.

    Prints the largest difference from :func:`mpilab.halo.serial_heat` and returns it
    (None, after printing why, when the run failed).
    """
    if grading.not_while_grading():
        return None
    dims = grading_halo.grid_of(ranks, dims)
    kind = "exchange" if setup is None else "shared"
    try:
        outs = _run(kind, setup, exchange, nx, ny, dims, steps, False, timeout)
    except grading.CheckFailed as exc:
        print(f"{type(exc).__name__}: {exc}")
        return None
    field = grading_halo.gathered([o["field"] for o in outs], nx, ny, dims)
    ref = halo.serial_heat(nx, ny, steps)
    diff = float(np.abs(field - ref).max())
    print(f"{nx} × {ny} grid, {steps} steps on {dims[0] * dims[1]} ranks: largest difference "
          f"from halo.serial_heat {diff:.3g} (the hottest point: {ref.max():.4g})")
    return diff


# ---------------------------------------------------------------------------------------
# Part D: a prediction, graded against an epoch measured just now

#: The Put + Fence epoch of 1 MiB measured on this machine may take this many times the
#: model: below 1 only noise; above it what the model leaves out (the Put's own start-up,
#: the closing Fence waiting for it to complete).
PREDICTION_TOLERANCE = (0.5, 2.5)
EPOCH_BYTES = 1 << 20


def epoch_times(comm, nbytes: int, iters: int = 20, reps: int = 7) -> dict:
    """On every rank of `comm`: an empty fence epoch (``Fence(); Fence()``) and an epoch
    in which rank 0 puts `nbytes` into rank 1's window (``Fence(); Put; Fence()``, every
    rank calling the Fences), over a window made once with ``MPI.Win.Create`` on a NumPy
    array, as in Part A; the fastest of `reps` repetitions of `iters` epochs, per epoch in
    µs (the slowest rank's).

    One Put, not one per rank: the model is one Put's, and the copies of several Puts at
    once would share the memory system (on one core, take turns)."""
    from mpi4py import MPI

    rank = comm.Get_rank()
    n = max(1, nbytes // 8)
    into, out = measured.doubles(n, 0.0), measured.doubles(n)
    win = MPI.Win.Create(into, disp_unit=into.itemsize, comm=comm)
    try:
        def empty():
            win.Fence()
            win.Fence()

        def epoch():
            win.Fence()
            if rank == 0:
                win.Put(out, 1)
            win.Fence()

        return {"empty_epoch_us": measured._best_us(comm, empty, iters, reps),
                "epoch_us": measured._best_us(comm, epoch, iters, reps), "nbytes": 8 * n}
    finally:
        win.Free()


def reference_epoch_us(n_bytes: float, empty_epoch_us: float, beta_MBps: float) -> float:
    """The model: the synchronisation (an empty epoch, both Fences) plus the Put's bytes
    at the bandwidth of a message, ``empty + n / β`` (µs; 1 MB/s is one byte per µs)."""
    return empty_epoch_us + n_bytes / beta_MBps


def epoch_now(cluster_ranks: int = 4) -> dict:
    """α and β (a ping-pong), an empty epoch and a Put + Fence epoch of 1 MiB, measured
    (once per grading session) on one rank per core
    (:func:`mpilab.grading.measured.measure`)."""
    return measured.with_alpha_beta("epoch", epoch_times, EPOCH_BYTES, nbytes=EPOCH_BYTES,
                                    cluster_ranks=cluster_ranks)


def _epoch_hint(got, n: float, e: float, b: float) -> str:
    if not grading._is_num(got) or isinstance(got, (bool, complex)):
        return "Return a number of µs."
    guesses = [
        (n / b, "An epoch costs its synchronisation even when it carries nothing: add the "
                "empty epoch's time."),
        (2 * e + n / b, "The empty epoch is already both Fences (Fence(); Fence()): count "
                        "it once."),
        (e + 8 * n / b, "n_bytes is already in bytes: n / β."),
        (e + n / b * 1e6, "1 MB/s is one byte per µs: n / β is already in µs."),
        (e + n / b / 1e6, "1 MB/s is one byte per µs: n / β is already in µs."),
        (e, "The Put's bytes take time too: n / β."),
        (e * n / 8, "The empty epoch is a fixed cost, paid once per epoch, not per double."),
    ]
    for value, text in guesses:
        if math.isclose(got, value, rel_tol=1e-9):
            return text
    return ("An epoch with one Put: the empty epoch's time (both Fences) plus n / β (µs, "
            "with n in bytes and β in MB/s).")


def _epoch_lines(epoch_us: Callable, m: dict, _cluster_ranks: int) -> None:
    e, b = m["empty_epoch_us"], m["beta_MBps"]
    print(f"measured on {m['ranks']} ranks ({m['cores']} cores): an empty epoch {e:.2f} µs; "
          f"ping-pong: α = {m['alpha_us']:.2f} µs, β = {b:,.0f} MB/s")
    print(f"a Put + Fence epoch of 1 MiB: measured {m['epoch_us']:8.1f} µs, predicted "
          + shown(epoch_us, m["nbytes"], e, b, name="epoch_us"))


#: Part D: ``epoch_us(n_bytes, empty_epoch_us, beta_MBps)``, against an epoch of 1 MiB.
EPOCH = Prediction(
    name="epoch_us", reference=reference_epoch_us, hint=_epoch_hint, now=epoch_now,
    tolerance=PREDICTION_TOLERANCE, shows=_epoch_lines,
    parts=lambda m: [Part(f"a Put + Fence epoch of 1 MiB on {m['ranks']} ranks (rank 0 puts "
                          "into rank 1)", (m["nbytes"], m["empty_epoch_us"], m["beta_MBps"]),
                          m["epoch_us"])],
    model=lambda m: (f"an empty epoch of {m['empty_epoch_us']:.3g} µs and β = "
                     f"{m['beta_MBps']:,.0f} MB/s, measured just now on {where(m)}"))


def check_epoch_us(epoch_us: Callable, cases, *, cluster_ranks: int = 4) -> dict:
    """``epoch_us(n_bytes, empty_epoch_us, beta_MBps)`` equals the model on `cases`
    ((n, empty, β) tuples), and its prediction holds against a Put + Fence epoch of 1 MiB
    measured just now. Returns the measurement with ``predicted_us`` and ``ratio``."""
    __tracebackhide__ = True
    return EPOCH.check(epoch_us, cases, cluster_ranks=cluster_ranks)


def show_epoch(epoch_us: Callable, cluster_ranks: int = 4) -> None:
    """Not graded: the empty epoch, β and a Put + Fence epoch of 1 MiB measured now (the
    first call measures them, a few seconds), beside ``epoch_us``'s prediction."""
    return EPOCH.show(epoch_us, cluster_ranks)
