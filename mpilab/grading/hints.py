"""The words of a graded prediction's messages: what any α + n / β model must give beside a
prediction (:func:`ab_related`), the likely slips behind a miss (:func:`guessed`,
:func:`unit_slips`), where a measurement was made (:func:`where`) and a try-it cell's
numbers (:func:`shown`). :mod:`mpilab.grading.prediction` re-exports them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from .compare import _is_num

__all__ = ["ab_related", "guessed", "unit_slips", "where", "shown"]


def ab_related(args: tuple, got: Any) -> list[tuple[tuple, float, str]]:
    """What any α + n/β-shaped prediction ``f(n, α, β)`` must give beside ``got = f(*args)``
    (a :class:`Prediction`'s ``related``, for a check without made-up cases: lab 01's
    held-out message): a message twice as large takes n / β longer, and twice α with half
    β twice as long. A number that ignores the size, or α and β (a fixed number, a
    measurement made when called), misses one of them.

    Parameters
    ----------
    args : (float, float, float)
        The size (bytes), α (µs) and β (MB/s) the prediction was made from.
    got : object
        What it predicted for them.

    Returns
    -------
    list of (tuple, float, str)
        The related arguments, what they must give and what a miss means; none when
        `got` is not a number (the measured comparison says what is wrong with it).
    """
    n, a, b = args
    if not _is_num(got) or isinstance(got, (bool, complex)):
        return []
    return [((2 * n, a, b), float(got) + n / b,
             "a message twice as large must take n / β longer: the prediction must grow "
             "with the size (a number that ignores the size is no model of the message)"),
            ((n, 2 * a, b / 2), 2 * float(got),
             "twice α and half β must double a time made of α and n / β: the prediction "
             "must come from the α and β it is given, not from a fixed number or a "
             "measurement")]


def guessed(got: Any, guesses: Iterable[tuple[float, str]], otherwise: str) -> str:
    """A hint for a model's miss: the text of the first of `guesses` ((value, text): what
    a likely slip gives, and what to say) that `got` equals to 1e-9, else `otherwise`.

    Parameters
    ----------
    got : object
        What the student's model returned.
    guesses : iterable of (float, str)
        What each likely slip would have returned, and the hint for it.
    otherwise : str
        The hint when no guess matches.

    Returns
    -------
    str
        The hint; "Return a number of µs." when `got` is not a real number.
    """
    if not _is_num(got) or isinstance(got, (bool, complex)):
        return "Return a number of µs."
    return next((text for value, text in guesses if math.isclose(got, value, rel_tol=1e-9)),
                otherwise)


def unit_slips(fixed: float, n: float, beta: float, beta_name: str = "β") -> list:
    """The unit slips of a time ``fixed + n / β`` (n in bytes, β in MB/s, µs), as
    :func:`guessed`'s guesses: n taken as doubles, and n / β scaled by 1e6 either way.

    Parameters
    ----------
    fixed : float
        The time's fixed part (µs).
    n : float
        The bytes.
    beta : float
        The bandwidth (MB/s).
    beta_name : str, optional
        What the hint calls the bandwidth ("β" by default; lab 04's is "β_copy").

    Returns
    -------
    list of (float, str)
        What each slip gives, and its hint.
    """
    return [(fixed + 8 * n / beta, f"n_bytes is already in bytes: n / {beta_name}."),
            (fixed + n / beta * 1e6, "1 MB/s is one byte per µs: n / β is already in µs."),
            (fixed + n / beta / 1e6, "1 MB/s is one byte per µs: n / β is already in µs.")]


def where(m: dict) -> str:
    """How a measurement was made, for a check's message.

    Parameters
    ----------
    m : dict
        A measurement with ``ranks``, ``cores`` and ``oversubscribed``
        (:func:`mpilab.grading.measured.measure`).

    Returns
    -------
    str
        E.g. "4 ranks on 2 cores, oversubscribed".
    """
    over = ", oversubscribed" if m["oversubscribed"] else ""
    return f"{m['ranks']} ranks on {m['cores']} core{'s' * (m['cores'] != 1)}{over}"


def shown(func: Callable, *args: Any, digits: int = 1, name: str | None = None) -> str:
    """``func(*args)`` as "123.4 µs" (`digits` after the point) for a try-it cell, or what
    it raised (calling the function `name`, its ``__name__`` by default).

    Parameters
    ----------
    func : callable
        The student's function, called here (no timer).
    *args
        Its arguments.
    digits : int, optional
        Digits after the decimal point (default 1).
    name : str, optional
        What to call the function when it raises.

    Returns
    -------
    str
        Each number returned (one, or each of a tuple or list) as µs, or what it raised.
    """
    try:
        got = func(*args)
        return " ".join(f"{float(v):8.{digits}f} µs"
                        for v in (got if isinstance(got, (tuple, list)) else (got,)))
    except Exception as exc:  # noqa: BLE001 - shown, not raised
        name = name or getattr(func, "__name__", "it")
        return f"({name} raised {type(exc).__name__}: {exc})"
