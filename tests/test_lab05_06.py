"""Labs 05 (collectives) and 06 (allgather) under nbgrader, end to end, as tests/test_labs.py.

In a temporary copy of the course: the source notebooks validate; the released stubs fail
every test; a correct submission gets full marks; wrong ones (a linear broadcast, an
off-by-one ring, a reduce-scatter one block off, ...) get partial marks with messages that say what is wrong; a
deadlocking one is graded within its timeouts, loses only that part and leaves no process
behind; a hostile one (monkeypatching ``mpilab.grading``, ``mpilab.tracing`` and the checks
of ``mpilab.grading.collectives`` and ``.allgather``, returning objects with a lying
``__eq__``) gets no marks
for wrong answers. Autograde wall times are
printed (``pytest -s``), not asserted.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from grading_batch import check_run
from hostile_snippets import (
    LAB05_ALLREDUCE_LIBRARY,
    LAB05_BCAST_LIBRARY_FORGED_TRACE,
    LAB05_BCAST_US_LOOKUP,
    LAB06_ALLGATHER_US_LOOKUP,
    LAB06_RING_IS_THE_COURSES_KERNEL,
)
from lab_grading import (
    assert_source_validates,
    errors_of,
    printed_by,
    released_failing_every_test,
)

from mpilab.autograder.course import REPO, full, make_course, solutions

pytestmark = pytest.mark.slow

LAB5 = "lab05-collectives"
LAB6 = "lab06-allgather"
LABS = [lab for lab in (LAB5, LAB6) if (REPO / "labs" / lab / f"{lab}.ipynb").exists()]


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """A copy of the course with labs 05 and 06 alone copied and generated."""
    return make_course(tmp_path_factory.mktemp("course56"), LABS)


HOSTILE_PATCH = '''
import mpilab.grading as _g
import mpilab.tracing as _t


def _always_pass(*args, **kwargs):
    return None


for _name in ("expect", "expect_equal", "expect_close", "expect_per_rank", "expect_timing"):
    setattr(_g, _name, _always_pass)
    globals()[_name] = _always_pass
_t.steps = lambda sched: 0  # "every algorithm takes no step"

import mpilab.grading.allgather as _a  # noqa: E402
import mpilab.grading.collectives as _c  # noqa: E402
import mpilab.grading.reduce_scatter as _rs  # noqa: E402

for _m in (_c, _a, _rs):
    for _name in ("check_bcast", "check_allreduce", "check_allgather", "check_compiled_ring",
                  "check_reduce_scatter", "check_ring_steps", "check_reduce_scatter_steps",
                  "check_ring_source", "check_refusals", "check_traced",
                  "check_bcast_schedule", "check_allreduce_schedule", "check_ring_schedule",
                  "check_log_schedule"):
        if hasattr(_m, _name):
            setattr(_m, _name, _always_pass)  # the checks themselves, as the notebook sees them


class _Liar:
    """Equal to everything."""

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False
'''


# ---------------------------------------------------------------------------------------
# validate


@pytest.mark.measures
@pytest.mark.parametrize("lab", LABS)
def test_source_notebook_validates(course, lab):
    assert_source_validates(course, lab)


@pytest.mark.parametrize("lab", LABS)
def test_released_stubs_fail_every_test(course, lab):
    released_failing_every_test(course, lab)


# -- lab 05 ------------------------------------------------------------------------------

BCAST_LINEAR = '''
def bcast_binomial(comm, buf, root):
    """Right result, but the root sends to everyone in turn."""
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank == root:
        for dest in range(size):
            if dest != root:
                comm.Send(buf, dest=dest)
    else:
        comm.Recv(buf, source=root)
'''

ALLREDUCE_REBINDS = '''
def allreduce_butterfly(comm, sendbuf, recvbuf):
    """A butterfly that rebinds recvbuf: the caller's buffer keeps only the own data."""
    rank, size = comm.Get_rank(), comm.Get_size()
    recvbuf[...] = sendbuf
    tmp = np.empty_like(recvbuf)
    mask = 1
    while mask < size:
        partner = rank ^ mask
        if partner < size:
            comm.Sendrecv(recvbuf, dest=partner, recvbuf=tmp, source=partner)
            recvbuf = recvbuf + tmp
        mask <<= 1
'''

BCAST_DEADLOCK = '''
def bcast_binomial(comm, buf, root):
    """Every rank but the root receives first, the root too: nobody sends."""
    rank, size = comm.Get_rank(), comm.Get_size()
    comm.Recv(buf, source=(rank - 1) % size)
    comm.Send(buf, dest=(rank + 1) % size)
'''

ALLREDUCE_VIA_ROOT = '''
def allreduce_butterfly(comm, sendbuf, recvbuf):
    """Right result: reduce at rank 0, then rank 0 sends the sum to everyone in turn."""
    rank, size = comm.Get_rank(), comm.Get_size()
    recvbuf[...] = sendbuf
    if rank == 0:
        tmp = np.empty_like(recvbuf)
        for r in range(1, size):
            comm.Recv(tmp, source=r)
            recvbuf += tmp
        for r in range(1, size):
            comm.Send(recvbuf, dest=r)
    else:
        comm.Send(sendbuf, dest=0)
        comm.Recv(recvbuf, source=0)
'''

RS_ONE_BLOCK_OFF = '''
def reduce_scatter_ring(comm, sendbuf, recvbuf):
    """Starts with its own block r instead of r - 1: ends with the total of block r + 1."""
    r, p = comm.Get_rank(), comm.Get_size()
    n = len(recvbuf)
    partial = sendbuf[r * n:(r + 1) * n].copy()
    got = np.empty_like(recvbuf)
    for k in range(p - 1):
        j = (r - k - 1) % p
        comm.Sendrecv(partial, dest=(r + 1) % p, recvbuf=got, source=(r - 1) % p)
        partial = got + sendbuf[j * n:(j + 1) * n]
    recvbuf[...] = partial
'''

RS_STRAIGHT_TO_OWNER = '''
def reduce_scatter_ring(comm, sendbuf, recvbuf):
    """Right result: every block goes straight to its owner (pairwise), not round a ring."""
    r, p = comm.Get_rank(), comm.Get_size()
    n = len(recvbuf)
    recvbuf[...] = sendbuf[r * n:(r + 1) * n]
    got = np.empty_like(recvbuf)
    for k in range(1, p):
        to, frm = (r + k) % p, (r - k) % p
        comm.Sendrecv(sendbuf[to * n:(to + 1) * n], dest=to, recvbuf=got, source=frm)
        recvbuf += got
'''

RS_HOSTILE = HOSTILE_PATCH + '''

def reduce_scatter_ring(comm, sendbuf, recvbuf):
    """Does nothing; returns a liar."""
    return _Liar()
'''

BCAST_HOSTILE = HOSTILE_PATCH + '''

def bcast_binomial(comm, buf, root):
    """Only one rank gets the data; returns a liar."""
    rank = comm.Get_rank()
    other = (root + 1) % comm.Get_size()
    if rank == root:
        comm.Send(buf, dest=other)
    elif rank == other:
        comm.Recv(buf, source=root)
    return _Liar()
'''

ALLREDUCE_HOSTILE = HOSTILE_PATCH + '''

def allreduce_butterfly(comm, sendbuf, recvbuf):
    """Does nothing; returns a liar."""
    return _Liar()
'''

needs5 = pytest.mark.skipif(LAB5 not in LABS, reason="lab 05 not written yet")


@pytest.mark.graded_timing
@needs5
@pytest.mark.submission(LAB5, "correct", lambda: solutions(LAB5))
def test_lab05_correct_gets_full_marks(request, course):
    _, wall = check_run(request, course, full(LAB5))
    print(f"[wall] {LAB5} correct submission autograded in {wall:.1f} s")


BCAST_US_UNROUNDED = '''
def bcast_us(alg, p, n_bytes, alpha_us, beta_MBps):
    steps = p - 1 if alg == "linear" else np.log2(p)
    return steps * (alpha_us + n_bytes / beta_MBps)
'''


@needs5
@pytest.mark.submission(LAB5, "wrong", lambda: {**solutions(LAB5), "bcast_binomial": BCAST_LINEAR,
                                               "allreduce_butterfly": ALLREDUCE_REBINDS,
                                               "reduce_scatter_ring": RS_ONE_BLOCK_OFF,
                                               "bcast_us": BCAST_US_UNROUNDED})
@pytest.mark.graded_timing
def test_lab05_wrong_gets_partial_marks(request, course):
    want = {"test_bcast_binomial": 3.0, "test_bcast_steps": 0.0,
            "test_allreduce_butterfly": 0.0, "test_allreduce_steps": 0.0,
            "test_reduce_scatter_ring": 0.0, "test_reduce_scatter_steps": 0.0,
            "test_bcast_us": 0.0}
    nb, wall = check_run(request, course, want)
    err = errors_of(nb, "test_bcast_us")  # right on 4 ranks, wrong on 5 (hidden)
    assert "bcast_us('binomial', 5, 8, 1.5, 5000.0)" in err and "round up" in err, err
    err = errors_of(nb, "test_bcast_steps")
    assert "took 3 steps; a binomial tree needs only 2" in err, err
    assert "step 3: 1->3 (40 B)" in err and "Only the root sends" in err, err
    err = errors_of(nb, "test_allreduce_butterfly")
    assert "rank 1 holds rank 1: missing rank 0, 2, 3" in err, err
    err = errors_of(nb, "test_reduce_scatter_ring")
    assert "rank 0 holds the sum of block 1, not of block 0" in err, err
    print(f"[wall] {LAB5} wrong submission autograded in {wall:.1f} s")


@needs5
@pytest.mark.submission(LAB5, "deadlock", lambda: {
    **solutions(LAB5), "bcast_binomial": BCAST_DEADLOCK, "allreduce_butterfly": ALLREDUCE_VIA_ROOT,
    "reduce_scatter_ring": RS_STRAIGHT_TO_OWNER})
@pytest.mark.graded_timing
def test_lab05_deadlock_loses_only_that_part(request, course):
    want = {"test_bcast_binomial": 0.0, "test_bcast_steps": 0.0,
            "test_allreduce_butterfly": 3.0, "test_allreduce_steps": 0.0,
            "test_reduce_scatter_ring": 2.0, "test_reduce_scatter_steps": 0.0,
            "test_bcast_us": 2.0}
    nb, wall = check_run(request, course, want)
    # the try-it cell above the test is not run while grading: it says so ...
    tried = next(c for c in nb.cells if c.cell_type == "code"
                 and c.source.strip() == "show_trace(bcast_on, bcast_binomial, 3, 1)")
    said = "".join(o.get("text", "") for o in tried.outputs if o.output_type == "stream")
    assert "not run while grading" in said, said
    assert "TimedOut" not in said, said
    # ... so the graded check is the one that meets the deadlock, and names the stuck line
    err = errors_of(nb, "test_bcast_binomial")
    assert "TimedOut" in err and "did not finish within 10 s" in err, err
    assert "Skipped" not in err, err
    count = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id")
                 == "bcast_binomial").execution_count
    assert f"rank 0 was at line 5 of cell In [{count}] (in bcast_binomial): comm.Recv(" in err, err
    assert "waiting to receive a message nobody sends" in err, err
    # the next check of the same function skips it at once instead of waiting again
    assert "Skipped" in errors_of(nb, "test_bcast_steps")
    err = errors_of(nb, "test_allreduce_steps")
    assert "took 4 steps; the butterfly needs only 2" in err, err
    err = errors_of(nb, "test_reduce_scatter_steps")  # right result, not a ring
    assert "sends only to its right neighbour" in err, err
    print(f"[wall] {LAB5} deadlocking submission autograded in {wall:.1f} s")


@needs5
@pytest.mark.submission(LAB5, "hostile", {"bcast_binomial": BCAST_HOSTILE,
                                          "allreduce_butterfly": ALLREDUCE_HOSTILE,
                                          "reduce_scatter_ring": RS_HOSTILE})
def test_lab05_hostile_gets_no_marks_for_wrong_answers(request, course):
    nb, wall = check_run(request, course, {k: 0.0 for k in full(LAB5)})
    # the patches stay in the student's kernel; the checks run in the grader's
    assert "bcast_binomial is right" not in printed_by(nb, "test_bcast_binomial")
    assert "allreduce_butterfly is right" not in printed_by(nb, "test_allreduce_butterfly")
    assert "reduce_scatter_ring is right" not in printed_by(nb, "test_reduce_scatter_ring")
    for gid in set(full(LAB5)) - {"test_bcast_us"}:
        assert "CheckFailed" in errors_of(nb, gid), (gid, errors_of(nb, gid))
    assert "NotImplementedError" in errors_of(nb, "test_bcast_us")  # left as released
    print(f"[wall] {LAB5} hostile submission autograded in {wall:.1f} s")


# -- lab 06 ------------------------------------------------------------------------------

RING_OFF_BY_ONE = '''
def allgather_ring(comm, sendbuf, recvbuf):
    """One step short: the last block never arrives."""
    r, p = comm.Get_rank(), comm.Get_size()
    n = len(sendbuf)
    recvbuf[r * n:(r + 1) * n] = sendbuf
    for k in range(p - 2):
        out, into = (r - k) % p, (r - k - 1) % p
        comm.Sendrecv(recvbuf[out * n:(out + 1) * n], dest=(r + 1) % p,
                      recvbuf=recvbuf[into * n:(into + 1) * n], source=(r - 1) % p)
'''

RD_ANY_P = '''
def allgather_recursive_doubling(comm, sendbuf, recvbuf):
    """Right for powers of two, but does not refuse 3 ranks."""
    r, p = comm.Get_rank(), comm.Get_size()
    n = len(sendbuf)
    recvbuf[r * n:(r + 1) * n] = sendbuf
    d = 1
    while d < p:
        partner = r ^ d
        if partner < p:
            mine, theirs = (r // d) * d, (partner // d) * d
            comm.Sendrecv(recvbuf[mine * n:(mine + d) * n], dest=partner,
                          recvbuf=recvbuf[theirs * n:(theirs + d) * n], source=partner)
        d *= 2
'''

RING_SEND_FIRST = '''
def allgather_ring(comm, sendbuf, recvbuf):
    """Every rank sends, then receives: deadlocks past the eager limit."""
    r, p = comm.Get_rank(), comm.Get_size()
    n = len(sendbuf)
    recvbuf[r * n:(r + 1) * n] = sendbuf
    for k in range(p - 1):
        out, into = (r - k) % p, (r - k - 1) % p
        comm.Send(recvbuf[out * n:(out + 1) * n], dest=(r + 1) % p)
        comm.Recv(recvbuf[into * n:(into + 1) * n], source=(r - 1) % p)
'''


def pyx_loop(body: str) -> str:
    """The solution's ALLGATHER_PYX cell with its ring loop replaced by `body`."""
    src = solutions(LAB6)["allgather_pyx"]
    head, rest = src.split("    for i in range(n):", 1)
    return head + body + '"""\n'


PYX_SEND_FIRST = pyx_loop('''    for i in range(n):
        rb[r * n + i] = sendbuf[i]
    with nogil:
        for k in range(p - 1):
            out = (r - k + p) % p
            into = (r - k - 1 + p) % p
            MPI_Send(&rb[out * n], <int>n, MPI_DOUBLE, right, 0, c)
            MPI_Recv(&rb[into * n], <int>n, MPI_DOUBLE, left, 0, c, MPI_STATUS_IGNORE)
''')

PYX_NOTHING = pyx_loop('''    # MPI_Sendrecv( -- named in a comment only, which does not count
    pass
''')

LIAR_RING = HOSTILE_PATCH + '''

def allgather_ring(comm, sendbuf, recvbuf):
    """Only the own block; returns a liar."""
    r, n = comm.Get_rank(), len(sendbuf)
    recvbuf[r * n:(r + 1) * n] = sendbuf
    return _Liar()
'''

CHOOSE_HOSTILE = HOSTILE_PATCH + '''
import mpilab.grading.simulated as _s  # noqa: E402

_s.check_choose_allgather = _always_pass
_a.check_choose_allgather = _always_pass  # as the notebook sees it
_s.TOLERANCE = float("inf")


def choose_allgather(p, block_bytes, placement):
    """The ring everywhere (25 times slower than Bruck at cyclic placement): the patch must
    do the rest."""
    return "ring"
'''

needs6 = pytest.mark.skipif(LAB6 not in LABS, reason="lab 06 not written yet")


@pytest.mark.graded_timing
@needs6
@pytest.mark.submission(LAB6, "correct", lambda: solutions(LAB6))
def test_lab06_correct_gets_full_marks(request, course):
    nb, wall = check_run(request, course, full(LAB6))
    said = printed_by(nb, "test_allgather_us")
    assert "allgather_us is right, and holds on this machine" in said, said
    print(said)
    print(f"[wall] {LAB6} correct submission autograded in {wall:.1f} s")


ALLGATHER_US_P_STEPS = '''
def allgather_us(alg, p, block_bytes, alpha_us, beta_MBps):
    if alg == "ring":
        return p * (alpha_us + block_bytes / beta_MBps)
    return int(np.ceil(np.log2(p))) * alpha_us + (p - 1) * block_bytes / beta_MBps
'''

ALLGATHER_US_HOSTILE = HOSTILE_PATCH + '''
import mpilab.grading.measured as _me  # noqa: E402

_a.check_allgather_us = _always_pass
_a.PREDICTION_TOLERANCE = (0.0, float("inf"))
_me.expect_prediction = lambda *args, **kwargs: 1.0
_me.expect_model = _always_pass


class _Close(float):
    """A number that says it is as close as can be to anything."""

    def __eq__(self, other):
        return True

    def __sub__(self, other):
        return 0.0

    __rsub__ = __sub__

    def __truediv__(self, other):
        return 1.0

    __rtruediv__ = __truediv__


def allgather_us(alg, p, block_bytes, alpha_us, beta_MBps):
    """A second whatever is asked, dressed as a number close to everything."""
    return _Close(1e6)
'''


@needs6
@pytest.mark.submission(LAB6, "wrong", lambda: {**solutions(LAB6), "allgather_ring": RING_OFF_BY_ONE,
                                               "allgather_recursive_doubling": RD_ANY_P,
                                               "allgather_us": ALLGATHER_US_P_STEPS})
def test_lab06_wrong_gets_partial_marks(request, course):
    want = {**full(LAB6), "test_allgather_ring": 0.0, "test_ring_steps": 0.0,
            "test_rd_not_power_of_two": 0.0, "test_allgather_us": 0.0}
    nb, wall = check_run(request, course, want)
    err = errors_of(nb, "test_allgather_us")
    assert "allgather_us('ring', 4, 1000, 2.0, 1000.0)" in err and "own block" in err, err
    err = errors_of(nb, "test_allgather_ring")
    assert "block 1 was never written, expected rank 1's" in err, err
    assert "step 2: 0->1" in err, err
    err = errors_of(nb, "test_rd_not_power_of_two")
    assert "should raise ValueError on every rank" in err and "rank 2: no error" in err, err
    print(f"[wall] {LAB6} wrong submission autograded in {wall:.1f} s")


@needs6
# a Python ring and a compiled one that send first: both hang past the eager limit
@pytest.mark.submission(LAB6, "deadlock", lambda: {
    **solutions(LAB6), "allgather_ring": RING_SEND_FIRST, "allgather_pyx": PYX_SEND_FIRST})
@pytest.mark.graded_timing
def test_lab06_deadlocks_lose_only_their_parts(request, course):
    want = {**full(LAB6), "test_allgather_ring": 0.0, "test_ring_steps": 0.0,
            "test_allgather_cython": 0.0}
    nb, wall = check_run(request, course, want)
    for gid in ("test_allgather_ring", "test_allgather_cython"):
        err = errors_of(nb, gid)
        assert "did not finish within 10 s" in err, (gid, err)
    assert "Every stuck rank is in a send" in errors_of(nb, "test_allgather_ring")
    assert "stuck inside it" in errors_of(nb, "test_allgather_cython")
    assert "Skipped" in errors_of(nb, "test_ring_steps")
    print(f"[wall] {LAB6} deadlocking submission autograded in {wall:.1f} s")


@needs6
@pytest.mark.submission(LAB6, "hostile", lambda: {
    "allgather_ring": LIAR_RING,
    "allgather_bruck": LIAR_RING.replace("def allgather_ring", "def allgather_bruck"),
    "allgather_recursive_doubling": LIAR_RING.replace(
        "def allgather_ring", "def allgather_recursive_doubling"),
    "allgather_pyx": HOSTILE_PATCH + PYX_NOTHING,
    "choose_allgather": CHOOSE_HOSTILE,
    "allgather_us": ALLGATHER_US_HOSTILE,
})
def test_lab06_hostile_gets_no_marks_for_wrong_answers(request, course):
    nb, wall = check_run(request, course, {k: 0.0 for k in full(LAB6)})
    for gid, name in [("test_allgather_ring", "allgather_ring"),
                      ("test_allgather_bruck", "allgather_bruck"),
                      ("test_allgather_rd", "allgather_recursive_doubling"),
                      ("test_allgather_cython", "allgather_cy.allgather_ring")]:
        assert f"{name} is right" not in printed_by(nb, gid), gid  # the patch fools nothing
    assert "choose_allgather is within" not in printed_by(nb, "test_choose_allgather")
    assert "allgather_us is right" not in printed_by(nb, "test_allgather_us")
    for gid in set(full(LAB6)) - {"test_allgather_us"}:
        assert "CheckFailed" in errors_of(nb, gid), (gid, errors_of(nb, gid))
    # the patched checks are the grader's own again, and they refuse the made-up number
    assert "BadResult" in errors_of(nb, "test_allgather_us") and "_Close" in errors_of(
        nb, "test_allgather_us")
    print(f"[wall] {LAB6} hostile submission autograded in {wall:.1f} s")


# Labs 05 and 06's cheats (tests/hostile_snippets.py): the library's collective on the
# communicator under the tracer (with a binomial tree's messages forged into the tracer's
# log; with no message at all), the course's own compiled ring, the course's cost models
# as the predictions; lab 06's other parts honest.
@needs5
@pytest.mark.submission(LAB5, "cheater", {"bcast_binomial": LAB05_BCAST_LIBRARY_FORGED_TRACE,
                                          "allreduce_butterfly": LAB05_ALLREDUCE_LIBRARY,
                                          "bcast_us": LAB05_BCAST_US_LOOKUP})
def test_lab05_cheats_lose_the_parts_they_cheat(request, course):
    nb, _ = check_run(request, course, {k: 0.0 for k in full(LAB5)})
    said = errors_of(nb, "test_bcast_binomial")
    assert "mpilab.tracing.recording._send" in said and "Refused" in said, said
    said = errors_of(nb, "test_allreduce_butterfly")
    assert "received no message through the communicator" in said, said
    said = errors_of(nb, "test_bcast_us")
    assert "collectives.algorithms.time_us" in said and "Refused" in said, said


@needs6
@pytest.mark.submission(LAB6, "cheater", lambda: {
    **solutions(LAB6), "allgather_ring": LAB06_RING_IS_THE_COURSES_KERNEL,
    "allgather_us": LAB06_ALLGATHER_US_LOOKUP})
def test_lab06_cheats_lose_the_parts_they_cheat(request, course):
    nb, _ = check_run(request, course, {**full(LAB6), "test_allgather_ring": 0.0,
                                        "test_ring_steps": 0.0, "test_allgather_us": 0.0})
    said = errors_of(nb, "test_allgather_ring")
    assert "mpilab.kernels.collectives.run" in said and "Refused" in said, said
    said = errors_of(nb, "test_allgather_us")
    assert "collectives.algorithms.predict" in said and "Refused" in said, said
