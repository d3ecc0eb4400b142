"""How often the labs' measured checks fail a correct model or pass a wrong one.

``python -m mpilab.bench grading-errors`` (:mod:`mpilab.bench.grading_errors`) is the
command line; this module is the experiment, :mod:`mpilab.grading.error_models` what it
grades: each lab's measured checks (the graded predictions, lab 01's ping-pong timing),
the lab's correct model (its solution) and known-wrong ones. Each is graded `repeats`
times, each repetition against a fresh measurement.

What it exercises, and what not:

* the lab's own check function, called as the lab's test cell calls it, in a process set
  up as the grader's kernel is at autograde time (:func:`grader`: a scratch folder, a
  sandbox, ``MPILAB_GRADER``): the measurements run on the grader's sandboxed MPI ranks
  (:mod:`mpilab.autograder.pool`), under the grading lock
  (:func:`mpilab.autograder.quiet.measuring`), and each model is a student's function
  as the grader holds one (:class:`mpilab.autograder.isolated.StudentFunction`: a
  cloudpickle only the sandboxed ranks load), called there;
* each repetition is a grading session of its own
  (:func:`mpilab.grading.measured.own_session`): one fresh measurement, which every
  model of the repetition is graded against, as one ``nbgrader autograde`` session
  grades a class against one measurement (lab 01's ping-pong check measures the
  student's loop and the course's each time it runs, as in a grading);
* not nbgrader, its kernels or the student's kernel (``python -m mpilab.bench autograde``
  measures those), and no hidden test: the cases graded are the visible test cell's; one
  sandbox and one set of sandboxed ranks serve the whole run (a grading starts its own,
  and their start is not measured).

Each grading is recorded twice: ``with_cases`` (the check as the lab's visible test cell
calls it: the made-up cases, then the measurement) and ``measured`` (the same check with
no made-up cases: the measured part alone, which is what a tolerance decides; the same
grading where the check takes no cases). Per check and model, :func:`rates` gives the
pass count, the false-fail rate of the correct model or the false-pass rate of a wrong
one with a 95 % Clopper-Pearson interval, and the spread of the ratio each tolerance is
applied to (measured / predicted; for a time the student measured, theirs / the
course's): min, 5th percentile, median, 95th, max.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..autograder.failures import CheckFailed, Ungradable, forget_timeouts
from . import measured
from .error_models import Graded, check_of, graded, models, student_function, tolerance

__all__ = ["grader", "load", "grade", "rates", "run", "table"]


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
    box = None
    try:
        box = Sandbox(root, hide=[str(h) for h in hide])
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
            if box is not None:
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
    pred = g.prediction
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


def _ratio(a, b) -> float | None:
    try:
        return float(a) / float(b)
    except (ArithmeticError, TypeError, ValueError):
        return None


def _observed(seen: list) -> Any:
    """:mod:`mpilab.grading` as a test cell's check receives it (``g``), its
    ``expect_timing`` also noting in `seen` each ratio it applies, as (name, ratio): the
    student's time over the course's where a band is applied (``run_K``), and, given
    the call's time, the loop the student's time stands for (``2 * iters`` messages)
    over that call's time (``loop_in_call_K``); the verdict is still the real
    ``expect_timing``'s."""
    from types import SimpleNamespace

    from .. import grading

    def note(prefix: str, value: float | None) -> None:
        k = 1 + sum(name.startswith(prefix) for name, _ in seen)
        seen.append((f"{prefix}{k}", value))

    def expect_timing(got_us, reference_us, *args, **kwargs):
        if math.isfinite(kwargs.get("factor", 20.0)):
            note("run_", _ratio(got_us, reference_us))
        iters, took = kwargs.get("iters"), kwargs.get("elapsed_us")
        if iters and took is not None:
            loop = None if _ratio(got_us, 1) is None else float(got_us) * 2 * iters
            note("loop_in_call_", _ratio(loop, took))
        return grading.expect_timing(got_us, reference_us, *args, **kwargs)

    g = SimpleNamespace(**{n: getattr(grading, n) for n in dir(grading)
                           if not n.startswith("__")})
    g.expect_timing = expect_timing
    return g


def grade(g: Graded, cells: dict[str, str], repeats: int,
          progress: Callable[[str], None] = lambda line: None) -> list[dict]:
    """Grade the check's correct and wrong models `repeats` times (inside :func:`grader`).

    Parameters
    ----------
    g : Graded
        The measured check.
    cells : dict of str to str
        The lab's code cells (:func:`mpilab.grading.error_models.models`).
    repeats : int
        Repetitions, each a grading session with a fresh measurement.
    progress : callable, optional
        Called with a line per repetition.

    Returns
    -------
    list of dict
        Per repetition one ``kind: "measurement"`` record (``values``: the measurements
        made, by key) and per model one ``kind: "grading"`` record: ``lab``, ``part``
        (the test cell), ``impl`` (the model), ``correct``, ``with_cases`` and
        ``measured`` (``"pass"``, ``"fail"`` or ``"ungradable"``), ``why`` (for each of
        the two, the failure's message, cut, or None), ``ratios`` (per measured part the
        ratio the tolerance is applied to; None where the model gives no number).
    """
    check = check_of(g, cells)
    funcs = {name: (what, *student_function(g.name, src))
             for name, (what, src) in models(g, cells).items()}
    records: list[dict] = []
    for rep in range(repeats):
        with measured.own_session() as made:
            for name, (what, handle, func) in funcs.items():
                forget_timeouts()  # a grading of its own: no timeout of an earlier one counts
                seen: list = []
                if g.in_cell:  # the test cell's own check: check(grading, func, *args)
                    with_cases = alone = _verdict(
                        lambda h=handle, seen=seen: check(_observed(seen), h, *g.cases))
                elif g.cases is None:  # the check takes no made-up cases: one grading
                    with_cases = alone = _verdict(lambda h=handle: check(h))
                else:
                    with_cases = _verdict(lambda h=handle: check(h, g.cases))
                    alone = _verdict(lambda h=handle: check(h, ()))
                try:
                    ratios = (dict(seen) if g.in_cell
                              else _prediction_ratios(g, func))
                except (CheckFailed, Ungradable):  # no measurement could be made
                    ratios = {}
                records.append({"impl": name, "kind": "grading", "lab": g.lab,
                                "part": g.part, "rep": rep, "correct": name == "correct",
                                "what": what, "with_cases": with_cases[0],
                                "measured": alone[0],
                                "why": {"measured": alone[1], "with_cases": with_cases[1]},
                                "ratios": ratios})
            values = dict(made)
        records.append({"impl": "measurement", "kind": "measurement", "lab": g.lab,
                        "part": g.part, "rep": rep, "values": values})
        progress(f"{g.lab} {g.part} repetition {rep + 1}/{repeats}: "
                 + " ".join(f"{r['impl']}={r['measured']}" for r in records
                            if r["kind"] == "grading" and r["rep"] == rep))
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
    """Per check and model: pass counts, error rates with 95 % bounds, the ratios' spread.

    Parameters
    ----------
    records : list of dict
        :func:`grade`'s records (other kinds are ignored).

    Returns
    -------
    list of dict
        One ``kind: "rates"`` record per check (``lab``, ``part``) and model (``impl``):
        for ``measured`` and ``with_cases`` each ``{"gradings", "ungradable", "passes",
        "rate", "ci95", "ungradable_rate", "ungradable_ci95"}`` (ungradable gradings left
        out of the rest), where ``rate`` is the false-fail rate (failures / gradings) of
        the correct model and the false-pass rate (passes / gradings) of a wrong one
        (``rate_is`` says which) and ``ci95`` its Clopper-Pearson interval;
        ``ungradable_rate`` is ungradable / all the model's gradings, with its interval
        (a measurement that could not be made stable, the grader's ranks not starting:
        no verdict, the part graded again later); ``tolerance``; ``ratios``: per measured
        part the min, 5th percentile, median, 95th percentile and max of the ratio the
        tolerance is applied to.
    """
    from .error_models import GRADED

    out = []
    keys = list(dict.fromkeys((r["lab"], r["part"], r["impl"]) for r in records
                              if r["kind"] == "grading"))
    for lab, part, impl in keys:
        rs = [r for r in records if r["kind"] == "grading"
              and (r["lab"], r["part"], r["impl"]) == (lab, part, impl)]
        correct = rs[0]["correct"]
        [g] = [g for g in GRADED if (g.lab, g.part) == (lab, part)]
        rec = {"impl": impl, "kind": "rates", "lab": lab, "part": part, "correct": correct,
               "what": rs[0]["what"], "rate_is": "false-fail" if correct else "false-pass",
               "tolerance": list(tolerance(g))}
        for which in ("measured", "with_cases"):
            verdicts = [r[which] for r in rs if r[which] != "ungradable"]
            passes = verdicts.count("pass")
            wrong = len(verdicts) - passes if correct else passes
            rec[which] = {"gradings": len(verdicts), "ungradable": len(rs) - len(verdicts),
                          "passes": passes,
                          "rate": wrong / len(verdicts) if verdicts else None,
                          "ci95": _ci95(wrong, len(verdicts)),
                          "ungradable_rate": (len(rs) - len(verdicts)) / len(rs),
                          "ungradable_ci95": _ci95(len(rs) - len(verdicts), len(rs))}
        names = list(dict.fromkeys(k for r in rs for k in r["ratios"]))
        rec["ratios"] = {n: _spread([r["ratios"].get(n) for r in rs]) for n in names}
        out.append(rec)
    return out


def run(labs: list[str], cells: dict[str, dict[str, str]], repeats: int = 30,
        busy: int = 0, progress: Callable[[str], None] = lambda line: None
        ) -> tuple[dict, list[dict]]:
    """Grade every measured check of `labs` `repeats` times, as the grader does.

    Parameters
    ----------
    labs : list of str
        Labs of :data:`mpilab.grading.error_models.LABS`.
    cells : dict
        Each lab's code cells, by grade id (:func:`mpilab.grading.error_models.models`).
    repeats : int, optional
        Repetitions per check (default 30), each with a fresh measurement.
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
        :func:`grade`'s records of every check, then :func:`rates`'s.
    """
    records: list[dict] = []
    with grader() as facts, load(busy) as loaded:
        for g in graded(labs):
            records += grade(g, cells[g.lab], repeats, progress)
    return {**facts, **loaded}, records + rates(records)


def _fmt_rate(d: dict) -> str:
    if d["rate"] is None:
        return "   -"
    lo, hi = d["ci95"]
    return f"{d['passes']:>3}/{d['gradings']:<3} {d['rate']:.2f} [{lo:.2f}, {hi:.2f}]"


def _fmt_ungradable(d: dict) -> str:
    n = d["gradings"] + d["ungradable"]
    if not n:
        return "   -"
    lo, hi = d.get("ungradable_ci95") or _ci95(d["ungradable"], n)
    return f"{d['ungradable']:>3}/{n:<3} [{lo:.2f}, {hi:.2f}]"


def table(records: list[dict]) -> str:
    """The rates as a table: one line per check and model.

    Parameters
    ----------
    records : list of dict
        Records with :func:`rates`'s among them.

    Returns
    -------
    str
        Lab and test cell, model (the correct one starred), passes / gradings of the measured part
        alone and of the check with its made-up cases, each with the error rate (the
        correct model's false fails, a wrong one's false passes) and its 95 % interval,
        the ungradable gradings of the measured part alone / all its gradings with the
        95 % interval of that rate, the tolerance, and per measured part the median (5th
        to 95th percentile) of the ratio the tolerance is applied to.
    """
    lines = [f"{'lab, test cell':<40} {'model':<17} {'measured part alone':<28} "
             f"{'with made-up cases':<28} {'ungradable':<20} {'tol.':<8} "
             "ratio: median (p5-p95)"]
    for r in records:
        if r["kind"] != "rates":
            continue
        ratios = "; ".join(
            f"{part.removesuffix('_ratio').replace('_', ' ')} {s['median']:.2f} "
            f"({s['p5']:.2f}-{s['p95']:.2f})" for part, s in r["ratios"].items() if s)
        tol = "-".join(f"{x:.3g}" for x in r["tolerance"])
        lines.append(f"{r['lab'] + ' ' + r['part']:<40} {r['impl'] + ' *' * r['correct']:<17} "
                     f"{_fmt_rate(r['measured']):<28} {_fmt_rate(r['with_cases']):<28} "
                     f"{_fmt_ungradable(r['measured']):<20} {tol:<8} {ratios or '-'}")
    return "\n".join(lines)
