"""Lab 02's graded checks (the halo exchange), on top of :mod:`mpilab.grading`.

The lab's test cells call these functions; the checks, their harness and their messages
live here, so grading policy changes in one place and students read short test cells::

    from mpilab.grading import halo as grading_halo
    grading_halo.check_exchange(exchange_sendrecv, 16, 12, (2, 2), 10)

Every check runs the student's function through :func:`halo_harness` on the notebook's
cluster (:func:`mpilab.grading.run_on_ranks`, with a timeout) in two ways:

1. **once on a numbered grid**: grid point ``(y, x)`` holds ``y * nx + x + 1``, so after
   one exchange each ghost edge must hold the numbers of one neighbour's edge, and
   :func:`ghost_problems` names what a wrong edge holds instead ("rank 1: the west ghost
   column holds 0.0s (nothing arrived?), expected rank 0's east edge (its west
   neighbour)"); a step is compared point by point with :func:`mpilab.halo.heat_step`
   (:func:`step_problems`);
2. **a heat run**: `steps` steps of the heat equation with the student's code, gathered
   into one field and compared with :func:`mpilab.halo.serial_heat`.

The pure-Python parts (:func:`ghost_problems`, :func:`step_problems`, :func:`gathered`,
...) take plain arrays, so they can be tested without MPI; labs 03 and 04 share them, so
they live in :mod:`mpilab.grading.ghosts` (re-exported here). Part E's prediction is a
:class:`~mpilab.grading.prediction.Prediction` (:data:`EXCHANGE`), graded against the
course's exchange measured now: :mod:`mpilab.grading.halo_model` (re-exported here).

Where it runs
-------------
The harnesses are module-level functions: the ranks import them from disk. The checks
compare what came back with references computed in the caller. At autograde time the
caller is the grader's kernel, which never runs student code, and the ranks are sandboxed
(:mod:`mpilab.grading`, "Where the verdicts are decided"), so nothing a student's cell
patches in its own kernel reaches a verdict.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from collections.abc import Callable, Sequence

import numpy as np

from mpilab import grading, halo
from mpilab.grading.ghosts import (
    SIDES,
    expect_heat,
    gathered,
    ghost,
    ghost_problems,
    grid_of,
    heat_difference,
    numbered,
    same,
    short,
    step_problems,
    tried,
    what_it_holds,
    where_on,
)
from mpilab.grading.halo_model import (
    EXCHANGE,
    PREDICTION_TOLERANCE,
    ROW_DOUBLES,
    check_exchange_us,
    exchange_now,
    exchange_times,
    reference_exchange_us,
    show_exchange_us,
)

__all__ = ["SIDES", "halo_harness", "numbered", "same", "short", "ghost", "what_it_holds",
           "ghost_problems", "step_problems", "gathered", "code_of", "grid_of",
           "expect_heat", "tried", "heat_difference", "check_exchange", "check_step",
           "check_posts_and_waits", "check_nonblocking", "check_overlap_order",
           "check_overlap", "check_blocking_calls", "show_deadlock", "check_fixed",
           "show_exchange", "compare_heat", "exchange_times", "reference_exchange_us",
           "exchange_now", "check_exchange_us", "show_exchange_us", "PREDICTION_TOLERANCE",
           "EXCHANGE", "ROW_DOUBLES"]

_KINDS = ("exchange", "step")
_POST = r"\bI(s?send|recv)\s*\("
_WAIT = r"\b[Ww]ait(all|any|some)?\s*\("
#: a collective call: it moves data of every rank, where a halo moves only edges
_COLLECTIVE = (r"\.([aA]llgatherv?|[gG]atherv?|[bB]cast|[sS]catterv?|[aA]lltoall[vw]?"
               r"|[aA]llreduce|Reduce(_scatter\w*)?)\s*\(")


# ---------------------------------------------------------------------------------------
# engine side


def halo_harness(comm, func: Callable, kind: str, nx: int, ny: int, dims: Sequence[int],
                 steps: int) -> dict:
    """The checks' own run, on every rank: one call on the numbered grid, then a heat run.

    Runs on the engines (through :func:`mpilab.grading.run_on_ranks`), which import it
    from this module on disk.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        ``dims[0] * dims[1]`` ranks.
    func : callable
        The student's function. With `kind` ``"exchange"``: ``func(cart, u)`` fills the
        ghost frame of ``u`` (the harness does the stencil, :func:`mpilab.halo.heat_step`).
        With `kind` ``"step"``: ``func(cart, old, new)`` does a whole step into ``new``.
        What it returns is ignored.
    kind : {"exchange", "step"}
    nx, ny : int
        Grid points along x (columns) and y (rows).
    dims : (int, int)
        The process grid ``(py, px)``; rank ``r`` sits at ``(r // px, r % px)``.
    steps : int
        Heat steps of the second run (0: only the numbered-grid call).

    Returns
    -------
    dict
        ``{"probe": ..., "field": ...}``: after one call on this rank's block of the
        numbered grid, ``u`` (kind "exchange") or ``new`` (kind "step") with its frame;
        and this rank's block (no frame) after `steps` heat steps. Plain arrays only.
    """
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
    py, px = (int(d) for d in dims)
    cart = comm.Create_cart([py, px], periods=[False, False], reorder=False)
    try:
        cy, cx = cart.Get_coords(cart.Get_rank())
        y0, rows = halo.split(ny, py)[cy]
        x0, cols = halo.split(nx, px)[cx]
        old, new = np.zeros((rows + 2, cols + 2)), np.zeros((rows + 2, cols + 2))
        old[1:-1, 1:-1] = numbered(nx, ny)[y0:y0 + rows, x0:x0 + cols]
        if kind == "exchange":
            func(cart, old)
            probe = old.copy()
        else:
            func(cart, old, new)
            probe = new.copy()
        old, new = np.zeros((rows + 2, cols + 2)), np.zeros((rows + 2, cols + 2))
        mine = [(y - y0 + 1, x - x0 + 1) for x, y in halo.heat_sources(nx, ny)
                if y0 <= y < y0 + rows and x0 <= x < x0 + cols]
        for _ in range(steps):
            if kind == "exchange":
                func(cart, old)
                halo.heat_step(old, new)
            else:
                func(cart, old, new)
            for y, x in mine:
                new[y, x] += 1.0
            old, new = new, old
        return {"probe": probe, "field": old[1:-1, 1:-1].copy()}
    finally:
        cart.Free()


def code_of(func: Callable, name: str) -> str:
    """The source of `func` without comments (what the structure checks read).

    Fails the check, saying why, when the source cannot be found.

    Parameters
    ----------
    func : callable
        The student's function.
    name : str
        What the message calls it.

    Returns
    -------
    str
        Its source (:func:`mpilab.grading.source_of`) with every ``#`` comment removed.

    Raises
    ------
    mpilab.grading.CheckFailed
        When the source cannot be found.
    """
    src = grading.source_of(func)
    grading.expect(bool(src), f"the check reads the code of {name}, but cannot find it: "
                   f"define {name} with def in its cell and run that cell")
    return re.sub(r"#[^\n]*", "", src)


def _name(func: Callable, name: str | None) -> str:
    return name or getattr(func, "__name__", None) or "the function"


def _run(func: Callable, kind: str, nx: int, ny: int, dims: Sequence[int], steps: int,
         timeout: float) -> list[dict]:
    py, px = dims
    return grading.run_on_ranks(halo_harness, func, kind, nx, ny, (py, px), steps,
                                ranks=py * px, timeout=timeout)


def _checked(func: Callable, kind: str, name: str | None, nx: int, ny: int,
             dims: Sequence[int], steps: int, timeout: float, problems_of: Callable,
             said: Callable[[str, list[str]], str], hint: str) -> None:
    """A graded function's runs (:func:`halo_harness`): the numbered grid's problems
    (`problems_of`, in the words of ``said(where, problems)``), then the heat run."""
    __tracebackhide__ = True
    where = where_on(_name(func, name), nx, ny, dims)
    whole = re.search(_COLLECTIVE, re.sub(r"#[^\n]*", "", grading.source_of(func)))
    grading.expect(not whole, f"{_name(func, name)} calls {whole and whole.group(1)}, a "
                   "collective of every rank: a halo exchange sends each neighbour its edge "
                   "and nothing more (gathering the field to cut the ghost cells out of it "
                   "moves the whole grid every step). Refused: exchange the edges with the "
                   "neighbours (Sendrecv, or Isend/Irecv).")
    outs = _run(func, kind, nx, ny, dims, steps, timeout)
    problems = problems_of([o["probe"] for o in outs], nx, ny, dims)
    grading.expect(not problems, said(where, problems))
    expect_heat(outs, where, nx, ny, dims, steps, hint=hint)


# ---------------------------------------------------------------------------------------
# the graded checks


def check_exchange(exchange: Callable, nx: int, ny: int, dims: Sequence[int], steps: int,
                   *, name: str | None = None, timeout: float = 10) -> None:
    """One exchange on the numbered grid, then `steps` heat steps; fail naming what is wrong.

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
        Seconds before the check fails as stuck (deadlock or endless loop).

    Raises
    ------
    mpilab.grading.CheckFailed
        With a message naming the rank, the ghost edge and the neighbour.
    """
    __tracebackhide__ = True
    _checked(exchange, "exchange", name, nx, ny, dims, steps, timeout, ghost_problems,
             lambda where, problems: (
                 f"{where}: after one exchange {len(problems)} edge(s) are wrong:\n  "
                 + "\n  ".join(problems[:6]) + ("\n  ..." if len(problems) > 6 else "")
                 + "\nEvery point holds its own number (1, 2, ... row by row over the grid), "
                 "so a ghost edge must hold the numbers of the neighbour's edge."),
             hint="One exchange was right, so look at the next ones: every step calls the "
             "exchange again on an array that held another step, and the frame on the "
             "border must stay 0.0.")


def check_step(step: Callable, nx: int, ny: int, dims: Sequence[int], steps: int, *,
               name: str | None = None, timeout: float = 10) -> None:
    """One step from the numbered grid, then `steps` heat steps; fail naming what is wrong.

    Parameters
    ----------
    step : callable
        ``step(cart, old, new)``, run on every rank: one heat step from ``old`` (whose
        frame it fills) into ``new[1:-1, 1:-1]``.
    nx, ny, dims, steps, name, timeout
        As for :func:`check_exchange`.

    Raises
    ------
    mpilab.grading.CheckFailed
        With a message naming the rank, the part of the block (interior, which side of
        the boundary ring) and the first wrong point.
    """
    __tracebackhide__ = True
    _checked(step, "step", name, nx, ny, dims, steps, timeout, step_problems,
             lambda where, problems: (
                 f"{where}: one step from the numbered grid is wrong on {len(problems)} "
                 "rank(s):\n  " + "\n  ".join(problems[:6])
                 + "\nThe interior (rows 2..rows-1, columns 2..cols-1 of new) needs no ghost "
                 "cell; the boundary ring reads old's frame, so it is updated after "
                 "Waitall, once the neighbours' edges are there (columns copied in)."),
             hint="One step was right, so look at what changes between steps: old and new "
             "swap, and the frame on the border must stay 0.0.")


def check_posts_and_waits(exchange: Callable, *, name: str | None = None) -> None:
    """Part B's structure: the code posts Irecv and Isend and completes them with a Wait.

    Parameters
    ----------
    exchange : callable
        The student's ``exchange(cart, u)``; only its source is read.
    name : str, optional
        What messages call it; its ``__name__`` by default.

    Raises
    ------
    mpilab.grading.CheckFailed
        When its code (comments aside) lacks an ``Irecv``, an ``Isend``/``Issend`` or a
        ``Wait``/``Waitall``/``Waitany``/``Waitsome`` call.
    """
    __tracebackhide__ = True
    name = _name(exchange, name)
    code = code_of(exchange, name)
    grading.expect(bool(re.search(r"\bIrecv\s*\(", code) and re.search(r"\bIs?send\s*\(", code)
                        and re.search(_WAIT, code)),
                   f"{name} should post cart.Irecv and cart.Isend and complete them "
                   "with MPI.Request.Waitall (Part A was the blocking Sendrecv)")


def check_nonblocking(exchange: Callable, nx: int, ny: int, dims: Sequence[int], steps: int,
                      *, name: str | None = None, timeout: float = 10) -> None:
    """Part B: :func:`check_posts_and_waits`, then :func:`check_exchange`.

    Parameters
    ----------
    exchange : callable
        The student's ``exchange(cart, u)``.
    nx, ny, dims, steps, name, timeout
        As for :func:`check_exchange` (`timeout` in seconds, default 10).
    """
    __tracebackhide__ = True
    check_posts_and_waits(exchange, name=name)
    check_exchange(exchange, nx, ny, dims, steps, name=name, timeout=timeout)


def check_overlap_order(step: Callable, *, name: str | None = None) -> None:
    """Part C's structure: posts, then computing on ``new``, then Waitall.

    ``new`` is the step's third parameter, whatever the student calls it.

    Parameters
    ----------
    step : callable
        The student's ``step(cart, old, new)``; only its source and signature are read.
    name : str, optional
        What messages call it; its ``__name__`` by default.

    Raises
    ------
    mpilab.grading.CheckFailed
        When it posts no ``Irecv``/``Isend`` or has no ``Wait``, or no line between the
        first post and the first wait uses ``new``.
    """
    __tracebackhide__ = True
    name = _name(step, name)
    lines = [ln for ln in code_of(step, name).splitlines() if ln.strip()]
    posts = [i for i, ln in enumerate(lines) if re.search(_POST, ln)]
    waits = [i for i, ln in enumerate(lines) if re.search(_WAIT, ln)]
    grading.expect(bool(posts and waits), f"{name} should post cart.Irecv/cart.Isend itself "
                   "and complete them with MPI.Request.Waitall")
    try:
        params = list(inspect.signature(step).parameters)
    except (TypeError, ValueError):
        params = []
    new = re.escape(params[2]) if len(params) > 2 else "new"
    between = lines[posts[0] + 1:waits[0]]
    grading.expect(any(re.search(rf"\b{new}\b", ln) and not re.search(_POST, ln)
                       for ln in between),
                   f"{name} should update the interior of new between posting the "
                   "Irecv/Isend and Waitall: that is the overlap (and the ring after Waitall)")


def check_overlap(step: Callable, nx: int, ny: int, dims: Sequence[int], steps: int, *,
                  name: str | None = None, timeout: float = 10) -> None:
    """Part C: :func:`check_overlap_order`, then :func:`check_step`.

    Parameters
    ----------
    step, nx, ny, dims, steps, name, timeout
        As for :func:`check_step`.
    """
    __tracebackhide__ = True
    check_overlap_order(step, name=name)
    check_step(step, nx, ny, dims, steps, name=name, timeout=timeout)


def check_blocking_calls(exchange: Callable, *, name: str | None = None) -> None:
    """Part D's structure: blocking Send and Recv, no Sendrecv, Isend or Irecv.

    Parameters
    ----------
    exchange : callable
        The student's fixed ``exchange(cart, u)``; only its source is read.
    name : str, optional
        What messages call it; its ``__name__`` by default.

    Raises
    ------
    mpilab.grading.CheckFailed
        When its code lacks a ``Send`` (``Ssend``, ``send``) or a ``Recv``, or calls
        ``Sendrecv``, ``Isend``, ``Issend`` or ``Irecv``.
    """
    __tracebackhide__ = True
    name = _name(exchange, name)
    code = code_of(exchange, name)
    grading.expect(bool(re.search(r"\.S?[sS]end\s*\(", code) and re.search(r"\.Recv\s*\(", code)
                        and not re.search(r"\b(Sendrecv\w*|Isend|Issend|Irecv)\b", code)),
                   f"{name} should keep the blocking cart.Send and cart.Recv of "
                   "exchange_naive and fix their order (Sendrecv and Isend/Irecv were Parts A "
                   "and B)")


def show_deadlock(exchange: Callable, nx: int, ny: int, dims: Sequence[int], *,
                  steps: int = 2, timeout: float = 3) -> bool:
    """Not a check: run `exchange` where it should deadlock and print where the ranks stuck.

    The timeout is remembered (:mod:`mpilab.grading`), so an unchanged copy of `exchange`
    handed in later is not run again.

    Parameters
    ----------
    exchange : callable
        The naive ``exchange(cart, u)`` (blocking sends first).
    nx, ny : int
        The grid; large edges make a deadlock certain (no eager send).
    dims : (int, int)
        The process grid ``(py, px)``.
    steps : int, optional
        Heat steps after the first exchange (default 2).
    timeout : float, optional
        Seconds to wait before calling it a deadlock (default 3).

    Returns
    -------
    bool
        True when it timed out (and where the ranks stuck was printed); False when it
        finished, the edges having been sent eagerly.
    """
    name = _name(exchange, None)
    try:
        _run(exchange, "exchange", nx, ny, dims, steps, timeout)
    except grading.TimedOut as exc:
        print(f"As expected, {name} deadlocks on the {nx} × {ny} grid:\n"
              + textwrap.indent(str(exc), "  | ") + "\n")
        return True
    edge = 8 * max(max(rows, cols) for _, rows, _, cols in halo.blocks(nx, ny, dims))
    print(f"({name} did not deadlock here: this MPI sends {edge / 1000:.3g} KB edges "
          "eagerly.)")
    return False


def check_fixed(exchange: Callable, nx: int, ny: int, dims: Sequence[int], steps: int, *,
                naive: Callable | None = None, name: str | None = None,
                timeout: float = 10) -> None:
    """Part D: blocking calls only (:func:`check_blocking_calls`), right at any edge size.

    With `naive`, first shows it deadlocking on the same grid (:func:`show_deadlock`),
    then runs :func:`check_exchange` on `exchange`.

    Parameters
    ----------
    exchange : callable
        The student's fixed ``exchange(cart, u)``.
    nx, ny, dims, steps
        As for :func:`check_exchange`.
    naive : callable, optional
        The naive exchange, shown deadlocking first (not graded).
    name : str, optional
        What messages call `exchange`; its ``__name__`` by default.
    timeout : float, optional
        Seconds before the check fails as stuck (default 10).
    """
    __tracebackhide__ = True
    if naive is not None:
        show_deadlock(naive, nx, ny, dims)
    check_blocking_calls(exchange, name=name)
    check_exchange(exchange, nx, ny, dims, steps, name=name, timeout=timeout)


# ---------------------------------------------------------------------------------------
# trying code out (not graded): the same harness, printed


def show_exchange(exchange: Callable, nx: int = 8, ny: int = 6, ranks: int | None = None,
                  dims: Sequence[int] | None = None, *, timeout: float = 5) -> None:
    """Not graded: run `exchange` once on the numbered grid and print every rank's block.

    The blocks are printed with their frame. On `ranks` ranks (4 unless `dims` says),
    `dims` defaults to what ``MPI.Compute_dims(ranks, 2)`` gives (:func:`mpilab.halo.process_grid`).
    A failure (a deadlock, an exception) is printed, not raised.

    Parameters
    ----------
    exchange : callable
        The student's ``exchange(cart, u)``.
    nx, ny : int, optional
        The grid (default 8 × 6).
    ranks : int, optional
        Number of ranks; 4, or what `dims` holds, by default.
    dims : (int, int), optional
        The process grid ``(py, px)``.
    timeout : float, optional
        Seconds before the run counts as stuck (default 5).
    """
    if grading.not_while_grading():
        return None
    dims = grid_of(ranks, dims)
    outs = tried(lambda: _run(exchange, "exchange", nx, ny, dims, 0, timeout))
    for r, out in enumerate(outs or ()):
        print(f"rank {r} (frame included):")
        print(np.array2string(out["probe"], formatter={"float_kind": lambda v: f"{v:4.0f}"}))


def compare_heat(nx: int, ny: int, steps: int, exchange: Callable | None = None,
                 step: Callable | None = None, ranks: int | None = None,
                 dims: Sequence[int] | None = None, *, timeout: float = 5) -> float | None:
    """Not graded: run the heat on the ranks, gather it and compare it with serial_heat.

    Give either ``exchange(cart, u)`` (the stencil is :func:`mpilab.halo.heat_step`) or
    ``step(cart, old, new)``; `ranks` and `dims` as for :func:`show_exchange`. Prints the
    largest difference and returns it (None, after printing why, when the run failed).

    Parameters
    ----------
    nx, ny : int
        The grid.
    steps : int
        Heat steps.
    exchange : callable, optional
        The student's ``exchange(cart, u)``.
    step : callable, optional
        The student's ``step(cart, old, new)``; give this or `exchange`, not both.
    ranks, dims, timeout
        As for :func:`show_exchange`.

    Returns
    -------
    float or None
        The largest absolute difference from :func:`mpilab.halo.serial_heat`; None when
        the run failed or while grading.

    Raises
    ------
    ValueError
        Unless exactly one of `exchange` and `step` is given.
    """
    if grading.not_while_grading():
        return None
    if (exchange is None) == (step is None):
        raise ValueError("give either exchange= or step=")
    dims = grid_of(ranks, dims)
    kind, func = ("exchange", exchange) if step is None else ("step", step)
    outs = tried(lambda: _run(func, kind, nx, ny, dims, steps, timeout))
    return None if outs is None else heat_difference(outs, nx, ny, dims, steps)
