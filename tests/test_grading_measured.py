"""The labs' graded predictions: the models, their hints, and the check against a measurement.

The checks against the machine run in the labs' autograde tests (tests/test_labs.py,
test_lab02.py, test_lab05_06.py, ...); here the parts that take plain numbers, and the
course's measurements run once on real ranks of a fresh cluster.
"""

from __future__ import annotations

import math

import pytest

from mpilab import runtime
from mpilab.grading import CheckFailed
from mpilab.grading import allgather as A
from mpilab.grading import allgather_model as AM
from mpilab.grading import collectives as C
from mpilab.grading import collectives_model as CM
from mpilab.grading import halo as H
from mpilab.grading import halo_model as HM
from mpilab.grading import measured as M
from mpilab.grading import pingpong as PM


def test_a_prediction_within_the_tolerance_passes_and_gives_the_ratio():
    assert M.expect_prediction(100.0, 130.0, tolerance=(0.5, 2.5), what="a lap",
                               model="a hop") == pytest.approx(1.3)
    assert M.expect_prediction(100, 50.0, tolerance=(0.5, 2.5), what="a lap", model="m") == 0.5


@pytest.mark.parametrize("predicted, says", [
    (130e-6, "in seconds instead of µs"),
    (0.13, "in milliseconds instead of µs"),
    (130e3, "in nanoseconds instead of µs"),
    (1000.0, "it is 0.13 times"),
    (30.0, "it is 4.33 times"),
])
def test_a_prediction_off_the_measurement_fails_and_names_a_unit_slip(predicted, says):
    with pytest.raises(CheckFailed) as exc:
        M.expect_prediction(predicted, 130.0, tolerance=(0.5, 2.5), what="a lap of 2 ranks",
                            model="a hop of 65 µs")
    text = str(exc.value)
    assert says in text, text
    assert "a lap of 2 ranks: measured 130 µs just now" in text and "a hop of 65 µs" in text
    if "times" in says:
        assert "instead of" not in text, text


@pytest.mark.parametrize("predicted, says", [
    ("12", "should be a number of µs"), (True, "should be a number of µs"),
    (None, "should be a number of µs"), (-3.0, "must be positive"),
    (math.inf, "must be positive"), (0, "must be positive"),
])
def test_a_prediction_that_is_not_a_time_fails_clearly(predicted, says):
    with pytest.raises(CheckFailed, match=says):
        M.expect_prediction(predicted, 130.0, tolerance=(0.5, 2.5), what="x", model="m")


def test_measuring_ranks_follow_the_cores():
    assert M.measuring_ranks(4, cores=2) == 2
    assert M.measuring_ranks(4, cores=16) == 4
    assert M.measuring_ranks(4, cores=1) == 2  # oversubscribed, and said so
    assert M.measuring_ranks(4) == max(2, min(4, runtime.usable_cores()))
    with pytest.raises(ValueError):
        M.measuring_ranks(1, cores=8)


def test_where_says_when_a_measurement_was_oversubscribed():
    assert M.where({"ranks": 2, "cores": 1, "oversubscribed": True}) == (
        "2 ranks on 1 core, oversubscribed")
    assert M.where({"ranks": 4, "cores": 8, "oversubscribed": False}) == "4 ranks on 8 cores"


# -- the models -------------------------------------------------------------------------


def test_bcast_model_counts_messages():
    one = 2.0 + 1000 / 1000.0
    assert C.reference_bcast_us("linear", 4, 1000, 2.0, 1000.0) == 3 * one
    assert C.reference_bcast_us("binomial", 4, 1000, 2.0, 1000.0) == 2 * one
    assert C.reference_bcast_us("binomial", 5, 1000, 2.0, 1000.0) == 3 * one
    assert C.reference_bcast_us("binomial", 2, 1000, 2.0, 1000.0) == one


@pytest.mark.parametrize("got, says", [
    (4 * 3.0, "that is the linear broadcast's p - 1"),  # binomial on 5 ranks, p - 1
    (math.log2(5) * 3.0, "round up"),
    (3 * 1.0, "also costs the latency"),
])
def test_bcast_hints_name_the_mistake(got, says):
    assert says in CM._bcast_hint(got, "binomial", 5, 1000, 2.0, 1000.0).lower()


def test_exchange_model_takes_the_busiest_rank():
    # 2 x 2 process grid of a 16 x 12 grid: blocks 6 x 8, every rank two neighbours
    assert H.reference_exchange_us(16, 12, (2, 2), 1.0, 1000.0) == pytest.approx(
        (1 + 8 * 8 / 1000) + (1 + 8 * 6 / 1000))
    # 3 x 3: the middle rank has four neighbours; its edges: rows of 33, columns of 20
    assert H.reference_exchange_us(100, 60, (3, 3), 1.0, 1000.0) == pytest.approx(
        2 * (1 + 8 * 33 / 1000) + 2 * (1 + 8 * 20 / 1000))
    # a p x 1 grid exchanges rows only; the middle ranks take in two
    assert H.reference_exchange_us(1000, 30, (3, 1), 2.0, 500.0) == pytest.approx(
        2 * (2 + 8 * 1000 / 500))


@pytest.mark.parametrize("wrong, says", [
    (lambda a, b: sum(4 * (a + 8 * n / b) for n in (33, 20)), "fewer than four neighbours"),
    (lambda a, b: 2 * (a + 33 / b) + 2 * (a + 20 / b), "8 n bytes"),
    (lambda a, b: 2 * (8 * 33 / b) + 2 * (8 * 20 / b), "latency"),
])
def test_exchange_hints_name_the_mistake(wrong, says):
    got = wrong(1.0, 1000.0)
    if "fewer" in says:  # every rank with four neighbours, with the first block's edges
        got = 2 * (1 + 8 * 34 / 1000) + 2 * (1 + 8 * 20 / 1000)
    assert says in HM._exchange_hint(got, 100, 60, (3, 3), 1.0, 1000.0)


def test_exchange_hint_for_adding_up_every_rank():
    total = sum(sum(1 + 8 * n / 1000 for n in e) for e in HM._edges(100, 60, (3, 3)))
    assert "busiest rank" in HM._exchange_hint(total, 100, 60, (3, 3), 1.0, 1000.0)


def test_allgather_model_counts_steps_and_blocks():
    one = 2.0 + 1000 / 1000.0
    assert A.reference_allgather_us("ring", 4, 1000, 2.0, 1000.0) == pytest.approx(3 * one)
    # 2 steps (1 block, then 2): 2 latencies and the 3 blocks that travel
    for alg in ("recursive_doubling", "bruck"):
        assert A.reference_allgather_us(alg, 4, 1000, 2.0, 1000.0) == pytest.approx(2 * 2.0 + 3)
    # Bruck on 5 ranks: 3 steps (1, 2, then the 1 block left)
    assert A.reference_allgather_us("bruck", 5, 1000, 2.0, 1000.0) == pytest.approx(3 * 2.0 + 4)
    assert A.reference_allgather_us("ring", 2, 1000, 2.0, 1000.0) == pytest.approx(one)


@pytest.mark.parametrize("alg, got, says", [
    ("ring", 4 * 3.0, "own block never travels"),
    ("bruck", 3 * 3.0, "ring's p - 1 steps"),
    ("recursive_doubling", 2 * 3.0, "message grows"),
    ("bruck", 2 * 2.0 + 4, "already in place"),
    ("ring", 3 * 2.0, "its bytes at β"),
])
def test_allgather_hints_name_the_mistake(alg, got, says):
    assert says in AM._allgather_hint(got, alg, 4, 1000, 2.0, 1000.0)


def test_ring_hints_name_the_mistake():
    assert "p - 1 hops" in M._lap_hint(4 * 10.0, 5, 10.0)
    assert "side by side" in M._shift_hint(5 * 10.0, 5, 10.0)


# -- the measurements, on real ranks ------------------------------------------------------


@pytest.mark.measures
def test_the_course_measurements_run_and_agree_with_their_models(lab, monkeypatch):
    """On the tests' 4-rank cluster, one rank per core (2 on 2 cores): the hop, α/β, a lap, a shift, the broadcasts and
    the exchange are measured, positive, and within the labs' tolerances of the models
    built from the same run (a sanity check of the measurement, not a speed limit)."""
    monkeypatch.setattr(M, "cache_dir", lambda: None)  # measured now, not read back
    monkeypatch.setattr(M, "_CACHE", {})
    ring, bc, ex, ag = M.ring_now(), C.bcast_now(), H.exchange_now(), A.allgather_now()
    pp = PM.pingpong_now(ranks=2)
    assert pp["sizes"] == [8, 256, 1 << 20, 4 << 20] and pp["ranks"] == 2
    lo, hi = PM.HELD_OUT_TOLERANCE
    held = pp["held_out_us"] / (pp["alpha_us"] + (4 << 20) / pp["beta_MBps"])
    assert lo <= held <= hi, pp
    lo, hi = PM.SMALL_TOLERANCE
    assert lo <= pp["small_us"] / (pp["alpha_us"] + 256 / pp["beta_MBps"]) <= hi, pp
    p = M.measuring_ranks(4)
    assert ring["ranks"] == bc["ranks"] == ex["ranks"] == p and ex["dims"] == (p, 1)
    assert ring["oversubscribed"] is (p > runtime.usable_cores())
    assert all(v > 0 for v in (ring["hop_us"], ring["lap_us"], ring["shift_us"],
                               bc["alpha_us"], bc["beta_MBps"], bc["linear_us"],
                               ex["exchange_us"]))
    lo, hi = M.RING_TOLERANCE
    assert lo <= ring["lap_us"] / (p * ring["hop_us"]) <= hi, ring
    assert lo <= ring["shift_us"] / ring["hop_us"] <= hi, ring
    want = C.reference_bcast_us("binomial", p, C.BCAST_BYTES, bc["alpha_us"], bc["beta_MBps"])
    assert C.PREDICTION_TOLERANCE[0] <= bc["binomial_us"] / want <= C.PREDICTION_TOLERANCE[1]
    want = H.reference_exchange_us(ex["nx"], ex["ny"], ex["dims"], ex["alpha_us"],
                                   ex["beta_MBps"])
    assert H.PREDICTION_TOLERANCE[0] <= ex["exchange_us"] / want <= H.PREDICTION_TOLERANCE[1]
    assert ag["ranks"] == p and ag["block_bytes"] == A.BLOCK_BYTES
    assert (ag["recursive_doubling_us"] is None) is (p & (p - 1) != 0)
    for alg in A.PREDICTED:
        if ag[f"{alg}_us"] is not None:
            want = A.reference_allgather_us(alg, p, A.BLOCK_BYTES, ag["alpha_us"],
                                            ag["beta_MBps"])
            lo, hi = A.PREDICTION_TOLERANCE
            assert lo <= ag[f"{alg}_us"] / want <= hi, (alg, ag)


@pytest.mark.measures
def test_lab06_times_the_allgathers_beside_both_ping_pongs(lab):
    """Lab 06's try-it measurement: the course's ring and recursive doubling in the same
    loop as the resent and the forwarded ping-pong, on 4 ranks (a power of two)."""
    from mpilab.grading import run_on_ranks

    out = run_on_ranks(AM._forwarding_with_allgathers, 1 << 16, ranks=4, timeout=120)
    assert all(o == out[0] for o in out)  # the slowest rank's times, on every rank
    got = out[0]
    assert got["nbytes"] == 1 << 16 and got["ranks"] == 4
    assert got["ring_us"] > got["alpha_us"] > 0 and got["recursive_doubling_us"] > 0
    three = run_on_ranks(AM._forwarding_with_allgathers, 1 << 10, ranks=3, timeout=120)[0]
    assert three["recursive_doubling_us"] is None and three["ring_us"] > 0
