"""Shared-memory segments and temporary files that ended MPI jobs leave behind.

Open MPI's and MPICH's shared-memory transports put one file per rank in /dev/shm, and
MPICH's hydra writes a topology file to /tmp; a killed job (a timeout, a deadlock demo,
a crashed engine) or an MPI singleton leaves them there. Only this user's files that no
live process uses are removed, so running jobs are never touched.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time


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
    """The MPI shared-memory files in `directory` now (Open MPI 4's vader, 5's sm, MPICH's).

    Parameters
    ----------
    directory : str, optional
        Where the transports put them (default ``/dev/shm``).

    Returns
    -------
    set of str
        File names (not paths) starting with one of :data:`SEGMENT_PREFIXES`, whoever
        owns or uses them; empty if `directory` cannot be listed.
    """
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

    Parameters
    ----------
    before : set of str
        :func:`shm_segments` taken before the job started.
    settle : float, optional
        Seconds a new segment must stay unused to count as leaked (default 2).
    directory : str, optional
        Where the segments are (default ``/dev/shm``).

    Returns
    -------
    set of str
        Names of the leaked segments (empty: the job left nothing behind). Returns as
        soon as no suspect is left, else after `settle` seconds.
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

    Parameters
    ----------
    directory : str, optional
        Where the segments are (default ``/dev/shm``); every name with one of
        :data:`SEGMENT_PREFIXES` is considered (MPICH's too).

    Returns
    -------
    int
        How many files were removed (0 if `directory` cannot be listed).
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

    Parameters
    ----------
    directory : str, optional
        Where hydra writes them (default ``/tmp``: hydra does not read ``TMPDIR``).

    Returns
    -------
    int
        How many ``hydra_hwloc_xmlfile_*`` files were removed (0 while one of this
        user's hydra processes runs).
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


# Open MPI's session folders: the launcher (mpiexec / prterun) keeps its job's PMIx
# shared-memory store there and removes it only when it ends normally. Open MPI 4.1:
# $TMPDIR/ompi.<host>.<uid>/pid.<launcher pid>/ (several MB each: after a day of killed
# jobs this machine held 1,219 of them, 8.4 GB of /tmp); Open MPI 5 (PRRTE):
# $TMPDIR/ompi.<launcher pid>/. A folder whose launcher is no longer alive is stale.
_SESSION_4 = re.compile(r"ompi\.[^/]+\.(\d+)$")
_SESSION_5 = re.compile(r"ompi\.(\d+)$")


def remove_stale_session_dirs(directory: str | None = None) -> int:
    """Delete the session folders of Open MPI launchers that have ended; how many.

    Only this user's folders whose launcher's process id no longer runs, or runs a
    process that started after the folder last changed (the id was reused), are removed,
    so running jobs are never touched.

    Parameters
    ----------
    directory : str, optional
        Where Open MPI makes them (default: ``$TMPDIR`` or ``/tmp``, as Open MPI).

    Returns
    -------
    int
        How many folders were removed (0 if `directory` cannot be listed).
    """
    import shutil
    import tempfile

    directory = directory or tempfile.gettempdir()
    uid, removed, stale = os.geteuid(), 0, []
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        top = os.path.join(directory, name)
        m4, m5 = _SESSION_4.match(name), _SESSION_5.match(name)
        if m4 and int(m4.group(1)) == uid and _owned_by(top, uid):
            with contextlib.suppress(OSError):
                stale += [os.path.join(top, n) for n in os.listdir(top)
                          if n.startswith("pid.") and n[4:].isdigit()
                          and not _alive(int(n[4:]), _mtime(os.path.join(top, n)))]
        elif m5 and _owned_by(top, uid) and not _alive(int(m5.group(1)), _mtime(top)):
            stale.append(top)
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
        removed += not os.path.exists(path)
    return removed


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def _alive(pid: int, since: float | None = None) -> bool:
    """Whether process `pid` exists, is not a zombie and, with `since` (a time, seconds
    since the epoch), had started by then: a process with a reused id started later."""
    got = _proc_stat(pid)
    if not got or not got[1] or got[1][0] in "ZX":
        return False
    if since is None:
        return True
    try:
        return _boot_time() + int(got[1][19]) / os.sysconf("SC_CLK_TCK") <= since + 1.0
    except (OSError, ValueError, IndexError):
        return False


def _boot_time() -> float:
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("btime "):
                return float(line.split()[1])
    raise ValueError("no btime in /proc/stat")


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
        got = _proc_stat(int(pid))
        try:
            if (got and got[0] in HYDRA_PROCESSES and got[1][0] not in "ZX"
                    and os.stat(f"/proc/{pid}").st_uid == uid):
                return True
        except OSError:
            continue
    return False


def _proc_stat(pid: int) -> tuple[str, list[str]] | None:
    """Process `pid`'s name and the fields of /proc/<pid>/stat after it (state first);
    None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        return stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
    except (OSError, ValueError):
        return None


def release_singleton_segments() -> int:
    """Unlink the shared-memory segments of this process if it is an MPI singleton.

    A process that initialises MPI without a launcher (a notebook kernel importing a
    compiled kernel, the grader, pytest) is a job of one rank. Open MPI 5 still creates
    its 16 MiB ``sm_segment.*`` file for it, and only the launcher (PRRTE) would remove
    it: a singleton's file stays in /dev/shm after the process ends (seen with 5.0.11
    from PyPI), and four kernels fill Binder's 64 MiB /dev/shm. No other process ever
    opens a singleton's segment, so its name is removed at once; the memory stays mapped
    and is freed when the process ends. Returns how many files were unlinked.

    Returns
    -------
    int
        How many segment files were unlinked: 0 unless ``mpi4py.MPI`` is imported, MPI
        is initialised and not finalised, and ``COMM_WORLD`` has one rank.
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
