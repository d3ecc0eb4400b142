"""Type stub of the compiled copy kernel (kernels/memcopy/memcopy.pyx)."""

import numpy as np
from mpi4py import MPI
from numpy.typing import NDArray

def memcopy(comm: MPI.Comm, dst: NDArray[np.float64], src: NDArray[np.float64], *,
            method: str = "loop", warmup: int = 10, iters: int = 100,
            reps: int = 5) -> NDArray[np.float64]:
    """`reps` times in seconds per copy ``dst[:] = src`` (collective over `comm`)."""

def line_bounce_ns(cpu_a: int, cpu_b: int, iters: int = 100000) -> float:
    """Nanoseconds of one cache line's round trip between CPUs `cpu_a` and `cpu_b` (no MPI)."""
