#!/usr/bin/env python3
"""Where a run's CPU goes, by kind of process: ``scripts/cpu-by-process.py OUT -- CMD...``
runs CMD and, while it runs, reads every process's CPU time from /proc four times a
second; at the end it writes OUT (JSON: each kind's CPU seconds, process count and busiest
command lines, and the machine's total over the run) and prints the table.

A process is counted from the CPU it had used when last seen, so one that lives less than
a sampling interval is missed, and one that ends loses at most an interval: the table's
`seen` line says how much of the machine's CPU time (/proc/stat) it accounts for.
Kinds are named by the command line (KINDS below; `other` holds the rest). A measuring tool
for issue 24's notes, not part of the course.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")
KINDS = [  # first match wins; matched against the command line joined by spaces
    ("mpi engine", r"ipyparallel\.engine|ipengine|ipyparallel.apps.ipengine"),
    ("ipcontroller", r"ipyparallel\.controller|ipcontroller"),
    ("ipykernel", r"ipykernel_launcher|ipykernel"),
    ("nbgrader", r"nbgrader"),
    ("jupyter server", r"jupyter[-_ ]?(lab|server|notebook)|jupyterhub|configurable-http-proxy"),
    ("chromium", r"chrom"),
    ("pytest", r"pytest"),
    ("mpi launcher", r"mpiexec|mpirun|orted|prterun|prted|hydra_pmi_proxy|\bprte\b"),
    ("compiler", r"\bcc1|\bcc1plus|\bf951|\bgcc|\bg\+\+|\bgfortran|\bcollect2|\bld\b|\bas\b|caf\b"),
    ("cython", r"cython|setup\.py"),
    ("pip / uv", r"\bpip\b|pip install|\buv\b"),
    ("apt / dpkg", r"apt|dpkg|debootstrap"),
    ("slurm", r"slurm|srun|sbatch|munge"),
    ("simgrid", r"smpirun|smpimain|simgrid"),
    ("sandbox", r"bwrap|unshare|nsenter|ip netns|\btc\b"),
    ("mpi program", r"mpilab-|/_bin/|coarray"),
    ("python other", r"python"),
]
TOP = 12  # command lines kept per kind (digits as N, folders left out), by CPU
_KIND_RE = [(name, re.compile(rx)) for name, rx in KINDS]


def kind_of(cmd: str) -> str:
    for name, rx in _KIND_RE:
        if rx.search(cmd):
            return name
    return "other"


def machine_ticks() -> int:
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    return sum(int(x) for x in fields[:3]) + sum(int(x) for x in fields[5:8])  # busy


def sample(seen: dict[tuple[int, str], list]) -> None:
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            rest = stat[stat.rindex(")") + 2:].split()
            start, cpu = rest[19], int(rest[11]) + int(rest[12])
            key = (int(pid), start)
            if key not in seen:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
                seen[key] = [kind_of(cmd or stat[stat.index("(") + 1:stat.rindex(")")]), 0, cmd]
            seen[key][1] = cpu
        except (OSError, ValueError, IndexError):
            continue


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    out, cmd = argv[0], argv[2:]
    seen: dict[tuple[int, str], list] = {}
    sample(seen)
    before = {k: v[1] for k, v in seen.items()}  # what ran before the command: not counted
    m0, t0 = machine_ticks(), time.time()
    proc = subprocess.Popen(cmd)
    while proc.poll() is None:
        sample(seen)
        time.sleep(0.25)
    sample(seen)
    wall, machine = time.time() - t0, (machine_ticks() - m0) / TICK
    kinds: dict[str, list] = {}
    for key, (kind, cpu, cmd) in seen.items():
        used = (cpu - before.get(key, 0)) / TICK
        if used <= 0:
            continue
        k = kinds.setdefault(kind, [0.0, 0, {}])
        k[0] += used
        k[1] += 1
        line = re.sub(r"\d+", "N", re.sub(r"/\S*/", "", cmd))[:120]  # digits, folders out
        k[2][line] = k[2].get(line, 0.0) + used
    counted = sum(v[0] for v in kinds.values())
    result = {"command": cmd, "exit": proc.returncode, "wall_s": round(wall, 1),
              "machine_cpu_s": round(machine, 1), "counted_cpu_s": round(counted, 1),
              "kinds": {k: {"cpu_s": round(v[0], 1), "processes": v[1],
                            "top": {c: round(t, 1) for c, t in sorted(
                                v[2].items(), key=lambda ct: -ct[1])[:TOP]}}
                        for k, v in sorted(kinds.items(), key=lambda kv: -kv[1][0])}}
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"{'kind':16s} {'CPU s':>8s} {'share':>6s} {'procs':>6s}")
    for k, v in result["kinds"].items():
        print(f"{k:16s} {v['cpu_s']:8.1f} {100 * v['cpu_s'] / max(counted, 1e-9):5.1f}% "
              f"{v['processes']:6d}")
    print(f"seen: {counted:.0f} of the machine's {machine:.0f} CPU s in {wall:.0f} s "
          f"({100 * counted / max(machine, 1e-9):.0f} %)")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
