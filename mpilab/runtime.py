"""What MPI this machine has and how to launch it: the one place that knows.

Everything that starts MPI processes (the cluster, the benchmarks, the tests) asks this
module for the launcher command, its arguments and environment, so running as root,
more ranks than cores, the transport and container quirks are handled once.

This module imports neither mpi4py nor numpy at import time, so ``setup.py`` can use it
to find the compiler wrapper.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import shutil
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass

TRANSPORTS = ("shm", "tcp")
LIBRARIES = ("openmpi", "mpich")


class MPINotFound(RuntimeError):
    """No usable MPI installation (compiler wrapper or launcher) was found."""


def selected_library() -> str:
    """The MPI the course uses on this machine: ``$MPILAB_MPI`` (openmpi by default)."""
    lib = os.environ.get("MPILAB_MPI", "openmpi").strip().lower() or "openmpi"
    if lib not in LIBRARIES:
        raise ValueError(f"MPILAB_MPI must be one of {LIBRARIES}, got {lib!r}")
    return lib


def _find_tool(base: str, lib: str) -> str:
    # Debian installs both libraries side by side as mpicc.openmpi / mpicc.mpich;
    # conda and most clusters have only the plain name.
    for name in (f"{base}.{lib}", base):
        path = shutil.which(name)
        if path:
            return path
    raise MPINotFound(
        f"no {base} found for {lib}: run `make setup` (Debian, as root) or "
        "`conda env create -f environment.yml`"
    )


def mpicc(lib: str | None = None) -> str:
    """Path of the MPI C compiler wrapper (``$MPICC`` wins)."""
    return os.environ.get("MPICC") or _find_tool("mpicc", lib or selected_library())


def mpiexec(lib: str | None = None) -> str:
    """Path of the MPI launcher (``$MPILAB_MPIEXEC`` wins)."""
    return os.environ.get("MPILAB_MPIEXEC") or _find_tool("mpiexec", lib or selected_library())


@functools.cache
def library_info() -> dict:
    """Name, family and version of the MPI library mpi4py loaded."""
    from mpi4py import MPI

    text = MPI.Get_library_version().strip()
    first = text.splitlines()[0].strip() if text else "unknown"
    low = text.lower()
    family = "openmpi" if "open mpi" in low else "mpich" if "mpich" in low else "other"
    version = ""
    if family == "openmpi":
        # "Open MPI v4.1.4, package: ..."
        version = first.split(",")[0].replace("Open MPI", "").strip().lstrip("v")
    elif family == "mpich":
        for line in text.splitlines():
            if line.lower().startswith("mpich version:"):
                version = line.split(":", 1)[1].strip()
    import mpi4py

    return {
        "mpi_library": family,
        "mpi_version": version,
        "mpi_library_version": first,
        "mpi_standard": "{}.{}".format(*MPI.Get_version()),
        "mpi4py_version": mpi4py.__version__,
    }


def _launcher_family(path: str) -> str:
    """Ask the launcher itself which library it belongs to."""
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=20
        ).stdout.lower()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if "open mpi" in out or "open-mpi" in out or "openrte" in out or "prte" in out:
        return "openmpi"
    if "hydra" in out or "mpich" in out:
        return "mpich"
    return "unknown"


@functools.cache
def launcher_family(path: str | None = None) -> str:
    return _launcher_family(path or mpiexec())


@functools.cache
def _openmpi_major(path: str) -> int:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return 4
    for tok in out.stdout.replace("(", " ").replace(")", " ").split():
        if tok[:1].isdigit() and "." in tok:
            try:
                return int(tok.split(".")[0])
            except ValueError:
                pass
    return 4


def usable_cores() -> int:
    """Cores this process may run on (affinity-aware; what oversubscription is judged by)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


@functools.cache
def cma_works() -> bool:
    """Can this process read another's memory (process_vm_readv)?

    Open MPI's shared-memory transport uses it for single-copy transfers; in containers
    without ptrace it fails mid-run with "Read -1, expected ..., errno = 1".
    """
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    class IOVec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    src = ctypes.create_string_buffer(b"mpilab", 8)
    dst = ctypes.create_string_buffer(8)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: wait until the parent has read, then leave
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    os.close(r)
    try:
        local = IOVec(ctypes.cast(dst, ctypes.c_void_p), 8)
        remote = IOVec(ctypes.cast(src, ctypes.c_void_p), 8)  # same address in the fork
        n = libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        return n == 8 and dst.raw[:6] == b"mpilab"
    finally:
        os.write(w, b"x")
        os.close(w)
        os.waitpid(pid, 0)


@dataclass(frozen=True)
class Launch:
    """How to start `ranks` MPI processes on this machine with a given transport."""

    ranks: int
    transport: str
    exe: str  # the launcher
    args: tuple[str, ...]  # its options, without "-n ranks"
    env: dict
    oversubscribed: bool
    family: str
    # where ranks run when they span emulated nodes (mpilab.netlab); None: this host
    placement: dict | None = None

    @property
    def command(self) -> tuple[str, ...]:
        """Launcher, -n ranks and options, up to (not including) the program."""
        return (self.exe, "-n", str(self.ranks), *self.args)

    def argv(self, program: list[str]) -> list[str]:
        return [*self.command, *program]

    def full_env(self) -> dict:
        """This process's environment, less what an initialised MPI left in it, plus env.

        A process that has called MPI_Init (imported ``mpi4py.MPI``: a notebook kernel, a
        test run) carries its singleton's ``PMIX_*`` / ``OMPI_MCA_ess`` ... settings in its
        environment, and so does every child started without an explicit environment. An
        ``mpiexec`` that inherits them exits 1 without a word; they are dropped here.
        """
        env = clean_env()
        env.update(self.env)
        return env

    def describe(self) -> dict:
        d = asdict(self)
        d["command"] = " ".join(self.command)
        del d["exe"], d["args"]
        return d


_SINGLETON_PREFIXES = ("PMIX_", "ORTE_", "OMPI_COMM_WORLD_", "OMPI_MCA_ess",
                       "OMPI_MCA_orte_ess_", "OMPI_MCA_pmix")
_SINGLETON_NAMES = {"OMPI_MCA_orte_launch", "OMPI_MCA_orte_precondition_transports",
                    "OMPI_APP_CTX_NUM_PROCS", "OMPI_UNIVERSE_SIZE", "OMPI_FIRST_RANKS",
                    "OMPI_FILE_LOCATION", "OMPI_MCA_initial_wdir", "OMPI_NUM_APP_CTX",
                    "OMPI_ARGV", "OMPI_COMMAND", "OMPI_MCA_orte_hnp_uri",
                    "OMPI_MCA_orte_local_daemon_uri", "OMPI_MCA_orte_app_num",
                    "OMPI_MCA_orte_num_nodes", "OMPI_MCA_orte_jobfam_session_dir",
                    "OMPI_MCA_orte_top_session_dir", "OMPI_MCA_orte_bound_at_launch",
                    "OMPI_MCA_shmem_RUNTIME_QUERY_hint", "IPATH_NO_BACKTRACE",
                    "HFI_NO_BACKTRACE"}


def _mpi_singleton_var(name: str) -> bool:
    """Is `name` set by an MPI job or singleton for its own processes (not a setting)?"""
    return name in _SINGLETON_NAMES or name.startswith(_SINGLETON_PREFIXES)


def clean_env() -> dict[str, str]:
    """This process's environment less what an initialised MPI left in it (see
    :meth:`Launch.full_env`): for any child that will start MPI processes itself."""
    return {k: v for k, v in os.environ.items() if not _mpi_singleton_var(k)}


@contextlib.contextmanager
def without_mpi_singleton_env():
    """Within the block, this process's environment lacks its MPI singleton's settings.

    For launchers that copy ``os.environ`` into the processes they start (ipyparallel's):
    an ``mpiexec`` that inherits a singleton's ``PMIX_*`` settings exits 1 without a word.
    A notebook kernel that imported a compiled kernel (mpi4py initialises MPI on import)
    and then starts a cluster would otherwise fail.
    """
    saved = {k: os.environ.pop(k) for k in list(os.environ) if _mpi_singleton_var(k)}
    try:
        yield
    finally:
        os.environ.update(saved)


def _mapped_paths() -> set[str]:
    """Files some live process maps or holds open (scanning /proc; only what we may read)."""
    seen: set[str] = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    if "/dev/shm/" in line:
                        seen.add(line.split(None, 5)[-1].strip().removesuffix(" (deleted)"))
            fd_dir = f"/proc/{pid}/fd"
            for fd in os.listdir(fd_dir):
                target = os.readlink(f"{fd_dir}/{fd}")
                if target.startswith("/dev/shm/"):
                    seen.add(target)
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return seen


# Open MPI's shared-memory transport: vader in 4.x, sm in 5.x
SEGMENT_PREFIXES = ("vader_segment.", "sm_segment.")


def remove_stale_shm_segments(directory: str = "/dev/shm") -> int:
    """Delete Open MPI shared-memory segments that no live process uses; how many.

    A job that is killed (a timeout, a deadlock demo, a crashed engine) leaves its
    ``vader_segment.<host>.<jobid>.<rank>`` files (``sm_segment.*`` in Open MPI 5)
    behind. Job ids are reused, and a new job whose segment name matches a stale file
    fails to start, now and then and without a word (Open MPI issue #7308): after a day of killed jobs this machine had 3,396 such
    files and one launch in a hundred failed. Only this user's files that no process
    maps or holds open are removed, so running jobs are never touched.
    """
    try:
        names = [n for n in os.listdir(directory) if n.startswith(SEGMENT_PREFIXES)]
    except OSError:
        return 0
    if not names:
        return 0
    uid, busy, removed = os.geteuid(), _mapped_paths(), 0
    for name in names:
        path = os.path.join(directory, name)
        try:
            if os.stat(path).st_uid != uid or path in busy:
                continue
            os.unlink(path)
            removed += 1
        except OSError:
            continue
    return removed


def launch(ranks: int, transport: str = "shm", lib: str | None = None) -> Launch:
    """Launcher command and environment for `ranks` processes over `transport`.

    ``shm`` is the library's default on one host (shared memory between ranks);
    ``tcp`` forces the network stack over the loopback interface, which is what a
    message between two nodes goes through, minus the wire.
    """
    if not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"ranks must be a positive integer, got {ranks!r}")
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
    exe = mpiexec(lib)
    family = launcher_family(exe)
    cores = usable_cores()
    over = ranks > cores
    env: dict[str, str] = {
        # Engines and kernels call MPI from the main thread only. Open MPI 4.1 takes a
        # slower path for any level above single (8 B round trip here: 0.20 us at
        # funneled, 0.14 us at single, the same as the C program).
        "MPI4PY_RC_THREAD_LEVEL": "single",
    }
    args: list[str] = []
    if family == "openmpi":
        remove_stale_shm_segments()
        if is_root():
            env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
            env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
        major = _openmpi_major(exe)
        args += ["--oversubscribe"]
        if over:
            # Open MPI yields by itself when it knows it is oversubscribed; say so
            # explicitly, and do not bind several ranks to one core.
            args += ["--bind-to", "none"]
            env["OMPI_MCA_mpi_yield_when_idle"] = "1"
        if major < 5:
            env["OMPI_MCA_rmaps_base_oversubscribe"] = "1"
        else:
            env["PRTE_MCA_rmaps_default_mapping_policy"] = ":oversubscribe"
        if transport == "tcp":
            args += ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
                     "--mca", "btl_tcp_if_include", "lo"]
        elif not cma_works():
            if major < 5:
                args += ["--mca", "btl_vader_single_copy_mechanism", "none"]
            else:
                args += ["--mca", "smsc", "^cma"]
        # No "did you mean to run on more cores" chatter in notebooks.
        env["OMPI_MCA_rmaps_base_inherit"] = "0"
    elif transport == "tcp":
        # MPICH ch4: route even local messages through the network module.
        env["MPIR_CVAR_NOLOCAL"] = "1"
        env["MPIR_CVAR_CH4_NOLOCAL"] = "1"
    return Launch(ranks, transport, exe, tuple(args), env, over, family)


def eager_limits(library: str | None = None) -> dict:
    """Configured eager limits in bytes by transport (``{"shm": 4096, "tcp": 65536}``).

    Read from ``ompi_info`` for Open MPI. MPICH keeps them in control variables that
    this does not read: ``{}``, as for an unknown library.
    """
    library = library or selected_library()
    info = shutil.which("ompi_info")
    if library != "openmpi" or not info:
        return {}
    found = {}
    for transport, btls in {"shm": ("vader", "sm"), "tcp": ("tcp",)}.items():
        for btl in btls:
            try:
                text = subprocess.run([info, "--param", "btl", btl, "--level", "9",
                                       "--parsable"], capture_output=True, text=True,
                                      timeout=30).stdout
            except (OSError, subprocess.TimeoutExpired):
                continue
            for line in text.splitlines():
                if line.startswith(f"mca:btl:{btl}:param:btl_{btl}_eager_limit:value:"):
                    found[transport] = int(line.rsplit(":", 1)[1])
                    break
            if transport in found:
                break
    return found


@functools.cache
def machine_info() -> dict:
    """Host facts every measurement record carries."""
    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "hostname": socket.gethostname(),
        "cpu_model": model,
        "cores": usable_cores(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "binder": bool(os.environ.get("MPILAB_BINDER") or os.environ.get("BINDER_LAUNCH_HOST")),
    }
