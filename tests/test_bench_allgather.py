"""python -m mpilab.bench allgather: runs, writes the agreed JSON, ratios finite and positive.

Tiny sizes and rank counts; wall-clock speed is never asserted (the benchmark reports it).
"""

import json
import math
import subprocess
import sys

import pytest
from conftest import needs_mpi

from mpilab import collectives, tuning

pytestmark = needs_mpi


def bench(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "mpilab.bench", "allgather", *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "ag2.json"
    res = bench("--ranks", "2", "--sizes", "8,1K", "--reps", "2", "--rounds", "1",
                "--min-time", "0.0005", "--json", str(path))
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(path.read_text()), res.stdout


def test_json_shape(two_ranks):
    doc, _ = two_ranks
    m = doc["meta"]
    for key in ("hostname", "cores", "mpi_library", "ranks", "oversubscribed", "launcher",
                "settings", "command", "summary"):
        assert key in m, key
    assert m["ranks"] == 2 and m["thread_level"] == "single"
    # every job measured how far apart its ranks leave the barrier (one job: cvar mode)
    skew = m["barrier_exit_skew"]
    assert skew["jobs"] >= 1 and 0 <= skew["us_median"] <= skew["us_max"]
    algs = collectives.admissible("allgather", 2)
    assert algs == ["linear", "bruck", "recursive_doubling", "ring", "neighbor_exchange",
                    "two_proc"]
    want = {("library:default", n) for n in (8, 1024)}
    want |= {(f"mpilab:{a}", n) for a in algs for n in (8, 1024)}
    # the library's rows: every algorithm it can be forced to (MPICH has no linear,
    # neighbor exchange or two-proc allgather)
    want |= {(f"library:{a}", n) for a in algs for n in (8, 1024)
             if tuning.library_has("allgather", a, m["mpi_library"])}
    assert {(r["impl"], r["size_bytes"]) for r in doc["records"]} == want
    for r in doc["records"]:
        for key in ("impl", "alg", "ranks", "size_bytes", "t_us_min", "t_us_median", "iters"):
            assert key in r, key
        assert r["ranks"] == 2 and 0 < r["t_us_min"] <= r["t_us_median"]
        assert len(r["times_us"]) == 2
        if r["impl"].startswith("library:") and r["impl"] != "library:default":
            if m["mpi_library"] == "openmpi":
                # forced on its own communicator through coll_tuned's MPI_T variable
                assert r["library_env"]["OMPI_MCA_coll_tuned_use_dynamic_rules"] == "1"
                number = collectives.ALGORITHMS["allgather"][r["alg"]].ompi
                assert r["library_env"]["MPI_T:coll_tuned_allgather_algorithm"] == str(number)
            else:  # MPICH: one job per algorithm, forced through its MPIR_CVAR_* variables
                assert r["library_env"] == tuning.library_env("allgather", r["alg"],
                                                                   m["mpi_library"])


def test_ratios_finite_positive_and_printed(two_ranks):
    doc, out = two_ranks
    ratios = doc["meta"]["summary"]["own_vs_library"]
    lib = doc["meta"]["mpi_library"]
    assert set(ratios) == {a for a in collectives.admissible("allgather", 2)
                           if tuning.library_has("allgather", a, lib)}
    for r in ratios.values():
        for v in [*r["by_size"].values(), r["geomean"], r["max"]]:
            assert math.isfinite(v) and v > 0
    k = doc["meta"]["summary"]["library_choice_best"]
    assert k["sizes"] == 2 and 0 <= k["strict"] <= k["within_5pct"] <= 2
    assert "library's choice was the best in" in out
    assert "own C / library, same algorithm" in out
    if lib == "openmpi":  # the documented default at 2 ranks is two_proc (Open MPI 4.1's rule)
        assert set(doc["meta"]["library_documented_default"].values()) == {"two_proc"}


def test_one_job_per_forced_algorithm_mode(tmp_path):
    path = tmp_path / "jobs.json"
    res = bench("--ranks", "2", "--sizes", "64", "--algs", "ring", "--mode", "jobs",
                "--reps", "3", "--rounds", "1", "--min-time", "0.0005", "--json", str(path))
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(path.read_text())
    assert doc["meta"]["settings"]["mode"] == "jobs"
    impls = {r["impl"]: r for r in doc["records"]}
    assert set(impls) == {"library:default", "mpilab:ring", "library:ring"}
    lib = doc["meta"]["mpi_library"]
    want = ({"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
             "OMPI_MCA_coll_tuned_allgather_algorithm": "4"} if lib == "openmpi"
            else tuning.library_env("allgather", "ring", lib))
    assert impls["library:ring"]["library_env"] == want
    ratio = doc["meta"]["summary"]["own_vs_library"]["ring"]["by_size_paired"]["64"]
    assert math.isfinite(ratio) and ratio > 0


def test_inadmissible_algorithm_is_a_clear_error():
    res = bench("--ranks", "3", "--algs", "recursive_doubling", "--sizes", "8")
    assert res.returncode == 2
    assert "power-of-two" in res.stderr


def test_decision_table_and_rules_file(two_ranks, tmp_path):
    doc, _ = two_ranks
    table = tuning.decision_table(doc["records"])
    assert [(r["ranks"], r["size_bytes"]) for r in table["rules"]] == [(2, 8), (2, 1024)]
    for r in table["rules"]:
        assert r["best"] in collectives.admissible("allgather", 2)
        assert r["t_us_best"] == min(r["t_us"].values())
        # measured in another job: the default may even beat the best forced one
        assert math.isfinite(r["library_default_vs_best"]) and r["library_default_vs_best"] > 0
        # the rule applied: the best only beyond the noise, else the library's own choice
        assert r["choice"] == (r["best"] if r["switch"] else r["library_documented_choice"])
    path = tuning.write_ompi_rules(table, tmp_path / "rules.conf")
    nums = [line.split("#")[0].split() for line in path.read_text().splitlines()]
    assert nums[:4] == [["1"], ["0"], ["1"], ["2"]]  # 1 collective, allgather, 1 size, p=2
    assert nums[4] == ["2"] and nums[5][0] == "0" and nums[6][0] == "2048"


def test_library_run_keeps_the_given_iterations_and_environment():
    """library_run: the library's own choice in one job, at iteration counts given."""
    env = {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1"}
    recs = tuning.library_run(2, [8, 1024], env, iters={8: 40, "1024": 20}, reps=2, rounds=1,
                              timeout=120, label="tuned")
    assert [(r["size_bytes"], r["iters"]) for r in recs] == [(8, 40), (1024, 20)]
    for r in recs:
        assert r["impl"] == "tuned" and r["library_env"] == env and r["ranks"] == 2
        assert math.isfinite(r["t_us_median"]) and r["t_us_median"] > 0
        assert len(r["times_us"]) == 2


def _rec(impl, q1, med, q3, p=4, n=1024):
    return {"impl": impl, "ranks": p, "size_bytes": n, "t_us_q1": q1, "t_us_median": med,
            "t_us_q3": q3}


def test_the_tuner_switches_only_beyond_the_noise(tmp_path):
    """A faster median inside the default's noise keeps the library's choice; a gap
    larger than both middle halves switches (and is what the rules file applies)."""
    default = _rec("library:default", 100, 105, 110)   # Open MPI 4.1 at p=4: rec. doubling
    close = tuning.decision_table([default, _rec("library:recursive_doubling", 99, 104, 109),
                                   _rec("library:ring", 90, 95, 104)])["rules"][0]
    assert close["best"] == "ring" and not close["switch"]
    assert close["choice"] == "recursive_doubling" == close["library_documented_choice"]
    assert "within the noise" in close["why"]
    far = tuning.decision_table([default, _rec("library:ring", 90, 95, 104),
                                 _rec("library:bruck", 55, 60, 70)])["rules"][0]
    assert far["best"] == far["choice"] == "bruck" and far["switch"]
    assert "beyond the noise" in far["why"]
    same = tuning.decision_table([default, _rec("library:recursive_doubling", 40, 50, 60)])
    assert same["rules"][0]["choice"] == "recursive_doubling" and not same["rules"][0]["switch"]
    rules = tuning.write_ompi_rules({"op": "allgather", "rules": [close]}, tmp_path / "r")
    assert rules.read_text().splitlines()[5].split()[1] == "3"  # recursive doubling's id
    assert tuning.beyond_noise(_rec("a", 1, 2, 3), _rec("b", 4, 5, 6))
    assert not tuning.beyond_noise(_rec("a", 1, 2, 4), _rec("b", 4, 5, 6))

