"""A lab's submissions autograded side by side, as a class is graded, and their feedback
generated: :func:`grade_all` (:data:`JOBS` gradings at a time, each cut at
:data:`HANG_CEILING`). tests/test_grading_hostile.py grades its corpus so, and
tests/test_lab07.py its submissions.
"""

from __future__ import annotations

import time
from pathlib import Path

from mpilab.autograder.course import graded_seconds, nbgrader, submit
from mpilab.autograder.parallel import autograde

HANG_CEILING = 240  # s per submission: a hang, not a slow grade (the bench has the bars)
JOBS = 3  # gradings side by side (mpilab.autograder.parallel), as a class is graded


def grade_all(course: Path, lab: str, cases: dict[str, dict[str, str]],
              extra_files: dict[str, dict[str, str]] | None = None) -> dict:
    """Submit `cases` (student -> answers), autograde them side by side, generate
    their feedback; the scores by student, the wall time and nbgrader's log."""
    from nbgrader.api import Gradebook

    for student, answers in cases.items():
        dest = submit(course, lab, student, answers)
        for name, text in (extra_files or {}).get(student, {}).items():
            (dest / name).write_text(text)
    t0 = time.perf_counter()
    # side by side, as a class is graded: an attack must not cost the honest submission
    # graded beside it a mark either
    done = autograde(course / "autograder", lab, list(cases), jobs=JOBS, args=("--force",),
                     timeout=HANG_CEILING)
    wall = time.perf_counter() - t0
    log = "\n".join(f"===== {g.student} (exit {g.returncode})\n{g.log}" for g in done)
    failed = [g for g in done if not g.ok]
    assert not failed, "\n".join(g.log[-5000:] for g in failed)
    fb = nbgrader(course, "generate_feedback", lab, "--force")
    assert fb.returncode == 0, fb.stdout + fb.stderr
    scores = {}
    with Gradebook(f"sqlite:///{course / 'autograder' / 'gradebook.db'}") as gb:
        for student in cases:
            sub = gb.find_submission_notebook(lab, lab, student)
            scores[student] = {g.name: g.score for g in sub.grades if g.max_score}
    times = graded_seconds(log)
    print(f"\n[hostile] {lab}: {len(cases)} submissions in {wall:.0f} s; per notebook "
          f"{', '.join(f'{t:.0f}' for t in times)} s")
    return {"scores": scores, "log": log, "times": times}
