"""Lab 06 Part G: the allgathers' model, graded against the course's allgathers measured now.

The student writes ``allgather_us(alg, p, block_bytes, alpha_us, beta_MBps)``, the model of
lecture 06 (:func:`reference_allgather_us`): per step α plus the step's message at β. It is
graded as every lab's prediction is (:class:`mpilab.grading.prediction.Prediction`,
:data:`ALLGATHER`): exactly on made-up cases, then against the course's compiled
allgathers of 1 KiB blocks measured just now (:func:`eager_times`); the try-it cell also
shows 1 MiB blocks, where what the sender's buffer held last decides the cost
(:func:`mpilab.pingpong.forwarding_times`).

The lab's test cells reach these through :mod:`mpilab.grading.allgather`, which
re-exports them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from mpilab import grading
from mpilab.buffers import doubles
from mpilab.grading import measured
from mpilab.grading.prediction import Part, Prediction, shown, where
from mpilab.grading.traced import log_steps
from mpilab.timing import pinned

__all__ = ["PREDICTION_TOLERANCE", "BLOCK_BYTES", "LARGE_BYTES", "PREDICTED", "eager_times",
           "reference_allgather_us", "allgather_now", "ALLGATHER", "check_allgather_us",
           "show_allgather_us"]

#: Part G: each measured allgather may take this many times the student's prediction.
PREDICTION_TOLERANCE = (0.5, 3.0)
#: Part G's graded blocks: small enough to travel eagerly, copied through the library's
#: shared queue like the ping-pong that gives α and β (see :func:`eager_times`).
BLOCK_BYTES = 1024
#: The not-graded comparison: blocks large enough for the single-copy path.
LARGE_BYTES = 1 << 20
PREDICTED = ("ring", "recursive_doubling", "bruck")


def eager_times(comm, block_bytes: int, reps: int = 7, iters: int = 100) -> dict:
    """On every rank of `comm`: α (8 B) and the one-way time of `block_bytes` by the
    course's compiled ping-pong (ranks 0 and 1), and the course's compiled allgathers of
    `block_bytes` per rank (:data:`PREDICTED`; recursive doubling where p is a power of
    two, else None), every one a loop of `iters` calls timed in C, the slowest rank's time
    per call. A repetition times each of them once in turn, so a change of the machine's
    state during the loop reaches all alike; each is the fastest of `reps`, in µs, every
    rank on a core of its own where there are cores enough.

    Why small blocks: up to the library's eager limit a message is copied into a queue in
    shared memory and out of it on the other side, the ping-pong's messages and the
    allgather's alike, so α and β carry over. Large messages are copied once, straight from
    the sender's buffer, and then what that buffer held last decides the cost: a ping-pong
    resending one array finds it in the other core's cache, a ring forwards what it has
    just received (:func:`mpilab.pingpong.forwarding_times`).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The ranks to time on (2 or more).
    block_bytes : int
        Bytes of the ping-pong's message and of each rank's allgather block.
    reps : int, optional
        Repetitions, of which the fastest counts (default 7).
    iters : int, optional
        Calls per timed loop (default 100).

    Returns
    -------
    dict
        ``alpha_us`` (one way of 8 B), ``block_us`` (one way of `block_bytes`), both in
        µs; ``block_bytes``; ``beta_MBps`` (MB/s, from the two); and ``{alg}_us`` for
        each of :data:`PREDICTED` (µs per call, None where the algorithm does not take
        `p` ranks).
    """
    from mpilab import collectives
    from mpilab.kernels import pingpong as kp

    p = comm.Get_size()
    k = collectives.kernel_module()
    sbuf = doubles(-(-block_bytes // 8)).view(np.uint8)
    rbuf = doubles(-(-block_bytes // 8), 0.0).view(np.uint8)
    algs = [a for a in PREDICTED if a in collectives.admissible("allgather", p)]

    def once(name: str) -> float:
        if name in ("alpha", "block"):
            n = 8 if name == "alpha" else block_bytes
            t = kp.pingpong(comm, sbuf, rbuf, n, iters=iters, reps=1, warmup=10)
        else:
            t = k.time(comm, "allgather", name, block_bytes, iters=iters, reps=1, warmup=10)
        return float(np.min(t)) * 1e6

    names = ["alpha", "block", *algs]
    best = dict.fromkeys(names, float("inf"))
    with pinned(comm):
        for _ in range(reps):
            for name in names:
                best[name] = min(best[name], once(name))
    a, t = best["alpha"], best["block"]
    out = {"alpha_us": a, "block_us": t, "block_bytes": int(block_bytes),
           "beta_MBps": block_bytes / max(t - a, 1e-3)}
    for alg in PREDICTED:
        out[f"{alg}_us"] = best.get(alg)
    return out


def _forwarding_with_allgathers(comm, nbytes: int) -> dict:
    """On every rank: :func:`mpilab.pingpong.forwarding_times` with the course's ring and
    recursive doubling (None unless p is a power of two) allgathers of `nbytes` blocks
    timed in the same loop."""
    from mpilab import collectives
    from mpilab.pingpong import forwarding_times

    p = comm.Get_size()
    n = max(1, nbytes // 8)
    send, recv = doubles(n, float(comm.Get_rank())), doubles(p * n, 0.0)
    ops = {alg: (lambda a=alg: collectives.run(comm, "allgather", a, send, recv))
           for alg in ("ring", "recursive_doubling")
           if alg in collectives.admissible("allgather", p)}
    return {"recursive_doubling_us": None, **forwarding_times(comm, nbytes, extra=ops)}


def reference_allgather_us(alg: str, ranks: int, block_bytes: float, alpha_us: float,
                           beta_MBps: float) -> float:
    """The model (lecture 06, :func:`mpilab.collectives.predict`): per step α plus the
    step's message at β; the ring p - 1 steps of one block, recursive doubling and Bruck
    ⌈log2 p⌉ steps that together carry p - 1 blocks.

    Parameters
    ----------
    alg : {"ring", "recursive_doubling", "bruck"}
        The allgather.
    ranks : int
        Number of ranks.
    block_bytes : float
        Bytes of each rank's block.
    alpha_us, beta_MBps : float
        Each step's message costs α (µs) plus its bytes at β (MB/s): Hockney's
        :class:`~mpilab.models.hockney.HockneyFit`.

    Returns
    -------
    float
        The allgather's time, in µs.
    """
    from mpilab import collectives

    return collectives.predict("allgather", alg, ranks, block_bytes, alpha_us, beta_MBps).t_us


def allgather_now(ranks: int = 4) -> dict:
    """α, β and the course's allgathers of 1 KiB blocks, measured (once per grading
    session) on one rank per core (:func:`mpilab.grading.measured.measure`).

    Parameters
    ----------
    ranks : int, optional
        Ranks of the lab's cluster (default 4): the allgathers span one rank per core of these
        (:func:`~mpilab.grading.measured.measuring_ranks`); recursive doubling only a
        power of two of them.

    Returns
    -------
    dict
        :func:`eager_times`'s dict of 1 KiB blocks, with ``ranks``, ``cores`` and
        ``oversubscribed``.
    """
    return measured.measure("allgather-eager", eager_times, BLOCK_BYTES,
                            ranks=ranks)


def _allgather_hint(got: Any, alg: str, p: int, n: float, a: float, b: float) -> str:
    if not grading._is_num(got) or isinstance(got, (bool, complex)):
        return "Return a number of µs."
    steps = log_steps(p)
    ring = alg == "ring"
    guesses = [
        (p * (a + n / b) if ring else math.nan,
         "The ring takes p - 1 steps: a rank's own block never travels."),
        ((p - 1) * (a + n / b) if not ring else math.nan,
         "That is the ring's p - 1 steps of one block; this algorithm takes ⌈log2 p⌉ "
         "steps, whose messages grow."),
        (steps * (a + n / b) if not ring else math.nan,
         "Each step's message grows (1, 2, 4, ... blocks): together the steps carry p - 1 "
         "blocks, not one per step."),
        (steps * a + p * n / b if not ring else math.nan,
         "The steps carry p - 1 blocks in all: a rank's own block is already in place."),
        (reference_allgather_us(alg, p, n, a, b) - (p - 1) * n / b,
         "Each block costs its bytes at β too."),
    ]
    for value, text in guesses:
        if math.isclose(got, value, rel_tol=1e-9) and not math.isclose(
                value, reference_allgather_us(alg, p, n, a, b), rel_tol=1e-9):
            return text
    return ("Per step α plus that step's message at β: the ring p - 1 steps of one block; "
            "Bruck and recursive doubling ⌈log2 p⌉ steps carrying p - 1 blocks in all.")


def _allgather_parts(m: dict) -> list[Part]:
    p, a, b = m["ranks"], m["alpha_us"], m["beta_MBps"]
    return [Part(f"the course's {alg.replace('_', ' ')} allgather of 1 KiB blocks on {p} ranks",
                 (alg, p, BLOCK_BYTES, a, b), m[f"{alg}_us"], f"{alg}_predicted_us",
                 f"{alg}_ratio") for alg in PREDICTED if m[f"{alg}_us"] is not None]


def _allgather_lines(allgather_us: Callable, m: dict, ranks: int) -> None:
    """The 1 KiB blocks graded, then the same model for 1 MiB blocks with β from a
    ping-pong that resends one array and from one that forwards what it received."""
    print(f"measured on {where(m)}: α = {m['alpha_us']:.3f} µs (8 B), "
          f"β = {m['beta_MBps']:,.0f} MB/s (one way of 1 KiB: {m['block_us']:.3f} µs)")
    for part in _allgather_parts(m):
        print(f"{part.args[0]:>18}, 1 KiB blocks: measured {part.measured_us:8.3f} µs, "
              "predicted " + shown(allgather_us, *part.args, digits=3))
    big = measured.measure("allgather-forwarding", _forwarding_with_allgathers, LARGE_BYTES,
                           ranks=ranks)
    a = big["alpha_us"]
    print(f"\n1 MiB blocks on {where(big)}: one way {big['resent_us']:.1f} µs "
          f"resending one array, {big['forwarded_us']:.1f} µs forwarding the one received")
    for alg in ("ring", "recursive_doubling"):
        if big[alg + "_us"] is None:
            continue
        print(f"{alg:>18}: measured {big[alg + '_us']:8.1f} µs; predicted with β resent "
              + shown(allgather_us, alg, big["ranks"], LARGE_BYTES, a,
                      LARGE_BYTES / max(big["resent_us"] - a, 1e-3))
              + ", with β forwarded "
              + shown(allgather_us, alg, big["ranks"], LARGE_BYTES, a,
                      LARGE_BYTES / max(big["forwarded_us"] - a, 1e-3)))


#: Part G: ``allgather_us(alg, p, block_bytes, alpha_us, beta_MBps)``, against the
#: course's compiled allgathers of 1 KiB blocks, each algorithm measured on these ranks.
ALLGATHER = Prediction(
    name="allgather_us", reference=reference_allgather_us, hint=_allgather_hint,
    now=allgather_now, parts=_allgather_parts, tolerance=PREDICTION_TOLERANCE,
    shows=_allgather_lines,
    model=lambda m: (f"α = {m['alpha_us']:.3g} µs (8 B) and β = {m['beta_MBps']:,.0f} MB/s "
                     f"(1 KiB), measured just now on {where(m)}"))


check_allgather_us, show_allgather_us = ALLGATHER.cells(
    __name__, "check_allgather_us", "show_allgather_us",
    "allgather_us(alg, p, block_bytes, alpha_us, beta_MBps)",
    against="each of the course's compiled allgathers of 1 KiB blocks",
    shows=("α, β and the course's allgathers of 1 KiB blocks, then the same model for 1 MiB "
           "blocks with β from a ping-pong that resends one array and from one that forwards "
           "what it received (:func:`mpilab.pingpong.forwarding_times`),"),
    keys="``{alg}_predicted_us`` and ``{alg}_ratio`` per algorithm measured")
