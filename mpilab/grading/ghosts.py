"""The numbered grid of the halo checks: what each rank should hold, and what is wrong, in words.

Labs 02, 03 and 04 check a halo exchange the same way (:mod:`mpilab.grading.halo`,
:mod:`~mpilab.grading.onesided`, :mod:`~mpilab.grading.coarrays`): one exchange on a
**numbered grid** (point ``(y, x)`` holds ``y * nx + x + 1``, so a ghost edge says whose
edge it holds), then a heat run compared with :func:`mpilab.halo.serial_heat`. This module
holds what those checks share, in pure Python on plain arrays (tested without MPI):
:func:`ghost_problems` and :func:`step_problems` name a wrong edge or point,
:func:`gathered` puts the ranks' blocks together, :func:`expect_heat` grades the heat run,
and :func:`grid_of`, :func:`tried`, :func:`heat_difference` serve the try-it cells.
:mod:`mpilab.grading.halo` re-exports them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from mpilab import grading, halo

__all__ = ["SIDES", "numbered", "same", "short", "ghost", "what_it_holds", "ghost_problems",
           "step_problems", "gathered", "where_on", "expect_heat", "grid_of", "tried", "heat_difference"]

#: The four ghost edges: (side, "row"/"column", dy, dx of the neighbour, its edge we hold).
SIDES = [("north", "row", -1, 0, "south"), ("south", "row", 1, 0, "north"),
         ("west", "column", 0, -1, "east"), ("east", "column", 0, 1, "west")]


def numbered(nx: int, ny: int) -> np.ndarray:
    """The numbered grid, shape ``(ny, nx)``: point ``(y, x)`` holds ``y * nx + x + 1``.

    Parameters
    ----------
    nx, ny : int
        Points of the grid across and down.

    Returns
    -------
    numpy.ndarray
        The grid, float64, unframed.
    """
    return np.arange(1.0, nx * ny + 1).reshape(ny, nx)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """True when the arrays have the same shape and equal elements.

    Parameters
    ----------
    a, b : numpy.ndarray
        The arrays to compare.

    Returns
    -------
    bool
        Whether they have the same shape and equal elements.
    """
    return bool(a.shape == b.shape and not (a != b).any())


def short(a: np.ndarray) -> str:
    """The first four values of `a`, for a message: ``[1, 2, 3, 4, ...]``.

    Parameters
    ----------
    a : numpy.ndarray
        A one-dimensional array of numbers (an edge).

    Returns
    -------
    str
        Its first four values, with "..." when there are more.
    """
    vals = ", ".join(f"{v:g}" for v in a[:4].tolist()) + (", ..." if a.size > 4 else "")
    return f"[{vals}]"


def ghost(u: np.ndarray, side: str) -> np.ndarray:
    """The ghost edge `side` ("north", "south", "west", "east") of the framed array `u`.

    Parameters
    ----------
    u : numpy.ndarray
        A rank's block with its one-point ghost frame.
    side : str
        "north", "south", "west" or "east".

    Returns
    -------
    numpy.ndarray
        A view of that ghost row or column, corners excluded.
    """
    return {"north": u[0, 1:-1], "south": u[-1, 1:-1], "west": u[1:-1, 0],
            "east": u[1:-1, -1]}[side]


def what_it_holds(got: np.ndarray, owned: dict, r: int) -> str:
    """An edge's content in words: whose edge it is, 0.0s, or other values.

    Parameters
    ----------
    got : numpy.ndarray
        A ghost edge of rank `r`.
    owned : dict
        ``{rank: {"north": edge, "south": ..., "west": ..., "east": ...}}``: every
        rank's own edges on the numbered grid.
    r : int
        The rank whose ghost edge `got` is.

    Returns
    -------
    str
        E.g. "rank 1's west edge [2, 4]", "its own east edge reversed", "0.0s (nothing
        arrived?)", or "[...], which is no rank's edge".
    """
    if not got.any():
        return "0.0s (nothing arrived?)"
    for q, edges in owned.items():
        for e, vals in edges.items():
            who = "its own" if q == r else f"rank {q}'s"
            if same(got, vals):
                return f"{who} {e} edge {short(got)}"
            if same(got, vals[::-1]):
                return f"{who} {e} edge reversed"
    return f"{short(got)}, which is no rank's edge"


def ghost_problems(probes: Sequence[np.ndarray], nx: int, ny: int,
                   dims: Sequence[int]) -> list[str]:
    """What is wrong with each rank's frame after one exchange on the numbered grid.

    Parameters
    ----------
    probes : sequence of numpy.ndarray
        Rank by rank, the framed block ``u`` after one exchange of the numbered grid.
    nx, ny : int
        The grid.
    dims : (int, int)
        The process grid ``(py, px)``.

    Returns
    -------
    list of str
        One line per wrong edge (or changed block), naming the rank, the edge, what it
        holds and whose edge it should hold; empty when the exchange was right.

    Examples
    --------
    >>> u = [np.zeros((3, 3)), np.zeros((3, 3))]   # 2 x 1 grid over 1 x 2 ranks
    >>> u[0][1, 1], u[1][1, 1] = 1.0, 2.0
    >>> problems = ghost_problems(u, 2, 1, (1, 2))
    >>> head, want = problems[0].split(", expected ")
    >>> head
    'rank 0: the east ghost column holds 0.0s (nothing arrived?)'
    >>> want
    "rank 1's west edge (its east neighbour)"
    """
    lay = halo.blocks(nx, ny, dims)
    grid = numbered(nx, ny)
    blocks = [grid[y0:y0 + rows, x0:x0 + cols] for y0, rows, x0, cols in lay]
    owned = {q: {"north": b[0], "south": b[-1], "west": b[:, 0], "east": b[:, -1]}
             for q, b in enumerate(blocks)}
    py, px = dims
    problems = []
    for r, u in enumerate(probes):
        cy, cx = divmod(r, px)
        if u.shape != (blocks[r].shape[0] + 2, blocks[r].shape[1] + 2):
            problems.append(f"rank {r}: u has shape {u.shape}, expected "
                            f"{(blocks[r].shape[0] + 2, blocks[r].shape[1] + 2)}")
            continue
        if not same(u[1:-1, 1:-1], blocks[r]):
            problems.append(f"rank {r}: the points it owns (u[1:-1, 1:-1]) changed; an "
                            "exchange writes only the ghost frame")
        for side, kind, dy, dx, opposite in SIDES:
            got = ghost(u, side)
            if 0 <= cy + dy < py and 0 <= cx + dx < px:
                q = (cy + dy) * px + cx + dx
                want = owned[q][opposite]
                said = f"rank {q}'s {opposite} edge (its {side} neighbour)"
            else:
                want = np.zeros(got.shape)
                said = (f"0.0s: rank {r} is on the {side} border (cart.Shift gives "
                        "MPI.PROC_NULL, nothing arrives and the frame stays 0.0)")
            if not same(got, want):
                problems.append(f"rank {r}: the {side} ghost {kind} holds "
                                f"{what_it_holds(got, owned, r)}, expected {said}")
    return problems


def step_problems(probes: Sequence[np.ndarray], nx: int, ny: int,
                  dims: Sequence[int]) -> list[str]:
    """Where one step from the numbered grid went wrong, rank by rank, in words.

    As :func:`ghost_problems`, with `probes` the framed ``new`` of each rank after one
    step from the numbered grid. The reference is exact: the numbers, halves and eighths
    are exact in binary.

    Parameters
    ----------
    probes : sequence of numpy.ndarray
        Rank by rank, the framed ``new`` after one step from the numbered grid.
    nx, ny, dims
        As for :func:`ghost_problems`.

    Returns
    -------
    list of str
        One line per wrong rank: the interior and/or which parts of the boundary ring are
        wrong, and the first wrong point (or a wrong shape); empty when the step was right.
    """
    grid = np.zeros((ny + 2, nx + 2))
    grid[1:-1, 1:-1] = numbered(nx, ny)
    stepped = np.zeros_like(grid)
    halo.heat_step(grid, stepped)
    problems = []
    for r, ((y0, rows, x0, cols), new) in enumerate(zip(halo.blocks(nx, ny, dims), probes,
                                                        strict=True)):
        if new.shape != (rows + 2, cols + 2):
            problems.append(f"rank {r}: new has shape {new.shape}, expected "
                            f"{(rows + 2, cols + 2)}")
            continue
        got = new[1:-1, 1:-1]
        want = stepped[1 + y0:1 + y0 + rows, 1 + x0:1 + x0 + cols]
        bad = got != want
        if not bad.any():
            continue
        parts = [name for name, part in [
            ("north row", bad[0, :]), ("south row", bad[-1, :]), ("west column", bad[:, 0]),
            ("east column", bad[:, -1])] if part.any()]
        ring = f"the boundary ring ({', '.join(parts)})" if parts else ""
        inner = "the interior" if bad[1:-1, 1:-1].any() else ""
        i, j = (int(k) for k in np.argwhere(bad)[0])
        problems.append(f"rank {r}: new is wrong in {' and '.join(p for p in (inner, ring) if p)}"
                        f"; first at new[{i + 1}, {j + 1}]: {got[i, j]:g}, expected "
                        f"{want[i, j]:g}")
    return problems


def gathered(fields: Sequence[np.ndarray], nx: int, ny: int,
             dims: Sequence[int]) -> np.ndarray:
    """The ranks' blocks (no frame, rank by rank) put together into one ``(ny, nx)`` field.

    Parameters
    ----------
    fields : sequence of numpy.ndarray
        Rank by rank, the block the rank owns, without its ghost frame.
    nx, ny : int
        The grid.
    dims : (int, int)
        The process grid ``(py, px)`` (:func:`mpilab.halo.blocks`).

    Returns
    -------
    numpy.ndarray
        The whole field, shape ``(ny, nx)``.
    """
    field = np.zeros((ny, nx))
    for (y0, rows, x0, cols), block in zip(halo.blocks(nx, ny, dims), fields, strict=True):
        field[y0:y0 + rows, x0:x0 + cols] = block
    return field


def where_on(label: str, nx: int, ny: int, dims: Sequence[int]) -> str:
    """What a check's messages call its run: ``"exchange on a 16 × 12 grid, 2 × 2 process
    grid"``.

    Parameters
    ----------
    label : str
        What ran, e.g. "exchange".
    nx, ny, dims
        As for :func:`ghost_problems`.

    Returns
    -------
    str
        The run's description.
    """
    return f"{label} on a {nx} × {ny} grid, {dims[0]} × {dims[1]} process grid"


def expect_heat(outs: Sequence[dict], where: str, nx: int, ny: int, dims: Sequence[int],
                steps: int, hint: str) -> None:
    """The ranks' ``field`` blocks, put together, equal :func:`mpilab.halo.serial_heat`.

    Parameters
    ----------
    outs : sequence of dict
        Rank by rank, the harness's output, with ``field`` (the rank's unframed block).
    where : str
        What the message calls the run (:func:`where_on`).
    nx, ny, dims
        As for :func:`ghost_problems`.
    steps : int
        Heat steps the run made.
    hint : str
        A line added to the failure.

    Raises
    ------
    mpilab.grading.CheckFailed
        When the field differs from the serial one by more than 1e-10 (relative).
    """
    __tracebackhide__ = True
    grading.expect_close(gathered([o["field"] for o in outs], nx, ny, dims),
                         halo.serial_heat(nx, ny, steps),
                         what=f"{where}: the heat field after {steps} steps", rtol=1e-10,
                         atol=1e-14, hint=hint)


def grid_of(ranks: int | None, dims: Sequence[int] | None) -> tuple[int, int]:
    """`dims`, checked against `ranks`; by default the grid MPI gives `ranks` (4 if None).

    Parameters
    ----------
    ranks : int or None
        Number of ranks, or None.
    dims : (int, int) or None
        The process grid ``(py, px)`` asked for, or None for
        :func:`mpilab.halo.process_grid`'s.

    Returns
    -------
    (int, int)
        The process grid ``(py, px)``.

    Raises
    ------
    ValueError
        When `dims` does not hold `ranks` ranks.
    """
    if dims is None:
        return halo.process_grid(4 if ranks is None else ranks)
    py, px = (int(d) for d in dims)
    if ranks is not None and ranks != py * px:
        raise ValueError(f"dims {(py, px)} need {py * px} ranks, not {ranks}")
    return py, px


def tried(run: Callable[[], list[dict]]) -> list[dict] | None:
    """``run()``, or None after printing why it failed: a try-it cell prints, never raises.

    Parameters
    ----------
    run : callable
        Runs the student's code on the ranks, with no arguments.

    Returns
    -------
    list of dict or None
        What `run` returned, or None when it failed a check (the failure is printed).
    """
    try:
        return run()
    except grading.CheckFailed as exc:
        print(f"{type(exc).__name__}: {exc}")
        return None


def heat_difference(outs: Sequence[dict], nx: int, ny: int, dims: Sequence[int],
                    steps: int) -> float:
    """Print and return the largest difference of the ranks' heat field from the serial one.

    Parameters
    ----------
    outs : sequence of dict
        Rank by rank, the harness's output, with ``field`` (the rank's unframed block).
    nx, ny, dims
        As for :func:`ghost_problems`.
    steps : int
        Heat steps the run made.

    Returns
    -------
    float
        The largest absolute difference from :func:`mpilab.halo.serial_heat`.
    """
    field = gathered([o["field"] for o in outs], nx, ny, dims)
    ref = halo.serial_heat(nx, ny, steps)
    diff = float(np.abs(field - ref).max())
    print(f"{nx} × {ny} grid, {steps} steps on {dims[0] * dims[1]} ranks: largest difference "
          f"from halo.serial_heat {diff:.3g} (the hottest point: {ref.max():.4g})")
    return diff
