"""One-sided halo-exchange checks run under mpiexec at an explicit rank count.

Run by tests/test_onesided.py. Every one-sided mode of the heat problem (MPI_Put with
fence, PSCW or a passive-target lock; shared-memory windows, contiguous or not) must give
exactly the bits of mpilab.halo.serial_heat, on square, non-square and unevenly split
grids, on strips and on blocks one point wide, and conserve heat. shm_layout must show
the contiguous window's segments back to back. Argument errors must be raised on every
rank alike, before any communication.
"""

import numpy as np
from mpi4py import MPI
from mpicheck import check, comm, expect, finish, raises, rank, size

from mpilab import halo
from mpilab.kernels import onesided

GRIDS = [(17, 11), (32, 32), (5, 40)]


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


@check
def heat_matches_serial_bitwise_every_mode():
    for nx, ny in GRIDS:
        ref = halo.serial_heat(nx, ny, 40)
        assert np.count_nonzero(ref) == ref.size  # heat reached every block
        for mode in halo.ONESIDED_MODES:
            b, off = halo.run_heat(comm, nx, ny, 40, mode=mode)
            bitwise_everywhere(b, off, ref, f"heat {nx}x{ny} {mode}")


@check
def kernel_blocks_follow_split_and_dims():
    py, px = MPI.Compute_dims(size, 2)
    for mode in halo.ONESIDED_MODES:
        b, off = onesided.heat(comm, 17, 11, 1, mode=mode)
        y0, rows, x0, cols = halo.blocks(17, 11, (py, px))[rank]
        expect(off == (y0, x0) and b.shape == (rows, cols), f"{mode}: block {off} {b.shape}")


@check
def heat_strips_uneven_and_energy():
    # 1D decompositions both ways (only columns or only rows are exchanged), uneven
    for dims in ((1, size), (size, 1)):
        nx, ny = (3 * size + 1, 7) if dims[0] == 1 else (7, 3 * size + 2)
        ref = halo.serial_heat(nx, ny, 15, energy=2.5)
        for mode in halo.ONESIDED_MODES:
            b, off = halo.run_heat(comm, nx, ny, 15, mode=mode, energy=2.5, dims=dims)
            bitwise_everywhere(b, off, ref, f"heat strips {dims} {mode}")


@check
def heat_blocks_one_point_wide():
    # every block one column (or one row) wide: edge and ghost are next to each other,
    # and a neighbour's column type has a different stride from this rank's
    py, px = MPI.Compute_dims(size, 2)
    cases = [((1, size), size, 9), ((size, 1), 9, size), ((py, px), px, py + 5),
             ((py, px), 2 * px + 1, py)]
    for dims, nx, ny in cases:
        ref = halo.serial_heat(nx, ny, 12)
        for mode in halo.ONESIDED_MODES:
            b, off = halo.run_heat(comm, nx, ny, 12, mode=mode, dims=dims)
            bitwise_everywhere(b, off, ref, f"heat {nx}x{ny} on {dims} {mode}")


@check
def heat_many_steps_stay_exact():
    # a long run: a missing synchronisation shows up as a wrong bit sooner or later
    nx, ny = 4 * size + 3, 19
    ref = halo.serial_heat(nx, ny, 300)
    for mode in halo.ONESIDED_MODES:
        b, off = halo.run_heat(comm, nx, ny, 300, mode=mode)
        bitwise_everywhere(b, off, ref, f"heat 300 steps {mode}")


@check
def heat_conserves_energy_in_parallel():
    nx, ny, e = 23, 13, 1.5
    for mode in halo.ONESIDED_MODES:
        before = halo.gather(comm, *halo.run_heat(comm, nx, ny, 29, mode=mode, energy=e))
        after = halo.gather(comm, *halo.run_heat(comm, nx, ny, 30, mode=mode, energy=e))
        if rank == 0:
            want = before.sum() - halo.boundary_loss(before) + 3 * e
            expect(np.isclose(after.sum(), want, rtol=1e-12),
                   f"heat not conserved ({mode}): {after.sum()} != {want}")


@check
def time_records_have_the_shape_and_agree():
    modes = ["sendrecv", *halo.ONESIDED_MODES]
    recs = halo.time_halo(comm, "heat", "sendrecv,onesided", sub=8, iters=3, reps=2,
                          rounds=2)
    assert [r["mode"] for r in recs] == modes, [r["mode"] for r in recs]
    for r in recs:
        assert r["app"] == "heat" and r["sub"] == 8 and r["ranks"] == size
        assert r["pack"] == "datatype"
        py, px = r["dims"]
        assert (r["nx"], r["ny"]) == (8 * px, 8 * py)
        assert r["size_bytes"] == halo.halo_bytes("heat", 8 * px, 8 * py, (py, px))
        assert len(r["times_us"]) == 4 and 0 < r["t_us_min"] <= r["t_us_median"]
    every = comm.allgather([r["times_us"] for r in recs])
    expect(all(e == every[0] for e in every), "ranks disagree on the times")
    recs = halo.time_halo(comm, "heat", ["put-lock"], nx=30, ny=3 * size, dims=(size, 1),
                          iters=2, reps=3, energy=0.5)
    expect(len(recs) == 1 and recs[0]["sub"] is None and recs[0]["dims"] == [size, 1]
           and recs[0]["mode"] == "put-lock", f"time_halo with nx, ny: {recs}")
    for mode in halo.ONESIDED_MODES:
        t = onesided.time_heat(comm, 30, 20, mode=mode, warmup=0, iters=2, reps=3)
        expect(t.shape == (3,) and np.all(t > 0), f"time_heat {mode}: {t}")


@check
def shm_layout_contiguous_and_not():
    for nbytes in (1000, 8, 0, 3 * 4096 + 5):
        seg = onesided.shm_layout(comm, nbytes, False)
        expect(len(seg) == size and all(s == nbytes for _, s in seg),
               f"shm_layout({nbytes}) sizes: {seg}")
        for r in range(size - 1):  # contiguous: segment r + 1 starts where r ends
            expect(seg[r + 1][0] == seg[r][0] + seg[r][1],
                   f"contiguous segments {r}, {r + 1} not adjacent: {seg}")
        every = comm.allgather(seg)
        expect(all(e == seg for e in every), "ranks disagree on the layout")
        nc = onesided.shm_layout(comm, nbytes, True)
        expect(len(nc) == size and all(s >= nbytes for _, s in nc),
               f"shm_layout({nbytes}, noncontig) sizes: {nc}")
        spans = sorted((a, a + s) for a, s in nc)
        expect(all(spans[i][1] <= spans[i + 1][0] for i in range(size - 1)),
               f"noncontiguous segments overlap: {nc}")
        expect(all(e == nc for e in comm.allgather(nc)), "ranks disagree (noncontig)")


@check
def bad_arguments_raise_on_every_rank():
    run_heat = halo.run_heat
    raises(ValueError, run_heat, comm, 10, 10, 5, mode="put-maybe")
    raises(ValueError, run_heat, comm, 10, 10, 5, mode="onesided")
    for mode in halo.ONESIDED_MODES:
        raises(ValueError, run_heat, comm, 10, 10, 5, mode=mode, pack="manual")
        raises(ValueError, halo.run_wave, comm, 10, 10, 5, mode=mode)
        raises(ValueError, halo.timeline, comm, "heat", 20, 20, mode=mode)
    raises(ValueError, onesided.heat, comm, 10, 10, 5, mode="overlap")
    raises(ValueError, onesided.heat, comm, 10, 10, 5, pack="manual")
    raises(ValueError, onesided.heat, comm, 10, 10, 5, pack="zip")
    raises(ValueError, onesided.heat, comm, 10, 10, -1, mode="shm")
    raises(TypeError, onesided.heat, comm, 10.5, 10, 5, mode="put-lock")
    raises(ValueError, onesided.heat, comm, 0, 10, 5, mode="put-pscw")
    raises(TypeError, onesided.heat, comm, 10, 10, 5, energy="hot")
    raises(ValueError, onesided.heat, comm, 10, 10, 5, energy=float("inf"))
    raises(ValueError, onesided.heat, comm, 10, 10, 5, dims=(size + 1, 1))
    raises(TypeError, onesided.heat, comm, 10, 10, 5, dims=3)
    if size > 1:  # too few points for the process grid
        raises(ValueError, run_heat, comm, size - 1, 50, 5, mode="shm", dims=(1, size))
    raises(ValueError, onesided.time_heat, comm, 20, 20, mode="shm-nc", iters=0)
    raises(ValueError, onesided.time_heat, comm, 20, 20, mode="put-fence", reps=0)
    raises(ValueError, halo.time_halo, comm, "heat", "sendrecv,put-sideways", 8)
    raises(ValueError, halo.time_halo, comm, "heat", "onesided", 8, pack="all")
    raises(ValueError, halo.time_halo, comm, "wave", "onesided", 8)
    raises(ValueError, onesided.shm_layout, comm, -1)
    raises(TypeError, onesided.shm_layout, comm, 1.5)
    raises(TypeError, onesided.shm_layout, comm, 64, "yes")
    # and nothing is left half-done: collective runs still work afterwards
    ref = halo.serial_heat(12, 9, 5)
    for mode in halo.ONESIDED_MODES:
        bitwise_everywhere(*halo.run_heat(comm, 12, 9, 5, mode=mode), ref, f"after {mode}")


finish(together=True)
