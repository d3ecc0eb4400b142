"""Lab 05's graded checks of a ring reduce-scatter (Part C), re-exported by the lab's checks
module, :mod:`mpilab.grading.collectives`.

A reduce-scatter with equal blocks (``MPI_Reduce_scatter_block``): every rank's `sendbuf`
holds ``p`` blocks of ``n`` elements, and rank ``r`` ends with the sum over all ranks of
block ``r``, in a `recvbuf` of ``n``. The test cells call::

    from mpilab.grading import collectives as grading_collectives
    grading_collectives.check_reduce_scatter(reduce_scatter_ring, [(4, 5)])
    took = grading_collectives.check_reduce_scatter_steps(reduce_scatter_ring, [4])   # [3]

As lab 05's other checks (:mod:`mpilab.grading.collectives`), each runs the student's
function through a harness of this module on the notebook's cluster with a
:class:`mpilab.tracing.TracingComm`, beside the library's ``comm.Reduce_scatter_block`` on
the same data: **the result** is compared rank by rank with the library's, and a wrong
one is explained (:func:`block_problems`: the sum of another block, or which ranks' data
are missing); **the steps** of a right result are a ring's (every message to the right
neighbour, ``p - 1`` steps of one block each: :func:`mpilab.grading.allgather_verdicts.
check_ring_schedule`, which lab 06's ring shares).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from mpilab import grading, tracing
from mpilab.grading.allgather_verdicts import check_ring_schedule
from mpilab.grading.traced import (
    check_cases,
    expect_sendbuf_kept,
    messages_hint,
    ranks_text,
    run_traced,
    steps_on_each,
)

__all__ = ["reduce_scatter_harness", "block_problems", "check_reduce_scatter",
           "check_reduce_scatter_steps", "UNTOUCHED"]

UNTOUCHED = -99  # what the student's recvbuf holds before the call


def reduce_scatter_harness(comm, reduce_scatter: Callable, n: int, dtype: str) -> dict:
    """On every rank: ``comm.Reduce_scatter_block`` and `reduce_scatter` on the same data.

    Rank r's block j holds ``(i (r + 2) + 37 r + 11 j) % 101 - 50`` at element i (plus
    ``1 / (r + 3)`` for floating-point types), so every rank and every block differ.

    Parameters
    ----------
    comm, reduce_scatter
        As for :func:`mpilab.grading.collectives.allreduce_harness` (the student's
        ``reduce_scatter(comm, sendbuf, recvbuf)``, a sum, traced).
    n, dtype : int, str
        Elements per block (`recvbuf` has `n`, `sendbuf` ``p n``), and the buffers'
        NumPy type, e.g. ``"float64"``, ``"int32"``.

    Returns
    -------
    dict
        ``recv`` (the student's recvbuf, which starts as -99 everywhere), ``ref`` (after
        ``comm.Reduce_scatter_block``), ``send`` (this rank's ``p`` blocks),
        ``unchanged`` (whether sendbuf was left as it was), and the tracer's
        ``schedule``, ``error`` and ``untraced``.
    """
    r, p = comm.Get_rank(), comm.Get_size()
    i, j = np.arange(p * n) % max(n, 1), np.arange(p * n) // max(n, 1)
    send = ((i * (r + 2) + 37 * r + 11 * j) % 101 - 50).astype(dtype)
    if send.dtype.kind == "f":
        send += 1 / (r + 3)
    kept = send.copy()
    ref = np.empty(n, dtype=dtype)
    comm.Reduce_scatter_block(send, ref)
    recv = np.full(n, UNTOUCHED, dtype=dtype)
    out = tracing.trace(comm, reduce_scatter, send, recv)
    return {"recv": recv, "ref": ref, "send": kept,
            "unchanged": bool(np.array_equal(send, kept)), "schedule": out["schedule"],
            "error": out["error"], "untraced": out["untraced"]}


def block_problems(outs: Sequence[dict], limit: int = 4) -> list[str]:
    """What each wrong rank's result is made of, in words.

    A wrong result that is the whole sum of another block is named so ("rank 1 holds
    the sum of block 0, not of block 1"); otherwise every combination of 0, 1 or 2 times
    each rank's block ``r`` is tried (on the first 500 elements): ``"rank 1 holds rank
    0 + rank 1 of block 1: missing rank 2, 3"``.

    Parameters
    ----------
    outs : sequence of dict
        :func:`reduce_scatter_harness`'s output, rank by rank (``send``, ``recv``,
        ``ref``).
    limit : int, optional
        At most this many lines (default 4).

    Returns
    -------
    list of str
        One line per wrong rank whose result is such a sum; empty when every rank is
        right or nothing fits.
    """
    p = len(outs)
    lines = []
    for r, o in enumerate(outs):
        n = len(o["ref"])
        got = np.asarray(o["recv"], dtype=float)[:500]
        if n == 0 or got.shape != np.asarray(o["ref"][:500]).shape or np.allclose(
                got, np.asarray(o["ref"][:500], dtype=float), rtol=1e-9, atol=1e-9):
            continue
        blocks = [[np.asarray(x["send"][b * n:(b + 1) * n][:500], dtype=float) for x in outs]
                  for b in range(p)]
        other = next((b for b in range(p) if b != r
                      and np.allclose(got, sum(blocks[b]), rtol=1e-9, atol=1e-9)), None)
        if other is not None:
            lines.append(f"rank {r} holds the sum of block {other}, not of block {r}: the "
                         f"block that arrives in the last step must be rank {r}'s own")
        else:
            for coef in itertools.product(range(3), repeat=p):
                if not any(coef) or not np.allclose(
                        got, sum(c * s for c, s in zip(coef, blocks[r], strict=True)),
                        rtol=1e-9, atol=1e-9):
                    continue
                parts = [f"{c} × rank {k}" if c > 1 else f"rank {k}"
                         for k, c in enumerate(coef) if c]
                missing = [k for k, c in enumerate(coef) if not c]
                twice = [k for k, c in enumerate(coef) if c > 1]
                lines.append(f"rank {r} holds " + " + ".join(parts) + f" of block {r}"
                             + (f": missing rank {ranks_text(missing)}" if missing else "")
                             + (f"{';' if missing else ':'} counted twice: rank "
                                f"{ranks_text(twice)}" if twice else ""))
                break
        if len(lines) >= limit:
            break
    return lines


def _run(reduce_scatter, p, n, dtype, name, timeout):
    __tracebackhide__ = True
    out = run_traced(reduce_scatter_harness, reduce_scatter, n, str(dtype), ranks=p,
                     name=name, timeout=timeout)
    label = f"{name} on {p} ranks, blocks of {n:,} {dtype}"
    expect_sendbuf_kept(out, label, "as it is and add into other buffers "
                        "(comm.Reduce_scatter_block does not touch sendbuf)")
    exact = np.dtype(dtype).kind != "f"
    hint = "\n".join(h for h in ("\n".join(block_problems(out)), messages_hint(out[0], p))
                     if h)
    grading.expect_per_rank(
        [o["recv"] for o in out], [o["ref"] for o in out], what="holds", label=label,
        rtol=None if exact else 1e-12, atol=0.0 if exact else 1e-9,
        known={f"its recvbuf untouched ({UNTOUCHED} everywhere)":
               np.full(n, UNTOUCHED, dtype)}, hint=hint)
    return out


def check_reduce_scatter(reduce_scatter: Callable, cases: Iterable, *,
                         name: str | None = None, timeout: float = 10) -> None:
    """Rank r holds the sum of every rank's block r, as after comm.Reduce_scatter_block.

    Parameters
    ----------
    reduce_scatter : callable
        ``reduce_scatter(comm, sendbuf, recvbuf)``, run on every rank: `sendbuf` holds
        ``p`` blocks of ``len(recvbuf)`` elements.
    cases : iterable of tuple
        ``(p, n)`` or ``(p, n, dtype)``: ranks, elements per block, NumPy type
        (``"float64"`` by default; floats are compared within 1e-12 relative, integers
        exactly).
    name : str, optional
        What messages call `reduce_scatter` (its ``__name__`` by default).
    timeout : float, optional
        Seconds before a case fails as stuck, in a deadlock or an endless loop.

    Raises
    ------
    mpilab.grading.CheckFailed
        When sendbuf changed, or naming each wrong rank with what its result is made of
        (:func:`block_problems`) and the messages step by step.
    """
    __tracebackhide__ = True
    check_cases(_run, reduce_scatter, cases, "p n dtype", ("float64",), name=name,
                timeout=timeout)


def check_reduce_scatter_steps(reduce_scatter: Callable, ranks: Iterable[int], *,
                               n: int = 3, name: str | None = None,
                               timeout: float = 10) -> list[int]:
    """A right reduce-scatter of `n` float64 per block, then a ring's steps.

    Every message goes to the right neighbour ``(r + 1) % p`` and carries one block, in
    ``p - 1`` steps (:func:`mpilab.grading.allgather_verdicts.check_ring_schedule`).

    Parameters
    ----------
    reduce_scatter : callable
        ``reduce_scatter(comm, sendbuf, recvbuf)``.
    ranks, n, name, timeout
        As for :func:`mpilab.grading.allgather.check_ring_steps` (`n` float64 per
        block, 3 by default).

    Returns
    -------
    list of int
        The steps on each rank count.
    """
    __tracebackhide__ = True
    return steps_on_each(_run, reduce_scatter, ranks, n,
                         lambda info, p, name: check_ring_schedule(info, p, n, name=name),
                         name=name, timeout=timeout)
