"""What this process may use on this machine: cores, CPU quota, memory, /dev/shm.

A container's limits (cgroup v1 or v2, ``$CPU_LIMIT`` and ``$MEM_LIMIT`` as JupyterHub
and Binder set them) count, not only what ``nproc`` shows: oversubscription, the
lectures' sweep sizes and every measurement record's host facts are judged by them.
"""

from __future__ import annotations

import functools
import os
import platform
import socket


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

    Parameters
    ----------
    controller : str
        The cgroup controller, e.g. ``"cpu"`` or ``"memory"``.

    Returns
    -------
    list of str
        Folders under the cgroup mount, this process's own first and the mount point
        last; empty where ``/proc`` cannot be read or no hierarchy carries `controller`.
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

    Returns
    -------
    cpus : float or None
        CPUs' worth of time (1.5: one and a half CPUs), None without a quota.
    source : str
        Where it comes from: ``"cgroup <file>"``, ``"$CPU_LIMIT"`` or ``"none"``.
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

    Returns
    -------
    int
        Usable cores, at least 1.
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

    Parameters
    ----------
    most : int, optional
        Largest count in the sweep (default 16).
    squares : bool, optional
        Also the squares 9, 25, 36, ... (default False: powers of two only).
    beyond : int, optional
        How many counts above the cores to add, oversubscribed (default 0).
    cores : int, optional
        Cores to size the sweep to instead of :func:`usable_cores`.

    Returns
    -------
    list of int
        Rank counts in ascending order.
    """
    cores = usable_cores() if cores is None else int(cores)
    seq = {1 << k for k in range(16)} | ({k * k for k in range(1, 256)} if squares else set())
    seq = sorted(n for n in seq if n <= most)
    return [n for n in seq if n <= max(1, cores)] + [n for n in seq if n > cores][:beyond]


_NO_LIMIT = 1 << 60  # cgroup v1 reports "unlimited" as a page-rounded 2**63 - 1


def physical_memory() -> int:
    """Bytes of RAM this machine has, whatever limits this process.

    Returns
    -------
    int
        Page size times physical pages; 0 where the system does not say (not Linux).
    """
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not Linux
        return 0


def last_level_cache(cpu: int = 0) -> tuple[int, int] | None:
    """The largest cache that holds data for CPU `cpu`: its level and size in bytes, as
    Linux reports them (``/sys/devices/system/cpu/cpuN/cache/index*/``). A virtual
    machine reports its host's cache, which other guests may share.

    Parameters
    ----------
    cpu : int, optional
        Which CPU's caches (default 0).

    Returns
    -------
    tuple of (int, int) or None
        ``(level, bytes)`` of the highest-level data or unified cache; None where Linux
        does not say (not Linux, or a kernel without cache information).
    """
    base = f"/sys/devices/system/cpu/cpu{int(cpu)}/cache"
    best = None
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return None
    for name in names:
        if not name.startswith("index"):
            continue
        kind, level, size = (_read(f"{base}/{name}/{f}") for f in ("type", "level", "size"))
        if not (kind and level and size) or kind.strip() == "Instruction":
            continue
        size = size.strip()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:].upper(), 1)
        try:
            found = (int(level), int(size.rstrip("KMGkmg")) * scale)
        except ValueError:
            continue
        best = max(best or found, found)
    return best


def memory_limit() -> tuple[int, str]:
    """Bytes of memory this process may use, and what sets that figure.

    The smallest of physical memory, cgroup v2 ``memory.max`` / v1
    ``memory.limit_in_bytes`` over this cgroup and its ancestors, and ``$MEM_LIMIT``.

    Returns
    -------
    nbytes : int
        The limit in bytes.
    source : str
        What sets it: ``"physical memory"``, ``"cgroup <file>"`` or ``"$MEM_LIMIT"``.
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

    Parameters
    ----------
    directory : str, optional
        A folder on the file system (default ``/dev/shm``).

    Returns
    -------
    size, free : int
        Its size and the bytes available to an unprivileged user, in bytes; ``(0, 0)``
        where it cannot be read.
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

    Returns
    -------
    dict
        ``cores`` (:func:`usable_cores`), ``affinity_cores``, ``cpu_quota`` and
        ``cpu_quota_from`` (:func:`cpu_quota`), ``memory_bytes`` and ``memory_from``
        (:func:`memory_limit`), ``physical_memory_bytes``, ``shm_bytes`` and
        ``shm_free_bytes`` (:func:`shm_size`).
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

    Returns
    -------
    str
        The reason, as a lecture prints it (``"MPILAB_QUICK=1"``, ``"one core"``,
        ``"1.5 GiB of memory"``); ``""`` (false) when the full sweeps fit.
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
    """Whether this process runs as root (Open MPI's launcher then needs to be told).

    Returns
    -------
    bool
        True if the effective user id is 0; False also where there is none (not POSIX).
    """
    return hasattr(os, "geteuid") and os.geteuid() == 0


_RECORDED_RESOURCES = ("cores", "cpu_quota", "memory_bytes", "shm_bytes")


@functools.cache
def machine_info() -> dict:
    """Host facts every measurement record carries.

    Computed once per process (cached).

    Returns
    -------
    dict
        ``hostname``, ``cpu_model`` (``/proc/cpuinfo``'s model name), ``cpu_id``
        (vendor, family and model numbers: a VM's model name may be only "AMD EPYC",
        which several generations share), ``cpu_vector`` (the widest vector extension
        the CPU reports: avx512f, avx2, avx or sse2), ``cores``, ``cpu_quota``,
        ``memory_bytes`` and ``shm_bytes`` (from :func:`resources`), ``shm_huge`` (the
        ``huge=`` option /dev/shm is mounted with, "never" where it gives none, None
        where it is not mounted: whether an MPI shared window can sit on huge pages),
        ``os``, ``python`` (its version) and ``binder`` (whether it runs on Binder).
    """
    model = platform.processor() or ""
    first: dict[str, str] = {}  # the first processor's fields
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                first.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    model = first.get("model name", model)
    cpu_id = (f"{first['vendor_id']} family {first['cpu family']} model {first['model']}"
              if {"vendor_id", "cpu family", "model"} <= first.keys() else None)
    flags = set(first.get("flags", "").split())
    vector = next((v for v in ("avx512f", "avx2", "avx", "sse2") if v in flags), None)
    shm_huge = None
    try:
        with open("/proc/mounts") as f:
            for fields in (line.split() for line in f):
                if len(fields) > 3 and fields[1] == "/dev/shm":  # the last mount counts
                    opts = [o[5:] for o in fields[3].split(",") if o.startswith("huge=")]
                    shm_huge = opts[0] if opts else "never"
    except OSError:
        pass
    return {
        "hostname": socket.gethostname(),
        "cpu_model": model,
        "cpu_id": cpu_id,
        "cpu_vector": vector,
        "shm_huge": shm_huge,
        **{k: v for k, v in resources().items() if k in _RECORDED_RESOURCES},
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "binder": bool(os.environ.get("MPILAB_BINDER") or os.environ.get("BINDER_LAUNCH_HOST")),
    }
