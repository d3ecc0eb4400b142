"""Checking what callers pass in: one place, one wording, for notebooks and command lines.

Bad input must give a clear Python error before any MPI process starts, never a hang or a
segfault; these helpers say what was expected and what came.

>>> names("blocking, overlap", ("blocking", "sendrecv", "overlap"), "mode")
['blocking', 'overlap']
>>> sizes("8,1K,4M")
[8, 1024, 4194304]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def count(value: Any, name: str, lowest: int = 1) -> int:
    """`value` as an int, if it is an integer (bool is not) and at least `lowest`.

    Parameters
    ----------
    value : object
        What the caller passed: a Python or NumPy integer.
    name : str
        The argument's name, as the error message calls it.
    lowest : int, optional
        The smallest value allowed (default 1).

    Returns
    -------
    int
        `value` as a Python int.

    Raises
    ------
    TypeError
        `value` is not an integer (a bool, a float or a string is not), naming `name`.
    ValueError
        `value` is below `lowest`, naming `name`.
    """
    import numpy as np

    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}")
    if value < lowest:
        raise ValueError(f"{name} must be >= {lowest}, got {value}")
    return int(value)


def names(value: str | Sequence[str], allowed: Sequence[str], what: str,
          groups: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """Names from one name, a comma-separated string or a sequence; each in `allowed`.

    A name of `groups` stands for several (by default ``"all"`` for every allowed name);
    duplicates are dropped, the order kept.

    Parameters
    ----------
    value : str or sequence of str
        One name, names separated by commas (spaces around them ignored), or a sequence
        of names.
    allowed : sequence of str
        The names accepted.
    what : str
        What the names are, as the error message calls them (``"mode"``).
    groups : mapping of str to sequence of str, optional
        Names that stand for several; None (default): ``{"all": allowed}``.

    Returns
    -------
    list of str
        The names, groups expanded, each once, in the order first given.

    Raises
    ------
    TypeError
        `value` is neither a string nor an iterable of names.
    ValueError
        A name is neither in `allowed` nor in `groups` (a non-string item too), or no
        name is given.
    """
    groups = {"all": tuple(allowed)} if groups is None else groups
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    try:
        given = list(value)
    except TypeError:
        raise TypeError(f"{what} must be a name or a list of names, not "
                        f"{type(value).__name__}") from None
    out: list[str] = []
    for v in given:
        if isinstance(v, str) and v in groups:
            out += [g for g in groups[v] if g not in out]
        elif isinstance(v, str) and v in allowed:
            if v not in out:
                out.append(v)
        else:
            extra = f" (or {', '.join(map(repr, groups))})" if groups else ""
            raise ValueError(f"{what} must be one of {tuple(allowed)}{extra}, got {v!r}")
    if not out:
        raise ValueError(f"no {what} given")
    return out


def wave_params(nx: int, ny: int, f0: Any, courant: Any,
                source: Any) -> tuple[float, float, int, int]:
    """The wave problem's parameters checked: ``(f0, courant, sx, sy)``, or a clear error.

    Used by :mod:`mpilab.halo`, the Fortran programs' driver and the compiled wave
    kernel alike.

    Parameters
    ----------
    nx, ny : int
        The global grid's points in x and y.
    f0 : float
        The source's peak frequency: a finite number above 0.
    courant : float
        The Courant number: in (0, 1/sqrt(2)], the explicit scheme's stability limit.
    source : pair of int or None
        The source's grid point ``(x, y)``, inside the `nx` x `ny` grid; None: the
        grid's centre, ``(nx // 2, ny // 2)``.

    Returns
    -------
    (float, float, int, int)
        `f0`, `courant` and the source's ``sx``, ``sy``.

    Raises
    ------
    TypeError
        `f0` or `courant` is not a number (a bool is not), or `source` is not a pair of
        integers.
    ValueError
        `f0` or `courant` is not finite or out of its range, or the source is outside
        the grid (or negative).
    """
    import math

    import numpy as np

    for name, v in (("f0", f0), ("courant", courant)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name} must be a number, not {type(v).__name__}")
        if not math.isfinite(v):
            raise ValueError(f"{name} must be finite, got {v}")
    if f0 <= 0:
        raise ValueError(f"f0 must be > 0, got {f0}")
    if not 0 < courant <= 1 / math.sqrt(2):
        raise ValueError(f"courant must be in (0, 1/sqrt(2)] for stability, got {courant}")
    if source is None:
        source = (nx // 2, ny // 2)
    try:
        sx, sy = source
    except (TypeError, ValueError):
        raise TypeError(f"source must be a pair (x, y), got {source!r}") from None
    sx = count(sx, "source x", 0)
    sy = count(sy, "source y", 0)
    if sx >= nx or sy >= ny:
        raise ValueError(f"source {tuple(source)} is outside the {nx} x {ny} grid")
    return float(f0), float(courant), sx, sy


def sizes(text: str) -> list[int]:
    """Byte sizes from a comma-separated list: ``"8,1024,4M"`` gives [8, 1024, 4194304].

    Parameters
    ----------
    text : str
        Sizes separated by commas, each an integer with an optional suffix K, M or G
        (powers of 1024; either case) and an optional trailing B; empty items are
        skipped.

    Returns
    -------
    list of int
        The sizes in bytes, in the order given (at least one).

    Raises
    ------
    ValueError
        An item is not a size, is negative, or no size is given.
    """
    out = []
    for tok in text.split(","):
        tok = tok.strip().upper().removesuffix("B")
        if not tok:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(tok[-1], 1)
        num = tok[:-1] if mult > 1 else tok
        try:
            value = int(num) * mult
        except ValueError:
            raise ValueError(f"not a size: {tok!r} (use bytes, e.g. 8,1024,4M)") from None
        if value < 0:
            raise ValueError(f"sizes must be >= 0, got {value}")
        out.append(value)
    if not out:
        raise ValueError("no sizes given")
    return out
