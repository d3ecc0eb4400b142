"""mpilab.grading.halo, Lab 02's checks: messages on hand-made outputs, reloads, real runs.

The pure-Python parts (which ghost edge is wrong and whose edge it holds, where a step
went wrong, the structure checks on source code) are tested on arrays built from the
numbered grid (tests/halo_frames.py), without MPI. A few tests run the checks themselves
on the shared 4-engine cluster (``lab`` in conftest.py): a right exchange and a right
overlapped step pass on several process grids, a wrong one fails naming the rank, the
edge and the neighbour. The lab's notebook under nbgrader is tests/test_lab02.py.
"""

from __future__ import annotations

import importlib
import sys

import cloudpickle
import numpy as np
import pytest
from halo_frames import frames

import mpilab.grading.halo as gh
from mpilab import grading, halo
from mpilab.grading import CheckFailed

# The engines cannot import this test module: send its functions by value, as they would
# be from a notebook.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def stepped(probes):
    """One heat step of every framed block (what a right step writes into new)."""
    out = []
    for u in probes:
        new = np.zeros_like(u)
        halo.heat_step(u, new)
        out.append(new)
    return out


def message(check, *args, **kwargs) -> str:
    with pytest.raises(CheckFailed) as info:
        check(*args, **kwargs)
    return str(info.value)


# --------------------------------------------------------------------------------------
# the decomposition


def test_layout_and_gathered_put_the_blocks_back_together():
    for nx, ny, dims in ((16, 12, (2, 2)), (17, 11, (1, 3)), (13, 29, (3, 1)), (5, 4, (2, 2))):
        blocks = [u[1:-1, 1:-1] for u in frames(nx, ny, dims)]
        assert np.array_equal(gh.gathered(blocks, nx, ny, dims), gh.numbered(nx, ny))
    assert gh.numbered(3, 2).tolist() == [[1, 2, 3], [4, 5, 6]]


# --------------------------------------------------------------------------------------
# ghost_problems: which edge is wrong, what it holds, whose edge it should hold


@pytest.mark.parametrize("nx, ny, dims", [(16, 12, (2, 2)), (17, 11, (1, 3)), (13, 29, (3, 1)),
                                          (9, 7, (1, 1)), (1201, 6, (2, 2))])
def test_a_right_exchange_has_no_problems(nx, ny, dims):
    assert gh.ghost_problems(frames(nx, ny, dims), nx, ny, dims) == []


def test_east_and_west_swapped_are_named_by_rank_edge_and_neighbour():
    probes = frames(16, 12, (2, 2))
    for u in probes:
        u[1:-1, [0, -1]] = u[1:-1, [-1, 0]]
    problems = gh.ghost_problems(probes, 16, 12, (2, 2))
    assert len(problems) == 8  # both columns of every rank
    assert ("rank 0: the east ghost column holds 0.0s (nothing arrived?), expected rank 1's "
            "west edge (its east neighbour)") in problems
    assert ("rank 0: the west ghost column holds rank 1's west edge [9, 25, 41, 57, ...], "
            "expected 0.0s: rank 0 is on the west border (cart.Shift gives MPI.PROC_NULL, "
            "nothing arrives and the frame stays 0.0)") in problems
    assert ("rank 3: the west ghost column holds 0.0s (nothing arrived?), expected rank 2's "
            "east edge (its west neighbour)") in problems


def test_reversed_own_and_foreign_values_are_told_apart():
    probes = frames(16, 12, (2, 2))
    probes[2][0, 1:-1] = probes[0][-2, 1:-1][::-1]  # rank 0's south edge, backwards
    probes[3][0, 1:-1] = probes[3][1, 1:-1]  # its own north edge
    probes[1][-1, 1:-1] = 0.5  # something else
    problems = gh.ghost_problems(probes, 16, 12, (2, 2))
    assert problems == [
        "rank 1: the south ghost row holds [0.5, 0.5, 0.5, 0.5, ...], which is no rank's "
        "edge, expected rank 3's north edge (its south neighbour)",
        "rank 2: the north ghost row holds rank 0's south edge reversed, expected rank 0's "
        "south edge (its north neighbour)",
        "rank 3: the north ghost row holds its own north edge [105, 106, 107, 108, ...], "
        "expected rank 1's south edge (its north neighbour)",
    ]


def test_a_frame_written_on_the_border_and_changed_points_are_named():
    probes = frames(17, 11, (1, 3))
    probes[0][0, 1:-1] = 1.0  # rank 0 has no north neighbour
    probes[2][3, 3] = -1.0  # an owned point
    problems = gh.ghost_problems(probes, 17, 11, (1, 3))
    assert problems[0].startswith("rank 0: the north ghost row holds [1, 1, 1, 1, ...], "
                                  "which is no rank's edge, expected 0.0s: rank 0 is on the "
                                  "north border")
    assert problems[1] == ("rank 2: the points it owns (u[1:-1, 1:-1]) changed; an exchange "
                           "writes only the ghost frame")
    assert len(problems) == 2
    assert "has shape (3, 3)" in gh.ghost_problems(
        [np.zeros((3, 3))] + probes[1:], 17, 11, (1, 3))[0]


def test_short_and_what_it_holds():
    assert gh.short(np.arange(6.0)) == "[0, 1, 2, 3, ...]"
    assert gh.short(np.array([1.5, 2.0])) == "[1.5, 2]"
    owned = {0: {"east": np.array([1.0, 2.0])}, 1: {"west": np.array([3.0, 4.0])}}
    assert gh.what_it_holds(np.array([4.0, 3.0]), owned, 0) == "rank 1's west edge reversed"
    assert gh.what_it_holds(np.array([1.0, 2.0]), owned, 0) == "its own east edge [1, 2]"
    assert gh.what_it_holds(np.zeros(2), owned, 0) == "0.0s (nothing arrived?)"
    assert gh.ghost(np.arange(16.0).reshape(4, 4), "east").tolist() == [7.0, 11.0]


# --------------------------------------------------------------------------------------
# step_problems: where one step went wrong


@pytest.mark.parametrize("nx, ny, dims", [(16, 12, (2, 2)), (29, 13, (1, 3)), (5, 4, (2, 2))])
def test_a_right_step_has_no_problems(nx, ny, dims):
    assert gh.step_problems(stepped(frames(nx, ny, dims)), nx, ny, dims) == []


def test_a_ring_computed_before_the_halo_arrived_is_named_and_the_interior_is_not():
    probes = frames(16, 12, (2, 2))
    for u in probes:  # no ghost cell arrived: the ring reads zeros
        u[0, :] = u[-1, :] = u[:, 0] = u[:, -1] = 0.0
    problems = gh.step_problems(stepped(probes), 16, 12, (2, 2))
    assert len(problems) == 4
    # rank 0's neighbours are south and east: its first wrong point is the north row's
    # east end, new[1, 8] (1/2 of 8 + (7 + 24 + 0 + 0) / 8 instead of + 9 / 8 more)
    assert problems[0] == ("rank 0: new is wrong in the boundary ring (north row, south row, "
                           "west column, east column); first at new[1, 8]: 7.875, expected 9")
    assert problems[3].startswith("rank 3: new is wrong in the boundary ring (north row, "
                                  "south row, west column, east column); first at new[1, 1]")
    assert not any("interior" in p for p in problems)


def test_a_wrong_interior_point_is_named():
    news = stepped(frames(16, 12, (2, 2)))
    news[3][3, 4] += 1.0  # point (8, 11): 140, which a step keeps (the grid is linear)
    assert gh.step_problems(news, 16, 12, (2, 2)) == [
        "rank 3: new is wrong in the interior; first at new[3, 4]: 141, expected 140"]


# --------------------------------------------------------------------------------------
# the structure checks read the source, comments removed


def nonblocking_right(cart, u):
    from mpi4py import MPI

    requests = [cart.Irecv(u[0, 1:-1], source=0), cart.Isend(u[1, 1:-1], dest=0)]
    MPI.Request.Waitall(requests)


def sendrecv_with_comments(cart, u):
    # not an Isend, not an Irecv, no Waitall: cart.Isend( cart.Irecv( Waitall(
    cart.Sendrecv(u[1, 1:-1], dest=0, recvbuf=u[0, 1:-1], source=0)


def overlap_renamed(cart, a, b):
    from mpi4py import MPI

    requests = [cart.Irecv(a[0, 1:-1], source=0), cart.Isend(a[1, 1:-1], dest=0)]
    halo.heat_step(a[1:-1, 1:-1], b[1:-1, 1:-1])  # the new array is called b here
    MPI.Request.Waitall(requests)
    halo.heat_step(a, b)


def overlap_waits_first(cart, old, new):
    from mpi4py import MPI

    requests = [cart.Irecv(old[0, 1:-1], source=0), cart.Isend(old[1, 1:-1], dest=0)]
    MPI.Request.Waitall(requests)
    halo.heat_step(old, new)


def blocking_right(cart, u):
    cart.Send(u[1, 1:-1], dest=0)
    cart.Recv(u[0, 1:-1], source=0)


def blocking_issend(cart, u):
    cart.Issend(u[1, 1:-1], dest=0).Wait()
    cart.Recv(u[0, 1:-1], source=0)


def test_posts_and_waits():
    gh.check_posts_and_waits(nonblocking_right)
    assert message(gh.check_posts_and_waits, sendrecv_with_comments,
                   name="exchange_nonblocking") == (
        "exchange_nonblocking should post cart.Irecv and cart.Isend and complete them with "
        "MPI.Request.Waitall (Part A was the blocking Sendrecv)")


def test_overlap_order_reads_the_third_parameter_whatever_its_name():
    gh.check_overlap_order(overlap_renamed)
    assert "should update the interior of new between posting" in message(
        gh.check_overlap_order, overlap_waits_first)
    assert "should post cart.Irecv/cart.Isend itself" in message(
        gh.check_overlap_order, blocking_right, name="step_overlap")


def test_blocking_calls_only():
    gh.check_blocking_calls(blocking_right)
    for func in (blocking_issend, sendrecv_with_comments, nonblocking_right):
        assert message(gh.check_blocking_calls, func, name="exchange_fixed").startswith(
            "exchange_fixed should keep the blocking cart.Send and cart.Recv of exchange_naive")


def test_code_that_cannot_be_read_is_explained():
    made = eval("lambda cart, u: None")  # no source file behind it
    assert "cannot find it: define exchange_fixed with def" in message(
        gh.check_blocking_calls, made, name="exchange_fixed")


# --------------------------------------------------------------------------------------
# tampering: the module calls mpilab.grading at call time, and a reload undoes patches


def test_checks_use_mpilab_grading_as_it_is_at_call_time():
    grading.expect = lambda *a, **k: None  # what a hostile submission does
    try:
        gh.check_posts_and_waits(sendrecv_with_comments)  # fooled: it calls grading.expect
    finally:
        importlib.reload(grading)
    assert "should post cart.Irecv" in message(gh.check_posts_and_waits, sendrecv_with_comments)
    assert gh.grading is sys.modules["mpilab.grading"] and gh.halo is sys.modules["mpilab.halo"]


def test_reload_restores_patched_checks():
    swapped = frames(16, 12, (2, 2))
    swapped[0][1:-1, -1] = 0.0
    gh.ghost_problems = lambda *a, **k: []
    gh.check_blocking_calls = lambda *a, **k: None
    fresh = importlib.reload(gh)
    assert fresh is gh
    assert gh.ghost_problems(swapped, 16, 12, (2, 2))
    assert "should keep the blocking" in message(gh.check_blocking_calls, nonblocking_right)


def test_show_and_compare_refuse_dims_that_do_not_fit():
    with pytest.raises(ValueError, match="need 4 ranks, not 3"):
        gh.show_exchange(blocking_right, ranks=3, dims=(2, 2))
    with pytest.raises(ValueError, match="either exchange= or step="):
        gh.compare_heat(8, 6, 2)


# --------------------------------------------------------------------------------------
# the checks on the engines


def exchange_sendrecv(cart, u):
    from mpi4py import MPI

    north, south = cart.Shift(0, 1)
    west, east = cart.Shift(1, 1)
    cart.Sendrecv(u[-2, 1:-1], dest=south, recvbuf=u[0, 1:-1], source=north)
    cart.Sendrecv(u[1, 1:-1], dest=north, recvbuf=u[-1, 1:-1], source=south)
    arrived = np.zeros(u.shape[0] - 2)
    cart.Sendrecv(np.ascontiguousarray(u[1:-1, -2]), dest=east, recvbuf=arrived, source=west)
    if west != MPI.PROC_NULL:
        u[1:-1, 0] = arrived
    cart.Sendrecv(np.ascontiguousarray(u[1:-1, 1]), dest=west, recvbuf=arrived, source=east)
    if east != MPI.PROC_NULL:
        u[1:-1, -1] = arrived


def exchange_swapped(cart, u):
    """East and west swapped: each column goes to the wrong side."""
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


def step_ring_too_early(cart, old, new):
    """The whole step before Waitall: the ring reads ghost cells that have not arrived."""
    from mpi4py import MPI

    north, south = cart.Shift(0, 1)
    requests = [cart.Irecv(old[0, 1:-1], source=north, tag=0),
                cart.Isend(old[-2, 1:-1], dest=south, tag=0)]
    halo.heat_step(old, new)
    MPI.Request.Waitall(requests)


@pytest.mark.parametrize("dims", [(2, 2), (1, 3), (3, 1)])
def test_a_right_exchange_passes_on_the_engines(lab, dims):
    gh.check_exchange(exchange_sendrecv, 9, 7, dims, 4)


def test_a_wrong_exchange_fails_on_the_engines_naming_rank_edge_and_neighbour(lab):
    text = message(gh.check_exchange, exchange_swapped, 16, 12, (2, 2), 3)
    assert text.startswith("exchange_swapped on a 16 × 12 grid, 2 × 2 process grid: after one "
                           "exchange 8 edge(s) are wrong:")
    assert ("rank 0: the east ghost column holds 0.0s (nothing arrived?), expected rank 1's "
            "west edge (its east neighbour)") in text


def test_a_ring_computed_too_early_fails_on_the_engines(lab):
    text = message(gh.check_step, step_ring_too_early, 16, 12, (2, 2), 3, name="step_overlap")
    assert "step_overlap on a 16 × 12 grid" in text and "boundary ring" in text, text


def test_try_it_tools_print_blocks_and_the_difference(lab, capsys):
    gh.show_exchange(exchange_sendrecv, 9, 5, dims=(1, 3))
    assert gh.compare_heat(20, 15, 10, exchange=exchange_sendrecv) == 0.0
    out = capsys.readouterr().out
    assert "rank 2 (frame included):" in out and "rank 3" not in out.split("20 × 15")[0]
    assert "20 × 15 grid, 10 steps on 4 ranks: largest difference from halo.serial_heat 0" in out
    gh.show_exchange(exchange_swapped, 4, 4, ranks=1)  # one rank: nothing to swap
    assert "rank 0 (frame included):" in capsys.readouterr().out
