"""Lab 04 (the halo with coarrays) under nbgrader, end to end, in a temporary copy of the course.

The source notebook validates; the released one (stubs raising NotImplementedError) fails
every test and still runs to its end. Submissions made from the released notebook are
autograded together, with real MPI engines:

- a correct one gets full marks;
- a wrong one loses exactly the parts it got wrong, with messages naming the rank, the
  ghost edge and the neighbour: Part A's east and west slots swapped, Part B without its
  first ``sync_all`` (it loads the neighbours' edges before they are written); code of
  the wrong structure (a push handed in as the pull, raw window calls, sends) is refused
  before it runs; a prediction of a push that counts its segment twice (Part D);
- a deadlocking one (the given ``exchange_given`` handed in for Part C: the top images
  skip a ``sync_all``) loses Part C only, named as a collective call not every image makes;
- a hostile one (``mpilab.grading`` patched, wrong slots, functions that do nothing)
  gets no marks (the hangs and crashes of the hostile corpus are lab 00's and every lab's
  hostile submission in tests/test_grading_hostile.py).

No process of the notebook's MPI cluster outlives the autograde.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from grading_batch import check_run
from hostile_snippets import LAB04_PUSH_IS_PUT_AND_FENCE, LAB04_PUSH_US_LOOKUP
from lab_grading import (
    HOSTILE_PATCH,
    assert_source_validates,
    errors_of,
    given_code,
    printed_by,
    released_failing_every_test,
    solution_with,
    stubs_and_tests,
)

from mpilab.autograder.course import full, make_course, solutions

pytestmark = pytest.mark.slow

LAB = "lab04-coarrays"
POINTS = {"test_exchange_push": 4.0, "test_exchange_pull": 3.0, "test_exchange_fixed": 3.0,
          "test_push_us": 2.0}


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """A copy of the course with this lab alone generated (release/ and gradebook)."""
    return make_course(tmp_path_factory.mktemp("course04"), [LAB])


def given() -> str:
    """The notebook's exchange_given, renamed: the deadlock handed in unfixed."""
    return given_code(LAB, "given", "exchange_given", "exchange_fixed")


solution_with = functools.partial(solution_with, LAB)


# the east and west slots swapped: each column lands in the wrong ghost column
PUSH_EAST_WEST_SWAPPED = ("    west, east = cart.Shift(1, 1)\n",
                          "    east, west = cart.Shift(1, 1)\n")
# no first sync_all: loads the neighbours' edges before the slow ones have written them
PULL_NO_FIRST_SYNC = (
    "    mine.sync_all()  # every image's edges are in its block before anyone loads them\n",
    "")
# Part D with the sync_all counted twice: the tiny push already ends its segment
PUSH_TWO_SEGMENTS = '''
def push_us(n_bytes, tiny_push_us, copy_MBps):
    return 2 * tiny_push_us + n_bytes / copy_MBps
'''


def test_points_are_as_documented():
    assert full(LAB) == POINTS


@pytest.mark.parametrize("wrong, says", [
    (lambda n, t, c: n / c, "add the tiny push's time"),
    (lambda n, t, c: t * n / 8, "once per store"),
    (lambda n, t, c: 2 * t + n / c, "A push is one segment"),
    (lambda n, t, c: t + 2 * n / c, "one copy, not two"),
    (lambda n, t, c: t + 8 * n / c, "already in bytes"),
    (lambda n, t, c: t, "bytes take time too"),
    (lambda n, t, c: t + n * c, "plus n / β_copy"),
])
def test_push_hints_name_the_mistake(wrong, says):
    """Pure Python: the model of Part D, and what a wrong formula is told."""
    from mpilab.grading.coarrays import _push_hint, reference_push_us

    assert reference_push_us(1_000_000, 10.0, 20000.0) == 60.0
    assert says in _push_hint(wrong(4096, 6.0, 40000.0), 4096, 6.0, 40000.0)


@pytest.mark.measures
def test_source_notebook_validates(course):
    assert_source_validates(course, LAB)


def test_released_stubs_fail_every_test(course):
    release = released_failing_every_test(course, LAB)
    stubs, tests = stubs_and_tests(release)
    assert len(stubs) == 4
    text = "\n".join(c.source for c in release.cells)
    assert "def exchange_given(" in text  # the given code stays
    assert len(tests) == 4 and all("grading_coarrays.check_" in t for t in tests)
    assert max(len(t.splitlines()) for t in tests) <= 10


@pytest.mark.graded_timing
@pytest.mark.submission(LAB, "correct", lambda: solutions(LAB))
def test_correct_gets_full_marks(request, course):
    nb, seconds = check_run(request, course, POINTS)
    for gid, name in [("test_exchange_push", "exchange_push"),
                      ("test_exchange_pull", "exchange_pull"),
                      ("test_exchange_fixed", "exchange_fixed"), ("test_push_us", "push_us")]:
        assert f"{name} is right" in printed_by(nb, gid)
    said = printed_by(nb, "test_push_us")
    assert "holds on this machine" in said, said
    print(f"[predict] {LAB}: {said.strip()}")
    print(f"[wall] {LAB} correct submission autograded in {seconds:.1f} s")


@pytest.mark.submission(LAB, "wrong", lambda: {
    **solutions(LAB),
    "exchange_push": solution_with("exchange_push", *PUSH_EAST_WEST_SWAPPED),
    "exchange_pull": solution_with("exchange_pull", *PULL_NO_FIRST_SYNC),
    "push_us": PUSH_TWO_SEGMENTS})
def test_wrong_slots_and_a_missing_segment_lose_their_parts(request, course):
    nb, _ = check_run(request, course, {**POINTS, "test_exchange_push": 0.0,
                                        "test_exchange_pull": 0.0, "test_push_us": 0.0})
    err = errors_of(nb, "test_exchange_push")
    assert "rank 0: the east ghost column holds 0.0s" in err, err
    err = errors_of(nb, "test_exchange_pull")
    # a fast image loaded a slow neighbour's edge before the neighbour had written it
    assert "holds 0.0s (nothing arrived?)" in err, err
    err = errors_of(nb, "test_push_us")  # wrong on the made-up cases, before measuring
    assert "push_us(8, 6.0, 40000.0)" in err and "A push is one segment" in err, err


def test_each_part_is_checked_for_its_structure():
    """The checks read the code first: a push handed in as the pull (it stores into other
    images), a raw window call, or a send, earns nothing even if its edges come out right."""
    from mpilab import grading
    from mpilab.grading.coarrays import _structure

    sol = solutions(LAB)
    _structure(sol["exchange_push"], "exchange_push", stores=True)
    _structure(sol["exchange_pull"], "exchange_pull", stores=False)
    _structure(sol["exchange_fixed"], "exchange_fixed", stores=True)
    for code, stores, says in [
            (sol["exchange_push"], False, "should only load from the other images"),
            (sol["exchange_pull"], True, "should store your edges"),
            (sol["exchange_push"].replace("edges.sync_all()", "edges.win.Fence()"), True,
             "should make a coarray"),
            (sol["exchange_push"] + "\n    cart.Send(u, 0)\n", True, "no send or receive"),
            (sol["exchange_pull"] + "\n    mine.win.Get(u, 0)\n", False, "not the window")]:
        with pytest.raises(grading.CheckFailed, match=says):
            _structure(code, "f", stores=stores)


@pytest.mark.graded_timing
@pytest.mark.submission(LAB, "deadlock", lambda: {**solutions(LAB), "exchange_fixed": given()})
def test_the_given_deadlock_loses_only_its_part(request, course):
    nb, seconds = check_run(request, course, {**POINTS, "test_exchange_fixed": 0.0})
    # the check first shows the given exchange not finishing, naming the stuck lines and
    # why; the same code handed in is then skipped at once, not waited for again
    shown = printed_by(nb, "test_exchange_fixed")
    assert "did not finish within" in shown, shown
    # (Open MPI 4.1: the top images return, the others wait in free's closing Fence)
    assert re.search(r"was at line \d+ of cell In \[\d+\] \(in exchange_given\): edges\.",
                     shown), shown
    assert "the same collective calls" in shown, shown
    err = errors_of(nb, "test_exchange_fixed")
    assert "TimedOut" in err or "Skipped" in err, err
    print(f"[wall] {LAB} deadlocking submission autograded in {seconds:.1f} s")


@pytest.mark.submission(LAB, "hostile", lambda: {
    "exchange_push": HOSTILE_PATCH + solution_with("exchange_push", *PUSH_EAST_WEST_SWAPPED),
    "exchange_pull": HOSTILE_PATCH + "def exchange_pull(cart, u):\n    return u\n",
    "exchange_fixed": HOSTILE_PATCH + "def exchange_fixed(cart, u):\n    return None\n"})
def test_hostile_gets_no_marks(request, course):
    nb, seconds = check_run(request, course, {k: 0.0 for k in POINTS})
    for gid, name in [("test_exchange_push", "exchange_push"),
                      ("test_exchange_pull", "exchange_pull"),
                      ("test_exchange_fixed", "exchange_fixed")]:
        assert f"{name} is right" not in printed_by(nb, gid)  # the patch fools nothing
        assert "CheckFailed" in errors_of(nb, gid), (gid, errors_of(nb, gid))
    print(f"[wall] {LAB} hostile submission autograded in {seconds:.1f} s")


# Lab 04's cheats (tests/hostile_snippets.py) beside honest parts: a push whose own code
# reads like one while a helper moves the edges by a window's Put + Fence, and the
# grader's own model as the prediction.
@pytest.mark.submission(LAB, "cheater", lambda: {
    **solutions(LAB), "exchange_push": LAB04_PUSH_IS_PUT_AND_FENCE,
    "push_us": LAB04_PUSH_US_LOOKUP})
def test_cheats_lose_the_parts_they_cheat(request, course):
    nb, _ = check_run(request, course, {**POINTS, "test_exchange_push": 0.0,
                                        "test_push_us": 0.0})
    said = errors_of(nb, "test_exchange_push")
    assert "called MPI.Win.Create" in said and "Refused" in said, said
    said = errors_of(nb, "test_push_us")
    assert "reference_push_us" in said and "Refused" in said, said
