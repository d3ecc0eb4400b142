"""The labs under nbgrader, end to end, in a temporary copy of the course.

The source notebooks validate; the released ones (stubs) fail every test; submissions
made from the released notebooks are autograded with real MPI engines and scored as
intended: a correct one gets full marks, a wrong one partial marks, one that deadlocks
or loops forever loses only those parts and is graded within its timeouts, and one that
monkeypatches ``mpilab.grading`` gets no marks for its wrong answers. After every
autograde no process of an MPI cluster started by that notebook is left.

Wall times of autograding are printed (``pytest -s``), not asserted: the bar the course
aims at is 20 s for a correct submission and 60 s for a hostile one, per lab.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from grading_batch import check_run
from hostile_snippets import (
    LAB01_PINGPONG_PATCHES_THE_REFERENCE,
    LAB01_PREDICT_BEHIND_LOOKUP,
    LAB01_PREDICT_IGNORES_SIZE,
    lab01_fit_hard_coded,
)
from lab_grading import (
    HOSTILE_PATCH,
    RING_LOOP,
    assert_source_validates,
    errors_of,
    printed_by,
    released_failing_every_test,
)

from mpilab.autograder.course import REPO, full, make_course, nbgrader, solutions

pytestmark = pytest.mark.slow

LABS = {"lab00-mpi-basics": 8, "lab01-pingpong": 12}  # assignment -> total points
# plain `nbgrader autograde LAB`: one process grades this module's submissions one after
# another (the other lab modules grade side by side: tests/grading_batch.py)
GRADING_JOBS = 1


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """A copy of the course with labs 00 and 01 generated (release/ and gradebook)."""
    return make_course(tmp_path_factory.mktemp("course"), LABS)


# ---------------------------------------------------------------------------------------
# validate


@pytest.mark.measures
@pytest.mark.parametrize("lab", LABS)
def test_source_notebook_validates(course, lab):
    assert_source_validates(course, lab)


@pytest.mark.parametrize("lab", LABS)
def test_released_stubs_fail_every_test(course, lab):
    released_failing_every_test(course, lab)


# ---------------------------------------------------------------------------------------
# submissions


RING_OFF_BY_ONE = '''
def ring_pass(comm, token):
    """Adds rank + 1 instead of rank."""
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank == 0:
        comm.send(token, dest=1 % size)
        return comm.recv(source=size - 1)
    seen = comm.recv(source=rank - 1)
    comm.send(seen + rank + 1, dest=(rank + 1) % size)
    return seen
'''

RING_DEADLOCK = '''
def ring_pass(comm, token):
    """Every rank receives first, rank 0 too: nobody ever sends."""
    rank, size = comm.Get_rank(), comm.Get_size()
    seen = comm.recv(source=(rank - 1) % size)
    comm.send(seen + rank, dest=(rank + 1) % size)
    return seen if rank else token
'''

EXCHANGE_NAIVE = '''
def ring_exchange(comm, data):
    rank, size = comm.Get_rank(), comm.Get_size()
    received = np.empty_like(data)
    comm.Send(data, dest=(rank + 1) % size)
    comm.Recv(received, source=(rank - 1) % size)
    return received
'''


# -- lab 00 ------------------------------------------------------------------------------

LAB0 = "lab00-mpi-basics"


@pytest.mark.graded_timing
@pytest.mark.submission(LAB0, "correct", lambda: solutions(LAB0))
def test_lab00_correct_gets_full_marks(request, course):
    _, seconds = check_run(request, course, full(LAB0))
    print(f"[wall] {LAB0} correct submission autograded in {seconds:.1f} s (bar: 20 s)")


RING_TIMES_ONE_SHORT = '''
def ring_times_us(p, hop_us):
    return (p - 1) * hop_us, hop_us
'''


@pytest.mark.submission(LAB0, "wrong", lambda: {**solutions(LAB0), "ring_pass": RING_OFF_BY_ONE,
                                                "ring_times_us": RING_TIMES_ONE_SHORT})
def test_lab00_wrong_gets_partial_marks(request, course):
    nb, _ = check_run(request, course, {"test_ring_pass": 0.0, "test_ring_exchange": 3.0,
                                        "test_ring_times": 0.0})
    err = errors_of(nb, "test_ring_pass")
    assert "rank 2 saw 12, expected 11" in err, err
    err = errors_of(nb, "test_ring_times")
    assert "the lap of ring_times_us(2, 10.0)" in err and "p - 1 hops" in err, err


@pytest.mark.graded_timing
@pytest.mark.submission(LAB0, "deadlock", lambda: {**solutions(LAB0), "ring_pass": RING_DEADLOCK})
def test_lab00_deadlock_loses_only_that_part(request, course):
    nb, seconds = check_run(request, course, {"test_ring_pass": 0.0, "test_ring_exchange": 3.0,
                                              "test_ring_times": 2.0})
    err = errors_of(nb, "test_ring_pass")
    assert "TimedOut" in err or "Skipped" in err, err
    print(f"[wall] {LAB0} deadlocking submission autograded in {seconds:.1f} s")


# an endless loop inside the function (on the engines), and one in a plain cell
@pytest.mark.submission(LAB0, "loop", lambda: {
    **solutions(LAB0), "ring_pass": RING_LOOP,
    "ring_exchange": solutions(LAB0)["ring_exchange"] + "\n\nwhile True:\n    pass\n"})
@pytest.mark.graded_timing
def test_lab00_endless_loops_lose_only_their_part(request, course):
    nb, seconds = check_run(request, course, {"test_ring_pass": 0.0, "test_ring_exchange": 3.0,
                                              "test_ring_times": 2.0})
    assert "endless loop" in errors_of(nb, "test_ring_pass") or "Skipped" in errors_of(
        nb, "test_ring_pass")
    assert "CellTimeoutError" in errors_of(nb, "ring_exchange")
    print(f"[wall] {LAB0} endless-loop submission autograded in {seconds:.1f} s")


@pytest.mark.submission(LAB0, "hostile", {"ring_pass": HOSTILE_PATCH + RING_OFF_BY_ONE,
                                          "ring_exchange": EXCHANGE_NAIVE})
def test_lab00_hostile_gets_no_marks_for_wrong_answers(request, course):
    nb, seconds = check_run(request, course, {"test_ring_pass": 0.0, "test_ring_exchange": 0.0,
                                              "test_ring_times": 0.0})
    # the tests run in the grader's kernel: the patch in the student's kernel fools nothing
    assert "ring_pass is right" not in printed_by(nb, "test_ring_pass")
    assert "rank 2 saw 12, expected 11" in errors_of(nb, "test_ring_pass")
    print(f"[wall] {LAB0} hostile submission autograded in {seconds:.1f} s (bar: 60 s)")


# -- lab 01 ------------------------------------------------------------------------------

LAB1 = "lab01-pingpong"

PINGPONG_TOTAL_SECONDS = '''
def pingpong(comm, nbytes, iters):
    """Returns the whole loop's time, in seconds."""
    from mpi4py import MPI

    rank = comm.Get_rank()
    sbuf, rbuf = payload(nbytes), np.zeros(nbytes, dtype=np.uint8)
    comm.Barrier()
    t0 = MPI.Wtime()
    for _ in range(iters):
        if rank == 0:
            comm.Send(sbuf, dest=1)
            comm.Recv(rbuf, source=1)
        elif rank == 1:
            comm.Recv(rbuf, source=0)
            comm.Send(rbuf, dest=0)
    return MPI.Wtime() - t0, rbuf
'''

FIT_UNWEIGHTED = '''
def fit_alpha_beta(n_bytes, t_us):
    slope, intercept = np.polyfit(n_bytes, t_us, 1)
    return intercept, 1 / slope
'''

COST_EVERY_DEPTH = '''
def search_cost_ns(depths, t_us):
    slope, _ = np.polyfit(depths, t_us, 1)
    return slope * 1e3
'''

BEHIND_IN_NS = '''
def predict_behind_us(depth, t0_us, cost_ns):
    return t0_us + depth * cost_ns
'''

PREDICT_NO_ALPHA = '''
def predict_us(n_bytes, alpha_us, beta_MBps):
    return np.asarray(n_bytes) / beta_MBps


def half_bandwidth_bytes(alpha_us, beta_MBps):
    return alpha_us * beta_MBps
'''


@pytest.mark.graded_timing
@pytest.mark.submission(LAB1, "correct", lambda: solutions(LAB1))
def test_lab01_correct_gets_full_marks(request, course):
    _, seconds = check_run(request, course, full(LAB1))
    print(f"[wall] {LAB1} correct submission autograded in {seconds:.1f} s (bar: 20 s)")


@pytest.mark.submission(LAB1, "wrong", lambda: {
    **solutions(LAB1), "pingpong": PINGPONG_TOTAL_SECONDS, "fit_alpha_beta": FIT_UNWEIGHTED,
    "predict": PREDICT_NO_ALPHA, "search_cost": COST_EVERY_DEPTH,
    "predict_behind": BEHIND_IN_NS})
@pytest.mark.graded_timing
def test_lab01_wrong_gets_partial_marks(request, course):
    want = {**full(LAB1), "test_pingpong": 0.0, "test_fit": 0.0, "test_predict": 0.0,
            "test_predict_measured": 0.0, "test_search_cost": 0.0, "test_predict_behind": 0.0}
    nb, _ = check_run(request, course, want)
    assert "fit the depths of 256 and more only" in errors_of(nb, "test_search_cost")
    assert "1 µs is 1000 ns" in errors_of(nb, "test_predict_behind")
    assert "latency α is missing" in errors_of(nb, "test_predict")
    # at 4 MiB the latency is noise, but at 256 B it is nearly all of the time: the same
    # model, measured, is refused there, and told why
    said = errors_of(nb, "test_predict_measured")
    assert "one message of 256 B" in said and "the latency α is missing" in said, said
    assert "whole loop's time in seconds" in errors_of(nb, "test_pingpong")
    assert "weight each point by 1/t" in errors_of(nb, "test_fit").replace("W", "w")


@pytest.mark.submission(LAB1, "hostile", {
    "pingpong": HOSTILE_PATCH + PINGPONG_TOTAL_SECONDS,
    "fit_alpha_beta": HOSTILE_PATCH + "def fit_alpha_beta(n, t):\n    return 1.0, 1.0\n",
    "predict": HOSTILE_PATCH + "def predict_us(n, a, b):\n    return 0.0\n\n\n"
               "def half_bandwidth_bytes(a, b):\n    return 0.0\n",
})
@pytest.mark.graded_timing
def test_lab01_hostile_gets_no_marks_for_wrong_answers(request, course):
    nb, seconds = check_run(request, course, {k: 0.0 for k in full(LAB1)})
    for gid, name in [("test_pingpong", "pingpong"), ("test_fit", "fit_alpha_beta"),
                      ("test_predict", "predict_us")]:
        assert f"{name} is right" not in printed_by(nb, gid)  # the patch fools no check
        assert "CheckFailed" in errors_of(nb, gid)
    assert "a time must be positive" in errors_of(nb, "test_predict_measured")
    print(f"[wall] {LAB1} hostile submission autograded in {seconds:.1f} s (bar: 60 s)")


@pytest.mark.graded_timing
def test_feedback_is_generated(course):
    if not (course / "autograder" / "autograded" / "correct" / LAB0).exists():
        pytest.skip("needs the autograded correct submission")
    res = nbgrader(course, "generate_feedback", LAB0, "--student", "correct", "--force")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (course / "autograder" / "feedback" / "correct" / LAB0 / f"{LAB0}.html").exists()


def test_measured_dataset_says_where_it_comes_from():
    doc = json.loads((REPO / "labs" / LAB1 / "pingpong_measured.json").read_text())
    for key in ("hostname", "cpu_model", "cores", "mpi_library", "transport", "measured_at"):
        assert key in doc["meta"]
    kernel = [r for r in doc["records"] if r["impl"] == "kernel"]
    assert len(kernel) >= 8 and all(r["t_us_min"] > 0 for r in kernel)


def test_matching_dataset_says_where_it_comes_from():
    """Part E's file: a real `bench matching` run, every message checked, the walk showing
    from 256 queued entries up (each deeper queue slower than the last)."""
    doc = json.loads((REPO / "labs" / LAB1 / "matching_measured.json").read_text())
    for key in ("hostname", "cpu_model", "cores", "mpi_library", "transport", "measured_at"):
        assert key in doc["meta"]
    recs = sorted((r["depth"], r["t_us_min"]) for r in doc["records"]
                  if r["queue"] == "unexpected" and r["wildcard"] == "none")
    assert all(r["bad"] == 0 for r in doc["records"])
    deep = [t for d, t in recs if d >= 256]
    assert len(deep) >= 3 and deep == sorted(deep), recs


# Lab 01's cheats (tests/hostile_snippets.py), one per part: the course's reference
# ping-pong patched on the grader's ranks, the visible test's numbers hard-coded, a
# prediction that ignores the size, Part E's model as the grader's reference (which the
# students' edition ships: the lab's text states it). The honest parts keep their marks.
@pytest.mark.submission(LAB1, "cheater", lambda: {
    **solutions(LAB1), "pingpong": LAB01_PINGPONG_PATCHES_THE_REFERENCE,
    "fit_alpha_beta": lab01_fit_hard_coded(), "predict": LAB01_PREDICT_IGNORES_SIZE,
    "predict_behind": LAB01_PREDICT_BEHIND_LOOKUP})
@pytest.mark.graded_timing
def test_lab01_cheats_lose_the_parts_they_cheat(request, course):
    want = {**full(LAB1), "test_pingpong": 0.0, "test_fit": 0.0, "test_predict": 0.0,
            "test_predict_measured": 0.0, "test_predict_behind": 0.0}
    nb, _ = check_run(request, course, want)
    said = errors_of(nb, "test_predict_behind")
    assert "reference_behind_us" in said and "Refused" in said, said
    said = errors_of(nb, "test_pingpong")
    assert "measure_pingpong" in said and "Refused" in said, said
    assert "synthetic" in errors_of(nb, "test_fit")  # the hidden data, not the visible
    said = errors_of(nb, "test_predict_measured")
    assert "must grow with the size" in said, said
