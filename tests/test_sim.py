"""Simulated clusters (mpilab.sim): SimGrid SMPI runs of the course's own C kernels.

Real SimGrid, real smpicc-built programs from the same sources as the real kernels: the
collectives are checked against the values every rank must hold (in C, before timing)
at several process counts, the halo kernels against the serial NumPy reference, and the
simulated times against what the platform's own latency and bandwidth imply (the
simulation must carry the platform's numbers, or every lecture's table is wrong). The
calibrated ``this-machine`` platform is compared with the real ping-pong it came from.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from conftest import ROOT, needs_mpi

from mpilab import collectives, halo, jobs, sim, tuning

pytestmark = pytest.mark.skipif(not sim.available()[0], reason=sim.available()[1])

#: The papers' machines: (nodes, cores per node) as the papers state them.
PAPER_MACHINES = {"allgather-paper": (2, 32), "deck-paper": (20, 2), "shm-paper": (64, 44),
                  "coarray-paper": (6, 32)}


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    """Programs and the calibrated platform in one cache per test session."""
    monkeypatch.setenv("MPILAB_SIM_CACHE", str(tmp_path_factory.getbasetemp() / "sim-cache"))


def mine() -> list:
    return jobs.tagged(jobs.TAG, lambda v: v.startswith(f"{os.getpid()}-"))


# --- platforms ---------------------------------------------------------------------------


def test_every_paper_platform_names_its_machine_and_a_source_for_each_number():
    assert set(PAPER_MACHINES) <= set(sim.platforms()) and "this-machine" in sim.platforms()
    for name, (nodes, cores) in PAPER_MACHINES.items():
        p = sim.platform(name)
        assert (p.nodes, p.cores) == (nodes, cores), name
        assert p.label == f"simulated (SMPI, platform {name})"
        src = p.sources()
        for attr in ("radical", "core", "bw", "lat", "loopback_bw", "loopback_lat"):
            assert src.get(attr), f"{name}: no source for {attr}"
            assert src[attr].startswith(("paper", "assumed")), f"{name}.{attr}: {src[attr]}"
        # plain latency + size / bandwidth: SMPI's default factors belong to another machine
        config = {e.get("id"): e.get("value")
                  for e in ET.parse(p.path).getroot().iter("prop") if e.get("id", "").find("/") > 0}
        assert config["smpi/lat-factor"] == "0:1" and config["smpi/bw-factor"] == "0:1"


def test_bad_names_are_clear_errors():
    with pytest.raises(ValueError, match="platform must be one of"):
        sim.platform("cray-1")
    with pytest.raises(ValueError, match="map_by"):
        sim.hostfile(sim.platform("deck-paper"), 4, "diagonal")
    with pytest.raises(ValueError, match="allgather algorithm"):
        sim.collective("allgather", ["bogus"], [8], ranks=4, platform="deck-paper")
    with pytest.raises(ValueError, match="ranks"):
        sim.run("mpilab-coll", [], ranks=0, platform="deck-paper")
    with pytest.raises(ValueError, match="one node"):
        sim.pingpong([8], platform=_one_node_platform(), across=True)
    # SMPI has no neighbourhood collectives: said, not a crash inside the simulation
    with pytest.raises(ValueError, match="does not implement MPI_Neighbor_alltoallw"):
        sim.halo("heat", ["neighbor"], ranks=4, platform="deck-paper", sub=8)
    with pytest.raises(ValueError, match="no progress rule"):
        sim.halo("heat", ["overlap-test"], ranks=4, platform="deck-paper", sub=8)


def _one_node_platform():
    p = sim.platform("deck-paper")
    return sim.Platform("one-node", p.path, 1, 2, p.prefix, p.params, p.info)


def test_placement_fills_nodes_or_deals_ranks_round_them():
    p = sim.platform("allgather-paper")
    text, nodes = sim.hostfile(p, 4, "node")
    assert nodes == [0, 1, 0, 1] and text.splitlines() == [
        "cervino-0:1", "cervino-1:1", "cervino-0:1", "cervino-1:1"]
    assert sim.hostfile(p, 40, "slot")[1] == [0] * 32 + [1] * 8
    # 128 ranks on 2 x 32 cores, as the paper ran them: 64 per node, oversubscribed
    assert sim.hostfile(p, 128, "slot")[1] == [0] * 64 + [1] * 64
    # the SHM paper's 36 of 44 cores per node
    shm = sim.platform("shm-paper")
    assert sim.hostfile(shm, 72, "slot", per_node=36)[1] == [0] * 36 + [1] * 36
    with pytest.raises(ValueError, match="need 65 nodes"):
        sim.hostfile(shm, 2305, "slot", per_node=36)
    with pytest.raises(ValueError, match="block placement"):
        sim.hostfile(shm, 4, "node", per_node=2)


def test_without_simgrid_it_says_what_to_install(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    ok, why = sim.available()
    assert not ok and "libsimgrid-dev" in why
    with pytest.raises(sim.SimUnavailable, match="smpicc"):
        sim.build("mpilab-coll")


# --- the kernels, simulated --------------------------------------------------------------


@pytest.mark.parametrize("op", sorted(sim.OUR_ALGORITHMS))
def test_every_algorithm_and_the_library_give_the_right_values(op):
    """Each run checks its result in C before timing (coll_main.c): a wrong value aborts."""
    for p in (2, 3, 5, 8):
        algs = [a for a in sim.OUR_ALGORITHMS[op]
                if collectives.ALGORITHMS[op][a].admissible(p) is None] + ["library"]
        recs = sim.collective(op, algs, [8, 1000], ranks=p, platform="deck-paper",
                              map_by="node", check=True)
        assert len(recs) == 2 * len(algs)
        assert all(r["checked"] and r["simulated"] and r["t_us_median"] > 0 for r in recs)
        assert {r["impl"] for r in recs} == {f"mpilab:{a}" for a in algs[:-1]} | {"library:ompi"}


def test_the_algorithm_codes_are_the_kernels_order():
    """sim names algorithms by their C code; the compiled kernel's list is the authority."""
    pytest.importorskip("mpi4py")
    from mpilab.kernels import collectives as kernel

    assert {op: tuple(a) for op, a in kernel.ALGORITHMS.items()} == sim.OUR_ALGORITHMS


def test_a_simulation_is_deterministic_and_carries_the_platforms_numbers():
    """Ring allgather, one rank per Fast Ethernet node: (p - 1)(α + n/β) exactly."""
    p, n = 4, 10240
    alpha, beta = 60e-6, 12.5e6  # deck-paper: 2 x 30 us, 100 Mbit/s
    a = sim.collective("allgather", ["ring"], [n], ranks=p, platform="deck-paper",
                       map_by="node", reps=3)
    b = sim.collective("allgather", ["ring"], [n], ranks=p, platform="deck-paper",
                       map_by="node", reps=3)
    assert a[0]["t_us_median"] == b[0]["t_us_median"]
    model = (p - 1) * (alpha + n / beta) * 1e6
    assert a[0]["t_us_median"] == pytest.approx(model, rel=0.05)


def test_pingpong_within_a_node_and_across_the_link():
    one = {r["size_bytes"]: r for r in sim.pingpong([8, 1 << 20], platform="deck-paper")}
    across = {r["size_bytes"]: r for r in sim.pingpong([8, 1 << 20], platform="deck-paper",
                                                       across=True)}
    assert across[8]["placement"] == "across nodes" and one[8]["placement"] == "one node"
    assert across[8]["t_us_median"] == pytest.approx(60, rel=0.05)  # 2 x 30 us
    assert across[1 << 20]["t_us_median"] == pytest.approx(60 + (1 << 20) / 12.5, rel=0.05)
    assert one[8]["t_us_median"] == pytest.approx(15, rel=0.05)  # the node's loopback
    assert all(r["label"] == sim.label("deck-paper") for r in [*one.values(), *across.values()])


def test_the_exchange_alone_is_deterministic():
    kw = dict(ranks=4, platform="coarray-paper", sub=64, compute=False, per_node=2)
    a, b = (sim.halo("wave", ["blocking", "overlap"], **kw) for _ in range(2))
    assert [r["t_us_median"] for r in a] == [r["t_us_median"] for r in b]
    assert all(r["compute"] == "not simulated" and r["t_us_median"] > 0 for r in a)


@pytest.mark.parametrize("app", ["heat", "wave"])
def test_halo_kernels_simulated_equal_the_serial_reference(app):
    recs = sim.halo(app, ["blocking", "nonblocking", "overlap"], ranks=6,
                    platform="coarray-paper", nx=40, ny=30, steps=12)
    ref = (halo.serial_heat if app == "heat" else halo.serial_wave)(40, 30, 12)
    for r in recs:
        assert r["sum"] == pytest.approx(float(np.sum(ref)), rel=1e-12, abs=1e-12), r["mode"]
        assert r["dims"] == [3, 2] and r["compute"].startswith("fixed model: ")
        assert r["point_s"] > 0


def _wave_steps_us(mode, point_s, sub=256):
    """Simulated µs per wave step, fastest repetition, 4 ranks (2 x 2) on 2 nodes, with
    the fixed compute model's `point_s` seconds per point and step given outright."""
    objs, _ = sim.run("mpilab-halo", ["wave", mode, "datatype", 2 * sub, 2 * sub, 2, 2, 2, 1,
                                      3, 2, f"{point_s:.6e}"],
                      ranks=4, platform="coarray-paper", per_node=2)
    return min(objs[0]["times"]) * 1e6


def test_the_compute_model_charges_every_mode_the_same_computing():
    """HALO_CHARGE: with a fixed cost per point the simulation is deterministic, a
    blocking step is the computing plus the blocking exchange alone, and blocking and
    nonblocking differ by no more than that exchange (the host's noise is not in it)."""
    point_s, sub = 2e-9, 256
    steps = {m: _wave_steps_us(m, point_s, sub) for m in ("blocking", "nonblocking", "overlap")}
    assert _wave_steps_us("blocking", point_s, sub) == steps["blocking"]
    ex = {r["mode"]: r["t_us_min"]
          for r in sim.halo("wave", ["blocking", "nonblocking"], ranks=4, sub=sub, per_node=2,
                            platform="coarray-paper", compute=False)}
    computing = point_s * sub * sub * 1e6  # 131 µs a step on every rank
    assert steps["blocking"] == pytest.approx(computing + ex["blocking"], rel=0.01)
    assert 0 <= steps["blocking"] - steps["nonblocking"] <= 1.05 * ex["blocking"]
    assert steps["overlap"] <= steps["nonblocking"]
    # no charge: the exchange alone (the host time of the loops is not counted)
    assert _wave_steps_us("blocking", 0.0, sub) == pytest.approx(ex["blocking"], rel=0.01)


def test_compute_cost_is_a_positive_time_per_point_and_bad_models_are_refused():
    cost = sim.compute_cost("heat", 64, 64, platform="coarray-paper")
    assert 0 < cost < 1e-6  # seconds per point and step: a microsecond would be absurd
    with pytest.raises(ValueError, match="compute must be"):
        sim.halo("heat", ["blocking"], ranks=2, platform="coarray-paper", sub=8, compute="x")


def test_separated_collectives_time_one_call_at_a_time():
    """Back to back, binomial broadcasts overlap (the root starts the next before the
    last has reached every rank); timed one call at a time after a barrier they do not."""
    kw = dict(ranks=8, platform="deck-paper", map_by="node")
    b2b, = sim.collective("bcast", ["binomial"], [100], **kw)
    sep, = sim.collective("bcast", ["binomial"], [100], separated=True, **kw)
    assert (b2b["timing"], sep["timing"]) == ("back-to-back", "separated")
    assert sep["t_us_median"] > 1.5 * b2b["t_us_median"]


def test_the_library_choice_is_open_mpis_rule_at_62_processes():
    """SMPI's port of Open MPI's decision, named by the forced run with the same time."""
    sizes = [32, 2048, 131072]
    recs, summary = sim.allgather(62, sizes, platform="allgather-paper", reps=1,
                                  algs=["bruck", "ring"])
    for n in sizes:
        assert summary[n]["library_choice"] == tuning.library_default("allgather", 62, n)[
            "decision"], n
    assert {r["impl"] for r in recs} >= {"mpilab:bruck", "mpilab:ring", "library:ompi",
                                        "library:rdb", "library:ring", "library:bruck"}


@pytest.mark.measures
def test_a_simulation_past_its_timeout_is_killed_with_everything_it_started():
    t0 = time.monotonic()
    with pytest.raises(jobs.JobTimeout):
        # 50 repetitions simulated in 2.96 s on a quiet machine, just inside a 3 s limit:
        # ten times the work and a 2 s limit leave no doubt which ends first
        sim.collective("allgather", ["linear"], [1 << 19], ranks=128,
                       platform="allgather-paper", reps=500, timeout=2)
    assert time.monotonic() - t0 < 60
    assert not mine()


# --- this machine ------------------------------------------------------------------------


@pytest.mark.measures
@needs_mpi
def test_this_machine_is_calibrated_from_its_own_pingpong():
    """The platform written from a real ping-pong makes SMPI reproduce the fitted model, and
    the simulation is near the measurement where the two-line fit holds (35 % at 8 B, 25 %
    at 64 KiB).

    Not asserted at 1 MiB: there the one-way time leaves the caches (and the standalone
    program's buffers change page kind at 4 MiB), which two Hockney lines do not model;
    on the quiet 2-core Xeon the fit's own residual at 1 MiB was -21 to -40 % (the upper
    line is fitted mostly to cache-resident sizes) and +27 % once in CI, so a bar there
    tests the machine's cache, not the calibration. The row is still printed by the bench.
    A calibration is a measurement, and a busy moment scatters its points: the test
    calibrates again, as the course tells a student to, at most three times. (With 8
    sizes the fit often kept one line, +28 to +31 % at 8 B on a quiet machine, and one CI
    run missed 35 % three times in a row; the 18 sizes of CALIBRATION_SIZES find the bend.)"""
    sizes = [8, 65536, 1 << 20]
    tries = []
    for _ in range(3):  # a calibration is a measurement: lecture 06 says to redo one made
        cal = sim.calibrate()  # on a busy moment, and so does this test, up to three times
        fit = cal["fit"]
        rows = sim.check_this_machine(sizes, measured=cal["measured"])
        assert [r["size_bytes"] for r in rows] == sizes
        for r in rows:  # SMPI runs the platform's model: the fit's own time, to a few percent
            assert r["simulated_us"] == pytest.approx(float(fit.time_us(r["size_bytes"])),
                                                      rel=0.05), (r, fit.model)
        tries.append((fit.model, [(r["size_bytes"], round(r["error"], 3)) for r in rows]))
        # 8 B and 64 KiB: inside the lines' range, fitted from those sizes. 8 B gets 35 %:
        # the small-message line is a least-squares line through a curve, and its intercept
        # lies above the smallest size where the curve bends (Debian 13's Open MPI 5.0.7:
        # 8 B 0.28, 64 B 0.34, 512 B 0.63 µs; with 8 sizes α was fitted at 0.32-0.37,
        # +28 to +29 % in 3 calibrations). A bandwidth or latency written 2x wrong is
        # still -50 % or +100 %.
        if abs(rows[0]["error"]) <= 0.35 and abs(rows[1]["error"]) <= 0.25:
            break
    else:
        pytest.fail("no calibration of three within 35 % at 8 B and 25 % at 64 KiB: "
                    f"{tries}")
    text = sim.platform("this-machine").path.read_text()
    assert "calibrated" in text and "measured" in text and fit.model in text


@needs_mpi
def test_the_standalone_programs_run_on_real_mpi_too():
    from mpilab import kernels, runtime

    res = jobs.run(runtime.launch(3), [str(kernels.program("mpilab-coll")), "allgather", "2",
                                       "uint8", "0", "1", "2", "1", "16:3"], timeout=120)
    out = json.loads(res.stdout.splitlines()[0])
    assert out["checked"] is True and out["size_bytes"] == 16
    res = jobs.run(runtime.launch(2), [str(kernels.program("mpilab-halo")), "heat",
                                       "nonblocking", "datatype", "40", "30", "1", "2", "12",
                                       "1", "2", "2"], timeout=120)
    out = json.loads(res.stdout.splitlines()[0])
    assert out["sum"] == pytest.approx(float(np.sum(halo.serial_heat(40, 30, 12))), rel=1e-12)


# --- the bench ---------------------------------------------------------------------------


def _bench(*args, tmp_path):
    out = tmp_path / "out.json"
    res = subprocess.run([sys.executable, "-m", "mpilab.bench", *args, "--json", str(out)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    return res.stdout, json.loads(out.read_text())


def test_bench_pingpong_simulated_on_a_paper_machine(tmp_path):
    text, doc = _bench("pingpong", "--simulate", "deck-paper", "--sizes", "8,1048576",
                       tmp_path=tmp_path)
    assert doc["meta"]["simulated"] is True and doc["meta"]["platform"] == "deck-paper"
    assert "lat" in doc["meta"]["platform_params"] and doc["meta"]["leaves_out"]
    assert {r["placement"] for r in doc["records"]} == {"one node", "across nodes"}
    assert all(r["simulated"] and r["platform"] == "deck-paper" for r in doc["records"])
    assert "simulated (SMPI, platform deck-paper)" in text and "not a measurement" in text


def test_bench_allgather_and_halo_simulated(tmp_path):
    text, doc = _bench("allgather", "--simulate", "allgather-paper", "--ranks", "8",
                       "--sizes", "32,128K", tmp_path=tmp_path)
    assert doc["meta"]["label"] == sim.label("allgather-paper")
    assert {"mpilab:bruck", "mpilab:ring", "library:ompi"} <= {r["impl"] for r in doc["records"]}
    assert "library's choice" in text and "of 2 sizes" in text
    text, doc = _bench("halo", "--simulate", "coarray-paper", "--app", "wave", "--ranks", "4",
                       "--mode", "blocking,nonblocking", "--sub", "16,64", tmp_path=tmp_path)
    assert all(r["valid"] and r["reference_sum"] is not None for r in doc["records"])
    assert "K1" in text and "simulated (SMPI, platform coarray-paper)" in text
