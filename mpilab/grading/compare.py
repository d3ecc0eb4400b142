"""Comparisons that say what is wrong: the ``expect_*`` of the checks.

A check compares what the student's code returned (plain data, :mod:`mpilab.grading.running`)
with what it should be, and fails with a :class:`~mpilab.autograder.failures.CheckFailed`
whose message names the first difference in the student's terms ("rank 2 received 5,
expected 3"; "the list[2] is 5, expected 3"). A value is made plain data before it is
compared, so a returned object cannot bring its own ``__eq__``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..autograder.failures import CheckFailed, fail
from ..autograder.wire import plain

__all__ = ["expect", "expect_equal", "expect_close", "expect_per_rank", "expect_timing",
           "INSIDE_CALL_SLACK"]


def _fmt(x: Any, limit: int = 80) -> str:
    if isinstance(x, np.ndarray):
        if x.size <= 8:
            return f"array({x.tolist()})"
        head = np.array2string(x.ravel()[:3], separator=", ")[1:-1]
        tail = np.array2string(x.ravel()[-2:], separator=", ")[1:-1]
        return f"an array of {x.size:,} {x.dtype} [{head}, ..., {tail}]"
    if isinstance(x, float):
        return f"{x:.6g}"
    if type(x) in (list, tuple) and any(isinstance(v, (np.ndarray, float)) for v in x):
        inner = ", ".join(_fmt(v, limit) for v in x[:4]) + (", ..." if len(x) > 4 else "")
        return f"({inner})" if type(x) is tuple else f"[{inner}]"
    s = repr(x)
    return s if len(s) <= limit else s[: limit - 5] + " ...]"


def _is_seq(x: Any) -> bool:
    return isinstance(x, (list, tuple, np.ndarray))


def _is_num(x: Any) -> bool:
    return type(x) in (int, float, complex) or (isinstance(x, np.number)
                                                 and type(x).__module__ == "numpy")


def _trusted(x: Any) -> tuple[Any, str | None]:
    """`x` as plain data (so its == is ours, not the student's), or why it cannot be."""
    try:
        return plain(x), None
    except TypeError as exc:
        return None, str(exc).replace("the result ", "", 1)


def _diff(got: Any, want: Any, close: tuple[float, float] | None) -> str | None:
    """None when equal (or close); else what differs, e.g. '[3] is 5, expected 3'."""
    got, why = _trusted(got)
    if why:
        return why
    return _diff_plain(got, want, close)


def _numeric(x: Any) -> np.ndarray | None:
    """`x` as a numeric array when it is one (an array, or a rectangular list of numbers)."""
    if isinstance(x, np.ndarray):
        return x if x.dtype.kind in "biufc" else None
    try:
        a = np.asarray(x)
    except (ValueError, TypeError):
        return None
    return a if a.dtype.kind in "biufc" and a.ndim >= 1 else None


def _diff_plain(got: Any, want: Any, close: tuple[float, float] | None) -> str | None:
    if _is_seq(want):
        if not _is_seq(got):
            return f"is {_fmt(got)}, expected a sequence like {_fmt(want)}"
        g, w = _numeric(got), _numeric(want)
        if g is not None and w is not None and (w.size > 8 or w.ndim > 1):
            if g.shape != w.shape:
                if g.ndim == 1 and w.ndim == 1:
                    return f"has {len(g):,} elements, expected {len(w):,}"
                return f"has shape {g.shape}, expected {w.shape}"
            if close is None:
                bad = g != w
            else:
                with np.errstate(invalid="ignore"):
                    bad = ~np.isclose(g, w, rtol=close[0], atol=close[1])
            if not bad.any():
                return None
            idx = np.argwhere(bad)
            i = tuple(int(k) for k in idx[0])
            return (f"differs at {len(idx):,} of {g.size:,} elements; the first at index "
                    f"{i[0] if len(i) == 1 else i}: {_fmt(g[i].item())}, expected "
                    f"{_fmt(w[i].item())}")
        if len(got) != len(want):
            return f"has {len(got):,} elements, expected {len(want):,}"
        for i, (a, b) in enumerate(zip(list(got), list(want), strict=True)):
            d = _diff_plain(a.item() if isinstance(a, np.generic) else a,
                            b.item() if isinstance(b, np.generic) else b, close)
            if d is not None:
                return f"[{i}]{d}" if d.startswith("[") else f"[{i}] {d}"
        return None
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return f"is {_fmt(got)}, expected a dict"
        if set(got) != set(want):
            return f"has keys {sorted(map(str, got))}, expected {sorted(map(str, want))}"
        for k in want:
            d = _diff_plain(got[k], want[k], close)
            if d is not None:
                return f"[{k!r}] {d}"
        return None
    if _is_num(want) and _is_num(got):
        if close is None:
            ok = bool(got == want)
        else:
            ok = bool(np.isfinite(got) and abs(got - want) <= close[1] + close[0] * abs(want))
        return None if ok else f"is {_fmt(got)}, expected {_fmt(want)}"
    if type(got) is not type(want):
        return f"is {_fmt(got)} ({type(got).__name__}), expected {_fmt(want)}"
    return None if got == want else f"is {_fmt(got)}, expected {_fmt(want)}"


def expect(condition: Any, message: str) -> None:
    """Fail with `message` unless `condition` holds (a bare ``assert`` says nothing).

    Parameters
    ----------
    condition : bool
        What must hold; only ``True`` (a Python or NumPy bool) passes, so a truthy object
        the student returned does not.
    message : str
        The failure's message, in the student's terms.

    Raises
    ------
    CheckFailed
        Unless `condition` is true.
    """
    __tracebackhide__ = True
    if not (condition is True or (type(condition) in (bool, np.bool_) and bool(condition))):
        fail(CheckFailed(message))


def expect_equal(got: Any, want: Any, what: str = "the result", hint: str = "") -> None:
    """Fail unless `got` equals `want`, saying where they differ.

    Parameters
    ----------
    got : object
        What the student's code returned (made plain data before it is compared).
    want : object
        The expected value: a number, string, sequence, array or dict of them.
    what : str, optional
        What `got` is, to start the message with (default "the result").
    hint : str, optional
        A line added after the message when the check fails.

    Raises
    ------
    CheckFailed
        Naming the first difference ("the list[2] is 5, expected 3").

    Examples
    --------
    >>> expect_equal([1, 2, 5], [1, 2, 3], what="the list")
    Traceback (most recent call last):
    ...
    mpilab.grading.CheckFailed: the list[2] is 5, expected 3
    """
    __tracebackhide__ = True
    d = _diff(got, want, None)
    if d is not None:
        fail(CheckFailed(f"{what}{'' if d.startswith('[') else ' '}{d}"
                         + (f"\n{hint}" if hint else "")))


def expect_close(got: Any, want: Any, what: str = "the result", *, rtol: float = 1e-6,
                 atol: float = 0.0, hint: str = "") -> None:
    """Fail unless `got` is within ``atol + rtol * |want|`` of `want` (numbers or arrays).

    Parameters
    ----------
    got : object
        What the student's code returned: a number, a sequence or an array of numbers.
    want : object
        The expected value, of the same shape.
    what : str, optional
        What `got` is, to start the message with (default "the result").
    rtol : float, optional
        Relative tolerance (default 1e-6).
    atol : float, optional
        Absolute tolerance, in the unit of `want` (default 0).
    hint : str, optional
        A line added after the message when the check fails.

    Raises
    ------
    CheckFailed
        Naming the first element out of tolerance, and the tolerance.
    """
    __tracebackhide__ = True
    d = _diff(got, want, (rtol, atol))
    if d is not None:
        tol = f"within {rtol:g} relative" + (f" + {atol:g}" if atol else "")
        fail(CheckFailed(f"{what}{'' if d.startswith('[') else ' '}{d} ({tol})"
                         + (f"\n{hint}" if hint else "")))


def expect_per_rank(got: Sequence, want: Sequence, what: str = "returned", *,
                    rtol: float | None = None, atol: float = 0.0,
                    known: dict[str, Any] | None = None, label: str = "",
                    hint: str = "") -> None:
    """Fail unless rank k's result equals (or is close to) ``want[k]`` for every rank.

    The message names each wrong rank: "rank 2 received 5, expected 3". `what` is the
    verb ("received", "saw", "returned"); `label` says which case this is ("ring_pass on
    4 ranks, token 7"); `hint` follows the list. With `known`, a wrong value equal to one
    of its values is named by its key ("rank 1 received rank 1's array, expected rank
    0's array"). With `rtol`, values are compared as :func:`expect_close` does.

    Parameters
    ----------
    got : sequence
        The results by rank, as :func:`~mpilab.grading.run_on_ranks` returns them.
    want : sequence
        The expected result of each rank, rank ``k`` at index ``k``.
    what : str, optional
        The verb of the message (default "returned").
    rtol : float, optional
        Relative tolerance; None (the default) compares for equality.
    atol : float, optional
        Absolute tolerance, used with `rtol` (default 0).
    known : dict, optional
        Names for values a wrong result may be equal to, e.g. ``{"rank 0's array": a0}``.
    label : str, optional
        Which case this is, put before the message.
    hint : str, optional
        A line added after the list of wrong ranks.

    Raises
    ------
    CheckFailed
        Naming each wrong rank (the first four), or the wrong number of results.
    """
    __tracebackhide__ = True
    if len(got) != len(want):
        fail(CheckFailed(f"expected results from {len(want)} ranks, got {len(got)}"))
    close = None if rtol is None else (rtol, atol)
    wrong = []
    for r, (g, w) in enumerate(zip(got, want, strict=True)):
        d = _diff(g, w, close)
        if d is None:
            continue
        got_known = next((k for k, v in (known or {}).items() if _diff(g, v, close) is None),
                         None)
        want_known = next((k for k, v in (known or {}).items() if _diff(w, v, close) is None),
                          None)
        if _trusted(g)[1]:
            wrong.append(f"rank {r} returned a value that {_trusted(g)[1]}")
        elif g is None and w is not None:
            wrong.append(f"rank {r} returned None, expected {want_known or _fmt(w)} "
                         "(a missing return?)")
        elif got_known:
            wrong.append(f"rank {r} {what} {got_known}, expected {want_known or _fmt(w)}")
        elif _is_seq(w) and not (_is_seq(g) and np.size(g) <= 8 and np.size(w) <= 8):
            wrong.append(f"rank {r} {what} a value that {d}")
        else:
            wrong.append(f"rank {r} {what} {_fmt(g)}, expected {want_known or _fmt(w)}")
    if wrong:
        head = f"{label}: " if label else ""
        if len(wrong) > 1:
            head += f"{len(wrong)} of {len(want)} ranks are wrong:\n  "
        shown = wrong[:4] + ([f"... and {len(wrong) - 4} more"] if len(wrong) > 4 else [])
        fail(CheckFailed(head + "\n  ".join(shown) + (f"\n{hint}" if hint else "")))


#: How much longer than the call that ran it the loop a one-way time stands for may seem
#: (:func:`expect_timing`'s `elapsed_us`): both are read on the same clock of one rank,
#: the loop inside the call, so only the clock's granularity: 1 % and 1 µs.
INSIDE_CALL_SLACK = (1.01, 1.0)


def expect_timing(got_us: Any, reference_us: float, what: str = "the one-way time", *,
                  factor: float = 20.0, iters: int | None = None,
                  elapsed_us: float | None = None) -> float:
    """Fail unless `got_us` is a time in µs within `factor` of a reference measured alongside
    and, given `elapsed_us`, one the call that measured it had time for.

    Timings on a shared machine vary by several times, so the band only refuses what is
    off by far more than noise: a time in seconds, or the total of a loop instead of one
    message. A round trip reported as one way (twice the time) is within noise of the
    course's reference, but not of the call that ran the loop: a one-way time of a loop
    of `iters` round trips stands for ``2 * iters`` messages, which cannot take longer
    than the call that sent them (timed around it on the same rank and clock: this holds
    under any load, so a correct time never fails it).

    Parameters
    ----------
    got_us : float
        The student's time, in µs.
    reference_us : float
        The course's own measurement of the same thing, in µs.
    what : str, optional
        What the time is, to start the message with (default "the one-way time").
    factor : float, optional
        How many times off either way is still accepted (default 20).
    iters : int, optional
        Round trips the student's loop made; with it a failure can recognise the time of
        the whole loop instead of one message.
    elapsed_us : float, optional
        How long the call of the student's function that measured `got_us` took, in µs,
        timed around it on the same rank (with `iters`): ``2 * iters * got_us`` may not
        exceed it (by more than :data:`INSIDE_CALL_SLACK`).

    Returns
    -------
    float
        The ratio ``got_us / reference_us``.

    Raises
    ------
    CheckFailed
        When `got_us` is not a positive finite number, is off by more than `factor`, or
        stands for a loop longer than the call that ran it, naming the likely slip
        (seconds instead of µs, the whole loop, the round trip).
    """
    __tracebackhide__ = True
    got, why = _trusted(got_us)
    if why or not _is_num(got) or isinstance(got, complex):
        fail(CheckFailed(f"{what} should be a number of microseconds, but it "
                         f"{why or 'is ' + _fmt(got)}"))
    if not math.isfinite(got) or got <= 0:
        fail(CheckFailed(f"{what} is {_fmt(got)}: a time must be positive and finite "
                         "(was the clock read before and after the loop?)"))
    ratio = got / reference_us
    said = (f"{what} is {_fmt(got)} µs, {ratio:.3g}× the course's own measurement "
            f"({reference_us:.3g} µs, taken just now on the same ranks)")
    if 1 / factor <= ratio <= factor:
        if elapsed_us is not None and iters:
            _expect_inside_call(got, float(elapsed_us), int(iters), what)
        return ratio
    # Which slip explains the ratio best? (factor of the slip, what to say)
    slips = [(1e-6, "seconds instead of µs (× 1e6)"),
             (1e-3, "milliseconds instead of µs (× 1e3)"),
             (1e3, "nanoseconds instead of µs (÷ 1e3)")]
    if iters:
        slips += [(2 * iters, f"the time of the whole loop: divide by the {2 * iters} "
                              "one-way messages (2 per round trip)"),
                  (2 * iters * 1e-6, "the whole loop's time in seconds: divide by the "
                                     f"{2 * iters} one-way messages and report µs")]
    # within a factor 8: the student's time is one run on a shared machine, the reference
    # the best of three, so several times apart is noise; two close slips are both named
    scored = sorted((abs(math.log(ratio / f)), text) for f, text in slips)
    likely = [text for d, text in scored if d < math.log(8)]
    if likely:
        hint = "It looks like " + " — or ".join(likely[:2]) + "."
    elif ratio < 1:
        hint = "Too fast to be true: is the time divided by too much?"
    else:
        hint = "Is the loop timing only the messages, with the clock in µs?"
    fail(CheckFailed(f"{said}. {hint}"))


def _expect_inside_call(got: float, elapsed_us: float, iters: int, what: str) -> None:
    """`got` µs one way, 2 * `iters` times, fits in the `elapsed_us` the call took."""
    __tracebackhide__ = True
    loop = got * 2 * iters
    rel, plus = INSIDE_CALL_SLACK
    if loop <= elapsed_us * rel + plus:
        return
    times = loop / elapsed_us
    said = (f"{what} is {_fmt(got)} µs, so the {iters} round trips ({2 * iters} one-way "
            f"messages) would take {loop:.4g} µs; but your function ran for "
            f"{elapsed_us:.4g} µs in all (timed on rank 0 by the check): the loop your time "
            f"stands for would be {times:.3g} times as long as the whole call")
    if times <= 2 * rel + 0.05:
        hint = ("Your time is about twice the one-way time: did you time the round trip? "
                "A round trip is two one-way messages: divide the loop's time by 2 * iters.")
    else:
        hint = ("A time longer than the call that measured it was not measured: read "
                "MPI.Wtime() before and after the loop and divide by 2 * iters.")
    fail(CheckFailed(f"{said}. {hint}"))
