"""Figures of the halo-exchange lecture (02): decomposition, timelines, wavefield, speedup.

Like :mod:`mpilab.plots`, every function returns a :class:`matplotlib.figure.Figure` that
is not registered with pyplot (it works under Agg and never leaks between calls); in a
notebook it shows as a cell's last value after ``%matplotlib inline``. The functions take
plain arrays and DataFrames, so they draw what the kernels measured without running MPI.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from ..halo import PHASES, blocks

__all__ = ["decomposition", "timeline", "wavefield", "k1", "speedup", "PHASE_COLORS"]

#: One colour per phase of :func:`mpilab.halo.timeline` (computing is green, waiting red).
PHASE_COLORS = {"exchange": "#4c72b0", "interior": "#55a868", "wait": "#c44e52",
                "boundary": "#8172b2", "progress": "#dd8452"}
#: The phases drawn as bars: ``progress`` (overlap-test's MPI_Testall calls) is a total
#: inside the interior's span, not an interval, so the panel's title gives its share.
_BARS = ("exchange", "interior", "wait", "boundary")
_SIDE_COLORS = {"west": "#dd8452", "east": "#4c72b0", "north": "#55a868", "south": "#c44e52"}


def _neighbours(rank: int, dims: tuple[int, int]) -> dict[str, int]:
    py, px = dims
    y, x = divmod(rank, px)
    out = {}
    if x > 0:
        out["west"] = rank - 1
    if x < px - 1:
        out["east"] = rank + 1
    if y > 0:
        out["north"] = rank - px
    if y < py - 1:
        out["south"] = rank + px
    return out


def _draw_decomposition(ax, nx: int, ny: int, dims: tuple[int, int], rank: int | None) -> None:
    bl = blocks(nx, ny, dims)
    ax.set_xlim(-1.6, nx + 0.6)
    ax.set_ylim(ny + 0.6, -1.6)  # row 0 at the top, as the array is stored
    ax.set_aspect("equal")
    # the grid points, as light cells
    for x in range(nx + 1):
        ax.plot([x, x], [0, ny], color="0.88", lw=0.6, zorder=1)
    for y in range(ny + 1):
        ax.plot([0, nx], [y, y], color="0.88", lw=0.6, zorder=1)
    for r, (y0, rows, x0, cols) in enumerate(bl):
        ax.add_patch(Rectangle((x0, y0), cols, rows, fill=False, lw=2.2, ec="0.15", zorder=3))
        ax.text(x0 + cols / 2, y0 + rows / 2, f"rank {r}\n{rows}×{cols}", ha="center",
                va="center", fontsize=9, zorder=4,
                bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.8})
    if rank is None:
        return
    y0, rows, x0, cols = bl[rank]
    ax.add_patch(Rectangle((x0, y0), cols, rows, fc="#fff3b0", ec="none", zorder=0))
    # the ghost frame: one cell all round the block
    ax.add_patch(Rectangle((x0 - 1, y0 - 1), cols + 2, rows + 2, fill=False, lw=1.5, ls="--",
                           ec="0.3", zorder=5))
    nbrs = _neighbours(rank, dims)
    ghosts = {"west": (x0 - 1, y0, 1, rows), "east": (x0 + cols, y0, 1, rows),
              "north": (x0, y0 - 1, cols, 1), "south": (x0, y0 + rows, cols, 1)}
    for side, (gx, gy, w, h) in ghosts.items():
        color = _SIDE_COLORS[side]
        if side in nbrs:
            ax.add_patch(Rectangle((gx, gy), w, h, fc=color, alpha=0.75, ec="none", zorder=2))
            nb = nbrs[side]
            # an arrow from the middle of the neighbour's block into the ghost strip
            ny0, nrows, nx0, ncols = bl[nb]
            sx, sy = nx0 + ncols / 2, ny0 + nrows / 2
            ax.annotate("", xy=(gx + w / 2, gy + h / 2), xytext=(sx, sy), zorder=6,
                        arrowprops={"arrowstyle": "->", "color": color, "lw": 1.8,
                                    "shrinkA": 14, "shrinkB": 2})
        else:  # a border of the global grid: the ghost stays at its boundary value
            ax.add_patch(Rectangle((gx, gy), w, h, fc="none", ec="0.55", hatch="///", lw=0,
                                   zorder=2))


def decomposition(nx: int, ny: int, dims_list: Sequence[tuple[int, int]], *,
                  rank: int | Sequence[int | None] | None = 0,
                  title: str | None = None) -> Figure:
    """The global grid split over process grids, with one rank's ghost frame.

    Parameters
    ----------
    nx, ny : int
        Global grid points (columns, rows); keep them small (tens) so cells show.
    dims_list : sequence of (py, px)
        One panel per process grid, e.g. ``[(2, 2), (2, 3)]``.
    rank : int or sequence of int, optional
        The rank whose ghost frame is drawn in each panel (one value for all, or one
        per panel; None for none). Its ghost strips are coloured by the neighbour that
        fills them, with an arrow from that neighbour; hatched strips lie on the border
        of the global grid, where no neighbour sends anything.
    title : str, optional
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure
    """
    dims_list = [tuple(d) for d in dims_list]
    if not dims_list:
        raise ValueError("dims_list is empty")
    ranks = list(rank) if isinstance(rank, (list, tuple)) else [rank] * len(dims_list)
    if len(ranks) != len(dims_list):
        raise ValueError("give one rank per process grid, or a single rank")
    height = 5.2 * (ny + 2.2) / (nx + 2.2) + 1.5
    fig = Figure(figsize=(5.2 * len(dims_list), height), layout="constrained")
    axes = fig.subplots(1, len(dims_list), squeeze=False)[0]
    for ax, dims, r in zip(axes, dims_list, ranks, strict=True):
        if r is not None and not 0 <= r < dims[0] * dims[1]:
            raise ValueError(f"rank {r} is not on a {dims[0]} x {dims[1]} process grid")
        _draw_decomposition(ax, nx, ny, dims, r)
        label = f"{dims[0]} × {dims[1]} process grid (py × px), {nx} × {ny} points"
        if r is not None:
            nbrs = _neighbours(r, dims)
            got = ", ".join(f"{s[0].upper()} ← {n}" for s, n in nbrs.items())
            label += f"\nrank {r}'s ghosts come from: {got}"
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("x (columns)")
        ax.set_ylabel("y (rows)")
    handles = [Patch(fc=c, alpha=0.75, label=f"{s} ghost") for s, c in _SIDE_COLORS.items()]
    handles += [Patch(fc="none", ec="0.55", hatch="///", label="global border (no neighbour)"),
                Patch(fc="#fff3b0", label="the rank's own block")]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=8)
    if title:
        fig.suptitle(title)
    return fig


def timeline(frames: Mapping[str, pd.DataFrame], *, title: str | None = None,
             unit: str = "ms") -> Figure:
    """Per-rank bars of what each rank did, step by step, one panel per mode.

    Parameters
    ----------
    frames : mapping of str to DataFrame
        Panel label (e.g. ``"blocking"``) to a :func:`mpilab.halo.timeline_frame`:
        columns ``rank``, ``phase``, ``start``, ``end`` (seconds). Each panel starts at
        its own earliest phase.
    title : str, optional
        Figure title.
    unit : {"ms", "us"}
        Time unit of the x axis.

    Returns
    -------
    matplotlib.figure.Figure
        Phases coloured by :data:`PHASE_COLORS`; red is time spent waiting for messages.
        Each panel's title gives its span and the share of the ranks' time in each phase.
    """
    if not frames:
        raise ValueError("no timeline to draw")
    scale = {"ms": 1e3, "us": 1e6}[unit]
    label = {"ms": "ms", "us": "µs"}[unit]
    n = len(frames)
    ranks = max(int(df["rank"].max()) + 1 for df in frames.values())
    fig = Figure(figsize=(10, 0.55 * ranks * n + 1.6 * n), layout="constrained")
    axes = fig.subplots(n, 1, squeeze=False)[:, 0]
    for ax, (name, df) in zip(axes, frames.items(), strict=True):
        t0 = df["start"].min()
        for phase in _BARS:
            part = df[(df["phase"] == phase) & (df["end"] > df["start"])]
            for r, grp in part.groupby("rank"):
                ax.broken_barh([((a - t0) * scale, (b - a) * scale)
                                for a, b in zip(grp["start"], grp["end"], strict=True)],
                               (r - 0.38, 0.76), facecolors=PHASE_COLORS[phase], lw=0)
        # step boundaries: where each step's exchange starts on rank 0
        first = df[(df["rank"] == 0) & (df["phase"] == "exchange")]["start"]
        for s in first:
            ax.axvline((s - t0) * scale, color="0.6", lw=0.6, ls=":")
        span = df["end"].max() - t0
        share = df.groupby("phase")["duration"].sum() / (ranks * span) if span > 0 else {}
        parts = ", ".join(f"{p} {share.get(p, 0.0):.0%}" for p in PHASES
                          if p in _BARS or share.get(p, 0.0) > 0)
        ax.set_yticks(range(ranks), [f"rank {r}" for r in range(ranks)])
        ax.set_ylim(ranks - 0.5, -0.5)
        ax.set_title(f"{name}: {span * scale:.3g} {label}; share of the ranks' time: {parts}",
                     fontsize=10, loc="left")
        ax.set_xlabel(f"time ({label}) after the first recorded step began")
        ax.grid(axis="x", alpha=0.3)
    fig.legend(handles=[Patch(fc=c, label=p) for p, c in PHASE_COLORS.items()],
               loc="outside upper right", ncol=4, fontsize=9)
    if title:
        fig.suptitle(title, ha="left", x=0.01)
    return fig


def wavefield(p: np.ndarray, *, source: tuple[int, int] | None = None,
              dims: tuple[int, int] | None = None, title: str | None = None,
              difference: np.ndarray | None = None) -> Figure:
    """A pressure snapshot with the source marked and the ranks' blocks outlined.

    Parameters
    ----------
    p : numpy.ndarray
        Pressure, shape ``(ny, nx)``.
    source : (x, y), optional
        Source cell, marked with a star.
    dims : (py, px), optional
        Process grid whose blocks are outlined (dashed), with their ranks.
    title : str, optional
        Title of the snapshot panel.
    difference : numpy.ndarray, optional
        The same field minus the serial reference; drawn in a second panel with its
        own colour scale (its maximum is printed in the panel's title).

    Returns
    -------
    matplotlib.figure.Figure
    """
    p = np.asarray(p, dtype=float)
    if p.ndim != 2:
        raise ValueError(f"p must be 2D, got shape {p.shape}")
    ny, nx = p.shape
    panels = 1 if difference is None else 2
    fig = Figure(figsize=(5.6 * panels + 0.6, 5.2 * ny / nx + 0.9), layout="constrained")
    axes = fig.subplots(1, panels, squeeze=False)[0]
    vmax = float(np.abs(p).max()) or 1.0
    im = axes[0].imshow(p, cmap="RdBu_r", vmin=-vmax, vmax=vmax, origin="upper",
                        interpolation="nearest")
    fig.colorbar(im, ax=axes[0], shrink=0.8, label="pressure")
    if dims is not None:
        for r, (y0, rows, x0, cols) in enumerate(blocks(nx, ny, dims)):
            axes[0].add_patch(Rectangle((x0 - 0.5, y0 - 0.5), cols, rows, fill=False,
                                        ls="--", lw=1.0, ec="0.25"))
            axes[0].text(x0 + 1, y0 + 1, f"rank {r}", fontsize=8, va="top", color="0.2")
    if source is not None:
        axes[0].plot([source[0]], [source[1]], marker="*", ms=14, mfc="gold", mec="k",
                     ls="none", label="source (Ricker wavelet)")
        axes[0].legend(loc="lower right", fontsize=8)
    axes[0].set_title(title or "pressure", fontsize=10)
    axes[0].set_xlabel("x (cells)")
    axes[0].set_ylabel("y (cells)")
    if difference is not None:
        d = np.asarray(difference, dtype=float)
        if d.shape != p.shape:
            raise ValueError(f"difference has shape {d.shape}, p has {p.shape}")
        dmax = float(np.abs(d).max())
        im2 = axes[1].imshow(d, cmap="PuOr", vmin=-(dmax or 1.0), vmax=dmax or 1.0,
                             origin="upper", interpolation="nearest")
        if dmax > 0:
            fig.colorbar(im2, ax=axes[1], shrink=0.8, label="parallel − serial")
        else:  # a colour scale of nothing would only suggest a difference
            axes[1].text(0.5, 0.5, "every cell equal\n(difference exactly 0)", ha="center",
                         va="center", transform=axes[1].transAxes, fontsize=11, color="0.3")
        same = " (identical)" if dmax == 0 else ""
        axes[1].set_title(f"parallel − serial reference: max |difference| {dmax:.2g}{same}",
                          fontsize=10)
        axes[1].set_xlabel("x (cells)")
    return fig


def k1(here: pd.DataFrame, *, paper: pd.Series | pd.DataFrame | None = None,
       title: str | None = None) -> Figure:
    """Time ratios of two exchange modes against the subdomain size, with their noise.

    Parameters
    ----------
    here : DataFrame
        Indexed by the subdomain edge ``sub`` (points per rank and axis); one column per
        measured ratio to draw (e.g. ``"K1"``, ``"blocking / overlap"``). An optional
        ``spread`` column (the relative spread of the times) is drawn as a band from
        ``1 / (1 + spread)`` to ``1 + spread`` around 1: a ratio inside it is no evidence
        that either mode won.
    paper : Series or DataFrame, optional
        A paper's ratios indexed by ``sub``, drawn for comparison; a DataFrame draws
        each column (e.g. one per table of the paper), labelled by its name.
    title : str, optional
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure
    """
    ratios = [c for c in here.columns if c != "spread"]
    if not ratios:
        raise ValueError("here has no ratio column to draw")
    fig = Figure(figsize=(8, 4.2), layout="constrained")
    ax = fig.subplots()
    subs = here.index.to_numpy(dtype=float)
    if "spread" in here.columns:
        sp = here["spread"].to_numpy(dtype=float)
        ax.fill_between(subs, 1 / (1 + sp), 1 + sp, color="0.85", lw=0,
                        label="noise band, this machine: 1 / (1 + spread) to 1 + spread")
    ax.axhline(1, color="0.4", lw=1)
    for i, c in enumerate(ratios):
        ax.plot(subs, here[c], "o-" if i == 0 else "o:", color=f"C{i}",
                mfc=None if i == 0 else "white", label=f"{c} (this machine)")
    papers = (paper.to_frame(paper.name or "ratio") if isinstance(paper, pd.Series)
              else paper if paper is not None else pd.DataFrame())
    greys = np.linspace(0, 0.5, max(1, len(papers.columns)))  # black, then lighter
    for i, c in enumerate(papers.columns):
        col = papers[c].dropna()
        ax.plot(col.index.to_numpy(dtype=float), col.to_numpy(dtype=float),
                ["s--", "^--", "v--", "D--"][i % 4], color=f"{greys[i]:.2f}",
                label=f"{c} (paper, its figures)")
    ticks = sorted(set(here.index.astype(int)) | set(papers.index.astype(int)))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}²"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.set_xlabel("subdomain per rank (points)")
    faster = ("the mode after the slash" if all(" / " in c for c in ratios)
              else "the ratio's second mode (its denominator)")
    ax.set_ylabel(f"time ratio (log scale)\nabove 1: {faster} is faster")
    ax.grid(alpha=0.3)
    # below the axes: inside, the legend covered the noise band where the ratios end
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", fontsize=8,
               ncols=2)
    if title:
        ax.set_title(title, fontsize=10)
    return fig


def speedup(df: pd.DataFrame, *, cores: int, paper: pd.DataFrame | None = None,
            title: str | None = None) -> Figure:
    """Speedup and parallel efficiency against ranks, oversubscription shaded.

    Parameters
    ----------
    df : DataFrame
        One row per rank count measured here: columns ``ranks``, ``speedup``
        (``T(1) / T(p)``, typically from medians), optionally ``speedup_q1`` /
        ``speedup_q3`` for the spread and ``speedup_best`` (from the fastest repetitions,
        drawn dotted: what the machine gave when nothing else interfered).
    cores : int
        Cores of this machine: the most speedup it can give; rank counts above it are
        shaded as oversubscribed.
    paper : DataFrame, optional
        Columns ``ranks`` and ``speedup`` from a paper, drawn for comparison.
    title : str, optional
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure
        Left: speedup, with the ideal line ``p`` and the core count as a ceiling. Right:
        efficiency ``speedup / p``.
    """
    need = {"ranks", "speedup"}
    if not need <= set(df.columns):
        raise ValueError(f"df needs the columns {sorted(need)}")
    d = df.sort_values("ranks")
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax, ax2 = fig.subplots(1, 2)
    top = max([int(d["ranks"].max())] + ([int(paper["ranks"].max())] if paper is not None
                                         else []))
    ps = np.arange(1, top + 1)
    for a in (ax, ax2):
        if top > cores:
            a.axvspan(cores + 0.5, top * 1.25, color="0.92", zorder=0)
            a.text(top * 1.2, 0.02, f"oversubscribed here\n(> {cores} cores)",
                   transform=a.get_xaxis_transform(), fontsize=8, color="0.35", va="bottom",
                   ha="right")
        a.set_xlabel("ranks (processes, log scale)")
        a.set_xscale("log", base=2)
        a.set_xlim(0.8, top * 1.25)
        ticks = sorted(set(d["ranks"].astype(int)) | (set(paper["ranks"].astype(int))
                                                      if paper is not None else set()))
        a.xaxis.set_major_locator(FixedLocator(ticks))
        a.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        a.xaxis.set_minor_locator(NullLocator())
        a.grid(alpha=0.3)
    ax.plot(ps, ps, color="0.5", ls="--", lw=1, label="ideal: speedup = ranks")
    ax.axhline(cores, color="k", ls=":", lw=1, label=f"ceiling here: {cores} cores")
    if {"speedup_q1", "speedup_q3"} <= set(d.columns):
        ax.fill_between(d["ranks"], d["speedup_q1"], d["speedup_q3"], color="C0", alpha=0.2,
                        lw=0)
    ax.plot(d["ranks"], d["speedup"], "o-", color="C0", label="this machine (measured)")
    ax2.plot(d["ranks"], d["speedup"] / d["ranks"], "o-", color="C0",
             label="this machine (measured)")
    if "speedup_best" in d.columns:
        ax.plot(d["ranks"], d["speedup_best"], "o:", color="C0", mfc="white",
                label="this machine, best repetitions")
        ax2.plot(d["ranks"], d["speedup_best"] / d["ranks"], "o:", color="C0", mfc="white",
                 label="this machine, best repetitions")
    if paper is not None:
        pp = paper.sort_values("ranks")
        ax.plot(pp["ranks"], pp["speedup"], "s--", color="C1", label="paper (its figures)")
        ax2.plot(pp["ranks"], pp["speedup"] / pp["ranks"], "s--", color="C1",
                 label="paper (its figures)")
    ax2.axhline(1, color="0.5", ls="--", lw=1)
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.set_ylabel("speedup T(1) / T(p) (log scale)")
    ax2.set_ylabel("efficiency speedup / p")
    best = d["speedup_best"] if "speedup_best" in d.columns else d["speedup"]
    ax2.set_ylim(0, max(1.3, float((np.maximum(d["speedup"], best) / d["ranks"]).max()) * 1.1))
    ax.legend(fontsize=8, loc="upper left")
    ax2.legend(fontsize=8, loc="upper right")
    if title:
        fig.suptitle(title)
    return fig
