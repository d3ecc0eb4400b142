"""What the class benchmark counts as the load's doing rather than a failure
(:func:`mpilab.bench.classroom.measured_check_failed`): plain data, no class needed."""

from __future__ import annotations

import pytest

from mpilab.bench.classroom import measured_check_failed
from mpilab.bench.hub_client import CellRun

MEASURED = ("a lap of 1 MiB arrays round 2 ranks: measured 568.8 µs just now, you predicted "
            "140.3 µs; the measurement should be 0.5 to 2.5 times the prediction")
UNSTABLE = ("the measurement of ring on 2 ranks could not be made stable: in each of 3 tries "
            "of 5 rounds, a quantity's least loaded round was not confirmed by a second one")


@pytest.mark.parametrize("ename, evalue, load", [
    ("CheckFailed", MEASURED, True),  # out of its band: the load moved the measurement
    ("Ungradable", UNSTABLE, True),  # could not judge: the load kept it from settling
    ("Ungradable", MEASURED + ", it is 4.05 times. But while it was measured, its ranks "
     "waited for a CPU 47% of the time: other work ... held these cores", True),  # busy
    ("CheckFailed", "rank 1 holds rank 0's block", False),  # a wrong answer
    ("Ungradable", "no saved simulation of this case (SimGrid missing)", False),
    ("NameError", "name 'ring' is not defined", False),
    ("", "", False),
])
def test_what_the_load_did_is_told_from_a_failure(ename, evalue, load):
    run = CellRun(index=11, seconds=1.0, status="error", ename=ename, evalue=evalue)
    assert measured_check_failed(run) is load
