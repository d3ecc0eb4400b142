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
"""

from __future__ import annotations

import math
import operator
import pickle
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["schedule", "steps", "senders_by_step", "format_schedule", "TracingComm",
           "TracedRequest", "trace", "draw"]

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
    """Events by rank (a list, or a mapping rank -> events) as a list indexed by rank."""
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
    """Number of steps of a schedule (its largest step; 0 when nothing was sent)."""
    return max((int(m["step"]) for m in sched), default=0)


def senders_by_step(sched: Sequence[Mapping]) -> dict[int, list[tuple[int, int]]]:
    """``{step: [(src, dst), ...]}``: which rank sent to which in each step."""
    out: dict[int, list[tuple[int, int]]] = {}
    for m in sched:
        out.setdefault(int(m["step"]), []).append((int(m["src"]), int(m["dst"])))
    return out


def format_schedule(sched: Sequence[Mapping], limit: int = 12) -> str:
    """One line per step: ``step 1: 0->4 (64 B), 1->5 (64 B)`` (for messages to students)."""
    by: dict[int, list[str]] = {}
    for m in sched:
        by.setdefault(int(m["step"]), []).append(f"{m['src']}->{m['dst']} ({m['bytes']} B)")
    lines = [f"  step {s}: " + ", ".join(v) for s, v in sorted(by.items())]
    if len(lines) > limit:
        lines = lines[:limit] + [f"  ... and {len(lines) - limit} more steps"]
    return "\n".join(lines) if lines else "  (no messages)"


# ---------------------------------------------------------------------------------------
# recording around an mpi4py communicator


def _nbytes(spec: Any) -> int:
    """Bytes an mpi4py buffer specification describes (``arr``, ``[arr, MPI.INT]``, ...)."""
    if spec is None:
        return 0
    if isinstance(spec, (list, tuple)):
        if not spec:
            return 0
        data = spec[0]
        count = next((x for x in spec[1:] if isinstance(x, int) and not isinstance(x, bool)),
                     None)
        dtype = next((x for x in spec[1:] if hasattr(x, "Get_size")), None)
        if count is not None and dtype is not None:
            return int(count) * int(dtype.Get_size())
        return _nbytes(data)
    try:
        return int(memoryview(spec).nbytes)
    except TypeError:
        return int(getattr(spec, "nbytes", 0) or 0)


class TracedRequest:
    """Base of the requests :class:`TracingComm` returns (made an ``MPI.Request`` lazily)."""


def _request_class():
    from mpi4py import MPI

    global TracedRequest
    if isinstance(TracedRequest, type) and issubclass(TracedRequest, MPI.Request):
        return TracedRequest

    class TracedRequest(MPI.Request):  # noqa: F811 - the real class, once MPI is there
        """An ``MPI.Request`` that records its receive when it completes.

        ``Wait``/``wait``/``Test``/``test`` and ``TracedRequest.Waitall`` record at once;
        a plain ``MPI.Request.Waitall`` also works: the receive is then recorded at the
        communicator's next call (or when its events are read), still in program order.
        """

        def _done(self, status=None):
            tc = getattr(self, "_tc", None)
            if tc is not None:
                self._tc = None
                tc._completed(self, status)

        def Wait(self, status=None):  # noqa: N802 - mpi4py's name
            st = status if status is not None else MPI.Status()
            out = MPI.Request.Wait(self, st)
            self._done(st)
            return out

        def wait(self, status=None):
            st = status if status is not None else MPI.Status()
            out = MPI.Request.wait(self, st)
            self._done(st)
            return out

        def Test(self, status=None):  # noqa: N802
            st = status if status is not None else MPI.Status()
            flag = MPI.Request.Test(self, st)
            if flag:
                self._done(st)
            return flag

        def test(self, status=None):
            st = status if status is not None else MPI.Status()
            flag, obj = MPI.Request.test(self, st)
            if flag:
                self._done(st)
            return flag, obj

        @staticmethod
        def _all(wait, requests, statuses):
            """Wait with `wait` (MPI.Request.Waitall or waitall), then record receives."""
            requests = list(requests)
            sts = [MPI.Status() for _ in requests]
            out = wait(requests, sts)
            for req, st in zip(requests, sts, strict=True):
                if isinstance(req, TracedRequest):
                    req._done(st)
            if statuses is not None:
                statuses[:] = sts
            return out

        @classmethod
        def Waitall(cls, requests, statuses=None):  # noqa: N802
            return cls._all(MPI.Request.Waitall, requests, statuses)

        @classmethod
        def waitall(cls, requests, statuses=None):
            return cls._all(MPI.Request.waitall, requests, statuses)

    TracedRequest.__module__ = __name__
    TracedRequest.__qualname__ = "TracedRequest"
    return TracedRequest


# collectives and calls whose messages the tracer cannot see: used, they are listed
_UNTRACED = ("Bcast", "bcast", "Reduce", "reduce", "Allreduce", "allreduce", "Gather",
             "gather", "Gatherv", "Allgather", "allgather", "Allgatherv", "Scatter", "scatter",
             "Scatterv", "Alltoall", "alltoall", "Alltoallv", "Alltoallw", "Reduce_scatter",
             "Reduce_scatter_block", "Scan", "scan", "Exscan", "exscan", "Ibcast", "Ireduce",
             "Iallreduce", "Igather", "Iallgather", "Iscatter", "Ialltoall", "Barrier",
             "barrier", "Ibarrier", "Send_init", "Recv_init", "Bsend", "Ibsend", "Rsend",
             "Irsend", "Isendrecv", "Mprobe", "mprobe", "Neighbor_allgather",
             "Neighbor_alltoall", "Put", "Get", "Accumulate")


class TracingComm:
    """An mpi4py communicator that records the point-to-point messages of this rank.

    Wraps ``Send``/``Ssend``/``Isend``/``Issend``, ``Recv``/``Irecv``, ``Sendrecv``,
    ``Sendrecv_replace`` and the lowercase (pickle) ``send``/``recv``/``sendrecv``/
    ``isend``/``irecv``; everything else is the wrapped communicator's. Collectives work
    but their messages are invisible here: their names are listed in
    :attr:`untraced`, so a grader can tell a hand-written broadcast from ``comm.Bcast``.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator to wrap.

    Attributes
    ----------
    events : list of tuple
        ``(kind, peer, nbytes)`` of this rank, in program order (a copy).
    untraced : list of str
        Names of calls made whose messages could not be recorded (collectives, ...).
    """

    def __init__(self, comm: Any):
        from mpi4py import MPI

        self._comm = comm
        self._events: list[tuple[str, int, int]] = []
        self._untraced: list[str] = []
        self._pending: list[Any] = []  # traced receive requests not seen complete yet
        self._req = _request_class()
        self._null = MPI.PROC_NULL
        self._MPI = MPI

    # -- bookkeeping ---------------------------------------------------------------------
    def _flush(self) -> None:
        """Record receives completed by a plain ``MPI.Request.Waitall`` (handle now null)."""
        if self._pending:
            for req in list(self._pending):
                if req == self._MPI.REQUEST_NULL:
                    req._done(None)

    def _send(self, dest: int, nbytes: int) -> None:
        self._flush()
        if dest != self._null:
            self._events.append(("send", int(dest), int(nbytes)))

    def _recv(self, status: Any, source: int, nbytes: int | None = None) -> None:
        src = source
        n = nbytes
        if status is not None:
            src = status.Get_source()
            n = status.Get_count(self._MPI.BYTE)
        if src == self._null or src < 0:
            return
        self._events.append(("recv", int(src), int(max(n or 0, 0))))

    def _completed(self, req: Any, status: Any) -> None:
        if req in self._pending:
            self._pending.remove(req)
        self._recv(status, req._source, req._nbytes)

    def _wrap(self, req: Any, source: int | None = None, nbytes: int = 0) -> Any:
        traced = self._req(req)
        traced._keep = req  # keeps mpi4py's reference to the buffer alive
        if source is not None and source != self._null:
            traced._tc = self
            traced._source = source
            traced._nbytes = nbytes
            self._pending.append(traced)
        return traced

    @property
    def events(self) -> list[tuple[str, int, int]]:
        self._flush()
        return list(self._events)

    @property
    def untraced(self) -> list[str]:
        return list(self._untraced)

    # -- identity ------------------------------------------------------------------------
    def Get_rank(self) -> int:  # noqa: N802 - mpi4py's names
        return self._comm.Get_rank()

    def Get_size(self) -> int:  # noqa: N802
        return self._comm.Get_size()

    @property
    def rank(self) -> int:
        return self._comm.Get_rank()

    @property
    def size(self) -> int:
        return self._comm.Get_size()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._comm, name)
        if name in _UNTRACED:
            self._flush()
            self._untraced.append(name)
        return attr

    def __repr__(self) -> str:
        return f"<TracingComm rank {self.rank} of {self.size}: {len(self._events)} events>"

    # -- buffers (uppercase) -------------------------------------------------------------
    def Send(self, buf, dest, tag=0):  # noqa: N802
        self._send(dest, _nbytes(buf))
        return self._comm.Send(buf, dest, tag)

    def Ssend(self, buf, dest, tag=0):  # noqa: N802
        self._send(dest, _nbytes(buf))
        return self._comm.Ssend(buf, dest, tag)

    def Recv(self, buf, source=-1, tag=-1, status=None):  # noqa: N802 - -1: ANY_*
        self._flush()
        st = status if status is not None else self._MPI.Status()
        out = self._comm.Recv(buf, source, tag, st)
        self._recv(st, source)
        return out

    def Sendrecv(self, sendbuf, dest, sendtag=0, recvbuf=None, source=-1, recvtag=-1,  # noqa: N802
                 status=None):
        self._send(dest, _nbytes(sendbuf))
        st = status if status is not None else self._MPI.Status()
        out = self._comm.Sendrecv(sendbuf, dest, sendtag, recvbuf, source, recvtag, st)
        self._recv(st, source)
        return out

    def Sendrecv_replace(self, buf, dest, sendtag=0, source=-1, recvtag=-1,  # noqa: N802
                         status=None):
        self._send(dest, _nbytes(buf))
        st = status if status is not None else self._MPI.Status()
        out = self._comm.Sendrecv_replace(buf, dest, sendtag, source, recvtag, st)
        self._recv(st, source)
        return out

    def Isend(self, buf, dest, tag=0):  # noqa: N802
        self._send(dest, _nbytes(buf))
        return self._wrap(self._comm.Isend(buf, dest, tag))

    def Issend(self, buf, dest, tag=0):  # noqa: N802
        self._send(dest, _nbytes(buf))
        return self._wrap(self._comm.Issend(buf, dest, tag))

    def Irecv(self, buf, source=-1, tag=-1):  # noqa: N802
        self._flush()
        return self._wrap(self._comm.Irecv(buf, source, tag), source, _nbytes(buf))

    # -- objects (lowercase, pickled) ----------------------------------------------------
    def _pickled(self, obj) -> int:
        return len(self._MPI.pickle.dumps(obj)) if hasattr(self._MPI, "pickle") else len(
            pickle.dumps(obj, pickle.HIGHEST_PROTOCOL))

    def send(self, obj, dest, tag=0):
        self._send(dest, self._pickled(obj))
        return self._comm.send(obj, dest, tag)

    def ssend(self, obj, dest, tag=0):
        self._send(dest, self._pickled(obj))
        return self._comm.ssend(obj, dest, tag)

    def recv(self, buf=None, source=-1, tag=-1, status=None):
        self._flush()
        st = status if status is not None else self._MPI.Status()
        out = self._comm.recv(buf, source, tag, st)
        self._recv(st, source)
        return out

    def sendrecv(self, sendobj, dest, sendtag=0, recvbuf=None, source=-1, recvtag=-1,
                 status=None):
        self._send(dest, self._pickled(sendobj))
        st = status if status is not None else self._MPI.Status()
        out = self._comm.sendrecv(sendobj, dest, sendtag, recvbuf, source, recvtag, st)
        self._recv(st, source)
        return out

    def isend(self, obj, dest, tag=0):
        self._send(dest, self._pickled(obj))
        return self._wrap(self._comm.isend(obj, dest, tag))

    def irecv(self, buf=None, source=-1, tag=-1):
        self._flush()
        return self._wrap(self._comm.irecv(buf, source, tag), source, 0)


# ---------------------------------------------------------------------------------------
# one call on every rank, traced


def trace(comm: Any, func: Callable, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Run ``func(TracingComm(comm), *args)`` on every rank of `comm`; gather the schedule.

    Collective: every rank of `comm` must call it. Made for grading harnesses:
    ``run_on_ranks(trace, harness, student_function, ...)`` runs
    ``harness(tracing_comm, student_function, ...)`` on every rank.

    Returns
    -------
    dict
        Plain data, the same schedule on every rank: ``"result"`` (what `func` returned on
        this rank), ``"schedule"`` (:func:`schedule` of all ranks' events, or ``None``),
        ``"steps"``, ``"error"`` (why there is no schedule, else ``None``), ``"events"``
        (all ranks' events) and ``"untraced"`` (``[(rank, call name), ...]`` of calls whose
        messages the tracer cannot see, e.g. ``comm.Bcast``).
    """
    tc = TracingComm(comm)
    result = func(tc, *args, **kwargs)
    mine = [(str(k), int(p), int(n)) for k, p, n in tc.events]
    every = comm.allgather((mine, [str(n) for n in tc.untraced]))
    events = [e for e, _ in every]
    untraced = [(r, n) for r, (_, names) in enumerate(every) for n in names]
    try:
        sched, error = schedule(events), None
    except ValueError as exc:
        sched, error = None, str(exc)
    return {"result": result, "schedule": sched, "steps": None if sched is None else
            steps(sched), "error": error, "events": events, "untraced": untraced}


# ---------------------------------------------------------------------------------------
# picture


def draw(sched: Sequence[Mapping], p: int, ax: Any = None, *, labels: bool = True,
         title: str | None = None) -> Any:
    """Space-time diagram of a schedule: one line per rank, one column per step.

    A message of step s is an arrow from (s - 1, src) to (s, dst), labelled with its bytes.

    Parameters
    ----------
    sched : list of dict
        What :func:`schedule` returns.
    p : int
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
        _fig, ax = plt.subplots(figsize=(1.6 + 1.3 * max(n, 1), 0.9 + 0.45 * p))
    for r in range(p):
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
    ax.set_ylim(p - 0.5, -0.5)  # rank 0 on top
    ax.set_xticks(range(max(n, 1) + 1))
    ax.set_yticks(range(p))
    ax.set_yticklabels([f"rank {r}" for r in range(p)])
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
