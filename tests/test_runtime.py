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
