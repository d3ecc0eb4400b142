"""Lab 06's verdicts on plain data: what a traced allgather's result and messages say.

:mod:`mpilab.grading.allgather`'s checks run the student's allgather on the ranks; what
came back is judged here, in the caller, without MPI (``tests/test_grading_allgather.py``):

* whose block each wrong block of a recvbuf holds (:func:`block_problems`: rank r's block
  is ``r * OWNER + 0, 1, 2, ...``);
* the steps of a right result, from its messages: the ring's ``p - 1`` steps of one block
  each (:func:`check_ring_schedule`), ``ceil(log2 p)`` steps of the logarithmic
  algorithms (:func:`check_log_schedule`);
* that an algorithm refused what it cannot do, everywhere and before any message
  (:func:`check_refusals`), and that the Cython source writes the ring itself
  (:func:`check_ring_source`).

The lab's test cells reach these through :mod:`mpilab.grading.allgather`, which
re-exports them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from mpilab import grading, tracing
from mpilab.grading import traced

__all__ = ["OWNER", "block_problems", "check_ring_schedule", "check_log_schedule",
           "check_refusals", "check_ring_source"]

#: Rank r's block in the allgather checks is ``r * OWNER + 0, 1, 2, ...``: a value says
#: whose block it came from.
OWNER = 1_000_000


def block_problems(outs: Sequence[dict], n: int, limit: int = 5) -> list[str]:
    """Whose block each wrong block of an allgather's recvbuf holds, in words.

    ``"rank 2: block 0 holds rank 1's block, expected rank 0's"``, ``"rank 0: block 3
    was never written, expected rank 3's"``. Blocks are those of
    :func:`allgather_harness` (rank r's: ``r * 1_000_000 + 0, 1, ...``).

    Parameters
    ----------
    outs : sequence of dict
        The harness's output, rank by rank (``recv`` and ``ref``).
    n : int
        Elements per block.
    limit : int
        At most this many lines.

    Returns
    -------
    list of str
        One line per wrong block (never written, another rank's, or a mix), at most
        `limit`; empty when every block is right. Ranks whose recvbuf has the wrong
        shape are left out.
    """
    lines: list[str] = []
    p = len(outs)
    for r, o in enumerate(outs):
        got, want = np.asarray(o["recv"]), np.asarray(o["ref"])
        if n == 0 or got.shape != want.shape:
            continue
        for j in range(p):
            seg = got[j * n:(j + 1) * n]
            if np.array_equal(seg, want[j * n:(j + 1) * n]):
                continue
            owners = sorted({int(v) // OWNER for v in np.unique(seg) if v >= 0})
            if np.all(seg == -1):
                what = "was never written"
            elif (len(owners) == 1 and owners[0] < p
                  and np.array_equal(seg, want[owners[0] * n:(owners[0] + 1) * n])):
                what = f"holds rank {owners[0]}'s block"
            else:
                what = "holds a mix of blocks, or a shifted one"
            lines.append(f"rank {r}: block {j} {what}, expected rank {j}'s")
            if len(lines) >= limit:
                return lines
    return lines


def check_ring_schedule(info: dict, ranks: int, n: int, *, name: str = "allgather_ring",
                        itemsize: int = 8) -> int:
    """A right ring allgather's messages: to the right neighbour, ``p - 1`` steps, one block.

    Parameters
    ----------
    info : dict
        One rank's :func:`allgather_harness` output.
    ranks, n : int
        Ranks, and elements per block.
    name : str, optional
        What messages call the function (default "allgather_ring").
    itemsize : int, optional
        Bytes per element (default 8).

    Returns
    -------
    int
        The steps it took.
    """
    __tracebackhide__ = True
    label = f"{name} on {ranks} ranks"
    sched = traced.check_traced(info, label, "write the algorithm with point-to-point calls")
    by_step = tracing.format_schedule(sched)
    off = [m for m in sched if m["dst"] != (m["src"] + 1) % ranks]
    grading.expect(not off, f"{label}: " + "; ".join(
        f"rank {m['src']} sent to rank {m['dst']} in step {m['step']}" for m in off[:3])
        + f". In the ring every rank sends only to its right neighbour, (rank + 1) % {ranks}.\n"
        + by_step)
    took = tracing.steps(sched)
    grading.expect(took == ranks - 1, f"{label} took {took} steps; the ring takes "
                   f"p - 1 = {ranks - 1}, one block per rank in each.\n{by_step}")
    block = n * itemsize
    big = [m for m in sched if m["bytes"] != block]
    grading.expect(not big, f"{label}: rank {big[0]['src'] if big else 0} sent "
                   f"{big[0]['bytes'] if big else 0} B in step {big[0]['step'] if big else 0}; "
                   f"each message of the ring carries one block ({block} B here).\n{by_step}")
    return took


def check_log_schedule(info: dict, ranks: int, n: int, *, name: str, itemsize: int = 8) -> int:
    """A right Bruck or recursive-doubling allgather's messages: ``ceil(log2 p)`` steps.

    Every block must reach every other rank once: ``p (p - 1)`` blocks in all.

    Parameters
    ----------
    info, ranks, n, itemsize
        As for :func:`check_ring_schedule`.
    name : str
        What messages call the function (the student's, e.g. "allgather_bruck").

    Returns
    -------
    int
        The steps it took (at most ``ceil(log2 p)``).

    Raises
    ------
    mpilab.grading.CheckFailed
        When it took more than ``ceil(log2 p)`` steps, or moved more or fewer bytes than
        ``p (p - 1)`` blocks.
    """
    __tracebackhide__ = True
    label = f"{name} on {ranks} ranks"
    sched = traced.check_traced(info, label, "write the algorithm with point-to-point calls")
    by_step = tracing.format_schedule(sched)
    took, allowed = tracing.steps(sched), traced.log_steps(ranks)
    grading.expect(took <= allowed, f"{label} took {took} steps; it should take {allowed} "
                   f"(ceil(log2 {ranks})): the number of blocks a rank holds doubles in each "
                   "step.\n" + by_step)
    total, want = sum(m["bytes"] for m in sched), ranks * (ranks - 1) * n * itemsize
    grading.expect(total == want, f"{label} moved {total} B in all; each of the {ranks} blocks "
                   f"must reach each of the other {ranks - 1} ranks once: {want} B here (blocks "
                   f"of {n * itemsize} B). Does a step send more blocks than the receiver "
                   "still misses?\n" + by_step)
    return took


def check_refusals(outs: Sequence[Sequence], label: str, why: str) -> str:
    """Every rank raised ValueError, and before any message.

    Parameters
    ----------
    outs : sequence of (str, int)
        :func:`refuses_harness`'s output, rank by rank.
    label : str
        What the message calls the run.
    why : str
        Why it must refuse, e.g. ``"3 is not a power of two"``.

    Returns
    -------
    str
        What rank 0 raised, e.g. ``"ValueError: ..."``.
    """
    __tracebackhide__ = True
    wrong = [f"rank {r}: {what}" for r, (what, _) in enumerate(outs)
             if not what.startswith("ValueError")]
    grading.expect(not wrong, f"{label} should raise ValueError on every rank ({why}), "
                   "but:\n  " + "\n  ".join(wrong))
    sent = [f"rank {r} sent or received {k} message{'s' * (k != 1)}"
            for r, (_, k) in enumerate(outs) if k]
    grading.expect(not sent, f"{label}: raise before any message: " + "; ".join(sent))
    return outs[0][0]


def check_ring_source(source: str, *, name: str = "the ring") -> None:
    """Cython source of a ring: calls MPI's C functions, no library collective.

    Comments do not count.

    Parameters
    ----------
    source : str
        The student's Cython source.
    name : str, optional
        What the message calls it (default "the ring").

    Raises
    ------
    mpilab.grading.CheckFailed
        When `source` is not a string, calls no C send or receive (``MPI_Sendrecv``,
        ``MPI_Send`` ...), or calls a library collective.
    """
    __tracebackhide__ = True
    grading.expect(isinstance(source, str), f"the source of {name} should be a string")
    code = re.sub(r"#[^\n]*", "", source)
    grading.expect(bool(re.search(r"\bMPI_(Sendrecv|Send|Isend|Ssend)\s*\(", code)
                        and re.search(r"\bMPI_(Sendrecv|Recv|Irecv)\s*\(", code)),
                   f"{name} should call the C functions (MPI_Sendrecv, from mpi4py.libmpi), "
                   "not mpi4py's comm.Sendrecv")
    grading.expect(not re.search(r"\bMPI_(Allgather|Iallgather|Allgatherv|Bcast|Allreduce)\s*\(",
                                 code), "write the ring yourself: no library collective")
