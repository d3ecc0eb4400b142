"""Lab 02 (halo exchange) under nbgrader, end to end, in a temporary copy of the course.

The source notebook validates; the released one (stubs) fails every test; submissions made
from the released notebook are autograded with real MPI engines: a correct one gets full
marks, a wrong one (east and west swapped; an "overlap" that waits before computing)
loses those parts with messages that name the wrong ghost edge, one whose fixed exchange
deadlocks loses only that part and is graded within its timeout, and a hostile one
(patched ``mpilab.grading``, patched ``mpilab.grading.halo`` checks, helpers redefined in
the notebook, an object that equals everything returned) gets no marks for its wrong
answers. The test cells only call ``mpilab.grading.halo``: no harness is defined in the
notebook. No process of the notebook's MPI cluster outlives an autograde.

Wall times of autograding are printed (``pytest -s``), not asserted.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from grading_batch import check_run
from hostile_snippets import (
    LAB02_EXCHANGE_US_LOOKUP,
    LAB02_GATHERS_THE_FIELD,
    lab02_step_with_forged_source,
    reads_the_graders_files,
)
from lab_grading import (
    HOSTILE_PATCH,
    assert_source_validates,
    errors_of,
    given_code,
    printed_by,
    released_failing_every_test,
    stubs_and_tests,
)

from mpilab.autograder.course import full, make_course, solutions

pytestmark = pytest.mark.slow

LAB = "lab02-halo"
POINTS = {"test_exchange_sendrecv": 3.0, "test_exchange_nonblocking": 2.0,
          "test_step_overlap": 3.0, "test_exchange_fixed": 2.0, "test_exchange_us": 2.0}


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """A copy of the course with this lab alone generated (release/ and gradebook).

    Only this lab is copied, so a lab another author is still writing cannot break it.
    """
    return make_course(tmp_path_factory.mktemp("course"), [LAB])


# Correct answers in other styles than the notebook's solutions: columns as a vector
# datatype straight from and into the frame; other parameter names; halo.heat_step on a
# view for the interior; a checkerboard order for the blocking exchange.
ALTERNATIVES = {
    "exchange_sendrecv": '''
def exchange_sendrecv(cart, u):
    from mpi4py import MPI

    north, south = cart.Shift(0, 1)
    west, east = cart.Shift(1, 1)
    rows, cols = u.shape[0] - 2, u.shape[1] - 2
    column = MPI.DOUBLE.Create_vector(rows, 1, cols + 2).Commit()
    flat = u.reshape(-1)

    def at(r, c, count=cols, kind=MPI.DOUBLE):
        return [flat[r * (cols + 2) + c:], count, kind]

    cart.Sendrecv(at(rows, 1), dest=south, recvbuf=at(0, 1), source=north)
    cart.Sendrecv(at(1, 1), dest=north, recvbuf=at(rows + 1, 1), source=south)
    cart.Sendrecv(at(1, cols, 1, column), dest=east, recvbuf=at(1, 0, 1, column), source=west)
    cart.Sendrecv(at(1, 1, 1, column), dest=west, recvbuf=at(1, cols + 1, 1, column),
                  source=east)
    column.Free()
''',
    "exchange_nonblocking": '''
def exchange_nonblocking(comm2d, field):
    from mpi4py import MPI

    rows, cols = field.shape[0] - 2, field.shape[1] - 2
    column = MPI.DOUBLE.Create_vector(rows, 1, cols + 2).Commit()
    flat = field.reshape(-1)

    def at(r, c, count=cols, kind=MPI.DOUBLE):
        return [flat[r * (cols + 2) + c:], count, kind]

    requests = []
    for dim, low, high in [(0, (0, 1), (rows + 1, 1)), (1, (1, 0), (1, cols + 1))]:
        before, after = comm2d.Shift(dim, 1)
        count, kind = (cols, MPI.DOUBLE) if dim == 0 else (1, column)
        inner_low = (1, 1)
        inner_high = (rows, 1) if dim == 0 else (1, cols)
        requests += [comm2d.Irecv(at(*low, count, kind), source=before, tag=10 * dim),
                     comm2d.Irecv(at(*high, count, kind), source=after, tag=10 * dim + 1),
                     comm2d.Isend(at(*inner_high, count, kind), dest=after, tag=10 * dim),
                     comm2d.Isend(at(*inner_low, count, kind), dest=before, tag=10 * dim + 1)]
    MPI.Request.Waitall(requests)
    column.Free()
''',
    "step_overlap": '''
def step_overlap(cart, a, b):
    from mpi4py import MPI

    north, south = cart.Shift(0, 1)
    west, east = cart.Shift(1, 1)
    rows, cols = a.shape[0] - 2, a.shape[1] - 2
    column = MPI.DOUBLE.Create_vector(rows, 1, cols + 2).Commit()
    flat = a.reshape(-1)

    def at(r, c, count=cols, kind=MPI.DOUBLE):
        return [flat[r * (cols + 2) + c:], count, kind]

    reqs = [cart.Irecv(at(0, 1), source=north, tag=0),
            cart.Irecv(at(rows + 1, 1), source=south, tag=1),
            cart.Irecv(at(1, 0, 1, column), source=west, tag=2),
            cart.Irecv(at(1, cols + 1, 1, column), source=east, tag=3),
            cart.Isend(at(rows, 1), dest=south, tag=0),
            cart.Isend(at(1, 1), dest=north, tag=1),
            cart.Isend(at(1, cols, 1, column), dest=east, tag=2),
            cart.Isend(at(1, 1, 1, column), dest=west, tag=3)]
    halo.heat_step(a[1:-1, 1:-1], b[1:-1, 1:-1])  # a view's own frame: the owned edges
    MPI.Request.Waitall(reqs)
    column.Free()
    for r0, r1, c0, c1 in [(1, 2, 1, cols + 1), (rows, rows + 1, 1, cols + 1),
                           (1, rows + 1, 1, 2), (1, rows + 1, cols, cols + 1)]:
        update(a, b, r0, r1, c0, c1)
''',
    "exchange_fixed": '''
def exchange_fixed(cart, u):
    from mpi4py import MPI

    north, south = cart.Shift(0, 1)
    west, east = cart.Shift(1, 1)
    cy, cx = cart.Get_coords(cart.Get_rank())
    rows = u.shape[0] - 2
    west_in, east_in = np.zeros(rows), np.zeros(rows)

    def sends():
        cart.Send(u[-2, 1:-1], dest=south, tag=0)
        cart.Send(u[1, 1:-1], dest=north, tag=1)
        cart.Send(np.ascontiguousarray(u[1:-1, -2]), dest=east, tag=2)
        cart.Send(np.ascontiguousarray(u[1:-1, 1]), dest=west, tag=3)

    def receives():
        cart.Recv(u[0, 1:-1], source=north, tag=0)
        cart.Recv(u[-1, 1:-1], source=south, tag=1)
        cart.Recv(west_in, source=west, tag=2)
        cart.Recv(east_in, source=east, tag=3)

    if (cy + cx) % 2 == 0:  # a checkerboard: every neighbour has the other colour
        sends()
        receives()
    else:
        receives()
        sends()
    if west != MPI.PROC_NULL:
        u[1:-1, 0] = west_in
    if east != MPI.PROC_NULL:
        u[1:-1, -1] = east_in
''',
    # the model over the whole process grid at once, in NumPy
    "exchange_us": '''
def exchange_us(nx, ny, dims, alpha_us, beta_MBps):
    py, px = dims
    rows = np.array([n for _, n in halo.split(ny, py)])[:, None]
    cols = np.array([n for _, n in halo.split(nx, px)])[None, :]
    cy, cx = np.arange(py)[:, None], np.arange(px)[None, :]
    north_south = (cy > 0).astype(int) + (cy < py - 1)
    west_east = (cx > 0).astype(int) + (cx < px - 1)
    t = (north_south * (alpha_us + 8 * cols / beta_MBps)
         + west_east * (alpha_us + 8 * rows / beta_MBps))
    return float(t.max())
''',
}

# east and west swapped: each column goes to the wrong side
SENDRECV_EAST_WEST_SWAPPED = '''
def exchange_sendrecv(cart, u):
    from mpi4py import MPI

    north, south = cart.Shift(0, 1)
    east, west = cart.Shift(1, 1)
    cart.Sendrecv(u[-2, 1:-1], dest=south, recvbuf=u[0, 1:-1], source=north)
    cart.Sendrecv(u[1, 1:-1], dest=north, recvbuf=u[-1, 1:-1], source=south)
    arrived = np.zeros(u.shape[0] - 2)
    cart.Sendrecv(np.ascontiguousarray(u[1:-1, -2]), dest=east, recvbuf=arrived, source=west)
    if west != MPI.PROC_NULL:
        u[1:-1, 0] = arrived
    cart.Sendrecv(np.ascontiguousarray(u[1:-1, 1]), dest=west, recvbuf=arrived, source=east)
    if east != MPI.PROC_NULL:
        u[1:-1, -1] = arrived
'''

# right numbers, no overlap: waits for the halo before computing anything
OVERLAP_WAITS_FIRST = '''
def step_overlap(cart, old, new):
    from mpi4py import MPI

    north, south = cart.Shift(0, 1)
    west, east = cart.Shift(1, 1)
    rows, cols = old.shape[0] - 2, old.shape[1] - 2
    west_in, east_in = np.zeros(rows), np.zeros(rows)
    requests = [
        cart.Irecv(old[0, 1:-1], source=north, tag=0),
        cart.Irecv(old[-1, 1:-1], source=south, tag=1),
        cart.Irecv(west_in, source=west, tag=2),
        cart.Irecv(east_in, source=east, tag=3),
        cart.Isend(old[-2, 1:-1], dest=south, tag=0),
        cart.Isend(old[1, 1:-1], dest=north, tag=1),
        cart.Isend(np.ascontiguousarray(old[1:-1, -2]), dest=east, tag=2),
        cart.Isend(np.ascontiguousarray(old[1:-1, 1]), dest=west, tag=3),
    ]
    MPI.Request.Waitall(requests)
    if west != MPI.PROC_NULL:
        old[1:-1, 0] = west_in
    if east != MPI.PROC_NULL:
        old[1:-1, -1] = east_in
    update(old, new, 1, rows + 1, 1, cols + 1)
'''

# the whole step before Waitall: the ring reads ghost cells that have not arrived
OVERLAP_RING_TOO_EARLY = '''
def step_overlap(cart, old, new):
    from mpi4py import MPI

    north, south = cart.Shift(0, 1)
    west, east = cart.Shift(1, 1)
    rows, cols = old.shape[0] - 2, old.shape[1] - 2
    west_in, east_in = np.zeros(rows), np.zeros(rows)
    requests = [
        cart.Irecv(old[0, 1:-1], source=north, tag=0),
        cart.Irecv(old[-1, 1:-1], source=south, tag=1),
        cart.Irecv(west_in, source=west, tag=2),
        cart.Irecv(east_in, source=east, tag=3),
        cart.Isend(old[-2, 1:-1], dest=south, tag=0),
        cart.Isend(old[1, 1:-1], dest=north, tag=1),
        cart.Isend(np.ascontiguousarray(old[1:-1, -2]), dest=east, tag=2),
        cart.Isend(np.ascontiguousarray(old[1:-1, 1]), dest=west, tag=3),
    ]
    update(old, new, 1, rows + 1, 1, cols + 1)
    MPI.Request.Waitall(requests)
'''

# the columns arrive but are never copied into the frame
NONBLOCKING_NO_COLUMNS = '''
def exchange_nonblocking(cart, u):
    from mpi4py import MPI

    north, south = cart.Shift(0, 1)
    west, east = cart.Shift(1, 1)
    rows = u.shape[0] - 2
    west_in, east_in = np.zeros(rows), np.zeros(rows)
    requests = [
        cart.Irecv(u[0, 1:-1], source=north, tag=0),
        cart.Irecv(u[-1, 1:-1], source=south, tag=1),
        cart.Irecv(west_in, source=west, tag=2),
        cart.Irecv(east_in, source=east, tag=3),
        cart.Isend(u[-2, 1:-1], dest=south, tag=0),
        cart.Isend(u[1, 1:-1], dest=north, tag=1),
        cart.Isend(np.ascontiguousarray(u[1:-1, -2]), dest=east, tag=2),
        cart.Isend(np.ascontiguousarray(u[1:-1, 1]), dest=west, tag=3),
    ]
    MPI.Request.Waitall(requests)
'''

# every rank receives first: a deadlock at any size
FIXED_RECEIVES_FIRST = '''
def exchange_fixed(cart, u):
    from mpi4py import MPI

    north, south = cart.Shift(0, 1)
    west, east = cart.Shift(1, 1)
    rows = u.shape[0] - 2
    west_in, east_in = np.zeros(rows), np.zeros(rows)
    cart.Recv(u[0, 1:-1], source=north, tag=0)
    cart.Recv(u[-1, 1:-1], source=south, tag=1)
    cart.Recv(west_in, source=west, tag=2)
    cart.Recv(east_in, source=east, tag=3)
    cart.Send(u[-2, 1:-1], dest=south, tag=0)
    cart.Send(u[1, 1:-1], dest=north, tag=1)
    cart.Send(np.ascontiguousarray(u[1:-1, -2]), dest=east, tag=2)
    cart.Send(np.ascontiguousarray(u[1:-1, 1]), dest=west, tag=3)
    if west != MPI.PROC_NULL:
        u[1:-1, 0] = west_in
    if east != MPI.PROC_NULL:
        u[1:-1, -1] = east_in
'''

# right, but with Sendrecv: not what Part D asks
FIXED_WITH_SENDRECV = '''
def exchange_fixed(cart, u):
    exchange_sendrecv(cart, u)
'''


def given_naive() -> str:
    """The notebook's exchange_naive, renamed: an unchanged copy handed in as the fix."""
    return given_code(LAB, "exchange_given", "exchange_naive", "exchange_fixed")


# the old test cells' helpers redefined in an answer cell: the test cells call the module
HARNESS_OVERRIDE = '''

def check_exchange(*args, **kwargs):
    return None


def same(a, b):
    return True
'''

# the lab's checks replaced in mpilab.grading.halo: the hidden tests reload the module
GRADING_HALO_PATCH = '''
import mpilab.grading.halo as _gh


def _passes(*args, **kwargs):
    return None


def _nothing_wrong(*args, **kwargs):
    return []


for _check in ("check_exchange", "check_nonblocking", "check_step", "check_overlap",
               "check_fixed", "check_posts_and_waits", "check_overlap_order",
               "check_blocking_calls"):
    setattr(_gh, _check, _passes)  # the checks the test cells call ...
_gh.ghost_problems = _gh.step_problems = _nothing_wrong  # ... and what they compare with
'''

# an object that equals everything, returned where nothing is expected: the checks never
# compare what the student's function returns, only the arrays the harness built
LIAR = '''

class Liar:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False


'''


def cell_of(nb, grade_id: str):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def all_output(nb) -> str:
    """Everything the cells printed or raised, in order."""
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            out.append(o.get("text", "") if o.output_type == "stream"
                       else f"{o.get('ename')}: {o.get('evalue')}" if o.output_type == "error"
                       else "")
    return "\n".join(out)


def test_points_are_as_documented():
    assert full(LAB) == POINTS


@pytest.mark.measures
def test_source_notebook_validates(course):
    assert_source_validates(course, LAB)


def test_released_stubs_fail_every_test(course):
    release = released_failing_every_test(course, LAB)
    stubs, tests = stubs_and_tests(release)
    assert len(stubs) == 5
    text = "\n".join(c.source for c in release.cells)
    assert "def exchange_naive(" in text  # the given code stays
    # the checks live in mpilab.grading.halo: no harness in the notebook, short test cells
    assert "def halo_harness" not in text and "def ghost_problems" not in text
    assert len(tests) == 5 and all("grading_halo.check_" in t for t in tests)
    assert max(len(t.splitlines()) for t in tests) <= 10


@pytest.mark.graded_timing
@pytest.mark.submission(LAB, "correct", lambda: solutions(LAB))
def test_correct_gets_full_marks(request, course):
    nb, seconds = check_run(request, course, POINTS)
    for gid, name in [("test_exchange_sendrecv", "exchange_sendrecv"),
                      ("test_exchange_nonblocking", "exchange_nonblocking"),
                      ("test_step_overlap", "step_overlap"),
                      ("test_exchange_fixed", "exchange_fixed")]:
        assert f"{name} is right" in printed_by(nb, gid)
    # the given exchange was shown deadlocking, with the lines the ranks were stuck on
    shown = printed_by(nb, "test_exchange_fixed")
    assert "exchange_naive deadlocks" in shown and "cart.Send(" in shown, shown
    print(f"[wall] {LAB} correct submission autograded in {seconds:.1f} s")


@pytest.mark.graded_timing
@pytest.mark.submission(LAB, "alternative", ALTERNATIVES)
def test_other_correct_styles_get_full_marks(request, course):
    _, seconds = check_run(request, course, POINTS)
    print(f"[wall] {LAB} correct submission in other styles autograded in {seconds:.1f} s")


EXCHANGE_US_ALL_RANKS = '''
def exchange_us(nx, ny, dims, alpha_us, beta_MBps):
    py, px = dims
    total = 0.0
    for cy, (_, rows) in enumerate(halo.split(ny, py)):
        for cx, (_, cols) in enumerate(halo.split(nx, px)):
            edges = [cols] * ((cy > 0) + (cy < py - 1)) + [rows] * ((cx > 0) + (cx < px - 1))
            total += sum(alpha_us + 8 * n / beta_MBps for n in edges)
    return total
'''


@pytest.mark.submission(LAB, "wrong", lambda: {
    **solutions(LAB), "exchange_sendrecv": SENDRECV_EAST_WEST_SWAPPED,
    "step_overlap": OVERLAP_WAITS_FIRST, "exchange_us": EXCHANGE_US_ALL_RANKS})
def test_wrong_gets_partial_marks(request, course):
    want = {**POINTS, "test_exchange_sendrecv": 0.0, "test_step_overlap": 0.0,
            "test_exchange_us": 0.0}
    nb, seconds = check_run(request, course, want)
    err = errors_of(nb, "test_exchange_us")
    assert "exchange_us(16, 12, (2, 2), 1.0, 1000.0)" in err and "busiest rank" in err, err
    err = errors_of(nb, "test_exchange_sendrecv")
    # the message names the rank, the ghost edge, what it holds and whose edge it should be
    assert "rank 0: the east ghost column holds 0.0s" in err, err
    assert "expected rank 1's west edge (its east neighbour)" in err, err
    assert "between posting" in errors_of(nb, "test_step_overlap")
    print(f"[wall] {LAB} wrong submission autograded in {seconds:.1f} s")


@pytest.mark.submission(LAB, "wrong2", lambda: {
    **solutions(LAB), "exchange_nonblocking": NONBLOCKING_NO_COLUMNS,
    "step_overlap": OVERLAP_RING_TOO_EARLY, "exchange_fixed": FIXED_WITH_SENDRECV})
@pytest.mark.graded_timing
def test_wrong_ghosts_and_ring_are_named(request, course):
    want = {**POINTS, "test_exchange_nonblocking": 0.0, "test_step_overlap": 0.0,
            "test_exchange_fixed": 0.0}
    nb, _ = check_run(request, course, want)
    err = errors_of(nb, "test_exchange_nonblocking")
    assert "the west ghost column holds 0.0s (nothing arrived?)" in err, err
    err = errors_of(nb, "test_step_overlap")
    assert "new is wrong in the boundary ring" in err and "interior" not in err.split(
        "\n")[1], err
    assert "keep the blocking cart.Send" in errors_of(nb, "test_exchange_fixed")


@pytest.mark.submission(LAB, "deadlock", lambda: {**solutions(LAB),
                                                  "exchange_fixed": FIXED_RECEIVES_FIRST})
@pytest.mark.graded_timing
def test_deadlock_loses_only_that_part(request, course):
    nb, seconds = check_run(request, course, {**POINTS, "test_exchange_fixed": 0.0})
    err = errors_of(nb, "test_exchange_fixed")
    # the try-it cell above the check ran it first and timed out (naming the stuck lines);
    # the graded check then skips it at once instead of waiting for the same timeout again
    assert ("TimedOut" in err or "Skipped" in err) and "exchange_fixed" in err, err
    shown = all_output(nb)
    assert "TimedOut: halo_harness with exchange_fixed" in shown, shown
    # where it was stuck: the line as the editor numbers it in the cell with that prompt
    count = cell_of(nb, "exchange_fixed").execution_count
    assert f"was at line 9 of cell In [{count}] (in exchange_fixed): cart.Recv(" in shown, shown
    print(f"[wall] {LAB} deadlocking submission autograded in {seconds:.1f} s")


@pytest.mark.submission(LAB, "hostile", lambda: {
    "exchange_sendrecv": HOSTILE_PATCH + HARNESS_OVERRIDE + GRADING_HALO_PATCH
    + SENDRECV_EAST_WEST_SWAPPED,
    "exchange_nonblocking": HOSTILE_PATCH + LIAR + NONBLOCKING_NO_COLUMNS.rstrip()
    + "\n    return Liar()\n",
    # only the lab's module patched, in the student's kernel: the checks run elsewhere
    "step_overlap": GRADING_HALO_PATCH + OVERLAP_RING_TOO_EARLY,
    # the given exchange, unchanged: it timed out in the demo, so it is not run again
    "exchange_fixed": HOSTILE_PATCH + given_naive(),
})
def test_hostile_gets_no_marks_for_wrong_answers(request, course):
    nb, seconds = check_run(request, course, {k: 0.0 for k in POINTS})
    for gid, name in [("test_exchange_sendrecv", "exchange_sendrecv"),
                      ("test_exchange_nonblocking", "exchange_nonblocking"),
                      ("test_step_overlap", "step_overlap")]:
        assert f"{name} is right" not in printed_by(nb, gid)  # the patches fool no check
        assert "CheckFailed" in errors_of(nb, gid)
    assert "Skipped" in errors_of(nb, "test_exchange_fixed")
    print(f"[wall] {LAB} hostile submission autograded in {seconds:.1f} s")


# Lab 02's cheats (tests/hostile_snippets.py) beside honest parts: a halo that gathers the
# whole field, a step without overlap whose source the student's kernel forges, the
# grader's own model as the prediction, and a correct exchange that first looks for the
# grader's files from the ranks (it would fail, naming them, if it found one).
@pytest.mark.submission(LAB, "cheater", lambda: {
    **solutions(LAB), "exchange_sendrecv": LAB02_GATHERS_THE_FIELD,
    "exchange_nonblocking": reads_the_graders_files(solutions(LAB)["exchange_nonblocking"],
                                                    "exchange_nonblocking"),
    "step_overlap": lab02_step_with_forged_source(solutions(LAB)["step_overlap"]),
    "exchange_us": LAB02_EXCHANGE_US_LOOKUP})
def test_cheats_lose_the_parts_they_cheat(request, course):
    nb, _ = check_run(request, course, {**POINTS, "test_exchange_sendrecv": 0.0,
                                        "test_step_overlap": 0.0, "test_exchange_us": 0.0})
    said = errors_of(nb, "test_exchange_sendrecv")
    assert "calls allgather, a collective of every rank" in said, said
    said = errors_of(nb, "test_step_overlap")
    assert "Irecv" in said or "Waitall" in said, said  # the code it shows, not the forged
    said = errors_of(nb, "test_exchange_us")
    assert "reference_exchange_us" in said and "Refused" in said, said
