"""The notebook side: a ping-pong, a forwarded message or a local copy measured on a
running cluster (:class:`mpilab.cluster.MPICluster`), with where it was measured.

:func:`pingpong` and :func:`memcopy` return a pandas DataFrame whose rows carry the
machine, library and run columns (:func:`mpilab.timing.frame`); :func:`forwarding` a
dict.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..timing import context, frame
from .copying import measure_memcopy
from .loops import forwarding_times, measure_pingpong


def _on_world(fn, *args, **kwargs):
    """``fn(COMM_WORLD, *args, **kwargs)`` on an engine (`fn` travels by its module's name)."""
    from mpi4py import MPI

    return fn(MPI.COMM_WORLD, *args, **kwargs)


def pingpong(cluster, sizes: Iterable[int], *, timeout: float = 300, **kwargs):
    """Run :func:`measure_pingpong` on the cluster; a DataFrame with context columns.

    Parameters
    ----------
    cluster : MPICluster
        The running cluster; all its ranks take part (``COMM_WORLD``).
    sizes : iterable of int
        Message sizes, in bytes.
    timeout : float, optional
        Seconds the whole measurement may take (default 300).
    **kwargs
        The options of :func:`measure_pingpong` (``impls``, ``mode``, ``reps``, ...).

    Returns
    -------
    pandas.DataFrame
        Rank 0's records, one row per size and implementation, with the cluster's
        context (:func:`mpilab.timing.frame`).
    """
    recs = cluster.run(_on_world, measure_pingpong, list(sizes), timeout=timeout, **kwargs)[0]
    return frame(recs, {**context(cluster), **cluster.info})


def forwarding(cluster, nbytes: int = 1 << 20, *, reps: int = 15,
               timeout: float = 120) -> dict:
    """Run :func:`forwarding_times` on the cluster: rank 0's times, with the context
    (machine, library, ranks, whether they were oversubscribed) and ``ratio``, the
    forwarded message's time over the resent one's.

    Parameters
    ----------
    cluster : MPICluster
        The running cluster (2 ranks or more).
    nbytes : int, optional
        The large message's size, in bytes (default 1 MiB).
    reps : int, optional
        Repetitions; each time is the fastest (default 15).
    timeout : float, optional
        Seconds the measurement may take (default 120).

    Returns
    -------
    dict
        The context (:func:`mpilab.timing.context`), the cluster's :attr:`~MPICluster.info`, :func:`forwarding_times`'
        results (µs) and ``ratio``.
    """
    got = cluster.run(_on_world, forwarding_times, int(nbytes), int(reps),
                      timeout=timeout)[0]
    got["ratio"] = got["forwarded_us"] / got["resent_us"]
    return {**context(cluster), **cluster.info, **got}


def memcopy(cluster, sizes: Iterable[int], *, timeout: float = 300, **kwargs):
    """Time the local copy on rank 0 alone (the others wait); a DataFrame.

    Parameters
    ----------
    cluster : MPICluster
        The running cluster; only its rank 0 copies.
    sizes : iterable of int
        Bytes copied, multiples of 8.
    timeout : float, optional
        Seconds the whole measurement may take (default 300).
    **kwargs
        The options of :func:`measure_memcopy` (``method``, ``reps``, ``min_time``).

    Returns
    -------
    pandas.DataFrame
        One row per size, with the cluster's context; ``ranks`` is 1 and
        ``oversubscribed`` False (one process copied).

    Raises
    ------
    ValueError
        A size that is negative or not a multiple of 8.
    """
    sizes = [int(n) for n in sizes]
    bad = [n for n in sizes if n < 0 or n % 8]
    if bad:
        raise ValueError(f"copy sizes are whole doubles: multiples of 8 bytes, got {bad}")
    recs = cluster.run(_on_self_rank0, sizes, timeout=timeout, **kwargs)[0]
    ctx = {**context(cluster), **cluster.info}
    df = frame(recs, ctx)
    df["ranks"] = 1
    df["oversubscribed"] = False
    return df


def _on_self_rank0(sizes, **kwargs):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    recs = err = None
    if comm.rank == 0:
        try:
            recs = measure_memcopy(MPI.COMM_SELF, sizes, **kwargs)
        except Exception as exc:  # every rank must leave the bcast, and raise alike
            err = exc
    recs, err = comm.bcast((recs, err), root=0)
    if err is not None:
        raise err
    return recs

