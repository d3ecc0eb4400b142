"""What autograding one submission costs: ``python -m mpilab.bench autograde``.

    python -m mpilab.bench autograde [--labs lab00-mpi-basics,lab02-halo] [--json OUT]

For each lab, in a throw-away copy of the course (:mod:`mpilab.grading.course`), two
submissions are autograded by nbgrader with the course's configuration, one at a time:
the lab's solutions (``correct``) and :func:`mpilab.grading.course.hostile` (patches
everything in its kernel, leaves a part unanswered, kills its kernel in a third). Each record carries the
wall time of the whole ``nbgrader autograde`` command (``t_s``: start-up, gradebook,
sandbox, both kernels, MPI ranks, clean-up) and of the notebook alone as the
preprocessor logged it (``graded_s``), the score against the expected one, and the
course's bar (correct 20 s, hostile 60 s on 2 cores) with whether it was met. ``meta``
says which machine, MPI, sandbox (isolated or not, as root or not, cgroups) and whether
the grader's ranks were oversubscribed. Needs a checkout of the repository (the labs).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

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


def _library() -> dict:
    """The MPI library as a fresh process reports it (this one stays without MPI)."""
    import json
    import subprocess

    res = subprocess.run([sys.executable, "-c", "import json; from mpilab import runtime; "
                          "print(json.dumps(runtime.library_info()))"],
                         capture_output=True, text=True, timeout=60)
    return json.loads(res.stdout) if res.returncode == 0 else {}


def run(labs: list[str], reps: int = 1) -> tuple[dict, list[dict]]:
    from ..timing import context

    unknown = [lab for lab in labs if lab not in C.LABS]
    if unknown:
        raise ValueError(f"unknown labs {unknown}; choose from {C.LABS}")
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
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
    meta = context(ranks=_sandbox_facts()["grader_ranks"], library=_library())
    meta.update(_sandbox_facts())
    meta["settings"] = {"labs": labs, "reps": reps, "bars_s": BARS_S}
    meta["command"] = " ".join(["python", "-m", "mpilab.bench", "autograde", *sys.argv[2:]])
    return meta, records


def main(argv: list[str] | None = None) -> int:
    from .. import validate
    from ..bench import finish, parser

    p = parser("autograde", __doc__, transport=False, timeout=False)
    p.add_argument("--labs", default=",".join(C.LABS),
                   help="comma-separated labs (default: all)")
    p.add_argument("--reps", type=int, default=1, help="gradings of each submission")
    a = p.parse_args(argv)

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
