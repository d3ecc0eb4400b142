"""Lab 07's graded check on node-aware collectives: what crosses the link in a bcast.

The lab's test cell calls::

    from mpilab.grading import hierarchy as H
    H.check_bcast_crossings(bcast_crossings, cases)   # flat binomial vs two-level

A case is ``(hosts, root)``: the node of each rank and the bcast's root. The student's
``bcast_crossings(hosts, root)`` returns ``(flat, two_level)``, the messages that cross
between nodes in the course's binomial bcast over all ranks (lecture 05) and in a
two-level bcast (the root sends to one leader on each other node, each leader sends
inside its node: Open MPI 5's ``han``, lecture 07). The flat count is checked against
the course's own binomial bcast, traced on this machine where the check runs
(:func:`mpilab.network.bcast_schedules`); the two-level count against the rule, which
lecture 07 measured with the library's own counters (one crossing per node other than
the root's, whatever the placement).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Sequence

from mpilab import grading, network
from mpilab.grading import keys
from mpilab.grading.measured import cached
from mpilab.grading.network_model import LAB

__all__ = ["reference_crossings", "traced_bcast", "check_bcast_crossings"]


def reference_crossings(schedule: Sequence[dict], hosts: Sequence, root: int
                        ) -> tuple[int, int]:
    """The messages that cross between nodes in the traced flat bcast and in a two-level
    one: the answer key's (the instructors' autograder/keys/lab07-across-the-link.py,
    :mod:`mpilab.grading.keys`).

    Parameters
    ----------
    schedule : sequence of dict
        The flat bcast's messages.
    hosts : sequence
        The node of each rank.
    root : int
        The bcast's root.

    Returns
    -------
    (int, int)
        The flat and the two-level bcast's messages across.

    Raises
    ------
    mpilab.grading.Ungradable
        Where the key is not (the students' edition).
    """
    return keys.call(LAB, "reference_crossings", schedule, hosts, root)


def traced_bcast(ranks: int, root: int) -> list[dict]:
    """The course's binomial bcast from `root` on `ranks` ranks, traced (once per session).

    Parameters
    ----------
    ranks : int
        Number of ranks.
    root : int
        The root.

    Returns
    -------
    list of dict
        One ``{"step", "src", "dst", "bytes"}`` per message.
    """
    from mpilab import runtime

    name = f"bcast-binomial-{runtime.selected_library()}-{ranks}"
    return cached(name, lambda: {str(r): s for r, s in
                                 network.bcast_schedules(ranks, range(ranks)).items()}
                  )[str(root)]


def _hint(got, want, schedule, hosts, root) -> str:
    flat, two = want
    others = sum(1 for h in hosts if h != hosts[root])
    if got[0] == len(schedule) and flat != len(schedule):
        return ("The flat count is every message of the bcast; only those between ranks on "
                "different nodes cross the link.")
    if got[1] != two:
        nodes = len(set(hosts))
        if got[1] == others != nodes:
            return ("That is one message per rank on another node: in two levels, one "
                    "leader per node receives across the link and passes it on inside its "
                    "node.")
        if got[1] == nodes != others:
            return "The two-level bcast sends no message across to the root's own node."
        return ("In two levels, one leader on each node other than the root's receives "
                "across the link; everything else stays inside a node.")
    if got[0] != flat:
        return ("Binomial tree relative to the root: vr = (rank - root) mod p; in stage k "
                "every vr < 2^k sends to vr + 2^k (when it exists).")
    return "Count the messages whose sender and receiver are on different nodes."


def check_bcast_crossings(bcast_crossings: Callable, cases: Iterable) -> list[tuple]:
    """`bcast_crossings(hosts, root)` returns exactly ``(flat, two_level)`` on each case.

    Parameters
    ----------
    bcast_crossings : callable
        The student's ``bcast_crossings(hosts, root) -> (flat, two_level)``.
    cases : iterable of tuple
        ``(hosts, root)``: the node of each rank and the root.

    Returns
    -------
    list of tuple
        What it returned for each case, as ``(flat, two_level)`` integers.

    Raises
    ------
    mpilab.grading.CheckFailed
        When it returns no pair of counts, or a wrong one (with a hint naming the likely
        slip).
    """
    __tracebackhide__ = True
    out = []
    for hosts, root in cases:
        hosts = list(hosts)
        sched = traced_bcast(len(hosts), root)
        want = tuple(keys.answer(
            LAB, "crossings", (hosts, root),
            lambda key, s=sched, h=hosts, r=root: key.reference_crossings(s, h, r),
            what=f"bcast_crossings for {len(hosts)} ranks on nodes {hosts}, root {root}"))
        got = grading.call_local(bcast_crossings, hosts, root, timeout=10)
        grading.expect(isinstance(got, (list, tuple)) and len(got) == 2,
                       f"bcast_crossings should return a pair (flat, two_level), got "
                       f"{got!r:.60}")
        got = (got[0], got[1])
        where = f"{len(hosts)} ranks on nodes {hosts}, root {root}"
        grading.expect(all(isinstance(x, numbers.Number) for x in got),
                       f"bcast_crossings for {where}: counts are numbers, got {got!r:.60}")
        # counted, so checked exactly (3.0 is 3; 2.9 is not)
        grading.expect(got == want,
                       f"bcast_crossings for {where}: got (flat, two_level) = {got}, "
                       f"expected {want}. {_hint(got, want, sched, hosts, root)}")
        out.append(tuple(int(x) for x in got))
    return out
