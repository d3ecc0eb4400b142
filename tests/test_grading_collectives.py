"""mpilab.grading.collectives, Lab 05's checks: messages on hand-made outputs, reloads.

The pure-Python parts (step checks on schedules built from hand-written events, which
ranks a wrong sum is made of, the cases, the note of a skipped check) are tested without
MPI; each message must name the rank or the step that is off. A few tests run the checks
on the shared 4-engine cluster (``lab`` in conftest.py): the harnesses are imported from
disk there. Lab 06's checks are tests/test_grading_allgather.py; the labs' notebooks
under nbgrader are tests/test_lab05_06.py.
"""

from __future__ import annotations

import importlib
import sys

import cloudpickle
import numpy as np
import pytest
from hand_made_schedules import info_of, message, rounds

import mpilab.grading.collectives as gc
from mpilab import grading

# The engines cannot import this test module: send its functions by value, as they would
# be from a notebook.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


# --------------------------------------------------------------------------------------
# step counts


def test_log_and_butterfly_steps():
    assert [gc.log_steps(p) for p in (1, 2, 3, 4, 5, 8, 9)] == [0, 1, 2, 2, 3, 3, 4]
    assert gc.butterfly_steps(4) == (2, "log2 4")
    steps, why = gc.butterfly_steps(6)
    assert steps == 4 and why.startswith("log2 4 for the butterfly on 4 ranks, 1 to fold the "
                                         "other 2 in")
    assert gc.butterfly_steps(3)[0] == 3


# --------------------------------------------------------------------------------------
# broadcast schedules


def test_a_binomial_tree_passes_and_counts_its_steps():
    tree = rounds(4, [(1, 2)], [(1, 3), (2, 0)])  # root 1: vr 0 -> 1, then 0 -> 2, 1 -> 3
    assert gc.check_bcast_schedule(info_of(tree), 4, 1) == 2


def test_a_linear_broadcast_is_told_it_is_linear_with_the_steps():
    text = message(gc.check_bcast_schedule, info_of(rounds(4, [(1, 0)], [(1, 2)], [(1, 3)])), 4, 1)
    assert text.startswith("bcast_binomial on 4 ranks, root 1 took 3 steps; a binomial tree "
                           "needs only 2 (ceil(log2 4)).")
    assert "step 3: 1->3 (40 B)" in text and "Only the root sends" in text


def test_a_rank_reached_twice_or_the_root_reached_is_named():
    twice = rounds(3, [(0, 1)], [(0, 2), (1, 2)])
    text = message(gc.check_bcast_schedule, info_of(twice), 3, 0)
    assert "root 0: rank 2, received the data 2 times. In a tree every rank" in text
    back = rounds(3, [(0, 1)], [(0, 2), (1, 0)])
    assert "the root, rank 0, received the data 1 time" in message(
        gc.check_bcast_schedule, info_of(back), 3, 0)


def test_a_rank_no_message_reached_is_named():
    text = message(gc.check_bcast_schedule, info_of(rounds(4, [(0, 1)], [(0, 2)])), 4, 0)
    assert text.startswith("bcast_binomial on 4 ranks, root 0: no message reached rank 3 "
                           "through comm")


def test_library_collectives_and_unpaired_messages_are_refused():
    info = info_of(rounds(2, [(0, 1)]), untraced=[(0, "Bcast"), (1, "Bcast"), (1, "Barrier")])
    assert message(gc.check_bcast_schedule, info, 2, 0, name="my_bcast") == (
        "my_bcast on 2 ranks, root 0 called comm.Barrier, comm.Bcast: build the tree from "
        "Send and Recv (the tracer cannot see the messages of a library collective)")
    broken = {"schedule": None, "error": "rank 1 waits for a message from rank 0",
              "untraced": []}
    assert "the messages do not pair up: rank 1 waits" in message(
        gc.check_allreduce_schedule, broken, 2)


def test_messages_hint_names_the_ranks_nothing_reached():
    info = info_of(rounds(4, [(0, 1)]))
    assert gc.messages_hint(info, 4, 0) == ("Messages, step by step (from the tracer):\n"
                                            "  step 1: 0->1 (40 B)\nNo message reached "
                                            "ranks 2, 3.")
    assert gc.messages_hint(info, 4).endswith("(40 B)")
    assert gc.messages_hint({"error": "x", "schedule": None}, 4).endswith("messages: x")


# --------------------------------------------------------------------------------------
# allreduce: schedules and wrong sums


def butterfly(p):
    return [[(r, r ^ mask) for r in range(p)] for mask in (1, 2, 4, 8) if mask < p]


def test_a_butterfly_passes_and_a_reduce_then_broadcast_is_too_slow():
    assert gc.check_allreduce_schedule(info_of(rounds(4, *butterfly(4))), 4) == 2
    via_root = rounds(4, [(1, 0), (2, 0), (3, 0)], [(0, 1), (0, 2), (0, 3)])
    text = message(gc.check_allreduce_schedule, info_of(via_root), 4)
    assert text.startswith("allreduce_butterfly on 4 ranks took 4 steps; the butterfly needs "
                           "only 2 (log2 4).")
    assert "Reducing to one rank and broadcasting back" in text
    folded = rounds(3, [(2, 0)], [(0, 1), (1, 0)], [(0, 2)])  # fold in, butterfly, hand back
    assert gc.check_allreduce_schedule(info_of(folded), 3) == 3


def allreduce_outs(recvs, n=6):
    sends_ = [np.arange(n, dtype=float) * (r + 2) + r for r in range(len(recvs))]
    ref = sum(sends_)
    return [{"send": s, "recv": np.asarray(got, dtype=float), "ref": ref}
            for s, got in zip(sends_, recvs, strict=True)]


def test_sum_problems_say_which_ranks_are_missing_or_counted_twice():
    n = 6
    s = [np.arange(n, dtype=float) * (r + 2) + r for r in range(4)]
    outs = allreduce_outs([sum(s), s[1], s[0] + 2 * s[1] + s[2] + s[3], s[0] + s[1]], n)
    assert gc.sum_problems(outs) == [
        "rank 1 holds rank 1: missing rank 0, 2, 3",
        "rank 2 holds rank 0 + 2 × rank 1 + rank 2 + rank 3: counted twice: rank 1",
        "rank 3 holds rank 0 + rank 1: missing rank 2, 3",
    ]
    outs = allreduce_outs([sum(s), np.full(n, 7.5), sum(s), sum(s)], n)
    assert gc.sum_problems(outs) == []  # no combination of the data: nothing to say


def test_cases_are_checked_before_anything_runs():
    assert gc.parse_cases([(4, 10, 1)], "p n root dtype", ("float64",)) == [(4, 10, 1, "float64")]
    assert gc.parse_cases([2, 3], "p") == [(2,), (3,)]
    with pytest.raises(ValueError, match="root 4 is not a rank of 4"):
        gc.parse_cases([(4, 10, 4)], "p n root dtype", ("float64",))
    with pytest.raises(ValueError, match="a case is"):
        gc.parse_cases([(4,)], "p n dtype", ("float64",))


def test_a_graded_functions_check_runs_every_case_with_its_defaults_and_label():
    """traced.check_cases: the shape of check_bcast, check_allreduce, check_allgather and
    check_reduce_scatter (the runner itself runs on ranks in the tests below)."""
    from mpilab.grading.traced import check_cases

    def bcast_mine(comm, buf, root):
        pass

    ran = []
    check_cases(lambda f, *case: ran.append((f, *case)), bcast_mine,
                [(4, 10, 1), (3, 7, 2, "int32")], "p n root dtype", ("float64",), name=None,
                timeout=7)
    assert ran == [(bcast_mine, 4, 10, 1, "float64", "bcast_mine", 7),
                   (bcast_mine, 3, 7, 2, "int32", "bcast_mine", 7)]
    with pytest.raises(ValueError, match="root 4 is not a rank of 4"):
        check_cases(lambda *a: ran.append(a), bcast_mine, [(4, 10, 4)], "p n root dtype",
                    ("float64",), name="b", timeout=1)
    assert len(ran) == 2  # cases are checked before any runs


# --------------------------------------------------------------------------------------
# tampering: the module calls mpilab.grading at call time, and a reload undoes patches


def test_checks_use_mpilab_grading_and_tracing_as_they_are_at_call_time():
    linear = info_of(rounds(4, [(1, 0)], [(1, 2)], [(1, 3)]))
    grading.expect = lambda *a, **k: None  # what a hostile submission does
    try:
        gc.check_bcast_schedule(linear, 4, 1)  # fooled: it calls grading.expect
    finally:
        importlib.reload(grading)
    assert "took 3 steps" in message(gc.check_bcast_schedule, linear, 4, 1)
    assert gc.grading is sys.modules["mpilab.grading"]
    assert gc.tracing is sys.modules["mpilab.tracing"]


def test_reload_restores_patched_checks():
    linear = info_of(rounds(4, [(1, 0)], [(1, 2)], [(1, 3)]))
    gc.check_bcast_schedule = lambda *a, **k: 2
    fresh = importlib.reload(gc)
    assert fresh is gc
    assert "took 3 steps" in message(gc.check_bcast_schedule, linear, 4, 1)


def test_a_skipped_check_points_at_the_cell_that_timed_out():
    def stuck():
        raise grading.Skipped("bcast_binomial timed out in an earlier check ...")

    with pytest.raises(grading.Skipped) as info:
        with gc.explained("bcast_binomial"):
            stuck()
    assert str(info.value).endswith(
        "(That earlier run may have been a try-it cell above, not a check: the first cell "
        "where bcast_binomial timed out shows the line each rank was stuck on.)")


# --------------------------------------------------------------------------------------
# the checks on the engines (harnesses imported from disk there)


def bcast_right(comm, buf, root):
    rank, size = comm.Get_rank(), comm.Get_size()
    vr, mask = (rank - root) % size, 1
    while mask < size:
        if vr < mask and vr + mask < size:
            comm.Send(buf, dest=(vr + mask + root) % size)
        elif mask <= vr < 2 * mask:
            comm.Recv(buf, source=(vr - mask + root) % size)
        mask <<= 1


def test_a_right_bcast_passes_on_the_engines(lab):
    gc.check_bcast(bcast_right, [(4, 10, 1), (3, 7, 2, "int32")])
    assert gc.check_bcast_steps(bcast_right, [(4, 1), (3, 0)]) == [2, 2]




def test_a_right_result_without_the_students_messages_is_refused():
    """The library's collective on the communicator under the tracer leaves a right result
    and no traced message: refused, naming the ranks; through the tracer, named by its
    call; a rank that received a message passes."""
    from mpilab.grading.traced import expect_own_messages

    quiet = [{"schedule": [], "error": None, "untraced": []}] * 2
    with pytest.raises(grading.CheckFailed, match="rank 1 ended with the right data but "
                       "received no message"):
        expect_own_messages(quiet, "bcast on 2 ranks", [1], "comm.Bcast")
    called = [{"schedule": [], "error": None, "untraced": [(0, "Bcast"), (1, "Bcast")]}] * 2
    with pytest.raises(grading.CheckFailed, match="called comm.Bcast: the library's"):
        expect_own_messages(called, "bcast on 2 ranks", [1], "comm.Bcast")
    unpaired = [{"schedule": None, "error": "rank 0 sent 8 B to 1, never received",
                 "untraced": []}] * 2
    with pytest.raises(grading.CheckFailed, match="do not pair up: rank 0 sent"):
        expect_own_messages(unpaired, "bcast on 2 ranks", [1], "comm.Bcast")
    sent = [{"schedule": [{"step": 1, "src": 0, "dst": 1, "bytes": 8}], "error": None,
             "untraced": []}] * 2
    expect_own_messages(sent, "bcast on 2 ranks", [1], "comm.Bcast")
