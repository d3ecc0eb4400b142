"""Figure of lecture 01's message matching: a message's one-way time against the entries
queued ahead of it, measured, beside the least-squares line (a model, labelled as one).

Like :mod:`mpilab.plots`, the function returns a :class:`matplotlib.figure.Figure` that is
not registered with pyplot, and takes plain records (:func:`mpilab.pingpong.run_matching`),
so it draws what the kernel measured without running MPI.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

__all__ = ["queue_depth"]

_STYLE = {"none": "-", "source": "--"}
_COLOUR = {"posted": "C0", "unexpected": "C1"}


def queue_depth(records: list[dict], *, fit_depths: tuple[int, int] = (256, 1024),
                title: str | None = None) -> Figure:
    """One-way time (fastest repetition) against queued entries, one line per queue and
    wildcard, each with its least-squares line fitted to the depths in `fit_depths`.

    Parameters
    ----------
    records : list of dict
        :func:`mpilab.pingpong.run_matching`'s records; those of the late receiver are
        left out.
    fit_depths : (int, int), optional
        Fit each line to the depths from the first to the second, both included (default
        256 to 1024: below a few hundred entries the walk hides in the message's own
        cost); the line is drawn over every depth, so where the measurement leaves it
        shows.
    title : str, optional
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ValueError
        No record of a posted or unexpected queue, or a case with fewer than two depths
        in `fit_depths`.
    """
    from ..pingpong.matching import QUEUES, fit_search

    qs = [r for r in records if r.get("queue") in QUEUES]
    if not qs:
        raise ValueError("no record of a posted or unexpected queue to draw")
    lo, hi = fit_depths
    fig = Figure(figsize=(7.5, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for q, w in sorted({(r["queue"], r["wildcard"]) for r in qs}):
        pts = sorted((r["depth"], r["t_us_min"]) for r in qs
                     if r["queue"] == q and r["wildcard"] == w)
        d = np.array([p[0] for p in pts], dtype=float)
        t = np.array([p[1] for p in pts])
        use = (d >= lo) & (d <= hi)
        base, cost = fit_search(d[use], t[use])
        name = f"{q}, {'MPI_ANY_SOURCE' if w == 'source' else 'no wildcard'}"
        colour = _COLOUR.get(q, "C2")
        ax.plot(d, t, _STYLE.get(w, "-"), marker="o", color=colour,
                label=f"{name}: model {cost:.2f} ns per entry")
        ax.plot(d, base + d * cost / 1e3, ":", color=colour, alpha=0.7, label="_model")
    ax.set_xlabel("entries queued ahead of each message (per rank)")
    ax.set_ylabel("one-way time (µs), fastest repetition")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(title or f"Measured (markers) and a model: least-squares lines over "
                          f"{lo}-{hi} entries (dotted)", fontsize=10)
    return fig
