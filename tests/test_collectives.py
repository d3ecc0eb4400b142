"""The collective kernel: every algorithm against the library's collective, at 1 to 8 ranks.

Ranks above 2 oversubscribe the 2 cores of the course machine; the checks only compare
results and message schedules, never speed.
"""

import pytest
from conftest import mpirun, needs_mpi

pytestmark = needs_mpi


@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 5, 6, 7, 8])
def test_collectives_match_the_library(ranks):
    res = mpirun("check_collectives.py", ranks, "trace", timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert out.count("OK rank") == ranks, out[-4000:]
