"""Type stub of the compiled wave-equation kernel (kernels/wave/wave.pyx)."""

import numpy as np
from mpi4py import MPI
from numpy.typing import NDArray

Block = tuple[NDArray[np.float64], tuple[int, int]]

def layout(comm: MPI.Comm, nx: int, ny: int, dims: tuple[int, int] | None = None,
           mode: str = "nonblocking",
           pack: str = "datatype") -> tuple[int, int, int, int, int, int]:
    """``(py, px, rows, cols, y0, x0)`` of this rank, after checking the decomposition."""

def wave(comm: MPI.Comm, nx: int, ny: int, steps: int, *, mode: str = "nonblocking",
         pack: str = "datatype", f0: float = 0.05, courant: float = 0.5,
         source: tuple[int, int] | None = None,
         dims: tuple[int, int] | None = None) -> Block:
    """``(pressure block, (y0, x0))`` of this rank after `steps` steps (collective)."""

def time_wave(comm: MPI.Comm, nx: int, ny: int, *, mode: str = "nonblocking",
              pack: str = "datatype", f0: float = 0.05, courant: float = 0.5,
              source: tuple[int, int] | None = None, dims: tuple[int, int] | None = None,
              warmup: int = 2, iters: int = 10, reps: int = 5) -> NDArray[np.float64]:
    """`reps` seconds per step (both exchanges + updates), the slowest rank's."""

def timeline_wave(comm: MPI.Comm, nx: int, ny: int, steps: int, *, last: int | None = None,
                  mode: str = "overlap", pack: str = "datatype", f0: float = 0.05,
                  courant: float = 0.5, source: tuple[int, int] | None = None,
                  dims: tuple[int, int] | None = None) -> NDArray[np.float64]:
    """``(2 * last, 4, 2)`` phase (start, end) times: two exchange rounds per step."""
