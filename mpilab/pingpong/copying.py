"""A local copy, timed: what the ping-pong paper divides a transfer by, and what a line of
memory costs to fetch from the other core.

:func:`measure_memcopy` times ``dst[:] = src`` in the compiled kernel
(:mod:`mpilab.kernels.memcopy`) with the ping-pong's protocol (collective; lecture 01 and
07's transfer / copy ratio, ``python -m mpilab.bench pingpong --copy``);
:func:`line_round_trip_ns` bounces one cache line between two cores (no MPI), what every
line of a forwarded array pays (``python -m mpilab.bench forwarding``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np

from ..timing import record


def measure_memcopy(comm, sizes: Iterable[int], *, method: str = "loop", reps: int = 7,
                    min_time: float = 0.005) -> list[dict]:
    """Local copy ``dst[:] = src`` records, sizes in bytes (multiples of 8; collective).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator; every rank copies, and times are the slowest rank's.
    sizes : iterable of int
        Bytes copied, multiples of 8 (whole doubles).
    method : {"loop", "memcpy"}, optional
        The kernel's copy: a C loop over the doubles, or ``memcpy``.
    reps : int, optional
        Repetitions (default 7).
    min_time : float, optional
        Seconds one repetition should last; iterations are calibrated to it
        (default 0.005).

    Returns
    -------
    list of dict
        One :func:`record` per size (``impl`` is ``memcopy-<method>``; times per copy,
        µs).

    Raises
    ------
    ValueError
        A size that is negative or not a multiple of 8.
    """
    from ..kernels import memcopy as k

    out = []
    for n in sizes:
        n = int(n)
        if n < 0 or n % 8:
            raise ValueError(f"copy sizes are whole doubles: multiples of 8 bytes, got {n}")
        src = np.random.default_rng(0).random(n // 8)
        dst = np.zeros_like(src)
        iters = 1
        while True:
            t = k.memcopy(comm, dst, src, method=method, warmup=1, iters=iters, reps=3).min()
            if t * iters >= min_time / 4 or iters >= 10_000_000:
                iters = int(max(1, min(10_000_000, round(iters * min_time / max(t * iters, 1e-9)))))
                break
            iters *= 8
        times = k.memcopy(comm, dst, src, method=method, warmup=min(iters, 100), iters=iters,
                          reps=reps)
        if not np.array_equal(dst, src):
            raise RuntimeError("memcopy kernel did not copy the array")
        out.append(record(times, size_bytes=n, impl=f"memcopy-{method}", iters=iters))
    return out



def line_round_trip_ns(iters: int = 200_000) -> float | None:
    """A cache line's round trip between the first two CPUs this process may use (ns).

    Parameters
    ----------
    iters : int, optional
        Round trips timed (default 200,000).

    Returns
    -------
    float or None
        Nanoseconds per round trip (:func:`mpilab.kernels.memcopy.line_bounce_ns`, two
        threads), or None where this process may use fewer than two CPUs.
    """
    from ..kernels import memcopy

    cpus = sorted(os.sched_getaffinity(0))
    return memcopy.line_bounce_ns(cpus[0], cpus[1], iters) if len(cpus) > 1 else None
