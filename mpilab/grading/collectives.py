"""Lab 05's graded checks, the lab's one checks module (broadcast, allreduce; the
reduce-scatter of Part C is :mod:`mpilab.grading.reduce_scatter`'s, re-exported here),
and the tracing checks lab 06 shares.

The lab's test cells call these functions; the checks, their harnesses and their messages
live here, so grading policy changes in one place and students read short test cells::

    from mpilab.grading import collectives as C
    C.check_bcast(bcast_binomial, [(4, 10, 1), (4, 1001, 3, "int32")])
    took = C.check_bcast_steps(bcast_binomial, [(4, 1)])   # [2]

Every check runs the student's function through a harness of this module on the
notebook's cluster (:func:`mpilab.grading.run_on_ranks`, with a timeout). The harness runs
the library's own collective (``comm.Bcast``, ``comm.Allreduce``) on the same data for the
reference, and hands the student's function a :class:`mpilab.tracing.TracingComm`, so each
check gets both every rank's buffer and the messages that were really sent:

1. **the result** is compared rank by rank with the library's (``rank 2 holds a value
   that differs at ...``), and a wrong one is explained: which ranks' data a wrong sum is
   made of (:func:`sum_problems`), who sent to whom (:func:`messages_hint`);
2. **the steps** (only of a right result) are counted from the messages and compared with
   the algorithm's: :func:`check_bcast_schedule`, :func:`check_allreduce_schedule` name
   the rank, the block and the step that is off.

The shapes of these checks (running a harness traced, counting the steps, the words for
who sent to whom, :func:`show_trace` for the labs' try-it cells) are
:mod:`mpilab.grading.traced`'s, which lab 06's allgather checks
(:mod:`mpilab.grading.allgather`) share; they are re-exported here. Part E's graded
prediction, the broadcasts' model against the course's broadcasts measured now, is
:mod:`mpilab.grading.collectives_model`'s (re-exported here too).

The pure-Python parts (the ``check_*_schedule`` functions, :func:`sum_problems`, ...)
take plain data, so they are tested on hand-made outputs without MPI
(``tests/test_grading_collectives.py``).

A function that timed out once (a try-it cell counts) is not run again by later checks
(:mod:`mpilab.grading`); the checks here then say so in the student's terms and point at
the cell that shows where the ranks were stuck
(:func:`~mpilab.grading.traced.skipped_note`).

Where it runs
-------------
As in :mod:`mpilab.grading.halo`: module-level harnesses the ranks import from disk,
references computed in the caller, which at autograde time is the grader's kernel.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from mpilab import grading, tracing
from mpilab.grading.collectives_model import (
    BCAST,
    BCAST_BYTES,
    PREDICTION_TOLERANCE,
    bcast_now,
    bcast_times,
    check_bcast_us,
    reference_bcast_us,
    show_bcast_us,
)
from mpilab.grading.reduce_scatter import check_reduce_scatter, check_reduce_scatter_steps
from mpilab.grading.traced import (
    check_cases,
    check_traced,
    expect_own_messages,
    expect_sendbuf_kept,
    explained,
    label_of,
    log_steps,
    messages_hint,
    parse_cases,
    ranks_text,
    run_traced,
    show_trace,
    skipped_note,
    steps_on_each,
    traced_steps,
)

__all__ = ["bcast_harness", "allreduce_harness", "butterfly_steps", "sum_problems",
           "check_bcast_schedule", "check_allreduce_schedule", "check_bcast",
           "check_bcast_steps", "check_allreduce", "check_allreduce_steps",
           # re-exported: the shapes of a traced check (traced), Part C (reduce_scatter),
           # Part E (collectives_model)
           "check_reduce_scatter", "check_reduce_scatter_steps",
           "log_steps", "messages_hint", "skipped_note", "check_traced", "show_trace",
           "parse_cases", "explained", "label_of", "ranks_text", "bcast_times",
           "reference_bcast_us", "bcast_now", "check_bcast_us", "show_bcast_us",
           "PREDICTION_TOLERANCE", "BCAST", "BCAST_BYTES"]

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


# ---------------------------------------------------------------------------------------
# pure Python: step counts, and what is wrong in words


def butterfly_steps(ranks: int) -> tuple[int, str]:
    """Steps of a butterfly allreduce on `ranks` ranks, and why, for a message.

    ``log2 p`` for a power of two; otherwise ``log2 pof2`` plus one step to fold the
    extra ranks in and one to hand them the result (3 on 3 ranks, 4 on 6).

    Parameters
    ----------
    ranks : int
        Ranks of the allreduce (1 or more).

    Returns
    -------
    steps : int
        The steps a butterfly allreduce needs.
    why : str
        How they add up, for a message ("log2 4", ...).
    """
    pof2 = 1 << (int(ranks).bit_length() - 1)
    if pof2 == ranks:
        return pof2.bit_length() - 1, f"log2 {ranks}"
    return (pof2.bit_length() + 1, f"log2 {pof2} for the butterfly on {pof2} ranks, 1 to fold "
            f"the other {ranks - pof2} in and 1 to hand them the result")


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
                         + (f": missing rank {ranks_text(missing)}" if missing else "")
                         + (f"{';' if missing else ':'} counted twice: rank {ranks_text(twice)}"
                            if twice else ""))
            break
        if len(lines) >= limit:
            break
    return lines


def check_bcast_schedule(info: dict, ranks: int, root: int, *,
                         name: str = "bcast_binomial") -> int:
    """A right broadcast's messages: a binomial tree's ``ceil(log2 p)`` steps, no extra.

    Parameters
    ----------
    info : dict
        One rank's :func:`bcast_harness` output (``schedule``, ``error``, ``untraced``).
    ranks, root : int
        Ranks and root of the run.
    name : str, optional
        What messages call the function (default "bcast_binomial").

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
    label = f"{name} on {ranks} ranks, root {root}"
    sched = check_traced(info, label, "build the tree from Send and Recv")
    took, allowed = tracing.steps(sched), log_steps(ranks)
    hint = ""
    if {m["src"] for m in sched} == {root}:
        hint = ("\nOnly the root sends: that is the linear broadcast. In a binomial tree every "
                "rank that has the data sends it on, so the ranks holding it double each step.")
    grading.expect(took <= allowed, f"{label} took {took} steps; a binomial tree needs only "
                   f"{allowed} (ceil(log2 {ranks})). Who sent to whom, step by step:\n"
                   f"{tracing.format_schedule(sched)}" + hint)
    counts: dict[int, int] = {}
    for m in sched:
        counts[int(m["dst"])] = counts.get(int(m["dst"]), 0) + 1
    nothing = sorted(set(range(ranks)) - set(counts) - {root})
    grading.expect(not nothing, f"{label}: no message reached rank {ranks_text(nothing)} through "
                   "comm, yet it holds the data: send and receive with the comm you are "
                   "given, nothing else.")
    twice = {r: c for r, c in counts.items() if c > 1 or r == root}
    said = [f"{'the root, ' if r == root else ''}rank {r}, received the data {c} time"
            f"{'s' * (c > 1)}" for r, c in sorted(twice.items())]
    grading.expect(not twice, f"{label}: " + "; ".join(said) + ". In a tree every rank but "
                   "the root receives it exactly once.\n" + tracing.format_schedule(sched))
    return took


def check_allreduce_schedule(info: dict, ranks: int, *, name: str = "allreduce_butterfly") -> int:
    """A right allreduce's messages: a butterfly's steps (:func:`butterfly_steps`).

    As :func:`check_bcast_schedule`, for one rank's :func:`allreduce_harness` output.

    Parameters
    ----------
    info, ranks
        One rank's :func:`allreduce_harness` output, and the run's ranks.
    name : str, optional
        What messages call the function (default "allreduce_butterfly").

    Returns
    -------
    int
        The steps it took (at most :func:`butterfly_steps`).

    Raises
    ------
    mpilab.grading.CheckFailed
        When a library collective was called, the messages do not pair up, a rank
        received no message, or it took more steps than :func:`butterfly_steps` allows.
    """
    __tracebackhide__ = True
    label = f"{name} on {ranks} ranks"
    sched = check_traced(info, label, "build the butterfly from Sendrecv")
    allowed, why = butterfly_steps(ranks)
    nothing = sorted(set(range(ranks)) - {m["dst"] for m in sched})
    grading.expect(not nothing, f"{label}: no message reached rank {ranks_text(nothing)} through "
                   "comm, yet it holds the sum: send and receive with the comm you are "
                   "given, nothing else.")
    took = tracing.steps(sched)
    grading.expect(took <= allowed, f"{label} took {took} steps; the butterfly needs only "
                   f"{allowed} ({why}). Who sent to whom, step by step:\n"
                   f"{tracing.format_schedule(sched)}\nReducing to one rank and broadcasting "
                   "back takes about twice as many steps: in the butterfly every rank sends "
                   "and receives in every step.")
    return took


def _bcast_run(bcast, p, n, root, dtype, name, timeout):
    __tracebackhide__ = True
    out = run_traced(bcast_harness, bcast, n, root, str(dtype), ranks=p, name=name,
                     timeout=timeout)
    grading.expect_per_rank(
        [o["buf"] for o in out], [o["ref"] for o in out], what="holds",
        label=f"{name} on {p} ranks, root {root}, {n:,} {dtype}",
        known={"the root's data": out[root]["ref"],
               "its own starting buffer (nothing arrived)": np.full(n, -1, dtype=dtype)},
        hint=messages_hint(out[0], p, root))
    label = f"{name} on {p} ranks, root {root}, {n:,} {dtype}"
    expect_own_messages(out, label, [r for r in range(p) if r != root and n], "comm.Bcast")
    return out


def _allreduce_run(allreduce, p, n, dtype, name, timeout):
    __tracebackhide__ = True
    out = run_traced(allreduce_harness, allreduce, n, str(dtype), ranks=p, name=name,
                     timeout=timeout)
    label = f"{name} on {p} ranks, {n:,} {dtype}"
    expect_sendbuf_kept(out, label, "as it is and work in recvbuf (comm.Allreduce does not "
                        "touch sendbuf)")
    exact = np.dtype(dtype).kind != "f"
    hint = "\n".join(h for h in ("\n".join(sum_problems(out)), messages_hint(out[0], p)) if h)
    grading.expect_per_rank(
        [o["recv"] for o in out], [o["ref"] for o in out], what="holds", label=label,
        rtol=None if exact else 1e-12, atol=0.0 if exact else 1e-9,
        known={f"its recvbuf untouched ({UNTOUCHED} everywhere)":
               np.full(n, UNTOUCHED, dtype)}, hint=hint)
    expect_own_messages(out, label, range(p) if p > 1 and n else [], "comm.Allreduce")
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
        What messages call `bcast` (its ``__name__`` by default).
    timeout : float
        Seconds before a case fails as stuck, in a deadlock or an endless loop.

    Raises
    ------
    mpilab.grading.CheckFailed
        Naming each wrong rank and what it holds (the root's data, its own starting
        buffer, ...), with the messages step by step and the ranks none reached.
    """
    __tracebackhide__ = True
    check_cases(_bcast_run, bcast, cases, "p n root dtype", ("float64",), name=name,
                timeout=timeout)


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
    name = label_of(bcast, name)
    return traced_steps(cases, "p root",
                        lambda p, root: _bcast_run(bcast, p, 5, root, "float64", name, timeout),
                        lambda info, p, root: check_bcast_schedule(info, p, root, name=name))


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
    check_cases(_allreduce_run, allreduce, cases, "p n dtype", ("float64",), name=name,
                timeout=timeout)


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
    return steps_on_each(_allreduce_run, allreduce, ranks, 6, check_allreduce_schedule,
                         name=name, timeout=timeout)
