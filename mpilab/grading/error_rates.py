"""How often the labs' measured checks fail a correct model or pass a wrong one.

``python -m mpilab.bench grading-errors`` (:mod:`mpilab.bench.grading_errors`) is the
command line; this module is the experiment. For every lab's graded prediction (the
``check_*_us`` of :mod:`mpilab.grading.measured`, ``halo_model``, ``onesided_model``,
``coarrays``, ``collectives_model``, ``allgather_model``, and lab 07's
:func:`mpilab.grading.network.check_predict_measured`) it grades the lab's correct model
and known-wrong models, `repeats` times, each repetition against a fresh measurement.

What it exercises, and what not:

* the lab's own check function, called as the lab's test cell calls it, in a process set
  up as the grader's kernel is at autograde time (:func:`grader`: a scratch folder, a
  sandbox, ``MPILAB_GRADER``): the measurement runs on the grader's sandboxed MPI ranks
  (:mod:`mpilab.autograder.pool`), under the grading lock
  (:func:`mpilab.autograder.quiet.measuring`), and each model is a student's function
  as the grader holds one (:class:`mpilab.autograder.isolated.StudentFunction`: a
  cloudpickle only the sandboxed ranks load), called there;
* each repetition is a grading session of its own (:func:`mpilab.grading.measured.own_session`):
  one fresh measurement, which every model of the repetition is graded against, as one
  ``nbgrader autograde`` session grades a class against one measurement;
* not nbgrader, its kernels or the student's kernel (``python -m mpilab.bench autograde``
  measures those), and no hidden test: the made-up cases graded beside the measurement
  are the visible test cell's.

The correct model is the lab's solution, read from the instructors' source notebook by
the command line (:func:`models`): nothing here holds an answer. The wrong models are
that solution changed the way students slip (:data:`SLIPS`): latency or bandwidth only,
bits for bytes, twice or half the time, another algorithm's formula, a constant.

Each grading is recorded twice: ``with_cases`` (the check as the lab's visible test cell
calls it: the made-up cases, then the measurement) and ``measured`` (the same check with
no made-up cases: the measured part alone, which is what a tolerance decides). Per lab and
model, :func:`rates` gives the pass count, the false-fail rate of the correct model or
the false-pass rate of a wrong one with a 95 % Clopper-Pearson interval, and the measured
/ predicted ratio each tolerance is applied to (min, 5th percentile, median, 95th, max).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..autograder.failures import CheckFailed, Ungradable
from . import measured

__all__ = ["Graded", "GRADED", "LABS", "SLIPS", "models", "student_function", "grader", "load",
           "tolerance", "grade_lab", "rates", "run", "table"]


@dataclass(frozen=True)
class Graded:
    """One lab's graded prediction, as the error-rate bench grades it.

    Parameters
    ----------
    name : str
        The student's function ("exchange_us").
    check : str
        The check, ``"module:function"`` under :mod:`mpilab.grading`, called as
        ``check(func, cases)`` (or ``check(func)`` without `cases`).
    prediction : str or None
        The :class:`~mpilab.grading.prediction.Prediction` it checks (``"module:NAME"``),
        whose measured parts give the ratios; None for lab 07's (:func:`_link_ratios`).
    cases : tuple or None
        The visible test cell's made-up cases; None where the check takes none.
    ranks : int
        The ranks of the lab's cluster (the check's default).
    args : dict
        Argument positions the slips change: ``fixed`` (α, or the fixed cost), ``beta``,
        ``alg``, ``p``.
    needs : tuple of str
        Other functions of the lab's solution the model calls.
    """

    name: str
    check: str
    prediction: str | None
    cases: tuple | None
    ranks: int = 4
    args: dict = field(default_factory=dict)
    needs: tuple = ()


GRADED: dict[str, Graded] = {
    "lab00-mpi-basics": Graded("ring_times_us", "measured:check_ring_times", "measured:RING",
                               ((2, 10.0), (5, 1.0)), args={"p": 0, "fixed": 1}),
    "lab01-pingpong": Graded("predict_us", "measured:check_predict_held_out",
                             "measured:HELD_OUT", None, ranks=2,
                             args={"fixed": 1, "beta": 2}),
    "lab02-halo": Graded("exchange_us", "halo_model:check_exchange_us", "halo_model:EXCHANGE",
                         ((16, 12, (2, 2), 1.0, 1000.0), (1000, 10, (1, 2), 2.0, 500.0)),
                         args={"fixed": 3, "beta": 4}),
    "lab03-one-sided": Graded("epoch_us", "onesided_model:check_epoch_us",
                              "onesided_model:EPOCH",
                              ((8, 1.5, 10000.0), (1_000_000, 2.0, 5000.0)),
                              args={"fixed": 1, "beta": 2}),
    "lab04-coarrays": Graded("push_us", "coarrays:check_push_us", "coarrays:PUSH",
                             ((8, 6.0, 40000.0), (1_000_000, 10.0, 20000.0)),
                             args={"fixed": 1, "beta": 2}),
    "lab05-collectives": Graded("bcast_us", "collectives_model:check_bcast_us",
                                "collectives_model:BCAST",
                                (("linear", 4, 1000, 2.0, 1000.0),
                                 ("binomial", 4, 1000, 2.0, 1000.0)),
                                args={"alg": 0, "fixed": 3, "beta": 4}),
    "lab06-allgather": Graded("allgather_us", "allgather_model:check_allgather_us",
                              "allgather_model:ALLGATHER",
                              (("ring", 4, 1000, 2.0, 1000.0), ("bruck", 4, 1000, 2.0, 1000.0),
                               ("recursive_doubling", 4, 1000, 2.0, 1000.0)),
                              args={"alg": 0, "fixed": 3, "beta": 4}),
    "lab07-across-the-link": Graded("predict_ms", "network:check_predict_measured", None,
                                    None, args={"fixed": 2, "beta": 3},
                                    needs=("link_loads",)),
}
LABS = list(GRADED)

#: The wrong models: (name, what it does, the arguments it needs, the body of
#: ``model(*args)``, which calls the correct model as ``_CORRECT`` with the list ``a``).
SLIPS = [
    ("latency-only", "the fixed cost alone: β infinite", ("beta",),
     "a[{beta}] = float('inf')\nreturn _CORRECT(*a)"),
    ("bandwidth-only", "the bytes alone: no α (no fixed cost)", ("fixed", "beta"),
     "a[{fixed}] = 0.0\nreturn _CORRECT(*a)"),
    ("bits-for-bytes", "β read as bits per µs: n / β eight times too long", ("beta",),
     "a[{beta}] = a[{beta}] / 8\nreturn _CORRECT(*a)"),
    ("fixed-cost-twice", "the fixed cost (α, the empty epoch, the tiny push) counted twice",
     ("fixed", "beta"), "a[{fixed}] = 2 * a[{fixed}]\nreturn _CORRECT(*a)"),
    ("linear-formula", "the linear broadcast's p - 1 messages for both broadcasts",
     ("alg", "beta"), "a[{alg}] = 'linear'\nreturn _CORRECT(*a)"),
    ("tree-formula", "the binomial tree's ⌈log2 p⌉ steps for both broadcasts",
     ("alg", "beta"), "a[{alg}] = 'binomial'\nreturn _CORRECT(*a)"),
    ("ring-formula", "the ring's p - 1 steps of one block for every allgather",
     ("alg", "beta"), "a[{alg}] = 'ring'\nreturn _CORRECT(*a)"),
    ("lap-p-1-hops", "a lap of p - 1 hops (the token not coming back)", ("p",),
     "a[{p}] = a[{p}] - 1\nreturn _CORRECT(*a)"),
    ("shift-p-hops", "the shift's p messages one after the other, like a lap", ("p",),
     "lap, _shift = _CORRECT(*a)\nreturn lap, lap"),
    ("twice", "twice the correct model's time", (), "return _scaled(_CORRECT(*a), 2.0)"),
    ("half", "half the correct model's time", (), "return _scaled(_CORRECT(*a), 0.5)"),
    ("constant", "100 (µs, or ms for lab 07) whatever the arguments", (),
     "return _scaled(_CORRECT(*a), 0.0, 100.0)"),
]

#: run before the solution's cell, as the labs' set-up cells import these
_PRELUDE = """\
import math
import numpy as np
from mpilab import halo


def _scaled(got, k, plus=0.0):
    if isinstance(got, (tuple, list)):
        return tuple(float(v) * k + plus for v in got)
    return float(got) * k + plus
"""


def _slip_applies(lab: str, slip: str, needs: tuple) -> bool:
    g = GRADED[lab]
    if any(n not in g.args for n in needs):
        return False
    if slip in ("linear-formula", "tree-formula"):
        return lab == "lab05-collectives"
    if slip == "ring-formula":
        return lab == "lab06-allgather"
    return True


def models(lab: str, solution: dict[str, str]) -> dict[str, tuple[str, str]]:
    """The lab's correct model and its wrong ones, as source text a student could write.

    Parameters
    ----------
    lab : str
        A lab of :data:`GRADED`.
    solution : dict of str to str
        The lab's solution cells, by grade id (what
        :func:`mpilab.autograder.course.solutions` reads from the source notebook).

    Returns
    -------
    dict of str to (str, str)
        ``{"correct": (what, source), slip: (what, source), ...}``: each source defines
        the lab's function (:attr:`Graded.name`) after :data:`_PRELUDE`.

    Raises
    ------
    ValueError
        When no solution cell defines the lab's function (the students' edition has none).
    """
    g = GRADED[lab]

    def cell(name: str) -> str:
        for src in solution.values():
            if f"def {name}(" in src:
                return src
        raise ValueError(f"{lab}: no solution cell defines {name}: the error-rate bench "
                         "needs the instructors' source notebooks")

    correct = "\n\n".join([_PRELUDE, *(cell(n) for n in g.needs), cell(g.name)])
    out = {"correct": ("the lab's solution", correct)}
    for slip, what, needs, body in SLIPS:
        if not _slip_applies(lab, slip, needs):
            continue
        body = body.format(**g.args)
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


def _resolve(ref: str):
    import importlib

    module, attr = ref.split(":")
    return getattr(importlib.import_module(f"mpilab.grading.{module}"), attr)


_GRADERS: list[int] = []  # the process that was a grader (:func:`grader`): once


@contextlib.contextmanager
def grader(hide: list[str] | tuple = ()) -> Iterator[dict]:
    """This process as the grader's kernel at autograde time, meanwhile.

    As the autograde preprocessor sets one up (:mod:`mpilab.autograder.nbgrader`): a
    claimed scratch folder, a sandbox (bubblewrap and cgroups where this machine has
    them), the grader's settings in ``MPILAB_GRADER``; the checks then run the student's
    functions and the measurements on the sandbox's MPI ranks. The ranks, the sandbox and
    the scratch folder end with the block. Once per process: the grader's settings are
    read once (:func:`mpilab.autograder.isolated.config`).

    Parameters
    ----------
    hide : sequence of str, optional
        Folders the sandbox hides besides its defaults.

    Yields
    ------
    dict
        The sandbox's facts: ``sandbox`` (bubblewrap or why not), ``as_root``.

    Raises
    ------
    RuntimeError
        When this process is a grader already (``MPILAB_GRADER`` set).
    """
    from ..autograder import isolated
    from ..autograder.sandbox import Sandbox
    from ..autograder.scratch import make_scratch

    if isolated.active() or _GRADERS:
        raise RuntimeError("this process is a grader's kernel already: one grader per process")
    _GRADERS.append(os.getpid())
    root, claim = make_scratch()
    box = Sandbox(root, hide=[str(h) for h in hide])
    try:
        cfg = {"sandbox": os.path.join(root, "sandbox.json"), "home": str(box.folder("home")),
               "pool": str(box.folder("pool")), "build": str(box.folder("build")),
               "exports": str(box.folder("exports"))}
        box.save(cfg["sandbox"])
        path = os.path.join(root, "grader.json")
        Path(path).write_text(json.dumps(cfg))
        os.chmod(path, 0o600)
        os.environ[isolated.ENV] = path
        yield {"sandbox": "bubblewrap" if box.isolated else f"none ({box.why_not})",
               "as_root": box.as_root}
    finally:
        try:
            isolated.shutdown()
        finally:
            os.environ.pop(isolated.ENV, None)
            box.close()
            claim.close()


@contextlib.contextmanager
def load(busy: int) -> Iterator[dict]:
    """`busy` processes spinning beside the gradings, meanwhile: a second job (an MPI job
    of `busy` ranks, each a Python loop), which the grading lock does not hold back.

    Parameters
    ----------
    busy : int
        Busy processes (0: none).

    Yields
    ------
    dict
        ``load_processes`` and ``load_kind``, for the run's meta.
    """
    if busy <= 0:
        yield {"load_processes": 0, "load_kind": None}
        return
    from .. import jobs, runtime

    with jobs.Job(runtime.launch(busy), [sys.executable, "-c", "while True: pass"]):
        yield {"load_processes": busy,
               "load_kind": f"a second job beside the gradings: {busy} busy Python "
                            "processes under mpiexec (the grading lock does not see them)"}


def _verdict(call: Callable[[], Any]) -> tuple[str, str | None]:
    try:
        call()
    except Ungradable as exc:
        return "ungradable", str(exc)[:400]
    except CheckFailed as exc:
        return "fail", str(exc)[:400]
    return "pass", None


def _prediction_ratios(g: Graded, func: Callable) -> dict[str, float | None]:
    """measured / predicted for each measured part, from the session's measurement."""
    pred = _resolve(g.prediction)
    m = pred.now(g.ranks)  # the repetition's measurement (measured.own_session)
    out: dict[str, float | None] = {}
    for part in pred.parts(m):
        try:
            got = pred.returned(func(*part.args))
            got = part.pick(got) if part.pick is not None else got
            out[part.ratio] = part.measured_us / float(got)
        except (ArithmeticError, TypeError, ValueError):
            out[part.ratio] = None
    return out


def _link_ratios(g: Graded, func: Callable) -> dict[str, float | None]:
    """Lab 07: measured / predicted per placement, from the session's link, with α and β
    fitted as :func:`mpilab.grading.network.check_predict_measured` fits them."""
    from . import network

    link = network.link_now()
    sizes, times = [r["size_bytes"] for r in link["pingpong"]], [
        r["t_us_min"] for r in link["pingpong"]]
    a, b = network.reference_fit(sizes, times, network.BIG_BYTES)
    out: dict[str, float | None] = {}
    for map_by, rec in link["ring"].items():
        hosts = list(rec["node_of_rank"])
        sched = network.traced("ring", len(hosts), link["block_bytes"])
        try:
            out[f"{map_by}_ratio"] = rec["t_us_min"] / 1e3 / float(func(sched, hosts, a, b))
        except (ArithmeticError, TypeError, ValueError):
            out[f"{map_by}_ratio"] = None
    return out


def tolerance(lab: str) -> tuple[float, float]:
    """The (lowest, highest) measured / predicted ratio the lab's check accepts.

    Parameters
    ----------
    lab : str
        A lab of :data:`GRADED`.

    Returns
    -------
    (float, float)
        The tolerance its check applies.
    """
    g = GRADED[lab]
    if g.prediction is None:
        from . import network

        return tuple(network.PREDICTION_TOLERANCE)
    return tuple(_resolve(g.prediction).tolerance)


def grade_lab(lab: str, solution: dict[str, str], repeats: int,
              progress: Callable[[str], None] = lambda line: None) -> list[dict]:
    """Grade the lab's correct and wrong models `repeats` times (inside :func:`grader`).

    Parameters
    ----------
    lab : str
        A lab of :data:`GRADED`.
    solution : dict of str to str
        The lab's solution cells (:func:`models`).
    repeats : int
        Repetitions, each a grading session with a fresh measurement.
    progress : callable, optional
        Called with a line per repetition.

    Returns
    -------
    list of dict
        Per repetition one ``kind: "measurement"`` record (``values``: the measurements
        made, by key) and per model one ``kind: "grading"`` record: ``impl`` (the model),
        ``correct``, ``with_cases`` and ``measured`` (``"pass"``, ``"fail"`` or
        ``"ungradable"``), ``why`` (for each of the two, the failure's message, cut, or
        None), ``ratios`` (measured / predicted per part; None where the model gives no
        number).
    """
    g = GRADED[lab]
    check = _resolve(g.check)
    funcs = {name: (what, *student_function(g.name, src))
             for name, (what, src) in models(lab, solution).items()}
    ratios_of = _prediction_ratios if g.prediction is not None else _link_ratios
    records: list[dict] = []
    for rep in range(repeats):
        with measured.own_session() as made:
            for name, (what, handle, func) in funcs.items():
                if g.cases is None:  # the check takes no made-up cases: one grading
                    with_cases = alone = _verdict(lambda h=handle: check(h))
                else:
                    with_cases = _verdict(lambda h=handle: check(h, g.cases))
                    alone = _verdict(lambda h=handle: check(h, ()))
                try:
                    ratios = ratios_of(g, func)
                except (CheckFailed, Ungradable):  # no measurement could be made
                    ratios = {}
                records.append({"impl": name, "kind": "grading", "lab": lab, "rep": rep,
                                "correct": name == "correct", "what": what,
                                "with_cases": with_cases[0], "measured": alone[0],
                                "why": {"measured": alone[1], "with_cases": with_cases[1]},
                                "ratios": ratios})
            values = dict(made)
        records.append({"impl": "measurement", "kind": "measurement", "lab": lab, "rep": rep,
                        "values": values})
        ok = [r for r in records if r["kind"] == "grading" and r["rep"] == rep]
        progress(f"{lab} repetition {rep + 1}/{repeats}: "
                 + " ".join(f"{r['impl']}={r['measured']}" for r in ok))
    return records


def _ci95(k: int, n: int) -> list[float] | None:
    if n == 0:
        return None
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return [float(ci.low), float(ci.high)]


def _spread(values: list[float]) -> dict | None:
    xs = [v for v in values if v is not None and math.isfinite(v)]
    if not xs:
        return None
    p5, med, p95 = np.percentile(xs, [5, 50, 95])
    return {"n": len(xs), "min": min(xs), "p5": float(p5), "median": float(med),
            "p95": float(p95), "max": max(xs)}


def rates(records: list[dict]) -> list[dict]:
    """Per lab and model: pass counts, error rates with 95 % bounds, the ratios' spread.

    Parameters
    ----------
    records : list of dict
        :func:`grade_lab`'s records (other kinds are ignored).

    Returns
    -------
    list of dict
        One ``kind: "rates"`` record per lab and model: ``gradings`` (ungradable ones
        left out of the rates, counted in ``ungradable``), for ``measured`` and
        ``with_cases`` each ``{"passes", "rate", "ci95"}``, where ``rate`` is the
        false-fail rate (failures / gradings) of the correct model and the false-pass
        rate (passes / gradings) of a wrong one (``rate_is`` says which) and ``ci95``
        its Clopper-Pearson interval; ``tolerance``; ``ratios``: per measured part the
        min, 5th percentile, median, 95th percentile and max of measured / predicted.
    """
    out = []
    keys = list(dict.fromkeys((r["lab"], r["impl"]) for r in records
                              if r["kind"] == "grading"))
    for lab, impl in keys:
        rs = [r for r in records if r["kind"] == "grading" and (r["lab"], r["impl"]) == (lab, impl)]
        correct = rs[0]["correct"]
        rec = {"impl": impl, "kind": "rates", "lab": lab, "correct": correct,
               "what": rs[0]["what"], "rate_is": "false-fail" if correct else "false-pass",
               "tolerance": list(tolerance(lab))}
        for which in ("measured", "with_cases"):
            graded = [r[which] for r in rs if r[which] != "ungradable"]
            passes = graded.count("pass")
            wrong = len(graded) - passes if correct else passes
            rec[which] = {"gradings": len(graded), "ungradable": len(rs) - len(graded),
                          "passes": passes,
                          "rate": wrong / len(graded) if graded else None,
                          "ci95": _ci95(wrong, len(graded))}
        parts = list(dict.fromkeys(k for r in rs for k in r["ratios"]))
        rec["ratios"] = {p: _spread([r["ratios"].get(p) for r in rs]) for p in parts}
        out.append(rec)
    return out


def run(labs: list[str], solutions: dict[str, dict[str, str]], repeats: int = 30,
        busy: int = 0, progress: Callable[[str], None] = lambda line: None
        ) -> tuple[dict, list[dict]]:
    """Grade every lab's models `repeats` times, as the grader does; meta and records.

    Parameters
    ----------
    labs : list of str
        Labs of :data:`GRADED`.
    solutions : dict
        Each lab's solution cells, by grade id (:func:`models`).
    repeats : int, optional
        Repetitions per lab (default 30), each with a fresh measurement.
    busy : int, optional
        Busy processes beside the gradings (:func:`load`; default 0).
    progress : callable, optional
        Called with a line per repetition.

    Returns
    -------
    meta : dict
        The sandbox's facts and the load (``load_processes``, ``load_kind``); the caller
        adds the machine's and the library's.
    records : list of dict
        :func:`grade_lab`'s records of every lab, then :func:`rates`'s.
    """
    records: list[dict] = []
    with grader() as facts, load(busy) as loaded:
        for lab in labs:
            records += grade_lab(lab, solutions[lab], repeats, progress)
    return {**facts, **loaded}, records + rates(records)


def _fmt_rate(d: dict) -> str:
    if d["rate"] is None:
        return "   -"
    lo, hi = d["ci95"]
    return f"{d['passes']:>3}/{d['gradings']:<3} {d['rate']:.2f} [{lo:.2f}, {hi:.2f}]"


def table(records: list[dict]) -> str:
    """The rates as a table: one line per lab and model.

    Parameters
    ----------
    records : list of dict
        Records with :func:`rates`'s among them.

    Returns
    -------
    str
        Lab, model (the correct one starred), passes / gradings of the measured part
        alone and of the check with its made-up cases, each with the error rate (the
        correct model's false fails, a wrong one's false passes) and its 95 % interval,
        the tolerance, and per measured part the median (5th to 95th percentile) of
        measured / predicted.
    """
    lines = [f"{'lab':<22} {'model':<17} {'measured part alone':<28} "
             f"{'with made-up cases':<28} {'tol.':<7}  measured / predicted: median "
             "(p5-p95)"]
    for r in records:
        if r["kind"] != "rates":
            continue
        ratios = "; ".join(
            f"{part.removesuffix('_ratio').replace('_', ' ')} {s['median']:.2f} "
            f"({s['p5']:.2f}-{s['p95']:.2f})" for part, s in r["ratios"].items() if s)
        lines.append(f"{r['lab']:<22} {r['impl'] + ' *' * r['correct']:<17} "
                     f"{_fmt_rate(r['measured']):<28} {_fmt_rate(r['with_cases']):<28} "
                     f"{r['tolerance'][0]:g}-{r['tolerance'][1]:g}  {ratios or '-'}")
    return "\n".join(lines)
