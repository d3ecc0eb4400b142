"""Run, trace and time one collective algorithm of :mod:`mpilab.collectives.algorithms`.

Functions taking ``comm`` are collective: every rank calls them (under ``mpiexec`` or on
the engines, ``cluster.run(collectives.trace, None, "allgather", "bruck", 1024)``;
``comm=None`` means ``MPI.COMM_WORLD``) and every rank gets the same answer. The
algorithms are C on point-to-point messages (``kernels/collectives``,
:func:`kernel_module`); ``"library"`` as the algorithm means MPI's own collective.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from .. import runtime
from .algorithms import ALGORITHMS, LIBRARY

__all__ = ["kernel_module", "run", "events", "trace", "calibrate", "time_alg"]


def _comm(comm):
    if comm is None:
        from mpi4py import MPI

        return MPI.COMM_WORLD
    return comm


def kernel_module():
    """The compiled collectives kernel (``mpilab.kernels.collectives``), imported here.

    Returns
    -------
    module
        ``mpilab.kernels.collectives``.
    """
    from ..kernels import collectives

    return collectives


def run(comm, op: str, alg: str, sendbuf=None, recvbuf=None, *, root: int = 0,
        redop: str = "sum"):
    """Run one collective with a chosen algorithm (collective over `comm`).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm or None
        Communicator (None: ``COMM_WORLD``).
    op : str
        One of :data:`OPS`.
    alg : str
        An algorithm of ``ALGORITHMS[op]``, or ``"library"`` for MPI's own collective.
    sendbuf, recvbuf : numpy.ndarray or None
        As MPI's collective of the same name, with the per-rank block size taken from
        the buffers: bcast works in `recvbuf`; scatter sends ``p`` blocks of the root's
        `sendbuf`; gather and allgather fill ``p`` blocks of `recvbuf`. Buffers only the
        root uses may be None on the other ranks.
    root : int
        Root rank of bcast, reduce, scatter and gather.
    redop : {"sum", "max", "min", "prod"}
        Reduction of reduce and allreduce, applied in C on the typed data.

    Returns
    -------
    numpy.ndarray or None
        `recvbuf`, filled (None for barrier).

    Raises
    ------
    ValueError
        On every rank alike: an unknown op or algorithm, an inadmissible process count
        (recursive doubling allgather needs a power of two, ...), a bad root, or a bad
        buffer on any rank.
    """
    kernel_module().run(_comm(comm), op, alg, sendbuf, recvbuf, root=root, redop=redop)
    return recvbuf


def events(comm, op: str, alg: str, nbytes: int, *, root: int = 0) -> list[list[tuple]]:
    """Every rank's messages ``(kind, peer, nbytes)`` for one call on `nbytes` per block.

    Recorded in C from the messages the algorithm really sends and receives, in program
    order (a Sendrecv gives its send, then its receive); collected on every rank.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm or None
        Communicator (None: ``COMM_WORLD``); every rank calls this.
    op : str
        One of :data:`OPS`.
    alg : str
        An algorithm of ``ALGORITHMS[op]``.
    nbytes : int
        Message size, or per-rank block (scatter, gather, allgather), in bytes.
    root : int, optional
        Root rank of bcast, reduce, scatter and gather (default 0).

    Returns
    -------
    list of list of tuple
        ``events[r]``: rank r's ``(kind, peer, nbytes)``, `kind` ``"send"`` or
        ``"recv"``; the same on every rank.
    """
    comm = _comm(comm)
    mine = kernel_module().trace(comm, op, alg, nbytes, dtype="uint8", root=root)
    return comm.allgather(mine)


def trace(comm, op: str, alg: str, nbytes: int, *, root: int = 0) -> list[dict]:
    """The message schedule of one call: ``{"step", "src", "dst", "bytes"}`` per message.

    Steps come from Lamport clocks over the traced messages
    (:func:`mpilab.tracing.schedule`); ``mpilab.tracing.steps(trace(...))`` is the
    number of communication steps. Collective; every rank gets the same schedule.

    Parameters
    ----------
    comm, op, alg, nbytes, root
        As :func:`events`.

    Returns
    -------
    list of dict
        One ``{"step", "src", "dst", "bytes"}`` per message, sorted by step (from 1).
    """
    from .. import tracing

    return tracing.schedule(events(comm, op, alg, nbytes, root=root))


def _library_label(op: str) -> str:
    """``library:<alg>`` when this process's environment forces one, else library:default."""
    env = os.environ
    if runtime.selected_library() == "mpich":
        var = os.environ.get(f"MPIR_CVAR_{op.upper()}_INTRA_ALGORITHM", "auto")
        for name, spec in ALGORITHMS[op].items():
            if spec.mpich and spec.mpich.get(f"MPIR_CVAR_{op.upper()}_INTRA_ALGORITHM") == var:
                return f"library:{name}"
        return "library:default"
    if env.get("OMPI_MCA_coll_tuned_use_dynamic_rules") == "1":
        forced = env.get(f"OMPI_MCA_coll_tuned_{op}_algorithm", "0")
        for name, spec in ALGORITHMS[op].items():
            if str(spec.ompi) == forced:
                return f"library:{name}"
        if env.get("OMPI_MCA_coll_tuned_dynamic_rules_filename"):
            return "library:tuned"
    return "library:default"


def calibrate(comm, op: str, alg: str, nbytes: int, *, min_time: float = 0.005,
              max_iters: int = 100_000, root: int = 0) -> int:
    """Calls per timed repetition for one repetition to last about `min_time` s (collective).

    Parameters
    ----------
    comm, op, nbytes, root
        As :func:`events`.
    alg : str
        An algorithm of ``ALGORITHMS[op]``, or ``"library"`` for MPI's own.
    min_time : float, optional
        Seconds one repetition should last (default 0.005).
    max_iters : int, optional
        The most calls returned (default 100,000).

    Returns
    -------
    int
        Calls per repetition, between 1 and `max_iters`; the same on every rank (the
        kernel times the slowest rank).
    """
    k = kernel_module()
    iters = 1
    while True:
        t = k.time(_comm(comm), op, alg, nbytes, root=root, warmup=1, iters=iters, reps=3).min()
        per_rep = t * iters
        if per_rep >= min_time / 4 or iters >= max_iters:
            return int(min(max_iters, max(1, round(iters * min_time / max(per_rep, 1e-9)))))
        iters = min(max_iters, iters * 8)


def time_alg(comm, op: str, alg: str, sizes: Iterable[int], *, reps: int = 7,
             iters: int | dict | None = None, warmup: int | None = None,
             min_time: float = 0.005, root: int = 0, impl: str | None = None,
             separated: bool = False) -> list[dict]:
    """Time `op` with `alg` at each block size (bytes), inside C; one record per size.

    Collective. The protocol is the course's (``mpilab_timing.h``): warm-up calls,
    barrier, the timed loop in C, the slowest rank's time, `reps` repetitions. `iters`
    (calls per repetition, per size with a dict) is calibrated to `min_time` when None.
    The calls of the loop run back to back, so those of a rooted collective (bcast,
    reduce, scatter, gather) may overlap and the loop then times a throughput; with
    `separated` an untimed barrier precedes every call and each rank sums the time of
    its calls only (OSU's way), which times one call's latency. Records say which in
    ``timing`` (``back-to-back`` or ``separated``).

    Parameters
    ----------
    comm, op, alg
        As :func:`calibrate`.
    sizes : iterable of int
        Message sizes, or per-rank blocks (scatter, gather, allgather), in bytes.
    reps : int, optional
        Timed repetitions per size (default 7).
    iters : int or dict of int to int, optional
        Calls per repetition, or per size; None (or a size missing from the dict):
        calibrated with :func:`calibrate`.
    warmup : int, optional
        Untimed calls first; None: as many as `iters`, 20 at most.
    min_time : float, optional
        Seconds one repetition should last when calibrated (default 0.005).
    root : int, optional
        As :func:`events`.
    impl : str, optional
        The records' ``impl`` label instead of the one described below.
    separated : bool, optional
        True: an untimed barrier before every call (latency); False: calls back to
        back (throughput for rooted collectives).

    Returns
    -------
    list of dict
        :func:`mpilab.timing.record` records with ``impl`` (``mpilab:<alg>``, or for
        ``alg="library"`` ``library:default`` / ``library:<forced alg>`` as the
        environment says), ``op``, ``alg``, ``ranks``, ``size_bytes`` (per-rank block),
        ``iters``, ``t_us_min``, ``t_us_median``, ...
    """
    from ..timing import record

    comm = _comm(comm)
    k = kernel_module()
    label = impl or (_library_label(op) if alg == LIBRARY else f"mpilab:{alg}")
    out = []
    for n in sizes:
        n = int(n)
        it = iters.get(n) if isinstance(iters, dict) else iters
        if it is None:
            it = calibrate(comm, op, alg, n, min_time=min_time, root=root)
        w = warmup if warmup is not None else max(1, min(it, 20))
        t = k.time(comm, op, alg, n, root=root, warmup=w, iters=it, reps=reps,
                   separated=separated)
        out.append(record(list(t), size_bytes=n, impl=label, op=op, alg=alg,
                          ranks=comm.Get_size(), iters=it,
                          timing="separated" if separated else "back-to-back"))
    return out
