"""Record who sends what to whom, and count the steps of a communication algorithm.

A collective algorithm is judged by how many *steps* it takes (rounds of messages that
depend on each other) and by how many bytes each step moves. This module measures both on
a real run, without touching the timings::

    from mpilab import tracing
    out = run_on_ranks(tracing.trace, my_bcast, buf, 0, ranks=4)   # in a lab
    sched = out[0]["schedule"]          # [{"step": 1, "src": 0, "dst": 2, "bytes": 64}, ...]
    tracing.steps(sched)                # 2
    tracing.draw(sched, 4)              # who sends to whom, step by step

Events
    Each rank's messages in program order, as tuples ``(kind, peer, nbytes)`` with
    `kind` ``"send"`` or ``"recv"``. A ``Sendrecv`` records its send, then its receive; a
    nonblocking send is recorded when it is posted, a nonblocking receive when it
    completes. :class:`TracingComm` records them around an mpi4py communicator.

Steps
    :func:`schedule` gives each message a step by Lamport clocks: every rank keeps a
    clock; a send ticks it (``clock += 1``) and stamps the message with it; a receive sets
    ``clock = max(clock, stamp)``. The step of a message is its stamp, i.e. the length of
    the longest chain of messages that ends with it. So a binomial broadcast on 8 ranks
    takes 3 steps, a linear one 7, a ring allgather ``p - 1``, Bruck's ``ceil(log2 p)``.
    The k-th send from ``a`` to ``b`` matches the k-th receive at ``b`` from ``a`` (MPI
    does not let messages between two ranks overtake each other). Sends never wait in
    this model (it counts dependencies, not buffering), so only receives can be stuck.
    A message a rank sends to itself is a local copy: it is matched but takes no step and
    is left out of the schedule.

The package's modules: :mod:`.schedules` (steps from events), :mod:`.recording`
(:class:`TracingComm`, :func:`trace`), :mod:`.requests` (:class:`TracedRequest`, what its
nonblocking calls return) and :mod:`.drawing` (:func:`draw`). Every name is
here as ``tracing.<name>``.
"""

# ruff: noqa: F401 - the names beyond __all__ are the module's API as before the split
from __future__ import annotations

from . import requests
from .drawing import (
    _human,
    draw,
)
from .recording import (
    _UNTRACED,
    TracingComm,
    _nbytes,
    trace,
)
from .requests import _request_class
from .schedules import (
    KINDS,
    _explain_blocked,
    _integer,
    as_table,
    format_schedule,
    schedule,
    senders_by_step,
    steps,
)

__all__ = ["schedule", "steps", "senders_by_step", "format_schedule", "TracingComm",
           "TracedRequest", "trace", "draw"]


def __getattr__(name: str):
    # TracedRequest becomes an MPI.Request subclass on first use (requests._request_class
    # rebinds it there): read it where it lives, so that tracing.TracedRequest is that class
    if name == "TracedRequest":
        return requests.TracedRequest
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
