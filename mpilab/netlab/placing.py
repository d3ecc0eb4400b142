"""Where an experiment's ranks run: this host or emulated nodes, and the line that says so.

:func:`placed` gives an experiment the launch for its ranks, on this host or on a
:class:`~mpilab.netlab.Fabric` brought up for the run, with what every record of the run
carries about where it ran; :func:`where_line` is a report's line about it. The halo's,
the ping-pong's and the collectives' experiments and their command lines
(``python -m mpilab.bench ...``) all place their ranks this way.
"""

from __future__ import annotations

import contextlib

from .. import runtime
from . import core


@contextlib.contextmanager
def placed(ranks: int, transport: str = "shm", *, nodes: int | None = None,
           link: str = "fast-ethernet", map_by: str = "node"):
    """``with placed(2, nodes=2, link="gige") as (launch, where):`` the launch for
    `ranks` on this host (`nodes` None) or on emulated nodes brought up for the block
    and removed after it.

    Parameters
    ----------
    ranks : int
        MPI ranks to launch.
    transport : str, optional
        The transport between ranks of one node (:data:`mpilab.runtime.TRANSPORTS`,
        default ``"shm"``).
    nodes : int or None, optional
        Emulated nodes to spread the ranks over (None, the default: this host).
    link : str, optional
        The emulated nodes' link profile (:data:`mpilab.netlab.PROFILES`; with `nodes`).
    map_by : str, optional
        ``"node"`` (round-robin, the default) or ``"slot"`` (node after node; with
        `nodes`).

    Yields
    ------
    tuple of (mpilab.runtime.Launch, dict)
        The launch, and `where`: what every record of the run carries about it,
        ``nodes``, ``ranks_per_node``, ``link``, ``map_by``, ``shaping`` (what the
        emulation applied and left out), ``emulated``.
    """
    if nodes is None:
        launch = runtime.launch(ranks, transport)
        yield launch, {"nodes": 1, "ranks_per_node": ranks, "link": "this host",
                       "map_by": None, "shaping": None, "emulated": False}
        return
    with core.fabric(nodes, link) as fab:
        launch = fab.launch(ranks, map_by=map_by, transport=transport)
        # what Fabric.placement records, less the fabric's id (gone after the run)
        yield launch, {k: v for k, v in launch.placement.items() if k != "fabric"}


def where_line(settings: dict) -> str:
    """A report's line about emulated nodes ('' on this host).

    Parameters
    ----------
    settings : dict
        A run's settings, with what :func:`placed` yielded as `where` in them.

    Returns
    -------
    str
        Nodes, link, what the emulation applied and left out, the node of each rank, in
        two lines ending in a newline; ``""`` for a run on this host.
    """
    if not settings.get("emulated"):
        return ""
    n, sh = settings["nodes"], settings["shaping"]
    return (f"# on {n} emulated node{'s' * (n != 1)} joined by {settings['link']} "
            f"({'; '.join(sh['applied'])}), map-by {settings['map_by']}: node of each rank "
            f"{settings['node_of_rank']}\n# not emulated: " + "; ".join(sh["not_emulated"])
            + "\n")
