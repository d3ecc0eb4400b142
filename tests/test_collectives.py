"""The collective kernel: every algorithm against the library's collective, at 1 to 8 ranks.

Ranks above 2 oversubscribe the 2 cores of the course machine; the checks only compare
results and message schedules, never speed.
"""

import pytest
from conftest import mpirun, needs_mpi

from mpilab import tuning

pytestmark = needs_mpi


@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 5, 6, 7, 8])
def test_collectives_match_the_library(ranks):
    res = mpirun("check_collectives.py", ranks, "trace", timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert out.count("OK rank") == ranks, out[-4000:]


def test_models_are_labelled_predictions_and_steps_match_the_registry():
    from mpilab import collectives as C

    pr = C.predict("allgather", "bruck", 8, 1024, alpha_us=2.0, beta_MBps=1000.0)
    assert str(pr).startswith("prediction:") and "bruck allgather on 8 ranks" in pr.model
    assert pr.t_us == pytest.approx(3 * 2.0 + 7 * 1.024)
    assert C.predict("allgather", "ring", 8, 1024, 2.0, 1000.0).t_us == pytest.approx(
        7 * (2.0 + 1.024))
    df = C.predict_table("allgather", 6, [8, 1024], 1.0, 1000.0)
    assert set(df["kind"]) == {"prediction"}
    assert set(df["alg"]) == {"linear", "bruck", "ring", "neighbor_exchange"}
    with pytest.raises(ValueError, match="power-of-two"):
        C.predict("allgather", "recursive_doubling", 6, 8, 1.0, 1.0)
    assert C.ALGORITHMS["bcast"]["binomial"].steps(8) == 3
    # alltoall and reduce-scatter: pairwise and ring send one block a step for p-1
    # steps; Bruck sends p/2 blocks in each of log2 p rounds (8 ranks: 12 blocks), and
    # on 6 ranks the slots with bit k set: 3 + 2 + 2 = 7 blocks
    assert C.predict("alltoall", "pairwise", 8, 1024, 2.0, 1000.0).t_us == pytest.approx(
        7 * (2.0 + 1.024))
    assert C.predict("alltoall", "bruck", 8, 1024, 2.0, 1000.0).t_us == pytest.approx(
        3 * 2.0 + 12 * 1.024)
    assert C.predict("alltoall", "bruck", 6, 1000, 1.0, 1000.0).t_us == pytest.approx(
        3 * 1.0 + 7 * 1.0)
    assert C.predict("reduce_scatter_block", "ring", 5, 1000, 1.0, 1000.0).t_us == (
        pytest.approx(4 * 2.0))
    assert C.predict("reduce_scatter_block", "recursive_halving", 8, 1000, 1.0,
                     1000.0).t_us == pytest.approx(3 * 1.0 + 7 * 1.0)
    with pytest.raises(ValueError, match="power-of-two"):
        C.predict("reduce_scatter_block", "recursive_halving", 6, 8, 1.0, 1.0)
    assert C.admissible("reduce_scatter_block", 6) == ["ring"]
    assert C.admissible("alltoall", 5) == ["pairwise", "bruck"]
    assert tuning.library_default("allgather", 2, 8)["runs"] == "two_proc"
    assert tuning.library_default("allgather", 6, 8)["runs"] == "bruck"
    assert tuning.library_default("allgather", 48, 100000)["runs"] == "ring"
    assert "derived from Open MPI" in tuning.library_default("allgather", 4, 8)["source"]
    # the reduce rule (commutative operation), at the lectures' sizes and a few others
    reduce = {(p, n): tuning.library_default("reduce", p, n)["runs"]
              for p, n in ((2, 4), (2, 100), (3, 10240), (4, 100), (4, 10240), (8, 100),
                           (8, 10240), (64, 100), (300, 10000), (5000, 20))}
    assert reduce == {(2, 4): "rabenseifner", (2, 100): "linear", (3, 10240): "linear",
                      (4, 100): "binary", (4, 10240): "chain", (8, 100): "binary",
                      (8, 10240): "binomial", (64, 100): "binomial",
                      (300, 10000): "in-order_binary", (5000, 20): "in-order_binary"}
    with pytest.raises(ValueError, match="only the allgather, reduce, alltoall and"):
        tuning.library_default("bcast", 4, 8)
    # alltoall and reduce_scatter_block (commutative), at this machine's rank counts and
    # past them, on both sides of a few of the rules' bounds
    alltoall = {(p, n): tuning.library_default("alltoall", p, n)["runs"]
                for p, n in ((2, 1), (2, 8), (2, 100000), (4, 64), (4, 8192), (4, 600000),
                             (4, 1 << 20), (8, 64), (8, 1 << 20), (16, 256), (100, 1000),
                             (5000, 100000))}
    assert alltoall == {(2, 1): "pairwise", (2, 8): "pairwise", (2, 100000): "linear_sync",
                        (4, 64): "linear_sync", (4, 8192): "linear", (4, 600000): "pairwise",
                        (4, 1 << 20): "linear", (8, 64): "linear_sync", (8, 1 << 20): "linear",
                        (16, 256): "modified_bruck", (100, 1000): "modified_bruck",
                        (5000, 100000): "linear_sync"}
    rsb = {(p, n): tuning.library_default("reduce_scatter_block", p, n)["runs"]
           for p, n in ((2, 8), (3, 4096), (4, 64), (4, 8192), (6, 1 << 20), (8, 1 << 22),
                        (64, 8))}
    assert rsb == {(2, 8): "recursive_halving", (3, 4096): "recursive_halving",
                   (4, 64): "butterfly", (4, 8192): "butterfly",
                   (6, 1 << 20): "basic_linear", (8, 1 << 22): "butterfly",
                   (64, 8): "basic_linear"}
    assert tuning.library_env("allgather", "neighbor_exchange", "openmpi") == {
        "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
        "OMPI_MCA_coll_tuned_allgather_algorithm": "5"}
    assert tuning.library_env("allgather", "bruck", "mpich")[
        "MPIR_CVAR_ALLGATHER_INTRA_ALGORITHM"] == "brucks"
    assert tuning.library_env("alltoall", "bruck", "openmpi")[
        "OMPI_MCA_coll_tuned_alltoall_algorithm"] == "3"
    with pytest.raises(ValueError, match="Open MPI has no ring reduce_scatter_block"):
        tuning.library_env("reduce_scatter_block", "ring", "openmpi")
    with pytest.raises(ValueError, match="MPICH has no"):
        tuning.library_env("allgather", "neighbor_exchange", "mpich")


def test_collectives_on_the_cluster_engines(lab):
    """The lecture's way: module functions shipped to the engines, comm=None = world."""
    from mpilab import collectives as C
    from mpilab import tracing

    scheds = lab.run(C.trace, None, "allgather", "bruck", 64, timeout=120)
    assert all(s == scheds[0] for s in scheds)
    assert tracing.steps(scheds[0]) == 2  # 4 engines: ceil(log2 4)
    assert sum(m["bytes"] for m in scheds[0]) == 4 * 3 * 64
