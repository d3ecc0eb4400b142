"""Type stub of the compiled ping-pong kernel (kernels/pingpong/pingpong.pyx)."""

import numpy as np
from mpi4py import MPI
from numpy.typing import NDArray

def pingpong(comm: MPI.Comm, sbuf: object, rbuf: object, nbytes: int | None = None, *,
             rank_a: int = 0, rank_b: int = 1, mode: str = "roundtrip", warmup: int = 10,
             iters: int = 100, reps: int = 5) -> NDArray[np.float64]:
    """`reps` times in seconds per one-way message of `nbytes` (collective over `comm`)."""
