"""mpilab.grading.onesided, Lab 03's checks: the probe's words, structure checks, a real run.

The pure-Python parts are tested on hand-made frames: which ranks the probe makes slow,
and what ``probe_problems`` says about an edge that holds the neighbour's scribble (read
too late) or nothing (read too early). The structure checks fail before any rank runs.
Two checks run on the shared 4-engine cluster (``lab`` in conftest.py): a right Put
exchange passes, and one without its closing Fence is caught by the slow ranks. The lab's
notebook under nbgrader is tests/test_lab03.py.
"""

from __future__ import annotations

import sys

import cloudpickle
import pytest
from halo_frames import frames

import mpilab.grading.onesided as go
from mpilab.grading import CheckFailed

# The engines cannot import this test module: send its functions by value, as they would
# be from a notebook.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.mark.parametrize("dims", [(2, 2), (3, 3), (1, 4), (4, 1), (2, 3)])
def test_the_slow_ranks_are_a_checkerboard(dims):
    py, px = dims
    slow = {(cy, cx) for cy in range(py) for cx in range(px) if go.slow_rank(cy, cx)}
    assert 0 < len(slow) < py * px
    for cy, cx in slow:  # every neighbour of a slow rank is fast
        for ny_, nx_ in ((cy - 1, cx), (cy + 1, cx), (cy, cx - 1), (cy, cx + 1)):
            assert (ny_, nx_) not in slow


def test_a_right_probe_has_no_problem():
    assert go.probe_problems(frames(8, 6, (2, 2)), 8, 6, (2, 2)) == []


def test_an_edge_that_holds_the_scribble_was_read_too_late():
    probes = frames(8, 6, (2, 2))
    probes[0][1:-1, -1] = go.SCRIBBLE  # rank 0's east ghost: rank 1's block after it went on
    (line,) = go.probe_problems(probes, 8, 6, (2, 2))
    assert line.startswith("rank 0: the east ghost column holds [-1, -1, -1")
    assert "this rank read too late, after the neighbour had gone on (no closing " \
           "synchronisation?)" in line
    plain = go.probe_problems(probes, 8, 6, (2, 2), slow=False)
    assert len(plain) == 1 and "read too late" not in plain[0]


@pytest.mark.parametrize("rank, who", [(0, "fast"), (1, "slow")])
def test_an_edge_where_nothing_arrived_names_the_rank_s_speed(rank, who):
    probes = frames(8, 6, (2, 2))
    edge = "east" if rank == 0 else "west"
    if edge == "east":
        probes[rank][1:-1, -1] = 0.0
    else:
        probes[rank][1:-1, 0] = 0.0
    (line,) = go.probe_problems(probes, 8, 6, (2, 2))
    assert line.startswith(f"rank {rank}: the {edge} ghost column holds 0.0s (nothing arrived?)")
    assert f"rank {rank} is a {who} rank of the probe" in line
    assert "no opening synchronisation?" in line


def exchange_no_window(cart, u):
    """Sends instead: what lab 02 did."""
    north, south = cart.Shift(0, 1)
    cart.Sendrecv(u[1, 1:-1].copy(), dest=north, recvbuf=u[-1, 1:-1], source=south)


def test_check_put_says_what_is_missing_before_anything_runs():
    with pytest.raises(CheckFailed, match=r"exchange_no_window should make a window over u "
                                          r"\(MPI.Win.Create\), put the edges"):
        go.check_put(exchange_no_window, 8, 6, (2, 2), 2)


def exchange_put(cart, u):
    """Lab 03's Part A: Put every edge into the neighbour's ghost cells between two Fences."""
    from mpi4py import MPI

    north, south = cart.Shift(0, 1)
    west, east = cart.Shift(1, 1)
    rows, cols = u.shape[0] - 2, u.shape[1] - 2
    shapes = cart.allgather(u.shape)
    win = MPI.Win.Create(u, disp_unit=u.itemsize, comm=cart)
    flat = u.reshape(-1)
    column = MPI.DOUBLE.Create_vector(rows, 1, cols + 2).Commit()
    win.Fence()
    if south != MPI.PROC_NULL:
        win.Put(u[-2, 1:-1], south, target=(1, cols, MPI.DOUBLE))
    if north != MPI.PROC_NULL:
        last = shapes[north][0] - 1
        win.Put(u[1, 1:-1], north, target=(last * (cols + 2) + 1, cols, MPI.DOUBLE))
    targets = []
    if east != MPI.PROC_NULL:
        width = shapes[east][1]
        into = MPI.DOUBLE.Create_vector(rows, 1, width).Commit()
        win.Put([flat[cols + 2 + cols:], 1, column], east, target=(width, 1, into))
        targets.append(into)
    if west != MPI.PROC_NULL:
        width = shapes[west][1]
        into = MPI.DOUBLE.Create_vector(rows, 1, width).Commit()
        win.Put([flat[cols + 2 + 1:], 1, column], west, target=(2 * width - 1, 1, into))
        targets.append(into)
    win.Fence()
    for t in targets + [column]:
        t.Free()
    win.Free()


def exchange_rows_only(cart, u):
    """A typical slip: the rows are Put, the columns forgotten."""
    from mpi4py import MPI

    north, south = cart.Shift(0, 1)
    cols = u.shape[1] - 2
    shapes = cart.allgather(u.shape)
    win = MPI.Win.Create(u, disp_unit=u.itemsize, comm=cart)
    win.Fence()
    if south != MPI.PROC_NULL:
        win.Put(u[-2, 1:-1], south, target=(1, cols, MPI.DOUBLE))
    if north != MPI.PROC_NULL:
        last = shapes[north][0] - 1
        win.Put(u[1, 1:-1], north, target=(last * (cols + 2) + 1, cols, MPI.DOUBLE))
    win.Fence()
    win.Free()


def test_a_right_put_exchange_passes_on_the_engines(lab):
    go.check_put(exchange_put, 16, 12, (2, 2), 5)


def test_forgotten_columns_are_named_edge_by_edge(lab):
    with pytest.raises(CheckFailed) as info:
        go.check_put(exchange_rows_only, 16, 12, (2, 2), 5)
    text = str(info.value)
    assert text.startswith("exchange_rows_only on a 16 × 12 grid, 2 × 2 process grid: after "
                           "one exchange (slow ranks in a checkerboard, see the lab) 4 edge(s) "
                           "are wrong"), text
    assert "rank 0: the east ghost column holds 0.0s (nothing arrived?)" in text, text
    assert "rank 1: the west ghost column holds 0.0s" in text, text
