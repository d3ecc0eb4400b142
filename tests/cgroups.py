"""A real cgroup with a CPU quota and a memory limit, as Binder or JupyterHub gives one.

Root only. cgroup v1 (separate ``cpu`` and ``memory`` hierarchies, as on CI) or v2 (a
unified hierarchy whose ``cpu`` and ``memory`` controllers are enabled for children).
The new groups are made inside this process's own groups, so any limit above them still
applies. Everything a command started in them is killed and the groups are removed on
exit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid

from mpilab import runtime


class CgroupUnavailable(RuntimeError):
    pass


def _v1_dir(controller: str) -> str | None:
    dirs = runtime.cgroup_dirs(controller)
    if dirs and not os.path.exists(os.path.join(dirs[0], "cgroup.controllers")):
        return dirs[0]
    return None


def _v2_dir() -> str | None:
    dirs = runtime.cgroup_dirs("memory")
    if dirs and os.path.exists(os.path.join(dirs[0], "cgroup.controllers")):
        return dirs[0]
    return None


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


class Limited:
    """Groups made by :func:`limited`; ``prefix`` runs a command inside them."""

    def __init__(self, dirs: dict[str, str], v2: bool, shm: int | None = None):
        self.dirs, self.v2, self.shm = dirs, v2, shm
        procs = " ".join(f"{d}/cgroup.procs" for d in dict.fromkeys(dirs.values()))
        # The shell moves itself in, then becomes the command: every child inherits it.
        self.prefix = ["sh", "-c", f'for f in {procs}; do echo $$ > "$f"; done; exec "$@"',
                       "limited"]
        if shm:  # a /dev/shm of its own, `shm` bytes (Docker's default is 64 MiB)
            self.prefix += ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            f'mount -t tmpfs -o size={shm} tmpfs /dev/shm && exec "$@"',
                            "shm"]

    def memory_peak(self) -> int:
        d = self.dirs["memory"]
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        with contextlib.suppress(OSError, ValueError):
            return int(_read(os.path.join(d, name)))
        return -1

    def oom_kills(self) -> int:
        d = self.dirs["memory"]
        text = _read(os.path.join(d, "memory.events" if self.v2 else "memory.oom_control"))
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def pids(self) -> list[int]:
        seen: set[int] = set()
        for d in self.dirs.values():
            with contextlib.suppress(OSError):
                seen |= {int(p) for p in _read(os.path.join(d, "cgroup.procs")).split()}
        return sorted(seen)


@contextlib.contextmanager
def limited(cpus: float = 1.0, memory: int = 2 << 30, shm: int | None = None):
    """Make a cgroup with `cpus` CPUs of quota and `memory` bytes; yield :class:`Limited`.

    `shm`: commands started through its ``prefix`` see a /dev/shm of that many bytes
    (a tmpfs in a mount namespace of their own).
    """
    if not runtime.is_root():
        raise CgroupUnavailable("making a cgroup needs root")
    name = f"mpilab-test-{uuid.uuid4().hex[:8]}"
    period = 100_000
    dirs: dict[str, str] = {}
    v2 = False
    try:
        cpu_v1, mem_v1 = _v1_dir("cpu"), _v1_dir("memory")
        if cpu_v1 and mem_v1:
            dirs = {"cpu": os.path.join(cpu_v1, name), "memory": os.path.join(mem_v1, name)}
            for d in dirs.values():
                os.mkdir(d)
            _write(f"{dirs['cpu']}/cpu.cfs_period_us", str(period))
            _write(f"{dirs['cpu']}/cpu.cfs_quota_us", str(int(cpus * period)))
            _write(f"{dirs['memory']}/memory.limit_in_bytes", str(memory))
            with contextlib.suppress(OSError):  # no swapping past the limit either
                _write(f"{dirs['memory']}/memory.memsw.limit_in_bytes", str(memory))
        else:
            parent = _v2_dir()
            if parent is None or "cpu" not in _read(f"{parent}/cgroup.subtree_control").split():
                raise CgroupUnavailable("no cgroup v1 cpu+memory hierarchies and no cgroup "
                                        "v2 with the cpu and memory controllers delegated")
            v2 = True
            d = os.path.join(parent, name)
            os.mkdir(d)
            dirs = {"cpu": d, "memory": d}
            _write(f"{d}/cpu.max", f"{int(cpus * period)} {period}")
            _write(f"{d}/memory.max", str(memory))
            with contextlib.suppress(OSError):
                _write(f"{d}/memory.swap.max", "0")
    except OSError as exc:
        _remove(dirs, v2)
        raise CgroupUnavailable(f"cannot make a cgroup here: {exc}") from None
    except BaseException:
        _remove(dirs, v2)
        raise
    try:
        yield Limited(dirs, v2, shm)
    finally:
        _remove(dirs, v2)


def _remove(dirs: dict[str, str], v2: bool) -> None:
    for _ in range(50):  # kill what is left in the groups, then remove them
        left = Limited(dirs, v2).pids() if dirs else []
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not left:
            break
        time.sleep(0.1)
    for d in dict.fromkeys(dirs.values()):
        with contextlib.suppress(OSError):
            os.rmdir(d)
