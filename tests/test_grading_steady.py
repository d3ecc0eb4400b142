"""A measurement the grader stands on (mpilab.grading.steady): rounds that agree, or no grade.

The rule on planted rounds (the seam: ``steady``'s ``one_round``), then through the
course's own ``measured.measure`` on real ranks of the tests' cluster, the timed function
handing back a planted series of rounds (one per call, from a file), so an unstable
measurement is ungradable with its reason and a stable one is its rounds' medians.
"""

from __future__ import annotations

import json

import pytest

from mpilab.grading import Ungradable
from mpilab.grading import measured as M
from mpilab.grading import steady as S


def planted(series: list):
    """A one_round that hands back the planted rounds in turn, and the calls made."""
    calls = []

    def one_round():
        calls.append(1)
        return series[len(calls) - 1]

    return one_round, calls


def ring(hop, lap, shift=None):
    return {"hop_us": hop, "lap_us": lap, "shift_us": hop if shift is None else shift,
            "ranks": 2, "how": "sendrecv"}


def test_one_round_inflated_by_load_is_outvoted_by_the_two_that_agree():
    one_round, calls = planted([ring(40.0, 80.0), ring(41.0, 400.0), ring(39.0, 82.0)])
    got = S.steady("the ring", one_round)
    assert got == {"hop_us": 40.0, "lap_us": 82.0, "shift_us": 40.0, "ranks": 2,
                   "how": "sendrecv"}  # per quantity the middle round's value
    assert len(calls) == S.ROUNDS == 3


def test_rounds_that_disagree_are_measured_again_and_the_agreeing_attempt_counts():
    series = [ring(40.0, 80.0), ring(40.0, 250.0), ring(40.0, 410.0),  # 1 of 3 near 250
              ring(40.0, 81.0), ring(42.0, 79.0), ring(40.0, 300.0)]
    one_round, calls = planted(series)
    got = S.steady("the ring", one_round)
    assert got["lap_us"] == 81.0 and got["hop_us"] == 40.0
    assert len(calls) == 6


def test_a_measurement_whose_rounds_never_agree_is_ungradable_naming_the_quantity():
    series = [ring(40.0, 80.0 * k) for k in (1, 2.5, 5)] * S.ATTEMPTS
    one_round, calls = planted(series)
    with pytest.raises(Ungradable) as exc:
        S.steady("the ring on 2 ranks", one_round)
    assert len(calls) == S.ROUNDS * S.ATTEMPTS == 9  # bounded: no tenth round
    text = str(exc.value)
    assert "the ring on 2 ranks could not be made stable" in text
    assert "lap_us measured 80, 200, 400" in text and "5.00 times apart" in text
    assert "1 of 3 rounds within 1.25 times of the median 200, 2 needed" in text
    assert "not a zero" in text and "hop_us" not in text
    assert not isinstance(exc.value, AssertionError)  # not a failed check: no zero


def test_the_rule_reads_numbers_in_lists_and_leaves_other_data_alone():
    rounds = [{"sizes": [8, 1 << 20], "t_us": [0.7, 40.0, t], "name": "pp", "none": None,
               "flag": True} for t in (300.0, 330.0, 2800.0)]
    assert S.quantities(rounds[0]) == {"sizes[0]": 8.0, "sizes[1]": 1048576.0,
                                       "t_us[0]": 0.7, "t_us[1]": 40.0, "t_us[2]": 300.0}
    assert S.disagreement(rounds) is None  # 300 and 330 agree: the majority
    assert S.combine(rounds) == {"sizes": [8, 1 << 20], "t_us": [0.7, 40.0, 330.0],
                                 "name": "pp", "none": None, "flag": True}
    bad = S.disagreement([{"t_us": [1.0, t]} for t in (300.0, 600.0, 2800.0)])
    assert bad["quantity"] == "t_us[1]" and bad["agreeing"] == 1
    assert bad["spread"] == pytest.approx(2800 / 300)
    assert S.disagreement([{"x": 0.0}, {"x": 5.0}, {"x": None}]) is None  # not timings


def test_the_agreement_factor_is_the_rule_s_edge():
    at, past = [{"t": 100.0}, {"t": 125.0}, {"t": 200.0}], [{"t": 100.0}, {"t": 126.0},
                                                            {"t": 200.0}]
    assert S.disagreement(at, 1.25) is None  # 125 / 100 is within 1.25
    assert S.disagreement(past, 1.25)["quantity"] == "t"
    with pytest.raises(ValueError):
        S.steady("x", lambda: {"t": 1.0}, agree=0.9)


@pytest.mark.graded_timing  # measure() takes the grading lock, as every measurement does
def test_measure_on_real_ranks_grades_agreeing_rounds_and_refuses_disagreeing_ones(
        lab, tmp_path):
    """The course's measure() on the tests' cluster: the timed function runs on every rank
    (a barrier, then rank 0's next planted round, broadcast), one call per round."""

    def planted_rounds(comm, path):  # local: cloudpickle sends it to the ranks by value
        import json as j

        comm.Barrier()
        got = None
        if comm.Get_rank() == 0:
            with open(path) as f:
                left = j.load(f)
            got = left.pop(0)
            with open(path, "w") as f:
                j.dump(left, f)
        return comm.bcast(got, root=0)

    path = tmp_path / "rounds.json"
    path.write_text(json.dumps([{"t_us": 50.0}, {"t_us": 900.0}, {"t_us": 52.0}]))
    with M.own_session() as made:
        m = M.measure("planted-stable", planted_rounds, str(path), ranks=2)
    assert m["t_us"] == 52.0 and m["ranks"] == 2 and json.loads(path.read_text()) == []
    assert list(made.values()) == [m]

    rounds = [{"t_us": 50.0 * 3 ** (i % 3)} for i in range(S.ROUNDS * S.ATTEMPTS)]
    path.write_text(json.dumps([*rounds, {"t_us": 1.0}]))
    with M.own_session() as made:
        with pytest.raises(Ungradable, match=r"planted-unstable on 2 ranks could not be made "
                                             r"stable.*t_us measured 50, 150, 450"):
            M.measure("planted-unstable", planted_rounds, str(path), ranks=2)
        assert json.loads(path.read_text()) == [{"t_us": 1.0}]  # 9 rounds, no more
        with pytest.raises(Ungradable, match="9.00 times apart"):  # the session's verdict,
            M.measure("planted-unstable", planted_rounds, str(path), ranks=2)  # kept
        assert json.loads(path.read_text()) == [{"t_us": 1.0}]
        [kept] = made.values()
        assert "could not be made stable" in kept[M.UNGRADABLE]
