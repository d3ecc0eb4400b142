"""Shared fixtures: skip clearly without MPI, one 4-rank cluster per session, leak checks;
the phases and groups `make test` runs the suite in (pytest-xdist)."""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mpilab import jobs, runtime
from mpilab.autograder import quiet

ROOT = Path(__file__).resolve().parent.parent

# The helper modules tests share (not test modules: none imports another test module)
# whose asserts fail tests: rewritten as the test modules' are, so a failure shows values.
pytest.register_assert_rewrite("grading_batch", "jupyterlab_harness", "lab_grading",
                               "repo2docker_probe", "side_by_side_grading")

# --- three phases (make test): side by side, graded timings side by side, then alone ------
# Most tests wait (nbgrader, kernels, engines, deadlock timeouts), so `make test` runs the
# suite in pytest-xdist workers, a test module (or group) at a time per worker:
#  1. every test not marked: nothing may measure. mpilab.autograder.quiet refuses a
#     measurement (MPILAB_MEASURING=forbidden, inherited by every process a test starts),
#     so a test that measures without its mark fails instead of timing its neighbours;
#  2. `graded_timing`: gradings scored against a measurement the grader makes itself,
#     under the grading lock (mpilab.autograder.quiet: the measurement waits for the others'
#     gradings to pause), side by side with each other only (TEST_JOBS_GRADED modules
#     at once: the Makefile says why three is safe);
#  3. `measures` (timings compared by the test itself: benchmarks, lectures, emulated
#     links, the wall time of its own run; and nbgrader validate, whose solution cells do
#     not take the lock): one process, nothing beside it.
# MPILAB_TEST_PHASE=graded-timing (make test, phase 2) says which of 1 and 2 a worker runs.
XDIST_WORKER = "PYTEST_XDIST_WORKER"  # a worker's name (gw0, ...), in its environment
SIDE_BY_SIDE = bool(os.environ.get(XDIST_WORKER))
# Which pytest process runs a test: every process a test starts inherits it, so a check for
# leftovers can tell its own processes from those of tests running beside it (other
# xdist workers, CI's side-by-side suites of the MPIs from PyPI).
TEST_PROCESS = "MPILAB_TEST_PROCESS"
os.environ[TEST_PROCESS] = str(os.getpid())
GRADED_PHASE = os.environ.get("MPILAB_TEST_PHASE") == "graded-timing"
if SIDE_BY_SIDE and not GRADED_PHASE:
    os.environ["MPILAB_MEASURING"] = quiet.FORBIDDEN

def pytest_sessionstart(session):
    """Each session measures afresh: the measurements graders keep for 15 minutes
    (mpilab.grading.measured) are removed, so one phase never grades against another's."""
    if SIDE_BY_SIDE:
        return
    from mpilab.grading import measured

    d = measured.cache_dir()
    for f in d.glob("*" + measured.MEASURED_SUFFIX) if d else ():
        f.unlink(missing_ok=True)


# A worker runs a whole group at a time: a test module, or the modules that execute the same
# lecture (tests/lecture_runs.py `executed`, once per process), the lecture's tests of
# test_lectures.py with them. The groups come from the test ids, in a scheduler of ours
# (xdist's `loadgroup` marks do not group with pytest 9.2: pytest-xdist#1386).
LECTURE_GROUPS = {
    "03-one-sided": "lecture-03", "04-coarrays": "lecture-04",
    "05-collectives-trees": "lectures-05-06", "06-allgather": "lectures-05-06",
}
MODULE_GROUPS = {
    "test_lecture_03": "lecture-03", "test_sim_lecture_02_03": "lecture-03",
    "test_lecture_04": "lecture-04",
    "test_lecture_05_06": "lectures-05-06", "test_sim_lecture_05": "lectures-05-06",
    "test_sim_lecture_06": "lectures-05-06",
}
# Modules of long, independent tests, each test function a group (its module's fixtures are
# made once per worker that runs one of them).
SPLIT_MODULES = {"test_grading_hostile"}
# The longest groups start first (seconds side by side, roughly): a phase ends with its
# longest worker.
LONG_FIRST = ["test_grading_hostile::test_every_lab_survives_its_hostile_submission",
              "lecture-04", "test_lab07", "lectures-05-06",
              "test_labs", "test_lab05_06", "test_coarrays", "test_lab03", "test_lab04",
              "test_lab02", "lecture-03", "test_lab06_simulated", "test_netlab",
              "test_lectures"]


def group_of(nodeid: str) -> str:
    """The group of the test `nodeid` (``tests/test_x.py::test_y[param]``)."""
    path, _, name = nodeid.partition("::")
    module = Path(path).stem
    if module == "test_lectures" and "[" in name:
        return LECTURE_GROUPS.get(name.split("[", 1)[1].rstrip("]"), module)
    if module in SPLIT_MODULES:  # each test function a group of its own
        return f"{module}::{name.split('[', 1)[0]}"
    return MODULE_GROUPS.get(module, module)


def pytest_collection_modifyitems(config, items):
    """The longest groups first (the order the workers take them in)."""
    rank = {g: i for i, g in enumerate(LONG_FIRST)}
    items.sort(key=lambda it: rank.get(group_of(it.nodeid), len(rank)))  # stable


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's scheduler by scope, the scope being :func:`group_of`'s group; the
    groups in collection order (make test passes --no-loadscope-reorder)."""
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return ByGroup(config, log)


def pytest_runtest_setup(item):
    if not SIDE_BY_SIDE:
        return
    if item.get_closest_marker("measures"):
        pytest.fail("a test marked `measures` must not run beside others: run it without "
                    "pytest-xdist (make test runs these in its last phase)", pytrace=False)
    if item.get_closest_marker("graded_timing") and not GRADED_PHASE:
        pytest.fail("a test marked `graded_timing` runs beside its own kind only "
                    "(MPILAB_TEST_PHASE=graded-timing: make test's second phase)",
                    pytrace=False)


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
    from mpilab.autograder.scratch import remove_stale_cgroups, remove_stale_scratch

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


# --- where the CPU goes (issue 24: CI is bound by its 2 cores) ---------------------------
# MPILAB_CPU_LOG=file: one JSON line per test: its wall time and the CPU seconds that this
# pytest process and every process it started used meanwhile (engines, kernels, mpiexec,
# nbgrader, compilers, daemons too): each pytest process runs in a cgroup of its own
# (root and cgroup v2; else only the children it reaped count), so the suite's CPU work
# can be summed per test and module.
CPU_LOG = os.environ.get("MPILAB_CPU_LOG")


@functools.cache
def _cpu_cgroup() -> Path | None:
    """This process's own cgroup on the cgroup v2 hierarchy (the unified one of a hybrid
    machine too: no controller is needed for cpu.stat), made on first use."""
    v2 = [f[1] for f in map(str.split, Path("/proc/mounts").read_text().splitlines())
          if f[2] == "cgroup2"]
    if not v2:
        return None
    for old in Path(v2[0]).glob("mpilab-cpu-*"):  # of ended runs, if empty
        with contextlib.suppress(OSError):
            old.rmdir()
    cg = Path(v2[0]) / f"mpilab-cpu-{os.getpid()}"
    try:
        cg.mkdir(exist_ok=True)
        (cg / "cgroup.procs").write_text(str(os.getpid()))
        (cg / "cpu.stat").read_text()
    except OSError:
        return None
    return cg


def _cpu_seconds() -> tuple[float, str]:
    cg = _cpu_cgroup()
    if cg is not None:
        for line in (cg / "cpu.stat").read_text().splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6, "cgroup"
    import resource

    me, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime, "rusage"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not CPU_LOG:
        yield
        return
    import json
    import time

    w0, (c0, how) = time.monotonic(), _cpu_seconds()
    yield
    w1, (c1, _) = time.monotonic(), _cpu_seconds()
    with open(CPU_LOG, "a") as f:
        f.write(json.dumps({"test": item.nodeid, "wall": round(w1 - w0, 2),
                            "cpu": round(c1 - c0, 2), "how": how,
                            "phase": os.environ.get("MPILAB_TEST_PHASE", ""),
                            "worker": os.environ.get(XDIST_WORKER, "-")}) + "\n")


def pytest_sessionfinish(session, exitstatus):
    """This process's own MPI singleton (imported kernels) must not leave a segment."""
    runtime.release_singleton_segments()
    cg = _cpu_cgroup() if CPU_LOG else None
    if cg:  # back to where it came from, and the cgroup gone once it is empty
        with contextlib.suppress(OSError):
            (cg.parent / "cgroup.procs").write_text(str(os.getpid()))
            cg.rmdir()


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
