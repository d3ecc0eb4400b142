"""Each user's server on a class server in a cgroup of its own, with a private /dev/shm.

The hub (classroom/jupyterhub_config.py) makes a :class:`Group` for a user before it
starts their JupyterLab, puts the server's process in it before that process becomes
the user (so the kernels, engines, ``mpiexec`` and self-checks it starts are in it too:
a child stays in its parent's cgroup, and an unprivileged user cannot move out), and
ends the group when the server stops, is culled or dies: every process in it is killed,
those that left the server's session too, and the folders are removed.

Limits (:class:`Limits`, from ``$MPILAB_CLASSROOM_CPUS``, ``_MEM``, ``_PIDS``, ``_SHM``):
CPU time (cgroup v2 ``cpu.max``; v1 ``cpu.cfs_quota_us``), memory without swap (v2
``memory.max`` and ``memory.swap.max``; v1 ``memory.limit_in_bytes`` and
``memory.memsw.limit_in_bytes``), processes and threads (``pids.max``), and the size of
the server's own /dev/shm: the server runs in a mount namespace of its own with a tmpfs
of that size on /dev/shm, so one user's shared-memory segments are neither visible to
another nor able to fill theirs.

Where the controllers are: cgroup v2 (one hierarchy, Debian 12's default), or v1
hierarchies for ``cpu``, ``memory``, ``pids`` next to a controller-less v2 one (the
"hybrid" layout); :func:`hierarchies` finds them. The groups are
``<mount>/<klass>/<user>`` at the top of each hierarchy (in v2, the top is the only
cgroup with processes that may enable controllers for its children). A v2 hierarchy,
with controllers or without, gives ``cgroup.kill``; without one, :meth:`Group.end`
kills what ``cgroup.procs`` lists until nothing is left.

Root only (the hub runs as root). ``python -m mpilab.autograder.limits check KLASS``
tries the limits before the hub starts, ``... end KLASS`` ends every group of a class
(``scripts/classroom.sh start`` and ``stop``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import re
import signal
import sys
import time
from dataclasses import dataclass

from .reserve import cgroup_mounts

CONTROLLERS = ("cpu", "memory", "pids")
PERIOD_US = 100_000  # the CPU quota's period (the kernel's default)
DEFAULTS = {"CPUS": "2", "MEM": "2G", "PIDS": "1024", "SHM": "512M"}
_OFF = {"", "none", "off", "max", "0"}
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int | None:
    """Bytes from ``512M``, ``2G``, ``1.5G`` or a plain number; None for no limit.

    Parameters
    ----------
    text : str
        A number of bytes with an optional K, M, G or T (powers of 1024; a trailing
        ``B`` or ``iB`` is allowed), or ``none``/``off``/``max``/``0`` for no limit.

    Returns
    -------
    int or None
        The bytes, or None where `text` says no limit.
    """
    t = text.strip().upper()
    if t.lower() in _OFF:
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?", t)
    if not m:
        raise ValueError(f"not a size: {text!r} (e.g. 512M, 2G, or none)")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


@dataclass(frozen=True)
class Limits:
    """What one user's server and everything it starts may use; None: no limit.

    Attributes
    ----------
    cpus : float or None
        CPUs' worth of time per period (1.5: one and a half CPUs).
    memory : int or None
        Bytes of memory, page cache and the user's /dev/shm included; no swap.
    pids : int or None
        Processes and threads at once.
    shm : int or None
        Bytes of the server's own /dev/shm (None: the machine's /dev/shm, shared).
    """

    cpus: float | None = None
    memory: int | None = None
    pids: int | None = None
    shm: int | None = None

    def describe(self) -> str:
        """The limits in words, e.g. ``2 CPUs, 2048 MiB, 1024 tasks, 512 MiB of /dev/shm``.

        Returns
        -------
        str
            One phrase per limit, ``no ...`` for one that is off.
        """
        def mib(n: int | None) -> str:
            return "no limit" if n is None else f"{n / (1 << 20):g} MiB"

        return ", ".join([
            "no CPU limit" if self.cpus is None else f"{self.cpus:g} CPU" + "s" * (self.cpus != 1),
            f"memory {mib(self.memory)}",
            "no task limit" if self.pids is None else f"{self.pids} tasks",
            "the machine's /dev/shm" if self.shm is None else f"{mib(self.shm)} of /dev/shm",
        ])  # fmt: skip

    @classmethod
    def from_env(cls, environ: dict | None = None) -> Limits:
        """The class's limits: ``$MPILAB_CLASSROOM_CPUS``, ``_MEM``, ``_PIDS``, ``_SHM``.

        Unset ones take :data:`DEFAULTS` (2 CPUs, 2 GiB, 1024 tasks, 512 MiB of
        /dev/shm); ``none`` (or ``off``, ``0``) turns one off.

        Parameters
        ----------
        environ : dict, optional
            Where to read them (default ``os.environ``).

        Returns
        -------
        Limits
            The limits; a malformed value raises ValueError naming its variable.
        """
        env = os.environ if environ is None else environ

        def get(key: str, parse):
            name = f"MPILAB_CLASSROOM_{key}"
            text = env.get(name, DEFAULTS[key])
            try:
                return None if text.strip().lower() in _OFF else parse(text.strip())
            except ValueError as exc:
                raise ValueError(f"${name}={text!r}: {exc}") from None

        def positive(kind):
            def parse(text):
                value = kind(text)
                if value <= 0:
                    raise ValueError("must be positive")
                return value
            return parse

        return cls(cpus=get("CPUS", positive(float)), memory=get("MEM", parse_size),
                   pids=get("PIDS", positive(int)), shm=get("SHM", parse_size))


def hierarchies(mountinfo: str = "/proc/self/mountinfo") -> dict[str, tuple[int, str]]:
    """Where each of :data:`CONTROLLERS` is, and the v2 hierarchy for ``cgroup.kill``.

    Parameters
    ----------
    mountinfo : str, optional
        As for :func:`mpilab.autograder.reserve.cgroup_mounts`.

    Returns
    -------
    dict
        :func:`~mpilab.autograder.reserve.cgroup_mounts` of :data:`CONTROLLERS`: a v1
        hierarchy that carries a controller wins over v2, where it cannot be enabled.
    """
    return cgroup_mounts(CONTROLLERS, mountinfo)


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


class Group:
    """The cgroup(s) of one user's server: ``<mount>/<klass>/<user>`` in each hierarchy.

    Parameters
    ----------
    klass : str
        The class's name (one folder at the top of each hierarchy).
    user : str
        The user's login.
    where : dict, optional
        :func:`hierarchies`' answer (default: found now).
    """

    def __init__(self, klass: str, user: str, where: dict | None = None) -> None:
        for part in (klass, user):
            if not part or "/" in part or part in (".", ".."):
                raise ValueError(f"not a cgroup name: {part!r}")
        self.klass, self.user = klass, user
        self.where = hierarchies() if where is None else where

    def dirs(self) -> dict[str, str]:
        """The group's folder in each hierarchy it uses.

        Returns
        -------
        dict
            ``controller or "unified" -> folder``; one folder can serve several.
        """
        return {k: os.path.join(point, self.klass, self.user)
                for k, (_, point) in self.where.items()}

    def folders(self) -> list[str]:
        """Each folder once, the v2 one first.

        Returns
        -------
        list of str
            The folders (created or not).
        """
        out: list[str] = []
        for d in self.dirs().values():
            if d not in out:
                out.append(d)
        return out

    def create(self, limits: Limits, graders: int | None = None) -> None:
        """Make the group (ending one left from before) and set `limits` on it.

        Parameters
        ----------
        limits : Limits
            What the server and its descendants may use (``shm`` is not a cgroup's: see
            :func:`private_shm`).
        graders : int, optional
            A Unix group id whose members may hold this group back while they measure
            (:mod:`mpilab.autograder.reserve`): its v2 ``cgroup.freeze`` and its CPU
            weight (``cpu.weight`` or ``cpu.shares``) become writable by that group.

        Returns
        -------
        None
            A limit whose controller this machine lacks raises RuntimeError.
        """
        need = {"cpu": limits.cpus, "memory": limits.memory, "pids": limits.pids}
        missing = [c for c, v in need.items() if v is not None and c not in self.where]
        if missing:
            raise RuntimeError(f"no cgroup controller {', '.join(missing)} here: "
                               f"set MPILAB_CLASSROOM_{'/'.join(m.upper() for m in missing)}=none "
                               "or enable it")
        self.end()
        v2 = sorted(c for c in CONTROLLERS if self.where.get(c, (0,))[0] == 2)
        for d in self.folders():
            parent = os.path.dirname(d)
            os.makedirs(parent, exist_ok=True)
            if v2 and self.where["unified"][1] == os.path.dirname(parent):
                enable = " ".join(f"+{c}" for c in v2)
                _write(os.path.join(os.path.dirname(parent), "cgroup.subtree_control"), enable)
                _write(os.path.join(parent, "cgroup.subtree_control"), enable)
            os.mkdir(d)
        dirs = self.dirs()
        if limits.cpus is not None:
            quota = max(1000, int(limits.cpus * PERIOD_US))
            if self.where["cpu"][0] == 2:
                _write(os.path.join(dirs["cpu"], "cpu.max"), f"{quota} {PERIOD_US}")
            else:
                _write(os.path.join(dirs["cpu"], "cpu.cfs_period_us"), str(PERIOD_US))
                _write(os.path.join(dirs["cpu"], "cpu.cfs_quota_us"), str(quota))
        if limits.memory is not None:
            d = dirs["memory"]
            if self.where["memory"][0] == 2:
                _write(os.path.join(d, "memory.max"), str(limits.memory))
                if os.path.exists(os.path.join(d, "memory.swap.max")):
                    _write(os.path.join(d, "memory.swap.max"), "0")
            else:
                _write(os.path.join(d, "memory.limit_in_bytes"), str(limits.memory))
                if os.path.exists(os.path.join(d, "memory.memsw.limit_in_bytes")):
                    _write(os.path.join(d, "memory.memsw.limit_in_bytes"), str(limits.memory))
        if limits.pids is not None:
            _write(os.path.join(dirs["pids"], "pids.max"), str(limits.pids))
        if graders is not None:
            files = [os.path.join(dirs.get("unified", ""), "cgroup.freeze")]
            if "cpu" in dirs:
                files.append(os.path.join(dirs["cpu"], "cpu.weight" if self.where["cpu"][0] == 2
                                          else "cpu.shares"))
            for path in files:
                if os.path.exists(path):
                    os.chown(path, 0, graders)
                    os.chmod(path, 0o664)

    def join(self, pid: int = 0) -> None:
        """Move process `pid` (0: the caller) into every folder of the group.

        Parameters
        ----------
        pid : int, optional
            The process; 0 (default) is the calling process (a ``preexec_fn``).

        Returns
        -------
        None
            OSError where a folder is missing or the move is refused.
        """
        for d in self.folders():
            _write(os.path.join(d, "cgroup.procs"), str(pid or os.getpid()))

    def pids(self) -> set[int]:
        """The processes in the group now (in any of its folders).

        Returns
        -------
        set of int
            Their ids; empty where the group does not exist.
        """
        out: set[int] = set()
        for d in self.folders():
            try:
                out.update(int(p) for p in _read(os.path.join(d, "cgroup.procs")).split())
            except OSError:
                pass
        return out

    def exists(self) -> bool:
        """Whether any folder of the group is there.

        Returns
        -------
        bool
            True while one is.
        """
        return any(os.path.isdir(d) for d in self.folders())

    def end(self, timeout: float = 30.0) -> bool:
        """Kill every process in the group, then remove its folders.

        ``cgroup.kill`` where a v2 folder is (it reaches a process that forks
        meanwhile); else SIGKILL to each process listed, again until none is left.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait for the processes to go and the folders to be removable.

        Returns
        -------
        bool
            True when nothing of the group is left; False after `timeout` (what was
            left is logged on stderr).
        """
        dirs = [d for d in self.folders() if os.path.isdir(d)]
        kill = [os.path.join(d, "cgroup.kill") for d in dirs
                if os.path.exists(os.path.join(d, "cgroup.kill"))]
        deadline = time.monotonic() + timeout
        while True:
            left = self.pids()
            if kill and left:
                try:
                    _write(kill[0], "1")
                except OSError:
                    kill = []
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for d in list(dirs):
                try:
                    os.rmdir(d)
                    dirs.remove(d)
                except FileNotFoundError:
                    dirs.remove(d)
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        raise
            if not dirs:
                return True
            if time.monotonic() > deadline:
                print(f"limits: {self.klass}/{self.user} left {sorted(self.pids())} in {dirs}",
                      file=sys.stderr)
                return False
            time.sleep(0.05)


def end_class(klass: str, timeout: float = 30.0) -> list[str]:
    """End every user's group of a class, then remove the class's folders.

    Parameters
    ----------
    klass : str
        The class's name.
    timeout : float, optional
        Seconds for each group (see :meth:`Group.end`).

    Returns
    -------
    list of str
        The users whose groups were there.
    """
    where = hierarchies()
    users: set[str] = set()
    tops = {os.path.join(point, klass) for _, point in where.values()}
    for top in tops:
        if os.path.isdir(top):
            users.update(e.name for e in os.scandir(top) if e.is_dir())
    for user in sorted(users):
        Group(klass, user, where).end(timeout)
    for top in tops:
        try:
            os.rmdir(top)
        except FileNotFoundError:
            pass
    return sorted(users)


# --- the server's own /dev/shm --------------------------------------------------------------
_CLONE_NEWNS = 0x00020000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x4000, 0x40000
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def private_shm(size: int, path: str = "/dev/shm") -> None:
    """Give the calling process a mount namespace of its own with a tmpfs of `size` on `path`.

    Mounts stay private to the new namespace (nothing propagates back); every process
    the caller starts shares it, and the tmpfs goes with the last of them. Call it as
    root, in a ``preexec_fn`` (after fork, before the user's ids are taken).

    Parameters
    ----------
    size : int
        Bytes of the tmpfs.
    path : str, optional
        Where to mount it (default ``/dev/shm``).

    Returns
    -------
    None
        OSError where a step is refused.
    """
    def check(rc: int, what: str) -> None:
        if rc != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"{what}: {os.strerror(e)}")

    check(_libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    check(_libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /")
    check(_libc.mount(b"tmpfs", path.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV,
                      f"size={size},mode=1777".encode()), f"mount tmpfs on {path}")


def preexec(group: Group | None, limits: Limits, then=None):
    """A ``preexec_fn``: join `group`, mount the private /dev/shm, then run `then`.

    Parameters
    ----------
    group : Group or None
        The group to join (None: none).
    limits : Limits
        Its ``shm`` sizes the private /dev/shm (None: the machine's).
    then : callable, optional
        What runs next in the child (JupyterHub's: the user's ids).

    Returns
    -------
    callable
        The function for ``subprocess.Popen(preexec_fn=...)``.
    """
    def run() -> None:
        if group is not None:
            group.join()
        if limits.shm is not None:
            private_shm(limits.shm)
        if then is not None:
            then()
    return run


def main(argv: list[str] | None = None) -> int:
    """``python -m mpilab.autograder.limits check|end KLASS``.

    ``check`` reads the class's limits from the environment and makes and ends a group
    with them (before the hub starts: a machine without a controller is refused then,
    not at a student's first login); ``end`` ends every group of the class.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default ``sys.argv[1:]``).

    Returns
    -------
    int
        0 done (``end``: nothing left); 1 something left or refused; 2 a usage error.
    """
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in ("check", "end"):
        print("usage: python -m mpilab.autograder.limits check|end KLASS", file=sys.stderr)
        return 2
    klass = args[1]
    if args[0] == "check":
        probe = None
        try:
            limits = Limits.from_env()
            probe = Group(klass, f"probe-{os.getpid()}")
            probe.create(limits)
        except (OSError, ValueError, RuntimeError) as exc:
            print(f"limits: cannot confine the class's servers here: {exc}", file=sys.stderr)
            return 1
        finally:
            if probe is not None:
                probe.end()
                for d in probe.folders():  # the class's folder, unless a hub uses it
                    try:
                        os.rmdir(os.path.dirname(d))
                    except OSError:
                        pass
        print(f"limits: each user's server: {limits.describe()}")
        return 0
    users = end_class(klass)
    left = [u for u in users if Group(klass, u).exists()]
    if users:
        print(f"limits: ended the groups of {', '.join(users)}")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
