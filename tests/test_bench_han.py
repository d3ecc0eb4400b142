"""python -m mpilab.bench han: Open MPI 5's coll/han against coll/tuned on the same ranks.

The message counts are Open MPI's own (pml monitoring); what is asserted is what the two
components' algorithms must send, not how fast they are (no wall-clock limits).
"""

import json
from pathlib import Path

import pytest
from bench_runs import bench
from conftest import needs_mpi

from mpilab import netlab, runtime
from mpilab.tuning import hierarchical

NETLAB = netlab.available()
ROOT = Path(__file__).resolve().parents[1]


def _why_no_open_mpi_5():
    if runtime.selected_library() != "openmpi":
        return f"the course uses {runtime.selected_library()}, not Open MPI"
    version = runtime.library_info()["mpi_version"]
    return None if version.startswith("5") else f"Open MPI {version}, not 5 (make test-mpi)"


def test_crossings_counts_only_pairs_on_different_nodes():
    # 4 ranks, cyclic on 2 nodes: a ring 0->1->2->3->0 crosses at every step
    ring = [[0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [1, 0, 0, 0]]
    assert hierarchical.crossings(ring, ["a", "b", "a", "b"]) == (4, 4)
    # block placement: only 1->2 and 3->0 cross
    assert hierarchical.crossings(ring, ["a", "a", "b", "b"]) == (4, 2)
    assert hierarchical.crossings(ring, ["a"] * 4) == (4, 0)
    # bytes: a message's size is counted once, on the pair that sent it
    sizes = [[0, 8, 0, 0], [0, 0, 0, 0], [16, 0, 0, 0], [0, 0, 0, 0]]
    assert hierarchical.crossings(sizes, ["a", "b", "a", "b"]) == (24, 8)


def test_measure_refuses_other_collectives():
    with pytest.raises(ValueError, match="ops must be among"):
        hierarchical.measure(4, [8], ops=("alltoall",))


def _by(doc):
    return {(r["op"], r["impl"], r["size_bytes"]): r for r in doc["records"]}


@needs_mpi
def test_on_one_host_han_steps_aside(tmp_path):
    """All ranks on one host: han disqualifies itself (no remote peers), so both
    communicators run tuned's algorithms and send the same messages, none across."""
    why = _why_no_open_mpi_5()
    if why:
        pytest.skip(why)
    path = tmp_path / "han.json"
    res = bench("han", "--ranks", "4", "--sizes", "8,4096", "--reps", "1", "--rounds", "1",
                "--min-time", "0.0005", "--json", str(path))
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(path.read_text())
    assert doc["meta"]["oversubscribed"] == (runtime.usable_cores() < 4)
    skew = doc["meta"]["barrier_exit_skew"]  # measured before the repetitions
    assert skew["jobs"] == 1 and 0 <= skew["us_median"] <= skew["us_max"]
    by = _by(doc)
    for op in hierarchical.OPS:
        for n in (8, 4096):
            han, tuned = by[(op, "han", n)], by[(op, "tuned", n)]
            assert han["messages"] == tuned["messages"] > 0
            assert han["messages_across"] == tuned["messages_across"] == 0
            assert not han["emulated"] and han["t_us_median"] > 0


@needs_mpi
@pytest.mark.skipif(NETLAB is not None, reason=f"no emulated nodes: {NETLAB}")
def test_han_crosses_the_link_once_per_node(tmp_path):
    """2 emulated nodes x 2 ranks, cyclic: han's bcast sends each byte across the link
    once (one leader to the other), tuned's flat tree twice or more; han's small
    allreduce sends 2 messages across (the two leaders), tuned's at least 4."""
    why = _why_no_open_mpi_5()
    if why:
        pytest.skip(why)
    path = tmp_path / "han-nodes.json"
    res = bench("han", "--ranks", "4", "--nodes", "2", "--link", "gige", "--map-by", "node",
                "--sizes", "8,65536", "--reps", "1", "--rounds", "1", "--min-time", "0.0005",
                "--json", str(path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "emulated nodes joined by gige" in res.stdout and "oversubscribed" in res.stdout
    doc = json.loads(path.read_text())
    s = doc["meta"]["settings"]
    assert s["emulated"] and s["nodes"] == 2 and s["node_of_rank"] == [0, 1, 0, 1]
    assert doc["meta"]["oversubscribed"] == (runtime.usable_cores() < 4)
    by = _by(doc)
    assert len(set(by[("bcast", "han", 8)]["hosts"])) == 2
    han, tuned = by[("bcast", "han", 65536)], by[("bcast", "tuned", 65536)]
    assert han["bytes_across"] == 65536 and han["messages_across"] == 1
    assert tuned["bytes_across"] >= 2 * 65536
    han, tuned = by[("allreduce", "han", 8)], by[("allreduce", "tuned", 8)]
    assert han["messages_across"] == 2 and tuned["messages_across"] >= 4
    assert all(r["emulated"] for r in doc["records"])


@needs_mpi
def test_without_open_mpi_5_it_says_so():
    if _why_no_open_mpi_5() is None:
        pytest.skip("Open MPI 5 is in use")
    res = bench("han", "--ranks", "2", "--sizes", "8", "--reps", "1", "--rounds", "1")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Open MPI 5" in res.stderr or "monitoring" in res.stderr, res.stderr


REFERENCE = ROOT / "reference" / "2core-xeon-openmpi5-pypi"
MiB = 2**20


def _reference(link, map_by):
    return json.loads((REFERENCE / f"han-{link}-{map_by}.json").read_text())


@pytest.mark.parametrize("link", ["fast-ethernet", "gige"])
def test_reference_files_say_emulated_and_oversubscribed(link):
    for map_by in ("node", "slot"):
        doc = _reference(link, map_by)
        m = doc["meta"]
        assert m["mpi_version"].startswith("5.") and m["oversubscribed"] is True
        assert m["settings"]["emulated"] and m["settings"]["link"] == link
        assert m["settings"]["map_by"] == map_by and m["cores"] == 2
        assert {r["size_bytes"] for r in doc["records"]} == {
            8, 64, 512, 4096, 32768, 262144, MiB}


def test_reference_readme_quotes_the_han_files():
    text = " ".join((ROOT / "reference" / "README.md").read_text().split())
    t = {(link, m): {(r["op"], r["impl"], r["size_bytes"]): r["t_us_median"]
                     for r in _reference(link, m)["records"]}
         for link in ("fast-ethernet", "gige") for m in ("node", "slot")}

    def ratio(link, m):
        return t[(link, m)][("bcast", "tuned", MiB)] / t[(link, m)][("bcast", "han", MiB)]

    assert (f"took {ratio('fast-ethernet', 'node'):.2f}x `han`'s time over Fast Ethernet "
            f"and {ratio('gige', 'node'):.2f}x over GigE") in text
    assert (f"took {ratio('fast-ethernet', 'slot'):.2f}x (Fast Ethernet) and "
            f"{ratio('gige', 'slot'):.2f}x (GigE) of `han`'s") in text
    small = [v for run in t.values() for (op, _, n), v in run.items() if n == 8]
    assert f"from {min(small):.1f} µs to {max(small) / 1e3:.0f} ms" in text
