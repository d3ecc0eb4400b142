"""What the error-rate bench grades: each lab's measured checks, its correct and wrong models.

:mod:`mpilab.grading.error_rates` grades these (``python -m mpilab.bench grading-errors``).
A measured check (:class:`Graded`) is one test cell of a lab whose verdict depends on a
measurement made at grading time: the labs' graded predictions (``check_*_us`` of
:mod:`mpilab.grading.measured`, ``halo_model``, ``onesided_model``, ``coarrays``,
``collectives_model``, ``allgather_model``, and lab 07's
:func:`mpilab.grading.network.check_predict_measured`), and lab 01's ping-pong, whose
time the test cell compares with the course's own and with the call that measured it
(``check_pingpong``, defined in the test cell itself, :func:`mpilab.grading.expect_timing`).

The correct model is the lab's solution, read from the instructors' source notebook (the
command line hands over its cells: :func:`models`); nothing here holds an answer or a
hidden case (the made-up cases are the visible test cells'). The wrong models are that
solution changed the way students slip (:data:`SLIPS`): latency or bandwidth only, bits
for bytes, twice or half the time, another algorithm's formula, a constant, a time in
seconds or of the whole loop.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..autograder.cells import definitions, free_names
from . import (
    allgather_model,
    coarrays,
    collectives_model,
    halo_model,
    measured,
    network,
    onesided_model,
    pingpong,
)
from .prediction import Prediction

__all__ = ["Graded", "GRADED", "LABS", "SLIPS", "graded", "models", "student_function",
           "test_cell", "check_of", "tolerance"]

_PRED = ("latency-only", "bandwidth-only", "bits-for-bytes", "fixed-cost-twice", "twice",
         "half", "constant")


@dataclass(frozen=True)
class Graded:
    """One measured check of a lab, as the error-rate bench grades it.

    Parameters
    ----------
    lab : str
        The lab ("lab02-halo").
    part : str
        The grade id of the lab's test cell ("test_exchange_us").
    name : str
        The student's function it grades ("exchange_us").
    check : callable or str
        The lab's check, called as ``check(func, cases)`` (or ``check(func)`` where
        `cases` is None); or, with `in_cell`, the name of a function the test cell
        defines, called as ``check(grading, func, *cases)``.
    prediction : Prediction or None
        The :class:`~mpilab.grading.prediction.Prediction` it checks, whose measured parts
        give the ratios; None otherwise.
    cases : tuple or None
        The visible test cell's made-up cases, or (`in_cell`) its arguments after the
        function.
    slips : tuple of str
        The wrong models (:data:`SLIPS`) graded besides the correct one.
    args : dict
        Argument positions the slips change: ``fixed`` (α, or the fixed cost), ``beta``,
        ``alg``, ``p``, ``iters``.
    ranks : int
        The ranks of the lab's cluster (the check's default).
    in_cell : bool
        The check is defined in the test cell (:func:`test_cell`), not in a module.
    tolerance : (float, float) or None
        The ratios it accepts, where no `prediction` or module says
        (:func:`tolerance`).
    """

    lab: str
    part: str
    name: str
    check: Callable | str
    prediction: Prediction | None
    cases: tuple | None
    slips: tuple = _PRED
    args: Any = None
    ranks: int = 4
    in_cell: bool = False
    tolerance: tuple | None = None


GRADED: list[Graded] = [
    Graded("lab00-mpi-basics", "test_ring_times", "ring_times_us", measured.check_ring_times,
           measured.RING, ((2, 10.0), (5, 1.0)), args={"p": 0, "fixed": 1},
           slips=("lap-p-1-hops", "shift-p-hops", "twice", "half", "constant")),
    Graded("lab01-pingpong", "test_pingpong", "pingpong", "check_pingpong", None,
           (65536, 2000), args={"iters": 2}, in_cell=True, tolerance=(1 / 20, 20.0),
           ranks=2, slips=("round-trip", "whole-loop", "seconds", "constant-time")),
    Graded("lab01-pingpong", "test_predict_measured", "predict_us",
           pingpong.check_predict_held_out, pingpong.HELD_OUT, None, ranks=2,
           args={"fixed": 1, "beta": 2}),
    Graded("lab02-halo", "test_exchange_us", "exchange_us", halo_model.check_exchange_us,
           halo_model.EXCHANGE,
           ((16, 12, (2, 2), 1.0, 1000.0), (1000, 10, (1, 2), 2.0, 500.0)),
           args={"fixed": 3, "beta": 4}),
    Graded("lab03-one-sided", "test_epoch_us", "epoch_us", onesided_model.check_epoch_us,
           onesided_model.EPOCH, ((8, 1.5, 10000.0), (1_000_000, 2.0, 5000.0)),
           args={"fixed": 1, "beta": 2}),
    Graded("lab04-coarrays", "test_push_us", "push_us", coarrays.check_push_us,
           coarrays.PUSH, ((8, 6.0, 40000.0), (1_000_000, 10.0, 20000.0)),
           args={"fixed": 1, "beta": 2}),
    Graded("lab05-collectives", "test_bcast_us", "bcast_us", collectives_model.check_bcast_us,
           collectives_model.BCAST,
           (("linear", 4, 1000, 2.0, 1000.0), ("binomial", 4, 1000, 2.0, 1000.0)),
           args={"alg": 0, "fixed": 3, "beta": 4},
           slips=(*_PRED, "linear-formula", "tree-formula")),
    Graded("lab06-allgather", "test_allgather_us", "allgather_us",
           allgather_model.check_allgather_us, allgather_model.ALLGATHER,
           (("ring", 4, 1000, 2.0, 1000.0), ("bruck", 4, 1000, 2.0, 1000.0),
            ("recursive_doubling", 4, 1000, 2.0, 1000.0)),
           args={"alg": 0, "fixed": 3, "beta": 4}, slips=(*_PRED, "ring-formula")),
    Graded("lab07-across-the-link", "test_predict_measured", "predict_ms",
           network.check_predict_measured, network.PREDICT, None, args={"fixed": 2, "beta": 3},
           slips=("latency-only", "bandwidth-only", "bits-for-bytes", "twice", "half",
                  "constant")),
]
LABS = list(dict.fromkeys(g.lab for g in GRADED))

#: The wrong models: name -> (what it does, the body of ``model(*args)``, which calls the
#: correct model as ``_CORRECT`` with the list ``a``; ``{key}`` are :attr:`Graded.args`).
SLIPS = {
    "latency-only": ("the fixed cost alone: β infinite",
                     "a[{beta}] = float('inf')\nreturn _CORRECT(*a)"),
    "bandwidth-only": ("the bytes alone: no α (no fixed cost)",
                       "a[{fixed}] = 0.0\nreturn _CORRECT(*a)"),
    "bits-for-bytes": ("β read as bits per µs: n / β eight times too long",
                       "a[{beta}] = a[{beta}] / 8\nreturn _CORRECT(*a)"),
    "fixed-cost-twice": ("the fixed cost (α, the empty epoch, the tiny push) counted twice",
                         "a[{fixed}] = 2 * a[{fixed}]\nreturn _CORRECT(*a)"),
    "linear-formula": ("the linear broadcast's p - 1 messages for both broadcasts",
                       "a[{alg}] = 'linear'\nreturn _CORRECT(*a)"),
    "tree-formula": ("the binomial tree's ⌈log2 p⌉ steps for both broadcasts",
                     "a[{alg}] = 'binomial'\nreturn _CORRECT(*a)"),
    "ring-formula": ("the ring's p - 1 steps of one block for every allgather",
                     "a[{alg}] = 'ring'\nreturn _CORRECT(*a)"),
    "lap-p-1-hops": ("a lap of p - 1 hops (the token not coming back)",
                     "a[{p}] = a[{p}] - 1\nreturn _CORRECT(*a)"),
    "shift-p-hops": ("the shift's p messages one after the other, like a lap",
                     "lap, _shift = _CORRECT(*a)\nreturn lap, lap"),
    "twice": ("twice the correct model's time", "return _scaled(_CORRECT(*a), 2.0)"),
    "half": ("half the correct model's time", "return _scaled(_CORRECT(*a), 0.5)"),
    "constant": ("100 (µs, or ms for lab 07) whatever the arguments",
                 "return _scaled(_CORRECT(*a), 0.0, 100.0)"),
    # a measured time (lab 01's ping-pong returns (one-way µs, what came back))
    "round-trip": ("the round trip's time, not one way", "t, got = _CORRECT(*a)\n"
                   "return t * 2, got"),
    "whole-loop": ("the time of the whole loop, not of one message",
                   "t, got = _CORRECT(*a)\nreturn t * 2 * a[{iters}], got"),
    "seconds": ("the one-way time in seconds, not µs",
                "t, got = _CORRECT(*a)\nreturn t * 1e-6, got"),
    "constant-time": ("100 µs whatever was measured",
                      "t, got = _CORRECT(*a)\nreturn 100.0, got"),
}

#: run before the solution's cells, as the labs' set-up cells import these
_PRELUDE = """\
import math
import numpy as np
from mpilab import halo


def _scaled(got, k, plus=0.0):
    if isinstance(got, (tuple, list)):
        return tuple(float(v) * k + plus for v in got)
    return float(got) * k + plus
"""


def graded(labs: list[str]) -> list[Graded]:
    """The measured checks of `labs`, in the course's order.

    Parameters
    ----------
    labs : list of str
        Lab names (:data:`LABS`).

    Returns
    -------
    list of Graded
        Every measured check of those labs.
    """
    return [g for g in GRADED if g.lab in labs]


def _defines(source: str, name: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body)


def _defining(cells: dict[str, str], name: str) -> str | None:
    """The cell that defines function `name` at its top level (the cell of that grade id
    first), or None."""
    first = [cells[name]] if name in cells else []
    return next((src for src in [*first, *cells.values()] if _defines(src, name)), None)


def models(g: Graded, cells: dict[str, str]) -> dict[str, tuple[str, str]]:
    """The check's correct model and its wrong ones, as source text a student could write.

    Parameters
    ----------
    g : Graded
        The measured check.
    cells : dict of str to str
        The lab's code cells by grade id: the solutions without their delimiters, the
        locked cells, the test cells' visible part (what the command line reads from the
        instructors' source notebook).

    Returns
    -------
    dict of str to (str, str)
        ``{"correct": (what, source), slip: (what, source), ...}``: each source defines
        the student's function (:attr:`Graded.name`): :data:`_PRELUDE`, then the
        definitions of the cells it needs (its own, and those defining the functions it
        calls), then for a slip the wrong model over the correct one.

    Raises
    ------
    ValueError
        When no cell defines the function (a students' edition has no solutions).
    """
    own = _defining(cells, g.name)
    if own is None or "NotImplementedError" in own or "YOUR CODE HERE" in own:
        raise ValueError(f"{g.lab}: no solution cell defines {g.name}: the error-rate bench "
                         "needs the instructors' source notebooks")
    needed, todo = [own], [own]
    while todo:  # the cells defining the functions it calls, and theirs
        for name in free_names(todo.pop()):
            src = _defining(cells, name)
            if src is not None and src not in needed:
                needed.append(src)
                todo.append(src)
    correct = "\n\n".join([_PRELUDE, *(definitions(src) for src in reversed(needed))])
    out = {"correct": ("the lab's solution", correct)}
    for slip in g.slips:
        what, body = SLIPS[slip]
        body = body.format(**(g.args or {}))
        out[slip] = (what, f"{correct}\n\n_CORRECT = {g.name}\n\n\ndef {g.name}(*args):\n"
                           "    a = list(args)\n"
                           + "".join(f"    {line}\n" for line in body.splitlines()))
    return out


def student_function(name: str, source: str):
    """`source`'s function `name`, as the grader holds a student's: (handle, function).

    The source runs here as a notebook cell would (module ``__main__``), so cloudpickle
    keeps the function by value, as the student's kernel exports it
    (:mod:`mpilab.autograder.student`); the handle is what the grader's kernel makes of
    that export.

    Parameters
    ----------
    name : str
        The function's name.
    source : str
        Python source that defines it.

    Returns
    -------
    handle : mpilab.autograder.isolated.StudentFunction
        What the check is given: it runs only on the grader's sandboxed ranks.
    func : callable
        The function itself, for the ratios computed here.
    """
    import cloudpickle

    from ..autograder.failures import fingerprint
    from ..autograder.isolated import StudentFunction

    ns: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(source, f"<{name}>", "exec"), ns)  # noqa: S102 - the bench's own models
    func = ns[name]
    meta = {"name": name, "qualname": name, "fingerprint": fingerprint(func),
            "source": source}
    return StudentFunction(name, cloudpickle.dumps(func), meta), func


def test_cell(g: Graded, cells: dict[str, str]) -> dict[str, Any]:
    """The definitions of the check's test cell (its visible part), run as the grader's
    kernel runs a test cell: in ``__main__``, so its harnesses travel to the ranks by value.

    Parameters
    ----------
    g : Graded
        A check defined in its test cell (:attr:`Graded.in_cell`).
    cells : dict of str to str
        The lab's code cells (:func:`models`).

    Returns
    -------
    dict
        The namespace: the check is ``ns[g.check]``.
    """
    ns: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(_PRELUDE + "\n" + definitions(cells[g.part]), f"<{g.part}>", "exec"), ns)
    return ns


def check_of(g: Graded, cells: dict[str, str]) -> Callable:
    """The check function: from its module, or from the test cell (:func:`test_cell`).

    Parameters
    ----------
    g : Graded
        The measured check.
    cells : dict of str to str
        The lab's code cells (:func:`models`).

    Returns
    -------
    callable
        The check, as the lab's test cell calls it.
    """
    if g.in_cell:
        return test_cell(g, cells)[g.check]
    return g.check


def tolerance(g: Graded) -> tuple[float, float]:
    """The (lowest, highest) ratio the check accepts: measured / predicted, or for a time
    the student measured, theirs / the course's (lab 01's ping-pong also bounds the loop
    the time stands for by the call's time: :data:`mpilab.grading.compare.INSIDE_CALL_SLACK`;
    lab 01's prediction has a band per size, the 4 MiB one's given here:
    :mod:`mpilab.grading.pingpong`).

    Parameters
    ----------
    g : Graded
        The measured check.

    Returns
    -------
    (float, float)
        The tolerance its check applies.
    """
    if g.tolerance is not None:
        return tuple(g.tolerance)
    if g.prediction is None:
        raise ValueError(f"{g.lab} {g.part}: a check without a Prediction says its tolerance")
    return tuple(g.prediction.tolerance)
