"""How to launch MPI processes here: the launcher command, its options and environment.

:func:`launch` is the one place that decides them (running as root, more ranks than
cores, the transport, the single-copy fallback where ptrace is not allowed), and
:class:`Launch` carries the answer; :func:`clean_env` and
:func:`without_mpi_singleton_env` keep an initialised MPI's settings away from a
launcher started by this process.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from dataclasses import asdict, dataclass

from .cleanup import (
    remove_stale_hydra_files,
    remove_stale_session_dirs,
    remove_stale_shm_segments,
)
from .discovery import _openmpi_major, launcher_family, mpiexec
from .machine import is_root, usable_cores

TRANSPORTS = ("shm", "tcp")
# MPI_Init_thread's levels, as mpi4py names them (MPI4PY_RC_THREAD_LEVEL)
THREAD_LEVELS = ("single", "funneled", "serialized", "multiple")


@functools.cache
def cma_works() -> bool:
    """Can this process read another's memory (process_vm_readv)?

    Open MPI's shared-memory transport uses it for single-copy transfers; in containers
    without ptrace it fails mid-run with "Read -1, expected ..., errno = 1".

    Returns
    -------
    bool
        True if a forked child's memory could be read with ``process_vm_readv`` (tried
        once per process, then cached); False elsewhere and on any system but Linux.
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
        """The full command line that starts `program` on every rank.

        Parameters
        ----------
        program : list of str
            The program and its arguments.

        Returns
        -------
        list of str
            :attr:`command` followed by `program`.
        """
        return [*self.command, *program]

    def full_env(self) -> dict:
        """This process's environment, less what an initialised MPI left in it, plus env.

        A process that has called MPI_Init (imported ``mpi4py.MPI``: a notebook kernel, a
        test run) carries its singleton's ``PMIX_*`` / ``OMPI_MCA_ess`` ... settings in its
        environment, and so does every child started without an explicit environment. An
        ``mpiexec`` that inherits them exits 1 without a word; they are dropped here.

        Returns
        -------
        dict of str to str
            :func:`clean_env` updated with this launch's :attr:`env`: the environment to
            start the launcher with.
        """
        env = clean_env()
        env.update(self.env)
        return env

    def describe(self) -> dict:
        """This launch as a record's metadata: its fields, the command line as one string.

        Returns
        -------
        dict
            ``ranks``, ``transport``, ``env``, ``oversubscribed``, ``family``,
            ``placement`` and ``command`` (launcher, ``-n`` and options, space-separated).
        """
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
    :meth:`Launch.full_env`): for any child that will start MPI processes itself.

    Returns
    -------
    dict of str to str
        A copy of ``os.environ`` without the variables an MPI job or singleton sets for
        its own processes (``PMIX_*``, ``OMPI_COMM_WORLD_*``, ...).
    """
    return {k: v for k, v in os.environ.items() if not _mpi_singleton_var(k)}


@contextlib.contextmanager
def without_mpi_singleton_env():
    """Within the block, this process's environment lacks its MPI singleton's settings.

    For launchers that copy ``os.environ`` into the processes they start (ipyparallel's):
    an ``mpiexec`` that inherits a singleton's ``PMIX_*`` settings exits 1 without a word.
    A notebook kernel that imported a compiled kernel (mpi4py initialises MPI on import)
    and then starts a cluster would otherwise fail.

    Yields
    ------
    None
        The variables removed on entry are put back on exit, even after an exception.
    """
    saved = {k: os.environ.pop(k) for k in list(os.environ) if _mpi_singleton_var(k)}
    try:
        yield
    finally:
        os.environ.update(saved)


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

    Parameters
    ----------
    ranks : int
        Processes to start (more than :func:`mpilab.runtime.usable_cores`: oversubscribed).
    transport : {"shm", "tcp"}, optional
        How ranks exchange messages (default ``"shm"``).
    lib : {"openmpi", "mpich"}, optional
        The MPI library whose launcher is used (default
        :func:`mpilab.runtime.selected_library`).
    crash_ends_job : bool, optional
        Whether one rank's exit ends the others at once (default True).
    thread_level : {"single", "funneled", "serialized", "multiple"}, optional
        The ``MPI_Init_thread`` level the ranks ask for (default ``"single"``).
    single_copy : bool, optional
        Allow the shared-memory single-copy path where it works (default True).

    Returns
    -------
    Launch
        The launcher, its options and environment for this job; starting it is
        :class:`mpilab.jobs.Job`'s work.

    Raises
    ------
    ValueError
        `ranks` is not a positive integer, or `transport` or `thread_level` is unknown.
    mpilab.runtime.MPINotFound
        No launcher was found.
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
        remove_stale_session_dirs()
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
