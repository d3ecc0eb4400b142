"""Hybrid halo-exchange checks (a shared window per node, messages between nodes).

Run by tests/test_halo.py under mpiexec on one node, and on emulated nodes with the ranks
placed by slot or by node, so that a rank's neighbours are on its node, on the other
one, or both. The hybrid heat exchange must give exactly the bits of
mpilab.halo.serial_heat whatever the placement, on square, non-square and unevenly split
grids, strips and blocks one point wide, with ghost lines long enough to go by
rendezvous; argument errors must be raised on every rank alike, before any
communication. Across nodes the one-window modes (shm, shm-nc) must refuse on every
rank, and the hybrid still work afterwards.

Prints one line "PLACEMENT <json>" on rank 0: each rank's hostname and how many of its
neighbours share its node, so the test can tell which paths were taken.
"""

import json
import socket

import numpy as np
from mpi4py import MPI
from mpicheck import check, comm, expect, finish, raises, rank, size

from mpilab import halo
from mpilab.kernels import onesided

GRIDS = [(17, 11), (32, 32), (5, 40)]
HOSTS = comm.allgather(socket.gethostname())
NODES = len(set(HOSTS))


def bitwise_everywhere(block, off, ref, what):
    """This rank's block has the reference's bits there, and so has the gathered field."""
    rows, cols = block.shape
    y0, x0 = off
    mine = ref[y0:y0 + rows, x0:x0 + cols]
    full = halo.gather(comm, block, off)
    expect(mine.shape == block.shape and np.array_equal(block, mine),
           f"{what}: this rank's block at {off} differs from the serial reference")
    if rank == 0:
        expect(full.shape == ref.shape and np.array_equal(full, ref),
               f"{what}: the gathered field differs from the serial reference")
    else:
        expect(full is None, "gather returned a field off the root")


def neighbours(dims):
    """This rank's neighbours (W, E, N, S) on the process grid, None past the border."""
    py, px = dims
    y, x = divmod(rank, px)
    return [y * px + x - 1 if x > 0 else None, y * px + x + 1 if x < px - 1 else None,
            (y - 1) * px + x if y > 0 else None, (y + 1) * px + x if y < py - 1 else None]


@check
def placement_is_reported():
    dims = tuple(MPI.Compute_dims(size, 2))
    near = [n for n in neighbours(dims) if n is not None]
    same = sum(HOSTS[n] == HOSTS[rank] for n in near)
    every = comm.gather({"host": HOSTS[rank], "neighbours": len(near), "on_node": same})
    if rank == 0:
        print("PLACEMENT " + json.dumps({"dims": dims, "ranks": every}), flush=True)


@check
def hybrid_matches_serial_bitwise():
    for nx, ny in GRIDS:
        ref = halo.serial_heat(nx, ny, 40)
        assert np.count_nonzero(ref) == ref.size  # heat reached every block
        b, off = halo.run_heat(comm, nx, ny, 40, mode="hybrid")
        bitwise_everywhere(b, off, ref, f"heat {nx}x{ny} hybrid")


@check
def hybrid_strips_uneven_energy_and_thin_blocks():
    for dims in ((1, size), (size, 1)):
        nx, ny = (3 * size + 1, 7) if dims[0] == 1 else (7, 3 * size + 2)
        ref = halo.serial_heat(nx, ny, 15, energy=2.5)
        b, off = halo.run_heat(comm, nx, ny, 15, mode="hybrid", energy=2.5, dims=dims)
        bitwise_everywhere(b, off, ref, f"heat strips {dims} hybrid")
    py, px = MPI.Compute_dims(size, 2)
    for dims, nx, ny in (((1, size), size, 9), ((size, 1), 9, size), ((py, px), px, py + 5)):
        ref = halo.serial_heat(nx, ny, 12)
        b, off = halo.run_heat(comm, nx, ny, 12, mode="hybrid", dims=dims)
        bitwise_everywhere(b, off, ref, f"heat {nx}x{ny} on {dims} hybrid")


@check
def hybrid_long_ghost_lines():
    # ghost lines of 3000 doubles (24 KB), columns through the vector datatype: messages
    # between nodes far longer than one TCP segment, copies within a node of many lines
    for dims, nx, ny in (((1, size), 2 * size, 3000), ((size, 1), 3000, 2 * size)):
        ref = halo.serial_heat(nx, ny, 4)
        b, off = halo.run_heat(comm, nx, ny, 4, mode="hybrid", dims=dims)
        bitwise_everywhere(b, off, ref, f"heat {nx}x{ny} {dims} hybrid")


@check
def hybrid_conserves_heat_and_times():
    nx, ny, e = 23, 13, 1.5
    before = halo.gather(comm, *halo.run_heat(comm, nx, ny, 29, mode="hybrid", energy=e))
    after = halo.gather(comm, *halo.run_heat(comm, nx, ny, 30, mode="hybrid", energy=e))
    if rank == 0:
        want = before.sum() - halo.boundary_loss(before) + 3 * e
        expect(np.isclose(after.sum(), want, rtol=1e-12),
               f"heat not conserved (hybrid): {after.sum()} != {want}")
    recs = halo.time_halo(comm, "heat", "blocking,hybrid", sub=8, iters=3, reps=2)
    expect([r["mode"] for r in recs] == ["blocking", "hybrid"], f"time_halo modes {recs}")
    expect(all(0 < r["t_us_min"] <= r["t_us_median"] for r in recs), "time_halo times")
    t = onesided.time_heat(comm, 30, 20, mode="hybrid", warmup=0, iters=2, reps=3)
    expect(t.shape == (3,) and bool(np.all(t > 0)), f"time_heat {t}")


@check
def one_window_modes_refuse_across_nodes():
    if NODES == 1:
        b, off = halo.run_heat(comm, 12, 9, 5, mode="shm")
        bitwise_everywhere(b, off, halo.serial_heat(12, 9, 5), "shm on one node")
        return
    for mode in halo.SHARED_WINDOW_MODES:
        raises(ValueError, halo.run_heat, comm, 12, 9, 5, mode=mode)
    # and nothing is left half-done: the hybrid runs right afterwards
    bitwise_everywhere(*halo.run_heat(comm, 12, 9, 5, mode="hybrid"),
                       halo.serial_heat(12, 9, 5), "hybrid after a refused shm")


@check
def bad_arguments_raise_on_every_rank():
    run_heat = halo.run_heat
    raises(ValueError, run_heat, comm, 10, 10, 5, mode="hybrid", pack="manual")
    raises(ValueError, halo.run_wave, comm, 10, 10, 5, mode="hybrid")
    raises(ValueError, halo.timeline, comm, "heat", 10, 10, mode="hybrid")
    raises(ValueError, halo.time_halo, comm, "wave", "hybrid", 8)
    raises(ValueError, onesided.heat, comm, 10, 10, -1, mode="hybrid")
    raises(ValueError, onesided.heat, comm, 10, 10, 5, mode="hybrid-ish")
    raises(ValueError, run_heat, comm, 10, 10, 5, mode="hybrid", dims=(size + 1, 1))
    raises(TypeError, run_heat, comm, 10, 10, 5, mode="hybrid", energy="hot")
    if size > 1:
        raises(ValueError, run_heat, comm, size - 1, 50, 5, mode="hybrid", dims=(1, size))
    raises(ValueError, onesided.time_heat, comm, 20, 20, mode="hybrid", iters=0)
    bitwise_everywhere(*run_heat(comm, 12, 9, 5, mode="hybrid"), halo.serial_heat(12, 9, 5),
                       "after errors")


finish(together=True)
