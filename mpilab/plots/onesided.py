"""Figures of the one-sided lecture (03): a window version's time against send/receive.

Like :mod:`mpilab.plots`, every function returns a :class:`matplotlib.figure.Figure` that
is not registered with pyplot; in a notebook it shows as a cell's last value after
``%matplotlib inline``. The functions take plain DataFrames, so they draw what the
kernels measured (or what a paper printed) without running MPI.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

__all__ = ["versus_sr"]

_YTICKS = (0.25, 0.33, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.1, 1.2, 1.4, 1.6, 2, 3, 4)


def _ratio_columns(df: pd.DataFrame, what: str) -> list:
    cols = [c for c in df.columns if c != "spread"]
    if not cols:
        raise ValueError(f"{what} has no ratio column to draw")
    idx = pd.Index(df.index)
    if len(idx) == 0 or not pd.api.types.is_numeric_dtype(idx.dtype) or (idx <= 0).any():
        raise ValueError(f"{what} must be indexed by positive rank counts")
    return cols


def versus_sr(here: pd.DataFrame, *, cores: int, paper: pd.DataFrame | None = None,
              title: str | None = None) -> Figure:
    """Time of send/receive divided by the time of each window version, against ranks.

    Above 1 the window version was faster than send/receive at that rank count, below 1
    slower: the shape of the SHM paper's Table 1 in one picture.

    Parameters
    ----------
    here : DataFrame
        Indexed by rank count; one column per version (e.g. ``"SHM"``, ``"SHM-NC"``)
        holding ``T_SR / T_version`` measured on this machine. An optional ``spread``
        column (the largest relative spread of the times at that rank count) is drawn
        as a band from ``1 / (1 + spread)`` to ``1 + spread``: a ratio inside it is no
        evidence that either version won.
    cores : int
        Cores of this machine; rank counts above it are shaded as oversubscribed.
    paper : DataFrame, optional
        The same ratios from a paper, indexed by its rank counts, drawn dashed.
    title : str, optional
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure
    """
    mine = _ratio_columns(here, "here")
    theirs = _ratio_columns(paper, "paper") if paper is not None else []
    if isinstance(cores, bool) or not isinstance(cores, (int, np.integer)) or cores < 1:
        raise ValueError(f"cores must be a positive integer, got {cores!r}")
    ranks = here.index.to_numpy(dtype=float)
    order = np.argsort(ranks)
    ranks = ranks[order]
    every = set(ranks.astype(int)) | (set(paper.index.astype(int)) if paper is not None
                                      else set())
    top = max(every)
    fig = Figure(figsize=(8, 4.2), layout="constrained")
    ax = fig.subplots()
    if top > cores:
        ax.axvspan(cores + 0.5, top * 1.25, color="0.92", zorder=0)
        ax.text(0.98, 0.98, f"oversubscribed here\n(> {cores} cores)",
                transform=ax.transAxes, fontsize=8, color="0.35", va="top", ha="right")
    if "spread" in here.columns:
        sp = here["spread"].to_numpy(dtype=float)[order]
        ax.fill_between(ranks, 1 / (1 + sp), 1 + sp, color="0.8", alpha=0.6, lw=0,
                        label="noise band, this machine: 1 / (1 + spread) to 1 + spread")
    ax.axhline(1, color="0.4", lw=1)
    colors = {}
    for c in mine + [c for c in theirs if c not in mine]:
        colors[c] = f"C{len(colors)}"
    for c in mine:
        ax.plot(ranks, here[c].to_numpy(dtype=float)[order], "o-", color=colors[c],
                label=f"S/R / {c} (this machine, measured)")
    for c in theirs:
        pp = paper[c].sort_index()
        ax.plot(pp.index.to_numpy(dtype=float), pp.to_numpy(dtype=float), "s--",
                color=colors[c], mfc="white", label=f"S/R / {c} (paper, its figures)")
    ax.set_xscale("log", base=2)
    ax.set_xlim(0.8, top * 1.25)
    ax.xaxis.set_major_locator(FixedLocator(sorted(every)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_yscale("log", base=2)
    lo, hi = ax.get_ylim()
    ax.yaxis.set_major_locator(FixedLocator([y for y in _YTICKS if lo <= y <= hi] or [1]))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("ranks (processes, log scale)")
    ax.set_ylabel("T(S/R) / T(version), log scale\nabove 1: the window version is faster")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    if title:
        ax.set_title(title, fontsize=10)
    return fig
