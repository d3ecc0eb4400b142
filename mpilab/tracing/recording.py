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
        """This rank in the wrapped communicator.

        Returns
        -------
        int
            ``comm.Get_rank()``.
        """
        return self._comm.Get_rank()

    def Get_size(self) -> int:  # noqa: N802
        """Number of ranks of the wrapped communicator.

        Returns
        -------
        int
            ``comm.Get_size()``.
        """
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
        """``comm.Send``, recorded as a send of `buf`'s bytes to `dest`.

        Parameters
        ----------
        buf : buffer or list
            An mpi4py buffer specification (``arr``, ``[arr, MPI.INT]``, ...).
        dest : int
            The receiving rank (``MPI.PROC_NULL``: nothing is sent or recorded).
        tag : int, optional
            The message tag (default 0).

        Returns
        -------
        None
            What ``comm.Send`` returns.
        """
        self._send(dest, _nbytes(buf))
        return self._comm.Send(buf, dest, tag)

    def Ssend(self, buf, dest, tag=0):  # noqa: N802
        """``comm.Ssend`` (synchronous), recorded as a send of `buf`'s bytes to `dest`.

        Parameters
        ----------
        buf : buffer or list
            An mpi4py buffer specification (``arr``, ``[arr, MPI.INT]``, ...).
        dest : int
            The receiving rank (``MPI.PROC_NULL``: nothing is sent or recorded).
        tag : int, optional
            The message tag (default 0).

        Returns
        -------
        None
            What ``comm.Ssend`` returns.
        """
        self._send(dest, _nbytes(buf))
        return self._comm.Ssend(buf, dest, tag)

    def Recv(self, buf, source=-1, tag=-1, status=None):  # noqa: N802 - -1: ANY_*
        """``comm.Recv``, recorded as a receive of the bytes that arrived, from their sender.

        Parameters
        ----------
        buf : buffer or list
            An mpi4py buffer specification (``arr``, ``[arr, MPI.INT]``, ...). Received into.
        source : int, optional
            The sending rank (default -1, ``MPI.ANY_SOURCE``); the record names the actual one.
        tag : int, optional
            The tag to match (default -1, ``MPI.ANY_TAG``).
        status : mpi4py.MPI.Status, optional
            Filled as mpi4py fills it; None: a status of its own is used.

        Returns
        -------
        None
            What ``comm.Recv`` returns.
        """
        self._flush()
        st = status if status is not None else self._MPI.Status()
        out = self._comm.Recv(buf, source, tag, st)
        self._recv(st, source)
        return out

    def Sendrecv(self, sendbuf, dest, sendtag=0, recvbuf=None, source=-1, recvtag=-1,  # noqa: N802
                 status=None):
        """``comm.Sendrecv``, recorded as a send to `dest`, then a receive from the sender.

        Parameters
        ----------
        sendbuf : buffer or list
            An mpi4py buffer specification (``arr``, ``[arr, MPI.INT]``, ...). Sent.
        dest : int
            The receiving rank (``MPI.PROC_NULL``: nothing is sent or recorded).
        sendtag : int, optional
            The message tag (default 0).
        recvbuf : buffer or list
            An mpi4py buffer specification (``arr``, ``[arr, MPI.INT]``, ...). Received into.
        source : int, optional
            The sending rank (default -1, ``MPI.ANY_SOURCE``); the record names the actual one.
        recvtag : int, optional
            The tag to match (default -1, ``MPI.ANY_TAG``).
        status : mpi4py.MPI.Status, optional
            Filled as mpi4py fills it; None: a status of its own is used.

        Returns
        -------
        None
            What ``comm.Sendrecv`` returns.
        """
        self._send(dest, _nbytes(sendbuf))
        st = status if status is not None else self._MPI.Status()
        out = self._comm.Sendrecv(sendbuf, dest, sendtag, recvbuf, source, recvtag, st)
        self._recv(st, source)
        return out

    def Sendrecv_replace(self, buf, dest, sendtag=0, source=-1, recvtag=-1,  # noqa: N802
                         status=None):
        """``comm.Sendrecv_replace``, recorded as a send to `dest`, then a receive from the sender.

        Parameters
        ----------
        buf : buffer or list
            An mpi4py buffer specification (``arr``, ``[arr, MPI.INT]``, ...). Sent, then received into.
        dest : int
            The receiving rank (``MPI.PROC_NULL``: nothing is sent or recorded).
        sendtag : int, optional
            The message tag (default 0).
        source : int, optional
            The sending rank (default -1, ``MPI.ANY_SOURCE``); the record names the actual one.
        recvtag : int, optional
            The tag to match (default -1, ``MPI.ANY_TAG``).
        status : mpi4py.MPI.Status, optional
            Filled as mpi4py fills it; None: a status of its own is used.

        Returns
        -------
        None
            What ``comm.Sendrecv_replace`` returns.
        """
        self._send(dest, _nbytes(buf))
        st = status if status is not None else self._MPI.Status()
        out = self._comm.Sendrecv_replace(buf, dest, sendtag, source, recvtag, st)
        self._recv(st, source)
        return out

    def Isend(self, buf, dest, tag=0):  # noqa: N802
        """``comm.Isend``, recorded as a send when posted.

        Parameters
        ----------
        buf : buffer or list
            An mpi4py buffer specification (``arr``, ``[arr, MPI.INT]``, ...). Not to be changed before the request completes.
        dest : int
            The receiving rank (``MPI.PROC_NULL``: nothing is sent or recorded).
        tag : int, optional
            The message tag (default 0).

        Returns
        -------
        TracedRequest
            The request, an ``MPI.Request``.
        """
        self._send(dest, _nbytes(buf))
        return self._wrap(self._comm.Isend(buf, dest, tag))

    def Issend(self, buf, dest, tag=0):  # noqa: N802
        """``comm.Issend`` (synchronous), recorded as a send when posted.

        Parameters
        ----------
        buf : buffer or list
            An mpi4py buffer specification (``arr``, ``[arr, MPI.INT]``, ...). Not to be changed before the request completes.
        dest : int
            The receiving rank (``MPI.PROC_NULL``: nothing is sent or recorded).
        tag : int, optional
            The message tag (default 0).

        Returns
        -------
        TracedRequest
            The request, an ``MPI.Request``.
        """
        self._send(dest, _nbytes(buf))
        return self._wrap(self._comm.Issend(buf, dest, tag))

    def Irecv(self, buf, source=-1, tag=-1):  # noqa: N802
        """``comm.Irecv``; the receive is recorded when the request completes.

        Parameters
        ----------
        buf : buffer or list
            An mpi4py buffer specification (``arr``, ``[arr, MPI.INT]``, ...). Received into.
        source : int, optional
            The sending rank (default -1, ``MPI.ANY_SOURCE``); the record names the actual one.
        tag : int, optional
            The tag to match (default -1, ``MPI.ANY_TAG``).

        Returns
        -------
        TracedRequest
            The request, an ``MPI.Request`` that records the receive when waited on or tested complete.
        """
        self._flush()
        return self._wrap(self._comm.Irecv(buf, source, tag), source, _nbytes(buf))

    # -- objects (lowercase, pickled) ----------------------------------------------------
    def _pickled(self, obj) -> int:
        return len(self._MPI.pickle.dumps(obj)) if hasattr(self._MPI, "pickle") else len(
            pickle.dumps(obj, pickle.HIGHEST_PROTOCOL))

    def send(self, obj, dest, tag=0):
        """``comm.send`` (pickled), recorded as a send of the pickle's bytes to `dest`.

        Parameters
        ----------
        obj : object
            Any picklable object.
        dest : int
            The receiving rank (``MPI.PROC_NULL``: nothing is sent or recorded).
        tag : int, optional
            The message tag (default 0).

        Returns
        -------
        None
            What ``comm.send`` returns.
        """
        self._send(dest, self._pickled(obj))
        return self._comm.send(obj, dest, tag)

    def ssend(self, obj, dest, tag=0):
        """``comm.ssend`` (pickled, synchronous), recorded as a send of the pickle's bytes.

        Parameters
        ----------
        obj : object
            Any picklable object.
        dest : int
            The receiving rank (``MPI.PROC_NULL``: nothing is sent or recorded).
        tag : int, optional
            The message tag (default 0).

        Returns
        -------
        None
            What ``comm.ssend`` returns.
        """
        self._send(dest, self._pickled(obj))
        return self._comm.ssend(obj, dest, tag)

    def recv(self, buf=None, source=-1, tag=-1, status=None):
        """``comm.recv`` (pickled), recorded as a receive of the pickle's bytes, from its sender.

        Parameters
        ----------
        buf : buffer, optional
            Where mpi4py may receive the pickle (None: memory of its own).
        source : int, optional
            The sending rank (default -1, ``MPI.ANY_SOURCE``); the record names the actual one.
        tag : int, optional
            The tag to match (default -1, ``MPI.ANY_TAG``).
        status : mpi4py.MPI.Status, optional
            Filled as mpi4py fills it; None: a status of its own is used.

        Returns
        -------
        object
            The object received.
        """
        self._flush()
        st = status if status is not None else self._MPI.Status()
        out = self._comm.recv(buf, source, tag, st)
        self._recv(st, source)
        return out

    def sendrecv(self, sendobj, dest, sendtag=0, recvbuf=None, source=-1, recvtag=-1,
                 status=None):
        """``comm.sendrecv`` (pickled), recorded as a send to `dest`, then a receive from the sender.

        Parameters
        ----------
        sendobj : object
            Any picklable object, sent.
        dest : int
            The receiving rank (``MPI.PROC_NULL``: nothing is sent or recorded).
        sendtag : int, optional
            The message tag (default 0).
        recvbuf : buffer, optional
            Where mpi4py may receive the pickle (None: memory of its own).
        source : int, optional
            The sending rank (default -1, ``MPI.ANY_SOURCE``); the record names the actual one.
        recvtag : int, optional
            The tag to match (default -1, ``MPI.ANY_TAG``).
        status : mpi4py.MPI.Status, optional
            Filled as mpi4py fills it; None: a status of its own is used.

        Returns
        -------
        object
            The object received.
        """
        self._send(dest, self._pickled(sendobj))
        st = status if status is not None else self._MPI.Status()
        out = self._comm.sendrecv(sendobj, dest, sendtag, recvbuf, source, recvtag, st)
        self._recv(st, source)
        return out

    def isend(self, obj, dest, tag=0):
        """``comm.isend`` (pickled), recorded as a send of the pickle's bytes when posted.

        Parameters
        ----------
        obj : object
            Any picklable object.
        dest : int
            The receiving rank (``MPI.PROC_NULL``: nothing is sent or recorded).
        tag : int, optional
            The message tag (default 0).

        Returns
        -------
        TracedRequest
            The request, an ``MPI.Request``.
        """
        self._send(dest, self._pickled(obj))
        return self._wrap(self._comm.isend(obj, dest, tag))

    def irecv(self, buf=None, source=-1, tag=-1):
        """``comm.irecv`` (pickled); the receive is recorded when the request completes.

        Parameters
        ----------
        buf : buffer, optional
            Where mpi4py may receive the pickle (None: memory of its own).
        source : int, optional
            The sending rank (default -1, ``MPI.ANY_SOURCE``); the record names the actual one.
        tag : int, optional
            The tag to match (default -1, ``MPI.ANY_TAG``).

        Returns
        -------
        TracedRequest
            The request; its ``wait`` returns the object received.
        """
        self._flush()
        return self._wrap(self._comm.irecv(buf, source, tag), source, 0)


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
