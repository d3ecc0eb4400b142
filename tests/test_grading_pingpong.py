"""Lab 01's part E (mpilab.grading.pingpong): the fitted cost per entry, the model of a
message behind a queue with the hints for its likely slips, and the check against the
course's kernel measured on real ranks."""

from __future__ import annotations

import numpy as np
import pytest

from mpilab.grading import CheckFailed
from mpilab.grading import measured as M
from mpilab.grading import pingpong as G


def test_search_cost_fits_only_where_the_walk_shows():
    depths = [0, 64, 256, 1024, 4096]
    t_us = [0.25, 0.2, 0.55, 1.7, 6.3]  # the first two hide the walk
    slope = np.polyfit(depths[2:], t_us[2:], 1)[0] * 1e3
    assert G.search_cost(depths, t_us) == pytest.approx(slope)
    assert G.search_cost(depths, t_us) != pytest.approx(np.polyfit(depths, t_us, 1)[0] * 1e3)


def test_the_model_adds_every_entry_to_t0():
    assert G.reference_behind_us(4096, 0.25, 1.5) == pytest.approx(0.25 + 6.144)
    assert G.reference_behind_us(0, 0.4, 9.0) == 0.4


@pytest.mark.parametrize("wrong, says", [
    (lambda d, t0, c: d * c / 1e3, "t0 on top"),
    (lambda d, t0, c: t0 + d * c, "1 µs is 1000 ns"),
    (lambda d, t0, c: t0 + d * c / 1e6, "not a million"),
    (lambda d, t0, c: (t0 + d * c / 1e3) * 1e-6, "seconds"),
    (lambda d, t0, c: t0 + (d + 1) / 2 * c / 1e3, "not half of them"),
])
def test_a_wrong_model_fails_with_its_hint(wrong, says):
    with pytest.raises(CheckFailed, match=says):
        M.expect_model(wrong, "predict_behind_us", [(4096, 0.25, 1.5)],
                       G.reference_behind_us, G._behind_hint)


@pytest.mark.measures
def test_the_prediction_is_graded_against_the_kernel_measured_now(lab, monkeypatch):
    """On real ranks: the course's model passes within the tolerance (it is the model
    the measurement was made for), a model without t0's unit right fails."""
    monkeypatch.setattr(M, "cache_dir", lambda: None)  # measured now, not read back
    monkeypatch.setattr(M, "_CACHE", {})
    got = G.check_behind_queue(G.reference_behind_us, ranks=2)
    assert got["depths"] == list(G.DEPTHS) and got["ranks"] == 2 and got["bad"] == 0
    assert got["held_out_us"] > got["t0_us"] > 0 and got["cost_ns"] > 0
    lo, hi = G.BEHIND_TOLERANCE
    assert lo <= got["ratio"] <= hi
    with pytest.raises(CheckFailed, match="1 µs is 1000 ns"):
        G.check_behind_queue(lambda d, t0, c: t0 + d * c, ranks=2)
    with pytest.raises(CheckFailed, match="times the prediction"):
        G.check_behind_queue(lambda d, t0, c: 50 * (t0 + d * c / 1e3), cases=(), ranks=2)
