"""A class of its own on this machine, for a benchmark or a test: ``scripts/classroom.sh``
starts it from a roster (real accounts, the hub on free ports) and removes it; commands
as its users (``runuser``), nbgrader as its instructor; what its accounts left behind.

:mod:`mpilab.bench.classroom` runs one; the classroom tests (tests/classroom_hub.py) too.
Root only (accounts, PAM); :class:`NoClass` says why a class cannot run here.
"""

from __future__ import annotations

import os
import pwd
import random
import socket
import subprocess
import tempfile
import time
from pathlib import Path


class NoClass(RuntimeError):
    """No class can run here (not root, no proxy, ...): the reason."""


def _ephemeral_low(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> int:
    """The lowest port the kernel hands out on its own (32768 on Linux by default)."""
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports() -> int:
    """A port whose next two are free too (the class's, its proxy's API, its hub's).

    Taken below the kernel's ephemeral range: a port from inside it, free when chosen,
    can be handed to any other program's socket in the minutes before the hub binds it
    (the class's environment is installed in between), and once was, to an ipyparallel
    controller of a test beside it.

    Returns
    -------
    int
        The first of the three.
    """
    top = max(_ephemeral_low() - 3, 10003)
    for _ in range(50):
        base = random.randrange(10000, top)
        socks = []
        try:
            for p in range(base, base + 3):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise NoClass("no three free ports in a row")


class Classroom:
    """A class of its own on this machine, started and removed by ``scripts/classroom.sh``.

    Parameters
    ----------
    students : list of str
        The students' logins.
    instructor : str
        The instructor's login.
    venv : str
        The class's Python environment (made, or reused when up to date).
    root : Path
        The course's checkout (its scripts/classroom.sh).
    state : Path, optional
        The class's state folder (default /srv/mpilab-bench-PID); it goes with the class.
    env : dict, optional
        More environment for scripts/classroom.sh (``MPILAB_KERNELS``, ...).
    """

    def __init__(self, students: list[str], instructor: str, venv: str, root: Path, *,
                 state: Path | None = None, env: dict | None = None):
        self.students, self.instructor, self.root = students, instructor, root
        self.state = state or Path(f"/srv/mpilab-bench-{os.getpid()}")
        self.port = free_ports()
        self.venv = venv
        self.env = {**os.environ, **(env or {}), "MPILAB_CLASSROOM_DIR": str(self.state),
                    "MPILAB_CLASSROOM_PORT": str(self.port), "MPILAB_CLASSROOM_VENV": venv,
                    "MPILAB_CLASSROOM_IP": "127.0.0.1"}
        self.url = f"http://127.0.0.1:{self.port}"
        self.passwords: dict[str, str] = {}

    def script(self, *args: str, timeout: float) -> subprocess.CompletedProcess:
        """``scripts/classroom.sh ARGS`` for this class.

        Parameters
        ----------
        *args : str
            Its arguments.
        timeout : float
            Seconds it may take.

        Returns
        -------
        subprocess.CompletedProcess
            What it did and said.
        """
        return subprocess.run([str(self.root / "scripts" / "classroom.sh"), *args],
                              capture_output=True, text=True, env=self.env, timeout=timeout)

    def start(self) -> None:
        """Accounts from a roster, the class's Python, the exchange, the hub."""
        for name in (*self.students, self.instructor):
            try:
                pwd.getpwnam(name)
                raise NoClass(f"an account {name} exists already")
            except KeyError:
                pass
        with tempfile.TemporaryDirectory() as d:
            roster = Path(d) / "roster.txt"
            roster.write_text("\n".join(self.students) + f"\n{self.instructor} instructor\n")
            done = self.script("start", str(roster), timeout=3600)
        if done.returncode == 2:
            raise NoClass(done.stderr.strip())
        if done.returncode != 0:
            raise RuntimeError(f"classroom.sh start failed:\n{done.stdout}{done.stderr}")
        for line in (self.state / "passwords").read_text().splitlines():
            login, password, _ = line.split()
            self.passwords[login] = password

    def as_user(self, login: str, *cmd: str, cwd: str | None = None,
                timeout: float = 600) -> subprocess.CompletedProcess:
        """`cmd` as `login` (runuser), in a clean environment with the class's Python.

        Parameters
        ----------
        login : str
            The account.
        *cmd : str
            The command.
        cwd : str, optional
            Where (default: the account's home).
        timeout : float
            Seconds it may take.

        Returns
        -------
        subprocess.CompletedProcess
            Its exit status and output, as :meth:`script`'s.
        """
        home = pwd.getpwnam(login).pw_dir
        env = ["env", "-i", f"HOME={home}", f"USER={login}", "LANG=C.UTF-8",
               f"PATH={self.venv}/bin:/usr/local/bin:/usr/bin:/bin",
               f"MPILAB_EXCHANGE={self.state / 'exchange'}"]  # as in their server's terminal
        return subprocess.run(["runuser", "-u", login, "--", *env, *cmd], capture_output=True,
                              text=True, cwd=cwd or home, timeout=timeout)

    def nbgrader(self, login: str, *args: str, cwd: str | None = None) -> str:
        """``nbgrader ARGS`` as `login`; its output (RuntimeError when it fails).

        Parameters
        ----------
        login : str
            The account.
        *args : str
            nbgrader's arguments.
        cwd : str, optional
            Where (default: the account's home).

        Returns
        -------
        str
            What it printed.
        """
        done = self.as_user(login, f"{self.venv}/bin/nbgrader", *args, cwd=cwd)
        if done.returncode != 0:
            raise RuntimeError(f"nbgrader {' '.join(args)} as {login} failed:\n"
                               f"{done.stdout}{done.stderr}")
        return done.stdout + done.stderr

    def course_dir(self) -> str:
        """The instructor's course directory (their copy of the course's autograder/).

        Returns
        -------
        str
            Its path.
        """
        return os.path.join(pwd.getpwnam(self.instructor).pw_dir, "mpilab", "autograder")

    def release(self, lab: str) -> None:
        """The instructor generates and releases `lab` to the exchange.

        Parameters
        ----------
        lab : str
            The lab's name.
        """
        self.nbgrader(self.instructor, "generate_assignment", lab, "--force",
                      cwd=self.course_dir())
        self.nbgrader(self.instructor, "release_assignment", lab, "--force",
                      cwd=self.course_dir())

    def uids(self) -> set[int]:
        """The students' user ids.

        Returns
        -------
        set of int
            One per student account.
        """
        return {pwd.getpwnam(s).pw_uid for s in self.students}

    def stop(self) -> None:
        """Stop the hub and everything of the class's accounts; remove it all."""
        self.script("stop", timeout=600)
        done = self.script("remove", timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"classroom.sh remove failed:\n{done.stdout}{done.stderr}")


def leftovers(uids: set[int], shm: str = "/dev/shm", tmp: str | None = None) -> dict:
    """Processes of `uids` still running, their files in `shm` and, where asked, in `tmp`.

    Parameters
    ----------
    uids : set of int
        The accounts looked at.
    shm : str
        The shared-memory folder.
    tmp : str, optional
        A temporary folder to look in too (``/tmp``: once the accounts are removed,
        nothing of theirs may stay there, such as a grading folder ``mpilab-grading-<uid>``
        or Open MPI's session folder, which a later account given the same uid would
        find as its own).

    Returns
    -------
    dict
        ``processes`` (``"pid user command"`` strings, zombies left out), ``shm`` (file
        names) and, with `tmp`, ``tmp`` (file names).
    """
    import psutil

    procs = []
    for p in psutil.process_iter(["pid", "uids", "username", "cmdline", "status"]):
        try:
            if p.info["uids"].real in uids and p.info["status"] != psutil.STATUS_ZOMBIE:
                procs.append(f"{p.pid} {p.info['username']} "
                             f"{' '.join(p.info['cmdline'] or ())[:120]}")
        except (psutil.Error, AttributeError):
            continue
    out = {"processes": procs, "shm": _owned(shm, uids)}
    if tmp is not None:
        out["tmp"] = _owned(tmp, uids)
    return out


def _owned(folder: str, uids: set[int]) -> list[str]:
    """The names in `folder` (not below) that belong to one of `uids`."""
    files = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        try:
            if os.lstat(os.path.join(folder, name)).st_uid in uids:
                files.append(name)
        except OSError:
            continue
    return files


def settle(uids: set[int], seconds: float = 20.0, tmp: str | None = None) -> dict:
    """:func:`leftovers`, after waiting up to `seconds` for them to be gone.

    Parameters
    ----------
    uids : set of int
        The accounts looked at.
    seconds : float
        How long processes that are ending may take.
    tmp : str, optional
        As for :func:`leftovers`.

    Returns
    -------
    dict
        As :func:`leftovers`.
    """
    deadline = time.monotonic() + seconds
    while True:
        left = leftovers(uids, tmp=tmp)
        if not any(left.values()) or time.monotonic() > deadline:
            return left
        time.sleep(1)
