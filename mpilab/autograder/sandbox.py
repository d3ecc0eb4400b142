"""Run a student's code where it can neither read the course nor outlive its grading.

At autograde time every process that runs student code (the notebook's kernel, the MPI
workers that run the checked functions, the compiler of a Cython exercise) starts through
:meth:`Sandbox.popen`:

* **bubblewrap** (``bwrap``) gives it its own mount, PID, network and IPC namespaces: the
  system's folders (:data:`SYSTEM_DIRS`: ``/usr``, ``/etc``, ``/var`` ...) and the
  Python environment read-only, every other top-level folder (``/root``, ``/home``,
  ``/srv``, ``/opt``, ``/work``: wherever a copy of the course may sit), the course
  directory, the lab sources and the repository replaced by empty directories; fresh
  ``/tmp`` and
  ``/dev/shm`` of bounded size; only the submission's own scratch folders writable; no
  network but loopback; no process outside the sandbox visible. When the sandbox's first
  process dies, the kernel kills every process in it (a PID namespace cannot outlive its
  init), so killing the ``bwrap`` process ends everything the student started.
* As root, ``bwrap`` builds the namespaces and then ``setpriv`` switches to the
  unprivileged user ``nobody`` with every capability dropped, before any student code
  runs. Without root, ``bwrap`` runs in a user namespace as the instructor's own user
  (the mounts still hide the course).
* Limits: a cgroup per submission (root only; cgroup v2 or v1) caps memory and the number
  of processes of everything the submission starts; ``prlimit`` caps file size, open
  files and CPU seconds per process (and the process count by user, without cgroups).

Without ``bwrap`` (``MPILAB_SANDBOX=off``, or not installed) processes run unsandboxed with
the same environment and limits, and :attr:`Sandbox.isolated` is False; grading still
decides verdicts outside the student's processes, but student code could then read the
course. ``MPILAB_SANDBOX=required`` makes a missing ``bwrap`` an error.

A grading's scratch folder, and the clean-up of what gradings that ended left (their
folders and empty cgroups), are :mod:`mpilab.autograder.scratch`'s.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .scratch import SCRATCH_PREFIX

__all__ = ["Limits", "Sandbox", "SandboxError", "available", "read_untrusted"]

NOBODY = 65534
ROLES = ("kernel", "ranks", "compile")


class SandboxError(RuntimeError):
    """The sandbox could not be set up (say what is missing)."""


@dataclass
class Limits:
    """What one submission may use (all of its processes together, where noted)."""

    memory_bytes: int = 4 << 30  # all processes together (cgroup)
    processes: int = 512  # all processes together (cgroup), or by user (prlimit)
    file_bytes: int = 256 << 20  # largest file a process may write
    open_files: int = 4096
    cpu_seconds: int = 600  # per process; wall-clock timeouts do the real work
    tmp_bytes: int = 512 << 20  # /tmp of the sandbox
    shm_bytes: int = 512 << 20  # /dev/shm of the sandbox (MPI's shared memory)


def available() -> str | None:
    """Why sandboxing cannot be used here, or None when it can.

    Returns
    -------
    str or None
        The reason, in words (``MPILAB_SANDBOX=off``, not Linux, ``bwrap`` or, as root,
        ``setpriv`` not installed); None when bubblewrap can be used.
    """
    if os.environ.get("MPILAB_SANDBOX", "").lower() == "off":
        return "MPILAB_SANDBOX=off"
    if not sys.platform.startswith("linux"):
        return "bubblewrap needs Linux"
    if not shutil.which("bwrap"):
        return "bubblewrap (bwrap) is not installed (Debian: apt-get install bubblewrap)"
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        return "setpriv (util-linux) is not installed"
    return None


def _package_dirs() -> list[str]:
    """Directories the sandboxed Python needs to read: interpreter, environment, mpilab
    (and, in a checkout, the kernels' sources and the course's reference data)."""
    import mpilab

    pkg = Path(mpilab.__file__).resolve().parent
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(pkg)}
    dirs.add(str(Path(os.path.realpath(sys.executable)).parent.parent))
    kernels = pkg.parent / "kernels"  # C sources and headers of a checkout (build.cython)
    if (pkg.parent / "pyproject.toml").exists() and kernels.is_dir():
        dirs.add(str(kernels))
    # the labelled reference data the labs' own cells read where they cannot measure
    # (lab 07's link without emulated nodes): what every student has (the students'
    # edition holds it; hidden cases live in autograder/reference/, never bound)
    reference = pkg.parent / "reference"
    if (pkg.parent / "pyproject.toml").exists() and reference.is_dir():
        dirs.add(str(reference))
    return sorted(os.path.realpath(d) for d in dirs)


#: Top-level folders a sandboxed process may read (the rest are emptied): the system's
#: programs, libraries and settings, and the kernel's file systems.
SYSTEM_DIRS = frozenset({"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc",
                         "dev", "proc", "sys", "tmp", "var", "nix", "gnu"})


def _outside_system(root: str = "/") -> list[str]:
    """Top-level folders of `root` that are not :data:`SYSTEM_DIRS` (nor links to them)."""
    out = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if name not in SYSTEM_DIRS and os.path.isdir(path) and not os.path.islink(path):
            out.append(path)
    return out


def _checkout() -> str | None:
    """The repository mpilab runs from when it is installed editable (hidden from students)."""
    import mpilab

    root = Path(mpilab.__file__).resolve().parent.parent
    return str(root) if (root / "pyproject.toml").exists() else None


# ---------------------------------------------------------------------------------------
# cgroups


class _Cgroup:
    """One cgroup (v2) or a pair of memory + pids cgroups (v1) for a submission."""

    def __init__(self, name: str, limits: Limits):
        self.dirs: list[Path] = []
        v2 = Path("/sys/fs/cgroup")
        if (v2 / "cgroup.controllers").exists():
            ctl = (v2 / "cgroup.controllers").read_text().split()
            if "memory" in ctl and "pids" in ctl:
                sub = (v2 / "cgroup.subtree_control").read_text().split()
                if not {"memory", "pids"} <= set(sub):
                    (v2 / "cgroup.subtree_control").write_text("+memory +pids")
                d = v2 / name
                d.mkdir(exist_ok=True)  # the grader's kernel joins the preprocessor's
                self.dirs = [d]
                (d / "memory.max").write_text(str(limits.memory_bytes))
                if (d / "memory.swap.max").exists():
                    (d / "memory.swap.max").write_text("0")
                (d / "pids.max").write_text(str(limits.processes))
                return
        mem, pids = v2 / "memory", v2 / "pids"
        if mem.is_dir() and pids.is_dir():
            for root in (mem, pids):
                d = root / name
                d.mkdir(exist_ok=True)
                self.dirs.append(d)
            (mem / name / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
            (pids / name / "pids.max").write_text(str(limits.processes))
            return
        raise OSError("no memory and pids cgroup controllers")

    @classmethod
    def existing(cls, name: str) -> _Cgroup:
        """The cgroup `name` if it exists (for killing and removing it)."""
        self = cls.__new__(cls)
        self.dirs = [Path(b) / name for b in ("/sys/fs/cgroup", "/sys/fs/cgroup/memory",
                                              "/sys/fs/cgroup/pids")
                     if (Path(b) / name).is_dir()]
        if not self.dirs:
            raise OSError(f"no cgroup {name}")
        return self

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def pids(self) -> list[int]:
        out: set[int] = set()
        for d in self.dirs:
            try:
                out |= {int(x) for x in (d / "cgroup.procs").read_text().split()}
            except OSError:
                pass
        return sorted(out)

    def kill_all(self, wait: float = 5.0) -> None:
        """SIGKILL every process in the cgroup until it is empty, then remove it."""
        deadline = time.monotonic() + wait
        kill = self.dirs[0] / "cgroup.kill"
        while True:
            pids = self.pids()
            if not pids:
                break
            if kill.exists():
                try:
                    kill.write_text("1")
                except OSError:
                    pass
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
        for d in self.dirs:
            for _ in range(100):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


# ---------------------------------------------------------------------------------------
# the sandbox


@dataclass
class Sandbox:
    """Where one submission's processes run, and what they may see and use.

    Parameters
    ----------
    root : path
        Scratch directory of this submission (created when missing). Sub-folders are
        made writable for the sandbox user with :meth:`folder`; the rest stays the
        grader's.
    hide : list of paths
        Replaced by empty directories inside (course directory, lab sources, exchange).
        The repository of an editable install, ``/root`` and ``/home`` are always hidden.
    limits : Limits
        Memory, processes, file sizes, CPU seconds, /tmp and /dev/shm sizes.
    name : str, optional
        Names its cgroups (``NAME-ROLE``). Default: the name of `root` when it is a
        scratch folder of :func:`mpilab.autograder.scratch.make_scratch`, else a fresh
        ``mpilab-grade-<hex>``.
    cgroup : bool, optional
        Put its processes in cgroups, as root and where the memory and pids controllers
        exist (default True; without them, ``prlimit`` counts processes by user).

    Raises
    ------
    SandboxError
        When ``MPILAB_SANDBOX=required`` and bubblewrap cannot be used (:func:`available`).
    """

    root: str
    hide: list[str] = field(default_factory=list)
    limits: Limits = field(default_factory=Limits)
    # names its cgroups; by default its scratch folder's (make_scratch), whose claim keeps
    # them from another grading's clean-up (remove_stale_cgroups)
    name: str = ""
    cgroup: bool = True
    _cgs: dict = field(default_factory=dict, repr=False)
    _procs: list = field(default_factory=list, repr=False)

    def __post_init__(self):
        self.root = str(Path(self.root).resolve())
        if not self.name:
            base = Path(self.root).name
            self.name = (base if base.startswith(SCRATCH_PREFIX) and "-" not in
                         base[len(SCRATCH_PREFIX):] else f"{SCRATCH_PREFIX}{uuid.uuid4().hex[:10]}")
        Path(self.root).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)  # the sandbox user may pass through, not list
        why = available()
        if why and os.environ.get("MPILAB_SANDBOX", "").lower() == "required":
            raise SandboxError(f"sandbox required but unavailable: {why}")
        self.why_not = why

    @property
    def isolated(self) -> bool:
        return self.why_not is None

    @property
    def as_root(self) -> bool:
        return os.geteuid() == 0

    # -- configuration shared by processes (the grader kernel rebuilds it from a file) --
    def save(self, path: str | os.PathLike) -> None:
        """Write this sandbox's settings as JSON (mode 600), for :meth:`load` in another
        process (the grader's kernel).

        Parameters
        ----------
        path : str or os.PathLike
            The file to write.
        """
        d = {"root": self.root, "hide": self.hide, "limits": asdict(self.limits),
             "name": self.name, "cgroup": self.cgroup}
        Path(path).write_text(json.dumps(d))
        os.chmod(path, 0o600)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Sandbox:
        """The sandbox whose settings :meth:`save` wrote (same root, name and limits).

        Parameters
        ----------
        path : str or os.PathLike
            The file :meth:`save` wrote.

        Returns
        -------
        Sandbox
            A new handle on the same sandbox; it kills only the processes it starts
            itself, but :meth:`close` (as root) ends every role's cgroup.
        """
        d = json.loads(Path(path).read_text())
        d["limits"] = Limits(**d["limits"])
        return cls(**d)

    def folder(self, name: str) -> Path:
        """A folder under `root` that the sandbox user may write (made if missing).

        Parameters
        ----------
        name : str
            Its path relative to `root`.

        Returns
        -------
        Path
            The folder: mode 711, owned by ``nobody`` when sandboxed as root.
        """
        p = Path(self.root) / name
        p.mkdir(parents=True, exist_ok=True)
        # traverse-only for others: bwrap enters it (as root without capabilities) before
        # it becomes the sandbox user
        os.chmod(p, 0o711)
        if self.isolated and self.as_root:
            os.chown(p, NOBODY, NOBODY)
        return p

    def _ensure_cgroup(self, role: str) -> _Cgroup | None:
        """The cgroup of `role` (one per role, so that a swarm or a memory hog in the
        student's kernel cannot starve the ranks that run the checks, nor the reverse)."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        cg = self._cgs.get(role)
        if cg is not None and not all(d.is_dir() for d in cg.dirs):
            cg = None  # removed meanwhile (by hand, or an older version's clean-up): anew
        if cg is None and self.cgroup and self.as_root:
            try:
                self._cgs[role] = _Cgroup(f"{self.name}-{role}", self.limits)
            except OSError:
                self.cgroup = False  # not available here: prlimit's per-user count instead
        return self._cgs.get(role)

    # -- the command line -----------------------------------------------------------------
    def command(self, argv: list[str], *, cwd: str, env: dict[str, str],
                rw: list[str] = (), ro: list[str] = (), role: str = "kernel") -> list[str]:
        """`argv` wrapped: limits, namespaces, mounts, user, environment.

        `rw` and `ro` are host folders bound at the same path, writable or read-only;
        `role` (``kernel``, ``ranks``, ``compile``) picks the cgroup.

        Parameters
        ----------
        argv : list of str
            The command to run inside.
        cwd : str
            Its working directory (inside the sandbox).
        env : dict of str to str
            Its whole environment (nothing else is inherited).
        rw, ro : list of str, optional
            Host folders it may write, or only read (default: none besides the Python
            environment and mpilab, which are always readable).
        role : str, optional
            ``"kernel"`` (default), ``"ranks"`` or ``"compile"``: which of the
            submission's cgroups it joins.

        Returns
        -------
        list of str
            The command line to start: ``prlimit`` and ``bwrap`` (and ``setpriv`` as
            root) around `argv`, behind a shell that joins the cgroup where there is one;
            without bubblewrap, ``prlimit`` and ``env -i`` only.

        Raises
        ------
        ValueError
            For a `role` that is not one of ``ROLES``.
        """
        lim = self.limits
        cg = self._ensure_cgroup(role)
        prlimit = ["prlimit", f"--fsize={lim.file_bytes}", f"--nofile={lim.open_files}",
                   f"--cpu={lim.cpu_seconds}", "--core=0"]
        if cg is None:
            prlimit.append(f"--nproc={lim.processes + _user_processes()}")
        if not self.isolated:
            return self._join(cg, [*prlimit, "--", "env", "-i",
                                   *[f"{k}={v}" for k, v in env.items()], *argv])
        b = ["bwrap", "--die-with-parent", "--unshare-pid", "--unshare-net", "--unshare-ipc",
             "--new-session", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
             "--perms", "1777", "--size", str(lim.tmp_bytes), "--tmpfs", "/tmp",
             "--perms", "1777", "--size", str(lim.shm_bytes), "--tmpfs", "/dev/shm",
             "--perms", "1777", "--tmpfs", "/var/tmp"]
        if not self.as_root:
            b += ["--unshare-user"]
        # Everything at the top of the file system but the system's own folders is
        # hidden (another copy of the course may sit anywhere: /work, /srv, /opt, /mnt);
        # the Python environment and mpilab are bound back below.
        hidden = ["/root", "/home", "/run", *self.hide, *_outside_system()]
        co = _checkout()
        if co:
            hidden.append(co)
        for h in _outermost(hidden):
            if os.path.isdir(h):
                b += ["--tmpfs", h]
        binds = [("--ro-bind", d) for d in [*_package_dirs(), *ro] if os.path.exists(d)]
        binds += [("--bind", d) for d in rw]
        made: set[str] = set()
        for _how, d in binds:  # bwrap would make missing parents 0700 root: unreachable
            for parent in reversed(Path(d).parents[:-1]):
                if str(parent) not in made:
                    made.add(str(parent))
                    b += ["--perms", "0755", "--dir", str(parent)]
        for how, d in binds:
            b += [how, d, d]
        b += ["--chdir", cwd, "--clearenv"]
        for k, v in env.items():
            b += ["--setenv", k, v]
        if self.as_root:
            b += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
                  "--cap-add", "CAP_SETPCAP", "setpriv", f"--reuid={NOBODY}",
                  f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all",
                  "--bounding-set=-all", "--no-new-privs", "--"]
        return self._join(cg, [*prlimit, "--", *b, *argv])

    @staticmethod
    def _join(cg: _Cgroup | None, cmd: list[str]) -> list[str]:
        """`cmd`, made to join the cgroup `cg` before anything of it runs."""
        if cg is None:
            return cmd
        join = " && ".join(f"echo $$ > {shlex.quote(f)}" for f in cg.procs_files())
        return ["/bin/sh", "-c", f'{join} || exit 111; exec "$@"', "mpilab-sandbox", *cmd]

    def popen(self, argv: list[str], *, cwd: str, env: dict[str, str], rw: list[str] = (),
              ro: list[str] = (), role: str = "ranks", **kwargs) -> subprocess.Popen:
        """Start `argv` in the sandbox (its own session); :meth:`kill` ends all it started.

        Parameters
        ----------
        argv : list of str
            The command to run inside.
        cwd : str
            Its working directory.
        env : dict of str to str
            Its whole environment.
        rw, ro : list of str, optional
            Host folders it may write, or only read (as for :meth:`command`).
        role : str, optional
            Which cgroup it joins (default ``"ranks"``; see :meth:`command`).
        **kwargs
            Passed to :class:`subprocess.Popen` (``stdin``, ``stdout``, ``stderr`` ...).

        Returns
        -------
        subprocess.Popen
            The started process (``bwrap``, or ``prlimit`` without a sandbox), which
            :meth:`close` kills.
        """
        cmd = self.command(argv, cwd=cwd, env=env, rw=rw, ro=ro, role=role)
        p = subprocess.Popen(cmd, cwd=cwd, start_new_session=True, **kwargs)
        self._procs.append(p)
        return p

    def kill(self, p: subprocess.Popen) -> None:
        """End `p` and everything it started (its PID namespace, or its process group).

        Parameters
        ----------
        p : subprocess.Popen
            A process :meth:`popen` started; waited for up to 10 seconds after SIGKILL.
        """
        for sig in (signal.SIGKILL,):
            try:
                os.killpg(p.pid, sig)
            except OSError:
                pass
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def close(self, remove: bool = True) -> None:
        """Kill every process of this submission, remove its cgroup and (by default) root.

        Parameters
        ----------
        remove : bool, optional
            Also delete `root` with all it holds (default True).
        """
        for p in self._procs:
            self.kill(p)
        self._procs.clear()
        if self.as_root:  # every role's cgroup, also those another process made
            for role in ROLES:
                cg = self._cgs.pop(role, None)
                if cg is None:
                    try:
                        cg = _Cgroup.existing(f"{self.name}-{role}")
                    except OSError:
                        continue
                cg.kill_all()
        if remove:
            shutil.rmtree(self.root, ignore_errors=True)


def _outermost(paths: list[str]) -> list[str]:
    """Real paths, without those inside another one of the list."""
    real = sorted({os.path.realpath(p) for p in paths if p})
    out: list[str] = []
    for p in real:
        if not any(p == q or p.startswith(q.rstrip("/") + "/") for q in out):
            out.append(p)
    return out


def _user_processes() -> int:
    try:
        import psutil

        me = os.getuid()
        return sum(1 for p in psutil.process_iter(["uids"]) if p.info["uids"].real == me)
    except Exception:  # noqa: BLE001 - best effort
        return 256


def read_untrusted(path: str | os.PathLike, limit: int) -> bytes | None:
    """The bytes of a file a sandboxed process wrote, or None.

    Never follows a symbolic link (a student's process could point one at a file only
    the grader may read), reads regular files only, and at most `limit` bytes (None when
    the file is larger).

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    limit : int
        Most bytes read.

    Returns
    -------
    bytes or None
        Its content; None for a link, a file that is not regular, one over `limit`
        bytes, or one that cannot be read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        import stat

        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        chunks, got = [], 0
        while got <= limit:
            b = os.read(fd, min(1 << 20, limit + 1 - got))
            if not b:
                break
            chunks.append(b)
            got += len(b)
        return None if got > limit else b"".join(chunks)
    finally:
        os.close(fd)
