"""Lab 02's numbered grid cut into every rank's block with the frame a right halo exchange
gives it (:func:`frames`): the hand-made outputs that tests/test_grading_halo.py and
tests/test_grading_onesided.py check the grading's messages on, without MPI.
"""

from __future__ import annotations

import numpy as np

import mpilab.grading.halo as gh
from mpilab import halo


def frames(nx, ny, dims):
    """Every rank's block of the numbered grid with the frame a right exchange gives."""
    full = np.zeros((ny + 2, nx + 2))
    full[1:-1, 1:-1] = gh.numbered(nx, ny)
    out = []
    for y0, rows, x0, cols in halo.blocks(nx, ny, dims):
        u = full[y0:y0 + rows + 2, x0:x0 + cols + 2].copy()
        u[0, 0] = u[0, -1] = u[-1, 0] = u[-1, -1] = 0.0  # never read, never sent
        out.append(u)
    return out
