"""CoArray, the coarray-style view over an MPI window (mpilab.coarray_view).

The behaviour is checked on real MPI processes by tests/mpi/check_coarray_view.py at 1
to 4 ranks (3 and 4 oversubscribed on 2 cores): Puts and Gets, contiguous and strided,
land where their index says after sync_all; a ring halo equals Sendrecv's; bad
arguments raise before any MPI call.
"""

import pytest
from conftest import mpirun, needs_mpi


@needs_mpi
@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_coarray_view_under_mpiexec(ranks):
    res = mpirun("check_coarray_view.py", ranks, timeout=180)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert out.count("OK rank") == ranks, out[-4000:]
    assert "FAIL" not in out


def test_images_count_from_one_in_the_docs():
    from mpilab import coarray_view

    doc = coarray_view.__doc__
    assert "from 1" in doc and "MPI_Put" in doc and "Fence" in doc
