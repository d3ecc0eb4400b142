"""Figures of lectures 05 and 06: collective schedules step by step, predictions vs measurements.

The schedules come from traces of the messages a C kernel really sent
(:func:`mpilab.collectives.events`); :func:`knowledge` follows them in program order, the
way :func:`mpilab.tracing.schedule` matches them, and records which ranks' data *could*
have reached each rank after each step (a message carries everything its sender had
heard of when it sent it). :func:`step_panels` draws one small panel per step.
:func:`predicted_vs_measured` puts measured medians (with their spread) beside model
predictions, which are always drawn dashed and labelled as predictions.

Functions return a :class:`matplotlib.figure.Figure` that is not registered with pyplot
(as :mod:`mpilab.plots`): in a notebook it shows as a cell's last value.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..tracing import as_table, schedule
from . import format_bytes

__all__ = ["knowledge", "step_panels", "animate", "predicted_vs_measured", "mark_best_worst"]


def knowledge(events_by_rank: Sequence | Mapping) -> tuple[list[dict], list[list[frozenset]]]:
    """A schedule, and after each step which ranks each rank could have heard from.

    Parameters
    ----------
    events_by_rank : sequence or mapping
        ``events_by_rank[r]``: rank r's ``(kind, peer, nbytes)`` events in program order,
        as :func:`mpilab.collectives.events` returns them.

    Returns
    -------
    sched : list of dict
        :func:`mpilab.tracing.schedule` of the events (``step``, ``src``, ``dst``, ``bytes``).
    known : list of list of frozenset
        ``known[k][r]``: the ranks whose data could have reached rank r by the end of
        step k (``known[0][r] == {r}``). An upper bound: a message is assumed to carry
        all its sender had heard of, which is exact for a broadcast or an allgather and
        an upper bound for algorithms that forward only part of what they hold.

    Raises
    ------
    ValueError
        As :func:`mpilab.tracing.schedule`: malformed events, unmatched messages, deadlock.

    Examples
    --------
    >>> ev = [[("send", 1, 8)], [("recv", 0, 8), ("send", 2, 8)], [("recv", 1, 8)]]
    >>> sched, known = knowledge(ev)
    >>> [sorted(k) for k in known[-1]]
    [[0], [0, 1], [0, 1, 2]]
    """
    sched = schedule(events_by_rank)  # validates, and raises the tracer's own messages
    table = as_table(events_by_rank)
    p = len(table)
    info = [{r} for r in range(p)]
    clock = [0] * p
    pos = [0] * p
    inflight: dict[tuple[int, int], deque] = {}
    arrivals: list[tuple[int, int, frozenset]] = []  # (step, dst, what it carried)
    progress = True
    while progress:
        progress = False
        for r in range(p):
            while pos[r] < len(table[r]):
                kind, peer, _n = table[r][pos[r]]
                if kind == "send":
                    if peer != r:
                        clock[r] += 1
                    inflight.setdefault((r, peer), deque()).append((clock[r], frozenset(info[r])))
                else:
                    q = inflight.get((peer, r))
                    if not q:
                        break
                    stamp, carried = q.popleft()
                    if peer != r:
                        clock[r] = max(clock[r], stamp)
                        arrivals.append((stamp, r, carried))
                    info[r] |= carried
                pos[r] += 1
                progress = True
    n = max((int(m["step"]) for m in sched), default=0)
    known = [[frozenset({r}) for r in range(p)]]
    now = [{r} for r in range(p)]
    for k in range(1, n + 1):
        for stamp, dst, carried in arrivals:
            if stamp == k:
                now[dst] |= carried
        known.append([frozenset(s) for s in now])
    return sched, known


def _ring(p: int) -> np.ndarray:
    """Positions of p ranks on a circle, rank 0 on top, clockwise."""
    a = math.pi / 2 - 2 * math.pi * np.arange(p) / max(p, 1)
    return np.column_stack([np.cos(a), np.sin(a)])


def step_panels(events_by_rank: Sequence | Mapping, *, root: int | None = None,
                title: str | None = None, max_panels: int = 8, panel_size: float = 2.1) -> Figure:
    """One panel per step: the messages of that step, and who has heard from whom after it.

    Ranks sit on a circle (rank 0 on top). In panel k the arrows are the messages of
    step k, labelled with their bytes; a rank's shade is the fraction of ranks it could
    have heard from after step k (see :func:`knowledge`), or, with `root`, whether the
    root's data could have reached it. Panel 0 is the start.

    Parameters
    ----------
    events_by_rank : sequence or mapping
        Traced events per rank (:func:`mpilab.collectives.events`).
    root : int, optional
        For broadcast and scatter: shade a rank once the root's data could reach it.
    title : str, optional
        Figure title; the number of steps and messages is added.
    max_panels : int
        Draw at most this many steps (the rest are summarised in the title).
    panel_size : float
        Inches per panel.

    Returns
    -------
    matplotlib.figure.Figure
    """
    sched, known = knowledge(events_by_rank)
    n = len(known) - 1
    shown = min(n, max_panels)
    fig = Figure(figsize=(panel_size * (shown + 1), panel_size + 0.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, shown + 1))
    for k, ax in enumerate(axes):
        _draw_step(ax, sched, known, k, root)
    head = title or "schedule"
    more = f" (first {shown} shown)" if shown < n else ""
    fig.suptitle(f"{head}: {n} step{'s' * (n != 1)}, {len(sched)} messages{more}",
                 fontsize=10)
    return fig


def _draw_step(ax, sched, known, k, root):
    """Panel k of a schedule: the messages of step k, ranks shaded by what they have heard."""
    p = len(known[0])
    xy = _ring(p)
    cmap = matplotlib.colormaps["Blues"]
    r_node = 0.16 if p <= 8 else 0.1
    msgs = [m for m in sched if int(m["step"]) == k]
    for m in msgs:
        a, b = xy[int(m["src"])], xy[int(m["dst"])]
        ax.annotate("", xy=b, xytext=a,
                    arrowprops={"arrowstyle": "-|>", "color": "C3", "lw": 1.2,
                                "shrinkA": 9, "shrinkB": 9, "connectionstyle": "arc3,rad=0.15"})
        if len(msgs) <= 6:
            mid = (a + b) / 2 + 0.12 * np.array([-(b - a)[1], (b - a)[0]])
            ax.text(*mid, format_bytes(int(m["bytes"])), fontsize=6, color="C3", zorder=4,
                    ha="center", va="center")
    for r in range(p):
        have = known[k][r]
        frac = (1.0 if root in have else 0.0) if root is not None else len(have) / p
        ax.add_patch(_circle(xy[r], r_node, cmap(0.15 + 0.75 * frac)))
        ax.text(*xy[r], str(r), ha="center", va="center", fontsize=8,
                color="white" if frac > 0.6 else "black")
    done = sum(1 for r in range(p) if (root in known[k][r] if root is not None
                                       else len(known[k][r]) == p))
    what = "have the root's data" if root is not None else "heard from all"
    ax.set_title("start" if k == 0 else f"step {k}: {len(msgs)} msg", fontsize=8)
    ax.text(0, -1.42, f"{done}/{p} {what}", ha="center", fontsize=7)
    ax.set_xlim(-1.35, 1.35)
    ax.set_ylim(-1.55, 1.3)
    ax.set_aspect("equal")
    ax.axis("off")


def animate(events_by_rank: Sequence | Mapping, *, root: int | None = None,
            title: str | None = None, interval_ms: int = 1000, size: float = 3.2):
    """The panels of :func:`step_panels` as an animation, one frame per step.

    Parameters
    ----------
    events_by_rank : sequence or mapping
        Traced events per rank (:func:`mpilab.collectives.events`).
    root : int, optional
        As in :func:`step_panels`.
    title : str, optional
        Title above every frame.
    interval_ms : int
        Milliseconds per frame.
    size : float
        Figure size in inches (square).

    Returns
    -------
    matplotlib.animation.FuncAnimation
        Show it in a notebook with ``IPython.display.HTML(anim.to_jshtml())``, which
        needs no video encoder.
    """
    from matplotlib.animation import FuncAnimation

    sched, known = knowledge(events_by_rank)
    fig = Figure(figsize=(size, size + 0.3))
    ax = fig.subplots()
    fig.subplots_adjust(0.02, 0.02, 0.98, 0.86)

    def frame(k):
        ax.clear()
        _draw_step(ax, sched, known, k, root)
        if title:
            fig.suptitle(title, fontsize=9)
        return []

    return FuncAnimation(fig, frame, frames=len(known), interval=interval_ms, repeat=True)


def _circle(center, radius, color):
    from matplotlib.patches import Circle

    return Circle(center, radius, facecolor=color, edgecolor="0.3", lw=0.8, zorder=3)


def predicted_vs_measured(measured: pd.DataFrame, predicted: pd.DataFrame, *, x: str,
                          by: str = "alg", title: str | None = None, logx: bool = False,
                          logy: bool = True, xlabel: str | None = None,
                          note: str | None = None) -> Figure:
    """Measured medians (solid, with the q1–q3 spread) beside predictions (dashed).

    Parameters
    ----------
    measured : pandas.DataFrame
        Columns `x`, `by`, ``t_us_median`` and optionally ``t_us_q1`` / ``t_us_q3``.
    predicted : pandas.DataFrame
        Columns `x`, `by`, ``t_us``: model times. Each line's legend says "prediction".
    x : str
        Column on the horizontal axis (``"ranks"`` or ``"size_bytes"``).
    by : str
        Column whose values get one colour each (measured and predicted alike).
    title, xlabel, note : str, optional
        Figure title, x-axis label, and a line of small print under the axes.
    logx, logy : bool
        Logarithmic axes (`x` in bytes is labelled in binary units).

    Returns
    -------
    matplotlib.figure.Figure
        Measured medians (solid) and predictions (dashed), one colour per `by` value.

    Raises
    ------
    ValueError
        A needed column is missing.
    """
    for name, df, cols in (("measured", measured, [x, by, "t_us_median"]),
                           ("predicted", predicted, [x, by, "t_us"])):
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise ValueError(f"{name} has no column {missing}; it has {list(df.columns)}")
    fig = Figure(figsize=(8.5, 4.6), layout="constrained")
    ax = fig.subplots()
    keys = list(dict.fromkeys(list(measured[by]) + list(predicted[by])))
    color = {k: f"C{i % 10}" for i, k in enumerate(keys)}
    for k, g in measured.groupby(by, sort=False):
        g = g.sort_values(x)
        ax.plot(g[x], g["t_us_median"], "o-", color=color[k], ms=4, label=f"{k} (measured)")
        if {"t_us_q1", "t_us_q3"} <= set(g.columns):
            ax.fill_between(g[x], g["t_us_q1"], g["t_us_q3"], color=color[k], alpha=0.2, lw=0)
    for k, g in predicted.groupby(by, sort=False):
        g = g.sort_values(x)
        ax.plot(g[x], g["t_us"], "--", color=color[k], lw=1.3, label=f"{k} (prediction)")
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    if x == "size_bytes":
        ticks = sorted(set(measured[x]) | set(predicted[x]))
        ax.set_xticks(ticks)
        ax.set_xticklabels([format_bytes(t) for t in ticks], rotation=45, fontsize=8)
    elif x == "ranks":
        ax.set_xticks(sorted(set(measured[x]) | set(predicted[x])))
    ax.set_xlabel(xlabel or ("block per rank" if x == "size_bytes" else x))
    ax.set_ylabel("time per call (µs)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, ncols=2, loc="best")
    if title:
        ax.set_title(title, fontsize=10)
    if note:
        fig.supxlabel(note, fontsize=7, color="0.3", x=0.01, ha="left")
    return fig


def mark_best_worst(table: pd.DataFrame, fmt=None, skip: Sequence[str] = ()) -> pd.DataFrame:
    """A table of times as text, the best of each column marked ``*`` and the worst ``!``.

    Parameters
    ----------
    table : pandas.DataFrame
        Times (rows: algorithms, columns: sizes); NaN for an algorithm that cannot run.
    fmt : callable, optional
        Number formatter (default: 3 significant digits).
    skip : sequence of str
        Rows that are shown but not ranked (e.g. the library's choice, which runs one
        of the other rows' algorithms).

    Returns
    -------
    pandas.DataFrame
        Strings: ``"12.3 *"`` for the column's best, ``"456 !"`` for its worst, ``"—"``
        where the algorithm did not run.

    Examples
    --------
    >>> t = pd.DataFrame({"8 B": [1.0, 2.0, 3.0]}, index=["a", "b", "c"])
    >>> mark_best_worst(t)["8 B"].tolist()
    ['1 *', '2', '3 !']
    """
    fmt = fmt or (lambda v: f"{v:,.0f}" if v >= 100 else f"{v:.3g}")
    out = table.astype(object).copy()
    ranked = table.drop(index=[s for s in skip if s in table.index])
    for col in table.columns:
        vals = ranked[col].dropna()
        best = vals.idxmin() if len(vals) else None
        worst = vals.idxmax() if len(vals) > 1 else None
        for row in table.index:
            v = table.at[row, col]
            if pd.isna(v):
                out.at[row, col] = "—"
                continue
            mark = " *" if row == best else " !" if row == worst else ""
            out.at[row, col] = fmt(float(v)) + mark
    return out
