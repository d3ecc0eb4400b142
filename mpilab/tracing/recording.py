"""Recording around an mpi4py communicator: :class:`TracingComm` and :func:`trace`, which
runs a function on every rank and gathers the schedule (the requests its nonblocking calls
return are :mod:`mpilab.tracing.requests`'s)."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

from .requests import _request_class
from .schedules import schedule, steps

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

    # -- the shapes every wrapper below is one of ------------------------------------------
    def _sending(self, nbytes: int, call: Callable, buf: Any, dest: int, *rest: Any) -> Any:
        """A send of `nbytes` to `dest` recorded, then ``call(buf, dest, *rest)``."""
        self._send(dest, nbytes)
        return call(buf, dest, *rest)

    def _receiving(self, call: Callable, args: tuple, source: int, status: Any) -> Any:
        """``call(*args, status)``, then the receive it completed recorded from `status`."""
        st = status if status is not None else self._MPI.Status()
        out = call(*args, st)
        self._recv(st, source)
        return out

    def _posting(self, call: Callable, buf: Any, source: int, tag: int, nbytes: int) -> Any:
        """A nonblocking receive posted; recorded when its request completes."""
        self._flush()
        return self._wrap(call(buf, source, tag), source, nbytes)

    def _pickled(self, obj) -> int:
        return len(self._MPI.pickle.dumps(obj)) if hasattr(self._MPI, "pickle") else len(
            pickle.dumps(obj, pickle.HIGHEST_PROTOCOL))

    # -- buffers (uppercase) and objects (lowercase, pickled); docstrings: _WRAPPERS -------
    def Send(self, buf, dest, tag=0):  # noqa: N802
        return self._sending(_nbytes(buf), self._comm.Send, buf, dest, tag)

    def Ssend(self, buf, dest, tag=0):  # noqa: N802
        return self._sending(_nbytes(buf), self._comm.Ssend, buf, dest, tag)

    def Isend(self, buf, dest, tag=0):  # noqa: N802
        return self._wrap(self._sending(_nbytes(buf), self._comm.Isend, buf, dest, tag))

    def Issend(self, buf, dest, tag=0):  # noqa: N802
        return self._wrap(self._sending(_nbytes(buf), self._comm.Issend, buf, dest, tag))

    def Recv(self, buf, source=-1, tag=-1, status=None):  # noqa: N802 - -1: ANY_*
        self._flush()
        return self._receiving(self._comm.Recv, (buf, source, tag), source, status)

    def Irecv(self, buf, source=-1, tag=-1):  # noqa: N802
        return self._posting(self._comm.Irecv, buf, source, tag, _nbytes(buf))

    def Sendrecv(self, sendbuf, dest, sendtag=0, recvbuf=None, source=-1, recvtag=-1,  # noqa: N802
                 status=None):
        self._send(dest, _nbytes(sendbuf))
        return self._receiving(self._comm.Sendrecv,
                               (sendbuf, dest, sendtag, recvbuf, source, recvtag), source, status)

    def Sendrecv_replace(self, buf, dest, sendtag=0, source=-1, recvtag=-1,  # noqa: N802
                         status=None):
        self._send(dest, _nbytes(buf))
        return self._receiving(self._comm.Sendrecv_replace,
                               (buf, dest, sendtag, source, recvtag), source, status)

    def send(self, obj, dest, tag=0):
        return self._sending(self._pickled(obj), self._comm.send, obj, dest, tag)

    def ssend(self, obj, dest, tag=0):
        return self._sending(self._pickled(obj), self._comm.ssend, obj, dest, tag)

    def isend(self, obj, dest, tag=0):
        return self._wrap(self._sending(self._pickled(obj), self._comm.isend, obj, dest, tag))

    def recv(self, buf=None, source=-1, tag=-1, status=None):
        self._flush()
        return self._receiving(self._comm.recv, (buf, source, tag), source, status)

    def irecv(self, buf=None, source=-1, tag=-1):
        return self._posting(self._comm.irecv, buf, source, tag, 0)

    def sendrecv(self, sendobj, dest, sendtag=0, recvbuf=None, source=-1, recvtag=-1,
                 status=None):
        self._send(dest, self._pickled(sendobj))
        return self._receiving(self._comm.sendrecv,
                               (sendobj, dest, sendtag, recvbuf, source, recvtag), source, status)


# ---------------------------------------------------------------------------------------
# the wrappers' docstrings, from one template

_SPEC = "An mpi4py buffer specification (``arr``, ``[arr, MPI.INT]``, ...)."
_PICKLE_BUF = ("buffer, optional", "Where mpi4py may receive the pickle (None: memory of its own).")
#: A parameter's entry in a wrapper's docstring: key -> (name, type, description).
_PARAMS = {
    "buf": ("buf", "buffer or list", _SPEC),
    "buf<": ("buf", "buffer or list", _SPEC + " Received into."),
    "buf>": ("buf", "buffer or list",
             _SPEC + " Not to be changed before the request completes."),
    "buf<>": ("buf", "buffer or list", _SPEC + " Sent, then received into."),
    "sendbuf": ("sendbuf", "buffer or list", _SPEC + " Sent."),
    "recvbuf": ("recvbuf", "buffer or list", _SPEC + " Received into."),
    "pbuf": ("buf",) + _PICKLE_BUF,
    "precvbuf": ("recvbuf",) + _PICKLE_BUF,
    "obj": ("obj", "object", "Any picklable object."),
    "sendobj": ("sendobj", "object", "Any picklable object, sent."),
    "dest": ("dest", "int", "The receiving rank (``MPI.PROC_NULL``: nothing is sent or recorded)."),
    "tag": ("tag", "int, optional", "The message tag (default 0)."),
    "sendtag": ("sendtag", "int, optional", "The message tag (default 0)."),
    "source": ("source", "int, optional",
               "The sending rank (default -1, ``MPI.ANY_SOURCE``); the record names the actual one."),
    "tag?": ("tag", "int, optional", "The tag to match (default -1, ``MPI.ANY_TAG``)."),
    "recvtag": ("recvtag", "int, optional", "The tag to match (default -1, ``MPI.ANY_TAG``)."),
    "status": ("status", "mpi4py.MPI.Status, optional",
               "Filled as mpi4py fills it; None: a status of its own is used."),
}
_REQUEST = ("TracedRequest", "The request, an ``MPI.Request``.")
_OBJECT = ("object", "The object received.")
_SENT = "recorded as a send of `buf`'s bytes to `dest`."
_PAIRED = "recorded as a send to `dest`, then a receive from the sender."
#: Each wrapper's docstring: name -> (what it records, parameters, (returned type, what)).
#: None as the returned pair: ``None``, what the mpi4py call returns.
_WRAPPERS = {
    "Get_rank": ("This rank in the wrapped communicator.", "", ("int", "``comm.Get_rank()``.")),
    "Get_size": ("Number of ranks of the wrapped communicator.", "",
                 ("int", "``comm.Get_size()``.")),
    "Send": ("``comm.Send``, " + _SENT, "buf dest tag", None),
    "Ssend": ("``comm.Ssend`` (synchronous), " + _SENT, "buf dest tag", None),
    "Recv": ("``comm.Recv``, recorded as a receive of the bytes that arrived, from their sender.",
             "buf< source tag? status", None),
    "Sendrecv": ("``comm.Sendrecv``, " + _PAIRED,
                 "sendbuf dest sendtag recvbuf source recvtag status", None),
    "Sendrecv_replace": ("``comm.Sendrecv_replace``, " + _PAIRED,
                         "buf<> dest sendtag source recvtag status", None),
    "Isend": ("``comm.Isend``, recorded as a send when posted.", "buf> dest tag", _REQUEST),
    "Issend": ("``comm.Issend`` (synchronous), recorded as a send when posted.",
               "buf> dest tag", _REQUEST),
    "Irecv": ("``comm.Irecv``; the receive is recorded when the request completes.",
              "buf< source tag?", ("TracedRequest", "The request, an ``MPI.Request`` that "
                                   "records the receive when waited on or tested complete.")),
    "send": ("``comm.send`` (pickled), recorded as a send of the pickle's bytes to `dest`.",
             "obj dest tag", None),
    "ssend": ("``comm.ssend`` (pickled, synchronous), recorded as a send of the pickle's bytes.",
              "obj dest tag", None),
    "recv": ("``comm.recv`` (pickled), recorded as a receive of the pickle's bytes, from its "
             "sender.", "pbuf source tag? status", _OBJECT),
    "sendrecv": ("``comm.sendrecv`` (pickled), " + _PAIRED,
                 "sendobj dest sendtag precvbuf source recvtag status", _OBJECT),
    "isend": ("``comm.isend`` (pickled), recorded as a send of the pickle's bytes when posted.",
              "obj dest tag", _REQUEST),
    "irecv": ("``comm.irecv`` (pickled); the receive is recorded when the request completes.",
              "pbuf source tag?", ("TracedRequest",
                                   "The request; its ``wait`` returns the object received.")),
}


def _wrapper_doc(name: str, summary: str, params: str, returns: tuple | None) -> str:
    """A numpydoc docstring of wrapper `name` from its row of :data:`_WRAPPERS`."""
    lines = [summary, ""]
    if params:
        lines += ["Parameters", "----------"]
        for key in params.split():
            pname, ptype, desc = _PARAMS[key]
            lines += [f"{pname} : {ptype}", f"    {desc}"]
        lines.append("")
    rtype, rdesc = returns or ("None", f"What ``comm.{name}`` returns.")
    lines += ["Returns", "-------", rtype, f"    {rdesc}"]
    return "\n".join(lines)


for _name, _row in _WRAPPERS.items():
    getattr(TracingComm, _name).__doc__ = _wrapper_doc(_name, *_row)
del _name, _row


# ---------------------------------------------------------------------------------------
# one call on every rank, traced


def trace(comm: Any, func: Callable, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Run ``func(TracingComm(comm), *args)`` on every rank of `comm`; gather the schedule.

    Collective: every rank of `comm` must call it. Made for grading harnesses:
    ``run_on_ranks(trace, harness, student_function, ...)`` runs
    ``harness(tracing_comm, student_function, ...)`` on every rank.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator; every rank calls this.
    func : callable
        Called as ``func(tracing_comm, *args, **kwargs)`` on every rank.
    *args
        More positional arguments of `func`.
    **kwargs
        Keyword arguments of `func`.

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
