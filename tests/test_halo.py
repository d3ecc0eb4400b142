"""The halo-exchange kernels equal the serial references at 1, 2, 3, 4 and 6 ranks.

tests/mpi/check_halo.py runs every mode x packing of the heat and wave kernels under
mpiexec; 3, 4 and 6 ranks oversubscribe a 2-core machine. tests/mpi/check_hybrid.py runs
the hybrid exchange (a shared window per node, messages between nodes) on one node and
on two emulated nodes (mpilab.netlab, root), placed by slot and by node. The serial
definitions themselves are checked here, without MPI.
"""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, mpirun, needs_mpi

from mpilab import halo, jobs, netlab

NETLAB = netlab.available()
needs_netlab = pytest.mark.skipif(NETLAB is not None, reason=f"no emulated nodes: {NETLAB}")


@needs_mpi
@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 6])
def test_halo_under_mpiexec(ranks):
    res = mpirun("check_halo.py", ranks, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    assert out.count("OK rank") == ranks, out[-6000:]


def shared_memory_takes_huge_pages() -> bool:
    """Whether Linux may back a file in /dev/shm (an MPI shared window) with huge pages:
    the mount's huge= option (as every run's meta records it), or shmem_enabled forcing
    them."""
    from mpilab.runtime import machine

    forced = Path("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
    if forced.exists() and "[force]" in forced.read_text():
        return True
    return machine.machine_info()["shm_huge"] in ("always", "within_size", "advise")


@needs_mpi
@pytest.mark.parametrize("ranks", [1, 2])
def test_the_fields_pages_are_asked_for_and_read(ranks):
    """Two-sided fields on huge or 4 KiB pages as asked, in any order; every heat record
    says what its fields got; on several ranks a shared window gets huge pages only where
    the machine lets shared memory have them."""
    res = mpirun("check_pages.py", ranks, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    assert out.count("OK rank") == ranks, out[-6000:]
    seen = json.loads(next(ln for ln in out.splitlines()
                           if ln.startswith("PAGES "))[len("PAGES "):])
    if ranks > 1 and not shared_memory_takes_huge_pages():
        # /dev/shm on 4 KiB pages, whatever the kernel asks
        assert seen["windows"]["shm"] == seen["windows"]["shm-nc"] == 0.0, seen
        assert seen["windows"]["record-shm"] == 0.0, seen


def placement(out: str) -> dict:
    """What check_hybrid.py printed about where each rank ran and its neighbours."""
    line = next(ln for ln in out.splitlines() if ln.startswith("PLACEMENT "))
    return json.loads(line[len("PLACEMENT "):])


@needs_mpi
@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_hybrid_on_one_node(ranks):
    res = mpirun("check_hybrid.py", ranks, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    assert out.count("OK rank") == ranks, out[-6000:]
    where = placement(out)["ranks"]
    assert len({r["host"] for r in where}) == 1
    assert all(r["on_node"] == r["neighbours"] for r in where)  # every neighbour by loads


@needs_netlab
@needs_mpi
@pytest.mark.parametrize("map_by", ["slot", "node"])
def test_hybrid_across_two_emulated_nodes(map_by):
    """1-4 ranks on two nodes: each rank reaches its neighbours by loads, by messages or
    both, and the field is the serial one to the bit; shm and shm-nc refuse."""
    paths = set()
    with netlab.fabric(2, "unshaped") as fab:
        for ranks in (1, 2, 3, 4):
            launch = fab.launch(ranks, map_by=map_by)
            res = jobs.run(launch, [sys.executable, str(ROOT / "tests" / "mpi" /
                                                        "check_hybrid.py")],
                           timeout=300, check=False)
            out = res.stdout + res.stderr
            assert res.returncode == 0, out[-6000:]
            assert out.count("OK rank") == ranks, out[-6000:]
            where = placement(out)["ranks"]
            hosts = [r["host"] for r in where]
            assert hosts == [f"node{n}" for n in launch.placement["node_of_rank"]]
            for r in where:
                paths |= {"loads"} if r["on_node"] else set()
                paths |= {"messages"} if r["on_node"] < r["neighbours"] else set()
    assert paths == {"loads", "messages"}


def test_blocks_cover_the_grid_once():
    for nx, ny, dims in ((17, 11, (3, 2)), (5, 40, (2, 3)), (32, 32, (1, 1)), (7, 7, (7, 1))):
        seen = np.zeros((ny, nx), int)
        for y0, rows, x0, cols in halo.blocks(nx, ny, dims):
            assert rows >= 1 and cols >= 1
            seen[y0:y0 + rows, x0:x0 + cols] += 1
        assert np.all(seen == 1)


def test_halo_bytes():
    # 2 ranks side by side on a 10 x 6 grid: one interface of 6 points
    assert halo.halo_bytes("heat", 10, 6, (1, 2)) == 8 * 2 * 6
    assert halo.halo_bytes("wave", 10, 6, (2, 2)) == 8 * 3 * (6 + 10)
    assert halo.halo_bytes("heat", 10, 6, (1, 1)) == 0


def test_ricker_wavelet():
    f0 = 0.05
    assert halo.ricker(1 / f0, f0) == 1.0                      # peak at t0
    t = np.linspace(0, 2 / f0, 2001)
    r = np.array([halo.ricker(x, f0) for x in t])
    assert r.argmax() == 1000 and np.allclose(r, r[::-1])      # symmetric about t0
    zero = 1 / f0 + 1 / (np.pi * f0 * np.sqrt(2))              # where 1 - 2a = 0
    assert abs(halo.ricker(zero, f0)) < 1e-12


def test_serial_wave_conserves_energy_after_the_source():
    # with rigid walls the discrete energy of the leapfrog scheme stays put once the
    # Ricker source has died away: a check that the reference is a wave at all
    def energy(n):
        p, vx, vy = halo.serial_wave(30, 24, n, f0=0.1, fields=True)
        return (p ** 2).sum() + (vx ** 2).sum() + (vy ** 2).sum()

    e1, e2 = energy(200), energy(400)
    assert e1 > 0 and abs(e2 - e1) / e1 < 0.05


def test_serial_wave_is_symmetric_about_a_central_source():
    p = halo.serial_wave(21, 21, 30, f0=0.1)       # source at (10, 10)
    assert np.allclose(p, p.T, atol=1e-14)


def test_serial_wave_rejects_bad_arguments():
    with pytest.raises(ValueError):
        halo.serial_wave(10, 10, 5, courant=1.0)
    with pytest.raises(ValueError):
        halo.serial_wave(10, 10, 5, source=(3, 10))
    with pytest.raises(TypeError):
        halo.serial_wave(10, 10, 5, f0=None)
    with pytest.raises(ValueError):
        halo.serial_wave(10, 10, -1)


def test_process_grid_is_what_mpi_dims_create_gives():
    # MPI_Dims_create(n, 2) of Open MPI and MPICH: as square as possible, larger factor first
    known = {1: (1, 1), 2: (2, 1), 3: (3, 1), 4: (2, 2), 5: (5, 1), 6: (3, 2), 7: (7, 1),
             8: (4, 2), 9: (3, 3), 12: (4, 3), 16: (4, 4), 18: (6, 3), 32: (8, 4), 36: (6, 6)}
    assert {n: halo.process_grid(n) for n in known} == known
    for bad in (0, -1, 2.0, True, "4"):
        with pytest.raises(ValueError, match="ranks must be a positive integer"):
            halo.process_grid(bad)


def test_k_row_gives_times_ratios_to_blocking_and_invalid_marks():
    """One row of a K table (halo.k1.table and bench.coarray.table print them)."""
    from mpilab.halo.k1 import k_row

    by = {("blocking", 16): {"t_us_median": 30.0, "t_us_min": 20.0, "valid": True},
          ("overlap", 16): {"t_us_median": 20.0, "t_us_min": 16.0, "valid": False}}
    row = k_row(by, 16, ["blocking", "nonblocking", "overlap"], ["nonblocking", "overlap"],
                widths=(5, 7, 6))
    # sub, then a time per mode (- where none), then per ratio mode: median and min ratio
    assert row == (" 16^2" + "   30.00" + "       -" + "   20.00"
                   + "      -      -" + "  1.500   1.25" + "  INVALID: overlap")
