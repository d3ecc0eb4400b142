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

The harness runs on the ranks from :mod:`mpilab.grading.onesided_harness` (re-exported
here with :data:`SLOW_SECONDS`, :data:`SCRIBBLE`, :func:`slow_rank`). Both runs count the
windows the student's code creates: while it runs,
``mpi4py.MPI.Win`` is a subclass whose constructors (``Create``, ``Allocate``,
``Allocate_shared``, ``Create_dynamic``) record each window, so a window an exchange
leaves unfreed is named ("rank 0: 10 calls of exchange_put left 10 windows unfreed
(made by MPI.Win.Create)") and then freed by the harness. mpi4py never frees a window
when its Python object goes away, so an unfreed window per step is a real leak. Code
that reaches the class by another name than ``MPI.Win`` (``from mpi4py.MPI import Win``
at the top of a cell) is not watched: the count is a help, not a proof.

Part D, a prediction
--------------------
:func:`check_epoch_us` (:data:`EPOCH`, a :class:`~mpilab.grading.prediction.Prediction`)
grades ``epoch_us(n_bytes, empty_epoch_us, beta_MBps)``, the model of a fence epoch
carrying one Put (the empty epoch plus ``n / β``), first against
:func:`reference_epoch_us` on made-up numbers, then against an epoch of 1 MiB measured
just now (:func:`epoch_times`, on the ranks through :mod:`mpilab.grading.measured`):
:mod:`mpilab.grading.onesided_model`, re-exported here.

Where it runs
-------------
As in :mod:`mpilab.grading.halo`: the harness is a module-level function the ranks import
from disk, references are computed in the caller, and at autograde time the caller is
the grader's kernel and the ranks are sandboxed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

from mpilab import grading
from mpilab.grading import ghosts
from mpilab.grading import halo as grading_halo
from mpilab.grading.onesided_harness import SCRIBBLE, SLOW_SECONDS, onesided_harness, slow_rank
from mpilab.grading.onesided_model import (
    EPOCH,
    EPOCH_BYTES,
    PREDICTION_TOLERANCE,
    check_epoch_us,
    epoch_now,
    epoch_times,
    reference_epoch_us,
    show_epoch,
)

__all__ = ["probe_problems", "check_put", "check_shared", "check_mailbox", "show_exchange",
           "show_shared", "compare_heat",
           # re-exported: the ranks' harness (onesided_harness), Part D (onesided_model)
           "SLOW_SECONDS", "SCRIBBLE", "onesided_harness", "slow_rank", "epoch_times",
           "reference_epoch_us", "epoch_now", "check_epoch_us", "show_epoch",
           "PREDICTION_TOLERANCE", "EPOCH", "EPOCH_BYTES"]

_P2P = r"\b(I?[sS]end|Ssend|Rsend|I?[rR]ecv|[sS]endrecv\w*)\s*\("


# ---------------------------------------------------------------------------------------
# client side: what went wrong, in words


def probe_problems(probes: Sequence[np.ndarray], nx: int, ny: int, dims: Sequence[int],
                   slow: bool = True) -> list[str]:
    """The wrong edges after the probe, each line naming rank, edge and neighbour.

    :func:`mpilab.grading.halo.ghost_problems`, with a word on timing where the edge a
    rank holds points to an epoch that closed too early or opened too late.

    Parameters
    ----------
    probes : sequence of numpy.ndarray
        Rank by rank, the framed block ``u`` after the probe's exchange.
    nx, ny : int
        The grid.
    dims : (int, int)
        The process grid ``(py, px)``.
    slow : bool, optional
        Whether the probe ran with slow ranks (default True); without them the lines
        are :func:`~mpilab.grading.ghosts.ghost_problems`'s, unchanged.

    Returns
    -------
    list of str
        One line per wrong edge (or changed block); empty when the exchange was right.
    """
    problems = ghosts.ghost_problems(probes, nx, ny, dims)
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


def _checked(kind: str, setup: Callable | None, exchange: Callable, label: str, nx: int,
             ny: int, dims: Sequence[int], steps: int, timeout: float, hint: str,
             refuse: tuple[str, ...] = ("cart.",), why: str = "") -> None:
    """A graded exchange's runs (:func:`onesided_harness`, slow ranks on) and verdict."""
    __tracebackhide__ = True
    outs = _run(kind, setup, exchange, nx, ny, dims, steps, True, timeout)
    _verdict(outs, ghosts.where_on(label, nx, ny, dims), nx, ny, dims, steps, hint=hint,
             refuse=refuse, why=why or ONE_SIDED)


#: Why a one-sided exchange may not move data with the communicator's calls.
ONE_SIDED = ("a one-sided exchange moves the edges with Put between fences (or through the "
             "shared window): no send or receive of its own (that was lab 02)")


def _verdict(outs: list[dict], where: str, nx: int, ny: int, dims: Sequence[int],
             steps: int, hint: str, refuse: tuple[str, ...] = ("cart.",),
             why: str = ONE_SIDED) -> None:
    __tracebackhide__ = True
    problems = probe_problems([o["probe"] for o in outs], nx, ny, dims)
    grading.expect(not problems, f"{where}: after one exchange (slow ranks in a checkerboard, "
                   f"see the lab) {len(problems)} edge(s) are wrong:\n  "
                   + "\n  ".join(problems[:6]) + ("\n  ..." if len(problems) > 6 else "")
                   + "\nEvery point holds its own number (1, 2, ... row by row over the grid), "
                   "so a ghost edge must hold the numbers of the neighbour's edge.")
    made = sorted({c for o in outs for c in o.get("calls", []) if c.startswith(refuse)})
    grading.expect(not made, f"{where}: the exchange's own code called {', '.join(made)}: "
                   f"{why}. Refused, however right the edges came out.")
    leaks = [p for o in outs for p in o["problems"]]
    grading.expect(not leaks, f"{where}: windows left unfreed:\n  " + "\n  ".join(leaks[:4]))
    ghosts.expect_heat(outs, where, nx, ny, dims, steps, hint=hint)


def _code(func: Callable, name: str) -> str:
    return grading_halo.code_of(func, name)


# ---------------------------------------------------------------------------------------
# the graded checks


def check_put(exchange: Callable, nx: int, ny: int, dims: Sequence[int], steps: int, *,
              name: str | None = None, timeout: float = 20) -> None:
    """Part A: ``exchange(cart, u)`` with a window over ``u``, Put and Fence; fail saying why.

    Structure first (``MPI.Win.Create``, ``Put``, ``Fence``, no send or receive), then the
    probe with slow ranks and the heat run of :func:`onesided_harness`.

    The message of a failure is as for :func:`mpilab.grading.halo.check_exchange` (the
    heat run, with a window per step), or names a window left unfreed.

    Parameters
    ----------
    exchange : callable
        The student's ``exchange(cart, u)``, run on every rank.
    nx, ny, dims, steps
        The grid, the process grid ``(py, px)`` (the check runs on ``py * px`` ranks)
        and the heat steps, as for :func:`mpilab.grading.halo.check_exchange`.
    name : str, optional
        What messages call `exchange`; its ``__name__`` by default.
    timeout : float, optional
        Seconds before the check fails as stuck (default 20: the slow ranks pause).

    Raises
    ------
    mpilab.grading.CheckFailed
        Naming the missing call, or the rank, the ghost edge and the neighbour.
    """
    __tracebackhide__ = True
    name = _name(exchange, name)
    code = _code(exchange, name)
    grading.expect(bool(re.search(r"\bWin\.Create\s*\(", code) and re.search(r"\.Put\s*\(", code)
                        and re.search(r"\.Fence\s*\(", code) and not re.search(_P2P, code)),
                   f"{name} should make a window over u (MPI.Win.Create), put the edges "
                   "into the neighbours' ghost cells (win.Put) between two win.Fence(), "
                   "with no send or receive (that was lab 02)")
    _checked("exchange", None, exchange, name, nx, ny, dims, steps, timeout,
             hint="One exchange was right, so look at what changes between calls: every "
             "step makes a new window over the array it is given, and the frame on the "
             "border must stay 0.0.")


def check_shared(setup: Callable, exchange: Callable, nx: int, ny: int, dims: Sequence[int],
                 steps: int, *, timeout: float = 20) -> None:
    """Part B: ``setup(cart, rows, cols) -> (win, u)`` and ``exchange(cart, win, u)``.

    Structure first (``Split_type`` and ``Allocate_shared`` in `setup`, ``Shared_query``
    in `exchange`, no Put, Get, send or receive), then the probe with slow ranks and the
    heat run of :func:`onesided_harness`, on fields that live in the students' windows.

    Parameters
    ----------
    setup : callable
        The student's ``setup(cart, rows, cols) -> (win, u)``: a shared-memory window and
        the rank's framed block (rows + 2 by cols + 2, float64) inside it.
    exchange : callable
        The student's ``exchange(cart, win, u)``, run on every rank.
    nx, ny, dims, steps
        As for :func:`check_put`.
    timeout : float, optional
        Seconds before the check fails as stuck (default 20).

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
    _checked("shared", setup, exchange, f"{sname} + {name}", nx, ny, dims, steps, timeout,
             hint="One exchange was right, so look at what changes between calls: the "
             "heat run alternates between two fields, each in its own window (win is the "
             "window u lives in), and the frame on the border must stay 0.0.")


def check_mailbox(exchange: Callable, nx: int, ny: int, dims: Sequence[int], steps: int, *,
                  given: Callable | None = None, name: str | None = None,
                  timeout: float = 20) -> None:
    """Part C: the mailbox exchange, fixed; with `given`, first show the given one failing.

    Structure (``Put`` and ``Fence``, no send or receive), then :func:`onesided_harness`.

    Parameters
    ----------
    exchange : callable
        The student's fixed ``exchange(cart, u)``, run on every rank.
    nx, ny, dims, steps
        As for :func:`check_put`.
    given : callable, optional
        The lab's given (broken) exchange, shown first with slow ranks (not graded).
    name : str, optional
        What messages call `exchange`; its ``__name__`` by default.
    timeout : float, optional
        Seconds before the check fails as stuck (default 20).

    Raises
    ------
    mpilab.grading.CheckFailed
        Naming the missing call, a window left unfreed, or the rank, the ghost edge and
        the neighbour.
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
    _checked("exchange", None, exchange, name, nx, ny, dims, steps, timeout,
             hint="One exchange was right, so look at what changes between calls: the "
             "mailbox is made anew each call, and the frame on the border must stay 0.0.")


# ---------------------------------------------------------------------------------------
# trying code out (not graded)


def _show(kind: str, setup: Callable | None, exchange: Callable, nx: int, ny: int,
          ranks: int | None, dims: Sequence[int] | None, blocks: bool, timeout: float) -> None:
    if grading.not_while_grading():
        return None
    dims = ghosts.grid_of(ranks, dims)
    outs = ghosts.tried(lambda: _run(kind, setup, exchange, nx, ny, dims, 0, True, timeout))
    if outs is not None:
        _print(outs, nx, ny, dims, blocks)


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

    Parameters
    ----------
    exchange : callable
        The student's ``exchange(cart, u)``.
    nx, ny, ranks, dims
        The grid (8 × 6), the rank count and the process grid ``(py, px)``, as for
        :func:`mpilab.grading.halo.show_exchange`.
    blocks : bool, optional
        Print every rank's block, frame included (default True); the problems are
        printed either way.
    timeout : float, optional
        Seconds before the run counts as stuck (default 10).

    Returns
    -------
    None
        It prints; nothing while grading.
    """
    return _show("exchange", None, exchange, nx, ny, ranks, dims, blocks, timeout)


def show_shared(setup: Callable, exchange: Callable, nx: int = 8, ny: int = 6,
                ranks: int | None = None, dims: Sequence[int] | None = None, *,
                blocks: bool = True, timeout: float = 10) -> None:
    """Not graded: :func:`show_exchange` for ``setup(cart, rows, cols)`` and
    ``exchange(cart, win, u)``.

    Parameters
    ----------
    setup : callable
        The student's ``setup(cart, rows, cols) -> (win, u)``.
    exchange : callable
        The student's ``exchange(cart, win, u)``.
    nx, ny, ranks, dims, blocks, timeout
        As for :func:`show_exchange`.

    Returns
    -------
    None
        It prints; nothing while grading.
    """
    return _show("shared", setup, exchange, nx, ny, ranks, dims, blocks, timeout)


def compare_heat(nx: int, ny: int, steps: int, exchange: Callable,
                 setup: Callable | None = None, ranks: int | None = None,
                 dims: Sequence[int] | None = None, *, timeout: float = 20) -> float | None:
    """Not graded: a heat run with the exchange (and `setup` for a shared window), vs serial.

    Prints the largest difference from :func:`mpilab.halo.serial_heat` and returns it
    (None, after printing why, when the run failed). No slow ranks.

    Parameters
    ----------
    nx, ny, steps
        The grid and the heat steps.
    exchange : callable
        The student's ``exchange(cart, u)``, or ``exchange(cart, win, u)`` with `setup`.
    setup : callable, optional
        The student's ``setup(cart, rows, cols) -> (win, u)``, for a shared window.
    ranks, dims
        As for :func:`mpilab.grading.halo.show_exchange`.
    timeout : float, optional
        Seconds before the run counts as stuck (default 20).

    Returns
    -------
    float or None
        The largest absolute difference from the serial field; None when the run failed
        or while grading.
    """
    if grading.not_while_grading():
        return None
    dims = ghosts.grid_of(ranks, dims)
    kind = "exchange" if setup is None else "shared"
    outs = ghosts.tried(lambda: _run(kind, setup, exchange, nx, ny, dims, steps, False, timeout))
    return None if outs is None else ghosts.heat_difference(outs, nx, ny, dims, steps)
