"""mpilab.autograder.limits without a hub: the limits from the environment, and a real
cgroup and private /dev/shm around a real process (root; a class's servers get the same
through classroom/jupyterhub_config.py, tested with a hub in test_classroom_limits.py)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from mpilab.autograder.limits import (
    DEFAULTS,
    Group,
    Limits,
    end_class,
    hierarchies,
    main,
    parse_size,
    preexec,
)

KLASS = f"mpilab-unit-{os.getpid()}"
MIB = 1 << 20
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="cgroups and mounts need root")


def test_sizes_and_limits_from_the_environment():
    assert parse_size("512M") == 512 * MIB and parse_size("1.5G") == 3 << 29
    assert parse_size("64MiB") == 64 * MIB and parse_size("4096") == 4096
    assert parse_size("none") is None and parse_size("0") is None
    with pytest.raises(ValueError, match="not a size"):
        parse_size("lots")
    assert Limits.from_env({}) == Limits(cpus=float(DEFAULTS["CPUS"]),
                                         memory=parse_size(DEFAULTS["MEM"]),
                                         pids=int(DEFAULTS["PIDS"]),
                                         shm=parse_size(DEFAULTS["SHM"]))
    got = Limits.from_env({"MPILAB_CLASSROOM_CPUS": "0.5", "MPILAB_CLASSROOM_MEM": "none",
                           "MPILAB_CLASSROOM_PIDS": "64", "MPILAB_CLASSROOM_SHM": "off"})
    assert got == Limits(cpus=0.5, memory=None, pids=64, shm=None)
    assert got.describe() == "0.5 CPUs, memory no limit, 64 tasks, the machine's /dev/shm"
    assert Limits(1, 700 * MIB, 250, 64 * MIB).describe() == (
        "1 CPU, memory 700 MiB, 250 tasks, 64 MiB of /dev/shm")
    with pytest.raises(ValueError, match=r"\$MPILAB_CLASSROOM_PIDS='-3'"):
        Limits.from_env({"MPILAB_CLASSROOM_PIDS": "-3"})
    with pytest.raises(ValueError, match="not a cgroup name"):
        Group("mpilab", "../etc", where={})


def test_hierarchies_of_a_hybrid_and_a_unified_machine(tmp_path):
    hybrid = tmp_path / "hybrid"
    hybrid.write_text(
        "30 25 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
        "31 25 0:27 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
        "32 25 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        "33 25 0:29 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n")
    assert hierarchies(str(hybrid)) == {
        "unified": (2, "/sys/fs/cgroup/unified"), "cpu": (1, "/sys/fs/cgroup/cpu"),
        "memory": (1, "/sys/fs/cgroup/memory"), "pids": (1, "/sys/fs/cgroup/pids")}
    root = tmp_path / "cg"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    unified = tmp_path / "unified"
    unified.write_text(f"30 25 0:26 / {root} rw - cgroup2 cgroup2 rw\n")
    assert hierarchies(str(unified)) == {k: (2, str(root))
                                          for k in ("unified", "cpu", "memory", "pids")}


@needs_root
def test_a_process_in_its_group_with_a_private_dev_shm():
    where = hierarchies()
    limits = Limits(cpus=0.5, memory=64 * MIB, pids=16, shm=8 * MIB)
    group = Group(KLASS, "u1", where)
    try:
        group.create(limits)
    except (OSError, RuntimeError) as exc:
        pytest.skip(f"no cgroups to make here: {exc}")
    secret = Path(f"/dev/shm/{KLASS}-secret")
    script = (f"echo mine > {secret}; df -B1 --output=size /dev/shm | tail -1; "
              "setsid sleep 61 & (for i in $(seq 40); do sleep 60 & done) 2>/dev/null; "
              "echo started; wait")
    child = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, text=True,
                             preexec_fn=preexec(group, limits), start_new_session=True)
    try:
        size = child.stdout.readline().strip()
        assert child.stdout.readline().strip() == "started"
        assert int(size) == 8 * MIB, "its /dev/shm is a tmpfs of the size asked for"
        assert not secret.exists(), "what it writes there is not in the machine's /dev/shm"
        inside = group.pids()
        assert child.pid in inside and 1 < len(inside) <= 16, "pids.max stops the forks"
        dirs = group.dirs()
        text = {f: Path(dirs[c], f).read_text().strip() for c, f in
                [("pids", "pids.max"), ("cpu", "cpu.max" if where["cpu"][0] == 2
                                        else "cpu.cfs_quota_us"),
                 ("memory", "memory.max" if where["memory"][0] == 2
                  else "memory.limit_in_bytes")]}
        assert text["pids.max"] == "16"
        assert text.get("cpu.max", "50000 100000").split()[0] == "50000"
        assert text.get("cpu.cfs_quota_us", "50000") == "50000"
        assert int(text.get("memory.max") or text["memory.limit_in_bytes"]) == 64 * MIB
        assert group.end(), "nothing of the group is left"
        assert child.wait(timeout=30) == -9
        assert not group.exists() and not group.pids()
        assert not any(p for p in inside if Path(f"/proc/{p}").exists()
                       and Path(f"/proc/{p}/stat").read_text().split()[2] != "Z")
    finally:
        if child.poll() is None:
            child.kill()
        end_class(KLASS)
    assert not any(Path(point, KLASS).exists() for _, point in where.values())


@needs_root
def test_check_and_end_from_the_command_line(capsys, monkeypatch):
    monkeypatch.setenv("MPILAB_CLASSROOM_PIDS", "lots")
    assert main(["check", KLASS]) == 1
    assert "MPILAB_CLASSROOM_PIDS" in capsys.readouterr().err
    monkeypatch.setenv("MPILAB_CLASSROOM_PIDS", "32")
    if main(["check", KLASS]) != 0:
        pytest.skip(f"no cgroups to make here: {capsys.readouterr().err}")
    group = Group(KLASS, "u2")
    group.create(Limits(pids=32))
    sleeper = subprocess.Popen(["sleep", "60"], preexec_fn=preexec(group, Limits()))
    try:
        deadline = time.monotonic() + 10
        while sleeper.pid not in group.pids():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert main(["end", KLASS]) == 0
        assert sleeper.wait(timeout=30) == -9
        assert not group.exists()
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
        end_class(KLASS)
    assert main(["status"]) == 2
