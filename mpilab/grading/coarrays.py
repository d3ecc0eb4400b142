"""Lab 04's graded checks (the halo with coarrays), on top of :mod:`mpilab.grading.onesided`.

The student writes the heat halo exchange ``exchange(cart, u)`` with
:class:`mpilab.coarray_view.CoArray`, the coarray-style view over an MPI window that
lecture 04 builds: ``x[k][i] = v`` stores into image ``k``'s block (an ``MPI_Put``),
``v = x[k][i]`` loads from it (an ``MPI_Get``, defined after the next ``sync_all``), and
``x.sync_all()`` ends a segment (a ``Fence``). Images count from 1; image ``k`` is
rank ``k - 1`` of ``cart``::

    from mpilab.grading import coarrays as grading_coarrays
    grading_coarrays.check_push(exchange_push, 16, 12, (2, 2), 10)

The runs are lab 03's (:func:`mpilab.grading.onesided.onesided_harness`): one exchange
of the numbered grid with slow ranks in a checkerboard (they write their block late and
pause after every ``sync_all``, which is a ``Fence``), then a heat run compared with
:func:`mpilab.halo.serial_heat`; the windows a coarray makes are counted, so an exchange
that never frees its coarray is named. Before running, each check reads the code for its
structure (a coarray, ``sync_all``, stores or loads as the part asks, no send, receive or
raw window call), so a right answer reached another way earns nothing here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from mpilab import grading
from mpilab.grading import onesided as _os
from mpilab.grading.onesided import compare_heat, show_exchange

__all__ = ["check_push", "check_pull", "check_segments", "show_exchange", "compare_heat",
           "STORE", "LOAD"]

#: a store into another image: ``x[k][...] = ...`` (not ``==``)
STORE = r"\w+\s*\[[^\[\]]+\]\s*\[[^\[\]]*\]\s*=(?!=)"
#: a load from another image: ``... = x[k][...]`` or ``x[k][...]`` used in an expression
LOAD = r"(?<![\w\]])\w+\s*\[[^\[\]]+\]\s*\[[^\[\]]*\](?!\s*=(?!=))"
_BETWEEN_CALLS = ("One exchange was right, so look at what changes between calls: every call "
                  "makes its coarray anew and must free it (x.free()), and the frame on the "
                  "border of the grid must stay 0.0.")
_RAW = r"\.(Put|Get|Accumulate|Rput|Rget|Fence)\s*\(|\bWin\."


def _structure(code: str, name: str, *, stores: bool) -> None:
    __tracebackhide__ = True
    grading.expect(bool(re.search(r"\bCoArray\s*\(", code) and re.search(r"\.sync_all\s*\(", code)),
                   f"{name} should make a coarray (CoArray(cart, shape)) and end its segments "
                   "with sync_all()")
    grading.expect(not re.search(_os._P2P, code),
                   f"{name} should move the edges through the coarray: no send or receive "
                   "(that was lab 02)")
    grading.expect(not re.search(_RAW, code),
                   f"{name} should use the coarray's own syntax (x[k][...] = ..., "
                   "... = x[k][...], sync_all), not the window underneath (that was lab 03)")
    if stores:
        grading.expect(bool(re.search(STORE, code)),
                       f"{name} should store your edges into the neighbours' images: "
                       "x[k][row, cols] = edge")
    else:
        grading.expect(not re.search(STORE, code),
                       f"{name} should only load from the other images (edge = x[k][...]): "
                       "it stores into one")
        grading.expect(bool(re.search(LOAD, code)),
                       f"{name} should load the neighbours' edges from their images: "
                       "got = x[k][row, cols]")


def _check(exchange: Callable, nx: int, ny: int, dims: Sequence[int], steps: int, *,
           stores: bool, hint: str, timeout: float) -> None:
    __tracebackhide__ = True
    name = _os._name(exchange, None)
    _structure(_os._code(exchange, name), name, stores=stores)
    where = f"{name} on a {nx} × {ny} grid, {dims[0]} × {dims[1]} process grid"
    outs = _os._run("exchange", None, exchange, nx, ny, dims, steps, True, timeout)
    _os._verdict(outs, where, nx, ny, dims, steps, hint=hint)


def check_push(exchange: Callable, nx: int, ny: int, dims: Sequence[int], steps: int, *,
               timeout: float = 20) -> None:
    """Part A: ``exchange(cart, u)`` stores its edges into the neighbours' images of a
    coarray, ``sync_all``, then copies what arrived into its frame; fail saying why.

    Raises
    ------
    mpilab.grading.CheckFailed
        With a message naming the rank, the ghost edge and the neighbour.
    """
    __tracebackhide__ = True
    _check(exchange, nx, ny, dims, steps, stores=True, timeout=timeout,
           hint=_BETWEEN_CALLS)


def check_pull(exchange: Callable, nx: int, ny: int, dims: Sequence[int], steps: int, *,
               timeout: float = 20) -> None:
    """Part B: ``exchange(cart, u)`` puts its own edges in its image, and loads the
    neighbours' edges from theirs; fail saying why."""
    __tracebackhide__ = True
    _check(exchange, nx, ny, dims, steps, stores=False, timeout=timeout,
           hint=_BETWEEN_CALLS)


def check_segments(exchange: Callable, nx: int, ny: int, dims: Sequence[int], steps: int, *,
                   given: Callable | None = None, timeout: float = 20) -> None:
    """Part C: the given push exchange with its ``sync_all`` made by every image; with
    `given`, first show the given one not finishing on the same grid."""
    __tracebackhide__ = True
    if given is not None:
        print("The given exchange, with slow ranks:")
        show_exchange(given, nx, ny, dims=dims, blocks=False, timeout=5)
    _check(exchange, nx, ny, dims, steps, stores=True, timeout=timeout,
           hint="What another image stored is in your block only after a sync_all that both "
           "of you made: every image must make every sync_all.")
