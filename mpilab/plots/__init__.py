"""Figures shared by the lectures: measured latency and bandwidth, with model predictions.

Functions return a :class:`matplotlib.figure.Figure` that is not registered with pyplot:
it works under the Agg backend and never leaks between calls. In a notebook it shows
(once) as a cell's last value after ``%matplotlib inline``, which registers IPython's
figure formatter. Nothing here calls ``plt.show()``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

__all__ = ["format_bytes", "latency_bandwidth"]

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(n) -> str:
    """A byte count in binary units, short enough for a tick label.

    Parameters
    ----------
    n : int or float
        Number of bytes.

    Returns
    -------
    str
        E.g. ``"8 B"``, ``"1 KiB"``, ``"1.5 KiB"``, ``"4 MiB"``.

    Examples
    --------
    >>> format_bytes(8), format_bytes(1024), format_bytes(4 * 2**20)
    ('8 B', '1 KiB', '4 MiB')
    """
    value = float(n)
    sign = "-" if value < 0 else ""
    value = abs(value)
    unit = 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    digits = f"{value:.0f}" if value >= 100 else f"{value:.3g}"
    return f"{sign}{digits} {_UNITS[unit]}"


def _group_label(key) -> str:
    if key is None:
        return "measured"
    if isinstance(key, tuple):
        return ", ".join(str(k) for k in key)
    return str(key)


def _time_label(time: str) -> str:
    stat = {"t_us_median": "median", "t_us_min": "minimum"}.get(time, time)
    return f"one-way time, {stat} (µs)"


def _set_size_ticks(ax, lo: float, hi: float) -> None:
    # Ticks at powers of 2 whose exponent is a multiple of 1, 2, 5 or 10, so that 1 KiB
    # and 1 MiB are labelled whenever they are in range; every power of 2 gets a minor tick.
    exponents = np.arange(np.ceil(np.log2(lo)), np.floor(np.log2(hi)) + 1)
    if exponents.size == 0:
        return
    for stride in (1, 2, 5, 10, 20):
        major = exponents[exponents % stride == 0]
        if major.size <= 7:
            break
    if major.size == 0:
        major = exponents[:1]
    ax.xaxis.set_major_locator(FixedLocator(2.0**major))
    ax.xaxis.set_minor_locator(FixedLocator(2.0**exponents))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: format_bytes(x)))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _minor_label(ax, y: float) -> str:
    # Plain numbers (0.1, 20, 1000) rather than powers of ten; minor ticks are labelled
    # only when fewer than two powers of ten are in view, or the axis would have none.
    lo, hi = ax.get_ylim()
    return f"{y:g}" if np.floor(np.log10(hi)) - np.ceil(np.log10(lo)) < 1 else ""


def _style_axes(ax, ylabel: str, title: str) -> None:
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: _minor_label(ax, y)))
    ax.set_xlabel("message size")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)


def latency_bandwidth(df: pd.DataFrame, *, by="transport", fits=None, title=None,
                      time: str = "t_us_median") -> Figure:
    """Measured one-way time and bandwidth against message size, side by side, log-log.

    Parameters
    ----------
    df : pandas.DataFrame
        Measurement records with ``size_bytes`` and the ``time`` column; ``t_us_q1`` and
        ``t_us_q3``, when present, are drawn as a shaded band (the spread between
        repetitions). Rows with a size of 0 B have no place on a log axis and are left out.
    by : str or list of str or None, optional
        Column(s) whose groups get one line each; None draws all rows as one line.
    fits : dict or fit, optional
        Models to overlay as dashed lines: a ``{group_key: fit}`` dict as returned by
        :func:`mpilab.models.fit_records` (called with the same ``by``), or a single
        ``HockneyFit`` / ``PiecewiseHockney``. Each is labelled ``"<model> (fitted to
        these points)"``: a least-squares line through the measurements drawn, not a
        prediction made without them; a detected protocol switch is marked by a dotted
        vertical line.
    title : str, optional
        Figure title.
    time : str, optional
        Column of one-way times (µs) to draw; bandwidth is computed from it as
        ``size_bytes / time`` (B/µs = MB/s).

    Returns
    -------
    matplotlib.figure.Figure
        Left axes: one-way time (µs); right axes: bandwidth (MB/s); both against size.

    Raises
    ------
    ValueError
        If a needed column is missing or no row has a positive size and a finite time.
    """
    by_cols = [] if by is None else [by] if isinstance(by, str) else list(by)
    missing = [c for c in ["size_bytes", time, *by_cols] if c not in df.columns]
    if missing:
        raise ValueError(f"df has no column {missing}; it has {list(df.columns)}")
    data = df[(df["size_bytes"] > 0) & np.isfinite(df[time])].sort_values("size_bytes")
    if data.empty:
        raise ValueError(f"nothing to plot: no row has size_bytes > 0 and a finite {time!r}")
    has_spread = {"t_us_q1", "t_us_q3"} <= set(data.columns)

    fig = Figure(figsize=(11, 4.5), layout="constrained")
    ax_t, ax_bw = fig.subplots(1, 2)
    _style_axes(ax_t, _time_label(time), "latency")
    _style_axes(ax_bw, "bandwidth (MB/s)", "bandwidth")

    colors = {}
    ranges = {}
    groups = [(None, data)] if by is None else data.groupby(by, sort=True)
    for key, group in groups:
        size = group["size_bytes"].to_numpy(dtype=float)
        t = group[time].to_numpy(dtype=float)
        (line,) = ax_t.plot(size, t, marker="o", markersize=4, label=_group_label(key))
        color = line.get_color()
        ax_bw.plot(size, size / t, marker="o", markersize=4, color=color)
        if has_spread:
            q1 = group["t_us_q1"].to_numpy(dtype=float)
            q3 = group["t_us_q3"].to_numpy(dtype=float)
            ax_t.fill_between(size, q1, q3, color=color, alpha=0.2, linewidth=0)
            ax_bw.fill_between(size, size / q3, size / q1, color=color, alpha=0.2, linewidth=0)
        colors[key] = color
        ranges[key] = (size.min(), size.max())

    if fits is not None:
        items = fits.items() if isinstance(fits, Mapping) else [(None, fits)]
        lo, hi = data["size_bytes"].min(), data["size_bytes"].max()
        for key, fit in items:
            # A single fit over several groups belongs to none of them: draw it in black.
            color = colors.get(key, "black" if len(colors) > 1 else next(iter(colors.values())))
            start, stop = ranges.get(key, (lo, hi))
            sizes = np.unique(np.round(np.geomspace(start, stop, 200)))
            pred = fit.predict(sizes)
            ax_t.plot(pred["size_bytes"], pred["t_us"], "--", color=color,
                      label=f"{fit.model} (fitted to these points)")
            ax_bw.plot(pred["size_bytes"], pred["bandwidth_MBps"], "--", color=color)
            switch = getattr(fit, "switch_bytes", None)
            if switch is not None:
                for ax in (ax_t, ax_bw):
                    ax.axvline(switch, linestyle=":", color=color,
                               label=f"bend found by the two-line fit at {format_bytes(switch)}")

    handles, labels = ax_t.get_legend_handles_labels()
    if has_spread:
        handles.append(Patch(color="grey", alpha=0.3))
        labels.append("shaded: q1 to q3 of repetitions")
    # Below the axes, so that long model labels never cover the data, in up to three
    # columns: one entry a row made the legend taller than the plots (nine entries).
    fig.legend(handles, labels, loc="outside lower center", fontsize="small",
               ncols=min(len(labels), 3 if fits is not None else 4))
    for ax in (ax_t, ax_bw):
        _set_size_ticks(ax, data["size_bytes"].min(), data["size_bytes"].max())
    if title:
        fig.suptitle(title)
    return fig
