"""``grading-errors --load-as students``: the load as a class server's students make it.

On a class server each student's server is a cgroup of its own
(:mod:`mpilab.autograder.limits`), and what a grader's measurement does about them is
``$MPILAB_CLASSROOM_GRADER`` (:mod:`mpilab.autograder.reserve`). :func:`students` starts K
busy "students" as the hub would run them: each a spinning Python process in a user's
group ``<mount>/<klass>/student-<i>`` of a class of its own, with the class's limits
(``$MPILAB_CLASSROOM_CPUS`` ...); :func:`compare` grades the labs' measured checks with
each way of holding the students back, interleaved repetition by repetition, so that
whatever else loads the machine falls on each alike.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator

from ..autograder import reserve
from ..autograder.limits import Group, Limits, end_class, preexec
from ..grading import error_models, error_rates

__all__ = ["students", "compare"]


@contextlib.contextmanager
def students(busy: int, klass: str | None = None) -> Iterator[dict]:
    """`busy` students spinning in their servers' cgroups, as a class server's, meanwhile.

    The class's folder is made for the block and ended after (every process in it
    killed); ``$MPILAB_CLASSROOM_DIR`` points at it meanwhile, so that a grader's
    measurement in this process finds the class (:func:`mpilab.autograder.reserve.plan`).
    Root only.

    Parameters
    ----------
    busy : int
        Students, each one busy process in a group of their own.
    klass : str, optional
        The class's folder name (default ``mpilab-bench-<pid>``).

    Yields
    ------
    dict
        ``load_processes``, ``load_kind`` and ``load_class`` for the run's meta.
    """
    klass = f"mpilab-bench-{os.getpid()}" if klass is None else klass
    limits = Limits.from_env()
    procs: list[subprocess.Popen] = []
    before = os.environ.get("MPILAB_CLASSROOM_DIR")
    try:
        for i in range(busy):
            group = Group(klass, f"student-{i}")
            group.create(Limits(cpus=limits.cpus, memory=limits.memory, pids=limits.pids))
            procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                          preexec_fn=preexec(group, Limits())))
        os.environ["MPILAB_CLASSROOM_DIR"] = f"/srv/{klass}"
        yield {"load_processes": busy, "load_class": klass,
               "load_kind": f"{busy} students: one busy Python process each, in a cgroup of "
                            f"their own as a class server's (limits: {limits.describe()})"}
    finally:
        for p in procs:
            p.kill()
            p.wait()
        end_class(klass)
        if before is None:
            os.environ.pop("MPILAB_CLASSROOM_DIR", None)
        else:
            os.environ["MPILAB_CLASSROOM_DIR"] = before


def compare(labs: list[str], cells: dict[str, dict[str, str]], repeats: int,
            modes: list[str], progress: Callable[[str], None] = lambda line: None
            ) -> tuple[dict, list[dict]]:
    """Grade every measured check of `labs` `repeats` times with each of `modes`.

    One grader (:func:`mpilab.grading.error_rates.grader`) for the whole run; each
    repetition grades once with every mode (``$MPILAB_CLASSROOM_GRADER`` set for it), the
    modes' order alternating from one repetition to the next.

    Parameters
    ----------
    labs : list of str
        Labs of :data:`mpilab.grading.error_models.LABS`.
    cells : dict
        Each lab's code cells, by grade id.
    repeats : int
        Repetitions per check and mode, each with a fresh measurement.
    modes : list of str
        Of :data:`mpilab.autograder.reserve.MODES`.
    progress : callable, optional
        Called with a line per repetition and mode.

    Returns
    -------
    meta : dict
        The sandbox's facts, ``graders`` (the modes) and ``holds``: per mode that held
        the students back, how many holds, their median and longest seconds, and the
        most groups held at once (:data:`mpilab.autograder.reserve.HOLDS`).
    records : list of dict
        :func:`mpilab.grading.error_rates.grade`'s records, then each mode's
        :func:`mpilab.grading.error_rates.rates`; every record has ``grader``, its mode.
    """
    by: dict[str, list[dict]] = {m: [] for m in modes}
    before = os.environ.get(reserve.ENV)
    try:
        with error_rates.grader() as facts:
            for g in error_models.graded(labs):
                for rep in range(repeats):
                    for how in modes if rep % 2 == 0 else modes[::-1]:
                        os.environ[reserve.ENV] = how
                        got = error_rates.grade(
                            g, cells[g.lab], 1,
                            lambda line, how=how, rep=rep: progress(
                                f"[{how}, repetition {rep + 1}/{repeats}] {line}"))
                        by[how] += [dict(r, rep=rep, grader=how) for r in got]
    finally:
        if before is None:
            os.environ.pop(reserve.ENV, None)
        else:
            os.environ[reserve.ENV] = before
    records = [r for m in modes for r in by[m]]
    records += [dict(r, grader=m) for m in modes for r in error_rates.rates(by[m])]
    holds = {}
    for m in modes:
        s = sorted(sec for how, sec, _ in reserve.HOLDS if how == m)
        if s:
            holds[m] = {"holds": len(s), "median_s": s[len(s) // 2], "max_s": s[-1],
                        "groups": max(n for how, _, n in reserve.HOLDS if how == m)}
    return {**facts, "graders": modes, "holds": holds}, records
