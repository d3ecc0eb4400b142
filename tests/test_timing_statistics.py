"""The statistics behind the records and the tuner, on synthetic samples: the median's
confidence interval from order statistics, the stopping rule with its cap, and the
tuner's switch by a Mann-Whitney U test with Holm's correction."""

import math

import numpy as np
import pytest

from mpilab import timing, tuning


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


def test_holm_adjusts_step_down():
    adj = tuning.holm([0.01, 0.04, 0.03, 0.005])
    assert adj == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert tuning.holm([]) == [] and tuning.holm([0.2]) == [0.2]
    assert tuning.holm([0.5, 0.6, 0.9]) == pytest.approx([1.0, 1.0, 1.0])


def test_mann_whitney_is_one_sided_and_rank_based():
    fast, slow = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5], [2.0, 2.1, 2.2, 2.3, 2.4, 2.5]
    assert tuning.faster_p(fast, slow) == pytest.approx(1 / math.comb(12, 6))
    assert tuning.faster_p(slow, fast) > 0.99
    # one repetition that waited for a core changes ranks, not the verdict
    assert tuning.faster_p(fast[:-1] + [500.0], slow) < 0.05
    # ties: the normal approximation
    assert 0 < tuning.faster_p([1.0, 1.0, 2.0], [2.0, 3.0, 3.0]) < 0.2


def _rec(impl, times, p=4, n=1024):
    return timing.record([t * 1e-6 for t in times], size_bytes=n, impl=impl, ranks=p)


def test_the_tuner_switches_by_the_test_with_holm_correction():
    rng = np.random.default_rng(11)
    default = 100 + 5 * rng.standard_normal(10)  # Open MPI 4.1 at p = 4 runs rec. doubling
    clear = 60 + 5 * rng.standard_normal(10)
    table = tuning.decision_table([_rec("library:default", default),
                                   _rec("library:recursive_doubling", default + 1),
                                   _rec("library:bruck", clear)])
    rule = table["rules"][0]
    assert rule["best"] == rule["choice"] == "bruck" and rule["switch"]
    assert rule["p_value"] == pytest.approx(1 / math.comb(20, 10))  # exact: no overlap
    assert rule["p_holm"] == rule["p_value"]
    assert "Mann-Whitney" in table["test"] and "Holm" in table["test"]
    assert table["comparisons"] == 1 and "beyond the noise" in rule["why"]
    # the same draw: no difference, no switch
    same = tuning.decision_table([_rec("library:default", default),
                                  _rec("library:bruck", default - 0.5)])["rules"][0]
    assert not same["switch"] and same["choice"] == "recursive_doubling"
    assert "within the noise" in same["why"]


def test_many_comparisons_raise_the_bar():
    """A gap that one comparison accepts (p = 0.032) is noise among seven."""
    default = [100, 102, 104, 106, 108, 110]
    edge = [95, 97, 99, 101, 103, 105]  # faster, overlapping: p = 0.032 (exact)
    alone = tuning.decision_table([_rec("library:default", default),
                                   _rec("library:bruck", edge)])
    p = alone["rules"][0]["p_value"]
    assert p == pytest.approx(0.0325, abs=1e-4) and alone["rules"][0]["switch"] and alone["comparisons"] == 1
    recs = [_rec("library:default", default), _rec("library:bruck", edge)]
    for n in (2048, 4096, 8192):  # three more sizes, each with two slightly faster algorithms
        recs += [_rec("library:default", default, n=n),
                 _rec("library:bruck", [t - 0.5 for t in default], n=n),
                 _rec("library:ring", [t - 0.7 for t in default], n=n)]
    many = tuning.decision_table(recs)
    assert many["comparisons"] == 7
    first = many["rules"][0]
    assert first["p_value"] == pytest.approx(p) and first["p_holm"] == pytest.approx(7 * p)
    assert not first["switch"] and first["choice"] == "recursive_doubling"
    assert not any(r["switch"] for r in many["rules"])


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


def test_a_default_faster_than_every_algorithm_is_kept_untested():
    default = [50, 51, 52, 53, 54, 55]
    rule = tuning.decision_table([_rec("library:default", default),
                                  _rec("library:bruck", [t + 10 for t in default])])
    assert rule["comparisons"] == 0 and not rule["rules"][0]["switch"]
    assert "p_value" not in rule["rules"][0] and "at least as fast" in rule["rules"][0]["why"]
