"""A measurement the grader can stand on: rounds that agree, or no grade.

A measured check (:mod:`mpilab.grading.measured`) compares a student's prediction with
times measured at grading time. On a machine shared with other work, one quantity of a
measurement can be inflated by load while the others are not: on the course's 2-core VM,
beside other jobs, lab 00's lap of the ring measured 250-410 µs in some repetitions
against 38-45 µs in most, and the correct model failed 7 gradings of 30. A grade from
such a measurement is the grader's noise, not the student's work.

So a measurement is made in **rounds** (:func:`steady`): each round runs the whole timed
function once, so its quantities alternate round by round (hop, lap, shift, hop, lap,
shift, ...) and a burst of load lands in one round, not in one quantity of every round.
Per quantity the value kept is the **median** of the rounds (the middle round's value), which
one outlying round cannot move past the others. The measurement is **stable** when, for
every quantity, a majority of the rounds lie within :data:`AGREE` times of that median
(with 3 rounds: the median and one more): independent rounds then agree on it, which one
round inflated by load cannot fake. When they do not, the rounds are measured again, up to
:data:`ATTEMPTS` times; when no attempt is stable the grader raises
:class:`~mpilab.autograder.failures.Ungradable`, naming the quantity and how far apart its
rounds were: the part is left ungraded with that reason (no score, not a zero:
:mod:`mpilab.autograder.ungradable`) and is graded again later.

The rule judges agreement, not speed: a machine loaded evenly through every round gives
rounds that agree on slower times, and those are graded (the result says where it was
measured). Why 1.25: the labs' tolerances accept a factor of 2 (0.5) below and 2.5 or 3
above the prediction, so rounds within 1.25 of each other move a ratio by far less than the
tolerance allows, while an inflated round (6 to 10 times, as above) is far outside it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

from ..autograder.failures import Ungradable, fail

__all__ = ["ROUNDS", "ATTEMPTS", "AGREE", "quantities", "combine", "disagreement", "steady"]

#: Rounds per attempt: each runs the whole timed function once.
ROUNDS = 3
#: Attempts, each of :data:`ROUNDS` fresh rounds, before the measurement is ungradable.
ATTEMPTS = 3
#: A majority of the rounds must lie within this factor of the median, for every quantity.
AGREE = 1.25


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


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
        Each finite number (not a bool) by its path: ``"lap_us"``, ``"t_us[2]"``.
    """
    if isinstance(result, dict):
        out: dict[str, float] = {}
        for k, v in result.items():
            out.update(quantities(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(result, (list, tuple)):
        out = {}
        for i, v in enumerate(result):
            out.update(quantities(v, f"{prefix}[{i}]"))
        return out
    return {prefix: float(result)} if _is_number(result) else {}


def combine(rounds: list) -> Any:
    """The rounds as one result: per number the median of the rounds, the rest as the
    first round has it.

    Parameters
    ----------
    rounds : list
        The rounds' results, each of the same shape (dicts, lists, numbers).

    Returns
    -------
    object
        The first round's shape, each number replaced by the median of that number over
        the rounds (with an even count, the lower of the middle two: always a value one
        round measured, of its type).
    """
    first = rounds[0]
    if isinstance(first, dict):
        return {k: combine([r.get(k) if isinstance(r, dict) else None for r in rounds])
                for k in first}
    if isinstance(first, (list, tuple)):
        if all(isinstance(r, (list, tuple)) and len(r) == len(first) for r in rounds):
            got = [combine([r[i] for r in rounds]) for i in range(len(first))]
            return type(first)(got) if isinstance(first, tuple) else got
        return first
    if _is_number(first) and all(_is_number(r) for r in rounds):
        return statistics.median_low(rounds)
    return first


def disagreement(rounds: list, agree: float = AGREE) -> dict | None:
    """The quantity on which the rounds disagree most, or None when they all agree.

    A quantity agrees when at least a majority of the rounds (``len(rounds) // 2 + 1``)
    lie within `agree` times of its median (``max(v / m, m / v) <= agree``). Only
    positive numbers are judged (a count of zero, a missing time are not timings).

    Parameters
    ----------
    rounds : list
        The rounds' results (:func:`quantities` reads their numbers).
    agree : float, optional
        The factor within which the rounds must agree (default :data:`AGREE`).

    Returns
    -------
    dict or None
        None when every quantity agrees; else the worst (fewest rounds agreeing, then the
        widest spread): ``quantity`` (its path), ``values`` (per round), ``median``,
        ``agreeing`` (rounds within `agree` of the median), ``needed``, ``spread``
        (largest / smallest value).
    """
    seen = [quantities(r) for r in rounds]
    needed = len(rounds) // 2 + 1
    worst = None
    for name in seen[0]:
        values = [s.get(name) for s in seen]
        if not all(v is not None and v > 0 for v in values):
            continue
        m = statistics.median_low(values)
        agreeing = sum(max(v / m, m / v) <= agree for v in values)
        if agreeing >= needed:
            continue
        bad = {"quantity": name, "values": values, "median": m, "agreeing": agreeing,
               "needed": needed, "spread": max(values) / min(values)}
        if worst is None or (agreeing, -bad["spread"]) < (worst["agreeing"], -worst["spread"]):
            worst = bad
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
        The factor a majority of rounds must agree within (default :data:`AGREE`).

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
        f"of {rounds} rounds its rounds disagreed; in the last, {bad['quantity']} measured "
        f"{values} ({bad['spread']:.2f} times apart; {bad['agreeing']} of {rounds} rounds "
        f"within {agree:g} times of the median {_fmt(bad['median'])}, {bad['needed']} "
        "needed). The machine was busy with other work: this part is not graded now (no "
        "score, not a zero) and is graded again later."))
