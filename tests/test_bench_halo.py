"""python -m mpilab.bench halo / stencil-sweep: run at tiny sizes, write the agreed JSON.

Wall-clock speed is not tested here; the benchmarks report it. Only that the ratios
they print are finite and positive, and that every result was checked (valid).
"""

import json
import math

import pytest
from bench_runs import bench
from conftest import needs_mpi

from mpilab import netlab

pytestmark = needs_mpi
NETLAB = netlab.available()


@pytest.fixture(scope="module")
def halo_json(tmp_path_factory):
    out = {}
    for app, ranks in (("heat", 2), ("wave", 3)):   # 3 ranks oversubscribe 2 cores
        path = tmp_path_factory.mktemp("bench") / f"halo-{app}.json"
        res = bench("halo", "--app", app, "--mode", "all", "--pack", "all", "--sub", "8,24",
                    "--ranks", str(ranks), "--reps", "2", "--rounds", "2", "--min-time",
                    "0.001", "--check-max", "300", "--json", str(path))
        assert res.returncode == 0, res.stdout + res.stderr
        assert "K1 b/nonbloc" in res.stdout and "INVALID" not in res.stdout
        out[app] = json.loads(path.read_text())
    return out


def test_halo_json_shape(halo_json):
    for app, ranks in (("heat", 2), ("wave", 3)):
        doc = halo_json[app]
        for key in ("hostname", "cores", "mpi_library", "ranks", "oversubscribed", "launcher",
                    "settings", "command"):
            assert key in doc["meta"], key
        assert doc["meta"]["ranks"] == ranks
        assert doc["meta"]["oversubscribed"] == (ranks > doc["meta"]["cores"])
        assert doc["meta"]["thread_level"] == "single"
        skew = doc["meta"]["barrier_exit_skew"]  # measured before the repetitions
        assert skew["jobs"] == 1 and 0 <= skew["us_median"] <= skew["us_max"]
        keys = {(r["mode"], r["pack"], r["sub"]) for r in doc["records"]}
        assert keys == {(m, p, s) for m in ("blocking", "sendrecv", "nonblocking", "overlap",
                                            "overlap-test", "persistent", "neighbor")
                        for p in ("datatype", "manual", "subarray") for s in (8, 24)}
        for r in doc["records"]:
            assert r["app"] == app and r["ranks"] == ranks
            py, px = r["dims"]
            assert py * px == ranks and (r["nx"], r["ny"]) == (r["sub"] * px, r["sub"] * py)
            assert r["valid"] is True
            assert 0 < r["t_us_min"] <= r["t_us_median"]
            assert len(r["times_us"]) == 4              # 2 repetitions x 2 rounds
        # sub 24 on 2-3 ranks is past --check-max: checked another way, still valid
        assert any(r["nx"] * r["ny"] > 300 for r in doc["records"])


def test_halo_ratios_are_sane(halo_json):
    for doc in halo_json.values():
        by = {(r["mode"], r["pack"], r["sub"]): r["t_us_median"] for r in doc["records"]}
        for (_mode, pack, sub), t in by.items():
            k1 = by[("blocking", pack, sub)] / t
            assert math.isfinite(k1) and k1 > 0


@pytest.mark.skipif(NETLAB is not None, reason=f"no emulated nodes: {NETLAB}")
def test_halo_hybrid_across_emulated_nodes(tmp_path):
    """``bench halo --nodes 2 --mode blocking,nonblocking,hybrid``: checked, placed, and
    the S/R / hybrid table printed with blocking standing in for sendrecv."""
    path = tmp_path / "halo-hybrid.json"
    res = bench("halo", "--nodes", "2", "--link", "unshaped", "--map-by", "slot", "--ranks",
                "4", "--mode", "blocking,nonblocking,hybrid", "--sub", "8,24", "--reps", "2",
                "--rounds", "1", "--min-time", "0.001", "--json", str(path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "INVALID" not in res.stdout and "T_blocking / T_mode" in res.stdout, res.stdout
    assert "bl/hybrid" in res.stdout
    recs = json.loads(path.read_text())["records"]
    assert {(r["mode"], r["sub"]) for r in recs} == {
        (m, s) for m in ("blocking", "nonblocking", "hybrid") for s in (8, 24)}
    for r in recs:
        assert r["valid"] is True and r["emulated"] and r["nodes"] == 2
        assert r["node_of_rank"] == [0, 0, 1, 1] and r["dims"] == [2, 2]


def test_halo_bad_arguments_are_clear():
    res = bench("halo", "--mode", "telepathy", "--sub", "8")
    assert res.returncode == 2 and "mode must be one of" in res.stderr
    res = bench("halo", "--sub", "8,x")
    assert res.returncode == 2 and "--sub takes integers" in res.stderr


def test_halo_two_sided_fields_on_the_windows_pages(tmp_path):
    """--pages 4k-pages: S/R computes on 4 KiB pages beside the windows, and every heat
    record says what its fields got (no huge page under the 4 KiB fields)."""
    path = tmp_path / "pages.json"
    res = bench("halo", "--mode", "blocking,shm", "--sub", "256", "--pages", "4k-pages",
                "--reps", "2", "--rounds", "1", "--min-time", "0.001", "--json", str(path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "two-sided fields on 4k-pages" in res.stdout, res.stdout
    doc = json.loads(path.read_text())
    assert doc["meta"]["settings"]["pages"] == "4k-pages"
    by = {r["mode"]: r for r in doc["records"]}
    assert by["blocking"]["pages"] == "4k-pages" and by["blocking"]["huge_page_share"] == 0.0
    assert by["shm"]["pages"] is None and 0.0 <= by["shm"]["huge_page_share"] <= 1.0
    assert all(r["valid"] for r in doc["records"])
    for bad in (("--app", "wave", "--pages", "4k-pages"), ("--pages", "2m"),
                ("--simulate", "shm-paper", "--pages", "4k-pages")):
        res = bench("halo", "--sub", "8", *bad)
        assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr[-2000:]


def test_stencil_sweep_json(tmp_path):
    path = tmp_path / "sweep.json"
    res = bench("stencil-sweep", "--nx", "300", "--ny", "200", "--reps", "2", "--rounds", "2",
                "--min-time", "0.002", "--json", str(path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "stencil / memcopy bandwidth" in res.stdout
    doc = json.loads(path.read_text())
    assert doc["meta"]["ranks"] == 1 and "settings" in doc["meta"]
    recs = {r["impl"]: r for r in doc["records"]}
    assert set(recs) == {"stencil", "memcopy", "store-copy"}
    for r in recs.values():
        assert (r["nx"], r["ny"]) == (300, 200)
        assert r["size_bytes"] == 2 * 8 * 300 * 200       # read old + write new
        assert 0 < r["t_us_min"] <= r["t_us_median"] and len(r["times_us"]) == 4
        assert math.isfinite(r["GBps"]) and r["GBps"] > 0
    ratio = recs["stencil"]["GBps"] / recs["memcopy"]["GBps"]
    assert math.isfinite(ratio) and ratio > 0


def test_stencil_sweep_on_both_page_kinds(tmp_path):
    """The page effect, measured: the same update on huge pages and on 4 KiB pages, the
    4 KiB arrays read back from smaps as holding no huge page."""
    path = tmp_path / "pages.json"
    res = bench("stencil-sweep", "--nx", "300", "--ny", "200", "--reps", "2", "--rounds", "2",
                "--min-time", "0.002", "--impls", "stencil,stencil-4k", "--json", str(path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "stencil on 4 KiB pages / on huge pages, time: " in res.stdout
    recs = {r["impl"]: r for r in json.loads(path.read_text())["records"]}
    assert set(recs) == {"stencil", "stencil-4k"}
    assert recs["stencil"]["pages"] == "huge-pages" and recs["stencil-4k"]["pages"] == "4k-pages"
    assert recs["stencil-4k"]["huge_page_share"] == 0
    for r in recs.values():
        assert 0 < r["t_us_min"] <= r["t_us_median"] and len(r["times_us"]) == 4
