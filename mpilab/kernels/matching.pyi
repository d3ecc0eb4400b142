"""Type stub of the compiled matching kernel (kernels/matching/matching.pyx)."""

import numpy as np
from mpi4py import MPI
from numpy.typing import NDArray

QUEUES: dict[str, int]
WILDCARDS: dict[str, int]
MAX_DEPTH: int

def matching(comm: MPI.Comm, sbuf: object, rbuf: object, depth: int,
             nbytes: int | None = None, *, queue: str = "unexpected", wildcard: str = "none",
             delay_us: float = 0.0, rank_a: int = 0, rank_b: int = 1, warmup: int = 10,
             iters: int = 100, reps: int = 5) -> tuple[NDArray[np.float64], int]:
    """`reps` times in seconds per one-way message past `depth` queued entries (or per
    late-received send), and the messages a check found wrong (collective over `comm`)."""
