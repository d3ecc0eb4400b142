"""Shared fixtures: skip clearly without MPI, one 4-rank cluster per session, leak checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mpilab import jobs, runtime

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
    """Run tests/mpi/<script> on `ranks` processes; the completed process.

    Through :mod:`mpilab.jobs`, as the course runs its own jobs: a hung script is killed
    with every rank (:class:`mpilab.jobs.JobTimeout`), and nothing outlives the call.
    """
    return jobs.run(runtime.launch(ranks, transport),
                    [sys.executable, str(ROOT / "tests" / "mpi" / script), *args],
                    timeout=timeout, check=False)


@pytest.fixture(scope="session")
def _lab_session():
    if NO_MPI:
        pytest.skip(f"no MPI: {NO_MPI}")
    from mpilab import cluster

    c = cluster.start(4, cluster_id=f"mpilab-pytest-{os.getpid()}")
    yield c
    c.stop()
    assert cluster.cluster_processes(c.cluster_id) == []


@pytest.fixture
def lab(_lab_session):
    """A 4-rank cluster (oversubscribed on 2 cores) shared by the tests that only run code.

    It is made the current cluster for each test, so ``mpilab.grading`` checks run on it
    rather than starting engines of their own after another test started and stopped a
    cluster.
    """
    from mpilab import cluster

    if cluster.current() is not _lab_session:
        cluster._set_current(_lab_session)
    return _lab_session


@pytest.fixture(scope="session", autouse=True)
def _no_stale_gradings():
    """Start from a host without what killed gradings left (a run interrupted here, say):
    the tests check that a grading leaves nothing, so they must not see an older one's
    scratch folder or cgroup. The course's own clean-up does it, as the next autograde
    would."""
    from mpilab.grading.sandbox import remove_stale_cgroups, remove_stale_scratch

    remove_stale_scratch()
    if os.geteuid() == 0:
        remove_stale_cgroups()


@pytest.fixture(scope="session", autouse=True)
def no_cluster_left_behind():
    """After the whole session, no MPI cluster these tests started may still run.

    Tests name their clusters after this process's id; a check that found no current
    cluster starts one under this process's default id. Whatever is left is stopped,
    then reported as a failure.
    """
    yield
    if NO_MPI:
        return
    from mpilab import cluster

    me, default = str(os.getpid()), cluster.default_cluster_id()
    left: dict[str, list[int]] = {}
    for p in cluster.cluster_processes():
        try:
            cid = p.environ().get("IPP_CLUSTER_ID", "")
        except Exception:  # noqa: BLE001 - gone meanwhile
            continue
        if cid == default or cid.endswith(f"-{me}"):
            left.setdefault(cid, []).append(p.pid)
    for cid in left:
        cluster.MPICluster(1, "shm", cid)._kill_everything()
    assert not left, f"MPI clusters outlived the tests that started them: {left}"


def pytest_sessionfinish(session, exitstatus):
    """This process's own MPI singleton (imported kernels) must not leave a segment."""
    runtime.release_singleton_segments()


# --- Chromium through Playwright, for the JupyterLab tests (tests/jupyterlab_harness.py) ----
@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium, one per module; skips the test when it or Playwright is missing."""
    from jupyterlab_harness import chromium

    yield from chromium()


@pytest.fixture
def page(browser):
    """A fresh browser context and page for each test."""
    from jupyterlab_harness import new_page

    yield from new_page(browser)
