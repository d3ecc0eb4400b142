"""Type stub of the compiled one-sided heat kernel (kernels/onesided/onesided.pyx).

Modes: ``ONESIDED_MODES`` (put-fence, put-pscw, put-lock, shm, shm-nc) and
``HYBRID_MODES`` (hybrid: a shared window per node, messages between nodes).
"""

import numpy as np
from mpi4py import MPI
from numpy.typing import NDArray

Block = tuple[NDArray[np.float64], tuple[int, int]]

def layout(comm: MPI.Comm, nx: int, ny: int, dims: tuple[int, int] | None = None,
           mode: str = "nonblocking",
           pack: str = "datatype") -> tuple[int, int, int, int, int, int]:
    """``(py, px, rows, cols, y0, x0)`` of this rank, after checking the decomposition."""

def check_layout(comm: MPI.Comm, nx: int, ny: int, dims: tuple[int, int] | None = None,
                 mode: str = "put-fence",
                 pack: str = "datatype") -> tuple[int, int, int, int, int, int]:
    """``(py, px, rows, cols, y0, x0)`` of this rank, after checking the arguments."""

ONESIDED_MODES: dict[str, int]
HYBRID_MODES: dict[str, int]

def heat(comm: MPI.Comm, nx: int, ny: int, steps: int, *, mode: str = "put-fence",
         pack: str = "datatype", energy: float = 1.0,
         dims: tuple[int, int] | None = None) -> Block:
    """``(block, (y0, x0))`` of this rank after `steps` heat steps (collective)."""

def time_heat(comm: MPI.Comm, nx: int, ny: int, *, mode: str = "put-fence",
              pack: str = "datatype", energy: float = 1.0,
              dims: tuple[int, int] | None = None, warmup: int = 2, iters: int = 10,
              reps: int = 5,
              share: NDArray[np.float64] | None = None) -> NDArray[np.float64]:
    """`reps` seconds per step (exchange + update), the slowest rank's (collective);
    `share[0]` gets the least share of huge pages under the window's fields over the
    ranks (-1: unreadable)."""

def huge_share(comm: MPI.Comm, nx: int, ny: int, *, mode: str = "put-fence",
               pack: str = "datatype",
               dims: tuple[int, int] | None = None) -> float | None:
    """The least share of huge pages under the window :func:`time_heat` allocates, over the
    ranks (/proc/self/smaps; collective); None where it could not be read."""

def shm_layout(comm: MPI.Comm, nbytes: int,
               noncontig: bool = False) -> list[tuple[int, int]]:
    """``(address, size)`` of every rank's segment of a shared window, as rank 0 sees it."""
