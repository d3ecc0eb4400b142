"""Steps from events: each rank's messages matched and numbered by Lamport clocks (the
package's docstring says how), and the schedule printed."""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

KINDS = ("send", "recv")


# ---------------------------------------------------------------------------------------
# schedule from events


def _integer(x: Any) -> int | None:
    """`x` as an int when it is an integer (Python or NumPy, not bool), else None."""
    if isinstance(x, bool):
        return None
    try:
        return operator.index(x)
    except TypeError:
        return None


def as_table(events_by_rank: Sequence | Mapping) -> list[list[tuple[str, int, int]]]:
    """Events by rank (a list, or a mapping rank -> events) as a list indexed by rank.

    Parameters
    ----------
    events_by_rank : sequence or mapping
        Each rank's ``(kind, peer, nbytes)`` events, in program order: a list indexed
        by rank, or a mapping whose keys are exactly the ranks ``0 .. p-1``.

    Returns
    -------
    list of list of tuple
        ``table[r]`` is rank r's events as ``(str, int, int)`` (NumPy integers made
        Python ints).

    Raises
    ------
    ValueError
        Keys that are not the ranks ``0 .. p-1``; an event that is not a triple, whose
        kind is not ``"send"`` or ``"recv"``, whose peer is not a rank, or whose byte
        count is negative (the message names the rank and the event).
    """
    if isinstance(events_by_rank, Mapping):
        p = len(events_by_rank)
        if sorted(events_by_rank) != list(range(p)):
            raise ValueError(f"events_by_rank must have ranks 0..{p - 1} as keys, got "
                             f"{sorted(events_by_rank)!r}")
        rows = [events_by_rank[r] for r in range(p)]
    else:
        rows = list(events_by_rank)
    p = len(rows)
    table = []
    for r, row in enumerate(rows):
        evs = []
        for i, ev in enumerate(row):
            try:
                kind, peer, nbytes = ev
            except (TypeError, ValueError):
                raise ValueError(f"rank {r} event {i} is {ev!r}, expected a tuple "
                                 "(kind, peer, nbytes)") from None
            if kind not in KINDS:
                raise ValueError(f"rank {r} event {i} {ev!r}: kind must be 'send' or 'recv'")
            peer, nbytes = _integer(peer), _integer(nbytes)  # NumPy integers too
            if peer is None or not 0 <= peer < p:
                raise ValueError(f"rank {r} event {i} {ev!r}: peer must be a rank in "
                                 f"0..{p - 1}")
            if nbytes is None or nbytes < 0:
                raise ValueError(f"rank {r} event {i} {ev!r}: nbytes must be an int >= 0")
            evs.append((str(kind), peer, nbytes))
        table.append(evs)
    return table


def schedule(events_by_rank: Sequence | Mapping) -> list[dict[str, int]]:
    """The messages of a run with the step each belongs to.

    Parameters
    ----------
    events_by_rank : sequence or mapping
        ``events_by_rank[r]`` is rank r's list of ``(kind, peer, nbytes)`` in program
        order, `kind` ``"send"`` or ``"recv"``.

    Returns
    -------
    list of dict
        One ``{"step", "src", "dst", "bytes"}`` per message between two different ranks,
        sorted by (step, src, dst). Steps start at 1.

    Raises
    ------
    ValueError
        A malformed event; a send nobody receives; a receive of a message nobody sends;
        ranks that wait for each other in a cycle (a deadlock). The message names the
        rank and the event.
    """
    table = as_table(events_by_rank)
    p = len(table)
    clock = [0] * p
    pos = [0] * p
    # (src, dst) -> queue of (stamp, nbytes, event index at src) sent but not yet received
    inflight: dict[tuple[int, int], deque] = {}
    out = []
    progress = True
    while progress:
        progress = False
        for r in range(p):
            evs = table[r]
            while pos[r] < len(evs):
                kind, peer, nbytes = evs[pos[r]]
                if kind == "send":
                    if peer != r:
                        clock[r] += 1
                    inflight.setdefault((r, peer), deque()).append((clock[r], nbytes, pos[r]))
                else:
                    q = inflight.get((peer, r))
                    if not q:
                        break  # blocked until `peer` sends
                    stamp, sent, _ = q.popleft()
                    if peer != r:
                        clock[r] = max(clock[r], stamp)
                        out.append({"step": stamp, "src": peer, "dst": r, "bytes": sent})
                pos[r] += 1
                progress = True
    blocked = [r for r in range(p) if pos[r] < len(table[r])]
    if blocked:
        raise ValueError(_explain_blocked(table, pos, blocked))
    for (src, dst), q in sorted(inflight.items()):
        if q:
            _stamp, nbytes, i = q[0]
            k = sum(1 for kind, peer, _ in table[src][:i] if kind == "send" and peer == dst)
            raise ValueError(f"rank {src} event {i} ('send', {dst}, {nbytes}): send number "
                             f"{k + 1} from rank {src} to rank {dst} is never received (rank "
                             f"{dst} posts only {k} receive{'s' * (k != 1)} from rank {src})")
    out.sort(key=lambda m: (m["step"], m["src"], m["dst"]))
    return out


def _explain_blocked(table, pos, blocked) -> str:
    def ev(r):
        i = pos[r]
        return f"rank {r} event {i} {table[r][i]!r}"

    waits = {r: table[r][pos[r]][1] for r in blocked}
    # follow "r waits for waits[r]" from the first blocked rank: a rank that is done, or a
    # rank that will still send, ends the chain; coming back to a rank is a cycle
    for start in blocked:
        seen = [start]
        r = waits[start]
        while r in waits and r not in seen:
            seen.append(r)
            r = waits[r]
        if r in seen:
            cyc = seen[seen.index(r):]
            chain = ", ".join(f"{ev(a)} waits for rank {waits[a]}" for a in cyc)
            return (f"deadlock: ranks {' -> '.join(map(str, cyc + [r]))} wait for each other "
                    f"in a cycle: {chain}")
    r = blocked[0]
    peer = waits[r]
    k = sum(1 for kind, q, _ in table[r][:pos[r]] if kind == "recv" and q == peer)
    sent = sum(1 for kind, q, _ in table[peer] if kind == "send" and q == r)
    return (f"{ev(r)}: receive number {k + 1} from rank {peer} is never matched: rank {peer} "
            f"sends rank {r} only {sent} message{'s' * (sent != 1)}")


def steps(sched: Sequence[Mapping]) -> int:
    """Number of steps of a schedule (its largest step; 0 when nothing was sent).

    Parameters
    ----------
    sched : sequence of mapping
        A schedule, as :func:`schedule` returns it.

    Returns
    -------
    int
        The largest ``"step"``; 0 for an empty schedule.
    """
    return max((int(m["step"]) for m in sched), default=0)


def senders_by_step(sched: Sequence[Mapping]) -> dict[int, list[tuple[int, int]]]:
    """``{step: [(src, dst), ...]}``: which rank sent to which in each step.

    Parameters
    ----------
    sched : sequence of mapping
        A schedule (:func:`schedule`'s ``{"step", "src", "dst", "bytes"}`` per message).

    Returns
    -------
    dict of int to list of tuple
        Step -> the ``(src, dst)`` rank pairs of its messages, in the schedule's order;
        steps without messages are absent.
    """
    out: dict[int, list[tuple[int, int]]] = {}
    for m in sched:
        out.setdefault(int(m["step"]), []).append((int(m["src"]), int(m["dst"])))
    return out


def format_schedule(sched: Sequence[Mapping], limit: int = 12) -> str:
    """One line per step: ``step 1: 0->4 (64 B), 1->5 (64 B)`` (for messages to students).

    Parameters
    ----------
    sched : sequence of mapping
        A schedule, as :func:`schedule` returns it.
    limit : int, optional
        Most steps shown (default 12); a last line counts the rest.

    Returns
    -------
    str
        The lines, each indented by two spaces; ``"  (no messages)"`` for an empty
        schedule.
    """
    by: dict[int, list[str]] = {}
    for m in sched:
        by.setdefault(int(m["step"]), []).append(f"{m['src']}->{m['dst']} ({m['bytes']} B)")
    lines = [f"  step {s}: " + ", ".join(v) for s, v in sorted(by.items())]
    if len(lines) > limit:
        lines = lines[:limit] + [f"  ... and {len(lines) - limit} more steps"]
    return "\n".join(lines) if lines else "  (no messages)"
