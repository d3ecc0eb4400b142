"""The statistics behind the records, on synthetic samples: the median's confidence
interval from order statistics, the stopping rule with its cap (the tuner's test is
tests/test_tuning.py)."""

import math

import numpy as np
import pytest

from mpilab import timing


def test_median_interval_is_the_textbook_order_statistics():
    # 95 %: n = 20 -> x(6), x(15); n = 100 -> x(40), x(61) (binomial tables)
    ci = timing.median_ci(np.arange(1.0, 21.0))
    assert (ci["lo"], ci["hi"], ci["k"]) == (6.0, 15.0, 6)
    assert ci["coverage"] == pytest.approx(0.9586, abs=1e-4)
    ci = timing.median_ci(np.arange(1.0, 101.0))
    assert (ci["lo"], ci["hi"]) == (40.0, 61.0) and ci["coverage"] >= 0.95
    assert ci["rel"] == pytest.approx(21.0 / 50.5)
    # beyond 1000 repetitions scipy's binomial: the same order as the exact sum (2431)
    assert timing.median_ci(np.arange(5000.0))["k"] == 2431
    # the order of the samples does not matter
    assert timing.median_ci(np.arange(20.0, 0.0, -1.0))["lo"] == 6.0
    # under 6 repetitions no interval reaches 95 %: 2 / 2^5 = 0.0625 > 0.05
    assert timing.median_ci([1, 2, 3, 4, 5]) is None
    assert timing.median_ci([1, 2, 3, 4, 5, 6]) == {
        "lo": 1.0, "hi": 6.0, "coverage": 1 - 2 / 64, "k": 1, "n": 6, "rel": 5 / 3.5}
    with pytest.raises(ValueError):
        timing.median_ci([1.0, math.nan])
    with pytest.raises(ValueError):
        timing.median_ci([1.0, 2.0], level=1.5)


def test_median_interval_covers_the_true_median_as_often_as_stated():
    """On a skewed distribution (exponential, median ln 2) the stated 95 % holds."""
    rng = np.random.default_rng(2815)
    hits = total = 0
    for n in (8, 15, 40):
        for _ in range(1500):
            ci = timing.median_ci(rng.exponential(size=n))
            hits += ci["lo"] <= math.log(2) <= ci["hi"]
            total += 1
    assert hits / total >= 0.94


def test_every_record_carries_the_interval_of_its_median():
    r = timing.record(np.linspace(1e-6, 20e-6, 20), size_bytes=8)
    assert r["ci_level"] == 0.95
    assert (r["ci_lo_us"], r["ci_hi_us"]) == (pytest.approx(6.0), pytest.approx(15.0))
    assert r["ci_lo_us"] <= r["t_us_median"] <= r["ci_hi_us"]
    assert r["ci_rel"] == pytest.approx(9.0 / 10.5)
    few = timing.record([1e-6, 2e-6], size_bytes=8)
    assert few["ci_lo_us"] is None and few["ci_rel"] is None and few["ci_level"] == 0.95


def test_stopping_rule_stops_at_the_target_or_the_cap():
    rng = np.random.default_rng(7)

    def quiet():  # 1 % noise: a 5 % interval is reached early
        return list(1e-6 * (1 + 0.01 * rng.standard_normal(5)))

    times, st = timing.until_ci(quiet, rel=0.05, max_reps=200)
    assert st["ci_reached"] and st["ci_rel"] <= 0.05 and len(times) < 200
    assert len(times) == 5 * st["batches"] and len(times) >= 6  # an interval needs 6
    assert not timing.needs_more(times, rel=0.05, max_reps=200)

    def busy():  # a machine that doubles some repetitions: never within 1 %
        return list(1e-6 * (1 + rng.exponential(size=5)))

    times, st = timing.until_ci(busy, rel=0.01, max_reps=60)
    assert not st["ci_reached"] and st["ci_rel"] > 0.01
    assert len(times) == 60 and st["max_reps"] == 60 and st["batches"] == 12
    # the rule itself: no interval yet, too wide, reached, capped
    assert timing.needs_more([1.0] * 5, rel=0.5, max_reps=100)
    assert timing.needs_more([1, 2, 3, 4, 5, 6, 7], rel=0.5, max_reps=100)
    assert not timing.needs_more([1.0] * 7, rel=0.01, max_reps=100)
    assert not timing.needs_more([1, 2, 3, 4, 5, 6, 7], rel=0.01, max_reps=7)


def test_reference_readme_quotes_the_thread_levels_file():
    """The kept thread-level run: its intervals are those of its repetitions, and the
    README's figures are the file's."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "reference"
    doc = json.loads((root / "2core-xeon-openmpi414" / "pingpong-thread-levels.json").read_text())
    assert doc["meta"]["thread_level"] == {"single": "single", "funneled": "funneled",
                                           "multiple": "multiple"}
    by = {}
    for r in doc["records"]:
        ci = timing.median_ci(r["times_us"])
        assert (ci["lo"], ci["hi"]) == (pytest.approx(r["ci_lo_us"]), pytest.approx(r["ci_hi_us"]))
        assert r["ci_reached"] == (r["ci_rel"] <= 0.05) and r["reps"] <= 70
        by[r["impl"], r["size_bytes"], r["thread_level"]] = r
    text = " ".join((root / "README.md").read_text().split())

    def q(impl, level, unit=""):
        r = by[impl, 8, level]
        return f"{r['t_us_median']:.3f}{unit} [{r['ci_lo_us']:.3f}, {r['ci_hi_us']:.3f}]"

    k, m = "kernel", "mpi4py"
    assert (f"took {q(k, 'single', ' µs')} at `single`, {q(k, 'funneled')} at `funneled` and "
            f"{q(k, 'multiple')} at `multiple` (mpi4py {q(m, 'single')}, {q(m, 'funneled')}, "
            f"{q(m, 'multiple')})") in text
    # funneled and multiple cost more than single at 8 B: their intervals do not overlap
    assert by[k, 8, "funneled"]["ci_lo_us"] > by[k, 8, "single"]["ci_hi_us"]
    skew = doc["meta"]["barrier_exit_skew"]
    assert (f"median {skew['us_median']:.2f} µs, at most {skew['us_max']:.2f} µs over "
            f"{skew['reps_per_job']} barriers in each of {skew['jobs']} jobs, below the clock "
            f"offsets' uncertainty of {skew['clock_offset_uncertainty_us']:.2f} µs") in text
