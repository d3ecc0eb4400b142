"""Error rates of the labs' measured checks: ``python -m mpilab.bench grading-errors``.

    python -m mpilab.bench grading-errors [--labs lab00-mpi-basics,lab02-halo]
        [--repeats 30] [--load K] [--load-as job|students] [--graders off,freeze]
        [--note TEXT] [--json OUT]

For each lab's measured checks (its graded prediction; lab 01's ping-pong timing too),
the lab's correct model (its solution, read from the instructors' source notebook) and
known-wrong models (latency or bandwidth only, bits for bytes, twice or half, another
algorithm's formula, a constant; a time in seconds, of the round trip or of the whole
loop) are graded ``--repeats`` times by the lab's own check, each repetition against a fresh measurement made as the
grader makes it: in a process set up as the grader's kernel, on the grader's sandboxed
MPI ranks, under the grading lock (:mod:`mpilab.grading.error_rates` says what it
exercises and what not: not nbgrader, whose cost ``python -m mpilab.bench autograde``
measures). ``--load K`` grades beside a second job of K busy processes, which the grading
lock does not hold back; with ``--load-as students`` the K processes are a class server's
students instead, each in a cgroup of their own (root; :mod:`mpilab.bench.class_load`),
and ``--graders off,freeze`` (or ``weight``) grades each repetition once with each way a
grader's measurement holds the students back (``$MPILAB_CLASSROOM_GRADER``,
:mod:`mpilab.autograder.reserve`), a table for each. Per check and model the table and the JSON give the pass count,
the false-fail rate of the correct model and the false-pass rate of each wrong one with
95 % Clopper-Pearson bounds, for the measured part alone and for the check with its
made-up cases, and the spread of the ratio each tolerance is applied to (measured /
predicted; the student's time over the course's: min, 5th percentile, median, 95th
percentile, max). Lab 07 measures a link
between emulated nodes (root; :mod:`mpilab.netlab`); it is not among the default labs.

Exit status 1 when a correct model failed or a wrong one passed the check with its
made-up cases (the course's bar: 0 of each) or a grading was ungradable (the grader's
ranks did not start, say), 2 when the run could not be made.
"""

from __future__ import annotations

import sys

from .. import runtime, validate
from ..autograder import reserve
from . import finish, parser

DEFAULT_LABS = ["lab00-mpi-basics", "lab01-pingpong", "lab02-halo", "lab03-one-sided",
                "lab04-coarrays", "lab05-collectives", "lab06-allgather"]


def cells(lab: str) -> dict[str, str]:
    """The lab's code cells in the instructors' source notebook, by grade id: the solution
    cells without their delimiters, the locked cells, and the test cells' visible part
    (up to their hidden tests, which the bench never reads).

    Parameters
    ----------
    lab : str
        The lab's name.

    Returns
    -------
    dict of str to str
        Source by grade id.
    """
    import nbformat

    from ..autograder import course

    out = course.solutions(lab)
    nb = nbformat.read(course.REPO / "labs" / lab / f"{lab}.ipynb", 4)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade_id") and not meta.get("solution"):
            out[meta["grade_id"]] = cell.source.split("### BEGIN HIDDEN TESTS")[0]
    return out


def measure(labs: list[str], repeats: int, busy: int, note: str | None,
            load_as: str = "job", graders: list[str] | None = None) -> tuple[dict, list]:
    """Run :func:`mpilab.grading.error_rates.run` on the labs; meta and records.

    Parameters
    ----------
    labs : list of str
        Labs of :data:`mpilab.grading.error_models.LABS`.
    repeats : int
        Gradings of each model per lab, each against a fresh measurement.
    busy : int
        Busy processes beside the gradings (0: none).
    note : str or None
        How loaded the machine was besides, in words (e.g. "under unknown load").
    load_as : str, optional
        ``job`` (default: a second job, :func:`mpilab.grading.error_rates.load`) or
        ``students`` (:func:`mpilab.bench.class_load.students`).
    graders : list of str, optional
        Modes of :mod:`mpilab.autograder.reserve` to grade each repetition with
        (:func:`mpilab.bench.class_load.compare`; default: the grader as it is set).

    Returns
    -------
    meta : dict
        The machine and MPI library (:func:`mpilab.timing.context`), the sandbox, the
        load, ``oversubscribed``, the settings and the command line.
    records : list of dict
        :func:`mpilab.grading.error_rates.run`'s records.
    """
    from ..grading import error_models, error_rates
    from ..timing import context

    repeats = validate.count(repeats, "repeats")
    busy = validate.count(busy, "load", lowest=0)
    code = {lab: cells(lab) for lab in labs}
    for g in error_models.graded(labs):
        error_models.models(g, code[g.lab])  # no solution (students' edition): say so now
    def progress(line):
        print(line, file=sys.stderr, flush=True)

    if load_as == "students" or graders:
        from . import class_load

        loading = (class_load.students(busy) if load_as == "students"
                   else error_rates.load(busy))
        with loading as loaded:
            facts, records = class_load.compare(labs, code, repeats,
                                                graders or [reserve.mode()], progress)
        facts.update(loaded)
    else:
        facts, records = error_rates.run(labs, code, repeats, busy, progress=progress)
    made = [v for r in records if r["kind"] == "measurement" for v in r["values"].values()
            if isinstance(v, dict)]
    meta = context(library=runtime.library_info_of_a_fresh_process("funneled"))
    meta.update(facts)
    meta["oversubscribed"] = any(v.get("oversubscribed") for v in made)
    meta["measuring_ranks"] = sorted({v["ranks"] for v in made if "ranks" in v})
    meta["load_note"] = note
    meta["settings"] = {"labs": labs, "repeats": repeats, "load": busy, "load_as": load_as,
                        "tolerances": {f"{g.lab} {g.part}": list(error_models.tolerance(g))
                                       for g in error_models.graded(labs)}}
    meta["command"] = " ".join(["python", "-m", "mpilab.bench", "grading-errors",
                                *sys.argv[2:]])
    return meta, records


def _ungradable(records: list[dict]) -> str:
    """A line saying how many gradings were ungradable, and the first one's reason."""
    bad = [r for r in records if r["kind"] == "grading" and "ungradable" in
           (r["measured"], r["with_cases"])]
    if not bad:
        return ""
    why = (bad[0]["why"]["measured"] or bad[0]["why"]["with_cases"] or "?").splitlines()[0]
    return f"\n# {len(bad)} gradings ungradable (left out of the rates); the first: {why}"


def _by_grader(records: list[dict]) -> list[tuple[str | None, list[dict]]]:
    """The records by ``grader`` (:func:`mpilab.bench.class_load.compare`), in order."""
    modes = list(dict.fromkeys(r.get("grader") for r in records))
    return [(m, [r for r in records if r.get("grader") == m]) for m in modes]


def main(argv: list[str] | None = None) -> int:
    """The command line: :func:`measure`, the table, the JSON with ``--json``.

    Parameters
    ----------
    argv : list of str, optional
        The arguments after ``grading-errors`` (None: ``sys.argv[1:]``).

    Returns
    -------
    int
        0 when every correct model passed and every wrong model failed its check with
        made-up cases, 1 when not (or a grading was ungradable), 2 when the run could not
        be made.
    """
    from ..grading import error_models, error_rates

    p = parser("grading-errors", __doc__, transport=False, timeout=False)
    p.add_argument("--labs", default=",".join(DEFAULT_LABS),
                   help="comma-separated labs (default: all but lab 07, which needs root "
                        "and emulated nodes)")
    p.add_argument("--repeats", type=int, default=30,
                   help="gradings of each model per lab, each against a fresh measurement")
    p.add_argument("--load", type=int, default=0,
                   help="grade beside a second job of this many busy processes")
    p.add_argument("--load-as", choices=["job", "students"], default="job",
                   help="the busy processes as a second job (default) or as a class "
                        "server's students, each in a cgroup of their own (root)")
    p.add_argument("--graders", default=None,
                   help="grade each repetition with each of these ways of holding a "
                        "class's students back during a measurement (comma-separated of "
                        f"{', '.join(reserve.MODES)}; default: $MPILAB_CLASSROOM_GRADER)")
    p.add_argument("--note", default=None,
                   help="the machine's load besides, in words, kept in the JSON "
                        "(e.g. 'under unknown load')")
    a = p.parse_args(argv)

    def graders(text):
        if text is None:
            return None
        modes = [m.strip().lower() for m in text.split(",") if m.strip()]
        for m in modes:
            reserve.mode({reserve.ENV: m})  # ValueError naming the variable: exit 2
        return modes

    def show(m, records):
        load = (f", beside {m['load_processes']} busy processes" if m["load_processes"]
                else "")
        return (f"# graded on {m.get('cores')} cores, sandbox: {m.get('sandbox')}{load}"
                f"{', measuring ranks oversubscribed' if m['oversubscribed'] else ''}"
                f"{' as students in cgroups' if m['settings']['load_as'] == 'students' else ''}"
                f"{', measuring ranks oversubscribed' if m['oversubscribed'] else ''}"
                f"{'; ' + m['load_note'] if m['load_note'] else ''}\n"
                f"# {m['settings']['repeats']} gradings per model, each against a fresh "
                "measurement; rate = false-fail (correct) or false-pass (wrong), "
                "Clopper-Pearson 95 %; ratio = measured / predicted (lab 01 ping-pong: run, the "
                "student's time / the course's; loop in call, the 2 * iters messages the "
                "student's time stands for / the call's time, at most 1.01)\n"
                + "".join(f"# {how}: {h['holds']} holds of up to {h['groups']} students' "
                          f"servers, median {h['median_s']:.2f} s, longest {h['max_s']:.2f} s\n"
                          for how, h in m.get("holds", {}).items())
                + "\n".join((f"# the students during a measurement: {how} "
                             f"($MPILAB_CLASSROOM_GRADER={how})\n" if how else "")
                             + error_rates.table(rs) + _ungradable(rs)
                             for how, rs in _by_grader(records)))

    def ok(records):
        return all(r["with_cases"]["ungradable"] == 0 and r["with_cases"]["passes"]
                   == (r["with_cases"]["gradings"] if r["correct"] else 0)
                   for r in records if r["kind"] == "rates")

    return finish("grading-errors", a.json,
                  lambda: measure(validate.names(a.labs, error_models.LABS, "lab"),
                                  a.repeats, a.load, a.note, a.load_as,
                                  graders(a.graders)), show, ok=ok)


if __name__ == "__main__":
    sys.exit(main())
