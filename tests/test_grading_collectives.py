"""mpilab.grading_collectives, Labs 05 and 06's checks: messages on hand-made outputs, reloads.

The pure-Python parts (step checks on schedules built from hand-written events, which
ranks a wrong sum is made of, whose block a wrong block holds, refusals, the Cython
source check) are tested without MPI; each message must name the rank, the block or the
step that is off. A few tests run the checks on the shared 4-engine cluster (``lab`` in
conftest.py): the harnesses are imported from disk there. The labs' notebooks under
nbgrader are tests/test_lab05_06.py.
"""

from __future__ import annotations

import importlib
import sys

import cloudpickle
import numpy as np
import pytest

import mpilab.grading_collectives as gc
from mpilab import grading, tracing
from mpilab.grading import CheckFailed

# The engines cannot import this test module: send its functions by value, as they would
# be from a notebook.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def message(check, *args, **kwargs) -> str:
    with pytest.raises(CheckFailed) as info:
        check(*args, **kwargs)
    return str(info.value)


def info_of(events, untraced=()) -> dict:
    """What a harness returns on rank 0 for these per-rank events."""
    return {"schedule": tracing.schedule(events), "error": None, "untraced": list(untraced)}


def rounds(p, *rnds, nbytes=40):
    """Per-rank events of messages sent in rounds, each a list of (src, dst): in a round
    every rank posts its sends first, then its receives (as Sendrecv records them)."""
    ev = [[] for _ in range(p)]
    for rnd in rnds:
        for r in range(p):
            ev[r] += [("send", dst, nbytes) for src, dst in rnd if src == r]
            ev[r] += [("recv", src, nbytes) for src, dst in rnd if dst == r]
    return ev


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


# --------------------------------------------------------------------------------------
# allgather: wrong blocks, ring and log schedules


def allgather_outs(recvs, n):
    p = len(recvs)
    ref = (np.arange(p)[:, None] * gc.OWNER + np.arange(n)).ravel().astype(float)
    return [{"recv": np.asarray(r, dtype=float), "ref": ref} for r in recvs]


def blocks(*owners, n=3):
    """A recvbuf made of these ranks' blocks (None: never written)."""
    return np.concatenate([np.full(n, -1.0) if o is None else o * gc.OWNER + np.arange(n)
                           for o in owners])


def test_block_problems_name_rank_block_and_owner():
    outs = allgather_outs([blocks(0, 1, 2), blocks(0, 1, None), blocks(1, 1, 2)], 3)
    assert gc.block_problems(outs, 3) == [
        "rank 1: block 2 was never written, expected rank 2's",
        "rank 2: block 0 holds rank 1's block, expected rank 0's",
    ]
    shifted = blocks(0, 1, 2)
    shifted[3:] = np.roll(shifted[3:], 1)
    outs = allgather_outs([blocks(0, 1, 2), shifted, blocks(0, 1, 2)], 3)
    assert gc.block_problems(outs, 3) == [
        "rank 1: block 1 holds a mix of blocks, or a shifted one, expected rank 1's",
        "rank 1: block 2 holds a mix of blocks, or a shifted one, expected rank 2's"]
    assert gc.block_problems(allgather_outs([[], []], 0), 0) == []  # empty blocks


def ring(p, k=None, to=1):
    return [[(r, (r + to) % p) for r in range(p)] for _ in range(p - 1 if k is None else k)]


def test_a_ring_passes_and_a_wrong_neighbour_is_named_with_its_step():
    assert gc.check_ring_schedule(info_of(rounds(4, *ring(4), nbytes=24)), 4, 3) == 3
    left = rounds(3, *ring(3, to=-1), nbytes=24)
    text = message(gc.check_ring_schedule, info_of(left), 3, 3)
    assert text.startswith("allgather_ring on 3 ranks: rank 0 sent to rank 2 in step 1; rank 1 "
                           "sent to rank 0 in step 1; rank 2 sent to rank 1 in step 1. In the "
                           "ring every rank sends only to its right neighbour, (rank + 1) % 3.")


def test_a_short_ring_and_a_fat_message_are_named():
    short = rounds(4, *ring(4, k=2), nbytes=24)
    assert message(gc.check_ring_schedule, info_of(short), 4, 3).startswith(
        "allgather_ring on 4 ranks took 2 steps; the ring takes p - 1 = 3")
    fat = rounds(2, [(0, 1), (1, 0)], nbytes=48)
    assert ("rank 0 sent 48 B in step 1; each message of the ring carries one block (24 B "
            "here)") in message(gc.check_ring_schedule, info_of(fat), 2, 3)


def test_log_schedules_count_steps_and_bytes():
    bruck3 = rounds(3, *ring(3, k=1, to=-1), nbytes=24)  # one step, then stops
    ev = rounds(3, *ring(3, k=1, to=-1), *ring(3, k=1, to=-2), nbytes=24)
    assert gc.check_log_schedule(info_of(ev), 3, 3, name="allgather_bruck") == 2
    text = message(gc.check_log_schedule, info_of(bruck3), 3, 3, name="allgather_bruck")
    assert text.startswith("allgather_bruck on 3 ranks moved 72 B in all; each of the 3 blocks "
                           "must reach each of the other 2 ranks once: 144 B here")
    text = message(gc.check_log_schedule, info_of(rounds(4, *ring(4), nbytes=24)), 4, 3,
                   name="allgather_recursive_doubling")
    assert text.startswith("allgather_recursive_doubling on 4 ranks took 3 steps; it should "
                           "take 2 (ceil(log2 4))")


# --------------------------------------------------------------------------------------
# refusals and the Cython source


def test_refusals_name_the_ranks_that_did_not_raise_or_sent_first():
    ok = [("ValueError: needs a power of two", 0)] * 3
    assert gc.check_refusals(ok, "rd on 3 ranks", "3 is not a power of two") == ok[0][0]
    text = message(gc.check_refusals, [ok[0], ok[0], ("no error", 2)], "rd on 3 ranks",
                   "3 is not a power of two")
    assert text == ("rd on 3 ranks should raise ValueError on every rank (3 is not a power of "
                    "two), but:\n  rank 2: no error")
    assert message(gc.check_refusals, [ok[0], ("ValueError: x", 1), ok[0]], "rd", "why") == (
        "rd: raise before any message: rank 1 sent or received 1 message")


def test_ring_source_must_call_c_functions_and_no_collective():
    gc.check_ring_source("MPI_Sendrecv(&rb[0], n, MPI_DOUBLE, 1, 0, &rb[n], n, ...)")
    assert "should call the C functions" in message(
        gc.check_ring_source, "# MPI_Sendrecv( in a comment only\ncomm.Sendrecv(a, 1)")
    assert message(gc.check_ring_source, "MPI_Sendrecv(a)\nMPI_Allgather(a)") == (
        "write the ring yourself: no library collective")


def test_cases_are_checked_before_anything_runs():
    assert gc._cases([(4, 10, 1)], "p n root dtype", ("float64",)) == [(4, 10, 1, "float64")]
    assert gc._cases([2, 3], "p") == [(2,), (3,)]
    with pytest.raises(ValueError, match="root 4 is not a rank of 4"):
        gc._cases([(4, 10, 4)], "p n root dtype", ("float64",))
    with pytest.raises(ValueError, match="a case is"):
        gc._cases([(4,)], "p n dtype", ("float64",))


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
    gc.check_ring_source = lambda *a, **k: None
    gc.block_problems = lambda *a, **k: []
    fresh = importlib.reload(gc)
    assert fresh is gc
    assert "should call the C functions" in message(gc.check_ring_source, "pass")
    assert gc.block_problems(allgather_outs([blocks(0, None), blocks(0, 1)], 3), 3)


def test_a_skipped_check_points_at_the_cell_that_timed_out():
    def stuck():
        raise grading.Skipped("bcast_binomial timed out in an earlier check ...")

    with pytest.raises(grading.Skipped) as info:
        with gc._explained("bcast_binomial"):
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


def ring_one_short(comm, sendbuf, recvbuf):
    r, p = comm.Get_rank(), comm.Get_size()
    n = len(sendbuf)
    recvbuf[r * n:(r + 1) * n] = sendbuf
    for k in range(p - 2):
        out, into = (r - k) % p, (r - k - 1) % p
        comm.Sendrecv(recvbuf[out * n:(out + 1) * n], dest=(r + 1) % p,
                      recvbuf=recvbuf[into * n:(into + 1) * n], source=(r - 1) % p)


def test_a_right_bcast_passes_on_the_engines(lab):
    gc.check_bcast(bcast_right, [(4, 10, 1), (3, 7, 2, "int32")])
    assert gc.check_bcast_steps(bcast_right, [(4, 1), (3, 0)]) == [2, 2]


def test_a_short_ring_fails_on_the_engines_naming_rank_and_block(lab):
    text = message(gc.check_allgather, ring_one_short, [(3, 4)])
    assert text.startswith("ring_one_short on 3 ranks, 4 float64 per rank: 3 of 3 ranks are "
                           "wrong"), text
    assert "rank 0: block 1 was never written, expected rank 1's" in text, text
    assert "step 1: 0->1 (32 B)" in text, text
