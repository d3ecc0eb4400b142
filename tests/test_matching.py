"""Message matching: the compiled kernel (messages matched past queued entries arrive
intact, at 2 and 3 ranks, over shared memory and TCP), its model fit, and
``python -m mpilab.bench matching`` (runs, JSON, sane ratios; no wall-clock limits)."""

import json

import pytest
from bench_runs import bench
from conftest import mpirun, needs_mpi

from mpilab import pingpong, runtime

pytestmark = needs_mpi


@pytest.mark.parametrize("ranks", [2, 3])  # 3 oversubscribes 2 cores
def test_matching_kernel_under_mpiexec(ranks):
    res = mpirun("check_matching.py", ranks)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert out.count("OK rank") == ranks, out[-4000:]


def test_matching_kernel_over_tcp():
    res = mpirun("check_matching.py", 2, transport="tcp")
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]


def test_fit_search_is_the_least_squares_line():
    assert pingpong.fit_search([0, 100, 1000], [0.5, 0.8, 3.5]) == pytest.approx((0.5, 3.0))
    base, cost = pingpong.fit_search([0, 1, 2, 3], [1.0, 1.1, 0.9, 1.0])
    assert cost == pytest.approx(-20.0) and base == pytest.approx(1.03)
    with pytest.raises(ValueError, match="two depths"):
        pingpong.fit_search([5, 5], [1.0, 2.0])


def test_bad_arguments_fail_cleanly():
    for args, said in ((("--depths", "20000"), "at most 16384"),
                       (("--queues", "nowhere"), "queue"),
                       (("--wildcards", "tag"), "wildcard"),
                       (("--delay-us", "-5"), "delay_us")):
        res = bench("matching", *args)
        assert res.returncode == 2 and said in res.stderr, (args, res.stderr)


@pytest.mark.measures
def test_bench_matching_json_and_sane_ratios(tmp_path):
    """Every case recorded and checked; a message behind 2048 queued entries takes longer
    than one behind none, in both queues; a late receive holds up a rendezvous send and,
    on Open MPI's shared memory with a receiver polling inside MPI, not an eager one."""
    path = tmp_path / "matching.json"
    res = bench("matching", "--depths", "0,2048", "--reps", "3", "--rounds", "2",
                "--min-time", "0.002",
                "--late-sizes", "1024,65536", "--delay-us", "300", "--json", str(path))
    assert res.returncode == 0, res.stderr
    doc = json.loads(path.read_text())
    assert doc["meta"]["settings"]["ranks"] == 2 and "per queued entry" in res.stdout
    recs = doc["records"]
    cases = {(r["queue"], r["wildcard"], r["depth"], r["size_bytes"]) for r in recs}
    assert cases == {(q, w, d, 8) for q in ("posted", "unexpected") for w in ("none", "source")
                     for d in (0, 2048)} | {(q, "none", 0, n) for q in ("late", "late-polling")
                                            for n in (1024, 65536)}
    for r in recs:
        pooled = 3 if r["queue"] in pingpong.LATE else 6  # 3 repetitions x 2 rounds
        assert r["bad"] == 0 and len(r["times_us"]) == pooled and r["t_us_min"] >= 0, r
    t = {(r["queue"], r["wildcard"], r["depth"]): r["t_us_min"] for r in recs
         if r["queue"] in pingpong.QUEUES}
    for q in pingpong.QUEUES:
        for w in pingpong.WILDCARDS:
            # 2048 entries at a nanosecond or more each, against a ping-pong of ~0.3 µs
            assert t[(q, w, 2048)] > 2 * t[(q, w, 0)], (q, w, t)
    late = {(r["queue"], r["size_bytes"]): r for r in recs if r["queue"] in pingpong.LATE}
    limit = late[("late", 1024)]["eager_limit"]
    if doc["meta"]["mpi_library"] == "openmpi" and limit:
        assert 1024 < limit < 65536, limit  # the vader BTL's default is 4096
        # a rendezvous send cannot finish before its receive is posted (300 µs after the
        # barrier; the barrier's exit skew is a few µs)
        for q in pingpong.LATE:
            assert late[(q, 65536)]["t_us_min"] > 150, late[(q, 65536)]
        # eager: the receiver's library takes the message while it polls, before the
        # receive is posted
        assert late[("late-polling", 1024)]["t_us_min"] < 100, late[("late-polling", 1024)]
    assert runtime.usable_cores() >= 2 or all(r["oversubscribed"] for r in recs)


def test_the_figure_draws_each_case_measured_and_its_model():
    from mpilab.plots import matching as figure

    recs = [{"queue": q, "wildcard": "none", "depth": d, "t_us_min": 0.3 + c * d / 1e3}
            for q, c in (("posted", 4.0), ("unexpected", 1.5)) for d in (0, 256, 1024)]
    recs.append({"queue": "late", "wildcard": "none", "depth": 0, "t_us_min": 200.0})
    ax = figure.queue_depth(recs).axes[0]
    labels = [ln.get_label() for ln in ax.get_lines()]
    assert labels == ["posted, no wildcard: model 4.00 ns per entry", "_model",
                      "unexpected, no wildcard: model 1.50 ns per entry", "_model"]
    assert "model" in ax.get_title() and "256-1024" in ax.get_title()
    with pytest.raises(ValueError, match="no record"):
        figure.queue_depth(recs[-1:])


DEEPEST = 8192


def test_the_reference_run_says_what_the_lecture_and_its_readme_say():
    """reference/2core-xeon-openmpi414/matching.json: nothing arrived wrong; from 8192
    entries every queue leaves the line through 1024-4096 upwards (lecture 01 says so), by
    1.2-1.4x (its README)."""
    import numpy as np

    from mpilab import paths

    doc = json.loads((paths.reference_dir() / "2core-xeon-openmpi414" / "matching.json")
                     .read_text())
    assert doc["meta"]["cores"] == 2 and doc["meta"]["mpi_version"] == "4.1.4"
    assert all(r["bad"] == 0 for r in doc["records"])
    t = {(r["queue"], r["wildcard"], r["depth"]): r["t_us_min"] for r in doc["records"]}
    for q in pingpong.QUEUES:
        for w in pingpong.WILDCARDS:
            fit = (1024, 2048, 4096)
            slope, base = np.polyfit(fit, [t[q, w, d] for d in fit], 1)
            assert 1.15 < t[q, w, DEEPEST] / (base + DEEPEST * slope) < 1.45, (q, w)
