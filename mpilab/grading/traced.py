"""The shapes of a traced check: a student's collective run with a tracing communicator.

Labs 05 and 06 grade collectives the same way (:mod:`mpilab.grading.collectives`,
:mod:`mpilab.grading.allgather`): a harness on the ranks runs the library's collective for
the reference and hands the student's function a :class:`mpilab.tracing.TracingComm`, so
a check gets every rank's buffer and the messages that were really sent. The shapes they
share are here:

* **a graded function's check**: :func:`run_traced` runs a harness on the ranks, a
  function that timed out before explained in the student's terms (:func:`explained`),
  :func:`expect_sendbuf_kept`; each lab compares the result with its own words;
* **a traced-steps check**: :func:`traced_steps`, a right result first, then the steps
  counted from the messages (:func:`check_traced`: no library collective, the messages
  pair up) and compared with the algorithm's by the lab's schedule check;
* the words both use: :func:`messages_hint`, :func:`ranks_text`, :func:`log_steps`,
  :func:`parse_cases`, and :func:`show_trace` for the labs' try-it cells.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from mpilab import grading, tracing

__all__ = ["log_steps", "ranks_text", "messages_hint", "skipped_note", "explained", "label_of",
           "check_traced", "parse_cases", "check_cases", "run_traced", "expect_sendbuf_kept",
           "expect_own_messages", "traced_steps", "steps_on_each", "show_trace"]


def log_steps(ranks: int) -> int:
    """``ceil(log2 p)``, exactly: the steps of a binomial tree or Bruck's allgather.

    Parameters
    ----------
    ranks : int
        Number of ranks (1 or more).

    Returns
    -------
    int
        ``ceil(log2 p)``, computed on integers (0 for one rank).
    """
    return (int(ranks) - 1).bit_length()


def ranks_text(xs: Iterable[int]) -> str:
    """Ranks as a message lists them: "0, 2, 3".

    Parameters
    ----------
    xs : iterable of int
        The ranks.

    Returns
    -------
    str
        The ranks joined by ", ".
    """
    return ", ".join(map(str, xs))


def messages_hint(info: dict, ranks: int, root: int | None = None) -> str:
    """Who sent to whom, step by step (from the tracer), and who got nothing.

    Parameters
    ----------
    info : dict
        One rank's harness output: ``schedule`` and ``error`` of the tracer.
    ranks : int
        Ranks of the check.
    root : int, optional
        A broadcast's root: ranks other than the root that no message reached are named.

    Returns
    -------
    str
        The schedule, one line per step, or why the tracer could not pair the messages up.
    """
    if info["error"]:
        return f"The tracer could not pair up the messages: {info['error']}"
    sched = info["schedule"]
    text = "Messages, step by step (from the tracer):\n" + tracing.format_schedule(sched)
    if root is not None:
        missing = sorted(set(range(ranks)) - {m["dst"] for m in sched} - {root})
        if missing:
            text += f"\nNo message reached rank{'s' * (len(missing) > 1)} {ranks_text(missing)}."
    return text


def skipped_note(name: str) -> str:
    """What a check adds when `name` is skipped because it timed out before.

    Parameters
    ----------
    name : str
        The student's function, as the message calls it.

    Returns
    -------
    str
        A note that the earlier timeout may have been in a try-it cell.
    """
    return (f"(That earlier run may have been a try-it cell above, not a check: the first "
            f"cell where {name} timed out shows the line each rank was stuck on.)")


@contextlib.contextmanager
def explained(name: str) -> Iterator[None]:
    """Re-raise :class:`mpilab.grading.Skipped` with :func:`skipped_note` added.

    A context manager: ``with explained(name): ...``.

    Parameters
    ----------
    name : str
        The student's function, as the note calls it.

    Yields
    ------
    None
        The body runs inside; other exceptions pass through unchanged.
    """
    __tracebackhide__ = True
    try:
        yield
    except grading.Skipped as exc:
        raise type(exc)(f"{exc}\n{skipped_note(name)}") from None


def label_of(func: Callable, name: str | None) -> str:
    """What a message calls `func`.

    Parameters
    ----------
    func : callable
        The student's function.
    name : str or None
        The name a check was given for it, which wins when given.

    Returns
    -------
    str
        `name`, else ``func.__name__``, else "the function".
    """
    return name or getattr(func, "__name__", None) or "the function"


def check_traced(info: dict, label: str, how: str) -> list[dict]:
    """No library collective was called, and the traced messages pair up: the schedule.

    Parameters
    ----------
    info : dict
        One rank's harness output (``untraced``, ``error``).
    label : str
        What the message calls the run, e.g. ``"bcast_binomial on 4 ranks, root 1"``.
    how : str
        What to build it from instead, e.g. ``"build the tree from Send and Recv"``.

    Returns
    -------
    list of dict
        The traced schedule: one ``{"step", "src", "dst", "bytes"}`` per message
        (:func:`mpilab.tracing.schedule`).

    Raises
    ------
    mpilab.grading.CheckFailed
        When a library collective was called, or the messages do not pair up.
    """
    __tracebackhide__ = True
    calls = sorted({name for _, name in info["untraced"]})
    grading.expect(not calls, f"{label} called comm.{', comm.'.join(calls)}: {how} (the "
                   "tracer cannot see the messages of a library collective)")
    grading.expect(info["error"] is None,
                   f"{label}: the messages do not pair up: {info['error']}")
    return info["schedule"]


def parse_cases(cases: Iterable, fields: str, defaults: tuple = ()) -> list[tuple]:
    """Tuples of `fields` (e.g. "p n root dtype"), trailing ones from `defaults`.

    Parameters
    ----------
    cases : iterable
        The cases a check was given: tuples (or lists) of the leading fields, or a bare
        number of ranks.
    fields : str
        The fields' names, separated by spaces; the first is the number of ranks.
    defaults : tuple, optional
        Values of the last ``len(defaults)`` fields, for cases that leave them out.

    Returns
    -------
    list of tuple
        One full tuple of `fields` per case.

    Raises
    ------
    ValueError
        When a case has too few or too many fields, its ranks are not a positive
        integer, or its ``root`` is not one of its ranks.
    """
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


def check_cases(run: Callable, func: Callable, cases: Iterable, fields: str,
                defaults: tuple = (), *, name: str | None, timeout: float) -> None:
    """A graded function's check, case by case: ``run(func, *case, label, timeout)`` for
    each of `cases` (:func:`parse_cases` of `fields` and `defaults`), `label` being what
    messages call `func` (:func:`label_of`); `run` runs it on the case's ranks and fails
    saying what is wrong.

    Parameters
    ----------
    run : callable
        ``run(func, *case, label, timeout)``: one case, checked (the lab's runner).
    func : callable
        The student's function.
    cases, fields, defaults
        As for :func:`parse_cases`.
    name : str or None
        What messages call `func`; its ``__name__`` when None.
    timeout : float
        Seconds before a case fails as stuck.

    Raises
    ------
    mpilab.grading.CheckFailed
        As `run` raises it, on the first case that fails.
    """
    __tracebackhide__ = True
    label = label_of(func, name)
    for case in parse_cases(cases, fields, defaults):
        run(func, *case, label, timeout)


def run_traced(harness: Callable, func: Callable, *args: Any, ranks: int, name: str,
               timeout: float) -> list[dict]:
    """``harness(comm, func, *args)`` on `ranks` ranks, rank by rank; a timeout is
    remembered against `func` (the student's), and a skip says where it timed out.

    Parameters
    ----------
    harness : callable
        The lab's harness, run as ``harness(comm, func, *args)`` on every rank.
    func : callable
        The student's function, handed to the harness.
    *args
        Passed to the harness after `func`.
    ranks : int
        Number of ranks to run on.
    name : str
        The student's function, as messages call it.
    timeout : float
        Seconds before the run fails as stuck.

    Returns
    -------
    list of dict
        The harness's output of each rank, rank ``k`` at index ``k``.
    """
    __tracebackhide__ = True
    with explained(name):
        return grading.run_on_ranks(harness, func, *args, ranks=ranks, timeout=timeout,
                                    blame=func)


def expect_own_messages(outs: Sequence[dict], label: str, receivers: Iterable[int],
                        library: str) -> None:
    """A right result made by the student's messages: no library collective was called,
    and each of `receivers` received a message through the communicator it was given.

    A result that is right while a rank received nothing through it came another way:
    the library's collective on the communicator underneath, or on another one.

    Parameters
    ----------
    outs : sequence of dict
        The harness's output of each rank, with ``schedule`` (every rank's messages, as
        :func:`mpilab.tracing.trace` gives them; None when they do not pair up),
        ``error`` and ``untraced``.
    label : str
        What the message calls the run.
    receivers : iterable of int
        The ranks that cannot hold the right result without receiving a message.
    library : str
        The library's collective that would have done it ("comm.Bcast").

    Raises
    ------
    mpilab.grading.CheckFailed
        Naming the library call, messages that do not pair up, or the ranks that
        received nothing.
    """
    __tracebackhide__ = True
    info = outs[0]
    calls = sorted({name for _, name in info.get("untraced") or []})
    grading.expect(not calls, f"{label} called comm.{', comm.'.join(calls)}: the library's "
                   f"collective, not yours. Write it from sends and receives (the result of "
                   f"{library} is what the check compares with, not what it grades).")
    receivers = list(receivers)
    sched = info.get("schedule")
    grading.expect(sched is not None or not receivers,
                   f"{label}: the result is right, but the messages do not pair up: "
                   f"{info.get('error')}")
    got = {m["dst"] for m in sched or []}
    silent = [r for r in receivers if r not in got]
    grading.expect(not silent, f"{label}: rank{'s' * (len(silent) > 1)} {ranks_text(silent)} "
                   "ended with the right data but received no message through the "
                   "communicator it was given: the data came another way (the library's "
                   f"{library} on the communicator underneath, or on another one). Refused: "
                   "the lab grades the messages you send.")


def expect_sendbuf_kept(outs: Sequence[dict], label: str, leave: str) -> None:
    """No rank's ``unchanged`` is False; else name them and say `leave` ("as it is ...").

    Parameters
    ----------
    outs : sequence of dict
        The harness's output of each rank, with ``unchanged`` (the send buffer is as
        it was).
    label : str
        What the message calls the run.
    leave : str
        How the send buffer must be left, completing "leave it ...".

    Raises
    ------
    mpilab.grading.CheckFailed
        Naming the ranks whose send buffer changed.
    """
    __tracebackhide__ = True
    changed = [r for r, o in enumerate(outs) if not o["unchanged"]]
    grading.expect(not changed, f"{label}: sendbuf changed on rank {ranks_text(changed)}: "
                   f"leave it {leave}")


def traced_steps(cases: Iterable, fields: str, run: Callable[..., list[dict]],
                 schedule: Callable[..., int]) -> list[int]:
    """Per case of `fields` (:func:`parse_cases`): ``run(*case)``, which checks the result,
    then ``schedule(rank 0's output, *case)``, which checks the steps and returns them.

    Parameters
    ----------
    cases : iterable
        The cases, as :func:`parse_cases` takes them (no defaults).
    fields : str
        The cases' fields, e.g. "p n".
    run : callable
        ``run(*case) -> list of dict``: runs and checks the student's function, returning
        the harness's output by rank.
    schedule : callable
        ``schedule(info, *case) -> int``: checks rank 0's traced schedule against the
        algorithm's and returns its steps.

    Returns
    -------
    list of int
        The steps counted on each case.
    """
    __tracebackhide__ = True
    return [schedule(run(*case)[0], *case) for case in parse_cases(cases, fields)]


def steps_on_each(run: Callable, func: Callable, ranks: Iterable[int], n: int,
                  schedule: Callable[..., int], *, name: str | None = None,
                  timeout: float = 10) -> list[int]:
    """A graded function's result on each rank count, then its steps (the labs' shape).

    On each rank count ``p`` of `ranks`: ``run(func, p, n, "float64", label, timeout)``
    runs and checks the student's `func` on `n` float64 (a lab's ``_run`` harness), then
    ``schedule(rank 0's output, p, name=label)`` checks the traced steps against the
    algorithm's and returns them (:func:`traced_steps`).

    Parameters
    ----------
    run : callable
        The lab's runner: ``run(func, p, n, dtype, label, timeout) -> list of dict``.
    func : callable
        The student's function.
    ranks : iterable of int
        The rank counts to check.
    n : int
        Float64 per block (or per buffer: what `run` makes of it).
    schedule : callable
        ``schedule(info, p, name=label) -> int``.
    name, timeout
        The name the messages use (default: `func`'s own, :func:`label_of`) and the
        seconds each run may take.

    Returns
    -------
    list of int
        The steps on each rank count.
    """
    __tracebackhide__ = True
    label = label_of(func, name)
    return traced_steps(ranks, "p", lambda p: run(func, p, n, "float64", label, timeout),
                        lambda info, p: schedule(info, p, name=label))


def show_trace(run: Callable, *args: Any, ranks: int = 4, timeout: float = 10) -> None:
    """Not graded: run ``run(comm, *args)`` on `ranks` ranks with a tracing communicator.

    Prints every rank's result, who sent to whom step by step, and draws it
    (:func:`mpilab.tracing.draw`). A failure (a deadlock, an exception) is printed, not
    raised. A timeout is remembered against the functions among `args` (the student's),
    not against `run`, so the graded checks skip them until they change.

    Parameters
    ----------
    run : callable
        The function to trace, run as ``run(comm, *args)`` with ``comm`` a tracing
        communicator.
    *args
        Passed to `run` after ``comm`` (usually the student's function first).
    ranks : int, optional
        Number of ranks (default 4).
    timeout : float, optional
        Seconds before the run counts as stuck (default 10).
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
            names = " and ".join(label_of(b, None) for b in
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
