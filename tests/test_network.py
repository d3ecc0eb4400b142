"""mpilab.network: the traced schedules it refuses, and the reference measurement of the
link (labelled, complete, and at the rate the issue asks of large messages)."""

import pytest

from mpilab import network
from mpilab.grading import network as N

B = 1000  # bytes per rank
BLOCK, CYCLIC = [0, 0, 1, 1], [0, 1, 0, 1]


def test_schedules_refuse_what_they_cannot_trace():
    with pytest.raises(ValueError, match="unknown"):
        network.schedules(4, B, algs=["carrier-pigeon"])
    with pytest.raises(ValueError, match="power-of-two"):
        network.schedules(3, B, algs=["recursive_doubling"])


def test_reference_measurement_is_labelled_and_complete():
    ref = network.reference()
    assert ref["measured"] is False and "REFERENCE DATA" in ref["source"]
    assert {r["size_bytes"] for r in ref["pingpong"]} >= {8, 131072, 1 << 20}
    assert set(ref["ring"]) == set(network.PLACEMENTS)
    assert ref["ring"]["slot"]["node_of_rank"] == BLOCK
    assert ref["ring"]["node"]["node_of_rank"] == CYCLIC
    assert ref["shaping"]["emulated"] and ref["link"] == "fast-ethernet"
    # the bar of the issue, on the reference link: large messages at 0.85-1.0 of the rate
    a, b = N.reference_fit([r["size_bytes"] for r in ref["pingpong"]],
                           [r["t_us_min"] for r in ref["pingpong"]], N.BIG_BYTES)
    assert 0.85 <= b / (ref["rate_bit_s"] / 8e6) <= 1.0
