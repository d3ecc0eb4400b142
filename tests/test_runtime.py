"""mpilab.runtime: launcher arguments for root, oversubscription, transports."""

import pytest
from conftest import needs_mpi

from mpilab import runtime

pytestmark = needs_mpi


def test_oversubscription_is_detected_and_allowed():
    cores = runtime.usable_cores()
    fits = runtime.launch(min(2, cores), "shm")
    over = runtime.launch(cores + 1, "shm")
    assert not fits.oversubscribed
    assert over.oversubscribed
    if over.family == "openmpi":
        assert "--oversubscribe" in over.command
        assert over.env.get("OMPI_MCA_mpi_yield_when_idle") == "1"
    assert over.command[1:3] == ("-n", str(cores + 1))


def test_root_is_allowed_for_open_mpi():
    launch = runtime.launch(2, "shm")
    if launch.family != "openmpi" or not runtime.is_root():
        pytest.skip("only Open MPI as root needs this")
    assert launch.env["OMPI_ALLOW_RUN_AS_ROOT"] == "1"
    assert launch.env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"


def test_tcp_forces_the_network_stack():
    shm, tcp = runtime.launch(2, "shm"), runtime.launch(2, "tcp")
    if tcp.family == "openmpi":
        assert "tcp,self" in tcp.command and "tcp,self" not in shm.command
    else:
        assert tcp.env.get("MPIR_CVAR_NOLOCAL") == "1"


@pytest.mark.parametrize("bad", [dict(ranks=0), dict(ranks="2"), dict(transport="carrier-pigeon")])
def test_bad_launch_arguments(bad):
    args = {"ranks": 2, "transport": "shm", **bad}
    with pytest.raises(ValueError):
        runtime.launch(args["ranks"], args["transport"])


def test_the_thread_level_asked_for_is_in_the_launch_environment():
    assert runtime.launch(2).env["MPI4PY_RC_THREAD_LEVEL"] == "single"
    assert runtime.launch(2, thread_level="funneled").env["MPI4PY_RC_THREAD_LEVEL"] == "funneled"
    with pytest.raises(ValueError, match="thread_level must be one of"):
        runtime.launch(2, thread_level="FUNNELED")


def test_library_selection(monkeypatch):
    monkeypatch.setenv("MPILAB_MPI", "lam")
    with pytest.raises(ValueError, match="MPILAB_MPI"):
        runtime.selected_library()
    monkeypatch.setenv("MPILAB_MPI", "mpich")
    assert runtime.selected_library() == "mpich"


def test_machine_info_fields():
    info = runtime.machine_info()
    assert info["cores"] >= 1 and info["hostname"] and isinstance(info["binder"], bool)
    assert isinstance(runtime.cma_works(), bool)



def test_stale_shared_memory_segments_are_removed_and_live_ones_kept():
    """A killed job's vader segment is deleted; one a live process maps is not.

    In a folder of this test's own under /dev/shm: jobs that other test modules run at
    the same time clean the top level of /dev/shm, and diff it.
    """
    import mmap
    import os
    import shutil
    from pathlib import Path

    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm here")
    shm = Path("/dev/shm") / f"mpilab-test-{os.getpid()}"
    shutil.rmtree(shm, ignore_errors=True)  # a crashed earlier run's, had it this pid
    shm.mkdir()
    try:
        live = shm / "vader_segment.mpilab-test.0"
        dead = shm / "vader_segment.mpilab-test.1"
        other = shm / "mpilab-test-not-a-segment"
        for path in (live, dead, other):
            path.write_bytes(b"\0" * 4096)
        with open(live, "r+b") as f:
            held = mmap.mmap(f.fileno(), 4096)
        try:
            assert runtime.remove_stale_shm_segments(str(shm)) == 1
            assert live.exists(), "a segment mapped by a live process was deleted"
            assert not dead.exists(), "a segment nobody maps was kept"
            assert other.exists(), "a file that is not a vader segment was deleted"
        finally:
            held.close()
    finally:
        shutil.rmtree(shm, ignore_errors=True)


def test_launch_environment_drops_what_an_initialised_mpi_left(monkeypatch):
    """A child mpiexec must not inherit a singleton's PMIx/ORTE settings (it exits 1)."""
    monkeypatch.setenv("PMIX_NAMESPACE", "singleton-1")
    monkeypatch.setenv("OMPI_MCA_ess", "singleton")
    monkeypatch.setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none")  # a setting
    monkeypatch.setenv("MPILAB_SOMETHING", "kept")
    env = runtime.launch(2).full_env()
    assert "PMIX_NAMESPACE" not in env and "OMPI_MCA_ess" not in env
    assert env["OMPI_MCA_btl_vader_single_copy_mechanism"] == "none"
    assert env["MPILAB_SOMETHING"] == "kept"


def test_rank_counts_follow_the_cores():
    """Sweeps are sized to the machine: up to a rank per core, then what was asked beyond."""
    assert runtime.rank_counts(16, squares=True, beyond=1, cores=2) == [1, 2, 4]
    assert runtime.rank_counts(16, squares=True, beyond=1, cores=16) == [1, 2, 4, 8, 9, 16]
    assert runtime.rank_counts(36, squares=True, beyond=1, cores=16) == [1, 2, 4, 8, 9, 16, 25]
    assert runtime.rank_counts(36, squares=True, beyond=0, cores=40) == [1, 2, 4, 8, 9, 16,
                                                                         25, 32, 36]
    assert runtime.rank_counts(8, cores=1, beyond=1) == [1, 2]
    assert runtime.rank_counts(8, cores=64) == [1, 2, 4, 8]
    assert runtime.rank_counts(squares=True, beyond=1) == runtime.rank_counts(
        squares=True, beyond=1, cores=runtime.usable_cores())
