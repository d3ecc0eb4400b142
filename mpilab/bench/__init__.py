"""Every experiment of the course without a notebook: ``python -m mpilab.bench <name>``.

Each benchmark writes ``{"meta": {...}, "records": [...]}`` JSON: ``meta`` says which
machine, MPI library, launcher and settings produced it; each record carries at least
``impl``, ``size_bytes`` (or the benchmark's own size field), ``t_us_min`` and
``t_us_median``. Implementations are measured side by side in one run, so their ratios
are meaningful even on a noisy machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import runtime

BENCHMARKS = {
    "pingpong": "mpilab.bench.pingpong",
    "halo": "mpilab.bench.halo",
    "stencil-sweep": "mpilab.bench.stencil_sweep",
    "allgather": "mpilab.bench.allgather",
    "cluster": "mpilab.bench.cluster",
    "coarray": "mpilab.bench.coarray",
    "autograde": "mpilab.grading.bench",  # the grader's costs live with the grader
}


def parse_sizes(text: str) -> list[int]:
    """'8,1024,4M' -> [8, 1024, 4194304] (K, M, G are powers of 1024)."""
    out = []
    for tok in text.split(","):
        tok = tok.strip().upper().removesuffix("B")
        if not tok:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(tok[-1], 1)
        num = tok[:-1] if mult > 1 else tok
        try:
            value = int(num) * mult
        except ValueError:
            raise ValueError(f"not a size: {tok!r} (use bytes, e.g. 8,1024,4M)") from None
        if value < 0:
            raise ValueError(f"sizes must be >= 0, got {value}")
        out.append(value)
    if not out:
        raise ValueError("no sizes given")
    return out


def meta(launch: runtime.Launch, settings: dict, library: dict) -> dict:
    """What produced a benchmark: machine, MPI library (as a rank reported it), launcher."""
    from ..timing import context

    m = context(ranks=launch.ranks, transport=launch.transport, library=library)
    m["launcher"] = " ".join(launch.command)
    m["launcher_env"] = launch.env
    m["settings"] = settings
    m["command"] = " ".join([os.path.basename(sys.executable), "-m", "mpilab.bench",
                             *sys.argv[1:]])
    return m


def write(path: str | None, meta_: dict, records: list[dict]) -> dict:
    doc = {"meta": meta_, "records": records}
    text = json.dumps(doc, indent=2, default=str)
    if path and path != "-":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text + "\n")
    return doc


def run_mpi(launch: runtime.Launch, program: list[str], timeout: float) -> str:
    """Run an MPI program to completion; its stdout. Raises with its stderr on failure."""
    try:
        res = subprocess.run(launch.argv(program), env=launch.full_env(), capture_output=True,
                             text=True, timeout=timeout, start_new_session=True)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"{' '.join(program[:3])} did not finish in {timeout:g} s") from exc
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(launch.argv(program))} failed ({res.returncode}):\n"
                           f"{res.stderr[-3000:]}")
    return res.stdout


def python_worker(launch: runtime.Launch, module: str, args: dict, timeout: float) -> dict:
    """Run ``python -m <module> --worker ARGS.json OUT.json`` under mpiexec; OUT's JSON."""
    with tempfile.TemporaryDirectory(prefix="mpilab-bench-") as d:
        a, o = Path(d) / "args.json", Path(d) / "out.json"
        a.write_text(json.dumps(args))
        run_mpi(launch, [sys.executable, "-m", module, "--worker", str(a), str(o)], timeout)
        return json.loads(o.read_text())
