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

Part D, a prediction: :func:`check_push_us` grades ``push_us(n_bytes, tiny_push_us,
copy_MBps)``, the model of a push (a tiny push's fixed cost plus ``n / β_copy``: the
coarray lives in memory MPI allocated, which images on one node share), first against
:func:`reference_push_us` on made-up numbers, then against a push of 1 MiB measured just
now (:func:`push_times`, through :mod:`mpilab.grading.measured`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from mpilab import grading
from mpilab.grading import measured
from mpilab.grading import onesided as _os
from mpilab.grading.onesided import compare_heat, show_exchange
from mpilab.grading.prediction import fixed_plus_bytes, guessed, unit_slips
from mpilab.timing import best_us

__all__ = ["check_push", "check_pull", "check_segments", "show_exchange", "compare_heat",
           "STORE", "LOAD", "push_times", "reference_push_us", "push_now", "check_push_us",
           "show_push", "PREDICTION_TOLERANCE", "PUSH"]

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
    _os._checked("exchange", None, exchange, name, nx, ny, dims, steps, timeout, hint,
                 refuse=("cart.", "win.", "MPI.Win."),
                 why="a coarray exchange moves the edges with the coarray's own syntax "
                 "(x[k][...] = ..., ... = x[k][...], sync_all): the window and its calls are "
                 "the coarray's to make, and sends and receives were lab 02's")


def check_push(exchange: Callable, nx: int, ny: int, dims: Sequence[int], steps: int, *,
               timeout: float = 20) -> None:
    """Part A: ``exchange(cart, u)`` stores its edges into the neighbours' images of a
    coarray, ``sync_all``, then copies what arrived into its frame; fail saying why.

    Parameters
    ----------
    exchange, nx, ny, dims, steps, timeout
        As for :func:`mpilab.grading.onesided.check_put` (the student's ``exchange(cart,
        u)`` on ``py * px`` images; 20 s before it fails as stuck), whose harness runs it.

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
    neighbours' edges from theirs; fail saying why.

    Parameters
    ----------
    exchange, nx, ny, dims, steps, timeout
        As for :func:`check_push`.

    Raises
    ------
    mpilab.grading.CheckFailed
        Naming what the code lacks (a coarray, ``sync_all``, a load; or it stores), or
        the rank, the ghost edge and the neighbour.
    """
    __tracebackhide__ = True
    _check(exchange, nx, ny, dims, steps, stores=False, timeout=timeout,
           hint=_BETWEEN_CALLS)


def check_segments(exchange: Callable, nx: int, ny: int, dims: Sequence[int], steps: int, *,
                   given: Callable | None = None, timeout: float = 20) -> None:
    """Part C: the given push exchange with its ``sync_all`` made by every image; with
    `given`, first show the given one not finishing on the same grid.

    Parameters
    ----------
    exchange : callable
        The student's fixed ``exchange(cart, u)``, run on every image.
    nx, ny, dims, steps, timeout
        As for :func:`check_push`.
    given : callable, optional
        The lab's given exchange, shown first with slow ranks (5 s timeout, not graded).

    Raises
    ------
    mpilab.grading.CheckFailed
        Naming what the code lacks, or the rank, the ghost edge and the neighbour.
    """
    __tracebackhide__ = True
    if given is not None:
        print("The given exchange, with slow ranks:")
        show_exchange(given, nx, ny, dims=dims, blocks=False, timeout=5)
    _check(exchange, nx, ny, dims, steps, stores=True, timeout=timeout,
           hint="What another image stored is in your block only after a sync_all that both "
           "of you made: every image must make every sync_all.")


# ---------------------------------------------------------------------------------------
# Part D: a prediction, graded against a push measured just now

#: A push of 1 MiB measured on this machine may take this many times the model: below 1
#: only noise; above it what the model leaves out (the Put's completion, which the Fence
#: under sync_all waits for, and the coarray's layer on a large section).
PREDICTION_TOLERANCE = (0.5, 2.5)
PUSH_BYTES = 1 << 20


def push_times(comm, nbytes: int, iters: int = 20, reps: int = 7) -> dict:
    """On every image of `comm`: ``sync_all()`` alone, a push of one double and a push of
    `nbytes` from image 1 into image 2 (``x[2][...] = a; x.sync_all()``, every image
    calling ``sync_all``) with a coarray made once, and a local copy of `nbytes` between
    two NumPy arrays (``b[:] = a``) on image 1; the fastest of `reps` repetitions of
    `iters`, per call in µs (the slowest image's), and the copy's bandwidth in MB/s.

    One store, not one per image: the model is one store's, and several copies at once
    would share the memory system (on one core, take turns).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        Two images (ranks) or more.
    nbytes : int
        Bytes of the large push and of the copy (rounded down to whole doubles, at least
        one).
    iters, reps : int, optional
        As for :func:`mpilab.grading.onesided_model.epoch_times` (calls instead of epochs).

    Returns
    -------
    dict
        ``sync_us``, ``tiny_push_us``, ``push_us`` and ``copy_us`` (µs per call),
        ``nbytes`` (the bytes pushed) and ``copy_MBps`` (the local copy's MB/s).
    """

    import numpy as np

    from mpilab.coarray_view import CoArray

    first = comm.Get_rank() == 0
    n = max(1, nbytes // 8)
    # NumPy arrays, as a student's: their copy is what β_copy stands for (huge pages
    # would make the local copy, 1 MiB between two cached arrays, many times faster)
    a, b = np.ones(n), np.zeros(n)

    def copy():
        if first:
            b[:] = a

    copy_us = best_us(comm, copy, iters, reps)
    x = CoArray(comm, (n,))
    try:
        def tiny():
            if first:
                x[2][:1] = a[:1]
            x.sync_all()

        def push():
            if first:
                x[2][:] = a
            x.sync_all()

        return {"sync_us": best_us(comm, x.sync_all, iters, reps),
                "tiny_push_us": best_us(comm, tiny, iters, reps),
                "push_us": best_us(comm, push, iters, reps), "nbytes": 8 * n,
                "copy_us": copy_us, "copy_MBps": 8 * n / copy_us}
    finally:
        x.free()


def reference_push_us(n_bytes: float, tiny_push_us: float, copy_MBps: float) -> float:
    """The model: a store's fixed cost (a push of one double: the indexing, the Put, the
    sync_all) plus its bytes copied once, straight into the other image's block, at the
    speed of a local copy: ``tiny + n / β_copy`` (µs; 1 MB/s is one byte per µs).

    Parameters
    ----------
    n_bytes : float
        Bytes stored.
    tiny_push_us : float
        A push of one double, in µs.
    copy_MBps : float
        The bandwidth β_copy of a local copy, in MB/s.

    Returns
    -------
    float
        The push's time, in µs.
    """
    return tiny_push_us + n_bytes / copy_MBps


def _push_hint(got, n: float, t: float, c: float) -> str:
    return guessed(got, [
        (n / c, "A store costs its fixed part even for one double (the indexing, the Put, "
                "the sync_all that completes it): add the tiny push's time."),
        (t * n / 8, "The tiny push is almost all fixed cost, paid once per store, not once "
                    "per double: add the bytes' time, n / β_copy, to it."),
        (2 * t + n / c, "A push is one segment: the tiny push already includes its "
                        "sync_all. Count it once."),
        (t + 2 * n / c, "The store copies the bytes once, straight into the other image's "
                        "block: one copy, not two."),
        *unit_slips(t, n, c, "β_copy"),
        (t, "The bytes take time too: n / β_copy."),
    ], "A push of n bytes: the tiny push's time plus n / β_copy (µs, with n in bytes and "
       "β_copy in MB/s).")


def push_now(ranks: int = 4) -> dict:
    """A ping-pong's α and β (for comparison), ``sync_all``, a push of one double, a push
    of 1 MiB and a local copy of 1 MiB, measured (once per grading session) on one image
    per core (:func:`mpilab.grading.measured.measure`).

    Parameters
    ----------
    ranks : int, optional
        Ranks of the lab's cluster (default 4): one image per core of these
        (:func:`~mpilab.grading.measured.measuring_ranks`) make every ``sync_all``;
        image 1 pushes into image 2.

    Returns
    -------
    dict
        :func:`push_times`'s dict, with ``alpha_us``, ``beta_MBps``, ``ranks``,
        ``cores`` and ``oversubscribed``.
    """
    return measured.with_alpha_beta("push", push_times, PUSH_BYTES, nbytes=PUSH_BYTES,
                                    ranks=ranks)


def _measured(m: dict) -> str:
    return (f"sync_all {m['sync_us']:.2f} µs, a tiny push {m['tiny_push_us']:.2f} µs, a local "
            f"copy β_copy = {m['copy_MBps']:,.0f} MB/s (a message's β, from a ping-pong: "
            f"{m['beta_MBps']:,.0f} MB/s)")


#: Part D: ``push_us(n_bytes, tiny_push_us, copy_MBps)``, against a push of 1 MiB.
PUSH, check_push_us, show_push = fixed_plus_bytes(
    __name__, "check_push_us", "show_push", "push_us", "tiny_push_us", "copy_MBps",
    reference=reference_push_us, hint=_push_hint, now=push_now, tolerance=PREDICTION_TOLERANCE,
    case="a push of 1 MiB", who="image 1 stores into image 2", fixed_is="a tiny push",
    besides=_measured, shows="sync_all, a tiny push, a local copy and a push of 1 MiB",
    ranks_are="images", beta_is="β_copy")
