"""Type stub of the compiled heat-equation kernel (kernels/stencil/stencil.pyx)."""

import numpy as np
from mpi4py import MPI
from numpy.typing import NDArray

Block = tuple[NDArray[np.float64], tuple[int, int]]

PAGES: tuple[str, ...]

def layout(comm: MPI.Comm, nx: int, ny: int, dims: tuple[int, int] | None = None,
           mode: str = "nonblocking",
           pack: str = "datatype") -> tuple[int, int, int, int, int, int]:
    """``(py, px, rows, cols, y0, x0)`` of this rank, after checking the decomposition."""

def heat(comm: MPI.Comm, nx: int, ny: int, steps: int, *, mode: str = "nonblocking",
         pack: str = "datatype", energy: float = 1.0,
         dims: tuple[int, int] | None = None) -> Block:
    """``(block, (y0, x0))`` of this rank after `steps` heat steps (collective)."""

def time_heat(comm: MPI.Comm, nx: int, ny: int, *, mode: str = "nonblocking",
              pack: str = "datatype", energy: float = 1.0,
              dims: tuple[int, int] | None = None, warmup: int = 2, iters: int = 10,
              reps: int = 5, pages: str = "huge-pages",
              share: NDArray[np.float64] | None = None) -> NDArray[np.float64]:
    """`reps` seconds per step (exchange + update), the slowest rank's (collective), the
    fields on the kind of page `pages` names (one of :data:`PAGES`); `share[0]` gets the
    least share of huge pages under them over the ranks (-1: unreadable)."""

def huge_share(comm: MPI.Comm, nx: int, ny: int, *, mode: str = "nonblocking",
               pack: str = "datatype", dims: tuple[int, int] | None = None,
               pages: str = "huge-pages") -> float | None:
    """The least share of huge pages under the fields :func:`time_heat` allocates, over the
    ranks (/proc/self/smaps; collective); None where it could not be read."""

def timeline_heat(comm: MPI.Comm, nx: int, ny: int, steps: int, *, last: int | None = None,
                  mode: str = "overlap", pack: str = "datatype", energy: float = 1.0,
                  dims: tuple[int, int] | None = None) -> NDArray[np.float64]:
    """``(last, 4, 2)`` phase (start, end) times of this rank's last steps (collective)."""

def sweep(comm: MPI.Comm, nx: int, ny: int, *, warmup: int = 2, iters: int = 10,
          reps: int = 5, prefetch: bool = True) -> NDArray[np.float64]:
    """`reps` seconds per stencil sweep of an `nx` x `ny` grid, no exchange (collective);
    without `prefetch`, the plain row loop even where the grid streams from memory."""

def sweep_on(comm: MPI.Comm, a: NDArray[np.float64], b: NDArray[np.float64], nx: int, ny: int,
             *, warmup: int = 2, iters: int = 10, reps: int = 5) -> NDArray[np.float64]:
    """`reps` seconds per stencil sweep on two (nx + 2) * (ny + 2) arrays the caller made."""

def store_copy(comm: MPI.Comm, dst: NDArray[np.float64], src: NDArray[np.float64], *,
               warmup: int = 2, iters: int = 10, reps: int = 5) -> NDArray[np.float64]:
    """`reps` seconds per copy ``dst[:] = src`` with ordinary stores (collective)."""
