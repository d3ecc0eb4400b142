"""Halo-exchange checks run under mpiexec at an explicit rank count (tests/test_halo.py).

Every rank runs every check; a failure prints "FAIL <check> on rank <r>: <why>" and the
process exits 1. The parallel heat and wave kernels must equal the NumPy serial
references (mpilab.halo.serial_heat / serial_wave) for every exchange mode and packing,
on square, non-square and unevenly split grids. Argument errors must be raised on every
rank alike, before any communication, so none can leave a rank waiting.
"""

import numpy as np
from mpi4py import MPI
from mpicheck import check, comm, expect, finish, raises, rank, size

from mpilab import halo
from mpilab.kernels import stencil, wave

GRIDS = [(17, 11), (32, 32), (5, 40)]
TOL = {"rtol": 1e-12, "atol": 1e-12}


def same_everywhere(block, off, ref, what):
    """This rank's block equals the reference there, and so does the gathered field."""
    rows, cols = block.shape
    y0, x0 = off
    mine = ref[y0:y0 + rows, x0:x0 + cols]
    full = halo.gather(comm, block, off)
    expect(mine.shape == block.shape and np.allclose(block, mine, **TOL),
           f"{what}: this rank's block at {off} differs from the serial reference")
    if rank == 0:
        expect(full.shape == ref.shape and np.allclose(full, ref, **TOL),
               f"{what}: the gathered field differs from the serial reference")
    else:
        expect(full is None, "gather returned a field off the root")


@check
def heat_matches_serial_every_mode_and_pack():
    for nx, ny in GRIDS:
        ref = halo.serial_heat(nx, ny, 40)
        assert np.count_nonzero(ref) == ref.size  # heat reached every block
        for mode in halo.MODES:
            for pack in halo.PACKS:
                b, off = halo.run_heat(comm, nx, ny, 40, mode=mode, pack=pack)
                same_everywhere(b, off, ref, f"heat {nx}x{ny} {mode}/{pack}")


@check
def heat_streamed_rows_give_the_serial_bits():
    """Fields past the last-level cache take the prefetching row loop (heat_row_stream in
    kernels/common/mpilab_heat.h): the very bits of the serial reference, in the
    two-sided kernel and in a shared window's. One rank alone (COMM_SELF), on rank 0."""
    if rank != 0:
        return
    n = 1700  # two fields of 1702^2 doubles: 46 MB, past HEAT_LLC (32 MiB)
    steps = 30  # enough for sums that round: another order of the additions shows
    ref = halo.serial_heat(n, n, steps)
    for mode in ("blocking", "shm"):
        b, off = halo.run_heat(MPI.COMM_SELF, n, n, steps, mode=mode)
        expect(off == (0, 0) and np.array_equal(b, ref),
               f"heat {n}x{n} {mode}: streamed rows differ from the serial reference by "
               f"up to {np.abs(b - ref).max() if b.shape == ref.shape else b.shape}")


@check
def blocks_follow_split_and_dims():
    py, px = MPI.Compute_dims(size, 2)
    for nx, ny in GRIDS:
        b, off = halo.run_heat(comm, nx, ny, 1)
        y0, rows, x0, cols = halo.blocks(nx, ny, (py, px))[rank]
        expect(off == (y0, x0) and b.shape == (rows, cols), f"block {off} {b.shape}")


@check
def heat_strips_and_energy():
    # 1D decompositions both ways (only columns or only rows are exchanged)
    for dims in ((1, size), (size, 1)):
        nx, ny = (3 * size + 1, 7) if dims[0] == 1 else (7, 3 * size + 2)
        ref = halo.serial_heat(nx, ny, 15, energy=2.5)
        for mode in halo.MODES:
            for pack in halo.PACKS:
                b, off = halo.run_heat(comm, nx, ny, 15, mode=mode, pack=pack, energy=2.5,
                                       dims=dims)
                same_everywhere(b, off, ref, f"heat strips {dims} {mode}/{pack}")


@check
def heat_blocking_large_messages_do_not_deadlock():
    # ghost lines of 3000 doubles (24 KB) go by rendezvous, not eager buffering
    for dims, nx, ny in (((1, size), 2 * size, 3000), ((size, 1), 3000, 2 * size)):
        ref = halo.serial_heat(nx, ny, 4)
        for mode in ("blocking", "sendrecv"):
            for pack in halo.PACKS:
                b, off = halo.run_heat(comm, nx, ny, 4, mode=mode, pack=pack, dims=dims)
                same_everywhere(b, off, ref, f"heat {nx}x{ny} {dims} {mode}/{pack}")


@check
def heat_conserves_energy_in_parallel():
    nx, ny, e = 23, 13, 1.5
    for mode in halo.MODES:
        before = halo.gather(comm, *halo.run_heat(comm, nx, ny, 29, mode=mode, energy=e))
        after = halo.gather(comm, *halo.run_heat(comm, nx, ny, 30, mode=mode, energy=e,
                                                 pack="manual"))
        if rank == 0:
            want = before.sum() - halo.boundary_loss(before) + 3 * e
            expect(np.isclose(after.sum(), want, rtol=1e-12),
                   f"heat not conserved ({mode}): {after.sum()} != {want}")


@check
def wave_matches_serial_every_mode_and_pack():
    for nx, ny in GRIDS:
        ref = halo.serial_wave(nx, ny, 60, f0=0.1)
        assert np.count_nonzero(ref) == ref.size  # the wave reached every block
        for mode in halo.MODES:
            for pack in halo.PACKS:
                b, off = halo.run_wave(comm, nx, ny, 60, mode=mode, pack=pack, f0=0.1)
                same_everywhere(b, off, ref, f"wave {nx}x{ny} {mode}/{pack}")


@check
def wave_source_courant_and_strips():
    nx, ny = 3 * size + 4, 2 * size + 5
    kw = {"f0": 0.08, "courant": 0.7, "source": (1, ny - 2)}
    ref = halo.serial_wave(nx, ny, 45, **kw)
    for dims in ((1, size), (size, 1), None):
        for mode in ("blocking", "overlap"):
            for pack in halo.PACKS:
                b, off = halo.run_wave(comm, nx, ny, 45, mode=mode, pack=pack, dims=dims, **kw)
                same_everywhere(b, off, ref, f"wave {dims} {mode}/{pack}")


@check
def wave_is_stable_and_walls_are_rigid():
    # a long run stays bounded, and the serial reference keeps the wall faces at zero
    p, vx, vy = halo.serial_wave(20, 12, 400, f0=0.1, fields=True)
    assert np.all(np.isfinite(p)) and np.abs(p).max() < 10
    assert np.all(vx[:, -1] == 0) and np.all(vy[-1, :] == 0)
    b, off = halo.run_wave(comm, 20, 12, 400, f0=0.1, mode="overlap")
    same_everywhere(b, off, p, "wave 400 steps")


@check
def timeline_has_the_promised_phases():
    for app, rounds in (("heat", 3), ("wave", 6)):
        for mode in halo.MODES:
            tl = halo.timeline(comm, app, 120, 90, mode=mode, steps=6, last=3)
            own = halo.timeline(comm, app, 120, 90, mode=mode, steps=6, last=3, root=None)
            if rank == 0:
                expect(tl.shape == (size, rounds, 5, 2), f"gathered timeline {tl.shape}")
                df = halo.timeline_frame(tl, app)
                expect(set(df["phase"]) == set(halo.PHASES) and len(df) == size * rounds * 5,
                       "timeline_frame rows")
            else:
                expect(tl is None, "timeline returned a gathered array off the root")
            expect(own.shape == (rounds, 5, 2), f"timeline shape {own.shape}")
            expect(np.all(own[..., 1] >= own[..., 0]) and np.all(own >= 0), "negative phase")
            flat = own[:, :4].reshape(rounds, 8)  # the four phases that are intervals
            overlapping = mode in ("overlap", "overlap-test", "persistent")
            if overlapping:        # exchange, interior, wait, boundary, one after the other
                order = flat[:, [0, 1, 2, 3, 4, 5, 6, 7]]
            else:                  # exchange, wait, interior (whole block), boundary
                order = flat[:, [0, 1, 4, 5, 2, 3, 6, 7]]
            expect(np.all(np.diff(order.ravel()) >= 0), f"{app}/{mode}: phases out of order")
            if mode in ("blocking", "sendrecv", "neighbor"):
                expect(np.all(own[:, 2, 0] == own[:, 2, 1]), "no wait phase in sync modes")
            if not overlapping:
                expect(np.all(own[:, 3, 0] == own[:, 3, 1]), "boundary only in overlap")
            # progress: the Testall calls' total, from the interior's start, inside it
            progress = own[:, 4, 1] - own[:, 4, 0]
            if mode == "overlap-test":
                expect(np.all(own[:, 4, 0] == own[:, 1, 0]), "progress not at the interior")
                expect(np.all(progress <= own[:, 1, 1] - own[:, 1, 0]),
                       "progress longer than the interior it sits in")
                if size > 1:
                    expect(np.any(progress > 0), "overlap-test made no MPI_Testall call")
            else:
                expect(np.all(progress == 0), f"{mode}: progress without MPI_Testall")
            expect(np.all(own[:, 1, 1] > own[:, 1, 0]), "the compute phase took no time")


@check
def time_records_have_the_shape_and_agree():
    for app in halo.APPS:
        recs = halo.time_halo(comm, app, "blocking,overlap", sub=8, pack="all", iters=3,
                              reps=2, rounds=2)
        assert [(r["mode"], r["pack"]) for r in recs] == [
            ("blocking", "datatype"), ("overlap", "datatype"),
            ("blocking", "manual"), ("overlap", "manual"),
            ("blocking", "subarray"), ("overlap", "subarray")]
        for r in recs:
            assert r["app"] == app and r["sub"] == 8 and r["ranks"] == size
            py, px = r["dims"]
            assert (r["nx"], r["ny"]) == (8 * px, 8 * py)
            assert len(r["times_us"]) == 4 and 0 < r["t_us_min"] <= r["t_us_median"]
        every = comm.allgather([r["times_us"] for r in recs])
        expect(all(e == every[0] for e in every), "ranks disagree on the times")
    recs = halo.time_halo(comm, "wave", "sendrecv", nx=30, ny=3 * size, dims=(size, 1),
                          pack="manual", iters=2, reps=3, f0=0.2)
    expect(len(recs) == 1 and recs[0]["sub"] is None and recs[0]["dims"] == [size, 1]
           and (recs[0]["nx"], recs[0]["ny"]) == (30, 3 * size)
           and recs[0]["size_bytes"] == halo.halo_bytes("wave", 30, 3 * size, (size, 1)),
           f"time_halo with nx, ny: {recs}")
    t = stencil.time_heat(comm, 30, 20, mode="sendrecv", warmup=0, iters=2, reps=3)
    assert t.shape == (3,) and np.all(t > 0)
    t = stencil.sweep(MPI.COMM_SELF, 50, 40, iters=2, reps=2)
    assert t.shape == (2,) and np.all(t > 0)
    # sweep_on: the same update on the caller's arrays (here on 4 KiB pages); one sweep
    # writes b's interior from a, old/2 + (N + S + E + W)/8
    from mpilab import buffers

    nx, ny = 50, 40
    a, b = (buffers.buffer("4k-pages", 8 * (nx + 2) * (ny + 2)).view(np.float64)
            for _ in "ab")
    a[:] = np.random.default_rng(3).random(a.size)
    b[:] = 0.0
    t = stencil.sweep_on(MPI.COMM_SELF, a, b, nx, ny, warmup=0, iters=1, reps=1)
    assert t.shape == (1,) and t[0] > 0
    old, new = a.reshape(ny + 2, nx + 2), b.reshape(ny + 2, nx + 2)
    want = old[1:-1, 1:-1] / 2 + (old[:-2, 1:-1] + old[2:, 1:-1] + old[1:-1, :-2]
                                  + old[1:-1, 2:]) / 8
    expect(np.allclose(new[1:-1, 1:-1], want, rtol=1e-13, atol=0), "sweep_on's update")
    raises(ValueError, stencil.sweep_on, MPI.COMM_SELF, a, b[:-1], nx, ny)
    raises(ValueError, stencil.sweep_on, MPI.COMM_SELF, a, a, nx, ny)


@check
def bad_arguments_raise_on_every_rank():
    run_heat, run_wave = halo.run_heat, halo.run_wave
    raises(ValueError, run_heat, comm, 10, 10, 5, mode="eventually")
    raises(ValueError, run_heat, comm, 10, 10, 5, pack="zip")
    raises(ValueError, stencil.heat, comm, 10, 10, 5, mode="bogus")
    raises(ValueError, wave.wave, comm, 10, 10, 5, pack="bogus")
    raises(ValueError, run_heat, comm, 0, 10, 5)
    raises(TypeError, run_heat, comm, 10.5, 10, 5)
    raises(TypeError, run_heat, comm, 10, None, 5)
    raises(ValueError, run_heat, comm, 10, 10, -1)
    raises(TypeError, run_heat, comm, 10, 10, 5, energy="hot")
    raises(ValueError, run_heat, comm, 10, 10, 5, energy=float("nan"))
    raises(ValueError, run_heat, comm, 10, 10, 5, dims=(size + 1, 1))
    raises(TypeError, run_heat, comm, 10, 10, 5, dims=3)
    raises(ValueError, run_heat, comm, 10, 10, 5, dims=(0, size))
    if size > 1:  # too few points for the process grid
        raises(ValueError, run_heat, comm, size - 1, 50, 5, dims=(1, size))
        raises(ValueError, run_wave, comm, 50, size - 1, 5, dims=(size, 1))
    raises(ValueError, run_wave, comm, 10, 10, 5, courant=0.8)
    raises(ValueError, run_wave, comm, 10, 10, 5, courant=0)
    raises(ValueError, run_wave, comm, 10, 10, 5, f0=-1.0)
    raises(TypeError, run_wave, comm, 10, 10, 5, f0="high")
    raises(ValueError, run_wave, comm, 10, 10, 5, source=(10, 3))
    raises(TypeError, run_wave, comm, 10, 10, 5, source=4)
    raises(ValueError, halo.serial_wave, 10, 10, 5, courant=0.9)
    raises(ValueError, halo.time_halo, comm, "lava", "all", 8)
    raises(ValueError, halo.time_halo, comm, "heat", "all", 8, nx=10, ny=10)
    raises(ValueError, halo.time_halo, comm, "heat", "all")
    raises(ValueError, halo.time_halo, comm, "heat", "blocking,sideways", 8)
    raises(ValueError, halo.time_halo, comm, "heat", "all", 8, reps=0)
    raises(TypeError, halo.time_halo, comm, "heat", "all", 8, f0=0.1)
    raises(ValueError, halo.timeline, comm, "heat", 20, 20, steps=3, last=5)
    raises(ValueError, halo.timeline, comm, "wave", 20, 20, root=size)
    raises(ValueError, stencil.time_heat, comm, 20, 20, iters=0)
    raises(ValueError, wave.time_wave, comm, 20, 20, reps=0)
    raises(ValueError, halo.gather, comm, np.zeros(3), (0, 0))
    # one rank alone passes a bad block: every rank raises, none waits in the gather
    raises(ValueError, halo.gather, comm, np.zeros((2, 2) if rank else (3,)), (0, 0))
    raises(ValueError, halo.gather, comm, np.zeros((2, 2)), (0, 0) if rank else None)
    # and nothing is left half-done: a collective run still works afterwards
    ref = halo.serial_heat(12, 9, 5)
    same_everywhere(*halo.run_heat(comm, 12, 9, 5), ref, "after errors")


finish(together=True)
