"""Every experiment of the course without a notebook: ``python -m mpilab.bench <name>``.

Each benchmark writes ``{"meta": {...}, "records": [...]}`` JSON: ``meta`` says which
machine, MPI library, launcher and settings produced it; each record carries at least
``impl``, ``size_bytes`` (or the benchmark's own size field), ``t_us_min`` and
``t_us_median``. Implementations are measured side by side in one run, so their ratios
are meaningful even on a noisy machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from .. import runtime

BENCHMARKS = {
    "pingpong": "mpilab.bench.pingpong",
    "buffers": "mpilab.bench.buffers",
    "halo": "mpilab.bench.halo",
    "progress": "mpilab.bench.progress",
    "contention": "mpilab.bench.contention",
    "forwarding": "mpilab.bench.forwarding",
    "matching": "mpilab.bench.matching",
    "stencil-sweep": "mpilab.bench.stencil_sweep",
    "allgather": "mpilab.bench.allgather",
    "han": "mpilab.bench.han",
    "cluster": "mpilab.bench.cluster",
    "coarray": "mpilab.bench.coarray",
    "classroom": "mpilab.bench.classroom",
    "autograde": "mpilab.autograder.bench",  # the grader's costs live with the grader
    "grading-errors": "mpilab.bench.grading_errors",
}


#: Seconds one MPI job of a benchmark may run before it is killed with all its processes
#: (:mod:`mpilab.jobs`): a guard against a hang, not an expectation.
TIMEOUT = 1800.0

#: What a benchmark's measuring raises for bad arguments or a failed or hung job.
ERRORS = (ValueError, TypeError, RuntimeError, TimeoutError, runtime.MPINotFound)


def parser(name: str, doc: str, *, worker: bool = False, transport: bool = True,
           reps: int | None = None, rounds: int | None = None,
           min_time: float | None = None, timeout: bool = True,
           nodes: bool = False, simulate: bool = False, sizes: str | None = None,
           blocks: bool = False) -> argparse.ArgumentParser:
    """The arguments every benchmark shares, with the same names, help and defaults.

    ``--json OUT`` always; ``--transport``, ``--timeout`` (:data:`TIMEOUT`) unless turned
    off; ``--reps``, ``--rounds``, ``--min-time`` with the benchmark's defaults when given;
    ``--worker`` (hidden) for a benchmark whose ranks run ``python -m <module> --worker``;
    with `nodes`, ``--nodes N --link PROFILE --map-by node|slot`` (emulated nodes, see
    :func:`mpilab.netlab.placed`); with `simulate`, ``--simulate PLATFORM`` (a SimGrid SMPI run of the
    same C kernel on a simulated platform, :mod:`mpilab.sim`); with `sizes`, ``--sizes``
    with that default (message sizes, or with `blocks` block sizes per rank, in bytes).
    """
    p = argparse.ArgumentParser(prog=f"python -m mpilab.bench {name}",
                                description=doc.split("\n\n")[0])
    if worker:
        p.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    if transport:
        p.add_argument("--transport", choices=runtime.TRANSPORTS, default="shm")
    if reps is not None:
        p.add_argument("--reps", type=int, default=reps, help="timed repetitions per round")
    if rounds is not None:
        p.add_argument("--rounds", type=int, default=rounds,
                       help="alternations of the implementations, measured side by side")
    if min_time is not None:
        p.add_argument("--min-time", type=float, default=min_time,
                       help="seconds one repetition should last (sets iterations)")
    if timeout:
        p.add_argument("--timeout", type=float, default=TIMEOUT,
                       help=f"seconds per MPI job before it is killed (default {TIMEOUT:g})")
    if nodes:
        from .. import netlab

        p.add_argument("--nodes", type=int, default=None,
                       help="spread the ranks over N emulated nodes (root; mpilab.netlab)")
        p.add_argument("--link", default="fast-ethernet", choices=list(netlab.PROFILES),
                       help="the emulated nodes' link profile (with --nodes)")
        p.add_argument("--map-by", default="node", choices=("node", "slot"),
                       help="rank placement on the nodes: round-robin (node) or filled "
                            "one node after the other (slot)")
    if simulate:
        from .. import sim

        p.add_argument("--simulate", metavar="PLATFORM", default=None, choices=sim.platforms(),
                       help="run the same C kernel on a simulated platform (SimGrid SMPI): "
                            + ", ".join(sim.platforms()))
    if sizes is not None:
        p.add_argument("--sizes", default=sizes,
                       help=("block sizes per rank" if blocks else "message sizes")
                       + " in bytes, comma-separated (K/M suffixes allowed)")
    p.add_argument("--json", metavar="OUT", help="write {meta, records} JSON here")
    return p


def simulated_line(m: dict) -> str:
    """A report's first lines for a simulated run: the label, what it leaves out."""
    return (f"# {m['label']}: {m['platform_description']} (SimGrid {m['simgrid']}, run on "
            f"{m['simulated_by']['cores']} cores in {m.get('wall_s', 0):.1f} s)\n"
            f"# a simulation, not a measurement; it leaves out {m['leaves_out']}\n")


def finish(name: str, out: str | None, measure: Callable[[], tuple[dict, list[dict]]],
           show: Callable[[dict, list[dict]], str],
           ok: Callable[[list[dict]], bool] = lambda records: True) -> int:
    """Measure, write the JSON, print the report; the exit status.

    0 when `ok(records)`, 1 when not (a result failed its check), 2 with a one-line
    message on standard error when the measuring raised one of :data:`ERRORS`.
    """
    try:
        m, records = measure()
    except ERRORS as exc:
        print(f"mpilab.bench {name}: {exc}", file=sys.stderr)
        return 2
    write(out, m, records)
    print(show(m, records))
    if out and out != "-":
        print(f"# wrote {out}")
    return 0 if ok(records) else 1


def sub_sizes(text: str) -> list[int]:
    """``--sub 16,64,256``: subdomain edges, positive integers (K/M suffixes allowed)."""
    from .. import validate

    try:
        return [validate.count(n, "sub") for n in validate.sizes(text)]
    except ValueError:
        raise ValueError(f"--sub takes integers, got {text!r}") from None


def write(path: str | None, meta_: dict, records: list[dict]) -> dict:
    """``{"meta", "records"}`` as JSON at `path` (not written for None or "-"); the doc."""
    doc = {"meta": meta_, "records": records}
    text = json.dumps(doc, indent=2, default=str)
    if path and path != "-":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text + "\n")
    return doc
