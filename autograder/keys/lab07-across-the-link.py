"""Lab 07's answer key: the course's own link loads, best placement and bcast crossings.

The instructors' side only (the students' edition leaves autograder/ out): the checks of
:mod:`mpilab.grading.network` ask :mod:`mpilab.grading.keys` for these, and the answers of
the visible test cells' cases are written from them to
``reference/expected/lab07-across-the-link.json`` (``make expected``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence


def reference_loads(schedule: Sequence[dict], hosts: Sequence) -> list[int]:
    """Bytes on the busiest direction of any node's link, per step (steps 1 .. last).

    Parameters
    ----------
    schedule : sequence of dict
        A traced schedule: one ``{"step", "src", "dst", "bytes"}`` per message, steps
        from 1.
    hosts : sequence
        The node of each rank, rank ``r`` at index ``r``.

    Returns
    -------
    list of int
        Per step, the most bytes any link direction carries (a node's "out" adds the
        messages it sends to other nodes, its "in" those it receives); 0 for a step
        inside nodes only.
    """
    steps = max((m["step"] for m in schedule), default=0)
    out = [dict() for _ in range(steps)]
    for m in schedule:
        a, b = hosts[m["src"]], hosts[m["dst"]]
        if a != b:
            load = out[m["step"] - 1]
            load[(a, "out")] = load.get((a, "out"), 0) + m["bytes"]
            load[(b, "in")] = load.get((b, "in"), 0) + m["bytes"]
    return [max(load.values(), default=0) for load in out]


def _ranks(schedule: Sequence[dict]) -> int:
    return 1 + max(max(m["src"], m["dst"]) for m in schedule)


def _placements(p: int, nodes: int):
    """Every way of putting p ranks on `nodes` nodes, p / nodes each (node 0 holds rank 0)."""
    per = p // nodes

    def fill(left: list[int], node: int, hosts: dict):
        if not left:
            yield [hosts[r] for r in range(p)]
            return
        first, rest = left[0], left[1:]
        for others in itertools.combinations(rest, per - 1):
            chosen = {first, *others}
            yield from fill([r for r in left if r not in chosen], node + 1,
                            {**hosts, **{r: node for r in chosen}})

    yield from fill(list(range(p)), 0, {})


def reference_best(schedule: Sequence[dict], nodes: int) -> tuple[int, list[int]]:
    """(least total bytes on the busiest direction, summed over steps; one placement).

    Tries every placement of the schedule's ranks, an equal number on each node, node 0
    holding rank 0.

    Parameters
    ----------
    schedule : sequence of dict
        A traced schedule, as for :func:`reference_loads`.
    nodes : int
        Number of nodes (it must divide the number of ranks).

    Returns
    -------
    cost : int
        The least sum over steps of :func:`reference_loads`, in bytes.
    hosts : list of int
        A placement with that cost: the node of each rank.
    """
    best = None
    for hosts in _placements(_ranks(schedule), nodes):
        cost = sum(reference_loads(schedule, hosts))
        if best is None or cost < best[0]:
            best = (cost, hosts)
    return best


def reference_crossings(schedule: Sequence[dict], hosts: Sequence, root: int
                        ) -> tuple[int, int]:
    """The messages that cross between nodes: the traced flat bcast, and a two-level one.

    Parameters
    ----------
    schedule : sequence of dict
        The flat bcast's messages, ``{"src", "dst", ...}`` each.
    hosts : sequence
        The node of each rank (any labels).
    root : int
        The bcast's root.

    Returns
    -------
    tuple of (int, int)
        Messages of `schedule` between ranks on different nodes, and the two-level
        bcast's: one per node other than the root's.
    """
    flat = sum(1 for m in schedule if hosts[m["src"]] != hosts[m["dst"]])
    leaders_elsewhere = {h for h in hosts if h != hosts[root]}
    return flat, len(leaders_elsewhere)


def placement_costs(schedule: Sequence[dict], nodes: int) -> dict:
    """The least cost, one placement that has it, and the cost of every placement.

    Parameters
    ----------
    schedule, nodes
        As for :func:`reference_best`.

    Returns
    -------
    dict
        ``best`` and ``example`` as :func:`reference_best` gives them, and ``costs``: the
        sum over steps of :func:`reference_loads` of each placement, under the JSON of
        the placement with its nodes numbered in order of first appearance (node 0 holds
        rank 0), as :func:`mpilab.grading.network.canonical` writes a student's.
    """
    import json

    costs = {json.dumps(hosts): sum(reference_loads(schedule, hosts))
             for hosts in _placements(_ranks(schedule), nodes)}
    best, example = reference_best(schedule, nodes)
    return {"best": best, "example": example, "costs": costs}
