"""Shared fixtures: skip clearly without MPI, one 4-rank cluster per session, leak checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mpilab import runtime

ROOT = Path(__file__).resolve().parent.parent


def _has_mpi() -> str | None:
    try:
        runtime.mpiexec()
        runtime.mpicc()
    except runtime.MPINotFound as exc:
        return str(exc)
    return None


NO_MPI = _has_mpi()
needs_mpi = pytest.mark.skipif(NO_MPI is not None, reason=f"no MPI: {NO_MPI}")


def mpirun(script: str, ranks: int, *args: str, transport: str = "shm",
           timeout: float = 180) -> subprocess.CompletedProcess:
    """Run tests/mpi/<script> on `ranks` processes; the completed process."""
    launch = runtime.launch(ranks, transport)
    argv = launch.argv([sys.executable, str(ROOT / "tests" / "mpi" / script), *args])
    return subprocess.run(argv, env=launch.full_env(), capture_output=True, text=True,
                          timeout=timeout, start_new_session=True)


@pytest.fixture(scope="session")
def lab():
    """A 4-rank cluster (oversubscribed on 2 cores) shared by the tests that only run code."""
    if NO_MPI:
        pytest.skip(f"no MPI: {NO_MPI}")
    from mpilab import cluster

    c = cluster.start(4, cluster_id=f"mpilab-pytest-{os.getpid()}")
    yield c
    c.stop()
    assert cluster.cluster_processes(c.cluster_id) == []
