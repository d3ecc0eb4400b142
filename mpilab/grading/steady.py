"""A measurement the grader can stand on: rounds that agree, or no grade.

A measured check (:mod:`mpilab.grading.measured`) compares a student's prediction with
times measured at grading time. On a machine shared with other work, one quantity of a
measurement can be inflated by load while the others are not: on the course's 2-core VM,
beside other jobs, lab 00's lap of the ring measured 250-410 µs in some repetitions
against 38-45 µs in most, and the correct model failed 7 gradings of 30. A grade from
such a measurement is the grader's noise, not the student's work.

So a measurement is made in **rounds** (:func:`steady`): each round runs the whole timed
function once, so its quantities alternate round by round (hop, lap, shift, hop, lap,
shift, ...), a few tenths of a second apart, and a burst of load lands in some rounds of
one quantity, not in every round of it. Load only ever adds time (and takes bandwidth), so
per quantity the value kept is the **least loaded** round's: the lowest time (the highest
rate, for a quantity in MB/s or GB/s). It counts only when **a second, independent round
confirms it**, within :data:`AGREE` times: a round inflated by load cannot fake that, nor
can one round that came out too fast by a fluke. When a quantity's least loaded round is
not confirmed, the rounds are measured again, up to :data:`ATTEMPTS` times; when no
attempt is confirmed the grader raises :class:`~mpilab.autograder.failures.Ungradable`,
naming the quantity and its rounds: the part is left ungraded with that reason (no score,
not a zero: :mod:`mpilab.autograder.ungradable`) and is graded again later.

Measured on the course's VM beside other work (load average 10), 40 rounds of lab 00's
ring in a row (14 s) inflated the lap 3.5 to 14 times in 11 of them, in runs of up to
three rounds, the hop 3 to 10 times in 7 and the shift 8 to 20 times in 4: the median of 3
rounds can be an inflated value that two inflated rounds agree on, while of 5 rounds two
are clean (in 98 % of attempts, were a quarter of a quantity's rounds inflated
independently).

The rule judges agreement, not speed: a machine loaded evenly through every round gives
rounds that agree on slower times, and those are graded (the result says where it was
measured). Why 1.25: the labs' tolerances accept a factor of 2 (0.5) below and 2.5 or 3
above the prediction, so two rounds within 1.25 of each other move a ratio by far less than
the tolerance allows, while an inflated round (3 to 13 times, as above) is far outside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..autograder import isolated
from ..autograder.failures import Ungradable, fail

__all__ = ["ROUNDS", "ATTEMPTS", "AGREE", "RATES", "BUSY", "SLOWER", "WAITED_FOR_A_CPU",
           "quantities", "least_loaded", "combine", "disagreement", "steady", "busy"]

#: Rounds per attempt: each runs the whole timed function once.
ROUNDS = 5
#: Attempts, each of :data:`ROUNDS` fresh rounds, before the measurement is ungradable.
ATTEMPTS = 3
#: A second round must lie within this factor of the least loaded one, for every quantity.
AGREE = 1.25
#: what a rate's name ends with (load lowers a rate, and raises a time)
RATES = ("MBps", "GBps", "Bps")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


#: keys of a round's result that say how it measured (calibrated per round, so they differ
#: between rounds by design: lab 01's matching measurement reports its ``iters``), not a
#: measured quantity; left out of the agreement rule and kept as the first round has them
CALIBRATION = frozenset({"iters", "reps", "warmup"})


def quantities(result: Any, prefix: str = "") -> dict[str, float]:
    """The numbers of one round's result, by where they sit in it.

    Parameters
    ----------
    result : object
        One round's plain data: a dict, a list, a number, or anything else (no number).
    prefix : str, optional
        The name of `result` itself (default: none).

    Returns
    -------
    dict of str to float
        Each finite number (not a bool) by its path: ``"lap_us"``, ``"t_us[2]"``; none
        under a :data:`CALIBRATION` key.
    """
    if isinstance(result, dict):
        out: dict[str, float] = {}
        for k, v in result.items():
            if k in CALIBRATION:  # how the round measured, not what: free to differ
                continue
            out.update(quantities(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(result, (list, tuple)):
        out = {}
        for i, v in enumerate(result):
            out.update(quantities(v, f"{prefix}[{i}]"))
        return out
    return {prefix: float(result)} if _is_number(result) else {}


def _is_rate(name: str) -> bool:
    return name.endswith(RATES)


def least_loaded(name: str, values: list[float]) -> float:
    """The least loaded of a quantity's rounds: the lowest time, or the highest rate.

    Parameters
    ----------
    name : str
        The quantity's path (:func:`quantities`); one ending in MBps, GBps or Bps is a
        rate, anything else a time (or a count, the same in every round).
    values : list of float
        Its value in each round.

    Returns
    -------
    float
        ``max(values)`` for a rate, ``min(values)`` otherwise.
    """
    return max(values) if _is_rate(name) else min(values)


def combine(rounds: list, prefix: str = "") -> Any:
    """The rounds as one result: per number its least loaded round's value
    (:func:`least_loaded`), the rest as the first round has it.

    Parameters
    ----------
    rounds : list
        The rounds' results, each of the same shape (dicts, lists, numbers).
    prefix : str, optional
        The path of `rounds`' values in the whole result (default: none), which says
        whether a number is a rate.

    Returns
    -------
    object
        The first round's shape, each number replaced by its least loaded round's value
        (of its type: a value one round measured).
    """
    first = rounds[0]
    if isinstance(first, dict):
        return {k: combine([r.get(k) if isinstance(r, dict) else None for r in rounds],
                           f"{prefix}.{k}" if prefix else str(k)) for k in first}
    if isinstance(first, (list, tuple)):
        if all(isinstance(r, (list, tuple)) and len(r) == len(first) for r in rounds):
            got = [combine([r[i] for r in rounds], f"{prefix}[{i}]")
                   for i in range(len(first))]
            return type(first)(got) if isinstance(first, tuple) else got
        return first
    if _is_number(first) and all(_is_number(r) for r in rounds):
        best = least_loaded(prefix, [float(r) for r in rounds])
        return next(r for r in rounds if float(r) == best)
    return first


def disagreement(rounds: list, agree: float = AGREE) -> dict | None:
    """The quantity whose least loaded round no other round confirms, or None when each
    is confirmed.

    A quantity is confirmed when, besides its least loaded round (:func:`least_loaded`),
    another round lies within `agree` times of it (``max(v / b, b / v) <= agree``). Only
    positive numbers are judged (a count of zero, a missing time are not timings); one
    round confirms itself.

    Parameters
    ----------
    rounds : list
        The rounds' results (:func:`quantities` reads their numbers).
    agree : float, optional
        The factor within which a second round must lie (default :data:`AGREE`).

    Returns
    -------
    dict or None
        None when every quantity is confirmed; else the worst (the widest gap from its
        least loaded round to the next): ``quantity`` (its path), ``values`` (per round),
        ``least_loaded``, ``next`` (the round nearest it), ``gap`` (``next`` over
        ``least_loaded``, or the inverse for a rate) and ``spread`` (largest / smallest).
    """
    seen = [quantities(r) for r in rounds]
    worst = None
    for name in seen[0]:
        values = [s.get(name) for s in seen]
        if not all(v is not None and v > 0 for v in values):
            continue
        best = least_loaded(name, values)
        others = list(values)
        others.remove(best)
        if not others:
            continue
        near = min(others, key=lambda v: max(v / best, best / v))
        gap = max(near / best, best / near)
        if gap <= agree:
            continue
        if worst is None or gap > worst["gap"]:
            worst = {"quantity": name, "values": values, "least_loaded": best,
                     "next": near, "gap": gap, "spread": max(values) / min(values)}
    return worst


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def steady(what: str, one_round: Callable[[], Any], *, rounds: int = ROUNDS,
           attempts: int = ATTEMPTS, agree: float = AGREE) -> Any:
    """A measurement of `rounds` rounds that agree (:func:`disagreement`), combined into
    one (:func:`combine`); measured again, up to `attempts` times, while they do not.

    Parameters
    ----------
    what : str
        What is measured, as the reason names it ("the ring on 2 ranks").
    one_round : callable
        Called with no arguments, makes one round of the measurement (the whole timed
        function once, on the ranks) and returns its plain data. This is the seam a test
        plants a series of rounds through.
    rounds : int, optional
        Rounds per attempt (default :data:`ROUNDS`); 1 takes one round as it is.
    attempts : int, optional
        Attempts before giving up (default :data:`ATTEMPTS`).
    agree : float, optional
        The factor within which a second round must confirm each quantity's least
        loaded one (default :data:`AGREE`).

    Returns
    -------
    object
        The combined result of the first attempt whose rounds agree.

    Raises
    ------
    Ungradable
        When no attempt's rounds agree: the reason names the quantity, its values per
        round of the last attempt and how far apart they were.
    ValueError
        When `rounds` or `attempts` is below 1, or `agree` below 1.
    """
    if rounds < 1 or attempts < 1 or not agree >= 1:
        raise ValueError(f"rounds and attempts must be 1 or more and agree at least 1, got "
                         f"{rounds}, {attempts}, {agree}")
    bad = None
    for _ in range(attempts):
        got = [one_round() for _ in range(rounds)]
        bad = disagreement(got, agree)
        if bad is None:
            return combine(got)
    assert bad is not None
    values = ", ".join(_fmt(v) for v in bad["values"])
    fail(Ungradable(
        f"the measurement of {what} could not be made stable: in each of {attempts} tries "
        f"of {rounds} rounds, a quantity's least loaded round was not confirmed by a "
        f"second one; in the last, {bad['quantity']} measured {values}: none within "
        f"{agree:g} times of {_fmt(bad['least_loaded'])} (the nearest {_fmt(bad['next'])}, "
        f"{bad['gap']:.2f} times; all {bad['spread']:.2f} times apart). The machine was "
        "busy with other work: " + (
            "this part is not graded now (no score, not a zero) and is graded again later."
            if isolated.active() else
            "nothing is wrong with your answer; run this check again when the machine is "
            "quieter (nothing is graded in your own notebook).")))


#: The share of a measurement's time its ranks may wait for a CPU before a student's own
#: check says a miss may be the machine's (:func:`busy`). Measured on the course's 2-core VM
#: (lab 00's ring on 2 ranks, 2026-11-28, a share per round): alone, 0.000-0.028 under
#: mpiexec, 0.004-0.023 on a notebook's cluster of 2 engines (one round of 8: 0.29) and
#: 0.08-0.15 on one of 4 engines (two idle); beside one or two busy processes 0.29-0.51
#: on the 4 engines (the times hardly moved) and 0.66-0.99 under mpiexec with
#: ``mpi_yield_when_idle`` (the hop 36 times slower). A measurement keeps its rounds'
#: median.
BUSY = 0.25
#: How far out of its tolerance load can push a prediction's ratio (either way: a model
#: fed a measured hop that load inflated 36 times can come out above or below the shift
#: measured beside it): a miss by more than this factor (a unit slip: 1000) is the
#: model's however busy the machine was.
SLOWER = 20.0
#: the words of :func:`busy`'s sentence that say what it found (the class bench reads them)
WAITED_FOR_A_CPU = "waited for a CPU"


def busy(m: dict) -> str | None:
    """Why a miss of measurement `m` in a student's own notebook may be the machine's, not
    the model's; None when the measurement was quiet enough, or at grading time.

    Rounds that agree can still all be slowed, evenly, by work beside them: a classmate's
    sweep on a class server holds the cores through every round. The ranks then wait for
    a CPU, and the measurement says how much (``cpu_wait``,
    :func:`mpilab.grading.measured.waited`). In a student's own notebook a check that
    missed on such a measurement is not a verdict on their model: it says so, as an
    :class:`~mpilab.autograder.failures.Ungradable` (nothing is graded there). At grading
    time the grader holds the cores and the students' servers
    (:mod:`mpilab.autograder.quiet`) and grades what it measured.

    Parameters
    ----------
    m : dict
        A measurement (:func:`mpilab.grading.measured.measure`): ``cpu_wait``, and
        ``oversubscribed`` (ranks that share cores wait for each other by design: not
        judged).

    Returns
    -------
    str or None
        The sentence to add to the check's message, or None.
    """
    share = m.get("cpu_wait")
    if isolated.active() or m.get("oversubscribed") or not _is_number(share) or share < BUSY:
        return None
    return (f"But while it was measured, its ranks {WAITED_FOR_A_CPU} {share:.0%} of the time: "
            "other work (a classmate's on a shared server, or another notebook of yours) "
            "held these cores, so the miss may be the machine's, not your model's. Run this "
            "check again when the machine is quieter; the grader measures on cores held for "
            "it (nothing is graded in your own notebook).")
