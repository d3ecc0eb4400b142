"""mpilab.grading.reduce_scatter, lab 05 Part C's checks: a ring reduce-scatter.

The words for a wrong result (:func:`block_problems`) are tested on hand-made outputs
without MPI; the checks themselves run on the shared 4-engine cluster (``lab`` in
conftest.py) against a right ring, a ring one block off, a reduce-scatter that sends
every block straight to its owner (right result, not a ring) and one that changes its
sendbuf. The notebook under nbgrader is tests/test_lab05_06.py.
"""

from __future__ import annotations

import sys

import cloudpickle
import numpy as np
import pytest

import mpilab.grading.reduce_scatter as grs
from mpilab import grading

# The engines cannot import this test module: send its functions by value, as a notebook's.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def outs_of(sends, recvs):
    """Harness outputs by rank from each rank's p blocks and what each rank holds."""
    p = len(sends)
    n = len(sends[0]) // p
    refs = [sum(s[r * n:(r + 1) * n] for s in sends) for r in range(p)]
    return [{"send": np.asarray(s, float), "recv": np.asarray(g, float),
             "ref": np.asarray(ref, float)} for s, g, ref in zip(sends, recvs, refs, strict=True)]


SENDS = [np.arange(6, dtype=float) * (r + 1) + 10 * r for r in range(3)]  # 3 ranks, n = 2


def test_block_problems_name_another_block_and_missing_ranks():
    right = [sum(s[r * 2:(r + 1) * 2] for s in SENDS) for r in range(3)]
    assert grs.block_problems(outs_of(SENDS, right)) == []
    shifted = [right[(r - 1) % 3] for r in range(3)]  # each rank holds its left's block
    said = grs.block_problems(outs_of(SENDS, shifted))
    assert said[0] == ("rank 0 holds the sum of block 2, not of block 0: the block that "
                       "arrives in the last step must be rank 0's own"), said
    partial = [SENDS[0][2:4] + SENDS[1][2:4] if r == 1 else right[r] for r in range(3)]
    assert grs.block_problems(outs_of(SENDS, partial)) == [
        "rank 1 holds rank 0 + rank 1 of block 1: missing rank 2"]
    twice = [right[r] + SENDS[2][r * 2:(r + 1) * 2] if r == 0 else right[r] for r in range(3)]
    assert grs.block_problems(outs_of(SENDS, twice)) == [
        "rank 0 holds rank 0 + rank 1 + 2 × rank 2 of block 0: counted twice: rank 2"]


def ring_right(comm, sendbuf, recvbuf):
    r, p = comm.Get_rank(), comm.Get_size()
    n = len(recvbuf)
    first = (r - 1) % p
    partial = sendbuf[first * n:(first + 1) * n].copy()
    got = np.empty_like(recvbuf)
    for k in range(p - 1):
        j = (r - k - 2) % p
        comm.Sendrecv(partial, dest=(r + 1) % p, recvbuf=got, source=(r - 1) % p)
        partial = got + sendbuf[j * n:(j + 1) * n]
    recvbuf[...] = partial


def ring_one_block_off(comm, sendbuf, recvbuf):
    """Starts with its own block r: ends with the total of block r + 1."""
    r, p = comm.Get_rank(), comm.Get_size()
    n = len(recvbuf)
    partial = sendbuf[r * n:(r + 1) * n].copy()
    got = np.empty_like(recvbuf)
    for k in range(p - 1):
        j = (r - k - 1) % p
        comm.Sendrecv(partial, dest=(r + 1) % p, recvbuf=got, source=(r - 1) % p)
        partial = got + sendbuf[j * n:(j + 1) * n]
    recvbuf[...] = partial


def straight_to_owner(comm, sendbuf, recvbuf):
    """Right result: block j goes straight to rank j (pairwise), not round a ring."""
    r, p = comm.Get_rank(), comm.Get_size()
    n = len(recvbuf)
    recvbuf[...] = sendbuf[r * n:(r + 1) * n]
    got = np.empty_like(recvbuf)
    for k in range(1, p):
        to, frm = (r + k) % p, (r - k) % p
        comm.Sendrecv(sendbuf[to * n:(to + 1) * n], dest=to, recvbuf=got, source=frm)
        recvbuf += got


def adds_in_place(comm, sendbuf, recvbuf):
    """Right result, but adds into sendbuf."""
    r, p = comm.Get_rank(), comm.Get_size()
    n = len(recvbuf)
    got = np.empty_like(recvbuf)
    for k in range(p - 1):
        s, j = (r - k - 1) % p, (r - k - 2) % p
        comm.Sendrecv(sendbuf[s * n:(s + 1) * n], dest=(r + 1) % p, recvbuf=got,
                      source=(r - 1) % p)
        sendbuf[j * n:(j + 1) * n] += got
    recvbuf[...] = sendbuf[r * n:(r + 1) * n]


def test_a_right_ring_passes_on_the_engines(lab):
    grs.check_reduce_scatter(ring_right, [(4, 5), (3, 1001, "int32"), (2, 0), (1, 3)])
    assert grs.check_reduce_scatter_steps(ring_right, [4, 3, 2]) == [3, 2, 1]


def test_a_ring_one_block_off_is_told_which_block_it_holds(lab):
    with pytest.raises(grading.CheckFailed) as exc:
        grs.check_reduce_scatter(ring_one_block_off, [(4, 5)])
    text = str(exc.value)
    assert "rank 0 holds the sum of block 1, not of block 0" in text, text


def test_straight_to_the_owner_is_right_but_not_a_ring(lab):
    grs.check_reduce_scatter(straight_to_owner, [(4, 5)])
    with pytest.raises(grading.CheckFailed) as exc:
        grs.check_reduce_scatter_steps(straight_to_owner, [4])
    text = str(exc.value)
    assert "sends only to its right neighbour" in text and "rank 0 sent to rank 2" in text, text


def test_a_changed_sendbuf_is_refused(lab):
    with pytest.raises(grading.CheckFailed, match="sendbuf changed on rank 0"):
        grs.check_reduce_scatter(adds_in_place, [(3, 4)])
