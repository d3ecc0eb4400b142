"""cluster.start(ranks, launcher="slurm") on a real one-host Slurm (scripts/slurm-local.sh).

The module starts munged, slurmctld and slurmd (root; the script installs Debian's
packages when missing), submits the controller and the engines with sbatch through
ipyparallel's Slurm launchers, runs the course's ping-pong kernel on the engines, and
stops everything again. Without root or apt-get the script says why, and the tests skip.
"""

import os
import subprocess
import sys

import cloudpickle
import numpy as np
import pytest
from conftest import ROOT, needs_mpi

from mpilab import cluster, pingpong

pytestmark = needs_mpi
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SCRIPT = ROOT / "scripts" / "slurm-local.sh"
RANKS = 4  # more than this machine's 2 cores: the engine job is overcommitted


def _script(action: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), action], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def slurm():
    """A one-host Slurm for this module; stopped after it, unless it ran before."""
    was_running = _script("status", 30).returncode == 0
    started = _script("start", 900)  # the first run may install packages
    if started.returncode == 2:
        pytest.skip(f"no one-host Slurm here: {started.stderr.strip()}")
    try:
        assert started.returncode == 0, (
            f"scripts/slurm-local.sh start failed ({started.returncode}):\n"
            f"{started.stdout}{started.stderr}")
        yield
    finally:
        if not was_running:
            stopped = _script("stop", 300)
            assert stopped.returncode == 0, stopped.stderr


@pytest.fixture(scope="module")
def lab(slurm):
    c = cluster.start(RANKS, launcher="slurm", cluster_id=f"mpilab-pytest-slurm-{os.getpid()}",
                      start_timeout=120)
    try:
        yield c
    finally:
        c.stop()
        assert cluster.cluster_processes(c.cluster_id) == []


def _job(job_id: str) -> dict:
    """``scontrol show job`` as a dict (jobs stay listed there for a while after they end)."""
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    return dict(f.split("=", 1) for f in out.split() if "=" in f)


def _active(job_ids) -> list[str]:
    """Those of `job_ids` that Slurm lists as pending, running or ending."""
    out = subprocess.run(["squeue", "-h", "-o", "%i", "-j", ",".join(job_ids)],
                         capture_output=True, text=True, timeout=30).stdout
    return [j for j in out.split() if j in job_ids]


def _jobs(c) -> list[str]:
    ids = c.info["slurm_jobs"]
    return [ids["controller"], *ids["engines"]]


def _where():
    import os

    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    return (comm.Get_rank(), comm.Get_size(), comm.allreduce(comm.Get_rank()),
            os.environ.get("SLURM_JOB_ID"))


def _roundtrip(nbytes):
    """The compiled ping-pong between ranks 0 and 1; what each rank received."""
    import numpy as np
    from mpi4py import MPI

    from mpilab.kernels import pingpong as k

    comm = MPI.COMM_WORLD
    sbuf = np.full(nbytes, comm.rank + 1, dtype=np.uint8)
    rbuf = np.zeros(nbytes, dtype=np.uint8)
    times = k.pingpong(comm, sbuf, rbuf, nbytes, rank_a=0, rank_b=1, mode="roundtrip",
                       warmup=5, iters=50, reps=3)
    return times.tolist(), np.unique(rbuf).tolist()


def test_launcher_arguments_are_checked():
    with pytest.raises(ValueError, match="launcher must be one of"):
        cluster.MPICluster(2, launcher="pbs")
    with pytest.raises(ValueError, match="emulated nodes"):
        cluster.MPICluster(2, launcher="slurm", nodes=2)
    with pytest.raises(ValueError, match="for launcher='slurm'"):
        cluster.MPICluster(2, partition="debug")


def test_controller_and_engines_are_slurm_batch_jobs(lab):
    info = lab.info
    assert info["launcher"] == "slurm" and info["ranks"] == RANKS
    controller, engines = info["slurm_jobs"]["controller"], info["slurm_jobs"]["engines"]
    assert controller.isdigit() and len(engines) == 1 and engines[0].isdigit()
    ctl, eng = _job(controller), _job(engines[0])
    assert ctl["JobName"] == f"ipcontroller-{lab.cluster_id}" and ctl["JobState"] == "RUNNING"
    assert eng["JobName"] == f"ipengine-{lab.cluster_id}" and eng["JobState"] == "RUNNING"
    assert ctl["BatchFlag"] == eng["BatchFlag"] == "1"  # submitted with sbatch
    assert eng["NumTasks"] == str(RANKS)
    assert eng["Command"].endswith("-engines.sbatch")
    # More ranks than the partition has CPUs: the job asks for --overcommit (one CPU
    # allocated, all the tasks on it) and the cluster says so.
    sinfo = subprocess.run(["sinfo", "-h", "-o", "%C"], capture_output=True, text=True,
                           timeout=30, check=True).stdout
    cpus = int(sinfo.split()[0].rsplit("/", 1)[-1])  # allocated/idle/other/total
    assert info["slurm_overcommit"] == (RANKS > cpus)
    if info["slurm_overcommit"]:
        assert eng["NumCPUs"] == "1"
    # Every engine runs inside the engine job (Slurm set its id in their environment).
    assert [job for *_, job in lab.run(_where)] == [engines[0]] * RANKS


def test_engines_form_one_mpi_comm_world(lab):
    got = lab.run(_where)
    assert [r for r, *_ in got] == list(range(RANKS))
    assert {s for _r, s, *_ in got} == {RANKS}
    assert {total for _r, _s, total, _j in got} == {sum(range(RANKS))}


@pytest.mark.measures
def test_pingpong_kernel_on_the_slurm_engines(lab):
    got = lab.run(_roundtrip, 4096, timeout=60)
    times = np.array([t for t, _ in got])
    assert np.all(np.isfinite(times)) and np.all(times > 0)
    assert (times == times[0]).all()  # the slowest rank's time, the same on every rank
    received = [r for _, r in got]
    assert received[0] == [2] and received[1] == [1]  # a round trip: each got the other's
    assert received[2:] == [[0]] * (RANKS - 2)  # the others only joined the barriers
    # the same measurement as lecture 01 makes it, carrying where it ran
    df = pingpong.pingpong(lab, [8, 1 << 16], impls=("kernel",), reps=3, min_time=0.002)
    assert list(df["size_bytes"]) == [8, 1 << 16]
    assert (df["t_us_min"] > 0).all() and np.isfinite(df["t_us_median"]).all()
    assert df["t_us_median"].iloc[1] > df["t_us_median"].iloc[0]
    assert df.attrs["context"]["launcher"] == "slurm"


def test_restart_submits_new_jobs_and_cancels_the_old(lab):
    old = _jobs(lab)
    lab.restart()
    new = _jobs(lab)
    assert not set(old) & set(new)
    assert _active(old) == []
    assert {_job(j)["JobState"] for j in old} == {"CANCELLED"}  # by scancel
    assert [r for r, *_ in lab.run(_where)] == list(range(RANKS))


def test_command_line_cluster_is_cancelled_by_its_stop(slurm):
    """Started by one process, used by another, stopped by a third: no job outlives it."""
    cid = f"mpilab-pytest-slurm-cli-{os.getpid()}"
    py, env = sys.executable, {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        subprocess.run([py, "-m", "mpilab.cluster", "start", "-n", "2", "--id", cid,
                        "--launcher", "slurm"], check=True, timeout=180, env=env,
                       capture_output=True)
        c = cluster.connect(cid)
        assert c.launcher == "slurm" and c.info["slurm_overcommit"] is False
        ids = _jobs(c)
        assert [r for r, *_ in c.run(_where)] == [0, 1]
        assert sorted(_active(ids)) == sorted(ids)
    finally:
        subprocess.run([py, "-m", "mpilab.cluster", "stop", "--id", cid], timeout=180, env=env,
                       capture_output=True)
    assert _active(ids) == []
    assert cluster.cluster_processes(cid) == []


def test_stop_cancels_the_jobs_and_leaves_no_process(lab):
    ids = _jobs(lab)
    assert sorted(_active(ids)) == sorted(ids)
    lab.stop()
    assert _active(ids) == []
    assert {_job(j)["JobState"] for j in ids} == {"CANCELLED"}  # by scancel
    assert cluster.cluster_processes(lab.cluster_id) == []
    with pytest.raises(cluster.ClusterError, match="restart"):
        lab.run(_where)
