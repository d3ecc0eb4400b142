"""Lab 07's references and data: the link model on traced schedules, the placement search,
the per-session cache (mpilab.grading.network and network_model; mpilab.network's own
tests are tests/test_network.py).

The model is checked against loads counted by hand for the schedules the course's own
allgathers send (traced in one MPI job), and the search against every placement.
"""

from __future__ import annotations

import os
import tempfile

import pytest

from mpilab import netlab, network
from mpilab.grading import keys, measured, network_model
from mpilab.grading import network as N

B = 1000  # bytes per rank: loads below are multiples of it


@pytest.fixture(scope="module")
def four():
    """The allgathers of the course on 4 ranks, traced (one job)."""
    return network.schedules(4, B, algs=["ring", "recursive_doubling", "bruck"])


BLOCK, CYCLIC = [0, 0, 1, 1], [0, 1, 0, 1]


def test_ring_loads_by_hand(four):
    # block: 1 -> 2 and 3 -> 0 cross, one block each way per step
    assert N.reference_loads(four["ring"], BLOCK) == [B, B, B]
    # cyclic: every message crosses; node0 sends 0 -> 1 and 2 -> 3 in each step
    assert N.reference_loads(four["ring"], CYCLIC) == [2 * B, 2 * B, 2 * B]
    assert N.reference_loads(four["ring"], [0, 0, 0, 0]) == [0, 0, 0]


def test_recursive_doubling_loads_by_hand(four):
    # step 1 swaps one block with rank ^ 1, step 2 two blocks with rank ^ 2
    assert N.reference_loads(four["recursive_doubling"], BLOCK) == [0, 4 * B]
    assert N.reference_loads(four["recursive_doubling"], CYCLIC) == [2 * B, 0]


def test_loads_count_each_direction_of_each_link_apart(four):
    # three nodes: node "x" holds ranks 0 and 1; its link carries 1 -> 2 out and 3 -> 0 in
    hosts = ["x", "x", "y", "z"]
    loads = N.reference_loads(four["ring"], hosts)
    assert loads == [B, B, B]
    # labels are any hashable value; the messages' order does not matter
    assert N.reference_loads(four["ring"][::-1], hosts) == loads


def test_predict_is_alpha_plus_load_over_beta_per_busy_step(four):
    ms = N.reference_predict_ms(four["recursive_doubling"], BLOCK, 50.0, 10.0)
    assert ms == pytest.approx((50.0 + 4 * B / 10.0) / 1e3)  # one busy step
    assert N.reference_predict_ms(four["ring"], [0] * 4, 50.0, 10.0) == 0.0


def test_best_placement_is_the_least_of_every_placement(four):
    cost, hosts = N.reference_best(four["ring"], 2)
    assert (cost, hosts) == (3 * B, BLOCK)
    cost, hosts = N.reference_best(four["recursive_doubling"], 2)
    assert (cost, hosts) == (2 * B, CYCLIC)
    placements = list(keys.key(network_model.LAB)._placements(6, 3))
    assert len(placements) == 15  # 6! / (2! 2! 2! 3!): node 0 holds rank 0, nodes unordered
    assert all(sorted(h) == [0, 0, 1, 1, 2, 2] for h in placements)


def test_placement_problems_are_named():
    assert N.placement_problem([0, 0, 1, 1], 4, 2) is None
    assert "3 entries" in N.placement_problem([0, 0, 1], 4, 2)
    assert "[3, 1]" in N.placement_problem([0, 0, 0, 1], 4, 2)
    assert "numbered" in N.placement_problem([0, 0, 2, 2], 4, 2)
    assert "list" in N.placement_problem("0011", 4, 2)


def test_fit_reference_reads_alpha_small_and_beta_large():
    n = [8, 1024, 65536, 131072, 1 << 20]
    t = [15.0, 16.0, 4000.0, 10000.0, 10000.0 + (1 << 20) - 131072]  # 1 B/µs above 128K
    a, b = N.reference_fit(n, t, 131072)
    assert a == 15.0 and b == pytest.approx(1.0)
    with pytest.raises(ValueError, match="two messages"):
        N.reference_fit(n, t, 1 << 20)


def test_without_emulated_nodes_the_checks_use_the_reference(monkeypatch):
    monkeypatch.setenv("MPILAB_NETLAB", "off")
    assert netlab.available() is not None
    assert N.link_now()["measured"] is False


def test_the_session_cache_is_kept_only_in_a_private_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the grading folder's parent
    monkeypatch.setattr(measured, "_CACHE", {})
    made = []
    assert measured.cached("x", lambda: made.append(1) or {"v": 1}) == {"v": 1}
    monkeypatch.setattr(measured, "_CACHE", {})  # a new kernel of the same session
    assert measured.cached("x", lambda: made.append(1) or {"v": 2}) == {"v": 1} and made == [1]
    d = tmp_path / f"mpilab-grading-{os.getuid()}"
    d.chmod(0o777)  # a folder others can write is not trusted
    monkeypatch.setattr(measured, "_CACHE", {})
    assert measured.cached("x", lambda: {"v": 3}) == {"v": 3}
    d.chmod(0o700)
    old = d / "x.json"
    os.utime(old, (1, 1))  # stale: older than a session
    monkeypatch.setattr(measured, "_CACHE", {})
    assert measured.cached("x", lambda: {"v": 4}) == {"v": 4}
