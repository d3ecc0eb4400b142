"""Type stub of the compiled collectives kernel (kernels/collectives/collectives.pyx)."""

import numpy as np
from mpi4py import MPI
from numpy.typing import NDArray

Event = tuple[str, int, int]  # (kind, peer, nbytes)

def admissible(op: str, alg: str, ranks: int) -> str | None:
    """Why `alg` cannot run `op` on `p` processes, or None when it can."""

def run(comm: MPI.Comm, op: str, alg: str, sendbuf: object = None, recvbuf: object = None, *,
        root: int = 0, redop: str = "sum", trace: bool = False) -> list[Event] | None:
    """One collective `op` with algorithm `alg` ("library": MPI's own) over `comm`."""

def trace(comm: MPI.Comm, op: str, alg: str, count: int, *, dtype: str = "uint8",
          root: int = 0, redop: str = "sum") -> list[Event]:
    """This rank's messages ``(kind, peer, nbytes)`` for one call on `count` elements."""

def time(comm: MPI.Comm, op: str, alg: str, count: int, *, dtype: str = "uint8", root: int = 0,
         redop: str = "sum", warmup: int = 3, iters: int = 10,
         reps: int = 5, separated: bool = False) -> NDArray[np.float64]:
    """`reps` seconds per call, the slowest rank's, timed inside C (collective); with
    `separated` an untimed barrier before every call."""

def set_cvar(name: str, value: int) -> None:
    """Write the integer MPI_T control variable `name` (local to this process)."""

OVERLAP_MODES: tuple[str, ...]  # ("allreduce", "iallreduce", "iallreduce-test")

def iallreduce_overlap(comm: MPI.Comm, mode: str, n: int, passes: int, *, parts: int = 16,
                       m: int = 262144, warmup: int = 2,
                       iters: int = 10) -> tuple[NDArray[np.float64], int]:
    """OSU's overlap test for MPI_Iallreduce of `n` float64 (collective): this rank's
    (iters, 3) seconds (total, inside MPI calls, computing) and the wrong results."""
