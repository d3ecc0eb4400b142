"""mpilab.grading.allgather, Lab 06's checks: messages on hand-made outputs, reloads.

The pure-Python parts (whose block a wrong block holds, the ring's and the logarithmic
algorithms' step counts on schedules built from hand-written events, refusals, the
Cython source check) are tested without MPI; each message must name the rank, the block
or the step that is off. One test runs a check on the shared 4-engine cluster (``lab`` in
conftest.py): the harnesses are imported from disk there. The lab's notebook under
nbgrader is tests/test_lab05_06.py.
"""

from __future__ import annotations

import importlib
import sys

import cloudpickle
import numpy as np
from hand_made_schedules import info_of, message, rounds

import mpilab.grading.allgather as ga

# The engines cannot import this test module: send its functions by value, as they would
# be from a notebook.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


# --------------------------------------------------------------------------------------
# wrong blocks, ring and log schedules


def allgather_outs(recvs, n):
    p = len(recvs)
    ref = (np.arange(p)[:, None] * ga.OWNER + np.arange(n)).ravel().astype(float)
    return [{"recv": np.asarray(r, dtype=float), "ref": ref} for r in recvs]


def blocks(*owners, n=3):
    """A recvbuf made of these ranks' blocks (None: never written)."""
    return np.concatenate([np.full(n, -1.0) if o is None else o * ga.OWNER + np.arange(n)
                           for o in owners])


def test_block_problems_name_rank_block_and_owner():
    outs = allgather_outs([blocks(0, 1, 2), blocks(0, 1, None), blocks(1, 1, 2)], 3)
    assert ga.block_problems(outs, 3) == [
        "rank 1: block 2 was never written, expected rank 2's",
        "rank 2: block 0 holds rank 1's block, expected rank 0's",
    ]
    shifted = blocks(0, 1, 2)
    shifted[3:] = np.roll(shifted[3:], 1)
    outs = allgather_outs([blocks(0, 1, 2), shifted, blocks(0, 1, 2)], 3)
    assert ga.block_problems(outs, 3) == [
        "rank 1: block 1 holds a mix of blocks, or a shifted one, expected rank 1's",
        "rank 1: block 2 holds a mix of blocks, or a shifted one, expected rank 2's"]
    assert ga.block_problems(allgather_outs([[], []], 0), 0) == []  # empty blocks


def ring(p, k=None, to=1):
    return [[(r, (r + to) % p) for r in range(p)] for _ in range(p - 1 if k is None else k)]


def test_a_ring_passes_and_a_wrong_neighbour_is_named_with_its_step():
    assert ga.check_ring_schedule(info_of(rounds(4, *ring(4), nbytes=24)), 4, 3) == 3
    left = rounds(3, *ring(3, to=-1), nbytes=24)
    text = message(ga.check_ring_schedule, info_of(left), 3, 3)
    assert text.startswith("allgather_ring on 3 ranks: rank 0 sent to rank 2 in step 1; rank 1 "
                           "sent to rank 0 in step 1; rank 2 sent to rank 1 in step 1. In the "
                           "ring every rank sends only to its right neighbour, (rank + 1) % 3.")


def test_a_short_ring_and_a_fat_message_are_named():
    short = rounds(4, *ring(4, k=2), nbytes=24)
    assert message(ga.check_ring_schedule, info_of(short), 4, 3).startswith(
        "allgather_ring on 4 ranks took 2 steps; the ring takes p - 1 = 3")
    fat = rounds(2, [(0, 1), (1, 0)], nbytes=48)
    assert ("rank 0 sent 48 B in step 1; each message of the ring carries one block (24 B "
            "here)") in message(ga.check_ring_schedule, info_of(fat), 2, 3)


def test_log_schedules_count_steps_and_bytes():
    bruck3 = rounds(3, *ring(3, k=1, to=-1), nbytes=24)  # one step, then stops
    ev = rounds(3, *ring(3, k=1, to=-1), *ring(3, k=1, to=-2), nbytes=24)
    assert ga.check_log_schedule(info_of(ev), 3, 3, name="allgather_bruck") == 2
    text = message(ga.check_log_schedule, info_of(bruck3), 3, 3, name="allgather_bruck")
    assert text.startswith("allgather_bruck on 3 ranks moved 72 B in all; each of the 3 blocks "
                           "must reach each of the other 2 ranks once: 144 B here")
    text = message(ga.check_log_schedule, info_of(rounds(4, *ring(4), nbytes=24)), 4, 3,
                   name="allgather_recursive_doubling")
    assert text.startswith("allgather_recursive_doubling on 4 ranks took 3 steps; it should "
                           "take 2 (ceil(log2 4))")


def test_refusals_name_the_ranks_that_did_not_raise_or_sent_first():
    ok = [("ValueError: needs a power of two", 0)] * 3
    assert ga.check_refusals(ok, "rd on 3 ranks", "3 is not a power of two") == ok[0][0]
    text = message(ga.check_refusals, [ok[0], ok[0], ("no error", 2)], "rd on 3 ranks",
                   "3 is not a power of two")
    assert text == ("rd on 3 ranks should raise ValueError on every rank (3 is not a power of "
                    "two), but:\n  rank 2: no error")
    assert message(ga.check_refusals, [ok[0], ("ValueError: x", 1), ok[0]], "rd", "why") == (
        "rd: raise before any message: rank 1 sent or received 1 message")


def test_ring_source_must_call_c_functions_and_no_collective():
    ga.check_ring_source("MPI_Sendrecv(&rb[0], n, MPI_DOUBLE, 1, 0, &rb[n], n, ...)")
    assert "should call the C functions" in message(
        ga.check_ring_source, "# MPI_Sendrecv( in a comment only\ncomm.Sendrecv(a, 1)")
    assert message(ga.check_ring_source, "MPI_Sendrecv(a)\nMPI_Allgather(a)") == (
        "write the ring yourself: no library collective")


def test_reload_restores_patched_checks():
    ga.check_ring_source = lambda *a, **k: None
    ga.block_problems = lambda *a, **k: []
    fresh = importlib.reload(ga)
    assert fresh is ga
    assert "should call the C functions" in message(ga.check_ring_source, "pass")
    assert ga.block_problems(allgather_outs([blocks(0, None), blocks(0, 1)], 3), 3)


def ring_one_short(comm, sendbuf, recvbuf):
    r, p = comm.Get_rank(), comm.Get_size()
    n = len(sendbuf)
    recvbuf[r * n:(r + 1) * n] = sendbuf
    for k in range(p - 2):
        out, into = (r - k) % p, (r - k - 1) % p
        comm.Sendrecv(recvbuf[out * n:(out + 1) * n], dest=(r + 1) % p,
                      recvbuf=recvbuf[into * n:(into + 1) * n], source=(r - 1) % p)


def test_a_short_ring_fails_on_the_engines_naming_rank_and_block(lab):
    text = message(ga.check_allgather, ring_one_short, [(3, 4)])
    assert text.startswith("ring_one_short on 3 ranks, 4 float64 per rank: 3 of 3 ranks are "
                           "wrong"), text
    assert "rank 0: block 1 was never written, expected rank 1's" in text, text
    assert "step 1: 0->1 (32 B)" in text, text
