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
import time
from dataclasses import asdict, dataclass

TRANSPORTS = ("shm", "tcp")
# MPI_Init_thread's levels, as mpi4py names them (MPI4PY_RC_THREAD_LEVEL)
THREAD_LEVELS = ("single", "funneled", "serialized", "multiple")
LIBRARIES = ("openmpi", "mpich")


class MPINotFound(RuntimeError):
    """No usable MPI installation (compiler wrapper or launcher) was found."""


def selected_library() -> str:
    """The MPI the course uses on this machine: ``$MPILAB_MPI``; unset, the MPI the active
    environment ships (a venv with the PyPI ``mpich`` wheel: mpich), else openmpi."""
    lib = os.environ.get("MPILAB_MPI", "").strip().lower()
    if not lib:
        for d in env_bins():
            if os.path.exists(os.path.join(d, "mpichversion")):
                return "mpich"
        lib = "openmpi"
    if lib not in LIBRARIES:
        raise ValueError(f"MPILAB_MPI must be one of {LIBRARIES}, got {lib!r}")
    return lib


def env_bins() -> list[str]:
    """The active Python environment's bin folders: a venv with the PyPI ``openmpi`` or
    ``mpich`` wheel, or a conda environment, ships its own ``mpicc`` and ``mpiexec``."""
    dirs = [os.path.join(sys.prefix, "bin")]
    if os.environ.get("CONDA_PREFIX"):
        dirs.append(os.path.join(os.environ["CONDA_PREFIX"], "bin"))
    return dirs


def _find_tool(base: str, lib: str) -> str:
    # The active environment's own MPI first (the one its mpi4py loads), then Debian's
    # side-by-side names (mpicc.openmpi / mpicc.mpich), then the plain name on PATH
    # (most clusters' modules).
    for d in env_bins():
        path = os.path.join(d, base)
        if os.access(path, os.X_OK) and _launcher_family_of_tool(path, base) in (lib, "unknown"):
            return path
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

    release_singleton_segments()
    text = MPI.Get_library_version().replace("\x00", "").strip()  # C string: NUL-ended
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


def _launcher_family_of_tool(path: str, base: str) -> str:
    """Which library an environment's mpicc/mpiexec belongs to (by the files beside it)."""
    bindir = os.path.dirname(path)
    if os.path.exists(os.path.join(bindir, "ompi_info")):
        return "openmpi"
    if os.path.exists(os.path.join(bindir, "mpichversion")):
        return "mpich"
    return "unknown"


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


def openmpi_major(path: str | None = None) -> int:
    """The major version of the Open MPI whose launcher is `path` (default: this course's);
    4 when it cannot be told."""
    return _openmpi_major(path or mpiexec())


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


def _affinity_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def cgroup_dirs(controller: str) -> list[str]:
    """This process's cgroup folders for `controller`, innermost first, up to the root.

    cgroup v2 (one unified hierarchy, ``0::/path``) when its controller is enabled there,
    else the v1 hierarchy that carries `controller`. A limit set on any ancestor applies,
    so callers take the smallest. Paths are mapped through the mount's own root (in a
    container with a cgroup namespace the mount shows only the container's subtree).
    """
    try:
        with open("/proc/self/cgroup") as f:
            lines = [ln.rstrip("\n").split(":", 2) for ln in f if ln.count(":") >= 2]
        with open("/proc/self/mountinfo") as f:
            mounts = [ln.split() for ln in f]
    except OSError:
        return []
    found: list[tuple[str, str]] = []  # (mount point, cgroup path)
    for fields in mounts:
        try:
            sep = fields.index("-")
        except ValueError:
            continue
        fstype, root, point = fields[sep + 1], fields[3], fields[4]
        opts = fields[sep + 3].split(",") if len(fields) > sep + 3 else []
        for hier, ctrls, path in lines:
            if fstype == "cgroup2" and hier == "0":
                try:
                    with open(os.path.join(point, "cgroup.controllers")) as c:
                        if controller not in c.read().split():
                            continue
                except OSError:
                    continue
            elif not (fstype == "cgroup" and controller in ctrls.split(",")
                      and controller in opts):
                continue
            rel = os.path.relpath(path, root) if path.startswith(root) else path
            found.append((point, "" if rel == "." else rel.strip("/")))
    dirs: list[str] = []
    for point, rel in found[:1]:
        parts = [p for p in rel.split("/") if p]
        for i in range(len(parts), -1, -1):
            dirs.append(os.path.join(point, *parts[:i]))
    return dirs


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _env_number(name: str) -> float | None:
    value = os.environ.get(name, "").strip()
    try:
        number = float(value)
    except ValueError:
        return None
    return number if number > 0 else None


def cpu_quota() -> tuple[float | None, str]:
    """CPUs this process may use by time quota, and where the limit comes from.

    The smallest of cgroup v2 ``cpu.max``, cgroup v1 ``cpu.cfs_quota_us / cfs_period_us``
    (over this cgroup and its ancestors) and ``$CPU_LIMIT`` (JupyterHub and Binder set
    it). ``(None, "none")`` without a quota. A quota is not an affinity mask: a container
    limited to one CPU still sees every core in ``sched_getaffinity`` and ``nproc``.
    """
    best: tuple[float | None, str] = (None, "none")

    def take(value: float | None, source: str) -> None:
        nonlocal best
        if value is not None and value > 0 and (best[0] is None or value < best[0]):
            best = (value, source)

    for d in cgroup_dirs("cpu"):
        text = _read(os.path.join(d, "cpu.max"))
        if text:  # v2: "max 100000" or "100000 100000"
            quota, _, period = text.partition(" ")
            if quota != "max" and period:
                take(int(quota) / int(period), f"cgroup {os.path.join(d, 'cpu.max')}")
            continue
        quota, period = (_read(os.path.join(d, f"cpu.cfs_{k}_us")) for k in ("quota", "period"))
        if quota and period and int(quota) > 0:
            take(int(quota) / int(period), f"cgroup {os.path.join(d, 'cpu.cfs_quota_us')}")
    take(_env_number("CPU_LIMIT"), "$CPU_LIMIT")
    return best


def usable_cores() -> int:
    """Cores this process may keep busy at once: what oversubscription is judged by.

    The smaller of the CPU affinity mask and the cgroup/``$CPU_LIMIT`` quota, rounded
    down (at least 1): MPI ranks poll while they wait, so two ranks under a 1.5-CPU quota
    take turns on the CPU time as surely as on one core.
    """
    cores = _affinity_cores()
    quota, _ = cpu_quota()
    if quota is not None:
        cores = min(cores, max(1, int(quota + 1e-9)))
    return cores


def rank_counts(most: int = 16, *, squares: bool = False, beyond: int = 0,
                cores: int | None = None) -> list[int]:
    """Rank counts for a scaling sweep sized to this machine.

    1, 2, 4, 8, ... (with `squares`, also 9, 16, 25, ...: square process grids, as the
    papers ran) up to one rank per usable core (:func:`usable_cores`, or `cores`) and at
    most `most`; then the next `beyond` counts of the same sequence above the cores,
    which run oversubscribed (a run says so). ``rank_counts(squares=True, beyond=1)`` is
    ``[1, 2, 4]`` on 2 cores and ``[1, 2, 4, 8, 9, 16]`` on 16.
    """
    cores = usable_cores() if cores is None else int(cores)
    seq = {1 << k for k in range(16)} | ({k * k for k in range(1, 256)} if squares else set())
    seq = sorted(n for n in seq if n <= most)
    return [n for n in seq if n <= max(1, cores)] + [n for n in seq if n > cores][:beyond]


_NO_LIMIT = 1 << 60  # cgroup v1 reports "unlimited" as a page-rounded 2**63 - 1


def physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not Linux
        return 0


def memory_limit() -> tuple[int, str]:
    """Bytes of memory this process may use, and what sets that figure.

    The smallest of physical memory, cgroup v2 ``memory.max`` / v1
    ``memory.limit_in_bytes`` over this cgroup and its ancestors, and ``$MEM_LIMIT``.
    """
    best = (physical_memory(), "physical memory")
    for d in cgroup_dirs("memory"):
        for name in ("memory.max", "memory.limit_in_bytes"):
            text = _read(os.path.join(d, name))
            if text and text != "max" and text.isdigit() and int(text) < _NO_LIMIT:
                if int(text) < best[0]:
                    best = (int(text), f"cgroup {os.path.join(d, name)}")
                break
    env = _env_number("MEM_LIMIT")
    if env is not None and int(env) < best[0]:
        best = (int(env), "$MEM_LIMIT")
    return best


def shm_size(directory: str = "/dev/shm") -> tuple[int, int]:
    """Size and free bytes of the shared-memory file system MPI's transports map.

    Docker's default is 64 MiB. Open MPI puts one segment per rank there (a few MiB
    each; ``vader_segment.*`` or ``sm_segment.*``), and MPI-3 shared-memory windows
    allocate from it too: a big window in a small /dev/shm dies with SIGBUS.
    """
    try:
        st = os.statvfs(directory)
    except OSError:
        return 0, 0
    return st.f_frsize * st.f_blocks, st.f_frsize * st.f_bavail


def resources() -> dict:
    """What this process may use: cores (and why), memory (and why), /dev/shm.

    Every measurement record carries it (:func:`machine_info`), and lectures scale their
    problem sizes by it (:func:`small_machine`).
    """
    quota, quota_from = cpu_quota()
    mem, mem_from = memory_limit()
    shm, shm_free = shm_size()
    return {
        "cores": usable_cores(),
        "affinity_cores": _affinity_cores(),
        "cpu_quota": quota,
        "cpu_quota_from": quota_from,
        "memory_bytes": mem,
        "memory_from": mem_from,
        "physical_memory_bytes": physical_memory(),
        "shm_bytes": shm,
        "shm_free_bytes": shm_free,
    }


SMALL_MEMORY = 4 << 30


def small_machine() -> str:
    """Why the lectures should run their small sweeps here, or "" when full ones fit.

    ``$MPILAB_QUICK=1`` (tests, impatient readers), one core (Binder: every timing waits
    for the operating system to switch ranks) or less than 4 GiB of memory (Binder's 1-2
    GiB: the full sweeps' largest grids and messages would not fit beside the engines).
    ``MPILAB_QUICK=0`` asks for the full sweeps anyway.
    """
    forced = os.environ.get("MPILAB_QUICK", "").strip()
    if forced == "1":
        return "MPILAB_QUICK=1"
    if forced == "0":
        return ""
    if usable_cores() < 2:
        return "one core"
    mem, _ = memory_limit()
    if mem < SMALL_MEMORY:
        return f"{mem / 2**30:.1f} GiB of memory"
    return ""


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
# MPICH 5's shared-memory segments (mpich_shm_<id>_<n>)
SEGMENT_PREFIXES += ("mpich_shm_",)


def shm_segments(directory: str = "/dev/shm") -> set[str]:
    """The MPI shared-memory files in `directory` now (Open MPI 4's vader, 5's sm, MPICH's)."""
    try:
        return {n for n in os.listdir(directory) if n.startswith(SEGMENT_PREFIXES)}
    except OSError:
        return set()


def leaked_shm_segments(before: set[str], settle: float = 2.0,
                        directory: str = "/dev/shm") -> set[str]:
    """Segments new since `before` (:func:`shm_segments`) that no live process maps or
    holds open: what a job left behind.

    Other jobs may run meanwhile (tests side by side, a class): their live segments are
    mapped and do not count. One whose job is ending may be unmapped for a moment before
    its own clean-up removes it, so a suspect counts only if it stays unmapped for
    `settle` seconds.
    """
    deadline, suspects = time.monotonic() + settle, None
    while True:
        busy = _mapped_paths()  # what remove_stale_shm_segments keeps
        now = {n for n in shm_segments(directory) - before
               if os.path.join(directory, n) not in busy
               and os.path.exists(os.path.join(directory, n))}
        suspects = now if suspects is None else suspects & now
        if not suspects or time.monotonic() > deadline:
            return suspects
        time.sleep(0.2)


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


# MPICH's hydra: each node's proxy writes the machine's topology for its ranks to
# /tmp/hydra_hwloc_xmlfile_XXXXXX (a fixed path: TMPDIR is not read) and unlinks it only
# when it ends normally; under -disable-auto-cleanup (the notebook's engines) or SIGKILL
# the file stays (93 of them after a day of tests here).
HYDRA_TOPOLOGY_PREFIX = "hydra_hwloc_xmlfile_"
HYDRA_PROCESSES = ("hydra_pmi_proxy", "mpiexec.hydra")


def remove_stale_hydra_files(directory: str = "/tmp") -> int:
    """Delete the topology files of MPICH jobs that have ended; how many.

    The ranks read the file once, in ``MPI_Init``, while their proxy runs, and nothing
    names the proxy that wrote a given file: so this user's files are removed only when
    none of this user's hydra processes is alive (a later call catches what a running
    job kept).
    """
    try:
        names = [n for n in os.listdir(directory) if n.startswith(HYDRA_TOPOLOGY_PREFIX)]
    except OSError:
        return 0
    uid = os.geteuid()
    mine = [n for n in names if _owned_by(os.path.join(directory, n), uid)]
    if not mine or _hydra_running(uid):
        return 0
    removed = 0
    for name in mine:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(directory, name))
            removed += 1
    return removed


def _owned_by(path: str, uid: int) -> bool:
    try:
        return os.lstat(path).st_uid == uid
    except OSError:
        return False


def _hydra_running(uid: int) -> bool:
    """Whether one of this user's hydra processes is alive (a zombie, killed but not yet
    reaped by its parent, is not)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            name, state = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2]
            if (name in HYDRA_PROCESSES and state not in "ZX"
                    and os.stat(f"/proc/{pid}").st_uid == uid):
                return True
        except (OSError, ValueError, IndexError):
            continue
    return False


def release_singleton_segments() -> int:
    """Unlink the shared-memory segments of this process if it is an MPI singleton.

    A process that initialises MPI without a launcher (a notebook kernel importing a
    compiled kernel, the grader, pytest) is a job of one rank. Open MPI 5 still creates
    its 16 MiB ``sm_segment.*`` file for it, and only the launcher (PRRTE) would remove
    it: a singleton's file stays in /dev/shm after the process ends (seen with 5.0.11
    from PyPI), and four kernels fill Binder's 64 MiB /dev/shm. No other process ever
    opens a singleton's segment, so its name is removed at once; the memory stays mapped
    and is freed when the process ends. Returns how many files were unlinked.
    """
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        if (mpi is None or not mpi.Is_initialized() or mpi.Is_finalized()
                or mpi.COMM_WORLD.Get_size() != 1):
            return 0
        with open("/proc/self/maps") as f:
            paths = {ln.split(None, 5)[-1].strip() for ln in f if "/dev/shm/" in ln}
    except (OSError, AttributeError):
        return 0
    removed = 0
    for path in paths:
        if os.path.basename(path).startswith(SEGMENT_PREFIXES) and path.startswith("/dev/shm/"):
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed += 1
    return removed


def launch(ranks: int, transport: str = "shm", lib: str | None = None, *,
           crash_ends_job: bool = True, thread_level: str = "single",
           single_copy: bool = True) -> Launch:
    """Launcher command and environment for `ranks` processes over `transport`.

    ``shm`` is the library's default on one host (shared memory between ranks);
    ``tcp`` forces the network stack over the loopback interface, which is what a
    message between two nodes goes through, minus the wire.

    `thread_level` is what the ranks' mpi4py asks ``MPI_Init_thread`` for. ``single``
    suits a process with one thread (a benchmark's worker); a process with other threads
    that never call MPI (an ipyparallel engine: ipykernel's heartbeat, control and
    output threads) must ask for ``funneled``. Open MPI 4.1 turns on its thread-safe
    internals for any level above ``single`` (``opal_set_using_threads`` in
    ``ompi_mpi_init.c``); Open MPI 5 and MPICH only for ``multiple``.

    ``crash_ends_job=False`` (the notebook's engines): a rank that exits does not make
    the launcher kill the others at once, so the cluster can say which rank died. MPICH's
    hydra kills every rank within milliseconds otherwise; Open MPI's launcher is slow
    enough for that already. The cluster restarts the whole job after a crash anyway.

    ``single_copy=False`` turns off the shared-memory transport's single-copy path for
    large messages (the receiver reading the sender's buffer with ``process_vm_readv``,
    CMA; or XPMEM/KNEM where built), so every message goes copy-in/copy-out through the
    shared segment: Open MPI 4 ``btl_vader_single_copy_mechanism none``, Open MPI 5 no
    ``smsc`` component, MPICH ``MPIR_CVAR_CH4_CMA_ENABLE=0`` and ``..._XPMEM_ENABLE=0``.
    With the default the path is used where this machine allows it (:func:`cma_works`).
    """
    if not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"ranks must be a positive integer, got {ranks!r}")
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
    if thread_level not in THREAD_LEVELS:
        raise ValueError(f"thread_level must be one of {THREAD_LEVELS}, got {thread_level!r}")
    exe = mpiexec(lib)
    family = launcher_family(exe)
    cores = usable_cores()
    over = ranks > cores
    env: dict[str, str] = {"MPI4PY_RC_THREAD_LEVEL": thread_level}
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
        elif not single_copy or not cma_works():
            if major < 5:
                args += ["--mca", "btl_vader_single_copy_mechanism", "none"]
            else:
                args += ["--mca", "smsc", "^cma" if single_copy else "^cma,xpmem,knem"]
        # No "did you mean to run on more cores" chatter in notebooks.
        env["OMPI_MCA_rmaps_base_inherit"] = "0"
    else:
        if family == "mpich":
            remove_stale_hydra_files()
            if not crash_ends_job:
                args += ["-disable-auto-cleanup"]
        if not single_copy:
            env["MPIR_CVAR_CH4_CMA_ENABLE"] = "0"
            env["MPIR_CVAR_CH4_XPMEM_ENABLE"] = "0"
        if transport == "tcp":
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


_RECORDED_RESOURCES = ("cores", "cpu_quota", "memory_bytes", "shm_bytes")


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
        **{k: v for k, v in resources().items() if k in _RECORDED_RESOURCES},
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "binder": bool(os.environ.get("MPILAB_BINDER") or os.environ.get("BINDER_LAUNCH_HOST")),
    }
