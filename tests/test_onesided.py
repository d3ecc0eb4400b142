"""The one-sided heat exchange equals the serial reference at 1, 2, 3, 4 and 6 ranks.

tests/mpi/check_onesided.py runs every one-sided mode (Put + fence / PSCW / lock, shared
windows contiguous or not) under mpiexec; 3, 4 and 6 ranks oversubscribe a 2-core
machine. The benchmark is run at tiny sizes for its JSON and table (no speed asserted).
"""

import json
import math

import pytest
from bench_runs import bench
from conftest import mpirun, needs_mpi

from mpilab import halo, validate


@needs_mpi
@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 6])
def test_onesided_under_mpiexec(ranks):
    res = mpirun("check_onesided.py", ranks, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    assert out.count("OK rank") == ranks, out[-6000:]


def test_mode_lists():
    assert halo.ONESIDED_MODES == ("put-fence", "put-pscw", "put-lock", "shm", "shm-nc")
    assert halo.ALL_MODES == halo.MODES + halo.ONESIDED_MODES + halo.HYBRID_MODES
    def modes(text):
        return validate.names(text, halo.ALL_MODES, "mode", halo.MODE_GROUPS)

    assert modes("all") == list(halo.MODES)
    assert modes("sendrecv,onesided") == ["sendrecv", *halo.ONESIDED_MODES]
    with pytest.raises(ValueError, match="mode must be one of"):
        modes("put-fence,teleport")


def test_onesided_argument_errors_without_mpi_calls():
    # raised in Python before any kernel (or MPI) is reached
    with pytest.raises(ValueError, match="heat problem only"):
        halo.run_wave(None, 10, 10, 5, mode="put-fence")
    with pytest.raises(ValueError, match="pack='manual' does not apply"):
        halo.run_heat(None, 10, 10, 5, mode="shm", pack="manual")
    with pytest.raises(ValueError, match="pack='subarray' does not apply"):
        halo.run_heat(None, 10, 10, 5, mode="put-fence", pack="subarray")
    with pytest.raises(ValueError, match="no one-sided modes"):
        halo.timeline(None, "heat", 10, 10, mode="put-lock")
    with pytest.raises(ValueError, match="heat problem only"):
        halo.time_halo(None, "wave", "onesided", 8)


@needs_mpi
def test_bench_halo_onesided_json(tmp_path):
    path = tmp_path / "halo-onesided.json"
    res = bench("halo", "--app", "heat", "--mode", "sendrecv,onesided", "--sub", "8,24",
                "--ranks", "2", "--reps", "2", "--rounds", "2", "--min-time", "0.001",
                "--check-max", "300", "--json", str(path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "INVALID" not in res.stdout
    assert "T_sendrecv / T_mode" in res.stdout, res.stdout
    doc = json.loads(path.read_text())
    assert doc["meta"]["ranks"] == 2
    recs = doc["records"]
    keys = {(r["mode"], r["pack"], r["sub"]) for r in recs}
    assert keys == {(m, "datatype", s) for m in ("sendrecv", *halo.ONESIDED_MODES)
                    for s in (8, 24)}
    for r in recs:
        assert r["app"] == "heat" and r["ranks"] == 2 and r["valid"] is True
        py, px = r["dims"]
        assert py * px == 2 and (r["nx"], r["ny"]) == (r["sub"] * px, r["sub"] * py)
        assert 0 < r["t_us_min"] <= r["t_us_median"] and len(r["times_us"]) == 4
    by = {(r["mode"], r["sub"]): r["t_us_median"] for r in recs}
    for (mode, sub), t in by.items():
        ratio = by[("sendrecv", sub)] / t
        assert math.isfinite(ratio) and ratio > 0, (mode, sub)


@needs_mpi
def test_bench_halo_onesided_bad_arguments_are_clear():
    res = bench("halo", "--app", "wave", "--mode", "onesided", "--sub", "8")
    assert res.returncode == 2 and "heat problem only" in res.stderr, res.stderr
    res = bench("halo", "--mode", "put-sideways", "--sub", "8")
    assert res.returncode == 2 and "mode must be one of" in res.stderr, res.stderr
    res = bench("halo", "--mode", "onesided", "--pack", "manual", "--sub", "8")
    assert res.returncode == 2 and "pack='manual' does not apply" in res.stderr, res.stderr
