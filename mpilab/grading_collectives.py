"""Labs 05 and 06's graded checks (broadcast, allreduce, allgather), on top of mpilab.grading.

The labs' test cells call these functions; the checks, their harnesses and their messages
live here, so grading policy changes in one place and students read short test cells::

    from mpilab import grading_collectives as C
    C.check_bcast(bcast_binomial, [(4, 10, 1), (4, 1001, 3, "int32")])
    took = C.check_bcast_steps(bcast_binomial, [(4, 1)])   # [2]

Every check runs the student's function through a harness of this module on the
notebook's cluster (:func:`mpilab.grading.run_on_ranks`, with a timeout). The harness runs
the library's own collective (``comm.Bcast``, ``comm.Allreduce``, ``comm.Allgather``) on
the same data for the reference, and hands the student's function a
:class:`mpilab.tracing.TracingComm`, so each check gets both every rank's buffer and the
messages that were really sent:

1. **the result** is compared rank by rank with the library's (``rank 2 holds a value
   that differs at ...``), and a wrong one is explained: which ranks' data a wrong sum is
   made of (:func:`sum_problems`), whose block each wrong block of an allgather holds
   (:func:`block_problems`), who sent to whom (:func:`messages_hint`);
2. **the steps** (only of a right result) are counted from the messages and compared with
   the algorithm's: :func:`check_bcast_schedule`, :func:`check_allreduce_schedule`,
   :func:`check_ring_schedule`, :func:`check_log_schedule` name the rank, the block and
   the step that is off.

The pure-Python parts (the ``check_*_schedule`` functions, :func:`check_refusals`,
:func:`check_ring_source`, :func:`block_problems`, ...) take plain data, so they can be
tested on hand-made outputs without MPI.

A function that timed out once (a try-it cell counts) is not run again by later checks
(:mod:`mpilab.grading`); the checks here then say so in the student's terms and point at
the cell that shows where the ranks were stuck (:func:`skipped_note`).

Where it runs
-------------
As in :mod:`mpilab.grading_halo`: module-level harnesses the ranks import from disk,
references computed in the caller, which at autograde time is the grader's kernel.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from mpilab import build, grading, tracing

__all__ = [
    "bcast_harness",
    "allreduce_harness",
    "allgather_harness",
    "refuses_harness",
    "cython_harness",
    "time_allgather",
    "log_steps",
    "butterfly_steps",
    "messages_hint",
    "sum_problems",
    "block_problems",
    "skipped_note",
    "check_traced",
    "check_bcast_schedule",
    "check_allreduce_schedule",
    "check_ring_schedule",
    "check_log_schedule",
    "check_refusals",
    "check_ring_source",
    "check_bcast",
    "check_bcast_steps",
    "check_allreduce",
    "check_allreduce_steps",
    "check_allgather",
    "check_ring_steps",
    "check_log_steps",
    "check_refuses",
    "check_compiled_ring",
    "check_compiled_refuses",
    "time_compiled",
    "check_cython_ring",
    "show_trace",
]

#: Rank r's block in the allgather checks is ``r * OWNER + 0, 1, 2, ...``: a value says
#: whose block it came from.
OWNER = 1_000_000
UNTOUCHED = -99  # what an allreduce check's recvbuf holds before the call


# ---------------------------------------------------------------------------------------
# engine side: the checks' own harnesses (imported from this file by the engines)


def bcast_harness(comm, bcast: Callable, n: int, root: int, dtype: str) -> dict:
    """On every rank: ``comm.Bcast`` and `bcast` from the same start; `bcast` is traced.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The ranks of the check.
    bcast : callable
        The student's ``bcast(comm, buf, root)``, called with a
        :class:`mpilab.tracing.TracingComm`; what it returns is ignored.
    n : int
        Elements of the buffer.
    root : int
        The root's rank.
    dtype : str
        NumPy type of the buffer, e.g. ``"float64"``, ``"int32"``.

    Returns
    -------
    dict
        ``buf`` (after `bcast`), ``ref`` (after ``comm.Bcast``), and the tracer's
        ``schedule``, ``error`` and ``untraced`` (:func:`mpilab.tracing.trace`).
    """
    data = ((np.arange(n) * 7 + 3 + 10 * root) % 251).astype(dtype)
    start = data if comm.Get_rank() == root else np.full(n, -1, dtype=dtype)
    ref = start.copy()
    comm.Bcast(ref, root=root)
    buf = start.copy()
    out = tracing.trace(comm, bcast, buf, root)
    return {"buf": buf, "ref": ref, "schedule": out["schedule"], "error": out["error"],
            "untraced": out["untraced"]}


def allreduce_harness(comm, allreduce: Callable, n: int, dtype: str) -> dict:
    """On every rank: ``comm.Allreduce`` and `allreduce` on the same data, traced.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The ranks of the check.
    allreduce : callable
        The student's ``allreduce(comm, sendbuf, recvbuf)`` (a sum), called with a
        :class:`mpilab.tracing.TracingComm`.
    n : int
        Elements per rank.
    dtype : str
        NumPy type of the buffers. Floating-point data are not integers, so sums in
        another order may round differently (the check compares them with a tolerance).

    Returns
    -------
    dict
        ``recv`` (the student's recvbuf, which starts as -99 everywhere), ``ref`` (after
        ``comm.Allreduce``), ``send`` (this rank's data), ``unchanged`` (whether sendbuf
        was left as it was), and the tracer's ``schedule``, ``error`` and ``untraced``.
    """
    r = comm.Get_rank()
    send = ((np.arange(n) * (r + 2) + 37 * r) % 101 - 50).astype(dtype)
    if send.dtype.kind == "f":
        send += 1 / (r + 3)
    kept = send.copy()
    ref = np.empty_like(send)
    comm.Allreduce(send, ref)
    recv = np.full(n, UNTOUCHED, dtype=dtype)
    out = tracing.trace(comm, allreduce, send, recv)
    return {"recv": recv, "ref": ref, "send": kept, "unchanged": bool(np.array_equal(send, kept)),
            "schedule": out["schedule"], "error": out["error"], "untraced": out["untraced"]}


def allgather_harness(comm, allgather: Callable, n: int, dtype: str) -> dict:
    """On every rank: ``comm.Allgather`` and `allgather` on the same blocks, traced.

    Rank r's block is ``r * 1_000_000 + 0, 1, 2, ...`` (:data:`OWNER`): a value says whose
    block it came from.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The ranks of the check.
    allgather : callable
        The student's ``allgather(comm, sendbuf, recvbuf)``, called with a
        :class:`mpilab.tracing.TracingComm`.
    n : int
        Elements per block.
    dtype : str
        NumPy type of the buffers.

    Returns
    -------
    dict
        ``recv`` (the student's recvbuf, which starts as -1 everywhere), ``ref`` (after
        ``comm.Allgather``), ``unchanged`` (whether sendbuf was left as it was) and the
        tracer's ``schedule``, ``error`` and ``untraced``.
    """
    r, p = comm.Get_rank(), comm.Get_size()
    send = (r * OWNER + np.arange(n)).astype(dtype)
    kept = send.copy()
    ref = np.empty(p * n, dtype=dtype)
    comm.Allgather(send, ref)
    recv = np.full(p * n, -1, dtype=dtype)
    out = tracing.trace(comm, allgather, send, recv)
    return {"recv": recv, "ref": ref, "unchanged": bool(np.array_equal(send, kept)),
            "schedule": out["schedule"], "error": out["error"], "untraced": out["untraced"]}


def refuses_harness(comm, allgather: Callable, n: int) -> tuple[str, int]:
    """On every rank: what ``allgather(comm, zeros(n), zeros(p * n))`` does, in words.

    Returns
    -------
    (str, int)
        ``"ValueError: <message>"``, ``"<OtherError>: <message>"`` or ``"no error"``, and
        how many messages this rank sent or received before that.
    """
    tc = tracing.TracingComm(comm)
    try:
        allgather(tc, np.zeros(n), np.zeros(comm.Get_size() * n))
    except ValueError as exc:
        return f"ValueError: {exc}", len(tc.events)
    except Exception as exc:  # noqa: BLE001 - any other error is reported as such
        return f"{type(exc).__name__}: {exc}", len(tc.events)
    return "no error", len(tc.events)


def cython_harness(comm, kernel: Callable, n: int, extra: int) -> dict:
    """On every rank: ``comm.Allgather`` and a compiled ``kernel(comm, sendbuf, recvbuf)``.

    Float64 blocks as in :func:`allgather_harness`. With `extra` != 0 recvbuf has `extra`
    numbers too many, which the kernel must refuse with ValueError.

    Returns
    -------
    dict
        ``recv``, ``ref`` and ``raised`` (``"ValueError: ..."`` or None).
    """
    r, p = comm.Get_rank(), comm.Get_size()
    send = r * OWNER + np.arange(n, dtype=np.float64)
    ref = np.empty(p * n)
    comm.Allgather(send, ref)
    recv = np.full(p * n + extra, -1.0)
    try:
        kernel(comm, send, recv)
    except ValueError as exc:
        return {"recv": recv, "ref": ref, "raised": f"ValueError: {exc}"}
    return {"recv": recv, "ref": ref, "raised": None}


def time_allgather(comm, impl: Callable | None, n: int, iters: int,
                   reps: int) -> tuple[list[float], bool]:
    """Time ``impl(comm, sendbuf, recvbuf)`` (None: ``comm.Allgather``), course protocol.

    A warm-up call, then per repetition a barrier, `iters` calls between two
    ``MPI.Wtime()``, and the slowest rank's time per call.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The ranks to time on.
    impl : callable or None
        The allgather to time; None times the library's ``comm.Allgather``.
    n : int
        Float64 numbers per block.
    iters, reps : int
        Calls per repetition, repetitions.

    Returns
    -------
    (list of float, bool)
        Seconds per call of every repetition (the same on every rank), and whether the
        result of the last call was right on this rank.
    """
    from mpi4py import MPI

    r, p = comm.Get_rank(), comm.Get_size()
    send = r * OWNER + np.arange(n, dtype=np.float64)
    recv = np.full(p * n, -1.0)
    if impl is None:
        def call():
            comm.Allgather(send, recv)
    else:
        def call():
            impl(comm, send, recv)
    call()
    times = []
    for _ in range(reps):
        comm.Barrier()
        t0 = MPI.Wtime()
        for _ in range(iters):
            call()
        times.append(comm.allreduce((MPI.Wtime() - t0) / iters, op=MPI.MAX))
    want = (np.arange(p)[:, None] * OWNER + np.arange(n)).ravel()
    return times, bool(np.array_equal(recv, want))


# ---------------------------------------------------------------------------------------
# pure Python: step counts, and what is wrong in words


def log_steps(p: int) -> int:
    """``ceil(log2 p)``, exactly: the steps of a binomial tree or Bruck's allgather."""
    return (int(p) - 1).bit_length()


def butterfly_steps(p: int) -> tuple[int, str]:
    """Steps of a butterfly allreduce on `p` ranks, and why, for a message.

    ``log2 p`` for a power of two; otherwise ``log2 pof2`` plus one step to fold the
    extra ranks in and one to hand them the result (3 on 3 ranks, 4 on 6).
    """
    pof2 = 1 << (int(p).bit_length() - 1)
    if pof2 == p:
        return pof2.bit_length() - 1, f"log2 {p}"
    return (pof2.bit_length() + 1, f"log2 {pof2} for the butterfly on {pof2} ranks, 1 to fold "
            f"the other {p - pof2} in and 1 to hand them the result")


def _ranks(xs: Iterable[int]) -> str:
    return ", ".join(map(str, xs))


def messages_hint(info: dict, p: int, root: int | None = None) -> str:
    """Who sent to whom, step by step (from the tracer), and who got nothing.

    Parameters
    ----------
    info : dict
        One rank's harness output: ``schedule`` and ``error`` of the tracer.
    p : int
        Ranks of the check.
    root : int, optional
        A broadcast's root: ranks other than the root that no message reached are named.
    """
    if info["error"]:
        return f"The tracer could not pair up the messages: {info['error']}"
    sched = info["schedule"]
    text = "Messages, step by step (from the tracer):\n" + tracing.format_schedule(sched)
    if root is not None:
        missing = sorted(set(range(p)) - {m["dst"] for m in sched} - {root})
        if missing:
            text += f"\nNo message reached rank{'s' * (len(missing) > 1)} {_ranks(missing)}."
    return text


def sum_problems(outs: Sequence[dict], limit: int = 4) -> list[str]:
    """Which ranks' data each wrong allreduce result is made of, in words.

    Tries every combination of 0, 1 or 2 times each rank's data (on the first 500
    elements): ``"rank 1 holds rank 1: missing rank 0, 2, 3"``, ``"rank 0 holds rank 0 +
    2 × rank 1 + rank 2: counted twice: rank 1"``.

    Parameters
    ----------
    outs : sequence of dict
        :func:`allreduce_harness`'s output, rank by rank (``send``, ``recv``, ``ref``).
    limit : int
        At most this many lines.

    Returns
    -------
    list of str
        One line per wrong rank whose result is such a combination; empty when every
        rank is right or no combination fits.
    """
    sends = [np.asarray(o["send"][:500], dtype=float) for o in outs]
    lines = []
    for r, o in enumerate(outs):
        got = np.asarray(o["recv"][:500], dtype=float)
        if got.shape != sends[r].shape or np.allclose(
                got, np.asarray(o["ref"][:500], dtype=float), rtol=1e-9, atol=1e-9):
            continue
        for coef in itertools.product(range(3), repeat=len(sends)):
            if not any(coef) or not np.allclose(
                    got, sum(c * s for c, s in zip(coef, sends, strict=True)),
                    rtol=1e-9, atol=1e-9):
                continue
            parts = [f"{c} × rank {k}" if c > 1 else f"rank {k}" for k, c in enumerate(coef)
                     if c]
            missing = [k for k, c in enumerate(coef) if not c]
            twice = [k for k, c in enumerate(coef) if c > 1]
            lines.append(f"rank {r} holds " + " + ".join(parts)
                         + (f": missing rank {_ranks(missing)}" if missing else "")
                         + (f"{';' if missing else ':'} counted twice: rank {_ranks(twice)}"
                            if twice else ""))
            break
        if len(lines) >= limit:
            break
    return lines


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


def skipped_note(name: str) -> str:
    """What a check adds when `name` is skipped because it timed out before."""
    return (f"(That earlier run may have been a try-it cell above, not a check: the first "
            f"cell where {name} timed out shows the line each rank was stuck on.)")


@contextlib.contextmanager
def _explained(name: str) -> Iterator[None]:
    """Re-raise :class:`mpilab.grading.Skipped` with :func:`skipped_note` added."""
    __tracebackhide__ = True
    try:
        yield
    except grading.Skipped as exc:
        raise type(exc)(f"{exc}\n{skipped_note(name)}") from None


def _name(func: Callable, name: str | None) -> str:
    return name or getattr(func, "__name__", None) or "the function"


def check_traced(info: dict, label: str, how: str) -> None:
    """No library collective was called, and the traced messages pair up.

    Parameters
    ----------
    info : dict
        One rank's harness output (``untraced``, ``error``).
    label : str
        What the message calls the run, e.g. ``"bcast_binomial on 4 ranks, root 1"``.
    how : str
        What to build it from instead, e.g. ``"build the tree from Send and Recv"``.
    """
    __tracebackhide__ = True
    calls = sorted({name for _, name in info["untraced"]})
    grading.expect(not calls, f"{label} called comm.{', comm.'.join(calls)}: {how} (the "
                   "tracer cannot see the messages of a library collective)")
    grading.expect(info["error"] is None,
                   f"{label}: the messages do not pair up: {info['error']}")


def check_bcast_schedule(info: dict, p: int, root: int, *,
                         name: str = "bcast_binomial") -> int:
    """A right broadcast's messages: a binomial tree's ``ceil(log2 p)`` steps, no extra.

    Parameters
    ----------
    info : dict
        One rank's :func:`bcast_harness` output (``schedule``, ``error``, ``untraced``).
    p, root : int
        Ranks and root of the run.
    name : str
        What messages call the function.

    Returns
    -------
    int
        The steps it took.

    Raises
    ------
    mpilab.grading.CheckFailed
        Naming the steps taken and allowed with the schedule, a rank no message reached,
        or a rank that received the data twice (or the root, once).
    """
    __tracebackhide__ = True
    label = f"{name} on {p} ranks, root {root}"
    check_traced(info, label, "build the tree from Send and Recv")
    sched = info["schedule"]
    took, allowed = tracing.steps(sched), log_steps(p)
    hint = ""
    if {m["src"] for m in sched} == {root}:
        hint = ("\nOnly the root sends: that is the linear broadcast. In a binomial tree every "
                "rank that has the data sends it on, so the ranks holding it double each step.")
    grading.expect(took <= allowed, f"{label} took {took} steps; a binomial tree needs only "
                   f"{allowed} (ceil(log2 {p})). Who sent to whom, step by step:\n"
                   f"{tracing.format_schedule(sched)}" + hint)
    counts: dict[int, int] = {}
    for m in sched:
        counts[int(m["dst"])] = counts.get(int(m["dst"]), 0) + 1
    nothing = sorted(set(range(p)) - set(counts) - {root})
    grading.expect(not nothing, f"{label}: no message reached rank {_ranks(nothing)} through "
                   "comm, yet it holds the data: send and receive with the comm you are "
                   "given, nothing else.")
    twice = {r: c for r, c in counts.items() if c > 1 or r == root}
    said = [f"{'the root, ' if r == root else ''}rank {r}, received the data {c} time"
            f"{'s' * (c > 1)}" for r, c in sorted(twice.items())]
    grading.expect(not twice, f"{label}: " + "; ".join(said) + ". In a tree every rank but "
                   "the root receives it exactly once.\n" + tracing.format_schedule(sched))
    return took


def check_allreduce_schedule(info: dict, p: int, *, name: str = "allreduce_butterfly") -> int:
    """A right allreduce's messages: a butterfly's steps (:func:`butterfly_steps`).

    Parameters
    ----------
    info : dict
        One rank's :func:`allreduce_harness` output.
    p : int
        Ranks of the run.
    name : str
        What messages call the function.

    Returns
    -------
    int
        The steps it took.
    """
    __tracebackhide__ = True
    label = f"{name} on {p} ranks"
    check_traced(info, label, "build the butterfly from Sendrecv")
    sched = info["schedule"]
    allowed, why = butterfly_steps(p)
    nothing = sorted(set(range(p)) - {m["dst"] for m in sched})
    grading.expect(not nothing, f"{label}: no message reached rank {_ranks(nothing)} through "
                   "comm, yet it holds the sum: send and receive with the comm you are "
                   "given, nothing else.")
    took = tracing.steps(sched)
    grading.expect(took <= allowed, f"{label} took {took} steps; the butterfly needs only "
                   f"{allowed} ({why}). Who sent to whom, step by step:\n"
                   f"{tracing.format_schedule(sched)}\nReducing to one rank and broadcasting "
                   "back takes about twice as many steps: in the butterfly every rank sends "
                   "and receives in every step.")
    return took


def check_ring_schedule(info: dict, p: int, n: int, *, name: str = "allgather_ring",
                        itemsize: int = 8) -> int:
    """A right ring allgather's messages: to the right neighbour, ``p - 1`` steps, one block.

    Parameters
    ----------
    info : dict
        One rank's :func:`allgather_harness` output.
    p, n : int
        Ranks, and elements per block.
    name : str
        What messages call the function.
    itemsize : int
        Bytes per element.

    Returns
    -------
    int
        The steps it took.
    """
    __tracebackhide__ = True
    label = f"{name} on {p} ranks"
    check_traced(info, label, "write the algorithm with point-to-point calls")
    sched = info["schedule"]
    by_step = tracing.format_schedule(sched)
    off = [m for m in sched if m["dst"] != (m["src"] + 1) % p]
    grading.expect(not off, f"{label}: " + "; ".join(
        f"rank {m['src']} sent to rank {m['dst']} in step {m['step']}" for m in off[:3])
        + f". In the ring every rank sends only to its right neighbour, (rank + 1) % {p}.\n"
        + by_step)
    took = tracing.steps(sched)
    grading.expect(took == p - 1, f"{label} took {took} steps; the ring takes p - 1 = {p - 1}, "
                   f"one block per rank in each.\n{by_step}")
    block = n * itemsize
    big = [m for m in sched if m["bytes"] != block]
    grading.expect(not big, f"{label}: rank {big[0]['src'] if big else 0} sent "
                   f"{big[0]['bytes'] if big else 0} B in step {big[0]['step'] if big else 0}; "
                   f"each message of the ring carries one block ({block} B here).\n{by_step}")
    return took


def check_log_schedule(info: dict, p: int, n: int, *, name: str, itemsize: int = 8) -> int:
    """A right Bruck or recursive-doubling allgather's messages: ``ceil(log2 p)`` steps.

    Every block must reach every other rank once: ``p (p - 1)`` blocks in all.

    Parameters
    ----------
    info : dict
        One rank's :func:`allgather_harness` output.
    p, n : int
        Ranks, and elements per block.
    name : str
        What messages call the function.
    itemsize : int
        Bytes per element.

    Returns
    -------
    int
        The steps it took.
    """
    __tracebackhide__ = True
    label = f"{name} on {p} ranks"
    check_traced(info, label, "write the algorithm with point-to-point calls")
    sched = info["schedule"]
    by_step = tracing.format_schedule(sched)
    took, allowed = tracing.steps(sched), log_steps(p)
    grading.expect(took <= allowed, f"{label} took {took} steps; it should take {allowed} "
                   f"(ceil(log2 {p})): the number of blocks a rank holds doubles in each "
                   "step.\n" + by_step)
    total, want = sum(m["bytes"] for m in sched), p * (p - 1) * n * itemsize
    grading.expect(total == want, f"{label} moved {total} B in all; each of the {p} blocks "
                   f"must reach each of the other {p - 1} ranks once: {want} B here (blocks "
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


# ---------------------------------------------------------------------------------------
# cases


def _cases(cases: Iterable, fields: str, defaults: tuple = ()) -> list[tuple]:
    """Tuples of `fields` (e.g. "p n root dtype"), trailing ones from `defaults`."""
    names = fields.split()
    out = []
    for case in cases:
        case = tuple(case) if isinstance(case, (tuple, list)) else (case,)
        need = len(names) - len(defaults)
        if not need <= len(case) <= len(names):
            raise ValueError(f"a case is ({', '.join(names)}), with the last "
                             f"{len(defaults)} optional; got {case!r}")
        case = case + defaults[len(case) - need:]
        p = case[0]
        if isinstance(p, bool) or not isinstance(p, int) or p < 1:
            raise ValueError(f"ranks must be a positive integer, got {p!r}")
        if "root" in names and not 0 <= case[names.index("root")] < p:
            raise ValueError(f"root {case[names.index('root')]!r} is not a rank of {p}")
        out.append(case)
    return out


def _bcast_run(bcast, p, n, root, dtype, name, timeout):
    __tracebackhide__ = True
    with _explained(name):
        out = grading.run_on_ranks(bcast_harness, bcast, n, root, str(dtype), ranks=p,
                                   timeout=timeout, blame=bcast)
    grading.expect_per_rank(
        [o["buf"] for o in out], [o["ref"] for o in out], what="holds",
        label=f"{name} on {p} ranks, root {root}, {n:,} {dtype}",
        known={"the root's data": out[root]["ref"],
               "its own starting buffer (nothing arrived)": np.full(n, -1, dtype=dtype)},
        hint=messages_hint(out[0], p, root))
    return out


def _allreduce_run(allreduce, p, n, dtype, name, timeout):
    __tracebackhide__ = True
    with _explained(name):
        out = grading.run_on_ranks(allreduce_harness, allreduce, n, str(dtype), ranks=p,
                                   timeout=timeout, blame=allreduce)
    label = f"{name} on {p} ranks, {n:,} {dtype}"
    changed = [r for r, o in enumerate(out) if not o["unchanged"]]
    grading.expect(not changed, f"{label}: sendbuf changed on rank {_ranks(changed)}: leave it "
                   "as it is and work in recvbuf (comm.Allreduce does not touch sendbuf)")
    exact = np.dtype(dtype).kind != "f"
    hint = "\n".join(h for h in ("\n".join(sum_problems(out)), messages_hint(out[0], p)) if h)
    grading.expect_per_rank(
        [o["recv"] for o in out], [o["ref"] for o in out], what="holds", label=label,
        rtol=None if exact else 1e-12, atol=0.0 if exact else 1e-9,
        known={f"its recvbuf untouched ({UNTOUCHED} everywhere)":
               np.full(n, UNTOUCHED, dtype)}, hint=hint)
    return out


def _allgather_run(allgather, p, n, dtype, name, timeout):
    __tracebackhide__ = True
    with _explained(name):
        out = grading.run_on_ranks(allgather_harness, allgather, n, str(dtype), ranks=p,
                                   timeout=timeout, blame=allgather)
    label = f"{name} on {p} ranks, {n:,} {dtype} per rank"
    changed = [r for r, o in enumerate(out) if not o["unchanged"]]
    grading.expect(not changed, f"{label}: sendbuf changed on rank {_ranks(changed)}: leave it "
                   "as it is (comm.Allgather does not touch it)")
    hint = block_problems(out, n) + [messages_hint(out[0], p)]
    grading.expect_per_rank([o["recv"] for o in out], [o["ref"] for o in out], what="holds",
                            label=label, hint="\n".join(hint))
    return out


# ---------------------------------------------------------------------------------------
# the graded checks: lab 05


def check_bcast(bcast: Callable, cases: Iterable, *, name: str | None = None,
                timeout: float = 10) -> None:
    """Every rank holds the root's data after `bcast`, as after ``comm.Bcast``.

    Parameters
    ----------
    bcast : callable
        ``bcast(comm, buf, root)``, in place, run on every rank.
    cases : iterable of tuple
        ``(p, n, root)`` or ``(p, n, root, dtype)``: ranks, elements, root, NumPy type
        (``"float64"`` by default).
    name : str, optional
        What messages call `bcast`; its ``__name__`` by default.
    timeout : float
        Seconds before a case fails as stuck (deadlock or endless loop).

    Raises
    ------
    mpilab.grading.CheckFailed
        Naming each wrong rank and what it holds (the root's data, its own starting
        buffer, ...), with the messages step by step and the ranks none reached.
    """
    __tracebackhide__ = True
    name = _name(bcast, name)
    for p, n, root, dtype in _cases(cases, "p n root dtype", ("float64",)):
        _bcast_run(bcast, p, n, root, dtype, name, timeout)


def check_bcast_steps(bcast: Callable, cases: Iterable, *, name: str | None = None,
                      timeout: float = 10) -> list[int]:
    """A right broadcast of 5 float64 (:func:`check_bcast`), then its steps.

    Parameters
    ----------
    bcast : callable
        ``bcast(comm, buf, root)``.
    cases : iterable of (int, int)
        ``(p, root)``.
    name, timeout
        As for :func:`check_bcast`.

    Returns
    -------
    list of int
        The steps of each case.
    """
    __tracebackhide__ = True
    name = _name(bcast, name)
    took = []
    for p, root in _cases(cases, "p root"):
        info = _bcast_run(bcast, p, 5, root, "float64", name, timeout)[0]
        took.append(check_bcast_schedule(info, p, root, name=name))
    return took


def check_allreduce(allreduce: Callable, cases: Iterable, *, name: str | None = None,
                    timeout: float = 10) -> None:
    """Every rank holds the sum of all sendbufs after `allreduce`, as after comm.Allreduce.

    Parameters
    ----------
    allreduce : callable
        ``allreduce(comm, sendbuf, recvbuf)``, run on every rank.
    cases : iterable of tuple
        ``(p, n)`` or ``(p, n, dtype)``: ranks, elements, NumPy type (``"float64"`` by
        default; floats are compared within 1e-12 relative, integers exactly).
    name, timeout
        As for :func:`check_bcast`.

    Raises
    ------
    mpilab.grading.CheckFailed
        When sendbuf changed, or naming each wrong rank with which ranks' data its
        result is made of (:func:`sum_problems`) and the messages step by step.
    """
    __tracebackhide__ = True
    name = _name(allreduce, name)
    for p, n, dtype in _cases(cases, "p n dtype", ("float64",)):
        _allreduce_run(allreduce, p, n, dtype, name, timeout)


def check_allreduce_steps(allreduce: Callable, ranks: Iterable[int], *,
                          name: str | None = None, timeout: float = 10) -> list[int]:
    """A right allreduce of 6 float64 (:func:`check_allreduce`), then its steps.

    Parameters
    ----------
    allreduce : callable
        ``allreduce(comm, sendbuf, recvbuf)``.
    ranks : iterable of int
        The rank counts to check.
    name, timeout
        As for :func:`check_bcast`.

    Returns
    -------
    list of int
        The steps on each rank count.
    """
    __tracebackhide__ = True
    name = _name(allreduce, name)
    took = []
    for (p,) in _cases(ranks, "p"):
        info = _allreduce_run(allreduce, p, 6, "float64", name, timeout)[0]
        took.append(check_allreduce_schedule(info, p, name=name))
    return took


# ---------------------------------------------------------------------------------------
# the graded checks: lab 06


def check_allgather(allgather: Callable, cases: Iterable, *, name: str | None = None,
                    timeout: float = 10) -> None:
    """Every rank's recvbuf holds all blocks in rank order, as after ``comm.Allgather``.

    Parameters
    ----------
    allgather : callable
        ``allgather(comm, sendbuf, recvbuf)``, run on every rank.
    cases : iterable of tuple
        ``(p, n)`` or ``(p, n, dtype)``: ranks, elements per block, NumPy type
        (``"float64"`` by default).
    name, timeout
        As for :func:`check_bcast`.

    Raises
    ------
    mpilab.grading.CheckFailed
        When sendbuf changed, or naming each wrong rank and block and whose block it
        holds (:func:`block_problems`), with the messages step by step.
    """
    __tracebackhide__ = True
    name = _name(allgather, name)
    for p, n, dtype in _cases(cases, "p n dtype", ("float64",)):
        _allgather_run(allgather, p, n, dtype, name, timeout)


def check_ring_steps(allgather: Callable, ranks: Iterable[int], *, n: int = 3,
                     name: str | None = None, timeout: float = 10) -> list[int]:
    """A right allgather of `n` float64 per rank, then a ring's steps (right neighbour only).

    Parameters
    ----------
    allgather : callable
        ``allgather(comm, sendbuf, recvbuf)``.
    ranks : iterable of int
        The rank counts to check.
    n : int
        Float64 per block (each message must carry one block).
    name, timeout
        As for :func:`check_bcast`.

    Returns
    -------
    list of int
        The steps on each rank count (:func:`check_ring_schedule`).
    """
    __tracebackhide__ = True
    name = _name(allgather, name)
    took = []
    for (p,) in _cases(ranks, "p"):
        info = _allgather_run(allgather, p, n, "float64", name, timeout)[0]
        took.append(check_ring_schedule(info, p, n, name=name))
    return took


def check_log_steps(allgather: Callable, ranks: Iterable[int], *, n: int = 3,
                    name: str | None = None, timeout: float = 10) -> list[int]:
    """A right allgather, then ``ceil(log2 p)`` steps moving ``p (p - 1)`` blocks in all.

    For Bruck's algorithm and recursive doubling.

    Parameters
    ----------
    allgather : callable
        ``allgather(comm, sendbuf, recvbuf)``.
    ranks : iterable of int
        The rank counts to check.
    n : int
        Float64 per block.
    name, timeout
        As for :func:`check_bcast`.

    Returns
    -------
    list of int
        The steps on each rank count (:func:`check_log_schedule`).
    """
    __tracebackhide__ = True
    name = _name(allgather, name)
    took = []
    for (p,) in _cases(ranks, "p"):
        info = _allgather_run(allgather, p, n, "float64", name, timeout)[0]
        took.append(check_log_schedule(info, p, n, name=name))
    return took


def check_refuses(allgather: Callable, sizes: Iterable[int], *, ranks: int = 3,
                  name: str | None = None, timeout: float = 10) -> str:
    """On `ranks` ranks (not a power of two), `allgather` raises ValueError everywhere, first.

    Parameters
    ----------
    allgather : callable
        ``allgather(comm, sendbuf, recvbuf)``.
    sizes : iterable of int
        Elements per block of each run.
    ranks : int
        Ranks of the runs.
    name, timeout
        As for :func:`check_bcast`.

    Returns
    -------
    str
        What rank 0 raised in the last run.
    """
    __tracebackhide__ = True
    name = _name(allgather, name)
    said = ""
    for n in sizes:
        with _explained(name):
            out = grading.run_on_ranks(refuses_harness, allgather, n, ranks=ranks,
                                       timeout=timeout, blame=allgather)
        said = check_refusals(out, f"{name} on {ranks} ranks, {n} float64 per rank",
                              f"{ranks} is not a power of two")
    return said


def check_compiled_ring(kernel: Callable, cases: Iterable, *, name: str,
                        timeout: float = 10) -> None:
    """A compiled ``kernel(comm, sendbuf, recvbuf)`` of float64 equals ``comm.Allgather``.

    Parameters
    ----------
    kernel : mpilab.build.CompiledFunction
        The compiled ring.
    cases : iterable of (int, int)
        ``(p, n)``: ranks, float64 per block.
    name : str
        What messages call the kernel, e.g. ``"allgather_cy.allgather_ring"``.
    timeout : float
        Seconds before a case fails as stuck; the message then says that the line shown
        is where Python called the compiled function.
    """
    __tracebackhide__ = True
    for p, n in _cases(cases, "p n"):
        label = f"{name} on {p} ranks, {n:,} float64 per rank"
        try:
            with _explained(name):
                out = grading.run_on_ranks(cython_harness, kernel, n, 0, ranks=p,
                                           timeout=timeout, blame=kernel)
        except grading.Skipped:
            raise
        except grading.TimedOut as exc:  # the stack dump stops where Python called into C
            raise type(exc)(f"{exc}\nThe line above is only where Python called the compiled "
                            f"function; the ranks were stuck inside it ({label}). Does every "
                            "rank call MPI_Send before MPI_Recv? Past the eager limit that "
                            "deadlocks; MPI_Sendrecv pairs the two.") from None
        raised = [f"rank {r}: {o['raised']}" for r, o in enumerate(out) if o["raised"]]
        grading.expect(not raised, f"{label} raised:\n  " + "\n  ".join(raised))
        grading.expect_per_rank([o["recv"] for o in out], [o["ref"] for o in out],
                                what="holds", label=label,
                                hint="\n".join(block_problems(out, n)))


def check_compiled_refuses(kernel: Callable, p: int, n: int, *, name: str,
                           timeout: float = 10) -> None:
    """A recvbuf one number too long makes the compiled kernel raise ValueError everywhere.

    Parameters
    ----------
    kernel : mpilab.build.CompiledFunction
        The compiled ring.
    p, n : int
        Ranks, and float64 per block.
    name : str
        What the message calls the kernel.
    timeout : float
        Seconds before the run fails as stuck.
    """
    __tracebackhide__ = True
    with _explained(name):
        out = grading.run_on_ranks(cython_harness, kernel, n, 1, ranks=p, timeout=timeout,
                                   blame=kernel)
    quiet = [r for r, o in enumerate(out) if o["raised"] is None]
    grading.expect(not quiet, f"{name} on {p} ranks with a recvbuf of {p * n + 1} numbers for "
                   f"{p} blocks of {n}: ranks {_ranks(quiet)} did not raise ValueError. Keep "
                   "the given checks before any MPI call.")


def time_compiled(kernel: Callable, *, name: str, n: int = 1024, iters: int = 5,
                  reps: int = 3, timeout: float = 10) -> float:
    """Lenient: the kernel runs when timed and stays right; its times are real numbers.

    The time itself is never judged. Returns the fastest repetition, in µs per call.
    """
    __tracebackhide__ = True
    with _explained(name):
        times, right = grading.run_on_ranks(time_allgather, kernel, n, iters, reps,
                                            timeout=timeout, blame=kernel)[0]
    grading.expect(right, f"{name} gave a wrong result when called {iters * reps + 1} times "
                   "in a row")
    grading.expect(type(times) is list and len(times) == reps
                   and all(type(x) is float and 0 < x < 10 for x in times),
                   f"the timings of {name} are not plausible: {times}")
    return min(times) * 1e6


def check_cython_ring(source: str, cases: Iterable, *, refuse: tuple[int, int] = (4, 5),
                      module: str = "allgather_cy", function: str = "allgather_ring",
                      timeout: float = 10) -> float:
    """Lab 06 Part D: compile `source`, check the ring it defines, time it (not graded).

    Parameters
    ----------
    source : str
        The student's Cython source (``ALLGATHER_PYX``); it must call MPI's C functions
        and no library collective (:func:`check_ring_source`).
    cases : iterable of (int, int)
        ``(p, n)`` for :func:`check_compiled_ring`.
    refuse : (int, int)
        ``(p, n)`` for :func:`check_compiled_refuses`.
    module, function : str
        The module's name for :func:`mpilab.build.cython` (the same name finds the
        notebook's cached build), and the function checked.
    timeout : float
        Seconds before a run fails as stuck.

    Returns
    -------
    float
        The fastest time per call of blocks of 8 KiB on the cluster's ranks, in µs
        (:func:`time_compiled`): shown, never graded.
    """
    __tracebackhide__ = True
    name = f"{module}.{function}"
    check_ring_source(source, name=name)
    try:
        kernel = getattr(build.cython(source, name=module), function)
    except build.CompileError as exc:
        raise grading.CheckFailed(f"the source does not compile:\n{exc}") from None
    grading.expect(type(kernel).__name__ == "CompiledFunction",
                   f"{name} should be a function of the compiled module")
    check_compiled_ring(kernel, cases, name=name, timeout=timeout)
    check_compiled_refuses(kernel, *refuse, name=name, timeout=timeout)
    return time_compiled(kernel, name=name, timeout=timeout)


# ---------------------------------------------------------------------------------------
# trying code out (not graded)


def show_trace(run: Callable, *args: Any, ranks: int = 4, timeout: float = 10) -> None:
    """Not graded: run ``run(comm, *args)`` on `ranks` ranks with a tracing communicator.

    Prints every rank's result, who sent to whom step by step, and draws it
    (:func:`mpilab.tracing.draw`). A failure (a deadlock, an exception) is printed, not
    raised. A timeout is remembered against the functions among `args` (the student's),
    not against `run`, so the graded checks skip them until they change.
    """
    if grading.not_while_grading():
        return None
    blame = tuple(a for a in args if callable(a) and not isinstance(a, type)) or run
    try:
        out = grading.run_on_ranks(tracing.trace, run, *args, ranks=ranks, timeout=timeout,
                                   blame=blame)
    except grading.CheckFailed as exc:
        print(f"{type(exc).__name__}: {exc}")
        if isinstance(exc, grading.TimedOut) and not isinstance(exc, grading.Skipped):
            names = " and ".join(_name(b, None) for b in
                                 (blame if isinstance(blame, tuple) else (blame,)))
            print(f"(The checks below will not run {names} again until you change it and "
                  "run its cell: they would only wait for the same timeout.)")
        return
    if out[0]["error"]:
        print("The messages do not pair up:", out[0]["error"])
        return
    for r, o in enumerate(out):
        print(f"rank {r}: {o['result']}")
    sched = out[0]["schedule"]
    print(f"{tracing.steps(sched)} steps:\n{tracing.format_schedule(sched)}")
    tracing.draw(sched, ranks)
