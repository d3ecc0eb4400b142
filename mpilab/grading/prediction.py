"""The shape of a graded prediction, and the comparisons it is graded by.

Every lab has a part where the student writes a model's prediction (a lap of a ring, a
halo exchange, a broadcast) as a function of numbers measured on the machine (a hop, α
and β), and the grade compares it twice:

* with the model itself on a few made-up cases (:func:`expect_model`): a wrong formula
  fails here, whatever the machine does, with a hint that names the likely slip;
* with a **fresh measurement** of the same operation on the same ranks
  (:func:`expect_prediction`): the measured time must lie within a stated factor of the
  prediction. The factor is part of the lab's text, with why the measurement may sit above
  the model (what the model leaves out) and by how much noise moves it.

A lab declares its prediction as data, a :class:`Prediction`, and its notebook's
``check_X_us`` and ``show_X`` are the prediction's :meth:`~Prediction.check` and
:meth:`~Prediction.show`, named and documented by :meth:`~Prediction.cells`::

    PUSH = Prediction(
        name="push_us", reference=reference_push_us, hint=_push_hint, now=push_now,
        tolerance=(0.5, 2.5), model=lambda m: f"a tiny push of {m['tiny_push_us']:.3g} µs ...",
        parts=lambda m: [Part(what="a push of 1 MiB ...", measured_us=m["push_us"],
                              args=(m["nbytes"], m["tiny_push_us"], m["copy_MBps"]))],
        shows=_push_lines)
    check_push_us, show_push = PUSH.cells(
        __name__, "check_push_us", "show_push", "push_us(n_bytes, tiny_push_us, copy_MBps)",
        against="a push of 1 MiB", shows="sync_all, a tiny push, a local copy and a push")

The example is lab 04's push written out. It and lab 03's fence epoch are each one
transfer, a fixed time plus ``n / β``, and are declared, with their cells, by this
module's :func:`fixed_plus_bytes`.

How the measurement is made (once per grading session, on one rank per core) is
:mod:`mpilab.grading.measured`'s; this module never measures.
"""

from __future__ import annotations

import inspect
import math
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..autograder.failures import CheckFailed, Ungradable
from ..autograder.failures import fail as _fail
from . import steady
from .compare import _fmt, _is_num, _trusted, expect_close
from .hints import ab_related, guessed, shown, unit_slips, where
from .running import call_local, not_while_grading

__all__ = ["Part", "Prediction", "expect_prediction", "expect_model", "expect_related",
           "fixed_plus_bytes",
           # re-exported from hints: the words of the messages
           "ab_related", "guessed", "unit_slips", "where", "shown"]

_UNIT_NAMES = {"s": "seconds", "ms": "milliseconds", "µs": "microseconds",
               "ns": "nanoseconds"}


def expect_prediction(predicted: Any, measured: float, *, tolerance: tuple[float, float],
                      what: str, model: str, unit: str = "µs", hint: str = "") -> float:
    """Fail unless ``measured / predicted`` lies in `tolerance` (lo, hi); return the ratio.

    `what` names the measured case ("a lap of the ring on 2 ranks, 1 MiB"), `model` the
    numbers the prediction was made from ("hop = 74.2 µs, measured just now"). A
    prediction off by a unit slip (×1e3, ×1e6) is named as such.

    Parameters
    ----------
    predicted : float
        The student's prediction, in `unit`.
    measured : float
        What was measured just now, in `unit`.
    tolerance : (float, float)
        The lowest and highest accepted ratio ``measured / predicted``.
    what : str
        The measured case, in words.
    model : str
        The numbers the prediction was made from, in words.
    unit : str, optional
        The unit of both times: "s", "ms", "µs" (the default) or "ns".
    hint : str, optional
        What a miss most likely means, added to the message (a unit slip is named
        besides); none by default.

    Returns
    -------
    float
        The ratio ``measured / predicted``.

    Raises
    ------
    CheckFailed
        When `predicted` is not a positive finite number, or the ratio is outside
        `tolerance` (naming a unit slip when one explains it).
    """
    __tracebackhide__ = True
    lo, hi = tolerance
    got, why = _trusted(predicted)
    if why or not _is_num(got) or isinstance(got, (complex, bool)):
        _fail(CheckFailed(f"the prediction for {what} should be a number of {unit}, but it "
                          f"{why or 'is ' + _fmt(got)}"))
    got = float(got)
    if not math.isfinite(got) or got <= 0:
        _fail(CheckFailed(f"the prediction for {what} is {_fmt(got)}: a time must be "
                          "positive and finite"))
    ratio = measured / got
    if lo <= ratio <= hi:
        return ratio
    said = (f"{what}: measured {measured:.4g} {unit} just now, you predicted {got:.4g} {unit} "
            f"(from {model}); the measurement should be {lo:g} to {hi:g} times the "
            f"prediction, it is {ratio:.3g} times.")
    # the factor the prediction is off by when it is in another unit than `unit`
    scale = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}
    for other in ("s", "ms", "µs", "ns"):
        if other != unit and unit in scale and lo <= ratio * scale[unit] / scale[other] <= hi:
            said += f" Is the prediction in {_UNIT_NAMES[other]} instead of {unit}?"
            break
    _fail(CheckFailed(f"{said} {hint}" if hint else said))


def expect_model(func: Callable, name: str, cases, reference: Callable,
                 hint: Callable) -> None:
    """The student's model `func` equals `reference` on each of `cases` (argument tuples),
    to 1e-9; a miss says ``name(args)`` and ``hint(got, *args)``.

    Parameters
    ----------
    func : callable
        The student's model, called here under a 10 s timer (:func:`call_local`).
    name : str
        Its name, as the message writes the call.
    cases : iterable of tuple
        The made-up arguments to call it with.
    reference : callable
        The course's model, called with the same arguments.
    hint : callable
        ``hint(got, *args) -> str``: what to say when `func` misses.

    Raises
    ------
    CheckFailed
        On the first case where `func` differs from `reference` by more than 1e-9
        (relative), or when `func` times out or raises.
    """
    __tracebackhide__ = True
    for args in cases:
        got = call_local(func, *args, timeout=10)
        expect_close(got, reference(*args), rtol=1e-9,
                     what=f"{name}({', '.join(map(repr, args))})", hint=hint(got, *args))


def expect_related(func: Callable, name: str, related: Iterable[tuple[tuple, float, str]],
                   returned: Callable[[Any], Any] = lambda got: got) -> None:
    """`func` predicts what a model must from related arguments: each ``(args, want,
    why)`` of `related` to 1e-6 (relative); a miss says the call, both numbers and `why`.

    Parameters
    ----------
    func : callable
        The student's prediction, called under a 10 s timer (:func:`call_local`).
    name : str
        Its name, as the message writes the call.
    related : iterable of (tuple, float, str)
        Arguments, what the prediction must be for them, and what a miss means.
    returned : callable, optional
        What the function returned, as it is graded (the identity by default).

    Raises
    ------
    CheckFailed
        On the first miss, or when `func` times out or raises.
    """
    __tracebackhide__ = True
    for args, want, why in related:
        got = returned(call_local(func, *args, timeout=10))
        expect_close(got, want, rtol=1e-6, what=f"{name}({', '.join(map(_arg, args))})",
                     hint=why)


def _a_time(got: Any) -> bool:
    """Whether `got` is a positive finite number (what a predicted time must be)."""
    value, why = _trusted(got)
    return (not why and _is_num(value) and not isinstance(value, (complex, bool))
            and math.isfinite(float(value)) and float(value) > 0)


def _off_by(ratio: float, tolerance: tuple[float, float]) -> float:
    """How many times `ratio` lies outside `tolerance` (lo, hi): 1 at either edge."""
    lo, hi = tolerance
    return max(ratio / hi, lo / ratio) if ratio > 0 else math.inf


def _arg(x: Any) -> str:
    return f"{x:.6g}" if isinstance(x, float) else _fmt(x, 40)


def _as_returned(got: Any) -> Any:
    return got


@dataclass(frozen=True)
class Part:
    """One measured case a prediction is graded against.

    Parameters
    ----------
    what : str
        The measured case, in words ("a push of 1 MiB on 4 images").
    args : tuple
        The student's function's arguments for it, from the measurement.
    measured_us : float
        What was measured, in the prediction's unit (µs unless it says).
    predicted, ratio : str
        The keys the check's result gives the prediction and the ratio under.
    pick : callable, optional
        This part's number out of what the function returned (lab 00's function returns
        a lap and a shift for the same arguments; it is called once for both).
    tolerance : (float, float), optional
        This part's band of ``measured / predicted``, where it is not the
        prediction's (lab 01: a message α dominates and one n / β does); None: the
        :class:`Prediction`'s.
    hint : callable, optional
        ``hint(got) -> str``: what a miss of this part most likely means, from what the
        function returned for it ("" when nothing is likely).
    """

    what: str
    args: tuple
    measured_us: float
    predicted: str = "predicted_us"
    ratio: str = "ratio"
    pick: Callable[[Any], Any] | None = None
    tolerance: tuple[float, float] | None = None
    hint: Callable[[Any], str] | None = None


@dataclass(frozen=True)
class Prediction:
    """A lab's graded prediction, declared as data.

    Parameters
    ----------
    name : str
        The student's function, as messages call it ("push_us").
    now : callable
        ``now(ranks) -> dict``: the measurement, made once per grading session
        (:func:`mpilab.grading.measured.measure`); it has ``ranks``, ``cores`` and
        ``oversubscribed`` (:func:`where`).
    parts : callable
        ``parts(m) -> [Part, ...]``: the measured cases of measurement `m`, each with the
        arguments the student's function predicts it from.
    model : callable
        ``model(m) -> str``: the numbers the predictions were made from, in words.
    tolerance : (float, float)
        How many times the prediction each measured case may take.
    reference, hint : callable, optional
        The model, and ``hint(got, *args)`` for a miss, for the made-up cases
        (:func:`expect_model`); without them a check takes no cases.
    args : callable
        A made-up case as the function's arguments (lab 02 makes its dims a tuple).
    expect_cases : callable, optional
        ``expect_cases(func, cases)`` in place of :func:`expect_model`, where the function
        returns more than one number.
    returned : callable
        What the function returned, as it is graded (lab 01 accepts a one-element array).
    shows : callable, optional
        ``shows(func, m, ranks)``: prints the try-it cell's lines (:meth:`show`).
    related : callable, optional
        ``related(args, got) -> [(args2, want, why), ...]``: for a part's arguments and
        the prediction made from them, other arguments and what any model of the lab's
        shape must predict from them (twice α and half β: twice the time). A prediction
        that ignores its arguments (a fixed number, a measurement made when called)
        misses them, and `why` says so; where a check takes no made-up cases, these
        are what keeps it a model's.
    unit : str
        The unit of the predictions and measurements, "µs" unless said (lab 07's is
        "ms").
    """

    name: str
    now: Callable[[int], dict]
    parts: Callable[[dict], Iterable[Part]]
    model: Callable[[dict], str]
    tolerance: tuple[float, float]
    reference: Callable[..., float] | None = None
    hint: Callable[..., str] | None = None
    args: Callable[[Any], tuple] = tuple
    expect_cases: Callable[[Callable, Iterable], None] | None = None
    returned: Callable[[Any], Any] = _as_returned
    shows: Callable[[Callable, dict, int], None] | None = None
    related: Callable[[tuple, Any], Iterable[tuple[tuple, float, str]]] | None = None
    unit: str = "µs"

    def check(self, func: Callable, cases: Iterable = (), *, ranks: int) -> dict:
        """`func` equals the model on `cases`, and its predictions hold against the
        measurement: return the measurement with each part's prediction and ratio.

        Parameters
        ----------
        func : callable
            The student's prediction function.
        cases : iterable, optional
            Made-up cases to compare it with the model on (each made the function's
            arguments by `args`); none by default.
        ranks : int
            Ranks of the lab's cluster (the measurement uses at most these).

        Returns
        -------
        dict
            The measurement, with each part's prediction (µs) and ratio (measured /
            predicted) under the part's ``predicted`` and ``ratio`` keys.

        Raises
        ------
        mpilab.grading.CheckFailed
            Naming the case and the likely slip, or the measured case, the measurement,
            the prediction and the numbers it was made from.
        """
        __tracebackhide__ = True
        if self.expect_cases is not None:
            self.expect_cases(func, cases)
        elif self.reference is not None:
            expect_model(func, self.name, [self.args(c) for c in cases], self.reference,
                         self.hint)
        m = self.now(ranks)
        model = self.model(m)
        out = dict(m)
        calls: list[tuple[tuple, Any]] = []  # one call per distinct arguments
        for part in self.parts(m):
            got = next((g for a, g in calls if a == part.args), calls)
            if got is calls:
                got = self.returned(call_local(func, *part.args, timeout=10))
                calls.append((part.args, got))
            if part.pick is not None:
                got = part.pick(got)
            out[part.predicted] = got
            if self.related is not None and part.pick is None and _a_time(got):
                # a model of its arguments first, whatever the (noisy) measurement says
                # (a prediction that is no time at all is told so by expect_prediction)
                expect_related(func, self.name, self.related(part.args, got), self.returned)
            try:
                out[part.ratio] = expect_prediction(
                    got, part.measured_us, tolerance=part.tolerance or self.tolerance,
                    what=part.what, model=model, unit=self.unit,
                    hint=part.hint(got) if part.hint else "")
            except CheckFailed as exc:
                why = steady.busy(m)  # a busy machine, in a student's notebook (not grading)
                if why and _a_time(got):
                    ratio = part.measured_us / float(_trusted(got)[0])
                    if _off_by(ratio, part.tolerance or self.tolerance) <= steady.SLOWER:
                        _fail(Ungradable(f"{exc} {why}"))  # a miss load can make
                raise
        return out

    def show(self, func: Callable, ranks: int) -> None:
        """Not graded: the measurement (the first call makes it, a few seconds), beside
        `func`'s predictions; nothing while grading.

        Parameters
        ----------
        func : callable
            The student's prediction function.
        ranks : int
            Ranks of the lab's cluster (the measurement uses at most these).
        """
        if not_while_grading():
            return None
        self.shows(func, self.now(ranks), ranks)

    def cells(self, module: str, check: str, show: str | None, calls: str, *, against: str,
              shows: str = "", cases: Any = inspect.Parameter.empty, ranks: int = 4,
              keys: str = "``predicted_us`` and ``ratio``") -> tuple[Callable, Callable | None]:
        """The functions a lab's notebook calls: its test cell's ``check(func, cases, *,
        ranks)`` (:meth:`check`) and its try-it cell's ``show(func, ranks)``
        (:meth:`show`), named and documented for the lab.

        Every lab's pair is this one pair with other words, so the words are data: the
        functions take the student's function under :attr:`name` (as a keyword too),
        and their numpydoc docstrings are written from the arguments below.

        Parameters
        ----------
        module : str
            The lab's checks module (its ``__name__``): where the functions are found
            (help, pickling).
        check, show : str
            The two functions' names; `show` None for a lab without a try-it cell.
        calls : str
            The student's function as it is called, e.g. ``"push_us(n_bytes,
            tiny_push_us, copy_MBps)"``; its arguments are what a made-up case holds.
        against : str
            What the prediction is graded against, measured just now ("a push of 1 MiB").
        shows : str, optional
            What the try-it cell measures and prints beside the prediction.
        cases : tuple or None, optional
            The made-up cases' default. Left out, the check requires them; None, the
            check takes none (it grades the measurement only, with :attr:`related`).
        ranks : int, optional
            The default rank count, that of the lab's cluster (4 unless said).
        keys : str, optional
            The keys the check's result gives the predictions and ratios under, in words.

        Returns
        -------
        (callable, callable or None)
            The check and the show function (None where `show` is).
        """
        P = inspect.Parameter
        lo, hi = self.tolerance
        student = P(self.name, P.POSITIONAL_OR_KEYWORD, annotation=Callable)
        made_up = ([] if cases is None else
                   [P("cases", P.POSITIONAL_OR_KEYWORD, default=cases, annotation=Iterable)])
        checks = inspect.Signature(
            [student, *made_up, P("ranks", P.KEYWORD_ONLY, default=ranks, annotation=int)],
            return_annotation=dict)
        showing = inspect.Signature(
            [student, P("ranks", P.POSITIONAL_OR_KEYWORD, default=ranks, annotation=int)],
            return_annotation=None)
        model = "prediction" if self.reference is None and self.expect_cases is None \
            else "model"
        func = (f"{self.name} : callable\n    The student's {model}, ``{calls}`` "
                f"({self.unit}).\n")
        cluster = ("ranks : int, optional\n    Ranks of the lab's cluster (default "
                   f"{ranks}); the measurement uses at most these.\n")
        made = ("" if cases is None else
                f"cases : iterable of tuple{', optional' * (cases is not P.empty)}\n"
                f"    Made-up ``({calls.partition('(')[2].partition(')')[0]})`` to compare "
                "it with the model on.\n")

        def check_cell(*args: Any, **kwargs: Any) -> dict:
            __tracebackhide__ = True
            given = checks.bind(*args, **kwargs)
            given.apply_defaults()
            return self.check(given.arguments[self.name], given.arguments.get("cases", ()),
                              ranks=given.arguments["ranks"])

        def show_cell(*args: Any, **kwargs: Any) -> None:
            given = showing.bind(*args, **kwargs)
            given.apply_defaults()
            return self.show(given.arguments[self.name], given.arguments["ranks"])

        equals = ": " if cases is None else " equals the model on `cases`, and then "
        _named(check_cell, module, check, checks, _numpydoc(
            f"``{calls}``{equals}{against}, measured just now, must take {lo:g} to {hi:g} "
            "times what it predicts from numbers measured in the same run.",
            func + made + cluster,
            f"dict\n    :func:`{self.now.__name__}`'s measurement, with {keys} (the "
            f"prediction in {self.unit}, and measured / predicted).\n",
            "mpilab.grading.CheckFailed\n    When the model is wrong on a case, or a "
            f"measurement is outside {lo:g} to {hi:g} times its prediction.\n"))
        if show is None:
            return check_cell, None
        _named(show_cell, module, show, showing, _numpydoc(
            f"Not graded: {shows} measured now (the first call measures them, a few "
            f"seconds), beside ``{self.name}``'s prediction.", func + cluster,
            "None\n    It prints; nothing while grading.\n"))
        return check_cell, show_cell


def fixed_plus_bytes(module: str, check: str, show: str, name: str, fixed: str, beta: str, *,
                     reference: Callable[..., float], hint: Callable[..., str],
                     now: Callable[[int], dict], tolerance: tuple[float, float], case: str,
                     who: str, fixed_is: str, besides: Callable[[dict], str], shows: str,
                     ranks_are: str = "ranks", beta_is: str = "β"
                     ) -> tuple[Prediction, Callable, Callable]:
    """A prediction of one transfer of n bytes as a fixed time plus the bytes at a
    bandwidth, ``fixed + n / β`` (lab 03's fence epoch with one Put, lab 04's push),
    graded against the transfer of ``m["nbytes"]`` bytes in `now`'s measurement ``m``;
    with its test and try-it cells' functions
    (:meth:`Prediction.cells`).

    Parameters
    ----------
    module, check, show : str
        The lab's checks module (its ``__name__``) and the names of the two cells'
        functions, as for :meth:`~mpilab.grading.prediction.Prediction.cells`.
    name : str
        The student's function, as messages call it ("push_us"); the measurement holds
        the measured transfer's time (µs) under the same key.
    fixed, beta : str
        The measurement's keys of the fixed time (µs) and of the bandwidth (MB/s) the
        prediction is made from ("tiny_push_us", "copy_MBps"), as the student's
        function names its arguments after ``n_bytes``.
    reference, hint, now, tolerance
        As for :class:`~mpilab.grading.prediction.Prediction`.
    case : str
        The measured transfer, in words ("a push of 1 MiB").
    who : str
        Which rank moves the bytes into which ("image 1 stores into image 2").
    fixed_is : str
        What the check's message calls the fixed time ("a tiny push").
    besides : callable
        ``besides(m) -> str``: what the try-it cell prints as measured besides the
        transfer, after the ranks and cores.
    shows : str
        What the try-it cell measures and prints, in words, for its docstring.
    ranks_are : str, optional
        What the lab calls its ranks ("ranks" unless said; lab 04's are "images").
    beta_is : str, optional
        What the check's message calls the bandwidth ("β" unless said; lab 04's is
        "β_copy").

    Returns
    -------
    (Prediction, callable, callable)
        The prediction, graded against one part, the transfer, predicted from
        ``(m["nbytes"], m[fixed], m[beta])``; the test cell's check and the try-it cell's
        show function.
    """

    def lines(func: Callable, m: dict, _ranks: int) -> None:
        print(f"measured on {m['ranks']} {ranks_are} ({m['cores']} cores): " + besides(m))
        print(f"{case}: measured {m[name]:8.1f} µs, predicted "
              + shown(func, m["nbytes"], m[fixed], m[beta], name=name))

    prediction = Prediction(
        name=name, reference=reference, hint=hint, now=now, tolerance=tolerance, shows=lines,
        parts=lambda m: [Part(f"{case} on {m['ranks']} {ranks_are} ({who})",
                              (m["nbytes"], m[fixed], m[beta]), m[name])],
        model=lambda m: (f"{fixed_is} of {m[fixed]:.3g} µs and {beta_is} = {m[beta]:,.0f} "
                         f"MB/s, measured just now on {where(m)}"))
    calls = f"{name}(n_bytes, {fixed}, {beta})"
    return (prediction, *prediction.cells(module, check, show, calls, against=f"{case} ({who})",
                                          shows=shows))


def _numpydoc(summary: str, parameters: str, returns: str, raises: str = "") -> str:
    """A numpydoc docstring from its summary and its sections' bodies (unindented)."""
    sections = [("Parameters", parameters), ("Returns", returns), ("Raises", raises)]
    return "\n\n".join([textwrap.fill(summary, 88)] + [
        f"{title}\n{'-' * len(title)}\n" + "\n".join(
            textwrap.fill(line.strip(), 88, initial_indent="    ", subsequent_indent="    ")
            if line.startswith("    ") else line for line in body.rstrip().splitlines())
        for title, body in sections if body])


def _named(func: Callable, module: str, name: str, signature: inspect.Signature,
           doc: str) -> None:
    """Make `func` module `module`'s `name` for help, introspection, pickling and the
    names a traceback or a refusal (:mod:`mpilab.autograder.watch`) gives its frames."""
    func.__module__, func.__name__, func.__qualname__ = module, name, name
    func.__code__ = func.__code__.replace(co_name=name, co_qualname=name)
    func.__signature__ = signature
    func.__doc__ = doc
