"""Cluster lifecycle: start, run, deadlock -> timeout -> restart, killed engine -> restart,
reconnect, and no process left behind."""

import os
import re
import subprocess
import sys
import time

import cloudpickle
import pytest
from conftest import ROOT, needs_mpi

from mpilab import cluster

pytestmark = needs_mpi
# The engines cannot import this test module: send its functions by value, as cloudpickle
# does for functions defined in a notebook.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _rank():
    from mpi4py import MPI

    return MPI.COMM_WORLD.Get_rank()


def _deadlock():
    """Both of ranks 0 and 1 send 8 MB first: past the eager limit neither returns."""
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    buf = np.zeros(1 << 20)
    if comm.rank < 2:
        comm.Send(buf, dest=1 - comm.rank)
        comm.Recv(buf, source=1 - comm.rank)
    return comm.rank


def _raise_on_2():
    from mpi4py import MPI

    if MPI.COMM_WORLD.rank == 2:
        raise ValueError("rank two is unhappy")
    return 0


def _die_on_1():
    import os
    import signal
    import time

    from mpi4py import MPI

    if MPI.COMM_WORLD.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(120)


def test_run_returns_results_by_rank(lab):
    assert lab.run(_rank) == [0, 1, 2, 3]
    assert lab.run(lambda x, y=1: x * y, 3, y=2) == [6, 6, 6, 6]
    assert lab.info["ranks"] == 4 and lab.info["oversubscribed"] == (4 > os.cpu_count())
    assert lab.info["mpi_library"] in ("openmpi", "mpich")
    assert "ranks" in lab.describe()


def test_start_again_reuses_the_running_cluster(lab):
    again = cluster.start(4, cluster_id=lab.cluster_id)
    assert again is lab and again.healthy()


def test_exception_on_one_rank_names_it(lab):
    with pytest.raises(cluster.RankError, match="rank 2.*rank two is unhappy") as info:
        lab.run(_raise_on_2)
    assert set(info.value.errors) == {2}
    assert lab.run(_rank) == [0, 1, 2, 3]  # still usable


def test_deadlock_times_out_and_one_call_restarts(lab):
    with pytest.raises(cluster.MPITimeout, match="ranks 0 and 1 still busy") as info:
        lab.run(_deadlock, timeout=3)
    assert info.value.pending == [0, 1] and info.value.finished == [2, 3]
    # where each busy rank was (its stack, dumped without stopping it), and why
    send = _deadlock.__code__.co_firstlineno + 8
    for r in (0, 1):
        assert (f"rank {r} was at line {send} of test_cluster.py (in _deadlock): "
                "comm.Send(buf, dest=1 - comm.rank)") in str(info.value), str(info.value)
        assert info.value.stacks[r][-1][1:] == (send, "_deadlock")
    assert "Every stuck rank is in a send" in str(info.value)
    # the notebook shows the message alone: no frames of mpilab or ipyparallel
    assert info.value._render_traceback_() == [
        f"\x1b[0;31mMPITimeout\x1b[0m: {info.value}"]
    assert not lab.healthy(timeout=1)
    with pytest.raises(cluster.ClusterError, match="restart"):
        lab.run(_rank)
    lab.restart()
    assert lab.healthy() and lab.run(_rank) == [0, 1, 2, 3]


def test_restart_on_timeout_leaves_a_clean_cluster(lab):
    with pytest.raises(cluster.MPITimeout, match="restarted"):
        lab.run(_deadlock, timeout=3, restart_on_timeout=True)
    assert lab.run(_rank) == [0, 1, 2, 3]


def test_killed_engine_is_detected_then_restarted(lab):
    try:
        with pytest.raises(cluster.ClusterDied) as info:
            lab.run(_die_on_1, timeout=60)  # reported as a death, not as a 60 s timeout
        # Open MPI reports rank 1 first; MPICH's launcher takes every rank down at once
        dead = str(info.value).split(" died")[0]
        assert re.search(r"\b1\b", dead), dead
    finally:
        lab.restart()
    assert lab.run(_rank) == [0, 1, 2, 3]


def test_execute_shows_output_and_times_out(lab, capsys):
    lab.execute("print('hello from', comm.rank)", timeout=10)
    assert "hello from 3" in capsys.readouterr().out
    # a %%mpi cell (one line above the code): the line is the cell's, blank lines counted
    with pytest.raises(cluster.MPITimeout) as info:
        lab.execute("\nimport time\nif comm.rank == 0:\n    time.sleep(60)", timeout=2,
                    restart_on_timeout=True, line_offset=1)
    said = str(info.value)
    assert "rank 0 still busy, ranks 1, 2 and 3 finished" in said, said
    assert "rank 0 was at line 5 of this cell: time.sleep(60)" in said, said
    assert "not in an MPI call made from Python: either an endless loop" in said, said
    assert lab.healthy()


def test_magic_options():
    from mpilab.magics import _parse

    assert _parse("") == (30.0, False)
    assert _parse("--timeout 5 --restart") == (5.0, True)
    assert _parse("--timeout=2.5") == (2.5, False)
    for bad in ("--timeout 0", "--bogus"):
        with pytest.raises(ValueError):
            _parse(bad)


def test_cluster_ids_are_per_notebook(monkeypatch):
    monkeypatch.setenv("MPILAB_NOTEBOOK", "/home/a/lab00.ipynb")
    a = cluster.default_cluster_id()
    assert cluster.default_cluster_id() == a and a.startswith("mpilab-lab00-")
    monkeypatch.setenv("MPILAB_NOTEBOOK", "/home/b/lab00.ipynb")
    assert cluster.default_cluster_id() != a


def test_at_autograde_the_engines_start_when_first_used(monkeypatch):
    """In the student's kernel at autograde, importing mpilab.autograder.student sets the
    cluster's hook: start() starts nothing until code runs on the ranks."""
    from mpilab.cluster import core

    probe = ("import mpilab.autograder.student; from mpilab.cluster import core; "
             "print(core._ON_FIRST_USE)")
    out = subprocess.run([sys.executable, "-c", probe], check=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                         text=True).stdout
    assert out.split() == ["[True]"]
    monkeypatch.setattr(core, "_ON_FIRST_USE", [False])  # this process's hook, restored
    monkeypatch.setattr(core, "_current", None)
    cluster.start_engines_on_first_use()
    c = cluster.start(2, cluster_id=f"mpilab-pytest-lazy-{os.getpid()}")
    try:
        assert c.lazy and c.client is None and cluster.cluster_processes(c.cluster_id) == []
        assert c.run(lambda: 3, timeout=20) == [3, 3]
    finally:
        c.stop()
    assert cluster.cluster_processes(c.cluster_id) == []


def test_tcp_cluster_and_stop_leaves_nothing():
    c = cluster.MPICluster(2, "tcp", cluster_id=f"mpilab-pytest-tcp-{os.getpid()}").start()
    try:
        got = c.run(lambda: __import__("mpi4py.MPI").MPI.COMM_WORLD.allreduce(1))
        assert got == [2, 2] and c.info["transport"] == "tcp"
    finally:
        c.stop()
    assert cluster.cluster_processes(c.cluster_id) == []


def test_reconnect_from_another_process_is_fast():
    cid = f"mpilab-pytest-cli-{os.getpid()}"
    py = sys.executable
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        subprocess.run([py, "-m", "mpilab.cluster", "start", "-n", "2", "--id", cid],
                       check=True, timeout=120, env=env, capture_output=True)
        probe = (
            "import time; t = time.perf_counter(); from mpilab import cluster; "
            f"c = cluster.connect({cid!r}); r = c.run(lambda: 1); "
            "print(round(time.perf_counter() - t, 3), r)"
        )
        out = subprocess.run([py, "-c", probe], check=True, timeout=60, env=env,
                             capture_output=True, text=True).stdout.split()
        assert out[1:] == ["[1,", "1]"]
        print(f"reconnect + first call from a new process: {out[0]} s")
    finally:
        subprocess.run([py, "-m", "mpilab.cluster", "stop", "--id", cid], timeout=60, env=env,
                       capture_output=True)
    deadline = time.time() + 10
    while cluster.cluster_processes(cid) and time.time() < deadline:
        time.sleep(0.2)
    assert cluster.cluster_processes(cid) == []


def _flaky_launcher(tmp_path, failures: int) -> str:
    """A real launcher that exits 213 at its first `failures` starts, then is mpiexec."""
    from mpilab import runtime

    state = tmp_path / "starts"
    wrapper = tmp_path / "mpiexec-flaky"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" != "--version" ] && [ "$(cat {state} 2>/dev/null | wc -c)" -lt {failures} ]; then\n'
        f"  printf x >> {state}; echo 'launcher gave up' >&2; exit 213\n"
        "fi\n"
        f'exec {runtime.mpiexec()} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def test_a_launcher_that_exits_at_start_gets_one_more_try(tmp_path, monkeypatch):
    monkeypatch.setenv("MPILAB_MPIEXEC", _flaky_launcher(tmp_path, failures=1))
    c = cluster.MPICluster(2, cluster_id=f"mpilab-test-flaky-{os.getpid()}")
    try:
        c.start()
        assert c.run(lambda: 7, timeout=20) == [7, 7]
        assert "Engine set stopped" in c.timings["start_retried_after"]
    finally:
        c.stop()
    assert cluster.cluster_processes(c.cluster_id) == []


def test_a_launcher_that_keeps_failing_is_reported_with_its_output(tmp_path, monkeypatch):
    monkeypatch.setenv("MPILAB_MPIEXEC", _flaky_launcher(tmp_path, failures=5))
    c = cluster.MPICluster(2, cluster_id=f"mpilab-test-flaky2-{os.getpid()}")
    with pytest.raises(cluster.ClusterError, match="(?s)did not start.*launcher gave up"):
        c.start()
    assert (tmp_path / "starts").read_text() == "xx"  # two tries, no more
    assert cluster.cluster_processes(c.cluster_id) == []
