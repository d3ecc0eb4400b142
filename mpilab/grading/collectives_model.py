"""Lab 05 Part E: the broadcasts' model, graded against the course's broadcasts measured now.

The student writes ``bcast_us(alg, p, n_bytes, alpha_us, beta_MBps)``, the model of
lecture 05 (:func:`reference_bcast_us`): messages one after the other at α + n/β each,
the root's p - 1 in turn (linear), ⌈log2 p⌉ steps of the tree (binomial). It is graded as
every lab's prediction is (:class:`mpilab.grading.prediction.Prediction`, :data:`BCAST`):
exactly on made-up cases, then against the course's linear and binomial broadcasts of
1 MiB measured just now, one call at a time (:func:`bcast_times`, on the ranks).

The lab's test cells reach these through :mod:`mpilab.grading.collectives`, which
re-exports them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from mpilab import grading
from mpilab.buffers import doubles
from mpilab.grading import measured
from mpilab.grading.prediction import Part, Prediction, shown, where
from mpilab.grading.traced import log_steps
from mpilab.timing import best_us

__all__ = ["PREDICTION_TOLERANCE", "BCAST_BYTES", "bcast_times", "reference_bcast_us",
           "bcast_now", "BCAST", "check_bcast_us", "show_bcast_us"]

# ---------------------------------------------------------------------------------------
# engine side: the course's broadcasts, measured on the ranks


def bcast_times(comm, nbytes: int, reps: int = 15) -> dict:
    """The course's linear and binomial broadcasts of `nbytes` from rank 0, in mpi4py with
    blocking ``Send``/``Recv`` (the lab's own code), timed one call at a time: a barrier,
    the call, the slowest rank's time; the fastest of `reps` (µs). One call at a time,
    because calls that follow each other overlap (lecture 05).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The ranks of the broadcast; rank 0 is the root.
    nbytes : int
        Bytes broadcast (whole doubles).
    reps : int, optional
        Timed calls of each broadcast, of which the fastest counts (default 15).

    Returns
    -------
    dict
        ``linear_us`` and ``binomial_us``: one broadcast, in µs.
    """
    rank, p = comm.Get_rank(), comm.Get_size()
    buf = doubles(nbytes // 8)

    def linear():
        if rank == 0:
            for dest in range(1, p):
                comm.Send(buf, dest=dest)
        else:
            comm.Recv(buf, source=0)

    def binomial():
        mask = 1
        if rank > 0:
            high = 1 << (rank.bit_length() - 1)
            comm.Recv(buf, source=rank - high)
            mask = high << 1
        while mask < p:
            if rank + mask < p:
                comm.Send(buf, dest=rank + mask)
            mask <<= 1

    return {f"{name}_us": best_us(comm, call, 1, reps)
            for name, call in (("linear", linear), ("binomial", binomial))}


# ---------------------------------------------------------------------------------------
# the model, graded exactly and against the measurement

#: The broadcasts of 1 MiB, measured one call at a time, may take this many times the
#: model: below 1 only noise; above it what the model leaves out (each message waits for
#: its receiver to be ready, several copies at once share the memory system).
PREDICTION_TOLERANCE = (0.5, 2.5)
BCAST_BYTES = 1 << 20


def reference_bcast_us(alg: str, ranks: int, n_bytes: float, alpha_us: float,
                       beta_MBps: float) -> float:
    """The model: messages one after the other at α + n/β each; the root's p - 1 in
    turn (linear), ⌈log2 p⌉ steps of the tree (binomial).

    Parameters
    ----------
    alg : {"linear", "binomial"}
        The broadcast (anything but "linear" is taken as the tree).
    ranks : int
        Number of ranks.
    n_bytes : float
        Bytes broadcast.
    alpha_us, beta_MBps : float
        Each message (the root's in turn, or a step of the tree) costs α (µs) plus
        `n_bytes` at β (MB/s): Hockney's :class:`~mpilab.models.hockney.HockneyFit`.

    Returns
    -------
    float
        The broadcast's time, in µs.
    """
    msgs = ranks - 1 if alg == "linear" else log_steps(ranks)
    return msgs * (alpha_us + n_bytes / beta_MBps)


def bcast_now(ranks: int = 4) -> dict:
    """α and β, and the two broadcasts of 1 MiB, measured (once per grading session) on
    one rank per core (:func:`mpilab.grading.measured.measure`).

    Parameters
    ----------
    ranks : int, optional
        Ranks of the lab's cluster (default 4): the broadcasts span one rank per core of these
        (:func:`~mpilab.grading.measured.measuring_ranks`).

    Returns
    -------
    dict
        :func:`bcast_times`'s ``linear_us`` and ``binomial_us``, with ``alpha_us``,
        ``beta_MBps``, ``ranks``, ``cores`` and ``oversubscribed``.
    """
    return measured.with_alpha_beta("bcast", bcast_times, BCAST_BYTES, nbytes=BCAST_BYTES,
                                    ranks=ranks)


def _bcast_hint(got: Any, alg: str, p: int, n: float, a: float, b: float) -> str:
    one = a + n / b
    if not grading._is_num(got):
        return "Return a number of µs."
    if alg == "binomial" and math.isclose(got, (p - 1) * one):
        return "That is the linear broadcast's p - 1 messages; the tree needs ⌈log2 p⌉ steps."
    if alg == "binomial" and p > 1 and math.isclose(got, math.log2(p) * one):
        return "log2 p is not a whole number of steps: round up (⌈log2 p⌉)."
    if alg == "linear" and math.isclose(got, log_steps(p) * one):
        return "That is the tree's ⌈log2 p⌉; the linear root sends p - 1 messages in turn."
    if math.isclose(got, (p - 1 if alg == "linear" else log_steps(p)) * n / b):
        return "Each message also costs the latency α."
    return "Each step costs α + n / β (µs, with n in bytes and β in MB/s)."


def _bcast_args(m: dict, alg: str) -> tuple:
    return alg, m["ranks"], BCAST_BYTES, m["alpha_us"], m["beta_MBps"]


def _bcast_lines(bcast_us: Callable, m: dict, _ranks: int) -> None:
    print(f"measured on {where(m)}: α = {m['alpha_us']:.2f} µs, "
          f"β = {m['beta_MBps']:,.0f} MB/s")
    for alg in ("linear", "binomial"):
        print(f"{alg:>9} broadcast of 1 MiB: measured {m[alg + '_us']:8.1f} µs, predicted "
              + shown(bcast_us, *_bcast_args(m, alg)))


#: Part E: ``bcast_us(alg, p, n_bytes, alpha_us, beta_MBps)``, against both broadcasts.
BCAST = Prediction(
    name="bcast_us", reference=reference_bcast_us, hint=_bcast_hint, now=bcast_now,
    tolerance=PREDICTION_TOLERANCE, shows=_bcast_lines,
    parts=lambda m: [Part(f"the {alg} broadcast of 1 MiB on {m['ranks']} ranks",
                          _bcast_args(m, alg), m[f"{alg}_us"], f"{alg}_predicted_us",
                          f"{alg}_ratio") for alg in ("linear", "binomial")],
    model=lambda m: (f"α = {m['alpha_us']:.3g} µs and β = {m['beta_MBps']:,.0f} MB/s, "
                     f"measured just now on {where(m)}"))


check_bcast_us, show_bcast_us = BCAST.cells(
    __name__, "check_bcast_us", "show_bcast_us", "bcast_us(alg, p, n_bytes, alpha_us, beta_MBps)",
    against="each of the two broadcasts of 1 MiB", shows="α, β and both broadcasts",
    keys="``linear_predicted_us``, ``linear_ratio``, ``binomial_predicted_us`` and "
         "``binomial_ratio``")
