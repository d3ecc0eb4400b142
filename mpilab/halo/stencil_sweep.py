"""Stencil sweep vs memory copy: is the heat update as fast as moving its bytes?

The memory-bandwidth experiment of lecture 02 (section 7);
``python -m mpilab.bench stencil-sweep`` is its command line. One rank (under mpiexec,
like every benchmark) times the compiled heat update of an
``nx`` x ``ny`` grid (kernels/stencil, no exchange) and the compiled copy loop of the same
number of doubles (kernels/memcopy), alternating in `rounds` rounds. Both are counted
the same way: the bytes the operation must move, read the old array + write the new one,
``2 * 8 * nx * ny`` bytes, so ``GBps`` compares like with like (write-allocate traffic
is not counted for either). Records carry impl (``stencil``, ``memcopy``,
``store-copy``), nx, ny, size_bytes, t_us_min, t_us_median and GBps (from the median);
meta as for every benchmark.

Why a third record: GCC compiles the memcopy kernel's loop into a call to ``memcpy``, and
glibc may write arrays larger than its threshold with non-temporal stores, which skip
reading each destination line first; the sweep's stores are ordinary ones (each written
line is read in first). ``store-copy`` is the same copy as a vectorised loop with
ordinary stores (kernels/stencil), the copy that pays for its writes the way the sweep
does. (On the course machine, a 2-core AMD EPYC VM, the two copies measured the same.)

All arrays are laid out alike: 2 MiB aligned with transparent huge pages advised, at
every size (``buffers.message_buffer`` here, ``halo_array_alloc`` in C), and written once
before any timing, so no repetition pays for faulting pages in. The fourth record,
``stencil-4k`` (asked for by name), is the same update on two arrays on ordinary 4 KiB
pages (``buffers.buffer("4k-pages")``): what the page kind alone costs the update, the
difference between a two-sided kernel's fields and a shared window's, which Linux maps
from ``/dev/shm`` on 4 KiB pages unless its shared memory takes huge pages (lecture 03).
Its record says how much of its arrays sat on huge pages (``huge_page_share``).
``stencil-noprefetch`` (asked for by name too) is the update without the kernel's own
prefetches: on a grid that streams from memory the kernel prefetches the row below and
the output row into L2, one line at a time (``heat_row_stream`` in
kernels/common/mpilab_heat.h); this record shows what the hardware prefetcher alone
gives (on the course's Zen 4 EPYC VM: half a copy's speed).

The job's rank runs this module: ``python -m mpilab.halo.stencil_sweep --worker ARGS OUT``
(started by :func:`run` through :func:`mpilab.jobs.python_worker`).
"""

from __future__ import annotations

import json
import sys

from .. import runtime, validate
from ..buffers import buffer, huge_page_share, message_buffer
from ..jobs import python_worker, worker_main
from ..timing import record, run_meta, text_table

IMPLS = ("stencil", "memcopy", "store-copy")
#: every record :func:`run` can make: :data:`IMPLS`, the update on 4 KiB pages, and the
#: update without the kernel's software prefetches (the hardware's own prefetcher alone)
ALL_IMPLS = (*IMPLS, "stencil-4k", "stencil-noprefetch")
MODULE = "mpilab.halo.stencil_sweep"  # python -m mpilab.halo.stencil_sweep --worker: the job


def _iters(fn, min_time):
    """Iterations for one repetition of `fn(iters)` (seconds per call) to last min_time."""
    it = 1
    while True:
        t = fn(it).min()
        if t * it >= min_time / 4 or it >= 1 << 20:
            return int(max(1, min(1 << 20, round(it * min_time / max(t * it, 1e-9)))))
        it *= 4


def _worker(args_path: str, out_path: str) -> int:
    import numpy as np
    from mpi4py import MPI

    from ..kernels import memcopy, stencil

    a = json.loads(open(args_path).read())
    nx, ny, reps, method = a["nx"], a["ny"], a["reps"], a["copy"]
    self_ = MPI.COMM_SELF
    # laid out as the sweep's own arrays are (2 MiB aligned, huge pages advised)
    src = message_buffer(8 * nx * ny).view(np.float64)
    src[:] = np.random.default_rng(0).random(nx * ny)
    dst = message_buffer(8 * nx * ny).view(np.float64)

    def sweep(it, r=3):
        return stencil.sweep(self_, nx, ny, warmup=1, iters=it, reps=r)

    def sweep_plain(it, r=3):
        return stencil.sweep(self_, nx, ny, warmup=1, iters=it, reps=r, prefetch=False)

    def copy(it, r=3):
        return memcopy.memcopy(self_, dst, src, method=method, warmup=1, iters=it, reps=r)

    def store_copy(it, r=3):
        return stencil.store_copy(self_, dst, src, warmup=1, iters=it, reps=r)

    fns = {"stencil": sweep, "memcopy": copy, "store-copy": store_copy,
           "stencil-noprefetch": sweep_plain}
    shares = {}
    if "stencil-4k" in a["impls"]:
        # the sweep's grid with its frame, twice, on ordinary pages (zeros, as C's are)
        small = [buffer("4k-pages", 8 * (nx + 2) * (ny + 2)).view(np.float64) for _ in "ab"]
        for g in small:
            g[:] = 0.0
        shares["stencil-4k"] = max(huge_page_share(g) or 0.0 for g in small)

        def sweep_4k(it, r=3):
            return stencil.sweep_on(self_, small[0], small[1], nx, ny, warmup=1, iters=it,
                                    reps=r)

        fns["stencil-4k"] = sweep_4k
    iters = {i: _iters(fns[i], a["min_time"]) for i in a["impls"]}
    pooled = {i: [] for i in a["impls"]}
    for _ in range(a["rounds"]):
        for impl in a["impls"]:
            dst[:] = 0.0
            pooled[impl].extend(fns[impl](iters[impl], reps).tolist())
            if impl in ("memcopy", "store-copy") and not np.array_equal(dst, src):
                raise RuntimeError(f"the {impl} kernel did not copy")
    with open(out_path, "w") as f:
        json.dump({"pooled": pooled, "iters": iters, "shares": shares,
                   "library": runtime.library_info()}, f)
    return 0


def run(nx=4096, ny=4096, *, impls=IMPLS, copy="loop", reps=15, rounds=2, min_time=0.01,
        timeout=1800.0) -> tuple[dict, list[dict]]:
    """Time the sweep and the copies of the same bytes on one rank, alternating.

    Parameters
    ----------
    nx, ny : int, optional
        The grid (default 4096 x 4096): ``2 * 8 * nx * ny`` bytes counted per sweep.
    impls : str or sequence of str, optional
        Among :data:`ALL_IMPLS` (default: the three of :data:`IMPLS`).
    copy : str, optional
        The ``memcopy`` record's copy: ``"loop"`` (the compiled loop, the default) or
        ``"memcpy"`` (libc's).
    reps : int, optional
        Timed repetitions per round.
    rounds : int, optional
        Alternations of the implementations.
    min_time : float, optional
        Seconds one repetition should last (sets the iterations).
    timeout : float, optional
        Seconds the job may run before it is killed (default 1800, as the command
        line's ``--timeout``).

    Returns
    -------
    tuple of (dict, list of dict)
        The run's meta (:func:`mpilab.timing.run_meta`) and one record per
        implementation, with ``GBps`` (from the median) and ``GBps_best`` (from the best
        repetition).

    Raises
    ------
    ValueError
        For bad arguments.
    mpilab.jobs.JobFailed, mpilab.jobs.JobTimeout
        If the job failed (a copy kernel that did not copy fails it) or ran past
        `timeout`.
    """
    impls = validate.names(impls, ALL_IMPLS, "impl")
    if copy not in ("loop", "memcpy"):
        raise ValueError(f"copy must be 'loop' or 'memcpy', got {copy!r}")
    for name, v in (("nx", nx), ("ny", ny), ("reps", reps), ("rounds", rounds)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    launch = runtime.launch(1, "shm")
    args = {"nx": nx, "ny": ny, "impls": list(impls), "copy": copy, "reps": reps,
            "rounds": rounds, "min_time": min_time}
    doc = python_worker(launch, MODULE, args, timeout)
    nbytes = 2 * 8 * nx * ny
    records = []
    for impl in impls:
        rec = record(doc["pooled"][impl], size_bytes=nbytes, impl=impl, nx=nx, ny=ny,
                     iters=doc["iters"][impl], ranks=1,
                     method={"memcopy": copy, "store-copy": "loop, ordinary stores"}.get(
                         impl, "5-point"),
                     pages="4k-pages" if impl == "stencil-4k" else "huge-pages")
        if impl in doc.get("shares", {}):
            rec["huge_page_share"] = doc["shares"][impl]
        rec["GBps"] = nbytes / (rec["t_us_median"] * 1e3)
        rec["GBps_best"] = nbytes / (rec["t_us_min"] * 1e3)
        records.append(rec)
    settings = {**args, "bytes_counted": "read old + write new = 16 B per point"}
    return run_meta(launch, settings, doc["library"]), records


def table(records: list[dict]) -> str:
    """Per implementation: time and bandwidth, then the sweep's bandwidth against each copy's.

    Parameters
    ----------
    records : list of dict
        One per implementation (:func:`run`).

    Returns
    -------
    str
        The table and the ``stencil / <copy> bandwidth`` lines.
    """
    columns = [("impl", max([10] + [len(r["impl"]) for r in records]), ""),
               ("grid", 11, ""), ("t median (ms)", 14, ".3f"),
               ("GB/s (median)", 14, ".2f"), ("GB/s (best)", 12, ".2f")]
    lines = text_table(columns, [(r["impl"], f"{r['nx']}x{r['ny']}", r["t_us_median"] / 1e3,
                                  r["GBps"], r["GBps_best"]) for r in records])
    by = {r["impl"]: r for r in records}
    for other in ("memcopy", "store-copy"):
        if "stencil" in by and other in by:
            s, o = by["stencil"], by[other]
            lines.append(f"stencil / {other} bandwidth: {s['GBps'] / o['GBps']:.2f} (median), "
                         f"{s['GBps_best'] / o['GBps_best']:.2f} (best)")
    if "stencil" in by and "stencil-noprefetch" in by:
        s, o = by["stencil"], by["stencil-noprefetch"]
        lines.append(f"stencil without its prefetches / with, time: "
                     f"{o['t_us_median'] / s['t_us_median']:.2f} (median), "
                     f"{o['t_us_min'] / s['t_us_min']:.2f} (best)")
    if "stencil" in by and "stencil-4k" in by:
        s, o = by["stencil"], by["stencil-4k"]
        lines.append(f"stencil on 4 KiB pages / on huge pages, time: "
                     f"{o['t_us_median'] / s['t_us_median']:.2f} (median), "
                     f"{o['t_us_min'] / s['t_us_min']:.2f} (best)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(worker_main(_worker, "mpilab.halo.stencil_sweep"))
