"""The picture of a schedule: a space-time diagram, one line per rank."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .schedules import steps

# picture


def draw(sched: Sequence[Mapping], ranks: int, ax: Any = None, *, labels: bool = True,
         title: str | None = None) -> Any:
    """Space-time diagram of a schedule: one line per rank, one column per step.

    A message of step s is an arrow from (s - 1, src) to (s, dst), labelled with its bytes.

    Parameters
    ----------
    sched : list of dict
        What :func:`schedule` returns.
    ranks : int
        Number of ranks.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure by default.
    labels : bool
        Write the byte count on each arrow.
    title : str, optional
        Title of the axes; by default the number of steps and bytes.

    Returns
    -------
    matplotlib.axes.Axes
    """
    import matplotlib.pyplot as plt

    n = steps(sched)
    if ax is None:
        _fig, ax = plt.subplots(figsize=(1.6 + 1.3 * max(n, 1), 0.9 + 0.45 * ranks))
    for r in range(ranks):
        ax.plot([0, max(n, 1)], [r, r], color="0.85", lw=1, zorder=1)
    colors = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    for m in sched:
        s, a, b = int(m["step"]), int(m["src"]), int(m["dst"])
        color = colors[a % len(colors)]
        ax.annotate("", xy=(s, b), xytext=(s - 1, a),
                    arrowprops={"arrowstyle": "-|>", "color": color, "lw": 1.3,
                                "shrinkA": 3, "shrinkB": 3}, zorder=2)
        if labels:
            t = 0.35 if b > a else 0.65  # keep labels of crossing arrows apart
            ax.text(s - 1 + t, a + t * (b - a), _human(int(m["bytes"])), fontsize=7,
                    color=color, ha="center", va="center", zorder=3,
                    bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none",
                          "alpha": 0.8})
    ax.set_xlim(-0.3, max(n, 1) + 0.3)
    ax.set_ylim(ranks - 0.5, -0.5)  # rank 0 on top
    ax.set_xticks(range(max(n, 1) + 1))
    ax.set_yticks(range(ranks))
    ax.set_yticklabels([f"rank {r}" for r in range(ranks)])
    ax.set_xlabel("step")
    total = sum(int(m["bytes"]) for m in sched)
    ax.set_title(title if title is not None else
                 f"{n} step{'s' * (n != 1)}, {len(sched)} messages, {_human(total)}")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return ax


def _human(nbytes: int) -> str:
    if nbytes < 1024:
        return f"{nbytes} B"
    exp = min(int(math.log(nbytes, 1024)), 3)
    return f"{nbytes / 1024 ** exp:.3g} {['B', 'KiB', 'MiB', 'GiB'][exp]}"
