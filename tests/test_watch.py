"""The watch on a student's functions on the grader's ranks (mpilab.autograder.watch).

Functions are made as the ranks get them: compiled from a notebook cell's text, pickled
and loaded by value with cloudpickle (their code then says ``<dynamic-code>``), and
wrapped by :func:`~mpilab.autograder.watch.watched`. An honest answer runs as it would
unwatched; one that takes the course's answer, forges what a check records, patches the
course's modules or switches the watch off is refused, naming what it did. No MPI job:
the calls are made in this process (the kernel's on ``MPI.COMM_SELF``).
"""

from __future__ import annotations

import cloudpickle
import numpy as np
import pytest

from mpilab.autograder.watch import Refused, by_student, course_part, guard_kernels, watched

CELL = '''
import numpy as np


def honest(p):
    from mpilab import collectives, halo
    return len(collectives.admissible("allgather", p)) + len(halo.split(10, 2)) + int(
        np.zeros(3).sum())


def helper_answer(s, h):
    return _inner(s, h)


def _inner(s, h):
    from mpilab.grading.network import reference_loads
    return reference_loads(s, h)


def cost_model(p):
    from mpilab import collectives
    return collectives.algorithm("bcast", "binomial").time_us(p, 8, 1.0, 1.0)


def forges(comm):
    comm._send(1, 8)


def switches_off():
    import sys
    sys.setprofile(None)
    return 1


def by_exec():
    exec("from mpilab.grading.network import reference_loads as r; r([], [])")


def patches():
    import mpilab.halo as h
    h.heat_step = lambda old, new: None
    return 1


def kernel(comm):
    from mpilab.kernels import collectives as k
    buf = np.zeros(1)
    k.run(comm, "bcast", "binomial", None, buf, root=0)


def catches():
    try:
        return helper_answer([], [])
    except Exception:
        return "caught"
'''


@pytest.fixture(scope="module")
def student():
    """The cell's functions, as the grader's ranks load them."""
    ns: dict = {"__name__": "__main__"}
    exec(compile(CELL, "/tmp/ipykernel_1/cell.py", "exec"), ns)
    return lambda name: watched(cloudpickle.loads(cloudpickle.dumps(ns[name])))


def refused(call) -> str:
    with pytest.raises(Refused) as info:
        call()
    return str(info.value)


def test_an_honest_answer_runs_as_unwatched(student):
    assert student("honest")(4) == 5 + 2


def test_a_watched_function_says_how_long_it_ran_without_the_watchs_own_cost():
    """watched_seconds: the student's code alone (lab 01 bounds a time the student measured
    by it), not the watch's checks before and after, and not a clock the code replaced."""
    import time

    cell = ("import time\n\n\ndef sleeps(s):\n    time.sleep(s)\n\n\n"
            "def fakes_the_clock(s):\n    time.sleep(s)\n    time.perf_counter = lambda: 1e9\n")
    ns: dict = {"__name__": "__main__"}
    exec(compile(cell, "/tmp/ipykernel_1/cell.py", "exec"), ns)
    real = time.perf_counter
    try:
        for name in ("sleeps", "fakes_the_clock"):
            f = watched(cloudpickle.loads(cloudpickle.dumps(ns[name])))
            t0 = real()
            f(0.05)
            took = real() - t0
            assert 0.05 <= f.watched_seconds <= took, (name, f.watched_seconds, took)
    finally:
        time.perf_counter = real


def test_the_courses_answers_are_refused_by_name(student):
    sched = [{"step": 1, "src": 0, "dst": 1, "bytes": 8}]
    said = refused(lambda: student("helper_answer")(sched, [0, 1]))
    assert "mpilab.grading.network_model.reference_loads" in said and "Refused" in said
    said = refused(lambda: student("cost_model")(4))
    assert "mpilab.collectives.algorithms.time_us" in said


def test_a_refusal_cannot_be_caught_by_the_students_code(student):
    said = refused(lambda: student("catches")())
    assert "reference_loads" in said


def test_forging_a_trace_patching_the_course_and_undoing_the_watch_are_refused(student):
    from mpi4py import MPI

    from mpilab.tracing import TracingComm

    assert "mpilab.tracing.recording._send" in refused(
        lambda: student("forges")(TracingComm(MPI.COMM_SELF)))
    assert "sys.setprofile" in refused(lambda: student("switches_off")())
    assert "reference_loads" in refused(lambda: student("by_exec")())  # exec'd: still theirs
    import mpilab.halo as h

    step = h.heat_step
    try:
        assert "replaced mpilab.halo.heat_step" in refused(lambda: student("patches")())
    finally:
        h.heat_step = step


def test_the_courses_compiled_kernels_are_seen(student):
    from mpi4py import MPI

    from mpilab.kernels import collectives as k

    run = k.run
    try:
        guard_kernels()
        assert "mpilab.kernels.collectives.run" in refused(
            lambda: student("kernel")(MPI.COMM_SELF))
        buf = np.ones(1)
        k.run(MPI.COMM_SELF, "bcast", "binomial", None, buf, root=0)  # the course's own
    finally:
        k.run = run


def test_what_counts_as_the_courses_answer():
    import mpilab.collectives.algorithms as alg
    import mpilab.grading.network as net

    assert course_part(net.__file__, "reference_best")
    assert course_part(alg.__file__, "predict")
    assert course_part(alg.__file__, "admissible") is None
    assert "private" in course_part(alg.__file__, "_log2c")
    assert course_part("/usr/lib/python3/dist-packages/foo.py", "reference_x") is None
    assert not by_student(course_part.__code__)


def test_a_harness_window_is_the_students_to_call_and_its_calls_are_noted():
    """Lab 03's harness hands the student watched windows (course code in grading/): the
    student may call them (not refused: MPI itself answers, here a singleton that cannot
    make a window), and the harness notes that their own code did."""
    from mpi4py import MPI

    from mpilab.grading.onesided_harness import _classes, _Watch, _Watching

    ns: dict = {"__name__": "__main__", "np": np}
    exec(compile("def put(comm):\n    from mpi4py import MPI\n"
                 "    win = MPI.Win.Create(np.zeros(2), comm=comm)\n    win.Free()\n",
                 "/tmp/ipykernel_1/cell.py", "exec"), ns)
    put = watched(cloudpickle.loads(cloudpickle.dumps(ns["put"])))
    _classes()
    with _Watching(_Watch()) as seen:
        try:
            put(MPI.COMM_SELF)
        except MPI.Exception:
            pass
    assert seen.calls[:1] == ["MPI.Win.Create"], seen.calls
