"""The tuner (mpilab.tuning): its switch by a Mann-Whitney U test with Holm's correction on
synthetic samples, and what Open MPI runs by default, when forced and from a rules file
(observed with the library's own monitoring)."""

import math

import numpy as np
import pytest
from conftest import needs_mpi

from mpilab import runtime, timing, tuning


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


def test_a_default_faster_than_every_algorithm_is_kept_untested():
    default = [50, 51, 52, 53, 54, 55]
    rule = tuning.decision_table([_rec("library:default", default),
                                  _rec("library:bruck", [t + 10 for t in default])])
    assert rule["comparisons"] == 0 and not rule["rules"][0]["switch"]
    assert "p_value" not in rule["rules"][0] and "at least as fast" in rule["rules"][0]["why"]


@needs_mpi
@pytest.mark.skipif(runtime.selected_library() != "openmpi", reason="Open MPI pml monitoring")
def test_library_runs_its_documented_default_and_the_forced_algorithm():

    for p, n in ((4, 8), (3, 65536)):
        seen = tuning.observe_library(p, n)
        assert seen["matches"] == [tuning.library_default("allgather", p, n)["runs"]], seen
    seen = tuning.observe_library(4, 4096, env=tuning.library_env("allgather", "ring"))
    assert seen["matches"] == ["ring"], seen
    # forced inside the job, as the allgather benchmark does it
    seen = tuning.observe_library(4, 4096, force="neighbor_exchange")
    assert seen["matches"] == ["neighbor_exchange"], seen


@needs_mpi
@pytest.mark.skipif(runtime.selected_library() != "openmpi", reason="Open MPI rules files")
def test_a_written_rules_file_is_what_the_library_runs(tmp_path):

    table = {"op": "allgather", "rules": [
        {"ranks": 4, "size_bytes": 8, "best": "bruck"},
        {"ranks": 4, "size_bytes": 16384, "best": "ring"}]}
    path = tuning.write_ompi_rules(table, tmp_path / "rules.conf")
    env = tuning.rules_env(path)
    assert tuning.observe_library(4, 1024, env=env)["matches"] == ["bruck"]
    assert tuning.observe_library(4, 32768, env=env)["matches"] == ["ring"]
