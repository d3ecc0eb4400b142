"""The compiled kernels: message integrity, sizes, argument errors, at 2, 3 and 4 ranks."""

import pytest
from conftest import mpirun, needs_mpi

pytestmark = needs_mpi


@pytest.mark.parametrize("ranks", [2, 3, 4])  # 3 and 4 oversubscribe 2 cores
def test_kernels_under_mpiexec(ranks):
    res = mpirun("check_kernels.py", ranks)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert out.count("OK rank") == ranks, out[-4000:]


def test_kernels_over_tcp():
    res = mpirun("check_kernels.py", 2, transport="tcp")
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]


def test_missing_kernel_is_a_clear_error():
    import mpilab.kernels as k

    with pytest.raises(AttributeError):
        k.no_such_kernel  # noqa: B018
    with pytest.raises(FileNotFoundError, match="make kernels"):
        k.program("no-such-program")
