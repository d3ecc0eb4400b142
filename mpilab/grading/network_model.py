"""Lab 07's model and its data: the references, the traced schedules, the link measured
where the check runs, and the graded prediction across it (:data:`PREDICT`). The answers
to the lab's graded functions (the loads, the best placement) are the instructors' answer
key's (:mod:`mpilab.grading.keys`): what is here is the model as the lab states it.

The checks the lab's test cells call are :mod:`mpilab.grading.network`'s; this module
holds what they compare with. The model (a model, not a measurement): a message between
two nodes crosses the sending node's link outwards and the receiving node's link
inwards; in one step of a collective, each direction of each link carries the bytes of
every message that uses it, one after the other; the step lasts as long as its busiest
direction, ``α + load / β``; steps follow one another; messages inside a node cost
nothing next to the link.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mpilab import network
from mpilab.grading import keys
from mpilab.grading.measured import cached
from mpilab.grading.prediction import Part, Prediction

__all__ = ["LAB", "PREDICTION_TOLERANCE", "BIG_BYTES", "reference_fit", "reference_loads",
           "reference_predict_ms", "reference_best", "placement_problem", "link_now",
           "traced", "ring_now", "PREDICT"]

LAB = "lab07-across-the-link"
#: The measured ring (fastest repetition) may take this many times the prediction: the
#: model is a lower bound (the link idles while ranks match messages and start the next
#: step), so below 1 only noise, above it the handshakes a step waits for.
PREDICTION_TOLERANCE = (0.8, 1.6)
BIG_BYTES = 131072  # "large": ten times the Fast Ethernet bucket, past the eager limit


# ---------------------------------------------------------------------------------------
# the references


def reference_fit(n_bytes: Sequence[float], t_us: Sequence[float],
                  big_bytes: float) -> tuple[float, float]:
    """(α µs, β MB/s): α the time of the smallest message, β from a straight line
    through the messages of at least `big_bytes` (ordinary least squares).

    Parameters
    ----------
    n_bytes : sequence of float
        Message sizes of a ping-pong, in bytes.
    t_us : sequence of float
        Their one-way times, in µs.
    big_bytes : float
        The least size, in bytes, of the messages β is fitted on.

    Returns
    -------
    alpha_us : float
        The time of the smallest message, in µs.
    beta_MBps : float
        1 / slope of the line through the large messages, in MB/s.

    Raises
    ------
    ValueError
        When fewer than two messages are of `big_bytes` or more.
    """
    n = np.asarray(n_bytes, dtype=float)
    t = np.asarray(t_us, dtype=float)
    big = n >= big_bytes
    if big.sum() < 2:
        raise ValueError(f"need at least two messages of {big_bytes:g} B or more")
    slope, _ = np.polyfit(n[big], t[big], 1)
    return float(t[np.argmin(n)]), float(1 / slope)


def reference_loads(schedule: Sequence[dict], hosts: Sequence) -> list[int]:
    """Bytes on the busiest direction of any node's link, per step: the answer key's
    (the instructors' autograder/keys/lab07-across-the-link.py, :mod:`mpilab.grading.keys`).

    Parameters
    ----------
    schedule : sequence of dict
        A traced schedule: one ``{"step", "src", "dst", "bytes"}`` per message.
    hosts : sequence
        The node of each rank.

    Returns
    -------
    list of int
        Per step, the most bytes any direction of a node's link carries.

    Raises
    ------
    mpilab.grading.Ungradable
        Where the key is not (the students' edition).
    """
    return keys.call(LAB, "reference_loads", schedule, hosts)


def reference_best(schedule: Sequence[dict], nodes: int) -> tuple[int, list[int]]:
    """The least total of :func:`reference_loads` over the placements of equal ranks per
    node, and one placement that has it: the answer key's (:mod:`mpilab.grading.keys`).

    Parameters
    ----------
    schedule : sequence of dict
        A traced schedule.
    nodes : int
        Number of nodes (it divides the number of ranks).

    Returns
    -------
    (int, list of int)
        The cost in bytes, and the node of each rank in a placement with it.

    Raises
    ------
    mpilab.grading.Ungradable
        Where the key is not (the students' edition).
    """
    return keys.call(LAB, "reference_best", schedule, nodes)


def reference_predict_ms(schedule: Sequence[dict], hosts: Sequence, alpha_us: float,
                         beta_MBps: float) -> float:
    """Σ over the steps with traffic on a link of α + load / β, in ms.

    Parameters
    ----------
    schedule, hosts : sequence
        As for :func:`reference_loads`: the traced schedule and each rank's node.
    alpha_us : float
        The link's latency α, in µs.
    beta_MBps : float
        The link's bandwidth β, in MB/s.

    Returns
    -------
    float
        The predicted time of the collective, in ms.
    """
    return sum(alpha_us + load / beta_MBps
               for load in reference_loads(schedule, hosts) if load) / 1e3


def placement_problem(hosts, ranks: int, nodes: int) -> str | None:
    """What is wrong with `hosts` as a placement of p ranks on `nodes` nodes, or None.

    Parameters
    ----------
    hosts : object
        What the student's function returned: it should be a list of ints, the node of
        each rank.
    ranks : int
        Number of ranks.
    nodes : int
        Number of nodes, each to hold ``p // nodes`` ranks.

    Returns
    -------
    str or None
        What is wrong, in words, or None when it is a valid placement.
    """
    if not isinstance(hosts, (list, tuple)):
        return f"return a list with the node of each rank, not {type(hosts).__name__}"
    if len(hosts) != ranks:
        return f"the placement has {len(hosts)} entries for {ranks} ranks"
    if any(type(h) is not int or not 0 <= h < nodes for h in hosts):
        return f"nodes are numbered 0 .. {nodes - 1}; got {list(hosts)}"
    counts = [list(hosts).count(k) for k in range(nodes)]
    if len(set(counts)) != 1:
        return (f"every node holds {ranks // nodes} ranks; the placement {list(hosts)} puts "
                f"{counts} on nodes 0 .. {nodes - 1}")
    return None


# ---------------------------------------------------------------------------------------
# data: traced schedules and the link, computed where the check runs


def traced(alg: str, ranks: int, block: int) -> list[dict]:
    """The course's allgather `alg` traced on `ranks` ranks (once per session).

    Parameters
    ----------
    alg : str
        An allgather of :mod:`mpilab.collectives` admissible on `ranks` ranks, e.g.
        "ring".
    ranks : int
        Number of ranks.
    block : int
        Bytes per rank's block.

    Returns
    -------
    list of dict
        One ``{"step", "src", "dst", "bytes"}`` per message
        (:func:`mpilab.network.schedules`).
    """
    from mpilab import runtime

    name = f"schedules-{runtime.selected_library()}-{ranks}-{block}"
    return cached(name, lambda: network.schedules(ranks, block))[alg]


def link_now(link: str = "fast-ethernet") -> dict:
    """The link measured on fresh emulated nodes (once per session), else the reference.

    Parameters
    ----------
    link : str, optional
        The emulated link to measure (default "fast-ethernet"). Where emulated nodes
        cannot be made the reference machine's Fast Ethernet measurement is returned,
        whatever `link` says.

    Returns
    -------
    dict
        :func:`mpilab.network.measure`'s record (``pingpong``, ``ring``, ``block_bytes``,
        ``link`` ...), or :func:`mpilab.network.reference`'s; ``source`` says which, in
        words.
    """
    from mpilab import netlab

    if netlab.available() is not None:
        return network.reference()
    doc = cached(f"link-{link}", lambda: network.measure(
        link, sizes=(8, 64, 1024, 65536, 131072, 262144, 524288, 1 << 20), reps=5),
        measures=True)
    return {**doc, "source": f"measured on this machine at {doc['started'][11:16]}"}


def _series(link: dict) -> tuple[list[int], list[float]]:
    recs = link["pingpong"]
    return [r["size_bytes"] for r in recs], [r["t_us_min"] for r in recs]



def ring_now(ranks: int = 4) -> dict:
    """The link and the course's ring across it, as :data:`PREDICT` grades them: the
    link measured now (:func:`link_now`), whatever the notebook's cluster.

    Parameters
    ----------
    ranks : int, optional
        Ranks of the notebook's cluster; unused (the ring runs on the emulated nodes'
        own 4 ranks).

    Returns
    -------
    dict
        :func:`link_now`'s record.
    """
    return link_now()


def _fitted(link: dict) -> tuple[float, float]:
    """α (µs) and β (MB/s) of `link`'s ping-pong, fitted as the lab's ``fit_link`` must."""
    return reference_fit(*_series(link), BIG_BYTES)


def _ring_parts(link: dict) -> list[Part]:
    """The course's ring allgather on each placement measured across `link`, predicted
    from the link's own α and β."""
    a, b = _fitted(link)
    parts = []
    for map_by, rec in link["ring"].items():
        hosts = list(rec["node_of_rank"])
        parts.append(Part(
            what=(f"the ring allgather, {network.PLACEMENTS[map_by]}, "
                  f"{link['block_bytes']:,} B per rank across {link['link']} "
                  f"({link['source']})"),
            args=(traced("ring", len(hosts), link["block_bytes"]), hosts, a, b),
            measured_us=rec["t_us_min"] / 1e3, predicted=f"{map_by}_predicted_ms",
            ratio=f"{map_by}_ratio"))
    return parts


def _related(args: tuple, got: Any) -> list[tuple[tuple, float, str]]:
    """What any model of the lab's shape must predict beside `got`: twice α and half β
    double the time; twice α adds α once per step that crosses a link (the steps with a
    load: the ring's messages cross in every step on both placements). The measured
    ring alone cannot tell a model without α from the right one (α is microseconds
    beside tens of milliseconds); the second relation can."""
    schedule, hosts, a, b = args
    crossing = len({m["step"] for m in schedule if hosts[m["src"]] != hosts[m["dst"]]})
    return [((schedule, hosts, 2 * a, b / 2), 2 * float(got),
             "twice α and half β must double a time made of α and load / β: the prediction "
             "must come from the α and β it is given, not from numbers of the reference "
             "link or a measurement"),
            ((schedule, hosts, 2 * a, b), float(got) + crossing * a / 1e3,
             f"twice α must add α once for each of the {crossing} steps that cross a link, "
             f"{crossing} × {a:.1f} µs = {crossing * a / 1e3:.4g} ms (a prediction in µs would "
             f"add {crossing * a:.4g}): every step with a load pays the latency α")]


#: Lab 07's graded prediction: ``predict_ms(schedule, hosts, alpha_us, beta_MBps)`` for
#: the ring measured across the link on block and cyclic placements (times in ms; the
#: parts' ``measured_us`` hold ms here), from α and β fitted to the same run's ping-pong.
PREDICT = Prediction(
    name="predict_ms", now=ring_now, parts=_ring_parts,
    model=lambda link: ("α = {:.1f} µs, β = {:.2f} MB/s, fitted to the link's ping-pong "
                        "in the same run").format(*_fitted(link)),
    tolerance=PREDICTION_TOLERANCE, related=_related, unit="ms")
