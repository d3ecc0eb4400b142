"""What autograding one submission costs: ``python -m mpilab.bench autograde``.

    python -m mpilab.bench autograde [--labs lab00-mpi-basics,lab02-halo] [--json OUT]

For each lab, in a throw-away copy of the course (:mod:`mpilab.autograder.course`), two
submissions are autograded by nbgrader with the course's configuration, one at a time:
the lab's solutions (``correct``) and :func:`mpilab.autograder.course.hostile` (patches
everything in its kernel, leaves a part unanswered, kills its kernel in a third). Each record carries the
wall time of the whole ``nbgrader autograde`` command (``t_s``: start-up, gradebook,
sandbox, both kernels, MPI ranks, clean-up) and of the notebook alone as the
preprocessor logged it (``graded_s``), the score against the expected one, and the
course's bar (correct 20 s, hostile 60 s on 2 cores) with whether it was met. ``meta``
says which machine, MPI, sandbox (isolated or not, as root or not, cgroups) and whether
the grader's ranks were oversubscribed. Needs a checkout of the repository (the labs).

    python -m mpilab.bench autograde --students 30 [--jobs 3] [--labs lab00-mpi-basics]

grades a class instead: `students` submissions of each lab (every fifth the hostile one,
the others correct) autograded side by side, `jobs` at a time
(:mod:`mpilab.autograder.parallel`). One record per submission (``impl`` correct or hostile,
as above, ``t_s`` its own nbgrader's wall time) and one per lab (``impl`` "class":
``wall_s``, ``per_minute``, the median and 95th percentile of the submissions' times, and
the course's bar for a class of 30 on 2 cores: lab 00 in 6 minutes, lab 06 in 12).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from .. import runtime, validate
from . import course as C

BARS_S = {"correct": 20.0, "hostile": 60.0}


def _sandbox_facts() -> dict:
    from . import sandbox
    from .isolated import POOL_RANKS

    why = sandbox.available()
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    cg = ("v2" if v2.exists() and {"memory", "pids"} <= set(v2.read_text().split())
          else "v1" if Path("/sys/fs/cgroup/memory").is_dir() else None)
    return {"sandbox": "bubblewrap" if why is None else f"none ({why})",
            "as_root": os.geteuid() == 0, "cgroups": cg if os.geteuid() == 0 else None,
            "grader_ranks": POOL_RANKS}


def _known(labs: list[str]) -> None:
    unknown = [lab for lab in labs if lab not in C.LABS]
    if unknown:
        raise ValueError(f"unknown labs {unknown}; choose from {C.LABS}")


def run(labs: list[str], reps: int = 1) -> tuple[dict, list[dict]]:
    """Autograde a correct and a hostile submission of each lab, one at a time.

    Prints a line per grading on standard error as it goes.

    Parameters
    ----------
    labs : list of str
        The labs to grade (names from ``LABS`` in :mod:`mpilab.autograder.course`).
    reps : int, optional
        Gradings of each submission (default 1).

    Returns
    -------
    meta : dict
        The machine, MPI library, sandbox, the settings and the command line.
    records : list of dict
        One per grading: ``impl`` (``"correct"`` or ``"hostile"``), ``lab``, ``rep``,
        ``t_s`` (the whole ``nbgrader autograde``, seconds), ``graded_s`` (the notebook
        alone, seconds, or None), ``score``, ``max_score``, ``expected_score``,
        ``scores_as_expected``, ``bar_s``, ``within_bar`` and ``nbgrader_ok``.

    Raises
    ------
    ValueError
        For a lab not in ``LABS``, or `reps` below 1.
    """

    _known(labs)
    reps = validate.count(reps, "reps")
    records = []
    with tempfile.TemporaryDirectory(prefix="mpilab-bench-autograde-") as tmp:
        root = C.make_course(Path(tmp), labs)
        for lab in labs:
            cases = {"correct": (C.solutions(lab), C.full(lab)), "hostile": C.hostile(lab)}
            for kind, (answers, want) in cases.items():
                C.submit(root, lab, kind, answers)
                for rep in range(reps):
                    t0 = time.perf_counter()
                    res = C.nbgrader(root, "autograde", lab, "--student", kind, "--force")
                    wall = time.perf_counter() - t0
                    log = res.stdout + res.stderr
                    got = C.scores(root, lab, [kind]).get(kind)
                    graded = C.graded_seconds(log)
                    rec = {"impl": kind, "lab": lab, "rep": rep, "t_s": round(wall, 2),
                           "graded_s": graded[0] if graded else None,
                           "score": sum(got.values()) if got else None,
                           "max_score": sum(C.full(lab).values()),
                           "expected_score": sum(want.values()),
                           "scores_as_expected": got == want,
                           "bar_s": BARS_S[kind], "within_bar": wall <= BARS_S[kind],
                           "nbgrader_ok": res.returncode == 0
                           and "Removing failed assignment" not in log}
                    records.append(rec)
                    print(f"{lab:20s} {kind:8s} {wall:6.1f} s (notebook "
                          f"{rec['graded_s']} s)  score {rec['score']}/{rec['max_score']}"
                          f"{'' if rec['scores_as_expected'] else ' UNEXPECTED'}"
                          f"{'' if rec['within_bar'] else '  over the bar'}",
                          file=sys.stderr)
    return _meta({"labs": labs, "reps": reps, "bars_s": BARS_S}), records


#: a class of 30 on 2 cores, graded within (s); other labs: lab 06's bar
CLASS_BARS_S = {"lab00-mpi-basics": 360.0, "lab06-allgather": 720.0}


def run_class(labs: list[str], students: int, jobs: int | None = None) -> tuple[dict, list[dict]]:
    """A class of `students` per lab (every fifth hostile), graded side by side.

    Prints a line per lab on standard error as it goes.

    Parameters
    ----------
    labs : list of str
        The labs to grade (names from ``LABS`` in :mod:`mpilab.autograder.course`).
    students : int
        Submissions per lab.
    jobs : int, optional
        Gradings at once (default: :func:`mpilab.autograder.parallel.default_jobs`).

    Returns
    -------
    meta : dict
        The machine, MPI library, sandbox, the settings and the command line.
    records : list of dict
        One per submission (``impl`` ``"correct"`` or ``"hostile"``, ``student``, ``t_s``
        its nbgrader's wall time in seconds, scores as :func:`run`'s), then one per lab
        with ``impl`` ``"class"``: ``wall_s``, ``per_minute``, ``median_s``, ``p95_s``,
        ``bar_s`` (the bar for 30 students scaled to `students`), ``within_bar``,
        ``scores_as_expected`` and ``nbgrader_ok``.

    Raises
    ------
    ValueError
        For a lab not in ``LABS``, or `students` or `jobs` below 1.
    """
    import numpy as np

    from . import parallel

    _known(labs)
    students = validate.count(students, "students")
    jobs = parallel.default_jobs() if jobs is None else validate.count(jobs, "jobs")
    records = []
    with tempfile.TemporaryDirectory(prefix="mpilab-bench-autograde-") as tmp:
        root = C.make_course(Path(tmp), labs)
        for lab in labs:
            kinds = {f"s{i:03d}": "hostile" if i % 5 == 4 else "correct"
                     for i in range(students)}
            cases = {"correct": (C.solutions(lab), C.full(lab)), "hostile": C.hostile(lab)}
            for student, kind in kinds.items():
                C.submit(root, lab, student, cases[kind][0])
            t0 = time.perf_counter()
            done = parallel.autograde(root / "autograder", lab, list(kinds), jobs=jobs,
                                      args=("--force",), timeout=600)
            wall = time.perf_counter() - t0
            got = C.scores(root, lab, list(kinds))
            times = []
            for g in done:
                kind = kinds[g.student]
                graded = C.graded_seconds(g.log)
                want = cases[kind][1]
                rec = {"impl": kind, "lab": lab, "student": g.student, "t_s": round(g.seconds, 2),
                       "graded_s": graded[0] if graded else None,
                       "score": sum(got[g.student].values()) if g.student in got else None,
                       "max_score": sum(C.full(lab).values()),
                       "expected_score": sum(want.values()),
                       "scores_as_expected": got.get(g.student) == want, "nbgrader_ok": g.ok}
                records.append(rec)
                times.append(g.seconds)
            bar = CLASS_BARS_S.get(lab, CLASS_BARS_S["lab06-allgather"]) * students / 30
            records.append({
                "impl": "class", "lab": lab, "students": students, "jobs": jobs,
                "wall_s": round(wall, 1), "per_minute": round(60 * students / wall, 2),
                "median_s": round(float(np.median(times)), 1),
                "p95_s": round(float(np.percentile(times, 95)), 1),
                "bar_s": round(bar, 1), "within_bar": wall <= bar,
                "scores_as_expected": all(r["scores_as_expected"] for r in records
                                          if r["lab"] == lab and r["impl"] != "class"),
                "nbgrader_ok": all(g.ok for g in done)})
            print(f"{lab:20s} class of {students}, {jobs} at a time: {wall:6.1f} s "
                  f"({60 * students / wall:.1f} per minute; p95 {records[-1]['p95_s']} s)"
                  f"{'' if records[-1]['scores_as_expected'] else ' UNEXPECTED SCORES'}",
                  file=sys.stderr)
    return _meta({"labs": labs, "students": students, "jobs": jobs, "hostile_every": 5,
                  "class_bars_s_for_30": CLASS_BARS_S}), records


def _meta(settings: dict) -> dict:
    """The JSON's meta: the machine, the MPI (a fresh process's), the sandbox, `settings`
    and the command line."""
    from ..timing import context

    facts = _sandbox_facts()
    meta = context(ranks=facts["grader_ranks"],
                   library=runtime.library_info_of_a_fresh_process("funneled"))
    meta.update(facts)
    meta["settings"] = settings
    meta["command"] = " ".join(["python", "-m", "mpilab.bench", "autograde", *sys.argv[2:]])
    return meta


def main(argv: list[str] | None = None) -> int:
    """The command line, ``python -m mpilab.bench autograde``: :func:`run` or
    :func:`run_class` (with ``--students``), a table, and the JSON with ``--json``.

    Parameters
    ----------
    argv : list of str, optional
        The arguments after ``autograde``, as :mod:`mpilab.bench` passes them (None:
        ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: 0 when every submission scored as expected and nbgrader
        succeeded, 1 when not, 2 when the measuring raised one of
        :data:`mpilab.bench.ERRORS` (its message printed on standard error).
    """
    from ..bench import finish, parser

    p = parser("autograde", __doc__, transport=False, timeout=False)
    p.add_argument("--labs", default=",".join(C.LABS),
                   help="comma-separated labs (default: all)")
    p.add_argument("--reps", type=int, default=1, help="gradings of each submission")
    p.add_argument("--students", type=int, default=None,
                   help="grade a class of this many per lab, side by side")
    p.add_argument("--jobs", type=int, default=None,
                   help="with --students: gradings at once (default: cores + 1)")
    a = p.parse_args(argv)

    def show_class(m, records):
        lines = [f"# a class autograded side by side on {m.get('cores')} cores, sandbox: "
                 f"{m.get('sandbox')}",
                 f"{'lab':<22} {'students':>8} {'jobs':>4} {'wall s':>7} {'/min':>6} "
                 f"{'p95 s':>6} {'bar s':>6}  as expected"]
        lines += [f"{r['lab']:<22} {r['students']:>8} {r['jobs']:>4} {r['wall_s']:>7.1f} "
                  f"{r['per_minute']:>6.1f} {r['p95_s']:>6.1f} {r['bar_s']:>6.0f}  "
                  f"{r['scores_as_expected']}" for r in records if r["impl"] == "class"]
        return "\n".join(lines)

    if a.students is not None:
        return finish("autograde", a.json,
                      lambda: run_class(validate.names(a.labs, C.LABS, "lab"), a.students,
                                        a.jobs), show_class,
                      ok=lambda recs: all(r["scores_as_expected"] and r["nbgrader_ok"]
                                          for r in recs))

    def show(m, records):
        lines = [f"# autograde on {m.get('cores')} cores, sandbox: {m.get('sandbox')}",
                 f"{'lab':<22} {'submission':<10} {'s':>6} {'score':>9}  as expected"]
        lines += [f"{r['lab']:<22} {r['impl']:<10} {r['t_s']:>6.1f} "
                  f"{r['score'] if r['score'] is not None else float('nan'):>4g}/"
                  f"{r['max_score']:<4g}  {r['scores_as_expected']}"
                  for r in records]
        return "\n".join(lines)

    return finish("autograde", a.json,
                  lambda: run(validate.names(a.labs, C.LABS, "lab"), a.reps), show,
                  ok=lambda recs: all(r["scores_as_expected"] and r["nbgrader_ok"]
                                      for r in recs))
