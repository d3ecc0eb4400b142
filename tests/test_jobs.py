"""The one job layer (mpilab.jobs): jobs end with every process and segment, on every path.

Real MPI jobs, killed for real: a job killed mid-run, a job that times out, a rank that
left the launcher's process group, a benchmark that times out, a benchmark whose own
process is killed, and a cluster stopped while its engines are busy. After each, no
process of the job and no shared-memory segment it made may remain.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, needs_mpi

from mpilab import jobs, runtime
from mpilab.runtime import leaked_shm_segments as leaked
from mpilab.runtime import shm_segments as segments

pytestmark = needs_mpi


# Every rank joins the shared-memory transport, says so, then waits forever. With an
# argument, rank 1 first starts a child that leaves the job's session (setsid): neither
# the launcher's process group nor its session reaches that one; its tag does.
HANG = """
import os, sys, time
from mpi4py import MPI
comm = MPI.COMM_WORLD
if comm.rank == 1 and len(sys.argv) > 1 and os.fork() == 0:
    os.setsid()
    while True:
        time.sleep(1)
comm.Barrier()
buf = bytearray(1 << 16)
if comm.rank == 0:
    comm.Send(buf, dest=1)
elif comm.rank == 1:
    comm.Recv(buf, source=0)
print("ready", comm.rank, flush=True)
while True:
    time.sleep(1)
"""


def mine() -> list:
    """Live processes of the jobs this test process started."""
    return jobs.tagged(jobs.TAG, lambda v: v.startswith(f"{os.getpid()}-"))


def ranks_of(job: jobs.Job) -> list:
    """The job's Python processes (the ranks, and a child that left the session)."""
    return [p for p in job.processes() if "python" in os.path.basename(p.cmdline()[0])]


def wait_for(pred, timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout:g} s for {what}")
        time.sleep(0.2)


def test_a_job_runs_to_completion_and_returns_its_output():
    res = jobs.run(runtime.launch(2), [sys.executable, "-c",
                   "from mpi4py import MPI; c = MPI.COMM_WORLD; "
                   "print(f'rank{c.rank}={c.allreduce(c.rank + 1)};', flush=True)"],
                   timeout=120)
    assert res.returncode == 0
    # the ranks' lines arrive through mpiexec, and may interleave
    assert sorted(re.findall(r"rank(\d)=(\d+);", res.stdout)) == [("0", "3"), ("1", "3")]


def test_a_failed_job_raises_with_its_stderr_and_leaves_nothing():
    before = segments()
    with pytest.raises(jobs.JobFailed, match="rank 1 gives up") as info:
        jobs.run(runtime.launch(2), [sys.executable, "-c",
                 "import os, sys, time; from mpi4py import MPI; c = MPI.COMM_WORLD\n"
                 "c.Barrier()\n"
                 "if c.rank == 1: print('rank 1 gives up', file=sys.stderr, flush=True); "
                 "os._exit(3)\n"
                 "time.sleep(600)"], timeout=120)
    assert info.value.returncode != 0
    assert mine() == []
    assert leaked(before) == set()


@pytest.mark.parametrize("escape", [False, True], ids=["ranks", "child-left-session"])
def test_a_job_killed_mid_run_leaves_no_process_and_no_segment(escape):
    before = segments()
    launch = runtime.launch(3)  # oversubscribed on 2 cores
    job = jobs.Job(launch, [sys.executable, "-c", HANG, *(["escape"] if escape else [])])
    try:
        wait_for(lambda: len(ranks_of(job)) == 3 + escape, what="3 ranks")
        if launch.family == "openmpi":
            wait_for(lambda: segments() - before, what="the job's shared-memory segments")
        time.sleep(1.0)  # past the barrier and the message
        if escape:
            escaped = [p for p in ranks_of(job) if os.getsid(p.pid) != job.proc.pid]
            assert len(escaped) == 1, "rank 1's child should have left the job's session"
    finally:
        n = job.kill()
    assert n >= 3
    assert job.processes() == []
    assert leaked(before) == set(), "the killed job left shared-memory segments"


def test_a_timed_out_job_is_killed_with_every_rank():
    before = segments()
    with pytest.raises(jobs.JobTimeout,
                       match=r"python\S* -c on 2 ranks did not finish in 8 s") as info:
        jobs.run(runtime.launch(2), [sys.executable, "-c", HANG, "escape"], timeout=8)
    assert "ready" in info.value.stdout  # what it printed before it was killed
    assert mine() == []
    assert leaked(before) == set()


def test_a_benchmark_that_times_out_leaves_nothing():
    from mpilab import pingpong

    before = segments()
    with pytest.raises(jobs.JobTimeout):
        # 64 MiB messages for at least 10 s each: far past the 3 s allowed
        pingpong.run_pingpong([64 << 20], impls=("kernel",), min_time=10.0, timeout=3.0)
    assert mine() == []
    assert leaked(before) == set()


def test_a_killed_benchmark_process_leaves_a_job_the_next_start_ends():
    """The benchmark's job (64 MiB messages for 30 s) outlives the benchmark, killed:
    reap_orphans ends it. Any Job() started elsewhere (another test module beside this
    one) reaps orphans too and may get there first: the end state is checked, not who
    ended it or how many processes a call returned. A job whose owner lives stays."""
    before = segments()
    env = runtime.clean_env()
    # not an orphan: tagged as a job of this (live) process
    kept = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                            env={**os.environ, jobs.TAG: f"{os.getpid()}-kept"},
                            start_new_session=True)
    bench = subprocess.Popen([sys.executable, "-m", "mpilab.bench", "pingpong", "--sizes",
                              "64M", "--impls", "kernel", "--min-time", "30", "--json", "-"],
                             cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    mine = f"{bench.pid}-"

    def its_job() -> list:
        return jobs.tagged(jobs.TAG, lambda v: v.startswith(mine))

    try:
        try:
            wait_for(lambda: len(its_job()) >= 3, what="the benchmark's MPI job")
        finally:
            bench.send_signal(signal.SIGKILL)  # the benchmark cannot clean up after itself
            bench.wait()
        jobs.reap_orphans()  # this call, or another module's Job() before it
        # left alone, the job would run for 30 s more; SIGKILL is asynchronous, so the
        # processes of a reap still under way (another module's) may linger a moment
        wait_for(lambda: its_job() == [], timeout=10, what="the orphaned job to be reaped")
        assert kept.poll() is None, "reap_orphans ended a job whose owner is alive"
        assert [p.pid for p in jobs.tagged(jobs.TAG, f"{os.getpid()}-kept")] == [kept.pid]
    finally:
        kept.kill()
        kept.wait()
    assert leaked(before) == set()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="needs root and unshare for a PID namespace")
def test_a_job_in_another_pid_namespace_is_not_taken_for_an_orphan():
    """A job started inside another PID namespace (a grading sandbox, a container, a stock
    root run beside this suite) is tagged with its owner's pid as that namespace counts:
    from here the owner looks gone. reap_orphans must leave it alone; the same tag in this
    namespace is an orphan and goes."""
    ghost = f"{(1 << 22) + 7}-pytest"  # above any pid_max here: no such owner in this namespace
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    # only the sleep inside the namespace carries the tag, not unshare itself
    other = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child",
                              "env", f"{jobs.TAG}={ghost}", *sleep], start_new_session=True)
    here = subprocess.Popen(sleep, env={**os.environ, jobs.TAG: ghost}, start_new_session=True)
    try:
        # `here` is an orphan from its start: a Job() in another test module running beside
        # this one may reap it before this test does, so it is not waited for
        wait_for(lambda: [p for p in jobs.tagged(jobs.TAG, ghost) if p.pid != here.pid],
                 what="the tagged sleep in the other namespace")
        jobs.reap_orphans()  # this call, or another module's Job() before it
        # ended, whoever reaped it (left alone it sleeps 60 s); its status was collected
        # by the killer's wait when that was this process
        here.wait(timeout=10)
        left = jobs.tagged(jobs.TAG, ghost)
        assert len(left) == 1 and left[0].pid != here.pid, left
        assert other.poll() is None, "the job in the other namespace was ended"
    finally:
        for p in (other, here):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert jobs.tagged(jobs.TAG, ghost) == []


def test_a_cluster_stopped_while_busy_leaves_no_process_and_no_segment():
    from mpilab import cluster

    before = segments()
    c = cluster.start(3, cluster_id=f"mpilab-jobs-{os.getpid()}")
    try:
        ar = c.view.apply_async(time.sleep, 600)  # every engine busy
        time.sleep(1.0)
        assert not ar.ready()
        assert len(cluster.cluster_processes(c.cluster_id)) >= 4  # controller, mpiexec, 3
    finally:
        c.stop()
    assert cluster.cluster_processes(c.cluster_id) == []
    assert leaked(before) == set(), "the stopped cluster left shared-memory segments"


LAUNCHER_THAT_FAILS_ONCE = """#!/bin/sh
# stands in for a launcher (not for MPI): fails as prterun sometimes does, before any rank
# started, the first time; then runs the program, as "mpiexec -n 1 PROGRAM" would
marker="$MARKER"
if [ ! -e "$marker" ]; then
  : > "$marker"
  echo "The PMIx server's listener thread failed to start. We cannot" >&2
  echo "continue." >&2
  exit 213
fi
shift 2
exec "$@"
"""


def test_a_launcher_that_failed_before_any_rank_started_is_tried_once_more(tmp_path):
    """Open MPI 5's prterun exits 213 about once in a hundred starts here, before any rank
    ran; jobs.run starts such a job once more. A failure of the program itself is not
    retried (its ranks ran: a second run would do their work twice)."""
    fake = tmp_path / "launcher"
    fake.write_text(LAUNCHER_THAT_FAILS_ONCE)
    fake.chmod(0o755)
    marker = tmp_path / "failed-once"
    launch = runtime.Launch(ranks=1, transport="shm", exe=str(fake), args=(),
                            env={"MARKER": str(marker)}, oversubscribed=False,
                            family="openmpi")
    res = jobs.run(launch, [sys.executable, "-c", "print('ran')"], timeout=60)
    assert res.returncode == 0 and res.stdout.strip() == "ran" and marker.exists()
    marker.unlink()  # fails once more, then the program itself fails: no third try
    with pytest.raises(jobs.JobFailed) as err:
        jobs.run(launch, [sys.executable, "-c", "import sys; print('ran'); sys.exit(3)"],
                 timeout=60)
    assert err.value.returncode == 3 and err.value.stdout.strip() == "ran"
    assert not jobs.launcher_did_not_start(subprocess.CompletedProcess([], 3, "", "boom"))


def test_worker_main_runs_the_worker_or_says_how():
    """A module's ``python -m ... --worker ARGS OUT`` entry point (jobs.worker_main)."""
    called = []

    def worker(args_path, out_path):
        called.append((args_path, out_path))
        return 3

    assert jobs.worker_main(worker, "mpilab.x", ["m", "--worker", "a.json", "o.json"]) == 3
    assert called == [("a.json", "o.json")]
    for argv in (["m"], ["m", "--worker", "a.json"], ["m", "--work", "a.json", "o.json"]):
        assert jobs.worker_main(worker, "mpilab.x", argv) == (
            "usage: python -m mpilab.x --worker ARGS.json OUT.json")
    assert len(called) == 1


@pytest.mark.parametrize("module", ["mpilab.halo.k1", "mpilab.halo.progress",
                                    "mpilab.halo.stencil_sweep", "mpilab.tuning.hierarchical"])
def test_a_worker_module_without_worker_arguments_prints_its_usage(module):
    got = subprocess.run([sys.executable, "-m", module], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert got.returncode == 1
    assert got.stderr.strip() == f"usage: python -m {module} --worker ARGS.json OUT.json"
