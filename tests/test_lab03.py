"""Lab 03 (one-sided halo exchange) under nbgrader, end to end, in a temporary copy of the course.

The source notebook validates; the released one (stubs raising NotImplementedError) fails
every test and still runs to its end. Submissions made from the released notebook are
autograded with real MPI engines:

- a correct one, and one in other styles (packed origins, a neighbourhood collective, a
  shared window synchronised with Lock_all / Sync / Barrier), get full marks;
- wrong ones lose exactly the part they got wrong, with messages naming the rank, the
  ghost edge and the neighbour: east and west puts swapped; the given mailbox exchange
  handed in unfixed; an exchange that never frees its window; a shared-window exchange
  that reads the wrong neighbour; one with no opening synchronisation (it reads data not
  yet written) and one with no closing synchronisation (it reads a neighbour's next
  values); a prediction of an epoch without its synchronisation (Part D);
- a hostile one (an epoch that hangs, ``sys.exit`` on the engines and in a cell, the
  checks' scratch files deleted, ``mpilab.grading`` and ``mpilab.grading.onesided``
  patched) is graded within its timeouts and gets no marks.

No process of the notebook's MPI cluster outlives an autograde. Wall times of
autograding are printed (``pytest -s``), not asserted.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from grading_batch import check_run
from hostile_snippets import LAB03_EPOCH_MEASURES, LAB03_PUT_IS_SENDRECV
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

LAB = "lab03-one-sided"
POINTS = {"test_exchange_put": 4.0, "test_shared": 4.0, "test_exchange_mailbox": 2.0,
          "test_epoch_us": 2.0}


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """A copy of the course with this lab alone generated (release/ and gradebook)."""
    return make_course(tmp_path_factory.mktemp("course03"), [LAB])


def given_mailbox() -> str:
    """The notebook's exchange_mailbox_given, renamed: the bug handed in unfixed."""
    return given_code(LAB, "mailbox_given", "exchange_mailbox_given", "exchange_mailbox")


solution_with = functools.partial(solution_with, LAB)


# east and west swapped: each column goes to the wrong side (into the wrong ghost column)
PUT_EAST_WEST_SWAPPED = ("    west, east = cart.Shift(1, 1)\n",
                         "    east, west = cart.Shift(1, 1)\n")
# the window is never freed: a leak per call
PUT_NO_FREE = ("\n    win.Free()", "")
# the north and south neighbours' segments swapped: reads the wrong neighbour
SHARED_WRONG_NEIGHBOUR = ("    north, south = cart.Shift(0, 1)\n",
                          "    south, north = cart.Shift(0, 1)\n")
# no opening synchronisation: reads a neighbour's block before the neighbour wrote it
SHARED_NO_OPENING_FENCE = ("    win.Fence()  # opens: every neighbour has written its block\n",
                           "")
# no closing synchronisation: a neighbour goes on (and overwrites its block) while this reads
SHARED_NO_CLOSING_FENCE = ("    win.Fence()  # closes: every rank has read before any goes on and "
                           "writes its block\n", "")

# Part D without the synchronisation: only the Put's bytes
EPOCH_NO_SYNC = '''
def epoch_us(n_bytes, empty_epoch_us, beta_MBps):
    return n_bytes / beta_MBps
'''

# hostile: an epoch only even ranks close, so the odd ones wait in the closing Fence forever
PUT_HANGS_IN_EPOCH = '''
def exchange_put(cart, u):
    from mpi4py import MPI

    win = MPI.Win.Create(u, disp_unit=u.itemsize, comm=cart)
    win.Fence()
    if cart.Get_rank() % 2:
        while True:
            win.Fence()
    elif cart.Get_rank() < 0:  # never: the check reads the code before it runs it
        win.Put(u, 0)
    win.Fence()
    win.Free()
'''

# hostile: sys.exit on the engines, and in the cell itself
SHARED_EXITS = '''
import sys


def shared_field(cart, rows, cols):
    sys.exit(3)


def exchange_shared(cart, win, u):
    sys.exit(4)


sys.exit("no more of this notebook")
'''

# hostile: deletes the checks' scratch files on the engines and patches the checks
MAILBOX_DELETES = '''
import mpilab.grading.onesided as _go


def _passes(*args, **kwargs):
    return None


for _check in ("check_put", "check_shared", "check_mailbox"):
    setattr(_go, _check, _passes)


def exchange_mailbox(cart, u):
    import glob
    import os
    import tempfile

    for f in glob.glob(os.path.join(tempfile.gettempdir(), "mpilab-check-*", "*")):
        try:
            os.remove(f)
        except OSError:
            pass
'''


# Correct answers in other styles than the notebook's: packed origins (kept alive until the
# closing Fence) and the neighbours' shapes from a neighbourhood collective; a shared window
# synchronised with Lock_all / Sync / Barrier instead of Fence, queried by cart rank; a
# mailbox whose slots are zeroed by the harness-independent np.zeros and read after Fence.
ALTERNATIVES = {
    "exchange_put": """
def exchange_put(comm2d, field):
    from mpi4py import MPI

    up, down = comm2d.Shift(0, 1)
    left, right = comm2d.Shift(1, 1)
    h, w = field.shape
    # neighbours in Cartesian order: up, down, left, right (None where there is none)
    shape_up, _, shape_left, shape_right = comm2d.neighbor_allgather(field.shape)
    packed_east = np.ascontiguousarray(field[1:-1, -2])  # alive until the closing Fence
    packed_west = np.ascontiguousarray(field[1:-1, 1])
    win = MPI.Win.Create(field, disp_unit=8, comm=comm2d)
    types = []
    win.Fence()
    win.Put(field[-2, 1:-1], down, target=(1, w - 2, MPI.DOUBLE))  # PROC_NULL: nothing
    if up != MPI.PROC_NULL:
        win.Put(field[1, 1:-1], up, target=((shape_up[0] - 1) * w + 1, w - 2, MPI.DOUBLE))
    if right != MPI.PROC_NULL:
        types.append(MPI.DOUBLE.Create_vector(h - 2, 1, shape_right[1]).Commit())
        win.Put(packed_east, right, target=(shape_right[1], 1, types[-1]))
    if left != MPI.PROC_NULL:
        types.append(MPI.DOUBLE.Create_vector(h - 2, 1, shape_left[1]).Commit())
        win.Put(packed_west, left, target=(2 * shape_left[1] - 1, 1, types[-1]))
    win.Fence()
    for t in types:
        t.Free()
    win.Free()
""",
    "shared": """
def shared_field(cart, rows, cols):
    from mpi4py import MPI

    node = cart.Split_type(MPI.COMM_TYPE_SHARED, key=cart.Get_rank())
    win = MPI.Win.Allocate_shared(8 * (rows + 2) * (cols + 2), 8, comm=node)
    mem, _ = win.Shared_query(node.Get_rank())
    node.Free()
    return win, np.frombuffer(mem, dtype=np.float64).reshape(rows + 2, cols + 2)


def exchange_shared(cart, win, u):
    from mpi4py import MPI

    rows, cols = u.shape[0] - 2, u.shape[1] - 2
    fetch = []
    for dim, (lo, hi) in enumerate([cart.Shift(0, 1), cart.Shift(1, 1)]):
        fetch.append((dim, lo, "low"))
        fetch.append((dim, hi, "high"))
    win.Lock_all()
    win.Sync()
    cart.Barrier()  # every block written
    win.Sync()
    for dim, q, side in fetch:
        if q == MPI.PROC_NULL:
            continue
        seg = np.frombuffer(win.Shared_query(q)[0], dtype=np.float64)
        if dim == 0:
            seg = seg.reshape(-1, cols + 2)
            if side == "low":
                u[0, 1:-1] = seg[-2, 1:-1]
            else:
                u[-1, 1:-1] = seg[1, 1:-1]
        else:
            seg = seg.reshape(rows + 2, -1)
            if side == "low":
                u[1:-1, 0] = seg[1:-1, -2]
            else:
                u[1:-1, -1] = seg[1:-1, 1]
    cart.Barrier()  # every edge read
    win.Unlock_all()
""",
}

def test_points_are_as_documented():
    assert full(LAB) == POINTS


def test_slow_ranks_form_a_checkerboard():
    """Every neighbour of a slow rank is fast, so every edge crosses a speed difference."""
    from mpilab.grading.onesided import slow_rank

    for cy in range(4):
        for cx in range(4):
            for dy, dx in [(0, 1), (1, 0)]:
                assert slow_rank(cy, cx) != slow_rank(cy + dy, cx + dx)


def test_probe_problems_say_when_a_rank_read():
    """Pure Python: an empty edge and a scribbled one get the timing hint that fits."""
    from mpilab.grading.halo import numbered
    from mpilab.grading.onesided import SCRIBBLE, probe_problems

    grid = numbered(4, 2)  # 4 x 2 grid over 1 x 2 ranks: rank 0 columns 0-1, rank 1 2-3
    probes = []
    for x0 in (0, 2):
        u = np.zeros((4, 4))
        u[1:-1, 1:-1] = grid[:, x0:x0 + 2]
        probes.append(u)
    probes[0][1:-1, -1] = grid[:, 2]  # rank 0 got rank 1's west edge: right
    assert probe_problems(probes, 4, 2, (1, 2)) == [
        "rank 1: the west ghost column holds 0.0s (nothing arrived?), expected rank 0's east "
        "edge (its west neighbour) — rank 1 is a slow rank of the probe; if the code reads "
        "the right neighbour, was the edge read before the neighbour wrote it (no opening "
        "synchronisation?) or before its Put arrived (ghost cells used before the closing "
        "Fence?)"]
    probes[1][1:-1, 0] = SCRIBBLE  # read after rank 0 had gone on
    (line,) = probe_problems(probes, 4, 2, (1, 2))
    assert line.startswith("rank 1: the west ghost column holds [-1, -1]")
    assert "no closing synchronisation?" in line
    assert probe_problems(probes, 4, 2, (1, 2), slow=False)[0].endswith("(its west neighbour)")


@pytest.mark.parametrize("wrong, says", [
    (lambda n, e, b: n / b, "add the empty epoch's time"),
    (lambda n, e, b: 2 * e + n / b, "count it once"),
    (lambda n, e, b: e + 8 * n / b, "already in bytes"),
    (lambda n, e, b: e + n / b * 1e6, "one byte per µs"),
    (lambda n, e, b: e, "bytes take time too"),
    (lambda n, e, b: e + n * b, "plus n / β"),
])
def test_epoch_hints_name_the_mistake(wrong, says):
    """Pure Python: the model of Part D, and what a wrong formula is told."""
    from mpilab.grading.onesided_model import _epoch_hint, reference_epoch_us

    assert reference_epoch_us(1_000_000, 2.0, 5000.0) == 202.0
    assert says in _epoch_hint(wrong(4096, 1.5, 10000.0), 4096, 1.5, 10000.0)


@pytest.mark.measures
def test_source_notebook_validates(course):
    assert_source_validates(course, LAB)


def test_released_stubs_fail_every_test(course):
    release = released_failing_every_test(course, LAB)
    stubs, tests = stubs_and_tests(release)
    assert len(stubs) == 4
    code = "\n".join(c.source for c in release.cells if c.cell_type == "code")
    assert code.count("raise NotImplementedError()") == 5  # shared_field + exchange_shared
    assert "def exchange_mailbox_given(" in code  # the given code stays
    assert len(tests) == 4 and all("grading_onesided.check_" in t for t in tests)
    assert max(len(t.splitlines()) for t in tests) <= 10


@pytest.mark.graded_timing
@pytest.mark.submission(LAB, "correct", lambda: solutions(LAB))
def test_correct_gets_full_marks(request, course):
    nb, seconds = check_run(request, course, POINTS)
    for gid, name in [("test_exchange_put", "exchange_put"),
                      ("test_shared", "shared_field + exchange_shared"),
                      ("test_exchange_mailbox", "exchange_mailbox"),
                      ("test_epoch_us", "epoch_us")]:
        assert f"{name} {'are' if '+' in name else 'is'} right" in printed_by(nb, gid)
    said = printed_by(nb, "test_epoch_us")
    assert "holds on this machine" in said, said
    print(f"[predict] {LAB}: {said.strip()}")
    # the given mailbox exchange was shown failing, naming a fast rank's empty ghost edge
    shown = printed_by(nb, "test_exchange_mailbox")
    assert "The given exchange, with slow ranks" in shown, shown
    assert "holds 0.0s (nothing arrived?)" in shown and "before the closing Fence" in shown
    print(f"[wall] {LAB} correct submission autograded in {seconds:.1f} s")


@pytest.mark.graded_timing
@pytest.mark.submission(LAB, "alternative", lambda: {**solutions(LAB), **ALTERNATIVES})
def test_other_correct_styles_get_full_marks(request, course):
    _, seconds = check_run(request, course, POINTS)
    print(f"[wall] {LAB} correct submission in other styles autograded in {seconds:.1f} s")

@pytest.mark.submission(LAB, "wrong1", lambda: {
    **solutions(LAB), "exchange_put": solution_with("exchange_put", *PUT_EAST_WEST_SWAPPED),
    "exchange_mailbox": given_mailbox(), "epoch_us": EPOCH_NO_SYNC})
def test_wrong_edge_and_unfixed_epoch_lose_their_parts(request, course):
    want = {**POINTS, "test_exchange_put": 0.0, "test_exchange_mailbox": 0.0,
            "test_epoch_us": 0.0}
    nb, seconds = check_run(request, course, want)
    err = errors_of(nb, "test_exchange_put")
    assert "rank 0: the east ghost column holds 0.0s" in err, err
    assert "expected rank 1's west edge (its east neighbour)" in err, err
    err = errors_of(nb, "test_exchange_mailbox")
    assert "holds 0.0s (nothing arrived?)" in err and "fast rank" in err, err
    err = errors_of(nb, "test_epoch_us")  # wrong on the made-up cases, before measuring
    assert "epoch_us(8, 1.5, 10000.0)" in err and "add the empty epoch's time" in err, err
    print(f"[wall] {LAB} wrong submission 1 autograded in {seconds:.1f} s")


@pytest.mark.submission(LAB, "wrong2", lambda: {
    **solutions(LAB), "exchange_put": solution_with("exchange_put", *PUT_NO_FREE),
    "shared": solution_with("shared", *SHARED_WRONG_NEIGHBOUR)})
@pytest.mark.graded_timing
def test_leak_and_wrong_neighbour_lose_their_parts(request, course):
    want = {**POINTS, "test_exchange_put": 0.0, "test_shared": 0.0}
    nb, _ = check_run(request, course, want)
    err = errors_of(nb, "test_exchange_put")
    assert "left 1 window unfreed (made by MPI.Win.Create)" in err, err
    err = errors_of(nb, "test_shared")
    # rank 0 reads its south neighbour's segment into its north ghost row, and nothing south
    assert "rank 0: the north ghost row holds rank 2's south edge" in err, err
    assert "rank 0: the south ghost row holds 0.0s" in err, err
    assert "expected rank 2's north edge (its south neighbour)" in err, err


@pytest.mark.submission(LAB, "stale", lambda: {
    **solutions(LAB), "shared": solution_with("shared", *SHARED_NO_OPENING_FENCE)})
@pytest.mark.graded_timing
def test_missing_synchronisation_loses_the_shared_part(request, course):
    nb, _ = check_run(request, course, {**POINTS, "test_shared": 0.0})
    err = errors_of(nb, "test_shared")
    # a fast rank read a slow neighbour's block before the neighbour had written it
    assert "holds 0.0s (nothing arrived?)" in err and "no opening synchronisation" in err, err


@pytest.mark.submission(LAB, "late", lambda: {
    **solutions(LAB), "shared": solution_with("shared", *SHARED_NO_CLOSING_FENCE)})
@pytest.mark.graded_timing
def test_missing_closing_synchronisation_loses_the_shared_part(request, course):
    nb, _ = check_run(request, course, {**POINTS, "test_shared": 0.0})
    err = errors_of(nb, "test_shared")
    # a slow rank read a fast neighbour's block after the neighbour had gone on
    assert "holds [-1, -1" in err and "no closing synchronisation" in err, err

@pytest.mark.submission(LAB, "hostile", {"exchange_put": HOSTILE_PATCH + PUT_HANGS_IN_EPOCH,
                                         "shared": SHARED_EXITS,
                                         "exchange_mailbox": HOSTILE_PATCH + MAILBOX_DELETES})
def test_hostile_is_graded_without_stalling(request, course):
    nb, seconds = check_run(request, course, {k: 0.0 for k in POINTS})
    err = errors_of(nb, "test_exchange_put")
    assert "TimedOut" in err or "Skipped" in err, err
    shared = errors_of(nb, "test_shared")  # the grader reads the code before it runs it
    assert "SystemExit" in shared or "should split cart by node" in shared, shared
    assert "exchange_mailbox is right" not in printed_by(nb, "test_exchange_mailbox")
    assert "CheckFailed" in errors_of(nb, "test_exchange_mailbox")
    print(f"[wall] {LAB} hostile submission autograded in {seconds:.1f} s")


# Lab 03's cheats (tests/hostile_snippets.py) beside honest parts: an exchange dressed as
# one-sided that moves the edges by Sendrecv, a prediction that is the grader's measurement.
@pytest.mark.submission(LAB, "cheater", lambda: {
    **solutions(LAB), "exchange_put": LAB03_PUT_IS_SENDRECV, "epoch_us": LAB03_EPOCH_MEASURES})
def test_cheats_lose_the_parts_they_cheat(request, course):
    nb, _ = check_run(request, course, {**POINTS, "test_exchange_put": 0.0,
                                        "test_epoch_us": 0.0})
    said = errors_of(nb, "test_exchange_put")
    assert "called cart.Sendrecv" in said and "Refused" in said, said
    said = errors_of(nb, "test_epoch_us")
    assert "epoch_now" in said and "Refused" in said, said
