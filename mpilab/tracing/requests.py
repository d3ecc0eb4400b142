"""The requests :class:`~mpilab.tracing.TracingComm`'s nonblocking calls return.

A :class:`TracedRequest` is an ``MPI.Request`` that records its receive in the
communicator's events when it completes (``Wait``, ``Test``, ``Waitall`` and their
lowercase forms). The class becomes an ``MPI.Request`` subclass on first use
(:func:`_request_class`), so that importing :mod:`mpilab.tracing` needs no MPI.
"""

from __future__ import annotations

__all__ = ["TracedRequest"]


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
            """``MPI.Request.Wait``, then the receive recorded."""
            st = status if status is not None else MPI.Status()
            out = MPI.Request.Wait(self, st)
            self._done(st)
            return out

        def wait(self, status=None):
            """``MPI.Request.wait``, then the receive recorded."""
            st = status if status is not None else MPI.Status()
            out = MPI.Request.wait(self, st)
            self._done(st)
            return out

        def Test(self, status=None):  # noqa: N802
            """``MPI.Request.Test``; the receive recorded if it completed."""
            st = status if status is not None else MPI.Status()
            flag = MPI.Request.Test(self, st)
            if flag:
                self._done(st)
            return flag

        def test(self, status=None):
            """``MPI.Request.test``; the receive recorded if it completed."""
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
            """``MPI.Request.Waitall``, then every traced receive recorded."""
            return cls._all(MPI.Request.Waitall, requests, statuses)

        @classmethod
        def waitall(cls, requests, statuses=None):
            """``MPI.Request.waitall``, then every traced receive recorded."""
            return cls._all(MPI.Request.waitall, requests, statuses)

    TracedRequest.__module__ = __name__
    TracedRequest.__qualname__ = "TracedRequest"
    return TracedRequest
