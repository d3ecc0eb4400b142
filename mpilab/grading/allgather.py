"""Lab 06's graded checks (the allgather family), the lab's one checks module, on top of
mpilab.grading.

The lab's test cells call these functions::

    from mpilab.grading import allgather as A
    A.check_allgather(allgather_ring, [(4, 3), (5, 1000, "int32")])
    A.check_ring_steps(allgather_ring, [3, 4, 5])          # p - 1 steps, one block each

As for lab 05 (:mod:`mpilab.grading.collectives`; the shapes of a traced check are
:mod:`mpilab.grading.traced`'s): every check runs the student's function through a harness
of this module on the ranks (module-level: the ranks import it from disk), with the
library's ``comm.Allgather`` on the same data as the reference and a
:class:`mpilab.tracing.TracingComm` in the student's hands, then

1. compares **the result** rank by rank and explains a wrong block by whose block it holds
   (:func:`block_problems`: rank r's block is ``r * OWNER + 0, 1, 2, ...``);
2. counts **the steps** of a right result from the messages: the ring's ``p - 1`` steps
   of one block each (:func:`check_ring_schedule`), ``ceil(log2 p)`` steps of the
   logarithmic algorithms (:func:`check_log_schedule`);
3. checks that the compiled ring refuses what it cannot do (:func:`check_refusals`), that
   the Cython source writes the ring itself (:func:`check_ring_source`), and times it
   beside the library (:func:`time_compiled`, :func:`time_allgather`);
4. Part G: grades the student's model of the three allgathers exactly, then against the
   course's compiled allgathers of 1 KiB blocks measured now: a graded prediction, in
   :mod:`mpilab.grading.allgather_model` (:func:`check_allgather_us`, re-exported here).

Part F's choice among the algorithms, graded on a simulated machine, is
:mod:`mpilab.grading.simulated`'s (:func:`check_choose_allgather`, :func:`show_choices`),
and the try-it cells' :func:`show_trace` is :mod:`mpilab.grading.traced`'s; both are
re-exported here, so the lab's notebook imports this module only.

The pure-Python parts (items 1 to 3's verdicts) take plain data and are tested without MPI
(``tests/test_grading_allgather.py``): they are :mod:`mpilab.grading.allgather_verdicts`'s
(re-exported here). The references are computed in the caller, at autograde time the
grader's kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from mpilab import build, grading, tracing
from mpilab.grading import traced
from mpilab.grading.allgather_model import (
    ALLGATHER,
    BLOCK_BYTES,
    PREDICTED,
    PREDICTION_TOLERANCE,
    allgather_now,
    check_allgather_us,
    eager_times,
    reference_allgather_us,
    show_allgather_us,
)
from mpilab.grading.allgather_verdicts import (
    OWNER,
    block_problems,
    check_log_schedule,
    check_refusals,
    check_ring_schedule,
    check_ring_source,
)
from mpilab.grading.simulated import check_choose_allgather, show_choices
from mpilab.grading.traced import show_trace
from mpilab.timing import rep_times

__all__ = ["allgather_harness", "refuses_harness", "cython_harness", "time_allgather",
           "block_problems", "check_ring_schedule", "check_log_schedule", "check_refusals",
           "check_ring_source", "check_allgather", "check_ring_steps", "check_log_steps",
           "check_refuses", "check_compiled_ring", "check_compiled_refuses",
           "time_compiled", "check_cython_ring", "eager_times", "reference_allgather_us",
           "allgather_now", "check_allgather_us", "show_allgather_us",
           "PREDICTION_TOLERANCE", "BLOCK_BYTES", "PREDICTED", "ALLGATHER",
           "check_choose_allgather", "show_choices", "show_trace"]

# ---------------------------------------------------------------------------------------
# engine side: the checks' own harnesses (imported from this file by the engines)


def allgather_harness(comm, allgather: Callable, n: int, dtype: str) -> dict:
    """On every rank: ``comm.Allgather`` and `allgather` on the same blocks, traced.

    Rank r's block is ``r * 1_000_000 + 0, 1, 2, ...`` (:data:`OWNER`): a value says whose
    block it came from.

    Parameters
    ----------
    comm, allgather
        As for :func:`mpilab.grading.collectives.bcast_harness` (the student's
        ``allgather(comm, sendbuf, recvbuf)``, traced).
    n : int
        Elements per block.
    dtype : str
        NumPy type of the blocks, e.g. ``"float64"``, ``"int32"``.

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

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The ranks of the check (a number the algorithm cannot serve).
    allgather : callable
        The student's ``allgather(comm, sendbuf, recvbuf)``, called with a
        :class:`mpilab.tracing.TracingComm` that counts its messages.
    n : int
        Float64 elements per block.

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

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The ranks of the check.
    kernel : callable
        The compiled ``kernel(comm, sendbuf, recvbuf)``.
    n : int
        Float64 numbers per block.
    extra : int
        Numbers added to the end of recvbuf (0: the right size).

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

    The course's protocol (:func:`mpilab.timing.rep_times`): a warm-up call, then per
    repetition a barrier, `iters` calls between two ``MPI.Wtime()``, and the slowest
    rank's time per call.

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
    r, p = comm.Get_rank(), comm.Get_size()
    send = r * OWNER + np.arange(n, dtype=np.float64)
    recv = np.full(p * n, -1.0)
    if impl is None:
        def call():
            comm.Allgather(send, recv)
    else:
        def call():
            impl(comm, send, recv)
    times = rep_times(comm, call, iters, reps)
    want = (np.arange(p)[:, None] * OWNER + np.arange(n)).ravel()
    return times, bool(np.array_equal(recv, want))


# ---------------------------------------------------------------------------------------
# the graded checks


def _allgather_run(allgather, p, n, dtype, name, timeout):
    __tracebackhide__ = True
    out = traced.run_traced(allgather_harness, allgather, n, str(dtype), ranks=p, name=name,
                     timeout=timeout)
    label = f"{name} on {p} ranks, {n:,} {dtype} per rank"
    traced.expect_sendbuf_kept(out, label, "as it is (comm.Allgather does not touch it)")
    hint = block_problems(out, n) + [traced.messages_hint(out[0], p)]
    grading.expect_per_rank([o["recv"] for o in out], [o["ref"] for o in out], what="holds",
                            label=label, hint="\n".join(hint))
    traced.expect_own_messages(out, label, range(p) if p > 1 and n else [], "comm.Allgather")
    return out


def _steps(allgather, ranks, n, name, timeout, schedule) -> list[int]:
    __tracebackhide__ = True
    return traced.steps_on_each(_allgather_run, allgather, ranks, n,
                                lambda info, p, name: schedule(info, p, n, name=name),
                                name=name, timeout=timeout)


def check_allgather(allgather: Callable, cases: Iterable, *, name: str | None = None,
                    timeout: float = 10) -> None:
    """Every rank's recvbuf holds all blocks in rank order, as after ``comm.Allgather``.

    Parameters
    ----------
    allgather, cases, name, timeout
        As for :func:`mpilab.grading.collectives.check_allreduce`, with the student's
        ``allgather(comm, sendbuf, recvbuf)`` and `n` elements per block (compared
        exactly).

    Raises
    ------
    mpilab.grading.CheckFailed
        When sendbuf changed, or naming each wrong rank and block and whose block it
        holds (:func:`block_problems`), with the messages step by step.
    """
    __tracebackhide__ = True
    traced.check_cases(_allgather_run, allgather, cases, "p n dtype", ("float64",), name=name,
                       timeout=timeout)


def check_ring_steps(allgather: Callable, ranks: Iterable[int], *, n: int = 3,
                     name: str | None = None, timeout: float = 10) -> list[int]:
    """A right allgather of `n` float64 per rank, then a ring's steps (right neighbour only).

    Parameters
    ----------
    allgather, ranks, name, timeout
        As for :func:`mpilab.grading.collectives.check_allreduce_steps`, with the student's
        ``allgather(comm, sendbuf, recvbuf)``.
    n : int, optional
        Float64 per block (default 3; each message must carry one block).

    Returns
    -------
    list of int
        The steps on each rank count (:func:`check_ring_schedule`).
    """
    __tracebackhide__ = True
    return _steps(allgather, ranks, n, name, timeout, check_ring_schedule)


def check_log_steps(allgather: Callable, ranks: Iterable[int], *, n: int = 3,
                    name: str | None = None, timeout: float = 10) -> list[int]:
    """A right allgather, then ``ceil(log2 p)`` steps moving ``p (p - 1)`` blocks in all.

    For Bruck's algorithm and recursive doubling.

    Parameters
    ----------
    allgather : callable
        ``allgather(comm, sendbuf, recvbuf)``.
    ranks, n, name, timeout
        As for :func:`check_ring_steps`.

    Returns
    -------
    list of int
        The steps on each rank count, at most ``ceil(log2 p)`` each
        (:func:`check_log_schedule`).
    """
    __tracebackhide__ = True
    return _steps(allgather, ranks, n, name, timeout, check_log_schedule)


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
        As for :func:`mpilab.grading.collectives.check_bcast`.

    Returns
    -------
    str
        What rank 0 raised in the last run.
    """
    __tracebackhide__ = True
    name = traced.label_of(allgather, name)
    said = ""
    for n in sizes:
        out = traced.run_traced(refuses_harness, allgather, n, ranks=ranks, name=name,
                                timeout=timeout)
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
    for p, n in traced.parse_cases(cases, "p n"):
        label = f"{name} on {p} ranks, {n:,} float64 per rank"
        try:
            out = traced.run_traced(cython_harness, kernel, n, 0, ranks=p, name=name,
                                    timeout=timeout)
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


def check_compiled_refuses(kernel: Callable, ranks: int, n: int, *, name: str,
                           timeout: float = 10) -> None:
    """A recvbuf one number too long makes the compiled kernel raise ValueError everywhere.

    Parameters
    ----------
    kernel : mpilab.build.CompiledFunction
        The compiled ring.
    ranks, n : int
        Ranks, and float64 per block.
    name : str
        What the message calls the kernel.
    timeout : float
        Seconds before the run fails as stuck.
    """
    __tracebackhide__ = True
    out = traced.run_traced(cython_harness, kernel, n, 1, ranks=ranks, name=name,
                            timeout=timeout)
    quiet = [r for r, o in enumerate(out) if o["raised"] is None]
    grading.expect(not quiet, f"{name} on {ranks} ranks with a recvbuf of {ranks * n + 1} numbers "
                   f"for {ranks} blocks of {n}: ranks {traced.ranks_text(quiet)} did not raise "
                   "ValueError. Keep the given checks before any MPI call.")


def time_compiled(kernel: Callable, *, name: str, n: int = 1024, iters: int = 5,
                  reps: int = 3, timeout: float = 10) -> float:
    """Lenient: the kernel runs when timed and stays right; its times are real numbers.

    The time itself is never judged. It runs on all the cluster's ranks.

    Parameters
    ----------
    kernel : callable
        The compiled ``kernel(comm, sendbuf, recvbuf)``.
    name : str
        What messages call it.
    n : int, optional
        Float64 per block (default 1024: 8 KiB).
    iters : int, optional
        Calls per repetition (default 5).
    reps : int, optional
        Repetitions (default 3).
    timeout : float, optional
        Seconds before the run fails as stuck (default 10).

    Returns
    -------
    float
        The fastest repetition, in µs per call.

    Raises
    ------
    mpilab.grading.CheckFailed
        When the result was wrong after the timed calls, or a time is not a float
        between 0 and 10 s.
    """
    __tracebackhide__ = True
    with traced.explained(name):
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
