"""Lab 02 Part E: the halo exchange's model, graded against the course's exchange measured now.

The student writes ``exchange_us(nx, ny, dims, alpha_us, beta_MBps)``, the model of
lecture 02 (:func:`reference_exchange_us`): a rank takes in its neighbours' edges one
after the other, α + 8 len / β each, and the exchange lasts as long as the busiest rank.
It is graded as every lab's prediction is (:class:`mpilab.grading.prediction.Prediction`,
:data:`EXCHANGE`): exactly on made-up cases, then against the course's nonblocking
exchange of 1 MiB rows measured just now (:func:`exchange_times`, on the ranks).

The lab's test cells reach these through :mod:`mpilab.grading.halo`, which re-exports
them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from mpilab import grading, halo
from mpilab.buffers import doubles
from mpilab.grading import measured
from mpilab.grading.prediction import Part, Prediction, shown, where
from mpilab.timing import best_us

__all__ = ["PREDICTION_TOLERANCE", "ROW_DOUBLES", "exchange_times", "reference_exchange_us",
           "exchange_now", "EXCHANGE", "check_exchange_us", "show_exchange_us"]

# ---------------------------------------------------------------------------------------
# engine side: the course's exchange, measured on the ranks

def exchange_times(comm, nx: int, ny: int, iters: int = 10, reps: int = 7) -> dict:
    """The course's nonblocking halo exchange (``Irecv``/``Isend`` of rows, one
    ``Waitall``, as the lab's Part B) on a p × 1 process grid of the nx × ny grid: the
    fastest of `reps` repetitions, per exchange in µs (the slowest rank's).

    Runs on every rank of `comm` (through :func:`mpilab.grading.measured.measure`).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The p ranks of the p × 1 process grid.
    nx, ny : int
        The grid: rows of `nx` doubles, `ny` rows split over the ranks.
    iters, reps : int, optional
        The fastest of `reps` (default 7) repetitions of `iters` exchanges (default 10)
        counts (:func:`mpilab.timing.best_us`).

    Returns
    -------
    dict
        ``{"exchange_us": float}``: one exchange, in µs.
    """
    from mpi4py import MPI

    p = comm.Get_size()
    cart = comm.Create_cart([p, 1], periods=[False, False], reorder=False)
    north, south = cart.Shift(0, 1)
    rows = halo.split(ny, p)[cart.Get_coords(cart.Get_rank())[0]][1]
    u = doubles((rows + 2) * (nx + 2)).reshape(rows + 2, nx + 2)

    def exchange():
        MPI.Request.Waitall([cart.Irecv(u[0, 1:-1], source=north, tag=0),
                             cart.Irecv(u[-1, 1:-1], source=south, tag=1),
                             cart.Isend(u[-2, 1:-1], dest=south, tag=0),
                             cart.Isend(u[1, 1:-1], dest=north, tag=1)])

    try:
        return {"exchange_us": best_us(cart, exchange, iters, reps)}
    finally:
        cart.Free()


# ---------------------------------------------------------------------------------------
# the model, graded exactly and against the measurement

#: The exchange measured on this machine may take this many times the model: below 1
#: only noise; above it what the model leaves out (copies at once share the memory system,
#: the Waitall returns when the slowest message is in).
PREDICTION_TOLERANCE = (0.5, 2.5)
ROW_DOUBLES = 1 << 17  # a row of 1 MiB: far past every eager limit, bandwidth-bound


def _edges(nx: int, ny: int, dims: Sequence[int]):
    """Per rank: the lengths (in doubles) of the edges it receives from its neighbours."""
    py, px = dims
    for cy, (_, rows) in enumerate(halo.split(ny, py)):
        for cx, (_, cols) in enumerate(halo.split(nx, px)):
            yield ([cols] * ((cy > 0) + (cy < py - 1))
                   + [rows] * ((cx > 0) + (cx < px - 1)))


def reference_exchange_us(nx: int, ny: int, dims: Sequence[int], alpha_us: float,
                          beta_MBps: float) -> float:
    """The model: a rank takes in its neighbours' edges one after the other, α + 8 len / β
    each, and the exchange lasts as long as the busiest rank.

    Parameters
    ----------
    nx, ny : int
        The grid.
    dims : (int, int)
        The process grid ``(py, px)``.
    alpha_us, beta_MBps : float
        Each edge's message costs α (µs) plus its bytes at β (MB/s), Hockney's
        :class:`~mpilab.models.hockney.HockneyFit`; an edge of n doubles is 8 n bytes.

    Returns
    -------
    float
        The exchange's time, in µs.
    """
    return max(sum(alpha_us + 8 * n / beta_MBps for n in edges)
               for edges in _edges(nx, ny, dims))


def _exchange_hint(got, nx, ny, dims, a, b) -> str:
    if not grading._is_num(got):
        return "Return a number of µs."
    py, px = dims
    rows, cols = halo.split(ny, py)[0][1], halo.split(nx, px)[0][1]
    guesses = [
        (max(sum(a + n / b for n in e) for e in _edges(nx, ny, dims)),
         "An edge of n doubles is 8 n bytes."),
        (max(sum(8 * n / b for n in e) for e in _edges(nx, ny, dims)),
         "Each message also costs the latency α."),
        (sum(sum(a + 8 * n / b for n in e) for e in _edges(nx, ny, dims)),
         "That adds up every rank's messages; the ranks work at the same time, so the "
         "exchange lasts as long as the busiest rank."),
        (max(max((a + 8 * n / b for n in e), default=0) for e in _edges(nx, ny, dims)),
         "A rank takes in its edges one after the other: add them up."),
        (2 * (a + 8 * cols / b) + 2 * (a + 8 * rows / b),
         "Ranks on the border of the process grid have fewer than four neighbours."),
        (max(sum(a + 8 * n / b for n in e)
             for e in _edges(ny, nx, (px, py))),
         "North and south edges are rows of the block (cols doubles), west and east edges "
         "columns (rows doubles)."),
    ]
    for value, text in guesses:
        if np.isclose(got, value, rtol=1e-9):
            return text
    return "Per rank, Σ over its neighbours of α + 8 · edge / β; then the largest over ranks."


def exchange_now(ranks: int = 4) -> dict:
    """α, β and the course's exchange of 1 MiB rows on a p × 1 process grid, measured
    (once per grading session) on one rank per core.

    Parameters
    ----------
    ranks : int, optional
        Ranks of the lab's cluster (default 4): one rank per core of these
        (:func:`~mpilab.grading.measured.measuring_ranks`) make the p × 1 process grid.

    Returns
    -------
    dict
        :func:`mpilab.grading.measured.with_alpha_beta`'s measurement (``exchange_us``,
        ``alpha_us``, ``beta_MBps``, ``ranks``, ``cores``, ``oversubscribed`` ...), plus
        the grid measured: ``nx``, ``ny`` and ``dims`` (p × 1).
    """
    p = measured.measuring_ranks(ranks)
    nx, ny = ROW_DOUBLES, 2 * p
    m = measured.with_alpha_beta("exchange", exchange_times, nx, ny, nbytes=8 * ROW_DOUBLES,
                                 ranks=ranks)
    return {**m, "nx": nx, "ny": ny, "dims": (p, 1)}


def _exchange_args(m: dict) -> tuple:
    return m["nx"], m["ny"], tuple(m["dims"]), m["alpha_us"], m["beta_MBps"]


def _exchange_case(case) -> tuple:
    nx, ny, dims, a, b = case
    return nx, ny, tuple(dims), a, b


def _exchange_lines(exchange_us: Callable, m: dict, _ranks: int) -> None:
    print(f"measured on {where(m)}: α = {m['alpha_us']:.2f} µs, "
          f"β = {m['beta_MBps']:,.0f} MB/s")
    print(f"one exchange of 1 MiB rows on a {m['dims'][0]} × 1 process grid: measured "
          f"{m['exchange_us']:.1f} µs, predicted " + shown(exchange_us, *_exchange_args(m)))


#: Part E: ``exchange_us(nx, ny, dims, alpha_us, beta_MBps)``, against the course's exchange.
EXCHANGE = Prediction(
    name="exchange_us", reference=reference_exchange_us, hint=_exchange_hint,
    now=exchange_now, tolerance=PREDICTION_TOLERANCE, shows=_exchange_lines,
    args=_exchange_case,
    parts=lambda m: [Part(f"the exchange of 1 MiB rows on a {m['dims'][0]} × 1 process grid",
                          _exchange_args(m), m["exchange_us"])],
    model=lambda m: (f"α = {m['alpha_us']:.3g} µs and β = {m['beta_MBps']:,.0f} MB/s, "
                     f"measured just now on {where(m)}"))


check_exchange_us, show_exchange_us = EXCHANGE.cells(
    __name__, "check_exchange_us", "show_exchange_us",
    "exchange_us(nx, ny, dims, alpha_us, beta_MBps)", against="the course's exchange",
    shows="α, β and the course's exchange")
